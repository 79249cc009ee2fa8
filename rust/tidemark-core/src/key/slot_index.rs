//! Hash index from a key's hash to its slot id, for [`crate::key::KeyTable`].
//!
//! The slots are grouped in chunks of 12, and a chunk fills one 64-byte cache line: 12
//! one-byte tags, an overflow count, then the 12 slot ids. This is the layout of
//! Folly's F14 maps. A lookup reads one line for both the tags and the slot ids. A
//! table that keeps its control bytes and its buckets apart (hashbrown) makes two
//! dependent reads instead. The caller then compares the key stored in the slot.
//!
//! A key starts probing at the chunk its hash picks and moves to the next chunk while
//! the current one is full. Each chunk counts the keys that probed past it (its
//! overflow count). A lookup stops at the first chunk whose count is 0, so no
//! tombstones are needed: a removal clears its tag and lowers the counts along its
//! probe path. A count that reaches 255 stays there (lookups then probe further, which
//! is still correct).

/// Slots per chunk.
const SLOTS: usize = 12;
/// Keys per chunk before the index doubles (10 of 12: about 83% full at most).
const MAX_PER_CHUNK: usize = 10;
/// Index of the overflow count in [`Chunk::tags`].
const OVERFLOW: usize = 12;
/// Low bit of each byte.
const LSB: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;
/// All but the high bit of each byte.
const LOW7: u128 = 0x7F7F_7F7F_7F7F_7F7F_7F7F_7F7F_7F7F_7F7F;

/// 12 slots in one cache line: `tags[i]` is 0 while slot `i` is free, else
/// `0x80 | (top 7 bits of the key's hash)`; `tags[12]` is the overflow count.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Chunk {
    tags: [u8; 16],
    slots: [u32; SLOTS],
}

impl Chunk {
    const EMPTY: Chunk = Chunk {
        tags: [0; 16],
        slots: [0; SLOTS],
    };

    /// Bit `8 * i + 7` set for each slot `i < 12` whose tag is `tag` (exact: no false
    /// matches).
    #[inline(always)]
    fn matches(&self, tag: u8) -> u128 {
        let word = u128::from_le_bytes(self.tags);
        let x = word ^ (u128::from(tag) * LSB);
        // High bit of each byte of x that is zero: no carry crosses bytes, because each
        // byte's low 7 bits plus 0x7F stays below 0x100.
        let zero = !(((x & LOW7) + LOW7) | x | LOW7);
        zero & ((1u128 << (8 * SLOTS)) - 1)
    }

    #[inline(always)]
    fn overflow(&self) -> u8 {
        self.tags[OVERFLOW]
    }
}

/// Maps key hashes to `u32` slot ids; the caller says which of the candidate slots
/// holds its key (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotIndex {
    /// A power of two in number (or none).
    chunks: Vec<Chunk>,
    len: usize,
}

