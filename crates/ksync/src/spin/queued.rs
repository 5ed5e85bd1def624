//! The contract the two queued spinlocks share: the 32-bit word's layout,
//! the tail code that names a waiter's queue node, and how a waiter borrows,
//! links and hands over a node. [`RawQSpinLock`](super::RawQSpinLock)
//! (`qspin.rs`) and [`RawPvQSpinLock`](super::RawPvQSpinLock) (`pv/`)
//! both build on it, as the kernel's `qspinlock.c` and `qspinlock_paravirt.h`
//! both build on the helpers of `kernel/locking/qspinlock.h` (the
//! `_Q_PENDING_BITS == 8` variants).
//!
//! # The word
//!
//! The lock word, little-endian, as the triple `(tail, pending, locked)`:
//!
//! | bits | field | |
//! |---|---|---|
//! | 0..8 | `locked` | non-zero while held: [`LOCKED_VAL`]; the paravirt lock also uses `SLOW_VAL` (3) |
//! | 8..16 | `pending` | native: the second contender waits for the owner; paravirt: the queue head spins, no stealing |
//! | 16..18 | tail index | which of the tail thread's four nodes (nesting depth) |
//! | 18..32 | tail slot + 1 | the last queued thread's [slot](crate::thread_slot), 0 = no queue |
//!
//! `locked` and `pending` are whole bytes so that a holder can write either
//! with a byte store and the pending waiter both with one halfword store;
//! the tail is the upper halfword, swapped in with a halfword exchange
//! ([`xchg_tail`]). Unlock touches only the `locked` byte.
//!
//! # Queue nodes
//!
//! Each thread slot owns four MCS nodes ([`QNode`]: `next`, `locked`, and the
//! paravirt `state`) that live forever, so a waiter can name its node in 16
//! bits ([`encode_tail`]) and others can find it from the word
//! ([`decode_tail`]), even just after its owner moved on. A thread uses its
//! next node only when it must queue for a lock while already queued for
//! another (from a signal handler, say: the kernel's task, softirq, hardirq
//! and NMI levels); deeper than four, or without a slot, it gets no
//! [`NodeLease`] and spins on a trylock without a node, as the kernel does.
//!
//! # What a lock built on this does
//!
//! 1. Claims a node ([`NodeLease::claim`]) and initialises it (`locked = 0`,
//!    `next = null`, and the paravirt `state`) with relaxed stores.
//! 2. Publishes its tail code with [`xchg_tail`]; its release half carries
//!    the initialisation to the successor.
//! 3. With a predecessor (a non-zero old tail): [`decode_tail`], link in with
//!    a release store of `prev.next` (read by the predecessor's acquire loads
//!    in [`wait_for_next`]), and wait for `node.locked` with acquire loads,
//!    which pair with the predecessor's release hand-over below.
//! 4. As queue head, waits for the owner (and the pending waiter) with
//!    acquire loads of the word, which pair with the unlock's release store.
//! 5. Takes the lock: a compare-and-swap `(tail,0,0) -> (0,0,1)` if it is
//!    still the tail, which also empties the queue; otherwise it sets
//!    `locked`, finds its successor ([`wait_for_next`]) and hands it the
//!    queue head with a release store of `next.locked = 1`.
//! 6. Drops the lease after its last use of the node.
//!
//! Waits that hold a node call [`while_queued`] on every iteration, a test
//! hook that lets unit tests queue on another lock from inside a wait.

use crate::relax::cpu_relax;
use crate::sync::{self, AtomicU32, Ordering};
use crate::thread_slot::{self, QNode, SlotBlock, NODES_PER_SLOT};

// ---------------------------------------------------------------------------
// The word.

