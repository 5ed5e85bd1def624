//! System V semaphore sets in user space, with the kernel's `semop` and
//! `semctl` semantics and the optimisations of Manfred Spraul's "ipc/sem.c:
//! Optimization for reducing spinlock contention" (LKML, April 2010) and
//! Kenneth W. Chen's "ipc semaphore optimization" (LKML, June 2003).
//!
//! A [`SemSet`] is an array of counters on which one call performs several
//! operations atomically: all of them or none, in array order. An operation
//! ([`SemBuf`]) adds to a semaphore (`op > 0`), takes from it, blocking while
//! that would make it negative (`op < 0`), or waits for it to be zero
//! (`op == 0`). `IPC_NOWAIT` turns a block into [`SemError::Again`];
//! `SEM_UNDO` records the change in a [`SemUndo`] context that reverses it
//! when dropped. Errors, limits and their order are the kernel's.
//!
//! ```
//! use ksync::sem::{SemBuf, SemSet};
//! use std::sync::Arc;
//!
//! let set = Arc::new(SemSet::new(1)?);
//! let waiter = {
//!     let set = Arc::clone(&set);
//!     std::thread::spawn(move || set.semop(&[SemBuf::new(0, -2, 0)]))
//! };
//! set.semop(&[SemBuf::new(0, 2, 0)])?; // completes the waiter's -2
//! waiter.join().unwrap()?;
//! assert_eq!(set.get_value(0)?, 0);
//! # Ok::<(), ksync::sem::SemError>(())
//! ```
//!
//! # How it is built
//!
//! * **Per-semaphore locks and a global mode** (`mode.rs`, `sem_lock.rs`):
//!   a call takes the locks of the semaphores it names, in ascending order,
//!   one bit of each semaphore's word; only a complex call that must sleep,
//!   and the control calls that need the whole set, switch it to global
//!   locking, which lasts exactly as long as something needs it (no
//!   hysteresis: a preempted global holder would stall every call).
//! * **The waker completes the sleeper** (Chen, 2003; `complete.rs`): a
//!   waker performs the sleeper's operation for it, under the lock, and
//!   publishes the result in the sleeper's status word with a release store. The sleeper returns it
//!   without retaking any lock: no retry, no rescan.
//! * **Wake-ups after the locks are dropped** (Spraul, 2010): futex wakes are
//!   collected under the lock and issued after it is released.
//! * **O(N) bulk wake-ups** (Spraul, 2010): per-semaphore wait lists, so an
//!   increment of 64 semaphores looks at their 64 sleepers only; a scan
//!   restarts only when a skipped sleeper could have become runnable.
//! * **Hot state on its own cache line** (Spraul, 2010): each semaphore (lock,
//!   value, flags in one word; its lists) has its own line; the mode flag is
//!   apart from the global lock.
//! * **Lock-free single operations**: a single operation on a semaphore
//!   nobody waits on is one compare-and-swap on a word that holds the value,
//!   the lock and the flags every locked path sets first (`word.rs`). A call
//!   on a few such semaphores locks all but the highest and does that one
//!   the same way, its linearization point. Those locks are marked quiet,
//!   which keeps every other writer off the word, so their release is a
//!   plain store: two atomic instructions for two semaphores
//!   (`SetShared::try_quiet`). A single operation that blocks queues under
//!   its semaphore's lock alone, without the general path's lock set
//!   (`SetShared::lock_blocked_single`).
//! * **Misses that overlap**: a post to many semaphores prefetches their
//!   words and their first sleepers' nodes before it walks them, a scan of a
//!   wait list asks for each node a few entries ahead, the nodes sit side by
//!   side in a per-thread pool rather than one per stack page
//!   (`node_pool.rs`) and carry a copy of calls of up to three operations,
//!   and the counters written without a lock sit apart from those written
//!   under it (`crate::prefetch`).
//! * **Bulk wake-ups in one system call** (`crate::futex_batch`): the one thing the kernel does
//!   cheaper than user space is waking many sleepers: it wakes 64 tasks
//!   inside one `semop`, while a futex-based set pays one `FUTEX_WAKE` per
//!   sleeper, and every local wake-up preempts the poster at the call's exit.
//!   ksync submits all of a call's wake-ups with one `io_uring_enter`
//!   (`IORING_OP_FUTEX_WAKE`, Linux 6.7), falling back to one `FUTEX_WAKE`
//!   each where io_uring is missing or `KSYNC_NO_IO_URING=1` is set. Each
//!   wake also finds its sleeper in the process's futex hash, which Linux
//!   6.16+ sizes for the CPUs (16 slots on 2), not for the sleepers; a
//!   sleeper's first sleep grows it (`crate::futex_batch::note_sleeping_thread`),
//!   which halved the waker's cost per sleeper at 4096 sleepers. What is left
//!   in sembench is one context switch per wake-up, which the kernel pays too
//!   (BENCHMARKS.md).
//! * **Wake-ups shared out among the woken** (`crate::futex_batch::Spread`):
//!   each remote wake-up still costs its waker an IPI, so on a machine with
//!   idle CPUs the poster of a large post is the bottleneck, as the kernel's
//!   is. With 4 or more CPUs, every sleeper a post completes (after the
//!   first) gets a handle to the post's list of owed wakes, and once awake
//!   claims and wakes a few before it returns, while the poster claims the
//!   rest; nobody waits for anybody, so a preempted helper delays only what
//!   it claimed. sembench `-t 250 -w 64` on 16 cores went from 0.73x-0.79x
//!   to 1.36x-1.54x the kernel. With 2 or 3 CPUs the wakes stay on their
//!   CPU instead (`futex_batch::SharingMode::Local`): a wake onto another
//!   CPU costs its waker an IPI, so the poster wakes one leader on each
//!   other CPU, and the leader, those it wakes and those they wake claim
//!   the others of their CPU from a board of that CPU's, each a wake onto
//!   its own CPU; every queued sleeper notes its CPU for this. On a 2-CPU
//!   guest, sembench `-t 250` went from 0.77x-0.81x to 1.38x-1.51x the
//!   kernel. A large post also leaves each CPU's board open to any sleeper
//!   returning on that CPU, so that a CPU still busy with an earlier post's
//!   sleepers helps too: a bulk wake-up of 4096 sleepers by nine `semop`
//!   calls went from 1.15x to 0.63x the kernel's call per sleeper. With 4
//!   or more CPUs, a CPU that holds 16 or more of a post's sleepers gets
//!   the post's board open the same way (on 16 cores, the same bulk
//!   wake-up with every sleeper on one CPU: 1.03x-1.18x to 0.51x-0.56x).
//! * **Sleepers that poll before they sleep** (`queue.rs`): a blocked caller
//!   polls for a budget each thread learns ([`set_sleeper_spin`]), and only
//!   then sleeps; a waker only makes a futex call for a sleeper that really
//!   went to sleep. When the wake-up comes while the sleeper still polls,
//!   neither side enters the kernel at all. A single decrement or wait for
//!   zero polls its semaphore's word before it queues, so a post that comes
//!   meanwhile is an uncontended compare-and-swap for both
//!   (`SetShared::poll_lock_free`); other calls, and one that finds a sleeper
//!   queued first, poll their status word once queued.
//! * **Locks that sleep** (`sem_lock.rs`, [`RawSemLock`]): threads usually
//!   outnumber cores, and a preempted spinlock holder would stall everyone,
//!   so a locker spins for about one context switch and then sleeps.
//!
//! [`SemCounters`] show the work: operation attempts, list entries visited,
//! wake-ups, how many of those needed a futex call, lock waits, the
//! sleepers' polls and futex waits, and the wakers' system calls. [`SemSet::lock_stats`]
//! shows the global lock itself (free, contended, wait), as Spraul's series
//! measured the kernel's array lock.
//!
//! # Modules
//!
//! | module | what |
//! |---|---|
//! | `set.rs` | [`SemSet`]: `semop` and `semctl`, the path of a call |
//! | `mode.rs` | which lock a call takes: none, its semaphores', or the global one; global mode |
//! | `sem_lock.rs` | a semaphore's lock, a bit of its word, and the ascending set of them a call takes |
//! | `word.rs` | a semaphore's word: the value, the lock, and the flags that keep lock-free operations off it |
//! | `perform.rs` | evaluating an operation array: all or nothing, in array order |
//! | `complete.rs` | the wait lists: queueing a sleeper, completing it in the waker, the rescan rule |
//! | `queue.rs` | a sleeper's node and status word: the complete / wake handshake |
//! | `state.rs` | the set's shared state and its cache-line layout |
//! | `undo.rs`, `undo_entry.rs` | `SEM_UNDO`: contexts and their per-set adjustments |
//! | `lock.rs` | [`RawSemLock`], the set's global lock |
//! | `counters.rs`, `stamp.rs`, `error.rs` | [`SemCounters`]; pids and times; [`SemError`] |
//! | `shared/` | [`SharedSemSet`]: process-shared sets in a file, opened by key; its own core, built for crash recovery |
//!
//! # Differences from the kernel
//!
//! * A removed set fails later calls with [`SemError::Removed`] (`EIDRM`);
//!   the kernel reports `EINVAL` because the id no longer exists.
//! * Timeouts are `Duration`s, so there is no invalid timespec (`EINVAL`).
//! * There are no permissions, keys or ids (`EACCES`, `EPERM`, `ENOENT`,
//!   `EEXIST`): a set is a value you share, and it lives in one process.
//!   [`SharedSemSet`] is the set that processes share, with keys, ids,
//!   permissions and per-process undo (module [`shared`]).
//! * `SEM_UNDO` needs an explicit [`SemUndo`] context (the kernel's is the
//!   process); [`SemSet::semop`] with `SEM_UNDO` fails with
//!   [`SemError::Invalid`].

