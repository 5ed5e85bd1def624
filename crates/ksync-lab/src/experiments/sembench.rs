//! `sembench`: Chris Mason's sembench, as Manfred Spraul ran it for his
//! April 2010 series ("[RFC PATCH 0/3] ipc/sem.c: Optimization for reducing
//! spinlock contention", LKML), with ksync, a raw futex and POSIX
//! semaphores beside the kernel's System V semaphores. The driver and the
//! differences from sembench 0.2 are in `workloads::sembench`; each backend
//! prints sembench's own lines, then a table compares them.

use super::{ComparePart, Quick};
use crate::harness::line_trip;
use crate::output::lab::Lab;
use crate::output::record::{peer_ratio_key, ratio_to, ratios_to_peers, Measured, Record};
use crate::output::summary::{Caveat, SummaryRow};
use crate::output::table::Table;
use crate::peers::sem::registry::{self as sems, SemEntry, FLOOR, KERNEL};
use crate::peers::sem::wake_sharing_name;
use crate::workloads::sembench::{Config, Outcome, Sembench};
use std::time::Duration;

/// `ksync-lab sembench`: Chris Mason's post/wait benchmark, as Manfred Spraul
/// ran it in April 2010.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Worker threads, one semaphore each, 250 per array (sembench's default is 2048; Spraul ran 250).
    #[arg(short = 't', long = "threads", default_value_t = 250)]
    pub threads: usize,
    /// Most workers posted per main-loop iteration, 1 to 500 (SEMOPM); posted in calls of at most 64.
    #[arg(short = 'w', long = "wake", default_value_t = 64)]
    pub wake: usize,
    /// Measured run time, seconds.
    #[arg(short = 'r', long = "run", default_value_t = 30.0)]
    pub run: f64,
    /// Comma-separated backends (see `list`): sysv (the kernel's; also ipc or 0, sembench's
    /// -o 0), ksync-sem (also ksync), ksync-shared (also shared: ksync's process-shared sets),
    /// futex (also 2), futex-batch (the floor: futex words woken in one batched call, no SysV
    /// semantics), posix-sem (also posix), futex-chain (experiment: each woken worker wakes the
    /// next).
    #[arg(
        short = 'o',
        long = "ops",
        value_delimiter = ',',
        default_value = "sysv"
    )]
    pub backends: Vec<String>,
    /// Pin the main thread to this CPU during the run (workers are always bound round robin).
    #[arg(long, value_name = "CPU")]
    pub pin_main: Option<usize>,
    /// Leave the workers unbound (sembench binds them: unbound, the scheduler may keep
    /// everything on one core, as a footnote of Spraul's notes).
    #[arg(long)]
    pub no_bind: bool,
    /// Untimed pause after creating the semaphores, seconds (sembench 0.2 sleeps 10; default 0 here).
    #[arg(long, default_value_t = 0.0)]
    pub pause: f64,
    /// ksync: polls of its status word a blocked semop makes before it sleeps
    /// (ksync::sem::set_sleeper_spin; default ksync's own).
    #[arg(long, value_name = "POLLS")]
    pub sleeper_spin: Option<u32>,
    /// Run the workers in P forked child processes (split evenly; the posting main thread
    /// stays in this one), for backends whose sets are shared between processes: sysv and
    /// ksync-shared.
    #[arg(long, value_name = "P")]
    pub processes: Option<usize>,
}

impl Args {
    fn backends(&self) -> Result<Vec<&'static SemEntry>, String> {
        let backends = sems::chosen(&self.backends, "sembench backend", |_| true)?;
        if backends.is_empty() {
            return Err("-o needs at least one backend".into());
        }
        if self.processes.is_some() {
            let local: Vec<&str> = backends
                .iter()
                .filter(|b| !b.is_process_shared())
                .map(|b| b.name)
                .collect();
            if !local.is_empty() {
                return Err(format!(
                    "--processes needs backends whose sets are shared between processes \
                     (sysv, ksync-shared); {} live in one process",
                    local.join(", ")
                ));
            }
        }
        Ok(backends)
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
            processes: self.processes,
        };
        config.validate()?;
        Ok(config)
    }
}

