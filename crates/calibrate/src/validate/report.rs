//! The validation report: tables for people (plain text for the terminal,
//! Markdown for `--report`) and rows for machines (`--csv`).

use std::fmt::Write as _;

use crate::experiment::Status;
use crate::validate::compare::{Aggregate, ExperimentComparison, Latency, Metric, SATURATION_SERVED_FRACTION, StageLabel, aggregate};

/// A table rendered as aligned text or as Markdown.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(headers: &[&str]) -> Table {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Space-aligned text; the first column left-aligned, the rest right-aligned.
    pub fn to_text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .chain([self.headers[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                if i == 0 {
                    let _ = write!(s, "{c}{}", " ".repeat(pad));
                } else {
                    let _ = write!(s, "  {}{c}", " ".repeat(pad));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        out += &line(&widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>());
        for r in &self.rows {
            out += &line(r);
        }
        out
    }

    /// A GitHub-flavoured Markdown table.
    pub fn to_markdown(&self) -> String {
        let mut out = format!("| {} |\n", self.headers.join(" | "));
        out += &format!(
            "|{}|\n",
            self.headers.iter().enumerate().map(|(i, _)| if i == 0 { " --- " } else { " ---: " }).collect::<Vec<_>>().join("|")
        );
        for r in &self.rows {
            out += &format!("| {} |\n", r.join(" | "));
        }
        out
    }
}

fn num(v: f64) -> String {
    if !v.is_finite() {
        "—".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.1}%"))
}

/// The headline targets (mean APE over active stages, %) the issue sets.
pub const TARGETS: [(Metric, f64); 5] =
    [(Metric::E2eMean, 8.0), (Metric::TtftMean, 15.0), (Metric::ItlMean, 8.0), (Metric::E2eP90, 12.0), (Metric::E2eP99, 12.0)];

/// Metrics shown per experiment in the terminal table.
const HEADLINE: [Metric; 11] = [
    Metric::E2eMean,
    Metric::E2eP90,
    Metric::E2eP99,
    Metric::TtftMean,
    Metric::TtftP90,
    Metric::ItlMean,
    Metric::InferencePerfItlMean,
    Metric::InferencePerfTpotMean,
    Metric::ThroughputRps,
    Metric::FailureFraction,
    Metric::TtftP99,
];

/// One experiment: a row per metric, predicted / actual / APE per stage and summary.
pub fn experiment_table(c: &ExperimentComparison) -> Table {
    let mut labels: Vec<StageLabel> = c.rows.iter().map(|r| r.stage).collect();
    labels.sort();
    labels.dedup();
    let mut headers = vec!["metric".to_string()];
    for l in &labels {
        let name = match l {
            StageLabel::Stage(i) => format!("stage {i}"),
            StageLabel::Summary => "summary".into(),
        };
        headers.extend([format!("{name} sim"), format!("{name} real"), "APE".into()]);
    }
    let mut t = Table { headers, rows: Vec::new() };
    for metric in HEADLINE {
        let mut row = vec![metric.name().to_string()];
        for l in &labels {
            match c.rows.iter().find(|r| r.metric == metric && r.stage == *l) {
                Some(r) => row.extend([num(r.predicted), num(r.actual), pct(r.ape)]),
                None => row.extend(["—".into(), "—".into(), "—".into()]),
            }
        }
        t.push(row);
    }
    t
}

/// Mean and median APE per metric over active stages, with the targets.
pub fn aggregate_table(aggregates: &[Aggregate]) -> Table {
    let mut t = Table::new(&["metric", "stages", "mean APE", "median APE", "target (mean)", "met"]);
    for a in aggregates {
        let target = TARGETS.iter().find(|(m, _)| *m == a.metric).map(|&(_, t)| t);
        t.push(vec![
            a.metric.name().into(),
            a.stages.to_string(),
            pct(Some(a.mean_ape)),
            pct(Some(a.median_ape)),
            target.map_or_else(String::new, |t| format!("≤ {t:.0}%")),
            target.map_or_else(String::new, |t| if a.mean_ape <= t { "yes".into() } else { "NO".into() }),
        ]);
    }
    t
}

/// Overload-excluded runs: does BLIS predict the overload? "overloaded"
/// is the rule that classified the real runs (more than 10 % of a stage's
/// requests time out); "saturated" means the simulated server serves less
/// than 90 % of the offered rate, so its queue grows without bound; the
/// saturated service rate ([`crate::validate::compare::SaturatedRate`]) is where the
/// cliff lies.
pub fn overload_table(comparisons: &[ExperimentComparison]) -> Table {
    let mut t = Table::new(&[
        "experiment",
        "real failures",
        "sim failures",
        "real TTFT mean ms",
        "sim TTFT mean ms",
        "real / sim served of offered",
        "real / sim saturated req/s (APE)",
        "sim saturated",
        "sim overloaded (>10% fail)",
    ]);
    for c in comparisons.iter().filter(|c| c.status == Status::OverloadExcluded) {
        let get = |m: Metric| c.rows.iter().find(|r| r.metric == m && r.stage == StageLabel::Stage(0));
        let ff = get(Metric::FailureFraction);
        let ttft = get(Metric::TtftMean);
        let served = get(Metric::ThroughputRps)
            .zip(c.offered_rps.first().copied().flatten())
            .map_or("—".into(), |(r, o)| format!("{:.0}% / {:.0}%", r.actual / o * 100.0, r.predicted / o * 100.0));
        let yes = |b: bool| if b { "yes".to_string() } else { "NO".to_string() };
        t.push(vec![
            c.name.clone(),
            ff.map_or("—".into(), |r| format!("{:.1}%", r.actual * 100.0)),
            ff.map_or("—".into(), |r| format!("{:.1}%", r.predicted * 100.0)),
            ttft.map_or("—".into(), |r| num(r.actual)),
            ttft.map_or("—".into(), |r| num(r.predicted)),
            served,
            c.rows
                .iter()
                .find(|r| r.metric == Metric::SaturatedServiceRps)
                .map_or("—".into(), |r| format!("{} / {} ({})", num(r.actual), num(r.predicted), pct(r.ape))),
            yes(c.predicted_served_fraction() < SATURATION_SERVED_FRACTION),
            yes(c.predicted_overloaded()),
        ]);
    }
    t
}

/// Per-request agreement where requests were recorded.
pub fn request_table(comparisons: &[ExperimentComparison]) -> Table {
    let mut t = Table::new(&["experiment", "requests", "E2E MAPE", "E2E r", "TTFT MAPE", "TTFT r"]);
    let r2 = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.3}"));
    for c in comparisons.iter().filter(|c| c.status == Status::Active) {
        if let Some(r) = &c.requests {
            t.push(vec![
                c.name.clone(),
                r.matched.to_string(),
                pct(Some(r.e2e_mape)),
                r2(r.e2e_pearson),
                pct(Some(r.ttft_mape)),
                r2(r.ttft_pearson),
            ]);
        }
    }
    t
}

/// Header line of the CSV.
pub const CSV_HEADER: &str = "experiment,model,status,stage,metric,predicted,actual,ape";

/// The CSV rows (no header): one per experiment, stage (or `summary`) and metric.
pub fn csv_rows(comparisons: &[ExperimentComparison]) -> Vec<String> {
    comparisons
        .iter()
        .flat_map(|c| {
            c.rows.iter().map(move |r| {
                format!(
                    "{},{},{},{},{},{},{},{}",
                    c.name,
                    c.model,
                    c.status.as_str(),
                    r.stage,
                    r.metric.name(),
                    r.predicted,
                    r.actual,
                    r.ape.map_or_else(String::new, |a| a.to_string())
                )
            })
        })
        .collect()
}

/// Header of the per-request CSV (`blis validate --requests-csv`).
pub const REQUESTS_CSV_HEADER: &str =
    "experiment,request,stage,send_s,input_tokens,actual_ok,actual_ttft_ms,actual_e2e_ms,predicted_ok,predicted_ttft_ms,predicted_e2e_ms";

/// The per-request CSV rows (no header): every request of every experiment
/// with recorded requests, in send order; `*_ok` is 1 for a success, 0 for a
/// failure (whose latencies are empty).
pub fn request_csv_rows(comparisons: &[ExperimentComparison]) -> Vec<String> {
    let side = |l: Option<Latency>| l.map_or_else(|| "0,,".to_string(), |l| format!("1,{},{}", l.ttft_ms, l.e2e_ms));
    comparisons
        .iter()
        .flat_map(|c| {
            c.request_pairs.iter().map(move |p| {
                format!("{},{},{},{},{},{},{}", c.name, p.index, p.stage, p.send_s, p.input_tokens, side(p.real), side(p.predicted))
            })
        })
        .collect()
}

/// What a report says about the run that produced it.
#[derive(Clone, Debug, Default)]
pub struct ReportContext {
    /// Latency model and coefficient set.
    pub coefficients: String,
    /// The command that regenerates the report.
    pub command: String,
    /// Seed.
    pub seed: u64,
}

/// Whether any run was excluded as overloaded (else the reports leave out
/// the section that judges them).
fn any_overloaded(comparisons: &[ExperimentComparison]) -> bool {
    comparisons.iter().any(|c| c.status == Status::OverloadExcluded)
}

/// The full Markdown report.
pub fn markdown(comparisons: &[ExperimentComparison], ctx: &ReportContext) -> String {
    let mut out = String::from("# BLIS validation report\n\n");
    let _ = writeln!(out, "Coefficients: {}. Seed {}. Regenerate with:\n\n```\n{}\n```\n", ctx.coefficients, ctx.seed, ctx.command);
    out += "Metrics are compared per load stage. `itl_mean_ms` is the true mean time per generated token, \
(E2E mean − TTFT mean) / (output_len − 1), against the same quantity from the measurements \
(`derived.itl_decode_est_ms`); `inference_perf_*` metrics model inference-perf's SSE-line timestamps. \
APE = |sim − real| / real × 100.\n\n";
    out += "## Aggregate over active stages\n\n";
    out += &aggregate_table(&aggregate(comparisons)).to_markdown();
    if any_overloaded(comparisons) {
        out += "\n## Overload-excluded runs\n\nJudged on whether BLIS predicts the overload, not on latency: *overloaded* is the rule that classified the real runs \
(more than 10 % of a stage's requests time out at the 300 s client timeout); *saturated* means the simulated server serves less than \
90 % of the offered rate, so its queue grows for as long as the stage lasts; *saturated req/s* is where the cliff lies: the requests per \
second the server completes once it cannot keep up, counted over the second half of the time before the first timeout (recorded requests \
only).\n\n";
        out += &overload_table(comparisons).to_markdown();
    }
    out += "\n## Per request (recorded requests)\n\n";
    out += &request_table(comparisons).to_markdown();
    for c in comparisons {
        let _ = write!(
            out,
            "\n## {}\n\n{} · {} · simulated prefix-cache hit rate {:.1}%, {} preemptions{}\n\n",
            c.name,
            c.model,
            c.status.as_str(),
            c.prefix_hit_rate * 100.0,
            c.preemptions,
            match c.moe_kernel_compiles {
                0 => String::new(),
                n => format!(", {n} MoE kernel compiles"),
            }
        );
        out += &experiment_table(c).to_markdown();
    }
    out
}

/// The terminal report.
pub fn text(comparisons: &[ExperimentComparison]) -> String {
    let mut out = String::new();
    for c in comparisons {
        let _ = writeln!(out, "== {} ({}, {}) ==", c.name, c.model, c.status.as_str());
        out += &experiment_table(c).to_text();
        out += "\n";
    }
    out += "== Per request (recorded requests) ==\n";
    out += &request_table(comparisons).to_text();
    if any_overloaded(comparisons) {
        out += "\n== Overload-excluded runs: is the overload predicted? ==\n";
        out += &overload_table(comparisons).to_text();
    }
    out += "\n== Aggregate over active stages (APE of the per-stage value) ==\n";
    out += &aggregate_table(&aggregate(comparisons)).to_text();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_render_markdown() {
        let mut t = Table::new(&["metric", "value"]);
        t.push(vec!["e2e_mean_ms".into(), "12.5".into()]);
        t.push(vec!["x".into(), "1000".into()]);
        assert_eq!(t.to_text(), "metric       value\n-----------  -----\ne2e_mean_ms   12.5\nx             1000\n");
        assert_eq!(t.to_markdown(), "| metric | value |\n| --- | ---: |\n| e2e_mean_ms | 12.5 |\n| x | 1000 |\n");
        assert_eq!((num(1234.56), num(12.345), num(0.01234), pct(None)), ("1235".into(), "12.35".into(), "0.0123".into(), "—".into()));
    }
}
