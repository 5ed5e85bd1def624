//! Waiman Long's spinlock micro-benchmark (unfair qspinlock v10, LKML, May
//! 2014): N threads on one lock, each doing a fixed number of lock /
//! critical section / unlock rounds (or running for a fixed time), the lock
//! embedded beside its data or alone on its cache line.

use crate::harness::affinity::pin_current_thread;
use crate::harness::clock::{relax, ticks, TickScale};
use crate::peers::mutex::{Apart, Data, LabLock, LockKind, MutexVisitor};
use ksync::stat::LockStatSnapshot;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Where the lock word sits relative to the data its critical section writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The counter right beside the lock word, on its cache line (the case
    /// of Rik van Riel's proportional backoff: waiters polling the lock slow
    /// the holder's writes).
    Embedded,
    /// The lock alone on its cache line, the counter on another.
    Standalone,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Embedded => "embedded",
            Layout::Standalone => "standalone",
        }
    }
}

/// One thread's counter on its own 128-byte block.
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// How long a spin run lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Waiman Long's micro-benchmark: every thread does `loops` rounds; the
    /// metric is the time until the last one finishes. Past `limit` the run is stopped and
    /// reported as not finished.
    Loops { loops: u64, limit: Duration },
    /// Rounds completed in a fixed time.
    Timed(Duration),
}

/// One run of the N-thread spinlock micro-benchmark.
#[derive(Debug, Clone)]
pub struct SpinConfig {
    pub threads: usize,
    pub mode: Mode,
    /// Relaxes inside the critical section, after the increment.
    pub cs_work: u32,
    pub layout: Layout,
    /// The CPU of each thread, or no pinning.
    pub pin: Option<Vec<usize>>,
    /// Time every round, for the longest wait (costs one timestamp a round).
    pub wait_clock: bool,
}

/// What one spin run measured.
#[derive(Debug, Clone)]
pub struct SpinResult {
    /// Rounds completed, all threads together.
    pub ops: u64,
    /// Start to the last thread's finish (loops), or to the end of the
    /// drain after the stop signal (timed).
    pub elapsed: Duration,
    /// Each thread's rounds while all were still competing: when the first
    /// thread finished its loops (loops mode), or at the end (timed).
    pub competing: Vec<u64>,
    /// Every thread finished its loops (always true when timed).
    pub finished: bool,
    /// The protected counter ended equal to `ops`: no increment was lost.
    pub exact: bool,
    /// The longest single round (lock + critical section + unlock).
    pub longest_wait: Option<Duration>,
    /// When the first and the last thread finished (loops mode).
    pub first_done: Option<Duration>,
    /// The lock's statistics over the run, for a lock that keeps them
    /// (a `+stat` entry).
    pub lock_stats: Option<LockStatSnapshot>,
    /// The lock's own event counters over the run (`LabLock::lock_events`).
    pub events: Vec<(&'static str, u64)>,
}

impl SpinResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Smallest and largest per-thread share of the rounds taken while all
    /// threads competed, as a fraction of a fair share (1.0 = fair).
    pub fn share_range(&self) -> (f64, f64) {
        super::share_range(&self.competing)
    }
}

/// Runs the micro-benchmark on lock kind `K` in the configured layout.
pub fn spin<K: LockKind>(cfg: &SpinConfig) -> SpinResult {
    match cfg.layout {
        Layout::Embedded => spin_on::<K::Lock<u64>, u64>(cfg),
        Layout::Standalone => spin_on::<K::Lock<Apart>, Apart>(cfg),
    }
}

/// Threads finished so far, for the main thread's timed wait.
struct Finish {
    count: Mutex<usize>,
    all_done: Condvar,
}

/// How long the workers may take to finish once they have been told to stop
/// (or have finished their rounds) before the lab calls the lock stuck.
const STUCK_AFTER: Duration = Duration::from_secs(60);

