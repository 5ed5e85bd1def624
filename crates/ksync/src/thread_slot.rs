//! Small per-thread ids ("slots") and each slot's queue nodes.
//!
//! The kernel's queued spinlock names a waiter in its 4-byte lock word by CPU
//! number and nesting level, and finds that waiter's MCS node in a per-CPU
//! array. User space has threads, not CPUs, so ksync hands each thread a small
//! integer on its first queued lock, the *slot*, and keeps four [`QNode`]s per
//! slot (the kernel's task / softirq / hardirq / NMI levels become nesting
//! depth: a thread that is queued on one lock when it needs another, from a
//! signal handler say, uses the next node).
//!
//! * Slots are bits in a global bitmap: the first free one is claimed with a
//!   compare-and-swap when a thread first needs one and released by a
//!   thread-local destructor when the thread exits, so a long-running program
//!   that keeps creating threads recycles slot numbers instead of running out.
//! * Slot blocks live in 64-slot chunks allocated the first time a slot in the
//!   chunk is handed out and **never freed**. Other threads dereference a node
//!   they decoded from a lock word, sometimes just after its owner moved on (a
//!   paravirt unlock kicks a node after releasing the lock, as in the kernel),
//!   so node memory must outlive every lock; recycling keeps the total bounded
//!   by the peak number of live threads.
//! * After a thread's first queued lock, finding its nodes is one thread-local
//!   read and no allocation.
//! * At most [`MAX_SLOTS`] threads hold a slot at once (the lock word's 14-bit
//!   tail field stores slot + 1). A thread that finds none free, or that locks
//!   from a thread-local destructor after its slot was released, gets `None`
//!   from [`current`] and the locks fall back to spinning on `try_lock` without
//!   a queue node, as the kernel does when its four nodes are in use.
//!
//! Under loom the table is a per-execution `lazy_static` with a few slots, so
//! every model run starts from fresh nodes.

use crate::sync::{unmodelled, AtomicPtr, AtomicU32};
#[cfg(not(loom))]
use crate::sync::{AtomicU64, Ordering};

/// Nodes per slot: the kernel's `_Q_MAX_NODES`.
pub(crate) const NODES_PER_SLOT: usize = 4;

/// Slow-path event counters per slot (the lock events that `spin/events.rs` names): each thread
/// counts into its own slot, the way the kernel's lock events are per CPU,
/// so counting never moves a shared cache line between CPUs.
pub(crate) const EVENTS_PER_SLOT: usize = 24;

/// How many threads can hold a slot at once: the 14-bit tail field holds
/// slot + 1, so slots are `0..16383`.
#[cfg(not(loom))]
pub(crate) const MAX_SLOTS: u32 = (1 << 14) - 1;
/// Under loom: enough for the main thread and a few model threads.
#[cfg(loom)]
pub(crate) const MAX_SLOTS: u32 = 8;

/// One MCS queue node of a queued spinlock.
///
/// A thread initialises its node before publishing it in a lock word and
/// stops using it once it holds the lock; in between, its predecessor writes
/// `next`-in-`prev` and `locked`, and (paravirt) its predecessor and the lock
/// owner read and update `state`.
#[derive(Debug)]
pub(crate) struct QNode {
    /// The next waiter in the queue, written by that waiter after it swapped
    /// itself into the tail.
    pub(crate) next: AtomicPtr<QNode>,
    /// MCS handoff flag: 0 while waiting, 1 once this node is the queue head.
    pub(crate) locked: AtomicU32,
    /// Paravirt waiter state (running / halted / hashed); also the futex word
    /// the waiter sleeps on, so sleeping never touches the lock word.
    pub(crate) state: AtomicU32,
}

