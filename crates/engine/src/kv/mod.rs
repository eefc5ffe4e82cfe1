//! Paged KV cache with automatic prefix caching, mirroring vLLM v1's
//! `BlockPool` and `KVCacheManager` (vLLM 0.9–0.11, `vllm/v1/core/`).
//!
//! * Blocks live in one `Vec`; free blocks form an intrusive doubly linked
//!   list in eviction order (`FreeKVCacheBlockQueue`): allocation pops from the
//!   head, freeing appends to the tail, touching a cached free block unlinks it
//!   in O(1).
//! * Blocks are materialised on first use. vLLM's queue starts as every
//!   block in id order and only ever appends at its tail, so the blocks never
//!   used are always its head, in id order: the queue is that fresh range
//!   followed by the linked list of used-and-freed blocks. Memory follows the
//!   blocks a run touches, not the cache size (a small model on a large GPU
//!   has hundreds of millions of blocks).
//! * A full block gets the chained hash of its tokens when its slots are
//!   allocated (`cache_full_blocks`); cached blocks whose reference count drops
//!   to zero stay findable until they are popped for reuse (LRU eviction).
//! * Like vLLM, block 0 is reserved as the null block, so a cache of
//!   `num_gpu_blocks` has `num_gpu_blocks − 1` usable blocks.
//! * A model with sliding-window layers is served by vLLM's hybrid KV cache
//!   manager ([`KvGroups`]): its layers form groups of equal size that take
//!   blocks from the one pool, a request holding an entry per `block_size`
//!   tokens in every group. A sliding-window group releases the blocks that
//!   slid out of its window (`remove_skipped_blocks`, their entries become
//!   the null block), and a prefix hits only where the full-attention groups
//!   hold all of it and the sliding groups its last window
//!   (`HybridKVCacheCoordinator.find_longest_cache_hit`). With one
//!   full-attention group (every other model) this is the cache above.
//!
//! Layout: a block is 16 bytes, four to a cache line: its hash, and either
//! its free-queue links or its reference count (a block is in the queue
//! exactly when no request holds it), so an operation on a block touches one
//! cache line; which blocks carry a hash is a bitset of 1 bit per block. The
//! index is a compact open-addressing table of block ids (`index.rs`). A
//! block's life costs one index insertion when it is registered and one
//! index probe when it is evicted; a decode step whose blocks already hold
//! its token costs no index or block access at all ([`KvCache::holds`]).
//!
//! Invariant (checked in debug builds after every operation and in full by
//! [`KvCache::assert_consistent`]): `used + free = usable`, the free list holds
//! exactly the blocks with reference count 0, and every hash in the index
//! points to a block carrying that hash.

pub mod events;
mod index;
pub mod offload;
mod tier_pool;
pub mod transfer;

use std::collections::BTreeMap;

use thiserror::Error;

use self::events::CacheChange;
use self::index::BlockIndex;

const NIL: u32 = u32::MAX;
/// `Block::next` of a block some request holds (never a block id: ids are below `u32::MAX − 2`).
const HELD: u32 = u32::MAX - 1;

#[derive(Clone, Debug)]
struct Block {
    /// Content hash; meaningful only while the block's bit in `KvCache::hashed` is set.
    hash: u64,
    /// Free: the previous block in the free queue (`NIL` at its head).
    /// Held: the reference count.
    prev: u32,
    /// Free: the next block in the free queue (`NIL` at its tail). Held: `HELD`.
    next: u32,
}

const _: () = assert!(std::mem::size_of::<Block>() == 16);

/// Asks the CPU to start loading `value`'s cache line (a hint that never
/// changes a result); a no-op off x86-64.
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and writes nothing; the address is
    // that of a live reference. SSE is baseline on x86-64.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

impl Block {
    fn ref_cnt(&self) -> u32 {
        if self.next == HELD { self.prev } else { 0 }
    }

    /// Marks the block held by `refs` ≥ 1 requests (it must be out of the free queue).
    fn hold(&mut self, refs: u32) {
        debug_assert!(refs > 0);
        self.prev = refs;
        self.next = HELD;
    }
}

/// Tokens a cache of `num_gpu_blocks` blocks of `block_size` tokens holds
/// for requests: block 0 is vLLM's null block. vLLM refuses to start when
/// this is less than one request of `max_model_len`
/// (`check_enough_kv_cache_memory`).
pub fn request_kv_tokens(num_gpu_blocks: u64, block_size: u32) -> u64 {
    num_gpu_blocks.saturating_sub(1).saturating_mul(u64::from(block_size))
}

/// How vLLM's KV cache manager splits a model's attention layers into
/// groups of equal size that take blocks from one pool
/// (`kv_cache_utils.get_kv_cache_groups`): the full-attention groups first,
/// then the sliding-window ones. A block holds `block_size` tokens of one
/// group's layers, so a request holds an entry per `block_size` tokens in
/// every group; a sliding-window group's entries before its window are the
/// null block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvGroups {
    /// Groups of full-attention layers.
    pub full: u32,
    /// Groups of sliding-window layers.
    pub sliding: u32,
    /// Positions a sliding-window layer reads, its own included (W ≥ 1;
    /// unused without sliding groups).
    pub window_tokens: u32,
}

impl KvGroups {
    /// Every layer in one full-attention group: every model without
    /// sliding-window layers, and every model when vLLM's hybrid KV cache
    /// manager is off.
    pub const FULL: KvGroups = KvGroups { full: 1, sliding: 0, window_tokens: 0 };

    /// Most groups a cache takes (Gemma-3's 5 : 1 pattern makes 7).
    pub const MAX_GROUPS: u32 = 64;

    /// How many groups.
    pub fn count(self) -> u32 {
        self.full + self.sliding
    }

    /// Blocks a request of `tokens` tokens holds at most, its prompt
    /// computed in chunks of at most `chunk_tokens`: every full-attention
    /// group holds all its tokens, a sliding-window group at most
    /// [`KvGroups::window_peak`].
    pub fn peak_blocks(self, tokens: u64, chunk_tokens: u32, block_size: u32) -> u64 {
        let all = tokens.div_ceil(u64::from(block_size.max(1)));
        u64::from(self.full) * all + u64::from(self.sliding) * all.min(self.window_peak(chunk_tokens, block_size))
    }

    /// Blocks one sliding-window group holds at most for a request: a
    /// window and a chunk, ⌈(W − 1 + chunk) / block⌉ + 1 (vLLM's
    /// `SlidingWindowSpec.max_memory_usage_bytes`).
    pub fn window_peak(self, chunk_tokens: u32, block_size: u32) -> u64 {
        (u64::from(self.window_tokens.max(1)) - 1 + u64::from(chunk_tokens)).div_ceil(u64::from(block_size.max(1))) + 1
    }

    /// The most tokens of one request whose [`KvGroups::peak_blocks`] fit in
    /// `usable_blocks` (with full-attention groups; without, what fits were
    /// the windows not a bound).
    pub fn longest_request(self, usable_blocks: u64, chunk_tokens: u32, block_size: u32) -> u64 {
        let block = u64::from(block_size.max(1));
        if self.full == 0 {
            return usable_blocks / u64::from(self.sliding.max(1)) * block;
        }
        let windows = u64::from(self.sliding) * self.window_peak(chunk_tokens, block_size);
        usable_blocks.saturating_sub(windows) / u64::from(self.full) * block
    }

