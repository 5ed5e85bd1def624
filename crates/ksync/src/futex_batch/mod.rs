//! Waking many futex words with one system call.
//!
//! A poster that completes many parked sleepers at once (a System V `semop`
//! that satisfies 64 waiters, a `SETALL`) owes each of them a futex wake. One
//! `FUTEX_WAKE` system call per sleeper costs the poster a kernel entry each,
//! and the remote wake-ups trickle out one system call apart. The kernel's own
//! `semtimedop` collects its sleepers and wakes them all inside one call.
//!
//! `wake_all` does the same from user space with io_uring's
//! `IORING_OP_FUTEX_WAKE` (Linux 6.7): one submission queue entry per word,
//! all submitted with a single `io_uring_enter` that also waits for every
//! completion, so nothing is left in flight when it returns. A futex wake reads
//! no user memory (the address is only a key: see `crate::futex::wake_ptr`), so the words
//! may belong to frames that are already gone.
//!
//! Each thread has its own small ring, created on its first batch. Where
//! io_uring or the opcode is missing (old kernel, `io_uring_disabled`, a
//! seccomp filter, a kernel without `CONFIG_FUTEX` in io_uring) the first
//! attempt finds out and the whole process falls back to one `FUTEX_WAKE` per
//! word, as does a thread whose ring broke. `KSYNC_NO_IO_URING=1` in the
//! environment (read once, at the first batch) forces the fallback, so both
//! paths can be compared.
//!
//! Under `--cfg loom`, and where there is no io_uring, it is the plain loop.
//!
//! Waking is only half of a bulk wake-up's cost in the kernel: each wake
//! first finds its sleeper in the process's futex hash, which Linux 6.16+
//! sizes for the CPUs, not for the sleepers. [`note_sleeping_thread`]
//! (`hash.rs`) grows it as threads start sleeping on words woken here.
//!
//! A poster need not make every wake itself: [`Spread`] (`spread.rs`)
//! shares a post's wakes out among the sleepers it wakes first, each of
//! which wakes a few more before it returns, while the poster takes the
//! rest. Where the machine has CPUs to spare, any woken sleeper claims any
//! words; on 2 or 3 CPUs, the woken on each CPU wake only the others of
//! their CPU, since a wake onto one's own CPU costs no IPI. [`sharing_mode`]
//! says which.
//!
//! The io_uring part is `uring/`. Its ABI is written out (`uring/abi.rs`:
//! four structures and a dozen constants of `include/uapi/linux/io_uring.h`,
//! their layouts checked at compile time) rather than taken from the
//! `io-uring` crate, although that crate has `IORING_OP_FUTEX_WAKE`
//! (`opcode::FutexWake`): its prebuilt bindings refuse to compile for Linux
//! targets other than x86-64, AArch64, RISC-V 64, LoongArch 64 and POWER 64
//! (i686, ARMv7 and s390x would need its `bindgen` feature and libclang),
//! where this module works today; its ring unmaps and closes itself on drop,
//! which a fork child holding the parent's ring must not do; and the rest of
//! `uring/` (the per-thread ring, the process-wide fallback, the chunking)
//! would stay as it is.

use crate::sync::AtomicU32;

/// Wakes one sleeper on each of `words`, with as few system calls as the
/// kernel allows. Returns the system calls it made.
///
/// # Safety
///
/// As for [`crate::futex::wake_ptr`]: each word must have been the address of
/// an `AtomicU32` that sleepers wait on; it need not be live any more.
pub(crate) unsafe fn wake_all(words: &[*const AtomicU32]) -> usize {
    // SAFETY: passed on from our caller.
    unsafe { wake_all_in(Scope::Private, words) }
}

/// Whose futex words a batch wakes: this process's only (the key the
/// private `FUTEX_WAIT` uses), or words in memory shared between processes,
/// where sleepers in other processes wait with a shared `FUTEX_WAIT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    Private,
    #[cfg_attr(any(loom, not(target_os = "linux")), allow(dead_code))]
    Shared,
}

