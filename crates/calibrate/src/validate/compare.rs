//! Predicted against measured: the metrics compared, per stage and for the
//! whole run, per request, and aggregated over experiments.

use crate::experiment::{Experiment, Lifecycle, Status};
use crate::validate::client::ClientMetrics;
pub use crate::validate::client::Latency;
use crate::validate::reproduce::Simulated;
use crate::validate::stats::{ape, mean, median, pearson};

/// A metric compared between simulation and measurement. Latencies in ms.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Mean E2E of successes.
    E2eMean,
    /// Median E2E.
    E2eP50,
    /// 90th percentile E2E.
    E2eP90,
    /// 99th percentile E2E.
    E2eP99,
    /// Mean TTFT.
    TtftMean,
    /// Median TTFT.
    TtftP50,
    /// 90th percentile TTFT.
    TtftP90,
    /// 99th percentile TTFT.
    TtftP99,
    /// True mean time per generated token, (E2E mean − TTFT mean) / (n − 1);
    /// measured side: `derived.itl_decode_est_ms`.
    ItlMean,
    /// inference-perf's `inter_token_latency` mean (SSE line gaps).
    InferencePerfItlMean,
    /// inference-perf's `inter_token_latency` p90.
    InferencePerfItlP90,
    /// inference-perf's `time_per_output_token` mean.
    InferencePerfTpotMean,
    /// Successful requests per second.
    ThroughputRps,
    /// Failed / sent.
    FailureFraction,
    /// Requests per second a saturated server completes ([`SaturatedRate`]);
    /// from recorded requests, not from the lifecycle reports, so not in
    /// [`Metric::ALL`].
    SaturatedServiceRps,
}

impl Metric {
    /// Every metric of the lifecycle reports, in report order.
    pub const ALL: [Metric; 14] = [
        Metric::E2eMean,
        Metric::E2eP50,
        Metric::E2eP90,
        Metric::E2eP99,
        Metric::TtftMean,
        Metric::TtftP50,
        Metric::TtftP90,
        Metric::TtftP99,
        Metric::ItlMean,
        Metric::InferencePerfItlMean,
        Metric::InferencePerfItlP90,
        Metric::InferencePerfTpotMean,
        Metric::ThroughputRps,
        Metric::FailureFraction,
    ];