/// sembench's output lines (0.2 format) for `backend`'s run, plus ksync's
/// counters and Manfred Spraul's lock statistics line.
fn lines(o: &Outcome, backend: &SemEntry, trip_ns: Option<f64>) -> Vec<String> {
    let mut lines = vec![format!(
        "{} threads, waking {} at a time",
        o.threads, o.wake
    )];
    if let Some(ns) = trip_ns {
        lines.push(format!(
            "a cache line's round trip between the first two CPUs: {ns:.0} ns, just before the run"
        ));
    }
    if let Some(p) = o.processes {
        lines.push(format!(
            "workers in {p} child processes, the main thread in the parent"
        ));
    }
    lines.extend([
        format!("using {} operations", backend.name),
        format!("main thread burns: {}", o.main_burns),
        format!(
            "worker burn count total {} min {} max {} avg {}",
            o.total(),
            o.min(),
            o.max(),
            o.total() / o.worker_burns.len().max(1) as u64
        ),
        format!(
            "run time {} seconds {} worker burns per second",
            o.run.as_secs_f64(),
            o.burns_per_sec() as u64
        ),
    ]);
    let u = &o.usage;
    let mut cost = vec![
        format!(
            "cpu {:.2} us (kernel {:.2} us)",
            o.per_burn(u.user.as_nanos() as u64 + u.system.as_nanos() as u64) / 1e3,
            o.per_burn(u.system.as_nanos() as u64) / 1e3
        ),
        format!(
            "switches voluntary {:.3} involuntary {:.3}",
            o.per_burn(u.voluntary_switches),
            o.per_burn(u.involuntary_switches)
        ),
        format!("main thread on a CPU {:.2} of the run", o.main_cpu_share()),
    ];
    if let Some(e) = o.events {
        cost.extend(
            e.named()
                .iter()
                .map(|(k, n)| format!("{} {:.3}", k.replace('_', " "), o.per_burn(*n))),
        );
    }
    lines.push(format!("per worker burn: {}", cost.join(", ")));
    if let Some(c) = o.counters {
        let per = |n: u64| n as f64 / o.total().max(1) as f64;
        let totals: Vec<String> = c.named().iter().map(|(k, n)| format!("{k} {n}")).collect();
        let means: Vec<String> = c
            .named()
            .iter()
            .map(|(k, n)| format!("{k} {:.3}", per(*n)))
            .collect();
        lines.push(format!("ksync counters: {}", totals.join(" ")));
        lines.push(format!(
            "ksync counters per worker burn: {}",
            means.join(" ")
        ));
    }
    if let Some(stats) = &o.lock_stats {
        // Manfred Spraul's debugging lines, times in ns instead of cycles.
        lines.push(format!(
            "array lock: lifetime {:.0} seconds",
            stats.elapsed_ns as f64 / 1e9
        ));
        lines.push(stats.summary_line());
    }
    if o.unbound > 0 {
        lines.push(format!(
            "note: {} workers could not be bound to a CPU",
            o.unbound
        ));
    }
    if o.polled_unevenly() {
        lines.push(format!(
            "note: {:.0}% of burns slept and workers burned unevenly (min {}, avg {:.0}): a few \
             workers were posted while they still polled and cycled with the main thread, while \
             the rest waited for a CPU; this run measured that, not sleep-and-wake cycles, and \
             its ratio against a backend whose workers sleep does not compare",
            o.events.map_or(0.0, |e| o.per_burn(e.sleeps) * 100.0),
            o.min(),
            o.avg()
        ));
    }
    if !o.idle.is_empty() {
        // A few are enough to tell a late wake-up from a lost one.
        const SHOWN: usize = 4;
        let shown: Vec<String> = o
            .idle
            .iter()
            .take(SHOWN)
            .map(|w| {
                let known = |v: Option<String>| v.unwrap_or_else(|| "?".into());
                format!(
                    "worker {} {}, sleepers on its semaphore {}, value {}",
                    w.worker,
                    if w.ready { "ready" } else { "posted" },
                    known(w.sleepers.map(|n| n.to_string())),
                    known(w.value.map(|v| v.to_string()))
                )
            })
            .collect();
        lines.push(format!(
            "note: {} workers completed no wait during the run ({}{})",
            o.idle.len(),
            shown.join("; "),
            if o.idle.len() > SHOWN { "; ..." } else { "" }
        ));
    }
    if o.started_at_clock < o.threads {
        let last = o.all_started_after.map_or_else(
            || "not all had started by the end of the run".to_string(),
            |d| {
                format!(
                    "the last started {:.1} ms into the run",
                    d.as_secs_f64() * 1e3
                )
            },
        );
        lines.push(format!(
            "note: {} of {} workers had started when the clock started; {last}",
            o.started_at_clock, o.threads
        ));
    }
    lines
}

