//! The SQL catalog: tables, indexes and views as the SQL layer knows them, rebuilt from the
//! `CREATE` texts kept in the [`MASTER`](crate::storage::MASTER) table.
//!
//! `ember_master` rows: `(type, name, tbl_name, engine, sql)` — `type` is `table`, `index`
//! or `view`; `engine` is the engine-level name of the table or index (engine names never
//! change, so a rename only rewrites the row). A table's UNIQUE and non-rowid PRIMARY KEY
//! constraints get engine indexes named `<engine table>_u<k>` (k-th constraint).

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ast::{ColumnDef, CreateTable, Expr, Select, Stmt, TableConstraint};
use crate::error::{Result, SqlError};
use crate::parser::parse;
use crate::value::Affinity;

/// A column of a SQL table.
#[derive(Debug, Clone, PartialEq)]
pub struct ColDef {
    /// Name as declared.
    pub name: String,
    /// Declared type.
    pub decl_type: String,
    /// Its affinity.
    pub affinity: Affinity,
    /// NOT NULL.
    pub not_null: bool,
    /// DEFAULT expression.
    pub default: Option<Expr>,
}

/// A uniqueness constraint (UNIQUE, or a PRIMARY KEY that is not the rowid).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueDef {
    /// Column positions.
    pub columns: Vec<usize>,
    /// The engine index that serves it.
    pub engine: String,
    /// Whether it is the PRIMARY KEY (for the error message).
    pub primary: bool,
    /// The user index that declared it (`CREATE UNIQUE INDEX`), if any.
    pub index: Option<String>,
}

/// A SQL table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// Name as declared (or renamed).
    pub name: String,
    /// Engine-level table name.
    pub engine: String,
    /// Columns.
    pub columns: Vec<ColDef>,
    /// The INTEGER PRIMARY KEY column (the rowid alias), if any.
    pub ipk: Option<usize>,
    /// AUTOINCREMENT on the rowid.
    pub autoincrement: bool,
    /// UNIQUE and PRIMARY KEY constraints.
    pub uniques: Vec<UniqueDef>,
    /// CHECK constraints.
    /// (The expression and the label a failure reports: its name, or its text.)
    pub checks: Vec<(Expr, String)>,
    /// Positions of the PRIMARY KEY columns (for `table_info`).
    pub pk: Vec<usize>,
    /// The `CREATE TABLE` text.
    pub sql: String,
}

impl TableDef {
    /// Position of a column by name (case-insensitive).
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }
}

/// A user index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDef {
    /// Name.
    pub name: String,
    /// Its table (SQL name).
    pub table: String,
    /// Column positions.
    pub columns: Vec<usize>,
    /// UNIQUE.
    pub unique: bool,
    /// Engine-level name.
    pub engine: String,
    /// The `CREATE INDEX` text.
    pub sql: String,
}

/// A view.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewDef {
    /// Name.
    pub name: String,
    /// Column names given in the definition.
    pub columns: Vec<String>,
    /// Its query.
    pub select: Box<Select>,
    /// The `CREATE VIEW` text.
    pub sql: String,
}

/// Everything the SQL layer knows about the schema.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Tables by lower-case name.
    pub tables: BTreeMap<String, TableDef>,
    /// Indexes by lower-case name.
    pub indexes: BTreeMap<String, IndexDef>,
    /// Views by lower-case name.
    pub views: BTreeMap<String, ViewDef>,
    /// The next number for engine names.
    pub next_engine_id: u64,
}

/// Lower-cases a name for lookups.
pub fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// [`key`] without a copy when the name is lowercase already (as names mostly are).
pub fn lower(name: &str) -> Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

impl Catalog {
    /// The table, or a "no such table" error.
    pub fn table(&self, name: &str) -> Result<&TableDef> {
        self.tables.get(&key(name)).ok_or_else(|| SqlError::NoSuch {
            what: "table",
            name: name.to_string(),
        })
    }

