//! The work done under a set's lock: performing a call, queueing a sleeper,
//! completing the sleepers a change enabled, adopting what dead processes
//! left behind. Every change is one journalled transaction (`journal.rs`)
//! that leaves the set in a state some sequence of whole calls could have
//! produced.

use std::cell::RefCell;
use std::sync::Arc;
use std::thread::LocalKey;

use super::eval::{adjustment, adjustment_word, evaluate_into, value, Eval, Outcome};
use super::journal::{roll_back, Tx};
use super::layout::{
    header, proc_slot, sem_word, sleeper, split_owner, summary, NPROC, NSLEEP, READY, SLEEPER_DONE,
    SLEEPER_FREE, SLEEPER_QUEUED, SLOT_FREE, SLOT_LIVE,
};
use super::lock::{lock, unlock, Taken};
use super::map::Mapping;
use super::procs::{holds_incarnation, incarnation_alive, registry, Me};
use super::share;
use super::wake::Change;
use crate::futex::wake_shared;
use crate::futex_batch::sleeper_cpu;
use crate::sem::counters::Counters;
use crate::sem::stamp::{current_pid, now_secs};
use crate::sem::{SemBuf, SemError, SEMOPM, SEMVMX, SEM_UNDO};
use crate::sync::Ordering;

/// The set's lock, held; dropping it publishes the results of the sleepers
/// it completed and wakes them, after the lock is released.
pub(super) struct Locked<'a> {
    pub(super) map: &'a Arc<Mapping>,
    pub(super) me: Me,
    /// Semaphores whose flags must be recomputed before the lock is released.
    pub(super) touched: Vec<usize>,
    /// Sleeper slots whose results were committed: to publish and wake.
    pub(super) woken: Vec<usize>,
    /// The evaluation of the caller's own operations.
    eval: Eval,
}

/// A queued sleeper's operations in `map`, checked against the layout, into
/// `ops`. Under the lock, the sleeper's; without it (a read-only handle's
/// count, [`count_live_sleepers_in`]), words another process may be changing,
/// which the checks keep in bounds.
fn sleeper_ops_into(map: &Mapping, slot: usize, ops: &mut Vec<SemBuf>) -> Result<(), SemError> {
    let layout = &map.layout;
    ops.clear();
    let nsops = map.load(layout.sleeper(slot, sleeper::NSOPS)) as usize;
    if nsops == 0 || nsops > SEMOPM {
        return Err(SemError::Invalid);
    }
    for i in 0..nsops {
        let packed = map.load(layout.sleeper(slot, sleeper::OPS + 2 * i));
        let flags = map.load(layout.sleeper(slot, sleeper::OPS + 2 * i + 1));
        let sop = SemBuf::new(packed as u16, (packed >> 16) as u16 as i16, flags as i16);
        if usize::from(sop.num) >= layout.nsems {
            return Err(SemError::Invalid);
        }
        ops.push(sop);
    }
    Ok(())
}

/// `map`'s queue in order, checked: every link names a slot, and there are
/// no more entries than slots (a cycle in a corrupt file ends here).
fn queue_of(map: &Mapping, out: &mut Vec<usize>) -> Result<(), SemError> {
    out.clear();
    let mut next = map.load(header::QUEUE_HEAD) as usize;
    while next != 0 {
        if next > NSLEEP || out.len() == NSLEEP {
            return Err(SemError::Invalid);
        }
        out.push(next - 1);
        next = map.load(map.layout.link(next - 1)) as usize;
    }
    Ok(())
}

/// Sleepers counted by `GETNCNT` (`zero` false) or `GETZCNT` for `num`:
/// those whose blocking operation is on `num`, as the kernel counts them.
/// Exact under the lock ([`Locked::count_sleepers`]), after a reap has
/// taken the dead's sleepers off the queue; a read-only handle, which
/// cannot take the lock, counts without it with
/// [`count_live_sleepers_in`].
fn count_sleepers_in(map: &Mapping, num: usize, zero: bool) -> Result<usize, SemError> {
    count_sleepers_where(map, num, zero, |_| true)
}

/// [`count_sleepers_in`] for a read-only handle, which cannot reap:
/// without the lock, and leaving out the sleepers of dead processes,
/// which the locked count reaps first and the kernel takes off its queues
/// as a process dies. A process is asked once per walk (a `fcntl`), and
/// only for a sleeper that would count. `F_GETLK` needs no write access,
/// and a read-only mapping never holds a slot, so none of the liveness
/// locks asked about is this process's own (which would look free).
pub(super) fn count_live_sleepers_in(
    map: &Mapping,
    num: usize,
    zero: bool,
) -> Result<usize, SemError> {
    let mut known: [Option<bool>; NPROC] = [None; NPROC];
    count_sleepers_where(map, num, zero, |owner| {
        let (slot, gen) = split_owner(owner);
        // A slot out of range (a corrupt file), or one freed or taken by a
        // later process since, names a process that is gone, whose
        // sleeper the kernel would have taken off its queue (under the
        // lock, `drop_orphan_sleepers` frees such sleepers).
        if slot >= NPROC || !holds_incarnation(map, slot, gen) {
            return false;
        }
        *known[slot].get_or_insert_with(|| incarnation_alive(map, slot, gen))
    })
}