impl Finish {
    /// Waits until all `threads` workers finished; a lock that deadlocks or
    /// livelocks would otherwise hang the lab forever, so after
    /// [`STUCK_AFTER`] it says so and exits the process (status 3).
    fn wait_or_abort(&self, threads: usize) {
        let n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        let (n, wait) = self
            .all_done
            .wait_timeout_while(n, STUCK_AFTER, |n| *n < threads)
            .unwrap_or_else(|e| e.into_inner());
        if wait.timed_out() {
            eprintln!(
                "ksync-lab: {} of {threads} threads still inside the lock {} s after they were \
                 told to stop: the lock under test is stuck (deadlocked or livelocked); aborting",
                threads - *n,
                STUCK_AFTER.as_secs()
            );
            std::process::exit(3);
        }
    }
}

fn spin_on<L: LabLock<D>, D: Data>(cfg: &SpinConfig) -> SpinResult {
    let lock = super::Aligned(L::new());
    let lock = &lock.0;
    let threads = cfg.threads;
    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(threads + 1);
    let progress: Vec<Slot> = (0..threads).map(|_| Slot::default()).collect();
    let first_finisher = AtomicUsize::new(0);
    let snapshot: Mutex<Option<Vec<u64>>> = Mutex::new(None);
    let finish = Finish {
        count: Mutex::new(0),
        all_done: Condvar::new(),
    };
    let loops = match cfg.mode {
        Mode::Loops { loops, .. } => loops,
        Mode::Timed(_) => u64::MAX,
    };
    let (cs_work, wait_clock) = (cfg.cs_work, cfg.wait_clock);
    let (outcomes, start, stopped_early, scale) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|me| {
                let cpu = cfg.pin.as_ref().map(|p| p[me]);
                let (stop, start_line, progress) = (&stop, &start_line, &progress);
                let (first_finisher, snapshot, finish) = (&first_finisher, &snapshot, &finish);
                s.spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_current_thread(cpu);
                    }
                    start_line.wait();
                    let started = Instant::now();
                    let mut mine = 0u64;
                    let mut longest = 0u64;
                    // One timestamp a round: the time from the end of one
                    // round to the end of the next is this round's wait,
                    // critical section and unlock (plus a few loop
                    // instructions), at half the cost of timing both ends.
                    let mut last = if wait_clock { ticks() } else { 0 };
                    while mine < loops && !stop.load(Ordering::Relaxed) {
                        if wait_clock {
                            lock.with(|d| {
                                *d.counter() += 1;
                                relax(cs_work);
                            });
                            let now = ticks();
                            longest = longest.max(now.wrapping_sub(last));
                            last = now;
                        } else {
                            lock.with(|d| {
                                *d.counter() += 1;
                                relax(cs_work);
                            });
                        }
                        mine += 1;
                        progress[me].0.store(mine, Ordering::Relaxed);
                    }
                    let done = Instant::now();
                    if mine == loops && first_finisher.fetch_add(1, Ordering::Relaxed) == 0 {
                        let counts = progress.iter().map(|p| p.0.load(Ordering::Relaxed));
                        *snapshot.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(counts.collect());
                    }
                    let mut n = finish.count.lock().unwrap_or_else(|e| e.into_inner());
                    *n += 1;
                    finish.all_done.notify_all();
                    (mine, longest, started, done)
                })
            })
            .collect();
        // The workers wait at the start line: the lock is idle.
        lock.reset_lock_stats();
        lock.reset_lock_events();
        start_line.wait();
        let scale = TickScale::start();
        let start = scale.started();
        let mut stopped_early = false;
        match cfg.mode {
            Mode::Timed(duration) => {
                std::thread::sleep(duration);
                stop.store(true, Ordering::Relaxed);
            }
            Mode::Loops { limit, .. } => {
                let n = finish.count.lock().unwrap_or_else(|e| e.into_inner());
                let (_n, wait) = finish
                    .all_done
                    .wait_timeout_while(n, limit, |n| *n < threads)
                    .unwrap_or_else(|e| e.into_inner());
                if wait.timed_out() {
                    stopped_early = true;
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
        finish.wait_or_abort(threads);
        let outcomes: Vec<(u64, u64, Instant, Instant)> = workers
            .into_iter()
            .map(|w| w.join().expect("benchmark thread panicked"))
            .collect();
        (outcomes, start, stopped_early, scale)
    });
    let end = Instant::now();
    // Before the check below takes the lock once more.
    let lock_stats = lock.lock_stats();
    let events = lock.lock_events();
    let ns_per_tick = scale.ns_per_tick();
    let per_thread: Vec<u64> = outcomes.iter().map(|o| o.0).collect();
    let ops = per_thread.iter().sum();
    let counted = lock.with(|d| *d.counter());
    let finished = !stopped_early && per_thread.iter().all(|&n| n == loops);
    let (elapsed, first_done) = match cfg.mode {
        Mode::Loops { .. } if finished => {
            // From the first thread's start to each thread's finish, as the
            // threads saw them (the main thread may wake after a fast run).
            let began = outcomes.iter().map(|o| o.2).min().unwrap_or(start);
            let since = |t: Instant| t.saturating_duration_since(began);
            let last = outcomes
                .iter()
                .map(|o| since(o.3))
                .max()
                .unwrap_or_default();
            let first = outcomes
                .iter()
                .map(|o| since(o.3))
                .min()
                .unwrap_or_default();
            (last.max(Duration::from_nanos(1)), Some(first))
        }
        _ => (end.saturating_duration_since(start), None),
    };
    let competing = snapshot
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .filter(|_| finished)
        .unwrap_or(per_thread);
    let longest = outcomes.iter().map(|o| o.1).max().unwrap_or(0);
    SpinResult {
        ops,
        elapsed,
        competing,
        finished,
        exact: counted == ops,
        longest_wait: wait_clock
            .then(|| Duration::from_nanos((longest as f64 * ns_per_tick) as u64)),
        first_done,
        lock_stats,
        events,
    }
}

