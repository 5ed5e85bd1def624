//! loom models of the MCS lock, both APIs (`RawMcsLock` with pooled nodes,
//! `McsLock` with caller-owned nodes): exclusion and progress with 2 and 3
//! threads, the non-blocking variants against a holder, and one thread
//! holding two `RawMcsLock`s at once (two pooled nodes) under contention.
//!
//! # How much of the state space each model covers
//!
//! * Two threads: every interleaving within `LOOM_MAX_PREEMPTIONS`.
//! * Three threads, `*_three_threads`: all three race for the lock, with at
//!   most one forced preemption (see `Bound`).
//! * Three threads, `*_two_waiters_queued`: the holder blocks on a channel
//!   until both other threads are about to lock, so in the schedule loom runs
//!   the second waiter links in behind the first, not behind the holder, and
//!   the lock goes down a queue of two. loom explores every value each load
//!   may return along that schedule (a `next` link read before or after the
//!   successor wrote it, which sends `unlock` down the compare-and-swap path)
//!   and checks every access to the protected data for a race.
//!
//! # Shown to fail on broken protocols
//!
//! Each of these, injected on its own, fails at least one model here: unlock
//! storing null to the tail instead of the compare-and-swap; the handover
//! store relaxed; the tail swap release-only; the `prev.next` link store
//! relaxed; unlock handing the lock to the tail instead of to `next` (only
//! the queued models).

use crate::exclusion::{
    builder, increments, increments_with, spawn_queued_waiters, try_lock_respects_holder,
    two_waiters_queued, Bound, Shared,
};
use ksync::spin::{McsLock, McsNode, RawMcsLock};
use lock_api::RawMutex;
use loom::sync::Arc;

/// The caller-owned node models' lock: an `McsLock` guarding nothing, whose
/// critical sections bump the shared counter.
type Node = Shared<McsLock<()>>;

fn new_node_lock() -> McsLock<()> {
    McsLock::new(())
}

/// Takes the lock with a node of this thread's stack, adds 1, releases it.
fn node_increment(shared: &Node) {
    let mut node = McsNode::new();
    shared.lock.with_node(&mut node, |()| {
        shared.bump_locked(1);
    });
}

/// [`increments_with`] for the caller-owned node API.
fn node_increments(threads: usize) {
    let bound = if threads > 2 { Bound::One } else { Bound::Env };
    increments_with(
        builder(bound),
        new_node_lock,
        threads,
        node_increment,
        |lock| !lock.is_locked(),
    );
}

#[test]
fn mcs_raw_two_threads() {
    increments(RawMcsLock::new, 2, true);
}

#[test]
fn mcs_raw_three_threads() {
    increments(RawMcsLock::new, 3, true);
}

#[test]
fn mcs_raw_two_waiters_queued() {
    two_waiters_queued(RawMcsLock::new);
}

#[test]
fn mcs_caller_node_two_threads() {
    node_increments(2);
}

#[test]
fn mcs_caller_node_three_threads() {
    node_increments(3);
}

#[test]
fn mcs_caller_node_two_waiters_queued() {
    builder(Bound::Scripted).check(|| {
        let shared = Shared::new(new_node_lock());
        let mut node = McsNode::new();
        let waiters = shared.lock.with_node(&mut node, |()| {
            let waiters = spawn_queued_waiters(&shared, node_increment);
            shared.bump_locked(1);
            waiters
        });
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(shared.total(), 3);
        assert!(!shared.lock.is_locked());
    });
}

#[test]
fn mcs_raw_try_lock_respects_holder() {
    try_lock_respects_holder(RawMcsLock::new);
}

#[test]
fn mcs_caller_node_try_respects_holder() {
    builder(Bound::Env).check(|| {
        let shared = Shared::new(new_node_lock());
        let other = Arc::clone(&shared);
        let trier = loom::thread::spawn(move || {
            let mut node = McsNode::new();
            other.lock.try_with_node(&mut node, |()| {
                other.bump_locked(10);
            });
        });
        node_increment(&shared);
        trier.join().unwrap();
        let total = shared.total();
        assert!(total == 1 || total == 11, "total {total}");
        assert!(!shared.lock.is_locked());
    });
}

/// Two threads queue with their own nodes while a third tries the lock:
/// `try_with_node` must fail whenever the queue is not empty.
#[test]
fn mcs_caller_node_two_lockers_one_trier() {
    builder(Bound::One).check(|| {
        let shared = Shared::new(new_node_lock());
        let (locker, trier) = (Arc::clone(&shared), Arc::clone(&shared));
        let locker = loom::thread::spawn(move || node_increment(&locker));
        let trier = loom::thread::spawn(move || {
            let mut node = McsNode::new();
            trier.lock.try_with_node(&mut node, |()| {
                trier.bump_locked(10);
            });
        });
        node_increment(&shared);
        locker.join().unwrap();
        trier.join().unwrap();
        let total = shared.total();
        assert!(total == 2 || total == 12, "total {total}");
        assert!(!shared.lock.is_locked());
    });
}

/// One thread holds two locks at once (two nodes from its pool) and releases
/// them out of order while another thread takes each in turn.
#[test]
fn mcs_raw_nested_out_of_order() {
    builder(Bound::Env).check(|| {
        let (a, b) = (
            Shared::new(RawMcsLock::new()),
            Shared::new(RawMcsLock::new()),
        );
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let other = loom::thread::spawn(move || {
            b2.increment();
            a2.increment();
        });
        let guard_a = a.lock.lock();
        let guard_b = b.lock.lock();
        a.bump_locked(1);
        b.bump_locked(1);
        // SAFETY: each guard came from `lock()` on its own lock, on this
        // thread; released in acquisition order, not reverse.
        unsafe {
            a.lock.unlock(guard_a);
            b.lock.unlock(guard_b);
        }
        other.join().unwrap();
        for shared in [a, b] {
            assert_eq!(shared.total(), 2);
            assert!(!shared.lock.is_locked());
        }
    });
}
