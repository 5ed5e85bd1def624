//! Lock statistics: how often a lock was found free, how often and how long
//! threads waited for it, how long it was held, as the kernel's lock
//! statistics report them.
//!
//! Manfred Spraul's "ipc/sem.c: Optimization for reducing spinlock
//! contention" (LKML, April 2010) found why SysV semaphores were slow by
//! counting, on the array spinlock, the acquisitions that found it free and
//! those that had to wait, and the cycles spent waiting: 91% of acquisitions waited and 47% of all
//! CPU time went into spinning. No profile showed that so plainly. Users of
//! `parking_lot` have asked for these numbers for years (its issues 82 and
//! 176); [`Stat`] gives them for any lock, cheaply enough to leave on.
//!
//! [`Stat<R>`] wraps a raw lock `R` and is a raw lock of the same kind
//! ([`lock_api::RawMutex`], [`lock_api::RawRwLock`] and the extension traits
//! `R` has), so `lock_api::Mutex<Stat<R>, T>` is a drop-in replacement for
//! `lock_api::Mutex<R, T>`. Snapshots ([`LockStatSnapshot`]) sum over several
//! locks; a [`Registry`] of named locks prints one [`Report`] of all of them,
//! as a table like the kernel's `/proc/lock_stat`, as JSON, or in the one-line
//! form of Spraul's debugging patch.
//!
//! ```
//! use ksync::spin::RawQSpinLock;
//! use ksync::stat::{self, Stat};
//! use lock_api::Mutex;
//!
//! // `Stat<RawQSpinLock>` is a `lock_api::RawMutex`: this is an ordinary mutex.
//! static COUNTER: Mutex<Stat<RawQSpinLock>, u64> = Mutex::new(0);
//!
//! stat::registry().register_static("counter", &COUNTER);
//! std::thread::scope(|s| {
//!     for _ in 0..2 {
//!         s.spawn(|| {
//!             for _ in 0..1000 {
//!                 *COUNTER.lock() += 1;
//!             }
//!         });
//!     }
//! });
//!
//! let report = stat::registry().report();
//! let counter = report.get("counter").unwrap();
//! assert_eq!(counter.acquisitions(), 2000);
//! assert_eq!(counter.wait_histogram.count(), counter.contended());
//! println!("{report}"); // the lock_stat-like table
//! println!("{}", counter.summary_line()); // free F contended C wait W avg A 1/1000 cpu time P
//! ```
//!
//! # What it costs
//!
//! An acquisition first tries the lock (as Spraul's patch did with
//! `spin_trylock`). If that succeeds, the only extra work is bumping a
//! counter; a writer does that with a plain load and store, not an atomic
//! read-modify-write, because it holds the lock and nobody else writes that
//! counter meanwhile (a locked `fetch_add` would cost as much again as an
//! uncontended queued spinlock). Readers overlap, so they must use
//! `fetch_add`, on a counter next to the lock word: one more atomic
//! read-modify-write per read acquisition, which the kernel avoids with
//! per-CPU counters that user space does not have cheaply. Only when the try
//! fails is the clock read, before and after the real `lock`: waiting is what
//! is being measured, so those clock reads cost nothing that matters. The
//! wait side (free, contended, wait total and maximum, wait histogram) is
//! therefore exact and costs almost nothing when uncontended.
//!
//! The try is `R`'s own `try_lock`, so an uncontended `Stat<R>` costs what
//! `R::try_lock` costs, not what `R::lock` does. They differ where `try_lock`
//! reads the lock word before its compare-and-swap (the kernel's trylock
//! shape) and `unlock` stores one byte of that word: back to back, the read
//! waits for the byte store to leave the store buffer.
//!
//! A `Stat` adds about 670 bytes to the lock (the counters and two
//! 32-bucket histograms), the fast-path counters on the lock's cache line.
//!
//! Hold time is different: it needs a clock read at acquisition and at
//! release of *every* acquisition, about 20 ns in all with `rdtsc` on a
//! virtual machine, three times the cost of an uncontended queued spinlock.
//! So it is sampled, and the `HOLD` parameter chooses the rate:
//!
//! * `Stat<R>` (`HOLD` = 64, the default): one acquisition in 64 of each kind
//!   (free or contended, read or write) is timed, by that counter's value;
//!   the hold total is estimated from the mean sample. A workload whose hold
//!   times repeat with a period dividing 64 acquisitions can bias it.
//! * `Stat<R, 1>`: every acquisition is timed; totals and maxima are exact.
//! * `Stat<R, 0>`: hold time is not measured.
//!
//! Sampled holds start once the clock is calibrated (see [`calibrate`]); in
//! `Stat<R, 1>` the first acquisition calibrates it before it takes the lock.
//!
//! Leaving statistics out entirely costs nothing: use `R` instead of
//! `Stat<R>` (a type alias in your crate switches all locks at once), or
//! build without the `std` feature, which removes this module.
//!
//! # The per-mille figure
//!
//! Spraul's "1/1000 cpu time" is `1000 * wait / (elapsed * CPUs)`, the CPUs
//! the process may run on (its affinity and CPU quota, as
//! `std::thread::available_parallelism` counts them):
//! the share of the whole machine's time that went into waiting for this
//! lock. For a spinlock that is CPU time burnt; for a sleeping lock such as
//! [`RawRwSem`](crate::rwsem::RawRwSem) it is time threads spent blocked.
//! `elapsed` starts at the lock's first [`mark_start`](Stat::mark_start),
//! which registering it does, else at its first contended acquisition (a
//! `const` initializer cannot read a clock), and restarts at each
//! [`reset`](Stat::reset).
//!
//! # Consistency
//!
//! Counters are read with relaxed loads, so a snapshot taken under load can
//! be off by the acquisitions in flight. [`Stat::reset`] records the counts
//! as they stand, which later snapshots subtract, rather than zeroing them
//! under a writer that updates them with a load and a store: a reset racing
//! with such an update is off by that one update, and a longest wait or hold
//! recorded in flight may count in the new window.

