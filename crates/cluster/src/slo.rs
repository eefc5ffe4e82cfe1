//! SLO classes: their targets, which requests meet them, and how urgent each
//! class is.
//!
//! A class's urgency is intrinsic (it does not depend on the priority policy):
//! a class with a tighter TTFT target is more urgent; classes without a TTFT
//! target are the least urgent; classes with equal targets are equally
//! urgent. Urgency is what anomaly detection calls a priority inversion
//! against, and what the `slo-class` priority policy uses by default.

use std::collections::BTreeMap;

use blis_engine::request::{Labels, Outcome, RequestRecord, SloClassId};
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// Latency targets of one SLO class, in milliseconds; absent = no target.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloTargets {
    /// Time to first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Mean inter-token latency of the request (TPOT, excluding the first token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<f64>,
    /// End-to-end latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl SloTargets {
    /// Every target must be a positive finite number of milliseconds.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        for (name, v) in [("ttft_ms", self.ttft_ms), ("itl_ms", self.itl_ms), ("e2e_ms", self.e2e_ms)] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(ConfigError::new(format!("{path}.{name}"), format!("{v}: must be a positive number of milliseconds")));
            }
        }
        Ok(())
    }

    /// Whether `r` completed within every target it has (a class without
    /// targets is met by every completed request). A request with one output
    /// token has no inter-token latency and meets any ITL target.
    pub fn is_met_by(&self, r: &RequestRecord) -> bool {
        if r.outcome != Outcome::Completed {
            return false;
        }
        let within = |target: Option<f64>, got_ms: Option<f64>| match (target, got_ms) {
            (Some(t), Some(v)) => v <= t,
            _ => true,
        };
        within(self.ttft_ms, r.ttft().map(|t| t.as_ms_f64()))
            && within(self.itl_ms, r.tpot_us().map(|t| t / 1e3))
            && within(self.e2e_ms, r.e2e().map(|t| t.as_ms_f64()))
    }
}

/// Resolves names in a user-given map against the run's known names,
/// returning `(interned id, value)` pairs; unknown names are errors listing
/// the known ones.
pub fn resolve_names<T: Clone>(map: &BTreeMap<String, T>, known: &[String], path: &str, what: &str) -> Result<Vec<(u32, T)>, ConfigError> {
    map.iter()
        .map(|(name, v)| match known.iter().position(|k| k == name) {
            Some(i) => Ok((i as u32, v.clone())),
            None => Err(ConfigError::new(format!("{path}.{name}"), format!("unknown {what} `{name}`; known: {}", known.join(", ")))),
        })
        .collect()
}

/// The SLO classes of a run: names, targets and urgency ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct SloClasses {
    names: Vec<String>,
    targets: Vec<SloTargets>,
    urgency: Vec<u16>,
    levels: u16,
}

impl SloClasses {
    /// Classes named by `labels`, with `targets` keyed by class name (unknown
    /// names are errors at `path.<name>`).
    pub fn new(labels: &Labels, targets: &BTreeMap<String, SloTargets>, path: &str) -> Result<SloClasses, ConfigError> {
        let names = labels.slo_classes.clone();
        let mut per_class = vec![SloTargets::default(); names.len()];
        for (id, t) in resolve_names(targets, &names, path, "SLO class")? {
            t.validate(&format!("{path}.{}", names[id as usize]))?;
            per_class[id as usize] = t;
        }
        // Distinct TTFT targets, tightest first; "no target" sorts last.
        let key = |t: &SloTargets| t.ttft_ms.unwrap_or(f64::INFINITY);
        let mut distinct: Vec<f64> = per_class.iter().map(key).collect();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        let urgency = per_class.iter().map(|t| distinct.iter().position(|&d| d == key(t)).unwrap_or(0) as u16).collect();
        Ok(SloClasses { names, targets: per_class, urgency, levels: distinct.len().max(1) as u16 })
    }

