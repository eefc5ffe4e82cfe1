//! The `pools:` section of a policy file: the fleet as written, every field
//! optional (flags, the deployment and defaults fill the rest when the
//! scenario is resolved), unknown keys rejected with their path. Two shapes:
//!
//! ```yaml
//! # A disaggregated deployment: a prefill and a decode pool, and how requests go between them.
//! pools:
//!   prefill: {instances: 2, tp: 2, routing_scorers: {queue-depth: 1}}
//!   decode:
//!     instances: 6
//!     autoscale: {type: sla-planner, params: {itl_ms: 40}, max_replicas: 12}   # each pool its own
//!     nodes: {gpus_per_node: 8, max_nodes: 2, cost_per_gpu_hour: 4.0}
//!   decider: always
//!   transfer_bandwidth_gb_s: 50
//!
//! # Serving pools: two GPU types serving one model, each fixed or autoscaled.
//! pools:
//!   - {name: h100, hardware: H100, instances: 4}
//!   - {name: a100, hardware: A100-80GB, instances: 2, autoscale: {type: target-tracking, max_replicas: 6}}
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::autoscale::Span;
use crate::autoscale::section::{AutoscaleSection, NodesSection};
use crate::error::ConfigError;
use crate::policy::params;

/// One pool as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolSection {
    /// Instances (with autoscaling: at the start).
    pub instances: Option<u32>,
    /// GPU.
    pub hardware: Option<String>,
    /// Tensor-parallel degree.
    pub tp: Option<u32>,
    /// `--max-num-seqs`.
    pub max_num_seqs: Option<u32>,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u32>,
    /// Routing scorers and weights (prefill pool only: the decode pool's
    /// routing is the `routing:` section).
    pub routing_scorers: Option<BTreeMap<String, f64>>,
    /// The pool's own autoscaling, over the file's `autoscale:` section.
    pub autoscale: Option<AutoscaleSection>,
    /// Where its replicas run and what they cost (with autoscaling).
    pub nodes: Option<NodesSection>,
}

/// The fields of a pool besides `autoscale`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFields {
    instances: Option<u32>,
    hardware: Option<String>,
    tp: Option<u32>,
    max_num_seqs: Option<u32>,
    max_num_batched_tokens: Option<u32>,
    routing_scorers: Option<BTreeMap<String, f64>>,
    nodes: Option<NodesSection>,
}

impl PoolSection {
    /// Reads one pool at `path`.
    fn from_value(v: &Value, path: &str) -> Result<PoolSection, ConfigError> {
        let Value::Object(map) = v else {
            return Err(ConfigError::new(path, "expected a mapping of the pool's fields (instances, hardware, tp, ...)"));
        };
        let mut rest = map.clone();
        let autoscale = rest.remove("autoscale").map(|a| AutoscaleSection::from_value_at(&a, &format!("{path}.autoscale"))).transpose()?;
        let f: PoolFields = params(Some(&Value::Object(rest)), path)?;
        Ok(PoolSection {
            instances: f.instances,
            hardware: f.hardware,
            tp: f.tp,
            max_num_seqs: f.max_num_seqs,
            max_num_batched_tokens: f.max_num_batched_tokens,
            routing_scorers: f.routing_scorers,
            autoscale,
            nodes: f.nodes,
        })
    }
}

/// A disaggregated deployment as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DisaggregatedSection {
    /// The prefill pool.
    pub prefill: PoolSection,
    /// The decode pool.
    pub decode: PoolSection,
    /// `always`, `never` or `prefix-threshold`.
    pub decider: Option<String>,
    /// The prefix threshold, tokens.
    pub prefix_threshold_tokens: Option<u32>,
    /// Prefill → decode bandwidth per GPU, GB/s.
    pub transfer_bandwidth_gb_s: Option<f64>,
    /// Fixed cost of one transfer.
    pub transfer_latency: Option<Span>,
    /// `keep` or `drop`: what a prefill instance does with a prompt's
    /// blocks once they were pulled.
    pub prefill_cache: Option<String>,
}

/// The fields of a disaggregated deployment besides its pools.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DisaggregatedFields {
    decider: Option<String>,
    prefix_threshold_tokens: Option<u32>,
    transfer_bandwidth_gb_s: Option<f64>,
    transfer_latency: Option<Span>,
    prefill_cache: Option<String>,
}

/// One serving pool as written: a name and a pool.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingPoolSection {
    /// Name (reports, traces); unique.
    pub name: String,
    /// The pool.
    pub pool: PoolSection,
}

/// The `pools:` section.
#[derive(Clone, Debug, PartialEq)]
pub enum PoolsSection {
    /// A mapping with `prefill` and `decode`: a disaggregated deployment.
    Disaggregated(Box<DisaggregatedSection>),
    /// A list of named serving pools.
    Serving(Vec<ServingPoolSection>),
}

