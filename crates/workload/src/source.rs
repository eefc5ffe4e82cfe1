//! The one way into a workload. What to run ([`WorkloadInput`]: synthetic
//! flags, a spec or inference-perf file, a built-in, a trace) and how to
//! run it ([`OpenOptions`]: overrides, a concurrency cap, label mixes)
//! become an [`OpenedWorkload`]: the lazy request stream, the names of its
//! labels, and what was derived about it. `blis run`, `validate`,
//! `observe` and `serve` all read workloads here, so one input gives the
//! same requests whichever command reads it.
//!
//! ```text
//!  WorkloadInput ─► Synthetic ──► Plan (one client) ─┐
//!                   File ──────► spec ─► Plan ───────┤
//!                          └───► inference-perf ─────┤ (staged, or a recorded run replayed)
//!                   Builtin ───► spec ─► Plan ───────┤
//!                   Trace ─────► trace v2 / Mooncake ┤
//!                                                    ▼
//!            stream = labels(within span(concurrency cap(source)))
//! ```

use std::path::{Path, PathBuf};

use blis_engine::request::Labels;
use blis_engine::time::Micros;

use crate::concurrency::ConcurrencyLimited;
use crate::error::WorkloadError;
use crate::inference_perf::{InferencePerfConfig, InferencePerfError, MeasuredLengths, Reproduction, Stage, looks_like_inference_perf};
use crate::labels::LabelMix;
use crate::mooncake::MooncakeReplay;
use crate::network::ClientLatency;
use crate::plan::Plan;
use crate::spec::{self, Overrides};
use crate::synthetic::SyntheticSpec;
use crate::trace_v2::TraceReplay;
use crate::{RequestSource, WithinSpan};

/// What to run.
#[derive(Clone, Debug)]
pub enum WorkloadInput {
    /// The flag-described synthetic workload (validated), as a one-client plan.
    Synthetic(SyntheticSpec),
    /// A YAML file: a BLIS workload spec, or an inference-perf configuration
    /// (a document with top-level `load`/`data` and no `clients`).
    File(PathBuf),
    /// A built-in spec: `preset:NAME` or `scenario:NAME`.
    Builtin(String),
    /// A recorded trace: trace v2 (`.csv`, its header beside it) or Mooncake (`.jsonl`).
    Trace(PathBuf),
    /// An inference-perf run as `blis validate` reproduces it: its
    /// configuration, its measured prompt lengths, its recorded sends.
    InferencePerf(Box<Reproduction>),
}

/// How to run it.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Values that replace a spec's (a trace takes `num_requests` as a cap).
    pub overrides: Overrides,
    /// The run's seed, for inputs without a seed of their own (traces,
    /// inference-perf runs); a spec keeps its own unless `overrides.seed` is set.
    pub seed: u64,
    /// Most requests in flight, as a client with that many connections.
    pub max_concurrency: Option<u32>,
    /// Tenant and SLO-class assignment over the stream.
    pub label_mix: LabelMix,
}

/// What kind of input was opened, and what it says about itself.
#[derive(Clone, Debug, PartialEq)]
pub enum Opened {
    /// The synthetic workload.
    Synthetic,
    /// A spec (file or built-in); `bounds_requests` when it set `num_requests` itself.
    Spec {
        /// Whether the spec file itself set `num_requests`.
        bounds_requests: bool,
    },
    /// An inference-perf configuration, run stage by stage.
    InferencePerf {
        /// Each stage, described (`rate 8/s × 600 s`, ...).
        stages: Vec<String>,
    },
    /// A trace.
    Trace,
}

/// A workload ready to run.
pub struct OpenedWorkload {
    /// The request stream (single use).
    pub stream: Box<dyn RequestSource>,
    /// What kind of input it came from.
    pub kind: Opened,
    /// The plan, for inputs that have one (synthetic, spec, built-in):
    /// what `blis observe` drives and `blis workload` measures.
    pub plan: Option<Plan>,
    /// Names of clients, tenants and SLO classes (every dimension has at least one).
    pub labels: Labels,
    /// Seed of the workload.
    pub seed: u64,
    /// Mean total rate, requests per second, when the input has one.
    pub aggregate_rate: Option<f64>,
    /// Requests the input sends (first rounds), when it bounds them by count.
    pub num_requests: Option<u64>,
    /// When arrivals stop, when the input bounds them by time.
    pub horizon: Option<Micros>,
    /// Requests expected from the arrival processes (for progress).
    pub expected_requests: u64,
    /// Load stages (inference-perf); 1 otherwise.
    pub stages: u32,
    /// Client-perspective latency collector, when a client has a network model.
    pub client_latency: Option<ClientLatency>,
    /// The timeout of the input's own client (inference-perf's `request_timeout`).
    pub client_timeout: Option<Micros>,
    /// Things worth telling the user, one line each.
    pub warnings: Vec<String>,
}

