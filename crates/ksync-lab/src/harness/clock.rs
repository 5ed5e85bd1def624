//! Time and busy work inside measured loops: a timestamp cheap enough to
//! take every round ([`ticks`], converted by [`TickScale`]), the CPU relax
//! that critical sections and backoff are counted in ([`relax`]), and
//! busy-waiting for a wall-clock time ([`busy`]).

use std::hint::black_box;
use std::time::{Duration, Instant};

/// `n` CPU relaxes (`pause` on x86): the unit of critical-section work and
/// of the ticket lock's backoff.
#[inline(always)]
pub fn relax(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// Nanoseconds per [`relax`], measured now (best of a few rounds).
pub fn relax_ns() -> f64 {
    const N: u32 = 200_000;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            relax(black_box(N));
            start.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Spins for `d` of wall-clock time; nothing at all (not even a clock
/// read) for zero, which the single-thread fast-path mixes rely on.
#[inline]
pub fn busy(d: Duration) {
    if d.is_zero() {
        return;
    }
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// A cheap timestamp in unspecified ticks, converted with [`TickScale`].
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Converts ticks to nanoseconds from two (instant, ticks) readings: one
/// when the run starts, one when it is converted.
pub struct TickScale {
    start: (Instant, u64),
}

impl TickScale {
    /// The first reading; the run starts now.
    pub fn start() -> Self {
        TickScale {
            start: (Instant::now(), ticks()),
        }
    }

    /// When [`start`](Self::start) was called.
    pub fn started(&self) -> Instant {
        self.start.0
    }

    /// Nanoseconds per tick between the start and now.
    pub fn ns_per_tick(&self) -> f64 {
        let ns = self.start.0.elapsed().as_nanos() as f64;
        let t = ticks().wrapping_sub(self.start.1) as f64;
        if t > 0.0 {
            ns / t
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_waits_at_least_as_long_as_asked() {
        let start = Instant::now();
        busy(Duration::from_millis(2));
        assert!(start.elapsed() >= Duration::from_millis(2));
        busy(Duration::ZERO);
    }

    #[test]
    fn ticks_advance_and_convert() {
        let scale = TickScale::start();
        let t0 = ticks();
        busy(Duration::from_millis(2));
        let t1 = ticks();
        assert!(t1 > t0);
        assert!(scale.ns_per_tick() > 0.0);
    }
}
