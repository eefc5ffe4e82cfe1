//! Generation speed: streaming 1,000,000 requests from a 10-client spec
//! (mixed Poisson/gamma/Weibull arrivals, parametric and empirical lengths,
//! prefix groups). The target is under 1 s in a release build.

use std::hint::black_box;
use std::path::Path;

use blis_workload::spec::parse;
use criterion::{Criterion, criterion_group, criterion_main};

/// The benchmark spec: ten clients, every arrival process and length shape.
pub fn ten_client_spec(num_requests: u64) -> String {
    let processes = ["{process: poisson}", "{process: gamma, cv: 2.0}", "{process: weibull, cv: 1.5}", "{process: constant}", "{process: gamma, cv: 0.5}"];
    let inputs = [
        "{type: lognormal, params: {mu: 6.0, sigma: 0.8}}",
        "{type: pareto_lognormal, params: {alpha: 1.5, xm: 50, mu: 5.5, sigma: 1.2, mix_weight: 0.3, max: 32000}}",
        "{type: gaussian, params: {mean: 512, std_dev: 128, min: 16, max: 4096}}",
        "{type: empirical, pdf: {64: 0.2, 128: 0.3, 512: 0.3, 2048: 0.2}}",
        "{type: exponential, params: {mean: 300}}",
    ];
    let mut s = format!("aggregate_rate: 1000\nnum_requests: {num_requests}\nclients:\n");
    for i in 0..10 {
        s += &format!(
            "  - id: c{i}\n    rate_fraction: {}\n    arrival: {}\n    input_distribution: {}\n    output_distribution: {{type: exponential, params: {{mean: 200}}}}\n",
            i + 1,
            processes[i % 5],
            inputs[i % 5]
        );
        if i % 2 == 0 {
            s += &format!("    prefix_group: g{}\n    prefix_length: 256\n", i % 4);
        }
    }
    s
}

fn generate(c: &mut Criterion) {
    let plan = parse(&ten_client_spec(1_000_000), "bench", Path::new(".")).unwrap().plan().unwrap();
    let mut g = c.benchmark_group("generator");
    g.sample_size(10);
    g.bench_function("1M requests, 10 clients", |b| {
        b.iter(|| {
            let mut tokens = 0u64;
            for r in plan.generator() {
                tokens += u64::from(r.request.prompt_tokens());
            }
            black_box(tokens)
        })
    });
    g.finish();
}

criterion_group!(benches, generate);
criterion_main!(benches);
