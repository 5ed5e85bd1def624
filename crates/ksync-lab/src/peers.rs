//! The lock adapters: every mutex the lab measures, ksync's and its peers',
//! behind one small trait, [`LabLock`].
//!
//! A lock protects some data `D` (see [`Data`]): a bare counter right beside
//! the lock word ("embedded", the case seed 004's backoff targets) or a
//! counter on a cache line of its own ([`Apart`], the lock alone on its
//! line). A [`LockKind`] names a lock independently of `D`, so the registry
//! can build both layouts from one line.
//!
//! Adding a lock: any `lock_api::RawMutex` is just `Api<MyRaw>` in
//! `locks::registry`; anything else needs one `impl LabLock<D>` plus a kind
//! (`kind!` below), a dozen lines.

use ksync::stat::{LockStatSnapshot, LockStats, Stat};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// The data a critical section writes.
pub trait Data: Default + Send + Sync + 'static {
    /// The counter every critical section increments.
    fn counter(&mut self) -> &mut u64;
}

/// Embedded layout: the counter sits right after the lock word.
impl Data for u64 {
    #[inline(always)]
    fn counter(&mut self) -> &mut u64 {
        self
    }
}

/// Standalone layout: the counter on its own 128-byte block (two cache
/// lines, past the adjacent-line prefetcher), so the lock word is alone.
#[derive(Default, Debug)]
#[repr(align(128))]
pub struct Apart(u64);

impl Data for Apart {
    #[inline(always)]
    fn counter(&mut self) -> &mut u64 {
        &mut self.0
    }
}

/// A lock protecting a `D`, as the experiments use it.
///
/// Implementations must be monomorphised into the benchmark loop: the lab
/// never calls them through a `dyn`, because an indirect call costs about as
/// much as the uncontended lock it would be measuring.
pub trait LabLock<D: Data>: Send + Sync + 'static {
    /// A new, unlocked lock around `D::default()`.
    fn new() -> Self;
    /// Runs `f` on the protected data with the lock held.
    fn with<R>(&self, f: impl FnOnce(&mut D) -> R) -> R;
    /// The lock's statistics, for a lock that keeps them ([`StatMutex`]).
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        None
    }
    /// Zeroes the statistics and restarts their window; call it while the
    /// lock is idle. Nothing for a lock without statistics.
    fn reset_lock_stats(&self) {}
}

/// A lock type for every data layout.
pub trait LockKind: 'static {
    type Lock<D: Data>: LabLock<D>;
}

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
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
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
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut self.0.lock())
    }

    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        Some(LockStats::snapshot(&self.0))
    }

    fn reset_lock_stats(&self) {
        LockStats::reset(&self.0)
    }
}

/// Declares a unit struct naming the lock family `$lock<D>`.
macro_rules! kind {
    ($(#[$doc:meta])* $kind:ident => $lock:ident) => {
        $(#[$doc])*
        pub struct $kind;
        impl LockKind for $kind {
            type Lock<D: Data> = $lock<D>;
        }
    };
}

type StdMutex<D> = std::sync::Mutex<D>;
kind!(
    /// `std::sync::Mutex`.
    Std => StdMutex
);

impl<D: Data> LabLock<D> for std::sync::Mutex<D> {
    fn new() -> Self {
        std::sync::Mutex::new(D::default())
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

type SpinTas<D> = spin::mutex::SpinMutex<D>;
kind!(
    /// `spin::mutex::SpinMutex`: the `spin` crate's test-and-set lock.
    SpinCrate => SpinTas
);

impl<D: Data> LabLock<D> for spin::mutex::SpinMutex<D> {
    fn new() -> Self {
        spin::mutex::SpinMutex::new(D::default())
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut self.lock())
    }
}

type SpinTicket<D> = spin::mutex::TicketMutex<D>;
kind!(
    /// `spin::mutex::TicketMutex`: the `spin` crate's ticket lock.
    SpinCrateTicket => SpinTicket
);

impl<D: Data> LabLock<D> for spin::mutex::TicketMutex<D> {
    fn new() -> Self {
        spin::mutex::TicketMutex::new(D::default())
    }

    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut self.lock())
    }
}

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
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
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
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut D::default())
    }
}

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
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
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
    fn with<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
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
