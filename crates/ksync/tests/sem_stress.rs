//! semctl06-style stress for `ksync::sem`, bounded to seconds in debug mode.
//!
//! A set of 5 semaphores starts at random values in [100, 1000), set by one
//! SEM_UNDO semop in a context that lives to the end. `THREADS` threads
//! (several times the core count, so sleepers really sleep and get
//! preempted) each do `ROUNDS` rounds of {atomic multi-sop decrement of
//! amounts < start/2 on all 5 semaphores, then the matching increment}, all
//! SEM_UNDO, each thread with its own `SemUndo`. The first [`LINKED`]
//! semaphores are decremented by one amount per call, the others by their
//! own random amounts. At the end every value equals its start value and
//! GETNCNT/GETZCNT are 0; dropping the contexts then leaves exactly the
//! initial context's adjustment, whose drop takes every value back to 0.
//!
//! While the workers run, a monitor takes GETALL snapshots: in every one the
//! linked semaphores must lack the same amount from their start values, as
//! a call that moved some of them without the others (or a GETALL that saw
//! half a call) would break. The run must show sleepers in GETNCNT, and
//! ksync's counters wake-ups and futex sleeps. That checks the atomicity of
//! multi-sop calls, the undo bookkeeping of sleepers completed by wakers,
//! and (through the watchdog) that no wakeup is lost.
//!
//! Variants: a thread drops its `SemUndo` midway with a decrement still
//! outstanding (the drop must restore it); decrements as semtimedop with
//! very short timeouts, retried on EAGAIN, so expiring timeouts race with
//! wakers completing the same sleeper (an op must never be both applied and
//! reported as timed out). The same workloads run against a kernel set for
//! comparison of the final state (threads share the process's undo list
//! there; the midway drop is a forked child that exits with its decrement
//! outstanding).
//!
//! Beside them, calls on two of four semaphores that never block, from
//! several times as many threads as CPUs, race the quiet path of a call on
//! a few semaphores against the full path's lockers (see
//! [`quiet_and_locked_calls`]).
//!
//! Seeds: random per run and printed; `KSYNC_STRESS_SEED=<u64>` replays one.
//! `KSYNC_STRESS_THREADS` and `KSYNC_STRESS_ROUNDS` scale a run up.
//! If SysV IPC is unavailable the kernel runs are skipped with a loud
//! message (`KSYNC_REQUIRE_SYSV=1` makes that a failure).
#![cfg(not(loom))]

mod common;
mod sem_common;

use ksync::sem::{SemBuf, SemSet, SemUndo, SEM_UNDO};
use sem_common::{
    first_allowed_cpu, pin, sb, stress_seed, sysv_available, KernelSet, RmOnPanic, Rng, Sems,
    UndoChild, Watchdog,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

const NSEMS: usize = 5;
/// Semaphores `0..LINKED` move together: every call, undo and child
/// changes them all by the same amount, an invariant the monitor checks.
const LINKED: usize = 3;
/// Defaults; `KSYNC_STRESS_THREADS` / `KSYNC_STRESS_ROUNDS` override them
/// for a longer hunt.
const THREADS: usize = 6;
const ROUNDS: usize = 500;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

fn threads() -> usize {
    env_or("KSYNC_STRESS_THREADS", THREADS)
}

fn rounds() -> usize {
    env_or("KSYNC_STRESS_ROUNDS", ROUNDS)
}
const U: i16 = SEM_UNDO;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Plain,
    /// Thread 0 stops at ROUNDS/2 with a decrement outstanding and drops
    /// its context (kernel: a forked child exits with one outstanding).
    DropMidway,
    /// Decrements use short timeouts and retry on EAGAIN.
    ShortTimeouts,
    /// Even threads take one of the semaphores past [`LINKED`] at a time
    /// (single-op calls on the per-semaphore or lock-free fast path, with or
    /// without SEM_UNDO), odd threads all five at once, and every fourth
    /// round also waits briefly for a random semaphore to be zero: the set
    /// keeps switching between per-semaphore and global mode.
    Mixed,
}

