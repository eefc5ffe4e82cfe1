//! Help texts that list what a registry holds, so `--help` names every
//! bundled GPU, latency model, policy and workload there is, and cannot
//! drift from them.

use blis_cluster::fitness::FitnessMetric;
use blis_cluster::policy::routing::Scorer;
use blis_cluster::policy::{AdmissionSpec, PrioritySpec, RoutingSpec, SchedulerSpec};
use blis_physics::latency::ModelKind;
use blis_workload::builtin::BUILTINS;

fn one_of(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names.into_iter().map(|n| n.as_ref().to_string()).collect::<Vec<_>>().join(", ")
}

/// `--hardware`.
pub fn hardware() -> String {
    format!("GPU type: {} (or as nvidia-smi names them). [default: H100]", blis_physics::catalog::gpu_names())
}

/// `--latency-model`.
pub fn latency_model() -> String {
    let default = blis_physics::coefficients::CoefficientSet::default_set().latency_model;
    format!(
        "Step-time model: {}. [default: {default}, the model of the bundled default coefficient set]",
        one_of(ModelKind::ALL.map(ModelKind::name))
    )
}

/// `--workload`.
pub fn builtin_workloads() -> String {
    let of = |kind: &str| BUILTINS.iter().filter(|b| b.kind == kind).map(|b| b.name).collect::<Vec<_>>().join("|");
    format!("Run a built-in workload: preset:{} or scenario:{} (`blis workload list`).", of("preset"), of("scenario"))
}

/// `--admission-policy`.
pub fn admission() -> String {
    format!("Admission: {}. [default: always-admit]", one_of(AdmissionSpec::NAMES))
}

/// `--priority-policy`.
pub fn priority() -> String {
    format!("Priority: {}. [default: constant]", one_of(PrioritySpec::NAMES))
}

/// `--routing-policy`.
pub fn routing() -> String {
    format!("Routing: {}. [default: round-robin]", one_of(RoutingSpec::NAMES))
}

/// `--routing-scorers`.
pub fn scorers() -> String {
    format!(
        "Scorers of weighted routing, e.g. `prefix-affinity:4,queue-depth:3` (implies --routing-policy weighted); scorers: {}.",
        one_of(Scorer::ALL.map(|(name, _)| name))
    )
}

/// `--scheduler`.
pub fn scheduler() -> String {
    format!("Instance scheduler: {}. [default: fcfs]", one_of(SchedulerSpec::NAMES))
}

/// `--fitness-weights`.
pub fn fitness() -> String {
    format!(
        "Fitness weights, e.g. `throughput:0.5,ttft_p99:0.3,goodput:0.2`; metrics: {}.",
        one_of(FitnessMetric::ALL.map(|(name, _)| name))
    )
}

/// `--autoscale-policy`.
pub fn autoscale() -> String {
    format!(
        "Autoscaling policy: none, {}; --num-instances is then the initial replica count. [default: none, or the --policy-config autoscale section]",
        one_of(blis_cluster::autoscale::AutoscaleSpec::NAMES)
    )
}
