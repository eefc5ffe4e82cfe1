//! Tiers below the GPU KV cache: host memory, local disk and a remote store,
//! as vLLM's native KV offloading and LMCache keep evicted prefixes.
//!
//! **What is stored, and when** ([`StorePolicy`]):
//! * vLLM's native `OffloadingConnector` (CPU backend, vLLM 0.11–0.13,
//!   `vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py`,
//!   `_get_reqs_to_store`) copies every full block a request has computed,
//!   prompt and output alike, after the step that computed it.
//! * LMCache's vLLM v1 connector (LMCache 0.3,
//!   `lmcache/integration/vllm/vllm_v1_adapter.py`, `wait_for_save`) saves
//!   the prompt in chunks of `chunk_size` tokens (256) as prefill computes
//!   them, and the prompt's last partial chunk when its prefill completes;
//!   generated tokens are not saved (`save_decode_cache: false`, its
//!   default).
//!
//! Either way a block is copied unless every tier holds (or is receiving)
//! its content already. The copy crosses the GPU → host link; a tier below
//! host memory (disk, remote) then receives it over its own link, starting
//! when it reached host memory (LMCache's write-through: every backend gets
//! every chunk). Until a tier's copy lands the block is neither findable
//! nor evictable there (`ref_cnt = −1`). When some tier has too few
//! evictable blocks for a request's new blocks, nothing is stored and the
//! request tries again after its next step (`prepare_store` returning
//! `None`).
//!
//! **Lookup** (`get_num_new_matched_tokens`, only for a request with no
//! computed tokens). After the GPU prefix hit, the leading run of the
//! prompt's full blocks that some tier holds, landed, is loaded instead of
//! recomputed; each block comes from the nearest tier holding it. Unlike a
//! GPU hit the run may cover the whole prompt; the last token is then
//! recomputed (`_update_waiting_for_remote_kv`).
//!
//! **Load.** The request waits off the scheduler (`WAITING_FOR_REMOTE_KVS`)
//! while its blocks move; other requests keep running. Blocks from a tier
//! below host memory first cross that tier's link into host memory, then
//! all of the load crosses the host → GPU link. When it lands the blocks
//! enter the GPU prefix index and the request waits again with those tokens
//! computed (the instance's side: `Instance`'s `start_load` and
//! `on_loaded`). A block being loaded cannot be evicted from its tier; when
//! the load ends it is that tier's most recently used.
//!
//! **Eviction.** Each tier is a fixed number of blocks, evicted least
//! recently stored or loaded first (`LRUOffloadingManager`; LMCache's LRU).
//!
//! Simplified: a tier's block is the GPU block (vLLM's default
//! `block_size`); LMCache's lookup is at block, not chunk, granularity; a
//! load does not first move every block of the request to the LRU tail
//! (`touch`), only the blocks it loads; a block loaded from disk is not
//! promoted into host memory; two requests may load the same block at once
//! (vLLM ≥ 0.13 makes the second wait); a block is findable once its copy
//! lands, where vLLM's native connector waits for the storing request to
//! finish (or be preempted) with all its stores landed (`complete_store` on
//! `finished_sending`).
//!
//! **Links** are first-come, first-served channels ([`super::transfer`]).
//! Every GPU of a
//! tensor-parallel instance moves its own shard over its own link at the
//! same time, so `block_bytes` is one GPU's shard of a block and a lower
//! tier's bandwidth is one GPU's share of it.
//!
//! Each tier's blocks are a `TierPool`: the LRU order above, kept as a
//! log so that storing a block and evicting one walk memory in order.

use serde::Serialize;
use thiserror::Error;

use super::events::{CacheChange, KvEvent, MediumName};
pub use super::tier_pool::PrivateRun;
use super::tier_pool::TierPool;
use super::transfer::Link;
pub use super::transfer::LinkConfig;
use crate::time::Micros;

