//! Wake-up experiments on SysV-style semaphore sets: seed 003's deep wait
//! list and the bulk wake-up of issue 3, ksync's `SemSet` beside the
//! kernel's SysV semaphores.
//!
//! **deep** (Kenneth Chen, seed 003): one semaphore with a deep wait list.
//! `heads` sleepers queue first, each wanting `-1000`, which never succeeds
//! because the value never exceeds 1; behind them `later` sleepers each want
//! `-1` and queue again as soon as they complete. A poster repeatedly posts
//! (`semop +1`, or `SETVAL 1` as Chen's profile suggests the database did)
//! whenever the value is 0; each post completes one later sleeper while the
//! heads stay blocked. A *cycle* is one post and the `-1` it completes. The
//! 2.4 kernel woke the later sleeper to retry and rescanned from the head
//! each time; the 2.6 kernel (and ksync) completes it in the waker's scan.
//! Reported per cycle: ksync's operation attempts, wait-list entries visited,
//! wake-ups and futex wakes (`SemSet::counters`), and for both backends the
//! wall time per cycle.
//!
//! **bulk**: `N` sleepers, each blocked on its own semaphore of one set,
//! queued one by one so that arrival order is the reverse of semaphore
//! order (the first to arrive waits on semaphore `N - 1`). One `SETALL` (or
//! the fewest `semop` calls: `+1` on every semaphore, at most 500 per call,
//! ascending) wakes them all. Reported: the waker's call time, the time until
//! the last sleeper has returned, both per sleeper, and ksync's entries
//! visited per sleeper. Linear scaling shows as flat per-sleeper figures.

use crate::harness::affinity::PinnedThread;
use crate::harness::crew::{Crew, FirstError};
use crate::harness::futex;
use crate::output::lab::Lab;
use crate::output::record::{Measured, Record};
use crate::output::table::Table;
use crate::sembench::SetCounters;
use crate::sysv::SysvSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the deep-list heads want: more than the value ever reaches.
const HEAD_WANTS: i16 = 1000;
/// Sleeper stacks: the loop needs almost none.
const SLEEPER_STACK: usize = 64 * 1024;
/// How long a sleeper may take to appear on the wait list.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most operations one semop may carry (SEMOPM).
const SEMOPM: usize = 500;
/// Limits that keep the thread count sane.
const MAX_SLEEPERS: usize = 16_384;

/// Why a semaphore operation failed.
#[derive(Debug)]
enum OpError {
    /// The set was removed: the normal end of a sleeper.
    Removed,
    Other(String),
}

/// The semaphore-set operations the experiments use, for both backends.
trait Sem: Sync + Sized {
    fn create(nsems: usize) -> Result<Self, String>;
    /// One blocking semop of `(num, op)` pairs, no flags.
    fn op(&self, sops: &[(u16, i16)]) -> Result<(), OpError>;
    fn ncnt(&self, num: usize) -> Result<usize, String>;
    fn value(&self, num: usize) -> Result<i32, String>;
    fn set_value(&self, num: usize, value: i32) -> Result<(), String>;
    fn set_all(&self, values: &[u16]) -> Result<(), String>;
    fn remove(&self);
    fn counters(&self) -> Option<SetCounters> {
        None
    }
}

/// The kernel's SysV semaphores.
struct Ipc(SysvSet);

impl Sem for Ipc {
    fn create(nsems: usize) -> Result<Self, String> {
        SysvSet::new(nsems).map(Ipc)
    }

    fn op(&self, sops: &[(u16, i16)]) -> Result<(), OpError> {
        let mut bufs: Vec<libc::sembuf> = sops
            .iter()
            .map(|&(num, op)| libc::sembuf {
                sem_num: num,
                sem_op: op,
                sem_flg: 0,
            })
            .collect();
        self.0.op(&mut bufs).map_err(|e| match e.raw_os_error() {
            Some(libc::EIDRM) | Some(libc::EINVAL) => OpError::Removed,
            _ => OpError::Other(format!("semtimedop: {e}")),
        })
    }