    /// Column name in the CSV and reports.
    pub fn name(self) -> &'static str {
        match self {
            Metric::E2eMean => "e2e_mean_ms",
            Metric::E2eP50 => "e2e_p50_ms",
            Metric::E2eP90 => "e2e_p90_ms",
            Metric::E2eP99 => "e2e_p99_ms",
            Metric::TtftMean => "ttft_mean_ms",
            Metric::TtftP50 => "ttft_p50_ms",
            Metric::TtftP90 => "ttft_p90_ms",
            Metric::TtftP99 => "ttft_p99_ms",
            Metric::ItlMean => "itl_mean_ms",
            Metric::InferencePerfItlMean => "inference_perf_itl_mean_ms",
            Metric::InferencePerfItlP90 => "inference_perf_itl_p90_ms",
            Metric::InferencePerfTpotMean => "inference_perf_tpot_mean_ms",
            Metric::ThroughputRps => "throughput_rps",
            Metric::FailureFraction => "failure_fraction",
            Metric::SaturatedServiceRps => "saturated_service_rps",
        }
    }

    /// The simulated value.
    pub fn predicted(self, m: &ClientMetrics) -> Option<f64> {
        match self {
            Metric::E2eMean => m.e2e.map(|s| s.mean),
            Metric::E2eP50 => m.e2e.map(|s| s.p50),
            Metric::E2eP90 => m.e2e.map(|s| s.p90),
            Metric::E2eP99 => m.e2e.map(|s| s.p99),
            Metric::TtftMean => m.ttft.map(|s| s.mean),
            Metric::TtftP50 => m.ttft.map(|s| s.p50),
            Metric::TtftP90 => m.ttft.map(|s| s.p90),
            Metric::TtftP99 => m.ttft.map(|s| s.p99),
            Metric::ItlMean => m.itl_mean_ms,
            Metric::InferencePerfItlMean => m.inference_perf_itl.map(|s| s.mean),
            Metric::InferencePerfItlP90 => m.inference_perf_itl.map(|s| s.p90),
            Metric::InferencePerfTpotMean => m.inference_perf_tpot_mean_ms,
            Metric::ThroughputRps => Some(m.throughput_rps),
            Metric::FailureFraction => Some(m.failure_fraction),
            Metric::SaturatedServiceRps => None,
        }
    }

    /// The measured value; `mean_output_tokens` is the mean configured
    /// `max_tokens` (see [`crate::validate::reproduce::Simulated::mean_output_tokens`]).
    pub fn actual(self, l: &Lifecycle, mean_output_tokens: f64) -> Option<f64> {
        let lat = l.successes.latency.as_ref();
        let e2e = lat.and_then(|l| l.request_latency.as_ref());
        let ttft = lat.and_then(|l| l.time_to_first_token.as_ref());
        let itl = lat.and_then(|l| l.inter_token_latency.as_ref());
        let ms = |v: f64| v * 1e3;
        match self {
            Metric::E2eMean => e2e.map(|p| ms(p.mean)),
            Metric::E2eP50 => e2e.and_then(|p| p.median).map(ms),
            Metric::E2eP90 => e2e.and_then(|p| p.p90).map(ms),
            Metric::E2eP99 => e2e.and_then(|p| p.p99).map(ms),
            Metric::TtftMean => ttft.map(|p| ms(p.mean)),
            Metric::TtftP50 => ttft.and_then(|p| p.median).map(ms),
            Metric::TtftP90 => ttft.and_then(|p| p.p90).map(ms),
            Metric::TtftP99 => ttft.and_then(|p| p.p99).map(ms),
            Metric::ItlMean => match (e2e, ttft) {
                (Some(e), Some(t)) if mean_output_tokens > 1.0 => Some(ms(e.mean - t.mean) / (mean_output_tokens - 1.0)),
                _ => None,
            },
            Metric::InferencePerfItlMean => itl.map(|p| ms(p.mean)),
            Metric::InferencePerfItlP90 => itl.and_then(|p| p.p90).map(ms),
            Metric::InferencePerfTpotMean => lat.and_then(|l| l.time_per_output_token.as_ref()).map(|p| ms(p.mean)),
            Metric::ThroughputRps => l.successes.throughput.as_ref().and_then(|t| t.requests_per_sec),
            Metric::FailureFraction => Some(l.failure_fraction()),
            Metric::SaturatedServiceRps => None,
        }
    }
}

/// Which part of a run a comparison covers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StageLabel {
    /// One load stage.
    Stage(u32),
    /// The whole run.
    Summary,
}

impl std::fmt::Display for StageLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageLabel::Stage(i) => write!(f, "{i}"),
            StageLabel::Summary => f.write_str("summary"),
        }
    }
}

/// One metric of one stage: predicted, actual, absolute percentage error.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricRow {
    /// Experiment name.
    pub experiment: String,
    /// Stage or summary.
    pub stage: StageLabel,
    /// The metric.
    pub metric: Metric,
    /// Simulated value.
    pub predicted: f64,
    /// Measured value.
    pub actual: f64,
    /// |predicted − actual| / actual × 100; `None` when actual is 0.
    pub ape: Option<f64>,
}

/// Per-request agreement, for experiments with `requests.csv`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RequestAgreement {
    /// Requests that succeeded both in reality and in simulation.
    pub matched: u64,
    /// Mean APE of E2E.
    pub e2e_mape: f64,
    /// Mean APE of TTFT.
    pub ttft_mape: f64,
    /// Pearson r of E2E.
    pub e2e_pearson: Option<f64>,
    /// Pearson r of TTFT.
    pub ttft_pearson: Option<f64>,
}

