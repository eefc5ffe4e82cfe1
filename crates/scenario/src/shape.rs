//! The shape of a scenario's fleet ([`crate::fleet`]): which pools the knobs
//! and the policy file ask for, resolved. A disaggregated deployment is
//! [`crate::pd`]'s, autoscaling [`crate::autoscale`]'s; here are the one
//! entry point, the fixed aggregated fleet and the list of serving pools.

use blis_cluster::fleet::{Replicas, Role};
use blis_cluster::policy::PolicyBundle;
use blis_cluster::pools::{PoolsSection, ServingPoolSection};

use crate::autoscale::Written;
use crate::deployment::{Deployment, LongContext};
use crate::error::{ScenarioError, invalid};
use crate::fleet::{Fleet, FleetPool};
use crate::knobs::{ConfigReport, Knob, Knobs, Source};

/// The fleet the knobs and the policy file ask for (`set_by_file`: its
/// autoscale or node pool sections are given, so errors about them name
/// it). Derived values go to `report`, warnings to `warnings`.
pub fn resolve(
    k: &Knobs,
    bundle: &PolicyBundle,
    set_by_file: bool,
    long_context: LongContext,
    report: &mut ConfigReport,
    warnings: &mut Vec<String>,
) -> Result<Fleet, ScenarioError> {
    let origin = k.policy_origin();
    let autoscale_origin = if set_by_file { origin.clone() } else { String::new() };
    let written = Written { section: bundle.autoscale.as_ref(), pools: &bundle.node_pools, origin: &autoscale_origin };
    let fleet = match &bundle.pools {
        Some(PoolsSection::Serving(pools)) => serving(k, pools, (&origin, &written), long_context, warnings)?,
        Some(PoolsSection::Disaggregated(section)) => {
            crate::pd::resolve(k, Some(section), (&origin, &written), long_context, report, warnings)?
                .ok_or_else(|| invalid!("{origin}: the pools section needs both pools sized (prefill.instances and decode.instances)"))?
        }
        None => match crate::pd::resolve(k, None, (&origin, &written), long_context, report, warnings)? {
            Some(fleet) => fleet,
            None => aggregated(k, &written, long_context, report, warnings)?,
        },
    };
    if k.data_parallel_size.value.is_some() && !matches!(fleet.pools.as_slice(), [FleetPool { replicas: Replicas::Fixed(_), .. }]) {
        return Err(invalid!(
            knob: data_parallel_size,
            "{}: one server's engine replicas; a disaggregated or autoscaled deployment sizes its own instances (drop --data-parallel-size)",
            k.data_parallel_size.value.unwrap_or_default()
        ));
    }
    Ok(fleet)
}

/// A fixed or autoscaled aggregated deployment: one serving pool of the
/// knobs' server (`--num-instances` or `--data-parallel-size` replicas), or
/// the autoscaled pools of [`crate::autoscale::aggregated`]; with node pools
/// the deployment is the first pool's.
fn aggregated(
    k: &Knobs,
    written: &Written<'_>,
    long_context: LongContext,
    report: &mut ConfigReport,
    warnings: &mut Vec<String>,
) -> Result<Fleet, ScenarioError> {
    let d = match crate::autoscale::deployment_knobs(k, written.pools) {
        Some((pk, at)) => Deployment::resolve(&pk, long_context, report, warnings).map_err(|e| invalid!("{at}: {e}"))?,
        None => Deployment::resolve(k, long_context, report, warnings)?,
    };
    if let Some((group, pools)) = crate::autoscale::aggregated(k, &d, written, long_context, report, warnings)? {
        return Ok(Fleet { pools, scaling: vec![group], pd: None });
    }
    let n = match k.data_parallel_size.value {
        Some(n) => data_parallel(k, n)?,
        None => k.num_instances.value,
    };
    let pool = FleetPool { name: d.server.gpu_name.clone(), role: Role::Serve, deployment: d, replicas: Replicas::Fixed(n) };
    Ok(Fleet { pools: vec![pool], scaling: Vec::new(), pd: None })
}

