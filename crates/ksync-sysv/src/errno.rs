//! The error a call hands back to C: an `errno` value.

use core::fmt;
use libc::c_int;

/// An `errno` value (`EINVAL`, `EFAULT`, ...), as the kernel would return it
/// negated and glibc would store it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub c_int);

impl Errno {
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFAULT: Errno = Errno(libc::EFAULT);

    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        // SAFETY: `__errno_location` returns the calling thread's errno slot,
        // valid for the thread's lifetime.
        Errno(unsafe { *libc::__errno_location() })
    }

    /// Stores this value in the calling thread's `errno`, as glibc's wrapper
    /// does before returning -1.
    pub fn store(self) {
        // SAFETY: as in `last`; the slot is the calling thread's own.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({})", self.0)
    }
}

/// Turns a result into what a glibc System V call returns: the value, or -1
/// with `errno` set.
pub fn to_c(result: Result<c_int, Errno>) -> c_int {
    match result {
        Ok(value) => value,
        Err(errno) => {
            errno.store();
            -1
        }
    }
}
