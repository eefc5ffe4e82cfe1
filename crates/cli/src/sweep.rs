//! `blis sweep`: one scenario over a grid of knob values, every point on
//! every core, one CSV row per point, resumable.
//!
//! The grid file (YAML or JSON) names knobs as `--config` does:
//!
//! ```yaml
//! axes:                  # the cartesian product, first axis slowest
//!   rate: [10, 20, 40]
//!   max-num-seqs: [64, 256]
//! zip:                   # optional: lists varied together, each group one more axis
//!   - {num-instances: [1, 2, 4], routing-policy: [round-robin, least-loaded, weighted]}
//! ```
//!
//! A point's knobs are its grid values over the flags over `--base` over the
//! defaults; its row is what `blis run` with those knobs reports (same seed,
//! same numbers). Points are numbered in grid order; rows are written in
//! that order as they complete, so an interrupted sweep resumes by skipping
//! the points its CSV already holds. `--shard I/N` runs every N-th point
//! from the I-th (0-based), to split a sweep across machines.

use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use blis_scenario::knobs::KnobValues;
use blis_scenario::report::RunReport;
use blis_scenario::{Outputs, Scenario};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde_json::{Map, Value};

use crate::error::{BadInput, bad_input};

/// Sweep a scenario over a grid of knob values on every core; one CSV row per point.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis sweep --model meta-llama/llama-3.1-8b-instruct --num-requests 2000 --grid grid.yaml --output sweep.csv\n\n\
    grid.yaml:\n    axes:\n      rate: [10, 20, 40]\n      max-num-seqs: [64, 256]\n    zip:\n      - {num-instances: [1, 2], routing-policy: [round-robin, least-loaded]}")]
