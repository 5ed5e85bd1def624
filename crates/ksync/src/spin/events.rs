//! Slow-path event counters for the queued spinlocks, after the kernel's
//! lock events (`kernel/locking/lock_events.h`): relaxed, bumped on slow
//! paths only, never on a fast path.

use crate::sync::{unmodelled, Ordering};

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

/// An event counter: relaxed, bumped on slow paths only.
pub(super) struct EventCounter(unmodelled::AtomicU64);

impl EventCounter {
    pub(super) const fn new() -> Self {
        EventCounter(unmodelled::AtomicU64::new(0))
    }

    #[inline]
    pub(super) fn bump(&self) {
        self.add(1);
    }

    #[inline]
    pub(super) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}
