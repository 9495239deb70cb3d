//! Bloom filters: `k` probes by double hashing of a 64-bit FNV-1a hash with a final mix.
//!
//! Payload: `k u8`, then the bit array (bit `i` is bit `i % 8` of byte `i / 8`).

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

/// A bloom filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    k: u8,
    bits: Vec<u8>,
}

impl Bloom {
    /// A filter over keys with these [`key_hash`]es, about `bits_per_key` bits each.
    pub fn build(hashes: &[u64], bits_per_key: usize) -> Self {
        let n = hashes.len().max(1);
        let nbits = (n * bits_per_key).max(64);
        // k = ln 2 × bits per key, between 1 and 30.
        let k = ((bits_per_key * 69) / 100).clamp(1, 30) as u8;
        let mut f = Bloom {
            k,
            bits: vec![0; nbits.div_ceil(8)],
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
        self.probes(key_hash(key))
            .all(|bit| self.bits[bit / 8] & (1 << (bit % 8)) != 0)
    }

    /// The payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + self.bits.len());
        v.push(self.k);
        v.extend_from_slice(&self.bits);
        v
    }

    /// Decodes a payload (already checksummed).
    pub fn decode(payload: &[u8], table: u64, offset: u64) -> Result<Self> {
        let mut r = Reader::new(payload, "bloom filter", table, offset);
        let k = r.u8()?;
        let bits = r.take(r.remaining())?.to_vec();
        if k == 0 || k > 30 || bits.is_empty() {
            return Err(r.bad("impossible parameters"));
        }
        Ok(Bloom { k, bits })
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
}
