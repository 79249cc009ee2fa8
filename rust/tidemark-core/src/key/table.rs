//! The interning table: encoded keys to dense slot ids, with inline short keys and
//! a dense index for integer keys.

use super::slot_index::SlotIndex;
use super::{hash_key, key_eq, tag, BytesKey, RowKey, WordKey, MAX_KEY_BYTES};
use crate::error::{Result, TidemarkError};

/// A slot's key as the table stores it (16 bytes): keys of up to [`INLINE_KEY`]
/// encoded bytes (every integer key, strings of up to 10 bytes) are held inline, so
/// a lookup compares one 16-byte word and never reads the arena; so are string and
/// binary values of up to [`SHORT_KEY`] bytes, as the value and a marker (their
/// encoding, up to 20 bytes, does not fit: [`KeyTable::key`](super::KeyTable::key) rebuilds it). Longer keys
/// hold their arena span and their first 7 bytes. The last byte tells which: the
/// inline length, a short value's marker ([`Head::short_marker`]), [`Head::LONG`], or
/// [`Head::FREE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(16))]
pub(super) struct Head(pub(super) [u8; 16]);

/// Longest key held inline in its slot's [`Head`].
pub(super) const INLINE_KEY: usize = 15;

/// Longest string or binary value held in its slot's [`Head`] (as the value's bytes,
/// not its encoding).
pub(super) const SHORT_KEY: usize = 15;

impl Head {
    pub(super) const LONG: u8 = 0xFE;
    const FREE_TAG: u8 = 0xFF;
    const FREE: Head = {
        let mut b = [0u8; 16];
        b[15] = Self::FREE_TAG;
        Head(b)
    };
    /// Markers of short values: `0x40 + length` for strings, `0x60 + length` for
    /// binary.
    const SHORT_STR: u8 = 0x40;
    const SHORT_BIN: u8 = 0x60;

    #[inline(always)]
    pub(super) fn short_marker(tag: u8, len: usize) -> u8 {
        debug_assert!(len <= SHORT_KEY && (tag == tag::STR || tag == tag::BIN));
        (if tag == tag::STR {
            Self::SHORT_STR
        } else {
            Self::SHORT_BIN
        }) + len as u8
    }

