//! Sleepers on the set's wait lists: where a blocked call queues, how a
//! waker completes it, and how a timed-out one leaves (the kernel's
//! `update_queue`, `wake_const_ops`, `do_smart_update`).
//!
//! The waker completes the sleeper (Kenneth W. Chen, "ipc semaphore
//! optimization", LKML, June 2003): it performs the sleeper's operation for
//! it, under the lock, and [`deliver`](SetShared::deliver)s the result into
//! the sleeper's status word (`queue.rs`); the sleeper returns it without
//! taking a lock, and nobody evaluates an operation twice. Per-semaphore wait
//! lists and a rescan rule keep bulk wake-ups O(N) (Manfred Spraul,
//! "ipc/sem.c: Optimization for reducing spinlock contention", LKML, April
//! 2010).
//!
//! A blocked single operation waits on its semaphore's `alter` list (a
//! decrement) or `zero` list (wait-for-zero); a blocked complex operation on
//! the global lists. When the first complex operation goes to sleep the
//! per-semaphore alter lists are spliced into the global one, so alter
//! operations keep FIFO order relative to it; when the last complex sleeper
//! is gone they move back. A successful change re-evaluates the sleepers it
//! may have enabled ([`SetShared::smart_update`]): wait-for-zero sleepers of
//! the semaphores it brought to zero, then the alter sleepers of the
//! semaphores it incremented.
//!
//! Scans are FIFO, and a blocked sleeper is skipped, not a barrier (a later
//! `-1` may bypass an earlier `-2`), exactly as the kernel does. After a
//! completion the kernel restarts a global-list scan from the head; we
//! restart only when an entry already skipped could have become runnable
//! (the completed operation incremented something; or it decremented
//! something and a skipped entry waits for a value to reach zero; or it
//! changed an undo adjustment and a skipped entry has one). Without
//! that, waking N complex sleepers in reverse order of arrival costs N²
//! evaluations (the first patch of Spraul's 2010 series); with it, a bulk
//! wake is O(N).

use super::counters::Counters;
use super::mode::Held;
use super::perform::{would_block, Attempt, Op};
use super::queue::{sem_bit, sem_mask, NodeRef, Sleeper, Waited, Wakeups, DONE};
use super::state::SetShared;
use super::wait_list::WaitList;
use super::word;
use super::{SemBuf, SEM_UNDO};
use crate::prefetch;
use crate::sync::Ordering;

/// What the entries an `update_queue` scan skipped since its last restart
/// are blocked on: the input of the rescan rule, which the shared sets'
/// walk (`shared/wake.rs`) applies too.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Skipped {
    /// Some skipped entry is blocked on a wait-for-zero operation, which a
    /// decrement elsewhere in an array can enable.
    pub(super) waits_for_zero: bool,
    /// Some skipped entry has undo adjustments, whose range a completed
    /// operation's `SEM_UNDO` change can move.
    pub(super) uses_undo: bool,
    /// Some skipped entry has an operation with `IPC_NOWAIT`, which a
    /// decrement elsewhere in an array can make fail (EAGAIN) where it
    /// passed before: the kernel, which looks again at once, returns that.
    pub(super) has_nowait: bool,
}

impl Skipped {
    /// Counts `sleeper` as kept, waiting for zero where `waits_for_zero`
    /// says (its blocking operation, or any of its operations when the scan
    /// passed it over unevaluated).
    ///
    /// # Safety
    ///
    /// `sleeper` is still queued under the lock the caller holds.
    unsafe fn keep(&mut self, sleeper: &Sleeper, waits_for_zero: bool) {
        self.waits_for_zero |= waits_for_zero;
        self.has_nowait |= sleeper.has_nowait();
        // SAFETY: per the caller's contract, the owner is blocked.
        self.uses_undo |= unsafe { sleeper.undo() }.is_some();
    }

    /// The rescan rule: whether completing `done` can have made one of the
    /// skipped entries runnable (or failing). Only if it raised a value, or
    /// lowered one while a skipped entry waits for zero or has an operation
    /// with `IPC_NOWAIT`, or changed an undo adjustment while a skipped entry
    /// has some (a block can turn into an `ERANGE` of an earlier operation).
    /// A completion that did none of these leaves every skipped entry
    /// blocked, so the scan goes on where it is.
    pub(super) fn may_run_after(self, done: &[SemBuf]) -> bool {
        let raised = done.iter().any(|s| s.op > 0);
        let lowered = done.iter().any(|s| s.op < 0);
        let undid = done.iter().any(|s| s.op != 0 && s.flags & SEM_UNDO != 0);
        raised || (undid && self.uses_undo) || (lowered && (self.waits_for_zero || self.has_nowait))
    }
}

/// How far ahead of the entry it evaluates a scan asks for a node's line:
/// far enough that the line arrives before the scan gets there (an
/// evaluation takes tens of nanoseconds, a miss to another CPU's cache
/// about a hundred), near enough that the few first entries, which the scan
/// reaches before any prefetch could help, stay few.
const SCAN_PREFETCH_AHEAD: usize = 4;

