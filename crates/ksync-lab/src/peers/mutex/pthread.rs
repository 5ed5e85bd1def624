//! glibc's `pthread_mutex_t` and `pthread_spinlock_t`.

use super::{Data, LabLock, LockKind};
use std::cell::UnsafeCell;

/// A pthread lock and its data in one heap block, aligned to a cache line
/// so that in the embedded layout the data shares the lock's line. Boxed so
/// the lock is initialised where it stays: POSIX locks must not move.
#[repr(C, align(64))]
struct PthreadCell<L, D> {
    raw: UnsafeCell<L>,
    value: UnsafeCell<D>,
}

/// glibc's `pthread_mutex_t` (default type: a futex-based, unfair mutex).
pub struct PthreadMutex<D>(Box<PthreadCell<libc::pthread_mutex_t, D>>);

kind!(
    /// [`PthreadMutex`].
    Pthread => PthreadMutex
);

// SAFETY: the mutex serialises every access to `value`; pthread mutexes may
// be used from any thread.
unsafe impl<D: Send> Sync for PthreadMutex<D> {}
// SAFETY: an unlocked pthread mutex may be destroyed from any thread.
unsafe impl<D: Send> Send for PthreadMutex<D> {}

impl<D: Data> LabLock<D> for PthreadMutex<D> {
    fn new() -> Self {
        PthreadMutex(Box::new(PthreadCell {
            raw: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            value: UnsafeCell::new(D::default()),
        }))
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        // SAFETY: `raw` is an initialised mutex at a stable address; lock and
        // unlock are paired on this thread, and `value` is only touched between them.
        unsafe {
            libc::pthread_mutex_lock(self.0.raw.get());
            let out = f(&mut *self.0.value.get());
            libc::pthread_mutex_unlock(self.0.raw.get());
            out
        }
    }
}

impl<D> Drop for PthreadMutex<D> {
    fn drop(&mut self) {
        // SAFETY: we own the mutex and nobody holds it (we have `&mut self`).
        unsafe { libc::pthread_mutex_destroy(self.0.raw.get()) };
    }
}

/// glibc's `pthread_spinlock_t`: a test-and-set spinlock.
pub struct PthreadSpinLock<D>(Box<PthreadCell<libc::pthread_spinlock_t, D>>);

kind!(
    /// [`PthreadSpinLock`].
    PthreadSpin => PthreadSpinLock
);

// SAFETY: as for `PthreadMutex`.
unsafe impl<D: Send> Sync for PthreadSpinLock<D> {}
// SAFETY: as for `PthreadMutex`.
unsafe impl<D: Send> Send for PthreadSpinLock<D> {}

impl<D: Data> LabLock<D> for PthreadSpinLock<D> {
    fn new() -> Self {
        let cell = Box::new(PthreadCell {
            raw: UnsafeCell::new(0),
            value: UnsafeCell::new(D::default()),
        });
        // SAFETY: `raw` is writable storage for a spinlock at its final address.
        let rc = unsafe { libc::pthread_spin_init(cell.raw.get(), libc::PTHREAD_PROCESS_PRIVATE) };
        // glibc's pthread_spin_init cannot fail; a non-zero code would mean
        // a broken libc, not bad input.
        assert_eq!(rc, 0, "pthread_spin_init failed: {rc}");
        PthreadSpinLock(cell)
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        // SAFETY: as for `PthreadMutex::with`.
        unsafe {
            libc::pthread_spin_lock(self.0.raw.get());
            let out = f(&mut *self.0.value.get());
            libc::pthread_spin_unlock(self.0.raw.get());
            out
        }
    }
}

impl<D> Drop for PthreadSpinLock<D> {
    fn drop(&mut self) {
        // SAFETY: we own the lock and nobody holds it.
        unsafe { libc::pthread_spin_destroy(self.0.raw.get()) };
    }
}
