//! Admission: whether an arriving request is let in at all.
//!
//! Templates (parameters in brackets; defaults in docs/cluster.md):
//!
//! * `always-admit`; `reject-all` (pathological: every request rejected);
//! * `token-bucket` [capacity, refill_per_s, per_tenant, on_limit,
//!   max_delay_ms]: each request takes one token; tokens refill continuously
//!   in simulated time;
//! * `rate-limit` [max_requests, window_ms, on_limit, max_delay_ms]: at most
//!   `max_requests` admitted in any sliding window of `window_ms`;
//! * `tenant-quota` [max_in_flight, default_max_in_flight]: a tenant's
//!   admitted, unfinished requests are capped;
//! * `slo-gated` [max_queue_depth, by_class, exempt]: a class is rejected
//!   while the longest instance queue exceeds its threshold (iteration 11 of
//!   the predictive-admission study);
//! * `predictive-slo` [ttft_budget_ms, exempt, headroom, avg_step_ms,
//!   beta0_us, beta1_us_per_token]: admits a request only if its best-case
//!   estimated TTFT over all instances fits its class budget
//!   (predictive-slo-admission.md, with the reviewers' fix: only queued
//!   requests of the same or higher priority count towards the wait).
//!
//! The two rate templates either police (`on_limit: reject`, the default:
//! a request over the limit is turned away) or shape (`on_limit: delay`: it
//! is admitted and held in the control plane until the limit lets it
//! through, the spec's DELAY decision; requests are released in arrival
//! order, and one that would wait longer than `max_delay_ms` is rejected).

use std::collections::{BTreeMap, VecDeque};

use blis_engine::request::Request;
use blis_engine::time::{MAX_SPAN_S, Micros};
use serde::{Deserialize, Serialize};

use super::{BuildContext, NoParams, check, policy_kind, resolve_list};
use crate::error::ConfigError;
use crate::estimate::{TtftEstimator, estimate_at};
use crate::slo::resolve_names;
use crate::view::ClusterView;

/// Why a request was turned away.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectReason {
    /// `reject-all`.
    RejectAll,
    /// `token-bucket`: no token left.
    TokenBucketEmpty,
    /// `rate-limit`: the window is full.
    RateLimited,
    /// `tenant-quota`: the tenant has its maximum in flight.
    TenantQuotaExceeded,
    /// `slo-gated`: the longest queue exceeds the class's threshold.
    QueueDepthOverThreshold,
    /// `predictive-slo`: even the best instance's estimated TTFT exceeds the class budget.
    PredictedTtftOverBudget,
    /// Not a policy's: the gateway gave up on a request that scale-down
    /// drains evicted more than [`crate::gateway::MAX_REROUTES`] times (a
    /// retry budget, as real gateways keep), so that a fleet torn down
    /// faster than it can finish anything still ends its run.
    RerouteLimit,
}

impl RejectReason {
    /// Every reason, in report order.
    pub const ALL: [RejectReason; 7] = [
        RejectReason::RejectAll,
        RejectReason::TokenBucketEmpty,
        RejectReason::RateLimited,
        RejectReason::TenantQuotaExceeded,
        RejectReason::QueueDepthOverThreshold,
        RejectReason::PredictedTtftOverBudget,
        RejectReason::RerouteLimit,
    ];

    /// Stable snake_case name used in reports and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::RejectAll => "reject_all",
            RejectReason::TokenBucketEmpty => "token_bucket_empty",
            RejectReason::RateLimited => "rate_limited",
            RejectReason::TenantQuotaExceeded => "tenant_quota_exceeded",
            RejectReason::QueueDepthOverThreshold => "queue_depth_over_threshold",
            RejectReason::PredictedTtftOverBudget => "predicted_ttft_over_budget",
            RejectReason::RerouteLimit => "reroute_limit",
        }
    }

    /// Position in [`RejectReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// An admission decision.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Admission {
    /// Let the request in.
    Admit,
    /// Let it in, but route it only after this wait (> 0): a shaping limit.
    Delay(Micros),
    /// Turn it away.
    Reject(RejectReason),
}

