//! Chris Mason's sembench, as Manfred Spraul ran it for his April 2010
//! ipc/sem.c series (`sembench -t 250 -w 64 -o 0 -r 30 -b`): the driver,
//! generic over the semaphore backend.
//!
//! `-t` worker threads each own one semaphore (worker *i* = semaphore
//! *i % 250* of array *i / 250*; arrays hold 250 semaphores). A worker
//! loops: `data = 1`, full fence, `ready = 1`, then sleeps on its semaphore
//! (`-1`); once posted it checks that the main thread cleared `data` and
//! counts one *burn* (a completed wait→wake cycle, no other work). The main
//! thread loops until `-r` seconds have passed: it scans the worker slots
//! round robin from the one after the last it took, takes up to `-w` slots
//! whose `ready` is set (clearing `ready` and `data`), posts them per array
//! in calls of at most 64 `+1 | IPC_NOWAIT` operations, and counts a *main
//! burn* on every iteration, empty ones included. Workers are bound round
//! robin to the allowed CPUs (the `-b` behaviour, which sembench 0.2 always
//! has); the main thread is left free unless `--pin-main` names a CPU.
//!
//! Differences from sembench 0.2: the untimed setup pause after creating the
//! arrays defaults to 0 s (the original sleeps 10 s); burns per second
//! divide by the measured run time, not whole seconds; shutdown is bounded
//! (if workers have not all left after a few seconds of posting, the arrays
//! are removed and the run fails; workers that still do not leave, say
//! after a lost wake-up in the primitive under test, are left behind
//! detached rather than hanging the lab); sembench 0.3's futex mode sleeps
//! on a futex word of the backend's rather than on `data` (the same system
//! calls: one `FUTEX_WAKE` per post, a `FUTEX_WAIT` when nothing is posted).
//!
//! With `--processes P` (backends whose sets are shared between processes:
//! the kernel's and ksync's shared sets) the workers run in `P` forked child
//! processes, worker ranges split evenly, and the main thread stays in the
//! parent: the same loops, on slots and flags in memory shared with the
//! children (`harness::shared_mem`). The parent forks before any thread of
//! the run exists; each child starts its workers, joins them once they are
//! released, and sends their burns and its CPU usage through a pipe
//! (`harness::children`), so the outcome has the shape of an in-process
//! run. Children are killed and reaped on every path, and the sets belong
//! to the parent alone: children end with `_exit` and never remove them.

use crate::harness::affinity::{allowed_cpus, pin_current_thread, PinnedThread};
use crate::harness::children::Children;
use crate::harness::crew::{Crew, FirstError};
use crate::harness::rusage::Usage;
use crate::harness::shared_mem::SharedArray;
use crate::peers::sem::{SemBackend, SemVisitor, SetCounters, WaitEvents};
use ksync::stat::LockStatSnapshot;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
/// The most worker processes: half of what one of ksync's shared sets
/// admits (`ksync::sem::shared::NPROC`), leaving room for the parent and
/// for tools such as `ipcs` that look at the sets meanwhile.
pub const MAX_PROCESSES: usize = ksync::sem::shared::NPROC / 2;
/// How long forked children may take to start their workers.
const LAUNCH_LIMIT: Duration = Duration::from_secs(10);

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
    /// Run the workers in this many forked child processes (process-shared
    /// backends only); `None`: threads of this process.
    pub processes: Option<usize>,
}

