//! Plain-number copies of a lock's counters, in nanoseconds, that can be
//! summed over several locks and printed.

use core::fmt;

/// Number of buckets in a [`Histogram`].
pub const BUCKETS: usize = 32;

/// A log2 histogram of durations in nanoseconds.
///
/// Bucket 0 counts durations under 2 ns, bucket `i` (1 ≤ i < 31) those in
/// `[2^i, 2^(i+1))` ns, and bucket 31 everything from 2^31 ns (about 2.1 s)
/// up. Powers of two keep the recording path to one `leading_zeros`; a
/// factor-of-two resolution is what a latency question ("microseconds or
/// milliseconds?") needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Histogram {
    /// The counts, bucket 0 first.
    pub buckets: [u64; BUCKETS],
}

impl Histogram {
    /// The bucket a duration of `ns` nanoseconds falls in.
    #[inline]
    pub fn bucket_of(ns: u64) -> usize {
        ((63 - (ns | 1).leading_zeros()) as usize).min(BUCKETS - 1)
    }

    /// The smallest duration bucket `i` counts, in nanoseconds.
    pub fn bucket_floor_ns(i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            1u64 << i.min(BUCKETS - 1)
        }
    }

    /// The total of all buckets: the number of durations recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, &b| a.wrapping_add(b))
    }

    /// The counts since `base` was copied from the same counters.
    pub(super) fn since(&self, base: &Histogram) -> Histogram {
        let mut h = *self;
        for (a, b) in h.buckets.iter_mut().zip(&base.buckets) {
            *a = a.wrapping_sub(*b);
        }
        h
    }

    /// Adds `other`'s counts to this one's.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a = a.wrapping_add(*b);
        }
    }

    /// An upper bound, in nanoseconds, on the `q`-quantile (`q` in 0..=1, for
    /// example 0.99): the end of the bucket that holds it. `None` if the
    /// histogram is empty; `u64::MAX` if it is in the open last bucket.
    pub fn quantile_upper_bound_ns(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            // Saturating: the buckets are public, and `count` wraps.
            seen = seen.saturating_add(n);
            if seen >= rank {
                return Some(if i + 1 == BUCKETS {
                    u64::MAX
                } else {
                    Self::bucket_floor_ns(i + 1)
                });
            }
        }
        Some(u64::MAX)
    }
}

/// One side of a lock: its writers (every acquisition of a mutex) or its
/// readers.
///
/// Wait figures count contended acquisitions only (those whose first try
/// failed); a `try_lock` that succeeds counts as free, one that fails is not
/// counted. Hold figures are over the sampled acquisitions (see
/// [`Stat`](super::Stat)'s `HOLD` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SideStats {
    /// Acquisitions whose first try found the lock free.
    pub free: u64,
    /// Acquisitions that had to wait.
    pub contended: u64,
    /// Total wait of the contended acquisitions.
    pub wait_total_ns: u64,
    /// Longest single wait.
    pub wait_max_ns: u64,
    /// Acquisitions whose hold time was measured.
    pub hold_samples: u64,
    /// Total hold time of those.
    pub hold_sampled_ns: u64,
    /// Longest measured hold.
    pub hold_max_ns: u64,
    /// Timed acquisitions (`try_lock_for` and friends) that gave up.
    pub timeouts: u64,
    /// Total time those waited before giving up (not in `wait_total_ns`).
    pub timeout_wait_ns: u64,
}

impl SideStats {
    /// Acquisitions, free and contended.
    pub fn acquisitions(&self) -> u64 {
        self.free.wrapping_add(self.contended)
    }

    /// Mean wait of a contended acquisition (0 if none).
    pub fn wait_avg_ns(&self) -> u64 {
        self.wait_total_ns.checked_div(self.contended).unwrap_or(0)
    }

    /// Mean measured hold (0 if nothing was measured).
    pub fn hold_avg_ns(&self) -> u64 {
        self.hold_sampled_ns
            .checked_div(self.hold_samples)
            .unwrap_or(0)
    }

    /// Total hold time: exact when every acquisition was measured, else the
    /// mean measured hold times the number of acquisitions.
    pub fn hold_total_ns(&self) -> u64 {
        if self.hold_samples >= self.acquisitions() {
            return self.hold_sampled_ns;
        }
        let est = u128::from(self.hold_sampled_ns) * u128::from(self.acquisitions())
            / u128::from(self.hold_samples.max(1));
        est.min(u128::from(u64::MAX)) as u64
    }

    /// Whether anything at all was recorded on this side.
    pub fn is_empty(&self) -> bool {
        self.acquisitions() == 0 && self.timeouts == 0
    }

