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

/// Most bytes one fixed-width value takes in the encoding: a decimal, as binary (a tag,
/// a `u32` length and 16 bytes). Integers, floats and timestamps take 9, booleans 2.
pub const MAX_FIXED_VALUE_BYTES: usize = 1 + 4 + 16;

/// Bytes a string or binary value takes beyond its own: the tag and a `u32` length.
pub const VARIABLE_VALUE_OVERHEAD: usize = 1 + 4;

mod arrow;
mod encoding;
mod hash;
mod slot_index;
mod table;

pub use arrow::{decode_key_columns, is_key_type, same_values, EncodedRows, KeyColumns, KeyRows};
pub(crate) use arrow::{encode_chunked, int_like, temporal};
pub use encoding::{
    decode_key, decode_value, encode_bool, encode_bytes, encode_float, encode_int, encode_null,
    encode_str, encode_uint, key_eq, with_row_key, AsKey, BytesKey, Encoded, KeyValue, RowKey,
    WordKey,
};
pub use hash::hash_key;
pub use table::{KeyBytes, KeyTable};

#[cfg(test)]
mod tests;
