//! [`SemSet`]: the public face of a set, `semop` and `semctl`.
//!
//! A `semop` goes through the other modules in this order: the argument
//! checks and errors in the kernel's order; one lock-free attempt for a
//! single operation (`mode.rs`, `word.rs`); the pre-scan (`perform.rs`); the
//! locks the call needs, its semaphores' own or the global one (`mode.rs`,
//! `sem_lock.rs`); the evaluation (`perform.rs`); on success the completion
//! of every sleeper it enabled (`complete.rs`), and the wake-ups after the
//! locks are dropped; on a block, the sleeper queued (`complete.rs`; a
//! single operation found blocked under its semaphore's lock alone, without
//! the general path's lock set, a complex call after entering global mode)
//! and its wait for a waker's result (`queue.rs`). Control calls on one
//! semaphore take that semaphore's lock, the others the global lock; they
//! change what they change and complete sleepers the same way.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_utils::CachePadded;

use super::complete::Changed;
use super::counters::{Counters, SemCounters};
use super::error::{check_num, SemError};
use super::lock::new_global_lock;
use super::mode::Held;
use super::node_pool::Claim;
use super::perform::{scan, Attempt, Op, Scan};
use super::queue::{spin_budget, wait_ended, NodeRef, Polled, Sleeper, Wakeups, DONE};
use super::stamp::{current_pid, now_secs, system_time};
use super::state::{Global, Mode, Sem, SemLists, SetShared};
use super::undo::SemUndo;
use super::wait_list::WaitList;
use super::word::REMOVED;
use super::{SemBuf, SEMMSL, SEMOPM, SEMVMX};
use crate::sync::unmodelled::AtomicU64 as CounterU64;
use crate::sync::{AtomicBool, AtomicI32, AtomicU32, Ordering, UnsafeCell};

/// What `IPC_STAT` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SemStat {
    /// Number of semaphores in the set.
    pub nsems: usize,
    /// Time of the last successful `semop`, `None` if there was none.
    pub otime: Option<SystemTime>,
    /// Time of creation or of the last `SETVAL` / `SETALL`.
    pub ctime: SystemTime,
}

/// A System V semaphore set with the kernel's `semop` / `semctl` semantics.
///
/// Share it between threads with `Arc<SemSet>` or scoped threads.
///
/// ```
/// use ksync::sem::{SemBuf, SemSet, IPC_NOWAIT};
///
/// let set = SemSet::new(2)?;
/// // Atomically: +1 on semaphore 0 and +2 on semaphore 1.
/// set.semop(&[SemBuf::new(0, 1, 0), SemBuf::new(1, 2, 0)])?;
/// // All or nothing: the -3 on semaphore 1 would block, so nothing changes.
/// let err = set.semop(&[SemBuf::new(0, -1, 0), SemBuf::new(1, -3, IPC_NOWAIT)]);
/// assert_eq!(err, Err(ksync::sem::SemError::Again));
/// assert_eq!(set.get_all()?, vec![1, 2]);
/// # Ok::<(), ksync::sem::SemError>(())
/// ```
pub struct SemSet {
    shared: Arc<SetShared>,
}

impl core::fmt::Debug for SemSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SemSet")
            .field("nsems", &self.nsems())
            .field("removed", &self.shared.is_deleted())
            .finish()
    }
}

/// How the general path's locking and evaluation of a call ended
/// (`SemSet::lock_and_perform`).
enum Performed {
    /// The call is over, with this result.
    Ended(Result<(), SemError>),
    /// It blocks, at this operation, and queues under this lock.
    Blocked(Locked, usize),
}

/// The lock a blocked call queues under.
enum Locked {
    /// Its one semaphore's, taken by `SetShared::lock_blocked_single`,
    /// which found the semaphore at this value.
    Single(i32),
    /// What the general path took.
    General(Held),
}

fn decode(status: u32) -> Result<(), SemError> {
    if status == DONE {
        Ok(())
    } else {
        Err(SemError::from_errno(status as i32).unwrap_or(SemError::Invalid))
    }
}

