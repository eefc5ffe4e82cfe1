//! Prefill/decode disaggregation, as llm-d runs it (DistServe's deployment
//! shape): a prefill pool and a decode pool behind one gateway.
//!
//! ```text
//!  routing (decode scorers) ──► decode instance d
//!        │ P/D decider: disaggregate?  no ──► d runs the whole request
//!        ▼ yes
//!  prefill routing (prefill scorers) ──► prefill instance p runs the prompt
//!        as a 1-token request (vLLM's connector flow: `max_tokens = 1`)
//!        │ p finishes it: the KV is ready to pull
//!        ▼ (+ routing latency: the sidecar forwards the request)
//!  d admits the request, pulls the prompt's KV over its inbound link
//!  (`WAITING_FOR_REMOTE_KVS`), then computes the last prompt token and
//!  decodes (`blis_engine::kv::transfer`)
//! ```
//!
//! The decode instance is chosen first and the decider reads its prefix
//! cache, as llm-d's `pd-profile-handler` does with its
//! `prefix-threshold` decider: disaggregate only when the part of the
//! prompt the decode instance has not cached exceeds the threshold.
//!
//! **Ownership.** A prompt's blocks are computed on the prefill instance,
//! which holds them after its 1-token request completes until the decode
//! instance's pull has landed (vLLM's `delay_free_blocks`); from then on
//! they belong to the decode instance, and the prefill instance frees its
//! copy into its prefix cache (vLLM's behaviour) or, with
//! `prefill_keeps_cache` off, forgets it.

use std::collections::BTreeMap;

use blis_engine::instance::InstanceStats;
use blis_engine::kv::transfer::KvTransferStats;
use blis_engine::metrics::{BatchReport, Collector, KvReport, RunSummary};
use blis_engine::request::{PdPhases, Request, RequestId, RequestRecord};
use blis_engine::time::Micros;
use serde::Serialize;

use crate::error::ConfigError;
use crate::fleet::Role;
use crate::policy::{RoutingPolicy, RoutingSpec, ScoreSheet};

/// Whether a request is disaggregated.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PdDecider {
    /// Every request.
    Always,
    /// None: the prefill pool idles (a baseline).
    Never,
    /// Only when the prompt tokens the chosen decode instance has not
    /// cached exceed this many (llm-d's `prefix-threshold`).
    PrefixThreshold(u32),
}

impl PdDecider {
    /// The names [`PdDecider::parse`] accepts.
    pub const NAMES: [&'static str; 3] = ["always", "never", "prefix-threshold"];

    /// The decider called `name`; `threshold_tokens` is the prefix
    /// threshold's parameter.
    pub fn parse(name: &str, threshold_tokens: u32) -> Result<PdDecider, ConfigError> {
        match name {
            "always" => Ok(PdDecider::Always),
            "never" => Ok(PdDecider::Never),
            "prefix-threshold" => Ok(PdDecider::PrefixThreshold(threshold_tokens)),
            other => Err(ConfigError::unknown("pd.decider", "P/D decider", other, &PdDecider::NAMES)),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            PdDecider::Always => "always",
            PdDecider::Never => "never",
            PdDecider::PrefixThreshold(_) => "prefix-threshold",
        }
    }

    /// Whether to disaggregate a prompt of which `uncached_tokens` are not
    /// in the decode instance's prefix cache.
    pub fn disaggregate(self, uncached_tokens: u32) -> bool {
        match self {
            PdDecider::Always => true,
            PdDecider::Never => false,
            PdDecider::PrefixThreshold(t) => uncached_tokens > t,
        }
    }

    /// Whether it reads the decode instance's prefix cache.
    pub fn reads_cache(self) -> bool {
        matches!(self, PdDecider::PrefixThreshold(_))
    }
}

/// How a disaggregated deployment's gateway uses its prefill pool
/// ([`crate::fleet::Role::Prefill`]): which requests go through it, how a
/// prefill replica is chosen, and what it keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct PdPolicy {
    /// How a disaggregated request's prefill instance is chosen.
    pub prefill_routing: RoutingSpec,
    /// Which requests are disaggregated.
    pub decider: PdDecider,
    /// Whether a prefill instance keeps a prompt's blocks in its prefix
    /// cache once the decode instance pulled them (vLLM does), or forgets them.
    pub prefill_keeps_cache: bool,
}

/// A disaggregated request between its routing and its end.
struct Flight {
    /// The request as the client sent it, until it is handed to the decode side.
    req: Option<Request>,
    /// Its decode instance.
    decode: u32,
    /// The prefill side, once it finished.
    phases: Option<PdPhases>,
    /// The prefill instance has let go of the prompt's blocks.
    released: bool,
}

/// Requests routed so far, by path.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PdCounts {
    /// Prompts computed on the prefill pool.
    pub disaggregated: u64,
    /// Requests the decider left to their decode instance.
    pub local: u64,
    /// Disaggregated requests whose prefill failed (dropped or timed out there).
    pub prefill_failed: u64,
    /// Disaggregated requests handed to their decode instance.
    pub handed_over: u64,
}

