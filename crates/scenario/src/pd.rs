//! The prefill/decode pools of a scenario (`--prefill-instances N
//! --decode-instances M`, or the policy file's `pools: {prefill, decode}`;
//! [`blis_cluster::pd`]): each pool resolved as vLLM would run the
//! deployment's model on its GPU, TP and knobs, the decode pool receiving KV
//! over a link of `--pd-transfer-bandwidth`. With autoscaling each pool is
//! its own scaling group (`prefill`, `decode`), with the flags' and the
//! file's settings, under its own `autoscale:` and `nodes:` in the section.

use blis_cluster::fleet::{Replicas, Role};
use blis_cluster::pd::{PdDecider, PdPolicy};
use blis_cluster::policy::RoutingSpec;
use blis_cluster::policy::routing::parse_scorer_list;
use blis_cluster::pools::DisaggregatedSection;
use blis_engine::kv::transfer::{KvTransferConfig, LinkConfig};
use blis_engine::time::{Micros, parse_duration};
use serde_json::json;

use crate::autoscale::Written;
use crate::deployment::{Deployment, LongContext};
use crate::error::{ScenarioError, invalid};
use crate::fleet::{Fleet, FleetPool};
use crate::knobs::{ConfigReport, Knob, KnobId, Knobs, Source, report_entry};

/// Prefill → decode bandwidth per GPU unless given: a 400 Gb/s RDMA NIC per GPU, GB/s.
pub const DEFAULT_TRANSFER_GB_PER_S: f64 = 50.0;

/// Fixed cost of one transfer unless given (NIXL's handshake and notification), µs.
pub const DEFAULT_TRANSFER_LATENCY: Micros = Micros(1000);

/// The prefill pool's routing unless given: prefix affinity matters on prefill.
pub const DEFAULT_PREFILL_SCORERS: &str = "prefix-affinity:3,queue-depth:2";

/// The decode pool's routing unless given: load and KV headroom.
pub const DEFAULT_DECODE_SCORERS: &str = "queue-depth:2,kv-utilization:1";

/// The P/D knobs other than the two pool sizes: only a disaggregated
/// deployment takes them.
pub const OTHER_KNOBS: [KnobId; 14] = [
    KnobId::pd_prefill_cache,
    KnobId::pd_decider,
    KnobId::pd_prefix_threshold,
    KnobId::pd_transfer_bandwidth,
    KnobId::pd_transfer_latency,
    KnobId::prefill_hardware,
    KnobId::decode_hardware,
    KnobId::prefill_tp,
    KnobId::decode_tp,
    KnobId::prefill_max_num_seqs,
    KnobId::decode_max_num_seqs,
    KnobId::prefill_max_num_batched_tokens,
    KnobId::decode_max_num_batched_tokens,
    KnobId::prefill_routing_scorers,
];

/// One pool (`role` prefill or decode): the deployment's knobs with the
/// pool's GPU, TP and batch knobs; its derived values go to `report`.
fn pool(
    k: &Knobs,
    role: Role,
    long_context: LongContext,
    report: &mut ConfigReport,
    warnings: &mut Vec<String>,
) -> Result<Deployment, ScenarioError> {
    let (hardware, tp, seqs, tokens) = match role {
        Role::Prefill => (&k.prefill_hardware, &k.prefill_tp, &k.prefill_max_num_seqs, &k.prefill_max_num_batched_tokens),
        Role::Serve | Role::Decode => (&k.decode_hardware, &k.decode_tp, &k.decode_max_num_seqs, &k.decode_max_num_batched_tokens),
    };
    let mut pk = k.clone();
    // vLLM turns its hybrid KV cache manager off under a KV connector (NIXL).
    pk.disable_hybrid_kv_cache_manager = Knob { value: true, source: Source::Derived };
    if let Some(hw) = &hardware.value {
        pk.hardware = Knob { value: hw.clone(), source: Source::Flag };
        pk.hardware_config = Knob { value: None, source: Source::Default };
    }
    if let Some(value) = tp.value {
        pk.tp = Knob { value, source: tp.source };
    }
    if seqs.value.is_some() {
        pk.max_num_seqs = seqs.clone();
    }
    if tokens.value.is_some() {
        pk.max_num_batched_tokens = tokens.clone();
    }
    Deployment::resolve(&pk, long_context, report, warnings).map_err(|e| invalid!("the {} pool: {e}", role.name()))
}

/// The first P/D knob given (the pool sizes included), if any.
pub(crate) fn given_knob(k: &Knobs) -> Option<KnobId> {
    [KnobId::prefill_instances, KnobId::decode_instances].into_iter().chain(OTHER_KNOBS).find(|&knob| k.source(knob) != Source::Default)
}

