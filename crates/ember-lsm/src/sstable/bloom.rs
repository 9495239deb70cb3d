//! Bloom filters: `k` probes by double hashing of a 64-bit FNV-1a hash with a final mix.
//!
//! Payload of a bloom block (kind 3): `k u8`, then the bit array (bit `i` is bit `i % 8` of
//! byte `i / 8`). A table written under a [`PrefixRule`] has a prefix bloom block (kind 4)
//! instead: `rule kind u8 | rule suffix u8 | k u8 | bit array`; besides every key, the filter
//! holds the rule's prefix of every key the rule applies to, so a probe for all the keys
//! with one prefix (an index equality probe) can skip the table.

use crate::coding::Reader;
use crate::error::Result;

/// The 64-bit hash a filter probes with.
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // A final avalanche so short keys spread over both halves.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// Which keys also enter a table's filter by a prefix: a key whose first byte is `kind` and
/// which is longer than `suffix` bytes enters it also as the key without its last `suffix`
/// bytes (for SQL index entries: `kind` the index kind byte, `suffix` the 8-byte rowid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixRule {
    /// The first byte of the keys the rule applies to.
    pub kind: u8,
    /// Bytes dropped from the end of such a key to make its prefix.
    pub suffix: u8,
}

impl PrefixRule {
    /// The prefix of `key` under the rule, if the rule applies to it.
    pub fn prefix<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        let n = key.len().checked_sub(usize::from(self.suffix))?;
        (key.first() == Some(&self.kind) && n > 0).then(|| &key[..n])
    }
}

/// A bloom filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    k: u8,
    bits: Vec<u8>,
    /// The rule whose prefixes it also holds.
    rule: Option<PrefixRule>,
}

impl Bloom {
    /// A filter over keys with these [`key_hash`]es, about `bits_per_key` bits each.
    pub fn build(hashes: &[u64], bits_per_key: usize) -> Self {
        Self::build_with(hashes, bits_per_key, None)
    }

    /// A filter over these [`key_hash`]es, which include the prefixes of `rule` (the
    /// filter then answers [`may_contain_prefix`](Self::may_contain_prefix) for it).
    pub fn build_with(hashes: &[u64], bits_per_key: usize, rule: Option<PrefixRule>) -> Self {
        let n = hashes.len().max(1);
        let nbits = (n * bits_per_key).max(64);
        // k = ln 2 × bits per key, between 1 and 30.
        let k = ((bits_per_key * 69) / 100).clamp(1, 30) as u8;
        let mut f = Bloom {
            k,
            bits: vec![0; nbits.div_ceil(8)],
            rule,
        };
        for &h in hashes {
            for bit in f.probes(h) {
                f.bits[bit / 8] |= 1 << (bit % 8);
            }
        }
        f
    }

    fn probes(&self, h: u64) -> impl Iterator<Item = usize> + use<> {
        let nbits = (self.bits.len() * 8) as u64;
        let (h1, h2) = (h & 0xffff_ffff, (h >> 32) | 1);
        (0..u64::from(self.k)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % nbits) as usize)
    }

    /// False: the key is certainly absent.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(key_hash(key))
    }

    /// [`may_contain`](Self::may_contain) for a key whose [`key_hash`] is `h`.
    pub fn may_contain_hash(&self, h: u64) -> bool {
        self.probes(h)
            .all(|bit| self.bits[bit / 8] & (1 << (bit % 8)) != 0)
    }

    /// False: no key that has `prefix` as its prefix under `rule` is in the filter. Always
    /// true for a filter built without that rule.
    pub fn may_contain_prefix(&self, rule: PrefixRule, prefix: &[u8]) -> bool {
        self.rule != Some(rule) || self.may_contain(prefix)
    }

    /// The rule whose prefixes the filter holds.
    pub fn rule(&self) -> Option<PrefixRule> {
        self.rule
    }

    /// The payload (of a prefix bloom block if the filter has a rule).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(3 + self.bits.len());
        if let Some(r) = self.rule {
            v.push(r.kind);
            v.push(r.suffix);
        }
        v.push(self.k);
        v.extend_from_slice(&self.bits);
        v
    }

    /// Decodes a payload (already checksummed); `prefixed`: of a prefix bloom block.
    pub fn decode(payload: &[u8], prefixed: bool, table: u64, offset: u64) -> Result<Self> {
        let mut r = Reader::new(payload, "bloom filter", table, offset);
        let rule = if prefixed {
            let kind = r.u8()?;
            let suffix = r.u8()?;
            Some(PrefixRule { kind, suffix })
        } else {
            None
        };
        let k = r.u8()?;
        let bits = r.take(r.remaining())?.to_vec();
        if k == 0 || k > 30 || bits.is_empty() {
            return Err(r.bad("impossible parameters"));
        }
        Ok(Bloom { k, bits, rule })
    }

    /// Bytes it is charged.
    pub fn charge(&self) -> usize {
        48 + self.bits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        let f = Bloom::build(&hashes, 10);
        assert!(keys.iter().all(|k| f.may_contain(k)));
        let fp = (1000..11000u32)
            .filter(|i| f.may_contain(&i.to_be_bytes()))
            .count();
        assert!(fp < 300, "{fp} false positives in 10,000");
    }

    #[test]
    fn a_prefix_filter_answers_for_its_rule_only_and_round_trips() {
        let rule = PrefixRule {
            kind: b'x',
            suffix: 2,
        };
        assert_eq!(rule.prefix(b"xab12"), Some(&b"xab"[..]));
        assert_eq!(rule.prefix(b"yab12"), None, "another kind");
        assert_eq!(rule.prefix(b"x1"), None, "no prefix left");
        let keys: Vec<Vec<u8>> = (0..500u32)
            .map(|i| [&b"x"[..], &(i / 5).to_be_bytes(), &[0, (i % 5) as u8]].concat())
            .collect();
        let mut hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        hashes.extend(keys.iter().filter_map(|k| rule.prefix(k)).map(key_hash));
        let f = Bloom::build_with(&hashes, 10, Some(rule));
        let g = Bloom::decode(&f.encode(), true, 1, 0).unwrap();
        assert_eq!(f, g);
        assert_eq!(g.rule(), Some(rule));
        for k in &keys {
            assert!(g.may_contain(k) && g.may_contain_prefix(rule, rule.prefix(k).unwrap()));
        }
        let absent = (100..1100u32)
            .filter(|i| g.may_contain_prefix(rule, &[&b"x"[..], &i.to_be_bytes()].concat()))
            .count();
        assert!(absent < 50, "{absent} false positives in 1,000");
        // Another rule, or a filter without one, cannot rule a prefix out.
        let other = PrefixRule {
            kind: b'x',
            suffix: 1,
        };
        assert!(g.may_contain_prefix(other, b"xzzzz"));
        let plain = Bloom::build(&hashes, 10);
        assert!(plain.may_contain_prefix(rule, b"xzzzz"));
        assert_eq!(Bloom::decode(&plain.encode(), false, 1, 0).unwrap(), plain);
        // Truncated payloads are errors.
        assert!(Bloom::decode(b"x", true, 1, 0).is_err());
        assert!(Bloom::decode(&[], false, 1, 0).is_err());
    }
}