/// The gateway's P/D state.
pub(crate) struct PdGate {
    pub decider: PdDecider,
    pub routing: Box<dyn RoutingPolicy>,
    pub sheet: ScoreSheet,
    pub routing_name: &'static str,
    /// The routable prefill instances' ids, ascending.
    pub candidates: Vec<u32>,
    flights: BTreeMap<RequestId, Flight>,
    /// Prefill requests that ended during the instance event being handled.
    pub ended: Vec<RequestRecord>,
    /// An emptied `ended`, kept for its capacity.
    pub spare_ended: Vec<RequestRecord>,
    pub counts: PdCounts,
    /// Scratch for the decider's cache lookups.
    pub scratch: Vec<u64>,
    /// Prefill instances to let go of a prompt's blocks after the instance
    /// event being handled: (instance, request).
    pub releases: Vec<(u32, RequestId)>,
    pub keep_cache: bool,
}

impl PdGate {
    /// The gateway's state for `policy` on a fleet of `slots` instance slots
    /// (the routing policy's tables).
    pub(crate) fn new(policy: &PdPolicy, slots: usize) -> Result<PdGate, ConfigError> {
        let (routing, sheet) = policy.prefill_routing.build(slots, "pd.prefill_routing")?;
        Ok(PdGate {
            decider: policy.decider,
            routing,
            sheet,
            routing_name: policy.prefill_routing.name(),
            candidates: Vec::new(),
            flights: BTreeMap::new(),
            ended: Vec::new(),
            spare_ended: Vec::new(),
            counts: PdCounts::default(),
            scratch: Vec::new(),
            releases: Vec::new(),
            keep_cache: policy.prefill_keeps_cache,
        })
    }

    /// Starts a disaggregated flight of `req` towards decode instance
    /// `decode`; returns the prefill request (`max_tokens = 1`).
    pub fn depart(&mut self, req: Request, decode: u32) -> Request {
        let mut prefill = req.clone();
        prefill.max_output_tokens = 1;
        self.flights.insert(req.id, Flight { req: Some(req), decode, phases: None, released: false });
        self.counts.disaggregated += 1;
        prefill
    }

    /// The prefill request `leg` completed: returns the client's request
    /// and its decode instance, with the prefill side's times kept for the
    /// final record.
    pub fn prefilled(&mut self, leg: &RequestRecord) -> (Request, u32) {
        let f = self.flights.get_mut(&leg.id).expect("a prefill request belongs to a flight");
        f.phases = Some(PdPhases {
            prefill_instance: leg.instance.expect("a completed request ran on an instance"),
            prefill_enqueued: leg.enqueued.unwrap_or(leg.arrival),
            prefill_scheduled: leg.first_scheduled.unwrap_or(leg.finished),
            prefill_finished: leg.finished,
        });
        self.counts.handed_over += 1;
        (f.req.take().expect("a flight is handed to its decode instance once"), f.decode)
    }

    /// The prefill request `leg` failed: the flight ends; returns its
    /// decode instance.
    pub fn failed(&mut self, leg: &RequestRecord) -> u32 {
        self.counts.prefill_failed += 1;
        self.flights.remove(&leg.id).expect("a prefill request belongs to a flight").decode
    }

    /// Request `id`'s KV reached its decode instance: its prefill instance
    /// may let go of the blocks.
    pub fn pulled(&mut self, id: RequestId) {
        if let Some(f) = self.flights.get_mut(&id) {
            Self::release(&mut self.releases, id, f);
        }
    }

    fn release(releases: &mut Vec<(u32, RequestId)>, id: RequestId, f: &mut Flight) {
        if let (false, Some(p)) = (f.released, f.phases) {
            f.released = true;
            releases.push((p.prefill_instance, id));
        }
    }

    /// A drain took request `id` back from a prefill instance (its prefill
    /// leg): the flight ends, and the client's request and its decode
    /// instance are returned, to be routed again; `None` when it was no
    /// prefill leg.
    pub fn evicted_prefill(&mut self, id: RequestId) -> Option<(Request, u32)> {
        let f = self.flights.remove(&id)?;
        self.counts.disaggregated -= 1;
        Some((f.req?, f.decode))
    }

    /// A drain took request `id` back from its decode instance: if it was
    /// disaggregated, its flight ends and its prefill instance lets go of
    /// the prompt's blocks (no pull will come); it is routed again whole.
    pub fn evicted_decode(&mut self, id: RequestId) {
        if let Some(mut f) = self.flights.remove(&id) {
            Self::release(&mut self.releases, id, &mut f);
        }
    }

    /// The final record of a request that ended on a decode instance: with
    /// its prefill side when it was disaggregated (whose blocks are let go
    /// now if no pull did: the decode side dropped it, or hit every block).
    pub fn landed(&mut self, r: &RequestRecord) -> Option<RequestRecord> {
        let mut f = self.flights.remove(&r.id)?;
        Self::release(&mut self.releases, r.id, &mut f);
        Some(RequestRecord { pd: f.phases, ..r.clone() })
    }
}