/// Fills the P/D knobs no flag set from the policy file's `pools:` section.
fn with_section(k: &Knobs, s: &DisaggregatedSection) -> Knobs {
    fn fill<T>(knob: &mut Knob<Option<T>>, value: Option<T>) {
        if let (None, Some(v)) = (&knob.value, value) {
            *knob = Knob { value: Some(v), source: Source::File };
        }
    }
    let mut k = k.clone();
    let (p, d) = (s.prefill.clone(), s.decode.clone());
    fill(&mut k.prefill_instances, p.instances);
    fill(&mut k.decode_instances, d.instances);
    fill(&mut k.prefill_hardware, p.hardware);
    fill(&mut k.decode_hardware, d.hardware);
    fill(&mut k.prefill_tp, p.tp);
    fill(&mut k.decode_tp, d.tp);
    fill(&mut k.prefill_max_num_seqs, p.max_num_seqs);
    fill(&mut k.decode_max_num_seqs, d.max_num_seqs);
    fill(&mut k.prefill_max_num_batched_tokens, p.max_num_batched_tokens);
    fill(&mut k.decode_max_num_batched_tokens, d.max_num_batched_tokens);
    fill(
        &mut k.prefill_routing_scorers,
        p.routing_scorers.map(|m| m.iter().map(|(n, w)| format!("{n}:{w}")).collect::<Vec<_>>().join(",")),
    );
    fill(&mut k.pd_decider, s.decider.clone());
    fill(&mut k.pd_prefix_threshold, s.prefix_threshold_tokens);
    fill(&mut k.pd_transfer_bandwidth, s.transfer_bandwidth_gb_s);
    fill(&mut k.pd_transfer_latency, s.transfer_latency.map(|t| format!("{}us", t.0.as_us())));
    fill(&mut k.pd_prefill_cache, s.prefill_cache.clone());
    k
}