/// The sleepers of [`count_sleepers_in`] whose owner word `counts` accepts.
fn count_sleepers_where(
    map: &Mapping,
    num: usize,
    zero: bool,
    mut counts: impl FnMut(u32) -> bool,
) -> Result<usize, SemError> {
    let mut queue = Vec::new();
    queue_of(map, &mut queue)?;
    let mut ops = Vec::new();
    let mut n = 0;
    for slot in queue {
        sleeper_ops_into(map, slot, &mut ops)?;
        let at = map.load(map.layout.sleeper(slot, sleeper::BLOCKING)) as usize;
        if let Some(sop) = ops.get(at) {
            if usize::from(sop.num) == num
                && (sop.op == 0) == zero
                && counts(map.load(map.layout.sleeper(slot, sleeper::OWNER)))
            {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// The buffers a [`Locked`] works in, kept per thread between calls: a call
/// on the locked path would otherwise allocate and free several small
/// vectors, which cost about as much as the rest of the call.
#[derive(Default)]
struct Scratch {
    touched: Vec<usize>,
    woken: Vec<usize>,
    eval: Eval,
}

std::thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// This thread's buffers in `key`; fresh ones if they are in use (a call
/// from a signal handler) or gone (the thread is exiting).
pub(super) fn take_buffers<T: Default>(key: &'static LocalKey<RefCell<T>>) -> T {
    key.try_with(|s| s.try_borrow_mut().map(|mut s| std::mem::take(&mut *s)).ok())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Gives the buffers taken from `key` back, keeping their capacity.
pub(super) fn give_back<T>(key: &'static LocalKey<RefCell<T>>, buffers: T) {
    let _ = key.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            *s = buffers;
        }
    });
}

impl<'a> Locked<'a> {
    /// Takes the lock. Taken over from a dead holder, the lock may come
    /// with a half-done transaction, which is rolled back first (a corrupt
    /// journal: `EINVAL`), and with sleepers a committed change enabled but
    /// the holder did not complete, which are completed next
    /// ([`take_over`](Self::take_over)).
    ///
    /// Always inline: out of line, the caller copies the returned `Locked`
    /// (three words, four vectors and an outcome) out of the `Result`, and
    /// where that copy's wide loads straddle the callee's narrower stores
    /// the load waits for them to retire (a store-forwarding stall). A
    /// layout change elsewhere in `locked_op` put one on every locked call:
    /// a call on two semaphores took 228-241 ns against 215-219 before it,
    /// and takes 220-223 inlined (`ksync-lab semop`, 2-core AMD guest).
    #[inline(always)]
    pub(super) fn enter(map: &'a Arc<Mapping>, me: Me) -> Result<Locked<'a>, SemError> {
        if map.poisoned() {
            return Err(SemError::Invalid);
        }
        let taken = lock(map, me);
        let Scratch {
            touched,
            woken,
            eval,
        } = take_buffers(&SCRATCH);
        let mut held = Locked {
            map,
            me,
            touched,
            woken,
            eval,
        };
        // A journal left open by a live holder means a corrupt file: the
        // last holder committed or died, and a takeover rolls back. Either
        // way `held` releases the lock when this returns an error.
        if taken == Taken::FromDead {
            held.take_over()?;
        } else if map.load(header::JOURNAL_LEN) != 0 {
            return Err(SemError::Invalid);
        }
        Ok(held)
    }

    /// Finishes what a holder that died left: rolls back its open
    /// transaction, then completes every sleeper the values let through.
    ///
    /// Why the completion: a holder that died after committing a change
    /// (`perform`, a reap's undo, `set_values`) and before completing the
    /// sleepers it enabled (`smart_update`) leaves them queued on values
    /// that would let them run, a state no sequence of whole calls leaves
    /// (the kernel's waker cannot die between the two). Every other call
    /// relies on that never being seen: [`reach_of`](Self::reach_of)
    /// narrows a search for the dead on it, and a call that finds its
    /// values short fails with `EAGAIN` where the kernel, having completed
    /// the sleeper, would have let it through. Out of line: rare, and
    /// `enter` stays small.
    #[cold]
    #[inline(never)]
    fn take_over(&mut self) -> Result<(), SemError> {
        let map = self.map;
        bump(map, header::TAKEOVERS, 1);
        if map.load(header::JOURNAL_LEN) != 0 {
            bump(map, header::ROLLBACKS, 1);
        }
        roll_back(map)?;
        // Flags are not journalled: recompute every semaphore's.
        self.touched.extend(0..map.nsems());
        // A set being removed fails its sleepers with EIDRM instead (the
        // caller answers EIDRM, and the sweep finishes a dead remover's
        // work): none may complete on its values.
        if !self.removed() {
            self.smart_update(Change::All);
        }
        Ok(())
    }

    fn layout(&self) -> &super::layout::Layout {
        &self.map.layout
    }

    pub(super) fn removed(&self) -> bool {
        self.map.load(header::FLAGS) & super::layout::REMOVED != 0
    }

    /// Keeps the lock-free path off semaphore `num` until the lock is released.
    pub(super) fn hold_sem(&mut self, num: usize) {
        self.map
            .word(self.layout().sem(num))
            .fetch_or(sem_word::LOCKED, Ordering::Acquire);
        self.touched.push(num);
    }

    /// Writes an evaluation's values and adjustments (for process slot
    /// `slot`) and the pids, in `tx`.
    pub(super) fn apply(&self, tx: &mut Tx<'_>, eval: &Eval, slot: usize, pid: u32) {
        let layout = self.layout();
        for &(num, v) in &eval.values {
            let word = self.map.load(layout.sem(num));
            tx.write(layout.sem(num), (word & !sem_word::VALUE) | v as u32);
            self.map.word(layout.pid(num)).store(pid, Ordering::Relaxed);
        }
        for &(num, adj) in &eval.adjs {
            tx.write(layout.adj(slot, num), adjustment_word(self.map, num, adj));
        }
    }

    /// Performs the caller's own operations, if they can be performed now.
    pub(super) fn perform(&mut self, sops: &[SemBuf]) -> Outcome {
        for sop in sops {
            self.hold_sem(usize::from(sop.num));
        }
        // The kernel gives a process its `sem_undo` for the set at its
        // first SEM_UNDO call, whatever the call's outcome. One store, set
        // once: a rollback need not take it back (a SEM_UNDO call was made).
        if sops.iter().any(|s| s.flags & SEM_UNDO != 0) {
            let undo = self
                .map
                .word(self.layout().proc(self.me.slot, proc_slot::UNDO));
            if undo.load(Ordering::Relaxed) == 0 {
                undo.store(1, Ordering::Relaxed);
            }
        }
        let mut eval = std::mem::take(&mut self.eval);
        evaluate_into(self.map, sops, self.me.slot, &mut eval);
        Counters::bump(&self.map.counters.attempts, 1);
        let outcome = eval.outcome;
        if outcome == Outcome::Done {
            let mut tx = Tx::begin(self.map);
            self.apply(&mut tx, &eval, self.me.slot, current_pid() as u32);
            tx.commit();
            touch_otime(self.map);
            if sops.iter().any(|s| s.op != 0) {
                self.smart_update(Change::Ops(sops));
            }
        }
        self.eval = eval;
        outcome
    }

    /// Queues the caller as a sleeper blocked at operation `blocking`;
    /// returns its slot. `ENOSPC` when [`NSLEEP`] threads already sleep:
    /// the caller frees the dead's slots first ([`make_room`](Self::make_room)).
    pub(super) fn enqueue(&mut self, sops: &[SemBuf], blocking: usize) -> Result<usize, SemError> {
        let tail = self.map.load(header::QUEUE_TAIL) as usize;
        if tail > NSLEEP {
            return Err(SemError::Invalid);
        }
        let slot = self.free_sleeper()?;
        let layout = *self.layout();
        let at = |field| layout.sleeper(slot, field);
        // The slot is free, so nobody reads these before the transaction
        // below makes it queued: no journal needed.
        for (i, sop) in sops.iter().enumerate() {
            let packed = u32::from(sop.num) | (u32::from(sop.op as u16) << 16);
            self.map
                .word(at(sleeper::OPS + 2 * i))
                .store(packed, Ordering::Relaxed);
            self.map
                .word(at(sleeper::OPS + 2 * i + 1))
                .store(sop.flags as u16 as u32, Ordering::Relaxed);
        }
        self.map
            .word(at(sleeper::STATUS))
            .store(super::layout::WAITING, Ordering::Relaxed);
        self.map
            .word(at(sleeper::CPU))
            .store(sleeper_cpu(), Ordering::Relaxed);
        self.map
            .word(layout.summary(slot))
            .store(summary::of(sops), Ordering::Relaxed);
        let mut tx = Tx::begin(self.map);
        tx.write(at(sleeper::NSOPS), sops.len() as u32);
        tx.write(at(sleeper::BLOCKING), blocking as u32);
        tx.write(at(sleeper::OWNER), self.me.owner());
        tx.write(at(sleeper::RESULT), 0);
        tx.write(layout.link(slot), 0);
        match tail {
            0 => tx.write(header::QUEUE_HEAD, slot as u32 + 1),
            tail => tx.write(layout.link(tail - 1), slot as u32 + 1),
        }
        tx.write(header::QUEUE_TAIL, slot as u32 + 1);
        self.count_complex(&mut tx, sops, true);
        for sop in sops {
            let num = usize::from(sop.num);
            let count = self.map.load(layout.waiter_count(num));
            tx.write(layout.waiter_count(num), count.saturating_add(1));
        }
        tx.write(at(sleeper::STATE), SLEEPER_QUEUED);
        tx.commit();
        self.map
            .word(header::SLEEP_HINT)
            .store(((slot + 1) % NSLEEP) as u32, Ordering::Relaxed);
        Ok(slot)
    }

    /// Whether a sleeper slot is free, for a call about to queue.
    pub(super) fn has_room(&self) -> bool {
        self.free_sleeper().is_ok()
    }

    /// Frees the sleeper slots the dead hold, whatever the rate limit of
    /// [`reap_if_due`](Self::reap_if_due) says: a call must not answer
    /// `ENOSPC` for a table full of sleepers nobody will ever collect
    /// (those of dead processes, and of slots that passed to others), and
    /// a full table is rare enough that searching every process then costs
    /// nothing on the paths that matter.
    pub(super) fn make_room(&mut self) {
        self.reap();
        self.drop_orphan_sleepers();
    }

    fn free_sleeper(&self) -> Result<usize, SemError> {
        let start = (self.map.load(header::SLEEP_HINT) as usize) % NSLEEP;
        (0..NSLEEP)
            .map(|i| (start + i) % NSLEEP)
            .find(|&s| self.map.load(self.layout().sleeper(s, sleeper::STATE)) == SLEEPER_FREE)
            .ok_or(SemError::NoSpace)
    }

    /// A queued sleeper's operations, checked against the layout.
    fn sleeper_ops(&self, slot: usize) -> Result<Vec<SemBuf>, SemError> {
        let mut ops = Vec::new();
        self.read_sleeper_ops(slot, &mut ops)?;
        Ok(ops)
    }

    /// [`sleeper_ops`](Self::sleeper_ops) into a buffer the caller reuses.
    pub(super) fn read_sleeper_ops(
        &self,
        slot: usize,
        ops: &mut Vec<SemBuf>,
    ) -> Result<(), SemError> {
        sleeper_ops_into(self.map, slot, ops)
    }

    /// The queue in order, checked: every link names a slot, and there are
    /// no more entries than slots (a cycle in a corrupt file ends here).
    fn queue(&self) -> Result<Vec<usize>, SemError> {
        let mut out = Vec::new();
        self.queue_into(&mut out)?;
        Ok(out)
    }

    /// [`queue`](Self::queue) into a buffer the caller reuses.
    pub(super) fn queue_into(&self, out: &mut Vec<usize>) -> Result<(), SemError> {
        queue_of(self.map, out)
    }

    /// Takes `slot`, at `place` in the queue, out of it and marks it done
    /// with `result`, in `tx`.
    pub(super) fn finish_sleeper(
        &mut self,
        tx: &mut Tx<'_>,
        place: Place,
        slot: usize,
        ops: &[SemBuf],
        result: u32,
    ) {
        let layout = *self.layout();
        // The link to `slot` (slot + 1, or 0 from the head); none when it
        // is not on the queue (a corrupt file).
        let link_to_it = match place {
            Place::Head => Some(0),
            Place::After(before) => Some(before as u32 + 1),
            Place::Absent => None,
        };
        if let Some(before) = link_to_it {
            let next = self.map.load(layout.link(slot));
            match before {
                0 => tx.write(header::QUEUE_HEAD, next),
                b => tx.write(layout.link(b as usize - 1), next),
            }
            if self.map.load(header::QUEUE_TAIL) as usize == slot + 1 {
                tx.write(header::QUEUE_TAIL, before);
            }
        }
        for sop in ops {
            let num = usize::from(sop.num);
            let count = self.map.load(layout.waiter_count(num));
            tx.write(layout.waiter_count(num), count.saturating_sub(1));
            self.touched.push(num);
        }
        self.count_complex(tx, ops, false);
        tx.write(layout.sleeper(slot, sleeper::RESULT), result);
        tx.write(layout.sleeper(slot, sleeper::STATE), SLEEPER_DONE);
    }

    /// Counts a sleeper of `ops` in (`queued`) or out of the complex
    /// counts, in `tx`: a sleeper of several operations in `COMPLEX`, and
    /// one whose operations all wait for zero in `COMPLEX_ZERO` too. The
    /// first one into `COMPLEX_ZERO` and the last one out change every
    /// semaphore's flags.
    ///
    /// Why every semaphore: when any semaphore a call changed reaches zero,
    /// the kernel evaluates every complex wait-for-zero sleeper again, and
    /// moves each one's blocking operation (what GETZCNT counts) where it
    /// now blocks, whether or not the sleeper names that semaphore. A
    /// lock-free operation would change a value without that walk
    /// (`wake.rs`), so while such sleepers exist every call takes the lock.
    fn count_complex(&mut self, tx: &mut Tx<'_>, ops: &[SemBuf], queued: bool) {
        if ops.len() < 2 {
            return;
        }
        let step = |count: u32| {
            if queued {
                count + 1
            } else {
                count.saturating_sub(1)
            }
        };
        tx.write(header::COMPLEX, step(self.map.load(header::COMPLEX)));
        if ops.iter().all(|s| s.op == 0) {
            let count = self.map.load(header::COMPLEX_ZERO);
            let next = step(count);
            tx.write(header::COMPLEX_ZERO, next);
            if (count == 0) != (next == 0) {
                self.touched.extend(0..self.layout().nsems);
            }
        }
    }

    /// Takes `slot` (a sleeper of this process that timed out) out of the
    /// queue, unless a waker completed it first; returns its result then.
    pub(super) fn cancel(&mut self, slot: usize) -> Result<Option<u32>, SemError> {
        let layout = *self.layout();
        match self.map.load(layout.sleeper(slot, sleeper::STATE)) {
            SLEEPER_DONE => Ok(Some(self.map.load(layout.sleeper(slot, sleeper::RESULT)))),
            SLEEPER_QUEUED => {
                let place = Place::of(&self.queue()?, slot);
                let ops = self.sleeper_ops(slot)?;
                let mut tx = Tx::begin(self.map);
                self.finish_sleeper(&mut tx, place, slot, &ops, 0);
                tx.write(layout.sleeper(slot, sleeper::STATE), SLEEPER_FREE);
                tx.commit();
                Ok(None)
            }
            _ => Err(SemError::Invalid),
        }
    }

    /// Finishes every queued sleeper with `EIDRM` (the set is being removed).
    pub(super) fn fail_all(&mut self) -> Result<(), SemError> {
        let queue = self.queue()?;
        // Each from the head in turn.
        for &slot in &queue {
            let ops = self.sleeper_ops(slot).unwrap_or_default();
            let mut tx = Tx::begin(self.map);
            self.finish_sleeper(
                &mut tx,
                Place::Head,
                slot,
                &ops,
                SemError::Removed.errno() as u32,
            );
            tx.commit();
            self.woken.push(slot);
        }
        Ok(())
    }

    /// Sets semaphores to new values (`SETVAL`, `SETALL`): clears every
    /// process's adjustment for them by moving their undo generation on,
    /// then completes the sleepers that can now run.
    pub(super) fn set_values(&mut self, values: &[(usize, i32)]) {
        for &(num, _) in values {
            self.hold_sem(num);
        }
        let layout = *self.layout();
        let pid = current_pid() as u32;
        let mut tx = Tx::begin(self.map);
        for &(num, v) in values {
            let word = self.map.load(layout.sem(num));
            tx.write(layout.sem(num), (word & !sem_word::VALUE) | v as u32);
            let gen = self.map.load(layout.undo_gen(num));
            tx.write(layout.undo_gen(num), gen.wrapping_add(1) & 0xffff);
            self.map.word(layout.pid(num)).store(pid, Ordering::Relaxed);
        }
        tx.write(header::CTIME, now_secs() as u32);
        tx.commit();
        for &(num, _) in values {
            self.forget_stale_adjustment(num);
        }
        self.smart_update(Change::All);
    }

    /// Zeroes one process slot's adjustment for `num` if a `SETVAL` or
    /// `SETALL` made it stale: the slot the new generation names, modulo
    /// [`NPROC`]. Generations are 16 bits, so without this a stale word
    /// would count again 65,536 of them later (a long-lived holder, or an
    /// abandoned slot's word when the slot is next adopted); visited once
    /// every `NPROC` generations, each is zeroed long before. Outside the
    /// journal: zeroing a stale word changes nothing a reader sees.
    fn forget_stale_adjustment(&self, num: usize) {
        let layout = self.layout();
        let gen = self.map.load(layout.undo_gen(num)) & 0xffff;
        let word = self.map.word(layout.adj(gen as usize % NPROC, num));
        let w = word.load(Ordering::Relaxed);
        if w != 0 && w >> 16 != gen {
            word.store(0, Ordering::Relaxed);
        }
    }

    /// `IPC_SET`'s change of owner and mode; handles recompute their rights.
    pub(super) fn set_perm(&mut self, uid: u32, gid: u32, mode: u32) {
        let mut tx = Tx::begin(self.map);
        tx.write(header::UID, uid);
        tx.write(header::GID, gid);
        tx.write(header::MODE, mode);
        tx.write(header::CTIME, now_secs() as u32);
        let gen = self.map.load(header::PERM_GEN);
        tx.write(header::PERM_GEN, gen.wrapping_add(1));
        tx.commit();
    }

    /// Sleepers counted by `GETNCNT` (`zero` false) or `GETZCNT` for `num`:
    /// those whose blocking operation is on `num`, as the kernel counts them.
    pub(super) fn count_sleepers(&self, num: usize, zero: bool) -> Result<usize, SemError> {
        count_sleepers_in(self.map, num, zero)
    }

    /// Adopts what dead processes left: their queued sleepers leave the
    /// queue and their undo adjustments are applied, as the kernel does at
    /// exit (each value clamped to `0..=SEMVMX`); then the sleepers this
    /// enables are completed. Returns whether a dead process was found.
    /// Costs a `fcntl` per other live process: callers on hot paths use
    /// [`reap_if_due`](Self::reap_if_due).
    pub(super) fn reap(&mut self) -> bool {
        let found = self.reap_where(|_| true);
        self.map
            .word(header::LAST_REAP)
            .store(coarse_ms(), Ordering::Relaxed);
        found
    }

    /// [`reap`](Self::reap) of the processes whose undo could let `sops`
    /// through: those with a nonzero adjustment for a semaphore in its
    /// [`reach`](Self::reach_of). For a call about to fail with `EAGAIN`,
    /// which must see a reaped child's undo (the kernel applies it before
    /// `waitpid` returns), or a sleeper about to time out with it, at a
    /// `fcntl` per such process rather than per live one.
    pub(super) fn reap_adjusters_of(&mut self, sops: &[SemBuf]) -> bool {
        // No other process in the set, alive or not yet found dead: no
        // undo to look for, and no reach to work out (a process's trylock
        // loop beside its own sleepers comes here on every failure).
        if !self.others_in_set() {
            return false;
        }
        let map = self.map;
        match self.reach_of(sops) {
            Reach::Own => self.reap_where(|slot| {
                sops.iter()
                    .any(|s| adjustment(map, slot, usize::from(s.num)) != 0)
            }),
            Reach::Sems(nums) => {
                self.reap_where(|slot| nums.iter().any(|&num| adjustment(map, slot, num) != 0))
            }
            Reach::Unknown => self.reap(),
        }
    }

    /// The semaphores whose values an undo must change to let `sops`
    /// through: its own, and, to a fixpoint, every semaphore named by a
    /// queued sleeper that alters one of them. Such a sleeper, completed
    /// by the undo of a semaphore it names, changes a value the call
    /// reads: a dead process holding a unit of semaphore 1, adopted, lets
    /// a sleeper that takes 1 and posts 0 complete, and a call on 0 alone
    /// through (the kernel's exit does the same before `waitpid` returns).
    ///
    /// Why nothing outside the reach matters: while the lock is held by a
    /// caller that entered it, no queued sleeper of a living process can
    /// complete on the values as they stand. Each change under the lock
    /// completes what it enabled before the lock is released, and a holder
    /// that died between the two leaves the rest to whoever takes the lock
    /// over, which completes every sleeper the values let through before
    /// doing anything else ([`enter`](Self::enter)); the lock-free path
    /// never changes a semaphore a sleeper names. So an undo that changes
    /// only values outside the reach completes no sleeper that alters one
    /// inside it (all it names is inside), and the values inside, which
    /// alone decide `sops`, stay as they are. Sleepers of the dead are in
    /// the queue too, which only widens the reach.
    fn reach_of(&self, sops: &[SemBuf]) -> Reach {
        #[cfg(test)]
        super::test_counts::count(super::test_counts::Count::Reaches);
        // No sleeper, or a set of one semaphore: the call's own, without
        // allocating (a trylock loop of IPC_NOWAIT calls comes here on
        // every failure).
        let nsems = self.layout().nsems;
        if self.map.load(header::QUEUE_HEAD) == 0 || nsems == 1 {
            return Reach::Own;
        }
        let mut reached = vec![false; nsems];
        let mut nums = Vec::new();
        for sop in sops {
            let num = usize::from(sop.num);
            if !reached[num] {
                reached[num] = true;
                nums.push(num);
            }
        }
        // A call on every semaphore reaches all there is: no sleeper
        // widens it, and its operations need not be read.
        if nums.len() == nsems {
            return Reach::Own;
        }
        let Ok(queue) = self.queue() else {
            return Reach::Unknown;
        };
        // Every sleeper's operations, one after another, and where each
        // sleeper's start.
        let mut ops = Vec::new();
        let mut starts = Vec::with_capacity(queue.len() + 1);
        let mut one = Vec::new();
        for &slot in &queue {
            if self.read_sleeper_ops(slot, &mut one).is_err() {
                return Reach::Unknown;
            }
            starts.push(ops.len());
            ops.extend_from_slice(&one);
        }
        starts.push(ops.len());
        // (semaphore, sleeper) for each alteration, sorted: the sleepers
        // that alter a semaphore are a range, so the walk below costs
        // O(operations log operations) however the sleepers chain.
        let mut alters: Vec<(u16, u32)> = Vec::new();
        for i in 0..queue.len() {
            for sop in &ops[starts[i]..starts[i + 1]] {
                if sop.op != 0 {
                    alters.push((sop.num, i as u32));
                }
            }
        }
        alters.sort_unstable();
        let mut absorbed = vec![false; queue.len()];
        let mut next = 0;
        while next < nums.len() && nums.len() < nsems {
            let num = nums[next] as u16;
            next += 1;
            let from = alters.partition_point(|&(n, _)| n < num);
            for &(_, i) in alters[from..].iter().take_while(|&&(n, _)| n == num) {
                let i = i as usize;
                if std::mem::replace(&mut absorbed[i], true) {
                    continue;
                }
                for sop in &ops[starts[i]..starts[i + 1]] {
                    let num = usize::from(sop.num);
                    if !reached[num] {
                        reached[num] = true;
                        nums.push(num);
                    }
                }
            }
        }
        Reach::Sems(nums)
    }

    /// Whether a process slot other than this process's is live: a
    /// process that may be alive, or dead and not yet adopted.
    fn others_in_set(&self) -> bool {
        other_live_slots(self.map, self.me).next().is_some()
    }

    /// Adopts the leftovers of every dead process among the other live
    /// slots that `wanted` names.
    fn reap_where(&mut self, wanted: impl Fn(usize) -> bool) -> bool {
        let map = self.map;
        let (mut found, mut had_undo) = (false, false);
        let mut registry = registry();
        for slot in other_live_slots(map, self.me) {
            if !wanted(slot) || !registry.lock_if_dead(map, slot) {
                continue;
            }
            had_undo |= self.clear_slot(slot, SLOT_FREE);
            registry.unlock_dead(self.map, slot);
            found = true;
        }
        drop(registry);
        // As the kernel's exit: a process with no `sem_undo` for the set
        // leaves it untouched, its sleepers gone (which enables nobody).
        if had_undo {
            self.smart_update(Change::All);
        }
        found
    }

    /// [`reap`](Self::reap), unless some process looked less than
    /// [`REAP_EVERY_MS`] ago: a call about to block or fail with `EAGAIN`
    /// looks for dead processes whose undo would let it proceed, without
    /// paying for the search on every call when nobody dies.
    pub(super) fn reap_if_due(&mut self) -> bool {
        let last = self.map.load(header::LAST_REAP);
        coarse_ms().wrapping_sub(last) >= REAP_EVERY_MS && self.reap()
    }

    /// The periodic safety net, run by one sleeper per poll period
    /// ([`sweep_due`]): adopts dead processes' leftovers, frees sleeper slots
    /// whose owner's process slot is no longer theirs (left by a process
    /// that died while its slot was being adopted), fails every sleeper with
    /// `EIDRM` if a remover died half way, completes what a waker that died
    /// after its commit left queued, publishes results a dead waker
    /// committed but never published, and wakes again the sleepers whose
    /// results are published but not collected.
    pub(super) fn sweep(&mut self) -> Result<(), SemError> {
        self.map
            .word(header::LAST_SWEEP)
            .store(coarse_ms(), Ordering::Relaxed);
        self.reap();
        self.drop_orphan_sleepers();
        if self.removed() {
            self.fail_all()?;
        }
        // What the sweep counts from here on, a waker should have done: a
        // sleeper it could have completed, a result it committed but did
        // not publish, or a sleeper still asleep on its published result
        // after every wake-up owed to it was made. Only a waker that died
        // explains the first two, and nothing the third; with every process
        // alive, a count here is a wake-up lost (the blocking and liveness
        // tests check it).
        let before = self.woken.len();
        self.smart_update(Change::Lost);
        let mut swept = self.woken.len() - before;
        let layout = *self.layout();
        // The slots already to be woken, as a bitmap: a search of `woken`
        // per slot would cost NSLEEP times a post's worth.
        let mut listed = [0u64; NSLEEP.div_ceil(64)];
        for &slot in &self.woken {
            listed[slot / 64] |= 1 << (slot % 64);
        }
        for slot in 0..NSLEEP {
            if self.map.load(layout.sleeper(slot, sleeper::STATE)) != SLEEPER_DONE
                || listed[slot / 64] & 1 << (slot % 64) != 0
            {
                continue;
            }
            // Under the lock, a live waker has published what it committed:
            // an unpublished result is counted, and published on release.
            let status = self.map.word(layout.sleeper(slot, sleeper::STATUS));
            if status.load(Ordering::Relaxed) != READY {
                swept += 1;
                self.woken.push(slot);
                continue;
            }
            // A result published but not collected yet: its sleeper is on
            // its way out, or asleep because the process that claimed its
            // wake-up died before making it (`share.rs`), and it may sleep
            // without a timeout (`crate::sem::sleep_watch`). Woken again
            // now, which is harmless, and counted only if every wake-up owed
            // to the slot was made and yet its sleeper still slept: a
            // wake-up takes a sleeper off the futex's queue at once, whether
            // or not it has run since, and none can queue again on a status
            // that says READY. Acquire pairs with the release decrement in
            // `share.rs` (`made`): a 0 read here comes after those wake-ups,
            // which is why it is read before this one. Under the lock, so
            // that the slot cannot pass to a new sleeper, whose sleep this
            // wake-up would find.
            let due = self
                .map
                .word(layout.sleeper(slot, sleeper::WAKES_DUE))
                .load(Ordering::Acquire);
            let found = wake_shared(status, 1);
            Counters::add(&self.map.counters.outside.wake_calls, 1);
            if due == 0 && found > 0 {
                swept += 1;
            }
        }
        if swept > 0 {
            bump(self.map, header::SWEPT, swept as u32);
        }
        Ok(())
    }

    /// Takes process slot `slot`'s leftovers (its owner is dead): its
    /// sleepers leave the queue, its adjustments are applied, and the slot
    /// ends in `state` (free, or live for this process adopting it).
    /// Whether the dead process had made a `SEM_UNDO` call on the set (its
    /// exit then is an operation, after which the caller completes what
    /// it enabled, as the kernel's `exit_sem` does).
    #[must_use]
    pub(super) fn clear_slot(&mut self, slot: usize, state: u32) -> bool {
        let layout = *self.layout();
        if self.map.load(layout.proc(slot, proc_slot::STATE)) == SLOT_LIVE {
            bump(self.map, header::REAPED, 1);
        }
        self.drop_sleepers_where(|_, owner, _| owner == slot);
        let adjs: Vec<(usize, i32)> = (0..layout.nsems)
            .filter_map(|num| {
                let adj = adjustment(self.map, slot, num);
                (adj != 0).then_some((num, adj))
            })
            .collect();
        for &(num, _) in &adjs {
            self.hold_sem(num);
        }
        let pid = self.map.load(layout.proc(slot, proc_slot::PID));
        let had_undo = self.map.load(layout.proc(slot, proc_slot::UNDO)) != 0;
        let mut tx = Tx::begin(self.map);
        for &(num, adj) in &adjs {
            let v = (value(self.map, num) + adj).clamp(0, SEMVMX);
            let word = self.map.load(layout.sem(num));
            tx.write(layout.sem(num), (word & !sem_word::VALUE) | v as u32);
            tx.write(layout.adj(slot, num), 0);
            self.map.word(layout.pid(num)).store(pid, Ordering::Relaxed);
        }
        tx.write(layout.proc(slot, proc_slot::UNDO), 0);
        tx.write(layout.proc(slot, proc_slot::STATE), state);
        tx.commit();
        // The kernel's exit_sem stamps the operation time after applying a
        // dying process's adjustments (do_smart_update with otime set), for
        // every set it holds a `sem_undo` for, adjustments or none.
        if had_undo {
            touch_otime(self.map);
        }
        had_undo
    }

    /// Drops queued sleepers whose process no longer holds its slot (its
    /// slot was freed, or taken by a later process).
    fn drop_orphan_sleepers(&mut self) {
        self.drop_sleepers_where(|map, owner, gen| {
            owner >= NPROC || !holds_incarnation(map, owner, gen)
        });
    }

    /// Drops every sleeper whose owner word, `(process slot, incarnation)`,
    /// `dead` says belongs to a dead process.
    fn drop_sleepers_where(&mut self, dead: impl Fn(&Mapping, usize, u32) -> bool) {
        let layout = *self.layout();
        for slot in 0..NSLEEP {
            if self.map.load(layout.sleeper(slot, sleeper::STATE)) == SLEEPER_FREE {
                continue;
            }
            let (owner, gen) = split_owner(self.map.load(layout.sleeper(slot, sleeper::OWNER)));
            if dead(self.map, owner, gen) {
                self.drop_sleeper(slot);
            }
        }
    }

    /// Frees sleeper `slot` of a dead process, leaving the queue if queued.
    fn drop_sleeper(&mut self, slot: usize) {
        let layout = *self.layout();
        let state_at = layout.sleeper(slot, sleeper::STATE);
        if self.map.load(state_at) == SLEEPER_QUEUED {
            let (Ok(queue), Ok(ops)) = (self.queue(), self.sleeper_ops(slot)) else {
                return;
            };
            let mut tx = Tx::begin(self.map);
            self.finish_sleeper(&mut tx, Place::of(&queue, slot), slot, &ops, 0);
            tx.write(state_at, SLEEPER_FREE);
            tx.commit();
        } else {
            let mut tx = Tx::begin(self.map);
            tx.write(state_at, SLEEPER_FREE);
            tx.commit();
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let layout = self.map.layout;
        self.touched.sort_unstable();
        self.touched.dedup();
        // A mapping whose file was truncated under it (`sigbus.rs`) has its
        // semaphore words fenced off the lock-free path on private pages;
        // recomputing the flags would lift the fence, and every call on it
        // answers EINVAL anyway.
        if self.map.poisoned() {
            self.touched.clear();
        }
        // Every semaphore goes through the lock while complex wait-for-zero
        // sleepers exist (`count_complex`).
        let all_closed = self.map.load(header::COMPLEX_ZERO) > 0;
        for &num in &self.touched {
            let flags = if all_closed || self.map.load(layout.waiter_count(num)) > 0 {
                sem_word::SLEEPERS
            } else {
                0
            };
            // Release pairs with the acquire compare-and-swap of the
            // lock-free path (`set.rs`): the values written under the lock
            // are visible before it is open again.
            let word = self.map.word(layout.sem(num));
            let w = word.load(Ordering::Relaxed);
            if w & (sem_word::LOCKED | sem_word::SLEEPERS) != 0 {
                // Closed to the lock-free path, which keeps off either
                // flag, and only a holder of this lock sets or clears them:
                // nobody else writes the word, and a store will do. This is
                // every semaphore a call held (`hold_sem`) or a completed
                // sleeper named, so a locked call pays one atomic
                // instruction per semaphore, its `hold_sem`, not two.
                word.store((w & sem_word::VALUE) | flags, Ordering::Release);
            } else {
                // Open to the lock-free path (a semaphore only recomputed,
                // after a takeover): its change must not be lost.
                let _ = word.fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                    Some((w & sem_word::VALUE) | flags)
                });
            }
        }
        // A slot completed in this hold may have been freed in it since,
        // its process found dead by a later search (a reap, `make_room`),
        // and even given to a call queued after that: publishing the dead
        // sleeper's result there would tell the new sleeper, whose call was
        // never performed, that it succeeded. Only slots still holding a
        // result are published and woken.
        let map = self.map;
        self.woken
            .retain(|&slot| map.load(layout.sleeper(slot, sleeper::STATE)) == SLEEPER_DONE);
        // Results are published before the lock is released: a sleeper
        // frees its slot once it sees its result, and only a later lock
        // holder can give the slot to another sleeper, so no late store
        // lands in a slot that changed hands. The wake-ups come after the
        // release (Spraul, 2010); a wake-up of a reused slot is spurious and
        // its sleeper re-checks.
        for &slot in &self.woken {
            publish(self.map, slot);
        }
        // Counted under the lock: only its holder writes these.
        let counters = &self.map.counters;
        Counters::bump(&counters.wakeups, self.woken.len() as u64);
        Counters::bump(&counters.futex_wakes, self.woken.len() as u64);
        unlock(self.map, self.me);
        if !self.woken.is_empty() {
            // Batched, and shared out with the sleepers it wakes where it
            // has many (`share.rs`).
            let calls = share::wake(self.map, &self.woken);
            Counters::add(&counters.outside.wake_calls, calls as u64);
        }
        self.touched.clear();
        self.woken.clear();
        let scratch = Scratch {
            touched: std::mem::take(&mut self.touched),
            woken: std::mem::take(&mut self.woken),
            eval: std::mem::take(&mut self.eval),
        };
        give_back(&SCRATCH, scratch);
    }
}

/// The process slots of `map` other than `me`'s whose state is live: each
/// a process that may be alive, or dead and not yet adopted.
fn other_live_slots(map: &Mapping, me: Me) -> impl Iterator<Item = usize> + '_ {
    (0..NPROC).filter(move |&slot| {
        slot != me.slot && map.load(map.layout.proc(slot, proc_slot::STATE)) == SLOT_LIVE
    })
}

/// What [`Locked::reach_of`] found.
enum Reach {
    /// The call's own semaphores: no sleeper is queued, or they are every
    /// semaphore of the set.
    Own,
    /// These semaphores.
    Sems(Vec<usize>),
    /// The queue is corrupt: every semaphore, to be safe.
    Unknown,
}

/// Where a sleeper leaving the queue sits in it, for
/// [`Locked::finish_sleeper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Head,
    /// Just after this slot.
    After(usize),
    /// Nowhere: the file is corrupt.
    Absent,
}

