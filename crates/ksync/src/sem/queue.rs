//! Sleepers, the wait lists they sit on, and the complete / wake handshake.
//!
//! A sleeper is a [`Sleeper`] node, the kernel's `struct sem_queue`, which
//! the kernel keeps in the sleeper's stack frame; ksync keeps it in the
//! blocked thread's slot of a process-wide pool (`node_pool.rs`), where a
//! waker finds many sleepers' nodes on a few pages, and in the caller's frame
//! only when that slot is taken. Wait lists hold pointers to nodes;
//! a list is only touched by a thread that holds the lock protecting it (see
//! `mode.rs`), so a queued node's fields are stable while a waker reads them.
//!
//! The status word is the whole handshake (the "no retry" of Kenneth W.
//! Chen's "ipc semaphore optimization", LKML, June 2003):
//!
//! | status | meaning | written by |
//! |---|---|---|
//! | `PENDING` | queued, the owner is awake (spinning) | the owner, at creation |
//! | `PARKED` | queued, the owner is asleep or about to sleep on the word | the owner, CAS from `PENDING` |
//! | `DONE` or an errno | the operation was performed (or failed) on the owner's behalf | a waker, holding the lock |
//!
//! The waker unlinks the node, performs the operation for the sleeper and
//! then swaps the result into the status word with release ordering. From
//! that moment the owner may return, and its node may be gone or hold its
//! next call, so the waker never touches the node again: if the swap
//! returned `PARKED` it keeps the word's address and issues the futex wake
//! after it dropped every lock (wake-ups outside the lock, from Manfred
//! Spraul's "ipc/sem.c: Optimization for reducing spinlock contention",
//! LKML, April 2010), through a raw pointer used as a key only. A stray wake
//! of whatever lives at that address later is a spurious wake-up, which
//! every futex sleeper in ksync tolerates.
//!
//! The owner spins on the word for a short while before it parks, and the
//! waker makes a futex call only for an owner that parked, so a sleeper woken
//! within its spin costs no system call on either side. (A single decrement
//! or wait for zero spends that spin before it queues instead, on its
//! semaphore's word, unless a sleeper queued there first: see
//! `SetShared::poll_lock_free`.)
//!
//! A sleeper whose deadline passes takes the set's lock again and reads its
//! status under it: a result there wins; otherwise it is still queued, and it
//! unlinks itself and reports `EAGAIN`.

use core::ptr::NonNull;
use std::time::Instant;

use super::undo_entry::UndoEntry;
use super::{SemBuf, IPC_NOWAIT};
use crate::futex::{self, Wake};
use crate::futex_batch::{Board, Handle, Spread};
use crate::poll_learner::{self, PollLearner};
use crate::relax::cpu_relax;
use crate::sync::unmodelled::AtomicU32 as TuningU32;
use crate::sync::{AtomicPtr, AtomicU32, Ordering};

/// Queued, owner awake.
pub(super) const PENDING: u32 = 0;
/// Queued, owner asleep on the status word.
pub(super) const PARKED: u32 = 1;
/// Completed successfully. Failures store the errno, which is never 0, 1 or 2.
pub(super) const DONE: u32 = 2;

/// Default for [`set_sleeper_spin`].
pub const DEFAULT_SLEEPER_SPIN: u32 = if cfg!(loom) { 0 } else { 1000 };

std::thread_local! {
    /// What this thread learned about its waits.
    static LEARNED: core::cell::Cell<PollLearner> = const {
        core::cell::Cell::new(PollLearner::new())
    };
}

static SLEEPER_SPIN: TuningU32 = TuningU32::new(DEFAULT_SLEEPER_SPIN);

/// Runs `f` on this thread's learner.
fn with_learner<R>(f: impl FnOnce(&mut PollLearner) -> R) -> R {
    poll_learner::with(&LEARNED, f)
}

