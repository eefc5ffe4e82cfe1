//! The autoscaling timeline of `blis run --plot-timeline`: load, replicas
//! and TTFT over the run, one panel each, at every scaling decision.

use blis_cluster::autoscale::TimelinePoint;
use plotters::prelude::*;

use super::{Line, Panel, SIZE, stacked_panels};

/// The three panels over hours (or minutes for runs under two hours).
pub fn timeline(title: &str, points: &[TimelinePoint]) -> anyhow::Result<String> {
    let hours = points.last().is_some_and(|p| p.t_s >= 7200.0);
    let (unit, x_desc) = if hours { (3600.0, "time (h)") } else { (60.0, "time (min)") };
    let line = |label, color, f: &dyn Fn(&TimelinePoint) -> Option<f64>| Line {
        label,
        color,
        points: points.iter().map(|p| (p.t_s / unit, f(p))).collect(),
    };
    let count = |n: u32| Some(f64::from(n));
    let panels = [
        Panel { y_desc: "arrivals (req/s)", y_max: None, lines: vec![line("request rate", BLUE, &|p| Some(p.request_rate))] },
        Panel {
            y_desc: "replicas",
            y_max: None,
            lines: vec![
                line("ready", BLACK, &|p| count(p.ready)),
                line("starting", GREEN, &|p| count(p.starting)),
                line("draining", MAGENTA, &|p| count(p.draining)),
                line("desired", RED, &|p| count(p.desired)),
            ],
        },
        Panel { y_desc: "TTFT mean (ms)", y_max: None, lines: vec![line("TTFT", RGBColor(200, 120, 0), &|p| p.ttft_mean_ms)] },
    ];
    stacked_panels(title, x_desc, &panels, SIZE.0 + 180, SeriesLabelPosition::UpperRight)
}
