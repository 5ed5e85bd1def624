//! The floor for a user-space semaphore: bare futex words, no System V
//! semantics at all, woken the way ksync's sets wake theirs
//! (`ksync::futex_batch::Spread`: batched, one `io_uring_enter` per batch
//! where the kernel has `IORING_OP_FUTEX_WAKE`, and shared out among the
//! woken where the machine has CPUs to spare). What is left of a sembench burn
//! here is what any user-space semaphore pays: a sleeper's `FUTEX_WAIT`,
//! its share of the poster's one wake call, and the context switches. Its
//! sleepers grow the process's futex hash as ksync's do
//! (`ksync::futex_batch::note_sleeping_thread`).
//!
//! A semaphore is a count of posts and a count of sleepers, each on its own
//! cache line pair with its neighbours', as ksync keeps its semaphores.
//! `down` takes a post with a compare-and-swap; with none there it polls a
//! while (a per-thread budget learned by ksync's own learner,
//! `ksync::poll_learner`, as ksync's sleepers learn theirs), then
//! announces itself in the sleeper count and sleeps on the post count while
//! that reads 0. `up` adds its posts and collects the words with a
//! sleeper announced; one shared-out wake covers them all, and each woken
//! sleeper helps finish it before it returns.

use super::{PlainOp, SemBackend, SemError, WaitEvents, MAX_SEMS};
use crate::harness::futex;
use ksync::futex_batch::{Board, Handle, Spread};
use ksync::poll_learner::{self, PollLearner};
use std::cell::Cell;
use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Set in every post count once the set is removed.
const REMOVED: u32 = 1 << 31;

thread_local! {
    /// What this thread learned about its waits, as ksync's sleepers learn it.
    static LEARNED: Cell<PollLearner> = const { Cell::new(PollLearner::new()) };
}

/// Runs `f` on this thread's learner.
fn with_learner<R>(f: impl FnOnce(&mut PollLearner) -> R) -> R {
    poll_learner::with(&LEARNED, f)
}

/// One semaphore: posts not yet taken, and sleepers that may be asleep on
/// that word. Alone on its cache line pair (x86's adjacent-line prefetch).
#[repr(align(128))]
#[derive(Default)]
struct Word {
    posts: AtomicU32,
    sleepers: AtomicU32,
    /// The last poster's share-out of its wake-ups
    /// (`ksync::futex_batch::Handle`), for whoever takes the post.
    help: AtomicPtr<Board>,
    /// The CPU the last sleeper announced itself on
    /// (`ksync::futex_batch::sleeper_cpu`), as ksync's sleepers tell their
    /// wakers: a hint for a shared-out wake-up, read and written relaxed.
    cpu: AtomicU32,
}

impl Word {
    /// Leaves `handle` for whoever takes the next post here, and helps with
    /// a handle nobody took (a post taken by a caller that found no handle
    /// yet), so that every reference is used once.
    fn leave(&self, handle: Handle) {
        // AcqRel: the release pairs with the acquire swap in `help` (a
        // sleeper that takes this handle, though it took an earlier post,
        // sees the board set up); the acquire, with an earlier `leave`'s
        // release, for the handle it takes off the word.
        let old = self.help.swap(handle.into_raw(), Ordering::AcqRel);
        // SAFETY: the swap took the old reference off the word; used once.
        unsafe { Handle::from_raw(old).help() };
    }

    /// After a post was taken: helps wake the rest of its poster's post,
    /// then a chunk of a later post's left open for this CPU, as ksync's
    /// sleepers do.
    fn help(&self, events: &Events) {
        // Acquire pairs with the release swap in `leave`.
        let raw = self.help.swap(core::ptr::null_mut(), Ordering::Acquire);
        // SAFETY: as in `leave`.
        let calls = unsafe { Handle::from_raw(raw).help() } + ksync::futex_batch::help_open_board();
        if calls > 0 {
            events.wake_calls.fetch_add(calls as u64, Ordering::Relaxed);
        }
    }
}

impl Drop for Word {
    fn drop(&mut self) {
        self.leave(Handle::NONE);
    }
}

/// Counters of what the sleepers and the poster did.
#[derive(Default)]
struct Events {
    sleeps: AtomicU64,
    wake_calls: AtomicU64,
    polls: AtomicU64,
}

/// A row of futex semaphores woken in batches.
pub struct FutexBatch {
    words: Box<[Word]>,
    events: Events,
}

impl FutexBatch {
    fn word(&self, num: u16) -> Result<&Word, SemError> {
        self.words
            .get(usize::from(num))
            .ok_or_else(|| SemError::Failed(format!("no semaphore {num}")))
    }

