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
//! Where several threads share one owner code (the threads of a process),
//! a word naming their own code is judged by how many of them hold or take
//! the lock ([`LocalLockers`]), and that count is frozen while a waiter
//! takes such a word over, so that none of them can lock in between.
//!
//! The loom models at the end check exclusion among live holders, that a
//! dead holder's lock is taken over exactly once, and that threads sharing
//! an owner code are never taken over from; a deterministic replay checks
//! the interleaving the freeze closes.

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
    /// Told once per acquisition that found the lock taken, before it
    /// waits: for counting.
    fn found_taken(&self) {}
    /// Takes the lock over from `owner` if it is dead; `take` is the
    /// compare-and-swap that does it. An owner whose death cannot change
    /// between the answer and `take` (a dead process stays dead) needs only
    /// this default; one whose answer can go stale (an owner code that
    /// several threads share, see [`LocalLockers`]) holds it still while
    /// `take` runs.
    fn take_over(&self, owner: u32, take: impl FnOnce() -> bool) -> bool {
        self.is_dead(owner) && take()
    }
}

/// The threads of one process that hold or are taking a lock whose owner
/// code they all share: what tells a word naming this process, but held by
/// none of its threads (a corrupt word, or an earlier incarnation's), from
/// a live holder. A waiter whose nap ended on such a word judges it dead
/// only when it is the one thread here ([`take_over_own`](Self::take_over_own)),
/// and freezes the count while it takes the lock over, so that no thread of
/// this process can lock in between and be taken over from. Without the
/// freeze, between the waiter's look at the count and its compare-and-swap,
/// another thread here could take the lock and a waiter elsewhere set
/// [`WAITERS`], rebuilding the very word the waiter saw: two holders.
pub(crate) struct LocalLockers<'a>(pub(crate) &'a AtomicU32);

/// Set in the count while a waiter takes over a word naming this process.
const FROZEN: u32 = 1 << 30;

