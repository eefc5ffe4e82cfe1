//! `blis fit`: learning a model's α and β from real experiments.
//!
//! **Stage one — linear, teacher-forced.** Each training experiment is
//! simulated (first with the starting coefficients, then with the previous
//! round's). Every step's feature vector f(step) is recorded, so a request's
//! client-side times decompose linearly in the coefficients:
//!
//! ```text
//! TTFT_r = α·u_ttft(r) + β·G_r      G_r = Σ f over [enqueued, first-token step end]   (the step in flight at
//! E2E_r  = α·u_e2e(r)  + β·(G_r + D_r)  D_r = Σ f over (first-token step end, last-token step end]   enqueue counts pro rata)
//! ```
//!
//! Averaging per stage gives two equations per active stage (mean TTFT and
//! mean E2E against the measured means), each divided by its measured value
//! so the fit minimises relative error; TTFT rows carry weight 0.3, as in
//! stage two. β and α come from non-negative least squares (trained-physics,
//! unified-5, blackbox) or from ridge regression with λ chosen by
//! leave-one-experiment-out cross-validation (physics-normalized, whose
//! coefficients may be negative). Batch compositions depend on the
//! coefficients, so the simulate → fit round repeats a fixed number of times.
//!
//! **Stage two — simulator in the loop.** Nelder–Mead over the coefficients
//! stage one left non-zero (and the queueing and completion α), minimising
//! E2E MAPE + 0.3·TTFT MAPE over the active training stages, every
//! evaluation simulating all training experiments in parallel. Fixed seed,
//! fixed evaluation budget: the same command gives the same coefficients.
//!
//! The *fitting objective* both stages score candidates with is that loss
//! plus two terms: a weak physical prior on the coefficients
//! ([`PRIOR_WEIGHT`]; trained-physics and unified-5) and the saturation term
//! ([`SATURATION_WEIGHT`]): how far the simulated failure fraction of the
//! overloaded training runs is from the measured one.

pub mod kernels;
pub mod observed;
pub mod optimize;
pub mod otel;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use blis_engine::instance::{Observer, StepEvent};
use blis_engine::latency::{InstanceLoad, LatencyModel, MAX_STEP, QueueingInput};
use blis_engine::request::{Outcome, RequestRecord};
use blis_engine::time::Micros;
use blis_physics::catalog;
use blis_physics::coefficients::{CoefficientSet, Provenance};
use blis_physics::hardware::KernelEfficiency;
use blis_physics::latency::{FeatureBasis, FitMethod, ModelKind, Priors};
use blis_scenario::deployment::Server;
use rayon::prelude::*;

use crate::error::ExperimentError;
use crate::experiment::Status;
use crate::validate::compare::{ExperimentComparison, Metric};
use crate::validate::reproduce::simulate;
use crate::validate::stats::ape;
use crate::validate::suite::Case;
use optimize::{LeastSquares, nelder_mead};

/// Weight of TTFT relative to E2E in both stages' objectives.
pub const TTFT_WEIGHT: f64 = 0.3;
/// Weight of the saturation term of the fitting objective: the mean absolute
/// error, in percentage points, of the failure fraction of the
/// overload-excluded training runs (the saturation-cliff penalty of
/// `unified-step-time-formula.md`, Part 4). Their latencies are never fitted.
pub const SATURATION_WEIGHT: f64 = 0.1;
/// Requests averaged into one stage-one equation (one prompt cycle of inference-perf's shared-prefix workload).
pub const REQUEST_BLOCK: usize = 100;
/// Factor beyond which a simulated E2E is too far from the measured one for
/// its batch compositions to stand in for the real ones.
pub const COMPOSITION_MISMATCH: f64 = 2.0;

fn compositions_match(simulated: f64, real: f64) -> bool {
    simulated <= real * COMPOSITION_MISMATCH && real <= simulated * COMPOSITION_MISMATCH
}
/// Weight of the physical prior, per coefficient, against the stage-weighted
/// relative-error equations (each active stage's E2E rows weigh 1 in total).
/// Weak on purpose: it decides only directions the data leaves open.
pub const PRIOR_WEIGHT: f64 = 1e-3;

/// Scale of every prior trained-physics takes from measurements (per-layer
/// overhead, KV bandwidth, per-collective latency), as a fraction of the
/// measured value.
pub const MEASURED_PRIOR_SCALE: f64 = 0.1;

/// Expected fixed latency of one tensor-parallel collective, µs: one kernel's
/// fixed cost, which the kernel profiles (`blis kernels`) measure at
/// t0 = 7.7 µs per GEMM on the A100, A40 and H100 alike. A collective is a
/// kernel too; it adds a cross-GPU handshake but moves its bytes in T_ar.
pub const COLLECTIVE_CALL_PRIOR_US: f64 = 7.7;

/// The physical prior of one coefficient: its expected value and the scale
/// of a plausible deviation. Coefficients multiplying a time at peak
/// (compute, weight or KV traffic, all-reduce bytes at the link's measured
/// bus bandwidth) expect 1 ± 1 (= peak, or measured, efficiency); per-layer,
/// per-request and per-step overheads expect 0 ± 100 µs; client-side α
/// expects 0 ± 10 ms, and trained-physics's queueing per running request
/// 0 ± 100 µs. trained-physics's per-layer overhead is measured where
/// the training GPU was profiled (`measured_layer_us`, the GPU's
/// `kernels.layer_overhead_us`) and expects that ± 10 %; its KV traffic
/// expects the bandwidth the GPU's memory-bound GEMMs reach (1/μ, `kernels.gemm_memory`)
/// ± 10 %: with only GQA models to learn from (KV a few percent of a step)
/// the data leave the KV coefficients free, and a model with full-width KV
/// heads would inherit whatever they drifted to; its per-collective
/// latency expects one kernel's measured fixed cost ± 10 %.
fn prior(kind: ModelKind, name: &str, is_alpha: bool, gpu: Option<&KernelEfficiency>) -> (f64, f64) {
    if is_alpha {
        return if name.ends_with("_per_running_us") { (0.0, 100.0) } else { (0.0, 10_000.0) };
    }
    let profiled = gpu.filter(|_| kind.priors() == Priors::KernelProfiled);
    let measured = |mean: f64| (mean, MEASURED_PRIOR_SCALE * mean);
    match name {
        "per_layer_us" if let Some(k) = profiled => measured(k.layer_overhead_us),
        "prefill_kv" | "decode_kv" if let Some(k) = profiled => measured(1.0 / k.gemm_memory),
        "allreduce_call_us" => measured(COLLECTIVE_CALL_PRIOR_US),
        "prefill_compute" | "decode_compute" | "weights" | "memory" | "prefill_kv" | "decode_kv" | "allreduce" => (1.0, 1.0),
        n if n.ends_with("_us") => (0.0, 100.0),
        _ => (0.0, 1.0),
    }
}

