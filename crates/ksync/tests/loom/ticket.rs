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

use ksync::spin::{
    AutoTunedBackoff, AutoTunedPerLock, FixedBackoff, RawTicketLock, Spin, TicketWait,
};
use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;

struct Shared<W> {
    lock: RawTicketLock<W>,
    value: UnsafeCell<u32>,
}

// SAFETY: `value` is only accessed with `lock` held; loom's UnsafeCell
// reports any access the lock fails to order.
unsafe impl<W> Sync for Shared<W> {}

impl<W: TicketWait> Shared<W> {
    fn new() -> Arc<Self> {
        Arc::new(Shared {
            lock: RawTicketLock::new(),
            value: UnsafeCell::new(0),
        })
    }

    /// Adds `by` to the value; the caller holds the lock.
    fn bump_locked(&self, by: u32) {
        // SAFETY: the caller holds the lock, so this thread alone accesses `value`.
        self.value.with_mut(|v| unsafe { *v += by });
    }

    fn increment(&self) {
        let guard = self.lock.lock();
        self.bump_locked(1);
        // SAFETY: `guard` came from `lock()` above.
        unsafe { self.lock.unlock(guard) };
    }

    /// The value once every other thread has been joined.
    fn total(&self) -> u32 {
        // SAFETY: all other threads have been joined.
        self.value.with(|v| unsafe { *v })
    }
}

/// How hard loom may push the scheduler.
enum Bound {
    /// `LOOM_MAX_PREEMPTIONS` (two-thread models).
    Env,
    /// At most one forced preemption. A spinning waiter yields to loom on
    /// every poll, and a switch at a yield costs no preemption; with two
    /// waiters spinning, loom keeps finding a new backtrack point in their
    /// alternation before the holder's next store, and from two preemptions
    /// on the exploration does not end.
    One,
    /// No forced preemption: the harness fixes the schedule, loom explores
    /// the values loads may return along it.
    Scripted,
}

fn model(bound: Bound) -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    // Every poll of a spin loop is a branch: waiting threads need more than
    // loom's default 1000 branches per execution.
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        model.max_branches = 20_000;
    }
    match bound {
        Bound::Env => {}
        Bound::One => model.preemption_bound = Some(model.preemption_bound.map_or(1, |b| b.min(1))),
        Bound::Scripted => model.preemption_bound = Some(0),
    }
    model
}

/// `threads` threads (the model's main thread among them) each take the lock
/// once; every thread must finish (a lost handover shows up as a deadlock or
/// an endless spin) and the count must be exact.
fn increments<W: TicketWait + 'static>(threads: usize) {
    let bound = if threads > 2 { Bound::One } else { Bound::Env };
    model(bound).check(move || {
        let shared = Shared::<W>::new();
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                loom::thread::spawn(move || shared.increment())
            })
            .collect();
        shared.increment();
        for handle in handles {
            handle.join().unwrap();
        }
        assert_eq!(shared.total(), threads as u32);
        assert!(!shared.lock.is_locked());
    });
}

/// The main thread holds the lock until two other threads are about to take
/// it, so they queue behind it; the lock must then pass down the queue.
fn two_waiters_queued<W: TicketWait + 'static>() {
    model(Bound::Scripted).check(|| {
        let shared = Shared::<W>::new();
        let (arriving, arrivals) = loom::sync::mpsc::channel();
        let guard = shared.lock.lock();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let shared = Arc::clone(&shared);
                let arriving = arriving.clone();
                loom::thread::spawn(move || {
                    arriving.send(()).unwrap();
                    shared.increment();
                })
            })
            .collect();
        arrivals.recv().unwrap();
        arrivals.recv().unwrap();
        shared.bump_locked(1);
        // SAFETY: `guard` came from `lock()` above.
        unsafe { shared.lock.unlock(guard) };
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(shared.total(), 3);
        assert!(!shared.lock.is_locked());
    });
}

#[test]
fn ticket_two_threads() {
    increments::<Spin>(2);
}

#[test]
fn ticket_three_threads() {
    increments::<Spin>(3);
}

#[test]
fn ticket_two_waiters_queued() {
    two_waiters_queued::<Spin>();
}

#[test]
fn ticket_fixed_backoff_two_threads() {
    increments::<FixedBackoff>(2);
}

#[test]
fn ticket_fixed_backoff_two_waiters_queued() {
    two_waiters_queued::<FixedBackoff>();
}

#[test]
fn ticket_auto_tuned_three_threads() {
    increments::<AutoTunedBackoff>(3);
}

#[test]
fn ticket_auto_tuned_two_waiters_queued() {
    two_waiters_queued::<AutoTunedBackoff>();
}

#[test]
fn ticket_auto_tuned_per_lock_two_threads() {
    increments::<AutoTunedPerLock>(2);
}

#[test]
fn ticket_auto_tuned_per_lock_three_threads() {
    increments::<AutoTunedPerLock>(3);
}

#[test]
fn ticket_auto_tuned_per_lock_two_waiters_queued() {
    two_waiters_queued::<AutoTunedPerLock>();
}

/// `try_lock` never succeeds while another thread holds the lock, and a
/// successful one is ordered after the holder's critical section.
#[test]
fn ticket_try_lock_respects_holder() {
    model(Bound::Env).check(|| {
        let shared = Shared::<Spin>::new();
        let other = Arc::clone(&shared);
        let trier = loom::thread::spawn(move || {
            if let Some(guard) = other.lock.try_lock() {
                other.bump_locked(10);
                // SAFETY: from the successful try_lock above.
                unsafe { other.lock.unlock(guard) };
            }
        });
        shared.increment();
        trier.join().unwrap();
        let total = shared.total();
        assert!(total == 1 || total == 11, "total {total}");
        assert!(!shared.lock.is_locked());
    });
}

/// Two threads take the lock while a third tries it: `try_lock` must fail
/// whenever a ticket is out, including while a waiter is queued.
#[test]
fn ticket_two_lockers_one_trier() {
    model(Bound::One).check(|| {
        let shared = Shared::<AutoTunedPerLock>::new();
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
