//! Evaluating an operation array against a shared set's values: all of it
//! or none of it, in array order, with the kernel's outcome for the first
//! operation that blocks or fails (`perform_atomic_semop`).
//!
//! Operations are applied one by one to a private copy of the values they
//! name, so a later operation sees an earlier one on the same semaphore;
//! without repeats that gives the same result as the kernel's two-pass
//! evaluation. Nothing is written here: a caller commits [`Eval::values`] and
//! [`Eval::adjs`] in one transaction.

use super::layout::{sem_word, NPROC};
use super::map::Mapping;
use crate::sem::{SemBuf, SemError, IPC_NOWAIT, SEMAEM, SEMVMX, SEM_UNDO};

/// What evaluating an operation array decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Every operation can be performed; the new values are in [`Eval`].
    Done,
    /// The operation at this index would block (and has no `IPC_NOWAIT`).
    Blocked(usize),
    Failed(SemError),
}

/// The result of [`evaluate`]: the outcome and, when done, what to write.
#[derive(Debug)]
pub(super) struct Eval {
    pub(super) outcome: Outcome,
    /// `(num, new value)` for each semaphore the operations name.
    pub(super) values: Vec<(usize, i32)>,
    /// `(num, new adjustment)` for each semaphore a `SEM_UNDO` operation names.
    pub(super) adjs: Vec<(usize, i32)>,
}

/// A semaphore's current value.
pub(super) fn value(map: &Mapping, num: usize) -> i32 {
    (map.load(map.layout.sem(num)) & sem_word::VALUE) as i32
}

/// Process slot `slot`'s current adjustment for semaphore `num` (0 when its
/// generation is not the semaphore's: cleared by a `SETVAL` / `SETALL`).
pub(super) fn adjustment(map: &Mapping, slot: usize, num: usize) -> i32 {
    let word = map.load(map.layout.adj(slot, num));
    let gen = map.load(map.layout.undo_gen(num));
    if word >> 16 == gen & 0xffff {
        i32::from(word as u16 as i16)
    } else {
        0
    }
}

/// The adjustment word that records `adj` for semaphore `num` now.
pub(super) fn adjustment_word(map: &Mapping, num: usize, adj: i32) -> u32 {
    let gen = map.load(map.layout.undo_gen(num)) & 0xffff;
    (gen << 16) | u32::from(adj as i16 as u16)
}

impl Default for Eval {
    fn default() -> Eval {
        Eval {
            outcome: Outcome::Done,
            values: Vec::new(),
            adjs: Vec::new(),
        }
    }
}

/// Evaluates `sops` (every `num` already checked against the set's size);
/// `SEM_UNDO` operations adjust process slot `undo_slot`.
pub(super) fn evaluate(map: &Mapping, sops: &[SemBuf], undo_slot: usize) -> Eval {
    let mut eval = Eval::default();
    evaluate_into(map, sops, undo_slot, &mut eval);
    eval
}

/// [`evaluate`] into buffers the caller reuses (a waker evaluates every
/// sleeper it looks at).
pub(super) fn evaluate_into(map: &Mapping, sops: &[SemBuf], undo_slot: usize, eval: &mut Eval) {
    debug_assert!(undo_slot < NPROC);
    eval.values.clear();
    eval.adjs.clear();
    eval.outcome = decide(map, sops, undo_slot, &mut eval.values, &mut eval.adjs);
    if eval.outcome != Outcome::Done {
        eval.values.clear();
        eval.adjs.clear();
    }
}

fn decide(
    map: &Mapping,
    sops: &[SemBuf],
    undo_slot: usize,
    values: &mut Vec<(usize, i32)>,
    adjs: &mut Vec<(usize, i32)>,
) -> Outcome {
    for (i, sop) in sops.iter().enumerate() {
        let num = usize::from(sop.num);
        let at = match values.iter().position(|&(n, _)| n == num) {
            Some(at) => at,
            None => {
                values.push((num, value(map, num)));
                values.len() - 1
            }
        };
        let current = values[at].1;
        let op = i32::from(sop.op);
        let blocked = if sop.flags & IPC_NOWAIT != 0 {
            Outcome::Failed(SemError::Again)
        } else {
            Outcome::Blocked(i)
        };
        if op == 0 && current != 0 {
            return blocked;
        }
        let result = current + op;
        if result < 0 {
            return blocked;
        }
        if result > SEMVMX {
            return Outcome::Failed(SemError::Range);
        }
        if sop.flags & SEM_UNDO != 0 && op != 0 {
            let at = match adjs.iter().position(|&(n, _)| n == num) {
                Some(at) => at,
                None => {
                    adjs.push((num, adjustment(map, undo_slot, num)));
                    adjs.len() - 1
                }
            };
            let adj = adjs[at].1 - op;
            if !(-(SEMAEM + 1)..=SEMAEM).contains(&adj) {
                return Outcome::Failed(SemError::Range);
            }
            adjs[at].1 = adj;
        }
        values[at].1 = result;
    }
    Outcome::Done
}