/// The prior of every coefficient of `basis` ([α…, β…]); `None` for models
/// fitted without one (physics-normalized uses ridge regression instead,
/// blackbox has no physical scale). `gpu`: the kernel efficiencies of the
/// GPU every training run used, where it was profiled.
pub fn priors(kind: ModelKind, basis: &dyn FeatureBasis, gpu: Option<&KernelEfficiency>) -> Option<Vec<(f64, f64)>> {
    (kind.priors() != Priors::None).then(|| {
        basis
            .alpha_names()
            .iter()
            .map(|n| prior(kind, n, true, gpu))
            .chain(basis.beta_names().iter().map(|n| prior(kind, n, false, gpu)))
            .collect()
    })
}

/// [`priors`] with `overrides` applied by coefficient name; an error for a
/// name the model lacks, or one given twice.
pub fn with_overrides(
    kind: ModelKind,
    basis: &dyn FeatureBasis,
    gpu: Option<&KernelEfficiency>,
    overrides: &[PriorOverride],
) -> Result<Option<Vec<(f64, f64)>>, FitError> {
    if overrides.is_empty() {
        return Ok(priors(kind, basis, gpu));
    }
    let mut p = priors(kind, basis, gpu)
        .ok_or_else(|| FitError::Invalid(format!("--prior: {kind} is fitted without priors (trained-physics and unified-5 have them)")))?;
    let names: Vec<&str> = basis.alpha_names().iter().chain(basis.beta_names()).copied().collect();
    for (k, o) in overrides.iter().enumerate() {
        if let Some(first) = overrides[..k].iter().find(|f| f.name == o.name) {
            return Err(FitError::Invalid(format!(
                "--prior {}: given twice ({}:{} and {}:{}); give each coefficient one prior",
                o.name, first.mean, first.scale, o.mean, o.scale
            )));
        }
        let i = names.iter().position(|n| *n == o.name).ok_or_else(|| {
            FitError::Invalid(format!("--prior {}: {kind} has no coefficient of that name; it has {}", o.name, names.join(", ")))
        })?;
        p[i] = (o.mean, o.scale);
    }
    Ok(Some(p))
}

/// The prior penalty of `x`, in objective units (percentage points).
fn prior_penalty(x: &[f64], priors: Option<&[(f64, f64)]>) -> f64 {
    priors.map_or(0.0, |p| 100.0 * PRIOR_WEIGHT * x.iter().zip(p).map(|(v, (m, s))| ((v - m) / s).powi(2)).sum::<f64>())
}

/// Stage-one rounds `blis fit` runs unless told otherwise.
pub const DEFAULT_ROUNDS: usize = 6;
/// Stage-two objective evaluations `blis fit` runs unless told otherwise:
/// enough for a fit on the shared data within a minute on 2 cores (51 s,
/// in-sample E2E 0.98 %); the bundled sets were fitted with 150 (88 s,
/// 0.97 %), and their provenance says so.
pub const DEFAULT_REFINE_EVALS: usize = 80;

/// Ridge penalties tried by cross-validation (on unit-norm columns).
const RIDGE_GRID: [f64; 7] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0];

/// What to fit and how long to refine.
#[derive(Clone, Debug)]
pub struct FitOptions {
    /// The model to fit.
    pub kind: ModelKind,
    /// Coefficients of the first simulation (they only shape the batch
    /// compositions of round one; any model works).
    pub start: CoefficientSet,
    /// Leave the experiments of this model out of training and report them.
    pub holdout_model: Option<String>,
    /// Simulation seed.
    pub seed: u64,
    /// Stage-one rounds (simulate, then fit).
    pub linear_rounds: usize,
    /// Stage-two objective evaluations (0 skips stage two).
    pub refine_evals: usize,
    /// Priors that replace the built-in ones: (coefficient name, expected
    /// value, scale of a plausible deviation). A small scale anchors the
    /// coefficient (to a kernel-profile efficiency, say).
    pub prior_overrides: Vec<PriorOverride>,
}

/// A prior given by the user for one named coefficient.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorOverride {
    /// α or β name, as the coefficient file's model names it.
    pub name: String,
    /// Expected value, in [0, [`PRIOR_MAX`]].
    pub mean: f64,
    /// Scale of a plausible deviation, in [[`PRIOR_SCALE_MIN`], [`PRIOR_MAX`]].
    pub scale: f64,
}

/// The largest prior mean or scale: a coefficient is a multiple of a time
/// at peak or a time in µs, and no term of a step can usefully exceed the
/// longest step ([`MAX_STEP`], one hour).
pub const PRIOR_MAX: f64 = MAX_STEP.as_us() as f64;

/// The smallest prior scale: a millionth of a µs or of peak efficiency pins
/// a coefficient already, and a finer one overflows the prior penalty.
pub const PRIOR_SCALE_MIN: f64 = 1e-6;

impl std::str::FromStr for PriorOverride {
    type Err = String;

    /// Parses `NAME=MEAN:SCALE` (`--prior`): coefficients are non-negative,
    /// so MEAN is in [0, [`PRIOR_MAX`]], and SCALE in [[`PRIOR_SCALE_MIN`], [`PRIOR_MAX`]].
    fn from_str(text: &str) -> Result<PriorOverride, String> {
        let bad = || {
            format!(
                "{text:?}: expected NAME=MEAN:SCALE with MEAN in [0, {PRIOR_MAX:e}] and SCALE in [{PRIOR_SCALE_MIN:e}, {PRIOR_MAX:e}] \
                 (a coefficient is non-negative and no term exceeds a one-hour step), e.g. weights=1.27:0.03"
            )
        };
        let (name, rest) = text.split_once('=').ok_or_else(bad)?;
        let (mean, scale) = rest.split_once(':').ok_or_else(bad)?;
        let (mean, scale): (f64, f64) = (mean.trim().parse().map_err(|_| bad())?, scale.trim().parse().map_err(|_| bad())?);
        if name.trim().is_empty() || !(0.0..=PRIOR_MAX).contains(&mean) || !(PRIOR_SCALE_MIN..=PRIOR_MAX).contains(&scale) {
            return Err(bad());
        }
        Ok(PriorOverride { name: name.trim().to_string(), mean, scale })
    }
}

/// The result of a fit.
#[derive(Clone, Debug)]
pub struct FitOutcome {
    /// The fitted set, provenance filled in (except `fitted_at` and `command`).
    pub set: CoefficientSet,
    /// Fitting objective (E2E MAPE + 0.3·TTFT MAPE + prior penalty) after stage one.
    pub linear_loss: f64,
    /// The same after stage two.
    pub final_loss: f64,
    /// E2E MAPE + 0.3·TTFT MAPE of the result over the training stages (no penalty).
    pub train_loss: f64,
}

/// Why a fit cannot run.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// An experiment failed to load or simulate.
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    /// The options do not describe a fit.
    #[error("{0}")]
    Invalid(String),
}

/// Whether `run` is of the model `name` (full HuggingFace id or the part
/// after the `/`, ignoring ASCII case).
pub fn is_model(run: &dyn Measured, name: &str) -> bool {
    let id = &run.server().model_name;
    id.eq_ignore_ascii_case(name) || id.rsplit('/').next().is_some_and(|s| s.eq_ignore_ascii_case(name))
}

