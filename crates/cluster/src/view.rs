//! What a policy sees when it decides about one request.

use blis_engine::instance::Instance;
use blis_engine::request::TenantId;
use blis_engine::time::Micros;

use crate::prefix::PrefixIndex;
use crate::snapshot::{InstanceSnapshot, SnapshotStore};

/// The observation a policy gets (cluster-policy-plan §D.7): the time, one
/// [`InstanceSnapshot`] per candidate (possibly stale, see
/// [`crate::snapshot`]), the router's prefix index matched against the
/// request's prompt, and per-tenant counts. The only window into the
/// instances themselves is [`ClusterView::cached_prefix_tokens`], the oracle
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
        self.prefix
            .match_blocks(self.id(candidate), self.prompt_blocks)
    }

    /// Prompt tokens the router believes `candidate` caches.
    pub fn prefix_match_tokens(&self, candidate: usize) -> u32 {
        (self.prefix_match_blocks(candidate) * self.block_size).min(self.prompt_tokens)
    }

    /// Prompt tokens `candidate`'s prefix cache really holds right now (an
    /// oracle no real router has; vLLM caps hits at `prompt − 1` tokens).
    pub fn cached_prefix_tokens(&self, candidate: usize) -> u32 {
        self.instances[self.id(candidate)]
            .kv()
            .cached_prefix_tokens(self.prompt_blocks, self.prompt_tokens)
    }

    /// Requests waiting at `candidate` with priority ≥ `priority`, as stale
    /// as the `queue_depth` field. O(queue length).
    pub fn queued_at_or_above(&self, candidate: usize, priority: f64) -> u32 {
        self.store
            .queued_at_or_above(self.id(candidate), priority, self.instances)
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
