//! The prefix-cache index of a [`KvCache`](super::KvCache): block content
//! hash → block id.
//!
//! An open-addressing table (linear probing, backward-shift deletion, load
//! factor at most ½) of 8-byte slots, each holding a block id and a 32-bit
//! fingerprint of the block's 64-bit hash; the full hash lives in the block.
//! A probe compares fingerprints and reads a block only when one matches, so
//! a lookup that misses touches one or two cache lines of the table and no
//! block, and the table takes 8–16 bytes per indexed block. Positions derive
//! from the fingerprint alone, so growing the table reads no block either.
//!
//! Two ways to delete, for two owners, never mixed in one table: the GPU
//! cache removes by hash with backward shifts
//! ([`BlockIndex::remove_if_points_to`]); an offload tier, which keeps each
//! entry's table position ([`BlockIndex::insert_absent`]), leaves a
//! tombstone there ([`BlockIndex::bury`]): a write to a known position, with
//! no probe to wait for. Tombstones are cleared when the owner rebuilds the
//! table ([`BlockIndex::wants_rebuild`]).
//!
//! The table holds at most one entry per hash and one entry per block (the
//! GPU cache keeps the other blocks of a content beside it).
//! Nothing iterates it in a way that reaches a report (only
//! [`BlockIndex::blocks`], for consistency checks), so its layout never
//! affects results.

const EMPTY: u32 = u32::MAX;
/// A deleted entry: probes go past it, inserts may reuse it.
const TOMB: u32 = u32::MAX - 1;

/// Slots of an empty table; it doubles when half full and never shrinks.
const MIN_SLOTS: usize = 64;

#[derive(Copy, Clone, Debug)]
struct Slot {
    fingerprint: u32,
    block: u32,
}

const VACANT: Slot = Slot { fingerprint: 0, block: EMPTY };

/// Content hash → block id, for blocks whose hashes [`BlockIndex::get`]
/// confirms through a caller-supplied `hash_of(block)`.
#[derive(Clone, Debug)]
pub(super) struct BlockIndex {
    slots: Vec<Slot>,
    len: usize,
    /// Tombstones.
    tombs: usize,
    /// `64 − log2(slots.len())`: the home slot is the top bits of a product.
    shift: u32,
}

fn fingerprint(h: u64) -> u32 {
    (h ^ (h >> 32)) as u32
}

impl BlockIndex {
    /// An empty index.
    pub(super) fn new() -> BlockIndex {
        BlockIndex::with_slots(MIN_SLOTS)
    }

    /// An empty index with room for `entries` before it grows: its table
    /// is at most half full with them.
    pub(super) fn for_entries(entries: usize) -> BlockIndex {
        BlockIndex::with_slots((2 * entries).next_power_of_two().max(MIN_SLOTS))
    }

    fn with_slots(slots: usize) -> BlockIndex {
        BlockIndex { slots: vec![VACANT; slots], len: 0, tombs: 0, shift: 64 - slots.trailing_zeros() }
    }