impl QNode {
    #[cfg(not(loom))]
    const fn new() -> Self {
        QNode {
            next: AtomicPtr::new(core::ptr::null_mut()),
            locked: AtomicU32::new(0),
            state: AtomicU32::new(0),
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        QNode {
            next: AtomicPtr::new(core::ptr::null_mut()),
            locked: AtomicU32::new(0),
            state: AtomicU32::new(0),
        }
    }
}

/// Everything one slot owns. Aligned so that no two slots share a cache line
/// (or an adjacent-line prefetch pair): waiters of different threads never
/// false-share, while one thread's four nodes, which only it queues, do.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct SlotBlock {
    /// The queue nodes, one per nesting level.
    pub(crate) nodes: [QNode; NODES_PER_SLOT],
    /// How many of `nodes` the owning thread is using now. Only the owner
    /// reads or writes it (relaxed); it is an atomic only so the block can be shared.
    pub(crate) nesting: AtomicU32,
    /// The owning thread's slow-path event counts. Only the owner writes them
    /// (a relaxed load and store); readers sum every slot's. They outlive
    /// the thread with the slot, so totals keep what exited threads counted.
    /// (Under loom the counters are plain globals: `spin::events`.)
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) events: [unmodelled::AtomicU64; EVENTS_PER_SLOT],
}

impl SlotBlock {
    #[cfg(not(loom))]
    const fn new() -> Self {
        SlotBlock {
            nodes: [const { QNode::new() }; NODES_PER_SLOT],
            nesting: AtomicU32::new(0),
            events: [const { unmodelled::AtomicU64::new(0) }; EVENTS_PER_SLOT],
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        SlotBlock {
            nodes: [QNode::new(), QNode::new(), QNode::new(), QNode::new()],
            nesting: AtomicU32::new(0),
            events: [const { unmodelled::AtomicU64::new(0) }; EVENTS_PER_SLOT],
        }
    }
}

/// The calling thread's slot: its number and its block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    /// `0..MAX_SLOTS`; the lock word stores `index + 1`.
    pub(crate) index: u32,
    /// This slot's nodes and nesting counter.
    pub(crate) block: &'static SlotBlock,
}

/// The calling thread's slot, claiming one on first use.
///
/// `None` when every slot is taken or this thread is being torn down; the
/// caller must then wait without a queue node.
#[inline]
pub(crate) fn current() -> Option<Slot> {
    let index = SLOT.try_with(|lease| lease.0).ok()?;
    if index == NO_SLOT {
        return None;
    }
    Some(Slot {
        index,
        block: block(index),
    })
}

/// Marks a thread that could not get a slot.
const NO_SLOT: u32 = u32::MAX;

/// A claimed slot, released when the owning thread exits.
struct SlotLease(u32);

impl Drop for SlotLease {
    fn drop(&mut self) {
        if self.0 != NO_SLOT {
            table::release(self.0);
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static SLOT: SlotLease = SlotLease(table::claim().unwrap_or(NO_SLOT));
}

#[cfg(loom)]
loom::thread_local! {
    static SLOT: SlotLease = SlotLease(table::claim().unwrap_or(NO_SLOT));
}

/// The block of slot `index`, which some thread claimed (it was decoded from a
/// lock word, or it is the caller's own).
#[inline]
pub(crate) fn block(index: u32) -> &'static SlotBlock {
    table::block(index)
}

/// Calls `f` with every slot block that exists (every slot some thread has
/// held), for summing per-slot counters.
#[cfg(not(loom))]
pub(crate) fn for_each_block(f: impl FnMut(&'static SlotBlock)) {
    table::for_each_block(f)
}

#[cfg(not(loom))]
mod table {
    use super::*;

    const CHUNK: usize = 64;
    const CHUNKS: usize = (MAX_SLOTS as usize).div_ceil(CHUNK);

    type Chunk = [SlotBlock; CHUNK];

    /// Bit `i % 64` of word `i / 64` is set while slot `i` is held.
    static USED: [AtomicU64; CHUNKS] = [const { AtomicU64::new(0) }; CHUNKS];
    /// Chunk `c` holds slots `c * 64 .. c * 64 + 64`; null until first needed.
    static CHUNKS_TABLE: [AtomicPtr<Chunk>; CHUNKS] =
        [const { AtomicPtr::new(core::ptr::null_mut()) }; CHUNKS];

    pub(super) fn claim() -> Option<u32> {
        for (word_index, word) in USED.iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            loop {
                let free = !bits;
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros();
                let index = (word_index * CHUNK) as u32 + bit;
                if index >= MAX_SLOTS {
                    return None;
                }
                // Acquire pairs with the release `fetch_and` in `release` of
                // the slot's previous owner: its last use of the nodes comes
                // before ours.
                match word.compare_exchange_weak(
                    bits,
                    bits | (1 << bit),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        ensure_chunk(word_index);
                        return Some(index);
                    }
                    Err(now) => bits = now,
                }
            }
        }
        None
    }

