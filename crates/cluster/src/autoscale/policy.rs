//! Autoscaling policies: what the replica count should be, from what a
//! real autoscaler can see (cluster-policy-plan §D.7): the deployment's
//! size and bounds, aggregate metrics scraped a while ago, and its own
//! history. A policy returns a desired count; the autoscaler then applies
//! the bounds, the stabilisation windows and the cooldown.
//!
//! Templates (parameters in parentheses):
//!
//! * `threshold` (metric, scale_up, scale_down, step): one step up when the
//!   metric is above `scale_up`, one step down below `scale_down`;
//! * `target-tracking` (metric, target, tolerance): Kubernetes HPA,
//!   `desired = ⌈current × metric / target⌉`, unchanged while
//!   `|metric / target − 1| ≤ tolerance`; replicas not yet routable count
//!   as HPA counts pods without metrics (0 % of the target when scaling
//!   up, 100 % when scaling down);
//! * `queue-depth` (target_per_replica): KEDA's queue scaler,
//!   `desired = ⌈waiting requests (at the replicas and the gateway) / target⌉`;
//! * `slo` (ttft_ms, scale_up_at, scale_down_at): one up when the latency
//!   model predicts a request arriving now misses `ttft_ms × scale_up_at` at
//!   the least-loaded replica, one down when it would meet
//!   `ttft_ms × scale_down_at`;
//! * `sla-planner` (ttft_ms, itl_ms, correction): Dynamo's SLA planner. From
//!   the interval's request rate, mean prompt (ISL) and output (OSL)
//!   lengths, it sizes a prefill pool to carry `rate × T_prefill(ISL)` of
//!   prefill time at the utilization the TTFT target allows (M/D/1:
//!   `T + ρT/(2(1−ρ)) ≤ ttft_ms`), a decode pool to carry `rate × OSL`
//!   tokens/s at the best per-replica throughput whose inter-token latency
//!   meets `itl_ms` at context `ISL + OSL/2` (seats and KV bound the batch),
//!   a serving pool both; the pool's latency model is its profile
//!   ([`super::PoolProfile`]), and with `correction` (Dynamo's correction
//!   factors) the observed TTFT and ITL over the profile's scale them;
//! * `fixed`: keeps the count (a static fleet whose capacity and cost are
//!   accounted like an autoscaled one's);
//! * `oscillator` (pathological): up one tick, down the next.
//!
//! Metrics of `threshold` and `target-tracking`: `saturation` (the default:
//! mean over replicas of the fuller of their two resources, KV blocks in use
//! and batch seats taken, `max(kv_utilization, running ÷ max_num_seqs)`),
//! `kv-utilization` (mean fraction of KV blocks in use), `queue-depth`
//! (mean waiting requests per replica), `running` (mean running requests
//! per replica).

use blis_engine::latency::BatchEntry;
use serde::{Deserialize, Serialize};

use super::PoolProfile;
use crate::error::ConfigError;
use crate::fleet::Role;
use crate::policy::{NoParams, check, policy_kind};

/// The aggregate metrics of one scrape.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScaleMetrics {
    /// When they were read.
    #[serde(skip)]
    pub at: blis_engine::time::Micros,
    /// Mean over the routable replicas of max(KV utilisation, running ÷ max_num_seqs).
    pub saturation: f64,
    /// Mean fraction of KV blocks in use over the routable replicas.
    pub kv_utilization: f64,
    /// Mean requests waiting per ready replica.
    pub queue_depth: f64,
    /// Mean requests running per ready replica.
    pub running: f64,
    /// Requests waiting at the gateway for a replica.
    pub held: u32,
    /// Requests waiting anywhere: at the replicas and at the gateway.
    pub waiting: u32,
    /// Arrivals per second since the previous scrape.
    pub request_rate: f64,
    /// Requests that met their SLO over those that ended since the previous scrape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_attainment: Option<f64>,
    /// Mean TTFT of the requests that got their first token since the previous scrape, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_mean_ms: Option<f64>,
    /// The latency model's TTFT for a request of the interval's mean prompt
    /// arriving now at the least-loaded routable replica, ms (none routable: absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_ttft_ms: Option<f64>,
}

