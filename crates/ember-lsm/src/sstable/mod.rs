//! Sorted tables: immutable blobs of data blocks, an index block and a bloom filter.
//!
//! Layout of a table blob (every block in the envelope of [`crate::coding::seal`], which
//! carries the format version, the table id, the length and a CRC-32):
//!
//! ```text
//! data block 0 | data block 1 | … | index block | bloom block [| value refs block]
//! ```
//!
//! A table whose entries point into value blobs ([`crate::vlog`]) ends with a value refs
//! block (kind 5): `count varint`, then per value blob `blob id varint | bytes varint` (the
//! bytes of the values its pointers point to), by blob id. The manifest keeps its handle;
//! opening the database reads it, so the manifest stays one entry per table whatever the
//! number of blobs.
//!
//! The bloom block is of kind 3, or of kind 4 (a prefix bloom block) if the table was
//! written under a [`PrefixRule`]; readers take either.
//!
//! Index payload: `count varint`, then per data block `last key` (varint length + bytes),
//! `offset varint`, `length varint` (offset and length of the whole sealed block in the
//! blob). Bloom payload: see [`bloom`]. The manifest keeps each table's id, size, entry
//! count, smallest and largest key, and the handles (offset, length) of its index and bloom
//! blocks, so opening a table reads nothing but those two blocks — and a table below level 1
//! reads them only when a lookup needs them, through the bounded cache.

pub mod block;
pub mod bloom;

use std::collections::HashMap;

use crate::coding::{
    BlockKind, IdHash, Reader, open_block, put_bytes, put_varint, seal, seal_with,
};
use crate::env::{BlobId, Env};
use crate::error::{LsmError, Result};
use crate::vlog::ValuePtr;
use block::{BlockBuilder, Stored};
use bloom::{Bloom, PrefixRule, key_hash};

/// Where a block lies in its table blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// First byte.
    pub offset: u64,
    /// Bytes (header included).
    pub len: u64,
}

/// What the manifest knows of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// Its blob (and table) id.
    pub id: BlobId,
    /// Bytes written.
    pub size: u64,
    /// Entries (tombstones included).
    pub entries: u64,
    /// Smallest key.
    pub smallest: Vec<u8>,
    /// Largest key.
    pub largest: Vec<u8>,
    /// The index block.
    pub index: Handle,
    /// The bloom block.
    pub bloom: Handle,
    /// The value refs block (length 0: none, the table holds no pointers).
    pub refs: Handle,
    /// The environment's locator of its blob.
    pub locator: Vec<u8>,
    /// Per value blob its entries point into ([`crate::vlog`]): the blob and the bytes of
    /// the values pointed to, by blob id (what its value refs block holds; read at open).
    pub values: Vec<(BlobId, u64)>,
}

impl TableMeta {
    /// Whether its key range meets `[lo, hi]`.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest.as_slice() <= hi && lo <= self.largest.as_slice()
    }

    /// Whether `key` lies within its key range.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.smallest.as_slice() <= key && key <= self.largest.as_slice()
    }
}

/// A decoded index block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Per data block: its last key and handle, in key order.
    pub blocks: Vec<(Vec<u8>, Handle)>,
    /// Bytes every block's last key starts with (the first key's and the last key's common
    /// prefix).
    shared: usize,
    /// Per block: the 8 bytes of its last key after the shared ones, big-endian, zeros past
    /// the key's end. A search steps through these, side by side in RAM, instead of
    /// following each key's pointer; only blocks whose 8 bytes equal the key's are compared
    /// in full (see [`find`](Self::find)).
    heads: Vec<u64>,
}

/// The 8 bytes of `key` from `at` on as a big-endian number, zeros past its end. For keys
/// that agree on their first `at` bytes, `head(a) < head(b)` implies `a < b`, and `a < b`
/// implies `head(a) <= head(b)`.
fn head(key: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(rest) = key.get(at..) {
        let n = rest.len().min(8);
        b[..n].copy_from_slice(&rest[..n]);
    }
    u64::from_be_bytes(b)
}

