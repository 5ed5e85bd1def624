//! A set file truncated under its mappings: an error, not a crash.
//!
//! A process that may write a set's file may also shorten it, and every
//! other process's next access to the lost pages faults with `SIGBUS`, which
//! kills it by default. This module installs a `SIGBUS` handler (once, the
//! first time a set is mapped) that recognises a fault inside a set's
//! mapping, replaces the whole mapping with private zero pages at the same
//! address, and marks the set *poisoned*. On the new pages it also sets
//! every semaphore word to a value the lock-free path refuses (its `LOCKED`
//! and `SLEEPERS` flags), so that path needs no check of its own. The
//! faulting instruction then runs again on the new pages, and every locked
//! call on the set checks the mark and fails with `EINVAL` ([`poisoned`]):
//! whatever was in flight finishes on memory no other process sees, and
//! nothing is written to the file.
//!
//! A fault anywhere else goes to the handler that was installed before, or,
//! if there was none, to the default action (the handler puts it back and
//! returns, and the fault happens again). A `SIGBUS` that does not recur
//! when the handler returns is no fault in a set: one a process sent
//! (`kill`, `raise`; its address field holds the sender's ids) or one the
//! kernel sends about memory that is not being accessed (`BUS_MCEERR_AO`,
//! a memory error found in the background). It goes to the previous
//! handler, is ignored if that was `SIG_IGN`, and otherwise is raised again
//! under the default action, which a returning handler would have swallowed.
//!
//! The handler only reads and writes atomics in a fixed table and calls
//! `mmap` and `sigaction`, which are async-signal-safe.

use std::sync::{Once, OnceLock};

use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// Mappings the handler knows of, at most. A process with more set
/// mappings open at once has the rest unprotected (they still work).
const SLOTS: usize = 256;

struct Range {
    start: AtomicUsize,
    len: AtomicUsize,
    /// The semaphore words, as a word index and a count, and the value the
    /// handler stores in each.
    fence_at: AtomicUsize,
    fence_words: AtomicUsize,
    fence_value: AtomicUsize,
    poisoned: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Range = Range {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fence_at: AtomicUsize::new(0),
    fence_words: AtomicUsize::new(0),
    fence_value: AtomicUsize::new(0),
    poisoned: AtomicBool::new(false),
};

/// What the handler writes on a poisoned mapping's new pages: `words`
/// 32-bit words from word `at`, each set to `value`.
pub(super) struct Fence {
    pub(super) at: usize,
    pub(super) words: usize,
    pub(super) value: u32,
}

static RANGES: [Range; SLOTS] = [EMPTY; SLOTS];

/// The handler that was installed before ours, for faults that are not ours
/// (set once, before ours is installed; the handler only reads it).
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: Once = Once::new();

/// Registers the mapping `start .. start + len`, with what to write on its
/// new pages if it is poisoned; returns its slot, or `None` if the table is
/// full (the mapping is then unprotected).
pub(super) fn register(start: usize, len: usize, fence: Fence) -> Option<usize> {
    INSTALL.call_once(install);
    let fence_end = fence.at.saturating_add(fence.words).saturating_mul(4);
    let (at, words) = if fence_end <= len {
        (fence.at, fence.words)
    } else {
        (0, 0)
    };
    for (i, r) in RANGES.iter().enumerate() {
        if r.start
            .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            r.poisoned.store(false, Ordering::Relaxed);
            r.fence_at.store(at, Ordering::Relaxed);
            r.fence_words.store(words, Ordering::Relaxed);
            r.fence_value.store(fence.value as usize, Ordering::Relaxed);
            // Release: the handler that sees the length sees the rest.
            r.len.store(len, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Forgets slot `slot` (before its mapping is unmapped).
pub(super) fn unregister(slot: usize) {
    let r = &RANGES[slot];
    r.len.store(0, Ordering::Release);
    r.start.store(0, Ordering::Release);
}

/// Whether the mapping in `slot` lost its file (see the module documentation).
#[inline]
pub(super) fn poisoned(slot: Option<usize>) -> bool {
    slot.is_some_and(|s| RANGES[s].poisoned.load(Ordering::Acquire))
}

fn install() {
    // SAFETY: plain old data; filled in before use.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
    // SAFETY: sigemptyset on our own struct, then sigaction with valid
    // pointers.
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        // Who handles SIGBUS now, recorded before ours takes over.
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
            return;
        }
        let _ = PREVIOUS.set(old);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A fault on an access, which the faulting instruction repeats when the
    // handler returns: a truncated set's is BUS_ADRERR (no page behind the
    // address). Any other code (a process's SI_USER, SI_TKILL, SI_QUEUE;
    // the kernel's SI_KERNEL or a background memory error, BUS_MCEERR_AO)
    // comes once, and its address, if any, is not an access of ours.
    let fault = matches!(
        code,
        libc::BUS_ADRALN | libc::BUS_ADRERR | libc::BUS_OBJERR | libc::BUS_MCEERR_AR
    );
    let ranges = if fault { &RANGES[..] } else { &[] };
    for r in ranges {
        let len = r.len.load(Ordering::Acquire);
        let start = r.start.load(Ordering::Relaxed);
        if len == 0 || addr < start || addr >= start + len {
            continue;
        }
        if r.poisoned.swap(true, Ordering::AcqRel) {
            // Another thread's fault is replacing the pages: this access
            // runs again, and faults again until that is done.
            return;
        }
        // SAFETY: replaces exactly our own mapping (which stays reserved
        // while registered) with private zero pages; mmap is
        // async-signal-safe in practice (a system call).
        let got = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if got != libc::MAP_FAILED {
            let at = r.fence_at.load(Ordering::Relaxed);
            let words = r.fence_words.load(Ordering::Relaxed);
            let value = r.fence_value.load(Ordering::Relaxed) as u32;
            for i in at..at + words {
                // SAFETY: within the new pages (checked at registration).
                unsafe {
                    (*(start as *const crate::sync::AtomicU32).add(i))
                        .store(value, Ordering::Release)
                };
            }
            return;
        }
        break;
    }
    // Not ours (or the remap failed): what would have happened without us.
    match PREVIOUS.get().copied() {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler's own signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig, info, context);
            } else {
                // SAFETY: the previous handler's own signature.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig);
            }
        }
        Some(old) if old.sa_sigaction == libc::SIG_IGN && !fault => {}
        _ => {
            // Back to the default action. A fault recurs when the handler
            // returns and takes it; a sent signal would not, so it is sent
            // again (not blocked here: the handler runs with SA_NODEFER).
            // SAFETY: plain sigaction with a zeroed (SIG_DFL) action, and
            // raise, both async-signal-safe.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
                if !fault {
                    libc::raise(libc::SIGBUS);
                }
            }
        }
    }
}
