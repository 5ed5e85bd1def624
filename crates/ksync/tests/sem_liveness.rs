//! A randomized stress test of `ksync::sem` with a liveness watchdog: no
//! sleeper may stay blocked while its operation could proceed, and none may
//! sleep on after a waker completed it.
//!
//! Worker threads loop over random calls of one to three operations
//! (decrements, increments and waits for zero, some semaphores named twice,
//! some with `SEM_UNDO`, some with `IPC_NOWAIT` on a later operation), a
//! third of them with a timeout of a few hundred microseconds; now and then a
//! worker drops its undo context, which applies its adjustments and may
//! complete others. A controller keeps changing the set beside them:
//! non-blocking calls, SETVAL, SETALL with small values, and `SEM_UNDO`
//! calls in a context it drops from time to time. At the end the set is
//! removed, which must return every sleeper with `EIDRM`. No call may fail
//! with `EIDRM` before that, nor with `ERANGE` unless the operations so far
//! could have taken a value past `SEMVMX` or an adjustment past `SEMAEM`
//! (they cannot, in the bounded runs).
//!
//! A watchdog thread takes a snapshot every few milliseconds: the call each
//! worker is in (read before and after), the values (GETALL), GETNCNT and
//! GETZCNT. It fails the test, with a dump of all of that and the set's
//! counters, when
//! * a worker stays in the same call while every snapshot for [`STALL`] says
//!   that call could proceed on the values (a sleeper the wakers missed), or
//! * a worker stays in one call for [`STUCK`] while the controller keeps
//!   setting small values (a sleeper completed but never woken, or a timeout
//!   that never fired: the controller makes every call runnable again and
//!   again within milliseconds).
//!
//! A shared set heals a lost wake-up itself within 100 ms (a timed sleeper
//! of each process, its watch, sweeps the set for what dead processes
//! left), too soon for these verdicts, so its run also fails if the sweep
//! ever found work a waker should have done (`RecoveryStats::swept`: a
//! sleeper it could complete, a result not published, or a sleeper still
//! asleep on its result after its wake-up was made), or if a wake-up is
//! still owed once every thread is out of its calls
//! (`RecoveryStats::wakes_owed`: one its waker forgot, which the sweep
//! made for it). Its runs make every sleeper but the watch untimed, so
//! that the verdicts run over the path most sleepers of a busy set take.
//!
//! Each run goes once with every thread on one CPU (sleepers really sleep,
//! and lock holders get preempted) and once on all CPUs, on a `SemSet` and
//! on a process-shared set (whose undo adjustments belong to the process, so
//! there dropping a context changes nothing). Bounded to a couple of seconds
//! each; `liveness_for_minutes` (ignored) runs for `KSYNC_LIVENESS_SECS`
//! (default 120) alternating the four. Seeds are random
//! and printed; `KSYNC_STRESS_SEED=<u64>` reuses one (the threads'
//! interleaving is the scheduler's, so a replay is not exact).
#![cfg(not(loom))]

mod common;
mod sem_common;

use common::PATIENCE;
use ksync::futex_batch::SharingMode;
use ksync::sem::{SemBuf, SemSet, SemUndo, IPC_NOWAIT, SEMAEM, SEMVMX, SEM_UNDO};
use libc::{EAGAIN, EIDRM, ERANGE};
use sem_common::{first_allowed_cpu, pin, stress_seed, Rng, Sems, SharedSet};
use std::fmt::Debug;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const NSEMS: usize = 4;
const WORKERS: usize = 6;
/// How often the watchdog looks.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(5);
/// How long a worker's call may look runnable, snapshot after snapshot,
/// before the watchdog calls it missed. A thread that was completed but not
/// yet scheduled also looks like this for a moment: far below this on any
/// machine that runs tests at all.
const STALL: Duration = Duration::from_secs(1);
/// The fewest snapshots behind a STALL verdict.
const STALL_SNAPSHOTS: u32 = 20;
/// How long a worker may stay in one call while the controller runs. Every
/// call the workers make can return on some values the controller sets (see
/// [`random_call`]), and it sets new ones a few thousand times a second: no
/// call took even 30 ms in runs on a loaded 2-CPU machine.
const STUCK: Duration = Duration::from_secs(1);

/// The call a worker is in.
#[derive(Clone, Debug)]
struct Call {
    seq: u64,
    sops: Vec<SemBuf>,
    timeout: Option<Duration>,
    since: Instant,
}

