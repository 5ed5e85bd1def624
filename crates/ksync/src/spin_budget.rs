//! How long a waiter spins before it sleeps: about one context switch,
//! measured on this machine.
//!
//! A waiter that will have to sleep anyway should stop spinning once it has
//! spent what sleeping and being woken would have cost: past that point the
//! spinning is pure loss, and when threads outnumber cores it also takes the
//! CPU from the thread the waiter is waiting for. The kernel can ask whether
//! a lock's owner is on a CPU; user space cannot, so ksync's sleeping locks
//! bound their spinning by time instead, and the time is the cost of a
//! context switch here.
//!
//! [`context_switch`] measures it once per process, in the background: two
//! threads hand a futex word back and forth a hundred times, and one hand-off
//! (a `FUTEX_WAKE`, the wake-up, and the woken thread running) is half a round
//! trip; the tenth fastest of the hundred is kept. The measurement starts
//! when a lock first has a waiter, which is often when the process is
//! busiest, and a hand-off that finds every CPU busy waits for its turn, up
//! to a scheduler time slice (a millisecond or more): an average counts
//! those (with 32 threads spinning on 2 CPUs, averages of 20 hand-offs read
//! 98 to 192 us where the hand-off costs 3 us). Load only ever adds to a
//! hand-off, so a low quantile of single hand-offs is the cost itself as
//! long as one in ten still ran at once; the median was not enough (beside
//! sembench's 8 polling workers it read 10 to 14 us in three runs of five).
//! The error left is on the safe side: a quantile still inflated where nine
//! hand-offs in ten waited (two threads spinning in a lock on 2 CPUs: 18 us),
//! and a trip in which neither thread had gone to sleep yet reads low, which
//! only makes waiters sleep sooner. Until the measurement is in, the
//! default of [`DEFAULT_CONTEXT_SWITCH`] stands. Setting `KSYNC_SWITCH_NS` in
//! the environment (nanoseconds, 200 to 200000) skips the measurement; a
//! value that does not parse or lies outside those bounds is ignored, as a
//! measurement outside them would be. The lock that first
//! needs the figure starts the measuring thread; nothing is measured in a
//! process whose locks never wait.
//!
//! `SpinTimer` (crate-private) is the spinning side: it reads the clock every few polls, so
//! a spin loop checks its deadline without paying a clock read per poll.
//!
//! Under `--cfg loom` nothing is measured and every budget is spent at its
//! first check, so a spin loop polls once: loom cares which interleavings a
//! spin allows, not how long it lasts.

#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
#[cfg(not(loom))]
use std::time::Instant;

/// The context-switch cost assumed until the measurement is in (and where it
/// fails): 4 us, a typical futex hand-off between two CPUs of a virtual machine.
pub const DEFAULT_CONTEXT_SWITCH: Duration = Duration::from_micros(4);

/// Bounds for a measured or configured value: a figure outside them is a
/// broken measurement (or a typo), not a machine.
#[cfg(not(loom))]
const SANE_NS: core::ops::RangeInclusive<u64> = 200..=200_000;

/// 0: not asked for yet; 1: being measured; anything else: the cost in ns.
#[cfg(not(loom))]
static SWITCH_NS: AtomicU64 = AtomicU64::new(0);
#[cfg(not(loom))]
const MEASURING: u64 = 1;

/// The cost of one context switch on this machine: a futex wake-up and the
/// woken thread running. The first call starts the measurement in the
/// background and returns [`DEFAULT_CONTEXT_SWITCH`] until it is done.
///
/// ```
/// let switch = ksync::spin_budget::context_switch();
/// assert!(switch > std::time::Duration::ZERO);
/// ```
pub fn context_switch() -> Duration {
    Duration::from_nanos(context_switch_ns())
}

