//! The spinlock measurements: uncontended cost and contended throughput.
//!
//! Both loops are generic over the lock type so that each lock's `lock` and
//! `unlock` are inlined into its own copy of the loop, as they would be in a
//! user's program.

use crate::peers::LabLock;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Nanoseconds per uncontended lock + unlock, best of `rounds` runs of
/// `iters` pairs (the minimum is the least disturbed by other processes).
pub fn uncontended<L: LabLock>(iters: u64, rounds: u32) -> f64 {
    let lock = L::new();
    let lock = black_box(&lock);
    // Warm up: first use may claim a thread slot or fault in a page.
    for _ in 0..iters.min(10_000) {
        lock.with(|v| *v += 1);
    }
    let mut best = f64::INFINITY;
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        for _ in 0..iters {
            lock.with(|v| *v = black_box(*v) + 1);
        }
        best = best.min(start.elapsed().as_nanos() as f64 / iters as f64);
    }
    best
}

/// What one contended run measured.
#[derive(Debug, Clone)]
pub struct Contended {
    pub threads: usize,
    /// Critical sections completed, all threads together.
    pub ops: u64,
    pub elapsed: Duration,
    /// Each thread's completed critical sections.
    pub per_thread: Vec<u64>,
    /// The protected counter ended equal to `ops`: no increment was lost.
    pub exact: bool,
}

impl Contended {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Smallest and largest per-thread share as a fraction of a fair share.
    pub fn share_range(&self) -> (f64, f64) {
        let fair = self.ops as f64 / self.threads as f64;
        if fair == 0.0 {
            return (0.0, 0.0);
        }
        let min = *self.per_thread.iter().min().unwrap_or(&0) as f64;
        let max = *self.per_thread.iter().max().unwrap_or(&0) as f64;
        (min / fair, max / fair)
    }
}

/// `threads` threads take one lock back to back for about `duration`; inside,
/// each increments the protected counter and spins `cs_work` relaxes.
///
/// The clock stops when the last thread has left, so a lock whose waiters
/// are stuck behind a preempted thread pays for the time they take to drain.
pub fn contended<L: LabLock>(threads: usize, duration: Duration, cs_work: u32) -> Contended {
    let lock = L::new();
    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(threads + 1);
    let (per_thread, elapsed) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start_line.wait();
                    let mut mine = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        lock.with(|v| {
                            *v += 1;
                            for _ in 0..cs_work {
                                std::hint::spin_loop();
                            }
                        });
                        mine += 1;
                    }
                    mine
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let per_thread: Vec<u64> = workers
            .into_iter()
            .map(|w| w.join().expect("benchmark thread panicked"))
            .collect();
        (per_thread, start.elapsed())
    });
    let ops = per_thread.iter().sum();
    let counted = lock.with(|v| *v);
    Contended {
        threads,
        ops,
        elapsed,
        per_thread,
        exact: counted == ops,
    }
}
