//! `torture`: the kernel's locktorture (`kernel/locking/locktorture.c`) for
//! user space.
//!
//! Writer threads (and reader threads, for reader-writer locks) hammer one
//! lock for a fixed time. Inside, each writer sets a "write held" flag and
//! finds it already set if another writer is in too, and each side checks
//! for the other class: any such sighting is an exclusion violation and
//! fails the test (`Fail: N !!!`, exit status 1). Critical sections are
//! usually short with an occasional long hold (`--long-hold-ms`, with the
//! kernel's probabilities, which make the queue pile up), an occasional
//! yield inside, and a one-in-a-million sleep outside; every `--stutter`
//! seconds all threads pause for as long, so the lock keeps going from idle
//! to saturated. At the end it prints the kernel's lines,
//!
//! ```text
//! Writes:  Total: 1234  Max/Min: 400/200   Fail: 0
//! ```
//!
//! with `???` after Max/Min when `max / 2 > min` (a starved thread; flagged,
//! as in the kernel, not failed), and `<lock>-torture:--- End of test:
//! SUCCESS` or `FAILURE`. The writers also count their increments of the
//! protected counter: a lost update fails the test as well.
//!
//! Differences from the kernel: threads instead of kthreads, no RT boost,
//! no CPU hotplug or shuffling, no nested locks; sleeping reader-writer
//! locks use the kernel's rwlock delays (2 µs write, 10 µs read, occasional
//! long hold) rather than its rwsem delays of many milliseconds per
//! acquisition, so that a run of seconds makes millions of acquisitions.
//! The `busted` lock (the kernel's `lock_busted`) lets everyone in, to show
//! that the check fails when it must.

use super::options;
use crate::output::lab::Lab;
use crate::output::record::Record;
use crate::output::table::Table;
use crate::peers::mutex::registry::{self as mutexes, MutexEntry};
use crate::peers::rwlock::registry::{self as rwlocks, RwEntry};
use crate::workloads::torture::{ExclusiveTorture, RwTorture, TortureConfig, TortureResult};
use std::time::Duration;

/// `torture`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated mutexes (see `list`; `busted` is the broken self-test
    /// lock). Default, with --rw-locks also empty: every ksync lock.
    #[arg(long, value_delimiter = ',')]
    pub locks: Vec<String>,
    /// Comma-separated reader-writer locks (see `list`).
    #[arg(long, value_delimiter = ',')]
    pub rw_locks: Vec<String>,
    /// Writer threads; default twice the cores (exclusive locks) or the
    /// cores (reader-writer locks), as the kernel's nwriters_stress.
    #[arg(long)]
    pub writers: Option<usize>,
    /// Reader threads for reader-writer locks; default the cores.
    #[arg(long)]
    pub readers: Option<usize>,
    /// Seconds per lock.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// The occasional long critical section, milliseconds (kernel: long_hold=100); 0 for none.
    #[arg(long, default_value_t = 100)]
    pub long_hold_ms: u64,
    /// Seconds of running between pauses of the same length (kernel: stutter); 0 for none.
    #[arg(long, default_value_t = 1.0)]
    pub stutter: f64,
}

