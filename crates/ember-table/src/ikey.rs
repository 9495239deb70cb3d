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
use std::collections::BTreeMap;

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
        match (&self.0, &other.0) {
            (Repr::Inline(la, a), Repr::Inline(lb, b)) => la == lb && a == b,
            _ => self.as_slice() == other.as_slice(),
        }
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    #[inline]
    fn cmp(&self, other: &Key) -> Ordering {
        match (&self.0, &other.0) {
            // Two in-place keys compare as three big-endian words and then their lengths,
            // without a call: the bytes past a length are zero, so where the padded arrays
            // first differ, either both keys have a byte there (and it decides) or only the
            // longer one has, and it is not zero (and the shorter key, its prefix, is
            // smaller); padded arrays that are equal leave the lengths to decide.
            (Repr::Inline(la, a), Repr::Inline(lb, b)) => words(a).cmp(&words(b)).then(la.cmp(lb)),
            _ => self.as_slice().cmp(other.as_slice()),
        }
    }
}

/// An in-place key's bytes as integers that order as the bytes do.
#[inline]
fn words(b: &[u8; INLINE]) -> (u128, u64) {
    let mut hi = [0u8; 16];
    hi.copy_from_slice(&b[..16]);
    let mut lo = [0u8; 8];
    lo[..INLINE - 16].copy_from_slice(&b[16..]);
    (u128::from_be_bytes(hi), u64::from_be_bytes(lo))
}

/// Orders two byte strings as `a.cmp(b)` does; strings of one length up to 24 bytes (an
/// encoded rowid key is 9, the prefix an index page's keys share often under 8) compare as
/// at most three big-endian words, without a call.
#[inline]
pub fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len();
    if n != b.len() || n > 24 {
        return a.cmp(b);
    }
    if n < 8 {
        // Zero-padded alike, so they order as the bytes do.
        return head_word(a).cmp(&head_word(b));
    }
    // Windows that cover both strings in order, each starting where the bytes before it are
    // known equal (the last may overlap the one before: equal bytes, no harm).
    for at in [0, 8.min(n - 8), n - 8] {
        let (x, y) = (word(a, at), word(b, at));
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

/// A string's first 8 bytes as a big-endian number, zeros past its end: of two strings
/// whose heads differ, the one with the smaller head is the smaller. (Their heads first
/// differ at a byte within both, their first difference; or at a byte past the end of one,
/// which is then a prefix of the other, the smaller, and pads with a zero below the other's
/// byte there.)
#[inline]
pub fn head_word(b: &[u8]) -> u64 {
    if let Some(h) = b.first_chunk::<8>() {
        return u64::from_be_bytes(*h);
    }
    // Shorter: its 4-, 2- and 1-byte pieces in turn (a copy of a length not known here
    // would be a call to `memcpy`, and a node search makes a few per probe).
    let (mut w, mut at) = (0u64, 0usize);
    if let Some(p) = b.first_chunk::<4>().filter(|_| b.len() & 4 != 0) {
        w = u64::from(u32::from_be_bytes(*p)) << 32;
        at = 4;
    }
    if let Some(p) = b
        .get(at..)
        .and_then(|r| r.first_chunk::<2>())
        .filter(|_| b.len() & 2 != 0)
    {
        w |= u64::from(u16::from_be_bytes(*p)) << (48 - 8 * at);
        at += 2;
    }
    if let Some(&x) = b.get(at).filter(|_| b.len() & 1 != 0) {
        w |= u64::from(x) << (56 - 8 * at);
    }
    w
}

/// The 8 bytes at `at` (which leaves 8 in `b`) as a big-endian word.
#[inline]
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_be_bytes(w)
}

/// The value of `key` in a map keyed by [`Key`]s. A short probe is searched as an in-place
/// key (each comparison a few word compares, see [`Key`]'s `Ord`), a long one as a slice.
pub fn get<'m, V>(map: &'m BTreeMap<Key, V>, key: &[u8]) -> Option<&'m V> {
    if key.len() <= INLINE {
        map.get(&Key::new(key))
    } else {
        map.get(key)
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

    #[test]
    fn a_prefix_orders_before_the_keys_it_begins() {
        let mut full = [5u8; INLINE];
        full[INLINE - 1] = 0;
        let keys: [&[u8]; 9] = [
            &[],
            &[0],
            &[0, 0],
            &[1],
            &[1, 0],
            &[1, 0, 0],
            &[1, 1],
            &full[..INLINE - 1],
            &full,
        ];
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate() {
                assert_eq!(Key::new(a).cmp(&Key::new(b)), i.cmp(&j), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn a_head_word_is_the_first_eight_bytes_zero_padded() {
        let bytes: Vec<u8> = (1..=12).map(|i| i * 17).collect();
        for n in 0..=bytes.len() {
            let mut w = [0u8; 8];
            let k = n.min(8);
            w[..k].copy_from_slice(&bytes[..k]);
            assert_eq!(head_word(&bytes[..n]), u64::from_be_bytes(w), "{n} bytes");
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
        fn keys_of_few_byte_values_order_as_their_bytes(
            a in proptest::collection::vec(0u8..3, 0..26),
            b in proptest::collection::vec(0u8..3, 0..26),
        ) {
            // Zeros and prefixes: where the zero padding of in-place keys could mislead.
            let (ka, kb) = (Key::new(&a), Key::new(&b));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(kb.cmp(&ka), b.cmp(&a));
            prop_assert_eq!(ka == kb, a == b);
        }

        #[test]
        fn byte_strings_order_as_slices_do(
            a in proptest::collection::vec(0u8..3, 0..30),
            b in proptest::collection::vec(0u8..3, 0..30),
            at in any::<proptest::sample::Index>(),
            byte in 0u8..3,
        ) {
            prop_assert_eq!(cmp_bytes(&a, &b), a.cmp(&b));
            // One length, one byte changed anywhere: the word path must see every byte.
            let mut c = a.clone();
            if !c.is_empty() {
                let i = at.index(c.len());
                c[i] = byte;
            }
            prop_assert_eq!(cmp_bytes(&a, &c), a.cmp(&c));
            prop_assert_eq!(cmp_bytes(&c, &a), c.cmp(&a));
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
            prop_assert_eq!(get(&tree, &probe), want.get(&probe));
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
