//! `blis sweep --plot`: every point of a sweep by cost (dollars, or GPUs
//! when nothing is priced) and p99 TTFT, with the Pareto frontier, the
//! points no other point beats on both.

use plotters::prelude::*;

use super::{SIZE, plot_err};

/// A point of the plot: cost, p99 TTFT (ms), goodput (req/s), its number.
type Point = (f64, f64, f64, u64);

/// The points of `csv` (a sweep's output) that completed, by cost, p99 TTFT and goodput.
fn points(csv: &str) -> (Vec<Point>, &'static str) {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(point), Some(gpus), Some(cost), Some(ttft), Some(goodput), Some(error)) =
        (col("point"), col("gpus"), col("cost_usd"), col("ttft_p99_ms"), col("goodput_rps"), col("error"))
    else {
        return (Vec::new(), "GPUs");
    };
    let rows: Vec<Vec<&str>> =
        lines.map(|l| l.split(',').collect()).filter(|r: &Vec<&str>| r.len() == header.len() && r[error].is_empty()).collect();
    let priced = !rows.is_empty() && rows.iter().all(|r| !r[cost].is_empty());
    let x = if priced { cost } else { gpus };
    let num = |t: &str| t.parse::<f64>().ok();
    let pts = rows.iter().filter_map(|r| Some((num(r[x])?, num(r[ttft])?, num(r[goodput])?, r[point].parse().ok()?))).collect();
    (pts, if priced { "cost ($)" } else { "GPUs" })
}

/// The points no other point beats on both cost and p99 TTFT, by cost.
fn frontier(points: &[Point]) -> Vec<Point> {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut best = f64::INFINITY;
    sorted
        .into_iter()
        .filter(|p| {
            p.1 < best && {
                best = p.1;
                true
            }
        })
        .collect()
}

/// The SVG of a sweep's output.
pub fn pareto(title: &str, csv: &str) -> anyhow::Result<String> {
    let (points, x_desc) = points(csv);
    let labelled: Vec<(f64, f64, String)> = points.iter().map(|p| (p.0, p.1, format!("#{}: {:.1}", p.3, p.2))).collect();
    frontier_plot(title, x_desc, "TTFT p99 (ms)", "Pareto frontier (point: goodput req/s)", &labelled)
}

/// Points `(cost, latency, label)` and their Pareto frontier (lower is
/// better on both), the frontier's points labelled; the latency axis is
/// logarithmic when the values span more than a factor of 100.
pub fn frontier_plot(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    frontier_desc: &str,
    points: &[(f64, f64, String)],
) -> anyhow::Result<String> {
    let plain: Vec<Point> =
        points.iter().enumerate().map(|(i, p)| (p.0, p.1, 0.0, i as u64)).filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
    let front = frontier(&plain);
    let x_max = plain.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-9) * 1.1;
    let y_max = plain.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.25;
    let y_min = plain.iter().map(|p| p.1).filter(|&y| y > 0.0).fold(f64::INFINITY, f64::min).min(y_max) * 0.8;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        macro_rules! builder {
            () => {
                ChartBuilder::on(&root).caption(title, ("sans-serif", 18)).margin(16).x_label_area_size(44).y_label_area_size(72)
            };
        }
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(plot_err)?;
                chart
                    .draw_series(plain.iter().map(|p| Circle::new((p.0, p.1), 3, BLUE.mix(0.4).filled())))
                    .map_err(plot_err)?
                    .label("candidate")
                    .legend(|(x, y)| Circle::new((x + 8, y), 3, BLUE.mix(0.4).filled()));
                chart
                    .draw_series(LineSeries::new(front.iter().map(|p| (p.0, p.1)), RED.stroke_width(2)))
                    .map_err(plot_err)?
                    .label(frontier_desc)
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED.stroke_width(2)));
                chart
                    .draw_series(front.iter().map(|p| {
                        EmptyElement::at((p.0, p.1))
                            + Circle::new((0, 0), 4, RED.filled())
                            + Text::new(points[p.3 as usize].2.clone(), (6, -14), ("sans-serif", 11))
                    }))
                    .map_err(plot_err)?;
                chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw().map_err(plot_err)?;
            }};
        }
        if y_max / y_min > 100.0 {
            draw!(builder!().build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale()).map_err(plot_err)?);
        } else {
            draw!(builder!().build_cartesian_2d(0.0..x_max, 0.0..y_max).map_err(plot_err)?);
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_keeps_the_points_nothing_beats_on_both() {
        let pts = [(1.0, 50.0, 0.0, 0), (2.0, 30.0, 0.0, 1), (2.0, 40.0, 0.0, 2), (3.0, 35.0, 0.0, 3), (4.0, 10.0, 0.0, 4)];
        let ids: Vec<u64> = frontier(&pts).iter().map(|p| p.3).collect();
        assert_eq!(ids, [0, 1, 4]);
        // Brute force: a point is on the frontier iff no other is at least as good on both and better on one.
        for p in &pts {
            let dominated = pts.iter().any(|q| q.0 <= p.0 && q.1 <= p.1 && (q.0 < p.0 || q.1 < p.1));
            assert_eq!(!dominated, ids.contains(&p.3), "{p:?}");
        }
    }

    #[test]
    fn rows_with_errors_are_left_out_and_cost_is_used_when_every_row_has_one() {
        let csv = "point,rate,gpus,cost_usd,ttft_p99_ms,goodput_rps,error\n0,1,2,,10,1,\n1,2,4,,5,2,\n2,3,,,,,boom\n3,4,1,,,0,\n";
        let (pts, x) = points(csv);
        assert_eq!((pts.len(), x), (2, "GPUs"), "a point without latencies (nothing completed) is not drawn, let alone on the frontier");
        let priced = "point,gpus,cost_usd,ttft_p99_ms,goodput_rps,error\n0,2,1.5,10,1,\n";
        assert_eq!(points(priced), (vec![(1.5, 10.0, 1.0, 0)], "cost ($)"));
        assert!(pareto("t", csv).unwrap().contains("<svg"));
    }
}