    /// The sums since `base` was copied from the same counters; the maxima
    /// as they are.
    pub(super) fn since(&self, base: &SideStats) -> SideStats {
        SideStats {
            free: self.free.wrapping_sub(base.free),
            contended: self.contended.wrapping_sub(base.contended),
            wait_total_ns: self.wait_total_ns.wrapping_sub(base.wait_total_ns),
            hold_samples: self.hold_samples.wrapping_sub(base.hold_samples),
            hold_sampled_ns: self.hold_sampled_ns.wrapping_sub(base.hold_sampled_ns),
            timeouts: self.timeouts.wrapping_sub(base.timeouts),
            timeout_wait_ns: self.timeout_wait_ns.wrapping_sub(base.timeout_wait_ns),
            ..*self
        }
    }

    /// Adds `other` to this side: sums, and the larger of the maxima.
    pub fn merge(&mut self, other: &SideStats) {
        self.free = self.free.wrapping_add(other.free);
        self.contended = self.contended.wrapping_add(other.contended);
        self.wait_total_ns = self.wait_total_ns.wrapping_add(other.wait_total_ns);
        self.wait_max_ns = self.wait_max_ns.max(other.wait_max_ns);
        self.hold_samples = self.hold_samples.wrapping_add(other.hold_samples);
        self.hold_sampled_ns = self.hold_sampled_ns.wrapping_add(other.hold_sampled_ns);
        self.hold_max_ns = self.hold_max_ns.max(other.hold_max_ns);
        self.timeouts = self.timeouts.wrapping_add(other.timeouts);
        self.timeout_wait_ns = self.timeout_wait_ns.wrapping_add(other.timeout_wait_ns);
    }
}

/// A copy of one lock's statistics (or the sum of several), taken by
/// [`Stat::snapshot`](super::Stat::snapshot).
///
/// A snapshot taken while the lock is in use is a set of separate relaxed
/// reads, so its fields may disagree by the acquisitions in flight (a
/// contended count one ahead of the histogram); one taken while nobody uses
/// the lock is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockStatSnapshot {
    /// How many locks were summed into this snapshot.
    pub locks: u64,
    /// Exclusive acquisitions: every acquisition of a mutex, the writers of a
    /// reader-writer lock.
    pub write: SideStats,
    /// Shared acquisitions of a reader-writer lock.
    pub read: SideStats,
    /// Waits of contended acquisitions, readers and writers together.
    pub wait_histogram: Histogram,
    /// Measured holds, readers and writers together.
    pub hold_histogram: Histogram,
    /// Time from the start of the lock's window (see
    /// [`Stat`](super::Stat)) to the snapshot; the longest one when merged.
    pub elapsed_ns: u64,
    /// The CPUs the process may run on (affinity and CPU quota), as first
    /// asked by the process.
    pub cpus: u32,
}

impl LockStatSnapshot {
    /// Acquisitions that found the lock free, readers and writers.
    pub fn free(&self) -> u64 {
        self.write.free.wrapping_add(self.read.free)
    }

    /// Acquisitions that had to wait, readers and writers.
    pub fn contended(&self) -> u64 {
        self.write.contended.wrapping_add(self.read.contended)
    }

    /// All acquisitions.
    pub fn acquisitions(&self) -> u64 {
        self.free().wrapping_add(self.contended())
    }

    /// Total wait of contended acquisitions.
    pub fn wait_total_ns(&self) -> u64 {
        self.write
            .wait_total_ns
            .wrapping_add(self.read.wait_total_ns)
    }

    /// Longest wait.
    pub fn wait_max_ns(&self) -> u64 {
        self.write.wait_max_ns.max(self.read.wait_max_ns)
    }

    /// Mean wait of a contended acquisition (0 if none).
    pub fn wait_avg_ns(&self) -> u64 {
        self.wait_total_ns()
            .checked_div(self.contended())
            .unwrap_or(0)
    }

    /// Total hold time, exact or estimated as in [`SideStats::hold_total_ns`].
    pub fn hold_total_ns(&self) -> u64 {
        self.write
            .hold_total_ns()
            .saturating_add(self.read.hold_total_ns())
    }

    /// Longest measured hold.
    pub fn hold_max_ns(&self) -> u64 {
        self.write.hold_max_ns.max(self.read.hold_max_ns)
    }

    /// Acquisitions whose hold was measured.
    pub fn hold_samples(&self) -> u64 {
        self.write.hold_samples.wrapping_add(self.read.hold_samples)
    }

    /// Mean measured hold (0 if none).
    pub fn hold_avg_ns(&self) -> u64 {
        self.write
            .hold_sampled_ns
            .wrapping_add(self.read.hold_sampled_ns)
            .checked_div(self.hold_samples())
            .unwrap_or(0)
    }

    /// The waits as per-mille of the usable CPUs' time over the window:
    /// `1000 * wait / (elapsed * cpus)`, rounded down as Spraul's 2010 kernel
    /// patch did (47.07% printed as 470). 0 when no time has elapsed.
    pub fn per_mille(&self) -> u64 {
        per_mille(self.wait_total_ns(), self.elapsed_ns, self.cpus)
    }

