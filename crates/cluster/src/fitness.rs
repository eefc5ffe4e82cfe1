//! Fitness: one number in [0, 1] from weighted, normalised metrics, so a
//! search (or a person) can rank policies (cluster-policy-plan §G.3).
//!
//! | key | value | score in [0, 1] |
//! | --- | --- | --- |
//! | `throughput` | completed requests / s | completed ÷ arrived (throughput relative to the offered load) |
//! | `goodput` | requests meeting their SLO / s | met ÷ arrived |
//! | `ttft_p50`, `ttft_p99`, `itl_p50`, `itl_p99`, `e2e_p50`, `e2e_p99` | ms | 1 / (1 + ms / 1000); 0 if nothing completed |
//! | `fairness` | Jain index over tenants | the index |
//! | `cache_hit_rate` | prefix-cache hit rate | the rate |
//!
//! `fitness = Σ weight · score / Σ weight`.

use std::collections::BTreeMap;

use blis_engine::metrics::Distribution;
use serde::Serialize;

/// A metric fitness can weigh.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FitnessMetric {
    /// Completed requests per second.
    Throughput,
    /// SLO-meeting requests per second.
    Goodput,
    /// Median TTFT.
    TtftP50,
    /// 99th-percentile TTFT.
    TtftP99,
    /// Median inter-token latency.
    ItlP50,
    /// 99th-percentile inter-token latency.
    ItlP99,
    /// Median end-to-end latency.
    E2eP50,
    /// 99th-percentile end-to-end latency.
    E2eP99,
    /// Jain fairness index over tenants.
    Fairness,
    /// Prefix-cache hit rate.
    CacheHitRate,
}

impl FitnessMetric {
    /// Every metric with its key.
    pub const ALL: [(&'static str, FitnessMetric); 10] = [
        ("throughput", FitnessMetric::Throughput),
        ("goodput", FitnessMetric::Goodput),
        ("ttft_p50", FitnessMetric::TtftP50),
        ("ttft_p99", FitnessMetric::TtftP99),
        ("itl_p50", FitnessMetric::ItlP50),
        ("itl_p99", FitnessMetric::ItlP99),
        ("e2e_p50", FitnessMetric::E2eP50),
        ("e2e_p99", FitnessMetric::E2eP99),
        ("fairness", FitnessMetric::Fairness),
        ("cache_hit_rate", FitnessMetric::CacheHitRate),
    ];

    fn key(self) -> &'static str {
        FitnessMetric::ALL.iter().find(|(_, m)| *m == self).map_or("", |(k, _)| k)
    }
}

/// Weights per metric (in [0, 1e9], at least one > 0).
#[derive(Clone, Debug, PartialEq)]
pub struct FitnessWeights(Vec<(FitnessMetric, f64)>);

impl FitnessWeights {
    /// Parses `metric:weight,metric:weight` (e.g. `throughput:0.5,ttft_p99:0.3,goodput:0.2`).
    pub fn parse(text: &str) -> Result<FitnessWeights, String> {
        let keys: Vec<&str> = FitnessMetric::ALL.iter().map(|(k, _)| *k).collect();
        let mut out: Vec<(FitnessMetric, f64)> = Vec::new();
        for part in text.split(',') {
            let (key, w) = part
                .split_once(':')
                .ok_or_else(|| format!("`{part}` is not METRIC:WEIGHT (e.g. throughput:0.5,ttft_p99:0.3,goodput:0.2)"))?;
            let key = key.trim();
            let m = FitnessMetric::ALL
                .iter()
                .find(|(k, _)| *k == key)
                .map(|&(_, m)| m)
                .ok_or_else(|| format!("unknown metric `{key}`; allowed: {}", keys.join(", ")))?;
            let w: f64 = w
                .trim()
                .parse()
                .ok()
                .filter(|w: &f64| (0.0..=1e9).contains(w))
                .ok_or_else(|| format!("weight of `{key}` must be a number in [0, 1e9], got `{}`", w.trim()))?;
            if out.iter().any(|&(x, _)| x == m) {
                return Err(format!("`{key}` appears twice"));
            }
            out.push((m, w));
        }
        if out.iter().map(|w| w.1).sum::<f64>() <= 0.0 {
            return Err("the weights sum to zero".to_string());
        }
        Ok(FitnessWeights(out))
    }
}

