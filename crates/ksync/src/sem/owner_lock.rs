//! A lock word that names its holder, so that a holder which dies without
//! releasing it is recognised and the lock taken over: the lock of
//! process-shared semaphore sets (`shared/lock.rs`), where the holder is a
//! process that may be killed at any instruction.
//!
//! The word is 0 when free, else [`HELD`] | the holder's 30-bit owner code,
//! plus [`WAITERS`] once someone sleeps on it. A waiter naps on the word (a
//! futex wait that ends after a while even if nobody wakes it); each time a
//! nap ends with the lock still held by the same owner, it asks [`Owners`]
//! whether that owner is dead, and if so takes the lock over with one
//! compare-and-swap from the exact word it saw, and reports
//! [`Taken::FromDead`] so that its caller repairs what the dead holder left.
//! Only one waiter can win that compare-and-swap; a live owner is never
//! declared dead ([`Owners::is_dead`] errs towards alive), so two live
//! threads never hold the lock at once.
//!
//! Barriers: the acquire compare-and-swaps in [`lock`] pair with the release
//! swap in [`unlock`]; a takeover's acquire pairs with whatever made the
//! owner's death visible to [`Owners::is_dead`] (the kernel dropping its
//! locks at exit, after every store the process made).
//!
//! The loom model at the end checks exclusion among live holders and that a
//! dead holder's lock is taken over exactly once.

use crate::futex::Wake;
use crate::sync::{AtomicU32, Ordering};

/// The lock is held.
pub(crate) const HELD: u32 = 1 << 30;
/// Someone sleeps on the word: the release must wake one.
pub(crate) const WAITERS: u32 = 1 << 31;

/// Polls of the word before napping (about one context switch). Under loom
/// a waiter naps at once: the model explores the futex path.
const SPINS: u32 = if cfg!(loom) { 0 } else { 100 };

/// How the lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// From a live holder, or free.
    Clean,
    /// From a dead holder: whatever it was doing may be half done.
    FromDead,
}

/// What the lock needs to know about owners, and how its waiters sleep.
pub(crate) trait Owners {
    /// Whether the owner named by `owner` (a lock word without its flags) is
    /// dead. When in doubt, alive: waiting longer is safe, taking a live
    /// holder's lock is not.
    fn is_dead(&self, owner: u32) -> bool;
    /// Sleeps while `*word == expected`, for a bounded time.
    fn nap(&self, word: &AtomicU32, expected: u32) -> Wake;
    /// Wakes one napping waiter.
    fn wake_one(&self, word: &AtomicU32);
}

/// Takes the lock for `owner` (30 bits, nonzero or not: [`HELD`] marks it).
pub(crate) fn lock(word: &AtomicU32, owner: u32, owners: &impl Owners) -> Taken {
    debug_assert_eq!(owner & (HELD | WAITERS), 0);
    let mine = HELD | owner;
    if word
        .compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return Taken::Clean;
    }
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    for _ in 0..SPINS {
        core::hint::spin_loop();
        let w = word.load(Ordering::Relaxed);
        if w & HELD == 0
            && word
                .compare_exchange(
                    w,
                    mine | (w & WAITERS),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Taken::Clean;
        }
    }
    loop {
        let w = word.load(Ordering::Relaxed);
        if w & HELD == 0 {
            // Taken after napping: others may nap too, so keep WAITERS.
            if word
                .compare_exchange(w, mine | WAITERS, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Taken::Clean;
            }
            continue;
        }
        if w & WAITERS == 0
            && word
                .compare_exchange(w, w | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        let seen = w | WAITERS;
        if owners.nap(word, seen) == Wake::TimedOut
            && owners.is_dead(seen & !(HELD | WAITERS))
            && word
                .compare_exchange(seen, mine | WAITERS, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Taken::FromDead;
        }
    }
}