    /// The value of a short string or binary head, as a [`BytesKey`] whose payload
    /// lies in the head.
    #[inline(always)]
    pub(super) fn short(&self) -> Option<BytesKey<'_>> {
        let t = self.tag();
        let tag = match t & 0xF0 {
            Self::SHORT_STR => tag::STR,
            Self::SHORT_BIN => tag::BIN,
            _ => return None,
        };
        Some(BytesKey {
            tag,
            payload: &self.0[..usize::from(t & 0x0F)],
        })
    }

    /// Bytes of the key this head holds itself: its encoding when inline, a short
    /// value's bytes (the marker and the rest of the head count as overhead), none for
    /// a long key (its bytes are in the arena).
    #[inline]
    fn held_bytes(&self) -> usize {
        match self.tag() {
            t if usize::from(t) <= INLINE_KEY => usize::from(t),
            Self::LONG | Self::FREE_TAG => 0,
            t => usize::from(t & 0x0F),
        }
    }

    /// The head of `key` (an arena span of 0 for a long key: compare with
    /// [`Self::same_long`]). Built from word loads: no byte copies, so the comparison
    /// that follows reads it from registers.
    #[inline(always)]
    pub(super) fn of(key: &[u8], span: u64) -> Head {
        let n = key.len();
        let w8 = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
        let w4 =
            |at: usize| u32::from_le_bytes(key[at..at + 4].try_into().expect("4 bytes")) as u64;
        if n > INLINE_KEY && n <= SHORT_KEY + 5 {
            if let Some(b) = BytesKey::of_encoded(key) {
                return b.head();
            }
        }
        let (lo, hi) = if n > INLINE_KEY {
            // Span, then the key's bytes 0..7 in bytes 8..15 (the tag replaces byte 7).
            (
                span,
                (w8(0) & 0x00FF_FFFF_FFFF_FFFF) | (u64::from(Self::LONG) << 56),
            )
        } else {
            let (lo, hi) = if n >= 8 {
                // Bytes 8..n are the top n - 8 bytes of the last 8.
                (
                    w8(0),
                    if n > 8 {
                        w8(n - 8) >> (8 * (16 - n))
                    } else {
                        0
                    },
                )
            } else if n >= 4 {
                // Two overlapping 4-byte loads (overlapping bytes are equal).
                (w4(0) | (w4(n - 4) << (8 * (n - 4))), 0)
            } else {
                let lo = key
                    .iter()
                    .enumerate()
                    .fold(0u64, |acc, (i, &b)| acc | (u64::from(b) << (8 * i)));
                (lo, 0)
            };
            (lo, hi | ((n as u64) << 56))
        };
        Head::from_words(lo, hi)
    }

    /// [`Head::of`] the bytes of `key`.
    #[inline(always)]
    pub(super) fn of_word(key: WordKey) -> Head {
        // Bytes 0..8 as the first word; byte 8 (the value's top byte), then the length.
        Head::from_words(key.lo(), (key.value >> 56) | (9 << 56))
    }

    #[inline(always)]
    pub(super) fn from_words(lo: u64, hi: u64) -> Head {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&lo.to_le_bytes());
        b[8..].copy_from_slice(&hi.to_le_bytes());
        Head(b)
    }

    #[inline(always)]
    pub(super) fn tag(&self) -> u8 {
        self.0[15]
    }

    #[inline(always)]
    pub(super) fn span(&self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"))
    }

    /// A long key's bytes in `arena`.
    #[inline(always)]
    fn long_bytes<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        let span = self.span();
        let off = (span >> 24) as usize;
        let len = (span & 0xFF_FFFF) as usize;
        &arena[off..off + len]
    }

    /// The key's encoding (inline, rebuilt from a short value, or in `arena` for a
    /// long key).
    #[inline(always)]
    pub(super) fn key<'a>(&'a self, arena: &'a [u8]) -> KeyBytes<'a> {
        let tag = self.tag();
        if tag as usize <= INLINE_KEY {
            KeyBytes::Borrowed(&self.0[..tag as usize])
        } else if let Some(b) = self.short() {
            let mut buf = [0u8; SHORT_KEY + 5];
            buf[0] = b.tag;
            buf[1] = b.payload.len() as u8;
            buf[5..b.encoded_len()].copy_from_slice(b.payload);
            KeyBytes::Short {
                buf,
                len: b.encoded_len() as u8,
            }
        } else {
            KeyBytes::Borrowed(self.long_bytes(arena))
        }
    }

    /// [`hash_key`] of the key.
    #[inline]
    fn hash(&self, arena: &[u8]) -> u64 {
        match self.short() {
            Some(b) => b.hash(),
            None => hash_key(&self.key(arena)),
        }
    }

    /// `true` if both are long keys with the same first bytes (the span aside).
    #[inline(always)]
    fn same_long(&self, probe: &Head) -> bool {
        let hi = |h: &Head| u64::from_le_bytes(h.0[8..].try_into().expect("8 bytes"));
        hi(self) == hi(probe)
    }
}

/// A key's encoding as [`KeyTable::key`](super::KeyTable::key) gives it back: borrowed from the table, or
/// rebuilt from the slot's head (string and binary values of up to 15 bytes are held
/// there as the value alone). Derefs to the encoded bytes.
#[derive(Clone, Copy)]
pub enum KeyBytes<'a> {
    /// Bytes the table holds.
    Borrowed(&'a [u8]),
    /// A short value's encoding, rebuilt: `buf[..len]`.
    Short {
        /// The encoding, then zeros.
        buf: [u8; SHORT_KEY + 5],
        /// Its length.
        len: u8,
    },
}

impl std::ops::Deref for KeyBytes<'_> {
    type Target = [u8];
    #[inline(always)]
    fn deref(&self) -> &[u8] {
        match self {
            KeyBytes::Borrowed(b) => b,
            KeyBytes::Short { buf, len } => &buf[..usize::from(*len)],
        }
    }
}

impl AsRef<[u8]> for KeyBytes<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for KeyBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl PartialEq for KeyBytes<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for KeyBytes<'_> {}

impl PartialEq<[u8]> for KeyBytes<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<&[u8]> for KeyBytes<'_> {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

/// One slot: the key's head and the caller's value, side by side, so the lookup that
/// compares the key has already brought the value into cache.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Entry<V> {
    pub(super) head: Head,
    pub(super) value: V,
}

