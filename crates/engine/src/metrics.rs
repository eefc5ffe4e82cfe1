//! Streaming metrics: exact latency distributions and run counters.
//!
//! Percentiles are exact (see [`Samples`] for the one exception), computed like numpy's default (linear
//! interpolation between closest ranks), which is what inference-perf and
//! `vllm bench serve` report. Request-level samples cost 8 bytes per request
//! and metric up to [`EXACT_SAMPLES`] requests, then go into a constant-size
//! log-linear histogram (percentiles within 0.012 %, count, mean, min and
//! max exact); per-token inter-token latencies are integer microseconds
//! stored as counts per distinct value, so their memory does not grow with
//! the number of tokens.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::histogram::LogHistogram;
use crate::instance::{InstanceStats, Observer, TokenEvent};
use crate::kv::offload::{Medium, OffloadStats};
use crate::request::{DropReason, Labels, Outcome, RequestMeta, RequestRecord, SloClassId, TenantId};
use crate::time::{Micros, US_PER_MS};

/// Linear-interpolation percentile (numpy's default) of sorted values.
/// `p` in [0, 100]. Returns NaN for an empty slice.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    interpolate(sorted.len() as u64, p, |i| sorted[i as usize], 1.0)
}

/// The `p`-th percentile of `n ≥ 1` sorted values, value `i` being `at(i)`,
/// divided by `per_unit`. The rank p·(n − 1)/100 is kept as the whole rank
/// and the remainder r of p·(n − 1) over 100, and the result computed as
/// (100·a + r·(b − a)) / (100·per_unit): for whole-number samples and a
/// whole-percent p every step but the last division is exact, so the result
/// is the nearest float to the true percentile (48.772, not 48.772000000000006).
fn interpolate(n: u64, p: f64, at: impl Fn(u64) -> f64, per_unit: f64) -> f64 {
    let scaled = p * (n - 1) as f64;
    let lo = (scaled / 100.0).floor();
    let r = (scaled - lo * 100.0).max(0.0);
    let a = at(lo as u64);
    if r == 0.0 { a / per_unit } else { (100.0 * a + r * (at(lo as u64 + 1) - a)) / (100.0 * per_unit) }
}

/// Samples kept individually up to this many; beyond, in a [`LogHistogram`].
pub const EXACT_SAMPLES: usize = 1 << 16;

/// A set of samples (any unit): exact percentiles up to [`EXACT_SAMPLES`]
/// samples (8 bytes each), then a [`LogHistogram`] of constant size whose
/// percentiles are within [`crate::histogram::RELATIVE_ERROR`] (0.012 %) of the
/// exact ones, with count, mean, min and max still exact. So memory stays
/// bounded (at most 0.5 MiB exact, about 1 MiB as a histogram) however long
/// the run.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    values: Vec<f64>,
    histogram: Option<Box<LogHistogram>>,
}

