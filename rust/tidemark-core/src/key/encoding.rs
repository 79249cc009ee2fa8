//! The key encoding: values and tuples to canonical bytes ([`AsKey`]).

use super::hash::{fold_mul, hash_words};
use super::table::{Head, INLINE_KEY, SHORT_KEY};
use super::{hash_key, tag};
use crate::error::{Result, TidemarkError};

/// Appends the encoding of an `i64`.
#[inline]
pub fn encode_int(v: i64, out: &mut Vec<u8>) {
    out.push(tag::INT);
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends the encoding of a `u64`.
#[inline]
pub fn encode_uint(v: u64, out: &mut Vec<u8>) {
    match i64::try_from(v) {
        Ok(i) => encode_int(i, out),
        Err(_) => {
            out.push(tag::UINT);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Appends the encoding of a string.
#[inline]
pub fn encode_str(v: &str, out: &mut Vec<u8>) {
    BytesKey::str(v).encode(out)
}

/// Appends the encoding of binary data.
#[inline]
pub fn encode_bytes(v: &[u8], out: &mut Vec<u8>) {
    BytesKey::bin(v).encode(out)
}

/// Appends the encoding of a float (`-0.0` and `0.0` are one key, all NaNs are one key).
#[inline]
pub fn encode_float(v: f64, out: &mut Vec<u8>) {
    let v = if v == 0.0 {
        0.0
    } else if v.is_nan() {
        f64::NAN
    } else {
        v
    };
    out.push(tag::FLOAT);
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

/// Appends the encoding of a boolean.
#[inline]
pub fn encode_bool(v: bool, out: &mut Vec<u8>) {
    out.push(tag::BOOL);
    out.push(v as u8);
}

/// Appends the encoding of a null.
#[inline]
pub fn encode_null(out: &mut Vec<u8>) {
    out.push(tag::NULL);
}

/// A Rust value usable as a key.
///
/// # Examples
///
/// ```
/// use tidemark_core::key::AsKey;
/// let (mut a, mut b) = (Vec::new(), Vec::new());
/// ("eu", 7i32).encode_key(&mut a);
/// (String::from("eu"), 7i64).encode_key(&mut b);
/// assert_eq!(a, b);
/// ```
pub trait AsKey {
    /// Appends this key's encoding to `out`.
    fn encode_key(&self, out: &mut Vec<u8>);

    /// This key as a [`WordKey`], if it is one value of a fixed-width type (an
    /// integer): lookups then hash and compare it in registers, with no buffer.
    #[inline]
    fn word_key(&self) -> Option<WordKey> {
        None
    }

    /// This key as a [`BytesKey`], if it is one string or binary value: lookups then
    /// read its bytes in place, with no buffer.
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        None
    }
}

/// A key that is one integer: its encoding is 9 bytes (the type tag, then the value's
/// 8 little-endian bytes), which [`WordKey::hash`] and the key table's
/// [`KeyTable::get_word`](super::KeyTable::get_word) handle as two machine words, never reading memory. Same
/// hash and same slot as the encoded bytes ([`WordKey::bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordKey {
    pub(super) tag: u8,
    pub(super) value: u64,
}

impl WordKey {
    /// An integer key (the encoding of [`encode_int`]).
    #[inline]
    pub fn int(v: i64) -> Self {
        WordKey {
            tag: tag::INT,
            value: v as u64,
        }
    }

    /// An unsigned integer key (the encoding of [`encode_uint`]).
    #[inline]
    pub fn uint(v: u64) -> Self {
        match i64::try_from(v) {
            Ok(i) => Self::int(i),
            Err(_) => WordKey {
                tag: tag::UINT,
                value: v,
            },
        }
    }

    /// The encoded key.
    #[inline]
    pub fn bytes(&self) -> [u8; 9] {
        let mut b = [0u8; 9];
        b[0] = self.tag;
        b[1..].copy_from_slice(&self.value.to_le_bytes());
        b
    }

    /// The encoding's first 8 bytes as a word.
    #[inline(always)]
    pub(super) fn lo(&self) -> u64 {
        u64::from(self.tag) | (self.value << 8)
    }

    /// `hash_key(&self.bytes())`: its first 8 bytes, then its last 8 (the value).
    #[inline(always)]
    pub fn hash(&self) -> u64 {
        hash_words(self.lo(), self.value, 9)
    }
}

/// A key that is one string or binary value (encoded as the tag, the `u32` length,
/// then the bytes). [`BytesKey::hash`] and [`KeyTable::get_bytes`](super::KeyTable::get_bytes) read the value's
/// bytes where they lie, as words: the key is not encoded into a buffer first, whose
/// narrow stores (tag, length, copy) would stall the wide loads reading them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesKey<'a> {
    pub(super) tag: u8,
    pub(super) payload: &'a [u8],
}

impl<'a> BytesKey<'a> {
    /// A string key (the encoding of [`encode_str`]).
    #[inline]
    pub fn str(s: &'a str) -> Self {
        BytesKey {
            tag: tag::STR,
            payload: s.as_bytes(),
        }
    }

    /// A binary key (the encoding of [`encode_bytes`]).
    #[inline]
    pub fn bin(b: &'a [u8]) -> Self {
        BytesKey {
            tag: tag::BIN,
            payload: b,
        }
    }

    /// The key whose encoding is `encoded`, if that is one string or binary value.
    #[inline(always)]
    pub fn of_encoded(encoded: &'a [u8]) -> Option<Self> {
        match encoded {
            [t @ (tag::STR | tag::BIN), a, b, c, d, payload @ ..]
                if u32::from_le_bytes([*a, *b, *c, *d]) as usize == payload.len() =>
            {
                Some(BytesKey { tag: *t, payload })
            }
            _ => None,
        }
    }

    /// Length of the encoding.
    #[inline(always)]
    pub fn encoded_len(&self) -> usize {
        5 + self.payload.len()
    }

    /// Appends the encoding to `out`.
    #[inline]
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.tag);
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(self.payload);
    }

    /// The value's bytes as one little-endian word, zero above its length (at most 16
    /// bytes).
    #[inline(always)]
    fn value(&self) -> u128 {
        let (p, m) = (self.payload, self.payload.len());
        debug_assert!(m <= 16);
        let w8 = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"));
        let w4 = |at: usize| u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes"));
        if m >= 8 {
            let hi = if m > 8 {
                w8(m - 8) >> (8 * (16 - m))
            } else {
                0
            };
            u128::from(w8(0)) | (u128::from(hi) << 64)
        } else if m >= 4 {
            // Two overlapping 4-byte loads (overlapping bytes are equal).
            u128::from(w4(0)) | (u128::from(w4(m - 4)) << (8 * (m - 4)))
        } else if m > 0 {
            u128::from(p[0])
                | (u128::from(p[m / 2]) << (8 * (m / 2)))
                | (u128::from(p[m - 1]) << (8 * (m - 1)))
        } else {
            0
        }
    }

    /// [`hash_key`] of the encoding.
    #[inline(always)]
    pub fn hash(&self) -> u64 {
        let m = self.payload.len();
        let salt = (usize::from(self.tag) << 32) | m;
        if m <= 16 {
            // Words from the value's own bytes: the tag and length go in the salt.
            // Both halves multiplied together (xxh3's 16-byte mix), then folded once
            // more: a value's bytes all reach the top and the bottom bits.
            let value = self.value();
            let h = fold_mul(
                value as u64 ^ 0x243F_6A88_85A3_08D3,
                (value >> 64) as u64 ^ 0x1319_8A2E_0370_7344 ^ salt as u64,
            );
            fold_mul(h ^ 0x4528_21E6_38D0_1377, 0xA409_3822_299F_31D0)
        } else {
            xxhash_rust::xxh3::xxh3_64_with_seed(self.payload, salt as u64)
        }
    }

    /// The [`Head`] of the encoding ([`Head::of`] with a span of 0), from words.
    #[inline(always)]
    pub(super) fn head(&self) -> Head {
        let n = self.encoded_len();
        if n <= INLINE_KEY {
            // The encoding as a word: tag, length, then the value (at most 10 bytes).
            let e = u128::from(self.tag) | ((n as u128 - 5) << 8) | (self.value() << 40);
            Head::from_words(e as u64, ((e >> 64) as u64) | ((n as u64) << 56))
        } else if self.payload.len() <= SHORT_KEY {
            // The value (11 to 15 bytes, its top byte zero), then tag and length.
            let v = self.value();
            let marker = Head::short_marker(self.tag, self.payload.len());
            Head::from_words(v as u64, ((v >> 64) as u64) | (u64::from(marker) << 56))
        } else {
            // The first 7 bytes of the encoding (the value has 11 bytes or more).
            let first = u64::from(self.tag)
                | ((self.payload.len() as u64) << 8)
                | (u64::from_le_bytes(self.payload[..8].try_into().expect("8 bytes")) << 40);
            Head::from_words(
                0,
                (first & 0x00FF_FFFF_FFFF_FFFF) | (u64::from(Head::LONG) << 56),
            )
        }
    }

    /// `true` if `encoded` is this key's encoding.
    #[inline(always)]
    pub(super) fn eq_encoded(&self, encoded: &[u8]) -> bool {
        encoded.len() == self.encoded_len()
            && encoded[0] == self.tag
            && encoded[1..5] == (self.payload.len() as u32).to_le_bytes()
            && key_eq(&encoded[5..], self.payload)
    }
}