impl Index {
    fn decode(payload: &[u8], t: &TableMeta) -> Result<Self> {
        let mut r = Reader::new(payload, "index block", t.id, t.index.offset);
        let n = r.varint()?;
        if n > r.remaining() as u64 {
            return Err(r.bad("block count beyond the index"));
        }
        let mut blocks: Vec<(Vec<u8>, Handle)> = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let key = r.bytes()?.to_vec();
            let offset = r.varint()?;
            let len = r.varint()?;
            if offset.checked_add(len).is_none_or(|e| e > t.index.offset) {
                return Err(r.bad("data block handle beyond the data"));
            }
            if blocks.last().is_some_and(|(k, _)| *k >= key) {
                return Err(r.bad("keys out of order"));
            }
            blocks.push((key, Handle { offset, len }));
        }
        Ok(Index::new(blocks))
    }

    /// An index of these blocks (last key and handle each, in key order).
    pub fn new(blocks: Vec<(Vec<u8>, Handle)>) -> Self {
        let shared = match (blocks.first(), blocks.last()) {
            (Some((a, _)), Some((b, _))) => a.iter().zip(b).take_while(|(x, y)| x == y).count(),
            _ => 0,
        };
        let heads = blocks.iter().map(|(k, _)| head(k, shared)).collect();
        Index {
            blocks,
            shared,
            heads,
        }
    }

    /// The position of the first block that may hold keys ≥ `key`: the first whose last key
    /// is not below it.
    pub fn find(&self, key: &[u8]) -> usize {
        let Some((first, _)) = self.blocks.first() else {
            return 0;
        };
        // Every last key starts with `first[..shared]`; a key that does not is below or
        // above all of them.
        let common = &first[..self.shared.min(first.len())];
        if !key.starts_with(common) {
            return if key < common { 0 } else { self.blocks.len() };
        }
        let h = head(key, self.shared);
        let lo = self.heads.partition_point(|&x| x < h);
        let ties = self.heads.get(lo..).unwrap_or_default();
        let hi = lo + ties.partition_point(|&x| x == h);
        lo + self
            .blocks
            .get(lo..hi)
            .unwrap_or_default()
            .partition_point(|(last, _)| last.as_slice() < key)
    }

    /// [`find`](Self::find) by comparing whole keys.
    #[cfg(test)]
    fn find_slow(&self, key: &[u8]) -> usize {
        self.blocks
            .partition_point(|(last, _)| last.as_slice() < key)
    }

    /// Bytes it is charged.
    pub fn charge(&self) -> usize {
        48 + self.blocks.iter().map(|(k, _)| k.len() + 56).sum::<usize>()
    }
}

/// Reads and checks one block of `t` into `buf` (its capacity reused); returns its version
/// and payload.
fn read_block<'a>(
    env: &mut dyn Env,
    t: &TableMeta,
    h: Handle,
    kind: BlockKind,
    buf: &'a mut Vec<u8>,
) -> Result<(u8, &'a [u8])> {
    let name = match kind {
        BlockKind::Data => "data block",
        BlockKind::Index => "index block",
        BlockKind::Bloom | BlockKind::PrefixBloom => "bloom filter",
        BlockKind::Refs => "value refs block",
    };
    if h.offset.checked_add(h.len).is_none_or(|e| e > t.size) || h.len > 1 << 30 {
        return Err(LsmError::Corrupt {
            structure: name,
            table: t.id,
            offset: h.offset,
            reason: "handle beyond the table",
        });
    }
    // The scratch buffer only grows: bytes left from an earlier block are overwritten by the
    // read (no zero fill first).
    let len = h.len as usize;
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let block = &mut buf[..len];
    env.read(t.id, h.offset, block)?;
    // A table's filter block is either kind; the envelope says which.
    let kind = match kind {
        BlockKind::Bloom | BlockKind::PrefixBloom if block.get(5) == Some(&4) => {
            BlockKind::PrefixBloom
        }
        BlockKind::PrefixBloom => BlockKind::Bloom,
        k => k,
    };
    open_block(kind, t.id, h.offset, block)
}

