//! `blis kernels`: fit and check the portable GEMM and all-reduce models on
//! measured kernel profiles.

use std::collections::BTreeMap;
use std::path::PathBuf;

use blis_calibrate::fit::kernels::{
    AllReduceCheck, AllReduceFit, ComputeProfiles, DECODE_MAX_TOKENS, ErrorSummary, GemmModel, HeldOutGpu, HeldOutLayers, LayerCheck,
    LayerSample, LayerTerms, PCIE_CARD_SUFFIX, PREFILL_MIN_TOKENS, check_all_reduce, check_layers, check_layers_carried,
    efficiencies_without, fit_all_reduces, fit_gemm, gpu_efficiencies, layers_leave_one_gpu_out, leave_one_gpu_out, profile_gpu,
    read_all_reduce, read_compute_profiles, summarize,
};
use blis_physics::coefficients::CoefficientSet;
use blis_physics::hardware::{KernelEfficiency, Link};
use blis_scenario::Scenario;
use blis_scenario::knobs::KnobValues;
use serde::Serialize;

use crate::error::bad_input;
use crate::output::{AtomicFile, outln, write_json};

/// Fit GEMM efficiencies that carry across GPUs, and each GPU's all-reduce latency and bus efficiency per link, on measured kernel profiles.
#[derive(clap::Args, Debug)]
#[command(after_help = "The profiles are Vidur's layout: compute/<gpu>/<org>/<model>/mlp.csv, network/<gpu>_dgx/all_reduce.csv\n\
    (NVLink) and network/<gpu>_pairwise_nvlink/all_reduce.csv (PCIe cards bridged in pairs, reported as <gpu>-pcie:\n\
    a pair on its NVLink bridge, larger rings across PCIe)\n\
    (gpu: a100, a40, h100). Example:\n  blis kernels ../shared/groundtruth/kernel-profiles --json kernels.json")]
pub struct KernelsArgs {
    /// The profile directory (holding compute/ and network/).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Also write the fits and errors as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Check how this trained-physics coefficient set (a file, or a bundled name) times a layer on each
    /// profiled GPU and scales from the H100 to the others; repeatable. [default: the bundled trained-physics sets]
    #[arg(long, value_name = "FILE|NAME")]
    pub coefficients: Vec<String>,
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
    /// Each GPU's all-reduce latency and bus efficiency per link.
    all_reduce_fits: Vec<AllReduceFit>,
    /// Single-node all-reduce curves: interpolation, model and transfer errors.
    all_reduce: Vec<AllReduceCheck>,
    /// Per coefficient set (and `kernel-fit`, the terms fitted on the profiles): its layer terms and how they compare with the profiles.
    layer_checks: BTreeMap<String, (LayerTerms, Vec<LayerCheck>)>,
    /// The layer terms fitted without each GPU, checked on it.
    layers_leave_one_gpu_out: Vec<HeldOutLayers>,
    /// Each GPU's own kernel efficiencies.
    efficiencies: BTreeMap<String, KernelEfficiency>,
    /// Per coefficient set: its layer check once carried from the H100 by the
    /// measured efficiencies, and by the other GPUs' mean.
    carried: BTreeMap<String, (Vec<LayerCheck>, Vec<LayerCheck>)>,
}

/// The GPU whose measurements the bundled sets were fitted on.
const REFERENCE_GPU: &str = "h100";

/// The sets `--coefficients` names (files or bundled names), with their names.
fn sets(names: &[String]) -> anyhow::Result<Vec<(String, LayerTerms)>> {
    let defaults = ["trained-physics-h100".to_string(), "trained-physics-published".to_string()];
    let names = if names.is_empty() { &defaults[..] } else { names };
    names
        .iter()
        .map(|n| {
            let set = match CoefficientSet::bundled(n) {
                Some(set) => set,
                None => CoefficientSet::load(std::path::Path::new(n))
                    .map_err(|e| bad_input!("--coefficients {e} (or a bundled name: trained-physics-h100, trained-physics-published)"))?,
            };
            // The coefficient that is wrong, as a simulation would name it.
            check_as_simulated(&set).map_err(|e| bad_input!("--coefficients {n}: {e}"))?;
            let terms = LayerTerms::of(&set).ok_or_else(|| {
                bad_input!(
                    "--coefficients {n}: a {} set, whose β give no layer terms (prefill and decode compute, weights, per layer: trained-physics β)",
                    set.latency_model
                )
            })?;
            Ok((n.clone(), terms))
        })
        .collect()
}

