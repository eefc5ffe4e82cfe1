//! The router-side prefix index: which prompt blocks the router has sent to
//! which instance (what llm-d's prefix-cache scorer keeps), as a bounded LRU
//! set of block hashes per instance.
//!
//! It is the router's *belief* about the instances' caches, built only from
//! its own routing decisions: it never looks inside an instance, so it can be
//! wrong (the instance may have evicted the blocks). The `precise-prefix`
//! scorer reads the instances' true caches instead.
//!
//! Cost: a lookup walks the request's leading blocks until the first miss,
//! O(matched blocks) hash probes per instance; recording is O(prompt blocks).
//! Nothing allocates once an instance's set is full.

use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

#[derive(Copy, Clone, Debug)]
struct Node {
    hash: u64,
    prev: u32,
    next: u32,
}

/// An LRU set of block hashes with fixed capacity (intrusive list in a slab).
#[derive(Clone, Debug)]
struct LruSet {
    map: FxHashMap<u64, u32>,
    nodes: Vec<Node>,
    // Least recently used at the head, most recent at the tail.
    head: u32,
    tail: u32,
    capacity: u32,
}

impl LruSet {
    fn new(capacity: u32) -> LruSet {
        LruSet { map: FxHashMap::default(), nodes: Vec::new(), head: NIL, tail: NIL, capacity: capacity.max(1) }
    }

    fn contains(&self, h: u64) -> bool {
        self.map.contains_key(&h)
    }

    fn unlink(&mut self, n: u32) {
        let Node { prev, next, .. } = self.nodes[n as usize];
        if prev == NIL { self.head = next } else { self.nodes[prev as usize].next = next }
        if next == NIL { self.tail = prev } else { self.nodes[next as usize].prev = prev }
    }

    fn push_tail(&mut self, n: u32) {
        let node = &mut self.nodes[n as usize];
        node.prev = self.tail;
        node.next = NIL;
        if self.tail == NIL { self.head = n } else { self.nodes[self.tail as usize].next = n }
        self.tail = n;
    }

    /// Marks `h` most recently used, inserting it (and evicting the least
    /// recently used hash when full).
    fn touch(&mut self, h: u64) {
        if let Some(&n) = self.map.get(&h) {
            self.unlink(n);
            self.push_tail(n);
            return;
        }
        let n = if (self.nodes.len() as u32) < self.capacity {
            self.nodes.push(Node { hash: h, prev: NIL, next: NIL });
            self.nodes.len() as u32 - 1
        } else {
            let victim = self.head;
            self.unlink(victim);
            self.map.remove(&self.nodes[victim as usize].hash);
            self.nodes[victim as usize].hash = h;
            victim
        };
        self.map.insert(h, n);
        self.push_tail(n);
    }
}

/// The router's prefix index over all instances.
#[derive(Clone, Debug)]
pub struct PrefixIndex {
    sets: Vec<LruSet>,
}

impl PrefixIndex {
    /// An empty index for `instances` instances, remembering at most
    /// `capacity_blocks` block hashes per instance.
    pub fn new(instances: usize, capacity_blocks: u32) -> PrefixIndex {
        PrefixIndex { sets: vec![LruSet::new(capacity_blocks); instances] }
    }

    /// Number of leading blocks of `block_hashes` the router believes
    /// `instance` holds.
    pub fn match_blocks(&self, instance: usize, block_hashes: &[u64]) -> u32 {
        let set = &self.sets[instance];
        block_hashes.iter().take_while(|&&h| set.contains(h)).count() as u32
    }

    /// Records that a request with these prompt blocks was sent to
    /// `instance`. The blocks are touched last-to-first, so a prompt's
    /// leading (most shared) blocks are the last to be forgotten, as in
    /// vLLM's block pool, which frees a request's blocks tail first.
    pub fn record(&mut self, instance: usize, block_hashes: &[u64]) {
        let set = &mut self.sets[instance];
        for &h in block_hashes.iter().rev() {
            set.touch(h);
        }
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!((set.nodes.len(), set.map.len()), (3, 3));
    }
}
