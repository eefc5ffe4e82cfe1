//! Portable GEMM and all-reduce time from measured kernel profiles.
//!
//! The profiles are Vidur's per-operation timings (`compute/<gpu>/<org>/<model>/mlp.csv`:
//! one row per token count and tensor-parallel degree, the median time of
//! each of one layer's operations; `network/<gpu>_dgx/all_reduce.csv`: NCCL
//! all-reduce time by message size and worker count).
//!
//! **GEMM.** One layer's four projections (QKV, O, MLP up, MLP down) are
//! GEMMs of `M` tokens by a `K × N` weight shard. Their time is modelled as a
//! roofline whose efficiencies are properties of the kernel class, shared by
//! every GPU, and whose peaks come from the GPU's spec:
//!
//! `t = t0 + max(2·M'·K·N / (F·η), 2·(K·N + M·(K + N)) / (W·μ))`
//!
//! with `F` the dense BF16 peak, `W` the memory bandwidth, `M' = ⌈M/tile⌉·tile`
//! (a tensor-core tile computes whole tiles), and `η`, `μ`, `t0`, `tile`
//! fitted by least squares on the log of the time. Fitting on all GPUs but
//! one and predicting the one left out measures how well the model carries
//! to a GPU nobody measured ([`leave_one_gpu_out`]).
//!
//! **All-reduce.** Within one node, time by message size is modelled as a
//! ring: a fixed latency, a time per ring step, and the ring's bus bytes,
//! bytes·2(n − 1)/n, at a fraction of the link's datasheet bandwidth
//! ([`AllReduceEfficiency`]), fitted per GPU and link on the sizes of 1 MiB
//! and more ([`fit_all_reduce`]): NVLink on the `<gpu>_dgx` boxes (SXM
//! boards); on the 4-GPU `<gpu>_pairwise_nvlink` boxes, the PCIe cards
//! [`PCIE_CARD_SUFFIX`] names, the NVLink bridge for a pair and PCIe for
//! larger rings (which cross it twice). The measured curves,
//! interpolated in log–log ([`AllReduceCurve`]), bound what any model can do;
//! one GPU's fit at another's link bandwidth measures how far the
//! efficiency carries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_physics::coefficients::CoefficientSet;
use blis_physics::hardware::{AllReduceEfficiency, Carry, GpuSpec, KernelEfficiency, Link};
use serde::Serialize;
use thiserror::Error;

use crate::fit::optimize::{LeastSquares, nelder_mead};

/// Why profiles could not be read.
#[derive(Debug, Error)]
pub enum KernelProfileError {
    /// A file or directory that cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A CSV row or field that cannot be used.
    #[error("{path}, row {row}: {message}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based data row (0 for the header).
        row: usize,
        /// What is wrong, naming the column.
        message: String,
    },
    /// A profile directory named after a GPU with no bundled spec.
    #[error("{path}: no bundled GPU spec for `{gpu}`: {why}")]
    UnknownGpu {
        /// The directory.
        path: PathBuf,
        /// Its name.
        gpu: String,
        /// The bundled boards that come closest ([`blis_physics::catalog::unknown_gpu`]).
        why: String,
    },
    /// Nothing to fit.
    #[error("{0}: no kernel profiles found (expected compute/<gpu>/<org>/<model>/mlp.csv)")]
    Empty(PathBuf),
}

/// One of a layer's projection GEMMs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmOp {
    /// Q, K and V projections (Vidur's `attn_pre_proj`).
    Qkv,
    /// Output projection (`attn_post_proj`).
    O,
    /// MLP up (and gate) projection (`mlp_up_proj`).
    Up,
    /// MLP down projection (`mlp_down_proj`).
    Down,
}

impl GemmOp {
    const ALL: [GemmOp; 4] = [GemmOp::Qkv, GemmOp::O, GemmOp::Up, GemmOp::Down];

    fn column(self) -> &'static str {
        match self {
            GemmOp::Qkv => "time_stats.attn_pre_proj.median",
            GemmOp::O => "time_stats.attn_post_proj.median",
            GemmOp::Up => "time_stats.mlp_up_proj.median",
            GemmOp::Down => "time_stats.mlp_down_proj.median",
        }
    }
}

/// One measured GEMM.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmSample {
    /// Profile GPU directory name (`a100`, `h100`, `a40`).
    pub gpu: String,
    /// Model directory name.
    pub model: String,
    /// Which projection.
    pub op: GemmOp,
    /// M: tokens.
    pub tokens: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// K: input width of the shard.
    pub k: f64,
    /// N: output width of the shard.
    pub n: f64,
    /// Measured median, µs.
    pub time_us: f64,
}

/// Peak dense BF16 FLOP/s and memory bytes/s of a GPU.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Peaks {
    /// FLOP/s.
    pub flops_per_s: f64,
    /// Bytes/s.
    pub bytes_per_s: f64,
}

impl Peaks {
    /// The peaks of `spec`.
    pub fn of(spec: &GpuSpec) -> Peaks {
        Peaks { flops_per_s: spec.bf16_tflops * 1e12, bytes_per_s: spec.hbm_tb_s * 1e12 }
    }

    /// These peaks as coefficients fitted on another GPU see them once carried here.
    pub fn carried(self, carry: Carry) -> Peaks {
        Peaks { flops_per_s: self.flops_per_s * carry.compute, bytes_per_s: self.bytes_per_s * carry.memory }
    }
}

/// The bundled GPU a profile directory name means (the catalogue's names
/// and aliases: `a100` is the 80 GB SXM part Vidur profiled).
pub fn profile_gpu(name: &str) -> Option<GpuSpec> {
    blis_physics::catalog::find_gpu(name).map(|g| g.spec())
}

/// A profile CSV being read: its columns by name.
struct ProfileCsv<'a> {
    path: &'a Path,
    headers: csv::StringRecord,
    reader: csv::Reader<&'a [u8]>,
}

/// One data row of a [`ProfileCsv`].
struct ProfileRow<'a> {
    path: &'a Path,
    /// 1-based.
    row: usize,
    record: csv::StringRecord,
}

fn csv_error(path: &Path, row: usize, message: String) -> KernelProfileError {
    KernelProfileError::Csv { path: path.to_path_buf(), row, message }
}

impl<'a> ProfileCsv<'a> {
    /// Refuses a file with a header but no data rows (an interrupted
    /// profiling run), which would otherwise drop its section silently or
    /// leave nothing to average.
    fn open(path: &'a Path, text: &'a str) -> Result<ProfileCsv<'a>, KernelProfileError> {
        if text.lines().skip(1).all(|l| l.trim().is_empty()) {
            return Err(csv_error(path, 0, "no data rows, only a header: profile again, or remove the file".into()));
        }
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let headers = reader.headers().map_err(|e| csv_error(path, 0, e.to_string()))?.clone();
        Ok(ProfileCsv { path, headers, reader })
    }

    /// The index of column `name`.
    fn column(&self, name: &str) -> Result<usize, KernelProfileError> {
        self.headers.iter().position(|h| h == name).ok_or_else(|| csv_error(self.path, 0, format!("missing column `{name}`")))
    }

    /// The data rows, in order.
    fn rows(self) -> impl Iterator<Item = Result<ProfileRow<'a>, KernelProfileError>> {
        let path = self.path;
        self.reader.into_records().enumerate().map(move |(i, record)| match record {
            Ok(record) => Ok(ProfileRow { path, row: i + 1, record }),
            Err(e) => Err(csv_error(path, i + 1, e.to_string())),
        })
    }
}