mod complete;
mod counters;
mod error;
mod lock;
mod mode;
mod node_pool;
#[cfg_attr(loom, allow(dead_code))]
mod owed_wakes;
#[cfg_attr(loom, allow(dead_code))]
mod owner_lock;
mod perform;
mod queue;
mod sem_lock;
mod set;
#[cfg_attr(loom, allow(dead_code))]
mod sleep_watch;
mod stamp;
mod state;
mod undo;
mod undo_entry;
mod wait_list;
mod word;

#[cfg(all(not(loom), target_os = "linux"))]
pub mod shared;

pub use counters::SemCounters;
pub use error::SemError;
pub use lock::RawSemLock;
pub use queue::{set_sleeper_spin, sleeper_spin, DEFAULT_SLEEPER_SPIN};
pub use set::{SemSet, SemStat};
pub use undo::SemUndo;

#[cfg(all(not(loom), target_os = "linux"))]
pub use shared::{
    RecoveryStats, SharedSemSet, SharedSemStat, UndoHolder, IPC_CREAT, IPC_EXCL, IPC_PRIVATE,
};

/// Most semaphores in one set (the kernel's `SEMMSL`).
pub const SEMMSL: usize = 32_000;
/// Most operations in one call (`SEMOPM`).
pub const SEMOPM: usize = 500;
/// Largest value of a semaphore (`SEMVMX`).
pub const SEMVMX: i32 = 32_767;
/// Largest undo adjustment (`SEMAEM`); the range is `-(SEMAEM + 1)..=SEMAEM`.
pub const SEMAEM: i32 = SEMVMX;
/// `sem_flg` bit: fail with [`SemError::Again`] instead of blocking.
pub const IPC_NOWAIT: i16 = 0o4000;
/// `sem_flg` bit: record the change in the undo context.
pub const SEM_UNDO: i16 = 0x1000;

/// One operation: the kernel's `struct sembuf`, same layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SemBuf {
    /// Semaphore number in the set.
    pub num: u16,
    /// Amount to add; negative takes (may block), 0 waits for zero.
    pub op: i16,
    /// [`IPC_NOWAIT`] and [`SEM_UNDO`].
    pub flags: i16,
}

impl SemBuf {
    /// `SemBuf { num, op, flags }`.
    pub const fn new(num: u16, op: i16, flags: i16) -> SemBuf {
        SemBuf { num, op, flags }
    }
}
