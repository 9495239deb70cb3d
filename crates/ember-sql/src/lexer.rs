//! The lexer: SQL text to tokens with their byte offsets. Keywords are not special here;
//! the parser matches unquoted words against them ASCII-case-insensitively, so a keyword
//! can still be a name where SQLite allows it.

use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Result, SqlError};

/// A token's kind and its text.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// An unquoted word (name or keyword).
    Word(String),
    /// A quoted name: `"x"`, `[x]` or `` `x` ``.
    Quoted(String),
    /// A string literal `'...'` (quotes undoubled).
    Str(String),
    /// A numeric literal, as written.
    Num(String),
    /// A blob literal `x'…'`, decoded.
    Blob(Vec<u8>),
    /// A parameter: `?`, `?N`, `:name`, `@name`, `$name` (the text as written).
    Param(String),
    /// An operator or punctuation: `( ) , ; . + - * / % || = == != <> < <= > >= & | << >> ~`.
    Op(&'static str),
    /// End of input.
    End,
}

/// A token and the byte offset where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// What it is.
    pub tok: Tok,
    /// Byte offset in the statement text.
    pub at: usize,
}

const OPS: [&str; 25] = [
    "||", "==", "!=", "<>", "<=", ">=", "<<", ">>", "->", "(", ")", ",", ";", ".", "+", "-", "*",
    "/", "%", "=", "<", ">", "&", "|", "~",
];

/// Splits `sql` into tokens, ending with [`Tok::End`].
pub fn tokenize(sql: &str) -> Result<Vec<Token>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            match sql[i + 2..].find("*/") {
                Some(end) => i = i + 2 + end + 2,
                None => i = b.len(), // SQLite accepts an unterminated comment at the end
            }
            continue;
        }
        let at = i;
        // Blob literal.
        if (c == b'x' || c == b'X') && b.get(i + 1) == Some(&b'\'') {
            let end = sql[i + 2..]
                .find('\'')
                .ok_or_else(|| SqlError::syntax(at, "unterminated blob literal"))?;
            let hex = &sql[i + 2..i + 2 + end];
            if !hex.len().is_multiple_of(2) || !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                return Err(SqlError::syntax(
                    at,
                    "malformed blob literal (x'…' needs an even number of hex digits)",
                ));
            }
            let bytes = (0..hex.len() / 2)
                .map(|k| u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).unwrap_or(0))
                .collect();
            out.push(Token {
                tok: Tok::Blob(bytes),
                at,
            });
            i += 2 + end + 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'$' || b[j] >= 0x80)
            {
                j += 1;
            }
            out.push(Token {
                tok: Tok::Word(String::from(&sql[i..j])),
                at,
            });
            i = j;
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let mut j = i;
            if c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
                j += 2;
                while j < b.len() && b[j].is_ascii_hexdigit() {
                    j += 1;
                }
            } else {
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                if j < b.len() && b[j] == b'.' {
                    j += 1;
                    while j < b.len() && b[j].is_ascii_digit() {
                        j += 1;
                    }
                }
                if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
                    let mut k = j + 1;
                    if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
                        k += 1;
                    }
                    if k < b.len() && b[k].is_ascii_digit() {
                        while k < b.len() && b[k].is_ascii_digit() {
                            k += 1;
                        }
                        j = k;
                    } else {
                        return Err(SqlError::syntax(
                            at,
                            "malformed number (exponent without digits)",
                        ));
                    }
                }
            }
            if j < b.len() && (b[j].is_ascii_alphabetic() || b[j] == b'_') {
                return Err(SqlError::syntax(
                    at,
                    alloc::format!("unrecognized token: \"{}\"", &sql[at..=j]),
                ));
            }
            out.push(Token {
                tok: Tok::Num(String::from(&sql[i..j])),
                at,
            });
            i = j;
            continue;
        }
        match c {
            b'\'' | b'"' | b'`' => {
                let (text, next) = quoted(sql, i, c)?;
                out.push(Token {
                    tok: if c == b'\'' {
                        Tok::Str(text)
                    } else {
                        Tok::Quoted(text)
                    },
                    at,
                });
                i = next;
                continue;
            }
            b'[' => {
                let end = sql[i + 1..]
                    .find(']')
                    .ok_or_else(|| SqlError::syntax(at, "unterminated [name]"))?;
                out.push(Token {
                    tok: Tok::Quoted(String::from(&sql[i + 1..i + 1 + end])),
                    at,
                });
                i += end + 2;
                continue;
            }
            b'?' => {
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                out.push(Token {
                    tok: Tok::Param(String::from(&sql[i..j])),
                    at,
                });
                i = j;
                continue;
            }
            b':' | b'@' | b'$' => {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80)
                {
                    j += 1;
                }
                if j == i + 1 {
                    return Err(SqlError::syntax(at, "a parameter name is missing after it"));
                }
                out.push(Token {
                    tok: Tok::Param(String::from(&sql[i..j])),
                    at,
                });
                i = j;
                continue;
            }
            _ => {}
        }
        match OPS.iter().find(|op| sql[i..].starts_with(**op)) {
            Some(op) => {
                out.push(Token {
                    tok: Tok::Op(op),
                    at,
                });
                i += op.len();
            }
            None => {
                let ch = sql[i..].chars().next().unwrap_or('?');
                return Err(SqlError::syntax(
                    at,
                    alloc::format!("unrecognized token: \"{ch}\""),
                ));
            }
        }
    }
    out.push(Token {
        tok: Tok::End,
        at: sql.len(),
    });
    Ok(out)
}