/// Interning table: encoded keys to dense slot ids (`u32`), reused after removal, with
/// an optional per-slot value `V` stored next to the key (`table[slot]`).
///
/// Each slot has a 16-byte head that holds short keys inline; longer keys live in
/// one arena (no allocation per key), and removed ones leave holes that are compacted
/// once they outweigh the live bytes (so the arena stays under twice the live bytes
/// plus 64 KiB). A slot's value is `V::default()` while the slot is free. A hash
/// index maps key hashes to slots: chunks of 12 slot ids with one-byte tags, each in
/// one cache line, so a lookup reads that line, then the slot's head.
#[derive(Debug, Clone, Default)]
pub struct KeyTable<V = ()> {
    pub(super) table: SlotIndex,
    /// Integer keys while they are dense (see [`Dense`]); not in `table` then.
    pub(super) dense: Dense,
    pub(super) entries: Vec<Entry<V>>,
    pub(super) arena: Vec<u8>,
    pub(super) free: Vec<u32>,
    pub(super) dead_bytes: usize,
    /// Bytes of the live keys held inline.
    pub(super) inline_bytes: usize,
}

/// Integer keys (`tag::INT`) mapped straight to their slot while they span a dense
/// range, as DuckDB's perfect hash aggregate does for small ranges: one load from a
/// 4-byte-per-value array instead of a hash probe. A key that would stretch the
/// range past [`dense_limit`] turns the map off for good (until `clear`): its keys
/// move to the hash index.
#[derive(Debug, Clone, Default)]
pub(super) enum Dense {
    /// No integer key yet.
    #[default]
    Unused,
    /// `slots[v - base]` is the slot of key `v` plus one (0: absent); `keys` counts
    /// the keys held. Every integer key of the table is here.
    On {
        base: i64,
        slots: Vec<u32>,
        keys: usize,
    },
    /// Integer keys are in the hash index.
    Off,
}

/// Room the dense map may take for `keys` keys (values of range): a quarter of its
/// values used, or 64K values (256 KiB) whatever the count, so keys of a range that
/// small may come in any order.
fn dense_limit(keys: usize) -> u64 {
    4 * keys as u64 + 65_536
}

/// Index of value `v` in a dense map of `len` values starting at `base`, if inside
/// (one unsigned comparison: values below `base` wrap to large offsets).
#[inline(always)]
fn offset(base: i64, v: i64, len: usize) -> Option<usize> {
    let i = v.wrapping_sub(base) as u64;
    (i < len as u64).then_some(i as usize)
}

/// The value of an encoded integer key (`tag::INT`, 8 little-endian bytes).
#[inline(always)]
fn int_of(key: &[u8]) -> Option<i64> {
    match key {
        [tag::INT, rest @ ..] if rest.len() == 8 => {
            Some(i64::from_le_bytes(rest.try_into().expect("8 bytes")))
        }
        _ => None,
    }
}

impl Dense {
    /// `Some(slot)` / `Some(None)` when the map decides (integer keys are all here),
    /// `None` when the hash index holds them.
    #[inline(always)]
    fn get(&self, v: i64) -> Option<Option<u32>> {
        match self {
            Dense::On { base, slots, .. } => {
                // The offset is compared as u64 too: `as usize` truncates on 32 bits.
                let i = v.wrapping_sub(*base) as u64;
                Some(match slots.get(i as usize) {
                    Some(&s) if i < slots.len() as u64 && s != 0 => Some(s - 1),
                    _ => None,
                })
            }
            Dense::Unused => Some(None),
            Dense::Off => None,
        }
    }

    /// Adds key `v` in `slot`; `false` if it does not fit (the caller turns the map
    /// off).
    fn insert(&mut self, v: i64, slot: u32) -> bool {
        match self {
            Dense::Unused => {
                *self = Dense::On {
                    base: v,
                    slots: vec![slot + 1],
                    keys: 1,
                };
                true
            }
            Dense::On { base, slots, keys } => {
                if let Some(i) = offset(*base, v, slots.len()) {
                    // Inside the map's range: it fits whatever the key count (the
                    // range was within the limit when it was reserved or grown).
                    slots[i] = slot + 1;
                    *keys += 1;
                    return true;
                }
                // In i128: the range of two i64 values may not fit an i64.
                let (b, x, len) = (i128::from(*base), i128::from(v), slots.len() as i128);
                let limit = i128::from(dense_limit(*keys + 1));
                let span = (b + len).max(x + 1) - b.min(x);
                if span > limit {
                    return false;
                }
                if x >= b + len {
                    // Vec growth doubles the capacity: amortized O(1) per new value.
                    slots.resize((x - b + 1) as usize, 0);
                } else if x < b {
                    // Grow downwards by as much again as the map holds (within the
                    // limit, and not below i64::MIN): amortized O(1) too.
                    let new_base = (x - len.min(limit - span)).max(i128::from(i64::MIN));
                    let mut grown = vec![0u32; (b - new_base) as usize];
                    grown.extend_from_slice(slots);
                    *slots = grown;
                    *base = new_base as i64;
                }
                slots[(x - i128::from(*base)) as usize] = slot + 1;
                *keys += 1;
                true
            }
            Dense::Off => false,
        }
    }

