//! The autoscaling of a scenario: the `autoscale:` and `node_pools:`
//! sections of the policy file (and a pool's own `autoscale:` and `nodes:`),
//! then the flags over them, then the defaults. A scaling group is resolved
//! here (`group`), the nodes of each pool it sizes too (`nodes`), and the
//! aggregated deployment's autoscaled pools (`aggregated`): each node pool
//! resolved to a server (its GPU's KV capacity and step-time model) as vLLM
//! would run the deployment's model there.

use blis_cluster::autoscale::section::NodesSection;
use blis_cluster::autoscale::{
    AutoscaleConfig, AutoscaleSection, AutoscaleSpec, Delay, DrainPolicy, MAX_GPU_HOUR_COST, NodePoolSection, Span,
};
use blis_cluster::fleet::{Nodes, Replicas, Role};
use blis_engine::time::{Micros, format_duration, parse_duration};

use crate::deployment::{Deployment, LongContext, Server, choose_coefficients};
use crate::error::{ScenarioError, invalid};
use crate::fleet::FleetPool;
use crate::knobs::{AUTOSCALE_KNOBS, ConfigReport, Knob, KnobId, Knobs, Source, report_entry};

/// Replicas load their weights at this rate unless told otherwise, GB/s.
pub const DEFAULT_LOAD_BANDWIDTH_GB_PER_S: f64 = 2.0;

/// Most replicas unless given (or more if the initial or minimum count is).
const DEFAULT_MAX_REPLICAS: u32 = 8;

/// What the policy file says about autoscaling, and where it came from.
pub struct Written<'a> {
    /// The `autoscale:` section.
    pub section: Option<&'a AutoscaleSection>,
    /// The `node_pools:` section.
    pub pools: &'a [NodePoolSection],
    /// How to name the file in errors.
    pub origin: &'a str,
}

impl Written<'_> {
    /// An error about a value of the file: named after it.
    pub(crate) fn error(&self, e: String) -> ScenarioError {
        match self.origin {
            "" => invalid!("{e}"),
            origin => invalid!("{origin}: {e}"),
        }
    }
}

fn duration(id: KnobId, knob: &Knob<Option<String>>) -> Result<Option<Micros>, ScenarioError> {
    knob.value.as_deref().map(|t| parse_duration(t).map_err(|e| invalid!(knob = id, "{e}"))).transpose()
}

fn delay(id: KnobId, knob: &Knob<Option<String>>) -> Result<Option<Delay>, ScenarioError> {
    knob.value.as_deref().map(|t| Delay::parse(t).map_err(|e| invalid!(knob = id, "{e}"))).transpose()
}

/// The policy: `--autoscale-policy` (keeping the file's parameters when it
/// names the same template), else the file's, else `threshold` when the file
/// configures autoscaling without naming one, else `fixed` for node pools
/// alone. `None`: no autoscaling.
pub(crate) fn policy(k: &Knobs, written: &Written<'_>) -> Result<Option<AutoscaleSpec>, ScenarioError> {
    let from_file = written.section.and_then(|s| s.policy.clone());
    Ok(match k.autoscale_policy.value.as_deref() {
        Some("none") => None,
        Some(name) => match from_file {
            Some(spec) if spec.name() == name => Some(spec),
            _ => Some(
                AutoscaleSpec::parse(name, None, "autoscale")
                    .map_err(|e| invalid!(knob: autoscale_policy, "{name}: {}; or none", e.message))?,
            ),
        },
        None => match (from_file, written.section, written.pools.is_empty()) {
            (Some(spec), _, _) => Some(spec),
            (None, Some(_), _) => Some(AutoscaleSpec::parse("threshold", None, "autoscale").map_err(|e| invalid!("{e}"))?),
            (None, None, false) => Some(AutoscaleSpec::parse("fixed", None, "autoscale").map_err(|e| invalid!("{e}"))?),
            (None, None, true) => None,
        },
    })
}

/// Refuses the autoscaling knobs when nothing autoscales.
pub(crate) fn refuse_unused(k: &Knobs) -> Result<(), ScenarioError> {
    match AUTOSCALE_KNOBS.iter().find(|&&knob| k.source(knob) != Source::Default) {
        Some(&knob) => {
            Err(invalid!(knob = knob, "needs autoscaling: add --autoscale-policy NAME (or an autoscale section in --policy-config)"))
        }
        None => Ok(()),
    }
}