/// The traffic of the interval before a scrape, as a frontend's metrics
/// give it: what a planner sizes pools from.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Traffic {
    /// The interval, seconds.
    pub interval_s: f64,
    /// Requests that arrived in it.
    pub requests: u64,
    /// Their mean prompt length, tokens (the last interval's with none).
    pub prompt_tokens_mean: f64,
    /// Mean output length of the requests completed in it, tokens.
    pub output_tokens_mean: Option<f64>,
    /// Mean TTFT of the first tokens in it, ms.
    pub ttft_mean_ms: Option<f64>,
    /// Mean inter-token latency (time per output token after the first) of
    /// the requests completed in it, ms.
    pub itl_mean_ms: Option<f64>,
}

/// What a policy sees at a tick.
#[derive(Copy, Clone, Debug)]
pub struct ScaleContext {
    /// Replicas counted: coming up or ready, not draining.
    pub current: u32,
    /// Of which ready.
    pub ready: u32,
    /// Fewest replicas allowed.
    pub min: u32,
    /// Most replicas allowed.
    pub max: u32,
    /// The latest scrape the autoscaler has (taken `scrape_delay` ago).
    pub metrics: ScaleMetrics,
    /// The traffic of the interval before that scrape.
    pub traffic: Traffic,
    /// Ticks so far (0 at the first).
    pub tick: u64,
}

/// Decides the replica count at each tick.
pub trait AutoscalePolicy {
    /// The desired number of replicas, before bounds, stabilisation and cooldown.
    fn evaluate(&mut self, cx: &ScaleContext) -> u32;
}

/// The per-replica signal a threshold or target-tracking policy follows.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Signal {
    /// Mean of max(KV utilisation, running ÷ max_num_seqs).
    #[default]
    Saturation,
    /// Mean fraction of KV blocks in use.
    KvUtilization,
    /// Mean waiting requests per replica.
    QueueDepth,
    /// Mean running requests per replica.
    Running,
}

impl Signal {
    fn of(self, m: &ScaleMetrics) -> f64 {
        match self {
            Signal::Saturation => m.saturation,
            Signal::KvUtilization => m.kv_utilization,
            Signal::QueueDepth => m.queue_depth,
            Signal::Running => m.running,
        }
    }
}

/// Parameters of `threshold`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdParams {
    /// The signal.
    pub metric: Signal,
    /// Scale up above this value.
    pub scale_up: f64,
    /// Scale down below this value.
    pub scale_down: f64,
    /// Replicas added or removed per decision.
    pub step: u32,
}

impl Default for ThresholdParams {
    fn default() -> Self {
        ThresholdParams { metric: Signal::Saturation, scale_up: 0.8, scale_down: 0.3, step: 1 }
    }
}

/// Parameters of `target-tracking`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetParams {
    /// The signal.
    pub metric: Signal,
    /// Its target value per replica.
    pub target: f64,
    /// No change while the ratio to the target is within 1 ± this (HPA's default 0.1).
    pub tolerance: f64,
}

impl Default for TargetParams {
    fn default() -> Self {
        TargetParams { metric: Signal::Saturation, target: 0.6, tolerance: 0.1 }
    }
}

/// Parameters of `queue-depth`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueParams {
    /// Waiting requests one replica should have.
    pub target_per_replica: f64,
}

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams { target_per_replica: 8.0 }
    }
}

/// Parameters of `slo`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SloParams {
    /// The TTFT target, ms.
    pub ttft_ms: f64,
    /// Scale up when the predicted TTFT reaches this fraction of the target.
    pub scale_up_at: f64,
    /// Scale down when it is below this fraction of the target.
    pub scale_down_at: f64,
}

