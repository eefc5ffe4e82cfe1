//! The `autoscale:` and `node_pools:` sections of a policy bundle, as
//! written: every field optional (flags and defaults fill the rest when the
//! scenario is resolved), unknown keys rejected with their path.
//!
//! ```yaml
//! autoscale:
//!   type: target-tracking
//!   params: {metric: kv-utilization, target: 0.6}
//!   interval: 30s
//!   min_replicas: 1
//!   max_replicas: 16
//!   scale_down_window: 4m
//!   drain: redirect
//!   warmup: {duration: 10s, slowdown: 2.3}
//! node_pools:
//!   - {name: h100, hardware: H100, gpus_per_node: 8, max_nodes: 2, cost_per_gpu_hour: 4.0, provisioning_delay: "uniform:2m,4m"}
//!   - {name: a100, hardware: A100-80GB, gpus_per_node: 8, max_nodes: 2, cost_per_gpu_hour: 2.0}
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AutoscaleSpec, Delay, DrainPolicy, Span, Warmup};
use crate::error::ConfigError;
use crate::policy::params;

/// The `autoscale:` section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutoscaleSection {
    /// The policy (`type` and `params`), when given.
    pub policy: Option<AutoscaleSpec>,
    /// Every other field.
    pub settings: AutoscaleSettings,
}

/// The `autoscale:` fields besides the policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AutoscaleSettings {
    pub interval: Option<Span>,
    pub scrape_delay: Option<Span>,
    pub min_replicas: Option<u32>,
    pub max_replicas: Option<u32>,
    pub scale_up_window: Option<Span>,
    pub scale_down_window: Option<Span>,
    pub cooldown: Option<Span>,
    pub oscillation_window: Option<Span>,
    pub drain: Option<DrainPolicy>,
    pub warmup: Option<Warmup>,
}

impl AutoscaleSection {
    /// Reads the section: a bare policy name, or a mapping with `type`,
    /// `params` and the settings.
    pub fn from_value(v: &Value) -> Result<AutoscaleSection, ConfigError> {
        AutoscaleSection::from_value_at(v, "autoscale")
    }

    /// [`AutoscaleSection::from_value`] of a section at `path` (a pool's own:
    /// `pools.decode.autoscale`), which errors name.
    pub fn from_value_at(v: &Value, path: &str) -> Result<AutoscaleSection, ConfigError> {
        match v {
            Value::String(name) => {
                Ok(AutoscaleSection { policy: Some(AutoscaleSpec::parse(name, None, path)?), settings: AutoscaleSettings::default() })
            }
            Value::Object(map) => {
                let policy = match map.get("type") {
                    None => None,
                    Some(Value::String(name)) => Some(AutoscaleSpec::parse(name, map.get("params"), path)?),
                    Some(_) => {
                        return Err(ConfigError::new(format!("{path}.type"), "not a string (the policy name)"));
                    }
                };
                if policy.is_none() && map.contains_key("params") {
                    return Err(ConfigError::new(format!("{path}.params"), "params need a `type`"));
                }
                let rest: serde_json::Map<String, Value> =
                    map.iter().filter(|(k, _)| *k != "type" && *k != "params").map(|(k, v)| (k.clone(), v.clone())).collect();
                let settings = params(Some(&Value::Object(rest)), path)?;
                Ok(AutoscaleSection { policy, settings })
            }
            _ => Err(ConfigError::new(path, "expected a policy name or a mapping with `type`, `params` and settings")),
        }
    }
}

/// Where a pool's replicas run and what they cost, as written: every field
/// optional (the deployment's GPU, flags and defaults fill the rest).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesSection {
    /// GPUs per node; default: one replica's.
    pub gpus_per_node: Option<u32>,
    /// Nodes up at the start; default: as many as the initial replicas need.
    pub initial_nodes: Option<u32>,
    /// Nodes never released below this; default 0.
    pub min_nodes: Option<u32>,
    /// Nodes never requested beyond this; default: enough for max_replicas.
    pub max_nodes: Option<u32>,
    /// Dollars per GPU-hour.
    pub cost_per_gpu_hour: Option<f64>,
    /// Node request → node up.
    pub provisioning_delay: Option<Delay>,
    /// Replica start → weights loaded; default: weight bytes ÷ `load_bandwidth_gb_per_s`.
    pub loading_delay: Option<Delay>,
    /// GB/s a replica loads its weights at (default 2).
    pub load_bandwidth_gb_per_s: Option<f64>,
}