mod clock;
mod counters;
mod lock_stats;
mod report;
mod snapshot;

pub use clock::{calibrate, ClockSource};
pub use lock_stats::LockStats;
pub use report::{registry, RegistrationId, Registry, Report, ReportRow};
pub use snapshot::{Histogram, LockStatSnapshot, SideStats, BUCKETS};

use self::counters::{add, raise, Counters, Counts, SideCounters};
use crate::sync::unmodelled::AtomicU64;
use crate::sync::Ordering::Relaxed;
use core::fmt;
use lock_api::{
    RawMutex, RawMutexFair, RawMutexTimed, RawRwLock, RawRwLockDowngrade, RawRwLockFair,
    RawRwLockTimed,
};
use std::sync::OnceLock;

/// The default hold-time sampling rate of [`Stat`]: one acquisition in 64.
pub const DEFAULT_HOLD_SAMPLING: u32 = 64;

/// A raw lock `R` that keeps statistics about itself.
///
/// `HOLD` picks how hold times are measured: 0 never, 1 every acquisition,
/// `n` one acquisition in `n` (see the [module documentation](self)).
///
/// The wait-side counters (free, contended, wait total and maximum, wait
/// histogram) are exact for every `HOLD`.
///
/// `Stat` is both a [`RawMutex`] and a [`RawRwLock`] (when `R` is), so a bare
/// `Stat::INIT` is ambiguous; write `Stat::new(RawQSpinLock::new())` in a
/// `static`, or let `lock_api::Mutex::new` pick the trait.
#[repr(C)]
pub struct Stat<R, const HOLD: u32 = DEFAULT_HOLD_SAMPLING> {
    raw: R,
    // Next to the lock word: the fast paths touch only these two.
    write_free: AtomicU64,
    read_free: AtomicU64,
    cold: Counters,
}

/// The guard state of a [`Stat`] lock: `R`'s guard and, if this acquisition
/// is timed, when it was taken.
#[derive(Debug)]
pub struct StatGuard<G> {
    inner: G,
    /// Clock ticks at acquisition, 0 if the hold is not timed.
    since: u64,
}

impl<G> StatGuard<G> {
    #[inline(always)]
    fn new(inner: G, since: u64) -> Self {
        StatGuard { inner, since }
    }
}

/// The CPUs this process may run on, asked once per process (a snapshot of
/// each of thousands of locks should not reread `/sys`): a process confined
/// to 2 CPUs of a 64-CPU host can wait on at most 2 at a time.
fn usable_cpus() -> u32 {
    static CPUS: OnceLock<u32> = OnceLock::new();
    *CPUS.get_or_init(|| {
        std::thread::available_parallelism().map_or_else(
            |_| {
                // SAFETY: `sysconf` only reads system configuration; any
                // name is allowed and an unknown one returns -1.
                let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
                u32::try_from(n).unwrap_or(1).max(1)
            },
            |n| u32::try_from(n.get()).unwrap_or(u32::MAX),
        )
    })
}

