//! The workload of a scenario: its knobs become a [`WorkloadInput`] and
//! [`OpenOptions`] for [`blis_workload::open`], and what the opened
//! workload says about itself goes into the configuration report.

use blis_workload::error::WorkloadError;
use blis_workload::labels::{LabelMix, Mix};
use blis_workload::spec::Overrides;
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};
use blis_workload::{OpenOptions, Opened, OpenedWorkload, WorkloadInput};

use crate::error::{ScenarioError, invalid};
use crate::knobs::{ConfigReport, KnobId, Knobs, Source, report_entry};

/// Knobs of the synthetic workload only; giving one with another workload is an error.
const SYNTHETIC_ONLY: [KnobId; 11] = [
    KnobId::arrival,
    KnobId::prompt_tokens,
    KnobId::prompt_tokens_stdev,
    KnobId::prompt_tokens_min,
    KnobId::prompt_tokens_max,
    KnobId::output_tokens,
    KnobId::output_tokens_stdev,
    KnobId::output_tokens_min,
    KnobId::output_tokens_max,
    KnobId::prefix_tokens,
    KnobId::prefix_groups,
];

/// The prompt length distribution of the synthetic workload.
pub fn prompt_length(k: &Knobs) -> LengthSpec {
    LengthSpec {
        mean: k.prompt_tokens.value,
        stdev: k.prompt_tokens_stdev.value,
        min: k.prompt_tokens_min.value,
        max: k.prompt_tokens_max.value,
    }
}

/// The output length distribution of the synthetic workload.
pub fn output_length(k: &Knobs) -> LengthSpec {
    LengthSpec {
        mean: k.output_tokens.value,
        stdev: k.output_tokens_stdev.value,
        min: k.output_tokens_min.value,
        max: k.output_tokens_max.value,
    }
}

/// The synthetic workload the knobs describe, checked.
pub fn synthetic_spec(k: &Knobs) -> Result<SyntheticSpec, ScenarioError> {
    let arrival = match k.arrival.value.as_str() {
        "poisson" => ArrivalProcess::Poisson,
        "constant" => ArrivalProcess::Constant,
        other => return Err(invalid!(knob: arrival, "{other}: unknown; allowed: poisson, constant")),
    };
    if let (Some(groups), 0) = (k.prefix_groups.given(), k.prefix_tokens.value) {
        return Err(invalid!(
            knob: prefix_groups,
            "{groups} needs --prefix-tokens N: the groups differ by the shared prefix they put before each prompt"
        ));
    }
    let spec = SyntheticSpec {
        rate_per_s: k.rate.value,
        arrival,
        num_requests: k.num_requests.value,
        prompt: prompt_length(k),
        output: output_length(k),
        prefix_tokens: k.prefix_tokens.value,
        prefix_groups: k.prefix_groups.value,
        seed: k.seed.value,
    };
    spec.validate().map_err(|e| match KnobId::from_flag(e.flag) {
        Some(knob) => ScenarioError::knob(knob, format!("{}: {}", e.value, e.allowed)),
        None => invalid!("{e}"),
    })?;
    Ok(spec)
}

/// `--max-concurrency`, when given: at least 1.
pub fn max_concurrency(k: &Knobs) -> Result<Option<u32>, ScenarioError> {
    match k.max_concurrency.value {
        Some(0) => Err(invalid!(knob: max_concurrency, "0: must be at least 1")),
        limit => Ok(limit),
    }
}

/// A `NAME:WEIGHT,...` mix knob, if given.
fn mix(knob: KnobId, text: &Option<String>) -> Result<Option<Mix>, ScenarioError> {
    text.as_deref()
        .map(|t| Mix::parse(knob.flag(), t).map_err(|e| ScenarioError::knob(knob, format!("{:?}: {}", e.text, e.problem))))
        .transpose()
}

/// `--tenant-mix` and `--slo-class-mix`.
pub fn label_mix(k: &Knobs) -> Result<LabelMix, ScenarioError> {
    Ok(LabelMix {
        tenants: mix(KnobId::tenant_mix, &k.tenant_mix.value)?,
        slo_classes: mix(KnobId::slo_class_mix, &k.slo_class_mix.value)?,
    })
}

/// Values given by flag or file that replace a spec's.
pub fn overrides(k: &Knobs) -> Overrides {
    Overrides {
        aggregate_rate: k.rate.given(),
        seed: k.seed.given(),
        num_requests: k.num_requests.given(),
        default_num_requests: Some(k.num_requests.value),
    }
}

/// Refuses synthetic-only knobs (and `extra`) that were given explicitly,
/// and drops them from the report since they do not apply.
fn reject_synthetic_knobs(config: &mut ConfigReport, with: &str, extra: &[KnobId]) -> Result<(), ScenarioError> {
    for &knob in SYNTHETIC_ONLY.iter().chain(extra) {
        if config.get(knob.flag()).is_some_and(|v| v["source"] != "default") {
            return Err(invalid!(knob = knob, "does not apply with {with}; the workload sets it"));
        }
        config.remove(knob.flag());
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
                    knob: workload,
                    "{name}: expected preset:NAME or scenario:NAME (`blis workload list`); for a file use --workload-spec"
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
    if let Some(n) = k.num_requests.given()
        && !(1..=blis_workload::limits::MAX_REQUESTS).contains(&n)
    {
        return Err(invalid!(knob: num_requests, "{n}: must be in [1, 1e12]"));
    }
    Ok(OpenOptions { overrides: overrides(k), seed: k.seed.value, max_concurrency: max_concurrency(k)?, label_mix: label_mix(k)? })
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
        WorkloadInput::Trace(_) => reject_synthetic_knobs(config, "--trace", &[KnobId::rate])?,
        WorkloadInput::Builtin(_) => reject_synthetic_knobs(config, "--workload", &[])?,
        _ => {}
    }
    let opened = blis_workload::open(&input, &options).map_err(|e| match (e, &input) {
        (e @ (WorkloadError::UnknownTraceFormat { .. } | WorkloadError::EmptyTrace { .. }), _) => invalid!(knob: trace, "{e}"),
        (e @ WorkloadError::InferencePerf { .. }, _) => invalid!(knob: workload_spec, "{e}"),
        (e, _) => invalid!("{e}"),
    })?;
    match &opened.kind {
        Opened::Synthetic => {}
        Opened::Trace => {
            let source = if options.overrides.num_requests.is_some() { k.num_requests.source } else { Source::Derived };
            report_entry(config, "num-requests", &opened.expected_requests, source);
        }
        Opened::InferencePerf { stages } => {
            reject_synthetic_knobs(config, "an inference-perf --workload-spec", &[KnobId::rate, KnobId::num_requests])?;
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