/// How long after a block landed in a tier a load of it counts as
/// thrashing, when the GPU had evicted its copy meanwhile: offloaded,
/// evicted and needed back almost at once.
pub const THRASH_WINDOW: Micros = Micros::from_secs(1);

/// LMCache's default `chunk_size`, tokens.
pub const LMCACHE_CHUNK_TOKENS: u32 = 256;

/// Where a tier keeps its blocks. Tiers are ordered nearest first, in this
/// order.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Medium {
    /// Host memory, right across the GPU's PCIe link.
    #[default]
    Cpu,
    /// A local disk (NVMe), behind host memory.
    Disk,
    /// A remote store over the network (LMCache's remote backend), behind host memory.
    Remote,
}

impl Medium {
    /// The names [`Medium::parse`] accepts, nearest first.
    pub const NAMES: [&'static str; 3] = ["cpu", "disk", "remote"];

    /// The medium called `name` (`cpu`, `disk`, `remote`).
    pub fn parse(name: &str) -> Option<Medium> {
        match name {
            "cpu" => Some(Medium::Cpu),
            "disk" => Some(Medium::Disk),
            "remote" => Some(Medium::Remote),
            _ => None,
        }
    }

    /// The medium's name.
    pub fn name(self) -> &'static str {
        Medium::NAMES[self as usize]
    }

    /// Its name in KV events (vLLM's `CPU`; `DISK` and `REMOTE` below it).
    pub fn event_name(self) -> MediumName {
        ["CPU", "DISK", "REMOTE"][self as usize]
    }
}

/// What is offered to the tiers, and when; see the module documentation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StorePolicy {
    /// vLLM's native offloading: every full block, prompt and output, after
    /// the step that computed it.
    EveryFullBlock,
    /// LMCache: the prompt's full blocks in whole chunks of `chunk_blocks`
    /// blocks as prefill computes them, the rest when the prefill completes.
    PromptChunks {
        /// Blocks per chunk (at least 1).
        chunk_blocks: u32,
    },
}

impl StorePolicy {
    /// How many leading full blocks of a request with `prompt_tokens` to
    /// have offered once `computed_tokens` are computed.
    pub fn storable_blocks(self, computed_tokens: u32, prompt_tokens: u32, block_size: u32) -> u32 {
        match self {
            StorePolicy::EveryFullBlock => computed_tokens / block_size,
            StorePolicy::PromptChunks { chunk_blocks } => {
                let full = computed_tokens.min(prompt_tokens) / block_size;
                if computed_tokens >= prompt_tokens { full } else { full - full % chunk_blocks.max(1) }
            }
        }
    }
}

/// One tier's configuration.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct TierConfig {
    /// Where its blocks live.
    pub medium: Medium,
    /// Blocks (of the GPU block size) it holds.
    pub blocks: u64,
    /// The link between host memory and the medium (both directions), for
    /// every medium but [`Medium::Cpu`], which has none.
    pub link: Option<LinkConfig>,
}

/// The tiers of an instance.
#[derive(Clone, Debug, PartialEq)]
pub struct OffloadConfig {
    /// What is stored, and when.
    pub policy: StorePolicy,
    /// Bytes of one block on one GPU (its tensor-parallel shard).
    pub block_bytes: u64,
    /// GPU → host (stores).
    pub store: LinkConfig,
    /// Host → GPU (loads).
    pub load: LinkConfig,
    /// Nearest first: at most one per medium, in [`Medium`] order.
    pub tiers: Vec<TierConfig>,
}

