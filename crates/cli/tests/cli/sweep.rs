//! `blis sweep`: rows equal `blis run`'s numbers, points run once each
//! across shards, an interrupted sweep resumes to the same file, bad grids
//! are refused before anything runs.

use serde_json::Value;

use crate::{assert_refused, blis, scratch, stderr};

const BASE: &[&str] = &["sweep", "--model", "meta-llama/llama-3.1-8b-instruct", "--num-requests", "300", "-q"];
const GRID: &str =
    "axes:\n  rate: [5, 40]\n  max-num-seqs: [16, 256]\nzip:\n  - {num-instances: [1, 2], routing-policy: [round-robin, least-loaded]}\n";

fn sweep(dir: &std::path::Path, out: &str, extra: &[&str]) -> String {
    let grid = dir.join("grid.yaml");
    std::fs::write(&grid, GRID).unwrap();
    let out = dir.join(out);
    let mut args = BASE.to_vec();
    args.extend_from_slice(&["--grid", grid.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let o = blis(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn a_row_is_what_blis_run_reports_for_its_point() {
    let dir = scratch("sweep-equals-run");
    let csv = sweep(&dir, "a.csv", &[]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 8, "a header and 2 × 2 × 2 points");
    let header: Vec<&str> = lines[0].split(',').collect();
    let row: Vec<&str> = lines[7].split(',').collect(); // point 6: rate 40, max-num-seqs 256, 1 instance
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(
        (col("point"), col("rate"), col("max-num-seqs"), col("num-instances"), col("routing-policy")),
        ("6", "40", "256", "1", "round-robin")
    );
    let out = blis(&[
        "run",
        "--model",
        "meta-llama/llama-3.1-8b-instruct",
        "--num-requests",
        "300",
        "--rate",
        "40",
        "--max-num-seqs",
        "256",
        "--num-instances",
        "1",
        "--routing-policy",
        "round-robin",
        "--format",
        "json",
    ]);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(col("completed"), run["requests"]["completed"].to_string());
    assert_eq!(col("ttft_p99_ms").parse::<f64>().unwrap(), run["latency_ms"]["ttft"]["p99"].as_f64().unwrap());
    assert_eq!(col("e2e_p50_ms").parse::<f64>().unwrap(), run["latency_ms"]["e2e"]["p50"].as_f64().unwrap());
    assert_eq!(col("error"), "");
    assert_eq!(col("gpus"), "1");
}

#[test]
fn the_plot_and_the_report_draw_every_row_of_the_output() {
    let dir = scratch("sweep-plot");
    let (svg, html) = (dir.join("p.svg"), dir.join("p.html"));
    sweep(&dir, "p.csv", &["--plot", svg.to_str().unwrap(), "--report", html.to_str().unwrap()]);
    let text = std::fs::read_to_string(svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("Pareto frontier"), "{}", &text[..200.min(text.len())]);
    // The report: one self-contained page with the plot and a row per point.
    let page = std::fs::read_to_string(html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("<figure><svg") && !page.contains("<script"));
    assert_eq!(page.matches("<tr>").count(), 1 + 8, "a header and a row per point");
}

#[test]
fn shards_cover_every_point_once_and_an_interrupted_sweep_resumes_to_the_same_file() {
    let dir = scratch("sweep-resume");
    let whole = sweep(&dir, "whole.csv", &[]);
    // Two shards: together every point, once.
    let a = sweep(&dir, "s0.csv", &["--shard", "0/2"]);
    let b = sweep(&dir, "s1.csv", &["--shard", "1/2"]);
    let mut rows: Vec<&str> = a.lines().skip(1).chain(b.lines().skip(1)).collect();
    rows.sort_by_key(|r| r.split(',').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(rows, whole.lines().skip(1).collect::<Vec<_>>());
    // Interrupted after three rows and half a fourth: resuming gives the same bytes.
    let cut: String = whole.lines().take(4).map(|l| format!("{l}\n")).collect::<String>() + &whole.lines().nth(4).unwrap()[..10];
    std::fs::write(dir.join("resumed.csv"), cut).unwrap();
    assert_eq!(sweep(&dir, "resumed.csv", &["--jobs", "1"]), whole);
    // Nothing left to do: the file stays as it is.
    assert_eq!(sweep(&dir, "resumed.csv", &[]), whole);
}

#[test]
fn bad_grids_and_a_foreign_output_are_refused_before_anything_runs() {
    let dir = scratch("sweep-bad");
    for (name, grid, needle) in [
        ("unknown-knob", "axes: {ratee: [1]}\n", "ratee"),
        ("bad-value", "axes: {rate: [fast]}\n", "rate"),
        ("empty", "axes: {}\n", "no axes"),
        ("zip-lengths", "zip: [{rate: [1, 2], seed: [1]}]\n", "as long"),
        ("not-yaml", "axes: [\n", "not valid YAML"),
    ] {
        let g = dir.join(format!("{name}.yaml"));
        std::fs::write(&g, grid).unwrap();
        let out = dir.join(format!("{name}.csv"));
        let mut args = BASE.to_vec();
        args.extend_from_slice(&["--grid", g.to_str().unwrap(), "--output", out.to_str().unwrap()]);
        assert_refused(&blis(&args), name, needle);
        assert!(!out.exists(), "{name}: wrote an output");
    }
    // An output that cannot be created is refused before any point runs.
    let g = dir.join("unwritable.yaml");
    std::fs::write(&g, GRID).unwrap();
    for flag in ["--report", "--parquet", "--plot"] {
        let out = dir.join("unwritable.csv");
        let mut args = BASE.to_vec();
        args.extend_from_slice(&["--grid", g.to_str().unwrap(), "--output", out.to_str().unwrap(), flag, "/nonexistent-dir/x"]);
        assert_refused(&blis(&args), flag, "cannot create");
        assert!(!out.exists(), "{flag}: the sweep ran");
    }
    let foreign = dir.join("foreign.csv");
    std::fs::write(&foreign, "id,something\n1,2\n").unwrap();
    let g = dir.join("ok.yaml");
    std::fs::write(&g, GRID).unwrap();
    let mut args = BASE.to_vec();
    args.extend_from_slice(&["--grid", g.to_str().unwrap(), "--output", foreign.to_str().unwrap()]);
    let o = blis(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("exists with other columns"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "id,something\n1,2\n", "left untouched");
}

/// A point whose values each run beside others but not together gets its
/// error in the row; the others run.
#[test]
fn a_failing_point_records_its_error_and_the_sweep_goes_on() {
    let dir = scratch("sweep-error");
    let g = dir.join("g.yaml");
    std::fs::write(&g, "axes: {max-num-seqs: [16, 4096], max-num-batched-tokens: [2048, 8192]}\n").unwrap();
    let out = dir.join("o.csv");
    let mut args = BASE.to_vec();
    args.extend_from_slice(&["--grid", g.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    let o = blis(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(out).unwrap();
    // Each row without its last column, the scenario digest: `error` is last then.
    let rows: Vec<&str> = csv.lines().skip(1).map(|r| r.rsplit_once(',').unwrap().0).collect();
    assert!(rows[0].starts_with("0,16,2048,1,300,300,") && rows[0].ends_with(','), "{}", rows[0]);
    assert!(rows[2].starts_with("2,4096,2048,,,") && rows[2].contains("--max-num-batched-tokens"), "{}", rows[2]);
    assert!(rows[3].starts_with("3,4096,8192,1,300,300,") && rows[3].ends_with(','), "{}", rows[3]);
}

/// Every grid value, and the flags, are checked by building the scenario
/// they describe before anything runs: one line naming the grid and the
/// value, exit 2, nothing written.
#[test]
fn grid_values_and_flags_that_cannot_run_are_refused_before_anything_runs() {
    let dir = scratch("sweep-bad-values");
    for (name, grid, flags, needle) in [
        ("rate-negative", "axes: {rate: [5, -5]}\n", &[][..], "g.yaml: rate -5"),
        ("rate-zero", "axes: {rate: [0]}\n", &[], "g.yaml: rate 0"),
        ("seats", "axes: {max-num-seqs: [0]}\n", &[], "g.yaml: max-num-seqs"),
        ("gpu", "axes: {hardware: [B900]}\n", &[], "g.yaml: hardware B900"),
        ("model", "axes: {model: [nope]}\n", &[], "g.yaml: model nope"),
        ("coefficients", "axes: {coefficients: [/nonexistent.yaml]}\n", &[], "/nonexistent.yaml"),
        ("tp", "axes: {tp: [1, 3]}\n", &[], "g.yaml: tp 3"),
        ("instances", "axes: {num-instances: [0]}\n", &[], "g.yaml: num-instances 0"),
        ("flag", "axes: {rate: [5]}\n", &["--slo-targets", "foo"], "--slo-targets"),
    ] {
        let g = dir.join(format!("{name}.g.yaml"));
        std::fs::write(&g, grid).unwrap();
        let out = dir.join(format!("{name}.csv"));
        let mut args = BASE.to_vec();
        args.extend_from_slice(&["--grid", g.to_str().unwrap(), "--output", out.to_str().unwrap()]);
        args.extend_from_slice(flags);
        assert_refused(&blis(&args), name, needle);
        assert!(!out.exists(), "{name}: wrote an output");
    }
}

/// Resuming refuses a file that is not this grid's CSV: not UTF-8, or rows
/// whose knob values the grid no longer gives; a header with a cut first
/// row resumes to one header.
#[test]
fn resuming_refuses_files_that_are_not_this_grids_csv() {
    let dir = scratch("sweep-resume-safety");
    let whole = sweep(&dir, "whole.csv", &[]);
    let header_and_a_bit = format!("{}\n{}", whole.lines().next().unwrap(), &whole.lines().nth(1).unwrap()[..6]);
    std::fs::write(dir.join("cut.csv"), header_and_a_bit).unwrap();
    assert_eq!(sweep(&dir, "cut.csv", &[]), whole, "one header, every row");
    let changed = whole.replacen("\n0,5,", "\n0,7,", 1);
    let grid = dir.join("grid.yaml");
    for (name, bytes, needle) in [
        ("binary.csv", vec![0xff, 0xfe, 0x00, 0x80], "not UTF-8"),
        ("changed.csv", changed.into_bytes(), "point 0 has rate 7, the grid now gives 5"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let mut args = BASE.to_vec();
        args.extend_from_slice(&["--grid", grid.to_str().unwrap(), "--output", path.to_str().unwrap()]);
        assert_refused(&blis(&args), name, needle);
        assert!(stderr(&blis(&args)).contains("remove it to start over"));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name}: left untouched");
    }
}

/// `--jobs 0` is refused, for `blis sweep` as for `blis plan`.
#[test]
fn zero_jobs_are_refused() {
    let dir = scratch("sweep-jobs");
    let g = dir.join("g.yaml");
    std::fs::write(&g, GRID).unwrap();
    let out = dir.join("o.csv");
    let mut args = BASE.to_vec();
    args.extend_from_slice(&["--grid", g.to_str().unwrap(), "--output", out.to_str().unwrap(), "--jobs", "0"]);
    assert_refused(&blis(&args), "sweep --jobs 0", "from 1 to 1024");
    assert!(!out.exists());
    let plan = ["plan", "--model", "meta-llama/llama-3.1-8b-instruct", "--plan", g.to_str().unwrap(), "--jobs", "0"];
    assert_refused(&blis(&plan), "plan --jobs 0", "from 1 to 1024");
}

/// The example in `examples/sweep/` runs (flags win over its base file).
#[test]
fn the_example_sweep_runs_with_flags_over_its_base() {
    let dir = scratch("sweep-example");
    let out = dir.join("ex.csv");
    let root = env!("CARGO_MANIFEST_DIR").to_string() + "/../../examples/sweep/";
    let o = blis(&[
        "sweep",
        "--base",
        &(root.clone() + "base.yaml"),
        "--grid",
        &(root + "grid.yaml"),
        "--num-requests",
        "100",
        "--output",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(out).unwrap();
    assert_eq!(csv.lines().count(), 1 + 36);
    assert!(csv.lines().skip(1).all(|l| l.split(',').nth(7) == Some("100")), "every point injected the flag's 100 requests");
}

/// Reliability probe: re-running a sweep with the same grid and output but
/// other flags or another `--base` said "0 points of 8 run (8 already in
/// …)" and kept the old rows, which answer another question. Every row now
/// carries a digest of what the points share, and a resume that differs is
/// refused, the file left as it was; the same command resumes as before.
#[test]
fn a_resume_with_other_flags_or_another_base_is_refused() {
    let dir = scratch("sweep-digest");
    let first = sweep(&dir, "s.csv", &[]);
    assert!(first.lines().next().unwrap().ends_with(",error,scenario"), "{first}");
    let digest = first.lines().nth(1).unwrap().rsplit(',').next().unwrap().to_string();
    assert!(first.lines().skip(1).all(|r| r.ends_with(&digest)), "one digest for every row");
    let base = dir.join("base.yaml");
    std::fs::write(&base, "seed: 9\n").unwrap();
    for extra in [&["--seed", "4"][..], &["--base", base.to_str().unwrap()]] {
        let (grid, out) = (dir.join("grid.yaml"), dir.join("s.csv"));
        let mut args = BASE.to_vec();
        args.extend_from_slice(&["--grid", grid.to_str().unwrap(), "--output", out.to_str().unwrap()]);
        args.extend_from_slice(extra);
        assert_refused(&blis(&args), extra[0], "was run with other flags or another --base");
        assert_eq!(std::fs::read_to_string(dir.join("s.csv")).unwrap(), first, "{extra:?}: left as it was");
    }
    assert_eq!(sweep(&dir, "s.csv", &[]), first, "the same command still resumes");
}

/// Reliability probe: `--output /dev/zero`, `/dev/full` or a pipe grew
/// memory to OOM or hung; two sweeps at once on one CSV wrote every point
/// twice. An output that is not a regular file is refused up front, and a
/// CSV another sweep holds locked is refused before it is read.
#[test]
fn a_sweep_refuses_outputs_that_are_not_regular_files_or_that_another_sweep_writes() {
    let dir = scratch("sweep-outputs");
    let grid = dir.join("grid.yaml");
    std::fs::write(&grid, GRID).unwrap();
    let run = |out: &str| {
        let mut args = BASE.to_vec();
        args.extend_from_slice(&["--grid", grid.to_str().unwrap(), "--output", out]);
        blis(&args)
    };
    for device in ["/dev/zero", "/dev/null", "/dev/full", dir.to_str().unwrap()] {
        assert_refused(&run(device), device, "not a regular file");
    }
    let held = dir.join("held.csv");
    let file = std::fs::File::create(&held).unwrap();
    file.try_lock().unwrap();
    assert_refused(&run(held.to_str().unwrap()), "locked", "another blis sweep is writing it");
    assert_eq!(std::fs::read_to_string(&held).unwrap(), "", "left as it was");
    drop(file);
    assert!(run(held.to_str().unwrap()).status.success(), "free once the other sweep is done");
}
