//! ksync-lab: the kernel's lock experiments, on your machine, beside the
//! locks people use today.
//!
//! `cargo run --release` runs `compare`, the default comparison.
//!
//! The layout, dependencies pointing one way, down this list:
//!
//! - `experiments/`: one command each, with its clap options; `compare`
//!   composes the others' quick parts;
//! - `workloads/`: the measured loops, generic over the lock or backend
//!   type, knowing no registry;
//! - `peers/`: one abstraction per kind of primitive (mutex, reader-writer
//!   lock, semaphore backend), ksync's and the peers' implementations, and
//!   the registries of their names;
//! - `output/`: records, medians, tables, JSON/CSV, plots, progress;
//! - `harness/`: CPU affinity, thread crews, clocks, futex calls, the
//!   machine description.

mod experiments;
mod harness;
mod output;
mod peers;
mod workloads;

use clap::{Parser, Subcommand};
use experiments::{
    backoff, compare, dining, ipcrm, ipcs, list, rwsem, sembench, semop, show, spin, torture,
    uncontended, wake,
};
use output::files::Outputs;
use output::lab::Lab;
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Waiman Long's spinlock micro-benchmark (unfair qspinlock v10, LKML, May 2014):
    /// N threads, fixed rounds each, elapsed ms. A lock whose threads are still
    /// inside it 60 s after the run ended is reported stuck (exit status 3).
    Spin(spin::Args),
    /// Uncontended lock + unlock cost of each lock, in nanoseconds.
    Uncontended(uncontended::Args),
    /// The reader-writer mixes of Howells and Arcangeli (rw_semaphores, optimisations,
    /// LKML, April 2001): reads and writes taken in a fixed time.
    Rwsem(rwsem::Args),
    /// Rik van Riel's proportional backoff for ticket locks (auto tune spinlock backoff
    /// delay factor, LKML, January 2013): embedded lock, two-lock mix.
    Backoff(backoff::Args),
    /// locktorture for user space: hammer a lock, check exclusion, flag starvation.
    Torture(torture::Args),
    /// Re-read a --json report: print its records, re-write --csv or --plot from it.
    Show(show::Args),
    /// Chris Mason's sembench, as Manfred Spraul ran it for his April 2010 ipc/sem.c
    /// series: one thread posts batches of sleeping workers.
    Sembench(sembench::Args),
    /// Wake-up experiments: Kenneth Chen's deep wait list (ipc semaphore optimization,
    /// LKML, June 2003), bulk wake-up of N sleepers.
    Wake(wake::Args),
    /// Uncontended semaphore down + up: ksync::sem beside the kernel's SysV semaphores and sem_t.
    Semop(semop::Args),
    /// Calls on two semaphores from many threads: Dijkstra's dining philosophers taking two
    /// forks in one call, and calls that never block.
    Dining(dining::Args),
    /// The locks, mixes and semaphore backends the lab knows.
    List,
    /// ksync's process-shared semaphore sets ($KSYNC_SEM_DIR, else /dev/shm/ksync-sem), like
    /// `ipcs -s`; `-i ID` shows one set's semaphores and undo adjustments.
    Ipcs(ipcs::Args),
    /// Removes ksync's process-shared semaphore sets, like `ipcrm`: `-s ID`, `-S KEY`, `--all`.
    Ipcrm(ipcrm::Args),
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if cli.command.is_none() {
        // No subcommand: `compare` with its defaults, keeping the global options.
        cli = Cli::parse_from(std::env::args_os().chain([std::ffi::OsString::from("compare")]));
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
        Command::Compare(args) => compare::run(&mut lab, args),
        Command::Spin(args) => spin::run(&mut lab, args),
        Command::Uncontended(args) => uncontended::run(&mut lab, args),
        Command::Rwsem(args) => rwsem::run(&mut lab, args),
        Command::Backoff(args) => backoff::run(&mut lab, args),
        Command::Torture(args) => torture::run(&mut lab, args),
        // `show` re-writes --csv and --plot from the report it reads.
        Command::Show(args) => show::run(
            args,
            &Outputs {
                json: None,
                ..outputs.clone()
            },
        ),
        Command::Sembench(args) => sembench::run(&mut lab, args),
        Command::Wake(args) => wake::run(&mut lab, args),
        Command::Semop(args) => semop::run(&mut lab, args),
        Command::Dining(args) => dining::run(&mut lab, args),
        Command::Ipcs(args) => ipcs::run(&mut lab, args, &outputs),
        Command::Ipcrm(args) => ipcrm::run(&mut lab, args, &outputs),
        Command::List => {
            list::run();
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

/// `--repeat` checked: 1 to 1000.
fn check_repeat(repeat: u32) -> Result<(), String> {
    if !(1..=1000).contains(&repeat) {
        return Err(format!("--repeat must be from 1 to 1000, not {repeat}"));
    }
    Ok(())
}