/// Reads a table's index block.
pub fn read_index(env: &mut dyn Env, t: &TableMeta) -> Result<Index> {
    let mut buf = Vec::new();
    let (_, p) = read_block(env, t, t.index, BlockKind::Index, &mut buf)?;
    Index::decode(p, t)
}

/// Reads a table's value refs (none if it has no refs block).
pub fn read_refs(env: &mut dyn Env, t: &TableMeta) -> Result<Vec<(BlobId, u64)>> {
    if t.refs.len == 0 {
        return Ok(Vec::new());
    }
    let mut buf = Vec::new();
    let (_, p) = read_block(env, t, t.refs, BlockKind::Refs, &mut buf)?;
    let mut r = Reader::new(p, "value refs block", t.id, t.refs.offset);
    let n = r.varint()?;
    if n > r.remaining() as u64 {
        return Err(r.bad("blob count beyond the block"));
    }
    let mut out: Vec<(BlobId, u64)> = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let blob = r.varint()?;
        if out.last().is_some_and(|&(b, _)| b >= blob) {
            return Err(r.bad("blob ids out of order"));
        }
        out.push((blob, r.varint()?));
    }
    if r.remaining() != 0 {
        return Err(r.bad("trailing bytes"));
    }
    Ok(out)
}

/// Reads a table's bloom filter.
pub fn read_bloom(env: &mut dyn Env, t: &TableMeta) -> Result<Bloom> {
    let mut buf = Vec::new();
    read_block(env, t, t.bloom, BlockKind::Bloom, &mut buf)?;
    // The block checked out: its header is whole and its kind byte says which filter it is.
    let prefixed = buf.get(5) == Some(&(BlockKind::PrefixBloom as u8));
    let p = buf.get(crate::coding::BLOCK_HEADER..).unwrap_or_default();
    Bloom::decode(p, prefixed, t.id, t.bloom.offset)
}

/// Reads a data block of a table, through `scratch` (a buffer the caller keeps from read to
/// read, so a block read allocates only the decoded block).
pub fn read_data(
    env: &mut dyn Env,
    t: &TableMeta,
    h: Handle,
    scratch: &mut Vec<u8>,
) -> Result<block::DataBlock> {
    let (format, p) = read_block(env, t, h, BlockKind::Data, scratch)?;
    block::DataBlock::decode(p, format, t.id, h.offset)
}

/// Reads data block `h` of `t` into `scratch` and checks it as [`read_data`] does, to be
/// searched there (no copy kept).
pub fn read_data_in<'a>(
    env: &mut dyn Env,
    t: &TableMeta,
    h: Handle,
    scratch: &'a mut Vec<u8>,
) -> Result<block::DataBlock<&'a [u8]>> {
    let (format, p) = read_block(env, t, h, BlockKind::Data, scratch)?;
    block::DataBlock::check(p, format, t.id, h.offset)
}

