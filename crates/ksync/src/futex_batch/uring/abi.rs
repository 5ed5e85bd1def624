//! The part of the kernel's io_uring ABI that waking futexes needs, after
//! `include/uapi/linux/io_uring.h` and `io_uring/futex.c`: the setup
//! parameters and ring offsets, the submission and completion entries, the
//! opcode probe, and the constants they use. Every layout is checked at
//! compile time against the kernel's sizes and offsets.

use core::mem::{offset_of, size_of};

use libc::c_uint;

use crate::futex_batch::Scope;
use crate::sync::AtomicU32;

pub(super) const IORING_OP_FUTEX_WAKE: u8 = 52;
pub(super) const IORING_SETUP_SUBMIT_ALL: u32 = 1 << 7;
pub(super) const IORING_SETUP_SINGLE_ISSUER: u32 = 1 << 12;
pub(super) const IORING_FEAT_SINGLE_MMAP: u32 = 1 << 0;
pub(super) const IORING_ENTER_GETEVENTS: c_uint = 1 << 0;
pub(super) const IORING_OFF_SQ_RING: libc::off_t = 0;
pub(super) const IORING_OFF_SQES: libc::off_t = 0x1000_0000;
pub(super) const IORING_REGISTER_PROBE: c_uint = 8;
pub(super) const IO_URING_OP_SUPPORTED: u16 = 1 << 0;
/// `FUTEX2_SIZE_U32`, plus `FUTEX2_PRIVATE` (which is `FUTEX_PRIVATE_FLAG`)
/// for private words: the same key as the `FUTEX_WAIT` sleepers use.
pub(super) const FUTEX2_SIZE_U32: i32 = 0x02;
pub(super) const FUTEX_BITSET_MATCH_ANY: u64 = 0xffff_ffff;

/// `struct io_sqring_offsets`.
#[repr(C)]
#[derive(Default)]
pub(super) struct SqOffsets {
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) ring_mask: u32,
    pub(super) ring_entries: u32,
    pub(super) flags: u32,
    pub(super) dropped: u32,
    pub(super) array: u32,
    pub(super) resv1: u32,
    pub(super) user_addr: u64,
}

/// `struct io_cqring_offsets`.
#[repr(C)]
#[derive(Default)]
pub(super) struct CqOffsets {
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) ring_mask: u32,
    pub(super) ring_entries: u32,
    pub(super) overflow: u32,
    pub(super) cqes: u32,
    pub(super) flags: u32,
    pub(super) resv1: u32,
    pub(super) user_addr: u64,
}

/// `struct io_uring_params`; the kernel rejects non-zero `resv`.
#[repr(C)]
#[derive(Default)]
pub(super) struct Params {
    pub(super) sq_entries: u32,
    pub(super) cq_entries: u32,
    pub(super) flags: u32,
    pub(super) sq_thread_cpu: u32,
    pub(super) sq_thread_idle: u32,
    pub(super) features: u32,
    pub(super) wq_fd: u32,
    pub(super) resv: [u32; 3],
    pub(super) sq_off: SqOffsets,
    pub(super) cq_off: CqOffsets,
}

/// `struct io_uring_sqe` (64 bytes), with the unions named as
/// `IORING_OP_FUTEX_WAKE` uses them (`io_futex_prep`): `fd` holds the
/// futex2 flags, `addr` the futex, `addr2` (`off`) the number to wake,
/// `addr3` the bitset; `len`, `op_flags` (`futex_flags`), `buf_index` and
/// `file_index` must be 0.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Sqe {
    pub(super) opcode: u8,
    pub(super) flags: u8,
    pub(super) ioprio: u16,
    pub(super) fd: i32,
    pub(super) addr2: u64,
    pub(super) addr: u64,
    pub(super) len: u32,
    pub(super) op_flags: u32,
    pub(super) user_data: u64,
    pub(super) buf_index: u16,
    pub(super) personality: u16,
    pub(super) file_index: u32,
    pub(super) addr3: u64,
    pub(super) pad: u64,
}

/// `struct io_uring_cqe` (no `IORING_SETUP_CQE32`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Cqe {
    pub(super) user_data: u64,
    pub(super) res: i32,
    pub(super) flags: u32,
}

/// `struct io_uring_probe_op`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct ProbeOp {
    pub(super) op: u8,
    pub(super) resv: u8,
    pub(super) flags: u16,
    pub(super) resv2: u32,
}

pub(super) const PROBE_OPS: usize = 64;

/// `struct io_uring_probe` with room for opcodes 0..64; must be passed
/// zeroed.
#[repr(C)]
pub(super) struct Probe {
    pub(super) last_op: u8,
    pub(super) ops_len: u8,
    pub(super) resv: u16,
    pub(super) resv2: [u32; 3],
    pub(super) ops: [ProbeOp; PROBE_OPS],
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
    assert!((IORING_OP_FUTEX_WAKE as usize) < PROBE_OPS);
};

impl Sqe {
    /// A wake of one sleeper on `word`; `index` comes back in the completion.
    pub(super) fn futex_wake(word: *const AtomicU32, index: usize, scope: Scope) -> Self {
        let private = match scope {
            Scope::Private => libc::FUTEX_PRIVATE_FLAG,
            Scope::Shared => 0,
        };
        Sqe {
            opcode: IORING_OP_FUTEX_WAKE,
            flags: 0,
            ioprio: 0,
            fd: FUTEX2_SIZE_U32 | private,
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