/// A real run the fit learns from: it can be simulated with any
/// coefficients and says what was measured next to what was simulated.
/// Implemented by inference-perf experiments ([`Case`]) and by traces that
/// `blis observe` recorded ([`observed::ObservedRun`]).
pub trait Measured: Sync {
    /// The run's name, as provenance records it.
    fn name(&self) -> &str;
    /// Where the run was read from, for messages.
    fn origin(&self) -> &std::path::Path;
    /// The deployment it ran on (model, GPU, tp, server knobs).
    fn server(&self) -> &Server;
    /// Whether its latencies are fitted; an overloaded run only scores the
    /// saturation term.
    fn active(&self) -> bool;
    /// Simulates the run with `set` (seeded with `seed`), `observer` seeing
    /// every event, and pairs what was measured with what was simulated.
    fn replay(&self, set: &CoefficientSet, seed: u64, observer: &mut dyn Observer) -> Result<Replayed<'_>, ExperimentError>;
    /// The APE of each headline metric, per stage, of a simulation with `set`.
    fn headline_apes(&self, set: &CoefficientSet, seed: u64) -> Result<Vec<(Metric, f64)>, ExperimentError>;

    /// `set`'s latency model on this run's deployment.
    fn latency(&self, set: &CoefficientSet) -> Result<Arc<dyn LatencyModel>, ExperimentError> {
        let s = self.server();
        set.latency_model(&s.model, &s.gpu, s.tp, &s.instance)
            .map_err(|message| ExperimentError::Unreproducible { path: self.origin().to_path_buf(), message })
    }
}

/// What a run measured next to its simulation.
#[derive(Clone, Debug, Default)]
pub struct Replayed<'a> {
    /// Per stage, in stage order.
    pub stages: Vec<StageScore>,
    /// The measured latencies of each simulated request id, when the run
    /// measured every request like for like (the simulated request
    /// generated the same number of tokens); `None` fits the stage means.
    pub requests: Option<Cow<'a, BTreeMap<u64, RealLatency>>>,
}

/// One stage's measured and simulated means and failure fractions.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct StageScore {
    /// Measured mean E2E, ms.
    pub real_e2e_ms: Option<f64>,
    /// Measured mean TTFT, ms.
    pub real_ttft_ms: Option<f64>,
    /// Simulated mean E2E, ms (`None`: no simulated success).
    pub sim_e2e_ms: Option<f64>,
    /// Simulated mean TTFT, ms.
    pub sim_ttft_ms: Option<f64>,
    /// Measured failed / sent.
    pub real_failure: f64,
    /// Simulated failed / sent.
    pub sim_failure: f64,
}

/// One request's measured client-side latencies.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RealLatency {
    /// The stage it counts in.
    pub stage: u32,
    /// Time to first token, µs.
    pub ttft_us: f64,
    /// End-to-end latency, µs.
    pub e2e_us: f64,
}

impl Measured for Case {
    fn name(&self) -> &str {
        &self.experiment.name
    }

    fn origin(&self) -> &std::path::Path {
        &self.experiment.dir
    }

    fn server(&self) -> &Server {
        &self.setup.server
    }

    fn active(&self) -> bool {
        self.experiment.status() == Status::Active
    }

    fn replay(&self, set: &CoefficientSet, seed: u64, observer: &mut dyn Observer) -> Result<Replayed<'_>, ExperimentError> {
        let sim = simulate(&self.experiment, &self.setup, Measured::latency(self, set)?, seed, false, observer)?;
        let output_len = sim.mean_output_tokens;
        let stages = self
            .experiment
            .stages
            .iter()
            .zip(&sim.client.stages)
            .map(|(measured, client)| {
                let m = client.metrics(output_len);
                StageScore {
                    real_e2e_ms: Metric::E2eMean.actual(measured, output_len),
                    real_ttft_ms: Metric::TtftMean.actual(measured, output_len),
                    sim_e2e_ms: Metric::E2eMean.predicted(&m),
                    sim_ttft_ms: Metric::TtftMean.predicted(&m),
                    real_failure: measured.failure_fraction(),
                    sim_failure: m.failure_fraction,
                }
            })
            .collect();
        let requests = self.experiment.requests.as_ref().filter(|_| sim.fixed_output).map(|rows| {
            sim.csv_row_of
                .iter()
                .enumerate()
                .filter_map(|(id, &i)| Some((id, i?)))
                .filter_map(|(id, i)| match (rows[i].has_error, rows[i].ttft_ms, rows[i].e2e_ms) {
                    (0, Some(t), Some(e)) if t > 0.0 && e > 0.0 => {
                        Some((id as u64, RealLatency { stage: rows[i].stage, ttft_us: t * 1e3, e2e_us: e * 1e3 }))
                    }
                    _ => None,
                })
                .collect()
        });
        Ok(Replayed { stages, requests: requests.map(Cow::Owned) })
    }

    fn headline_apes(&self, set: &CoefficientSet, seed: u64) -> Result<Vec<(Metric, f64)>, ExperimentError> {
        let sim = simulate(
            &self.experiment,
            &self.setup,
            Measured::latency(self, set)?,
            seed,
            true,
            &mut crate::validate::reproduce::NoObserver,
        )?;
        let comparison = ExperimentComparison::new(&self.experiment, &self.setup.server.model_name, &sim);
        Ok(HEADLINE.iter().flat_map(|&m| comparison.stage_apes(m).map(move |a| (m, a)).collect::<Vec<_>>()).collect())
    }
}

/// The metrics whose errors provenance records.
pub const HEADLINE: [Metric; 5] = [Metric::E2eMean, Metric::E2eP90, Metric::E2eP99, Metric::TtftMean, Metric::ItlMean];

/// Per-step feature sums and request records of one simulation.
struct StepRecorder<'a> {
    basis: &'a dyn FeatureBasis,
    scratch: Vec<f64>,
    /// Each instance's steps, by instance id (one for a single server, one
    /// per engine of a data-parallel one).
    timelines: Vec<Timeline>,
    records: Vec<RequestRecord>,
}

/// The steps of one instance.
#[derive(Default)]
struct Timeline {
    /// Start and end of every step.
    spans: Vec<(Micros, Micros)>,
    /// Cumulative features at the end of every step, `k` per step.
    cumulative: Vec<f64>,
    loads: Vec<InstanceLoad>,
}

