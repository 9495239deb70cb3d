//! Where a database keeps its LSM tree: the tree's blobs are extents of the database's own
//! device (through [`SharedDb`]), and the root locator of its manifest slots is one row of
//! the table-engine table `ember$lsm`, written in the transaction of the first
//! `CREATE TABLE … USING lsm`:
//!
//! ```text
//! ember$lsm(id INTEGER = 1, version INTEGER = 1, root BLOB = SpaceEnv::root_locator())
//! ```
//!
//! The row lives in a checksummed table-engine block; the locator names allocator blocks,
//! and opening checks each is allocated.

use ember_device::BlockDevice;
use ember_lsm::{Db, Options, SpaceEnv};
use ember_sql::{Result, SqlError};
use ember_table::{Column, IndexKind, Schema, Value as TValue};

use crate::TableStorage;
use crate::lsmstore::LsmStore;
use crate::shared::SharedDb;

/// The table-engine table that holds the root row.
pub const ROOT_TABLE: &str = "ember$lsm";
const ROOT_VERSION: i64 = 1;
/// Bytes of each of the two manifest slots.
const ROOT_SLOT_BYTES: u64 = 64 << 10;

/// The environment of a database's LSM tree.
pub type DbEnv<D> = SpaceEnv<SharedDb<D>>;

fn lerr(e: ember_lsm::LsmError) -> SqlError {
    SqlError::Storage(format!("lsm engine: {e}"))
}

fn terr(e: ember_table::TableError) -> SqlError {
    SqlError::Storage(e.to_string())
}

/// Opens the tree the database holds, if it has one.
pub fn open<D: BlockDevice>(
    table: &TableStorage<D>,
    opts: Options,
    sync: bool,
) -> Result<Option<LsmStore<DbEnv<D>>>> {
    let row = {
        let mut db = table.database()?;
        if !db.table_names().contains(&ROOT_TABLE) {
            return Ok(None);
        }
        db.get(ROOT_TABLE, &[TValue::Integer(1)]).map_err(terr)?
    };
    let bad =
        |why: &str| SqlError::Storage(format!("lsm engine: the root row of {ROOT_TABLE} {why}"));
    let row = row.ok_or_else(|| bad("is missing"))?;
    let root = match row.as_slice() {
        [_, TValue::Integer(ROOT_VERSION), TValue::Blob(root)] => root.clone(),
        [_, TValue::Integer(v), _] => {
            return Err(bad(&format!(
                "has format version {v}; this build reads {ROOT_VERSION}"
            )));
        }
        _ => return Err(bad("is not (id, version, root)")),
    };
    let env = SpaceEnv::open(table.shared(), &root).map_err(lerr)?;
    let tree = Db::open(env, opts).map_err(lerr)?;
    let mut store = LsmStore::new(tree)?;
    store.sync = sync;
    Ok(Some(store))
}

/// Makes a tree in the database's space and records its root in the table engine's open
/// transaction.
pub fn create<D: BlockDevice>(
    table: &mut TableStorage<D>,
    opts: Options,
    sync: bool,
) -> Result<LsmStore<DbEnv<D>>> {
    let env = SpaceEnv::create(table.shared(), ROOT_SLOT_BYTES).map_err(lerr)?;
    let root = env.root_locator();
    let tree = Db::create(env, opts).map_err(lerr)?;
    {
        let mut db = table.database()?;
        let col = |name: &str, ty: &str| Column {
            name: name.into(),
            decl_type: ty.into(),
            not_null: true,
        };
        if !db.table_names().contains(&ROOT_TABLE) {
            db.create_table(
                ROOT_TABLE,
                Schema {
                    columns: vec![
                        col("id", "INTEGER"),
                        col("version", "INTEGER"),
                        col("root", "BLOB"),
                    ],
                    primary_key: vec![0],
                    index: IndexKind::Tree,
                },
            )
            .map_err(terr)?;
        }
        db.insert(
            ROOT_TABLE,
            &[
                TValue::Integer(1),
                TValue::Integer(ROOT_VERSION),
                TValue::Blob(root),
            ],
        )
        .map_err(terr)?;
    }
    let mut store = LsmStore::new(tree)?;
    store.sync = sync;
    Ok(store)
}