/// vLLM's `--data-parallel-size N`: N engine replicas of one server; an
/// error when `--num-instances` says another count.
fn data_parallel(k: &Knobs, n: u32) -> Result<u32, ScenarioError> {
    if n == 0 || n > blis_cluster::MAX_INSTANCES {
        return Err(invalid!(knob: data_parallel_size, "{n}: must be between 1 and {}", blis_cluster::MAX_INSTANCES));
    }
    if k.num_instances.source != Source::Default && k.num_instances.value != n {
        return Err(invalid!(
            knob: data_parallel_size,
            "{n} and --num-instances {}: both count the engine replicas; give one",
            k.num_instances.value
        ));
    }
    Ok(n)
}

/// Serving pools of the file's `pools:` list: each the deployment's knobs
/// with the pool's GPU, TP and batch knobs; fixed (`instances`, default 1),
/// or a scaling group of its own when it has an `autoscale:` section.
fn serving(
    k: &Knobs,
    sections: &[ServingPoolSection],
    (origin, written): (&str, &Written<'_>),
    long_context: LongContext,
    warnings: &mut Vec<String>,
) -> Result<Fleet, ScenarioError> {
    if k.num_instances.source != Source::Default {
        return Err(invalid!(knob: num_instances, "and the pools section of {origin} both size the fleet; give one or the other"));
    }
    if k.autoscale_policy.value.is_some() || written.section.is_some() || !written.pools.is_empty() {
        return Err(invalid!(
            "{origin}: a list of serving pools autoscales a pool with its own autoscale section; drop --autoscale-policy, autoscale and node_pools"
        ));
    }
    crate::autoscale::refuse_unused(k)?;
    if let Some(knob) = crate::pd::given_knob(k) {
        return Err(invalid!(
            knob = knob,
            "needs a disaggregated deployment, but the pools section of {origin} lists serving pools (a disaggregated one is a mapping with prefill and decode)"
        ));
    }
    let mut fleet = Fleet { pools: Vec::new(), scaling: Vec::new(), pd: None };
    for (i, s) in sections.iter().enumerate() {
        let at = format!("{origin}: pools[{i}] ({})", s.name);
        let p = &s.pool;
        let mut pk = k.clone();
        fn file<T>(value: T) -> Knob<T> {
            Knob { value, source: Source::File }
        }
        if let Some(hw) = &p.hardware {
            pk.hardware = file(hw.clone());
            pk.hardware_config = Knob { value: None, source: Source::Default };
        }
        if let Some(tp) = p.tp {
            pk.tp = file(tp);
        }
        if let Some(n) = p.max_num_seqs {
            pk.max_num_seqs = file(Some(n));
        }
        if let Some(n) = p.max_num_batched_tokens {
            pk.max_num_batched_tokens = file(Some(n));
        }
        let deployment = Deployment::resolve(&pk, long_context, &mut ConfigReport::new(), warnings).map_err(|e| invalid!("{at}: {e}"))?;
        let replicas = match &p.autoscale {
            None => {
                if p.nodes.is_some() {
                    return Err(invalid!("{at}: nodes need autoscaling (an autoscale section in the pool)"));
                }
                Replicas::Fixed(p.instances.unwrap_or(1))
            }
            Some(section) => {
                let policy = section.policy.clone().ok_or_else(|| invalid!("{at}: autoscale: needs a `type` (the policy)"))?;
                let group = crate::autoscale::group(k, written, Some(section), policy, (&s.name, p.instances.map(|n| (n, None))))
                    .map_err(|e| invalid!("{at}: {e}"))?;
                let nodes = crate::autoscale::pool_nodes(k, p.nodes.as_ref(), &deployment.server, &group, &format!("{at}: nodes"))?;
                fleet.scaling.push(group);
                Replicas::Autoscaled { group: fleet.scaling.len() - 1, nodes }
            }
        };
        fleet.pools.push(FleetPool { name: s.name.clone(), role: Role::Serve, deployment, replicas });
    }
    Ok(fleet)
}