impl Config {
    /// Manfred Spraul's run (April 2010): `-t 250 -w 64`, workers bound,
    /// main thread free, no pause.
    pub fn spraul_2010(run: Duration) -> Config {
        Config {
            threads: 250,
            wake: 64,
            run,
            bind_workers: true,
            main_cpu: None,
            pause: Duration::ZERO,
            processes: None,
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
        if let Some(p) = self.processes {
            if p == 0 || p > MAX_PROCESSES || p > self.threads {
                return Err(format!(
                    "--processes needs 1 to {MAX_PROCESSES} worker processes, at most one per \
                     worker thread (-t {}), not {p}",
                    self.threads
                ));
            }
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

    /// SysV-style arrays of [`SEMS_PER_ARRAY`] semaphores the workers need.
    pub fn arrays(&self) -> usize {
        self.threads.div_ceil(SEMS_PER_ARRAY)
    }
}

/// What one backend's run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
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
    /// The backend's own count of sleeps, wake calls, lock waits and polls
    /// over the run, for a backend that keeps one.
    pub events: Option<WaitEvents>,
    /// The process's CPU time and context switches over the run.
    pub usage: Usage,
    /// The main thread's over the run. It does not sleep between posts (it
    /// looks for ready workers until the clock stops), so its CPU time short
    /// of the run's is time it waited for a CPU, or, with ksync's sets, for
    /// a lock inside a post whose holder was preempted (their locks sleep
    /// after a bounded spin); its voluntary switches tell the two apart.
    pub main_usage: Usage,
    /// ksync only: the sets' lock statistics over the run (the array lock
    /// Spraul instrumented is the global one).
    pub lock_stats: Option<LockStatSnapshot>,
    /// Workers that could not be bound to their CPU.
    pub unbound: usize,
    /// Workers that completed no wait during the run, as the main thread
    /// found them when the clock stopped.
    pub idle: Vec<Idle>,
    /// Workers that had started when the clock started (sembench starts it
    /// once one has), and how far into the run the last one started: `None`
    /// if that was before the clock started or never happened in the run.
    pub started_at_clock: usize,
    pub all_started_after: Option<Duration>,
    /// The worker processes, if the workers ran in forked children; their
    /// CPU time and switches (`usage`) then cover their whole lives.
    pub processes: Option<usize>,
}

impl Outcome {
    /// The main thread's CPU time over the run's: 1 if it had a CPU all the
    /// time; below, it waited for one (the workers bound to its CPU ran).
    pub fn main_cpu_share(&self) -> f64 {
        (self.main_usage.user + self.main_usage.system).as_secs_f64()
            / self.elapsed.as_secs_f64().max(1e-9)
    }

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
    /// `n` per worker burn.
    pub fn per_burn(&self, n: u64) -> f64 {
        n as f64 / self.total().max(1) as f64
    }
    /// Whether the run went into the regime where a few workers, posted
    /// while they still polled, cycle with the main thread without ever
    /// sleeping while the rest wait for a CPU: fewer than half the burns
    /// slept, and the least busy worker burned less than half the average
    /// (in runs where every burn slept it burns 0.8 to 1 times it). A run
    /// like that measures polling handshakes, not the sleep-and-wake cycles
    /// sembench is about, and its ratio against a backend whose workers
    /// always sleep (the kernel's) does not compare. It needs a backend that
    /// counts its sleeps; on 2 and 4 CPUs it comes and goes from run to run
    /// (BENCHMARKS.md).
    pub fn polled_unevenly(&self) -> bool {
        self.events.is_some_and(|e| {
            self.per_burn(e.sleeps) < 0.5 && (self.min() as f64) < self.avg() / 2.0
        })
    }
    /// Workers posted per main-loop iteration (Spraul's 2.9 before his
    /// series, 62.8 after).
    pub fn burns_per_main_burn(&self) -> f64 {
        self.total() as f64 / self.main_burns.max(1) as f64
    }
}

/// A worker that completed no wait during the run, as the main thread
/// found it when the clock stopped: whether it had said it was about to
/// sleep, and what its semaphore said (sleepers and value; `None` if the
/// backend cannot tell). A worker posted (not ready) that stayed at zero was
/// woken late or not at all, or never got a CPU; one ready and counted as a
/// sleeper on a semaphore whose value would let it run is a lost wake-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Idle {
    pub worker: usize,
    pub ready: bool,
    pub sleepers: Option<usize>,
    pub value: Option<i32>,
}

/// One worker's slot in the flat work list, as sembench's `lockinfo`.
struct Slot {
    array: u32,
    index: u32,
    /// 1 while the worker waits; the main thread clears it before posting,
    /// and the woken worker checks that it did.
    data: AtomicU32,
    /// 1: "I am about to sleep, post me".
    ready: AtomicU32,
    /// The worker's burns so far, for the main thread's look at who did
    /// none (`Idle`).
    burns: AtomicU64,
}

/// The run's state every worker and the main thread see, in whichever
/// process they run: in memory shared with forked children.
#[derive(Default)]
struct Flags {
    all_done: AtomicBool,
    started: AtomicUsize,
    exited: AtomicUsize,
    unbound: AtomicUsize,
    /// Workers started by child processes, all of them together.
    spawned: AtomicUsize,
    /// Child processes that have started all their workers (or given up).
    launched: AtomicUsize,
    /// Some process's `failure` holds an error: every loop stops.
    failed: AtomicBool,
}

struct Shared<B> {
    /// Each process's copy names the same sets when `B::PROCESS_SHARED`;
    /// only the parent's copy is ever dropped (which removes them).
    sets: Vec<B>,
    slots: SharedArray<Slot>,
    flags: SharedArray<Flags>,
    /// This process's first error (a child sends its own to the parent).
    failure: FirstError,
    cpus: Vec<usize>,
    bind: bool,
}

impl<B: SemBackend> Shared<B> {
    fn flags(&self) -> &Flags {
        &self.flags[0]
    }

