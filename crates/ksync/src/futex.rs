//! Sleeping on a 32-bit word: futex wait and wake.
//!
//! [`wait`] blocks only if the word still holds the value the caller expects:
//! the kernel compares and queues atomically, so a [`wake`] issued after the
//! word changed can never be lost. Waits may return spuriously; callers loop
//! and re-check their condition.
//!
//! These are process-private futexes (`FUTEX_PRIVATE_FLAG`), except
//! [`wait_shared`] and [`wake_shared`], which process-shared semaphore sets
//! use on words in a shared mapping: the kernel then keys the futex by the
//! file page, so sleepers and wakers in different processes meet.
//!
//! Under `--cfg loom` the futex is modelled by a queue of sleepers behind one
//! loom mutex: the waiter compares the word while holding the mutex and the
//! waker takes the mutex before choosing, which gives the same
//! no-lost-wake-up guarantee, so a protocol that forgets a wake-up deadlocks
//! in the model and loom reports it. Like the kernel, a wake of `count` wakes
//! at most `count` sleepers on that address, the longest asleep first, so a
//! protocol in which the wrong sleeper can take a wake-up meant for another
//! deadlocks too. A timed wait in the model sleeps while the other threads
//! take a step (loom has no clock), where a wake may choose it as any
//! sleeper, then times out unless one did. A wait without a deadline
//! returns only when woken, unless the test allows spurious returns
//! (`with_spurious_wakeups`, under loom only).

#[cfg(not(loom))]
use std::time::Instant;

use crate::sync::AtomicU32;

/// Why [`wait`] returned. Either way the caller re-checks its condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Woken, interrupted, or the word no longer held the expected value.
    Woken,
    /// The deadline passed.
    TimedOut,
    /// A signal handler ran (`EINTR`). Only [`wait_shared`] tells this
    /// apart from [`Woken`](Wake::Woken), for the process-shared semaphore
    /// sets, whose sleeps fail with `EINTR` as the kernel's `semop` does.
    // The loom build has no `wait_shared` (no processes to share with).
    #[cfg_attr(loom, allow(dead_code))]
    Interrupted,
}

/// Blocks while `*word == expected`, until woken or until `deadline`.
///
/// Always inlined into its caller: a thread that returns from a sleep runs
/// on a stack that the other threads of its CPU have pushed out of the
/// cache meanwhile, and every frame it returns through is one more line to
/// fetch again and one more return the CPU mispredicts (this and
/// `ksync::sem`'s sleeper wait, inlined: sembench `-t 250` from 0.915x to
/// 0.94x the floor, median of 14 paired rounds, BENCHMARKS.md).
#[cfg(all(not(loom), target_os = "linux"))]
#[inline(always)]
pub(crate) fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> Wake {
    let timeout = match deadline {
        None => None,
        Some(deadline) => {
            let now = Instant::now();
            if now >= deadline {
                return Wake::TimedOut;
            }
            let left = deadline - now;
            Some(libc::timespec {
                tv_sec: left.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            })
        }
    };
    let timeout_ptr = timeout
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the
    // call and `timeout_ptr` is null or points at a timespec on our stack.
    // FUTEX_WAIT only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            timeout_ptr,
        )
    };
    if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        Wake::TimedOut
    } else {
        Wake::Woken
    }
}

/// Wakes up to `count` threads blocked in [`wait`] on `word`; returns how many woke.
#[cfg(not(loom))]
pub(crate) fn wake(word: &AtomicU32, count: u32) -> u32 {
    // SAFETY: a live reference is certainly an address `wake_ptr` may use.
    unsafe { wake_ptr(word, count) }
}

/// [`wake`] for a word that may already be gone: a sleeper that returns as
/// soon as it sees its grant may free its wait node (a stack frame) before the
/// granting thread gets to wake it, and a reference to freed memory may not
/// even be formed. `FUTEX_WAKE` uses the address only as a hash key and never
/// reads it; a stale address at worst wakes a later sleeper on the same
/// address spuriously, which every sleeper tolerates by re-checking.
///
/// # Safety
///
/// `word` must have been the address of an `AtomicU32` that sleepers wait
/// on; it need not be live any more.
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) unsafe fn wake_ptr(word: *const AtomicU32, count: u32) -> u32 {
    let count = count.min(i32::MAX as u32) as i32;
    // SAFETY: FUTEX_WAKE never dereferences the address (see above).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        )
    };
    rc.max(0) as u32
}