    fn ncnt(&self, num: usize) -> Result<usize, String> {
        // SAFETY: GETNCNT takes no argument.
        unsafe { self.0.ctl(num, libc::GETNCNT, 0) }.map(|n| n as usize)
    }

    fn value(&self, num: usize) -> Result<i32, String> {
        // SAFETY: GETVAL takes no argument.
        unsafe { self.0.ctl(num, libc::GETVAL, 0) }
    }

    fn set_value(&self, num: usize, value: i32) -> Result<(), String> {
        // SAFETY: SETVAL takes an int.
        unsafe { self.0.ctl(num, libc::SETVAL, value as libc::c_ulong) }.map(drop)
    }

    fn set_all(&self, values: &[u16]) -> Result<(), String> {
        // SAFETY: `values` holds one u16 per semaphore (the caller made the
        // set that size) and outlives the call.
        unsafe {
            self.0
                .ctl(0, libc::SETALL, values.as_ptr() as libc::c_ulong)
        }
        .map(drop)
    }

    fn remove(&self) {
        self.0.remove();
    }
}

/// ksync's semaphore sets.
struct Ksync {
    set: ksync::sem::SemSet,
}

impl Sem for Ksync {
    fn create(nsems: usize) -> Result<Self, String> {
        ksync::sem::SemSet::new(nsems)
            .map(|set| Ksync { set })
            .map_err(|e| format!("SemSet::new({nsems}): {e}"))
    }

    fn op(&self, sops: &[(u16, i16)]) -> Result<(), OpError> {
        let bufs: Vec<ksync::sem::SemBuf> = sops
            .iter()
            .map(|&(num, op)| ksync::sem::SemBuf::new(num, op, 0))
            .collect();
        self.set.semop(&bufs).map_err(|e| match e {
            ksync::sem::SemError::Removed => OpError::Removed,
            e => OpError::Other(format!("semop: {e}")),
        })
    }

    fn ncnt(&self, num: usize) -> Result<usize, String> {
        self.set.ncnt(num).map_err(|e| format!("ncnt: {e}"))
    }

    fn value(&self, num: usize) -> Result<i32, String> {
        self.set
            .get_value(num)
            .map_err(|e| format!("get_value: {e}"))
    }

    fn set_value(&self, num: usize, value: i32) -> Result<(), String> {
        self.set
            .set_value(num, value)
            .map_err(|e| format!("set_value: {e}"))
    }

    fn set_all(&self, values: &[u16]) -> Result<(), String> {
        self.set
            .set_all(values)
            .map_err(|e| format!("set_all: {e}"))
    }

    fn remove(&self) {
        let _ = self.set.remove();
    }

    fn counters(&self) -> Option<SetCounters> {
        let c = self.set.counters();
        Some(SetCounters {
            attempts: c.attempts,
            visited: c.visited,
            wakeups: c.wakeups,
            futex_wakes: c.futex_wakes,
        })
    }
}

fn delta(before: Option<SetCounters>, after: Option<SetCounters>) -> Option<SetCounters> {
    let (b, a) = (before?, after?);
    Some(SetCounters {
        attempts: a.attempts - b.attempts,
        visited: a.visited - b.visited,
        wakeups: a.wakeups - b.wakeups,
        futex_wakes: a.futex_wakes - b.futex_wakes,
    })
}

/// Polls until `num`'s wait list holds `count` sleepers.
fn await_ncnt<S: Sem>(set: &S, num: usize, count: usize) -> Result<(), String> {
    let deadline = Instant::now() + QUEUE_TIMEOUT;
    loop {
        let n = set.ncnt(num)?;
        if n >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {n} of {count} sleepers queued on semaphore {num} after {} s",
                QUEUE_TIMEOUT.as_secs()
            ));
        }
        std::thread::yield_now();
    }
}

// ---------------------------------------------------------------------------
// deep: seed 003's deep wait list.

/// How the deep experiment's poster posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    Semop,
    SetVal,
}

impl Post {
    fn name(self) -> &'static str {
        match self {
            Post::Semop => "semop",
            Post::SetVal => "setval",
        }
    }
}

