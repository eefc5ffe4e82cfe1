//! Cluster throughput and routing cost. Run with `cargo bench -p blis-cluster`.
//!
//! * `cluster/16x100k_weighted`: 100 000 requests over 16 instances with
//!   weighted routing (prefix-affinity:4, queue-depth:3); Llama-3.1-8B on
//!   H100s (roofline), prompt 512 tokens (a 256-token system prompt from 64
//!   groups + 256 private), 256 output tokens, 480 req/s (30 per instance,
//!   the load of the single-instance engine benchmark).
//! * `routing_cost/n{N}_prefix{P}`: one weighted routing decision
//!   (prefix-affinity + queue-depth; [`Cluster::route_probe`]) for a request
//!   whose P-token prefix the router has seen, on a cluster of N busy
//!   instances (warmed up by a run of 40·N requests cut at a horizon).
//!   Expected cost: O(N · matched blocks) for the prefix scorer plus O(N)
//!   snapshot reads, so time ∝ N and ∝ P.

use std::hint::black_box;
use std::sync::Arc;

use blis_cluster::policy::PolicyBundle;
use blis_cluster::{Cluster, ClusterConfig};
use blis_engine::driver::IterWorkload;
use blis_engine::latency::LatencyModel;
use blis_engine::metrics::Collector;
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;
use blis_physics::catalog;
use blis_physics::hardware::{KvSizing, kv_blocks};
use blis_physics::latency::Roofline;
use blis_physics::model::ModelConfig;
use blis_workload::synthetic::{ArrivalProcess, LengthSpec, SyntheticSpec};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn llama_h100() -> (Arc<dyn LatencyModel>, InstanceConfig) {
    let model = ModelConfig::from_hf_json(catalog::find_model("meta-llama/Llama-3.1-8B-Instruct").unwrap().config_json).unwrap();
    let gpu = catalog::find_gpu("H100").unwrap().spec();
    let instance = InstanceConfig::basic(256, 8192, 131_072, kv_blocks(&model, &gpu, &KvSizing::defaults(1, &gpu)).unwrap());
    (Arc::new(Roofline::new(&model, &gpu, 1)), instance)
}

fn policies(routing: serde_json::Value) -> PolicyBundle {
    PolicyBundle::from_value(&serde_json::json!({ "routing": routing })).unwrap().0
}

fn weighted() -> serde_json::Value {
    serde_json::json!({"type": "weighted", "params": {"scorers": {"prefix-affinity": 4, "queue-depth": 3}}})
}

/// Runs one simulation; returns completed requests.
fn simulate(n: u32, routing: serde_json::Value, spec: &SyntheticSpec) -> u64 {
    let (latency, instance) = llama_h100();
    let mut cluster = Cluster::new(ClusterConfig::fixed(n, instance, latency, policies(routing))).unwrap();
    let mut metrics = Collector::default();
    cluster.run(&mut IterWorkload::new(spec.generate()), None, &mut metrics);
    metrics.completed
}

fn spec(rate: f64, requests: u64, prefix: u32, groups: u32, private: u32, output: u32) -> SyntheticSpec {
    SyntheticSpec {
        rate_per_s: rate,
        arrival: ArrivalProcess::Poisson,
        num_requests: requests,
        prompt: LengthSpec::fixed(private),
        output: LengthSpec::fixed(output),
        prefix_tokens: prefix,
        prefix_groups: groups,
        seed: 42,
    }
}

fn cluster(c: &mut Criterion) {
    let mut g = c.benchmark_group("cluster");
    g.sample_size(10);
    let big = spec(480.0, 100_000, 256, 64, 256, 256);
    g.bench_function("16x100k_weighted", |b| b.iter(|| assert_eq!(simulate(16, weighted(), black_box(&big)), 100_000)));
    g.finish();
}

fn routing_cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("routing_cost");
    for n in [2u32, 8, 32, 128] {
        for prefix in [128u32, 512, 2048, 8192] {
            let (latency, instance) = llama_h100();
            let mut cluster = Cluster::new(ClusterConfig::fixed(n, instance, latency, policies(weighted()))).unwrap();
            // 4 prefix groups, 64 private tokens, long outputs: instances are busy when the run is cut.
            let warm = spec(20.0 * f64::from(n), u64::from(40 * n), prefix, 4, 64, 2000);
            cluster.run(&mut IterWorkload::new(warm.generate()), Some(Micros::from_secs(2)), &mut Collector::default());
            let mut probe = warm.generate().next().unwrap();
            probe.id = blis_engine::request::RequestId(u64::MAX);
            g.bench_function(BenchmarkId::from_parameter(format!("n{n}_prefix{prefix}")), |b| {
                b.iter(|| cluster.route_probe(black_box(&probe)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, cluster, routing_cost);
criterion_main!(benches);