/// Blocks while `*word == expected`, for at most `timeout` (`None`: until
/// woken), on a word that other processes may wake (a shared futex: no
/// `FUTEX_PRIVATE_FLAG`). A signal handler that runs meanwhile ends the
/// wait with [`Wake::Interrupted`], `SA_RESTART` or not, as it ends the
/// kernel's `semop`; a signal without one (a stop and `SIGCONT`) does not.
///
/// Every wait has a timeout, `None` one that never expires
/// ([`NEVER_SECS`]): the kernel restarts a `FUTEX_WAIT` without a timeout
/// after a handler installed with `SA_RESTART` (`-ERESTARTSYS`), unseen,
/// while one with a timeout returns `EINTR` after any handler
/// (`-ERESTART_RESTARTBLOCK`; kernel/futex/waitwake.c). A timer costs the
/// kernel an arm and a cancel, about 0.3 us per sleep on the 2-core
/// guests, however far away it expires.
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) fn wait_shared(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> Wake {
    let ts = match timeout {
        Some(timeout) => libc::timespec {
            tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        },
        None => libc::timespec {
            tv_sec: NEVER_SECS,
            tv_nsec: 0,
        },
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic in a shared mapping for
    // the duration of the call and `ts` is on our stack; FUTEX_WAIT only
    // reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
    if rc != -1 {
        return Wake::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        // Should the far timeout ever expire, the caller, which asked for
        // none, sees a spurious wake-up and re-checks.
        Some(libc::ETIMEDOUT) if timeout.is_some() => Wake::TimedOut,
        Some(libc::EINTR) => Wake::Interrupted,
        _ => Wake::Woken,
    }
}

/// [`wait_shared`]'s timeout for a wait without one, in seconds: the
/// largest `time_t`, which the kernel saturates to the end of its clock
/// (`KTIME_MAX`, some 292 years of uptime; 68 years with a 32-bit
/// `time_t`), so the timer never fires.
#[cfg(all(not(loom), target_os = "linux"))]
const NEVER_SECS: libc::time_t = libc::time_t::MAX;

/// Wakes up to `count` threads, in any process, blocked in [`wait_shared`] on `word`.
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) fn wake_shared(word: &AtomicU32, count: u32) -> u32 {
    let count = count.min(i32::MAX as u32) as i32;
    // SAFETY: a live word; FUTEX_WAKE does not dereference it.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count) };
    rc.max(0) as u32
}

/// Portable fallback where there is no futex: poll with `sched_yield`.
#[cfg(all(not(loom), not(target_os = "linux")))]
pub(crate) fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> Wake {
    use crate::sync::Ordering;
    while word.load(Ordering::Acquire) == expected {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Wake::TimedOut;
        }
        std::thread::yield_now();
    }
    Wake::Woken
}

/// Portable fallback where there is no futex: waiters poll, so nothing to do.
///
/// # Safety
///
/// None needed; the signature matches the Linux version.
#[cfg(all(not(loom), not(target_os = "linux")))]
pub(crate) unsafe fn wake_ptr(_word: *const AtomicU32, _count: u32) -> u32 {
    0
}

#[cfg(loom)]
mod model {
    use crate::sync::{AtomicU32, Ordering};
    use core::cell::Cell;
    use loom::sync::{Arc, Condvar, Mutex, Notify};

    /// What a sleeper's waker signals: a condition variable, or, while
    /// spurious wake-ups are allowed, a loom `Notify`, whose wait loom lets
    /// return once without a notification (and explores both).
    enum Signal {
        Condvar(Arc<Condvar>),
        Notify(Arc<Notify>),
    }

    /// A sleeper: the address it sleeps on, and what its waker signals.
    struct Parked {
        addr: usize,
        id: u64,
        wake: Signal,
    }

    /// Every sleeper, in the order they went to sleep, the ones a wake
    /// chose that have not returned yet, and the spurious returns this
    /// execution may still make.
    struct Queue {
        next_id: u64,
        parked: Vec<Parked>,
        chosen: Vec<u64>,
        spurious_left: u32,
    }