    /// Prepares an unused map for `keys` integer keys from `lo` to `hi`, if that range
    /// is within [`dense_limit`] of the count: they then stay in the map in whatever
    /// order they come (inserted one by one, a far-off early key would turn it off).
    /// `true` if the map will hold them.
    fn presize(&mut self, lo: i64, hi: i64, keys: usize) -> bool {
        let span = i128::from(hi) - i128::from(lo) + 1;
        match self {
            Dense::Unused if span <= i128::from(dense_limit(keys)) => {
                *self = Dense::On {
                    base: lo,
                    slots: vec![0; span as usize],
                    keys: 0,
                };
                true
            }
            Dense::On { base, slots, .. } => {
                offset(*base, lo, slots.len()).is_some() && offset(*base, hi, slots.len()).is_some()
            }
            _ => false,
        }
    }

    /// Removes key `v`; `false` if the map does not hold integer keys.
    fn remove(&mut self, v: i64) -> bool {
        match self {
            Dense::On { base, slots, keys } => {
                let held = offset(*base, v, slots.len()).map(|i| &mut slots[i]);
                if let Some(s) = held.filter(|s| **s != 0) {
                    *s = 0;
                    *keys -= 1;
                }
                true
            }
            Dense::Unused => true,
            Dense::Off => false,
        }
    }

    fn keys(&self) -> usize {
        match self {
            Dense::On { keys, .. } => *keys,
            _ => 0,
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Dense::On { slots, .. } => slots.capacity() * 4,
            _ => 0,
        }
    }
}

impl<V> std::ops::Index<usize> for KeyTable<V> {
    type Output = V;
    #[inline(always)]
    fn index(&self, slot: usize) -> &V {
        &self.entries[slot].value
    }
}

impl<V> std::ops::IndexMut<usize> for KeyTable<V> {
    #[inline(always)]
    fn index_mut(&mut self, slot: usize) -> &mut V {
        &mut self.entries[slot].value
    }
}

impl KeyTable {
    /// An empty table without per-slot values (`KeyTable::<V>::default()` for one
    /// with).
    pub fn new() -> Self {
        Self::default()
    }
}

