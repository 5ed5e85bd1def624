//! Performing an operation array: all of it or none of it, in array order
//! (the kernel's `perform_atomic_semop`).
//!
//! [`scan`] looks at an array once before any lock is taken (the largest
//! semaphore number, whether it alters, uses `SEM_UNDO`, or may name a
//! semaphore it already changed). [`SetShared::perform`] evaluates it
//! against the current values under a lock that covers every semaphore it
//! names:
//!
//! * The first operation that would block or fail decides the outcome, in
//!   array order: a later out-of-range result is not reported when an
//!   earlier operation blocks, and with `IPC_NOWAIT` on the blocking
//!   operation the block becomes `EAGAIN`.
//! * Nothing changes unless everything succeeds: the usual evaluation checks
//!   every operation first and applies them in a second pass; an array that
//!   names a semaphore after changing it is applied one operation at a time,
//!   so that later operations see earlier ones, and rolled back on a block or
//!   an error (the kernel's `dupsop` path).
//! * Success records the undo adjustments and the caller's pid.
//!
//! The caller and every waker re-evaluating a sleeper use the same code, so
//! a sleeper is completed exactly when its own call would have succeeded.

use super::counters::Counters;
use super::error::SemError;
use super::mode::Held;
use super::stamp::current_pid;
use super::state::SetShared;
use super::undo_entry::UndoEntry;
use super::{SemBuf, IPC_NOWAIT, SEMAEM, SEMVMX, SEM_UNDO};
use crate::sync::Ordering;

/// The outcome of evaluating one operation against the current values.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Attempt {
    Done,
    /// Would block at this index of the operation array.
    Blocked(usize),
    Failed(SemError),
}

/// The operation a caller or a sleeper wants, as the evaluator needs it.
pub(super) struct Op<'a> {
    pub(super) sops: &'a [SemBuf],
    pub(super) undo: Option<&'a UndoEntry>,
    /// Use the sequential evaluation ([`Scan::dupsop`]).
    pub(super) dupsop: bool,
}

/// What a first look at an operation array found (the kernel's pre-scan).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Scan {
    /// The highest semaphore number named.
    pub(super) max: usize,
    /// Some operation has `SEM_UNDO`.
    pub(super) undos: bool,
    /// Some operation changes a value (`op != 0`).
    pub(super) alter: bool,
    /// Some semaphore may be named again after an operation that changed
    /// it, so later operations must see earlier ones: the sequential
    /// evaluation.
    pub(super) dupsop: bool,
}

pub(super) fn scan(sops: &[SemBuf]) -> Scan {
    let mut s = Scan {
        max: 0,
        undos: false,
        alter: false,
        dupsop: false,
    };
    // A bitmap of semaphore numbers modulo 64 that an earlier operation
    // altered: a later one on the same number needs the sequential
    // evaluation. False positives only cost the slower path.
    let mut altered = 0u64;
    for sop in sops {
        let bit = 1u64 << (sop.num % 64);
        s.max = s.max.max(usize::from(sop.num));
        s.undos |= sop.flags & SEM_UNDO != 0;
        if altered & bit != 0 {
            s.dupsop = true;
        }
        if sop.op != 0 {
            s.alter = true;
            altered |= bit;
        }
    }
    s
}

fn blocked(index: usize, sop: &SemBuf) -> Attempt {
    if sop.flags & IPC_NOWAIT != 0 {
        Attempt::Failed(SemError::Again)
    } else {
        Attempt::Blocked(index)
    }
}

/// Whether operation `sop` must wait at `value`: a wait for zero on a
/// non-zero value, or a decrement below zero.
pub(super) fn would_block(sop: &SemBuf, value: i32) -> bool {
    (sop.op == 0 && value != 0) || value + i32::from(sop.op) < 0
}