impl Default for SloParams {
    fn default() -> Self {
        SloParams { ttft_ms: 1000.0, scale_up_at: 1.0, scale_down_at: 0.3 }
    }
}

/// Parameters of `sla-planner`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerParams {
    /// The TTFT target, ms: sizes prefill (and serving) pools.
    pub ttft_ms: f64,
    /// The inter-token latency target, ms: sizes decode (and serving) pools.
    pub itl_ms: f64,
    /// Whether the observed TTFT and ITL over the profile's correct the
    /// profile (Dynamo's correction factors).
    pub correction: bool,
}

impl Default for PlannerParams {
    fn default() -> Self {
        PlannerParams { ttft_ms: 500.0, itl_ms: 50.0, correction: true }
    }
}

policy_kind! {
    /// An autoscaling template and its parameters.
    AutoscaleSpec {
        /// Step up or down at thresholds.
        "threshold" => Threshold(ThresholdParams),
        /// Kubernetes HPA target tracking.
        "target-tracking" => TargetTracking(TargetParams),
        /// KEDA-style queue length per replica.
        "queue-depth" => QueueDepth(QueueParams),
        /// Predicted TTFT against a target.
        "slo" => Slo(SloParams),
        /// Dynamo's SLA planner: replicas from demand and the pool's profile.
        "sla-planner" => SlaPlanner(PlannerParams),
        /// The count stays as it is.
        "fixed" => Fixed(NoParams),
        /// Pathological: up, down, up, ...
        "oscillator" => Oscillator(NoParams),
    }
}

impl AutoscaleSpec {
    /// Validates the parameters and builds the policy for the pools
    /// `profile` describes; `path` locates the section in errors.
    pub fn build(&self, path: &str, profile: &PoolProfile) -> Result<Box<dyn AutoscalePolicy>, ConfigError> {
        let p = format!("{path}.params");
        let finite = |field: &str, v: f64| check(v.is_finite() && v >= 0.0, &p, field, v, "a finite number ≥ 0");
        Ok(match self {
            AutoscaleSpec::Threshold(q) => {
                finite("scale_up", q.scale_up)?;
                finite("scale_down", q.scale_down)?;
                check(q.scale_down < q.scale_up, &p, "scale_down", q.scale_down, &format!("below scale_up ({})", q.scale_up))?;
                check(q.step >= 1, &p, "step", q.step, "at least 1")?;
                Box::new(Threshold(q.clone()))
            }
            AutoscaleSpec::TargetTracking(q) => {
                check(q.target.is_finite() && q.target > 0.0, &p, "target", q.target, "a positive finite number")?;
                check(q.tolerance.is_finite() && (0.0..1.0).contains(&q.tolerance), &p, "tolerance", q.tolerance, "in [0, 1)")?;
                Box::new(TargetTracking(q.clone()))
            }
            AutoscaleSpec::QueueDepth(q) => {
                check(
                    q.target_per_replica.is_finite() && q.target_per_replica > 0.0,
                    &p,
                    "target_per_replica",
                    q.target_per_replica,
                    "a positive finite number",
                )?;
                Box::new(QueueDepth(q.clone()))
            }
            AutoscaleSpec::Slo(q) => {
                check(q.ttft_ms.is_finite() && q.ttft_ms > 0.0, &p, "ttft_ms", q.ttft_ms, "a positive finite number")?;
                finite("scale_up_at", q.scale_up_at)?;
                finite("scale_down_at", q.scale_down_at)?;
                check(
                    q.scale_down_at < q.scale_up_at,
                    &p,
                    "scale_down_at",
                    q.scale_down_at,
                    &format!("below scale_up_at ({})", q.scale_up_at),
                )?;
                Box::new(Slo(q.clone()))
            }
            AutoscaleSpec::SlaPlanner(q) => {
                check(q.ttft_ms.is_finite() && q.ttft_ms > 0.0, &p, "ttft_ms", q.ttft_ms, "a positive finite number")?;
                check(q.itl_ms.is_finite() && q.itl_ms > 0.0, &p, "itl_ms", q.itl_ms, "a positive finite number")?;
                Box::new(SlaPlanner::new(q.clone(), profile.clone()))
            }
            AutoscaleSpec::Fixed(_) => Box::new(Fixed),
            AutoscaleSpec::Oscillator(_) => Box::new(Oscillator),
        })
    }
}