/// One pool's figures over a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolReport {
    /// Its instances.
    pub instances: u32,
    /// GPUs per instance.
    pub gpus_per_instance: u32,
    /// Steps, batch sizes and busy fraction over its instances.
    pub batch: BatchReport,
    /// KV usage, prefix hits and preemptions over its instances.
    pub kv_cache: KvReport,
}

impl PoolReport {
    /// The figures of a pool whose instance slots had `stats`, with
    /// `gpus_per_instance` GPUs each, over `collector`'s requests, ending at `end`.
    pub(crate) fn of(stats: &[&InstanceStats], gpus_per_instance: u32, collector: &Collector, end: Micros) -> PoolReport {
        let s = RunSummary::build(collector, stats, end, 0, 0);
        PoolReport { instances: stats.len() as u32, gpus_per_instance, batch: s.batch, kv_cache: s.kv_cache }
    }
}

/// The KV transfers between the pools over a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvTransferReport {
    /// Transfers (one per disaggregated request that reached its decode instance and was admitted).
    pub count: u64,
    /// Blocks pulled.
    pub blocks: u64,
    /// Bytes pulled, per GPU.
    pub bytes: u64,
    /// Mean time from a request's admission on its decode instance to its KV landing.
    pub mean_time_ms: f64,
    /// Busy time of the decode instances' inbound links ÷ (their number × the run's duration).
    pub link_utilization: f64,
}

/// The report's `cluster.pd` section.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PdReport {
    /// The decider's name.
    pub decider: &'static str,
    /// Its threshold, for `prefix-threshold`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_threshold_tokens: Option<u32>,
    /// Prefill instances : decode instances, e.g. `1:3`.
    pub ratio: String,
    /// The prefill routing policy's name.
    pub prefill_routing: &'static str,
    /// Requests by path.
    pub requests: PdCounts,
    /// The prefill pool.
    pub prefill: PoolReport,
    /// The decode pool.
    pub decode: PoolReport,
    /// Transfers between them.
    pub kv_transfer: KvTransferReport,
    /// GPUs of both pools.
    pub gpus: u32,
    /// Requests that met their SLO per second per GPU (DistServe's goodput per GPU).
    pub goodput_per_gpu: f64,
}

impl PdReport {
    /// The section for a run of `pd` whose instance slots had `stats`, the
    /// roles `roles` and `gpus` GPUs each, over `collector`'s requests,
    /// ending at `end`, with `goodput` requests meeting their SLO per second.
    pub(crate) fn build(
        pd: &PdGate,
        (roles, gpus): (&[Role], &[u32]),
        stats: &[InstanceStats],
        collector: &Collector,
        end: Micros,
        goodput: f64,
    ) -> PdReport {
        let of = |role: Role| -> (Vec<&InstanceStats>, u32, u32) {
            let slots: Vec<usize> = (0..stats.len()).filter(|&i| roles[i] == role).collect();
            let per = slots.first().map_or(0, |&i| gpus[i]);
            (slots.iter().map(|&i| &stats[i]).collect(), slots.iter().map(|&i| gpus[i]).sum(), per)
        };
        let (prefill, prefill_gpus, pg) = of(Role::Prefill);
        let (decode, decode_gpus, dg) = of(Role::Decode);
        let pool = |stats: &[&InstanceStats], gpus_per_instance: u32| PoolReport::of(stats, gpus_per_instance, collector, end);
        let mut t = KvTransferStats::default();
        for s in decode.iter().filter_map(|s| s.kv_transfer.as_ref()) {
            t.absorb(s);
        }
        let duration_us = (end.max(collector.last_finish) - collector.first_arrival.unwrap_or(Micros::ZERO)).as_us() as f64;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let gpus = prefill_gpus + decode_gpus;
        PdReport {
            decider: pd.decider.name(),
            prefix_threshold_tokens: match pd.decider {
                PdDecider::PrefixThreshold(t) => Some(t),
                _ => None,
            },
            ratio: format!("{}:{}", prefill.len(), decode.len()),
            prefill_routing: pd.routing_name,
            requests: pd.counts.clone(),
            prefill: pool(&prefill, pg),
            decode: pool(&decode, dg),
            kv_transfer: KvTransferReport {
                count: t.transfers,
                blocks: t.blocks,
                bytes: t.bytes,
                mean_time_ms: ratio(t.wait.as_us() as f64, t.transfers as f64) / 1000.0,
                link_utilization: ratio(t.busy.as_us() as f64, duration_us * decode.len() as f64),
            },
            gpus,
            goodput_per_gpu: ratio(goodput, f64::from(gpus)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deciders_follow_llm_d() {
        assert!(PdDecider::parse("always", 0).unwrap().disaggregate(0));
        assert!(!PdDecider::parse("never", 0).unwrap().disaggregate(100_000));
        let t = PdDecider::parse("prefix-threshold", 256).unwrap();
        assert!(!t.disaggregate(256) && t.disaggregate(257));
        let e = PdDecider::parse("sometimes", 0).unwrap_err();
        assert!(e.message.contains("always, never, prefix-threshold"), "{e}");
    }
}