/// One worker thread's rounds. Returns how many decrements timed out.
fn worker<S: Sems>(
    s: &S,
    start: &[u16],
    mut rng: Rng,
    variant: Variant,
    id: usize,
    go: &Barrier,
) -> usize {
    let undo = SemUndo::new();
    go.wait();
    let mut timeouts = 0;
    let rounds = rounds();
    let linked_start = start[..LINKED].iter().copied().min().unwrap();
    for round in 0..rounds {
        let linked = 1 + rng.below(u64::from(linked_start) / 2 - 1) as i16;
        let amounts: Vec<i16> = start
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i < LINKED {
                    linked
                } else {
                    1 + rng.below(u64::from(v) / 2 - 1) as i16
                }
            })
            .collect();
        let dec: Vec<SemBuf> = (0..NSEMS).map(|i| sb(i as u16, -amounts[i], U)).collect();
        let inc: Vec<SemBuf> = (0..NSEMS).map(|i| sb(i as u16, amounts[i], U)).collect();
        if variant == Variant::Mixed && id.is_multiple_of(2) {
            // Without SEM_UNDO half of the time: those single operations
            // can take ksync's lock-free path. Only on the semaphores that
            // are not linked, which single operations would unlink.
            let k = LINKED + rng.below((NSEMS - LINKED) as u64) as usize;
            let flags = if rng.below(2) == 0 { U } else { 0 };
            let down = [sb(k as u16, -amounts[k], flags)];
            let up = [sb(k as u16, amounts[k], flags)];
            assert_eq!(s.op_undo(&down, &undo, None), Ok(()), "{}", S::NAME);
            if round.is_multiple_of(4) {
                let zero = [sb(rng.below(NSEMS as u64) as u16, 0, 0)];
                let r = s.op(&zero, Some(Duration::from_micros(1 + rng.below(50))));
                assert!(
                    matches!(r, Ok(()) | Err(libc::EAGAIN)),
                    "{}: {r:?}",
                    S::NAME
                );
            }
            assert_eq!(s.op_undo(&up, &undo, None), Ok(()), "{}", S::NAME);
            continue;
        }
        if variant == Variant::ShortTimeouts {
            let timeout = Duration::from_micros(1 + rng.below(200));
            loop {
                match s.op_undo(&dec, &undo, Some(timeout)) {
                    Ok(()) => break,
                    Err(libc::EAGAIN) => timeouts += 1,
                    Err(e) => panic!("{}: decrement failed: errno {e}", S::NAME),
                }
            }
        } else {
            assert_eq!(s.op_undo(&dec, &undo, None), Ok(()), "{}", S::NAME);
        }
        if variant == Variant::DropMidway && id == 0 && round == rounds / 2 {
            // Leave with the decrement outstanding: the drop undoes it (on
            // the kernel the context is the process's, so this only stops).
            drop(undo);
            return timeouts;
        }
        // Hold the amounts a little (yields, no sleeps): others must wait.
        for _ in 0..rng.below(3) {
            thread::yield_now();
        }
        // Increments never block (the values stay below their start).
        assert_eq!(s.op_undo(&inc, &undo, None), Ok(()), "{}", S::NAME);
    }
    timeouts
}

/// What the monitor saw of a run.
#[derive(Debug, Default)]
struct Watched {
    snapshots: u64,
    /// Snapshots taken with the linked semaphores below their start values.
    mid_run: u64,
    /// The first snapshot whose linked semaphores lacked different amounts.
    unlinked: Option<Vec<u16>>,
    most_sleepers: usize,
}

