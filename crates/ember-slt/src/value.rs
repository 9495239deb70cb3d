//! Values as a backend returns them, and their text in a result as the original sqllogictest
//! runner (`slt_sqlite.c`) prints it for the column types `I`, `R` and `T`.

use std::fmt::Write as _;

/// One value of a result row, in SQLite's five storage classes.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// A 64-bit signed integer.
    Integer(i64),
    /// A 64-bit IEEE float.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl SqlValue {
    /// The value's text in a result column of type `ty` (`I`, `R` or `T`; any other letter is
    /// treated as `T`), as the original runner prints it:
    ///
    /// * NULL is `NULL` whatever the type;
    /// * `I`: an integer as is, a real truncated toward zero (saturating), text or a blob by its
    ///   leading integer as SQLite's `sqlite3_column_int64` reads it (else 0);
    /// * `R`: the value as a double (text by its leading number, else 0.0) printed `%.3f`;
    /// * `T`: the value's text as SQLite renders it (integers as `%lld`, reals as SQLite's
    ///   real-to-text, a blob's bytes up to the first NUL); an empty text is `(empty)`, and every
    ///   byte below `' '` or above `'~'` becomes `@` (so a non-ASCII character gives one `@` per
    ///   UTF-8 byte, as in the C runner).
    pub fn format(&self, ty: char) -> String {
        match (self, ty) {
            (SqlValue::Null, _) => "NULL".to_string(),
            (v, 'I') => v.as_i64().to_string(),
            (v, 'R') => {
                let x = v.as_f64();
                if x.is_nan() {
                    "NaN".to_string()
                } else {
                    format!("{x:.3}")
                }
            }
            (v, _) => printable(&v.text_bytes()),
        }
    }

    /// The value as `sqlite3_column_int64` gives it.
    pub fn as_i64(&self) -> i64 {
        match self {
            SqlValue::Null => 0,
            SqlValue::Integer(i) => *i,
            // `as` truncates toward zero, saturates, and maps NaN to 0, as SQLite does.
            SqlValue::Real(r) => *r as i64,
            SqlValue::Text(t) => leading_integer(t.as_bytes()),
            SqlValue::Blob(b) => leading_integer(b),
        }
    }

    /// The value as `sqlite3_column_double` gives it.
    pub fn as_f64(&self) -> f64 {
        match self {
            SqlValue::Null => 0.0,
            SqlValue::Integer(i) => *i as f64,
            SqlValue::Real(r) => *r,
            SqlValue::Text(t) => leading_real(t.as_bytes()),
            SqlValue::Blob(b) => leading_real(b),
        }
    }

    /// The bytes `sqlite3_column_text` gives for the value (up to the first NUL, as the C runner
    /// sees them).
    fn text_bytes(&self) -> Vec<u8> {
        let bytes = match self {
            SqlValue::Null => Vec::new(),
            SqlValue::Integer(i) => i.to_string().into_bytes(),
            SqlValue::Real(r) => real_to_text(*r).into_bytes(),
            SqlValue::Text(t) => t.as_bytes().to_vec(),
            SqlValue::Blob(b) => b.clone(),
        };
        match bytes.iter().position(|&b| b == 0) {
            Some(n) => bytes[..n].to_vec(),
            None => bytes,
        }
    }
}

/// `(empty)` for no bytes, else the bytes with every one outside `' '..='~'` replaced by `@`.
fn printable(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "(empty)".to_string();
    }
    bytes
        .iter()
        .map(|&b| {
            if (b' '..=b'~').contains(&b) {
                b as char
            } else {
                '@'
            }
        })
        .collect()
}

/// SQLite's `sqlite3Atoi64` as `sqlite3_column_int64` uses it on text: leading whitespace, an
/// optional sign, then digits up to the first non-digit; saturates on overflow; 0 when there are
/// no digits.
fn leading_integer(bytes: &[u8]) -> i64 {
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    let negative = match bytes.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut value: i128 = 0;
    while let Some(d) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
        value = (value * 10 + i128::from(d - b'0')).min(i128::from(i64::MAX) + 1);
        i += 1;
    }
    let value = if negative { -value } else { value };
    value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The longest leading decimal number in `bytes` (after whitespace) as a double, else 0.0.
fn leading_real(bytes: &[u8]) -> f64 {
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    let start = i;
    if matches!(bytes.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let from = *i;
        while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - from
    };
    let mut mantissa = digits(&mut i);
    if bytes.get(i) == Some(&b'.') {
        let mut j = i + 1;
        let frac = digits(&mut j);
        if mantissa + frac > 0 {
            mantissa += frac;
            i = j;
        }
    }
    if mantissa == 0 {
        return 0.0;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(bytes.get(j), Some(b'-' | b'+')) {
            j += 1;
        }
        if digits(&mut j) > 0 {
            i = j;
        }
    }
    std::str::from_utf8(&bytes[start..i])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
}

