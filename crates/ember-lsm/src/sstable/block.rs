//! Data blocks: sorted entries with prefix compression and restart points.
//!
//! Payload (inside the block envelope of [`crate::coding::seal`]):
//!
//! ```text
//! entries:   shared varint | unshared varint | vtag varint | key suffix | value
//!            (shared: bytes of the previous key reused, 0 at a restart point;
//!             vtag 0: tombstone, n + 1: a value of n bytes)
//! restarts:  count × u32 offset of a restart entry (every 16th entry)
//! count:     u32 number of restarts
//! ```

use crate::coding::{Reader, put_varint};
use crate::error::Result;

/// Entries between restart points.
pub const RESTART_INTERVAL: usize = 16;

/// Builds one data block's payload.
#[derive(Debug, Default)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    last: Vec<u8>,
    count: usize,
}

impl BlockBuilder {
    /// Adds an entry (keys in strictly ascending order).
    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) {
        let shared = if self.count.is_multiple_of(RESTART_INTERVAL) {
            self.restarts.push(self.buf.len() as u32);
            0
        } else {
            key.iter()
                .zip(&self.last)
                .take_while(|(a, b)| a == b)
                .count()
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        match value {
            None => put_varint(&mut self.buf, 0),
            Some(v) => put_varint(&mut self.buf, v.len() as u64 + 1),
        }
        self.buf.extend_from_slice(&key[shared..]);
        if let Some(v) = value {
            self.buf.extend_from_slice(v);
        }
        self.last.clear();
        self.last.extend_from_slice(key);
        self.count += 1;
    }

    /// Bytes of the payload so far (about).
    pub fn size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The finished payload; the builder is empty again.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.last.clear();
        self.count = 0;
        out
    }
}

/// A decoded data block: every full key and value back to back in one buffer, and per entry
/// where its key and value are — two allocations per block, not two per entry, so loading,
/// caching and evicting a block stay cheap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataBlock {
    buf: Vec<u8>,
    ents: Vec<Ent>,
}

/// Where an entry's key and value lie in the block's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ent {
    key: u32,
    key_len: u32,
    val: u32,
    /// `u32::MAX`: a tombstone.
    val_len: u32,
}

impl DataBlock {
    /// Decodes a payload (already checksummed) of `table` at `offset`.
    pub fn decode(payload: &[u8], table: u64, offset: u64) -> Result<Self> {
        let mut r = Reader::new(payload, "data block", table, offset);
        if payload.len() < 4 {
            return Err(r.bad("no restart count"));
        }
        let n = crate::coding::le32(payload, payload.len() - 4) as usize;
        let trailer = n
            .checked_mul(4)
            .and_then(|t| t.checked_add(4))
            .filter(|&t| t <= payload.len())
            .ok_or_else(|| r.bad("restart array beyond the block"))?;
        let body = &payload[..payload.len() - trailer];
        r = Reader::new(body, "data block", table, offset);
        // Full keys take a little more room than prefix-compressed ones (less the three
        // length bytes of each entry); every entry takes at least three bytes of the body.
        let mut buf: Vec<u8> = Vec::with_capacity(body.len() + body.len() / 4);
        let mut ents: Vec<Ent> = Vec::with_capacity((n * RESTART_INTERVAL).min(body.len() / 3 + 1));
        let mut last = 0..0;
        while r.remaining() > 0 {
            let shared = r.varint()? as usize;
            let unshared = r.length()?;
            let vtag = r.varint()?;
            if shared > last.len() {
                return Err(r.bad("shared prefix longer than the previous key"));
            }
            let key = buf.len();
            buf.extend_from_within(last.start..last.start + shared);
            buf.extend_from_slice(r.take(unshared)?);
            let key_end = buf.len();
            if !ents.is_empty() && buf[last.clone()] >= buf[key..key_end] {
                return Err(r.bad("keys out of order"));
            }
            let (val, val_len) = match vtag {
                0 => (key_end, u32::MAX),
                n => {
                    let n = usize::try_from(n - 1).map_err(|_| r.bad("value length"))?;
                    buf.extend_from_slice(r.take(n)?);
                    (key_end, n as u32)
                }
            };
            if buf.len() > u32::MAX as usize - 1 {
                return Err(r.bad("block larger than 4 GiB"));
            }
            ents.push(Ent {
                key: key as u32,
                key_len: (key_end - key) as u32,
                val: val as u32,
                val_len,
            });
            last = key..key_end;
        }
        if buf.capacity() > buf.len() + buf.len() / 2 {
            buf.shrink_to_fit();
        }
        if ents.capacity() > ents.len() + ents.len() / 2 {
            ents.shrink_to_fit();
        }
        Ok(DataBlock { buf, ents })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    /// Whether the block has no entry.
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// Entry `i`: its key and its value (`None`: a tombstone).
    pub fn entry(&self, i: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let e = self.ents.get(i)?;
        let key = &self.buf[e.key as usize..(e.key + e.key_len) as usize];
        let value = (e.val_len != u32::MAX)
            .then(|| &self.buf[e.val as usize..e.val as usize + e.val_len as usize]);
        Some((key, value))
    }

    fn key(&self, e: &Ent) -> &[u8] {
        &self.buf[e.key as usize..(e.key + e.key_len) as usize]
    }

    /// Bytes this block is charged in a cache.
    pub fn charge(&self) -> usize {
        64 + self.buf.capacity() + self.ents.capacity() * std::mem::size_of::<Ent>()
    }

    /// Index of the first entry with key ≥ `key`.
    pub fn seek(&self, key: &[u8]) -> usize {
        self.ents.partition_point(|e| self.key(e) < key)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::memtable::Value;

    #[test]
    fn blocks_round_trip_with_prefixes_and_tombstones() {
        let mut b = BlockBuilder::default();
        let mut want = Vec::new();
        for i in 0..40u32 {
            let k = format!("key{i:04}").into_bytes();
            let v = (i % 3 != 0).then(|| vec![i as u8; i as usize]);
            b.add(&k, v.as_deref());
            want.push((k, v));
        }
        let p = b.finish();
        let d = DataBlock::decode(&p, 1, 0).unwrap();
        let got: Vec<(Vec<u8>, Value)> = (0..d.len())
            .map(|i| {
                let (k, v) = d.entry(i).unwrap();
                (k.to_vec(), v.map(<[u8]>::to_vec))
            })
            .collect();
        assert_eq!(got, want);
        assert!(d.entry(d.len()).is_none());
        assert_eq!(d.seek(b"key0005"), 5);
    }
}
