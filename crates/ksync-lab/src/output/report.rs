//! Everything one invocation measured, as `--json` and `--csv` write it
//! and `show` reads it back.

use super::record::Record;
use super::summary::SummaryRow;
use crate::harness::machine::Machine;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

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
    /// The context switch ksync's sleeping locks spun for at most before
    /// sleeping in this run, in nanoseconds (`ksync::spin_budget`), where
    /// one of them had to wait; reports written before it was kept lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_ns: Option<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::lab::Lab;

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
}
