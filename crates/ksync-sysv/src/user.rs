//! Checked copies to and from the caller's memory.
//!
//! A C caller may hand the library any pointer. The kernel's system calls
//! answer a pointer they cannot read or write with `EFAULT`; the library must
//! do the same and never fault itself. `process_vm_readv`/`process_vm_writev`
//! on the calling process copy through the kernel, which checks every page
//! and reports `EFAULT` for a hole, so a bad pointer costs one failed system
//! call instead of a `SIGSEGV` inside the library.
//!
//! Some sandboxes refuse `process_vm_readv` (seccomp profiles that tie it to
//! `CAP_SYS_PTRACE`). There the bytes go through a pipe instead: `write(2)`
//! from the caller's buffer and `read(2)` into it check the address the same
//! way, at the price of a pipe per copy.

use core::marker::PhantomData;
use core::mem::{size_of, MaybeUninit};

use crate::errno::Errno;

/// Types that are plain bytes: any bit pattern is a valid value, so a copy
/// from the caller's memory can produce them. Sealed: only the C structures
/// this library exchanges.
pub trait Plain: Copy + private::Sealed {}

mod private {
    pub trait Sealed {}
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl private::Sealed for $t {}
        impl Plain for $t {}
    )*};
}
plain!(
    u16,
    libc::sembuf,
    ksync::sem::SemBuf,
    libc::timespec,
    libc::semid_ds,
    libc::seminfo
);

/// A pointer into the caller's memory, holding `T`s, that the library reads
/// and writes only through checked copies.
pub struct UserPtr<T> {
    addr: usize,
    _holds: PhantomData<*const T>,
}

impl<T> Clone for UserPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for UserPtr<T> {}

impl<T> core::fmt::Debug for UserPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "UserPtr({:#x})", self.addr)
    }
}

impl<T: Plain> UserPtr<T> {
    pub fn new(addr: usize) -> Self {
        UserPtr {
            addr,
            _holds: PhantomData,
        }
    }

    /// The address, for handing on to the kernel untouched.
    pub fn addr(self) -> usize {
        self.addr
    }

    /// Copies one `T` in, as [`read_into`](Self::read_into) does: directly
    /// where that is safe, else through the checked copy.
    #[inline]
    pub fn read(self) -> Result<T, Errno> {
        // SAFETY: `T: Plain` accepts any bit pattern, all-zero included.
        let mut value = [unsafe { MaybeUninit::<T>::zeroed().assume_init() }];
        self.read_into(&mut value)?;
        Ok(value[0])
    }

    /// Copies `len` `T`s in.
    pub fn read_slice(self, len: usize) -> Result<Vec<T>, Errno> {
        let bytes = len.checked_mul(size_of::<T>()).ok_or(Errno::EFAULT)?;
        let mut values = Vec::<T>::with_capacity(len);
        transfer(Direction::In, self.addr, values.as_mut_ptr().cast(), bytes)?;
        // SAFETY: `transfer` filled the first `len` elements' bytes, and
        // `T: Plain` accepts any bit pattern.
        unsafe { values.set_len(len) };
        Ok(values)
    }

    /// Fills `out` with the `out.len()` `T`s at this pointer: read directly
    /// when they lie in the calling thread's live stack ([`stack`]), the
    /// main heap ([`heap`]) or a loaded object's static data ([`segments`]),
    /// where no system call is needed and no fault possible, else through
    /// the checked copy.
    ///
    /// [`stack`]: crate::stack
    /// [`heap`]: crate::heap
    /// [`segments`]: crate::segments
    // Inlined into the semop path: as a call it cost ~5 ns per down + up
    // pair (sem_pair, 43.8 -> 38.5 ns), an eighth of the whole.
    #[inline]
    pub fn read_into(self, out: &mut [T]) -> Result<(), Errno> {
        let bytes = core::mem::size_of_val(out);
        if crate::stack::holds(self.addr, bytes)
            || crate::heap::holds(self.addr, bytes)
            || crate::segments::holds(self.addr, bytes)
        {
            // SAFETY: `stack`, `heap` or `segments` vouched for the bytes.
            unsafe { self.read_direct(out) };
            return Ok(());
        }
        transfer(Direction::In, self.addr, out.as_mut_ptr().cast(), bytes)
    }