/// One scaling group named `name`: its policy (a pool's `own` section's,
/// else `policy`), bounds and behaviour from the flags over `own`'s settings
/// over the file's `autoscale:` section over the defaults. `given`: the
/// replicas the fleet's description starts the group with, if it says
/// (else the minimum, at least one), and the knob that says it (none when a
/// file does). Errors name the flag or the file.
pub(crate) fn group(
    k: &Knobs,
    written: &Written<'_>,
    own: Option<&AutoscaleSection>,
    policy: AutoscaleSpec,
    (name, given): (&str, Option<(u32, Option<KnobId>)>),
) -> Result<AutoscaleConfig, ScenarioError> {
    let file = written.section.map(|s| s.settings.clone()).unwrap_or_default();
    let s = match own {
        Some(o) => {
            let o = o.settings.clone();
            blis_cluster::autoscale::section::AutoscaleSettings {
                interval: o.interval.or(file.interval),
                scrape_delay: o.scrape_delay.or(file.scrape_delay),
                min_replicas: o.min_replicas.or(file.min_replicas),
                max_replicas: o.max_replicas.or(file.max_replicas),
                scale_up_window: o.scale_up_window.or(file.scale_up_window),
                scale_down_window: o.scale_down_window.or(file.scale_down_window),
                cooldown: o.cooldown.or(file.cooldown),
                oscillation_window: o.oscillation_window.or(file.oscillation_window),
                drain: o.drain.or(file.drain),
                warmup: o.warmup.or(file.warmup),
            }
        }
        None => file,
    };
    let policy = own.and_then(|o| o.policy.clone()).unwrap_or(policy);
    let min = k.min_instances.value.or(s.min_replicas).unwrap_or(1);
    let initial = given.map_or(min.max(1), |(n, _)| n);
    let max = k.max_instances.value.or(s.max_replicas).unwrap_or(DEFAULT_MAX_REPLICAS.max(initial).max(min));
    let limit = blis_cluster::MAX_INSTANCES;
    for (id, key, knob, n) in
        [(KnobId::min_instances, "min_replicas", &k.min_instances, min), (KnobId::max_instances, "max_replicas", &k.max_instances, max)]
    {
        if n > limit {
            return Err(match knob.value {
                Some(_) => invalid!(knob = id, "{n}: must be at most {limit} replicas"),
                None => written.error(format!("autoscale.{key}: {n}: must be at most {limit} replicas")),
            });
        }
    }
    if min > max {
        return Err(invalid!(
            knob: min_instances,
            "{min} is above --max-instances {max} (flags or the autoscale section's min_replicas/max_replicas)"
        ));
    }
    if !(min..=max).contains(&initial) {
        let bounds = format!("must be between --min-instances {min} and --max-instances {max}");
        return Err(match given.and_then(|(_, knob)| knob) {
            Some(knob) => invalid!(knob = knob, "{initial} (the initial replicas) {bounds}"),
            None => invalid!("{initial} initial replicas: {bounds} (flags or the autoscale section's min_replicas/max_replicas)"),
        });
    }
    let interval = match duration(KnobId::autoscale_interval, &k.autoscale_interval)? {
        Some(t) if t < AutoscaleConfig::MIN_INTERVAL => {
            return Err(invalid!(knob: autoscale_interval, "{}: must be at least 1ms (e.g. 30s)", format_duration(t)));
        }
        Some(t) => t,
        // A file's interval is checked with the rest of its section.
        None => s.interval.map_or(Micros::from_secs(30), |s| s.0),
    };
    let drain = match k.drain_policy.value.as_deref() {
        Some(name) => DrainPolicy::parse(name).map_err(|e| invalid!(knob: drain_policy, "{e}"))?,
        None => s.drain.unwrap_or_default(),
    };
    let mut warmup = s.warmup.unwrap_or_default();
    if let Some(t) = duration(KnobId::warmup_duration, &k.warmup_duration)? {
        warmup.duration = Span(t);
    }
    if let Some(f) = k.warmup_slowdown.value {
        if !(f.is_finite() && (1.0..=100.0).contains(&f)) {
            return Err(invalid!(knob: warmup_slowdown, "{f}: must be a factor in [1, 100]"));
        }
        warmup.slowdown = f;
    }
    let scale_down_window = s.scale_down_window.map_or(Micros::from_secs(240), |w| w.0);
    Ok(AutoscaleConfig {
        name: name.to_string(),
        initial_replicas: initial,
        policy,
        interval,
        scrape_delay: s.scrape_delay.map_or(Micros::from_secs(15), |w| w.0),
        min_replicas: min,
        max_replicas: max,
        scale_up_window: s.scale_up_window.map_or(Micros::ZERO, |w| w.0),
        scale_down_window,
        cooldown: s.cooldown.map_or(Micros::ZERO, |w| w.0),
        oscillation_window: s.oscillation_window.map_or(scale_down_window, |w| w.0),
        drain,
        warmup,
        seed: k.seed.value,
    })
}

