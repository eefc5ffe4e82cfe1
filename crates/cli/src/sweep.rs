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
use blis_scenario::sweep::{BaseKnobs, DIGEST_COLUMN, Grid, header, row, row_failed, scenario_digest};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde_json::Value;

use crate::error::{BadInput, bad_input};
use crate::output::OutputArgs;

/// Sweep a scenario over a grid of knob values on every core; one CSV row per point.
#[derive(clap::Args, Debug)]
#[command(
    mut_arg("output", |a| a.required(true).help("The CSV to write; if it exists with the same columns, the points it holds are skipped (resume).")),
    mut_arg("quiet", |a| a.help("No progress bar, and no closing line."))
)]
#[command(
    after_help = "Example:\n  blis sweep --model meta-llama/llama-3.1-8b-instruct --num-requests 2000 --grid grid.yaml --output sweep.csv\n\n\
    grid.yaml:\n    axes:\n      rate: [10, 20, 40]\n      max-num-seqs: [64, 256]\n    zip:\n      - {num-instances: [1, 2], routing-policy: [round-robin, least-loaded]}"
)]
pub struct SweepArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// The scenario every point starts from: a knob file as --config takes; flags win over it.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub base: Option<PathBuf>,

    /// The grid: `axes` (a cartesian product) and `zip` (lists varied together), knob names as keys.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub grid: PathBuf,

    #[command(flatten)]
    pub out: OutputArgs,

    /// Run only every N-th point starting at the I-th (0-based), e.g. 2/8.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, help_heading = "Sweep")]
    pub shard: Option<(u64, u64)>,

    /// Points simulated at once, 1 to 1024. [default: the number of cores]
    #[arg(long, value_name = "N", value_parser = parse_jobs, help_heading = "Sweep")]
    pub jobs: Option<usize>,

    /// Also write every row of --output, in point order, as a typed Parquet file here once the sweep ends.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub parquet: Option<PathBuf>,

    /// Draw the points and their Pareto frontier (p99 TTFT against cost, or GPUs when
    /// nothing is priced) to this SVG file, from every row of --output.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub plot: Option<PathBuf>,

    /// Write a self-contained HTML report (summary, frontier plot, every row) to this file.
    #[arg(long, value_name = "PATH", help_heading = "Sweep")]
    pub report: Option<PathBuf>,
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

/// Most worker threads `--jobs` may ask for.
const MAX_JOBS: usize = 1024;

/// Reads `--jobs` (of `blis sweep` and `blis plan`): a whole number of worker threads in 1..=[`MAX_JOBS`].
pub fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_JOBS).contains(&n) => Ok(n),
        _ => Err(format!("`{text}`: expected a whole number of worker threads from 1 to {MAX_JOBS}")),
    }
}

