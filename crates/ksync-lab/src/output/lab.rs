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
        let runs: Vec<Record> = (0..self.repeat)
            .map(|i| self.run_once(label, i, &mut run))
            .collect();
        self.keep(vec![runs]).remove(0)
    }

    /// Runs several points `--repeat` times each, in rounds: every point
    /// once, in order, then every point again. A machine whose speed drifts
    /// over the command (a guest whose host gets busier, a kernel that
    /// switches between two modes from one run to the next) then weighs on
    /// every point alike, where measuring one point's runs after the other's
    /// would put the drift between them. `run(p)` measures point `p` once.
    ///
    /// `paired` sees each round's records, one per point in order, and may
    /// add metrics that compare them, such as a ratio to one of the points:
    /// taken round by round, a ratio cancels what the round's runs shared,
    /// which a ratio of two medians does not. Keeps every record (numbered
    /// by round) and returns each point's medians and spread, the paired
    /// metrics included.
    pub fn measure_rounds(
        &mut self,
        labels: &[String],
        mut run: impl FnMut(usize) -> Record,
        mut paired: impl FnMut(&mut [Record]),
    ) -> Vec<Measured> {
        let mut by_point: Vec<Vec<Record>> = labels
            .iter()
            .map(|_| Vec::with_capacity(self.repeat as usize))
            .collect();
        for i in 0..self.repeat {
            let mut round: Vec<Record> = labels
                .iter()
                .enumerate()
                .map(|(p, label)| self.run_once(label, i, &mut || run(p)))
                .collect();
            paired(&mut round);
            for (runs, record) in by_point.iter_mut().zip(round) {
                runs.push(record);
            }
        }
        self.keep(by_point)
    }

    /// [`measure_rounds`](Self::measure_rounds) for runs that can fail. A
    /// failed run stands in its round as an empty record, the rounds go on,
    /// and the first failure is returned once they are over: the command
    /// then fails and reports nothing it measured.
    pub fn try_measure_rounds(
        &mut self,
        labels: &[String],
        mut run: impl FnMut(usize) -> Result<Record, String>,
        paired: impl FnMut(&mut [Record]),
    ) -> Result<Vec<Measured>, String> {
        let mut error = None;
        let measured = self.measure_rounds(
            labels,
            |p| {
                run(p).unwrap_or_else(|e| {
                    error.get_or_insert(e);
                    Record::new("-", "failed", "-", false, 0)
                })
            },
            paired,
        );
        match error {
            Some(e) => Err(e),
            None => Ok(measured),
        }
    }

    /// One run of the point `label`, the `i`th of its `--repeat`.
    fn run_once(&mut self, label: &str, i: u32, run: &mut impl FnMut() -> Record) -> Record {
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
        record
    }

    /// Keeps the records of each point's runs and folds each point's.
    fn keep(&mut self, by_point: Vec<Vec<Record>>) -> Vec<Measured> {
        by_point
            .into_iter()
            .map(|runs| {
                let measured = Measured::from_runs(&runs);
                self.records.extend(runs);
                measured
            })
            .collect()
    }

    /// Prints `text` to stdout without tearing the progress bar.
    pub fn print(&self, text: &str) {
        self.bar.suspend(|| print!("{text}"));
    }

    /// [`print`](Self::print) for use while the lab measures (inside a
    /// [`measure_rounds`](Self::measure_rounds) run, say): prints through
    /// the bar as it is now, so take it after [`plan`](Self::plan).
    pub fn printer(&self) -> impl Fn(&str) {
        let bar = self.bar.clone();
        move |text| bar.suspend(|| print!("{text}"))
    }

    /// Prints one line to stderr without tearing the progress bar.
    pub fn note(&self, text: &str) {
        self.bar.suspend(|| eprintln!("{text}"));
    }

    pub fn add_summary(&mut self, rows: Vec<SummaryRow>) {
        self.summary.extend(rows);
    }

    /// Clears the bar and hands over everything measured, with the
    /// context-switch figure ksync's locks used if one of them waited
    /// (said on stderr too: a figure taken while the machine was busy
    /// shows there).
    pub fn finish(self, command: Vec<String>) -> Report {
        self.bar.finish_and_clear();
        let switch = ksync::spin_budget::measured_context_switch();
        if let Some(switch) = switch {
            eprintln!(
                "ksync's spin budget in this run: one context switch, {:.1} us",
                switch.as_secs_f64() * 1e6
            );
        }
        Report {
            tool: "ksync-lab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command,
            started_unix: self.started_unix,
            machine: self.machine,
            repeat: self.repeat,
            records: self.records,
            summary: self.summary,
            switch_ns: switch.map(|d| d.as_nanos() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::record::ratio_to;

    #[test]
    fn rounds_run_every_point_once_per_round_and_pair_within_a_round() {
        let mut lab = Lab::new(3);
        // Point 0's and point 1's throughput in each round: their medians
        // are equal (20 and 20), their ratio round by round is 0.5, 2, 0.5.
        let values = [[10.0, 20.0], [20.0, 10.0], [30.0, 60.0]];
        let mut calls = Vec::new();
        let labels = ["a".to_string(), "b".to_string()];
        let measured = lab.measure_rounds(
            &labels,
            |p| {
                let round = calls.iter().filter(|&&q| q == p).count();
                calls.push(p);
                Record::new("x", "y", &labels[p], false, 1).metric("ops_per_s", values[round][p])
            },
            |round| ratio_to(round, 1, "ops_per_s", "x_b"),
        );
        assert_eq!(calls, [0, 1, 0, 1, 0, 1]);
        assert_eq!(measured.len(), 2);
        assert_eq!(measured[0].get("ops_per_s"), measured[1].get("ops_per_s"));
        assert_eq!(measured[0].get("x_b"), 0.5);
        assert_eq!((measured[0].min["x_b"], measured[0].max["x_b"]), (0.5, 2.0));
        assert_eq!(measured[1].get("x_b"), 1.0);
        // Every run is kept, numbered by its round.
        let report = lab.finish(vec![]);
        assert_eq!(report.records.len(), 6);
        let rounds: Vec<u32> = report.records.iter().map(|r| r.repeat).collect();
        assert_eq!(rounds, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_failed_run_ends_the_rounds_in_its_error() {
        let mut lab = Lab::new(2);
        let labels = ["a".to_string(), "b".to_string()];
        let mut calls = 0;
        let result = lab.try_measure_rounds(
            &labels,
            |p| {
                calls += 1;
                match p {
                    0 => Ok(Record::new("x", "y", "a", false, 1).metric("ops_per_s", 1.0)),
                    _ => Err(format!("b failed in call {calls}")),
                }
            },
            |_| {},
        );
        // The rounds went on; the first failure is the one returned.
        assert_eq!(calls, 4);
        assert_eq!(result, Err("b failed in call 2".to_string()));
        let ok = lab.try_measure_rounds(
            &labels[..1],
            |_| Ok(Record::new("x", "y", "a", false, 1).metric("ops_per_s", 3.0)),
            |_| {},
        );
        assert_eq!(ok.map(|m| m[0].get("ops_per_s")), Ok(3.0));
    }
}
