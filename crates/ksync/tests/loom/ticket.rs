//! loom models of the ticket lock: exclusion and progress for the plain lock
//! and the backoff policies, and `try_lock` against a holder.
//!
//! # How much of the state space each model covers
//!
//! * Two threads: every interleaving within `LOOM_MAX_PREEMPTIONS`.
//! * Three threads, `*_three_threads`: all three race for the lock, with at
//!   most one forced preemption (see `Bound`).
//! * Three threads, `*_two_waiters_queued`: the harness, not the scheduler,
//!   builds the case that needs three threads: the holder blocks on a channel
//!   until both other threads are about to lock, so in the schedule loom runs
//!   both take tickets behind it, and the handover goes down a queue of two.
//!   loom explores every value each load may return along that schedule and
//!   checks every access to the protected data for a race.
//!
//! A backoff delay is a single yield under loom (`relax::spin_for`). In the
//! queued model the last waiter has a waiter ahead of it, so it takes the
//! backoff path (and the thread-local delay table of the auto-tuned policies).
//!
//! # Shown to fail on broken protocols
//!
//! Each of these, injected on its own, fails at least one model here: unlock
//! store relaxed instead of release; the lock's final handover load relaxed;
//! the ticket `fetch_add` relaxed; `try_lock`'s compare-and-swap relaxed;
//! `try_lock` without the `owner == next` check; unlock handing the lock to
//! the newest waiter instead of the next ticket (only the queued models).

use crate::exclusion::{
    builder, increments, try_lock_respects_holder, two_waiters_queued, Bound, Shared,
};
use ksync::spin::{
    AutoTunedBackoff, AutoTunedPerLock, FixedBackoff, RawTicketLock, Spin, TicketWait,
};
use lock_api::RawMutex;
use loom::sync::Arc;

/// `threads` threads (the model's main thread among them) each take the lock
/// once; every thread must finish and the count must be exact.
fn ticket_increments<W: TicketWait + 'static>(threads: usize) {
    increments(RawTicketLock::<W>::new, threads, true);
}

#[test]
fn ticket_two_threads() {
    ticket_increments::<Spin>(2);
}

#[test]
fn ticket_three_threads() {
    ticket_increments::<Spin>(3);
}

#[test]
fn ticket_two_waiters_queued() {
    two_waiters_queued(RawTicketLock::<Spin>::new);
}

#[test]
fn ticket_fixed_backoff_two_threads() {
    ticket_increments::<FixedBackoff>(2);
}

#[test]
fn ticket_fixed_backoff_two_waiters_queued() {
    two_waiters_queued(RawTicketLock::<FixedBackoff>::new);
}

#[test]
fn ticket_auto_tuned_three_threads() {
    ticket_increments::<AutoTunedBackoff>(3);
}

#[test]
fn ticket_auto_tuned_two_waiters_queued() {
    two_waiters_queued(RawTicketLock::<AutoTunedBackoff>::new);
}

#[test]
fn ticket_auto_tuned_per_lock_two_threads() {
    ticket_increments::<AutoTunedPerLock>(2);
}

#[test]
fn ticket_auto_tuned_per_lock_three_threads() {
    ticket_increments::<AutoTunedPerLock>(3);
}

#[test]
fn ticket_auto_tuned_per_lock_two_waiters_queued() {
    two_waiters_queued(RawTicketLock::<AutoTunedPerLock>::new);
}

/// `try_lock` never succeeds while another thread holds the lock, and a
/// successful one is ordered after the holder's critical section.
#[test]
fn ticket_try_lock_respects_holder() {
    try_lock_respects_holder(RawTicketLock::<Spin>::new);
}

/// Two threads take the lock while a third tries it: `try_lock` must fail
/// whenever a ticket is out, including while a waiter is queued.
#[test]
fn ticket_two_lockers_one_trier() {
    builder(Bound::One).check(|| {
        let shared = Shared::new(RawTicketLock::<AutoTunedPerLock>::new());
        let (locker, trier) = (Arc::clone(&shared), Arc::clone(&shared));
        let locker = loom::thread::spawn(move || locker.increment());
        let trier = loom::thread::spawn(move || {
            if let Some(guard) = trier.lock.try_lock() {
                trier.bump_locked(10);
                // SAFETY: from the successful try_lock above.
                unsafe { trier.lock.unlock(guard) };
            }
        });
        shared.increment();
        locker.join().unwrap();
        trier.join().unwrap();
        let total = shared.total();
        assert!(total == 2 || total == 12, "total {total}");
        assert!(!shared.lock.is_locked());
    });
}
