//! `dining`: calls on two semaphores from many threads, the contended side
//! of System V's atomic multi-operation call, on every backend with System
//! V semantics (the kernel's sets, ksync's `SemSet` and `SharedSemSet`).
//!
//! `semop` measures such a call with nobody else about; sembench's sleepers
//! make single operations. Here every call names two semaphores of a small
//! set shared by all threads: in `take` mode they are Dijkstra's forks,
//! taken two at a time and blocking while either is held; in `post` mode
//! calls never block and meet only on the semaphores' locks. Threads are
//! unbound, and the default counts go past the cores, where holders are
//! preempted inside their calls. The workload is in `workloads::dining`.

use super::options;
use crate::output::lab::Lab;
use crate::output::record::{ratio_to, Measured, Record};
use crate::output::table::Table;
use crate::peers::sem::registry::{self as sems, SemEntry, KERNEL};
use crate::workloads::dining::{Config, Dining, Mode, Outcome};

/// `ksync-lab dining`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Comma-separated thread counts (default: the cores, 4x and 16x the cores).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Semaphores in the set (forks at the table), 2 to 32000.
    #[arg(long, default_value_t = 5)]
    pub sems: usize,
    /// Comma-separated modes: take (take two forks in one call, blocking while either
    /// is held; give them back in the next) and post (raise two semaphores in one call,
    /// lower them in the next; never blocks).
    #[arg(long, value_delimiter = ',', default_value = "take,post")]
    pub mode: Vec<String>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Comma-separated backends with System V semantics: sysv (the kernel's), ksync-sem
    /// (also ksync), ksync-shared (also shared).
    #[arg(
        short = 'o',
        long = "ops",
        value_delimiter = ',',
        default_value = "sysv,ksync-sem,ksync-shared"
    )]
    pub backends: Vec<String>,
}

fn record(o: &Outcome, backend: &SemEntry, cfg: &Config) -> Record {
    let mut r = Record::new(
        "dining",
        &format!("dining {} on {} semaphores", cfg.mode.name(), cfg.sems),
        backend.name,
        backend.is_ksync(),
        cfg.threads,
    )
    .param("backend", backend.name)
    .param("mode", cfg.mode.name())
    .param("sems", cfg.sems)
    .param("run_s", cfg.run.as_secs_f64())
    .metric("pairs_per_s", o.pairs_per_sec())
    .metric("ops_per_s", o.pairs_per_sec())
    .metric("min_pairs", o.min() as f64)
    .metric("max_pairs", o.max() as f64)
    .metric("exact", f64::from(u8::from(o.exact)))
    .metric(
        "cpus_busy",
        (o.usage.user + o.usage.system).as_secs_f64() / o.elapsed.as_secs_f64(),
    )
    .metric(
        "cpu_us_per_pair",
        o.per_pair((o.usage.user + o.usage.system).as_nanos() as u64) / 1e3,
    )
    .metric(
        "user_us_per_pair",
        o.per_pair(o.usage.user.as_nanos() as u64) / 1e3,
    )
    .metric(
        "voluntary_switches_per_pair",
        o.per_pair(o.usage.voluntary_switches),
    )
    .metric(
        "involuntary_switches_per_pair",
        o.per_pair(o.usage.involuntary_switches),
    );
    if let Some(e) = o.events {
        for (name, n) in e.named() {
            r = r.metric(&format!("{name}_per_pair"), o.per_pair(n));
        }
    }
    r
}

/// What the columns of [`table`] mean, printed once under the last one.
const NOTE: &str = "A pair is two calls, each on two semaphores. x sysv: pairs/s against the \
    kernel's run of the same round (higher is faster; a round runs every backend once). min / \
    max thread: the least busy thread's pairs over the busiest's (medians). CPUs busy: the \
    process's CPU time over the run's (getrusage), which tells runs where threads waited (slept \
    or napped) from runs where every CPU was busy. Per pair: CPU time, context switches, and the \
    backend's own counts of futex sleeps and of internal locks found taken (the kernel keeps its \
    own). exact: every semaphore held its starting value after every run.";

