//! What the client measures: inference-perf's view of a simulated run.
//!
//! inference-perf (late 2025) timestamps the request just before the HTTP
//! POST and every *line* of the streamed SSE body, blank separator lines
//! included, so a streamed completion of n tokens gives 2n + 2 timestamps
//! (a data line and a blank line per token, then `data: [DONE]` and its
//! blank line). From those it reports, over successful requests:
//!
//! * TTFT = first line − send; E2E = end of body − send;
//! * `inter_token_latency` = every gap between consecutive lines: n − 1 gaps
//!   of about one decode step and n + 2 gaps of a few µs (a blank line right
//!   after its data line), so its median is µs and its mean about half a step;
//! * `time_per_output_token` = (last line − first line) / (lines − 1) per request.
//!
//! The simulation knows each token's API time, so this module reports both
//! these inference-perf metrics (computed the same way, with the blank-line
//! gaps set to [`SSE_SEPARATOR_GAP_US`]) and the true per-token ITL,
//! (E2E − TTFT) / (n − 1), which is what `derived.itl_decode_est_ms` estimates.

use std::collections::BTreeMap;

use blis_engine::instance::{Observer, TokenEvent};
use blis_engine::metrics::percentile_sorted;
use blis_engine::request::{Outcome, RequestRecord};
use blis_engine::time::Micros;
use blis_workload::inference_perf::PROBE_STAGE;

/// Gap between an SSE data line and the blank line after it (µs), as the
/// client observes it: the two arrive in one TCP segment (measured 4–5 µs).
pub const SSE_SEPARATOR_GAP_US: u64 = 5;

/// Client-side samples of one stage (or of the whole run).
#[derive(Clone, Debug, Default)]
pub struct ClientStage {
    /// Requests sent.
    pub sent: u64,
    /// Requests that completed.
    pub completed: u64,
    /// E2E of completed requests, ms.
    pub e2e_ms: Vec<f64>,
    /// TTFT of completed requests, ms.
    pub ttft_ms: Vec<f64>,
    /// Output tokens of completed requests.
    pub output_tokens: Vec<u32>,
    /// Earliest send.
    pub first_send: Option<Micros>,
    /// Latest end (completion, or the client giving up).
    pub last_end: Micros,
    /// True inter-token gaps of completed requests.
    pub token_gaps_us: GapHistogram,
}

/// Gaps below this many µs (65.5 ms: decode steps, the bulk of them) are
/// counted in an array, longer ones in a map.
const DENSE_GAP_US: usize = 1 << 16;

/// Counts of inter-token gaps by whole microseconds: exact, and O(1) per
/// gap for the common ones (a run of 100 000 requests records tens of
/// millions). Empty until the first gap, so a run that keeps none
/// allocates nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GapHistogram {
    dense: Vec<u64>,
    sparse: BTreeMap<u64, u64>,
}

impl GapHistogram {
    /// Counts `count` gaps of `gap_us`.
    pub fn add(&mut self, gap_us: u64, count: u64) {
        match usize::try_from(gap_us) {
            Ok(i) if i < DENSE_GAP_US => {
                if self.dense.is_empty() {
                    self.dense = vec![0; DENSE_GAP_US];
                }
                self.dense[i] += count;
            }
            _ => *self.sparse.entry(gap_us).or_default() += count,
        }
    }

    /// (gap, count) of every gap seen, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let dense = self.dense.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(g, &n)| (g as u64, n));
        dense.chain(self.sparse.iter().map(|(&g, &n)| (g, n)))
    }
}

/// A distribution summary in ms.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some(Summary {
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: percentile_sorted(&v, 50.0),
        p90: percentile_sorted(&v, 90.0),
        p99: percentile_sorted(&v, 99.0),
    })
}

/// numpy-style percentile of a histogram given as ascending (value, count).
fn weighted_percentile(hist: &[(f64, u64)], total: u64, p: f64) -> f64 {
    let rank = p / 100.0 * (total - 1) as f64;
    let at = |r: u64| {
        let mut seen = 0;
        for &(v, n) in hist {
            seen += n;
            if r < seen {
                return v;
            }
        }
        hist[hist.len() - 1].0
    };
    let (lo, hi) = (rank.floor() as u64, rank.ceil() as u64);
    at(lo) + (at(hi) - at(lo)) * (rank - lo as f64)
}