/// The figure [`context_switch`] settled on in this process: measured, or
/// set by `KSYNC_SWITCH_NS`; `None` while no lock has needed it yet or the
/// measurement is still running (when [`context_switch`] answers the
/// default). For reports that say what budget a run's locks spun with.
///
/// ```
/// use ksync::spin_budget::{context_switch, measured_context_switch};
/// // Nothing asked for the figure yet in this program, or it came in.
/// if let Some(switch) = measured_context_switch() {
///     assert_eq!(switch, context_switch());
/// }
/// ```
pub fn measured_context_switch() -> Option<Duration> {
    #[cfg(not(loom))]
    return match SWITCH_NS.load(Ordering::Relaxed) {
        0 | MEASURING => None,
        ns => Some(Duration::from_nanos(ns)),
    };
    #[cfg(loom)]
    None
}

/// [`context_switch`] in nanoseconds, the form the spin loops use.
#[cfg(not(loom))]
#[inline]
pub(crate) fn context_switch_ns() -> u64 {
    match SWITCH_NS.load(Ordering::Relaxed) {
        0 => start_measuring(),
        MEASURING => DEFAULT_CONTEXT_SWITCH.as_nanos() as u64,
        ns => ns,
    }
}

#[cfg(loom)]
pub(crate) fn context_switch_ns() -> u64 {
    DEFAULT_CONTEXT_SWITCH.as_nanos() as u64
}