/// One deep-list point.
#[derive(Debug, Clone)]
pub struct DeepOutcome {
    pub post: Post,
    pub heads: usize,
    pub later: usize,
    pub cycles: u64,
    pub elapsed: Duration,
    pub counters: Option<SetCounters>,
}

impl DeepOutcome {
    pub fn ns_per_cycle(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.cycles.max(1) as f64
    }
}

/// What the deep experiment's threads share.
struct DeepShared<S> {
    set: S,
    completed: AtomicU64,
    failure: FirstError,
}

fn deep<S: Sem + Send + 'static>(
    heads: usize,
    later: usize,
    run: Duration,
    post: Post,
) -> Result<DeepOutcome, String> {
    let shared = Arc::new(DeepShared {
        set: S::create(1)?,
        completed: AtomicU64::new(0),
        failure: FirstError::default(),
    });
    let mut crew = Crew::new();
    let result = (|| -> Result<DeepOutcome, String> {
        let set = &shared.set;
        for i in 0..heads {
            let sh = Arc::clone(&shared);
            crew.spawn(format!("deep-head-{i}"), SLEEPER_STACK, move || {
                match sh.set.op(&[(0, -HEAD_WANTS)]) {
                    Err(OpError::Removed) => {}
                    Ok(()) => sh
                        .failure
                        .set(format!("head sleeper {i} completed its -{HEAD_WANTS}")),
                    Err(OpError::Other(e)) => sh.failure.set(format!("head sleeper {i}: {e}")),
                }
            })?;
            await_ncnt(set, 0, i + 1)?;
        }
        for i in 0..later {
            let sh = Arc::clone(&shared);
            crew.spawn(format!("deep-later-{i}"), SLEEPER_STACK, move || loop {
                match sh.set.op(&[(0, -1)]) {
                    Ok(()) => {
                        sh.completed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(OpError::Removed) => break,
                    Err(OpError::Other(e)) => {
                        sh.failure.set(format!("later sleeper {i}: {e}"));
                        break;
                    }
                }
            })?;
        }
        await_ncnt(set, 0, heads + later)?;
        let before = set.counters();
        let done_before = shared.completed.load(Ordering::Relaxed);
        let start = Instant::now();
        while start.elapsed() < run {
            if set.value(0)? == 0 {
                match post {
                    Post::Semop => set.op(&[(0, 1)]).map_err(|e| format!("post: {e:?}"))?,
                    Post::SetVal => set.set_value(0, 1)?,
                }
            } else {
                std::thread::yield_now();
            }
        }
        let elapsed = start.elapsed();
        let cycles = shared.completed.load(Ordering::Relaxed) - done_before;
        let counters = delta(before, set.counters());
        Ok(DeepOutcome {
            post,
            heads,
            later,
            cycles,
            elapsed,
            counters,
        })
    })();
    // Every sleeper leaves with Removed.
    shared.set.remove();
    crew.join_within(QUEUE_TIMEOUT)
        .map_err(|e| format!("after removing the set: {e}"))?;
    let outcome = result?;
    if let Some(e) = shared.failure.take() {
        return Err(e);
    }
    Ok(outcome)
}

// ---------------------------------------------------------------------------
// bulk: N sleepers woken by one call.

/// How the bulk experiment wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waker {
    SetAll,
    Semop,
}

impl Waker {
    fn name(self) -> &'static str {
        match self {
            Waker::SetAll => "setall",
            Waker::Semop => "semop",
        }
    }
    fn calls(self, n: usize) -> usize {
        match self {
            Waker::SetAll => 1,
            Waker::Semop => n.div_ceil(SEMOPM),
        }
    }
}

/// One bulk wake-up, one round.
#[derive(Debug, Clone)]
pub struct BulkRound {
    /// The waker's call (or calls).
    pub call: Duration,
    /// From just before the call until the last sleeper had returned.
    pub last_return: Duration,
    pub counters: Option<SetCounters>,
}

/// Where the bulk experiment runs its threads: the waker on one CPU, the
/// sleepers on another, so that the woken sleepers neither preempt the
/// waker's call nor share its CPU. `None` leaves both free.
#[derive(Debug, Clone, Copy)]
struct Placement {
    waker_cpu: usize,
    sleeper_cpu: usize,
}

