//! Secondary indexes (LUNAR §3.3, "Secondary Index" module, the `secondary-index` feature):
//! hash or B+tree indexes on any columns, in RAM, rebuilt from the rows when the database
//! opens (their definitions are in the catalog and the journal).
//!
//! An index maps the order-preserving encoding of the indexed columns to the primary keys of
//! the rows that have them: in a hash map, and for a tree index also with its keys in an
//! ordered set (see [`Map`]).

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use crate::error::{Result, TableError};
use crate::ikey::Key;
use crate::pindex::{bound_ref, empty_range};
use crate::row::{AsValueRef, Value, ValueRef, encode_key, encode_key_value};
use crate::schema::{IndexDef, IndexKind};

/// The primary keys filed under one index key: one for every key of a unique index and most
/// keys of any index, so that case holds no set.
#[derive(Debug)]
enum Pks {
    One(Key),
    Many(BTreeSet<Key>),
}

impl Pks {
    fn insert(&mut self, pk: Key) {
        match self {
            Pks::One(p) if *p == pk => {}
            Pks::One(p) => {
                let first = core::mem::replace(p, Key::new(&[]));
                *self = Pks::Many(BTreeSet::from([first, pk]));
            }
            Pks::Many(s) => {
                s.insert(pk);
            }
        }
    }

