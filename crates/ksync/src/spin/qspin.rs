//! The kernel's queued spinlock ("qspinlock"): a fair MCS queue squeezed into
//! one 32-bit word, following `queued_spin_lock_slowpath()` in
//! `kernel/locking/qspinlock.c` and the `_Q_PENDING_BITS == 8` helpers of
//! `kernel/locking/qspinlock.h`.
//!
//! Needs `std` (the queue nodes are per thread, found through a thread-local
//! slot), so it is not built with `--no-default-features`; the `no_std` queue
//! lock is [`McsLock`](super::McsLock), with caller-owned nodes.
//!
//! # State
//!
//! The word and the queue nodes are the contract both queued locks share
//! (`queued.rs`): `(tail, pending, locked)` in 32 bits, and four queue
//! nodes per thread, named in the tail by slot and nesting depth.
//!
//! # Transitions
//!
//! * Fast path: `(0,0,0) -> (0,0,1)` with one compare-and-swap. Unlock is one
//!   release store of 0 to the `locked` byte, `(*,*,1) -> (*,*,0)`; it never
//!   touches pending or tail, so it needs no read-modify-write.
//! * Pending (the second contender, no queue yet):
//!   - `(0,1,0)` is a pending waiter about to take the lock; wait a bounded
//!     number of reads for it to become `(0,0,1)` (`PENDING_LOOPS`).
//!   - Any pending or tail bit set: go queue.
//!   - `fetch_or(pending)`: `(0,0,*) -> (0,1,*)`. If the old value shows
//!     pending or tail after all, undo our pending bit if we set it and go
//!     queue (our pending may have made a queue head's claim fail, and that
//!     head now waits for a successor: us).
//!   - Wait for the owner: `(*,1,1) -> (*,1,0)`, then take it with one 16-bit
//!     store, `(*,1,0) -> (*,0,1)` ("clear_pending_set_locked"). Only the
//!     pending waiter writes those two bytes now, so no RMW is needed.
//! * Queue: claim a node (depth `d`), initialise it, try once more to take the
//!   lock (the node's line was cold, the owner may have left), then swap our
//!   tail code into bits 16..32: `(p,*,*) -> (n,*,*)`.
//!   - If there was a previous tail `p`, link in (`p.next = node`) and spin on
//!     our own `node.locked` until the predecessor hands over the queue head.
//!   - As head, wait until both the owner and any pending waiter have gone:
//!     `(n,x,y) -> (n,0,0)`. The pending waiter goes first: it arrived before
//!     the queue existed.
//!   - Claim: if we are still the tail, `(n,0,0) -> (0,0,1)` with one
//!     compare-and-swap, which also empties the queue. Otherwise (a successor
//!     swapped in, or a late arrival set pending and will see our tail and
//!     queue) store `locked = 1`, `(*,*,0) -> (*,*,1)`: while a head exists and
//!     pending is clear nobody else writes that byte. Then wait for the
//!     successor to link in and hand it the queue head (`next.locked = 1`).
//!
//! # Memory ordering
//!
//! * Every load or RMW that ends a wait for the lock is acquire and pairs with
//!   the release store of unlock: the fast-path compare-and-swap, the pending
//!   waiter's `fetch_or` and its spin on `locked`, the head's spin on the
//!   word. The stores that then take the lock (`clear_pending_set_locked`,
//!   `set_locked`, the claim compare-and-swap) are relaxed: they publish
//!   nothing and the acquire has happened.
//! * The tail swap is acquire-release: release publishes our node's
//!   initialisation (and, through the slot table's own ordering, its memory)
//!   to whoever decodes our tail; acquire makes the predecessor's node ours to
//!   write. The kernel gets this from `smp_wmb()` plus an address dependency.
//! * `prev.next = node` is release and is read by an acquire load, so the
//!   predecessor's `node.locked = 1` handover lands after our `locked = 0`
//!   initialisation; the handover is release and our spin on it acquire.
//! * The byte and halfword stores into the word are single instructions on
//!   x86 and AArch64 and RMW loops elsewhere and under loom; see
//!   `crate::sync`.
//!
//! # Oversubscription
//!
//! The queue is FIFO: when threads outnumber cores, a preempted waiter stalls
//! everyone queued behind it, exactly the problem of Waiman Long's "[PATCH
//! v10 13/19] unfair qspinlock: Enable lock stealing in lock waiters" (LKML
//! and xen-devel, May 2014). Use [`RawPvQSpinLock`](super::RawPvQSpinLock)
//! there.

use core::ptr;

