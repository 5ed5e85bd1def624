//! glibc's `pthread_rwlock_t`.

use super::LabRwLock;
use std::cell::UnsafeCell;

/// glibc's `pthread_rwlock_t` (default attributes: readers preferred).
pub struct PthreadRwLock {
    raw: Box<UnsafeCell<libc::pthread_rwlock_t>>,
    value: UnsafeCell<u64>,
}

// SAFETY: the rwlock serialises writers against everyone; readers only read.
unsafe impl Sync for PthreadRwLock {}
// SAFETY: an unlocked pthread rwlock may be destroyed from any thread.
unsafe impl Send for PthreadRwLock {}

impl LabRwLock for PthreadRwLock {
    fn new() -> Self {
        PthreadRwLock {
            raw: Box::new(UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER)),
            value: UnsafeCell::new(0),
        }
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        // SAFETY: initialised rwlock at a stable address; lock and unlock
        // pair on this thread; `value` is only read while the read lock is held.
        unsafe {
            libc::pthread_rwlock_rdlock(self.raw.get());
            let out = f(&*self.value.get());
            libc::pthread_rwlock_unlock(self.raw.get());
            out
        }
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        // SAFETY: as above, with the write lock held for the mutable access.
        unsafe {
            libc::pthread_rwlock_wrlock(self.raw.get());
            let out = f(&mut *self.value.get());
            libc::pthread_rwlock_unlock(self.raw.get());
            out
        }
    }
}

impl Drop for PthreadRwLock {
    fn drop(&mut self) {
        // SAFETY: we own the lock and nobody holds it.
        unsafe { libc::pthread_rwlock_destroy(self.raw.get()) };
    }
}
