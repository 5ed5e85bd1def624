//! The results model every experiment feeds, and what consumes it.
//!
//! An experiment measures *points* (one lock, one workload, one thread
//! count) through [`Lab::measure`], which runs the point `--repeat` times and
//! returns the median, minimum and maximum of every metric as a
//! [`Measured`]. Every raw run is kept as a [`Record`]; at the end `main`
//! writes them all, with the machine, to `--json` and `--csv`, and draws
//! `--plot` from them. `compare` condenses its points into [`SummaryRow`]s.
//!
//! Conventions: metric keys carry their unit (`ops_per_s`, `elapsed_ms`,
//! `longest_wait_us`); `ops_per_s` is the throughput `--plot` draws against
//! `threads`; a record's `workload` never contains the thread count, so that
//! the points of one workload line up across thread counts.

use crate::machine::Machine;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ksync::stat::LockStatSnapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

    /// Adds a lock's statistics (`ksync::stat`) as `lockstat_*` metrics:
    /// acquisitions, contended count and fraction, wait total, mean and
    /// maximum in ns, the seed's per-mille of CPU time, and the mean sampled
    /// hold when holds were timed.
    pub fn lock_stats(self, s: &LockStatSnapshot) -> Self {
        let acquisitions = s.acquisitions();
        let mut rec = self
            .metric("lockstat_acquisitions", acquisitions as f64)
            .metric("lockstat_contended", s.contended() as f64)
            .metric(
                "lockstat_contended_fraction",
                s.contended() as f64 / acquisitions.max(1) as f64,
            )
            .metric("lockstat_wait_total_ns", s.wait_total_ns() as f64)
            .metric("lockstat_wait_avg_ns", s.wait_avg_ns() as f64)
            .metric("lockstat_wait_max_ns", s.wait_max_ns() as f64)
            .metric("lockstat_per_mille", s.per_mille() as f64);
        if s.read.acquisitions() > 0 {
            rec = rec
                .metric("lockstat_read_acquisitions", s.read.acquisitions() as f64)
                .metric("lockstat_read_contended", s.read.contended as f64)
                .metric("lockstat_write_contended", s.write.contended as f64);
        }
        if s.hold_samples() > 0 {
            rec = rec.metric("lockstat_hold_avg_ns", s.hold_avg_ns() as f64);
        }
        rec
    }

    /// The metric's value, NaN when the record lacks it.
    pub fn get(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(f64::NAN)
    }
}