/// What operation `sop`, at `index` in its array, makes of `value`: the
/// value after it, or the outcome that decides the call there (a block, with
/// `IPC_NOWAIT` a failure, or a result out of range). The same rule for
/// every evaluation below.
fn step(index: usize, sop: &SemBuf, value: i32) -> Result<i32, Attempt> {
    if would_block(sop, value) {
        return Err(blocked(index, sop));
    }
    let result = value + i32::from(sop.op);
    if result > SEMVMX {
        return Err(Attempt::Failed(SemError::Range));
    }
    Ok(result)
}

fn undo_of<'a>(op: &Op<'a>) -> &'a UndoEntry {
    // A SEM_UNDO operation always comes with an entry: semop_undo fetches one
    // before locking, and semop refuses SEM_UNDO without a context.
    op.undo
        .expect("SEM_UNDO operation without an undo entry (checked before locking)")
}

impl SetShared {
    /// Tries `op` against the current values, all or nothing, in array order
    /// (the kernel's `perform_atomic_semop`). On success the values, the undo
    /// adjustments and the pids are updated. The caller holds a lock that
    /// covers every semaphore `op` names.
    pub(super) fn perform(&self, held: &Held, op: &Op<'_>) -> Attempt {
        Counters::bump(&self.counters(held).attempts, 1);
        if op.dupsop {
            return self.perform_sequential(held, op);
        }
        if let [sop] = op.sops {
            if sop.flags & SEM_UNDO == 0 {
                return self.perform_one(held, sop);
            }
        }
        // First pass: check only. The first operation that blocks or fails
        // decides, so a later out-of-range value is not reported if an
        // earlier operation blocks.
        for (i, sop) in op.sops.iter().enumerate() {
            let num = usize::from(sop.num);
            if let Err(outcome) = step(i, sop, self.value(held, num)) {
                return outcome;
            }
            if sop.flags & SEM_UNDO != 0 {
                let adj = undo_of(op).get(num) - i32::from(sop.op);
                if !(-(SEMAEM + 1)..=SEMAEM).contains(&adj) {
                    return Attempt::Failed(SemError::Range);
                }
            }
        }
        // Second pass: apply.
        let pid = current_pid();
        for sop in op.sops {
            let num = usize::from(sop.num);
            if sop.flags & SEM_UNDO != 0 {
                let undo = undo_of(op);
                undo.set(num, undo.get(num) - i32::from(sop.op));
            }
            self.set_value(held, num, self.value(held, num) + i32::from(sop.op));
            self.sems[num].pid.store(pid, Ordering::Relaxed);
        }
        Attempt::Done
    }

    /// [`perform`](Self::perform) for one operation without `SEM_UNDO`,
    /// the call a waker retries most (a sleeper's decrement, sembench's
    /// worker): one look-up of the value instead of three (the two passes'
    /// and the write's), which for a holder of many semaphores is a search
    /// each.
    fn perform_one(&self, held: &Held, sop: &SemBuf) -> Attempt {
        let num = usize::from(sop.num);
        let result = match step(0, sop, self.value(held, num)) {
            Ok(result) => result,
            Err(outcome) => return outcome,
        };
        if sop.op != 0 {
            self.set_value(held, num, result);
        }
        self.sems[num].pid.store(current_pid(), Ordering::Relaxed);
        Attempt::Done
    }

