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
    ///
    /// The order is kept lazily: a key new to the map, or gone from it, is noted in a list,
    /// and the ordered set takes the lists in when a range asks for it ([`Order::settle`])
    /// or when they grow to half its length (so the lists never hold more keys than half
    /// the set). An insert of a new key then costs a push
    /// instead of a descent through the ordered set (a fifth of the time of random inserts
    /// into a million-row table), and the set takes many keys at once, sorted, by merging.
    Tree {
        order: Order,
        pks: HashMapOf<Pks>,
    },
}

/// A tree index's keys in order, kept lazily (see [`Map::Tree`]): after
/// [`settle`](Order::settle), `set` holds exactly the keys of the index's map.
#[derive(Debug, Default)]
struct Order {
    /// The keys as of the last settle: keys in `added` may be missing from it and keys in
    /// `removed` may linger in it.
    set: BTreeSet<Key>,
    /// Keys that came into the map since the last settle (one may repeat if it left and
    /// came back).
    added: Vec<Key>,
    /// Keys that left the map since the last settle.
    removed: Vec<Key>,
}

/// Changes an [`Order`] notes before it settles by itself, when its set is smaller than
/// twice this.
const LAZY_MIN: usize = 4096;

impl Order {
    /// Notes a key that came into the map; settles if the notes outgrow the set.
    fn add(&mut self, key: Key, pks: &HashMapOf<Pks>) {
        self.added.push(key);
        self.settle_if_long(pks);
    }

    /// Notes a key that left the map; settles if the notes outgrow the set.
    fn remove(&mut self, key: &[u8], pks: &HashMapOf<Pks>) {
        self.removed.push(Key::new(key));
        self.settle_if_long(pks);
    }

    fn settle_if_long(&mut self, pks: &HashMapOf<Pks>) {
        if self.added.len() + self.removed.len() > (self.set.len() / 2).max(LAZY_MIN) {
            self.settle(pks);
        }
    }

    /// Brings `set` to the keys of `pks`, the map the notes were taken against. Few notes
    /// go in one at a time (sorted, so neighbours find their leaves in the cache); many,
    /// more than a quarter of the set, are sorted and merged with it in one pass — a pass
    /// over the whole set, which the range or the change that asks for it waits for (on a
    /// million keys, tens of milliseconds), paid for by the pushes before it.
    fn settle(&mut self, pks: &HashMapOf<Pks>) {
        if self.added.is_empty() && self.removed.is_empty() {
            return;
        }
        let live = |k: &Key| pks.contains_key(k.as_slice());
        if (self.added.len() + self.removed.len()) * 4 > self.set.len() {
            if !self.removed.is_empty() {
                // Without a removal every added key is still in the map, and once only.
                self.set.retain(live);
                self.added.retain(live);
            }
            // Sorted in place first: the set's own sort then finds one run (and drops
            // repeats as it builds).
            self.added.sort_unstable();
            let mut fresh: BTreeSet<Key> = self.added.drain(..).collect();
            self.set.append(&mut fresh);
        } else {
            for k in self.removed.drain(..) {
                if !live(&k) {
                    self.set.remove(&k);
                }
            }
            self.added.sort_unstable();
            for k in self.added.drain(..) {
                if live(&k) {
                    self.set.insert(k);
                }
            }
        }
        self.removed.clear();
        // Notes of a big batch leave no big buffers behind.
        if self.added.capacity() > LAZY_MIN {
            self.added = Vec::new();
        }
        if self.removed.capacity() > LAZY_MIN {
            self.removed = Vec::new();
        }
    }
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
                order: Order::default(),
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

    /// Adds the entry `key` → `pk` (one search of the hash map; a tree index notes a new
    /// key for its order).
    pub(crate) fn add(&mut self, key: Key, pk: Key) {
        let (m, order) = match &mut self.map {
            Map::Hash(m) => (m, None),
            Map::Tree { order, pks } => (pks, Some(order)),
        };
        match m.entry(key) {
            Entry::Occupied(mut e) => e.get_mut().insert(pk),
            Entry::Vacant(e) => {
                let noted = order.is_some().then(|| e.key().clone());
                e.insert(Pks::One(pk));
                if let (Some(order), Some(k)) = (order, noted) {
                    order.add(k, m);
                }
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
                order.remove(key, m);
            }
        }
    }

