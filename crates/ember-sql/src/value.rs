//! SQL values with SQLite's semantics: storage classes, type affinity, the comparison order
//! (NULL < numbers < text < blob, integers and reals compared exactly), numeric conversion of
//! text, and the text form of a real (`%!.15g`).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt::Write;

/// 2^63 as a real: the first real above every i64.
pub const TWO63: f64 = (1u64 << 63) as f64;

/// One SQL value (a SQLite storage class).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// NULL.
    Null,
    /// A 64-bit signed integer.
    Integer(i64),
    /// An IEEE double.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// A column's type affinity, derived from its declared type as SQLite does (§3.1 of its
/// datatype document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// INT anywhere in the type.
    Integer,
    /// CHAR, CLOB or TEXT.
    Text,
    /// BLOB or no type.
    Blob,
    /// REAL, FLOA or DOUB.
    Real,
    /// Anything else.
    Numeric,
}

impl Affinity {
    /// The affinity of a declared column type.
    pub fn of_decl(decl: &str) -> Affinity {
        let t = decl.to_ascii_uppercase();
        if t.contains("INT") {
            Affinity::Integer
        } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
            Affinity::Text
        } else if t.contains("BLOB") || t.trim().is_empty() {
            Affinity::Blob
        } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
            Affinity::Real
        } else {
            Affinity::Numeric
        }
    }

    /// Whether this is a numeric affinity (INTEGER, REAL, NUMERIC).
    pub fn is_numeric(self) -> bool {
        matches!(self, Affinity::Integer | Affinity::Real | Affinity::Numeric)
    }
}

impl Value {
    /// Rank of the storage class in SQLite's sort order.
    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Integer(_) | Value::Real(_) => 1,
            Value::Text(_) => 2,
            Value::Blob(_) => 3,
        }
    }

    /// Whether the value is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// `typeof()`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }

    /// The value as a real for arithmetic (text converted by its numeric prefix).
    pub fn to_f64(&self) -> f64 {
        match self.to_number() {
            Value::Integer(i) => i as f64,
            Value::Real(r) => r,
            _ => 0.0,
        }
    }

    /// The value as an integer (`CAST(x AS INTEGER)`): reals truncated toward zero and
    /// saturated, text by its numeric prefix, NULL stays... callers handle NULL first.
    pub fn to_i64(&self) -> i64 {
        match self.to_number() {
            Value::Integer(i) => i,
            Value::Real(r) => real_to_i64(r),
            _ => 0,
        }
    }

    /// The value as a number for arithmetic: integers and reals as they are, text and blobs
    /// by the longest numeric prefix of their text (0 if none), NULL stays NULL.
    pub fn to_number(&self) -> Value {
        match self {
            Value::Null => Value::Null,
            Value::Integer(_) | Value::Real(_) => self.clone(),
            Value::Text(t) => numeric_prefix(t),
            Value::Blob(b) => numeric_prefix(&String::from_utf8_lossy(b)),
        }
    }

    /// The value as text, as SQLite shows it (NULL as None).
    pub fn to_text(&self) -> Option<String> {
        match self {
            Value::Null => None,
            Value::Integer(i) => Some(i.to_string()),
            Value::Real(r) => Some(format_real(*r)),
            Value::Text(t) => Some(t.clone()),
            Value::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        }
    }

    /// Truth value in a WHERE clause: NULL is None; numbers are true when non-zero; text and
    /// blobs by their numeric prefix.
    pub fn truth(&self) -> Option<bool> {
        match self.to_number() {
            Value::Null => None,
            Value::Integer(i) => Some(i != 0),
            Value::Real(r) => Some(r != 0.0),
            _ => Some(false),
        }
    }

    /// Applies a column affinity, as SQLite does when a value is stored.
    pub fn with_affinity(self, aff: Affinity) -> Value {
        match aff {
            Affinity::Blob => self,
            Affinity::Text => match self {
                Value::Integer(_) | Value::Real(_) => {
                    Value::Text(self.to_text().unwrap_or_default())
                }
                v => v,
            },
            Affinity::Numeric | Affinity::Integer => match self {
                Value::Text(ref t) => match exact_number(t) {
                    Some(Value::Real(r)) => {
                        real_as_integer(r).map_or(Value::Real(r), Value::Integer)
                    }
                    Some(v) => v,
                    None => self,
                },
                Value::Real(r) => real_as_integer(r).map_or(Value::Real(r), Value::Integer),
                v => v,
            },
            Affinity::Real => match self {
                Value::Text(ref t) => match exact_number(t) {
                    Some(Value::Integer(i)) => Value::Real(i as f64),
                    Some(v) => v,
                    None => self,
                },
                Value::Integer(i) => Value::Real(i as f64),
                v => v,
            },
        }
    }

    /// `CAST(self AS <decl>)`.
    pub fn cast(&self, decl: &str) -> Value {
        if self.is_null() {
            return Value::Null;
        }
        match Affinity::of_decl(decl) {
            Affinity::Blob => match self {
                Value::Blob(_) => self.clone(),
                v => Value::Blob(v.to_text().unwrap_or_default().into_bytes()),
            },
            Affinity::Text => Value::Text(self.to_text().unwrap_or_default()),
            Affinity::Integer => match self {
                // Text casts by its leading integer digits only (SQLite's sqlite3Atoi64).
                Value::Text(t) => Value::Integer(integer_prefix(t)),
                Value::Blob(b) => Value::Integer(integer_prefix(&String::from_utf8_lossy(b))),
                v => Value::Integer(v.to_i64()),
            },
            Affinity::Real => Value::Real(self.to_f64()),
            Affinity::Numeric => match self {
                Value::Integer(_) | Value::Real(_) => self.clone(),
                v => match v.to_number() {
                    Value::Real(r) => real_as_integer(r).map_or(Value::Real(r), Value::Integer),
                    n => n,
                },
            },
        }
    }
}

