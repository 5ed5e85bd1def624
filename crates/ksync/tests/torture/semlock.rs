//! RawSemLock (the futex mutex inside semaphore sets) through the exclusion
//! check, plus try_lock, panic and several-locks behaviour.

use crate::exclusion::{self, assert_excludes};
use ksync::sem::RawSemLock;
use lock_api::RawMutex;

#[test]
fn two_threads() {
    assert_excludes("semlock", RawSemLock::INIT, 2, 100_000);
}

#[test]
fn eight_threads() {
    assert_excludes("semlock", RawSemLock::INIT, 8, 20_000);
}

/// 64 threads on 2 cores: waiters sleep instead of spinning, and the lock
/// keeps moving because any running thread may take it.
#[test]
fn sixty_four_threads_oversubscribed() {
    assert_excludes("semlock", RawSemLock::INIT, 64, 2_000);
}

#[test]
fn try_lock_under_contention() {
    exclusion::try_lock_under_contention::<RawSemLock>(20_000);
}

#[test]
fn a_panic_while_holding_the_guard_releases_the_lock() {
    exclusion::guard_drop_on_panic_unlocks::<RawSemLock>();
}

#[test]
fn threads_holding_several_locks() {
    exclusion::threads_holding_several_locks::<RawSemLock>(16, 500);
}