impl LocalLockers<'_> {
    /// Counts this thread in before it tries the lock (and while it holds
    /// it); waits out a takeover in progress here. Barrier: the SeqCst
    /// increment pairs with the SeqCst freeze in `take_over_own`: either the
    /// freeze sees this thread counted and fails, or this thread sees it.
    pub(crate) fn enter(&self) {
        while !self.try_enter() {
            while self.0.load(Ordering::SeqCst) & FROZEN != 0 {
                crate::relax::yield_now();
            }
        }
    }

    /// [`enter`](Self::enter) unless a takeover is in progress here: false
    /// then, and this thread is not counted.
    pub(crate) fn try_enter(&self) -> bool {
        if self.0.fetch_add(1, Ordering::SeqCst) & FROZEN == 0 {
            return true;
        }
        self.0.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Counts this thread out, after it released the lock (or gave up).
    pub(crate) fn leave(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether this thread is the only one here holding or taking the
    /// lock, for a waiter that asks without taking over.
    pub(crate) fn alone(&self) -> bool {
        self.0.load(Ordering::SeqCst) == 1
    }

    /// Takes over a word naming this process if this thread is the only
    /// one here, with the count frozen while `take` runs.
    pub(crate) fn take_over_own(&self, take: impl FnOnce() -> bool) -> bool {
        if self
            .0
            .compare_exchange(1, 1 | FROZEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        let taken = take();
        self.0.fetch_sub(FROZEN, Ordering::SeqCst);
        taken
    }
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
    owners.found_taken();
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
            && owners.take_over(seen & !(HELD | WAITERS), || {
                word.compare_exchange(seen, mine | WAITERS, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            })
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

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut model = loom::model::Builder::new();
        model.max_branches = 20_000;
        model.check(f);
    }

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
        model(|| {
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

    /// Processes 1 and 2: the threads of process 1 share owner code 1 and
    /// count themselves in `here` ([`LocalLockers`]); process 2 is alive
    /// throughout. Nobody dies, so no word is ever stale, and no takeover
    /// may happen.
    struct Procs {
        here: AtomicU32,
        events: AtomicU32,
        timer: AtomicBool,
    }

    /// The owners as one thread of process `me` sees them: only its own
    /// process's word is judged by the count of lockers here.
    struct View<'a> {
        procs: &'a Procs,
        me: u32,
    }

    impl Owners for View<'_> {
        fn is_dead(&self, owner: u32) -> bool {
            owner == self.me && self.me == 1 && LocalLockers(&self.procs.here).alone()
        }
        /// As for `Threads`, except that only the timer ends a nap early:
        /// nobody dies here.
        fn nap(&self, word: &AtomicU32, expected: u32) -> Wake {
            let p = self.procs;
            let seen = p.events.load(Ordering::SeqCst);
            if word.load(Ordering::SeqCst) != expected {
                return Wake::Woken;
            }
            if p.timer.swap(false, Ordering::SeqCst) {
                return Wake::TimedOut;
            }
            crate::futex::wait(&p.events, seen, None)
        }
        fn wake_one(&self, _word: &AtomicU32) {
            self.procs.events.fetch_add(1, Ordering::SeqCst);
            crate::futex::wake(&self.procs.events, u32::MAX);
        }
        fn take_over(&self, owner: u32, take: impl FnOnce() -> bool) -> bool {
            if owner == self.me && self.me == 1 {
                return LocalLockers(&self.procs.here).take_over_own(take);
            }
            self.is_dead(owner) && take()
        }
    }

    struct Process1 {
        word: AtomicU32,
        procs: Procs,
        cell: UnsafeCell<u32>,
    }

    fn section(s: &Process1, owner: u32) {
        let local = LocalLockers(&s.procs.here);
        let view = View {
            procs: &s.procs,
            me: owner,
        };
        if owner == 1 {
            local.enter();
        }
        assert_eq!(
            lock(&s.word, owner, &view),
            Taken::Clean,
            "a live holder's lock was taken over"
        );
        s.cell.with_mut(|c| unsafe { *c += 1 });
        unlock(&s.word, &view);
        if owner == 1 {
            local.leave();
        }
    }

    /// Two threads of process 1 (the second locks twice) and one of process
    /// 2 take the lock while a nap's time runs out at any moment: no live
    /// holder is ever taken over from, and the freeze's back-off in `enter`
    /// neither deadlocks nor lets two threads in. (The exact interleaving
    /// of the race the freeze closes needs four preemptions, more than this
    /// model explores in reasonable time; the deterministic test
    /// `a_takeover_freezes_out_this_processs_lockers` below
    /// replays it.)
    #[test]
    fn threads_sharing_an_owner_code_are_never_taken_over_from() {
        model(|| {
            let s = Arc::new(Process1 {
                word: AtomicU32::new(0),
                procs: Procs {
                    here: AtomicU32::new(0),
                    events: AtomicU32::new(0),
                    timer: AtomicBool::new(false),
                },
                cell: UnsafeCell::new(0),
            });
            let threads: Vec<_> = [(1, 1), (1, 2), (2, 1)]
                .into_iter()
                .map(|(owner, sections)| {
                    let s = Arc::clone(&s);
                    loom::thread::spawn(move || {
                        for _ in 0..sections {
                            section(&s, owner);
                        }
                    })
                })
                .collect();
            s.procs.timer.store(true, Ordering::SeqCst);
            s.procs.events.fetch_add(1, Ordering::SeqCst);
            crate::futex::wake(&s.procs.events, u32::MAX);
            for t in threads {
                t.join().unwrap();
            }
            s.cell.with(|c| assert_eq!(unsafe { *c }, 4));
        });
    }
}

/// The race the freeze in [`LocalLockers::take_over_own`] closes, replayed
/// step by step: the other threads act exactly between a waiter's decision
/// and its compare-and-swap.
#[cfg(all(test, not(loom)))]
mod replay {
    use super::*;
    use core::cell::Cell;

    /// Process 1 as its waiter sees it. The lock starts held by another
    /// thread of process 1 (counted in `here`), which releases it during
    /// the waiter's nap; then, at the worst moment, a third thread of
    /// process 1 takes the lock and a waiter of process 2 marks the word.
    struct Waiter<'a> {
        word: &'a AtomicU32,
        here: &'a AtomicU32,
        /// Take over as `LocalLockers` does (false: by the count alone).
        freeze: bool,
        napped: Cell<bool>,
    }

    impl Waiter<'_> {
        fn race(&self) {
            if LocalLockers(self.here).try_enter()
                && self
                    .word
                    .compare_exchange(0, HELD | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.word.fetch_or(WAITERS, Ordering::Relaxed);
            }
        }
    }

    impl Owners for Waiter<'_> {
        fn is_dead(&self, owner: u32) -> bool {
            owner == 1 && LocalLockers(self.here).alone()
        }
        fn nap(&self, _word: &AtomicU32, _expected: u32) -> Wake {
            if self.napped.replace(true) {
                return Wake::Woken;
            }
            // The holder releases and leaves; the nap ends on its timer.
            self.word.swap(0, Ordering::Release);
            LocalLockers(self.here).leave();
            Wake::TimedOut
        }
        fn wake_one(&self, _word: &AtomicU32) {}
        fn take_over(&self, owner: u32, take: impl FnOnce() -> bool) -> bool {
            let raced_take = || {
                self.race();
                take()
            };
            if self.freeze && owner == 1 {
                return LocalLockers(self.here).take_over_own(raced_take);
            }
            self.is_dead(owner) && raced_take()
        }
    }

    fn replay(freeze: bool) -> Taken {
        let word = AtomicU32::new(HELD | WAITERS | 1);
        // The holder and the waiter.
        let here = AtomicU32::new(2);
        let waiter = Waiter {
            word: &word,
            here: &here,
            freeze,
            napped: Cell::new(false),
        };
        lock(&word, 1, &waiter)
    }

    #[test]
    fn a_takeover_freezes_out_this_processs_lockers() {
        // By the count alone, the waiter takes the lock from the third
        // thread, which holds it: two holders.
        assert_eq!(replay(false), Taken::FromDead);
        // Frozen, the third thread cannot start locking in between, the
        // word the waiter saw is gone, and it takes the free lock cleanly.
        assert_eq!(replay(true), Taken::Clean);
    }
}
