//! Chris Mason's sembench, as Manfred Spraul ran it for seed 000
//! (`sembench -t 250 -w 64 -o 0 -r 30 -b`), with ksync, a raw futex and POSIX
//! semaphores beside the kernel's SysV semaphores.
//!
//! The workload (`shared/reference/benchmarks.md` §1.3): `-t` worker threads
//! each own one semaphore (worker *i* = semaphore *i % 250* of array *i / 250*;
//! arrays hold 250 semaphores). A worker loops: `data = 1`, full fence,
//! `ready = 1`, then sleeps on its semaphore (`-1`); once posted it checks that
//! the main thread cleared `data` and counts one *burn* (a completed
//! wait→wake cycle, no other work). The main thread loops until `-r` seconds
//! have passed: it scans the worker slots round robin from the one after the
//! last it took, takes up to `-w` slots whose `ready` is set (clearing `ready`
//! and `data`), posts them per array in calls of at most 64 `+1 | IPC_NOWAIT`
//! operations, and counts a *main burn* on every iteration, empty ones
//! included. Workers are bound round robin to the allowed CPUs (the `-b`
//! behaviour, which sembench 0.2 always has); the main thread is left free
//! unless `--pin-main` names a CPU.
//!
//! Backends (`-o`):
//! * `ipc`: the kernel's SysV semaphores (`semget`, `semtimedop` with no
//!   timeout, removed with `IPC_RMID` when the run ends, also on error).
//! * `ksync`: `ksync::sem::SemSet`, the same calls in user space: a worker's
//!   `semop` of one `-1`, the main thread's `semop` of up to 64 `+1 | IPC_NOWAIT`.
//! * `futex`: sembench 0.3's `-o 2`: a worker `FUTEX_WAIT`s on its `data` word
//!   while it is 1; the main thread clears it and `FUTEX_WAKE`s 1, per worker.
//! * `posix`: one glibc `sem_t` per worker, `sem_wait` / one `sem_post` per worker.
//!
//! Differences from sembench 0.2: the untimed setup pause after creating the
//! arrays defaults to 0 s (`--pause`; the original sleeps 10 s); burns per
//! second divide by the measured run time, not whole seconds; shutdown is
//! bounded (if workers have not all left after a few seconds of posting, the
//! arrays are removed or every worker is posted and the run fails; workers
//! that still do not leave, say after a lost wake-up in the primitive under
//! test, are left behind detached rather than hanging the lab).

use crate::harness::affinity::{allowed_cpus, pin_current_thread, PinnedThread};
use crate::harness::crew::{Crew, FirstError};
use crate::harness::futex;
use crate::output::lab::Lab;
use crate::output::record::{Measured, Record};
use crate::output::summary::SummaryRow;
use crate::sysv::SysvSet;
use ksync::stat::LockStatSnapshot;
use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Semaphores per SysV array (sembench's `SEMS_PERID`).
pub const SEMS_PER_ARRAY: usize = 250;
/// Operations per posting call (sembench's hard-coded chunk).
pub const CHUNK: usize = 64;
/// The kernel's default SEMOPM since 3.19 and ksync's: the largest wake batch.
pub const MAX_WAKE: usize = 500;
/// The most worker threads the lab will create.
pub const MAX_THREADS: usize = 32_000;
/// Worker stacks: the loop needs almost none.
const WORKER_STACK: usize = 64 * 1024;
/// How long shutdown posts before it forces every worker out.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A wait/wake mechanism sembench can drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ipc,
    Ksync,
    Futex,
    Posix,
    FutexChain,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Ipc,
        Kind::Ksync,
        Kind::Futex,
        Kind::Posix,
        Kind::FutexChain,
    ];

    /// The name `-o` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ipc => "ipc",
            Kind::Ksync => "ksync",
            Kind::Futex => "futex",
            Kind::Posix => "posix",
            Kind::FutexChain => "futex-chain",
        }
    }

    /// The words of sembench's `using ... operations` line.
    fn described(self) -> &'static str {
        match self {
            Kind::Ipc => "ipc sem",
            Kind::Ksync => "ksync sem",
            Kind::Futex => "futex",
            Kind::Posix => "posix sem",
            Kind::FutexChain => "chained futex",
        }
    }

    pub fn parse(name: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                format!(
                    "unknown sembench backend '{name}'; known: {}",
                    Kind::ALL.map(Kind::name).join(", ")
                )
            })
    }
}

/// One sembench run's parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// Worker threads (`-t`).
    pub threads: usize,
    /// Most workers posted per main-loop iteration (`-w`).
    pub wake: usize,
    /// Measured run time (`-r`).
    pub run: Duration,
    /// Bind worker *i* to the *i*-th allowed CPU, round robin.
    pub bind_workers: bool,
    /// Pin the main thread to this CPU for the run.
    pub main_cpu: Option<usize>,
    /// Untimed pause after the semaphores are created.
    pub pause: Duration,
}

