//! What a policy sees when it decides about one request.

use blis_engine::instance::Instance;
use blis_engine::request::TenantId;
use blis_engine::time::Micros;

use crate::prefix::PrefixIndex;
use crate::snapshot::{InstanceSnapshot, SnapshotStore};

/// Worth of a prompt token held in a lower KV tier, relative to one in the
/// GPU cache, for the precise prefix scorer, by medium (CPU, disk, remote).
/// CPU 0.8 is llm-d's KV-cache indexer's default weight for its `cpu`
/// backend (GPU 1.0); disk and remote, which load through host memory, are
/// BLIS's own, lower.
pub const TIER_HIT_WEIGHTS: [f64; 3] = [0.8, 0.5, 0.4];

/// The observation a policy gets (cluster-policy-plan §D.7): the time, one
/// [`InstanceSnapshot`] per candidate (possibly stale, see
/// [`crate::snapshot`]), the router's prefix index matched against the
/// request's prompt, and per-tenant counts. The only window into the
/// instances themselves is [`ClusterView::weighted_cached_prefix_tokens`], the oracle
/// the `precise-prefix` scorer is defined by.
///
/// The candidates are the instances a request may be routed to: every
/// instance, or with autoscaling the routable replicas, by ascending id.
/// Methods taking a `candidate` take its position in [`ClusterView::snapshots`].
pub struct ClusterView<'a> {
    pub(crate) now: Micros,
    pub(crate) snapshots: &'a [InstanceSnapshot],
    pub(crate) ids: &'a [u32],
    pub(crate) instances: &'a [Instance],
    pub(crate) store: &'a SnapshotStore,
    pub(crate) prefix: &'a PrefixIndex,
    pub(crate) prompt_blocks: &'a [u64],
    pub(crate) prompt_tokens: u32,
    pub(crate) block_size: u32,
    pub(crate) tenant_in_flight: &'a [u32],
}

impl<'a> ClusterView<'a> {
    /// The decision time.
    pub fn now(&self) -> Micros {
        self.now
    }

    /// One snapshot per candidate (each names its instance).
    pub fn snapshots(&self) -> &'a [InstanceSnapshot] {
        self.snapshots
    }

    fn id(&self, candidate: usize) -> usize {
        self.ids[candidate] as usize
    }

    /// Full KV blocks in the request's prompt.
    pub fn prompt_blocks(&self) -> u32 {
        self.prompt_blocks.len() as u32
    }

    /// Leading prompt blocks the router believes `candidate` caches (its prefix index).
    pub fn prefix_match_blocks(&self, candidate: usize) -> u32 {
        self.prefix.match_blocks(self.id(candidate), self.prompt_blocks)
    }

    /// Prompt tokens the router believes `candidate` caches.
    pub fn prefix_match_tokens(&self, candidate: usize) -> u32 {
        (self.prefix_match_blocks(candidate) * self.block_size).min(self.prompt_tokens)
    }

    /// Prompt tokens `candidate` would not recompute right now: its GPU
    /// prefix cache's hit (vLLM caps it at `prompt − 1` tokens), plus the
    /// run its offload tiers hold after it, a lower tier's tokens counted at
    /// its [`TIER_HIT_WEIGHTS`] (a CPU hit is cheaper than recomputing,
    /// dearer than a GPU hit). The oracle a KV-event-fed router approximates.
    pub fn weighted_cached_prefix_tokens(&self, candidate: usize) -> f64 {
        let (gpu, lower) = self.instances[self.id(candidate)].cached_prefix_by_tier(self.prompt_blocks, self.prompt_tokens);
        f64::from(gpu) + lower.iter().zip(TIER_HIT_WEIGHTS).map(|(&t, w)| f64::from(t) * w).sum::<f64>()
    }

    /// Requests waiting at `candidate` with priority ≥ `priority`, as stale
    /// as the `queue_depth` field. O(queue length).
    pub fn queued_at_or_above(&self, candidate: usize, priority: f64) -> u32 {
        self.store.queued_at_or_above(self.id(candidate), priority, self.instances)
    }

    /// Admitted, unfinished requests of a tenant.
    pub fn tenant_in_flight(&self, tenant: TenantId) -> u32 {
        self.tenant_in_flight.get(tenant.0 as usize).copied().unwrap_or(0)
    }

    /// The request's prompt length.
    pub fn prompt_tokens(&self) -> u32 {
        self.prompt_tokens
    }
}
