//! The router-side prefix index: which prompt blocks the router has sent to
//! which instance (what llm-d's prefix-cache scorer keeps), as a bounded LRU
//! set of block hashes per instance.
//!
//! It is the router's *belief* about the instances' caches, built only from
//! its own routing decisions: it never looks inside an instance, so it can be
//! wrong (the instance may have evicted the blocks). The `precise-prefix`
//! scorer reads the instances' true caches instead.
//!
//! **Semantics.** Per instance: recording a prompt touches its blocks last
//! to first (a block touched becomes the most recently used; a new block
//! enters, evicting the least recently used one when `capacity` blocks are
//! remembered); a lookup counts the prompt's leading blocks that are
//! remembered, up to the first that is not.
//!
//! **Representation.** Block hashes are chained (a block's hash covers every
//! token before it, so equal hashes mean equal prefixes), and a record
//! touches a prompt's blocks last to first, so a block is always more recent
//! than the blocks after it in any prompt. Hence the remembered set is
//! prefix-closed, and the LRU order is a sequence of *runs*: a record makes
//! its whole prompt the newest run; the blocks it shares with older runs are
//! a leading part of each run it passes through, which those runs lose;
//! eviction takes the last block of the oldest run. Runs never move, so the
//! LRU order of runs is their creation order: a FIFO of runs whose hashes
//! lie in one append-only buffer (compacted when half of it is garbage), and
//! a small map from each run's first hash to the run.
//!
//! **Cost.** A lookup or a record makes one map probe per run it passes
//! through (plus one for the first block not remembered) and compares the
//! other blocks sequentially against the buffer; a record appends the prompt's
//! hashes and evicts whole runs or run tails, O(1) each. The map holds one
//! entry per run, not per block. Memory: at most `2 · capacity + 64` plus
//! one prompt's hashes per instance; nothing allocates once the buffers have
//! grown.

use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

/// Garbage the hash buffer may hold beyond its live hashes before compaction.
const COMPACT_SLACK: usize = 64;

/// Consecutive blocks of one recorded prompt, `store[at .. at + len]`, the
/// first being the most recently used.
#[derive(Copy, Clone, Debug)]
struct Run {
    at: usize,
    len: u32,
    // Neighbours in the FIFO (older, newer).
    prev: u32,
    next: u32,
}

/// One instance's remembered blocks: an LRU set of fixed capacity, as runs.
#[derive(Clone, Debug)]
struct Runs {
    /// First hash of each run → its slot in `runs`.
    starts: FxHashMap<u64, u32>,
    /// Slab of runs; free slots are listed in `free`.
    runs: Vec<Run>,
    free: Vec<u32>,
    /// Oldest and newest run.
    head: u32,
    tail: u32,
    /// Hashes of the runs, in creation order, with garbage between them.
    store: Vec<u64>,
    /// Remembered blocks: Σ run lengths.
    blocks: u32,
    capacity: u32,
}

