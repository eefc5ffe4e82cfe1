//! Autoscaling: bounds, conservation across drains, no request before a
//! replica is ready, the measured actuation delay, oscillation detection,
//! determinism, pool choice and cost.

use std::collections::BTreeMap;

use blis_cluster::autoscale::{AutoscaleConfig, AutoscaleSpec, Delay, DrainPolicy, Phase, ScaleAction, ScaleTrace, Span, Warmup};
use blis_cluster::fleet::{Nodes, Pool, Replicas};
use blis_cluster::policy::PolicyBundle;
use blis_cluster::trace::{AdmissionTrace, DecisionSink, RoutingTrace};
use blis_cluster::{Cluster, ClusterConfig};
use blis_engine::driver::IterWorkload;
use blis_engine::kv::offload::{LinkConfig, OffloadConfig};
use blis_engine::request::{Outcome, Request, RequestId};
use blis_engine::time::Micros;
use proptest::prelude::*;

use crate::harness::{Load, Recorder, instance, spec_blackbox};

/// Requests whose Poisson rate changes by phase: (req/s, seconds) each.
fn phases(phases: &[(f64, u64)], seed: u64) -> Vec<Request> {
    let mut out = Vec::new();
    let mut start = Micros::ZERO;
    for (k, &(rate, secs)) in phases.iter().enumerate() {
        let n = (rate * secs as f64) as u64;
        let load = Load { rate, requests: n, prompt: 256, output: 64, prefix: 0, groups: 1, seed: seed + k as u64 };
        let (reqs, _) = load.requests(None);
        for mut r in reqs.into_iter().filter(|r| r.arrival < Micros::from_secs(secs)) {
            r.arrival += start;
            r.id = RequestId(out.len() as u64);
            out.push(r);
        }
        start += Micros::from_secs(secs);
    }
    out
}

fn pool(name: &str, max_nodes: u32, per_node: u32, cost: f64, provisioning: Delay, loading: Delay) -> Pool {
    let nodes = Nodes {
        gpus_per_node: per_node,
        initial_nodes: 0,
        min_nodes: 0,
        max_nodes,
        cost_per_gpu_hour: Some(cost),
        provisioning_delay: provisioning,
        loading_delay: loading,
    };
    Pool {
        hardware: "H100".to_string(),
        replicas: Replicas::Autoscaled { group: 0, nodes },
        ..Pool::serving(name, 0, instance(4000, 16, 2048), spec_blackbox())
    }
}

/// A scaling group and the pools it sizes (the group's fields reachable as its own).
struct Auto {
    config: AutoscaleConfig,
    pools: Vec<Pool>,
}

impl std::ops::Deref for Auto {
    type Target = AutoscaleConfig;
    fn deref(&self) -> &AutoscaleConfig {
        &self.config
    }
}

impl std::ops::DerefMut for Auto {
    fn deref_mut(&mut self) -> &mut AutoscaleConfig {
        &mut self.config
    }
}

fn autoscale(policy: &str, params: serde_json::Value, min: u32, max: u32, pools: Vec<Pool>) -> Auto {
    let config = AutoscaleConfig {
        name: "autoscale".to_string(),
        initial_replicas: 0,
        policy: AutoscaleSpec::parse(policy, Some(&params), "autoscale").unwrap(),
        interval: Micros::from_secs(10),
        scrape_delay: Micros::from_secs(5),
        min_replicas: min,
        max_replicas: max,
        scale_up_window: Micros::ZERO,
        scale_down_window: Micros::from_secs(60),
        cooldown: Micros::ZERO,
        oscillation_window: Micros::from_secs(60),
        drain: DrainPolicy::Wait,
        warmup: Warmup::default(),
        seed: 7,
    };
    Auto { config, pools }
}

fn cluster_config(initial: u32, auto: Auto) -> ClusterConfig {
    cluster_config_scheduled(initial, auto, false)
}

/// [`cluster_config`], with or without async scheduling.
fn cluster_config_scheduled(initial: u32, auto: Auto, async_scheduling: bool) -> ClusterConfig {
    cluster_config_kv(initial, auto, async_scheduling, 4000, None)
}

