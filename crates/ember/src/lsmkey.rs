//! Keys of the lsm engine: SQL rows and index entries as ordered byte strings.
//!
//! Every key starts with a kind byte and the engine-level object number (`l12` → 12, as a
//! big-endian `u64`), so one LSM tree holds every lsm table and index of a database and each
//! object is one contiguous key range:
//!
//! - row: `b'r' · object · rowid`, the rowid as a sign-flipped big-endian `i64` (so byte
//!   order is numeric order); the value is the row's encoding;
//! - index entry: `b'x' · object · value… · rowid`, the value empty.
//!
//! SQL values are encoded so that byte order is SQLite's order of values
//! ([`ember_sql::value::compare`]): NULL < numbers < text < blobs, integers and reals
//! compared numerically, text and blobs bytewise. A number is its value as an `f64`
//! (order-preserving bits) followed by two bytes holding the integer's distance from that
//! `f64` (an integer above 2^53 is not exact as an `f64`; the distance is at most 1024), so
//! `1` and `1.0` encode alike, as SQL equality has it. Text and blobs escape `0x00` as
//! `0x00 0xFF` and end with `0x00 0x01`, so a prefix sorts first and a tuple of values
//! (concatenated encodings) sorts as the values do, one after the other.

use ember_sql::Value;

const NULL: u8 = 0x10;
const NUMBER: u8 = 0x20;
const TEXT: u8 = 0x30;
const BLOB: u8 = 0x40;

/// Kind byte of a row key.
pub const ROW: u8 = b'r';
/// Kind byte of an index entry key.
pub const INDEX: u8 = b'x';

/// An `i64` as 8 bytes whose byte order is numeric order.
pub fn ordered_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// The inverse of [`ordered_i64`].
pub fn i64_from_ordered(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

fn ordered_f64(r: f64) -> [u8; 8] {
    let r = if r == 0.0 { 0.0 } else { r }; // -0.0 and 0.0 are one number
    let bits = r.to_bits();
    let b = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    b.to_be_bytes()
}

fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    let mut rest = bytes;
    // Copy runs without a zero byte whole; each zero becomes `00 FF`.
    while let Some(i) = rest.iter().position(|&b| b == 0) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(&[0x00, 0xFF]);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Appends the order-preserving encoding of one SQL value.
pub fn encode_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(NULL),
        Value::Real(r) if r.is_nan() => out.push(NULL),
        Value::Real(r) => {
            out.push(NUMBER);
            out.extend_from_slice(&ordered_f64(*r));
            out.extend_from_slice(&[0x80, 0x00]);
        }
        Value::Integer(i) => {
            let f = *i as f64;
            // f is integral and |f| <= 2^63, so it fits an i128 exactly.
            let d = (*i as i128 - f as i128) as i16;
            out.push(NUMBER);
            out.extend_from_slice(&ordered_f64(f));
            out.extend_from_slice(&((d as u16) ^ 0x8000).to_be_bytes());
        }
        Value::Text(s) => {
            out.push(TEXT);
            escaped(out, s.as_bytes());
        }
        Value::Blob(b) => {
            out.push(BLOB);
            escaped(out, b);
        }
    }
}

/// The key prefix of an object (`kind · number`).
pub fn object_prefix(kind: u8, object: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.push(kind);
    k.extend_from_slice(&object.to_be_bytes());
    k
}

/// Bytes of a row's key.
pub const ROW_KEY_LEN: usize = 17;

/// The key of a row.
pub fn row_key(object: u64, rowid: i64) -> Vec<u8> {
    row_key_array(object, rowid).to_vec()
}

/// [`row_key`] in an array: a point read builds it on the stack.
pub fn row_key_array(object: u64, rowid: i64) -> [u8; ROW_KEY_LEN] {
    let mut k = [0u8; ROW_KEY_LEN];
    k[0] = ROW;
    k[1..9].copy_from_slice(&object.to_be_bytes());
    k[9..].copy_from_slice(&ordered_i64(rowid));
    k
}

/// The key of an index entry.
pub fn index_key(object: u64, values: &[Value], rowid: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(17 + 12 * values.len());
    k.push(INDEX);
    k.extend_from_slice(&object.to_be_bytes());
    for v in values {
        encode_value(&mut k, v);
    }
    k.extend_from_slice(&ordered_i64(rowid));
    k
}

/// The rowid at the end of a row or index key, if the key is long enough.
pub fn rowid_of(key: &[u8]) -> Option<i64> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(i64_from_ordered(tail))
}