/// Sets the most times a blocked `semop` polls before it sleeps in the
/// kernel, for every set in the process: a single operation polls its
/// semaphore's value before it queues, other calls their status word once
/// queued. 0 sleeps at once.
///
/// A poll is one `cpu_relax` (a few to tens of nanoseconds: 24 ns on the
/// machine BENCHMARKS.md describes). Each thread learns its own budget, up to
/// this limit ([`crate::poll_learner`]): doubled when a wait ended during the
/// poll, halved when it had to sleep, nothing below 16 polls but a 128-poll
/// probe on one wait in 16, and no probes while its timed waits are long.
/// Ping-pong between two threads learns to poll; sembench's 250 workers,
/// reposted only after hundreds of other wake-ups, learn not to. A thread
/// whose waits keep ending while it polls yields its CPU once every 64 of
/// them, so that threads woken onto its CPU are not kept waiting for a
/// whole time slice.
pub fn set_sleeper_spin(polls: u32) {
    SLEEPER_SPIN.store(polls, Ordering::Relaxed);
}

/// The limit [`set_sleeper_spin`] set ([`DEFAULT_SLEEPER_SPIN`] until then).
///
/// ```
/// ksync::sem::set_sleeper_spin(200);
/// assert_eq!(ksync::sem::sleeper_spin(), 200);
/// ```
pub fn sleeper_spin() -> u32 {
    SLEEPER_SPIN.load(Ordering::Relaxed)
}

/// The polls this wait may spend (see [`set_sleeper_spin`]); process-shared
/// sets' sleepers use it too.
pub(super) fn spin_budget() -> u32 {
    let limit = SLEEPER_SPIN.load(Ordering::Relaxed);
    if limit == 0 {
        return 0;
    }
    with_learner(|l| l.budget(limit))
}

/// Records how a wait that polled `budget` times went.
pub(super) fn learn(budget: u32, completed_while_polling: bool) {
    with_learner(|l| l.learn(budget, completed_while_polling));
}

/// This thread's wait is over: a timed one teaches whether waits are long
/// (`PollLearner::wait_ended`). Inlined: the first call a woken owner
/// makes, on a cold stack (`Sleeper::wait`).
#[inline(always)]
pub(super) fn wait_ended() {
    with_learner(PollLearner::wait_ended);
}

/// A probe that ended before it could tell anything (a look said to queue).
fn keep_probe_due() {
    with_learner(PollLearner::keep_probe_due);
}

/// What one look at a polled semaphore word decided.
pub(super) enum Look<T> {
    /// Nothing yet: poll again.
    Again,
    /// Stop polling, and queue: the word says polling cannot help (a sleeper
    /// queued first, say).
    Queue,
    /// Done, with this answer.
    Done(T),
}

/// How a [`poll_before_queueing`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Polled<T> {
    /// A look gave this answer.
    Done(T),
    /// The budget ran out, or the deadline passed: the wait was long, and
    /// the caller queues and sleeps at once.
    Spent,
    /// A look said to queue before the budget ran out. Nothing was learned:
    /// the caller queues and polls its status word as any queued caller.
    Queue,
}

/// Polls for this thread's learned budget ([`spin_budget`]) before the
/// caller queues, calling `look` after each spin, and learns from how it
/// went (only an answer or a spent budget teach anything). Returns how it
/// ended and the polls made. A timed call reads the clock on its first poll
/// and then every 64 (reading the clock costs more than a poll).
pub(super) fn poll_before_queueing<T>(
    deadline: Option<Instant>,
    look: impl FnMut() -> Look<T>,
) -> (Polled<T>, u32) {
    poll_within(spin_budget(), deadline, look)
}

/// [`poll_before_queueing`] for a budget the caller chose: at most `budget`
/// polls (a loom model polls where its sleepers otherwise would not).
pub(super) fn poll_within<T>(
    budget: u32,
    deadline: Option<Instant>,
    mut look: impl FnMut() -> Look<T>,
) -> (Polled<T>, u32) {
    let mut polls = 0;
    let polled = loop {
        if polls == budget {
            break Polled::Spent;
        }
        polls += 1;
        cpu_relax();
        match look() {
            Look::Again => {}
            Look::Queue => {
                keep_probe_due();
                return (Polled::Queue, polls);
            }
            Look::Done(answer) => break Polled::Done(answer),
        }
        if polls % 64 == 1 && deadline.is_some_and(|d| Instant::now() >= d) {
            break Polled::Spent;
        }
    };
    if budget > 0 {
        learn(budget, matches!(polled, Polled::Done(_)));
    }
    (polled, polls)
}

/// The semaphores `sops` names as a bit mask, semaphore `n` on bit `n % 64`:
/// exact for sets of up to 64 semaphores, a superset beyond, so that two
/// masks that do not intersect name no semaphore in common.
pub(super) fn sem_mask(sops: &[SemBuf]) -> u64 {
    sops.iter()
        .fold(0, |mask, s| mask | sem_bit(usize::from(s.num)))
}

