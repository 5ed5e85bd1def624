//! The clock lock statistics read: the CPU's cycle counter where it ticks at
//! a constant rate, else the monotonic clock.
//!
//! Why a cycle counter: the wait path reads the clock twice per contended
//! acquisition and the sampled hold path twice per sample; `rdtsc` is a few
//! nanoseconds where `Instant::now` (a vDSO `clock_gettime`) is several times
//! that, and Manfred Spraul's lock statistics patch ("ipc/sem.c: Optimization
//! for reducing spinlock contention", LKML, April 2010) measured with
//! `rdtscll` for the same reason. The counter is only trusted when the CPU says it is invariant
//! (CPUID leaf `0x8000_0007`, EDX bit 8: constant rate, and it keeps ticking
//! in deep C-states) or when Linux says so (`constant_tsc` and `nonstop_tsc`
//! in `/proc/cpuinfo`, which covers hypervisors that hide the CPUID bit).
//! Linux keeps the counters of all CPUs in step on such machines, so an
//! interval that starts on one CPU and ends on another is still right; a
//! difference that comes out negative anyway is taken as zero.
//!
//! Ticks are turned into nanoseconds with a rate measured once against
//! [`Instant`]: two (counter, `Instant`) pairs about 2 ms apart, each pair
//! bracketed by two counter reads and retaken if the bracket is wide (the
//! thread was interrupted between the reads). That costs one 2 ms sleep per
//! process, paid by the first caller of [`calibrate`] (or of anything that
//! needs the rate: a lock's first contended acquisition, registering a lock,
//! a snapshot), never inside a held lock.
//!
//! `rdtsc` is not a serializing instruction, so a read may drift by a few
//! dozen cycles against surrounding loads; waits worth measuring are longer.
//!
//! Setting `KSYNC_STAT_CLOCK=monotonic` in the environment forces the
//! monotonic clock (to compare the two, or on a machine whose counter is
//! known to be bad).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where lock statistics get their time from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// The x86 time-stamp counter, invariant on this machine, ticking `hz`
    /// times a second (measured against the monotonic clock).
    Tsc {
        /// Measured ticks per second.
        hz: u64,
    },
    /// `std::time::Instant` (`CLOCK_MONOTONIC`), in nanoseconds.
    Monotonic,
}

impl ClockSource {
    /// A short name: `"tsc"` or `"monotonic"`.
    pub fn name(&self) -> &'static str {
        match self {
            ClockSource::Tsc { .. } => "tsc",
            ClockSource::Monotonic => "monotonic",
        }
    }

    /// Ticks per second: the TSC rate, or 10^9 for the monotonic clock.
    pub fn hz(&self) -> u64 {
        match *self {
            ClockSource::Tsc { hz } => hz,
            ClockSource::Monotonic => 1_000_000_000,
        }
    }
}

/// The chosen clock, fixed at the first [`calibrate`].
struct Clock {
    tsc: bool,
    /// Nanoseconds per tick as a 32.32 fixed-point number.
    ns_per_tick_q32: u64,
    hz: u64,
    /// The origin of monotonic ticks (so they fit a `u64` and are never 0).
    base: Instant,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();

/// Picks the clock and measures its rate, once per process; later calls
/// return at once. Blocks about 2 ms the first time when the clock is the
/// TSC. Call it early to keep that pause out of the first contended wait.
pub fn calibrate() -> ClockSource {
    source_of(clock())
}

/// The clock in use (calibrating it first if need be).
pub fn source() -> ClockSource {
    calibrate()
}

fn source_of(c: &Clock) -> ClockSource {
    if c.tsc {
        ClockSource::Tsc { hz: c.hz }
    } else {
        ClockSource::Monotonic
    }
}

fn clock() -> &'static Clock {
    CLOCK.get_or_init(|| {
        let base = Instant::now();
        let forced_monotonic =
            std::env::var_os("KSYNC_STAT_CLOCK").is_some_and(|v| v == "monotonic");
        if !forced_monotonic && invariant_tsc() {
            if let Some(hz) = measure_tsc_hz() {
                return Clock {
                    tsc: true,
                    ns_per_tick_q32: ((1_000_000_000u128 << 32) / u128::from(hz)) as u64,
                    hz,
                    base,
                };
            }
        }
        Clock {
            tsc: false,
            ns_per_tick_q32: 1 << 32,
            hz: 1_000_000_000,
            base,
        }
    })
}

