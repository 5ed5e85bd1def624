//! Which process this is, known without a system call on hot paths and
//! forgotten in every fork child, however it was forked: the process id
//! (`getpid` is a system call) and a generation that differs from every
//! ancestor's.
//!
//! A `pthread_atfork` handler runs only for `fork`. glibc's `_Fork` (what a
//! program forking in a signal handler calls, since `fork` is not
//! async-signal-safe), `syscall(SYS_fork)` and `clone` run none, and a child
//! that kept its parent's id would claim its parent's place in a
//! process-shared set (its `SEM_UNDO` adjustments, the liveness lock that
//! says whether it died) and submit to its parent's io_uring (whose
//! mappings the child does not have). So the cache lives in a page the
//! kernel zeroes in every child (`MADV_WIPEONFORK`, Linux 4.14): a child
//! finds nothing there and asks again. The page is a static of its own,
//! aligned to 64 KiB, the largest page size Linux uses, so the advice
//! touches nothing else; a static keeps the hot path at one load of it, as
//! a cache in memory mapped for it would not (its address is one more
//! load). Where the advice is refused, an atfork handler zeroes the cache,
//! which sees `fork` only.

use std::sync::Once;

use crate::sync::unmodelled::{AtomicU32, AtomicU64};
use crate::sync::Ordering;

/// The largest page size of any Linux architecture (AArch64, POWER).
const MAX_PAGE: usize = 1 << 16;

/// A page of its own for the cache: `generation << 32 | pid`, 0 while
/// unknown (a pid is never 0). Zero-initialised, so in `.bss`, which the
/// loader maps anonymous past the file's last page: the advice applies.
#[repr(C, align(65536))]
struct CachePage {
    known: AtomicU64,
}

const _: () = assert!(core::mem::align_of::<CachePage>() == MAX_PAGE);

static CACHE: CachePage = CachePage {
    known: AtomicU64::new(0),
};

/// Generations handed out so far, counting the ancestors' (the counter is
/// copied into a child), so a child's generation is above every one its
/// ancestors saw.
static GENERATIONS: AtomicU32 = AtomicU32::new(0);

/// This process's id.
///
/// Inline, down to one load: every successful semaphore operation records
/// it (`GETPID`), and on the lock-free paths (one compare-and-swap) an
/// out-of-line call costs as much as the compare-and-swap itself.
#[inline(always)]
pub(crate) fn pid() -> i32 {
    let known = CACHE.known.load(Ordering::Relaxed);
    if known != 0 {
        return known as u32 as i32;
    }
    learn() as u32 as i32
}

/// A number that stays the same for the life of this process and differs
/// from its parent's (and every ancestor's): what a thread keeps beside
/// something a fork child must not use, such as an io_uring.
#[cfg_attr(any(loom, not(target_os = "linux")), allow(dead_code))]
pub(crate) fn generation() -> u32 {
    let mut known = CACHE.known.load(Ordering::Relaxed);
    if known == 0 {
        known = learn();
    }
    (known >> 32) as u32
}

/// Fills the cache, the first time in this process (and in every child).
#[cold]
#[inline(never)]
fn learn() -> u64 {
    static SET_UP: Once = Once::new();
    SET_UP.call_once(set_up);
    let generation = GENERATIONS.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() } as u32;
    let known = (u64::from(generation) << 32) | u64::from(pid);
    // Two threads of a new child may learn at once: the first one's
    // generation stands (the other's number is skipped, which is harmless).
    match CACHE
        .known
        .compare_exchange(0, known, Ordering::Relaxed, Ordering::Relaxed)
    {
        Ok(_) => known,
        Err(first) => first,
    }
}

/// Asks the kernel to zero the cache's page in every fork child or, where
/// it refuses, arranges that `fork` (the only kind a handler sees) does.
fn set_up() {
    if wipe_on_fork(&CACHE) {
        #[cfg(all(test, not(loom), target_os = "linux"))]
        tests::WIPED.store(true, Ordering::Relaxed);
        return;
    }
    // SAFETY: registers a handler that only stores to an atomic, which is
    // async-signal-safe as the child side of fork requires. If this fails
    // (ENOMEM) a child could keep its parent's id: nothing better is left.
    unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
}

extern "C" fn forget_in_child() {
    CACHE.known.store(0, Ordering::Relaxed);
}

/// Marks the page `page` starts `MADV_WIPEONFORK`; false where the kernel
/// refuses (before Linux 4.14, or memory it does not take for anonymous).
#[cfg(target_os = "linux")]
fn wipe_on_fork(page: &CachePage) -> bool {
    // SAFETY: sysconf has no preconditions.
    let len = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let Ok(len) = usize::try_from(len) else {
        return false;
    };
    if len == 0 || len > MAX_PAGE {
        return false;
    }
    let start = core::ptr::from_ref(page).cast_mut().cast::<libc::c_void>();
    // SAFETY: the page holds `page` alone (its alignment is at least the
    // page size, and so is its size); the advice changes how fork copies
    // it, not its contents, which are 0 until `learn` fills them.
    unsafe { libc::madvise(start, len, libc::MADV_WIPEONFORK) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn wipe_on_fork(_: &CachePage) -> bool {
    false
}

#[cfg(all(test, not(loom), target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether `set_up` got the page marked (a kernel before 4.14 refuses).
    pub(super) static WIPED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    #[test]
    fn the_pid_is_this_process_and_the_generation_stays() {
        assert_eq!(pid(), std::process::id() as i32);
        let first = generation();
        assert_eq!(pid(), std::process::id() as i32);
        assert_eq!(generation(), first);
    }

    /// What a child reports through its exit status: 0 when its cached
    /// pid is its own and its generation differs from its parent's.
    fn child_checks(parent_generation: u32) -> i32 {
        // SAFETY: getpid cannot fail.
        let own = unsafe { libc::getpid() };
        i32::from(pid() != own) | (i32::from(generation() == parent_generation) << 1)
    }

    /// Forks with `fork` and returns the child's exit status.
    fn in_child(fork: impl FnOnce() -> libc::pid_t) -> i32 {
        let parent_generation = generation();
        assert!(pid() > 0);
        let child = fork();
        assert!(
            child >= 0,
            "fork failed: {}",
            std::io::Error::last_os_error()
        );
        if child == 0 {
            let status = child_checks(parent_generation);
            // SAFETY: leaves the child at once, running nothing of the
            // parent's (no destructors, no atexit handlers, no test harness).
            unsafe { libc::_exit(status) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is ours.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn a_child_of_fork_knows_itself() {
        // SAFETY: the child calls only getpid, our cache and _exit.
        assert_eq!(in_child(|| unsafe { libc::fork() }), 0);
    }

    /// A child made without the atfork handlers (glibc's `_Fork`, which a
    /// program forking in a signal handler calls) still learns its own id
    /// and a generation of its own: 1 and 2 in its exit status say it did
    /// not.
    #[test]
    fn a_child_made_without_fork_handlers_knows_itself() {
        generation();
        if !WIPED.load(Ordering::Relaxed) {
            eprintln!("skipped: this kernel refuses MADV_WIPEONFORK (before 4.14)");
            return;
        }
        // The raw system call runs no handler either, and is in every
        // kernel; the child touches nothing glibc keeps per thread.
        // SAFETY: as for fork; the child calls only getpid, our cache and
        // _exit.
        let raw_fork =
            || unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) as libc::pid_t };
        assert_eq!(in_child(raw_fork), 0);
    }
}
