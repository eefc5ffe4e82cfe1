//! # blis-cluster: N instances on one clock behind a control plane
//!
//! A cluster is a fleet of [`blis_engine::instance::Instance`]s (the data
//! plane) in pools ([`fleet`]: serving, prefill or decode replicas of one
//! instance shape, a fixed number or sized by an autoscaler) and a control
//! plane that decides, for each arriving request, whether to admit it, what
//! priority it gets and where it goes, online, at decision time, from what a
//! real router could see: instance snapshots that may be stale, and the
//! router's own bookkeeping.
//!
//! ```text
//!  Workload ─► admission ─► priority ─► routing ──(routing latency)──► serve or decode replica ─► records
//!              (policies see ClusterView: snapshots,     │ P/D: prefill replica first, KV pulled (pd)
//!               prefix index, tenant counts)             └ autoscalers size each scaling group (autoscale)
//! ```
//!
//! Reading order: [`sim`] (a cluster on the engine's event driver),
//! [`fleet`] (pools), [`pools`] (the policy file's `pools:` section),
//! [`gateway`] (a request's way through the control plane), [`pd`]
//! (prefill/decode hand-off), [`autoscale`], [`snapshot`] (what is
//! observed, how stale), [`view`] (what a policy gets), [`policy`] (the
//! traits and templates, one module per kind, and the bundle document),
//! [`prefix`] (the router's prefix index), [`estimate`] (the TTFT estimate
//! behind predictive admission and counterfactuals), [`slo`] (classes,
//! targets, urgency), [`anomaly`], [`metrics`], [`fitness`], [`trace`].
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//! use blis_cluster::{policy::{PolicyBundle, RoutingSpec}, sim::{Cluster, ClusterConfig}};
//! use blis_engine::{latency::Blackbox, metrics::Collector, request::*, scheduler::*, driver::IterWorkload, time::Micros};
//!
//! let instance = InstanceConfig {
//!     scheduler: SchedulerConfig { max_num_seqs: 8, max_num_batched_tokens: 512, max_model_len: 4096,
//!         enable_chunked_prefill: true, long_prefill_token_threshold: 0,
//!         queue_policy: QueuePolicy::Fcfs, preemption: PreemptionVictim::Tail, async_scheduling: false },
//!     num_gpu_blocks: 1000, block_size: 16, enable_prefix_caching: true, client_timeout: None, offload: None, kv_transfer: None, kv_events: false, expert_parallel: false,
//!     hybrid_kv: None, moe_kernel_warmup: None,
//! };
//! let policies = PolicyBundle { routing: RoutingSpec::parse("least-loaded", None, "routing").unwrap(), ..Default::default() };
//! let latency = Arc::new(Blackbox { alpha: [0.0; 3], beta: [1000.0, 1.0, 10.0] });
//! let config = ClusterConfig { routing_latency: Micros(100), ..ClusterConfig::fixed(4, instance, latency, policies) };
//! let mut cluster = Cluster::new(config).unwrap();
//! let reqs = (0..40).map(|i| Request {
//!     id: RequestId(i), arrival: Micros::from_ms(i), prompt: TokenSeq::synthetic(i, 100),
//!     max_output_tokens: 20, output_seed: i, meta: RequestMeta::default(),
//! });
//! let end = cluster.run(&mut IterWorkload::new(reqs), None, &mut Collector::default());
//! let run = cluster.summary(&end);
//! let summary = cluster.cluster_summary(&end, &run, None);
//! assert_eq!(run.requests.completed, 40);
//! assert_eq!(summary.load_balance.requests_per_instance.iter().sum::<u64>(), 40);
//! ```

#![warn(missing_docs)]

pub mod anomaly;
pub mod autoscale;
pub mod error;
pub mod estimate;
pub mod fitness;
pub mod fleet;
pub(crate) mod fleet_state;
pub mod gateway;
pub mod metrics;
pub mod pd;
pub mod policy;
pub mod pools;
pub mod prefix;
pub mod sim;
pub mod slo;
pub mod snapshot;
pub mod trace;
pub mod view;

pub use error::{ClusterError, ConfigError};
pub use sim::{Cluster, ClusterConfig, MAX_INSTANCES};