/// The current time in ticks, calibrating the clock first if need be.
/// Never 0, so 0 can mean "no time taken".
#[inline]
pub(crate) fn now() -> u64 {
    read(clock())
}

/// The current time in ticks if the clock is already calibrated, else 0.
/// For paths that must not block (a lock is held).
#[inline]
pub(crate) fn now_if_ready() -> u64 {
    match CLOCK.get() {
        Some(c) => read(c),
        None => 0,
    }
}

#[inline]
fn read(c: &Clock) -> u64 {
    if c.tsc {
        rdtsc().max(1)
    } else {
        (c.base.elapsed().as_nanos() as u64).saturating_add(1)
    }
}

/// Converts a tick count (a difference of two [`now`]s) to nanoseconds.
#[inline]
pub(crate) fn ticks_to_ns(ticks: u64) -> u64 {
    let Some(c) = CLOCK.get() else {
        return ticks;
    };
    ((u128::from(ticks) * u128::from(c.ns_per_tick_q32)) >> 32).min(u128::from(u64::MAX)) as u64
}

/// Nanoseconds from `start` (a [`now`]) to `end` (a later [`now`]), zero if
/// the counters of two CPUs disagree enough to make it negative.
#[inline]
pub(crate) fn elapsed_ns(start: u64, end: u64) -> u64 {
    ticks_to_ns(end.saturating_sub(start))
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter and has no other effect;
    // every x86_64 CPU has it, and Linux leaves it enabled for user space
    // (CR4.TSD clear) on the machines where `invariant_tsc` said yes.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    unreachable!("the TSC is only chosen on x86_64")
}

/// Whether the TSC ticks at a constant rate through frequency changes and
/// idle states, by CPUID or by Linux's flags.
fn invariant_tsc() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        let max_extended = __cpuid(0x8000_0000).eax;
        if max_extended >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0 {
            return true;
        }
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return false;
        };
        let Some(flags) = info.lines().find(|l| l.starts_with("flags")) else {
            return false;
        };
        let has = |f: &str| flags.split_whitespace().any(|w| w == f);
        has("constant_tsc") && has("nonstop_tsc")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Ticks per second, from two (TSC, `Instant`) pairs about 2 ms apart; `None`
/// if the result is not a plausible clock rate (1 MHz to 100 GHz).
fn measure_tsc_hz() -> Option<u64> {
    let (t0, i0) = tsc_instant_pair();
    std::thread::sleep(Duration::from_millis(2));
    let (t1, i1) = tsc_instant_pair();
    let ns = i1.duration_since(i0).as_nanos();
    let ticks = u128::from(t1.checked_sub(t0)?);
    if ns == 0 {
        return None;
    }
    let hz = u64::try_from(ticks * 1_000_000_000 / ns).ok()?;
    (1_000_000..=100_000_000_000).contains(&hz).then_some(hz)
}

/// One TSC reading and one `Instant` taken as close together as we can: the
/// `Instant` bracketed by two TSC reads, keeping the narrowest of a few tries,
/// with the TSC taken as the bracket's midpoint.
fn tsc_instant_pair() -> (u64, Instant) {
    let mut best: Option<(u64, u64, Instant)> = None;
    for _ in 0..16 {
        let a = rdtsc();
        let i = Instant::now();
        let b = rdtsc();
        let width = b.wrapping_sub(a);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, a + width / 2, i));
        }
    }
    let (_, t, i) = best.expect("sixteen tries");
    (t, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_measure_a_sleep() {
        let src = calibrate();
        assert!(src.hz() >= 1_000_000);
        let a = now();
        std::thread::sleep(Duration::from_millis(20));
        let b = now();
        let ns = elapsed_ns(a, b);
        assert!(ns >= 20_000_000, "{ns} ns for a 20 ms sleep on {src:?}");
    }

    #[test]
    fn never_zero_and_never_backwards_on_one_thread() {
        calibrate();
        let mut last = now();
        for _ in 0..1000 {
            let t = now();
            assert!(t != 0 && t >= last);
            last = t;
        }
        assert_ne!(now_if_ready(), 0);
    }
}