impl PoolsSection {
    /// Reads the section.
    pub fn from_value(v: &Value) -> Result<PoolsSection, ConfigError> {
        match v {
            Value::Object(map) => disaggregated(map).map(|d| PoolsSection::Disaggregated(Box::new(d))),
            Value::Array(entries) => serving(entries).map(PoolsSection::Serving),
            _ => Err(ConfigError::new(
                "pools",
                "expected a mapping with `prefill` and `decode` (a disaggregated deployment) or a list of named serving pools",
            )),
        }
    }
}

fn disaggregated(map: &Map<String, Value>) -> Result<DisaggregatedSection, ConfigError> {
    let pool = |role: &str| map.get(role).map(|v| PoolSection::from_value(v, &format!("pools.{role}"))).transpose();
    let (prefill, decode) = (pool("prefill")?.unwrap_or_default(), pool("decode")?.unwrap_or_default());
    if decode.routing_scorers.is_some() {
        return Err(ConfigError::new("pools.decode.routing_scorers", "the decode pool is routed by the routing section"));
    }
    let rest: Map<String, Value> =
        map.iter().filter(|(k, _)| *k != "prefill" && *k != "decode").map(|(k, v)| (k.clone(), v.clone())).collect();
    let f: DisaggregatedFields = params(Some(&Value::Object(rest)), "pools")?;
    Ok(DisaggregatedSection {
        prefill,
        decode,
        decider: f.decider,
        prefix_threshold_tokens: f.prefix_threshold_tokens,
        transfer_bandwidth_gb_s: f.transfer_bandwidth_gb_s,
        transfer_latency: f.transfer_latency,
        prefill_cache: f.prefill_cache,
    })
}

fn serving(entries: &[Value]) -> Result<Vec<ServingPoolSection>, ConfigError> {
    if entries.is_empty() {
        return Err(ConfigError::new("pools", "an empty list; leave the section out for one pool of the deployment's GPU"));
    }
    let mut pools: Vec<ServingPoolSection> = Vec::with_capacity(entries.len());
    for (i, v) in entries.iter().enumerate() {
        let at = format!("pools[{i}]");
        let Some(Value::String(name)) = v.get("name") else {
            return Err(ConfigError::new(format!("{at}.name"), "missing or not a string (each serving pool is named)"));
        };
        let mut rest = v.as_object().cloned().unwrap_or_default();
        rest.remove("name");
        let pool = PoolSection::from_value(&Value::Object(rest), &at)?;
        if pool.routing_scorers.is_some() {
            return Err(ConfigError::new(format!("{at}.routing_scorers"), "serving pools are routed together by the routing section"));
        }
        if pools.iter().any(|p| p.name == *name) {
            return Err(ConfigError::new(format!("{at}.name"), format!("`{name}` names two pools")));
        }
        pools.push(ServingPoolSection { name: name.clone(), pool });
    }
    Ok(pools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_shapes_read_and_unknown_keys_name_their_path() {
        let PoolsSection::Disaggregated(d) = PoolsSection::from_value(&json!({
            "prefill": {"instances": 2, "tp": 2},
            "decode": {"instances": 6, "autoscale": {"type": "fixed", "max_replicas": 8}, "nodes": {"gpus_per_node": 8, "max_nodes": 1}},
            "decider": "always",
        }))
        .unwrap() else {
            panic!("a mapping is a disaggregated deployment")
        };
        assert_eq!((d.prefill.instances, d.prefill.tp, d.decode.instances), (Some(2), Some(2), Some(6)));
        assert_eq!(d.decode.autoscale.unwrap().settings.max_replicas, Some(8));
        assert_eq!(d.decode.nodes.unwrap().gpus_per_node, Some(8));
        let PoolsSection::Serving(s) =
            PoolsSection::from_value(&json!([{"name": "h100", "instances": 4}, {"name": "a100", "hardware": "A100-80GB"}])).unwrap()
        else {
            panic!("a list is serving pools")
        };
        assert_eq!((s[0].name.as_str(), s[0].pool.instances, s[1].pool.hardware.as_deref()), ("h100", Some(4), Some("A100-80GB")));
        for (doc, path) in [
            (json!({"prefill": {"instance": 1}}), "pools.prefill.instance"),
            (json!({"decode": {"routing_scorers": {"queue-depth": 1}}}), "pools.decode.routing_scorers"),
            (json!({"decode": {"autoscale": {"type": "hpa"}}}), "pools.decode.autoscale.type"),
            (json!({"decode": {"nodes": {"gpus": 8}}}), "pools.decode.nodes.gpus"),
            (json!({"decidr": "always"}), "pools.decidr"),
            (json!([{"instances": 1}]), "pools[0].name"),
            (json!([{"name": "a"}, {"name": "a"}]), "pools[1].name"),
            (json!([{"name": "a", "routing_scorers": {"queue-depth": 1}}]), "pools[0].routing_scorers"),
            (json!(3), "pools"),
        ] {
            let e = PoolsSection::from_value(&doc).unwrap_err();
            assert!(e.path.starts_with(path), "{doc}: {e}");
        }
    }
}