macro_rules! int_key {
    ($($t:ty),*) => {$(
        impl AsKey for $t {
            fn encode_key(&self, out: &mut Vec<u8>) {
                encode_int(*self as i64, out)
            }
            #[inline]
            fn word_key(&self) -> Option<WordKey> {
                Some(WordKey::int(*self as i64))
            }
        }
    )*};
}
int_key!(i8, i16, i32, i64, u8, u16, u32);

impl AsKey for u64 {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_uint(*self, out)
    }
    #[inline]
    fn word_key(&self) -> Option<WordKey> {
        Some(WordKey::uint(*self))
    }
}
impl AsKey for str {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_str(self, out)
    }
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        Some(BytesKey::str(self))
    }
}
impl AsKey for String {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_str(self, out)
    }
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        Some(BytesKey::str(self))
    }
}
impl AsKey for [u8] {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_bytes(self, out)
    }
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        Some(BytesKey::bin(self))
    }
}
impl AsKey for Vec<u8> {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_bytes(self, out)
    }
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        Some(BytesKey::bin(self))
    }
}
impl AsKey for bool {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_bool(*self, out)
    }
}
impl AsKey for f64 {
    fn encode_key(&self, out: &mut Vec<u8>) {
        encode_float(*self, out)
    }
}
impl<T: AsKey + ?Sized> AsKey for &T {
    fn encode_key(&self, out: &mut Vec<u8>) {
        (**self).encode_key(out)
    }
    #[inline]
    fn word_key(&self) -> Option<WordKey> {
        (**self).word_key()
    }
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        (**self).bytes_key()
    }
}
impl<T: AsKey> AsKey for Option<T> {
    fn encode_key(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => v.encode_key(out),
            None => encode_null(out),
        }
    }
}
/// An already encoded key (e.g. from [`KeyColumns::key`](super::KeyColumns::key)), usable as an [`AsKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Encoded<'a>(pub &'a [u8]);

