//! The uncontended cost of a lock: one thread, lock + unlock in a loop.

use crate::peers::mutex::{LabLock, LockKind, MutexVisitor};
use std::hint::black_box;
use std::time::Instant;

/// Nanoseconds per uncontended lock + unlock, best of `rounds` runs of
/// `iters` pairs (the minimum is the least disturbed by other processes).
pub fn uncontended<L: LabLock<u64>>(iters: u64, rounds: u32) -> f64 {
    let lock = super::Aligned(L::new());
    let lock = black_box(&lock.0);
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
        best = best.min(start.elapsed().as_nanos() as f64 / iters.max(1) as f64);
    }
    best
}

/// [`uncontended`] as a visitor: nanoseconds per lock + unlock of a
/// registry entry's lock, embedded beside its counter.
pub struct Uncontended {
    pub iters: u64,
    pub rounds: u32,
}

impl MutexVisitor for Uncontended {
    type Out = f64;
    fn visit<K: LockKind>(self) -> f64 {
        uncontended::<K::Lock<u64>>(self.iters, self.rounds)
    }
}
