//! `compare`'s summary: one row per workload, the best peer and its
//! figure, then each ksync primitive as a multiple of it.

use super::record::{peer_ratio_key, ratio_text, Measured};
use super::table::Table;
use serde::{Deserialize, Serialize};

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
    /// Each ksync primitive's ratio to the best peer as the median of
    /// ratios taken within rounds (`record::ratios_to_peers`), where its
    /// runs carry one: what the experiment's own table shows, which the
    /// ratio of the two medians above need not be.
    #[serde(default)]
    pub paired: Vec<(String, f64)>,
    /// What the experiment's own notes say qualifies some of this row's
    /// runs: the summary marks the ratios it concerns and repeats it, so
    /// that a reader of the summary alone is told too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<Caveat>,
}

/// A [`SummaryRow::caveat`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Caveat {
    /// What qualifies the runs, in a few words.
    pub text: String,
    /// The ksync columns it concerns; empty: every one.
    #[serde(default)]
    pub columns: Vec<String>,
}

impl Caveat {
    fn concerns(&self, column: &str) -> bool {
        self.columns.is_empty() || self.columns.iter().any(|c| c == column)
    }
}

impl SummaryRow {
    /// Picks the best peer among `points` (those with `ksync == false`) by
    /// `metric` (medians) and keeps every ksync point, scaled by `scale` for
    /// display in `unit`, with its paired ratio to that peer where its runs
    /// took one. Every experiment that pairs takes `x_<peer>` over the
    /// metric its summary row is built from (its throughput).
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
        let paired = best_peer
            .as_ref()
            .map(|(best, _)| {
                let key = peer_ratio_key(best);
                points
                    .iter()
                    .filter(|p| p.record.ksync && p.get(&key).is_finite())
                    .map(|p| (p.record.lock.clone(), p.get(&key)))
                    .collect()
            })
            .unwrap_or_default();
        SummaryRow {
            workload: workload.into(),
            unit: unit.into(),
            higher_is_better,
            best_peer,
            ksync,
            paired,
            caveat: None,
        }
    }

    /// The row with `caveat` ([`SummaryRow::caveat`]), if there is one.
    pub fn with_caveat(self, caveat: Option<Caveat>) -> Self {
        SummaryRow { caveat, ..self }
    }

    /// `name`'s figure as a multiple of the best peer's, oriented so that
    /// above 1 is always better for ksync: the paired ratio where there is
    /// one, else the ratio of the medians.
    pub fn ratio(&self, name: &str) -> Option<f64> {
        let (_, best) = self.best_peer.as_ref()?;
        let (_, ours) = self.ksync.iter().find(|k| k.0 == name)?;
        let x = match self.paired.iter().find(|k| k.0 == name) {
            Some((_, x)) => *x,
            None => ours / best,
        };
        let r = if self.higher_is_better { x } else { 1.0 / x };
        r.is_finite().then_some(r)
    }
}

