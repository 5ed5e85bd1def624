//! # ksync: the Linux kernel's synchronization primitives in user space
//!
//! ksync ports the kernel's lock algorithms to user-space Rust. It follows the
//! kernel's designs closely: the same lock words and state transitions, and the
//! optimisations argued for on the kernel mailing lists.
//!
//! * [`spin`]: test-and-set, ticket (plain, fixed backoff, auto-tuned
//!   proportional backoff), MCS, the kernel's 4-byte queued spinlock and its
//!   paravirt flavour, which sleeps instead of spinning when threads outnumber cores.
//! * [`rwsem`] (`std`): the modern kernel rwsem (one count word, FIFO wait
//!   list, batched reader grants, writer optimistic spinning, handoff) and the
//!   2001 generic spinlock-protected rwsem.
//! * [`sem`] (`std`): System V semaphore sets with the kernel's `semop` /
//!   `semctl` semantics, per-semaphore locking and waker-completed sleepers.
//!
//! Every lock is a [`lock_api`] raw lock, so `lock_api::Mutex<RawQSpinLock, T>`
//! (alias `spin::QSpinMutex`) gives RAII guards, `try_lock` and guard mapping.
//!
//! ```
//! use ksync::spin::QSpinMutex;
//!
//! let counter = QSpinMutex::new(0u64);
//! std::thread::scope(|s| {
//!     for _ in 0..4 {
//!         s.spawn(|| {
//!             for _ in 0..1000 {
//!                 *counter.lock() += 1;
//!             }
//!         });
//!     }
//! });
//! assert_eq!(*counter.lock(), 4000);
//! ```
//!
//! ## Features
//!
//! * `std` (default): thread-local queue nodes, futex sleeping, and every type
//!   that needs them. Without it (`--no-default-features`) the crate is
//!   `no_std` and offers the test-and-set lock, both ticket lock flavours, and
//!   the MCS lock with caller-owned nodes.
#![cfg_attr(not(any(feature = "std", loom)), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub(crate) mod sync;

pub mod relax;

// Only the semaphore sets prefetch, and they need std.
#[cfg(feature = "std")]
pub(crate) mod prefetch;

#[cfg(all(feature = "std", not(loom)))]
pub(crate) mod futex;
// Public under loom for `futex::with_spurious_wakeups` alone: its other
// items stay the crate's.
#[cfg(loom)]
pub mod futex;
#[cfg(any(feature = "std", loom))]
pub mod futex_batch;

#[cfg(any(feature = "std", loom))]
pub(crate) mod this_process;

#[cfg(any(feature = "std", loom))]
pub(crate) mod thread_slot;

#[cfg(any(feature = "std", loom))]
pub mod spin_budget;

#[cfg(any(feature = "std", loom))]
pub mod poll_learner;

pub mod spin;

#[cfg(any(feature = "std", loom))]
pub mod rwsem;

#[cfg(feature = "std")]
pub mod stat;

#[cfg(any(feature = "std", loom))]
pub mod sem;

/// Helpers shared with the integration tests (`wait_until`), one file for
/// both.
#[cfg(all(test, not(loom)))]
#[path = "../tests/common/mod.rs"]
mod test_common;

/// The README's examples, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;
