//! RawTasLock through the exclusion check, plus try_lock and panic behaviour.

use crate::exclusion::{self, assert_excludes};
use ksync::spin::RawTasLock;
use lock_api::RawMutex;
use std::sync::Arc;

#[test]
fn two_threads() {
    assert_excludes("tas", RawTasLock::INIT, 2, 100_000);
}

#[test]
fn eight_threads() {
    assert_excludes("tas", RawTasLock::INIT, 8, 20_000);
}

/// 64 threads on a 2-core machine: an unfair lock keeps working when the
/// next waiter is preempted, because any running thread can take it.
#[test]
fn sixty_four_threads_oversubscribed() {
    assert_excludes("tas", RawTasLock::INIT, 64, 2_000);
}

#[test]
fn try_lock_fails_while_held_and_succeeds_after() {
    let lock = Arc::new(RawTasLock::new());
    let guard = lock.lock();
    let other = Arc::clone(&lock);
    assert!(std::thread::spawn(move || other.try_lock().is_none())
        .join()
        .unwrap());
    assert!(lock.is_locked());
    // SAFETY: `guard` came from `lock()` above.
    unsafe { lock.unlock(guard) };
    let other = Arc::clone(&lock);
    let got = std::thread::spawn(move || {
        let guard = other.try_lock();
        let got = guard.is_some();
        if let Some(guard) = guard {
            // SAFETY: from a successful try_lock on `other`.
            unsafe { other.unlock(guard) };
        }
        got
    })
    .join()
    .unwrap();
    assert!(got);
    assert!(!lock.is_locked());
}

#[test]
fn a_panic_while_holding_the_guard_releases_the_lock() {
    exclusion::guard_drop_on_panic_unlocks::<RawTasLock>();
}
