//! Floors of forgotten keys: what keeps a key that was evicted (`max_keys`) or
//! expired (`state_ttl`) from reopening a window it already emitted.
//!
//! When a key's state is dropped, its open windows are emitted early and forgotten.
//! With emit on window close a (key, window) comes out once, ever, so a row of that
//! key that falls in such a window later must be late. The operator remembers, per
//! forgotten key, a *floor*: the end of the last window it emitted (and, per key, the
//! key's lateness threshold); a row of a returning key with `ts < floor` is late.
//!
//! Memory is bounded whatever the number of keys: floors live in a max-sketch, `DEPTH`
//! rows of `width` buckets, each holding the **largest** floor of the keys hashed into
//! it; a key's floor is the minimum over its buckets. A key's estimate is therefore at
//! or above its own floor: the sketch errs only towards "late" (a key sharing every
//! bucket with forgotten keys that had later floors has its older rows called late),
//! never towards reopening an emitted window.

use crate::error::{Result, TidemarkError};
use crate::key::hash_key;
use crate::state::{Reader, Writer};

/// Rows of the sketch.
const DEPTH: usize = 2;

/// The floors of forgotten keys (see the module docs). Empty until a key is forgotten.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FloorSketch {
    /// `DEPTH * width` buckets (`i64::MIN`: empty); no buckets until the first insert.
    cells: Vec<i64>,
}

impl FloorSketch {
    /// Buckets per row for a pipeline bounded to `max_keys` keys: about twice as many
    /// as the keys that can be held (forgotten keys are usually of that order), at
    /// least 1,024 and at most 65,536 (1 MiB in all).
    pub(crate) fn width_for(max_keys: Option<usize>) -> usize {
        max_keys
            .unwrap_or(4_096)
            .saturating_mul(2)
            .clamp(1_024, 1 << 16)
            .next_power_of_two()
    }

    /// Whether no key was forgotten yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    fn buckets(&self, key: &[u8]) -> [usize; DEPTH] {
        let width = self.cells.len() / DEPTH;
        let h = hash_key(key);
        // Two independent bucket choices from one 64-bit hash.
        let (a, b) = (h as u32 as usize, (h >> 32) as usize);
        [a & (width - 1), width + (b & (width - 1))]
    }

    /// Remembers `floor` for the encoded `key` (a sketch of `width` buckets per row
    /// is allocated at the first insert).
    pub(crate) fn insert(&mut self, key: &[u8], floor: i64, width: usize) {
        if floor == i64::MIN {
            return;
        }
        if self.cells.is_empty() {
            self.cells = vec![i64::MIN; DEPTH * width];
        }
        for b in self.buckets(key) {
            self.cells[b] = self.cells[b].max(floor);
        }
    }

    /// The floor of the encoded `key` (`i64::MIN`: none): at or above the largest
    /// floor inserted for it.
    pub(crate) fn floor(&self, key: &[u8]) -> i64 {
        if self.cells.is_empty() {
            return i64::MIN;
        }
        self.buckets(key)
            .iter()
            .map(|&b| self.cells[b])
            .min()
            .unwrap_or(i64::MIN)
    }

    /// Merges another sketch of the same width (bucket by bucket, the larger floor).
    pub(crate) fn merge(&mut self, other: &FloorSketch) -> Result<()> {
        if other.cells.is_empty() {
            return Ok(());
        }
        if self.cells.is_empty() {
            self.cells = other.cells.clone();
            return Ok(());
        }
        if self.cells.len() != other.cells.len() {
            return Err(TidemarkError::StateCorrupted(
                "forgotten-key floors of different sizes".into(),
            ));
        }
        for (a, b) in self.cells.iter_mut().zip(&other.cells) {
            *a = (*a).max(*b);
        }
        Ok(())
    }

    pub(crate) fn write(&self, w: &mut Writer) {
        w.len(self.cells.len());
        for &c in &self.cells {
            w.i64(c);
        }
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self> {
        let n = r.len(8)?;
        if n % DEPTH != 0 || (n > 0 && !(n / DEPTH).is_power_of_two()) {
            return Err(TidemarkError::StateCorrupted(
                "forgotten-key floors: bad sketch size".into(),
            ));
        }
        let mut cells = Vec::with_capacity(n);
        for _ in 0..n {
            cells.push(r.i64()?);
        }
        Ok(Self { cells })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every key's estimate is at or above the largest floor inserted for it.
        #[test]
        fn estimates_never_fall_below_a_keys_floor(
            entries in prop::collection::vec((0u16..3_000, -1_000i64..1_000), 0..400),
        ) {
            let mut s = FloorSketch::default();
            let mut exact = std::collections::HashMap::new();
            for &(k, f) in &entries {
                let key = k.to_le_bytes();
                s.insert(&key, f, 1_024);
                let e = exact.entry(k).or_insert(i64::MIN);
                *e = (*e).max(f);
            }
            for (k, f) in exact {
                prop_assert!(s.floor(&k.to_le_bytes()) >= f);
            }
        }
    }

    #[test]
    fn an_unknown_key_has_no_floor_in_a_sparse_sketch() {
        let mut s = FloorSketch::default();
        assert!(s.is_empty());
        assert_eq!(s.floor(b"a"), i64::MIN);
        s.insert(b"a", 10, 1_024);
        assert_eq!(s.floor(b"a"), 10);
        assert_eq!(s.floor(b"b"), i64::MIN);
        let mut w = Writer::new();
        s.write(&mut w);
        let bytes = w.finish();
        let back = FloorSketch::read(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(back, s);
        let mut m = FloorSketch::default();
        m.merge(&back).unwrap();
        m.insert(b"a", 20, 1_024);
        assert_eq!(m.floor(b"a"), 20);
    }
}
