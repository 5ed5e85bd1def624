//! Torture for `RawQSpinLock`: the exclusion check at 2, 8 and 64 threads,
//! `try_lock` against `lock`, guards dropped by a panic, and threads that
//! hold several locks while others queue on each.
//!
//! The queue is FIFO, so whenever runnable threads outnumber cores (64
//! threads on a small machine, or these tests running beside others) a
//! preempted waiter stalls everyone behind it until the scheduler runs it
//! again: the contended runs use few iterations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ksync::spin::{QSpinMutex, RawQSpinLock};
use lock_api::RawMutex;

use crate::common::assert_excludes;

#[test]
fn two_threads() {
    assert_excludes("RawQSpinLock", RawQSpinLock::INIT, 2, 20_000);
}

#[test]
fn eight_threads() {
    assert_excludes("RawQSpinLock", RawQSpinLock::INIT, 8, 200);
}

#[test]
fn sixty_four_threads_oversubscribed() {
    assert_excludes("RawQSpinLock", RawQSpinLock::INIT, 64, 4);
}

/// Half the threads only `try_lock`, half `lock`; the data under the lock
/// stays consistent, and an uncontended `try_lock` never fails.
#[test]
fn try_lock_under_contention() {
    const ITERS: u64 = 500;
    let data = Arc::new(QSpinMutex::new((0u64, 0u64)));
    let tried = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let data = Arc::clone(&data);
            let tried = Arc::clone(&tried);
            std::thread::spawn(move || {
                for _ in 0..ITERS {
                    let guard = if t % 2 == 0 {
                        Some(data.lock())
                    } else {
                        data.try_lock()
                    };
                    if let Some(mut pair) = guard {
                        pair.0 += 1;
                        std::hint::spin_loop();
                        pair.1 += 1;
                        assert_eq!(pair.0, pair.1);
                        if t % 2 == 1 {
                            tried.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let pair = *data.lock();
    assert_eq!(pair.0, pair.1);
    assert_eq!(pair.0, 2 * ITERS + tried.load(Ordering::Relaxed));
    // Alone, try_lock succeeds.
    let guard = data.try_lock().expect("an uncontended try_lock");
    assert!(data.try_lock().is_none());
    drop(guard);
}

/// A panic inside the critical section drops the guard, which unlocks.
#[test]
fn guard_drop_on_panic_unlocks() {
    let data = Arc::new(QSpinMutex::new(0u32));
    let panicker = {
        let data = Arc::clone(&data);
        std::thread::spawn(move || {
            let mut guard = data.lock();
            *guard += 1;
            panic!("inside the critical section");
        })
    };
    assert!(panicker.join().is_err());
    assert!(!data.is_locked());
    *data.lock() += 1;
    assert_eq!(*data.lock(), 2);
}

/// Each thread takes three of six locks in a fixed global order (so no
/// deadlock) and bumps all three counters, while the others queue on the
/// same locks: a thread waits in one queue while holding other locks, and
/// every lock sees holders, pending waiters and queues at once.
#[test]
fn threads_holding_several_locks() {
    const LOCKS: usize = 6;
    const THREADS: usize = 4;
    const ITERS: u64 = 300;
    let locks: Arc<Vec<QSpinMutex<u64>>> =
        Arc::new((0..LOCKS).map(|_| QSpinMutex::new(0)).collect());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let locks = Arc::clone(&locks);
            std::thread::spawn(move || {
                let mut mine = [t % LOCKS, (t + 2) % LOCKS, (t + 3) % LOCKS];
                mine.sort_unstable();
                for _ in 0..ITERS {
                    let mut guards: Vec<_> = mine.iter().map(|&i| locks[i].lock()).collect();
                    for g in &mut guards {
                        **g += 1;
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let total: u64 = locks.iter().map(|l| *l.lock()).sum();
    assert_eq!(total, 3 * THREADS as u64 * ITERS);
    assert!(locks.iter().all(|l| !l.is_locked()));
}