/// The nodes of a pool of `server` replicas that its group may grow to `max`
/// replicas: `section`'s fields over the flags (price, delays) over the
/// defaults (one replica per node, `initial_nodes` up at the start, nodes for
/// `max` replicas, weights loaded at 2 GB/s). `at` names the pool's section in errors.
pub(crate) fn nodes(
    k: &Knobs,
    section: &NodesSection,
    server: &Server,
    (initial_nodes, max): (u32, u32),
    at: &str,
) -> Result<Nodes, ScenarioError> {
    let cost = k.gpu_hour_cost.value;
    if let Some(c) = cost
        && !(c.is_finite() && (0.0..=MAX_GPU_HOUR_COST).contains(&c))
    {
        return Err(invalid!(knob: gpu_hour_cost, "{c}: must be a price in [0, {MAX_GPU_HOUR_COST:e}] dollars"));
    }
    let provisioning = delay(KnobId::provisioning_delay, &k.provisioning_delay)?;
    let loading = delay(KnobId::loading_delay, &k.loading_delay)?;
    let bandwidth = section.load_bandwidth_gb_per_s.unwrap_or(DEFAULT_LOAD_BANDWIDTH_GB_PER_S);
    if !(bandwidth.is_finite() && bandwidth > 0.0) {
        return Err(invalid!("{at}.load_bandwidth_gb_per_s: {bandwidth}: must be a positive number of GB/s"));
    }
    let load_time = Delay::Fixed(Micros::from_secs_f64(server.model.weight_bytes() / (bandwidth * 1e9)).unwrap_or(Micros::ZERO));
    let gpus_per_node = section.gpus_per_node.unwrap_or(server.tp);
    let per_node = (gpus_per_node / server.tp).max(1);
    Ok(Nodes {
        gpus_per_node,
        initial_nodes: section.initial_nodes.unwrap_or(initial_nodes),
        min_nodes: section.min_nodes.unwrap_or(0),
        max_nodes: section.max_nodes.unwrap_or(max.div_ceil(per_node)),
        cost_per_gpu_hour: section.cost_per_gpu_hour.or(cost),
        provisioning_delay: section.provisioning_delay.or(provisioning).unwrap_or_default(),
        loading_delay: section.loading_delay.or(loading).unwrap_or(load_time),
    })
}

/// The nodes of a pool of `server` replicas that `group` alone sizes (a
/// disaggregated deployment's pool, a serving pool of its own): `section`
/// over [`nodes`]'s defaults, as many nodes up at the start as its initial
/// replicas fill.
pub(crate) fn pool_nodes(
    k: &Knobs,
    section: Option<&NodesSection>,
    server: &Server,
    group: &AutoscaleConfig,
    at: &str,
) -> Result<Nodes, ScenarioError> {
    let section = section.cloned().unwrap_or_default();
    let per_node = section.gpus_per_node.map_or(1, |g| (g / server.tp).max(1));
    nodes(k, &section, server, (group.initial_replicas.div_ceil(per_node), group.max_replicas), at)
}

