//! Semaphores on bare futex words, sembench 0.3's futex mode (`-o 2`): the
//! poster makes one `FUTEX_WAKE` per sleeper, a sleeper one `FUTEX_WAIT`
//! each time it finds nothing posted. [`FutexChain`] hands the wake-ups of
//! one call down the woken sleepers instead.
//!
//! A word counts the posts not yet taken, with [`REMOVED`] as its top bit
//! once the set is removed. `down` takes a post with a compare-and-swap
//! (acquire, pairing with the release increment in `up`, so that what the
//! poster wrote before posting is visible to the woken sleeper) and sleeps
//! on the word while it reads 0; `up` increments and wakes one sleeper.

use super::{PlainOp, SemBackend, SemError, MAX_SEMS};
use crate::harness::futex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Set in every word once the set is removed.
const REMOVED: u32 = 1 << 31;

/// A row of futex words, one counting semaphore each.
pub struct FutexSems {
    words: Box<[AtomicU32]>,
}

impl FutexSems {
    fn new(nsems: usize) -> Result<FutexSems, String> {
        if nsems > MAX_SEMS {
            return Err(format!("at most {MAX_SEMS} semaphores, not {nsems}"));
        }
        Ok(FutexSems {
            words: (0..nsems).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    fn word(&self, num: u16) -> Result<&AtomicU32, SemError> {
        self.words
            .get(usize::from(num))
            .ok_or_else(|| SemError::Failed(format!("no semaphore {num}")))
    }

    /// Takes one post of `num`, sleeping while there is none.
    fn down(&self, num: u16, nowait: bool) -> Result<(), SemError> {
        let word = self.word(num)?;
        loop {
            let posts = word.load(Ordering::Relaxed);
            if posts & REMOVED != 0 {
                return Err(SemError::Removed);
            }
            if posts == 0 {
                if nowait {
                    return Err(SemError::Failed("nothing posted (IPC_NOWAIT)".into()));
                }
                futex::wait(word, 0);
                continue;
            }
            // Acquire pairs with the release increment in `up`.
            if word
                .compare_exchange_weak(posts, posts - 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(());
            }
        }
    }

    /// Posts `num` once and wakes one sleeper.
    fn up(&self, num: u16) -> Result<(), SemError> {
        let word = self.word(num)?;
        // Release pairs with the acquire compare-and-swap in `down`.
        word.fetch_add(1, Ordering::Release);
        futex::wake(word, 1);
        Ok(())
    }

    /// Marks every word removed and wakes every sleeper.
    fn remove_all(&self) {
        for word in self.words.iter() {
            word.fetch_or(REMOVED, Ordering::Release);
            futex::wake(word, i32::MAX);
        }
    }
}

/// One `-1`, or any number of `+1`s, as sembench asks of these backends.
pub(super) fn one_down_or_ups(
    sops: &[PlainOp],
    down: impl FnOnce(&PlainOp) -> Result<(), SemError>,
    ups: impl FnOnce(&[PlainOp]) -> Result<(), SemError>,
) -> Result<(), SemError> {
    match sops {
        [op] if op.delta == -1 => down(op),
        _ if sops.iter().all(|op| op.delta == 1) => ups(sops),
        _ => Err(SemError::Unsupported(
            "futex semaphores take one -1 or any number of +1s per call",
        )),
    }
}

impl SemBackend for FutexSems {
    const SYSV: bool = false;
    type Op = PlainOp;

    fn create(nsems: usize) -> Result<FutexSems, String> {
        FutexSems::new(nsems)
    }

    fn op(num: u16, delta: i16, nowait: bool) -> PlainOp {
        PlainOp { num, delta, nowait }
    }

    #[inline]
    fn semop(&self, sops: &[PlainOp]) -> Result<(), SemError> {
        one_down_or_ups(
            sops,
            |op| self.down(op.num, op.nowait),
            |ups| ups.iter().try_for_each(|op| self.up(op.num)),
        )
    }

    fn calls_per_post(n: usize) -> u64 {
        n as u64
    }

    fn remove(&self) {
        self.remove_all();
    }
}

/// An experiment, not in sembench: futex semaphores whose `+1`s of one
/// call are handed down a chain. The poster wakes only the first semaphore
/// of the call; each woken sleeper wakes the next. The poster makes one
/// system call per call, as with a set, and the others are spread over the
/// woken sleepers.
pub struct FutexChain {
    sems: FutexSems,
    /// Per semaphore: the next one of its call to post, [`CHAIN_END`], or
    /// [`CHAIN_UNSET`] while the poster has not written it yet.
    next: Box<[AtomicU32]>,
}

const CHAIN_END: u32 = u32::MAX;
const CHAIN_UNSET: u32 = u32::MAX - 1;

impl FutexChain {
    /// Takes the post of `num`, then passes the chain on.
    fn down(&self, num: u16, nowait: bool) -> Result<(), SemError> {
        self.sems.down(num, nowait)?;
        // The post came after the poster linked the whole call (release in
        // `up`, acquire in `down`); poll anyway, briefly, should a link be
        // late, and reset it for the next call.
        let link = &self.next[usize::from(num)];
        let mut polls = 0u32;
        let next = loop {
            let next = link.swap(CHAIN_UNSET, Ordering::AcqRel);
            if next != CHAIN_UNSET {
                break next;
            }
            polls += 1;
            if polls.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        };
        if next != CHAIN_END {
            self.sems.up(next as u16)?;
        }
        Ok(())
    }

    /// Links the posts of one call back to front, so that a sleeper woken
    /// early finds its link, then posts the first.
    fn post(&self, ups: &[PlainOp]) -> Result<(), SemError> {
        let mut after = CHAIN_END;
        for op in ups.iter().rev() {
            self.sems.word(op.num)?;
            self.next[usize::from(op.num)].store(after, Ordering::Release);
            after = u32::from(op.num);
        }
        match ups.first() {
            Some(first) => self.sems.up(first.num),
            None => Ok(()),
        }
    }
}

impl SemBackend for FutexChain {
    const SYSV: bool = false;
    type Op = PlainOp;

    fn create(nsems: usize) -> Result<FutexChain, String> {
        Ok(FutexChain {
            sems: FutexSems::new(nsems)?,
            next: (0..nsems).map(|_| AtomicU32::new(CHAIN_UNSET)).collect(),
        })
    }

    fn op(num: u16, delta: i16, nowait: bool) -> PlainOp {
        PlainOp { num, delta, nowait }
    }

    #[inline]
    fn semop(&self, sops: &[PlainOp]) -> Result<(), SemError> {
        one_down_or_ups(
            sops,
            |op| self.down(op.num, op.nowait),
            |ups| self.post(ups),
        )
    }

    fn remove(&self) {
        // Links first, so that a sleeper between its post and its link
        // stops polling.
        for link in self.next.iter() {
            link.store(CHAIN_END, Ordering::Release);
        }
        self.sems.remove_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ups(nums: &[u16]) -> Vec<PlainOp> {
        nums.iter().map(|&n| FutexSems::op(n, 1, true)).collect()
    }

    #[test]
    fn a_post_before_the_wait_is_kept_and_removal_ends_waits() {
        let sems = Arc::new(FutexSems::create(2).unwrap());
        sems.semop(&ups(&[0])).unwrap();
        sems.semop(&[FutexSems::op(0, -1, false)]).unwrap();
        assert!(sems.semop(&[FutexSems::op(0, -1, true)]).is_err());
        let sleeper = {
            let sems = Arc::clone(&sems);
            std::thread::spawn(move || sems.semop(&[FutexSems::op(1, -1, false)]))
        };
        sems.remove();
        assert_eq!(sleeper.join().unwrap(), Err(SemError::Removed));
        assert_eq!(
            sems.semop(&[FutexSems::op(0, -1, false)]),
            Err(SemError::Removed)
        );
    }

    #[test]
    fn a_chain_wakes_every_sleeper_of_one_call() {
        let chain = Arc::new(FutexChain::create(4).unwrap());
        let sleepers: Vec<_> = (0..4u16)
            .map(|n| {
                let chain = Arc::clone(&chain);
                std::thread::spawn(move || chain.semop(&[FutexChain::op(n, -1, false)]))
            })
            .collect();
        chain.semop(&ups(&[2, 0, 3, 1])).unwrap();
        for s in sleepers {
            assert_eq!(s.join().unwrap(), Ok(()));
        }
        assert!(chain.semop(&[FutexChain::op(4, 1, false)]).is_err());
    }
}
