//! The cluster's event loop does not allocate per event. What a run still
//! allocates after warm-up is growth: a new peak of concurrent requests (new
//! request slots), a new distinct inter-token gap (a node in an exact
//! histogram), a sample vector doubling. Each request has at least five
//! events of its own (arrival, admission, routing, delivery, enqueue), so a
//! per-event allocation would show as five or more per request.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use blis_cluster::Cluster;
use blis_engine::driver::IterWorkload;
use blis_engine::metrics::Collector;
use blis_engine::time::Micros;
use serde_json::json;

use crate::harness::{Load, bundle, config, instance, llama_h100};

/// Counts allocations of the current thread (tests run on their own threads).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised
// thread-local without a destructor, so touching it cannot allocate or recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

#[test]
fn after_warm_up_a_run_allocates_far_less_than_once_per_request() {
    let (latency, blocks) = llama_h100();
    // 20 000 requests at 400 req/s: the first 25 s (≈ 10 000 requests) warm the buffers up.
    let load = Load { rate: 400.0, requests: 20_000, prompt: 256, output: 64, prefix: 512, groups: 32, seed: 2 };
    let (requests, labels) = load.requests(Some("a:1,b:1,c:1"));
    let doc = json!({
        "admission": {"type": "predictive-slo"},
        "priority": "slo-class",
        "routing": {"type": "weighted", "params": {"scorers": {"prefix-affinity": 4, "queue-depth": 3, "precise-prefix": 1, "kv-utilization": 1}}},
        "slo_targets": {"a": {"ttft_ms": 200}, "b": {"ttft_ms": 1000}},
        "snapshots": {"kv_utilization": "periodic:50ms", "queue_depth": "on-demand"},
    });
    let mut cfg = config(8, instance(blocks, 256, 4096), latency, bundle(doc), labels);
    cfg.counterfactual_k = 3;
    let mut cluster = Cluster::new(cfg).unwrap();
    let mut collector = Collector::default();
    let mut workload = IterWorkload::new(requests.into_iter());
    cluster.run(&mut workload, Some(Micros::from_secs(25)), &mut collector);
    let (arrived_warm, before) = (collector.completed, ALLOCATIONS.with(Cell::get));
    cluster.run(&mut workload, None, &mut collector);
    let during = ALLOCATIONS.with(Cell::get) - before;
    let requests = collector.completed - arrived_warm;
    eprintln!("{during} allocations while {requests} requests completed ({} tokens in the run)", collector.output_tokens);
    assert_eq!(collector.completed, 20_000, "a run resumes where the horizon cut it");
    assert!(during * 5 < requests, "{during} allocations for {requests} requests");
}