/// One request of `requests.csv` and its simulated twin.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RequestPair {
    /// Its `index` in `requests.csv`.
    pub index: u64,
    /// Load stage.
    pub stage: u32,
    /// Send time from the first request, s.
    pub send_s: f64,
    /// Prompt tokens the real server saw (0 when it never answered).
    pub input_tokens: u32,
    /// The real request's latencies; `None` when the client saw an error.
    pub real: Option<Latency>,
    /// The simulated request's latencies; `None` when it did not complete
    /// before the client's timeout.
    pub predicted: Option<Latency>,
}

impl RequestPair {
    /// (real, predicted) when the request succeeded in both.
    pub fn both(&self) -> Option<(Latency, Latency)> {
        self.real.zip(self.predicted)
    }
}

/// Where the saturation cliff lies: how many requests per second the server
/// completes once it cannot keep up, measured and simulated over the same
/// window of an overloaded stage. A server saturates when the offered rate
/// exceeds this rate, so its error is the error in the predicted cliff
/// (the saturation validation of `unified-step-time-formula.md`).
///
/// The window is the second half of the time from the stage's first send to
/// the first timeout, real or simulated (send + client timeout), or to the
/// last completion when nothing timed out: late enough that the first
/// wave of requests has drained and the batch is full, early enough that no
/// request has been given up yet, so every completion in it is a success.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SaturatedRate {
    /// The stage of the first real timeout.
    pub stage: u32,
    /// Window start and end, s from the first send.
    pub window_s: [f64; 2],
    /// Real completions per second in the window.
    pub real_rps: f64,
    /// Simulated completions per second in the window.
    pub predicted_rps: f64,
}

/// Completions a window must hold, on both sides, for its rates to count.
const MIN_SATURATED_COMPLETIONS: usize = 10;

impl SaturatedRate {
    /// The saturated rates of the stage where `pairs` (in send order) first
    /// failed in reality; `None` when no real request failed or the window
    /// holds fewer than ten completions on either side.
    pub fn of(pairs: &[RequestPair], client_timeout_s: f64) -> Option<SaturatedRate> {
        let stage = pairs.iter().find(|p| p.real.is_none())?.stage;
        let stage_pairs: Vec<&RequestPair> = pairs.iter().filter(|p| p.stage == stage).collect();
        let start_s = stage_pairs.iter().map(|p| p.send_s).fold(f64::INFINITY, f64::min);
        let completions = |side: fn(&RequestPair) -> Option<Latency>| -> Vec<f64> {
            stage_pairs.iter().filter_map(|p| side(p).map(|l| p.send_s + l.e2e_ms / 1e3)).collect()
        };
        let real = completions(|p| p.real);
        let predicted = completions(|p| p.predicted);
        let first_timeout = |side: fn(&RequestPair) -> Option<Latency>| {
            stage_pairs.iter().filter(|p| side(p).is_none()).map(|p| p.send_s + client_timeout_s).fold(f64::INFINITY, f64::min)
        };
        let last = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let end_s = first_timeout(|p| p.real).min(first_timeout(|p| p.predicted)).min(last(&real)).min(last(&predicted));
        let window_s = [(start_s + end_s) / 2.0, end_s];
        let span_s = window_s[1] - window_s[0];
        let rate = |v: &[f64]| {
            let n = v.iter().filter(|&&t| t >= window_s[0] && t < window_s[1]).count();
            (n >= MIN_SATURATED_COMPLETIONS && span_s > 0.0).then(|| n as f64 / span_s)
        };
        Some(SaturatedRate { stage, window_s, real_rps: rate(&real)?, predicted_rps: rate(&predicted)? })
    }
}

