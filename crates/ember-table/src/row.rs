//! Typed values, the row encoding and the order-preserving key encoding.
//!
//! The table engine stores rows as opaque byte strings and orders its primary and secondary
//! indexes by plain `memcmp` of key bytes. This module turns typed values into those bytes and
//! back. Every decoder takes untrusted bytes and returns a [`RowError`] naming the byte offset
//! where decoding failed — never a panic.
//!
//! # Values
//!
//! [`Value`] is SQLite's five storage classes (NULL, INTEGER, REAL, TEXT, BLOB); [`ValueRef`]
//! is the same with borrowed text and blob payloads, as returned by the zero-copy decoders.
//!
//! # Row format (version 1)
//!
//! A row is laid out like an SQLite record, with a version byte in front and LEB128 varints:
//!
//! ```text
//! offset        size        field
//! 0             1           format version, 0x01 (anything else: RowError::Version)
//! 1             1..=10      varint N: the column count
//! ...           N varints   the header: one serial type T[i] per column, in column order
//! ...           sum of L(T) the payloads P[0] P[1] ... P[N-1], back to back, in column order
//! ```
//!
//! The row ends exactly at the end of the last payload; bytes after it are an error
//! ([`RowError::TrailingBytes`]). An empty row is the two bytes `01 00`.
//!
//! Serial types and their payload length `L(T)`:
//!
//! ```text
//! T          L(T)       meaning
//! 0          0          NULL
//! 1          1          INTEGER, 8-bit two's complement, big-endian
//! 2          2          INTEGER, 16-bit two's complement, big-endian
//! 3          3          INTEGER, 24-bit two's complement, big-endian
//! 4          4          INTEGER, 32-bit two's complement, big-endian
//! 5          6          INTEGER, 48-bit two's complement, big-endian
//! 6          8          INTEGER, 64-bit two's complement, big-endian
//! 7          8          REAL, IEEE 754 binary64 bit pattern, big-endian (NaN payloads kept)
//! 8          0          INTEGER constant 0
//! 9          0          INTEGER constant 1
//! 10, 11     -          reserved: RowError::SerialType
//! n*2+12     n          BLOB of n bytes (even T >= 12)
//! n*2+13     n          TEXT of n bytes of UTF-8 (odd T >= 13); invalid UTF-8: RowError::Utf8
//! ```
//!
//! The encoder picks the smallest integer type that holds the value (0 and 1 take no payload,
//! -128..=127 one byte, and so on); the decoder also accepts wider-than-needed integer types.
//! Reals are stored bit for bit, so every `f64` (every NaN included) round-trips exactly.
//!
//! Varints are unsigned LEB128: 7 value bits per byte, least significant group first, the high
//! bit set on every byte but the last; at most 10 bytes. An overlong varint (a final byte of
//! zero after the first), one over 64 bits, or one longer than 10 bytes is
//! [`RowError::Varint`].
//!
//! Example: the row `(NULL, 0, 1, 300, 'hi')` encodes as
//! `01 05 | 00 08 09 02 11 | 01 2c 68 69` (version, count, header, payloads).
//!
//! # Key format
//!
//! [`encode_key`] writes each column in turn; for keys with the same number of columns,
//! `memcmp` of the encodings orders them exactly as SQLite orders the values column by column
//! under the BINARY collation: NULL < numbers < TEXT < BLOB, INTEGER and REAL compared with
//! each other by exact numeric value, TEXT by its UTF-8 bytes, BLOB by `memcmp`. Each column's
//! encoding is prefix-free, so columns never bleed into each other.
//!
//! ```text
//! first byte   rest                                      column
//! 0x01         -                                         NULL (and a REAL NaN, as in SQLite)
//! 0x02         -                                         REAL -infinity
//! 0x03..=0x0B  1 more header byte, then fraction groups  negative finite number
//! 0x0C         -                                         zero (0, 0.0 and -0.0)
//! 0x0D..=0x15  1 more header byte, then fraction groups  positive finite number
//! 0x16         -                                         REAL +infinity
//! 0x20         escaped bytes, then 00 00                 TEXT
//! 0x30         escaped bytes, then 00 00                 BLOB
//! ```
//!
//! A finite non-zero number, INTEGER or REAL alike, is first written exactly as
//! `±1.f × 2^E`, with `-1074 <= E <= 1023` and `f` a binary fraction of at most 64 bits (63
//! suffice for any `i64` and 52 for any `f64`). Its canonical form depends only on its value,
//! so `1` and `1.0` (and `2^53` and `2^53 as f64`) encode to the same bytes, and the order of
//! the encodings is the exact numeric order — no lossy conversion between `i64` and `f64`.
//!
//! - The header is the big-endian `u16` `0x0D00 + (E + 1074)` for a positive number and
//!   `0x0300 + (2097 - (E + 1074))` for a negative one, so larger exponents sort later among
//!   positives and earlier among negatives.
//! - The fraction `f`, left-aligned in 64 bits, follows in groups of 7 bits, most significant
//!   first, stopping after the last group holding a set bit (at least one group, at most 10).
//!   Each group byte is `group << 1 | more`, where `more` is 1 if another group follows. A
//!   fraction that stops earlier has only zeros after it, and its `more` bit of 0 sorts it
//!   before any longer fraction with the same leading groups, as it should.
//! - For a negative number every byte after the header is complemented (`!b`), which reverses
//!   the fraction order (larger magnitude sorts first) and keeps it prefix-free.
//!
//! Examples: `1` and `1.0` → `11 32 00`; `1.5` → `11 32 80`; `3` → `11 33 80`;
//! `-1` → `06 FF FF`; `i64::MIN` → `06 C0 FF`.
//!
//! TEXT and BLOB payload bytes are written as they are except `00`, written `00 FF`; the
//! column ends with `00 00`. `"a"` → `20 61 00 00`; `x'00'` → `30 00 FF 00 00`.
//!
//! [`decode_key`] gives every number back as [`Value::Integer`] when it is integral and fits in
//! `i64`, else as [`Value::Real`]: a REAL `2.0` comes back as INTEGER `2`, `-0.0` as INTEGER
//! `0`, a NaN as NULL. Keys are for ordering and lookup; keep the row for the exact types.
//! The decoder accepts only canonical encodings (the ones [`encode_key`] writes).

use std::fmt;

/// The row format version [`encode_row`] writes and the decoders accept.
pub const ROW_FORMAT_VERSION: u8 = 1;

/// One SQL value, owning its payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A 64-bit signed integer.
    Integer(i64),
    /// An IEEE 754 double.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Raw bytes.
    Blob(Vec<u8>),
}