fn summarize_hist(hist: &GapHistogram, scale: f64) -> Option<Summary> {
    let runs: Vec<(f64, u64)> = hist.iter().map(|(v, n)| (v as f64 * scale, n)).collect();
    let total: u64 = runs.iter().map(|r| r.1).sum();
    if total == 0 {
        return None;
    }
    Some(Summary {
        mean: runs.iter().map(|&(v, n)| v * n as f64).sum::<f64>() / total as f64,
        p50: weighted_percentile(&runs, total, 50.0),
        p90: weighted_percentile(&runs, total, 90.0),
        p99: weighted_percentile(&runs, total, 99.0),
    })
}

/// What the client of one stage saw, in the units inference-perf reports (ms).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientMetrics {
    /// Requests sent.
    pub sent: u64,
    /// Failed / sent.
    pub failure_fraction: f64,
    /// Successful requests per second of the stage's span (first send → last end).
    pub throughput_rps: f64,
    /// E2E of successes.
    pub e2e: Option<Summary>,
    /// TTFT of successes.
    pub ttft: Option<Summary>,
    /// True mean time per generated token: (E2E mean − TTFT mean) / (n − 1).
    pub itl_mean_ms: Option<f64>,
    /// True inter-token gaps.
    pub token_gap: Option<Summary>,
    /// inference-perf's `inter_token_latency` (SSE line gaps).
    pub inference_perf_itl: Option<Summary>,
    /// inference-perf's mean `time_per_output_token`.
    pub inference_perf_tpot_mean_ms: Option<f64>,
}

impl ClientStage {
    fn record(&mut self, r: &RequestRecord, gaps: &[u64]) {
        self.sent += 1;
        self.first_send = Some(self.first_send.map_or(r.arrival, |t| t.min(r.arrival)));
        self.last_end = self.last_end.max(r.finished);
        if r.outcome == Outcome::Completed
            && let (Some(ttft), Some(e2e)) = (r.ttft(), r.e2e())
        {
            self.completed += 1;
            self.e2e_ms.push(e2e.as_ms_f64());
            self.ttft_ms.push(ttft.as_ms_f64());
            self.output_tokens.push(r.output_tokens);
            for &g in gaps {
                self.token_gaps_us.add(g, 1);
            }
        }
    }

    /// The stage's metrics; `mean_output_tokens` is the mean configured
    /// `max_tokens` (see [`crate::validate::reproduce::Simulated::mean_output_tokens`]).
    pub fn metrics(&self, mean_output_tokens: f64) -> ClientMetrics {
        let e2e = summarize(&self.e2e_ms);
        let ttft = summarize(&self.ttft_ms);
        let span_s = self.first_send.map_or(0.0, |f| (self.last_end - f).as_secs_f64());
        let itl_mean_ms = match (e2e, ttft) {
            (Some(e), Some(t)) if mean_output_tokens > 1.0 => Some((e.mean - t.mean) / (mean_output_tokens - 1.0)),
            _ => None,
        };
        // inference-perf: per request 2n + 2 line timestamps spanning TTFT → E2E.
        let (mut span_ms, mut gaps, mut tpot_sum) = (0.0, 0u64, 0.0);
        let mut sse_hist = self.token_gaps_us.clone();
        for ((e, t), &n) in self.e2e_ms.iter().zip(&self.ttft_ms).zip(&self.output_tokens) {
            let lines_minus_one = 2 * u64::from(n) + 1;
            span_ms += e - t;
            gaps += lines_minus_one;
            tpot_sum += (e - t) / lines_minus_one as f64;
            sse_hist.add(SSE_SEPARATOR_GAP_US, u64::from(n) + 2);
        }
        let inference_perf_itl = summarize_hist(&sse_hist, 1e-3).map(|mut s| {
            s.mean = span_ms / gaps as f64;
            s
        });
        ClientMetrics {
            sent: self.sent,
            failure_fraction: if self.sent == 0 { 0.0 } else { (self.sent - self.completed) as f64 / self.sent as f64 },
            throughput_rps: if span_s > 0.0 { self.completed as f64 / span_s } else { 0.0 },
            e2e,
            ttft,
            itl_mean_ms,
            token_gap: summarize_hist(&self.token_gaps_us, 1e-3),
            inference_perf_itl,
            inference_perf_tpot_mean_ms: (self.completed > 0).then(|| tpot_sum / self.completed as f64),
        }
    }
}