impl AsKey for Encoded<'_> {
    fn encode_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0);
    }
    #[inline]
    fn bytes_key(&self) -> Option<BytesKey<'_>> {
        BytesKey::of_encoded(self.0)
    }
}

macro_rules! tuple_key {
    ($(($($n:tt $t:ident),+)),*) => {$(
        impl<$($t: AsKey),+> AsKey for ($($t,)+) {
            fn encode_key(&self, out: &mut Vec<u8>) {
                $(self.$n.encode_key(out);)+
            }
        }
    )*};
}
tuple_key!((0 A, 1 B), (0 A, 1 B, 2 C), (0 A, 1 B, 2 C, 3 D));

/// Equality of two encoded keys, inlined for short keys (no `memcmp` call).
#[inline(always)]
pub fn key_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let n = a.len();
    if (8..=16).contains(&n) {
        // Two overlapping 8-byte loads cover the whole key.
        let w =
            |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        return w(a, 0) == w(b, 0) && w(a, n - 8) == w(b, n - 8);
    }
    if (17..=32).contains(&n) {
        // Four overlapping 8-byte loads (string keys of 12 to 27 bytes).
        let w =
            |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        return ((w(a, 0) ^ w(b, 0))
            | (w(a, 8) ^ w(b, 8))
            | (w(a, n - 16) ^ w(b, n - 16))
            | (w(a, n - 8) ^ w(b, n - 8)))
            == 0;
    }
    a == b
}