/// One experiment compared.
#[derive(Clone, Debug)]
pub struct ExperimentComparison {
    /// Experiment name.
    pub name: String,
    /// Model id.
    pub model: String,
    /// Active or overload-excluded.
    pub status: Status,
    /// Every metric of every stage, then the summary.
    pub rows: Vec<MetricRow>,
    /// Per-request agreement (with `requests.csv` and known output
    /// lengths, i.e. shared-prefix data).
    pub requests: Option<RequestAgreement>,
    /// Every request of `requests.csv` next to its simulation, in send order
    /// (empty without `requests.csv`).
    pub request_pairs: Vec<RequestPair>,
    /// Simulated client metrics per stage.
    pub predicted_stages: Vec<ClientMetrics>,
    /// Simulated client metrics of the whole run.
    pub predicted_summary: ClientMetrics,
    /// Offered request rate of each stage (requests per second); `None`
    /// for a concurrent stage, which offers no rate.
    pub offered_rps: Vec<Option<f64>>,
    /// Simulated prefix-cache hit rate.
    pub prefix_hit_rate: f64,
    /// Simulated preemptions.
    pub preemptions: u64,
    /// Simulated fused-MoE kernel compiles (stalls of a server started cold).
    pub moe_kernel_compiles: u64,
    /// The saturated service rate, for overload-excluded runs with recorded requests.
    pub saturated: Option<SaturatedRate>,
    /// Requests each stage sent in the real run (successes + failures).
    pub measured_sent: Vec<u64>,
}

/// Failure fraction above which a run counts as overloaded (the rule that
/// classifies the real runs).
pub const OVERLOAD_FAILURE_FRACTION: f64 = 0.1;
/// Relative difference in requests sent above which a stage's simulation
/// is said not to reproduce its run ([`ExperimentComparison::warnings`]).
pub const SENT_TOLERANCE: f64 = 0.1;
/// Served / offered rate below which a simulated stage is saturated.
pub const SATURATION_SERVED_FRACTION: f64 = 0.9;

impl ExperimentComparison {
    /// Compares a simulation with its experiment.
    pub fn new(exp: &Experiment, model: &str, sim: &Simulated) -> ExperimentComparison {
        let output_len = sim.mean_output_tokens;
        let predicted_stages: Vec<ClientMetrics> = sim.client.stages.iter().map(|s| s.metrics(output_len)).collect();
        let predicted_summary = sim.client.summary.metrics(output_len);
        let stages = exp.stages.iter().zip(&predicted_stages).enumerate().map(|(i, (l, p))| (StageLabel::Stage(i as u32), l, p));
        let summary = exp.summary.as_ref().map(|l| (StageLabel::Summary, l, &predicted_summary));
        let request_pairs = request_pairs(exp, sim);
        // With drawn output lengths a request's real length is unknown: no like-for-like per-request errors.
        let requests = if sim.fixed_output { request_agreement(&request_pairs) } else { None };
        let mut rows = Vec::new();
        for (label, measured, p) in stages.chain(summary) {
            for metric in Metric::ALL {
                if let (Some(predicted), Some(actual)) = (metric.predicted(p), metric.actual(measured, output_len)) {
                    rows.push(MetricRow {
                        experiment: exp.name.clone(),
                        stage: label,
                        metric,
                        predicted,
                        actual,
                        ape: ape(predicted, actual),
                    });
                }
            }
        }
        let saturated = (exp.status() == Status::OverloadExcluded)
            .then(|| SaturatedRate::of(&request_pairs, exp.workload.client_timeout().as_secs_f64()))
            .flatten();
        if let Some(r) = saturated {
            rows.push(MetricRow {
                experiment: exp.name.clone(),
                stage: StageLabel::Stage(r.stage),
                metric: Metric::SaturatedServiceRps,
                predicted: r.predicted_rps,
                actual: r.real_rps,
                ape: ape(r.predicted_rps, r.real_rps),
            });
        }
        ExperimentComparison {
            name: exp.name.clone(),
            model: model.to_string(),
            status: exp.status(),
            rows,
            requests,
            request_pairs,
            predicted_stages,
            predicted_summary,
            offered_rps: exp.workload.load.stages.iter().map(blis_workload::inference_perf::Stage::offered_rate).collect(),
            prefix_hit_rate: sim.prefix_hit_rate,
            preemptions: sim.preemptions,
            moe_kernel_compiles: sim.moe_kernel_compiles,
            saturated,
            measured_sent: exp.stages.iter().map(|l| l.successes.count.saturating_add(l.failures.count)).collect(),
        }
    }