/// A quoted string or name starting at `i` with quote `q`; a doubled quote is one quote.
fn quoted(sql: &str, i: usize, q: u8) -> Result<(String, usize)> {
    let b = sql.as_bytes();
    let mut text = Vec::new();
    let mut j = i + 1;
    loop {
        if j >= b.len() {
            let what = if q == b'\'' { "string" } else { "quoted name" };
            return Err(SqlError::syntax_hint(
                i,
                alloc::format!("unrecognized token: \"{}\"", &sql[i..]),
                alloc::format!("unterminated {what}"),
            ));
        }
        if b[j] == q {
            if b.get(j + 1) == Some(&q) {
                text.push(q);
                j += 2;
                continue;
            }
            break;
        }
        text.push(b[j]);
        j += 1;
    }
    // Only ASCII quote bytes were removed, so the rest is still valid UTF-8.
    Ok((String::from_utf8(text).unwrap_or_default(), j + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_positions() {
        let t = tokenize(
            "SELECT a,'it''s' -- c\n FROM \"t x\" WHERE b>=1.5e3 AND c=x'0aFF' OR ?2 /* z */",
        )
        .unwrap();
        let kinds: Vec<Tok> = t.iter().map(|t| t.tok.clone()).collect();
        assert_eq!(kinds[0], Tok::Word("SELECT".into()));
        assert_eq!(kinds[3], Tok::Str("it's".into()));
        assert_eq!(t[3].at, 9);
        assert_eq!(kinds[5], Tok::Quoted("t x".into()));
        assert!(kinds.contains(&Tok::Op(">=")));
        assert!(kinds.contains(&Tok::Num("1.5e3".into())));
        assert!(kinds.contains(&Tok::Blob(vec![10, 255])));
        assert!(kinds.contains(&Tok::Param("?2".into())));
        assert_eq!(kinds.last(), Some(&Tok::End));
    }

    #[test]
    fn errors_name_the_position() {
        for (sql, at) in [
            ("SELECT 'abc", 7),
            ("SELECT x'abc'", 7),
            ("SELECT 1 # 2", 9),
            ("SELECT 12abc", 7),
        ] {
            match tokenize(sql) {
                Err(SqlError::Syntax { at: a, .. }) => assert_eq!(a, at, "{sql}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
    }
}