fn placement(bind: bool) -> Option<Placement> {
    let cpus = crate::harness::affinity::allowed_cpus();
    (bind && cpus.len() >= 2).then(|| Placement {
        waker_cpu: cpus[0],
        sleeper_cpu: cpus[1],
    })
}

/// What the bulk experiment's threads share.
struct BulkShared<S> {
    set: S,
    base: Instant,
    /// When each sleeper returned, nanoseconds after `base`; 0: not yet.
    returned: Vec<AtomicU64>,
    failure: FirstError,
    started: AtomicBool,
    /// Woken sleepers park on this word until the round is over, so that
    /// thread exit is not part of the measured wake-up.
    release: AtomicU32,
}

fn bulk_round<S: Sem + Send + 'static>(
    n: usize,
    waker: Waker,
    place: Option<Placement>,
) -> Result<BulkRound, String> {
    let shared = Arc::new(BulkShared {
        set: S::create(n)?,
        base: Instant::now(),
        returned: (0..n).map(|_| AtomicU64::new(0)).collect(),
        failure: FirstError::default(),
        started: AtomicBool::new(false),
        release: AtomicU32::new(0),
    });
    let pinned_waker = place.and_then(|p| PinnedThread::pin(p.waker_cpu));
    let mut crew = Crew::new();
    let result = (|| -> Result<BulkRound, String> {
        let sh = &*shared;
        // Arrival i waits on semaphore n - 1 - i: arrival order is the
        // reverse of semaphore order.
        for i in 0..n {
            let num = n - 1 - i;
            let mine = Arc::clone(&shared);
            crew.spawn(format!("bulk-{i}"), SLEEPER_STACK, move || {
                if let Some(p) = place {
                    crate::harness::affinity::pin_current_thread(p.sleeper_cpu);
                }
                match mine.set.op(&[(num as u16, -1)]) {
                    Ok(()) => {
                        let at = mine.base.elapsed().as_nanos() as u64;
                        mine.returned[i].store(at.max(1), Ordering::Release);
                        if !mine.started.load(Ordering::Relaxed) {
                            mine.failure
                                .set(format!("sleeper {i} returned before the wake-up"));
                        }
                        while mine.release.load(Ordering::Acquire) == 0 {
                            futex::wait(&mine.release, 0);
                        }
                    }
                    Err(OpError::Removed) => {}
                    Err(OpError::Other(e)) => mine.failure.set(format!("sleeper {i}: {e}")),
                }
            })?;
            await_ncnt(&sh.set, num, 1)?;
        }
        let before = sh.set.counters();
        sh.started.store(true, Ordering::Relaxed);
        let t0 = sh.base.elapsed();
        match waker {
            Waker::SetAll => sh.set.set_all(&vec![1u16; n])?,
            Waker::Semop => {
                let sops: Vec<(u16, i16)> = (0..n).map(|num| (num as u16, 1)).collect();
                for chunk in sops.chunks(SEMOPM) {
                    sh.set
                        .op(chunk)
                        .map_err(|e| format!("waker semop: {e:?}"))?;
                }
            }
        }
        let call = sh.base.elapsed() - t0;
        // Wait (sleeping, so as not to take CPU from the sleepers) for
        // every sleeper to return.
        let deadline = Instant::now() + QUEUE_TIMEOUT;
        let mut pending = 0;
        while pending < n && Instant::now() < deadline && !sh.failure.is_set() {
            if sh.returned[pending].load(Ordering::Acquire) != 0 {
                pending += 1;
            } else {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        let counters = delta(before, sh.set.counters());
        if pending < n {
            return Err(format!(
                "{} of {n} sleepers had not returned {} s after the wake-up (a lost wake-up?)",
                n - pending,
                QUEUE_TIMEOUT.as_secs()
            ));
        }
        let last = sh
            .returned
            .iter()
            .map(|r| r.load(Ordering::Acquire))
            .max()
            .unwrap_or(0);
        Ok(BulkRound {
            call,
            last_return: Duration::from_nanos(last).saturating_sub(t0),
            counters,
        })
    })();
    // Whatever happened: sleepers still queued leave with Removed, woken
    // ones are released.
    shared.set.remove();
    shared.release.store(1, Ordering::Release);
    futex::wake(&shared.release, i32::MAX);
    let joined = crew.join_within(QUEUE_TIMEOUT);
    drop(pinned_waker);
    joined.map_err(|e| format!("after removing the set: {e}"))?;
    let round = result?;
    if let Some(e) = shared.failure.take() {
        return Err(e);
    }
    Ok(round)
}

/// One bulk point: `rounds` rounds; times are the best round's, counters the median.
#[derive(Debug, Clone)]
pub struct BulkOutcome {
    pub waker: Waker,
    pub sleepers: usize,
    pub rounds: Vec<BulkRound>,
}

impl BulkOutcome {
    /// The least disturbed round's figure: other processes only ever add time.
    fn best(&self, pick: fn(&BulkRound) -> Duration) -> Duration {
        self.rounds.iter().map(pick).min().unwrap_or_default()
    }
    pub fn call(&self) -> Duration {
        self.best(|r| r.call)
    }
    pub fn last_return(&self) -> Duration {
        self.best(|r| r.last_return)
    }
    fn per_sleeper_ns(&self, d: Duration) -> f64 {
        d.as_nanos() as f64 / self.sleepers as f64
    }
    /// Median of `pick` per sleeper over the rounds; `None` without counters.
    fn counter(&self, pick: fn(&SetCounters) -> u64) -> Option<f64> {
        let mut v: Vec<f64> = self
            .rounds
            .iter()
            .filter_map(|r| r.counters.as_ref())
            .map(|c| pick(c) as f64 / self.sleepers as f64)
            .collect();
        v.sort_by(f64::total_cmp);
        crate::output::record::median(&v)
            .is_finite()
            .then(|| crate::output::record::median(&v))
    }
}

fn bulk<S: Sem + Send + 'static>(
    n: usize,
    waker: Waker,
    rounds: u32,
    place: Option<Placement>,
) -> Result<BulkOutcome, String> {
    let rounds = (0..rounds.max(1))
        .map(|_| bulk_round::<S>(n, waker, place))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BulkOutcome {
        waker,
        sleepers: n,
        rounds,
    })
}