/// Decides whether an arriving request is admitted. The request's priority
/// is already set by the priority policy.
pub trait AdmissionPolicy {
    /// The decision for `req` given what the control plane sees.
    fn admit(&mut self, req: &Request, view: &ClusterView<'_>) -> Admission;
}

/// `token-bucket` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenBucketParams {
    /// Bucket size, requests (≥ 1); the bucket starts full.
    pub capacity: f64,
    /// Refill rate, requests per second (> 0).
    pub refill_per_s: f64,
    /// One bucket per tenant instead of one for the cluster.
    pub per_tenant: bool,
    /// What happens to a request that finds the bucket empty.
    pub on_limit: OnLimit,
    /// With `on_limit: delay`, the longest a request may be held, ms; one
    /// that would wait longer is rejected. Absent = no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<f64>,
}

impl Default for TokenBucketParams {
    fn default() -> Self {
        TokenBucketParams { capacity: 100.0, refill_per_s: 100.0, per_tenant: false, on_limit: OnLimit::Reject, max_delay_ms: None }
    }
}

/// `rate-limit` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitParams {
    /// Requests admitted per window (≥ 1).
    pub max_requests: u32,
    /// Window length, ms (> 0).
    pub window_ms: f64,
    /// What happens to a request that finds the window full.
    pub on_limit: OnLimit,
    /// With `on_limit: delay`, the longest a request may be held, ms; one
    /// that would wait longer is rejected. Absent = no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<f64>,
}

impl Default for RateLimitParams {
    fn default() -> Self {
        RateLimitParams { max_requests: 100, window_ms: 1000.0, on_limit: OnLimit::Reject, max_delay_ms: None }
    }
}

/// What a rate template does with a request over its limit.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLimit {
    /// Turn it away (policing).
    #[default]
    Reject,
    /// Hold it until the limit lets it through (shaping).
    Delay,
}

/// How a rate template treats a request over its limit, validated.
#[derive(Copy, Clone, Debug)]
enum Shaping {
    Police,
    /// Hold for at most this long.
    Shape {
        max_delay: Micros,
    },
}

impl Shaping {
    fn build(path: &str, on_limit: OnLimit, max_delay_ms: Option<f64>) -> Result<Shaping, ConfigError> {
        let max_span_ms = MAX_SPAN_S * 1e3;
        match (on_limit, max_delay_ms) {
            (OnLimit::Reject, None) => Ok(Shaping::Police),
            (OnLimit::Reject, Some(_)) => Err(ConfigError::new(format!("{path}.max_delay_ms"), "applies only with on_limit: delay")),
            (OnLimit::Delay, ms) => {
                let ms = ms.unwrap_or(max_span_ms);
                check(ms.is_finite() && ms > 0.0 && ms <= max_span_ms, path, "max_delay_ms", ms, &format!("in (0, {max_span_ms:e}]"))?;
                Ok(Shaping::Shape { max_delay: Micros::from_ms_f64(ms).unwrap_or(Micros::MAX) })
            }
        }
    }

    /// The decision for a request that must wait `wait_us` (≥ 0, possibly
    /// fractional or absurd) for the limit, or `None` to reject it. Waits
    /// are rounded up, so a shaped request never passes early.
    fn decide(self, wait_us: f64) -> Option<Admission> {
        match self {
            Shaping::Police => None,
            Shaping::Shape { max_delay } => {
                let wait = Micros::from_us_f64(wait_us.ceil()).filter(|&w| w <= max_delay)?;
                Some(if wait == Micros::ZERO { Admission::Admit } else { Admission::Delay(wait) })
            }
        }
    }
}

/// `tenant-quota` parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantQuotaParams {
    /// In-flight cap per tenant name.
    pub max_in_flight: BTreeMap<String, u32>,
    /// Cap for tenants not listed; absent = unlimited.
    pub default_max_in_flight: Option<u32>,
}

/// `slo-gated` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SloGatedParams {
    /// Queue-depth threshold of classes not listed in `by_class`.
    pub max_queue_depth: u32,
    /// Per-class thresholds.
    pub by_class: BTreeMap<String, u32>,
    /// Classes that are never gated.
    pub exempt: Vec<String>,
}

impl Default for SloGatedParams {
    fn default() -> Self {
        SloGatedParams { max_queue_depth: 8, by_class: BTreeMap::new(), exempt: Vec::new() }
    }
}