    std::thread_local! {
        /// [`super::with_spurious_wakeups`]'s allowance, and the spurious
        /// returns made. Per OS thread, which a test's model threads share,
        /// so tests run side by side keep their own.
        static SPURIOUS: Cell<u32> = const { Cell::new(0) };
        static SPURRED: Cell<u64> = const { Cell::new(0) };
    }

    loom::lazy_static! {
        static ref FUTEX: Mutex<Queue> = Mutex::new(Queue {
            next_id: 0,
            parked: Vec::new(),
            chosen: Vec::new(),
            spurious_left: SPURIOUS.with(Cell::get),
        });
    }

    pub(crate) fn with_spurious_wakeups<R>(per_execution: u32, f: impl FnOnce() -> R) -> (R, u64) {
        /// Restores the allowance even if `f` panics: a test that fails
        /// must not leave it to the next test on its OS thread.
        struct Restore(u32);
        impl Drop for Restore {
            fn drop(&mut self) {
                SPURIOUS.with(|s| s.set(self.0));
            }
        }
        let _restore = Restore(SPURIOUS.with(|s| s.replace(per_execution)));
        let before = SPURRED.with(Cell::get);
        let result = f();
        (result, SPURRED.with(Cell::get) - before)
    }

    /// Takes the sleeper `id` off the chosen, if a wake chose it.
    fn was_chosen(queue: &mut Queue, id: u64) -> bool {
        match queue.chosen.iter().position(|&c| c == id) {
            Some(at) => {
                queue.chosen.swap_remove(at);
                true
            }
            None => false,
        }
    }

    pub(crate) fn wait(word: &AtomicU32, expected: u32, timed: bool) -> super::Wake {
        let mut queue = FUTEX.lock().unwrap();
        if word.load(Ordering::SeqCst) != expected {
            return super::Wake::Woken;
        }
        let id = queue.next_id;
        queue.next_id += 1;
        let addr = word as *const AtomicU32 as usize;
        if !timed && queue.spurious_left > 0 {
            let wake = Arc::new(Notify::new());
            queue.parked.push(Parked {
                addr,
                id,
                wake: Signal::Notify(Arc::clone(&wake)),
            });
            drop(queue);
            loop {
                // A waker that comes first leaves its notification with
                // the `Notify`, so dropping the lock first loses none.
                wake.wait();
                let mut queue = FUTEX.lock().unwrap();
                if was_chosen(&mut queue, id) {
                    return super::Wake::Woken;
                }
                if queue.spurious_left > 0 {
                    // Returns unwoken, as a kernel futex may: off the queue,
                    // so that no later wake is spent on it.
                    queue.spurious_left -= 1;
                    queue.parked.retain(|p| p.id != id);
                    SPURRED.with(|s| s.set(s.get() + 1));
                    return super::Wake::Woken;
                }
                // Another sleeper spent the allowance first. This `Notify`
                // has returned early once, which loom allows only once, so
                // the next wait is for a wake.
            }
        }
        let wake = Arc::new(Condvar::new());
        queue.parked.push(Parked {
            addr,
            id,
            wake: Signal::Condvar(Arc::clone(&wake)),
        });
        if timed {
            // Asleep for a while loom cannot measure: queued, so that a wake
            // may choose this sleeper while the others run, then timed out
            // unless one did.
            drop(queue);
            loom::thread::yield_now();
            let mut queue = FUTEX.lock().unwrap();
            if was_chosen(&mut queue, id) {
                return super::Wake::Woken;
            }
            queue.parked.retain(|p| p.id != id);
            return super::Wake::TimedOut;
        }
        loop {
            queue = wake.wait(queue).unwrap();
            if was_chosen(&mut queue, id) {
                return super::Wake::Woken;
            }
        }
    }

    /// Wakes up to `count` sleepers on `addr`, the longest asleep first;
    /// returns how many.
    pub(crate) fn wake(addr: usize, count: u32) -> u32 {
        let mut queue = FUTEX.lock().unwrap();
        let mut woken = 0;
        while woken < count {
            let Some(at) = queue.parked.iter().position(|p| p.addr == addr) else {
                break;
            };
            let parked = queue.parked.remove(at);
            queue.chosen.push(parked.id);
            match parked.wake {
                Signal::Condvar(condvar) => condvar.notify_one(),
                Signal::Notify(notify) => notify.notify(),
            }
            woken += 1;
        }
        woken
    }
}