/// Releases the lock, waking one napping waiter if any.
pub(crate) fn unlock(word: &AtomicU32, owners: &impl Owners) {
    if word.swap(0, Ordering::Release) & WAITERS != 0 {
        owners.wake_one(word);
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use crate::sync::{AtomicBool, UnsafeCell};
    use loom::sync::Arc;

    /// Owners are threads here; owner `i` is dead once `alive[i]` is false.
    /// `events` counts what ends a nap (a release that wakes, a death, the
    /// timer); `timer` is a nap's time running out once, at whatever moment
    /// the model picks, even while the owner lives.
    struct Threads {
        alive: [AtomicBool; 3],
        events: AtomicU32,
        timer: AtomicBool,
    }

    impl Threads {
        fn end_naps(&self) {
            self.events.fetch_add(1, Ordering::SeqCst);
            crate::futex::wake(&self.events, u32::MAX);
        }
    }

    impl Owners for Threads {
        fn is_dead(&self, owner: u32) -> bool {
            // Acquire pairs with the dying thread's release store: its
            // writes under the lock are visible to the one taking over.
            !self.alive[owner as usize].load(Ordering::Acquire)
        }
        /// A real nap ends on a wake-up or after a while; the model cannot
        /// tell "a while" from spinning, so it sleeps untimed while the
        /// owner lives (its release wakes the napper) and times out at once
        /// when the owner is dead (the dying thread wakes nappers, as the
        /// timer would). Both bump `events`, which the nap sleeps on, so
        /// neither wake-up can come between the checks and the sleep.
        fn nap(&self, word: &AtomicU32, expected: u32) -> Wake {
            let seen = self.events.load(Ordering::SeqCst);
            if word.load(Ordering::SeqCst) != expected {
                return Wake::Woken;
            }
            if self.is_dead(expected & !(HELD | WAITERS))
                || self.timer.swap(false, Ordering::SeqCst)
            {
                return Wake::TimedOut;
            }
            crate::futex::wait(&self.events, seen, None)
        }
        fn wake_one(&self, _word: &AtomicU32) {
            self.end_naps();
        }
    }

    /// A pair that every complete critical section leaves equal; the dying
    /// holder leaves it unequal, and whoever takes over repairs it.
    struct Shared {
        word: AtomicU32,
        owners: Threads,
        pair: UnsafeCell<(u32, u32)>,
    }

    fn critical(s: &Shared, owner: u32) {
        if lock(&s.word, owner, &s.owners) == Taken::FromDead {
            s.pair.with_mut(|p| unsafe { (*p).1 = (*p).0 });
        }
        s.pair.with_mut(|p| unsafe {
            assert_eq!((*p).0, (*p).1, "a half-done section was not repaired");
            (*p).0 += 1;
            (*p).1 += 1;
        });
        unlock(&s.word, &s.owners);
    }

    /// Owner 0 takes the lock and dies in its critical section, then a nap
    /// times out while the lock may be a live owner's; owners 1 and 2 lock
    /// and unlock as usual. No two live owners are ever inside together
    /// (loom checks the cell), the dead one's lock is taken over (a
    /// deadlock otherwise), and the repair sees exactly the half-done
    /// section. Taking over without asking whether the owner is dead fails
    /// the model.
    #[test]
    fn a_dead_holders_lock_is_taken_over_and_live_holders_exclude_each_other() {
        let mut model = loom::model::Builder::new();
        model.max_branches = 20_000;
        model.check(|| {
            let s = Arc::new(Shared {
                word: AtomicU32::new(0),
                owners: Threads {
                    alive: [
                        AtomicBool::new(true),
                        AtomicBool::new(true),
                        AtomicBool::new(true),
                    ],
                    events: AtomicU32::new(0),
                    timer: AtomicBool::new(false),
                },
                pair: UnsafeCell::new((0, 0)),
            });
            let dying = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || {
                    let _ = lock(&s.word, 0, &s.owners);
                    s.pair.with_mut(|p| unsafe { (*p).0 += 1 });
                    // Dies holding the lock: no unlock. Nappers find out
                    // when their nap ends.
                    s.owners.alive[0].store(false, Ordering::Release);
                    s.owners.end_naps();
                    // Later, a nap's time runs out while whoever holds the
                    // lock now is alive.
                    s.owners.timer.store(true, Ordering::SeqCst);
                    s.owners.end_naps();
                })
            };
            let live = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || critical(&s, 1))
            };
            critical(&s, 2);
            dying.join().unwrap();
            live.join().unwrap();
            // Once more, for the runs where owner 0 died last.
            critical(&s, 2);
            s.pair.with(|p| unsafe {
                assert_eq!((*p).0, (*p).1);
                assert_eq!((*p).0, 4);
            });
        });
    }
}