    /// Takes a post if there is one: `Some(result)` ends the call.
    fn take(word: &Word) -> Option<Result<(), SemError>> {
        let mut posts = word.posts.load(Ordering::Relaxed);
        loop {
            if posts & REMOVED != 0 {
                return Some(Err(SemError::Removed));
            }
            if posts == 0 {
                return None;
            }
            // Acquire pairs with the release increment in `post`.
            match word.posts.compare_exchange_weak(
                posts,
                posts - 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Ok(())),
                Err(now) => posts = now,
            }
        }
    }

    fn down(&self, num: u16, nowait: bool) -> Result<(), SemError> {
        let word = self.word(num)?;
        if let Some(done) = Self::take(word) {
            return done;
        }
        if nowait {
            return Err(SemError::Failed("nothing posted (IPC_NOWAIT)".into()));
        }
        // The most polls of the post count a wait spends: as many as
        // ksync's sleepers may (`ksync::sem::sleeper_spin`, which
        // `--sleeper-spin` sets for both).
        let budget = match ksync::sem::sleeper_spin() {
            0 => 0,
            limit => with_learner(|l| l.budget(limit)),
        };
        for polls in 1..=budget {
            std::hint::spin_loop();
            if word.posts.load(Ordering::Relaxed) != 0 {
                if let Some(done) = Self::take(word) {
                    self.events
                        .polls
                        .fetch_add(u64::from(polls), Ordering::Relaxed);
                    with_learner(|l| l.learn(budget, true));
                    return done;
                }
            }
        }
        if budget > 0 {
            self.events
                .polls
                .fetch_add(u64::from(budget), Ordering::Relaxed);
            with_learner(|l| l.learn(budget, false));
        }
        // Announce, then look again: the SeqCst increment and the SeqCst
        // load pair with the poster's SeqCst increment and fence, so either
        // the poster sees the sleeper or the sleeper sees the post.
        word.cpu
            .store(ksync::futex_batch::sleeper_cpu(), Ordering::Relaxed);
        word.sleepers.fetch_add(1, Ordering::SeqCst);
        // As ksync's sleepers do: the futex hash grows with the sleepers.
        ksync::futex_batch::note_sleeping_thread();
        let result = loop {
            if let Some(done) = Self::take(word) {
                break done;
            }
            self.events.sleeps.fetch_add(1, Ordering::Relaxed);
            futex::wait(&word.posts, 0);
        };
        word.sleepers.fetch_sub(1, Ordering::Relaxed);
        with_learner(PollLearner::wait_ended);
        // A woken sleeper helps wake the rest of the post, as ksync's do.
        word.help(&self.events);
        result
    }

    /// Adds every post, then wakes the posted words with a sleeper, shared
    /// out among the woken as ksync's sets share theirs
    /// (`ksync::futex_batch::Spread`).
    fn post(&self, ups: &[PlainOp]) -> Result<(), SemError> {
        let mut spread = Spread::new();
        for op in ups {
            let word = self.word(op.num)?;
            // A handle only where a sleeper is announced, as ksync hands one
            // only to a queued sleeper (one announced after this look just
            // does not help). `Word::leave`'s release swap publishes it to
            // `Word::help`'s acquire swap, whichever post that caller took.
            let cpu = word.cpu.load(Ordering::Relaxed);
            if word.sleepers.load(Ordering::Relaxed) != 0 {
                word.leave(spread.handle_on(cpu));
            }
            // Release pairs with the acquire compare-and-swap in `take`.
            word.posts.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if word.sleepers.load(Ordering::Relaxed) != 0 {
                spread.push(&word.posts);
            }
        }
        if !spread.is_empty() {
            let calls = spread.wake();
            self.events
                .wake_calls
                .fetch_add(calls as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl SemBackend for FutexBatch {
    const SYSV: bool = false;
    type Op = PlainOp;

    fn create(nsems: usize) -> Result<FutexBatch, String> {
        if nsems > MAX_SEMS {
            return Err(format!("at most {MAX_SEMS} semaphores, not {nsems}"));
        }
        Ok(FutexBatch {
            words: (0..nsems).map(|_| Word::default()).collect(),
            events: Events::default(),
        })
    }

    fn op(num: u16, delta: i16, nowait: bool) -> PlainOp {
        PlainOp { num, delta, nowait }
    }

    #[inline]
    fn semop(&self, sops: &[PlainOp]) -> Result<(), SemError> {
        super::futex::one_down_or_ups(
            sops,
            |op| self.down(op.num, op.nowait),
            |ups| self.post(ups),
        )
    }

    /// The sleepers announced on semaphore `num`: past their polls, asleep
    /// or about to sleep (ksync's and the kernel's GETNCNT count a caller
    /// once it is queued, also before it sleeps).
    fn waiters(&self, num: usize) -> Result<usize, String> {
        let word = u16::try_from(num)
            .map_err(|_| format!("no semaphore {num}"))
            .and_then(|n| self.word(n).map_err(|e| e.to_string()))?;
        Ok(word.sleepers.load(Ordering::SeqCst) as usize)
    }

    fn remove(&self) {
        for word in self.words.iter() {
            word.posts.fetch_or(REMOVED, Ordering::SeqCst);
            futex::wake(&word.posts, i32::MAX);
        }
    }

    fn wait_events(&self) -> Option<WaitEvents> {
        Some(WaitEvents {
            sleeps: self.events.sleeps.load(Ordering::Relaxed),
            wake_calls: self.events.wake_calls.load(Ordering::Relaxed),
            lock_waits: 0,
            polls: self.events.polls.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_batch_wakes_every_posted_sleeper_and_removal_ends_waits() {
        let sems = Arc::new(FutexBatch::create(5).unwrap());
        let sleepers: Vec<_> = (0..4u16)
            .map(|n| {
                let sems = Arc::clone(&sems);
                std::thread::spawn(move || sems.semop(&[FutexBatch::op(n, -1, false)]))
            })
            .collect();
        let ups: Vec<PlainOp> = (0..4).map(|n| FutexBatch::op(n, 1, true)).collect();
        sems.semop(&ups).unwrap();
        for s in sleepers {
            assert_eq!(s.join().unwrap(), Ok(()));
        }
        assert!(sems.semop(&[FutexBatch::op(0, -1, true)]).is_err());
        let late = {
            let sems = Arc::clone(&sems);
            std::thread::spawn(move || sems.semop(&[FutexBatch::op(4, -1, false)]))
        };
        sems.remove();
        assert_eq!(late.join().unwrap(), Err(SemError::Removed));
    }
}