impl SemSet {
    /// A set of `nsems` semaphores, all 0.
    ///
    /// Fails with [`SemError::Invalid`] for 0 or more than [`SEMMSL`].
    pub fn new(nsems: usize) -> Result<SemSet, SemError> {
        if nsems == 0 || nsems > SEMMSL {
            return Err(SemError::Invalid);
        }
        let sems = (0..nsems)
            .map(|_| {
                CachePadded::new(Sem {
                    word: AtomicU32::new(0),
                    pid: AtomicI32::new(0),
                    otime: CounterU64::new(0),
                    lists: UnsafeCell::new(SemLists::default()),
                    counters: Counters::default(),
                })
            })
            .collect();
        let shared = SetShared {
            mode: CachePadded::new(Mode {
                // Unlike the kernel's, a new set starts in per-semaphore
                // mode: global mode lasts only while something needs it.
                global: AtomicBool::new(false),
                deleted: AtomicBool::new(false),
            }),
            global: CachePadded::new(Global {
                lock: new_global_lock(),
                complex_count: AtomicU32::new(0),
                alter: UnsafeCell::new(WaitList::new()),
                zero: UnsafeCell::new(WaitList::new()),
                counters: Counters::default(),
                ctime: CounterU64::new(now_secs()),
            }),
            sems,
            undo_list: Mutex::new(Vec::new()),
        };
        Ok(SemSet {
            shared: Arc::new(shared),
        })
    }

    /// The number of semaphores.
    pub fn nsems(&self) -> usize {
        self.shared.nsems()
    }

    /// The shared state, for the unit tests of the modules that work on it.
    #[cfg(test)]
    pub(super) fn shared(&self) -> &SetShared {
        &self.shared
    }

    /// Performs `sops` atomically, blocking until that is possible, like
    /// `semop(2)`. `SEM_UNDO` needs [`semop_undo`](Self::semop_undo).
    ///
    /// Unlike the kernel's call, a signal never ends the wait: a sleeper
    /// whose sleep a signal handler interrupts sleeps again, and the call
    /// never fails with [`SemError::Interrupted`] (which the process-shared
    /// sets return, as the kernel does). A thread that must stop waiting
    /// uses a timeout.
    #[inline]
    pub fn semop(&self, sops: &[SemBuf]) -> Result<(), SemError> {
        if let Some(done) = self.shared.try_fast(sops) {
            return done;
        }
        self.op(sops, None, None)
    }

    /// [`semop`](Self::semop) with a timeout, like `semtimedop(2)`: if the
    /// operation cannot be performed before it expires the call fails with
    /// [`SemError::Again`]. `None` waits forever; a zero timeout fails at
    /// once if the operation would block.
    #[inline]
    pub fn semtimedop(&self, sops: &[SemBuf], timeout: Option<Duration>) -> Result<(), SemError> {
        if let Some(done) = self.shared.try_fast(sops) {
            return done;
        }
        self.op(sops, None, timeout)
    }

    /// [`semtimedop`](Self::semtimedop) whose `SEM_UNDO` operations record
    /// their adjustment in `undo`.
    pub fn semop_undo(
        &self,
        sops: &[SemBuf],
        undo: &SemUndo,
        timeout: Option<Duration>,
    ) -> Result<(), SemError> {
        if let Some(done) = self.shared.try_fast(sops) {
            return done;
        }
        self.op(sops, Some(undo), timeout)
    }

