//! Calls on two semaphores from many threads at once: the contended side of
//! System V's atomic multi-operation call, generic over the backend.
//!
//! `threads` threads share one set of `sems` semaphores. Each loops for the
//! run: it picks two different semaphores at random and makes two calls on
//! both of them, counting one *pair* per loop.
//!
//! - [`Mode::Take`]: Dijkstra's dining philosophers with atomic pick-up
//!   (every semaphore starts at 1, a fork): one call takes both forks
//!   (`-1, -1`), blocking while either is held, the next puts them back
//!   (`+1, +1`). Blocked calls on two semaphores are what the kernel keeps on
//!   its global list and what moves ksync's `SemSet` into global mode.
//! - [`Mode::Post`]: every semaphore starts at 0; one call raises both
//!   (`+1, +1`), the next lowers both again (`-1, -1`). No call ever blocks
//!   (each thread lowers only what it raised), so the threads contend only
//!   for the semaphores' own locks: in `SemSet`, calls on two quiet
//!   semaphores and the lockers that meet them.
//!
//! At the end every semaphore must hold its starting value again, which the
//! outcome reports as `exact`. Threads are not bound to CPUs: with more of
//! them than cores, the scheduler preempts some inside their calls, which
//! is what the experiment is for.

use crate::harness::crew::{Crew, FirstError};
use crate::harness::rusage::Usage;
use crate::peers::sem::{SemBackend, SemError, SemVisitor, WaitEvents};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most threads one run starts.
pub const MAX_THREADS: usize = 4096;
/// The most semaphores in the set: as many as one of the kernel's sets
/// holds by default (SEMMSL).
pub const MAX_SEMS: usize = 32_000;
/// How long the threads may take to finish their last pair once the run ends.
const FINISH_LIMIT: Duration = Duration::from_secs(20);
/// Thread stacks: the loop needs almost none.
const STACK: usize = 64 * 1024;
/// How long the threads run before the measured window opens, so that
/// every one of them has left its start line.
const WARM_UP: Duration = Duration::from_millis(20);

/// What each thread's two calls do to its two semaphores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Take both (each starts at 1) in one call, blocking while either is
    /// held; give both back in the next.
    Take,
    /// Raise both (each starts at 0) in one call, lower both in the next;
    /// never blocks.
    Post,
}

impl Mode {
    /// Both modes, in the order the experiment runs them.
    pub const ALL: [Mode; 2] = [Mode::Take, Mode::Post];

    /// The mode called `name`.
    pub fn by_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Take => "take",
            Mode::Post => "post",
        }
    }

    /// Every semaphore's value before and after a run.
    fn start_value(self) -> u16 {
        match self {
            Mode::Take => 1,
            Mode::Post => 0,
        }
    }

    /// The change each call of a pair makes to both its semaphores.
    fn deltas(self) -> [i16; 2] {
        match self {
            Mode::Take => [-1, 1],
            Mode::Post => [1, -1],
        }
    }
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub threads: usize,
    pub sems: usize,
    pub mode: Mode,
    pub run: Duration,
}

impl Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(format!(
                "--threads needs 1 to {MAX_THREADS} threads, not {}",
                self.threads
            ));
        }
        if self.sems < 2 || self.sems > MAX_SEMS {
            return Err(format!(
                "--sems needs 2 to {MAX_SEMS} semaphores (a call names two), not {}",
                self.sems
            ));
        }
        if self.run.is_zero() || self.run > Duration::from_secs(3600) {
            return Err(format!("--run needs (0, 3600] seconds, not {:?}", self.run));
        }
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Pairs each thread completed in the measured window.
    pub per_thread: Vec<u64>,
    pub elapsed: Duration,
    /// The process's CPU time and context switches over the window.
    pub usage: Usage,
    /// The backend's own counts over the window, where it keeps them.
    pub events: Option<WaitEvents>,
    /// Every semaphore held its starting value after the run.
    pub exact: bool,
}

impl Outcome {
    pub fn pairs(&self) -> u64 {
        self.per_thread.iter().sum()
    }

    pub fn pairs_per_sec(&self) -> f64 {
        self.pairs() as f64 / self.elapsed.as_secs_f64()
    }

    /// `n` per completed pair.
    pub fn per_pair(&self, n: u64) -> f64 {
        n as f64 / self.pairs().max(1) as f64
    }

    pub fn min(&self) -> u64 {
        self.per_thread.iter().copied().min().unwrap_or(0)
    }

    pub fn max(&self) -> u64 {
        self.per_thread.iter().copied().max().unwrap_or(0)
    }
}

/// Two different semaphores below `sems`, drawn from a thread's xorshift
/// state.
fn pick(state: &mut u64, sems: usize) -> (u16, u16) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let n = sems as u64;
    let a = *state % n;
    // A second draw from the other bits, shifted past `a` so they differ.
    let b = (a + 1 + (*state >> 32) % (n - 1)) % n;
    (a as u16, b as u16)
}

