//! The bulk wake-up: `N` sleepers, each blocked on its own semaphore of one
//! set, queued one by one so that arrival order is the reverse of semaphore
//! order (the first to arrive waits on semaphore `N - 1`). One `SETALL` (or
//! the fewest `semop` calls: `+1` on every semaphore, at most 500 per call,
//! ascending) wakes them all. Linear scaling shows as flat per-sleeper
//! figures; Manfred Spraul's April 2010 series names the quadratic case.

use super::{await_waiters, QUEUE_TIMEOUT, SEMOPM, SLEEPER_STACK};
use crate::harness::affinity::{allowed_cpus, pin_current_thread, PinnedThread};
use crate::harness::crew::{Crew, FirstError};
use crate::harness::futex;
use crate::peers::sem::{SemBackend, SemError, SemVisitor, SetCounters};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the bulk experiment wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waker {
    SetAll,
    Semop,
}

impl Waker {
    /// How options and records name it.
    pub fn name(self) -> &'static str {
        match self {
            Waker::SetAll => "setall",
            Waker::Semop => "semop",
        }
    }
    /// The waker's calls for `n` sleepers.
    pub fn calls(self, n: usize) -> usize {
        match self {
            Waker::SetAll => 1,
            Waker::Semop => n.div_ceil(SEMOPM),
        }
    }
}

/// One bulk wake-up, one round.
#[derive(Debug, Clone)]
pub struct BulkRound {
    /// The waker's call (or calls).
    pub call: Duration,
    /// From just before the call until the last sleeper had returned.
    pub last_return: Duration,
    pub counters: Option<SetCounters>,
}

/// Where the bulk experiment runs its threads: the waker on one CPU, the
/// sleepers on another, so that the woken sleepers neither preempt the
/// waker's call nor share its CPU. `None` leaves both free.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub waker_cpu: usize,
    pub sleeper_cpu: usize,
}

/// The first two allowed CPUs, when `bind` and there are two.
pub fn placement(bind: bool) -> Option<Placement> {
    let cpus = allowed_cpus();
    (bind && cpus.len() >= 2).then(|| Placement {
        waker_cpu: cpus[0],
        sleeper_cpu: cpus[1],
    })
}

/// What the bulk experiment's threads share.
struct BulkShared<B> {
    set: B,
    base: Instant,
    /// When each sleeper returned, nanoseconds after `base`; 0: not yet.
    returned: Vec<AtomicU64>,
    failure: FirstError,
    started: AtomicBool,
    /// Woken sleepers park on this word until the round is over, so that
    /// thread exit is not part of the measured wake-up.
    release: AtomicU32,
}