impl ProfileRow<'_> {
    fn error(&self, message: String) -> KernelProfileError {
        csv_error(self.path, self.row, message)
    }

    fn text(&self, column: usize) -> &str {
        self.record.get(column).unwrap_or("")
    }

    /// Column `column` (called `name`) as a whole number in `[1, max]`: a
    /// count or a size, which the profiles write as integers.
    fn count(&self, column: usize, name: &str, max: u64) -> Result<f64, KernelProfileError> {
        let raw = self.text(column);
        match raw.trim().parse::<u64>() {
            Ok(v) if (1..=max).contains(&v) => Ok(v as f64),
            _ => Err(self.error(format!("column `{name}`: `{raw}` is not a whole number from 1 to {max}"))),
        }
    }

    /// Column `column` (called `name`) as a positive finite number.
    fn positive(&self, column: usize, name: &str) -> Result<f64, KernelProfileError> {
        let raw = self.text(column);
        match raw.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
            _ => Err(self.error(format!("column `{name}`: `{raw}` is not a positive number"))),
        }
    }
}

/// The largest head count, width, token count, GPU count and all-reduce
/// size (bf16 elements) a profile row may give: far above any real one.
const MAX_HEADS: u64 = 1 << 16;
const MAX_WIDTH: u64 = 1 << 24;
const MAX_TOKENS: u64 = 1 << 24;
const MAX_GPUS: u64 = 1 << 16;
const MAX_ELEMENTS: u64 = 1 << 40;

/// Parses one `mlp.csv` of `gpu`/`model` from `text`.
pub fn parse_compute_csv(path: &Path, gpu: &str, model: &str, text: &str) -> Result<Vec<GemmSample>, KernelProfileError> {
    let csv = ProfileCsv::open(path, text)?;
    let (heads, kv_heads, embd, expanded) =
        (csv.column("n_head")?, csv.column("n_kv_head")?, csv.column("n_embd")?, csv.column("n_expanded_embd")?);
    let (tokens, tp, gated) = (csv.column("num_tokens")?, csv.column("num_tensor_parallel_workers")?, csv.column("use_gated_mlp")?);
    let mut times = [0; 4];
    for (t, op) in times.iter_mut().zip(GemmOp::ALL) {
        *t = csv.column(op.column())?;
    }
    let mut samples = Vec::new();
    for row in csv.rows() {
        let row = row?;
        let h = row.count(heads, "n_head", MAX_HEADS)?;
        let kvh = row.count(kv_heads, "n_kv_head", MAX_HEADS)?;
        let d = row.count(embd, "n_embd", MAX_WIDTH)?;
        let ff = row.count(expanded, "n_expanded_embd", MAX_WIDTH)?;
        let m = row.count(tokens, "num_tokens", MAX_TOKENS)?;
        let p = row.count(tp, "num_tensor_parallel_workers", MAX_GPUS)?;
        let gate = match row.text(gated) {
            "True" | "true" | "1" => 2.0,
            "False" | "false" | "0" => 1.0,
            raw => return Err(row.error(format!("column `use_gated_mlp`: `{raw}` is not True or False"))),
        };
        let dh = d / h;
        let shards = [(d, (h + 2.0 * kvh) * dh / p), (h * dh / p, d), (d, gate * ff / p), (ff / p, d)];
        for ((op, &time), (k, n)) in GemmOp::ALL.iter().zip(&times).zip(shards) {
            let time_ms = row.positive(time, op.column())?;
            samples.push(GemmSample {
                gpu: gpu.to_string(),
                model: model.to_string(),
                op: *op,
                tokens: m as u32,
                tp: p as u32,
                k,
                n,
                time_us: time_ms * 1e3,
            });
        }
    }
    Ok(samples)
}

/// The non-GEMM operations of a layer the profiles time (norms, rotary
/// embedding, activation, residual add): with the four projections, a
/// layer's time outside attention and communication.
const SMALL_OPS: [&str; 5] = [
    "time_stats.input_layernorm.median",
    "time_stats.attn_rope.median",
    "time_stats.post_attention_layernorm.median",
    "time_stats.mlp_act.median",
    "time_stats.add.median",
];

/// One profiled layer: its time outside attention and communication.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSample {
    /// Profile GPU directory name.
    pub gpu: String,
    /// Model directory name.
    pub model: String,
    /// Tokens.
    pub tokens: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Projection and MLP parameters of the layer's shard on one GPU.
    pub params: f64,
    /// Four projections plus those of `SMALL_OPS` the profile has, µs.
    pub time_us: f64,
    /// Of which the `SMALL_OPS`, µs.
    pub small_ops_us: f64,
}

/// The layers of one `mlp.csv`: its [`GemmSample`]s grouped by row, plus the
/// row's small operations.
pub fn parse_layer_csv(path: &Path, gpu: &str, model: &str, text: &str) -> Result<Vec<LayerSample>, KernelProfileError> {
    let gemms = parse_compute_csv(path, gpu, model, text)?;
    let csv = ProfileCsv::open(path, text)?;
    // A model without one of them (phi-2's parallel block has one norm) times what it has.
    let small: Vec<(usize, &str)> = SMALL_OPS.iter().filter_map(|name| Some((csv.column(name).ok()?, *name))).collect();
    let mut layers = Vec::new();
    for (row, four) in csv.rows().zip(gemms.chunks(GemmOp::ALL.len())) {
        let row = row?;
        let mut small_ops_us = 0.0;
        for &(column, name) in &small {
            small_ops_us += row.positive(column, name)? * 1e3;
        }
        let time_us = four.iter().map(|g| g.time_us).sum::<f64>() + small_ops_us;
        let params = four.iter().map(|g| g.k * g.n).sum();
        layers.push(LayerSample {
            gpu: gpu.to_string(),
            model: model.to_string(),
            tokens: four[0].tokens,
            tp: four[0].tp,
            params,
            time_us,
            small_ops_us,
        });
    }
    Ok(layers)
}

/// The terms of a trained-physics coefficient set that time a layer outside
/// attention and communication: its compute (prefill and decode), weight
/// reads and per-layer overhead.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct LayerTerms {
    /// β1a: prefill FLOPs at peak.
    pub prefill_compute: f64,
    /// β2a: decode FLOPs at peak.
    pub decode_compute: f64,
    /// β3: weight bytes at HBM bandwidth.
    pub weights: f64,
    /// β5: µs per layer.
    pub per_layer_us: f64,
}

/// Tokens up to which a profiled layer is timed as decode (β2a), and from
/// which as prefill (β1a); rows between are left out.
pub const DECODE_MAX_TOKENS: u32 = 128;
/// See [`DECODE_MAX_TOKENS`].
pub const PREFILL_MIN_TOKENS: u32 = 1024;

impl LayerTerms {
    /// The layer terms of a set whose β price a layer's compute, weights
    /// and fixed cost by name (trained-physics' β1a, β2a, β3 and β5);
    /// `None` for a set without them, or with β of another length.
    pub fn of(set: &CoefficientSet) -> Option<LayerTerms> {
        let names = set.latency_model.beta_names();
        if set.beta.len() != names.len() {
            return None;
        }
        let term = |name: &str| names.iter().position(|n| *n == name).map(|i| set.beta[i]);
        Some(LayerTerms {
            prefill_compute: term("prefill_compute")?,
            decode_compute: term("decode_compute")?,
            weights: term("weights")?,
            per_layer_us: term("per_layer_us")?,
        })
    }

    /// The layer time these terms predict for `l` on a GPU of `peaks`
    /// (2-byte weights), µs; `None` between the decode and prefill regimes.
    pub fn time_us(&self, l: &LayerSample, peaks: Peaks) -> Option<f64> {
        let compute = if l.tokens <= DECODE_MAX_TOKENS {
            self.decode_compute
        } else if l.tokens >= PREFILL_MIN_TOKENS {
            self.prefill_compute
        } else {
            return None;
        };
        let flops = 2.0 * f64::from(l.tokens) * l.params;
        Some(1e6 * (compute * flops / peaks.flops_per_s + self.weights * 2.0 * l.params / peaks.bytes_per_s) + self.per_layer_us)
    }
}