/// One run's record: `burns_per_s` (also as `ops_per_s`, the throughput
/// `--plot` draws), the main thread's burns, fairness, ksync's counters.
fn record(
    o: &Outcome,
    backend: &SemEntry,
    config: &Config,
    sleeper_spin: Option<u32>,
    trip_ns: Option<f64>,
) -> Record {
    let per_burn = |n: u64| n as f64 / o.total().max(1) as f64;
    let mut r = Record::new(
        "sembench",
        &format!("sembench -w {}", config.wake),
        backend.name,
        backend.is_ksync(),
        config.threads,
    )
    .param("backend", backend.name)
    .param("wake", config.wake)
    .param("run_s", config.run.as_secs_f64())
    .param("bind_workers", config.bind_workers)
    .param(
        "main_cpu",
        config.main_cpu.map_or("none".into(), |c| c.to_string()),
    )
    .param("pause_s", config.pause.as_secs_f64())
    .param("wake_sharing", wake_sharing_name())
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
    .metric("unbound_workers", o.unbound as f64)
    .metric("idle_workers", o.idle.len() as f64)
    .metric("polled_unevenly", f64::from(u8::from(o.polled_unevenly())))
    .metric("started_at_clock", o.started_at_clock as f64)
    .metric(
        "all_started_ms",
        o.all_started_after.map_or(
            if o.started_at_clock < o.threads {
                f64::NAN
            } else {
                0.0
            },
            |d| d.as_secs_f64() * 1e3,
        ),
    )
    .metric(
        "cpu_us_per_burn",
        per_burn((o.usage.user + o.usage.system).as_nanos() as u64) / 1e3,
    )
    .metric(
        "kernel_us_per_burn",
        per_burn(o.usage.system.as_nanos() as u64) / 1e3,
    )
    .metric(
        "voluntary_switches_per_burn",
        per_burn(o.usage.voluntary_switches),
    )
    .metric(
        "involuntary_switches_per_burn",
        per_burn(o.usage.involuntary_switches),
    )
    .metric("main_cpu_share", o.main_cpu_share());
    if let Some(ns) = trip_ns {
        r = r.metric("line_trip_ns", ns);
    }
    if let Some(p) = config.processes {
        r = r.param("processes", p);
    }
    if backend.is_ksync() {
        r = r.param(
            "sleeper_spin",
            sleeper_spin.map_or("default".into(), |p| p.to_string()),
        );
    }
    if let Some(c) = o.counters {
        for (name, n) in c.named() {
            r = r.metric(&format!("{name}_per_burn"), per_burn(n));
        }
    }
    if let Some(e) = o.events {
        for (name, n) in e.named() {
            r = r.metric(&format!("{name}_per_burn"), per_burn(n));
        }
    }
    r
}

