//! What machine a result came from: every table names it.

use std::fmt;

/// The facts a reader needs to compare results across machines.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub virtualized: bool,
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
        Machine {
            cpu,
            cores,
            kernel,
            virtualized,
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cores, {}, Linux {}{}",
            self.cores,
            self.cpu,
            self.kernel,
            if self.virtualized {
                " (virtual machine)"
            } else {
                ""
            }
        )
    }
}
