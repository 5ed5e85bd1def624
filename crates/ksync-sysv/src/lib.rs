//! `libksync_sysv.so`: glibc's System V semaphore calls — `semget`, `semop`,
//! `semtimedop` and `semctl` — with glibc's ABI, for C programs that are never
//! rebuilt: `LD_PRELOAD=.../libksync_sysv.so program`, or linked with
//! `-lksync_sysv`.
//!
//! # What it does
//!
//! Programs get ksync's process-shared System V sets
//! ([`ksync::sem::SharedSemSet`]): a set is a file `sem.<id>` in
//! `$KSYNC_SEM_DIR` (default `/dev/shm/ksync-sem`), mapped by every process
//! that uses it, and an uncontended `semop` of one operation without
//! `SEM_UNDO` makes no system call. `KSYNC_SYSV_BACKEND=kernel` (read once,
//! at the first call) hands every call to the kernel's own sets instead.
//!
//! - `exports`: the four functions with glibc's signatures,
//!   `semctl`'s variadic `union semun` included (read by a small C shim,
//!   since stable Rust cannot define a C-variadic function);
//! - [`command`]: every `semctl` command glibc exposes, decoded once;
//! - [`user`], [`stack`], [`segments`] and [`heap`]: copies from and to the
//!   caller's memory that never fault inside the library on a pointer the
//!   kernel would refuse: direct reads where the bytes lie in the calling
//!   thread's live stack, a loaded object's static data or the main heap,
//!   checked copies (a system call) elsewhere;
//! - [`Backend`](backend::Backend): the shared sets (`shared`, with the
//!   per-process table of open sets in `cache`) or the kernel's (`kernel`).
//!
//! # How the shared sets differ from the kernel's, as a C program sees it
//!
//! - Ids are random numbers in `2^30 .. 2^31`. Every call goes to the
//!   library's sets: a process cannot use kernel sets and library sets at
//!   once (other processes' kernel sets are invisible to it).
//! - A removed set's id is `EINVAL` for later calls, as in the kernel; a
//!   call the removal overtakes (a sleeper) gets `EIDRM`.
//! - `SEM_STAT`/`SEM_STAT_ANY` take the position in the sorted list of ids,
//!   so removing a set closes its gap; `SEM_STAT_ANY` can only read sets
//!   whose file the caller may open (the file's mode is the set's for the
//!   group and others) or has open (a set its parent had used when it
//!   forked), where the kernel reads every set.
//! - A process the set's mode shuts out of its file gets the kernel's
//!   answers in the kernel's order (`semget` finds the set when its flags
//!   ask for no right it lacks; `EEXIST`, `EINVAL`, `EFBIG`, `EPERM` come
//!   before `EACCES`), read from the file's attributes; but one the mode
//!   lets alter and not read (0622, say) cannot map the set either, and
//!   gets `EACCES` where the kernel lets it alter.
//! - The limits are the kernel's defaults (`SEMMNI` 32000, `SEMMSL` 32000,
//!   `SEMOPM` 500, `SEMVMX` 32767); `/proc/sys/kernel/sem` does not change
//!   them, and the sets are not listed in `/proc/sysvipc/sem`.
//! - Undo adjustments are applied when the process dies however it dies,
//!   but also at `exec` (the set's descriptors are close-on-exec), where
//!   the kernel keeps them; and lazily, by the next process that needs the
//!   set's lock, not at the instant of death.
//! - No call is a cancellation point, as with glibc's, but an asynchronous
//!   cancel that comes while a call sleeps ends the thread as the call
//!   returns (the library holds cancellation off while it works), where
//!   the kernel's call is cancelled in its sleep.
//! - Signals: a handler that runs while the thread polls in the library
//!   before it sleeps does not end the call with `EINTR`, nor does a stop
//!   and continue without a handler, where the kernel's call fails; the
//!   folder of sets is the same in every IPC namespace.
//! - The rest of `ksync::sem::shared`'s list: rights follow the file (an
//!   owner or creator the file does not name, after an `IPC_SET` that
//!   could not change the file's owner, has the file's group or other
//!   rights; a process with `CAP_IPC_OWNER` or `CAP_SYS_ADMIN`, which the
//!   library checks as the kernel does, still needs the file to open),
//!   at most 128 processes per set and 1024 sleepers, and a `SIGBUS` handler,
//!   installed when the first set is mapped, that turns a set file shortened
//!   under the mapping into `EINVAL` and passes every other `SIGBUS` on.
//!
//! The crate's tests compile conformance programs written in C, run each
//! against the kernel, under `LD_PRELOAD` with the shared sets and through
//! the pass-through, and compare the outputs line by line.
//!
//! # Targets
//!
//! Linux on x86-64 and AArch64 (glibc's layout of `struct semid_ds` and the
//! register-level hand-off in `semctl`). Elsewhere the crate builds empty.

#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

pub mod backend;
mod cache;
pub mod command;
mod errno;
mod exports;
pub mod heap;
mod kernel;
pub mod segments;
mod shared;
pub mod stack;
pub mod user;

pub use errno::Errno;
