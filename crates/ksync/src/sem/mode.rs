//! Which lock a call takes: none, the locks of the semaphores it names, or
//! the set's global lock; and which of those protects what (the kernel's
//! `sem_lock`, `complexmode_enter` and `complexmode_tryleave`, rethought
//! for threads that can be preempted while they hold a lock).
//!
//! # Per-semaphore and global mode
//!
//! Every semaphore has a lock, the `LOCKED` bit of its word (`sem_lock.rs`).
//! In per-semaphore mode a call takes the locks of the semaphores it names,
//! in ascending order, whether it has one operation or many: a call that
//! succeeds (or fails) at once only ever touches those semaphores and the
//! single-operation sleepers queued on them. So sembench's poster, 64
//! increments in one call, takes 64 word locks, each held for the few
//! hundred nanoseconds of its call, and never stops a decrement on another
//! semaphore.
//!
//! Global mode exists for what needs the whole set at once: a complex
//! sleeper (a call on several semaphores that must wait), whose FIFO order
//! against every other alter sleeper the kernel keeps on one list; and the
//! control calls that read or write every semaphore atomically (GETALL,
//! SETALL, IPC_STAT, removal, applying an undo context). Entering it takes
//! the global lock and then every semaphore's word lock in ascending order,
//! leaving `GLOBAL` in each word (`enter_global`). A locker that finds
//! `GLOBAL` gives back the locks it took, waits for the global lock, and
//! works under it while the set stays global. The global unlock that finds
//! no complex sleeper left leaves global mode at once.
//!
//! The kernel instead stays in global mode for ten more global unlocks
//! after the last complex operation (`USE_GLOBAL_LOCK_HYSTERESIS`), because
//! switching costs a pass over every semaphore lock and its holders cannot
//! be preempted. In user space the global lock's holder can be preempted,
//! and while the set is global every call waits for it; so global mode
//! lasts only as long as something needs it, and a complex call that does
//! not sleep never enters it.
//!
//! Which lock a call takes is decided here ([`SetShared::lock_for`],
//! [`SetShared::lock_global`]); everything else asks the [`Held`] token it
//! was given.
//!
//! # Without a lock
//!
//! A single operation without `SEM_UNDO` on a semaphore nobody waits on takes
//! no lock at all ([`SetShared::try_lock_free`]): the value shares a word
//! with the flags (`word.rs`), and with all of them clear the operation is
//! one compare-and-swap. Such an operation can neither enable nor disturb
//! anybody. A holder sets `LOCKED` when it takes the lock; entering global
//! mode sets `GLOBAL`; each clears its flag (and recomputes `SLEEPERS`) with
//! a release when it is done, which the next lock-free operation's acquire
//! reads. So under a lock the value can still be read and written with plain
//! loads and stores.
//!
//! # Who protects what
//!
//! A semaphore's value, undo adjustments and wait lists are protected by its
//! own lock in per-semaphore mode and by the global lock in global mode; the
//! global wait lists and `complex_count` only by the global lock (they are
//! empty in per-semaphore mode: a sleeping complex operation keeps the set in
//! global mode). The list accessors here take the [`Held`] token and check
//! it. When the first complex operation goes to sleep the per-semaphore alter
//! lists are spliced into the global one ([`SetShared::merge_queues`]), so
//! alter operations keep FIFO order relative to it; when the last complex
//! sleeper is gone they move back ([`SetShared::unlock`]).

use lock_api::RawMutex;

use super::counters::Counters;
use super::error::SemError;
use super::lock::GlobalLock;
use super::queue::{poll_before_queueing, poll_within, Look, Polled};
use super::sem_lock::LockedSems;
use super::stamp::current_pid;
use super::state::{SemLists, SetShared};
use super::wait_list::WaitList;
use super::word::{self, LockFree, GLOBAL, LOCKED, QUIET, REMOVED, SLEEPERS};
use super::{SemBuf, IPC_NOWAIT, SEM_UNDO};
use crate::spin_budget::SpinTimer;
use crate::sync::Ordering;
use std::time::Instant;

type GlobalGuard = <GlobalLock as RawMutex>::Guard;

/// The most operations a call may have for the quiet path
/// ([`SetShared::try_quiet`]).
pub(super) const QUIET_MAX: usize = 8;

/// How many times [`SetShared::try_quiet`] retries the last semaphore's
/// compare-and-swap before it takes the full path.
const QUIET_TRIES: u32 = 4;

/// Which of the set's locks the caller holds.
pub(super) enum Held {
    /// The locks of these semaphores, in per-semaphore mode.
    Sems(LockedSems),
    /// The global lock, in global mode.
    Global(GlobalGuard),
}

impl Held {
    pub(super) fn is_global(&self) -> bool {
        matches!(self, Held::Global(_))
    }

    /// Whether this lock protects semaphore `num`.
    pub(super) fn covers(&self, num: usize) -> bool {
        match self {
            Held::Sems(sems) => sems.contains(num),
            Held::Global(_) => true,
        }
    }
}

impl SetShared {
    /// The counters of the lock domain `held` names (for several semaphores,
    /// the lowest one's).
    pub(super) fn counters(&self, held: &Held) -> &Counters {
        match held {
            Held::Sems(sems) => &self.sems[sems.first()].counters,
            Held::Global(_) => &self.global.counters,
        }
    }

    // ---- locking ----------------------------------------------------------

    /// The locks a call on `sops` takes: its semaphores' own in
    /// per-semaphore mode, the global lock in global mode.
    pub(super) fn lock_for(&self, sops: &[SemBuf]) -> Held {
        self.lock_sems_or_global(LockedSems::of(sops))
    }

    /// Semaphore `num`'s lock, or the global lock in global mode.
    pub(super) fn lock_one(&self, num: usize) -> Held {
        self.lock_sems_or_global(LockedSems::one(num as u16))
    }

    fn lock_sems_or_global(&self, sems: LockedSems) -> Held {
        loop {
            if self.lock_sems(&sems).is_ok() {
                return Held::Sems(sems);
            }
            // Global mode (or removal): wait for the global lock. The mode
            // only changes under it, so what we read now holds while we keep it.
            let guard = self.take_global_lock();
            if self.mode.global.load(Ordering::Relaxed) || self.is_deleted() {
                return Held::Global(guard);
            }
            // Global mode ended while we waited: back to the semaphores.
            // SAFETY: taken just above.
            unsafe { self.global.lock.unlock(guard) };
        }
    }

