//! `wake`: wake-up experiments on semaphore sets with System V semantics,
//! ksync's `SemSet` beside the kernel's: Kenneth Chen's deep wait list
//! ("ipc semaphore optimization", LKML, June 2003) and the bulk wake-up of
//! N sleepers (the workloads: `workloads::wake`).
//!
//! Reported per deep-list cycle: ksync's operation attempts, wait-list
//! entries visited, wake-ups and futex wakes (`SemSet::counters`), and for
//! both backends the wall time per cycle. Reported per bulk wake-up: the
//! waker's call time, the time until the last sleeper has returned, both
//! per sleeper, and ksync's entries visited per sleeper.
//!
//! The bulk wake-up by `semop` also runs the `futex-batch` floor: bare futex
//! words, one per sleeper, woken with the batched wake ksync's sets use. No
//! design that gives each sleeper its own futex word can make the waker's
//! call cheaper than that row; the kernel wakes its sleepers from inside
//! one system call, without a futex at all.

use super::options;
use crate::output::lab::Lab;
use crate::output::record::{median, Measured, Record};
use crate::output::table::Table;
use crate::peers::names::{self, Named};
use crate::peers::sem::registry::{self as sems, SemEntry, FLOOR, KERNEL};
use crate::peers::sem::{wake_sharing_name, SetCounters};
use crate::workloads::wake::bulk::{placement, BulkOutcome, BulkWake, Placement, Waker};
use crate::workloads::wake::deep::{DeepList, DeepOutcome, Post, HEAD_WANTS};
use crate::workloads::wake::MAX_SLEEPERS;
use std::time::Duration;

/// `ksync-lab wake`: Kenneth Chen's deep wait list and the bulk wake-up scaling.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Comma-separated experiments: deep (Kenneth Chen's deep wait list), bulk (N sleepers, one wake-up call).
    #[arg(long, value_delimiter = ',', default_value = "deep,bulk")]
    pub experiments: Vec<String>,
    /// Comma-separated backends: ksync-sem (also ksync), sysv (the kernel's; also ipc),
    /// ksync-shared (also shared; at most 1024 sleepers per set), futex-batch (the floor: a
    /// futex word per sleeper and one batched wake, no System V semantics; bulk by semop only).
    #[arg(
        short = 'o',
        long = "ops",
        value_delimiter = ',',
        default_value = "ksync-sem,sysv,futex-batch"
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

/// `--experiments` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Experiment {
    Deep,
    Bulk,
}

impl Named for Experiment {
    fn name(&self) -> &str {
        match self {
            Experiment::Deep => "deep",
            Experiment::Bulk => "bulk",
        }
    }
}

impl Named for Post {
    fn name(&self) -> &str {
        Post::name(*self)
    }
}

impl Named for Waker {
    fn name(&self) -> &str {
        Waker::name(*self)
    }
}

/// Whether `b` runs in the wake experiments at all.
fn offered(b: &SemEntry) -> bool {
    b.has_sysv_semantics() || b.name == FLOOR
}

/// Whether `b` runs the deep list (its heads need System V semantics).
fn runs_deep(b: &SemEntry) -> bool {
    b.has_sysv_semantics()
}

/// Whether `b` runs the bulk wake-up by `waker` (`SETALL` needs System V
/// semantics; the floor posts with `semop`).
fn runs_bulk(b: &SemEntry, waker: Waker) -> bool {
    b.has_sysv_semantics() || waker == Waker::Semop
}

/// The values of `all` named in `names` (see [`names::pick`]); at least one.
fn choose<T: Named + Copy>(all: &[T], names: &[String], what: &str) -> Result<Vec<T>, String> {
    let chosen = names::pick(all, names, what, |_| false)?;
    if chosen.is_empty() {
        return Err(format!("no {what} chosen"));
    }
    Ok(chosen.into_iter().copied().collect())
}