impl<R, const HOLD: u32> Stat<R, HOLD> {
    /// Wraps `raw`, with all counters at zero.
    pub const fn new(raw: R) -> Self {
        Stat {
            raw,
            write_free: AtomicU64::new(0),
            read_free: AtomicU64::new(0),
            cold: Counters::new(),
        }
    }

    /// The wrapped lock. Locking it directly bypasses the statistics.
    pub fn inner(&self) -> &R {
        &self.raw
    }

    /// Unwraps the lock, dropping its statistics.
    pub fn into_inner(self) -> R {
        self.raw
    }

    /// Copies the statistics, converting times to nanoseconds.
    pub fn snapshot(&self) -> LockStatSnapshot {
        let now = clock::now();
        let start = self.cold.start.load(Relaxed);
        let counts = self.counts().since(&self.cold.base.load());
        LockStatSnapshot {
            locks: 1,
            write: counts.write,
            read: counts.read,
            wait_histogram: counts.wait,
            hold_histogram: counts.hold,
            elapsed_ns: if start == 0 {
                0
            } else {
                clock::elapsed_ns(start, now)
            },
            cpus: usable_cpus(),
        }
    }

    /// Sets every counter to zero, as later snapshots see them, and
    /// restarts the per-mille window now.
    ///
    /// Exact when the lock is idle; see the module documentation for a reset
    /// that races with a writer.
    pub fn reset(&self) {
        self.cold.base.store(&self.counts());
        self.cold.write.reset_maxima();
        self.cold.read.reset_maxima();
        self.cold.start.store(clock::now(), Relaxed);
    }

    /// The counts as they stand, since the lock was made.
    fn counts(&self) -> Counts {
        self.cold
            .counts(self.write_free.load(Relaxed), self.read_free.load(Relaxed))
    }

    /// Starts the per-mille window now, unless it has started already.
    /// Registering the lock does this.
    pub fn mark_start(&self) {
        self.start_if_unset(clock::now());
    }

    #[inline]
    fn start_if_unset(&self, t: u64) {
        if self.cold.start.load(Relaxed) == 0 {
            let _ = self.cold.start.compare_exchange(0, t, Relaxed, Relaxed);
        }
    }

    /// The hold stamp for the acquisition whose counter was `n` before it:
    /// the current time if this one is timed, else 0.
    #[inline(always)]
    fn stamp(n: u64) -> u64 {
        match HOLD {
            0 => 0,
            1 => clock::now(),
            h => {
                if n.is_multiple_of(u64::from(h)) {
                    clock::now_if_ready()
                } else {
                    0
                }
            }
        }
    }

    /// `Stat<R, 1>` times every hold from its acquisition, so the clock must
    /// be calibrated (a 2 ms sleep, once per process) before the lock is
    /// taken, not while it is held; other rates start sampling once it is.
    #[inline(always)]
    fn calibrate_if_timing_all() {
        if HOLD == 1 {
            clock::calibrate();
        }
    }

    /// Counts an acquisition that found the lock free.
    #[inline(always)]
    fn acquired_free(&self, shared: bool) -> u64 {
        let n = if shared {
            self.read_free.fetch_add(1, Relaxed)
        } else {
            add(&self.write_free, 1, true)
        };
        Self::stamp(n)
    }

    /// Counts a contended acquisition that waited from `t1` to `t2`; returns
    /// its hold stamp (`t2` when timed: no further clock read).
    #[inline]
    fn acquired_after_wait(&self, shared: bool, t1: u64, t2: u64) -> u64 {
        let (side, excl) = self.side(shared);
        let ns = clock::elapsed_ns(t1, t2);
        let n = add(&side.contended, 1, excl);
        add(&side.wait_total, ns, excl);
        raise(&side.wait_max, ns, excl);
        add(&self.cold.wait_hist[Histogram::bucket_of(ns)], 1, excl);
        self.start_if_unset(t1);
        match HOLD {
            0 => 0,
            1 => t2,
            h => {
                if n.is_multiple_of(u64::from(h)) {
                    t2
                } else {
                    0
                }
            }
        }
    }

