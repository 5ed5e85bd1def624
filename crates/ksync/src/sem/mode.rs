//! How a call reaches a semaphore: without a lock, under the semaphore's own
//! lock, or under the set's global lock (the kernel's `sem_lock`,
//! `complexmode_enter` and `complexmode_tryleave`), and which of those locks
//! protects what.
//!
//! # Per-semaphore and global mode
//!
//! Every semaphore has its own lock, and the set has a global one. A call
//! with one operation takes only its semaphore's lock; a call with several,
//! and every control call, takes the global lock and switches the set to
//! global mode: `use_global` is set to [`HYSTERESIS`] and every semaphore
//! lock is taken and released once, which waits out the single-operation
//! calls already inside. A single-operation call reads `use_global` after
//! taking its semaphore's lock (acquire) and falls back to the global lock
//! while it is non-zero. Each global unlock with no complex sleeper left
//! counts `use_global` down; the last step is a release store of 0 that
//! pairs with that acquire load, so the next per-semaphore holder sees
//! everything the global holders did.
//!
//! Which lock a call takes is decided in one place, [`SetShared::lock_for`]
//! (and the two functions it calls); everything else asks the [`Held`]
//! token it was given. Today any call with more than one operation takes the
//! global lock, as the kernel does; a finer rule (several semaphore locks in
//! order, say) would change `lock_for`, `Held` and [`Held::covers`], and
//! leave the evaluation and the wait-list scans as they are.
//!
//! # Without a lock
//!
//! A single operation without `SEM_UNDO` on a semaphore nobody waits on takes
//! no lock at all ([`SetShared::try_lock_free`]): the value shares a word
//! with four flags (`word.rs`), and with all four clear the operation is one
//! compare-and-swap. Such an operation can neither enable nor disturb
//! anybody. A per-semaphore holder sets `HELD` right after taking the lock;
//! entering global mode sets `GLOBAL` on every semaphore in the same pass
//! that waits out their holders; each clears its flag (and recomputes
//! `SLEEPERS`) with a release store when it is done ([`SetShared::unlock`]),
//! which the next lock-free operation's acquire load reads. So under a lock
//! the value can still be read and written with plain loads and stores.
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
use super::lock::{GlobalLock, RawSemLock};
use super::queue::WaitList;
use super::stamp::current_pid;
use super::state::{SemLists, SetShared};
use super::word::{self, LockFree, GLOBAL, HELD};
use super::{SemBuf, IPC_NOWAIT, SEM_UNDO};
use crate::sync::Ordering;

/// Global unlocks a set stays in global mode after a complex operation (the
/// kernel's `USE_GLOBAL_LOCK_HYSTERESIS`): switching back and forth costs a
/// pass over every semaphore lock. Under loom 1, so that models reach
/// per-semaphore mode after a single global unlock.
pub(super) const HYSTERESIS: u32 = if cfg!(loom) { 1 } else { 10 };

fn acquire<L: RawMutex>(lock: &L) -> L::Guard {
    lock.lock()
}

/// # Safety
///
/// `guard` came from [`acquire`] on this `lock`.
unsafe fn release<L: RawMutex>(lock: &L, guard: L::Guard) {
    // SAFETY: per the caller's contract.
    unsafe { lock.unlock(guard) }
}

type GlobalGuard = <GlobalLock as RawMutex>::Guard;
type SemGuard = <RawSemLock as RawMutex>::Guard;

/// Which of the set's locks the caller holds.
pub(super) enum Held {
    /// Semaphore `.0`'s own lock, in per-semaphore mode.
    Sem(usize, SemGuard),
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
            Held::Sem(n, _) => *n == num,
            Held::Global(_) => true,
        }
    }
}

impl SetShared {
    /// The counters of the lock domain `held` names.
    pub(super) fn counters(&self, held: &Held) -> &Counters {
        match held {
            Held::Sem(n, _) => &self.sems[*n].counters,
            Held::Global(_) => &self.global.counters,
        }
    }

    // ---- locking ----------------------------------------------------------

    /// Takes the lock for a call with one operation on `num` (the kernel's
    /// `sem_lock` with `nsops == 1`).
    fn lock_single(&self, num: usize) -> Held {
        let sem = &self.sems[num];
        if self.mode.use_global.load(Ordering::Relaxed) == 0 {
            let guard = acquire(&sem.lock);
            // Pairs with the release store of 0 in `unlock` that ends global
            // mode, and with `lock_global`'s pass over the semaphore locks
            // (the kernel's complexmode_enter), which takes this lock.
            if self.mode.use_global.load(Ordering::Acquire) == 0 {
                // Keeps lock-free operations off the value from now on; the
                // acquire RMW also reads the latest value they left (pairs
                // with their release compare-and-swap in `try_lock_free`).
                sem.word.fetch_or(HELD, Ordering::Acquire);
                return Held::Sem(num, guard);
            }
            // SAFETY: we took this lock just above.
            unsafe { release(&sem.lock, guard) };
        }
        let global = acquire(&self.global.lock);
        if self.mode.use_global.load(Ordering::Relaxed) == 0 {
            // Global mode ended while we waited. It cannot start again while
            // we hold the global lock, so no re-check is needed.
            let guard = acquire(&sem.lock);
            // As above: pairs with `try_lock_free`'s release.
            sem.word.fetch_or(HELD, Ordering::Acquire);
            // SAFETY: taken just above.
            unsafe { release(&self.global.lock, global) };
            return Held::Sem(num, guard);
        }
        Held::Global(global)
    }

