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
//! the ring (an eighth larger than the tier's capacity) is compacted in
//! place when the tail catches up with the head, so every operation is O(1)
//! amortised and the common ones (store at the tail, evict at the head)
//! walk memory in order, the tail close behind the head. The prefix index
//! maps a content hash to its entry's slot.
//!
//! **Private blocks.** A block only its own request can contain (a
//! generated block of a request outside a session: no other prompt holds
//! its tokens) takes its place in the LRU order like any other, but enters
//! no index: it is stored under its owner and ordinal, with no hash, and
//! nothing can find it. When its owner is preempted,
//! [`TierPool::adopt`] gives its private blocks their hashes and indexes
//! them, so that the recomputation finds them as vLLM's lookup would. This
//! is the GPU cache's rule for generated blocks (`Live::cacheable_tokens`)
//! carried to the tiers: it changes no hit and saves a hash, a probe and an
//! index update per generated block.
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
    /// Its position in the index; for a private block [`PRIVATE`] | its
    /// ordinal (and `hash` is its owner); [`HOLELESS`] marks a hole.
    at: u32,
}

impl Entry {
    /// A stored block, not a hole.
    fn live(&self) -> bool {
        self.at != HOLELESS
    }

    /// A stored block in the index.
    fn indexed(&self) -> bool {
        self.at & PRIVATE == 0
    }

    /// A stored private block of `owner`: its ordinal.
    fn private_of(&self, owner: u64) -> Option<u32> {
        (self.live() && !self.indexed() && self.hash == owner).then_some(self.at & !PRIVATE)
    }
}

/// The index position of a hole: none.
const HOLELESS: u32 = u32::MAX;

/// The flag of a private block's `at`. Index positions stay below it: a
/// tier holds at most [`TierPool::MAX_BLOCKS`], its index at most four times that.
const PRIVATE: u32 = 1 << 31;

/// A run of consecutive private blocks of one request, stored together.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PrivateRun {
    /// The request (its id).
    pub owner: u64,
    /// The ordinal of the first block in the request's sequence.
    pub first_block: u32,
    /// Blocks.
    pub blocks: u32,
}

/// Slots of a new ring; it doubles as the tier fills, up to its final size
/// (`TierPool::max_slots`), so a large tier costs memory only as it is used.
const MIN_SLOTS: usize = 1024;