/// One SQL value borrowing its text or blob payload (from a decoded row, for instance).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// SQL NULL.
    Null,
    /// A 64-bit signed integer.
    Integer(i64),
    /// An IEEE 754 double.
    Real(f64),
    /// UTF-8 text.
    Text(&'a str),
    /// Raw bytes.
    Blob(&'a [u8]),
}

impl Value {
    /// The storage class's name as SQLite's `typeof()` spells it: "null", "integer", "real",
    /// "text" or "blob".
    pub fn type_name(&self) -> &'static str {
        self.as_value_ref().type_name()
    }

    /// Borrows this value as a [`ValueRef`].
    pub fn as_value_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(r) => ValueRef::Real(*r),
            Value::Text(s) => ValueRef::Text(s),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl<'a> ValueRef<'a> {
    /// The storage class's name as SQLite's `typeof()` spells it: "null", "integer", "real",
    /// "text" or "blob".
    pub fn type_name(&self) -> &'static str {
        match self {
            ValueRef::Null => "null",
            ValueRef::Integer(_) => "integer",
            ValueRef::Real(_) => "real",
            ValueRef::Text(_) => "text",
            ValueRef::Blob(_) => "blob",
        }
    }

    /// Copies the payload into an owned [`Value`].
    pub fn to_value(&self) -> Value {
        match *self {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(r) => Value::Real(r),
            ValueRef::Text(s) => Value::Text(s.to_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }
}

/// A value a row is written from: an owned [`Value`], or a [`ValueRef`] borrowing its text or
/// blob from the caller (so a caller with values of its own type writes them uncopied).
pub trait AsValueRef {
    /// The value, borrowed.
    fn value_ref(&self) -> ValueRef<'_>;
}

impl AsValueRef for Value {
    #[inline]
    fn value_ref(&self) -> ValueRef<'_> {
        self.as_value_ref()
    }
}

impl AsValueRef for ValueRef<'_> {
    #[inline]
    fn value_ref(&self) -> ValueRef<'_> {
        *self
    }
}

impl<'a> From<&'a Value> for ValueRef<'a> {
    fn from(v: &'a Value) -> Self {
        v.as_value_ref()
    }
}

impl From<ValueRef<'_>> for Value {
    fn from(v: ValueRef<'_>) -> Self {
        v.to_value()
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Integer(i)
    }
}

impl From<f64> for Value {
    fn from(r: f64) -> Self {
        Value::Real(r)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value::Blob(b)
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Self {
        Value::Blob(b.to_vec())
    }
}

impl From<i64> for ValueRef<'_> {
    fn from(i: i64) -> Self {
        ValueRef::Integer(i)
    }
}

impl From<f64> for ValueRef<'_> {
    fn from(r: f64) -> Self {
        ValueRef::Real(r)
    }
}

impl<'a> From<&'a str> for ValueRef<'a> {
    fn from(s: &'a str) -> Self {
        ValueRef::Text(s)
    }
}

impl<'a> From<&'a [u8]> for ValueRef<'a> {
    fn from(b: &'a [u8]) -> Self {
        ValueRef::Blob(b)
    }
}

/// Why a row or key could not be decoded. Every variant but [`RowError::Version`] and
/// [`RowError::ColumnIndex`] names the byte offset (from the start of the input) where
/// decoding failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RowError {
    /// The row starts with a format version this build does not read (the byte found).
    Version(u8),
    /// The input ends before the item starting at `offset` (a varint, a payload, a key
    /// column) is complete.
    Truncated {
        /// Byte offset of the incomplete item.
        offset: usize,
    },
    /// A varint is overlong, over 64 bits or longer than 10 bytes.
    Varint {
        /// Byte offset of the varint's first byte.
        offset: usize,
    },
    /// A serial type is reserved (10 or 11).
    SerialType {
        /// Byte offset of the serial type's varint.
        offset: usize,
        /// The serial type found.
        serial: u64,
    },
    /// The column count is larger than the bytes left could possibly describe.
    ColumnCount {
        /// Byte offset of the column count's varint.
        offset: usize,
        /// The column count found.
        count: u64,
    },
    /// Bytes remain after the last column.
    TrailingBytes {
        /// Byte offset of the first byte past the last column.
        offset: usize,
    },
    /// A TEXT payload is not valid UTF-8.
    Utf8 {
        /// Byte offset of the first invalid byte (in a key: of the text column).
        offset: usize,
    },
    /// A key column is malformed or not in canonical form.
    Key {
        /// Byte offset of the offending byte.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// [`decode_column`] was asked for a column the row does not have.
    ColumnIndex {
        /// The column asked for.
        index: usize,
        /// The row's column count.
        count: usize,
    },
}

impl RowError {
    /// The byte offset where decoding failed, for the variants that carry one
    /// ([`RowError::Version`] is always at offset 0).
    pub fn offset(&self) -> Option<usize> {
        match *self {
            RowError::Version(_) => Some(0),
            RowError::Truncated { offset }
            | RowError::Varint { offset }
            | RowError::SerialType { offset, .. }
            | RowError::ColumnCount { offset, .. }
            | RowError::TrailingBytes { offset }
            | RowError::Utf8 { offset }
            | RowError::Key { offset, .. } => Some(offset),
            RowError::ColumnIndex { .. } => None,
        }
    }
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowError::Version(v) => write!(f, "unknown row format version {v}"),
            RowError::Truncated { offset } => {
                write!(f, "row or key data truncated at byte {offset}")
            }
            RowError::Varint { offset } => write!(f, "malformed varint at byte {offset}"),
            RowError::SerialType { offset, serial } => {
                write!(f, "reserved serial type {serial} at byte {offset}")
            }
            RowError::ColumnCount { offset, count } => write!(
                f,
                "column count {count} at byte {offset} exceeds the bytes that follow"
            ),
            RowError::TrailingBytes { offset } => {
                write!(f, "trailing bytes after the last column at byte {offset}")
            }
            RowError::Utf8 { offset } => write!(f, "invalid UTF-8 in text at byte {offset}"),
            RowError::Key { offset, reason } => {
                write!(f, "malformed key at byte {offset}: {reason}")
            }
            RowError::ColumnIndex { index, count } => {
                write!(f, "column {index} asked for in a row of {count} columns")
            }
        }
    }
}

impl std::error::Error for RowError {}

// ---------------------------------------------------------------------------------------------
// Varints
// ---------------------------------------------------------------------------------------------

/// Appends `v` as an unsigned LEB128 varint.
fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads the varint starting at `pos`; returns it and the position after it.
///
/// One- and two-byte varints (every serial type of a value up to 8,185 bytes) are read
/// here, inline in the row decoders' loops; longer ones, and every malformed one, by
/// [`read_long_varint`].
#[inline]
fn read_varint(bytes: &[u8], pos: usize) -> Result<(u64, usize), RowError> {
    match (bytes.get(pos), bytes.get(pos.wrapping_add(1))) {
        (Some(&b), _) if b < 0x80 => Ok((u64::from(b), pos + 1)),
        // A second byte of zero would be an overlong encoding: the slow path refuses it.
        (Some(&b), Some(&c)) if c < 0x80 && c != 0 => {
            Ok((u64::from(b & 0x7F) | u64::from(c) << 7, pos + 2))
        }
        _ => read_long_varint(bytes, pos),
    }
}

/// [`read_varint`] for any length, checking the encoding is the shortest and fits 64 bits.
#[cold]
fn read_long_varint(bytes: &[u8], pos: usize) -> Result<(u64, usize), RowError> {
    let mut value = 0u64;
    let mut at = pos;
    for i in 0..10u32 {
        let Some(&b) = bytes.get(at) else {
            return Err(RowError::Truncated { offset: pos });
        };
        at += 1;
        // The 10th byte carries only bit 63 and ends the varint.
        if i == 9 && b > 1 {
            return Err(RowError::Varint { offset: pos });
        }
        value |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return Err(RowError::Varint { offset: pos });
            }
            return Ok((value, at));
        }
    }
    Err(RowError::Varint { offset: pos })
}

// ---------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------

