//! How many times a blocked thread polls before it sleeps, learned per
//! thread from how its waits went.
//!
//! A waiter completed while it still polls costs neither it nor its waker a
//! system call; polling for a wake-up that comes much later only burns CPU
//! time that the thread it waits for may need. So each thread learns its own
//! budget: doubled when a wait ended during the poll, halved when it had to
//! sleep, and dropped to nothing below [`MIN_POLLS`]. A thread at nothing
//! sleeps at once, and once in [`PROBE_EVERY`] waits it probes with
//! [`PROBE_POLLS`] polls to notice when its waits become short again: a probe
//! that fails goes straight back to nothing, one that succeeds starts again
//! from twice the probe. Ping-pong between two threads learns to poll;
//! sembench's 250 workers, reposted only after hundreds of other wake-ups,
//! learn not to.
//!
//! **The probes are timed.** The wait on which a thread at nothing would
//! probe is timed, from its start to its end, probe and sleep included. A
//! wait that lasted more than [`LONG_WAIT_SWITCHES`] context switches
//! (`spin_budget::context_switch`) could not have been caught by a probe,
//! which lasts less than one: while the timed waits are that long the thread
//! skips its probes (it still times one wait in [`PROBE_EVERY`], sleeping at
//! once), and the first timed wait short enough brings them back. Untimed
//! probes cost sembench `-t 250 -w 64`'s workers, whose waits last hundreds
//! of microseconds, 128 polls on one wait in 16 that never succeeded: about
//! 0.2 us of a burn's 2.8 us on two CPUs (BENCHMARKS.md, issue 12's eleventh
//! round). Timing costs two clock reads on one wait in [`PROBE_EVERY`].
//!
//! **A thread that keeps catching its waits while polling gives its CPU up
//! now and then.** Polling is the user-space form of the kernel's optimistic
//! spinning, which stops as soon as another task wants the CPU
//! (`need_resched`). User space cannot see that. A waiter whose partner
//! runs on another CPU and answers within a few polls can go on for a whole
//! time slice: it polls, is answered, calls again, polls, never sleeping,
//! while threads woken onto its CPU wait for it. On a 2-CPU guest with 250
//! sembench workers, a few workers did exactly that with the posting main
//! thread, and in some runs others burned less than one time in a hundred
//! as often as they did (BENCHMARKS.md, issue 12's twelfth round). So after
//! [`YIELD_AFTER`] waits in a row that ended while polling, the thread
//! yields (`sched_yield`): if nothing else wants its CPU that costs one
//! system call, else the others run first. Barging is bounded.
//!
//! The budget is the caller's to spend: a [`PollLearner`] only says how many
//! polls and hears how they went (yielding, when due, as it hears). ksync's
//! semaphore sets keep one per thread (`sem::set_sleeper_spin` bounds it);
//! so does the lab's bare-futex floor, so that the two poll alike.
//!
//! ```
//! use ksync::poll_learner::{PollLearner, MIN_POLLS};
//!
//! let mut learner = PollLearner::new();
//! let budget = learner.budget(1000);
//! assert_eq!(budget, MIN_POLLS);
//! // The wait ended while it polled: poll longer next time.
//! learner.learn(budget, true);
//! assert_eq!(learner.budget(1000), 2 * MIN_POLLS);
//! ```

use std::cell::Cell;
use std::thread::LocalKey;
use std::time::Instant;

use crate::spin_budget::context_switch_ns;

/// The fewest polls a thread that polls at all spends on a wait.
pub const MIN_POLLS: u32 = 16;

/// A thread whose polls kept failing sleeps at once, except on one wait in
/// this many, which it polls for [`PROBE_POLLS`] (unless its waits are known
/// to be long) and times.
pub const PROBE_EVERY: u32 = 16;

/// The polls of a probe: about 3 us at 24 ns a poll. A probe must outlast
/// the time a running poster takes to come back to this sleeper (one pass
/// over its sleepers and a wake-up system call), or it fails even when waits
/// are short. With probes of [`MIN_POLLS`] polls (0.4 us), sembench's workers
/// that shared no CPU with the poster, whose polls succeeded 94 times in 100,
/// sat at a budget of nothing on 46% of their waits, probing in vain. A
/// failed probe costs its polls once in [`PROBE_EVERY`] waits and sends the
/// thread straight back to sleeping at once. (Backing the probes off after
/// failures, up to one in 256 waits, lost the gain again: the workers whose
/// waits were short stopped finding out. Timing the waits tells the two
/// apart.)
pub const PROBE_POLLS: u32 = 8 * MIN_POLLS;

