//! The functions C programs call, with glibc's signatures.
//!
//! Each decodes its arguments and hands them to the active backend; none
//! reads or writes through a caller's pointer itself. Results come back the
//! glibc way: the value, or -1 with `errno` set.
//!
//! None of glibc's four is a cancellation point, and neither is any of
//! these: a thread's pending deferred cancel waits for its next cancellation
//! point after the call, as with the kernel's calls (see [`uncancellable`]).

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

/// Runs one call for C and returns the glibc way, with cancellation
/// disabled ([`uncancellable`]). A panic would be a bug in the library, and
/// unwinding into C frames is undefined behaviour: the call fails with
/// `EINVAL` instead, the kernel's answer to a request it cannot make sense
/// of.
///
/// A call that succeeds leaves `errno` as the caller had it, as the kernel's
/// wrappers do: on the way to success the library makes system calls that
/// may fail (an `open` that finds the file already there, a futex wait that
/// finds its word already changed), and a program may store 0 in `errno`
/// before a call whose result cannot tell failure apart and read it after.
fn guarded(call: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    guarded_keeping(Errno::last(), call)
}

/// [`guarded`], restoring `callers` (the `errno` the caller had when it
/// called) on success.
fn guarded_keeping(callers: Errno, call: impl FnOnce() -> Result<c_int, Errno>) -> c_int {
    uncancellable(|| {
        let result = catch_unwind(AssertUnwindSafe(call)).unwrap_or(Err(Errno::EINVAL));
        if result.is_ok() {
            callers.store();
        }
        to_c(result)
    })
}

/// [`guarded`] for `semop` and `semtimedop`: `at_once` first, the part of
/// the call that reaches no cancellation point
/// ([`Backend::operate_at_once`]), with cancellation as the caller has it;
/// `call`, the whole call, only if that did not finish it.
///
/// Switching cancellation off and on again costs two calls into glibc,
/// each a compare-and-swap on the thread's cancellation word: 5.5 ns a
/// call in thread CPU time on the 2-core AMD EPYC guest, where a lock-free
/// `semop` through the library cost 27 ns; around every call, a down + up
/// pair went from 54 to 65 ns. So the hot path, one operation done
/// lock-free on a set this thread used last, pays nothing (and skips the
/// general path's bookkeeping: 37 ns a pair), and every other path (a miss
/// in the thread's recent sets, a sleep, a checked copy, an error) pays
/// the switch once. (An asynchronous cancel may still land in the lock-free
/// attempt: POSIX leaves that undefined, `semop` not being
/// async-cancel-safe.)
#[inline(always)]
fn guarded_op(
    at_once: impl FnOnce() -> bool,
    call: impl FnOnce() -> Result<c_int, Errno>,
) -> c_int {
    let callers = Errno::last();
    // A panic here (a bug) lets `call` have its go, under `guarded`.
    if catch_unwind(AssertUnwindSafe(at_once)).unwrap_or(false) {
        callers.store();
        return 0;
    }
    // `at_once` may have made a system call that failed (the capability
    // check when a handle's rights are refilled): the caller's errno is
    // the one read before it.
    guarded_keeping(callers, call)
}

/// glibc's `PTHREAD_CANCEL_DISABLE` (the `libc` crate has none for Linux).
const PTHREAD_CANCEL_DISABLE: c_int = 1;

extern "C-unwind" {
    /// Declared here, not taken from `libc`, which says it never unwinds:
    /// it does when it enables cancellation again in a thread whose
    /// cancellation is asynchronous and a cancel came meanwhile (glibc acts
    /// on it at once, with a forced unwind out of this call).
    fn pthread_setcancelstate(state: c_int, oldstate: *mut c_int) -> c_int;
}

/// Runs `call` with the calling thread's cancellation disabled, then puts
/// back the state the caller had.
///
/// glibc's `semget`, `semop`, `semtimedop` and `semctl` are not
/// cancellation points, but the library's work reaches functions that are:
/// `open` (set files, `/proc`, `std::thread::available_parallelism` when a
/// call sleeps), `getrandom` (a new set's id), `nanosleep`, the checked
/// copies' `read` and `write` on a pipe. A deferred cancel pending there
/// would start glibc's forced unwind in the middle of the call, which
/// `guarded`'s `catch_unwind` swallows, and glibc aborts the process
/// ("exception not rethrown"). Disabled, the cancel stays pending until the
/// caller's next cancellation point, as with the kernel's calls; a caller
/// that had disabled cancellation itself keeps it disabled.
///
/// Enabling cancellation again acts at once on a cancel that came meanwhile
/// if the thread's cancellation is asynchronous (as the kernel's call would
/// have been cancelled while it slept): glibc unwinds out of
/// `pthread_setcancelstate` through this frame and the exported function's,
/// which are `C-unwind` for that reason, to the caller's. So the state is
/// put back after `guarded`'s `catch_unwind`, and last, with nothing left
/// here to drop: a forced unwind may only cross frames without pending
/// destructors.
fn uncancellable(call: impl FnOnce() -> c_int) -> c_int {
    let mut old = 0;
    // SAFETY: a valid state and a pointer to our own `old`; the call cannot
    // unwind while it disables.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let done = call();
    // SAFETY: the state glibc gave back, so valid; no out-pointer.
    unsafe { pthread_setcancelstate(old, core::ptr::null_mut()) };
    done
}

/// glibc's `int semget(key_t key, int nsems, int semflg)`.
#[no_mangle]
pub extern "C-unwind" fn semget(key: key_t, nsems: c_int, semflg: c_int) -> c_int {
    guarded(|| active().get(key, nsems, semflg))
}

/// glibc's `int semop(int semid, struct sembuf *sops, size_t nsops)`.
#[no_mangle]
pub extern "C-unwind" fn semop(semid: c_int, sops: *mut sembuf, nsops: size_t) -> c_int {
    let sops = UserPtr::new(sops as usize);
    guarded_op(
        || active().operate_at_once(semid, sops, nsops, None),
        || active().operate(semid, sops, nsops, None).map(|()| 0),
    )
}

/// glibc's `int semtimedop(int semid, struct sembuf *sops, size_t nsops,
/// const struct timespec *timeout)`; a null `timeout` waits for ever.
#[no_mangle]
pub extern "C-unwind" fn semtimedop(
    semid: c_int,
    sops: *mut sembuf,
    nsops: size_t,
    timeout: *const timespec,
) -> c_int {
    let sops = UserPtr::new(sops as usize);
    let timeout = (!timeout.is_null()).then(|| UserPtr::new(timeout as usize));
    guarded_op(
        || active().operate_at_once(semid, sops, nsops, timeout),
        || active().operate(semid, sops, nsops, timeout).map(|()| 0),
    )
}

/// `semctl` with its fourth argument already taken out of the variadic list:
/// `arg` is the `union semun` as one word (zero for commands that take
/// none). The C shim calls this; programs that would rather not go through a
/// variadic call may too.
#[no_mangle]
pub extern "C-unwind" fn ksync_sysv_semctl(
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
