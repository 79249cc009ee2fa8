//! The hash of an encoded key (xxh3, with a register-only path for short keys).

use super::BytesKey;

#[inline(always)]
pub(super) fn fold_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hash of an encoded key: stable across processes (no random seed). Not persisted:
/// snapshots hold the keys' bytes, and routing has its own hashes ([`crate::route`]).
///
/// One string or binary value hashes its own bytes ([`BytesKey::hash`]: two folded
/// 64-bit multiplies up to 16 bytes, xxh3 above); other keys of 8 to 16 bytes (every
/// integer key) take two folded multiplies, the rest xxh3.
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    if let Some(b) = BytesKey::of_encoded(key) {
        return b.hash();
    }
    let n = key.len();
    if (8..=16).contains(&n) {
        let a = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        let b = u64::from_le_bytes(key[n - 8..].try_into().expect("8 bytes"));
        return hash_words(a, b, n);
    }
    xxhash_rust::xxh3::xxh3_64(key)
}

/// [`hash_key`] of an `n`-byte key (8 <= n <= 16) from its first and last 8 bytes.
#[inline(always)]
pub(super) fn hash_words(first: u64, last: u64, n: usize) -> u64 {
    let h = fold_mul(first ^ 0x243F_6A88_85A3_08D3, 0x1319_8A2E_0370_7344);
    fold_mul(h ^ last ^ n as u64, 0xA409_3822_299F_31D0)
}