impl<'a> StepRecorder<'a> {
    fn new(basis: &'a dyn FeatureBasis) -> StepRecorder<'a> {
        let k = basis.beta_names().len();
        StepRecorder { basis, scratch: vec![0.0; k], timelines: Vec::new(), records: Vec::new() }
    }

    fn k(&self) -> usize {
        self.scratch.len()
    }

    /// The steps of `instance` (a record's; None: a single server's).
    fn timeline(&self, instance: Option<u32>) -> Option<&Timeline> {
        self.timelines.get(instance.unwrap_or(0) as usize)
    }
}

impl Timeline {
    /// Σ f over steps up to time `t`, the step containing `t` pro rata
    /// (`k` features per step).
    fn integral(&self, k: usize, t: Micros, out: &mut [f64]) {
        // Index of the first step starting after t.
        let after = self.spans.partition_point(|&(start, _)| start <= t);
        out.iter_mut().for_each(|x| *x = 0.0);
        if after == 0 {
            return;
        }
        let i = after - 1;
        let (start, end) = self.spans[i];
        let before = if i == 0 { None } else { Some(&self.cumulative[(i - 1) * k..i * k]) };
        let this = &self.cumulative[i * k..(i + 1) * k];
        let frac = if t >= end { 1.0 } else { (t - start).as_us() as f64 / (end - start).as_us().max(1) as f64 };
        for j in 0..k {
            let b = before.map_or(0.0, |c| c[j]);
            out[j] = b + frac * (this[j] - b);
        }
    }

    fn load_at(&self, t: Micros) -> InstanceLoad {
        let after = self.spans.partition_point(|&(start, _)| start <= t);
        if after == 0 { InstanceLoad::default() } else { self.loads[after - 1] }
    }
}

impl Observer for StepRecorder<'_> {
    fn observes_tokens(&self) -> bool {
        false
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        if record.outcome == Outcome::Completed {
            self.records.push(record.clone());
        }
    }

    fn on_step(&mut self, step: &StepEvent<'_>) {
        let k = self.k();
        self.basis.step_features(&step.batch, &mut self.scratch);
        let i = step.instance as usize;
        if i >= self.timelines.len() {
            self.timelines.resize_with(i + 1, Timeline::default);
        }
        let t = &mut self.timelines[i];
        let len = t.cumulative.len();
        for j in 0..k {
            let before = if len >= k { t.cumulative[len - k + j] } else { 0.0 };
            t.cumulative.push(before + self.scratch[j]);
        }
        t.spans.push((step.start, step.start + step.duration));
        t.loads.push(step.batch.load);
    }
}

/// One linear equation: coefficients of [α, β], the measured target, a weight.
struct Row {
    a: Vec<f64>,
    target: f64,
    weight: f64,
    experiment: usize,
}

/// Stage-one equations of one simulated run.
///
/// With per-request measurements of known output lengths, two equations per
/// block of [`REQUEST_BLOCK`] consecutive requests that succeeded both in
/// reality and in simulation (their mean TTFT and mean E2E), weighted so
/// that every stage counts equally; otherwise two per stage (the stage
/// means). Blocks keep the load variation within a stage while averaging
/// out per-request noise, which would otherwise bias β towards zero
/// (regression dilution). Teacher forcing assumes the simulated batch
/// compositions resemble the real ones, so requests (or stages) whose
/// simulated E2E is off by more than [`COMPOSITION_MISMATCH`]× are left out
/// of the round. Returns the simulation's comparison with the run too.
fn stage_rows<'r>(
    run: &'r dyn Measured,
    experiment: usize,
    basis: &dyn FeatureBasis,
    set: &CoefficientSet,
    seed: u64,
) -> Result<(Replayed<'r>, Vec<Row>), ExperimentError> {
    let latency = run.latency(set)?;
    let mut rec = StepRecorder::new(basis);
    let replayed = run.replay(set, seed, &mut rec)?;
    let (na, nb) = (basis.alpha_names().len(), basis.beta_names().len());
    let emission = latency.token_emission_delay();
    let per_token = latency.output_token_overhead();
    let stages = replayed.stages.len();
    let (mut c_enq, mut c_first, mut c_last) = (vec![0.0; nb], vec![0.0; nb], vec![0.0; nb]);
    let (mut u_ttft, mut u_e2e) = (vec![0.0; na], vec![0.0; na]);
    // Per stage: the per-request rows, or Σ of the feature rows for the stage means.
    let mut per_request: Vec<Vec<Row>> = (0..stages).map(|_| Vec::new()).collect();
    let mut sums = vec![(vec![0.0; na + nb], vec![0.0; na + nb], 0u64); stages];
    rec.records.sort_by_key(|r| r.id);
    for r in &rec.records {
        let (Some(enqueued), Some(first), Some(last)) = (r.enqueued, r.first_token, r.last_token) else { continue };
        let real = replayed.requests.as_ref().map(|m| m.get(&r.id.0));
        let stage = match real {
            Some(Some(l)) => l.stage as usize,
            Some(None) => continue,
            None => r.meta.stage as usize,
        };
        if stage >= stages {
            continue;
        }
        let Some(timeline) = rec.timeline(r.instance) else { continue };
        let first_step_end = first - emission - per_token;
        let last_step_end = last - emission - Micros(per_token.0.saturating_mul(u64::from(r.output_tokens)));
        timeline.integral(nb, enqueued, &mut c_enq);
        timeline.integral(nb, first_step_end, &mut c_first);
        timeline.integral(nb, last_step_end, &mut c_last);
        let arrival =
            QueueingInput { prompt_tokens: r.input_tokens, prefix_hit_tokens: r.cached_prompt_tokens, load: timeline.load_at(r.arrival) };
        basis.alpha_features(&arrival, r.output_tokens, &mut u_ttft, &mut u_e2e);
        let ttft_row: Vec<f64> = u_ttft.iter().copied().chain((0..nb).map(|j| c_first[j] - c_enq[j])).collect();
        let e2e_row: Vec<f64> = u_e2e.iter().copied().chain((0..nb).map(|j| c_last[j] - c_enq[j])).collect();
        match real {
            Some(Some(l)) => {
                if compositions_match((r.finished - r.arrival).as_us() as f64, l.e2e_us) {
                    per_request[stage].push(Row { a: ttft_row, target: l.ttft_us, weight: TTFT_WEIGHT, experiment });
                    per_request[stage].push(Row { a: e2e_row, target: l.e2e_us, weight: 1.0, experiment });
                }
            }
            _ => {
                let (ttft_sum, e2e_sum, n) = &mut sums[stage];
                ttft_sum.iter_mut().zip(&ttft_row).for_each(|(s, v)| *s += v);
                e2e_sum.iter_mut().zip(&e2e_row).for_each(|(s, v)| *s += v);
                *n += 1;
            }
        }
    }
    let mut rows = Vec::new();
    for (i, stage_rows) in per_request.into_iter().enumerate() {
        // Rows come in (TTFT, E2E) pairs in request id (send) order.
        let mut pairs: Vec<(Row, Row)> = Vec::new();
        let mut it = stage_rows.into_iter();
        while let (Some(t), Some(e)) = (it.next(), it.next()) {
            pairs.push((t, e));
        }
        let blocks = pairs.len().div_ceil(REQUEST_BLOCK).max(1) as f64;
        for block in pairs.chunks(REQUEST_BLOCK) {
            let n = block.len() as f64;
            for second in [false, true] {
                let pick = |p: &(Row, Row)| -> (Vec<f64>, f64, f64) {
                    let r = if second { &p.1 } else { &p.0 };
                    (r.a.clone(), r.target, r.weight)
                };
                let (first_a, _, first_weight) = pick(&block[0]);
                let mut a = vec![0.0; first_a.len()];
                let mut target = 0.0;
                for p in block {
                    let r = if second { &p.1 } else { &p.0 };
                    a.iter_mut().zip(&r.a).for_each(|(s, v)| *s += v / n);
                    target += r.target / n;
                }
                rows.push(Row { a, target, weight: first_weight / blocks, experiment });
            }
        }
        let (ttft_sum, e2e_sum, count) = &sums[i];
        let score = &replayed.stages[i];
        if *count == 0 || !matches!((score.sim_e2e_ms, score.real_e2e_ms), (Some(s), Some(r)) if compositions_match(s, r)) {
            continue;
        }
        let count = *count as f64;
        for (actual_ms, sum, weight) in [(score.real_ttft_ms, ttft_sum, TTFT_WEIGHT), (score.real_e2e_ms, e2e_sum, 1.0)] {
            if let Some(actual_ms) = actual_ms.filter(|v| *v > 0.0) {
                // Equations in µs: the features are µs per unit coefficient.
                rows.push(Row { a: sum.iter().map(|v| v / count).collect(), target: actual_ms * 1e3, weight, experiment });
            }
        }
    }
    Ok((replayed, rows))
}

