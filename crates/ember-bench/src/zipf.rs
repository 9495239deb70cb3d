//! YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic
//! databases", as in YCSB's `ZipfianGenerator`), and its scrambled form (`ScrambledZipfian`:
//! the popular items are spread over the key space by a hash instead of being neighbours).
//!
//! Item `i` (0-based rank) is drawn with probability proportional to `1 / (i + 1)^theta`;
//! `theta = 0` is uniform. `theta` must be below 1 (YCSB uses 0.99 for "skew 1").

use ember_device::SplitMix64;

/// Draws ranks `0..n` with Zipfian skew `theta`.
#[derive(Debug, Clone)]
pub struct Zipfian {
    n: u64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
    rng: SplitMix64,
}

/// `sum_{i=1..n} 1 / i^theta`.
fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// A generator over `n ≥ 1` items with skew `0 ≤ theta < 1`, seeded.
    pub fn new(n: u64, theta: f64, seed: u64) -> Zipfian {
        let n = n.max(1);
        let theta = theta.clamp(0.0, 0.999_999);
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = if n > 2 {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        } else {
            1.0
        };
        Zipfian {
            n,
            alpha,
            zetan,
            eta,
            half_pow_theta: 0.5f64.powf(theta),
            rng: SplitMix64::new(seed),
        }
    }

    /// A uniform double in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next rank, in `0..n` (0 the most popular).
    pub fn next_rank(&mut self) -> u64 {
        let u = self.uniform();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if self.n >= 2 && uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// The next item, in `0..n`: the rank scrambled by a hash (YCSB's `ScrambledZipfian`), so
    /// the popular items are not neighbours.
    pub fn next_scrambled(&mut self) -> u64 {
        fnv64(self.next_rank()) % self.n
    }
}

/// FNV-1a over the eight bytes of `x` (YCSB's `fnvhash64`).
pub fn fnv64(x: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u64, theta: f64, draws: usize) -> Vec<u64> {
        let mut z = Zipfian::new(n, theta, 42);
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            let r = z.next_rank();
            assert!(r < n);
            c[r as usize] += 1;
        }
        c
    }

    /// The head of the distribution matches `1 / (i+1)^theta / zeta(n)` within 5%, the whole
    /// histogram within a few percent of total variation, and skew 0 is uniform.
    #[test]
    fn distribution_matches_zipf() {
        let n = 1000u64;
        let draws = 400_000;
        for theta in [0.0, 0.5, 0.99] {
            let c = counts(n, theta, draws);
            let zn = zeta(n, theta);
            let p = |i: usize| 1.0 / ((i + 1) as f64).powf(theta) / zn;
            for (i, &ci) in c.iter().enumerate().take(2) {
                let got = ci as f64 / draws as f64;
                let rel = (got - p(i)).abs() / p(i);
                assert!(rel < 0.05, "theta {theta} rank {i}: {got} vs {}", p(i));
            }
            // Total variation distance over buckets of 50 ranks (Gray's method approximates
            // ranks ≥ 2 by a continuous curve).
            let mut tv = 0.0;
            for b in 0..(n as usize / 50) {
                let got: u64 = c[b * 50..(b + 1) * 50].iter().sum();
                let want: f64 = (b * 50..(b + 1) * 50).map(p).sum();
                tv += (got as f64 / draws as f64 - want).abs();
            }
            assert!(tv / 2.0 < 0.03, "theta {theta}: total variation {tv}");
        }
        // Skew orders popularity: the top 1% of ranks get ~1% (uniform), much more (skewed).
        let top = |theta: f64| {
            let c = counts(n, theta, draws);
            c[..10].iter().sum::<u64>() as f64 / draws as f64
        };
        let (t0, t5, t99) = (top(0.0), top(0.5), top(0.99));
        assert!((t0 - 0.01).abs() < 0.002, "{t0}");
        assert!(t5 > 0.05 && t99 > 0.3 && t99 > t5, "{t5} {t99}");
    }

    #[test]
    fn scrambled_stays_in_range_and_small_n_works() {
        for n in [1u64, 2, 3, 17] {
            let mut z = Zipfian::new(n, 0.99, 7);
            for _ in 0..1000 {
                assert!(z.next_scrambled() < n);
                assert!(z.next_rank() < n);
            }
        }
    }
}