impl LayerTerms {
    /// The terms that best time `layers` (relative least squares, every term
    /// non-negative), in the decode and prefill regimes together: what the
    /// kernels say a layer costs, on every GPU at once.
    pub fn fit(layers: &[&LayerSample], peaks: &BTreeMap<String, Peaks>) -> LayerTerms {
        let rows: Vec<(Vec<f64>, f64)> = layers
            .iter()
            .filter_map(|l| {
                let p = peaks.get(&l.gpu)?;
                let (decode, prefill) = (l.tokens <= DECODE_MAX_TOKENS, l.tokens >= PREFILL_MIN_TOKENS);
                if !(decode || prefill) {
                    return None;
                }
                let compute = 1e6 * 2.0 * f64::from(l.tokens) * l.params / p.flops_per_s / l.time_us;
                let weights = 1e6 * 2.0 * l.params / p.bytes_per_s / l.time_us;
                let (pf, dc) = if prefill { (compute, 0.0) } else { (0.0, compute) };
                Some((vec![pf, dc, weights, 1.0 / l.time_us], 1.0))
            })
            .collect();
        let x = crate::fit::optimize::LeastSquares::new(&rows, 4).nnls();
        LayerTerms { prefill_compute: x[0], decode_compute: x[1], weights: x[2], per_layer_us: x[3] }
    }
}

/// The layer terms fitted on every GPU but one, and how they time and scale to it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeldOutLayers {
    /// The GPU left out.
    pub gpu: String,
    /// Fitted without it.
    pub terms: LayerTerms,
    /// Their errors on it, per regime.
    pub checks: Vec<LayerCheck>,
}

/// [`LayerTerms::fit`] without each GPU in turn, checked on it (scaling from `reference`).
pub fn layers_leave_one_gpu_out(layers: &[LayerSample], peaks: &BTreeMap<String, Peaks>, reference: &str) -> Vec<HeldOutLayers> {
    peaks
        .keys()
        .map(|gpu| {
            let train: Vec<&LayerSample> = layers.iter().filter(|l| &l.gpu != gpu).collect();
            let terms = LayerTerms::fit(&train, peaks);
            let checks = check_layers(layers, peaks, &terms, reference).into_iter().filter(|c| &c.gpu == gpu).collect();
            HeldOutLayers { gpu: gpu.clone(), terms, checks }
        })
        .collect()
}

/// How a set's layer time compares with the profiles on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerCheck {
    /// Profile GPU name.
    pub gpu: String,
    /// `decode` or `prefill`.
    pub regime: &'static str,
    /// Predicted / measured − 1.
    pub absolute: ErrorSummary,
    /// How the set scales from the reference GPU: (predicted here / predicted
    /// there) / (measured here / measured there) − 1, over the rows measured on
    /// both; `None` on the reference itself.
    pub scaling: Option<ErrorSummary>,
}

/// Checks `terms` on every profiled layer, per GPU and regime, scaling
/// measured against `reference` (a profile GPU name).
pub fn check_layers(layers: &[LayerSample], peaks: &BTreeMap<String, Peaks>, terms: &LayerTerms, reference: &str) -> Vec<LayerCheck> {
    check_layers_with(layers, peaks.keys(), |gpu| (peaks[gpu], *terms), reference)
}

/// [`check_layers`] for terms fitted on `reference` and carried to each GPU
/// by the kernel efficiencies `efficiencies` ([`KernelEfficiency::carry_to`]):
/// the peaks they price work against and their per-layer overhead scaled.
/// Only GPUs with efficiencies are checked; none without the reference's.
pub fn check_layers_carried(
    layers: &[LayerSample],
    peaks: &BTreeMap<String, Peaks>,
    terms: &LayerTerms,
    efficiencies: &BTreeMap<String, KernelEfficiency>,
    reference: &str,
) -> Vec<LayerCheck> {
    if !efficiencies.contains_key(reference) {
        return Vec::new();
    }
    let carried = |gpu: &String| {
        let carry = efficiencies[reference].carry_to(&efficiencies[gpu]);
        (peaks[gpu].carried(carry), LayerTerms { per_layer_us: terms.per_layer_us * carry.per_layer, ..*terms })
    };
    check_layers_with(layers, peaks.keys().filter(|g| efficiencies.contains_key(*g)), carried, reference)
}

/// The efficiencies with `gpu`'s replaced by the mean of the others': what a
/// GPU nobody profiled would be carried with.
pub fn efficiencies_without(efficiencies: &BTreeMap<String, KernelEfficiency>, gpu: &str) -> BTreeMap<String, KernelEfficiency> {
    let others: Vec<&KernelEfficiency> = efficiencies.iter().filter(|(g, _)| *g != gpu).map(|(_, e)| e).collect();
    let mean = |f: fn(&KernelEfficiency) -> f64| others.iter().map(|e| f(e)).sum::<f64>() / others.len() as f64;
    let mut out = efficiencies.clone();
    out.insert(
        gpu.to_string(),
        KernelEfficiency {
            gemm_compute: mean(|e| e.gemm_compute),
            gemm_memory: mean(|e| e.gemm_memory),
            layer_overhead_us: mean(|e| e.layer_overhead_us),
            allreduce_nvlink: None,
            allreduce_pcie: None,
            source: format!("mean of the GPUs other than {gpu}"),
        },
    );
    out
}

fn check_layers_with<'g>(
    layers: &[LayerSample],
    gpus: impl Iterator<Item = &'g String>,
    timed_by: impl Fn(&String) -> (Peaks, LayerTerms),
    reference: &str,
) -> Vec<LayerCheck> {
    let key = |l: &LayerSample| (l.model.clone(), l.tp, l.tokens);
    let on_reference: BTreeMap<_, &LayerSample> = layers.iter().filter(|l| l.gpu == reference).map(|l| (key(l), l)).collect();
    let reference_timing = timed_by(&reference.to_string());
    let mut out = Vec::new();
    for gpu in gpus {
        let (p, terms) = timed_by(gpu);
        for (regime, decode) in [("decode", true), ("prefill", false)] {
            let rows: Vec<(&LayerSample, f64)> = layers
                .iter()
                .filter(|l| &l.gpu == gpu && (l.tokens <= DECODE_MAX_TOKENS) == decode)
                .filter_map(|l| Some((l, terms.time_us(l, p)?)))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let absolute = summarize(rows.iter().map(|(l, t)| t / l.time_us - 1.0).collect());
            let scaling = (gpu != reference).then(|| {
                let (reference_peaks, reference_terms) = reference_timing;
                summarize(
                    rows.iter()
                        .filter_map(|(l, t)| {
                            let r = on_reference.get(&key(l))?;
                            Some((t / reference_terms.time_us(r, reference_peaks)?) / (l.time_us / r.time_us) - 1.0)
                        })
                        .collect(),
                )
            });
            out.push(LayerCheck { gpu: gpu.clone(), regime, absolute, scaling: scaling.filter(|s| s.samples > 0) });
        }
    }
    out
}

fn read_dir_sorted(path: &Path) -> Result<Vec<PathBuf>, KernelProfileError> {
    let io = |source| KernelProfileError::Io { path: path.to_path_buf(), source };
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(path).map_err(io)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>().map_err(io)?;
    entries.sort();
    Ok(entries.into_iter().filter(|p| p.is_dir()).collect())
}

fn dir_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// What `root/compute` of a kernel-profile directory holds.
#[derive(Clone, Debug)]
pub struct ComputeProfiles {
    /// Every GEMM sample, in path order (never empty).
    pub samples: Vec<GemmSample>,
    /// Every decode layer, in path order.
    pub layers: Vec<LayerSample>,
    /// Each profiled GPU's spec peaks, by its directory name.
    pub peaks: BTreeMap<String, Peaks>,
}