/// Runs the workload on backend `B` (which must have System V semantics:
/// calls on two semaphores).
pub fn dining<B: SemBackend>(cfg: &Config) -> Result<Outcome, String> {
    cfg.validate()?;
    if !B::SYSV {
        return Err("needs a backend that makes one call on two semaphores".into());
    }
    let set = Arc::new(B::create(cfg.sems)?);
    set.set_all(&vec![cfg.mode.start_value(); cfg.sems])?;
    let go = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let error = Arc::new(FirstError::default());
    let [first, second] = cfg.mode.deltas();
    let mut crew = Crew::new();
    for me in 0..cfg.threads {
        let spawned = {
            let (set, go, counting, stop, error) = (
                Arc::clone(&set),
                Arc::clone(&go),
                Arc::clone(&counting),
                Arc::clone(&stop),
                Arc::clone(&error),
            );
            let sems = cfg.sems;
            crew.spawn(format!("dining-{me}"), STACK, move || {
                let mut state =
                    0x9e37_79b9_7f4a_7c15u64 ^ (me as u64 + 1).wrapping_mul(0x2545_f491);
                let mut pairs = 0u64;
                // Pairs with the release store that starts the run.
                while !go.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = pick(&mut state, sems);
                    let calls = [
                        [B::op(a, first, false), B::op(b, first, false)],
                        [B::op(a, second, false), B::op(b, second, false)],
                    ];
                    for call in &calls {
                        if let Err(e) = set.semop(call) {
                            if e != SemError::Removed {
                                error.set(format!("thread {me}: {e}"));
                            }
                            return pairs;
                        }
                    }
                    // Only pairs inside the measured window count.
                    if counting.load(Ordering::Relaxed) {
                        pairs += 1;
                    }
                }
                pairs
            })
        };
        if let Err(e) = spawned {
            // Those started see `stop` as soon as they start.
            stop.store(true, Ordering::Relaxed);
            go.store(true, Ordering::Release);
            set.remove();
            return Err(e);
        }
    }
    go.store(true, Ordering::Release);
    std::thread::sleep(WARM_UP);
    let before = (Usage::now(), set.wait_events());
    let start = Instant::now();
    counting.store(true, Ordering::Relaxed);
    std::thread::sleep(cfg.run);
    counting.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let after = (Usage::now(), set.wait_events());
    stop.store(true, Ordering::Relaxed);
    let per_thread = match crew.join_within(FINISH_LIMIT) {
        Ok(per_thread) => per_thread,
        Err(e) => {
            set.remove();
            return Err(e);
        }
    };
    if let Some(e) = error.take() {
        set.remove();
        return Err(e);
    }
    let exact = (0..cfg.sems).all(|n| set.value(n) == Ok(i32::from(cfg.mode.start_value())));
    set.remove();
    Ok(Outcome {
        per_thread,
        elapsed,
        usage: after.0.since(before.0),
        events: after.1.zip(before.1).map(|(a, b)| a.since(b)),
        exact,
    })
}

/// [`dining`] as a visitor, for a registry entry's backend.
pub struct Dining<'a>(pub &'a Config);

impl SemVisitor for Dining<'_> {
    type Out = Result<Outcome, String>;
    fn visit<B: SemBackend>(self) -> Self::Out {
        dining::<B>(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::sem::{KsyncShared, SysvSet};

    fn config(mode: Mode) -> Config {
        Config {
            threads: 3,
            sems: 3,
            mode,
            run: Duration::from_millis(50),
        }
    }

    #[test]
    fn every_set_backend_completes_pairs_and_ends_where_it_started() {
        for mode in Mode::ALL {
            let cfg = config(mode);
            for outcome in [
                dining::<SysvSet>(&cfg),
                dining::<ksync::sem::SemSet>(&cfg),
                dining::<KsyncShared>(&cfg),
            ] {
                let outcome = outcome.unwrap();
                assert!(outcome.exact, "{mode:?}");
                assert_eq!(outcome.per_thread.len(), 3);
                assert!(outcome.pairs() > 0 && outcome.pairs_per_sec() > 0.0);
            }
        }
    }

    #[test]
    fn a_backend_without_calls_on_two_semaphores_is_refused() {
        let err = dining::<crate::peers::sem::PosixSems>(&config(Mode::Take)).unwrap_err();
        assert!(err.contains("two semaphores"), "{err}");
    }

    #[test]
    fn pairs_name_two_different_semaphores_of_the_set() {
        for sems in [2, 3, 5, 64] {
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let mut seen = vec![false; sems];
            for _ in 0..1000 {
                let (a, b) = pick(&mut state, sems);
                assert!(a != b && usize::from(a) < sems && usize::from(b) < sems);
                seen[usize::from(a)] = true;
            }
            assert!(seen.iter().all(|&s| s), "every semaphore is picked");
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        let good = config(Mode::Post);
        assert!(good.validate().is_ok());
        for bad in [
            Config {
                threads: 0,
                ..good.clone()
            },
            Config {
                threads: MAX_THREADS + 1,
                ..good.clone()
            },
            Config {
                sems: 1,
                ..good.clone()
            },
            Config {
                sems: MAX_SEMS + 1,
                ..good.clone()
            },
            Config {
                run: Duration::ZERO,
                ..good.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(Mode::by_name("take"), Some(Mode::Take));
        assert_eq!(Mode::by_name("post"), Some(Mode::Post));
        assert_eq!(Mode::by_name("eat"), None);
    }
}