/// Reads consecutive data blocks of `t` with one read of the environment: `blocks[0]`, then
/// each next block as long as it starts where the one before ends and the run stays within
/// `max_bytes` (the first block is read whatever its size). Every block is checked (its
/// envelope and checksum) and decoded as [`read_data`] does, in order, into `out`.
pub fn read_data_run(
    env: &mut dyn Env,
    t: &TableMeta,
    blocks: &[Handle],
    max_bytes: u64,
    scratch: &mut Vec<u8>,
    out: &mut Vec<block::DataBlock>,
) -> Result<()> {
    let Some(&first) = blocks.first() else {
        return Ok(());
    };
    let mut end = first.offset.saturating_add(first.len);
    let mut n = 1;
    for h in blocks.iter().skip(1) {
        match h.offset.checked_add(h.len) {
            Some(e) if h.offset == end && e - first.offset <= max_bytes => end = e,
            _ => break,
        }
        n += 1;
    }
    if n == 1 {
        out.push(read_data(env, t, first, scratch)?);
        return Ok(());
    }
    if end > t.size || end - first.offset > 1 << 30 {
        return Err(LsmError::Corrupt {
            structure: "data block",
            table: t.id,
            offset: first.offset,
            reason: "handle beyond the table",
        });
    }
    let run = (end - first.offset) as usize;
    if scratch.len() < run {
        scratch.resize(run, 0);
    }
    let scratch = &mut scratch[..run];
    env.read(t.id, first.offset, scratch)?;
    for h in blocks.iter().take(n) {
        let at = (h.offset - first.offset) as usize;
        let bytes = scratch
            .get(at..at + h.len as usize)
            .ok_or(LsmError::Corrupt {
                structure: "data block",
                table: t.id,
                offset: h.offset,
                reason: "handle beyond the table",
            })?;
        let (format, p) = open_block(BlockKind::Data, t.id, h.offset, bytes)?;
        out.push(block::DataBlock::decode(p, format, t.id, h.offset)?);
    }
    Ok(())
}

/// Builds one table in memory.
#[derive(Debug)]
pub struct TableBuilder {
    id: BlobId,
    block_size: usize,
    bits_per_key: usize,
    out: Vec<u8>,
    block: BlockBuilder,
    index: Vec<(Vec<u8>, Handle)>,
    hashes: Vec<u64>,
    /// The rule whose prefixes enter the filter too, and the hash of the last prefix added.
    rule: Option<PrefixRule>,
    last_prefix: Option<u64>,
    smallest: Option<Vec<u8>>,
    last: Vec<u8>,
    entries: u64,
    /// Bytes of values its pointers point to, per value blob (a table deep in the tree
    /// points into hundreds).
    values: HashMap<BlobId, u64, IdHash>,
    /// A pointer being encoded (its capacity reused).
    ptr: Vec<u8>,
}

impl TableBuilder {
    /// A builder for table `id`.
    pub fn new(id: BlobId, block_size: usize, bits_per_key: usize) -> Self {
        Self::with_rule(id, block_size, bits_per_key, None)
    }

    /// A builder for table `id` whose filter also holds the prefixes of `rule`.
    pub fn with_rule(
        id: BlobId,
        block_size: usize,
        bits_per_key: usize,
        rule: Option<PrefixRule>,
    ) -> Self {
        TableBuilder {
            id,
            block_size,
            bits_per_key,
            out: Vec::new(),
            block: BlockBuilder::default(),
            index: Vec::new(),
            hashes: Vec::new(),
            rule,
            last_prefix: None,
            smallest: None,
            last: Vec::new(),
            entries: 0,
            values: HashMap::default(),
            ptr: Vec::new(),
        }
    }