/// Semaphore `num`'s bit in a [`sem_mask`].
pub(super) fn sem_bit(num: usize) -> u64 {
    1 << (num % 64)
}

/// Operations a [`Sleeper`] keeps a copy of: as many as fit in its line
/// beside the other fields. Calls on two semaphores (`ksync-lab dining`)
/// are the common case past one.
const INLINE_OPS: usize = 3;

// The fields a waker reads share one line.
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<Sleeper>() == 64);
const _: () = assert!(super::SEMOPM <= u16::MAX as usize);

/// [`Sleeper::traits`]: the call uses the sequential (duplicate-aware)
/// evaluation.
const DUPSOP: u8 = 1;
/// [`Sleeper::traits`]: one of its operations waits for zero (the rescan
/// rule's input for a sleeper passed over unevaluated).
const WAITS_FOR_ZERO: u8 = 2;
/// [`Sleeper::traits`]: one of its operations has `IPC_NOWAIT` (the rescan
/// rule's input: a lowered value can make it fail).
const NOWAIT: u8 = 4;

/// One blocked `semop` call, alone on its cache line: a waker reads it and
/// swaps its status with one miss.
#[repr(align(64))]
pub(super) struct Sleeper {
    /// See the module documentation.
    pub(super) status: AtomicU32,
    /// The operations of a call of up to [`INLINE_OPS`], copied here so
    /// that a waker evaluating it reads one line, not also the caller's
    /// slice, which lies on the caller's stack, last touched on its CPU.
    inline: [SemBuf; INLINE_OPS],
    /// The caller's slice, read only for calls of more than [`INLINE_OPS`].
    sops: *const SemBuf,
    nsops: u16,
    undo: *const UndoEntry,
    /// Index of the operation it is blocked on, refreshed by every waker that
    /// re-evaluates it (GETNCNT and GETZCNT count only that one).
    pub(super) blocking: AtomicU32,
    /// [`DUPSOP`], [`WAITS_FOR_ZERO`] and [`NOWAIT`]: what the call is,
    /// in one byte, so that the line has room for `cpu`.
    traits: u8,
    /// The CPU the owner queued on, for the waker's shared-out wake-up
    /// (`futex_batch::SharingMode::Local`, `futex_batch::sleeper_cpu`);
    /// `u16::MAX` if unknown or not asked.
    cpu: u16,
    /// The semaphores its operations name ([`sem_mask`]): a scan of the
    /// global list passes over a sleeper none of whose semaphores changed.
    sems: u64,
    /// The waker's share-out of its wake-ups ([`Handle`]), written before
    /// the result and read once the owner has it: the owner helps wake the
    /// other sleepers of the same post before it returns.
    help: AtomicPtr<Board>,
}

