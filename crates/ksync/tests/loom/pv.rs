//! loom models of `RawPvQSpinLock`: mutual exclusion (a `loom::cell::UnsafeCell`
//! counter) and progress with 2 and 3 threads. Waiters sleep on the crate's
//! loom futex stand-in, which deadlocks the model if a wake-up is ever lost;
//! under loom every spin budget is one poll and a head's patience is zero,
//! so the models reach the pending give-up, the steal window, sleeping
//! successors, the hand-off and both wake-ups. After each model, the lock's
//! event counters (per test thread under loom, summed over the exploration)
//! show which paths it took.

use crate::exclusion::{builder, contend, try_lock_against_lock, Bound, Main};
use ksync::futex::with_spurious_wakeups;
use ksync::spin::{pv_stats, PvStats, RawPvQSpinLock};
use lock_api::RawMutex;
use loom::thread;

/// Waits until the thread spawned last has entered the slow path, the
/// staged model's cue for the next arrival.
fn in_the_slow_path(_: &RawPvQSpinLock) {
    let queued = pv_stats().slowpath;
    while pv_stats().slowpath == queued {
        thread::yield_now();
    }
}

/// Runs `threads` threads (the model's main thread among them) that each take
/// the lock `times` times; returns the events counted over the exploration.
fn model(builder: loom::model::Builder, threads: usize, times: u32, main: Main) -> PvStats {
    let before = pv_stats();
    contend(
        builder,
        RawPvQSpinLock::new,
        threads,
        times,
        main,
        in_the_slow_path,
        |lock| !lock.is_locked() && !lock.is_contended(),
    );
    pv_stats().since(&before)
}

/// The head waits for a pending waiter that gave up, raises HANDOFF at once
/// (its patience is zero under loom) and takes the lock; every order of the
/// pending bit's give-up, the steal window and the claim.
#[test]
fn pv_two_threads() {
    let seen = model(loom::model::Builder::new(), 2, 1, Main::Contends);
    eprintln!("pv_two_threads: {seen:?}");
    assert!(seen.pending > 0, "nobody took the pending path: {seen:?}");
    assert!(
        seen.pending_gave_up > 0,
        "no pending waiter gave up: {seen:?}"
    );
    assert!(seen.queued > 0, "nobody queued: {seen:?}");
    assert!(seen.handoffs > 0, "no head raised HANDOFF: {seen:?}");
}

/// Each thread comes back for the lock: the returning holder finds a queue
/// and steals from it, or queues behind the head and sleeps; the head raises
/// HANDOFF and wakes it early, or hands it the queue head while it sleeps
/// and wakes it at unlock.
#[test]
fn pv_two_threads_twice() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    let seen = model(builder, 2, 2, Main::Contends);
    eprintln!("pv_two_threads_twice: {seen:?}");
    assert!(seen.steals > 0, "never stole: {seen:?}");
    assert!(seen.sleeps > 0, "nobody slept: {seen:?}");
    assert!(seen.early_wakes > 0, "no early wake-up: {seen:?}");
    assert!(seen.unlock_wakes > 0, "no wake-up at unlock: {seen:?}");
}

/// Three contenders at once: a waiter behind the head sleeps, the head's
/// HANDOFF wakes it early or the new owner's unlock wakes it; and, as a
/// kernel futex may, one wait in each execution may return unwoken, at
/// whichever wait loom picks, so waiters also survive spurious wake-ups.
/// The head spins (it never sleeps), so, like the other spinning locks'
/// three-thread models, this one allows one forced preemption
/// (`Bound::One`; see there why more never ends).
#[test]
fn pv_three_threads() {
    let (seen, spurious) =
        with_spurious_wakeups(1, || model(builder(Bound::One), 3, 1, Main::Contends));
    eprintln!("pv_three_threads: {seen:?}, {spurious} spurious wake-ups");
    assert!(seen.sleeps > 0, "no queued waiter slept: {seen:?}");
    assert!(seen.unlock_wakes > 0, "no wake-up at unlock: {seen:?}");
    assert!(spurious > 0, "no wait returned spuriously");
}

/// `try_lock` against `lock`: a thread that only ever tries (yielding
/// between attempts) is excluded like any other, and gets in eventually.
#[test]
fn pv_try_lock_against_lock() {
    try_lock_against_lock(RawPvQSpinLock::new);
}
