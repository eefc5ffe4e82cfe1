//! The fleet as the gateway runs it: each instance slot's role, owner (a
//! fixed pool or a scaling group) and pool, and each scaling group's
//! autoscaler. A group reuses only the slots it freed, so a slot keeps its
//! role for the run.

use blis_engine::instance::{Instance, InstanceStats};
use blis_engine::metrics::Collector;
use blis_engine::time::Micros;

use crate::autoscale::scaler::Autoscaler;
use crate::autoscale::{AutoscaleConfig, AutoscalingReport, PoolConfig};
use crate::error::ClusterError;
use crate::fleet::{Pool, Replicas, Role};
use crate::metrics::ServingPoolReport;
use crate::pd::PoolReport;

/// How errors name scaling group `auto` of a fleet of `groups`:
/// `autoscale`, or with several `autoscale (decode)`.
pub(crate) fn group_path(auto: &AutoscaleConfig, groups: usize) -> String {
    if groups > 1 { format!("autoscale ({})", auto.name) } else { String::from("autoscale") }
}

/// Who sizes an instance slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Owner {
    /// A fixed pool: its instance serves from the start to the end.
    Fixed,
    /// A scaling group: its replicas come and go.
    Group(usize),
}

/// The fleet as the gateway runs it: each instance slot's role, owner and
/// pool, and the autoscaler of each scaling group.
pub(crate) struct FleetState {
    /// Each slot's role (fixed for the slot's life: a group reuses only its own slots).
    pub roles: Vec<Role>,
    owners: Vec<Owner>,
    /// The pool each slot's replica runs on (the last one's, once it is gone).
    slot_pools: Vec<usize>,
    /// GPUs per replica, by pool.
    pool_gpus: Vec<u32>,
    /// Name, GPU and KV blocks of each pool, and whether it serves alone
    /// (a serving pool that is not one of a scaling group's several node pools).
    pool_facts: Vec<(String, String, u64, bool)>,
    /// The fleet's pool of each of a group's pools, by group.
    group_pools: Vec<Vec<usize>>,
    /// Each group's role.
    group_roles: Vec<Role>,
    /// The autoscalers, by group.
    pub scalers: Vec<Autoscaler>,
}

