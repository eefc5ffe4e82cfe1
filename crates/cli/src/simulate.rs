//! Simulating a scenario from the command line: resolve it, open the output
//! files (so a bad path fails before the work), run `blis_scenario::simulate`
//! with the progress bar and the per-request and decision writers, and move
//! the files into place only once everything succeeded. `blis run` and
//! `blis replay` both come here.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context;

use blis_cluster::fleet::{Replicas, Role};
use blis_cluster::trace::DecisionSink;
use blis_engine::instance::Observer;
use blis_scenario::report::RunReport;
use blis_scenario::{Outputs, ResolvedScenario, Scenario};

use crate::error::bad_input;
use crate::output::decisions::TraceWriter;
use crate::output::kv_events::KvEventsJson;
use crate::output::otel::OtelWriter;
use crate::output::requests_csv::{CsvColumns, RequestCsv};
use crate::output::{AtomicFile, Format, Progress, peak_rss_mib, print_warnings, warn, write_json};
use crate::table::table;

/// Where a simulation writes besides its report.
#[derive(Copy, Clone, Default)]
pub struct Files<'a> {
    /// One CSV row per request.
    pub requests_csv: Option<&'a Path>,
    /// One JSON line per decision.
    pub trace_output: Option<&'a Path>,
    /// One JSON line per batch of KV events.
    pub kv_events_output: Option<&'a Path>,
    /// vLLM's journey and step traces, OTLP/JSON.
    pub otel_output: Option<&'a Path>,
    /// No progress bar.
    pub quiet: bool,
}

/// The prefill pool's instance slots, `0..n`, of a disaggregated fleet
/// (whose fixed prefill pools come first); `None` for an aggregated one.
/// With `otel`, refused for an autoscaled prefill pool, whose replicas take
/// slots as they come and go, so a span's slot does not say its role.
fn prefill_slots(resolved: &ResolvedScenario, otel: bool) -> anyhow::Result<Option<u32>> {
    resolved.fleet.pd.as_ref().map_or(Ok(None), |_| {
        let prefill = resolved.fleet.pools.iter().filter(|p| p.role == Role::Prefill);
        let fixed: Option<u32> = prefill.map(|p| if let Replicas::Fixed(n) = p.replicas { Some(n) } else { None }).sum();
        match fixed {
            Some(n) => Ok(Some(n)),
            None if otel => Err(bad_input!(
                "--otel-output with an autoscaled prefill pool: its replicas take instance slots as they come and go, so the traces could not say which spans are prefill; drop --otel-output or fix the prefill pool's size"
            )
            .into()),
            None => Ok(None),
        }
    })
}

/// Resolves and simulates `scenario`, writing `files`; `extra` sees every
/// engine callback too. Returns the report and the wall time, seconds.
pub fn simulate(scenario: &Scenario, files: Files<'_>, extra: Option<&mut dyn Observer>) -> anyhow::Result<(RunReport, f64)> {
    let mut resolved = scenario.resolve()?;
    warn(&resolved.warnings);
    let mut kv_events = files.kv_events_output.map(KvEventsJson::create).transpose()?;
    let prefill_pool = prefill_slots(&resolved, files.otel_output.is_some())?;
    let mut otel = files
        .otel_output
        .map(|p| {
            AtomicFile::create("otel-output", p).map(|f| {
                let primary = resolved.primary();
                let writer = OtelWriter::new(f, &primary.server.model_name, primary.latency.as_ref());
                match prefill_pool {
                    Some(n) => writer.with_prefill_pool(n),
                    None => writer,
                }
            })
        })
        .transpose()?;
    if kv_events.is_some() {
        resolved.record_kv_events();
    }
    let columns = CsvColumns { offload: resolved.primary().server.instance.offload.is_some(), pd: resolved.fleet.pd.is_some() };
    let mut csv = files.requests_csv.map(|p| RequestCsv::create(p, columns)).transpose()?;
    let mut trace = match (files.trace_output, resolved.cluster.trace) {
        (Some(path), true) => Some(TraceWriter::create(path, resolved.cluster.control.labels.clone())?),
        _ => None,
    };
    print_warnings();
    let wall = std::time::Instant::now();
    let mut progress = Progress::new(resolved.workload.expected_requests, files.quiet);
    let report = {
        let mut observers: Vec<&mut dyn Observer> = vec![&mut progress];
        if let Some(c) = csv.as_mut() {
            observers.push(c);
        }
        if let Some(k) = kv_events.as_mut() {
            observers.push(k);
        }
        if let Some(o) = otel.as_mut() {
            observers.push(o);
        }
        if let Some(e) = extra {
            observers.push(e);
        }
        blis_scenario::simulate(resolved, Outputs { observers, decisions: trace.as_mut().map(|t| t as &mut dyn DecisionSink) })?
    };
    progress.finish();
    if report.summary.requests.injected == 0 {
        let c = &report.cluster;
        warn(&[match c.requests.arrived {
            0 => String::from(
                "no request arrived within the workload's span (its horizon or windows): is its rate too low? Every latency is empty",
            ),
            arrived => format!(
                "none of the {arrived} requests that arrived reached an instance ({} rejected by admission policy `{}`, the rest still in the control plane at the end): every latency is empty",
                c.requests.rejected, c.policies.admission.name
            ),
        }]);
    }
    if let Some(c) = csv {
        c.commit()?;
    }
    if let Some(k) = kv_events {
        k.commit()?;
    }
    if let Some(o) = otel {
        o.finish().context("writing --otel-output")?.commit()?;
    }
    if let Some(t) = trace {
        t.finish(report.cluster.counterfactual.as_ref())?;
    }
    Ok((report, wall.elapsed().as_secs_f64()))
}

/// Prints the report: the JSON document on stdout when `format` asks for
/// it (it also goes to `output` when given), the human summary on stdout
/// otherwise (on stderr beside JSON), and the timing line on stderr; with
/// `quiet`, only what `format` or `output` ask for.
pub fn print_report<T: serde::Serialize>(
    json: &T,
    report: &RunReport,
    format: Format,
    mut output: Option<AtomicFile>,
    quiet: bool,
    wall_s: f64,
) -> anyhow::Result<()> {
    if let Some(file) = output.as_mut() {
        write_json(json, Some(file))?;
    }
    if let Some(file) = output {
        file.commit()?;
    }
    match format {
        Format::Json => {
            write_json(json, None)?;
            if !quiet {
                eprint!("{}", table(report));
            }
        }
        Format::Table if !quiet => {
            let mut stdout = std::io::stdout().lock();
            write!(stdout, "{}", table(report)).context("writing the summary to stdout")?;
            stdout.flush().context("writing the summary to stdout")?;
        }
        Format::Table => {}
    }
    if !quiet {
        let memory = peak_rss_mib().map_or(String::new(), |m| format!(", peak memory {m:.1} MiB"));
        eprintln!("Simulated in {wall_s:.3} s wall time{memory}.");
    }
    Ok(())
}
