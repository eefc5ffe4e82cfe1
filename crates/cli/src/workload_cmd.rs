//! `blis workload ...`: materialise a spec as a trace v2 file, measure what
//! it generates (table and SVG plot), list and show the built-ins.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use blis_engine::metrics::IntCounts;
use blis_scenario::count::parse_count;
use blis_workload::builtin::BUILTINS;
use blis_workload::plan::Plan;
use blis_workload::spec::{self, LoadedSpec, Overrides};
use blis_workload::stats::{GroupStats, WorkloadStats};
use blis_workload::trace_v2::{TraceHeader, TraceWriter, header_path, trace_csv};

use crate::error::{BadInput, bad_input};
use crate::output::{AtomicFile, out, outln, refuse_overwriting_inputs};

use crate::output::{rate_text, warn};

/// `blis workload` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum WorkloadCommand {
    /// Write the requests a spec generates as a trace v2 CSV (plus NAME.header.yaml), for `blis run --trace`.
    Generate(GenerateArgs),
    /// Measure what a spec generates: per-client rates, burstiness, lengths and prefix sharing, as a table and an SVG plot.
    Stats(StatsArgs),
    /// List the built-in presets and scenarios.
    List,
    /// Print a built-in spec (a starting point for your own).
    Show {
        /// preset:NAME or scenario:NAME.
        name: String,
    },
}

/// Values that replace the spec's.
#[derive(clap::Args, Debug, Clone)]
pub struct SpecOverrides {
    /// Replace the spec's aggregate_rate (requests per second).
    #[arg(long, value_name = "REQ_PER_S", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Replace the spec's num_requests (and ignore its horizon); 1000 when the spec bounds neither.
    #[arg(long, value_name = "N", value_parser = parse_count::<u64>, allow_negative_numbers = true)]
    num_requests: Option<u64>,
    /// Replace the spec's seed.
    #[arg(long, value_name = "N", value_parser = parse_count::<u64>, allow_negative_numbers = true)]
    seed: Option<u64>,
}

/// `blis workload generate`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis workload generate --spec examples/language.yaml --output requests.csv")]
pub struct GenerateArgs {
    /// The spec: a YAML file, or preset:NAME / scenario:NAME.
    #[arg(long, value_name = "SPEC")]
    spec: String,
    /// Trace CSV to write (a name without an extension is a prefix: run1 writes run1.csv, as
    /// `--trace run1` reads it); the header goes to NAME.header.yaml beside it. A device such as
    /// /dev/null is written as it is, without a header.
    #[arg(long, short, value_name = "PATH")]
    output: PathBuf,
    #[command(flatten)]
    overrides: SpecOverrides,
}

/// `blis workload stats`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis workload stats --spec preset:chatbot --plot chatbot.svg")]
pub struct StatsArgs {
    /// The spec: a YAML file, or preset:NAME / scenario:NAME.
    #[arg(long, value_name = "SPEC")]
    spec: String,
    /// SVG plot to write. [default: SPEC-NAME-stats.svg in the current directory]
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    overrides: SpecOverrides,
}

/// Loads a spec reference, applies overrides and plans it; prints its warnings.
fn plan(reference: &str, o: &SpecOverrides) -> Result<(LoadedSpec, Plan), BadInput> {
    let mut loaded = spec::load(reference).map_err(|e| bad_input!("{e}"))?;
    let overrides = Overrides { aggregate_rate: o.rate, seed: o.seed, num_requests: o.num_requests, default_num_requests: Some(1000) };
    let plan = loaded.plan_with(&overrides).map_err(|e| bad_input!("{e}"))?;
    warn(&plan.warnings);
    Ok((loaded, plan))
}

fn sessions_note(plan: &Plan) -> Option<String> {
    plan.has_sessions().then(|| {
        "multi-turn clients: only first rounds are included; later rounds are released by completions in a simulation (`blis run`)"
            .to_string()
    })
}