    /// Adds an entry with its value (`None`: a tombstone); keys strictly ascending.
    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.add_stored(key, value.map(Stored::Inline));
    }

    /// Adds an entry whose value lies in a value blob.
    pub fn add_pointer(&mut self, key: &[u8], p: &ValuePtr) {
        *self.values.entry(p.blob).or_default() += u64::from(p.len);
        let mut e = std::mem::take(&mut self.ptr);
        e.clear();
        p.encode(&mut e);
        self.add_stored(key, Some(Stored::Pointer(&e)));
        self.ptr = e;
    }

    fn add_stored(&mut self, key: &[u8], value: Option<Stored<'_>>) {
        if self.smallest.is_none() {
            self.smallest = Some(key.to_vec());
        }
        self.block.add(key, value);
        self.hashes.push(key_hash(key));
        if let Some(p) = self.rule.and_then(|r| r.prefix(key)) {
            // Keys come in order, so equal prefixes are neighbours: each enters once.
            let h = key_hash(p);
            if self.last_prefix != Some(h) {
                self.hashes.push(h);
                self.last_prefix = Some(h);
            }
        }
        self.last.clear();
        self.last.extend_from_slice(key);
        self.entries += 1;
        if self.block.size() >= self.block_size {
            self.cut_block();
        }
    }

    fn cut_block(&mut self) {
        if self.block.is_empty() {
            return;
        }
        let offset = self.out.len() as u64;
        let block = &mut self.block;
        seal_with(BlockKind::Data, self.id, &mut self.out, |o| {
            block.finish_into(o)
        });
        let len = self.out.len() as u64 - offset;
        self.index.push((self.last.clone(), Handle { offset, len }));
    }

    /// Makes room for a table of about `bytes` bytes in all (its buffer would otherwise grow
    /// by doubling, copying what it holds each time).
    /// Only a hint: if the room cannot be had, nothing is reserved.
    pub fn reserve(&mut self, bytes: usize) {
        let _ = self.out.try_reserve(bytes.saturating_sub(self.out.len()));
    }

    /// Bytes so far (about).
    pub fn size(&self) -> usize {
        self.out.len() + self.block.size() + 9 * self.hashes.len() / 8
    }

    /// Entries so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The table's bytes and its metadata (without a locator yet).
    pub fn finish(mut self) -> (Vec<u8>, TableMeta) {
        self.cut_block();
        let mut ip = Vec::new();
        put_varint(&mut ip, self.index.len() as u64);
        for (k, h) in &self.index {
            put_bytes(&mut ip, k);
            put_varint(&mut ip, h.offset);
            put_varint(&mut ip, h.len);
        }
        let io = self.out.len() as u64;
        seal(BlockKind::Index, self.id, &ip, &mut self.out);
        let index = Handle {
            offset: io,
            len: self.out.len() as u64 - io,
        };
        let bp = Bloom::build_with(&self.hashes, self.bits_per_key, self.rule).encode();
        let bo = self.out.len() as u64;
        let kind = match self.rule {
            Some(_) => BlockKind::PrefixBloom,
            None => BlockKind::Bloom,
        };
        seal(kind, self.id, &bp, &mut self.out);
        let bloom = Handle {
            offset: bo,
            len: self.out.len() as u64 - bo,
        };
        let mut values: Vec<(BlobId, u64)> = self.values.into_iter().collect();
        values.sort_unstable();
        let ro = self.out.len() as u64;
        if !values.is_empty() {
            let mut rp = Vec::new();
            put_varint(&mut rp, values.len() as u64);
            for &(blob, bytes) in &values {
                put_varint(&mut rp, blob);
                put_varint(&mut rp, bytes);
            }
            seal(BlockKind::Refs, self.id, &rp, &mut self.out);
        }
        let refs = Handle {
            offset: ro,
            len: self.out.len() as u64 - ro,
        };
        let meta = TableMeta {
            id: self.id,
            size: self.out.len() as u64,
            entries: self.entries,
            smallest: self.smallest.unwrap_or_default(),
            largest: self.last,
            index,
            bloom,
            refs,
            locator: Vec::new(),
            values,
        };
        (self.out, meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn index_of(mut keys: Vec<Vec<u8>>) -> Index {
        keys.sort();
        keys.dedup();
        Index::new(
            keys.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    (
                        k,
                        Handle {
                            offset: i as u64,
                            len: 1,
                        },
                    )
                })
                .collect(),
        )
    }

    /// Keys over a small alphabet, often sharing a long prefix, often prefixes of each other.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::sample::select(vec![
                &b""[..],
                b"tbl\x00\x00\x01",
                b"tbl\x00\x00\x01\x00\x00",
            ]),
            prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0xff]), 0..12),
        )
            .prop_map(|(p, s)| [p, &s[..]].concat())
    }

    proptest! {
        /// The search through the 8-byte heads finds what a search of whole keys finds.
        #[test]
        fn find_agrees_with_a_search_of_whole_keys(
            keys in prop::collection::vec(key(), 0..60),
            probes in prop::collection::vec(key(), 1..40),
        ) {
            let ix = index_of(keys.clone());
            for p in probes.iter().chain(keys.iter()) {
                prop_assert_eq!(ix.find(p), ix.find_slow(p), "key {:?}", p);
            }
        }
    }
}
