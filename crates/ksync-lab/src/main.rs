//! ksync-lab: the kernel's lock experiments, on your machine, beside the
//! locks people use today.
//!
//! `cargo run --release` runs `compare`, the default comparison.

mod bench;
mod locks;
mod machine;
mod peers;
mod rwsem;
mod table;

use clap::{Parser, Subcommand};
use locks::{LockEntry, Origin};
use machine::Machine;
use std::process::ExitCode;
use std::time::Duration;
use table::Table;

#[derive(Parser)]
#[command(
    name = "ksync-lab",
    version,
    about = "Reproduces the kernel's lock experiments with ksync beside std, parking_lot, spin and pthread"
)]
struct Cli {
    /// Relaxes a paravirt qspinlock waiter spins before it sleeps (the
    /// kernel's SPIN_THRESHOLD); default ksync's.
    #[arg(long, global = true)]
    pv_spin_threshold: Option<u32>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// The default: uncontended cost, 2 and 64 threads on one lock, the rwsem mixes (about a minute).
    Compare {
        /// Seconds per contended run.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
    },
    /// Uncontended lock + unlock cost of each lock, in nanoseconds.
    Uncontended {
        /// Comma-separated lock names (see `list`); default: all.
        #[arg(long, value_delimiter = ',')]
        locks: Vec<String>,
        /// Lock + unlock pairs per round.
        #[arg(long, default_value_t = 5_000_000)]
        iters: u64,
        /// Rounds; the best is reported.
        #[arg(long, default_value_t = 5)]
        rounds: u32,
    },
    /// N threads on one lock with a short critical section: throughput and fairness.
    Spin {
        /// Comma-separated lock names (see `list`); default: all.
        #[arg(long, value_delimiter = ',')]
        locks: Vec<String>,
        /// Comma-separated thread counts; more than the cores is the oversubscribed case.
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 16, 64])]
        threads: Vec<usize>,
        /// Seconds per run.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Relaxes spent inside the critical section besides the increment.
        #[arg(long, default_value_t = 0)]
        cs_work: u32,
    },
    /// Seed 002's reader-writer mixes: reads and writes taken in a fixed time.
    Rwsem {
        /// Comma-separated mixes: rw, r1, r2, ro, w1, wo; default: all.
        #[arg(long, value_delimiter = ',')]
        mixes: Vec<String>,
        /// Comma-separated reader-writer locks (see `list`); default: all.
        #[arg(long, value_delimiter = ',')]
        locks: Vec<String>,
        /// Seconds per mix and lock.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
    },
    /// The locks the lab knows.
    List,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(spins) = cli.pv_spin_threshold {
        ksync::spin::set_pv_spin_threshold(spins);
    }
    let result = match cli.command.unwrap_or(Command::Compare { seconds: 1.0 }) {
        Command::Compare { seconds } => compare(seconds),
        Command::Uncontended {
            locks,
            iters,
            rounds,
        } => chosen(&locks).map(|locks| {
            print_machine();
            print!("{}", uncontended_table(&locks, iters, rounds).0.render());
        }),
        Command::Spin {
            locks,
            threads,
            seconds,
            cs_work,
        } => chosen(&locks).and_then(|locks| {
            let duration = run_length(seconds)?;
            if threads.is_empty() || threads.contains(&0) {
                return Err("--threads needs thread counts of at least 1".into());
            }
            print_machine();
            for &n in &threads {
                println!("\n## {n} threads, {seconds} s, critical section: increment + {cs_work} relaxes\n");
                print!("{}", contended_table(&locks, n, duration, cs_work).0.render());
            }
            Ok(())
        }),
        Command::Rwsem {
            mixes,
            locks,
            seconds,
        } => run_length(seconds).and_then(|duration| {
            let mixes = chosen_mixes(&mixes)?;
            let locks = chosen_rw(&locks)?;
            print_machine();
            for mix in mixes {
                print!("{}", rwsem_table(mix, &locks, duration).0.render());
            }
            Ok(())
        }),
        Command::List => {
            println!("mutexes (compare, uncontended, spin):");
            for lock in locks::registry() {
                println!("  {:<18} {}", lock.name, lock.about);
            }
            println!("reader-writer locks (rwsem):");
            for lock in rwsem::registry() {
                println!("  {:<18} {}", lock.name, lock.about);
            }
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("ksync-lab: {message}");
            ExitCode::from(2)
        }
    }
}