/// Tiers that cannot be built.
#[derive(Debug, Error, PartialEq)]
pub enum OffloadConfigError {
    /// An empty tier list.
    #[error("KV offloading needs at least one tier")]
    NoTiers,
    /// Tiers out of order or a medium twice.
    #[error("KV tiers must be ordered cpu, disk, remote, each at most once; got {0}")]
    Order(String),
    /// Fewer than one usable block.
    #[error("the {0} KV tier needs at least one block, got 0")]
    TooSmall(&'static str),
    /// More blocks than a pool can index.
    #[error("the {medium} KV tier holds at most {max} blocks, got {got}", max = TierPool::MAX_BLOCKS)]
    TooLarge {
        /// The tier.
        medium: &'static str,
        /// The requested count.
        got: u64,
    },
    /// A link on the CPU tier, or none on another.
    #[error("the {0} KV tier {1}")]
    Link(&'static str, &'static str),
    /// A bandwidth that is not a positive finite number.
    #[error("KV transfer bandwidth must be a positive number of bytes per second, got {0}")]
    Bandwidth(f64),
    /// A zero block size in bytes.
    #[error("a KV block must have a positive size in bytes")]
    ZeroBlockBytes,
    /// A zero chunk.
    #[error("an LMCache chunk must hold at least one block")]
    ZeroChunk,
}

impl OffloadConfig {
    /// vLLM's native offloading: one CPU tier of `cpu_blocks` blocks of
    /// `block_bytes` (per GPU), and `link` both ways.
    pub fn native_cpu(cpu_blocks: u64, block_bytes: u64, link: LinkConfig) -> OffloadConfig {
        OffloadConfig {
            policy: StorePolicy::EveryFullBlock,
            block_bytes,
            store: link,
            load: link,
            tiers: vec![TierConfig { medium: Medium::Cpu, blocks: cpu_blocks, link: None }],
        }
    }

    /// Checks the figures the tiers are built from.
    pub fn validate(&self) -> Result<(), OffloadConfigError> {
        if self.tiers.is_empty() {
            return Err(OffloadConfigError::NoTiers);
        }
        if self.tiers.windows(2).any(|w| w[0].medium >= w[1].medium) {
            let names: Vec<&str> = self.tiers.iter().map(|t| t.medium.name()).collect();
            return Err(OffloadConfigError::Order(names.join(", ")));
        }
        let mut links = vec![self.store, self.load];
        for t in &self.tiers {
            let name = t.medium.name();
            if t.blocks == 0 {
                return Err(OffloadConfigError::TooSmall(name));
            }
            if t.blocks > TierPool::MAX_BLOCKS {
                return Err(OffloadConfigError::TooLarge { medium: name, got: t.blocks });
            }
            match (t.medium, t.link) {
                (Medium::Cpu, Some(_)) => return Err(OffloadConfigError::Link(name, "is host memory and has no link of its own")),
                (Medium::Disk | Medium::Remote, None) => {
                    return Err(OffloadConfigError::Link(name, "needs a link (bandwidth and latency)"));
                }
                (_, link) => links.extend(link),
            }
        }
        if let Some(bad) = links.iter().find(|l| !l.is_valid()) {
            return Err(OffloadConfigError::Bandwidth(bad.bytes_per_s));
        }
        if self.block_bytes == 0 {
            return Err(OffloadConfigError::ZeroBlockBytes);
        }
        if self.policy == (StorePolicy::PromptChunks { chunk_blocks: 0 }) {
            return Err(OffloadConfigError::ZeroChunk);
        }
        Ok(())
    }
}

/// What one tier did over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TierStats {
    /// Where its blocks live.
    pub medium: Medium,
    /// Blocks (the largest of replicas that took turns in one slot).
    pub capacity_blocks: u64,
    /// Blocks loaded from it.
    pub hit_blocks: u64,
    /// Blocks copied into it.
    pub stored_blocks: u64,
    /// Loaded blocks that had landed in it less than [`THRASH_WINDOW`]
    /// before and whose GPU copy was gone.
    pub thrashed_blocks: u64,
    /// Time its own link (host → medium) was busy with stores; zero for host memory.
    pub write_busy: Micros,
    /// Time its own link (medium → host) was busy with loads; zero for host memory.
    pub read_busy: Micros,
}