// ---------------------------------------------------------------------------
// The `wake` command.

/// `ksync-lab wake`: seed 003's deep wait list and the bulk wake-up scaling.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Comma-separated experiments: deep (seed 003's deep wait list), bulk (N sleepers, one wake-up call).
    #[arg(long, value_delimiter = ',', default_value = "deep,bulk")]
    pub experiments: Vec<String>,
    /// Comma-separated backends: ksync, ipc (the kernel's SysV semaphores).
    #[arg(
        short = 'o',
        long = "ops",
        value_delimiter = ',',
        default_value = "ksync,ipc"
    )]
    pub backends: Vec<String>,
    /// deep: comma-separated counts of blocked head sleepers (each wants -1000).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 16, 64, 256, 1024])]
    pub heads: Vec<usize>,
    /// deep: sleepers behind the heads, each taking -1 and queueing again.
    #[arg(long, default_value_t = 4)]
    pub later: usize,
    /// deep: seconds per point.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// deep: comma-separated ways to post: semop (+1), setval (SETVAL 1).
    #[arg(long, value_delimiter = ',', default_value = "semop,setval")]
    pub post: Vec<String>,
    /// bulk: comma-separated sleeper counts.
    #[arg(long, value_delimiter = ',', default_values_t = [256usize, 512, 1024, 2048, 4096])]
    pub sizes: Vec<usize>,
    /// bulk: rounds per point; the best round's times and the median counters are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// bulk: comma-separated wakers: setall (one SETALL), semop (fewest semops of up to 500 +1s).
    #[arg(long, value_delimiter = ',', default_value = "setall,semop")]
    pub waker: Vec<String>,
    /// ksync: polls of its status word a blocked semop makes before it sleeps
    /// (ksync::sem::set_sleeper_spin; default ksync's own).
    #[arg(long, value_name = "POLLS")]
    pub sleeper_spin: Option<u32>,
    /// bulk: leave the waker and the sleepers unbound (default: waker on the first allowed CPU, sleepers on the second).
    #[arg(long)]
    pub no_bind: bool,
}