impl Place {
    /// `slot`'s place in `queue` (in order).
    fn of(queue: &[usize], slot: usize) -> Place {
        match queue.iter().position(|&s| s == slot) {
            Some(0) => Place::Head,
            Some(p) => Place::After(queue[p - 1]),
            None => Place::Absent,
        }
    }

    /// Just after `slot`, or at the head (`None`).
    pub(super) fn after(slot: Option<usize>) -> Place {
        slot.map_or(Place::Head, Place::After)
    }
}

/// Publishes the result committed in sleeper slot `slot`, owing its
/// sleeper a wake-up ([`sleeper::WAKES_DUE`]); under the lock.
pub(super) fn publish(map: &Mapping, slot: usize) {
    let layout = map.layout;
    // Owed before the result shows: a process that dies between the two
    // leaves the slot owed, and the sweep uncounted, rather than a result
    // the sweep takes for a wake-up lost. Relaxed: the lock orders it before
    // the sweep's look, and the mark or the poster's own program order
    // before the wake-up's decrement.
    map.word(layout.sleeper(slot, sleeper::WAKES_DUE))
        .fetch_add(1, Ordering::Relaxed);
    // Pairs with the acquire load in the sleeper's wait (`set.rs`).
    map.word(layout.sleeper(slot, sleeper::STATUS))
        .store(READY, Ordering::Release);
}