/// APEs of the E2E means and of the TTFT means of a run's stages.
type StageApes = (Vec<f64>, Vec<f64>);

/// APE of the E2E and TTFT means of every stage of a simulated run (1000 %
/// for a stage with measurements but no simulated success).
fn stage_apes(replayed: &Replayed<'_>) -> StageApes {
    let (mut e2e, mut ttft) = (Vec::new(), Vec::new());
    for s in &replayed.stages {
        for (predicted, actual, out) in [(s.sim_e2e_ms, s.real_e2e_ms, &mut e2e), (s.sim_ttft_ms, s.real_ttft_ms, &mut ttft)] {
            match (predicted, actual) {
                (Some(p), Some(a)) => out.extend(ape(p, a)),
                (None, Some(_)) => out.push(1000.0),
                _ => {}
            }
        }
    }
    (e2e, ttft)
}

/// E2E MAPE + 0.3·TTFT MAPE from per-experiment APEs.
fn loss(parts: &[StageApes]) -> f64 {
    let e2e: Vec<f64> = parts.iter().flat_map(|p| p.0.iter().copied()).collect();
    let ttft: Vec<f64> = parts.iter().flat_map(|p| p.1.iter().copied()).collect();
    crate::validate::stats::mean(&e2e) + TTFT_WEIGHT * crate::validate::stats::mean(&ttft)
}

/// Relative least squares of the rows (each divided by its target,
/// weighted), plus one row per coefficient for the prior; rows of `skip` left
/// out (for cross-validation).
fn least_squares(rows: &[Row], n: usize, skip: Option<usize>, priors: Option<&[(f64, f64)]>) -> LeastSquares {
    let mut scaled: Vec<(Vec<f64>, f64)> = rows
        .iter()
        .filter(|r| Some(r.experiment) != skip)
        .map(|r| {
            let w = r.weight.sqrt() / r.target;
            (r.a.iter().map(|v| v * w).collect(), r.target * w)
        })
        .collect();
    for (i, (mean, scale)) in priors.unwrap_or_default().iter().enumerate() {
        let w = PRIOR_WEIGHT.sqrt() / scale;
        let mut a = vec![0.0; n];
        a[i] = w;
        scaled.push((a, mean * w));
    }
    LeastSquares::new(&scaled, n)
}

/// Stage one's solution for the rows: NNLS with the prior, or ridge with
/// cross-validated λ.
fn solve_linear(kind: ModelKind, rows: &[Row], n: usize, priors: Option<&[(f64, f64)]>) -> Vec<f64> {
    if kind.fit_method() != FitMethod::Ridge {
        return least_squares(rows, n, None, priors).nnls();
    }
    let experiments: Vec<usize> = {
        let mut e: Vec<usize> = rows.iter().map(|r| r.experiment).collect();
        e.sort_unstable();
        e.dedup();
        e
    };
    let cv_error = |lambda: f64| -> f64 {
        let mut err = 0.0;
        for &held in &experiments {
            let x = least_squares(rows, n, Some(held), None).ridge(lambda);
            for r in rows.iter().filter(|r| r.experiment == held) {
                let pred: f64 = r.a.iter().zip(&x).map(|(a, x)| a * x).sum();
                err += r.weight * ((pred - r.target) / r.target).powi(2);
            }
        }
        err
    };
    let lambda = RIDGE_GRID.iter().copied().min_by(|a, b| cv_error(*a).total_cmp(&cv_error(*b))).unwrap_or(1e-3);
    least_squares(rows, n, None, None).ridge(lambda)
}

/// The fitting objective over `runs`: E2E MAPE + 0.3·TTFT MAPE over the
/// stages of the active ones, plus [`SATURATION_WEIGHT`] × the mean failure
/// fraction error (percentage points) over the stages of the overloaded ones.
fn objective(runs: &[&dyn Measured], set: &CoefficientSet, seed: u64) -> Result<f64, ExperimentError> {
    objective_and_rows(runs, &[], set, seed).map(|(loss, _)| loss)
}

/// [`objective`], with the stage-one equations of the runs `rows_of` names
/// (`(index in runs, experiment, basis)`) taken from the same simulations:
/// one equation set per entry of `rows_of`, in its order.
fn objective_and_rows(
    runs: &[&dyn Measured],
    rows_of: &[(usize, usize, &dyn FeatureBasis)],
    set: &CoefficientSet,
    seed: u64,
) -> Result<(f64, Vec<Vec<Row>>), ExperimentError> {
    let mut parts: Vec<(StageApes, Vec<f64>, Option<Vec<Row>>)> = runs
        .par_iter()
        .enumerate()
        .map(|(i, r)| {
            let (replayed, rows) = match rows_of.iter().find(|(at, _, _)| *at == i) {
                Some(&(_, experiment, basis)) => {
                    stage_rows(*r, experiment, basis, set, seed).map(|(replayed, rows)| (replayed, Some(rows)))?
                }
                None => (r.replay(set, seed, &mut crate::validate::reproduce::NoObserver)?, None),
            };
            if r.active() {
                return Ok((stage_apes(&replayed), Vec::new(), rows));
            }
            let failure_errors = replayed.stages.iter().map(|s| (s.sim_failure - s.real_failure).abs() * 100.0).collect();
            Ok(((Vec::new(), Vec::new()), failure_errors, rows))
        })
        .collect::<Result<_, ExperimentError>>()?;
    let rows: Vec<Vec<Row>> = rows_of.iter().map(|&(at, _, _)| parts[at].2.take().unwrap_or_default()).collect();
    let active: Vec<StageApes> = parts.iter().map(|p| p.0.clone()).collect();
    let failure_errors: Vec<f64> = parts.iter().flat_map(|p| p.1.iter().copied()).collect();
    let saturation = if failure_errors.is_empty() { 0.0 } else { SATURATION_WEIGHT * crate::validate::stats::mean(&failure_errors) };
    Ok((loss(&active) + saturation, rows))
}

