//! `blis validate --plots DIR`: SVG charts of simulated against measured.
//!
//! * `parity_<metric>.svg`: every active stage, simulated against real, with
//!   the y = x line and ±10 % lines;
//! * `e2e_cdf_<experiment>.svg`: per-request E2E distributions, simulated and
//!   real (experiments with `requests.csv`);
//! * `timeline_<experiment>.svg`: mean TTFT of the successful requests and
//!   the failed fraction, by send time, simulated and real (experiments with
//!   `requests.csv`): how fast a queue builds up and when requests start
//!   timing out.

use blis_calibrate::experiment::Status;
use blis_calibrate::validate::compare::{ExperimentComparison, Latency, Metric, RequestPair, StageLabel};
use plotters::prelude::SeriesLabelPosition;

use super::{Panel, PlotDir, SIZE, against_diagonal, cdf_overlay, stacked_panels};

/// Send-time bins of a timeline.
const TIMELINE_BINS: usize = 60;

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
            let svg = against_diagonal(&title, "real (ms)", "simulated (ms)", "one stage of one experiment", &points, Some(0.1))?;
            dir.save(&format!("parity_{}.svg", metric.name()), &svg)?;
        }
    }
    for c in comparisons {
        let (real, sim): (Vec<f64>, Vec<f64>) = c.request_pairs.iter().filter_map(|p| p.both()).map(|(r, s)| (r.e2e_ms, s.e2e_ms)).unzip();
        if real.len() < 2 {
            continue;
        }
        dir.save(&format!("e2e_cdf_{}.svg", c.name), &cdf_overlay(&format!("E2E per request: {}", c.name), "E2E (ms)", &real, &sim)?)?;
        dir.save(&format!("timeline_{}.svg", c.name), &timeline(c)?)?;
    }
    Ok(())
}

/// Per send-time bin: (bin centre s, mean TTFT s of the successes, failed fraction).
fn binned(pairs: &[RequestPair], side: fn(&RequestPair) -> Option<Latency>) -> Vec<(f64, Option<f64>, Option<f64>)> {
    let span_s = pairs.iter().map(|p| p.send_s).fold(0.0, f64::max).max(1e-9);
    let width_s = span_s / TIMELINE_BINS as f64;
    let mut bins = vec![(0.0, 0u32, 0u32); TIMELINE_BINS];
    for p in pairs {
        let b = &mut bins[((p.send_s / width_s) as usize).min(TIMELINE_BINS - 1)];
        b.2 += 1;
        if let Some(l) = side(p) {
            b.0 += l.ttft_ms / 1e3;
            b.1 += 1;
        }
    }
    bins.iter()
        .enumerate()
        .map(|(i, &(ttft_s, ok, sent))| {
            let x = (i as f64 + 0.5) * width_s;
            (x, (ok > 0).then(|| ttft_s / ok as f64), (sent > 0).then(|| 1.0 - ok as f64 / sent as f64))
        })
        .collect()
}

fn timeline(c: &ExperimentComparison) -> anyhow::Result<String> {
    let real = binned(&c.request_pairs, |p| p.real);
    let sim = binned(&c.request_pairs, |p| p.predicted);
    let column =
        |bins: &[(f64, Option<f64>, Option<f64>)], failed: bool| bins.iter().map(|&(x, t, f)| (x, if failed { f } else { t })).collect();
    let panels = [
        Panel::real_vs_simulated("mean TTFT of successes (s)", None, column(&real, false), column(&sim, false)),
        Panel::real_vs_simulated("failed fraction", Some(1.05), column(&real, true), column(&sim, true)),
    ];
    stacked_panels(&format!("By send time: {}", c.name), "send time (s)", &panels, SIZE.0, SeriesLabelPosition::UpperLeft)
}
