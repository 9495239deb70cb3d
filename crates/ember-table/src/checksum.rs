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
//! instruction (SSE 4.2 on x86-64) takes 8 bytes a step with nothing to reduce. At 130 bytes
//! it is about three times faster, and a table scan spent a fifth of its time in the check.

/// Inputs from this long on go to the `crc32c` crate, whose three interleaved streams win
/// over one stream of 8-byte steps once the input is long enough to split.
#[cfg(target_arch = "x86_64")]
const ONE_STREAM_BELOW: usize = 768;

/// The checksum a tuple written now carries: CRC-32C of `bytes`.
#[inline]
pub fn tuple(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if bytes.len() < ONE_STREAM_BELOW && std::arch::is_x86_feature_detected!("sse4.2") {
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

/// CRC-32C of `bytes` with the SSE 4.2 instruction, 8 bytes a step (the crate's own x86-64
/// path takes the bytes before the first 8-byte-aligned one a byte at a time, which at a
/// tuple's length costs as much as the rest).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn crc32c_sse42(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64};

    #[target_feature(enable = "sse4.2")]
    fn steps(bytes: &[u8]) -> u32 {
        let mut words = bytes.chunks_exact(8);
        let mut c = u64::from(u32::MAX);
        for w in &mut words {
            let mut x = [0u8; 8];
            x.copy_from_slice(w);
            c = _mm_crc32_u64(c, u64::from_le_bytes(x));
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
        !c
    }
    // SAFETY: the caller checked that the CPU has SSE 4.2, the one feature `steps` enables.
    unsafe { steps(bytes) }
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
            // Every start alignment and length, both sides of the crate's threshold.
            let b = bytes.get(skip..).unwrap_or(&[]);
            prop_assert_eq!(tuple(b), crc32c::crc32c(b));
        }

    }
}
