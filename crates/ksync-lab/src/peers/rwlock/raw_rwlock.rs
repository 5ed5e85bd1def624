//! Every `lock_api` raw reader-writer lock, which is ksync's two rwsems and
//! parking_lot's, bare or wrapped in ksync's lock statistics
//! ([`StatRwLock`]).

use super::LabRwLock;
use ksync::stat::{LockStatSnapshot, LockStats, Stat};

/// `lock_api::RwLock<Stat<R, HOLD>, u64>`: a raw reader-writer lock wrapped
/// in `ksync::stat::Stat`, which keeps lock statistics (`rwsem+stat`). A
/// newtype only so that [`LabRwLock::lock_stats`] can read them.
pub struct StatRwLock<R, const HOLD: u32 = { ksync::stat::DEFAULT_HOLD_SAMPLING }>(
    lock_api::RwLock<Stat<R, HOLD>, u64>,
);

impl<R, const HOLD: u32> LabRwLock for StatRwLock<R, HOLD>
where
    R: lock_api::RawRwLock + Send + Sync + 'static,
{
    fn new() -> Self {
        StatRwLock(lock_api::RwLock::new(0))
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self.0.read())
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.0.write())
    }
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        Some(LockStats::snapshot(&self.0))
    }
    fn reset_lock_stats(&self) {
        LockStats::reset(&self.0)
    }
}

impl<R> LabRwLock for lock_api::RwLock<R, u64>
where
    R: lock_api::RawRwLock + Send + Sync + 'static,
{
    fn new() -> Self {
        lock_api::RwLock::new(0)
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self.read())
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.write())
    }
}