const SERIAL_NULL: u64 = 0;
const SERIAL_REAL: u64 = 7;
const SERIAL_ZERO: u64 = 8;
const SERIAL_ONE: u64 = 9;

/// The serial type of an integer and its payload width in bytes.
fn int_serial(i: i64) -> (u64, usize) {
    match i {
        0 => (SERIAL_ZERO, 0),
        1 => (SERIAL_ONE, 0),
        -0x80..=0x7F => (1, 1),
        -0x8000..=0x7FFF => (2, 2),
        -0x80_0000..=0x7F_FFFF => (3, 3),
        -0x8000_0000..=0x7FFF_FFFF => (4, 4),
        -0x8000_0000_0000..=0x7FFF_FFFF_FFFF => (5, 6),
        _ => (6, 8),
    }
}

/// The serial type for a text or blob of `len` bytes (`base` is 12 or 13).
fn sized_serial(len: usize, base: u64) -> u64 {
    // A slice in memory is far below 2^62 bytes on every real target, so this never
    // saturates; saturating keeps it panic-free regardless.
    (len as u64).saturating_mul(2).saturating_add(base)
}

fn serial_type(v: ValueRef<'_>) -> u64 {
    match v {
        ValueRef::Null => SERIAL_NULL,
        ValueRef::Integer(i) => int_serial(i).0,
        ValueRef::Real(_) => SERIAL_REAL,
        ValueRef::Text(s) => sized_serial(s.len(), 13),
        ValueRef::Blob(b) => sized_serial(b.len(), 12),
    }
}

/// The payload length of a serial type, or `None` for a reserved one. Lengths that do not fit
/// in `usize` saturate (they cannot fit in the input anyway).
#[inline]
fn serial_len(serial: u64) -> Option<usize> {
    Some(match serial {
        0 | 8 | 9 => 0,
        1..=4 => serial as usize,
        5 => 6,
        6 | 7 => 8,
        10 | 11 => return None,
        n => usize::try_from((n - 12) / 2).unwrap_or(usize::MAX),
    })
}

/// Appends the encoding of `values` as one row to `out`.
pub fn encode_row<V: AsValueRef>(values: &[V], out: &mut Vec<u8>) {
    encode_row_iter(values.iter().map(V::value_ref), values.len(), out);
}

/// [`encode_row`] for borrowed values.
pub fn encode_row_refs(values: &[ValueRef<'_>], out: &mut Vec<u8>) {
    encode_row_iter(values.iter().copied(), values.len(), out);
}

/// [`encode_row`] for values from an iterator over `count` of them, walked twice (the
/// serial types, then the payloads): a caller with values of its own type maps them to
/// [`ValueRef`]s on the way, with no vector of references in between.
pub fn encode_row_iter<'a, I>(values: I, count: usize, out: &mut Vec<u8>)
where
    I: Iterator<Item = ValueRef<'a>> + Clone,
{
    out.push(ROW_FORMAT_VERSION);
    write_varint(count as u64, out);
    for v in values.clone() {
        write_varint(serial_type(v), out);
    }
    for v in values {
        match v {
            ValueRef::Null => {}
            ValueRef::Integer(i) => {
                let (_, width) = int_serial(i);
                out.extend_from_slice(&i.to_be_bytes()[8 - width..]);
            }
            ValueRef::Real(r) => out.extend_from_slice(&r.to_bits().to_be_bytes()),
            ValueRef::Text(s) => out.extend_from_slice(s.as_bytes()),
            ValueRef::Blob(b) => out.extend_from_slice(b),
        }
    }
}

/// Where a checked row's parts are.
struct Header {
    /// Column count.
    count: usize,
    /// Offset of the first serial type.
    types: usize,
    /// Offset of the first payload.
    payloads: usize,
}

/// Checks the version, column count and every serial type, and that the payloads exactly
/// fill the rest of `bytes`. Does not look at the payloads.
fn read_header(bytes: &[u8]) -> Result<Header, RowError> {
    let Some(&version) = bytes.first() else {
        return Err(RowError::Truncated { offset: 0 });
    };
    if version != ROW_FORMAT_VERSION {
        return Err(RowError::Version(version));
    }
    let (count, types) = read_varint(bytes, 1)?;
    // Every column takes at least one header byte.
    let count = match usize::try_from(count) {
        Ok(c) if c <= bytes.len() - types => c,
        _ => return Err(RowError::ColumnCount { offset: 1, count }),
    };
    let mut pos = types;
    let mut total = 0usize;
    for _ in 0..count {
        let (serial, next) = read_varint(bytes, pos)?;
        let len = serial_len(serial).ok_or(RowError::SerialType {
            offset: pos,
            serial,
        })?;
        total = total.saturating_add(len);
        pos = next;
    }
    let payloads = pos;
    let end = payloads.saturating_add(total);
    if end > bytes.len() {
        // Name the first payload that does not fit.
        let mut at = payloads;
        let mut sp = types;
        for _ in 0..count {
            let (serial, next) = read_varint(bytes, sp)?;
            let len = serial_len(serial).unwrap_or(0);
            if at.saturating_add(len) > bytes.len() {
                break;
            }
            at += len;
            sp = next;
        }
        return Err(RowError::Truncated { offset: at });
    }
    if end < bytes.len() {
        return Err(RowError::TrailingBytes { offset: end });
    }
    Ok(Header {
        count,
        types,
        payloads,
    })
}

/// Decodes one payload of `serial` type starting at `at` (already checked to fit).
#[inline]
fn decode_payload(bytes: &[u8], serial: u64, at: usize) -> Result<(ValueRef<'_>, usize), RowError> {
    if serial < 12 {
        return decode_fixed(bytes, serial, at);
    }
    // Text and blobs: the length is in the serial type.
    let len = usize::try_from((serial - 12) / 2).unwrap_or(usize::MAX);
    let end = at.saturating_add(len);
    let payload = bytes
        .get(at..end)
        .ok_or(RowError::Truncated { offset: at })?;
    let value = if serial & 1 == 0 {
        ValueRef::Blob(payload)
    } else {
        match std::str::from_utf8(payload) {
            Ok(s) => ValueRef::Text(s),
            Err(e) => {
                return Err(RowError::Utf8 {
                    offset: at + e.valid_up_to(),
                });
            }
        }
    };
    Ok((value, end))
}

/// [`decode_payload`] for the serial types below 12: NULL, integers and reals (and the
/// reserved types, an error).
fn decode_fixed(bytes: &[u8], serial: u64, at: usize) -> Result<(ValueRef<'_>, usize), RowError> {
    let len = serial_len(serial).ok_or(RowError::SerialType { offset: at, serial })?;
    let end = at.saturating_add(len);
    let payload = bytes
        .get(at..end)
        .ok_or(RowError::Truncated { offset: at })?;
    let value = match serial {
        SERIAL_NULL => ValueRef::Null,
        SERIAL_ZERO => ValueRef::Integer(0),
        SERIAL_ONE => ValueRef::Integer(1),
        1..=6 => {
            // Big-endian in `len` bytes (1 to 8), shifted in a byte at a time: a copy into
            // an 8-byte buffer read back whole waited on the copy's stores (a full scan
            // spent 7% of its time there).
            let mut raw = 0u64;
            for &b in payload {
                raw = (raw << 8) | u64::from(b);
            }
            // Sign-extend from `len` bytes.
            let shift = 64 - 8 * len as u32;
            ValueRef::Integer(((raw << shift) as i64) >> shift)
        }
        SERIAL_REAL => {
            let buf: [u8; 8] = payload
                .try_into()
                .map_err(|_| RowError::Truncated { offset: at })?;
            ValueRef::Real(f64::from_bits(u64::from_be_bytes(buf)))
        }
        // 10 and 11 have no length: refused above.
        _ => return Err(RowError::SerialType { offset: at, serial }),
    };
    Ok((value, end))
}

/// Decodes a row, copying its payloads.
pub fn decode_row(bytes: &[u8]) -> Result<Vec<Value>, RowError> {
    let values = row_values(bytes)?;
    let mut out = Vec::with_capacity(values.remaining());
    values.for_each_value(|v| {
        out.push(v.to_value());
        Ok::<_, RowError>(())
    })?;
    Ok(out)
}

/// Decodes a row without copying: text and blob values borrow from `bytes`.
pub fn decode_row_ref(bytes: &[u8]) -> Result<Vec<ValueRef<'_>>, RowError> {
    let values = row_values(bytes)?;
    let mut out = Vec::with_capacity(values.remaining());
    for v in values {
        out.push(v?);
    }
    Ok(out)
}

