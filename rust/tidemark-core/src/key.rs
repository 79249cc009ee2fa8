//! Keys: one canonical byte encoding for Python values and Arrow columns, and an
//! interning table that maps keys to dense slot ids.
//!
//! A key is one value or a tuple of values (several key columns). Each value encodes
//! as a type tag and its bytes, so the Python key `("eu", 7)` and the Arrow row
//! `region="eu", id=7` (whatever the integer width) are the same key:
//!
//! | tag | value | bytes after the tag |
//! |---|---|---|
//! | `0` | null | none |
//! | `1` | integer in `i64` range (also dates, times, timestamps, durations) | 8, little-endian |
//! | `2` | unsigned integer above `i64::MAX` | 8, little-endian |
//! | `3` | string | `u32` length, UTF-8 bytes |
//! | `4` | binary | `u32` length, bytes |
//! | `5` | float (`-0.0` as `0.0`, one NaN) | 8, `f64` bits |
//! | `6` | boolean | 1 |
//!
//! Every value is self-delimiting, so a tuple is the concatenation of its values.
//! Null keys are a key of their own (as in SQL `GROUP BY`). The encoding is stable:
//! it is part of snapshots.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use crate::error::{Result, TidemarkError};
use crate::slot_index::SlotIndex;

/// Type tags of the key encoding.
pub mod tag {
    /// A null value.
    pub const NULL: u8 = 0;
    /// An integer in `i64` range.
    pub const INT: u8 = 1;
    /// An unsigned integer above `i64::MAX`.
    pub const UINT: u8 = 2;
    /// A UTF-8 string.
    pub const STR: u8 = 3;
    /// Binary data.
    pub const BIN: u8 = 4;
    /// A float.
    pub const FLOAT: u8 = 5;
    /// A boolean.
    pub const BOOL: u8 = 6;
}

/// Longest key the table stores (16 MiB).
pub const MAX_KEY_BYTES: usize = (1 << 24) - 1;

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
/// [`KeyTable::get_word`] handle as two machine words, never reading memory. Same
/// hash and same slot as the encoded bytes ([`WordKey::bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordKey {
    tag: u8,
    value: u64,
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
    fn lo(&self) -> u64 {
        u64::from(self.tag) | (self.value << 8)
    }

    /// `hash_key(&self.bytes())`: its first 8 bytes, then its last 8 (the value).
    #[inline(always)]
    pub fn hash(&self) -> u64 {
        hash_words(self.lo(), self.value, 9)
    }
}

/// A key that is one string or binary value (encoded as the tag, the `u32` length,
/// then the bytes). [`BytesKey::hash`] and [`KeyTable::get_bytes`] read the value's
/// bytes where they lie, as words: the key is not encoded into a buffer first, whose
/// narrow stores (tag, length, copy) would stall the wide loads reading them back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesKey<'a> {
    tag: u8,
    payload: &'a [u8],
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
    fn head(&self) -> Head {
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
    fn eq_encoded(&self, encoded: &[u8]) -> bool {
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
/// An already encoded key (e.g. from [`KeyColumns::key`]), usable as an [`AsKey`].
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

/// One key column, normalised for encoding row by row.
#[derive(Debug, Clone)]
enum Col {
    Int(ArrayRef),
    UInt64(ArrayRef),
    Float(ArrayRef),
    Bool(ArrayRef),
    Utf8(ArrayRef),
    LargeUtf8(ArrayRef),
    Utf8View(ArrayRef),
    Binary(ArrayRef),
    LargeBinary(ArrayRef),
    BinaryView(ArrayRef),
    FixedBinary(ArrayRef),
    /// Dictionary: per-row value index (`-1`: null) and the encoded values.
    Dict(Vec<i64>, Vec<Vec<u8>>),
    Null,
}

/// Whether a column of type `b` holds the same values, and so the same keys or
/// aggregate states, as a column of type `a`: the same type, or another layout of it
/// (`Utf8`, `LargeUtf8` and `Utf8View`; `Binary`, `LargeBinary` and `BinaryView`; a
/// dictionary of any of them), or a timestamp of the same unit in another time zone
/// (the same instants). Keys and the values of `min`, `max`, `first` and `last` keep
/// a timestamp's own unit, so a change of unit is a change of values.
pub fn same_values(a: &DataType, b: &DataType) -> bool {
    fn layout_free(t: &DataType) -> DataType {
        match t {
            DataType::Dictionary(_, v) => layout_free(v),
            DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
            DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
            DataType::Timestamp(unit, Some(_)) => DataType::Timestamp(*unit, Some("UTC".into())),
            t => t.clone(),
        }
    }
    layout_free(a) == layout_free(b)
}

/// `true` if a column of this type can be a key column.
pub fn is_key_type(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, v) => is_key_type(v),
        DataType::Null
        | DataType::Boolean
        | DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_)
        | DataType::Decimal128(_, _) => true,
        dt => int_like(dt),
    }
}

fn int_like(dt: &DataType) -> bool {
    dt.is_integer()
        || matches!(
            dt,
            DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(_, _)
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Duration(_)
        )
}

fn unsupported(dt: &DataType) -> TidemarkError {
    TidemarkError::config(
        "key",
        format!(
            "a {dt} column cannot be a key; keys may be integer, float, decimal, boolean, date, \
             time, timestamp, string, binary or dictionary columns"
        ),
    )
}

