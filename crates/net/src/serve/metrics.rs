//! Prometheus metrics with vLLM's names, so dashboards and autoscalers built
//! for vLLM read `blis serve` unchanged. Latencies are in simulated seconds
//! (what the simulated server measured); with `--time-scale 1` they equal
//! wall-clock seconds.

use std::fmt::Write as _;

use blis_engine::instance::{Instance, TokenEvent};
use blis_engine::kv::offload::OffloadStats;
use blis_engine::request::{Outcome, RequestRecord};

/// vLLM's TTFT histogram buckets, seconds.
const TTFT_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
/// vLLM's inter-token latency histogram buckets, seconds.
const ITL_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// vLLM's end-to-end latency histogram buckets, seconds.
const E2E_BUCKETS: &[f64] =
    &[0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];

/// A cumulative histogram in Prometheus's sense.
#[derive(Clone, Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len()], count: 0, sum: 0.0 }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += v;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\",{labels}}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\",{labels}}} {}", self.count);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
    }
}

/// Counters and histograms accumulated from the engine's callbacks.
#[derive(Clone, Debug)]
pub struct PromMetrics {
    prompt_tokens: u64,
    generation_tokens: u64,
    success: u64,
    aborted: u64,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

impl Default for PromMetrics {
    fn default() -> Self {
        PromMetrics {
            prompt_tokens: 0,
            generation_tokens: 0,
            success: 0,
            aborted: 0,
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
        }
    }
}

fn counter(out: &mut String, name: &str, help: &str, labels: &str, v: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {v}");
}

fn gauge(out: &mut String, name: &str, help: &str, labels: &str, v: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}");
}

/// vLLM's KV-connector and offloading counters (vLLM ≥ 0.12,
/// `OffloadPromMetrics`), for an instance with a CPU tier. Bytes and times
/// are one GPU's share, as the tier counts them.
fn offload_metrics(out: &mut String, labels: &str, t: &OffloadStats, block_size: u32) {
    let tokens = |blocks: u64| blocks * u64::from(block_size);
    counter(
        out,
        "vllm:external_prefix_cache_queries_total",
        "External prefix cache queries, in terms of number of queried tokens.",
        labels,
        tokens(t.lookup_blocks),
    );
    counter(
        out,
        "vllm:external_prefix_cache_hits_total",
        "External prefix cache hits, in terms of number of cached tokens.",
        labels,
        tokens(t.hit_blocks()),
    );
    let by_direction = |out: &mut String, name: &str, help: &str, to_cpu: String, to_gpu: String| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        let _ = writeln!(out, "{name}{{{labels},transfer_type=\"GPU_to_CPU\"}} {to_cpu}");
        let _ = writeln!(out, "{name}{{{labels},transfer_type=\"CPU_to_GPU\"}} {to_gpu}");
    };
    by_direction(
        out,
        "vllm:kv_offload_total_bytes_total",
        "Bytes moved by KV offloading.",
        t.store_bytes.to_string(),
        t.load_bytes.to_string(),
    );
    by_direction(
        out,
        "vllm:kv_offload_total_time_total",
        "Seconds spent moving KV offloading data.",
        t.store_busy.as_secs_f64().to_string(),
        t.load_busy.as_secs_f64().to_string(),
    );
}

impl PromMetrics {
    /// Accounts for a finished request.
    pub fn record(&mut self, r: &RequestRecord) {
        match r.outcome {
            Outcome::Completed => {
                self.success += 1;
                self.prompt_tokens += u64::from(r.input_tokens);
                if let Some(t) = r.ttft() {
                    self.ttft.observe(t.as_secs_f64());
                }
                if let Some(t) = r.e2e() {
                    self.e2e.observe(t.as_secs_f64());
                }
            }
            Outcome::TimedOut => {
                self.aborted += 1;
                if r.first_scheduled.is_some() {
                    self.prompt_tokens += u64::from(r.input_tokens);
                }
            }
            Outcome::Dropped(_) | Outcome::Rejected(_) => {}
        }
    }