pub struct SweepArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// The scenario every point starts from: a knob file as --config takes; flags win over it.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub base: Option<PathBuf>,

    /// The grid: `axes` (a cartesian product) and `zip` (lists varied together), knob names as keys.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub grid: PathBuf,

    /// The CSV to write; if it exists with the same columns, the points it holds are skipped (resume).
    #[arg(long, short, value_name = "PATH", help_heading = "Sweep")]
    pub output: PathBuf,

    /// Run only every N-th point starting at the I-th (0-based), e.g. 2/8.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, help_heading = "Sweep")]
    pub shard: Option<(u64, u64)>,

    /// Points simulated at once. [default: the number of cores]
    #[arg(long, value_name = "N", help_heading = "Sweep")]
    pub jobs: Option<usize>,

    /// Draw the points and their Pareto frontier (p99 TTFT against cost, or GPUs when
    /// nothing is priced) to this SVG file, from every row of --output.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub plot: Option<PathBuf>,

    /// No progress bar.
    #[arg(long, short, help_heading = "Sweep")]
    pub quiet: bool,
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{text}`: expected I/N with 0 ≤ I < N, e.g. 0/4");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Most points a grid may have.
const MAX_POINTS: u64 = 10_000_000;

/// A grid: its axes (names, in order, each with its values) and how many
/// points it spans.
#[derive(Debug, PartialEq)]
pub struct Grid {
    /// Each axis: the knobs it sets (one, or a zip group's several) and, per
    /// step along it, their values.
    axes: Vec<(Vec<String>, Vec<Vec<Value>>)>,
    /// Points: the product of the axes' lengths.
    pub points: u64,
}

impl Grid {
    /// Reads `{axes: {knob: [values]}, zip: [{knob: [values], ...}]}`;
    /// `origin` names the file in errors.
    pub fn parse(raw: Value, origin: &str) -> Result<Grid, BadInput> {
        let Value::Object(mut top) = raw else {
            return Err(bad_input!("{origin}: expected a mapping with `axes` and/or `zip`"));
        };
        let mut axes = Vec::new();
        let list = |key: &str, v: Value| -> Result<Vec<Value>, BadInput> {
            match v {
                Value::Array(values) if !values.is_empty() => Ok(values),
                Value::Array(_) => Err(bad_input!("{origin}: {key}: an axis needs at least one value")),
                _ => Err(bad_input!("{origin}: {key}: expected a list of values")),
            }
        };
        if let Some(v) = top.remove("axes") {
            let Value::Object(map) = v else { return Err(bad_input!("{origin}: axes: expected a mapping of knob names to lists")) };
            for (name, values) in map {
                let values = list(&format!("axes.{name}"), values)?;
                axes.push((vec![name], values.into_iter().map(|v| vec![v]).collect()));
            }
        }
        if let Some(v) = top.remove("zip") {
            let Value::Array(groups) = v else { return Err(bad_input!("{origin}: zip: expected a list of mappings")) };
            for (g, group) in groups.into_iter().enumerate() {
                let Value::Object(map) = group else { return Err(bad_input!("{origin}: zip[{g}]: expected a mapping of knob names to lists")) };
                let mut names = Vec::new();
                let mut columns = Vec::new();
                for (name, values) in map {
                    columns.push(list(&format!("zip[{g}].{name}"), values)?);
                    names.push(name);
                }
                let len = columns.first().map_or(0, Vec::len);
                if len == 0 {
                    return Err(bad_input!("{origin}: zip[{g}]: a group needs at least one knob"));
                }
                if let Some(i) = columns.iter().position(|c| c.len() != len) {
                    return Err(bad_input!("{origin}: zip[{g}]: `{}` has {} values, `{}` has {len}: zipped lists must be as long", names[i], columns[i].len(), names[0]));
                }
                let steps: Vec<Vec<Value>> = (0..len).map(|k| columns.iter().map(|c| c[k].clone()).collect()).collect();
                axes.push((names, steps));
            }
        }
        if let Some(key) = top.keys().next() {
            return Err(bad_input!("{origin}: unknown key `{key}`; allowed: axes, zip"));
        }
        if axes.is_empty() {
            return Err(bad_input!("{origin}: no axes: give `axes` or `zip`"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in axes.iter().flat_map(|(names, _)| names) {
            if !seen.insert(name.replace('_', "-")) {
                return Err(bad_input!("{origin}: `{name}` is swept twice"));
            }
        }
        let points = axes.iter().try_fold(1u64, |acc, (_, steps)| acc.checked_mul(steps.len() as u64).filter(|&p| p <= MAX_POINTS));
        let points = points.ok_or_else(|| bad_input!("{origin}: more than {MAX_POINTS} points"))?;
        Ok(Grid { axes, points })
    }

    /// Checks that every name and value of the grid reads as a knob (each
    /// value once, not each point); `origin` names the file in errors.
    pub fn check_knobs(&self, origin: &str) -> Result<(), BadInput> {
        for (names, steps) in &self.axes {
            for step in steps {
                let one: Map<String, Value> = names.iter().cloned().zip(step.iter().cloned()).collect();
                KnobValues::from_yaml(Value::Object(one), origin).map_err(|e| bad_input!("{}", e.0))?;
            }
        }
        Ok(())
    }

    /// The knob names, one column each, in axis order.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.axes.iter().flat_map(|(names, _)| names.iter().map(String::as_str))
    }

    /// Point `index`'s knob values (mixed radix, the last axis fastest).
    pub fn point(&self, mut index: u64) -> Map<String, Value> {
        let mut map = Map::new();
        for (names, steps) in self.axes.iter().rev() {
            let n = steps.len() as u64;
            let step = &steps[(index % n) as usize];
            index /= n;
            for (name, v) in names.iter().zip(step) {
                map.insert(name.clone(), v.clone());
            }
        }
        map
    }
}

/// The metrics of a row, after the point number and its knob values.
const METRIC_COLUMNS: &str = "gpus,injected,completed,dropped,timed_out,throughput_rps,output_tokens_per_s,\
ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,slo_attainment,goodput_rps,gpu_hours,cost_usd,error";

/// A CSV field: quoted when it holds a comma, quote or line break.
pub fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// A knob value as a CSV field (strings bare, anything else as JSON).
fn value_field(v: &Value) -> String {
    field(&match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

fn metric_fields(r: &RunReport) -> String {
    let s = &r.summary;
    let l = &s.latency_ms;
    let a = r.cluster.autoscaling.as_ref();
    [
        (r.deployment.tp * r.cluster.num_instances).to_string(),
        s.requests.injected.to_string(),
        s.requests.completed.to_string(),
        s.requests.dropped.to_string(),
        s.requests.timed_out.to_string(),
        s.throughput.requests_per_s.to_string(),
        s.throughput.output_tokens_per_s.to_string(),
        l.ttft.p50.to_string(),
        l.ttft.p99.to_string(),
        l.itl.p50.to_string(),
        l.itl.p99.to_string(),
        l.e2e.p50.to_string(),
        l.e2e.p99.to_string(),
        r.cluster.goodput.slo_attainment.to_string(),
        r.cluster.goodput.requests_per_s.to_string(),
        a.map_or(String::new(), |a| a.gpu_hours.to_string()),
        a.and_then(|a| a.cost).map_or(String::new(), |c| c.to_string()),
        String::new(),
    ]
    .join(",")
}

/// Simulates one point: its knob values over `flags` over `base` over the
/// defaults, as `blis run` would; the error is the one line `blis run`
/// would print.
pub fn run_point(point: &Map<String, Value>, flags: &KnobValues, base: &Option<(KnobValues, String)>) -> Result<RunReport, String> {
    let values = KnobValues::from_yaml(Value::Object(point.clone()), "the grid").map_err(|e| e.0)?.or(flags.clone());
    let scenario = Scenario::from_values(&values, base.iter().cloned().collect());
    let resolved = scenario.resolve().map_err(|e| e.0)?;
    blis_scenario::simulate(resolved, Outputs::default()).map_err(|e| e.0)
}

/// One point's row after the point number and knob values: its metrics,
/// or the error that stopped it (in the `error` column).
fn simulate_point(point: &Map<String, Value>, flags: &KnobValues, base: &Option<(KnobValues, String)>) -> String {
    match run_point(point, flags, base) {
        Ok(report) => metric_fields(&report),
        Err(e) => format!("{}{}", ",".repeat(METRIC_COLUMNS.matches(',').count()), field(&e)),
    }
}

/// The points an existing output already holds, after checking its header;
/// a last line cut short by an interruption is removed.
fn resume(path: &Path, header: &str) -> Result<std::collections::BTreeSet<u64>, BadInput> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(Default::default()) };
    if text.is_empty() {
        return Ok(Default::default());
    }
    if text.lines().next() != Some(header) {
        return Err(bad_input!("--output {}: exists with other columns (another grid?); remove it or choose another file", path.display()));
    }
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    if complete < text.len() {
        let file = OpenOptions::new().write(true).open(path).map_err(|e| bad_input!("--output {}: {e}", path.display()))?;
        file.set_len(complete as u64).map_err(|e| bad_input!("--output {}: {e}", path.display()))?;
    }
    text[..complete]
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap_or("").parse::<u64>().map_err(|_| bad_input!("--output {}: a row without a point number: `{l}`", path.display())))
        .collect()
}

/// Reads the YAML file a `flag` names (`origin`: how errors name it) and
/// the `--base` knob file, if any: what `blis sweep` and `blis plan` start from.
pub fn read_inputs(flag: &str, path: &Path, base: Option<&Path>) -> Result<(String, Value, Option<(KnobValues, String)>), BadInput> {
    let origin = format!("{flag} {}", path.display());
    let text = blis_data::textfile::read(path).map_err(|e| bad_input!("cannot read {origin}: {e}"))?;
    let raw: Value = blis_data::yaml::from_str(&text).map_err(|e| bad_input!("{origin}: not valid YAML: {e}"))?;
    let base = base.map(|p| KnobValues::load(p).map(|v| (v, format!("--base {}", p.display())))).transpose()?;
    Ok((origin, raw, base))
}

/// Runs `blis sweep`.
pub fn execute(args: SweepArgs) -> anyhow::Result<()> {
    let (origin, raw, base) = read_inputs("--grid", &args.grid, args.base.as_deref())?;
    let grid = Grid::parse(raw, &origin)?;
    grid.check_knobs(&origin)?;
    let header = format!("point,{},{METRIC_COLUMNS}", grid.columns().map(field).collect::<Vec<_>>().join(","));
    let done = resume(&args.output, &header)?;
    let (shard, shards) = args.shard.unwrap_or((0, 1));
    let todo: Vec<u64> = (shard..grid.points).step_by(shards as usize).filter(|i| !done.contains(i)).collect();
    let mut out = OpenOptions::new().create(true).append(true).open(&args.output).map_err(|e| bad_input!("--output {}: {e}", args.output.display()))?;
    if done.is_empty() {
        writeln!(out, "{header}").context("writing --output")?;
    }
    let jobs = args.jobs.unwrap_or_else(rayon::current_num_threads).max(1);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build().context("starting the worker threads")?;
    let bar = (!args.quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(todo.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} sweeping [{bar:40}] {pos}/{len} points ({per_sec}, eta {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    });
    // Rows go out in point order, a batch at a time: what is written is a
    // prefix of the points, so an interruption loses at most one batch.
    let mut failed = 0usize;
    for batch in todo.chunks(jobs * 4) {
        let rows: Vec<String> = pool.install(|| {
            batch
                .par_iter()
                .map(|&index| {
                    let point = grid.point(index);
                    let knobs: Vec<String> = grid.columns().map(|c| value_field(&point[c])).collect();
                    format!("{index},{},{}", knobs.join(","), simulate_point(&point, &args.knobs, &base))
                })
                .collect()
        });
        for row in rows {
            failed += usize::from(!row.ends_with(','));
            writeln!(out, "{row}").context("writing --output")?;
        }
        out.flush().context("writing --output")?;
        if let Some(bar) = &bar {
            bar.inc(batch.len() as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(path) = &args.plot {
        let text = std::fs::read_to_string(&args.output).context("reading --output back for --plot")?;
        let svg = crate::plot::sweep::pareto(&format!("{}: {} points", args.grid.display(), grid.points), &text)?;
        let mut file = crate::output::AtomicFile::create("plot", path)?;
        file.writer().write_all(svg.as_bytes()).context("writing --plot")?;
        file.commit()?;
    }
    if !args.quiet {
        eprintln!(
            "blis sweep: {} points of {} run ({} already in {}){}",
            todo.len(),
            grid.points,
            done.len(),
            args.output.display(),
            if failed > 0 { format!("; {failed} failed (see the error column)") } else { String::new() }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn points_enumerate_the_product_with_zipped_groups_as_one_axis() {
        let g = Grid::parse(json!({"axes": {"rate": [1, 2], "seed": [7, 8, 9]}, "zip": [{"tp": [1, 2], "num-instances": [4, 8]}]}), "g").unwrap();
        assert_eq!(g.points, 12);
        assert_eq!(g.columns().collect::<Vec<_>>(), ["rate", "seed", "tp", "num-instances"], "in the file's order");
        assert_eq!(Value::Object(g.point(0)), json!({"rate": 1, "seed": 7, "tp": 1, "num-instances": 4}));
        assert_eq!(Value::Object(g.point(1)), json!({"rate": 1, "seed": 7, "tp": 2, "num-instances": 8}));
        assert_eq!(Value::Object(g.point(11)), json!({"rate": 2, "seed": 9, "tp": 2, "num-instances": 8}));
        let all: std::collections::BTreeSet<String> = (0..12).map(|i| Value::Object(g.point(i)).to_string()).collect();
        assert_eq!(all.len(), 12, "every point differs");
    }

    #[test]
    fn bad_grids_are_refused_by_name() {
        for (grid, needle) in [
            (json!([1]), "expected a mapping"),
            (json!({}), "no axes"),
            (json!({"axes": {"rate": []}}), "axes.rate: an axis needs at least one value"),
            (json!({"axes": {"rate": 5}}), "axes.rate: expected a list"),
            (json!({"zip": [{"rate": [1, 2], "tp": [1]}]}), "zipped lists must be as long"),
            (json!({"axes": {"rate": [1]}, "zip": [{"rate": [2]}]}), "`rate` is swept twice"),
            (json!({"axis": {"rate": [1]}}), "unknown key `axis`"),
            (json!({"axes": {"a": vec![0; 10_000], "b": vec![0; 10_000]}}), "more than"),
        ] {
            let e = Grid::parse(grid, "g").unwrap_err().0;
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn shards_are_parsed_and_checked() {
        assert_eq!(parse_shard("2/8"), Ok((2, 8)));
        for bad in ["8/8", "1/0", "x/2", "3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }
}
