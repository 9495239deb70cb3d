//! The SQLite backend (feature `sqlite`): an in-memory database through rusqlite, the reference
//! the test files are checked against.

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::types::ValueRef;
use rusqlite::{Batch, Connection};

use crate::runner::{Backend, Outcome};
use crate::value::SqlValue;

/// An in-memory SQLite database.
pub struct SqliteBackend {
    conn: Connection,
}

impl SqliteBackend {
    /// Opens a fresh in-memory database.
    pub fn new() -> Result<Self, String> {
        let conn = Connection::open_in_memory().map_err(|e| format!("sqlite: {e}"))?;
        Ok(SqliteBackend { conn })
    }

    /// The underlying connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

impl Backend for SqliteBackend {
    fn name(&self) -> &str {
        "sqlite"
    }

    /// Prepares and runs the statements of `sql` one after the other (rusqlite's `Batch`),
    /// stopping at the first error. The outcome is the last statement's: its rows when it has
    /// columns, else [`Outcome::Done`].
    fn execute(&mut self, sql: &str) -> Result<Outcome, String> {
        let mut batch = Batch::new(&self.conn, sql);
        let mut outcome = Outcome::Done;
        while let Some(mut stmt) = batch.next().map_err(|e| e.to_string())? {
            let ncols = stmt.column_count();
            let mut rows = stmt.raw_query();
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(|e| e.to_string())? {
                let mut values = Vec::with_capacity(ncols);
                for i in 0..ncols {
                    let value = row.get_ref(i).map_err(|e| e.to_string())?;
                    values.push(match value {
                        ValueRef::Null => SqlValue::Null,
                        ValueRef::Integer(i) => SqlValue::Integer(i),
                        ValueRef::Real(r) => SqlValue::Real(r),
                        ValueRef::Text(t) => {
                            SqlValue::Text(String::from_utf8_lossy(t).into_owned())
                        }
                        ValueRef::Blob(b) => SqlValue::Blob(b.to_vec()),
                    });
                }
                out.push(values);
            }
            outcome = if ncols > 0 {
                Outcome::Rows(out)
            } else {
                Outcome::Done
            };
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::value::real_to_text;

    #[test]
    fn runs_batches_and_returns_the_last_rows() {
        let mut db = SqliteBackend::new().unwrap();
        let out = db
            .execute("CREATE TABLE t(a); INSERT INTO t VALUES (1),(2); SELECT a FROM t ORDER BY a;")
            .unwrap();
        assert_eq!(
            out,
            Outcome::Rows(vec![vec![SqlValue::Integer(1)], vec![SqlValue::Integer(2)]])
        );
        assert_eq!(db.execute("DELETE FROM t").unwrap(), Outcome::Done);
        assert_eq!(
            db.execute("SELECT a FROM t").unwrap(),
            Outcome::Rows(vec![])
        );
        assert!(
            db.execute("SELECT nope FROM t")
                .unwrap_err()
                .contains("no such column")
        );
        // An error stops the batch: the insert after it does not run.
        assert!(
            db.execute("INSERT INTO t VALUES (3); SELEKT; INSERT INTO t VALUES (4)")
                .is_err()
        );
        assert_eq!(
            db.execute("SELECT count(*) FROM t").unwrap(),
            Outcome::Rows(vec![vec![SqlValue::Integer(1)]])
        );
    }

    /// The runner's real-to-text agrees with SQLite's own on many values.
    #[test]
    fn real_to_text_matches_sqlite() {
        let db = SqliteBackend::new().unwrap();
        let mut stmt = db.connection().prepare("SELECT CAST(?1 AS TEXT)").unwrap();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut values = vec![
            0.1,
            0.2,
            0.3,
            1.0 / 3.0,
            2.0 / 3.0,
            49.47,
            1e15,
            1e16,
            1e17,
            123.456,
            1e-4,
            1e-5,
            9.223372036854776e18,
            -0.5,
            5e-324,
            f64::MAX,
            0.1 + 0.2,
            100.0,
            1.5,
            2.5e-3,
        ];
        for _ in 0..20_000 {
            // xorshift64: random bit patterns, and random short decimals.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            if f.is_finite() {
                values.push(f);
            }
            values.push((x % 1_000_000) as f64 / 1000.0);
            values.push((x % 100_000) as f64 * 10f64.powi((x % 40) as i32 - 20));
        }
        let mut bad = Vec::new();
        for v in values {
            let want: String = stmt.query_row([v], |r| r.get(0)).unwrap();
            if real_to_text(v) != want {
                bad.push(format!("{v:e}: sqlite {want}, ours {}", real_to_text(v)));
            }
        }
        assert!(
            bad.is_empty(),
            "{} mismatches, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(10)]
        );
    }
}
