//! loom models of `RawQSpinLock`: mutual exclusion (a `loom::cell::UnsafeCell`
//! counter that loom checks for unsynchronised access, and its final value)
//! and progress (loom fails a model that deadlocks or spins forever) with 2
//! and 3 threads. After each model, the lock's event counters (per test
//! thread under loom, summed over every execution) show that the
//! exploration took the pending path and the MCS queue.

use crate::exclusion::{contend, try_lock_against_lock, Main};
use ksync::spin::{qspin_stats, RawQSpinLock};
use lock_api::RawMutex;
use loom::thread;

/// Waits until the lock shows a waiter (pending or queued), the staged
/// model's cue for the next arrival.
fn a_waiter(lock: &RawQSpinLock) {
    while !lock.is_contended() {
        thread::yield_now();
    }
}

/// Runs `threads` threads (the model's main thread among them) that each take
/// the lock `times` times; returns how many acquisitions over the whole
/// exploration took the pending path and the queue. Staged: the second
/// contender surely takes the pending path and the third queues unless the
/// hand-over beats it.
fn model(builder: loom::model::Builder, threads: usize, times: u32, main: Main) -> Seen {
    let before = qspin_stats();
    contend(
        builder,
        RawQSpinLock::new,
        threads,
        times,
        main,
        a_waiter,
        |lock| !lock.is_locked(),
    );
    let after = qspin_stats();
    Seen {
        pending: after.pending - before.pending,
        queued: after.slowpath - before.slowpath,
    }
}

#[derive(Debug)]
struct Seen {
    pending: u64,
    queued: u64,
}

#[test]
fn qspin_two_threads() {
    let seen = model(loom::model::Builder::new(), 2, 1, Main::Contends);
    assert!(seen.pending > 0, "never took the pending path: {seen:?}");
}

/// Two rounds each: the pending waiter's hand-over `(0,1,0)` outlasts the
/// bounded wait of a thread coming back for the lock, which then queues.
#[test]
fn qspin_two_threads_twice() {
    let seen = model(loom::model::Builder::new(), 2, 2, Main::Contends);
    assert!(seen.pending > 0, "never took the pending path: {seen:?}");
    assert!(seen.queued > 0, "never queued: {seen:?}");
}

/// Three threads with loom's preemption bound at 1: with two threads
/// spinning at once (the pending waiter and the queue head) every spin
/// iteration is a scheduling point, and at bound 2 loom's exploration runs
/// into its branch limit (as do three contenders arriving together, even at
/// bound 1). The staging spends the one preemption on the hand-overs.
fn three_thread_builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder
}

#[test]
fn qspin_three_threads_staged() {
    let seen = model(three_thread_builder(), 3, 1, Main::Staged);
    assert!(seen.pending > 0, "never took the pending path: {seen:?}");
    assert!(seen.queued > 0, "never queued: {seen:?}");
}

/// `try_lock` against `lock`: a thread that only ever tries (yielding
/// between attempts) is excluded like any other, and gets in eventually.
#[test]
fn qspin_try_lock_against_lock() {
    try_lock_against_lock(RawQSpinLock::new);
}