    /// Takes the global lock and enters global mode (complex operations,
    /// control calls, undo, removal).
    pub(super) fn lock_global(&self) -> Held {
        let guard = acquire(&self.global.lock);
        let was_global = self.mode.use_global.load(Ordering::Relaxed) > 0;
        self.mode.use_global.store(HYSTERESIS, Ordering::Relaxed);
        if !was_global {
            // Wait out every per-semaphore holder: whoever takes a semaphore
            // lock after this pass sees `use_global` set and backs off.
            // The GLOBAL flag stops lock-free operations the same way.
            for sem in self.sems.iter() {
                let g = acquire(&sem.lock);
                // Pairs with the release compare-and-swap of a lock-free
                // operation in `try_lock_free`: its value is ours to read.
                sem.word.fetch_or(GLOBAL, Ordering::Acquire);
                // SAFETY: taken just above.
                unsafe { release(&sem.lock, g) };
            }
        }
        Held::Global(guard)
    }

    /// The lock a call with these operations needs.
    pub(super) fn lock_for(&self, sops: &[SemBuf]) -> Held {
        if sops.len() == 1 {
            self.lock_single(usize::from(sops[0].num))
        } else {
            self.lock_global()
        }
    }

    pub(super) fn unlock(&self, held: Held) {
        match &held {
            Held::Sem(num, _) => self.publish_word(&held, *num, 0),
            Held::Global(_) => {
                if self.global.complex_count.load(Ordering::Relaxed) == 0 {
                    self.unmerge_queues();
                    let n = self.mode.use_global.load(Ordering::Relaxed);
                    if n <= 1 {
                        // Leave global mode: lift GLOBAL from every
                        // semaphore, then publish everything done in global
                        // mode to the next per-semaphore holder (see
                        // lock_single). Nothing below touches a semaphore.
                        for num in 0..self.nsems() {
                            self.publish_word(&held, num, GLOBAL);
                        }
                        // Pairs with the acquire re-check of `use_global`
                        // in `lock_single`.
                        self.mode.use_global.store(0, Ordering::Release);
                    } else {
                        self.mode.use_global.store(n - 1, Ordering::Relaxed);
                    }
                }
            }
        }
        match held {
            // SAFETY: `held` proves we hold this lock.
            Held::Sem(num, guard) => unsafe { release(&self.sems[num].lock, guard) },
            // SAFETY: `held` proves we hold the global lock.
            Held::Global(guard) => unsafe { release(&self.global.lock, guard) },
        }
    }