struct Threshold(ThresholdParams);

impl AutoscalePolicy for Threshold {
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        let v = self.0.metric.of(&cx.metrics);
        if cx.metrics.held > 0 || v > self.0.scale_up {
            cx.current.saturating_add(self.0.step)
        } else if v < self.0.scale_down {
            cx.current.saturating_sub(self.0.step)
        } else {
            cx.current
        }
    }
}

struct TargetTracking(TargetParams);

impl AutoscalePolicy for TargetTracking {
    /// As Kubernetes HPA counts replicas without metrics (here: not yet
    /// routable): at 0 % of the target when scaling up, at 100 % when
    /// scaling down, so replicas still coming up damp the reaction.
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        if cx.current == 0 {
            return u32::from(cx.metrics.held > 0);
        }
        let (target, ready, current) = (self.0.target, f64::from(cx.ready.min(cx.current)), f64::from(cx.current));
        let metric = self.0.metric.of(&cx.metrics);
        let unready_at = if metric > target { 0.0 } else { target };
        let ratio = (metric * ready + unready_at * (current - ready)) / (current * target);
        if (ratio - 1.0).abs() <= self.0.tolerance { cx.current } else { (current * ratio).ceil().min(f64::from(u32::MAX)) as u32 }
    }
}

struct QueueDepth(QueueParams);

impl AutoscalePolicy for QueueDepth {
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        (f64::from(cx.metrics.waiting) / self.0.target_per_replica).ceil().min(f64::from(u32::MAX)) as u32
    }
}

struct Slo(SloParams);

impl AutoscalePolicy for Slo {
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        match cx.metrics.predicted_ttft_ms {
            _ if cx.metrics.held > 0 => cx.current + 1,
            // Nothing routable to predict from: wait for what is coming up.
            None => cx.current,
            Some(p) if p >= self.0.ttft_ms * self.0.scale_up_at => cx.current + 1,
            Some(p) if p < self.0.ttft_ms * self.0.scale_down_at => cx.current.saturating_sub(1),
            Some(_) => cx.current,
        }
    }
}

/// Dynamo's SLA planner on one pool's profile.
struct SlaPlanner {
    params: PlannerParams,
    profile: PoolProfile,
    /// The last output length seen (a decode pool's demand needs one).
    osl: Option<f64>,
    scratch: Vec<BatchEntry>,
}

/// The least utilization a planner allows a prefill replica, however tight
/// the TTFT target (a target below one prefill's time cannot be met by adding replicas).
const MIN_PREFILL_UTILIZATION: f64 = 0.05;

impl SlaPlanner {
    fn new(params: PlannerParams, profile: PoolProfile) -> SlaPlanner {
        SlaPlanner { params, profile, osl: None, scratch: Vec::new() }
    }

    /// Prefill replicas, fractional, for `rate` requests/s of `isl` tokens.
    fn prefill_replicas(&self, rate: f64, isl: f64, t: &Traffic) -> f64 {
        let service_us = self.profile.prefill_us(isl.round().max(1.0) as u32);
        // Dynamo: the correction only lowers the load (prefix hits make prefills shorter).
        let correction = match (self.params.correction, t.ttft_mean_ms) {
            (true, Some(observed)) if service_us > 0.0 => (observed * 1e3 / service_us).min(1.0),
            _ => 1.0,
        };
        // M/D/1: T + ρT / (2(1 − ρ)) ≤ target.
        let (service, target) = (service_us / 1e3, self.params.ttft_ms);
        let utilization = (2.0 * (target - service) / (2.0 * target - service)).clamp(MIN_PREFILL_UTILIZATION, 1.0);
        rate * service_us / 1e6 * correction / utilization
    }

