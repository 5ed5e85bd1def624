//! The set's shared state: the semaphores, the global lock and lists, the
//! mode word, and the undo entries, laid out so that what a single operation
//! touches shares no cache line with what other semaphores' callers write.
//!
//! Who may touch what is the locking protocol's business (`mode.rs`,
//! `sem_lock.rs`): a semaphore's value, undo adjustments and wait lists
//! belong to its own lock in per-semaphore mode and to the global lock in
//! global mode; the
//! global lists and `complex_count` only to the global lock. The fields are
//! `pub(super)` so that the protocol modules can each implement their part
//! on [`SetShared`]; nothing outside `sem` sees them.
//!
//! # What ties this state to one process
//!
//! Everything here is reached through pointers that are only valid in this
//! address space: the semaphore array is a `Box`, undo entries are `Arc`s,
//! wait lists hold [`NodeRef`](super::queue::NodeRef) pointers to the
//! sleepers' nodes (in the node pool, or a caller's frame), and wake-ups
//! carry futex word addresses. A
//! set shared between processes would keep this same layout in one mapping
//! and name those things by offset instead; the types below are the ones
//! that would change.

use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use super::counters::Counters;
use super::lock::GlobalLock;
use super::stamp::now_secs;
use super::undo_entry::UndoEntry;
use super::wait_list::WaitList;
use super::word::{self, GLOBAL};
use crate::sync::unmodelled::AtomicU64 as CounterU64;
use crate::sync::{AtomicBool, AtomicI32, AtomicU32, Ordering, UnsafeCell};

/// Wait lists of one semaphore.
#[derive(Default)]
pub(super) struct SemLists {
    /// Blocked single decrements (the kernel's `pending_alter`).
    pub(super) alter: WaitList,
    /// Blocked single wait-for-zero operations (`pending_const`).
    pub(super) zero: WaitList,
}

/// One semaphore, alone on its cache line (the third patch of Spraul's 2010
/// series). The fields a single operation touches come first.
#[repr(C)]
pub(super) struct Sem {
    /// The value, the semaphore's lock and the flags that keep lock-free
    /// operations off it (see `word.rs`). A single operation with no flag
    /// set is done with one compare-and-swap and no lock
    /// ([`SetShared::try_lock_free`]); everything else sets or finds a flag
    /// first, so under a lock the value can be read and written plainly.
    pub(super) word: AtomicU32,
    /// Process id of the last modifier, 0 if none (GETPID).
    pub(super) pid: AtomicI32,
    /// Seconds since the epoch of the last successful operation whose first
    /// operation named this semaphore (the kernel shards `sem_otime`).
    pub(super) otime: CounterU64,
    pub(super) lists: UnsafeCell<SemLists>,
    pub(super) counters: Counters,
}

impl Sem {
    /// Stamps a successful lock-free operation on this semaphore: `pid`
    /// (GETPID) and, for a call's first semaphore (`first`), the time
    /// (`sem_otime`). Plain stores, where [`SetShared::touch_otime`] compares
    /// first to keep clean a line it may not hold: the caller has just
    /// written the word, whose line these fields share, so the line is this
    /// thread's already. Without the loads and branches a lock-free down + up
    /// took 12.1 ns instead of 13.9 (`ksync-lab semop`, 2-core AMD EPYC).
    /// Racy, as comparing first was: every thread of the process stores the
    /// same pid, and of two calls racing across a second's boundary either
    /// second may stay.
    #[inline(always)]
    pub(super) fn stamp_after_write(&self, pid: i32, first: bool) {
        self.pid.store(pid, Ordering::Relaxed);
        if first {
            self.otime.store(now_secs(), Ordering::Relaxed);
        }
    }
}

// A semaphore's alter list, the inline entry most of all, shares the word's
// line (`wait_list.rs`): SemLists starts with it.
#[cfg(not(loom))]
const _: () = assert!(core::mem::offset_of!(Sem, lists) + core::mem::size_of::<WaitList>() <= 64);

/// State only the global lock protects.
pub(super) struct Global {
    pub(super) lock: GlobalLock,
    /// Sleeping complex operations (the kernel's `complex_count`).
    pub(super) complex_count: AtomicU32,
    /// Blocked complex alter operations, and every blocked alter operation
    /// while one of those exists.
    pub(super) alter: UnsafeCell<WaitList>,
    /// Blocked complex wait-for-zero operations.
    pub(super) zero: UnsafeCell<WaitList>,
    pub(super) counters: Counters,
    pub(super) ctime: CounterU64,
}

/// Written rarely: kept off the global lock's cache line.
pub(super) struct Mode {
    /// The set is in global mode: every semaphore's word has `GLOBAL` set.
    /// Read and written only under the global lock.
    pub(super) global: AtomicBool,
    /// Set by `remove`.
    pub(super) deleted: AtomicBool,
}

/// The shared part of a set; undo contexts hold a weak reference to it.
pub(crate) struct SetShared {
    pub(super) mode: CachePadded<Mode>,
    pub(super) global: CachePadded<Global>,
    pub(super) sems: Box<[CachePadded<Sem>]>,
    /// Every undo context's entry for this set (the kernel's `list_id`).
    pub(super) undo_list: Mutex<Vec<Arc<UndoEntry>>>,
}

// SAFETY: the wait lists hold pointers to sleeper nodes, touched only under
// the lock that protects the list while the sleeper is blocked (see
// `queue.rs`); every other field is atomic or a Mutex.
unsafe impl Send for SetShared {}
// SAFETY: as for Send: all shared mutation goes through atomics or through
// UnsafeCells accessed under the locks described in the module documentation.
unsafe impl Sync for SetShared {}

impl SetShared {
    pub(super) fn nsems(&self) -> usize {
        self.sems.len()
    }

    pub(super) fn is_deleted(&self) -> bool {
        // Pairs with the release store in `SemSet::remove`.
        self.mode.deleted.load(Ordering::Acquire)
    }

    /// The value semaphore `num`'s word holds: the value itself for the
    /// global lock's holder, which owns every word (`SetShared::value` reads
    /// a per-semaphore holder's copy instead).
    pub(super) fn word_value(&self, num: usize) -> i32 {
        word::value_of(self.sems[num].word.load(Ordering::Relaxed))
    }

    /// Sets the value in semaphore `num`'s word; only the global lock's
    /// holder, which owns every word, may.
    pub(super) fn set_word_value(&self, num: usize, value: i32) {
        let word = &self.sems[num].word;
        let current = word.load(Ordering::Relaxed);
        debug_assert!(current & GLOBAL != 0);
        word.store(word::with_value(current, value), Ordering::Relaxed);
    }

    /// Records an operation's time on semaphore `num` (the kernel shards
    /// `sem_otime` the same way). Inline: see `stamp::current_pid`.
    #[inline(always)]
    pub(super) fn touch_otime(&self, num: usize) {
        let now = now_secs();
        let otime = &self.sems[num].otime;
        // Only write when the second changed: the line stays clean.
        if otime.load(Ordering::Relaxed) != now {
            otime.store(now, Ordering::Relaxed);
        }
    }
}
