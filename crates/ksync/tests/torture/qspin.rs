//! Torture for `RawQSpinLock`: the exclusion check at 2, 8 and 64 threads,
//! `try_lock` against `lock`, guards dropped by a panic, and threads that
//! hold several locks while others queue on each.
//!
//! The queue is FIFO, so whenever runnable threads outnumber cores (64
//! threads on a small machine, or these tests running beside others) a
//! preempted waiter stalls everyone behind it until the scheduler runs it
//! again: the contended runs are the short, forced ones of `exclusion`.

use ksync::spin::RawQSpinLock;
use lock_api::RawMutex;

use crate::exclusion::{self, assert_excludes_fifo, FIFO_EIGHT, FIFO_OVERSUBSCRIBED};

#[test]
fn two_threads() {
    assert_excludes_fifo("RawQSpinLock", RawQSpinLock::INIT, 2, 20_000);
}

#[test]
fn eight_threads() {
    let (threads, iters) = FIFO_EIGHT;
    assert_excludes_fifo("RawQSpinLock", RawQSpinLock::INIT, threads, iters);
}

#[test]
fn sixty_four_threads_oversubscribed() {
    let (threads, iters) = FIFO_OVERSUBSCRIBED;
    assert_excludes_fifo("RawQSpinLock", RawQSpinLock::INIT, threads, iters);
}

#[test]
fn try_lock_under_contention() {
    exclusion::try_lock_under_contention::<RawQSpinLock>(500);
}

#[test]
fn guard_drop_on_panic_unlocks() {
    exclusion::guard_drop_on_panic_unlocks::<RawQSpinLock>();
}

#[test]
fn threads_holding_several_locks() {
    exclusion::threads_holding_several_locks::<RawQSpinLock>(4, 300);
}