/// Every GEMM sample under `root/compute`, every layer, and the spec of
/// each GPU, in path order.
pub fn read_compute_profiles(root: &Path) -> Result<ComputeProfiles, KernelProfileError> {
    let compute = root.join("compute");
    let mut samples = Vec::new();
    let mut layers = Vec::new();
    let mut peaks = BTreeMap::new();
    for gpu_dir in read_dir_sorted(&compute)? {
        let gpu = dir_name(&gpu_dir);
        let spec = profile_gpu(&gpu).ok_or_else(|| KernelProfileError::UnknownGpu {
            path: gpu_dir.clone(),
            gpu: gpu.clone(),
            why: blis_physics::catalog::unknown_gpu(&gpu),
        })?;
        peaks.insert(gpu.clone(), Peaks::of(&spec));
        for org in read_dir_sorted(&gpu_dir)? {
            for model_dir in read_dir_sorted(&org)? {
                let path = model_dir.join("mlp.csv");
                let text = std::fs::read_to_string(&path).map_err(|source| KernelProfileError::Io { path: path.clone(), source })?;
                layers.extend(parse_layer_csv(&path, &gpu, &dir_name(&model_dir), &text)?);
                samples.extend(parse_compute_csv(&path, &gpu, &dir_name(&model_dir), &text)?);
            }
        }
    }
    if samples.is_empty() {
        return Err(KernelProfileError::Empty(root.to_path_buf()));
    }
    Ok(ComputeProfiles { samples, layers, peaks })
}

/// The portable GEMM model; see the module documentation.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct GemmModel {
    /// η: fraction of the BF16 peak a compute-bound GEMM reaches.
    pub compute_efficiency: f64,
    /// μ: fraction of the memory bandwidth a memory-bound GEMM reaches.
    pub memory_efficiency: f64,
    /// t0: fixed cost of a kernel, µs.
    pub launch_us: f64,
    /// Tokens per tensor-core tile along M.
    pub tile_tokens: u32,
}

impl GemmModel {
    /// Predicted time of `s` on a GPU with `peaks`, µs.
    pub fn time_us(&self, s: &GemmSample, peaks: Peaks) -> f64 {
        let m = f64::from(s.tokens);
        let tile = f64::from(self.tile_tokens);
        let m_tiles = (m / tile).ceil() * tile;
        let compute = 2.0 * m_tiles * s.k * s.n / (peaks.flops_per_s * self.compute_efficiency);
        let memory = 2.0 * (s.k * s.n + m * (s.k + s.n)) / (peaks.bytes_per_s * self.memory_efficiency);
        self.launch_us + compute.max(memory) * 1e6
    }
}

/// Tiles tried by [`fit_gemm`].
const TILES: [u32; 5] = [1, 16, 32, 64, 128];

fn mean_squared_log_error(model: &GemmModel, samples: &[&GemmSample], peaks: &BTreeMap<String, Peaks>) -> f64 {
    let sum: f64 = samples.iter().map(|s| (model.time_us(s, peaks[&s.gpu]) / s.time_us).ln().powi(2)).sum();
    sum / samples.len().max(1) as f64
}

/// Fits η, μ, t0 and the tile to `samples` (whose GPUs `peaks` holds),
/// minimising the mean squared log error. Deterministic.
pub fn fit_gemm(samples: &[&GemmSample], peaks: &BTreeMap<String, Peaks>) -> GemmModel {
    let mut best: Option<(GemmModel, f64)> = None;
    for tile_tokens in TILES {
        let (model, value) = fit_gemm_at_tile(samples, peaks, tile_tokens);
        if best.as_ref().is_none_or(|(_, v)| value < *v) {
            best = Some((model, value));
        }
    }
    best.map(|(m, _)| m).expect("at least one tile is tried")
}

/// Fits η, μ and t0 to `samples` at a given tile; the model and its mean
/// squared log error.
fn fit_gemm_at_tile(samples: &[&GemmSample], peaks: &BTreeMap<String, Peaks>, tile_tokens: u32) -> (GemmModel, f64) {
    // In logs, so every parameter stays positive.
    let model_at =
        |x: &[f64]| GemmModel { compute_efficiency: x[0].exp(), memory_efficiency: x[1].exp(), launch_us: x[2].exp(), tile_tokens };
    let mut loss = |x: &[f64]| mean_squared_log_error(&model_at(x), samples, peaks);
    let (x, value) = nelder_mead(&mut loss, &[0.6f64.ln(), 0.7f64.ln(), 5f64.ln()], &[0.3, 0.3, 0.5], 600);
    (model_at(&x), value)
}

/// Tokens up to which a profiled layer is a decode layer for
/// [`gpu_efficiencies`]: its GEMMs stream their weights.
const OVERHEAD_MAX_TOKENS: u32 = 8;

/// Each GPU's own kernel efficiencies, read off its layers of the models
/// profiled on every GPU (so that they compare between GPUs), medians over
/// those layers, with `shared`'s launch cost t0 taken off each of the four
/// GEMMs:
/// * μ: weight bytes at the bandwidth / GEMM time, at ≤ 8 tokens (decode);
/// * η: FLOPs at the BF16 peak / GEMM time, at ≥ 1024 tokens (prefill);
/// * layer overhead: 4·t0 plus the small operations, at ≤ 8 tokens.
///
/// A GPU without layers in both regimes is left out.
pub fn gpu_efficiencies(layers: &[LayerSample], peaks: &BTreeMap<String, Peaks>, shared: &GemmModel) -> BTreeMap<String, KernelEfficiency> {
    let models_on = |gpu: &str| layers.iter().filter(|l| l.gpu == gpu).map(|l| l.model.as_str()).collect::<std::collections::BTreeSet<_>>();
    let common = peaks.keys().map(|g| models_on(g)).reduce(|a, b| a.intersection(&b).copied().collect()).unwrap_or_default();
    let launches_us = 4.0 * shared.launch_us;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        blis_engine::metrics::percentile_sorted(&v, 50.0)
    };
    peaks
        .iter()
        .filter_map(|(gpu, p)| {
            let own: Vec<&LayerSample> = layers.iter().filter(|l| &l.gpu == gpu && common.contains(l.model.as_str())).collect();
            // A layer faster than its launches says nothing about throughput.
            let gemm_us = |l: &LayerSample| Some(l.time_us - l.small_ops_us - launches_us).filter(|t| *t > 0.0);
            let decode = || own.iter().filter(|l| l.tokens <= OVERHEAD_MAX_TOKENS);
            let memory: Vec<f64> = decode().filter_map(|l| Some(2e6 * l.params / p.bytes_per_s / gemm_us(l)?)).collect();
            let compute: Vec<f64> = own
                .iter()
                .filter(|l| l.tokens >= PREFILL_MIN_TOKENS)
                .filter_map(|l| Some(2e6 * f64::from(l.tokens) * l.params / p.flops_per_s / gemm_us(l)?))
                .collect();
            if memory.is_empty() || compute.is_empty() {
                return None;
            }
            let efficiency = KernelEfficiency {
                gemm_compute: median(compute),
                gemm_memory: median(memory),
                layer_overhead_us: launches_us + median(decode().map(|l| l.small_ops_us).collect()),
                allreduce_nvlink: None,
                allreduce_pcie: None,
                source: format!("kernel profiles of {} ({} models, {} layers)", gpu, common.len(), own.len()),
            };
            Some((gpu.clone(), efficiency))
        })
        .collect()
}

/// Relative errors of predictions for one group of samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorSummary {
    /// Samples.
    pub samples: usize,
    /// Median |predicted / measured − 1|.
    pub median_abs: f64,
    /// 90th percentile of the same.
    pub p90_abs: f64,
    /// Median of predicted / measured − 1 (negative: too fast).
    pub median_signed: f64,
}

/// Summarises relative errors `errors` (predicted / measured − 1).
pub fn summarize(mut errors: Vec<f64>) -> ErrorSummary {
    let samples = errors.len();
    errors.sort_by(f64::total_cmp);
    let median_signed = blis_engine::metrics::percentile_sorted(&errors, 50.0);
    let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    abs.sort_by(f64::total_cmp);
    ErrorSummary {
        samples,
        median_abs: blis_engine::metrics::percentile_sorted(&abs, 50.0),
        p90_abs: blis_engine::metrics::percentile_sorted(&abs, 90.0),
        median_signed,
    }
}

