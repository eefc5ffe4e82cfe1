//! `blis validate --plots DIR`: SVG charts of simulated against measured.
//!
//! * `parity_<metric>.svg`: every active stage, simulated against real, with
//!   the y = x line and ±10 % lines;
//! * `e2e_cdf_<experiment>.svg`: per-request E2E distributions, simulated and
//!   real (experiments with `requests.csv`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use blis_calibrate::compare::{ExperimentComparison, Metric, StageLabel};
use blis_calibrate::experiment::Status;
use plotters::prelude::*;

use crate::error::{BadInput, bad_input};
use crate::output::AtomicFile;

/// The output directory.
pub struct PlotDir(PathBuf);

impl PlotDir {
    /// Creates the directory (and parents) if needed.
    pub fn create(path: &Path) -> Result<PlotDir, BadInput> {
        std::fs::create_dir_all(path).map_err(|e| bad_input!("--plots {}: cannot create directory: {e}", path.display()))?;
        Ok(PlotDir(path.to_path_buf()))
    }
}

const SIZE: (u32, u32) = (720, 560);
const PARITY: [Metric; 5] = [Metric::E2eMean, Metric::E2eP90, Metric::E2eP99, Metric::TtftMean, Metric::ItlMean];

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e}")
}

fn save(dir: &PlotDir, name: &str, svg: &str) -> anyhow::Result<()> {
    let path = dir.0.join(name);
    let mut f = AtomicFile::create("plots", &path)?;
    f.writer().write_all(svg.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    f.commit()
}

fn parity(metric: Metric, points: &[(f64, f64)]) -> anyhow::Result<String> {
    let hi = points.iter().map(|&(a, p)| a.max(p)).fold(0.0, f64::max) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{}: simulated vs real, active stages", metric.name()), ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..hi, 0.0..hi)
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc("real").y_desc("simulated").draw().map_err(plot_err)?;
        chart.draw_series(LineSeries::new([(0.0, 0.0), (hi, hi)], BLACK.stroke_width(1))).map_err(plot_err)?.label("y = x");
        for k in [0.9, 1.1] {
            chart.draw_series(LineSeries::new([(0.0, 0.0), (hi, hi * k)], BLACK.mix(0.3).stroke_width(1))).map_err(plot_err)?;
        }
        chart
            .draw_series(points.iter().map(|&(a, p)| Circle::new((a, p), 4, BLUE.filled())))
            .map_err(plot_err)?
            .label("stage")
            .legend(|(x, y)| Circle::new((x, y), 4, BLUE.filled()));
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw().map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

fn quantiles(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (0..=200).map(|i| (v[(i * (n - 1)) / 200], i as f64 / 200.0)).collect()
}

fn cdf(name: &str, pairs: &[(f64, f64)]) -> anyhow::Result<String> {
    let real = quantiles(pairs.iter().map(|p| p.0).collect());
    let sim = quantiles(pairs.iter().map(|p| p.1).collect());
    let lo = real[0].0.min(sim[0].0) * 0.95;
    let hi = real[200].0.max(sim[200].0) * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("E2E per request: {name}"), ("sans-serif", 16))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(lo..hi, 0.0..1.0)
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc("E2E (ms)").y_desc("fraction of requests").draw().map_err(plot_err)?;
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

/// Writes every plot.
pub fn write_all(dir: &PlotDir, comparisons: &[ExperimentComparison]) -> anyhow::Result<()> {
    for metric in PARITY {
        let points: Vec<(f64, f64)> = comparisons
            .iter()
            .filter(|c| c.status == Status::Active)
            .flat_map(|c| c.rows.iter().filter(|r| r.metric == metric && r.stage != StageLabel::Summary).map(|r| (r.actual, r.predicted)))
            .collect();
        if !points.is_empty() {
            save(dir, &format!("parity_{}.svg", metric.name()), &parity(metric, &points)?)?;
        }
    }
    for c in comparisons.iter().filter(|c| c.request_e2e_ms.len() >= 2) {
        save(dir, &format!("e2e_cdf_{}.svg", c.name), &cdf(&c.name, &c.request_e2e_ms)?)?;
    }
    Ok(())
}
