//! `--plot FILE`: throughput against threads, one line per lock, one panel
//! per workload measured at two or more thread counts. SVG or PNG by the
//! file's extension.
//!
//! Both are drawn with `plotters` and need no system library: text is laid
//! out with `ab_glyph` from a font compiled into the binary (Ubuntu Light,
//! from the `epaint_default_fonts` crate), so PNGs render on a fresh
//! machine without fontconfig or FreeType.

use super::record::median;
use super::report::Report;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Once;

/// One line: a lock's median throughput by thread count.
struct Line {
    lock: String,
    ksync: bool,
    /// (threads, Mops/s), sorted by threads.
    points: Vec<(f64, f64)>,
}

/// One panel: a workload's lines.
struct Panel {
    title: String,
    lines: Vec<Line>,
}

/// Strong, distinguishable colours (ksync solid, peers dashed, so a colour
/// may repeat across the two).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// Width kept right of each chart for its legend.
const LEGEND_WIDTH: u32 = 190;

fn panels(report: &Report) -> Vec<Panel> {
    // (experiment, workload) -> lock -> threads -> values
    type Groups = BTreeMap<(String, String), Vec<(String, bool, BTreeMap<usize, Vec<f64>>)>>;
    let mut groups: Groups = BTreeMap::new();
    for r in &report.records {
        let Some(&v) = r.metrics.get("ops_per_s") else {
            continue;
        };
        if !(v.is_finite() && v > 0.0) {
            continue;
        }
        let locks = groups
            .entry((r.experiment.clone(), r.workload.clone()))
            .or_default();
        let at = match locks.iter().position(|l| l.0 == r.lock) {
            Some(i) => i,
            None => {
                locks.push((r.lock.clone(), r.ksync, BTreeMap::new()));
                locks.len() - 1
            }
        };
        locks[at].2.entry(r.threads).or_default().push(v * 1e-6);
    }
    groups
        .into_iter()
        .filter(|(_, locks)| {
            let mut threads: Vec<usize> = locks.iter().flat_map(|l| l.2.keys().copied()).collect();
            threads.sort_unstable();
            threads.dedup();
            threads.len() >= 2
        })
        .map(|((experiment, workload), locks)| Panel {
            title: format!("{experiment}: {workload}"),
            lines: locks
                .into_iter()
                .map(|(lock, ksync, by_threads)| Line {
                    lock,
                    ksync,
                    points: by_threads
                        .into_iter()
                        .map(|(t, mut vs)| {
                            vs.sort_by(f64::total_cmp);
                            (t as f64, median(&vs))
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

/// Draws `report` into `path` (already resolved); `.svg` or `.png`.
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let panels = panels(report);
    if panels.is_empty() {
        return Err(
            "--plot: nothing to draw; the plot shows throughput against threads, so it needs \
             a workload measured at two or more thread counts (e.g. spin --threads 1,2,4)"
                .into(),
        );
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    register_font();
    let cols = panels.len().min(2) as u32;
    let rows = panels.len().div_ceil(2) as u32;
    let size = ((760 + LEGEND_WIDTH) * cols, 560 * rows);
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
    }
    let result = match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw_on(&root, &panels, rows as usize, cols as usize)
                .and_then(|_| root.present().map_err(|e| e.to_string()))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_on(&root, &panels, rows as usize, cols as usize)
                .and_then(|_| root.present().map_err(|e| e.to_string()))
        }
        _ => {
            return Err(format!(
                "--plot {}: the file name must end in .svg or .png",
                path.display()
            ))
        }
    };
    result.map_err(|e| format!("cannot draw {}: {e}", path.display()))
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and valid; a failure would only leave
        // text unlaid, which draw() then reports as an error.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Panel],
    rows: usize,
    cols: usize,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((rows, cols));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw_panel(area, panel).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    // Thread counts as evenly spaced categories, as the mailing-list tables
    // list them (1, 2, 4, 8, 64 would crowd on a linear or log axis).
    let mut threads: Vec<u64> = panel
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0 as u64))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let slot = |t: f64| threads.iter().position(|&x| x == t as u64).unwrap_or(0);
    let (mut ymin, mut ymax) = (f64::MAX, f64::MIN);
    for &(_, y) in panel.lines.iter().flat_map(|l| l.points.iter()) {
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(12)
        .margin_right(LEGEND_WIDTH)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (0..threads.len() - 1).into_segmented(),
            (ymin * 0.5..ymax * 2.0).log_scale(),
        )?;
    let label = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => threads.get(*i).map_or(String::new(), u64::to_string),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .x_desc("threads")
        .y_desc("Mops/s")
        .x_labels(threads.len())
        .x_label_formatter(&label)
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.3}")
            }
        })
        .draw()?;
    let (mut ours, mut theirs) = (0, 0);
    let legend_x = area.dim_in_pixel().0 as i32 - LEGEND_WIDTH as i32 + 16;
    for (legend_row, line) in (0i32..).zip(&panel.lines) {
        let index = if line.ksync { &mut ours } else { &mut theirs };
        let color = COLORS[*index % COLORS.len()];
        *index += 1;
        let style = color.stroke_width(2);
        let points: Vec<(SegmentValue<usize>, f64)> = line
            .points
            .iter()
            .map(|&(t, y)| (SegmentValue::CenterOf(slot(t)), y))
            .collect();
        let series = if line.ksync {
            chart.draw_series(LineSeries::new(points.clone(), style))?
        } else {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))?
        };
        // The legend, right of the chart: a solid stub for ksync, dashed for peers.
        let _ = series;
        let y = 50 + 18 * legend_row;
        let gap = if line.ksync { 8 } else { 12 };
        area.draw(&PathElement::new(
            vec![(legend_x, y), (legend_x + 8, y)],
            style,
        ))?;
        area.draw(&PathElement::new(
            vec![(legend_x + gap, y), (legend_x + 20, y)],
            style,
        ))?;
        area.draw(&Text::new(
            line.lock.clone(),
            (legend_x + 26, y - 7),
            ("sans-serif", 13),
        ))?;
        chart.draw_series(
            points
                .iter()
                .map(|(x, y)| Circle::new((x.clone(), *y), 3, color.filled())),
        )?;
    }
    Ok(())
}