/// `locked` byte value of a held lock (`_Q_LOCKED_VAL`).
pub(super) const LOCKED_VAL: u32 = 1;
/// The `locked` byte (`_Q_LOCKED_MASK`).
pub(super) const LOCKED_MASK: u32 = 0xff;
/// The pending bit (`_Q_PENDING_VAL`); its whole byte is reserved so it can
/// be written with a byte store.
pub(super) const PENDING_VAL: u32 = 1 << 8;
/// The pending byte (`_Q_PENDING_MASK`).
pub(super) const PENDING_MASK: u32 = 0xff << 8;
/// `locked` and `pending` together (`_Q_LOCKED_PENDING_MASK`).
pub(super) const LOCKED_PENDING_MASK: u32 = LOCKED_MASK | PENDING_MASK;
/// Where the tail starts (`_Q_TAIL_OFFSET`).
pub(super) const TAIL_OFFSET: u32 = 16;
/// The tail's nesting index, bits 16..18 (`_Q_TAIL_IDX_OFFSET`).
pub(super) const TAIL_IDX_OFFSET: u32 = 16;
/// The tail's nesting index field.
pub(super) const TAIL_IDX_MASK: u32 = 0b11 << TAIL_IDX_OFFSET;
/// The tail's slot + 1, bits 18..32 (`_Q_TAIL_CPU_OFFSET`).
pub(super) const TAIL_SLOT_OFFSET: u32 = 18;
/// The whole tail (`_Q_TAIL_MASK`).
pub(super) const TAIL_MASK: u32 = 0xffff << TAIL_OFFSET;

const _: () = {
    assert!(NODES_PER_SLOT == 1 << (TAIL_SLOT_OFFSET - TAIL_IDX_OFFSET));
    // Slot + 1 must fit the 14 bits above the index.
    assert!(thread_slot::MAX_SLOTS < 1 << (32 - TAIL_SLOT_OFFSET));
};

/// The tail code of node `idx` of slot `slot`: `((slot + 1) << 18) | (idx << 16)`.
#[inline]
pub(super) const fn encode_tail(slot: u32, idx: u32) -> u32 {
    ((slot + 1) << TAIL_SLOT_OFFSET) | (idx << TAIL_IDX_OFFSET)
}

/// `(slot, idx)` of a non-zero tail code.
#[inline]
pub(super) const fn tail_fields(tail: u32) -> (u32, u32) {
    (
        (tail >> TAIL_SLOT_OFFSET) - 1,
        (tail & TAIL_IDX_MASK) >> TAIL_IDX_OFFSET,
    )
}

/// The node a non-zero tail code names. Its slot was claimed by the thread
/// that published the code, so its block exists (blocks are never freed).
#[inline]
pub(super) fn decode_tail(tail: u32) -> &'static QNode {
    let (slot, idx) = tail_fields(tail);
    &thread_slot::block(slot).nodes[idx as usize]
}

/// Swaps our tail code into bits 16..32 (`xchg_tail`) and returns the old
/// tail, in place (bits 16..32). Acquire-release: the release publishes our
/// node's initialisation to the successor whose own `xchg_tail` reads our
/// code (its acquire half), and the acquire half makes the predecessor we
/// read ours to link to.
#[inline]
pub(super) fn xchg_tail(word: &AtomicU32, tail: u32) -> u32 {
    u32::from(sync::swap_high_u16(
        word,
        (tail >> TAIL_OFFSET) as u16,
        Ordering::AcqRel,
    )) << TAIL_OFFSET
}

/// `node` as the raw pointer `QNode::next` holds.
#[inline]
pub(super) fn node_ptr(node: &'static QNode) -> *mut QNode {
    node as *const QNode as *mut QNode
}

/// Waits for the successor that swapped itself into the tail behind `node` to
/// link in, unless it already has (`next` non-null), and returns its node.
#[inline]
pub(super) fn wait_for_next(node: &QNode, mut next: *mut QNode) -> &'static QNode {
    while next.is_null() {
        cpu_relax();
        // Pairs with the successor's release store of `prev.next` (in
        // `RawQSpinLock::lock_queued`, `RawPvQSpinLock::lock_slow`).
        next = node.next.load(Ordering::Acquire);
    }
    // SAFETY: a non-null `next` was stored by a successor from its own
    // `&'static QNode` (see `node_ptr`); slot blocks are never freed.
    unsafe { &*next }
}

// ---------------------------------------------------------------------------
// Queue nodes.