    /// Takes the global lock, counting a wait when it is taken (a lock wait
    /// as a semaphore's word lock counts one).
    fn take_global_lock(&self) -> GlobalGuard {
        self.global.lock.try_lock().unwrap_or_else(|| {
            Counters::add(&self.global.counters.outside.lock_waits, 1);
            self.global.lock.lock()
        })
    }

    /// Takes the global lock and enters global mode (complex sleepers,
    /// whole-set control calls, undo, removal).
    pub(super) fn lock_global(&self) -> Held {
        let guard = self.take_global_lock();
        if !self.mode.global.load(Ordering::Relaxed) {
            for num in 0..self.nsems() {
                self.enter_global(num);
            }
            self.mode.global.store(true, Ordering::Relaxed);
        }
        Held::Global(guard)
    }

    pub(super) fn unlock(&self, held: Held) {
        match held {
            Held::Sems(sems) => self.unlock_sems(&sems, |num| self.lists_have_sleepers(num)),
            Held::Global(guard) => {
                if self.global.complex_count.load(Ordering::Relaxed) == 0
                    && self.mode.global.load(Ordering::Relaxed)
                {
                    self.unmerge_queues();
                    // Leave global mode: lift GLOBAL from every semaphore.
                    // The release stores hand everything done in global mode
                    // to the next locker (pairs with the acquire
                    // compare-and-swap in `lock_sem`) and to the next
                    // lock-free operation (`try_lock_free`).
                    for num in 0..self.nsems() {
                        let word = &self.sems[num].word;
                        let current = word.load(Ordering::Relaxed);
                        let sleepers = self.lists_have_sleepers(num);
                        word.store(
                            word::published(current, GLOBAL, sleepers),
                            Ordering::Release,
                        );
                    }
                    self.mode.global.store(false, Ordering::Relaxed);
                }
                // SAFETY: `held` proves we hold the global lock.
                unsafe { self.global.lock.unlock(guard) };
            }
        }
    }

    // ---- values (under the lock named by `held`) ------------------------

    /// Semaphore `num`'s value, which `held` covers.
    pub(super) fn value(&self, held: &Held, num: usize) -> i32 {
        match held {
            Held::Sems(sems) => sems.value(num),
            Held::Global(_) => self.word_value(num),
        }
    }

    /// Sets semaphore `num`'s value (`0..=SEMVMX`), which `held` covers.
    pub(super) fn set_value(&self, held: &Held, num: usize, value: i32) {
        match held {
            Held::Sems(sems) => sems.set_value(num, value),
            Held::Global(_) => self.set_word_value(num, value),
        }
    }

    // ---- list access (all under the lock named by `held`) ----------------

    pub(super) fn with_sem_lists<R>(
        &self,
        held: &Held,
        num: usize,
        f: impl FnOnce(&mut SemLists) -> R,
    ) -> R {
        debug_assert!(held.covers(num));
        // SAFETY: `held` covers semaphore `num` (checked above in debug
        // builds; every caller derives `num` from the operation it locked
        // for), so nobody else touches these lists; the reference does not
        // escape `f`.
        self.sems[num].lists.with_mut(|l| f(unsafe { &mut *l }))
    }

    pub(super) fn with_global_alter<R>(
        &self,
        held: &Held,
        f: impl FnOnce(&mut WaitList) -> R,
    ) -> R {
        assert!(held.is_global());
        // SAFETY: we hold the global lock, which protects the global lists.
        self.global.alter.with_mut(|l| f(unsafe { &mut *l }))
    }

    pub(super) fn with_global_zero<R>(&self, held: &Held, f: impl FnOnce(&mut WaitList) -> R) -> R {
        assert!(held.is_global());
        // SAFETY: as in with_global_alter.
        self.global.zero.with_mut(|l| f(unsafe { &mut *l }))
    }

    pub(super) fn global_alter_is_empty(&self, held: &Held) -> bool {
        // In per-semaphore mode the global lists are empty by construction.
        !held.is_global() || self.with_global_alter(held, |l| l.is_empty())
    }

    /// Splices every per-semaphore alter list into the global one, so that
    /// alter operations keep their order relative to a complex sleeper.
    pub(super) fn merge_queues(&self, held: &Held) {
        for num in 0..self.nsems() {
            let mut moved = self.with_sem_lists(held, num, |l| core::mem::take(&mut l.alter));
            if !moved.is_empty() {
                // The kernel splices each list at the head, in semaphore order.
                self.with_global_alter(held, |g| {
                    moved.append(g);
                    *g = moved;
                });
            }
        }
    }

    /// Moves the (all single-operation) global alter entries back to their
    /// semaphores once no complex sleeper is left. Global lock held.
    fn unmerge_queues(&self) {
        // SAFETY: called from `unlock` with the global lock held.
        let entries = self
            .global
            .alter
            .with_mut(|l| core::mem::take(unsafe { &mut *l }));
        for node in entries {
            // SAFETY: queued nodes are alive while we hold the lock.
            let num = usize::from(unsafe { node.get().sops() }[0].num);
            // SAFETY: global lock held, so the semaphore's lists are ours.
            self.sems[num]
                .lists
                .with_mut(|l| unsafe { (*l).alter.push_back(node) });
        }
    }

    /// Whether semaphore `num` has sleepers on its own lists. The caller
    /// holds a lock that covers `num` and is about to release it.
    fn lists_have_sleepers(&self, num: usize) -> bool {
        // SAFETY: per the contract the lists are ours; the reference does
        // not escape.
        self.sems[num]
            .lists
            .with(|l| unsafe { !(*l).alter.is_empty() || !(*l).zero.is_empty() })
    }

    /// Whether a single operation `sop` that the lock-free path did not
    /// finish polls its semaphore's word before it queues
    /// ([`poll_lock_free`](Self::poll_lock_free)): a decrement or a wait for
    /// zero, which may block, without `SEM_UNDO` or `IPC_NOWAIT`. (A post
    /// that missed the lock-free path found a flag: the locked path is its
    /// way.)
    pub(super) fn polls_before_queueing(&self, sop: &SemBuf) -> bool {
        sop.op <= 0
            && sop.flags & (SEM_UNDO | IPC_NOWAIT) == 0
            && usize::from(sop.num) < self.nsems()
    }

