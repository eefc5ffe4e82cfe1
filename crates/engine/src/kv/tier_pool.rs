//! One offload tier's blocks: an LRU set of block contents, kept as a log.
//!
//! vLLM's `LRUOffloadingManager` (and LMCache's LRU) keep a tier's blocks in
//! an ordered map: a store appends at the end, a finished load moves its
//! blocks to the end (`touch`, last block first), and eviction takes the
//! oldest block that is neither being stored (`ref_cnt = −1` until the copy
//! lands) nor being loaded. This pool keeps that order as a log of entries
//! in a ring: a store writes at the tail, a touch copies the entry to the
//! tail and leaves a hole where it was, and eviction scans from the head for
//! the first evictable entry. Holes are skipped as the head passes them, and
//! the ring (twice the tier's capacity) is compacted when the tail catches
//! up with the head, so every operation is O(1) amortised and the common
//! ones (store at the tail, evict at the head) walk memory in order. The
//! prefix index maps a content hash to its entry's slot.
//!
//! A block's copy becomes findable when it lands: [`TierPool::landed`]
//! compares its landing time with the caller's clock, so nothing is pinned
//! or unpinned when a store lands.

use std::collections::VecDeque;

use super::events::CacheChange;
use super::index::BlockIndex;
use crate::time::Micros;

/// One slot of the log.
#[derive(Copy, Clone, Debug)]
struct Entry {
    /// The block's content hash (meaningless in a hole).
    hash: u64,
    /// When its last store lands.
    landed_at: Micros,
    /// Loads in flight that read it.
    pins: u32,
    /// A stored block, not a hole.
    live: bool,
}

/// Slots of a new ring; it doubles as the tier fills, up to twice the
/// tier's capacity, so a large tier costs memory only as it is used.
const MIN_SLOTS: usize = 1024;

const HOLE: Entry = Entry { hash: 0, landed_at: Micros::ZERO, pins: 0, live: false };

/// A tier's blocks, in LRU order; see the module documentation. Slots are
/// the handles [`TierPool::find`] returns; they stay valid until the next
/// store or touch.
pub(super) struct TierPool {
    /// The ring; `head..tail` (cyclically, `span` slots) holds the log.
    entries: Vec<Entry>,
    head: usize,
    tail: usize,
    span: usize,
    /// Blocks the tier holds at most.
    capacity: u32,
    /// Live entries.
    live: u32,
    /// Live entries with pins.
    pinned: u32,
    /// Stores not landed yet, in landing order: when, and how many blocks.
    landing: VecDeque<(Micros, u32)>,
    /// Blocks of `landing`.
    in_flight: u32,
    index: BlockIndex,
    changes: Option<Vec<CacheChange>>,
}

impl TierPool {
    /// An empty tier of `capacity` blocks (at least 1).
    pub(super) fn new(capacity: u32) -> TierPool {
        debug_assert!(capacity > 0);
        TierPool {
            entries: vec![HOLE; MIN_SLOTS.min(Self::max_slots(capacity))],
            head: 0,
            tail: 0,
            span: 0,
            capacity,
            live: 0,
            pinned: 0,
            landing: VecDeque::new(),
            in_flight: 0,
            index: BlockIndex::new(),
            changes: None,
        }
    }

    /// The ring's final size: twice the capacity, so that a compaction
    /// frees at least half of it.
    fn max_slots(capacity: u32) -> usize {
        2 * capacity as usize + 2
    }

    /// The slot holding content `h`, landed or not.
    pub(super) fn find(&self, h: u64) -> Option<u32> {
        self.index.get(h, |s| self.entries[s as usize].hash)
    }

    /// When the block in `slot` lands (or landed).
    pub(super) fn landed_at(&self, slot: u32) -> Micros {
        self.entries[slot as usize].landed_at
    }

    /// The slot holding content `h`, landed by `now`.
    pub(super) fn landed(&self, h: u64, now: Micros) -> Option<u32> {
        self.find(h).filter(|&s| self.entries[s as usize].landed_at <= now)
    }

    /// Blocks a store at `now` may take: free slots and evictable blocks.
    pub(super) fn storable(&mut self, now: Micros) -> u32 {
        while let Some(&(landed, n)) = self.landing.front()
            && landed <= now
        {
            self.in_flight -= n;
            self.landing.pop_front();
        }
        self.capacity - self.in_flight - self.pinned
    }

