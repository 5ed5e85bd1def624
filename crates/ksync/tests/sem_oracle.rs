//! Differential conformance tests for `ksync::sem`: the machine's own System V
//! semaphores are the oracle.
//!
//! Property tests generate random sequences of *non-blocking* steps and run
//! each step on a `SemSet` and on a fresh kernel set of the same size
//! (`semget(IPC_PRIVATE, n, 0600|IPC_CREAT)`, removed by a drop guard even on
//! panic), comparing after every step:
//! * the result of the step: `SemError::errno()` against the kernel's errno,
//!   or the returned value (GETVAL, GETALL, GETNCNT, GETZCNT, GETPID);
//! * the whole observable state: every value (GETALL), every GETPID, every
//!   GETNCNT/GETZCNT (always 0 here, nothing sleeps), and whether otime is
//!   set (IPC_STAT; the kernel's otime has one-second resolution, so only
//!   "never / some time" is compared).
//!
//! Steps: semop with 0..=4 sops (plus exactly 500, and 501.. for E2BIG),
//! random `sem_num` including out of range and 65535, ops including 0,
//! +-32767, -32768 and other overflowing values, duplicates of one semaphore,
//! with and without `SEM_UNDO`; SETVAL (also out of range values and
//! numbers), SETALL, GETVAL, GETALL, GETNCNT, GETZCNT, GETPID, IPC_STAT.
//! Nothing blocks: either every sop carries `IPC_NOWAIT`, or the call is a
//! semtimedop with a zero timeout (then `IPC_NOWAIT` is random per sop).
//!
//! Undo: one `SemUndo` per generated case on the ksync side; on the kernel
//! side the process's undo list for that (fresh) set. Adjustments are only
//! *applied* at process exit in the kernel, so here only their bookkeeping is
//! compared (an adjustment out of `[-32768, 32767]` gives ERANGE at semop
//! time on both sides, and SETVAL/SETALL clear them on both sides);
//! application is tested in `sem_blocking.rs`.
//!
//! A few steps have no kernel counterpart and are checked against the
//! documented ksync result only: `SEM_UNDO` without an undo context
//! (`Invalid`, after `TooBig`), SETALL with a slice of the wrong length.
//!
//! Every step also runs on a process-shared ksync set, whose results and
//! state must equal the `SemSet`'s.
//!
//! Skips: if SysV IPC is unavailable (semget fails with ENOSYS, ENOSPC,
//! EPERM or EACCES) the kernel is left out with a loud banner on stderr that
//! says what still runs: the property tests still compare the shared set
//! with the `SemSet` and check the ksync-only steps (their outcome coverage
//! then counts ksync's results), and the hand-written cases check only their
//! ksync halves (against the expected values written in the test);
//! `KSYNC_REQUIRE_SYSV=1` makes any such skip a failure. Once the first
//! kernel set was created, any later semget failure fails the test: a partial
//! run never passes.
//!
//! The generators are checked too: each property run must produce every
//! outcome class (success, E2BIG, EINVAL, EFBIG, EAGAIN, ERANGE from a value,
//! SETVAL/SETALL successes and errors, ...), and the undo-heavy run an
//! ERANGE from an undo adjustment (reached through "undo pumps": `+x` with
//! SEM_UNDO and `-x` without, in one call), or it fails. A failing case is
//! shrunk by proptest and printed with the differing fields.
//!
//! Size (PROPTEST_CASES overrides each): 256 cases of up to 40 steps for the
//! general mix, 128 undo-heavy, 128 on a single semaphore, 64 on sets of
//! 65..=130; about 2 s in debug mode, 30 000 cases in about 100 s.
#![cfg(not(loom))]

mod common;
mod sem_common;

use ksync::sem::{SemBuf, SemSet, SemUndo, IPC_NOWAIT, SEMMSL, SEMOPM, SEM_UNDO};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sem_common::{my_pid, sb, sysv_available_else_running, KResult, KernelSet, Sems, SharedSet};
use std::cell::RefCell;
use std::time::Duration;

const NW: i16 = IPC_NOWAIT;
const U: i16 = SEM_UNDO;

// ---------------------------------------------------------------------------
// Steps and their generators
// ---------------------------------------------------------------------------

/// How a semop step avoids blocking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Every sop has IPC_NOWAIT; semop (no timeout).
    NoWait,
    /// semtimedop with a zero timeout; IPC_NOWAIT random per sop.
    ZeroTimeout,
}

#[derive(Clone, Debug)]
enum Step {
    /// semop; `ctx` = pass the case's undo context even if no sop has
    /// SEM_UNDO (a sop with SEM_UNDO always gets it).
    Op {
        sops: Vec<SemBuf>,
        mode: Mode,
        ctx: bool,
    },
    /// ksync only: a sop has SEM_UNDO but no context is passed.
    OpNoCtx {
        sops: Vec<SemBuf>,
    },
    SetVal {
        num: usize,
        value: i32,
    },
    SetAll {
        values: Vec<u16>,
    },
    /// ksync only: SETALL with `nsems + delta` values (delta != 0).
    SetAllWrongLen {
        values: Vec<u16>,
    },
    GetVal {
        num: usize,
    },
    GetAll,
    GetNcnt {
        num: usize,
    },
    GetZcnt {
        num: usize,
    },
    GetPid {
        num: usize,
    },
    Stat,
}

