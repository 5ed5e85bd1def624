//! Wake-up workloads: Kenneth Chen's deep wait list ([`deep`], on sets
//! with System V semantics) and the bulk wake-up of N sleepers ([`bulk`],
//! also on the `futex-batch` floor when woken by `semop`).

use crate::peers::sem::SemBackend;
use std::time::{Duration, Instant};

pub mod bulk;
pub mod deep;

/// Sleeper stacks: the loop needs almost none.
pub(super) const SLEEPER_STACK: usize = 64 * 1024;
/// How long a sleeper may take to appear on the wait list.
pub(super) const QUEUE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most operations one semop may carry (SEMOPM).
pub const SEMOPM: usize = 500;
/// Limits that keep the thread count sane.
pub const MAX_SLEEPERS: usize = 16_384;

/// Polls until `num`'s wait list holds `count` sleepers (GETNCNT).
pub(super) fn await_waiters<B: SemBackend>(
    set: &B,
    num: usize,
    count: usize,
) -> Result<(), String> {
    let deadline = Instant::now() + QUEUE_TIMEOUT;
    loop {
        let n = set.waiters(num)?;
        if n >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {n} of {count} sleepers queued on semaphore {num} after {} s",
                QUEUE_TIMEOUT.as_secs()
            ));
        }
        std::thread::yield_now();
    }
}