impl SetShared {
    /// Re-evaluates a queued sleeper.
    pub(super) fn retry(&self, held: &Held, node: NodeRef) -> Attempt {
        // SAFETY: `node` is on a list protected by `held`, so its owner is
        // blocked and its operation array and undo entry are alive.
        let sleeper = unsafe { node.get() };
        let op = Op {
            // SAFETY: as above.
            sops: unsafe { sleeper.sops() },
            // SAFETY: as above.
            undo: unsafe { sleeper.undo() },
            dupsop: sleeper.dupsop(),
        };
        let attempt = self.perform(held, &op);
        if let Attempt::Blocked(i) = attempt {
            // Written only when it moved: a store would take the node's line
            // from every other cache, and the next waker, likely on another
            // CPU, would miss on it in full instead of reading a shared copy.
            if sleeper.blocking.load(Ordering::Relaxed) != i as u32 {
                sleeper.blocking.store(i as u32, Ordering::Relaxed);
            }
        }
        attempt
    }

    /// Hands an unlinked sleeper its result. A completed complex sleeper no
    /// longer counts as one.
    pub(super) fn deliver(&self, held: &Held, node: NodeRef, status: u32, wakeups: &mut Wakeups) {
        // SAFETY: the node was just unlinked under `held`; its owner is
        // still blocked until the delivery below.
        if unsafe { node.get().sops() }.len() > 1 {
            let complex = &self.global.complex_count;
            complex.store(complex.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        }
        let counters = self.counters(held);
        Counters::bump(&counters.wakeups, 1);
        let parked_before = wakeups.len();
        // SAFETY: unlinked under `held`, no result delivered before.
        unsafe { wakeups.deliver(node, status) };
        Counters::bump(
            &counters.futex_wakes,
            (wakeups.len() - parked_before) as u64,
        );
    }

    /// Completes the wait-for-zero sleepers on one list that can now run
    /// (the kernel's `wake_const_ops`); `None` is the global list.
    pub(super) fn wake_zero_waiters(
        &self,
        held: &Held,
        num: Option<usize>,
        wakeups: &mut Wakeups,
    ) -> bool {
        // An empty list is left where it is, unwritten: most semaphores have
        // no wait-for-zero sleeper, and a post looks at every one it raised.
        let take = |l: &mut WaitList| {
            if l.is_empty() {
                WaitList::new()
            } else {
                core::mem::take(l)
            }
        };
        let mut list = match num {
            Some(n) => self.with_sem_lists(held, n, |l| take(&mut l.zero)),
            None => self.with_global_zero(held, take),
        };
        if list.is_empty() {
            return false;
        }
        let mut completed = false;
        Counters::bump(&self.counters(held).visited, list.len() as u64);
        // Once round the list: the blocked go back to its end, in order, so
        // it keeps its buffer.
        for _ in 0..list.len() {
            let Some(node) = list.pop_front() else { break };
            match self.retry(held, node) {
                Attempt::Blocked(_) => list.push_back(node),
                Attempt::Done => {
                    completed = true;
                    self.deliver(held, node, DONE, wakeups);
                }
                Attempt::Failed(e) => self.deliver(held, node, e.to_code(), wakeups),
            }
        }
        match num {
            Some(n) => self.with_sem_lists(held, n, |l| l.zero = list),
            None => self.with_global_zero(held, |l| *l = list),
        }
        completed
    }

    /// Runs the wait-for-zero sleepers of the semaphores `changed` touched
    /// that are now zero (`do_smart_wakeup_zero`); if any is, the complex
    /// ones too.
    pub(super) fn wakeup_zero(
        &self,
        held: &Held,
        changed: Changed<'_>,
        wakeups: &mut Wakeups,
    ) -> bool {
        let mut completed = false;
        let mut got_zero = false;
        let mut check = |num: usize| {
            if self.value(held, num) == 0 {
                got_zero = true;
                completed |= self.wake_zero_waiters(held, Some(num), wakeups);
            }
        };
        match changed {
            Changed::Ops(sops) => sops.iter().for_each(|s| check(usize::from(s.num))),
            // The kernel looks at every semaphore after a SETVAL, and any
            // zero among them sends it through the complex wait-for-zero
            // sleepers. Those exist only in global mode; in per-semaphore
            // mode the other semaphores' own sleepers are unchanged.
            Changed::One(num) if !held.is_global() => check(num),
            Changed::One(_) | Changed::All => (0..self.nsems()).for_each(&mut check),
        }
        if got_zero && held.is_global() {
            completed |= self.wake_zero_waiters(held, None, wakeups);
        }
        completed
    }

    /// Completes the alter sleepers that can now run, in FIFO order, on
    /// semaphore `num`'s list or (`None`) the global list (`update_queue`).
    ///
    /// A completion that does not restart the scan (the rescan rule) leaves
    /// the entries skipped before it blocked, but not necessarily on the
    /// operation they were last found blocked on: a decrement can make an
    /// earlier operation of a complex sleeper block instead. The kernel
    /// rescans after every completion, so its GETNCNT and GETZCNT count them
    /// where they block now. So when such a completion left complex entries
    /// behind, the scan ends with one more pass over what it kept, which
    /// refreshes their blocking operation (and still completes nobody, by the
    /// rule): the bulk wake-up stays O(N).
    ///
    /// `changed`: the semaphores the change that calls it touched, as
    /// [`sem_mask`] folds them (`u64::MAX`: any). A scan passes over, as
    /// still blocked where it was, every entry none of whose semaphores is
    /// in `changed` or was touched by a completion of this scan. That is
    /// exact: every change of a value in global mode runs this scan of the
    /// global list (`smart_update`), so each entry was last evaluated after
    /// the last change of its own semaphores, and its evaluation depends on
    /// nothing else. It saves the retry's cache misses on the caller's
    /// operations and the semaphores' words, under the global lock, for
    /// every sleeper of a large set that the change cannot concern
    /// (`ksync-lab dining --sems 64`).
    pub(super) fn update_queue(
        &self,
        held: &Held,
        num: Option<usize>,
        changed: u64,
        wakeups: &mut Wakeups,
    ) -> bool {
        let mut list = match num {
            Some(n) => self.with_sem_lists(held, n, |l| core::mem::take(&mut l.alter)),
            None => self.with_global_alter(held, core::mem::take),
        };
        if list.is_empty() {
            return false;
        }
        let mut completed = false;
        list.keep_front(|entries| {
            let (kept, any) = self.scan_alter(held, num, changed, entries, wakeups);
            completed = any;
            kept
        });
        match num {
            Some(n) => self.with_sem_lists(held, n, |l| {
                debug_assert!(l.alter.is_empty());
                l.alter = list;
            }),
            None => self.with_global_alter(held, |l| {
                debug_assert!(l.is_empty());
                *l = list;
            }),
        }
        completed
    }

    /// [`update_queue`](Self::update_queue)'s scan of a list's `entries`,
    /// in place. Returns how many entries at the front stay queued, in
    /// order, and whether any sleeper completed.
    fn scan_alter(
        &self,
        held: &Held,
        num: Option<usize>,
        mut changed: u64,
        entries: &mut [NodeRef],
        wakeups: &mut Wakeups,
    ) -> (usize, bool) {
        let mut completed = false;
        let mut visited = 0u64;
        // The scan works in place, so the list keeps its buffer: entries
        // `..kept` were skipped (still queued, in order), entries
        // `next..len` are still to be looked at, and the ones in between
        // were completed.
        let mut len = entries.len();
        let (mut next, mut kept) = (0, 0);
        // Puts what is still to be looked at right behind what was kept.
        let close_gap = |entries: &mut [NodeRef], next: usize, kept: usize, len: usize| {
            entries.copy_within(next..len, kept);
            kept + (len - next)
        };
        // The first few, which the prefetch inside the scan does not reach.
        for node in entries.iter().take(SCAN_PREFETCH_AHEAD) {
            prefetch::for_read(node.as_ptr());
        }
        loop {
            // What the kept entries (skipped since the last restart) wait for.
            let mut skipped = Skipped::default();
            // How many kept entries were evaluated before the last completion
            // that did not restart the scan.
            let mut stale = 0;
            while next < len {
                // A per-semaphore list holds decrements only: nothing more
                // can run once the value is 0.
                if num.is_some_and(|n| self.value(held, n) == 0) {
                    break;
                }
                // A node sits in its sleeper's pool slot, in no order the
                // list keeps, so each is a miss of its own; asked for a few
                // entries ahead, the misses overlap the evaluations.
                if let Some(ahead) = entries.get(next + SCAN_PREFETCH_AHEAD) {
                    prefetch::for_read(ahead.as_ptr());
                }
                let node = entries[next];
                next += 1;
                visited += 1;
                // SAFETY: still queued under `held`.
                let sleeper = unsafe { node.get() };
                if sleeper.sem_mask() & changed == 0 {
                    // Blocked where it was (see the doc): kept, as the
                    // rescan rule sees it without its blocking operation.
                    // SAFETY: as above.
                    unsafe { skipped.keep(sleeper, sleeper.has_wait_for_zero()) };
                    entries[kept] = node;
                    kept += 1;
                    continue;
                }
                match self.retry(held, node) {
                    Attempt::Blocked(i) => {
                        // SAFETY: still queued under `held`.
                        let waits_for_zero = unsafe { sleeper.sops() }[i].op == 0;
                        // SAFETY: as above.
                        unsafe { skipped.keep(sleeper, waits_for_zero) };
                        entries[kept] = node;
                        kept += 1;
                    }
                    Attempt::Failed(e) => self.deliver(held, node, e.to_code(), wakeups),
                    Attempt::Done => {
                        completed = true;
                        changed |= sleeper.sem_mask();
                        // SAFETY: the owner stays blocked until `deliver`.
                        let sops = unsafe { node.get().sops() };
                        self.wakeup_zero(held, Changed::Ops(sops), wakeups);
                        let restart = kept > 0 && skipped.may_run_after(sops);
                        self.deliver(held, node, DONE, wakeups);
                        if restart {
                            // Rescan from the head, in the same order as before.
                            len = close_gap(entries, next, kept, len);
                            (next, kept) = (0, 0);
                            skipped = Skipped::default();
                            stale = 0;
                        } else {
                            stale = kept;
                        }
                    }
                }
            }
            // SAFETY: every kept entry is still queued under `held`.
            let moved = |node: &NodeRef| unsafe { node.get().sops() }.len() > 1;
            if !entries[..stale].iter().any(moved) {
                break;
            }
            len = close_gap(entries, next, kept, len);
            (next, kept) = (0, 0);
        }
        let kept = close_gap(entries, next, kept, len);
        Counters::bump(&self.counters(held).visited, visited);
        (kept, completed)
    }

    /// Asks for the first alter sleeper of every semaphore `sops` raised, so
    /// that the scan below finds their nodes in cache: each node sits in its
    /// sleeper's slot of the node pool, last written on another CPU, and one
    /// after the other those misses are most of a large post's time
    /// (sembench's poster raises 64 semaphores with one sleeper each).
    fn prefetch_first_sleepers(&self, held: &Held, sops: &[SemBuf]) {
        for sop in sops.iter().filter(|s| s.op > 0) {
            let num = usize::from(sop.num);
            if let Some(node) = self.with_sem_lists(held, num, |l| l.alter.front()) {
                // The status the waker swaps shares the node's line.
                prefetch::for_write(node.as_ptr());
            }
        }
    }

    /// After a successful change, completes every sleeper it enabled
    /// (`do_smart_update`).
    pub(super) fn smart_update(
        &self,
        held: &Held,
        changed: Changed<'_>,
        mut set_otime: bool,
        wakeups: &mut Wakeups,
    ) {
        set_otime |= self.wakeup_zero(held, changed, wakeups);
        if !self.global_alter_is_empty(held) {
            let mask = match changed {
                Changed::Ops(sops) => sem_mask(sops),
                Changed::One(num) => sem_bit(num),
                Changed::All => u64::MAX,
            };
            set_otime |= self.update_queue(held, None, mask, wakeups);
        } else {
            // A semaphore's own list: every entry names that semaphore.
            let all = u64::MAX;
            match changed {
                Changed::All => {
                    for num in 0..self.nsems() {
                        set_otime |= self.update_queue(held, Some(num), all, wakeups);
                    }
                }
                // Every other semaphore's alter sleepers are unchanged
                // (and in global mode with complex sleepers, merged into the
                // global list).
                Changed::One(num) => set_otime |= self.update_queue(held, Some(num), all, wakeups),
                Changed::Ops(sops) => {
                    if sops.len() > 2 {
                        self.prefetch_first_sleepers(held, sops);
                    }
                    // Decrements cannot enable an alter sleeper.
                    for sop in sops.iter().filter(|s| s.op > 0) {
                        let num = usize::from(sop.num);
                        set_otime |= self.update_queue(held, Some(num), all, wakeups);
                    }
                }
            }
        }
        if set_otime {
            // The kernel records the time on the first operation's
            // semaphore, or semaphore 0 after a control call.
            let num = match changed {
                Changed::Ops(sops) => usize::from(sops[0].num),
                Changed::One(_) | Changed::All => 0,
            };
            self.touch_otime(num);
        }
    }

    // ---- sleeping ---------------------------------------------------------

    /// Queues `node` where wakers will look for it (the caller's own attempt
    /// blocked under `held`). A complex sleeper needs the global lock.
    pub(super) fn enqueue(&self, held: &Held, sops: &[SemBuf], alter: bool, node: NodeRef) {
        if sops.len() == 1 {
            let num = usize::from(sops[0].num);
            // While complex sleepers exist (global mode) every alter
            // sleeper queues on the global list, after them.
            let behind_complex =
                held.is_global() && self.global.complex_count.load(Ordering::Relaxed) > 0;
            if !alter {
                self.with_sem_lists(held, num, |l| l.zero.push_back(node));
            } else if behind_complex {
                self.with_global_alter(held, |l| l.push_back(node));
            } else {
                self.with_sem_lists(held, num, |l| l.alter.push_back(node));
            }
        } else {
            let complex = &self.global.complex_count;
            if complex.load(Ordering::Relaxed) == 0 {
                self.merge_queues(held);
            }
            if alter {
                self.with_global_alter(held, |l| l.push_back(node));
            } else {
                self.with_global_zero(held, |l| l.push_back(node));
            }
            complex.store(complex.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// The way in of the usual sleeper, a single operation that may block
    /// ([`polls_before_queueing`](Self::polls_before_queueing): sembench's
    /// workers, and every use of a semaphore as a lock or an event count):
    /// takes its semaphore's lock alone and, if the operation blocks at the
    /// value found, counts the attempt and returns that value with the lock
    /// held, for [`queue_single`](Self::queue_single). `None`, with nothing
    /// held and nothing counted, if the set is in global mode or removed (a
    /// removed set's words all carry `REMOVED`, which the lock turns away)
    /// or if the operation can proceed now; the caller then takes the
    /// general path, which locks, evaluates again and counts its attempt.
    ///
    /// What it does is what the general path does for such a call
    /// (`lock_for`, `perform`, `enqueue`, `unlock`), without a lock set
    /// built for one semaphore, the evaluation's dispatch, or the choice
    /// among the lists a complex call needs: without them sembench `-t 250`
    /// burns about 1% faster on two CPUs, where its workers' CPU time is
    /// what bounds it (BENCHMARKS.md, issue 12's seventeenth round).
    pub(super) fn lock_blocked_single(&self, sop: &SemBuf) -> Option<i32> {
        debug_assert!(self.polls_before_queueing(sop));
        let num = usize::from(sop.num);
        let value = self.lock_sem(num).ok()?;
        if would_block(sop, value) {
            // The caller's own attempt, as `perform` counts it.
            Counters::bump(&self.sems[num].counters.attempts, 1);
            return Some(value);
        }
        Self::release(&self.sems[num], value, |w| w);
        None
    }

    /// Queues `node`, the blocked single operation `sop`, on its
    /// semaphore's own list (a wait for zero on the zero list, a decrement
    /// on the alter list, as `enqueue` does in per-semaphore mode) and
    /// releases the lock [`lock_blocked_single`](Self::lock_blocked_single)
    /// took, with `value` unchanged and `SLEEPERS` set.
    pub(super) fn queue_single(&self, sop: &SemBuf, value: i32, node: NodeRef) {
        let sem = &self.sems[usize::from(sop.num)];
        // SAFETY: we hold the semaphore's lock (`lock_blocked_single`),
        // which protects its lists; the reference does not escape.
        sem.lists.with_mut(|l| unsafe {
            if sop.op == 0 {
                (*l).zero.push_back(node);
            } else {
                (*l).alter.push_back(node);
            }
        });
        Self::release(sem, value, |w| word::published(w, 0, true));
    }

    /// Takes a timed-out sleeper off whatever list it is on. Returns false if
    /// it was on none (a waker got there first).
    pub(super) fn unlink(&self, held: &Held, sops: &[SemBuf], node: NodeRef) -> bool {
        let remove = |l: &mut WaitList| l.remove(node);
        let num = usize::from(sops[0].num);
        let found = if sops.len() == 1 {
            self.with_sem_lists(held, num, |l| remove(&mut l.alter) || remove(&mut l.zero))
                || (held.is_global() && self.with_global_alter(held, remove))
        } else {
            // A queued complex sleeper keeps the set in global mode; one
            // that is not queued any more may find it per-semaphore.
            held.is_global()
                && (self.with_global_alter(held, remove) || self.with_global_zero(held, remove))
        };
        if found && sops.len() > 1 {
            let complex = &self.global.complex_count;
            complex.store(complex.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        }
        found
    }

    /// Sleepers blocked on `num`: decrements (`zero == false`) or
    /// wait-for-zero operations. Only the operation a sleeper is blocked on
    /// counts (SUSv3, Linux since 3.16). The global lists (global mode only)
    /// say so in each sleeper's `blocking`; the semaphore's own hold single
    /// operations on it.
    pub(super) fn count_sleepers(&self, held: &Held, num: usize, zero: bool) -> usize {
        let blocked_here = |list: &WaitList| {
            list.iter()
                .filter(|node| {
                    // SAFETY: queued under the global lock we hold.
                    let sleeper = unsafe { node.get() };
                    // SAFETY: as above.
                    let sops = unsafe { sleeper.sops() };
                    let sop = sops[sleeper.blocking.load(Ordering::Relaxed) as usize];
                    usize::from(sop.num) == num && if zero { sop.op == 0 } else { sop.op < 0 }
                })
                .count()
        };
        let mut count =
            self.with_sem_lists(
                held,
                num,
                |l| if zero { l.zero.len() } else { l.alter.len() },
            );
        if held.is_global() {
            count += self.with_global_alter(held, |l| blocked_here(l));
            if zero {
                count += self.with_global_zero(held, |l| blocked_here(l));
            }
        }
        count
    }
}

impl SetShared {
    /// Issues the wake-ups a call owes, with no lock held, and counts the
    /// system calls on `counters`.
    pub(super) fn wake(&self, wakeups: Wakeups, counters: &Counters) {
        let calls = wakeups.wake_all();
        if calls > 0 {
            Counters::add(&counters.outside.wake_calls, calls as u64);
        }
    }

    /// Counts a blocked call's polls and futex waits: a single operation's on
    /// its semaphore, a complex call's on the global counters.
    pub(super) fn count_wait(&self, sops: &[SemBuf], waited: &Waited) {
        let counters = self.wait_counters(sops);
        // Each add is a locked instruction on a line every woken sleeper of
        // the semaphore writes: none for a count of zero (in `ksync-lab
        // sembench` most sleepers park without polling, 0.03 polls a burn).
        if waited.polls > 0 {
            Counters::add(&counters.outside.polls, u64::from(waited.polls));
        }
        if waited.parks > 0 {
            Counters::add(&counters.outside.parks, u64::from(waited.parks));
        }
    }
}

impl SetShared {
    /// The counters a blocked call's events go to.
    fn wait_counters(&self, sops: &[SemBuf]) -> &Counters {
        match sops {
            [sop] => &self.sems[usize::from(sop.num)].counters,
            _ => &self.global.counters,
        }
    }

    /// A woken caller's share of its waker's wake-ups
    /// ([`Sleeper::help_wake`]), counted with the caller's waits. Call it
    /// once the call has its result, with no lock held.
    pub(super) fn help_wake(&self, sops: &[SemBuf], sleeper: &Sleeper) {
        let calls = sleeper.help_wake();
        if calls > 0 {
            Counters::add(&self.wait_counters(sops).outside.wake_calls, calls as u64);
        }
    }
}

/// What a successful change touched, for [`SetShared::smart_update`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Changed<'a> {
    /// A call's operations (or a completed sleeper's).
    Ops(&'a [SemBuf]),
    /// One semaphore, set to any value (SETVAL).
    One(usize),
    /// Any semaphore (SETALL, an undo context applied).
    All,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::queue::{Sleeper, PENDING};
    use crate::sem::{SemError, SemSet};

    fn sb(num: u16, op: i16) -> SemBuf {
        SemBuf::new(num, op, 0)
    }

    #[test]
    fn the_rescan_rule() {
        let nothing = Skipped::default();
        let zero = Skipped {
            waits_for_zero: true,
            ..Skipped::default()
        };
        let undo = Skipped {
            uses_undo: true,
            ..Skipped::default()
        };
        let nowait = Skipped {
            has_nowait: true,
            ..Skipped::default()
        };
        let undone = |op| SemBuf::new(0, op, crate::sem::SEM_UNDO);
        // A raise can enable any skipped entry.
        assert!(nothing.may_run_after(&[sb(0, -1), sb(1, 1)]));
        // A decrement only a skipped wait for zero.
        assert!(!nothing.may_run_after(&[sb(0, -1)]));
        assert!(zero.may_run_after(&[sb(0, -1)]));
        assert!(!undo.may_run_after(&[sb(0, -1)]));
        // ... or one with IPC_NOWAIT, which may now fail.
        assert!(nowait.may_run_after(&[sb(0, -1)]));
        assert!(!nowait.may_run_after(&[undone(0)]));
        // An undo change only a skipped entry with adjustments.
        assert!(undo.may_run_after(&[undone(-1)]));
        assert!(!nothing.may_run_after(&[undone(-1)]));
        // A completed wait for zero changes nothing, SEM_UNDO or not.
        assert!(!zero.may_run_after(&[sb(0, 0)]));
        assert!(!undo.may_run_after(&[undone(0)]));
    }

    #[test]
    fn a_kept_sleeper_gives_the_rescan_rule_what_it_waits_on() {
        use crate::sem::undo_entry::UndoEntry;
        use crate::sem::IPC_NOWAIT;
        let keep = |sleeper: &Sleeper, waits_for_zero: bool| {
            let mut skipped = Skipped::default();
            // SAFETY: the sleeper is this test's own, on no list.
            unsafe { skipped.keep(sleeper, waits_for_zero) };
            (
                skipped.waits_for_zero,
                skipped.has_nowait,
                skipped.uses_undo,
            )
        };
        // A plain decrement gives nothing to the rule.
        let plain = [sb(0, -1)];
        assert_eq!(
            keep(&Sleeper::new(&plain, None, 0, false), false),
            (false, false, false)
        );
        // The scan says where it waits for zero.
        let zero = [sb(0, 0)];
        assert_eq!(
            keep(&Sleeper::new(&zero, None, 0, false), true),
            (true, false, false)
        );
        // IPC_NOWAIT on an operation that passed, blocked on a later one:
        // a decrement elsewhere may now make it fail.
        let nowait = [SemBuf::new(0, -1, IPC_NOWAIT), sb(1, -1)];
        assert_eq!(
            keep(&Sleeper::new(&nowait, None, 1, false), false),
            (false, true, false)
        );
        // Undo adjustments, which a completed SEM_UNDO operation may move.
        let undo = UndoEntry::new(2);
        let undone = [SemBuf::new(0, -1, crate::sem::SEM_UNDO)];
        let with_undo = Sleeper::new(&undone, Some(&undo), 0, false);
        assert_eq!(keep(&with_undo, false), (false, false, true));
        // Each input stays set once some kept sleeper set it.
        let mut skipped = Skipped::default();
        // SAFETY: as above.
        unsafe {
            skipped.keep(&Sleeper::new(&nowait, None, 1, false), false);
            skipped.keep(&Sleeper::new(&plain, None, 0, false), false);
        }
        assert!(skipped.has_nowait && skipped.may_run_after(&[sb(2, -1)]));
    }

    fn op_of(sops: &[SemBuf]) -> Op<'_> {
        Op {
            sops,
            undo: None,
            dupsop: false,
        }
    }

    /// A node for each of `calls`, blocked where the caller's own first
    /// attempt under `held` blocks (as `semop` makes it), not yet queued.
    fn blocked_sleepers(set: &SetShared, held: &Held, calls: &[&[SemBuf]]) -> Vec<Sleeper> {
        calls
            .iter()
            .map(|sops| {
                let Attempt::Blocked(at) = set.perform(held, &op_of(sops)) else {
                    panic!("{sops:?} does not block");
                };
                Sleeper::new(sops, None, at, false)
            })
            .collect()
    }

    /// Queues `nodes`, made for `calls`, in order.
    fn queue(set: &SetShared, held: &Held, nodes: &[Sleeper], calls: &[&[SemBuf]]) {
        for (sleeper, sops) in nodes.iter().zip(calls) {
            let alter = sops.iter().any(|s| s.op != 0);
            set.enqueue(held, sops, alter, NodeRef::new(sleeper));
        }
    }

    /// A set in global mode, `values` set, `sleepers` queued with the
    /// caller's own first attempt (as `semop` does); then `post` performed
    /// and its sleepers completed. Returns the sleepers' statuses and the
    /// values after.
    fn post_to(values: &[i32], sleepers: &[&[SemBuf]], post: &[SemBuf]) -> (Vec<u32>, Vec<i32>) {
        let set = SemSet::new(values.len()).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        for (num, &v) in values.iter().enumerate() {
            set.set_value(&held, num, v);
        }
        let nodes = blocked_sleepers(set, &held, sleepers);
        queue(set, &held, &nodes, sleepers);
        assert_eq!(set.perform(&held, &op_of(post)), Attempt::Done);
        let mut wakeups = Wakeups::default();
        set.smart_update(&held, Changed::Ops(post), true, &mut wakeups);
        // Nobody parked, so nobody needs a futex wake.
        assert_eq!(wakeups.len(), 0);
        let statuses: Vec<u32> = nodes
            .iter()
            .map(|s| s.status.load(Ordering::Relaxed))
            .collect();
        for (sleeper, sops) in nodes.iter().zip(sleepers) {
            if sleeper.status.load(Ordering::Relaxed) == PENDING {
                assert!(
                    set.unlink(&held, sops, NodeRef::new(sleeper)),
                    "a pending sleeper is queued"
                );
            }
        }
        assert_eq!(set.global.complex_count.load(Ordering::Relaxed), 0);
        let after = (0..values.len()).map(|n| set.value(&held, n)).collect();
        set.unlock(held);
        (statuses, after)
    }

    #[test]
    fn a_scan_retries_only_the_sleepers_whose_semaphores_changed() {
        let set = SemSet::new(4).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        let calls: [&[SemBuf]; 2] = [&[sb(0, -1), sb(1, -1)], &[sb(2, -1), sb(3, -1)]];
        let nodes = blocked_sleepers(set, &held, &calls);
        queue(set, &held, &nodes, &calls);
        let attempts = || set.global.counters.attempts.load(Ordering::Relaxed);
        // A post to semaphores 0 and 1 concerns the first sleeper only.
        let post = [sb(1, 1), sb(0, 1)];
        assert_eq!(set.perform(&held, &op_of(&post)), Attempt::Done);
        let before = attempts();
        let mut wakeups = Wakeups::default();
        set.smart_update(&held, Changed::Ops(&post), true, &mut wakeups);
        assert_eq!(attempts() - before, 1, "the other sleeper was not retried");
        assert_eq!(nodes[0].status.load(Ordering::Relaxed), DONE);
        assert_eq!(nodes[1].status.load(Ordering::Relaxed), PENDING);
        // SETVAL of semaphore 3 concerns the second one: retried, still blocked.
        set.set_value(&held, 3, 1);
        let before = attempts();
        set.smart_update(&held, Changed::One(3), false, &mut wakeups);
        assert_eq!(attempts() - before, 1);
        assert_eq!(nodes[1].blocking.load(Ordering::Relaxed), 0);
        assert!(set.unlink(&held, calls[1], NodeRef::new(&nodes[1])));
        set.unlock(held);
    }

    #[test]
    fn a_blocked_sleeper_is_skipped_not_a_barrier() {
        // -2 then -1 wait on a zero semaphore; a +1 lets the -1 through.
        let (status, after) = post_to(&[0], &[&[sb(0, -2)], &[sb(0, -1)]], &[sb(0, 1)]);
        assert_eq!(status, [PENDING, DONE]);
        assert_eq!(after, [0]);
    }

    #[test]
    fn sleepers_are_completed_in_arrival_order() {
        let (status, after) = post_to(&[0], &[&[sb(0, -1)], &[sb(0, -1)]], &[sb(0, 1)]);
        assert_eq!(status, [DONE, PENDING]);
        assert_eq!(after, [0]);
        let (status, after) = post_to(&[0], &[&[sb(0, -1)], &[sb(0, -1)]], &[sb(0, 2)]);
        assert_eq!(status, [DONE, DONE]);
        assert_eq!(after, [0]);
    }

    #[test]
    fn a_completion_that_enables_a_skipped_sleeper_rescans() {
        // X needs semaphore 1, which only Y's completion provides; Y needs
        // the post. X is skipped first, then Y's raise sends the scan back.
        let x: &[SemBuf] = &[sb(1, -1), sb(2, 1)];
        let y: &[SemBuf] = &[sb(0, -1), sb(1, 1)];
        let (status, after) = post_to(&[0, 0, 0], &[x, y], &[sb(0, 1)]);
        assert_eq!(status, [DONE, DONE]);
        assert_eq!(after, [0, 0, 1]);
    }

    #[test]
    fn a_decrement_to_zero_completes_the_zero_waiters() {
        let (status, after) = post_to(
            &[1, 1],
            &[&[sb(0, 0)], &[sb(1, 0), sb(0, 0)], &[sb(1, 0)]],
            &[sb(0, -1)],
        );
        assert_eq!(status, [DONE, PENDING, PENDING]);
        assert_eq!(after, [0, 1]);
        let (status, _) = post_to(
            &[1, 1],
            &[&[sb(0, 0)], &[sb(1, 0), sb(0, 0)]],
            &[sb(0, -1), sb(1, -1)],
        );
        assert_eq!(status, [DONE, DONE]);
    }

    #[test]
    fn a_sleeper_that_would_overflow_gets_erange() {
        // The waker delivers the failure the sleeper's own call would have
        // returned: ERANGE once its blocking operation can run.
        let sleeper: &[SemBuf] = &[sb(0, -1), sb(1, crate::sem::SEMVMX as i16)];
        let (status, after) = post_to(&[0, 1], &[sleeper], &[sb(0, 1)]);
        assert_eq!(status, [SemError::Range.to_code()]);
        assert_eq!(after, [1, 1]);
    }

    #[test]
    fn a_sleeper_left_behind_by_a_completion_is_counted_where_it_now_blocks() {
        // The script: X = [1 -1, 0 -1] and Y = [1 -1] wait on two
        // zeros; a +1 on semaphore 1 lets X's first operation pass (X is then
        // blocked on semaphore 0), then completes Y, which takes the unit
        // back: X blocks on semaphore 1 again, as the kernel's rescan finds.
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        let x: [SemBuf; 2] = [sb(1, -1), sb(0, -1)];
        let y: [SemBuf; 1] = [sb(1, -1)];
        let sleepers = [
            Sleeper::new(&x, None, 0, false),
            Sleeper::new(&y, None, 0, false),
        ];
        set.enqueue(&held, &x, true, NodeRef::new(&sleepers[0]));
        set.enqueue(&held, &y, true, NodeRef::new(&sleepers[1]));
        let post = [sb(1, 1)];
        let op = Op {
            sops: &post,
            undo: None,
            dupsop: false,
        };
        assert_eq!(set.perform(&held, &op), Attempt::Done);
        let mut wakeups = Wakeups::default();
        set.smart_update(&held, Changed::Ops(&post), true, &mut wakeups);
        let status = |i: usize| sleepers[i].status.load(Ordering::Relaxed);
        assert_eq!((status(0), status(1)), (PENDING, DONE));
        assert_eq!(set.count_sleepers(&held, 0, false), 0);
        assert_eq!(set.count_sleepers(&held, 1, false), 1);
        assert!(set.unlink(&held, &x, NodeRef::new(&sleepers[0])));
        set.unlock(held);
    }

    #[test]
    fn counts_follow_the_blocking_operation() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        let single: [SemBuf; 1] = [sb(0, -1)];
        let complex: [SemBuf; 2] = [sb(1, 0), sb(0, -1)];
        let zero: [SemBuf; 1] = [sb(1, 0)];
        set.set_value(&held, 1, 1);
        // Blocked on semaphore 1's wait for zero, not on semaphore 0.
        let nodes = [
            (Sleeper::new(&single, None, 0, false), &single[..], true),
            (Sleeper::new(&complex, None, 0, false), &complex[..], true),
            (Sleeper::new(&zero, None, 0, false), &zero[..], false),
        ];
        for (sleeper, sops, alter) in &nodes {
            set.enqueue(&held, sops, *alter, NodeRef::new(sleeper));
        }
        // The complex sleeper names semaphore 0 too, but is blocked on
        // semaphore 1's wait for zero: only that one counts.
        assert_eq!(set.count_sleepers(&held, 0, false), 1);
        assert_eq!(set.count_sleepers(&held, 0, true), 0);
        assert_eq!(set.count_sleepers(&held, 1, true), 2);
        assert_eq!(set.count_sleepers(&held, 1, false), 0);
        assert_eq!(set.global.complex_count.load(Ordering::Relaxed), 1);
        for (sleeper, sops, _) in &nodes {
            assert!(set.unlink(&held, sops, NodeRef::new(sleeper)));
        }
        assert_eq!(set.global.complex_count.load(Ordering::Relaxed), 0);
        assert_eq!(set.count_sleepers(&held, 0, false), 0);
        set.unlock(held);
    }

    /// The usual sleeper's way in queues it as the general path would: on
    /// its own semaphore's alter or zero list, the value unchanged and
    /// `SLEEPERS` set, its attempt counted; an operation that can proceed,
    /// and a set in global mode or removed, are left to the general path
    /// with nothing held and nothing counted.
    #[test]
    fn a_blocked_single_operation_queues_on_its_own_semaphore() {
        use crate::sem::word::{LOCKED, SLEEPERS};
        let sems = SemSet::new(2).unwrap();
        sems.set_value(1, 3).unwrap();
        let set = sems.shared();
        let word = |num: usize| set.sems[num].word.load(Ordering::Relaxed);
        let attempts = |num: usize| set.sems[num].counters.attempts.load(Ordering::Relaxed);
        let lists = |num: usize| {
            // SAFETY: no other thread uses the set.
            set.sems[num]
                .lists
                .with(|l| unsafe { ((*l).alter.len(), (*l).zero.len()) })
        };
        let tried = (attempts(0), attempts(1));
        // Semaphore 1 holds 3: a -1 and a -3 could proceed.
        for op in [-1, -3] {
            assert_eq!(set.lock_blocked_single(&sb(1, op)), None);
            assert_eq!(word(1), 3, "released unchanged");
        }
        // A -1 on semaphore 0 (at 0) and a wait for zero on semaphore 1 block.
        let (down, zero) = ([sb(0, -1)], [sb(1, 0)]);
        let nodes = [
            Sleeper::new(&down, None, 0, false),
            Sleeper::new(&zero, None, 0, false),
        ];
        for (sops, node) in [(&down, &nodes[0]), (&zero, &nodes[1])] {
            let num = usize::from(sops[0].num);
            let value = set.lock_blocked_single(&sops[0]).expect("it blocks");
            assert_eq!((value, word(num) & LOCKED), (set.word_value(num), LOCKED));
            set.queue_single(&sops[0], value, NodeRef::new(node));
        }
        assert_eq!((word(0), word(1)), (SLEEPERS, 3 | SLEEPERS));
        assert_eq!((lists(0), lists(1)), ((1, 0), (0, 1)));
        // One attempt each for the calls that queued; the two given back
        // count theirs on the general path, not here.
        assert_eq!((attempts(0) - tried.0, attempts(1) - tried.1), (1, 1));
        assert_eq!((sems.ncnt(0), sems.zcnt(1)), (Ok(1), Ok(1)));
        // Under the global lock (global mode) nothing is taken.
        let held = set.lock_global();
        assert_eq!(set.lock_blocked_single(&sb(0, -1)), None);
        set.unlock(held);
        // Posts complete them as they complete any sleeper.
        sems.semop(&[sb(0, 1)]).unwrap();
        sems.set_value(1, 0).unwrap();
        let status = nodes.each_ref().map(|n| n.status.load(Ordering::Relaxed));
        assert_eq!(status, [DONE, DONE]);
        assert_eq!((word(0), word(1)), (0, 0));
        // A removed set's words turn the lock away.
        sems.remove().unwrap();
        assert_eq!(set.lock_blocked_single(&sb(0, -1)), None);
    }
}