    /// Polls a blocked single operation's word, for this thread's learned
    /// budget (`queue::spin_budget`), and does the operation lock-free as
    /// soon as the value allows it. [`Polled::Spent`]: the budget ran out or
    /// `deadline` passed, and the caller queues and sleeps at once;
    /// [`Polled::Queue`]: a sleeper queued first (whose turn comes first),
    /// or the set went into global mode or was removed, and the caller
    /// queues and polls its status word as before.
    ///
    /// Polling here, not after queueing, is what lets a post that arrives
    /// within the poll be caught: a post that finds the caller queued must
    /// take the semaphore's lock and complete it, while one that finds it
    /// polling is the same single compare-and-swap as an uncontended post.
    /// It also teaches the budget what it should: the posts that come early
    /// count as polls that succeeded (sembench `-t 8`, BENCHMARKS.md). A
    /// poller is not yet a sleeper: GETNCNT does not count it, as the kernel
    /// does not count a caller that has not gone to sleep yet.
    pub(super) fn poll_lock_free(
        &self,
        sop: &SemBuf,
        deadline: Option<Instant>,
    ) -> Polled<Result<(), SemError>> {
        debug_assert!(self.polls_before_queueing(sop));
        let num = usize::from(sop.num);
        let word = &self.sems[num].word;
        let (polled, polls) = poll_before_queueing(deadline, || {
            let current = word.load(Ordering::Relaxed);
            if current & (SLEEPERS | GLOBAL | REMOVED) != 0 {
                return Look::Queue;
            }
            // A holder of the semaphore's lock alone (a post at work) is
            // waited out: its release may well be what this poll waits for.
            match word::lock_free_step(current, sop.op) {
                LockFree::Locked | LockFree::WouldBlock => Look::Again,
                _ => self.try_lock_free(sop).map_or(Look::Again, Look::Done),
            }
        });
        if polls > 0 {
            Counters::add(&self.sems[num].counters.outside.polls, u64::from(polls));
        }
        polled
    }

    /// Whether a call of several operations that found itself blocked polls
    /// its semaphores' words before it queues
    /// ([`poll_quiet`](Self::poll_quiet)): 2 to [`QUIET_MAX`] operations on
    /// distinct semaphores (`dupsop` false), one of which may block, none
    /// with `SEM_UNDO` or `IPC_NOWAIT`: the calls the quiet path takes.
    pub(super) fn polls_quiet_before_queueing(&self, sops: &[SemBuf], dupsop: bool) -> bool {
        (2..=QUIET_MAX).contains(&sops.len())
            && !dupsop
            && sops.iter().any(|s| s.op <= 0)
            && sops.iter().all(|s| {
                s.flags & (SEM_UNDO | IPC_NOWAIT) == 0 && usize::from(s.num) < self.nsems()
            })
    }

    /// [`poll_lock_free`](Self::poll_lock_free) for a call of several
    /// operations that was found blocked under its semaphores' locks: polls
    /// their words for this thread's learned budget and makes the call on
    /// the quiet path ([`try_quiet`](Self::try_quiet)) as soon as they let
    /// it through. [`Polled::Queue`]: a semaphore has a sleeper queued
    /// first, or the set is in global mode or removed, or the values would
    /// let the call through but a lock holder stayed longer than about one
    /// context switch (preempted, perhaps: the locked path waits for it and
    /// sleeps meanwhile).
    ///
    /// Without it, such a call enters global mode to queue and sleeps even
    /// when the semaphores it waits for are released a moment later (two
    /// threads taking two of five semaphores each, `ksync-lab dining`). A
    /// poller is not a sleeper: it is not counted by GETNCNT, does not enter
    /// global mode, and stops as soon as anyone has queued on one of its
    /// semaphores, so it never overtakes a sleeper.
    ///
    /// `budget` is the most polls: this thread's learned budget
    /// (`queue::spin_budget`), which the caller reads.
    pub(super) fn poll_quiet(
        &self,
        sops: &[SemBuf],
        deadline: Option<Instant>,
        budget: u32,
    ) -> Polled<Result<(), SemError>> {
        debug_assert!(self.polls_quiet_before_queueing(sops, false));
        let mut lock_wait = SpinTimer::one_switch();
        let (polled, polls) = poll_within(budget, deadline, || {
            let mut values_only = [0u32; QUIET_MAX];
            let mut locked = false;
            for (value, sop) in values_only.iter_mut().zip(sops) {
                let word = self.sems[usize::from(sop.num)].word.load(Ordering::Relaxed);
                if word & (SLEEPERS | GLOBAL | REMOVED) != 0 {
                    return Look::Queue;
                }
                locked |= word & LOCKED != 0;
                *value = word & word::VALUE_MASK;
            }
            // Decided on the values alone: a locked word's may be about to
            // change, which costs at most another look.
            let mut values = [0i32; QUIET_MAX];
            match quiet_outcome(sops, &values_only, &mut values) {
                // It would block: poll on, for the release it waits for.
                None => Look::Again,
                // It would go through but a lock is held: wait about one
                // context switch for the holder, as a locker would, then
                // leave it to the locked path, which naps or sleeps while a
                // preempted holder is away instead of spinning on.
                Some(_) if locked => {
                    if lock_wait.expired() {
                        Look::Queue
                    } else {
                        Look::Again
                    }
                }
                Some(_) => self.try_quiet(sops).map_or(Look::Again, Look::Done),
            }
        });
        if polls > 0 {
            let first = usize::from(sops[0].num);
            Counters::add(&self.sems[first].counters.outside.polls, u64::from(polls));
        }
        polled
    }

    /// The calls that may finish without queueing anybody or looking at a
    /// wait list: a single operation on a quiet semaphore (no lock at all,
    /// [`try_lock_free`](Self::try_lock_free)), or a few operations on quiet
    /// semaphores ([`try_quiet`](Self::try_quiet)). `None`: the full path.
    #[inline]
    pub(super) fn try_fast(&self, sops: &[SemBuf]) -> Option<Result<(), SemError>> {
        match sops.len() {
            1 => self.try_lock_free(&sops[0]),
            2 => self.try_quiet_pair(sops),
            3..=QUIET_MAX => self.try_quiet_many(sops),
            _ => None,
        }
    }