    /// Primary keys of the rows whose encoded index key is `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Vec<Vec<u8>> {
        self.pks(key)
            .map(|s| s.iter().map(|p| p.to_vec()).collect())
            .unwrap_or_default()
    }

    /// Whether at most one row's indexed columns encode to `key`: `Some(true)` with its
    /// primary key appended to `pk`, `Some(false)` when none does, `None` when several do.
    pub(crate) fn single(&self, key: &[u8], pk: &mut Vec<u8>) -> Option<bool> {
        match self.pks(key) {
            None => Some(false),
            Some(Pks::One(p)) => {
                pk.extend_from_slice(p);
                Some(true)
            }
            Some(Pks::Many(_)) => None,
        }
    }

    /// Primary keys of the rows whose indexed columns equal `values`.
    pub(crate) fn lookup(&self, values: &[Value]) -> Vec<Vec<u8>> {
        let mut k = Vec::new();
        encode_key(values, &mut k);
        self.get(&k)
    }

    /// Primary keys of the rows whose indexed columns lie within the bounds, in index order
    /// (tree indexes only).
    pub(crate) fn range(&mut self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        self.range_from(lo, hi, false, usize::MAX)
    }

    /// Like [`range`](Self::range), from the high end when `desc` (rows with equal indexed
    /// values then in descending primary key order), and at most `limit` keys: only those
    /// are visited and copied.
    pub(crate) fn range_from(
        &mut self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let (order, m) = match &mut self.map {
            Map::Tree { .. } if empty_range(bound_ref(&lo), bound_ref(&hi)) => {
                return Ok(Vec::new());
            }
            Map::Tree { order, pks } => {
                order.settle(pks);
                (&order.set, &*pks)
            }
            Map::Hash(_) => return Err(TableError::Invalid("a range over a hash index")),
        };
        debug_assert_eq!(
            order.len(),
            m.len(),
            "a tree index's two maps hold one key set"
        );
        let range = order.range::<[u8], _>((bound_ref(&lo), bound_ref(&hi)));
        let copy = |p: &Key| p.to_vec();
        // Every ordered key has its entry in the map (the settle above made the set the
        // map's keys); a key without one would have no rows.
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

    type Model = std::collections::BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>;

    /// Checks a tree index against its model: probes of `keys`, whole ranges in both
    /// orders, a range from the middle, and the ordered keys being the map's.
    fn agrees(s: &mut Secondary, model: &Model, keys: impl Iterator<Item = Vec<u8>>) {
        for k in keys {
            let want: Vec<Vec<u8>> = model.get(&k).into_iter().flatten().cloned().collect();
            assert_eq!(s.get(&k), want);
        }
        let all: Vec<Vec<u8>> = model.values().flatten().cloned().collect();
        let both = (Bound::Unbounded, Bound::Unbounded);
        assert_eq!(s.range(both.0.clone(), both.1.clone()).unwrap(), all);
        let mut back = s.range_from(both.0, both.1, true, usize::MAX).unwrap();
        back.reverse();
        assert_eq!(back, all);
        if let Some(mid) = model.keys().nth(model.len() / 2) {
            let want: Vec<Vec<u8>> = model
                .range(mid.clone()..)
                .flat_map(|(_, v)| v.clone())
                .collect();
            let lo = Bound::Included(mid.clone());
            assert_eq!(s.range(lo, Bound::Unbounded).unwrap(), want);
        }
        if let Map::Tree { order, pks } = &s.map {
            assert!(
                order.added.is_empty() && order.removed.is_empty(),
                "settled"
            );
            assert_eq!(order.set.len(), pks.len());
            assert_eq!(order.set.len(), model.len());
        }
    }

    fn apply(s: &mut Secondary, model: &mut Model, add: bool, k: Vec<u8>, pk: Vec<u8>) {
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

    proptest::proptest! {
        /// Random adds and removes agree with a model of key → primary keys, checked at
        /// random points between them (the ordered keys settle there, a few notes or many).
        #[test]
        fn adds_and_removes_agree_with_a_model(
            ops in proptest::collection::vec((0u8..5, 0u8..6, 0u8..4), 0..80),
        ) {
            let mut model = Model::new();
            let mut s = index(IndexKind::Tree, false);
            for (op, k, pk) in ops {
                if op == 0 {
                    agrees(&mut s, &model, (0u8..6).map(|k| vec![k]));
                } else {
                    apply(&mut s, &mut model, op <= 2, vec![k], vec![pk]);
                }
            }
            agrees(&mut s, &model, (0u8..6).map(|k| vec![k]));
        }
    }

    /// Many changes between ranges: the notes settle by themselves as they outgrow the
    /// ordered keys (a batch from empty, then churn of removals and keys coming back), and
    /// ranges after a few changes and after many agree with the model.
    #[test]
    fn long_runs_of_changes_settle_by_themselves() {
        let mut model = Model::new();
        let mut s = index(IndexKind::Tree, false);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let key = |k: u64| format!("k{k:06}").into_bytes();
        for round in 0..4 {
            let ops = [30_000, 3, 9_000, 20_000][round];
            for _ in 0..ops {
                let k = next(12_000);
                let add = round == 0 || next(3) != 0;
                apply(&mut s, &mut model, add, key(k), vec![next(2) as u8]);
            }
            if let Map::Tree { order, .. } = &s.map {
                let notes = order.added.len() + order.removed.len();
                assert!(
                    notes <= (order.set.len() / 2).max(LAZY_MIN),
                    "{notes} notes"
                );
            }
            agrees(&mut s, &model, (0..50).map(|_| key(next(12_000))));
        }
    }

    /// A few changes at a time to a big index, ranges between them: the notes go in one by
    /// one, keys removed and added back (and added and removed again) among them.
    #[test]
    fn few_changes_between_ranges_go_in_one_by_one() {
        let mut model = Model::new();
        let mut s = index(IndexKind::Tree, false);
        let key = |k: u32| format!("k{k:05}").into_bytes();
        for k in 0..2_000 {
            apply(&mut s, &mut model, true, key(k), vec![1]);
        }
        agrees(&mut s, &model, std::iter::empty());
        for round in 0..40u32 {
            let k = round * 37 % 2_000;
            // Out and back in; a new key in and out; a key out for good (every fourth).
            apply(&mut s, &mut model, false, key(k), vec![1]);
            apply(&mut s, &mut model, true, key(k), vec![1]);
            apply(&mut s, &mut model, true, key(5_000 + round), vec![2]);
            apply(&mut s, &mut model, false, key(5_000 + round), vec![2]);
            if round % 4 == 0 {
                apply(&mut s, &mut model, false, key(k + 1), vec![1]);
            }
            if let Map::Tree { order, .. } = &s.map {
                let notes = order.added.len() + order.removed.len();
                assert!(
                    notes * 4 <= order.set.len(),
                    "the one-by-one path: {notes} notes"
                );
            }
            agrees(
                &mut s,
                &model,
                [key(k), key(k + 1), key(5_000 + round)].into_iter(),
            );
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
