//! The `blis workload stats` figure.

use blis_workload::plan::Plan;
use blis_workload::stats::WorkloadStats;
use plotters::prelude::*;

/// Clients drawn individually in the arrival-rate panel; the rest are summed.
const MAX_CLIENT_LINES: usize = 6;

fn length_bins(counts: &[(u64, u64)], bins: usize) -> (f64, Vec<(f64, f64, f64)>) {
    let total: u64 = counts.iter().map(|c| c.1).sum();
    // Cut the axis at the 99th percentile so a long tail does not squash the body.
    let mut seen = 0;
    let p99 = counts.iter().find(|c| {
        seen += c.1;
        seen as f64 >= 0.99 * total as f64
    });
    let top = p99.map_or(1, |c| c.0).max(1) as f64;
    let width = (top / bins as f64).max(1.0);
    let mut out: Vec<(f64, f64, f64)> = (0..bins).map(|i| (i as f64 * width, (i + 1) as f64 * width, 0.0)).collect();
    for &(v, n) in counts {
        let i = ((v as f64 / width) as usize).min(bins - 1);
        out[i].2 += n as f64;
    }
    (bins as f64 * width, out)
}

/// Arrival rate over time (per client) and the input and output length
/// histograms of a stats run, as an SVG document.
pub fn workload_svg(plan: &Plan, s: &WorkloadStats) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 1000)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((3, 1));
        let bin_s = s.timeline.bin.as_secs_f64();
        let span_s = s.span.as_secs_f64();

        // Arrival rate: the busiest clients individually, the rest summed.
        let mut order: Vec<usize> = (0..plan.clients.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(s.clients[i].requests));
        let mut series: Vec<(String, Vec<f64>)> = Vec::new();
        let bins = s.timeline.counts.first().map_or(0, Vec::len);
        let mut others = vec![0.0; bins];
        for (rank, &i) in order.iter().enumerate() {
            let rate: Vec<f64> = s.timeline.counts[i].iter().map(|&n| n as f64 / bin_s).collect();
            if rank < MAX_CLIENT_LINES {
                series.push((plan.clients[i].id.clone(), rate));
            } else {
                others.iter_mut().zip(&rate).for_each(|(o, r)| *o += r);
            }
        }
        if order.len() > MAX_CLIENT_LINES {
            series.push((format!("{} other clients", order.len() - MAX_CLIENT_LINES), others));
        }
        let ymax = series.iter().flat_map(|s| s.1.iter().copied()).fold(0.0, f64::max).max(1e-9) * 1.1;
        let mut chart = ChartBuilder::on(&panels[0])
            .caption("Arrival rate by client", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..span_s, 0f64..ymax)?;
        chart.configure_mesh().x_desc("time (s)").y_desc("requests/s").draw()?;
        for (k, (name, rate)) in series.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let points = rate.iter().enumerate().map(|(b, &r)| ((b as f64 + 0.5) * bin_s, r));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;

        for (panel, title, counts) in [
            (&panels[1], "Input length (tokens, prefix included)", s.total.input_tokens.value_counts()),
            (&panels[2], "Output length (tokens)", s.total.output_tokens.value_counts()),
        ] {
            let (xmax, bars) = length_bins(&counts, 60);
            let ymax = bars.iter().map(|b| b.2).fold(0.0, f64::max).max(1.0) * 1.1;
            let mut chart = ChartBuilder::on(panel)
                .caption(format!("{title}, up to the 99th percentile"), ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(32)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
            chart.configure_mesh().x_desc("tokens").y_desc("requests").draw()?;
            chart.draw_series(bars.iter().map(|&(x0, x1, n)| Rectangle::new([(x0, 0.0), (x1, n)], BLUE.mix(0.6).filled())))?;
        }
        root.present()?;
    }
    Ok(svg)
}