    /// [`try_quiet`](Self::try_quiet) compiled for two operations, the
    /// usual multi-operation call (take one semaphore, give another): with
    /// the count known, its loops unroll and their bounds checks go.
    #[inline(never)]
    fn try_quiet_pair(&self, sops: &[SemBuf]) -> Option<Result<(), SemError>> {
        self.try_quiet(&sops[..2])
    }

    /// [`try_quiet`](Self::try_quiet) for 3 to [`QUIET_MAX`] operations.
    #[inline(never)]
    fn try_quiet_many(&self, sops: &[SemBuf]) -> Option<Result<(), SemError>> {
        self.try_quiet(sops)
    }

    /// A call of 2 to [`QUIET_MAX`] operations on distinct semaphores,
    /// without `SEM_UNDO`, when none of them has a flag set: nobody holds
    /// them, nobody sleeps on them, the set is not in global mode. With no
    /// sleeper on its semaphores the call can enable nobody, and it changes
    /// only values, so it evaluates them in registers.
    ///
    /// It reads every word first (the loads overlap), decides, then takes
    /// the word locks of all but the highest semaphore in ascending order, as
    /// in `lock_sems`, each with a compare-and-swap from the word it read, and
    /// does the highest one's operation as a lock-free compare-and-swap while
    /// it holds the others. Those locks carry [`QUIET`](word::QUIET): nobody
    /// else writes a quietly locked word, so each is released with a plain
    /// store. For two semaphores that is two atomic instructions and a
    /// store, not four atomic instructions.
    ///
    /// The highest semaphore's compare-and-swap is the call's linearization
    /// point: whoever looks at a locked semaphore afterwards waits for its
    /// release (a locker, a control call) or takes the locked path (a
    /// lock-free operation), and the releases, which write the new values
    /// back, come after it. A call decided without writing the highest
    /// semaphore reads it again under the locks instead. A flag found on the
    /// way, or a block that must sleep, gives everything back untouched:
    /// `None`, the full path.
    #[inline(always)]
    pub(super) fn try_quiet(&self, sops: &[SemBuf]) -> Option<Result<(), SemError>> {
        let n = sops.len();
        // Positions in `sops`, ordered by semaphore number.
        let mut order = [0u8; QUIET_MAX];
        for i in 0..n {
            let sop = &sops[i];
            if sop.flags & SEM_UNDO != 0 || usize::from(sop.num) >= self.nsems() {
                return None;
            }
            let mut at = i;
            while at > 0 && sops[usize::from(order[at - 1])].num > sop.num {
                order[at] = order[at - 1];
                at -= 1;
            }
            if at > 0 && sops[usize::from(order[at - 1])].num == sop.num {
                // A semaphore named twice: the full path's evaluation.
                return None;
            }
            order[at] = i as u8;
        }
        let (locked, last) = (&order[..n - 1], usize::from(order[n - 1]));
        let word_of = |i: usize| &self.sems[usize::from(sops[i].num)].word;
        // Each semaphore's word as read, by position in `sops`; the locks
        // below are taken from these words, so the decision made on them
        // holds for the locked semaphores, and the last one's
        // compare-and-swap checks it for that one.
        let mut words = [0u32; QUIET_MAX];
        for (i, word) in words[..n].iter_mut().enumerate() {
            *word = word_of(i).load(Ordering::Relaxed);
            if *word & !word::VALUE_MASK != 0 {
                return None;
            }
        }
        let mut values = [0i32; QUIET_MAX];
        let mut outcome = quiet_outcome(sops, &words, &mut values)?;
        for (k, &i) in locked.iter().enumerate() {
            let i = usize::from(i);
            // Acquire pairs with the release of the last holder (`release`,
            // the store in `release_quiet`, the store that leaves global
            // mode) and of the last lock-free operation (`try_lock_free`, or
            // the compare-and-swap below), as in `lock_sem`.
            if word_of(i)
                .compare_exchange(
                    words[i],
                    words[i] | LOCKED | QUIET,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                self.release_quiet(sops, &locked[..k], &words, None);
                return None;
            }
        }
        let last_word = word_of(last);
        let mut tries = 0;
        loop {
            let now = if outcome.is_err() || values[last] == word::value_of(words[last]) {
                // Decided without writing the last semaphore (a failure, or
                // nothing to write there): a read of it while the others are
                // locked is the linearization point. Acquire as for the
                // locks above.
                let now = last_word.load(Ordering::Acquire);
                if now == words[last] {
                    break;
                }
                now
            } else {
                // Release publishes the new value to the next reader of this
                // word; acquire as for the locks above. It fails only when a
                // lock-free operation or a locker got there first.
                match last_word.compare_exchange(
                    words[last],
                    values[last] as u32,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(now) => now,
                }
            };
            // The last semaphore changed: evaluate again. A flag, a block
            // that must sleep, or lock-free operations on the last semaphore
            // that keep beating this call to it while it holds the others'
            // locks: the full path, which locks them all, so that nobody
            // waits long.
            words[last] = now;
            tries += 1;
            let again = if now & !word::VALUE_MASK != 0 || tries == QUIET_TRIES {
                None
            } else {
                quiet_outcome(sops, &words, &mut values)
            };
            match again {
                Some(again) => outcome = again,
                None => {
                    self.release_quiet(sops, locked, &words, None);
                    return None;
                }
            }
        }
        let done = outcome.is_ok();
        Counters::bump(
            &self.sems[usize::from(sops[usize::from(order[0])].num)]
                .counters
                .attempts,
            1,
        );
        self.release_quiet(sops, locked, &words, done.then_some(&values));
        if done {
            let pid = current_pid();
            for (i, sop) in sops.iter().enumerate() {
                self.sems[usize::from(sop.num)].stamp_after_write(pid, i == 0);
            }
        }
        Some(outcome)
    }

    /// Releases the quiet call's locks of `sops[order]`, writing back
    /// `values` (by position in `sops`) or, with `None`, the values the
    /// words held.
    #[inline(always)]
    fn release_quiet(
        &self,
        sops: &[SemBuf],
        order: &[u8],
        words: &[u32; QUIET_MAX],
        values: Option<&[i32; QUIET_MAX]>,
    ) {
        for &i in order {
            let i = usize::from(i);
            let word = &self.sems[usize::from(sops[i].num)].word;
            let value = values.map_or(word::value_of(words[i]), |v| v[i]);
            debug_assert_eq!(
                word.load(Ordering::Relaxed),
                words[i] | LOCKED | QUIET,
                "a quietly locked word changed under its holder"
            );
            // A plain store: `QUIET` kept every other writer off the word
            // (`wait_out_quiet`), so there is no `CONTENDED` to keep or wake,
            // and the word read before the lock had no flag. Release hands
            // the value and the last semaphore's change to the next locker's
            // acquire (`lock_sem`, `enter_global`, `try_quiet`) and to the
            // next lock-free operation (`try_lock_free`).
            word.store(word::with_value(words[i], value), Ordering::Release);
        }
    }

