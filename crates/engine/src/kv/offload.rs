//! A CPU tier below the GPU KV cache: vLLM's native KV offloading
//! (`OffloadingConnector` with the CPU backend, vLLM 0.11–0.13,
//! `vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py`
//! and `vllm/v1/kv_offload/`).
//!
//! * **Store** (`_get_reqs_to_store`). Every full block a request has
//!   computed, prompt and output alike, is copied to host memory after the
//!   step that computed it, unless host memory holds (or is receiving) its
//!   content already. The copy occupies the GPU → host link; until it lands
//!   the block is neither findable nor evictable (`ref_cnt = −1`). When too
//!   few host blocks can be evicted for all of a request's new blocks,
//!   nothing is stored and the request tries again after its next step
//!   (`prepare_store` returning `None`).
//! * **Lookup** (`get_num_new_matched_tokens`, only for a request with no
//!   computed tokens). After the GPU prefix hit, the leading run of the
//!   prompt's full blocks that the tier holds, landed, is loaded instead of
//!   recomputed. Unlike a GPU hit it may cover the whole prompt; the last
//!   token is then recomputed (`_update_waiting_for_remote_kv`).
//! * **Load.** The request waits off the scheduler (`WAITING_FOR_REMOTE_KVS`)
//!   while the host → GPU copy runs; other requests keep running. When the
//!   copy lands, the blocks enter the GPU prefix index and the request waits
//!   again with those tokens computed (the instance's side: `Instance`'s
//!   `start_load` and `on_loaded`). A host block being loaded cannot be
//!   evicted; when the load ends it is the most recently used.
//! * **Eviction.** Host memory is a fixed number of blocks, evicted least
//!   recently stored or loaded first (`LRUOffloadingManager`).
//!
//! Simplified: the host block is the GPU block (vLLM's default
//! `block_size`); a load does not first move every block of the request to
//! the LRU tail (`touch`), only the blocks it loads; and two requests may
//! load the same host block at once (vLLM ≥ 0.13 makes the second wait).
//!
//! Each direction of the link is one first-come, first-served channel:
//! a transfer of `b` bytes that starts at `s` holds the link until
//! `s + b / bandwidth` and completes `latency` later, so concurrent
//! transfers share the bandwidth and none overtakes another. Every GPU of a
//! tensor-parallel instance moves its own shard over its own link at the
//! same time, so `block_bytes` is one GPU's shard of a block.
//!
//! The host pool is a [`KvCache`] with prefix caching: a stored block is a
//! block registered under its content hash and returned to the free queue
//! (so it stays findable until evicted); a load pins blocks as requests pin
//! GPU blocks.

use std::collections::VecDeque;

use thiserror::Error;

use super::{BlockTable, KvCache};
use crate::time::Micros;

/// How long after a block landed in host memory a load of it counts as
/// thrashing, when the GPU had evicted its copy meanwhile: offloaded,
/// evicted and needed back almost at once.
pub const THRASH_WINDOW: Micros = Micros::from_secs(1);

/// One direction of the GPU ↔ host link.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Bytes per second one GPU moves in this direction.
    pub bytes_per_s: f64,
    /// Fixed cost of a transfer, added once per transfer.
    pub latency: Micros,
}

/// A CPU tier's configuration.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct OffloadConfig {
    /// Host blocks (of the GPU block size) the tier holds.
    pub cpu_blocks: u64,
    /// Bytes of one block on one GPU (its tensor-parallel shard).
    pub block_bytes: u64,
    /// GPU → host (stores).
    pub store: LinkConfig,
    /// Host → GPU (loads).
    pub load: LinkConfig,
}

/// A CPU tier that cannot be built.
#[derive(Debug, Error, PartialEq)]
pub enum OffloadConfigError {
    /// Fewer than one usable block.
    #[error("the CPU KV tier needs at least one block, got {0}")]
    TooSmall(u64),
    /// More blocks than the cache can index.
    #[error("the CPU KV tier holds at most {max} blocks, got {got}", max = u32::MAX - 2)]
    TooLarge {
        /// The requested count.
        got: u64,
    },
    /// A bandwidth that is not a positive finite number.
    #[error("KV transfer bandwidth must be a positive number of bytes per second, got {0}")]
    Bandwidth(f64),
    /// A zero block size in bytes.
    #[error("a KV block must have a positive size in bytes")]
    ZeroBlockBytes,
}

