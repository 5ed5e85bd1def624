//! loom model of the test-and-test-and-set lock: exclusion and progress.

use ksync::spin::RawTasLock;
use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;

struct Shared {
    lock: RawTasLock,
    value: UnsafeCell<u32>,
}

// SAFETY: `value` is only accessed with `lock` held; loom's UnsafeCell
// reports any access the lock fails to order.
unsafe impl Sync for Shared {}

fn increment(shared: &Shared) {
    let guard = shared.lock.lock();
    // SAFETY: the lock is held.
    shared.value.with_mut(|v| unsafe { *v += 1 });
    // SAFETY: `guard` came from `lock()` above.
    unsafe { shared.lock.unlock(guard) };
}

/// `threads` threads (the model's main thread among them) each take the lock
/// once; loom checks every interleaving for an unordered access to `value`,
/// and every thread must finish.
fn increments(threads: usize) {
    // Each poll of a spin loop is a branch; three threads waiting on each
    // other need more than loom's default 1000.
    let mut model = loom::model::Builder::new();
    model.max_branches = 20_000;
    // Two waiters spinning at once can yield to each other indefinitely
    // in loom's schedule space (a yield is not a preemption), so the
    // three-thread model bounds preemptions to one.
    if threads > 2 {
        model.preemption_bound = Some(1);
    }
    model.check(move || {
        let shared = Arc::new(Shared {
            lock: RawTasLock::new(),
            value: UnsafeCell::new(0),
        });
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                loom::thread::spawn(move || increment(&shared))
            })
            .collect();
        increment(&shared);
        for handle in handles {
            handle.join().unwrap();
        }
        // SAFETY: every thread has been joined.
        let total = shared.value.with(|v| unsafe { *v });
        assert_eq!(total, threads as u32);
        assert!(!shared.lock.is_locked());
    });
}

#[test]
fn tas_two_threads() {
    increments(2);
}

#[test]
fn tas_three_threads() {
    increments(3);
}

/// try_lock never succeeds while another thread holds the lock.
#[test]
fn tas_try_lock_respects_holder() {
    loom::model(|| {
        let shared = Arc::new(Shared {
            lock: RawTasLock::new(),
            value: UnsafeCell::new(0),
        });
        let other = Arc::clone(&shared);
        let t = loom::thread::spawn(move || {
            if let Some(guard) = other.lock.try_lock() {
                // SAFETY: the lock is held.
                other.value.with_mut(|v| unsafe { *v += 1 });
                // SAFETY: from the successful try_lock above.
                unsafe { other.lock.unlock(guard) };
            }
        });
        let guard = shared.lock.lock();
        // SAFETY: the lock is held.
        shared.value.with_mut(|v| unsafe { *v += 10 });
        // SAFETY: `guard` came from `lock()` above.
        unsafe { shared.lock.unlock(guard) };
        t.join().unwrap();
        // SAFETY: joined.
        let v = shared.value.with(|v| unsafe { *v });
        assert!(v == 10 || v == 11);
    });
}