/// What an instance's tiers did over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OffloadStats {
    /// Bytes of one block on one GPU.
    pub block_bytes: u64,
    /// Blocks looked up below the GPU (those after each admitted request's GPU hit).
    pub lookup_blocks: u64,
    /// Loads (one per request that found blocks).
    pub loads: u64,
    /// Stores put off to a later step because a tier had too few evictable blocks.
    pub deferred_stores: u64,
    /// Bytes moved host → GPU, per GPU.
    pub load_bytes: u64,
    /// Bytes moved GPU → host, per GPU.
    pub store_bytes: u64,
    /// Time the host → GPU link was busy.
    pub load_busy: Micros,
    /// Time the GPU → host link was busy.
    pub store_busy: Micros,
    /// Σ over loads of the time from the load's start to its landing.
    pub load_wait: Micros,
    /// Per tier, nearest first.
    pub tiers: Vec<TierStats>,
}

impl OffloadStats {
    /// Zero counters for the tiers of `cfg`.
    pub fn new(cfg: &OffloadConfig) -> OffloadStats {
        let tiers = cfg.tiers.iter().map(|t| TierStats { medium: t.medium, capacity_blocks: t.blocks, ..TierStats::default() }).collect();
        OffloadStats { block_bytes: cfg.block_bytes, tiers, ..OffloadStats::default() }
    }

    /// Blocks loaded from every tier.
    pub fn hit_blocks(&self) -> u64 {
        self.tiers.iter().map(|t| t.hit_blocks).sum()
    }

    /// Adds `other`'s counters (replicas that took turns in one slot, or
    /// instances of one pool; tiers are matched by medium).
    pub fn absorb(&mut self, other: &OffloadStats) {
        self.block_bytes = self.block_bytes.max(other.block_bytes);
        self.lookup_blocks += other.lookup_blocks;
        self.loads += other.loads;
        self.deferred_stores += other.deferred_stores;
        self.load_bytes += other.load_bytes;
        self.store_bytes += other.store_bytes;
        self.load_busy += other.load_busy;
        self.store_busy += other.store_busy;
        self.load_wait += other.load_wait;
        for o in &other.tiers {
            let i = match self.tiers.binary_search_by_key(&o.medium, |t| t.medium) {
                Ok(i) => i,
                Err(i) => {
                    self.tiers.insert(i, TierStats { medium: o.medium, ..TierStats::default() });
                    i
                }
            };
            let t = &mut self.tiers[i];
            t.capacity_blocks = t.capacity_blocks.max(o.capacity_blocks);
            t.hit_blocks += o.hit_blocks;
            t.stored_blocks += o.stored_blocks;
            t.thrashed_blocks += o.thrashed_blocks;
            t.write_busy += o.write_busy;
            t.read_busy += o.read_busy;
        }
    }
}

/// One tier's blocks and link.
struct Tier {
    medium: Medium,
    pool: TierPool,
    /// Host ↔ medium, both directions share it (none for host memory).
    link: Option<Link>,
    /// Hashes of one store not yet in this tier.
    new_hashes: Vec<u64>,
}

/// The blocks a load in flight pins, one table per tier; returned by
/// [`OffloadTiers::start_load`] and given back to
/// [`OffloadTiers::finish_load`] (not `Clone`: a load finishes once).
#[derive(Debug)]
pub struct LoadTicket(u32);

/// The tiers of one instance; see the module documentation.
pub struct OffloadTiers {
    policy: StorePolicy,
    /// Tokens per block.
    block_size: u32,
    block_bytes: u64,
    store: Link,
    load: Link,
    tiers: Vec<Tier>,
    /// The blocks the last [`OffloadTiers::lookup`] found, in order: (tier, slot).
    hits: Vec<(u8, u32)>,
    /// Per load in flight (by ticket), the contents it pins in each tier.
    pins: Vec<Vec<Vec<u64>>>,
    free_tickets: Vec<u32>,
    /// Index changes taken from a pool, while they become events.
    changes: Vec<CacheChange>,
    /// Blocks appended to the tiers' logs so far (stores and touches).
    appended: u64,
}