    /// The full path of a call (the fast ones tried first by the callers).
    #[inline(never)]
    fn op(
        &self,
        sops: &[SemBuf],
        undo: Option<&SemUndo>,
        timeout: Option<Duration>,
    ) -> Result<(), SemError> {
        if sops.len() > SEMOPM {
            return Err(SemError::TooBig);
        }
        if sops.is_empty() {
            return Err(SemError::Invalid);
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let scan = scan(sops);
        let undo = match (scan.undos, undo) {
            (true, None) => return Err(SemError::Invalid),
            (true, Some(undo)) => Some(undo),
            (false, _) => None,
        };
        if scan.max >= self.nsems() {
            return Err(SemError::FileTooBig);
        }
        // The kernel allocates the undo entry before the EFBIG check; for a
        // live set that cannot fail, and for a removed one EFBIG first keeps
        // the documented order whatever the context saw before.
        let entry = match undo {
            Some(undo) => Some(undo.entry_for(&self.shared)?),
            None => None,
        };
        let set = &*self.shared;
        let op = Op {
            sops,
            undo: entry.as_deref(),
            dupsop: scan.dupsop,
        };
        // A single operation that may block (a decrement or a wait for
        // zero, without `SEM_UNDO` or `IPC_NOWAIT`) polls its word before it
        // queues; if it spent its budget there, it sleeps at once once
        // queued, without polling its status word as well. (A call on
        // several semaphores polls once it found itself blocked, below.)
        // A post that missed the lock-free path is not one: it found a flag,
        // and the general path is its way.
        let may_block_alone = sops.len() == 1
            && timeout != Some(Duration::ZERO)
            && set.polls_before_queueing(&sops[0]);
        let mut polled = false;
        if may_block_alone {
            match set.poll_lock_free(&sops[0], deadline) {
                Polled::Done(done) => return done,
                Polled::Spent => polled = true,
                Polled::Queue => {}
            }
        }
        // The node this call will queue, if it blocks, goes in this thread's
        // slot of the node pool, where a waker finds the nodes of many
        // sleepers on a few pages; in this frame if the slot is taken
        // (`node_pool`). Claimed before any lock: a thread's first claim
        // may allocate.
        let mut claim = if timeout == Some(Duration::ZERO) {
            None
        } else {
            Claim::take()
        };
        // The usual sleeper, that operation found blocked, queues under its
        // semaphore's lock alone (`SetShared::lock_blocked_single`); every
        // other call, and one that finds the set in global mode or its
        // operation able to proceed, takes the general path.
        let single = if may_block_alone {
            set.lock_blocked_single(&sops[0])
        } else {
            None
        };
        let (locked, blocked_at) = match single {
            Some(value) => (Locked::Single(value), 0),
            None => match self.lock_and_perform(&op, &scan, timeout, deadline, &mut polled) {
                Performed::Blocked(locked, at) => (locked, at),
                Performed::Ended(result) => return result,
            },
        };
        let in_frame;
        let node = Sleeper::new(sops, entry.as_deref(), blocked_at, scan.dupsop);
        let sleeper: &Sleeper = match claim.as_mut() {
            Some(claim) => claim.place(node),
            None => {
                in_frame = node;
                &in_frame
            }
        };
        let node = NodeRef::new(sleeper);
        match locked {
            Locked::Single(value) => set.queue_single(&sops[0], value, node),
            Locked::General(held) => {
                set.enqueue(&held, sops, scan.alter, node);
                set.unlock(held);
            }
        }

        let waited = sleeper.wait(deadline, polled);
        // Woken or timed out, the wait is over (`poll_learner`).
        wait_ended();
        set.count_wait(sops, &waited);
        if let Some(status) = waited.status {
            set.help_wake(sops, sleeper);
            return decode(status);
        }
        // Timed out. Under the lock, either a waker already delivered a
        // result (it wins) or we are still queued and leave. The acquire
        // pairs with the release swap in `Wakeups::deliver`.
        let held = set.lock_for(sops);
        let status = sleeper.status.load(Ordering::Acquire);
        if status >= DONE {
            set.unlock(held);
            set.help_wake(sops, sleeper);
            return decode(status);
        }
        let unlinked = set.unlink(&held, sops, node);
        debug_assert!(unlinked, "a sleeper without a result must be queued");
        set.unlock(held);
        Err(SemError::Again)
    }

    /// The general path's locking and evaluation of `op` (every call but
    /// the usual sleeper's): the call's semaphores' locks, or the global
    /// lock for a complex call that blocks, and the evaluation under them.
    /// A call that completes, fails, or may not wait ends here, its
    /// sleepers completed and woken; one that blocks returns the lock it
    /// will queue under and the index of its blocking operation. A complex
    /// call found blocked polls before it takes the global lock, and sets
    /// `polled` when it spent its budget there. Inlined into `op`, whose
    /// part it is.
    #[inline(always)]
    fn lock_and_perform(
        &self,
        op: &Op<'_>,
        scan: &Scan,
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        polled: &mut bool,
    ) -> Performed {
        let set = &*self.shared;
        let sops = op.sops;
        let mut held = set.lock_for(sops);
        loop {
            if set.is_deleted() {
                set.unlock(held);
                return Performed::Ended(Err(SemError::Removed));
            }
            match set.perform(&held, op) {
                Attempt::Done => {
                    let mut wakeups = Wakeups::default();
                    if scan.alter {
                        set.smart_update(&held, Changed::Ops(sops), true, &mut wakeups);
                    } else {
                        set.touch_otime(usize::from(sops[0].num));
                    }
                    set.unlock(held);
                    set.wake(wakeups, &set.sems[usize::from(sops[0].num)].counters);
                    return Performed::Ended(Ok(()));
                }
                Attempt::Failed(e) => {
                    set.unlock(held);
                    return Performed::Ended(Err(e));
                }
                Attempt::Blocked(_) if timeout == Some(Duration::ZERO) => {
                    set.unlock(held);
                    return Performed::Ended(Err(SemError::Again));
                }
                // A complex sleeper waits in global mode, where its FIFO
                // order against every other alter sleeper is kept: start
                // over under the global lock (the values may change
                // meanwhile, so the call is evaluated again). Before that
                // it polls its semaphores' values, the release it waits
                // for may be a moment away; only a call found blocked polls,
                // so calls that meet a lock but never block do not spin.
                Attempt::Blocked(_) if sops.len() > 1 && !held.is_global() => {
                    set.unlock(held);
                    if set.polls_quiet_before_queueing(sops, scan.dupsop) {
                        match set.poll_quiet(sops, deadline, spin_budget()) {
                            Polled::Done(done) => return Performed::Ended(done),
                            Polled::Spent => *polled = true,
                            Polled::Queue => {}
                        }
                    }
                    held = set.lock_global();
                }
                Attempt::Blocked(i) => return Performed::Blocked(Locked::General(held), i),
            }
        }
    }

    // ---- semctl ---------------------------------------------------------------

    /// Runs `f` under the global lock, failing with `Removed` on a removed set.
    fn control<R>(&self, f: impl FnOnce(&SetShared, &Held) -> R) -> Result<R, SemError> {
        self.control_with(self.shared.lock_global(), f)
    }

    /// Runs `f` under semaphore `num`'s lock (the global lock in global
    /// mode), failing with `Removed` on a removed set.
    fn control_one<R>(
        &self,
        num: usize,
        f: impl FnOnce(&SetShared, &Held) -> R,
    ) -> Result<R, SemError> {
        self.control_with(self.shared.lock_one(num), f)
    }

    fn control_with<R>(
        &self,
        held: Held,
        f: impl FnOnce(&SetShared, &Held) -> R,
    ) -> Result<R, SemError> {
        let set = &*self.shared;
        if set.is_deleted() {
            set.unlock(held);
            return Err(SemError::Removed);
        }
        let result = f(set, &held);
        set.unlock(held);
        Ok(result)
    }

    /// `GETVAL`: semaphore `num`'s value.
    pub fn get_value(&self, num: usize) -> Result<i32, SemError> {
        check_num(num, self.nsems())?;
        self.control_one(num, |set, held| set.value(held, num))
    }

    /// `SETVAL`: sets semaphore `num` to `value` (0 ..= [`SEMVMX`]), clears
    /// its adjustment in every undo context and completes the sleepers that
    /// can now run.
    pub fn set_value(&self, num: usize, value: i32) -> Result<(), SemError> {
        if !(0..=SEMVMX).contains(&value) {
            return Err(SemError::Range);
        }
        check_num(num, self.nsems())?;
        let mut wakeups = Wakeups::default();
        self.control_one(num, |set, held| {
            set.clear_undo(Some(num));
            set.set_value(held, num, value);
            set.sems[num].pid.store(current_pid(), Ordering::Relaxed);
            set.global.ctime.store(now_secs(), Ordering::Relaxed);
            set.smart_update(held, Changed::One(num), false, &mut wakeups);
        })?;
        self.shared.wake(wakeups, &self.shared.sems[num].counters);
        Ok(())
    }

    /// `GETALL`: every value.
    pub fn get_all(&self) -> Result<Vec<u16>, SemError> {
        self.control(|set, held| {
            (0..set.nsems())
                .map(|n| set.value(held, n) as u16)
                .collect()
        })
    }

    /// `SETALL`: sets every value (`values.len()` must equal
    /// [`nsems`](Self::nsems)), clears every undo adjustment and completes
    /// the sleepers that can now run.
    pub fn set_all(&self, values: &[u16]) -> Result<(), SemError> {
        if values.len() != self.nsems() {
            return Err(SemError::Invalid);
        }
        if values.iter().any(|&v| i32::from(v) > SEMVMX) {
            return Err(SemError::Range);
        }
        let mut wakeups = Wakeups::default();
        self.control(|set, held| {
            let pid = current_pid();
            for (num, &v) in values.iter().enumerate() {
                set.set_value(held, num, i32::from(v));
                set.sems[num].pid.store(pid, Ordering::Relaxed);
            }
            set.clear_undo(None);
            set.global.ctime.store(now_secs(), Ordering::Relaxed);
            set.smart_update(held, Changed::All, false, &mut wakeups);
        })?;
        self.shared.wake(wakeups, &self.shared.global.counters);
        Ok(())
    }

    /// `GETNCNT`: threads blocked decrementing semaphore `num`.
    pub fn ncnt(&self, num: usize) -> Result<usize, SemError> {
        check_num(num, self.nsems())?;
        self.control_one(num, |set, held| set.count_sleepers(held, num, false))
    }

    /// `GETZCNT`: threads blocked waiting for semaphore `num` to be zero.
    pub fn zcnt(&self, num: usize) -> Result<usize, SemError> {
        check_num(num, self.nsems())?;
        self.control_one(num, |set, held| set.count_sleepers(held, num, true))
    }

    /// `GETPID`: the process id of the last thread that changed semaphore
    /// `num` (by an operation, SETVAL, SETALL or an undo), 0 if none.
    pub fn pid(&self, num: usize) -> Result<i32, SemError> {
        check_num(num, self.nsems())?;
        self.control_one(num, |set, _| set.sems[num].pid.load(Ordering::Relaxed))
    }

    /// `IPC_STAT`: size and times.
    pub fn stat(&self) -> Result<SemStat, SemError> {
        self.control(|set, _| {
            let otime = set
                .sems
                .iter()
                .map(|s| s.otime.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            SemStat {
                nsems: set.nsems(),
                otime: (otime != 0).then(|| system_time(otime)),
                ctime: system_time(set.global.ctime.load(Ordering::Relaxed)),
            }
        })
    }

    /// `IPC_RMID`: removes the set. Every sleeper returns
    /// [`SemError::Removed`], and so does every later call.
    pub fn remove(&self) -> Result<(), SemError> {
        let mut wakeups = Wakeups::default();
        self.control(|set, held| {
            // Pairs with the acquire load in `SetShared::is_deleted`.
            set.mode.deleted.store(true, Ordering::Release);
            for sem in set.sems.iter() {
                sem.word.fetch_or(REMOVED, Ordering::Relaxed);
            }
            let removed = SemError::Removed.to_code();
            let mut everyone = Vec::new();
            for num in 0..set.nsems() {
                set.with_sem_lists(held, num, |l| {
                    everyone.extend(l.alter.drain());
                    everyone.extend(l.zero.drain());
                });
            }
            set.with_global_alter(held, |l| everyone.extend(l.drain()));
            set.with_global_zero(held, |l| everyone.extend(l.drain()));
            for node in everyone {
                set.deliver(held, node, removed, &mut wakeups);
            }
            set.undo_list
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        })?;
        self.shared.wake(wakeups, &self.shared.global.counters);
        Ok(())
    }

    /// Statistics of the set's global (array) lock, the lock Spraul's 2010
    /// ipc/sem.c series instrumented in the kernel: complex sleepers,
    /// whole-set control calls, and every call while the set is in global
    /// mode take it (lock-free and per-semaphore operations do not). Print its
    /// [`summary_line`](crate::stat::LockStatSnapshot::summary_line) for that
    /// series' `free F contended C wait W avg A 1/1000 cpu time P`.
    #[cfg(not(loom))]
    pub fn lock_stats(&self) -> crate::stat::LockStatSnapshot {
        self.shared.global.lock.snapshot()
    }

    /// Zeroes the lock statistics and restarts their time window, so a
    /// benchmark can measure one phase.
    #[cfg(not(loom))]
    pub fn reset_lock_stats(&self) {
        self.shared.global.lock.reset();
    }

    /// How much work the set's wakers did since it was created.
    pub fn counters(&self) -> SemCounters {
        let set = &*self.shared;
        let mut sum = SemCounters::default();
        set.global.counters.add_to(&mut sum);
        for sem in set.sems.iter() {
            sem.counters.add_to(&mut sum);
        }
        sum
    }
}
