//! The fleet of a scenario: its pools ([`blis_cluster::fleet`]), each
//! resolved once to a [`Deployment`] (as vLLM would run the model on the
//! pool's GPU, TP and knobs, with its latency model), and how many replicas
//! each has. Every shape is a choice of pools:
//!
//! | given | pools |
//! | --- | --- |
//! | the knobs alone (`--num-instances`, `--data-parallel-size`) | one serving pool, fixed |
//! | autoscaling (`--autoscale-policy`, `autoscale:`, `node_pools:`) | a serving pool per node pool, one scaling group |
//! | `--prefill-instances`/`--decode-instances`, `pools: {prefill, decode}` | a prefill and a decode pool, fixed or a group each ([`crate::pd`]) |
//! | `pools: [{name, hardware, ...}, ...]` | serving pools (two GPU types serving one model), fixed or a group each |
//!
//! This is the one copy of each pool's configuration a resolved scenario
//! holds; the cluster's pools are built from it. Which shape the knobs and
//! the policy file ask for is [`crate::shape`]'s.

use blis_cluster::autoscale::AutoscaleConfig;
use blis_cluster::fleet::{Pool, Replicas, Role};
use blis_cluster::pd::PdPolicy;
use blis_engine::scheduler::InstanceConfig;

use crate::deployment::Deployment;

/// One pool of a scenario, resolved.
#[derive(Clone)]
pub struct FleetPool {
    /// Name (reports, traces).
    pub name: String,
    /// What its replicas do.
    pub role: Role,
    /// Its replicas' server and latency model.
    pub deployment: Deployment,
    /// How many replicas.
    pub replicas: Replicas,
}

impl FleetPool {
    /// The cluster's pool.
    pub fn pool(&self) -> Pool {
        let s = &self.deployment.server;
        Pool {
            name: self.name.clone(),
            role: self.role,
            hardware: s.gpu_name.clone(),
            gpus_per_replica: s.tp,
            instance: s.instance.clone(),
            latency: self.deployment.latency.clone(),
            replicas: self.replicas.clone(),
        }
    }
}

/// The pools of a scenario, the scaling groups that size its autoscaled
/// ones, and, with prefill pools, how requests are disaggregated.
#[derive(Clone)]
pub struct Fleet {
    /// The pools, in slot order.
    pub pools: Vec<FleetPool>,
    /// The scaling groups, by index.
    pub scaling: Vec<AutoscaleConfig>,
    /// The P/D policy of a disaggregated fleet.
    pub pd: Option<PdPolicy>,
}

impl Fleet {
    /// The pool whose server the report's `deployment` describes: the first
    /// that serves or decodes requests (the decode pool of a disaggregated
    /// deployment).
    pub fn primary(&self) -> &FleetPool {
        self.pools.iter().find(|p| p.role.routed()).unwrap_or(&self.pools[0])
    }

    /// Every pool's instance configuration, to change them all alike.
    pub fn instances_mut(&mut self) -> impl Iterator<Item = &mut InstanceConfig> {
        self.pools.iter_mut().map(|p| &mut p.deployment.server.instance)
    }

    /// The cluster's pools.
    pub fn cluster_pools(&self) -> Vec<Pool> {
        self.pools.iter().map(FleetPool::pool).collect()
    }

    /// GPUs of the fleet at the start (every fixed replica, every group's initial ones).
    pub fn initial_gpus(&self) -> u32 {
        let fixed: u32 = self.pools.iter().map(|p| if let Replicas::Fixed(n) = p.replicas { n * p.deployment.server.tp } else { 0 }).sum();
        let scaled: u32 = self
            .scaling
            .iter()
            .enumerate()
            .map(|(g, a)| {
                a.initial_replicas * self.pools.iter().find(|p| p.replicas.group() == Some(g)).map_or(0, |p| p.deployment.server.tp)
            })
            .sum();
        fixed + scaled
    }
}