    /// Removes `pk`; whether none is left.
    fn remove(&mut self, pk: &[u8]) -> bool {
        match self {
            Pks::One(p) => p.as_slice() == pk,
            Pks::Many(s) => {
                s.remove(pk);
                if s.len() == 1 {
                    if let Some(last) = s.pop_first() {
                        *self = Pks::One(last);
                    }
                }
                matches!(self, Pks::Many(s) if s.is_empty())
            }
        }
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = &Key> {
        let (one, many) = match self {
            Pks::One(p) => (Some(p), None),
            Pks::Many(s) => (None, Some(s.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// Keys hash with a per-map random seed (they come from users' rows).
type HashMapOf<V> = HashMap<Key, V, foldhash::fast::RandomState>;

#[derive(Debug)]
enum Map {
    Hash(HashMapOf<Pks>),
    /// A tree index: its keys in order, for ranges, and each key's primary keys in a hash
    /// map, for the probes. An equality probe (a lookup by the indexed columns, a
    /// uniqueness check) then costs a hash probe, about two cache misses on an index larger
    /// than the CPU caches, instead of a descent through the ordered map's nodes, about
    /// eight; a range walks the ordered keys and probes the map for each. Each key is held
    /// twice (a key longer than `ikey::INLINE` bytes is allocated twice): with 16-byte keys
    /// and one primary key each, about 100 to 165 bytes an entry (the hash map's load
    /// varies from 0.44 to 0.875) against about 80 for one ordered map.
    Tree {
        order: BTreeSet<Key>,
        pks: HashMapOf<Pks>,
    },
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
            IndexKind::Hash => Map::Hash(HashMap::default()),
            IndexKind::Tree => Map::Tree {
                order: BTreeSet::new(),
                pks: HashMap::default(),
            },
        };
        Secondary { def, map }
    }

    /// The index key of a row, and whether it holds a NULL (exempt from uniqueness).
    pub(crate) fn key<V: AsValueRef>(&self, row: &[V]) -> (Vec<u8>, bool) {
        let mut k = Vec::new();
        let mut null = false;
        for &c in &self.def.columns {
            let v = row.get(c).map_or(ValueRef::Null, V::value_ref);
            null |= matches!(v, ValueRef::Null);
            encode_key_value(v, &mut k);
        }
        (k, null)
    }

    fn pks(&self, key: &[u8]) -> Option<&Pks> {
        match &self.map {
            Map::Hash(m) | Map::Tree { pks: m, .. } => m.get(key),
        }
    }

    /// Whether adding `pk` under `key` would break uniqueness.
    pub(crate) fn conflicts(&self, key: &[u8], null: bool, pk: &[u8]) -> bool {
        self.def.unique
            && !null
            && self
                .pks(key)
                .is_some_and(|s| s.iter().any(|p| p.as_slice() != pk))
    }

    /// Adds the entry `key` → `pk` (one search of the hash map; a tree index's ordered keys
    /// only for a new key).
    pub(crate) fn add(&mut self, key: Key, pk: Key) {
        let (m, order) = match &mut self.map {
            Map::Hash(m) => (m, None),
            Map::Tree { order, pks } => (pks, Some(order)),
        };
        match m.entry(key) {
            Entry::Occupied(mut e) => e.get_mut().insert(pk),
            Entry::Vacant(e) => {
                if let Some(order) = order {
                    order.insert(e.key().clone());
                }
                e.insert(Pks::One(pk));
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &[u8], pk: &[u8]) {
        let (m, order) = match &mut self.map {
            Map::Hash(m) => (m, None),
            Map::Tree { order, pks } => (pks, Some(order)),
        };
        if m.get_mut(key).is_some_and(|s| s.remove(pk)) {
            m.remove(key);
            if let Some(order) = order {
                order.remove(key);
            }
        }
    }

    /// Primary keys of the rows whose encoded index key is `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Vec<Vec<u8>> {
        self.pks(key)
            .map(|s| s.iter().map(|p| p.to_vec()).collect())
            .unwrap_or_default()
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
        self.range_from(lo, hi, false, usize::MAX)
    }

    /// Like [`range`](Self::range), from the high end when `desc` (rows with equal indexed
    /// values then in descending primary key order), and at most `limit` keys: only those
    /// are visited and copied.
    pub(crate) fn range_from(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let (order, m) = match &self.map {
            Map::Tree { .. } if empty_range(bound_ref(&lo), bound_ref(&hi)) => {
                return Ok(Vec::new());
            }
            Map::Tree { order, pks } => (order, pks),
            Map::Hash(_) => return Err(TableError::Invalid("a range over a hash index")),
        };
        debug_assert_eq!(
            order.len(),
            m.len(),
            "a tree index's two maps hold one key set"
        );
        let range = order.range::<[u8], _>((bound_ref(&lo), bound_ref(&hi)));
        let copy = |p: &Key| p.to_vec();
        // Every ordered key has its entry in the map (`add` and `remove` keep them
        // together); a key without one would have no rows.
        let rows = |k: &Key| m.get(k.as_slice());
        Ok(if desc {
            range
                .rev()
                .filter_map(rows)
                .flat_map(|s| s.iter().rev().map(copy))
                .take(limit)
                .collect()
        } else {
            range
                .filter_map(rows)
                .flat_map(|s| s.iter().map(copy))
                .take(limit)
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(kind: IndexKind, unique: bool) -> Secondary {
        Secondary::new(IndexDef {
            name: "i".into(),
            columns: vec![0],
            kind,
            unique,
        })
    }

    #[test]
    fn keys_hold_one_or_many_primary_keys() {
        for kind in [IndexKind::Hash, IndexKind::Tree] {
            let mut s = index(kind, false);
            let k = b"a key longer than twenty-two bytes".to_vec();
            s.add(Key::from(k.clone()), Key::from(vec![1]));
            s.add(Key::from(k.clone()), Key::from(vec![1]));
            assert_eq!(s.get(&k), vec![vec![1]]);
            s.add(Key::from(k.clone()), Key::from(vec![3]));
            s.add(Key::from(k.clone()), Key::from(vec![2]));
            assert_eq!(s.get(&k), vec![vec![1], vec![2], vec![3]]);
            s.remove(&k, &[9]);
            s.remove(&k, &[1]);
            s.remove(&k, &[3]);
            assert_eq!(s.get(&k), vec![vec![2]]);
            s.remove(&k, &[7]);
            assert_eq!(s.get(&k), vec![vec![2]], "another key's removal keeps it");
            s.remove(&k, &[2]);
            assert!(s.get(&k).is_empty());
            assert!(s.pks(&k).is_none(), "an emptied key leaves the map");
        }
    }

    proptest::proptest! {
        /// Random adds and removes agree with a model of key → primary keys: probes, whole
        /// ranges in both orders, and a tree index's two maps holding one key set.
        #[test]
        fn adds_and_removes_agree_with_a_model(
            ops in proptest::collection::vec((proptest::bool::ANY, 0u8..6, 0u8..4), 0..60),
        ) {
            let mut model: std::collections::BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> =
                Default::default();
            let mut s = index(IndexKind::Tree, false);
            for (add, k, pk) in ops {
                let (k, pk) = (vec![k], vec![pk]);
                if add {
                    s.add(Key::from(k.clone()), Key::from(pk.clone()));
                    model.entry(k).or_default().insert(pk);
                } else {
                    s.remove(&k, &pk);
                    if let Some(set) = model.get_mut(&k) {
                        set.remove(&pk);
                        if set.is_empty() {
                            model.remove(&k);
                        }
                    }
                }
            }
            for k in 0u8..6 {
                let want: Vec<Vec<u8>> =
                    model.get(&vec![k]).into_iter().flatten().cloned().collect();
                proptest::prop_assert_eq!(s.get(&[k]), want);
            }
            let all: Vec<Vec<u8>> = model.values().flatten().cloned().collect();
            let both = (Bound::Unbounded, Bound::Unbounded);
            proptest::prop_assert_eq!(s.range(both.0.clone(), both.1.clone()).unwrap(), all.clone());
            let mut back = s.range_from(both.0, both.1, true, usize::MAX).unwrap();
            back.reverse();
            proptest::prop_assert_eq!(back, all);
            if let Map::Tree { order, pks } = &s.map {
                proptest::prop_assert_eq!(order.len(), pks.len());
                proptest::prop_assert_eq!(order.len(), model.len());
            }
        }
    }

    #[test]
    fn a_unique_index_conflicts_only_with_another_row() {
        let mut s = index(IndexKind::Tree, true);
        s.add(Key::from(b"k".to_vec()), Key::from(vec![1]));
        assert!(s.conflicts(b"k", false, &[2]));
        assert!(!s.conflicts(b"k", false, &[1]), "the row itself");
        assert!(!s.conflicts(b"k", true, &[2]), "NULLs are exempt");
        assert!(!s.conflicts(b"j", false, &[2]));
        assert!(!index(IndexKind::Tree, false).conflicts(b"k", false, &[2]));
    }

    #[test]
    fn ranges_come_in_index_order_and_empty_bounds_are_empty() {
        let mut s = index(IndexKind::Tree, false);
        for (k, pk) in [(b"c", 3u8), (b"a", 1), (b"b", 2), (b"b", 4)] {
            s.add(Key::from(k.to_vec()), Key::from(vec![pk]));
        }
        let all = s.range(Bound::Unbounded, Bound::Unbounded).unwrap();
        assert_eq!(all, vec![vec![1], vec![2], vec![4], vec![3]]);
        let b = Bound::Included(b"b".to_vec());
        assert_eq!(s.range(b.clone(), b).unwrap(), vec![vec![2], vec![4]]);
        // Bounds a BTreeMap would panic on.
        let (c, a) = (b"c".to_vec(), b"a".to_vec());
        assert!(
            s.range(Bound::Included(c.clone()), Bound::Included(a))
                .unwrap()
                .is_empty()
        );
        let x = Bound::Excluded(c);
        assert!(s.range(x.clone(), x).unwrap().is_empty());
        assert!(
            index(IndexKind::Hash, false)
                .range(Bound::Unbounded, Bound::Unbounded)
                .is_err()
        );
    }
}
