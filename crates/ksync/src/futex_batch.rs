//! Waking many futex words with one system call.
//!
//! A poster that completes many parked sleepers at once (a System V `semop`
//! that satisfies 64 waiters, a `SETALL`) owes each of them a futex wake. One
//! `FUTEX_WAKE` system call per sleeper costs the poster a kernel entry each,
//! and the remote wake-ups trickle out one system call apart. The kernel's own
//! `semtimedop` collects its sleepers and wakes them all inside one call.
//!
//! [`wake_all`] does the same from user space with io_uring's
//! `IORING_OP_FUTEX_WAKE` (Linux 6.7): one submission queue entry per word,
//! all submitted with a single `io_uring_enter` that also waits for every
//! completion, so nothing is left in flight when it returns. A futex wake reads
//! no user memory (the address is only a key: see [`wake_ptr`]), so the words
//! may belong to frames that are already gone.
//!
//! Each thread has its own small ring, created on its first batch. Where
//! io_uring or the opcode is missing (old kernel, `io_uring_disabled`, a
//! seccomp filter, a kernel without `CONFIG_FUTEX` in io_uring) the first
//! attempt finds out and the whole process falls back to one `FUTEX_WAKE` per
//! word, as does a thread whose ring broke. `KSYNC_NO_IO_URING=1` in the
//! environment (read once, at the first batch) forces the fallback, so both
//! paths can be compared.
//!
//! Under `--cfg loom`, and where there is no io_uring, it is the plain loop.
//!
//! [`wake_ptr`]: crate::futex::wake_ptr

use crate::sync::AtomicU32;

/// Wakes one sleeper on each of `words`, with as few system calls as the
/// kernel allows.
///
/// # Safety
///
/// As for [`crate::futex::wake_ptr`]: each word must have been the address of
/// an `AtomicU32` that sleepers wait on; it need not be live any more.
pub(crate) unsafe fn wake_all(words: &[*const AtomicU32]) {
    #[cfg(all(not(loom), target_os = "linux"))]
    if words.len() >= 2 {
        // SAFETY: passed on from our caller.
        unsafe { uring::wake(words) };
        return;
    }
    // SAFETY: passed on from our caller.
    unsafe { wake_loop(words) }
}

/// One `FUTEX_WAKE` (count 1) per word: the fallback.
///
/// # Safety
///
/// As for [`wake_all`].
unsafe fn wake_loop(words: &[*const AtomicU32]) {
    for &word in words {
        // SAFETY: per our caller's contract `word` is a futex word's address,
        // which `wake_ptr` only uses as a key.
        unsafe { crate::futex::wake_ptr(word, 1) };
    }
}

