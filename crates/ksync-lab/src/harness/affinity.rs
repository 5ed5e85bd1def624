//! CPU placement for benchmark threads, via `sched_setaffinity`: the
//! `--pin` plans, the CPUs this process may use, and binding one thread.
//!
//! Waiman Long's spinlock micro-benchmark (unfair qspinlock v10, LKML, May
//! 2014) bound every task to a CPU, either all on one NUMA node or one task
//! per node; `--pin` offers both, plus a plain spread and an explicit CPU
//! list. sembench binds its workers round robin and `wake` keeps its waker
//! and sleepers apart, both through [`pin_current_thread`] and [`PinnedThread`].

use std::marker::PhantomData;
use std::str::FromStr;

/// Where benchmark thread `k` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// Wherever the scheduler puts it.
    None,
    /// Thread `k` on the `k mod n`-th CPU this process may use.
    Spread,
    /// Thread `k` on the first allowed CPU of node `k mod nodes` (Waiman
    /// Long's "one task per node"; needs more than one NUMA node).
    PerNode,
    /// Thread `k` on `cpus[k mod len]`.
    Cpus(Vec<usize>),
}

impl FromStr for Pin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Pin::None),
            "spread" => Ok(Pin::Spread),
            "per-node" => Ok(Pin::PerNode),
            list => parse_cpulist(list)
                .filter(|v| !v.is_empty())
                .map(Pin::Cpus)
                .ok_or_else(|| {
                    format!(
                        "--pin takes none, spread, per-node or a CPU list like 0,2-3, not '{list}'"
                    )
                }),
        }
    }
}

impl std::fmt::Display for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pin::None => f.write_str("none"),
            Pin::Spread => f.write_str("spread"),
            Pin::PerNode => f.write_str("per-node"),
            Pin::Cpus(cpus) => {
                let s: Vec<String> = cpus.iter().map(usize::to_string).collect();
                f.write_str(&s.join(","))
            }
        }
    }
}

impl Pin {
    /// The CPU of each of `threads` threads, or `None` for no pinning; an
    /// error if the placement is impossible on this machine.
    pub fn plan(&self, threads: usize) -> Result<Option<Vec<usize>>, String> {
        let allowed = allowed_cpus();
        let cycle = |cpus: &[usize]| (0..threads).map(|k| cpus[k % cpus.len()]).collect();
        match self {
            Pin::None => Ok(None),
            Pin::Spread if allowed.is_empty() => {
                Err("cannot read this process's CPU set (sched_getaffinity)".into())
            }
            Pin::Spread => Ok(Some(cycle(&allowed))),
            Pin::Cpus(cpus) => match cpus.iter().find(|c| !allowed.contains(c)) {
                Some(c) => Err(format!(
                    "--pin: CPU {c} is not available to this process (allowed: {})",
                    Pin::Cpus(allowed.clone())
                )),
                None => Ok(Some(cycle(cpus))),
            },
            Pin::PerNode => {
                let firsts: Vec<usize> = numa_nodes()
                    .iter()
                    .filter_map(|node| node.iter().find(|c| allowed.contains(c)).copied())
                    .collect();
                if firsts.len() < 2 {
                    Err(
                        "--pin per-node needs at least two NUMA nodes with usable CPUs; this \
                         machine has one, so Waiman Long's one-task-per-node runs cannot be reproduced here"
                            .into(),
                    )
                } else {
                    Ok(Some(cycle(&firsts)))
                }
            }
        }
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpulist(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The CPUs of each NUMA node, from sysfs (empty when sysfs has no nodes).
pub fn numa_nodes() -> Vec<Vec<usize>> {
    let mut nodes = Vec::new();
    for n in 0..1024 {
        match std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/cpulist")) {
            Ok(list) => nodes.push(parse_cpulist(&list).unwrap_or_default()),
            Err(_) if n == 0 => continue,
            Err(_) => break,
        }
    }
    nodes
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // writes at most `size_of::<cpu_set_t>()` bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Binds the calling thread to `cpu`; false if the kernel refused.
pub fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: as in `allowed_cpus`; `cpu` is below CPU_SETSIZE, and pid 0
    // names the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The calling thread bound to one CPU until this is dropped, which gives it
/// back the CPU set it had. Not `Send`: only the pinned thread may restore
/// its own mask.
pub struct PinnedThread {
    previous: libc::cpu_set_t,
    _this_thread: PhantomData<*const ()>,
}

impl PinnedThread {
    /// Binds the calling thread to `cpu`; `None`, with nothing changed, if
    /// its CPU set cannot be read or the kernel refuses the CPU.
    pub fn pin(cpu: usize) -> Option<PinnedThread> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set, which the call
        // fills for the calling thread (pid 0).
        let previous = unsafe {
            let mut mask: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut mask) == 0)
                .then_some(mask)?
        };
        pin_current_thread(cpu).then_some(PinnedThread {
            previous,
            _this_thread: PhantomData,
        })
    }
}

impl Drop for PinnedThread {
    fn drop(&mut self) {
        // SAFETY: `previous` is the valid mask read in `pin`, on this same
        // thread (the type is not Send); pid 0 names the calling thread.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.previous)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("1\n"), Some(vec![1]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert!("0,1".parse::<Pin>().is_ok());
        assert!("banana".parse::<Pin>().is_err());
    }

    #[test]
    fn spread_cycles_over_allowed_cpus() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        let plan = Pin::Spread.plan(allowed.len() * 2 + 1).unwrap().unwrap();
        assert_eq!(plan[0], allowed[0]);
        assert_eq!(plan[allowed.len()], allowed[0]);
        assert!(Pin::Cpus(vec![100_000]).plan(1).is_err());
    }

    #[test]
    fn a_pinned_thread_gets_its_cpu_set_back() {
        std::thread::spawn(|| {
            let before = allowed_cpus();
            let pinned = PinnedThread::pin(before[0]).expect("an allowed CPU");
            assert_eq!(allowed_cpus(), [before[0]]);
            drop(pinned);
            assert_eq!(allowed_cpus(), before);
            assert!(PinnedThread::pin(usize::MAX).is_none());
            assert_eq!(allowed_cpus(), before);
        })
        .join()
        .unwrap();
    }
}