/// Runs the workload on `s`, which already holds the start values. Returns
/// the total number of timed-out decrements.
fn workload<S: Sems>(s: &S, start: &[u16], seed: u64, variant: Variant) -> usize {
    let timeouts = AtomicUsize::new(0);
    let go = Barrier::new(threads());
    let running = AtomicBool::new(true);
    thread::scope(|sc| {
        let _rm = RmOnPanic(s);
        let hs: Vec<_> = (0..threads())
            .map(|id| {
                let mix = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(id as u64 + 1);
                let rng = Rng(seed.wrapping_add(mix) | 1);
                let (timeouts, go) = (&timeouts, &go);
                sc.spawn(move || {
                    timeouts.fetch_add(worker(s, start, rng, variant, id, go), SeqCst);
                })
            })
            .collect();
        let running = &running;
        let monitor = sc.spawn(move || {
            let mut seen = Watched::default();
            while running.load(SeqCst) {
                // An error means the set was removed (a failing run): stop.
                let Ok(n) = (0..NSEMS).map(|i| s.ncnt(i)).sum::<Result<usize, _>>() else {
                    break;
                };
                seen.most_sleepers = seen.most_sleepers.max(n);
                let Ok(values) = s.all() else {
                    break;
                };
                seen.snapshots += 1;
                let lack = |i: usize| i32::from(start[i]) - i32::from(values[i]);
                if lack(0) != 0 {
                    seen.mid_run += 1;
                }
                if (1..LINKED).any(|i| lack(i) != lack(0)) && seen.unlinked.is_none() {
                    seen.unlinked = Some(values);
                }
                thread::sleep(Duration::from_micros(100));
            }
            seen
        });
        for h in hs {
            // Less than the watchdog, so a hang fails here, cleanly.
            sem_common::finish_within("stress worker", h, watchdog_limit() / 2);
        }
        running.store(false, SeqCst);
        let seen = sem_common::finish("monitor", monitor);
        eprintln!("{}: {seen:?}", S::NAME);
        assert_eq!(
            seen.unlinked,
            None,
            "{}: a snapshot caught the linked semaphores (start {start:?}) moved apart: a call or GETALL was not atomic",
            S::NAME
        );
        assert!(
            seen.mid_run > 0,
            "{}: no snapshot caught the set mid-run: the atomicity check saw nothing",
            S::NAME
        );
        assert!(
            seen.most_sleepers > 0,
            "{}: no sleeper was ever seen: the run never contended",
            S::NAME
        );
    });
    let timeouts = timeouts.into_inner();
    if variant == Variant::ShortTimeouts {
        assert!(timeouts > 0, "{}: no decrement ever timed out", S::NAME);
    }
    timeouts
}

/// 120 s for the default size, more for a scaled-up run.
fn watchdog_limit() -> Duration {
    let work = threads() * rounds();
    Duration::from_secs(120 * (work / (THREADS * ROUNDS)).max(1) as u64)
}

fn start_values(rng: &mut Rng) -> Vec<u16> {
    (0..NSEMS).map(|_| 100 + rng.below(900) as u16).collect()
}

fn check_end<S: Sems>(s: &S, start: &[u16]) {
    assert_eq!(
        s.all(),
        Ok(start.to_vec()),
        "{}: values back at start",
        S::NAME
    );
    for i in 0..NSEMS {
        assert_eq!(s.ncnt(i), Ok(0), "{}: ncnt({i})", S::NAME);
        assert_eq!(s.zcnt(i), Ok(0), "{}: zcnt({i})", S::NAME);
    }
}

fn run_ksync(test: &'static str, variant: Variant) {
    let _dog = Watchdog::arm(test, watchdog_limit());
    let seed = stress_seed(test);
    let mut rng = Rng(seed);
    let start = start_values(&mut rng);
    let s = SemSet::new(NSEMS).unwrap();
    let init = SemUndo::new();
    let sops: Vec<SemBuf> = (0..NSEMS)
        .map(|i| sb(i as u16, start[i] as i16, U))
        .collect();
    s.semop_undo(&sops, &init, None).unwrap();
    let timeouts = workload(&s, &start, rng.next(), variant);
    let counters = s.counters();
    eprintln!("{test}: start {start:?}, {timeouts} timed-out decrements, {counters:?}");
    assert!(
        counters.parks > 0,
        "{test}: no caller ever slept: {counters:?}"
    );
    assert!(
        counters.wakeups > 0,
        "{test}: no waker ever completed a sleeper: {counters:?}"
    );
    check_end(&s, &start);
    // Every worker context is gone and netted to zero; the initial one
    // takes the set back to 0.
    drop(init);
    assert_eq!(s.get_all(), Ok(vec![0; NSEMS]), "initial context undone");
}