    /// Adds `other` into this snapshot: counts, totals and histograms sum,
    /// maxima take the larger, and the window is the longer of the two (the
    /// per-mille of locks that lived side by side).
    pub fn merge(&mut self, other: &LockStatSnapshot) {
        self.locks = self.locks.wrapping_add(other.locks);
        self.write.merge(&other.write);
        self.read.merge(&other.read);
        self.wait_histogram.merge(&other.wait_histogram);
        self.hold_histogram.merge(&other.hold_histogram);
        self.elapsed_ns = self.elapsed_ns.max(other.elapsed_ns);
        self.cpus = self.cpus.max(other.cpus);
    }

    /// [`merge`](Self::merge) by value.
    pub fn merged(mut self, other: &LockStatSnapshot) -> LockStatSnapshot {
        self.merge(other);
        self
    }

    /// The one-line summary in the format of the lock-statistics patch in
    /// Manfred Spraul's "ipc/sem.c: Optimization for reducing spinlock
    /// contention" (LKML, April 2010),
    /// `free F contended C wait W avg A 1/1000 cpu time P`, with `W` and `A`
    /// in nanoseconds (the kernel patch printed TSC cycles; multiply by
    /// [`ClockSource::hz`](super::ClockSource::hz)` / 10^9` for those).
    pub fn summary_line(&self) -> String {
        format!(
            "free {} contended {} wait {} avg {} 1/1000 cpu time {}",
            self.free(),
            self.contended(),
            self.wait_total_ns(),
            self.wait_avg_ns(),
            self.per_mille()
        )
    }
}

impl core::iter::Sum for LockStatSnapshot {
    fn sum<I: Iterator<Item = LockStatSnapshot>>(iter: I) -> Self {
        iter.fold(LockStatSnapshot::default(), |a, b| a.merged(&b))
    }
}

impl<'a> core::iter::Sum<&'a LockStatSnapshot> for LockStatSnapshot {
    fn sum<I: Iterator<Item = &'a LockStatSnapshot>>(iter: I) -> Self {
        iter.fold(LockStatSnapshot::default(), |a, b| a.merged(b))
    }
}

impl fmt::Display for LockStatSnapshot {
    /// The one-line summary; see [`summary_line`](Self::summary_line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary_line())
    }
}

pub(crate) fn per_mille(wait_ns: u64, elapsed_ns: u64, cpus: u32) -> u64 {
    let cpu_ns = u128::from(elapsed_ns) * u128::from(cpus.max(1));
    if cpu_ns == 0 {
        return 0;
    }
    (u128::from(wait_ns) * 1000 / cpu_ns).min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(Histogram::bucket_of(0), 0);
        assert_eq!(Histogram::bucket_of(1), 0);
        assert_eq!(Histogram::bucket_of(2), 1);
        assert_eq!(Histogram::bucket_of(3), 1);
        assert_eq!(Histogram::bucket_of(4), 2);
        assert_eq!(Histogram::bucket_of(1023), 9);
        assert_eq!(Histogram::bucket_of(1024), 10);
        assert_eq!(Histogram::bucket_of(1 << 31), 31);
        assert_eq!(Histogram::bucket_of(u64::MAX), 31);
        for i in 1..BUCKETS {
            assert_eq!(Histogram::bucket_of(Histogram::bucket_floor_ns(i)), i);
            assert_eq!(
                Histogram::bucket_of(Histogram::bucket_floor_ns(i) - 1),
                i - 1
            );
        }
    }

    #[test]
    fn spraul_2010_figures() {
        // Before the series: 110278262115 cycles waited over 58573142769
        // cycles on 4 CPUs printed 470 (47.07%).
        assert_eq!(per_mille(110_278_262_115, 58_573_142_769, 4), 470);
        assert_eq!(per_mille(2_625_106_215, 59_518_717_621, 4), 11);
        assert_eq!(per_mille(5, 0, 4), 0);
    }

    #[test]
    fn quantiles_are_bucket_ends() {
        let mut h = Histogram::default();
        h.buckets[3] = 90; // 8..16 ns
        h.buckets[10] = 10; // 1024..2048 ns
        assert_eq!(h.quantile_upper_bound_ns(0.5), Some(16));
        assert_eq!(h.quantile_upper_bound_ns(0.9), Some(16));
        assert_eq!(h.quantile_upper_bound_ns(0.95), Some(2048));
        assert_eq!(Histogram::default().quantile_upper_bound_ns(0.5), None);
    }

    #[test]
    fn hold_total_is_scaled_from_samples() {
        let s = SideStats {
            free: 90,
            contended: 10,
            hold_samples: 4,
            hold_sampled_ns: 400,
            ..SideStats::default()
        };
        assert_eq!(s.hold_avg_ns(), 100);
        assert_eq!(s.hold_total_ns(), 10_000);
    }
}