/// Under loom: runs `f` (a test's `loom::model` or `check`) with a futex
/// model that lets waits without a deadline return, unwoken, up to
/// `per_execution` times in each execution it explores, at whichever waits
/// loom picks; the native futex may return early too (a signal, a wake
/// meant for an earlier user of the address), and every caller re-checks.
/// Off by default: each wait it may pick doubles the schedules around it.
/// Returns `f`'s result and the spurious returns made in all executions,
/// for the test to show that its model had some.
#[cfg(loom)]
pub fn with_spurious_wakeups<R>(per_execution: u32, f: impl FnOnce() -> R) -> (R, u64) {
    model::with_spurious_wakeups(per_execution, f)
}

/// Model of [`wait`] for loom; a deadline means "already expired".
#[cfg(loom)]
pub(crate) fn wait(word: &AtomicU32, expected: u32, deadline: Option<std::time::Instant>) -> Wake {
    model::wait(word, expected, deadline.is_some())
}

/// Model of [`wake`] for loom: up to `count` sleepers on the word.
#[cfg(loom)]
pub(crate) fn wake(word: &AtomicU32, count: u32) -> u32 {
    model::wake(word as *const AtomicU32 as usize, count)
}

/// Model of [`wake_ptr`] for loom: the address is only a key, as in the
/// kernel.
///
/// # Safety
///
/// None needed; the signature matches the native version.
#[cfg(loom)]
pub(crate) unsafe fn wake_ptr(word: *const AtomicU32, count: u32) -> u32 {
    model::wake(word as usize, count)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn wait_returns_at_once_when_the_value_differs() {
        let word = AtomicU32::new(1);
        assert_eq!(wait(&word, 0, None), Wake::Woken);
    }

    #[test]
    fn wait_times_out() {
        let word = AtomicU32::new(0);
        let deadline = Instant::now() + Duration::from_millis(20);
        assert_eq!(wait(&word, 0, Some(deadline)), Wake::TimedOut);
        assert!(Instant::now() >= deadline);
    }

    #[test]
    fn wake_releases_a_sleeper() {
        let word = Arc::new(AtomicU32::new(0));
        let sleeper = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                while word.load(Ordering::Acquire) == 0 {
                    wait(&word, 0, None);
                }
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        word.store(1, Ordering::Release);
        wake(&word, 1);
        sleeper.join().unwrap();
    }

    /// A handler installed with `SA_RESTART` ends a shared wait without a
    /// timeout, as it ends the kernel's `semop`: an untimed `FUTEX_WAIT`
    /// would be restarted after it, unseen. Signals go every 20 ms, for
    /// one to land while the sleeper is in the kernel; after a second the
    /// word changes, which ends a wait the signals did not.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_restarting_handler_interrupts_a_shared_wait_without_a_timeout() {
        use std::os::unix::thread::JoinHandleExt;
        use std::sync::atomic::AtomicBool;
        extern "C" fn on_signal(_: libc::c_int) {}
        // SAFETY: plain old data, then a handler that does nothing, for a
        // signal nothing else in the crate's tests uses.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            assert_eq!(
                libc::sigaction(libc::SIGUSR2, &sa, core::ptr::null_mut()),
                0
            );
        }
        let word = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let sleeper = {
            let (word, done) = (Arc::clone(&word), Arc::clone(&done));
            std::thread::spawn(move || {
                let wake = wait_shared(&word, 0, None);
                done.store(true, Ordering::SeqCst);
                wake
            })
        };
        let thread = sleeper.as_pthread_t();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(20));
            if done.load(Ordering::SeqCst) {
                break;
            }
            // SAFETY: the thread is alive until joined below.
            unsafe { libc::pthread_kill(thread, libc::SIGUSR2) };
        }
        word.store(1, Ordering::SeqCst);
        wake_shared(&word, 1);
        assert_eq!(sleeper.join().unwrap(), Wake::Interrupted);
    }
}
