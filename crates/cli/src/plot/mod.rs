//! SVG plots (plotters): the shared chart shapes and one module per command
//! that draws them.
//!
//! * [`validate`]: simulated against measured per stage, per-request CDFs.
//! * [`calibrate`]: QQ and CDF overlays of a live trace and its replay.
//! * [`workload`]: arrival rates and length histograms of a workload.
//! * [`autoscale`]: load, replicas and TTFT over an autoscaled run.

pub mod autoscale;
pub mod calibrate;
pub mod sweep;
pub mod validate;
pub mod workload;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

use crate::error::{BadInput, bad_input};
use crate::output::AtomicFile;

/// An output directory for plots.
pub struct PlotDir(PathBuf);

impl PlotDir {
    /// Creates the directory (and parents) if needed.
    pub fn create(path: &Path) -> Result<PlotDir, BadInput> {
        std::fs::create_dir_all(path).map_err(|e| bad_input!("--plots {}: cannot create directory: {e}", path.display()))?;
        Ok(PlotDir(path.to_path_buf()))
    }

    /// Writes `svg` as `name` in the directory (atomically).
    pub fn save(&self, name: &str, svg: &str) -> anyhow::Result<()> {
        let path = self.0.join(name);
        let mut f = AtomicFile::create("plots", &path)?;
        f.writer().write_all(svg.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
        f.commit()
    }
}

const SIZE: (u32, u32) = (720, 560);

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e}")
}

/// Points `(x, y)` against the `y = x` diagonal (plus `y = (1 ± band)·x`
/// lines when `band` is given): parity and QQ plots; every series is in the
/// legend, the points as `points_label`. Points with a non-finite
/// coordinate are left out (an infinite axis cannot be drawn).
pub fn against_diagonal(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    points_label: &str,
    points: &[(f64, f64)],
    band: Option<f64>,
) -> anyhow::Result<String> {
    let points: Vec<(f64, f64)> = points.iter().copied().filter(|(a, p)| a.is_finite() && p.is_finite()).collect();
    let lo = points.iter().map(|&(a, p)| a.min(p)).fold(f64::INFINITY, f64::min).min(0.0);
    let hi = points.iter().map(|&(a, p)| a.max(p)).fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(lo..hi, lo..hi)
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(plot_err)?;
        chart
            .draw_series(LineSeries::new([(lo, lo), (hi, hi)], BLACK.stroke_width(1)))
            .map_err(plot_err)?
            .label("y = x")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(1)));
        if let Some(b) = band {
            for (i, k) in [1.0 - b, 1.0 + b].into_iter().enumerate() {
                // Ends inside the chart: a line leaving it is not drawn.
                let end = if k > 1.0 { (hi / k, hi) } else { (hi, hi * k) };
                let line = chart.draw_series(LineSeries::new([(0.0, 0.0), end], BLACK.mix(0.3).stroke_width(1))).map_err(plot_err)?;
                if i == 0 {
                    line.label(format!("y = (1 ± {b})·x"))
                        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.mix(0.3).stroke_width(1)));
                }
            }
        }
        chart
            .draw_series(points.iter().map(|&(a, p)| Circle::new((a, p), 4, BLUE.filled())))
            .map_err(plot_err)?
            .label(points_label)
            .legend(|(x, y)| Circle::new((x + 8, y), 4, BLUE.filled()));
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw().map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// 201 points `(value, fraction ≤ value)` of an empirical CDF.
fn cdf_points(v: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    (0..=200).map(|i| (v[(i * (n - 1)) / 200], i as f64 / 200.0)).collect()
}

