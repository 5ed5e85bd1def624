//! `semop`: the uncontended cost of a semaphore down + up pair, ksync's
//! `SemSet` beside the kernel's SysV semaphores and POSIX `sem_t`.
//!
//! One thread takes and gives back one semaphore (value 1) in a loop: the
//! cost a program pays for a semaphore nobody else wants. ksync's single
//! operation is one compare-and-swap here; the kernel's is a system call.
//! Also a two-semaphore atomic operation (a complex call, which takes the
//! set's global lock in ksync and in the kernel).

use std::time::{Duration, Instant};

use clap::Parser;
use ksync::sem::{SemBuf, SemSet};

use crate::output::lab::Lab;
use crate::output::record::Record;
use crate::output::table::Table;
use crate::sysv::SysvSet;

#[derive(Parser, Debug, Clone)]
pub struct Args {
    /// Down + up pairs per round for ksync and sem_t (the kernel does 1/50 of them).
    #[arg(long, default_value_t = 2_000_000)]
    pub iters: u64,
    /// Rounds; the best is reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
}

/// The backends measured, in table order.
const BACKENDS: [&str; 3] = ["ksync", "ipc", "posix"];

/// Pairs the kernel's backend runs, relative to the others: a system call
/// costs about a hundred times a compare-and-swap.
const KERNEL_SHARE: u64 = 50;

fn sembuf(num: u16, op: i16) -> libc::sembuf {
    libc::sembuf {
        sem_num: num,
        sem_op: op,
        sem_flg: 0,
    }
}

/// Best ns per pair over `rounds` rounds of `iters` pairs of `pair`.
fn best_ns(iters: u64, rounds: u32, mut pair: impl FnMut()) -> f64 {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                pair();
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// ns per down + up pair of `sems` semaphores taken in one call.
fn measure(backend: &str, sems: u16, iters: u64, rounds: u32) -> Result<f64, String> {
    match backend {
        "ksync" => {
            let set = SemSet::new(usize::from(sems)).map_err(|e| e.to_string())?;
            set.set_all(&vec![1; usize::from(sems)])
                .map_err(|e| e.to_string())?;
            let down: Vec<SemBuf> = (0..sems).map(|n| SemBuf::new(n, -1, 0)).collect();
            let up: Vec<SemBuf> = (0..sems).map(|n| SemBuf::new(n, 1, 0)).collect();
            // A new set starts in global mode, as the kernel's does; a few
            // single operations end it.
            for _ in 0..16 {
                set.semop(&down[..1])
                    .and_then(|()| set.semop(&up[..1]))
                    .map_err(|e| e.to_string())?;
            }
            Ok(best_ns(iters, rounds, || {
                let done = set.semop(&down).and_then(|()| set.semop(&up));
                debug_assert!(done.is_ok());
            }))
        }
        "ipc" => {
            let set = SysvSet::new(usize::from(sems))?;
            let mut down: Vec<_> = (0..sems).map(|n| sembuf(n, -1)).collect();
            let mut up: Vec<_> = (0..sems).map(|n| sembuf(n, 1)).collect();
            set.op(&mut up).map_err(|e| e.to_string())?;
            Ok(best_ns((iters / KERNEL_SHARE).max(1), rounds, || {
                let done = set.op(&mut down).and_then(|()| set.op(&mut up));
                debug_assert!(done.is_ok());
            }))
        }
        "posix" if sems == 1 => {
            let mut sem = Box::new(std::mem::MaybeUninit::<libc::sem_t>::uninit());
            // SAFETY: initialises the sem_t in place (process-private, value 1).
            if unsafe { libc::sem_init(sem.as_mut_ptr(), 0, 1) } != 0 {
                return Err("sem_init failed".into());
            }
            let ptr = sem.as_mut_ptr();
            let ns = best_ns(iters, rounds, || {
                // SAFETY: `ptr` is the initialised sem_t, alive for the loop.
                unsafe {
                    libc::sem_wait(ptr);
                    libc::sem_post(ptr);
                }
            });
            // SAFETY: nobody waits on it any more.
            unsafe { libc::sem_destroy(ptr) };
            Ok(ns)
        }
        _ => Err(format!("no {backend} backend for {sems} semaphores")),
    }
}

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
    lab.print(&format!("machine: {}\n", lab.machine()));
    let cases: Vec<(u16, &str)> = BACKENDS
        .iter()
        .map(|&b| (1, b))
        .chain([(2, "ksync"), (2, "ipc")])
        .collect();
    lab.plan(
        cases.len() as u64,
        Duration::from_nanos(args.iters * u64::from(args.rounds) * 30),
    );
    let mut table = Table::new(["semaphores per call", "backend", "ns / down+up", "x ipc"]);
    for sems in [1u16, 2] {
        let mut results = Vec::new();
        for &(n, backend) in cases.iter().filter(|(n, _)| *n == sems) {
            let mut failure = None;
            let measured = lab.measure(&format!("semop {backend} x{n}"), || {
                let ns = measure(backend, n, args.iters, args.rounds).unwrap_or_else(|e| {
                    failure = Some(e);
                    f64::NAN
                });
                Record::new(
                    "semop",
                    &format!("uncontended down+up, {n} semaphore(s) per call"),
                    backend_lock(backend),
                    backend == "ksync",
                    1,
                )
                .param("semaphores", n)
                .param("iters", args.iters)
                .param("rounds", args.rounds)
                .metric("ns", ns)
            });
            if let Some(e) = failure {
                return Err(e);
            }
            results.push((backend, measured));
        }
        let ipc = results
            .iter()
            .find(|(b, _)| *b == "ipc")
            .map(|(_, m)| m.get("ns"));
        for (backend, m) in &results {
            let ratio = ipc.map_or("-".into(), |k| format!("{:.1}", k / m.get("ns")));
            table.row(vec![
                sems.to_string(),
                backend_lock(backend).to_string(),
                m.show("ns", 1),
                ratio,
            ]);
        }
    }
    table.note(
        "x ipc: the kernel's time divided by this backend's (higher is faster). \
         ksync's single operation is one compare-and-swap when nobody waits; two \
         semaphores per call take the set's global lock, as in the kernel."
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

fn backend_lock(backend: &str) -> &'static str {
    match backend {
        "ksync" => "ksync-sem",
        "ipc" => "sysv-sem",
        _ => "posix-sem",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_measures_a_finite_cost() {
        for backend in BACKENDS {
            let ns = measure(backend, 1, 100, 1).unwrap();
            assert!(ns.is_finite() && ns > 0.0, "{backend}: {ns}");
        }
        assert!(measure("ksync", 2, 100, 1).unwrap().is_finite());
        assert!(measure("posix", 2, 100, 1).is_err());
    }
}