use super::events::{event_set, EventCounter, QSPIN_EVENTS};
use super::queued::{
    decode_tail, node_ptr, wait_for_next, while_queued, xchg_tail, NodeLease, LOCKED_MASK,
    LOCKED_PENDING_MASK, LOCKED_VAL, PENDING_MASK, PENDING_VAL, TAIL_MASK,
};
use crate::relax::cpu_relax;
use crate::sync::{self, AtomicU32, Ordering};
use crate::thread_slot::NODES_PER_SLOT;

// ---------------------------------------------------------------------------
// Event counters.

/// The native lock's counters, on a cache line of their own.
#[repr(align(128))]
struct Events {
    pending: EventCounter,
    slowpath: EventCounter,
    use_node: [EventCounter; NODES_PER_SLOT - 1],
    no_node: EventCounter,
}

impl Events {
    const fn new() -> Self {
        Events {
            pending: EventCounter::new(QSPIN_EVENTS),
            slowpath: EventCounter::new(QSPIN_EVENTS + 1),
            use_node: [
                EventCounter::new(QSPIN_EVENTS + 2),
                EventCounter::new(QSPIN_EVENTS + 3),
                EventCounter::new(QSPIN_EVENTS + 4),
            ],
            no_node: EventCounter::new(QSPIN_EVENTS + 5),
        }
    }
}

event_set!(Events);

/// A snapshot of [`RawQSpinLock`]'s slow-path events, named after the
/// kernel's lock events (`kernel/locking/lock_events_list.h`), summed over
/// every lock and thread since start (or [`reset_qspin_stats`]).
///
/// The fast paths never touch them. Under loom each test thread has its own.
///
/// ```
/// let before = ksync::spin::qspin_stats();
/// let lock = ksync::spin::QSpinMutex::new(());
/// drop(lock.lock()); // uncontended: counts nothing
/// assert!(ksync::spin::qspin_stats().slowpath >= before.slowpath);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QSpinStats {
    /// Acquisitions by the pending waiter, the second contender
    /// (`lock_pending`).
    pub pending: u64,
    /// Acquisitions through the MCS queue (`lock_slowpath`).
    pub slowpath: u64,
    /// Of those, queued with this thread's second, third and fourth node
    /// because it was already queued on other locks (`lock_use_node2..4`).
    pub use_node: [u64; NODES_PER_SLOT - 1],
    /// Acquisitions that spun on `try_lock` without a node: no thread slot,
    /// or nested deeper than four (`lock_no_node`).
    pub no_node: u64,
}

/// Reads [`RawQSpinLock`]'s event counters.
pub fn qspin_stats() -> QSpinStats {
    let e = events();
    QSpinStats {
        pending: e.pending.get(),
        slowpath: e.slowpath.get(),
        use_node: [
            e.use_node[0].get(),
            e.use_node[1].get(),
            e.use_node[2].get(),
        ],
        no_node: e.no_node.get(),
    }
}

/// Sets [`RawQSpinLock`]'s event counters back to zero.
pub fn reset_qspin_stats() {
    let e = events();
    e.pending.reset();
    e.slowpath.reset();
    e.use_node.iter().for_each(EventCounter::reset);
    e.no_node.reset();
}

/// Counts a queued acquisition at depth `depth`.
#[inline]
fn count_queued(depth: u32) {
    let e = events();
    e.slowpath.bump();
    if let Some(nested) = depth.checked_sub(1) {
        e.use_node[nested as usize].bump();
    }
}

// ---------------------------------------------------------------------------
// The lock.

/// How many times a contender re-reads a `(0,1,0)` word, a pending waiter in
/// the middle of taking the lock, before it gives up and queues
/// (`_Q_PENDING_LOOPS`: the kernel uses 512 on x86 and 1 elsewhere;
/// 1 under loom).
pub(super) const PENDING_LOOPS: u32 = if cfg!(loom) {
    1
} else if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
    1 << 9
} else {
    1
};