/// Whether `sops` would return now on `values`: every operation proceeds in
/// array order, or the first one that cannot has `IPC_NOWAIT` (an overflow
/// returns too, with ERANGE, so it counts as proceeding).
fn could_proceed(sops: &[SemBuf], values: &[u16]) -> bool {
    let mut v: Vec<i32> = values.iter().map(|&x| i32::from(x)).collect();
    for s in sops {
        let cur = v[usize::from(s.num)];
        let blocks = if s.op == 0 {
            cur != 0
        } else {
            cur + i32::from(s.op) < 0
        };
        if blocks {
            return s.flags & IPC_NOWAIT != 0;
        }
        v[usize::from(s.num)] = cur + i32::from(s.op);
    }
    true
}

/// Whether some values the controller sets (each 0 to 3) let `sops`
/// return: `[0 wait-for-zero, 0 -2]` never can, and would only sit out the
/// run.
fn can_ever_proceed(sops: &[SemBuf]) -> bool {
    (0..4u16.pow(NSEMS as u32)).any(|k| {
        let values: Vec<u16> = (0..NSEMS as u32).map(|i| k / 4u16.pow(i) % 4).collect();
        could_proceed(sops, &values)
    })
}

/// A random call that some small values let return.
fn random_call(rng: &mut Rng) -> Vec<SemBuf> {
    loop {
        let sops = any_call(rng);
        if can_ever_proceed(&sops) {
            return sops;
        }
    }
}

fn any_call(rng: &mut Rng) -> Vec<SemBuf> {
    let n = match rng.below(10) {
        0..=3 => 1,
        4..=7 => 2,
        _ => 3,
    };
    (0..n)
        .map(|i| {
            let mut flags = 0;
            if rng.percent(25) {
                flags |= SEM_UNDO;
            }
            if i > 0 && rng.percent(10) {
                flags |= IPC_NOWAIT;
            }
            let num = rng.below(NSEMS as u64) as u16;
            let op = rng.below(5) as i16 - 2;
            SemBuf::new(num, op, flags)
        })
        .collect()
}

/// A set the run can use: `Sems`, shown in a dump, moved to the threads.
trait Set: Sems + Debug + Send + 'static {}
impl<S: Sems + Debug + Send + 'static> Set for S {}

/// What the threads share.
struct Shared<S> {
    set: S,
    calls: Vec<Mutex<Option<Call>>>,
    /// Workers start no new call once this is set.
    stop: AtomicBool,
    /// The controller stopped changing values (the STUCK rule is off).
    controller_done: AtomicBool,
    /// The watchdog's verdict, with its dump.
    failure: Mutex<Option<String>>,
    /// The workers' calls: all, and those that completed or timed out.
    calls_made: AtomicU64,
    calls_done: AtomicU64,
    calls_timed_out: AtomicU64,
    /// The controller's changes.
    changes: AtomicU64,
    /// Set just before the test removes the set: only then may a call
    /// fail with EIDRM.
    removed: AtomicBool,
    /// Per semaphore, bounds from every operation announced so far, before
    /// its call: on how far the value can have risen above the at most 3
    /// the controller sets (each increment, and each `SEM_UNDO` operation's
    /// amount, which dropping its context may give back), and on how far
    /// an undo adjustment can have strayed from 0 (each `SEM_UNDO`
    /// operation's amount, summed over the process, whose adjustments a
    /// shared set keeps together). A call may fail with ERANGE only once
    /// one of them allows it.
    rise: [AtomicU64; NSEMS],
    undo_drift: [AtomicU64; NSEMS],
}

impl<S: Set> Shared<S> {
    fn new(set: S) -> Shared<S> {
        Shared {
            set,
            calls: (0..WORKERS).map(|_| Mutex::new(None)).collect(),
            stop: AtomicBool::new(false),
            controller_done: AtomicBool::new(false),
            failure: Mutex::new(None),
            calls_made: AtomicU64::new(0),
            calls_done: AtomicU64::new(0),
            calls_timed_out: AtomicU64::new(0),
            changes: AtomicU64::new(0),
            removed: AtomicBool::new(false),
            rise: [const { AtomicU64::new(0) }; NSEMS],
            undo_drift: [const { AtomicU64::new(0) }; NSEMS],
        }
    }