fn run_kernel(test: &'static str, variant: Variant) {
    if !sysv_available(test) {
        return;
    }
    let _dog = Watchdog::arm(test, watchdog_limit());
    let seed = stress_seed(test);
    let mut rng = Rng(seed);
    let start = start_values(&mut rng);
    let k = KernelSet::create(NSEMS);
    let sops: Vec<SemBuf> = (0..NSEMS)
        .map(|i| sb(i as u16, start[i] as i16, U))
        .collect();
    k.semop(&sops).unwrap();
    let seed2 = rng.next();
    let timeouts = if variant == Variant::DropMidway {
        // The kernel's unit of undo is the process: a child takes a
        // decrement with SEM_UNDO while the workers run and exits with it
        // outstanding.
        thread::scope(|sc| {
            let _rm = RmOnPanic(&k);
            let w = sc.spawn(|| workload(&k, &start, seed2, Variant::Plain));
            let linked = start[..LINKED].iter().copied().min().unwrap() / 3;
            let dec: Vec<SemBuf> = (0..NSEMS)
                .map(|i| {
                    let amount = if i < LINKED { linked } else { start[i] / 3 };
                    sb(i as u16, -(amount as i16), U)
                })
                .collect();
            for _ in 0..3 {
                let (child, r) = UndoChild::spawn(&k, &dec);
                assert_eq!(r, 0, "child's decrement");
                child.exit();
            }
            sem_common::finish_within("kernel workload", w, watchdog_limit() / 2)
        })
    } else {
        workload(&k, &start, seed2, variant)
    };
    eprintln!("{test}: start {start:?}, {timeouts} timed-out decrements");
    check_end(&k, &start);
}

/// semop04: a binary semaphore as a mutex. `threads()` threads x
/// `rounds()` rounds of P / critical section / V; inside, a counter must be
/// exactly 1 (mutual exclusion) and a plain read-modify-write of a shared
/// total must not lose updates. P and V with or without SEM_UNDO (ksync: a
/// single operation without it can take the lock-free path).
fn mutex_workload<S: Sems>(s: &S, undo_flag: i16) {
    let inside = AtomicUsize::new(0);
    let total = AtomicUsize::new(0);
    let go = Barrier::new(threads());
    thread::scope(|sc| {
        let _rm = RmOnPanic(s);
        let hs: Vec<_> = (0..threads())
            .map(|_| {
                let (inside, total, go) = (&inside, &total, &go);
                sc.spawn(move || {
                    let undo = SemUndo::new();
                    go.wait();
                    for round in 0..rounds() {
                        assert_eq!(s.op_undo(&[sb(0, -1, undo_flag)], &undo, None), Ok(()));
                        assert_eq!(inside.fetch_add(1, SeqCst), 0, "{}: two inside", S::NAME);
                        let t = total.load(SeqCst);
                        if round.is_multiple_of(3) {
                            thread::yield_now();
                        }
                        total.store(t + 1, SeqCst);
                        inside.fetch_sub(1, SeqCst);
                        assert_eq!(s.op_undo(&[sb(0, 1, undo_flag)], &undo, None), Ok(()));
                    }
                })
            })
            .collect();
        for h in hs {
            sem_common::finish_within("mutex worker", h, watchdog_limit() / 2);
        }
    });
    assert_eq!(
        total.into_inner(),
        threads() * rounds(),
        "{}: lost updates",
        S::NAME
    );
    assert_eq!(s.all(), Ok(vec![1]), "{}", S::NAME);
    assert_eq!((s.ncnt(0), s.zcnt(0)), (Ok(0), Ok(0)), "{}", S::NAME);
}