/// One row per workload: the best peer with its figure, then each ksync
/// primitive's ratio to it (`-` where it was not measured).
pub fn summary_table(rows: &[SummaryRow]) -> Table {
    let mut names: Vec<&str> = Vec::new();
    for row in rows {
        for (name, _) in &row.ksync {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    let mut t = Table::new(
        ["workload", "unit", "best peer"]
            .into_iter()
            .map(String::from)
            .chain(names.iter().map(|n| n.to_string())),
    );
    for row in rows {
        let mut cells = vec![
            row.workload.clone(),
            format!(
                "{} ({} better)",
                row.unit,
                if row.higher_is_better {
                    "higher"
                } else {
                    "lower"
                }
            ),
            row.best_peer
                .as_ref()
                .map_or("-".into(), |(name, v)| format!("{name} {}", fmt_value(*v))),
        ];
        for name in &names {
            let marked = row.caveat.as_ref().is_some_and(|c| c.concerns(name));
            let mark = if marked { CAVEAT_MARK } else { "" };
            cells.push(
                row.ratio(name)
                    .map_or("-".into(), |r| format!("{}{mark}", ratio_text(r))),
            );
        }
        t.row(cells);
    }
    for row in rows {
        if let Some(caveat) = &row.caveat {
            t.note(format!("{CAVEAT_MARK} {}: {}", row.workload, caveat.text));
        }
    }
    t.note(
        "Ratios: ksync's figure over the best peer's, inverted for lower-is-better units, so \
         above 1 means ksync did better; with --repeat, the median of ratios taken within a \
         round where the experiment runs in rounds, as its own table shows. On a shared or \
         small machine, contended ratios from one short run move by a factor of 1.5 or more \
         between runs: use --repeat."
            .into(),
    );
    t
}

/// Follows each ratio a [`SummaryRow::caveat`] concerns, and begins the
/// note that gives it.
const CAVEAT_MARK: &str = "*";

fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::record::Record;

    #[test]
    fn lower_is_better_ratios_are_inverted() {
        let a = Measured::from_runs(&[Record::new("u", "w", "ours", true, 1).metric("ns", 5.0)]);
        let b = Measured::from_runs(&[Record::new("u", "w", "peer", false, 1).metric("ns", 10.0)]);
        let row = SummaryRow::from_measured("u", "ns", "ns", 1.0, false, &[&a, &b]);
        assert_eq!(row.ratio("ours"), Some(2.0));
    }

    #[test]
    fn a_row_with_a_caveat_marks_its_ratios_and_gives_the_caveat() {
        let a = Measured::from_runs(&[Record::new("u", "w", "ours", true, 1).metric("ns", 5.0)]);
        let c = Measured::from_runs(&[Record::new("u", "w", "also", true, 1).metric("ns", 4.0)]);
        let b = Measured::from_runs(&[Record::new("u", "w", "peer", false, 1).metric("ns", 10.0)]);
        let row = |caveat: Option<Caveat>| {
            SummaryRow::from_measured("bench", "ns", "ns", 1.0, false, &[&a, &c, &b])
                .with_caveat(caveat)
        };
        let plain = summary_table(&[row(None)]).render();
        assert!(plain.contains("| 2.00 | 2.50 |"), "{plain}");
        assert!(!plain.contains('*'), "{plain}");
        let caveat = |columns: &[&str]| Caveat {
            text: "a run measured something else".into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
        };
        let every = summary_table(&[row(Some(caveat(&[])))]).render();
        assert!(every.contains("| 2.00* | 2.50* |"), "{every}");
        assert!(
            every.contains("* bench: a run measured something else"),
            "{every}"
        );
        let one = summary_table(&[row(Some(caveat(&["also"])))]).render();
        assert!(one.contains("| 2.00 | 2.50* |"), "{one}");
    }

    #[test]
    fn a_ratio_paired_within_rounds_wins_over_the_ratio_of_medians() {
        use crate::output::record::ratios_to_peers;
        // Three rounds on a drifting machine: the medians (2 and 2) say
        // 1.0, the rounds say 2, 2 and 0.25, whose median is 2.
        let rounds = [[4.0, 2.0], [2.0, 1.0], [1.0, 4.0]].map(|[ours, peer]| {
            let mut round = [
                Record::new("spin", "w", "ours", true, 2).metric("ops_per_s", ours),
                Record::new("spin", "w", "peer", false, 2).metric("ops_per_s", peer),
            ];
            ratios_to_peers(&mut round, "ops_per_s");
            round
        });
        let runs: [Vec<Record>; 2] = [0, 1].map(|i| rounds.iter().map(|r| r[i].clone()).collect());
        let (ours, peer) = (Measured::from_runs(&runs[0]), Measured::from_runs(&runs[1]));
        let summary = |ours: &Measured| {
            SummaryRow::from_measured("spin", "ops/s", "ops_per_s", 1.0, true, &[ours, &peer])
        };
        assert_eq!(summary(&ours).ratio("ours"), Some(2.0));
        // Without the paired metric, the medians decide.
        let mut unpaired = runs[0].clone();
        unpaired.iter_mut().for_each(|r| {
            r.metrics.remove("x_peer");
        });
        assert_eq!(
            summary(&Measured::from_runs(&unpaired)).ratio("ours"),
            Some(1.0)
        );
    }
}