    /// Whether a table, view or index of this name exists.
    pub fn name_taken(&self, name: &str) -> Option<&'static str> {
        let k = key(name);
        if self.tables.contains_key(&k) {
            Some("table")
        } else if self.views.contains_key(&k) {
            Some("view")
        } else if self.indexes.contains_key(&k) {
            Some("index")
        } else {
            None
        }
    }

    /// A fresh engine name with this prefix.
    pub fn engine_name(&mut self, prefix: &str) -> String {
        self.next_engine_id += 1;
        format!("{prefix}{}", self.next_engine_id)
    }

    /// Notes an engine name read back, so fresh ones do not collide.
    pub fn saw_engine_name(&mut self, name: &str) {
        let digits: String = name
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse::<u64>() {
            self.next_engine_id = self.next_engine_id.max(n);
        }
    }

    /// Indexes (user ones) of a table.
    pub fn indexes_of(&self, table: &str) -> Vec<&IndexDef> {
        let k = key(table);
        self.indexes
            .values()
            .filter(|i| key(&i.table) == k)
            .collect()
    }

    /// Adds a catalog row as read from `ember_master`.
    pub fn load_row(&mut self, kind: &str, engine: &str, sql: &str) -> Result<()> {
        self.saw_engine_name(engine);
        let stmt = parse(sql)?
            .into_iter()
            .next()
            .map(|p| p.stmt)
            .ok_or_else(|| SqlError::Storage(format!("catalog: empty definition for {engine}")))?;
        match (kind, stmt) {
            ("table", Stmt::CreateTable(ct)) => {
                let t = table_def(&ct, engine, sql)?;
                self.tables.insert(key(&t.name), t);
            }
            ("index", Stmt::CreateIndex(ci)) => {
                let t = self.table(&ci.table)?;
                let mut cols = Vec::new();
                for (c, _) in &ci.columns {
                    cols.push(t.column(c).ok_or_else(|| SqlError::NoSuch {
                        what: "column",
                        name: c.clone(),
                    })?);
                }
                let table = t.name.clone();
                if ci.unique {
                    if let Some(t) = self.tables.get_mut(&key(&table)) {
                        t.uniques.push(UniqueDef {
                            columns: cols.clone(),
                            engine: engine.to_string(),
                            primary: false,
                            index: Some(ci.name.clone()),
                        });
                    }
                }
                self.indexes.insert(
                    key(&ci.name),
                    IndexDef {
                        name: ci.name.clone(),
                        table,
                        columns: cols,
                        unique: ci.unique,
                        engine: engine.to_string(),
                        sql: sql.to_string(),
                    },
                );
            }
            (
                "view",
                Stmt::CreateView {
                    name,
                    columns,
                    select,
                    ..
                },
            ) => {
                self.views.insert(
                    key(&name),
                    ViewDef {
                        name,
                        columns,
                        select,
                        sql: sql.to_string(),
                    },
                );
            }
            (k, _) => {
                return Err(SqlError::Storage(format!(
                    "catalog: a {k} row holds another statement"
                )));
            }
        }
        Ok(())
    }
}

/// The table definition a `CREATE TABLE` describes.
pub fn table_def(ct: &CreateTable, engine: &str, sql: &str) -> Result<TableDef> {
    let mut columns: Vec<ColDef> = Vec::new();
    let mut pk: Vec<usize> = Vec::new();
    let mut ipk = None;
    let mut autoincrement = false;
    let mut uniques: Vec<Vec<usize>> = Vec::new();
    let mut checks = Vec::new();
    let mut pk_count = 0;
    for (i, c) in ct.columns.iter().enumerate() {
        if columns.iter().any(|d| d.name.eq_ignore_ascii_case(&c.name)) {
            return Err(SqlError::invalid(format!(
                "duplicate column name: {}",
                c.name
            )));
        }
        columns.push(col_def(c));
        if let Some(desc) = c.primary_key {
            pk_count += 1;
            pk = alloc::vec![i];
            if c.decl_type.eq_ignore_ascii_case("INTEGER") && !desc {
                ipk = Some(i);
                autoincrement = c.autoincrement;
            } else if c.autoincrement {
                return Err(SqlError::invalid(
                    "AUTOINCREMENT is only allowed on an INTEGER PRIMARY KEY",
                ));
            }
        }
        if c.unique {
            uniques.push(alloc::vec![i]);
        }
        checks.extend(c.checks.iter().cloned());
    }
    let find = |name: &str| -> Result<usize> {
        columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| SqlError::NoSuch {
                what: "column",
                name: name.to_string(),
            })
    };
    for tc in &ct.constraints {
        match tc {
            TableConstraint::PrimaryKey(cols) => {
                pk_count += 1;
                pk = cols.iter().map(|c| find(c)).collect::<Result<_>>()?;
                if pk.len() == 1 && columns[pk[0]].decl_type.eq_ignore_ascii_case("INTEGER") {
                    ipk = Some(pk[0]);
                }
            }
            TableConstraint::Unique(cols) => {
                uniques.push(cols.iter().map(|c| find(c)).collect::<Result<_>>()?)
            }
            TableConstraint::Check(e, text) => checks.push((e.clone(), text.clone())),
        }
    }
    if pk_count > 1 {
        return Err(SqlError::invalid(format!(
            "table \"{}\" has more than one primary key",
            ct.name
        )));
    }
    let mut defs = Vec::new();
    if ipk.is_none() && !pk.is_empty() {
        defs.push(UniqueDef {
            columns: pk.clone(),
            engine: format!("{engine}_u0"),
            primary: true,
            index: None,
        });
    }
    for (k, cols) in uniques.into_iter().enumerate() {
        defs.push(UniqueDef {
            columns: cols,
            engine: format!("{engine}_u{}", k + 1),
            primary: false,
            index: None,
        });
    }
    Ok(TableDef {
        name: ct.name.clone(),
        engine: engine.to_string(),
        columns,
        ipk,
        autoincrement,
        uniques: defs,
        checks,
        pk,
        sql: sql.to_string(),
    })
}

/// A column definition's catalog form.
pub fn col_def(c: &ColumnDef) -> ColDef {
    ColDef {
        name: c.name.clone(),
        decl_type: c.decl_type.clone(),
        affinity: Affinity::of_decl(&c.decl_type),
        not_null: c.not_null,
        default: c.default.clone(),
    }
}