/// [`cluster_config_scheduled`] with `blocks` KV blocks per replica (a
/// request takes 20) and a CPU tier of (blocks, bytes/s) below them.
fn cluster_config_kv(initial: u32, auto: Auto, async_scheduling: bool, blocks: u64, tier: Option<(u64, f64)>) -> ClusterConfig {
    let mut inst = instance(blocks, 16, 2048);
    inst.scheduler.async_scheduling = async_scheduling;
    inst.offload = tier
        .map(|(cpu_blocks, bytes_per_s)| OffloadConfig::native_cpu(cpu_blocks, 1 << 20, LinkConfig { bytes_per_s, latency: Micros(200) }));
    let Auto { mut config, pools } = auto;
    config.initial_replicas = initial;
    let pools = pools.into_iter().map(|p| Pool { instance: inst.clone(), ..p }).collect();
    ClusterConfig { scaling: vec![config], ..ClusterConfig::of(pools, PolicyBundle::default()) }
}

/// Follows every replica's phase from the trace, and checks each routing
/// decision against it.
#[derive(Default)]
struct Watch {
    phase: BTreeMap<u32, Phase>,
    route_while_warming: bool,
    routed_to_unready: Vec<(u32, Micros, Option<Phase>)>,
    first_routed: BTreeMap<u32, Micros>,
    decisions: Vec<(Micros, u32, u32, ScaleAction)>,
    /// Each decision's scaling group, when the fleet has several.
    groups: Vec<Option<String>>,
    transitions: Vec<(Micros, u32, Phase)>,
    most_counted: u32,
    lines: Vec<String>,
}