/// Gives a set fitted without expert-parallel runs whose basis prices the
/// dispatch (trained-physics: βEP beside the all-reduce β4), whose
/// βEP no equation saw, β4's value: T_dispatch is tensor-parallel traffic
/// over the same links as the all-reduce, priced at the same rate (as the
/// published iter29 set has it, βEP = β4). A set fitted on expert-parallel
/// runs keeps its own.
pub fn tie_unseen_expert_dispatch(set: &mut CoefficientSet, saw_expert_parallel: bool) {
    let names = set.latency_model.beta_names();
    let at = |name: &str| names.iter().position(|n| *n == name);
    if !saw_expert_parallel
        && let (Some(dispatch), Some(allreduce)) = (at("expert_dispatch"), at("allreduce"))
        && set.beta.len() == names.len()
    {
        set.beta[dispatch] = set.beta[allreduce];
    }
}

/// A candidate set, in terms of the GPU `hardware` (runs on others are
/// simulated with it carried there).
fn set_of(kind: ModelKind, alpha: &[f64], beta: &[f64], hardware: &str) -> CoefficientSet {
    let provenance = Provenance { hardware: Some(hardware.to_string()), ..Provenance::default() };
    CoefficientSet { latency_model: kind, alpha: alpha.to_vec(), beta: beta.to_vec(), provenance }
}

/// The GPU a fit's coefficients are in terms of: the start set's GPU
/// where BLIS knows that GPU's kernel efficiencies, so that every run is
/// seen through them as the fitted set will see it and the fit starts
/// from coefficients in the same terms (an A100 run fitted in the A100's
/// own terms from the bundled H100 set recovered a hidden set 17 % off;
/// in the H100's, 0.2 %: `docs/fidelity.md`); else the GPU most runs ran
/// on (the first by name on a tie). `blis fit` on experiments and traces
/// and `blis fit --otel` choose it alike, so their sets compare
/// coefficient by coefficient.
#[derive(Debug, Clone, PartialEq)]
pub struct FitFrame {
    /// The GPU the fitted set is in terms of (its `provenance.hardware`).
    pub gpu: String,
    /// Why that GPU, for the progress line.
    why: &'static str,
    /// The GPUs the runs were measured on, by name, without repeats.
    measured: Vec<String>,
}

impl FitFrame {
    /// The frame for runs on `servers` (one per run) fitted from `start`.
    pub fn of<'a>(servers: impl IntoIterator<Item = &'a Server>, start: &CoefficientSet) -> FitFrame {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in servers {
            *counts.entry(s.gpu_name.as_str()).or_default() += 1;
        }
        let measured: Vec<String> = counts.keys().map(|g| g.to_string()).collect();
        let profiled = start.provenance.hardware.as_deref().filter(|g| catalog::find_gpu(g).is_some_and(|b| b.spec().kernels.is_some()));
        let (gpu, why) = match profiled {
            Some(g) => (measured.iter().find(|m| catalog::same_gpu(m, g)).cloned().unwrap_or_else(|| g.to_string()), "the start set's GPU"),
            None => {
                let most = counts.values().copied().max().unwrap_or(0);
                (counts.iter().find(|(_, n)| **n == most).map_or_else(String::new, |(g, _)| g.to_string()), "the GPU most runs ran on")
            }
        };
        FitFrame { gpu, why, measured }
    }

    /// The measured GPUs other than the frame's, whose runs are carried into it.
    fn carried(&self) -> Vec<&str> {
        self.measured.iter().map(String::as_str).filter(|g| !catalog::same_gpu(g, &self.gpu)).collect()
    }

    /// The progress line saying which runs are carried, if any are.
    pub fn note(&self) -> Option<String> {
        let carried = self.carried();
        (!carried.is_empty()).then(|| {
            format!(
                "fitting in {}'s terms ({}); runs on {} seen through their kernel efficiencies",
                self.gpu,
                self.why,
                carried.join(" and ")
            )
        })
    }

    /// The fitted set's `provenance.measured_on`: every GPU measured when
    /// any run was carried, else none (the set's `hardware` says it all).
    pub fn measured_on(&self) -> Vec<String> {
        if self.carried().is_empty() { Vec::new() } else { self.measured.clone() }
    }

    /// A set of `kind` with no coefficients, in the frame's terms: its
    /// [`CoefficientSet::basis`] sees a run's GPU as the fitted set will.
    pub fn empty_set(&self, kind: ModelKind) -> CoefficientSet {
        set_of(kind, &[], &[], &self.gpu)
    }

    /// The kernel efficiencies the physical priors anchor to: those of
    /// the first of `servers` on the frame's GPU (its own spec), else the
    /// bundled GPU's.
    pub fn kernels<'a>(&self, servers: impl IntoIterator<Item = &'a Server>) -> Option<KernelEfficiency> {
        match servers.into_iter().find(|s| s.gpu_name == self.gpu) {
            Some(s) => s.gpu.kernels.clone(),
            None => catalog::find_gpu(&self.gpu).and_then(|g| g.spec().kernels),
        }
    }
}

/// Mean APE per headline metric over the stages of `runs`.
fn errors(runs: &[&dyn Measured], set: &CoefficientSet, seed: u64) -> Result<BTreeMap<String, f64>, ExperimentError> {
    let apes: Vec<Vec<(Metric, f64)>> = runs.par_iter().map(|r| r.headline_apes(set, seed)).collect::<Result<_, _>>()?;
    let mut by_metric: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (metric, ape) in apes.into_iter().flatten() {
        by_metric.entry(metric.name().to_string()).or_default().push(ape);
    }
    Ok(by_metric.into_iter().map(|(name, v)| (name, crate::validate::stats::mean(&v))).collect())
}

