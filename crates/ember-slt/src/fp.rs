//! SQLite 3.53's binary-to-decimal conversion (`sqlite3Fp2Convert10` and its power-of-ten
//! tables, from `sqlite3.c`), so that a real prints in a `T` column exactly as SQLite prints it,
//! last digit included (a correctly rounded conversion differs from it in about one value in
//! three hundred).

/// `(a * b) >> 64` and the low 64 bits.
fn multiply128(a: u64, b: u64) -> (u64, u64) {
    let r = u128::from(a) * u128::from(b);
    ((r >> 64) as u64, r as u64)
}

/// The upper 64 bits of the 160-bit product of `(a << 32) + a_lo` and `b`, and the 32 bits
/// after them.
fn multiply160(a: u64, a_lo: u32, b: u64) -> (u64, u32) {
    let mut r = u128::from(a) * u128::from(b);
    r += (u128::from(a_lo) * u128::from(b)) >> 32;
    ((r >> 64) as u64, ((r >> 32) & 0xffff_ffff) as u32)
}

/// floor(log2(10^p)).
fn pwr10to2(p: i32) -> i32 {
    (p * 108_853) >> 15
}

/// floor(log10(2^p)).
fn pwr2to10(p: i32) -> i32 {
    (p * 78_913) >> 18
}

/// The most significant 64 bits of 10^p and the next 32, for p in -348..=347.
fn power_of_ten(p: i32) -> (u64, u32) {
    let (g, n);
    if p < 0 {
        if p == -1 {
            return (SCALE[13], SCALE_LO[13]);
        }
        let (mut gg, mut nn) = (p / 27, p % 27);
        if nn != 0 {
            gg -= 1;
            nn += 27;
        }
        (g, n) = (gg, nn);
    } else if p < 27 {
        return (BASE[p as usize], 0);
    } else {
        (g, n) = (p / 27, p % 27);
    }
    let idx = (g + 13) as usize;
    let s = SCALE[idx];
    if n == 0 {
        return (s, SCALE_LO[idx]);
    }
    let (mut x, mut lo) = multiply160(s, SCALE_LO[idx], BASE[n as usize]);
    if x & (1 << 63) == 0 {
        x = (x << 1) | u64::from((lo >> 31) & 1);
        lo = (lo << 1) | 1;
    }
    (x, lo)
}

/// For r = m * 2^e (m with its top bit set), d and p with r ≈ d * 10^p, d of at least n
/// significant digits (n in 1..=18).
fn convert10(m: u64, e: i32, n: i32) -> (u64, i32) {
    let p = n - 1 - pwr2to10(e + 63);
    let (pow, _) = power_of_ten(p);
    let (mut h, _) = multiply128(m, pow);
    let d = if n == 18 {
        h >>= -(e + pwr10to2(p) + 2);
        (h + ((h << 1) & 2)) >> 1
    } else {
        h >> -(e + pwr10to2(p) + 1)
    };
    (d, -p)
}

/// The decimal digits of a positive finite `r` as `sqlite3FpDecode` computes them before
/// rounding to 17 digits: the digits (at least 18 of them) and the base-10 exponent of the last.
pub(crate) fn decode(r: f64) -> (Vec<u8>, i32) {
    let bits = r.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i32;
    let mut v = bits & 0x000f_ffff_ffff_ffff;
    if e == 0 {
        let nn = v.leading_zeros() as i32;
        v <<= nn;
        e = -1074 - nn;
    } else {
        v = (v << 11) | (1 << 63);
        e -= 1086;
    }
    let (d, exp) = convert10(v, e, 18);
    (d.to_string().into_bytes(), exp)
}

const BASE: [u64; 27] = [
    0x8000000000000000,
    0xa000000000000000,
    0xc800000000000000,
    0xfa00000000000000,
    0x9c40000000000000,
    0xc350000000000000,
    0xf424000000000000,
    0x9896800000000000,
    0xbebc200000000000,
    0xee6b280000000000,
    0x9502f90000000000,
    0xba43b74000000000,
    0xe8d4a51000000000,
    0x9184e72a00000000,
    0xb5e620f480000000,
    0xe35fa931a0000000,
    0x8e1bc9bf04000000,
    0xb1a2bc2ec5000000,
    0xde0b6b3a76400000,
    0x8ac7230489e80000,
    0xad78ebc5ac620000,
    0xd8d726b7177a8000,
    0x878678326eac9000,
    0xa968163f0a57b400,
    0xd3c21bcecceda100,
    0x84595161401484a0,
    0xa56fa5b99019a5c8,
];
const SCALE: [u64; 26] = [
    0x8049a4ac0c5811ae,
    0xcf42894a5dce35ea,
    0xa76c582338ed2621,
    0x873e4f75e2224e68,
    0xda7f5bf590966848,
    0xb080392cc4349dec,
    0x8e938662882af53e,
    0xe65829b3046b0afa,
    0xba121a4650e4ddeb,
    0x964e858c91ba2655,
    0xf2d56790ab41c2a2,
    0xc428d05aa4751e4c,
    0x9e74d1b791e07e48,
    0xcccccccccccccccc,
    0xcecb8f27f4200f3a,
    0xa70c3c40a64e6c51,
    0x86f0ac99b4e8dafd,
    0xda01ee641a708de9,
    0xb01ae745b101e9e4,
    0x8e41ade9fbebc27d,
    0xe5d3ef282a242e81,
    0xb9a74a0637ce2ee1,
    0x95f83d0a1fb69cd9,
    0xf24a01a73cf2dccf,
    0xc3b8358109e84f07,
    0x9e19db92b4e31ba9,
];
const SCALE_LO: [u32; 26] = [
    0x205b896d, 0x52064cad, 0xaf2af2b8, 0x5a7744a7, 0xaf39a475, 0xbd8d794e, 0x547eb47b, 0x0cb4a5a3,
    0x92f34d62, 0x3a6a07f9, 0xfae27299, 0xaa97e14c, 0x775ea265, 0xcccccccc, 0x00000000, 0x999090b6,
    0x69a028bb, 0xe80e6f48, 0x5ec05dd0, 0x14588f14, 0x8f1668c9, 0x6d953e2c, 0x4abdaf10, 0xbc633b39,
    0x0a862f81, 0x6c07a2c2,
];