/// What the client saw of a successful request, ms.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Latency {
    /// Time to first token.
    pub ttft_ms: f64,
    /// End to end.
    pub e2e_ms: f64,
}

/// Observes a simulated run as inference-perf's client would: per stage
/// (`RequestMeta::stage`), for the whole run, and per request.
#[derive(Clone, Debug, Default)]
pub struct ClientObserver {
    /// Per stage.
    pub stages: Vec<ClientStage>,
    /// The whole run.
    pub summary: ClientStage,
    /// What the client saw of each completed request, by request id.
    pub per_request: Vec<Option<Latency>>,
    /// The gaps of each request still running, by request id (ids are
    /// dense from 0); a request's are counted once it completes.
    pending_gaps: Vec<Vec<u64>>,
    /// Emptied gap lists, reused so that recording allocates nothing once
    /// as many lists exist as requests run at once.
    spare_gaps: Vec<Vec<u64>>,
    token_gaps: bool,
}

impl ClientObserver {
    /// An observer for `num_stages` stages and `num_requests` request ids;
    /// `token_gaps` keeps every inter-token gap (for the ITL distributions),
    /// which costs time on every token.
    pub fn new(num_stages: usize, num_requests: usize, token_gaps: bool) -> ClientObserver {
        ClientObserver {
            stages: vec![ClientStage::default(); num_stages],
            per_request: vec![None; num_requests],
            token_gaps,
            ..ClientObserver::default()
        }
    }
}

impl ClientObserver {
    /// Keeps a finished request's emptied gap list for the next request.
    fn recycle(&mut self, mut gaps: Vec<u64>) {
        if gaps.capacity() > 0 {
            gaps.clear();
            self.spare_gaps.push(gaps);
        }
    }
}

impl Observer for ClientObserver {
    fn on_finish(&mut self, r: &RequestRecord) {
        let gaps = self.pending_gaps.get_mut(r.id.0 as usize).map(std::mem::take).unwrap_or_default();
        if r.meta.stage == PROBE_STAGE {
            // A sweep's probe: no report counts it.
            self.recycle(gaps);
            return;
        }
        let stage = r.meta.stage as usize;
        if stage >= self.stages.len() {
            self.stages.resize(stage + 1, ClientStage::default());
        }
        self.stages[stage].record(r, &gaps);
        self.summary.record(r, &gaps);
        if let (Outcome::Completed, Some(t), Some(e)) = (r.outcome, r.ttft(), r.e2e())
            && let Some(slot) = self.per_request.get_mut(r.id.0 as usize)
        {
            *slot = Some(Latency { ttft_ms: t.as_ms_f64(), e2e_ms: e.as_ms_f64() });
        }
        self.recycle(gaps);
    }

    fn observes_tokens(&self) -> bool {
        self.token_gaps
    }