/// `predictive-slo` parameters. Estimator coefficients left out are
/// calibrated on the simulated latency model ([`TtftEstimator::from_latency_model`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PredictiveSloParams {
    /// TTFT budget per class, ms; classes not listed use their TTFT target;
    /// classes with neither are always admitted.
    pub ttft_budget_ms: BTreeMap<String, f64>,
    /// Classes that are always admitted (the spec's "critical").
    pub exempt: Vec<String>,
    /// Admit when the estimate ≤ budget × headroom (in (0, 10]).
    pub headroom: f64,
    /// Wait per queued request ahead, ms (the spec's AvgStepTime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_step_ms: Option<f64>,
    /// Fixed prefill cost, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta0_us: Option<f64>,
    /// Prefill cost per uncached prompt token, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta1_us_per_token: Option<f64>,
}

impl Default for PredictiveSloParams {
    fn default() -> Self {
        PredictiveSloParams {
            ttft_budget_ms: BTreeMap::new(),
            exempt: Vec::new(),
            headroom: 1.0,
            avg_step_ms: None,
            beta0_us: None,
            beta1_us_per_token: None,
        }
    }
}

policy_kind! {
    /// An admission template and its parameters.
    AdmissionSpec {
        /// Admit everything.
        "always-admit" => AlwaysAdmit(NoParams),
        /// Token bucket.
        "token-bucket" => TokenBucket(TokenBucketParams),
        /// Sliding-window rate limit.
        "rate-limit" => RateLimit(RateLimitParams),
        /// Per-tenant in-flight caps.
        "tenant-quota" => TenantQuota(TenantQuotaParams),
        /// Queue-depth gate per SLO class.
        "slo-gated" => SloGated(SloGatedParams),
        /// Predicted-TTFT budget per SLO class.
        "predictive-slo" => PredictiveSlo(PredictiveSloParams),
        /// Pathological: reject everything.
        "reject-all" => RejectAll(NoParams),
    }
}

impl Default for AdmissionSpec {
    fn default() -> Self {
        AdmissionSpec::AlwaysAdmit(NoParams {})
    }
}

fn positive(path: &str, field: &str, v: f64) -> Result<(), ConfigError> {
    check(v.is_finite() && v > 0.0, path, field, v, "a positive finite number")
}

impl AdmissionSpec {
    /// Whether the policy reads the router's prefix index.
    pub fn uses_prefix_index(&self) -> bool {
        matches!(self, AdmissionSpec::PredictiveSlo(_))
    }

