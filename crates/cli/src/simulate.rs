//! Simulating a scenario from the command line: resolve it, open the output
//! files (so a bad path fails before the work), run `blis_scenario::simulate`
//! with the progress bar and the per-request and decision writers, and move
//! the files into place only once everything succeeded. `blis run` and
//! `blis replay` both come here.

use std::path::Path;

use blis_cluster::trace::DecisionSink;
use blis_engine::instance::Observer;
use blis_scenario::report::RunReport;
use blis_scenario::{Outputs, Scenario};

use crate::decisions::TraceWriter;
use crate::output::{Progress, RequestCsv, peak_rss_mib, warn};
use crate::table::table;

/// Where a simulation writes besides its report.
#[derive(Copy, Clone, Default)]
pub struct Files<'a> {
    /// One CSV row per request.
    pub requests_csv: Option<&'a Path>,
    /// One JSON line per decision.
    pub trace_output: Option<&'a Path>,
    /// No progress bar.
    pub quiet: bool,
}

/// Resolves and simulates `scenario`, writing `files`; `extra` sees every
/// engine callback too. Returns the report and the wall time, seconds.
pub fn simulate(scenario: &Scenario, files: Files<'_>, extra: Option<&mut dyn Observer>) -> anyhow::Result<(RunReport, f64)> {
    let resolved = scenario.resolve()?;
    warn(&resolved.warnings);
    let mut csv = files.requests_csv.map(RequestCsv::create).transpose()?;
    let mut trace = match (files.trace_output, resolved.cluster.trace) {
        (Some(path), true) => Some(TraceWriter::create(path, resolved.cluster.config.labels.clone())?),
        _ => None,
    };
    let wall = std::time::Instant::now();
    let mut progress = Progress::new(resolved.workload.expected_requests, files.quiet);
    let report = {
        let mut observers: Vec<&mut dyn Observer> = vec![&mut progress];
        if let Some(c) = csv.as_mut() {
            observers.push(c);
        }
        if let Some(e) = extra {
            observers.push(e);
        }
        blis_scenario::simulate(resolved, Outputs { observers, decisions: trace.as_mut().map(|t| t as &mut dyn DecisionSink) })?
    };
    progress.finish();
    if let Some(c) = csv {
        c.commit()?;
    }
    if let Some(t) = trace {
        t.finish(report.cluster.counterfactual.as_ref())?;
    }
    Ok((report, wall.elapsed().as_secs_f64()))
}

/// The human table and timing line on stderr, unless `quiet`.
pub fn print_table(report: &RunReport, quiet: bool, wall_s: f64) {
    if !quiet {
        eprint!("{}", table(report));
        let memory = peak_rss_mib().map_or(String::new(), |m| format!(", peak memory {m:.1} MiB"));
        eprintln!("Simulated in {wall_s:.3} s wall time{memory}.");
    }
}
