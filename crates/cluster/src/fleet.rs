//! The fleet: a list of pools. Every way a cluster is built (a fixed fleet,
//! prefill/decode pools, an autoscaled deployment on several node pools,
//! their combinations, two GPU types serving one model) is a choice of
//! pools, not a separate code path.
//!
//! ```text
//!  Pool { name, role: Serve | Prefill | Decode, hardware, GPUs per replica,
//!         instance config, latency model, replicas: Fixed(n) | Autoscaled { group, nodes } }
//!
//!  serve pools ──────────► the gateway routes a request to one of their replicas
//!  prefill + decode pools ► it routes to a decode replica, which may have a prefill
//!                           replica compute the prompt first (crate::pd)
//!  a scaling group ───────► one autoscaler sizes the replicas of its pools (one role),
//!                           seating each on the cheapest node pool with room
//! ```
//!
//! A fixed pool's replicas occupy instance slots in pool order from the
//! start; a scaling group's initial replicas follow at the place of its first
//! pool, and later replicas take a slot the group freed, else a new one
//! (`crate::fleet_state`).

use std::sync::Arc;

use blis_engine::latency::LatencyModel;
use blis_engine::scheduler::InstanceConfig;
use serde::Serialize;

use crate::autoscale::{Delay, MAX_GPU_HOUR_COST, PoolConfig, PoolProfile};
use crate::error::ConfigError;
use crate::policy::check;

/// What a pool's replicas do.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Serve whole requests (an aggregated deployment).
    Serve,
    /// Compute the prompts of disaggregated requests.
    Prefill,
    /// Receive those prompts' KV and decode; serve whole the requests the
    /// P/D decider keeps local.
    Decode,
}

impl Role {
    /// Its name in files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }

    /// Whether the gateway's routing policy chooses among these replicas
    /// (the serve and decode pools; the prefill pool has its own routing).
    pub fn routed(self) -> bool {
        self != Role::Prefill
    }
}

/// The nodes an autoscaled pool's replicas run on, and what they cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Nodes {
    /// GPUs per node (at least one replica's).
    pub gpus_per_node: u32,
    /// Nodes up at the start.
    pub initial_nodes: u32,
    /// Nodes never released below this.
    pub min_nodes: u32,
    /// Nodes never requested beyond this.
    pub max_nodes: u32,
    /// Price of one GPU for an hour, dollars, at most [`MAX_GPU_HOUR_COST`]
    /// (`None`: costs are not reported).
    pub cost_per_gpu_hour: Option<f64>,
    /// From requesting a node to its being up.
    pub provisioning_delay: Delay,
    /// From a replica's start on a node that is up to its weights being loaded.
    pub loading_delay: Delay,
}

/// How many replicas a pool has.
#[derive(Clone, Debug, PartialEq)]
pub enum Replicas {
    /// A fixed count, ready from the start.
    Fixed(u32),
    /// As many as scaling group `group` ([`crate::ClusterConfig::scaling`])
    /// seats on this pool's nodes.
    Autoscaled {
        /// The scaling group.
        group: usize,
        /// The nodes.
        nodes: Nodes,
    },
}

impl Replicas {
    /// The scaling group, if autoscaled.
    pub fn group(&self) -> Option<usize> {
        match self {
            Replicas::Fixed(_) => None,
            Replicas::Autoscaled { group, .. } => Some(*group),
        }
    }
}

/// A set of identical replicas with one role.
#[derive(Clone)]
pub struct Pool {
    /// Name (reports, traces); unique in the fleet.
    pub name: String,
    /// What its replicas do.
    pub role: Role,
    /// GPU name (reports).
    pub hardware: String,
    /// GPUs one replica uses (its tensor-parallel degree).
    pub gpus_per_replica: u32,
    /// Its replicas' server configuration (KV blocks for its GPU). The
    /// scheduler's queue policy and preemption victim are replaced by the
    /// policies' scheduler; a decode pool's must receive KV (`kv_transfer`).
    pub instance: InstanceConfig,
    /// Its replicas' step-time model.
    pub latency: Arc<dyn LatencyModel>,
    /// How many replicas.
    pub replicas: Replicas,
}

impl Pool {
    /// A fixed pool of `n` serving replicas of one GPU each.
    pub fn serving(name: &str, n: u32, instance: InstanceConfig, latency: Arc<dyn LatencyModel>) -> Pool {
        Pool {
            name: name.to_string(),
            role: Role::Serve,
            hardware: String::new(),
            gpus_per_replica: 1,
            instance,
            latency,
            replicas: Replicas::Fixed(n),
        }
    }

