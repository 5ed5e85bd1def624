//! ksync-lab: the kernel's lock experiments, on your machine, beside the
//! locks people use today.
//!
//! `cargo run --release` runs `compare`, the default comparison.
//!
//! One module per experiment (`compare`, `spinbench`, `rwsem`, `backoff`,
//! `torture`, `sembench`, `wake`), each with its clap `Args` and a `run`;
//! the lock adapters in `peers`, `locks` and `rwsem`; the results pipeline
//! (`--json`, `--csv`, `--plot`, `--repeat`, progress bar) in `report` and
//! `plot`.

mod backoff;
mod bench;
mod compare;
mod harness;
mod locks;
mod output;
mod peers;
mod rwsem;
mod sembench;
mod semop;
mod spinbench;
mod sysv;
mod torture;
mod wake;

use clap::{Parser, Subcommand};
use output::files::{resolve_output, Outputs};
use output::lab::Lab;
use output::report::Report;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Parts other modules add to `compare` (each returns summary rows).
const COMPARE_EXTRAS: &[compare::Extra] = &[sembench::compare_extra];

#[derive(Parser)]
#[command(
    name = "ksync-lab",
    version,
    about = "Reproduces the kernel's lock experiments with ksync beside std, parking_lot, spin and pthread",
    after_help = "Output files: a relative --json/--csv/--plot path is written under lab-results/ at the \
                  root of the cargo workspace containing the current directory (or under \
                  $KSYNC_LAB_RESULTS, or ./lab-results outside a workspace); an absolute path is used as given."
)]
struct Cli {
    /// Relaxes a paravirt qspinlock waiter spins before it sleeps (the
    /// kernel's SPIN_THRESHOLD); default ksync's.
    #[arg(long, global = true)]
    pv_spin_threshold: Option<u32>,
    /// Write every run's raw figures and the machine to this JSON file.
    #[arg(long, global = true, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every run's raw figures and the machine to this CSV file, one line per run.
    #[arg(long, global = true, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Draw throughput against threads, one line per lock, to FILE.svg or FILE.png.
    #[arg(long, global = true, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Run every point N times; tables show the median and [min-max].
    #[arg(long, global = true, default_value_t = 1, value_name = "N")]
    repeat: u32,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// The default: a quick run of every experiment, every ksync primitive
    /// beside its peers, ending with one summary table (about a minute).
    Compare(compare::Args),
    /// Seed 001's spinlock micro-benchmark: N threads, fixed rounds each, elapsed ms.
    Spin(spinbench::Args),
    /// Uncontended lock + unlock cost of each lock, in nanoseconds.
    Uncontended(spinbench::UncontendedArgs),
    /// Seed 002's reader-writer mixes: reads and writes taken in a fixed time.
    Rwsem(rwsem::Args),
    /// Seed 004's proportional backoff for ticket locks: embedded lock, two-lock mix.
    Backoff(backoff::Args),
    /// locktorture for user space: hammer a lock, check exclusion, flag starvation.
    Torture(torture::Args),
    /// Re-read a --json report: print its records, re-write --csv or --plot from it.
    Show(ShowArgs),
    /// Chris Mason's sembench (seed 000): one thread posts batches of sleeping workers.
    Sembench(sembench::Args),
    /// Wake-up experiments: seed 003's deep wait list, bulk wake-up of N sleepers.
    Wake(wake::Args),
    /// Uncontended semaphore down + up: ksync::sem beside the kernel's SysV semaphores and sem_t.
    Semop(semop::Args),
    /// The locks the lab knows.
    List,
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if cli.command.is_none() {
        // No subcommand: `compare` with its defaults, keeping the global options.
        cli = Cli::parse_from(std::env::args_os().chain([std::ffi::OsString::from("compare")]));
    }
    if let Some(spins) = cli.pv_spin_threshold {
        ksync::spin::set_pv_spin_threshold(spins);
    }
    let outputs = Outputs {
        json: cli.json.clone(),
        csv: cli.csv.clone(),
        plot: cli.plot.clone(),
    };
    if let Err(message) = check_repeat(cli.repeat).and_then(|()| outputs.check()) {
        eprintln!("ksync-lab: {message}");
        return ExitCode::from(2);
    }
    let mut lab = Lab::new(cli.repeat);
    let Some(command) = cli.command else {
        eprintln!("ksync-lab: no command (see --help)");
        return ExitCode::from(2);
    };
    let result = match command {
        Command::Compare(args) => compare::run(&mut lab, args, COMPARE_EXTRAS),
        Command::Spin(args) => spinbench::run(&mut lab, args),
        Command::Uncontended(args) => spinbench::run_uncontended(&mut lab, args),
        Command::Rwsem(args) => rwsem::run(&mut lab, args),
        Command::Backoff(args) => backoff::run(&mut lab, args),
        Command::Torture(args) => torture::run(&mut lab, args),
        Command::Show(args) => show(
            args,
            &Outputs {
                json: None,
                ..outputs.clone()
            },
        ),
        Command::Sembench(args) => sembench::run(&mut lab, args),
        Command::Wake(args) => wake::run(&mut lab, args),
        Command::Semop(args) => semop::run(&mut lab, args),
        Command::List => {
            list();
            Ok(())
        }
    };
    if let Err(message) = result {
        drop(lab);
        eprintln!("ksync-lab: {message}");
        return ExitCode::from(2);
    }
    let failure = lab.failure().map(String::from);
    let command_line = std::env::args().skip(1).collect();
    let report = lab.finish(command_line);
    if !report.records.is_empty() {
        if let Err(message) = outputs.write(&report) {
            eprintln!("ksync-lab: {message}");
            return ExitCode::from(2);
        }
    }
    match failure {
        Some(message) => {
            eprintln!("ksync-lab: {message}");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}

/// `show`'s options.
#[derive(clap::Args, Debug)]
struct ShowArgs {
    /// A report written by --json (a relative path is looked up under the results folder
    /// first, then as given).
    file: PathBuf,
}

/// Re-reads a JSON report, prints its records, and re-writes --csv/--plot from it.
fn show(args: ShowArgs, outputs: &Outputs) -> Result<(), String> {
    let resolved = resolve_output(&args.file);
    let path = if resolved.exists() {
        resolved
    } else {
        args.file.clone()
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report = Report::from_json(&text)?;
    println!(
        "{} {} `{}`, repeat {}, machine: {}",
        report.tool,
        report.version,
        report.command.join(" "),
        report.repeat,
        report.machine
    );
    let mut t = output::table::Table::new([
        "experiment",
        "workload",
        "lock",
        "threads",
        "repeat",
        "metrics",
    ]);
    for r in &report.records {
        let metrics: Vec<String> = r
            .metrics
            .iter()
            .map(|(k, v)| format!("{k}={v:.4}"))
            .collect();
        t.row(vec![
            r.experiment.clone(),
            r.workload.clone(),
            r.lock.clone(),
            r.threads.to_string(),
            r.repeat.to_string(),
            metrics.join(" "),
        ]);
    }
    print!("\n{}", t.render());
    if !report.summary.is_empty() {
        print!(
            "\n{}",
            output::summary::summary_table(&report.summary).render()
        );
    }
    outputs.write(&report)
}

/// `--repeat` checked: 1 to 1000.
fn check_repeat(repeat: u32) -> Result<(), String> {
    if !(1..=1000).contains(&repeat) {
        return Err(format!("--repeat must be from 1 to 1000, not {repeat}"));
    }
    Ok(())
}

/// `list`: every lock and mix the lab knows.
fn list() {
    println!("mutexes (compare, spin, uncontended, backoff, torture --locks):");
    for lock in locks::registry_with_busted() {
        let tag = match lock.origin {
            locks::Origin::Ksync if lock.core => "ksync",
            locks::Origin::Ksync => "ksync variant",
            locks::Origin::Peer => "peer",
            locks::Origin::Floor => "floor",
            locks::Origin::Broken => "torture only",
        };
        println!("  {:<26} {:<14} {}", lock.name, tag, lock.about);
    }
    println!("reader-writer locks (rwsem, torture --rw-locks):");
    for lock in rwsem::all() {
        let tag = match (lock.ksync, lock.core) {
            (true, true) => "ksync",
            (true, false) => "ksync variant",
            (false, _) => "peer",
        };
        println!("  {:<26} {:<14} {}", lock.name, tag, lock.about);
    }
    println!("rwsem mixes (seed 002):");
    for m in rwsem::MIXES {
        println!(
            "  {:<26} {} readers, {} writers, load {} us, interval {} us",
            m.name, m.readers, m.writers, m.load_us, m.interval_us
        );
    }
}

/// A duration option in seconds, checked: (0, 3600].
pub fn seconds_arg(flag: &str, seconds: f64) -> Result<Duration, String> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(format!(
            "{flag} must be in (0, 3600] seconds, not {seconds}"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}