impl OffloadTiers {
    /// Empty tiers as `cfg` describes, of blocks of `block_size` tokens.
    pub fn new(cfg: &OffloadConfig, block_size: u32) -> Result<OffloadTiers, OffloadConfigError> {
        cfg.validate()?;
        let tiers = cfg
            .tiers
            .iter()
            .map(|t| Tier { medium: t.medium, pool: TierPool::new(t.blocks as u32), link: t.link.map(Link::new), new_hashes: Vec::new() })
            .collect();
        Ok(OffloadTiers {
            policy: cfg.policy,
            block_size,
            block_bytes: cfg.block_bytes,
            store: Link::new(cfg.store),
            load: Link::new(cfg.load),
            tiers,
            hits: Vec::new(),
            pins: Vec::new(),
            free_tickets: Vec::new(),
            changes: Vec::new(),
            appended: 0,
        })
    }

    /// What is stored, and when.
    pub fn policy(&self) -> StorePolicy {
        self.policy
    }

    /// Copies the blocks with content `hashes` (full, computed) down the
    /// tiers at `now`, each to every tier that neither holds nor is
    /// receiving it, and then the private blocks of `private` (which no
    /// tier holds; see `crate::kv::tier_pool`) to every tier. Returns
    /// `false`, storing nothing, when some tier has too few evictable blocks
    /// for its share: the caller offers them again later.
    pub fn store(&mut self, hashes: &[u64], private: Option<PrivateRun>, now: Micros, stats: &mut OffloadStats) -> bool {
        let private_blocks = private.map_or(0, |p| p.blocks);
        let mut crossing = u64::from(private_blocks); // blocks some tier lacks: they cross the GPU → host link
        for t in &mut self.tiers {
            t.new_hashes.clear();
        }
        for &h in hashes {
            let mut lacking = false;
            for t in &mut self.tiers {
                if t.pool.find(h).is_none() {
                    t.new_hashes.push(h);
                    lacking = true;
                }
            }
            crossing += u64::from(lacking);
        }
        if crossing == 0 {
            return true;
        }
        if self.tiers.iter_mut().any(|t| t.new_hashes.len() + private_blocks as usize > t.pool.storable(now) as usize) {
            stats.deferred_stores += 1;
            return false;
        }
        let bytes = crossing * self.block_bytes;
        let (in_host, busy) = self.store.transfer(now, bytes);
        stats.store_bytes += bytes;
        stats.store_busy += busy;
        for (t, ts) in self.tiers.iter_mut().zip(&mut stats.tiers) {
            let n = t.new_hashes.len() as u32 + private_blocks;
            if n == 0 {
                continue;
            }
            let landed = match &mut t.link {
                None => in_host,
                Some(link) => {
                    let (landed, busy) = link.transfer(in_host, u64::from(n) * self.block_bytes);
                    ts.write_busy += busy;
                    landed
                }
            };
            t.pool.store(&t.new_hashes, private, now, landed);
            self.appended += u64::from(n);
            ts.stored_blocks += u64::from(n);
        }
        true
    }

    /// Blocks appended to the tiers so far: a clock to read before a
    /// request's first private store, for [`OffloadTiers::adopt`].
    pub fn clock(&self) -> u64 {
        self.appended
    }

    /// Makes the private blocks `owner` stored since the clock read `since`
    /// findable under their contents, `hashes[k]` for ordinal `k` (when the
    /// owner is preempted: its recomputation looks them up).
    pub fn adopt(&mut self, owner: u64, since: u64, hashes: &[u64]) {
        // A tier's own appends since then are at most all tiers' appends.
        let appended = self.clock() - since;
        for t in &mut self.tiers {
            t.pool.adopt(owner, appended, hashes);
        }
    }

