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
//! streams from 72 bytes on (with the carry-less multiply, PCLMULQDQ). One checksum waiting
//! for the last (as a scan's do): 14 ns at 130 bytes, 24 at 520, 42 at 1 KiB (CRC-32: 24,
//! 37, 43); a table scan had spent a fifth of its time in the check. Elsewhere the `crc32c` crate computes
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

/// CRC-32C of `bytes` with the SSE 4.2 instruction: three streams in step with the
/// carry-less multiply where the CPU has it, one stream where it does not.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn crc32c_sse42(bytes: &[u8]) -> u32 {
    if std::arch::is_x86_feature_detected!("pclmulqdq") {
        // SAFETY: the caller checked SSE 4.2 and this branch PCLMULQDQ, the two features
        // `sse42::crc` enables.
        !unsafe { sse42::crc(u32::MAX, bytes) }
    } else {
        // SAFETY: the caller checked SSE 4.2, the one feature `steps` enables.
        !unsafe { sse42::steps(u32::MAX, bytes) }
    }
}

/// The SSE 4.2 CRC-32C. One 8-byte step waits for the one before (three cycles on most
/// CPUs), so from 72 bytes on all but the last 23 bytes are taken as three streams in step:
/// stripes A, B and C of S bytes each give registers a (continuing the CRC so far), b and c
/// (from zero), and the register after all three is `shift(a, 2S) ^ shift(b, S) ^ c`, where
/// `shift(r, n)` is `r` after n zero bytes. In polynomials over GF(2) modulo the CRC's
/// polynomial P, that is `r·x^(8n)`: one carry-less multiply of `r` by the constant
/// `x^(8n−33) mod P`, whose product the CRC instruction reduces (it multiplies its 64-bit
/// operand by x^32, and a product of two bit-reflected values carries one more x). A
/// 130-byte tuple takes 5 steps in each stream, two multiplies and 2 steps for the last 10
/// bytes, where one stream took 17. Inputs of 768 bytes or more go in 768-byte blocks
/// (S = 256) first. The crate's own x86-64 path streams only from 768 bytes on, and takes
/// the bytes before the first 8-byte-aligned one a byte at a time, which at a tuple's
/// length costs as much as the rest.
#[cfg(target_arch = "x86_64")]
mod sse42 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u8, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64,
        _mm_cvtsi64_si128, _mm_cvtsi128_si64,
    };

    /// The longest stripe (a block of three is 768 bytes).
    const LONG: usize = 256;
    /// The shortest stripe worth three streams: below it the two multiplies cost more
    /// than the steps they save.
    const MIN: usize = 24;

    /// CRC-32C's polynomial, bit-reflected, without its x^32 term.
    const POLY: u32 = 0x82F6_3B78;

    /// `x^e mod P`, bit-reflected (bit 31 is x^0), for `e ≥ 0`.
    const fn x_pow(e: usize) -> u32 {
        let mut r: u32 = 1 << 31;
        let mut i = 0;
        while i < e {
            // Times x: every term moves one bit down; x^31 becomes x^32 ≡ P − x^32.
            r = (r >> 1) ^ if r & 1 != 0 { POLY } else { 0 };
            i += 1;
        }
        r
    }

    /// `[x^(8S−33), x^(16S−33)] mod P` at index `S / 8`, for stripes of S = 8 to 256 bytes.
    const SHIFT: [[u32; 2]; LONG / 8 + 1] = {
        let mut t = [[0u32; 2]; LONG / 8 + 1];
        let mut i = 1;
        while i < t.len() {
            t[i] = [x_pow(64 * i - 33), x_pow(128 * i - 33)];
            i += 1;
        }
        t
    };

    #[inline(always)]
    fn word(w: &[u8]) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        u64::from_le_bytes(x)
    }

    /// `r·x^(8n) mod P` for `k = x^(8n−33) mod P`: the 63-bit carry-less product is
    /// `r·k·x` in the CRC instruction's reading, which multiplies it by x^32 and reduces.
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn shift(r: u32, k: u32) -> u32 {
        let p = _mm_clmulepi64_si128(
            _mm_cvtsi64_si128(i64::from(r)),
            _mm_cvtsi64_si128(i64::from(k)),
            0x00,
        );
        _mm_crc32_u64(0, _mm_cvtsi128_si64(p) as u64) as u32
    }

    /// The register `r` after the first `3 * s` bytes of `bytes` (`s` a multiple of 8, at
    /// most [`LONG`], and `bytes` at least that long), in three streams.
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn three(r: u32, bytes: &[u8], s: usize) -> u32 {
        let (a, rest) = bytes.split_at(s);
        let (b, rest) = rest.split_at(s);
        let c = &rest[..s];
        let (mut x, mut y, mut z) = (u64::from(r), 0u64, 0u64);
        for ((wa, wb), wc) in a
            .chunks_exact(8)
            .zip(b.chunks_exact(8))
            .zip(c.chunks_exact(8))
        {
            x = _mm_crc32_u64(x, word(wa));
            y = _mm_crc32_u64(y, word(wb));
            z = _mm_crc32_u64(z, word(wc));
        }
        let [by_s, by_2s] = SHIFT[s / 8];
        shift(x as u32, by_2s) ^ shift(y as u32, by_s) ^ z as u32
    }

    /// The register `r` after `bytes` (no complement before or after).
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub(super) fn crc(mut r: u32, mut bytes: &[u8]) -> u32 {
        while let Some((block, rest)) = bytes.split_at_checked(3 * LONG) {
            r = three(r, block, LONG);
            bytes = rest;
        }
        let s = bytes.len() / 24 * 8;
        if s >= MIN {
            r = three(r, bytes, s);
            bytes = &bytes[3 * s..];
        }
        steps(r, bytes)
    }

    /// One stream, 8 bytes a step.
    #[target_feature(enable = "sse4.2")]
    pub(super) fn steps(r: u32, bytes: &[u8]) -> u32 {
        let mut words = bytes.chunks_exact(8);
        let mut c = u64::from(r);
        for w in &mut words {
            c = _mm_crc32_u64(c, word(w));
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

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_shift_constants_are_powers_of_x() {
            // x^0 is the top bit; x^31 the bottom one; x^32 the polynomial itself.
            assert_eq!(x_pow(0), 1 << 31);
            assert_eq!(x_pow(31), 1);
            assert_eq!(x_pow(32), POLY);
            assert_eq!(SHIFT[1], [x_pow(31), x_pow(95)]);
        }

        #[test]
        #[allow(unsafe_code)]
        fn both_paths_agree_with_the_crate_at_every_length() {
            if !(std::arch::is_x86_feature_detected!("sse4.2")
                && std::arch::is_x86_feature_detected!("pclmulqdq"))
            {
                return;
            }
            let data: Vec<u8> = (0u32..2400).map(|i| (i * 13 % 253) as u8).collect();
            for len in 0..2300 {
                let b = &data[1..1 + len];
                let want = crc32c::crc32c(b);
                // SAFETY: both features were checked above.
                let (three, one) = unsafe { (!crc(u32::MAX, b), !steps(u32::MAX, b)) };
                assert_eq!((three, one), (want, want), "{len} bytes");
            }
        }
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
            // Every start alignment and length: one stream, a three-stream pass of any
            // stripe length, and 768-byte blocks before it.
            let b = bytes.get(skip..).unwrap_or(&[]);
            prop_assert_eq!(tuple(b), crc32c::crc32c(b));
        }

    }
}