/// One entry of `node_pools:`: a name, the GPU and TP of its replicas, and
/// its nodes' fields beside them (`{name: h100, hardware: H100, max_nodes: 2}`).
#[derive(Clone, Debug, PartialEq)]
pub struct NodePoolSection {
    /// Name (reports, traces); unique.
    pub name: String,
    /// GPU (a bundled name); default: the deployment's.
    pub hardware: Option<String>,
    /// Tensor-parallel degree of its replicas; default: the deployment's.
    pub tp: Option<u32>,
    /// Its nodes.
    pub nodes: NodesSection,
}

/// The fields of a node pool besides its nodes'.
#[derive(Deserialize)]
struct NodePoolHead {
    name: String,
    hardware: Option<String>,
    tp: Option<u32>,
}

/// Reads `node_pools:`, a list of pools with unique names.
pub fn node_pools_from_value(v: &Value) -> Result<Vec<NodePoolSection>, ConfigError> {
    let entries: Vec<serde_json::Map<String, Value>> = params(Some(v), "node_pools")?;
    if entries.is_empty() {
        return Err(ConfigError::new("node_pools", "an empty list; leave the section out for one pool of the deployment's GPU"));
    }
    let mut pools: Vec<NodePoolSection> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let at = format!("node_pools[{i}]");
        let (head, rest): (serde_json::Map<String, Value>, serde_json::Map<String, Value>) =
            entry.into_iter().partition(|(k, _)| ["name", "hardware", "tp"].contains(&k.as_str()));
        let head: NodePoolHead = params(Some(&Value::Object(head)), &at)?;
        let nodes: NodesSection = params(Some(&Value::Object(rest)), &at)?;
        if pools.iter().any(|q| q.name == head.name) {
            return Err(ConfigError::new(format!("{at}.name"), format!("`{}` names two pools", head.name)));
        }
        pools.push(NodePoolSection { name: head.name, hardware: head.hardware, tp: head.tp, nodes });
    }
    Ok(pools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sections_read_names_settings_and_reject_unknown_keys() {
        let s = AutoscaleSection::from_value(&json!("oscillator")).unwrap();
        assert_eq!(s.policy.unwrap().name(), "oscillator");
        let s = AutoscaleSection::from_value(
            &json!({"type": "threshold", "params": {"scale_up": 0.9}, "interval": "15s", "drain": "redirect", "warmup": {"duration": 10}}),
        )
        .unwrap();
        assert_eq!(s.settings.interval, Some(Span(blis_engine::time::Micros::from_secs(15))));
        assert_eq!(s.settings.warmup.unwrap().slowdown, 2.0);
        for (doc, path) in [
            (json!({"type": "threshold", "intervall": "15s"}), "autoscale.intervall"),
            (json!({"type": "hpa"}), "autoscale.type"),
            (json!({"type": "threshold", "params": {"up": 1}}), "autoscale.params.up"),
            (json!({"drain": "later"}), "autoscale.drain"),
            (json!({"interval": "-5s"}), "autoscale.interval"),
        ] {
            let e = AutoscaleSection::from_value(&doc).unwrap_err();
            assert_eq!(e.path, path, "{doc}: {e}");
        }
        let e = node_pools_from_value(&json!([{"name": "a", "max_nodes": 2}, {"name": "a", "max_nodes": 1}])).unwrap_err();
        assert_eq!(e.path, "node_pools[1].name");
        let e = node_pools_from_value(&json!([{"name": "a", "gpus": 8}])).unwrap_err();
        assert!(e.path.starts_with("node_pools"), "{e}");
        let p = node_pools_from_value(&json!([{"name": "a", "provisioning_delay": "uniform:1m,2m", "loading_delay": 30}])).unwrap();
        assert_eq!(p[0].nodes.loading_delay, Some(Delay::Fixed(blis_engine::time::Micros::from_secs(30))));
        let e = node_pools_from_value(&json!([{"hardware": "H100"}])).unwrap_err();
        assert!(e.path.starts_with("node_pools[0]") && e.message.contains("name"), "{e}");
    }
}