    /// Stores the contents `hashes` (none held already), landing at
    /// `landed_at` (no earlier than the previous store's: the tier's link is
    /// first come, first served), evicting the oldest evictable blocks at
    /// `now` as needed. The caller has checked [`TierPool::storable`] at `now`.
    pub(super) fn store(&mut self, hashes: &[u64], now: Micros, landed_at: Micros) {
        debug_assert!(hashes.len() as u32 <= self.capacity - self.in_flight - self.pinned, "storable() was not checked");
        debug_assert!(self.landing.back().is_none_or(|&(last, _)| last <= landed_at), "stores land out of order");
        for &h in hashes {
            if self.live == self.capacity {
                self.evict_oldest(now);
            }
            let slot = self.append(Entry { hash: h, landed_at, pins: 0, live: true });
            let inserted = self.index.insert_if_absent(h, slot, |s| self.entries[s as usize].hash);
            debug_assert!(inserted, "a stored content was held already");
            self.live += 1;
            if let Some(c) = &mut self.changes {
                c.push(CacheChange::Stored { hash: h, parent: None, index: 0 });
            }
        }
        self.in_flight += hashes.len() as u32;
        self.landing.push_back((landed_at, hashes.len() as u32));
    }

    /// Pins the block in `slot` for a load: it cannot be evicted until
    /// [`TierPool::unpin_and_touch`].
    pub(super) fn pin(&mut self, slot: u32) {
        let e = &mut self.entries[slot as usize];
        debug_assert!(e.live);
        e.pins += 1;
        self.pinned += u32::from(e.pins == 1);
    }

    /// Ends a load of the blocks with contents `hashes`, in the order they
    /// were pinned: each becomes the most recently used, last block first
    /// (vLLM's `touch`), once no other load pins it.
    pub(super) fn unpin_and_touch(&mut self, hashes: &[u64]) {
        for &h in hashes.iter().rev() {
            let slot = self.find(h).expect("a pinned block stays held");
            let e = &mut self.entries[slot as usize];
            e.pins -= 1;
            if e.pins > 0 {
                continue;
            }
            self.pinned -= 1;
            let entry = *e;
            *e = HOLE;
            self.index.remove_if_points_to(h, slot);
            let moved = self.append(entry);
            self.index.insert_if_absent(h, moved, |s| self.entries[s as usize].hash);
            self.skip_holes();
        }
    }

    /// From now on, records the blocks stored and evicted, for
    /// [`TierPool::take_changes`].
    pub(super) fn record_changes(&mut self) {
        self.changes.get_or_insert_default();
    }

    /// Moves the changes recorded since the last call to `out`.
    pub(super) fn take_changes(&mut self, out: &mut Vec<CacheChange>) {
        if let Some(c) = &mut self.changes {
            out.append(c);
        }
    }

    /// Evicts the oldest block that is landed by `now` and unpinned.
    fn evict_oldest(&mut self, now: Micros) {
        let slots = self.entries.len();
        let mut p = self.head;
        for _ in 0..self.span {
            let e = &mut self.entries[p];
            if e.live && e.pins == 0 && e.landed_at <= now {
                let hash = e.hash;
                *e = HOLE;
                self.index.remove_if_points_to(hash, p as u32);
                self.live -= 1;
                if let Some(c) = &mut self.changes {
                    c.push(CacheChange::Removed { hash });
                }
                self.skip_holes();
                return;
            }
            p = if p + 1 == slots { 0 } else { p + 1 };
        }
        unreachable!("storable() counted an evictable block");
    }

    /// Advances the head past holes.
    fn skip_holes(&mut self) {
        while self.span > 0 && !self.entries[self.head].live {
            self.head = if self.head + 1 == self.entries.len() { 0 } else { self.head + 1 };
            self.span -= 1;
        }
    }

    /// Writes `entry` at the tail, compacting first when the ring is full;
    /// returns its slot. The caller indexes it.
    fn append(&mut self, entry: Entry) -> u32 {
        if self.span == self.entries.len() {
            self.compact();
        }
        let slot = self.tail;
        self.entries[slot] = entry;
        self.tail = if slot + 1 == self.entries.len() { 0 } else { slot + 1 };
        self.span += 1;
        slot as u32
    }

    /// Moves the live entries to the front of the ring, in order, and
    /// re-indexes them; the ring doubles (up to its final size) when they
    /// fill half of it. Happens at most once per `capacity` appends.
    fn compact(&mut self) {
        let slots = self.entries.len();
        let grown = if 2 * self.live as usize >= slots { (2 * slots).min(Self::max_slots(self.capacity)) } else { slots };
        let mut ring = vec![HOLE; grown];
        let mut kept = 0;
        for k in 0..self.span {
            let e = self.entries[(self.head + k) % slots];
            if e.live {
                ring[kept] = e;
                kept += 1;
            }
        }
        self.entries = ring;
        self.index = BlockIndex::new();
        for s in 0..kept {
            self.index.insert_if_absent(self.entries[s].hash, s as u32, |x| self.entries[x as usize].hash);
        }
        self.head = 0;
        self.span = kept;
        self.tail = kept % grown;
    }