impl OffloadConfig {
    /// Checks the figures a tier is built from.
    pub fn validate(&self) -> Result<(), OffloadConfigError> {
        if self.cpu_blocks == 0 {
            return Err(OffloadConfigError::TooSmall(0));
        }
        if self.cpu_blocks >= u64::from(u32::MAX - 2) {
            return Err(OffloadConfigError::TooLarge { got: self.cpu_blocks });
        }
        for link in [self.store, self.load] {
            if !(link.bytes_per_s.is_finite() && link.bytes_per_s > 0.0) {
                return Err(OffloadConfigError::Bandwidth(link.bytes_per_s));
            }
        }
        if self.block_bytes == 0 {
            return Err(OffloadConfigError::ZeroBlockBytes);
        }
        Ok(())
    }
}

/// What a tier did over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TierStats {
    /// Host blocks (the largest of replicas that took turns in one slot).
    pub capacity_blocks: u64,
    /// Blocks looked up in the tier (those after each admitted request's GPU hit).
    pub lookup_blocks: u64,
    /// Of which found (and loaded).
    pub hit_blocks: u64,
    /// Loads (one per request that found blocks).
    pub loads: u64,
    /// Blocks copied to the tier.
    pub stored_blocks: u64,
    /// Stores put off to a later step because too few host blocks were evictable.
    pub deferred_stores: u64,
    /// Bytes moved host → GPU, per GPU.
    pub load_bytes: u64,
    /// Bytes moved GPU → host, per GPU.
    pub store_bytes: u64,
    /// Time the host → GPU link was busy.
    pub load_busy: Micros,
    /// Time the GPU → host link was busy.
    pub store_busy: Micros,
    /// Σ over loads of the time from the load's start to its completion.
    pub load_wait: Micros,
    /// Loaded blocks that had landed in the tier less than [`THRASH_WINDOW`]
    /// before and whose GPU copy was gone.
    pub thrashed_blocks: u64,
}

impl TierStats {
    /// Adds `other`'s counters (replicas that took turns in one slot).
    pub fn absorb(&mut self, other: &TierStats) {
        self.capacity_blocks = self.capacity_blocks.max(other.capacity_blocks);
        self.lookup_blocks += other.lookup_blocks;
        self.hit_blocks += other.hit_blocks;
        self.loads += other.loads;
        self.stored_blocks += other.stored_blocks;
        self.deferred_stores += other.deferred_stores;
        self.load_bytes += other.load_bytes;
        self.store_bytes += other.store_bytes;
        self.load_busy += other.load_busy;
        self.store_busy += other.store_busy;
        self.load_wait += other.load_wait;
        self.thrashed_blocks += other.thrashed_blocks;
    }
}

/// One direction of the link: a first-come, first-served channel.
#[derive(Clone, Debug)]
struct Link {
    cfg: LinkConfig,
    /// When the transfers queued so far leave the link.
    free_at: Micros,
}

impl Link {
    /// Queues `bytes` at `now`; returns (completion time, time the link is busy with it).
    fn transfer(&mut self, now: Micros, bytes: u64) -> (Micros, Micros) {
        let busy = Micros::from_us_f64((bytes as f64 / self.cfg.bytes_per_s * 1e6).ceil()).unwrap_or(Micros::MAX_SPAN).min(Micros::MAX_SPAN);
        let start = self.free_at.max(now);
        self.free_at = start + busy;
        (self.free_at + self.cfg.latency, busy)
    }
}

/// The CPU tier of one instance; see the module documentation.
pub struct CpuTier {
    pool: KvCache,
    /// By host block id: when the block's last store lands.
    landed_at: Vec<Micros>,
    block_bytes: u64,
    store: Link,
    load: Link,
    /// Stores in flight, in landing order (the link is first come, first
    /// served): when each lands, and the host blocks it pins until then.
    landing: VecDeque<(Micros, BlockTable)>,
    /// Emptied block tables, for the next stores.
    spare_tables: Vec<BlockTable>,
    /// Hashes of one store not yet in the tier.
    new_hashes: Vec<u64>,
    /// The host blocks the last [`CpuTier::lookup`] found, in order.
    hits: Vec<u32>,
}

impl CpuTier {
    /// An empty tier of `cfg.cpu_blocks` blocks of `block_size` tokens.
    pub fn new(cfg: &OffloadConfig, block_size: u32) -> Result<CpuTier, OffloadConfigError> {
        cfg.validate()?;
        // One more block than asked: the pool reserves a null block, as vLLM's GPU pool does.
        let pool = KvCache::new(cfg.cpu_blocks + 1, block_size, true).map_err(|_| OffloadConfigError::TooLarge { got: cfg.cpu_blocks })?;
        Ok(CpuTier {
            pool,
            landed_at: Vec::new(),
            block_bytes: cfg.block_bytes,
            store: Link { cfg: cfg.store, free_at: Micros::ZERO },
            load: Link { cfg: cfg.load, free_at: Micros::ZERO },
            landing: VecDeque::new(),
            spare_tables: Vec::new(),
            new_hashes: Vec::new(),
            hits: Vec::new(),
        })
    }

