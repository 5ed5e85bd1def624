//! MCS lock torture: `RawMcsLock` (pooled per-thread nodes) through the
//! exclusion check with 2, 8 and 64 threads, `try_lock` under contention and
//! release on panic (shared with the ticket tests); the caller-owned node API
//! under contention; one thread holding many MCS locks at once, released in
//! and out of order; forgotten guards and threads that exit holding a lock.

use crate::exclusion::{
    assert_excludes_fifo, hammer_waiting, Exclusive, FIFO_EIGHT, FIFO_OVERSUBSCRIBED, FIFO_TWO,
    FIFO_WAITERS,
};
use crate::ticket::{panic_in_critical_section_releases, try_lock_under_contention};
use ksync::spin::{McsLock, McsMutex, McsNode, RawMcsLock};
use lock_api::RawMutex;
use std::cell::{Cell, RefCell};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

/// Runs `f` on another thread and fails the test if it takes longer than
/// `limit` (a deadlocked lock), instead of hanging.
fn with_watchdog(name: &str, limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (done_tx, done_rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        f();
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        // The worker panicked: re-raise its panic.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{name}: stuck after {limit:?}"),
    }
}

const WATCHDOG: Duration = Duration::from_secs(120);

fn raw(size: (usize, u64)) {
    assert_excludes_fifo("mcs/raw", RawMcsLock::INIT, size.0, size.1);
}

#[test]
fn raw_two_threads() {
    raw(FIFO_TWO);
}

#[test]
fn raw_eight_threads() {
    raw(FIFO_EIGHT);
}

#[test]
fn raw_sixty_four_threads_oversubscribed() {
    raw(FIFO_OVERSUBSCRIBED);
}

#[test]
fn raw_try_lock_under_contention() {
    try_lock_under_contention(RawMcsLock::INIT);
}

#[test]
fn raw_panic_in_critical_section_releases() {
    panic_in_critical_section_releases(RawMcsLock::INIT);
}

/// The caller-owned node API under the exclusion check: each thread brings
/// its own node, and every other acquisition goes through `try_with_node`
/// retries.
struct CallerNodes(McsLock);

thread_local! {
    static NODE: RefCell<McsNode> = const { RefCell::new(McsNode::new()) };
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

impl Exclusive for CallerNodes {
    fn critical(&self, section: impl FnOnce() + Send) {
        NODE.with_borrow_mut(|node| {
            let call = CALLS.get();
            CALLS.set(call + 1);
            if call % 2 == 1 {
                let mut section = Some(section);
                while self
                    .0
                    .try_with_node(node, |()| section.take().unwrap()())
                    .is_none()
                {
                    thread::yield_now();
                }
            } else {
                self.0.with_node(node, |()| section());
            }
        });
    }
}

fn hammer_caller_nodes((threads, iters): (usize, u64)) {
    let lock = Arc::new(CallerNodes(McsLock::new(())));
    let report = hammer_waiting(Arc::clone(&lock), threads, iters, FIFO_WAITERS);
    assert!(report.is_exact(), "mcs/caller-node: {report:?}");
    assert!(!lock.0.is_locked());
}

#[test]
fn caller_nodes_two_threads() {
    hammer_caller_nodes(FIFO_TWO);
}

#[test]
fn caller_nodes_eight_threads() {
    hammer_caller_nodes(FIFO_EIGHT);
}

#[test]
fn caller_nodes_sixty_four_threads_oversubscribed() {
    hammer_caller_nodes(FIFO_OVERSUBSCRIBED);
}

#[test]
fn caller_node_released_when_closure_panics() {
    let lock = Arc::new(McsLock::new(0u32));
    let panicker = {
        let lock = lock.clone();
        thread::spawn(move || {
            let mut node = McsNode::new();
            lock.with_node(&mut node, |n| {
                *n = 1;
                panic!("deliberate panic inside with_node");
            })
        })
    };
    assert!(panicker.join().is_err());
    assert!(!lock.is_locked());
    let mut node = McsNode::new();
    assert_eq!(lock.try_with_node(&mut node, |n| *n), Some(1));
}

const DEPTH: usize = 10;

/// Release orders for `DEPTH` held locks: in order, reversed, and scrambled.
fn release_orders() -> [[usize; DEPTH]; 3] {
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
        [3, 7, 0, 9, 5, 1, 8, 2, 6, 4],
    ]
}

#[test]
fn raw_one_thread_holds_ten_locks() {
    let mutexes: Vec<McsMutex<u32>> = (0..DEPTH).map(|_| McsMutex::new(0)).collect();
    for order in release_orders() {
        let mut guards: Vec<_> = mutexes.iter().map(|m| Some(m.lock())).collect();
        assert!(mutexes.iter().all(|m| m.is_locked()));
        for (released, &i) in order.iter().enumerate() {
            let mut guard = guards[i].take().unwrap();
            *guard += 1;
            drop(guard);
            assert!(!mutexes[i].is_locked());
            // The others are untouched.
            for &j in &order[released + 1..] {
                assert!(mutexes[j].is_locked(), "releasing {i} released {j}");
            }
        }
    }
    assert!(mutexes.iter().all(|m| *m.lock() == 3));
}

