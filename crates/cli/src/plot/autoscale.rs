//! The autoscaling timeline of `blis run --plot-timeline`: load, replicas
//! and TTFT over the run, one panel each, at every scaling decision.

use blis_cluster::autoscale::report::TimelinePoint;
use plotters::prelude::*;

use super::{SIZE, plot_err};

/// One line of a panel: a label, a colour and `(x, y)` points (`None` breaks the line).
type Series<'a> = (&'a str, RGBColor, Vec<(f64, Option<f64>)>);

/// The three panels over hours (or minutes for runs under two hours).
pub fn timeline(title: &str, points: &[TimelinePoint]) -> anyhow::Result<String> {
    let hours = points.last().is_some_and(|p| p.t_s >= 7200.0);
    let (unit, x_desc) = if hours { (3600.0, "time (h)") } else { (60.0, "time (min)") };
    let x = |p: &TimelinePoint| p.t_s / unit;
    let line = |f: &dyn Fn(&TimelinePoint) -> Option<f64>| points.iter().map(|p| (x(p), f(p))).collect::<Vec<_>>();
    let panels: [(&str, Vec<Series<'_>>); 3] = [
        ("arrivals (req/s)", vec![("request rate", BLUE, line(&|p| Some(p.request_rate)))]),
        (
            "replicas",
            vec![
                ("ready", BLACK, line(&|p| Some(f64::from(p.ready)))),
                ("starting", GREEN, line(&|p| Some(f64::from(p.starting)))),
                ("draining", MAGENTA, line(&|p| Some(f64::from(p.draining)))),
                ("desired", RED, line(&|p| Some(f64::from(p.desired)))),
            ],
        ),
        ("TTFT mean (ms)", vec![("TTFT", RGBColor(200, 120, 0), line(&|p| p.ttft_mean_ms))]),
    ];
    let xmax = points.iter().map(x).fold(0.0, f64::max).max(1e-9);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0 + 180, SIZE.1 / 2 * 3 + 40)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(plot_err)?;
        for (area, (y_desc, series)) in root.split_evenly((3, 1)).iter().zip(&panels) {
            let ymax = series.iter().flat_map(|s| s.2.iter().filter_map(|q| q.1)).fold(0.0, f64::max).max(1e-9) * 1.1;
            let mut chart = ChartBuilder::on(area)
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d(0.0..xmax, 0.0..ymax)
                .map_err(plot_err)?;
            chart.configure_mesh().x_desc(x_desc).y_desc(*y_desc).draw().map_err(plot_err)?;
            for (label, color, points) in series {
                let color = *color;
                for (k, segment) in points.split(|q| q.1.is_none()).filter(|s| !s.is_empty()).enumerate() {
                    let drawn = chart
                        .draw_series(LineSeries::new(segment.iter().filter_map(|&(x, y)| Some((x, y?))), color.stroke_width(2)))
                        .map_err(plot_err)?;
                    if k == 0 {
                        drawn.label(*label).legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
                    }
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .draw()
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}