impl Config {
    /// The seed's run: `-t 250 -w 64`, workers bound, main free, no pause.
    pub fn seed(run: Duration) -> Config {
        Config {
            threads: 250,
            wake: 64,
            run,
            bind_workers: true,
            main_cpu: None,
            pause: Duration::ZERO,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(format!(
                "-t needs 1 to {MAX_THREADS} worker threads, not {}",
                self.threads
            ));
        }
        if self.wake == 0 || self.wake > MAX_WAKE {
            return Err(format!(
                "-w needs a wake batch of 1 to {MAX_WAKE} (SEMOPM), not {}",
                self.wake
            ));
        }
        if self.run.is_zero() || self.run > Duration::from_secs(3600) {
            return Err(format!(
                "-r needs a run time in (0, 3600] seconds, not {}",
                self.run.as_secs_f64()
            ));
        }
        if self.pause > Duration::from_secs(600) {
            return Err("--pause is at most 600 seconds".into());
        }
        if let Some(cpu) = self.main_cpu {
            if !allowed_cpus().contains(&cpu) {
                return Err(format!(
                    "--pin-main {cpu}: not one of the allowed CPUs {:?}",
                    allowed_cpus()
                ));
            }
        }
        Ok(())
    }

    fn arrays(&self) -> usize {
        self.threads.div_ceil(SEMS_PER_ARRAY)
    }
}

/// ksync's semaphore-set counters over the measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetCounters {
    pub attempts: u64,
    pub visited: u64,
    pub wakeups: u64,
    pub futex_wakes: u64,
}

/// What one backend's run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub kind: Kind,
    pub threads: usize,
    pub wake: usize,
    pub run: Duration,
    /// Measured time of the main loop.
    pub elapsed: Duration,
    /// Main-loop iterations, empty ones included.
    pub main_burns: u64,
    /// Each worker's burns.
    pub worker_burns: Vec<u64>,
    /// Posting calls the main thread made (semtimedop / semop calls for the
    /// SysV-style backends, one per worker for futex and posix).
    pub post_calls: u64,
    /// ksync only: the set counters over the run.
    pub counters: Option<SetCounters>,
    /// ksync only: the sets' lock statistics over the run (seed 000's
    /// instrumented array lock is the global one).
    pub lock_stats: Option<LockStatSnapshot>,
    /// Workers that could not be bound to their CPU.
    pub unbound: usize,
}

impl Outcome {
    pub fn total(&self) -> u64 {
        self.worker_burns.iter().sum()
    }
    pub fn min(&self) -> u64 {
        self.worker_burns.iter().copied().min().unwrap_or(0)
    }
    pub fn max(&self) -> u64 {
        self.worker_burns.iter().copied().max().unwrap_or(0)
    }
    pub fn avg(&self) -> f64 {
        self.total() as f64 / self.worker_burns.len().max(1) as f64
    }
    pub fn burns_per_sec(&self) -> f64 {
        self.total() as f64 / self.elapsed.as_secs_f64()
    }
    /// Workers posted per main-loop iteration (the seed's 2.9 before, 62.8 after).
    pub fn burns_per_main_burn(&self) -> f64 {
        self.total() as f64 / self.main_burns.max(1) as f64
    }

    /// sembench's output lines (0.2 format), plus ksync's counters.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            format!("{} threads, waking {} at a time", self.threads, self.wake),
            format!("using {} operations", self.kind.described()),
            format!("main thread burns: {}", self.main_burns),
            format!(
                "worker burn count total {} min {} max {} avg {}",
                self.total(),
                self.min(),
                self.max(),
                self.total() / self.worker_burns.len().max(1) as u64
            ),
            format!(
                "run time {} seconds {} worker burns per second",
                self.run.as_secs_f64(),
                self.burns_per_sec() as u64
            ),
        ];
        if let Some(c) = self.counters {
            let per = |n: u64| n as f64 / self.total().max(1) as f64;
            lines.push(format!(
                "ksync counters: attempts {} visited {} wakeups {} futex_wakes {}",
                c.attempts, c.visited, c.wakeups, c.futex_wakes
            ));
            lines.push(format!(
                "per worker burn: attempts {:.3} visited {:.3} wakeups {:.3} futex_wakes {:.3}",
                per(c.attempts),
                per(c.visited),
                per(c.wakeups),
                per(c.futex_wakes)
            ));
        }
        if let Some(stats) = &self.lock_stats {
            // Manfred's debug lines (seed 000), times in ns instead of cycles.
            lines.push(format!(
                "array lock: lifetime {:.0} seconds",
                stats.elapsed_ns as f64 / 1e9
            ));
            lines.push(stats.summary_line());
        }
        if self.unbound > 0 {
            lines.push(format!(
                "note: {} workers could not be bound to a CPU",
                self.unbound
            ));
        }
        lines
    }
}

