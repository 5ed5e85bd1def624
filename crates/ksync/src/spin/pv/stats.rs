//! [`RawPvQSpinLock`](super::RawPvQSpinLock)'s slow-path events, named
//! after the kernel's `pv_*` and `lock_*` lock events, and their public
//! snapshot [`PvStats`].

use super::super::events::{event_set, EventCounter};

#[repr(align(128))]
pub(super) struct Events {
    pub(super) slowpath: EventCounter,
    pub(super) no_node: EventCounter,
    pub(super) lock_stealing: EventCounter,
    pub(super) wait_node: EventCounter,
    pub(super) wait_early: EventCounter,
    pub(super) wait_head: EventCounter,
    pub(super) wait_again: EventCounter,
    pub(super) hash_next: EventCounter,
    pub(super) kick_unlock: EventCounter,
    pub(super) spurious_wakeup: EventCounter,
    pub(super) hash_hops: EventCounter,
}

impl Events {
    const fn new() -> Self {
        Events {
            slowpath: EventCounter::new(),
            no_node: EventCounter::new(),
            lock_stealing: EventCounter::new(),
            wait_node: EventCounter::new(),
            wait_early: EventCounter::new(),
            wait_head: EventCounter::new(),
            wait_again: EventCounter::new(),
            hash_next: EventCounter::new(),
            kick_unlock: EventCounter::new(),
            spurious_wakeup: EventCounter::new(),
            hash_hops: EventCounter::new(),
        }
    }

    fn all(&self) -> [&EventCounter; 11] {
        [
            &self.slowpath,
            &self.no_node,
            &self.lock_stealing,
            &self.wait_node,
            &self.wait_early,
            &self.wait_head,
            &self.wait_again,
            &self.hash_next,
            &self.kick_unlock,
            &self.spurious_wakeup,
            &self.hash_hops,
        ]
    }
}

event_set!(pub(super) Events);

/// A snapshot of [`RawPvQSpinLock`](super::RawPvQSpinLock)'s slow-path
/// events, summed over every lock and thread since start (or
/// [`reset_pv_stats`]). The field names are the kernel's `pv_*` / `lock_*`
/// lock events without the prefix.
///
/// The fast paths never touch them. Under loom each test thread has its own.
///
/// ```
/// use ksync::spin::{pv_stats, PvQSpinMutex};
///
/// let lock = PvQSpinMutex::new(0);
/// *lock.lock() += 1; // uncontended: counts nothing
/// let s = pv_stats();
/// println!("{} steals, {} halts, {} wakes", s.steals(), s.halts(), s.wakes());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PvStats {
    /// Acquisitions that went past the fast path (`lock_slowpath`).
    pub slowpath: u64,
    /// Acquisitions without a queue node: no thread slot, or nested deeper
    /// than four (`lock_no_node`).
    pub no_node: u64,
    /// Locks taken by an arriving thread while a queue existed
    /// (`pv_lock_stealing`).
    pub lock_stealing: u64,
    /// Sleeps of queued non-head waiters (`pv_wait_node`).
    pub wait_node: u64,
    /// Of those, sleeps cut short because the predecessor was not running
    /// (`pv_wait_early`).
    pub wait_early: u64,
    /// Sleeps of queue heads that hashed themselves (`pv_wait_head`).
    pub wait_head: u64,
    /// Of those, sleeps after the head had already been woken once: the lock
    /// was stolen from it (`pv_wait_again`).
    pub wait_again: u64,
    /// Halted successors the new owner hashed instead of waking
    /// (`pv_kick_node`'s hashing path).
    pub hash_next: u64,
    /// Wake-ups issued by unlock (`pv_kick_unlock`).
    pub kick_unlock: u64,
    /// Wake-ups that found nothing to do (`pv_spurious_wakeup`).
    pub spurious_wakeup: u64,
    /// Hash-table probes past the first bucket, over all insertions
    /// (`pv_hash_hops`).
    pub hash_hops: u64,
}

impl PvStats {
    /// Locks stolen from a queue.
    pub fn steals(&self) -> u64 {
        self.lock_stealing
    }

    /// Times a waiter went to sleep (queued waiters and queue heads).
    pub fn halts(&self) -> u64 {
        self.wait_node + self.wait_head
    }

    /// Wake-ups issued (kicks).
    pub fn wakes(&self) -> u64 {
        self.kick_unlock
    }

    /// Wake-ups after which the waiter went back to waiting.
    pub fn spurious_wakeups(&self) -> u64 {
        self.spurious_wakeup
    }
}

/// Reads [`RawPvQSpinLock`](super::RawPvQSpinLock)'s event counters.
pub fn pv_stats() -> PvStats {
    let e = events();
    PvStats {
        slowpath: e.slowpath.get(),
        no_node: e.no_node.get(),
        lock_stealing: e.lock_stealing.get(),
        wait_node: e.wait_node.get(),
        wait_early: e.wait_early.get(),
        wait_head: e.wait_head.get(),
        wait_again: e.wait_again.get(),
        hash_next: e.hash_next.get(),
        kick_unlock: e.kick_unlock.get(),
        spurious_wakeup: e.spurious_wakeup.get(),
        hash_hops: e.hash_hops.get(),
    }
}

/// Sets [`RawPvQSpinLock`](super::RawPvQSpinLock)'s event counters back to
/// zero.
pub fn reset_pv_stats() {
    events().all().into_iter().for_each(EventCounter::reset);
}
