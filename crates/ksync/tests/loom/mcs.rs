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

use ksync::spin::{McsLock, McsNode, RawMcsLock};
use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;

/// How hard loom may push the scheduler.
enum Bound {
    /// `LOOM_MAX_PREEMPTIONS` (two-thread models).
    Env,
    /// At most one forced preemption. A spinning waiter yields to loom on
    /// every poll, and a switch at a yield costs no preemption; with two
    /// waiters spinning, loom keeps finding a new backtrack point in their
    /// alternation before the holder's next store, and from two preemptions
    /// on the exploration does not end.
    One,
    /// No forced preemption: the harness fixes the schedule, loom explores
    /// the values loads may return along it.
    Scripted,
}

fn model(bound: Bound) -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    // Every poll of a spin loop is a branch: waiting threads need more than
    // loom's default 1000 branches per execution.
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        model.max_branches = 20_000;
    }
    match bound {
        Bound::Env => {}
        Bound::One => model.preemption_bound = Some(model.preemption_bound.map_or(1, |b| b.min(1))),
        Bound::Scripted => model.preemption_bound = Some(0),
    }
    model
}

/// A counter only touched under a lock; loom's `UnsafeCell` reports any
/// access the lock fails to order.
struct Counter(UnsafeCell<u32>);

// SAFETY: every access goes through `bump_locked` (lock held) or `total`
// (other threads joined).
unsafe impl Sync for Counter {}

impl Counter {
    fn new() -> Self {
        Counter(UnsafeCell::new(0))
    }

    /// Adds `by`; the caller holds the lock guarding this counter.
    fn bump_locked(&self, by: u32) {
        // SAFETY: the caller holds the lock, so this thread alone accesses it.
        self.0.with_mut(|v| unsafe { *v += by });
    }

    /// The value once every other thread has been joined.
    fn total(&self) -> u32 {
        // SAFETY: all other threads have been joined.
        self.0.with(|v| unsafe { *v })
    }
}

/// The lock and data of the `RawMcsLock` models.
struct Raw {
    lock: RawMcsLock,
    value: Counter,
}

impl Raw {
    fn new() -> Arc<Self> {
        Arc::new(Raw {
            lock: RawMcsLock::new(),
            value: Counter::new(),
        })
    }

    fn increment(&self) {
        let guard = self.lock.lock();
        self.value.bump_locked(1);
        // SAFETY: `guard` came from `lock()` above, on this thread.
        unsafe { self.lock.unlock(guard) };
    }
}

/// The lock and data of the caller-owned node models.
struct Node {
    lock: McsLock<()>,
    value: Counter,
}

impl Node {
    fn new() -> Arc<Self> {
        Arc::new(Node {
            lock: McsLock::new(()),
            value: Counter::new(),
        })
    }

    fn increment(&self) {
        let mut node = McsNode::new();
        self.lock
            .with_node(&mut node, |()| self.value.bump_locked(1));
    }
}

/// Runs `increment` on `threads` threads (the model's main thread among
/// them) and checks the count; `is_locked` must be false at the end.
fn increments<S: Send + Sync + 'static>(
    threads: usize,
    new: fn() -> Arc<S>,
    increment: fn(&S),
    total: fn(&S) -> (u32, bool),
) {
    let bound = if threads > 2 { Bound::One } else { Bound::Env };
    model(bound).check(move || {
        let shared = new();
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                loom::thread::spawn(move || increment(&shared))
            })
            .collect();
        increment(&shared);
        for handle in handles {
            handle.join().unwrap();
        }
        assert_eq!(total(&shared), (threads as u32, false));
    });
}

fn raw_total(raw: &Raw) -> (u32, bool) {
    (raw.value.total(), raw.lock.is_locked())
}

fn node_total(node: &Node) -> (u32, bool) {
    (node.value.total(), node.lock.is_locked())
}

/// Spawns two threads that announce themselves and then `increment`; returns
/// once both have announced (blocking, so loom runs them meanwhile).
fn spawn_queued_waiters<S: Send + Sync + 'static>(
    shared: &Arc<S>,
    increment: fn(&S),
) -> Vec<loom::thread::JoinHandle<()>> {
    let (arriving, arrivals) = loom::sync::mpsc::channel();
    let waiters = (0..2)
        .map(|_| {
            let shared = Arc::clone(shared);
            let arriving = arriving.clone();
            loom::thread::spawn(move || {
                arriving.send(()).unwrap();
                increment(&shared);
            })
        })
        .collect();
    arrivals.recv().unwrap();
    arrivals.recv().unwrap();
    waiters
}