    /// Entries.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Fibonacci hashing of the fingerprint: well spread even for hashes
    /// that are not (test hashes such as 1000, 2000, …).
    fn home(&self, fp: u32) -> usize {
        (u64::from(fp).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The block indexed under `h`. `hash_of` returns a block's full hash.
    pub(super) fn get(&self, h: u64, hash_of: impl Fn(u32) -> u64) -> Option<u32> {
        let fp = fingerprint(h);
        let mut i = self.home(fp);
        loop {
            let s = self.slots[i];
            if s.block == EMPTY {
                return None;
            }
            if s.fingerprint == fp && s.block != TOMB && hash_of(s.block) == h {
                return Some(s.block);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Starts loading the home slot of `h`, where a later probe for `h` begins.
    pub(super) fn prefetch(&self, h: u64) {
        super::prefetch(&self.slots[self.home(fingerprint(h))]);
    }

    /// Indexes `block` under `h` unless `h` is indexed already (the block
    /// first registered for a content is the one found, as in vLLM).
    /// Returns whether it was inserted. `block` must not be indexed under
    /// another hash.
    pub(super) fn insert_if_absent(&mut self, h: u64, block: u32, hash_of: impl Fn(u32) -> u64) -> bool {
        debug_assert!(block < TOMB);
        debug_assert_eq!(self.tombs, 0, "a table with tombstones");
        if 2 * (self.len + 1) > self.slots.len() {
            self.resize(2 * self.slots.len());
        }
        let fp = fingerprint(h);
        let mut i = self.home(fp);
        loop {
            let s = self.slots[i];
            if s.block == EMPTY {
                self.slots[i] = Slot { fingerprint: fp, block };
                self.len += 1;
                return true;
            }
            if s.fingerprint == fp && hash_of(s.block) == h {
                return false;
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Removes the entry of `block` if `h` is indexed to it, and says
    /// whether it did; `h` must be the block's hash. Reads no block.
    pub(super) fn remove_if_points_to(&mut self, h: u64, block: u32) -> bool {
        debug_assert_eq!(self.tombs, 0, "a table with tombstones");
        let fp = fingerprint(h);
        let mut i = self.home(fp);
        loop {
            let s = self.slots[i];
            if s.block == EMPTY {
                return false;
            }
            if s.block == block {
                break;
            }
            i = (i + 1) & self.mask();
        }
        // Backward-shift deletion: pull later members of the cluster into
        // the hole when the hole lies between their home and their slot.
        let mask = self.mask();
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.block == EMPTY {
                break;
            }
            let home = self.home(s.fingerprint);
            // Distance from home to j versus from the hole to j (cyclically).
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = VACANT;
        self.len -= 1;
        true
    }

    /// Whether the owner of a table with tombstones must rebuild it (into a
    /// [`BlockIndex::for_entries`]) before the next
    /// [`BlockIndex::insert_absent`]: entries and tombstones would fill more
    /// than three quarters of it, or entries more than half.
    pub(super) fn wants_rebuild(&self) -> bool {
        4 * (self.len + self.tombs + 1) > 3 * self.slots.len() || 2 * (self.len + 1) > self.slots.len()
    }

    /// Indexes `block` under `h`, which the caller knows is not indexed,
    /// and returns its position in the table, valid until the table is
    /// rebuilt; the caller has checked [`BlockIndex::wants_rebuild`].
    pub(super) fn insert_absent(&mut self, h: u64, block: u32) -> u32 {
        debug_assert!(block < TOMB);
        debug_assert!(!self.wants_rebuild(), "wants_rebuild() was not checked");
        let fp = fingerprint(h);
        let mut i = self.home(fp);
        while self.slots[i].block < TOMB {
            i = (i + 1) & self.mask();
        }
        self.tombs -= usize::from(self.slots[i].block == TOMB);
        self.len += 1;
        self.slots[i] = Slot { fingerprint: fp, block };
        i as u32
    }

    /// Deletes the entry at `pos` (from [`BlockIndex::insert_absent`]),
    /// leaving a tombstone.
    pub(super) fn bury(&mut self, pos: u32) {
        let s = &mut self.slots[pos as usize];
        debug_assert!(s.block < TOMB, "burying a free slot");
        s.block = TOMB;
        self.len -= 1;
        self.tombs += 1;
    }

    /// Every indexed block id (in table order: for consistency checks only).
    pub(super) fn blocks(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().filter(|s| s.block < TOMB).map(|s| s.block)
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![VACANT; slots]);
        self.shift = 64 - slots.trailing_zeros();
        let mask = self.mask();
        for s in old.into_iter().filter(|s| s.block != EMPTY) {
            let mut i = self.home(s.fingerprint);
            while self.slots[i].block != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The table behaves as a map with insert-if-absent, including under
        /// fingerprint collisions (hashes drawn from a tiny set of high halves
        /// and low halves collide often) and across growth.
        #[test]
        fn behaves_like_a_map(ops in prop::collection::vec((0u8..3, 0u64..40, 0u32..60), 1..2000)) {
            // Hashes whose fingerprints collide: h and h ^ (x << 32 | x).
            let hash = |k: u64| if k.is_multiple_of(2) { k * 1000 } else { (k * 1000) ^ (7 << 32 | 7) };
            let mut idx = BlockIndex::new();
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            // block → its hash, for `hash_of`; a block holds one hash at a time.
            let mut holder: BTreeMap<u32, u64> = BTreeMap::new();
            for (op, k, b) in ops {
                let h = hash(k);
                match op {
                    0 => {
                        if holder.contains_key(&b) {
                            continue;
                        }
                        holder.insert(b, h);
                        let inserted = idx.insert_if_absent(h, b, |x| holder[&x]);
                        prop_assert_eq!(inserted, !model.contains_key(&h));
                        model.entry(h).or_insert(b);
                    }
                    1 => {
                        if let Some(&hb) = holder.get(&b) {
                            idx.remove_if_points_to(hb, b);
                            if model.get(&hb) == Some(&b) {
                                model.remove(&hb);
                            }
                            holder.remove(&b);
                        }
                    }
                    _ => {}
                }
                prop_assert_eq!(idx.get(h, |x| holder[&x]), model.get(&h).copied());
                prop_assert_eq!(idx.len(), model.len());
            }
            for (&h, &b) in &model {
                prop_assert_eq!(idx.get(h, |x| holder[&x]), Some(b));
            }
            let mut blocks: Vec<u32> = idx.blocks().collect();
            blocks.sort_unstable();
            let mut want: Vec<u32> = model.values().copied().collect();
            want.sort_unstable();
            prop_assert_eq!(blocks, want);
        }
    }
}
