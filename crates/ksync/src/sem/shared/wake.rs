//! Which queued sleepers a change completes, and in what order: the
//! kernel's `do_smart_update` (ipc/sem.c) played on the one queue a shared
//! set's file keeps.
//!
//! The kernel keeps four kinds of lists, and a change walks them in a fixed
//! order; what a sleeper gets when several compete for a unit, and on which
//! operation GETNCNT and GETZCNT count a sleeper that stays, follow from that
//! order, so a set that wants the kernel's answers must keep it:
//!
//! * a single wait-for-zero sleeps on its semaphore's const list, a single
//!   alter operation on its semaphore's alter list; several operations sleep
//!   on the global const list (waits for zero only) or the global alter list;
//! * while complex sleepers exist, the per-semaphore alter lists are spliced
//!   into the global one (`merge_queues`: each list at the head, in semaphore
//!   order) and single alter operations queue there, until the lock is
//!   released with none left (`unmerge_queues`);
//! * a change first completes the const sleepers of each semaphore it left
//!   at zero, and then the global const list if any was (`do_smart_wakeup_zero`);
//!   then the global alter list if it is not empty, else the alter list of
//!   each semaphore it raised (`update_queue`);
//! * each alter completion runs the zero wake-ups for its own semaphores, and
//!   the walk starts again from the head after a completion while the global
//!   alter list is in use or the completed sleeper was complex
//!   (`check_restart`): the kernel re-evaluates every sleeper then, which
//!   also moves a sleeper's blocking operation where it now blocks.
//!
//! The file keeps every sleeper on one queue in arrival order, and each list
//! is the queue filtered by the sleeper's summary (`layout::summary`), which
//! keeps each list's own order. The global alter list is the queue's alter
//! sleepers in arrival order, not in the merge's order, which differs only
//! between single sleepers of different semaphores that queued before the
//! first complex one: neither's outcome depends on the other's, and the
//! complex sleepers all come after both, so nothing observable changes.
//! The global list is in use while complex sleepers are queued
//! (`header::COMPLEX`).
//!
//! What the kernel re-evaluates but cannot have changed is skipped, for alter
//! sleepers: one none of whose semaphores changed since it was last
//! evaluated gets the same answer. That holds across calls, since every
//! change of a value under the lock ends in a walk that evaluates the alter
//! sleepers of the semaphores it changed (the lock-free path never changes
//! a semaphore a sleeper names, nor any semaphore while complex
//! wait-for-zero sleepers exist: `Locked::count_complex`). It does not
//! hold for wait-for-zero
//! sleepers, which the kernel looks at only when a changed semaphore is
//! zero: those are evaluated whenever the kernel would. A walk numbers its
//! changes; each semaphore remembers its last, each sleeper when it was last
//! evaluated.

use super::engine::{Locked, Place};
use super::eval::{evaluate_into, Eval, Outcome};
use super::journal::Tx;
use super::layout::{header, proc_slot, sleeper, split_owner, summary, NPROC};
use super::procs::{holds_incarnation, incarnation_alive};
use crate::sem::complete::Skipped;
use crate::sem::counters::Counters;
use crate::sem::{SemBuf, SemError};

/// What a change touched.
#[derive(Clone, Copy)]
pub(super) enum Change<'a> {
    /// A call's operations (`do_smart_update` with its `sops`).
    Ops(&'a [SemBuf]),
    /// Any semaphore: a SETVAL, a SETALL, a dead process's undo, a lock
    /// taken over from a dead holder (`do_smart_update` without `sops`).
    All,
    /// Any semaphore, for what no change explains (the sweep's safety net,
    /// `Locked::sweep`): completes the sleepers the values let through, and
    /// fails none. The kernel fails a sleeper (an `IPC_NOWAIT` operation
    /// that would now block, a range error) only in the scan that follows a
    /// change, and a scan with no change behind it must not fail one
    /// earlier than the kernel would.
    Lost,
}

/// Which kernel list a queued sleeper is on, from its summary.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// One wait-for-zero on this semaphore.
    Zero(usize),
    /// Several operations, all waits for zero.
    ComplexZero,
    /// One operation that changes this semaphore.
    Alter(usize),
    /// Several operations, one of which changes a value.
    ComplexAlter,
}