impl FleetState {
    /// The fleet of `pools` sized by `scaling` groups (validated,
    /// [`validate`]) at the start: the instances by slot and their state;
    /// `trace` when decisions are traced.
    pub fn build(pools: &[Pool], scaling: &[AutoscaleConfig], trace: bool) -> Result<(Vec<Instance>, FleetState), ClusterError> {
        let groups = scaling.len();
        let group_pools: Vec<Vec<usize>> =
            (0..groups).map(|g| (0..pools.len()).filter(|&p| pools[p].group() == Some(g)).collect()).collect();
        let group_roles: Vec<Role> = group_pools.iter().map(|ps| pools[ps[0]].role).collect();
        let mut state = FleetState {
            roles: Vec::new(),
            owners: Vec::new(),
            slot_pools: Vec::new(),
            pool_gpus: pools.iter().map(|p| p.gpus_per_replica).collect(),
            pool_facts: pools
                .iter()
                .map(|p| {
                    let shared = p.group().is_some_and(|g| pools.iter().filter(|q| q.group() == Some(g)).count() > 1);
                    (p.name.clone(), p.hardware.clone(), p.instance.num_gpu_blocks, p.role == Role::Serve && !shared)
                })
                .collect(),
            group_pools,
            group_roles,
            scalers: Vec::with_capacity(groups),
        };
        let mut scalers: Vec<Option<Autoscaler>> = (0..groups).map(|_| None).collect();
        let mut instances = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            match pool.replicas {
                Replicas::Fixed(n) => {
                    for _ in 0..n {
                        let slot = instances.len() as u32;
                        instances.push(Instance::new(slot, pool.instance.clone(), pool.latency.clone())?);
                        state.push(pool.role, Owner::Fixed, p);
                    }
                }
                Replicas::Autoscaled { group, .. } if scalers[group].is_none() => {
                    let auto = &scaling[group];
                    let scaled: Vec<PoolConfig> = state.group_pools[group].iter().filter_map(|&q| pools[q].scaled()).collect();
                    let policy = auto.policy.build(&group_path(auto, groups), &pools[p].profile())?;
                    let stream = if groups > 1 { format!("autoscale/{}", auto.name) } else { String::from("autoscale") };
                    let label = (groups > 1).then(|| auto.name.clone());
                    let (scaler, started) = Autoscaler::new(auto.clone(), scaled, policy, instances.len() as u32, (&stream, label), trace);
                    for inst in started {
                        let slot = inst.id() as usize;
                        let on = scaler.slot_pools(&state.group_pools[group]).find(|&(s, _)| s as usize == slot).and_then(|(_, q)| q);
                        state.push(pool.role, Owner::Group(group), on.unwrap_or(p));
                        instances.push(inst);
                    }
                    scalers[group] = Some(scaler);
                }
                Replicas::Autoscaled { .. } => {}
            }
        }
        state.scalers = scalers.into_iter().map(|s| s.expect("every group sizes a pool (validated)")).collect();
        Ok((instances, state))
    }

    fn push(&mut self, role: Role, owner: Owner, pool: usize) {
        self.roles.push(role);
        self.owners.push(owner);
        self.slot_pools.push(pool);
    }

    /// Instances of the fixed pools.
    pub fn fixed_instances(&self) -> usize {
        self.owners.iter().filter(|o| **o == Owner::Fixed).count()
    }

    /// The scaling group of slot `i`, if a group sizes it.
    pub fn group_of(&self, i: usize) -> Option<usize> {
        match self.owners.get(i) {
            Some(Owner::Group(g)) => Some(*g),
            _ => None,
        }
    }

    /// Group `g`'s role.
    pub fn group_role(&self, g: usize) -> Role {
        self.group_roles[g]
    }

    /// Whether slot `i`'s instance takes new requests: a fixed pool's always,
    /// a group's while its replica is routable.
    pub fn accepts(&self, i: usize) -> bool {
        match self.owners.get(i) {
            Some(Owner::Fixed) => true,
            Some(Owner::Group(g)) => self.scalers[*g].accepts(i),
            None => false,
        }
    }

    /// Group `g` started a replica in slot `i` (a new slot at the fleet's
    /// end, or one it freed): records the slot's role, owner and pool.
    pub fn started(&mut self, g: usize, i: usize) {
        let pool = self.scalers[g].slot_pools(&self.group_pools[g]).find(|&(s, _)| s as usize == i).and_then(|(_, p)| p);
        let pool = pool.unwrap_or(self.group_pools[g][0]);
        if i == self.roles.len() {
            self.push(self.group_roles[g], Owner::Group(g), pool);
        } else {
            self.slot_pools[i] = pool;
        }
    }

    /// The counters of the replicas that held slot `i` before its current one (autoscaled slots).
    pub fn retired(&self, i: usize) -> Option<&InstanceStats> {
        self.group_of(i).and_then(|g| self.scalers[g].retired(i))
    }

    /// GPUs of each slot's (last) replica.
    pub fn gpus_per_slot(&self) -> Vec<u32> {
        self.slot_pools.iter().map(|&p| self.pool_gpus[p]).collect()
    }

    /// Each pool's report when the fleet has several serving pools on their
    /// own ([`crate::metrics::ClusterSummary::pools`]); empty otherwise.
    pub fn serving_pools(&self, stats: &[InstanceStats], collector: &Collector, end: Micros) -> Vec<ServingPoolReport> {
        if self.pool_facts.iter().filter(|f| f.3).count() < 2 {
            return Vec::new();
        }
        let gpus = self.gpus_per_slot();
        self.pool_facts
            .iter()
            .enumerate()
            .map(|(p, (name, hardware, blocks, _))| {
                let slots: Vec<usize> = (0..stats.len()).filter(|&i| self.slot_pools[i] == p).collect();
                let refs: Vec<&InstanceStats> = slots.iter().map(|&i| &stats[i]).collect();
                ServingPoolReport {
                    name: name.clone(),
                    hardware: hardware.clone(),
                    num_gpu_blocks: *blocks,
                    pool: PoolReport::of(&refs, slots.first().map_or(self.pool_gpus[p], |&i| gpus[i]), collector, end),
                }
            })
            .collect()
    }

    /// Scale oscillations over the groups (`None` without autoscaling).
    pub fn oscillations(&self) -> Option<u64> {
        (!self.scalers.is_empty()).then(|| self.scalers.iter().map(Autoscaler::oscillations).sum())
    }

    /// The run's autoscaling report (`None` without autoscaling): the one
    /// group's, or the fleet's totals over several with each group's own.
    pub fn report(&self, end: Micros, output_tokens: u64, met_slo: u64) -> Option<AutoscalingReport> {
        let reports: Vec<AutoscalingReport> = self.scalers.iter().map(|s| s.report(end, output_tokens, met_slo)).collect();
        let names: Vec<String> = self.scalers.iter().map(|s| s.name().to_string()).collect();
        AutoscalingReport::combine(reports, &names, output_tokens, met_slo)
    }
}