    pub(super) fn release(index: u32) {
        let word = &USED[index as usize / CHUNK];
        // Pairs with the acquire compare-and-swap in `claim`.
        word.fetch_and(!(1 << (index as usize % CHUNK)), Ordering::Release);
    }

    fn ensure_chunk(chunk: usize) {
        let entry = &CHUNKS_TABLE[chunk];
        // The acquires here and in `block` pair with the release half of the
        // compare-and-swap below that published the chunk.
        if !entry.load(Ordering::Acquire).is_null() {
            return;
        }
        let fresh = Box::into_raw(Box::new([const { SlotBlock::new() }; CHUNK]));
        if entry
            .compare_exchange(
                core::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: `fresh` came from `Box::into_raw` just above and lost the
            // race, so no other thread ever saw it.
            drop(unsafe { Box::from_raw(fresh) });
        }
    }

    pub(super) fn for_each_block(mut f: impl FnMut(&'static SlotBlock)) {
        for entry in &CHUNKS_TABLE {
            // Pairs with the release half of the compare-and-swap that
            // published the chunk in `ensure_chunk`.
            let chunk = entry.load(Ordering::Acquire);
            // SAFETY: chunks are published once and never freed.
            if let Some(chunk) = unsafe { chunk.as_ref() } {
                chunk.iter().for_each(&mut f);
            }
        }
    }

    #[inline]
    pub(super) fn block(index: u32) -> &'static SlotBlock {
        let index = index as usize;
        let chunk = CHUNKS_TABLE[index / CHUNK].load(Ordering::Acquire);
        assert!(
            !chunk.is_null(),
            "ksync: queue node of unclaimed thread slot {index}"
        );
        // SAFETY: chunks are published once and never freed, so a non-null
        // pointer is valid for 'static; `index % CHUNK` is in bounds.
        unsafe { &(*chunk)[index % CHUNK] }
    }
}

#[cfg(loom)]
mod table {
    use super::*;
    use crate::sync::{AtomicBool, Ordering};

    struct Table {
        used: Vec<AtomicBool>,
        blocks: Vec<SlotBlock>,
    }

    loom::lazy_static! {
        static ref TABLE: Table = Table {
            used: (0..MAX_SLOTS).map(|_| AtomicBool::new(false)).collect(),
            blocks: (0..MAX_SLOTS).map(|_| SlotBlock::new()).collect(),
        };
    }

    pub(super) fn claim() -> Option<u32> {
        let table: &'static Table = &TABLE;
        (0..MAX_SLOTS).find(|&i| {
            table.used[i as usize]
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Nothing: loom runs a thread's thread-local destructors after it has
    /// woken its joiners (and the model's main thread's after dropping the
    /// lazy statics), so by the time a lease is dropped the model may have
    /// returned and this table may be gone. Every execution starts from a
    /// fresh table, so under loom slots are simply not recycled.
    pub(super) fn release(_index: u32) {}

    pub(super) fn block(index: u32) -> &'static SlotBlock {
        let table: &'static Table = &TABLE;
        &table.blocks[index as usize]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_slot_and_exited_threads_give_theirs_back() {
        let mine = current().expect("a slot").index;
        assert_eq!(current().unwrap().index, mine);
        // Far more short-lived threads than a chunk: recycling keeps the
        // numbers small instead of walking up the whole table.
        let mut highest = 0;
        for _ in 0..300 {
            let index = std::thread::spawn(|| current().expect("a slot").index)
                .join()
                .unwrap();
            assert_ne!(index, mine);
            highest = highest.max(index);
        }
        assert!(highest < 64, "slots were not recycled: reached {highest}");
    }

    #[test]
    fn live_threads_get_distinct_slots() {
        let barrier = std::sync::Barrier::new(16);
        let mut seen: Vec<u32> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        let index = current().unwrap().index;
                        barrier.wait();
                        index
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 16);
    }
}
