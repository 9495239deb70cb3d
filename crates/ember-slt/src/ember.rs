//! The EmberDB backend: a fresh in-memory database per test file, through the `ember` API.

use crate::runner::{Backend, Outcome};
use crate::value::SqlValue;

/// EmberDB under test (`skipif ember` / `onlyif ember`).
#[derive(Debug)]
pub struct EmberBackend {
    conn: ember::Connection,
}

impl EmberBackend {
    /// A fresh in-memory database.
    pub fn new() -> Result<Self, String> {
        let conn = ember::Connection::open_in_memory().map_err(|e| e.to_string())?;
        Ok(EmberBackend { conn })
    }
}

fn value(v: &ember::Value) -> SqlValue {
    match v {
        ember::Value::Null => SqlValue::Null,
        ember::Value::Integer(i) => SqlValue::Integer(*i),
        ember::Value::Real(r) => SqlValue::Real(*r),
        ember::Value::Text(t) => SqlValue::Text(t.clone()),
        ember::Value::Blob(b) => SqlValue::Blob(b.clone()),
    }
}

impl Backend for EmberBackend {
    fn name(&self) -> &str {
        "ember"
    }

    /// Runs the statements in order, stopping at the first error (the ones before it stay
    /// applied, as in SQLite); the outcome is the last statement's.
    fn execute(&mut self, sql: &str) -> Result<Outcome, String> {
        let mut outcome = Outcome::Done;
        self.conn
            .execute_each(sql, |_, out| {
                outcome = if out.columns.is_empty() {
                    Outcome::Done
                } else {
                    Outcome::Rows(
                        out.rows
                            .iter()
                            .map(|r| r.iter().map(value).collect())
                            .collect(),
                    )
                };
            })
            .map_err(|e| e.to_string())?;
        Ok(outcome)
    }
}
