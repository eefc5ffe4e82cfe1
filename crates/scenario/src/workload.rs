//! The workload of a scenario: its knobs become a [`WorkloadInput`] and
//! [`OpenOptions`] for [`blis_workload::open`], and what the opened
//! workload says about itself goes into the configuration report.

use blis_workload::error::WorkloadError;
use blis_workload::labels::{LabelMix, Mix};
use blis_workload::spec::Overrides;
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};
use blis_workload::{OpenOptions, Opened, OpenedWorkload, WorkloadInput};

use crate::error::{ScenarioError, invalid};
use crate::knobs::{ConfigReport, Knobs, Source, report_entry};

/// Knobs of the synthetic workload only; giving one with another workload is an error.
const SYNTHETIC_ONLY: [&str; 11] = [
    "arrival",
    "prompt-tokens",
    "prompt-tokens-stdev",
    "prompt-tokens-min",
    "prompt-tokens-max",
    "output-tokens",
    "output-tokens-stdev",
    "output-tokens-min",
    "output-tokens-max",
    "prefix-tokens",
    "prefix-groups",
];

/// A length distribution from its four knobs.
pub fn length(mean: Option<f64>, stdev: Option<f64>, min: Option<u32>, max: Option<u32>) -> LengthSpec {
    LengthSpec { mean: mean.unwrap_or(1.0), stdev: stdev.unwrap_or(0.0), min: min.unwrap_or(1), max: max.unwrap_or(u32::MAX) }
}

/// The synthetic workload the knobs describe, checked.
pub fn synthetic_spec(k: &Knobs) -> Result<SyntheticSpec, ScenarioError> {
    let arrival = match k.arrival.value.as_deref().unwrap_or("poisson") {
        "poisson" => ArrivalProcess::Poisson,
        "constant" => ArrivalProcess::Constant,
        other => return Err(invalid!("--arrival {other}: unknown; allowed: poisson, constant")),
    };
    if let (Some(groups), 0) = (k.prefix_groups.explicit(), k.prefix_tokens.value.unwrap_or(0)) {
        return Err(invalid!(
            "--prefix-groups {groups} needs --prefix-tokens N: the groups differ by the shared prefix they put before each prompt"
        ));
    }
    let spec = SyntheticSpec {
        rate_per_s: k.rate.value.unwrap_or(f64::NAN),
        arrival,
        num_requests: k.num_requests.value.unwrap_or(0),
        prompt: length(k.prompt_tokens.value, k.prompt_tokens_stdev.value, k.prompt_tokens_min.value, k.prompt_tokens_max.value),
        output: length(k.output_tokens.value, k.output_tokens_stdev.value, k.output_tokens_min.value, k.output_tokens_max.value),
        prefix_tokens: k.prefix_tokens.value.unwrap_or(0),
        prefix_groups: k.prefix_groups.value.unwrap_or(1),
        seed: k.seed.value.unwrap_or(0),
    };
    spec.validate().map_err(|e| invalid!("{e}"))?;
    Ok(spec)
}

/// `--max-concurrency`, when given: at least 1.
pub fn max_concurrency(k: &Knobs) -> Result<Option<u32>, ScenarioError> {
    match k.max_concurrency.value {
        Some(0) => Err(invalid!("--max-concurrency 0: must be at least 1")),
        limit => Ok(limit),
    }
}

/// `--tenant-mix` and `--slo-class-mix`.
pub fn label_mix(k: &Knobs) -> Result<LabelMix, ScenarioError> {
    Ok(LabelMix {
        tenants: k.tenant_mix.value.as_deref().map(|t| Mix::parse("tenant-mix", t)).transpose().map_err(|e| invalid!("{e}"))?,
        slo_classes: k.slo_class_mix.value.as_deref().map(|t| Mix::parse("slo-class-mix", t)).transpose().map_err(|e| invalid!("{e}"))?,
    })
}

/// Values given by flag or file that replace a spec's.
pub fn overrides(k: &Knobs) -> Overrides {
    Overrides {
        aggregate_rate: k.rate.explicit(),
        seed: k.seed.explicit(),
        num_requests: k.num_requests.explicit(),
        default_num_requests: k.num_requests.value,
    }
}

/// Refuses synthetic-only knobs (and `extra`) that were given explicitly,
/// and drops them from the report since they do not apply.
fn reject_synthetic_knobs(config: &mut ConfigReport, with: &str, extra: &[&str]) -> Result<(), ScenarioError> {
    for name in SYNTHETIC_ONLY.iter().chain(extra) {
        if config.get(*name).is_some_and(|v| v["source"] != "default") {
            return Err(invalid!("--{name} does not apply with {with}; the workload sets it"));
        }
        config.remove(*name);
    }
    Ok(())
}