    fn remove(&self) {
        // Release: a caller that sees the removal (through the set's locks)
        // sees this too.
        self.removed.store(true, Ordering::Release);
        let _ = self.set.rm();
    }

    /// Counts `sops` into the ERANGE bounds; before the call.
    fn announce(&self, sops: &[SemBuf]) {
        for s in sops {
            let num = usize::from(s.num);
            let amount = u64::from(s.op.unsigned_abs());
            if s.flags & SEM_UNDO != 0 {
                self.undo_drift[num].fetch_add(amount, Ordering::Relaxed);
                self.rise[num].fetch_add(amount, Ordering::Relaxed);
            } else if s.op > 0 {
                self.rise[num].fetch_add(amount, Ordering::Relaxed);
            }
        }
    }

    /// Whether `sops`, announced, could have failed with ERANGE: some
    /// increment could overflow its value, or some `SEM_UNDO` operation
    /// push its adjustment out of range.
    fn range_allows(&self, sops: &[SemBuf]) -> bool {
        sops.iter().any(|s| {
            let num = usize::from(s.num);
            let highest = 3 + self.rise[num].load(Ordering::Relaxed);
            let drift = self.undo_drift[num].load(Ordering::Relaxed);
            (s.op > 0 && highest > SEMVMX as u64)
                || (s.flags & SEM_UNDO != 0 && drift > SEMAEM as u64)
        })
    }

    /// Whether an EIDRM is the test's own removal.
    fn was_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    fn call_of(&self, w: usize) -> Option<Call> {
        self.calls[w]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `values`: the snapshot the verdict was taken on (none once the set
    /// is gone).
    fn dump(&self, why: &str, seed: u64, values: Option<&[u16]>) -> String {
        let mut out = format!("!!! LIVENESS WATCHDOG (seed {seed}): {why}\n");
        for num in 0..NSEMS {
            let _ = writeln!(
                out,
                "  sem {num}: value {:?} ncnt {:?} zcnt {:?}",
                values.and_then(|v| v.get(num)),
                self.set.ncnt(num),
                self.set.zcnt(num)
            );
        }
        for w in 0..WORKERS {
            match self.call_of(w) {
                Some(call) => {
                    let _ = writeln!(
                        out,
                        "  worker {w}: call #{} {:?} timeout {:?}, for {:?}, could proceed: {:?}",
                        call.seq,
                        call.sops,
                        call.timeout,
                        call.since.elapsed(),
                        values.map(|v| could_proceed(&call.sops, v))
                    );
                }
                None => {
                    let _ = writeln!(out, "  worker {w}: between calls");
                }
            }
        }
        let _ = writeln!(out, "  {} {:?}", S::NAME, self.set);
        let _ = writeln!(out, "  {:?}", self.set.counters());
        out
    }
}

fn worker<S: Set>(shared: &Shared<S>, w: usize, mut rng: Rng, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        pin(cpu);
    }
    let mut undo = SemUndo::new();
    let mut seq = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        let sops = random_call(&mut rng);
        let timeout = rng
            .percent(33)
            .then(|| Duration::from_micros(1 + rng.below(300)));
        seq += 1;
        shared.announce(&sops);
        *shared.calls[w].lock().unwrap() = Some(Call {
            seq,
            sops: sops.clone(),
            timeout,
            since: Instant::now(),
        });
        let result = shared.set.op_undo(&sops, &undo, timeout);
        *shared.calls[w].lock().unwrap() = None;
        let nowait = sops.iter().any(|s| s.flags & IPC_NOWAIT != 0);
        shared.calls_made.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {
                shared.calls_done.fetch_add(1, Ordering::Relaxed);
            }
            Err(EAGAIN) if timeout.is_some() => {
                shared.calls_timed_out.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        match result {
            Ok(()) => {}
            Err(ERANGE) if shared.range_allows(&sops) => {}
            Err(EAGAIN) if timeout.is_some() || nowait => {}
            // The test removed the set (the end of the run, or the watchdog).
            Err(EIDRM) if shared.was_removed() => return,
            other => panic!("worker {w}: {sops:?} with timeout {timeout:?} returned {other:?}"),
        }
        if rng.percent(2) {
            // Applies this context's adjustments, which may complete others.
            undo = SemUndo::new();
        }
    }
}

/// Changes the set beside the workers until `run` is over.
fn controller<S: Set>(shared: &Shared<S>, mut rng: Rng, run: Duration) {
    let mut undo = SemUndo::new();
    let small = |rng: &mut Rng| rng.below(4) as u16;
    let start = Instant::now();
    while start.elapsed() < run {
        let result = match rng.below(10) {
            0..=3 => {
                let sops: Vec<SemBuf> = (0..1 + rng.below(3))
                    .map(|_| {
                        let num = rng.below(NSEMS as u64) as u16;
                        SemBuf::new(num, rng.below(4) as i16 - 1, IPC_NOWAIT)
                    })
                    .collect();
                shared.announce(&sops);
                shared.set.op(&sops, None).map_err(|e| (e, sops))
            }
            4..=6 => {
                let values: Vec<u16> = (0..NSEMS).map(|_| small(&mut rng)).collect();
                shared.set.setall(&values).map_err(|e| (e, vec![]))
            }
            7..=8 => {
                let num = rng.below(NSEMS as u64) as usize;
                shared
                    .set
                    .setval(num, i32::from(small(&mut rng)))
                    .map_err(|e| (e, vec![]))
            }
            _ => {
                if rng.percent(30) {
                    undo = SemUndo::new();
                }
                let num = rng.below(NSEMS as u64) as u16;
                let op = SemBuf::new(num, rng.below(3) as i16 - 1, SEM_UNDO | IPC_NOWAIT);
                shared.announce(&[op]);
                shared
                    .set
                    .op_undo(&[op], &undo, None)
                    .map_err(|e| (e, vec![op]))
            }
        };
        match result {
            Ok(()) | Err((EAGAIN, _)) => {}
            Err((ERANGE, sops)) if shared.range_allows(&sops) => {}
            // The watchdog removed the set.
            Err((EIDRM, _)) if shared.was_removed() => return,
            Err((e, sops)) => panic!("controller: {sops:?} returned errno {e}"),
        }
        shared.changes.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_micros(rng.below(300)));
    }
}

