//! What machine a result came from: every table and every report names it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The facts a reader needs to compare results across machines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    /// CPUs this process may run on.
    pub cores: usize,
    /// NUMA nodes (1 when the kernel shows none).
    pub numa_nodes: usize,
    pub kernel: String,
    pub virtualized: bool,
    /// `/proc/sys/kernel/sem`: SEMMSL, SEMMNS, SEMOPM, SEMMNI.
    pub sem_limits: Option<[u64; 4]>,
}

impl Machine {
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, name)| name.trim().to_string())
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let virtualized = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|flags| flags.split_whitespace().any(|f| f == "hypervisor"));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| std::env::consts::OS.to_string());
        let sem_limits = std::fs::read_to_string("/proc/sys/kernel/sem")
            .ok()
            .and_then(|s| {
                let v: Vec<u64> = s
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                <[u64; 4]>::try_from(v).ok()
            });
        Machine {
            cpu,
            cores,
            numa_nodes: super::affinity::numa_nodes().len().max(1),
            kernel,
            virtualized,
            sem_limits,
        }
    }

    /// The SysV limits as the kernel prints them, or `unknown`.
    pub fn sem_limits_text(&self) -> String {
        self.sem_limits.map_or("unknown".into(), |l| {
            format!("{} {} {} {}", l[0], l[1], l[2], l[3])
        })
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cores, {}, Linux {}{}, {} NUMA node{}, SysV sem limits {}",
            self.cores,
            self.cpu,
            self.kernel,
            if self.virtualized {
                " (virtual machine)"
            } else {
                ""
            },
            self.numa_nodes,
            if self.numa_nodes == 1 { "" } else { "s" },
            self.sem_limits_text(),
        )
    }
}