/// Calls on two of four semaphores, none of which can block, for two
/// seconds from four threads per CPU (all on one CPU with `one_cpu`). Most
/// take the quiet path, which releases its locks with a plain store; the
/// rest find a semaphore locked and take the full path, whose lockers wait
/// out a quiet hold or sleep behind an ordinary holder on the same word.
/// A locker that waited out a quiet hold in a futex wait on the word took
/// the wake-up meant for a locker asleep behind an ordinary holder, and this
/// hung within seconds (the watchdog aborts). At the end every value is
/// back where it started.
fn quiet_and_locked_calls(test: &'static str, one_cpu: bool) {
    const SEMS: u16 = 4;
    const START: u16 = 1000;
    let _dog = Watchdog::arm(test, Duration::from_secs(60));
    let seed = stress_seed(test);
    let s = SemSet::new(usize::from(SEMS)).unwrap();
    s.set_all(&[START; SEMS as usize]).unwrap();
    let cpus = thread::available_parallelism().map_or(2, |n| n.get());
    let threads = 4 * cpus.max(2);
    let cpu = one_cpu.then(first_allowed_cpu);
    let until = Instant::now() + Duration::from_secs(2);
    let pairs = AtomicUsize::new(0);
    thread::scope(|scope| {
        for t in 0..threads {
            let (s, pairs) = (&s, &pairs);
            let mut rng = Rng::new(seed.wrapping_add(t as u64).wrapping_mul(0x9E37_79B9));
            scope.spawn(move || {
                if let Some(cpu) = cpu {
                    pin(cpu);
                }
                let mut n = 0;
                while Instant::now() < until {
                    let a = rng.below(u64::from(SEMS)) as u16;
                    let b = (a + 1 + rng.below(u64::from(SEMS) - 1) as u16) % SEMS;
                    // At most `threads` units are out of any semaphore at
                    // once, far fewer than START: no call blocks.
                    s.semop(&[sb(a, -1, 0), sb(b, 1, 0)]).unwrap();
                    s.semop(&[sb(b, -1, 0), sb(a, 1, 0)]).unwrap();
                    n += 1;
                }
                pairs.fetch_add(n, SeqCst);
            });
        }
    });
    eprintln!(
        "{test}: {threads} threads, {} pairs of calls, {:?}",
        pairs.load(SeqCst),
        s.counters()
    );
    assert!(pairs.load(SeqCst) > 0, "no call completed");
    assert_eq!(s.get_all(), Ok(vec![START; SEMS as usize]));
}

#[test]
fn quiet_and_locked_calls_on_all_cpus() {
    quiet_and_locked_calls("sem_stress::quiet_and_locked_calls_on_all_cpus", false);
}

#[test]
fn quiet_and_locked_calls_on_one_cpu() {
    quiet_and_locked_calls("sem_stress::quiet_and_locked_calls_on_one_cpu", true);
}

#[test]
fn semop04_mutual_exclusion() {
    let test = "sem_stress::semop04_mutual_exclusion";
    let _dog = Watchdog::arm(test, watchdog_limit());
    for undo_flag in [0, U] {
        let s = SemSet::new(1).unwrap();
        s.set_value(0, 1).unwrap();
        mutex_workload(&s, undo_flag);
        eprintln!("{test}: ksync (flags {undo_flag:#x}) {:?}", s.counters());
    }
    if sysv_available(test) {
        for undo_flag in [0, U] {
            let k = KernelSet::create(1);
            k.set_value(0, 1).unwrap();
            mutex_workload(&k, undo_flag);
        }
    }
}

#[test]
fn stress_ksync() {
    run_ksync("sem_stress::stress_ksync", Variant::Plain);
}

#[test]
fn stress_ksync_drop_context_midway() {
    run_ksync(
        "sem_stress::stress_ksync_drop_context_midway",
        Variant::DropMidway,
    );
}

#[test]
fn stress_ksync_short_timeouts() {
    run_ksync(
        "sem_stress::stress_ksync_short_timeouts",
        Variant::ShortTimeouts,
    );
}

#[test]
fn stress_ksync_mixed_simple_and_complex() {
    run_ksync(
        "sem_stress::stress_ksync_mixed_simple_and_complex",
        Variant::Mixed,
    );
}

#[test]
fn stress_kernel_mixed_simple_and_complex() {
    run_kernel(
        "sem_stress::stress_kernel_mixed_simple_and_complex",
        Variant::Mixed,
    );
}

#[test]
fn stress_kernel() {
    run_kernel("sem_stress::stress_kernel", Variant::Plain);
}

#[test]
fn stress_kernel_child_exits_midway() {
    run_kernel(
        "sem_stress::stress_kernel_child_exits_midway",
        Variant::DropMidway,
    );
}

#[test]
fn stress_kernel_short_timeouts() {
    run_kernel(
        "sem_stress::stress_kernel_short_timeouts",
        Variant::ShortTimeouts,
    );
}