/// The fit on every GPU but one, and its errors on that one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeldOutGpu {
    /// The GPU left out.
    pub gpu: String,
    /// Fitted on the others.
    pub model: GemmModel,
    /// Its errors on the GPU left out.
    pub errors: ErrorSummary,
}

/// For each GPU: fit on the others, predict it.
pub fn leave_one_gpu_out(samples: &[GemmSample], peaks: &BTreeMap<String, Peaks>) -> Vec<HeldOutGpu> {
    peaks
        .keys()
        .map(|gpu| {
            let (held, train): (Vec<&GemmSample>, Vec<&GemmSample>) = samples.iter().partition(|s| &s.gpu == gpu);
            let model = fit_gemm(&train, peaks);
            let errors = summarize(held.iter().map(|s| model.time_us(s, peaks[gpu]) / s.time_us - 1.0).collect());
            HeldOutGpu { gpu: gpu.clone(), model, errors }
        })
        .collect()
}

/// All-reduce time by message size for one GPU, link and worker count, all
/// on one node: the measured medians, in log–log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllReduceCurve {
    /// Profile GPU name.
    pub gpu: String,
    /// The link the ring crosses.
    pub link: Link,
    /// Workers (the tensor-parallel degree).
    pub workers: u32,
    /// (message bytes, µs), by size; at least one point.
    pub points: Vec<(f64, f64)>,
}

impl AllReduceCurve {
    /// Time of an all-reduce of `bytes`, µs: interpolated in log–log
    /// between the nearest measured sizes, extended along the end segments.
    pub fn time_us(&self, bytes: f64) -> f64 {
        let p = &self.points;
        if p.len() == 1 {
            return p[0].1;
        }
        let i = p.partition_point(|&(b, _)| b < bytes).clamp(1, p.len() - 1);
        let ((b0, t0), (b1, t1)) = (p[i - 1], p[i]);
        let slope = (t1 / t0).ln() / (b1 / b0).ln();
        t0 * (bytes / b0).powf(slope)
    }

    /// The measured points of 1 MiB and more ([`ALL_REDUCE_MIN_BYTES`]).
    fn large(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.points.iter().copied().filter(|&(b, _)| b >= ALL_REDUCE_MIN_BYTES)
    }
}

/// What a profile GPU name gains on a `<gpu>_pairwise_nvlink` box: its GPUs
/// are the PCIe cards ("a100-pcie" is the bundled A100-80GB-PCIe), bridged
/// in pairs, not the SXM boards of the `<gpu>_dgx` box.
pub const PCIE_CARD_SUFFIX: &str = "-pcie";

/// The profile GPU of a `network/` setup directory and whether its GPUs are
/// PCIe cards bridged in pairs: `<gpu>_dgx` (SXM boards on NVSwitch, every
/// group on NVLink) or `<gpu>_pairwise_nvlink` (a pair on its NVLink bridge,
/// larger groups across PCIe).
fn setup_of(name: &str) -> Option<(String, bool)> {
    let dgx = name.strip_suffix("_dgx").map(|g| (g.to_string(), false));
    dgx.or_else(|| name.strip_suffix("_pairwise_nvlink").map(|g| (format!("{g}{PCIE_CARD_SUFFIX}"), true)))
}

/// The single-node all-reduce curves under `root/network/<setup>/all_reduce.csv`
/// (sizes are fp16 elements; repeated sizes are averaged), by GPU, link and
/// workers.
pub fn read_all_reduce(root: &Path) -> Result<Vec<AllReduceCurve>, KernelProfileError> {
    let mut curves = Vec::new();
    for setup in read_dir_sorted(&root.join("network"))? {
        let name = dir_name(&setup);
        let Some((gpu, bridged)) = setup_of(&name) else { continue };
        let path = setup.join("all_reduce.csv");
        if bridged && !path.is_file() {
            continue; // some bridged boxes were profiled for send/recv only
        }
        let text = std::fs::read_to_string(&path).map_err(|source| KernelProfileError::Io { path: path.clone(), source })?;
        for mut curve in parse_all_reduce_csv(&path, &gpu, Link::NvLink, &text)? {
            if bridged && curve.workers > 2 {
                curve.link = Link::Pcie;
            }
            curves.push(curve);
        }
    }
    Ok(curves)
}

/// Parses one `all_reduce.csv` of `gpu` over `link`, keeping the rows whose workers all sit on one node.
pub fn parse_all_reduce_csv(path: &Path, gpu: &str, link: Link, text: &str) -> Result<Vec<AllReduceCurve>, KernelProfileError> {
    let csv = ProfileCsv::open(path, text)?;
    let (time, workers, per_node, size) =
        (csv.column("time_stats.all_reduce.median")?, csv.column("num_workers")?, csv.column("devices_per_node")?, csv.column("size")?);
    // (workers, bytes) → (sum of µs, count).
    let mut sums: BTreeMap<(u32, u64), (f64, u32)> = BTreeMap::new();
    for row in csv.rows() {
        let row = row?;
        let (w, node) = (row.count(workers, "num_workers", MAX_GPUS)?, row.count(per_node, "devices_per_node", MAX_GPUS)?);
        if w != node {
            continue; // across nodes: not a tensor-parallel group
        }
        let bytes = 2.0 * row.count(size, "size", MAX_ELEMENTS)?;
        let entry = sums.entry((w as u32, bytes as u64)).or_default();
        entry.0 += row.positive(time, "time_stats.all_reduce.median")? * 1e3;
        entry.1 += 1;
    }
    let mut curves: Vec<AllReduceCurve> = Vec::new();
    for ((workers, bytes), (sum, n)) in sums {
        let point = (bytes as f64, sum / f64::from(n));
        match curves.last_mut() {
            Some(c) if c.workers == workers => c.points.push(point),
            _ => curves.push(AllReduceCurve { gpu: gpu.to_string(), link, workers, points: vec![point] }),
        }
    }
    Ok(curves)
}

/// Smallest message the all-reduce fits and checks count: 1 MiB, below which the
/// time is the collective's fixed latency.
pub const ALL_REDUCE_MIN_BYTES: f64 = 1_048_576.0;

/// Reweighting rounds that turn the all-reduce fit's least squares into
/// least absolute relative error.
const ROBUST_ROUNDS: usize = 50;

/// Fits [`AllReduceEfficiency`] to `curves` (one GPU, one link, any
/// workers) on a link of `link_bytes_per_s`: a ring's latency, its time per
/// step (when the curves cover more than one group size) and its bus
/// efficiency, minimising the absolute relative error over every size of
/// 1 MiB and more (iteratively reweighted least squares, non-negative;
/// absolute rather than squared because a size's time is bimodal from call
/// to call, so some sizes sit on the other mode). `None` without two
/// distinct sizes to fit.
pub fn fit_all_reduce(curves: &[&AllReduceCurve], link_bytes_per_s: f64) -> Option<AllReduceEfficiency> {
    // t ≈ a + h·2(n − 1) + c·x with x = bus bytes, as rows of 1 = (a, h, c)·(1, 2(n − 1), x)/t.
    let mut workers: Vec<u32> = curves.iter().map(|c| c.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    let hops = workers.len() > 1;
    let rows: Vec<[f64; 3]> = curves
        .iter()
        .flat_map(|c| {
            let n = f64::from(c.workers.max(1));
            c.large().map(move |(bytes, t)| [1.0 / t, if hops { 2.0 * (n - 1.0) / t } else { 0.0 }, 2.0 * (n - 1.0) / n * bytes / t])
        })
        .collect();
    let mut sizes: Vec<u64> = rows.iter().map(|r| (r[2] / r[0]) as u64).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.len() < 2 {
        return None;
    }
    let mut x = vec![0.0; 3];
    let mut weights = vec![1.0; rows.len()];
    for _ in 0..ROBUST_ROUNDS {
        let weighted: Vec<(Vec<f64>, f64)> =
            rows.iter().zip(&weights).map(|(r, w): (&[f64; 3], &f64)| (r.iter().map(|v| v * w.sqrt()).collect(), w.sqrt())).collect();
        x = LeastSquares::new(&weighted, 3).nnls();
        for (w, r) in weights.iter_mut().zip(&rows) {
            *w = 1.0 / (r.iter().zip(&x).map(|(v, c)| v * c).sum::<f64>() - 1.0).abs().max(1e-4);
        }
    }
    let (latency_us, hop_latency_us, us_per_byte) = (x[0], x[1], x[2]);
    (latency_us > 0.0 && us_per_byte > 0.0).then(|| AllReduceEfficiency {
        bus_efficiency: 1e6 / (us_per_byte * link_bytes_per_s),
        latency_us,
        hop_latency_us,
    })
}

/// What one GPU's all-reduce over one link reaches.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllReduceFit {
    /// Profile GPU name.
    pub gpu: String,
    /// The link.
    pub link: Link,
    /// Fitted on every worker count of that GPU and link.
    pub efficiency: AllReduceEfficiency,
}