impl Samples {
    /// Adds one sample (finite).
    pub fn push(&mut self, v: f64) {
        if let Some(h) = &mut self.histogram {
            h.push(v);
        } else if self.values.len() < EXACT_SAMPLES {
            self.values.push(v);
        } else {
            let mut h = Box::<LogHistogram>::default();
            for &x in self.values.iter().chain([&v]) {
                h.push(x);
            }
            self.values = Vec::new();
            self.histogram = Some(h);
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.histogram.as_ref().map_or(self.values.len(), |h| h.len() as usize)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the percentiles are exact (at most [`EXACT_SAMPLES`] samples).
    pub fn is_exact(&self) -> bool {
        self.histogram.is_none()
    }

    /// Summary statistics in units of `per_unit` samples ([`US_PER_MS`] for µs → ms):
    /// each value is divided by it, which, unlike multiplying by 0.001,
    /// gives the nearest float to the exact quotient (48.772, not
    /// 48.772000000000006).
    pub fn summary(&self, per_unit: f64) -> Distribution {
        if let Some(h) = &self.histogram {
            return Distribution::new(h.len(), h.sum(), h.min(), h.max(), |r| h.at_rank(r), per_unit);
        }
        let mut sorted = self.values.clone();
        // Values equal under total_cmp are the same bits: an unstable sort gives the same sequence, faster.
        sorted.sort_unstable_by(f64::total_cmp);
        let n = sorted.len() as u64;
        if n == 0 {
            return Distribution::empty();
        }
        let at = |i: u64| sorted[i as usize];
        Distribution::new(n, sorted.iter().sum(), sorted[0], sorted[sorted.len() - 1], at, per_unit)
    }
}

/// Integer-valued samples (µs) stored as a count per distinct value: exact
/// percentiles in memory bounded by the number of distinct values rather
/// than the number of samples. Consecutive equal values (every decoding
/// request in a step sees the same gap) form a run; finished runs are
/// buffered and merged into a sorted vector of counts in batches (sorting
/// the batch, then one sequential merge), so pushing is O(1) amortised plus
/// O(log batch) per run and touches no scattered memory. Memory: at most
/// three times the distinct values (merged counts and the merge target)
/// plus a batch.
#[derive(Clone, Debug, Default)]
pub struct IntCounts {
    /// (value, count), sorted by value, one entry per value.
    merged: Vec<(u64, u64)>,
    /// Finished runs not merged yet, in arrival order.
    pending: Vec<(u64, u64)>,
    /// Reused as the merge target.
    scratch: Vec<(u64, u64)>,
    run: Option<(u64, u64)>,
}

/// Runs buffered before a merge (at least; a merge waits for as many runs as
/// there are merged values, so its cost is amortised).
const MERGE_BATCH: usize = 1024;

/// Appends the union of two value-sorted count lists to `out`, summing the
/// counts of equal values (`b` may repeat a value).
fn merge_sorted(a: &[(u64, u64)], b: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = if j == b.len() || (i < a.len() && a[i].0 <= b[j].0) {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        match out.last_mut() {
            Some(last) if last.0 == next.0 => last.1 += next.1,
            _ => out.push(next),
        }
    }
}

impl IntCounts {
    /// Adds one sample.
    #[inline]
    pub fn push(&mut self, v: u64) {
        match &mut self.run {
            Some((last, n)) if *last == v => *n += 1,
            _ => self.start_run(v),
        }
    }

    /// Buffers the finished run and starts one of `v`.
    fn start_run(&mut self, v: u64) {
        if let Some(run) = self.run.replace((v, 1)) {
            self.pending.push(run);
            if self.pending.len() >= MERGE_BATCH.max(self.merged.len()) {
                self.pending.sort_unstable_by_key(|r| r.0);
                self.scratch.clear();
                merge_sorted(&self.merged, &self.pending, &mut self.scratch);
                std::mem::swap(&mut self.merged, &mut self.scratch);
                self.pending.clear();
            }
        }
    }

    /// The samples of every part together (an exact multiset union).
    pub fn union<'a>(parts: impl IntoIterator<Item = &'a IntCounts>) -> IntCounts {
        let mut merged = Vec::new();
        for part in parts {
            let mut out = Vec::new();
            merge_sorted(&merged, &part.value_counts(), &mut out);
            merged = out;
        }
        IntCounts { merged, ..IntCounts::default() }
    }

    /// (value, count) pairs in increasing value order, including the runs
    /// not merged yet.
    pub fn value_counts(&self) -> Vec<(u64, u64)> {
        let mut unmerged: Vec<(u64, u64)> = self.pending.iter().copied().chain(self.run).collect();
        unmerged.sort_unstable_by_key(|r| r.0);
        let mut out = Vec::with_capacity(self.merged.len() + unmerged.len());
        merge_sorted(&self.merged, &unmerged, &mut out);
        out
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.merged.iter().chain(&self.pending).chain(&self.run).map(|r| r.1).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Summary statistics, exactly as if every sample were stored
    /// individually, in units of `per_unit` samples (see [`Samples::summary`]).
    pub fn summary(&self, per_unit: f64) -> Distribution {
        let runs = self.value_counts();
        let count: u64 = runs.iter().map(|r| r.1).sum();
        if count == 0 {
            return Distribution::empty();
        }
        let sum: f64 = runs.iter().map(|&(v, n)| v as f64 * n as f64).sum();
        // Value at 0-based rank r of the expanded multiset.
        let at = |r: u64| -> f64 {
            let mut seen = 0;
            for &(v, n) in &runs {
                seen += n;
                if r < seen {
                    return v as f64;
                }
            }
            runs[runs.len() - 1].0 as f64
        };
        Distribution::new(count, sum, runs[0].0 as f64, runs[runs.len() - 1].0 as f64, at, per_unit)
    }
}

/// Summary of one distribution. Empty distributions hold `count: 0` and
/// zeros elsewhere, and serialize those statistics as `null` (JSON has no
/// NaN, and a 0 ms latency would read as a measurement).
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    /// Number of samples.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest sample.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Serialize for Distribution {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let stat = |v: f64| (self.count > 0).then_some(v);
        let mut out = serializer.serialize_struct("Distribution", 8)?;
        out.serialize_field("count", &self.count)?;
        for (name, v) in [
            ("mean", self.mean),
            ("min", self.min),
            ("p50", self.p50),
            ("p90", self.p90),
            ("p95", self.p95),
            ("p99", self.p99),
            ("max", self.max),
        ] {
            out.serialize_field(name, &stat(v))?;
        }
        out.end()
    }
}

