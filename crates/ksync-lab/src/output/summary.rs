//! `compare`'s summary: one row per workload, the best peer and its
//! figure, then each ksync primitive as a multiple of it.

use super::record::{ratio_text, Measured};
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
            cells.push(row.ratio(name).map_or("-".into(), ratio_text));
        }
        t.row(cells);
    }
    t.note(
        "Ratios: ksync's figure over the best peer's, inverted for lower-is-better units, so \
         above 1 means ksync did better. On a shared or small machine, contended ratios from \
         one short run move by a factor of 1.5 or more between runs: use --repeat."
            .into(),
    );
    t
}

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
}
