//! Memory a run shares with the processes it forks: an anonymous shared
//! mapping, which `fork` leaves shared between parent and child (a heap
//! allocation would be copied, each process then writing its own copy).

use std::ops::Deref;
use std::ptr::NonNull;

/// `len` values of `T` in an anonymous shared mapping: every child forked
/// after it was made reads and writes the same values as the parent.
///
/// `T` must be plain data, whose every field is either set before the fork
/// and only read after it or an atomic: a pointer into the heap would name
/// a different copy in each process.
pub struct SharedArray<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the values are only reached through `&[T]`, so sharing the array
// between threads is sharing `&T`, which `T: Sync` allows.
unsafe impl<T: Sync> Sync for SharedArray<T> {}
// SAFETY: as above; the mapping belongs to no thread.
unsafe impl<T: Sync> Send for SharedArray<T> {}

impl<T> SharedArray<T> {
    /// `len` values, value `i` made by `init(i)`.
    pub fn new(len: usize, mut init: impl FnMut(usize) -> T) -> Result<SharedArray<T>, String> {
        // Nothing is dropped when the mapping goes: a value that needs
        // dropping would leak, and in a child could free the parent's memory.
        const { assert!(!std::mem::needs_drop::<T>()) };
        let bytes = std::mem::size_of::<T>()
            .checked_mul(len)
            .ok_or_else(|| format!("{len} shared values: too many"))?
            .max(1);
        // SAFETY: a fresh anonymous mapping; no pointer is passed in.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(format!(
                "mmap of {bytes} shared bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Page-aligned, so aligned for any `T` the lab keeps there.
        let ptr = NonNull::new(raw.cast::<T>()).ok_or("mmap returned null")?;
        for i in 0..len {
            // SAFETY: `i < len` values fit in the mapping; each is written once.
            unsafe { ptr.as_ptr().add(i).write(init(i)) };
        }
        Ok(SharedArray { ptr, len })
    }

    fn bytes(&self) -> usize {
        (std::mem::size_of::<T>() * self.len).max(1)
    }
}

impl<T> Deref for SharedArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised values, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for SharedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of this size; no `&T` outlives
        // `self`. A forked child keeps its own mapping until it exits.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_forked_child_writes_what_the_parent_reads() {
        let words = SharedArray::new(3, |i| AtomicU32::new(i as u32)).unwrap();
        assert_eq!(words[2].load(Ordering::Relaxed), 2);
        // SAFETY: the child only stores to the mapping and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            words[1].store(42, Ordering::Release);
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(words[1].load(Ordering::Acquire), 42);
    }
}
