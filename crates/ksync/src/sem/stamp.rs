//! What the kernel records besides the values: the process id of the last
//! change (`GETPID`) and second-resolution times (`sem_otime`, `sem_ctime`).
//! Both are read on hot paths, so both avoid a system call.

use std::time::{Duration, SystemTime};

use crate::sync::unmodelled::AtomicI32 as PidCache;
use crate::sync::Ordering;

/// The process id the kernel would record (cached: `getpid` is a system call).
///
/// Inline, down to one load: every successful operation records it, and on
/// the lock-free paths (one compare-and-swap) an out-of-line call here and in
/// [`now_secs`] cost as much as the compare-and-swap itself.
#[inline(always)]
pub(super) fn current_pid() -> i32 {
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    first_pid()
}

/// The cached process id; 0 until the first [`current_pid`] and again in a
/// forked child.
static PID: PidCache = PidCache::new(0);

/// Caches the process id, and arranges that a forked child forgets it.
#[cold]
#[inline(never)]
fn first_pid() -> i32 {
    use std::sync::Once;
    static AT_FORK: Once = Once::new();
    extern "C" fn forget_pid() {
        PID.store(0, Ordering::Relaxed);
    }
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, which
        // is async-signal-safe as the child side of fork requires.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid)) };
    });
    let pid = std::process::id() as i32;
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Seconds since the epoch (`sem_otime` only has second resolution).
///
/// Inline but for the clock itself: see [`current_pid`].
#[inline(always)]
pub(super) fn now_secs() -> u64 {
    // SAFETY: time(NULL) writes nothing; on x86-64 and AArch64 glibc answers
    // it from the vDSO with one load, cheaper than clock_gettime.
    let secs = unsafe { libc::time(core::ptr::null_mut()) };
    if secs > 0 {
        secs as u64
    } else {
        secs_from_system_time()
    }
}

/// [`now_secs`] where `time` failed.
#[cold]
#[inline(never)]
fn secs_from_system_time() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs().max(1))
}

/// The time `secs` seconds after the epoch.
pub(super) fn system_time(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_pid_is_this_process() {
        assert_eq!(current_pid(), std::process::id() as i32);
        // The cached answer is the same.
        assert_eq!(current_pid(), std::process::id() as i32);
    }

    #[test]
    fn seconds_agree_with_the_system_clock() {
        let before = SystemTime::now();
        let secs = now_secs();
        let after = SystemTime::now();
        let floor = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        // time(2) reads the clock as of the last timer tick (as the kernel's
        // own ktime_get_real_seconds does), so just after a second begins it
        // may still say the one before.
        assert!(
            (floor(before) - 1..=floor(after)).contains(&secs),
            "{} not in {}..={}",
            secs,
            floor(before),
            floor(after)
        );
        assert_eq!(floor(system_time(secs)), secs);
    }
}