impl Distribution {
    fn empty() -> Distribution {
        Distribution { count: 0, mean: 0.0, min: 0.0, p50: 0.0, p90: 0.0, p95: 0.0, p99: 0.0, max: 0.0 }
    }

    /// The statistics of `count ≥ 1` sorted samples summing to `sum`, sample
    /// `i` being `at(i)`, each figure divided by `per_unit` once.
    fn new(count: u64, sum: f64, min: f64, max: f64, at: impl Fn(u64) -> f64 + Copy, per_unit: f64) -> Distribution {
        let pct = |p: f64| interpolate(count, p, at, per_unit);
        Distribution {
            count,
            mean: sum / (count as f64 * per_unit),
            min: min / per_unit,
            p50: pct(50.0),
            p90: pct(90.0),
            p95: pct(95.0),
            p99: pct(99.0),
            max: max / per_unit,
        }
    }
}

/// Accumulates request records and token gaps into latency distributions.
#[derive(Clone, Debug, Default)]
pub struct Collector {
    /// Requests that completed.
    pub completed: u64,
    /// Requests dropped, by reason (index = position in [`DropReason::ALL`]).
    pub dropped: [u64; 2],
    /// Requests given up at the client timeout.
    pub timed_out: u64,
    /// Requests refused by a cluster's admission policy.
    pub rejected: u64,
    /// Prompt tokens of completed requests.
    pub input_tokens: u64,
    /// Output tokens of completed requests.
    pub output_tokens: u64,
    /// Time to first token of completed requests, µs.
    pub ttft_us: Samples,
    /// Time per output token after the first, µs.
    pub tpot_us: Samples,
    /// End-to-end latency, µs.
    pub e2e_us: Samples,
    /// Queue time (enqueued → first scheduled), µs.
    pub scheduling_delay_us: Samples,
    /// Gaps between consecutive tokens of a request, µs.
    pub itl_us: IntCounts,
    /// Earliest arrival seen.
    pub first_arrival: Option<Micros>,
    /// Latest finish seen.
    pub last_finish: Micros,
}

impl Collector {
    /// Requests dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// Adds one finished request.
    pub fn record(&mut self, r: &RequestRecord) {
        match r.outcome {
            Outcome::Completed => {
                self.completed += 1;
                self.input_tokens += u64::from(r.input_tokens);
                self.output_tokens += u64::from(r.output_tokens);
                if let Some(t) = r.ttft() {
                    self.ttft_us.push(t.as_us() as f64);
                }
                if let Some(t) = r.tpot_us() {
                    self.tpot_us.push(t);
                }
                if let Some(t) = r.e2e() {
                    self.e2e_us.push(t.as_us() as f64);
                }
                if let Some(t) = r.scheduling_delay() {
                    self.scheduling_delay_us.push(t.as_us() as f64);
                }
            }
            Outcome::Dropped(reason) => {
                let i = DropReason::ALL.iter().position(|&x| x == reason).unwrap_or(0);
                self.dropped[i] += 1;
            }
            Outcome::TimedOut => self.timed_out += 1,
            Outcome::Rejected(_) => {
                // Never reached a server: counted, but no part of the span.
                self.rejected += 1;
                return;
            }
        }
        self.first_arrival = Some(self.first_arrival.map_or(r.arrival, |a| a.min(r.arrival)));
        self.last_finish = self.last_finish.max(r.finished);
    }

    /// Adds one token gap.
    #[inline]
    pub fn token(&mut self, t: &TokenEvent) {
        if let Some(gap) = t.gap {
            self.itl_us.push(gap.as_us());
        }
    }

    /// The latency block of a report, in milliseconds.
    pub fn latency_ms(&self) -> LatencyReport {
        LatencyReport {
            ttft: self.ttft_us.summary(US_PER_MS),
            tpot: self.tpot_us.summary(US_PER_MS),
            itl: self.itl_us.summary(US_PER_MS),
            e2e: self.e2e_us.summary(US_PER_MS),
            scheduling_delay: self.scheduling_delay_us.summary(US_PER_MS),
        }
    }
}