/// The values of an encoded row, one by one, borrowing text and blobs from it: for callers
/// that build their own value type and want no intermediate vector. The header is checked
/// whole first; a payload's own error (invalid UTF-8) comes with that value.
pub fn row_values(bytes: &[u8]) -> Result<RowValues<'_>, RowError> {
    let h = read_header(bytes)?;
    Ok(RowValues {
        bytes,
        types: h.types,
        at: h.payloads,
        left: h.count,
    })
}

/// The iterator [`row_values`] returns.
#[derive(Debug, Clone)]
pub struct RowValues<'a> {
    bytes: &'a [u8],
    /// Offset of the next serial type.
    types: usize,
    /// Offset of the next payload.
    at: usize,
    /// Values not yet returned.
    left: usize,
}

impl<'a> Iterator for RowValues<'a> {
    type Item = Result<ValueRef<'a>, RowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let step = read_varint(self.bytes, self.types).and_then(|(serial, next)| {
            self.types = next;
            decode_payload(self.bytes, serial, self.at)
        });
        Some(match step {
            Ok((v, end)) => {
                self.at = end;
                Ok(v)
            }
            Err(e) => {
                self.left = 0;
                Err(e)
            }
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Fewer if a value turns out malformed: the iterator ends at its error.
        (0, Some(self.left))
    }
}

impl<'a> RowValues<'a> {
    /// How many values are left (fewer come if one is malformed).
    pub fn remaining(&self) -> usize {
        self.left
    }

    /// Hands the values left to `f` in order, as [`next`](Iterator::next) would return them,
    /// and stops at the first error (of the row's encoding or of `f`). For decoding loops:
    /// the whole walk inlines into the caller, with no `Option<Result<…>>` between steps.
    #[inline]
    pub fn for_each_value<E: From<RowError>>(
        mut self,
        mut f: impl FnMut(ValueRef<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        while self.left > 0 {
            self.left -= 1;
            let (serial, next) = read_varint(self.bytes, self.types)?;
            self.types = next;
            let (v, end) = decode_payload(self.bytes, serial, self.at)?;
            self.at = end;
            f(v)?;
        }
        Ok(())
    }
}

/// Decodes column `index` of a row without decoding the other columns' payloads (the header
/// is still checked whole, so a truncated or overlong row is an error here too; only the
/// UTF-8 of the other text columns goes unchecked).
pub fn decode_column(bytes: &[u8], index: usize) -> Result<ValueRef<'_>, RowError> {
    let h = read_header(bytes)?;
    if index >= h.count {
        return Err(RowError::ColumnIndex {
            index,
            count: h.count,
        });
    }
    let mut sp = h.types;
    let mut at = h.payloads;
    for _ in 0..index {
        let (serial, next) = read_varint(bytes, sp)?;
        sp = next;
        at = at.saturating_add(serial_len(serial).unwrap_or(0));
    }
    let (serial, _) = read_varint(bytes, sp)?;
    Ok(decode_payload(bytes, serial, at)?.0)
}

/// The number of columns in an encoded row (checks the header as [`decode_column`] does).
pub fn row_column_count(bytes: &[u8]) -> Result<usize, RowError> {
    Ok(read_header(bytes)?.count)
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

const KEY_NULL: u8 = 0x01;
const KEY_NEG_INF: u8 = 0x02;
const KEY_NEG_FIRST: u8 = 0x03;
const KEY_NEG_LAST: u8 = 0x0B;
const KEY_ZERO: u8 = 0x0C;
const KEY_POS_FIRST: u8 = 0x0D;
const KEY_POS_LAST: u8 = 0x15;
const KEY_POS_INF: u8 = 0x16;
const KEY_TEXT: u8 = 0x20;
const KEY_BLOB: u8 = 0x30;

/// Header base for positive and negative numbers.
const POS_BASE: u16 = 0x0D00;
const NEG_BASE: u16 = 0x0300;
/// Biased exponents `E + 1074` run from 0 to this.
const MAX_BIASED_EXP: u16 = 2097;
const EXP_BIAS: i32 = 1074;

/// A finite non-zero number as `±1.frac × 2^exp`, `frac` left-aligned in 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Num {
    negative: bool,
    exp: i32,
    frac: u64,
}

impl Num {
    fn from_int(i: i64) -> Option<Num> {
        if i == 0 {
            return None;
        }
        let m = i.unsigned_abs();
        let lz = m.leading_zeros();
        Some(Num {
            negative: i < 0,
            exp: 63 - lz as i32,
            frac: m.checked_shl(lz + 1).unwrap_or(0),
        })
    }

    /// `r` must be finite and non-zero.
    fn from_f64(r: f64) -> Num {
        let bits = r.to_bits();
        let negative = bits >> 63 == 1;
        let biased = ((bits >> 52) & 0x7FF) as i32;
        let mant = bits & ((1u64 << 52) - 1);
        if biased == 0 {
            // Subnormal: mant × 2^-1074, mant != 0.
            let lz = mant.leading_zeros();
            Num {
                negative,
                exp: 63 - lz as i32 - EXP_BIAS,
                frac: mant.checked_shl(lz + 1).unwrap_or(0),
            }
        } else {
            Num {
                negative,
                exp: biased - 1023,
                frac: mant << 12,
            }
        }
    }

    /// The value as a [`Value`]: INTEGER when integral and in `i64` range, else REAL; `None`
    /// if it is neither (not an `i64` and not exactly an `f64`).
    fn to_value(self) -> Option<Value> {
        if (0..=63).contains(&self.exp) {
            let e = self.exp as u32;
            let integral = self.frac.checked_shl(e).unwrap_or(0) == 0 && (e > 0 || self.frac == 0);
            if integral {
                let m = (1u64 << e) | self.frac.checked_shr(64 - e).unwrap_or(0);
                let signed = if self.negative {
                    -i128::from(m)
                } else {
                    i128::from(m)
                };
                if let Ok(i) = i64::try_from(signed) {
                    return Some(Value::Integer(i));
                }
            }
        }
        let sign = u64::from(self.negative) << 63;
        if self.exp > 1023 {
            return None;
        }
        if self.exp >= -1022 {
            if self.frac & 0xFFF != 0 {
                return None;
            }
            let biased = (self.exp + 1023) as u64;
            return Some(Value::Real(f64::from_bits(
                sign | biased << 52 | self.frac >> 12,
            )));
        }
        // Subnormal: the leading bit is bit p of the mantissa, with p fraction bits below it.
        let p = (self.exp + EXP_BIAS) as u32; // 0..=51
        if self.frac.checked_shl(p).unwrap_or(0) != 0 || (p == 0 && self.frac != 0) {
            return None;
        }
        let mant = (1u64 << p) | self.frac.checked_shr(64 - p).unwrap_or(0);
        Some(Value::Real(f64::from_bits(sign | mant)))
    }