    /// Validates the parameters against the run (names of tenants and
    /// classes) and builds the policy. `path` locates the section in errors.
    pub fn build(&self, ctx: &BuildContext<'_>, path: &str) -> Result<Box<dyn AdmissionPolicy>, ConfigError> {
        let p = format!("{path}.params");
        let classes = ctx.classes.names();
        Ok(match self {
            AdmissionSpec::AlwaysAdmit(_) => Box::new(AlwaysAdmit),
            AdmissionSpec::RejectAll(_) => Box::new(RejectAll),
            AdmissionSpec::TokenBucket(q) => {
                check(q.capacity.is_finite() && q.capacity >= 1.0, &p, "capacity", q.capacity, "a finite number ≥ 1")?;
                positive(&p, "refill_per_s", q.refill_per_s)?;
                let shaping = Shaping::build(&p, q.on_limit, q.max_delay_ms)?;
                let buckets = if q.per_tenant { ctx.labels.tenants.len().max(1) } else { 1 };
                let interval_us = 1e6 / q.refill_per_s;
                Box::new(TokenBucket {
                    interval_us,
                    tolerance_us: (q.capacity - 1.0) * interval_us,
                    per_tenant: q.per_tenant,
                    shaping,
                    tat_us: vec![0.0; buckets],
                })
            }
            AdmissionSpec::RateLimit(q) => {
                check(q.max_requests >= 1, &p, "max_requests", q.max_requests, "at least 1")?;
                positive(&p, "window_ms", q.window_ms)?;
                let window = Micros::from_ms_f64(q.window_ms).filter(|&w| w > Micros::ZERO && w <= Micros::MAX_SPAN);
                let window = window.ok_or_else(|| {
                    ConfigError::new(
                        format!("{p}.window_ms"),
                        format!("{}: must be in [0.001, {:e}] ms (the simulated clock counts microseconds)", q.window_ms, MAX_SPAN_S * 1e3),
                    )
                })?;
                let shaping = Shaping::build(&p, q.on_limit, q.max_delay_ms)?;
                Box::new(RateLimit { max: q.max_requests as usize, window, shaping, admitted: VecDeque::new() })
            }
            AdmissionSpec::TenantQuota(q) => {
                if q.max_in_flight.is_empty() && q.default_max_in_flight.is_none() {
                    return Err(ConfigError::new(&p, "tenant-quota needs max_in_flight (per tenant) or default_max_in_flight"));
                }
                let mut caps = vec![q.default_max_in_flight; ctx.labels.tenants.len()];
                for (id, cap) in resolve_names(&q.max_in_flight, &ctx.labels.tenants, &format!("{p}.max_in_flight"), "tenant")? {
                    caps[id as usize] = Some(cap);
                }
                Box::new(TenantQuota { caps, default: q.default_max_in_flight })
            }
            AdmissionSpec::SloGated(q) => {
                let mut gates = vec![Some(q.max_queue_depth); classes.len()];
                for (id, t) in resolve_names(&q.by_class, classes, &format!("{p}.by_class"), "SLO class")? {
                    gates[id as usize] = Some(t);
                }
                for id in resolve_list(&q.exempt, classes, &format!("{p}.exempt"), "SLO class")? {
                    gates[id as usize] = None;
                }
                Box::new(SloGated { gates, default: Some(q.max_queue_depth) })
            }
            AdmissionSpec::PredictiveSlo(q) => {
                check(q.headroom.is_finite() && q.headroom > 0.0 && q.headroom <= 10.0, &p, "headroom", q.headroom, "in (0, 10]")?;
                let mut est = ctx.estimator;
                if let Some(ms) = q.avg_step_ms {
                    positive(&p, "avg_step_ms", ms)?;
                    est.step_us = ms * 1e3;
                }
                if let Some(b0) = q.beta0_us {
                    check(b0.is_finite() && b0 >= 0.0, &p, "beta0_us", b0, "a finite number ≥ 0")?;
                    est.beta0_us = b0;
                }
                if let Some(b1) = q.beta1_us_per_token {
                    check(b1.is_finite() && b1 >= 0.0, &p, "beta1_us_per_token", b1, "a finite number ≥ 0")?;
                    est.beta1_us_per_token = b1;
                }
                let mut budget_us: Vec<Option<f64>> = (0..classes.len())
                    .map(|c| ctx.classes.targets(blis_engine::request::SloClassId(c as u16)).ttft_ms.map(|ms| ms * 1e3))
                    .collect();
                for (id, ms) in resolve_names(&q.ttft_budget_ms, classes, &format!("{p}.ttft_budget_ms"), "SLO class")? {
                    positive(&format!("{p}.ttft_budget_ms"), &classes[id as usize], ms)?;
                    budget_us[id as usize] = Some(ms * 1e3);
                }
                for id in resolve_list(&q.exempt, classes, &format!("{p}.exempt"), "SLO class")? {
                    budget_us[id as usize] = None;
                }
                Box::new(PredictiveSlo { budget_us: budget_us.into_iter().map(|b| b.map(|b| b * q.headroom)).collect(), estimator: est })
            }
        })
    }
}

struct AlwaysAdmit;

impl AdmissionPolicy for AlwaysAdmit {
    fn admit(&mut self, _req: &Request, _view: &ClusterView<'_>) -> Admission {
        Admission::Admit
    }
}

struct RejectAll;

impl AdmissionPolicy for RejectAll {
    fn admit(&mut self, _req: &Request, _view: &ClusterView<'_>) -> Admission {
        Admission::Reject(RejectReason::RejectAll)
    }
}

/// A token bucket kept as the generic cell-rate algorithm (virtual
/// scheduling): per bucket, the theoretical time `tat_us` at which it would
/// be full again. A request conforms — the bucket holds a token — when
/// `now ≥ tat − tolerance`, `tolerance` = (capacity − 1) · interval; taking
/// the token moves `tat` to max(tat, now) + interval. Same decisions as
/// counting tokens, but in microseconds, so a whole-microsecond interval
/// (20 tokens/s: 50 000 µs) accumulates no rounding and a shaped request
/// leaves exactly when its token arrives.
struct TokenBucket {
    interval_us: f64,
    tolerance_us: f64,
    per_tenant: bool,
    shaping: Shaping,
    // Past `now` while shaped requests hold tokens still to come; 0 = full.
    tat_us: Vec<f64>,
}