fn parse_list<T: Copy + PartialEq>(
    names: &[String],
    known: &[(&str, T)],
    what: &str,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for name in names {
        let Some(&(_, v)) = known.iter().find(|k| k.0 == name.trim()) else {
            let list: Vec<&str> = known.iter().map(|k| k.0).collect();
            return Err(format!(
                "unknown {what} '{name}'; known: {}",
                list.join(", ")
            ));
        };
        if out.contains(&v) {
            return Err(format!("{what} '{name}' named twice"));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err(format!("no {what} chosen"));
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Ksync,
    Ipc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Experiment {
    Deep,
    Bulk,
}

fn run_deep(
    b: Backend,
    heads: usize,
    later: usize,
    run: Duration,
    post: Post,
) -> Result<DeepOutcome, String> {
    match b {
        Backend::Ksync => deep::<Ksync>(heads, later, run, post),
        Backend::Ipc => deep::<Ipc>(heads, later, run, post),
    }
}

fn run_bulk(
    b: Backend,
    n: usize,
    waker: Waker,
    rounds: u32,
    place: Option<Placement>,
) -> Result<BulkOutcome, String> {
    match b {
        Backend::Ksync => bulk::<Ksync>(n, waker, rounds, place),
        Backend::Ipc => bulk::<Ipc>(n, waker, rounds, place),
    }
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Ksync => "ksync",
            Backend::Ipc => "ipc",
        }
    }
    /// The implementation's name in records (as sembench's).
    fn lock(self) -> &'static str {
        match self {
            Backend::Ksync => "ksync-sem",
            Backend::Ipc => "sysv",
        }
    }
}

/// `--heads`, `--sizes` and friends checked.
fn check(args: &Args) -> Result<Duration, String> {
    let run = crate::seconds_arg("--seconds", args.seconds)?;
    if args.heads.is_empty() || args.heads.iter().any(|&h| h > MAX_SLEEPERS) {
        return Err(format!("--heads needs counts of 0 to {MAX_SLEEPERS}"));
    }
    if args.later == 0 || args.later > 256 {
        return Err(format!(
            "--later needs 1 to 256 sleepers, not {}",
            args.later
        ));
    }
    if args.sizes.is_empty() || args.sizes.iter().any(|&n| n == 0 || n > MAX_SLEEPERS) {
        return Err(format!(
            "--sizes needs sleeper counts of 1 to {MAX_SLEEPERS}"
        ));
    }
    if args.rounds == 0 || args.rounds > 100 {
        return Err(format!("--rounds needs 1 to 100, not {}", args.rounds));
    }
    Ok(run)
}

/// Runs `run` through `lab.measure`, turning a failed run into an error.
fn measure<T>(
    lab: &mut Lab,
    label: &str,
    mut run: impl FnMut() -> Result<T, String>,
    record: impl Fn(&T) -> Record,
) -> Result<Measured, String> {
    let mut error = None;
    let measured = lab.measure(label, || match run() {
        Ok(outcome) => record(&outcome),
        Err(e) => {
            error.get_or_insert(e);
            Record::new("wake", "failed", "-", false, 0)
        }
    });
    match error {
        Some(e) => Err(format!("{label}: {e}")),
        None => Ok(measured),
    }
}

fn deep_record(o: &DeepOutcome, b: Backend) -> Record {
    let per = |pick: fn(&SetCounters) -> u64| {
        o.counters
            .as_ref()
            .map(|c| pick(c) as f64 / o.cycles.max(1) as f64)
    };
    let mut r = Record::new(
        "wake",
        &format!("deep, post {}", o.post.name()),
        b.lock(),
        b == Backend::Ksync,
        o.heads + o.later + 1,
    )
    .param("backend", b.name())
    .param("heads", o.heads)
    .param("later", o.later)
    .param("head_wants", -i32::from(HEAD_WANTS))
    .param("post", o.post.name())
    .metric("cycles", o.cycles as f64)
    .metric("ns_per_cycle", o.ns_per_cycle())
    .metric("ops_per_s", o.cycles as f64 / o.elapsed.as_secs_f64());
    for (key, pick) in [
        (
            "attempts_per_cycle",
            (|c: &SetCounters| c.attempts) as fn(&SetCounters) -> u64,
        ),
        ("visited_per_cycle", |c| c.visited),
        ("wakeups_per_cycle", |c| c.wakeups),
        ("futex_wakes_per_cycle", |c| c.futex_wakes),
    ] {
        if let Some(v) = per(pick) {
            r = r.metric(key, v);
        }
    }
    r
}

