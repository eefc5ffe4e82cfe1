//! Instance scheduling: the order each instance admits waiting requests in,
//! and which running request it preempts when KV blocks run out. The step
//! itself is the engine's vLLM v1 scheduler; these templates select its
//! queue discipline ([`QueuePolicy`]) and victim ([`PreemptionVictim`]).
//!
//! Templates: `fcfs` (vLLM's default), `priority-fcfs` (vLLM
//! `--scheduling-policy priority`: highest priority first, then arrival),
//! `sjf` (smallest prompt + max_tokens first), `reverse-priority`
//! (pathological: lowest priority first). Parameter `preemption`: `tail`
//! (the most recently admitted, vLLM FCFS) or `lowest-priority` (vLLM
//! priority); default `lowest-priority` for `priority-fcfs`, else `tail`.

use blis_engine::scheduler::{PreemptionVictim, QueuePolicy, SchedulerConfig};
use serde::{Deserialize, Serialize};

use super::policy_kind;

/// Which running request is preempted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preemption {
    /// The most recently admitted.
    Tail,
    /// The lowest priority, latest arrival among equals.
    LowestPriority,
}

/// Parameters of every scheduler template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerParams {
    /// Preemption victim; absent = the template's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption: Option<Preemption>,
}

policy_kind! {
    /// An instance-scheduler template and its parameters.
    SchedulerSpec {
        /// First come, first served.
        "fcfs" => Fcfs(SchedulerParams),
        /// Highest priority first, then arrival.
        "priority-fcfs" => PriorityFcfs(SchedulerParams),
        /// Shortest job (prompt + max output tokens) first.
        "sjf" => Sjf(SchedulerParams),
        /// Pathological: lowest priority first.
        "reverse-priority" => ReversePriority(SchedulerParams),
    }
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        SchedulerSpec::Fcfs(SchedulerParams::default())
    }
}

impl SchedulerSpec {
    /// Sets the queue policy and preemption victim of an instance's scheduler.
    pub fn apply(&self, cfg: &mut SchedulerConfig) {
        let (queue, params, default) = match self {
            SchedulerSpec::Fcfs(p) => (QueuePolicy::Fcfs, p, Preemption::Tail),
            SchedulerSpec::PriorityFcfs(p) => (QueuePolicy::Priority, p, Preemption::LowestPriority),
            SchedulerSpec::Sjf(p) => (QueuePolicy::ShortestJobFirst, p, Preemption::Tail),
            SchedulerSpec::ReversePriority(p) => (QueuePolicy::ReversePriority, p, Preemption::Tail),
        };
        cfg.queue_policy = queue;
        cfg.preemption = match params.preemption.unwrap_or(default) {
            Preemption::Tail => PreemptionVictim::Tail,
            Preemption::LowestPriority => PreemptionVictim::LowestPriority,
        };
    }

    /// The same template with another preemption victim.
    pub fn with_preemption(mut self, victim: Preemption) -> SchedulerSpec {
        let (SchedulerSpec::Fcfs(p) | SchedulerSpec::PriorityFcfs(p) | SchedulerSpec::Sjf(p) | SchedulerSpec::ReversePriority(p)) =
            &mut self;
        p.preemption = Some(victim);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_preemption_victims_list_the_allowed_ones() {
        let e = SchedulerSpec::parse("fcfs", Some(&serde_json::json!({"preemption": "random"})), "scheduler").unwrap_err();
        assert_eq!(e.path, "scheduler.params.preemption");
        assert!(e.message.contains("tail") && e.message.contains("lowest-priority"), "{e}");
    }
}