#[test]
fn mcs_raw_two_threads() {
    increments(2, Raw::new, Raw::increment, raw_total);
}

#[test]
fn mcs_raw_three_threads() {
    increments(3, Raw::new, Raw::increment, raw_total);
}

#[test]
fn mcs_raw_two_waiters_queued() {
    model(Bound::Scripted).check(|| {
        let shared = Raw::new();
        let guard = shared.lock.lock();
        let waiters = spawn_queued_waiters(&shared, Raw::increment);
        shared.value.bump_locked(1);
        // SAFETY: `guard` came from `lock()` above, on this thread.
        unsafe { shared.lock.unlock(guard) };
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(raw_total(&shared), (3, false));
    });
}

#[test]
fn mcs_caller_node_two_threads() {
    increments(2, Node::new, Node::increment, node_total);
}

#[test]
fn mcs_caller_node_three_threads() {
    increments(3, Node::new, Node::increment, node_total);
}

#[test]
fn mcs_caller_node_two_waiters_queued() {
    model(Bound::Scripted).check(|| {
        let shared = Node::new();
        let mut node = McsNode::new();
        let waiters = shared.lock.with_node(&mut node, |()| {
            let waiters = spawn_queued_waiters(&shared, Node::increment);
            shared.value.bump_locked(1);
            waiters
        });
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(node_total(&shared), (3, false));
    });
}

#[test]
fn mcs_raw_try_lock_respects_holder() {
    model(Bound::Env).check(|| {
        let shared = Raw::new();
        let other = Arc::clone(&shared);
        let trier = loom::thread::spawn(move || {
            if let Some(guard) = other.lock.try_lock() {
                other.value.bump_locked(10);
                // SAFETY: from the successful try_lock above, on this thread.
                unsafe { other.lock.unlock(guard) };
            }
        });
        shared.increment();
        trier.join().unwrap();
        let (total, locked) = raw_total(&shared);
        assert!(total == 1 || total == 11, "total {total}");
        assert!(!locked);
    });
}

#[test]
fn mcs_caller_node_try_respects_holder() {
    model(Bound::Env).check(|| {
        let shared = Node::new();
        let other = Arc::clone(&shared);
        let trier = loom::thread::spawn(move || {
            let mut node = McsNode::new();
            other
                .lock
                .try_with_node(&mut node, |()| other.value.bump_locked(10));
        });
        shared.increment();
        trier.join().unwrap();
        let (total, locked) = node_total(&shared);
        assert!(total == 1 || total == 11, "total {total}");
        assert!(!locked);
    });
}

/// Two threads queue with their own nodes while a third tries the lock:
/// `try_with_node` must fail whenever the queue is not empty.
#[test]
fn mcs_caller_node_two_lockers_one_trier() {
    model(Bound::One).check(|| {
        let shared = Node::new();
        let (locker, trier) = (Arc::clone(&shared), Arc::clone(&shared));
        let locker = loom::thread::spawn(move || locker.increment());
        let trier = loom::thread::spawn(move || {
            let mut node = McsNode::new();
            trier
                .lock
                .try_with_node(&mut node, |()| trier.value.bump_locked(10));
        });
        shared.increment();
        locker.join().unwrap();
        trier.join().unwrap();
        let (total, locked) = node_total(&shared);
        assert!(total == 2 || total == 12, "total {total}");
        assert!(!locked);
    });
}

/// One thread holds two locks at once (two nodes from its pool) and releases
/// them out of order while another thread takes each in turn.
#[test]
fn mcs_raw_nested_out_of_order() {
    model(Bound::Env).check(|| {
        let (a, b) = (Raw::new(), Raw::new());
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let other = loom::thread::spawn(move || {
            b2.increment();
            a2.increment();
        });
        let guard_a = a.lock.lock();
        let guard_b = b.lock.lock();
        a.value.bump_locked(1);
        b.value.bump_locked(1);
        // SAFETY: each guard came from `lock()` on its own lock, on this
        // thread; released in acquisition order, not reverse.
        unsafe {
            a.lock.unlock(guard_a);
            b.lock.unlock(guard_b);
        }
        other.join().unwrap();
        assert_eq!(raw_total(&a), (2, false));
        assert_eq!(raw_total(&b), (2, false));
    });
}