impl Col {
    fn new(a: &ArrayRef) -> Result<Col> {
        let dt = a.data_type();
        Ok(match dt {
            DataType::Null => Col::Null,
            DataType::UInt64 => Col::UInt64(a.clone()),
            DataType::Int64 => Col::Int(a.clone()),
            dt if int_like(dt) => {
                // Narrower integers and temporal types: their i64 value is the key.
                let as_i64 = match dt {
                    DataType::Date32 | DataType::Time32(_) => {
                        arrow_cast::cast(&arrow_cast::cast(a, &DataType::Int32)?, &DataType::Int64)?
                    }
                    _ => arrow_cast::cast(a, &DataType::Int64)?,
                };
                Col::Int(as_i64)
            }
            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                Col::Float(arrow_cast::cast(a, &DataType::Float64)?)
            }
            DataType::Boolean => Col::Bool(a.clone()),
            DataType::Utf8 => Col::Utf8(a.clone()),
            DataType::LargeUtf8 => Col::LargeUtf8(a.clone()),
            DataType::Utf8View => Col::Utf8View(a.clone()),
            DataType::Binary => Col::Binary(a.clone()),
            DataType::LargeBinary => Col::LargeBinary(a.clone()),
            DataType::BinaryView => Col::BinaryView(a.clone()),
            DataType::FixedSizeBinary(_) => Col::FixedBinary(a.clone()),
            DataType::Decimal128(_, _) => {
                // The 16 little-endian bytes of each unscaled value (one type per column,
                // so equal bytes are equal values), read in place.
                let d = a.as_primitive::<Decimal128Type>();
                Col::FixedBinary(Arc::new(arrow_array::FixedSizeBinaryArray::new(
                    16,
                    d.values().inner().clone(),
                    d.nulls().cloned(),
                )))
            }
            DataType::Dictionary(_, _) => {
                let dict = a.as_any_dictionary();
                let values = Col::new(dict.values())?;
                let mut encoded = Vec::with_capacity(dict.values().len());
                for i in 0..dict.values().len() {
                    let mut v = Vec::new();
                    values.encode(i, &mut v);
                    encoded.push(v);
                }
                let idx = arrow_cast::cast(dict.keys(), &DataType::Int64)?;
                let idx = idx.as_primitive::<Int64Type>();
                let rows = (0..a.len())
                    .map(|i| if a.is_null(i) { -1 } else { idx.value(i) })
                    .collect();
                Col::Dict(rows, encoded)
            }
            other => return Err(unsupported(other)),
        })
    }

    #[inline]
    fn encode(&self, row: usize, out: &mut Vec<u8>) {
        macro_rules! nullable {
            ($a:expr, $body:expr) => {
                if $a.is_null(row) {
                    encode_null(out)
                } else {
                    $body
                }
            };
        }
        match self {
            Col::Null => encode_null(out),
            Col::Int(a) => {
                let a = a.as_primitive::<Int64Type>();
                nullable!(a, encode_int(a.value(row), out))
            }
            Col::UInt64(a) => {
                let a = a.as_primitive::<UInt64Type>();
                nullable!(a, encode_uint(a.value(row), out))
            }
            Col::Float(a) => {
                let a = a.as_primitive::<Float64Type>();
                nullable!(a, encode_float(a.value(row), out))
            }
            Col::Bool(a) => {
                let a = a.as_boolean();
                nullable!(a, encode_bool(a.value(row), out))
            }
            Col::Utf8(a) => {
                let a = a.as_string::<i32>();
                nullable!(a, encode_str(a.value(row), out))
            }
            Col::LargeUtf8(a) => {
                let a = a.as_string::<i64>();
                nullable!(a, encode_str(a.value(row), out))
            }
            Col::Utf8View(a) => {
                let a = a.as_string_view();
                nullable!(a, encode_str(a.value(row), out))
            }
            Col::Binary(a) => {
                let a = a.as_binary::<i32>();
                nullable!(a, encode_bytes(a.value(row), out))
            }
            Col::LargeBinary(a) => {
                let a = a.as_binary::<i64>();
                nullable!(a, encode_bytes(a.value(row), out))
            }
            Col::BinaryView(a) => {
                let a = a.as_binary_view();
                nullable!(a, encode_bytes(a.value(row), out))
            }
            Col::FixedBinary(a) => {
                let a = a.as_fixed_size_binary();
                nullable!(a, encode_bytes(a.value(row), out))
            }
            Col::Dict(rows, values) => match rows[row] {
                -1 => encode_null(out),
                i => out.extend_from_slice(&values[i as usize]),
            },
        }
    }
}

/// Encodes the key of each row of one or more key columns.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{ArrayRef, Int32Array, StringArray};
/// use tidemark_core::key::{AsKey, KeyColumns};
///
/// let region: ArrayRef = Arc::new(StringArray::from(vec!["eu", "us"]));
/// let id: ArrayRef = Arc::new(Int32Array::from(vec![7, 8]));
/// let keys = KeyColumns::new(&[region, id]).unwrap();
/// let mut row0 = Vec::new();
/// keys.encode(0, &mut row0);
/// let mut expected = Vec::new();
/// ("eu", 7i64).encode_key(&mut expected);
/// assert_eq!(row0, expected);
/// ```
#[derive(Debug, Clone)]
pub struct KeyColumns {
    cols: Vec<Col>,
    len: usize,
}

impl KeyColumns {
    /// Prepares key columns (all of the same length) for encoding.
    pub fn new(columns: &[ArrayRef]) -> Result<Self> {
        let len = columns.first().map_or(0, |c| c.len());
        if columns.iter().any(|c| c.len() != len) {
            return Err(TidemarkError::config(
                "key",
                "key columns must all have the same length",
            ));
        }
        Ok(Self {
            cols: columns.iter().map(Col::new).collect::<Result<_>>()?,
            len,
        })
    }