impl DecisionSink for Watch {
    fn admission(&mut self, _d: &AdmissionTrace<'_>) {}
    fn routing(&mut self, d: &RoutingTrace<'_>) {
        self.check_route(d);
        self.lines.push(format!("route {} {} {}", d.time.as_us(), d.request.id.0, d.chosen));
    }
    fn prefill_routing(&mut self, d: &RoutingTrace<'_>) {
        self.check_route(d);
        self.lines.push(format!("prefill {} {} {}", d.time.as_us(), d.request.id.0, d.chosen));
    }
    fn scale(&mut self, e: &ScaleTrace<'_>) {
        match e {
            ScaleTrace::Decision(d) => {
                self.decisions.push((d.time, d.current, d.desired, d.action));
                self.groups.push(d.group.clone());
                self.lines.push(serde_json::to_string(d).unwrap());
            }
            ScaleTrace::Replica(r) => {
                self.transitions.push((r.time, r.instance, r.phase));
                match r.phase {
                    Phase::Gone => self.phase.remove(&r.instance),
                    p => self.phase.insert(r.instance, p),
                };
                let counted = self.phase.values().filter(|&&p| p != Phase::Draining).count() as u32;
                self.most_counted = self.most_counted.max(counted);
                self.lines.push(serde_json::to_string(r).unwrap());
            }
        }
    }
}

impl Watch {
    /// A routing decision (of the decode or serving pools, or the prefill
    /// pool's) chose a replica that is up, among candidates that are up.
    fn check_route(&mut self, d: &RoutingTrace<'_>) {
        let phase = self.phase.get(&d.chosen).copied();
        let ok = phase == Some(Phase::Ready) || (phase == Some(Phase::Warming) && self.route_while_warming);
        if !ok {
            self.routed_to_unready.push((d.chosen, d.time, phase));
        }
        self.first_routed.entry(d.chosen).or_insert(d.time);
        assert!(
            d.snapshots.iter().all(|s| self.phase.get(&s.instance).is_some_and(|&p| p == Phase::Ready || p == Phase::Warming)),
            "a candidate that is not up"
        );
    }
}

struct Run {
    rec: Recorder,
    watch: Watch,
    report: serde_json::Value,
}

fn run(cfg: ClusterConfig, requests: Vec<Request>) -> Run {
    let initial = cfg.scaling.first().map_or(0, |a| a.initial_replicas);
    let route_while_warming = cfg.scaling.first().is_none_or(|a| a.warmup.route_while_warming);
    let mut watch = Watch { route_while_warming, ..Watch::default() };
    // The initial replicas are ready from the start.
    for i in 0..initial {
        watch.phase.insert(i, Phase::Ready);
    }
    let mut rec = Recorder::default();
    let mut cluster = Cluster::traced(cfg, &mut watch).unwrap_or_else(|e| panic!("{e}"));
    let end = cluster.run(&mut IterWorkload::new(requests.into_iter()), None, &mut rec);
    let summary = cluster.summary(&end);
    let report = serde_json::to_value(cluster.cluster_summary(&end, &summary, None)).unwrap();
    drop(cluster);
    Run { rec, watch, report }
}

/// Requests the gateway gave up on after [`blis_cluster::gateway::MAX_REROUTES`] evictions.
fn given_up(rec: &Recorder) -> usize {
    rec.records.iter().filter(|r| r.outcome == Outcome::Rejected("reroute_limit")).count()
}

/// Every request ends exactly once.
fn assert_each_once(requests: usize, rec: &Recorder) {
    let mut ids: Vec<u64> = rec.records.iter().map(|r| r.id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((ids.len(), rec.records.len()), (requests, requests), "a request was lost or ended twice");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every policy and drain, on replicas whose KV holds from two requests
    /// to hundreds, with a CPU tier or without (evictions then meet loads in
    /// flight): the bounds hold, no request is lost or reaches a replica
    /// before it is up.
    #[test]
    fn bounds_hold_no_request_is_lost_and_none_reaches_a_replica_before_it_is_up(
        policy in prop::sample::select(vec!["threshold", "target-tracking", "queue-depth", "slo", "oscillator"]),
        drain in prop::sample::select(vec![DrainPolicy::Wait, DrainPolicy::Immediate, DrainPolicy::Redirect]),
        min in 0u32..2,
        extra in 0u32..4,
        loading_s in 0u64..20,
        warm_s in 0u64..15,
        route_while_warming in any::<bool>(),
        async_scheduling in any::<bool>(),
        seed in 0u64..1000,
        blocks in prop::sample::select(vec![40u64, 60, 100, 200, 4000]),
        tier in prop::option::of((1u64..200, 1e7f64..1e11)),
    ) {
        let max = (min + extra).max(1);
        let mut auto = autoscale(policy, serde_json::json!({}), min, max, vec![pool("p", max, 1, 2.0, Delay::Fixed(Micros::from_secs(3)), Delay::Fixed(Micros::from_secs(loading_s)))]);
        auto.drain = drain;
        auto.warmup = Warmup { duration: Span(Micros::from_secs(warm_s)), slowdown: 1.5, route_while_warming };
        if policy == "oscillator" {
            auto.scale_down_window = Micros::ZERO;
        }
        let requests = phases(&[(2.0, 40), (40.0, 40), (1.0, 60), (30.0, 30)], seed);
        let n = requests.len();
        let out = run(cluster_config_kv(min.max(1), auto, async_scheduling, blocks, tier), requests);
        assert_each_once(n, &out.rec);
        prop_assert!(out.watch.routed_to_unready.is_empty(), "routed before ready: {:?}", &out.watch.routed_to_unready[..1]);
        prop_assert!(out.watch.most_counted <= max, "{} replicas counted, max {max}", out.watch.most_counted);
        for &(t, _, desired, _) in &out.watch.decisions {
            prop_assert!((min..=max).contains(&desired), "desired {desired} at {t}");
        }
        let a = &out.report["autoscaling"];
        // Each request completes, unless immediate drains evicted it past the
        // gateway's retry budget (a fleet torn down faster than it finishes).
        let gave_up = given_up(&out.rec);
        prop_assert!(gave_up == 0 || drain == DrainPolicy::Immediate, "{gave_up} given up without immediate drains");
        prop_assert!(out.rec.records.iter().all(|r| r.outcome == Outcome::Completed || r.outcome == Outcome::Rejected("reroute_limit")));
        prop_assert_eq!(out.report["requests"]["completed"].as_u64(), Some((n - gave_up) as u64));
        prop_assert_eq!(a["scale_ups"].as_u64().unwrap() + a["scale_downs"].as_u64().unwrap(),
            out.watch.decisions.iter().filter(|d| d.3 != ScaleAction::None).count() as u64);
    }
}

/// A fleet of at most one replica, torn down every other tick with
/// everything aborted (oscillator, immediate drain, scale to zero), whose
/// replica takes longer to load and warm than a tick: nothing ever finishes,
/// and without a retry budget the run never ended (it grew until the
/// machine ran out of memory). Each request is now given up after
/// MAX_REROUTES evictions and the run ends.
#[test]
fn a_fleet_torn_down_faster_than_it_finishes_still_ends_its_run() {
    let mut auto = autoscale(
        "oscillator",
        serde_json::json!({}),
        0,
        1,
        vec![pool("p", 1, 1, 2.0, Delay::Fixed(Micros::from_secs(3)), Delay::Fixed(Micros::from_secs(16)))],
    );
    auto.drain = DrainPolicy::Immediate;
    auto.warmup = Warmup { duration: Span(Micros::from_secs(11)), slowdown: 1.5, route_while_warming: false };
    auto.scale_down_window = Micros::ZERO;
    let requests = phases(&[(2.0, 40), (40.0, 40), (1.0, 60), (30.0, 30)], 461);
    let n = requests.len();
    let out = run(cluster_config(1, auto), requests);
    assert_each_once(n, &out.rec);
    let gave_up = given_up(&out.rec);
    assert!(gave_up > 0, "the livelock is what this case is about");
    assert_eq!(out.report["requests"]["completed"].as_u64(), Some((n - gave_up) as u64));
}

#[test]
fn a_cold_start_takes_exactly_the_provisioning_and_loading_delay() {
    // Scaled to zero: the first request waits at the gateway, wakes the
    // autoscaler, and is routed the moment the new replica is ready.
    let provisioning = Delay::parse("uniform:30s,90s").unwrap();
    let auto = autoscale(
        "target-tracking",
        serde_json::json!({}),
        0,
        2,
        vec![pool("p", 2, 1, 3.0, provisioning, Delay::Fixed(Micros::from_secs(12)))],
    );
    let requests = phases(&[(0.5, 60)], 3);
    let n = requests.len();
    let out = run(cluster_config(0, auto), requests);
    assert_each_once(n, &out.rec);
    let w = &out.watch;
    let (decided, _, _, action) = w.decisions[0];
    assert_eq!(action, ScaleAction::Up(1));
    let phase_at = |p: Phase| w.transitions.iter().find(|t| t.1 == 0 && t.2 == p).map(|t| t.0).unwrap();
    let provisioned = phase_at(Phase::Loading) - decided;
    assert!((Micros::from_secs(30)..=Micros::from_secs(90)).contains(&provisioned), "{provisioned:?}");
    assert_eq!(phase_at(Phase::Ready) - phase_at(Phase::Loading), Micros::from_secs(12));
    assert_eq!(w.first_routed[&0] - decided, provisioned + Micros::from_secs(12), "decision → first routed request");
    let a = &out.report["autoscaling"];
    assert_eq!(a["cold_starts"], 1);
    assert!(a["held_requests"].as_u64().unwrap() >= 1);
}

#[test]
fn the_oscillator_is_caught_and_a_stabilised_policy_is_not() {
    let requests = || phases(&[(2.0, 100), (40.0, 100), (2.0, 200)], 11);
    let pools = || vec![pool("p", 6, 1, 2.0, Delay::Fixed(Micros::from_secs(2)), Delay::Fixed(Micros::from_secs(5)))];
    let mut osc = autoscale("oscillator", serde_json::json!({}), 1, 6, pools());
    osc.scale_down_window = Micros::ZERO;
    let out = run(cluster_config(1, osc), requests());
    let a = &out.report["autoscaling"];
    assert!(a["oscillations"].as_u64().unwrap() * 2 >= a["decisions"].as_u64().unwrap(), "{a}");
    assert_eq!(out.report["anomalies"]["scale_oscillations"], a["oscillations"]);

    let tracking = autoscale("target-tracking", serde_json::json!({"metric": "running", "target": 8}), 1, 6, pools());
    let out = run(cluster_config(1, tracking), requests());
    let a = &out.report["autoscaling"];
    assert!(a["scale_ups"].as_u64().unwrap() >= 1 && a["scale_downs"].as_u64().unwrap() >= 1, "it scaled both ways: {a}");
    assert_eq!(a["oscillations"], 0, "{a}");
}

#[test]
fn autoscaled_runs_are_deterministic() {
    let build = || {
        let mut auto = autoscale(
            "queue-depth",
            serde_json::json!({"target_per_replica": 2}),
            1,
            5,
            vec![pool("p", 5, 1, 2.0, Delay::parse("lognormal:20s,0.5").unwrap(), Delay::parse("uniform:5s,15s").unwrap())],
        );
        auto.drain = DrainPolicy::Immediate;
        cluster_config(2, auto)
    };
    let requests = || phases(&[(5.0, 60), (50.0, 60), (3.0, 120)], 5);
    let (a, b) = (run(build(), requests()), run(build(), requests()));
    assert_eq!(a.report, b.report);
    assert_eq!(a.watch.lines, b.watch.lines);
    assert_eq!(format!("{:?}", a.rec.records), format!("{:?}", b.rec.records));
}

#[test]
fn an_immediate_drain_moves_requests_and_loses_none() {
    let mut osc = autoscale(
        "oscillator",
        serde_json::json!({}),
        1,
        3,
        vec![pool("p", 3, 1, 2.0, Delay::Fixed(Micros::ZERO), Delay::Fixed(Micros::from_secs(1)))],
    );
    osc.scale_down_window = Micros::ZERO;
    osc.drain = DrainPolicy::Immediate;
    let requests = phases(&[(60.0, 60)], 2);
    let n = requests.len();
    let out = run(cluster_config(2, osc), requests);
    assert_each_once(n, &out.rec);
    assert!(out.report["autoscaling"]["rerouted_requests"].as_u64().unwrap() > 0);
    assert_eq!(out.report["requests"]["completed"].as_u64(), Some(n as u64));
}

#[test]
fn scale_ups_fill_the_cheapest_pool_first_and_cost_is_gpu_time_times_price() {
    let none = Delay::Fixed(Micros::ZERO);
    let pools = vec![pool("dear", 4, 2, 5.0, none, none), pool("cheap", 1, 2, 1.0, none, none)];
    let auto = autoscale("target-tracking", serde_json::json!({"metric": "running", "target": 2}), 1, 6, pools);
    let out = run(cluster_config(1, auto), phases(&[(40.0, 120)], 9));
    let a = &out.report["autoscaling"];
    let pool_of = |name: &str| a["pools"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone();
    let (cheap, dear) = (pool_of("cheap"), pool_of("dear"));
    // The cheap pool holds 2 replicas (one node of 2 GPUs); the initial one went there too.
    assert_eq!(cheap["replicas_started"], 2, "{a}");
    assert!(dear["replicas_started"].as_u64().unwrap() >= 1, "{a}");
    for p in [&cheap, &dear] {
        let (hours, price) = (p["gpu_hours"].as_f64().unwrap(), if p["name"] == "cheap" { 1.0 } else { 5.0 });
        assert!((p["cost"].as_f64().unwrap() - hours * price).abs() < 1e-9);
    }
    let total = cheap["cost"].as_f64().unwrap() + dear["cost"].as_f64().unwrap();
    assert!((a["cost"].as_f64().unwrap() - total).abs() < 1e-9);
    // Nodes bill whole: the cheap pool's node (2 GPUs) was up the whole run.
    let last_s = out.rec.records.iter().map(|r| r.finished).max().unwrap().as_secs_f64();
    assert!(cheap["gpu_hours"].as_f64().unwrap() * 3600.0 >= 2.0 * last_s * 0.999, "{cheap}");
}

/// A disaggregated fleet whose prefill and decode pools are each sized by
/// their own scaling group (`prefill`, `decode`), `initial` replicas each
/// to start, on replicas of `blocks` KV blocks; the decode pool pulls
/// prompts over a link of `bytes_per_s`.
fn pd_autoscaled(prefill: Auto, decode: Auto, initial: (u32, u32), blocks: u64, bytes_per_s: f64) -> ClusterConfig {
    use blis_cluster::fleet::Role;
    use blis_engine::kv::transfer::{KvTransferConfig, LinkConfig as TransferLink};
    let mut pools = Vec::new();
    let mut scaling = Vec::new();
    for (g, (auto, role, n)) in [(prefill, Role::Prefill, initial.0), (decode, Role::Decode, initial.1)].into_iter().enumerate() {
        let Auto { mut config, pools: group } = auto;
        config.initial_replicas = n;
        config.name = role.name().to_string();
        config.seed += g as u64;
        scaling.push(config);
        for p in group {
            let mut inst = instance(blocks, 16, 2048);
            if role == Role::Decode {
                inst.kv_transfer = Some(KvTransferConfig { link: TransferLink { bytes_per_s, latency: Micros(100) }, block_bytes: 4096 });
            }
            let Replicas::Autoscaled { nodes, .. } = p.replicas else { unreachable!("autoscale() pools are autoscaled") };
            pools.push(Pool {
                name: format!("{}-{}", role.name(), p.name),
                role,
                instance: inst,
                replicas: Replicas::Autoscaled { group: g, nodes },
                ..p
            });
        }
    }
    ClusterConfig { scaling, pd: Some(crate::harness::always(true)), ..ClusterConfig::of(pools, PolicyBundle::default()) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Autoscaled P/D: each pool its own policy (the SLA planner among
    /// them), drain and delays, scaling up and down through phases of
    /// load, replicas whose KV holds from a few requests to hundreds: every
    /// request ends exactly once, no request (nor its prefill) reaches a
    /// replica before it is up, each group stays in its bounds, and no KV
    /// block outlives its request on either side.
    #[test]
    fn autoscaled_prefill_and_decode_pools_keep_every_invariant(
        policies in (
            prop::sample::select(vec!["sla-planner", "threshold", "target-tracking", "queue-depth", "oscillator"]),
            prop::sample::select(vec!["sla-planner", "threshold", "target-tracking", "queue-depth", "oscillator"]),
        ),
        drains in (
            prop::sample::select(vec![DrainPolicy::Wait, DrainPolicy::Immediate, DrainPolicy::Redirect]),
            prop::sample::select(vec![DrainPolicy::Wait, DrainPolicy::Immediate, DrainPolicy::Redirect]),
        ),
        bounds in ((0u32..2, 1u32..4), (1u32..2, 1u32..5)),
        loading_s in (0u64..15, 0u64..15),
        seed in 0u64..1000,
        blocks in prop::sample::select(vec![60u64, 200, 4000]),
        bytes_per_s in 1e7f64..1e10,
    ) {
        let ((pmin, pextra), (dmin, dextra)) = bounds;
        let (pmax, dmax) = (pmin + pextra, dmin + dextra);
        let group = |policy: &str, drain, min, max, loading_s| {
            let mut a = autoscale(policy, serde_json::json!({}), min, max, vec![pool("p", max, 1, 2.0, Delay::Fixed(Micros::from_secs(2)), Delay::Fixed(Micros::from_secs(loading_s)))]);
            a.drain = drain;
            a.interval = Micros::from_secs(5);
            a.scrape_delay = Micros::from_secs(1);
            if policy == "oscillator" {
                a.scale_down_window = Micros::ZERO;
            }
            a
        };
        let prefill = group(policies.0, drains.0, pmin, pmax, loading_s.0);
        let decode = group(policies.1, drains.1, dmin, dmax, loading_s.1);
        let cfg = pd_autoscaled(prefill, decode, (pmin.max(1), dmin), blocks, bytes_per_s);
        let requests = phases(&[(2.0, 20), (30.0, 20), (1.0, 30), (20.0, 15)], seed);
        let n = requests.len();
        let initial = pmin.max(1) + dmin;
        let mut watch = Watch { route_while_warming: true, ..Watch::default() };
        for i in 0..initial {
            watch.phase.insert(i, Phase::Ready);
        }
        let mut rec = Recorder::default();
        let mut cluster = Cluster::traced(cfg, &mut watch).unwrap_or_else(|e| panic!("{e}"));
        let end = cluster.run(&mut IterWorkload::new(requests.into_iter()), None, &mut rec);
        let summary = cluster.summary(&end);
        prop_assert_eq!((summary.requests.queued, summary.requests.running), (0, 0));
        for inst in cluster.instances() {
            prop_assert_eq!((inst.held_kv(), inst.kv().num_used_blocks()), (0, 0), "instance {} keeps blocks", inst.id());
            inst.assert_consistent();
        }
        drop(cluster);
        assert_each_once(n, &rec);
        prop_assert!(watch.routed_to_unready.is_empty(), "routed before ready: {:?}", &watch.routed_to_unready[..1]);
        for (&(t, _, desired, _), g) in watch.decisions.iter().zip(&watch.groups) {
            let (min, max) = match g.as_deref() {
                Some("prefill") => (pmin, pmax),
                Some("decode") => (dmin, dmax),
                other => panic!("a decision of group {other:?}"),
            };
            prop_assert!((min..=max).contains(&desired), "{g:?} desired {desired} at {t}");
        }
        let gave_up = given_up(&rec);
        prop_assert!(gave_up == 0 || drains.0 == DrainPolicy::Immediate || drains.1 == DrainPolicy::Immediate);
    }
}