/// Per worker: the call last seen runnable, since when, and how many
/// snapshots in a row.
#[derive(Clone, Copy, Default)]
struct Runnable {
    seq: u64,
    since: Option<Instant>,
    snapshots: u32,
}

fn watchdog<S: Set>(shared: &Shared<S>, seed: u64, done: &AtomicBool) {
    let mut runnable = [Runnable::default(); WORKERS];
    while !done.load(Ordering::Relaxed) {
        thread::sleep(SNAPSHOT_EVERY);
        let before: Vec<Option<Call>> = (0..WORKERS).map(|w| shared.call_of(w)).collect();
        let Ok(values) = shared.set.all() else {
            return; // removed
        };
        let mut verdict = None;
        for (w, seen) in runnable.iter_mut().enumerate() {
            let (Some(call), Some(after)) = (&before[w], shared.call_of(w)) else {
                *seen = Runnable::default();
                continue;
            };
            if call.seq != after.seq {
                *seen = Runnable::default();
                continue;
            }
            if could_proceed(&call.sops, &values) {
                if seen.seq != call.seq || seen.since.is_none() {
                    *seen = Runnable {
                        seq: call.seq,
                        since: Some(Instant::now()),
                        snapshots: 0,
                    };
                }
                seen.snapshots += 1;
                let for_long = seen.since.is_some_and(|t| t.elapsed() >= STALL);
                if for_long && seen.snapshots >= STALL_SNAPSHOTS {
                    verdict = Some(format!(
                        "worker {w} blocked in call #{} although it could proceed, for {} snapshots",
                        call.seq, seen.snapshots
                    ));
                }
            } else {
                *seen = Runnable::default();
            }
            if !shared.controller_done.load(Ordering::Relaxed) && call.since.elapsed() >= STUCK {
                verdict = Some(format!(
                    "worker {w} in call #{} for {:?} while the controller kept resetting values",
                    call.seq,
                    call.since.elapsed()
                ));
            }
        }
        if let Some(why) = verdict {
            let dump = shared.dump(&why, seed, Some(&values));
            eprintln!("{dump}");
            *shared.failure.lock().unwrap() = Some(dump);
            shared.stop.store(true, Ordering::Relaxed);
            // Releases whoever can still be released, so the test can end.
            shared.remove();
            return;
        }
    }
}

/// Runs of this binary take turns: each sets how posts share their
/// wake-ups out, which is process-wide.
static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

