//! The counter block behind a [`Stat`](super::Stat): the cold per-side
//! counters and histograms, and the two ways a counter is bumped (a plain
//! load and store by the exclusive holder, an atomic read-modify-write by
//! everyone else).

use super::snapshot::{Histogram, SideStats, BUCKETS};
use crate::sync::unmodelled::AtomicU64;
use crate::sync::Ordering::Relaxed;

/// Counters touched only by contended acquisitions and timed holds.
pub(super) struct Counters {
    /// Clock ticks when the per-mille window began, 0 if it has not.
    pub(super) start: AtomicU64,
    pub(super) write: SideCounters,
    pub(super) read: SideCounters,
    pub(super) wait_hist: [AtomicU64; BUCKETS],
    pub(super) hold_hist: [AtomicU64; BUCKETS],
    /// The counts at the last reset, which snapshots subtract.
    pub(super) base: Baseline,
}

/// The additive counts as they stood at the last reset
/// ([`Stat::reset`](super::Stat::reset)): snapshots report the counts
/// since. A reset that zeroed the counters instead would race with an
/// exclusive holder's load and store ([`add`]), which could store the whole
/// earlier count back; a baseline read during an update is off by that one
/// update. The maxima are not additive: a reset zeroes them, and a racing
/// holder can only store its own sample.
pub(super) struct Baseline {
    write_free: AtomicU64,
    read_free: AtomicU64,
    write: SideCounters,
    read: SideCounters,
    wait_hist: [AtomicU64; BUCKETS],
    hold_hist: [AtomicU64; BUCKETS],
}

/// A lock's counts, as plain numbers.
pub(super) struct Counts {
    pub(super) write: SideStats,
    pub(super) read: SideStats,
    pub(super) wait: Histogram,
    pub(super) hold: Histogram,
}

impl Counts {
    /// The counts since `base`, maxima as they are.
    pub(super) fn since(&self, base: &Counts) -> Counts {
        Counts {
            write: self.write.since(&base.write),
            read: self.read.since(&base.read),
            wait: self.wait.since(&base.wait),
            hold: self.hold.since(&base.hold),
        }
    }
}

/// Copies `atomics` into a histogram.
fn histogram(atomics: &[AtomicU64; BUCKETS]) -> Histogram {
    let mut h = Histogram::default();
    for (dst, src) in h.buckets.iter_mut().zip(atomics) {
        *dst = src.load(Relaxed);
    }
    h
}

/// Stores `h` into `atomics`.
fn store_histogram(atomics: &[AtomicU64; BUCKETS], h: &Histogram) {
    for (dst, &src) in atomics.iter().zip(&h.buckets) {
        dst.store(src, Relaxed);
    }
}

impl Baseline {
    const fn new() -> Self {
        Baseline {
            write_free: AtomicU64::new(0),
            read_free: AtomicU64::new(0),
            write: SideCounters::new(),
            read: SideCounters::new(),
            wait_hist: [const { AtomicU64::new(0) }; BUCKETS],
            hold_hist: [const { AtomicU64::new(0) }; BUCKETS],
        }
    }

    pub(super) fn load(&self) -> Counts {
        Counts {
            write: self.write.snapshot(self.write_free.load(Relaxed)),
            read: self.read.snapshot(self.read_free.load(Relaxed)),
            wait: histogram(&self.wait_hist),
            hold: histogram(&self.hold_hist),
        }
    }

    pub(super) fn store(&self, counts: &Counts) {
        self.write_free.store(counts.write.free, Relaxed);
        self.read_free.store(counts.read.free, Relaxed);
        self.write.store(&counts.write);
        self.read.store(&counts.read);
        store_histogram(&self.wait_hist, &counts.wait);
        store_histogram(&self.hold_hist, &counts.hold);
    }
}

/// The counters of one side (writers or readers).
pub(super) struct SideCounters {
    pub(super) contended: AtomicU64,
    pub(super) wait_total: AtomicU64,
    pub(super) wait_max: AtomicU64,
    pub(super) hold_samples: AtomicU64,
    pub(super) hold_total: AtomicU64,
    pub(super) hold_max: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) timeout_wait: AtomicU64,
}

/// Adds `v`, returning the old value. `excl`: the caller holds the lock
/// exclusively and is the only writer, so a load and a store suffice (the
/// lock's own acquire and release order them against the previous and next
/// holders); otherwise an atomic read-modify-write.
#[inline(always)]
pub(super) fn add(a: &AtomicU64, v: u64, excl: bool) -> u64 {
    if excl {
        let old = a.load(Relaxed);
        a.store(old.wrapping_add(v), Relaxed);
        old
    } else {
        a.fetch_add(v, Relaxed)
    }
}

/// Raises `a` to `v` if `v` is larger; `excl` as for [`add`].
#[inline(always)]
pub(super) fn raise(a: &AtomicU64, v: u64, excl: bool) {
    if v > a.load(Relaxed) {
        if excl {
            a.store(v, Relaxed);
        } else {
            a.fetch_max(v, Relaxed);
        }
    }
}

impl SideCounters {
    pub(super) const fn new() -> Self {
        SideCounters {
            contended: AtomicU64::new(0),
            wait_total: AtomicU64::new(0),
            wait_max: AtomicU64::new(0),
            hold_samples: AtomicU64::new(0),
            hold_total: AtomicU64::new(0),
            hold_max: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            timeout_wait: AtomicU64::new(0),
        }
    }

    /// Zeroes the maxima (see [`Baseline`] for the sums).
    pub(super) fn reset_maxima(&self) {
        self.wait_max.store(0, Relaxed);
        self.hold_max.store(0, Relaxed);
    }

    /// Stores `s`'s sums, as a [`Baseline`]'s side.
    fn store(&self, s: &SideStats) {
        self.contended.store(s.contended, Relaxed);
        self.wait_total.store(s.wait_total_ns, Relaxed);
        self.hold_samples.store(s.hold_samples, Relaxed);
        self.hold_total.store(s.hold_sampled_ns, Relaxed);
        self.timeouts.store(s.timeouts, Relaxed);
        self.timeout_wait.store(s.timeout_wait_ns, Relaxed);
    }

    pub(super) fn snapshot(&self, free: u64) -> SideStats {
        SideStats {
            free,
            contended: self.contended.load(Relaxed),
            wait_total_ns: self.wait_total.load(Relaxed),
            wait_max_ns: self.wait_max.load(Relaxed),
            hold_samples: self.hold_samples.load(Relaxed),
            hold_sampled_ns: self.hold_total.load(Relaxed),
            hold_max_ns: self.hold_max.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            timeout_wait_ns: self.timeout_wait.load(Relaxed),
        }
    }
}

impl Counters {
    pub(super) const fn new() -> Self {
        Counters {
            start: AtomicU64::new(0),
            write: SideCounters::new(),
            read: SideCounters::new(),
            wait_hist: [const { AtomicU64::new(0) }; BUCKETS],
            hold_hist: [const { AtomicU64::new(0) }; BUCKETS],
            base: Baseline::new(),
        }
    }

    /// The counts as they stand, `write_free` and `read_free` the
    /// [`Stat`](super::Stat)'s own.
    pub(super) fn counts(&self, write_free: u64, read_free: u64) -> Counts {
        Counts {
            write: self.write.snapshot(write_free),
            read: self.read.snapshot(read_free),
            wait: histogram(&self.wait_hist),
            hold: histogram(&self.hold_hist),
        }
    }
}
