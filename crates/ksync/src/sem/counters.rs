//! How much work a set's wakers did: [`SemCounters`], summed from one
//! [`Counters`] block per lock domain (each semaphore's, and the global
//! lock's), each written only by the holder of its lock.

use crate::sync::unmodelled::AtomicU64 as CounterU64;
use crate::sync::Ordering;

/// Event counters of one lock's domain, written only by that lock's holder
/// (a load and a store, no locked instruction) and summed by readers.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) attempts: CounterU64,
    pub(super) visited: CounterU64,
    pub(super) wakeups: CounterU64,
    pub(super) futex_wakes: CounterU64,
}

impl Counters {
    pub(super) fn bump(counter: &CounterU64, by: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    }

    pub(super) fn add_to(&self, sum: &mut SemCounters) {
        sum.attempts += self.attempts.load(Ordering::Relaxed);
        sum.visited += self.visited.load(Ordering::Relaxed);
        sum.wakeups += self.wakeups.load(Ordering::Relaxed);
        sum.futex_wakes += self.futex_wakes.load(Ordering::Relaxed);
    }
}

/// How much work the set's wakers did, for the lab (Kenneth Chen's tries per
/// wake-up, LKML, June 2003). Counted since the set was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SemCounters {
    /// Evaluations of an operation: each caller's own try plus every
    /// re-evaluation of a sleeper by a waker.
    pub attempts: u64,
    /// Wait-list entries a waker looked at.
    pub visited: u64,
    /// Sleepers whose result a waker delivered (success or error).
    pub wakeups: u64,
    /// Of those, sleepers that had gone to sleep in the kernel and needed a
    /// futex wake (the others were still polling).
    pub futex_wakes: u64,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn domains_sum_field_by_field() {
        let (a, b) = (Counters::default(), Counters::default());
        Counters::bump(&a.attempts, 3);
        Counters::bump(&a.visited, 5);
        Counters::bump(&b.attempts, 1);
        Counters::bump(&b.wakeups, 2);
        Counters::bump(&b.futex_wakes, 1);
        let mut sum = SemCounters::default();
        a.add_to(&mut sum);
        b.add_to(&mut sum);
        let expected = SemCounters {
            attempts: 4,
            visited: 5,
            wakeups: 2,
            futex_wakes: 1,
        };
        assert_eq!(sum, expected);
    }
}
