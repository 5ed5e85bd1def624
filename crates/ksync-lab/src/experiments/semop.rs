//! `semop`: the uncontended cost of a semaphore down + up pair, ksync's
//! `SemSet` and process-shared `SharedSemSet` beside the kernel's System V
//! semaphores and glibc's `sem_t`.
//!
//! One thread takes and gives back one semaphore (value 1) in a loop: the
//! cost a program pays for a semaphore nobody else wants. ksync's single
//! operation is one compare-and-swap here; the kernel's is a system call.
//! Also a call on two semaphores, for the backends with System V semantics:
//! in `SemSet` a quiet call (the lower semaphore locked, the higher one
//! swapped, the lower one released with a store), in `SharedSemSet` a call
//! under the set's lock, in the kernel a complex operation.

use crate::output::lab::Lab;
use crate::output::record::{ratio_to, Record};
use crate::output::table::Table;
use crate::peers::sem::registry::{self as sems, SemEntry, KERNEL};
use crate::workloads::semop::{cas_pair_ns, PairCost};
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Down + up pairs per round for ksync's sets and sem_t (the kernel does 1/50 of them).
    #[arg(long, default_value_t = 2_000_000)]
    pub iters: u64,
    /// Rounds; the best is reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
}

/// The backends measured, in table order.
const BACKENDS: [&str; 4] = ["ksync-sem", "ksync-shared", "sysv", "posix-sem"];

/// The row of the floor: two bare compare-and-swaps per down + up.
const FLOOR: &str = "two-cas-floor";

/// Pairs the kernel's backend runs, relative to the others: a system call
/// costs about a hundred times a compare-and-swap.
const KERNEL_SHARE: u64 = 50;

pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    if args.iters < KERNEL_SHARE
        || args.iters > 10_000_000_000
        || args.rounds == 0
        || args.rounds > 1000
    {
        return Err(format!(
            "--iters must be from {KERNEL_SHARE} to 10^10 and --rounds from 1 to 1000, not {} and {}",
            args.iters, args.rounds
        ));
    }
    let backends: Vec<&'static SemEntry> = BACKENDS
        .iter()
        .map(|name| sems::by_name(name).ok_or_else(|| format!("no backend {name}")))
        .collect::<Result<_, _>>()?;
    lab.print(&format!("machine: {}\n", lab.machine()));
    // One semaphore per call on every backend, two on the System V ones.
    let cases: Vec<(u16, &SemEntry)> = backends
        .iter()
        .map(|&b| (1, b))
        .chain(
            backends
                .iter()
                .filter(|b| b.has_sysv_semantics())
                .map(|&b| (2, b)),
        )
        .collect();
    lab.plan(
        cases.len() as u64 + 1,
        Duration::from_nanos(args.iters * u64::from(args.rounds) * 30),
    );
    // Every round measures the floor and every case once, so that each
    // ratio compares measurements made one after the other
    // (`Lab::measure_rounds`).
    let mut labels = vec!["semop two bare compare-and-swaps".to_string()];
    labels.extend(
        cases
            .iter()
            .map(|(n, backend)| format!("semop {} x{n}", backend.name)),
    );
    let kernel_of = |sems: u16| {
        cases
            .iter()
            .position(|&(n, b)| n == sems && b.name == KERNEL)
            .map(|i| i + 1)
    };
    let measured = lab.try_measure_rounds(
        &labels,
        |p| {
            let Some(&(n, backend)) = p.checked_sub(1).map(|i| &cases[i]) else {
                return Ok(
                    Record::new("semop", "two bare compare-and-swaps", FLOOR, false, 1)
                        .param("iters", args.iters)
                        .param("rounds", args.rounds)
                        .metric("ns", cas_pair_ns(args.iters, args.rounds)),
                );
            };
            let iters = if backend.name == KERNEL {
                (args.iters / KERNEL_SHARE).max(1)
            } else {
                args.iters
            };
            let cost = PairCost {
                sems: n,
                iters,
                rounds: args.rounds,
            };
            let ns = backend
                .dispatch(cost)
                .map_err(|e| format!("semop {}: {e}", backend.name))?;
            Ok(Record::new(
                "semop",
                &format!("uncontended down+up, {n} semaphore(s) per call"),
                backend.name,
                backend.is_ksync(),
                1,
            )
            .param("semaphores", n)
            .param("iters", iters)
            .param("rounds", args.rounds)
            .metric("ns", ns))
        },
        |round| {
            // The floor's row compares with the one-semaphore calls.
            let sems_of = |p: usize| if p == 0 { 1 } else { cases[p - 1].0 };
            let kernel = [1, 2].map(|n| kernel_of(n).map_or(f64::NAN, |k| round[k].get("ns")));
            for (p, r) in round.iter_mut().enumerate() {
                let kernel = kernel[usize::from(sems_of(p)) - 1];
                let x = kernel / r.get("ns");
                r.metrics.insert("x_sysv".into(), x);
            }
            ratio_to(round, 0, "ns", "x_cas");
        },
    )?;
    let mut table = Table::new([
        "semaphores per call",
        "backend",
        "ns / down+up",
        "x sysv",
        "x two CAS",
    ]);
    let labelled = std::iter::once((1, FLOOR)).chain(cases.iter().map(|&(n, b)| (n, b.name)));
    for ((sems, name), m) in labelled.zip(&measured) {
        table.row(vec![
            sems.to_string(),
            name.to_string(),
            m.show("ns", 1),
            m.show_or_dash("x_sysv", 1),
            m.show_or_dash("x_cas", 2),
        ]);
    }
    table.note(
        "x sysv: the kernel's time divided by this backend's (higher is faster). \
         x two CAS: this backend's time divided by the floor's, two bare compare-and-swaps \
         on one word (lower is better; 1 is the floor). With --repeat, both are the median \
         [min-max] of ratios taken within a round, which measures every row once. ksync's single operation is one \
         compare-and-swap when nobody waits; a call on two quiet semaphores locks the lower, \
         does the higher with a compare-and-swap and releases the lower with a plain store: \
         two atomic instructions."
            .into(),
    );
    lab.print(&format!(
        "\n## Uncontended semaphore down + up (best of {} rounds; ksync and sem_t {} pairs, the kernel {})\n\n{}",
        args.rounds,
        args.iters,
        (args.iters / KERNEL_SHARE).max(1),
        table.render()
    ));
    Ok(())
}