    /// A single key column.
    pub fn single(column: ArrayRef) -> Result<Self> {
        Self::new(&[column])
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` if there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the key of `row` to `out`.
    #[inline]
    pub fn encode(&self, row: usize, out: &mut Vec<u8>) {
        for c in &self.cols {
            c.encode(row, out);
        }
    }

    /// The key of `row` as bytes.
    pub fn key(&self, row: usize) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(row, &mut v);
        v
    }
}

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

/// A row's key as [`KeyRows::for_each_row_key`] hands it out: an integer as a
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

/// Rows of encoded keys, visited in order.
pub trait KeyRows {
    /// Number of rows.
    fn num_rows(&self) -> usize;
    /// Calls `f(row, key)` for every row, in row order.
    fn for_each_key(&self, f: impl FnMut(usize, &[u8]));
    /// [`Self::for_each_key`], with integer keys as [`RowKey::Word`] and string or
    /// binary keys as [`RowKey::Str`] where the rows have them at hand (a single key
    /// column of such a type).
    #[inline]
    fn for_each_row_key(&self, mut f: impl FnMut(usize, RowKey<'_>)) {
        self.for_each_key(|i, k| f(i, RowKey::Bytes(k)))
    }
}

impl KeyRows for KeyColumns {
    fn num_rows(&self) -> usize {
        self.len
    }

    #[inline]
    fn for_each_row_key(&self, mut f: impl FnMut(usize, RowKey<'_>)) {
        // One string or binary column: each value as it lies in the column.
        macro_rules! values {
            ($a:expr, $key:expr) => {{
                let a = $a;
                for i in 0..self.len {
                    if a.is_null(i) {
                        f(i, RowKey::Bytes(&[tag::NULL]));
                    } else {
                        f(i, RowKey::Str($key(a.value(i))));
                    }
                }
            }};
        }
        match self.cols.as_slice() {
            [Col::Int(a)] => {
                let a = a.as_primitive::<Int64Type>();
                for (i, &v) in a.values().iter().enumerate() {
                    if a.is_null(i) {
                        f(i, RowKey::Bytes(&[tag::NULL]));
                    } else {
                        f(i, RowKey::Word(WordKey::int(v)));
                    }
                }
            }
            [Col::Utf8(a)] => values!(a.as_string::<i32>(), BytesKey::str),
            [Col::LargeUtf8(a)] => values!(a.as_string::<i64>(), BytesKey::str),
            [Col::Utf8View(a)] => values!(a.as_string_view(), BytesKey::str),
            [Col::Binary(a)] => values!(a.as_binary::<i32>(), BytesKey::bin),
            [Col::LargeBinary(a)] => values!(a.as_binary::<i64>(), BytesKey::bin),
            [Col::BinaryView(a)] => values!(a.as_binary_view(), BytesKey::bin),
            _ => self.for_each_key(|i, k| f(i, RowKey::Bytes(k))),
        }
    }

    #[inline]
    fn for_each_key(&self, mut f: impl FnMut(usize, &[u8])) {
        // Specialised loops for the common single-column keys; the general path
        // encodes column by column.
        macro_rules! strings {
            ($a:expr) => {{
                let a = $a;
                encode_chunked(self.len, &mut f, |i, buf| {
                    if a.is_null(i) {
                        encode_null(buf);
                    } else {
                        encode_str(a.value(i), buf);
                    }
                });
                return;
            }};
        }
        match self.cols.as_slice() {
            [Col::Int(a)] => {
                let a = a.as_primitive::<Int64Type>();
                encode_chunked(self.len, &mut f, |i, buf| {
                    if a.is_null(i) {
                        encode_null(buf);
                    } else {
                        encode_int(a.value(i), buf);
                    }
                });
            }
            [Col::Utf8(a)] => strings!(a.as_string::<i32>()),
            [Col::LargeUtf8(a)] => strings!(a.as_string::<i64>()),
            [Col::Utf8View(a)] => strings!(a.as_string_view()),
            _ => encode_chunked(self.len, &mut f, |i, buf| self.encode(i, buf)),
        }
    }
}

/// Calls `f(row, key)` for rows `0..rows`, with keys encoded by `encode(row, buf)`
/// a chunk of rows at a time: a key is read (hashed, compared) well after its bytes
/// were written, never straight after (a read that spans several fresh writes waits
/// for them to reach the cache).
#[inline]
pub(crate) fn encode_chunked(
    rows: usize,
    f: &mut impl FnMut(usize, &[u8]),
    mut encode: impl FnMut(usize, &mut Vec<u8>),
) {
    const CHUNK: usize = 128;
    let mut buf = Vec::with_capacity(CHUNK * 32);
    let mut ends = [0usize; CHUNK];
    let mut start = 0;
    while start < rows {
        let end = (start + CHUNK).min(rows);
        buf.clear();
        for (i, e) in (start..end).zip(ends.iter_mut()) {
            encode(i, &mut buf);
            *e = buf.len();
        }
        let mut from = 0;
        for (i, &e) in (start..end).zip(ends.iter()) {
            f(i, &buf[from..e]);
            from = e;
        }
        start = end;
    }
}

/// Encoded keys stored back to back (no allocation per key).
#[derive(Debug, Clone, Default)]
pub struct EncodedRows {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl EncodedRows {
    /// Empty, with room for `rows` keys of `bytes` bytes in all.
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        EncodedRows {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(rows),
        }
    }

    /// The key of row `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Encodes every key of an iterator.
    pub fn from_keys<'a, K: AsKey + 'a>(keys: impl Iterator<Item = &'a K>) -> Self {
        let mut rows = EncodedRows::default();
        for k in keys {
            rows.push_key(k);
        }
        rows
    }

    /// Empties, keeping the allocations (to refill a reused buffer).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Encodes and appends one key.
    #[inline]
    pub fn push_key<K: AsKey + ?Sized>(&mut self, key: &K) {
        key.encode_key(&mut self.bytes);
        self.ends.push(self.bytes.len());
    }

    /// Appends one encoded key.
    pub fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }
}

impl KeyRows for EncodedRows {
    fn num_rows(&self) -> usize {
        self.ends.len()
    }

    fn for_each_key(&self, mut f: impl FnMut(usize, &[u8])) {
        let mut start = 0;
        for (i, &end) in self.ends.iter().enumerate() {
            f(i, &self.bytes[start..end]);
            start = end;
        }
    }
}

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
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
fn hash_words(first: u64, last: u64, n: usize) -> u64 {
    let h = fold_mul(first ^ 0x243F_6A88_85A3_08D3, 0x1319_8A2E_0370_7344);
    fold_mul(h ^ last ^ n as u64, 0xA409_3822_299F_31D0)
}

/// A slot's key as the table stores it (16 bytes): keys of up to [`INLINE_KEY`]
/// encoded bytes (every integer key, strings of up to 10 bytes) are held inline, so
/// a lookup compares one 16-byte word and never reads the arena; so are string and
/// binary values of up to [`SHORT_KEY`] bytes, as the value and a marker (their
/// encoding, up to 20 bytes, does not fit: [`KeyTable::key`] rebuilds it). Longer keys
/// hold their arena span and their first 7 bytes. The last byte tells which: the
/// inline length, a short value's marker ([`Head::short_marker`]), [`Head::LONG`], or
/// [`Head::FREE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(16))]
struct Head([u8; 16]);

