//! The policy bundle: every policy, its parameters, the SLO targets and the
//! snapshot staleness in one document (the `--policy-config` YAML):
//!
//! ```yaml
//! admission: {type: predictive-slo, params: {exempt: [realtime]}}
//! priority: slo-class                 # a bare name takes every default
//! routing: {type: weighted, params: {scorers: {prefix-affinity: 4, queue-depth: 3}}}
//! scheduler: {type: priority-fcfs, params: {preemption: lowest-priority}}
//! slo_targets:
//!   realtime: {ttft_ms: 200, itl_ms: 50}
//! snapshots: {kv_utilization: periodic:100ms}
//! autoscale: {type: target-tracking, params: {target: 0.6}, max_replicas: 8}
//! node_pools: [{name: h100, gpus_per_node: 8, max_nodes: 1, cost_per_gpu_hour: 4.0}]
//! # or prefill/decode pools (each fixed, or autoscaled with its own section), or serving pools:
//! pools: {prefill: {instances: 1, tp: 2}, decode: {instances: 3}, decider: always}
//! ```
//!
//! (`autoscale` and `node_pools`: see [`crate::autoscale::section`];
//! `pools`: [`crate::pools`].)
//!
//! Every section is optional; unknown keys anywhere are errors naming their
//! path.

use std::collections::BTreeMap;

use serde_json::Value;

use blis_engine::time::Micros;

use super::{AdmissionSpec, NoParams, PrioritySpec, RoutingSpec, SchedulerSpec};
use crate::autoscale::section::{AutoscaleSection, NodePoolSection, node_pools_from_value};
use crate::error::ConfigError;
use crate::pools::PoolsSection;
use crate::slo::SloTargets;
use crate::snapshot::{Observability, Refresh};

/// Every control-plane choice of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyBundle {
    /// Admission policy.
    pub admission: AdmissionSpec,
    /// Priority policy.
    pub priority: PrioritySpec,
    /// Routing policy.
    pub routing: RoutingSpec,
    /// Instance scheduler.
    pub scheduler: SchedulerSpec,
    /// Targets per SLO class name.
    pub slo_targets: BTreeMap<String, SloTargets>,
    /// Snapshot field staleness.
    pub snapshots: Observability,
    /// Autoscaling, as written (`None`: a fixed fleet unless flags ask for it).
    pub autoscale: Option<AutoscaleSection>,
    /// Node pools, as written (empty: one pool of the deployment's GPU).
    pub node_pools: Vec<NodePoolSection>,
    /// `pools:`: prefill and decode pools (a disaggregated deployment), or serving pools.
    pub pools: Option<PoolsSection>,
}

/// Which sections a document set (so flags can tell what they override).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SectionsSet {
    /// `admission` was given.
    pub admission: bool,
    /// `priority` was given.
    pub priority: bool,
    /// `routing` was given.
    pub routing: bool,
    /// `scheduler` was given.
    pub scheduler: bool,
    /// `slo_targets` was given.
    pub slo_targets: bool,
    /// `snapshots` was given.
    pub snapshots: bool,
    /// `autoscale` was given.
    pub autoscale: bool,
    /// `node_pools` was given.
    pub node_pools: bool,
    /// `pools:` is present.
    pub pools: bool,
}

const SECTIONS: [&str; 9] =
    ["admission", "priority", "routing", "scheduler", "slo_targets", "snapshots", "autoscale", "node_pools", "pools"];

/// Splits a policy section into (template name, params): either a bare name
/// or `{type: NAME, params: {...}}`.
fn section<'v>(v: &'v Value, path: &str) -> Result<(&'v str, Option<&'v Value>), ConfigError> {
    match v {
        Value::String(name) => Ok((name, None)),
        Value::Object(map) => {
            if let Some(k) = map.keys().find(|k| *k != "type" && *k != "params") {
                return Err(ConfigError::new(format!("{path}.{k}"), "unknown key; a policy section has `type` and `params`"));
            }
            let name = map
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| ConfigError::new(format!("{path}.type"), "missing or not a string (the template name)"))?;
            Ok((name, map.get("params")))
        }
        _ => Err(ConfigError::new(path, "expected a template name or a mapping with `type` and `params`")),
    }
}

/// How often vLLM's data-parallel coordinator publishes each engine's
/// waiting and running counts to its load balancer (`stats_update_interval_ms`).
pub const VLLM_DP_PUBLISH_INTERVAL: Micros = Micros(100_000);

impl PolicyBundle {
    /// What one vLLM server with `--data-parallel-size` > 1 runs in front of
    /// its engines: `vllm-dp` routing on queue and batch counts read every
    /// [`VLLM_DP_PUBLISH_INTERVAL`]; every other policy the default.
    pub fn vllm_data_parallel() -> PolicyBundle {
        let published = Refresh::Periodic(VLLM_DP_PUBLISH_INTERVAL);
        PolicyBundle {
            routing: RoutingSpec::VllmDp(NoParams {}),
            snapshots: Observability { queue_depth: published, batch_size: published, ..Observability::default() },
            ..PolicyBundle::default()
        }
    }