    /// The evaluation for arrays that touch a semaphore more than once:
    /// apply each operation to the live values so later ones see earlier
    /// ones, and roll everything back on a block or an error.
    fn perform_sequential(&self, held: &Held, op: &Op<'_>) -> Attempt {
        let mut outcome = None;
        let mut applied = 0;
        for (i, sop) in op.sops.iter().enumerate() {
            let num = usize::from(sop.num);
            let result = match step(i, sop, self.value(held, num)) {
                Ok(result) => result,
                Err(stop) => {
                    outcome = Some(stop);
                    break;
                }
            };
            if sop.flags & SEM_UNDO != 0 {
                let undo = undo_of(op);
                let adj = undo.get(num) - i32::from(sop.op);
                if !(-(SEMAEM + 1)..=SEMAEM).contains(&adj) {
                    outcome = Some(Attempt::Failed(SemError::Range));
                    break;
                }
                undo.set(num, adj);
            }
            self.set_value(held, num, result);
            applied = i + 1;
        }
        match outcome {
            None => {
                let pid = current_pid();
                for sop in op.sops {
                    self.sems[usize::from(sop.num)]
                        .pid
                        .store(pid, Ordering::Relaxed);
                }
                Attempt::Done
            }
            Some(outcome) => {
                for sop in op.sops[..applied].iter().rev() {
                    let num = usize::from(sop.num);
                    self.set_value(held, num, self.value(held, num) - i32::from(sop.op));
                    if sop.flags & SEM_UNDO != 0 {
                        let undo = undo_of(op);
                        undo.set(num, undo.get(num) + i32::from(sop.op));
                    }
                }
                outcome
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::SemSet;

    fn sb(num: u16, op: i16, flags: i16) -> SemBuf {
        SemBuf::new(num, op, flags)
    }

    /// Evaluates `sops` on a set holding `values`, under the global lock;
    /// returns the outcome and the values after it.
    fn run(
        values: &[i32],
        sops: &[SemBuf],
        dupsop: bool,
        undo: Option<&UndoEntry>,
    ) -> (Attempt, Vec<i32>) {
        let set = SemSet::new(values.len()).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        for (num, &v) in values.iter().enumerate() {
            set.set_value(&held, num, v);
        }
        let attempt = set.perform(&held, &Op { sops, undo, dupsop });
        let after = (0..values.len()).map(|n| set.value(&held, n)).collect();
        set.unlock(held);
        (attempt, after)
    }

    #[test]
    fn scan_reports_what_the_array_does() {
        let s = scan(&[sb(3, 0, 0), sb(7, -1, SEM_UNDO), sb(2, 0, IPC_NOWAIT)]);
        assert_eq!(
            s,
            Scan {
                max: 7,
                undos: true,
                alter: true,
                dupsop: false
            }
        );
        let s = scan(&[sb(0, 0, 0), sb(1, 0, 0)]);
        assert_eq!(
            s,
            Scan {
                max: 1,
                undos: false,
                alter: false,
                dupsop: false
            }
        );
    }

    #[test]
    fn dupsop_means_a_semaphore_named_again_after_a_change() {
        // Waiting for zero, then changing: no earlier change to see.
        assert!(!scan(&[sb(0, 0, 0), sb(0, -1, 0)]).dupsop);
        assert!(!scan(&[sb(0, 1, 0), sb(1, -1, 0)]).dupsop);
        assert!(scan(&[sb(0, 1, 0), sb(0, 0, 0)]).dupsop);
        assert!(scan(&[sb(4, -1, 0), sb(1, 1, 0), sb(4, 1, 0)]).dupsop);
        // Numbers are tracked modulo 64: a false positive only costs the
        // slower evaluation.
        assert!(scan(&[sb(0, 1, 0), sb(64, -1, 0)]).dupsop);
    }

    #[test]
    fn all_or_nothing() {
        let (attempt, after) = run(&[1, 0], &[sb(0, -1, 0), sb(1, -1, 0)], false, None);
        assert_eq!(attempt, Attempt::Blocked(1));
        assert_eq!(after, [1, 0], "the first operation must not be applied");
        let (attempt, after) = run(&[1, 1], &[sb(0, -1, 0), sb(1, -1, 0)], false, None);
        assert_eq!(attempt, Attempt::Done);
        assert_eq!(after, [0, 0]);
        let (attempt, after) = run(&[0, 5], &[sb(1, -5, 0), sb(0, 0, 0)], false, None);
        assert_eq!(attempt, Attempt::Done);
        assert_eq!(after, [0, 0]);
        let (attempt, after) = run(&[0, 5], &[sb(1, -5, 0), sb(1, 0, 0)], false, None);
        assert_eq!(
            attempt,
            Attempt::Blocked(1),
            "without dupsop the zero wait sees 5"
        );
        assert_eq!(after, [0, 5]);
    }

    #[test]
    fn the_first_operation_that_cannot_proceed_decides() {
        let max = SEMVMX as i16;
        // A block before an overflow reports the block...
        let (attempt, after) = run(&[0, 1], &[sb(0, -1, 0), sb(1, max, 0)], false, None);
        assert_eq!(attempt, Attempt::Blocked(0));
        assert_eq!(after, [0, 1]);
        // ...an overflow before a block reports ERANGE.
        let (attempt, _) = run(&[0, 1], &[sb(1, max, 0), sb(0, -1, 0)], false, None);
        assert_eq!(attempt, Attempt::Failed(SemError::Range));
        // IPC_NOWAIT counts on the operation that blocks, not elsewhere.
        let (attempt, _) = run(&[0, 1], &[sb(1, 1, IPC_NOWAIT), sb(0, -1, 0)], false, None);
        assert_eq!(attempt, Attempt::Blocked(1));
        let (attempt, _) = run(&[0, 1], &[sb(1, 1, 0), sb(0, -1, IPC_NOWAIT)], false, None);
        assert_eq!(attempt, Attempt::Failed(SemError::Again));
        let (attempt, _) = run(&[2], &[sb(0, 0, IPC_NOWAIT)], false, None);
        assert_eq!(attempt, Attempt::Failed(SemError::Again));
    }

    #[test]
    fn a_single_operation_decides_as_the_general_evaluation_does() {
        // The single-operation path against the two-pass one: the same
        // operation followed by a wait for zero on a semaphore that is zero,
        // which changes nothing.
        let max = SEMVMX as i16;
        for value in [0, 1, 2, 5, SEMVMX - 1, SEMVMX] {
            for op in [-max, -6, -5, -2, -1, 0, 1, 2, max] {
                for flags in [0, IPC_NOWAIT] {
                    let alone = run(&[value, 0], &[sb(0, op, flags)], false, None);
                    let general = run(&[value, 0], &[sb(0, op, flags), sb(1, 0, 0)], false, None);
                    assert_eq!(alone, general, "value {value}, op {op}, flags {flags}");
                }
            }
        }
        // Both share `step`: the rule itself, at its edges.
        let one = |value: i32, op: i16, flags: i16| run(&[value], &[sb(0, op, flags)], false, None);
        assert_eq!(one(0, max, 0), (Attempt::Done, vec![SEMVMX]));
        assert_eq!(one(1, max, 0), (Attempt::Failed(SemError::Range), vec![1]));
        assert_eq!(one(1, -1, 0), (Attempt::Done, vec![0]));
        assert_eq!(one(1, -2, 0), (Attempt::Blocked(0), vec![1]));
        assert_eq!(
            one(1, -2, IPC_NOWAIT),
            (Attempt::Failed(SemError::Again), vec![1])
        );
        assert_eq!(one(0, 0, 0), (Attempt::Done, vec![0]));
        assert_eq!(one(1, 0, 0), (Attempt::Blocked(0), vec![1]));
    }

    #[test]
    fn sequential_evaluation_sees_earlier_operations() {
        // +1 then -1 on a zero semaphore: only possible in order.
        let sops = [sb(0, 1, 0), sb(0, -1, 0)];
        assert_eq!(run(&[0], &sops, true, None), (Attempt::Done, vec![0]));
        assert_eq!(
            run(&[0], &sops, false, None),
            (Attempt::Blocked(1), vec![0])
        );
        // +2, -1, then a wait for zero that fails: everything rolled back.
        let sops = [sb(0, 2, 0), sb(1, -1, 0), sb(0, -1, 0), sb(0, 0, 0)];
        assert_eq!(
            run(&[0, 3], &sops, true, None),
            (Attempt::Blocked(3), vec![0, 3])
        );
        // The same with the last step satisfiable.
        let sops = [sb(0, 2, 0), sb(1, -1, 0), sb(0, -2, 0), sb(0, 0, 0)];
        assert_eq!(run(&[0, 3], &sops, true, None), (Attempt::Done, vec![0, 2]));
        // An overflow in the middle rolls back what came before.
        let sops = [sb(0, 1, 0), sb(0, SEMVMX as i16, 0)];
        assert_eq!(
            run(&[0], &sops, true, None),
            (Attempt::Failed(SemError::Range), vec![0])
        );
    }

    #[test]
    fn undo_adjustments_follow_the_outcome() {
        let undo = UndoEntry::new(2);
        let sops = [sb(0, -1, SEM_UNDO), sb(1, 2, SEM_UNDO)];
        assert_eq!(run(&[1, 0], &sops, false, Some(&undo)).0, Attempt::Done);
        assert_eq!((undo.get(0), undo.get(1)), (1, -2));
        // Blocked: the adjustments stay as they were.
        assert_eq!(
            run(&[0, 0], &sops, false, Some(&undo)).0,
            Attempt::Blocked(0)
        );
        assert_eq!((undo.get(0), undo.get(1)), (1, -2));
        // Sequential, rolled back: the same.
        let dup = [sb(0, 1, SEM_UNDO), sb(0, -2, SEM_UNDO)];
        assert_eq!(run(&[0, 0], &dup, true, Some(&undo)).0, Attempt::Blocked(1));
        assert_eq!((undo.get(0), undo.get(1)), (1, -2));
        assert_eq!(run(&[1, 0], &dup, true, Some(&undo)).0, Attempt::Done);
        assert_eq!((undo.get(0), undo.get(1)), (2, -2));
    }

    #[test]
    fn an_adjustment_out_of_range_is_erange() {
        let undo = UndoEntry::new(1);
        undo.set(0, SEMAEM);
        let sops = [sb(0, -1, SEM_UNDO)];
        assert_eq!(
            run(&[5], &sops, false, Some(&undo)),
            (Attempt::Failed(SemError::Range), vec![5])
        );
        assert_eq!(
            run(&[5], &sops, true, Some(&undo)),
            (Attempt::Failed(SemError::Range), vec![5])
        );
        assert_eq!(undo.get(0), SEMAEM);
        // The lower end is -(SEMAEM + 1).
        undo.set(0, -SEMAEM);
        assert_eq!(
            run(&[0], &[sb(0, 1, SEM_UNDO)], false, Some(&undo)).0,
            Attempt::Done
        );
        assert_eq!(undo.get(0), -SEMAEM - 1);
        assert_eq!(
            run(&[0], &[sb(0, 1, SEM_UNDO)], false, Some(&undo)).0,
            Attempt::Failed(SemError::Range)
        );
    }

    #[test]
    fn success_records_the_pid_and_counts_the_attempt() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        let held = set.lock_global();
        let before = set.global.counters.attempts.load(Ordering::Relaxed);
        let blocked = [sb(0, -1, 0)];
        let op = Op {
            sops: &blocked,
            undo: None,
            dupsop: false,
        };
        assert_eq!(set.perform(&held, &op), Attempt::Blocked(0));
        assert_eq!(set.sems[0].pid.load(Ordering::Relaxed), 0);
        let post = [sb(1, 1, 0)];
        let op = Op {
            sops: &post,
            undo: None,
            dupsop: false,
        };
        assert_eq!(set.perform(&held, &op), Attempt::Done);
        assert_eq!(set.sems[1].pid.load(Ordering::Relaxed), current_pid());
        assert_eq!(
            set.global.counters.attempts.load(Ordering::Relaxed),
            before + 2
        );
        set.unlock(held);
    }
}
