//! Secondary indexes (LUNAR §3.3, "Secondary Index" module, the `secondary-index` feature):
//! hash or B+tree indexes on any columns, in RAM, rebuilt from the rows when the database
//! opens (their definitions are in the catalog and the journal).
//!
//! An index maps the order-preserving encoding of the indexed columns to the primary keys of
//! the rows that have them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use crate::error::{Result, TableError};
use crate::row::{Value, encode_key, encode_key_value};
use crate::schema::{IndexDef, IndexKind};

#[derive(Debug)]
enum Map {
    Hash(HashMap<Vec<u8>, BTreeSet<Vec<u8>>>),
    Tree(BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>),
}

/// One secondary index's contents.
#[derive(Debug)]
pub(crate) struct Secondary {
    pub(crate) def: IndexDef,
    map: Map,
}

impl Secondary {
    pub(crate) fn new(def: IndexDef) -> Self {
        let map = match def.kind {
            IndexKind::Hash => Map::Hash(HashMap::new()),
            IndexKind::Tree => Map::Tree(BTreeMap::new()),
        };
        Secondary { def, map }
    }

    /// The index key of a row, and whether it holds a NULL (exempt from uniqueness).
    pub(crate) fn key(&self, row: &[Value]) -> (Vec<u8>, bool) {
        let mut k = Vec::new();
        let mut null = false;
        for &c in &self.def.columns {
            let v = row.get(c).unwrap_or(&Value::Null);
            null |= matches!(v, Value::Null);
            encode_key_value(v.as_value_ref(), &mut k);
        }
        (k, null)
    }

    fn set(&mut self, key: &[u8]) -> Option<&mut BTreeSet<Vec<u8>>> {
        match &mut self.map {
            Map::Hash(m) => m.get_mut(key),
            Map::Tree(m) => m.get_mut(key),
        }
    }

    /// Whether adding `pk` under `key` would break uniqueness.
    pub(crate) fn conflicts(&self, key: &[u8], null: bool, pk: &[u8]) -> bool {
        let set = match &self.map {
            Map::Hash(m) => m.get(key),
            Map::Tree(m) => m.get(key),
        };
        self.def.unique && !null && set.is_some_and(|s| s.iter().any(|p| p != pk))
    }

    pub(crate) fn add(&mut self, key: Vec<u8>, pk: Vec<u8>) {
        match &mut self.map {
            Map::Hash(m) => m.entry(key).or_default().insert(pk),
            Map::Tree(m) => m.entry(key).or_default().insert(pk),
        };
    }

    pub(crate) fn remove(&mut self, key: &[u8], pk: &[u8]) {
        let empty = self.set(key).is_some_and(|s| {
            s.remove(pk);
            s.is_empty()
        });
        if empty {
            match &mut self.map {
                Map::Hash(m) => m.remove(key),
                Map::Tree(m) => m.remove(key),
            };
        }
    }

    /// Primary keys of the rows whose encoded index key is `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Vec<Vec<u8>> {
        let hit = match &self.map {
            Map::Hash(m) => m.get(key),
            Map::Tree(m) => m.get(key),
        };
        hit.map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    /// Primary keys of the rows whose indexed columns equal `values`.
    pub(crate) fn lookup(&self, values: &[Value]) -> Vec<Vec<u8>> {
        let mut k = Vec::new();
        encode_key(values, &mut k);
        self.get(&k)
    }

    /// Primary keys of the rows whose indexed columns lie within the bounds, in index order
    /// (tree indexes only).
    pub(crate) fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        match &self.map {
            Map::Tree(m) => Ok(m
                .range((lo, hi))
                .flat_map(|(_, s)| s.iter().cloned())
                .collect()),
            Map::Hash(_) => Err(TableError::Invalid("a range over a hash index")),
        }
    }
}
