//! Engine throughput: whole single-instance simulations of the sizes the
//! engine issue names (1 000 and 100 000 requests; prompt 512, output 256,
//! Llama-3.1-8B on one H100 with the roofline model at 30 req/s, which keeps
//! about 95 requests in the batch). Run with `cargo bench -p blis-engine`.

use std::sync::Arc;

use blis_engine::driver::{IterWorkload, run_single};
use blis_engine::instance::Instance;
use blis_engine::metrics::Collector;
use blis_engine::request::{Request, RequestId, RequestMeta, TokenSeq};
use blis_engine::scheduler::InstanceConfig;
use blis_engine::time::Micros;
use blis_physics::catalog;
use blis_physics::hardware::{KvSizing, kv_blocks};
use blis_physics::latency::Roofline;
use blis_physics::model::ModelConfig;
use criterion::{Criterion, criterion_group, criterion_main};

fn simulate(n: u64) -> u64 {
    let model = ModelConfig::from_hf_json(catalog::find_model("meta-llama/Llama-3.1-8B-Instruct").unwrap().config_json).unwrap();
    let gpu = catalog::find_gpu("H100").unwrap().spec();
    let cfg = InstanceConfig::basic(256, 8192, 131_072, kv_blocks(&model, &gpu, &KvSizing::defaults(1, &gpu)).unwrap());
    let inst = Instance::new(0, cfg, Arc::new(Roofline::new(&model, &gpu, 1))).unwrap();
    // Evenly spaced arrivals at 30 req/s (the CLI's Poisson stream is benchmarked by scripts/bench.sh).
    let reqs = (0..n).map(|i| Request {
        id: RequestId(i),
        arrival: Micros(i * 33_333),
        prompt: TokenSeq::synthetic(i, 512),
        max_output_tokens: 256,
        output_seed: 1 << 60 | i,
        meta: RequestMeta::default(),
    });
    let mut metrics = Collector::default();
    run_single(inst, &mut IterWorkload::new(reqs), None, &mut metrics);
    metrics.completed
}

fn single_instance(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_instance");
    g.sample_size(10);
    g.bench_function("1k_requests", |b| b.iter(|| assert_eq!(simulate(1_000), 1_000)));
    g.bench_function("100k_requests", |b| b.iter(|| assert_eq!(simulate(100_000), 100_000)));
    g.finish();
}

criterion_group!(benches, single_instance);
criterion_main!(benches);
