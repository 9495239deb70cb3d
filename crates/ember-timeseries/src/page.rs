//! The page: the one on-flash unit of every area, its header, checksums and record layout.
//!
//! Every page (data, temporary, index, variable-data) starts with the same 24-byte header,
//! little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | magic `"TS"` |
//! | 2 | 1 | format version (1) |
//! | 3 | 1 | kind: 1 data, 2 temporary (record-level consistency), 3 bitmap index, 4 variable data |
//! | 4 | 4 | logical page id (data/index/var: its slot is `id mod slots`; temporary: the id of the data page it stands for) |
//! | 8 | 4 | header CRC-32: bytes 0..8 and 16..header end |
//! | 12 | 4 | page CRC-32: bytes 0..8 and 16..page end |
//! | 16 | 2 | count: records (data, temporary), bitmaps (index), payload bytes (variable data) |
//! | 18 | 2 | gap: slots skipped (left dead) right before this page in its area |
//! | 20 | 4 | aux: data/temporary: layout tag (key size, bitmap size and flags, data size); index: id of the first data page it covers; variable data: 0 |
//!
//! A **data page** (and a temporary page, which is an image of the write buffer) continues
//! with its smallest and largest key (key size each), its bitmap (bitmap size; absent without
//! a data index), its smallest and largest data value (data size each; absent unless
//! `data_min_max`), then `count` records of `key | data | [var page u32, var offset u32]`.
//! Unused bytes are zero. An **index page** continues with `count` bitmaps, one per data page
//! from `aux` on. A **variable-data page** continues with `count` bytes of the
//! variable-data stream.
//!
//! A page is valid when its magic, version and kind are known, both checksums match, its
//! count fits the page and (data pages) its layout tag matches the configuration. The header
//! checksum lets a header be read and trusted on its own (recovery and index rebuilds read
//! only headers); the page checksum covers the records. A page that fails is never used.

use crc32fast::Hasher;

/// Bytes of the header every page starts with.
pub const COMMON: usize = 24;
/// The largest bitmap the data index supports, in bytes.
pub const MAX_BITMAP: usize = 32;
/// The page-format version this code writes and reads.
pub const FORMAT_VERSION: u8 = 1;

const MAGIC: [u8; 2] = *b"TS";
const O_KIND: usize = 3;
const O_ID: usize = 4;
const O_HCRC: usize = 8;
const O_PCRC: usize = 12;
const O_COUNT: usize = 16;
const O_GAP: usize = 18;
const O_AUX: usize = 20;

/// The kind of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Data = 1,
    Temp = 2,
    Index = 3,
    Var = 4,
}

/// The decoded common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub id: u32,
    pub count: u16,
    pub gap: u16,
    pub aux: u32,
}

/// Where a record's variable-size value starts: a variable-data page id and a byte offset in
/// its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VarRef {
    /// Logical id of the variable-data page the value starts in.
    pub page: u32,
    /// Offset of the value's length prefix in that page's payload.
    pub offset: u32,
}

#[inline]
pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(s) => u16::from_le_bytes([s[0], s[1]]),
        None => 0,
    }
}

#[inline]
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(s) => u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

#[inline]
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

#[inline]
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Reads a `ks`-byte little-endian key.
#[inline]
pub(crate) fn get_key(b: &[u8], at: usize, ks: usize) -> u64 {
    // The two key sizes as fixed-size loads (no variable-length copy).
    if ks == 4 {
        u64::from(get_u32(b, at))
    } else if ks == 8 {
        match b.get(at..at + 8) {
            Some(s) => {
                let mut w = [0u8; 8];
                w.copy_from_slice(s);
                u64::from_le_bytes(w)
            }
            None => 0,
        }
    } else {
        let mut w = [0u8; 8];
        if let Some(s) = b.get(at..at + ks.min(8)) {
            w[..s.len()].copy_from_slice(s);
        }
        u64::from_le_bytes(w)
    }
}

/// Writes a `ks`-byte little-endian key (the key was checked to fit).
#[inline]
pub(crate) fn put_key(b: &mut [u8], at: usize, ks: usize, key: u64) {
    // The two key sizes as fixed-size stores (no variable-length copy).
    if ks == 4 {
        put_u32(b, at, key as u32);
    } else if ks == 8 {
        if let Some(s) = b.get_mut(at..at + 8) {
            s.copy_from_slice(&key.to_le_bytes());
        }
    } else if let Some(s) = b.get_mut(at..at + ks.min(8)) {
        let n = s.len();
        s.copy_from_slice(&key.to_le_bytes()[..n]);
    }
}