/// The kernel's queued spinlock: 4 bytes, one compare-and-swap to lock and
/// one byte store to unlock when uncontended; a pending bit for the second
/// contender; an MCS queue of per-thread nodes after that. Needs `std`.
///
/// Fair (FIFO once queued), and each waiter spins on its own cache line. When
/// threads outnumber cores prefer [`RawPvQSpinLock`](super::RawPvQSpinLock).
///
/// ```
/// use ksync::spin::{QSpinMutex, RawQSpinLock};
/// use lock_api::RawMutex;
///
/// let total = QSpinMutex::new(0u32);
/// std::thread::scope(|s| {
///     for _ in 0..3 {
///         s.spawn(|| *total.lock() += 1);
///     }
/// });
/// assert_eq!(*total.lock(), 3);
///
/// // As a bare raw lock.
/// let raw = RawQSpinLock::new();
/// let guard = raw.lock();
/// assert!(raw.is_locked() && raw.try_lock().is_none());
/// // SAFETY: `guard` came from `raw.lock()`.
/// unsafe { raw.unlock(guard) };
/// assert!(!raw.is_locked());
/// ```
#[derive(Debug)]
pub struct RawQSpinLock {
    val: AtomicU32,
}

/// A [`lock_api::Mutex`] guarded by a [`RawQSpinLock`].
pub type QSpinMutex<T> = lock_api::Mutex<RawQSpinLock, T>;
/// The guard of a [`QSpinMutex`].
pub type QSpinMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawQSpinLock, T>;

impl RawQSpinLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawQSpinLock {
            val: AtomicU32::new(0),
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawQSpinLock {
            val: AtomicU32::new(0),
        }
    }

    /// Whether another thread waits for the lock or is queued (any pending or
    /// tail bit set): the kernel's `queued_spin_is_contended()`.
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.val.load(Ordering::Relaxed) & !LOCKED_MASK != 0
    }

    /// The raw lock word, for tests that check the encoding.
    #[cfg(all(test, not(loom)))]
    fn word(&self) -> u32 {
        self.val.load(Ordering::Relaxed)
    }

    /// `queued_spin_trylock()`: take the lock only if the whole word is 0,
    /// reading it first so that polling a busy lock does not take its cache
    /// line exclusive.
    #[inline]
    fn try_lock_word(&self) -> bool {
        self.val.load(Ordering::Relaxed) == 0 && self.try_lock_cas()
    }

    /// The same without the read, for the public `try_lock`: a failed
    /// `try_lock` is rare and not spun on in user space, while the read
    /// stalls behind the previous holder's byte store when one thread
    /// relocks at once, which made a wrapper that tries before it locks
    /// (`ksync::stat`) cost 1.4x instead of 1.05x.
    #[inline]
    fn try_lock_cas(&self) -> bool {
        self.val
            .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// `queued_spin_lock_slowpath()` up to the queue: the pending waiter.
    /// `val` is the word the fast path saw.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self, mut val: u32) {
        // (0,1,0): the pending waiter is between seeing the owner leave and
        // taking the lock. Give it a bounded moment; then queue regardless.
        if val == PENDING_VAL {
            let mut left = PENDING_LOOPS;
            while val == PENDING_VAL && left > 0 {
                cpu_relax();
                val = self.val.load(Ordering::Relaxed);
                left -= 1;
            }
        }

        if val & !LOCKED_MASK == 0 {
            // (0,0,*) -> (0,1,*): trylock or become the pending waiter.
            val = self.val.fetch_or(PENDING_VAL, Ordering::Acquire);
            if val & !LOCKED_MASK == 0 {
                // (0,1,1) -> (*,1,0): wait for the owner, with acquire loads
                // that pair with its release store.
                if val & LOCKED_MASK != 0 {
                    while self.val.load(Ordering::Acquire) & LOCKED_MASK != 0 {
                        cpu_relax();
                    }
                }
                // (*,1,0) -> (*,0,1): clear_pending_set_locked.
                sync::store_low_u16(&self.val, LOCKED_VAL as u16, Ordering::Relaxed);
                events().pending.bump();
                return;
            }
            // Somebody else is pending or queued. Undo our pending bit if we
            // set it (we own that byte until we clear it) and queue: our bit
            // may have failed a head's claim, and it now waits for us to link.
            if val & PENDING_MASK == 0 {
                sync::store_byte1(&self.val, 0, Ordering::Relaxed);
            }
        }
        self.lock_queued();
    }

    /// The MCS queue.
    fn lock_queued(&self) {
        let Some(lease) = NodeLease::claim() else {
            return self.lock_no_node();
        };
        count_queued(lease.depth());
        let node = lease.node();
        let tail = lease.tail();
        node.locked.store(0, Ordering::Relaxed);
        node.next.store(ptr::null_mut(), Ordering::Relaxed);

        // The node's line was probably cold; the lock may be free by now.
        if self.try_lock_word() {
            return;
        }

        let old = xchg_tail(&self.val, tail);
        let mut next = ptr::null_mut();
        if old & TAIL_MASK != 0 {
            let prev = decode_tail(old);
            // Pairs with the predecessor's acquire loads of `next` (below and
            // in `wait_for_next`): it sees our initialised node.
            prev.next.store(node_ptr(node), Ordering::Release);
            // Pairs with the predecessor's release hand-over,
            // `next.locked = 1` at the end of this function.
            while node.locked.load(Ordering::Acquire) == 0 {
                while_queued(lease.depth());
                cpu_relax();
            }
            // Most likely a successor is already linked: pick it up now,
            // while we wait for the owner anyway. Pairs with its release
            // store of `prev.next` above.
            next = node.next.load(Ordering::Acquire);
        }

        loop {
            // Queue head: wait for the owner and the pending waiter,
            // (n,x,y) -> (n,0,0). The acquire pairs with the release store
            // in `unlock`.
            let val = loop {
                let val = self.val.load(Ordering::Acquire);
                if val & LOCKED_PENDING_MASK == 0 {
                    break val;
                }
                while_queued(lease.depth());
                cpu_relax();
            };
            if val & TAIL_MASK != tail {
                // A successor swapped in: it links to us.
                break;
            }
            // Last in the queue: (n,0,0) -> (0,0,1) also empties it.
            if self
                .val
                .compare_exchange(val, LOCKED_VAL, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // The tail moved, or a late arrival set pending. The kernel
            // takes the lock now and waits for a successor, trusting that
            // arrival to see our tail and queue; but a thread without a
            // node never queues (`lock_no_node`: it clears its pending bit
            // and waits for a free word), so with nobody behind us the
            // lock would never be released. Look again instead.
        }
        // While a head exists and pending is clear nobody else writes
        // `locked`.
        sync::store_low_u8(&self.val, LOCKED_VAL as u8, Ordering::Relaxed);
        let next = wait_for_next(node, next);
        // Pairs with the successor's acquire spin on `node.locked` above.
        next.locked.store(1, Ordering::Release);
    }

    /// No node to queue with: spin on `try_lock`, as the kernel does for a
    /// fifth nesting level.
    #[cold]
    fn lock_no_node(&self) {
        events().no_node.bump();
        while !self.try_lock_word() {
            while_queued(NODES_PER_SLOT as u32);
            cpu_relax();
        }
    }
}