/// Fits `opts.kind` on the active runs (minus the held-out model's),
/// reporting progress lines through `progress`.
pub fn fit(runs: &[&dyn Measured], opts: &FitOptions, progress: &mut dyn FnMut(String)) -> Result<FitOutcome, FitError> {
    if opts.kind.fit_method() == FitMethod::Unfitted {
        return Err(FitError::Invalid(format!("{} has no coefficients to fit", opts.kind)));
    }
    let holdout = |r: &dyn Measured| opts.holdout_model.as_deref().is_some_and(|m| is_model(r, m));
    if let Some(m) = &opts.holdout_model
        && !runs.iter().any(|r| is_model(*r, m))
    {
        return Err(FitError::Invalid(format!("--holdout-model {m}: no experiment uses this model")));
    }
    let train: Vec<&dyn Measured> = runs.iter().copied().filter(|r| r.active() && !holdout(*r)).collect();
    // The objective also scores the overloaded runs of the training models (saturation term).
    let scored: Vec<&dyn Measured> = runs.iter().copied().filter(|r| !holdout(*r)).collect();
    if train.is_empty() {
        return Err(FitError::Invalid("no active experiment left to train on".into()));
    }
    // Runs on several GPUs are fitted in the terms of one, the others seen
    // through their kernel efficiencies as the fitted set will see them.
    let frame = FitFrame::of(train.iter().map(|r| r.server()), &opts.start);
    if let Some(note) = frame.note() {
        progress(note);
    }
    let reference = frame.gpu.clone();
    let empty = frame.empty_set(opts.kind);
    let bases: Vec<Box<dyn FeatureBasis>> = train
        .iter()
        .map(|r| {
            let s = r.server();
            let unreproducible = |message| FitError::from(ExperimentError::Unreproducible { path: r.origin().to_path_buf(), message });
            empty
                .basis(&s.model, &s.gpu, s.tp, &s.instance)
                .map_err(unreproducible)?
                .ok_or_else(|| FitError::Invalid(format!("{} has no basis", opts.kind)))
        })
        .collect::<Result<_, _>>()?;
    let (na, nb) = (bases[0].alpha_names().len(), bases[0].beta_names().len());
    // The kernel profiles' per-layer overhead anchors the fit: that of the GPU in whose terms it fits.
    let kernels = frame.kernels(train.iter().map(|r| r.server()));
    let priors = with_overrides(opts.kind, bases[0].as_ref(), kernels.as_ref(), &opts.prior_overrides)?;
    let priors = priors.as_deref();

    // Stage one: simulate with the current coefficients, fit the linear
    // equations, then line-search between the current coefficients and the
    // solution (step 1, ½, ¼) on the simulated objective: near saturation a
    // full step can overshoot into overload, where teacher forcing breaks.
    let same_kind = |set: &CoefficientSet| set.latency_model == opts.kind && set.alpha.len() == na && set.beta.len() == nb;
    let mut current: Vec<f64> =
        if same_kind(&opts.start) { opts.start.alpha.iter().chain(&opts.start.beta).copied().collect() } else { Vec::new() };
    let mut current_loss = f64::INFINITY;
    let mut composition = opts.start.clone();
    let rounds = opts.linear_rounds.max(1);
    // Where each training run is among the scored ones: a scored simulation
    // with coefficients the next round starts from gives that round's equations.
    let rows_of: Vec<(usize, usize, &dyn FeatureBasis)> = train
        .iter()
        .zip(&bases)
        .enumerate()
        .map(|(i, (t, basis))| {
            (scored.iter().position(|s| std::ptr::addr_eq(*s, *t)).expect("every training run is scored"), i, basis.as_ref())
        })
        .collect();
    let mut next_rows: Option<Vec<Vec<Row>>> = None;
    for round in 0..rounds {
        let results = match next_rows.take() {
            Some(rows) => rows,
            None if !current.is_empty() => {
                // The start set's objective and its equations, from one simulation of each run.
                let (loss, rows) = objective_and_rows(&scored, &rows_of, &composition, opts.seed)?;
                current_loss = loss + prior_penalty(&current, priors);
                rows
            }
            None => train
                .par_iter()
                .zip(&bases)
                .enumerate()
                .map(|(i, (r, basis))| stage_rows(*r, i, basis.as_ref(), &composition, opts.seed).map(|(_, rows)| rows))
                .collect::<Result<Vec<_>, ExperimentError>>()?,
        };
        if let Some((run, _)) = train.iter().zip(&results).find(|(_, rows)| rows.is_empty()) {
            return Err(FitError::Invalid(format!(
                "{}: gives the fit nothing to learn from: either the simulated server ran no step for it (every request refused: are its prompts longer than max_model_len?), or every simulated request is more than {COMPOSITION_MISMATCH}× off the measured one (start from coefficients closer to this run's with --start)",
                run.origin().display()
            )));
        }
        let rows: Vec<Row> = results.into_iter().flatten().collect();
        let solution = solve_linear(opts.kind, &rows, na + nb, priors);
        let steps: &[f64] = if current.is_empty() { &[1.0] } else { &[1.0, 0.5, 0.25] };
        // A candidate's simulations give the next round's equations, if there is one.
        let rows_wanted: &[(usize, usize, &dyn FeatureBasis)] = if round + 1 < rounds { &rows_of } else { &[] };
        let mut improved = false;
        for &t in steps {
            let candidate: Vec<f64> =
                if current.is_empty() { solution.clone() } else { current.iter().zip(&solution).map(|(c, s)| c + t * (s - c)).collect() };
            let (loss, candidate_rows) =
                objective_and_rows(&scored, rows_wanted, &set_of(opts.kind, &candidate[..na], &candidate[na..], &reference), opts.seed)?;
            let score = loss + prior_penalty(&candidate, priors);
            progress(format!("stage 1, round {}, step {t}: fitting objective {score:.3}", round + 1));
            if score < current_loss {
                (current, current_loss, improved) = (candidate, score, true);
                next_rows = (round + 1 < rounds).then_some(candidate_rows);
                break;
            }
        }
        if !improved {
            break;
        }
        composition = set_of(opts.kind, &current[..na], &current[na..], &reference);
        progress(format!("stage 1: α = {:?}, β = {:?}", &current[..na], &current[na..]));
    }
    if current.is_empty() {
        return Err(FitError::Invalid("stage one produced no coefficients".into()));
    }
    let (coefficients, linear_loss) = (current, current_loss);

    // Stage two.
    let nonneg = opts.kind.fit_method() == FitMethod::NonNegative;
    let mut free: Vec<usize> = (0..na + nb).filter(|&i| coefficients[i] != 0.0).collect();
    if nonneg {
        for i in [0, 1] {
            if !free.contains(&i) {
                free.push(i);
            }
        }
        free.sort_unstable();
    }
    let mut best = (coefficients.clone(), linear_loss);
    if opts.refine_evals > 0 && !free.is_empty() {
        let start: Vec<f64> = free.iter().map(|&i| coefficients[i]).collect();
        let steps: Vec<f64> = free.iter().map(|&i| if coefficients[i] != 0.0 { 0.15 * coefficients[i].abs() } else { 1000.0 }).collect();
        let mut failure = None;
        let mut evals = 0usize;
        let mut f = |x: &[f64]| -> f64 {
            let mut c = coefficients.clone();
            for (&i, &v) in free.iter().zip(x) {
                c[i] = if nonneg { v.max(0.0) } else { v };
            }
            evals += 1;
            match objective(&scored, &set_of(opts.kind, &c[..na], &c[na..], &reference), opts.seed).map(|v| v + prior_penalty(&c, priors)) {
                Ok(v) => {
                    if v < best.1 {
                        best = (c, v);
                    }
                    v
                }
                Err(e) => {
                    failure.get_or_insert(e);
                    f64::INFINITY
                }
            }
        };
        nelder_mead(&mut f, &start, &steps, opts.refine_evals);
        if let Some(e) = failure {
            return Err(e.into());
        }
        progress(format!("stage 2: {evals} evaluations, fitting objective {:.3}", best.1));
    }
    let (coefficients, final_loss) = best;
    let mut set = set_of(opts.kind, &coefficients[..na], &coefficients[na..], &reference);
    tie_unseen_expert_dispatch(&mut set, train.iter().any(|r| r.server().instance.expert_parallel));
    let train_loss = objective(&train, &set, opts.seed)?;
    let holdout_runs: Vec<&dyn Measured> = runs.iter().copied().filter(|r| r.active() && holdout(*r)).collect();
    set.provenance = Provenance {
        source: "blis fit".into(),
        measured_on: frame.measured_on(),
        hardware: Some(reference),
        fitted_on: train.iter().map(|r| r.name().to_string()).collect(),
        holdout: holdout_runs.iter().map(|r| r.name().to_string()).collect(),
        loss: Some(train_loss),
        train_errors: errors(&train, &set, opts.seed)?,
        holdout_errors: errors(&holdout_runs, &set, opts.seed)?,
        ..Provenance::default()
    };
    Ok(FitOutcome { set, linear_loss, final_loss, train_loss })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(hardware: &str) -> Server {
        let given =
            blis_scenario::knobs::KnobValues { model: Some("Llama-2-7b-hf".into()), hardware: Some(hardware.into()), ..Default::default() };
        blis_scenario::Scenario::from_values(&given, Vec::new()).resolve().unwrap().primary().server.clone()
    }

    /// A data-parallel server's engines step independently: the features a
    /// request integrates are its own engine's, whatever the other's steps.
    #[test]
    fn each_engine_has_its_own_step_timeline() {
        use blis_engine::latency::{BatchEntry, StepBatch};
        let h100 = server("H100");
        let basis = ModelKind::TrainedPhysics.basis(&h100.model, &h100.gpu, 1, &h100.instance).unwrap();
        let mut rec = StepRecorder::new(basis.as_ref());
        let mut step = |instance: u32, start: u64, decodes: usize| {
            let entries = vec![BatchEntry { computed_tokens: 100, new_tokens: 1, prompt_tokens: 100 }; decodes];
            let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
            let ids = vec![blis_engine::request::RequestId(0); decodes];
            rec.on_step(&StepEvent { instance, start: Micros(start), duration: Micros(10_000), batch, requests: &ids });
        };
        // Engine 0 steps a batch of 1 at 0 and 10 ms; engine 1 a batch of 50 in between.
        step(0, 0, 1);
        step(1, 5_000, 50);
        step(0, 10_000, 1);
        let batch_feature = basis.beta_names().iter().position(|n| *n == "per_request_us").unwrap();
        let mut out = vec![0.0; basis.beta_names().len()];
        rec.timeline(Some(0)).unwrap().integral(out.len(), Micros(20_000), &mut out);
        assert_eq!(out[batch_feature], 2.0, "two steps of one request each");
        rec.timeline(Some(1)).unwrap().integral(out.len(), Micros(20_000), &mut out);
        assert_eq!(out[batch_feature], 50.0);
    }

    /// trained-physics's per-layer overhead expects what the training GPU's
    /// kernel profiles measure (± 10 %), its KV traffic the GPU's measured
    /// GEMM bandwidth (± 10 %), its per-collective latency one kernel's fixed
    /// cost (± 10 %); every other prior, unified-5's and
    /// an unprofiled GPU's stay the generic ones, and `--prior` still wins.
    #[test]
    fn the_per_layer_prior_is_the_profiled_gpus_layer_overhead() {
        let h100 = server("H100");
        let kernels = h100.gpu.kernels.as_ref().expect("the H100 was profiled");
        let basis = ModelKind::TrainedPhysics.basis(&h100.model, &h100.gpu, 1, &h100.instance).unwrap();
        let names: Vec<&str> = basis.alpha_names().iter().chain(basis.beta_names()).copied().collect();
        let layer = names.iter().position(|n| *n == "per_layer_us").unwrap();
        let generic = priors(ModelKind::TrainedPhysics, basis.as_ref(), None).unwrap();
        let profiled = priors(ModelKind::TrainedPhysics, basis.as_ref(), Some(kernels)).unwrap();
        assert_eq!(generic[layer], (0.0, 100.0));
        assert_eq!(profiled[layer], (kernels.layer_overhead_us, 0.1 * kernels.layer_overhead_us));
        assert!((40.0..60.0).contains(&kernels.layer_overhead_us), "{kernels:?}");
        let kv: Vec<usize> = ["prefill_kv", "decode_kv"].iter().map(|k| names.iter().position(|n| n == k).unwrap()).collect();
        for &i in &kv {
            assert_eq!(generic[i], (1.0, 1.0));
            let mean = 1.0 / kernels.gemm_memory;
            assert_eq!(profiled[i], (mean, 0.1 * mean), "KV streamed as a GEMM streams weights");
        }
        for (i, (g, p)) in generic.iter().zip(&profiled).enumerate() {
            assert!(i == layer || kv.contains(&i) || g == p, "{}: {g:?} vs {p:?}", names[i]);
        }
        let call = names.iter().position(|n| *n == "allreduce_call_us").unwrap();
        assert_eq!(generic[call], (COLLECTIVE_CALL_PRIOR_US, 0.1 * COLLECTIVE_CALL_PRIOR_US), "one kernel's fixed cost, on any GPU");
        let u5 = ModelKind::Unified5.basis(&h100.model, &h100.gpu, 1, &h100.instance).unwrap();
        assert_eq!(priors(ModelKind::Unified5, u5.as_ref(), Some(kernels)), priors(ModelKind::Unified5, u5.as_ref(), None));
        let o = PriorOverride { name: "per_layer_us".into(), mean: 30.0, scale: 1.0 };
        assert_eq!(
            with_overrides(ModelKind::TrainedPhysics, basis.as_ref(), Some(kernels), std::slice::from_ref(&o)).unwrap().unwrap()[layer],
            (30.0, 1.0)
        );
        let twice = PriorOverride { mean: 31.0, ..o.clone() };
        let Err(FitError::Invalid(e)) = with_overrides(ModelKind::TrainedPhysics, basis.as_ref(), Some(kernels), &[o, twice]) else {
            panic!("a name given twice")
        };
        assert!(e.contains("--prior per_layer_us: given twice (30:1 and 31:1)"), "{e}");
    }

    /// Fuzzing: `weights=1e308:1e-308` made the prior penalty infinite and
    /// still wrote a set. Means are non-negative and scales positive, both
    /// within a step's range.
    #[test]
    fn priors_out_of_physical_range_are_refused() {
        assert_eq!("weights=1.27:0.03".parse(), Ok(PriorOverride { name: "weights".into(), mean: 1.27, scale: 0.03 }));
        assert!("per_step_us=0:100".parse::<PriorOverride>().is_ok(), "a zero mean is the overheads' default");
        for bad in [
            "weights=1e308:1e-308",
            "weights=1:1e-308",
            "weights=-1:1",
            "weights=1:0",
            "weights=1:-1",
            "weights=inf:1",
            "weights=1:NaN",
            "weights=4e9:1",
            "=1:1",
            "weights",
        ] {
            let e = bad.parse::<PriorOverride>().unwrap_err();
            assert!(e.contains("expected NAME=MEAN:SCALE with MEAN in [0, 3.6e9] and SCALE in [1e-6, 3.6e9]"), "{bad}: {e}");
        }
    }
}
