//! How much work a set's wakers and sleepers did: [`SemCounters`], summed
//! from one [`Counters`] block per lock domain (each semaphore's, and the
//! global lock's).

use crate::sync::unmodelled::AtomicU64 as CounterU64;
use crate::sync::Ordering;

/// Event counters of one lock's domain, summed by readers. The first four
/// are written only by that lock's holder ([`bump`](Counters::bump): a load
/// and a store, no locked instruction); the others ([`Outside`]) by threads
/// that do not hold it.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) attempts: CounterU64,
    pub(super) visited: CounterU64,
    pub(super) wakeups: CounterU64,
    pub(super) futex_wakes: CounterU64,
    pub(super) outside: Outside,
}

/// The counters written without the lock: by a waiting locker, a sleeper
/// after it woke, a waker after its unlock ([`add`](Counters::add), an
/// atomic add on a path that is about to make or has just made a system
/// call, or spins). On a line of their own: a woken sleeper adding its
/// polls would otherwise take the line its waker writes under the lock, and
/// the next waker would miss on it.
#[derive(Default)]
#[repr(align(64))]
pub(super) struct Outside {
    pub(super) lock_waits: CounterU64,
    pub(super) polls: CounterU64,
    pub(super) parks: CounterU64,
    pub(super) wake_calls: CounterU64,
}

impl Counters {
    /// Adds `by` to a counter only the holder of its lock writes.
    pub(super) fn bump(counter: &CounterU64, by: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    }

    /// Adds `by` to a counter anyone may write.
    pub(super) fn add(counter: &CounterU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(super) fn add_to(&self, sum: &mut SemCounters) {
        sum.attempts += self.attempts.load(Ordering::Relaxed);
        sum.visited += self.visited.load(Ordering::Relaxed);
        sum.wakeups += self.wakeups.load(Ordering::Relaxed);
        sum.futex_wakes += self.futex_wakes.load(Ordering::Relaxed);
        sum.lock_waits += self.outside.lock_waits.load(Ordering::Relaxed);
        sum.polls += self.outside.polls.load(Ordering::Relaxed);
        sum.parks += self.outside.parks.load(Ordering::Relaxed);
        sum.wake_calls += self.outside.wake_calls.load(Ordering::Relaxed);
    }
}

/// How much work the set's wakers and sleepers did, for the lab (Kenneth
/// Chen's tries per wake-up, LKML, June 2003, and where a wait's time goes).
/// Counted since the set was created.
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
    /// Times a thread found one of the set's locks taken and had to wait
    /// for it (spinning, then sleeping).
    pub lock_waits: u64,
    /// Polls of their status word blocked callers made before a result
    /// came or they slept.
    pub polls: u64,
    /// `FUTEX_WAIT` calls of blocked callers (a caller completed while it
    /// polled makes none).
    pub parks: u64,
    /// System calls wakers made to wake sleepers (`io_uring_enter` for a
    /// batch, or `FUTEX_WAKE`).
    pub wake_calls: u64,
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
        Counters::add(&a.outside.polls, 16);
        Counters::add(&b.outside.parks, 1);
        Counters::add(&b.outside.wake_calls, 1);
        Counters::add(&a.outside.lock_waits, 2);
        let mut sum = SemCounters::default();
        a.add_to(&mut sum);
        b.add_to(&mut sum);
        let expected = SemCounters {
            attempts: 4,
            visited: 5,
            wakeups: 2,
            futex_wakes: 1,
            lock_waits: 2,
            polls: 16,
            parks: 1,
            wake_calls: 1,
        };
        assert_eq!(sum, expected);
    }
}