/// The disaggregated fleet the knobs ask for, under them the policy file's
/// `pools:` section (`origin` names the file); `None` (not disaggregated)
/// unless both pools are sized. Autoscaled when `written` or the flags ask
/// for it: each pool then a scaling group of its own.
pub(crate) fn resolve(
    k: &Knobs,
    section: Option<&DisaggregatedSection>,
    (origin, written): (&str, &Written<'_>),
    long_context: LongContext,
    report: &mut ConfigReport,
    warnings: &mut Vec<String>,
) -> Result<Option<Fleet>, ScenarioError> {
    let Some(section) = section else { return resolve_knobs(k, &DisaggregatedSection::default(), written, long_context, report, warnings) };
    let k = with_section(k, section);
    resolve_knobs(&k, section, written, long_context, report, warnings).map_err(|e| invalid!("{e} (with the pools section of {origin})"))
}

fn resolve_knobs(
    k: &Knobs,
    section: &DisaggregatedSection,
    written: &Written<'_>,
    long_context: LongContext,
    report: &mut ConfigReport,
    warnings: &mut Vec<String>,
) -> Result<Option<Fleet>, ScenarioError> {
    let (prefill, decode) = match (k.prefill_instances.value, k.decode_instances.value) {
        (None, None) => {
            if let Some(&knob) = OTHER_KNOBS.iter().find(|&&knob| k.source(knob) != Source::Default) {
                return Err(invalid!(knob = knob, "needs a disaggregated deployment: add --prefill-instances N --decode-instances M"));
            }
            return Ok(None);
        }
        (Some(p), Some(d)) => (p, d),
        (Some(_), None) => {
            return Err(invalid!(knob: prefill_instances, "needs --decode-instances (a disaggregated deployment has both pools)"));
        }
        (None, Some(_)) => {
            return Err(invalid!(knob: decode_instances, "needs --prefill-instances (a disaggregated deployment has both pools)"));
        }
    };
    let policy = crate::autoscale::policy(k, written)?;
    if policy.is_none() {
        for (knob, n) in [(KnobId::prefill_instances, prefill), (KnobId::decode_instances, decode)] {
            if n == 0 {
                return Err(invalid!(knob = knob, "0: a pool needs at least one instance"));
            }
        }
        crate::autoscale::refuse_unused(k)?;
    }
    if prefill.saturating_add(decode) > blis_cluster::MAX_INSTANCES {
        return Err(invalid!(
            knob: prefill_instances,
            "{prefill}: the prefill and decode pools ({decode} decode instances) may have at most {} instances together",
            blis_cluster::MAX_INSTANCES
        ));
    }
    if k.num_instances.source != Source::Default {
        return Err(invalid!(knob: num_instances, "and --prefill-instances/--decode-instances both size the fleet; give one or the other"));
    }
    if !written.pools.is_empty() {
        return Err(written.error(String::from(
            "node_pools describe an aggregated deployment's nodes; give a disaggregated deployment's pools their hardware, tp and nodes in the pools section",
        )));
    }
    let threshold = k.pd_prefix_threshold.value.unwrap_or(0);
    let decider_name = k.pd_decider.value.as_deref().unwrap_or("always");
    let decider = PdDecider::parse(decider_name, threshold).map_err(|e| invalid!(knob: pd_decider, "{}", e.message))?;
    if k.pd_prefix_threshold.value.is_some() && !matches!(decider, PdDecider::PrefixThreshold(_)) {
        return Err(invalid!(knob: pd_prefix_threshold, "needs --pd-decider prefix-threshold, got --pd-decider {decider_name}"));
    }
    if k.pd_decider.value.is_none() {
        report_entry(report, "pd-decider", &decider_name, Source::Default);
    }
    let gb_per_s = crate::tiers::bandwidth(k.pd_transfer_bandwidth.value.unwrap_or(DEFAULT_TRANSFER_GB_PER_S))
        .map_err(|m| invalid!(knob: pd_transfer_bandwidth, "{m}"))?;
    let latency = match &k.pd_transfer_latency.value {
        Some(text) => parse_duration(text).map_err(|e| invalid!(knob: pd_transfer_latency, "{e}"))?,
        None => DEFAULT_TRANSFER_LATENCY,
    };
    let keep_cache = match k.pd_prefill_cache.value.as_deref() {
        None | Some("keep") => true,
        Some("drop") => false,
        Some(other) => return Err(invalid!(knob: pd_prefill_cache, "{other}: unknown; allowed: keep, drop")),
    };
    let scorers_text = k.prefill_routing_scorers.value.as_deref().unwrap_or(DEFAULT_PREFILL_SCORERS);
    let scorers = parse_scorer_list(scorers_text).map_err(|m| invalid!(knob: prefill_routing_scorers, "{scorers_text:?}: {m}"))?;
    let prefill_routing = RoutingSpec::parse("weighted", Some(&json!({ "scorers": scorers })), "routing")
        .map_err(|e| invalid!(knob: prefill_routing_scorers, "{scorers_text:?}: {}", e.message))?;

    // The report's derived server values are the decode pool's, the one its `deployment` describes.
    let p = pool(k, Role::Prefill, long_context, &mut ConfigReport::new(), warnings)?;
    let mut d = pool(k, Role::Decode, long_context, report, warnings)?;
    let block_bytes = (d.server.model.kv_bytes_per_token_per_gpu(d.server.tp) * f64::from(d.server.instance.block_size)).ceil() as u64;
    d.server.instance.kv_transfer = Some(KvTransferConfig { link: LinkConfig { bytes_per_s: gb_per_s * 1e9, latency }, block_bytes });
    for (key, server) in [("prefill", &p.server), ("decode", &d.server)] {
        report_entry(
            report,
            &format!("{key}-pool"),
            &json!({ "hardware": server.gpu_name, "tp": server.tp, "num_gpu_blocks": server.instance.num_gpu_blocks,
            "max_num_seqs": server.instance.scheduler.max_num_seqs, "max_num_batched_tokens": server.instance.scheduler.max_num_batched_tokens }),
            Source::Derived,
        );
    }
    let mut scaling = Vec::new();
    let mut pools = Vec::new();
    let pools_given = [
        (Role::Prefill, p, (prefill, KnobId::prefill_instances), &section.prefill),
        (Role::Decode, d, (decode, KnobId::decode_instances), &section.decode),
    ];
    for (role, deployment, (n, knob), written_pool) in pools_given {
        let name = role.name();
        let replicas = match &policy {
            None => Replicas::Fixed(n),
            Some(spec) => {
                let initial = (n, Some(knob));
                let group = crate::autoscale::group(k, written, written_pool.autoscale.as_ref(), spec.clone(), (name, Some(initial)))?;
                let at = format!("pools.{name}.nodes");
                let nodes = crate::autoscale::pool_nodes(k, written_pool.nodes.as_ref(), &deployment.server, &group, &at)?;
                scaling.push(group);
                Replicas::Autoscaled { group: scaling.len() - 1, nodes }
            }
        };
        pools.push(FleetPool { name: name.to_string(), role, deployment, replicas });
    }
    Ok(Some(Fleet { pools, scaling, pd: Some(PdPolicy { prefill_routing, decider, prefill_keeps_cache: keep_cache }) }))
}