fn bulk_round<B: SemBackend>(
    n: usize,
    waker: Waker,
    place: Option<Placement>,
) -> Result<BulkRound, String> {
    // Every post, built before the clock starts.
    let posts: Vec<B::Op> = (0..n).map(|num| B::op(num as u16, 1, false)).collect();
    let shared = Arc::new(BulkShared {
        set: B::create(n)?,
        base: Instant::now(),
        returned: (0..n).map(|_| AtomicU64::new(0)).collect(),
        failure: FirstError::default(),
        started: AtomicBool::new(false),
        release: AtomicU32::new(0),
    });
    let pinned_waker = place.and_then(|p| PinnedThread::pin(p.waker_cpu));
    let mut crew = Crew::new();
    let result = (|| -> Result<BulkRound, String> {
        let sh = &*shared;
        // Arrival i waits on semaphore n - 1 - i: arrival order is the
        // reverse of semaphore order.
        for i in 0..n {
            let num = n - 1 - i;
            let mine = Arc::clone(&shared);
            crew.spawn(format!("bulk-{i}"), SLEEPER_STACK, move || {
                if let Some(p) = place {
                    pin_current_thread(p.sleeper_cpu);
                }
                match mine.set.semop(&[B::op(num as u16, -1, false)]) {
                    Ok(()) => {
                        let at = mine.base.elapsed().as_nanos() as u64;
                        mine.returned[i].store(at.max(1), Ordering::Release);
                        if !mine.started.load(Ordering::Relaxed) {
                            mine.failure
                                .set(format!("sleeper {i} returned before the wake-up"));
                        }
                        while mine.release.load(Ordering::Acquire) == 0 {
                            futex::wait(&mine.release, 0);
                        }
                    }
                    Err(SemError::Removed) => {}
                    Err(e) => mine.failure.set(format!("sleeper {i}: {e}")),
                }
            })?;
            await_waiters(&sh.set, num, 1)?;
        }
        let ones = vec![1u16; n];
        let before = sh.set.counters();
        sh.started.store(true, Ordering::Relaxed);
        let t0 = sh.base.elapsed();
        match waker {
            Waker::SetAll => sh.set.set_all(&ones)?,
            Waker::Semop => {
                for chunk in posts.chunks(SEMOPM) {
                    sh.set
                        .semop(chunk)
                        .map_err(|e| format!("waker semop: {e}"))?;
                }
            }
        }
        let call = sh.base.elapsed() - t0;
        // Wait (sleeping, so as not to take CPU from the sleepers) for
        // every sleeper to return.
        let deadline = Instant::now() + QUEUE_TIMEOUT;
        let mut pending = 0;
        while pending < n && Instant::now() < deadline && !sh.failure.is_set() {
            if sh.returned[pending].load(Ordering::Acquire) != 0 {
                pending += 1;
            } else {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        let counters = sh.set.counters().zip(before).map(|(a, b)| a.since(b));
        if pending < n {
            return Err(format!(
                "{} of {n} sleepers had not returned {} s after the wake-up (a lost wake-up?)",
                n - pending,
                QUEUE_TIMEOUT.as_secs()
            ));
        }
        let last = sh
            .returned
            .iter()
            .map(|r| r.load(Ordering::Acquire))
            .max()
            .unwrap_or(0);
        Ok(BulkRound {
            call,
            last_return: Duration::from_nanos(last).saturating_sub(t0),
            counters,
        })
    })();
    // Whatever happened: sleepers still queued leave with Removed, woken
    // ones are released.
    shared.set.remove();
    shared.release.store(1, Ordering::Release);
    futex::wake(&shared.release, i32::MAX);
    let joined = crew.join_within(QUEUE_TIMEOUT);
    drop(pinned_waker);
    joined.map_err(|e| format!("after removing the set: {e}"))?;
    let round = result?;
    if let Some(e) = shared.failure.take() {
        return Err(e);
    }
    Ok(round)
}

/// One bulk point: `rounds` rounds; times are the best round's, counters the median.
#[derive(Debug, Clone)]
pub struct BulkOutcome {
    pub waker: Waker,
    pub sleepers: usize,
    pub rounds: Vec<BulkRound>,
}

impl BulkOutcome {
    /// The least disturbed round's figure: other processes only ever add time.
    fn best(&self, pick: fn(&BulkRound) -> Duration) -> Duration {
        self.rounds.iter().map(pick).min().unwrap_or_default()
    }
    pub fn call(&self) -> Duration {
        self.best(|r| r.call)
    }
    pub fn last_return(&self) -> Duration {
        self.best(|r| r.last_return)
    }
    /// `d` per sleeper, in nanoseconds.
    pub fn per_sleeper_ns(&self, d: Duration) -> f64 {
        d.as_nanos() as f64 / self.sleepers as f64
    }
}

/// Runs one point of the bulk wake-up on backend `B`: `rounds` rounds of
/// `n` sleepers.
pub fn bulk<B: SemBackend>(
    n: usize,
    waker: Waker,
    rounds: u32,
    place: Option<Placement>,
) -> Result<BulkOutcome, String> {
    let rounds = (0..rounds.max(1))
        .map(|_| bulk_round::<B>(n, waker, place))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BulkOutcome {
        waker,
        sleepers: n,
        rounds,
    })
}

/// [`bulk`] as a visitor, for a registry entry's backend.
pub struct BulkWake {
    pub sleepers: usize,
    pub waker: Waker,
    pub rounds: u32,
    pub place: Option<Placement>,
}

impl SemVisitor for BulkWake {
    type Out = Result<BulkOutcome, String>;
    fn visit<B: SemBackend>(self) -> Self::Out {
        bulk::<B>(self.sleepers, self.waker, self.rounds, self.place)
    }
}
