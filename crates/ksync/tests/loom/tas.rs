//! loom model of the test-and-test-and-set lock: exclusion and progress.

use crate::exclusion::{increments, Shared};
use ksync::spin::RawTasLock;
use lock_api::RawMutex;
use loom::sync::Arc;

#[test]
fn tas_two_threads() {
    increments(RawTasLock::new, 2, true);
}

#[test]
fn tas_three_threads() {
    increments(RawTasLock::new, 3, true);
}

/// try_lock never succeeds while another thread holds the lock.
#[test]
fn tas_try_lock_respects_holder() {
    loom::model(|| {
        let shared = Shared::new(RawTasLock::new());
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
