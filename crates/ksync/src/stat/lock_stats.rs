//! [`LockStats`]: anything that keeps lock statistics, one lock or many,
//! which is what a [`Registry`](super::Registry) holds.

use lock_api::{RawMutex, RawRwLock};

use super::{LockStatSnapshot, Stat};

/// Something that keeps lock statistics: one [`Stat`] lock, a `lock_api`
/// lock over one, or a collection of them (summed, as the per-semaphore
/// locks of a semaphore set are). What a [`Registry`](super::Registry)
/// holds.
pub trait LockStats {
    /// The statistics now, summed if there are several locks.
    fn snapshot(&self) -> LockStatSnapshot;

    /// Zeroes the statistics and restarts the per-mille window.
    fn reset(&self);

    /// Starts the per-mille window if it has not started.
    fn mark_start(&self) {}
}

impl<R, const HOLD: u32> LockStats for Stat<R, HOLD> {
    fn snapshot(&self) -> LockStatSnapshot {
        Stat::snapshot(self)
    }

    fn reset(&self) {
        Stat::reset(self)
    }

    fn mark_start(&self) {
        Stat::mark_start(self)
    }
}

impl<R: RawMutex, T: ?Sized, const HOLD: u32> LockStats for lock_api::Mutex<Stat<R, HOLD>, T> {
    fn snapshot(&self) -> LockStatSnapshot {
        raw_mutex(self).snapshot()
    }

    fn reset(&self) {
        raw_mutex(self).reset()
    }

    fn mark_start(&self) {
        raw_mutex(self).mark_start()
    }
}

impl<R: RawRwLock, T: ?Sized, const HOLD: u32> LockStats for lock_api::RwLock<Stat<R, HOLD>, T> {
    fn snapshot(&self) -> LockStatSnapshot {
        raw_rwlock(self).snapshot()
    }

    fn reset(&self) {
        raw_rwlock(self).reset()
    }

    fn mark_start(&self) {
        raw_rwlock(self).mark_start()
    }
}

fn raw_mutex<R: RawMutex, T: ?Sized, const HOLD: u32>(
    m: &lock_api::Mutex<Stat<R, HOLD>, T>,
) -> &Stat<R, HOLD> {
    // SAFETY: `raw` is unsafe only because the raw lock could be unlocked
    // behind a guard's back; the statistics methods never lock or unlock.
    unsafe { m.raw() }
}

fn raw_rwlock<R: RawRwLock, T: ?Sized, const HOLD: u32>(
    m: &lock_api::RwLock<Stat<R, HOLD>, T>,
) -> &Stat<R, HOLD> {
    // SAFETY: as in `raw_mutex`.
    unsafe { m.raw() }
}

impl<S: LockStats> LockStats for [S] {
    fn snapshot(&self) -> LockStatSnapshot {
        self.iter().map(S::snapshot).sum()
    }

    fn reset(&self) {
        self.iter().for_each(S::reset)
    }

    fn mark_start(&self) {
        self.iter().for_each(S::mark_start)
    }
}

impl<S: LockStats, const N: usize> LockStats for [S; N] {
    fn snapshot(&self) -> LockStatSnapshot {
        self[..].snapshot()
    }

    fn reset(&self) {
        self[..].reset()
    }

    fn mark_start(&self) {
        self[..].mark_start()
    }
}

impl<S: LockStats> LockStats for Vec<S> {
    fn snapshot(&self) -> LockStatSnapshot {
        self[..].snapshot()
    }

    fn reset(&self) {
        self[..].reset()
    }

    fn mark_start(&self) {
        self[..].mark_start()
    }
}

impl<S: LockStats + ?Sized> LockStats for Box<S> {
    fn snapshot(&self) -> LockStatSnapshot {
        (**self).snapshot()
    }

    fn reset(&self) {
        (**self).reset()
    }

    fn mark_start(&self) {
        (**self).mark_start()
    }
}
