//! What the kernel says this process used (`getrusage(RUSAGE_SELF)`): CPU
//! time in user space and in the kernel, and context switches, voluntary (a
//! thread blocked: a futex wait, a sleeping `semop`) and involuntary (a
//! thread was preempted). Taken before and after a measured window, the
//! difference explains a throughput: how many switches and how much kernel
//! time each unit of work cost.

use std::time::Duration;

/// One reading of the process's resource usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

fn duration(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

impl Usage {
    /// The whole process's usage so far (every thread, live or joined).
    pub fn now() -> Usage {
        Usage::of(libc::RUSAGE_SELF)
    }

    fn of(who: libc::c_int) -> Usage {
        // SAFETY: rusage is plain old data; all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF and
        // RUSAGE_THREAD cannot fail.
        let rc = unsafe { libc::getrusage(who, &mut ru) };
        if rc != 0 {
            return Usage::default();
        }
        Usage {
            user: duration(ru.ru_utime),
            system: duration(ru.ru_stime),
            voluntary_switches: ru.ru_nvcsw.max(0) as u64,
            involuntary_switches: ru.ru_nivcsw.max(0) as u64,
        }
    }

    /// The calling thread's usage so far (`RUSAGE_THREAD`).
    pub fn thread_now() -> Usage {
        Usage::of(libc::RUSAGE_THREAD)
    }

    /// The usage of two processes together.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            user: self.user + other.user,
            system: self.system + other.system,
            voluntary_switches: self.voluntary_switches + other.voluntary_switches,
            involuntary_switches: self.involuntary_switches + other.involuntary_switches,
        }
    }

    /// What was used between `before` and `self`.
    pub fn since(self, before: Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(before.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(before.involuntary_switches),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_counts_voluntary_switches_and_work_counts_cpu_time() {
        let before = Usage::now();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let spin_until = std::time::Instant::now() + Duration::from_millis(20);
        while std::time::Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let used = Usage::now().since(before);
        assert!(used.voluntary_switches >= 5, "{used:?}");
        assert!(
            used.user + used.system >= Duration::from_millis(10),
            "{used:?}"
        );
        assert_eq!(before.since(Usage::now()), Usage::default());
    }
}