/// A semaphore number for a set of `n`: mostly in range, sometimes just
/// past the end, sometimes 65535 ("-1") or anything.
fn num_strategy(n: usize) -> BoxedStrategy<u16> {
    // In sets of more than 64, mostly numbers equal modulo 64: the kernel's
    // duplicate detection is a 64-bit bitmap of `sem_num % 64`, so these
    // take the sequential path without being duplicates.
    let aliases: Vec<u16> = [0u16, 1, 64, 65, 128, 129]
        .into_iter()
        .filter(|&a| usize::from(a) < n)
        .collect();
    let alias_weight = if n > 64 { 60 } else { 0 };
    let n = n as u16;
    prop_oneof![
        alias_weight => prop::sample::select(aliases),
        60 => 0..n,
        2 => n..n + 3,
        1 => Just(u16::MAX),
        1 => any::<u16>(),
    ]
    .boxed()
}

/// A sem_op: mostly small, some zero, some at or past the limits.
fn op_strategy(big: u32) -> BoxedStrategy<i16> {
    prop_oneof![
        30 => -3i16..=3,
        6 => Just(0i16),
        big => prop::sample::select(vec![
            32767i16, -32767, -32768, 16384, -16384, 32766, -32766, 20000, -20000,
        ]),
        big => any::<i16>(),
    ]
    .boxed()
}

/// One sop; `undo_pct` = chance of SEM_UNDO; `nowait` = always IPC_NOWAIT.
fn sop_strategy(n: usize, big: u32, undo_pct: u32, nowait: bool) -> BoxedStrategy<SemBuf> {
    (num_strategy(n), op_strategy(big), 0u32..100, any::<bool>())
        .prop_map(move |(num, op, u, nw)| {
            let mut flags = 0;
            if u < undo_pct {
                flags |= U;
            }
            if nowait || nw {
                flags |= NW;
            }
            sb(num, op, flags)
        })
        .boxed()
}

fn sops_strategy(
    n: usize,
    big: u32,
    undo_pct: u32,
    pump: u32,
    nowait: bool,
) -> BoxedStrategy<Vec<SemBuf>> {
    let one = sop_strategy(n, big, undo_pct, nowait);
    prop_oneof![
        60 => prop::collection::vec(one.clone(), 1..=4),
        // "Undo pump": +x with SEM_UNDO and -x without on one semaphore (or
        // the reverse), so the value stays put while the adjustment grows
        // towards its limit and then overflows (ERANGE).
        pump => (0..n as u16, pump_strategy(), any::<bool>(), any::<bool>()).prop_map(
            move |(num, x, undo_up, up_first)| {
                let (uf, df) = if undo_up { (U | NW, NW) } else { (NW, U | NW) };
                let (up, down) = (sb(num, x, uf), sb(num, -x, df));
                if up_first { vec![up, down] } else { vec![down, up] }
            }
        ),
        2 => Just(Vec::new()),
        // Exactly SEMOPM: allowed. Small ops on one in-range semaphore
        // repeated, so the sequential semantics of duplicates matter.
        1 => (0..n as u16, -1i16..=1, any::<bool>()).prop_map(move |(num, op, undo)| {
            let flags = NW | if undo { U } else { 0 };
            vec![sb(num, op, flags); SEMOPM]
        }),
        // More than SEMOPM: E2BIG before anything else is looked at.
        2 => (SEMOPM + 1..SEMOPM + 40, one).prop_map(|(len, s)| vec![s; len]),
    ]
    .boxed()
}

/// Pump sizes: some that add up exactly to the adjustment limits
/// (2 x 16384 = 32768), some random.
fn pump_strategy() -> BoxedStrategy<i16> {
    prop_oneof![
        2 => prop::sample::select(vec![1i16, 2, 16383, 16384, 32766, 32767]),
        1 => 1i16..=32767,
    ]
    .boxed()
}

fn value_strategy() -> BoxedStrategy<i32> {
    prop_oneof![
        30 => 0i32..=5,
        4 => 32760i32..=32767,
        2 => Just(32768),
        2 => Just(-1),
        1 => Just(65535),
        1 => any::<i32>(),
        2 => 0i32..=32767,
    ]
    .boxed()
}

/// SETALL values, all valid; the step strategy plants an invalid one in
/// some of the vectors (one per vector, so large sets still succeed).
fn setall_value_strategy() -> BoxedStrategy<u16> {
    prop_oneof![
        30 => 0u16..=5,
        4 => 32760u16..=32767,
        1 => 0u16..=32767,
    ]
    .boxed()
}

fn ctl_num_strategy(n: usize) -> BoxedStrategy<usize> {
    prop_oneof![10 => 0..n, 2 => n..n + 3, 1 => Just(65535usize)].boxed()
}

fn step_strategy(n: usize, big: u32, undo_pct: u32, pump: u32) -> BoxedStrategy<Step> {
    prop_oneof![
        30 => (sops_strategy(n, big, undo_pct, pump, true), any::<bool>())
            .prop_map(|(sops, ctx)| Step::Op { sops, mode: Mode::NoWait, ctx }),
        12 => (sops_strategy(n, big, undo_pct, pump, false), any::<bool>())
            .prop_map(|(sops, ctx)| Step::Op { sops, mode: Mode::ZeroTimeout, ctx }),
        2 => sops_strategy(n, big, undo_pct, pump, true)
            .prop_filter("needs a SEM_UNDO sop", |s| s.iter().any(|s| s.flags & U != 0))
            .prop_map(|sops| Step::OpNoCtx { sops }),
        8 => (ctl_num_strategy(n), value_strategy())
            .prop_map(|(num, value)| Step::SetVal { num, value }),
        4 => (
            prop::collection::vec(setall_value_strategy(), n),
            0..n,
            prop_oneof![3 => Just(None), 1 => prop::sample::select(vec![32768u16, 65535]).prop_map(Some)],
        )
            .prop_map(|(mut values, at, bad)| {
                if let Some(bad) = bad {
                    values[at] = bad;
                }
                Step::SetAll { values }
            }),
        1 => (prop_oneof![Just(0usize), 0..n, n + 1..n + 4], 0u16..=5)
            .prop_map(|(len, v)| Step::SetAllWrongLen { values: vec![v; len] }),
        3 => ctl_num_strategy(n).prop_map(|num| Step::GetVal { num }),
        2 => Just(Step::GetAll),
        2 => ctl_num_strategy(n).prop_map(|num| Step::GetNcnt { num }),
        2 => ctl_num_strategy(n).prop_map(|num| Step::GetZcnt { num }),
        2 => ctl_num_strategy(n).prop_map(|num| Step::GetPid { num }),
        1 => Just(Step::Stat),
    ]
    .boxed()
}