/// `--output` opened to append, and locked for this sweep: another sweep
/// writing it is refused (`create`: create the file if it is absent).
fn open_locked(path: &Path, create: bool) -> Result<std::fs::File, BadInput> {
    let file = OpenOptions::new().create(create).append(true).open(path).map_err(|e| bad_input!("--output {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(bad_input!("--output {}: another blis sweep is writing it; wait for it, or choose another file", path.display()))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(bad_input!("--output {}: cannot lock it: {e}", path.display())),
    }
}

/// What an existing `--output` already holds: the points of its complete
/// rows, after checking that it is this grid's CSV (its header, each row's
/// knob values equal to the grid's at its point, and its `digest` this
/// sweep's), and whether it has a header at all. A last line cut short by
/// an interruption is removed. Only a regular file is read: a device, a
/// pipe or a directory is refused.
fn resume(path: &Path, header: &str, grid: &Grid, digest: &str) -> Result<(std::collections::BTreeSet<u64>, bool), BadInput> {
    let refuse = |why: String| bad_input!("--output {}: {why}; remove it to start over, or choose another file", path.display());
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(bad_input!(
                "--output {}: not a regular file (a device, a pipe or a directory); a sweep appends its rows to a file and resumes from it",
                path.display()
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(bad_input!("--output {}: {e}", path.display())),
    }
    let bytes = std::fs::read(path).map_err(|e| bad_input!("--output {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| refuse("exists and is not text (not UTF-8), so not a sweep's CSV".into()))?;
    // Only whole lines count: a row (or header) cut short is dropped.
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    let our_header = if complete == 0 { header.starts_with(text.as_str()) } else { text.lines().next() == Some(header) };
    if !our_header {
        return Err(refuse("exists with other columns (another grid?)".into()));
    }
    if complete < text.len() {
        let file = OpenOptions::new().write(true).open(path).map_err(|e| bad_input!("--output {}: {e}", path.display()))?;
        file.set_len(complete as u64).map_err(|e| bad_input!("--output {}: {e}", path.display()))?;
    }
    if complete == 0 {
        return Ok(Default::default());
    }
    let mut done = std::collections::BTreeSet::new();
    let mut rows = csv::ReaderBuilder::new().has_headers(true).from_reader(&text.as_bytes()[..complete]);
    for record in rows.records() {
        let record = record.map_err(|e| refuse(format!("not a sweep's CSV: {e}")))?;
        let point = record.get(0).and_then(|p| p.parse::<u64>().ok()).filter(|&p| p < grid.points);
        let point = point.ok_or_else(|| {
            refuse(format!("a row without a point number of this grid: `{}`", record.iter().collect::<Vec<_>>().join(",")))
        })?;
        let expected: Vec<String> = grid.point(point).values().map(blis_scenario::sweep::cell).collect();
        if let Some((column, (held, wanted))) =
            grid.columns().zip(record.iter().skip(1).zip(&expected)).find(|(_, (held, wanted))| held != wanted)
        {
            return Err(refuse(format!(
                "point {point} has {column} {held}, the grid now gives {wanted} (the grid changed since it was written)"
            )));
        }
        let held = record.get(record.len().saturating_sub(1)).unwrap_or_default();
        if held != digest {
            return Err(refuse(format!("point {point} was run with other flags or another --base ({DIGEST_COLUMN} {held}, now {digest})")));
        }
        done.insert(point);
    }
    Ok((done, true))
}

/// Reads the YAML file a `flag` names (`origin`: how errors name it) and
/// the `--base` knob file, if any: what `blis sweep` and `blis plan` start from.
pub fn read_inputs(flag: &str, path: &Path, base: Option<&Path>) -> Result<(String, Value, Option<BaseKnobs>), BadInput> {
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
    grid.check_scenarios(&origin, &args.knobs, &base)?;
    let header = header(&grid);
    let digest = scenario_digest(&args.knobs, &base);
    let output = args.out.output.clone().ok_or_else(|| bad_input!("--output: a sweep streams its rows to a CSV file; name one"))?;
    // An existing file is locked before it is read (a resume may cut its last line).
    let existing = std::fs::metadata(&output).is_ok_and(|m| m.is_file()).then(|| open_locked(&output, false)).transpose()?;
    let (done, has_header) = resume(&output, &header, &grid, &digest)?;
    // Outputs that cannot be created are refused before anything runs.
    let create = |flag, path: &Option<PathBuf>| path.as_deref().map(|p| crate::output::AtomicFile::create(flag, p)).transpose();
    let (parquet, plot, report) = (create("parquet", &args.parquet)?, create("plot", &args.plot)?, create("report", &args.report)?);
    let (shard, shards) = args.shard.unwrap_or((0, 1));
    let todo: Vec<u64> = (shard..grid.points).step_by(shards as usize).filter(|i| !done.contains(i)).collect();
    let mut out = match existing {
        Some(file) => file,
        None => open_locked(&output, true)?,
    };
    if !has_header {
        writeln!(out, "{header}").context("writing --output")?;
    }
    let jobs = args.jobs.unwrap_or_else(rayon::current_num_threads);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build().context("starting the worker threads")?;
    let bar = (!args.out.quiet && std::io::stderr().is_terminal()).then(|| {
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
        let rows: Vec<String> =
            pool.install(|| batch.par_iter().map(|&index| row(index, &grid.point(index), &args.knobs, &base)).collect());
        for row in rows {
            failed += usize::from(row_failed(&row));
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
    if let Some(mut file) = parquet {
        crate::output::parquet::write(&output, file.writer(), grid.columns().count()).context("writing --parquet")?;
        file.commit()?;
    }
    if plot.is_some() || report.is_some() {
        let text = std::fs::read_to_string(&output).context("reading --output back for --plot and --report")?;
        let title = format!("{}: {} points", args.grid.display(), grid.points);
        let svg = crate::plot::sweep::pareto(&title, &text)?;
        if let Some(mut file) = plot {
            file.writer().write_all(svg.as_bytes()).context("writing --plot")?;
            file.commit()?;
        }
        if let Some(mut file) = report {
            let mut rows = csv::Reader::from_reader(text.as_bytes());
            let header: Vec<String> = rows.headers().context("reading --output back")?.iter().map(str::to_string).collect();
            let mut rows: Vec<Vec<String>> = rows
                .records()
                .map(|r| r.map(|r| r.iter().map(str::to_string).collect()))
                .collect::<Result<_, _>>()
                .context("reading --output back")?;
            rows.sort_by_key(|r: &Vec<String>| r[0].parse::<u64>().unwrap_or(u64::MAX));
            let error = header.iter().position(|h| h == "error");
            let failed = rows.iter().filter(|r| error.and_then(|e| r.get(e)).is_some_and(|e| !e.is_empty())).count();
            let summary = vec![format!(
                "blis sweep --grid {}: {} points, {} rows in {}, {failed} failed",
                args.grid.display(),
                grid.points,
                rows.len(),
                output.display()
            )];
            let table = crate::report_html::Table { caption: "every point", header, rows };
            file.writer().write_all(crate::report_html::page(&title, &summary, &svg, &[table]).as_bytes()).context("writing --report")?;
            file.commit()?;
        }
    }
    if !args.out.quiet {
        eprintln!(
            "blis sweep: {} points of {} run ({} already in {}){}",
            todo.len(),
            grid.points,
            done.len(),
            output.display(),
            if failed > 0 { format!("; {failed} failed (see the error column)") } else { String::new() }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_parsed_and_checked() {
        assert_eq!(parse_shard("2/8"), Ok((2, 8)));
        for bad in ["8/8", "1/0", "x/2", "3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }
}
