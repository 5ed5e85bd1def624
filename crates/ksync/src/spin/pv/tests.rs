//! Unit tests of the reworked paravirt lock: its word, the pending path,
//! sleeping successors woken by the new owner's unlock, the hand-off that
//! stops stealing, nested queueing and the no-node path.
//!
//! The pv event counters are process-wide, summed over every lock: a test
//! that asserts on them runs alone among this module's tests (see
//! [`PV_LOCKS`]).

use super::super::queued::hook::{spawn_nester, Nested, LEVELS};
use super::super::queued::{decode_tail, tail_fields};
use super::*;
use crate::test_common::wait_until;
use crate::thread_slot;
use lock_api::RawMutex;
use std::sync::atomic::{AtomicBool, AtomicU32 as StdAtomicU32, Ordering as O};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// Every test here that takes a pv lock holds this, shared; a test that
/// reads the event counters holds it exclusively, so the events it counts
/// are its own locks'.
static PV_LOCKS: RwLock<()> = RwLock::new(());

fn using_pv_locks() -> RwLockReadGuard<'static, ()> {
    PV_LOCKS.read().unwrap_or_else(PoisonError::into_inner)
}

fn counting_pv_events() -> RwLockWriteGuard<'static, ()> {
    PV_LOCKS.write().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `lock` on a new thread, records `name` in `order` while holding
/// it, and unlocks.
fn lock_and_record(
    lock: &Arc<RawPvQSpinLock>,
    order: &Arc<Mutex<Vec<&'static str>>>,
    name: &'static str,
) -> std::thread::JoinHandle<()> {
    let lock = Arc::clone(lock);
    let order = Arc::clone(order);
    std::thread::spawn(move || {
        let g = lock.lock();
        order.lock().unwrap().push(name);
        // SAFETY: `g` came from `lock.lock()`.
        unsafe { lock.unlock(g) };
    })
}

#[test]
fn lock_word_and_handoff_bit() {
    assert_eq!(core::mem::size_of::<RawPvQSpinLock>(), 4);
    assert_eq!(HANDOFF_VAL & PENDING_MASK, HANDOFF_VAL);
    assert_eq!(HANDOFF_VAL & PENDING_VAL, 0);
}

#[test]
fn uncontended_and_try_lock() {
    let _pv = using_pv_locks();
    let lock = RawPvQSpinLock::new();
    let g = lock.lock();
    assert_eq!(lock.word(), LOCKED_VAL);
    assert!(lock.is_locked() && lock.try_lock().is_none());
    // SAFETY: `g` came from `lock.lock()`.
    unsafe { lock.unlock(g) };
    assert_eq!(lock.word(), 0);
    let g = lock.try_lock().unwrap();
    // SAFETY: `g` came from `lock.try_lock()`.
    unsafe { lock.unlock(g) };
}

/// The second contender, with no queue, waits as the pending waiter and
/// takes the lock with the halfword store: `(0,1,1)` while it waits.
#[test]
fn the_second_contender_is_the_pending_waiter() {
    let _alone = counting_pv_events();
    let before = pv_stats();
    let lock = Arc::new(RawPvQSpinLock::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let guard = lock.lock();
    let waiter = lock_and_record(&lock, &order, "waiter");
    wait_until("the pending bit, or the queue after a preemption", || {
        lock.word() & !LOCKED_MASK != 0
    });
    // SAFETY: `guard` came from `lock.lock()`.
    unsafe { lock.unlock(guard) };
    waiter.join().unwrap();
    assert_eq!(lock.word(), 0);
    let seen = pv_stats().since(&before);
    // On a loaded machine the waiter may have given the pending bit up and
    // queued; either way it took one of those paths.
    assert!(seen.pending + seen.queued >= 1, "{seen:?}");
}

/// A waiter queued behind a head sleeps; the head, on taking the lock,
/// hands it the queue head and its unlock (not its lock) wakes it.
#[test]
fn a_sleeping_successor_is_woken_by_the_new_owners_unlock() {
    let _alone = counting_pv_events();
    let before = pv_stats();
    let lock = Arc::new(RawPvQSpinLock::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let guard = lock.lock();
    let head = lock_and_record(&lock, &order, "head");
    wait_until("a queue head", || lock.word() & TAIL_MASK != 0);
    let head_tail = lock.word() & TAIL_MASK;
    let second = lock_and_record(&lock, &order, "second");
    wait_until("the second waiter asleep behind the head", || {
        let tail = lock.word() & TAIL_MASK;
        tail != head_tail && decode_tail(tail).state.load(O::Relaxed) == SLEEPING
    });
    // SAFETY: `guard` came from `lock.lock()`.
    unsafe { lock.unlock(guard) };
    head.join().unwrap();
    second.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["head", "second"]);
    assert_eq!(lock.word(), 0);
    let seen = pv_stats().since(&before);
    assert!(seen.sleeps >= 1, "{seen:?}");
    assert!(seen.wakes() >= 1, "{seen:?}");
}

/// A head that waited past `PV_HANDOFF_AFTER` raises `HANDOFF`: a thread
/// arriving after that queues behind it instead of stealing, so the head
/// gets the lock first.
#[test]
fn a_patient_head_raises_handoff_and_arrivals_stop_stealing() {
    let _alone = counting_pv_events();
    let before = pv_stats();
    let lock = Arc::new(RawPvQSpinLock::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let guard = lock.lock();
    let head = lock_and_record(&lock, &order, "head");
    wait_until("the head's hand-off", || lock.word() & HANDOFF_VAL != 0);
    let late = lock_and_record(&lock, &order, "late");
    wait_until("the late arrival to queue", || {
        pv_stats().since(&before).queued >= 2
    });
    // SAFETY: `guard` came from `lock.lock()`.
    unsafe { lock.unlock(guard) };
    head.join().unwrap();
    late.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["head", "late"]);
    assert_eq!(lock.word(), 0, "the claim cleared HANDOFF");
    let seen = pv_stats().since(&before);
    assert!(seen.handoffs >= 1, "{seen:?}");
}

// Nested queueing (see `hook::Nested`): while this thread is queued on one
// lock, the hook locks the next one, which is held too.
static NESTED: [RawPvQSpinLock; LEVELS] = [const { RawPvQSpinLock::new() }; LEVELS];
static DEEPEST: AtomicBool = AtomicBool::new(false);

impl Nested for RawPvQSpinLock {
    fn nested() -> &'static [Self; LEVELS] {
        &NESTED
    }

    fn deepest() -> &'static AtomicBool {
        &DEEPEST
    }
}