    fn validate(self) -> Result<(), KvConfigError> {
        if self.count() == 0 || self.count() > Self::MAX_GROUPS || (self.sliding > 0 && self.window_tokens == 0) {
            return Err(KvConfigError::Groups(self));
        }
        Ok(())
    }
}

impl std::fmt::Display for KvGroups {
    /// `1 full-attention + 6 sliding-window (1024 tokens)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} full-attention", self.full)?;
        if self.sliding > 0 {
            write!(f, " + {} sliding-window ({} tokens)", self.sliding, self.window_tokens)?;
        }
        Ok(())
    }
}

/// The content key of a block of `group` whose tokens hash to `hash`: vLLM
/// keys its cached blocks by (hash, group); group 0's key is the hash
/// itself, so a single-group cache (and its KV events) is unchanged.
fn group_key(hash: u64, group: u32) -> u64 {
    if group == 0 { hash } else { (hash ^ u64::from(group).wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(23) }
}

/// Invalid cache geometry.
#[derive(Debug, Error, PartialEq)]
pub enum KvConfigError {
    /// Block size of zero.
    #[error("block size must be at least 1 token")]
    ZeroBlockSize,
    /// Fewer than two blocks (one is the reserved null block).
    #[error("the KV cache needs at least 2 blocks (one is reserved), got {0}")]
    TooFewBlocks(u64),
    /// No group, too many, or sliding groups without a window.
    #[error("invalid KV cache groups ({0}): between 1 and 64 groups, sliding-window groups with a window of at least 1 token")]
    Groups(KvGroups),
    /// More blocks than can be indexed.
    #[error("at most {max} KV blocks are supported, got {got}", max = u32::MAX - 1)]
    TooManyBlocks {
        /// The requested count.
        got: u64,
    },
}

/// A request's block table: the blocks holding its tokens, in order, one
/// list per KV cache group ([`KvGroups`]), all of the same length.
#[derive(Clone, Debug, Default)]
pub struct BlockTable {
    /// The first group's block ids, one per `block_size` tokens (`u32::MAX`:
    /// the null block, a sliding-window entry before the window).
    pub blocks: Vec<u32>,
    /// How many leading entries are registered in the prefix-cache index.
    pub num_cached: u32,
    /// The other groups' lists (empty with one group).
    others: Vec<Vec<u32>>,
    /// Leading entries of the sliding-window groups that are the null block.
    skipped: u32,
}

impl BlockTable {
    /// Empties the table, keeping its allocation.
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.others.iter_mut().for_each(Vec::clear);
        self.num_cached = 0;
        self.skipped = 0;
    }

    /// Empties the table and gives its memory back.
    pub fn shrink(&mut self) {
        *self = BlockTable::default();
    }

    /// Whether the table holds memory (for tests of slot reuse).
    #[cfg(test)]
    pub(crate) fn has_capacity(&self) -> bool {
        self.blocks.capacity() > 0 || !self.others.is_empty()
    }

    fn group_mut(&mut self, group: u32) -> &mut Vec<u32> {
        match group {
            0 => &mut self.blocks,
            g => &mut self.others[g as usize - 1],
        }
    }

    fn group(&self, group: u32) -> &[u32] {
        match group {
            0 => &self.blocks,
            g => &self.others[g as usize - 1],
        }
    }
}

/// The KV block sizes (tokens) vLLM's `--block-size` accepts. The cache
/// itself works with any positive size; front ends that model a vLLM server
/// refuse the others.
pub const VLLM_BLOCK_SIZES: [u32; 7] = [1, 8, 16, 32, 64, 128, 256];

/// The GPU KV cache of one instance.
pub struct KvCache {
    /// The materialised blocks: ids `0..blocks.len()`; ids up to `usable`
    /// are fresh, at the head of the free queue.
    blocks: Vec<Block>,
    /// Usable blocks (all but the null block).
    usable: u32,
    /// Head and tail of the linked part of the free queue (materialised blocks).
    free_head: u32,
    free_tail: u32,
    num_free: u32,
    num_used: u32,
    /// Bit `b` is set when block `b` carries a content hash.
    hashed: Vec<u64>,
    index: BlockIndex,
    /// The other blocks registered for a content the index finds in an
    /// earlier one, by key, oldest first: two requests computed the same
    /// blocks at once, or a recomputation met its own old blocks. vLLM keeps
    /// every cached block of a content and finds the oldest; when that one is
    /// evicted the next is found. Rare, and only read by key.
    duplicates: BTreeMap<u64, Vec<u32>>,
    block_size: u32,
    prefix_caching: bool,
    groups: KvGroups,
    /// Blocks of a sliding-window group a prefix hit must end with:
    /// ⌈(W − 1) / block_size⌉ (vLLM's `sliding_window_contiguous_blocks`).
    window_blocks: u32,
    /// Bit `b` is set when block `b` is registered under a group other than
    /// the first (its evictions are not KV events); empty with one group.
    other_group: Vec<u64>,
    /// Changes to the prefix index since the last [`KvCache::take_changes`],
    /// when recording ([`KvCache::record_changes`]).
    changes: Option<Vec<CacheChange>>,
}

impl KvCache {
    /// A cache of `num_gpu_blocks` blocks of `block_size` tokens, all free,
    /// for one full-attention group.
    pub fn new(num_gpu_blocks: u64, block_size: u32, prefix_caching: bool) -> Result<KvCache, KvConfigError> {
        KvCache::grouped(num_gpu_blocks, block_size, prefix_caching, KvGroups::FULL)
    }

    /// A cache of `num_gpu_blocks` blocks of `block_size` tokens, all free,
    /// shared by `groups`.
    pub fn grouped(num_gpu_blocks: u64, block_size: u32, prefix_caching: bool, groups: KvGroups) -> Result<KvCache, KvConfigError> {
        groups.validate()?;
        if block_size == 0 {
            return Err(KvConfigError::ZeroBlockSize);
        }
        if num_gpu_blocks < 2 {
            return Err(KvConfigError::TooFewBlocks(num_gpu_blocks));
        }
        if num_gpu_blocks >= u64::from(u32::MAX) {
            return Err(KvConfigError::TooManyBlocks { got: num_gpu_blocks });
        }
        let usable = (num_gpu_blocks - 1) as u32;
        Ok(KvCache {
            blocks: Vec::with_capacity(usable.min(1 << 16) as usize),
            usable,
            free_head: NIL,
            free_tail: NIL,
            num_free: usable,
            num_used: 0,
            hashed: Vec::with_capacity(usable.min(1 << 16).div_ceil(64) as usize),
            index: BlockIndex::new(),
            duplicates: BTreeMap::new(),
            block_size,
            prefix_caching,
            groups,
            window_blocks: (groups.window_tokens.max(1) - 1).div_ceil(block_size),
            other_group: Vec::new(),
            changes: None,
        })
    }

    /// How the cache's layers are grouped.
    pub fn groups(&self) -> KvGroups {
        self.groups
    }

    /// Usable blocks per group: what the cache holds of one request's
    /// tokens, in blocks, were it all full attention (vLLM logs this times
    /// the block size as its KV cache size in tokens).
    pub fn capacity_blocks(&self) -> u32 {
        self.usable / self.groups.count()
    }

    /// From now on, records every block registered in or evicted from the
    /// prefix index, for [`KvCache::take_changes`].
    pub fn record_changes(&mut self) {
        self.changes.get_or_insert_default();
    }