    fn encode(self, out: &mut Vec<u8>) {
        let biased = (self.exp + EXP_BIAS) as u16;
        let (header, flip) = if self.negative {
            (NEG_BASE + (MAX_BIASED_EXP - biased), 0xFF)
        } else {
            (POS_BASE + biased, 0x00)
        };
        out.extend_from_slice(&header.to_be_bytes());
        let mut f = self.frac;
        loop {
            let group = (f >> 57) as u8;
            f <<= 7;
            let more = u8::from(f != 0);
            out.push(((group << 1) | more) ^ flip);
            if more == 0 {
                break;
            }
        }
    }
}

fn encode_number(n: Option<Num>, out: &mut Vec<u8>) {
    match n {
        None => out.push(KEY_ZERO),
        Some(n) => n.encode(out),
    }
}

fn encode_escaped(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 3);
    out.push(tag);
    // Runs without a zero byte are copied whole; each zero is followed by 0xFF.
    let mut rest = bytes;
    while let Some(z) = rest.iter().position(|&b| b == 0) {
        out.extend_from_slice(&rest[..=z]);
        out.push(0xFF);
        rest = &rest[z + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0, 0]);
}

/// Appends the order-preserving encoding of one key column.
pub fn encode_key_value(value: ValueRef<'_>, out: &mut Vec<u8>) {
    match value {
        ValueRef::Null => out.push(KEY_NULL),
        ValueRef::Integer(i) => encode_number(Num::from_int(i), out),
        ValueRef::Real(r) => {
            if r.is_nan() {
                // SQLite stores a NaN as NULL.
                out.push(KEY_NULL);
            } else if r == f64::INFINITY {
                out.push(KEY_POS_INF);
            } else if r == f64::NEG_INFINITY {
                out.push(KEY_NEG_INF);
            } else if r == 0.0 {
                // 0.0 and -0.0 alike.
                out.push(KEY_ZERO);
            } else {
                Num::from_f64(r).encode(out);
            }
        }
        ValueRef::Text(s) => encode_escaped(KEY_TEXT, s.as_bytes(), out),
        ValueRef::Blob(b) => encode_escaped(KEY_BLOB, b, out),
    }
}

/// Appends the order-preserving encoding of a key of `values.len()` columns: for keys with
/// the same column count, `memcmp` of the encodings orders them as SQLite orders the values
/// (see the module documentation).
pub fn encode_key<V: AsValueRef>(values: &[V], out: &mut Vec<u8>) {
    for v in values {
        encode_key_value(v.value_ref(), out);
    }
}

