//! Slow-path event counters for the queued spinlocks, after the kernel's
//! lock events (`kernel/locking/lock_events.h`): per thread (the kernel's
//! are per CPU), bumped on slow paths only, never on a fast path, summed
//! when read.

use crate::sync::{unmodelled, Ordering};
use crate::thread_slot;

/// Defines `fn events() -> &'static $set` (with the visibility given before
/// the type), the one set of event counters of a lock family: a global
/// static natively; under loom one leaked set per OS thread, because a
/// model's simulated threads all run on the test's thread, so each model
/// counts its own exploration while the test harness runs models side by
/// side.
macro_rules! event_set {
    ($vis:vis $set:ty) => {
        #[inline]
        $vis fn events() -> &'static $set {
            #[cfg(not(loom))]
            {
                static EVENTS: $set = <$set>::new();
                &EVENTS
            }
            #[cfg(loom)]
            {
                std::thread_local! {
                    static EVENTS: &'static $set = Box::leak(Box::new(<$set>::new()));
                }
                EVENTS.with(|e| *e)
            }
        }
    };
}
pub(super) use event_set;

/// The first per-slot event index of each lock family (see
/// `thread_slot::EVENTS_PER_SLOT`).
pub(super) const QSPIN_EVENTS: usize = 0;
pub(super) const PV_EVENTS: usize = 8;

/// An event counter: bumped on slow paths only. Natively it is an index into
/// every thread slot's event counters: a thread counts into its own slot
/// (a relaxed load and store on a line no other thread writes) and a reader
/// sums all slots, as the kernel sums its per-CPU lock events. A thread
/// without a slot (all taken, or torn down) counts into a shared overflow
/// counter with a read-modify-write. Under loom it is one plain counter.
pub(super) struct EventCounter {
    #[cfg(not(loom))]
    index: usize,
    #[cfg(loom)]
    count: unmodelled::AtomicU64,
}

/// Counts of threads that had no slot, per event index.
#[cfg(not(loom))]
static OVERFLOW: [unmodelled::AtomicU64; thread_slot::EVENTS_PER_SLOT] =
    [const { unmodelled::AtomicU64::new(0) }; thread_slot::EVENTS_PER_SLOT];

impl EventCounter {
    /// The counter at per-slot index `index` (a family's base plus its
    /// event's offset).
    pub(super) const fn new(index: usize) -> Self {
        assert!(index < thread_slot::EVENTS_PER_SLOT);
        #[cfg(loom)]
        let _ = index;
        EventCounter {
            #[cfg(not(loom))]
            index,
            #[cfg(loom)]
            count: unmodelled::AtomicU64::new(0),
        }
    }

    #[inline]
    pub(super) fn bump(&self) {
        self.add(1);
    }

    #[inline]
    pub(super) fn add(&self, n: u64) {
        #[cfg(not(loom))]
        match thread_slot::current() {
            Some(slot) => {
                let c = &slot.block.events[self.index];
                c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
            }
            None => {
                OVERFLOW[self.index].fetch_add(n, Ordering::Relaxed);
            }
        }
        #[cfg(loom)]
        self.count.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> u64 {
        #[cfg(not(loom))]
        {
            let mut sum = OVERFLOW[self.index].load(Ordering::Relaxed);
            thread_slot::for_each_block(|b| sum += b.events[self.index].load(Ordering::Relaxed));
            sum
        }
        #[cfg(loom)]
        self.count.load(Ordering::Relaxed)
    }

    /// Zeroes the counter. A thread counting at the same moment may keep or
    /// lose that count: reset while the lock is idle for exact figures.
    pub(super) fn reset(&self) {
        #[cfg(not(loom))]
        {
            OVERFLOW[self.index].store(0, Ordering::Relaxed);
            thread_slot::for_each_block(|b| b.events[self.index].store(0, Ordering::Relaxed));
        }
        #[cfg(loom)]
        self.count.store(0, Ordering::Relaxed);
    }
}