/// A case: the set size and the steps.
fn case_strategy(
    sizes: std::ops::RangeInclusive<usize>,
    max_steps: usize,
    big: u32,
    undo_pct: u32,
    pump: u32,
) -> impl Strategy<Value = (usize, Vec<Step>)> {
    sizes.prop_flat_map(move |n| {
        (
            Just(n),
            prop::collection::vec(step_strategy(n, big, undo_pct, pump), 1..=max_steps),
        )
    })
}

// ---------------------------------------------------------------------------
// Running a step on either side
// ---------------------------------------------------------------------------

/// What a step returned, comparable across the two sides.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Val {
    Unit,
    Int(i64),
    All(Vec<u16>),
    Stat { nsems: usize, otime_set: bool },
}

fn apply<S: Sems>(s: &S, undo: &SemUndo, step: &Step) -> KResult<Val> {
    let unit = |r: KResult<()>| r.map(|()| Val::Unit);
    match step {
        Step::Op { sops, mode, ctx } => {
            let timeout = match mode {
                Mode::NoWait => None,
                Mode::ZeroTimeout => Some(Duration::ZERO),
            };
            let needs_ctx = sops.iter().any(|s| s.flags & U != 0);
            if needs_ctx || *ctx {
                unit(s.op_undo(sops, undo, timeout))
            } else {
                unit(s.op(sops, timeout))
            }
        }
        Step::OpNoCtx { .. } | Step::SetAllWrongLen { .. } => {
            unreachable!("ksync-only steps are not applied through Sems")
        }
        Step::SetVal { num, value } => unit(s.setval(*num, *value)),
        Step::SetAll { values } => unit(s.setall(values)),
        Step::GetVal { num } => s.val(*num).map(|v| Val::Int(v.into())),
        Step::GetAll => s.all().map(Val::All),
        Step::GetNcnt { num } => s.ncnt(*num).map(|v| Val::Int(v as i64)),
        Step::GetZcnt { num } => s.zcnt(*num).map(|v| Val::Int(v as i64)),
        Step::GetPid { num } => s.pid(*num).map(|v| Val::Int(v.into())),
        Step::Stat => s.otime_set().map(|otime_set| Val::Stat {
            nsems: s.nsems(),
            otime_set,
        }),
    }
}

/// Everything observable about a set that nothing is sleeping on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Snapshot {
    values: KResult<Vec<u16>>,
    pids: Vec<KResult<i32>>,
    ncnt: Vec<KResult<usize>>,
    zcnt: Vec<KResult<usize>>,
    otime_set: KResult<bool>,
}

fn snapshot<S: Sems>(s: &S) -> Snapshot {
    let n = s.nsems();
    Snapshot {
        values: s.all(),
        pids: (0..n).map(|i| s.pid(i)).collect(),
        ncnt: (0..n).map(|i| s.ncnt(i)).collect(),
        zcnt: (0..n).map(|i| s.zcnt(i)).collect(),
        otime_set: s.otime_set(),
    }
}