/// What the knobs ask to run.
pub fn input(k: &Knobs) -> Result<WorkloadInput, ScenarioError> {
    let chosen: Vec<&str> = [
        k.workload_spec.value.as_ref().map(|_| "--workload-spec"),
        k.workload.value.as_ref().map(|_| "--workload"),
        k.trace.value.as_ref().map(|_| "--trace"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if chosen.len() > 1 {
        return Err(invalid!("{} are alternatives; give one", chosen.join(" and ")));
    }
    Ok(match (&k.trace.value, &k.workload_spec.value, &k.workload.value) {
        (Some(path), _, _) => WorkloadInput::Trace(path.clone()),
        (None, Some(path), _) => WorkloadInput::File(path.clone()),
        (None, None, Some(name)) => {
            if !name.starts_with("preset:") && !name.starts_with("scenario:") {
                return Err(invalid!(
                    "--workload {name}: expected preset:NAME or scenario:NAME (`blis workload list`); for a file use --workload-spec"
                ));
            }
            WorkloadInput::Builtin(name.clone())
        }
        (None, None, None) => WorkloadInput::Synthetic(synthetic_spec(k)?),
    })
}

/// The options the knobs give any workload.
pub fn options(k: &Knobs) -> Result<OpenOptions, ScenarioError> {
    // One rule wherever the count comes from (flag, --config file, a spec's overrides).
    if let Some(n) = k.num_requests.explicit()
        && !(1..=blis_workload::limits::MAX_REQUESTS).contains(&n)
    {
        return Err(invalid!("--num-requests {n}: must be in [1, 1e12]"));
    }
    Ok(OpenOptions {
        overrides: overrides(k),
        seed: k.seed.value.unwrap_or(0),
        max_concurrency: max_concurrency(k)?,
        label_mix: label_mix(k)?,
    })
}

/// Opens the workload the knobs describe and records in `config` what it
/// set (rate, seed and request count of a spec, stages of an
/// inference-perf run, the trace's request count); knobs the workload sets
/// itself are refused when given.
pub fn open(k: &Knobs, config: &mut ConfigReport) -> Result<OpenedWorkload, ScenarioError> {
    let options = options(k)?;
    let input = input(k)?;
    // Knobs that cannot apply are refused before any file is read, where the input says which.
    match &input {
        WorkloadInput::Trace(_) => reject_synthetic_knobs(config, "--trace", &["rate"])?,
        WorkloadInput::Builtin(_) => reject_synthetic_knobs(config, "--workload", &[])?,
        _ => {}
    }
    let opened = blis_workload::open(&input, &options).map_err(|e| match (e, &input) {
        (e @ (WorkloadError::UnknownTraceFormat { .. } | WorkloadError::EmptyTrace { .. }), _) => invalid!("--trace {e}"),
        (e @ WorkloadError::InferencePerf { .. }, _) => invalid!("--workload-spec {e}"),
        (e, _) => invalid!("{e}"),
    })?;
    match &opened.kind {
        Opened::Synthetic => {}
        Opened::Trace => {
            let source = if options.overrides.num_requests.is_some() { k.num_requests.source } else { Source::Derived };
            report_entry(config, "num-requests", &opened.expected_requests, source);
        }
        Opened::InferencePerf { stages } => {
            reject_synthetic_knobs(config, "an inference-perf --workload-spec", &["rate", "num-requests"])?;
            report_entry(config, "num-requests", &opened.expected_requests, Source::Derived);
            report_entry(config, "inference-perf-stages", stages, Source::Derived);
        }
        Opened::Spec { bounds_requests } => {
            if k.workload_spec.value.is_some() {
                reject_synthetic_knobs(config, "--workload-spec", &[])?;
            }
            let derived = |given: bool, source: Source| if given { source } else { Source::Derived };
            if let Some(rate) = opened.aggregate_rate {
                report_entry(config, "rate", &rate, derived(options.overrides.aggregate_rate.is_some(), k.rate.source));
            }
            report_entry(config, "seed", &opened.seed, derived(options.overrides.seed.is_some(), k.seed.source));
            match opened.num_requests {
                Some(n) => {
                    let source = match (options.overrides.num_requests, bounds_requests) {
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
            if let Some(h) = opened.horizon {
                report_entry(config, "workload-horizon-s", &h.as_secs_f64(), Source::Derived);
            }
            if let Some(plan) = &opened.plan {
                report_entry(config, "workload-clients", &plan.labels.clients, Source::Derived);
            }
        }
    }
    Ok(opened)
}