/// The lock statistics of some points, as `--lock-stats` prints them: per
/// lock a heading and the seed's line (`free F contended C wait W avg A
/// 1/1000 cpu time P`, times in ns), then the lock_stat-like table of all.
/// `what` says what the figures cover ("the last of 3 runs").
pub fn lock_stats_text(stats: &[(String, LockStatSnapshot)], what: &str) -> String {
    if stats.is_empty() {
        return String::new();
    }
    let mut out = format!("\n### Lock statistics ({what})\n\n");
    for (name, s) in stats {
        let _ = writeln!(out, "{name}:\n{}", s.summary_line());
    }
    out.push('\n');
    out.push_str(&ksync::stat::Report::from_snapshots(stats.iter().cloned()).table());
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
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

    /// The median with `decimals` decimals, followed by `[min-max]` when the
    /// point ran more than once.
    pub fn show(&self, key: &str, decimals: usize) -> String {
        self.show_scaled(key, 1.0, decimals)
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

    /// As [`show`](Self::show), with every value multiplied by `scale`
    /// (e.g. `1e-6` to show `ops_per_s` as Mops/s).
    pub fn show_scaled(&self, key: &str, scale: f64, decimals: usize) -> String {
        let median = self.get(key) * scale;
        if self.runs <= 1 {
            return format!("{median:.decimals$}");
        }
        let lo = self.min.get(key).copied().unwrap_or(f64::NAN) * scale;
        let hi = self.max.get(key).copied().unwrap_or(f64::NAN) * scale;
        let (lo_s, hi_s) = (format!("{lo:.decimals$}"), format!("{hi:.decimals$}"));
        if lo_s == hi_s {
            // Every run agreed to the digits shown.
            format!("{median:.decimals$}")
        } else {
            format!("{median:.decimals$} [{lo_s}-{hi_s}]")
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

/// One row of `compare`'s summary: a workload, the best peer on it, and
/// each ksync primitive's figure (ratios are taken when printing).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SummaryRow {
    pub workload: String,
    /// The unit of the values, e.g. `Mops/s` or `ns`.
    pub unit: String,
    pub higher_is_better: bool,
    pub best_peer: Option<(String, f64)>,
    pub ksync: Vec<(String, f64)>,
}

impl SummaryRow {
    /// Picks the best peer among `points` (those with `ksync == false`) by
    /// `metric` (medians) and keeps every ksync point, scaled by `scale` for
    /// display in `unit`.
    pub fn from_measured(
        workload: &str,
        unit: &str,
        metric: &str,
        scale: f64,
        higher_is_better: bool,
        points: &[&Measured],
    ) -> Self {
        let better = |a: f64, b: f64| if higher_is_better { a > b } else { a < b };
        let mut best_peer: Option<(String, f64)> = None;
        let mut ksync = Vec::new();
        for p in points {
            let v = p.get(metric) * scale;
            if !v.is_finite() {
                continue;
            }
            if p.record.ksync {
                ksync.push((p.record.lock.clone(), v));
            } else if best_peer.as_ref().is_none_or(|b| better(v, b.1)) {
                best_peer = Some((p.record.lock.clone(), v));
            }
        }
        SummaryRow {
            workload: workload.into(),
            unit: unit.into(),
            higher_is_better,
            best_peer,
            ksync,
        }
    }

    /// `name`'s figure as a multiple of the best peer's, oriented so that
    /// above 1 is always better for ksync.
    pub fn ratio(&self, name: &str) -> Option<f64> {
        let (_, best) = self.best_peer.as_ref()?;
        let (_, ours) = self.ksync.iter().find(|k| k.0 == name)?;
        let r = if self.higher_is_better {
            ours / best
        } else {
            best / ours
        };
        r.is_finite().then_some(r)
    }
}

/// Everything one invocation measured, as `--json` writes it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Report {
    pub tool: String,
    pub version: String,
    /// The command line, program name excluded.
    pub command: Vec<String>,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    pub machine: Machine,
    pub repeat: u32,
    /// Every run of every point, in the order they ran.
    pub records: Vec<Record>,
    /// `compare`'s summary rows (empty for other commands).
    pub summary: Vec<SummaryRow>,
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises")
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("not a ksync-lab JSON report: {e}"))
    }

    /// One line per record: fixed columns, then the machine, then every
    /// parameter and metric any record has (empty where a record lacks it).
    pub fn to_csv(&self) -> String {
        let mut params: Vec<&String> = self.records.iter().flat_map(|r| r.params.keys()).collect();
        params.sort();
        params.dedup();
        let mut metrics: Vec<&String> =
            self.records.iter().flat_map(|r| r.metrics.keys()).collect();
        metrics.sort();
        metrics.dedup();
        let mut out = String::new();
        let mut header: Vec<String> = [
            "experiment",
            "workload",
            "lock",
            "ksync",
            "threads",
            "repeat",
            "cpu",
            "cores",
            "kernel",
            "virtualized",
            "sysv_sem_limits",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        header.extend(params.iter().map(|p| format!("param:{p}")));
        header.extend(metrics.iter().map(|m| m.to_string()));
        csv_line(&mut out, &header);
        let m = &self.machine;
        for r in &self.records {
            let mut cells = vec![
                r.experiment.clone(),
                r.workload.clone(),
                r.lock.clone(),
                r.ksync.to_string(),
                r.threads.to_string(),
                r.repeat.to_string(),
                m.cpu.clone(),
                m.cores.to_string(),
                m.kernel.clone(),
                m.virtualized.to_string(),
                m.sem_limits_text(),
            ];
            cells.extend(
                params
                    .iter()
                    .map(|p| r.params.get(*p).cloned().unwrap_or_default()),
            );
            cells.extend(
                metrics
                    .iter()
                    .map(|k| r.metrics.get(*k).map_or(String::new(), |v| v.to_string())),
            );
            csv_line(&mut out, &cells);
        }
        out
    }
}

/// Appends one RFC 4180 line: fields with a comma, quote or line break are
/// quoted, quotes doubled.
fn csv_line(out: &mut String, cells: &[String]) {
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if cell.contains([',', '"', '\n', '\r']) {
            let _ = write!(out, "\"{}\"", cell.replace('"', "\"\""));
        } else {
            out.push_str(cell);
        }
    }
    out.push('\n');
}