/// The fields where two snapshots differ, as `name[index]: ksync vs kernel`
/// (at most 8), or None if they are equal.
fn snapshot_diff(ours: &Snapshot, theirs: &Snapshot) -> Option<String> {
    fn per_index<T: PartialEq + std::fmt::Debug>(
        out: &mut Vec<String>,
        name: &str,
        a: &[T],
        b: &[T],
    ) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            if x != y {
                out.push(format!("{name}[{i}]: {x:?} vs {y:?}"));
            }
        }
        if a.len() != b.len() {
            out.push(format!("{name}: {} vs {} entries", a.len(), b.len()));
        }
    }
    let mut out = Vec::new();
    match (&ours.values, &theirs.values) {
        (Ok(a), Ok(b)) => per_index(&mut out, "value", a, b),
        (a, b) if a != b => out.push(format!("GETALL: {a:?} vs {b:?}")),
        _ => {}
    }
    per_index(&mut out, "pid", &ours.pids, &theirs.pids);
    per_index(&mut out, "ncnt", &ours.ncnt, &theirs.ncnt);
    per_index(&mut out, "zcnt", &ours.zcnt, &theirs.zcnt);
    if ours.otime_set != theirs.otime_set {
        out.push(format!(
            "otime set: {:?} vs {:?}",
            ours.otime_set, theirs.otime_set
        ));
    }
    let more = out.len().saturating_sub(8);
    out.truncate(8);
    if more > 0 {
        out.push(format!("... and {more} more"));
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// The result ksync documents for the steps the kernel cannot express.
fn ksync_only(set: &SemSet, step: &Step) -> Result<(), TestCaseError> {
    let e = |r: Result<(), ksync::sem::SemError>| r.map_err(|e| e.errno());
    match step {
        Step::OpNoCtx { sops } => {
            let want = if sops.len() > SEMOPM {
                libc::E2BIG
            } else {
                libc::EINVAL
            };
            // Both the blocking and the zero-timeout entry points.
            prop_assert_eq!(e(set.semop(sops)), Err(want), "semop {:?}", sops);
            prop_assert_eq!(
                e(set.semtimedop(sops, Some(Duration::ZERO))),
                Err(want),
                "semtimedop {:?}",
                sops
            );
        }
        Step::SetAllWrongLen { values } => {
            prop_assert_eq!(e(set.set_all(values)), Err(libc::EINVAL));
        }
        _ => unreachable!(),
    }
    Ok(())
}

/// Runs `steps` on a `SemSet`, a shared set and, with `with_kernel`, a
/// kernel set. The kernel is the reference when present; without it the
/// shared set is held to the `SemSet`.
fn run_case(
    n: usize,
    steps: &[Step],
    with_kernel: bool,
    tally: &RefCell<Tally>,
) -> Result<(), TestCaseError> {
    let set = SemSet::new(n).expect("SemSet::new");
    let shared = SharedSet::create(n);
    let kernel = with_kernel.then(|| KernelSet::create(n));
    let undo = SemUndo::new();
    let pid = my_pid();
    let mut shadow = AdjShadow(vec![0; n]);
    for (i, step) in steps.iter().enumerate() {
        let before = snapshot(&set);
        let shared_before = snapshot(&shared);
        match step {
            Step::OpNoCtx { .. } | Step::SetAllWrongLen { .. } => ksync_only(&set, step)?,
            _ => {
                let ours = apply(&set, &undo, step);
                let shared_result = apply(&shared, &undo, step);
                let theirs = kernel.as_ref().map(|k| apply(k, &undo, step));
                let values = before.values.clone().unwrap_or_default();
                let reference = theirs.as_ref().unwrap_or(&ours);
                let kind = shadow.kind(step, &values, reference);
                tally.borrow_mut().add(kind, reference);
                if let Some(theirs) = &theirs {
                    prop_assert_eq!(
                        &ours,
                        theirs,
                        "step {} result differs (left ksync, right kernel): {:?}",
                        i,
                        step
                    );
                }
                prop_assert_eq!(
                    &shared_result,
                    reference,
                    "step {} result differs (left ksync shared set, right {}): {:?}",
                    i,
                    if kernel.is_some() { "kernel" } else { "ksync" },
                    step
                );
            }
        }
        let ours = snapshot(&set);
        let shared_after = snapshot(&shared);
        let theirs = kernel.as_ref().map(snapshot);
        let sides: &[(&str, &Snapshot, &Snapshot)] = match &theirs {
            Some(theirs) => &[
                ("ksync vs kernel", &ours, theirs),
                ("ksync shared set vs kernel", &shared_after, theirs),
            ],
            None => &[("ksync shared set vs ksync", &shared_after, &ours)],
        };
        for &(name, side, reference) in sides {
            if let Some(diff) = snapshot_diff(side, reference) {
                prop_assert!(
                    false,
                    "state after step {} differs ({}): {}\n  step: {:?}",
                    i,
                    name,
                    diff,
                    step
                );
            }
        }
        // Sanity: pids are ours or 0, the ksync-only steps changed nothing.
        for p in ours.pids.iter().flatten() {
            prop_assert!(*p == 0 || *p == pid, "pid {} is neither 0 nor ours", p);
        }
        if matches!(step, Step::OpNoCtx { .. } | Step::SetAllWrongLen { .. }) {
            prop_assert_eq!(&before, &ours, "a failed ksync-only step changed state");
            prop_assert_eq!(&shared_before, &shared_after, "the shared set changed");
        }
    }
    Ok(())
}

/// Outcome coverage of a property run: (step kind, the reference's errno or
/// 0, count).
#[derive(Default)]
struct Tally(Vec<(&'static str, i32, u64)>);

impl Tally {
    fn add(&mut self, kind: &'static str, r: &KResult<Val>) {
        let errno = r.as_ref().err().copied().unwrap_or(0);
        match self
            .0
            .iter_mut()
            .find(|(k, e, _)| *k == kind && *e == errno)
        {
            Some(x) => x.2 += 1,
            None => self.0.push((kind, errno, 1)),
        }
    }

    fn count(&self, kind: &str, errno: i32) -> u64 {
        self.0
            .iter()
            .filter(|(k, e, _)| *k == kind && *e == errno)
            .map(|x| x.2)
            .sum()
    }
}

/// The reference's undo adjustments for the case's set, shadowed from its
/// results, only to classify outcomes for the coverage tally (an ERANGE
/// from an adjustment vs from a value).
struct AdjShadow(Vec<i32>);

impl AdjShadow {
    fn kind(&mut self, step: &Step, before: &[u16], r: &KResult<Val>) -> &'static str {
        match (step, r) {
            (Step::Op { sops, .. }, Ok(_)) => {
                for s in sops.iter().filter(|s| s.flags & U != 0) {
                    self.0[s.num as usize] -= i32::from(s.op);
                }
                "op"
            }
            (Step::Op { sops, .. }, Err(libc::ERANGE)) => {
                let mut vals: Vec<i32> = before.iter().map(|&v| v.into()).collect();
                let mut adj = self.0.clone();
                for s in sops {
                    let (n, op) = (s.num as usize, i32::from(s.op));
                    if vals[n] + op > 32767 {
                        return "op:range-value";
                    }
                    if s.flags & U != 0 {
                        adj[n] -= op;
                        if !(-32768..=32767).contains(&adj[n]) {
                            return "op:range-undo";
                        }
                    }
                    vals[n] += op;
                }
                "op:range-?"
            }
            (Step::Op { .. }, _) => "op",
            (Step::SetVal { num, .. }, Ok(_)) => {
                self.0[*num] = 0;
                "setval"
            }
            (Step::SetAll { .. }, Ok(_)) => {
                self.0.iter_mut().for_each(|a| *a = 0);
                "setall"
            }
            (Step::SetVal { .. }, _) => "setval",
            (Step::SetAll { .. }, _) => "setall",
            _ => "get",
        }
    }
}

/// Runs the property, with the kernel if SysV IPC is available; returns the
/// outcome tally.
fn run_property(
    test: &str,
    cases: u32,
    strategy: impl Strategy<Value = (usize, Vec<Step>)>,
) -> Tally {
    let with_kernel = sysv_available_else_running(
        test,
        "every step on a SemSet and on a process-shared set, their results \
         and states compared after each; the ksync-only steps; the outcome \
         coverage, counted on the SemSet's results",
    );
    let config = Config {
        cases,
        // Shrunk failures are printed; keep the source tree clean.
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let tally = RefCell::new(Tally::default());
    if let Err(e) = runner.run(&strategy, |(n, steps)| {
        run_case(n, &steps, with_kernel, &tally)
    }) {
        panic!("{test}: {e}");
    }
    let mut t = tally.into_inner();
    t.0.sort();
    eprintln!(
        "{test}: outcomes (kind, errno, count){}: {:?}",
        if with_kernel {
            ""
        } else {
            " of ksync, no kernel"
        },
        t.0
    );
    // The generators must reach every outcome class, or the comparison is
    // weaker than it looks (expected counts are in the hundreds; the undo
    // overflow in the tens). Not checked for tiny runs (PROPTEST_CASES < 64).
    let coverage = if cases >= 64 { &COVERAGE[..] } else { &[] };
    for &(kind, errno) in coverage {
        assert!(
            t.count(kind, errno) > 0,
            "{test}: no ({kind}, {errno}) outcome generated"
        );
    }
    t
}

/// Outcome classes every property run must reach (see `run_property`).
const COVERAGE: [(&str, i32); 13] = [
    ("op", 0),
    ("op", libc::E2BIG),
    ("op", libc::EINVAL),
    ("op", libc::EFBIG),
    ("op", libc::EAGAIN),
    ("op:range-value", libc::ERANGE),
    ("setval", 0),
    ("setval", libc::ERANGE),
    ("setval", libc::EINVAL),
    ("setall", 0),
    ("setall", libc::ERANGE),
    ("get", 0),
    ("get", libc::EINVAL),
];

fn cases_or(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The general mix: sets of 1..=6, up to 40 steps, some big ops, some undo.
#[test]
fn differential_random_steps() {
    run_property(
        "sem_oracle::differential_random_steps",
        cases_or(256),
        case_strategy(1..=6, 40, 3, 30, 3),
    );
}

/// Undo-heavy: mostly SEM_UNDO and many values at the limits, so undo
/// adjustments overflow (ERANGE) and SETVAL/SETALL clear them.
#[test]
fn differential_undo_and_limits() {
    let tally = run_property(
        "sem_oracle::differential_undo_and_limits",
        cases_or(128),
        case_strategy(1..=3, 40, 25, 80, 20),
    );
    if cases_or(128) >= 64 {
        assert!(
            tally.count("op:range-undo", libc::ERANGE) > 0,
            "no undo-adjustment overflow generated"
        );
    }
}

/// A single semaphore, so duplicates in one call are the norm.
#[test]
fn differential_duplicates_one_semaphore() {
    run_property(
        "sem_oracle::differential_duplicates_one_semaphore",
        cases_or(128),
        case_strategy(1..=1, 30, 5, 30, 3),
    );
}

/// Sets of 65..=130, so semaphores 0/64/128 alias in the kernel's duplicate
/// bitmap: the sequential evaluation must give the same results.
#[test]
fn differential_bitmap_aliases() {
    run_property(
        "sem_oracle::differential_bitmap_aliases",
        cases_or(64),
        case_strategy(65..=130, 30, 3, 30, 3),
    );
}

// ---------------------------------------------------------------------------
// Hand-written regression cases (§5 "extra cases"), each asserted against the
// expected value *and* run on the kernel with the same assertions.
// ---------------------------------------------------------------------------

#[test]
fn dupsop_inc_then_dec2_on_1() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        s.setval(0, 1).unwrap();
        assert_eq!(
            s.op(&[sb(0, 1, NW), sb(0, -2, NW)], None),
            Ok(()),
            "{}",
            S::NAME
        );
        assert_eq!(s.val(0), Ok(0), "{}", S::NAME);
        assert_eq!(s.pid(0), Ok(my_pid()), "{}", S::NAME);
        // Same without IPC_NOWAIT (it does not block).
        s.setval(0, 1).unwrap();
        assert_eq!(
            s.op(&[sb(0, 1, 0), sb(0, -2, 0)], None),
            Ok(()),
            "{}",
            S::NAME
        );
        assert_eq!(s.val(0), Ok(0), "{}", S::NAME);
    }
    on_both!("sem_oracle::dupsop_inc_then_dec2_on_1", 1, case);
}

#[test]
fn dupsop_inc_then_wait_zero_on_0_is_again() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let sops = [sb(0, 1, NW), sb(0, 0, NW)];
        assert_eq!(s.op(&sops, None), Err(libc::EAGAIN), "{}", S::NAME);
        assert_eq!(s.val(0), Ok(0), "rolled back on {}", S::NAME);
        assert_eq!(s.pid(0), Ok(0), "pid untouched on {}", S::NAME);
        assert_eq!(s.otime_set(), Ok(false), "otime untouched on {}", S::NAME);
        // With a zero timeout instead of IPC_NOWAIT.
        let sops = [sb(0, 1, 0), sb(0, 0, 0)];
        assert_eq!(
            s.op(&sops, Some(Duration::ZERO)),
            Err(libc::EAGAIN),
            "{}",
            S::NAME
        );
        assert_eq!(s.val(0), Ok(0), "{}", S::NAME);
        // IPC_NOWAIT counts only on the sop that blocks: here the second.
        let sops = [sb(0, 1, 0), sb(0, 0, NW)];
        assert_eq!(s.op(&sops, None), Err(libc::EAGAIN), "{}", S::NAME);
        assert_eq!(s.ncnt(0), Ok(0), "{}", S::NAME);
        assert_eq!(s.zcnt(0), Ok(0), "{}", S::NAME);
    }
    on_both!(
        "sem_oracle::dupsop_inc_then_wait_zero_on_0_is_again",
        1,
        case
    );
}

