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
mod tier_pool;
pub mod transfer;
pub mod offload;

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

/// Invalid cache geometry.
#[derive(Debug, Error, PartialEq)]
pub enum KvConfigError {
    /// Block size of zero.
    #[error("block size must be at least 1 token")]
    ZeroBlockSize,
    /// Fewer than two blocks (one is the reserved null block).
    #[error("the KV cache needs at least 2 blocks (one is reserved), got {0}")]
    TooFewBlocks(u64),
    /// More blocks than can be indexed.
    #[error("at most {max} KV blocks are supported, got {got}", max = u32::MAX - 1)]
    TooManyBlocks {
        /// The requested count.
        got: u64,
    },
}

/// A request's block table: the blocks holding its tokens, in order.
#[derive(Clone, Debug, Default)]
pub struct BlockTable {
    /// Block ids, one per `block_size` tokens.
    pub blocks: Vec<u32>,
    /// How many leading blocks are registered in the prefix-cache index.
    pub num_cached: u32,
}

impl BlockTable {
    /// Empties the table, keeping its allocation.
    fn clear(&mut self) {
        self.blocks.clear();
        self.num_cached = 0;
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
    block_size: u32,
    prefix_caching: bool,
    /// Changes to the prefix index since the last [`KvCache::take_changes`],
    /// when recording ([`KvCache::record_changes`]).
    changes: Option<Vec<CacheChange>>,
}

impl KvCache {
    /// A cache of `num_gpu_blocks` blocks of `block_size` tokens, all free.
    pub fn new(num_gpu_blocks: u64, block_size: u32, prefix_caching: bool) -> Result<KvCache, KvConfigError> {
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
            block_size,
            prefix_caching,
            changes: None,
        })
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
    /// tokens is left to compute. Pushes the hit blocks onto `out` and returns
    /// the number of hit tokens. Returns 0 when prefix caching is off.
    pub fn find_cached_prefix(&self, block_hashes: &[u64], num_tokens: u32, out: &mut Vec<u32>) -> u32 {
        out.clear();
        if !self.prefix_caching || num_tokens == 0 {
            return 0;
        }
        let max_blocks = ((num_tokens - 1) / self.block_size) as usize;
        for &h in block_hashes.iter().take(max_blocks) {
            match self.lookup(h) {
                Some(b) => out.push(b),
                None => break,
            }
        }
        out.len() as u32 * self.block_size
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

    /// [`KvCache::allocate_slots`] when blocks may be taken or registered.
    fn take_blocks(&mut self, table: &mut BlockTable, num_tokens_need_slot: u32, new_computed: &[u32], block_hashes: &[u64], num_tokens_to_cache: u32) -> bool {
        let required = self.blocks_for(num_tokens_need_slot) as usize;
        let have = table.blocks.len() + new_computed.len();
        let num_new = required.saturating_sub(have);
        let evictable_hits = new_computed.iter().filter(|&&b| self.blocks[b as usize].ref_cnt() == 0).count();
        if num_new + evictable_hits > self.num_free as usize {
            return false;
        }
        table.blocks.reserve(new_computed.len() + num_new);
        for &b in new_computed {
            self.touch(b);
            table.blocks.push(b);
        }
        for _ in 0..num_new {
            let b = self.pop_free();
            table.blocks.push(b);
        }
        self.cache_full_blocks(table, block_hashes, num_tokens_to_cache);
        self.debug_check();
        true
    }

    /// vLLM `reset_prefix_cache`: forgets every cached block's content, so
    /// nothing hits until blocks are cached again. Like vLLM, refuses (and
    /// returns `false`) while any request holds a block.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.num_used > 0 {
            return false;
        }
        self.hashed.iter_mut().for_each(|w| *w = 0);
        self.index = BlockIndex::new();
        self.debug_check();
        true
    }

    /// vLLM `free`: releases the request's blocks in reverse order, so its
    /// tail blocks are evicted before its prefix. Cached blocks stay findable.
    pub fn free(&mut self, table: &mut BlockTable) {
        for i in (0..table.blocks.len()).rev() {
            let b = table.blocks[i];
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
        table.clear();
        self.debug_check();
    }

    /// [`KvCache::free`], forgetting the content of the blocks no other
    /// request holds: they leave the prefix index (a `Removed` change each)
    /// and are reused like never-cached blocks.
    pub fn free_uncached(&mut self, table: &mut BlockTable) {
        for &b in &table.blocks {
            if self.blocks[b as usize].ref_cnt() == 1 && self.is_hashed(b) {
                self.set_hashed(b, false);
                let hash = self.blocks[b as usize].hash;
                self.index.remove_if_points_to(hash, b);
                if let Some(c) = &mut self.changes {
                    c.push(CacheChange::Removed { hash });
                }
            }
        }
        self.free(table);
    }

    /// vLLM `cache_full_blocks`: registers the request's full blocks covering
    /// its first `num_tokens` tokens in the prefix index (hashes from
    /// `block_hashes`, which must cover them). Blocks already registered are
    /// skipped. No-op without prefix caching.
    pub fn cache_full_blocks(&mut self, table: &mut BlockTable, block_hashes: &[u64], num_tokens: u32) {
        if !self.prefix_caching {
            return;
        }
        let num_full = ((num_tokens / self.block_size) as usize).min(table.blocks.len()).min(block_hashes.len());
        let start = (table.num_cached as usize).min(num_full);
        for (i, (&b, &h)) in table.blocks[start..num_full].iter().zip(&block_hashes[start..num_full]).enumerate() {
            if !self.is_hashed(b) {
                self.blocks[b as usize].hash = h;
                let blocks = &self.blocks;
                // A block whose content another block already registered
                // (two requests computed the same prefix at once) stays
                // unregistered: the index holds one block per content, and
                // the KV events describe the index.
                if !self.index.insert_if_absent(h, b, |x| blocks[x as usize].hash) {
                    continue;
                }
                self.set_hashed(b, true);
                if let Some(c) = &mut self.changes {
                    let index = start + i;
                    c.push(CacheChange::Stored { hash: h, parent: index.checked_sub(1).map(|p| block_hashes[p]), index: index as u32 });
                }
            }
        }
        table.num_cached = table.num_cached.max(num_full as u32);
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
            self.set_hashed(b, false);
            let hash = self.blocks[b as usize].hash;
            self.index.remove_if_points_to(hash, b);
            if let Some(c) = &mut self.changes {
                c.push(CacheChange::Removed { hash });
            }
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

    /// Blocks registered under a content hash (held or free); one per
    /// content. O(blocks); for tests.
    pub fn hashed_blocks(&self) -> u64 {
        self.hashed.iter().map(|w| u64::from(w.count_ones())).sum()
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(n: u64) -> Vec<u64> {
        (1..=n).map(|i| i * 1000).collect()
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

    #[test]
    fn bad_geometry_is_rejected() {
        assert_eq!(KvCache::new(10, 0, true).err(), Some(KvConfigError::ZeroBlockSize));
        assert_eq!(KvCache::new(1, 16, true).err(), Some(KvConfigError::TooFewBlocks(1)));
    }
}
