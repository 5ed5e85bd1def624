//! Torture for `RawPvQSpinLock`: the exclusion check at 2, 8 and 64 threads,
//! `try_lock` against `lock`, guards dropped by a panic, threads that hold
//! several locks while others queue on each, and a run with a tiny spin
//! threshold so that waiters sleep, get hashed and get kicked constantly.
//!
//! With 64 threads on a small machine waiters sleep instead of stalling the
//! queue, so the oversubscribed run can do real work.

use ksync::spin::{pv_stats, set_pv_spin_threshold, RawPvQSpinLock};
use lock_api::RawMutex;

use crate::exclusion::{self, assert_excludes, hammer};

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

#[test]
fn try_lock_under_contention() {
    exclusion::try_lock_under_contention::<RawPvQSpinLock>(5_000);
}

#[test]
fn guard_drop_on_panic_unlocks() {
    exclusion::guard_drop_on_panic_unlocks::<RawPvQSpinLock>();
}

#[test]
fn threads_holding_several_locks() {
    exclusion::threads_holding_several_locks::<RawPvQSpinLock>(6, 2_000);
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
