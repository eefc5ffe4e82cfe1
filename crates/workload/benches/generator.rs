//! Generation speed: streaming 1,000,000 requests from the 10-client spec
//! `ten-clients.yaml` (every arrival process and length shape, prefix
//! groups). The target is under 1 s in a release build.

use std::hint::black_box;
use std::path::Path;

use blis_workload::spec::parse;
use criterion::{Criterion, criterion_group, criterion_main};

fn generate(c: &mut Criterion) {
    let plan = parse(include_str!("ten-clients.yaml"), "ten-clients.yaml", Path::new(".")).unwrap().plan().unwrap();
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