impl Kind {
    fn of(summary: u32) -> Kind {
        let alter = summary & summary::ALTER != 0;
        match (summary & summary::MANY != 0, alter) {
            (false, false) => Kind::Zero((summary & summary::NUM) as usize),
            (false, true) => Kind::Alter((summary & summary::NUM) as usize),
            (true, false) => Kind::ComplexZero,
            (true, true) => Kind::ComplexAlter,
        }
    }
}

/// The buffers of a walk, kept per thread between calls.
#[derive(Default)]
struct Walk {
    /// The queue's slots, in order, and beside them each one's summary and
    /// the change it was last evaluated after (0: not in this walk). A
    /// sleeper completed during the walk keeps its position, marked `gone`,
    /// and `before` and `after` name each position's nearest neighbours
    /// still queued (`usize::MAX` and `queue.len()` at the ends), so that
    /// taking a sleeper out costs the same at any position: a post that
    /// completes many of many sleepers stays linear in them.
    queue: Vec<usize>,
    summaries: Vec<u32>,
    evaluated: Vec<u32>,
    gone: Vec<bool>,
    before: Vec<usize>,
    after: Vec<usize>,
    /// Per semaphore, the last change of this walk that touched it (0:
    /// none); `marked` lists the ones to clear at the end.
    changed: Vec<u32>,
    marked: Vec<usize>,
    /// The semaphores changed so far, folded as a summary masks several.
    folded: u32,
    /// Changes made so far; change 1 is the one the walk is for.
    generation: u32,
    /// Alter sleepers left on the queue, and wait-for-zero ones of one
    /// operation and of several: a list with none is not walked.
    alters: usize,
    zeros: usize,
    complex_zeros: usize,
    /// The operations of the sleeper looked at, its evaluation, and the
    /// semaphores of the last completion.
    ops: Vec<SemBuf>,
    eval: Eval,
    completed: Vec<usize>,
    /// Per process slot, whether its process is alive, as far as this walk
    /// asked (`Locked::owner_alive`).
    alive: Vec<Liveness>,
    /// A sleeper whose operations now fail is completed with the error
    /// (not in a [`Change::Lost`] walk).
    fails: bool,
}

/// What a walk learned of a process slot's owner.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Liveness {
    #[default]
    Unknown,
    Alive,
    Dead,
}

impl Walk {
    fn begin(&mut self, nsems: usize) {
        if self.changed.len() != nsems {
            self.changed.clear();
            self.changed.resize(nsems, 0);
        }
        self.folded = 0;
        self.generation = 1;
        let len = self.queue.len();
        self.evaluated.clear();
        self.evaluated.resize(len, 0);
        self.gone.clear();
        self.gone.resize(len, false);
        self.before.clear();
        self.before.extend((0..len).map(|i| i.wrapping_sub(1)));
        self.after.clear();
        self.after.extend(1..=len);
        self.alive.clear();
        self.alive.resize(NPROC, Liveness::Unknown);
        (self.alters, self.zeros, self.complex_zeros) = (0, 0, 0);
        for i in 0..self.summaries.len() {
            *self.count_of(Kind::of(self.summaries[i])) += 1;
        }
    }

    fn end(&mut self) {
        for &num in &self.marked {
            self.changed[num] = 0;
        }
        self.marked.clear();
    }

    /// Semaphore `num` changed in the current change.
    fn mark(&mut self, num: usize) {
        if self.changed[num] == 0 {
            self.marked.push(num);
        }
        self.changed[num] = self.generation;
        self.folded |= 1 << (num % summary::MASK_BITS);
    }

    /// Whether a sleeper with `summary`, last evaluated after change
    /// `since`, may name a semaphore changed after it: exact for one
    /// operation, a superset for several.
    fn may_concern(&self, summary: u32, since: u32) -> bool {
        if summary & summary::MANY != 0 {
            summary & self.folded & ((1 << summary::MASK_BITS) - 1) != 0
        } else {
            self.changed_after((summary & summary::NUM) as usize, since)
        }
    }

