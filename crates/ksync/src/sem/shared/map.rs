//! A set's file mapped into this process, seen as an array of 32-bit atomic
//! words, and the checks that make a file safe to use before anything in it
//! is trusted.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use super::layout::{header, sem_word, Layout, MAGIC, VERSION};
use super::sigbus;
use crate::sem::counters::Counters;
use crate::sem::sleep_watch::SleepWatch;
use crate::sem::{SemError, SEMMSL};
use crate::sync::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// A set file mapped shared, read-write when the process may alter the set,
/// read-only otherwise; a read-only mapping becomes read-write in place
/// when an `IPC_SET` lets the process write the file
/// ([`reopen_writable`](Mapping::reopen_writable)).
pub(super) struct Mapping {
    base: NonNull<AtomicU32>,
    words: usize,
    writable: AtomicBool,
    /// The header's permission generation when a read-only mapping last
    /// tried to open its file for writing (`u64::MAX`: never), so that a
    /// process the file keeps read-only pays one failed `open` per
    /// `IPC_SET`, not one per call.
    tried_gen: AtomicU64,
    pub(super) layout: Layout,
    /// The number of the file's descriptor ([`fd`](Self::fd)), which the
    /// mapping opened and closes on drop, unless the program closed it
    /// meanwhile (then the number may name a file of the program's, and is
    /// left alone). Kept open for the life of the process once its liveness
    /// lock is taken (`procs.rs`); see [`super::procs::Registry`]. A number,
    /// not an `OwnedFd`, so that [`reopen_if_closed`](Self::reopen_if_closed)
    /// can replace one the program closed.
    fd: AtomicI32,
    /// The file's device and inode, which the descriptor must keep naming.
    file: (u64, u64),
    /// Threads of this process holding or taking the set's lock: lets a
    /// waiter tell a lock word that names its own process but that no
    /// thread of it holds, which only a corrupt file can show (`lock.rs`).
    pub(super) lockers_here: AtomicU32,
    /// Held by the thread of this process that claims its slot, so that
    /// the others wait for the claim instead of claiming a second slot.
    pub(super) claiming: ClaimLock,
    /// What this process's calls on the set did (`SharedSemSet::counters`):
    /// kept here, not in the file, so that counting costs the other
    /// processes nothing.
    pub(super) counters: Counters,
    /// Which of this process's sleepers in the set sleeps with a timeout
    /// (`set.rs`, `crate::sem::sleep_watch`).
    pub(super) watch: SleepWatch,
    /// The mapping's slot in the `SIGBUS` handler's table (`sigbus.rs`).
    guard: Option<usize>,
}

/// The lock a thread holds while it claims its process's slot: the id of
/// the holder's process, or 0. It names the process, not the thread, for
/// `fork`: a child that copied it held by a thread of its parent (which the
/// child does not have) takes it over, where a mutex would keep the child
/// waiting for ever on its first call on the set.
pub(super) struct ClaimLock(AtomicI32);

/// [`ClaimLock`] held; released on drop.
pub(super) struct Claiming<'a>(&'a ClaimLock);

impl ClaimLock {
    /// Waits for this process's other claimant, if any: a claim takes a
    /// few system calls, and the set's lock.
    pub(super) fn lock(&self) -> Claiming<'_> {
        let me = crate::sem::stamp::current_pid();
        let mut spins = 0u32;
        loop {
            let holder = self.0.load(Ordering::Acquire);
            // Another process's id is a parent's, copied by `fork`.
            if holder != me
                && self
                    .0
                    .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Claiming(self);
            }
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
    }
}

impl Drop for Claiming<'_> {
    fn drop(&mut self) {
        self.0 .0.store(0, Ordering::Release);
    }
}