    /// How many of `hashes` (a prompt's full blocks after its GPU hit) the
    /// tiers can serve at `now`: the leading run that some tier holds,
    /// landed. Counts the lookup in `stats`.
    pub fn lookup(&mut self, hashes: &[u64], now: Micros, stats: &mut OffloadStats) -> u32 {
        self.hits.clear();
        for &h in hashes {
            match self.tiers.iter().enumerate().find_map(|(i, t)| t.pool.landed(h, now).map(|b| (i as u8, b))) {
                Some(hit) => self.hits.push(hit),
                None => break,
            }
        }
        stats.lookup_blocks += hashes.len() as u64;
        self.hits.len() as u32
    }

    /// The run [`OffloadTiers::lookup`] would find, without counting it or
    /// changing anything, as blocks per medium (indexed by [`Medium`]):
    /// what a precise prefix-aware router reads.
    pub fn peek(&self, hashes: &[u64], now: Micros) -> [u32; 3] {
        let mut per_medium = [0; 3];
        for &h in hashes {
            match self.tiers.iter().find(|t| t.pool.landed(h, now).is_some()) {
                Some(t) => per_medium[t.medium as usize] += 1,
                None => break,
            }
        }
        per_medium
    }

    /// Starts loading the blocks with content `hashes`, the run the last
    /// [`OffloadTiers::lookup`] found (nothing may touch the tiers in
    /// between), at `now`: pins them until [`OffloadTiers::finish_load`],
    /// and returns the ticket and when the load lands. `on_gpu` says whether
    /// the GPU holds each content, before the request took its blocks (for
    /// the thrashing count: vLLM also loads a block the GPU holds but may
    /// not use, the last of a prompt).
    pub fn start_load(&mut self, hashes: &[u64], now: Micros, on_gpu: &[bool], stats: &mut OffloadStats) -> (LoadTicket, Micros) {
        debug_assert_eq!(hashes.len(), self.hits.len(), "not the run the last lookup found");
        let ticket = match self.free_tickets.pop() {
            Some(t) => t,
            None => {
                self.pins.push(vec![Vec::new(); self.tiers.len()]);
                (self.pins.len() - 1) as u32
            }
        };
        let mut in_host = now;
        for (i, ((t, ts), pinned)) in self.tiers.iter_mut().zip(&mut stats.tiers).zip(&mut self.pins[ticket as usize]).enumerate() {
            debug_assert!(pinned.is_empty());
            for ((&(tier, slot), &h), &on_gpu) in self.hits.iter().zip(hashes).zip(on_gpu) {
                if tier as usize == i {
                    t.pool.pin(slot);
                    pinned.push(h);
                    let recent = now.saturating_sub(t.pool.landed_at(slot)) < THRASH_WINDOW;
                    ts.thrashed_blocks += u64::from(recent && !on_gpu);
                }
            }
            let n = pinned.len() as u64;
            if n == 0 {
                continue;
            }
            ts.hit_blocks += n;
            if let Some(link) = &mut t.link {
                let (ready, busy) = link.transfer(now, n * self.block_bytes);
                ts.read_busy += busy;
                in_host = in_host.max(ready);
            }
        }
        let bytes = hashes.len() as u64 * self.block_bytes;
        let (done, busy) = self.load.transfer(in_host, bytes);
        stats.loads += 1;
        stats.load_bytes += bytes;
        stats.load_busy += busy;
        stats.load_wait += done - now;
        (LoadTicket(ticket), done)
    }

    /// A load landed: its blocks become evictable again in their tiers
    /// (most recently used).
    pub fn finish_load(&mut self, ticket: LoadTicket) {
        for (t, pinned) in self.tiers.iter_mut().zip(&mut self.pins[ticket.0 as usize]) {
            self.appended += t.pool.unpin_and_touch(pinned);
            pinned.clear();
        }
        self.free_tickets.push(ticket.0);
    }

    /// From now on, records the blocks every tier stores and evicts, for
    /// [`OffloadTiers::take_events`].
    pub fn record_events(&mut self) {
        for t in &mut self.tiers {
            t.pool.record_changes();
        }
    }

