//! The results model every experiment feeds.
//!
//! An experiment measures *points* (one lock, one workload, one thread
//! count) through [`Lab::measure`](super::lab::Lab::measure), which runs the
//! point `--repeat` times and returns the median, minimum and maximum of
//! every metric as a [`Measured`]. Every raw run is kept as a [`Record`].
//!
//! Conventions: metric keys carry their unit (`ops_per_s`, `elapsed_ms`,
//! `longest_wait_us`); `ops_per_s` is the throughput `--plot` draws against
//! `threads`; a record's `workload` never contains the thread count, so that
//! the points of one workload line up across thread counts; `lock` names the
//! implementation measured exactly as the lab's registries do (`sysv` for
//! the kernel's semaphores, in every experiment), so that reports join by
//! name.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One run of one point: what was measured, how, and the raw figures.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    /// The command that measured it: `spin`, `rwsem`, `backoff`, ...
    pub experiment: String,
    /// What the threads did, without the thread count.
    pub workload: String,
    /// The lock (or other implementation) measured.
    pub lock: String,
    /// A ksync primitive (`true`) or a peer or baseline (`false`).
    pub ksync: bool,
    pub threads: usize,
    /// Which of the `--repeat` runs this is, from 0.
    pub repeat: u32,
    pub params: BTreeMap<String, String>,
    /// Raw figures; a value that is not finite is written as `null` and
    /// read back as NaN.
    #[serde(with = "finite_or_null")]
    pub metrics: BTreeMap<String, f64>,
}

/// JSON has no NaN or infinity: write them as `null`, read `null` as NaN.
mod finite_or_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer>(map: &BTreeMap<String, f64>, s: S) -> Result<S::Ok, S::Error> {
        let opt: BTreeMap<&String, Option<f64>> = map
            .iter()
            .map(|(k, v)| (k, v.is_finite().then_some(*v)))
            .collect();
        opt.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
        let opt = BTreeMap::<String, Option<f64>>::deserialize(d)?;
        Ok(opt
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
            .collect())
    }
}

impl Record {
    pub fn new(experiment: &str, workload: &str, lock: &str, ksync: bool, threads: usize) -> Self {
        Record {
            experiment: experiment.into(),
            workload: workload.into(),
            lock: lock.into(),
            ksync,
            threads,
            repeat: 0,
            params: BTreeMap::new(),
            metrics: BTreeMap::new(),
        }
    }

    pub fn param(mut self, key: &str, value: impl ToString) -> Self {
        self.params.insert(key.into(), value.to_string());
        self
    }

    pub fn metric(mut self, key: &str, value: f64) -> Self {
        self.metrics.insert(key.into(), value);
        self
    }

    /// The metric's value, NaN when the record lacks it.
    pub fn get(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(f64::NAN)
    }
}

/// One point measured `runs` times: medians in `record`, and the spread.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Measured {
    /// The first run's record with every metric replaced by its median.
    pub record: Record,
    pub min: BTreeMap<String, f64>,
    pub max: BTreeMap<String, f64>,
    pub runs: u32,
}

impl Measured {
    /// Folds the runs of one point (at least one).
    pub fn from_runs(runs: &[Record]) -> Self {
        let mut record = runs[0].clone();
        let mut min = BTreeMap::new();
        let mut max = BTreeMap::new();
        for key in runs[0].metrics.keys() {
            let mut values: Vec<f64> = runs.iter().map(|r| r.get(key)).collect();
            values.sort_by(f64::total_cmp);
            record.metrics.insert(key.clone(), median(&values));
            min.insert(key.clone(), values[0]);
            max.insert(key.clone(), values[values.len() - 1]);
        }
        Measured {
            record,
            min,
            max,
            runs: runs.len() as u32,
        }
    }

    /// The median of `key` (NaN when absent).
    pub fn get(&self, key: &str) -> f64 {
        self.record.get(key)
    }

    /// Whether a yes/no metric (1 or 0, such as `exact`) was yes in every
    /// run: its minimum is 1.
    pub fn in_every_run(&self, key: &str) -> bool {
        self.min.get(key).copied().unwrap_or(0.0) == 1.0
    }

    /// The median with `decimals` decimals, followed by `[min-max]` when the
    /// point ran more than once.
    pub fn show(&self, key: &str, decimals: usize) -> String {
        self.show_scaled(key, 1.0, decimals)
    }

    /// As [`show`](Self::show), or "-" where the runs did not have `key`
    /// (a backend that does not count it).
    pub fn show_or_dash(&self, key: &str, decimals: usize) -> String {
        if self.get(key).is_finite() {
            self.show(key, decimals)
        } else {
            "-".into()
        }
    }

    /// As [`show_scaled`](Self::show_scaled), with as many decimals as
    /// three significant digits of the median need (at most 6).
    pub fn show_sig(&self, key: &str, scale: f64) -> String {
        let v = (self.get(key) * scale).abs();
        let decimals = if !v.is_finite() || v >= 100.0 {
            1
        } else if v >= 1.0 || v == 0.0 {
            3
        } else {
            ((-v.log10()).ceil() as usize + 2).clamp(3, 6)
        };
        self.show_scaled(key, scale, decimals)
    }

    /// A ratio's median as [`ratio_text`] writes it, followed by
    /// `[min-max]` when the point ran more than once; "-" where the runs did
    /// not have `key`.
    pub fn show_ratio(&self, key: &str) -> String {
        if !self.get(key).is_finite() {
            return ratio_text(f64::NAN);
        }
        self.show_with(key, ratio_text)
    }