/// One table per mode and thread count: throughput against the kernel's,
/// fairness, and what a pair cost.
fn table(points: &[Measured]) -> Table {
    let mut table = Table::new([
        "backend",
        "pairs/s",
        "x sysv",
        "min / max thread",
        "CPUs busy",
        "cpu us",
        "user us",
        "switches vol",
        "switches invol",
        "futex sleeps",
        "lock waits",
        "exact",
    ]);
    for m in points {
        table.row(vec![
            m.record.lock.clone(),
            m.show("pairs_per_s", 0),
            m.show_or_dash("x_sysv", 2),
            format!("{:.2}", m.get("min_pairs") / m.get("max_pairs").max(1.0)),
            m.show("cpus_busy", 2),
            m.show("cpu_us_per_pair", 2),
            m.show("user_us_per_pair", 2),
            m.show("voluntary_switches_per_pair", 3),
            m.show("involuntary_switches_per_pair", 3),
            m.show_or_dash("sleeps_per_pair", 3),
            m.show_or_dash("lock_waits_per_pair", 3),
            if m.in_every_run("exact") { "yes" } else { "NO" }.into(),
        ]);
    }
    table
}

pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let cores = lab.machine().cores.max(1);
    let threads = if args.threads.is_empty() {
        vec![cores, 4 * cores, 16 * cores]
    } else {
        options::thread_counts(&args.threads)?
    };
    let run = options::seconds("--seconds", args.seconds)?;
    let backends = sems::chosen(&args.backends, "dining backend", |b| b.has_sysv_semantics())?;
    if backends.is_empty() || args.mode.is_empty() {
        return Err("-o and --mode need at least one value each".into());
    }
    let mut modes = Vec::new();
    for name in &args.mode {
        let mode = Mode::by_name(name)
            .ok_or_else(|| format!("--mode takes take or post, not {name:?}"))?;
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    for &mode in &modes {
        for &n in &threads {
            Config {
                threads: n,
                sems: args.sems,
                mode,
                run,
            }
            .validate()?;
        }
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan(
        (modes.len() * threads.len() * backends.len()) as u64,
        run + std::time::Duration::from_millis(100),
    );
    for &mode in &modes {
        for &n in &threads {
            let cfg = Config {
                threads: n,
                sems: args.sems,
                mode,
                run,
            };
            let labels: Vec<String> = backends
                .iter()
                .map(|backend| {
                    format!(
                        "dining -o {} --mode {} --threads {n} --sems {}",
                        backend.name,
                        mode.name(),
                        args.sems
                    )
                })
                .collect();
            let kernel = backends.iter().position(|b| b.name == KERNEL);
            // Every backend once per round, the ratio to the kernel taken
            // within a round (`Lab::measure_rounds`).
            let points = lab.try_measure_rounds(
                &labels,
                |p| match backends[p].dispatch(Dining(&cfg)) {
                    Ok(o) => Ok(record(&o, backends[p], &cfg)),
                    Err(e) => Err(format!("{}: {e}", labels[p])),
                },
                |round| {
                    if let Some(kernel) = kernel {
                        ratio_to(round, kernel, "pairs_per_s", "x_sysv");
                    }
                },
            )?;
            for (label, measured) in labels.iter().zip(&points) {
                if !measured.in_every_run("exact") {
                    lab.fail(format!(
                        "{label}: a semaphore did not hold its starting value after the run"
                    ));
                }
            }
            lab.print(&format!(
                "\n## dining {}: {n} threads, {} semaphores, {} s\n\n{}",
                mode.name(),
                args.sems,
                run.as_secs_f64(),
                table(&points).render()
            ));
        }
    }
    lab.print(&format!("\n{NOTE}\n"));
    Ok(())
}