    /// Decode replicas, fractional, for `rate` requests/s of `osl` output
    /// tokens at context `isl + osl/2`, with `running` requests per replica now.
    fn decode_replicas(&mut self, rate: f64, (isl, osl): (f64, f64), running: f64, t: &Traffic) -> f64 {
        let context = (isl + osl / 2.0).round().max(1.0) as u32;
        let correction = match (self.params.correction, t.itl_mean_ms) {
            (true, Some(observed)) if running >= 1.0 => {
                let expected = self.profile.decode_step_us(running.round() as u32, context, &mut self.scratch) / 1e3;
                if expected > 0.0 { observed / expected } else { 1.0 }
            }
            _ => 1.0,
        };
        let target_us = self.params.itl_ms * 1e3 / correction.max(1e-3);
        // The largest batch whose step meets the target: the best throughput per replica.
        let (mut lo, mut hi) = (1u32, self.profile.max_decodes(context));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.profile.decode_step_us(mid, context, &mut self.scratch) <= target_us { lo = mid } else { hi = mid - 1 }
        }
        let tokens_per_s = f64::from(lo) / (self.profile.decode_step_us(lo, context, &mut self.scratch) / 1e6);
        rate * osl / tokens_per_s
    }
}

impl AutoscalePolicy for SlaPlanner {
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        let t = &cx.traffic;
        if let Some(osl) = t.output_tokens_mean {
            self.osl = Some(osl);
        }
        if cx.metrics.held > 0 && cx.current == 0 {
            return 1;
        }
        if t.interval_s <= 0.0 {
            return cx.current;
        }
        let rate = t.requests as f64 / t.interval_s;
        let isl = t.prompt_tokens_mean;
        let needed = match (self.profile.role, self.osl) {
            (Role::Prefill, _) => self.prefill_replicas(rate, isl, t),
            // Until a request completes the output length is unknown: keep the decode side as it is.
            (Role::Decode | Role::Serve, None) if rate > 0.0 => return cx.current,
            (Role::Decode | Role::Serve, None) => 0.0,
            (Role::Decode, Some(osl)) => self.decode_replicas(rate, (isl, osl), cx.metrics.running, t),
            (Role::Serve, Some(osl)) => self.prefill_replicas(rate, isl, t) + self.decode_replicas(rate, (isl, osl), cx.metrics.running, t),
        };
        needed.ceil().min(f64::from(u32::MAX)) as u32
    }
}

struct Fixed;

impl AutoscalePolicy for Fixed {
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        cx.current
    }
}

struct Oscillator;