/// The knobs a node pool's replicas resolve with: the deployment's, with
/// the pool's GPU and tensor-parallel degree where the pool sets them.
fn pool_knobs(k: &Knobs, p: &NodePoolSection) -> Knobs {
    let mut pk = k.clone();
    if let Some(hw) = &p.hardware {
        pk.hardware = Knob { value: hw.clone(), source: Source::File };
        pk.hardware_config = Knob { value: None, source: Source::Default };
    }
    if let Some(tp) = p.tp {
        pk.tp = Knob { value: tp, source: Source::File };
    }
    pk
}

/// How errors name pool `i` of the file `origin` names (`--policy-config
/// f.yaml: node_pools[0] (h100)`).
fn pool_origin(origin: &str, i: usize, p: &NodePoolSection) -> String {
    format!("{}node_pools[{i}] ({})", if origin.is_empty() { String::new() } else { format!("{origin}: ") }, p.name)
}

/// The knobs the deployment itself resolves with when node pools run its
/// replicas: the first pool's, with how errors name that pool (`None`
/// without pools, or when `--autoscale-policy none` turns them off). The
/// report's `deployment` then describes replicas that run, and a
/// deployment that fits only at the pools' TP degree (a 70B model whose
/// pools run TP 4, at the default `--tp 1`) is not refused for the flags'
/// width.
pub fn deployment_knobs(k: &Knobs, pools: &[NodePoolSection]) -> Option<(Knobs, String)> {
    let first = pools.first()?;
    let autoscaled = k.autoscale_policy.value.as_deref() != Some("none");
    (autoscaled && (first.hardware.is_some() || first.tp.is_some()))
        .then(|| (pool_knobs(k, first), pool_origin(&k.policy_origin(), 0, first)))
}

/// The autoscaled pools of an aggregated deployment `d` (its one scaling
/// group, `autoscale`), or `None` (a fixed fleet with no cost accounting)
/// unless a flag or the policy file asks for autoscaling: the file's node
/// pools, each resolved on its GPU, or one pool of the deployment's GPU,
/// one replica per node. Derived values go to `report`.
pub(crate) fn aggregated(
    k: &Knobs,
    d: &Deployment,
    written: &Written<'_>,
    long_context: LongContext,
    report: &mut ConfigReport,
    warnings: &mut Vec<String>,
) -> Result<Option<(AutoscaleConfig, Vec<FleetPool>)>, ScenarioError> {
    let Some(policy) = policy(k, written)? else {
        refuse_unused(k)?;
        return Ok(None);
    };
    let given = (k.num_instances.source != Source::Default).then_some((k.num_instances.value, Some(KnobId::num_instances)));
    let config = group(k, written, None, policy, ("autoscale", given))?;
    if k.num_instances.source == Source::Default {
        report_entry(report, "num-instances", &config.initial_replicas, Source::Derived);
    }
    let (initial, max) = (config.initial_replicas, config.max_replicas);
    let autoscaled = |nodes| Replicas::Autoscaled { group: 0, nodes };
    if written.pools.is_empty() {
        let s = &d.server;
        let nodes = nodes(k, &NodesSection::default(), s, (initial, max), "autoscale")?;
        let pool = FleetPool { name: s.gpu_name.clone(), role: Role::Serve, deployment: d.clone(), replicas: autoscaled(nodes) };
        return Ok(Some((config, vec![pool])));
    }
    let mut pools = Vec::new();
    for (i, p) in written.pools.iter().enumerate() {
        let at = pool_origin(written.origin, i, p);
        let pk = pool_knobs(k, p);
        let mut scratch = ConfigReport::new();
        let server = Server::resolve(&pk, long_context, &mut scratch, warnings).map_err(|e| invalid!("{at}: {e}"))?;
        let chosen = choose_coefficients(
            pk.latency_model.value.as_deref(),
            pk.coefficients.value.as_deref(),
            pk.alpha_coeffs.value.as_deref(),
            pk.beta_coeffs.value.as_deref(),
        )?;
        let latency = server.latency_model(&chosen.set, &chosen.origin).map_err(|e| invalid!("{at}: {e}"))?;
        let nodes = nodes(k, &p.nodes, &server, (0, max), &at)?;
        let deployment = Deployment { server, latency, coefficients: chosen.origin };
        pools.push(FleetPool { name: p.name.clone(), role: Role::Serve, deployment, replicas: autoscaled(nodes) });
    }
    Ok(Some((config, pools)))
}
