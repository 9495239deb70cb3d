//! Typed views of the bytes of a record: columns, values, and the default data order.
//!
//! The engine stores data as opaque byte arrays of a fixed size; the bitmap index, data-range
//! filters and the relational operators need to read numbers out of them. A [`Col`] names a
//! little-endian number at an offset of the data array (or the key).

use core::cmp::Ordering;

/// The type of a column inside a record's data bytes (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColType {
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer (read as `i64`, wrapping above `i64::MAX`).
    U64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
}

impl ColType {
    /// Width in bytes.
    pub const fn width(self) -> usize {
        match self {
            ColType::I8 | ColType::U8 => 1,
            ColType::I16 | ColType::U16 => 2,
            ColType::I32 | ColType::U32 | ColType::F32 => 4,
            ColType::I64 | ColType::U64 | ColType::F64 => 8,
        }
    }
}

/// A number read from a record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Any integer column, and the key.
    Int(i64),
    /// A float column, or an average.
    Float(f64),
}

impl Value {
    /// The value as an integer (floats truncated toward zero, saturating).
    pub fn as_i64(self) -> i64 {
        match self {
            Value::Int(v) => v,
            Value::Float(f) => f as i64,
        }
    }

    /// The value as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(f) => f,
        }
    }

    /// Compares two values numerically (integers exactly; NaN sorts as equal).
    pub fn cmp_num(self, other: Value) -> Ordering {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(&b),
            (a, b) => a
                .as_f64()
                .partial_cmp(&b.as_f64())
                .unwrap_or(Ordering::Equal),
        }
    }
}

/// A column: the record's key, or a number at a byte offset of its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Col {
    /// The key (as an integer).
    Key,
    /// A little-endian number at `offset` of the data bytes.
    Data {
        /// Byte offset inside the data array.
        offset: usize,
        /// Its type.
        ty: ColType,
    },
}

impl Col {
    /// A signed 32-bit column at `offset` (the sensor values of the EmbedDB data sets).
    pub const fn i32(offset: usize) -> Col {
        Col::Data {
            offset,
            ty: ColType::I32,
        }
    }

    /// A column of type `ty` at `offset`.
    pub const fn at(offset: usize, ty: ColType) -> Col {
        Col::Data { offset, ty }
    }

    /// Reads the column from a key and data array; `None` if the data is too short.
    #[inline]
    pub fn get(&self, key: u64, data: &[u8]) -> Option<Value> {
        match *self {
            Col::Key => Some(Value::Int(key as i64)),
            Col::Data { offset, ty } => read_num(data, offset, ty),
        }
    }

    /// The column as an integer (`get(..).map(Value::as_i64)`, with integer columns read
    /// straight into an `i64`: the per-record path of bucket functions).
    #[inline]
    pub fn get_i64(&self, key: u64, data: &[u8]) -> Option<i64> {
        match *self {
            Col::Key => Some(key as i64),
            Col::Data { offset, ty } => match read_int(data, offset, ty) {
                Some(v) => Some(v),
                None if ty.is_float() => read_num(data, offset, ty).map(Value::as_i64),
                None => None,
            },
        }
    }
}

impl ColType {
    /// Whether the type is a float.
    pub const fn is_float(self) -> bool {
        matches!(self, ColType::F32 | ColType::F64)
    }
}

/// Reads an integer column of type `ty` at `offset` as an `i64` (`U64` wrapping above
/// `i64::MAX`, as [`read_num`]); `None` for a float type or data too short.
#[inline(always)]
pub(crate) fn read_int(data: &[u8], offset: usize, ty: ColType) -> Option<i64> {
    let end = offset.checked_add(ty.width())?;
    let b = data.get(offset..end)?;
    Some(match ty {
        ColType::I8 => i64::from(i8::from_le_bytes(arr(b)?)),
        ColType::U8 => i64::from(u8::from_le_bytes(arr(b)?)),
        ColType::I16 => i64::from(i16::from_le_bytes(arr(b)?)),
        ColType::U16 => i64::from(u16::from_le_bytes(arr(b)?)),
        ColType::I32 => i64::from(i32::from_le_bytes(arr(b)?)),
        ColType::U32 => i64::from(u32::from_le_bytes(arr(b)?)),
        ColType::I64 | ColType::U64 => i64::from_le_bytes(arr(b)?),
        ColType::F32 | ColType::F64 => return None,
    })
}

/// Reads a little-endian number of type `ty` at `offset` of `data`.
#[inline]
pub fn read_num(data: &[u8], offset: usize, ty: ColType) -> Option<Value> {
    let end = offset.checked_add(ty.width())?;
    let b = data.get(offset..end)?;
    // Fixed-size loads per type (no variable-length copy: this runs per record in the
    // bucket function, data comparisons and the operators).
    Some(match ty {
        ColType::I8 => Value::Int(i64::from(i8::from_le_bytes(arr(b)?))),
        ColType::U8 => Value::Int(i64::from(u8::from_le_bytes(arr(b)?))),
        ColType::I16 => Value::Int(i64::from(i16::from_le_bytes(arr(b)?))),
        ColType::U16 => Value::Int(i64::from(u16::from_le_bytes(arr(b)?))),
        ColType::I32 => Value::Int(i64::from(i32::from_le_bytes(arr(b)?))),
        ColType::U32 => Value::Int(i64::from(u32::from_le_bytes(arr(b)?))),
        ColType::I64 | ColType::U64 => Value::Int(i64::from_le_bytes(arr(b)?)),
        ColType::F32 => Value::Float(f64::from(f32::from_le_bytes(arr(b)?))),
        ColType::F64 => Value::Float(f64::from_le_bytes(arr(b)?)),
    })
}

/// The first `N` bytes of `b` as an array.
#[inline]
fn arr<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
    b.get(..N)?.try_into().ok()
}

/// The default order of data values: the first four bytes as a little-endian `i32` (the first
/// sensor value of the EmbedDB data sets), or the bytes themselves when the data is shorter.
pub fn compare_first_i32(a: &[u8], b: &[u8]) -> Ordering {
    match (read_num(a, 0, ColType::I32), read_num(b, 0, ColType::I32)) {
        (Some(x), Some(y)) => x.cmp_num(y),
        _ => a.cmp(b),
    }
}