    /// A single operation without a lock, when nothing else is going on
    /// with its semaphore: no lock holder, no sleepers, not global mode, not
    /// removed, and no `SEM_UNDO`. Then the operation is one compare-and-swap
    /// on the value (acquire and release, like a lock) and can neither enable
    /// nor disturb anybody. `None`: take the locked path.
    #[inline]
    pub(super) fn try_lock_free(&self, sop: &SemBuf) -> Option<Result<(), SemError>> {
        let num = usize::from(sop.num);
        if sop.flags & SEM_UNDO != 0 || num >= self.nsems() {
            return None;
        }
        let would_block = || (sop.flags & IPC_NOWAIT != 0).then_some(Err(SemError::Again));
        let word = &self.sems[num].word;
        // The acquires pair with the release compare-and-swap in `release`,
        // the release store in `release_quiet` and the release store that
        // leaves global mode in `unlock` (the last locked stretch), and with
        // the release half of the previous lock-free compare-and-swap; that
        // release pairs with the next one's acquire and with the acquire
        // compare-and-swaps in `lock_sem`, `enter_global` and `try_quiet`.
        let mut current = word.load(Ordering::Acquire);
        loop {
            let next = match word::lock_free_step(current, sop.op) {
                LockFree::Locked => return None,
                LockFree::WouldBlock => return would_block(),
                LockFree::Range => return Some(Err(SemError::Range)),
                LockFree::Satisfied => break,
                LockFree::Store(next) => next,
            };
            match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        self.sems[num].stamp_after_write(current_pid(), true);
        Some(Ok(()))
    }
}

/// The kernel's first pass over a quiet call, on `words` (by position in
/// `sops`, none with a flag), in array order: the first operation that
/// cannot proceed decides. Each operation is decided as a lock-free single
/// operation would decide it ([`word::lock_free_step`]). Fills `values`
/// with the values after the call when it succeeds. `None`: it would block
/// and may sleep, which only the full path can do.
#[inline(always)]
fn quiet_outcome(
    sops: &[SemBuf],
    words: &[u32; QUIET_MAX],
    values: &mut [i32; QUIET_MAX],
) -> Option<Result<(), SemError>> {
    for (i, sop) in sops.iter().enumerate() {
        values[i] = match word::lock_free_step(words[i], sop.op) {
            LockFree::Store(next) => next as i32,
            LockFree::Satisfied => word::value_of(words[i]),
            LockFree::Range => return Some(Err(SemError::Range)),
            LockFree::WouldBlock => {
                return (sop.flags & IPC_NOWAIT != 0).then_some(Err(SemError::Again))
            }
            // The caller read no flag; were one there, the full path decides.
            LockFree::Locked => return None,
        };
    }
    Some(Ok(()))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::queue::{NodeRef, Sleeper};
    use crate::sem::{SemSet, IPC_NOWAIT, SEM_UNDO};

    fn flags(set: &SetShared, num: usize) -> u32 {
        set.sems[num].word.load(Ordering::Relaxed) & !word::VALUE_MASK
    }

    #[test]
    fn a_new_set_locks_per_semaphore() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        for num in 0..3 {
            assert_eq!(flags(set, num), 0);
        }
        let held = set.lock_one(1);
        assert!(matches!(&held, Held::Sems(s) if s.as_slice() == [1]));
        assert_eq!((flags(set, 0), flags(set, 1)), (0, word::LOCKED));
        set.unlock(held);
        assert_eq!(flags(set, 1), 0);
    }