#[test]
fn wait_zero_then_inc_on_0_succeeds() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        assert_eq!(
            s.op(&[sb(0, 0, NW), sb(0, 1, NW)], None),
            Ok(()),
            "{}",
            S::NAME
        );
        assert_eq!(s.val(0), Ok(1), "{}", S::NAME);
        assert_eq!(s.pid(0), Ok(my_pid()), "{}", S::NAME);
        // Now value 1: the same call must fail at the wait-for-zero.
        assert_eq!(
            s.op(&[sb(0, 0, NW), sb(0, 1, NW)], None),
            Err(libc::EAGAIN),
            "{}",
            S::NAME
        );
        assert_eq!(s.val(0), Ok(1), "{}", S::NAME);
    }
    on_both!("sem_oracle::wait_zero_then_inc_on_0_succeeds", 1, case);
}

#[test]
fn undo_adjustment_overflow_is_range() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        let n = S::NAME;
        // Negative side: adjustment may reach -32768, not -32769.
        assert_eq!(s.op_undo(&[sb(0, 32767, U | NW)], u, None), Ok(()), "{n}");
        assert_eq!(s.op(&[sb(0, -32767, NW)], None), Ok(()), "{n}");
        assert_eq!(
            s.op_undo(&[sb(0, 1, U | NW)], u, None),
            Ok(()),
            "adj -32768 ok on {n}"
        );
        assert_eq!(
            s.op_undo(&[sb(0, 1, U | NW)], u, None),
            Err(libc::ERANGE),
            "{n}"
        );
        assert_eq!(s.val(0), Ok(1), "{n}");
        // Without SEM_UNDO the same op is fine.
        assert_eq!(s.op(&[sb(0, 1, NW)], None), Ok(()), "{n}");
        assert_eq!(s.val(0), Ok(2), "{n}");
        // All-or-nothing: an earlier sop of the call is rolled back.
        assert_eq!(
            s.op_undo(&[sb(1, 5, NW), sb(0, 1, U | NW)], u, None),
            Err(libc::ERANGE),
            "{n}"
        );
        assert_eq!(s.all(), Ok(vec![2, 0]), "{n}");
        // Positive side on sem 1: adjustment may reach 32767, not 32768.
        s.setval(1, 32767).unwrap();
        assert_eq!(s.op_undo(&[sb(1, -32767, U | NW)], u, None), Ok(()), "{n}");
        assert_eq!(s.op(&[sb(1, 32767, NW)], None), Ok(()), "{n}");
        assert_eq!(
            s.op_undo(&[sb(1, -1, U | NW)], u, None),
            Err(libc::ERANGE),
            "{n}"
        );
        assert_eq!(s.val(1), Ok(32767), "{n}");
        // SETVAL clears sem 1's adjustment: the same op now succeeds.
        s.setval(1, 32767).unwrap();
        assert_eq!(s.op_undo(&[sb(1, -1, U | NW)], u, None), Ok(()), "{n}");
        // SETALL clears sem 0's too.
        s.setall(&[0, 0]).unwrap();
        assert_eq!(s.op_undo(&[sb(0, 2, U | NW)], u, None), Ok(()), "{n}");
        assert_eq!(s.all(), Ok(vec![2, 0]), "{n}");
    }
    on_both!("sem_oracle::undo_adjustment_overflow_is_range", 2, case);
}