/// A row's key as [`KeyRows::for_each_row_key`](super::KeyRows::for_each_row_key) hands it out: an integer as a
/// [`WordKey`] (hashed and compared in registers), any other key as its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKey<'a> {
    /// A key that is one integer.
    Word(WordKey),
    /// A key that is one string or binary value, read in place.
    Str(BytesKey<'a>),
    /// An encoded key.
    Bytes(&'a [u8]),
}

impl RowKey<'_> {
    /// [`hash_key`] of the encoded key.
    #[inline]
    pub fn hash(&self) -> u64 {
        match self {
            RowKey::Word(w) => w.hash(),
            RowKey::Str(b) => b.hash(),
            RowKey::Bytes(b) => hash_key(b),
        }
    }
}

/// Calls `f` with `key` as a [`RowKey`]: a word or a string read in place where it is
/// one, else its encoding (written into `buf`).
#[inline(always)]
pub fn with_row_key<K: AsKey + ?Sized, R>(
    key: &K,
    buf: &mut Vec<u8>,
    f: impl FnOnce(RowKey<'_>) -> R,
) -> R {
    if let Some(w) = key.word_key() {
        f(RowKey::Word(w))
    } else if let Some(b) = key.bytes_key() {
        f(RowKey::Str(b))
    } else {
        buf.clear();
        key.encode_key(buf);
        f(RowKey::Bytes(buf))
    }
}

/// One value of a decoded key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyValue<'a> {
    /// A null.
    Null,
    /// An integer in `i64` range (also dates, times, timestamps, durations).
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// A string.
    Str(&'a str),
    /// Binary data (also a decimal's 16 little-endian bytes).
    Bin(&'a [u8]),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// Decodes the value at `*pos` of an encoded key and moves `pos` past it. Bytes
/// that are not a value's encoding are [`TidemarkError::StateCorrupted`].
pub fn decode_value<'a>(b: &'a [u8], pos: &mut usize) -> Result<KeyValue<'a>> {
    let corrupt = || TidemarkError::StateCorrupted("malformed key encoding".into());
    let t = *b.get(*pos).ok_or_else(corrupt)?;
    *pos += 1;
    let mut fixed = |n: usize| -> Result<&'a [u8]> {
        let s = b.get(*pos..*pos + n).ok_or_else(corrupt)?;
        *pos += n;
        Ok(s)
    };
    Ok(match t {
        tag::NULL => KeyValue::Null,
        tag::INT => KeyValue::Int(i64::from_le_bytes(fixed(8)?.try_into().expect("8"))),
        tag::UINT => KeyValue::UInt(u64::from_le_bytes(fixed(8)?.try_into().expect("8"))),
        tag::FLOAT => KeyValue::Float(f64::from_bits(u64::from_le_bytes(
            fixed(8)?.try_into().expect("8"),
        ))),
        tag::BOOL => KeyValue::Bool(fixed(1)?[0] != 0),
        tag::STR | tag::BIN => {
            let n = u32::from_le_bytes(fixed(4)?.try_into().expect("4")) as usize;
            let v = fixed(n)?;
            if t == tag::STR {
                KeyValue::Str(std::str::from_utf8(v).map_err(|_| {
                    TidemarkError::StateCorrupted("invalid UTF-8 in a string key".into())
                })?)
            } else {
                KeyValue::Bin(v)
            }
        }
        _ => return Err(corrupt()),
    })
}

/// Decodes a whole encoded key into its values (one per key column), the inverse of
/// [`AsKey::encode_key`].
///
/// # Examples
///
/// ```
/// use tidemark_core::key::{decode_key, AsKey, KeyValue};
/// let mut k = Vec::new();
/// ("eu", 7i64).encode_key(&mut k);
/// assert_eq!(decode_key(&k).unwrap(), vec![KeyValue::Str("eu"), KeyValue::Int(7)]);
/// ```
pub fn decode_key(b: &[u8]) -> Result<Vec<KeyValue<'_>>> {
    let mut pos = 0;
    let mut out = Vec::with_capacity(1);
    while pos < b.len() {
        out.push(decode_value(b, &mut pos)?);
    }
    Ok(out)
}
