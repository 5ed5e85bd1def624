//! `libksync_sysv.so`: glibc's System V semaphore calls — `semget`, `semop`,
//! `semtimedop` and `semctl` — with glibc's ABI, for C programs that are never
//! rebuilt: `LD_PRELOAD=.../libksync_sysv.so program`, or linked with
//! `-lksync_sysv`.
//!
//! # What it does today
//!
//! **The library does not yet give programs ksync's semaphore sets.** Every
//! call is answered by the kernel's own sets, through the kernel's system
//! calls: a program sees exactly what it sees without the library, and runs
//! no faster. What is here is the ABI layer those sets will sit behind:
//!
//! - the four exported functions with glibc's signatures, `semctl`'s
//!   variadic `union semun` included (read by a small C shim, since stable
//!   Rust cannot define a C-variadic function; see `exports`);
//! - every `semctl` command glibc exposes, decoded once into a typed
//!   [`Command`](command::Command);
//! - checked copies to and from the caller's memory ([`user`]), so that a bad
//!   pointer is `EFAULT`, never a fault inside the library;
//! - one interface, [`Backend`](backend::Backend), behind which the kernel's
//!   sets sit today and ksync's process-shared sets will sit instead.
//!
//! The crate's tests compile conformance programs written in C, run each
//! against the kernel and again under `LD_PRELOAD`, and compare the outputs
//! line by line.
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
pub mod command;
mod errno;
mod exports;
mod kernel;
pub mod stack;
pub mod user;

pub use errno::Errno;
