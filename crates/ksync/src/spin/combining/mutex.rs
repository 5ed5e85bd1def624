//! [`CombiningMutex`]: the data and the lock together, with the closure
//! API ([`with`](CombiningMutex::with)) and the guard path.

use super::{CombiningStats, RawCombiningLock};

/// A mutex whose holder runs the critical sections of threads that find it
/// held: call [`with`](CombiningMutex::with) with a closure, and it runs
/// either here (the lock was free) or on the holder's thread, and its result
/// comes back here. Under contention the data stays in one core's cache and
/// a waiter that is preempted still gets its critical section done.
///
/// For a critical section that cannot be a closure, [`lock`](CombiningMutex::lock)
/// returns an ordinary guard; the lock comes in publication order, after the
/// closures published before it, and the guard's release serves what was
/// published meanwhile.
///
/// Closures may run on another thread: they must be `Send`, their results
/// too, and they must not rely on thread-locals or on which thread runs them.
/// Calling `with` or `lock` on the same mutex from inside a closure deadlocks,
/// as re-locking any mutex does. A panic in a closure reaches the caller
/// whose closure it was; the mutex stays usable (there is no poisoning).
///
/// ```
/// use ksync::spin::CombiningMutex;
///
/// let hits = CombiningMutex::new(vec![0u32; 4]);
/// std::thread::scope(|s| {
///     for t in 0..8 {
///         let hits = &hits;
///         s.spawn(move || {
///             for _ in 0..1000 {
///                 hits.with(|h| h[t % 4] += 1);
///             }
///         });
///     }
/// });
/// let total: u32 = hits.with(|h| h.iter().sum());
/// assert_eq!(total, 8000);
/// hits.lock()[0] = 7; // the guard path
/// assert_eq!(hits.with(|h| h[0]), 7);
/// ```
pub struct CombiningMutex<T: ?Sized> {
    inner: lock_api::Mutex<RawCombiningLock, T>,
}

/// The guard of [`CombiningMutex::lock`].
pub type CombiningMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawCombiningLock, T>;

impl<T> CombiningMutex<T> {
    /// A new, unlocked mutex holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        CombiningMutex {
            inner: lock_api::Mutex::new(value),
        }
    }

    /// A new, unlocked mutex holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        CombiningMutex {
            inner: lock_api::Mutex::from_raw(RawCombiningLock::new(), value),
        }
    }

    /// The protected value, consuming the mutex.
    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }
}

impl<T: ?Sized + Send> CombiningMutex<T> {
    /// Runs `f` on the protected data with the lock held, here or on the
    /// holder's thread, and returns its result. Resumes `f`'s panic, if it
    /// panicked, in this thread.
    #[inline]
    pub fn with<R, F>(&self, f: F) -> R
    where
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        // SAFETY: `data_ptr` is the data this lock guards, valid as long as
        // `self`, and only accessed with the lock held.
        unsafe { self.inner.raw().combine(self.inner.data_ptr(), f) }
    }
}

impl<T: ?Sized> CombiningMutex<T> {
    /// Takes the lock for a guard, in publication order behind the closures
    /// already waiting. The guard's drop serves what was published meanwhile.
    #[inline]
    pub fn lock(&self) -> CombiningMutexGuard<'_, T> {
        self.inner.lock()
    }

    /// The lock for a guard if it is free now.
    #[inline]
    pub fn try_lock(&self) -> Option<CombiningMutexGuard<'_, T>> {
        self.inner.try_lock()
    }

    /// Whether some thread holds the lock.
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// What this mutex's lock did so far; see [`CombiningStats`].
    pub fn stats(&self) -> CombiningStats {
        // SAFETY: reading counters does not touch the lock's state.
        unsafe { self.inner.raw() }.stats()
    }

    /// Sets the counters back to zero; see [`RawCombiningLock::reset_stats`].
    pub fn reset_stats(&self) {
        // SAFETY: as for `stats`.
        unsafe { self.inner.raw() }.reset_stats()
    }

    /// The protected data, through a unique borrow: no locking needed.
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// The raw lock.
    ///
    /// # Safety
    ///
    /// As for [`lock_api::Mutex::raw`]: unlocking it while a guard or a
    /// closure holds it breaks exclusion.
    pub unsafe fn raw(&self) -> &RawCombiningLock {
        // SAFETY: passed on to our caller.
        unsafe { self.inner.raw() }
    }
}

impl<T: Default> Default for CombiningMutex<T> {
    fn default() -> Self {
        CombiningMutex::new(T::default())
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for CombiningMutex<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.inner.fmt(f)
    }
}