/// The empirical CDFs of real and simulated samples, overlaid.
pub fn cdf_overlay(title: &str, x_desc: &str, real: &[f64], sim: &[f64]) -> anyhow::Result<String> {
    let (real, sim) = (cdf_points(real), cdf_points(sim));
    let lo = real.first().map_or(0.0, |p| p.0).min(sim.first().map_or(0.0, |p| p.0)) * 0.95;
    let hi = (real.last().map_or(1.0, |p| p.0).max(sim.last().map_or(1.0, |p| p.0)) * 1.05).max(lo + 1e-9);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(lo..hi, 0.0..1.0)
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc(x_desc).y_desc("fraction ≤ x").draw().map_err(plot_err)?;
        for (points, color, label) in [(real, BLACK, "real"), (sim, RED, "simulated")] {
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(plot_err)?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw().map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// One line of a [`Panel`]: a legend label, a colour and `(x, y)` points
/// (a `None` point breaks the line).
pub struct Line {
    /// Legend label.
    pub label: &'static str,
    /// Colour.
    pub color: RGBColor,
    /// The points.
    pub points: Vec<(f64, Option<f64>)>,
}

/// One panel of [`stacked_panels`]: a y-axis name and its lines.
pub struct Panel {
    /// What the y axis shows.
    pub y_desc: &'static str,
    /// Top of the y axis; `None` fits the data.
    pub y_max: Option<f64>,
    /// The lines.
    pub lines: Vec<Line>,
}

impl Panel {
    /// A panel with a real (black) and a simulated (red) line.
    pub fn real_vs_simulated(
        y_desc: &'static str,
        y_max: Option<f64>,
        real: Vec<(f64, Option<f64>)>,
        simulated: Vec<(f64, Option<f64>)>,
    ) -> Panel {
        Panel {
            y_desc,
            y_max,
            lines: vec![Line { label: "real", color: BLACK, points: real }, Line { label: "simulated", color: RED, points: simulated }],
        }
    }
}

/// Panels stacked vertically over a shared x axis, `width` pixels wide, the
/// legend of each at `legend`.
pub fn stacked_panels(title: &str, x_desc: &str, panels: &[Panel], width: u32, legend: SeriesLabelPosition) -> anyhow::Result<String> {
    let all = || panels.iter().flat_map(|p| p.lines.iter().flat_map(|l| l.points.iter()));
    let xmax = all().map(|q| q.0).fold(0.0, f64::max).max(1e-9);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, SIZE.1 / 2 * panels.len() as u32 + 40)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(plot_err)?;
        for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
            let fit = || panel.lines.iter().flat_map(|l| l.points.iter().filter_map(|q| q.1)).fold(0.0, f64::max).max(1e-9) * 1.1;
            let ymax = panel.y_max.unwrap_or_else(fit);
            let mut chart = ChartBuilder::on(area)
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d(0.0..xmax, 0.0..ymax)
                .map_err(plot_err)?;
            chart.configure_mesh().x_desc(x_desc).y_desc(panel.y_desc).draw().map_err(plot_err)?;
            for line in &panel.lines {
                let (color, label) = (line.color, line.label);
                let segments = line.points.split(|q| q.1.is_none()).filter(|s| !s.is_empty());
                for (k, segment) in segments.enumerate() {
                    let series = chart
                        .draw_series(LineSeries::new(segment.iter().filter_map(|&(x, y)| Some((x, y?))), color.stroke_width(2)))
                        .map_err(plot_err)?;
                    if k == 0 {
                        series.label(label).legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
                    }
                }
            }
            chart
                .configure_series_labels()
                .position(legend.clone())
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parity_plot_leaves_out_points_it_cannot_place() {
        let svg = against_diagonal("t", "real", "simulated", "points", &[(1.0, 2.0), (f64::INFINITY, 3.0), (4.0, f64::NAN)], None).unwrap();
        assert_eq!(svg.matches("<circle").count(), 2, "one point and its legend marker: {svg}");
    }

    #[test]
    fn every_series_of_a_parity_plot_is_in_the_legend() {
        let svg = against_diagonal("t", "real (ms)", "simulated (ms)", "stages", &[(1.0, 1.1), (2.0, 1.9)], Some(0.1)).unwrap();
        for label in ["y = x", "y = (1 ± 0.1)·x", "stages", "real (ms)", "simulated (ms)"] {
            assert!(svg.contains(label), "{label} missing");
        }
    }
}