/// The measurements fitness is computed from.
pub(crate) struct FitnessInputs<'a> {
    pub arrived: u64,
    pub completed: u64,
    pub met_slo: u64,
    pub duration_s: f64,
    pub ttft_ms: &'a Distribution,
    pub itl_ms: &'a Distribution,
    pub e2e_ms: &'a Distribution,
    pub jain: f64,
    pub cache_hit_rate: f64,
}

/// One weighed metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FitnessComponent {
    /// Its weight as given.
    pub weight: f64,
    /// The raw metric (unit in docs/cluster.md).
    pub value: f64,
    /// Its normalised score in [0, 1].
    pub score: f64,
}

/// The fitness of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FitnessReport {
    /// Weighted mean of the component scores.
    pub score: f64,
    /// Every weighed metric, by key.
    pub components: BTreeMap<&'static str, FitnessComponent>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Computes the fitness report.
pub(crate) fn evaluate(weights: &FitnessWeights, x: &FitnessInputs<'_>) -> FitnessReport {
    let latency = |d: &Distribution, pick: fn(&Distribution) -> f64| {
        let v = pick(d);
        (v, if d.count == 0 { 0.0 } else { 1.0 / (1.0 + v / 1000.0) })
    };
    let arrived = x.arrived as f64;
    let mut components = BTreeMap::new();
    let (mut sum, mut total_w) = (0.0, 0.0);
    for &(m, w) in &weights.0 {
        let (value, score) = match m {
            FitnessMetric::Throughput => (ratio(x.completed as f64, x.duration_s), ratio(x.completed as f64, arrived)),
            FitnessMetric::Goodput => (ratio(x.met_slo as f64, x.duration_s), ratio(x.met_slo as f64, arrived)),
            FitnessMetric::TtftP50 => latency(x.ttft_ms, |d| d.p50),
            FitnessMetric::TtftP99 => latency(x.ttft_ms, |d| d.p99),
            FitnessMetric::ItlP50 => latency(x.itl_ms, |d| d.p50),
            FitnessMetric::ItlP99 => latency(x.itl_ms, |d| d.p99),
            FitnessMetric::E2eP50 => latency(x.e2e_ms, |d| d.p50),
            FitnessMetric::E2eP99 => latency(x.e2e_ms, |d| d.p99),
            FitnessMetric::Fairness => (x.jain, x.jain),
            FitnessMetric::CacheHitRate => (x.cache_hit_rate, x.cache_hit_rate),
        };
        sum += w * score;
        total_w += w;
        components.insert(m.key(), FitnessComponent { weight: w, value, score });
    }
    FitnessReport { score: ratio(sum, total_w), components }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_parse_and_reject_unknown_metrics() {
        assert_eq!(FitnessWeights::parse("throughput:0.5,ttft_p99:0.3,goodput:0.2").unwrap().0.len(), 3);
        let e = FitnessWeights::parse("throughput:1,latency:1").unwrap_err();
        assert!(e.contains("unknown metric `latency`") && e.contains("ttft_p99"), "{e}");
        assert!(FitnessWeights::parse("throughput:-1").is_err());
        assert!(FitnessWeights::parse("throughput:1e300").is_err());
        assert!(FitnessWeights::parse("throughput:0").is_err());
        assert!(FitnessWeights::parse("throughput:1,throughput:2").is_err());
    }

    #[test]
    fn hand_computed_fitness() {
        let d = |p50: f64, p99: f64| Distribution { count: 10, mean: p50, min: 0.0, p50, p90: p99, p95: p99, p99, max: p99 };
        let (ttft, itl, e2e) = (d(100.0, 1000.0), d(10.0, 20.0), d(2000.0, 3000.0));
        let x = FitnessInputs {
            arrived: 100,
            completed: 80,
            met_slo: 60,
            duration_s: 10.0,
            ttft_ms: &ttft,
            itl_ms: &itl,
            e2e_ms: &e2e,
            jain: 0.9,
            cache_hit_rate: 0.4,
        };
        let r = evaluate(&FitnessWeights::parse("throughput:0.5,ttft_p99:0.3,goodput:0.2").unwrap(), &x);
        // 0.5 · 0.8 + 0.3 · 1/(1 + 1) + 0.2 · 0.6 = 0.4 + 0.15 + 0.12
        assert!((r.score - 0.67).abs() < 1e-12, "{}", r.score);
        assert_eq!(r.components["throughput"].value, 8.0);
        assert_eq!(r.components["goodput"].value, 6.0);
        assert_eq!(r.components["ttft_p99"].score, 0.5);
    }
}