/// Claims the measurement for this call and starts it; returns the default
/// for now.
#[cfg(not(loom))]
#[cold]
fn start_measuring() -> u64 {
    let default = DEFAULT_CONTEXT_SWITCH.as_nanos() as u64;
    if SWITCH_NS
        .compare_exchange(0, MEASURING, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return default;
    }
    if let Some(ns) = std::env::var("KSYNC_SWITCH_NS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ns| SANE_NS.contains(ns))
    {
        SWITCH_NS.store(ns, Ordering::Relaxed);
        return ns;
    }
    let spawned = std::thread::Builder::new()
        .name("ksync-switch-cost".into())
        .spawn(move || {
            let ns = measure()
                .filter(|ns| SANE_NS.contains(ns))
                .unwrap_or(default);
            SWITCH_NS.store(ns, Ordering::Relaxed);
        });
    if spawned.is_err() {
        SWITCH_NS.store(default, Ordering::Relaxed);
    }
    default
}

/// The cost of a hand-off, from `hand_offs` (nanoseconds each): their
/// tenth percentile, which the hand-offs that waited for a CPU do not move
/// while one in ten did not wait (see the module docs). Sorts `hand_offs`;
/// `None` if there are none.
#[cfg(not(loom))]
fn hand_off_cost(hand_offs: &mut [u64]) -> Option<u64> {
    hand_offs.sort_unstable();
    hand_offs.get(hand_offs.len() / 10).copied()
}

/// The [`hand_off_cost`] of 100 futex round trips between this thread and a
/// partner, each halved. `None` if the partner cannot be started.
#[cfg(not(loom))]
fn measure() -> Option<u64> {
    use crate::futex;
    use crate::sync::AtomicU32;
    use std::sync::Arc;

    const TRIPS: u32 = 100;
    // Odd values are the partner's turn, even values ours; it stops at `done`.
    let word = Arc::new(AtomicU32::new(0));
    let done = 2 * TRIPS;
    let partner = {
        let word = Arc::clone(&word);
        std::thread::Builder::new()
            .name("ksync-switch-cost-partner".into())
            .spawn(move || loop {
                let seen = word.load(Ordering::Acquire);
                if seen >= done {
                    return;
                }
                if seen % 2 == 1 {
                    word.store(seen + 1, Ordering::Release);
                    futex::wake(&word, 1);
                } else {
                    futex::wait(&word, seen, None);
                }
            })
            .ok()?
    };
    let mut hand_offs = Vec::with_capacity(TRIPS as usize);
    let mut turn = 0;
    for _ in 0..TRIPS {
        let start = Instant::now();
        word.store(turn + 1, Ordering::Release);
        futex::wake(&word, 1);
        turn += 2;
        while word.load(Ordering::Acquire) != turn {
            futex::wait(&word, turn - 1, None);
        }
        hand_offs.push(start.elapsed().as_nanos() as u64 / 2);
    }
    partner.join().ok()?;
    hand_off_cost(&mut hand_offs)
}

/// A spin deadline about `budget` nanoseconds away, checked against the clock
/// every [`SpinTimer::CHECK_EVERY`] polls.
pub(crate) struct SpinTimer {
    #[cfg(not(loom))]
    deadline: Option<Instant>,
    #[cfg(not(loom))]
    budget_ns: u64,
    polls: u32,
}

impl SpinTimer {
    /// Polls between two clock reads after the first: a clock read costs
    /// about as much as a few polls of a cached word.
    #[cfg_attr(loom, allow(dead_code))]
    const CHECK_EVERY: u32 = 8;

    /// A timer for `budget_ns`; the clock is first read at the first check,
    /// so a wait that ends at once never reads it.
    #[inline]
    pub(crate) fn new(budget_ns: u64) -> SpinTimer {
        #[cfg(loom)]
        let _ = budget_ns;
        SpinTimer {
            #[cfg(not(loom))]
            deadline: None,
            #[cfg(not(loom))]
            budget_ns,
            polls: 0,
        }
    }

    /// A timer for one context switch ([`context_switch`]).
    #[inline]
    pub(crate) fn one_switch() -> SpinTimer {
        SpinTimer::new(context_switch_ns())
    }

    /// Counts one poll; true once the budget is spent. The first call starts
    /// the clock; later calls read it every [`CHECK_EVERY`](Self::CHECK_EVERY)
    /// polls.
    #[inline]
    pub(crate) fn expired(&mut self) -> bool {
        self.polls = self.polls.wrapping_add(1);
        #[cfg(loom)]
        return true;
        #[cfg(not(loom))]
        {
            match self.deadline {
                None => {
                    self.deadline = Some(Instant::now() + Duration::from_nanos(self.budget_ns));
                    false
                }
                Some(deadline) => {
                    self.polls.is_multiple_of(Self::CHECK_EVERY) && Instant::now() >= deadline
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_timer_expires_after_its_budget_and_not_before() {
        let mut timer = SpinTimer::new(2_000_000);
        let start = Instant::now();
        let mut polls = 0u64;
        while !timer.expired() {
            polls += 1;
        }
        assert!(start.elapsed() >= Duration::from_millis(2));
        assert!(polls >= u64::from(SpinTimer::CHECK_EVERY));
    }

    /// Most hand-offs waited for a CPU (10 us to 2 ms), as under load: the
    /// figure is the others' (an average of rounds would read hundreds of
    /// microseconds, the median tens).
    #[test]
    fn hand_offs_that_waited_for_a_cpu_do_not_move_the_figure() {
        let mut hand_offs: Vec<u64> = (0..100)
            .map(|i| match i % 10 {
                0 | 1 => 2_500 + i,
                2..=6 => 12_000 + i,
                _ => 2_000_000,
            })
            .collect();
        let figure = hand_off_cost(&mut hand_offs).unwrap();
        assert!((2_500..2_600).contains(&figure), "{figure}");
        assert_eq!(hand_off_cost(&mut []), None);
    }

    #[test]
    fn the_measurement_is_within_sane_bounds() {
        let ns = measure().expect("a partner thread");
        assert!(ns > 0, "{ns}");
        eprintln!("one futex hand-off here: {ns} ns");
    }

    #[test]
    fn context_switch_settles_on_a_sane_figure() {
        let first = context_switch_ns();
        assert!(SANE_NS.contains(&first), "{first}");
        // The background measurement finishes in well under a second.
        let start = Instant::now();
        while SWITCH_NS.load(Ordering::Relaxed) <= MEASURING {
            assert!(start.elapsed() < Duration::from_secs(30), "never measured");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(SANE_NS.contains(&context_switch_ns()));
        assert_eq!(measured_context_switch(), Some(context_switch()));
    }
}