/// Checks `set` as `blis validate` and `blis replay` do before simulating
/// with it ([`CoefficientSet::latency_model`]: every α and β present and
/// finite), on a server of the reference GPU; the error names the coefficient.
fn check_as_simulated(set: &CoefficientSet) -> anyhow::Result<()> {
    let given = KnobValues { model: Some(CHECK_MODEL.into()), hardware: Some(REFERENCE_GPU.into()), ..KnobValues::default() };
    let s = Scenario::from_values(&given, Vec::new()).resolve()?.primary().server.clone();
    set.latency_model(&s.model, &s.gpu, s.tp, &s.instance).map_err(anyhow::Error::msg)?;
    Ok(())
}

/// The model of the server [`check_as_simulated`] builds: one the profiles
/// measure; the check does not depend on it.
const CHECK_MODEL: &str = "meta-llama/Llama-2-7b-hf";

/// A signed error as a percentage; "—" when it could not be computed (a
/// set that predicts no time, or an infinite one, gives 0/0 or ∞/∞).
fn pct(x: f64) -> String {
    if x.is_finite() { format!("{:+.1}%", 100.0 * x) } else { "—".into() }
}

/// An absolute error as a percentage; "—" when it could not be computed.
fn abs_pct(x: f64) -> String {
    if x.is_finite() { format!("{:.1}%", 100.0 * x) } else { "—".into() }
}