    /// As [`show`](Self::show), with every value multiplied by `scale`
    /// (e.g. `1e-6` to show `ops_per_s` as Mops/s).
    pub fn show_scaled(&self, key: &str, scale: f64, decimals: usize) -> String {
        self.show_with(key, |v| format!("{:.decimals$}", v * scale))
    }

    /// The median as `text` writes it, followed by `[min-max]` when the
    /// point ran more than once and its runs differ in what `text` writes.
    fn show_with(&self, key: &str, text: impl Fn(f64) -> String) -> String {
        let median = text(self.get(key));
        if self.runs <= 1 {
            return median;
        }
        let bound = |m: &BTreeMap<String, f64>| text(m.get(key).copied().unwrap_or(f64::NAN));
        let (lo, hi) = (bound(&self.min), bound(&self.max));
        if lo == hi {
            // Every run agreed to the digits shown.
            median
        } else {
            format!("{median} [{lo}-{hi}]")
        }
    }
}

/// Adds metric `name` to every record of one round of
/// [`Lab::measure_rounds`](super::lab::Lab::measure_rounds): the record's
/// `key` over that of `round[base]`, a ratio taken within the round.
pub fn ratio_to(round: &mut [Record], base: usize, key: &str, name: &str) {
    let base = round[base].get(key);
    for r in round.iter_mut() {
        let x = r.get(key) / base;
        r.metrics.insert(name.into(), x);
    }
}

/// The metric [`ratios_to_peers`] adds for a ratio to peer `lock`.
pub fn peer_ratio_key(lock: &str) -> String {
    format!("x_{lock}")
}

/// Adds to every record of one round of
/// [`Lab::measure_rounds`](super::lab::Lab::measure_rounds) its `key` over
/// that of each peer (each record not of ksync) in the same round, as
/// metric [`peer_ratio_key`]. A table that picks its best peer once every
/// round has run (by median) then shows ratios taken within rounds.
pub fn ratios_to_peers(round: &mut [Record], key: &str) {
    for peer in 0..round.len() {
        if !round[peer].ksync {
            let name = peer_ratio_key(&round[peer].lock);
            ratio_to(round, peer, key, &name);
        }
    }
}

/// A ratio with two decimals, or two significant digits below 0.1 (so a
/// collapse to a thousandth does not read as zero).
pub fn ratio_text(r: f64) -> String {
    if !r.is_finite() {
        "-".into()
    } else if r >= 0.1 || r == 0.0 {
        format!("{r:.2}")
    } else {
        let decimals = ((-r.log10()).ceil() as usize + 1).min(6);
        format!("{r:.decimals$}")
    }
}

/// The middle value of sorted `values` (mean of the middle two if even).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ratios_keep_two_digits() {
        assert_eq!(ratio_text(1.234), "1.23");
        assert_eq!(ratio_text(0.0123), "0.012");
        assert_eq!(ratio_text(0.00031), "0.00031");
        assert_eq!(ratio_text(f64::NAN), "-");
    }

    #[test]
    fn a_flag_holds_only_if_every_run_had_it() {
        let run = |exact: f64| Record::new("spin", "w", "qspin", true, 2).metric("exact", exact);
        assert!(Measured::from_runs(&[run(1.0), run(1.0)]).in_every_run("exact"));
        assert!(!Measured::from_runs(&[run(1.0), run(0.0)]).in_every_run("exact"));
        assert!(!Measured::from_runs(&[run(1.0)]).in_every_run("finished"));
    }

    #[test]
    fn every_record_gets_its_ratio_to_each_peer_of_its_round() {
        let run = |lock: &str, ksync: bool, ops: f64| {
            Record::new("spin", "w", lock, ksync, 2).metric("ops_per_s", ops)
        };
        let mut round = [
            run("qspin", true, 6.0),
            run("std", false, 3.0),
            run("parking_lot", false, 12.0),
        ];
        ratios_to_peers(&mut round, "ops_per_s");
        assert_eq!(round[0].get("x_std"), 2.0);
        assert_eq!(round[0].get("x_parking_lot"), 0.5);
        assert_eq!(round[2].get("x_std"), 4.0);
        // Nobody's ratio to a ksync lock.
        assert!(round[1].get("x_qspin").is_nan());
        // Two rounds fold into the median and the spread of the ratios.
        let mut second = [run("qspin", true, 2.0), run("std", false, 4.0)];
        ratios_to_peers(&mut second, "ops_per_s");
        let m = Measured::from_runs(&[round[0].clone(), second[0].clone()]);
        assert_eq!(m.show_ratio("x_std"), "1.25 [0.50-2.00]");
        assert_eq!(m.show_ratio("x_none"), "-");
        let once = Measured::from_runs(&[second[0].clone()]);
        assert_eq!(once.show_ratio("x_std"), "0.50");
    }

    #[test]
    fn a_metric_a_backend_does_not_count_shows_as_a_dash() {
        let run =
            |polls: f64| Record::new("sembench", "w", "sysv", false, 8).metric("polls", polls);
        let m = Measured::from_runs(&[run(1.0), run(3.0)]);
        assert_eq!(m.show_or_dash("polls", 1), "2.0 [1.0-3.0]");
        assert_eq!(m.show_or_dash("sleeps", 1), "-");
    }
}