    /// A line per stage whose simulation sent more than 10 % more or fewer
    /// requests than the run did: its configuration (rate, duration, stage
    /// list) does not describe what was measured, so its errors compare
    /// different workloads.
    pub fn warnings(&self) -> Vec<String> {
        self.predicted_stages
            .iter()
            .zip(&self.measured_sent)
            .enumerate()
            .filter(|&(_, (p, &m))| m > 0 && p.sent.abs_diff(m) > 1 && p.sent.abs_diff(m) as f64 > SENT_TOLERANCE * m as f64)
            .map(|(i, (p, m))| {
                format!(
                    "{} stage {i}: the simulation sent {} requests where the run sent {m}; results/config.yaml does not describe the load that was measured",
                    self.name, p.sent
                )
            })
            .collect()
    }

    /// The APE of `metric` per stage (not the summary).
    pub fn stage_apes(&self, metric: Metric) -> impl Iterator<Item = f64> + '_ {
        self.rows.iter().filter(move |r| r.metric == metric && r.stage != StageLabel::Summary).filter_map(|r| r.ape)
    }

    /// Whether the simulation lost more than 10 % of the requests of any
    /// stage (the rule that classifies the real runs).
    pub fn predicted_overloaded(&self) -> bool {
        self.predicted_stages.iter().any(|m| m.failure_fraction > OVERLOAD_FAILURE_FRACTION)
    }

    /// The lowest ratio over stages of simulated served rate (successes per
    /// second of the stage's span) to offered rate; below
    /// [`SATURATION_SERVED_FRACTION`] the simulated server cannot keep up,
    /// its queue grows for as long as the stage lasts.
    pub fn predicted_served_fraction(&self) -> f64 {
        self.predicted_stages
            .iter()
            .zip(&self.offered_rps)
            .filter_map(|(m, o)| o.map(|o| m.throughput_rps / o))
            .fold(f64::INFINITY, f64::min)
    }
}

fn request_pairs(exp: &Experiment, sim: &Simulated) -> Vec<RequestPair> {
    let Some(rows) = exp.requests.as_ref() else { return Vec::new() };
    sim.csv_row_of
        .iter()
        .enumerate()
        .filter_map(|(id, &row)| {
            let real = &rows[row?];
            Some(RequestPair {
                index: real.index,
                stage: real.stage,
                send_s: real.arrival_time_us as f64 / 1e6,
                input_tokens: real.input_tokens,
                real: match (real.has_error, real.ttft_ms, real.e2e_ms) {
                    (0, Some(ttft_ms), Some(e2e_ms)) => Some(Latency { ttft_ms, e2e_ms }),
                    _ => None,
                },
                predicted: sim.client.per_request.get(id).copied().flatten(),
            })
        })
        .collect()
}

fn request_agreement(pairs: &[RequestPair]) -> Option<RequestAgreement> {
    let both: Vec<(Latency, Latency)> = pairs.iter().filter_map(RequestPair::both).collect();
    if both.is_empty() {
        return None;
    }
    let column = |f: fn(&Latency) -> f64| -> (Vec<f64>, Vec<f64>) { both.iter().map(|(r, p)| (f(p), f(r))).unzip() };
    let (pe, ae) = column(|l| l.e2e_ms);
    let (pt, at) = column(|l| l.ttft_ms);
    let mape = |p: &[f64], a: &[f64]| mean(&p.iter().zip(a).filter_map(|(&p, &a)| ape(p, a)).collect::<Vec<_>>());
    Some(RequestAgreement {
        matched: both.len() as u64,
        e2e_mape: mape(&pe, &ae),
        ttft_mape: mape(&pt, &at),
        e2e_pearson: pearson(&pe, &ae),
        ttft_pearson: pearson(&pt, &at),
    })
}