    /// The scaling group that sizes it, if autoscaled.
    pub fn group(&self) -> Option<usize> {
        self.replicas.group()
    }

    /// What a scaling policy may know of it ([`PoolProfile`]).
    pub fn profile(&self) -> PoolProfile {
        PoolProfile { role: self.role, latency: self.latency.clone(), instance: self.instance.clone() }
    }

    /// What its scaling group's autoscaler knows of it (autoscaled pools only).
    pub(crate) fn scaled(&self) -> Option<PoolConfig> {
        let Replicas::Autoscaled { nodes, .. } = &self.replicas else { return None };
        Some(PoolConfig {
            name: self.name.clone(),
            hardware: self.hardware.clone(),
            instance: self.instance.clone(),
            latency: self.latency.clone(),
            gpus_per_replica: self.gpus_per_replica,
            gpus_per_node: nodes.gpus_per_node,
            initial_nodes: nodes.initial_nodes,
            min_nodes: nodes.min_nodes,
            max_nodes: nodes.max_nodes,
            cost_per_gpu_hour: nodes.cost_per_gpu_hour,
            provisioning_delay: nodes.provisioning_delay,
            loading_delay: nodes.loading_delay,
        })
    }
}

/// Checks that `pools` make one fleet for `groups` scaling groups: unique
/// names; serve pools, or prefill and decode pools (not both kinds); each
/// group sizing pools of one role, and every group used; a decode pool that
/// receives KV; node bounds and prices in range. Errors name the pool
/// (`pools.decode: …`).
pub fn validate(pools: &[Pool], groups: usize) -> Result<(), ConfigError> {
    if pools.is_empty() {
        return Err(ConfigError::new("pools", "a fleet needs at least one pool"));
    }
    let has = |role: Role| pools.iter().any(|p| p.role == role);
    if has(Role::Serve) && (has(Role::Prefill) || has(Role::Decode)) {
        return Err(ConfigError::new(
            "pools",
            "serve pools and prefill/decode pools in one fleet; a disaggregated deployment's decode pool serves the requests it keeps local",
        ));
    }
    if has(Role::Prefill) != has(Role::Decode) {
        let (given, missing) = if has(Role::Prefill) { ("prefill", "decode") } else { ("decode", "prefill") };
        return Err(ConfigError::new("pools", format!("a {given} pool without a {missing} pool; a disaggregated deployment has both")));
    }
    for (i, p) in pools.iter().enumerate() {
        let at = format!("pools.{}", p.name);
        if pools[..i].iter().any(|q| q.name == p.name) {
            return Err(ConfigError::new("pools", format!("`{}` names two pools", p.name)));
        }
        if p.role == Role::Decode && p.instance.kv_transfer.is_none() {
            return Err(ConfigError::new(at, "a decode pool's instances need a KV transfer link"));
        }
        p.instance.validate().map_err(|e| ConfigError::new(&at, e.to_string()))?;
        match &p.replicas {
            Replicas::Fixed(n) => check(*n <= crate::MAX_INSTANCES, &at, "instances", n, &format!("at most {}", crate::MAX_INSTANCES))?,
            Replicas::Autoscaled { group, nodes } => {
                check(*group < groups, &at, "group", group, &format!("one of the {groups} scaling groups"))?;
                let first = pools.iter().find(|q| q.group() == Some(*group)).map_or(p.role, |q| q.role);
                check(
                    first == p.role,
                    &at,
                    "role",
                    p.role.name(),
                    &format!("the role of its scaling group's other pools ({})", first.name()),
                )?;
                check(
                    nodes.gpus_per_node >= p.gpus_per_replica,
                    &at,
                    "gpus_per_node",
                    nodes.gpus_per_node,
                    &format!("at least the {} GPUs of one replica (tp)", p.gpus_per_replica),
                )?;
                check(nodes.max_nodes >= 1, &at, "max_nodes", nodes.max_nodes, "at least 1")?;
                check(
                    nodes.min_nodes <= nodes.max_nodes,
                    &at,
                    "min_nodes",
                    nodes.min_nodes,
                    &format!("at most max_nodes ({})", nodes.max_nodes),
                )?;
                check(
                    nodes.initial_nodes <= nodes.max_nodes,
                    &at,
                    "initial_nodes",
                    nodes.initial_nodes,
                    &format!("at most max_nodes ({})", nodes.max_nodes),
                )?;
                if let Some(c) = nodes.cost_per_gpu_hour {
                    check(
                        c.is_finite() && (0.0..=MAX_GPU_HOUR_COST).contains(&c),
                        &at,
                        "cost_per_gpu_hour",
                        c,
                        &format!("a price in [0, {MAX_GPU_HOUR_COST:e}] dollars"),
                    )?;
                }
            }
        }
    }
    if let Some(g) = (0..groups).find(|g| !pools.iter().any(|p| p.group() == Some(*g))) {
        return Err(ConfigError::new("scaling", format!("scaling group {g} sizes no pool")));
    }
    let fixed: u64 = pools.iter().map(|p| if let Replicas::Fixed(n) = p.replicas { u64::from(n) } else { 0 }).sum();
    if fixed > u64::from(crate::MAX_INSTANCES) {
        return Err(ConfigError::new(
            "pools",
            format!("{fixed} fixed instances in all; a fleet may have at most {} instances", crate::MAX_INSTANCES),
        ));
    }
    if !pools.iter().any(|p| p.role.routed()) {
        return Err(ConfigError::new("pools", "no pool serves or decodes requests"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscale::Delay;
    use blis_engine::kv::transfer::{KvTransferConfig, LinkConfig};
    use blis_engine::latency::Blackbox;
    use blis_engine::time::Micros;

    fn pool(name: &str, role: Role, replicas: Replicas) -> Pool {
        let mut instance = InstanceConfig::basic(8, 512, 4096, 1000);
        if role == Role::Decode {
            instance.kv_transfer =
                Some(KvTransferConfig { link: LinkConfig { bytes_per_s: 1e9, latency: Micros::ZERO }, block_bytes: 1 << 20 });
        }
        Pool { role, ..Pool::serving(name, 1, instance, Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 1.0] })) }
            .with_replicas(replicas)
    }

    impl Pool {
        fn with_replicas(self, replicas: Replicas) -> Pool {
            Pool { replicas, ..self }
        }
    }

    fn nodes(max: u32) -> Nodes {
        Nodes {
            gpus_per_node: 1,
            initial_nodes: 0,
            min_nodes: 0,
            max_nodes: max,
            cost_per_gpu_hour: None,
            provisioning_delay: Delay::default(),
            loading_delay: Delay::default(),
        }
    }

    #[test]
    fn a_fleet_is_serve_pools_or_prefill_and_decode_pools() {
        let serve = pool("s", Role::Serve, Replicas::Fixed(2));
        let prefill = pool("p", Role::Prefill, Replicas::Fixed(1));
        let decode = pool("d", Role::Decode, Replicas::Fixed(3));
        assert!(validate(std::slice::from_ref(&serve), 0).is_ok());
        assert!(validate(&[prefill.clone(), decode.clone()], 0).is_ok());
        for (fleet, needle) in [
            (vec![serve.clone(), prefill.clone(), decode.clone()], "serve pools and prefill/decode pools"),
            (vec![prefill.clone()], "a prefill pool without a decode pool"),
            (vec![serve.clone(), serve.clone()], "names two pools"),
            (vec![], "at least one pool"),
        ] {
            let e = validate(&fleet, 0).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
        let mut no_link = decode.clone();
        no_link.instance.kv_transfer = None;
        assert!(validate(&[prefill.clone(), no_link], 0).unwrap_err().to_string().contains("KV transfer link"));
    }

    #[test]
    fn a_scaling_group_sizes_pools_of_one_role_and_every_group_is_used() {
        let p = pool("p", Role::Prefill, Replicas::Autoscaled { group: 0, nodes: nodes(4) });
        let d = pool("d", Role::Decode, Replicas::Autoscaled { group: 1, nodes: nodes(4) });
        assert!(validate(&[p.clone(), d.clone()], 2).is_ok());
        let shared = pool("d", Role::Decode, Replicas::Autoscaled { group: 0, nodes: nodes(4) });
        let e = validate(&[p.clone(), shared], 1).unwrap_err();
        assert!(e.to_string().contains("role"), "{e}");
        let e = validate(&[p.clone(), d.clone()], 3).unwrap_err();
        assert!(e.to_string().contains("scaling group 2 sizes no pool"), "{e}");
        let e = validate(&[p, d.with_replicas(Replicas::Autoscaled { group: 5, nodes: nodes(4) })], 2).unwrap_err();
        assert!(e.to_string().contains("group"), "{e}");
    }
}