/// The byte layout of pages under one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub page: usize,
    pub ks: usize,
    pub ds: usize,
    pub bm: usize,
    pub minmax: bool,
    pub var: bool,
    /// Bytes per record.
    pub rec: usize,
    /// Bytes of a data page's header.
    pub hdr: usize,
    /// Records per data page.
    pub per_page: usize,
    /// Bitmaps per index page.
    pub idx_per_page: usize,
    /// Payload bytes per variable-data page.
    pub var_payload: usize,
    /// Layout tag stored in data pages.
    pub tag: u32,
    /// Bytes to read to see a data page's header (rounded up to the read size).
    pub probe: usize,
}

impl Layout {
    pub fn new(
        page: usize,
        ks: usize,
        ds: usize,
        bm: usize,
        minmax: bool,
        var: bool,
        read_size: usize,
    ) -> Layout {
        let hdr = COMMON + 2 * ks + bm + if minmax { 2 * ds } else { 0 };
        let rec = ks + ds + if var { 8 } else { 0 };
        let per_page = page.saturating_sub(hdr) / rec.max(1);
        let idx_per_page = page.saturating_sub(COMMON).checked_div(bm).unwrap_or(0);
        let rs = read_size.max(1);
        let probe = hdr.max(COMMON).div_ceil(rs).saturating_mul(rs).min(page);
        let tag = (ks as u32)
            | ((bm as u32) << 8)
            | (u32::from(minmax) << 14)
            | (u32::from(var) << 15)
            | ((ds as u32 & 0xFFFF) << 16);
        Layout {
            page,
            ks,
            ds,
            bm,
            minmax,
            var,
            rec,
            hdr,
            per_page,
            idx_per_page,
            var_payload: page.saturating_sub(COMMON),
            tag,
            probe,
        }
    }

    fn hdr_len(&self, kind: Kind) -> usize {
        match kind {
            Kind::Data | Kind::Temp => self.hdr,
            Kind::Index | Kind::Var => COMMON,
        }
    }