/// One run on `set`: workers, the controller and the watchdog for `run`,
/// then the set's removal. `one_cpu` pins every thread to the same CPU.
/// Posts share their wake-ups out as `sharing` says, whatever the machine's
/// default, so that a wake lost between a poster and its helpers shows here
/// on any machine.
fn run_once<S: Set>(test: &str, set: S, run: Duration, one_cpu: bool, sharing: SharingMode) {
    let _turn = ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    ksync::futex_batch::set_sharing_mode(sharing);
    let seed = stress_seed(test);
    let cpu = one_cpu.then(first_allowed_cpu);
    let test = format!("{test}, {}, wake-ups shared {sharing:?}", S::NAME);
    let test = test.as_str();
    let shared = Arc::new(Shared::new(set));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let shared = Arc::clone(&shared);
            let rng = Rng::new(seed.wrapping_add(w as u64 + 1).wrapping_mul(0x9E37_79B9));
            thread::spawn(move || worker(&shared, w, rng, cpu))
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let dog = {
        let (shared, done) = (Arc::clone(&shared), Arc::clone(&done));
        thread::spawn(move || {
            if let Some(cpu) = cpu {
                pin(cpu);
            }
            watchdog(&shared, seed, &done)
        })
    };
    if let Some(cpu) = cpu {
        pin(cpu);
    }
    controller(&shared, Rng::new(seed), run);
    shared.controller_done.store(true, Ordering::Relaxed);
    shared.stop.store(true, Ordering::Relaxed);
    // Removal returns every sleeper (EIDRM); the watchdog may have removed
    // the set already.
    shared.remove();
    let start = Instant::now();
    for (w, h) in workers.into_iter().enumerate() {
        while !h.is_finished() {
            if start.elapsed() > PATIENCE {
                let dump = shared.dump(
                    &format!("worker {w} still blocked {PATIENCE:?} after the set's removal"),
                    seed,
                    None,
                );
                panic!("{dump}");
            }
            thread::sleep(Duration::from_millis(1));
        }
        if let Err(p) = h.join() {
            std::panic::resume_unwind(p);
        }
    }
    done.store(true, Ordering::Relaxed);
    dog.join().unwrap();
    if let Some(dump) = shared.failure.lock().unwrap().take() {
        panic!("{dump}");
    }
    let c = shared
        .set
        .counters()
        .expect("ksync's sets count their work");
    let count = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "{test}: {} calls ({} completed, {} timed out), {} controller changes; \
         {} wake-ups ({} by futex), {} polls, {} lock waits",
        count(&shared.calls_made),
        count(&shared.calls_done),
        count(&shared.calls_timed_out),
        count(&shared.changes),
        c.wakeups,
        c.futex_wakes,
        c.polls,
        c.lock_waits
    );
    assert!(
        c.wakeups > 0,
        "the run completed no sleeper: it tested nothing"
    );
    // A shared set's sweep (every 100 ms) completes what its wakers missed,
    // well within STALL: what it had to do is counted instead.
    let swept = shared.set.swept();
    assert_eq!(
        swept, 0,
        "{test}: the sweep completed or woke {swept} sleepers that their wakers had not"
    );
    // The workers have returned and the controller's calls with them: no
    // waker is between a publication and its wake-up.
    let owed = shared.set.wakes_owed();
    assert_eq!(owed, 0, "{test}: {owed} wake-ups forgotten by their wakers");
}

fn new_set() -> SemSet {
    SemSet::new(NSEMS).unwrap()
}

#[test]
fn no_sleeper_is_left_blocked_on_one_cpu() {
    run_once(
        "one CPU",
        new_set(),
        Duration::from_secs(2),
        true,
        SharingMode::Any,
    );
}

#[test]
fn no_sleeper_is_left_blocked_on_all_cpus() {
    run_once(
        "all CPUs",
        new_set(),
        Duration::from_secs(2),
        false,
        SharingMode::Any,
    );
}

/// As above, with each post's wake-ups kept on their sleepers' CPUs: a
/// leader per CPU wakes the others there, the poster whatever is left.
#[test]
fn no_sleeper_is_left_blocked_on_all_cpus_when_wakes_stay_on_their_cpu() {
    run_once(
        "all CPUs",
        new_set(),
        Duration::from_secs(2),
        false,
        SharingMode::Local,
    );
}

/// The shared sets' runs make every sleeper but each process's watch sleep
/// without a timeout (`set_untimed_crowd(1)`; by default only 16 or more
/// do), the path most sleepers of a busy set take.
fn untimed() {
    ksync::sem::shared::set_untimed_crowd(1);
}

