//! Peer locks the lab measures beside ksync, each behind [`LabLock`].
//!
//! Adding a lock to the lab is one `impl LabLock` (or nothing, for any
//! `lock_api` raw mutex) plus one line in `locks::registry`.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// A lock protecting one `u64`, as the experiments use it.
///
/// Implementations must be monomorphised into the benchmark loop: the lab
/// never calls them through a `dyn`, because an indirect call costs about as
/// much as the uncontended lock it would be measuring.
pub trait LabLock: Send + Sync + 'static {
    /// A new, unlocked lock around `0`.
    fn new() -> Self;
    /// Runs `f` on the protected value with the lock held.
    fn with<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R;
}

impl<R> LabLock for lock_api::Mutex<R, u64>
where
    R: lock_api::RawMutex + Send + Sync + 'static,
{
    fn new() -> Self {
        lock_api::Mutex::new(0)
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.lock())
    }
}

impl LabLock for std::sync::Mutex<u64> {
    fn new() -> Self {
        std::sync::Mutex::new(0)
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// The physical floor of an uncontended lock: one compare-and-swap to take
/// it and one release store to drop it, nothing else (no backoff, no
/// fairness). Under contention it is a naive test-and-set lock.
pub struct CasFloor {
    word: AtomicU32,
    value: UnsafeCell<u64>,
}

// SAFETY: `value` is only touched between a successful 0 -> 1 CAS (acquire)
// and the release store of 0, so accesses are exclusive and ordered.
unsafe impl Sync for CasFloor {}

impl LabLock for CasFloor {
    fn new() -> Self {
        CasFloor {
            word: AtomicU32::new(0),
            value: UnsafeCell::new(0),
        }
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        while self
            .word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: we hold the word (see the Sync impl).
        let out = f(unsafe { &mut *self.value.get() });
        self.word.store(0, Ordering::Release);
        out
    }
}

/// glibc's `pthread_mutex_t` (default type: a futex-based, unfair mutex).
pub struct PthreadMutex {
    // Boxed: a pthread mutex must not move once used.
    raw: Box<UnsafeCell<libc::pthread_mutex_t>>,
    value: UnsafeCell<u64>,
}

// SAFETY: the mutex serialises every access to `value`; pthread mutexes may
// be used from any thread.
unsafe impl Sync for PthreadMutex {}
// SAFETY: an unlocked pthread mutex may be destroyed from any thread.
unsafe impl Send for PthreadMutex {}

impl LabLock for PthreadMutex {
    fn new() -> Self {
        PthreadMutex {
            raw: Box::new(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER)),
            value: UnsafeCell::new(0),
        }
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        // SAFETY: `raw` is an initialised mutex at a stable address; lock and
        // unlock are paired on this thread, and `value` is only touched between them.
        unsafe {
            libc::pthread_mutex_lock(self.raw.get());
            let out = f(&mut *self.value.get());
            libc::pthread_mutex_unlock(self.raw.get());
            out
        }
    }
}

impl Drop for PthreadMutex {
    fn drop(&mut self) {
        // SAFETY: we own the mutex and nobody holds it (we have `&mut self`).
        unsafe { libc::pthread_mutex_destroy(self.raw.get()) };
    }
}

/// glibc's `pthread_spinlock_t`: a test-and-set spinlock.
pub struct PthreadSpin {
    raw: Box<UnsafeCell<libc::pthread_spinlock_t>>,
    value: UnsafeCell<u64>,
}

// SAFETY: as for `PthreadMutex`.
unsafe impl Sync for PthreadSpin {}
// SAFETY: as for `PthreadMutex`.
unsafe impl Send for PthreadSpin {}

impl LabLock for PthreadSpin {
    fn new() -> Self {
        let raw = Box::new(UnsafeCell::new(0));
        // SAFETY: `raw` points at writable storage for a spinlock.
        let rc = unsafe { libc::pthread_spin_init(raw.get(), libc::PTHREAD_PROCESS_PRIVATE) };
        assert_eq!(rc, 0, "pthread_spin_init failed: {rc}");
        PthreadSpin {
            raw,
            value: UnsafeCell::new(0),
        }
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        // SAFETY: as for `PthreadMutex::with`.
        unsafe {
            libc::pthread_spin_lock(self.raw.get());
            let out = f(&mut *self.value.get());
            libc::pthread_spin_unlock(self.raw.get());
            out
        }
    }
}

impl Drop for PthreadSpin {
    fn drop(&mut self) {
        // SAFETY: we own the lock and nobody holds it.
        unsafe { libc::pthread_spin_destroy(self.raw.get()) };
    }
}

/// `spin::mutex::SpinMutex`: the `spin` crate's test-and-set lock.
impl LabLock for spin::mutex::SpinMutex<u64> {
    fn new() -> Self {
        spin::mutex::SpinMutex::new(0)
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.lock())
    }
}

/// `spin::mutex::TicketMutex`: the `spin` crate's ticket lock.
impl LabLock for spin::mutex::TicketMutex<u64> {
    fn new() -> Self {
        spin::mutex::TicketMutex::new(0)
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.lock())
    }
}