    fn max_count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Data | Kind::Temp => self.per_page,
            Kind::Index => self.idx_per_page,
            Kind::Var => self.var_payload,
        }
    }

    /// Fills in the common header of a whole page image and both checksums.
    pub fn seal(&self, page: &mut [u8], h: &Header) {
        if page.len() < self.page {
            return;
        }
        let page = &mut page[..self.page];
        page[0..2].copy_from_slice(&MAGIC);
        page[2] = FORMAT_VERSION;
        page[O_KIND] = h.kind as u8;
        put_u32(page, O_ID, h.id);
        put_u16(page, O_COUNT, h.count);
        put_u16(page, O_GAP, h.gap);
        put_u32(page, O_AUX, h.aux);
        let hl = self.hdr_len(h.kind);
        let mut c = Hasher::new();
        c.update(&page[0..8]);
        c.update(&page[16..hl]);
        let hcrc = c.clone().finalize();
        c.update(&page[hl..]);
        put_u32(page, O_HCRC, hcrc);
        put_u32(page, O_PCRC, c.finalize());
    }

    /// Decodes and checks a header from the first bytes of a page (at least `probe` bytes,
    /// or `COMMON` for index and variable-data pages).
    pub fn header(&self, b: &[u8]) -> Result<Header, &'static str> {
        self.check_header(b).map(|(h, _, _)| h)
    }

    /// [`header`](Self::header), also returning the checksum state after the header's
    /// bytes and the header length, so [`verify`](Self::verify) hashes each byte once.
    #[inline]
    fn check_header(&self, b: &[u8]) -> Result<(Header, Hasher, usize), &'static str> {
        if b.len() < COMMON {
            return Err("short header");
        }
        if b[0..2] != MAGIC {
            return Err("no page here (bad magic)");
        }
        if b[2] != FORMAT_VERSION {
            return Err("unknown format version");
        }
        let kind = match b[O_KIND] {
            1 => Kind::Data,
            2 => Kind::Temp,
            3 => Kind::Index,
            4 => Kind::Var,
            _ => return Err("unknown page kind"),
        };
        let hl = self.hdr_len(kind);
        if b.len() < hl {
            return Err("short header");
        }
        let mut c = Hasher::new();
        c.update(&b[0..8]);
        c.update(&b[16..hl]);
        if c.clone().finalize() != get_u32(b, O_HCRC) {
            return Err("header checksum mismatch");
        }
        let h = Header {
            kind,
            id: get_u32(b, O_ID),
            count: get_u16(b, O_COUNT),
            gap: get_u16(b, O_GAP),
            aux: get_u32(b, O_AUX),
        };
        if usize::from(h.count) > self.max_count(kind) {
            return Err("count larger than a page holds");
        }
        if matches!(kind, Kind::Data | Kind::Temp) && h.aux != self.tag {
            return Err("page layout differs from the configuration");
        }
        Ok((h, c, hl))
    }

    /// Checks a whole page image: its header and its page checksum (each byte hashed once).
    pub fn verify(&self, page: &[u8]) -> Result<Header, &'static str> {
        if page.len() < self.page {
            return Err("short page");
        }
        let (h, mut c, hl) = self.check_header(page)?;
        c.update(&page[hl..self.page]);
        if c.finalize() != get_u32(page, O_PCRC) {
            return Err("page checksum mismatch");
        }
        Ok(h)
    }

    // ----- data pages ---------------------------------------------------------------------

    #[inline]
    pub fn min_key(&self, b: &[u8]) -> u64 {
        get_key(b, COMMON, self.ks)
    }

    #[inline]
    pub fn max_key(&self, b: &[u8]) -> u64 {
        get_key(b, COMMON + self.ks, self.ks)
    }

    #[inline]
    pub fn set_min_key(&self, b: &mut [u8], k: u64) {
        put_key(b, COMMON, self.ks, k);
    }

    #[inline]
    pub fn set_max_key(&self, b: &mut [u8], k: u64) {
        put_key(b, COMMON + self.ks, self.ks, k);
    }

    #[inline]
    pub fn bitmap_off(&self) -> usize {
        COMMON + 2 * self.ks
    }

    /// The page's bitmap (empty without a data index).
    #[inline]
    pub fn bitmap<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        let o = self.bitmap_off();
        b.get(o..o + self.bm).unwrap_or(&[])
    }

    #[inline]
    pub fn dmin_off(&self) -> usize {
        self.bitmap_off() + self.bm
    }

    #[inline]
    pub fn dmax_off(&self) -> usize {
        self.dmin_off() + self.ds
    }

    /// The page's smallest data value (empty without data min/max).
    #[inline]
    pub fn dmin<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        if !self.minmax {
            return &[];
        }
        let o = self.dmin_off();
        b.get(o..o + self.ds).unwrap_or(&[])
    }

    /// The page's largest data value (empty without data min/max).
    #[inline]
    pub fn dmax<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        if !self.minmax {
            return &[];
        }
        let o = self.dmax_off();
        b.get(o..o + self.ds).unwrap_or(&[])
    }

    #[inline]
    pub fn rec_off(&self, i: usize) -> usize {
        self.hdr + i * self.rec
    }

    #[inline]
    pub fn key(&self, b: &[u8], i: usize) -> u64 {
        get_key(b, self.rec_off(i), self.ks)
    }

    #[inline]
    pub fn data<'b>(&self, b: &'b [u8], i: usize) -> &'b [u8] {
        let o = self.rec_off(i) + self.ks;
        b.get(o..o + self.ds).unwrap_or(&[])
    }

    pub fn var_ref(&self, b: &[u8], i: usize) -> Option<VarRef> {
        if !self.var {
            return None;
        }
        let o = self.rec_off(i) + self.ks + self.ds;
        let page = get_u32(b, o);
        let offset = get_u32(b, o + 4);
        if page == u32::MAX && offset == u32::MAX {
            None
        } else {
            Some(VarRef { page, offset })
        }
    }

    /// Writes record `i`.
    #[inline]
    pub fn set_record(&self, b: &mut [u8], i: usize, key: u64, data: &[u8], var: Option<VarRef>) {
        let o = self.rec_off(i);
        put_key(b, o, self.ks, key);
        if let Some(s) = b.get_mut(o + self.ks..o + self.ks + self.ds) {
            s.copy_from_slice(data);
        }
        if self.var {
            let v = var.unwrap_or(VarRef {
                page: u32::MAX,
                offset: u32::MAX,
            });
            put_u32(b, o + self.ks + self.ds, v.page);
            put_u32(b, o + self.ks + self.ds + 4, v.offset);
        }
    }

    /// Index of the first record of a page with `count` records whose key is at least `key`.
    #[inline]
    pub fn lower_bound(&self, b: &[u8], count: usize, key: u64) -> usize {
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(b, mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_page_verifies_and_any_flipped_bit_is_caught() {
        let lay = Layout::new(256, 4, 12, 2, true, false, 1);
        let mut p = [0u8; 256];
        lay.set_min_key(&mut p, 10);
        lay.set_max_key(&mut p, 20);
        lay.set_record(&mut p, 0, 10, &[1; 12], None);
        let h = Header {
            kind: Kind::Data,
            id: 7,
            count: 1,
            gap: 0,
            aux: lay.tag,
        };
        lay.seal(&mut p, &h);
        assert_eq!(lay.verify(&p), Ok(h));
        assert_eq!(lay.header(&p[..lay.probe]), Ok(h));
        for bit in 0..256 * 8 {
            let mut q = p;
            q[bit / 8] ^= 1 << (bit % 8);
            assert!(lay.verify(&q).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_page_of_another_layout_is_refused() {
        let a = Layout::new(256, 4, 12, 2, true, false, 1);
        let b = Layout::new(256, 8, 12, 2, true, false, 1);
        let mut p = [0u8; 256];
        a.seal(
            &mut p,
            &Header {
                kind: Kind::Data,
                id: 0,
                count: 0,
                gap: 0,
                aux: a.tag,
            },
        );
        assert!(b.verify(&p).is_err());
    }
}