/// [`wake_all`] for words of either [`Scope`].
///
/// # Safety
///
/// As for [`wake_all`].
pub(crate) unsafe fn wake_all_in(scope: Scope, words: &[*const AtomicU32]) -> usize {
    #[cfg(all(not(loom), target_os = "linux"))]
    if words.len() >= 2 {
        // SAFETY: passed on from our caller.
        let by_ring = unsafe { uring::wake(words, scope) };
        // One `io_uring_enter` per ring batch, one `FUTEX_WAKE` per word the
        // ring did not take.
        return by_ring.div_ceil(uring::RING_ENTRIES as usize) + (words.len() - by_ring);
    }
    // SAFETY: passed on from our caller.
    unsafe { wake_loop(words, scope) };
    words.len()
}

/// Wakes one thread sleeping on each of `words` (`FUTEX_WAKE` with a count
/// of 1, process-private futexes), with one `io_uring_enter` per batch where
/// the kernel has `IORING_OP_FUTEX_WAKE` and one `FUTEX_WAKE` per word
/// otherwise. Returns the system calls it made.
///
/// This is the batched wake ksync's semaphore sets make when they do not
/// share their wake-ups out, for callers that keep their own futex words;
/// [`Spread`] is the shared-out wake the sets (and the lab's floor for a
/// semaphore) use, which falls back to this one batch where sharing is off.
///
/// ```
/// use std::sync::atomic::AtomicU32;
///
/// let words = [AtomicU32::new(0), AtomicU32::new(0)];
/// // Nobody sleeps on them: nothing happens, and that is no error.
/// let calls = ksync::futex_batch::wake_each(&[&words[0], &words[1]]);
/// assert!(calls >= 1);
/// ```
#[cfg(not(loom))]
pub fn wake_each(words: &[&AtomicU32]) -> usize {
    // SAFETY: `&AtomicU32` and `*const AtomicU32` have the same layout, so
    // the slice can be read as one of pointers; each is a live atomic, which
    // is certainly an address `wake_all` may use as a futex key.
    unsafe {
        let ptrs =
            core::slice::from_raw_parts(words.as_ptr().cast::<*const AtomicU32>(), words.len());
        wake_all(ptrs)
    }
}

/// One `FUTEX_WAKE` (count 1) per word: the fallback.
///
/// # Safety
///
/// As for [`wake_all`].
unsafe fn wake_loop(words: &[*const AtomicU32], scope: Scope) {
    for &word in words {
        // SAFETY: per our caller's contract `word` is a futex word's address,
        // which `wake_ptr` only uses as a key.
        unsafe { wake_one(word, scope) };
    }
}

/// One `FUTEX_WAKE` of one sleeper on `word`, in `scope`.
///
/// # Safety
///
/// As for [`wake_all`].
unsafe fn wake_one(word: *const AtomicU32, scope: Scope) {
    match scope {
        // SAFETY: passed on from our caller.
        Scope::Private => unsafe { crate::futex::wake_ptr(word, 1) },
        #[cfg(all(not(loom), target_os = "linux"))]
        // SAFETY: passed on from our caller (a shared futex word stays mapped
        // while its waker holds the mapping).
        Scope::Shared => crate::futex::wake_shared(unsafe { &*word }, 1),
        #[cfg(not(all(not(loom), target_os = "linux")))]
        // SAFETY: passed on from our caller.
        Scope::Shared => unsafe { crate::futex::wake_ptr(word, 1) },
    };
}

#[cfg(all(not(loom), target_os = "linux"))]
mod hash;
mod spread;
#[cfg(all(not(loom), target_os = "linux"))]
mod uring;

pub use spread::{
    help_open_board, set_sharing, set_sharing_mode, sharing, sharing_mode, sleeper_cpu, this_cpu,
    Board, Handle, SharingMode, Spread, UNKNOWN_CPU,
};

#[cfg(loom)]
pub use spread::helpers_wake_calls;

#[cfg(all(not(loom), target_os = "linux"))]
pub use hash::note_sleeping_thread;