    fn fail(&self, message: String) {
        self.failure.set(message);
        // Pairs with the acquire load in `failed`.
        self.flags().failed.store(true, Ordering::Release);
    }

    /// Whether any process of the run has failed.
    fn failed(&self) -> bool {
        self.flags().failed.load(Ordering::Acquire)
    }

    fn worker(&self, i: usize) -> u64 {
        if self.bind {
            if let Some(&cpu) = self.cpus.get(i % self.cpus.len().max(1)) {
                if !pin_current_thread(cpu) {
                    self.flags().unbound.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.flags().started.fetch_add(1, Ordering::Release);
        let slot = &self.slots[i];
        let wait = B::op(slot.index as u16, -1, false);
        let mut burns = 0u64;
        loop {
            slot.data.store(1, Ordering::Relaxed);
            // sembench's full fence: `data = 1` is visible before `ready`.
            fence(Ordering::SeqCst);
            // Pairs with the acquire load of `ready` in `wake_pass`.
            slot.ready.store(1, Ordering::Release);
            if let Err(e) = self.sets[slot.array as usize].semop(&[wait]) {
                if !self.flags().all_done.load(Ordering::Acquire) {
                    self.fail(format!("worker {i}: {e}"));
                }
                break;
            }
            // The post came after the main thread cleared `data` (its fence
            // in `wake_pass`, then the backend's own ordering).
            if slot.data.load(Ordering::Acquire) != 0 {
                if !self.flags().all_done.load(Ordering::Acquire) {
                    self.fail(format!("worker {i} woke but its data word was not cleared"));
                }
                break;
            }
            if self.flags().all_done.load(Ordering::Acquire) {
                break;
            }
            burns += 1;
            slot.burns.store(burns, Ordering::Relaxed);
        }
        self.flags().exited.fetch_add(1, Ordering::AcqRel);
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
            // Pairs with the release store of `ready` in `worker`.
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
        // sembench's full fence: the cleared words are visible before any post.
        fence(Ordering::SeqCst);
        let mut calls = 0;
        let mut result = Ok(());
        let mut ops = [B::op(0, 1, true); CHUNK];
        for (array, list) in per_array.iter_mut().enumerate() {
            for chunk in list.chunks(CHUNK) {
                if result.is_ok() {
                    for (op, &w) in ops.iter_mut().zip(chunk) {
                        *op = B::op(self.slots[w as usize].index as u16, 1, true);
                    }
                    result = self.sets[array].semop(&ops[..chunk.len()]);
                    calls += B::calls_per_post(chunk.len());
                }
            }
            list.clear();
        }
        result.map(|()| calls).map_err(|e| e.to_string())
    }

    /// The workers that have burned nothing, and what their semaphores say.
    fn idle_workers(&self) -> Vec<Idle> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].burns.load(Ordering::Relaxed) == 0)
            .map(|i| {
                let slot = &self.slots[i];
                let set = &self.sets[slot.array as usize];
                let num = slot.index as usize;
                Idle {
                    worker: i,
                    ready: slot.ready.load(Ordering::Acquire) != 0,
                    sleepers: set.waiters(num).ok(),
                    value: set.value(num).ok(),
                }
            })
            .collect()
    }

    /// The sets' counters summed, for a backend that keeps them.
    fn counters(&self) -> Option<SetCounters> {
        self.sets
            .iter()
            .map(B::counters)
            .reduce(|sum, c| Some(sum?.plus(c?)))
            .flatten()
    }