    /// Accounts for a generated token.
    pub fn token(&mut self, t: &TokenEvent) {
        self.generation_tokens += 1;
        if let Some(gap) = t.gap {
            self.itl.observe(gap.as_secs_f64());
        }
    }

    /// The Prometheus text exposition, with `model_name` as a label.
    pub fn render(&self, model_name: &str, instance: &Instance) -> String {
        let labels = format!("model_name=\"{}\"", model_name.replace('\\', "\\\\").replace('"', "\\\""));
        let l = labels.as_str();
        let stats = instance.stats();
        let mut out = String::new();
        gauge(&mut out, "vllm:num_requests_running", "Number of requests in model execution batches.", l, instance.batch_size());
        gauge(&mut out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, instance.queue_depth());
        gauge(&mut out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, instance.kv().usage());
        counter(&mut out, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", l, self.prompt_tokens);
        counter(&mut out, "vllm:generation_tokens_total", "Number of generation tokens processed.", l, self.generation_tokens);
        counter(
            &mut out,
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            l,
            stats.prefix_query_tokens,
        );
        counter(
            &mut out,
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            l,
            stats.prefix_hit_tokens,
        );
        counter(&mut out, "vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", l, stats.preemptions);
        counter(&mut out, "vllm:request_success_total", "Count of successfully processed requests.", l, self.success);
        counter(&mut out, "vllm:request_aborted_total", "Count of requests aborted because their client went away.", l, self.aborted);
        if let Some(t) = &stats.offload {
            offload_metrics(&mut out, l, t, instance.config().block_size);
        }
        self.ttft.render(&mut out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l);
        self.itl.render(&mut out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l);
        self.e2e.render(&mut out, "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", l);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a CPU tier the connector and offloading counters appear, one
    /// series per transfer direction; without one they do not.
    #[test]
    fn offloading_counters_appear_with_a_cpu_tier() {
        use std::sync::Arc;

        use blis_engine::kv::offload::{LinkConfig, OffloadConfig};
        use blis_engine::latency::Blackbox;
        use blis_engine::scheduler::InstanceConfig;
        use blis_engine::time::Micros;

        let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1.0; 3] });
        let plain = Instance::new(0, InstanceConfig::basic(4, 64, 1000, 100), model.clone()).unwrap();
        assert!(!PromMetrics::default().render("m", &plain).contains("kv_offload"));
        let link = LinkConfig { bytes_per_s: 1e9, latency: Micros(0) };
        let offload = Some(OffloadConfig::native_cpu(10, 100, link));
        let tiered = Instance::new(0, InstanceConfig { offload, ..InstanceConfig::basic(4, 64, 1000, 100) }, model).unwrap();
        let text = PromMetrics::default().render("m", &tiered);
        for line in [
            "vllm:external_prefix_cache_hits_total{model_name=\"m\"} 0",
            "vllm:kv_offload_total_bytes_total{model_name=\"m\",transfer_type=\"GPU_to_CPU\"} 0",
            "vllm:kv_offload_total_time_total{model_name=\"m\",transfer_type=\"CPU_to_GPU\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert_eq!(text.matches("# TYPE vllm:kv_offload_total_bytes_total counter").count(), 1);
    }

    #[test]
    fn histogram_is_cumulative_with_inf_bucket() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "help", "m=\"a\"");
        assert!(out.contains("x_bucket{le=\"0.1\",m=\"a\"} 1\n"));
        assert!(out.contains("x_bucket{le=\"1\",m=\"a\"} 3\n"));
        assert!(out.contains("x_bucket{le=\"+Inf\",m=\"a\"} 4\n"));
        assert!(out.contains("x_count{m=\"a\"} 4\n"));
        assert!(out.contains("x_sum{m=\"a\"} 4.25\n"));
    }
}
