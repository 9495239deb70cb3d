//! Table schemas: column names and types, the primary key, the kind of primary index.
//!
//! The engine stores what the SQL layer declared: each column's name, its declared type (the
//! SQL layer derives SQLite's type affinity from it) and whether it is `NOT NULL`; the
//! primary key as column positions (none: the table is keyed by an engine-assigned rowid);
//! and the primary index kind, hash (the default) or tree (B+tree; ordered scans).
//!
//! Encoded as a row (see [`row`](crate::row)), so it inherits the row format's version byte
//! and checks:
//!
//! ```text
//! [schema version = 1, index kind (0 hash, 1 tree), column count n,
//!  n × (name text, declared type text, flags integer: bit 0 = NOT NULL),
//!  key column count k, k × column position]
//! ```

use crate::error::{Result, TableError};
use crate::row::{Value, decode_row, encode_row};

const SCHEMA_VERSION: i64 = 1;
/// Columns a table may have (SQLite's default limit).
pub const MAX_COLUMNS: usize = 2000;

/// The primary index of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexKind {
    /// A hash index: point lookups; scans in storage order.
    #[default]
    Hash,
    /// A B+tree: point lookups, ordered and range scans.
    Tree,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// The declared type, as written in `CREATE TABLE` (may be empty).
    pub decl_type: String,
    /// Whether NULL is refused.
    pub not_null: bool,
}

/// A table's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// The columns, in order.
    pub columns: Vec<Column>,
    /// Positions of the primary-key columns, in key order; empty for a rowid table.
    pub primary_key: Vec<usize>,
    /// The primary index.
    pub index: IndexKind,
}

impl Schema {
    /// A key–value table, the engine API's commonest shape: `k <key_type> NOT NULL`, the
    /// primary key, and `v <value_type>`.
    pub fn key_value(key_type: &str, value_type: &str, index: IndexKind) -> Schema {
        let column = |name: &str, decl_type: &str, not_null| Column {
            name: name.into(),
            decl_type: decl_type.into(),
            not_null,
        };
        Schema {
            columns: vec![column("k", key_type, true), column("v", value_type, false)],
            primary_key: vec![0],
            index,
        }
    }

    /// Checks the schema: at least one column, at most [`MAX_COLUMNS`], unique non-empty
    /// names (compared ASCII-case-insensitively, as SQL does), key positions in range and
    /// not repeated.
    pub fn validate(&self) -> Result<()> {
        if self.columns.is_empty() || self.columns.len() > MAX_COLUMNS {
            return Err(TableError::Invalid("a table has 1 to 2000 columns"));
        }
        for (i, c) in self.columns.iter().enumerate() {
            if c.name.is_empty() {
                return Err(TableError::Invalid("a column name is empty"));
            }
            if self.columns[..i]
                .iter()
                .any(|d| d.name.eq_ignore_ascii_case(&c.name))
            {
                return Err(TableError::Invalid("two columns have the same name"));
            }
        }
        for (i, &k) in self.primary_key.iter().enumerate() {
            if k >= self.columns.len() || self.primary_key[..i].contains(&k) {
                return Err(TableError::Invalid(
                    "a primary-key column is out of range or repeated",
                ));
            }
        }
        Ok(())
    }

    /// The position of a column by name (ASCII-case-insensitive).
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// Appends the encoding (see the module docs).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut v = vec![
            Value::Integer(SCHEMA_VERSION),
            Value::Integer(match self.index {
                IndexKind::Hash => 0,
                IndexKind::Tree => 1,
            }),
            Value::Integer(self.columns.len() as i64),
        ];
        for c in &self.columns {
            v.push(Value::Text(c.name.clone()));
            v.push(Value::Text(c.decl_type.clone()));
            v.push(Value::Integer(i64::from(c.not_null)));
        }
        v.push(Value::Integer(self.primary_key.len() as i64));
        v.extend(self.primary_key.iter().map(|&k| Value::Integer(k as i64)));
        encode_row(&v, out);
    }

    /// Decodes and validates a schema.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |reason| TableError::Corrupt {
            structure: "table schema",
            offset: 0,
            reason,
        };
        let values = decode_row(bytes)?;
        let mut cur = Cursor { v: &values, at: 0 };
        let version = cur.int().ok_or(bad("missing version"))?;
        if version != SCHEMA_VERSION {
            return Err(TableError::Version {
                structure: "table schema",
                offset: 0,
                found: u16::try_from(version).unwrap_or(u16::MAX),
            });
        }
        let index = match cur.int() {
            Some(0) => IndexKind::Hash,
            Some(1) => IndexKind::Tree,
            _ => return Err(bad("unknown index kind")),
        };
        let n = cur.count().ok_or(bad("bad column count"))?;
        let mut columns = Vec::with_capacity(n.min(MAX_COLUMNS));
        for _ in 0..n {
            let name = cur.text().ok_or(bad("bad column name"))?;
            let decl_type = cur.text().ok_or(bad("bad declared type"))?;
            let flags = cur.int().ok_or(bad("bad column flags"))?;
            columns.push(Column {
                name,
                decl_type,
                not_null: flags & 1 != 0,
            });
        }
        let k = cur.count().ok_or(bad("bad key column count"))?;
        let mut primary_key = Vec::with_capacity(k.min(MAX_COLUMNS));
        for _ in 0..k {
            primary_key.push(cur.count().ok_or(bad("bad key column"))?);
        }
        if cur.at != values.len() {
            return Err(bad("trailing values"));
        }
        let s = Schema {
            columns,
            primary_key,
            index,
        };
        s.validate().map_err(|_| bad("inconsistent schema"))?;
        Ok(s)
    }
}

