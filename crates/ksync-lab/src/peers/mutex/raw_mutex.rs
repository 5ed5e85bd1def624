//! Every `lock_api` raw mutex, which is every ksync spinlock and
//! parking_lot's: [`Api`], and [`StatApi`] for one wrapped in ksync's lock
//! statistics.

use super::{Data, LabLock, LockKind};
use ksync::stat::{LockStatSnapshot, LockStats, Stat};
use std::marker::PhantomData;

/// Any `lock_api` raw mutex: every ksync spinlock, and parking_lot's.
pub struct Api<R>(PhantomData<R>);

impl<R: lock_api::RawMutex + Send + Sync + 'static> LockKind for Api<R> {
    type Lock<D: Data> = lock_api::Mutex<R, D>;
}

impl<R, D: Data> LabLock<D> for lock_api::Mutex<R, D>
where
    R: lock_api::RawMutex + Send + Sync + 'static,
{
    fn new() -> Self {
        lock_api::Mutex::new(D::default())
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut self.lock())
    }
}

/// A `lock_api` raw mutex wrapped in [`Stat`], which keeps lock statistics
/// (`HOLD`: the hold-time sampling rate, 0 for none): `qspin+stat` and the
/// other `+stat` entries.
pub struct StatApi<R, const HOLD: u32 = { ksync::stat::DEFAULT_HOLD_SAMPLING }>(PhantomData<R>);

impl<R: lock_api::RawMutex + Send + Sync + 'static, const HOLD: u32> LockKind for StatApi<R, HOLD> {
    type Lock<D: Data> = StatMutex<R, HOLD, D>;
}

/// `lock_api::Mutex<Stat<R, HOLD>, D>`, exactly what a user would write; a
/// newtype only so that [`LabLock::lock_stats`] can read its statistics
/// (the blanket `Api` impl covers every raw mutex, `Stat` included).
pub struct StatMutex<R, const HOLD: u32, D>(lock_api::Mutex<Stat<R, HOLD>, D>);

impl<R, const HOLD: u32, D: Data> LabLock<D> for StatMutex<R, HOLD, D>
where
    R: lock_api::RawMutex + Send + Sync + 'static,
{
    fn new() -> Self {
        StatMutex(lock_api::Mutex::new(D::default()))
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut self.0.lock())
    }

    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        Some(LockStats::snapshot(&self.0))
    }

    fn reset_lock_stats(&self) {
        LockStats::reset(&self.0)
    }
}
