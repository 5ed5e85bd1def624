//! Backoff policies for [`RawTicketLock`]: proportional backoff, fixed and
//! auto-tuned (Rik van Riel, "[PATCH 3/5] x86,smp: auto tune spinlock
//! backoff delay factor", LKML, January 2013, and Michel Lespinasse's review
//! of it, LKML, 10 January 2013).
//!
//! Every ticket-lock waiter spins on the one lock word, so each handover
//! costs a cache line transfer to every waiter, and the more waiters poll,
//! the slower the holder's own accesses to data on that line become.
//! Proportional backoff makes a waiter with `k` threads ahead spin about `k`
//! times the expected hold time *without touching the lock*, then look
//! again. Each policy is a [`TicketWait`] implementation:
//!
//! | policy | between polls | kernel version |
//! |---|---|---|
//! | [`Spin`](super::Spin) | one `cpu_relax` | `arch_spin_lock()` in `include/asm-generic/ticket_spinlock.h` |
//! | [`FixedBackoff`] | `50 * waiters_ahead` relaxes | RFC patch 2/5 (fixed factor) |
//! | [`AutoTunedBackoff`] | `delay * waiters_ahead`, one learned `delay` per thread | RFC patch 3/5 (one per-CPU delay), v3 arithmetic |
//! | [`AutoTunedPerLock`] | the same, `delay` learned per thread *and* lock (64-entry table) | RFC patch 4/5, the v3/v4 `ticket_spin_lock_wait()` |
//!
//! In every policy the waiter that is next in line polls tightly. The
//! auto-tuned controller is in `auto_tuned.rs`, the learned delay and where it
//! is kept in `delay.rs`.

mod auto_tuned;
mod delay;

pub use auto_tuned::*;
pub use delay::*;

use super::ticket::{RawTicketLock, TicketWait, TicketWaiter};
use crate::relax::spin_for;

/// A ticket mutex whose waiters back off `50 * waiters_ahead` relaxes between polls.
pub type FixedBackoffTicketMutex<T> = lock_api::Mutex<RawTicketLock<FixedBackoff>, T>;
/// A ticket mutex with auto-tuned proportional backoff, one learned delay per thread.
pub type AutoTunedTicketMutex<T> = lock_api::Mutex<RawTicketLock<AutoTunedBackoff>, T>;
/// A ticket mutex with auto-tuned proportional backoff, delays learned per thread and lock.
pub type AutoTunedPerLockTicketMutex<T> = lock_api::Mutex<RawTicketLock<AutoTunedPerLock>, T>;

/// Waiting policy: with `k` threads ahead, spin `FACTOR * k` relaxes between
/// polls (default 50, the fixed factor of the RFC's patch 2/5); the thread
/// next in line polls tightly.
///
/// ```
/// use ksync::spin::{FixedBackoff, FixedBackoffTicketMutex, RawTicketLock};
///
/// let m = FixedBackoffTicketMutex::new(0); // factor 50
/// *m.lock() += 1;
/// // Another factor:
/// let m: lock_api::Mutex<RawTicketLock<FixedBackoff<200>>, i32> = lock_api::Mutex::new(0);
/// *m.lock() += 1;
/// ```
#[derive(Debug)]
pub struct FixedBackoff<const FACTOR: u32 = 50>(());

impl<const FACTOR: u32> TicketWait for FixedBackoff<FACTOR> {
    fn wait(waiter: &TicketWaiter<'_>) {
        loop {
            match waiter.waiters_ahead(waiter.head()) {
                None => return,
                Some(0) => return waiter.spin_until_served(),
                Some(ahead) => spin_for(FACTOR.saturating_mul(u32::from(ahead))),
            }
        }
    }
}