    /// The sets' wait events summed, for a backend that counts them.
    fn events(&self) -> Option<WaitEvents> {
        self.sets
            .iter()
            .map(B::wait_events)
            .reduce(|sum, e| Some(sum?.plus(e?)))
            .flatten()
    }
}

/// Runs sembench with `config` on backend `B`: one set of
/// [`SEMS_PER_ARRAY`] semaphores per array, removed when the run ends
/// (also on error).
pub fn run<B: SemBackend>(config: &Config) -> Result<Outcome, String> {
    config.validate()?;
    if config.processes.is_some() && !B::PROCESS_SHARED {
        return Err(
            "--processes needs a backend whose sets are shared between processes \
             (sysv, ksync-shared)"
                .into(),
        );
    }
    B::check_batch(config.wake.min(CHUNK))?;
    // On an error the sets made so far drop and are removed.
    let sets = (0..config.arrays())
        .map(|_| B::create(SEMS_PER_ARRAY))
        .collect::<Result<Vec<B>, String>>()?;
    std::thread::sleep(config.pause);
    let shared = Arc::new(Shared {
        sets,
        slots: SharedArray::new(config.threads, |i| Slot {
            array: (i / SEMS_PER_ARRAY) as u32,
            index: (i % SEMS_PER_ARRAY) as u32,
            data: AtomicU32::new(0),
            ready: AtomicU32::new(0),
            burns: AtomicU64::new(0),
        })?,
        flags: SharedArray::new(1, |_| Flags::default())?,
        failure: FirstError::default(),
        cpus: allowed_cpus(),
        bind: config.bind_workers,
    });
    let mut per_array = vec![Vec::with_capacity(config.wake); config.arrays()];
    let mut last = config.threads - 1;
    let mut main_burns = 0u64;
    let mut post_calls = 0u64;
    let workers = match config.processes {
        None => Workers::threads(&shared, config.threads),
        Some(p) => Workers::processes(&shared, config.threads, p),
    };
    // sembench waits until one worker has started, then starts the clock.
    let started_by = Instant::now() + Duration::from_secs(10);
    while shared.flags().started.load(Ordering::Acquire) == 0
        && !shared.failed()
        && Instant::now() < started_by
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    let pinned_main = config.main_cpu.and_then(PinnedThread::pin);
    let before = shared.counters();
    let events_before = shared.events();
    shared.sets.iter().for_each(B::reset_lock_stats);
    let usage_before = Usage::now();
    let main_before = Usage::thread_now();
    let start = Instant::now();
    // Workers still starting run on the clock: a run in which the first few
    // cycle fast while the rest have not run yet is not the steady state
    // sembench measures, and its output says so.
    let started_at_clock = shared.flags().started.load(Ordering::Acquire);
    let mut all_started_after = None;
    while !shared.failed() {
        match shared.wake_pass(config.wake, &mut last, &mut per_array) {
            Ok(calls) => post_calls += calls,
            Err(e) => shared.fail(format!("main thread: {e}")),
        }
        main_burns += 1;
        if started_at_clock < config.threads
            && all_started_after.is_none()
            && shared.flags().started.load(Ordering::Relaxed) == config.threads
        {
            all_started_after = Some(start.elapsed());
        }
        if start.elapsed() >= config.run {
            break;
        }
    }
    let elapsed = start.elapsed();
    let main_usage = Usage::thread_now().since(main_before);
    let usage = Usage::now().since(usage_before);
    let idle = shared.idle_workers();
    let lock_stats = shared
        .sets
        .iter()
        .filter_map(B::lock_stats)
        .reduce(|sum, s| sum.merged(&s));
    // A backend counts in each process apart: with workers in child
    // processes, this one's counts would pass for the whole run's.
    let in_one_process = config.processes.is_none();
    let counters = (shared.counters().zip(before))
        .filter(|_| in_one_process)
        .map(|(a, b)| a.since(b));
    let events = (shared.events().zip(events_before))
        .filter(|_| in_one_process)
        .map(|(a, b)| a.since(b));
    drop(pinned_main);
    let spawned = workers.spawned(&shared);
    shutdown(&shared, config.wake, &mut last, &mut per_array, spawned);
    let (worker_burns, children_usage) = workers.finish(&shared);
    if let Some(message) = shared.failure.take() {
        return Err(message);
    }
    Ok(Outcome {
        threads: config.threads,
        wake: config.wake,
        run: config.run,
        elapsed,
        main_burns,
        worker_burns,
        post_calls,
        counters,
        events,
        usage: usage.plus(children_usage),
        main_usage,
        lock_stats,
        unbound: shared.flags().unbound.load(Ordering::Relaxed),
        idle,
        started_at_clock,
        all_started_after,
        processes: config.processes,
    })
}

/// Where the workers run: threads of this process, or threads of forked
/// child processes, worker `i` in the child whose range holds `i`.
enum Workers {
    Threads(Crew<u64>),
    Processes {
        children: Children,
        ranges: Vec<Range<usize>>,
    },
}

/// What a child process sends back: its workers' burns, in worker order,
/// its first error, and its CPU usage over its life.
#[derive(Debug, Serialize, Deserialize)]
struct ChildReport {
    burns: Vec<u64>,
    error: Option<String>,
    user_us: u64,
    system_us: u64,
    voluntary_switches: u64,
    involuntary_switches: u64,
}

impl Workers {
    /// `threads` worker threads here; a failure to start one fails the run.
    fn threads<B: SemBackend>(shared: &Arc<Shared<B>>, threads: usize) -> Workers {
        Workers::Threads(spawn_workers(shared, 0..threads))
    }