/// Counts the calling thread among those that sleep on futex words and grows
/// the process's private futex hash to match (Linux 6.16+); elsewhere, and
/// under loom, nothing to do.
#[cfg(not(all(not(loom), target_os = "linux")))]
pub fn note_sleeping_thread() {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::futex::{self, Wake};
    use crate::sync::Ordering;
    use crate::test_common::{wait_until, PATIENCE};
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// `n` threads, each parked on its own word. `wake` gets the words after
    /// they all went to sleep (and after their values changed); the test
    /// fails if any sleeper is still asleep at its deadline.
    fn park_and_wake(n: usize, wake: impl FnOnce(&[*const AtomicU32])) {
        let words: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let ready = Arc::new(AtomicUsize::new(0));
        let sleepers: Vec<_> = (0..n)
            .map(|i| {
                let words = Arc::clone(&words);
                let ready = Arc::clone(&ready);
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let word = &words[i];
                        let deadline = Instant::now() + PATIENCE;
                        ready.fetch_add(1, Ordering::Release);
                        // Only a wake-up ends the wait in time: a sleeper
                        // still asleep at its deadline was lost.
                        while word.load(Ordering::Acquire) == 0 {
                            if futex::wait(word, 0, Some(deadline)) == Wake::TimedOut {
                                return false;
                            }
                        }
                        true
                    })
                    .unwrap()
            })
            .collect();
        wait_until("every sleeper ready", || ready.load(Ordering::Acquire) >= n);
        // Let the last ones get from `ready` into FUTEX_WAIT.
        std::thread::sleep(Duration::from_millis(100));
        for word in words.iter() {
            word.store(1, Ordering::Release);
        }
        let ptrs: Vec<*const AtomicU32> = words.iter().map(|w| w as *const AtomicU32).collect();
        wake(&ptrs);
        let woken = sleepers
            .into_iter()
            .map(|s| s.join().unwrap())
            .filter(|&woken| woken)
            .count();
        assert_eq!(woken, n, "sleepers never woken");
    }

    #[test]
    fn wake_all_wakes_every_sleeper() {
        park_and_wake(40, |words| {
            // SAFETY: the words are live futex words.
            unsafe { wake_all(words) };
        });
    }

    #[test]
    fn the_ring_does_the_waking_where_supported() {
        if !uring::supported() {
            eprintln!("io_uring futex wakes unavailable here: only the fallback was tested");
            return;
        }
        park_and_wake(40, |words| {
            // SAFETY: the words are live futex words.
            let by_ring = unsafe { uring::wake(words, Scope::Private) };
            assert_eq!(by_ring, words.len());
        });
    }

    #[test]
    fn the_fallback_wakes_every_sleeper() {
        // What wake_all does under KSYNC_NO_IO_URING=1 or without io_uring.
        // SAFETY: the words are live futex words.
        park_and_wake(40, |words| unsafe { wake_loop(words, Scope::Private) });
    }

    #[test]
    fn a_batch_larger_than_the_ring_is_woken_in_chunks() {
        let n = 2 * uring::RING_ENTRIES as usize + 3;
        park_and_wake(n, |words| {
            // SAFETY: the words are live futex words.
            let by_ring = unsafe { uring::wake(words, Scope::Private) };
            assert!(by_ring == words.len() || !uring::supported());
        });
    }

    #[test]
    fn a_small_ring_takes_many_submissions() {
        park_and_wake(13, |words| {
            // SAFETY: the words are live futex words.
            match unsafe { uring::wake_with_ring(4, words) } {
                Some(by_ring) => assert_eq!(by_ring, words.len()),
                // SAFETY: as above.
                None => unsafe { wake_loop(words, Scope::Private) },
            }
        });
    }

    #[test]
    fn waking_words_nobody_waits_on_is_no_error() {
        let words: Vec<AtomicU32> = (0..70).map(|_| AtomicU32::new(0)).collect();
        let ptrs: Vec<*const AtomicU32> = words.iter().map(|w| w as *const AtomicU32).collect();
        // SAFETY: live words (nobody sleeps on them).
        let by_ring = unsafe { uring::wake(&ptrs, Scope::Private) };
        if uring::supported() {
            assert_eq!(by_ring, ptrs.len());
        }
        // Also through a ring of our own, which reports every completion.
        // SAFETY: as above.
        if let Some(by_ring) = unsafe { uring::wake_with_ring(8, &ptrs) } {
            assert_eq!(by_ring, ptrs.len());
        }
        // And the words that are gone by now: the address is only a key.
        drop(words);
        // SAFETY: the addresses were futex words; a wake never reads them.
        unsafe { wake_all(&ptrs) };
    }
}
