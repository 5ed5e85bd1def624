//! ksync's semaphore sets, `ksync::sem::SemSet`: System V semantics in
//! user space, with counters and lock statistics.

use super::{ksync_failed, SemBackend, SemError, SetCounters, WaitEvents};
use ksync::sem::{SemBuf, SemSet, IPC_NOWAIT};
use ksync::stat::LockStatSnapshot;

impl SemBackend for SemSet {
    const SYSV: bool = true;
    type Op = SemBuf;

    fn create(nsems: usize) -> Result<Self, String> {
        SemSet::new(nsems).map_err(|e| format!("SemSet::new({nsems}): {e}"))
    }

    fn op(num: u16, delta: i16, nowait: bool) -> SemBuf {
        SemBuf::new(num, delta, if nowait { IPC_NOWAIT } else { 0 })
    }

    // Always inline, as a program's own call of `SemSet::semop` is (it and
    // its fast path are `#[inline]`): out of line, the adapter's frame (six
    // saved registers) around the one compare-and-swap added 2 ns to
    // `ksync-lab semop`'s 12 ns down + up, a cost of the lab's, not ksync's.
    #[inline(always)]
    fn semop(&self, sops: &[SemBuf]) -> Result<(), SemError> {
        // The conversion stays out of line, so that the measured call is
        // ksync's and not the lab's error formatting.
        SemSet::semop(self, sops).map_err(|e| ksync_failed(e, sops.len()))
    }

    fn remove(&self) {
        // A second removal fails with Removed; either way the set is gone.
        let _ = SemSet::remove(self);
    }

    fn waiters(&self, num: usize) -> Result<usize, String> {
        self.ncnt(num).map_err(|e| format!("ncnt: {e}"))
    }

    fn value(&self, num: usize) -> Result<i32, String> {
        self.get_value(num).map_err(|e| format!("get_value: {e}"))
    }

    fn set_value(&self, num: usize, value: i32) -> Result<(), String> {
        SemSet::set_value(self, num, value).map_err(|e| format!("set_value: {e}"))
    }

    fn set_all(&self, values: &[u16]) -> Result<(), String> {
        SemSet::set_all(self, values).map_err(|e| format!("set_all: {e}"))
    }

    fn counters(&self) -> Option<SetCounters> {
        Some(SemSet::counters(self).into())
    }

    fn wait_events(&self) -> Option<WaitEvents> {
        Some(SemSet::counters(self).into())
    }

    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        Some(SemSet::lock_stats(self))
    }

    fn reset_lock_stats(&self) {
        SemSet::reset_lock_stats(self)
    }
}