    /// Counts a timed acquisition that gave up after waiting from `t1` to `t2`.
    #[cold]
    fn timed_out(&self, shared: bool, t1: u64, t2: u64) {
        let (side, _) = self.side(shared);
        // Not holding the lock: read-modify-writes, on counters that holders
        // never write with plain stores.
        side.timeouts.fetch_add(1, Relaxed);
        side.timeout_wait
            .fetch_add(clock::elapsed_ns(t1, t2), Relaxed);
        self.start_if_unset(t1);
    }

    /// Records the end of a hold that began at `since` (0: not timed).
    #[inline(always)]
    fn released(&self, shared: bool, since: u64) {
        if HOLD != 0 && since != 0 {
            self.record_hold(shared, since);
        }
    }

    #[inline(never)]
    fn record_hold(&self, shared: bool, since: u64) {
        let (side, excl) = self.side(shared);
        let ns = clock::elapsed_ns(since, clock::now_if_ready());
        add(&side.hold_samples, 1, excl);
        add(&side.hold_total, ns, excl);
        raise(&side.hold_max, ns, excl);
        add(&self.cold.hold_hist[Histogram::bucket_of(ns)], 1, excl);
    }

    /// The counters of one side, and whether their writer holds the lock
    /// exclusively.
    #[inline(always)]
    fn side(&self, shared: bool) -> (&SideCounters, bool) {
        if shared {
            (&self.cold.read, false)
        } else {
            (&self.cold.write, true)
        }
    }

    /// A contended acquisition: `acquire` is the wrapped lock's blocking call.
    #[cold]
    #[inline(never)]
    fn wait_for<G>(&self, shared: bool, acquire: impl FnOnce() -> G) -> StatGuard<G> {
        let t1 = clock::now();
        let inner = acquire();
        let t2 = clock::now();
        StatGuard::new(inner, self.acquired_after_wait(shared, t1, t2))
    }

    /// A contended timed acquisition: `acquire` is the wrapped lock's timed call.
    #[cold]
    #[inline(never)]
    fn wait_for_timed<G>(
        &self,
        shared: bool,
        acquire: impl FnOnce() -> Option<G>,
    ) -> Option<StatGuard<G>> {
        let t1 = clock::now();
        let inner = acquire();
        let t2 = clock::now();
        match inner {
            Some(inner) => Some(StatGuard::new(
                inner,
                self.acquired_after_wait(shared, t1, t2),
            )),
            None => {
                self.timed_out(shared, t1, t2);
                None
            }
        }
    }
}

impl<R: Default, const HOLD: u32> Default for Stat<R, HOLD> {
    fn default() -> Self {
        Stat::new(R::default())
    }
}

impl<R, const HOLD: u32> fmt::Debug for Stat<R, HOLD> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Since the last reset, as a snapshot counts (without its clock).
        let counts = self.counts().since(&self.cold.base.load());
        f.debug_struct("Stat")
            .field("hold_sampling", &HOLD)
            .field("write_free", &counts.write.free)
            .field("write_contended", &counts.write.contended)
            .field("read_free", &counts.read.free)
            .field("read_contended", &counts.read.contended)
            .finish_non_exhaustive()
    }
}

// SAFETY: every method acquires and releases exactly through `R`'s, which
// provide the exclusion and the acquire/release ordering; the wrapper only
// counts around them. The counting cannot unwind (wrapping arithmetic, no
// allocation), so an unwinding `R::lock` leaves nothing held and `unlock`
// always reaches `R::unlock`.
unsafe impl<R: RawMutex, const HOLD: u32> RawMutex for Stat<R, HOLD> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Stat::new(R::INIT);

    type Guard = StatGuard<R::Guard>;

    #[inline]
    fn lock(&self) -> Self::Guard {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock() {
            Some(g) => StatGuard::new(g, self.acquired_free(false)),
            None => self.wait_for(false, || self.raw.lock()),
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        Self::calibrate_if_timing_all();
        let g = self.raw.try_lock()?;
        Some(StatGuard::new(g, self.acquired_free(false)))
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        self.released(false, guard.since);
        // SAFETY: the caller holds the lock with `guard`, which wraps the
        // guard `R` gave for this acquisition.
        unsafe { self.raw.unlock(guard.inner) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }
}

// SAFETY: as for `RawMutex`; a fair unlock is `R`'s. `bump` is the default
// (a fair unlock and a new, counted, acquisition).
unsafe impl<R: RawMutexFair, const HOLD: u32> RawMutexFair for Stat<R, HOLD> {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        self.released(false, guard.since);
        // SAFETY: as in `unlock`.
        unsafe { self.raw.unlock_fair(guard.inner) }
    }
}