/// Whether the environment variable's value forces the fallback: any value
/// but empty or `0`.
#[cfg_attr(any(loom, not(target_os = "linux")), allow(dead_code))]
fn forced_off(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// The io_uring path. The ABI below follows the kernel's
/// `include/uapi/linux/io_uring.h` and `io_uring/futex.c`.
#[cfg(all(not(loom), target_os = "linux"))]
mod uring {
    use core::cell::RefCell;
    use core::mem::{offset_of, size_of};
    use core::ptr;
    use std::sync::Once;

    use libc::{c_int, c_long, c_uint, c_void};

    use crate::sync::{AtomicU32, AtomicU8, Ordering};

    /// The environment variable that forces the fallback.
    pub(super) const ENV_VAR: &str = "KSYNC_NO_IO_URING";

    /// Entries of each thread's ring, and the largest batch one
    /// `io_uring_enter` carries (a pending set is one `u128` bit per entry).
    pub(super) const RING_ENTRIES: u32 = 128;

    const IORING_OP_FUTEX_WAKE: u8 = 52;
    const IORING_SETUP_SUBMIT_ALL: u32 = 1 << 7;
    const IORING_SETUP_SINGLE_ISSUER: u32 = 1 << 12;
    const IORING_FEAT_SINGLE_MMAP: u32 = 1 << 0;
    const IORING_ENTER_GETEVENTS: c_uint = 1 << 0;
    const IORING_OFF_SQ_RING: libc::off_t = 0;
    const IORING_OFF_SQES: libc::off_t = 0x1000_0000;
    const IORING_REGISTER_PROBE: c_uint = 8;
    const IO_URING_OP_SUPPORTED: u16 = 1 << 0;
    /// `FUTEX2_SIZE_U32 | FUTEX2_PRIVATE` (`FUTEX2_PRIVATE` is
    /// `FUTEX_PRIVATE_FLAG`): the same key as the process-private
    /// `FUTEX_WAIT` sleepers use.
    const FUTEX2_FLAGS: i32 = 0x02 | libc::FUTEX_PRIVATE_FLAG;
    const FUTEX_BITSET_MATCH_ANY: u64 = 0xffff_ffff;

    /// `struct io_sqring_offsets`.
    #[repr(C)]
    #[derive(Default)]
    struct SqOffsets {
        head: u32,
        tail: u32,
        ring_mask: u32,
        ring_entries: u32,
        flags: u32,
        dropped: u32,
        array: u32,
        resv1: u32,
        user_addr: u64,
    }

    /// `struct io_cqring_offsets`.
    #[repr(C)]
    #[derive(Default)]
    struct CqOffsets {
        head: u32,
        tail: u32,
        ring_mask: u32,
        ring_entries: u32,
        overflow: u32,
        cqes: u32,
        flags: u32,
        resv1: u32,
        user_addr: u64,
    }

    /// `struct io_uring_params`; the kernel rejects non-zero `resv`.
    #[repr(C)]
    #[derive(Default)]
    struct Params {
        sq_entries: u32,
        cq_entries: u32,
        flags: u32,
        sq_thread_cpu: u32,
        sq_thread_idle: u32,
        features: u32,
        wq_fd: u32,
        resv: [u32; 3],
        sq_off: SqOffsets,
        cq_off: CqOffsets,
    }

    /// `struct io_uring_sqe` (64 bytes), with the unions named as
    /// `IORING_OP_FUTEX_WAKE` uses them (`io_futex_prep`): `fd` holds the
    /// futex2 flags, `addr` the futex, `addr2` (`off`) the number to wake,
    /// `addr3` the bitset; `len`, `op_flags` (`futex_flags`), `buf_index` and
    /// `file_index` must be 0.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Sqe {
        opcode: u8,
        flags: u8,
        ioprio: u16,
        fd: i32,
        addr2: u64,
        addr: u64,
        len: u32,
        op_flags: u32,
        user_data: u64,
        buf_index: u16,
        personality: u16,
        file_index: u32,
        addr3: u64,
        pad: u64,
    }

    /// `struct io_uring_cqe` (no `IORING_SETUP_CQE32`).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Cqe {
        user_data: u64,
        res: i32,
        flags: u32,
    }

    /// `struct io_uring_probe_op`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct ProbeOp {
        op: u8,
        resv: u8,
        flags: u16,
        resv2: u32,
    }

    const PROBE_OPS: usize = 64;

    /// `struct io_uring_probe` with room for opcodes 0..64; must be passed
    /// zeroed.
    #[repr(C)]
    struct Probe {
        last_op: u8,
        ops_len: u8,
        resv: u16,
        resv2: [u32; 3],
        ops: [ProbeOp; PROBE_OPS],
    }

    const _: () = {
        assert!(size_of::<Params>() == 120);
        assert!(offset_of!(Params, sq_off) == 40);
        assert!(offset_of!(Params, cq_off) == 80);
        assert!(size_of::<Sqe>() == 64);
        assert!(offset_of!(Sqe, fd) == 4);
        assert!(offset_of!(Sqe, addr2) == 8);
        assert!(offset_of!(Sqe, addr) == 16);
        assert!(offset_of!(Sqe, len) == 24);
        assert!(offset_of!(Sqe, op_flags) == 28);
        assert!(offset_of!(Sqe, user_data) == 32);
        assert!(offset_of!(Sqe, buf_index) == 40);
        assert!(offset_of!(Sqe, file_index) == 44);
        assert!(offset_of!(Sqe, addr3) == 48);
        assert!(size_of::<Cqe>() == 16);
        assert!(size_of::<Probe>() == 16 + 8 * PROBE_OPS);
        assert!(RING_ENTRIES as usize <= u128::BITS as usize);
        assert!((IORING_OP_FUTEX_WAKE as usize) < PROBE_OPS);
    };

    impl Sqe {
        fn futex_wake(word: *const AtomicU32, index: usize) -> Self {
            Sqe {
                opcode: IORING_OP_FUTEX_WAKE,
                flags: 0,
                ioprio: 0,
                fd: FUTEX2_FLAGS,
                addr2: 1,
                addr: word as usize as u64,
                len: 0,
                op_flags: 0,
                user_data: index as u64,
                buf_index: 0,
                personality: 0,
                file_index: 0,
                addr3: FUTEX_BITSET_MATCH_ANY,
                pad: 0,
            }
        }
    }

    /// Nothing known yet about this process's io_uring.
    const UNKNOWN: u8 = 0;
    /// A ring was set up and the kernel supports `IORING_OP_FUTEX_WAKE`.
    const USABLE: u8 = 1;
    /// No io_uring futex wakes in this process: unsupported, forbidden, or
    /// turned off by [`ENV_VAR`].
    const UNUSABLE: u8 = 2;

    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// The process-wide state; consults the environment while unknown.
    fn state() -> u8 {
        let state = STATE.load(Ordering::Relaxed);
        if state != UNKNOWN {
            return state;
        }
        if super::forced_off(std::env::var_os(ENV_VAR).as_deref()) {
            STATE.store(UNUSABLE, Ordering::Relaxed);
            return UNUSABLE;
        }
        UNKNOWN
    }

    /// Whether io_uring futex wakes work here: creates the calling thread's
    /// ring if needed (for tests).
    #[cfg(test)]
    pub(super) fn supported() -> bool {
        // Waking no word with the ring set up tells us what the kernel said.
        let _ = RING.try_with(|slot| slot.try_borrow_mut().map(|mut s| s.ring().is_some()));
        state() == USABLE
    }

    /// Bumped in a fork child: a ring inherited across `fork` belongs to the
    /// parent (its mappings are `MADV_DONTFORK`) and is abandoned unused.
    static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

    extern "C" fn after_fork_in_child() {
        FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    }

    fn watch_forks() -> bool {
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

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// Why a ring could not be used.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Failure {
        /// io_uring or the opcode is missing or forbidden: give up process-wide.
        Unsupported,
        /// This ring (or its creation) failed otherwise: give up on this thread.
        Broken,
    }

    /// One thread's ring. Only its creating thread touches it.
    struct Ring {
        fd: c_int,
        /// The single mapping of the SQ and CQ rings (`IORING_FEAT_SINGLE_MMAP`).
        rings: *mut c_void,
        rings_len: usize,
        sqes: *mut Sqe,
        sqes_len: usize,
        sq_head: *const AtomicU32,
        sq_tail: *const AtomicU32,
        sq_mask: u32,
        /// How many words one submission carries: `min(sq_entries, RING_ENTRIES)`.
        batch: u32,
        cq_head: *const AtomicU32,
        cq_tail: *const AtomicU32,
        cq_mask: u32,
        cqes: *const Cqe,
        fork_generation: u32,
    }

    /// Maps `len` bytes of the ring `fd` at `offset`.
    fn map(fd: c_int, len: usize, offset: libc::off_t) -> Option<*mut c_void> {
        // SAFETY: a fresh shared mapping of the ring's own memory at an
        // address of the kernel's choosing; it aliases nothing of ours.
        let ptr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // A fork child must not share (and corrupt) the parent's rings. If
        // the kernel refuses, the fork generation still keeps children off.
        // SAFETY: advice on the mapping we just made.
        unsafe { libc::madvise(ptr, len, libc::MADV_DONTFORK) };
        Some(ptr)
    }

    impl Ring {
        /// Sets up a ring of `entries` and, while the process state is
        /// unknown, asks the kernel whether it supports futex wakes.
        fn new(entries: u32) -> Result<Ring, Failure> {
            if !watch_forks() {
                return Err(Failure::Broken);
            }
            let fork_generation = FORK_GENERATION.load(Ordering::Relaxed);
            let mut params = Params {
                // SUBMIT_ALL: a bad entry must not leave the rest of the batch
                // unsubmitted in the ring. SINGLE_ISSUER: only this thread
                // submits; also makes a stray submitter fail with EEXIST.
                flags: IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER,
                ..Params::default()
            };
            // SAFETY: `params` is a zeroed io_uring_params the kernel reads and
            // fills in during the call.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_setup,
                    entries as c_long,
                    &mut params as *mut Params,
                )
            };
            if rc < 0 {
                return Err(match errno() {
                    // Not built in (or gVisor and friends), forbidden by the
                    // io_uring_disabled sysctl or a seccomp filter, or an old
                    // kernel that does not know our setup flags (FUTEX_WAKE
                    // needs 6.7, the flags 6.0).
                    libc::ENOSYS | libc::EPERM | libc::EACCES | libc::EINVAL => {
                        Failure::Unsupported
                    }
                    // EMFILE, ENFILE, ENOMEM: this thread only.
                    _ => Failure::Broken,
                });
            }
            let fd = rc as c_int;
            // Every kernel with IORING_OP_FUTEX_WAKE maps both rings at once.
            if params.features & IORING_FEAT_SINGLE_MMAP == 0 {
                // SAFETY: our own fresh descriptor.
                unsafe { libc::close(fd) };
                return Err(Failure::Unsupported);
            }
            let sq_len = params.sq_off.array as usize + params.sq_entries as usize * 4;
            let cq_len =
                params.cq_off.cqes as usize + params.cq_entries as usize * size_of::<Cqe>();
            let rings_len = sq_len.max(cq_len);
            let sqes_len = params.sq_entries as usize * size_of::<Sqe>();
            let Some(rings) = map(fd, rings_len, IORING_OFF_SQ_RING) else {
                // SAFETY: our own fresh descriptor.
                unsafe { libc::close(fd) };
                return Err(Failure::Broken);
            };
            let Some(sqes) = map(fd, sqes_len, IORING_OFF_SQES) else {
                // SAFETY: our own fresh mapping and descriptor.
                unsafe {
                    libc::munmap(rings, rings_len);
                    libc::close(fd);
                }
                return Err(Failure::Broken);
            };
            let at = |offset: u32| {
                // SAFETY: the kernel's offsets lie within the rings mapping.
                unsafe { rings.cast::<u8>().add(offset as usize) }
            };
            // SAFETY: the mask fields lie within the mapping, were written by
            // the kernel at setup and never change.
            let (sq_mask, cq_mask) = unsafe {
                (
                    at(params.sq_off.ring_mask).cast::<u32>().read(),
                    at(params.cq_off.ring_mask).cast::<u32>().read(),
                )
            };
            let ring = Ring {
                fd,
                rings,
                rings_len,
                sqes: sqes.cast(),
                sqes_len,
                sq_head: at(params.sq_off.head).cast(),
                sq_tail: at(params.sq_off.tail).cast(),
                sq_mask,
                batch: params.sq_entries.min(RING_ENTRIES),
                cq_head: at(params.cq_off.head).cast(),
                cq_tail: at(params.cq_off.tail).cast(),
                cq_mask,
                cqes: at(params.cq_off.cqes).cast(),
                fork_generation,
            };
            // The SQ index array: slot i always names SQE i.
            let array = at(params.sq_off.array).cast::<u32>();
            for i in 0..params.sq_entries {
                // SAFETY: the array has sq_entries slots; the kernel reads
                // them only during our io_uring_enter calls.
                unsafe { array.add(i as usize).write(i) };
            }
            if STATE.load(Ordering::Relaxed) == UNKNOWN {
                // `ring` is dropped (unmapped, closed) on the error path.
                ring.probe()?;
                STATE.store(USABLE, Ordering::Relaxed);
            }
            Ok(ring)
        }

        /// Asks the kernel (IORING_REGISTER_PROBE, Linux 5.6) whether it
        /// knows IORING_OP_FUTEX_WAKE. A kernel built without futexes knows
        /// the number but reports it unsupported.
        fn probe(&self) -> Result<(), Failure> {
            let mut probe = Probe {
                last_op: 0,
                ops_len: 0,
                resv: 0,
                resv2: [0; 3],
                ops: [ProbeOp::default(); PROBE_OPS],
            };
            // SAFETY: `probe` is zeroed (as the kernel requires) with room for
            // PROBE_OPS entries, which is what we say.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.fd as c_long,
                    IORING_REGISTER_PROBE as c_long,
                    &mut probe as *mut Probe,
                    PROBE_OPS as c_long,
                )
            };
            let op = usize::from(IORING_OP_FUTEX_WAKE);
            if rc < 0
                || usize::from(probe.ops_len) <= op
                || probe.ops[op].flags & IO_URING_OP_SUPPORTED == 0
            {
                return Err(Failure::Unsupported);
            }
            Ok(())
        }

        /// Whether this ring was inherited across `fork` from the parent.
        fn inherited(&self) -> bool {
            self.fork_generation != FORK_GENERATION.load(Ordering::Relaxed)
        }

        /// Wakes `words` (at most `self.batch`) with one submission and waits
        /// for all their completions. Clears bit i of `pending` for every
        /// word i the kernel woke (or found nobody waiting on); the caller
        /// wakes the rest by hand. On an error the ring must be dropped.
        fn wake_batch(
            &mut self,
            words: &[*const AtomicU32],
            pending: &mut u128,
        ) -> Result<(), Failure> {
            let n = words.len() as u32;
            debug_assert!(n <= self.batch);
            // SAFETY: the ring fields point into our live mapping, are
            // 4-byte aligned, and are shared with the kernel only through
            // atomic accesses, as the io_uring ABI prescribes.
            let (sq_head, sq_tail) = unsafe { (&*self.sq_head, &*self.sq_tail) };
            // We are the only producer: our last store is the tail.
            let tail = sq_tail.load(Ordering::Relaxed);
            let head = sq_head.load(Ordering::Acquire);
            if tail.wrapping_sub(head).wrapping_add(n) > self.sq_mask + 1 {
                // Entries left over from an earlier call: never expected.
                return Err(Failure::Broken);
            }
            for (i, &word) in words.iter().enumerate() {
                let index = tail.wrapping_add(i as u32) & self.sq_mask;
                // SAFETY: `index` is within the SQE array, and the slot is
                // free (between the kernel's head and our tail there are no
                // unconsumed entries, checked above).
                unsafe {
                    self.sqes
                        .add(index as usize)
                        .write(Sqe::futex_wake(word, i))
                };
            }
            // Publish the entries before the kernel reads the tail.
            sq_tail.store(tail.wrapping_add(n), Ordering::Release);

            const NO_SIGSET_SIZE: c_long = 0;
            let mut unsubmitted = n;
            let mut reaped = 0;
            let mut unsupported = false;
            // A futex wake completes inline during submission, so one enter
            // normally does it all; a few retries cover EINTR and the like.
            for _ in 0..8 {
                // SAFETY: io_uring_enter on our own ring; no signal mask.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_io_uring_enter,
                        self.fd as c_long,
                        unsubmitted as c_long,
                        (n - reaped) as c_long,
                        IORING_ENTER_GETEVENTS as c_long,
                        ptr::null::<c_void>(),
                        NO_SIGSET_SIZE,
                    )
                };
                if rc >= 0 {
                    unsubmitted -= (rc as u32).min(unsubmitted);
                } else if !matches!(errno(), libc::EINTR | libc::EAGAIN | libc::EBUSY) {
                    // EEXIST (not our ring any more), EBADF, EFAULT, ...
                    break;
                }
                reaped += self.reap(n, pending, &mut unsupported);
                if unsubmitted == 0 && reaped >= n {
                    break;
                }
            }
            if unsupported {
                Err(Failure::Unsupported)
            } else if unsubmitted != 0 || reaped < n {
                Err(Failure::Broken)
            } else {
                Ok(())
            }
        }

        /// Consumes every completion in the CQ ring; returns how many.
        fn reap(&mut self, n: u32, pending: &mut u128, unsupported: &mut bool) -> u32 {
            // SAFETY: as in `wake_batch`.
            let (cq_head, cq_tail) = unsafe { (&*self.cq_head, &*self.cq_tail) };
            let head = cq_head.load(Ordering::Relaxed);
            let tail = cq_tail.load(Ordering::Acquire);
            let mut at = head;
            while at != tail {
                // SAFETY: entries between head and tail are published by the
                // kernel (the acquire load of the tail) and stay put until we
                // move the head past them.
                let cqe = unsafe { self.cqes.add((at & self.cq_mask) as usize).read() };
                if cqe.user_data < u64::from(n) {
                    if cqe.res >= 0 {
                        *pending &= !(1u128 << cqe.user_data);
                    } else if matches!(-cqe.res, libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS) {
                        // Opcode unknown or not built in (the probe should
                        // have said so), or our flags refused.
                        *unsupported = true;
                    }
                }
                at = at.wrapping_add(1);
            }
            cq_head.store(tail, Ordering::Release);
            tail.wrapping_sub(head)
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            if self.inherited() {
                // The mappings were not inherited (MADV_DONTFORK), and the
                // descriptor number may have been reused by the child: leave
                // both alone (the descriptor is close-on-exec).
                return;
            }
            // SAFETY: our own mappings and descriptor, used by no one else;
            // no request is in flight (every batch waited for its completions).
            unsafe {
                libc::munmap(self.sqes.cast(), self.sqes_len);
                libc::munmap(self.rings, self.rings_len);
                libc::close(self.fd);
            }
        }
    }

    /// A thread's ring, if it has (or can have) one.
    enum Slot {
        /// Not created yet.
        Empty,
        Ready(Ring),
        /// Creating or using the ring failed on this thread: use the loop.
        Failed,
    }

    impl Slot {
        /// The ring, created on first use; `None` means use the loop.
        fn ring(&mut self) -> Option<&mut Ring> {
            if let Slot::Ready(ring) = self {
                if ring.inherited() {
                    *self = Slot::Empty;
                }
            }
            if matches!(self, Slot::Empty) {
                if state() == UNUSABLE {
                    return None;
                }
                *self = match Ring::new(RING_ENTRIES) {
                    Ok(ring) => Slot::Ready(ring),
                    Err(failure) => {
                        if failure == Failure::Unsupported {
                            STATE.store(UNUSABLE, Ordering::Relaxed);
                        }
                        Slot::Failed
                    }
                };
            }
            match self {
                Slot::Ready(ring) if STATE.load(Ordering::Relaxed) != UNUSABLE => Some(ring),
                _ => None,
            }
        }

        /// Wakes all `words`, each through the ring where possible and by a
        /// plain FUTEX_WAKE otherwise. Returns how many the ring woke.
        ///
        /// # Safety
        ///
        /// As for [`super::wake_all`].
        unsafe fn wake(&mut self, words: &[*const AtomicU32]) -> usize {
            let mut by_ring = 0;
            let mut rest = words;
            while !rest.is_empty() {
                let Some(ring) = self.ring() else {
                    // SAFETY: passed on from our caller.
                    unsafe { super::wake_loop(rest) };
                    break;
                };
                let (batch, tail) = rest.split_at(rest.len().min(ring.batch as usize));
                rest = tail;
                let mut pending = u128::MAX >> (u128::BITS as usize - batch.len());
                let outcome = ring.wake_batch(batch, &mut pending);
                by_ring += batch.len() - pending.count_ones() as usize;
                match outcome {
                    Ok(()) => {}
                    Err(Failure::Unsupported) => {
                        STATE.store(UNUSABLE, Ordering::Relaxed);
                        *self = Slot::Empty;
                    }
                    Err(Failure::Broken) => *self = Slot::Failed,
                }
                for (i, &word) in batch.iter().enumerate() {
                    if pending & (1u128 << i) != 0 {
                        // SAFETY: passed on from our caller.
                        unsafe { crate::futex::wake_ptr(word, 1) };
                    }
                }
            }
            by_ring
        }
    }

    thread_local! {
        static RING: RefCell<Slot> = const { RefCell::new(Slot::Empty) };
    }

    /// [`super::wake_all`] for two words or more. Returns how many the ring
    /// woke (the rest took the loop).
    ///
    /// # Safety
    ///
    /// As for [`super::wake_all`].
    pub(super) unsafe fn wake(words: &[*const AtomicU32]) -> usize {
        if state() == UNUSABLE {
            // SAFETY: passed on from our caller.
            unsafe { super::wake_loop(words) };
            return 0;
        }
        let by_ring = RING.try_with(|slot| {
            slot.try_borrow_mut()
                // SAFETY: passed on from our caller.
                .map(|mut slot| unsafe { slot.wake(words) })
                .ok()
        });
        match by_ring {
            Ok(Some(by_ring)) => by_ring,
            // The thread is exiting (its ring is gone) or, impossibly, we
            // re-entered: the loop needs no state.
            _ => {
                // SAFETY: passed on from our caller.
                unsafe { super::wake_loop(words) };
                0
            }
        }
    }

    /// Runs `words` through a private ring of `entries` (tests chunking and
    /// the ring itself without the thread's ring or the process state).
    /// Returns how many the ring woke, or `None` if no ring could be made.
    #[cfg(test)]
    pub(super) unsafe fn wake_with_ring(entries: u32, words: &[*const AtomicU32]) -> Option<usize> {
        let ring = Ring::new(entries).ok()?;
        let mut slot = Slot::Ready(ring);
        // SAFETY: passed on from our caller.
        Some(unsafe { slot.wake(words) })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::futex::{self, Wake};
    use crate::sync::Ordering;
    use std::ffi::OsStr;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// How long a sleeper waits for its wake before the test calls it lost.
    const PATIENCE: Duration = Duration::from_secs(10);

    /// `n` threads, each parked on its own word. `wake` gets the words after
    /// they all went to sleep (and after their values changed); the test
    /// fails if any sleeper is still asleep at its deadline.
    fn park_and_wake(n: usize, wake: impl FnOnce(&[*const AtomicU32])) {
        let words: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let ready = Arc::new(AtomicUsize::new(0));
        let sleepers: Vec<_> = (0..n)
            .map(|i| {
                let words = Arc::clone(&words);
                let ready = Arc::clone(&ready);
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let word = &words[i];
                        let deadline = Instant::now() + PATIENCE;
                        ready.fetch_add(1, Ordering::Release);
                        // Only a wake-up ends the wait in time: a sleeper
                        // still asleep at its deadline was lost.
                        while word.load(Ordering::Acquire) == 0 {
                            if futex::wait(word, 0, Some(deadline)) == Wake::TimedOut {
                                return false;
                            }
                        }
                        true
                    })
                    .unwrap()
            })
            .collect();
        while ready.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Let the last ones get from `ready` into FUTEX_WAIT.
        std::thread::sleep(Duration::from_millis(100));
        for word in words.iter() {
            word.store(1, Ordering::Release);
        }
        let ptrs: Vec<*const AtomicU32> = words.iter().map(|w| w as *const AtomicU32).collect();
        wake(&ptrs);
        let woken = sleepers
            .into_iter()
            .map(|s| s.join().unwrap())
            .filter(|&woken| woken)
            .count();
        assert_eq!(woken, n, "sleepers never woken");
    }

    #[test]
    fn wake_all_wakes_every_sleeper() {
        // SAFETY: the words are live futex words.
        park_and_wake(40, |words| unsafe { wake_all(words) });
    }

    #[test]
    fn the_ring_does_the_waking_where_supported() {
        if !uring::supported() {
            eprintln!("io_uring futex wakes unavailable here: only the fallback was tested");
            return;
        }
        park_and_wake(40, |words| {
            // SAFETY: the words are live futex words.
            let by_ring = unsafe { uring::wake(words) };
            assert_eq!(by_ring, words.len());
        });
    }

    #[test]
    fn the_fallback_wakes_every_sleeper() {
        // What wake_all does under KSYNC_NO_IO_URING=1 or without io_uring.
        // SAFETY: the words are live futex words.
        park_and_wake(40, |words| unsafe { wake_loop(words) });
    }

    #[test]
    fn a_batch_larger_than_the_ring_is_woken_in_chunks() {
        let n = 2 * uring::RING_ENTRIES as usize + 3;
        park_and_wake(n, |words| {
            // SAFETY: the words are live futex words.
            let by_ring = unsafe { uring::wake(words) };
            assert!(by_ring == words.len() || !uring::supported());
        });
    }

    #[test]
    fn a_small_ring_takes_many_submissions() {
        park_and_wake(13, |words| {
            // SAFETY: the words are live futex words.
            match unsafe { uring::wake_with_ring(4, words) } {
                Some(by_ring) => assert_eq!(by_ring, words.len()),
                // SAFETY: as above.
                None => unsafe { wake_loop(words) },
            }
        });
    }

    #[test]
    fn waking_words_nobody_waits_on_is_no_error() {
        let words: Vec<AtomicU32> = (0..70).map(|_| AtomicU32::new(0)).collect();
        let ptrs: Vec<*const AtomicU32> = words.iter().map(|w| w as *const AtomicU32).collect();
        // SAFETY: live words (nobody sleeps on them).
        let by_ring = unsafe { uring::wake(&ptrs) };
        if uring::supported() {
            assert_eq!(by_ring, ptrs.len());
        }
        // Also through a ring of our own, which reports every completion.
        // SAFETY: as above.
        if let Some(by_ring) = unsafe { uring::wake_with_ring(8, &ptrs) } {
            assert_eq!(by_ring, ptrs.len());
        }
        // And the words that are gone by now: the address is only a key.
        drop(words);
        // SAFETY: the addresses were futex words; a wake never reads them.
        unsafe { wake_all(&ptrs) };
    }

    #[test]
    fn the_environment_variable_forces_the_fallback() {
        assert!(!forced_off(None));
        assert!(!forced_off(Some(OsStr::new(""))));
        assert!(!forced_off(Some(OsStr::new("0"))));
        assert!(forced_off(Some(OsStr::new("1"))));
        assert!(forced_off(Some(OsStr::new("yes"))));
        assert_eq!(uring::ENV_VAR, "KSYNC_NO_IO_URING");
    }
}