/// Runs one backend with `config` and returns what it measured.
pub fn run_backend(kind: Kind, config: &Config) -> Result<Outcome, String> {
    config.validate()?;
    let arrays = config.arrays();
    let mut outcome = match kind {
        Kind::Ipc => {
            check_semopm(config.wake.min(CHUNK))?;
            drive(config, Ipc::new(arrays)?)
        }
        Kind::Ksync => drive(config, Ksync::new(arrays)?),
        Kind::Futex => drive(config, Futex),
        Kind::Posix => drive(config, Posix::new(config.threads)?),
        Kind::FutexChain => drive(config, FutexChain::new(config.threads)),
    }?;
    outcome.kind = kind;
    Ok(outcome)
}

// ---------------------------------------------------------------------------
// The driver, shared by every backend.

/// One worker's slot in the flat work list, as sembench's `lockinfo`.
struct Slot {
    array: u32,
    index: u32,
    /// 1 while the worker waits; the main thread clears it before posting.
    /// The futex backend sleeps on this word.
    data: AtomicU32,
    /// 1: "I am about to sleep, post me".
    ready: AtomicU32,
}

/// How a backend sleeps and posts.
trait Backend: Sync {
    /// Blocks worker `worker` (whose slot is `slots[worker]`) until the main
    /// thread posts it.
    fn wait(&self, worker: usize, slots: &[Slot]) -> Result<(), String>;
    /// Posts `workers` (at most [`CHUNK`], all of array `array`).
    fn post(&self, slots: &[Slot], array: usize, workers: &[u32]) -> Result<(), String>;
    /// Forced shutdown: make every present and future wait return.
    fn release_all(&self, slots: &[Slot]);
    /// Posting calls per chunk of `n` workers.
    fn calls_per_post(&self, n: usize) -> u64;
    /// Counters to difference over the run (ksync only).
    /// ksync only: zero the sets' lock statistics (the run's start).
    fn reset_lock_stats(&self) {}

    /// ksync only: the sets' lock statistics, summed over the arrays.
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        None
    }

    fn counters(&self) -> Option<SetCounters> {
        None
    }
}

struct Shared<B> {
    backend: B,
    slots: Vec<Slot>,
    all_done: AtomicBool,
    started: AtomicUsize,
    exited: AtomicUsize,
    unbound: AtomicUsize,
    failure: FirstError,
    cpus: Vec<usize>,
    bind: bool,
}

impl<B: Backend> Shared<B> {
    fn fail(&self, message: String) {
        self.failure.set(message);
    }

