//! # blis-engine: the single-instance discrete-event core of BLIS
//!
//! BLIS predicts what a vLLM deployment does with a workload. This crate is
//! the part that is pure simulation: no files, no threads, no wall clock.
//!
//! ```text
//!  Workload (lazy, arrival-ordered Requests)
//!        │ Driver: one clock, one total event order; a ControlPlane decides where each request goes
//!        ▼
//!  Instance ── queueing delay ──► wait queue ──► scheduler step (vLLM v1) ──► latency model
//!        │                              ▲  preempt (recompute)  │ KV cache (paged, prefix-cached)
//!        ▼                              └───────────────────────┘
//!  Observer: RequestRecord per request, TokenEvent per token, StepEvent per step
//!        ▼
//!  metrics::Collector → exact percentiles
//! ```
//!
//! Reading order: [`time`] and [`event`] (integer µs clock, total event
//! order), [`rng`] (seeded streams per subsystem), [`request`] (token runs,
//! block hashes, records), [`kv`] (block pool), [`scheduler`] (knobs and
//! queue orders), [`latency`] (the step-time trait and its models),
//! [`instance`] (the step itself), [`driver`] (the event loop of every run,
//! one instance or many behind a control plane), [`metrics`].
//! What is being simulated (models, GPUs, the latency models behind the
//! [`latency::LatencyModel`] trait) is `blis-physics`'.
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//! use blis_engine::{instance::Instance, latency::Blackbox, metrics::Collector, request::*,
//!                   scheduler::*, driver::{run_single, IterWorkload}, time::Micros};
//!
//! let cfg = InstanceConfig {
//!     scheduler: SchedulerConfig { max_num_seqs: 8, max_num_batched_tokens: 512, max_model_len: 4096,
//!         enable_chunked_prefill: true, long_prefill_token_threshold: 0, async_scheduling: false,
//!         queue_policy: QueuePolicy::Fcfs, preemption: PreemptionVictim::Tail },
//!     num_gpu_blocks: 1000, block_size: 16, enable_prefix_caching: true, client_timeout: None, offload: None, kv_transfer: None, kv_events: false, expert_parallel: false,
//!     hybrid_kv: None, moe_kernel_warmup: None,
//! };
//! let model = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 10.0] });
//! let inst = Instance::new(0, cfg, model).unwrap();
//! let reqs = (0..10).map(|i| Request {
//!     id: RequestId(i), arrival: Micros::from_ms(i * 10), prompt: TokenSeq::synthetic(i, 100),
//!     max_output_tokens: 20, output_seed: i, meta: RequestMeta::default(),
//! });
//! let mut metrics = Collector::default();
//! let (end, inst) = run_single(inst, &mut IterWorkload::new(reqs), None, &mut metrics);
//! assert_eq!(metrics.completed, 10);
//! assert_eq!(end.queued + end.running, 0);
//! assert_eq!(inst.stats().injected, 10);
//! ```

#![warn(missing_docs)]

pub mod driver;
pub mod event;
pub mod histogram;
pub mod instance;
pub mod kv;
pub mod latency;
pub mod metrics;
pub mod request;
pub mod rng;
pub mod scheduler;
pub mod time;
pub mod warmup;