    fn on_token(&mut self, t: &TokenEvent) {
        if let Some(gap) = t.gap {
            let i = t.id.0 as usize;
            if i >= self.pending_gaps.len() {
                self.pending_gaps.resize_with(i + 1, Vec::new);
            }
            let gaps = &mut self.pending_gaps[i];
            if gaps.capacity() == 0
                && let Some(spare) = self.spare_gaps.pop()
            {
                *gaps = spare;
            }
            gaps.push(gap.as_us());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::request::{RequestId, RequestMeta};
    use proptest::prelude::*;

    proptest! {
        /// The histogram counts what a map of every gap counts, in the same
        /// ascending order, on both sides of its array's bound.
        #[test]
        fn gap_histogram_counts_what_a_map_counts(gaps in proptest::collection::vec((0u64..3 * DENSE_GAP_US as u64, 1u64..4), 0..200)) {
            let (mut hist, mut reference) = (GapHistogram::default(), BTreeMap::<u64, u64>::new());
            for &(gap, count) in &gaps {
                hist.add(gap, count);
                *reference.entry(gap).or_default() += count;
            }
            prop_assert_eq!(hist.iter().collect::<Vec<_>>(), reference.into_iter().collect::<Vec<_>>());
        }
    }

    fn record(id: u64, arrival: u64, first: u64, last: u64, n: u32, outcome: Outcome) -> RequestRecord {
        RequestRecord {
            id: RequestId(id),
            meta: RequestMeta::default(),
            instance: Some(0),
            outcome,
            arrival: Micros(arrival),
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: Some(Micros(first)),
            last_token: Some(Micros(last)),
            finished: Micros(last),
            input_tokens: 10,
            output_tokens: n,
            cached_prompt_tokens: 0,
            preemptions: 0,
            loaded_prompt_tokens: 0,
            kv_load_wait: Micros::ZERO,
            pd: None,
        }
    }

    /// Two requests of 3 tokens, token gaps 10 ms each:
    /// A: TTFT 20 ms, E2E 40 ms; B: TTFT 30 ms, E2E 50 ms.
    /// True ITL = (45 − 25) / 2 = 10 ms. inference-perf sees 2·3 + 2 = 8 lines
    /// per request: 7 gaps, of which 2 are 10 ms and 5 are 5 µs, so its mean
    /// ITL is 20 / 7 ms, its TPOT 20/7 ms, and its median is 5 µs.
    #[test]
    fn inference_perf_metrics_follow_its_line_timestamps() {
        let mut obs = ClientObserver::new(1, 2, true);
        for (id, arr, first) in [(0, 0, 20_000), (1, 100_000, 130_000)] {
            for (k, gap) in [(2, 10_000), (3, 10_000)] {
                obs.on_token(&TokenEvent {
                    id: RequestId(id),
                    meta: Default::default(),
                    instance: 0,
                    index: k,
                    time: Micros(0),
                    gap: Some(Micros(gap)),
                });
            }
            obs.on_finish(&record(id, arr, first, first + 20_000, 3, Outcome::Completed));
        }
        let m = obs.stages[0].metrics(3.0);
        assert_eq!(m.e2e.unwrap().mean, 45.0);
        assert_eq!(m.itl_mean_ms, Some(10.0));
        let ip = m.inference_perf_itl.unwrap();
        assert!((ip.mean - 20.0 / 7.0).abs() < 1e-12);
        assert_eq!(ip.p50, 0.005);
        assert!((m.inference_perf_tpot_mean_ms.unwrap() - 20.0 / 7.0).abs() < 1e-12);
        // Span: first send 0 → last end 150 ms: 2 requests / 0.15 s.
        assert!((m.throughput_rps - 2.0 / 0.15).abs() < 1e-9);
        let seen = |ttft_ms, e2e_ms| Some(Latency { ttft_ms, e2e_ms });
        assert_eq!(obs.per_request, vec![seen(20.0, 40.0), seen(30.0, 50.0)]);
    }

    #[test]
    fn failures_count_in_sent_but_not_in_latencies() {
        let mut obs = ClientObserver::new(1, 2, true);
        obs.on_token(&TokenEvent {
            id: RequestId(1),
            meta: Default::default(),
            instance: 0,
            index: 2,
            time: Micros(0),
            gap: Some(Micros(999)),
        });
        obs.on_finish(&record(0, 0, 10, 20, 2, Outcome::Completed));
        obs.on_finish(&record(1, 0, 10, 300_000_000, 2, Outcome::TimedOut));
        let m = obs.stages[0].metrics(2.0);
        assert_eq!((m.sent, m.failure_fraction), (2, 0.5));
        assert_eq!(m.e2e.unwrap().mean, 0.02);
        assert!(m.token_gap.is_none(), "gaps of the failed request are not counted");
    }
}
