//! `blis validate --plots DIR`: SVG charts of simulated against measured.
//!
//! * `parity_<metric>.svg`: every active stage, simulated against real, with
//!   the y = x line and ±10 % lines;
//! * `e2e_cdf_<experiment>.svg`: per-request E2E distributions, simulated and
//!   real (experiments with `requests.csv`).

use blis_calibrate::compare::{ExperimentComparison, Metric, StageLabel};
use blis_calibrate::experiment::Status;

use super::{PlotDir, against_diagonal, cdf_overlay};

const PARITY: [Metric; 5] = [Metric::E2eMean, Metric::E2eP90, Metric::E2eP99, Metric::TtftMean, Metric::ItlMean];

/// Writes every plot.
pub fn write_all(dir: &PlotDir, comparisons: &[ExperimentComparison]) -> anyhow::Result<()> {
    for metric in PARITY {
        let points: Vec<(f64, f64)> = comparisons
            .iter()
            .filter(|c| c.status == Status::Active)
            .flat_map(|c| c.rows.iter().filter(|r| r.metric == metric && r.stage != StageLabel::Summary).map(|r| (r.actual, r.predicted)))
            .collect();
        if !points.is_empty() {
            let title = format!("{}: simulated vs real, active stages", metric.name());
            dir.save(&format!("parity_{}.svg", metric.name()), &against_diagonal(&title, "real", "simulated", &points, Some(0.1))?)?;
        }
    }
    for c in comparisons.iter().filter(|c| c.request_e2e_ms.len() >= 2) {
        let (real, sim): (Vec<f64>, Vec<f64>) = c.request_e2e_ms.iter().copied().unzip();
        dir.save(&format!("e2e_cdf_{}.svg", c.name), &cdf_overlay(&format!("E2E per request: {}", c.name), "E2E (ms)", &real, &sim)?)?;
    }
    Ok(())
}