    /// Fills `out` straight from this pointer.
    ///
    /// # Safety
    ///
    /// The `size_of_val(out)` bytes at this pointer are mapped and readable
    /// for the whole call (`stack`, `heap`, `segments` said so).
    #[inline(always)]
    unsafe fn read_direct(self, out: &mut [T]) {
        let from = self.addr as *const T;
        for (i, slot) in out.iter_mut().enumerate() {
            // SAFETY: the bytes are readable (the caller's promise);
            // `read_unaligned` because C only promises `T`'s alignment,
            // which Rust's may exceed, and `T: Plain` accepts any bytes. One
            // element at a time through a temporary, not a `memcpy`: a few
            // bytes (one `sembuf` on the hot path), and no overlap question
            // if a pointer below the caller's frame reaches into ours.
            *slot = unsafe { core::ptr::read_unaligned(from.add(i)) };
        }
    }

    /// [`read_into`](Self::read_into)'s direct read alone, vouched for by
    /// what is known already: `false`, with `out` untouched, where that
    /// would need a system call (the checked copy, whose fallback `read`
    /// and `write` on a pipe are cancellation points, or learning the
    /// stack's bounds or the heap's start, which may open a file). For the
    /// calls that must not reach a cancellation point; the caller then goes
    /// on with `read_into`.
    #[inline]
    pub fn read_known(self, out: &mut [T]) -> bool {
        let bytes = core::mem::size_of_val(out);
        if !(crate::stack::holds_known(self.addr, bytes)
            || crate::heap::holds_known(self.addr, bytes)
            || crate::segments::holds(self.addr, bytes))
        {
            return false;
        }
        // SAFETY: `stack`, `heap` or `segments` vouched for the bytes.
        unsafe { self.read_direct(out) };
        true
    }

    /// Copies one `T` out.
    pub fn write(self, value: &T) -> Result<(), Errno> {
        self.write_slice(core::slice::from_ref(value))
    }

    /// Copies `values` out, starting at this pointer.
    pub fn write_slice(self, values: &[T]) -> Result<(), Errno> {
        let bytes = core::mem::size_of_val(values);
        // `transfer` only reads through the local pointer when copying out.
        transfer(
            Direction::Out,
            self.addr,
            values.as_ptr().cast_mut().cast(),
            bytes,
        )
    }
}

enum Direction {
    /// Caller's memory to `local`.
    In,
    /// `local` to the caller's memory.
    Out,
}

/// Moves `len` bytes between the caller's memory at `remote` and the
/// library's buffer at `local`. `EFAULT` unless every byte moved.
fn transfer(direction: Direction, remote: usize, local: *mut u8, len: usize) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    match transfer_vm(&direction, remote, local, len) {
        Err(Errno(libc::EPERM | libc::ENOSYS)) => transfer_pipe(&direction, remote, local, len),
        other => other,
    }
}

