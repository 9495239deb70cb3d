//! The checksum of a tuple: what a slotted block's slot and a journal record's slot operation
//! hold for the tuple they name.
//!
//! Tuples written by format version 3 of data blocks (version 4 of journal records) on carry
//! CRC-32C (Castagnoli, the polynomial of iSCSI and ext4's metadata). Earlier versions wrote
//! CRC-32 (IEEE, as every other structure's header checksum still is); their tuples stay on
//! the device until rewritten, so a stored checksum is accepted if it is either function of
//! the tuple's bytes. That doubles the chance that a random corruption goes unseen, from
//! 2⁻³² to 2⁻³¹.
//!
//! Why a second function: a scan checks every tuple of every block it reads from the device,
//! and tuples are short (a hundred bytes or so). CRC-32's fast path folds 64 bytes at a time
//! and pays a fixed reduction at the end that dominates at that length; the CPU's CRC-32C
//! instruction (SSE 4.2 on x86-64) takes 8 bytes a step with nothing to reduce, in three
//! streams from 192 bytes on. One checksum waiting for the last (as a scan's do): 15 ns
//! against CRC-32's 24 at 130 bytes, 32 against 37 at 520, 42 against 43 at 1 KiB; a table
//! scan had spent a fifth of its time in the check. Elsewhere the `crc32c` crate computes
//! it (the CPU's instruction on 64-bit ARM, a table without it).

/// The checksum a tuple written now carries: CRC-32C of `bytes`.
#[inline]
pub fn tuple(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            return crc32c_sse42(bytes);
        }
    }
    crc32c::crc32c(bytes)
}

/// Whether `stored`, read from a slot, is the checksum of `bytes`: their CRC-32C, or the
/// CRC-32 that versions before 3 wrote.
#[inline]
pub fn tuple_matches(bytes: &[u8], stored: u32) -> bool {
    tuple(bytes) == stored || crc32fast::hash(bytes) == stored
}

/// CRC-32C of `bytes` with the SSE 4.2 instruction, 8 bytes a step.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn crc32c_sse42(bytes: &[u8]) -> u32 {
    // SAFETY: the caller checked that the CPU has SSE 4.2, the one feature `sse42` enables.
    !unsafe { sse42::crc(u32::MAX, bytes) }
}