/// A secondary index on a table (the `secondary-index` module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// Its name, unique in the database.
    pub name: String,
    /// Positions of the indexed columns, in key order.
    pub columns: Vec<usize>,
    /// Hash (equality) or tree (equality, ranges, order).
    pub kind: IndexKind,
    /// Whether two rows may not share a key (rows with a NULL in the key are exempt, as in
    /// SQL).
    pub unique: bool,
}

impl IndexDef {
    /// Appends the encoding: a row [name, kind, unique, column count, columns…].
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut v = vec![
            Value::Text(self.name.clone()),
            Value::Integer(i64::from(self.kind == IndexKind::Tree)),
            Value::Integer(i64::from(self.unique)),
            Value::Integer(self.columns.len() as i64),
        ];
        v.extend(self.columns.iter().map(|&c| Value::Integer(c as i64)));
        encode_row(&v, out);
    }

    /// Decodes an index definition and checks it against its table's schema.
    pub fn decode(bytes: &[u8], schema: &Schema) -> Result<Self> {
        let bad = |reason| TableError::Corrupt {
            structure: "index definition",
            offset: 0,
            reason,
        };
        let values = decode_row(bytes)?;
        let mut cur = Cursor { v: &values, at: 0 };
        let name = cur.text().ok_or(bad("bad name"))?;
        let kind = match cur.int() {
            Some(0) => IndexKind::Hash,
            Some(1) => IndexKind::Tree,
            _ => return Err(bad("unknown kind")),
        };
        let unique = cur.int().ok_or(bad("bad unique flag"))? != 0;
        let n = cur.count().ok_or(bad("bad column count"))?;
        let mut columns = Vec::with_capacity(n);
        for _ in 0..n {
            columns.push(cur.count().ok_or(bad("bad column"))?);
        }
        let def = IndexDef {
            name,
            columns,
            kind,
            unique,
        };
        def.validate(schema)
            .map_err(|_| bad("does not fit its table"))?;
        Ok(def)
    }

    /// Checks the definition against the table's schema.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        if self.name.is_empty() || self.columns.is_empty() {
            return Err(TableError::Invalid(
                "an index needs a name and at least one column",
            ));
        }
        for (i, &c) in self.columns.iter().enumerate() {
            if c >= schema.columns.len() || self.columns[..i].contains(&c) {
                return Err(TableError::Invalid(
                    "an index column is out of range or repeated",
                ));
            }
        }
        Ok(())
    }
}

struct Cursor<'a> {
    v: &'a [Value],
    at: usize,
}

impl Cursor<'_> {
    fn next(&mut self) -> Option<&Value> {
        let x = self.v.get(self.at)?;
        self.at += 1;
        Some(x)
    }

    fn int(&mut self) -> Option<i64> {
        match self.next()? {
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }

    fn count(&mut self) -> Option<usize> {
        usize::try_from(self.int()?)
            .ok()
            .filter(|&n| n <= MAX_COLUMNS)
    }

    fn text(&mut self) -> Option<String> {
        match self.next()? {
            Value::Text(t) => Some(t.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn people() -> Schema {
        Schema {
            columns: vec![
                Column {
                    name: "id".into(),
                    decl_type: "INTEGER".into(),
                    not_null: true,
                },
                Column {
                    name: "name".into(),
                    decl_type: "TEXT".into(),
                    not_null: false,
                },
            ],
            primary_key: vec![0],
            index: IndexKind::Tree,
        }
    }

    #[test]
    fn schemas_round_trip_and_are_checked() {
        let s = people();
        let mut b = Vec::new();
        s.encode(&mut b);
        assert_eq!(Schema::decode(&b).unwrap(), s);
        assert_eq!(s.column("NAME"), Some(1));
        let mut dup = people();
        dup.columns[1].name = "ID".into();
        assert!(dup.validate().is_err());
        let mut bad_key = people();
        bad_key.primary_key = vec![0, 0];
        assert!(bad_key.validate().is_err());
    }

    #[test]
    fn every_corruption_is_an_error_or_a_valid_schema() {
        let mut b = Vec::new();
        people().encode(&mut b);
        for i in 0..b.len() {
            for x in [0u8, 1, 0x7F, 0x80, 0xFF] {
                let mut c = b.clone();
                c[i] = x;
                if let Ok(s) = Schema::decode(&c) {
                    s.validate().unwrap();
                }
            }
        }
        for n in 0..b.len() {
            assert!(Schema::decode(&b[..n]).is_err());
        }
    }
}
