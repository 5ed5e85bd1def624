//! Not locks to use but references for the others: the cost floor of an
//! uncontended lock, and a lock that excludes nobody.

use super::{Data, LabLock, LockKind};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// The physical floor of an uncontended lock: one compare-and-swap to take
/// it and one release store to drop it, nothing else (no backoff, no
/// fairness). Under contention it is a naive test-and-set lock.
pub struct CasFloor<D> {
    word: AtomicU32,
    value: UnsafeCell<D>,
}

kind!(
    /// [`CasFloor`].
    Cas => CasFloor
);

// SAFETY: `value` is only touched between a successful 0 -> 1 CAS (acquire)
// and the release store of 0, so accesses are exclusive and ordered.
unsafe impl<D: Send> Sync for CasFloor<D> {}

impl<D: Data> LabLock<D> for CasFloor<D> {
    fn new() -> Self {
        CasFloor {
            word: AtomicU32::new(0),
            value: UnsafeCell::new(D::default()),
        }
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        // Acquire pairs with the release store that dropped the lock.
        while self
            .word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: we hold the word (see the Sync impl).
        let out = f(unsafe { &mut *self.value.get() });
        // Release pairs with the acquire compare-and-swap of the next holder.
        self.word.store(0, Ordering::Release);
        out
    }
}

/// A deliberately broken lock, the kernel's `lock_busted`: lock and unlock
/// do nothing, so any number of threads are "inside" at once. It exists to
/// prove that `torture`'s exclusion check fails when it must.
///
/// Handing two threads `&mut` to the same data would be undefined behaviour
/// in Rust, so each caller works on a scratch copy of `D`; the violation is
/// what torture's atomic flags observe, as in the kernel.
pub struct BustedLock<D>(PhantomData<fn() -> D>);

kind!(
    /// [`BustedLock`].
    Busted => BustedLock
);

impl<D: Data> LabLock<D> for BustedLock<D> {
    fn new() -> Self {
        BustedLock(PhantomData)
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut D::default())
    }
}