/// The entries of `all` named in `names`, in that order; all of them when
/// `names` is empty. An unknown or repeated name is an error that lists the
/// known ones.
fn pick<T>(
    mut all: Vec<T>,
    names: &[String],
    name_of: fn(&T) -> &'static str,
    what: &str,
) -> Result<Vec<T>, String> {
    if names.is_empty() {
        return Ok(all);
    }
    let known: Vec<&str> = all.iter().map(name_of).collect();
    let mut chosen = Vec::with_capacity(names.len());
    for name in names {
        match all.iter().position(|e| name_of(e) == name) {
            Some(i) => chosen.push(all.remove(i)),
            None => {
                return Err(format!(
                    "unknown {what} '{name}' (or named twice); known: {}",
                    known.join(", ")
                ))
            }
        }
    }
    Ok(chosen)
}

fn chosen(names: &[String]) -> Result<Vec<LockEntry>, String> {
    pick(locks::registry(), names, |e| e.name, "lock")
}

fn chosen_rw(names: &[String]) -> Result<Vec<rwsem::RwEntry>, String> {
    pick(rwsem::registry(), names, |e| e.name, "reader-writer lock")
}

fn chosen_mixes(names: &[String]) -> Result<Vec<rwsem::Mix>, String> {
    pick(rwsem::MIXES.to_vec(), names, |m| m.name, "mix")
}

