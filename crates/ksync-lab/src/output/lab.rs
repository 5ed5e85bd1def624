//! [`Lab`], the run's context: `--repeat`, the machine, every record so far
//! and the progress bar.

use super::record::{Measured, Record};
use super::report::Report;
use super::summary::SummaryRow;
use crate::harness::machine::Machine;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::time::Duration;

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