    /// Moves the changes recorded since the last call to `out` (nothing when
    /// not recording).
    pub fn take_changes(&mut self, out: &mut Vec<CacheChange>) {
        if let Some(c) = &mut self.changes {
            out.append(c);
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Whether prefix caching is on.
    pub fn prefix_caching(&self) -> bool {
        self.prefix_caching
    }

    /// Usable blocks (all but the null block).
    pub fn usable_blocks(&self) -> u32 {
        self.usable
    }

    /// Free blocks, including cached blocks that are evictable.
    pub fn num_free_blocks(&self) -> u32 {
        self.num_free
    }

    /// Blocks referenced by at least one request.
    pub fn num_used_blocks(&self) -> u32 {
        self.num_used
    }

    /// Fraction of usable blocks in use, as vLLM's `kv_cache_usage` reports it.
    pub fn usage(&self) -> f64 {
        f64::from(self.num_used) / f64::from(self.usable_blocks())
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size)
    }

    /// vLLM `get_computed_blocks`: the longest run of leading blocks whose
    /// hashes are cached, capped so that at least one of the `num_tokens`
    /// tokens is left to compute. Pushes the hit blocks onto `out`, group
    /// after group (a sliding-window group's entries before its window as
    /// `u32::MAX`, the null block), and returns the number of hit tokens.
    /// Returns 0 when prefix caching is off.
    pub fn find_cached_prefix(&self, block_hashes: &[u64], num_tokens: u32, out: &mut Vec<u32>) -> u32 {
        out.clear();
        if !self.prefix_caching || num_tokens == 0 {
            return 0;
        }
        if self.groups == KvGroups::FULL {
            let max_blocks = ((num_tokens - 1) / self.block_size) as usize;
            for &h in block_hashes.iter().take(max_blocks) {
                match self.lookup(h) {
                    Some(b) => out.push(b),
                    None => break,
                }
            }
            return out.len() as u32 * self.block_size;
        }
        let (hit, first_live) = self.longest_hit(block_hashes, num_tokens);
        for group in 0..self.groups.count() {
            let sliding = group >= self.groups.full;
            for (i, &h) in block_hashes[..hit].iter().enumerate() {
                let b = if sliding && i < first_live { NIL } else { self.lookup(group_key(h, group)).expect("a hit block is indexed") };
                out.push(b);
            }
        }
        hit as u32 * self.block_size
    }

    /// vLLM's `HybridKVCacheCoordinator.find_longest_cache_hit`: the leading
    /// blocks every full-attention group holds, cut to where the
    /// sliding-window groups all hold the [`KvCache::window_blocks`] blocks
    /// before the cut (or, lacking such a run, to the run they hold from the
    /// start). Returns the hit in blocks and the first of them a
    /// sliding-window group needs.
    fn longest_hit(&self, block_hashes: &[u64], num_tokens: u32) -> (usize, usize) {
        let max_blocks = (((num_tokens - 1) / self.block_size) as usize).min(block_hashes.len());
        let held_by =
            |i: usize, groups: std::ops::Range<u32>| groups.into_iter().all(|g| self.lookup(group_key(block_hashes[i], g)).is_some());
        let (full, sliding) = (0..self.groups.full, self.groups.full..self.groups.count());
        let hit = (0..max_blocks).take_while(|&i| held_by(i, full.clone())).count();
        if sliding.is_empty() {
            return (hit, 0);
        }
        let mut run = 0;
        for i in (0..hit).rev() {
            if !held_by(i, sliding.clone()) {
                run = 0;
                continue;
            }
            run += 1;
            if run >= self.window_blocks as usize {
                return (i + run, i);
            }
        }
        (run, 0)
    }

    /// The block holding content `h`, if the prefix index has it (it may be
    /// free: cached and evictable).
    pub fn cached_block(&self, h: u64) -> Option<u32> {
        if self.prefix_caching { self.lookup(h) } else { None }
    }

    /// The block the index holds for content hash `h`.
    fn lookup(&self, h: u64) -> Option<u32> {
        self.index.get(h, |b| self.blocks[b as usize].hash)
    }

    /// The number of tokens [`KvCache::find_cached_prefix`] would hit, without
    /// collecting the blocks: what a precise prefix-aware router reads. Does
    /// not allocate.
    pub fn cached_prefix_tokens(&self, block_hashes: &[u64], num_tokens: u32) -> u32 {
        if !self.prefix_caching || num_tokens == 0 {
            return 0;
        }
        if self.groups != KvGroups::FULL {
            return self.longest_hit(block_hashes, num_tokens).0 as u32 * self.block_size;
        }
        let max_blocks = ((num_tokens - 1) / self.block_size) as usize;
        let hits = block_hashes.iter().take(max_blocks).take_while(|&&h| self.lookup(h).is_some()).count();
        hits as u32 * self.block_size
    }

    /// vLLM `allocate_slots`: makes room for the request to hold
    /// `num_tokens_need_slot` tokens, first taking the prefix-cache hits
    /// `new_computed` (from [`KvCache::find_cached_prefix`], only on a
    /// request's first scheduling), then fresh blocks from the free queue.
    /// Afterwards registers the request's full blocks covering its first
    /// `num_tokens_to_cache` tokens in the prefix index (hashes from
    /// `block_hashes`, which must cover them).
    ///
    /// Returns `false`, changing nothing, when too few blocks are free.
    #[inline]
    pub fn allocate_slots(
        &mut self,
        table: &mut BlockTable,
        num_tokens_need_slot: u32,
        new_computed: &[u32],
        block_hashes: &[u64],
        num_tokens_to_cache: u32,
    ) -> bool {
        if new_computed.is_empty() && self.holds(table, num_tokens_need_slot, num_tokens_to_cache) {
            return true;
        }
        self.take_blocks(table, num_tokens_need_slot, new_computed, block_hashes, num_tokens_to_cache)
    }

    /// Whether `table` already has slots for `num_tokens_need_slot` tokens and
    /// every full block of its first `num_tokens_to_cache` tokens is
    /// registered: then [`KvCache::allocate_slots`] without prefix hits changes
    /// nothing. This is most decode steps (a block fills every `block_size`
    /// tokens). O(1) without a division; reads neither blocks nor hashes.
    #[inline]
    pub fn holds(&self, table: &BlockTable, num_tokens_need_slot: u32, num_tokens_to_cache: u32) -> bool {
        let block = u64::from(self.block_size);
        // ⌈need / block⌉ ≤ blocks, and ⌊to_cache / block⌋ ≤ registered blocks.
        u64::from(num_tokens_need_slot) <= table.blocks.len() as u64 * block
            && (!self.prefix_caching || u64::from(num_tokens_to_cache) < (u64::from(table.num_cached) + 1) * block)
    }

    /// The most tokens `need` for which `holds(table, need, need.min(cacheable_upto))`:
    /// while a request's tokens stay within it, allocating for them changes
    /// nothing (until the table is freed or `cacheable_upto` grows).
    pub fn room_tokens(&self, table: &BlockTable, cacheable_upto: u32) -> u32 {
        let block = u64::from(self.block_size);
        let slots = table.blocks.len() as u64 * block;
        // The first token whose block would have to be registered.
        let unregistered = (u64::from(table.num_cached) + 1) * block;
        let room = if self.prefix_caching && u64::from(cacheable_upto) >= unregistered { slots.min(unregistered - 1) } else { slots };
        room.min(u64::from(u32::MAX)) as u32
    }

    /// [`KvCache::allocate_slots`] when blocks may be taken or registered.
    fn take_blocks(
        &mut self,
        table: &mut BlockTable,
        num_tokens_need_slot: u32,
        new_computed: &[u32],
        block_hashes: &[u64],
        num_tokens_to_cache: u32,
    ) -> bool {
        let groups = self.groups.count() as usize;
        debug_assert_eq!(new_computed.len() % groups, 0, "hits of every group");
        let hits = new_computed.len() / groups;
        let required = self.blocks_for(num_tokens_need_slot) as usize;
        let num_new = required.saturating_sub(table.blocks.len() + hits);
        let evictable_hits = new_computed.iter().filter(|&&b| b != NIL && self.blocks[b as usize].ref_cnt() == 0).count();
        if groups * num_new + evictable_hits > self.num_free as usize {
            return false;
        }
        if table.others.len() + 1 < groups {
            table.others.resize_with(groups - 1, Vec::new);
        }
        if table.blocks.is_empty() && hits > 0 && self.groups.sliding > 0 {
            let first_sliding = &new_computed[self.groups.full as usize * hits..][..hits];
            table.skipped = first_sliding.iter().take_while(|&&b| b == NIL).count() as u32;
        }
        // Every hit is held before any block is popped, so none is evicted.
        for group in 0..groups as u32 {
            let list = table.group_mut(group);
            list.reserve(hits + num_new);
            for &b in &new_computed[group as usize * hits..][..hits] {
                if b != NIL {
                    self.touch(b);
                }
                table.group_mut(group).push(b);
            }
        }
        for group in 0..groups as u32 {
            for _ in 0..num_new {
                let b = self.pop_free();
                table.group_mut(group).push(b);
            }
        }
        self.cache_full_blocks(table, block_hashes, num_tokens_to_cache);
        self.debug_check();
        true
    }

    /// vLLM `remove_skipped_blocks`: a request that has computed
    /// `num_computed_tokens` tokens no longer needs, in a sliding-window
    /// group, the blocks wholly before its window (positions below
    /// `num_computed_tokens − W + 1`): they are freed, last first, into the
    /// cache (still findable) and their entries become the null block. A
    /// no-op without sliding-window groups; O(1) when nothing slid out.
    ///
    /// vLLM cached every one of those blocks when it filled; BLIS holds
    /// back a request's own blocks, which only its recomputation after a
    /// preemption can hit, until that preemption (`cache_full_blocks`). By
    /// then a sliding group's have slid out, so those of them whose
    /// `block_hashes` are known (the instance computes them first, generated
    /// tokens' too: [`KvCache::slides_out_upto`]) are entered in the index
    /// here, before they are freed: the recomputation finds them as in vLLM
    /// (its hit stops short of the last token, which can move the window it
    /// needs back past the blocks held at the preemption, and an all-sliding
    /// cache's hit search scans back past a window it cannot complete, so
    /// any of them may be needed).
    #[inline]
    pub fn release_skipped(&mut self, table: &mut BlockTable, num_computed_tokens: u32, block_hashes: &[u64]) {
        let upto = self.slides_out_upto(table, num_computed_tokens);
        let from = table.skipped as usize;
        if upto <= from {
            return;
        }
        for group in self.groups.full..self.groups.count() {
            for i in (from..upto).rev() {
                let b = std::mem::replace(&mut table.group_mut(group)[i], NIL);
                debug_assert_ne!(b, NIL, "a null entry inside the window");
                if self.prefix_caching
                    && let Some(&h) = block_hashes.get(i)
                    && !self.is_hashed(b)
                {
                    self.register(b, h, group);
                }
                self.release(b);
            }
        }
        table.skipped = upto as u32;
        self.debug_check();
    }

    /// The end of the leading blocks of `table` that
    /// [`KvCache::release_skipped`] would have released once
    /// `num_computed_tokens` are computed: those before a sliding-window
    /// group's window (0 without sliding-window groups). Their hashes must
    /// be known for them to be entered in the index as they slide out.
    #[inline]
    pub fn slides_out_upto(&self, table: &BlockTable, num_computed_tokens: u32) -> usize {
        if self.groups.sliding == 0 {
            return 0;
        }
        let Some(first_needed) = (num_computed_tokens + 1).checked_sub(self.groups.window_tokens) else { return 0 };
        ((first_needed / self.block_size) as usize).min(table.blocks.len())
    }

    /// vLLM `reset_prefix_cache`: forgets every cached block's content, so
    /// nothing hits until blocks are cached again. Like vLLM, refuses (and
    /// returns `false`) while any request holds a block.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.num_used > 0 {
            return false;
        }
        self.hashed.iter_mut().for_each(|w| *w = 0);
        self.other_group.clear();
        self.index = BlockIndex::new();
        self.duplicates.clear();
        self.debug_check();
        true
    }

    /// vLLM `free`: releases the request's blocks group after group, each in
    /// reverse order, so its tail blocks are evicted before its prefix.
    /// Cached blocks stay findable.
    pub fn free(&mut self, table: &mut BlockTable) {
        for group in 0..self.groups.count() {
            for i in (0..table.blocks.len()).rev() {
                let b = table.group(group)[i];
                if b != NIL {
                    self.release(b);
                }
            }
        }
        table.clear();
        self.debug_check();
    }

    /// Drops one holder of block `b`; the last returns it to the free queue.
    fn release(&mut self, b: u32) {
        let blk = &mut self.blocks[b as usize];
        let refs = blk.ref_cnt();
        debug_assert!(refs > 0, "double free of block {b}");
        if refs > 1 {
            blk.hold(refs - 1);
        } else {
            self.num_used -= 1;
            self.push_free_tail(b);
        }
    }

    /// [`KvCache::free`], forgetting the content of the blocks no other
    /// request holds: they leave the prefix index (a `Removed` change each)
    /// and are reused like never-cached blocks.
    pub fn free_uncached(&mut self, table: &mut BlockTable) {
        for group in 0..self.groups.count() {
            for i in 0..table.blocks.len() {
                let b = table.group(group)[i];
                if b != NIL && self.blocks[b as usize].ref_cnt() == 1 && self.is_hashed(b) {
                    self.forget(b);
                }
            }
        }
        self.free(table);
    }

    /// Takes block `b`'s content out of the prefix index (a `Removed`
    /// change when it was the first group's): the oldest other block of the
    /// content, if any, is found from now on.
    fn forget(&mut self, b: u32) {
        self.set_hashed(b, false);
        let hash = self.blocks[b as usize].hash;
        let was_indexed = self.index.remove_if_points_to(hash, b);
        if !self.duplicates.is_empty() {
            self.forget_duplicate(hash, b, was_indexed);
        }
        let first_group = !self.in_other_group(b);
        self.set_other_group(b, false);
        if let (Some(c), true) = (&mut self.changes, first_group) {
            c.push(CacheChange::Removed { hash });
        }
    }

    /// [`KvCache::forget`] where some content has several blocks: the
    /// oldest other block of `b`'s content takes its place in the index, or
    /// `b` leaves the content's other blocks.
    #[cold]
    fn forget_duplicate(&mut self, key: u64, b: u32, was_indexed: bool) {
        let Some(others) = self.duplicates.get_mut(&key) else { return };
        if was_indexed {
            let next = others.remove(0);
            let blocks = &self.blocks;
            let entered = self.index.insert_if_absent(key, next, |x| blocks[x as usize].hash);
            debug_assert!(entered, "the content's key was just removed");
        } else {
            others.retain(|&x| x != b);
        }
        if others.is_empty() {
            self.duplicates.remove(&key);
        }
    }

    fn in_other_group(&self, b: u32) -> bool {
        self.other_group.get(b as usize / 64).is_some_and(|w| w >> (b % 64) & 1 == 1)
    }

    fn set_other_group(&mut self, b: u32, on: bool) {
        if self.groups.count() == 1 {
            return;
        }
        let word = b as usize / 64;
        if self.other_group.len() <= word {
            self.other_group.resize(word + 1, 0);
        }
        let bit = 1 << (b % 64);
        if on { self.other_group[word] |= bit } else { self.other_group[word] &= !bit }
    }

    /// vLLM `cache_full_blocks`: registers the request's full blocks covering
    /// its first `num_tokens` tokens in the prefix index, in every group
    /// (hashes from `block_hashes`, which must cover them). Blocks already
    /// registered, and null entries, are skipped. No-op without prefix
    /// caching.
    pub fn cache_full_blocks(&mut self, table: &mut BlockTable, block_hashes: &[u64], num_tokens: u32) {
        if !self.prefix_caching {
            return;
        }
        let num_full = ((num_tokens / self.block_size) as usize).min(table.blocks.len()).min(block_hashes.len());
        let start = (table.num_cached as usize).min(num_full);
        for group in 0..self.groups.count() {
            for index in start..num_full {
                let b = table.group(group)[index];
                if b == NIL || self.is_hashed(b) {
                    continue;
                }
                self.register(b, block_hashes[index], group);
                if group == 0
                    && let Some(c) = &mut self.changes
                {
                    c.push(CacheChange::Stored {
                        hash: block_hashes[index],
                        parent: index.checked_sub(1).map(|p| block_hashes[p]),
                        index: index as u32,
                    });
                }
            }
        }
        table.num_cached = table.num_cached.max(num_full as u32);
    }

    /// Enters block `b` of `group`, whose tokens hash to `hash`, in the
    /// prefix index. When another block already holds that content (two
    /// requests computed the same prefix at once, or a recomputation met
    /// its own old blocks), that one is still the one found and `b` waits
    /// behind it ([`KvCache::duplicates`]), as vLLM keeps every cached copy.
    fn register(&mut self, b: u32, hash: u64, group: u32) {
        let key = group_key(hash, group);
        self.blocks[b as usize].hash = key;
        let blocks = &self.blocks;
        if !self.index.insert_if_absent(key, b, |x| blocks[x as usize].hash) {
            self.duplicates.entry(key).or_default().push(b);
        }
        self.set_hashed(b, true);
        if group > 0 {
            self.set_other_group(b, true);
        }
    }

    fn is_hashed(&self, b: u32) -> bool {
        self.hashed[b as usize / 64] >> (b % 64) & 1 == 1
    }

    fn set_hashed(&mut self, b: u32, on: bool) {
        let (word, bit) = (&mut self.hashed[b as usize / 64], 1 << (b % 64));
        if on { *word |= bit } else { *word &= !bit }
    }

    fn touch(&mut self, b: u32) {
        let refs = self.blocks[b as usize].ref_cnt();
        if refs == 0 {
            self.unlink_free(b);
            self.num_used += 1;
        }
        self.blocks[b as usize].hold(refs + 1);
    }

    fn pop_free(&mut self) -> u32 {
        let fresh = self.blocks.len() as u32;
        if fresh < self.usable {
            // The head of the queue is the next never-used block.
            if fresh.is_multiple_of(64) {
                self.hashed.push(0);
            }
            let mut block = Block { hash: 0, prev: NIL, next: NIL };
            block.hold(1);
            self.blocks.push(block);
            self.num_free -= 1;
            self.num_used += 1;
            return fresh;
        }
        let b = self.free_head;
        debug_assert_ne!(b, NIL, "pop from an empty free queue");
        self.unlink_free(b);
        // Evict: the block's old content is no longer findable (one probe).
        if self.is_hashed(b) {
            self.forget(b);
        }
        self.blocks[b as usize].hold(1);
        self.num_used += 1;
        self.prefetch_next_eviction();
        b
    }

    /// Hides the two dependent cache misses of the next eviction (the
    /// block's line, then its index slot): the new head's line was
    /// requested by the previous pop, so its hash is read now to request
    /// its index slot, and the line of the block after it is requested.
    /// Pops are spread across a step's requests, so the lines arrive in
    /// time. A hint only: nothing depends on it.
    fn prefetch_next_eviction(&self) {
        let head = self.free_head;
        if head == NIL {
            return;
        }
        let blk = &self.blocks[head as usize];
        if self.is_hashed(head) {
            self.index.prefetch(blk.hash);
        }
        if blk.next != NIL {
            prefetch(&self.blocks[blk.next as usize]);
        }
    }

    /// Takes free block `b` out of the free queue; the caller then holds it.
    fn unlink_free(&mut self, b: u32) {
        let (prev, next) = {
            let blk = &self.blocks[b as usize];
            (blk.prev, blk.next)
        };
        if prev == NIL {
            self.free_head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.free_tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        self.num_free -= 1;
    }

    fn push_free_tail(&mut self, b: u32) {
        let tail = self.free_tail;
        {
            let blk = &mut self.blocks[b as usize];
            blk.prev = tail;
            blk.next = NIL;
        }
        if tail == NIL {
            self.free_head = b;
        } else {
            self.blocks[tail as usize].next = b;
        }
        self.free_tail = b;
        self.num_free += 1;
    }

    fn debug_check(&self) {
        debug_assert_eq!(self.num_used + self.num_free, self.usable_blocks(), "KV conservation violated");
    }

    /// Blocks registered under a content hash (held or free), each copy of
    /// a content counted. O(blocks); for tests.
    pub fn hashed_blocks(&self) -> u64 {
        self.hashed.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Checks one request's table, for tests: every group's list as long as
    /// the first, full-attention entries all blocks, a sliding-window
    /// group's entries the null block exactly before its window, every
    /// block held. Returns the blocks it holds.
    pub fn assert_table(&self, table: &BlockTable) -> u64 {
        if table.blocks.is_empty() {
            assert!(table.others.iter().all(Vec::is_empty) && table.num_cached == 0, "an empty table with entries");
            return 0;
        }
        assert_eq!(table.others.len() + 1, self.groups.count() as usize, "a table of another number of groups");
        let mut held = 0;
        for group in 0..self.groups.count() {
            let list = table.group(group);
            assert_eq!(list.len(), table.blocks.len(), "group {group}'s list is not as long as the first");
            for (i, &b) in list.iter().enumerate() {
                let skipped = group >= self.groups.full && i < table.skipped as usize;
                assert_eq!(b == NIL, skipped, "group {group} entry {i}: null exactly before the window ({} skipped)", table.skipped);
                if b != NIL {
                    assert!(self.blocks[b as usize].ref_cnt() > 0, "group {group} entry {i}: block {b} is free");
                    held += 1;
                }
            }
        }
        held
    }

    /// Σ of the blocks' reference counts: the entries of every table
    /// holding them. O(blocks); for tests.
    pub fn total_refs(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.ref_cnt())).sum()
    }

    /// Full O(blocks) consistency check, for tests: conservation, the free
    /// list holds exactly the unreferenced blocks in a well-formed chain, and
    /// the prefix index only points at blocks carrying the indexed hash.
    pub fn assert_consistent(&self) {
        assert_eq!(self.num_used + self.num_free, self.usable_blocks(), "used + free != usable");
        let fresh = self.usable - self.blocks.len() as u32;
        let mut on_list = vec![false; self.blocks.len()];
        let (mut cur, mut prev, mut n) = (self.free_head, NIL, 0u32);
        while cur != NIL {
            let blk = &self.blocks[cur as usize];
            assert_ne!(blk.next, HELD, "held block {cur} on the free list");
            assert_eq!(blk.prev, prev, "broken back link at block {cur}");
            assert!(!on_list[cur as usize], "cycle in the free list");
            on_list[cur as usize] = true;
            prev = cur;
            cur = blk.next;
            n += 1;
        }
        assert_eq!(prev, self.free_tail, "free tail mismatch");
        assert_eq!(n + fresh, self.num_free, "free list length + fresh blocks != free count");
        let unreferenced = self.blocks.iter().filter(|b| b.ref_cnt() == 0).count() as u32;
        assert_eq!(unreferenced, n, "unreferenced blocks missing from the free list");
        assert!(self.hashed.len() * 64 >= self.blocks.len(), "hash bitset shorter than the materialised blocks");
        let mut indexed = 0;
        for b in self.index.blocks() {
            assert!(self.is_hashed(b), "index entry for block {b}, which holds no hash");
            assert_eq!(self.lookup(self.blocks[b as usize].hash), Some(b), "index entry for block {b} is stale or duplicated");
            indexed += 1;
        }
        assert_eq!(indexed, self.index.len(), "index length mismatch");
        let mut waiting = 0;
        for (&key, others) in &self.duplicates {
            assert!(!others.is_empty(), "an empty list of other blocks for {key:#x}");
            let found = self.lookup(key);
            assert!(
                found.is_some_and(|f| !others.contains(&f)),
                "other blocks of {key:#x}, which the index does not find in a block of its own"
            );
            for &b in others {
                assert!(self.is_hashed(b) && self.blocks[b as usize].hash == key, "block {b} waits behind {key:#x} without that content");
            }
            waiting += others.len();
        }
        let hashed: u32 = self.hashed.iter().map(|w| w.count_ones()).sum();
        assert_eq!(hashed as usize, indexed + waiting, "blocks holding a hash != indexed blocks + blocks waiting behind one");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(n: u64) -> Vec<u64> {
        (1..=n).map(|i| i * 1000).collect()
    }

    proptest::proptest! {
        /// Allocating up to the room changes nothing (`holds`), and one
        /// token more would.
        #[test]
        fn room_is_exactly_where_holding_ends(
            block_size in proptest::sample::select(vec![1u32, 4, 16]),
            blocks in 0usize..20,
            cached in 0u32..20,
            cacheable_upto in 0u32..400,
            prefix_caching: bool,
        ) {
            let kv = KvCache::new(64, block_size, prefix_caching).unwrap();
            let table = BlockTable { blocks: vec![1; blocks], num_cached: cached.min(blocks as u32), ..BlockTable::default() };
            let room = kv.room_tokens(&table, cacheable_upto);
            for need in [0, room / 2, room.saturating_sub(1), room] {
                proptest::prop_assert!(kv.holds(&table, need, need.min(cacheable_upto)), "need {} within room {}", need, room);
            }
            proptest::prop_assert!(!kv.holds(&table, room + 1, (room + 1).min(cacheable_upto)), "room {} is not all", room);
        }
    }

    #[test]
    fn allocate_free_and_hit() {
        let mut kv = KvCache::new(11, 16, true).unwrap();
        assert_eq!(kv.usable_blocks(), 10);
        let h = hashes(4);
        let mut a = BlockTable::default();
        let mut hits = Vec::new();
        assert_eq!(kv.find_cached_prefix(&h, 64, &mut hits), 0);
        assert!(kv.allocate_slots(&mut a, 64, &hits, &h, 64));
        assert_eq!(kv.num_used_blocks(), 4);
        kv.free(&mut a);
        assert_eq!(kv.num_free_blocks(), 10);
        kv.assert_consistent();
        // Same 64-token prompt: hit capped at 63 tokens → 3 full blocks.
        assert_eq!(kv.find_cached_prefix(&h, 64, &mut hits), 48);
        assert_eq!(kv.cached_prefix_tokens(&h, 64), 48);
        assert_eq!(kv.cached_prefix_tokens(&h[..1], 64), 16);
        let mut b = BlockTable::default();
        assert!(kv.allocate_slots(&mut b, 64, &hits.clone(), &h, 64));
        assert_eq!(b.blocks[..3], a_blocks_after_reuse(&kv, &h)[..3]);
        kv.assert_consistent();
    }

    fn a_blocks_after_reuse(kv: &KvCache, h: &[u64]) -> Vec<u32> {
        h.iter().filter_map(|&x| kv.lookup(x)).collect()
    }

    /// Two requests that computed the same blocks at once hold two copies
    /// of each; a hit takes the first, and when the first is evicted the
    /// second is found (vLLM keeps every cached copy). Each copy is a
    /// `Stored` change and each eviction a `Removed` one, as vLLM reports
    /// them.
    #[test]
    fn a_content_two_blocks_hold_is_found_until_both_are_evicted() {
        let mut kv = KvCache::new(6, 1, true).unwrap(); // 5 usable one-token blocks
        kv.record_changes();
        let h = [7, 8];
        let (mut a, mut b) = (BlockTable::default(), BlockTable::default());
        assert!(kv.allocate_slots(&mut a, 2, &[], &h, 2));
        assert!(kv.allocate_slots(&mut b, 2, &[], &h, 2));
        assert_eq!((kv.hashed_blocks(), kv.cached_block(7)), (4, Some(a.blocks[0])));
        kv.assert_consistent();
        let b_blocks = b.blocks.clone();
        // a's copies are freed first, so evicted first: then b's are found.
        kv.free(&mut a);
        kv.free(&mut b);
        let mut c = BlockTable::default();
        assert!(kv.allocate_slots(&mut c, 3, &[], &[], 0), "takes the never-used block and a's two");
        assert_eq!((kv.hashed_blocks(), kv.cached_block(7), kv.cached_block(8)), (2, Some(b_blocks[0]), Some(b_blocks[1])));
        assert_eq!(kv.cached_prefix_tokens(&[7, 8, 9], 3), 2, "b's copies still hit");
        kv.assert_consistent();
        let mut changes = Vec::new();
        kv.take_changes(&mut changes);
        let stored = changes.iter().filter(|c| matches!(c, CacheChange::Stored { .. })).count();
        let removed = changes.iter().filter(|c| matches!(c, CacheChange::Removed { .. })).count();
        assert_eq!((stored, removed), (4, 2));
    }

    #[test]
    fn allocation_fails_atomically_when_full() {
        let mut kv = KvCache::new(5, 16, false).unwrap();
        let mut a = BlockTable::default();
        assert!(kv.allocate_slots(&mut a, 48, &[], &[], 48));
        let mut b = BlockTable::default();
        assert!(!kv.allocate_slots(&mut b, 32, &[], &[], 32));
        assert!(b.blocks.is_empty());
        assert_eq!(kv.num_free_blocks(), 1);
        kv.assert_consistent();
    }

    #[test]
    fn lru_evicts_oldest_free_block_first() {
        let mut kv = KvCache::new(4, 1, true).unwrap(); // 3 usable one-token blocks
        let mut t = BlockTable::default();
        let mut hits = Vec::new();
        assert!(kv.allocate_slots(&mut t, 3, &[], &[7, 8, 9], 3));
        kv.free(&mut t); // reverse order: free queue = [blk(9), blk(8), blk(7)]
        // A new 1-token request evicts the block holding hash 9 (the tail of the old request).
        let mut u = BlockTable::default();
        assert!(kv.allocate_slots(&mut u, 1, &[], &[], 0));
        assert_eq!(kv.find_cached_prefix(&[7, 8, 9], 4, &mut hits), 2);
        assert_eq!(kv.find_cached_prefix(&[9], 2, &mut hits), 0);
        kv.assert_consistent();
    }

    /// The queue order of vLLM's eager list: never-used blocks first, in id
    /// order, then freed blocks in the order they were freed.
    #[test]
    fn fresh_blocks_come_before_freed_ones_in_id_order() {
        let mut kv = KvCache::new(7, 1, false).unwrap(); // 6 usable one-token blocks
        let (mut a, mut b, mut c) = (BlockTable::default(), BlockTable::default(), BlockTable::default());
        assert!(kv.allocate_slots(&mut a, 2, &[], &[], 0));
        assert!(kv.allocate_slots(&mut b, 1, &[], &[], 0));
        assert_eq!((a.blocks.as_slice(), b.blocks.as_slice()), ([0, 1].as_slice(), [2].as_slice()));
        kv.free(&mut a); // queue: fresh 3, 4, 5, then 1, 0 (reverse order)
        kv.assert_consistent();
        assert!(kv.allocate_slots(&mut c, 5, &[], &[], 0));
        assert_eq!(c.blocks, [3, 4, 5, 1, 0]);
        assert_eq!(kv.num_free_blocks(), 0);
        kv.assert_consistent();
    }

    /// Memory follows use: a four-billion-block cache costs what its used
    /// blocks cost.
    #[test]
    fn a_huge_cache_materialises_only_the_blocks_it_uses() {
        let mut kv = KvCache::new(4_000_000_000, 1, true).unwrap();
        let mut t = BlockTable::default();
        assert!(kv.allocate_slots(&mut t, 100, &[], &(1..=100).collect::<Vec<u64>>(), 100));
        assert_eq!(kv.blocks.len(), 100);
        assert_eq!(kv.num_free_blocks(), 3_999_999_899);
        kv.free(&mut t);
        kv.assert_consistent();
    }

    /// vLLM's reset_prefix_cache: refused while a request holds blocks;
    /// afterwards nothing hits and the free blocks are reused as fresh.
    #[test]
    fn a_prefix_cache_reset_forgets_every_block_once_none_is_held() {
        let mut kv = KvCache::new(11, 16, true).unwrap();
        let h = hashes(4);
        let mut a = BlockTable::default();
        assert!(kv.allocate_slots(&mut a, 64, &[], &h, 64));
        assert!(!kv.reset_prefix_cache(), "blocks are held");
        kv.free(&mut a);
        assert_eq!(kv.cached_prefix_tokens(&h, 64), 48);
        assert!(kv.reset_prefix_cache());
        assert_eq!((kv.cached_prefix_tokens(&h, 64), kv.hashed_blocks()), (0, 0));
        assert!(kv.allocate_slots(&mut a, 64, &[], &h, 64));
        kv.assert_consistent();
    }

    /// gpt-oss's shape: one full-attention and one sliding-window group, a
    /// window of 33 tokens (a hit must end with ⌈32 / 16⌉ = 2 sliding blocks).
    fn hybrid(blocks: u64) -> KvCache {
        KvCache::grouped(blocks, 16, true, KvGroups { full: 1, sliding: 1, window_tokens: 33 }).unwrap()
    }

    /// A request takes a block per 16 tokens in every group; once its
    /// tokens are computed the sliding-window group frees the blocks before
    /// the window, which stay findable.
    #[test]
    fn a_sliding_window_group_frees_what_slid_out() {
        let mut kv = hybrid(41); // 40 usable
        let h = hashes(10);
        let mut a = BlockTable::default();
        assert!(kv.allocate_slots(&mut a, 160, &[], &h, 160));
        assert_eq!(kv.num_used_blocks(), 20, "10 blocks in each group");
        assert_eq!(kv.assert_table(&a), 20);
        // 160 computed: positions from 128 on are in the window, blocks 0–7 are not.
        kv.release_skipped(&mut a, 160, &[]);
        assert_eq!((kv.num_used_blocks(), kv.assert_table(&a)), (12, 12));
        assert_eq!(a.others[0][..8], [NIL; 8]);
        kv.release_skipped(&mut a, 160, &[]); // idempotent
        assert_eq!(kv.num_used_blocks(), 12);
        // Growing by one block: one more in each group.
        assert!(kv.allocate_slots(&mut a, 161, &[], &h, 160));
        assert_eq!(kv.num_used_blocks(), 14);
        kv.free(&mut a);
        assert_eq!(kv.num_used_blocks(), 0);
        kv.assert_consistent();
        // The same prompt hits 9 blocks (the 10th holds its last token):
        // every full-attention block, and the window's two before the cut.
        let mut hits = Vec::new();
        assert_eq!(kv.find_cached_prefix(&h, 160, &mut hits), 144);
        assert_eq!(kv.cached_prefix_tokens(&h, 160), 144);
        assert_eq!(hits.len(), 18);
        assert!(hits[..9].iter().all(|&b| b != NIL));
        assert_eq!(hits[9..16], [NIL; 7]);
        assert!(hits[16..].iter().all(|&b| b != NIL));
        let mut b = BlockTable::default();
        assert!(kv.allocate_slots(&mut b, 160, &hits, &h, 160));
        assert_eq!((b.skipped, kv.num_used_blocks(), kv.assert_table(&b)), (7, 10 + 3, 13));
        assert_eq!(kv.total_refs(), 13);
        kv.free(&mut b);
        kv.assert_consistent();
    }

    /// A request's own blocks (allocated but not cached: only its own
    /// recomputation can hit them) that slide out of the window are cached
    /// as they are freed, as vLLM cached them when they filled. Once the
    /// request is preempted and its window cached, the recomputation hits
    /// up to its last full block, as it does when every block was cached
    /// on allocation; without the hashes at release, only the shared head.
    #[test]
    fn own_blocks_that_slide_out_stay_findable_for_the_recomputation() {
        let h = hashes(10);
        let run = |cache_at_allocation: u32, hashes_at_release: &[u64]| {
            let mut kv = hybrid(41);
            let mut a = BlockTable::default();
            assert!(kv.allocate_slots(&mut a, 160, &[], &h, cache_at_allocation));
            kv.release_skipped(&mut a, 160, hashes_at_release);
            kv.cache_full_blocks(&mut a, &h, 160); // the preemption caches what it still holds
            kv.free(&mut a);
            kv.assert_consistent();
            kv.cached_prefix_tokens(&h, 160)
        };
        let every_block_cached = run(160, &[]);
        assert_eq!(every_block_cached, 144);
        assert_eq!(run(32, &h), every_block_cached, "own blocks cached as they slid out");
        assert_eq!(run(32, &[]), 32, "without them the sliding group's window before the cut is gone");
    }

    /// The full-attention groups bound the hit; within it the
    /// sliding-window groups need the window's blocks before the cut, else
    /// the hit falls back to the last place where they have them.
    #[test]
    fn a_hybrid_hit_needs_the_window_before_its_end() {
        let mut kv = hybrid(100);
        let h = hashes(10);
        let mut a = BlockTable::default();
        assert!(kv.allocate_slots(&mut a, 160, &[], &h, 160));
        // Drop the sliding group's blocks 6 and 7 from the index, as if evicted.
        for i in [6, 7] {
            let b = a.others[0][i];
            kv.forget(b);
        }
        let mut hits = Vec::new();
        // The full group holds 9 blocks; the sliding group's last two-block
        // run before block 9 ends at 6 (blocks 4, 5).
        assert_eq!(kv.find_cached_prefix(&h, 160, &mut hits), 96);
        assert_eq!(hits[6..][..4], [NIL; 4]);
        // A prompt of three blocks: its two hit blocks are a full window.
        assert_eq!(kv.cached_prefix_tokens(&h[..3], 48), 32);
        // Without the first block in the sliding group there is no run at all.
        let first = a.others[0][0];
        kv.forget(first);
        assert_eq!(kv.cached_prefix_tokens(&h[..2], 32), 0, "a one-block run that is not a window, not from the start");
        kv.free(&mut a);
        kv.assert_consistent();
    }

    /// Hits and new blocks are taken for every group or none: a request
    /// whose groups do not all fit takes nothing.
    #[test]
    fn hybrid_allocation_is_all_or_nothing() {
        let mut kv = hybrid(12); // 11 usable
        let mut a = BlockTable::default();
        assert!(!kv.allocate_slots(&mut a, 96, &[], &[], 0), "6 blocks in each group is 12");
        assert_eq!((kv.num_used_blocks(), a.blocks.len()), (0, 0));
        assert!(kv.allocate_slots(&mut a, 80, &[], &[], 0));
        assert_eq!(kv.num_free_blocks(), 1);
        kv.free(&mut a);
        kv.assert_consistent();
    }

    proptest::proptest! {
        /// The hybrid hit against a brute force: the full-attention groups'
        /// leading run, then the latest end n within it such that the
        /// sliding-window groups hold all of [n − window blocks, n), else
        /// their run from the start; every group's blocks from random
        /// requests, evictions and forgotten blocks.
        #[test]
        fn hybrid_hits_match_a_brute_force(
            full in 0u32..3, sliding in 1u32..3, window in 2u32..80, blocks in 8u64..60,
            ops in proptest::collection::vec((0u64..4, 1u32..12, 0u8..3), 1..30),
        ) {
            let block = 8;
            let mut kv = KvCache::grouped(blocks, block, true, KvGroups { full, sliding, window_tokens: window }).unwrap();
            // Four prompts that share their first blocks in pairs.
            let prompt = |p: u64| -> Vec<u64> { (0..12u64).map(|i| if i < 4 { 100 + p / 2 * 10 + i } else { 1000 * (p + 1) + i }).collect() };
            let mut live: Vec<BlockTable> = Vec::new();
            for (p, len, action) in ops {
                let h = prompt(p);
                match action {
                    0 if !live.is_empty() => { let mut t = live.remove(0); kv.free(&mut t); }
                    1 if !live.is_empty() => {
                        let t = &live[0];
                        if let Some(&b) = t.group(full + sliding - 1).iter().rev().find(|&&b| b != NIL) && kv.is_hashed(b) { kv.forget(b); }
                    }
                    _ => {
                        let mut hits = Vec::new();
                        kv.find_cached_prefix(&h, len * block, &mut hits);
                        let mut t = BlockTable::default();
                        if kv.allocate_slots(&mut t, len * block, &hits, &h, len * block) {
                            kv.release_skipped(&mut t, len * block, &[]);
                            live.push(t);
                        }
                    }
                }
                kv.assert_consistent();
                for q in 0..4 {
                    let h = prompt(q);
                    for len in 1..=12u32 {
                        let held = |i: usize, groups: std::ops::Range<u32>| groups.into_iter().all(|g| kv.lookup(group_key(h[i], g)).is_some());
                        let max_blocks = ((len * block - 1) / block) as usize;
                        let full_len = (0..max_blocks).take_while(|&i| held(i, 0..full)).count();
                        let need = (window - 1).div_ceil(block) as usize;
                        let sliding_groups = full..full + sliding;
                        let ends_window = |n: usize| (n - need..n).all(|i| held(i, sliding_groups.clone()));
                        let (want, first_live) = match (need..=full_len).rev().find(|&n| ends_window(n)) {
                            Some(n) => (n, n - need),
                            None => ((0..full_len).take_while(|&i| held(i, sliding_groups.clone())).count(), 0),
                        };
                        proptest::prop_assert_eq!(kv.cached_prefix_tokens(&h, len * block), want as u32 * block, "prompt {} of {} blocks", q, len);
                        // The hit blocks: each group's, null before the window in the sliding ones.
                        let mut hits = Vec::new();
                        kv.find_cached_prefix(&h, len * block, &mut hits);
                        let expected: Vec<u32> = (0..full + sliding)
                            .flat_map(|g| (0..want).map(move |i| (g, i)))
                            .map(|(g, i)| if g >= full && i < first_live { NIL } else { kv.lookup(group_key(h[i], g)).unwrap() })
                            .collect();
                        proptest::prop_assert_eq!(hits, expected);
                    }
                }
            }
            for mut t in live { kv.free(&mut t); }
            proptest::prop_assert_eq!(kv.num_used_blocks(), 0);
        }
    }

    #[test]
    fn peak_blocks_bound_what_a_request_holds() {
        let g = KvGroups { full: 1, sliding: 2, window_tokens: 128 };
        // 10 000 tokens in 2 048-token chunks: 625 full blocks, ⌈2175 / 16⌉ + 1 = 137 per window group.
        assert_eq!(g.peak_blocks(10_000, 2048, 16), 625 + 2 * 137);
        assert_eq!(g.peak_blocks(100, 2048, 16), 3 * 7, "a short request holds all its blocks everywhere");
        assert_eq!(KvGroups::FULL.peak_blocks(100, 2048, 16), 7);
        assert_eq!(g.longest_request(625 + 2 * 137, 2048, 16), 10_000);
        assert_eq!(KvGroups::FULL.longest_request(10, 512, 16), 160);
    }

    #[test]
    fn bad_geometry_is_rejected() {
        let bad = KvGroups { full: 1, sliding: 1, window_tokens: 0 };
        assert_eq!(KvCache::grouped(10, 16, true, bad).err(), Some(KvConfigError::Groups(bad)));
        assert!(KvCache::grouped(10, 16, true, KvGroups { full: 0, sliding: 0, window_tokens: 4 }).is_err());
        assert_eq!(KvCache::new(10, 0, true).err(), Some(KvConfigError::ZeroBlockSize));
        assert_eq!(KvCache::new(1, 16, true).err(), Some(KvConfigError::TooFewBlocks(1)));
    }
}