impl Observer for Collector {
    fn on_finish(&mut self, record: &RequestRecord) {
        self.record(record);
    }

    fn on_token(&mut self, token: &TokenEvent) {
        self.token(token);
    }
}

/// Latency distributions of completed requests, in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyReport {
    /// Time to first token.
    pub ttft: Distribution,
    /// Time per output token, excluding the first token (per-request mean).
    pub tpot: Distribution,
    /// Inter-token latency over all token gaps.
    pub itl: Distribution,
    /// End-to-end latency.
    pub e2e: Distribution,
    /// Queue time from entering the wait queue to first scheduling.
    pub scheduling_delay: Distribution,
}

/// Request counts of a run. Conservation: `injected = completed + queued +
/// running + dropped + timed_out`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestCounts {
    /// Requests that reached an instance.
    pub injected: u64,
    /// Requests that generated all their output tokens.
    pub completed: u64,
    /// Requests still waiting when the run ended.
    pub queued: u64,
    /// Requests still running when the run ended.
    pub running: u64,
    /// Requests refused because they could never run.
    pub dropped: u64,
    /// Dropped requests by reason.
    pub dropped_by_reason: BTreeMap<&'static str, u64>,
    /// Requests abandoned at the client timeout.
    pub timed_out: u64,
}

/// Token totals over completed requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenCounts {
    /// Prompt tokens.
    pub input_total: u64,
    /// Generated tokens.
    pub output_total: u64,
}

/// Throughput over the simulated duration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Throughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Generated tokens per second.
    pub output_tokens_per_s: f64,
    /// Prompt plus generated tokens per second.
    pub total_tokens_per_s: f64,
}

/// KV-cache behaviour.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvReport {
    /// Prompt tokens served from the prefix cache / prompt tokens looked up,
    /// counted at each admission from the wait queue.
    pub prefix_hit_rate: f64,
    /// Highest fraction of usable blocks in use after scheduling a step.
    pub utilization_peak: f64,
    /// Time-weighted mean of that fraction over the simulated duration.
    pub utilization_mean: f64,
    /// Requests preempted (recompute).
    pub preemptions: u64,
    /// The tiers below the GPU cache (CPU, disk, remote), when offloading is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadReport>,
}

/// What the offload tiers of all instances did. Bytes are one GPU's share
/// (every GPU of a tensor-parallel instance moves its shard at once).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OffloadReport {
    /// Blocks loaded from any tier / blocks looked up after each admitted request's GPU hit.
    pub hit_rate: f64,
    /// Requests that loaded a prefix from the tiers.
    pub loads: u64,
    /// Blocks loaded into the GPU.
    pub loaded_blocks: u64,
    /// Stores put off to a later step because a tier had too few evictable blocks.
    pub deferred_stores: u64,
    /// Bytes moved host → GPU, per GPU.
    pub bytes_loaded: u64,
    /// Bytes moved GPU → host, per GPU.
    pub bytes_stored: u64,
    /// Mean over instances of the fraction of the run the host → GPU link was busy.
    pub load_link_busy_fraction: f64,
    /// Mean over instances of the fraction of the run the GPU → host link was busy.
    pub store_link_busy_fraction: f64,
    /// Mean time from a load's start to its landing, ms.
    pub mean_load_wait_ms: f64,
    /// Loaded blocks that had landed in their tier less than a second
    /// before (offloaded and needed back at once) / loaded blocks.
    pub thrashing_rate: f64,
    /// Per tier, nearest first.
    pub tiers: Vec<TierReport>,
}

/// What one tier (summed over instances) did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierReport {
    /// `cpu`, `disk` or `remote`.
    pub medium: Medium,
    /// Blocks, over all instances.
    pub capacity_blocks: u64,
    /// Blocks loaded from this tier / blocks looked up below the GPU.
    pub hit_rate: f64,
    /// Blocks loaded from this tier.
    pub loaded_blocks: u64,
    /// Blocks copied into this tier.
    pub stored_blocks: u64,
    /// Bytes read from this tier, per GPU.
    pub bytes_loaded: u64,
    /// Bytes written to this tier, per GPU.
    pub bytes_stored: u64,
    /// Blocks loaded from this tier that had landed in it less than a
    /// second before and whose GPU copy was gone / blocks loaded from it.
    pub thrashing_rate: f64,
    /// Mean over instances of the fraction of the run the tier's own link
    /// (host ↔ medium) was busy; absent for host memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_busy_fraction: Option<f64>,
}

