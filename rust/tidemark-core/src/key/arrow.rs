//! Keys of Arrow columns: encoding key columns row by row, and decoding encoded keys
//! back to Arrow columns of the key's types.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use super::{
    decode_value, encode_bool, encode_bytes, encode_float, encode_int, encode_null, encode_str,
    encode_uint, tag, AsKey, BytesKey, KeyValue, RowKey, WordKey,
};
use crate::error::{Result, TidemarkError};

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

/// `true` for the types stored as integers (integers, dates, times, timestamps,
/// durations): read as `i64` by keys and aggregates alike.
pub(crate) fn int_like(dt: &DataType) -> bool {
    dt.is_integer() || temporal(dt)
}

/// `true` for dates, times, timestamps and durations (stored as integers).
pub(crate) fn temporal(dt: &DataType) -> bool {
    matches!(
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
    let mut values: Vec<Vec<KeyValue<'_>>> = vec![Vec::with_capacity(keys.len()); types.len()];
    for k in keys {
        let mut pos = 0;
        for col in values.iter_mut() {
            col.push(decode_value(k, &mut pos)?);
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
                        KeyValue::UInt(u) => b.append_value(*u),
                        KeyValue::Int(i) => b.append_value(*i as u64),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            d if int_like(d) => {
                let mut b = Int64Builder::new();
                for v in vals {
                    match v {
                        KeyValue::Int(i) => b.append_value(*i),
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
                        KeyValue::Float(f) => b.append_value(*f),
                        _ => b.append_null(),
                    }
                }
                arrow_cast::cast(&(Arc::new(b.finish()) as ArrayRef), target)?
            }
            DataType::Boolean => {
                let mut b = BooleanBuilder::new();
                for v in vals {
                    match v {
                        KeyValue::Bool(x) => b.append_value(*x),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                let mut b = StringBuilder::new();
                for v in vals {
                    match v {
                        KeyValue::Str(s) => b.append_value(s),
                        _ => b.append_null(),
                    }
                }
                arrow_cast::cast(&(Arc::new(b.finish()) as ArrayRef), target)?
            }
            DataType::Decimal128(p, sc) => {
                let mut b = Decimal128Builder::new();
                for v in vals {
                    match v {
                        KeyValue::Bin(s) => {
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
                        KeyValue::Bin(s) => b.append_value(s)?,
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                let mut b = BinaryBuilder::new();
                for v in vals {
                    match v {
                        KeyValue::Bin(s) => b.append_value(s),
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