/// Whether `period` has passed since the set's last [`Locked::sweep`].
pub(super) fn sweep_due(map: &Mapping, period: std::time::Duration) -> bool {
    let last = map.load(header::LAST_SWEEP);
    u128::from(coarse_ms().wrapping_sub(last)) >= period.as_millis()
}

/// How often the blocking path searches for dead processes, at most.
const REAP_EVERY_MS: u32 = 10;

/// A coarse monotonic clock in milliseconds, the same in every process
/// (wrapping; only differences are used).
pub(super) fn coarse_ms() -> u32 {
    #[cfg(test)]
    if let Some(ms) = frozen_clock::now() {
        return ms;
    }
    // SAFETY: plain old data; clock_gettime fills it (from the vDSO).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000) as u32
}

/// Counts `by` recovery events (statistics only: not journalled, never trusted).
fn bump(map: &Mapping, counter: usize, by: u32) {
    map.word(counter).fetch_add(by, Ordering::Relaxed);
}

/// Records the time of a successful operation (seconds; a store only when it changed).
pub(super) fn touch_otime(map: &Mapping) {
    let now = now_secs() as u32;
    if map.load(header::OTIME) != now {
        map.word(header::OTIME).store(now, Ordering::Relaxed);
    }
}

/// A test's hold on [`coarse_ms`] in its own thread, so that "a reap ran
/// less than 10 ms ago" (or a sweep less than 100 ms ago) stays true for
/// as long as the test needs, however slowly the machine runs it: tests of
/// what a call does when the rate limits hold it back must not depend on
/// how fast they run.
#[cfg(test)]
pub(super) mod frozen_clock {
    use std::cell::Cell;

