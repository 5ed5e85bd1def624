//! What the kernel records besides the values: the process id of the last
//! change (`GETPID`) and second-resolution times (`sem_otime`, `sem_ctime`).
//! Both are read on hot paths, so both avoid a system call.

use std::time::{Duration, SystemTime};

/// The process id the kernel would record: cached, and forgotten in a fork
/// child however it was forked (`crate::this_process`).
pub(super) use crate::this_process::pid as current_pid;

/// Seconds since the epoch (`sem_otime` only has second resolution).
///
/// Inline but for the clock itself: every successful operation records it,
/// and on the lock-free paths (one compare-and-swap) an out-of-line call
/// costs as much as the compare-and-swap itself.
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