    /// Appends the events recorded since the last call, tier by tier, as
    /// vLLM's `OffloadingConnector` reports them: consecutive stores (and
    /// evictions) of a tier as one event, with no parent hash and no tokens.
    pub fn take_events(&mut self, out: &mut Vec<KvEvent>) {
        for t in &mut self.tiers {
            self.changes.clear();
            t.pool.take_changes(&mut self.changes);
            let medium = t.medium.event_name();
            for &change in &self.changes {
                match (change, out.last_mut()) {
                    (CacheChange::Stored { hash, .. }, Some(KvEvent::BlockStored { block_hashes, medium: m, .. })) if *m == medium => {
                        block_hashes.push(hash)
                    }
                    (CacheChange::Removed { hash }, Some(KvEvent::BlockRemoved { block_hashes, medium: m })) if *m == medium => {
                        block_hashes.push(hash)
                    }
                    (CacheChange::Stored { hash, .. }, _) => out.push(KvEvent::BlockStored {
                        block_hashes: vec![hash],
                        parent_block_hash: None,
                        token_ids: Vec::new(),
                        block_size: self.block_size,
                        medium,
                    }),
                    (CacheChange::Removed { hash }, _) => out.push(KvEvent::BlockRemoved { block_hashes: vec![hash], medium }),
                }
            }
        }
    }

    /// Full consistency check of every tier's pool, for tests: each holds
    /// at most its capacity, its index holds exactly its blocks, and a block
    /// still landing or being loaded is held.
    pub fn assert_consistent(&self) {
        for t in &self.tiers {
            t.pool.assert_consistent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LMCache offers whole chunks while the prompt is being prefilled, the
    /// rest of its full blocks when the prefill completes, and nothing of
    /// the output; native offloading offers every full block.
    #[test]
    fn store_policies_offer_the_blocks_vllm_and_lmcache_save() {
        let lm = StorePolicy::PromptChunks { chunk_blocks: 4 };
        // 16-token blocks, a 200-token prompt (12 full blocks).
        let offered: Vec<u32> = [0, 63, 64, 100, 128, 180, 200, 260].iter().map(|&c| lm.storable_blocks(c, 200, 16)).collect();
        assert_eq!(offered, [0, 0, 4, 4, 8, 8, 12, 12]);
        let native: Vec<u32> = [0, 63, 64, 200, 260].iter().map(|&c| StorePolicy::EveryFullBlock.storable_blocks(c, 200, 16)).collect();
        assert_eq!(native, [0, 3, 4, 12, 16]);
    }

    #[test]
    fn tiers_out_of_order_without_links_or_empty_are_refused() {
        let link = LinkConfig { bytes_per_s: 1e9, latency: Micros(0) };
        let mut cfg = OffloadConfig::native_cpu(10, 100, link);
        assert_eq!(cfg.validate(), Ok(()));
        cfg.tiers.insert(0, TierConfig { medium: Medium::Disk, blocks: 10, link: Some(link) });
        assert!(matches!(cfg.validate(), Err(OffloadConfigError::Order(_))));
        cfg.tiers.swap(0, 1);
        assert_eq!(cfg.validate(), Ok(()));
        cfg.tiers[1].link = None;
        assert!(matches!(cfg.validate(), Err(OffloadConfigError::Link("disk", _))));
        cfg.tiers[1].link = Some(LinkConfig { bytes_per_s: -1.0, latency: Micros(0) });
        assert_eq!(cfg.validate(), Err(OffloadConfigError::Bandwidth(-1.0)));
        cfg.tiers[0].blocks = 0;
        assert_eq!(cfg.validate(), Err(OffloadConfigError::TooSmall("cpu")));
        cfg.tiers.clear();
        assert_eq!(cfg.validate(), Err(OffloadConfigError::NoTiers));
    }
}