fn run_length(seconds: f64) -> Result<Duration, String> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(format!("--seconds must be in (0, 3600], not {seconds}"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn print_machine() {
    println!("machine: {}", Machine::detect());
}

/// One workload's result for each lock, higher is better, for the summary.
struct Scores {
    workload: String,
    values: Vec<(&'static str, Origin, f64)>,
}

impl Scores {
    fn best_peer(&self) -> Option<(&'static str, f64)> {
        self.values
            .iter()
            .filter(|v| v.1 == Origin::Peer)
            .map(|v| (v.0, v.2))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

fn uncontended_table(locks: &[LockEntry], iters: u64, rounds: u32) -> (Table, Scores) {
    eprintln!("measuring uncontended lock + unlock ({rounds} rounds of {iters})...");
    let measured: Vec<(&LockEntry, f64)> = locks
        .iter()
        .map(|l| (l, (l.uncontended)(iters, rounds)))
        .collect();
    let ns_of = |name: &str| measured.iter().find(|m| m.0.name == name).map(|m| m.1);
    let references = ["cas-floor", "parking_lot", "std"];
    let mut table = Table::new(
        ["lock", "ns / lock+unlock"]
            .into_iter()
            .map(String::from)
            .chain(
                references
                    .iter()
                    .filter(|r| ns_of(r).is_some())
                    .map(|r| format!("x {r}")),
            ),
    );
    for (lock, ns) in &measured {
        let mut row = vec![lock.name.to_string(), format!("{ns:.2}")];
        for r in references {
            if let Some(base) = ns_of(r) {
                row.push(format!("{:.2}", ns / base));
            }
        }
        table.row(row);
    }
    let scores = Scores {
        workload: "uncontended (1/ns)".into(),
        values: measured
            .iter()
            .map(|(l, ns)| (l.name, l.origin, 1.0 / ns))
            .collect(),
    };
    (table, scores)
}

fn contended_table(
    locks: &[LockEntry],
    threads: usize,
    duration: Duration,
    cs_work: u32,
) -> (Table, Scores) {
    let mut results = Vec::with_capacity(locks.len());
    let mut pv_lines = Vec::new();
    for lock in locks {
        eprintln!("  {threads} threads: {}...", lock.name);
        ksync::spin::reset_pv_stats();
        let result = (lock.contended)(threads, duration, cs_work);
        if lock.name == "pv-qspin" {
            let s = ksync::spin::pv_stats();
            let per_kop = |n: u64| n as f64 * 1000.0 / result.ops.max(1) as f64;
            pv_lines.push(format!(
                "pv-qspin lock events per 1000 acquisitions: slowpath {:.1}, steals {:.1}, \
                 halts {:.1} (queued {:.1}, head {:.1}), unlock kicks {:.1}, spurious wake-ups {:.1}",
                per_kop(s.slowpath),
                per_kop(s.steals()),
                per_kop(s.halts()),
                per_kop(s.wait_node),
                per_kop(s.wait_head),
                per_kop(s.kick_unlock),
                per_kop(s.spurious_wakeups()),
            ));
        }
        results.push((lock, result));
    }
    let scores = Scores {
        workload: format!("{threads} threads (Mops/s)"),
        values: results
            .iter()
            .map(|(l, r)| (l.name, l.origin, r.ops_per_sec()))
            .collect(),
    };
    let best = scores.best_peer();
    let mut table = Table::new([
        "lock".to_string(),
        "Mops/s".into(),
        best.map_or("x best peer".into(), |b| format!("x {}", b.0)),
        "min share".into(),
        "max share".into(),
        "exact".into(),
    ]);
    for (lock, r) in &results {
        let (min, max) = r.share_range();
        table.row(vec![
            lock.name.to_string(),
            format!("{:.3}", r.ops_per_sec() / 1e6),
            best.map_or("-".into(), |b| format!("{:.2}", r.ops_per_sec() / b.1)),
            format!("{min:.2}"),
            format!("{max:.2}"),
            if r.exact {
                "yes".into()
            } else {
                "NO: LOST UPDATES".into()
            },
        ]);
    }
    for line in pv_lines {
        table.note(line);
    }
    (table, scores)
}

fn rwsem_table(mix: rwsem::Mix, locks: &[rwsem::RwEntry], duration: Duration) -> (Table, Scores) {
    println!(
        "\n## rwsem mix {}: {} readers, {} writers, load {} us, interval {} us, {:.1} s\n",
        mix.name,
        mix.readers,
        mix.writers,
        mix.load_us,
        mix.interval_us,
        duration.as_secs_f64()
    );
    let mut results = Vec::with_capacity(locks.len());
    for lock in locks {
        eprintln!("  rwsem {}: {}...", mix.name, lock.name);
        results.push((lock, (lock.run)(mix, duration)));
    }
    let scores = Scores {
        workload: format!("rwsem {} (acq/s)", mix.name),
        values: results
            .iter()
            .map(|(l, r)| {
                let origin = if l.ksync { Origin::Ksync } else { Origin::Peer };
                (
                    l.name,
                    origin,
                    (r.reads + r.writes) as f64 / duration.as_secs_f64(),
                )
            })
            .collect(),
    };
    let best = scores.best_peer();
    let mut table = Table::new([
        "lock".to_string(),
        "reads taken".into(),
        "writes taken".into(),
        best.map_or("x best peer".into(), |b| format!("x {}", b.0)),
        "min/max thread".into(),
        "longest read wait ms".into(),
        "longest write wait ms".into(),
        "exact".into(),
    ]);
    for ((lock, r), score) in results.iter().zip(&scores.values) {
        table.row(vec![
            lock.name.to_string(),
            r.reads.to_string(),
            r.writes.to_string(),
            best.map_or("-".into(), |b| format!("{:.2}", score.2 / b.1)),
            format!("{:.2}", r.min_over_max()),
            format!("{:.3}", r.longest_read_wait.as_secs_f64() * 1e3),
            format!("{:.3}", r.longest_write_wait.as_secs_f64() * 1e3),
            if r.exact {
                "yes".into()
            } else {
                "NO: EXCLUSION FAILED".into()
            },
        ]);
    }
    (table, scores)
}

fn compare(seconds: f64) -> Result<(), String> {
    let duration = run_length(seconds)?;
    let locks = locks::registry();
    print_machine();
    println!("\n## Uncontended lock + unlock (best of 5 rounds of 2,000,000)\n");
    let (table, uncontended) = uncontended_table(&locks, 2_000_000, 5);
    print!("{}", table.render());
    let mut all_scores = vec![uncontended];
    for threads in [2, 64] {
        println!(
            "\n## {threads} threads on one lock, {seconds} s, critical section: one increment\n"
        );
        let (table, scores) = contended_table(&locks, threads, duration, 0);
        print!("{}", table.render());
        all_scores.push(scores);
    }
    let rw_locks = rwsem::registry();
    for mix in rwsem::MIXES {
        let (table, scores) = rwsem_table(mix, &rw_locks, duration / 2);
        print!("{}", table.render());
        all_scores.push(scores);
    }
    println!("\n## Summary: each ksync lock as a multiple of the best peer (> 1 is faster)\n");
    let mut summary = Table::new(
        std::iter::once("lock".to_string()).chain(all_scores.iter().map(|s| s.workload.clone())),
    );
    let mut best_row = vec!["best peer".to_string()];
    for scores in &all_scores {
        best_row.push(scores.best_peer().map_or("-".into(), |b| b.0.to_string()));
    }
    summary.row(best_row);
    let ksync_names = locks
        .iter()
        .filter(|l| l.origin == Origin::Ksync)
        .map(|l| l.name)
        .chain(rw_locks.iter().filter(|l| l.ksync).map(|l| l.name));
    for name in ksync_names {
        let mut row = vec![name.to_string()];
        for scores in &all_scores {
            let ours = scores
                .values
                .iter()
                .find(|v| v.0 == name && v.1 == Origin::Ksync)
                .map(|v| v.2);
            row.push(match (ours, scores.best_peer()) {
                (Some(ours), Some((_, best))) => format!("{:.2}", ours / best),
                _ => "-".into(),
            });
        }
        summary.row(row);
    }
    print!("{}", summary.render());
    Ok(())
}