    /// `threads` workers over `processes` forked children; returns once
    /// every child has started its workers (or the run has failed).
    fn processes<B: SemBackend>(
        shared: &Arc<Shared<B>>,
        threads: usize,
        processes: usize,
    ) -> Workers {
        let ranges: Vec<Range<usize>> = (0..processes)
            .map(|c| c * threads / processes..(c + 1) * threads / processes)
            .collect();
        let mut children = Children::new();
        for range in &ranges {
            let range = range.clone();
            // SAFETY: no thread of this run exists yet, and the child takes
            // no lock of the lab's other threads (the progress bar's ticker
            // at most): it starts threads, makes the backend's semop calls,
            // and writes its report into a pipe (`child_main`).
            let forked = unsafe { children.fork(|| child_main(shared, range)) };
            if let Err(e) = forked {
                shared.fail(e);
                break;
            }
        }
        let deadline = Instant::now() + LAUNCH_LIMIT;
        while shared.flags().launched.load(Ordering::Acquire) < children.len() {
            if let Err(e) = children.check_alive() {
                shared.fail(format!("{e} before its workers started"));
                break;
            }
            if Instant::now() > deadline {
                shared.fail(format!(
                    "worker processes had not started their workers after {} s",
                    LAUNCH_LIMIT.as_secs()
                ));
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Workers::Processes { children, ranges }
    }

    /// Workers started, in every process.
    fn spawned<B: SemBackend>(&self, shared: &Shared<B>) -> usize {
        match self {
            Workers::Threads(crew) => crew.len(),
            Workers::Processes { .. } => shared.flags().spawned.load(Ordering::Acquire),
        }
    }

    /// Every worker's burns, in worker order, and the children's CPU usage;
    /// a failure goes to `shared` (and the burns may then be short).
    fn finish<B: SemBackend>(self, shared: &Shared<B>) -> (Vec<u64>, Usage) {
        match self {
            Workers::Threads(crew) => match crew.join_within(Duration::from_secs(1)) {
                Ok(burns) => (burns, Usage::default()),
                Err(e) => {
                    shared.fail(e);
                    (Vec::new(), Usage::default())
                }
            },
            Workers::Processes { children, ranges } => {
                let reports = match children.collect(SHUTDOWN_GRACE) {
                    Ok(reports) => reports,
                    Err(e) => {
                        shared.fail(e);
                        return (Vec::new(), Usage::default());
                    }
                };
                let mut burns = Vec::with_capacity(ranges.iter().map(|r| r.len()).sum());
                let mut usage = Usage::default();
                for (bytes, range) in reports.iter().zip(&ranges) {
                    let report: ChildReport = match serde_json::from_slice(bytes) {
                        Ok(r) => r,
                        Err(e) => {
                            shared.fail(format!("workers {range:?}: unreadable report: {e}"));
                            continue;
                        }
                    };
                    if let Some(e) = report.error {
                        shared.fail(e);
                    } else if report.burns.len() != range.len() {
                        shared.fail(format!(
                            "workers {range:?}: {} burn counts for {} workers",
                            report.burns.len(),
                            range.len()
                        ));
                    }
                    burns.extend(report.burns);
                    usage = usage.plus(Usage {
                        user: Duration::from_micros(report.user_us),
                        system: Duration::from_micros(report.system_us),
                        voluntary_switches: report.voluntary_switches,
                        involuntary_switches: report.involuntary_switches,
                    });
                }
                (burns, usage)
            }
        }
    }
}

/// Starts workers `range` as threads of this process; a failure to start
/// one fails the run, and the crew holds those started.
fn spawn_workers<B: SemBackend>(shared: &Arc<Shared<B>>, range: Range<usize>) -> Crew<u64> {
    let mut crew = Crew::new();
    for i in range {
        let worker = Arc::clone(shared);
        if let Err(e) = crew.spawn(format!("sembench-{i}"), WORKER_STACK, move || {
            worker.worker(i)
        }) {
            shared.fail(e);
            break;
        }
    }
    crew
}

/// A worker process: starts workers `range`, says so, waits until they
/// have all left (the parent releases them, or kills this process), and
/// returns its report for the parent.
fn child_main<B: SemBackend>(shared: &Arc<Shared<B>>, range: Range<usize>) -> Vec<u8> {
    let crew = spawn_workers(shared, range.clone());
    let flags = shared.flags();
    flags.spawned.fetch_add(crew.len(), Ordering::AcqRel);
    // Release: the parent that sees every child launched sees every spawn.
    flags.launched.fetch_add(1, Ordering::Release);
    let joined = crew.join();
    let usage = Usage::now();
    let (burns, joined_error) = match joined {
        Ok(burns) => (burns, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let report = ChildReport {
        burns,
        error: shared.failure.take().or(joined_error).map(|e| {
            format!(
                "worker process {} (workers {range:?}): {e}",
                std::process::id()
            )
        }),
        user_us: usage.user.as_micros() as u64,
        system_us: usage.system.as_micros() as u64,
        voluntary_switches: usage.voluntary_switches,
        involuntary_switches: usage.involuntary_switches,
    };
    // A report of numbers and strings always serialises.
    serde_json::to_vec(&report).unwrap_or_default()
}

/// Sets `all_done` and keeps posting ready workers, 200 µs apart, until all
/// `spawned` workers have left; after [`SHUTDOWN_GRACE`] it also forces them
/// out (removes the sets, posts everyone) and fails the run, and after twice
/// that it gives up on them.
fn shutdown<B: SemBackend>(
    shared: &Shared<B>,
    wake: usize,
    last: &mut usize,
    per_array: &mut [Vec<u32>],
    spawned: usize,
) {
    let flags = shared.flags();
    flags.all_done.store(true, Ordering::SeqCst);
    let begun = Instant::now();
    let mut forced_at: Option<Instant> = None;
    while flags.exited.load(Ordering::Acquire) < spawned {
        // Errors here only mean a forced release already tore the backend down.
        let _ = shared.wake_pass(wake.max(CHUNK), last, per_array);
        if flags.exited.load(Ordering::Acquire) >= spawned {
            break;
        }
        if begun.elapsed() > SHUTDOWN_GRACE
            && forced_at.is_none_or(|t| t.elapsed() > Duration::from_millis(100))
        {
            if forced_at.is_none() {
                shared.fail(format!(
                    "shutdown: {} of {spawned} workers still running after {} s; forced them out",
                    spawned - flags.exited.load(Ordering::Acquire),
                    SHUTDOWN_GRACE.as_secs()
                ));
            }
            shared.sets.iter().for_each(B::remove);
            forced_at = Some(Instant::now());
        }
        if begun.elapsed() > 2 * SHUTDOWN_GRACE {
            // Give up: the stuck workers are left behind (see `Crew`).
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// [`run`] as a visitor, for a registry entry's backend.
pub struct Sembench<'a>(pub &'a Config);

impl SemVisitor for Sembench<'_> {
    type Out = Result<Outcome, String>;
    fn visit<B: SemBackend>(self) -> Result<Outcome, String> {
        run::<B>(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::sem::{FutexBatch, FutexChain, FutexSems, PosixSems, SysvSet};

    fn small() -> Config {
        Config {
            threads: 6,
            wake: 4,
            run: Duration::from_millis(50),
            bind_workers: false,
            main_cpu: None,
            pause: Duration::ZERO,
            processes: None,
        }
    }

    #[test]
    fn every_worker_is_posted_and_every_worker_leaves() {
        for outcome in [
            run::<FutexSems>(&small()),
            run::<FutexChain>(&small()),
            run::<FutexBatch>(&small()),
            run::<PosixSems>(&small()),
            run::<ksync::sem::SemSet>(&small()),
            run::<crate::peers::sem::KsyncShared>(&small()),
        ] {
            let o = outcome.unwrap();
            assert_eq!(o.worker_burns.len(), 6);
            assert!(o.total() > 0 && o.main_burns > 0, "{o:?}");
            assert!(o.post_calls > 0, "{o:?}");
            // The main thread's own time: it ran, and no more than one CPU's
            // worth (the whole process's would be more, with six workers).
            let share = o.main_cpu_share();
            assert!(
                share > 0.0 && share <= 1.05,
                "main thread's CPU share {share}: {o:?}"
            );
        }
    }

    #[test]
    fn a_run_is_flagged_when_few_burns_slept_and_workers_burned_unevenly() {
        let outcome = |burns: Vec<u64>, sleeps: Option<u64>| Outcome {
            threads: burns.len(),
            wake: 64,
            run: Duration::from_secs(1),
            elapsed: Duration::from_secs(1),
            main_burns: 1,
            worker_burns: burns,
            post_calls: 1,
            counters: None,
            events: sleeps.map(|sleeps| WaitEvents {
                sleeps,
                ..WaitEvents::default()
            }),
            usage: Usage::default(),
            main_usage: Usage::default(),
            lock_stats: None,
            unbound: 0,
            processes: None,
            idle: Vec::new(),
            started_at_clock: 0,
            all_started_after: None,
        };
        // 400 burns, 40 slept, the least busy worker at 10 of 100 average.
        let uneven = vec![10, 90, 100, 200];
        assert!(outcome(uneven.clone(), Some(40)).polled_unevenly());
        // Most burns slept: the cycles were sleep-and-wake, however uneven.
        assert!(!outcome(uneven.clone(), Some(300)).polled_unevenly());
        // Even: a handshake per burn with a CPU each (sembench -t 8 on 16).
        assert!(!outcome(vec![100; 4], Some(0)).polled_unevenly());
        // A backend that does not count its sleeps cannot tell.
        assert!(!outcome(uneven, None).polled_unevenly());
    }

    #[test]
    fn idle_workers_are_those_without_a_burn_with_their_semaphores_state() {
        let shared = Shared {
            sets: vec![ksync::sem::SemSet::create(3).unwrap()],
            slots: SharedArray::new(3, |i| Slot {
                array: 0,
                index: i as u32,
                data: AtomicU32::new(0),
                ready: AtomicU32::new(0),
                burns: AtomicU64::new(0),
            })
            .unwrap(),
            flags: SharedArray::new(1, |_| Flags::default()).unwrap(),
            failure: FirstError::default(),
            cpus: Vec::new(),
            bind: false,
        };
        shared.slots[0].burns.store(5, Ordering::Relaxed);
        shared.slots[2].ready.store(1, Ordering::Relaxed);
        shared.sets[0].set_value(2, 1).unwrap();
        let idle = shared.idle_workers();
        let expect = |worker, ready, value| Idle {
            worker,
            ready,
            sleepers: Some(0),
            value: Some(value),
        };
        assert_eq!(idle, [expect(1, false, 0), expect(2, true, 1)]);
    }

    #[test]
    fn workers_in_child_processes_report_their_burns() {
        // The kernel's sets only: the test harness runs other tests'
        // threads beside this one, and a child forked while one of them
        // holds a lock of ksync's shared sets would inherit it held (the
        // CLI tests run ksync-shared this way, from a one-thread process).
        let o = run::<SysvSet>(&Config {
            processes: Some(2),
            ..small()
        })
        .unwrap();
        assert_eq!(o.worker_burns.len(), 6);
        assert_eq!(o.processes, Some(2));
        assert!(o.total() > 0 && o.main_burns > 0, "{o:?}");
        let refused = run::<FutexSems>(&Config {
            processes: Some(2),
            ..small()
        });
        assert!(refused.unwrap_err().contains("--processes needs"));
        for processes in [0, 7, MAX_PROCESSES + 1] {
            let config = Config {
                processes: Some(processes),
                ..small()
            };
            assert!(config.validate().is_err(), "{processes}");
        }
    }

    #[test]
    fn bad_configurations_are_refused_before_any_thread_starts() {
        for config in [
            Config {
                threads: 0,
                ..small()
            },
            Config {
                wake: MAX_WAKE + 1,
                ..small()
            },
            Config {
                run: Duration::ZERO,
                ..small()
            },
        ] {
            assert!(run::<FutexSems>(&config).is_err());
        }
    }
}
