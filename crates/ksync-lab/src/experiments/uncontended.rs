//! `uncontended`: the cost of an uncontended lock + unlock of each mutex,
//! beside the bare compare-and-swap floor and the everyday peers, and the
//! cost of lock statistics (`X+stat` beside `X`).

use super::{usable, ComparePart, Quick};
use crate::output::lab::Lab;
use crate::output::record::{Measured, Record};
use crate::output::summary::SummaryRow;
use crate::output::table::Table;
use crate::peers::mutex::registry::{self as mutexes, MutexEntry};
use crate::peers::registry::stat_base;
use crate::workloads::uncontended::Uncontended;
use std::time::Duration;

/// `uncontended`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated lock names (see `list`); default: every core lock.
    #[arg(long, value_delimiter = ',')]
    pub locks: Vec<String>,
    /// Lock + unlock pairs per round.
    #[arg(long, default_value_t = 5_000_000)]
    pub iters: u64,
    /// Rounds; the best is reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
}

/// The bound ksync sets on the uncontended cost of `Stat`: at most this
/// many times the bare lock's.
pub const STAT_OVERHEAD_TARGET: f64 = 1.3;

/// Measures the uncontended cost of `locks` and returns the table and points.
/// Each `X+stat...` entry measured beside `X` also gets its ratio to `X`
/// (the cost of the lock statistics), in a column and a note.
pub fn uncontended_table(
    lab: &mut Lab,
    locks: &[&MutexEntry],
    iters: u64,
    rounds: u32,
) -> (Table, Vec<Measured>) {
    let points: Vec<Measured> = locks
        .iter()
        .map(|l| {
            lab.measure(&format!("uncontended {}", l.name), || {
                Record::new("uncontended", "lock + unlock", l.name, l.is_ksync(), 1)
                    .param("iters", iters)
                    .param("rounds", rounds)
                    .metric("ns", l.dispatch(Uncontended { iters, rounds }))
            })
        })
        .collect();
    let ns_of = |name: &str| {
        points
            .iter()
            .find(|m| m.record.lock == name)
            .map(|m| m.get("ns"))
    };
    let references = ["cas-floor", "parking_lot", "std"];
    // `X+stat...` measured beside `X`: the cost of the statistics.
    let overhead = |p: &Measured| {
        let base = stat_base(&p.record.lock)?;
        Some((base.to_string(), p.get("ns") / ns_of(base)?))
    };
    let any_overhead = points.iter().any(|p| overhead(p).is_some());
    let mut table = Table::new(
        ["lock", "ns / lock+unlock"]
            .into_iter()
            .map(String::from)
            .chain(
                references
                    .iter()
                    .filter(|r| ns_of(r).is_some())
                    .map(|r| format!("x {r}")),
            )
            .chain(any_overhead.then(|| "x bare lock".to_string())),
    );
    for p in &points {
        let mut row = vec![p.record.lock.clone(), p.show("ns", 2)];
        for r in references {
            if let Some(base) = ns_of(r) {
                row.push(format!("{:.2}", p.get("ns") / base));
            }
        }
        if any_overhead {
            row.push(overhead(p).map_or("-".into(), |(_, r)| format!("{r:.2}")));
        }
        table.row(row);
    }
    for p in &points {
        if let Some((base, ratio)) = overhead(p) {
            let verdict = if ratio <= STAT_OVERHEAD_TARGET {
                "within"
            } else {
                "OVER"
            };
            table.note(format!(
                "{} / {base} = {ratio:.2}x (target <= {STAT_OVERHEAD_TARGET}x: {verdict})",
                p.record.lock
            ));
        }
    }
    (table, points)
}

/// Runs `uncontended`.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let locks = mutexes::chosen(&args.locks)?;
    if args.iters == 0 || args.iters > 10_000_000_000 || args.rounds == 0 || args.rounds > 1000 {
        return Err(format!(
            "--iters must be from 1 to 10^10 and --rounds from 1 to 1000, not {} and {}",
            args.iters, args.rounds
        ));
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan(
        locks.len() as u64,
        Duration::from_nanos(args.iters * u64::from(args.rounds) * 10),
    );
    let (table, _) = uncontended_table(lab, &locks, args.iters, args.rounds);
    lab.print(&format!(
        "\n## Uncontended lock + unlock (best of {} rounds of {})\n\n{}",
        args.rounds,
        args.iters,
        table.render()
    ));
    Ok(())
}

/// `compare`'s first part: the uncontended cost of every core lock.
pub struct InCompare;

/// Lock + unlock pairs per round, and rounds, in `compare`.
const QUICK: (u64, u32) = (1_000_000, 5);

impl ComparePart for InCompare {
    fn plan(&self, lab: &mut Lab, _quick: &Quick) {
        lab.plan(mutexes::core().len() as u64, Duration::from_millis(60));
    }

    fn run(&self, lab: &mut Lab, _quick: &Quick) -> Result<Vec<SummaryRow>, String> {
        let locks = mutexes::core();
        let (iters, rounds) = QUICK;
        let (table, points) = uncontended_table(lab, &locks, iters, rounds);
        lab.print(&format!(
            "\n## Uncontended lock + unlock (best of {rounds} rounds of {iters})\n\n{}",
            table.render()
        ));
        Ok(vec![SummaryRow::from_measured(
            "uncontended lock + unlock",
            "ns",
            "ns",
            1.0,
            false,
            &usable(&points, &locks),
        )])
    }
}
