//! One thread's io_uring: set up, mapped, probed for `IORING_OP_FUTEX_WAKE`,
//! and used to wake a batch of futex words with one `io_uring_enter` that
//! also waits for every completion.

use core::mem::size_of;
use core::ptr;

use libc::{c_int, c_long, c_void};

use super::abi::{
    Cqe, Params, Probe, ProbeOp, Sqe, IORING_ENTER_GETEVENTS, IORING_FEAT_SINGLE_MMAP,
    IORING_OFF_SQES, IORING_OFF_SQ_RING, IORING_OP_FUTEX_WAKE, IORING_REGISTER_PROBE,
    IORING_SETUP_SINGLE_ISSUER, IORING_SETUP_SUBMIT_ALL, IO_URING_OP_SUPPORTED, PROBE_OPS,
};
use super::process::{RingRoom, STATE, UNKNOWN, USABLE};
use crate::futex_batch::Scope;
use crate::sync::{AtomicU32, Ordering};

/// Entries of each thread's ring, and the largest batch one
/// `io_uring_enter` carries (a pending set is one `u128` bit per entry).
pub(in crate::futex_batch) const RING_ENTRIES: u32 = 128;

const _: () = assert!(RING_ENTRIES as usize <= u128::BITS as usize);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Why a ring could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// io_uring or the opcode is missing or forbidden: give up process-wide.
    Unsupported,
    /// This ring (or its creation) failed otherwise: give up on this thread.
    Broken,
}

/// One thread's ring. Only its creating thread touches it.
pub(super) struct Ring {
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
    pub(super) batch: u32,
    cq_head: *const AtomicU32,
    cq_tail: *const AtomicU32,
    cq_mask: u32,
    cqes: *const Cqe,
    /// Counted among the process's rings while it lives; knows which
    /// process made the ring.
    room: RingRoom,
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
    // A fork child must not share (and corrupt) the parent's rings: the
    // process generation (`crate::this_process`) keeps every child off
    // them, and this keeps the memory out of a child that could not tell
    // (`_Fork` or a raw `clone` on a kernel older than 4.14), which would
    // otherwise advance the parent's tail.
    // SAFETY: advice on the mapping we just made, then its unmapping.
    unsafe {
        if libc::madvise(ptr, len, libc::MADV_DONTFORK) != 0 {
            libc::munmap(ptr, len);
            return None;
        }
    }
    Some(ptr)
}

impl Ring {
    /// Sets up a ring of `entries` and, while the process state is
    /// unknown, asks the kernel whether it supports futex wakes.
    pub(super) fn new(entries: u32) -> Result<Ring, Failure> {
        // Released on every error path below (its drop).
        let room = RingRoom::take().ok_or(Failure::Broken)?;
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
                libc::ENOSYS | libc::EPERM | libc::EACCES | libc::EINVAL => Failure::Unsupported,
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
        let cq_len = params.cq_off.cqes as usize + params.cq_entries as usize * size_of::<Cqe>();
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
            room,
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
            // Unless another thread found it unusable meanwhile.
            let _ = STATE.compare_exchange(UNKNOWN, USABLE, Ordering::Relaxed, Ordering::Relaxed);
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
    pub(super) fn inherited(&self) -> bool {
        self.room.inherited()
    }

    /// Wakes `words` (at most `self.batch`) with one submission and waits
    /// for all their completions. Clears bit i of `pending` for every
    /// word i the kernel woke (or found nobody waiting on); the caller
    /// wakes the rest by hand. On an error the ring must be dropped.
    pub(super) fn wake_batch(
        &mut self,
        words: &[*const AtomicU32],
        pending: &mut u128,
        scope: Scope,
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
                    .write(Sqe::futex_wake(word, i, scope))
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