// SAFETY: as for `RawMutex`; the timed calls are `R`'s.
unsafe impl<R: RawMutexTimed, const HOLD: u32> RawMutexTimed for Stat<R, HOLD> {
    type Duration = R::Duration;
    type Instant = R::Instant;

    fn try_lock_for(&self, timeout: Self::Duration) -> Option<Self::Guard> {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock() {
            Some(g) => Some(StatGuard::new(g, self.acquired_free(false))),
            None => self.wait_for_timed(false, || self.raw.try_lock_for(timeout)),
        }
    }

    fn try_lock_until(&self, timeout: Self::Instant) -> Option<Self::Guard> {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock() {
            Some(g) => Some(StatGuard::new(g, self.acquired_free(false))),
            None => self.wait_for_timed(false, || self.raw.try_lock_until(timeout)),
        }
    }
}

// SAFETY: every method acquires and releases through the matching method of
// `R` with `R`'s guard for that acquisition and mode; the wrapper only counts
// around them, and its counting cannot unwind. Writers' counters are updated
// with plain stores only while `R` holds the lock exclusively, readers' with
// atomic read-modify-writes.
unsafe impl<R: RawRwLock, const HOLD: u32> RawRwLock for Stat<R, HOLD> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Stat::new(R::INIT);

    type SharedGuard = StatGuard<R::SharedGuard>;
    type ExclusiveGuard = StatGuard<R::ExclusiveGuard>;

    #[inline]
    fn lock_shared(&self) -> Self::SharedGuard {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock_shared() {
            Some(g) => StatGuard::new(g, self.acquired_free(true)),
            None => self.wait_for(true, || self.raw.lock_shared()),
        }
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        Self::calibrate_if_timing_all();
        let g = self.raw.try_lock_shared()?;
        Some(StatGuard::new(g, self.acquired_free(true)))
    }

    #[inline]
    unsafe fn unlock_shared(&self, guard: Self::SharedGuard) {
        self.released(true, guard.since);
        // SAFETY: the caller holds a shared acquisition with `guard`, which
        // wraps `R`'s guard for it.
        unsafe { self.raw.unlock_shared(guard.inner) }
    }

    #[inline]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock_exclusive() {
            Some(g) => StatGuard::new(g, self.acquired_free(false)),
            None => self.wait_for(false, || self.raw.lock_exclusive()),
        }
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        Self::calibrate_if_timing_all();
        let g = self.raw.try_lock_exclusive()?;
        Some(StatGuard::new(g, self.acquired_free(false)))
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, guard: Self::ExclusiveGuard) {
        self.released(false, guard.since);
        // SAFETY: the caller holds the exclusive acquisition with `guard`,
        // which wraps `R`'s guard for it.
        unsafe { self.raw.unlock_exclusive(guard.inner) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.raw.is_locked_exclusive()
    }
}

// SAFETY: as for `RawRwLock`; the fair unlocks are `R`'s, and the default
// bumps are a fair unlock and a new, counted, acquisition.
unsafe impl<R: RawRwLockFair, const HOLD: u32> RawRwLockFair for Stat<R, HOLD> {
    #[inline]
    unsafe fn unlock_shared_fair(&self, guard: Self::SharedGuard) {
        self.released(true, guard.since);
        // SAFETY: as in `unlock_shared`.
        unsafe { self.raw.unlock_shared_fair(guard.inner) }
    }

    #[inline]
    unsafe fn unlock_exclusive_fair(&self, guard: Self::ExclusiveGuard) {
        self.released(false, guard.since);
        // SAFETY: as in `unlock_exclusive`.
        unsafe { self.raw.unlock_exclusive_fair(guard.inner) }
    }
}