/// Runs a `blis workload` subcommand.
pub fn execute(cmd: WorkloadCommand) -> anyhow::Result<()> {
    match cmd {
        WorkloadCommand::Generate(a) => generate(a),
        WorkloadCommand::Stats(a) => stats(a),
        WorkloadCommand::List => {
            for b in BUILTINS {
                let description = spec::load(&b.reference()).ok().and_then(|l| l.spec.description).unwrap_or_default();
                outln!("{:<26}{description}", b.reference())?;
            }
            Ok(())
        }
        WorkloadCommand::Show { name } => match blis_workload::builtin::lookup(&name).map_err(|e| bad_input!("{e}"))? {
            Some(b) => out!("{}", b.yaml),
            None => Err(bad_input!("{name}: expected preset:NAME or scenario:NAME (`blis workload list`)").into()),
        },
    }
}

fn generate(a: GenerateArgs) -> anyhow::Result<()> {
    let (loaded, plan) = plan(&a.spec, &a.overrides)?;
    if let Some(n) = sessions_note(&plan) {
        warn(&[n]);
    }
    let special = std::fs::metadata(&a.output).is_ok_and(|m| !m.is_file());
    // A bare name is a prefix, as `--trace` reads it; a name with an extension is the file.
    let output = if special || a.output.extension().is_some() { a.output.clone() } else { trace_csv(&a.output) };
    let header_out = header_path(&output);
    refuse_overwriting_inputs(&[("output", Some(&output)), ("output", Some(&header_out))], &[("spec", Some(Path::new(&a.spec)))])?;
    let mut csv = AtomicFile::create("output", &output)?;
    let mut header = if special { None } else { Some((AtomicFile::create("output", &header_out)?, header_out)) };
    let mut rows = 0u64;
    let mut w = TraceWriter::new(csv.writer()).context("writing --output")?;
    for g in plan.generator() {
        g.check_span().map_err(|e| bad_input!("{}: {e}", a.spec))?;
        w.write(&plan, &g, None).context("writing --output")?;
        rows += 1;
    }
    w.finish().context("writing --output")?;
    if let Some((h, _)) = header.as_mut() {
        write!(h.writer(), "{}", TraceHeader::generated(&plan, &loaded.source_name).to_yaml()).context("writing the trace header")?;
    }
    csv.commit()?;
    let header_note = match header {
        Some((h, path)) => {
            h.commit()?;
            format!(" (header {})", path.display())
        }
        None => String::new(),
    };
    eprintln!("wrote {rows} requests to {}{header_note}", output.display());
    if let Some(note) = short_of_count(&plan, rows) {
        warn(&[note]);
    }
    Ok(())
}

/// Why a plan bounded by a request count sent fewer: its arrivals ended first.
fn short_of_count(plan: &blis_workload::plan::Plan, sent: u64) -> Option<String> {
    let asked = plan.num_requests.filter(|&n| sent < n)?;
    let end = plan.arrivals_end()?;
    let (at, what) = match plan.horizon {
        Some(h) if h <= end => (h, "its horizon"),
        _ => (end, "its clients' last lifecycle window"),
    };
    Some(format!(
        "{sent} of the {asked} requests asked for: the spec's arrivals end at {} s, where {what} ends; lengthen it or raise the rate for more",
        at.as_secs_f64()
    ))
}

fn stats(a: StatsArgs) -> anyhow::Result<()> {
    let (loaded, plan) = plan(&a.spec, &a.overrides)?;
    let plot_path = a.plot.clone().unwrap_or_else(|| {
        let stem =
            a.spec.rsplit(':').next().map(|s| Path::new(s).file_stem().map_or("workload".into(), |x| x.to_string_lossy().into_owned()));
        PathBuf::from(format!("{}-stats.svg", stem.unwrap_or_else(|| "workload".into())))
    });
    refuse_overwriting_inputs(&[("plot", Some(&plot_path))], &[("spec", Some(Path::new(&a.spec)))])?;
    let mut plot_file = AtomicFile::create("plot", &plot_path)?;
    let s = WorkloadStats::collect(&plan, 120).map_err(|e| bad_input!("{}: {e}", a.spec))?;
    let text = stats_table(&loaded, &plan, &s);
    let svg = crate::plot::workload::workload_svg(&plan, &s).map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
    plot_file.writer().write_all(svg.as_bytes()).context("writing --plot")?;
    plot_file.commit()?;
    out!("{text}")?;
    outln!("plot: {}", plot_path.display())
}

