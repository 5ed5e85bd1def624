//! loom models of `RawQSpinLock`: mutual exclusion (a `loom::cell::UnsafeCell`
//! counter that loom checks for unsynchronised access, and its final value)
//! and progress (loom fails a model that deadlocks or spins forever) with 2
//! and 3 threads. After each model, the lock's event counters (per test
//! thread under loom, summed over every execution) show that the
//! exploration took the pending path and the MCS queue.

use ksync::spin::{qspin_stats, RawQSpinLock};
use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

struct Shared {
    lock: RawQSpinLock,
    counter: UnsafeCell<usize>,
}

// SAFETY: `counter` is only touched with `lock` held (that is what the model
// checks).
unsafe impl Sync for Shared {}

fn increment(shared: &Shared, times: usize) {
    for _ in 0..times {
        let guard = shared.lock.lock();
        // SAFETY: the lock is held; loom reports it if it is not exclusive.
        shared.counter.with_mut(|c| unsafe { *c += 1 });
        // SAFETY: `guard` came from `lock()` on this lock.
        unsafe { shared.lock.unlock(guard) };
    }
}

/// How the model's main thread takes part.
#[derive(Clone, Copy)]
enum Main {
    /// Like every other thread.
    Contends,
    /// Takes the lock before spawning the others, spawns them one at a time,
    /// each once the lock shows a waiter, and releases the lock after the
    /// last: the second contender surely takes the pending path and the third
    /// queues unless the hand-over beats it, so loom spends its preemptions on
    /// the hand-overs rather than on the arrivals.
    Staged,
}

/// Runs `threads` threads (the model's main thread among them) that each take
/// the lock `times` times; returns how many acquisitions over the whole
/// exploration took the pending path and the queue.
fn model(builder: loom::model::Builder, threads: usize, times: usize, main: Main) -> Seen {
    let before = qspin_stats();
    builder.check(move || {
        let shared = Arc::new(Shared {
            lock: RawQSpinLock::new(),
            counter: UnsafeCell::new(0),
        });
        let spawn = || {
            let shared = Arc::clone(&shared);
            thread::spawn(move || increment(&shared, times))
        };
        let wait_for_a_waiter = || {
            while !shared.lock.is_contended() {
                thread::yield_now();
            }
        };
        let others: Vec<_> = match main {
            Main::Contends => {
                let others: Vec<_> = (1..threads).map(|_| spawn()).collect();
                increment(&shared, times);
                others
            }
            Main::Staged => {
                let guard = shared.lock.lock();
                let mut others = Vec::new();
                for _ in 1..threads {
                    others.push(spawn());
                    wait_for_a_waiter();
                }
                // SAFETY: the lock is held.
                shared.counter.with_mut(|c| unsafe { *c += times });
                // SAFETY: `guard` came from `lock()` on this lock.
                unsafe { shared.lock.unlock(guard) };
                others
            }
        };
        others.into_iter().for_each(|t| t.join().unwrap());
        // SAFETY: every other thread has been joined.
        let total = shared.counter.with(|c| unsafe { *c });
        assert_eq!(total, threads * times);
        assert!(!shared.lock.is_locked());
    });
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
    loom::model(|| {
        let shared = Arc::new(Shared {
            lock: RawQSpinLock::new(),
            counter: UnsafeCell::new(0),
        });
        let locker = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || increment(&shared, 1))
        };
        let guard = loop {
            match shared.lock.try_lock() {
                Some(guard) => break guard,
                None => thread::yield_now(),
            }
        };
        // SAFETY: the lock is held.
        shared.counter.with_mut(|c| unsafe { *c += 1 });
        // SAFETY: `guard` came from `try_lock()` on this lock.
        unsafe { shared.lock.unlock(guard) };
        locker.join().unwrap();
        // SAFETY: the other thread has been joined.
        assert_eq!(shared.counter.with(|c| unsafe { *c }), 2);
    });
}