impl OffloadReport {
    fn build(all: &[&OffloadStats], duration: Micros) -> OffloadReport {
        let n = all.len() as f64;
        let mut sum = OffloadStats::default();
        for s in all {
            sum.absorb(s);
        }
        let busy = |t: Micros| ratio(t.as_us() as f64 / n, duration.as_us() as f64);
        let loaded = sum.hit_blocks();
        let tiers = sum
            .tiers
            .iter()
            .map(|t| TierReport {
                medium: t.medium,
                capacity_blocks: all.iter().flat_map(|s| &s.tiers).filter(|x| x.medium == t.medium).map(|x| x.capacity_blocks).sum(),
                hit_rate: ratio(t.hit_blocks as f64, sum.lookup_blocks as f64),
                loaded_blocks: t.hit_blocks,
                stored_blocks: t.stored_blocks,
                bytes_loaded: t.hit_blocks * sum.block_bytes,
                bytes_stored: t.stored_blocks * sum.block_bytes,
                thrashing_rate: ratio(t.thrashed_blocks as f64, t.hit_blocks as f64),
                link_busy_fraction: (t.medium != Medium::Cpu).then(|| busy(t.read_busy + t.write_busy)),
            })
            .collect();
        OffloadReport {
            hit_rate: ratio(loaded as f64, sum.lookup_blocks as f64),
            loads: sum.loads,
            loaded_blocks: loaded,
            deferred_stores: sum.deferred_stores,
            bytes_loaded: sum.load_bytes,
            bytes_stored: sum.store_bytes,
            load_link_busy_fraction: busy(sum.load_busy),
            store_link_busy_fraction: busy(sum.store_busy),
            mean_load_wait_ms: ratio(sum.load_wait.as_us() as f64 / 1e3, sum.loads as f64),
            thrashing_rate: ratio(sum.tiers.iter().map(|t| t.thrashed_blocks).sum::<u64>() as f64, loaded as f64),
            tiers,
        }
    }
}

/// Scheduler activity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchReport {
    /// Steps executed.
    pub steps: u64,
    /// Mean requests per step.
    pub mean_batch_size: f64,
    /// Mean tokens per step.
    pub mean_batch_tokens: f64,
    /// Fraction of the simulated duration the GPUs were busy.
    pub busy_fraction: f64,
    /// Steps whose predicted time was clamped to [1 µs, 1 h]: non-zero means
    /// the latency model's coefficients do not describe some batches.
    pub steps_clamped: u64,
    /// Latency-model overheads (queueing, token emission, per-token,
    /// completion) clamped to 1 h: non-zero means the α coefficients are absurd.
    pub overheads_clamped: u64,
    /// Steps that stalled to compile a fused-MoE kernel on first use (a MoE
    /// server started with a cold Triton cache, [`crate::warmup`]).
    pub moe_kernel_compiles: u64,
    /// What those stalls took together, seconds (summed over instances).
    pub moe_compile_stall_s: f64,
}

/// Everything a run measured, ready to serialise.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSummary {
    /// Request counts.
    pub requests: RequestCounts,
    /// Token totals.
    pub tokens: TokenCounts,
    /// From the first arrival to the end of the run, seconds.
    pub simulated_duration_s: f64,
    /// Rates.
    pub throughput: Throughput,
    /// Latency distributions, ms.
    pub latency_ms: LatencyReport,
    /// Cache behaviour.
    pub kv_cache: KvReport,
    /// Batch statistics.
    pub batch: BatchReport,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

