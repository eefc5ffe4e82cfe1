//! Which workload `blis run` simulates: the synthetic one the flags
//! describe, a spec file (`--workload-spec`), a built-in (`--workload
//! preset:NAME`), or a trace (`--trace`). Every choice ends as a lazy
//! [`RequestSource`] plus the names of its labels.

use std::path::Path;

use blis_engine::request::Labels;
use blis_engine::driver::IterWorkload;
use blis_workload::error::WorkloadError;
use blis_workload::concurrency::ConcurrencyLimited;
use blis_workload::{RequestSource, WithinSpan};
use blis_workload::mooncake::MooncakeReplay;
use blis_workload::network::ClientLatency;
use blis_workload::spec::{self, Overrides};
use blis_workload::inference_perf::{InferencePerfConfig, Stage, StagedWorkload, looks_like_inference_perf};
use blis_workload::trace_v2::TraceReplay;

use crate::error::{BadInput, bad_input};
use crate::knobs::{ConfigReport, Knob, Knobs, Source, report_entry};
use crate::run::synthetic_workload;

/// A resolved workload, ready to run.
pub struct WorkloadSource {
    /// The request stream.
    pub source: Box<dyn RequestSource>,
    /// Names of clients, tenants and SLO classes.
    pub labels: Labels,
    /// Requests expected from the arrival processes (for progress).
    pub expected_requests: u64,
    /// Seed of the workload.
    pub seed: u64,
    /// Load stages (inference-perf stages); 1 for every workload here.
    pub stages: u32,
    /// Client-perspective latency collector, when a client has a network model.
    pub client_latency: Option<ClientLatency>,
    /// The client timeout the workload's own client used (inference-perf's
    /// `request_timeout`, 300 s by default), applied unless `--client-timeout` is given.
    pub client_timeout: Option<blis_engine::time::Micros>,
}

/// Knobs of the synthetic workload only; giving one with another workload is an error.
const SYNTHETIC_ONLY: [&str; 11] = [
    "arrival", "prompt-tokens", "prompt-tokens-stdev", "prompt-tokens-min", "prompt-tokens-max", "output-tokens",
    "output-tokens-stdev", "output-tokens-min", "output-tokens-max", "prefix-tokens", "prefix-groups",
];

fn explicit<T: Clone>(k: &Knob<Option<T>>) -> Option<T> {
    if k.source == Source::Default { None } else { k.value.clone() }
}

/// A rate for people: at most four decimals, no trailing zeros (3.3833, 20).
pub fn rate_text(req_per_s: f64) -> String {
    format!("{}", (req_per_s * 1e4).round() / 1e4)
}

/// Prints warnings on stderr, one line each.
pub fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

/// Overrides from the run's knobs: values given by flag or `--config` replace the spec's.
fn overrides(k: &Knobs) -> Overrides {
    Overrides {
        aggregate_rate: explicit(&k.rate),
        seed: explicit(&k.seed),
        num_requests: explicit(&k.num_requests),
        default_num_requests: k.num_requests.value,
    }
}

/// A spec's validation error, blamed on the flag (or `--config` entry)
/// that overrode the value when one did: `--num-requests 0` is not the
/// spec file's mistake.
pub fn blame_override(e: WorkloadError, o: &Overrides) -> BadInput {
    if let WorkloadError::Spec { key_path, message, .. } = &e {
        let flag = match key_path.as_str() {
            "aggregate_rate" if o.aggregate_rate.is_some() => Some("rate"),
            "num_requests" if o.num_requests.is_some() => Some("num-requests"),
            _ => None,
        };
        if let Some(flag) = flag {
            return bad_input!("--{flag}: {message}");
        }
    }
    bad_input!("{e}")
}

/// Refuses synthetic-only knobs (and `extra`) that were given explicitly,
/// and drops them from the report since they do not apply.
fn reject_synthetic_knobs(config: &mut ConfigReport, with: &str, extra: &[&str]) -> Result<(), BadInput> {
    for name in SYNTHETIC_ONLY.iter().chain(extra) {
        if config.get(*name).is_some_and(|v| v["source"] != "default") {
            return Err(bad_input!("--{name} does not apply with {with}; the workload sets it"));
        }
        config.remove(*name);
    }
    Ok(())
}

/// Resolves the workload of `blis run`, recording effective values in
/// `config`. Its stream ends with an error at a request arriving after
/// [`WithinSpan`]'s limit.
pub fn resolve(k: &Knobs, config: &mut ConfigReport) -> Result<WorkloadSource, BadInput> {
    let limit = max_concurrency(k)?;
    let mut chosen = choose(k, config)?;
    if let Some(limit) = limit {
        chosen.source = Box::new(ConcurrencyLimited::new(chosen.source, limit));
    }
    chosen.source = Box::new(WithinSpan::new(chosen.source));
    Ok(chosen)
}

/// `--max-concurrency`, when given: at least 1.
pub fn max_concurrency(k: &Knobs) -> Result<Option<u32>, BadInput> {
    match k.max_concurrency.value {
        Some(0) => Err(bad_input!("--max-concurrency 0: must be at least 1")),
        limit => Ok(limit),
    }
}