/// Length of the common prefix of two hash sequences.
fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Runs {
    fn new(capacity: u32) -> Runs {
        Runs {
            starts: FxHashMap::default(),
            runs: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            store: Vec::new(),
            blocks: 0,
            capacity: capacity.max(1),
        }
    }

    fn hashes(&self, r: u32) -> &[u64] {
        let run = &self.runs[r as usize];
        &self.store[run.at..run.at + run.len as usize]
    }

    /// Leading blocks of `hashes` that are remembered. A remembered block
    /// either continues the run holding the block before it or starts a run.
    fn match_len(&self, hashes: &[u64]) -> usize {
        let mut k = 0;
        while let Some(&r) = hashes.get(k).and_then(|h| self.starts.get(h)) {
            k += common_prefix(self.hashes(r), &hashes[k..]);
        }
        k
    }

    fn record(&mut self, hashes: &[u64]) {
        // A prompt longer than the capacity keeps only its leading blocks.
        let hashes = &hashes[..hashes.len().min(self.capacity as usize)];
        let Some(&first) = hashes.first() else { return };
        // Blocks already remembered leave their runs (a leading part of each).
        let mut k = 0;
        while let Some(r) = hashes.get(k).and_then(|h| self.starts.remove(h)) {
            let common = common_prefix(self.hashes(r), &hashes[k..]);
            k += common;
            self.blocks -= common as u32;
            let run = &mut self.runs[r as usize];
            if common == run.len as usize {
                self.unlink(r);
            } else {
                run.at += common;
                run.len -= common as u32;
                let start = self.store[run.at];
                self.starts.insert(start, r);
            }
        }
        // The prompt becomes the newest run.
        self.compact_if_sparse();
        let at = self.store.len();
        self.store.extend_from_slice(hashes);
        let r = self.push_newest(Run { at, len: hashes.len() as u32, prev: self.tail, next: NIL });
        self.starts.insert(first, r);
        self.blocks += hashes.len() as u32;
        // Evict the least recently used blocks: the tails of the oldest runs.
        while self.blocks > self.capacity {
            let (oldest, excess) = (self.head, self.blocks - self.capacity);
            let run = &mut self.runs[oldest as usize];
            if run.len > excess {
                run.len -= excess;
                self.blocks -= excess;
            } else {
                self.blocks -= run.len;
                let start = self.store[run.at];
                self.starts.remove(&start);
                self.unlink(oldest);
            }
        }
    }

    fn push_newest(&mut self, run: Run) -> u32 {
        let r = match self.free.pop() {
            Some(r) => {
                self.runs[r as usize] = run;
                r
            }
            None => {
                self.runs.push(run);
                self.runs.len() as u32 - 1
            }
        };
        match self.tail {
            NIL => self.head = r,
            t => self.runs[t as usize].next = r,
        }
        self.tail = r;
        r
    }

    /// Removes run `r` from the FIFO and frees its slot (its hashes become garbage).
    fn unlink(&mut self, r: u32) {
        let Run { prev, next, .. } = self.runs[r as usize];
        match prev {
            NIL => self.head = next,
            p => self.runs[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.runs[n as usize].prev = prev,
        }
        self.free.push(r);
    }

    /// Moves the live hashes to the front of the buffer when garbage
    /// outweighs them: O(live) after at least as much garbage accumulated.
    fn compact_if_sparse(&mut self) {
        let live = self.blocks as usize;
        if self.store.len() <= 2 * live + COMPACT_SLACK {
            return;
        }
        let mut to = 0;
        let mut r = self.head;
        while r != NIL {
            let run = &mut self.runs[r as usize];
            let len = run.len as usize;
            self.store.copy_within(run.at..run.at + len, to);
            run.at = to;
            to += len;
            r = run.next;
        }
        self.store.truncate(to);
    }
}

/// The router's prefix index over all instances.
#[derive(Clone, Debug)]
pub struct PrefixIndex {
    sets: Vec<Runs>,
}

impl PrefixIndex {
    /// An empty index for `instances` instances, remembering at most
    /// `capacity_blocks` block hashes per instance.
    pub fn new(instances: usize, capacity_blocks: u32) -> PrefixIndex {
        PrefixIndex { sets: vec![Runs::new(capacity_blocks); instances] }
    }

    /// Forgets everything about `instance` (a new replica in its slot,
    /// remembering at most `capacity_blocks`), adding slots up to it.
    pub fn reset(&mut self, instance: usize, capacity_blocks: u32) {
        if instance >= self.sets.len() {
            self.sets.resize(instance + 1, Runs::new(capacity_blocks));
        }
        self.sets[instance] = Runs::new(capacity_blocks);
    }

    /// Number of leading blocks of `block_hashes` the router believes
    /// `instance` holds.
    pub fn match_blocks(&self, instance: usize, block_hashes: &[u64]) -> u32 {
        self.sets[instance].match_len(block_hashes) as u32
    }

    /// Records that a request with these prompt blocks (chained hashes) was
    /// sent to `instance`. The blocks are touched last-to-first, so a
    /// prompt's leading (most shared) blocks are the last to be forgotten, as
    /// in vLLM's block pool, which frees a request's blocks tail first.
    pub fn record(&mut self, instance: usize, block_hashes: &[u64]) {
        self.sets[instance].record(block_hashes);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn matches_leading_blocks_per_instance() {
        let mut idx = PrefixIndex::new(2, 100);
        idx.record(1, &[1, 2, 3]);
        assert_eq!(idx.match_blocks(1, &[1, 2, 3, 4]), 3);
        assert_eq!(idx.match_blocks(1, &[1, 9, 3]), 1);
        assert_eq!(idx.match_blocks(1, &[9, 2, 3]), 0, "only a leading run counts");
        assert_eq!(idx.match_blocks(0, &[1, 2, 3]), 0);
    }

    #[test]
    fn evicts_least_recently_used_and_keeps_prefixes_longest() {
        let mut idx = PrefixIndex::new(1, 3);
        idx.record(0, &[1, 2, 3]); // recency, oldest first: 3, 2, 1
        idx.record(0, &[7]); // evicts 3
        assert_eq!(idx.match_blocks(0, &[1, 2, 3]), 2);
        idx.record(0, &[1]); // 1 becomes most recent: 2, 7, 1
        idx.record(0, &[8, 9]); // evicts 2 and 7
        assert_eq!(idx.match_blocks(0, &[1]), 1);
        assert_eq!(idx.match_blocks(0, &[8, 9]), 2);
        assert_eq!(idx.match_blocks(0, &[7]), 0);
        let set = &idx.sets[0];
        assert_eq!((set.blocks, set.starts.len()), (3, 2), "runs [8, 9] and [1]");
    }

    /// The definition, one block at a time: a recency list, most recent last.
    struct Reference {
        recency: Vec<u64>,
        capacity: usize,
    }

    impl Reference {
        fn record(&mut self, hashes: &[u64]) {
            for &h in hashes.iter().rev() {
                self.recency.retain(|&x| x != h);
                self.recency.push(h);
                if self.recency.len() > self.capacity {
                    self.recency.remove(0);
                }
            }
        }

        fn match_len(&self, hashes: &[u64]) -> usize {
            hashes.iter().take_while(|h| self.recency.contains(h)).count()
        }
    }

    /// Chained hashes of a prompt made of the given token ids, one per block.
    fn chain(tokens: &[u8]) -> Vec<u64> {
        let mut h = 0xb115_u64;
        tokens
            .iter()
            .map(|&t| {
                h = blis_engine::rng::mix64(h ^ u64::from(t));
                h
            })
            .collect()
    }

    const MAX_PROMPT: usize = 12;

    proptest! {
        /// Runs remember exactly what a block-by-block LRU set remembers, on
        /// prompts that share prefixes of every length (few distinct tokens),
        /// with capacities small enough to evict constantly, and keep their
        /// buffer bounded.
        #[test]
        fn runs_match_the_block_by_block_lru(
            capacity in 1u32..40,
            prompts in prop::collection::vec(prop::collection::vec(0u8..3, 0..MAX_PROMPT), 1..300),
        ) {
            let mut runs = Runs::new(capacity);
            let mut reference = Reference { recency: Vec::new(), capacity: capacity as usize };
            for (i, tokens) in prompts.iter().enumerate() {
                let hashes = chain(tokens);
                prop_assert_eq!(runs.match_len(&hashes), reference.match_len(&hashes), "lookup before record {}", i);
                runs.record(&hashes);
                reference.record(&hashes);
                prop_assert_eq!(runs.blocks as usize, reference.recency.len());
                prop_assert!(runs.store.len() <= 2 * capacity as usize + COMPACT_SLACK + MAX_PROMPT);
                // Every remembered block is found by the lookup of its own prefix.
                for p in &prompts[..=i] {
                    let h = chain(p);
                    prop_assert_eq!(runs.match_len(&h), reference.match_len(&h));
                }
            }
        }
    }
}