// SAFETY: the mapping is only ever accessed through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `fd` and checks its header: magic, version, size, and a file
    /// long enough for the layout that size implies. A file that fails any
    /// check is not a set (`EINVAL`).
    pub(super) fn new(fd: OwnedFd, writable: bool) -> Result<Mapping, SemError> {
        let (dev, ino, len) = identity(fd.as_raw_fd())?;
        if len < Layout::new(1).bytes() {
            return Err(SemError::Invalid);
        }
        let mut map = Mapping::map(fd, (dev, ino), len, writable)?;
        let nsems = map.word(header::NSEMS).load(Ordering::Acquire) as usize;
        if map.word(header::MAGIC).load(Ordering::Acquire) != MAGIC
            || map.word(header::VERSION).load(Ordering::Relaxed) != VERSION
            || !(1..=SEMMSL).contains(&nsems)
        {
            return Err(SemError::Invalid);
        }
        let layout = Layout::new(nsems);
        if layout.words > map.words {
            return Err(SemError::Invalid);
        }
        map.layout = layout;
        map.guard_against_truncation();
        Ok(map)
    }

    /// Maps a new set's file, `layout.bytes()` long and still all zero, for
    /// its creator to fill in (`set.rs`).
    pub(super) fn new_file(fd: OwnedFd, layout: Layout) -> Result<Mapping, SemError> {
        let (dev, ino, _) = identity(fd.as_raw_fd())?;
        let mut map = Mapping::map(fd, (dev, ino), layout.bytes(), true)?;
        map.layout = layout;
        map.guard_against_truncation();
        Ok(map)
    }

    /// Registers the mapping with the `SIGBUS` handler (`sigbus.rs`), whose
    /// fence closes every semaphore word to the lock-free path.
    fn guard_against_truncation(&mut self) {
        let fence = sigbus::Fence {
            at: self.layout.sems,
            words: self.layout.nsems,
            value: sem_word::LOCKED | sem_word::SLEEPERS,
        };
        self.guard = sigbus::register(self.base.as_ptr() as usize, self.words * 4, fence);
    }

    /// Maps `len` bytes of `fd`, the file `file` (device and inode).
    fn map(fd: OwnedFd, file: (u64, u64), len: usize, writable: bool) -> Result<Mapping, SemError> {
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh mapping of a regular file; nothing else is at the
        // address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(SemError::NoMemory);
        }
        let base = NonNull::new(ptr.cast::<AtomicU32>()).ok_or(SemError::NoMemory)?;
        Ok(Mapping {
            base,
            words: len / 4,
            writable: AtomicBool::new(writable),
            tried_gen: AtomicU64::new(u64::MAX),
            layout: Layout::new(1),
            fd: AtomicI32::new(fd.into_raw_fd()),
            file,
            lockers_here: AtomicU32::new(0),
            claiming: ClaimLock(AtomicI32::new(0)),
            counters: Counters::default(),
            watch: SleepWatch::new(),
            guard: None,
        })
    }

    /// Word `i`. Every index the module computes comes from the validated
    /// layout or from a field checked against it, so this only guards
    /// against a bug here, not against a hostile file.
    #[inline]
    pub(super) fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.words, "set file word {i} out of {}", self.words);
        // SAFETY: in bounds of a live mapping, 4-aligned (page-aligned base).
        unsafe { &*self.base.as_ptr().add(i) }
    }

    /// Words `range`, as a slice (same bounds check as [`word`](Self::word)).
    pub(super) fn words(&self, range: std::ops::Range<usize>) -> &[AtomicU32] {
        assert!(
            range.start <= range.end && range.end <= self.words,
            "set file words {range:?} out of {}",
            self.words
        );
        // SAFETY: in bounds of a live mapping, 4-aligned (page-aligned base).
        unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(range.start), range.end - range.start)
        }
    }

    #[inline]
    pub(super) fn load(&self, i: usize) -> u32 {
        self.word(i).load(Ordering::Acquire)
    }

    /// Whether the file was truncated under the mapping, which now holds
    /// private zero pages (`sigbus.rs`): every call fails with `EINVAL`.
    #[inline]
    pub(super) fn poisoned(&self) -> bool {
        sigbus::poisoned(self.guard)
    }

    #[inline]
    pub(super) fn writable(&self) -> bool {
        self.writable.load(Ordering::Acquire)
    }

    /// Makes a read-only mapping read-write if set `id`'s file (this
    /// mapping's) now opens for writing, which an `IPC_SET` since the
    /// last try may allow; whether the mapping is writable.
    ///
    /// The file is mapped again read-write over the same addresses
    /// (`MAP_FIXED`): the pages are the file's either way, so a thread
    /// reading the set meanwhile sees the same words, and every pointer
    /// into the mapping stays good. The new descriptor then takes the old
    /// one's number (`dup3`), so the registry's one descriptor per file
    /// stays one. Closing the read-only descriptor would drop this
    /// process's POSIX locks on the file, but a read-only mapping never
    /// took one: only a writable one claims a process slot (`procs.rs`).
    pub(super) fn reopen_writable(&self, id: i32) -> bool {
        if self.writable() {
            return true;
        }
        // A poisoned mapping's pages are private zeros now (`sigbus.rs`);
        // mapping the file back over them would undo the fence, and a later
        // truncation would find the range already marked, and fault for
        // ever. Its calls fail with EINVAL anyway.
        if self.poisoned() {
            return false;
        }
        let gen = u64::from(self.load(header::PERM_GEN));
        if self.tried_gen.load(Ordering::Relaxed) == gen {
            return false;
        }
        // One thread at a time; the claim waits for this, as it must (a
        // claim on a read-only mapping would fail).
        let _one = self.claiming.lock();
        if self.writable() {
            return true;
        }
        self.tried_gen.store(gen, Ordering::Relaxed);
        let Some(fd) = super::dir::open_writable(&super::dir::sem_dir(), id) else {
            return false;
        };
        // The same file (not one a later set put under the same name), and
        // as long as the mapping.
        match identity(fd.as_raw_fd()) {
            Ok((dev, ino, len)) if (dev, ino) == self.file && len >= self.words * 4 => {}
            _ => return false,
        }
        // SAFETY: replaces exactly this mapping's pages with a shared
        // read-write mapping of the same file at the same offsets; nothing
        // else lives at those addresses.
        let ptr = unsafe {
            libc::mmap(
                self.base.as_ptr().cast(),
                self.words * 4,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            // Out of memory for the kernel's bookkeeping, the range may be
            // left unmapped: put the read-only mapping back where it was
            // (NOREPLACE leaves an old mapping that is still there alone).
            // SAFETY: maps only where nothing is mapped, over this
            // mapping's own range.
            let back = unsafe {
                libc::mmap(
                    self.base.as_ptr().cast(),
                    self.words * 4,
                    libc::PROT_READ,
                    libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
                    fd.as_raw_fd(),
                    0,
                )
            };
            // A kernel before 4.17 takes NOREPLACE for a hint and may map
            // elsewhere: that mapping is of no use, and would leak.
            if back != libc::MAP_FAILED && back != self.base.as_ptr().cast() {
                // SAFETY: the mapping just made, which nothing refers to.
                unsafe { libc::munmap(back, self.words * 4) };
            }
            return false;
        }
        if self.fd_names_the_file() {
            // SAFETY: both descriptors are ours; `self.fd`'s number now
            // names the read-write file description, close-on-exec as
            // before.
            if unsafe { libc::dup3(fd.as_raw_fd(), self.fd(), libc::O_CLOEXEC) } < 0 {
                // Still read-write through the mapping; the descriptor,
                // used for byte-range locks that need write access, is not:
                // stay read-only for the calls, which is what the process
                // had.
                return false;
            }
            drop(fd);
        } else {
            // The program closed ours (`reopen_if_closed`): this one takes
            // its place, and the old number is left to the program.
            self.fd.store(fd.into_raw_fd(), Ordering::Relaxed);
        }
        self.writable.store(true, Ordering::Release);
        true
    }

    pub(super) fn nsems(&self) -> usize {
        self.layout.nsems
    }

    /// The set file's descriptor: a number that names the file unless the
    /// program closed it since it was last checked (`reopen_if_closed`).
    pub(super) fn fd(&self) -> RawFd {
        self.fd.load(Ordering::Relaxed)
    }

    /// The set file's device and inode.
    pub(super) fn file(&self) -> (u64, u64) {
        self.file
    }

    /// Whether the descriptor still names the set's file.
    fn fd_names_the_file(&self) -> bool {
        matches!(identity(self.fd()), Ok((dev, ino, _)) if (dev, ino) == self.file)
    }

    /// Makes sure the descriptor still names set `id`'s file, before this
    /// process claims its slot, whose liveness lock lives on it, and before
    /// a read-only handle asks about other processes' locks. A program
    /// may have closed it: a fork child closing every descriptor it
    /// inherited, as some daemons do. The file is then opened again under a
    /// new number, and the old number, which may name a file of the
    /// program's by now, is forgotten, not closed. (A descriptor closed
    /// after the claim has released the process's liveness lock already, and
    /// the other processes take it for dead: nothing here can undo that.)
    /// `EIDRM` when the file is gone (or another file has its name);
    /// the caller holds [`claiming`], as every writer of the number does.
    ///
    /// [`claiming`]: Self::claiming
    pub(super) fn reopen_if_closed(&self, id: i32) -> Result<(), SemError> {
        if self.fd_names_the_file() {
            return Ok(());
        }
        let flags = if self.writable() {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        let path = super::dir::cstr(&super::dir::set_path(&super::dir::sem_dir(), id))?;
        let fd = super::dir::open_descriptor(&path, flags | libc::O_NOFOLLOW, 0).map_err(|e| {
            if e == libc::ENOENT {
                SemError::Removed
            } else {
                super::dir::os_error(e)
            }
        })?;
        match identity(fd.as_raw_fd()) {
            Ok((dev, ino, _)) if (dev, ino) == self.file => {}
            _ => return Err(SemError::Removed),
        }
        self.fd.store(fd.into_raw_fd(), Ordering::Relaxed);
        Ok(())
    }
}

/// `(device, inode, size)` of the regular file descriptor `fd` names.
fn identity(fd: RawFd) -> Result<(u64, u64, usize), SemError> {
    // SAFETY: plain old data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(SemError::Invalid);
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(SemError::Invalid);
    }
    Ok((st.st_dev, st.st_ino, st.st_size as usize))
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(slot) = self.guard {
            sigbus::unregister(slot);
        }
        // SAFETY: unmapping exactly what `new` mapped; no reference into it
        // outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.words * 4) };
        // A number the program closed may name a file of its own now.
        if self.fd_names_the_file() {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(self.fd()) };
        }
    }
}