fn bulk_record(o: &BulkOutcome, b: Backend, place: Option<Placement>) -> Record {
    let n = o.sleepers as f64;
    let mut r = Record::new(
        "wake",
        &format!("bulk, waker {}", o.waker.name()),
        b.lock(),
        b == Backend::Ksync,
        o.sleepers,
    )
    .param("backend", b.name())
    .param("waker", o.waker.name())
    .param("calls", o.waker.calls(o.sleepers))
    .param("rounds", o.rounds.len())
    .param(
        "placement",
        place.map_or("unbound".into(), |p| {
            format!("waker cpu {}, sleepers cpu {}", p.waker_cpu, p.sleeper_cpu)
        }),
    )
    .metric("call_us", o.call().as_secs_f64() * 1e6)
    .metric("last_return_us", o.last_return().as_secs_f64() * 1e6)
    .metric("call_ns_per_sleeper", o.per_sleeper_ns(o.call()))
    .metric(
        "last_return_ns_per_sleeper",
        o.per_sleeper_ns(o.last_return()),
    )
    .metric("ops_per_s", n / o.last_return().as_secs_f64().max(1e-9));
    for (key, pick) in [
        (
            "visited_per_sleeper",
            (|c: &SetCounters| c.visited) as fn(&SetCounters) -> u64,
        ),
        ("attempts_per_sleeper", |c| c.attempts),
        ("wakeups_per_sleeper", |c| c.wakeups),
        ("futex_wakes_per_sleeper", |c| c.futex_wakes),
    ] {
        if let Some(v) = o.counter(pick) {
            r = r.metric(key, v);
        }
    }
    r
}

/// A metric with its `[min-max]`, or "-" where the backend has none.
fn shown(m: &Measured, key: &str, decimals: usize) -> String {
    if m.get(key).is_finite() {
        m.show(key, decimals)
    } else {
        "-".into()
    }
}