/// Opens `input` as `options` say. Errors name the file and the value.
pub fn open(input: &WorkloadInput, options: &OpenOptions) -> Result<OpenedWorkload, WorkloadError> {
    let mut w = match input {
        WorkloadInput::Synthetic(spec) => from_plan(Plan::synthetic(spec), Opened::Synthetic),
        WorkloadInput::File(path) => {
            let text = blis_data::textfile::read(path).map_err(|e| WorkloadError::read(path, e))?;
            if looks_like_inference_perf(&text) {
                let cfg = InferencePerfConfig::from_yaml_str(&text)
                    .map_err(|e| WorkloadError::InferencePerf { path: path.clone(), source: e })?;
                let notes: Vec<String> = cfg.notes.iter().map(|n| format!("{}: {n}", path.display())).collect();
                let mut opened =
                    inference_perf(Reproduction { config: cfg, measured: MeasuredLengths::default(), recorded: None }, options.seed)
                        .map_err(|e| WorkloadError::InferencePerf { path: path.clone(), source: e })?;
                opened.warnings.extend(notes);
                opened
            } else {
                from_spec(spec::parse_file(path, &text)?, &options.overrides)?
            }
        }
        WorkloadInput::Builtin(name) => from_spec(spec::load(name)?, &options.overrides)?,
        WorkloadInput::Trace(path) => trace(path, options)?,
        WorkloadInput::InferencePerf(run) => inference_perf((**run).clone(), options.seed).map_err(WorkloadError::Reproduction)?,
    };
    if let Some(limit) = options.max_concurrency {
        w.stream = Box::new(ConcurrencyLimited::new(w.stream, limit));
    }
    w.stream = Box::new(WithinSpan::new(w.stream));
    options.label_mix.name_into(&mut w.labels);
    for names in [&mut w.labels.tenants, &mut w.labels.slo_classes] {
        if names.is_empty() {
            names.push("default".to_string());
        }
    }
    if !options.label_mix.is_empty() {
        w.stream = Box::new(options.label_mix.apply_workload(w.stream, w.seed));
    }
    Ok(w)
}

fn from_spec(mut loaded: spec::LoadedSpec, overrides: &Overrides) -> Result<OpenedWorkload, WorkloadError> {
    let bounds_requests = loaded.spec.num_requests.is_some();
    Ok(from_plan(loaded.plan_with(overrides)?, Opened::Spec { bounds_requests }))
}

fn from_plan(plan: Plan, kind: Opened) -> OpenedWorkload {
    let client_latency = ClientLatency::new(plan.networks(), plan.clients.iter().map(|c| c.streaming).collect());
    OpenedWorkload {
        stream: Box::new(plan.generator()),
        kind,
        labels: plan.labels.clone(),
        seed: plan.seed,
        aggregate_rate: Some(plan.aggregate_rate),
        num_requests: plan.num_requests,
        horizon: plan.horizon,
        expected_requests: plan.expected_requests(),
        stages: 1,
        client_latency,
        client_timeout: None,
        warnings: plan.warnings.clone(),
        plan: Some(plan),
    }
}

/// An inference-perf run as inference-perf issues it: shared-prefix, random
/// or synthetic prompts cycled per stage, stages one after another, its
/// client timeout; or, with recorded sends, exactly those.
fn inference_perf(run: Reproduction, seed: u64) -> Result<OpenedWorkload, InferencePerfError> {
    let cfg = &run.config;
    cfg.check_runnable()?;
    let expected = run.expected_requests(seed);
    let labels = Labels { clients: vec!["inference-perf".into()], tenants: vec!["default".into()], slo_classes: vec!["default".into()] };
    Ok(OpenedWorkload {
        kind: Opened::InferencePerf { stages: cfg.load.stages.iter().map(Stage::describe).collect() },
        plan: None,
        labels,
        seed,
        aggregate_rate: None,
        num_requests: Some(expected),
        horizon: None,
        expected_requests: expected,
        stages: cfg.load.stages.len() as u32,
        client_latency: None,
        client_timeout: Some(cfg.client_timeout()),
        warnings: Vec::new(),
        stream: run.stream(seed)?,
    })
}

fn trace(path: &Path, options: &OpenOptions) -> Result<OpenedWorkload, WorkloadError> {
    let limit = options.overrides.num_requests;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let (stream, info): (Box<dyn RequestSource>, _) = match ext {
        "csv" => {
            let (r, info) = TraceReplay::open(path, limit)?;
            (Box::new(r), info)
        }
        "jsonl" => {
            let (r, info) = MooncakeReplay::open(path, limit)?;
            (Box::new(r), info)
        }
        other => return Err(WorkloadError::UnknownTraceFormat { path: path.to_path_buf(), extension: other.to_string() }),
    };
    if info.requests == 0 {
        return Err(WorkloadError::EmptyTrace { path: path.to_path_buf() });
    }
    Ok(OpenedWorkload {
        stream,
        kind: Opened::Trace,
        plan: None,
        labels: info.labels,
        seed: options.seed,
        aggregate_rate: None,
        num_requests: Some(info.requests),
        horizon: None,
        expected_requests: info.requests,
        stages: 1,
        client_latency: None,
        client_timeout: None,
        warnings: info.warnings,
    })
}