/// The smallest key greater than every key that starts with `prefix` (`None`: no bound).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// The object number of an engine-level name: `l12` and `li13` → `12 << 8` and `13 << 8`;
/// the constraint index `l12_u<k>` → `12 << 8 | (k + 1)`. Names are numbered from one
/// counter, so numbers never collide.
pub fn object_number(name: &str) -> Option<u64> {
    let body = name.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    // `split_once("_u")` without a string searcher (this runs for every row operation).
    let (main, unique) = match body.as_bytes().windows(2).position(|w| w == b"_u") {
        Some(i) => (&body[..i], Some(&body[i + 2..])),
        None => (body, None),
    };
    let n: u64 = main.parse().ok()?;
    if n >= 1 << 48 {
        return None;
    }
    match unique {
        None => Some(n << 8),
        Some(u) => {
            let k: u64 = u.parse().ok()?;
            if k >= 255 {
                return None;
            }
            Some(n << 8 | (k + 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_sql::value::compare;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_value(&mut out, v);
        out
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Integer),
            (-2000i64..2000).prop_map(Value::Integer),
            prop_oneof![
                Just(i64::MAX),
                Just(i64::MIN),
                Just((1i64 << 53) + 1),
                Just(-(1i64 << 53) - 1),
                Just(i64::MAX - 1000)
            ]
            .prop_map(Value::Integer),
            any::<f64>()
                .prop_filter("NaN is NULL in SQL", |r| !r.is_nan())
                .prop_map(Value::Real),
            (-2000i64..2000).prop_map(|i| Value::Real(i as f64 / 4.0)),
            prop_oneof![
                Just(9_223_372_036_854_775_808.0),
                Just(-9_223_372_036_854_775_808.0),
                Just(9007199254740992.0),
                Just(-0.0)
            ]
            .prop_map(Value::Real),
            "[a\\x00b\\xff]{0,4}".prop_map(Value::Text),
            proptest::collection::vec(
                prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()],
                0..5
            )
            .prop_map(Value::Blob),
        ]
    }

    proptest! {
        #[test]
        fn byte_order_is_sql_order(a in value(), b in value()) {
            prop_assert_eq!(enc(&a).cmp(&enc(&b)), compare(&a, &b), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn tuples_sort_value_by_value(a in proptest::collection::vec(value(), 0..3),
                                      b in proptest::collection::vec(value(), 0..3),
                                      ra in any::<i64>(), rb in any::<i64>()) {
            let want = a.iter().zip(&b)
                .map(|(x, y)| compare(x, y))
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(a.len().cmp(&b.len()));
            let ka = index_key(7, &a, ra);
            let kb = index_key(7, &b, rb);
            if want != Ordering::Equal {
                // Differing lengths: a shorter tuple equal on its prefix sorts by the
                // rowid bytes against the next value's tag, so only compare full ties.
                if a.len() == b.len() {
                    prop_assert_eq!(ka.cmp(&kb), want);
                }
            } else {
                prop_assert_eq!(ka.cmp(&kb), ra.cmp(&rb));
            }
            prop_assert_eq!(rowid_of(&ka), Some(ra));
        }

        #[test]
        fn rowids_keep_their_order(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(row_key(3, a).cmp(&row_key(3, b)), a.cmp(&b));
            prop_assert_eq!(rowid_of(&row_key(3, a)), Some(a));
        }
    }

    #[test]
    fn mixed_types_sort_null_numbers_text_blob() {
        let mut vs = vec![
            Value::Blob(vec![0]),
            Value::Text("a".into()),
            Value::Real(2.5),
            Value::Null,
            Value::Integer(3),
            Value::Text(String::new()),
            Value::Integer(-1),
            Value::Blob(vec![]),
            Value::Real(-1.5),
        ];
        vs.sort_by_key(enc);
        assert_eq!(
            vs,
            vec![
                Value::Null,
                Value::Real(-1.5),
                Value::Integer(-1),
                Value::Real(2.5),
                Value::Integer(3),
                Value::Text(String::new()),
                Value::Text("a".into()),
                Value::Blob(vec![]),
                Value::Blob(vec![0]),
            ]
        );
        assert_eq!(enc(&Value::Integer(1)), enc(&Value::Real(1.0)));
        assert_eq!(enc(&Value::Real(f64::NAN)), enc(&Value::Null));
    }

    #[test]
    fn object_numbers_and_prefix_ends() {
        assert_eq!(object_number("l12"), Some(12 << 8));
        assert_eq!(object_number("li13"), Some(13 << 8));
        assert_eq!(object_number("l12_u0"), Some(12 << 8 | 1));
        assert_eq!(object_number("l12_u3"), Some(12 << 8 | 4));
        assert_eq!(object_number("lx"), None);
        assert_eq!(object_number("l12_u999"), None);
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
        let p = object_prefix(ROW, 5);
        let end = prefix_end(&p).unwrap();
        for r in [i64::MIN, 0, i64::MAX] {
            let k = row_key(5, r);
            assert!(k.starts_with(&p) && k < end);
        }
    }
}
