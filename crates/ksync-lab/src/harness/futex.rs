//! The two futex calls the lab makes itself: parking a thread on a word
//! and waking it (process-private futexes).

use std::sync::atomic::AtomicU32;

/// Sleeps while `word` holds `expected`. Returns at once if it does not;
/// may also return spuriously (a signal, a stale wake-up): callers recheck.
pub fn wait(word: &AtomicU32, expected: u32) {
    // SAFETY: `word` is a live, aligned u32; a null timeout waits without
    // limit. EAGAIN (value changed) and EINTR just return.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

/// Wakes up to `count` threads sleeping on `word`.
pub fn wake(word: &AtomicU32, count: i32) {
    // SAFETY: waking takes the address only as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        )
    };
}