enum Target {
    Mutex(&'static MutexEntry),
    Rw(&'static RwEntry),
}

/// Runs `torture`; an exclusion violation marks the lab failed (exit 1).
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let duration = options::seconds("--seconds", args.seconds)?;
    if !(args.stutter.is_finite() && args.stutter >= 0.0 && args.stutter <= 3600.0) {
        return Err(format!(
            "--stutter must be in [0, 3600] seconds, not {}",
            args.stutter
        ));
    }
    if args.long_hold_ms > 10_000 {
        return Err(format!(
            "--long-hold-ms must be at most 10000, not {}",
            args.long_hold_ms
        ));
    }
    let stutter = Duration::from_secs_f64(args.stutter);
    let nothing_named = args.locks.is_empty() && args.rw_locks.is_empty();
    let mut targets = Vec::new();
    if nothing_named || !args.locks.is_empty() {
        let mutexes = mutexes::pick_for_torture(&args.locks)?;
        targets.extend(mutexes.into_iter().map(Target::Mutex));
    }
    if nothing_named || !args.rw_locks.is_empty() {
        let rws = rwlocks::chosen(&args.rw_locks, |e| e.core && e.is_ksync())?;
        targets.extend(rws.into_iter().map(Target::Rw));
    }
    for (flag, n) in [("--writers", args.writers), ("--readers", args.readers)] {
        if let Some(n) = n {
            if n > 4096 {
                return Err(format!("{flag} must be at most 4096, not {n}"));
            }
        }
    }
    if args.writers == Some(0) {
        return Err("--writers must be at least 1".into());
    }
    let cores = lab.machine().cores;
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan(targets.len() as u64, duration);
    let mut summary = Table::new([
        "lock",
        "writers",
        "readers",
        "writes",
        "w max/min (??? starved)",
        "reads",
        "r max/min",
        "fail",
        "longest write wait ms",
        "result",
    ]);
    let mut failures = Vec::new();
    for target in &targets {
        let (name, is_rw, ksync) = match target {
            Target::Mutex(e) => (e.name, false, e.is_ksync()),
            Target::Rw(e) => (e.name, true, e.is_ksync()),
        };
        let writers = args
            .writers
            .unwrap_or(if is_rw { cores } else { 2 * cores });
        let readers = if is_rw {
            args.readers.unwrap_or(cores)
        } else {
            0
        };
        let cfg = TortureConfig {
            writers,
            readers,
            duration,
            long_hold: Duration::from_millis(args.long_hold_ms),
            stutter,
        };
        let params = format!(
            "nwriters_stress={writers} nreaders_stress={readers} long_hold={} stutter={} seconds={}",
            args.long_hold_ms, args.stutter, args.seconds
        );
        lab.print(&format!(
            "\n## {name}-torture: {writers} writers, {readers} readers, {} s, long hold {} ms, stutter {} s\n\n",
            args.seconds, args.long_hold_ms, args.stutter
        ));
        let mut outcomes = Vec::new();
        let measured = lab.measure(&format!("torture {name}"), || {
            let r = match target {
                Target::Mutex(e) => e.dispatch(ExclusiveTorture(&cfg)),
                Target::Rw(e) => e.dispatch(RwTorture(&cfg)),
            };
            let record = record(name, ksync, &cfg, &r, args.long_hold_ms, args.stutter);
            outcomes.push(r);
            record
        });
        let mut failed = false;
        for r in &outcomes {
            lab.print(&kernel_lines(r, is_rw));
            failed |= r.failed();
        }
        let verdict = if failed { "FAILURE" } else { "SUCCESS" };
        lab.print(&format!(
            "{name}-torture:--- End of test: {verdict}: {params}\n"
        ));
        if failed {
            failures.push(name);
        }
        let fails = measured.max.get("write_fail").copied().unwrap_or(0.0)
            + measured.max.get("read_fail").copied().unwrap_or(0.0);
        summary.row(vec![
            name.to_string(),
            writers.to_string(),
            readers.to_string(),
            measured.show("writes", 0),
            format!(
                "{}/{}{}",
                measured.get("write_max"),
                measured.get("write_min"),
                if measured.max.get("starved").copied().unwrap_or(0.0) > 0.0 {
                    " ???"
                } else {
                    ""
                }
            ),
            measured.show("reads", 0),
            if is_rw {
                format!("{}/{}", measured.get("read_max"), measured.get("read_min"))
            } else {
                "-".into()
            },
            format!("{fails}"),
            measured.show_scaled("longest_write_wait_us", 1e-3, 1),
            verdict.to_string(),
        ]);
    }
    if targets.len() > 1 || lab.repeat() > 1 {
        lab.print(&format!("\n## Torture summary\n\n{}", summary.render()));
    }
    if !failures.is_empty() {
        lab.fail(format!(
            "torture FAILED (exclusion violated or updates lost) for: {}",
            failures.join(", ")
        ));
    }
    Ok(())
}

fn record(
    name: &str,
    ksync: bool,
    cfg: &TortureConfig,
    r: &TortureResult,
    long_hold_ms: u64,
    stutter: f64,
) -> Record {
    let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0) as f64;
    let min = |v: &[u64]| v.iter().copied().min().unwrap_or(0) as f64;
    Record::new(
        "torture",
        &format!("{} writers, {} readers", cfg.writers, cfg.readers),
        name,
        ksync,
        cfg.writers + cfg.readers,
    )
    .param("seconds", cfg.duration.as_secs_f64())
    .param("long_hold_ms", long_hold_ms)
    .param("stutter_s", stutter)
    .metric("writes", r.writes.iter().sum::<u64>() as f64)
    .metric("reads", r.reads.iter().sum::<u64>() as f64)
    .metric("write_max", max(&r.writes))
    .metric("write_min", min(&r.writes))
    .metric("read_max", max(&r.reads))
    .metric("read_min", min(&r.reads))
    .metric("write_fail", r.write_fails as f64)
    .metric("read_fail", r.read_fails as f64)
    .metric("lost_updates", f64::from(u8::from(r.lost_updates)))
    .metric(
        "starved",
        f64::from(u8::from(starved(&r.writes) || starved(&r.reads))),
    )
    .metric(
        "longest_write_wait_us",
        r.longest_write_wait.as_secs_f64() * 1e6,
    )
    .metric(
        "longest_read_wait_us",
        r.longest_read_wait.as_secs_f64() * 1e6,
    )
    .metric("success", f64::from(u8::from(!r.failed())))
}

/// The kernel's unfairness flag: the busiest thread took more than twice
/// what the least busy one did.
fn starved(counts: &[u64]) -> bool {
    let max = counts.iter().copied().max().unwrap_or(0);
    let min = counts.iter().copied().min().unwrap_or(0);
    max / 2 > min
}

/// locktorture's statistics lines.
fn kernel_lines(r: &TortureResult, is_rw: bool) -> String {
    let line = |label: &str, counts: &[u64], fails: u64| {
        let total: u64 = counts.iter().sum();
        let max = counts.iter().copied().max().unwrap_or(0);
        let min = counts.iter().copied().min().unwrap_or(0);
        format!(
            "{label}:  Total: {total}  Max/Min: {max}/{min} {}  Fail: {fails} {}\n",
            if starved(counts) { "???" } else { "   " },
            if fails > 0 { "!!!" } else { "" }
        )
    };
    let mut out = line("Writes", &r.writes, r.write_fails);
    if is_rw {
        out.push_str(&line("Reads ", &r.reads, r.read_fails));
    }
    if r.lost_updates {
        out.push_str("Lost updates: the protected counter disagrees with the writes counted !!!\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starvation_flag_follows_the_kernel() {
        assert!(starved(&[10, 4]));
        assert!(!starved(&[10, 5]));
        assert!(kernel_lines(
            &TortureResult {
                writes: vec![10, 1],
                write_fails: 2,
                ..Default::default()
            },
            false
        )
        .contains("Max/Min: 10/1 ???  Fail: 2 !!!"));
    }
}
