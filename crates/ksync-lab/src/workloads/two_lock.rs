//! Rik van Riel's two-lock mix (x86,smp: auto tune spinlock backoff delay
//! factor, LKML, January 2013): each thread takes a hot, long-held lock,
//! then a cold, short-held one; Michel Lespinasse's worry was that a delay
//! learned on the hot lock oversleeps on the cold one.

use crate::harness::affinity::pin_current_thread;
use crate::harness::clock::{relax, ticks, TickScale};
use crate::peers::mutex::{LabLock, LockKind, MutexVisitor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Duration;

/// One run of Rik van Riel's two-lock mix: each thread takes a hot lock with a
/// long critical section, then a cold one with a short critical section.
#[derive(Debug, Clone)]
pub struct TwoLockConfig {
    pub threads: usize,
    pub duration: Duration,
    /// Relaxes inside the hot lock.
    pub hot_work: u32,
    /// Relaxes inside the cold lock.
    pub cold_work: u32,
    pub pin: Option<Vec<usize>>,
}

/// What one two-lock run measured.
#[derive(Debug, Clone)]
pub struct TwoLockResult {
    /// Rounds (hot + cold) completed, all threads together.
    pub rounds: u64,
    pub elapsed: Duration,
    pub per_thread: Vec<u64>,
    pub hot_longest: Duration,
    /// Mean time to take and drop the cold lock, nanoseconds.
    pub cold_mean_ns: f64,
    pub cold_longest: Duration,
    pub exact: bool,
}

impl TwoLockResult {
    pub fn rounds_per_sec(&self) -> f64 {
        self.rounds as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs the two-lock mix on lock kind `K`, both locks embedded in their data.
pub fn two_lock<K: LockKind>(cfg: &TwoLockConfig) -> TwoLockResult {
    two_lock_on::<K::Lock<u64>>(cfg)
}

fn two_lock_on<L: LabLock<u64>>(cfg: &TwoLockConfig) -> TwoLockResult {
    let hot = super::Aligned(L::new());
    let cold = super::Aligned(L::new());
    let (hot, cold) = (&hot.0, &cold.0);
    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(cfg.threads + 1);
    let (hot_work, cold_work) = (cfg.hot_work, cfg.cold_work);
    let (outcomes, elapsed, ns_per_tick) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cfg.threads)
            .map(|me| {
                let cpu = cfg.pin.as_ref().map(|p| p[me]);
                let (stop, start_line) = (&stop, &start_line);
                s.spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_current_thread(cpu);
                    }
                    start_line.wait();
                    let (mut rounds, mut hot_longest, mut cold_sum, mut cold_longest) =
                        (0u64, 0u64, 0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = ticks();
                        hot.with(|v| {
                            *v += 1;
                            relax(hot_work);
                        });
                        let t1 = ticks();
                        cold.with(|v| {
                            *v += 1;
                            relax(cold_work);
                        });
                        let t2 = ticks();
                        hot_longest = hot_longest.max(t1.wrapping_sub(t0));
                        let c = t2.wrapping_sub(t1);
                        cold_sum += c;
                        cold_longest = cold_longest.max(c);
                        rounds += 1;
                    }
                    (rounds, hot_longest, cold_sum, cold_longest)
                })
            })
            .collect();
        start_line.wait();
        let scale = TickScale::start();
        std::thread::sleep(cfg.duration);
        stop.store(true, Ordering::Relaxed);
        let outcomes: Vec<(u64, u64, u64, u64)> = workers
            .into_iter()
            .map(|w| w.join().expect("benchmark thread panicked"))
            .collect();
        (outcomes, scale.started().elapsed(), scale.ns_per_tick())
    });
    let per_thread: Vec<u64> = outcomes.iter().map(|o| o.0).collect();
    let rounds: u64 = per_thread.iter().sum();
    let to_dur = |t: u64| Duration::from_nanos((t as f64 * ns_per_tick) as u64);
    let cold_sum: u64 = outcomes.iter().map(|o| o.2).sum();
    let exact = hot.with(|v| *v) == rounds && cold.with(|v| *v) == rounds;
    TwoLockResult {
        rounds,
        elapsed,
        per_thread,
        hot_longest: to_dur(outcomes.iter().map(|o| o.1).max().unwrap_or(0)),
        cold_mean_ns: cold_sum as f64 * ns_per_tick / rounds.max(1) as f64,
        cold_longest: to_dur(outcomes.iter().map(|o| o.3).max().unwrap_or(0)),
        exact,
    }
}

/// [`two_lock`] as a visitor, for a registry entry's lock.
pub struct TwoLockLoop<'a>(pub &'a TwoLockConfig);

impl MutexVisitor for TwoLockLoop<'_> {
    type Out = TwoLockResult;
    fn visit<K: LockKind>(self) -> TwoLockResult {
        two_lock::<K>(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::mutex::Api;

    #[test]
    fn two_lock_mix_counts_both_locks() {
        let r = two_lock::<Api<ksync::spin::RawTicketLock>>(&TwoLockConfig {
            threads: 2,
            duration: Duration::from_millis(20),
            hot_work: 10,
            cold_work: 1,
            pin: None,
        });
        assert!(r.exact && r.rounds > 0);
    }
}