const HOLE: Entry = Entry { hash: 0, landed_at: Micros::ZERO, pins: 0, at: HOLELESS };

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
    /// The most blocks a tier may hold (2²⁸).
    pub(super) const MAX_BLOCKS: u64 = 1 << 28;

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

    /// Slots of the final ring beyond the capacity: the fewest holes that
    /// lead to a compaction. Small, so that a store at the tail writes
    /// where an eviction at the head has just read (the log fills the ring
    /// but for them), large enough that compacting costs O(1) per hole.
    fn slack(capacity: u32) -> usize {
        (capacity as usize / 8).max(64)
    }

    /// The ring's final size.
    fn max_slots(capacity: u32) -> usize {
        capacity as usize + Self::slack(capacity)
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

    /// Stores the contents `hashes` (none held already), then the private
    /// blocks of `private`, landing at `landed_at` (no earlier than the
    /// previous store's: the tier's link is first come, first served),
    /// evicting the oldest evictable blocks at `now` as needed. The caller
    /// has checked [`TierPool::storable`] at `now`.
    pub(super) fn store(&mut self, hashes: &[u64], private: Option<PrivateRun>, now: Micros, landed_at: Micros) {
        let n = hashes.len() as u32 + private.map_or(0, |p| p.blocks);
        debug_assert!(n <= self.capacity - self.in_flight - self.pinned, "storable() was not checked");
        debug_assert!(self.landing.back().is_none_or(|&(last, _)| last <= landed_at), "stores land out of order");
        for &h in hashes {
            debug_assert!(self.find(h).is_none(), "a stored content was held already");
            let slot = self.put(Entry { hash: h, landed_at, pins: 0, at: HOLELESS }, now);
            self.index_entry(slot);
            if let Some(c) = &mut self.changes {
                c.push(CacheChange::Stored { hash: h, parent: None, index: 0 });
            }
        }
        if let Some(p) = private {
            debug_assert!(self.changes.is_none(), "private blocks while recording events");
            debug_assert!(p.first_block + p.blocks <= PRIVATE, "a block ordinal beyond 2³¹");
            for k in p.first_block..p.first_block + p.blocks {
                self.put(Entry { hash: p.owner, landed_at, pins: 0, at: PRIVATE | k }, now);
            }
        }
        self.in_flight += n;
        self.landing.push_back((landed_at, n));
    }

    /// Appends a new block, evicting the oldest evictable one at `now` if
    /// the tier is full; returns its slot.
    fn put(&mut self, entry: Entry, now: Micros) -> u32 {
        if self.live == self.capacity {
            self.evict_oldest(now);
        }
        self.live += 1;
        self.append(entry)
    }

    /// Indexes the private blocks of `owner` among the last `appended`
    /// entries appended (by [`TierPool::store`] and
    /// [`TierPool::unpin_and_touch`], or more), under their hashes: `hashes[k]` for
    /// ordinal `k` (every ordinal stored is covered). None of those
    /// contents is held already.
    pub(super) fn adopt(&mut self, owner: u64, appended: u64, hashes: &[u64]) {
        let slots = self.entries.len();
        // Entries move only to the tail and compactions drop holes, so one
        // of the last `appended` lies within that many slots of the tail.
        let window = (self.span as u64).min(appended) as usize;
        for back in 1..=window {
            let p = (self.tail + slots - back) % slots;
            if let Some(k) = self.entries[p].private_of(owner) {
                let h = hashes[k as usize];
                debug_assert!(self.find(h).is_none(), "an adopted content was held already");
                self.entries[p] = Entry { hash: h, at: HOLELESS, ..self.entries[p] };
                self.index_entry(p as u32);
            }
        }
    }

    /// Pins the block in `slot` for a load: it cannot be evicted until
    /// [`TierPool::unpin_and_touch`].
    pub(super) fn pin(&mut self, slot: u32) {
        let e = &mut self.entries[slot as usize];
        debug_assert!(e.live());
        e.pins += 1;
        self.pinned += u32::from(e.pins == 1);
    }

    /// Ends a load of the blocks with contents `hashes`, in the order they
    /// were pinned: each becomes the most recently used, last block first
    /// (vLLM's `touch`), once no other load pins it. Returns how many moved
    /// (were appended again).
    pub(super) fn unpin_and_touch(&mut self, hashes: &[u64]) -> u64 {
        let mut moved_blocks = 0;
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
            self.index.bury(entry.at);
            let moved = self.append(Entry { at: HOLELESS, ..entry });
            self.index_entry(moved);
            self.skip_holes();
            moved_blocks += 1;
        }
        moved_blocks
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
            if e.live() && e.pins == 0 && e.landed_at <= now {
                let evicted = *e;
                *e = HOLE;
                self.live -= 1;
                if evicted.indexed() {
                    self.index.bury(evicted.at);
                    if let Some(c) = &mut self.changes {
                        c.push(CacheChange::Removed { hash: evicted.hash });
                    }
                }
                self.skip_holes();
                return;
            }
            p = if p + 1 == slots { 0 } else { p + 1 };
        }
        unreachable!("storable() counted an evictable block");
    }

    /// Indexes the entry in `slot`, rebuilding the index first when it
    /// asks for it.
    fn index_entry(&mut self, slot: u32) {
        if self.index.wants_rebuild() {
            self.reindex();
        }
        let e = &mut self.entries[slot as usize];
        e.at = self.index.insert_absent(e.hash, slot);
    }

    /// Rebuilds the index from the live entries, without tombstones.
    fn reindex(&mut self) {
        let slots = self.entries.len();
        // Room for a full tier, so that rebuilds come only from tombstones.
        self.index = BlockIndex::for_entries((2 * self.live).min(self.capacity) as usize + 1);
        for k in 0..self.span {
            let p = (self.head + k) % slots;
            let e = &mut self.entries[p];
            if e.indexed() {
                e.at = self.index.insert_absent(e.hash, p as u32);
            }
        }
    }

    /// Advances the head past holes.
    fn skip_holes(&mut self) {
        while self.span > 0 && !self.entries[self.head].live() {
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

    /// Closes the holes of the log, keeping its order, and re-indexes it:
    /// in place, or into a ring twice the size (up to its final size) when
    /// the live entries fill half of it. At the final size a compaction
    /// follows at least [`TierPool::slack`] holes.
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        let slots = self.entries.len();
        let max = Self::max_slots(self.capacity);
        if 2 * self.live as usize >= slots && slots < max {
            let grown = (2 * slots).min(max);
            let mut ring = vec![HOLE; grown];
            let mut kept = 0;
            for k in 0..self.span {
                let e = self.entries[(self.head + k) % slots];
                if e.live() {
                    ring[kept] = e;
                    kept += 1;
                }
            }
            self.entries = ring;
            self.head = 0;
            self.span = kept;
        } else {
            // Slide each live entry back over the holes before it. (`live`
            // may count an entry being appended, not in the ring yet.)
            let mut kept = 0;
            for k in 0..self.span {
                let from = (self.head + k) % slots;
                if self.entries[from].live() {
                    let to = (self.head + kept) % slots;
                    if from != to {
                        self.entries[to] = std::mem::replace(&mut self.entries[from], HOLE);
                    }
                    kept += 1;
                }
            }
            self.span = kept;
        }
        self.tail = (self.head + self.span) % self.entries.len();
        self.reindex();
    }

    /// Full consistency check, for tests: the counts match the log, the
    /// index holds exactly the live entries, and blocks in flight are held.
    pub(super) fn assert_consistent(&self) {
        let slots = self.entries.len();
        let log: Vec<(usize, Entry)> = (0..self.span).map(|k| (self.head + k) % slots).map(|p| (p, self.entries[p])).collect();
        assert_eq!((self.head + self.span) % slots, self.tail, "head + span != tail");
        let live: Vec<&(usize, Entry)> = log.iter().filter(|(_, e)| e.live()).collect();
        assert_eq!(live.len(), self.live as usize, "live count");
        assert!(self.live <= self.capacity, "more blocks than the tier holds");
        assert_eq!(live.iter().filter(|(_, e)| e.pins > 0).count(), self.pinned as usize, "pinned count");
        assert_eq!(self.landing.iter().map(|&(_, n)| n).sum::<u32>(), self.in_flight, "blocks in flight");
        // (Blocks in flight are counted until `storable` sees them land, so
        // a landed block may be counted both in flight and pinned here.)
        assert!(self.in_flight <= self.live && self.pinned <= self.live, "blocks in flight or pinned are not all held");
        let indexed: Vec<&&(usize, Entry)> = live.iter().filter(|(_, e)| e.indexed()).collect();
        assert_eq!(self.index.len(), indexed.len(), "index size");
        for &&&(p, e) in &indexed {
            assert_eq!(self.find(e.hash), Some(p as u32), "a live block is not indexed at its slot");
        }
        assert!(live.iter().all(|(_, e)| e.indexed() || e.pins == 0), "a private block is pinned");
        assert!(
            self.entries.iter().enumerate().all(|(p, e)| !e.live() || log.iter().any(|&(q, _)| q == p)),
            "a live entry outside the log"
        );
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// vLLM's LRU manager as an ordered list (oldest first), the reference:
    /// (content, landing time, pins, private and not adopted).
    #[derive(Default)]
    struct Reference {
        order: Vec<(u64, Micros, u32, bool)>,
    }

    impl Reference {
        fn evictable(&self, now: Micros) -> usize {
            self.order.iter().filter(|&&(_, landed, pins, _)| landed <= now && pins == 0).count()
        }
    }

    /// The content of private block `ordinal` of `owner` in these tests.
    fn private_hash(owner: u64, ordinal: u32) -> u64 {
        1000 + owner * 100 + u64::from(ordinal)
    }

    proptest! {
        /// Stores (shared and private), pins, touches and adoptions behave
        /// as vLLM's ordered-dict LRU: the same blocks are held, in the
        /// same eviction order, through holes, wrap-around and compaction,
        /// and exactly the shared and adopted ones can be found.
        #[test]
        fn behaves_like_an_ordered_lru(capacity in 1u32..12, ops in prop::collection::vec((0u8..6, 0u64..30, 0u64..4), 1..600)) {
            let mut pool = TierPool::new(capacity);
            let mut model = Reference::default();
            let mut now = Micros::ZERO;
            let mut loads: Vec<Vec<u64>> = Vec::new();
            let mut last_landing = Micros::ZERO;
            // Entries appended so far, and per owner its next ordinal and
            // the count before its first private store not yet adopted.
            let mut appends = 0u64;
            let mut owners = [(0u32, None::<u64>); 3];
            for (op, k, dt) in ops {
                now += Micros(dt);
                match op {
                    0 | 3 => {
                        let (h, private) = if op == 0 {
                            (k + 1, None)
                        } else {
                            let owner = k % 3;
                            let ordinal = owners[owner as usize].0;
                            (private_hash(owner, ordinal), Some(PrivateRun { owner, first_block: ordinal, blocks: 1 }))
                        };
                        if private.is_none() && model.order.iter().any(|e| e.0 == h) {
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
                            let oldest = model.order.iter().position(|&(_, landed, pins, _)| landed <= now && pins == 0).unwrap();
                            model.order.remove(oldest);
                        }
                        let landed = (now + Micros(dt * 2)).max(last_landing);
                        last_landing = landed;
                        match private {
                            None => pool.store(&[h], None, now, landed),
                            Some(run) => {
                                pool.store(&[], private, now, landed);
                                let o = &mut owners[run.owner as usize];
                                o.0 += 1;
                                o.1.get_or_insert(appends);
                            }
                        }
                        appends += 1;
                        model.order.push((h, landed, 0, private.is_some()));
                    }
                    1 => {
                        // A load of up to three landed blocks that can be found.
                        let hs: Vec<u64> = model.order.iter().filter(|e| e.1 <= now && !e.3).map(|e| e.0).skip(k as usize % 4).take(3).collect();
                        for &h in &hs {
                            let s = pool.landed(h, now).expect("landed");
                            pool.pin(s);
                            model.order.iter_mut().find(|e| e.0 == h).unwrap().2 += 1;
                        }
                        loads.push(hs);
                    }
                    2 if !loads.is_empty() => {
                        let hs = loads.remove(k as usize % loads.len());
                        appends += pool.unpin_and_touch(&hs);
                        for &h in hs.iter().rev() {
                            let i = model.order.iter().position(|e| e.0 == h).unwrap();
                            model.order[i].2 -= 1;
                            if model.order[i].2 == 0 {
                                let e = model.order.remove(i);
                                model.order.push(e);
                            }
                        }
                    }
                    4 => {
                        // The owner is preempted: its private blocks become findable.
                        let owner = k % 3;
                        let (next, since) = owners[owner as usize];
                        if let Some(since) = since {
                            let hashes: Vec<u64> = (0..next).map(|ordinal| private_hash(owner, ordinal)).collect();
                            pool.adopt(owner, appends - since, &hashes);
                            owners[owner as usize].1 = None;
                            for e in model.order.iter_mut().filter(|e| e.3 && (e.0 - 1000) / 100 == owner) {
                                e.3 = false;
                            }
                        }
                    }
                    _ => {}
                }
                pool.assert_consistent();
                prop_assert_eq!(pool.live as usize, model.order.len());
                let slots = pool.entries.len();
                let key = |e: &Entry| if e.indexed() { e.hash } else { private_hash(e.hash, e.at & !PRIVATE) };
                let order: Vec<u64> = (0..pool.span).map(|i| pool.entries[(pool.head + i) % slots]).filter(|e| e.live()).map(|e| key(&e)).collect();
                let want: Vec<u64> = model.order.iter().map(|e| e.0).collect();
                prop_assert_eq!(order, want);
                for e in &model.order {
                    prop_assert_eq!(pool.find(e.0).is_some(), !e.3, "found a private block, or missed a findable one");
                }
            }
        }
    }
}