/// `ksync-lab wake`: a table per experiment, one record per point and run.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let experiments = parse_list(
        &args.experiments,
        &[("deep", Experiment::Deep), ("bulk", Experiment::Bulk)],
        "experiment",
    )?;
    let backends = parse_list(
        &args.backends,
        &[("ksync", Backend::Ksync), ("ipc", Backend::Ipc)],
        "backend",
    )?;
    let posts = parse_list(
        &args.post,
        &[("semop", Post::Semop), ("setval", Post::SetVal)],
        "post",
    )?;
    let wakers = parse_list(
        &args.waker,
        &[("setall", Waker::SetAll), ("semop", Waker::Semop)],
        "waker",
    )?;
    let length = check(&args)?;
    if let Some(polls) = args.sleeper_spin {
        ksync::sem::set_sleeper_spin(polls);
        lab.set_param("sleeper_spin", polls);
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    let deep_on = experiments.contains(&Experiment::Deep);
    let bulk_on = experiments.contains(&Experiment::Bulk);
    if deep_on {
        lab.plan(
            (posts.len() * args.heads.len() * backends.len()) as u64,
            length,
        );
    }
    if bulk_on {
        // Creating and queueing the sleepers one by one dominates: ~50 us each.
        let sleepers: usize = args.sizes.iter().sum();
        let each = Duration::from_micros(50) * (sleepers / args.sizes.len()) as u32 * args.rounds;
        lab.plan(
            (wakers.len() * args.sizes.len() * backends.len()) as u64,
            each,
        );
    }
    if deep_on {
        let mut table = Table::new([
            "backend",
            "post",
            "heads",
            "ns / cycle",
            "attempts / cycle",
            "visited / cycle",
            "wakeups / cycle",
            "futex wakes / cycle",
        ]);
        for &post in &posts {
            for &heads in &args.heads {
                for &b in &backends {
                    let label = format!(
                        "wake deep -o {} --post {} --heads {heads}",
                        b.name(),
                        post.name()
                    );
                    let m = measure(
                        lab,
                        &label,
                        || run_deep(b, heads, args.later, length, post),
                        |o| deep_record(o, b),
                    )?;
                    table.row(vec![
                        b.name().to_string(),
                        post.name().to_string(),
                        heads.to_string(),
                        shown(&m, "ns_per_cycle", 0),
                        shown(&m, "attempts_per_cycle", 2),
                        shown(&m, "visited_per_cycle", 2),
                        shown(&m, "wakeups_per_cycle", 2),
                        shown(&m, "futex_wakes_per_cycle", 2),
                    ]);
                }
            }
        }
        lab.print(&format!(
            "\n## deep wait list (seed 003): heads want -{HEAD_WANTS} and stay blocked, {} later sleepers \
             take -1; a cycle = one post + the -1 it completes; {} s per point\n\n{}",
            args.later,
            args.seconds,
            table.render()
        ));
    }
    if bulk_on {
        let place = placement(!args.no_bind);
        let mut table = Table::new([
            "backend",
            "waker",
            "sleepers",
            "calls",
            "call us",
            "last return us",
            "call ns / sleeper",
            "last return ns / sleeper",
            "visited / sleeper",
            "attempts / sleeper",
            "futex wakes / sleeper",
        ]);
        let mut scaling = Vec::new();
        for &waker in &wakers {
            for &b in &backends {
                let mut per_sleeper = Vec::new();
                for &n in &args.sizes {
                    let label = format!(
                        "wake bulk -o {} --waker {} {n} sleepers",
                        b.name(),
                        waker.name()
                    );
                    let m = measure(
                        lab,
                        &label,
                        || run_bulk(b, n, waker, args.rounds, place),
                        |o| bulk_record(o, b, place),
                    )?;
                    table.row(vec![
                        b.name().to_string(),
                        waker.name().to_string(),
                        n.to_string(),
                        waker.calls(n).to_string(),
                        shown(&m, "call_us", 0),
                        shown(&m, "last_return_us", 0),
                        shown(&m, "call_ns_per_sleeper", 0),
                        shown(&m, "last_return_ns_per_sleeper", 0),
                        shown(&m, "visited_per_sleeper", 2),
                        shown(&m, "attempts_per_sleeper", 2),
                        shown(&m, "futex_wakes_per_sleeper", 2),
                    ]);
                    per_sleeper.push((
                        n,
                        m.get("call_ns_per_sleeper"),
                        m.get("last_return_ns_per_sleeper"),
                    ));
                }
                if let (Some(first), Some(last)) = (per_sleeper.first(), per_sleeper.last()) {
                    if per_sleeper.len() > 1 {
                        scaling.push(format!(
                            "{} {}: per-sleeper time at {} / at {} sleepers: call {:.2}, last return {:.2} \
                             (about 1 = linear in N, about {:.0} = quadratic)",
                            b.name(),
                            waker.name(),
                            last.0,
                            first.0,
                            last.1 / first.1,
                            last.2 / first.2,
                            last.0 as f64 / first.0 as f64,
                        ));
                    }
                }
            }
        }
        for line in scaling {
            table.note(line);
        }
        lab.print(&format!(
            "\n## bulk wake-up: N sleepers on their own semaphores, queued in reverse semaphore order, \
             woken by one call; times: best of {} rounds, counters: median\n\n{}\n{}",
            args.rounds,
            match place {
                Some(p) => format!(
                    "waker bound to CPU {}, sleepers to CPU {}; woken sleepers record the time and park\n",
                    p.waker_cpu, p.sleeper_cpu
                ),
                None => "threads unbound; woken sleepers record the time and park\n".to_string(),
            },
            table.render()
        ));
    }
    Ok(())
}