/// The tag of a hash: its top 7 bits with the high bit set (never 0, the free tag).
#[inline(always)]
fn tag_of(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

impl SlotIndex {
    /// Number of slots held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of chunks (for tests of growth).
    #[cfg(test)]
    pub(crate) fn chunks_len(&self) -> usize {
        self.chunks.len()
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Chunk>()
    }

    /// The chunk where a lookup of `hash` starts (past the end while there is none).
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.chunks.len().wrapping_sub(1)
    }

    /// Hints the CPU to bring the chunk where a lookup of `hash` starts into cache.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        crate::prefetch_at(&self.chunks, self.home(hash));
    }

    /// The first slot stored under `hash`'s tag in the chunk a lookup of `hash` reads
    /// first (the likely match, to prefetch its entry), if any.
    #[inline]
    pub(crate) fn candidate(&self, hash: u64) -> Option<u32> {
        let c = self.chunks.get(self.home(hash))?;
        let m = c.matches(tag_of(hash));
        (m != 0).then(|| c.slots[m.trailing_zeros() as usize / 8])
    }

    /// The slot among those stored under `hash` for which `is_key` holds.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, is_key: impl Fn(u32) -> bool) -> Option<u32> {
        let mask = self.chunks.len().wrapping_sub(1);
        let tag = tag_of(hash);
        let mut i = self.home(hash);
        loop {
            let c = self.chunks.get(i)?;
            let mut m = c.matches(tag);
            while m != 0 {
                let s = c.slots[m.trailing_zeros() as usize / 8];
                if is_key(s) {
                    return Some(s);
                }
                m &= m - 1;
            }
            if c.overflow() == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `slot` under `hash` (the caller knows its key is absent). `rehash` gives
    /// the hash of any slot already held, for growth.
    pub(crate) fn insert(&mut self, hash: u64, slot: u32, rehash: impl Fn(u32) -> u64) {
        if self.len >= self.chunks.len() * MAX_PER_CHUNK {
            self.grow(rehash);
        }
        self.place(hash, slot);
        self.len += 1;
    }

    /// Puts `slot` in the first chunk with room on `hash`'s probe path.
    #[inline]
    fn place(&mut self, hash: u64, slot: u32) {
        let mask = self.chunks.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let c = &mut self.chunks[i];
            let free = c.matches(0);
            if free != 0 {
                let j = free.trailing_zeros() as usize / 8;
                c.tags[j] = tag_of(hash);
                c.slots[j] = slot;
                return;
            }
            c.tags[OVERFLOW] = c.tags[OVERFLOW].saturating_add(1);
            i = (i + 1) & mask;
        }
    }

    #[cold]
    fn grow(&mut self, rehash: impl Fn(u32) -> u64) {
        self.grow_to((self.chunks.len() * 2).max(1), rehash);
    }

    /// Makes room for `total` slots in all: inserting up to that many grows the index
    /// no further (one rehash here at most, instead of one per doubling).
    pub(crate) fn reserve(&mut self, total: usize, rehash: impl Fn(u32) -> u64) {
        let n = total.div_ceil(MAX_PER_CHUNK).next_power_of_two();
        if total > self.chunks.len() * MAX_PER_CHUNK && n > self.chunks.len() {
            self.grow_to(n, rehash);
        }
    }

    /// Rehashes every slot into `n` chunks (a power of two).
    fn grow_to(&mut self, n: usize, rehash: impl Fn(u32) -> u64) {
        let old = std::mem::replace(&mut self.chunks, vec![Chunk::EMPTY; n]);
        for c in &old {
            for j in 0..SLOTS {
                if c.tags[j] != 0 {
                    self.place(rehash(c.slots[j]), c.slots[j]);
                }
            }
        }
    }

    /// Removes `slot`, stored under `hash`; `false` if it is not held.
    pub(crate) fn remove(&mut self, hash: u64, slot: u32) -> bool {
        let mask = self.chunks.len().wrapping_sub(1);
        let tag = tag_of(hash);
        let home = self.home(hash);
        let mut i = home;
        loop {
            let Some(c) = self.chunks.get_mut(i) else {
                return false;
            };
            let mut m = c.matches(tag);
            while m != 0 {
                let j = m.trailing_zeros() as usize / 8;
                if c.slots[j] == slot {
                    c.tags[j] = 0;
                    self.len -= 1;
                    // The chunks it probed past count one key fewer.
                    let mut k = home;
                    while k != i {
                        let o = &mut self.chunks[k].tags[OVERFLOW];
                        if *o != u8::MAX {
                            *o -= 1;
                        }
                        k = (k + 1) & mask;
                    }
                    return true;
                }
                m &= m - 1;
            }
            if c.overflow() == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn a_chunk_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Chunk>(), 64);
        assert_eq!(std::mem::align_of::<Chunk>(), 64);
    }

    #[test]
    fn tag_matches_are_exact() {
        let mut c = Chunk::EMPTY;
        for t in [
            0x80u8, 0x81, 0xFF, 0xFE, 0x80, 0x01, 0x00, 0x7F, 0xFF, 0x81, 0x80, 0x00,
        ] {
            c.tags.rotate_left(1);
            c.tags[11] = t;
        }
        // Tags past the 12 slots (the overflow count and padding) never match.
        c.tags[12] = 0x80;
        c.tags[15] = 0x80;
        for probe in 0..=255u8 {
            let want: u128 = (0..SLOTS)
                .filter(|&j| c.tags[j] == probe)
                .map(|j| 1u128 << (8 * j + 7))
                .sum();
            assert_eq!(c.matches(probe), want, "tag {probe:#x}");
        }
    }

    #[test]
    fn the_candidate_is_the_first_slot_of_the_tag_in_the_home_chunk() {
        let mut index = SlotIndex::default();
        assert_eq!(index.candidate(7), None);
        // Home chunk 0 for every hash below (low bits 0); tags from the top 7 bits.
        let h = |tag: u64| tag << 57;
        let hashes: HashMap<u32, u64> = [(10, h(3)), (11, h(5)), (12, h(3))].into();
        for (&slot, &hash) in &hashes {
            index.insert(hash, slot, |s| hashes[&s]);
        }
        let first_of_3 = index.find(h(3), |_| true);
        assert!(matches!(first_of_3, Some(10 | 12)));
        assert_eq!(index.candidate(h(3)), first_of_3);
        assert_eq!(index.candidate(h(5)), Some(11));
        assert_eq!(index.candidate(h(6)), None);
    }

    /// Every hash in few chunks (`spread` bits): long probe paths, full chunks and
    /// saturated overflow counts.
    fn check_against_model(ops: &[(bool, u16)], spread: u32) {
        check_with_reserve(ops, spread, None);
    }

    /// [`check_against_model`], with `reserve` slots in all reserved before op `at`.
    fn check_with_reserve(ops: &[(bool, u16)], spread: u32, reserve: Option<(usize, usize)>) {
        let hash_of = |k: u16| {
            let h = u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h & !((1u64 << 57) - 1)) | (h & ((1 << spread) - 1))
        };
        let mut index = SlotIndex::default();
        // Key k is stored in slot k + 1000 (slots are ids, not keys).
        let mut model: HashMap<u16, u32> = HashMap::new();
        for (i, &(insert, k)) in ops.iter().enumerate() {
            if let Some((_, total)) = reserve.filter(|&(at, _)| at == i) {
                index.reserve(total, |s| hash_of((s - 1000) as u16));
            }
            let slot = u32::from(k) + 1000;
            if insert {
                if let std::collections::hash_map::Entry::Vacant(e) = model.entry(k) {
                    index.insert(hash_of(k), slot, |s| hash_of((s - 1000) as u16));
                    e.insert(slot);
                }
            } else {
                assert_eq!(index.remove(hash_of(k), slot), model.remove(&k).is_some());
            }
            assert_eq!(index.len(), model.len());
        }
        for k in 0..512u16 {
            let slot = u32::from(k) + 1000;
            assert_eq!(
                index.find(hash_of(k), |s| s == slot),
                model.get(&k).copied(),
                "key {k}"
            );
        }
    }

    #[test]
    fn many_keys_on_one_chunk_saturate_the_overflow_count() {
        // 400 keys whose hashes all pick chunk 0: counts reach 255 and stay, lookups
        // still find every key, removals leave the others findable.
        let ops: Vec<(bool, u16)> = (0..400u16)
            .map(|k| (true, k))
            .chain((0..400u16).step_by(3).map(|k| (false, k)))
            .collect();
        check_against_model(&ops, 0);
    }

    #[test]
    fn inserting_what_was_reserved_does_not_grow_the_index() {
        let hash_of = |k: u32| u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for total in [1usize, 10, 11, 1_000, 12_345] {
            let mut index = SlotIndex::default();
            index.insert(hash_of(0), 0, hash_of);
            index.reserve(total, hash_of);
            let chunks = index.chunks.len();
            assert!(chunks * MAX_PER_CHUNK >= total && chunks.is_power_of_two());
            for k in 1..total as u32 {
                index.insert(hash_of(k), k, hash_of);
            }
            assert_eq!(index.chunks.len(), chunks, "{total} slots");
            assert!((0..total as u32).all(|k| index.find(hash_of(k), |s| s == k) == Some(k)));
            // Reserving less than it holds changes nothing.
            index.reserve(total / 2, hash_of);
            assert_eq!(index.chunks.len(), chunks);
        }
    }

    proptest! {
        #[test]
        fn index_matches_a_hashmap_after_a_reserve(
            ops in prop::collection::vec((any::<bool>(), 0u16..512), 0..1_000),
            at in 0usize..1_000,
            total in 0usize..3_000,
            spread in prop::sample::select(vec![0u32, 2, 20]),
        ) {
            check_with_reserve(&ops, spread, Some((at, total)));
        }

        #[test]
        fn index_matches_a_hashmap(
            ops in prop::collection::vec((any::<bool>(), 0u16..512), 0..2_000),
            spread in prop::sample::select(vec![0u32, 2, 5, 20]),
        ) {
            check_against_model(&ops, spread);
        }
    }
}