#[test]
fn setval_out_of_range_is_range() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(0, 7).unwrap();
        assert_eq!(s.setval(0, 32768), Err(libc::ERANGE), "{n}");
        assert_eq!(s.setval(0, -1), Err(libc::ERANGE), "{n}");
        assert_eq!(s.setval(0, i32::MIN), Err(libc::ERANGE), "{n}");
        assert_eq!(s.setval(0, 65535), Err(libc::ERANGE), "{n}");
        // The value is checked before the number.
        assert_eq!(s.setval(3, 32768), Err(libc::ERANGE), "{n}");
        assert_eq!(s.setval(3, 1), Err(libc::EINVAL), "{n}");
        assert_eq!(s.val(0), Ok(7), "{n}");
        assert_eq!(s.setval(0, 32767), Ok(()), "{n}");
        assert_eq!(s.val(0), Ok(32767), "{n}");
        // Full: +1 would exceed SEMVMX.
        assert_eq!(s.op(&[sb(0, 1, NW)], None), Err(libc::ERANGE), "{n}");
    }
    on_both!("sem_oracle::setval_out_of_range_is_range", 2, case);
}

#[test]
fn setall_out_of_range_is_range() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setall(&[1, 2, 3]).unwrap();
        assert_eq!(s.setall(&[0, 32768, 0]), Err(libc::ERANGE), "{n}");
        assert_eq!(s.setall(&[65535, 0, 0]), Err(libc::ERANGE), "{n}");
        assert_eq!(s.all(), Ok(vec![1, 2, 3]), "nothing set on {n}");
        assert_eq!(s.setall(&[32767, 0, 32767]), Ok(()), "{n}");
        assert_eq!(s.all(), Ok(vec![32767, 0, 32767]), "{n}");
        assert_eq!(s.pid(1), Ok(my_pid()), "SETALL sets every pid on {n}");
    }
    on_both!("sem_oracle::setall_out_of_range_is_range", 3, case);
}