/// Where output files go: an absolute path as given; a relative one under
/// the results folder, which is `$KSYNC_LAB_RESULTS` if set, else
/// `lab-results/` at the root of the cargo workspace that contains the
/// current directory (git-ignored in ksync's checkout), else `lab-results/`
/// in the current directory.
pub fn resolve_output(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    results_dir().join(path)
}

fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KSYNC_LAB_RESULTS") {
        return PathBuf::from(dir);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    for dir in cwd.ancestors() {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        if manifest.lines().any(|l| l.trim() == "[workspace]") {
            return dir.join("lab-results");
        }
    }
    cwd.join("lab-results")
}

/// Writes `contents` to `path` (already resolved), creating its folder.
pub fn write_file(path: &Path, contents: &[u8]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    std::fs::write(path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The run's context: options every experiment honours, the records so
/// far, and the progress bar.
pub struct Lab {
    repeat: u32,
    machine: Machine,
    records: Vec<Record>,
    summary: Vec<SummaryRow>,
    bar: ProgressBar,
    /// The visible bar (on a terminal) has replaced the hidden one.
    bar_made: bool,
    /// Estimated seconds of work announced through `plan`.
    planned: Duration,
    started_unix: u64,
    /// Parameters added to every record measured from now on.
    common: BTreeMap<String, String>,
    /// Why the run failed (a check, not a usage error): exit status 1.
    failure: Option<String>,
}

impl Lab {
    pub fn new(repeat: u32) -> Self {
        Lab {
            repeat: repeat.max(1),
            machine: Machine::detect(),
            records: Vec::new(),
            summary: Vec::new(),
            bar: ProgressBar::hidden(),
            bar_made: false,
            planned: Duration::ZERO,
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            common: BTreeMap::new(),
            failure: None,
        }
    }

    /// Adds `key = value` to the parameters of every record measured from
    /// now on (e.g. a calibration the whole command shares).
    pub fn set_param(&mut self, key: &str, value: impl ToString) {
        self.common.insert(key.into(), value.to_string());
    }

    /// Marks the run as failed: main writes the outputs, prints `message`
    /// and exits with status 1.
    pub fn fail(&mut self, message: String) {
        self.failure = Some(match self.failure.take() {
            Some(earlier) => format!("{earlier}; {message}"),
            None => message,
        });
    }

    /// Why the run failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    pub fn repeat(&self) -> u32 {
        self.repeat
    }

    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Announces `points` measurements of about `each` (one run; `--repeat`
    /// is accounted for here). The bar appears, on a terminal only, once the
    /// announced work exceeds two seconds.
    pub fn plan(&mut self, points: u64, each: Duration) {
        let steps = points * u64::from(self.repeat);
        self.planned = self
            .planned
            .saturating_add(each.saturating_mul(steps.min(u64::from(u32::MAX)) as u32));
        self.bar.inc_length(steps);
        if !self.bar_made && self.planned > Duration::from_secs(2) {
            self.bar_made = true;
            let bar = ProgressBar::with_draw_target(
                Some(self.bar.length().unwrap_or(0)),
                ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
                )
                .expect("valid progress template"),
            );
            bar.set_position(self.bar.position());
            bar.enable_steady_tick(Duration::from_millis(200));
            self.bar = bar;
        }
    }

    /// Runs one point `--repeat` times, keeps every run's record (numbered
    /// by `repeat`) and returns the medians and spread.
    pub fn measure(&mut self, label: &str, mut run: impl FnMut() -> Record) -> Measured {
        let mut runs = Vec::with_capacity(self.repeat as usize);
        for i in 0..self.repeat {
            self.bar.set_message(if self.repeat > 1 {
                format!("{label} (run {}/{})", i + 1, self.repeat)
            } else {
                label.to_string()
            });
            let mut record = run();
            record.repeat = i;
            for (k, v) in &self.common {
                record.params.entry(k.clone()).or_insert_with(|| v.clone());
            }
            self.bar.inc(1);
            runs.push(record);
        }
        let measured = Measured::from_runs(&runs);
        self.records.extend(runs);
        measured
    }

    /// Prints `text` to stdout without tearing the progress bar.
    pub fn print(&self, text: &str) {
        self.bar.suspend(|| print!("{text}"));
    }

    /// Prints one line to stderr without tearing the progress bar.
    pub fn note(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }

    pub fn add_summary(&mut self, rows: Vec<SummaryRow>) {
        self.summary.extend(rows);
    }

    /// Clears the bar and hands over everything measured.
    pub fn finish(self, command: Vec<String>) -> Report {
        self.bar.finish_and_clear();
        Report {
            tool: "ksync-lab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command,
            started_unix: self.started_unix,
            machine: self.machine,
            repeat: self.repeat,
            records: self.records,
            summary: self.summary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let mut lab = Lab::new(3);
        let mut n = 0.0;
        let m = lab.measure("x", || {
            n += 1.0;
            Record::new("spin", "embedded, cs 0", "qspin", true, 4)
                .param("loops", 1000)
                .metric("ops_per_s", n * 10.0)
                .metric("elapsed_ms", 1.5)
        });
        assert_eq!(m.runs, 3);
        assert_eq!(m.get("ops_per_s"), 20.0);
        assert_eq!(m.min["ops_per_s"], 10.0);
        assert_eq!(m.max["ops_per_s"], 30.0);
        assert_eq!(m.show("ops_per_s", 1), "20.0 [10.0-30.0]");
        let peer = lab.measure("y", || {
            Record::new("spin", "embedded, cs 0", "std, \"quoted\"", false, 4)
                .metric("ops_per_s", 40.0)
        });
        let row =
            SummaryRow::from_measured("spin 4", "ops/s", "ops_per_s", 1.0, true, &[&m, &peer]);
        assert_eq!(row.ratio("qspin"), Some(0.5));
        lab.add_summary(vec![row]);
        lab.finish(vec!["spin".into()])
    }

    #[test]
    fn small_ratios_keep_two_digits() {
        assert_eq!(ratio_text(1.234), "1.23");
        assert_eq!(ratio_text(0.0123), "0.012");
        assert_eq!(ratio_text(0.00031), "0.00031");
        assert_eq!(ratio_text(f64::NAN), "-");
    }

    #[test]
    fn json_round_trips() {
        let report = sample();
        assert_eq!(report.records.len(), 6);
        let back = Report::from_json(&report.to_json()).expect("parses");
        assert_eq!(back, report);
    }

    #[test]
    fn non_finite_metrics_survive_json_as_nan() {
        let mut report = sample();
        report.records[0]
            .metrics
            .insert("broken".into(), f64::INFINITY);
        let back = Report::from_json(&report.to_json()).expect("parses");
        assert!(back.records[0].get("broken").is_nan());
    }

    #[test]
    fn csv_has_a_line_per_record_and_quotes() {
        let csv = sample().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 7);
        assert!(lines[0].starts_with("experiment,workload,lock,ksync,threads,repeat,cpu"));
        assert!(lines[0].contains("param:loops") && lines[0].ends_with("elapsed_ms,ops_per_s"));
        assert!(csv.contains("\"std, \"\"quoted\"\"\""), "{csv}");
    }

    #[test]
    fn lower_is_better_ratios_are_inverted() {
        let a = Measured::from_runs(&[Record::new("u", "w", "ours", true, 1).metric("ns", 5.0)]);
        let b = Measured::from_runs(&[Record::new("u", "w", "peer", false, 1).metric("ns", 10.0)]);
        let row = SummaryRow::from_measured("u", "ns", "ns", 1.0, false, &[&a, &b]);
        assert_eq!(row.ratio("ours"), Some(2.0));
    }
}
