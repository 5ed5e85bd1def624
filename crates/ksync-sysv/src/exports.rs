//! The functions C programs call, with glibc's signatures.
//!
//! Each decodes its arguments and hands them to the active backend; none
//! reads or writes through a caller's pointer itself. Results come back the
//! glibc way: the value, or -1 with `errno` set.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use libc::{c_int, c_ulong, key_t, sembuf, size_t, timespec};

use crate::backend::Backend;
use crate::command::Command;
use crate::errno::{to_c, Errno};
use crate::kernel::KernelSets;
use crate::shared::SharedSets;
use crate::user::UserPtr;

/// The environment variable that picks the backend: `kernel` for the
/// kernel's own sets (the pass-through), anything else or unset for ksync's
/// process-shared sets.
pub const BACKEND_VAR: &str = "KSYNC_SYSV_BACKEND";

/// The backend every exported function uses, chosen once per process from
/// [`BACKEND_VAR`]: reading the environment on every call would cost a lock,
/// and a plain reference to a static makes the choice one load on the hot
/// path.
fn active() -> &'static dyn Backend {
    static KERNEL: KernelSets = KernelSets;
    static SHARED: SharedSets = SharedSets;
    static CHOSEN: OnceLock<&'static dyn Backend> = OnceLock::new();
    *CHOSEN.get_or_init(|| match std::env::var_os(BACKEND_VAR) {
        Some(v) if v == "kernel" => &KERNEL,
        _ => &SHARED,
    })
}

/// Runs one call for C and returns the glibc way. A panic would be a bug in
/// the library, and unwinding into C frames is undefined behaviour: the call
/// fails with `EINVAL` instead, the kernel's answer to a request it cannot
/// make sense of.
///
/// A call that succeeds leaves `errno` as the caller had it, as the kernel's
/// wrappers do: on the way to success the library makes system calls that
/// may fail (an `open` that finds the file already there, a futex wait that
/// finds its word already changed), and a program may store 0 in `errno`
/// before a call whose result cannot tell failure apart and read it after.
fn guarded(call: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    let callers = Errno::last();
    let result = catch_unwind(AssertUnwindSafe(call)).unwrap_or(Err(Errno::EINVAL));
    if result.is_ok() {
        callers.store();
    }
    to_c(result)
}

/// glibc's `int semget(key_t key, int nsems, int semflg)`.
#[no_mangle]
pub extern "C" fn semget(key: key_t, nsems: c_int, semflg: c_int) -> c_int {
    guarded(|| active().get(key, nsems, semflg))
}

/// glibc's `int semop(int semid, struct sembuf *sops, size_t nsops)`.
#[no_mangle]
pub extern "C" fn semop(semid: c_int, sops: *mut sembuf, nsops: size_t) -> c_int {
    let sops = UserPtr::new(sops as usize);
    guarded(|| active().operate(semid, sops, nsops, None).map(|()| 0))
}

/// glibc's `int semtimedop(int semid, struct sembuf *sops, size_t nsops,
/// const struct timespec *timeout)`; a null `timeout` waits for ever.
#[no_mangle]
pub extern "C" fn semtimedop(
    semid: c_int,
    sops: *mut sembuf,
    nsops: size_t,
    timeout: *const timespec,
) -> c_int {
    let sops = UserPtr::new(sops as usize);
    let timeout = (!timeout.is_null()).then(|| UserPtr::new(timeout as usize));
    guarded(|| active().operate(semid, sops, nsops, timeout).map(|()| 0))
}

/// `semctl` with its fourth argument already taken out of the variadic list:
/// `arg` is the `union semun` as one word (zero for commands that take
/// none). The C shim calls this; programs that would rather not go through a
/// variadic call may too.
#[no_mangle]
pub extern "C" fn ksync_sysv_semctl(
    semid: c_int,
    semnum: c_int,
    cmd: c_int,
    arg: c_ulong,
) -> c_int {
    guarded(|| {
        Command::decode(cmd, arg).and_then(|command| active().control(semid, semnum, command))
    })
}

extern "C" {
    /// In `semctl_shim.c`: takes the `union semun` out of the variadic list
    /// the way glibc does and calls [`ksync_sysv_semctl`].
    fn ksync_sysv_semctl_variadic(semid: c_int, semnum: c_int, cmd: c_int, ...) -> c_int;
}

// glibc's `int semctl(int semid, int semnum, int cmd, ...)`.
//
// The shim in C cannot be exported under this name itself: rustc links a
// cdylib with a version script that keeps only Rust's own `#[no_mangle]`
// symbols global, so a C function from a static library stays hidden. A naked
// Rust function is exported like any other, and one jump hands the caller's
// untouched argument registers (including x86-64's `%al` vector count and the
// variadic stack area) to the shim, which then reads them as a variadic
// callee should.

/// glibc's `int semctl(int semid, int semnum, int cmd, ...)`: jumps to the C
/// shim, which reads the optional `union semun`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn semctl() {
    core::arch::naked_asm!("jmp {shim}", shim = sym ksync_sysv_semctl_variadic)
}

/// glibc's `int semctl(int semid, int semnum, int cmd, ...)`: branches to the
/// C shim, which reads the optional `union semun`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn semctl() {
    core::arch::naked_asm!("b {shim}", shim = sym ksync_sysv_semctl_variadic)
}
