//! What a spec generates, measured: per-client rates, burstiness, length
//! distributions, prefix sharing and the arrival timeline. Streams the
//! generator twice (statistics, then the timeline once the span is known);
//! memory is bounded by the number of distinct lengths, not of requests.
//! Multi-turn follow-up rounds are released by completions in a simulation,
//! so only first rounds are counted here.

use std::collections::BTreeMap;

use blis_engine::metrics::IntCounts;
use blis_engine::time::Micros;

use crate::error::WorkloadError;
use crate::generator::GeneratedRequest;
use crate::plan::Plan;

/// Statistics of one group of requests (a client, or all of them).
#[derive(Clone, Debug, Default)]
pub struct GroupStats {
    /// Requests.
    pub requests: u64,
    /// First arrival.
    pub first_arrival: Option<Micros>,
    /// Last arrival.
    pub last_arrival: Micros,
    /// Prompt lengths (prefix included).
    pub input_tokens: IntCounts,
    /// Output lengths.
    pub output_tokens: IntCounts,
    /// Prompt tokens that belong to a shared prefix.
    pub prefix_tokens: u64,
    /// All prompt tokens.
    pub prompt_tokens: u64,
    gaps: u64,
    gap_mean: f64,
    gap_m2: f64,
}

impl GroupStats {
    fn add(&mut self, r: &GeneratedRequest, prefix_len: u32) {
        let t = r.request.arrival;
        if self.first_arrival.is_some() {
            // Welford's running mean and variance of the gaps.
            let gap = (t - self.last_arrival).as_us() as f64;
            self.gaps += 1;
            let d = gap - self.gap_mean;
            self.gap_mean += d / self.gaps as f64;
            self.gap_m2 += d * (gap - self.gap_mean);
        } else {
            self.first_arrival = Some(t);
        }
        self.last_arrival = t;
        self.requests += 1;
        self.input_tokens.push(u64::from(r.request.prompt_tokens()));
        self.output_tokens.push(u64::from(r.request.max_output_tokens));
        self.prefix_tokens += u64::from(prefix_len);
        self.prompt_tokens += u64::from(r.request.prompt_tokens());
    }

    /// Coefficient of variation of the gaps between consecutive arrivals
    /// (1 for Poisson); 0 with fewer than two gaps.
    pub fn gap_cv(&self) -> f64 {
        if self.gaps < 2 || self.gap_mean <= 0.0 {
            return 0.0;
        }
        (self.gap_m2 / (self.gaps - 1) as f64).sqrt() / self.gap_mean
    }

    /// Share of prompt tokens that are shared prefixes.
    pub fn prefix_share(&self) -> f64 {
        if self.prompt_tokens == 0 { 0.0 } else { self.prefix_tokens as f64 / self.prompt_tokens as f64 }
    }
}

/// Arrivals per time bin, per client.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Width of a bin.
    pub bin: Micros,
    /// `counts[client][bin]`.
    pub counts: Vec<Vec<u64>>,
}

/// Statistics of a plan's generated requests.
#[derive(Clone, Debug, Default)]
pub struct WorkloadStats {
    /// All requests.
    pub total: GroupStats,
    /// Per client index.
    pub clients: Vec<GroupStats>,
    /// Prefix group → (requests, prefix length).
    pub prefix_groups: BTreeMap<String, (u64, u32)>,
    /// From 0 to the horizon (or the last arrival).
    pub span: Micros,
    /// Arrivals over time.
    pub timeline: Timeline,
}

impl WorkloadStats {
    /// Measures `plan`'s requests, with a timeline of `bins` bins; an
    /// error at the first request arriving after the simulated clock's span.
    pub fn collect(plan: &Plan, bins: usize) -> Result<WorkloadStats, WorkloadError> {
        let mut s = WorkloadStats { clients: vec![GroupStats::default(); plan.clients.len()], ..WorkloadStats::default() };
        for r in plan.generator() {
            r.check_span()?;
            let c = &plan.clients[r.request.meta.client as usize];
            let prefix = r.prefix_group.and_then(|g| c.prefixes.get(g as usize));
            let prefix_len = prefix.map_or(0, |p| p.1.len());
            if let Some((g, run)) = prefix {
                s.prefix_groups.entry(g.clone()).or_insert((0, run.len())).0 += 1;
            }
            s.total.add(&r, prefix_len);
            s.clients[c.index as usize].add(&r, prefix_len);
        }
        s.span = plan.horizon.unwrap_or(s.total.last_arrival + Micros(1)).max(Micros(1));
        let bins = bins.max(1);
        let bin = Micros(s.span.as_us().div_ceil(bins as u64).max(1));
        let mut counts = vec![vec![0u64; bins]; plan.clients.len()];
        for r in plan.generator() {
            let b = ((r.request.arrival.as_us() / bin.as_us()) as usize).min(bins - 1);
            counts[r.request.meta.client as usize][b] += 1;
        }
        s.timeline = Timeline { bin, counts };
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::spec::parse;

    #[test]
    fn stats_measure_rates_burstiness_and_sharing() {
        let text = "aggregate_rate: 100\nhorizon: 100000000\nclients:
  - {id: a, rate_fraction: 3, prefix_group: g, prefix_length: 100, arrival: {process: gamma, cv: 3}, input_distribution: {type: constant, params: {value: 100}}, output_distribution: {type: constant, params: {value: 7}}}
  - {id: b, arrival: {process: poisson}, input_distribution: {type: constant, params: {value: 50}}, output_distribution: {type: constant, params: {value: 7}}}
";
        let plan = parse(text, "t", Path::new(".")).unwrap().plan().unwrap();
        let s = WorkloadStats::collect(&plan, 50).unwrap();
        assert_eq!(s.total.requests, s.clients.iter().map(|c| c.requests).sum::<u64>());
        assert_eq!(s.span, Micros(100_000_000));
        // 75/s and 25/s over 100 s; counts over thousands are within a few percent
        // (client a's gamma CV 3 widens its count sd to ≈ 3·√7500 ≈ 260, 3.5%).
        assert!((s.clients[0].requests as f64 / 7500.0 - 1.0).abs() < 0.12, "{}", s.clients[0].requests);
        assert!((s.clients[1].requests as f64 / 2500.0 - 1.0).abs() < 0.08, "{}", s.clients[1].requests);
        assert!((s.clients[0].gap_cv() / 3.0 - 1.0).abs() < 0.15, "{}", s.clients[0].gap_cv());
        assert!((s.clients[1].gap_cv() - 1.0).abs() < 0.08, "{}", s.clients[1].gap_cv());
        assert_eq!(s.clients[0].prefix_share(), 0.5);
        assert_eq!(s.prefix_groups["g"], (s.clients[0].requests, 100));
        assert_eq!(s.timeline.counts.iter().flatten().sum::<u64>(), s.total.requests);
        assert_eq!(s.total.output_tokens.summary(1.0).mean, 7.0);
    }
}