#[test]
fn nested_queueing_uses_four_nodes_then_goes_without() {
    let _alone = counting_pv_events();
    let before = pv_stats();
    let guards: Vec<_> = NESTED.iter().map(|l| l.lock()).collect();
    let nester = spawn_nester::<RawPvQSpinLock>();
    // Queued with nodes 0..3 (one tail per lock, index = depth).
    for (depth, lock) in NESTED.iter().take(NODES_PER_SLOT).enumerate() {
        let (_, idx) = tail_fields(lock.word() & TAIL_MASK);
        assert_eq!(idx as usize, depth);
    }
    assert_eq!(NESTED[NODES_PER_SLOT].word() & TAIL_MASK, 0, "no node left");
    for (lock, guard) in NESTED.iter().zip(guards).rev() {
        // SAFETY: each guard came from `lock.lock()` on its own lock.
        unsafe { lock.unlock(guard) };
    }
    assert_eq!(nester.join().unwrap(), 0b11111);
    assert!(pv_stats().no_node > before.no_node);
    assert!(NESTED.iter().all(|l| l.word() == 0));
}

#[test]
fn locking_from_a_tls_destructor_after_the_slot_is_gone() {
    static LOCK: RawPvQSpinLock = RawPvQSpinLock::new();
    static INSIDE: StdAtomicU32 = StdAtomicU32::new(0);
    static HAD_SLOT: AtomicBool = AtomicBool::new(true);

    struct LocksOnExit;
    impl Drop for LocksOnExit {
        fn drop(&mut self) {
            HAD_SLOT.store(thread_slot::current().is_some(), O::Relaxed);
            let g = LOCK.lock();
            INSIDE.fetch_add(1, O::Relaxed);
            // SAFETY: `g` came from `LOCK.lock()`.
            unsafe { LOCK.unlock(g) };
        }
    }
    std::thread_local! {
        static ON_EXIT: LocksOnExit = const { LocksOnExit };
    }

    let _alone = counting_pv_events();
    let before = pv_stats().no_node;
    let guard = LOCK.lock();
    let exiting = std::thread::spawn(|| {
        ON_EXIT.with(|_| {});
        assert!(thread_slot::current().is_some());
    });
    wait_until("the no-node path", || pv_stats().no_node > before);
    std::thread::sleep(Duration::from_millis(1));
    // SAFETY: `guard` came from `LOCK.lock()`.
    unsafe { LOCK.unlock(guard) };
    exiting.join().unwrap();
    assert_eq!(INSIDE.load(O::Relaxed), 1);
    assert!(!HAD_SLOT.load(O::Relaxed), "the slot outlived the thread");
}

/// An arrival whose fast path saw the lock held with no queue, and that
/// reaches its `fetch_or(PENDING)` only after a head queued and raised
/// `HANDOFF`, must give its pending bit back: a bit nobody owns would keep
/// the head waiting forever. The stale word is passed to the slow path
/// directly, which is exactly what that race does.
#[test]
fn a_stale_arrival_gives_back_the_pending_bit_it_set_behind_a_handoff() {
    let _pv = using_pv_locks();
    let lock = Arc::new(RawPvQSpinLock::new());
    let order = Arc::new(Mutex::new(Vec::new()));
    let guard = lock.lock();
    let head = lock_and_record(&lock, &order, "head");
    wait_until("the head's hand-off", || lock.word() & HANDOFF_VAL != 0);
    let head_tail = lock.word() & TAIL_MASK;
    let stale = {
        let lock = Arc::clone(&lock);
        let order = Arc::clone(&order);
        std::thread::spawn(move || {
            // The word this arrival's fast path saw: held, nobody waiting.
            let g = lock.lock_slow(LOCKED_VAL);
            order.lock().unwrap().push("stale");
            // SAFETY: `g` came from this lock's slow path: we hold it.
            unsafe { lock.unlock(g) };
        })
    };
    wait_until("the stale arrival to queue behind the head", || {
        let word = lock.word();
        word & TAIL_MASK != head_tail && word & PENDING_VAL == 0
    });
    // SAFETY: `guard` came from `lock.lock()`.
    unsafe { lock.unlock(guard) };
    wait_until("the head and the stale arrival to finish", || {
        order.lock().unwrap().len() == 2
    });
    head.join().unwrap();
    stale.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["head", "stale"]);
    assert_eq!(lock.word(), 0);
}