/// [`spin()`] as a visitor, for a registry entry's lock.
pub struct SpinLoop<'a>(pub &'a SpinConfig);

impl MutexVisitor for SpinLoop<'_> {
    type Out = SpinResult;
    fn visit<K: LockKind>(self) -> SpinResult {
        spin::<K>(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::mutex::{Api, StatApi, Std};

    #[test]
    fn loops_mode_counts_exactly_and_times_the_last_thread() {
        for layout in [Layout::Embedded, Layout::Standalone] {
            let r = spin::<Api<ksync::spin::RawQSpinLock>>(&SpinConfig {
                threads: 3,
                mode: Mode::Loops {
                    loops: 2000,
                    limit: Duration::from_secs(30),
                },
                cs_work: 1,
                layout,
                pin: None,
                wait_clock: true,
            });
            assert!(r.finished && r.exact);
            assert_eq!(r.ops, 6000);
            assert_eq!(r.competing.len(), 3);
            assert!(r.first_done.unwrap() <= r.elapsed);
            assert!(r.longest_wait.is_some());
        }
    }

    #[test]
    fn a_run_past_its_limit_stops_and_says_so() {
        let r = spin::<Std>(&SpinConfig {
            threads: 2,
            mode: Mode::Loops {
                loops: u64::MAX / 4,
                limit: Duration::from_millis(20),
            },
            cs_work: 0,
            layout: Layout::Embedded,
            pin: None,
            wait_clock: false,
        });
        assert!(!r.finished && r.exact);
        assert!(r.first_done.is_none() && r.longest_wait.is_none());
    }

    #[test]
    fn a_stat_lock_counts_every_acquisition_of_the_run() {
        let r = spin::<StatApi<ksync::spin::RawQSpinLock>>(&SpinConfig {
            threads: 2,
            mode: Mode::Loops {
                loops: 3000,
                limit: Duration::from_secs(30),
            },
            cs_work: 0,
            layout: Layout::Standalone,
            pin: None,
            wait_clock: false,
        });
        assert!(r.finished && r.exact);
        let s = r.lock_stats.expect("a Stat lock has statistics");
        // The final exactness check's acquisition is not counted.
        assert_eq!(s.acquisitions(), 6000);
        assert_eq!(s.wait_histogram.count(), s.contended());
        // A bare lock has none.
        let bare = spin::<Api<ksync::spin::RawQSpinLock>>(&SpinConfig {
            threads: 1,
            mode: Mode::Loops {
                loops: 10,
                limit: Duration::from_secs(30),
            },
            cs_work: 0,
            layout: Layout::Embedded,
            pin: None,
            wait_clock: false,
        });
        assert!(bare.lock_stats.is_none());
    }
}