/// [`encode_key`] for borrowed values.
pub fn encode_key_refs(values: &[ValueRef<'_>], out: &mut Vec<u8>) {
    for &v in values {
        encode_key_value(v, out);
    }
}

/// Decodes an escaped text or blob body starting at `pos` (after the tag).
fn decode_escaped(bytes: &[u8], pos: usize) -> Result<(Vec<u8>, usize), RowError> {
    let mut out = Vec::new();
    let mut at = pos;
    loop {
        let Some(&b) = bytes.get(at) else {
            return Err(RowError::Truncated { offset: pos - 1 });
        };
        if b != 0 {
            out.push(b);
            at += 1;
            continue;
        }
        match bytes.get(at + 1) {
            None => return Err(RowError::Truncated { offset: pos - 1 }),
            Some(0x00) => return Ok((out, at + 2)),
            Some(0xFF) => {
                out.push(0);
                at += 2;
            }
            Some(_) => {
                return Err(RowError::Key {
                    offset: at + 1,
                    reason: "invalid escape after a zero byte",
                });
            }
        }
    }
}

/// Decodes a finite non-zero number whose header starts at `pos`.
fn decode_number(bytes: &[u8], pos: usize) -> Result<(Value, usize), RowError> {
    let Some(hdr) = bytes.get(pos..pos + 2) else {
        return Err(RowError::Truncated { offset: pos });
    };
    let header = u16::from_be_bytes([hdr[0], hdr[1]]);
    let (negative, biased) = if hdr[0] >= KEY_POS_FIRST {
        (false, header - POS_BASE)
    } else {
        (true, MAX_BIASED_EXP.wrapping_sub(header - NEG_BASE))
    };
    if biased > MAX_BIASED_EXP {
        return Err(RowError::Key {
            offset: pos,
            reason: "number exponent out of range",
        });
    }
    let flip = if negative { 0xFF } else { 0x00 };
    let mut frac = 0u64;
    let mut at = pos + 2;
    for k in 0..10u32 {
        let Some(&raw) = bytes.get(at) else {
            return Err(RowError::Truncated { offset: pos });
        };
        let b = raw ^ flip;
        let group = u64::from(b >> 1);
        let more = b & 1 == 1;
        if k < 9 {
            frac |= group << (57 - 7 * k);
        } else if group & 0x3F != 0 || more {
            return Err(RowError::Key {
                offset: at,
                reason: "number fraction longer than 64 bits",
            });
        } else {
            frac |= group >> 6;
        }
        at += 1;
        if !more {
            if k > 0 && group == 0 {
                return Err(RowError::Key {
                    offset: at - 1,
                    reason: "number fraction not canonical",
                });
            }
            let num = Num {
                negative,
                exp: i32::from(biased) - EXP_BIAS,
                frac,
            };
            return match num.to_value() {
                Some(v) => Ok((v, at)),
                None => Err(RowError::Key {
                    offset: pos,
                    reason: "number is neither an i64 nor an f64",
                }),
            };
        }
    }
    // Unreachable: the 10th group either ends the number or is rejected above.
    Err(RowError::Key {
        offset: pos,
        reason: "number fraction longer than 64 bits",
    })
}

/// Decodes one key column starting at `pos`.
fn decode_key_value(bytes: &[u8], pos: usize) -> Result<(Value, usize), RowError> {
    let Some(&tag) = bytes.get(pos) else {
        return Err(RowError::Truncated { offset: pos });
    };
    match tag {
        KEY_NULL => Ok((Value::Null, pos + 1)),
        KEY_NEG_INF => Ok((Value::Real(f64::NEG_INFINITY), pos + 1)),
        KEY_ZERO => Ok((Value::Integer(0), pos + 1)),
        KEY_POS_INF => Ok((Value::Real(f64::INFINITY), pos + 1)),
        KEY_NEG_FIRST..=KEY_NEG_LAST | KEY_POS_FIRST..=KEY_POS_LAST => decode_number(bytes, pos),
        KEY_TEXT => {
            let (body, next) = decode_escaped(bytes, pos + 1)?;
            match String::from_utf8(body) {
                Ok(s) => Ok((Value::Text(s), next)),
                Err(_) => Err(RowError::Utf8 { offset: pos }),
            }
        }
        KEY_BLOB => {
            let (body, next) = decode_escaped(bytes, pos + 1)?;
            Ok((Value::Blob(body), next))
        }
        _ => Err(RowError::Key {
            offset: pos,
            reason: "unknown column tag",
        }),
    }
}

/// Decodes the first `ncols` columns of a key and returns them with the number of bytes they
/// took (for keys that continue, such as an index key followed by a primary key).
pub fn decode_key_prefix(bytes: &[u8], ncols: usize) -> Result<(Vec<Value>, usize), RowError> {
    // Every column takes at least one byte.
    let mut values = Vec::with_capacity(ncols.min(bytes.len()));
    let mut pos = 0;
    for _ in 0..ncols {
        let (v, next) = decode_key_value(bytes, pos)?;
        values.push(v);
        pos = next;
    }
    Ok((values, pos))
}

/// Decodes a key of exactly `ncols` columns. Numbers come back as [`Value::Integer`] when
/// integral and within `i64`, else as [`Value::Real`]; a NaN was encoded as NULL.
pub fn decode_key(bytes: &[u8], ncols: usize) -> Result<Vec<Value>, RowError> {
    let (values, end) = decode_key_prefix(bytes, ncols)?;
    if end != bytes.len() {
        return Err(RowError::TrailingBytes { offset: end });
    }
    Ok(values)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn row(values: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_row(values, &mut out);
        out
    }

    fn key(values: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(values, &mut out);
        out
    }

    /// Equality with REALs compared by bit pattern.
    fn same(a: &[Value], b: &[Value]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| match (x, y) {
                (Value::Real(p), Value::Real(q)) => p.to_bits() == q.to_bits(),
                _ => x == y,
            })
    }

    // ---- the oracle: SQLite's comparison, written straight from the rules ----

    fn class(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Real(r) if r.is_nan() => 0,
            Value::Integer(_) | Value::Real(_) => 1,
            Value::Text(_) => 2,
            Value::Blob(_) => 3,
        }
    }

    /// Exact comparison of an integer with a non-NaN real.
    fn cmp_int_real(i: i64, r: f64) -> Ordering {
        const TWO_64: f64 = 18_446_744_073_709_551_616.0;
        if r >= TWO_64 {
            return Ordering::Less;
        }
        if r <= -TWO_64 {
            return Ordering::Greater;
        }
        let floor = r.floor();
        // |floor| <= 2^64, so the conversion is exact.
        match i128::from(i).cmp(&(floor as i128)) {
            Ordering::Equal if r > floor => Ordering::Less,
            o => o,
        }
    }

    fn sqlite_cmp(a: &Value, b: &Value) -> Ordering {
        let (ca, cb) = (class(a), class(b));
        if ca != cb {
            return ca.cmp(&cb);
        }
        match (a, b) {
            (Value::Integer(x), Value::Integer(y)) => x.cmp(y),
            (Value::Real(x), Value::Real(y)) if ca == 1 => x.partial_cmp(y).unwrap(),
            (Value::Integer(x), Value::Real(y)) => cmp_int_real(*x, *y),
            (Value::Real(x), Value::Integer(y)) => cmp_int_real(*y, *x).reverse(),
            (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
            (Value::Blob(x), Value::Blob(y)) => x.cmp(y),
            _ => Ordering::Equal, // both NULL-class
        }
    }

    fn sqlite_order(a: &[Value], b: &[Value]) -> Ordering {
        for (x, y) in a.iter().zip(b) {
            match sqlite_cmp(x, y) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        Ordering::Equal
    }

    // ---- strategies ----

    fn arb_row_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Integer),
            (-300i64..300).prop_map(Value::Integer),
            (0u32..64, any::<bool>()).prop_map(|(s, neg)| {
                let m = 1i64.wrapping_shl(s);
                Value::Integer(if neg {
                    m.wrapping_neg()
                } else {
                    m.wrapping_sub(1)
                })
            }),
            any::<u64>().prop_map(|b| Value::Real(f64::from_bits(b))),
            any::<f64>().prop_map(Value::Real),
            any::<String>().prop_map(Value::Text),
            prop::collection::vec(any::<u8>(), 0..300).prop_map(Value::Blob),
        ]
    }

    const TWO_53: f64 = 9_007_199_254_740_992.0;
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;

    fn special_ints() -> Vec<i64> {
        let p53 = 1i64 << 53;
        vec![
            // The ends of each payload width (1, 2, 3, 4, 6 bytes), both signs.
            -(1 << 7),
            (1 << 7) - 1,
            -(1 << 15),
            (1 << 15) - 1,
            -(1 << 23),
            (1 << 23) - 1,
            -(1 << 31),
            (1 << 31) - 1,
            -(1 << 47),
            (1 << 47) - 1,
            0,
            1,
            -1,
            2,
            -2,
            p53 - 1,
            p53,
            p53 + 1,
            p53 + 2,
            -p53 - 1,
            -p53,
            -p53 + 1,
            i64::MAX,
            i64::MAX - 1,
            i64::MAX - 1023,
            i64::MAX - 1024,
            i64::MAX - 1025,
            i64::MIN,
            i64::MIN + 1,
            i64::MIN + 1024,
        ]
    }

    fn special_reals() -> Vec<f64> {
        vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            1.5,
            TWO_53,
            TWO_53 + 2.0,
            TWO_53 - 1.0,
            -TWO_53,
            TWO_63,
            -TWO_63,
            TWO_63 - 1024.0,
            -TWO_63 + 1024.0,
            TWO_63 * 2.0,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            f64::from_bits(1),
            -f64::from_bits(1),
            f64::from_bits(0x000F_FFFF_FFFF_FFFF),
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            1e300,
            -1e-300,
        ]
    }

    fn arb_key_value() -> impl Strategy<Value = Value> {
        let chars = prop::sample::select(vec!['\0', 'a', 'b', '\u{7f}', 'é', '\u{10000}']);
        let bytes = prop::sample::select(vec![0u8, 1, 0x61, 0x7F, 0xFE, 0xFF]);
        prop_oneof![
            Just(Value::Null),
            Just(Value::Real(f64::NAN)),
            any::<i64>().prop_map(Value::Integer),
            (-3i64..4).prop_map(Value::Integer),
            prop::sample::select(special_ints()).prop_map(Value::Integer),
            prop::sample::select(special_ints()).prop_map(|i| Value::Real(i as f64)),
            prop::sample::select(special_reals()).prop_map(Value::Real),
            (-3i64..4).prop_map(|i| Value::Real(i as f64)),
            (-3i64..4).prop_map(|i| Value::Real(i as f64 + 0.5)),
            any::<i64>().prop_map(|i| Value::Real(i as f64)),
            any::<u64>().prop_map(|b| Value::Real(f64::from_bits(b))),
            prop::collection::vec(chars, 0..4).prop_map(|c| Value::Text(c.into_iter().collect())),
            prop::collection::vec(bytes, 0..4).prop_map(Value::Blob),
        ]
    }

    fn arb_key_pair() -> impl Strategy<Value = (Vec<Value>, Vec<Value>)> {
        (1usize..4).prop_flat_map(|n| {
            (
                prop::collection::vec(arb_key_value(), n),
                prop::collection::vec(arb_key_value(), n),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn the_short_varint_path_reads_as_the_long_one_does(
            bytes in prop::collection::vec(
                prop_oneof![Just(0u8), Just(0x80u8), 1u8..0x80, 0x81u8..=0xFF], 0..12),
            pos in 0usize..13,
        ) {
            prop_assert_eq!(read_varint(&bytes, pos), read_long_varint(&bytes, pos));
        }

        #[test]
        fn row_round_trips(values in prop::collection::vec(arb_row_value(), 0..20)) {
            let bytes = row(&values);
            let decoded = decode_row(&bytes).unwrap();
            prop_assert!(same(&values, &decoded), "{values:?} != {decoded:?}");
            let refs = decode_row_ref(&bytes).unwrap();
            let mut again = Vec::new();
            encode_row_refs(&refs, &mut again);
            prop_assert_eq!(&again, &bytes);
            prop_assert_eq!(row_column_count(&bytes).unwrap(), values.len());
            for (i, r) in refs.iter().enumerate() {
                let c = decode_column(&bytes, i).unwrap();
                prop_assert!(same(&[c.to_value()], &[r.to_value()]));
            }
            prop_assert_eq!(
                decode_column(&bytes, values.len()),
                Err(RowError::ColumnIndex { index: values.len(), count: values.len() })
            );
        }

        #[test]
        fn the_value_walk_agrees_with_the_iterator(
            values in prop::collection::vec(arb_row_value(), 0..8),
            hit in any::<prop::sample::Index>(),
            byte in prop_oneof![Just(0xFFu8), Just(0x80u8), Just(0xC3u8), any::<u8>()],
            corrupt in any::<bool>(),
        ) {
            let mut bytes = row(&values);
            if corrupt {
                // Past the version byte: payload bytes (invalid UTF-8) as well as header ones.
                let i = 1 + hit.index(bytes.len().max(2) - 1);
                if let Some(b) = bytes.get_mut(i) {
                    *b = byte;
                }
            }
            if let Ok(vals) = row_values(&bytes) {
                let mut by_iter = Vec::new();
                let mut iter_err = None;
                for v in vals.clone() {
                    match v {
                        Ok(v) => by_iter.push(v.to_value()),
                        Err(e) => iter_err = Some(e),
                    }
                }
                let mut walked = Vec::new();
                let walk = vals.for_each_value(|v| {
                    walked.push(v.to_value());
                    Ok::<_, RowError>(())
                });
                prop_assert!(same(&by_iter, &walked), "{by_iter:?} != {walked:?}");
                prop_assert_eq!(walk.err(), iter_err);
            }
        }

        #[test]
        fn key_order_matches_sqlite((a, b) in arb_key_pair()) {
            let (ka, kb) = (key(&a), key(&b));
            prop_assert_eq!(ka.cmp(&kb), sqlite_order(&a, &b), "{:?} vs {:?}: {:x?} vs {:x?}", a, b, ka, kb);
        }

        #[test]
        fn key_round_trips(a in prop::collection::vec(arb_key_value(), 0..5)) {
            let k = key(&a);
            let d = decode_key(&k, a.len()).unwrap();
            prop_assert_eq!(sqlite_order(&a, &d), Ordering::Equal, "{:?} -> {:?}", a, d);
            for (x, y) in a.iter().zip(&d) {
                prop_assert_eq!(class(x), class(y));
                if let Value::Real(r) = y {
                    // Reals come back only when not an integral i64.
                    prop_assert!(r.is_infinite() || r.fract() != 0.0 || r.abs() >= TWO_63);
                }
            }
            prop_assert_eq!(key(&d), k.clone());
            // A key followed by more bytes: the prefix decoder stops at the right place.
            let mut longer = k.clone();
            longer.extend_from_slice(&[KEY_TEXT, 0, 0]);
            let (p, used) = decode_key_prefix(&longer, a.len()).unwrap();
            prop_assert_eq!(used, k.len());
            prop_assert_eq!(key(&p), k);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40), n in 0usize..6) {
            let _ = decode_row(&bytes);
            let _ = decode_row_ref(&bytes);
            let _ = decode_column(&bytes, n);
            if let Ok(k) = decode_key(&bytes, n) {
                // Whatever decodes is canonical: it re-encodes to the same bytes.
                prop_assert_eq!(key(&k), bytes);
            }
        }

        #[test]
        fn arbitrary_rows_after_version_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            bytes.insert(0, ROW_FORMAT_VERSION);
            if let Ok(r) = decode_row(&bytes) {
                for i in 0..r.len() {
                    prop_assert!(decode_column(&bytes, i).is_ok());
                }
            }
        }
    }

    #[test]
    fn type_names_and_conversions() {
        let vals = [
            Value::Null,
            Value::Integer(3),
            Value::Real(0.5),
            Value::from("x"),
            Value::from(vec![1u8]),
        ];
        let names: Vec<_> = vals.iter().map(Value::type_name).collect();
        assert_eq!(names, ["null", "integer", "real", "text", "blob"]);
        for v in &vals {
            let r: ValueRef<'_> = v.into();
            assert_eq!(r.type_name(), v.type_name());
            assert_eq!(&Value::from(r), v);
        }
        assert_eq!(ValueRef::from("a"), ValueRef::Text("a"));
        assert_eq!(Value::from(2i64), Value::Integer(2));
    }

    #[test]
    fn exact_row_sizes() {
        use Value::*;
        assert_eq!(row(&[]), [1, 0]);
        assert_eq!(row(&[Integer(0), Integer(1), Null]), [1, 3, 8, 9, 0]);
        assert_eq!(row(&[Integer(5)]), [1, 1, 1, 5]);
        assert_eq!(row(&[Integer(-1)]), [1, 1, 1, 0xFF]);
        assert_eq!(row(&[Integer(127)]).len(), 4);
        assert_eq!(row(&[Integer(-128)]).len(), 4);
        assert_eq!(row(&[Integer(128)]), [1, 1, 2, 0, 128]);
        assert_eq!(row(&[Integer(300)]).len(), 5);
        assert_eq!(row(&[Integer(1 << 23)]).len(), 3 + 4);
        assert_eq!(row(&[Integer(1 << 40)]).len(), 3 + 6);
        assert_eq!(row(&[Integer(i64::MAX)]).len(), 3 + 8);
        assert_eq!(row(&[Real(1.5)]).len(), 3 + 8);
        assert_eq!(row(&[Text("abc".into())]), [1, 1, 19, b'a', b'b', b'c']);
        assert_eq!(row(&[Blob(vec![0; 100])]).len(), 2 + 2 + 100);
        assert_eq!(
            row(&[
                Null,
                Integer(0),
                Integer(1),
                Integer(300),
                Text("hi".into())
            ]),
            [1, 5, 0, 8, 9, 2, 17, 1, 0x2c, b'h', b'i']
        );
    }

    #[test]
    fn row_errors_carry_offsets() {
        assert_eq!(decode_row(&[]), Err(RowError::Truncated { offset: 0 }));
        assert_eq!(decode_row(&[2, 0]), Err(RowError::Version(2)));
        assert_eq!(decode_row(&[1]), Err(RowError::Truncated { offset: 1 }));
        assert_eq!(
            decode_row(&[1, 5, 0]),
            Err(RowError::ColumnCount {
                offset: 1,
                count: 5
            })
        );
        assert_eq!(
            decode_row(&[1, 0x80, 0]),
            Err(RowError::Varint { offset: 1 })
        );
        let mut ten = vec![1];
        ten.extend_from_slice(&[0xFF; 9]);
        ten.push(0x02);
        assert_eq!(decode_row(&ten), Err(RowError::Varint { offset: 1 }));
        assert_eq!(
            decode_row(&[1, 1, 10]),
            Err(RowError::SerialType {
                offset: 2,
                serial: 10
            })
        );
        assert_eq!(
            decode_row(&[1, 2, 1, 19, 7, b'a']),
            Err(RowError::Truncated { offset: 5 })
        );
        assert_eq!(
            decode_row(&[1, 1, 0, 0]),
            Err(RowError::TrailingBytes { offset: 3 })
        );
        assert_eq!(
            decode_row(&[1, 1, 17, b'a', 0xFF]),
            Err(RowError::Utf8 { offset: 4 })
        );
        // decode_column skips the bad text of another column but still checks the header.
        assert_eq!(
            decode_column(&[1, 2, 17, 1, b'a', 0xFF, 9], 1),
            Ok(ValueRef::Integer(9))
        );
        assert!(
            RowError::Truncated { offset: 7 }
                .to_string()
                .contains("byte 7")
        );
    }

    #[test]
    fn wide_integers_are_accepted_and_sign_extended() {
        assert_eq!(
            decode_row(&[1, 1, 2, 0xFF, 0xFE]),
            Ok(vec![Value::Integer(-2)])
        );
        assert_eq!(
            decode_row(&[1, 1, 5, 0, 0, 0, 0, 0, 7]),
            Ok(vec![Value::Integer(7)])
        );
        assert_eq!(
            decode_row(&[1, 1, 3, 0x80, 0, 0]),
            Ok(vec![Value::Integer(-(1 << 23))])
        );
    }

    fn sample_rows() -> Vec<Vec<Value>> {
        use Value::*;
        vec![
            vec![],
            vec![Null, Integer(0), Integer(1), Integer(-7), Integer(300)],
            vec![
                Integer(i64::MIN),
                Real(f64::from_bits(0x7FF8_0000_0000_0001)),
                Text("héllo".into()),
                Blob(vec![0, 1, 2, 0xFF]),
            ],
            vec![
                Text(String::new()),
                Blob(vec![]),
                Integer(1 << 40),
                Real(-0.0),
            ],
        ]
    }

    /// Decodes with every decoder; if the whole row decodes, each column must agree.
    fn decode_all(bytes: &[u8]) {
        let whole = decode_row_ref(bytes);
        let owned = decode_row(bytes);
        assert_eq!(whole.is_ok(), owned.is_ok());
        let n = whole.as_ref().map_or(8, Vec::len);
        for i in 0..=n {
            let col = decode_column(bytes, i);
            if let Ok(w) = &whole {
                match w.get(i) {
                    Some(v) => {
                        let c = col.unwrap();
                        assert!(same(&[c.to_value()], &[v.to_value()]));
                    }
                    None => assert!(col.is_err()),
                }
            }
        }
    }

    #[test]
    fn truncations_and_corruptions_never_panic() {
        for values in sample_rows() {
            let bytes = row(&values);
            for len in 0..bytes.len() {
                let cut = &bytes[..len];
                assert!(decode_row(cut).is_err(), "truncated to {len} decoded");
                decode_all(cut);
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(
                decode_row(&longer),
                Err(RowError::TrailingBytes {
                    offset: bytes.len()
                })
            );
            for pos in 0..bytes.len() {
                for b in 0..=255u8 {
                    let mut bad = bytes.clone();
                    bad[pos] = b;
                    decode_all(&bad);
                }
            }
        }
    }

    #[test]
    fn key_truncations_and_corruptions_never_panic() {
        let keys: Vec<Vec<Value>> = vec![
            vec![Value::Integer(1), Value::Real(-1.5), Value::Null],
            vec![
                Value::Text("a\0b".into()),
                Value::Blob(vec![0, 0xFF]),
                Value::Integer(i64::MIN),
            ],
            vec![Value::Real(f64::from_bits(1)), Value::Real(f64::MAX)],
        ];
        for k in keys {
            let bytes = key(&k);
            assert_eq!(
                decode_key(&bytes, k.len()).map(|d| key(&d)),
                Ok(bytes.clone())
            );
            for len in 0..bytes.len() {
                assert!(decode_key(&bytes[..len], k.len()).is_err());
            }
            for pos in 0..bytes.len() {
                for b in 0..=255u8 {
                    let mut bad = bytes.clone();
                    bad[pos] = b;
                    if let Ok(d) = decode_key(&bad, k.len()) {
                        assert_eq!(key(&d), bad);
                    }
                }
            }
        }
    }

    #[test]
    fn key_examples() {
        use Value::*;
        assert_eq!(key(&[Integer(1)]), [0x11, 0x32, 0x00]);
        assert_eq!(key(&[Real(1.5)]), [0x11, 0x32, 0x80]);
        assert_eq!(key(&[Integer(-1)]), [0x06, 0xFF, 0xFF]);
        assert_eq!(key(&[Integer(3)]), [0x11, 0x33, 0x80]);
        assert_eq!(key(&[Integer(i64::MIN)]), [0x06, 0xC0, 0xFF]);
        assert_eq!(key(&[Integer(0)]), [KEY_ZERO]);
        assert_eq!(key(&[Real(-0.0)]), [KEY_ZERO]);
        assert_eq!(key(&[Real(f64::NAN)]), key(&[Null]));
        assert_eq!(key(&[Integer(1)]), key(&[Real(1.0)]));
        assert_eq!(key(&[Integer(1 << 53)]), key(&[Real(TWO_53)]));
        assert_ne!(key(&[Integer((1 << 53) + 1)]), key(&[Real(TWO_53)]));
        assert_eq!(key(&[Integer(i64::MIN)]), key(&[Real(-TWO_63)]));
        assert!(key(&[Integer(i64::MAX)]) < key(&[Real(TWO_63)]));
        assert!(key(&[Real(TWO_63 - 1024.0)]) < key(&[Integer(i64::MAX)]));
        assert_eq!(key(&[Text("a".into())]), [0x20, 0x61, 0, 0]);
        assert_eq!(key(&[Blob(vec![0])]), [0x30, 0, 0xFF, 0, 0]);
        assert_eq!(decode_key(&key(&[Real(2.0)]), 1), Ok(vec![Integer(2)]));
        assert_eq!(decode_key(&key(&[Real(-0.0)]), 1), Ok(vec![Integer(0)]));
        assert_eq!(decode_key(&key(&[Real(TWO_63)]), 1), Ok(vec![Real(TWO_63)]));
        assert_eq!(decode_key(&key(&[Real(f64::NAN)]), 1), Ok(vec![Null]));
        assert_eq!(
            decode_key(&[KEY_NULL, 0], 1),
            Err(RowError::TrailingBytes { offset: 1 })
        );
        assert_eq!(
            decode_key(&[0x99], 1),
            Err(RowError::Key {
                offset: 0,
                reason: "unknown column tag"
            })
        );
        assert_eq!(
            decode_key(&[KEY_TEXT, 0xFF, 0, 0], 1),
            Err(RowError::Utf8 { offset: 0 })
        );
        // A 2-byte header and ceil(significant bits after the leading one / 7) groups.
        assert_eq!(key(&[Integer(i64::MAX)]).len(), 11);
        assert_eq!(key(&[Integer(i64::MIN)]).len(), 3);
    }
}
