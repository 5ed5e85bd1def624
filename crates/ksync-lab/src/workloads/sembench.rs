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

use crate::harness::affinity::{allowed_cpus, pin_current_thread, PinnedThread};
use crate::harness::crew::{Crew, FirstError};
use crate::harness::rusage::Usage;
use crate::peers::sem::{SemBackend, SemVisitor, SetCounters, WaitEvents};
use ksync::stat::LockStatSnapshot;
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
    /// ksync only: the sets' lock statistics over the run (the array lock
    /// Spraul instrumented is the global one).
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
    /// `n` per worker burn.
    pub fn per_burn(&self, n: u64) -> f64 {
        n as f64 / self.total().max(1) as f64
    }
    /// Workers posted per main-loop iteration (Spraul's 2.9 before his
    /// series, 62.8 after).
    pub fn burns_per_main_burn(&self) -> f64 {
        self.total() as f64 / self.main_burns.max(1) as f64
    }
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
}

struct Shared<B> {
    sets: Vec<B>,
    slots: Vec<Slot>,
    all_done: AtomicBool,
    started: AtomicUsize,
    exited: AtomicUsize,
    unbound: AtomicUsize,
    failure: FirstError,
    cpus: Vec<usize>,
    bind: bool,
}

impl<B: SemBackend> Shared<B> {
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
        let wait = B::op(slot.index as u16, -1, false);
        let mut burns = 0u64;
        loop {
            slot.data.store(1, Ordering::Relaxed);
            // sembench's full fence: `data = 1` is visible before `ready`.
            fence(Ordering::SeqCst);
            // Pairs with the acquire load of `ready` in `wake_pass`.
            slot.ready.store(1, Ordering::Release);
            if let Err(e) = self.sets[slot.array as usize].semop(&[wait]) {
                if !self.all_done.load(Ordering::Acquire) {
                    self.fail(format!("worker {i}: {e}"));
                }
                break;
            }
            // The post came after the main thread cleared `data` (its fence
            // in `wake_pass`, then the backend's own ordering).
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
    B::check_batch(config.wake.min(CHUNK))?;
    // On an error the sets made so far drop and are removed.
    let sets = (0..config.arrays())
        .map(|_| B::create(SEMS_PER_ARRAY))
        .collect::<Result<Vec<B>, String>>()?;
    std::thread::sleep(config.pause);
    let shared = Arc::new(Shared {
        sets,
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
    let before = shared.counters();
    let events_before = shared.events();
    shared.sets.iter().for_each(B::reset_lock_stats);
    let usage_before = Usage::now();
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
    let usage = Usage::now().since(usage_before);
    let lock_stats = shared
        .sets
        .iter()
        .filter_map(B::lock_stats)
        .reduce(|sum, s| sum.merged(&s));
    let counters = shared.counters().zip(before).map(|(a, b)| a.since(b));
    let events = shared.events().zip(events_before).map(|(a, b)| a.since(b));
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
        threads: config.threads,
        wake: config.wake,
        run: config.run,
        elapsed,
        main_burns,
        worker_burns,
        post_calls,
        counters,
        events,
        usage,
        lock_stats,
        unbound: shared.unbound.load(Ordering::Relaxed),
    })
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
    use crate::peers::sem::{FutexBatch, FutexChain, FutexSems, PosixSems};

    fn small() -> Config {
        Config {
            threads: 6,
            wake: 4,
            run: Duration::from_millis(50),
            bind_workers: false,
            main_cpu: None,
            pause: Duration::ZERO,
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