impl Sleeper {
    /// Inlined into `SemSet::op`, which builds every blocked call's node:
    /// one call frame less on the way to sleep (measured together with
    /// `SetShared::lock_blocked_single`, BENCHMARKS.md).
    #[inline]
    pub(super) fn new(
        sops: &[SemBuf],
        undo: Option<&UndoEntry>,
        blocking: usize,
        dupsop: bool,
    ) -> Self {
        let flag = |has: bool, bit: u8| if has { bit } else { 0 };
        Sleeper {
            status: AtomicU32::new(PENDING),
            inline: core::array::from_fn(|i| sops.get(i).copied().unwrap_or_default()),
            sops: sops.as_ptr(),
            // At most SEMOPM (500): the call checked it before it queued.
            nsops: sops.len() as u16,
            undo: undo.map_or(core::ptr::null(), |u| u as *const UndoEntry),
            blocking: AtomicU32::new(blocking as u32),
            traits: flag(dupsop, DUPSOP)
                | flag(sops.iter().any(|s| s.op == 0), WAITS_FOR_ZERO)
                | flag(sops.iter().any(|s| s.flags & IPC_NOWAIT != 0), NOWAIT),
            // Where the owner is now is where it will sleep, but for a
            // migration meanwhile, which costs only an IPI.
            cpu: u16::try_from(crate::futex_batch::sleeper_cpu()).unwrap_or(u16::MAX),
            sems: sem_mask(sops),
            help: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Called once by the owner after it read its result (with acquire
    /// ordering, which the waker's release swap pairs with): wakes other
    /// sleepers of the waker's post until none is left to claim, then a
    /// chunk of a later post's left open for its CPU. Returns the system
    /// calls it made.
    pub(super) fn help_wake(&self) -> usize {
        let raw = self.help.swap(core::ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: the waker left this handle's reference for this call, and
        // the swap takes it exactly once.
        let calls = unsafe { Handle::from_raw(raw).help() };
        calls + crate::futex_batch::help_open_board()
    }

    /// The semaphores the blocked call names, as [`sem_mask`] folds them.
    pub(super) fn sem_mask(&self) -> u64 {
        self.sems
    }

    /// Whether one of the blocked call's operations waits for zero.
    pub(super) fn has_wait_for_zero(&self) -> bool {
        self.traits & WAITS_FOR_ZERO != 0
    }

    /// Whether the blocked call uses the sequential (duplicate-aware)
    /// evaluation.
    pub(super) fn dupsop(&self) -> bool {
        self.traits & DUPSOP != 0
    }

    /// The CPU the owner queued on, as `futex_batch::sleeper_cpu` said.
    fn cpu(&self) -> u32 {
        match self.cpu {
            u16::MAX => crate::futex_batch::UNKNOWN_CPU,
            cpu => u32::from(cpu),
        }
    }

    /// Whether one of the blocked call's operations has `IPC_NOWAIT`.
    pub(super) fn has_nowait(&self) -> bool {
        self.traits & NOWAIT != 0
    }

    /// The operations of the blocked call.
    ///
    /// # Safety
    ///
    /// The node is queued (or is the caller's own), so its owner is still
    /// inside the call and the slice it points to is alive.
    pub(super) unsafe fn sops(&self) -> &[SemBuf] {
        let n = usize::from(self.nsops);
        if n <= INLINE_OPS {
            return &self.inline[..n];
        }
        // SAFETY: per the caller's contract the owner's slice is alive.
        unsafe { core::slice::from_raw_parts(self.sops, n) }
    }

    /// The undo adjustments of the blocked call, if it uses `SEM_UNDO`.
    ///
    /// # Safety
    ///
    /// As for [`sops`](Self::sops): the owner keeps its entry alive for the call.
    pub(super) unsafe fn undo(&self) -> Option<&UndoEntry> {
        // SAFETY: per the caller's contract the owner's entry is alive.
        unsafe { self.undo.as_ref() }
    }

    /// Waits until a waker delivers a result or `deadline` passes. The
    /// result's `status` holds the status word if it holds a result, `None`
    /// on time-out (the node may still be queued: the caller settles that
    /// under the lock). `polled`: the caller already spent this wait's polls
    /// before it queued, so it sleeps at once.
    ///
    /// Always inlined into the call, as `futex::wait` is into it: the woken
    /// owner returns on a cold stack, and each frame less is a line less to
    /// fetch again (see `futex::wait`).
    #[inline(always)]
    pub(super) fn wait(&self, deadline: Option<Instant>, polled: bool) -> Waited {
        // A caller that polled its semaphore's word before it queued spent
        // this wait's budget there (`SetShared::poll_lock_free`).
        let spins = if polled { 0 } else { spin_budget() };
        let mut waited = Waited::default();
        // Every acquire load of `status` here pairs with the release swap in
        // `Wakeups::deliver`: a result read is the waker's whole operation.
        for i in 0..spins {
            let status = self.status.load(Ordering::Acquire);
            if status >= DONE {
                learn(spins, true);
                waited.polls = i + 1;
                waited.status = Some(status);
                return waited;
            }
            // Reading the clock costs more than a poll, so check the deadline
            // only now and then.
            if i % 64 == 63 && deadline.is_some_and(|d| Instant::now() >= d) {
                waited.polls = i + 1;
                return waited;
            }
            cpu_relax();
        }
        waited.polls = spins;
        if spins > 0 {
            learn(spins, false);
        }
        if let Err(status) =
            self.status
                .compare_exchange(PENDING, PARKED, Ordering::Relaxed, Ordering::Acquire)
        {
            waited.status = Some(status);
            return waited;
        }
        // Wakers find us in the futex hash: it must grow with the sleepers.
        crate::futex_batch::note_sleeping_thread();
        loop {
            waited.parks += 1;
            let timed_out = futex::wait(&self.status, PARKED, deadline) == Wake::TimedOut;
            let status = self.status.load(Ordering::Acquire);
            if status >= DONE {
                waited.status = Some(status);
                return waited;
            }
            if timed_out {
                return waited;
            }
        }
    }
}

/// How a [`Sleeper::wait`] went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Waited {
    /// The delivered status, `None` if the deadline passed first.
    pub(super) status: Option<u32>,
    /// Polls of the status word before the result came or the owner slept.
    pub(super) polls: u32,
    /// `FUTEX_WAIT` calls.
    pub(super) parks: u32,
}

/// A pointer to a queued [`Sleeper`]. Lists only hold nodes whose owners are
/// blocked inside the call, and only lock holders touch them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct NodeRef(NonNull<Sleeper>);

// SAFETY: a NodeRef is only dereferenced by a thread holding the lock that
// protects the list it is on, while the node's owner is blocked (see the
// module documentation); the node's shared fields are atomics.
unsafe impl Send for NodeRef {}

impl NodeRef {
    pub(super) fn new(node: &Sleeper) -> Self {
        NodeRef(NonNull::from(node))
    }

    /// The node.
    ///
    /// # Safety
    ///
    /// The caller holds the lock of the list the node is on (or is the node's
    /// owner) and the node has no result yet.
    pub(super) unsafe fn get<'a>(self) -> &'a Sleeper {
        // SAFETY: per the caller's contract the owner is still blocked in its
        // call, so the node (in its pool slot or its frame) is alive and
        // holds this call.
        unsafe { self.0.as_ref() }
    }

    /// The node's address, for a prefetch.
    pub(super) fn as_ptr(self) -> *const Sleeper {
        self.0.as_ptr()
    }
}

/// Futex wake-ups owed to parked sleepers, issued after the locks are
/// dropped and shared out among the woken (`futex_batch::Spread`).
#[derive(Default)]
pub(super) struct Wakeups {
    spread: Spread,
}

impl Wakeups {
    /// Delivers `status` to an unlinked sleeper. After this the node may be
    /// gone at any moment, so it is not touched again.
    ///
    /// # Safety
    ///
    /// The caller holds the lock of the list `node` was on, has just unlinked
    /// it, and has not delivered a result to it before.
    pub(super) unsafe fn deliver(&mut self, node: NodeRef, status: u32) {
        // SAFETY: per the caller's contract the owner is still blocked, so the
        // node is alive until this swap makes the result visible.
        let sleeper = unsafe { node.get() };
        let cpu = sleeper.cpu();
        // Rides on the release swap below; read by `Sleeper::help_wake`.
        sleeper
            .help
            .store(self.spread.handle_on(cpu).into_raw(), Ordering::Relaxed);
        let word = &sleeper.status;
        let word_ptr = word as *const AtomicU32;
        // Pairs with the owner's acquire loads of `status` in
        // `Sleeper::wait` (and, after a time-out, in `SemSet::op`).
        if word.swap(status, Ordering::Release) == PARKED {
            // Only a key for FUTEX_WAKE from here on: the node may be gone,
            // and a wake of whatever lives there then is spurious.
            self.spread.push_ptr(word_ptr);
        }
    }

    /// How many sleepers need a kernel wake-up.
    pub(super) fn len(&self) -> usize {
        self.spread.len()
    }

    /// Wakes every parked sleeper, helped by those woken first. Call it with
    /// no lock held. Returns the system calls this thread made.
    pub(super) fn wake_all(self) -> usize {
        self.spread.wake()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::poll_learner::{MIN_POLLS, PROBE_EVERY, PROBE_POLLS};

    #[test]
    fn a_probe_cut_short_by_a_look_that_says_to_queue_is_not_lost() {
        // A fresh thread, so that no other test's waits taught it anything.
        std::thread::spawn(|| {
            learn(MIN_POLLS, false);
            for _ in 0..PROBE_EVERY - 1 {
                assert_eq!(spin_budget(), 0);
            }
            let (polled, polls) = poll_before_queueing::<()>(None, || Look::Queue);
            assert_eq!((polled, polls), (Polled::Queue, 1));
            assert_eq!(spin_budget(), PROBE_POLLS);
        })
        .join()
        .unwrap();
    }
}