    #[test]
    fn global_mode_flags_every_semaphore_until_the_global_unlock() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        assert!(held.is_global() && held.covers(0) && held.covers(1));
        assert_eq!((flags(set, 0), flags(set, 1)), (GLOBAL, GLOBAL));
        set.unlock(held);
        assert_eq!((flags(set, 0), flags(set, 1)), (0, 0));
        assert!(!set.mode.global.load(Ordering::Relaxed));
    }

    #[test]
    fn a_complex_sleeper_keeps_the_set_in_global_mode() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        set.global.complex_count.store(1, Ordering::Relaxed);
        set.unlock(held);
        for _ in 0..3 {
            let held = set.lock_one(0);
            assert!(held.is_global(), "single operations take the global lock");
            set.unlock(held);
            assert_eq!(flags(set, 0), GLOBAL);
        }
        set.global.complex_count.store(0, Ordering::Relaxed);
        // The next global unlock leaves global mode at once.
        let held = set.lock_one(1);
        assert!(held.is_global());
        set.unlock(held);
        assert_eq!((flags(set, 0), flags(set, 1)), (0, 0));
        assert!(matches!(set.lock_one(1), Held::Sems(_)));
    }

    /// Puts the set in global mode, kept there as if by a complex sleeper,
    /// or (`false`) lets it leave: the global unlock decides, as it does
    /// for real sleepers.
    fn set_global_mode(set: &SetShared, on: bool) {
        set.global
            .complex_count
            .store(u32::from(on), Ordering::Relaxed);
        let held = set.lock_global();
        set.unlock(held);
    }

    /// The polls counted on semaphore `num`.
    fn polls(set: &SetShared, num: usize) -> u64 {
        set.sems[num].counters.outside.polls.load(Ordering::Relaxed)
    }

    #[test]
    fn a_poller_takes_a_post_that_is_already_there() {
        let set = SemSet::new(1).unwrap();
        set.set_value(0, 2).unwrap();
        let set = set.shared();
        let down = SemBuf::new(0, -1, 0);
        assert!(set.polls_before_queueing(&down));
        assert_eq!(set.poll_lock_free(&down, None), Polled::Done(Ok(())));
        assert_eq!(set.word_value(0), 1);
        assert!(polls(set, 0) >= 1);
    }

    #[test]
    fn a_poller_never_overtakes_a_queued_sleeper() {
        // A +1 arrives while a sleeper is queued: it completes the sleeper,
        // and only then could a newcomer's decrement succeed. The poller
        // sees the flag the queue left and gives up at once (a poller that
        // ignored it would take the unit meant for the sleeper).
        let set = SemSet::new(1).unwrap();
        let set = set.shared();
        let held = set.lock_one(0);
        let queued = Sleeper::new(&[SemBuf::new(0, -1, 0)], None, 0, false);
        set.with_sem_lists(&held, 0, |l| l.alter.push_back(NodeRef::new(&queued)));
        // The value the waker would hand to the sleeper, not yet handed.
        set.set_value(&held, 0, 1);
        set.unlock(held);
        assert_ne!(flags(set, 0), 0, "the queue shows in the word");
        let budget_before = crate::sem::queue::spin_budget();
        assert_eq!(
            set.poll_lock_free(&SemBuf::new(0, -1, 0), None),
            Polled::Queue
        );
        assert_eq!(set.word_value(0), 1, "the poller took nothing");
        assert_eq!(polls(set, 0), 1, "one look, then it queues");
        // Giving up at a flag teaches nothing: the budget is as it was.
        assert_eq!(crate::sem::queue::spin_budget(), budget_before);
        let held = set.lock_one(0);
        set.with_sem_lists(&held, 0, |l| drop(core::mem::take(&mut l.alter)));
        set.unlock(held);
    }

    #[test]
    fn a_poller_that_finds_nothing_gives_up_and_polls_less_next_time() {
        use crate::sem::queue::{learn, spin_budget};
        std::thread::spawn(|| {
            let set = SemSet::new(1).unwrap();
            let set = set.shared();
            let down = SemBuf::new(0, -1, 0);
            // A fresh thread's budget, doubled by one wait that succeeded.
            let budget = 2 * spin_budget();
            learn(budget / 2, true);
            assert_eq!(set.poll_lock_free(&down, None), Polled::Spent);
            assert_eq!(polls(set, 0), u64::from(budget));
            assert!(spin_budget() < budget);
            assert_eq!(set.word_value(0), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_whose_waits_are_long_stops_probing() {
        use crate::poll_learner::{MIN_POLLS, PROBE_EVERY, PROBE_POLLS};
        // Each wait lasts far longer than the longest context switch the
        // learner would believe (200 us, eight of them): a probe could never
        // catch one.
        const WAIT: std::time::Duration = std::time::Duration::from_millis(10);
        let set = std::sync::Arc::new(SemSet::new(1).unwrap());
        // A fresh thread: its first wait polls MIN_POLLS times and fails, its
        // waits then sleep at once but for the probe on one in PROBE_EVERY.
        // The first probe is timed, and its wait was long, so the second
        // probe-due wait sleeps at once (timed again): without the timing
        // (`SemSet::op` ending it) that wait would probe too.
        let waits = 1 + 2 * PROBE_EVERY;
        let waiter = {
            let set = std::sync::Arc::clone(&set);
            std::thread::spawn(move || {
                for _ in 0..waits {
                    set.semop(&[SemBuf::new(0, -1, 0)]).unwrap();
                }
            })
        };
        for _ in 0..waits {
            // Queued: its polls are over.
            crate::test_common::wait_until("the waiter queued", || set.ncnt(0) == Ok(1));
            std::thread::sleep(WAIT);
            set.semop(&[SemBuf::new(0, 1, 0)]).unwrap();
        }
        waiter.join().unwrap();
        assert_eq!(polls(set.shared(), 0), u64::from(MIN_POLLS + PROBE_POLLS));
    }

    #[test]
    fn undo_and_nowait_operations_do_not_poll_the_word() {
        let set = SemSet::new(1).unwrap();
        let set = set.shared();
        assert!(!set.polls_before_queueing(&SemBuf::new(0, 1, 0)), "a post");
        assert!(set.polls_before_queueing(&SemBuf::new(0, 0, 0)));
        assert!(!set.polls_before_queueing(&SemBuf::new(0, -1, SEM_UNDO)));
        assert!(!set.polls_before_queueing(&SemBuf::new(0, -1, IPC_NOWAIT)));
        assert!(!set.polls_before_queueing(&SemBuf::new(1, -1, 0)));
    }

    #[test]
    fn a_call_on_two_semaphores_polls_its_way_through_when_both_are_there() {
        use crate::sem::queue::spin_budget;
        let set = SemSet::new(2).unwrap();
        set.set_all(&[1, 1]).unwrap();
        let set = set.shared();
        let take = [SemBuf::new(1, -1, 0), SemBuf::new(0, -1, 0)];
        assert!(set.polls_quiet_before_queueing(&take, false));
        assert_eq!(
            set.poll_quiet(&take, None, spin_budget()),
            Polled::Done(Ok(()))
        );
        assert_eq!((set.word_value(0), set.word_value(1)), (0, 0));
        assert!(polls(set, 1) >= 1, "counted on the first semaphore named");
    }

    #[test]
    fn a_call_on_two_semaphores_never_polls_past_a_queued_sleeper() {
        use crate::sem::queue::spin_budget;
        // A sleeper queued on one of the call's semaphores: the poller
        // gives up at its first look and queues too, even though both
        // values would let it through (a poller that ignored the flag would
        // spin until its budget ran out instead).
        let set = SemSet::new(2).unwrap();
        set.set_all(&[1, 1]).unwrap();
        let set = set.shared();
        let held = set.lock_one(1);
        let queued = Sleeper::new(&[SemBuf::new(1, -2, 0)], None, 0, false);
        set.with_sem_lists(&held, 1, |l| l.alter.push_back(NodeRef::new(&queued)));
        set.unlock(held);
        let take = [SemBuf::new(0, -1, 0), SemBuf::new(1, -1, 0)];
        assert_eq!(set.poll_quiet(&take, None, spin_budget()), Polled::Queue);
        assert_eq!((set.word_value(0), set.word_value(1)), (1, 1));
        assert_eq!(polls(set, 0), 1, "one look, then it queues");
        let held = set.lock_one(1);
        set.with_sem_lists(&held, 1, |l| drop(core::mem::take(&mut l.alter)));
        set.unlock(held);
        // In global mode it queues at once as well.
        set_global_mode(set, true);
        assert_eq!(set.poll_quiet(&take, None, spin_budget()), Polled::Queue);
        set_global_mode(set, false);
    }

    #[test]
    fn a_call_that_would_go_through_leaves_a_lasting_lock_to_the_locked_path() {
        use crate::sem::queue::spin_budget;
        let sems = SemSet::new(2).unwrap();
        sems.set_all(&[1, 1]).unwrap();
        let set = sems.shared();
        let take = [SemBuf::new(0, -1, 0), SemBuf::new(1, -1, 0)];
        // Semaphore 1 locked by a holder that stays: the poll waits about
        // one context switch, then leaves it to the locked path (a poll that
        // waited on would spend its whole budget: Spent).
        let held = set.lock_one(1);
        assert_eq!(set.poll_quiet(&take, None, 1 << 20), Polled::Queue);
        assert!(polls(set, 0) >= 1);
        set.unlock(held);
        // Locked while the values would block: the poll waits on (here until
        // its deadline, already passed, ends it after one look).
        sems.set_value(0, 0).unwrap();
        let held = set.lock_one(1);
        let past = Some(Instant::now());
        assert_eq!(set.poll_quiet(&take, past, spin_budget()), Polled::Spent);
        set.unlock(held);
    }

    #[test]
    fn only_calls_the_quiet_path_takes_poll_before_queueing() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        let polls = |sops: &[SemBuf], dupsop| set.polls_quiet_before_queueing(sops, dupsop);
        let (down, up) = (SemBuf::new(0, -1, 0), SemBuf::new(1, 1, 0));
        assert!(polls(&[down, up], false));
        assert!(polls(&[SemBuf::new(0, 0, 0), up], false), "a wait for zero");
        assert!(!polls(&[down, up], true), "a semaphore named twice");
        assert!(
            !polls(&[up, SemBuf::new(2, 1, 0)], false),
            "posts never block"
        );
        assert!(!polls(&[down, SemBuf::new(1, 1, SEM_UNDO)], false));
        assert!(!polls(&[down, SemBuf::new(1, 1, IPC_NOWAIT)], false));
        assert!(!polls(&[down, SemBuf::new(3, 1, 0)], false), "out of range");
        assert!(!polls(&[down], false), "a single operation polls lock-free");
        assert!(!polls(&[up; QUIET_MAX + 1], false));
    }

    #[test]
    fn only_a_lock_found_taken_counts_a_lock_wait() {
        let set = SemSet::new(2).unwrap();
        let shared = set.shared();
        set_global_mode(shared, true);
        let before = set.counters().lock_waits;
        // Sent from the word to the global lock, which is free: no wait.
        let held = shared.lock_one(0);
        assert!(held.is_global());
        shared.unlock(held);
        assert_eq!(set.counters().lock_waits, before);
        // The global lock taken: one wait, counted before it blocks.
        let held = shared.lock_global();
        std::thread::scope(|s| {
            let locker = s.spawn(|| shared.unlock(shared.lock_one(1)));
            let deadline = Instant::now() + std::time::Duration::from_secs(10);
            while set.counters().lock_waits == before && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(set.counters().lock_waits, before + 1);
            shared.unlock(held);
            locker.join().unwrap();
        });
        set_global_mode(shared, false);
    }

    #[test]
    fn lock_for_takes_the_lock_of_every_semaphore_named() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        let one = [SemBuf::new(1, 1, 0)];
        let held = set.lock_for(&one);
        assert!(held.covers(1) && !held.covers(0));
        set.unlock(held);
        let two = [
            SemBuf::new(2, 1, 0),
            SemBuf::new(0, -1, 0),
            SemBuf::new(2, 1, 0),
        ];
        let held = set.lock_for(&two);
        assert!(!held.is_global() && held.covers(0) && held.covers(2) && !held.covers(1));
        assert_eq!(
            (flags(set, 0), flags(set, 1), flags(set, 2)),
            (word::LOCKED, 0, word::LOCKED)
        );
        set.unlock(held);
        assert_eq!((flags(set, 0), flags(set, 2)), (0, 0));
    }

    #[test]
    fn unlocking_publishes_whether_sleepers_wait() {
        let set = SemSet::new(1).unwrap();
        let set = set.shared();
        let sops = [SemBuf::new(0, -1, 0)];
        let sleeper = Sleeper::new(&sops, None, 0, false);
        let node = NodeRef::new(&sleeper);
        let held = set.lock_one(0);
        set.with_sem_lists(&held, 0, |l| l.alter.push_back(node));
        set.unlock(held);
        assert_eq!(flags(set, 0), word::SLEEPERS);
        let held = set.lock_one(0);
        set.with_sem_lists(&held, 0, |l| drop(core::mem::take(&mut l.alter)));
        set.unlock(held);
        assert_eq!(flags(set, 0), 0);
    }

    #[test]
    fn lock_free_operations_only_on_a_quiet_semaphore() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        // Global mode: the locked path.
        let held = set.lock_global();
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 1, 0)), None);
        set.unlock(held);
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 2, 0)), Some(Ok(())));
        assert_eq!(set.word_value(0), 2);
        assert_eq!(set.try_lock_free(&SemBuf::new(0, -2, 0)), Some(Ok(())));
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 0, 0)), Some(Ok(())));
        // A block: EAGAIN under IPC_NOWAIT, else the locked path to sleep.
        let take = SemBuf::new(0, -1, IPC_NOWAIT);
        assert_eq!(set.try_lock_free(&take), Some(Err(SemError::Again)));
        assert_eq!(set.try_lock_free(&SemBuf::new(0, -1, 0)), None);
        // SEM_UNDO and a bad number always go the locked path.
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 1, SEM_UNDO)), None);
        assert_eq!(set.try_lock_free(&SemBuf::new(2, 1, 0)), None);
        // A holder's LOCKED flag keeps it off.
        let held = set.lock_one(1);
        assert_eq!(set.try_lock_free(&SemBuf::new(1, 1, 0)), None);
        set.unlock(held);
        assert_eq!(set.try_lock_free(&SemBuf::new(1, 1, 0)), Some(Ok(())));
        assert_eq!((set.word_value(0), set.word_value(1)), (0, 1));
    }

    #[test]
    fn a_quiet_call_runs_without_the_full_path_and_leaves_nothing_locked() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        let sb = SemBuf::new;
        assert_eq!(set.try_quiet(&[sb(2, 2, 0), sb(0, 1, 0)]), Some(Ok(())));
        assert_eq!((set.word_value(0), set.word_value(2)), (1, 2));
        // Three, through the dispatch, ending where they started.
        let three = [sb(1, 1, 0), sb(2, -2, 0), sb(0, -1, 0)];
        assert_eq!(set.try_fast(&three), Some(Ok(())));
        assert_eq!(
            set.try_fast(&[sb(0, 1, 0), sb(2, 2, 0), sb(1, -1, 0)]),
            Some(Ok(()))
        );
        // The first operation that cannot proceed decides, in array order.
        let blocked = [sb(1, -1, IPC_NOWAIT), sb(0, i16::MAX, 0)];
        assert_eq!(set.try_quiet(&blocked), Some(Err(SemError::Again)));
        let range = [sb(0, i16::MAX, 0), sb(1, -1, IPC_NOWAIT)];
        assert_eq!(set.try_quiet(&range), Some(Err(SemError::Range)));
        // A block that must sleep, SEM_UNDO, a semaphore named twice, a
        // number out of range: the full path, nothing changed.
        assert_eq!(set.try_quiet(&[sb(1, -1, 0), sb(0, 1, 0)]), None);
        assert_eq!(set.try_quiet(&[sb(0, 1, SEM_UNDO), sb(1, 1, 0)]), None);
        assert_eq!(set.try_quiet(&[sb(0, 1, 0), sb(0, 1, 0)]), None);
        assert_eq!(set.try_quiet(&[sb(0, 1, 0), sb(3, 1, 0)]), None);
        // A flag on any semaphore (here a holder's lock) sends it there too,
        // and gives back the locks taken before.
        let held = set.lock_one(2);
        assert_eq!(set.try_quiet(&[sb(0, 1, 0), sb(2, 1, 0)]), None);
        set.unlock(held);
        for num in 0..3 {
            assert_eq!(flags(set, num), 0, "semaphore {num}");
        }
        assert_eq!(
            (set.word_value(0), set.word_value(1), set.word_value(2)),
            (1, 0, 2)
        );
    }

    #[test]
    fn merging_moves_alter_sleepers_to_the_global_list_and_back() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        let sops: Vec<[SemBuf; 1]> = [0u16, 2, 2, 1]
            .iter()
            .map(|&num| [SemBuf::new(num, -1, 0)])
            .collect();
        let sleepers: Vec<Sleeper> = sops
            .iter()
            .map(|s| Sleeper::new(s, None, 0, false))
            .collect();
        let nodes: Vec<NodeRef> = sleepers.iter().map(NodeRef::new).collect();
        for &node in &nodes {
            // SAFETY: the sleeper is alive for the whole test.
            let num = usize::from(unsafe { node.get().sops() }[0].num);
            let held = set.lock_one(num);
            set.with_sem_lists(&held, num, |l| l.alter.push_back(node));
            set.unlock(held);
        }
        let held = set.lock_global();
        set.merge_queues(&held);
        // The kernel splices each semaphore's list at the head, in
        // semaphore order: the last semaphore's sleepers come first.
        let merged: Vec<NodeRef> = set.with_global_alter(&held, |l| l.iter().copied().collect());
        assert_eq!(merged, [nodes[1], nodes[2], nodes[3], nodes[0]]);
        for num in 0..3 {
            assert!(set.with_sem_lists(&held, num, |l| l.alter.is_empty()));
        }
        // No complex sleeper counted: the unlock moves them back, in order.
        set.unlock(held);
        let held = set.lock_global();
        assert!(set.with_global_alter(&held, |l| l.is_empty()));
        let on =
            |num| set.with_sem_lists(&held, num, |l| l.alter.iter().copied().collect::<Vec<_>>());
        assert_eq!(on(0), [nodes[0]]);
        assert_eq!(on(1), [nodes[3]]);
        assert_eq!(on(2), [nodes[1], nodes[2]]);
        for num in 0..3 {
            set.with_sem_lists(&held, num, |l| drop(core::mem::take(&mut l.alter)));
        }
        set.unlock(held);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sem::SemSet;
    use loom::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// A call on two semaphores that would block polls their words, then
    /// queues, while another thread makes the post it waits for. The post
    /// lands while it polls (the call completes on the quiet path) or after
    /// it gave up and queued in global mode (the post completes it); either
    /// way it succeeds and every unit is taken once. The sleepers of the
    /// other models never poll (their budget is 0 under loom); this one gets
    /// two looks. loom runs a thread that yields, as a poll does, only once
    /// the others block, yield or end, so the poster yields `delay` times
    /// before it posts: 0 lets the poll find the post, 3 makes it give up.
    #[test]
    fn a_call_on_two_semaphores_polls_then_queues_for_the_post_it_waits_for() {
        static POLLED_THROUGH: AtomicUsize = AtomicUsize::new(0);
        static QUEUED: AtomicUsize = AtomicUsize::new(0);
        for delay in [0, 3] {
            let mut model = loom::model::Builder::new();
            model.max_branches = 20_000;
            model.check(move || {
                let set = Arc::new(SemSet::new(2).unwrap());
                set.set_value(1, 1).unwrap();
                let caller = {
                    let set = Arc::clone(&set);
                    loom::thread::spawn(move || {
                        let take = [SemBuf::new(0, -1, 0), SemBuf::new(1, -1, 0)];
                        match set.shared().poll_quiet(&take, None, 2) {
                            Polled::Done(done) => {
                                POLLED_THROUGH.fetch_add(1, Ordering::Relaxed);
                                done
                            }
                            Polled::Spent | Polled::Queue => {
                                QUEUED.fetch_add(1, Ordering::Relaxed);
                                set.semop(&take)
                            }
                        }
                    })
                };
                for _ in 0..delay {
                    loom::thread::yield_now();
                }
                set.semop(&[SemBuf::new(0, 1, 0)]).unwrap();
                assert_eq!(caller.join().unwrap(), Ok(()));
                assert_eq!(set.get_all(), Ok(vec![0, 0]));
                assert_eq!((set.ncnt(0), set.ncnt(1)), (Ok(0), Ok(0)));
            });
        }
        assert!(
            POLLED_THROUGH.load(Ordering::Relaxed) > 0,
            "never polled through"
        );
        assert!(
            QUEUED.load(Ordering::Relaxed) > 0,
            "never queued after polling"
        );
    }
}