impl RunSummary {
    /// Combines the collector with per-instance counters. `end` is when the
    /// run stopped; `queued`/`running` are the requests left at that time.
    pub fn build(collector: &Collector, instances: &[&InstanceStats], end: Micros, queued: u64, running: u64) -> RunSummary {
        let start = collector.first_arrival.unwrap_or(Micros::ZERO);
        let duration = end.max(collector.last_finish) - start;
        let secs = duration.as_secs_f64();
        let n = instances.len().max(1) as f64;
        let sum = |f: fn(&InstanceStats) -> u64| instances.iter().map(|s| f(s)).sum::<u64>();
        let steps = sum(|s| s.steps);
        let dropped_by_reason = DropReason::ALL.iter().zip(collector.dropped).map(|(r, n)| (r.as_str(), n)).collect();
        RunSummary {
            requests: RequestCounts {
                injected: sum(|s| s.injected),
                completed: collector.completed,
                queued,
                running,
                dropped: collector.dropped_total(),
                dropped_by_reason,
                timed_out: collector.timed_out,
            },
            tokens: TokenCounts { input_total: collector.input_tokens, output_total: collector.output_tokens },
            simulated_duration_s: secs,
            throughput: Throughput {
                requests_per_s: ratio(collector.completed as f64, secs),
                output_tokens_per_s: ratio(collector.output_tokens as f64, secs),
                total_tokens_per_s: ratio((collector.input_tokens + collector.output_tokens) as f64, secs),
            },
            latency_ms: collector.latency_ms(),
            kv_cache: KvReport {
                prefix_hit_rate: ratio(sum(|s| s.prefix_hit_tokens) as f64, sum(|s| s.prefix_query_tokens) as f64),
                utilization_peak: instances.iter().map(|s| s.kv_usage_peak).fold(0.0, f64::max),
                utilization_mean: ratio(instances.iter().map(|s| s.kv_usage_integral).sum::<f64>() / n, duration.as_us() as f64),
                preemptions: sum(|s| s.preemptions),
                offload: {
                    let all: Vec<&OffloadStats> = instances.iter().filter_map(|s| s.offload.as_ref()).collect();
                    (!all.is_empty()).then(|| OffloadReport::build(&all, duration))
                },
            },
            batch: BatchReport {
                steps,
                mean_batch_size: ratio(sum(|s| s.batch_requests) as f64, steps as f64),
                mean_batch_tokens: ratio(sum(|s| s.batch_tokens) as f64, steps as f64),
                busy_fraction: ratio(sum(|s| s.busy.as_us()) as f64 / n, duration.as_us() as f64),
                steps_clamped: sum(|s| s.steps_clamped),
                overheads_clamped: sum(|s| s.overheads_clamped),
                moe_kernel_compiles: sum(|s| s.moe_kernel_compiles),
                moe_compile_stall_s: sum(|s| s.moe_compile_stall.as_us()) as f64 / 1e6,
            },
        }
    }
}

/// The label a [`Breakdown`] groups requests by.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupBy {
    /// Workload client.
    Client,
    /// Tenant.
    Tenant,
    /// SLO class.
    SloClass,
    /// Load stage.
    Stage,
    /// Serving instance.
    Instance,
}

impl GroupBy {
    /// The group of a request on `instance` (`None`: it reached none, and
    /// has no group by instance).
    fn key(self, meta: &RequestMeta, instance: Option<u32>) -> Option<u32> {
        Some(match self {
            GroupBy::Client => meta.client,
            GroupBy::Tenant => meta.tenant.0,
            GroupBy::SloClass => u32::from(meta.slo_class.0),
            GroupBy::Stage => meta.stage,
            GroupBy::Instance => instance?,
        })
    }

    fn name(self, labels: &Labels, key: u32) -> String {
        match self {
            GroupBy::Client => labels.client(key),
            GroupBy::Tenant => labels.tenant(TenantId(key)),
            GroupBy::SloClass => labels.slo_class(SloClassId(key as u16)),
            GroupBy::Stage => key.to_string(),
            GroupBy::Instance => key.to_string(),
        }
    }
}

/// One [`Collector`] per value of a label: per-client, per-tenant,
/// per-SLO-class, per-stage or per-instance distributions.
#[derive(Clone, Debug)]
pub struct Breakdown {
    by: GroupBy,
    groups: BTreeMap<u32, Collector>,
}

/// Counts and latencies of one group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupSummary {
    /// Requests that completed.
    pub completed: u64,
    /// Requests dropped.
    pub dropped: u64,
    /// Requests abandoned at the client timeout.
    pub timed_out: u64,
    /// Requests refused by a cluster's admission policy.
    pub rejected: u64,
    /// Prompt tokens of completed requests.
    pub input_tokens: u64,
    /// Output tokens of completed requests.
    pub output_tokens: u64,
    /// Latency distributions, ms.
    pub latency_ms: LatencyReport,
}

impl Breakdown {
    /// An empty breakdown by `by`.
    pub fn new(by: GroupBy) -> Breakdown {
        Breakdown { by, groups: BTreeMap::new() }
    }

    /// The per-group collectors, keyed by interned id.
    pub fn groups(&self) -> &BTreeMap<u32, Collector> {
        &self.groups
    }