/// A timed wait longer than this many context switches is long: a probe,
/// shorter than one switch, could not have caught it, even counting the
/// switch that a sleeping waiter's wake-up adds to its wait.
pub const LONG_WAIT_SWITCHES: u64 = 8;

/// Waits in a row that a thread may end while polling before it yields its
/// CPU once (see the module documentation). A round trip with a partner on
/// another CPU costs a few hundred nanoseconds, and so does a yield that
/// finds nobody waiting for the CPU (a system call: 0.35 us on the 2-CPU
/// AMD guest of BENCHMARKS.md): one in 64 keeps that to a percent or two of
/// a ping-pong, and a thread cycling with its partner keeps its CPU for tens
/// of microseconds at a time, not a time slice (milliseconds).
pub const YIELD_AFTER: u32 = 64;

/// What one thread learned about its waits. Keep one per thread (a
/// `thread_local!` `Cell`): the budget describes that thread's waits.
#[derive(Clone, Copy, Debug)]
pub struct PollLearner {
    /// The polls the next wait may spend; 0: sleep at once.
    budget: u32,
    /// At budget 0, the waits since the last probe-due one.
    waits: u32,
    /// The wait now polling is a probe.
    probing: bool,
    /// When the wait being timed began: the probe-due one.
    timed_since: Option<Instant>,
    /// The last timed wait was long ([`LONG_WAIT_SWITCHES`]): probes would
    /// fail, so they are skipped.
    waits_long: bool,
    /// Waits in a row that ended while polling ([`YIELD_AFTER`]).
    streak: u32,
}

impl Default for PollLearner {
    fn default() -> Self {
        Self::new()
    }
}

impl PollLearner {
    /// A thread that has not waited yet: it polls [`MIN_POLLS`] times.
    pub const fn new() -> PollLearner {
        PollLearner {
            budget: MIN_POLLS,
            waits: 0,
            probing: false,
            timed_since: None,
            waits_long: false,
            streak: 0,
        }
    }

    /// The polls the wait starting now may spend, at most `limit` (0: sleep
    /// at once). After the polls, call [`learn`](Self::learn) with this
    /// budget (not for a budget of 0), and call
    /// [`wait_ended`](Self::wait_ended) once the wait is over.
    pub fn budget(&mut self, limit: u32) -> u32 {
        // Only the wait starting now may be timed: a timed wait that ended
        // without `wait_ended` (its caller found, after the polls, that it
        // need not sleep) must not time this one from its start, which would
        // call this wait long and skip the next probes.
        self.timed_since = None;
        let budget = self.next_budget(limit);
        if budget == 0 {
            // This wait sleeps, unless it need not wait at all.
            self.streak = 0;
        }
        budget
    }

    fn next_budget(&mut self, limit: u32) -> u32 {
        if limit == 0 {
            return 0;
        }
        match self.budget {
            0 if self.waits + 1 < PROBE_EVERY => {
                self.waits += 1;
                self.probing = false;
                0
            }
            0 => {
                self.waits = 0;
                self.timed_since = Some(Instant::now());
                self.probing = !self.waits_long;
                if self.probing {
                    PROBE_POLLS.min(limit)
                } else {
                    0
                }
            }
            budget => budget.clamp(MIN_POLLS.min(limit), limit),
        }
    }

    /// Records how a wait that polled `budget` times went:
    /// `completed_while_polling` if a poll saw it through (which also ends
    /// the wait), false if it had to sleep after all. The
    /// [`YIELD_AFTER`]th wait in a row that ended while polling yields the
    /// thread's CPU here, so call it with no lock held.
    pub fn learn(&mut self, budget: u32, completed_while_polling: bool) {
        if self.note_end(budget, completed_while_polling) {
            std::thread::yield_now();
        }
    }

    /// [`learn`](Self::learn) but for the yield: true when it is due.
    fn note_end(&mut self, budget: u32, completed_while_polling: bool) -> bool {
        let yield_due = completed_while_polling && {
            self.streak += 1;
            self.streak == YIELD_AFTER
        };
        if yield_due || !completed_while_polling {
            self.streak = 0;
        }
        let next = if completed_while_polling {
            self.wait_ended();
            budget.saturating_mul(2).max(MIN_POLLS)
        } else if self.probing || budget / 2 < MIN_POLLS {
            0
        } else {
            budget / 2
        };
        self.budget = next;
        self.waits = 0;
        self.probing = false;
        yield_due
    }

