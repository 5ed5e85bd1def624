//! The ksync locks that need more than the blanket `lock_api` adapter: the
//! paravirt queued spinlock, whose lock events the lab reports, and the
//! combining lock, whose critical sections are closures the holder may run
//! for the caller.

use super::{Data, LabLock, LockKind};
use ksync::spin::{pv_stats, reset_pv_stats, CombiningMutex, PvQSpinMutex};

/// `ksync::spin::PvQSpinMutex`, reporting the paravirt lock's events. They
/// are process-wide counters, so they describe this lock only while it is
/// the one being measured (as it is in every experiment).
pub struct PvQSpinLock<D>(PvQSpinMutex<D>);
kind!(
    /// `ksync::spin::PvQSpinMutex`, with its lock events.
    PvQSpin => PvQSpinLock
);

impl<D: Data> LabLock<D> for PvQSpinLock<D> {
    fn new() -> Self {
        PvQSpinLock(PvQSpinMutex::new(D::default()))
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut self.0.lock())
    }

    fn lock_events(&self) -> Vec<(&'static str, u64)> {
        let s = pv_stats();
        vec![
            ("slowpath", s.slowpath),
            ("pending", s.pending),
            ("pending_gave_up", s.pending_gave_up),
            ("steals", s.steals),
            ("queued", s.queued),
            ("sleeps", s.sleeps),
            ("handoffs", s.handoffs),
            ("early_wakes", s.early_wakes),
            ("unlock_wakes", s.unlock_wakes),
            ("head_yields", s.head_yields),
            ("streak_yields", s.streak_yields),
        ]
    }

    fn reset_lock_events(&self) {
        reset_pv_stats();
    }
}

/// `ksync::spin::CombiningMutex`: every critical section goes through
/// `with`, so the holder may run it for the caller.
pub struct CombiningLock<D>(CombiningMutex<D>);
kind!(
    /// `ksync::spin::CombiningMutex`, through its closure API.
    Combining => CombiningLock
);

impl<D: Data> LabLock<D> for CombiningLock<D> {
    fn new() -> Self {
        CombiningLock(CombiningMutex::new(D::default()))
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        self.0.with(f)
    }

    fn lock_events(&self) -> Vec<(&'static str, u64)> {
        let s = self.0.stats();
        vec![
            ("combined", s.combined),
            ("tenures", s.tenures),
            ("handed_over", s.handed_over),
            ("sleeps", s.sleeps),
            ("wakes", s.wakes),
        ]
    }

    fn reset_lock_events(&self) {
        self.0.reset_stats();
    }
}
