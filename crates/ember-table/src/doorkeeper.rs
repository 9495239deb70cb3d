//! A cache's doorkeeper (TinyLFU's): which items missed once recently, so that a cache keeps
//! an item the second time it misses, not the first.
//!
//! A stream of one-off lookups (uniform random reads, the uniqueness probe of each insert)
//! then costs a hash and two bits a miss, instead of a cache slot, its bookkeeping and,
//! soon after, an eviction; an item that repeats is kept from its second miss on. The
//! items are remembered as two bits each of a bit array (by the caller's 64-bit hash of
//! the item: its low and high halves), cleared when a quarter of the bits are set, so
//! "once" means "recently" and a full array cannot make every item look seen. Nothing here
//! is on a device.

/// The doorkeeper's bit array (see the module docs).
#[derive(Debug, Clone)]
pub struct Doorkeeper {
    words: Vec<u64>,
    set: usize,
}

impl Doorkeeper {
    /// A doorkeeper of at least `bits` bits (and at least 4,096): four bits per item the
    /// cache holds keep mistaken admissions rare.
    pub fn with_bits(bits: usize) -> Self {
        Doorkeeper {
            words: vec![0; bits.max(4096).div_ceil(64)],
            set: 0,
        }
    }

    /// Bits in the array.
    pub fn bits(&self) -> usize {
        self.words.len() * 64
    }

    /// Bits set now.
    pub fn set_bits(&self) -> usize {
        self.set
    }

    /// Whether the item with this hash, which just missed, should be kept: yes if it
    /// missed recently already; else it is remembered and the answer is no.
    pub fn admit(&mut self, hash: u64) -> bool {
        let bits = self.bits();
        let (a, b) = ((hash as usize) % bits, ((hash >> 32) as usize) % bits);
        let has = |words: &[u64], i: usize| words[i / 64] & (1 << (i % 64)) != 0;
        if has(&self.words, a) && has(&self.words, b) {
            return true;
        }
        for i in [a, b] {
            if !has(&self.words, i) {
                self.words[i / 64] |= 1 << (i % 64);
                self.set += 1;
            }
        }
        if self.set * 4 >= bits {
            self.words.fill(0);
            self.set = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a with MurmurHash3's final mix: a stand-in for a caller's hash.
    fn hash(item: &[u8]) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for &b in item {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    #[test]
    fn an_item_is_admitted_on_its_second_recent_miss() {
        let mut d = Doorkeeper::with_bits(0);
        assert_eq!(d.bits(), 4096);
        assert!(!d.admit(hash(b"q1")), "a first miss is only remembered");
        assert!(d.admit(hash(b"q1")), "a second miss is admitted");
        assert!(d.admit(hash(b"q1")));
        assert!(!d.admit(hash(b"q2")));
        // Many one-off items age the doorkeeper: q2's first miss is forgotten.
        for i in 0..d.bits() {
            d.admit(hash(format!("one-off {i}").as_bytes()));
            assert!(d.set_bits() * 4 < d.bits(), "cleared when a quarter is set");
        }
        let admitted = (0..100)
            .filter(|i| d.admit(hash(format!("fresh {i}").as_bytes())))
            .count();
        assert!(
            admitted < 10,
            "{admitted} of 100 new items taken for repeats"
        );
    }
}
