//! The measured loops, generic over the thing measured and knowing no
//! registry, no command line and no output: the uncontended cost
//! ([`uncontended`]), Waiman Long's N-thread spinlock micro-benchmark
//! ([`spin`]), Rik van Riel's two-lock mix ([`two_lock`]), the rwsem mixes
//! of Howells and Arcangeli ([`rw_mix`]), locktorture ([`torture`]), Chris
//! Mason's sembench driver ([`sembench`]), Kenneth Chen's deep wait list and
//! the bulk wake-up ([`wake`]), the uncontended semaphore pair
//! ([`semop`]), and calls on two semaphores from many threads ([`dining`]).
//!
//! Every loop is generic over the lock (or backend) type so that each
//! lock's `lock` and `unlock` are inlined into its own copy of the loop, as
//! they would be in a user's program. Each also comes as a visitor
//! (`MutexVisitor`, `RwVisitor`, `SemVisitor`), so that an experiment runs
//! it for a registry entry with `entry.dispatch(...)`.

pub mod dining;
pub mod rw_mix;
pub mod sembench;
pub mod semop;
pub mod spin;
pub mod torture;
pub mod two_lock;
pub mod uncontended;
pub mod wake;

/// Starts a value on a 128-byte boundary, so layouts are what they say
/// wherever the value lives.
#[repr(align(128))]
struct Aligned<T>(T);

/// Smallest and largest of `counts` over their mean.
pub fn share_range(counts: &[u64]) -> (f64, f64) {
    let total: u64 = counts.iter().sum();
    if total == 0 || counts.is_empty() {
        return (0.0, 0.0);
    }
    let fair = total as f64 / counts.len() as f64;
    let min = *counts.iter().min().unwrap_or(&0) as f64;
    let max = *counts.iter().max().unwrap_or(&0) as f64;
    (min / fair, max / fair)
}

#[cfg(test)]
mod tests {
    #[test]
    fn shares_are_relative_to_a_fair_share() {
        assert_eq!(super::share_range(&[10, 30]), (0.5, 1.5));
        assert_eq!(super::share_range(&[]), (0.0, 0.0));
        assert_eq!(super::share_range(&[0, 0]), (0.0, 0.0));
    }
}