impl AutoscalePolicy for Oscillator {
    fn evaluate(&mut self, cx: &ScaleContext) -> u32 {
        if cx.tick.is_multiple_of(2) { cx.current + 1 } else { cx.current.saturating_sub(1) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::latency::Blackbox;
    use blis_engine::scheduler::InstanceConfig;

    /// 1 ms a step, 10 µs a prefill token, 100 µs a decode; 256 seats, a token budget of 2048.
    fn profile(role: Role) -> PoolProfile {
        PoolProfile {
            role,
            latency: std::sync::Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 10.0, 100.0] }),
            instance: InstanceConfig::basic(256, 2048, 8192, 100_001),
        }
    }

    fn cx(current: u32, kv: f64, waiting: u32) -> ScaleContext {
        ScaleContext {
            current,
            ready: current,
            min: 1,
            max: 10,
            metrics: ScaleMetrics {
                saturation: kv,
                kv_utilization: kv,
                waiting,
                predicted_ttft_ms: Some(100.0),
                ..ScaleMetrics::default()
            },
            traffic: Traffic::default(),
            tick: 0,
        }
    }

    fn planner(role: Role, params: serde_json::Value) -> Box<dyn AutoscalePolicy> {
        AutoscaleSpec::parse("sla-planner", Some(&params), "autoscale").unwrap().build("autoscale", &profile(role)).unwrap()
    }

    /// 20 req/s of 1000-token prompts and 100-token answers over a 30 s interval.
    fn traffic(ttft_ms: Option<f64>, itl_ms: Option<f64>) -> Traffic {
        Traffic {
            interval_s: 30.0,
            requests: 600,
            prompt_tokens_mean: 1000.0,
            output_tokens_mean: Some(100.0),
            ttft_mean_ms: ttft_ms,
            itl_mean_ms: itl_ms,
        }
    }

    /// Prefill: a 1000-token prompt takes 11 ms alone; at 20 req/s that is
    /// 0.22 replicas of work, at the utilization a 25 ms target allows under
    /// M/D/1 (2(25 − 11)/(50 − 11) = 0.718): ⌈0.306⌉ = 1; at 200 req/s ⌈3.06⌉.
    /// Decode: steps of 1 ms + 0.1 ms a request meet a 30 ms target up to 290
    /// in a batch, but 256 seats cap it: 256 tokens per 26.6 ms, 9 624
    /// tokens/s; 2 000 tokens/s need ⌈0.208⌉ = 1 replica, 10× the load ⌈2.08⌉ = 3.
    #[test]
    fn the_planner_sizes_prefill_for_ttft_and_decode_for_itl() {
        let params = serde_json::json!({"ttft_ms": 25, "itl_ms": 30, "correction": false});
        let mut p = planner(Role::Prefill, params.clone());
        let mut d = planner(Role::Decode, params.clone());
        let at = |t: Traffic| ScaleContext { traffic: t, ..cx(2, 0.0, 0) };
        assert_eq!((p.evaluate(&at(traffic(None, None))), d.evaluate(&at(traffic(None, None)))), (1, 1));
        let busy = Traffic { requests: 6000, ..traffic(None, None) };
        assert_eq!((p.evaluate(&at(busy)), d.evaluate(&at(busy))), (4, 3));
        // A serving pool does both on the same replicas.
        let mut s = planner(Role::Serve, params);
        assert_eq!(s.evaluate(&at(busy)), 6, "⌈3.06 + 2.08⌉");
        // No traffic: none needed (the bounds keep the minimum).
        let idle = Traffic { requests: 0, ..traffic(None, None) };
        assert_eq!(d.evaluate(&at(idle)), 0);
    }

    /// Dynamo's correction factors: an observed ITL twice the profile's
    /// halves the target the batch is chosen for (at 2 000 req/s: 140 in a
    /// batch instead of 256, ⌈21.4⌉ replicas instead of ⌈20.8⌉); an observed
    /// TTFT below the profile's (prefix hits) lowers the prefill load, one
    /// above does not raise it.
    #[test]
    fn the_planner_corrects_its_profile_by_what_it_observes() {
        let corrected = serde_json::json!({"ttft_ms": 25, "itl_ms": 30});
        let busy = |ttft, itl| Traffic { requests: 6000, ..traffic(ttft, itl) };
        let busier = |itl| Traffic { requests: 60_000, ..traffic(None, itl) };
        let at =
            |t: Traffic| ScaleContext { traffic: t, metrics: ScaleMetrics { running: 100.0, ..ScaleMetrics::default() }, ..cx(2, 0.0, 0) };
        let mut d = planner(Role::Decode, corrected.clone());
        // 100 running decode in 11 ms by the profile; observed 22 ms: aim for 15 ms steps.
        assert_eq!((d.evaluate(&at(busier(Some(11.0)))), d.evaluate(&at(busier(Some(22.0))))), (21, 22));
        let mut p = planner(Role::Prefill, corrected);
        assert_eq!(p.evaluate(&at(busy(Some(5.5), None))), 2, "half the profile's TTFT: half the load, ⌈1.53⌉");
        assert_eq!(p.evaluate(&at(busy(Some(100.0), None))), 4, "queueing does not raise it");
    }

    #[test]
    fn target_tracking_is_the_hpa_formula_with_its_tolerance() {
        let mut p = AutoscaleSpec::parse("target-tracking", Some(&serde_json::json!({"target": 0.5})), "autoscale")
            .unwrap()
            .build("autoscale", &profile(Role::Serve))
            .unwrap();
        assert_eq!(p.evaluate(&cx(4, 0.9, 0)), 8, "⌈4 × 0.9 / 0.5⌉ = ⌈7.2⌉");
        assert_eq!(p.evaluate(&cx(4, 0.53, 0)), 4, "within 10 % of the target");
        assert_eq!(p.evaluate(&cx(4, 0.2, 0)), 2, "⌈4 × 0.4⌉");
        // Two of four still coming up: counted at 0 % going up, at the target going down.
        let half = |m: f64| ScaleContext { ready: 2, ..cx(4, m, 0) };
        assert_eq!(p.evaluate(&half(0.9)), 4, "⌈(2 × 0.9 + 2 × 0) / 0.5⌉ = ⌈3.6⌉");
        assert_eq!(p.evaluate(&half(1.5)), 6, "⌈(2 × 1.5) / 0.5⌉");
        assert_eq!(p.evaluate(&half(0.1)), 3, "⌈(2 × 0.1 + 2 × 0.5) / 0.5⌉ = ⌈2.4⌉");
    }

    #[test]
    fn threshold_steps_and_queue_depth_divides() {
        let mut t = AutoscaleSpec::parse("threshold", None, "autoscale").unwrap().build("autoscale", &profile(Role::Serve)).unwrap();
        assert_eq!((t.evaluate(&cx(3, 0.9, 0)), t.evaluate(&cx(3, 0.5, 0)), t.evaluate(&cx(3, 0.1, 0))), (4, 3, 2));
        let mut q = AutoscaleSpec::parse("queue-depth", Some(&serde_json::json!({"target_per_replica": 4})), "autoscale")
            .unwrap()
            .build("autoscale", &profile(Role::Serve))
            .unwrap();
        assert_eq!((q.evaluate(&cx(3, 0.0, 0)), q.evaluate(&cx(3, 0.0, 9))), (0, 3));
        let mut o = AutoscaleSpec::parse("oscillator", None, "autoscale").unwrap().build("autoscale", &profile(Role::Serve)).unwrap();
        assert_eq!(o.evaluate(&ScaleContext { tick: 1, ..cx(3, 0.0, 0) }), 2);
    }

    #[test]
    fn parameters_are_checked_with_their_path() {
        for (name, params, path) in [
            ("threshold", serde_json::json!({"scale_up": 0.2, "scale_down": 0.5}), "autoscale.params.scale_down"),
            ("target-tracking", serde_json::json!({"target": 0}), "autoscale.params.target"),
            ("queue-depth", serde_json::json!({"target_per_replica": -1}), "autoscale.params.target_per_replica"),
        ] {
            let e =
                AutoscaleSpec::parse(name, Some(&params), "autoscale").unwrap().build("autoscale", &profile(Role::Serve)).err().unwrap();
            assert_eq!(e.path, path, "{e}");
        }
        let e = AutoscaleSpec::parse("target-tracking", Some(&serde_json::json!({"metric": "gpu"})), "autoscale").unwrap_err();
        assert!(e.path.starts_with("autoscale.params"), "{e}");
        assert!(AutoscaleSpec::parse("hpa", None, "autoscale").unwrap_err().message.contains("threshold, target-tracking"));
    }
}