    /// Whether semaphore `num` changed after change `since`; a number
    /// beyond the set did not.
    fn changed_after(&self, num: usize, since: u32) -> bool {
        self.changed.get(num).is_some_and(|&g| g > since)
    }

    /// The count of sleepers on the lists of `kind`.
    fn count_of(&mut self, kind: Kind) -> &mut usize {
        match kind {
            Kind::Alter(_) | Kind::ComplexAlter => &mut self.alters,
            Kind::Zero(_) => &mut self.zeros,
            Kind::ComplexZero => &mut self.complex_zeros,
        }
    }

    /// Whether the sleeper at position `i` is still queued.
    fn queued(&self, i: usize) -> bool {
        !self.gone[i]
    }

    /// The slot queued just before position `i` (still queued); `None` at
    /// the head.
    fn slot_before(&self, i: usize) -> Option<usize> {
        self.queue.get(self.before[i]).copied()
    }

    /// Takes the sleeper at position `i` out of the walk's queue.
    fn remove(&mut self, i: usize) {
        *self.count_of(Kind::of(self.summaries[i])) -= 1;
        self.gone[i] = true;
        let (before, after) = (self.before[i], self.after[i]);
        if let Some(b) = self.after.get_mut(before) {
            *b = after;
        }
        if let Some(a) = self.before.get_mut(after) {
            *a = before;
        }
    }
}

/// The rescan rule's input (`Skipped`) from the summary flags of the
/// sleepers a walk passed over.
fn skipped(passed: u32) -> Skipped {
    Skipped {
        waits_for_zero: passed & summary::ZERO != 0,
        uses_undo: passed & summary::UNDO != 0,
        has_nowait: passed & summary::NOWAIT != 0,
    }
}

/// How a retry of one sleeper ended.
enum Retry {
    /// Not evaluated: nothing it names changed since it last was.
    Unchanged,
    Blocked,
    Failed,
    /// Completed; its operations are in `Walk::ops`.
    Done,
}

std::thread_local! {
    static WALK: std::cell::RefCell<Walk> = std::cell::RefCell::new(Walk::default());
}