fn length_cells(c: &IntCounts) -> String {
    let d = c.summary(1.0);
    format!("{:>12.0}{:>7.0}{:>7.0}", d.mean, d.p50, d.p99)
}

fn row(out: &mut String, name: &str, tenant: &str, slo: &str, g: &GroupStats, total: u64, span_s: f64) {
    use std::fmt::Write as _;
    let share = if total == 0 { 0.0 } else { g.requests as f64 / total as f64 * 100.0 };
    let _ = writeln!(
        out,
        "{:<16}{:<10}{:<12}{:>8}{:>7.1}%{:>9.2}{:>7.2}{}{}{:>7.1}%",
        name.chars().take(15).collect::<String>(),
        tenant.chars().take(9).collect::<String>(),
        slo.chars().take(11).collect::<String>(),
        g.requests,
        share,
        g.requests as f64 / span_s,
        g.gap_cv(),
        length_cells(&g.input_tokens),
        length_cells(&g.output_tokens),
        g.prefix_share() * 100.0
    );
}

/// Log2 histogram lines of a length distribution.
fn histogram(out: &mut String, title: &str, c: &IntCounts) {
    use std::fmt::Write as _;
    let mut bins: Vec<(u64, u64)> = Vec::new(); // (lower bound, count)
    for (v, n) in c.value_counts() {
        let lo = if v == 0 { 0 } else { 1u64 << (63 - v.leading_zeros()) };
        match bins.last_mut() {
            Some(b) if b.0 == lo => b.1 += n,
            _ => bins.push((lo, n)),
        }
    }
    let max = bins.iter().map(|b| b.1).max().unwrap_or(1).max(1);
    let _ = writeln!(out, "{title}");
    for (lo, n) in bins {
        let hi = if lo == 0 { 0 } else { lo * 2 - 1 };
        let bar = "#".repeat(((n as f64 / max as f64) * 40.0).ceil() as usize);
        let _ = writeln!(out, "  {:>8} – {:<8}{:>9}  {bar}", lo, hi, n);
    }
}

fn stats_table(loaded: &LoadedSpec, plan: &Plan, s: &WorkloadStats) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let span_s = s.span.as_secs_f64();
    let _ = writeln!(
        out,
        "Workload {} ({}), seed {}, aggregate rate {} req/s",
        loaded.source_name,
        plan.category.as_str(),
        plan.seed,
        rate_text(plan.aggregate_rate)
    );
    let _ = writeln!(out, "{} requests over {:.1} s: {:.2} req/s", s.total.requests, span_s, s.total.requests as f64 / span_s);
    if let Some(n) = sessions_note(plan) {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16}{:<10}{:<12}{:>8}{:>8}{:>9}{:>7}{:>26}{:>26}{:>8}",
        "client",
        "tenant",
        "slo class",
        "requests",
        "share",
        "req/s",
        "gap CV",
        "input mean    p50    p99",
        "output mean    p50    p99",
        "prefix"
    );
    for (c, g) in plan.clients.iter().zip(&s.clients) {
        let tenant = &plan.labels.tenants[c.tenant.0 as usize];
        let slo = &plan.labels.slo_classes[usize::from(c.slo_class.0)];
        row(&mut out, &c.id, tenant, slo, g, s.total.requests, span_s);
    }
    row(&mut out, "all", "", "", &s.total, s.total.requests, span_s);
    if !s.prefix_groups.is_empty() {
        let _ = writeln!(out, "\nPrefix groups (shared prompt prefixes; {:.1}% of all prompt tokens):", s.total.prefix_share() * 100.0);
        for (g, (n, len)) in &s.prefix_groups {
            let _ = writeln!(out, "  {g:<30}{len:>8} tokens{n:>10} requests");
        }
    }
    let _ = writeln!(out);
    histogram(&mut out, "Input length (tokens, prefix included)", &s.total.input_tokens);
    histogram(&mut out, "Output length (tokens)", &s.total.output_tokens);
    out
}