    /// Reads a bundle document; sections left out keep their defaults.
    pub fn from_value(doc: &Value) -> Result<(PolicyBundle, SectionsSet), ConfigError> {
        let Value::Object(map) = doc else {
            return Err(ConfigError::new("(top level)", format!("expected a mapping with sections {}", SECTIONS.join(", "))));
        };
        if let Some(k) = map.keys().find(|k| !SECTIONS.contains(&k.as_str())) {
            return Err(ConfigError::unknown(k.clone(), "section", k, &SECTIONS));
        }
        let mut b = PolicyBundle::default();
        let mut set = SectionsSet::default();
        if let Some(v) = map.get("admission") {
            let (name, params) = section(v, "admission")?;
            b.admission = AdmissionSpec::parse(name, params, "admission")?;
            set.admission = true;
        }
        if let Some(v) = map.get("priority") {
            let (name, params) = section(v, "priority")?;
            b.priority = PrioritySpec::parse(name, params, "priority")?;
            set.priority = true;
        }
        if let Some(v) = map.get("routing") {
            let (name, params) = section(v, "routing")?;
            b.routing = RoutingSpec::parse(name, params, "routing")?;
            set.routing = true;
        }
        if let Some(v) = map.get("scheduler") {
            let (name, params) = section(v, "scheduler")?;
            b.scheduler = SchedulerSpec::parse(name, params, "scheduler")?;
            set.scheduler = true;
        }
        if let Some(v) = map.get("slo_targets") {
            b.slo_targets = super::params(Some(v), "slo_targets")?;
            set.slo_targets = true;
        }
        if let Some(v) = map.get("snapshots") {
            let Value::Object(fields) = v else {
                return Err(ConfigError::new("snapshots", "expected a mapping of field to refresh mode"));
            };
            for (field, mode) in fields {
                let path = format!("snapshots.{field}");
                let mode = mode
                    .as_str()
                    .ok_or_else(|| ConfigError::new(&path, "expected a refresh mode string (immediate, on-demand, periodic:<N>ms)"))?;
                b.snapshots.set(field, mode, &path)?;
            }
            set.snapshots = true;
        }
        if let Some(v) = map.get("autoscale") {
            b.autoscale = Some(AutoscaleSection::from_value(v)?);
            set.autoscale = true;
        }
        if let Some(v) = map.get("node_pools") {
            b.node_pools = node_pools_from_value(v)?;
            set.node_pools = true;
        }
        if let Some(v) = map.get("pools") {
            b.pools = Some(PoolsSection::from_value(v)?);
            set.pools = true;
        }
        Ok((b, set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_bundle_parses_and_unset_sections_keep_defaults() {
        let doc = json!({
            "admission": {"type": "token-bucket", "params": {"capacity": 10, "refill_per_s": 5}},
            "priority": "slo-class",
            "slo_targets": {"realtime": {"ttft_ms": 200}},
            "snapshots": {"kv_utilization": "periodic:100ms"},
        });
        let (b, set) = PolicyBundle::from_value(&doc).unwrap();
        assert_eq!(b.admission.name(), "token-bucket");
        assert_eq!(b.admission.params_json(), json!({"capacity": 10.0, "refill_per_s": 5.0, "per_tenant": false, "on_limit": "reject"}));
        assert_eq!(b.priority.name(), "slo-class");
        assert_eq!(b.routing, RoutingSpec::default());
        assert_eq!(b.slo_targets["realtime"].ttft_ms, Some(200.0));
        assert!(set.admission && set.priority && !set.routing && set.slo_targets && set.snapshots);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_path() {
        for (doc, path, needle) in [
            (json!({"admision": "always-admit"}), "admision", "allowed: admission, priority"),
            (json!({"admission": {"type": "token-bucket", "parms": {}}}), "admission.parms", "`type` and `params`"),
            (
                json!({"admission": {"type": "token-bucket", "params": {"capacty": 1}}}),
                "admission.params.capacty",
                "unknown field `capacty`",
            ),
            (json!({"admission": {"params": {}}}), "admission.type", "missing"),
            (
                json!({"routing": {"type": "weighted", "params": {"scorers": {"queue-depth": "x"}}}}),
                "routing.params.scorers.queue-depth",
                "invalid type",
            ),
            (json!({"slo_targets": {"realtime": {"ttft": 1}}}), "slo_targets.realtime.ttft", "unknown field `ttft`"),
            (json!({"snapshots": {"kv": "immediate"}}), "snapshots.kv", "unknown snapshot field"),
            (json!({"snapshots": {"kv_utilization": "sometimes"}}), "snapshots.kv_utilization", "periodic:<N>ms"),
            (json!({"scheduler": 3}), "scheduler", "template name"),
            (
                json!({"admission": {"type": "rate-limit", "params": {"on_limit": "queue"}}}),
                "admission.params.on_limit",
                "expected `reject` or `delay`",
            ),
        ] {
            let e = PolicyBundle::from_value(&doc).unwrap_err();
            assert_eq!(e.path, path, "{doc}: {e}");
            assert!(e.message.contains(needle), "{doc}: {e}");
        }
    }
}