/// Several threads each take all ten locks (in index order, so no deadlock),
/// bump each counter, and release them in a different order every round.
#[test]
fn raw_nested_locks_under_contention() {
    const THREADS: usize = 4;
    const ROUNDS: u32 = 150;
    with_watchdog("mcs/raw-nested", WATCHDOG, || {
        let mutexes: Arc<Vec<McsMutex<u32>>> =
            Arc::new((0..DEPTH).map(|_| McsMutex::new(0)).collect());
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let mutexes = mutexes.clone();
                thread::spawn(move || {
                    let orders = release_orders();
                    for round in 0..ROUNDS as usize {
                        let mut guards: Vec<_> = mutexes.iter().map(|m| Some(m.lock())).collect();
                        for &i in &orders[(round + t) % orders.len()] {
                            let mut guard = guards[i].take().unwrap();
                            *guard += 1;
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        for m in mutexes.iter() {
            assert_eq!(*m.lock(), THREADS as u32 * ROUNDS);
        }
    });
}

/// Ten caller-owned nodes, ten locks held at once: nested closures release in
/// reverse order; the raw API releases in any order.
#[test]
fn caller_nodes_one_thread_holds_ten_locks() {
    fn nest(locks: &[McsLock<u32>], nodes: &mut [McsNode]) {
        if let (Some((lock, locks)), Some((node, nodes))) =
            (locks.split_first(), nodes.split_first_mut())
        {
            lock.with_node(node, |count| {
                *count += 1;
                nest(locks, nodes);
            });
        }
    }
    let locks: Vec<McsLock<u32>> = (0..DEPTH).map(|_| McsLock::new(0)).collect();
    let mut nodes: Vec<McsNode> = (0..DEPTH).map(|_| McsNode::new()).collect();
    nest(&locks, &mut nodes);
    assert!(locks.iter().all(|l| !l.is_locked()));

    for order in release_orders() {
        for (lock, node) in locks.iter().zip(&nodes) {
            // SAFETY: each node is in no queue and stays in place (the `nodes`
            // vector is not touched) until its `unlock_raw` below.
            unsafe { lock.lock_raw(node) };
        }
        for &i in &order {
            // SAFETY: lock `i` is held through node `i`, released once.
            unsafe {
                *locks[i].data_ptr() += 1;
                locks[i].unlock_raw(&nodes[i]);
            }
            assert!(!locks[i].is_locked());
        }
    }
    for lock in &locks {
        let mut node = McsNode::new();
        assert_eq!(lock.with_node(&mut node, |c| *c), 4);
    }
}

/// Caller-owned nodes nested ten deep by several threads at once.
#[test]
fn caller_nodes_nested_under_contention() {
    const THREADS: usize = 4;
    const ROUNDS: u32 = 150;
    fn nest(locks: &[McsLock<u32>], nodes: &mut [McsNode]) {
        if let (Some((lock, locks)), Some((node, nodes))) =
            (locks.split_first(), nodes.split_first_mut())
        {
            lock.with_node(node, |count| {
                *count += 1;
                nest(locks, nodes);
            });
        }
    }
    with_watchdog("mcs/caller-nested", WATCHDOG, || {
        let locks: Arc<Vec<McsLock<u32>>> = Arc::new((0..DEPTH).map(|_| McsLock::new(0)).collect());
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let locks = locks.clone();
                thread::spawn(move || {
                    let mut nodes: Vec<McsNode> = (0..DEPTH).map(|_| McsNode::new()).collect();
                    for _ in 0..ROUNDS {
                        nest(&locks, &mut nodes);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let mut node = McsNode::new();
        for lock in locks.iter() {
            assert_eq!(lock.with_node(&mut node, |c| *c), THREADS as u32 * ROUNDS);
        }
    });
}

/// Forgetting a guard leaves the lock held (a deadlock for later lockers,
/// never memory unsafety), and the pool keeps working around the stranded
/// node, also after the thread that forgot it has exited.
#[test]
fn forgotten_guards_and_exited_holders_stay_safe() {
    let stranded = Arc::new(McsMutex::new(0u32));
    {
        let stranded = stranded.clone();
        thread::spawn(move || {
            std::mem::forget(stranded.lock());
            // This thread's other locks keep working (fresh or pooled nodes).
            let other = McsMutex::new(0);
            for _ in 0..100 {
                *other.lock() += 1;
            }
            // It exits holding `stranded`: its free list goes to the pool.
        })
        .join()
        .unwrap();
    }
    assert!(stranded.is_locked());
    assert!(stranded.try_lock().is_none());
    // New threads take the exited thread's pooled nodes; lock many at once to
    // draw several from the pool.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(|| {
                let mutexes: Vec<McsMutex<u32>> = (0..DEPTH).map(|_| McsMutex::new(0)).collect();
                for _ in 0..100 {
                    let guards: Vec<_> = mutexes.iter().map(|m| m.lock()).collect();
                    drop(guards);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(stranded.is_locked());
    assert!(stranded.try_lock().is_none());
}