    /// Unpins the blocks whose stores have landed by `now`: they become
    /// findable and evictable.
    fn settle(&mut self, now: Micros) {
        while let Some((landed, _)) = self.landing.front()
            && *landed <= now
        {
            let (_, mut table) = self.landing.pop_front().expect("front exists");
            self.pool.free(&mut table);
            self.spare_tables.push(table);
        }
    }

    /// Copies the blocks with content `hashes` (full, computed) to host
    /// memory at `now`, skipping contents the tier holds or is receiving.
    /// Returns `false`, storing nothing, when too few host blocks are
    /// evictable for all of them: the caller offers them again later.
    pub fn store(&mut self, hashes: &[u64], now: Micros, stats: &mut TierStats) -> bool {
        self.settle(now);
        self.new_hashes.clear();
        self.new_hashes.extend(hashes.iter().copied().filter(|&h| self.pool.cached_block(h).is_none()));
        if self.new_hashes.is_empty() {
            return true;
        }
        let n = self.new_hashes.len() as u32;
        if n > self.pool.num_free_blocks() {
            stats.deferred_stores += 1;
            return false;
        }
        let tokens = n * self.pool.block_size();
        let mut table = self.spare_tables.pop().unwrap_or_default();
        let stored = self.pool.allocate_slots(&mut table, tokens, &[], &self.new_hashes, tokens);
        debug_assert!(stored, "free blocks were counted");
        let bytes = u64::from(n) * self.block_bytes;
        let (landed, busy) = self.store.transfer(now, bytes);
        for &b in &table.blocks {
            let b = b as usize;
            if b >= self.landed_at.len() {
                self.landed_at.resize(b + 1, Micros::ZERO);
            }
            self.landed_at[b] = landed;
        }
        self.landing.push_back((landed, table));
        stats.stored_blocks += u64::from(n);
        stats.store_bytes += bytes;
        stats.store_busy += busy;
        true
    }

    /// How many of `hashes` (a prompt's full blocks after its GPU hit) the
    /// tier can serve at `now`: the leading run it holds whose stores have
    /// landed. Counts the lookup in `stats`.
    pub fn lookup(&mut self, hashes: &[u64], now: Micros, stats: &mut TierStats) -> u32 {
        self.settle(now);
        self.hits.clear();
        for &h in hashes {
            match self.pool.cached_block(h) {
                Some(b) if self.landed_at[b as usize] <= now => self.hits.push(b),
                _ => break,
            }
        }
        stats.lookup_blocks += hashes.len() as u64;
        self.hits.len() as u32
    }

    /// Starts loading the blocks with content `hashes`, the run the last
    /// [`CpuTier::lookup`] found (nothing may touch the tier in between), at
    /// `now`: pins them in `pinned` until [`CpuTier::finish_load`], and
    /// returns when the load completes. `on_gpu` says whether the GPU holds
    /// each content, before the request took its blocks (for the thrashing
    /// count: vLLM also loads a block the GPU holds but may not use, the
    /// last of a prompt).
    pub fn start_load(&mut self, hashes: &[u64], pinned: &mut BlockTable, now: Micros, on_gpu: &[bool], stats: &mut TierStats) -> Micros {
        debug_assert_eq!(hashes.len(), self.hits.len(), "not the run the last lookup found");
        for (&b, &on_gpu) in self.hits.iter().zip(on_gpu) {
            let recent = now.saturating_sub(self.landed_at[b as usize]) < THRASH_WINDOW;
            stats.thrashed_blocks += u64::from(recent && !on_gpu);
        }
        let n = hashes.len() as u32;
        let tokens = n * self.pool.block_size();
        let pinned_ok = self.pool.allocate_slots(pinned, tokens, &self.hits, hashes, tokens);
        debug_assert!(pinned_ok, "pinning cached blocks needs no free block");
        let bytes = u64::from(n) * self.block_bytes;
        let (done, busy) = self.load.transfer(now, bytes);
        stats.hit_blocks += u64::from(n);
        stats.loads += 1;
        stats.load_bytes += bytes;
        stats.load_busy += busy;
        stats.load_wait += done - now;
        done
    }

    /// A load completed: its host blocks become evictable again (most recently used).
    pub fn finish_load(&mut self, pinned: &mut BlockTable) {
        self.pool.free(pinned);
    }

    /// Full consistency check of the host pool, for tests.
    pub fn assert_consistent(&self) {
        self.pool.assert_consistent();
    }
}
