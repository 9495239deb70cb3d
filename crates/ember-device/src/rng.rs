//! A small deterministic random number generator for fault injection.

/// SplitMix64: a tiny, fast generator with good statistical quality, fully determined by its
/// seed. Used to choose which sectors of a torn write land, which unsynced writes survive, and
/// what an interrupted erase leaves, so that every failure replays from one number.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), without modulo bias worth speaking of for test use.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }

    /// Puts `v` in a random order (Fisher–Yates): every order equally likely.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// Mixes a base seed with a second number into a new, well-spread seed.
#[cfg(feature = "alloc")]
pub(crate) fn mix(seed: u64, n: u64) -> u64 {
    SplitMix64::new(seed ^ n.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}