/// Runs `blis kernels`.
pub fn execute(args: KernelsArgs) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        return Err(bad_input!(
            "{}: not a directory (expected a kernel-profile directory holding compute/ and network/)",
            args.dir.display()
        )
        .into());
    }
    let json = args.json.as_deref().map(|p| AtomicFile::create("json", p)).transpose()?;
    let sets = sets(&args.coefficients)?;
    let ComputeProfiles { samples, layers, peaks } = read_compute_profiles(&args.dir).map_err(|e| bad_input!("{e}"))?;
    let curves = read_all_reduce(&args.dir).map_err(|e| bad_input!("{e}"))?;
    let all: Vec<_> = samples.iter().collect();
    let gemm = fit_gemm(&all, &peaks);
    let gemm_in_sample: BTreeMap<String, ErrorSummary> = peaks
        .iter()
        .map(|(gpu, &p)| {
            (gpu.clone(), summarize(samples.iter().filter(|s| &s.gpu == gpu).map(|s| gemm.time_us(s, p) / s.time_us - 1.0).collect()))
        })
        .collect();
    let held_out = leave_one_gpu_out(&samples, &peaks);
    let link_bytes_per_s = |gpu: &str, link: Link| profile_gpu(gpu)?.bandwidth_of(link);
    let all_reduce_fits = fit_all_reduces(&curves, link_bytes_per_s);
    let all_reduce = check_all_reduce(&curves, &all_reduce_fits, link_bytes_per_s);

    outln!("GEMM (QKV, O, MLP up, MLP down) on {} measurements, {} GPUs:", samples.len(), peaks.len())?;
    outln!(
        "  fitted on all: compute efficiency {:.3} of the BF16 peak, memory efficiency {:.3} of the bandwidth, {:.1} µs per kernel, {}-token tiles",
        gemm.compute_efficiency,
        gemm.memory_efficiency,
        gemm.launch_us,
        gemm.tile_tokens
    )?;
    outln!(
        "  {:<8} {:>8} {:>12} {:>12} {:>14}   {:<40}",
        "GPU",
        "samples",
        "in-sample",
        "held out",
        "held-out p90",
        "fit without it (η, μ, t0, tile), bias"
    )?;
    for h in &held_out {
        let m = &h.model;
        outln!(
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
        )?;
    }
    outln!("  (median |predicted / measured − 1|; bias: median signed error of the held-out GPU)")?;
    outln!(
        "All-reduce within one node (messages ≥ 1 MiB), a ring: latency + 2(n − 1) steps + bytes·2(n − 1)/n at a share of the link's datasheet bandwidth, \
         fitted on the absolute relative error:"
    )?;
    outln!("  {:<10} {:<7} {:>16} {:>12} {:>12}", "GPU", "link", "bus efficiency", "latency", "per step")?;
    for f in &all_reduce_fits {
        let e = &f.efficiency;
        outln!("  {:<10} {:<7} {:>16.3} {:>9.1} µs {:>9.2} µs", f.gpu, f.link.name(), e.bus_efficiency, e.latency_us, e.hop_latency_us)?;
    }
    outln!("  (GPU{PCIE_CARD_SUFFIX}: the PCIe cards of a box bridged in pairs; their NVLink is the bridge)")?;
    outln!(
        "  {:<10} {:<7} {:>7} {:>20} {:>16} {:>38}",
        "GPU",
        "link",
        "workers",
        "interpolated (p90)",
        "model (p90)",
        "other GPU's efficiency (p90), bias"
    )?;
    let show = |e: &ErrorSummary| format!("{} ({})", abs_pct(e.median_abs), abs_pct(e.p90_abs));
    for c in &all_reduce {
        let other = c.from_other_gpu.as_ref().map_or("—".to_string(), |(g, e)| format!("{g}: {}, {}", show(e), pct(e.median_signed)));
        outln!(
            "  {:<10} {:<7} {:>7} {:>20} {:>16} {:>38}",
            c.gpu,
            c.link.name(),
            c.workers,
            show(&c.interpolation),
            show(&c.model),
            other
        )?;
    }
    let mut layer_checks = BTreeMap::new();
    let mut efficiencies = gpu_efficiencies(&layers, &peaks, &gemm);
    for f in &all_reduce_fits {
        // A PCIe ring was measured on the PCIe cards only; it is also the SXM board's figure past its NVLink domain.
        let board = f.gpu.strip_suffix(PCIE_CARD_SUFFIX).filter(|_| f.link == Link::Pcie);
        for gpu in std::iter::once(f.gpu.as_str()).chain(board) {
            if let Some(e) = efficiencies.get_mut(gpu) {
                match f.link {
                    Link::NvLink => e.allreduce_nvlink = Some(f.efficiency),
                    Link::Pcie => e.allreduce_pcie = Some(f.efficiency),
                }
            }
        }
    }
    let mut carried = BTreeMap::new();
    let all_layers: Vec<&LayerSample> = layers.iter().collect();
    let fitted = LayerTerms::fit(&all_layers, &peaks);
    let layers_held_out =
        if peaks.contains_key(REFERENCE_GPU) { layers_leave_one_gpu_out(&layers, &peaks, REFERENCE_GPU) } else { Vec::new() };
    if peaks.contains_key(REFERENCE_GPU) {
        outln!(
            "Trained-physics layer terms fitted on the profiles (all GPUs): β1a {:.3}, β2a {:.3}, β3 {:.3}, β5 {:.1} µs",
            fitted.prefill_compute,
            fitted.decode_compute,
            fitted.weights,
            fitted.per_layer_us
        )?;
        for h in &layers_held_out {
            let t = &h.terms;
            let errors: Vec<String> = h
                .checks
                .iter()
                .map(|c| format!("{} {} ({})", c.regime, abs_pct(c.absolute.median_abs), pct(c.absolute.median_signed)))
                .collect();
            outln!(
                "  without {:<5} β1a {:.3}, β2a {:.3}, β3 {:.3}, β5 {:.1} µs; on it: {}",
                h.gpu,
                t.prefill_compute,
                t.decode_compute,
                t.weights,
                t.per_layer_us,
                errors.join(", ")
            )?;
        }
        outln!(
            "A layer outside attention and communication (4 projections + norms, rotary, activation, add; {} measurements):",
            layers.len()
        )?;
        outln!(
            "  {:<28} {:<6} {:<8} {:>16} {:>30}",
            "coefficients",
            "GPU",
            "regime",
            "bias (|error|)",
            "scaling from h100 (|error|, p90)"
        )?;
        for (name, terms) in std::iter::once(("kernel-fit".to_string(), fitted)).chain(sets) {
            let checks = check_layers(&layers, &peaks, &terms, REFERENCE_GPU);
            for c in &checks {
                let scaling = c
                    .scaling
                    .as_ref()
                    .map_or("—".to_string(), |e| format!("{} ({}, {})", pct(e.median_signed), abs_pct(e.median_abs), abs_pct(e.p90_abs)));
                outln!(
                    "  {:<28} {:<6} {:<8} {:>16} {:>30}",
                    name,
                    c.gpu,
                    c.regime,
                    format!("{} ({})", pct(c.absolute.median_signed), abs_pct(c.absolute.median_abs)),
                    scaling
                )?;
            }
            layer_checks.insert(name, (terms, checks));
        }
        outln!(
            "  (decode: ≤ {DECODE_MAX_TOKENS} tokens, timed with β2a; prefill: ≥ {PREFILL_MIN_TOKENS} tokens, with β1a; + β3 weight reads + β5 per layer)"
        )?;
        outln!("Each GPU's kernels alone ({}-token tiles), what carries a set fitted on one GPU to another:", gemm.tile_tokens)?;
        outln!("  {:<8} {:>18} {:>18} {:>22}", "GPU", "GEMM compute η", "GEMM memory μ", "layer overhead (µs)")?;
        for (gpu, e) in &efficiencies {
            outln!("  {:<8} {:>18.3} {:>18.3} {:>22.1}", gpu, e.gemm_compute, e.gemm_memory, e.layer_overhead_us)?;
        }
        outln!(
            "Sets carried from h100 by those efficiencies (peaks × η, μ ratios; β5 × overhead ratio), and by the other GPUs' mean (as a GPU nobody profiled):"
        )?;
        outln!(
            "  {:<28} {:<6} {:<8} {:>30} {:>30}",
            "coefficients",
            "GPU",
            "regime",
            "scaling, measured (|error|)",
            "scaling, unprofiled (|error|)"
        )?;
        for (name, (terms, _)) in &layer_checks {
            if name == "kernel-fit" {
                continue;
            }
            let measured = check_layers_carried(&layers, &peaks, terms, &efficiencies, REFERENCE_GPU);
            let mut unprofiled = Vec::new();
            for gpu in efficiencies.keys().filter(|g| *g != REFERENCE_GPU) {
                let without = efficiencies_without(&efficiencies, gpu);
                unprofiled
                    .extend(check_layers_carried(&layers, &peaks, terms, &without, REFERENCE_GPU).into_iter().filter(|c| &c.gpu == gpu));
            }
            for c in measured.iter().filter(|c| c.scaling.is_some()) {
                let blind = unprofiled.iter().find(|u| u.gpu == c.gpu && u.regime == c.regime).and_then(|u| u.scaling.as_ref());
                let show = |e: Option<&ErrorSummary>| {
                    e.map_or("—".to_string(), |e| format!("{} ({})", pct(e.median_signed), abs_pct(e.median_abs)))
                };
                outln!("  {:<28} {:<6} {:<8} {:>30} {:>30}", name, c.gpu, c.regime, show(c.scaling.as_ref()), show(blind))?;
            }
            carried.insert(name.clone(), (measured, unprofiled));
        }
    }
    if let Some(mut file) = json {
        write_json(
            &KernelsReport {
                gemm,
                gemm_in_sample,
                gemm_leave_one_gpu_out: held_out,
                all_reduce_fits,
                all_reduce,
                layer_checks,
                layers_leave_one_gpu_out: layers_held_out,
                efficiencies,
                carried,
            },
            Some(&mut file),
        )?;
        file.commit()?;
    }
    Ok(())
}