#[test]
fn nsops_limits() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        // 501 is E2BIG whatever the sops say (even a bad sem_num).
        assert_eq!(
            s.op(&vec![sb(0, 1, NW); SEMOPM + 1], None),
            Err(libc::E2BIG),
            "{n}"
        );
        assert_eq!(
            s.op(&vec![sb(9, 1, NW); SEMOPM + 1], None),
            Err(libc::E2BIG),
            "{n}"
        );
        assert_eq!(
            s.op(&vec![sb(0, 1, 0); 1024], Some(Duration::ZERO)),
            Err(libc::E2BIG),
            "{n}"
        );
        // 0 is EINVAL.
        assert_eq!(s.op(&[], None), Err(libc::EINVAL), "{n}");
        assert_eq!(s.op(&[], Some(Duration::ZERO)), Err(libc::EINVAL), "{n}");
        // Exactly 500 is fine and applied in order.
        assert_eq!(s.op(&vec![sb(0, 1, NW); SEMOPM], None), Ok(()), "{n}");
        assert_eq!(s.val(0), Ok(SEMOPM as i32), "{n}");
        assert_eq!(s.all(), Ok(vec![SEMOPM as u16, 0]), "{n}");
    }
    on_both!("sem_oracle::nsops_limits", 2, case);
}

#[test]
fn sem_num_out_of_range_is_efbig() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        assert_eq!(s.op(&[sb(65535, 1, NW)], None), Err(libc::EFBIG), "{n}");
        assert_eq!(s.op(&[sb(2, 1, NW)], None), Err(libc::EFBIG), "{n}");
        // EFBIG is decided before the operation: not EAGAIN, not applied.
        assert_eq!(
            s.op(&[sb(0, -1, NW), sb(65535, 1, NW)], None),
            Err(libc::EFBIG),
            "{n}"
        );
        assert_eq!(
            s.op(&[sb(0, 1, NW), sb(2, 0, NW)], None),
            Err(libc::EFBIG),
            "{n}"
        );
        assert_eq!(s.all(), Ok(vec![0, 0]), "{n}");
        assert_eq!(s.otime_set(), Ok(false), "{n}");
        // GETVAL etc. with a bad number: EINVAL.
        assert_eq!(s.val(2), Err(libc::EINVAL), "{n}");
        assert_eq!(s.ncnt(2), Err(libc::EINVAL), "{n}");
        assert_eq!(s.zcnt(2), Err(libc::EINVAL), "{n}");
        assert_eq!(s.pid(2), Err(libc::EINVAL), "{n}");
        assert_eq!(s.val(65535), Err(libc::EINVAL), "{n}");
    }
    on_both!("sem_oracle::sem_num_out_of_range_is_efbig", 2, case);
}

#[test]
fn first_blocking_sop_hides_a_later_range_error() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(1, 1).unwrap();
        // sop 0 blocks (EAGAIN) before sop 1 would exceed SEMVMX.
        assert_eq!(
            s.op(&[sb(0, -1, NW), sb(1, 32767, NW)], None),
            Err(libc::EAGAIN),
            "{n}"
        );
        // The other way round: ERANGE first.
        assert_eq!(
            s.op(&[sb(1, 32767, NW), sb(0, -1, NW)], None),
            Err(libc::ERANGE),
            "{n}"
        );
        // ERANGE is reported even without IPC_NOWAIT (it never blocks).
        assert_eq!(s.op(&[sb(1, 32767, 0)], None), Err(libc::ERANGE), "{n}");
        assert_eq!(s.all(), Ok(vec![0, 1]), "{n}");
    }
    on_both!(
        "sem_oracle::first_blocking_sop_hides_a_later_range_error",
        2,
        case
    );
}

#[test]
fn otime_and_pid_bookkeeping() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        assert_eq!(s.otime_set(), Ok(false), "{n}");
        assert_eq!(s.pid(0), Ok(0), "{n}");
        // SETVAL sets the pid but not otime.
        s.setval(0, 1).unwrap();
        assert_eq!(s.pid(0), Ok(my_pid()), "{n}");
        assert_eq!(s.otime_set(), Ok(false), "SETVAL leaves otime on {n}");
        // A failed semop sets neither.
        assert_eq!(s.op(&[sb(1, -1, NW)], None), Err(libc::EAGAIN), "{n}");
        assert_eq!(s.pid(1), Ok(0), "{n}");
        assert_eq!(s.otime_set(), Ok(false), "{n}");
        // A successful pure wait-for-zero sets otime and the pid.
        assert_eq!(s.op(&[sb(1, 0, NW)], None), Ok(()), "{n}");
        assert_eq!(s.otime_set(), Ok(true), "{n}");
        assert_eq!(s.pid(1), Ok(my_pid()), "wait-for-zero sets sempid on {n}");
    }
    on_both!("sem_oracle::otime_and_pid_bookkeeping", 2, case);
}

