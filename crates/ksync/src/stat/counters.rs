//! The counter block behind a [`Stat`](super::Stat): the cold per-side
//! counters and histograms, and the two ways a counter is bumped (a plain
//! load and store by the exclusive holder, an atomic read-modify-write by
//! everyone else).

use super::snapshot::{SideStats, BUCKETS};
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

    pub(super) fn reset(&self) {
        for a in [
            &self.contended,
            &self.wait_total,
            &self.wait_max,
            &self.hold_samples,
            &self.hold_total,
            &self.hold_max,
            &self.timeouts,
            &self.timeout_wait,
        ] {
            a.store(0, Relaxed);
        }
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
        }
    }
}