/// `--heads`, `--sizes` and friends checked.
fn check(args: &Args) -> Result<Duration, String> {
    let run = options::seconds("--seconds", args.seconds)?;
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

fn deep_wanted(experiments: &[Experiment]) -> bool {
    experiments.contains(&Experiment::Deep)
}

fn bulk_wanted(experiments: &[Experiment]) -> bool {
    experiments.contains(&Experiment::Bulk)
}

/// Refuses, before anything runs, a point that would put more sleepers in
/// one set than `b`'s set can hold (ksync's shared sets have a fixed table).
fn check_sleepers(b: &SemEntry, args: &Args, deep: bool, bulk: bool) -> Result<(), String> {
    let Some(max) = b.max_sleepers() else {
        return Ok(());
    };
    let heads = args.heads.iter().copied().max().unwrap_or(0);
    if deep && heads + args.later > max {
        return Err(format!(
            "-o {}: a set holds at most {max} sleepers, and --heads {heads} with --later {} \
             needs {}; lower --heads",
            b.name,
            args.later,
            heads + args.later
        ));
    }
    let size = args.sizes.iter().copied().max().unwrap_or(0);
    if bulk && size > max {
        return Err(format!(
            "-o {}: a set holds at most {max} sleepers, not --sizes {size}",
            b.name
        ));
    }
    Ok(())
}

/// Measures one point, `--repeat` times, turning a failed run into an error.
fn measure<T>(
    lab: &mut Lab,
    label: &str,
    mut run: impl FnMut() -> Result<T, String>,
    record: impl Fn(&T) -> Record,
) -> Result<Measured, String> {
    let mut measured = lab.try_measure_rounds(
        &[label.to_string()],
        |_| match run() {
            Ok(outcome) => Ok(record(&outcome)),
            Err(e) => Err(format!("{label}: {e}")),
        },
        |_| {},
    )?;
    Ok(measured.remove(0))
}

fn deep_record(o: &DeepOutcome, b: &SemEntry) -> Record {
    let mut r = Record::new(
        "wake",
        &format!("deep, post {}", o.post.name()),
        b.name,
        b.is_ksync(),
        o.heads + o.later + 1,
    )
    .param("backend", b.name)
    .param("heads", o.heads)
    .param("later", o.later)
    .param("head_wants", -i32::from(HEAD_WANTS))
    .param("post", o.post.name())
    .metric("cycles", o.cycles as f64)
    .metric("ns_per_cycle", o.ns_per_cycle())
    .metric("ops_per_s", o.cycles as f64 / o.elapsed.as_secs_f64());
    if let Some(c) = &o.counters {
        for (name, n) in c.named() {
            r = r.metric(
                &format!("{name}_per_cycle"),
                n as f64 / o.cycles.max(1) as f64,
            );
        }
    }
    r
}

fn bulk_record(o: &BulkOutcome, b: &SemEntry, place: Option<Placement>) -> Record {
    let n = o.sleepers as f64;
    let mut r = Record::new(
        "wake",
        &format!("bulk, waker {}", o.waker.name()),
        b.name,
        b.is_ksync(),
        o.sleepers,
    )
    .param("backend", b.name)
    .param("waker", o.waker.name())
    .param("calls", o.waker.calls(o.sleepers))
    .param("rounds", o.rounds.len())
    .param("wake_sharing", wake_sharing_name())
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
    for (name, v) in median_per_sleeper(o) {
        r = r.metric(&format!("{name}_per_sleeper"), v);
    }
    r
}

/// Each counter's median over the rounds, per sleeper; none without counters.
fn median_per_sleeper(o: &BulkOutcome) -> Vec<(&'static str, f64)> {
    let rounds: Vec<[(&'static str, u64); 4]> = o
        .rounds
        .iter()
        .filter_map(|r| r.counters.as_ref().map(SetCounters::named))
        .collect();
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|k| {
            let mut v: Vec<f64> = rounds
                .iter()
                .map(|named| named[k].1 as f64 / o.sleepers as f64)
                .collect();
            v.sort_by(f64::total_cmp);
            (first[k].0, median(&v))
        })
        .collect()
}

/// `ksync-lab wake`: a table per experiment, one record per point and run.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let experiments = choose(
        &[Experiment::Deep, Experiment::Bulk],
        &args.experiments,
        "experiment",
    )?;
    let backends = sems::chosen(&args.backends, "backend", offered)?;
    if backends.is_empty() {
        return Err("no backend chosen".into());
    }
    let posts = choose(&[Post::Semop, Post::SetVal], &args.post, "post")?;
    let wakers = choose(&[Waker::SetAll, Waker::Semop], &args.waker, "waker")?;
    let length = check(&args)?;
    for b in &backends {
        check_sleepers(
            b,
            &args,
            deep_wanted(&experiments),
            bulk_wanted(&experiments),
        )?;
    }
    // Backends that run the deep list, and (backend, waker) pairs the bulk
    // wake-up runs, in table order.
    let deep_backends: Vec<&SemEntry> = backends.iter().copied().filter(|b| runs_deep(b)).collect();
    let bulk_pairs: Vec<(Waker, &SemEntry)> = wakers
        .iter()
        .flat_map(|&w| backends.iter().map(move |&b| (w, b)))
        .filter(|&(w, b)| runs_bulk(b, w))
        .collect();
    let deep_on = deep_wanted(&experiments) && !deep_backends.is_empty();
    let bulk_on = bulk_wanted(&experiments) && !bulk_pairs.is_empty();
    if !deep_on && !bulk_on {
        return Err(format!(
            "{FLOOR} runs only the bulk wake-up by semop (it has no System V semantics): \
             choose --experiments bulk --waker semop, or a backend with System V semantics"
        ));
    }
    if let Some(polls) = args.sleeper_spin {
        ksync::sem::set_sleeper_spin(polls);
        lab.set_param("sleeper_spin", polls);
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    if deep_on {
        lab.plan(
            (posts.len() * args.heads.len() * deep_backends.len()) as u64,
            length,
        );
    }
    if bulk_on {
        // Creating and queueing the sleepers one by one dominates: ~50 us each.
        let sleepers: usize = args.sizes.iter().sum();
        let each = Duration::from_micros(50) * (sleepers / args.sizes.len()) as u32 * args.rounds;
        lab.plan((bulk_pairs.len() * args.sizes.len()) as u64, each);
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
                for &b in &deep_backends {
                    let label = format!(
                        "wake deep -o {} --post {} --heads {heads}",
                        b.name,
                        post.name()
                    );
                    let m = measure(
                        lab,
                        &label,
                        || {
                            b.dispatch(DeepList {
                                heads,
                                later: args.later,
                                run: length,
                                post,
                            })
                        },
                        |o| deep_record(o, b),
                    )?;
                    table.row(vec![
                        b.name.to_string(),
                        post.name().to_string(),
                        heads.to_string(),
                        m.show_or_dash("ns_per_cycle", 0),
                        m.show_or_dash("attempts_per_cycle", 2),
                        m.show_or_dash("visited_per_cycle", 2),
                        m.show_or_dash("wakeups_per_cycle", 2),
                        m.show_or_dash("futex_wakes_per_cycle", 2),
                    ]);
                }
            }
        }
        lab.print(&format!(
            "\n## deep wait list (Kenneth Chen, ipc semaphore optimization, LKML, June 2003): heads want -{HEAD_WANTS} and stay blocked, {} later sleepers \
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
            "call / sysv's",
            "last return ns / sleeper",
            "visited / sleeper",
            "attempts / sleeper",
            "futex wakes / sleeper",
        ]);
        // The kernel's row with the same waker: the reference of a call's
        // ratio, taken within a round (`Lab::measure_rounds`).
        let kernel_of: Vec<Option<usize>> = bulk_pairs
            .iter()
            .map(|&(waker, _)| {
                bulk_pairs
                    .iter()
                    .position(|&(w, b)| w == waker && b.name == KERNEL)
            })
            .collect();
        // Per (waker, backend) pair, its per-sleeper times at each size.
        let mut per_sleeper: Vec<Vec<(usize, f64, f64)>> = vec![Vec::new(); bulk_pairs.len()];
        for &n in &args.sizes {
            let labels: Vec<String> = bulk_pairs
                .iter()
                .map(|(waker, b)| {
                    format!(
                        "wake bulk -o {} --waker {} {n} sleepers",
                        b.name,
                        waker.name()
                    )
                })
                .collect();
            let points = lab.try_measure_rounds(
                &labels,
                |p| {
                    let (waker, b) = bulk_pairs[p];
                    let run = BulkWake {
                        sleepers: n,
                        waker,
                        rounds: args.rounds,
                        place,
                    };
                    match b.dispatch(run) {
                        Ok(o) => Ok(bulk_record(&o, b, place)),
                        Err(e) => Err(format!("{}: {e}", labels[p])),
                    }
                },
                |round| {
                    let call = |r: &Record| r.get("call_ns_per_sleeper");
                    let bases: Vec<f64> = kernel_of
                        .iter()
                        .map(|k| k.map_or(f64::NAN, |k| call(&round[k])))
                        .collect();
                    for (r, base) in round.iter_mut().zip(bases) {
                        let x = call(r) / base;
                        r.metrics.insert("call_x_sysv".into(), x);
                    }
                },
            )?;
            for (p, m) in points.iter().enumerate() {
                let (waker, b) = bulk_pairs[p];
                table.row(vec![
                    b.name.to_string(),
                    waker.name().to_string(),
                    n.to_string(),
                    waker.calls(n).to_string(),
                    m.show_or_dash("call_us", 0),
                    m.show_or_dash("last_return_us", 0),
                    m.show_or_dash("call_ns_per_sleeper", 0),
                    m.show_or_dash("call_x_sysv", 2),
                    m.show_or_dash("last_return_ns_per_sleeper", 0),
                    m.show_or_dash("visited_per_sleeper", 2),
                    m.show_or_dash("attempts_per_sleeper", 2),
                    m.show_or_dash("futex_wakes_per_sleeper", 2),
                ]);
                per_sleeper[p].push((
                    n,
                    m.get("call_ns_per_sleeper"),
                    m.get("last_return_ns_per_sleeper"),
                ));
            }
        }
        let mut scaling = Vec::new();
        for (&(waker, b), sizes) in bulk_pairs.iter().zip(&per_sleeper) {
            if let (Some(first), Some(last)) = (sizes.first(), sizes.last()) {
                if sizes.len() > 1 {
                    scaling.push(format!(
                        "{} {}: per-sleeper time at {} / at {} sleepers: call {:.2}, last return {:.2} \
                         (about 1 = linear in N, about {:.0} = quadratic)",
                        b.name,
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
        table.note(
            "call / sysv's: the waker's call per sleeper over the kernel's with the same waker and \
             sleepers, in the same round (each round runs every row of a size once; lower is \
             cheaper)."
                .into(),
        );
        for line in scaling {
            table.note(line);
        }
        table.note(format!(
            "ksync-sem and {FLOOR} share a post's wake-ups out among the woken \
             (KSYNC_WAKE_SHARING=0|1|local; by default `any` with 4 or more CPUs, `local` \
             with 2 or 3, counted as the process starts): {} in this run.",
            wake_sharing_name()
        ));
        if bulk_pairs.iter().any(|(_, b)| b.name == FLOOR) {
            table.note(format!(
                "{FLOOR}: the floor for a design that gives each sleeper its own futex word \
                 (no System V semantics, semop waker only): one FUTEX_WAKE per sleeper, \
                 batched into one io_uring_enter where the kernel allows. The kernel's own \
                 sets wake from inside the call, without a futex."
            ));
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