impl Locked<'_> {
    /// Completes the queued sleepers that `change` lets through, as the
    /// kernel does after it (`do_smart_update`).
    pub(super) fn smart_update(&mut self, change: Change<'_>) {
        if self.map.load(header::QUEUE_HEAD) == 0 {
            return;
        }
        // A walk's buffers are the thread's: a post that completes sleepers
        // would otherwise allocate several of them.
        let mut walk = super::engine::take_buffers(&WALK);
        if self.queue_with_summaries(&mut walk).is_ok() {
            walk.begin(self.map.layout.nsems);
            let mut nums = std::mem::take(&mut walk.completed);
            nums.clear();
            match change {
                Change::Ops(sops) => {
                    for sop in sops.iter().filter(|s| s.op != 0) {
                        walk.mark(usize::from(sop.num));
                    }
                    nums.extend(sops.iter().map(|s| usize::from(s.num)));
                }
                Change::All | Change::Lost => {
                    for num in 0..self.map.layout.nsems {
                        walk.mark(num);
                    }
                    nums.extend(0..self.map.layout.nsems);
                }
            }
            walk.fails = !matches!(change, Change::Lost);
            self.wakeup_zero(&mut walk, &nums);
            walk.completed = nums;
            let global = self.map.load(header::COMPLEX) != 0 && walk.alters > 0;
            self.update_alter(&mut walk, global);
            walk.end();
        }
        super::engine::give_back(&WALK, walk);
    }

    /// The queue in order, and each sleeper's summary.
    fn queue_with_summaries(&self, walk: &mut Walk) -> Result<(), SemError> {
        self.queue_into(&mut walk.queue)?;
        let layout = self.map.layout;
        walk.summaries.clear();
        walk.summaries.extend(
            walk.queue
                .iter()
                .map(|&slot| self.map.load(layout.summary(slot))),
        );
        Ok(())
    }

    /// Completes the wait-for-zero sleepers of each of `nums` now at zero,
    /// then the complex ones if any was (`do_smart_wakeup_zero`).
    fn wakeup_zero(&mut self, walk: &mut Walk, nums: &[usize]) {
        let mut got_zero = false;
        for &num in nums {
            if super::eval::value(self.map, num) == 0 {
                got_zero = true;
                self.wake_const(walk, Some(num));
            }
        }
        if got_zero {
            self.wake_const(walk, None);
        }
    }

    /// One pass over semaphore `num`'s wait-for-zero sleepers, or (`None`)
    /// the complex ones (`wake_const_ops`). Their completions change no value.
    fn wake_const(&mut self, walk: &mut Walk, num: Option<usize>) {
        let list = num.map_or(Kind::ComplexZero, Kind::Zero);
        if *walk.count_of(list) == 0 {
            return;
        }
        for i in 0..walk.queue.len() {
            if !walk.queued(i) || Kind::of(walk.summaries[i]) != list {
                continue;
            }
            // Every one, as the kernel does: the kernel looks at a
            // wait-for-zero sleeper only when one of the semaphores changed is
            // zero, so what it last found, its blocking operation, may be
            // older than the last change of its semaphores.
            self.retry(walk, i, true);
        }
    }

    /// The alter sleepers (`update_queue`): the global list when `global`,
    /// else every semaphore's own list in one pass (they are independent:
    /// each of their sleepers names its one semaphore, and no complex
    /// sleeper exists).
    fn update_alter(&mut self, walk: &mut Walk, global: bool) {
        let mut i = 0;
        // Since the walk last started from the head: the summary flags of
        // the alter sleepers it passed over, and whether it passed any.
        let (mut passed, mut passed_flags) = (false, 0);
        // A completion after which the kernel starts again but this walk
        // did not (below) left the sleepers passed before it to look at again.
        let mut look_again = false;
        loop {
            while i < walk.queue.len() {
                if !walk.queued(i) {
                    i += 1;
                    continue;
                }
                let summary = walk.summaries[i];
                let eligible = match Kind::of(summary) {
                    // A semaphore's own list holds decrements only: none can
                    // proceed from zero (the kernel stops there).
                    Kind::Alter(num) if !global => {
                        num < self.map.layout.nsems && super::eval::value(self.map, num) != 0
                    }
                    Kind::Alter(_) | Kind::ComplexAlter => global,
                    Kind::Zero(_) | Kind::ComplexZero => false,
                };
                if !eligible {
                    i += 1;
                    continue;
                }
                match self.retry(walk, i, false) {
                    Retry::Unchanged | Retry::Blocked => {
                        passed = true;
                        passed_flags |= summary;
                        i += 1;
                    }
                    Retry::Failed => i += 1,
                    Retry::Done => {
                        // `check_restart`: the kernel starts again from the
                        // head while the global list is in use, or after a
                        // complex sleeper.
                        let restarts = (global && walk.alters > 0) || walk.ops.len() > 1;
                        // The rescan rule (`Skipped::may_run_after`): whether
                        // the completion can have let a passed sleeper through,
                        // or made it fail, which the kernel would find before
                        // the walk reaches later sleepers. Otherwise each still
                        // blocks, perhaps on another operation, which the
                        // walk's last pass finds.
                        let may_unblock = passed && skipped(passed_flags).may_run_after(&walk.ops);
                        self.after_completion(walk);
                        i += 1;
                        if restarts && may_unblock {
                            i = 0;
                            (passed, passed_flags, look_again) = (false, 0, false);
                        } else if restarts && passed {
                            look_again = true;
                        }
                    }
                }
            }
            if !look_again {
                break;
            }
            i = 0;
            (passed, passed_flags, look_again) = (false, 0, false);
        }
    }

    /// What follows a completion in `update_queue`: its semaphores count
    /// as changed, and those it left at zero get their wake-ups.
    fn after_completion(&mut self, walk: &mut Walk) {
        walk.generation += 1;
        for k in 0..walk.ops.len() {
            let sop = walk.ops[k];
            if sop.op != 0 {
                walk.mark(usize::from(sop.num));
            }
        }
        let mut completed = std::mem::take(&mut walk.completed);
        completed.clear();
        completed.extend(walk.ops.iter().map(|s| usize::from(s.num)));
        self.wakeup_zero(walk, &completed);
        walk.completed = completed;
    }

    /// Whether process slot `owner` still belongs to incarnation `gen` of a
    /// live process: a load for this process and for a slot taken by a
    /// later one, else its liveness lock asked once per walk (a system
    /// call).
    fn owner_alive(&self, walk: &mut Walk, owner: usize, gen: u32) -> bool {
        if (owner, gen) == (self.me.slot, self.me.gen) {
            return true;
        }
        if !holds_incarnation(self.map, owner, gen) {
            return false;
        }
        if walk.alive[owner] == Liveness::Unknown {
            walk.alive[owner] = if owner != self.me.slot && incarnation_alive(self.map, owner, gen)
            {
                Liveness::Alive
            } else {
                Liveness::Dead
            };
        }
        walk.alive[owner] == Liveness::Alive
    }

    /// Evaluates the sleeper at queue position `i`, `always` or if
    /// something it names changed since it last was, and completes it
    /// (success or error) if it no longer blocks; a completed sleeper leaves
    /// `walk`'s queue.
    fn retry(&mut self, walk: &mut Walk, i: usize, always: bool) -> Retry {
        let counters = &self.map.counters;
        Counters::bump(&counters.visited, 1);
        let (slot, since) = (walk.queue[i], walk.evaluated[i]);
        // Passed over on its summary alone when it names no semaphore
        // changed since: its slot is not read.
        if !always && !walk.may_concern(walk.summaries[i], since) {
            return Retry::Unchanged;
        }
        let layout = self.map.layout;
        if self.read_sleeper_ops(slot, &mut walk.ops).is_err() {
            return Retry::Unchanged;
        }
        let (owner, gen) = split_owner(self.map.load(layout.sleeper(slot, sleeper::OWNER)));
        let changed = walk
            .ops
            .iter()
            .any(|s| walk.changed_after(usize::from(s.num), since));
        if owner >= NPROC || !(always || changed) {
            return Retry::Unchanged;
        }
        // A dead process's sleeper is passed over: the kernel takes a
        // killed sleeper off its queue as it dies, so no unit goes to it. Here
        // it stays queued until the next search for the dead (`reap`), which
        // drops it (and applies its process's undo).
        if !self.owner_alive(walk, owner, gen) {
            return Retry::Unchanged;
        }
        evaluate_into(self.map, &walk.ops, owner, &mut walk.eval);
        Counters::bump(&counters.attempts, 1);
        walk.evaluated[i] = walk.generation;
        if !walk.fails && matches!(walk.eval.outcome, Outcome::Failed(_)) {
            return Retry::Unchanged;
        }
        let mut tx = Tx::begin(self.map);
        let retry = match walk.eval.outcome {
            Outcome::Blocked(at) => {
                tx.write(layout.sleeper(slot, sleeper::BLOCKING), at as u32);
                tx.commit();
                return Retry::Blocked;
            }
            Outcome::Failed(e) => {
                let before = Place::after(walk.slot_before(i));
                self.finish_sleeper(&mut tx, before, slot, &walk.ops, e.errno() as u32);
                Retry::Failed
            }
            Outcome::Done => {
                let pid = self.map.load(layout.proc(owner, proc_slot::PID));
                self.apply(&mut tx, &walk.eval, owner, pid);
                let before = Place::after(walk.slot_before(i));
                self.finish_sleeper(&mut tx, before, slot, &walk.ops, 0);
                Retry::Done
            }
        };
        tx.commit();
        if matches!(retry, Retry::Done) {
            super::engine::touch_otime(self.map);
        }
        self.woken.push(slot);
        walk.remove(i);
        retry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_tells_the_kernels_list() {
        let op = SemBuf::new;
        let kind = |sops: &[SemBuf]| Kind::of(summary::of(sops));
        assert_eq!(kind(&[op(3, 0, 0)]), Kind::Zero(3));
        assert_eq!(kind(&[op(3, -1, 0)]), Kind::Alter(3));
        assert_eq!(kind(&[op(3, 0, 0), op(4, 0, 0)]), Kind::ComplexZero);
        assert_eq!(kind(&[op(3, 0, 0), op(3, 1, 0)]), Kind::ComplexAlter);
    }
}
