//! The calling thread's live stack: the one range of a caller's memory the
//! library may read directly, with no system call, and still never fault.
//!
//! Everything between the library's own frame and the top of the thread's
//! stack holds live frames, its callers' among them, so it is mapped for as
//! long as the call lasts: a C program's `struct sembuf` in a local variable,
//! the usual case (stress-ng's, glibc's examples, LTP's), lies there. The
//! bounds come from `pthread_getattr_np` once per thread.
//!
//! What this cannot vouch for, and leaves to the main heap's check
//! (`heap.rs`), the loaded objects' (`segments.rs`, static data) or the
//! checked copies that call it (`user.rs`, one system call): any other memory,
//! another thread's stack, and any call made while running on a stack the
//! thread's bounds do not describe (a `sigaltstack` signal handler, a
//! coroutine's stack).

use core::cell::Cell;

/// Bounds not yet asked for.
const UNKNOWN: (usize, usize) = (0, 0);
/// `pthread_getattr_np` failed: nothing is vouched for on this thread.
const UNAVAILABLE: (usize, usize) = (usize::MAX, usize::MAX);

thread_local! {
    /// The thread's stack as `[lowest, top)`; a thread's stack never moves,
    /// and a child of `fork` runs on its parent thread's, at the same address.
    static BOUNDS: Cell<(usize, usize)> = const { Cell::new(UNKNOWN) };
}

/// Whether the `len` bytes at `addr` lie in the calling thread's stack
/// between this call's frame and the top, that is, in live frames.
#[inline]
pub fn holds(addr: usize, len: usize) -> bool {
    within(addr, len, true)
}

/// [`holds`] without asking glibc for the bounds: false until a call of
/// [`holds`] on this thread has. For the calls that must not reach a
/// cancellation point: for the main thread, `pthread_getattr_np` reads
/// `/proc/self/maps`, and whether that read may be cancelled is glibc's
/// choice.
#[inline]
pub fn holds_known(addr: usize, len: usize) -> bool {
    within(addr, len, false)
}

#[inline(always)]
fn within(addr: usize, len: usize, learn: bool) -> bool {
    let marker = 0u8;
    // The address of a local in this frame: below every live caller frame.
    let here = core::hint::black_box(&marker) as *const u8 as usize;
    let Ok((lowest, top)) = BOUNDS.try_with(|b| {
        if learn && b.get() == UNKNOWN {
            b.set(ask());
        }
        b.get()
    }) else {
        return false;
    };
    // `here` outside the bounds: running on some other stack, whose extent
    // is unknown.
    (lowest..top).contains(&here)
        && addr >= here
        && addr.checked_add(len).is_some_and(|end| end <= top)
}

/// The calling thread's stack bounds from glibc.
fn ask() -> (usize, usize) {
    // SAFETY: `attr` is initialised by pthread_getattr_np before it is read
    // and destroyed once; pthread_attr_getstack writes the two outputs.
    unsafe {
        let mut attr = core::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return UNAVAILABLE;
        }
        let mut base: *mut libc::c_void = core::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(attr.as_ptr(), &mut base, &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        match (rc, (base as usize).checked_add(size)) {
            (0, Some(top)) if size > 0 => (base as usize, top),
            _ => UNAVAILABLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[inline(never)]
    fn caller_local_is_held() -> bool {
        let local = [1u8; 64];
        inner(local.as_ptr() as usize)
    }

    #[inline(never)]
    fn inner(addr: usize) -> bool {
        holds(addr, 64)
    }

    #[test]
    fn a_callers_local_is_on_the_live_stack() {
        assert!(caller_local_is_held());
    }

    #[test]
    fn heap_static_and_bad_addresses_are_not() {
        let heap = Box::new([0u8; 16]);
        assert!(!holds(heap.as_ptr() as usize, 16));
        static DATA: [u8; 4] = [0; 4];
        assert!(!holds(DATA.as_ptr() as usize, 4));
        assert!(!holds(8, 8));
        assert!(!holds(usize::MAX - 2, 8));
    }

    #[test]
    fn a_range_running_past_the_top_is_not() {
        let local = 0u64;
        let addr = &local as *const u64 as usize;
        assert!(!holds(addr, usize::MAX / 2));
    }

    #[test]
    fn another_threads_stack_is_not() {
        let local = 0u64;
        let addr = &local as *const u64 as usize;
        let seen = std::thread::spawn(move || holds(addr, 8)).join().unwrap();
        assert!(!seen);
    }
}