/// One of this thread's queue nodes, held for one slow-path acquisition;
/// dropping it gives the nesting level back (the kernel's `count--`).
pub(super) struct NodeLease {
    block: &'static SlotBlock,
    idx: u32,
    tail: u32,
}

impl NodeLease {
    /// The next free node of this thread, or `None` when the thread has no
    /// slot (all taken, or it is being torn down) or is already queued on
    /// [`NODES_PER_SLOT`] locks; the caller then waits without a node.
    #[inline]
    pub(super) fn claim() -> Option<NodeLease> {
        let slot = thread_slot::current()?;
        let idx = slot.block.nesting.load(Ordering::Relaxed);
        if idx as usize >= NODES_PER_SLOT {
            return None;
        }
        slot.block.nesting.store(idx + 1, Ordering::Relaxed);
        // A signal handler that queues from here on must see the node as
        // taken before we start writing it (the kernel's `barrier()`).
        sync::signal_fence();
        Some(NodeLease {
            block: slot.block,
            idx,
            tail: encode_tail(slot.index, idx),
        })
    }

    /// The node.
    #[inline]
    pub(super) fn node(&self) -> &'static QNode {
        &self.block.nodes[self.idx as usize]
    }

    /// Its nesting depth, 0..4.
    #[inline]
    pub(super) fn depth(&self) -> u32 {
        self.idx
    }

    /// Its tail code.
    #[inline]
    pub(super) fn tail(&self) -> u32 {
        self.tail
    }
}

impl Drop for NodeLease {
    #[inline]
    fn drop(&mut self) {
        // Every use of the node comes before the level is given back.
        sync::signal_fence();
        self.block.nesting.store(self.idx, Ordering::Relaxed);
    }
}

/// Test-only hook run on every iteration of a wait that holds a queue node
/// (and of the no-node fallback), with the nesting depth; tests use it to
/// queue on another lock while queued, as a signal handler would.
#[cfg(all(test, not(loom)))]
pub(super) mod hook {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};

    std::thread_local! {
        static HOOK: Cell<Option<fn(u32)>> = const { Cell::new(None) };
    }

    /// Installs (or with `None` removes) this thread's hook.
    pub(crate) fn set(hook: Option<fn(u32)>) {
        HOOK.with(|h| h.set(hook));
    }

    #[inline]
    pub(crate) fn run(depth: u32) {
        if let Some(hook) = HOOK.with(Cell::get) {
            hook(depth);
        }
    }

    /// Locks for nested queueing through all four nodes and beyond, the way
    /// a signal handler would do it: while a thread waits in one lock's
    /// queue, the hook takes the next lock, which is contended too, so the
    /// thread queues with its next node; the fifth level has no node left.
    pub(crate) trait Nested: lock_api::RawMutex + Sync + Sized + 'static {
        /// [`LEVELS`] locks of this type.
        fn nested() -> &'static [Self; LEVELS];
        /// Set once a thread reached the deepest level.
        fn deepest() -> &'static AtomicBool;
    }

    /// Four levels with a node each, and one without.
    pub(crate) const LEVELS: usize = super::NODES_PER_SLOT + 1;

    std::thread_local! {
        /// The depths the hook ran at on this thread, one bit each.
        static SEEN: Cell<u32> = const { Cell::new(0) };
    }

    /// The hook: at each depth, once, take the next nested lock.
    fn nest<L: Nested>(depth: u32) {
        let bit = 1 << depth;
        if SEEN.with(|s| s.get()) & bit != 0 {
            return;
        }
        SEEN.with(|s| s.set(s.get() | bit));
        if (depth as usize) + 1 < LEVELS {
            let lock = &L::nested()[depth as usize + 1];
            let g = lock.lock();
            // SAFETY: `g` came from `lock.lock()`.
            unsafe { lock.unlock(g) };
        } else {
            L::deepest().store(true, Ordering::Release);
        }
    }

    /// Starts a thread that takes the first nested lock with [`nest`] as its
    /// hook, and waits until it reached the deepest level (the caller holds
    /// every nested lock). The thread returns the depths its hook ran at.
    pub(crate) fn spawn_nester<L: Nested>() -> std::thread::JoinHandle<u32> {
        let nester = std::thread::spawn(|| {
            set(Some(nest::<L>));
            let lock = &L::nested()[0];
            let g = lock.lock();
            // SAFETY: `g` came from `lock.lock()`.
            unsafe { lock.unlock(g) };
            set(None);
            SEEN.with(|s| s.get())
        });
        crate::test_common::wait_until("the fifth nesting level", || {
            L::deepest().load(Ordering::Acquire)
        });
        nester
    }
}