    /// Full consistency check, for tests: the counts match the log, the
    /// index holds exactly the live entries, and blocks in flight are held.
    pub(super) fn assert_consistent(&self) {
        let slots = self.entries.len();
        let log: Vec<(usize, Entry)> = (0..self.span).map(|k| (self.head + k) % slots).map(|p| (p, self.entries[p])).collect();
        assert_eq!((self.head + self.span) % slots, self.tail, "head + span != tail");
        let live: Vec<&(usize, Entry)> = log.iter().filter(|(_, e)| e.live).collect();
        assert_eq!(live.len(), self.live as usize, "live count");
        assert!(self.live <= self.capacity, "more blocks than the tier holds");
        assert_eq!(live.iter().filter(|(_, e)| e.pins > 0).count(), self.pinned as usize, "pinned count");
        assert_eq!(self.landing.iter().map(|&(_, n)| n).sum::<u32>(), self.in_flight, "blocks in flight");
        // (Blocks in flight are counted until `storable` sees them land, so
        // a landed block may be counted both in flight and pinned here.)
        assert!(self.in_flight <= self.live && self.pinned <= self.live, "blocks in flight or pinned are not all held");
        assert_eq!(self.index.len(), live.len(), "index size");
        for &&(p, e) in &live {
            assert_eq!(self.find(e.hash), Some(p as u32), "a live block is not indexed at its slot");
        }
        assert!(self.entries.iter().enumerate().all(|(p, e)| !e.live || log.iter().any(|&(q, _)| q == p)), "a live entry outside the log");
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// vLLM's LRU manager as an ordered list (oldest first), the reference.
    #[derive(Default)]
    struct Reference {
        order: Vec<(u64, Micros, u32)>,
    }

    impl Reference {
        fn evictable(&self, now: Micros) -> usize {
            self.order.iter().filter(|&&(_, landed, pins)| landed <= now && pins == 0).count()
        }
    }

    proptest! {
        /// Stores, pins and touches behave as vLLM's ordered-dict LRU:
        /// the same contents are held, in the same eviction order, through
        /// holes, wrap-around and compaction.
        #[test]
        fn behaves_like_an_ordered_lru(capacity in 1u32..12, ops in prop::collection::vec((0u8..4, 0u64..30, 0u64..4), 1..400)) {
            let mut pool = TierPool::new(capacity);
            let mut model = Reference::default();
            let mut now = Micros::ZERO;
            let mut loads: Vec<Vec<u64>> = Vec::new();
            let mut last_landing = Micros::ZERO;
            for (op, k, dt) in ops {
                now += Micros(dt);
                match op {
                    0 => {
                        let h = k + 1;
                        if model.order.iter().any(|e| e.0 == h) {
                            prop_assert!(pool.find(h).is_some());
                            continue;
                        }
                        prop_assert!(pool.find(h).is_none());
                        let storable = pool.storable(now);
                        let free = capacity as usize - model.order.len();
                        prop_assert_eq!(storable as usize, free + model.evictable(now));
                        if storable == 0 {
                            continue;
                        }
                        if free == 0 {
                            let oldest = model.order.iter().position(|&(_, landed, pins)| landed <= now && pins == 0).unwrap();
                            model.order.remove(oldest);
                        }
                        let landed = (now + Micros(dt * 2)).max(last_landing);
                        last_landing = landed;
                        pool.store(&[h], now, landed);
                        model.order.push((h, landed, 0));
                    }
                    1 => {
                        // A load of up to three landed blocks.
                        let hs: Vec<u64> = model.order.iter().filter(|e| e.1 <= now).map(|e| e.0).skip(k as usize % 4).take(3).collect();
                        for &h in &hs {
                            let s = pool.landed(h, now).expect("landed");
                            pool.pin(s);
                            model.order.iter_mut().find(|e| e.0 == h).unwrap().2 += 1;
                        }
                        loads.push(hs);
                    }
                    2 if !loads.is_empty() => {
                        let hs = loads.remove(k as usize % loads.len());
                        pool.unpin_and_touch(&hs);
                        for &h in hs.iter().rev() {
                            let i = model.order.iter().position(|e| e.0 == h).unwrap();
                            model.order[i].2 -= 1;
                            if model.order[i].2 == 0 {
                                let e = model.order.remove(i);
                                model.order.push(e);
                            }
                        }
                    }
                    _ => {}
                }
                pool.assert_consistent();
                prop_assert_eq!(pool.live as usize, model.order.len());
                let slots = pool.entries.len();
                let order: Vec<u64> = (0..pool.span).map(|i| pool.entries[(pool.head + i) % slots]).filter(|e| e.live).map(|e| e.hash).collect();
                let want: Vec<u64> = model.order.iter().map(|e| e.0).collect();
                prop_assert_eq!(order, want);
            }
        }
    }
}