    /// Number of named classes.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no named classes.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Class names, by id.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Targets of a class (none for ids without a name).
    pub fn targets(&self, class: SloClassId) -> SloTargets {
        self.targets.get(usize::from(class.0)).copied().unwrap_or_default()
    }

    /// Urgency rank: 0 is the most urgent; ids without a name are the least urgent.
    pub fn urgency(&self, class: SloClassId) -> u16 {
        self.urgency.get(usize::from(class.0)).copied().unwrap_or(self.levels - 1)
    }

    /// Number of distinct urgency ranks (at least 1).
    pub fn levels(&self) -> u16 {
        self.levels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Labels {
        Labels { slo_classes: vec!["batch".into(), "realtime".into(), "interactive".into(), "bulk".into()], ..Labels::default() }
    }

    #[test]
    fn urgency_follows_ttft_targets_and_untargeted_classes_come_last() {
        let mut t = BTreeMap::new();
        t.insert("realtime".to_string(), SloTargets { ttft_ms: Some(100.0), ..Default::default() });
        t.insert("interactive".to_string(), SloTargets { ttft_ms: Some(1000.0), ..Default::default() });
        t.insert("batch".to_string(), SloTargets { e2e_ms: Some(60_000.0), ..Default::default() });
        let c = SloClasses::new(&labels(), &t, "slo_targets").unwrap();
        let u: Vec<u16> = (0..4).map(|i| c.urgency(SloClassId(i))).collect();
        assert_eq!(u, [2, 0, 1, 2]);
        assert_eq!(c.levels(), 3);
        assert_eq!(c.urgency(SloClassId(99)), 2);
    }

    #[test]
    fn unknown_class_names_and_bad_targets_are_rejected_with_their_path() {
        let mut t = BTreeMap::new();
        t.insert("realtme".to_string(), SloTargets { ttft_ms: Some(100.0), ..Default::default() });
        let e = SloClasses::new(&labels(), &t, "slo_targets").unwrap_err();
        assert_eq!(e.path, "slo_targets.realtme");
        assert!(e.message.contains("batch, realtime, interactive, bulk"), "{e}");
        let mut t = BTreeMap::new();
        t.insert("batch".to_string(), SloTargets { itl_ms: Some(f64::NAN), ..Default::default() });
        assert_eq!(SloClasses::new(&labels(), &t, "slo_targets").unwrap_err().path, "slo_targets.batch.itl_ms");
    }

    #[test]
    fn a_request_meets_its_targets_only_if_it_completed_within_all_of_them() {
        use blis_engine::request::{RequestId, RequestMeta};
        use blis_engine::time::Micros;
        let r = RequestRecord {
            id: RequestId(0),
            meta: RequestMeta::default(),
            instance: Some(0),
            outcome: Outcome::Completed,
            arrival: Micros(0),
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: Some(Micros(50_000)),
            last_token: Some(Micros(150_000)),
            finished: Micros(150_000),
            input_tokens: 10,
            output_tokens: 11,
            cached_prompt_tokens: 0,
            preemptions: 0,
            loaded_prompt_tokens: 0,
            kv_load_wait: Micros::ZERO,
            pd: None,
        };
        // TTFT 50 ms, ITL (150 − 50) / 10 = 10 ms, E2E 150 ms.
        let t = |ttft, itl, e2e| SloTargets { ttft_ms: ttft, itl_ms: itl, e2e_ms: e2e };
        assert!(t(Some(50.0), Some(10.0), Some(150.0)).is_met_by(&r));
        assert!(!t(Some(49.9), None, None).is_met_by(&r));
        assert!(!t(None, Some(9.9), None).is_met_by(&r));
        assert!(!t(None, None, Some(149.0)).is_met_by(&r));
        assert!(SloTargets::default().is_met_by(&r));
        assert!(!SloTargets::default().is_met_by(&RequestRecord { outcome: Outcome::TimedOut, ..r }));
    }
}