    /// A probe that ended before it could tell anything (the caller saw that
    /// polling could not help, a sleeper queued first, say): the thread's
    /// next wait probes instead, so that a thread whose waits often find
    /// sleepers queued first still finds out when waits are short.
    pub fn keep_probe_due(&mut self) {
        if self.probing {
            self.budget = 0;
            self.waits = PROBE_EVERY - 1;
            self.probing = false;
        }
    }

    /// The wait is over (woken, or completed while polling): if it was
    /// being timed, whether it was long decides whether the next probes run.
    /// Cheap when it was not timed, as on most waits.
    #[inline]
    pub fn wait_ended(&mut self) {
        if let Some(since) = self.timed_since {
            self.timed_wait_ended(since, Instant::now());
        }
    }

    #[cold]
    fn timed_wait_ended(&mut self, since: Instant, now: Instant) {
        self.timed_since = None;
        let waited = now.saturating_duration_since(since).as_nanos();
        self.waits_long = waited > u128::from(LONG_WAIT_SWITCHES * context_switch_ns());
    }
}

/// Runs `f` on this thread's learner in `key` (a `thread_local!` `Cell`).
///
/// ```
/// use ksync::poll_learner::{self, PollLearner};
/// use std::cell::Cell;
///
/// thread_local! {
///     static LEARNED: Cell<PollLearner> = const { Cell::new(PollLearner::new()) };
/// }
/// let budget = poll_learner::with(&LEARNED, |l| l.budget(1000));
/// assert!(budget > 0);
/// ```
pub fn with<R>(
    key: &'static LocalKey<Cell<PollLearner>>,
    f: impl FnOnce(&mut PollLearner) -> R,
) -> R {
    key.with(|cell| {
        let mut learner = cell.get();
        let result = f(&mut learner);
        cell.set(learner);
        result
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    const LIMIT: u32 = 1000;

    /// Takes `learner` through waits until its probe-due one and returns that
    /// one's budget.
    fn until_probe_due(learner: &mut PollLearner) -> u32 {
        for _ in 0..PROBE_EVERY - 1 {
            assert_eq!(learner.budget(LIMIT), 0);
        }
        learner.budget(LIMIT)
    }

    /// Ends `learner`'s timed wait as if it had lasted `waited`.
    fn end_timed_wait(learner: &mut PollLearner, waited: Duration) {
        let since = learner.timed_since.expect("the wait is timed");
        learner.timed_wait_ended(since, since + waited);
    }

    #[test]
    fn a_thread_whose_polls_fail_stops_polling_and_probes_now_and_then() {
        let mut learner = PollLearner::new();
        assert_eq!(learner.budget(LIMIT), MIN_POLLS);
        learner.learn(MIN_POLLS, true);
        assert_eq!(learner.budget(LIMIT), 2 * MIN_POLLS);
        learner.learn(2 * MIN_POLLS, false);
        assert_eq!(learner.budget(LIMIT), MIN_POLLS);
        learner.learn(MIN_POLLS, false);
        // Below 16 polls: sleep at once, but probe, longer, on one wait in 16.
        let budgets: Vec<u32> = (0..2 * PROBE_EVERY)
            .map(|_| learner.budget(LIMIT))
            .collect();
        let probes = budgets.iter().filter(|&&b| b == PROBE_POLLS).count();
        assert_eq!(probes, 2, "{budgets:?}");
        assert!(budgets.iter().all(|&b| b == 0 || b == PROBE_POLLS));
        // A probe that fails goes straight back to sleeping at once, although
        // half of its polls would be a budget of their own.
        while learner.budget(LIMIT) != PROBE_POLLS {}
        learner.learn(PROBE_POLLS, false);
        assert_eq!(learner.budget(LIMIT), 0);
        // A probe that succeeds brings polling back.
        while learner.budget(LIMIT) != PROBE_POLLS {}
        learner.learn(PROBE_POLLS, true);
        assert_eq!(learner.budget(LIMIT), 2 * PROBE_POLLS);
        // And a failure after that halves, as before.
        learner.learn(2 * PROBE_POLLS, false);
        assert_eq!(learner.budget(LIMIT), PROBE_POLLS);
    }

    #[test]
    fn a_probe_cut_short_is_made_on_the_next_wait() {
        let mut learner = PollLearner::new();
        learner.learn(MIN_POLLS, false);
        assert_eq!(until_probe_due(&mut learner), PROBE_POLLS);
        learner.keep_probe_due();
        assert_eq!(learner.budget(LIMIT), PROBE_POLLS);
    }

    #[test]
    fn long_waits_skip_the_probes_until_a_timed_wait_is_short() {
        let long = Duration::from_nanos(LONG_WAIT_SWITCHES * context_switch_ns() + 1);
        let mut learner = PollLearner::new();
        learner.learn(MIN_POLLS, false);
        // The first probe runs (nothing is known yet) and is timed.
        assert_eq!(until_probe_due(&mut learner), PROBE_POLLS);
        learner.learn(PROBE_POLLS, false);
        end_timed_wait(&mut learner, long);
        // Its wait was long: the next probe-due wait sleeps at once, still
        // timed, and so on while the timed waits stay long.
        for _ in 0..3 {
            assert_eq!(until_probe_due(&mut learner), 0);
            end_timed_wait(&mut learner, long);
        }
        // One short timed wait and the probes are back.
        assert_eq!(until_probe_due(&mut learner), 0);
        end_timed_wait(&mut learner, Duration::ZERO);
        assert_eq!(until_probe_due(&mut learner), PROBE_POLLS);
        // A wait that ends while it polls ends its timing too.
        learner.learn(PROBE_POLLS, true);
        assert!(learner.timed_since.is_none());
    }

    #[test]
    fn a_timed_wait_that_ended_unheard_does_not_time_the_next() {
        let mut learner = PollLearner::new();
        learner.learn(MIN_POLLS, false);
        assert_eq!(until_probe_due(&mut learner), PROBE_POLLS);
        // The probe fails, and the caller then finds it need not sleep: the
        // wait ends without `wait_ended`.
        learner.learn(PROBE_POLLS, false);
        assert_eq!(learner.budget(LIMIT), 0);
        assert!(
            learner.timed_since.is_none(),
            "the next wait timed from the probe's start"
        );
    }

    #[test]
    fn untimed_waits_teach_nothing_about_length() {
        let mut learner = PollLearner::new();
        learner.learn(MIN_POLLS, false);
        assert_eq!(learner.budget(LIMIT), 0);
        learner.wait_ended();
        assert!(!learner.waits_long);
        assert!(learner.timed_since.is_none());
    }

    #[test]
    fn waits_caught_while_polling_yield_the_cpu_once_in_a_while() {
        let mut learner = PollLearner::new();
        // Ends `n` waits while polling; returns those on which a yield was due.
        let catch = |learner: &mut PollLearner, n: u32| -> Vec<u32> {
            (1..=n)
                .filter(|_| {
                    let budget = learner.budget(LIMIT);
                    learner.note_end(budget, true)
                })
                .collect()
        };
        assert_eq!(
            catch(&mut learner, 2 * YIELD_AFTER),
            [YIELD_AFTER, 2 * YIELD_AFTER]
        );
        // A wait that had to sleep after its polls starts the count again.
        assert_eq!(catch(&mut learner, YIELD_AFTER - 1), []);
        let budget = learner.budget(LIMIT);
        assert!(!learner.note_end(budget, false));
        assert_eq!(catch(&mut learner, YIELD_AFTER), [YIELD_AFTER]);
        // So does a wait that sleeps at once, at a budget of nothing.
        assert_eq!(catch(&mut learner, YIELD_AFTER - 1), []);
        learner.budget = 0;
        assert_eq!(learner.budget(LIMIT), 0);
        assert_eq!(learner.streak, 0);
        // Its next probe that succeeds counts from one.
        while learner.budget(LIMIT) == 0 {}
        assert!(!learner.note_end(PROBE_POLLS, true));
        assert_eq!(catch(&mut learner, YIELD_AFTER - 1), [YIELD_AFTER - 1]);
    }

    #[test]
    fn no_limit_means_no_polls_and_nothing_learned() {
        let mut learner = PollLearner::new();
        assert_eq!(learner.budget(0), 0);
        assert_eq!(learner.budget(LIMIT), MIN_POLLS);
        assert_eq!(learner.budget(8), 8);
    }
}
