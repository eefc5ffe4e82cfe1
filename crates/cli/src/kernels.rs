//! `blis kernels`: fit and check the portable GEMM and all-reduce models on
//! measured kernel profiles.

use std::collections::BTreeMap;
use std::path::PathBuf;

use blis_calibrate::kernels::{
    AllReduceCheck, ErrorSummary, GemmModel, HeldOutGpu, fit_gemm, check_all_reduce, leave_one_gpu_out, profile_gpu, read_all_reduce, read_compute_profiles, summarize,
};
use serde::Serialize;

use crate::error::bad_input;
use crate::output::{AtomicFile, write_json};

/// Fit GEMM efficiencies that carry across GPUs, and check all-reduce curves, on measured kernel profiles.
#[derive(clap::Args, Debug)]
#[command(after_help = "The profiles are Vidur's layout: compute/<gpu>/<org>/<model>/mlp.csv and network/<gpu>_dgx/all_reduce.csv\n\
    (gpu: a100, a40, h100). Example:\n  blis kernels ../shared/groundtruth/kernel-profiles --json kernels.json")]
pub struct KernelsArgs {
    /// The profile directory (holding compute/ and network/).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Also write the fits and errors as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// What `blis kernels` found.
#[derive(Serialize)]
struct KernelsReport {
    /// Fitted on every GPU.
    gemm: GemmModel,
    /// Its in-sample errors per GPU.
    gemm_in_sample: BTreeMap<String, ErrorSummary>,
    /// Fitted without each GPU, and its errors on it.
    gemm_leave_one_gpu_out: Vec<HeldOutGpu>,
    /// Single-node all-reduce curves: interpolation and transfer errors.
    all_reduce: Vec<AllReduceCheck>,
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

fn abs_pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Runs `blis kernels`.
pub fn execute(args: KernelsArgs) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        return Err(bad_input!("{}: not a directory (expected a kernel-profile directory holding compute/ and network/)", args.dir.display()).into());
    }
    let json = args.json.as_deref().map(|p| AtomicFile::create("json", p)).transpose()?;
    let (samples, peaks) = read_compute_profiles(&args.dir).map_err(|e| bad_input!("{e}"))?;
    let curves = read_all_reduce(&args.dir).map_err(|e| bad_input!("{e}"))?;
    let all: Vec<_> = samples.iter().collect();
    let gemm = fit_gemm(&all, &peaks);
    let gemm_in_sample: BTreeMap<String, ErrorSummary> = peaks
        .iter()
        .map(|(gpu, &p)| (gpu.clone(), summarize(samples.iter().filter(|s| &s.gpu == gpu).map(|s| gemm.time_us(s, p) / s.time_us - 1.0).collect())))
        .collect();
    let held_out = leave_one_gpu_out(&samples, &peaks);
    let nvlink: BTreeMap<String, f64> = curves.iter().filter_map(|c| Some((c.gpu.clone(), profile_gpu(&c.gpu)?.nvlink_gb_s?))).collect();
    let all_reduce = check_all_reduce(&curves, &nvlink);

    println!("GEMM (QKV, O, MLP up, MLP down) on {} measurements, {} GPUs:", samples.len(), peaks.len());
    println!(
        "  fitted on all: compute efficiency {:.3} of the BF16 peak, memory efficiency {:.3} of the bandwidth, {:.1} µs per kernel, {}-token tiles",
        gemm.compute_efficiency, gemm.memory_efficiency, gemm.launch_us, gemm.tile_tokens
    );
    println!("  {:<8} {:>8} {:>12} {:>12} {:>14}   {:<40}", "GPU", "samples", "in-sample", "held out", "held-out p90", "fit without it (η, μ, t0, tile), bias");
    for h in &held_out {
        let m = &h.model;
        println!(
            "  {:<8} {:>8} {:>12} {:>12} {:>14}   {:.3}, {:.3}, {:.1} µs, {}; {}",
            h.gpu,
            h.errors.samples,
            abs_pct(gemm_in_sample[&h.gpu].median_abs),
            abs_pct(h.errors.median_abs),
            abs_pct(h.errors.p90_abs),
            m.compute_efficiency,
            m.memory_efficiency,
            m.launch_us,
            m.tile_tokens,
            pct(h.errors.median_signed)
        );
    }
    println!("  (median |predicted / measured − 1|; bias: median signed error of the held-out GPU)");
    println!("All-reduce within one node (messages ≥ 1 MiB):");
    println!("  {:<8} {:>7} {:>22} {:>34}", "GPU", "workers", "interpolated (p90)", "from the other GPU by NVLink (p90)");
    for c in &all_reduce {
        let other = c.from_other_gpu.as_ref().map_or("—".to_string(), |(g, e)| format!("{g}: {} ({}), bias {}", abs_pct(e.median_abs), abs_pct(e.p90_abs), pct(e.median_signed)));
        println!("  {:<8} {:>7} {:>22} {:>34}", c.gpu, c.workers, format!("{} ({})", abs_pct(c.interpolation.median_abs), abs_pct(c.interpolation.p90_abs)), other);
    }
    if let Some(mut file) = json {
        write_json(&KernelsReport { gemm, gemm_in_sample, gemm_leave_one_gpu_out: held_out, all_reduce }, Some(&mut file))?;
        file.commit()?;
    }
    Ok(())
}
