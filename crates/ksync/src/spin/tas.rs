//! Test-and-test-and-set spinlock with bounded exponential backoff.
//!
//! State: one byte, `0` free, `1` held.
//!
//! * `lock`: try to swap 0 -> 1 (compare-and-swap, acquire). On failure, wait
//!   with plain loads until the byte reads 0 ("test" before "test-and-set", so
//!   waiters spin in their own cache instead of bouncing the line with writes),
//!   backing off exponentially between polls, then try again.
//! * `unlock`: release store of 0.
//!
//! Ordering: the successful compare-and-swap is acquire and the unlock store is
//! release, so the critical sections are ordered; failed attempts and polls are
//! relaxed because they publish and consume nothing.
//!
//! It is the "simple test-and-set" row of Waiman Long's tables in "[PATCH v10
//! 13/19] unfair qspinlock: Enable lock stealing in lock waiters" (LKML and
//! xen-devel, May 2014): unfair (whoever's CAS lands first wins, so a thread
//! can starve), no queue, but nobody waits for a particular thread, so it
//! degrades gracefully when threads outnumber cores.
//! The kernel uses this fallback in `virt_spin_lock()` for guests without
//! paravirt support, for exactly that reason.

use crate::relax::Backoff;
use crate::sync::{AtomicBool, Ordering};

/// A test-and-test-and-set spinlock with bounded exponential backoff; one byte.
///
/// ```
/// use ksync::spin::TasMutex;
///
/// let value = TasMutex::new(vec![1, 2]);
/// value.lock().push(3);
/// assert_eq!(*value.lock(), [1, 2, 3]);
/// ```
#[derive(Debug)]
pub struct RawTasLock {
    held: AtomicBool,
}

/// A [`lock_api::Mutex`] guarded by a [`RawTasLock`].
pub type TasMutex<T> = lock_api::Mutex<RawTasLock, T>;
/// The guard of a [`TasMutex`].
pub type TasMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawTasLock, T>;

impl RawTasLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawTasLock {
            held: AtomicBool::new(false),
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawTasLock {
            held: AtomicBool::new(false),
        }
    }

    #[inline(always)]
    fn try_acquire(&self) -> bool {
        // Pairs with the release store in `unlock`.
        self.held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn lock_contended(&self) {
        let mut backoff = Backoff::default();
        loop {
            while self.held.load(Ordering::Relaxed) {
                backoff.snooze();
            }
            if self.try_acquire() {
                return;
            }
            // Lost the race to another thread that saw the byte clear at the
            // same time: that is contention, so back off before polling again.
            backoff.snooze();
        }
    }
}

impl Default for RawTasLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the byte goes 0 -> 1 only by a compare-and-swap, so at most one
// thread holds it; acquisition is acquire and release is release.
unsafe impl lock_api::RawMutex for RawTasLock {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawTasLock::new() under loom");

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if !self.try_acquire() {
            self.lock_contended();
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        if !self.held.load(Ordering::Relaxed) && self.try_acquire() {
            Some(lock_api::GuardSend::new())
        } else {
            None
        }
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Pairs with the acquire compare-and-swap in `try_acquire`.
        self.held.store(false, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }
}