#[test]
fn no_sleeper_of_a_shared_set_is_left_blocked_on_one_cpu() {
    untimed();
    run_once(
        "one CPU",
        SharedSet::create(NSEMS),
        Duration::from_secs(2),
        true,
        SharingMode::Any,
    );
}

#[test]
fn no_sleeper_of_a_shared_set_is_left_blocked_on_all_cpus() {
    untimed();
    run_once(
        "all CPUs",
        SharedSet::create(NSEMS),
        Duration::from_secs(2),
        false,
        SharingMode::Any,
    );
}

#[test]
#[ignore = "long: KSYNC_LIVENESS_SECS (default 120)"]
fn liveness_for_minutes() {
    let secs: u64 = std::env::var("KSYNC_LIVENESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    untimed();
    let start = Instant::now();
    let mut round = 0u32;
    while start.elapsed() < Duration::from_secs(secs) {
        // One CPU and all of them, on each kind of set, with each way of
        // sharing wake-ups out, in turn.
        let (test, run, one_cpu) = (
            format!("round {round}"),
            Duration::from_secs(5),
            round.is_multiple_of(2),
        );
        let sharing = if round % 8 < 4 {
            SharingMode::Any
        } else {
            SharingMode::Local
        };
        if round % 4 < 2 {
            run_once(&test, new_set(), run, one_cpu, sharing);
        } else {
            run_once(&test, SharedSet::create(NSEMS), run, one_cpu, sharing);
        }
        round += 1;
    }
}

#[test]
fn the_watchdog_reports_a_call_that_could_proceed() {
    // A phantom worker "blocked" in a call that can always proceed: the
    // verdict a missed sleeper would get, with the dump.
    let shared = Shared::new(new_set());
    shared.controller_done.store(true, Ordering::Relaxed);
    *shared.calls[0].lock().unwrap() = Some(Call {
        seq: 1,
        sops: vec![SemBuf::new(1, 1, 0)],
        timeout: None,
        since: Instant::now(),
    });
    watchdog(&shared, 0, &AtomicBool::new(false));
    let dump = shared.failure.lock().unwrap().take().expect("a verdict");
    assert!(dump.contains("worker 0 blocked in call #1"), "{dump}");
    assert!(dump.contains("sem 1: value Some(0)"), "{dump}");
    assert_eq!(shared.set.all(), Err(EIDRM));
}

#[test]
fn could_proceed_is_the_kernels_first_pass() {
    let sb = SemBuf::new;
    assert!(could_proceed(&[sb(0, -1, 0)], &[1]));
    assert!(!could_proceed(&[sb(0, -1, 0)], &[0]));
    // In array order, a semaphore named twice sees the earlier change.
    assert!(could_proceed(&[sb(0, -1, 0), sb(0, 0, 0)], &[1]));
    assert!(!could_proceed(&[sb(0, 1, 0), sb(0, 0, 0)], &[0]));
    // A blocking operation with IPC_NOWAIT returns (EAGAIN).
    assert!(could_proceed(
        &[sb(0, 0, 0), sb(1, -1, IPC_NOWAIT)],
        &[0, 0]
    ));
    assert!(!could_proceed(&[sb(0, 0, 0), sb(1, -1, 0)], &[0, 0]));
    assert!(can_ever_proceed(&[sb(0, -2, 0), sb(0, 0, 0)]));
    assert!(!can_ever_proceed(&[sb(0, 0, 0), sb(0, -2, 0)]));
}

#[test]
fn the_watchdog_reports_a_call_stuck_while_the_controller_runs() {
    // A phantom worker in a call that cannot proceed on the values, for
    // longer than STUCK while the controller counts as running: what a
    // sleeper completed but never woken would look like.
    let shared = Shared::new(new_set());
    *shared.calls[2].lock().unwrap() = Some(Call {
        seq: 7,
        sops: vec![SemBuf::new(0, -1, 0)],
        timeout: None,
        since: Instant::now(),
    });
    watchdog(&shared, 0, &AtomicBool::new(false));
    let dump = shared.failure.lock().unwrap().take().expect("a verdict");
    assert!(dump.contains("worker 2 in call #7 for"), "{dump}");
    assert!(dump.contains("could proceed: Some(false)"), "{dump}");
}
