//! Short byte strings kept in place: the keys of the in-RAM index maps (the secondary
//! indexes, the primary index's overlay).
//!
//! A `BTreeMap<Vec<u8>, _>` keeps every key in its own heap allocation, so each comparison of
//! a search follows a pointer — on an index larger than the CPU caches, a cache miss per
//! step — and each entry costs an allocation. A [`Key`] holds up to [`INLINE`] bytes in place
//! (an encoded rowid key is 9 bytes, a 16-byte BLOB key 19) and longer ones on the heap, in the
//! 24 bytes a `Vec<u8>` takes. It orders, compares and hashes as its bytes, so maps keyed by
//! it are searched with a plain `&[u8]`.

use core::borrow::Borrow;
use core::cmp::Ordering;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::ops::Deref;

/// Bytes a [`Key`] holds without a heap allocation.
pub const INLINE: usize = 22;

/// A byte string, in place when it is at most [`INLINE`] bytes long.
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    /// Length and bytes (those past the length are zero).
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl Key {
    /// A key holding a copy of `bytes`.
    pub fn new(bytes: &[u8]) -> Key {
        if bytes.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            Key(Repr::Inline(bytes.len() as u8, buf))
        } else {
            Key(Repr::Heap(bytes.into()))
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            // The length never exceeds INLINE (see `new`); `get` keeps that a non-panic.
            Repr::Inline(len, buf) => buf.get(..*len as usize).unwrap_or(buf),
            Repr::Heap(b) => b,
        }
    }

    /// Whether the bytes live on the heap.
    pub fn is_heap(&self) -> bool {
        matches!(self.0, Repr::Heap(_))
    }
}

impl From<Vec<u8>> for Key {
    fn from(v: Vec<u8>) -> Key {
        if v.len() <= INLINE {
            Key::new(&v)
        } else {
            Key(Repr::Heap(v.into_boxed_slice()))
        }
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Key {
        Key::new(b)
    }
}

impl From<Key> for Vec<u8> {
    fn from(k: Key) -> Vec<u8> {
        match k.0 {
            Repr::Heap(b) => b.into_vec(),
            Repr::Inline(..) => k.as_slice().to_vec(),
        }
    }
}

impl Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for Key {
    // As `[u8]` hashes: a map keyed by `Key` is probed with `&[u8]`.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;
    use std::collections::{BTreeMap, HashMap};

    #[test]
    fn a_key_is_as_large_as_a_vec() {
        assert_eq!(core::mem::size_of::<Key>(), core::mem::size_of::<Vec<u8>>());
    }

    #[test]
    fn short_keys_stay_in_place_and_long_ones_go_to_the_heap() {
        for n in [0, 1, 9, 19, INLINE] {
            let k = Key::new(&vec![7u8; n]);
            assert!(!k.is_heap(), "{n} bytes");
            assert_eq!(k.as_slice(), &vec![7u8; n][..]);
        }
        for n in [INLINE + 1, 100] {
            let k = Key::from(vec![7u8; n]);
            assert!(k.is_heap(), "{n} bytes");
            assert_eq!(Vec::from(k), vec![7u8; n]);
        }
    }

    fn hash_of<T: Hash + ?Sized>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    proptest! {
        #[test]
        fn keys_order_compare_and_hash_as_their_bytes(
            a in proptest::collection::vec(any::<u8>(), 0..40),
            b in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let (ka, kb) = (Key::new(&a), Key::from(b.clone()));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(hash_of(&ka), hash_of(&a[..]));
            prop_assert_eq!(&*ka, &a[..]);
        }

        #[test]
        fn maps_keyed_by_keys_are_probed_with_slices(
            keys in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..30), 0..40),
            probe in proptest::collection::vec(0u8..4, 0..30),
        ) {
            let tree: BTreeMap<Key, usize> =
                keys.iter().enumerate().map(|(i, k)| (Key::new(k), i)).collect();
            let want: BTreeMap<Vec<u8>, usize> =
                keys.iter().enumerate().map(|(i, k)| (k.clone(), i)).collect();
            let hash: HashMap<Key, usize> =
                keys.iter().enumerate().map(|(i, k)| (Key::new(k), i)).collect();
            prop_assert_eq!(tree.get(&probe[..]), want.get(&probe));
            prop_assert_eq!(hash.get(&probe[..]), want.get(&probe));
            let above: Vec<usize> = tree
                .range::<[u8], _>((core::ops::Bound::Excluded(&probe[..]), core::ops::Bound::Unbounded))
                .map(|(_, v)| *v)
                .collect();
            let want_above: Vec<usize> = want
                .range((core::ops::Bound::Excluded(probe.clone()), core::ops::Bound::Unbounded))
                .map(|(_, v)| *v)
                .collect();
            prop_assert_eq!(above, want_above);
        }
    }
}
