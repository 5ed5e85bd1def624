//! What this process knows about io_uring futex wakes: whether they work
//! (found out by the first ring, or turned off by [`ENV_VAR`]), and a fork
//! generation that tells a thread its ring was inherited from the parent.

use std::sync::Once;

use crate::sync::{AtomicU32, AtomicU8, Ordering};

/// The environment variable that forces the fallback.
const ENV_VAR: &str = "KSYNC_NO_IO_URING";

/// Nothing known yet about this process's io_uring.
pub(super) const UNKNOWN: u8 = 0;
/// A ring was set up and the kernel supports `IORING_OP_FUTEX_WAKE`.
pub(super) const USABLE: u8 = 1;
/// No io_uring futex wakes in this process: unsupported, forbidden, or
/// turned off by [`ENV_VAR`].
pub(super) const UNUSABLE: u8 = 2;

/// One of the three above.
pub(super) static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The process-wide state; consults the environment while unknown.
pub(super) fn state() -> u8 {
    let state = STATE.load(Ordering::Relaxed);
    if state != UNKNOWN {
        return state;
    }
    if forced_off(std::env::var_os(ENV_VAR).as_deref()) {
        STATE.store(UNUSABLE, Ordering::Relaxed);
        return UNUSABLE;
    }
    UNKNOWN
}

/// Bumped in a fork child: a ring inherited across `fork` belongs to the
/// parent (its mappings are `MADV_DONTFORK`) and is abandoned unused.
pub(super) static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    // The parent's rings are not the child's, and their drops here leave
    // them alone (`ring.rs`).
    LIVE_RINGS.store(0, Ordering::Relaxed);
}

/// Rings this process made and has not closed.
static LIVE_RINGS: AtomicU32 = AtomicU32::new(0);

/// A ring counted in [`LIVE_RINGS`] until it is dropped in the process
/// that made it.
pub(super) struct RingRoom {
    fork_generation: u32,
}

impl RingRoom {
    /// Room for one more ring, or `None`: each ring holds a descriptor, and
    /// a process of thousands of waking threads would otherwise hold
    /// thousands, out of the application's own. The rings may take a
    /// quarter of the descriptors the process may open (`RLIMIT_NOFILE`'s
    /// soft limit, read once); threads past that wake word by word.
    pub(super) fn take() -> Option<RingRoom> {
        if LIVE_RINGS.fetch_add(1, Ordering::Relaxed) >= ring_cap() {
            LIVE_RINGS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(RingRoom {
            fork_generation: FORK_GENERATION.load(Ordering::Relaxed),
        })
    }
}

impl Drop for RingRoom {
    fn drop(&mut self) {
        if self.fork_generation == FORK_GENERATION.load(Ordering::Relaxed) {
            LIVE_RINGS.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The most rings at once: a quarter of `RLIMIT_NOFILE`'s soft limit.
fn ring_cap() -> u32 {
    static CAP: AtomicU32 = AtomicU32::new(0);
    let cap = CAP.load(Ordering::Relaxed);
    if cap != 0 {
        return cap;
    }
    // SAFETY: plain old data; getrlimit fills it.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    let cap = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        (limit.rlim_cur / 4).clamp(1, u64::from(u32::MAX)) as u32
    } else {
        256
    };
    CAP.store(cap, Ordering::Relaxed);
    cap
}

/// Registers the fork handler once; false if that failed (then no ring
/// may be made: a child could not tell it inherited one).
pub(super) fn watch_forks() -> bool {
    static ONCE: Once = Once::new();
    static OK: AtomicU8 = AtomicU8::new(0);
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state; the
        // handler only touches a static atomic, which is async-signal-safe.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        OK.store(u8::from(rc == 0), Ordering::Relaxed);
    });
    OK.load(Ordering::Relaxed) == 1
}

/// Whether the environment variable's value forces the fallback: any value
/// but empty or `0`.
fn forced_off(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_environment_variable_forces_the_fallback() {
        assert!(!forced_off(None));
        assert!(!forced_off(Some(OsStr::new(""))));
        assert!(!forced_off(Some(OsStr::new("0"))));
        assert!(forced_off(Some(OsStr::new("1"))));
        assert!(forced_off(Some(OsStr::new("yes"))));
        assert_eq!(ENV_VAR, "KSYNC_NO_IO_URING");
    }
}