fn choose(k: &Knobs, config: &mut ConfigReport) -> Result<WorkloadSource, BadInput> {
    let chosen: Vec<&str> = [
        k.workload_spec.value.as_ref().map(|_| "--workload-spec"),
        k.workload.value.as_ref().map(|_| "--workload"),
        k.trace.value.as_ref().map(|_| "--trace"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if chosen.len() > 1 {
        return Err(bad_input!("{} are alternatives; give one", chosen.join(" and ")));
    }
    if let Some(path) = &k.trace.value {
        return trace(k, config, path);
    }
    let mut loaded = match (&k.workload_spec.value, &k.workload.value) {
        (Some(path), _) => {
            let text = blis_data::textfile::read(path).map_err(|e| bad_input!("{}", WorkloadError::read(path, e)))?;
            if looks_like_inference_perf(&text) {
                return inference_perf(k, config, path, &text);
            }
            reject_synthetic_knobs(config, "--workload-spec", &[])?;
            spec::parse_file(path, &text)
        }
        (None, Some(name)) => {
            if !name.starts_with("preset:") && !name.starts_with("scenario:") {
                return Err(bad_input!("--workload {name}: expected preset:NAME or scenario:NAME (`blis workload list`); for a file use --workload-spec"));
            }
            reject_synthetic_knobs(config, "--workload", &[])?;
            spec::load(name)
        }
        (None, None) => {
            let spec = synthetic_workload(k)?;
            let labels = Labels { clients: vec!["synthetic".into()], tenants: vec!["default".into()], slo_classes: vec!["default".into()] };
            return Ok(WorkloadSource {
                expected_requests: spec.num_requests,
                seed: spec.seed,
                source: Box::new(IterWorkload::new(spec.generate())),
                labels,
                stages: 1,
                client_latency: None,
                client_timeout: None,
            });
        }
    }
    .map_err(|e| bad_input!("{e}"))?;
    let spec_bounds_requests = loaded.spec.num_requests.is_some();
    let overrides = overrides(k);
    loaded.apply(&overrides);
    let plan = loaded.plan().map_err(|e| blame_override(e, &overrides))?;
    warn(&plan.warnings);
    report_entry(config, "rate", &plan.aggregate_rate, if explicit(&k.rate).is_some() { k.rate.source } else { Source::Derived });
    report_entry(config, "seed", &plan.seed, if explicit(&k.seed).is_some() { k.seed.source } else { Source::Derived });
    match plan.num_requests {
        Some(n) => {
            let source = match (explicit(&k.num_requests), spec_bounds_requests) {
                (Some(_), _) => k.num_requests.source,
                (None, true) => Source::Derived,
                (None, false) => Source::Default,
            };
            report_entry(config, "num-requests", &n, source);
        }
        None => {
            config.remove("num-requests");
        }
    }
    if let Some(h) = plan.horizon {
        report_entry(config, "workload-horizon-s", &h.as_secs_f64(), Source::Derived);
    }
    report_entry(config, "workload-clients", &plan.labels.clients, Source::Derived);
    let client_latency = ClientLatency::new(plan.networks(), plan.clients.iter().map(|c| c.streaming).collect());
    Ok(WorkloadSource {
        expected_requests: plan.expected_requests(),
        seed: plan.seed,
        stages: 1,
        labels: plan.labels.clone(),
        client_latency,
        source: Box::new(plan.generator()),
        client_timeout: None,
    })
}

/// An inference-perf configuration (its `config.yaml` or profile) run as
/// inference-perf issues it: shared-prefix, random or synthetic prompts
/// cycled per stage, stages one after another, its client timeout.
fn inference_perf(k: &Knobs, config: &mut ConfigReport, path: &Path, text: &str) -> Result<WorkloadSource, BadInput> {
    reject_synthetic_knobs(config, "an inference-perf --workload-spec", &["rate", "num-requests"])?;
    let cfg = InferencePerfConfig::from_yaml_str(text).map_err(|e| bad_input!("--workload-spec {}: {e}", path.display()))?;
    let seed = k.seed.value.unwrap_or(0);
    let stages: Vec<u64> = cfg.load.stages.iter().map(Stage::num_requests).collect();
    report_entry(config, "num-requests", &stages.iter().sum::<u64>(), Source::Derived);
    report_entry(config, "inference-perf-stages", &cfg.load.stages.iter().map(Stage::describe).collect::<Vec<_>>(), Source::Derived);
    let labels = Labels { clients: vec!["inference-perf".into()], tenants: vec!["default".into()], slo_classes: vec!["default".into()] };
    Ok(WorkloadSource {
        expected_requests: stages.iter().sum(),
        seed,
        source: Box::new(StagedWorkload::new(&cfg, None, seed)),
        labels,
        stages: cfg.load.stages.len() as u32,
        client_latency: None,
        client_timeout: Some(cfg.client_timeout()),
    })
}

fn trace(k: &Knobs, config: &mut ConfigReport, path: &Path) -> Result<WorkloadSource, BadInput> {
    reject_synthetic_knobs(config, "--trace", &["rate"])?;
    let limit = explicit(&k.num_requests);
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let (source, info): (Box<dyn RequestSource>, _) = match ext {
        "csv" => {
            let (r, info) = TraceReplay::open(path, limit).map_err(|e| bad_input!("{e}"))?;
            (Box::new(r), info)
        }
        "jsonl" => {
            let (r, info) = MooncakeReplay::open(path, limit).map_err(|e| bad_input!("{e}"))?;
            (Box::new(r), info)
        }
        other => return Err(bad_input!("--trace {}: unknown trace format {other:?}; allowed: .csv (trace v2), .jsonl (Mooncake)", path.display())),
    };
    warn(&info.warnings);
    if info.requests == 0 {
        return Err(bad_input!("--trace {}: no requests to replay", path.display()));
    }
    report_entry(config, "num-requests", &info.requests, if limit.is_some() { k.num_requests.source } else { Source::Derived });
    Ok(WorkloadSource {
        source,
        labels: info.labels,
        expected_requests: info.requests,
        seed: k.seed.value.unwrap_or(0),
        stages: 1,
        client_latency: None,
        client_timeout: None,
    })
}
