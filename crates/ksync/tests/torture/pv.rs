//! Torture for `RawPvQSpinLock`: the exclusion check at 2, 8 and 64 threads,
//! `try_lock` against `lock`, guards dropped by a panic, threads that hold
//! several locks while others queue on each, and a run with critical
//! sections longer than a context switch, so that queued waiters sleep, heads
//! raise the hand-off and successors are woken all the time.
//!
//! With 64 threads on a small machine waiters sleep instead of stalling the
//! queue, so the oversubscribed run can do real work.
//!
//! The pv event counters are process-wide, summed over every lock: a test
//! that asserts on them runs alone among this binary's pv tests (see
//! [`PV_LOCKS`]).

use ksync::spin::{pv_stats, RawPvQSpinLock};
use lock_api::RawMutex;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::exclusion::{self, assert_excludes};

/// Every test here that takes a pv lock holds this, shared; a test that
/// reads the event counters holds it exclusively, so the events it counts
/// are its own lock's.
static PV_LOCKS: RwLock<()> = RwLock::new(());

fn using_pv_locks() -> RwLockReadGuard<'static, ()> {
    PV_LOCKS.read().unwrap_or_else(PoisonError::into_inner)
}

fn counting_pv_events() -> RwLockWriteGuard<'static, ()> {
    PV_LOCKS.write().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn two_threads() {
    let _pv = using_pv_locks();
    assert_excludes("RawPvQSpinLock", RawPvQSpinLock::INIT, 2, 50_000);
}

#[test]
fn eight_threads() {
    let _pv = using_pv_locks();
    assert_excludes("RawPvQSpinLock", RawPvQSpinLock::INIT, 8, 20_000);
}

#[test]
fn sixty_four_threads_oversubscribed() {
    let _pv = using_pv_locks();
    assert_excludes("RawPvQSpinLock", RawPvQSpinLock::INIT, 64, 2_000);
}

#[test]
fn try_lock_under_contention() {
    let _pv = using_pv_locks();
    exclusion::try_lock_under_contention::<RawPvQSpinLock>(5_000);
}

#[test]
fn guard_drop_on_panic_unlocks() {
    let _pv = using_pv_locks();
    exclusion::guard_drop_on_panic_unlocks::<RawPvQSpinLock>();
}

#[test]
fn threads_holding_several_locks() {
    let _pv = using_pv_locks();
    exclusion::threads_holding_several_locks::<RawPvQSpinLock>(6, 2_000);
}

/// Critical sections of about 20 us, far longer than a waiter's spin budget
/// (one context switch): every queued waiter sleeps, heads wait past the
/// hand-off bound, and successors are woken early or at unlock. The exclusion
/// check must still hold, and the sleeping and waking paths must have run.
#[test]
fn waiters_sleep_behind_slow_holders() {
    let _alone = counting_pv_events();
    let before = pv_stats();
    let report = exclusion::hammer_with(SlowHolder(RawPvQSpinLock::INIT), 16, 300);
    assert!(report.is_exact(), "{report:?}");
    let seen = pv_stats().since(&before);
    eprintln!("pv, 16 threads, 20 us critical sections: {seen:?}");
    assert!(seen.sleeps > 0, "no waiter slept: {seen:?}");
    assert!(seen.wakes() > 0, "nobody was woken: {seen:?}");
}

/// A raw lock whose critical sections also spin about 20 us.
struct SlowHolder(RawPvQSpinLock);

impl exclusion::Exclusive for SlowHolder {
    fn critical(&self, section: impl FnOnce() + Send) {
        let guard = self.0.lock();
        section();
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        // SAFETY: `guard` came from `lock()` on this lock just above.
        unsafe { self.0.unlock(guard) };
    }
}