    std::thread_local! {
        static FROZEN: Cell<Option<u32>> = const { Cell::new(None) };
    }

    /// Stops this thread's clock until the guard drops.
    pub(in crate::sem::shared) fn freeze() -> Frozen {
        FROZEN.with(|f| f.set(None));
        let at = super::coarse_ms();
        FROZEN.with(|f| f.set(Some(at)));
        Frozen(at)
    }

    pub(super) fn now() -> Option<u32> {
        FROZEN.with(|f| f.get())
    }

    /// The clock's frozen reading; unfreezes on drop.
    pub(in crate::sem::shared) struct Frozen(pub(in crate::sem::shared) u32);

    impl Drop for Frozen {
        fn drop(&mut self) {
            FROZEN.with(|f| f.set(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::set::tests::Scratch;
    use super::super::set::SharedSemSet;
    use super::super::test_counts::{made, Count};
    use super::frozen_clock::{self, Frozen};
    use super::*;
    use crate::sem::{IPC_NOWAIT, SEM_UNDO};
    use std::time::Duration;

    /// A `fork` child of the test process, killed (`SIGKILL`) and waited
    /// for when dropped: a process that dies in a set however it dies.
    /// `None` once waited for: its pid may then name another process,
    /// which must not be killed.
    struct Child(Option<libc::pid_t>);

    impl Child {
        /// Forks a child that runs `ready`, reports its answer, and if it
        /// succeeded runs `then` and waits to be killed; returns once the
        /// child reported, failing the test if `ready` failed. The child
        /// never returns into the test harness, which another thread of
        /// the parent may be running.
        fn fork(ready: impl FnOnce() -> bool, then: impl FnOnce()) -> Child {
            let mut fds = [0; 2];
            // SAFETY: a valid array of two descriptors.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: the child only uses this set (whose library takes its
            // locks across a fork, `procs.rs`) and `_exit`s.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let ok =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(ready)).unwrap_or(false);
                let byte = [u8::from(ok)];
                // SAFETY: a valid buffer of one byte on the pipe's write end.
                unsafe { libc::write(fds[1], byte.as_ptr().cast(), 1) };
                if ok {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(then));
                    loop {
                        // SAFETY: waits for the parent's signal.
                        unsafe { libc::pause() };
                    }
                }
                // SAFETY: ends the child without running the parent's exit handlers.
                unsafe { libc::_exit(1) };
            }
            // SAFETY: closes the write end this process does not use.
            unsafe { libc::close(fds[1]) };
            let mut byte = [0u8];
            // SAFETY: a valid buffer of one byte on the pipe's read end.
            let n = unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) };
            // SAFETY: the read end, no longer used.
            unsafe { libc::close(fds[0]) };
            let child = Child(Some(pid));
            assert_eq!((n, byte[0]), (1, 1), "the child failed to get ready");
            child
        }