/// Measures every backend `--repeat` times through `lab`, in rounds (each
/// backend once per round: `Lab::measure_rounds`), printing each run's
/// sembench lines as it ends when `print` says so. Each run also gets its
/// ratios to the same round's runs of the kernel (`x_sysv`) and of the
/// floor (`x_floor`, where `futex-batch` ran): on a guest whose speed, or
/// whose kernel's mode, changes from one run to the next, a ratio taken
/// within a round compares runs made under the same conditions.
fn measure_all(
    lab: &mut Lab,
    backends: &[&'static SemEntry],
    config: &Config,
    sleeper_spin: Option<u32>,
    print: bool,
) -> Result<Vec<Measured>, String> {
    let labels: Vec<String> = backends
        .iter()
        .map(|backend| {
            let mut label = format!(
                "sembench -o {} -t {} -w {}",
                backend.name, config.threads, config.wake
            );
            if let Some(p) = config.processes {
                label.push_str(&format!(" --processes {p}"));
            }
            label
        })
        .collect();
    let floor = backends.iter().position(|b| b.name == FLOOR);
    let printer = lab.printer();
    lab.try_measure_rounds(
        &labels,
        |p| {
            let backend = backends[p];
            // The machine's state as the run starts (`line_trip`): on a
            // guest it can change from one run to the next.
            let trip_ns = line_trip::first_two_cpus();
            let o = backend
                .dispatch(Sembench(config))
                .map_err(|e| format!("sembench -o {}: {e}", backend.name))?;
            let lines = self::lines(&o, backend, trip_ns);
            if print {
                printer(&format!("\n{}\n", lines.join("\n")));
            } else {
                // Where the runs' own lines are not printed (`compare`),
                // what would make a reader doubt a run's figure still is.
                for note in lines.iter().filter(|l| l.starts_with("note: ")) {
                    printer(&format!("sembench -o {}: {note}\n", backend.name));
                }
            }
            Ok(record(&o, backend, config, sleeper_spin, trip_ns))
        },
        |round| {
            // Against every peer, for `compare`'s summary, which picks the
            // best peer by its median and must still take ratios within a
            // round; the kernel is one (`x_sysv`, which the tables show).
            ratios_to_peers(round, "burns_per_s");
            if let Some(floor) = floor {
                ratio_to(round, floor, "burns_per_s", "x_floor");
            }
            mark_state_change(round);
        },
    )
}

/// Marks every run of `round` with `trip_changed` (1 or 0): whether the
/// line trip measured before its runs (`line_trip_ns`) moved more than
/// twofold within the round. The two states of the guest in BENCHMARKS.md
/// read about 45 and 370 ns, while runs in one state stay within 30% of
/// each other; a round that spans both compares two machines.
fn mark_state_change(round: &mut [Record]) {
    let trips = round
        .iter()
        .map(|r| r.get("line_trip_ns"))
        .filter(|t| t.is_finite());
    let (low, high) = trips.fold((f64::INFINITY, 0.0f64), |(lo, hi), t| {
        (lo.min(t), hi.max(t))
    });
    let changed = high > 2.0 * low;
    for r in round.iter_mut() {
        r.metrics
            .insert("trip_changed".into(), f64::from(u8::from(changed)));
    }
}

/// The comparison table: medians (with `[min-max]` over `--repeat` runs),
/// and the ratios to the kernel's and the floor's runs of the same round
/// ([`measure_all`]).
fn table(points: &[Measured]) -> Table {
    let with_floor = points.iter().any(|m| m.record.lock == FLOOR);
    let mut header = vec!["backend", "worker burns/s", "x sysv"];
    if with_floor {
        header.push("x floor");
    }
    header.extend([
        "main burns",
        "burns / main burn",
        "min",
        "max",
        "avg",
        "futex wakes / burn",
    ]);
    let mut table = Table::new(header);
    for m in points {
        let mut row = vec![
            m.record.params.get("backend").cloned().unwrap_or_default(),
            m.show("burns_per_s", 0),
            // `ratios_to_peers`' name for the ratio to the kernel's run.
            m.show_or_dash(&peer_ratio_key(KERNEL), 2),
        ];
        if with_floor {
            row.push(m.show_or_dash("x_floor", 2));
        }
        row.extend([
            m.show("main_burns", 0),
            m.show("burns_per_main_burn", 1),
            m.show("min_burns", 0),
            m.show("max_burns", 0),
            m.show("avg_burns", 0),
            m.show_or_dash("futex_wakes_per_burn", 3),
        ]);
        table.row(row);
    }
    table.note(format!(
        "x sysv{}: the median [min-max], over --repeat rounds, of a run's burns per second over \
         those of the same round's run of sysv{}; a round runs every backend once, in the \
         order given, so that a machine whose speed drifts between runs weighs on each alike.",
        if with_floor { ", x floor" } else { "" },
        if with_floor {
            " (of futex-batch, the floor)"
        } else {
            ""
        },
    ));
    if state_changed(points) {
        table.note(
            "In at least one round, a cache line's round trip between the first two CPUs, \
             measured before each run, moved more than twofold between the round's runs: the \
             host moved the vCPUs within the round, so that round compares runs made on two \
             different machines, in effect, and its ratios mix them."
                .to_string(),
        );
    }
    let uneven = polled_unevenly(points);
    if !uneven.is_empty() {
        table.note(format!(
            "In at least one run of {}, a few workers polled and cycled with the main thread \
             while the rest waited for a CPU (see the note under that run): such a run does not \
             measure sleep-and-wake cycles, and the medians and ratios above mix it with runs \
             that do.",
            uneven.join(", ")
        ));
    }
    table
}

/// Whether a round of `points` spanned the guest's two states
/// ([`mark_state_change`]).
fn state_changed(points: &[Measured]) -> bool {
    points
        .iter()
        .any(|m| m.max.get("trip_changed").is_some_and(|&v| v > 0.0))
}

/// The backends of `points` with a run whose workers polled unevenly
/// ([`Outcome::polled_unevenly`]).
fn polled_unevenly(points: &[Measured]) -> Vec<String> {
    points
        .iter()
        .filter(|m| m.max.get("polled_unevenly").is_some_and(|&v| v > 0.0))
        .map(|m| m.record.params.get("backend").cloned().unwrap_or_default())
        .collect()
}

/// What the comparison table's notes say of `points`, in a few words for
/// `compare`'s summary row, which shows the ratio without the table: an
/// uneven run concerns its backend's column, a round over two states every
/// column.
fn caveat(points: &[Measured]) -> Option<Caveat> {
    let mut said = Vec::new();
    let uneven = polled_unevenly(points);
    if !uneven.is_empty() {
        said.push(format!(
            "in a run of {}, a few workers cycled with the main thread while the rest waited \
             for a CPU, so the ratio is not one of sleep-and-wake cycles alone (short runs \
             are prone to it; longer ones, as `ksync-lab --repeat 3 sembench -r 2 -o \
             sysv,ksync`, measure the cycles)",
            uneven.join(", ")
        ));
    }
    let moved = state_changed(points);
    if moved {
        said.push(
            "the host moved the vCPUs between the runs of a round (a cache line's round trip \
             between two CPUs moved more than twofold)"
                .to_string(),
        );
    }
    (!said.is_empty()).then(|| Caveat {
        text: said.join("; and "),
        columns: if moved { Vec::new() } else { uneven },
    })
}

/// What one worker burn cost each backend: CPU time, context switches
/// (getrusage over the run, the whole process), and the backend's own
/// sleeps, wake calls, lock waits and polls.
fn breakdown(points: &[Measured]) -> Table {
    let mut table = Table::new([
        "backend",
        "cpu us",
        "kernel us",
        "switches vol",
        "switches invol",
        "futex sleeps",
        "wake calls",
        "lock waits",
        "polls",
        "main on cpu",
        "line trip ns",
    ]);
    for m in points {
        table.row(vec![
            m.record.params.get("backend").cloned().unwrap_or_default(),
            m.show_or_dash("cpu_us_per_burn", 2),
            m.show_or_dash("kernel_us_per_burn", 2),
            m.show_or_dash("voluntary_switches_per_burn", 3),
            m.show_or_dash("involuntary_switches_per_burn", 3),
            m.show_or_dash("sleeps_per_burn", 3),
            m.show_or_dash("wake_calls_per_burn", 3),
            m.show_or_dash("lock_waits_per_burn", 3),
            m.show_or_dash("polls_per_burn", 1),
            m.show_or_dash("main_cpu_share", 2),
            m.show_or_dash("line_trip_ns", 0),
        ]);
    }
    table.note(format!(
        "Per worker burn, over the measured run. cpu and switches: getrusage of the whole \
         process (main thread included; with --processes, plus the worker processes over their \
         whole lives, start and shutdown included). futex sleeps, wake calls (io_uring_enter or FUTEX_WAKE), \
         lock waits (an internal lock found taken) and polls (looks at a word before sleeping): \
         the backend's own counters; sysv keeps none (its sleeps and wakes happen inside one \
         semtimedop per burn and its share of the poster's calls). Wake-ups shared out among \
         the woken (ksync-sem and futex-batch; KSYNC_WAKE_SHARING=0|1|local, by default \
         `any` with 4 or more CPUs, `local` with 2 or 3: the woken on each CPU wake \
         the others there): {} in this run; wake calls then include the woken's. \
         main on cpu: the posting main thread's CPU time over the run's; it does not sleep \
         between posts, so below 1 it waited for a CPU (the main thread is not bound; the \
         workers bound to the CPU it runs on take their turns) or, for ksync's sets, for a \
         lock inside a post whose holder was preempted, and a poster that waits posts less. \
         line trip: a \
         cache line's round trip between the first two CPUs, measured just before each run \
         (`-` with one CPU); on a virtual machine it follows where the host put the vCPUs, \
         and every handshake between the poster and a polling worker pays it.",
        wake_sharing_name()
    ));
    table
}

/// `ksync-lab sembench`: each backend's sembench lines, then a comparison
/// table when there are several; one record per run.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let backends = args.backends()?;
    let config = args.config()?;
    if let Some(polls) = args.sleeper_spin {
        ksync::sem::set_sleeper_spin(polls);
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan(backends.len() as u64, config.run);
    let points = measure_all(lab, &backends, &config, args.sleeper_spin, true)?;
    let mut title = format!(
        "sembench -t {} -w {} -r {}",
        config.threads, config.wake, args.run
    );
    if let Some(p) = config.processes {
        title.push_str(&format!(" --processes {p}"));
    }
    if points.len() > 1 {
        let refs = if backends.iter().any(|b| b.name == FLOOR) {
            "sysv and the floor"
        } else {
            "sysv"
        };
        lab.print(&format!(
            "\n## {title}: worker burns per second, ratios to {refs}\n\n{}",
            table(&points).render()
        ));
    }
    lab.print(&format!(
        "\n## {title}: what one worker burn cost\n\n{}",
        breakdown(&points).render()
    ));
    Ok(())
}

/// `compare`'s sembench part: Spraul's `-t 250 -w 64` for `quick.seconds`
/// on every core backend (the kernel's, ksync's two and the raw futex); one
/// summary row.
pub struct InCompare;

impl ComparePart for InCompare {
    fn plan(&self, lab: &mut Lab, quick: &Quick) {
        lab.plan(sems::core().len() as u64, quick.duration());
    }

    fn run(&self, lab: &mut Lab, quick: &Quick) -> Result<Vec<SummaryRow>, String> {
        let config = Config::spraul_2010(quick.duration());
        let points = measure_all(lab, &sems::core(), &config, None, false)?;
        lab.print(&format!(
            "\n## sembench (Chris Mason's, as Manfred Spraul ran it in April 2010): -t 250 -w 64, \
             {} s per backend, worker burns per second\n\n{}",
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
        )
        .with_caveat(caveat(&points))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round of runs whose probes read `trips` (NaN: no probe).
    fn round(trips: &[f64]) -> Vec<Record> {
        trips
            .iter()
            .map(|&t| {
                let r = Record::new("sembench", "sembench -w 4", "sysv", false, 8);
                if t.is_finite() {
                    r.metric("line_trip_ns", t)
                } else {
                    r
                }
            })
            .collect()
    }

    fn marks(trips: &[f64]) -> Vec<f64> {
        let mut round = round(trips);
        mark_state_change(&mut round);
        round.iter().map(|r| r.get("trip_changed")).collect()
    }

    #[test]
    fn a_round_whose_line_trip_moved_twofold_is_marked_in_every_run() {
        assert_eq!(marks(&[45.0, 372.0, 44.0]), [1.0; 3]);
        assert_eq!(marks(&[45.0, 52.0, 44.0]), [0.0; 3]);
        assert_eq!(marks(&[370.0, 400.0]), [0.0; 2]);
        // Without a probe (one CPU) nothing can be said.
        assert_eq!(marks(&[f64::NAN, f64::NAN]), [0.0; 2]);
        assert_eq!(marks(&[45.0, f64::NAN]), [0.0; 2]);
    }

    #[test]
    fn the_summary_row_repeats_what_the_table_notes_say() {
        let point = |backend: &str, uneven: f64, trips: [f64; 2]| {
            let runs = trips.map(|t| {
                Record::new("sembench", "sembench -w 64", backend, false, 250)
                    .param("backend", backend)
                    .metric("line_trip_ns", t)
                    .metric("polled_unevenly", uneven)
            });
            let mut runs = runs.to_vec();
            mark_state_change(&mut runs);
            Measured::from_runs(&runs)
        };
        let even = [
            point("sysv", 0.0, [45.0, 50.0]),
            point("ksync-sem", 0.0, [44.0, 46.0]),
        ];
        assert_eq!(caveat(&even), None);
        let uneven = [
            point("sysv", 0.0, [45.0, 50.0]),
            point("ksync-sem", 1.0, [44.0, 46.0]),
        ];
        let said = caveat(&uneven).expect("an uneven run is a caveat");
        assert!(said.text.contains("in a run of ksync-sem,"), "{said:?}");
        assert!(!said.text.contains("vCPUs"), "{said:?}");
        assert_eq!(said.columns, ["ksync-sem"]);
        let moved = [
            point("sysv", 0.0, [45.0, 370.0]),
            point("ksync-sem", 0.0, [44.0, 46.0]),
        ];
        let said = caveat(&moved).expect("a round over two states is a caveat");
        assert!(said.text.contains("moved the vCPUs"), "{said:?}");
        assert!(said.columns.is_empty(), "{said:?}");
    }
}