/// See `hook::run`; nothing outside unit tests.
#[inline(always)]
pub(super) fn while_queued(depth: u32) {
    #[cfg(all(test, not(loom)))]
    hook::run(depth);
    let _ = depth;
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn word_layout() {
        assert_eq!(LOCKED_MASK | PENDING_MASK | TAIL_MASK, u32::MAX);
        assert_eq!(LOCKED_MASK & PENDING_MASK, 0);
        assert_eq!(PENDING_MASK & TAIL_MASK, 0);
        assert_eq!(LOCKED_PENDING_MASK, 0xffff);
        assert_eq!(TAIL_MASK, 0xffff_0000);
        assert_eq!(TAIL_IDX_MASK | (0x3fff << TAIL_SLOT_OFFSET), TAIL_MASK);
        // The kernel's encoding: cpu + 1 at 18, idx at 16.
        assert_eq!(encode_tail(0, 0), 1 << 18);
        assert_eq!(encode_tail(0, 3), (1 << 18) | (3 << 16));
        assert_eq!(encode_tail(16382, 2), (16383 << 18) | (2 << 16));
        for slot in [0, 1, 63, 64, 4095, thread_slot::MAX_SLOTS - 1] {
            for idx in 0..NODES_PER_SLOT as u32 {
                let tail = encode_tail(slot, idx);
                assert_eq!(tail & !TAIL_MASK, 0);
                assert_ne!(tail, 0);
                assert_eq!(tail_fields(tail), (slot, idx));
            }
        }
    }

    #[test]
    fn decode_finds_this_threads_nodes() {
        let slot = thread_slot::current().unwrap();
        for idx in 0..NODES_PER_SLOT as u32 {
            let node = decode_tail(encode_tail(slot.index, idx));
            assert!(core::ptr::eq(node, &slot.block.nodes[idx as usize]));
        }
    }

    #[test]
    fn xchg_tail_swaps_only_the_tail() {
        let word = AtomicU32::new(PENDING_VAL | LOCKED_VAL);
        let first = encode_tail(5, 1);
        assert_eq!(xchg_tail(&word, first), 0);
        assert_eq!(
            word.load(Ordering::Relaxed),
            first | PENDING_VAL | LOCKED_VAL
        );
        assert_eq!(xchg_tail(&word, encode_tail(9, 0)), first);
        assert_eq!(
            word.load(Ordering::Relaxed) & LOCKED_PENDING_MASK,
            PENDING_VAL | LOCKED_VAL
        );
    }

    #[test]
    fn leases_nest_four_deep_and_give_the_level_back() {
        let first = NodeLease::claim().expect("a slot");
        let leases: Vec<NodeLease> = (1..NODES_PER_SLOT)
            .map(|_| NodeLease::claim().unwrap())
            .collect();
        assert_eq!(first.depth(), 0);
        for (depth, lease) in leases.iter().enumerate() {
            assert_eq!(lease.depth() as usize, depth + 1);
            assert_eq!(tail_fields(lease.tail()).1, lease.depth());
            assert!(core::ptr::eq(decode_tail(lease.tail()), lease.node()));
        }
        assert!(NodeLease::claim().is_none(), "a fifth level has no node");
        // Given back innermost first, as nested waits end.
        let mut leases = leases;
        while let Some(lease) = leases.pop() {
            drop(lease);
        }
        let again = NodeLease::claim().unwrap();
        assert_eq!(again.depth(), 1);
    }
}