/// The SSE 4.2 CRC-32C. One 8-byte step waits for the one before (three cycles on most
/// CPUs), so an input of three stripes or more is taken as three streams in step: stripes
/// A, B and C give registers a (continuing the CRC so far), b and c (from zero), and the
/// register after all three is `shift(a, 2S) ^ shift(b, S) ^ c`, where `shift(r, n)` is `r`
/// after n zero bytes — linear in `r`, so four 256-entry tables per `n` give it. The
/// crate's own x86-64 path does the same only from 768 bytes on, and takes the bytes before
/// the first 8-byte-aligned one a byte at a time, which at a tuple's length costs as much
/// as the rest.
#[cfg(target_arch = "x86_64")]
mod sse42 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64};
    use std::sync::OnceLock;

    /// The stripes: long inputs in 256-byte ones, then 64-byte ones.
    const LONG: usize = 256;
    const SHORT: usize = 64;

    /// `shift(r, n)` for one `n`: entry `[k][v]` is the register after `n` zero bytes from
    /// register `v << 8k`.
    struct Shift([[u32; 256]; 4]);

    impl Shift {
        #[target_feature(enable = "sse4.2")]
        fn new(n: usize) -> Shift {
            let zeros = [0u8; 2 * LONG];
            let zeros = &zeros[..n.min(2 * LONG)];
            let mut t = [[0u32; 256]; 4];
            for (k, row) in t.iter_mut().enumerate() {
                for (v, e) in (0u32..).zip(row.iter_mut()) {
                    *e = steps(v << (8 * k), zeros);
                }
            }
            Shift(t)
        }

        #[inline(always)]
        fn apply(&self, r: u32) -> u32 {
            let [a, b, c, d] = r.to_le_bytes();
            self.0[0][usize::from(a)]
                ^ self.0[1][usize::from(b)]
                ^ self.0[2][usize::from(c)]
                ^ self.0[3][usize::from(d)]
        }
    }

    /// Shifts by one and two stripes, for each stripe length.
    struct Shifts {
        long: [Shift; 2],
        short: [Shift; 2],
    }

    static SHIFTS: OnceLock<Shifts> = OnceLock::new();

    #[target_feature(enable = "sse4.2")]
    fn shifts() -> &'static Shifts {
        // The closure has this function's target features.
        SHIFTS.get_or_init(|| Shifts {
            long: [Shift::new(LONG), Shift::new(2 * LONG)],
            short: [Shift::new(SHORT), Shift::new(2 * SHORT)],
        })
    }

    #[inline(always)]
    fn word(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(x)
    }

    /// The register `r` after `bytes`, in three streams of `S`-byte stripes while at least
    /// three are left; returns it and the rest.
    #[target_feature(enable = "sse4.2")]
    fn striped<'b, const S: usize>(
        mut r: u32,
        mut bytes: &'b [u8],
        by: &[Shift; 2],
    ) -> (u32, &'b [u8]) {
        while let Some((t, rest)) = bytes.split_at_checked(3 * S) {
            let (a, t) = t.split_at(S);
            let (b, c) = t.split_at(S);
            let (mut x, mut y, mut z) = (u64::from(r), 0u64, 0u64);
            let mut at = 0;
            while at < S {
                x = _mm_crc32_u64(x, word(a, at));
                y = _mm_crc32_u64(y, word(b, at));
                z = _mm_crc32_u64(z, word(c, at));
                at += 8;
            }
            r = by[1].apply(x as u32) ^ by[0].apply(y as u32) ^ z as u32;
            bytes = rest;
        }
        (r, bytes)
    }

    /// The register `r` after `bytes` (no complement before or after).
    #[target_feature(enable = "sse4.2")]
    pub(super) fn crc(r: u32, bytes: &[u8]) -> u32 {
        if bytes.len() < 3 * SHORT {
            return steps(r, bytes);
        }
        let s = shifts();
        let (r, rest) = striped::<LONG>(r, bytes, &s.long);
        let (r, rest) = striped::<SHORT>(r, rest, &s.short);
        steps(r, rest)
    }

    /// One stream, 8 bytes a step.
    #[target_feature(enable = "sse4.2")]
    fn steps(r: u32, bytes: &[u8]) -> u32 {
        let mut words = bytes.chunks_exact(8);
        let mut c = u64::from(r);
        for w in &mut words {
            c = _mm_crc32_u64(c, word(w, 0));
        }
        // At most 7 bytes left: a 4-, a 2- and a 1-byte step.
        let mut c = c as u32;
        let mut rest = words.remainder();
        if let Some((w, r)) = rest.split_first_chunk::<4>() {
            c = _mm_crc32_u32(c, u32::from_le_bytes(*w));
            rest = r;
        }
        if let Some((w, r)) = rest.split_first_chunk::<2>() {
            c = _mm_crc32_u16(c, u16::from_le_bytes(*w));
            rest = r;
        }
        if let Some(&b) = rest.first() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_check_value_of_crc32c() {
        // The standard check input of CRC catalogues, and RFC 3720's 32 zero bytes.
        assert_eq!(tuple(b"123456789"), 0xE306_9283);
        assert_eq!(tuple(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(tuple(&[]), 0);
    }

    #[test]
    fn every_length_to_past_two_long_stripes_agrees_with_the_crate() {
        let data: Vec<u8> = (0u32..2000).map(|i| (i * 7 % 251) as u8).collect();
        for len in 0..1700 {
            for skip in [0, 3] {
                let b = &data[skip..skip + len];
                assert_eq!(tuple(b), crc32c::crc32c(b), "{len} bytes");
            }
        }
    }

    #[test]
    fn tuples_of_earlier_versions_still_match() {
        let t = b"a tuple written by format version 2";
        assert!(tuple_matches(t, crc32fast::hash(t)));
        assert!(tuple_matches(t, tuple(t)));
        assert!(!tuple_matches(t, tuple(t) ^ 1));
        assert!(!tuple_matches(&t[1..], tuple(t)));
    }

    proptest! {
        #[test]
        fn every_length_agrees_with_the_crate(bytes in proptest::collection::vec(any::<u8>(), 0..2000), skip in 0usize..8) {
            // Every start alignment and length, one stream and both stripe lengths.
            let b = bytes.get(skip..).unwrap_or(&[]);
            prop_assert_eq!(tuple(b), crc32c::crc32c(b));
        }

    }
}
