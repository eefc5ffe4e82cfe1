//! Priority: the number each request is scheduled by (higher = more urgent);
//! the `priority-fcfs` instance scheduler and `lowest-priority` preemption
//! read it, and `predictive-slo` admission counts queued requests by it.
//!
//! Templates (parameters in parentheses): `constant` (value); `slo-class`
//! (scores, default): by SLO class, by default the class's urgency
//! (tightest TTFT target highest); `tenant-priority` (scores, default);
//! `deadline-aware` (slack_ms, default_slack_ms): earliest deadline first;
//! `inverted-slo` (pathological):
//! the negation of `slo-class`, so the least urgent class goes first.

use std::collections::BTreeMap;

use blis_engine::request::{Request, SloClassId};
use blis_engine::time::Micros;
use serde::{Deserialize, Serialize};

use super::{BuildContext, check, policy_kind};
use crate::error::ConfigError;
use crate::slo::resolve_names;
use crate::view::ClusterView;

/// Computes a request's priority when it reaches the admission point.
pub trait PriorityPolicy {
    /// The priority of `req` (finite; higher = more urgent).
    fn priority(&mut self, req: &Request, view: &ClusterView<'_>) -> f64;
}

/// `constant` parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConstantParams {
    /// The priority of every request.
    pub value: f64,
}

/// Parameters of priorities looked up by a label (`slo-class`,
/// `inverted-slo`, `tenant-priority`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScoreParams {
    /// Priority per name. For SLO classes an empty map means "by urgency":
    /// `levels − rank`, so the most urgent class gets the highest number.
    pub scores: BTreeMap<String, f64>,
    /// Priority of names not listed.
    pub default: f64,
}

/// `deadline-aware` parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadlineParams {
    /// Deadline = arrival + slack, per class, for requests without a
    /// deadline, ms. Classes not listed use their E2E target, else `default_slack_ms`.
    pub slack_ms: BTreeMap<String, f64>,
    /// Slack of classes with neither, ms.
    pub default_slack_ms: f64,
}

impl Default for DeadlineParams {
    fn default() -> Self {
        DeadlineParams { slack_ms: BTreeMap::new(), default_slack_ms: 10_000.0 }
    }
}

policy_kind! {
    /// A priority template and its parameters.
    PrioritySpec {
        /// The same priority for every request.
        "constant" => Constant(ConstantParams),
        /// By SLO class.
        "slo-class" => SloClass(ScoreParams),
        /// By tenant.
        "tenant-priority" => TenantPriority(ScoreParams),
        /// Earliest deadline first.
        "deadline-aware" => DeadlineAware(DeadlineParams),
        /// Pathological: `slo-class` negated.
        "inverted-slo" => InvertedSlo(ScoreParams),
    }
}

impl Default for PrioritySpec {
    fn default() -> Self {
        PrioritySpec::Constant(ConstantParams::default())
    }
}

fn finite(path: &str, field: &str, v: f64) -> Result<(), ConfigError> {
    check(v.is_finite(), path, field, v, "a finite number")
}

/// Scores by interned id: explicit values, else `default`.
fn score_table(q: &ScoreParams, known: &[String], path: &str, what: &str) -> Result<Vec<f64>, ConfigError> {
    finite(path, "default", q.default)?;
    let mut table = vec![q.default; known.len()];
    for (id, v) in resolve_names(&q.scores, known, &format!("{path}.scores"), what)? {
        finite(&format!("{path}.scores"), &known[id as usize], v)?;
        table[id as usize] = v;
    }
    Ok(table)
}

impl PrioritySpec {
    /// Validates the parameters against the run and builds the policy.
    pub fn build(&self, ctx: &BuildContext<'_>, path: &str) -> Result<Box<dyn PriorityPolicy>, ConfigError> {
        let p = format!("{path}.params");
        let class_scores = |q: &ScoreParams, sign: f64| -> Result<Box<dyn PriorityPolicy>, ConfigError> {
            let classes = ctx.classes;
            let table = if q.scores.is_empty() {
                finite(&p, "default", q.default)?;
                (0..classes.len()).map(|c| f64::from(classes.levels() - classes.urgency(SloClassId(c as u16)))).collect()
            } else {
                score_table(q, classes.names(), &p, "SLO class")?
            };
            Ok(Box::new(ByLabel { table: table.into_iter().map(|v| sign * v).collect(), default: sign * q.default, tenant: false }))
        };
        match self {
            PrioritySpec::Constant(q) => {
                finite(&p, "value", q.value)?;
                Ok(Box::new(Constant(q.value)))
            }
            PrioritySpec::SloClass(q) => class_scores(q, 1.0),
            PrioritySpec::InvertedSlo(q) => class_scores(q, -1.0),
            PrioritySpec::TenantPriority(q) => {
                let table = score_table(q, &ctx.labels.tenants, &p, "tenant")?;
                Ok(Box::new(ByLabel { table, default: q.default, tenant: true }))
            }
            PrioritySpec::DeadlineAware(q) => {
                check(
                    q.default_slack_ms.is_finite() && q.default_slack_ms >= 0.0,
                    &p,
                    "default_slack_ms",
                    q.default_slack_ms,
                    "a finite number ≥ 0",
                )?;
                let classes = ctx.classes;
                let mut slack: Vec<f64> =
                    (0..classes.len()).map(|c| classes.targets(SloClassId(c as u16)).e2e_ms.unwrap_or(q.default_slack_ms)).collect();
                for (id, ms) in resolve_names(&q.slack_ms, classes.names(), &format!("{p}.slack_ms"), "SLO class")? {
                    check(ms.is_finite() && ms >= 0.0, &format!("{p}.slack_ms"), &classes.names()[id as usize], ms, "a finite number ≥ 0")?;
                    slack[id as usize] = ms;
                }
                let to_us = |ms: f64| Micros::from_ms_f64(ms).unwrap_or(Micros::MAX);
                Ok(Box::new(DeadlineAware { slack: slack.into_iter().map(to_us).collect(), default: to_us(q.default_slack_ms) }))
            }
        }
    }
}

struct Constant(f64);

impl PriorityPolicy for Constant {
    fn priority(&mut self, _req: &Request, _view: &ClusterView<'_>) -> f64 {
        self.0
    }
}

struct ByLabel {
    table: Vec<f64>,
    default: f64,
    tenant: bool,
}

impl PriorityPolicy for ByLabel {
    fn priority(&mut self, req: &Request, _view: &ClusterView<'_>) -> f64 {
        let key = if self.tenant { req.meta.tenant.0 as usize } else { usize::from(req.meta.slo_class.0) };
        self.table.get(key).copied().unwrap_or(self.default)
    }
}

struct DeadlineAware {
    slack: Vec<Micros>,
    default: Micros,
}

impl PriorityPolicy for DeadlineAware {
    /// Minus the deadline in seconds: an earlier deadline is a higher priority.
    fn priority(&mut self, req: &Request, _view: &ClusterView<'_>) -> f64 {
        let slack = self.slack.get(usize::from(req.meta.slo_class.0)).copied().unwrap_or(self.default);
        let deadline = req.meta.deadline.unwrap_or(req.arrival + slack);
        -deadline.as_secs_f64()
    }
}