/// Longest key held inline in its slot's [`Head`].
const INLINE_KEY: usize = 15;

/// Longest string or binary value held in its slot's [`Head`] (as the value's bytes,
/// not its encoding).
const SHORT_KEY: usize = 15;

impl Head {
    const LONG: u8 = 0xFE;
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
    fn short_marker(tag: u8, len: usize) -> u8 {
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
    fn short(&self) -> Option<BytesKey<'_>> {
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
    fn of(key: &[u8], span: u64) -> Head {
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
    fn of_word(key: WordKey) -> Head {
        // Bytes 0..8 as the first word; byte 8 (the value's top byte), then the length.
        Head::from_words(key.lo(), (key.value >> 56) | (9 << 56))
    }

    #[inline(always)]
    fn from_words(lo: u64, hi: u64) -> Head {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&lo.to_le_bytes());
        b[8..].copy_from_slice(&hi.to_le_bytes());
        Head(b)
    }

    #[inline(always)]
    fn tag(&self) -> u8 {
        self.0[15]
    }

    #[inline(always)]
    fn span(&self) -> u64 {
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
    fn key<'a>(&'a self, arena: &'a [u8]) -> KeyBytes<'a> {
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

/// A key's encoding as [`KeyTable::key`] gives it back: borrowed from the table, or
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
struct Entry<V> {
    head: Head,
    value: V,
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
    table: SlotIndex,
    /// Integer keys while they are dense (see [`Dense`]); not in `table` then.
    dense: Dense,
    entries: Vec<Entry<V>>,
    arena: Vec<u8>,
    free: Vec<u32>,
    dead_bytes: usize,
    /// Bytes of the live keys held inline.
    inline_bytes: usize,
}

/// Integer keys (`tag::INT`) mapped straight to their slot while they span a dense
/// range, as DuckDB's perfect hash aggregate does for small ranges: one load from a
/// 4-byte-per-value array instead of a hash probe. A key that would stretch the
/// range past [`dense_limit`] turns the map off for good (until `clear`): its keys
/// move to the hash index.
#[derive(Debug, Clone, Default)]
enum Dense {
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

    /// [`Self::get_hashed`] for a key as [`KeyRows::for_each_row_key`] gives it
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
            return Err(TidemarkError::config(
                "key",
                format!(
                    "a key of {} bytes is longer than the supported {} bytes",
                    key.len(),
                    MAX_KEY_BYTES
                ),
            ));
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

/// One decoded key value.
#[derive(Debug, Clone, PartialEq)]
enum Decoded<'a> {
    Null,
    Int(i64),
    UInt(u64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Float(f64),
    Bool(bool),
}

fn decode_one<'a>(b: &'a [u8], pos: &mut usize) -> Result<Decoded<'a>> {
    let corrupt = || TidemarkError::StateCorrupted("malformed key encoding".into());
    let t = *b.get(*pos).ok_or_else(corrupt)?;
    *pos += 1;
    let mut fixed = |n: usize| -> Result<&'a [u8]> {
        let s = b.get(*pos..*pos + n).ok_or_else(corrupt)?;
        *pos += n;
        Ok(s)
    };
    Ok(match t {
        tag::NULL => Decoded::Null,
        tag::INT => Decoded::Int(i64::from_le_bytes(fixed(8)?.try_into().expect("8"))),
        tag::UINT => Decoded::UInt(u64::from_le_bytes(fixed(8)?.try_into().expect("8"))),
        tag::FLOAT => Decoded::Float(f64::from_bits(u64::from_le_bytes(
            fixed(8)?.try_into().expect("8"),
        ))),
        tag::BOOL => Decoded::Bool(fixed(1)?[0] != 0),
        tag::STR | tag::BIN => {
            let n = u32::from_le_bytes(fixed(4)?.try_into().expect("4")) as usize;
            let v = fixed(n)?;
            if t == tag::STR {
                Decoded::Str(v)
            } else {
                Decoded::Bin(v)
            }
        }
        _ => return Err(corrupt()),
    })
}

/// Decodes encoded keys back into Arrow columns of the given types (the key columns'
/// input types), one column per type. The inverse of [`KeyColumns`].
///
/// # Examples
///
/// ```
/// use arrow_array::Array;
/// use arrow_schema::DataType;
/// use tidemark_core::key::{decode_key_columns, AsKey};
/// let mut k = Vec::new();
/// ("eu", 7i64).encode_key(&mut k);
/// let cols = decode_key_columns(&[k.as_slice()], &[DataType::LargeUtf8, DataType::Int16]).unwrap();
/// assert_eq!(cols[0].data_type(), &DataType::LargeUtf8);
/// assert_eq!(cols[1].data_type(), &DataType::Int16);
/// ```
pub fn decode_key_columns(keys: &[&[u8]], types: &[DataType]) -> Result<Vec<ArrayRef>> {
    use arrow_array::builder::*;
    let mut values: Vec<Vec<Decoded<'_>>> = vec![Vec::with_capacity(keys.len()); types.len()];
    for k in keys {
        let mut pos = 0;
        for col in values.iter_mut() {
            col.push(decode_one(k, &mut pos)?);
        }
    }
    let mut out = Vec::with_capacity(types.len());
    for (vals, dt) in values.iter().zip(types) {
        let target = match dt {
            DataType::Dictionary(_, v) => v.as_ref(),
            d => d,
        };
        let arr: ArrayRef = match target {
            DataType::Null => Arc::new(arrow_array::NullArray::new(vals.len())),
            DataType::UInt64 => {
                let mut b = UInt64Builder::new();
                for v in vals {
                    match v {
                        Decoded::UInt(u) => b.append_value(*u),
                        Decoded::Int(i) => b.append_value(*i as u64),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            d if int_like(d) => {
                let mut b = Int64Builder::new();
                for v in vals {
                    match v {
                        Decoded::Int(i) => b.append_value(*i),
                        _ => b.append_null(),
                    }
                }
                let ints: ArrayRef = Arc::new(b.finish());
                match d {
                    DataType::Date32 | DataType::Time32(_) => {
                        arrow_cast::cast(&arrow_cast::cast(&ints, &DataType::Int32)?, d)?
                    }
                    _ => arrow_cast::cast(&ints, d)?,
                }
            }
            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                let mut b = Float64Builder::new();
                for v in vals {
                    match v {
                        Decoded::Float(f) => b.append_value(*f),
                        _ => b.append_null(),
                    }
                }
                arrow_cast::cast(&(Arc::new(b.finish()) as ArrayRef), target)?
            }
            DataType::Boolean => {
                let mut b = BooleanBuilder::new();
                for v in vals {
                    match v {
                        Decoded::Bool(x) => b.append_value(*x),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                let mut b = StringBuilder::new();
                for v in vals {
                    match v {
                        Decoded::Str(s) => {
                            b.append_value(std::str::from_utf8(s).map_err(|_| {
                                TidemarkError::StateCorrupted(
                                    "invalid UTF-8 in a string key".into(),
                                )
                            })?)
                        }
                        _ => b.append_null(),
                    }
                }
                arrow_cast::cast(&(Arc::new(b.finish()) as ArrayRef), target)?
            }
            DataType::Decimal128(p, sc) => {
                let mut b = Decimal128Builder::new();
                for v in vals {
                    match v {
                        Decoded::Bin(s) => {
                            let bytes: [u8; 16] = (*s).try_into().map_err(|_| {
                                TidemarkError::StateCorrupted(format!(
                                    "a decimal key of {} bytes, not 16",
                                    s.len()
                                ))
                            })?;
                            b.append_value(i128::from_le_bytes(bytes))
                        }
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish().with_precision_and_scale(*p, *sc)?)
            }
            DataType::FixedSizeBinary(n) => {
                let mut b = FixedSizeBinaryBuilder::new(*n);
                for v in vals {
                    match v {
                        Decoded::Bin(s) => b.append_value(s)?,
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                let mut b = BinaryBuilder::new();
                for v in vals {
                    match v {
                        Decoded::Bin(s) => b.append_value(s),
                        _ => b.append_null(),
                    }
                }
                arrow_cast::cast(&(Arc::new(b.finish()) as ArrayRef), target)?
            }
            other => return Err(unsupported(other)),
        };
        out.push(if matches!(dt, DataType::Dictionary(_, _)) {
            arrow_cast::cast(&arr, dt)?
        } else {
            arr
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        DictionaryArray, Float64Array, Int16Array, Int64Array, LargeStringArray, StringArray,
        UInt64Array,
    };
    use proptest::prelude::*;
    use std::sync::Arc;

    fn enc<K: AsKey>(k: K) -> Vec<u8> {
        let mut v = Vec::new();
        k.encode_key(&mut v);
        v
    }

    #[test]
    fn arrow_columns_encode_like_rust_values() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(LargeStringArray::from(vec![Some("a"), None])),
            Arc::new(Int16Array::from(vec![3, -4])),
        ];
        let k = KeyColumns::new(&cols).unwrap();
        assert_eq!(k.key(0), enc(("a", 3i64)));
        assert_eq!(k.key(1), enc((None::<&str>, -4i64)));

        let d: DictionaryArray<Int32Type> = vec![Some("x"), None, Some("x")].into_iter().collect();
        let k = KeyColumns::single(Arc::new(d)).unwrap();
        assert_eq!(k.key(0), enc("x"));
        assert_eq!(k.key(1), vec![tag::NULL]);
        assert_eq!(k.key(2), enc(String::from("x")));

        let u = KeyColumns::single(Arc::new(UInt64Array::from(vec![5, u64::MAX]))).unwrap();
        assert_eq!(u.key(0), enc(5i64));
        assert_eq!(u.key(1)[0], tag::UINT);

        let f =
            KeyColumns::single(Arc::new(Float64Array::from(vec![-0.0, 0.0, f64::NAN]))).unwrap();
        assert_eq!(f.key(0), f.key(1));
        assert_eq!(f.key(2), enc(f64::NAN));
    }

    #[test]
    fn decode_round_trips_column_types() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(
                arrow_array::TimestampMillisecondArray::from(vec![Some(5), None])
                    .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec![Some("a"), Some("b")])),
            Arc::new(
                vec![Some("x"), None]
                    .into_iter()
                    .collect::<DictionaryArray<Int8Type>>(),
            ),
            Arc::new(UInt64Array::from(vec![u64::MAX, 1])),
            Arc::new(arrow_array::Date32Array::from(vec![3, 4])),
            Arc::new(arrow_array::BooleanArray::from(vec![true, false])),
            Arc::new(
                arrow_array::Decimal128Array::from(vec![Some(-12_345), None])
                    .with_precision_and_scale(30, 2)
                    .unwrap(),
            ),
            // A slice: the key reads the values at the array's offset.
            Arc::new(
                arrow_array::Decimal128Array::from(vec![7, i128::MIN, i128::MAX])
                    .with_precision_and_scale(38, 0)
                    .unwrap()
                    .slice(1, 2),
            ),
        ];
        let kc = KeyColumns::new(&cols).unwrap();
        let keys: Vec<Vec<u8>> = (0..2).map(|i| kc.key(i)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let types: Vec<DataType> = cols.iter().map(|c| c.data_type().clone()).collect();
        let back = decode_key_columns(&refs, &types).unwrap();
        for (a, b) in cols.iter().zip(&back) {
            assert_eq!(a.as_ref(), b.as_ref());
        }
    }

    #[test]
    fn unsupported_types_are_config_errors() {
        let l: ArrayRef = Arc::new(arrow_array::ListArray::new_null(
            Arc::new(arrow_schema::Field::new("x", DataType::Int32, true)),
            1,
        ));
        let e = KeyColumns::single(l).unwrap_err();
        assert!(e.to_string().contains("cannot be a key"), "{e}");
    }

    #[test]
    fn dense_integer_keys_skip_the_hash_index_until_they_spread() {
        let mut t = KeyTable::new();
        for v in (0..10_000i64).rev() {
            t.get_or_insert(&enc(v)).unwrap();
        }
        assert!(matches!(t.dense, Dense::On { .. }));
        assert_eq!(t.table.len(), 0);
        assert!(t.overhead_bytes() < 10_000 * (32 + 8) + 256 * 1024);
        // A value far away: every integer key moves to the hash index.
        let (far, _) = t.get_or_insert(&enc(1i64 << 40)).unwrap();
        assert!(matches!(t.dense, Dense::Off));
        assert_eq!(t.len(), 10_001);
        assert_eq!(t.table.len(), 10_001);
        for v in 0..10_000i64 {
            let w = WordKey::int(v);
            assert_eq!(t.get_word(w, w.hash()), t.get(&enc(v)));
            assert_eq!(t.key(t.get(&enc(v)).unwrap()), enc(v).as_slice());
        }
        assert_eq!(t.get(&enc(1i64 << 40)), Some(far));
        t.clear();
        assert!(matches!(t.dense, Dense::Unused));
    }

    #[test]
    fn reserved_keys_insert_without_growth_and_dense_ints_in_any_order() {
        // Integer keys over a range wider than the dense map's floor (64K values),
        // inserted in a scattered order: one at a time, an early far-off key would
        // have turned the map off; reserved first, they all stay in it.
        let ints: Vec<Vec<u8>> = (0..100_000i64)
            .map(|i| enc(i * 7_919 % 100_000 * 3))
            .collect();
        let mut unreserved = KeyTable::new();
        for k in &ints[..10] {
            unreserved.insert_new(k, hash_key(k)).unwrap();
        }
        assert!(matches!(unreserved.dense, Dense::Off));
        let mut t = KeyTable::new();
        t.reserve_keys(ints.iter().map(Vec::as_slice));
        let entries = t.entries.capacity();
        for k in &ints {
            t.insert_new(k, hash_key(k)).unwrap();
        }
        assert!(matches!(t.dense, Dense::On { .. }));
        assert_eq!(
            (t.table.len(), t.len(), t.entries.capacity()),
            (0, 100_000, entries)
        );
        for k in &ints {
            assert_eq!(t.key(t.get(k).unwrap()), k.as_slice());
        }
        // Strings (short and long): the hash index is sized once.
        let strs: Vec<Vec<u8>> = (0..50_000)
            .map(|i| enc(format!("{i}{}", "x".repeat(i % 3 * 10))))
            .collect();
        let mut t = KeyTable::new();
        t.reserve_keys(strs.iter().map(Vec::as_slice));
        let (chunks, arena) = (t.table.chunks_len(), t.arena.capacity());
        for k in &strs {
            t.insert_new(k, hash_key(k)).unwrap();
        }
        assert_eq!((t.table.chunks_len(), t.arena.capacity()), (chunks, arena));
        assert!(strs
            .iter()
            .all(|k| t.key(t.get(k).unwrap()) == k.as_slice()));
        // Integers too far apart for the dense map: reserved in the hash index.
        let far: Vec<Vec<u8>> = (0..1_000i64).map(|i| enc(i << 40)).collect();
        let mut t = KeyTable::new();
        t.reserve_keys(far.iter().map(Vec::as_slice));
        let chunks = t.table.chunks_len();
        for k in &far {
            t.insert_new(k, hash_key(k)).unwrap();
        }
        assert_eq!(t.table.chunks_len(), chunks);
        assert!(far.iter().all(|k| t.key(t.get(k).unwrap()) == k.as_slice()));
    }

    #[test]
    fn table_interns_and_reuses_slots() {
        let mut t = KeyTable::new();
        let (a, new) = t.get_or_insert(&enc("a")).unwrap();
        assert!(new);
        let (a2, new) = t.get_or_insert(&enc("a")).unwrap();
        assert!(!new);
        assert_eq!(a, a2);
        let (b, _) = t.get_or_insert(&enc(1i64)).unwrap();
        assert_ne!(a, b);
        t.remove(a);
        assert_eq!(t.get(&enc("a")), None);
        assert_eq!(t.len(), 1);
        let (c, _) = t.get_or_insert(&enc("c")).unwrap();
        assert_eq!(c, a, "slot reused");
        assert_eq!(t.key(c), enc("c").as_slice());
    }

    #[test]
    fn heads_hold_short_keys_inline_byte_for_byte() {
        for n in 0..=40usize {
            let key: Vec<u8> = (0..n as u8)
                .map(|i| i.wrapping_mul(37).wrapping_add(1))
                .collect();
            let h = Head::of(&key, 0x1234);
            if n <= INLINE_KEY {
                let mut want = [0u8; 16];
                want[..n].copy_from_slice(&key);
                want[15] = n as u8;
                assert_eq!(h.0, want, "length {n}");
                assert_eq!(h.key(&[]), key.as_slice());
            } else {
                assert_eq!(h.tag(), Head::LONG);
                assert_eq!(h.span(), 0x1234);
                assert_eq!(&h.0[8..15], &key[..7]);
            }
        }
        // Keys that differ only past the inline bytes, or in length, stay apart.
        let mut t = KeyTable::new();
        let keys: Vec<Vec<u8>> = (0..=20usize).map(|n| vec![0u8; n]).collect();
        let slots: Vec<u32> = keys.iter().map(|k| t.get_or_insert(k).unwrap().0).collect();
        for (k, s) in keys.iter().zip(&slots) {
            assert_eq!(t.get(k), Some(*s));
            assert_eq!(t.key(*s), k.as_slice());
        }
        assert_eq!(t.key_bytes(), (0..=20).sum::<usize>());
    }

    #[test]
    fn int_columns_of_any_width_are_one_key() {
        let a = KeyColumns::single(Arc::new(Int64Array::from(vec![9]))).unwrap();
        let b = KeyColumns::single(Arc::new(arrow_array::UInt8Array::from(vec![9]))).unwrap();
        let s = KeyColumns::single(Arc::new(StringArray::from(vec!["9"]))).unwrap();
        assert_eq!(a.key(0), b.key(0));
        assert_ne!(a.key(0), s.key(0));
    }

    #[test]
    fn rows_visit_every_key_in_order_across_chunks() {
        let n = 300; // more than one encoding chunk
        let ints: ArrayRef = Arc::new(Int64Array::from_iter(
            (0..n as i64).map(|i| (i % 7 != 3).then_some(i * 31 - 500)),
        ));
        let strs: ArrayRef = Arc::new(StringArray::from_iter(
            (0..n).map(|i| (i % 5 != 1).then(|| "k".repeat(i % 40))),
        ));
        let large: ArrayRef = Arc::new(LargeStringArray::from_iter(
            (0..n).map(|i| (i % 4 != 0).then(|| format!("tenant-{i:07}"))),
        ));
        let view: ArrayRef =
            Arc::new(arrow_array::StringViewArray::from_iter((0..n).map(|i| {
                (i % 6 != 2).then(|| format!("a-much-longer-tenant-{i}"))
            })));
        let bins: ArrayRef = Arc::new(arrow_array::BinaryArray::from_iter(
            (0..n).map(|i| (i % 3 != 0).then(|| vec![i as u8; i % 20])),
        ));
        let large_bins: ArrayRef = Arc::new(arrow_array::LargeBinaryArray::from_iter(
            (0..n).map(|i| (i % 3 != 1).then(|| vec![7u8; i % 30])),
        ));
        for cols in [
            vec![ints.clone()],
            vec![strs.clone()],
            vec![large.clone()],
            vec![view],
            vec![bins.clone()],
            vec![large_bins],
            vec![strs, ints.clone(), large, bins],
        ] {
            let keys = KeyColumns::new(&cols).unwrap();
            let mut seen = Vec::new();
            keys.for_each_key(|i, k| seen.push((i, k.to_vec())));
            let want: Vec<_> = (0..n).map(|i| (i, keys.key(i))).collect();
            assert_eq!(seen, want);
            let mut refs = Vec::new();
            keys.for_each_row_key(|i, k| {
                refs.push((
                    i,
                    match k {
                        RowKey::Word(w) => w.bytes().to_vec(),
                        RowKey::Str(b) => {
                            let mut v = Vec::new();
                            b.encode(&mut v);
                            v
                        }
                        RowKey::Bytes(b) => b.to_vec(),
                    },
                ))
            });
            assert_eq!(refs, want);
        }
    }

    type Model = std::collections::HashMap<Vec<u8>, u32>;

    /// Inserts (or removes) `key` in the table and in the model, checking that the
    /// table hands out the model's slot and keeps its count.
    fn apply_to_both(
        t: &mut KeyTable,
        model: &mut Model,
        key: Vec<u8>,
        insert: bool,
    ) -> Result<(), TestCaseError> {
        if insert {
            let (slot, new) = t.get_or_insert(&key).unwrap();
            match model.get(&key) {
                Some(&s) => {
                    prop_assert!(!new);
                    prop_assert_eq!(s, slot);
                }
                None => {
                    prop_assert!(new);
                    model.insert(key, slot);
                }
            }
        } else if let Some(s) = model.remove(&key) {
            t.remove(s);
        }
        prop_assert_eq!(t.len(), model.len());
        Ok(())
    }

    /// Every key of the model is found in its slot.
    fn same_as_model(t: &KeyTable, model: &Model) -> Result<(), TestCaseError> {
        for (k, s) in model {
            prop_assert_eq!(t.get(k), Some(*s));
            prop_assert_eq!(t.key(*s), k.as_slice());
        }
        Ok(())
    }

    /// String and binary values of 11 to 15 bytes live in their head alone: found
    /// without the arena, given back as their encoding, removed and reused, and kept
    /// through the table's growth.
    #[test]
    fn short_values_are_held_in_the_head() {
        // The last n digits of i: 2,000 values of each length from 4 bytes up.
        let value = |i: usize, n: usize| format!("{i:020}")[20 - n..].to_string();
        let mut t = KeyTable::new();
        let mut want = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for n in 0..=20usize {
            for i in 0..2_000 {
                for bin in [false, true] {
                    let v = value(i, n);
                    let k = if bin {
                        enc(v.as_bytes())
                    } else {
                        enc(v.as_str())
                    };
                    let (slot, new) = t.get_or_insert(&k).unwrap();
                    assert_eq!(new, seen.insert(k.clone()), "{k:?}");
                    if !new {
                        continue;
                    }
                    let head = t.entries[slot as usize].head;
                    assert_eq!(head.short().is_some(), (11..=15).contains(&n), "{n} bytes");
                    want.push((k, slot));
                }
            }
        }
        // No arena bytes for short values: only the 16..20-byte ones went there.
        let long: usize = (16..=20).map(|n| 2 * 2_000 * (n + 5)).sum();
        assert_eq!(t.arena.len(), long);
        for (k, slot) in &want {
            assert_eq!(t.get(k), Some(*slot));
            assert_eq!(t.key(*slot), k.as_slice());
            let b = BytesKey::of_encoded(k).unwrap();
            assert_eq!(t.get_bytes(b, b.hash()), Some(*slot));
        }
        let bytes_before = t.key_bytes();
        // Remove every short value whose last digit is even, then put them back.
        let mut removed_bytes = 0;
        let gone = |k: &[u8]| {
            let b = BytesKey::of_encoded(k).unwrap();
            (11..=15).contains(&b.payload.len()) && b.payload[b.payload.len() - 1] % 2 == 0
        };
        for (k, slot) in &want {
            if gone(k) {
                t.remove(*slot);
                assert_eq!(t.get(k), None);
                // A short value's own bytes: its encoding less the tag and length.
                removed_bytes += k.len() - 5;
            }
        }
        assert!(removed_bytes > 0);
        assert_eq!(t.key_bytes(), bytes_before - removed_bytes);
        for (k, slot) in &want {
            if !gone(k) {
                assert_eq!(t.key(*slot), k.as_slice());
            } else {
                // Freed slots are handed out again.
                let (again, new) = t.get_or_insert(k).unwrap();
                assert!(new);
                assert_eq!(t.key(again), k.as_slice());
            }
        }
        assert_eq!(t.key_bytes(), bytes_before);
        assert_eq!(t.len(), want.len());
    }

    /// Keys that differ in any byte hash apart (every byte of a short value is hashed).
    #[test]
    fn string_keys_hash_apart() {
        for width in [1usize, 3, 6, 9, 12, 14, 16, 20] {
            let n = 20_000.min(10usize.pow(width.min(9) as u32));
            let hashes: std::collections::HashSet<u64> = (0..n)
                .map(|i| hash_key(&enc(format!("{i:0width$}").as_str())))
                .collect();
            assert_eq!(hashes.len(), n, "{width}-byte keys");
        }
        // Same bytes, other type: another key, another hash.
        assert_ne!(hash_key(&enc("ab")), hash_key(&enc(&b"ab"[..])));
    }

    proptest! {
        #[test]
        fn key_eq_is_byte_equality(a in proptest::collection::vec(0u8..2, 0..40), flip in proptest::option::of(0usize..40)) {
            let mut b = a.clone();
            if let Some(i) = flip.filter(|&i| i < b.len()) {
                b[i] ^= 1;
            }
            prop_assert_eq!(key_eq(&a, &b), a == b);
            prop_assert!(!key_eq(&a, &b[..b.len().saturating_sub(1)]) || a.is_empty());
        }

        #[test]
        fn word_keys_are_their_encoded_bytes(v in any::<i64>(), u in any::<u64>(), small in -300i64..300, other in any::<i64>()) {
            let mut t = KeyTable::new();
            for (w, bytes) in [
                (v.word_key(), enc(v)),
                (u.word_key(), enc(u)),
                ((small as i32).word_key(), enc(small)),
                (AsKey::word_key(&&small), enc(small)),
            ] {
                let w = w.expect("integers are word keys");
                prop_assert_eq!(&w.bytes()[..], &bytes[..]);
                prop_assert_eq!(w.hash(), hash_key(&bytes));
                prop_assert_eq!(Head::of_word(w), Head::of(&bytes, 0));
                // Inserted as bytes, found as a word (and not confused with another key).
                let (slot, _) = t.get_or_insert(&bytes).unwrap();
                prop_assert_eq!(t.get_word(w, w.hash()), Some(slot));
                let o = WordKey::int(other);
                prop_assert_eq!(t.get_word(o, o.hash()), t.get(&enc(other)));
            }
            prop_assert!("1".word_key().is_none() && (1, 2).word_key().is_none());
        }

        /// A string or binary key looked up from its bytes in place hashes, heads and
        /// finds as its encoding does; keys that only start like one (tuples) are not
        /// taken for one.
        #[test]
        fn bytes_keys_are_their_encoded_bytes(
            values in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..40)), 1..40),
            other in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut t = KeyTable::new();
            let mut slots = Vec::new();
            for (is_str, v) in &values {
                let b = if *is_str {
                    let s = String::from_utf8_lossy(v).into_owned();
                    prop_assert_eq!(s.as_str().bytes_key(), Some(BytesKey::str(&s)));
                    BytesKey { tag: tag::STR, payload: v }
                } else {
                    BytesKey::bin(v)
                };
                let bytes = { let mut e = Vec::new(); b.encode(&mut e); e };
                prop_assert_eq!(BytesKey::of_encoded(&bytes), Some(b));
                prop_assert_eq!(b.encoded_len(), bytes.len());
                prop_assert_eq!(b.hash(), hash_key(&bytes));
                prop_assert_eq!(b.head(), Head::of(&bytes, 0));
                prop_assert!(b.eq_encoded(&bytes));
                let (slot, _) = t.get_or_insert(&bytes).unwrap();
                slots.push((b, slot));
            }
            for (b, slot) in slots {
                prop_assert_eq!(t.get_bytes(b, b.hash()), Some(slot));
                let mut e = Vec::new();
                b.encode(&mut e);
                prop_assert_eq!(t.key(slot), e.as_slice());
            }
            // A key not inserted is found only if it equals an inserted one.
            let o = BytesKey::bin(&other);
            let known = values.iter().any(|(is_str, v)| !is_str && v == &other);
            prop_assert_eq!(t.get_bytes(o, o.hash()).is_some(), known);
            let (tuple, pair) = (enc(("a", 1i64)), enc(("a", "b")));
            prop_assert_eq!(BytesKey::of_encoded(&tuple), None);
            prop_assert_eq!(BytesKey::of_encoded(&pair), None);
            prop_assert!(!BytesKey::str("ab").eq_encoded(&enc(("ab", "c"))));
        }

        /// Integer keys: dense runs (the direct map), far-off values that turn it
        /// off, negative and extreme values, removals, strings mixed in; every
        /// lookup path agrees with a map.
        #[test]
        fn integer_keys_match_hashmap(ops in proptest::collection::vec((0u8..4, prop_oneof![
            6 => -300i64..300,
            1 => Just(i64::MIN), 1 => Just(i64::MAX),
            1 => any::<i64>(),
        ]), 1..1500), far_late in any::<bool>(), reserve in any::<bool>()) {
            let mut t = KeyTable::new();
            let mut model = Model::default();
            let n = ops.len();
            let steps: Vec<(u8, i64, Vec<u8>)> = ops.into_iter().enumerate().map(|(i, (op, v))| {
                // Without `far_late`, far-off values only come in the last tenth.
                let v = if far_late || i * 10 >= n * 9 || (-300..300).contains(&v) { v } else { v % 300 };
                (op, v, if op == 3 { enc(format!("s{v}")) } else { enc(v) })
            }).collect();
            if reserve {
                // A reserve (for the distinct keys, as a restore makes) is a hint only.
                let distinct: std::collections::BTreeSet<&[u8]> =
                    steps.iter().map(|s| s.2.as_slice()).collect();
                t.reserve_keys(distinct);
            }
            for (op, v, key) in steps {
                apply_to_both(&mut t, &mut model, key, op != 2)?;
                let w = WordKey::int(v);
                prop_assert_eq!(t.get_word(w, w.hash()), model.get(&enc(v)).copied());
                prop_assert_eq!(t.get(&enc(v)), model.get(&enc(v)).copied());
            }
            same_as_model(&t, &model)?;
        }

        #[test]
        fn table_matches_hashmap(ops in proptest::collection::vec((0u8..3, 0u16..200), 1..2000)) {
            let mut t = KeyTable::new();
            let mut model = Model::default();
            for (op, k) in ops {
                // Long keys too, to exercise compaction.
                let key = enc(format!("{k}-{}", "x".repeat((k % 7) as usize * 300)));
                apply_to_both(&mut t, &mut model, key, op != 2)?;
            }
            same_as_model(&t, &model)?;
        }
    }
}