impl AdmissionPolicy for TokenBucket {
    fn admit(&mut self, req: &Request, view: &ClusterView<'_>) -> Admission {
        let b = if self.per_tenant { req.meta.tenant.0 as usize } else { 0 };
        if b >= self.tat_us.len() {
            // A tenant id the label table did not name: give it a full bucket.
            self.tat_us.resize(b + 1, 0.0);
        }
        let now = view.now().as_us() as f64;
        let wait_us = self.tat_us[b] - self.tolerance_us - now;
        let decision = if wait_us <= 0.0 { Some(Admission::Admit) } else { self.shaping.decide(wait_us) };
        match decision {
            Some(admitted) => {
                self.tat_us[b] = self.tat_us[b].max(now) + self.interval_us;
                admitted
            }
            None => Admission::Reject(RejectReason::TokenBucketEmpty),
        }
    }
}

struct RateLimit {
    max: usize,
    window: Micros,
    shaping: Shaping,
    // Times requests were (or, when shaped, will be) let through, ascending.
    admitted: VecDeque<Micros>,
}

impl AdmissionPolicy for RateLimit {
    fn admit(&mut self, _req: &Request, view: &ClusterView<'_>) -> Admission {
        let now = view.now();
        // The window is (now − window, now].
        while self.admitted.front().is_some_and(|&t| t + self.window <= now) {
            self.admitted.pop_front();
        }
        // Fewer than `max` left means none lies in the future: a shaped
        // time is only ever set `max` places after a time still in the window.
        let (decision, release) = if self.admitted.len() < self.max {
            (Some(Admission::Admit), now)
        } else {
            // The earliest time the window holds fewer than `max`: when the
            // `max`-th latest release leaves it.
            let release = self.admitted[self.admitted.len() - self.max] + self.window;
            (self.shaping.decide((release - now).as_us() as f64), release)
        };
        match decision {
            Some(admitted) => {
                self.admitted.push_back(release);
                admitted
            }
            None => Admission::Reject(RejectReason::RateLimited),
        }
    }
}

struct TenantQuota {
    caps: Vec<Option<u32>>,
    default: Option<u32>,
}

impl AdmissionPolicy for TenantQuota {
    fn admit(&mut self, req: &Request, view: &ClusterView<'_>) -> Admission {
        let t = req.meta.tenant;
        match self.caps.get(t.0 as usize).copied().unwrap_or(self.default) {
            Some(cap) if view.tenant_in_flight(t) >= cap => Admission::Reject(RejectReason::TenantQuotaExceeded),
            _ => Admission::Admit,
        }
    }
}

struct SloGated {
    gates: Vec<Option<u32>>,
    default: Option<u32>,
}

impl AdmissionPolicy for SloGated {
    fn admit(&mut self, req: &Request, view: &ClusterView<'_>) -> Admission {
        let gate = self.gates.get(usize::from(req.meta.slo_class.0)).copied().unwrap_or(self.default);
        let longest = view.snapshots().iter().map(|s| s.queue_depth).max().unwrap_or(0);
        match gate {
            Some(threshold) if longest > threshold => Admission::Reject(RejectReason::QueueDepthOverThreshold),
            _ => Admission::Admit,
        }
    }
}

struct PredictiveSlo {
    // Budget × headroom per class, µs; None = always admitted.
    budget_us: Vec<Option<f64>>,
    estimator: TtftEstimator,
}

impl AdmissionPolicy for PredictiveSlo {
    fn admit(&mut self, req: &Request, view: &ClusterView<'_>) -> Admission {
        let Some(budget) = self.budget_us.get(usize::from(req.meta.slo_class.0)).copied().flatten() else {
            return Admission::Admit;
        };
        let best =
            (0..view.snapshots().len()).map(|i| estimate_at(&self.estimator, view, i, req.meta.priority)).fold(f64::INFINITY, f64::min);
        if best <= budget { Admission::Admit } else { Admission::Reject(RejectReason::PredictedTtftOverBudget) }
    }
}