/// How one curve's interpolation, its GPU's fitted model and another GPU's
/// fitted model fare on it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllReduceCheck {
    /// Profile GPU name.
    pub gpu: String,
    /// The link.
    pub link: Link,
    /// Workers.
    pub workers: u32,
    /// Every other measured size ≥ 1 MiB, predicted from the others.
    pub interpolation: ErrorSummary,
    /// The sizes ≥ 1 MiB, by this GPU's fitted latency and bus efficiency.
    pub model: ErrorSummary,
    /// The same sizes by another GPU's fit over the same link, at this
    /// GPU's link bandwidth: how the efficiency carries to a GPU nobody
    /// measured (absent when no other GPU has that link).
    pub from_other_gpu: Option<(String, ErrorSummary)>,
}

/// Fits every GPU's all-reduce over each link its curves cover;
/// `link_bytes_per_s` gives a GPU's datasheet bandwidth of a link.
pub fn fit_all_reduces(curves: &[AllReduceCurve], link_bytes_per_s: impl Fn(&str, Link) -> Option<f64>) -> Vec<AllReduceFit> {
    let mut groups: BTreeMap<(String, Link), Vec<&AllReduceCurve>> = BTreeMap::new();
    for c in curves {
        groups.entry((c.gpu.clone(), c.link)).or_default().push(c);
    }
    groups
        .into_iter()
        .filter_map(|((gpu, link), group)| {
            let efficiency = fit_all_reduce(&group, link_bytes_per_s(&gpu, link)?)?;
            Some(AllReduceFit { gpu, link, efficiency })
        })
        .collect()
}