// SAFETY: the downgrade is `R`'s, given `R`'s exclusive guard. The writer's
// hold ends at the downgrade and is recorded while still exclusive; the
// shared remainder is not timed (it was not acquired, so it is not counted
// as a read acquisition either).
unsafe impl<R: RawRwLockDowngrade, const HOLD: u32> RawRwLockDowngrade for Stat<R, HOLD> {
    unsafe fn downgrade(&self, guard: Self::ExclusiveGuard) -> Self::SharedGuard {
        self.released(false, guard.since);
        // SAFETY: the caller holds the exclusive acquisition with `guard`.
        let inner = unsafe { self.raw.downgrade(guard.inner) };
        StatGuard::new(inner, 0)
    }
}

// SAFETY: as for `RawRwLock`; the timed calls are `R`'s.
unsafe impl<R: RawRwLockTimed, const HOLD: u32> RawRwLockTimed for Stat<R, HOLD> {
    type Duration = R::Duration;
    type Instant = R::Instant;

    fn try_lock_shared_for(&self, timeout: Self::Duration) -> Option<Self::SharedGuard> {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock_shared() {
            Some(g) => Some(StatGuard::new(g, self.acquired_free(true))),
            None => self.wait_for_timed(true, || self.raw.try_lock_shared_for(timeout)),
        }
    }

    fn try_lock_shared_until(&self, timeout: Self::Instant) -> Option<Self::SharedGuard> {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock_shared() {
            Some(g) => Some(StatGuard::new(g, self.acquired_free(true))),
            None => self.wait_for_timed(true, || self.raw.try_lock_shared_until(timeout)),
        }
    }

    fn try_lock_exclusive_for(&self, timeout: Self::Duration) -> Option<Self::ExclusiveGuard> {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock_exclusive() {
            Some(g) => Some(StatGuard::new(g, self.acquired_free(false))),
            None => self.wait_for_timed(false, || self.raw.try_lock_exclusive_for(timeout)),
        }
    }

    fn try_lock_exclusive_until(&self, timeout: Self::Instant) -> Option<Self::ExclusiveGuard> {
        Self::calibrate_if_timing_all();
        match self.raw.try_lock_exclusive() {
            Some(g) => Some(StatGuard::new(g, self.acquired_free(false))),
            None => self.wait_for_timed(false, || self.raw.try_lock_exclusive_until(timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_path_counters_sit_next_to_the_lock_word() {
        let s: Stat<crate::spin::RawQSpinLock> = Stat::new(crate::spin::RawQSpinLock::new());
        let base = &s as *const _ as usize;
        assert!(&s.read_free as *const _ as usize - base <= 16);
        assert!(&s.write_free as *const _ as usize - base <= 8);
    }

    /// A holder's update is a load and a store (`counters::add`); a reset
    /// between the two must not let the store bring the earlier count back.
    #[test]
    fn a_count_stored_back_over_a_reset_counts_once() {
        let s: Stat<crate::spin::RawQSpinLock, 0> = Stat::new(crate::spin::RawQSpinLock::new());
        for _ in 0..1000 {
            let g = s.lock();
            // SAFETY: `g` is this lock's guard.
            unsafe { s.unlock(g) };
        }
        let loaded = s.write_free.load(Relaxed);
        s.reset();
        s.write_free.store(loaded + 1, Relaxed);
        assert_eq!(s.snapshot().write.free, 1);
        // And the histogram and sums, the same way.
        let bucket = &s.cold.wait_hist[3];
        let loaded = bucket.load(Relaxed);
        bucket.store(loaded + 5, Relaxed);
        let contended = s.cold.write.contended.load(Relaxed);
        s.reset();
        bucket.store(loaded + 6, Relaxed);
        s.cold.write.contended.store(contended + 1, Relaxed);
        let snap = s.snapshot();
        assert_eq!(snap.wait_histogram.buckets[3], 1);
        assert_eq!(snap.write.contended, 1);
        assert_eq!(snap.write.free, 0);
    }

    #[test]
    fn a_held_guard_carries_its_stamp_only_when_timed() {
        calibrate();
        let s: Stat<crate::spin::RawQSpinLock, 0> = Stat::new(crate::spin::RawQSpinLock::new());
        let g = s.lock();
        assert_eq!(g.since, 0);
        // SAFETY: `g` is this lock's guard.
        unsafe { s.unlock(g) };
        let s: Stat<crate::spin::RawQSpinLock, 1> = Stat::new(crate::spin::RawQSpinLock::new());
        let g = s.lock();
        assert_ne!(g.since, 0);
        // SAFETY: as above.
        unsafe { s.unlock(g) };
        assert_eq!(s.snapshot().write.hold_samples, 1);
    }
}