#[test]
fn removed_set_rejects_everything() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        let n = S::NAME;
        let stale = S::stale_errno();
        assert_eq!(s.rm(), Ok(()), "{n}");
        assert_eq!(s.op(&[sb(0, 1, NW)], None), Err(stale), "{n}");
        assert_eq!(
            s.op(&[sb(0, 1, 0)], Some(Duration::ZERO)),
            Err(stale),
            "{n}"
        );
        assert_eq!(s.op_undo(&[sb(0, 1, U)], u, None), Err(stale), "{n}");
        assert_eq!(s.val(0), Err(stale), "{n}");
        assert_eq!(s.setval(0, 1), Err(stale), "{n}");
        // SETVAL checks the value before it looks at the set.
        assert_eq!(s.setval(0, 32768), Err(libc::ERANGE), "{n}");
        assert_eq!(s.setval(0, -1), Err(libc::ERANGE), "{n}");
        assert_eq!(s.all(), Err(stale), "{n}");
        assert_eq!(s.setall(&[1]), Err(stale), "{n}");
        assert_eq!(s.ncnt(0), Err(stale), "{n}");
        assert_eq!(s.zcnt(0), Err(stale), "{n}");
        assert_eq!(s.pid(0), Err(stale), "{n}");
        assert_eq!(s.otime_set(), Err(stale), "{n}");
        assert_eq!(s.rm(), Err(stale), "second remove on {n}");
        // Errors decided before the set is looked at keep their precedence.
        assert_eq!(
            s.op(&vec![sb(0, 1, NW); SEMOPM + 1], None),
            Err(libc::E2BIG),
            "{n}"
        );
    }
    on_both!("sem_oracle::removed_set_rejects_everything", 1, case);
}

/// The largest set: the last semaphore works, one past it is EFBIG, and a
/// complex call spanning it (global mode over 32000 semaphore locks) works.
#[test]
fn largest_set() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        let n = S::NAME;
        let last = (SEMMSL - 1) as u16;
        assert_eq!(s.op(&[sb(last, 3, NW)], None), Ok(()), "{n}");
        assert_eq!(s.op(&[sb(last + 1, 1, NW)], None), Err(libc::EFBIG), "{n}");
        assert_eq!(s.op(&[sb(65535, 1, NW)], None), Err(libc::EFBIG), "{n}");
        let sops = [sb(0, 1, U | NW), sb(last, -3, U | NW), sb(16000, 0, NW)];
        assert_eq!(s.op_undo(&sops, u, None), Ok(()), "{n}");
        assert_eq!(s.val(SEMMSL - 1), Ok(0), "{n}");
        assert_eq!(s.val(0), Ok(1), "{n}");
        assert_eq!(s.val(SEMMSL), Err(libc::EINVAL), "{n}");
        let all = s.all().unwrap();
        assert_eq!(all.len(), SEMMSL, "{n}");
        assert_eq!(all.iter().map(|&v| u32::from(v)).sum::<u32>(), 1, "{n}");
    }
    on_both!("sem_oracle::largest_set", SEMMSL, case);
}

/// ksync only (no kernel counterpart): SEM_UNDO without a context is EINVAL,
/// after E2BIG and before EFBIG; semop_undo accepts sops without SEM_UNDO.
#[test]
fn undo_without_context_error_order() {
    let s = SemSet::new(2).unwrap();
    let e = |r: Result<(), ksync::sem::SemError>| r.map_err(|e| e.errno());
    assert_eq!(e(s.semop(&[sb(0, 1, U | NW)])), Err(libc::EINVAL));
    assert_eq!(
        e(s.semop(&[sb(0, 1, NW), sb(1, 1, U | NW)])),
        Err(libc::EINVAL)
    );
    assert_eq!(
        e(s.semop(&[sb(9, 1, U | NW)])),
        Err(libc::EINVAL),
        "EINVAL before EFBIG"
    );
    assert_eq!(e(s.semop(&vec![sb(0, 1, U); SEMOPM + 1])), Err(libc::E2BIG));
    assert_eq!(
        e(s.semtimedop(&[sb(0, 1, U)], Some(Duration::ZERO))),
        Err(libc::EINVAL)
    );
    assert_eq!(s.get_all(), Ok(vec![0, 0]));
    let u = SemUndo::new();
    assert_eq!(e(s.semop_undo(&[sb(0, 1, NW)], &u, None)), Ok(()));
    assert_eq!(e(s.semop_undo(&[sb(9, 1, U)], &u, None)), Err(libc::EFBIG));
    s.remove().unwrap();
    assert_eq!(
        e(s.semop(&[sb(0, 1, U | NW)])),
        Err(libc::EINVAL),
        "EINVAL before EIDRM"
    );
    assert_eq!(
        e(s.semop_undo(&[sb(9, 1, U)], &u, None)),
        Err(libc::EFBIG),
        "EFBIG before EIDRM"
    );
    assert_eq!(e(s.semop_undo(&[sb(0, 1, U)], &u, None)), Err(libc::EIDRM));
    // The same with a context that never saw this set.
    let fresh = SemUndo::new();
    assert_eq!(
        e(s.semop_undo(&[sb(9, 1, U)], &fresh, None)),
        Err(libc::EFBIG),
        "EFBIG before EIDRM, fresh context"
    );
    assert_eq!(
        e(s.semop_undo(&[sb(0, 1, U)], &fresh, None)),
        Err(libc::EIDRM)
    );
}

/// ksync only: construction limits (the errno mapping is tested once, in
/// `sem::error`'s unit tests).
#[test]
fn construction_limits() {
    use ksync::sem::SemError;
    assert_eq!(SemSet::new(0).err(), Some(SemError::Invalid));
    assert_eq!(SemSet::new(SEMMSL + 1).err(), Some(SemError::Invalid));
    assert_eq!(SemSet::new(SEMMSL).map(|s| s.nsems()), Ok(SEMMSL));
    // The kernel agrees on the size limits.
    if sysv_available_else_running(
        "sem_oracle::construction_limits",
        "SemSet's own size limits",
    ) {
        assert_eq!(
            KernelSet::new(SEMMSL + 1)
                .err()
                .and_then(|e| e.raw_os_error()),
            Some(libc::EINVAL)
        );
    }
}