impl<V: Copy + Default> KeyTable<V> {
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.table.len() + self.dense.keys()
    }

    /// `true` if the table has no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One more than the largest slot id ever handed out (size per-slot arrays to this).
    pub fn slot_bound(&self) -> usize {
        self.entries.len()
    }

    /// The key in `slot` (its encoding).
    #[inline]
    pub fn key(&self, slot: u32) -> KeyBytes<'_> {
        self.entries[slot as usize].head.key(&self.arena)
    }

    /// The value of `slot` if it holds a key (`None` for free slots and slots past the
    /// end).
    #[inline(always)]
    pub fn live(&self, slot: usize) -> Option<&V> {
        self.entries
            .get(slot)
            .filter(|e| e.head.tag() != Head::FREE_TAG)
            .map(|e| &e.value)
    }

    /// Hints the CPU to bring `slot`'s entry (key head and value) into cache.
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        crate::prefetch_at(&self.entries, slot as usize);
    }

    /// Hints the CPU to bring the hash-index line a lookup of a key with this hash
    /// reads first into cache (for lookups some rows ahead).
    #[inline]
    pub fn prefetch_hash(&self, hash: u64) {
        self.table.prefetch(hash);
    }

    /// Hints the CPU to bring the entry of the likely slot of a key with this hash
    /// into cache: reads the index line [`Self::prefetch_hash`] requested earlier.
    #[inline]
    pub fn prefetch_candidate(&self, hash: u64) {
        if let Some(s) = self.table.candidate(hash) {
            self.prefetch(s);
        }
    }

    /// Keys held in the hash index (integer keys of a dense range are not).
    #[inline]
    pub fn indexed_len(&self) -> usize {
        self.table.len()
    }

    /// `true` if `slot` holds a key.
    pub fn is_live(&self, slot: u32) -> bool {
        self.live(slot as usize).is_some()
    }

    /// The slot of `key`, if present.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<u32> {
        self.get_hashed(key, hash_key(key))
    }

    /// [`Self::get`] with a precomputed [`hash_key`].
    #[inline]
    pub fn get_hashed(&self, key: &[u8], hash: u64) -> Option<u32> {
        if let Some(found) = int_of(key).and_then(|v| self.dense.get(v)) {
            return found;
        }
        if let Some(b) = BytesKey::of_encoded(key) {
            return self.get_bytes(b, hash);
        }
        self.find(hash, Head::of(key, 0), key.len() <= INLINE_KEY, |b| {
            key_eq(b, key)
        })
    }

    /// The slot of the key whose probe head ([`Head::of`] with a span of 0) is
    /// `probe`: for an inline key, one 16-byte comparison (the arena is not read);
    /// for a long one, the head's first bytes, then `same(stored key bytes)`.
    #[inline(always)]
    fn find(
        &self,
        hash: u64,
        probe: Head,
        inline: bool,
        same: impl Fn(&[u8]) -> bool,
    ) -> Option<u32> {
        let (arena, entries) = (&self.arena, &self.entries);
        if inline {
            self.table.find(hash, |s| entries[s as usize].head == probe)
        } else {
            self.table.find(hash, |s| {
                let h = &entries[s as usize].head;
                h.same_long(&probe) && same(h.long_bytes(arena))
            })
        }
    }

    /// [`Self::get_hashed`] for a [`WordKey`] (`hash`: [`WordKey::hash`]).
    #[inline]
    pub fn get_word(&self, key: WordKey, hash: u64) -> Option<u32> {
        if key.tag == tag::INT {
            if let Some(found) = self.dense.get(key.value as i64) {
                return found;
            }
        }
        self.find(hash, Head::of_word(key), true, |_| false)
    }

    /// [`Self::get_hashed`] for a [`BytesKey`] (`hash`: [`BytesKey::hash`]).
    #[inline]
    pub fn get_bytes(&self, key: BytesKey<'_>, hash: u64) -> Option<u32> {
        self.find(hash, key.head(), key.payload.len() <= SHORT_KEY, |b| {
            key.eq_encoded(b)
        })
    }

    /// [`Self::get_hashed`] for a key as [`KeyRows::for_each_row_key`](super::KeyRows::for_each_row_key) gives it
    /// (`hash`: [`RowKey::hash`]).
    #[inline]
    pub fn get_row(&self, key: RowKey<'_>, hash: u64) -> Option<u32> {
        match key {
            RowKey::Word(w) => self.get_word(w, hash),
            RowKey::Str(b) => self.get_bytes(b, hash),
            RowKey::Bytes(b) => self.get_hashed(b, hash),
        }
    }

    /// The slot of `key`, inserting it if absent; the flag says whether it was new.
    #[inline]
    pub fn get_or_insert(&mut self, key: &[u8]) -> Result<(u32, bool)> {
        let hash = hash_key(key);
        if let Some(s) = self.get_hashed(key, hash) {
            return Ok((s, false));
        }
        self.insert_new(key, hash).map(|s| (s, true))
    }

    /// Makes room for `keys` (encoded, absent from the table, each once) before
    /// inserting them: every array is allocated once and the hash index rehashed once
    /// at most, instead of growing by doubling (a restore of a million keys). The room
    /// is for half as many keys again, so that the first keys added afterwards (the
    /// next micro-batch's) do not copy every array into one twice its size. Integer
    /// keys go to the dense map if their range fits it, whatever the insertion order.
    pub fn reserve_keys<'k>(&mut self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let (mut n, mut ints, mut arena) = (0usize, 0usize, 0usize);
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for key in keys {
            n += 1;
            if let Some(v) = int_of(key) {
                ints += 1;
                (lo, hi) = (lo.min(v), hi.max(v));
            } else if Head::of(key, 0).tag() == Head::LONG {
                arena += key.len();
            }
        }
        let headroom = |k: usize| k + k / 2;
        self.entries
            .reserve(headroom(n).saturating_sub(self.free.len()));
        self.arena.reserve(headroom(arena));
        let dense = ints > 0 && self.dense.presize(lo, hi, self.dense.keys() + ints);
        let hashed = if dense { n - ints } else { n };
        let (arena, entries) = (&self.arena, &self.entries);
        self.table
            .reserve(self.table.len() + headroom(hashed), |s| {
                entries[s as usize].head.hash(arena)
            });
    }

    /// Inserts a key known to be absent.
    pub fn insert_new(&mut self, key: &[u8], hash: u64) -> Result<u32> {
        if key.len() > MAX_KEY_BYTES {
            return Err(TidemarkError::KeyTooLong {
                bytes: key.len(),
                limit: MAX_KEY_BYTES,
            });
        }
        let probe = Head::of(key, 0);
        let head = if probe.tag() != Head::LONG {
            self.inline_bytes += probe.held_bytes();
            probe
        } else {
            let off = self.arena.len() as u64;
            if off >= 1 << 40 {
                return Err(TidemarkError::config("key", "key arena exceeds 1 TiB"));
            }
            self.arena.extend_from_slice(key);
            Head::of(key, (off << 24) | key.len() as u64)
        };
        let entry = Entry {
            head,
            value: V::default(),
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.entries[s as usize] = entry;
                s
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        if let Some(v) = int_of(key) {
            if self.dense.insert(v, slot) {
                return Ok(slot);
            }
            self.dense_off();
        }
        let (arena, entries) = (&self.arena, &self.entries);
        self.table
            .insert(hash, slot, |s| entries[s as usize].head.hash(arena));
        Ok(slot)
    }

    /// Moves the dense map's keys to the hash index, for good.
    #[cold]
    fn dense_off(&mut self) {
        if let Dense::On { slots, .. } = std::mem::replace(&mut self.dense, Dense::Off) {
            let (arena, entries) = (&self.arena, &self.entries);
            let rehash = |s: u32| entries[s as usize].head.hash(arena);
            for s in slots.into_iter().filter(|&s| s != 0).map(|s| s - 1) {
                self.table.insert(rehash(s), s, rehash);
            }
        }
    }

    /// Removes the key in `slot` (its id may be handed out again).
    pub fn remove(&mut self, slot: u32) {
        let head = self.entries[slot as usize].head;
        if head.tag() == Head::FREE_TAG {
            return;
        }
        let key = head.key(&self.arena);
        if !int_of(&key).is_some_and(|v| self.dense.remove(v)) {
            self.table.remove(head.hash(&self.arena), slot);
        }
        self.entries[slot as usize] = Entry {
            head: Head::FREE,
            value: V::default(),
        };
        self.free.push(slot);
        if head.tag() != Head::LONG {
            self.inline_bytes -= head.held_bytes();
            return;
        }
        self.dead_bytes += key.len();
        if self.dead_bytes > (1 << 16) && self.dead_bytes * 2 > self.arena.len() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.dead_bytes);
        for head in self
            .entries
            .iter_mut()
            .map(|e| &mut e.head)
            .filter(|h| h.tag() == Head::LONG)
        {
            let bytes = head.long_bytes(&self.arena);
            let off = arena.len() as u64;
            arena.extend_from_slice(bytes);
            *head = Head::of(bytes, (off << 24) | bytes.len() as u64);
        }
        self.arena = arena;
        self.dead_bytes = 0;
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Live slots, in slot order.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.head.tag() != Head::FREE_TAG)
            .map(|(i, _)| i as u32)
    }

    /// Heap bytes held, excluding the key bytes themselves (inline or in the arena);
    /// the slots' values included.
    pub fn overhead_bytes(&self) -> usize {
        self.table.heap_bytes()
            + self.dense.heap_bytes()
            + self.entries.capacity() * std::mem::size_of::<Entry<V>>()
            - self.inline_bytes
            + self.free.capacity() * 4
            + self
                .arena
                .capacity()
                .saturating_sub(self.arena.len() - self.dead_bytes)
    }

    /// Bytes of the live keys: encodings held inline, short values' own bytes, and
    /// the long keys' bytes in the arena.
    pub fn key_bytes(&self) -> usize {
        self.arena.len() - self.dead_bytes + self.inline_bytes
    }
}