    fn worker(&self, i: usize) -> u64 {
        if self.bind {
            if let Some(&cpu) = self.cpus.get(i % self.cpus.len().max(1)) {
                if !pin_current_thread(cpu) {
                    self.unbound.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.started.fetch_add(1, Ordering::Release);
        let slot = &self.slots[i];
        let mut burns = 0u64;
        loop {
            slot.data.store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            slot.ready.store(1, Ordering::Release);
            if let Err(e) = self.backend.wait(i, &self.slots) {
                if !self.all_done.load(Ordering::Acquire) {
                    self.fail(format!("worker {i}: {e}"));
                }
                break;
            }
            if slot.data.load(Ordering::Acquire) != 0 {
                if !self.all_done.load(Ordering::Acquire) {
                    self.fail(format!("worker {i} woke but its data word was not cleared"));
                }
                break;
            }
            if self.all_done.load(Ordering::Acquire) {
                break;
            }
            burns += 1;
        }
        self.exited.fetch_add(1, Ordering::AcqRel);
        burns
    }

    /// One main-loop wake: take up to `wake` ready slots round robin from
    /// the one after `*last`, then post them per array in chunks. Returns the
    /// number of posting calls made.
    fn wake_pass(
        &self,
        wake: usize,
        last: &mut usize,
        per_array: &mut [Vec<u32>],
    ) -> Result<u64, String> {
        let n = self.slots.len();
        let mut taken = 0;
        let mut i = *last;
        for _ in 0..n {
            i += 1;
            if i == n {
                i = 0;
            }
            let slot = &self.slots[i];
            if slot.ready.load(Ordering::Acquire) == 0 {
                continue;
            }
            slot.ready.store(0, Ordering::Relaxed);
            slot.data.store(0, Ordering::Relaxed);
            per_array[slot.array as usize].push(i as u32);
            *last = i;
            taken += 1;
            if taken == wake {
                break;
            }
        }
        if taken == 0 {
            return Ok(0);
        }
        fence(Ordering::SeqCst);
        let mut calls = 0;
        let mut result = Ok(());
        for (array, list) in per_array.iter_mut().enumerate() {
            for chunk in list.chunks(CHUNK) {
                if result.is_ok() {
                    result = self.backend.post(&self.slots, array, chunk);
                    calls += self.backend.calls_per_post(chunk.len());
                }
            }
            list.clear();
        }
        result.map(|()| calls)
    }
}

fn drive<B: Backend + Send + 'static>(config: &Config, backend: B) -> Result<Outcome, String> {
    std::thread::sleep(config.pause);
    let shared = Arc::new(Shared {
        backend,
        slots: (0..config.threads)
            .map(|i| Slot {
                array: (i / SEMS_PER_ARRAY) as u32,
                index: (i % SEMS_PER_ARRAY) as u32,
                data: AtomicU32::new(0),
                ready: AtomicU32::new(0),
            })
            .collect(),
        all_done: AtomicBool::new(false),
        started: AtomicUsize::new(0),
        exited: AtomicUsize::new(0),
        unbound: AtomicUsize::new(0),
        failure: FirstError::default(),
        cpus: allowed_cpus(),
        bind: config.bind_workers,
    });
    let mut per_array = vec![Vec::with_capacity(config.wake); config.arrays()];
    let mut last = config.threads - 1;
    let mut main_burns = 0u64;
    let mut post_calls = 0u64;
    let mut workers = Crew::new();
    for i in 0..config.threads {
        let worker = Arc::clone(&shared);
        if let Err(e) = workers.spawn(format!("sembench-{i}"), WORKER_STACK, move || {
            worker.worker(i)
        }) {
            shared.fail(e);
            break;
        }
    }
    // sembench waits until one worker has started, then starts the clock.
    let started_by = Instant::now() + Duration::from_secs(10);
    while shared.started.load(Ordering::Acquire) == 0 && Instant::now() < started_by {
        std::thread::sleep(Duration::from_micros(200));
    }
    let pinned_main = config.main_cpu.and_then(PinnedThread::pin);
    let before = shared.backend.counters();
    shared.backend.reset_lock_stats();
    let start = Instant::now();
    while !shared.failure.is_set() {
        match shared.wake_pass(config.wake, &mut last, &mut per_array) {
            Ok(calls) => post_calls += calls,
            Err(e) => shared.fail(format!("main thread: {e}")),
        }
        main_burns += 1;
        if start.elapsed() >= config.run {
            break;
        }
    }
    let elapsed = start.elapsed();
    let lock_stats = shared.backend.lock_stats();
    let counters = match (before, shared.backend.counters()) {
        (Some(b), Some(a)) => Some(SetCounters {
            attempts: a.attempts - b.attempts,
            visited: a.visited - b.visited,
            wakeups: a.wakeups - b.wakeups,
            futex_wakes: a.futex_wakes - b.futex_wakes,
        }),
        _ => None,
    };
    drop(pinned_main);
    shutdown(
        &shared,
        config.wake,
        &mut last,
        &mut per_array,
        workers.len(),
    );
    let worker_burns = match workers.join_within(Duration::from_secs(1)) {
        Ok(burns) => burns,
        Err(e) => {
            shared.fail(e);
            Vec::new()
        }
    };
    if let Some(message) = shared.failure.take() {
        return Err(message);
    }
    Ok(Outcome {
        kind: Kind::Ipc,
        threads: config.threads,
        wake: config.wake,
        run: config.run,
        elapsed,
        main_burns,
        worker_burns,
        post_calls,
        counters,
        lock_stats,
        unbound: shared.unbound.load(Ordering::Relaxed),
    })
}

/// Sets `all_done` and keeps posting ready workers, 200 µs apart, until all
/// `spawned` workers have left; after [`SHUTDOWN_GRACE`] it also forces them
/// out (removes the sets, posts everyone) and fails the run, and after twice
/// that it gives up on them.
fn shutdown<B: Backend>(
    shared: &Shared<B>,
    wake: usize,
    last: &mut usize,
    per_array: &mut [Vec<u32>],
    spawned: usize,
) {
    shared.all_done.store(true, Ordering::SeqCst);
    let begun = Instant::now();
    let mut forced_at: Option<Instant> = None;
    while shared.exited.load(Ordering::Acquire) < spawned {
        // Errors here only mean a forced release already tore the backend down.
        let _ = shared.wake_pass(wake.max(CHUNK), last, per_array);
        if shared.exited.load(Ordering::Acquire) >= spawned {
            break;
        }
        if begun.elapsed() > SHUTDOWN_GRACE
            && forced_at.is_none_or(|t| t.elapsed() > Duration::from_millis(100))
        {
            if forced_at.is_none() {
                shared.fail(format!(
                    "shutdown: {} of {spawned} workers still running after {} s; forced them out",
                    spawned - shared.exited.load(Ordering::Acquire),
                    SHUTDOWN_GRACE.as_secs()
                ));
            }
            shared.backend.release_all(&shared.slots);
            forced_at = Some(Instant::now());
        }
        if begun.elapsed() > 2 * SHUTDOWN_GRACE {
            // Give up: the stuck workers are left behind (see `Crew`).
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

// ---------------------------------------------------------------------------
// Backends.

/// The kernel's SysV semaphores: one array of 250 per 250 workers.
struct Ipc {
    sets: Vec<SysvSet>,
}

impl Ipc {
    fn new(arrays: usize) -> Result<Ipc, String> {
        // On an error the sets made so far drop and are removed.
        let sets = (0..arrays)
            .map(|_| SysvSet::new(SEMS_PER_ARRAY))
            .collect::<Result<_, _>>()?;
        Ok(Ipc { sets })
    }
}

impl Backend for Ipc {
    fn wait(&self, worker: usize, slots: &[Slot]) -> Result<(), String> {
        let slot = &slots[worker];
        let mut op = [libc::sembuf {
            sem_num: slot.index as u16,
            sem_op: -1,
            sem_flg: 0,
        }];
        self.sets[slot.array as usize]
            .op(&mut op)
            .map_err(|e| format!("semtimedop: {e}"))
    }

    fn post(&self, slots: &[Slot], array: usize, workers: &[u32]) -> Result<(), String> {
        let mut ops = [libc::sembuf {
            sem_num: 0,
            sem_op: 1,
            sem_flg: libc::IPC_NOWAIT as libc::c_short,
        }; CHUNK];
        for (op, &w) in ops.iter_mut().zip(workers) {
            op.sem_num = slots[w as usize].index as u16;
        }
        self.sets[array]
            .op(&mut ops[..workers.len()])
            .map_err(|e| format!("posting semtimedop of {} sops: {e}", workers.len()))
    }

    fn release_all(&self, _slots: &[Slot]) {
        self.sets.iter().for_each(SysvSet::remove);
    }

    fn calls_per_post(&self, _n: usize) -> u64 {
        1
    }
}

/// The kernel's SEMOPM must admit one posting call.
fn check_semopm(needed: usize) -> Result<(), String> {
    let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/sem") else {
        return Ok(());
    };
    let semopm = text
        .split_whitespace()
        .nth(2)
        .and_then(|f| f.parse::<usize>().ok());
    match semopm {
        Some(max) if max < needed => Err(format!(
            "the kernel's SEMOPM is {max}, below the {needed} operations of one posting call: \
             raise it, e.g. echo \"512 32000 512 512\" > /proc/sys/kernel/sem"
        )),
        _ => Ok(()),
    }
}

/// ksync's SysV semaphore sets, laid out like the kernel arrays.
struct Ksync {
    sets: Vec<ksync::sem::SemSet>,
}

impl Ksync {
    fn new(arrays: usize) -> Result<Ksync, String> {
        let sets = (0..arrays)
            .map(|_| ksync::sem::SemSet::new(SEMS_PER_ARRAY))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("SemSet::new({SEMS_PER_ARRAY}): {e}"))?;
        Ok(Ksync { sets })
    }
}

impl Backend for Ksync {
    fn wait(&self, worker: usize, slots: &[Slot]) -> Result<(), String> {
        let slot = &slots[worker];
        self.sets[slot.array as usize]
            .semop(&[ksync::sem::SemBuf::new(slot.index as u16, -1, 0)])
            .map_err(|e| format!("semop: {e}"))
    }

    fn post(&self, slots: &[Slot], array: usize, workers: &[u32]) -> Result<(), String> {
        let mut ops = [ksync::sem::SemBuf::new(0, 1, ksync::sem::IPC_NOWAIT); CHUNK];
        for (op, &w) in ops.iter_mut().zip(workers) {
            op.num = slots[w as usize].index as u16;
        }
        self.sets[array]
            .semop(&ops[..workers.len()])
            .map_err(|e| format!("posting semop of {} sops: {e}", workers.len()))
    }

    fn release_all(&self, _slots: &[Slot]) {
        for set in &self.sets {
            let _ = set.remove();
        }
    }

    fn calls_per_post(&self, _n: usize) -> u64 {
        1
    }

    fn reset_lock_stats(&self) {
        self.sets
            .iter()
            .for_each(ksync::sem::SemSet::reset_lock_stats);
    }

    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        self.sets
            .iter()
            .map(ksync::sem::SemSet::lock_stats)
            .reduce(|sum, s| sum.merged(&s))
    }

    fn counters(&self) -> Option<SetCounters> {
        let mut sum = SetCounters::default();
        for set in &self.sets {
            let c = set.counters();
            sum.attempts += c.attempts;
            sum.visited += c.visited;
            sum.wakeups += c.wakeups;
            sum.futex_wakes += c.futex_wakes;
        }
        Some(sum)
    }
}

/// sembench 0.3's futex mode: sleep on the slot's `data` word.
struct Futex;

impl Backend for Futex {
    fn wait(&self, worker: usize, slots: &[Slot]) -> Result<(), String> {
        let slot = &slots[worker];
        while slot.data.load(Ordering::Acquire) == 1 {
            futex::wait(&slot.data, 1);
        }
        Ok(())
    }

    fn post(&self, slots: &[Slot], _array: usize, workers: &[u32]) -> Result<(), String> {
        for &w in workers {
            futex::wake(&slots[w as usize].data, 1);
        }
        Ok(())
    }

    fn release_all(&self, slots: &[Slot]) {
        for slot in slots {
            slot.data.store(0, Ordering::Release);
            futex::wake(&slot.data, i32::MAX);
        }
    }

    fn calls_per_post(&self, n: usize) -> u64 {
        n as u64
    }
}

/// An experiment, not in sembench: the futex mode with the wake-ups handed
/// down a chain. The main thread wakes only the first worker of a chunk; each
/// woken worker wakes the next one. The poster makes one system call per
/// chunk, as with ipc, and the others are spread over the woken workers.
struct FutexChain {
    /// Per worker: the next worker of its chunk to wake, [`CHAIN_END`], or
    /// [`CHAIN_UNSET`] while the main thread has not written it yet.
    next: Box<[AtomicU32]>,
}

const CHAIN_END: u32 = u32::MAX;
const CHAIN_UNSET: u32 = u32::MAX - 1;

impl FutexChain {
    fn new(n: usize) -> FutexChain {
        FutexChain {
            next: (0..n).map(|_| AtomicU32::new(CHAIN_UNSET)).collect(),
        }
    }
}

impl Backend for FutexChain {
    fn wait(&self, worker: usize, slots: &[Slot]) -> Result<(), String> {
        let slot = &slots[worker];
        while slot.data.load(Ordering::Acquire) == 1 {
            futex::wait(&slot.data, 1);
        }
        // `data` is cleared in the scan, `next` in the post just after: wait
        // for the link (the main thread is running, so this is short).
        let mut polls = 0u32;
        let next = loop {
            let next = self.next[worker].swap(CHAIN_UNSET, Ordering::AcqRel);
            if next != CHAIN_UNSET {
                break next;
            }
            polls += 1;
            if polls.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        };
        if next != CHAIN_END {
            // We only hold a link because the main thread cleared our data
            // word; the slots outlive every worker.
            futex::wake(&slots[next as usize].data, 1);
        }
        Ok(())
    }

    fn post(&self, slots: &[Slot], _array: usize, workers: &[u32]) -> Result<(), String> {
        // Link back to front, so that a worker woken early finds its link.
        let mut after = CHAIN_END;
        for &w in workers.iter().rev() {
            self.next[w as usize].store(after, Ordering::Release);
            after = w;
        }
        if let Some(&first) = workers.first() {
            futex::wake(&slots[first as usize].data, 1);
        }
        Ok(())
    }

    fn release_all(&self, slots: &[Slot]) {
        for (slot, next) in slots.iter().zip(self.next.iter()) {
            next.store(CHAIN_END, Ordering::Release);
            slot.data.store(0, Ordering::Release);
            futex::wake(&slot.data, i32::MAX);
        }
    }

    fn calls_per_post(&self, _n: usize) -> u64 {
        1
    }
}

/// One glibc POSIX semaphore per worker.
struct Posix {
    sems: Box<[UnsafeCell<libc::sem_t>]>,
}

// SAFETY: POSIX semaphores are made to be used from many threads at once;
// each stays at its boxed address until Drop, which runs after all users.
unsafe impl Sync for Posix {}

impl Posix {
    fn new(n: usize) -> Result<Posix, String> {
        // SAFETY: sem_t is plain data; zeroed is a valid place to sem_init.
        let sems: Box<[UnsafeCell<libc::sem_t>]> = (0..n)
            .map(|_| UnsafeCell::new(unsafe { std::mem::zeroed() }))
            .collect();
        for sem in sems.iter() {
            // SAFETY: `sem` is writable, stable storage for one semaphore.
            if unsafe { libc::sem_init(sem.get(), 0, 0) } != 0 {
                return Err(format!("sem_init: {}", std::io::Error::last_os_error()));
            }
        }
        Ok(Posix { sems })
    }
}

impl Drop for Posix {
    fn drop(&mut self) {
        for sem in self.sems.iter() {
            // SAFETY: initialised in `new`, and nobody waits any more.
            unsafe { libc::sem_destroy(sem.get()) };
        }
    }
}

impl Backend for Posix {
    fn wait(&self, worker: usize, _slots: &[Slot]) -> Result<(), String> {
        loop {
            // SAFETY: an initialised semaphore at a stable address.
            if unsafe { libc::sem_wait(self.sems[worker].get()) } == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(format!("sem_wait: {e}"));
            }
        }
    }

    fn post(&self, _slots: &[Slot], _array: usize, workers: &[u32]) -> Result<(), String> {
        for &w in workers {
            // SAFETY: as in `wait`.
            if unsafe { libc::sem_post(self.sems[w as usize].get()) } != 0 {
                return Err(format!("sem_post: {}", std::io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    fn release_all(&self, _slots: &[Slot]) {
        for sem in self.sems.iter() {
            // SAFETY: as in `wait`.
            unsafe { libc::sem_post(sem.get()) };
        }
    }

    fn calls_per_post(&self, n: usize) -> u64 {
        n as u64
    }
}

// ---------------------------------------------------------------------------
// The `sembench` command.

/// `ksync-lab sembench`: Chris Mason's post/wait benchmark (seed 000).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Worker threads, one semaphore each, 250 per array (sembench's default is 2048; the seed ran 250).
    #[arg(short = 't', long = "threads", default_value_t = 250)]
    pub threads: usize,
    /// Most workers posted per main-loop iteration, 1 to 500 (SEMOPM); posted in calls of at most 64.
    #[arg(short = 'w', long = "wake", default_value_t = 64)]
    pub wake: usize,
    /// Measured run time, seconds.
    #[arg(short = 'r', long = "run", default_value_t = 30.0)]
    pub run: f64,
    /// Comma-separated backends: ipc (kernel SysV, also `0`), ksync, futex (also `2`), posix,
    /// futex-chain (experiment: each woken worker wakes the next).
    #[arg(
        short = 'o',
        long = "ops",
        value_delimiter = ',',
        default_value = "ipc"
    )]
    pub backends: Vec<String>,
    /// Pin the main thread to this CPU during the run (workers are always bound round robin).
    #[arg(long, value_name = "CPU")]
    pub pin_main: Option<usize>,
    /// Leave the workers unbound (sembench binds them: unbound, the scheduler may keep
    /// everything on one core, seed 000's footnote).
    #[arg(long)]
    pub no_bind: bool,
    /// Untimed pause after creating the semaphores, seconds (sembench 0.2 sleeps 10; default 0 here).
    #[arg(long, default_value_t = 0.0)]
    pub pause: f64,
    /// ksync: polls of its status word a blocked semop makes before it sleeps
    /// (ksync::sem::set_sleeper_spin; default ksync's own).
    #[arg(long, value_name = "POLLS")]
    pub sleeper_spin: Option<u32>,
}

impl Args {
    fn kinds(&self) -> Result<Vec<Kind>, String> {
        let mut kinds = Vec::new();
        for name in &self.backends {
            let kind = match name.trim() {
                "0" => Kind::Ipc,
                "2" => Kind::Futex,
                other => Kind::parse(other)?,
            };
            if kinds.contains(&kind) {
                return Err(format!("sembench backend '{name}' named twice"));
            }
            kinds.push(kind);
        }
        if kinds.is_empty() {
            return Err("-o needs at least one backend".into());
        }
        Ok(kinds)
    }

    fn config(&self) -> Result<Config, String> {
        if !(self.run.is_finite() && self.run > 0.0 && self.run <= 3600.0) {
            return Err(format!(
                "-r needs a run time in (0, 3600] seconds, not {}",
                self.run
            ));
        }
        if !(self.pause.is_finite() && (0.0..=600.0).contains(&self.pause)) {
            return Err(format!(
                "--pause needs 0 to 600 seconds, not {}",
                self.pause
            ));
        }
        let config = Config {
            threads: self.threads,
            wake: self.wake,
            run: Duration::from_secs_f64(self.run),
            bind_workers: !self.no_bind,
            main_cpu: self.pin_main,
            pause: Duration::from_secs_f64(self.pause),
        };
        config.validate()?;
        Ok(config)
    }
}

impl Kind {
    /// The implementation's name in records and tables.
    fn lock(self) -> &'static str {
        match self {
            Kind::Ipc => "sysv",
            Kind::Ksync => "ksync-sem",
            Kind::Futex => "futex",
            Kind::Posix => "posix-sem",
            Kind::FutexChain => "futex-chain",
        }
    }
}

/// One run's record: `burns_per_s` (also as `ops_per_s`, the throughput
/// `--plot` draws), the main thread's burns, fairness, ksync's counters.
fn record(o: &Outcome, config: &Config, sleeper_spin: Option<u32>) -> Record {
    let per_burn = |n: u64| n as f64 / o.total().max(1) as f64;
    let mut r = Record::new(
        "sembench",
        &format!("sembench -w {}", config.wake),
        o.kind.lock(),
        o.kind == Kind::Ksync,
        config.threads,
    )
    .param("backend", o.kind.name())
    .param("wake", config.wake)
    .param("run_s", config.run.as_secs_f64())
    .param("bind_workers", config.bind_workers)
    .param(
        "main_cpu",
        config.main_cpu.map_or("none".into(), |c| c.to_string()),
    )
    .param("pause_s", config.pause.as_secs_f64())
    .metric("burns_per_s", o.burns_per_sec())
    .metric("ops_per_s", o.burns_per_sec())
    .metric("worker_burns", o.total() as f64)
    .metric("main_burns", o.main_burns as f64)
    .metric("burns_per_main_burn", o.burns_per_main_burn())
    .metric("min_burns", o.min() as f64)
    .metric("max_burns", o.max() as f64)
    .metric("avg_burns", o.avg())
    .metric("post_calls", o.post_calls as f64)
    .metric("elapsed_ms", o.elapsed.as_secs_f64() * 1e3)
    .metric("unbound_workers", o.unbound as f64);
    if o.kind == Kind::Ksync {
        r = r.param(
            "sleeper_spin",
            sleeper_spin.map_or("default".into(), |p| p.to_string()),
        );
    }
    if let Some(c) = o.counters {
        r = r
            .metric("attempts_per_burn", per_burn(c.attempts))
            .metric("visited_per_burn", per_burn(c.visited))
            .metric("wakeups_per_burn", per_burn(c.wakeups))
            .metric("futex_wakes_per_burn", per_burn(c.futex_wakes));
    }
    r
}

/// Measures `kind` `--repeat` times through `lab`; `lines` receives each
/// run's sembench output.
fn measure(
    lab: &mut Lab,
    kind: Kind,
    config: &Config,
    sleeper_spin: Option<u32>,
    lines: &mut Vec<String>,
) -> Result<Measured, String> {
    let mut error = None;
    let label = format!(
        "sembench -o {} -t {} -w {}",
        kind.name(),
        config.threads,
        config.wake
    );
    let measured = lab.measure(&label, || match run_backend(kind, config) {
        Ok(o) => {
            lines.push(String::new());
            lines.extend(o.lines());
            record(&o, config, sleeper_spin)
        }
        Err(e) => {
            error.get_or_insert(e);
            Record::new(
                "sembench",
                "failed",
                kind.lock(),
                kind == Kind::Ksync,
                config.threads,
            )
        }
    });
    match error {
        Some(e) => Err(format!("sembench -o {}: {e}", kind.name())),
        None => Ok(measured),
    }
}

/// The comparison table: medians (with `[min-max]` over `--repeat` runs),
/// ratios to ipc.
fn table(points: &[Measured]) -> crate::output::table::Table {
    let base = points
        .iter()
        .find(|m| m.record.lock == Kind::Ipc.lock())
        .map(|m| m.get("burns_per_s"));
    let mut table = crate::output::table::Table::new([
        "backend",
        "worker burns/s",
        "x ipc",
        "main burns",
        "burns / main burn",
        "min",
        "max",
        "avg",
        "futex wakes / burn",
    ]);
    for m in points {
        table.row(vec![
            m.record.params.get("backend").cloned().unwrap_or_default(),
            m.show("burns_per_s", 0),
            base.map_or("-".into(), |b| format!("{:.2}", m.get("burns_per_s") / b)),
            m.show("main_burns", 0),
            m.show("burns_per_main_burn", 1),
            m.show("min_burns", 0),
            m.show("max_burns", 0),
            m.show("avg_burns", 0),
            if m.get("futex_wakes_per_burn").is_finite() {
                m.show("futex_wakes_per_burn", 3)
            } else {
                "-".into()
            },
        ]);
    }
    table
}

/// `ksync-lab sembench`: each backend's sembench lines, then a comparison
/// table when there are several; one record per run.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let kinds = args.kinds()?;
    let config = args.config()?;
    if let Some(polls) = args.sleeper_spin {
        ksync::sem::set_sleeper_spin(polls);
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan(kinds.len() as u64, config.run);
    let mut points = Vec::with_capacity(kinds.len());
    for kind in kinds {
        let mut lines = Vec::new();
        let m = measure(lab, kind, &config, args.sleeper_spin, &mut lines)?;
        lines.push(String::new());
        lab.print(&lines.join("\n"));
        points.push(m);
    }
    if points.len() > 1 {
        lab.print(&format!(
            "\n## sembench -t {} -w {} -r {}: worker burns per second, ratios to ipc\n\n{}",
            config.threads,
            config.wake,
            args.run,
            table(&points).render()
        ));
    }
    Ok(())
}

/// `compare`'s sembench part: the seed's `-t 250 -w 64` for `quick.seconds`
/// each with ipc (the kernel), ksync and the raw futex; one summary row.
pub fn compare_extra(
    lab: &mut Lab,
    quick: &crate::compare::Quick,
) -> Result<Vec<SummaryRow>, String> {
    let config = Config::seed(quick.duration());
    let kinds = [Kind::Ipc, Kind::Ksync, Kind::Futex];
    lab.plan(kinds.len() as u64, config.run);
    let mut points = Vec::with_capacity(kinds.len());
    for kind in kinds {
        points.push(measure(lab, kind, &config, None, &mut Vec::new())?);
    }
    lab.print(&format!(
        "\n## sembench (seed 000): -t 250 -w 64, {} s per backend, worker burns per second\n\n{}",
        quick.seconds,
        table(&points).render()
    ));
    let refs: Vec<&Measured> = points.iter().collect();
    Ok(vec![SummaryRow::from_measured(
        "sembench -t 250 -w 64",
        "burns/s",
        "burns_per_s",
        1.0,
        true,
        &refs,
    )])
}