/// `transfer` through `process_vm_readv`/`process_vm_writev` on this process.
fn transfer_vm(
    direction: &Direction,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> Result<(), Errno> {
    let local_iov = libc::iovec {
        iov_base: local.cast(),
        iov_len: len,
    };
    let remote_iov = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` points to `len` bytes the library owns (writable when
    // copying in); the kernel checks `remote` and never lets a bad address
    // fault this process. gettid has no preconditions.
    let moved = unsafe {
        // The calling thread, not the process id: the kernel looks the id
        // up as a task, and once the main thread has called `pthread_exit`
        // the process id names a zombie without memory (ESRCH), while the
        // caller always has ours.
        let me = libc::gettid();
        match direction {
            Direction::In => libc::process_vm_readv(me, &local_iov, 1, &remote_iov, 1, 0),
            Direction::Out => libc::process_vm_writev(me, &local_iov, 1, &remote_iov, 1, 0),
        }
    };
    if moved == len as isize {
        Ok(())
    } else if moved >= 0 {
        // A partial copy stopped at a page the caller does not have.
        Err(Errno::EFAULT)
    } else {
        Err(Errno::last())
    }
}

/// Bytes per trip through the pipe: well under any pipe's capacity, so a
/// write never waits for a read that has not happened yet.
const PIPE_CHUNK: usize = 4096;

/// `transfer` through a private pipe: the kernel checks the source address
/// of `write(2)` and the target address of `read(2)`.
fn transfer_pipe(
    direction: &Direction,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> Result<(), Errno> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(Errno::last());
    }
    let [reader, writer] = fds;
    let (source, target) = match direction {
        Direction::In => (remote, local as usize),
        Direction::Out => (local as usize, remote),
    };
    let mut result = Ok(());
    let mut done = 0;
    while done < len {
        let chunk = PIPE_CHUNK.min(len - done);
        // SAFETY: write reads `chunk` bytes at `source + done`, which the
        // kernel checks (EFAULT); read stores what the pipe holds, at most
        // `chunk` bytes, at `target + done`, also checked. Neither address
        // is touched by this process directly.
        let step = unsafe {
            let wrote = libc::write(writer, (source + done) as *const libc::c_void, chunk);
            if wrote <= 0 {
                wrote
            } else {
                libc::read(reader, (target + done) as *mut libc::c_void, wrote as usize)
            }
        };
        if step <= 0 {
            result = Err(if step == 0 {
                Errno::EFAULT
            } else {
                Errno::last()
            });
            break;
        }
        done += step as usize;
    }
    // SAFETY: both descriptors were opened above and are closed once.
    unsafe {
        libc::close(reader);
        libc::close(writer);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNMAPPED: usize = 8;

    #[test]
    fn reads_and_writes_good_memory() {
        let source = [1u16, 2, 3];
        let ptr = UserPtr::<u16>::new(source.as_ptr() as usize);
        assert_eq!(ptr.read_slice(3).unwrap(), vec![1, 2, 3]);
        assert_eq!(ptr.read().unwrap(), 1);
        let mut target = [0u16; 3];
        let out = UserPtr::<u16>::new(target.as_mut_ptr() as usize);
        out.write_slice(&[7, 8, 9]).unwrap();
        assert_eq!(target, [7, 8, 9]);
    }

    #[test]
    fn bad_addresses_give_efault() {
        let ptr = UserPtr::<libc::semid_ds>::new(UNMAPPED);
        assert_eq!(ptr.read().unwrap_err(), Errno::EFAULT);
        // SAFETY: semid_ds is plain data; all zeroes is a valid value.
        let ds: libc::semid_ds = unsafe { core::mem::zeroed() };
        assert_eq!(ptr.write(&ds).unwrap_err(), Errno::EFAULT);
        assert_eq!(
            UserPtr::<u16>::new(0).read_slice(4).unwrap_err(),
            Errno::EFAULT
        );
    }

    #[test]
    fn a_copy_running_off_the_end_of_a_mapping_is_efault() {
        // SAFETY: a fresh anonymous mapping of two pages, the second then
        // unmapped, so the first page is followed by a hole.
        let page = unsafe {
            let size = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let base = libc::mmap(
                core::ptr::null_mut(),
                2 * size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(libc::munmap(base.cast::<u8>().add(size).cast(), size), 0);
            base as usize + size
        };
        let straddling = UserPtr::<u16>::new(page - 2);
        assert_eq!(straddling.read().unwrap(), 0);
        assert_eq!(straddling.read_slice(2).unwrap_err(), Errno::EFAULT);
    }

    #[test]
    fn the_pipe_path_copies_and_reports_efault_like_the_vm_path() {
        let source: Vec<u16> = (0..5000).collect(); // more than one pipe chunk
        let mut copy = vec![0u16; source.len()];
        let bytes = source.len() * 2;
        transfer_pipe(
            &Direction::In,
            source.as_ptr() as usize,
            copy.as_mut_ptr().cast(),
            bytes,
        )
        .unwrap();
        assert_eq!(copy, source);
        let mut target = vec![0u16; source.len()];
        let out = target.as_mut_ptr() as usize;
        transfer_pipe(
            &Direction::Out,
            out,
            source.as_ptr().cast_mut().cast(),
            bytes,
        )
        .unwrap();
        assert_eq!(target, source);
        let mut buf = [0u8; 16];
        let err = transfer_pipe(&Direction::In, UNMAPPED, buf.as_mut_ptr(), 16).unwrap_err();
        assert_eq!(err, Errno::EFAULT);
        let err = transfer_pipe(&Direction::Out, UNMAPPED, buf.as_mut_ptr(), 16).unwrap_err();
        assert_eq!(err, Errno::EFAULT);
    }

    #[test]
    fn read_into_copies_from_the_stack_and_elsewhere_and_reports_efault() {
        let on_stack = [4u16, 5, 6];
        let mut out = [0u16; 3];
        UserPtr::<u16>::new(on_stack.as_ptr() as usize)
            .read_into(&mut out)
            .unwrap();
        assert_eq!(out, [4, 5, 6]);
        let on_heap = Box::new([7u16, 8, 9]);
        UserPtr::<u16>::new(on_heap.as_ptr() as usize)
            .read_into(&mut out)
            .unwrap();
        assert_eq!(out, [7, 8, 9]);
        let err = UserPtr::<u16>::new(UNMAPPED).read_into(&mut out);
        assert_eq!(err.unwrap_err(), Errno::EFAULT);
    }

    #[test]
    fn an_overflowing_length_is_efault() {
        let ptr = UserPtr::<libc::semid_ds>::new(0x1000);
        assert_eq!(ptr.read_slice(usize::MAX).unwrap_err(), Errno::EFAULT);
    }
}