    /// Ends a locked stretch on semaphore `num`: clears `HELD` and `lift`,
    /// and sets `SLEEPERS` to whether its lists are non-empty, with a
    /// release store that hands the value to the next lock-free operation
    /// (pairs with the acquire load and compare-and-swap in
    /// `try_lock_free`).
    fn publish_word(&self, held: &Held, num: usize, lift: u32) {
        let word = &self.sems[num].word;
        let current = word.load(Ordering::Relaxed);
        let next = word::published(current, lift, self.has_sleepers(held, num));
        word.store(next, Ordering::Release);
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

    /// Whether semaphore `num` has sleepers on its own lists.
    fn has_sleepers(&self, held: &Held, num: usize) -> bool {
        self.with_sem_lists(held, num, |l| !l.alter.is_empty() || !l.zero.is_empty())
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
        // The acquires pair with the release store in `publish_word` (the
        // last locked stretch) and with the release half of the previous
        // lock-free compare-and-swap; that release pairs with the next one's
        // acquire and with the acquire `fetch_or`s in `lock_single` and
        // `lock_global`.
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
        let pid = current_pid();
        let sem_pid = &self.sems[num].pid;
        // Racy but harmless: every thread of the process stores the same pid.
        if sem_pid.load(Ordering::Relaxed) != pid {
            sem_pid.store(pid, Ordering::Relaxed);
        }
        self.touch_otime(num);
        Some(Ok(()))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::queue::{NodeRef, Sleeper};
    use crate::sem::{SemSet, IPC_NOWAIT, SEM_UNDO};

    fn flags(set: &SetShared, num: usize) -> u32 {
        set.sems[num].word.load(Ordering::Relaxed) & !word::VALUE_MASK
    }

    /// Ends global mode the way calls do: HYSTERESIS global unlocks.
    fn leave_global_mode(set: &SetShared) {
        for _ in 0..HYSTERESIS {
            let held = set.lock_single(0);
            assert!(held.is_global());
            set.unlock(held);
        }
        assert_eq!(set.mode.use_global.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_new_set_is_global_until_the_hysteresis_runs_out() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        assert_eq!(set.mode.use_global.load(Ordering::Relaxed), HYSTERESIS);
        for num in 0..3 {
            assert_eq!(flags(set, num), GLOBAL);
        }
        for left in (1..HYSTERESIS).rev() {
            let held = set.lock_single(1);
            assert!(held.is_global(), "single operations take the global lock");
            set.unlock(held);
            assert_eq!(set.mode.use_global.load(Ordering::Relaxed), left);
            assert_eq!(flags(set, 1), GLOBAL);
        }
        let held = set.lock_single(1);
        set.unlock(held);
        // The last global unlock lifted GLOBAL from every semaphore.
        for num in 0..3 {
            assert_eq!(flags(set, num), 0);
        }
        let held = set.lock_single(1);
        assert!(matches!(held, Held::Sem(1, _)));
        assert_eq!(flags(set, 1), HELD);
        assert_eq!(flags(set, 0), 0);
        set.unlock(held);
        assert_eq!(flags(set, 1), 0);
    }

    #[test]
    fn a_global_lock_restarts_the_hysteresis_and_flags_every_semaphore() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        leave_global_mode(set);
        let held = set.lock_global();
        assert!(held.is_global());
        assert_eq!(set.mode.use_global.load(Ordering::Relaxed), HYSTERESIS);
        assert_eq!((flags(set, 0), flags(set, 1)), (GLOBAL, GLOBAL));
        set.unlock(held);
        assert_eq!(set.mode.use_global.load(Ordering::Relaxed), HYSTERESIS - 1);
    }

    #[test]
    fn a_complex_sleeper_keeps_the_set_in_global_mode() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        set.global.complex_count.store(1, Ordering::Relaxed);
        for _ in 0..2 * HYSTERESIS {
            let held = set.lock_single(0);
            assert!(held.is_global());
            set.unlock(held);
        }
        assert_eq!(set.mode.use_global.load(Ordering::Relaxed), HYSTERESIS);
        set.global.complex_count.store(0, Ordering::Relaxed);
        leave_global_mode(set);
    }

    #[test]
    fn lock_for_takes_the_global_lock_for_more_than_one_operation() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        leave_global_mode(set);
        let one = [SemBuf::new(1, 1, 0)];
        let held = set.lock_for(&one);
        assert!(matches!(held, Held::Sem(1, _)));
        assert!(held.covers(1) && !held.covers(0));
        set.unlock(held);
        let two = [SemBuf::new(1, 1, 0), SemBuf::new(1, -1, 0)];
        let held = set.lock_for(&two);
        assert!(held.is_global() && held.covers(0) && held.covers(1));
        set.unlock(held);
    }

    #[test]
    fn unlocking_publishes_whether_sleepers_wait() {
        let set = SemSet::new(1).unwrap();
        let set = set.shared();
        leave_global_mode(set);
        let sops = [SemBuf::new(0, -1, 0)];
        let sleeper = Sleeper::new(&sops, None, 0, false);
        let node = NodeRef::new(&sleeper);
        let held = set.lock_single(0);
        set.with_sem_lists(&held, 0, |l| l.alter.push_back(node));
        set.unlock(held);
        assert_eq!(flags(set, 0), word::SLEEPERS);
        let held = set.lock_single(0);
        set.with_sem_lists(&held, 0, |l| l.alter.clear());
        set.unlock(held);
        assert_eq!(flags(set, 0), 0);
    }

    #[test]
    fn lock_free_operations_only_on_a_quiet_semaphore() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        // Global mode: the locked path.
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 1, 0)), None);
        leave_global_mode(set);
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 2, 0)), Some(Ok(())));
        assert_eq!(set.value(0), 2);
        assert_eq!(set.try_lock_free(&SemBuf::new(0, -2, 0)), Some(Ok(())));
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 0, 0)), Some(Ok(())));
        // A block: EAGAIN under IPC_NOWAIT, else the locked path to sleep.
        let take = SemBuf::new(0, -1, IPC_NOWAIT);
        assert_eq!(set.try_lock_free(&take), Some(Err(SemError::Again)));
        assert_eq!(set.try_lock_free(&SemBuf::new(0, -1, 0)), None);
        // SEM_UNDO and a bad number always go the locked path.
        assert_eq!(set.try_lock_free(&SemBuf::new(0, 1, SEM_UNDO)), None);
        assert_eq!(set.try_lock_free(&SemBuf::new(2, 1, 0)), None);
        // A holder's HELD flag keeps it off.
        let held = set.lock_single(1);
        assert_eq!(set.try_lock_free(&SemBuf::new(1, 1, 0)), None);
        set.unlock(held);
        assert_eq!(set.try_lock_free(&SemBuf::new(1, 1, 0)), Some(Ok(())));
        assert_eq!((set.value(0), set.value(1)), (0, 1));
    }

    #[test]
    fn merging_moves_alter_sleepers_to_the_global_list_and_back() {
        let set = SemSet::new(3).unwrap();
        let set = set.shared();
        leave_global_mode(set);
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
            let held = set.lock_single(num);
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
            set.with_sem_lists(&held, num, |l| l.alter.clear());
        }
        set.unlock(held);
    }
}
