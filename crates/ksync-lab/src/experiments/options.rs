//! Checks of the options several commands share.

use std::time::Duration;

/// A duration option in seconds, checked: (0, 3600].
pub fn seconds(flag: &str, seconds: f64) -> Result<Duration, String> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(format!(
            "{flag} must be in (0, 3600] seconds, not {seconds}"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The checked thread counts: at least one, each from 1 to 4096.
pub fn thread_counts(threads: &[usize]) -> Result<Vec<usize>, String> {
    if threads.is_empty() || threads.iter().any(|&n| n == 0 || n > 4096) {
        return Err(format!(
            "--threads needs thread counts from 1 to 4096, not {threads:?}"
        ));
    }
    Ok(threads.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        assert_eq!(seconds("--s", 0.5), Ok(Duration::from_millis(500)));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 3601.0] {
            assert!(seconds("--s", bad).unwrap_err().starts_with("--s must be"));
        }
        assert_eq!(thread_counts(&[1, 4096]), Ok(vec![1, 4096]));
        assert!(thread_counts(&[]).is_err());
        assert!(thread_counts(&[0]).is_err());
        assert!(thread_counts(&[4097]).is_err());
    }
}