    /// Summaries keyed by group name (sorted, so reports are deterministic).
    pub fn summaries(&self, labels: &Labels) -> BTreeMap<String, GroupSummary> {
        self.groups
            .iter()
            .map(|(&k, c)| {
                (
                    self.by.name(labels, k),
                    GroupSummary {
                        completed: c.completed,
                        dropped: c.dropped_total(),
                        timed_out: c.timed_out,
                        rejected: c.rejected,
                        input_tokens: c.input_tokens,
                        output_tokens: c.output_tokens,
                        latency_ms: c.latency_ms(),
                    },
                )
            })
            .collect()
    }
}

impl Observer for Breakdown {
    fn on_finish(&mut self, record: &RequestRecord) {
        if let Some(key) = self.by.key(&record.meta, record.instance) {
            self.groups.entry(key).or_default().record(record);
        }
    }

    fn on_token(&mut self, token: &TokenEvent) {
        if let Some(key) = self.by.key(&token.meta, Some(token.instance)) {
            self.groups.entry(key).or_default().token(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute(values: &[f64], p: f64) -> f64 {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = p / 100.0 * (v.len() - 1) as f64;
        let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
        v[lo] * (1.0 - (rank - lo as f64)) + v[hi] * (rank - lo as f64)
    }

    #[test]
    fn numpy_reference_values() {
        // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = [2.5, 3.7, 3.97]
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&s, 50.0), 2.5);
        assert!((percentile_sorted(&s, 90.0) - 3.7).abs() < 1e-12);
        assert!((percentile_sorted(&s, 99.0) - 3.97).abs() < 1e-12);
    }

    #[test]
    fn breakdown_groups_by_label() {
        use crate::request::RequestId;
        let mut b = Breakdown::new(GroupBy::Tenant);
        for (id, tenant) in [(0, 1), (1, 0), (2, 1)] {
            let meta = RequestMeta { tenant: TenantId(tenant), ..RequestMeta::default() };
            b.on_finish(&RequestRecord {
                id: RequestId(id),
                meta,
                instance: Some(0),
                outcome: Outcome::Completed,
                arrival: Micros(0),
                enqueued: None,
                queued: None,
                first_scheduled: None,
                first_token: Some(Micros(10 * id + 5)),
                last_token: Some(Micros(100)),
                finished: Micros(100),
                input_tokens: 1,
                output_tokens: 2,
                cached_prompt_tokens: 0,
                preemptions: 0,
                loaded_prompt_tokens: 0,
                kv_load_wait: Micros::ZERO,
                pd: None,
            });
        }
        let labels = Labels { tenants: vec!["free".into(), "paid".into()], ..Labels::default() };
        let s = b.summaries(&labels);
        assert_eq!(s.keys().collect::<Vec<_>>(), ["free", "paid"]);
        assert_eq!((s["free"].completed, s["paid"].completed), (1, 2));
        assert!((s["paid"].latency_ms.ttft.mean - 0.015).abs() < 1e-12); // (5 + 25) / 2 µs = 15 µs
    }

    /// Past [`EXACT_SAMPLES`] the summary moves to the histogram: count,
    /// min and max stay exact, the mean to rounding, and every percentile
    /// is within the histogram's relative error of the brute-force one.
    #[test]
    fn samples_past_the_exact_limit_stay_within_the_stated_error() {
        use rand::RngExt;
        let mut rng = crate::rng::subsystem_rng(7, "samples");
        let values: Vec<f64> = (0..EXACT_SAMPLES * 2 + 17).map(|_| rng.random_range(0..10_000_000u64) as f64).collect();
        let mut s = Samples::default();
        for (i, &v) in values.iter().enumerate() {
            s.push(v);
            assert_eq!(s.is_exact(), i < EXACT_SAMPLES, "sample {i}");
        }
        let d = s.summary(US_PER_MS);
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(d.count, values.len() as u64);
        assert_eq!((d.min, d.max), (sorted[0] / US_PER_MS, sorted[sorted.len() - 1] / US_PER_MS));
        let mean = values.iter().sum::<f64>() / values.len() as f64 / US_PER_MS;
        assert!((d.mean - mean).abs() <= 1e-9 * mean);
        for (p, got) in [(50.0, d.p50), (90.0, d.p90), (95.0, d.p95), (99.0, d.p99)] {
            let want = brute(&values, p) / US_PER_MS;
            assert!((got - want).abs() <= crate::histogram::RELATIVE_ERROR * want, "p{p}: {got} vs {want}");
        }
    }

    proptest! {
        /// Batched merging counts exactly what a map of counts would, across
        /// many merges (values from a small range recur between batches).
        #[test]
        fn int_counts_count_every_value(raw in prop::collection::vec(prop_oneof![0u64..50, 0u64..100_000], 1..20_000)) {
            let mut w = IntCounts::default();
            let mut want = BTreeMap::new();
            for &v in &raw {
                w.push(v);
                *want.entry(v).or_insert(0u64) += 1;
            }
            prop_assert_eq!(w.value_counts(), want.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(w.len(), raw.len() as u64);
            prop_assert!(w.merged.len() + w.pending.len() <= 2 * w.value_counts().len() + MERGE_BATCH);
        }

        /// Gaps kept per instance and united give what one collector of
        /// every gap gives: the same counts and the same summary, bit for bit.
        #[test]
        fn a_union_of_counts_is_one_collector_of_every_sample(raw in prop::collection::vec((0usize..4, prop_oneof![0u64..50, 0u64..100_000]), 1..2_000)) {
            let mut parts = vec![IntCounts::default(); 4];
            let mut one = IntCounts::default();
            for &(part, v) in &raw {
                parts[part].push(v);
                one.push(v);
            }
            let united = IntCounts::union(&parts);
            prop_assert_eq!(united.value_counts(), one.value_counts());
            prop_assert_eq!(format!("{:?}", united.summary(1000.0)), format!("{:?}", one.summary(1000.0)));
        }

        #[test]
        fn percentiles_equal_brute_force(raw in prop::collection::vec(prop_oneof![0u64..1_000_000, 0u64..5], 1..400)) {
            let values: Vec<f64> = raw.iter().map(|&v| v as f64).collect();
            let mut s = Samples::default();
            let mut w = IntCounts::default();
            for (&v, &r) in values.iter().zip(&raw) {
                s.push(v);
                w.push(r);
            }
            let (ds, dw) = (s.summary(1.0), w.summary(1.0));
            for (p, got_s, got_w) in [(50.0, ds.p50, dw.p50), (90.0, ds.p90, dw.p90), (95.0, ds.p95, dw.p95), (99.0, ds.p99, dw.p99)] {
                let want = brute(&values, p);
                prop_assert!((got_s - want).abs() <= 1e-9 * want.max(1.0), "p{p}: {got_s} vs {want}");
                prop_assert!((got_w - want).abs() <= 1e-9 * want.max(1.0), "weighted p{p}: {got_w} vs {want}");
            }
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            prop_assert!((ds.mean - mean).abs() <= 1e-9 * mean.max(1.0));
            prop_assert!((dw.mean - mean).abs() <= 1e-9 * mean.max(1.0));
            prop_assert_eq!(dw.count, values.len() as u64);
        }

        /// Whole-microsecond samples summarised in milliseconds give the
        /// float nearest to each exact percentile, which is a decimal with at
        /// most five places: (100·a + r·(b − a)) / 100 000 for the samples
        /// a ≤ b around the rank and r = p·(n − 1) mod 100, computed here in
        /// integers and parsed (Rust's parse rounds correctly).
        #[test]
        fn millisecond_percentiles_are_the_nearest_float(raw in prop::collection::vec(0u64..10_000_000_000, 1..300)) {
            let mut sorted = raw.clone();
            sorted.sort_unstable();
            let mut s = Samples::default();
            let mut w = IntCounts::default();
            for &v in &raw {
                s.push(v as f64);
                w.push(v);
            }
            let (ds, dw) = (s.summary(US_PER_MS), w.summary(US_PER_MS));
            let n = sorted.len() as u64;
            for (p, got_s, got_w) in [(50, ds.p50, dw.p50), (90, ds.p90, dw.p90), (95, ds.p95, dw.p95), (99, ds.p99, dw.p99)] {
                let (lo, r) = ((p * (n - 1) / 100) as usize, p * (n - 1) % 100);
                let a = sorted[lo];
                let b = if r == 0 { a } else { sorted[lo + 1] };
                let num = 100 * a + r * (b - a);
                let want: f64 = format!("{}.{:05}", num / 100_000, num % 100_000).parse().unwrap();
                prop_assert_eq!(got_s, want, "p{}", p);
                prop_assert_eq!(got_w, want, "weighted p{}", p);
            }
            let exact_ms = |us: u64| -> f64 { format!("{}.{:03}", us / 1000, us % 1000).parse().unwrap() };
            prop_assert_eq!((ds.min, ds.max), (exact_ms(sorted[0]), exact_ms(sorted[sorted.len() - 1])));
            prop_assert_eq!((dw.min, dw.max), (ds.min, ds.max));
        }
    }
}
