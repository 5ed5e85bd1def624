//! What this process knows about io_uring futex wakes: whether they work
//! (found out by the first ring, or turned off by [`ENV_VAR`]), and how many
//! rings it has, which a fork child does not inherit.

use crate::sync::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use crate::this_process;

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

/// Rings this process made and has not closed, with the generation
/// (`crate::this_process`) of the process that counted them:
/// `generation << 32 | count`. A fork child, however made, inherits its
/// parent's rings unusable (their mappings are `MADV_DONTFORK`) and
/// abandons them, so it starts from none.
static LIVE_RINGS: AtomicU64 = AtomicU64::new(0);

/// The rings counted in `live` if this process counted them, else none.
fn count_in(live: u64, generation: u32) -> u32 {
    if (live >> 32) as u32 == generation {
        live as u32
    } else {
        0
    }
}

/// A ring counted in [`LIVE_RINGS`] until it is dropped in the process
/// that made it.
pub(super) struct RingRoom {
    /// The process's generation when the ring was made.
    generation: u32,
}

impl RingRoom {
    /// Room for one more ring, or `None`: each ring holds a descriptor, and
    /// a process of thousands of waking threads would otherwise hold
    /// thousands, out of the application's own. The rings may take a
    /// quarter of the descriptors the process may open (`RLIMIT_NOFILE`'s
    /// soft limit, read once); threads past that wake word by word.
    pub(super) fn take() -> Option<RingRoom> {
        let generation = this_process::generation();
        let packed = |count: u32| (u64::from(generation) << 32) | u64::from(count);
        LIVE_RINGS
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                let count = count_in(live, generation);
                (count < ring_cap()).then(|| packed(count + 1))
            })
            .ok()?;
        Some(RingRoom { generation })
    }

    /// Whether the ring was made by a parent this process was forked from.
    pub(super) fn inherited(&self) -> bool {
        self.generation != this_process::generation()
    }
}

impl Drop for RingRoom {
    fn drop(&mut self) {
        let generation = self.generation;
        // A ring a parent counted is not this process's to uncount.
        let _ = LIVE_RINGS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
            let count = count_in(live, generation);
            (count > 0).then(|| live - 1)
        });
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