        /// Whether the child still runs; waits for it if it ended.
        fn alive(&mut self) -> bool {
            let Some(pid) = self.0 else { return false };
            let mut status = 0;
            // SAFETY: our own child, not waited for yet.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
                return true;
            }
            self.0 = None;
            false
        }

        /// Kills the child and waits for it: after this, it is dead, and
        /// its slot's liveness lock is free.
        fn kill(self) {
            drop(self);
        }
    }

    impl Drop for Child {
        fn drop(&mut self) {
            let Some(pid) = self.0.take() else { return };
            let mut status = 0;
            // SAFETY: our own child, not waited for yet.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
    }

    /// Nothing more for a child to do than to live.
    fn idle() {}

    /// In a child: fills every sleeper slot with a sleeper of this
    /// process on a decrement of semaphore 0, without sleeping in any.
    fn fill_sleeper_table(set: &SharedSemSet) -> bool {
        let Ok(me) = set.me() else { return false };
        let Ok(mut held) = Locked::enter(&set.map, me) else {
            return false;
        };
        held.hold_sem(0);
        (0..NSLEEP).all(|_| held.enqueue(&[SemBuf::new(0, -1, 0)], 0).is_ok())
    }

    /// Stops this thread's clock just after a search for the dead and a
    /// sweep, so that neither is due again in this thread's calls (they
    /// ran "less than 10 ms ago", for as long as the test runs).
    fn just_reaped_and_swept(set: &SharedSemSet) -> Frozen {
        let clock = frozen_clock::freeze();
        set.map
            .word(header::LAST_REAP)
            .store(clock.0, Ordering::Relaxed);
        set.map
            .word(header::LAST_SWEEP)
            .store(clock.0, Ordering::Relaxed);
        clock
    }

    /// A call that would sleep, timed out at once unless completed.
    fn down_briefly(set: &SharedSemSet) -> Result<(), SemError> {
        set.semtimedop(&[SemBuf::new(0, -1, 0)], Some(Duration::from_millis(1)))
    }

    /// A table full of a killed process's sleepers, seen by a call right
    /// after a search for the dead that found that process alive: the call
    /// frees the dead's slots and queues (to time out) instead of
    /// answering ENOSPC.
    #[test]
    fn a_full_table_of_the_deads_sleepers_is_no_enospc_however_recent_the_last_reap() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        set.me().unwrap();
        let filler = Child::fork(|| fill_sleeper_table(set), idle);
        let _clock = just_reaped_and_swept(set);
        filler.kill();
        assert_eq!(down_briefly(set), Err(SemError::Again));
        assert_eq!(set.recovery_stats().reaped, 1);
        assert_eq!(set.ncnt(0), Ok(0));
    }

    /// The same table, its process alive: ENOSPC, as before.
    #[test]
    fn a_full_table_of_the_livings_sleepers_is_enospc() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        set.me().unwrap();
        let filler = Child::fork(|| fill_sleeper_table(set), idle);
        let _clock = just_reaped_and_swept(set);
        assert_eq!(down_briefly(set), Err(SemError::NoSpace));
        assert_eq!(set.recovery_stats().reaped, 0);
        assert_eq!(set.ncnt(0), Ok(NSLEEP));
        filler.kill();
    }

    /// What a call on semaphore 0 that cannot wait for long (`flags`,
    /// `timeout`) answers after a process that held a unit with
    /// `SEM_UNDO` was killed, with the search for the dead's sleepers
    /// rate-limited away: a unit of semaphore 0 itself (`via_sleeper`
    /// false), or of semaphore 1, which a living process sleeps to take as
    /// it posts 0. The kernel applies the undo as the holder dies, which
    /// completes that sleeper, so either way the call succeeds. Also
    /// returns how many processes the call probed for death: a bystander
    /// lives with an adjustment on semaphore 2 alone, and the poster with
    /// none, and only the holder's adjustments can let the call through.
    fn after_a_holders_death(
        flags: i16,
        timeout: Option<Duration>,
        via_sleeper: bool,
    ) -> (Result<(), SemError>, u64) {
        let scratch = Scratch::new(3);
        let set = &scratch.0;
        set.me().unwrap();
        let held = usize::from(via_sleeper);
        set.set_value(held, 1).unwrap();
        let holder = Child::fork(
            || set.semop(&[SemBuf::new(held as u16, -1, SEM_UNDO)]).is_ok(),
            idle,
        );
        let _bystander = Child::fork(|| set.semop(&[SemBuf::new(2, 1, SEM_UNDO)]).is_ok(), idle);
        let mut poster = Child::fork(
            || set.me().is_ok(),
            || {
                if via_sleeper {
                    let _ = set.semop(&[SemBuf::new(1, -1, 0), SemBuf::new(0, 1, 0)]);
                }
            },
        );
        if via_sleeper {
            while set.ncnt(1) != Ok(1) {
                // A poster whose call failed and that died (a panic)
                // fails the test instead of leaving it waiting for ever.
                assert!(poster.alive(), "the poster died before it slept");
                std::thread::yield_now();
            }
        }
        let _clock = just_reaped_and_swept(set);
        holder.kill();
        let before = made(Count::Probes);
        let result = set.semtimedop(&[SemBuf::new(0, -1, flags)], timeout);
        let probed = made(Count::Probes) - before;
        if result.is_ok() {
            assert_eq!(set.get_all(), Ok(vec![0, 0, 1]));
        }
        (result, probed)
    }

    /// What a call on semaphore 0 that cannot wait for long (`flags`,
    /// `timeout`) answers after a waker was killed holding the lock between
    /// committing its post of semaphore 1 and completing the sleeper that
    /// post enabled, a living process's `{1:-1, 0:+1}`. The kernel's waker
    /// cannot die between the two: the sleeper has run and posted 0, so the
    /// call succeeds. The waker posted without `SEM_UNDO` and holds no
    /// adjustment, so no search for the dead's undo would find it, and the
    /// clock is frozen so that no sweep comes to the rescue: only the
    /// takeover of the lock can complete the sleeper.
    fn after_a_wakers_death(flags: i16, timeout: Option<Duration>) -> Result<(), SemError> {
        let scratch = Scratch::new(2);
        let set = &scratch.0;
        set.me().unwrap();
        let _sleeper = child_asleep(set, vec![SemBuf::new(1, -1, 0), SemBuf::new(0, 1, 0)], 1);
        // The waker's post as `perform` commits it, with the lock kept:
        // the child then waits to be killed before its `smart_update`.
        let waker = Child::fork(
            || {
                let Ok(me) = set.me() else { return false };
                let Ok(mut held) = Locked::enter(&set.map, me) else {
                    return false;
                };
                held.hold_sem(1);
                let at = set.map.layout.sem(1);
                let word = set.map.load(at);
                let mut tx = Tx::begin(&set.map);
                tx.write(at, (word & !sem_word::VALUE) | 1);
                tx.commit();
                std::mem::forget(held);
                true
            },
            idle,
        );
        let _clock = just_reaped_and_swept(set);
        waker.kill();
        let result = set.semtimedop(&[SemBuf::new(0, -1, flags)], timeout);
        let stats = set.recovery_stats();
        assert_eq!((stats.takeovers, stats.rollbacks), (1, 0));
        if result.is_ok() {
            assert_eq!(set.get_all(), Ok(vec![0, 0]));
        }
        result
    }

    /// Forks a child whose call `sops` sleeps in `set`, and waits until
    /// GETNCNT counts it on semaphore `num`. A child whose call failed and
    /// that died (a panic) fails the test instead of leaving it waiting for
    /// ever.
    fn child_asleep(set: &SharedSemSet, sops: Vec<SemBuf>, num: usize) -> Child {
        let mut sleeper = Child::fork(
            || set.me().is_ok(),
            || {
                let _ = set.semop(&sops);
            },
        );
        while set.ncnt(num) != Ok(1) {
            assert!(sleeper.alive(), "the sleeper died before it slept");
            std::thread::yield_now();
        }
        sleeper
    }

    /// In a child: fills every free sleeper slot with a sleeper of this
    /// process on a decrement of semaphore 0, without sleeping in any.
    fn fill_free_sleeper_slots(set: &SharedSemSet) -> bool {
        let Ok(me) = set.me() else { return false };
        let Ok(mut held) = Locked::enter(&set.map, me) else {
            return false;
        };
        held.hold_sem(0);
        while held.enqueue(&[SemBuf::new(0, -1, 0)], 0).is_ok() {}
        true
    }

    /// A sleeper of another process is completed in one hold of the lock
    /// (its process alive), then its process is killed and a search for
    /// the dead in the same hold (`reap_if_due`, `make_room`, a sweep) frees
    /// its slot, still listed in `woken`. A call queued in that same hold
    /// gets the slot; the release must not publish the dead sleeper's result
    /// into it, telling the new sleeper, whose call was never performed,
    /// that it succeeded (and leaving a free slot linked in the queue once
    /// that sleeper leaves).
    #[test]
    fn a_dead_sleepers_result_is_not_published_into_the_slot_that_reused_it() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        let me = set.me().unwrap();
        let sleeper = child_asleep(set, vec![SemBuf::new(0, -1, 0)], 0);
        let s = set.map.load(header::QUEUE_HEAD) as usize - 1;
        // A living process fills the rest of the table, so the slot freed
        // below is the one a call queueing next gets.
        let _filler = Child::fork(|| fill_free_sleeper_slots(set), idle);
        let _clock = just_reaped_and_swept(set);
        let mut held = Locked::enter(&set.map, me).unwrap();
        // A post completes the child's sleeper: its process is alive.
        assert_eq!(held.perform(&[SemBuf::new(0, 1, 0)]), Outcome::Done);
        assert_eq!(held.woken, [s]);
        // Killed while this hold goes on; the hold then looks for the dead.
        sleeper.kill();
        assert!(held.reap());
        // This process's own call blocks and queues, as `locked_op` does.
        assert_eq!(held.perform(&[SemBuf::new(0, -1, 0)]), Outcome::Blocked(0));
        let mine = held.enqueue(&[SemBuf::new(0, -1, 0)], 0).unwrap();
        assert_eq!(mine, s, "the freed slot is reused");
        drop(held);
        let layout = set.map.layout;
        let state = set.map.load(layout.sleeper(mine, sleeper::STATE));
        let status = set.map.load(layout.sleeper(mine, sleeper::STATUS));
        assert_eq!(state, SLEEPER_QUEUED);
        assert_ne!(
            status, READY,
            "a queued sleeper whose call was never performed is told it succeeded"
        );
    }

    /// A sleeper of a killed process, not yet reaped, whose process slot a
    /// new process is claiming (`Registry::claim`: it holds the slot's
    /// liveness byte with a read lock, and has not stored the new
    /// incarnation yet, preempted on its way back from `fcntl`, say). A
    /// post must not take the locked byte for the dead process's life and
    /// give it the unit, which would be lost when the slot is adopted: a
    /// living process's IPC_NOWAIT decrement gets it, as from the kernel
    /// (which takes a killed sleeper off its queue). When the claim took
    /// the write lock first, the post gave the unit away.
    #[test]
    fn a_post_gives_no_unit_to_a_dead_sleeper_whose_slot_is_being_claimed() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        set.me().unwrap();
        let sleeper = child_asleep(set, vec![SemBuf::new(0, -1, 0)], 0);
        let s = set.map.load(header::QUEUE_HEAD) as usize - 1;
        let (qslot, _) = split_owner(set.map.load(set.map.layout.sleeper(s, sleeper::OWNER)));
        let _clock = just_reaped_and_swept(set);
        sleeper.kill();
        // A new process takes the dead slot's liveness byte, as the first
        // step of `Registry::claim`, and has yet to store the new GEN.
        let fd = set.map.fd();
        let _claimer = Child::fork(
            move || {
                // SAFETY: plain old data, then a valid flock on our descriptor.
                let mut fl: libc::flock = unsafe { std::mem::zeroed() };
                fl.l_type = libc::F_RDLCK as libc::c_short;
                fl.l_whence = libc::SEEK_SET as libc::c_short;
                fl.l_start = (1i64 << 40) + qslot as i64; // procs::LIVENESS_BASE
                fl.l_len = 1;
                unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) == 0 }
            },
            idle,
        );
        // A living process posts one unit.
        set.semop(&[SemBuf::new(0, 1, 0)]).unwrap();
        assert_eq!(
            value(&set.map, 0),
            1,
            "the unit went to a dead process's sleeper"
        );
        assert_eq!(set.semop(&[SemBuf::new(0, -1, IPC_NOWAIT)]), Ok(()));
    }

    /// Processes claiming slots at the same moment take turns
    /// (`Registry::claim`'s claim lock) and each gets a slot of its own:
    /// two claimers that both took a slot's byte with a read lock would
    /// both start an incarnation, and one would fail to take the write lock.
    #[test]
    fn processes_claiming_at_once_get_slots_of_their_own() {
        let scratch = Scratch::new(1);
        // Later rounds claim the slots the earlier rounds' dead left.
        for _ in 0..12 {
            claim_at_once(&scratch.0);
        }
    }

    /// Forks processes that all claim a slot in `set` at once, and checks
    /// that each got one of its own.
    fn claim_at_once(set: &SharedSemSet) {
        const CLAIMERS: usize = 12;
        // SAFETY: a fresh shared anonymous page, which fork keeps shared:
        // the children spin on it until the parent lets them all go.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        // SAFETY: the page is zeroed, aligned, and outlives every use.
        let go = unsafe { &*page.cast::<std::sync::atomic::AtomicU32>() };
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut children = Vec::new();
        for _ in 0..CLAIMERS {
            // SAFETY: the child only spins, claims a slot in this set and
            // writes one byte before `_exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                while go.load(Ordering::Acquire) == 0 {
                    std::hint::spin_loop();
                }
                let byte = [set.me().map_or(u8::MAX, |me| me.slot as u8)];
                // SAFETY: a valid buffer of one byte on the pipe's write end.
                unsafe { libc::write(fds[1], byte.as_ptr().cast(), 1) };
                // Alive, and so holding its slot, until every claimer has
                // reported.
                while go.load(Ordering::Acquire) == 1 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // SAFETY: ends the child without running the parent's exit
                // handlers.
                unsafe { libc::_exit(0) };
            }
            children.push(pid);
        }
        go.store(1, Ordering::Release);
        let mut slots = [0u8; CLAIMERS];
        let mut got = 0;
        while got < CLAIMERS {
            // SAFETY: a valid buffer of the bytes still to come.
            let n = unsafe { libc::read(fds[0], slots[got..].as_mut_ptr().cast(), CLAIMERS - got) };
            assert!(n > 0, "a claimer wrote nothing");
            got += n as usize;
        }
        go.store(2, Ordering::Release);
        for pid in children {
            let mut status = 0;
            // SAFETY: our own child; `status` is ours.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        // SAFETY: our own descriptors and page, no longer used.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
            libc::munmap(page, 4096);
        }
        let mut sorted = slots;
        sorted.sort_unstable();
        assert!(
            !sorted.contains(&u8::MAX) && sorted.windows(2).all(|w| w[0] != w[1]),
            "every claimer gets a slot of its own: {slots:?}"
        );
    }

    /// A claimer stopped while it holds a set's claim lock (here a child
    /// that took it and waits) holds up this process's first call on that
    /// set, and nothing else: another set opens and works, and `fork`
    /// returns, while that call waits. Taken under the process registry's
    /// lock, as the claim lock first was, it held up both until the claimer
    /// went on (here, for ever: the watchdog's 30 s).
    #[test]
    fn a_stopped_claimer_holds_up_only_its_own_sets_claims() {
        let x = Scratch::new(1);
        let fd = x.0.map.fd();
        let holder = Child::fork(
            move || {
                // SAFETY: plain old data, then a valid flock on the
                // set's descriptor: the claim byte, `procs::CLAIM_BYTE`.
                let mut fl: libc::flock = unsafe { std::mem::zeroed() };
                fl.l_type = libc::F_WRLCK as libc::c_short;
                fl.l_whence = libc::SEEK_SET as libc::c_short;
                fl.l_start = (1i64 << 40) - 1;
                fl.l_len = 1;
                unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) == 0 }
            },
            idle,
        );
        std::thread::scope(|scope| {
            // SEM_UNDO: a call that needs this process's slot.
            let first = scope.spawn(|| x.0.semop(&[SemBuf::new(0, 1, SEM_UNDO)]));
            // Time for the first call to reach its wait for the claim lock
            // (if it has not, the rest passes whatever the lock order).
            std::thread::sleep(Duration::from_millis(100));
            assert!(!first.is_finished(), "a claim went ahead of the claim lock");
            let (done, finished) = std::sync::mpsc::channel();
            scope.spawn(move || {
                let y = Scratch::new(1);
                let used = y.0.semop(&[SemBuf::new(0, 1, 0)]);
                // SAFETY: the child leaves at once.
                let child = unsafe { libc::fork() };
                if child == 0 {
                    // SAFETY: ends the child without the parent's exit handlers.
                    unsafe { libc::_exit(0) };
                }
                let mut status = 0;
                // SAFETY: our own child; `status` is ours.
                unsafe { libc::waitpid(child, &mut status, 0) };
                let _ = done.send(used);
            });
            let other = finished.recv_timeout(Duration::from_secs(30));
            // The claim lock goes with its holder, and the first call ends.
            holder.kill();
            assert_eq!(first.join().unwrap(), Ok(()));
            assert_eq!(
                other,
                Ok(Ok(())),
                "another set and fork waited for a stopped claimer"
            );
        });
    }

    #[test]
    fn a_call_that_will_not_wait_sees_the_sleepers_a_dead_waker_enabled() {
        assert_eq!(after_a_wakers_death(IPC_NOWAIT, None), Ok(()));
    }

    #[test]
    fn a_timed_out_call_sees_the_sleepers_a_dead_waker_enabled() {
        let brief = Some(Duration::from_millis(1));
        assert_eq!(after_a_wakers_death(0, brief), Ok(()));
    }

    #[test]
    fn a_call_that_will_not_wait_gets_a_dead_holders_undo_probing_only_holders() {
        assert_eq!(after_a_holders_death(IPC_NOWAIT, None, false), (Ok(()), 1));
    }

    /// A process alone in its set, with a sleeper of its own queued that
    /// could post the call's semaphore: a failing IPC_NOWAIT call has
    /// nobody's undo to look for, so it works out no reach.
    #[test]
    fn a_process_alone_in_its_set_works_out_no_reach() {
        let scratch = Scratch::new(2);
        let set = &scratch.0;
        let sleeper = std::thread::scope(|scope| {
            let sleeper = scope.spawn(|| {
                set.semtimedop(
                    &[SemBuf::new(1, -1, 0), SemBuf::new(0, 1, 0)],
                    Some(Duration::from_secs(30)),
                )
            });
            while set.ncnt(1) != Ok(1) {
                std::thread::yield_now();
            }
            let before = made(Count::Reaches);
            assert_eq!(
                set.semop(&[SemBuf::new(0, -1, IPC_NOWAIT)]),
                Err(SemError::Again)
            );
            let reached = made(Count::Reaches) - before;
            set.semop(&[SemBuf::new(1, 1, 0)]).unwrap();
            (sleeper.join().unwrap(), reached)
        });
        assert_eq!(sleeper, (Ok(()), 0));
    }

    #[test]
    fn a_call_that_will_not_wait_gets_a_dead_holders_undo_through_a_sleeper() {
        assert_eq!(after_a_holders_death(IPC_NOWAIT, None, true), (Ok(()), 1));
    }

    #[test]
    fn a_timed_out_call_gets_a_dead_holders_undo_probing_only_holders() {
        let brief = Some(Duration::from_millis(1));
        assert_eq!(after_a_holders_death(0, brief, false), (Ok(()), 1));
    }

    #[test]
    fn a_timed_out_call_gets_a_dead_holders_undo_through_a_sleeper() {
        let brief = Some(Duration::from_millis(1));
        assert_eq!(after_a_holders_death(0, brief, true), (Ok(()), 1));
    }
}