impl Default for RawQSpinLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the lock is held from a successful `(0,0,0) -> (0,0,1)`, a pending
// waiter's `(*,1,0) -> (*,0,1)` or a queue head's claim until the release
// store of 0 to `locked`. Only one thread at a time can be in a position to
// do each of those (the pending bit admits one waiter, the MCS queue one
// head, and the head waits for pending to clear), and every acquisition ends
// with an acquire load or RMW that reads the previous holder's release.
unsafe impl lock_api::RawMutex for RawQSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawQSpinLock::new() under loom");

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if let Err(val) =
            self.val
                .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
        {
            self.lock_slow(val);
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.try_lock_cas().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Pairs with the acquire of whoever takes the lock next: the fast
        // path's compare-and-swap, the pending waiter's `fetch_or` and spin
        // in `lock_slow`, the queue head's spin in `lock_queued`.
        sync::store_low_u8(&self.val, 0, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.val.load(Ordering::Relaxed) != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::queued::encode_tail;
    use super::super::queued::hook::{spawn_nester, Nested, LEVELS};
    use super::*;
    use crate::test_common::wait_until;
    use crate::thread_slot;
    use lock_api::RawMutex;
    use std::sync::atomic::{AtomicBool, AtomicU32 as StdAtomicU32, Ordering as O};
    use std::sync::Arc;

    #[test]
    fn lock_word_layout() {
        // The word itself, `(tail, pending, locked)`, is `queued.rs`'s and
        // tested there.
        assert_eq!(core::mem::size_of::<RawQSpinLock>(), 4);
        assert_eq!(core::mem::align_of::<RawQSpinLock>(), 4);
    }

    #[test]
    fn uncontended_lock_is_one_word_transition() {
        let lock = RawQSpinLock::new();
        assert!(!lock.is_locked());
        let guard = lock.lock();
        assert_eq!(lock.word(), LOCKED_VAL);
        assert!(lock.is_locked() && !lock.is_contended());
        assert!(lock.try_lock().is_none());
        // SAFETY: `guard` came from `lock.lock()`.
        unsafe { lock.unlock(guard) };
        assert_eq!(lock.word(), 0);
        let guard = lock.try_lock().expect("free lock");
        // SAFETY: as above.
        unsafe { lock.unlock(guard) };
    }

    /// The second contender takes the pending path, the third queues; the
    /// word shows each step.
    #[test]
    fn pending_then_queue() {
        let lock = Arc::new(RawQSpinLock::new());
        let pending_before = qspin_stats().pending;
        let guard = lock.lock();

        let second = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                let g = lock.lock();
                // SAFETY: `g` came from `lock.lock()`.
                unsafe { lock.unlock(g) };
            })
        };
        wait_until("the pending bit", || {
            lock.word() == PENDING_VAL | LOCKED_VAL
        });

        let (tx, rx) = std::sync::mpsc::channel();
        let third = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                tx.send(thread_slot::current().unwrap().index).unwrap();
                let g = lock.lock();
                // SAFETY: `g` came from `lock.lock()`.
                unsafe { lock.unlock(g) };
            })
        };
        let third_slot = rx.recv().unwrap();
        wait_until("the third thread's tail", || {
            lock.word() == encode_tail(third_slot, 0) | PENDING_VAL | LOCKED_VAL
        });
        assert!(lock.is_contended());

        // SAFETY: `guard` came from `lock.lock()`.
        unsafe { lock.unlock(guard) };
        second.join().unwrap();
        third.join().unwrap();
        assert_eq!(lock.word(), 0, "the last waiter clears the tail");
        assert!(qspin_stats().pending > pending_before);
    }

    // Nested queueing (see `hook::Nested`).
    static NESTED: [RawQSpinLock; LEVELS] = [const { RawQSpinLock::new() }; LEVELS];
    static DEEPEST: AtomicBool = AtomicBool::new(false);

    impl Nested for RawQSpinLock {
        fn nested() -> &'static [Self; LEVELS] {
            &NESTED
        }

        fn deepest() -> &'static AtomicBool {
            &DEEPEST
        }
    }

    #[test]
    fn nested_queueing_uses_four_nodes_then_spins_without_one() {
        let before = qspin_stats();
        // A holder and a pending waiter on every lock, so a newcomer queues.
        let guards: Vec<_> = NESTED.iter().map(|l| l.lock()).collect();
        let pending: Vec<_> = NESTED
            .iter()
            .map(|lock| {
                let t = std::thread::spawn(move || {
                    let g = lock.lock();
                    // SAFETY: `g` came from `lock.lock()`.
                    unsafe { lock.unlock(g) };
                });
                wait_until("a pending waiter", || lock.is_contended());
                t
            })
            .collect();

        let nester = spawn_nester::<RawQSpinLock>();
        for (lock, guard) in NESTED.iter().zip(guards).rev() {
            // SAFETY: each guard came from `lock.lock()` on its own lock.
            unsafe { lock.unlock(guard) };
        }
        assert_eq!(nester.join().unwrap(), 0b11111, "every depth was reached");
        pending.into_iter().for_each(|t| t.join().unwrap());

        let after = qspin_stats();
        for (level, (a, b)) in after.use_node.iter().zip(before.use_node).enumerate() {
            assert!(a > &b, "node {} was never used", level + 2);
        }
        assert!(after.no_node > before.no_node);
        assert!(NESTED.iter().all(|l| !l.is_locked()));
    }

    /// A thread-local destructor that runs after the thread gave its slot
    /// back still gets a contended lock, by spinning on `try_lock`.
    #[test]
    fn locking_from_a_tls_destructor_after_the_slot_is_gone() {
        static LOCK: RawQSpinLock = RawQSpinLock::new();
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

        let before = qspin_stats().no_node;
        // Held, with a pending waiter: the destructor has to queue.
        let guard = LOCK.lock();
        let pending = std::thread::spawn(|| {
            let g = LOCK.lock();
            // SAFETY: `g` came from `LOCK.lock()`.
            unsafe { LOCK.unlock(g) };
        });
        wait_until("a pending waiter", || LOCK.is_contended());
        let exiting = std::thread::spawn(|| {
            // Registered first, so destroyed after the slot's lease.
            ON_EXIT.with(|_| {});
            assert!(thread_slot::current().is_some());
        });
        wait_until("the no-node path", || qspin_stats().no_node > before);
        // SAFETY: `guard` came from `LOCK.lock()`.
        unsafe { LOCK.unlock(guard) };
        exiting.join().unwrap();
        pending.join().unwrap();
        assert_eq!(INSIDE.load(O::Relaxed), 1);
        assert!(
            !HAD_SLOT.load(O::Relaxed),
            "the slot outlived the destructor"
        );
        assert!(!LOCK.is_locked());
    }
}