/// Checks every curve of `curves` against the interpolation of its other
/// sizes, its GPU's fit and another GPU's (`fits`, from [`fit_all_reduces`]).
pub fn check_all_reduce(
    curves: &[AllReduceCurve],
    fits: &[AllReduceFit],
    link_bytes_per_s: impl Fn(&str, Link) -> Option<f64>,
) -> Vec<AllReduceCheck> {
    curves
        .iter()
        .filter_map(|c| {
            let bandwidth = link_bytes_per_s(&c.gpu, c.link)?;
            let errors =
                |e: &AllReduceEfficiency| summarize(c.large().map(|(b, t)| e.time_us(b, c.workers, bandwidth) / t - 1.0).collect());
            let own = fits.iter().find(|f| f.gpu == c.gpu && f.link == c.link)?;
            let kept = AllReduceCurve {
                points: c
                    .points
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|&(i, (b, _))| b < ALL_REDUCE_MIN_BYTES || i % 2 == 0)
                    .map(|(_, p)| p)
                    .collect(),
                ..c.clone()
            };
            let held: Vec<f64> = c
                .points
                .iter()
                .enumerate()
                .filter(|&(i, &(b, _))| b >= ALL_REDUCE_MIN_BYTES && i % 2 == 1)
                .map(|(_, &(b, t))| kept.time_us(b) / t - 1.0)
                .collect();
            // Another GPU on the same kind of link: an NVSwitch board's NVLink is not a bridge's.
            let card = |gpu: &str| gpu.ends_with(PCIE_CARD_SUFFIX);
            let other = fits.iter().find(|o| o.gpu != c.gpu && o.link == c.link && card(&o.gpu) == card(&c.gpu));
            let from_other_gpu = other.map(|o| (o.gpu.clone(), errors(&o.efficiency)));
            Some(AllReduceCheck {
                gpu: c.gpu.clone(),
                link: c.link,
                workers: c.workers,
                interpolation: summarize(held),
                model: errors(&own.efficiency),
                from_other_gpu,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "time_stats.attn_pre_proj.median,time_stats.attn_post_proj.median,time_stats.mlp_up_proj.median,time_stats.mlp_down_proj.median,n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_tokens,num_tensor_parallel_workers";

    /// The four projections' shards follow from the model shape and TP
    /// (Llama-3-8B at TP 2: 32 heads, 8 KV heads, d 4096, dFF 14336, gated).
    #[test]
    fn a_profile_row_becomes_four_gemms_with_their_shard_shapes() {
        let text = format!("{HEADER}\n0.1,0.2,0.3,0.4,32,8,4096,14336,True,64,2\n");
        let s = parse_compute_csv(Path::new("x/mlp.csv"), "h100", "llama", &text).unwrap();
        let shapes: Vec<(GemmOp, f64, f64, f64)> = s.iter().map(|g| (g.op, g.k, g.n, g.time_us)).collect();
        let want = [
            (GemmOp::Qkv, 4096.0, 3072.0, 100.0),
            (GemmOp::O, 2048.0, 4096.0, 200.0),
            (GemmOp::Up, 4096.0, 14336.0, 300.0),
            (GemmOp::Down, 7168.0, 4096.0, 400.0),
        ];
        assert_eq!(shapes.len(), 4);
        for (got, want) in shapes.iter().zip(want) {
            assert_eq!(got.0, want.0);
            assert!((got.1 - want.1).abs() < 1e-9 && (got.2 - want.2).abs() < 1e-9 && (got.3 - want.3).abs() < 1e-9, "{got:?} != {want:?}");
        }
        assert!(s.iter().all(|g| g.tokens == 64 && g.tp == 2));
    }

    #[test]
    fn bad_profiles_name_the_file_row_and_column() {
        let missing = parse_compute_csv(Path::new("p/mlp.csv"), "h100", "m", "num_tokens\n1\n").unwrap_err().to_string();
        assert!(missing.starts_with("p/mlp.csv, row 0: missing column `n_head`"), "{missing}");
        let text = format!("{HEADER}\n0.1,0.2,0.3,0.4,32,8,4096,14336,True,64,2\n0.1,NaN,0.3,0.4,32,8,4096,14336,True,64,2\n");
        let bad = parse_compute_csv(Path::new("p/mlp.csv"), "h100", "m", &text).unwrap_err().to_string();
        assert_eq!(bad, "p/mlp.csv, row 2: column `time_stats.attn_post_proj.median`: `NaN` is not a positive number");
        let text = format!("{HEADER}\n0.1,0.2,0.3,0.4,32,8,4096,14336,maybe,64,2\n");
        let gate = parse_compute_csv(Path::new("p/mlp.csv"), "h100", "m", &text).unwrap_err().to_string();
        assert!(gate.contains("`use_gated_mlp`: `maybe` is not True or False"), "{gate}");
        // Counts and sizes are whole numbers of a plausible size, not any positive number.
        for (row, needle) in [
            ("0.1,0.2,0.3,0.4,32,8,1e30,14336,True,64,2", "column `n_embd`: `1e30` is not a whole number from 1 to 16777216"),
            ("0.1,0.2,0.3,0.4,1e-300,8,4096,14336,True,64,2", "column `n_head`: `1e-300` is not a whole number"),
            ("0.1,0.2,0.3,0.4,32,8,4096,14336,True,64.5,2", "column `num_tokens`: `64.5`"),
            ("0.1,0.2,0.3,0.4,32,8,4096,14336,True,64,18446744073709551615", "column `num_tensor_parallel_workers`"),
        ] {
            let e = parse_compute_csv(Path::new("p/mlp.csv"), "h100", "m", &format!("{HEADER}\n{row}\n")).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        let e = parse_all_reduce_csv(
            Path::new("n/all_reduce.csv"),
            "h100",
            Link::NvLink,
            "time_stats.all_reduce.median,num_workers,size,devices_per_node\n0.1,2,1e30,2\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("column `size`: `1e30` is not a whole number"), "{e}");
    }

    /// Times generated by a known model on two GPUs of different peaks:
    /// the fit recovers it, and each GPU is predicted from the other.
    #[test]
    fn the_fit_recovers_a_known_model_and_carries_it_between_gpus() {
        let truth = GemmModel { compute_efficiency: 0.62, memory_efficiency: 0.81, launch_us: 6.0, tile_tokens: 64 };
        let peaks = gpus(&[("fast", H100), ("slow", A40)]);
        let mut samples = Vec::new();
        for gpu in peaks.keys() {
            for tokens in [1u32, 8, 40, 100, 128, 300, 520, 600, 1000, 1500, 2100, 3000, 4096] {
                for (k, n) in [(4096.0, 6144.0), (4096.0, 4096.0), (8192.0, 28672.0), (2048.0, 8192.0)] {
                    let mut s = GemmSample { gpu: gpu.clone(), model: "m".into(), op: GemmOp::Qkv, tokens, tp: 1, k, n, time_us: 0.0 };
                    s.time_us = truth.time_us(&s, peaks[gpu]);
                    samples.push(s);
                }
            }
        }
        let all: Vec<&GemmSample> = samples.iter().collect();
        let fit = fit_gemm(&all, &peaks);
        assert_eq!(fit.tile_tokens, 64, "{fit:?}");
        for (got, want) in [(fit.compute_efficiency, 0.62), (fit.memory_efficiency, 0.81), (fit.launch_us, 6.0)] {
            assert!((got / want - 1.0).abs() < 0.01, "{fit:?}");
        }
        for held in leave_one_gpu_out(&samples, &peaks) {
            assert!(held.errors.median_abs < 0.01 && held.errors.p90_abs < 0.02, "{held:?}");
        }
    }

    /// Layer times generated by known terms on two GPUs: the fit recovers
    /// them, the check finds no bias and no scaling error, and a set whose
    /// per-layer constant is too large scales too little (the sign the
    /// check reports as negative).
    #[test]
    fn layer_terms_are_recovered_and_scaling_errors_have_the_right_sign() {
        let truth = LayerTerms { prefill_compute: 1.4, decode_compute: 0.7, weights: 1.2, per_layer_us: 45.0 };
        let peaks = gpus(&[("h100", H100), ("a40", A40)]);
        let mut layers = Vec::new();
        for gpu in peaks.keys() {
            for tokens in [1u32, 8, 32, 128, 512, 1024, 2048, 4096] {
                for params in [2.0e8, 8.0e8] {
                    let mut l = LayerSample {
                        gpu: gpu.clone(),
                        model: format!("m{params}"),
                        tokens,
                        tp: 1,
                        params,
                        time_us: 1.0,
                        small_ops_us: 0.0,
                    };
                    if let Some(t) = truth.time_us(&l, peaks[gpu]) {
                        l.time_us = t;
                        layers.push(l);
                    }
                }
            }
        }
        assert_eq!(layers.len(), 2 * 7 * 2, "512 tokens is between the regimes");
        let all: Vec<&LayerSample> = layers.iter().collect();
        let fit = LayerTerms::fit(&all, &peaks);
        for (got, want) in [(fit.prefill_compute, 1.4), (fit.decode_compute, 0.7), (fit.weights, 1.2), (fit.per_layer_us, 45.0)] {
            assert!((got / want - 1.0).abs() < 1e-6, "{fit:?}");
        }
        for c in check_layers(&layers, &peaks, &truth, "h100") {
            assert!(c.absolute.median_abs < 1e-9, "{c:?}");
            assert_eq!(c.scaling.is_some(), c.gpu == "a40", "{c:?}");
            assert!(c.scaling.as_ref().is_none_or(|s| s.median_abs < 1e-9), "{c:?}");
        }
        let constant_heavy = LayerTerms { per_layer_us: 90.0, ..truth };
        let decode =
            check_layers(&layers, &peaks, &constant_heavy, "h100").into_iter().find(|c| c.gpu == "a40" && c.regime == "decode").unwrap();
        assert!(decode.scaling.as_ref().unwrap().median_signed < -0.01, "{decode:?}");
        for h in layers_leave_one_gpu_out(&layers, &peaks, "h100") {
            assert!(h.checks.iter().all(|c| c.absolute.median_abs < 1e-6), "{h:?}");
        }
    }

    /// Datasheet peaks (dense BF16, memory bandwidth) of the profiled GPUs.
    const H100: Peaks = Peaks { flops_per_s: 989.5e12, bytes_per_s: 3.35e12 };
    const A100: Peaks = Peaks { flops_per_s: 312e12, bytes_per_s: 2.039e12 };
    const A40: Peaks = Peaks { flops_per_s: 149.7e12, bytes_per_s: 0.696e12 };

    fn gpus(named: &[(&str, Peaks)]) -> BTreeMap<String, Peaks> {
        named.iter().map(|&(name, p)| (name.to_string(), p)).collect()
    }

    fn efficiency(gemm_compute: f64, gemm_memory: f64, layer_overhead_us: f64) -> KernelEfficiency {
        KernelEfficiency {
            gemm_compute,
            gemm_memory,
            layer_overhead_us,
            allreduce_nvlink: None,
            allreduce_pcie: None,
            source: String::new(),
        }
    }

    /// Layers whose GEMMs stream weights at μ of the bandwidth (decode) and
    /// compute at η of the peak (prefill), plus 4·t0 and small operations:
    /// each GPU's μ, η and overhead are read back exactly, from the models
    /// both GPUs profiled only.
    #[test]
    fn each_gpus_efficiencies_are_read_off_its_layers() {
        let peaks = gpus(&[("h100", H100), ("a100", A100)]);
        let shared = GemmModel { compute_efficiency: 0.7, memory_efficiency: 0.8, launch_us: 7.0, tile_tokens: 128 };
        let truth: BTreeMap<&str, (f64, f64, f64)> = [("h100", (0.71, 0.99, 19.0)), ("a100", (0.73, 0.84, 24.0))].into();
        let mut layers = Vec::new();
        for (gpu, p) in &peaks {
            let (eta, mu, small) = truth[gpu.as_str()];
            for (model, params) in [("a", 2.0e8), ("b", 8.0e8), ("only-here", 1.0e8)] {
                if model == "only-here" && gpu == "h100" {
                    continue;
                }
                for tokens in [1u32, 4, 8, 1024, 4096] {
                    let gemm_s = if tokens <= 8 {
                        2.0 * params / (p.bytes_per_s * mu)
                    } else {
                        2.0 * f64::from(tokens) * params / (p.flops_per_s * eta)
                    };
                    // The model only one GPU profiled would pull the medians off.
                    let small_ops_us = if model == "only-here" { 500.0 } else { small };
                    let time_us = 4.0 * shared.launch_us + small_ops_us + gemm_s * 1e6 * if model == "only-here" { 3.0 } else { 1.0 };
                    layers.push(LayerSample { gpu: gpu.clone(), model: model.into(), tokens, tp: 1, params, time_us, small_ops_us });
                }
            }
        }
        let got = gpu_efficiencies(&layers, &peaks, &shared);
        for (gpu, (eta, mu, small)) in truth {
            let e = &got[gpu];
            for (g, w) in [(e.gemm_compute, eta), (e.gemm_memory, mu), (e.layer_overhead_us, 28.0 + small)] {
                assert!((g / w - 1.0).abs() < 1e-9, "{gpu}: {e:?}");
            }
        }
    }

    /// Layers timed on each GPU by the reference's terms carried there: the
    /// carried check finds no scaling error where the plain one does, and
    /// efficiencies_without replaces one GPU's by the others' mean.
    #[test]
    fn terms_carried_by_the_efficiency_ratios_scale_exactly() {
        let peaks = gpus(&[("h100", H100), ("a100", A100)]);
        let efficiencies: BTreeMap<String, KernelEfficiency> =
            [("h100".to_string(), efficiency(0.71, 0.99, 48.0)), ("a100".to_string(), efficiency(0.73, 0.84, 53.0))].into();
        let terms = LayerTerms { prefill_compute: 1.4, decode_compute: 0.7, weights: 1.2, per_layer_us: 50.0 };
        let mut layers = Vec::new();
        for (gpu, p) in &peaks {
            let carry = efficiencies["h100"].carry_to(&efficiencies[gpu]);
            let here = LayerTerms { per_layer_us: terms.per_layer_us * carry.per_layer, ..terms };
            for tokens in [1u32, 16, 128, 1024, 4096] {
                for params in [2.0e8, 8.0e8] {
                    let mut l = LayerSample {
                        gpu: gpu.clone(),
                        model: format!("m{params}"),
                        tokens,
                        tp: 1,
                        params,
                        time_us: 1.0,
                        small_ops_us: 0.0,
                    };
                    l.time_us = here.time_us(&l, p.carried(carry)).unwrap();
                    layers.push(l);
                }
            }
        }
        let scaling = |checks: Vec<LayerCheck>| checks.into_iter().filter_map(|c| c.scaling).map(|s| s.median_signed).collect::<Vec<_>>();
        let carried = scaling(check_layers_carried(&layers, &peaks, &terms, &efficiencies, "h100"));
        assert_eq!(carried.len(), 2);
        assert!(carried.iter().all(|e| e.abs() < 1e-9), "{carried:?}");
        let plain = check_layers(&layers, &peaks, &terms, "h100");
        let decode = plain.iter().find(|c| c.regime == "decode" && c.gpu == "a100").and_then(|c| c.scaling.as_ref()).unwrap();
        assert!(decode.median_signed < -0.01, "by the peaks alone, an A100 decode layer comes out too fast: {decode:?}");
        let blind = efficiencies_without(&efficiencies, "a100");
        assert_eq!(blind["a100"].gemm_memory, 0.99);
        assert_eq!(blind["h100"], efficiencies["h100"]);
    }

    #[test]
    fn all_reduce_curves_keep_one_node_average_repeats_and_interpolate_in_log_log() {
        let text = "time_stats.all_reduce.median,num_workers,size,devices_per_node\n\
            0.010,2,1024,2\n0.030,2,1024,2\n0.100,2,1048576,2\n5.0,2,1024,1\n0.050,4,1024,4\n";
        let curves = parse_all_reduce_csv(Path::new("n/all_reduce.csv"), "h100", Link::NvLink, text).unwrap();
        assert_eq!(curves.len(), 2, "the cross-node row is dropped");
        assert_eq!(curves[0].workers, 2);
        assert_eq!(curves[0].points, vec![(2048.0, 20.0), (2_097_152.0, 100.0)]);
        // A power law t = 20·(b/2048)^(ln 5 / ln 1024) is interpolated exactly.
        let c = &curves[0];
        let slope = 5f64.ln() / 1024f64.ln();
        for b in [2048.0, 65536.0, 1e6, 2_097_152.0, 8e6] {
            let want = 20.0 * (b / 2048.0f64).powf(slope);
            assert!((c.time_us(b) / want - 1.0).abs() < 1e-9, "{b}");
        }
        let header_only = parse_all_reduce_csv(
            Path::new("n/all_reduce.csv"),
            "h100",
            Link::NvLink,
            "time_stats.all_reduce.median,num_workers,size,devices_per_node\n",
        );
        assert_eq!(
            header_only.unwrap_err().to_string(),
            "n/all_reduce.csv, row 0: no data rows, only a header: profile again, or remove the file"
        );
        let bad = parse_all_reduce_csv(
            Path::new("n/all_reduce.csv"),
            "h100",
            Link::NvLink,
            "time_stats.all_reduce.median,num_workers,size,devices_per_node\n-1,2,1024,2\n",
        );
        assert_eq!(
            bad.unwrap_err().to_string(),
            "n/all_reduce.csv, row 1: column `time_stats.all_reduce.median`: `-1` is not a positive number"
        );
    }

    /// Curves generated by a known latency, ring-step time and bus
    /// efficiency at 2, 4 and 8 workers: the fit recovers all three from the
    /// sizes of 1 MiB and more (smaller ones, here distorted, are ignored),
    /// the model times every curve exactly, and a second GPU made with the
    /// same efficiency on a link twice as fast is timed by the first's fit.
    /// A fifth of the sizes on another mode (50 % slower) leave the fit
    /// where it was, and one group size gives no ring-step time.
    #[test]
    fn the_all_reduce_fit_recovers_latency_and_bus_efficiency_and_carries_by_link_bandwidth() {
        let truth = AllReduceEfficiency { bus_efficiency: 0.62, latency_us: 30.0, hop_latency_us: 1.5 };
        let curve = |gpu: &str, workers: u32, link_bytes_per_s: f64| AllReduceCurve {
            gpu: gpu.into(),
            link: Link::Pcie,
            workers,
            points: (10..28)
                .map(|k| f64::from(1u32 << k))
                .map(|b| (b, truth.time_us(b, workers, link_bytes_per_s) * if b < ALL_REDUCE_MIN_BYTES { 3.0 } else { 1.0 }))
                .collect(),
        };
        let bandwidth = |gpu: &str, _: Link| Some(if gpu == "fast" { 128e9 } else { 64e9 });
        let curves: Vec<AllReduceCurve> =
            ["fast", "slow"].iter().flat_map(|g| [2, 4, 8].map(|w| curve(g, w, bandwidth(g, Link::Pcie).unwrap()))).collect();
        let fits = fit_all_reduces(&curves, bandwidth);
        assert_eq!(fits.len(), 2);
        let recovered = |e: &AllReduceEfficiency, tolerance: f64| {
            (e.bus_efficiency / 0.62 - 1.0).abs() < tolerance
                && (e.latency_us / 30.0 - 1.0).abs() < tolerance
                && (e.hop_latency_us / 1.5 - 1.0).abs() < tolerance
        };
        for f in &fits {
            assert!(recovered(&f.efficiency, 1e-6), "{f:?}");
        }
        let bimodal: Vec<AllReduceCurve> = curves[..3]
            .iter()
            .map(|c| AllReduceCurve {
                points: c.points.iter().enumerate().map(|(i, &(b, t))| (b, if i % 5 == 0 { 1.5 * t } else { t })).collect(),
                ..c.clone()
            })
            .collect();
        let robust = fit_all_reduce(&bimodal.iter().collect::<Vec<_>>(), 128e9).unwrap();
        assert!(recovered(&robust, 1e-3), "{robust:?}");
        let one_size = fit_all_reduce(&[&curves[1]], 128e9).unwrap();
        assert_eq!(one_size.hop_latency_us, 0.0);
        assert!((one_size.latency_at(4) / truth.latency_at(4) - 1.0).abs() < 1e-6, "{one_size:?}");
        let checks = check_all_reduce(&curves, &fits, bandwidth);
        assert_eq!(checks.len(), 6);
        for c in &checks {
            assert!(c.model.median_abs < 1e-9 && c.interpolation.samples > 0, "{c:?}");
            let (other, errors) = c.from_other_gpu.as_ref().unwrap();
            assert_ne!(other, &c.gpu);
            assert!(errors.p90_abs < 1e-9, "{c:?}");
        }
        assert_eq!(
            fit_all_reduce(&[&AllReduceCurve { points: vec![(2e6, 50.0)], ..curves[0].clone() }], 64e9),
            None,
            "one size fixes no slope"
        );
    }
}
