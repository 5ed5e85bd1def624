//! Torture for `RawPvQSpinLock`: the exclusion check at 2, 8 and 64 threads,
//! `try_lock` against `lock`, guards dropped by a panic, threads that hold
//! several locks while others queue on each, and a run with a tiny spin
//! threshold so that waiters sleep, get hashed and get kicked constantly.
//!
//! With 64 threads on a small machine waiters sleep instead of stalling the
//! queue, so the oversubscribed run can do real work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ksync::spin::{pv_stats, set_pv_spin_threshold, PvQSpinMutex, RawPvQSpinLock};
use lock_api::RawMutex;

use crate::common::{assert_excludes, hammer};

#[test]
fn two_threads() {
    assert_excludes("RawPvQSpinLock", RawPvQSpinLock::INIT, 2, 50_000);
}

#[test]
fn eight_threads() {
    assert_excludes("RawPvQSpinLock", RawPvQSpinLock::INIT, 8, 20_000);
}

#[test]
fn sixty_four_threads_oversubscribed() {
    assert_excludes("RawPvQSpinLock", RawPvQSpinLock::INIT, 64, 2_000);
}

/// Half the threads only `try_lock`, half `lock`; the data under the lock
/// stays consistent, and an uncontended `try_lock` never fails.
#[test]
fn try_lock_under_contention() {
    const ITERS: u64 = 5_000;
    let data = Arc::new(PvQSpinMutex::new((0u64, 0u64)));
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
    let data = Arc::new(PvQSpinMutex::new(0u32));
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
    const THREADS: usize = 6;
    const ITERS: u64 = 2_000;
    let locks: Arc<Vec<PvQSpinMutex<u64>>> =
        Arc::new((0..LOCKS).map(|_| PvQSpinMutex::new(0)).collect());
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

/// Waiters that sleep almost at once: every hand-over goes through the
/// halt / hash / kick paths and arrivals steal from sleeping heads. The
/// threshold is global, so other tests in this binary running now sleep
/// sooner too, which they must survive anyway. The counters are global
/// as well, so they are printed, not asserted.
#[test]
fn sleeping_waiters_with_a_tiny_spin_threshold() {
    let before = pv_stats();
    set_pv_spin_threshold(4);
    let report = hammer(RawPvQSpinLock::INIT, 16, 5_000);
    set_pv_spin_threshold(ksync::spin::DEFAULT_PV_SPIN_THRESHOLD);
    assert!(report.is_exact(), "{report:?}");
    let after = pv_stats();
    eprintln!(
        "pv, 16 threads, threshold 4: {} steals, {} halts ({} early, {} heads), {} kicks, {} hashed successors, {} spurious",
        after.steals() - before.steals(),
        after.halts() - before.halts(),
        after.wait_early - before.wait_early,
        after.wait_head - before.wait_head,
        after.wakes() - before.wakes(),
        after.hash_next - before.hash_next,
        after.spurious_wakeups() - before.spurious_wakeups(),
    );
}