/// SQLite's total order of values (for ORDER BY, DISTINCT, GROUP BY, indexes): NULL first,
/// then numbers (integers and reals compared exactly), then text (bytewise), then blobs.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => x.cmp(y),
        (Value::Real(x), Value::Real(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Value::Integer(x), Value::Real(y)) => cmp_int_real(*x, *y),
        (Value::Real(x), Value::Integer(y)) => cmp_int_real(*y, *x).reverse(),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Blob(x), Value::Blob(y)) => x.cmp(y),
        _ => a.rank().cmp(&b.rank()),
    }
}

/// Compares an integer with a real exactly.
fn cmp_int_real(i: i64, r: f64) -> Ordering {
    if r.is_nan() {
        return Ordering::Greater;
    }
    if r >= TWO63 {
        return Ordering::Less;
    }
    if r < -TWO63 {
        return Ordering::Greater;
    }
    let t = r as i64; // truncates toward zero; in range here
    match i.cmp(&t) {
        Ordering::Equal => {
            let frac = r - t as f64;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

/// A real converted to an integer, truncated toward zero and saturated.
pub fn real_to_i64(r: f64) -> i64 {
    if r.is_nan() {
        0
    } else if r >= TWO63 {
        i64::MAX
    } else if r <= -TWO63 {
        i64::MIN
    } else {
        r as i64
    }
}

/// The integer a real equals exactly, if any (and small enough that SQLite would store it as
/// an integer).
pub fn real_as_integer(r: f64) -> Option<i64> {
    if r.is_finite() && r.abs() < 9.0e15 && (r as i64) as f64 == r {
        Some(r as i64)
    } else {
        None
    }
}

/// `trunc` for reals without std.
pub fn trunc(x: f64) -> f64 {
    if !x.is_finite() || x.abs() >= 4_503_599_627_370_496.0 {
        x
    } else {
        (x as i64) as f64
    }
}

/// The whole text as a number (leading and trailing spaces allowed), or None — the test
/// SQLite's numeric affinity applies.
pub fn exact_number(t: &str) -> Option<Value> {
    let s = t.trim_matches(|c: char| c.is_ascii_whitespace());
    let (v, used) = parse_number(s)?;
    if used != s.len() {
        return None;
    }
    Some(v)
}

/// The leading `[+-]digits` of the text (after spaces) as an integer, saturated; 0 if none.
pub fn integer_prefix(t: &str) -> i64 {
    let s = t.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let b = s.as_bytes();
    let mut i = usize::from(b.first().is_some_and(|c| *c == b'+' || *c == b'-'));
    let neg = b.first() == Some(&b'-');
    let mut v: i128 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        v = (v * 10 + i128::from(b[i] - b'0')).min(i128::from(i64::MAX) + 1);
        i += 1;
    }
    let v = if neg { -v } else { v };
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The longest numeric prefix of the text (after leading spaces), 0 if none.
pub fn numeric_prefix(t: &str) -> Value {
    let s = t.trim_start_matches(|c: char| c.is_ascii_whitespace());
    parse_number(s).map_or(Value::Integer(0), |(v, _)| v)
}

/// Parses a number at the start of `s`: `[+-]digits[.digits][e[+-]digits]` or
/// `[+-].digits…`; returns the value (integer if it has no `.`/exponent and fits) and the
/// bytes used.
fn parse_number(s: &str) -> Option<(Value, usize)> {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut is_real = false;
    let mut frac_digits = 0;
    if i < b.len() && b[i] == b'.' {
        let mut j = i + 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        frac_digits = j - i - 1;
        if int_digits + frac_digits > 0 {
            is_real = true;
            i = j;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let ds = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > ds {
            is_real = true;
            i = j;
        }
    }
    let text = &s[..i];
    if !is_real {
        if let Ok(v) = text.parse::<i64>() {
            return Some((Value::Integer(v), i));
        }
    }
    text.parse::<f64>().ok().map(|r| (Value::Real(r), i))
}

/// A real as SQLite (3.53) renders it as text (`%!.17g` over its decimal conversion): 18
/// significant digits, cut to 17 — or fewer when fewer give the same real back (so 49.47
/// stays 49.47) — trailing zeros dropped, `.0` kept on integral values, the exponent form
/// below 1e-4 and from 1e17 on, `Inf`/`-Inf`/`NaN` for the special values.
pub fn format_real(r: f64) -> String {
    if r.is_nan() {
        return String::from("NaN");
    }
    if r.is_infinite() {
        return String::from(if r > 0.0 { "Inf" } else { "-Inf" });
    }
    if r == 0.0 {
        return String::from("0.0"); // -0.0 too, as in SQLite
    }
    let a = r.abs();
    // 18 significant digits, and where the decimal point goes.
    let mut sci = String::new();
    let _ = write!(sci, "{:.17e}", a);
    let (mant, e) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let mut z: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    let mut idp = e.parse::<i32>().unwrap_or(0) + 1;
    let n = z.len(); // 18
    let same = |digits: &[u8], p: i32| -> bool {
        let mut t = String::with_capacity(digits.len() + 6);
        for d in digits {
            t.push(*d as char);
        }
        let _ = write!(t, "e{p}");
        t.parse::<f64>().ok() == Some(a)
    };
    let mut round_at = 17.min(n);
    if n >= 16 && z[15] == b'9' && z[14] == b'9' {
        let mut jj = 14;
        while jj > 0 && z[jj - 1] == b'9' {
            jj -= 1;
        }
        // The prefix plus one, as digits.
        let mut v2: Vec<u8> = z[..jj].to_vec();
        let mut k = jj;
        loop {
            if k == 0 {
                v2.insert(0, b'1');
                break;
            }
            k -= 1;
            if v2[k] == b'9' {
                v2[k] = b'0';
            } else {
                v2[k] += 1;
                break;
            }
        }
        if same(&v2, idp - jj as i32) {
            round_at = jj + 1;
        }
    } else if n >= 16 && (idp >= n as i32 || (z[15] == b'0' && z[14] == b'0' && z[13] == b'0')) {
        let mut jj = 13;
        while jj > 1 && z[jj - 1] == b'0' {
            jj -= 1;
        }
        if same(&z[..jj], idp - jj as i32) {
            round_at = jj + 1;
        }
    }
    // Round half up at `round_at`.
    let up = z.get(round_at).is_some_and(|d| *d >= b'5');
    z.truncate(round_at);
    if up {
        let mut k = z.len();
        loop {
            if k == 0 {
                z.insert(0, b'1');
                idp += 1;
                break;
            }
            k -= 1;
            if z[k] == b'9' {
                z[k] = b'0';
            } else {
                z[k] += 1;
                break;
            }
        }
    }
    while z.len() > 1 && z.last() == Some(&b'0') {
        z.pop();
    }
    let digits: String = z.iter().map(|d| *d as char).collect();
    let mut out = String::new();
    if r < 0.0 {
        out.push('-');
    }
    let x = idp - 1;
    if !(-4..17).contains(&x) {
        out.push_str(&digits[..1]);
        out.push('.');
        out.push_str(if digits.len() > 1 { &digits[1..] } else { "0" });
        out.push('e');
        out.push(if x < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", x.unsigned_abs());
    } else if idp <= 0 {
        out.push_str("0.");
        for _ in 0..(-idp) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let ip = idp as usize;
        if digits.len() > ip {
            out.push_str(&digits[..ip]);
            out.push('.');
            out.push_str(&digits[ip..]);
        } else {
            out.push_str(&digits);
            for _ in digits.len()..ip {
                out.push('0');
            }
            out.push_str(".0");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_print_like_sqlite() {
        // Expectations from SQLite 3.53 (rusqlite bundled): CAST(x AS TEXT).
        for (r, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e20, "1.0e+20"),
            (1.5e-7, "1.5e-07"),
            (1.5e16, "15000000000000000.0"),
            (1.5e17, "1.5e+17"),
            (1e-4, "0.0001"),
            (1e-5, "1.0e-05"),
            (0.000_123_456_789_012_345_67, "0.00012345678901234567"),
            (49.47, "49.47"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0 / 3.0, "0.33333333333333332"),
            (1.0 / 7.0, "0.14285714285714285"),
            (1e15 + 0.3, "1000000000000000.3"),
            (9007199254740993.0, "9007199254740992.0"),
            (123_456_789.123_456_79, "123456789.12345679"),
            (4.35 * 100.0, "434.99999999999994"),
            (2.0 / 3.0 * 1e10, "6666666666.666666"),
            (-TWO63, "-9.2233720368547758e+18"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (100.0, "100.0"),
            (12345.678, "12345.678"),
        ] {
            assert_eq!(format_real(r), s, "{r:e}");
        }
    }

    #[test]
    fn affinity_and_numbers() {
        assert_eq!(Affinity::of_decl("VARCHAR(10)"), Affinity::Text);
        assert_eq!(Affinity::of_decl("BIGINT"), Affinity::Integer);
        assert_eq!(Affinity::of_decl(""), Affinity::Blob);
        assert_eq!(Affinity::of_decl("DECIMAL(5,2)"), Affinity::Numeric);
        assert_eq!(
            Value::Text(" 12 ".into()).with_affinity(Affinity::Integer),
            Value::Integer(12)
        );
        assert_eq!(
            Value::Text("1e3".into()).with_affinity(Affinity::Integer),
            Value::Integer(1000)
        );
        assert_eq!(
            Value::Text("12x".into()).with_affinity(Affinity::Integer),
            Value::Text("12x".into())
        );
        assert_eq!(
            Value::Integer(3).with_affinity(Affinity::Text),
            Value::Text("3".into())
        );
        assert_eq!(numeric_prefix("12abc"), Value::Integer(12));
        assert_eq!(numeric_prefix("abc"), Value::Integer(0));
        assert_eq!(numeric_prefix(" -3.5e1x"), Value::Real(-35.0));
        assert_eq!(
            compare(&Value::Integer(1), &Value::Real(1.5)),
            Ordering::Less
        );
        assert_eq!(
            compare(&Value::Real(2.0), &Value::Integer(2)),
            Ordering::Equal
        );
        assert_eq!(
            compare(&Value::Integer(i64::MAX), &Value::Real(9.3e18)),
            Ordering::Less
        );
        assert_eq!(compare(&Value::Null, &Value::Integer(0)), Ordering::Less);
        assert_eq!(
            compare(&Value::Text("a".into()), &Value::Blob(vec![0])),
            Ordering::Less
        );
    }
}
