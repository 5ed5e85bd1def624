//! The uncontended cost of a semaphore down + up pair: one thread takes and
//! gives back `sems` semaphores (value 1), each in one call, in a loop: the
//! cost a program pays for a semaphore nobody else wants.

use crate::peers::sem::{SemBackend, SemVisitor};
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// Best ns per pair over `rounds` rounds of `iters` pairs of `pair`.
fn best_ns(iters: u64, rounds: u32, mut pair: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                pair();
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// ns per down + up pair of `sems` semaphores taken in one call on backend
/// `B`; an error if `B` cannot take them in one call.
pub fn pair_ns<B: SemBackend>(sems: u16, iters: u64, rounds: u32) -> Result<f64, String> {
    let set = B::create(usize::from(sems))?;
    let down: Vec<B::Op> = (0..sems).map(|n| B::op(n, -1, false)).collect();
    let up: Vec<B::Op> = (0..sems).map(|n| B::op(n, 1, false)).collect();
    let pair = || set.semop(&down).and_then(|()| set.semop(&up));
    set.semop(&up).map_err(|e| e.to_string())?;
    // A new ksync set starts in global mode, as the kernel's does; a few
    // single operations end it. Then one whole pair, untimed: the loop below
    // cannot stop to report an error.
    for _ in 0..16 {
        set.semop(&down[..1])
            .and_then(|()| set.semop(&up[..1]))
            .map_err(|e| e.to_string())?;
    }
    pair().map_err(|e| e.to_string())?;
    Ok(best_ns(iters, rounds, || {
        let done = pair();
        debug_assert!(done.is_ok());
    }))
}

/// The floor under any semaphore's down + up: two bare compare-and-swaps on
/// one word (1 to 0 with acquire, 0 to 1 with release), ns per pair.
pub fn cas_pair_ns(iters: u64, rounds: u32) -> f64 {
    let word = AtomicU32::new(1);
    let word = black_box(&word);
    best_ns(iters, rounds, || {
        let down = word.compare_exchange(1, 0, Ordering::Acquire, Ordering::Relaxed);
        let up = word.compare_exchange(0, 1, Ordering::Release, Ordering::Relaxed);
        debug_assert!(down.is_ok() && up.is_ok());
        black_box(down.is_ok() & up.is_ok());
    })
}

/// [`pair_ns`] as a visitor, for a registry entry's backend.
pub struct PairCost {
    pub sems: u16,
    pub iters: u64,
    pub rounds: u32,
}

impl SemVisitor for PairCost {
    type Out = Result<f64, String>;
    fn visit<B: SemBackend>(self) -> Self::Out {
        pair_ns::<B>(self.sems, self.iters, self.rounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::sem::{KsyncShared, PosixSems, SysvSet};

    #[test]
    fn every_backend_measures_a_finite_cost() {
        for ns in [
            pair_ns::<ksync::sem::SemSet>(1, 100, 1),
            pair_ns::<SysvSet>(1, 100, 1),
            pair_ns::<PosixSems>(1, 100, 1),
            pair_ns::<ksync::sem::SemSet>(2, 100, 1),
            pair_ns::<SysvSet>(2, 100, 1),
            pair_ns::<KsyncShared>(1, 100, 1),
            pair_ns::<KsyncShared>(2, 100, 1),
        ] {
            let ns = ns.unwrap();
            assert!(ns.is_finite() && ns > 0.0, "{ns}");
        }
        assert!(pair_ns::<PosixSems>(2, 100, 1).is_err());
        let floor = cas_pair_ns(100, 1);
        assert!(floor.is_finite() && floor > 0.0, "{floor}");
    }
}