/// Mean and median APE of one metric over the stages of active experiments.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Aggregate {
    /// The metric.
    pub metric: Metric,
    /// Stages with a defined APE.
    pub stages: usize,
    /// Mean APE, %.
    pub mean_ape: f64,
    /// Median APE, %.
    pub median_ape: f64,
}

/// Aggregates every metric over the stages of the active experiments.
pub fn aggregate(comparisons: &[ExperimentComparison]) -> Vec<Aggregate> {
    Metric::ALL
        .iter()
        .filter_map(|&metric| {
            let apes: Vec<f64> = comparisons.iter().filter(|c| c.status == Status::Active).flat_map(|c| c.stage_apes(metric)).collect();
            (!apes.is_empty()).then(|| Aggregate { metric, stages: apes.len(), mean_ape: mean(&apes), median_ape: median(&apes) })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Request `i` of stage 0 sent at `i` s, completing at `real(i)` /
    /// `predicted(i)` s after the first send (`None`: it failed).
    fn pairs(n: u32, real: impl Fn(f64) -> Option<f64>, predicted: impl Fn(f64) -> Option<f64>) -> Vec<RequestPair> {
        let latency = |send_s: f64, done_s: Option<f64>| done_s.map(|d| Latency { ttft_ms: 1.0, e2e_ms: (d - send_s) * 1e3 });
        (0..n)
            .map(|i| {
                let send_s = f64::from(i);
                RequestPair {
                    index: u64::from(i),
                    stage: 0,
                    send_s,
                    input_tokens: 100,
                    real: latency(send_s, real(send_s)),
                    predicted: latency(send_s, predicted(send_s)),
                }
            })
            .collect()
    }

    #[test]
    fn saturated_rate_counts_completions_in_the_second_half_before_the_first_timeout() {
        // Real: one completion every 2 s from 20 s, requests from 120 s on time out
        // (the first at 120 + 100 s). Simulated: one every 1.25 s, none time out.
        let p = pairs(200, |s| (s < 120.0).then_some(20.0 + 2.0 * s), |s| Some(20.0 + 1.25 * s));
        let r = SaturatedRate::of(&p, 100.0).unwrap();
        assert_eq!(r.window_s, [110.0, 220.0]);
        // Real completions in [110, 220): sends 45..100, 55 of them; simulated: sends 72..160, 88.
        assert_eq!((r.stage, r.real_rps, r.predicted_rps), (0, 55.0 / 110.0, 88.0 / 110.0));
        // A simulated timeout earlier than the real one ends the window there.
        let p = pairs(200, |s| (s < 120.0).then_some(20.0 + 2.0 * s), |s| (s < 60.0).then_some(20.0 + 2.5 * s));
        let r = SaturatedRate::of(&p, 100.0).unwrap();
        // [80, 160): real sends 30..70 (40), simulated sends 24..56 (32).
        assert_eq!((r.window_s, r.real_rps, r.predicted_rps), ([80.0, 160.0], 0.5, 0.4));
    }

    #[test]
    fn saturated_rate_needs_a_real_failure_and_enough_completions() {
        assert_eq!(SaturatedRate::of(&pairs(200, |s| Some(s + 5.0), |s| Some(s + 5.0)), 100.0), None);
        // Nine simulated completions in the window [110, 220) are too few to measure a rate; ten are enough.
        for (early, want) in [(9.0, None), (10.0, Some(10.0 / 110.0))] {
            let p = pairs(200, |s| (s < 120.0).then_some(20.0 + 2.0 * s), |s| Some(if s < early { 150.0 + s } else { 1000.0 + s }));
            assert_eq!(SaturatedRate::of(&p, 100.0).map(|r| r.predicted_rps), want, "{early}");
        }
    }
}