/// SQLite 3.53's text for a real (`%!.17g` with its round-trip shortening, as
/// `vdbeMemRenderNum` writes it): at most 17 significant digits, exponent form below 1e-4 or
/// from 1e17, always a `.` in the fixed form (`1.0`, `100.0`).
pub fn real_to_text(r: f64) -> String {
    if r.is_nan() {
        return "NaN".to_string();
    }
    if r.is_infinite() {
        return if r < 0.0 { "-Inf" } else { "Inf" }.to_string();
    }
    if r == 0.0 {
        return "0.0".to_string();
    }
    let a = r.abs();
    // sqlite3FpDecode(r, iRound = 17, mxRound = 20).
    let (mut z, exp) = crate::fp::decode(a);
    let n = z.len();
    let mut idp = n as i32 + exp; // digits before the decimal point
    let mut round = 17usize;
    let value_of = |digits: u64, e: i32| format!("{digits}e{e}").parse::<f64>().ok();
    let num = |d: &[u8]| d.iter().fold(0u64, |v, &c| v * 10 + u64::from(c - b'0'));
    if round < n {
        // Fewer digits when they give the same double (49.47, not 49.469999999999999).
        if z[15] == b'9' && z[14] == b'9' {
            let mut jj = 14;
            while jj > 0 && z[jj - 1] == b'9' {
                jj -= 1;
            }
            let v2 = if jj == 0 { 1 } else { num(&z[..jj]) + 1 };
            if value_of(v2, idp - jj as i32) == Some(a) {
                round = jj + 1;
            }
        } else if idp >= n as i32 || (z[15] == b'0' && z[14] == b'0' && z[13] == b'0') {
            let mut jj = 13;
            while jj > 1 && z[jj - 1] == b'0' {
                jj -= 1;
            }
            if value_of(num(&z[..jj]), idp - jj as i32) == Some(a) {
                round = jj + 1;
            }
        }
        let up = z[round] >= b'5';
        z.truncate(round);
        if up {
            let mut j = round;
            loop {
                if j == 0 {
                    z.insert(0, b'1');
                    idp += 1;
                    break;
                }
                j -= 1;
                if z[j] == b'9' {
                    z[j] = b'0';
                } else {
                    z[j] += 1;
                    break;
                }
            }
        }
    }
    while z.len() > 1 && z.last() == Some(&b'0') {
        z.pop();
    }
    let digits = String::from_utf8_lossy(&z).into_owned();
    let mut out = String::new();
    if r < 0.0 {
        out.push('-');
    }
    let e = idp - 1;
    if !(-4..=16).contains(&e) {
        out.push_str(&digits[..1]);
        out.push('.');
        if digits.len() > 1 {
            out.push_str(&digits[1..]);
        } else {
            out.push('0');
        }
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if idp <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-idp) as usize));
        out.push_str(&digits);
    } else {
        let idp = idp as usize;
        if digits.len() <= idp {
            out.push_str(&digits);
            out.push_str(&"0".repeat(idp - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..idp]);
            out.push('.');
            out.push_str(&digits[idp..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_is_null_for_every_type() {
        for ty in ['I', 'R', 'T'] {
            assert_eq!(SqlValue::Null.format(ty), "NULL");
        }
    }

    #[test]
    fn integer_column() {
        assert_eq!(SqlValue::Integer(-42).format('I'), "-42");
        assert_eq!(SqlValue::Real(2.9).format('I'), "2");
        assert_eq!(SqlValue::Real(-2.9).format('I'), "-2");
        assert_eq!(SqlValue::Real(1e300).format('I'), i64::MAX.to_string());
        assert_eq!(SqlValue::Text("12abc".into()).format('I'), "12");
        assert_eq!(SqlValue::Text("  -7.5".into()).format('I'), "-7");
        assert_eq!(SqlValue::Text("abc".into()).format('I'), "0");
        assert_eq!(
            SqlValue::Text("99999999999999999999".into()).format('I'),
            i64::MAX.to_string()
        );
        assert_eq!(SqlValue::Blob(b"3x".to_vec()).format('I'), "3");
    }

    #[test]
    fn real_column() {
        assert_eq!(SqlValue::Integer(3).format('R'), "3.000");
        assert_eq!(SqlValue::Real(2.0 / 3.0).format('R'), "0.667");
        assert_eq!(SqlValue::Real(-0.0001).format('R'), "-0.000");
        assert_eq!(SqlValue::Text("1.5e1xyz".into()).format('R'), "15.000");
        assert_eq!(SqlValue::Text(".5".into()).format('R'), "0.500");
        assert_eq!(SqlValue::Text("x".into()).format('R'), "0.000");
    }

    #[test]
    fn text_column() {
        assert_eq!(SqlValue::Integer(7).format('T'), "7");
        assert_eq!(SqlValue::Real(1.0).format('T'), "1.0");
        assert_eq!(SqlValue::Real(0.5).format('T'), "0.5");
        assert_eq!(SqlValue::Text(String::new()).format('T'), "(empty)");
        assert_eq!(SqlValue::Text("a\tb\nc".into()).format('T'), "a@b@c");
        assert_eq!(SqlValue::Text("é".into()).format('T'), "@@");
        assert_eq!(SqlValue::Text("a b".into()).format('T'), "a b");
        assert_eq!(SqlValue::Blob(b"AB\0C".to_vec()).format('T'), "AB");
        assert_eq!(SqlValue::Blob(vec![0xff]).format('T'), "@");
        assert_eq!(SqlValue::Blob(vec![]).format('T'), "(empty)");
    }

    #[test]
    fn real_text_forms() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (-1.5, "-1.5"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (49.47, "49.47"),
            (1e17, "1.0e+17"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (9.223372036854776e18, "9.2233720368547758e+18"),
            (1e100, "1.0e+100"),
            (123456789012345.0, "123456789012345.0"),
        ];
        for (x, want) in cases {
            assert_eq!(real_to_text(*x), *want, "{x:e}");
        }
    }
}
