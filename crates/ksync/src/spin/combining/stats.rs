//! What a combining lock counts: [`CombiningStats`], and the counters the
//! lock keeps on its own cache line.

use crate::sync::{unmodelled, Ordering};

/// What a combining lock did, counted since it was made (or
/// [`reset_stats`](super::RawCombiningLock::reset_stats)). Only slow paths count:
/// an uncontended `with` touches none of them.
///
/// ```
/// use ksync::spin::CombiningMutex;
///
/// let m = CombiningMutex::new(0u32);
/// m.with(|v| *v += 1);
/// let s = m.stats();
/// println!("{} run for others in {} tenures", s.combined, s.tenures);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CombiningStats {
    /// Closures a holder ran for another thread.
    pub combined: u64,
    /// Holder tenures that ran at least one closure for another thread
    /// (`combined / tenures` is the mean batch).
    pub tenures: u64,
    /// Times a holder handed the lock to a waiter: its combining limit was
    /// reached, or the waiter wanted a guard.
    pub handed_over: u64,
    /// Times a waiter went to sleep.
    pub sleeps: u64,
    /// Futex wake-ups issued to sleeping waiters.
    pub wakes: u64,
}

impl CombiningStats {
    /// The events counted since `earlier`, an older snapshot.
    pub fn since(&self, earlier: &CombiningStats) -> CombiningStats {
        CombiningStats {
            combined: self.combined.saturating_sub(earlier.combined),
            tenures: self.tenures.saturating_sub(earlier.tenures),
            handed_over: self.handed_over.saturating_sub(earlier.handed_over),
            sleeps: self.sleeps.saturating_sub(earlier.sleeps),
            wakes: self.wakes.saturating_sub(earlier.wakes),
        }
    }

    /// Field-by-field sum (to total several locks).
    pub fn plus(&self, other: &CombiningStats) -> CombiningStats {
        CombiningStats {
            combined: self.combined + other.combined,
            tenures: self.tenures + other.tenures,
            handed_over: self.handed_over + other.handed_over,
            sleeps: self.sleeps + other.sleeps,
            wakes: self.wakes + other.wakes,
        }
    }
}

/// The counters, kept in the lock itself: the holder updates its own with a
/// plain load and store on a line it already owns (a shared counter would
/// cost a cache-line transfer per tenure); only `sleeps`, counted by
/// waiters, needs a read-modify-write. Relaxed, outside loom's model: they
/// order nothing.
pub(super) struct Counters {
    pub(super) combined: unmodelled::AtomicU64,
    pub(super) tenures: unmodelled::AtomicU64,
    pub(super) handed_over: unmodelled::AtomicU64,
    pub(super) sleeps: unmodelled::AtomicU64,
    pub(super) wakes: unmodelled::AtomicU64,
}

impl Counters {
    pub(super) const fn new() -> Counters {
        Counters {
            combined: unmodelled::AtomicU64::new(0),
            tenures: unmodelled::AtomicU64::new(0),
            handed_over: unmodelled::AtomicU64::new(0),
            sleeps: unmodelled::AtomicU64::new(0),
            wakes: unmodelled::AtomicU64::new(0),
        }
    }

    /// Adds `n` to a counter only the holder writes.
    #[inline]
    pub(super) fn add_held(counter: &unmodelled::AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> CombiningStats {
        CombiningStats {
            combined: self.combined.load(Ordering::Relaxed),
            tenures: self.tenures.load(Ordering::Relaxed),
            handed_over: self.handed_over.load(Ordering::Relaxed),
            sleeps: self.sleeps.load(Ordering::Relaxed),
            wakes: self.wakes.load(Ordering::Relaxed),
        }
    }

    pub(super) fn reset(&self) {
        for c in [
            &self.combined,
            &self.tenures,
            &self.handed_over,
            &self.sleeps,
            &self.wakes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}
