//! The catalog: every table's id, name, schema and BlockSet, kept in the META_ZONE as two
//! alternating snapshots.
//!
//! ```text
//! META_ZONE = half A | half B (equal, sector-aligned)
//! half: sector 0 header | payload sectors
//!   header: 16-byte block header (kind Catalog) | generation u64 | payload length u64 |
//!           payload CRC-32 u32
//!   payload: a row [next table id, index page marks blob] then, per table, a u32 length
//!            and a row [id, name, schema blob, BlockSet blob (runs of blocks that follow
//!            one another in the list and on the device: class u8, chunk u32, first index
//!            u32, count u32; format version 2: 9 bytes per block, class, chunk, index),
//!            index definitions blob (u32 length + definition row, each),
//!            primary index root blob (empty, or the root page's 9 bytes), index height,
//!            index pages, rows, next rowid]
//!   index page marks: runs of (class u8, chunk u32, first index u32, count u32, in use u8)
//! ```
//!
//! The index page marks are the allocator changes of the checkpoint that wrote the snapshot:
//! the primary-index pages it wrote (in use) and the ones they replaced (free). Opening
//! applies them to the allocator before replaying the journal: if the checkpoint did not get
//! as far as writing the allocator's bitmaps, that brings them in line with the roots this
//! snapshot names (see `pindex`).
//!
//! A checkpoint writes the next generation into the other half, payload first and header
//! last; opening takes the valid half with the higher generation whose payload matches its
//! checksum, so a torn or reordered write falls back to the previous snapshot. (The paper keeps
//! one 512-byte entry per table with a MetaMap; one snapshot is simpler to make atomic and is
//! rewritten only at checkpoints. Its cost grows with the number of block runs; per-table entries
//! can replace it without changing the journal.)

use ember_device::BlockDevice;

use crate::allocator::BlockRef;
use crate::error::{Result, TableError};
use crate::format::{self, Kind, u32_at, u64_at};
use crate::row::{Value, decode_row, encode_row};
use crate::schema::{IndexDef, Schema};
use crate::space::Mark;
use crate::superblock::Zone;

const SECTOR: u64 = 512;

/// One table as the catalog records it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableEntry {
    /// The table's id (never reused).
    pub id: u64,
    /// Its name as created.
    pub name: String,
    /// Its schema.
    pub schema: Schema,
    /// Its blocks, in order.
    pub blocks: Vec<BlockRef>,
    /// Its secondary indexes.
    pub indexes: Vec<IndexDef>,
    /// Root page of its primary index (none: no rows).
    pub index_root: Option<BlockRef>,
    /// Levels of its primary index.
    pub index_height: u8,
    /// Pages of its primary index.
    pub index_pages: u64,
    /// Its rows.
    pub rows: u64,
    /// The rowid its next row gets (tables without a primary key).
    pub next_rowid: i64,
}

/// A catalog snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    /// The id the next new table gets.
    pub next_id: u64,
    /// The tables.
    pub tables: Vec<TableEntry>,
    /// The allocator marks of the index pages the checkpoint that wrote this snapshot wrote
    /// and freed.
    pub marks: Vec<Mark>,
}

/// Index page marks as runs (class, chunk, first index, count, in use).
fn encode_marks(marks: &[Mark]) -> Vec<u8> {
    let mut sorted = marks.to_vec();
    sorted.sort();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let (b, used) = sorted[i];
        let mut n = 1u32;
        while let Some((x, u)) = sorted.get(i + n as usize) {
            if *u != used || x.class != b.class || x.chunk != b.chunk || x.index != b.index + n {
                break;
            }
            n += 1;
        }
        out.push(b.class);
        out.extend_from_slice(&b.chunk.to_le_bytes());
        out.extend_from_slice(&b.index.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
        out.push(u8::from(used));
        i += n as usize;
    }
    out
}

fn decode_marks(p: &[u8], offset: u64) -> Result<Vec<Mark>> {
    if !p.len().is_multiple_of(14) {
        return Err(corrupt(offset, "malformed index page marks"));
    }
    let mut out = Vec::new();
    for r in p.chunks_exact(14) {
        let (class, chunk, first, n) = (r[0], u32_at(r, 1), u32_at(r, 5), u32_at(r, 9));
        if n > crate::allocator::BITS_PER_CHUNK || first.checked_add(n).is_none() {
            return Err(corrupt(offset, "malformed index page marks"));
        }
        for index in first..first + n {
            out.push((
                BlockRef {
                    class,
                    chunk,
                    index,
                },
                r[13] != 0,
            ));
        }
    }
    Ok(out)
}

fn corrupt(offset: u64, reason: &'static str) -> TableError {
    TableError::Corrupt {
        structure: Kind::Catalog.name(),
        offset,
        reason,
    }
}

fn block_bytes(b: BlockRef) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = b.class;
    out[1..5].copy_from_slice(&b.chunk.to_le_bytes());
    out[5..9].copy_from_slice(&b.index.to_le_bytes());
    out
}

/// A BlockSet as runs of consecutive blocks (format version 3).
fn encode_blocks(blocks: &[BlockRef]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let b = blocks[i];
        let mut n = 1u32;
        while let Some(x) = blocks.get(i + n as usize) {
            if x.class != b.class
                || x.chunk != b.chunk
                || Some(x.index) != b.index.checked_add(n)
                || n == u32::MAX
            {
                break;
            }
            n += 1;
        }
        out.extend_from_slice(&block_bytes(b));
        out.extend_from_slice(&n.to_le_bytes());
        i += n as usize;
    }
    out
}

/// A BlockSet blob of a snapshot of format `version`.
fn decode_blocks(p: &[u8], version: u16, offset: u64) -> Result<Vec<BlockRef>> {
    if version < 3 {
        if !p.len().is_multiple_of(9) {
            return Err(corrupt(offset, "malformed table entry"));
        }
        return Ok(p.chunks_exact(9).map(block_at).collect());
    }
    if !p.len().is_multiple_of(13) {
        return Err(corrupt(offset, "malformed table entry"));
    }
    let mut out = Vec::new();
    for r in p.chunks_exact(13) {
        let (b, n) = (block_at(r), u32_at(r, 9));
        if n == 0 || n > crate::allocator::BITS_PER_CHUNK || b.index.checked_add(n).is_none() {
            return Err(corrupt(offset, "malformed block run"));
        }
        out.extend((b.index..b.index + n).map(|index| BlockRef { index, ..b }));
    }
    Ok(out)
}

fn block_at(b: &[u8]) -> BlockRef {
    BlockRef {
        class: b[0],
        chunk: u32_at(b, 1),
        index: u32_at(b, 5),
    }
}

/// Appends `item` with a u32 length in front.
fn push_framed(out: &mut Vec<u8>, item: &[u8]) {
    out.extend_from_slice(&(item.len() as u32).to_le_bytes());
    out.extend_from_slice(item);
}

/// Splits a sequence of length-prefixed items; `None` if one runs past the end.
fn framed(p: &[u8]) -> Option<Vec<&[u8]>> {
    let mut items = Vec::new();
    let mut at = 0usize;
    while at < p.len() {
        let n = u32_at(p.get(at..at + 4)?, 0) as usize;
        items.push(p.get(at + 4..at.checked_add(4 + n)?)?);
        at += 4 + n;
    }
    Some(items)
}

impl Catalog {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut row = Vec::new();
        encode_row(
            &[
                Value::Integer(self.next_id as i64),
                Value::Blob(encode_marks(&self.marks)),
            ],
            &mut row,
        );
        push_framed(&mut out, &row);
        for t in &self.tables {
            let mut schema = Vec::new();
            t.schema.encode(&mut schema);
            let blocks = encode_blocks(&t.blocks);
            let mut defs = Vec::new();
            for d in &t.indexes {
                let mut one = Vec::new();
                d.encode(&mut one);
                push_framed(&mut defs, &one);
            }
            row.clear();
            encode_row(
                &[
                    Value::Integer(t.id as i64),
                    Value::Text(t.name.clone()),
                    Value::Blob(schema),
                    Value::Blob(blocks),
                    Value::Blob(defs),
                    Value::Blob(
                        t.index_root
                            .map(|b| block_bytes(b).to_vec())
                            .unwrap_or_default(),
                    ),
                    Value::Integer(i64::from(t.index_height)),
                    Value::Integer(t.index_pages as i64),
                    Value::Integer(t.rows as i64),
                    Value::Integer(t.next_rowid),
                ],
                &mut row,
            );
            push_framed(&mut out, &row);
        }
        out
    }

    fn decode(p: &[u8], offset: u64, version: u16) -> Result<Self> {
        let rows = framed(p)
            .ok_or(corrupt(offset, "truncated entry"))?
            .into_iter()
            .map(decode_row)
            .collect::<core::result::Result<Vec<_>, _>>()?;
        let mut it = rows.into_iter();
        let (next_id, marks) = match it.next().as_deref() {
            Some([Value::Integer(n), Value::Blob(m)]) if *n >= 0 => {
                (*n as u64, decode_marks(m, offset)?)
            }
            _ => return Err(corrupt(offset, "missing next table id")),
        };
        let mut tables = Vec::new();
        for r in it {
            let [
                Value::Integer(id),
                Value::Text(name),
                Value::Blob(schema),
                Value::Blob(blocks),
                Value::Blob(defs),
                Value::Blob(root),
                Value::Integer(height),
                Value::Integer(pages),
                Value::Integer(rows),
                Value::Integer(next_rowid),
            ] = &r[..]
            else {
                return Err(corrupt(offset, "malformed table entry"));
            };
            if *id < 0
                || !(root.is_empty() || root.len() == 9)
                || !(0..=i64::from(crate::pindex::MAX_HEIGHT)).contains(height)
                || (*height == 0) != root.is_empty()
                || *pages < 0
                || *rows < 0
            {
                return Err(corrupt(offset, "malformed table entry"));
            }
            let schema = Schema::decode(schema)?;
            let indexes = framed(defs)
                .ok_or(corrupt(offset, "truncated index definition"))?
                .into_iter()
                .map(|d| IndexDef::decode(d, &schema))
                .collect::<Result<Vec<_>>>()?;
            tables.push(TableEntry {
                id: *id as u64,
                name: name.clone(),
                indexes,
                schema,
                blocks: decode_blocks(blocks, version, offset)?,
                index_root: (root.len() == 9).then(|| block_at(root)),
                index_height: *height as u8,
                index_pages: *pages as u64,
                rows: *rows as u64,
                next_rowid: *next_rowid,
            });
        }
        Ok(Catalog {
            next_id,
            tables,
            marks,
        })
    }
}

/// Where the snapshots live, and which generation is current.
#[derive(Debug, Clone)]
pub struct CatalogStore {
    zone: Zone,
    generation: u64,
}

impl CatalogStore {
    fn half(&self, g: u64) -> Zone {
        let half = self.zone.len / 2 / SECTOR * SECTOR;
        Zone {
            start: self.zone.start + (g % 2) * half,
            len: half,
        }
    }

    /// Bytes a snapshot's payload may have.
    pub fn capacity(&self) -> u64 {
        self.half(0).len - SECTOR
    }

    /// Writes an empty catalog as generation 1 (not synced).
    pub fn format<D: BlockDevice>(dev: &mut D, zone: Zone) -> Result<Self> {
        let mut s = CatalogStore {
            zone,
            generation: 0,
        };
        // Make the other half invalid, so a stale snapshot of an earlier database on the
        // same device cannot win.
        dev.write(s.half(0).start, &[0u8; 512])?;
        s.write(dev, &Catalog::default())?;
        Ok(s)
    }

    /// Reads the current snapshot.
    pub fn open<D: BlockDevice>(dev: &mut D, zone: Zone) -> Result<(Self, Catalog)> {
        let mut store = CatalogStore {
            zone,
            generation: 0,
        };
        let mut best: Option<(u64, Catalog)> = None;
        let mut first_err = None;
        for g in 0..2 {
            let half = store.half(g);
            match Self::read_half(dev, half) {
                Ok((generation, c)) if best.as_ref().is_none_or(|(b, _)| generation > *b) => {
                    best = Some((generation, c))
                }
                Ok(_) => {}
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        let (generation, catalog) = best
            .ok_or_else(|| first_err.unwrap_or(corrupt(zone.start, "no valid catalog snapshot")))?;
        store.generation = generation;
        Ok((store, catalog))
    }

    fn read_half<D: BlockDevice>(dev: &mut D, half: Zone) -> Result<(u64, Catalog)> {
        let mut h = [0u8; 512];
        dev.read(half.start, &mut h)?;
        format::check(Kind::Catalog, &h, half.start)?;
        let version = u16::from_le_bytes([h[4], h[5]]);
        let generation = u64_at(&h, 16);
        let len = u64_at(&h, 24);
        if len > half.len - SECTOR {
            return Err(corrupt(half.start, "payload longer than its half"));
        }
        let mut p = vec![0u8; len as usize];
        dev.read(half.start + SECTOR, &mut p)?;
        if crc32fast::hash(&p) != u32_at(&h, 32) {
            return Err(corrupt(half.start, "payload checksum mismatch"));
        }
        Ok((
            generation,
            Catalog::decode(&p, half.start + SECTOR, version)?,
        ))
    }

    /// Writes `catalog` as the next generation into the other half: payload, then header.
    /// Not synced; durable (and current after a crash) once the caller syncs.
    pub fn write<D: BlockDevice>(&mut self, dev: &mut D, catalog: &Catalog) -> Result<()> {
        for (at, bytes) in self.next_writes(catalog)? {
            dev.write(at, &bytes)?;
        }
        Ok(())
    }

    /// The writes that store `catalog` as the next snapshot, in the order they must be
    /// issued (body, then the header naming its CRC); the store counts it written. The
    /// caller issues them before it writes the store again.
    pub fn next_writes(&mut self, catalog: &Catalog) -> Result<[(u64, Vec<u8>); 2]> {
        let p = catalog.encode();
        let half = self.half(self.generation + 1);
        if p.len() as u64 > half.len - SECTOR {
            return Err(TableError::Invalid(
                "the catalog does not fit the META_ZONE",
            ));
        }
        let mut h = vec![0u8; 512];
        h[16..24].copy_from_slice(&(self.generation + 1).to_le_bytes());
        h[24..32].copy_from_slice(&(p.len() as u64).to_le_bytes());
        h[32..36].copy_from_slice(&crc32fast::hash(&p).to_le_bytes());
        format::seal(Kind::Catalog, &mut h, 36);
        let mut padded = p;
        padded.resize(padded.len().div_ceil(512) * 512, 0);
        self.generation += 1;
        Ok([(half.start + SECTOR, padded), (half.start, h)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Column, IndexKind};
    use ember_device::MemBlock;

    fn sample() -> Catalog {
        Catalog {
            next_id: 3,
            tables: vec![TableEntry {
                id: 2,
                name: "t".into(),
                schema: Schema {
                    columns: vec![Column {
                        name: "k".into(),
                        decl_type: "INTEGER".into(),
                        not_null: false,
                    }],
                    primary_key: vec![0],
                    index: IndexKind::Hash,
                },
                blocks: vec![BlockRef {
                    class: 3,
                    chunk: 1,
                    index: 7,
                }],
                indexes: vec![IndexDef {
                    name: "by_k".into(),
                    columns: vec![0],
                    kind: IndexKind::Tree,
                    unique: true,
                }],
                index_root: Some(BlockRef {
                    class: 4,
                    chunk: 2,
                    index: 9,
                }),
                index_height: 2,
                index_pages: 3,
                rows: 300,
                next_rowid: 1,
            }],
            marks: vec![
                (
                    BlockRef {
                        class: 4,
                        chunk: 0,
                        index: 1,
                    },
                    false,
                ),
                (
                    BlockRef {
                        class: 4,
                        chunk: 2,
                        index: 9,
                    },
                    true,
                ),
                (
                    BlockRef {
                        class: 4,
                        chunk: 2,
                        index: 10,
                    },
                    true,
                ),
            ],
        }
    }

    #[test]
    fn snapshots_alternate_and_a_damaged_one_falls_back() {
        let zone = Zone {
            start: 4096,
            len: 64 * 1024,
        };
        let mut dev = MemBlock::new(128 * 1024);
        let mut s = CatalogStore::format(&mut dev, zone).unwrap();
        assert_eq!(
            CatalogStore::open(&mut dev, zone).unwrap().1,
            Catalog::default()
        );
        s.write(&mut dev, &sample()).unwrap();
        assert_eq!(CatalogStore::open(&mut dev, zone).unwrap().1, sample());
        // Damage the newest snapshot's payload: the previous one is current again.
        let newest = s.half(s.generation).start + SECTOR;
        dev.write(newest + 3, &[0xEE]).unwrap();
        assert_eq!(
            CatalogStore::open(&mut dev, zone).unwrap().1,
            Catalog::default()
        );
        // Both damaged: a clean error naming the catalog.
        dev.write(s.half(s.generation + 1).start + 20, &[0xEE])
            .unwrap();
        let err = CatalogStore::open(&mut dev, zone).unwrap_err();
        assert!(err.to_string().contains("catalog"), "{err}");
    }

    #[test]
    fn a_blockset_is_stored_as_runs_and_version_2_lists_are_read() {
        let r = |class, chunk, index| BlockRef {
            class,
            chunk,
            index,
        };
        // Runs break at a gap, a chunk or class change, and a step back.
        let blocks = vec![
            r(3, 1, 7),
            r(3, 1, 8),
            r(3, 1, 9),
            r(3, 1, 11),
            r(3, 2, 12),
            r(4, 2, 13),
            r(4, 2, 12),
            r(4, 2, 13),
        ];
        let enc = encode_blocks(&blocks);
        assert_eq!(enc.len(), 5 * 13);
        assert_eq!(decode_blocks(&enc, 3, 0).unwrap(), blocks);
        let mut c = sample();
        c.tables[0].blocks = (0..1000).map(|i| r(5, i / 400, i % 400)).collect();
        let p = c.encode();
        assert!(
            p.len() < 400,
            "1,000 contiguous blocks in {} bytes",
            p.len()
        );
        assert_eq!(Catalog::decode(&p, 0, 3).unwrap(), c);
        // Version 2: nine bytes per block.
        let v2: Vec<u8> = blocks.iter().flat_map(|b| block_bytes(*b)).collect();
        assert_eq!(decode_blocks(&v2, 2, 0).unwrap(), blocks);
        // Malformed runs are errors, not panics or huge allocations.
        let mut bad = enc.clone();
        bad[9..13].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode_blocks(&bad, 3, 0).is_err());
        bad[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_blocks(&bad, 3, 0).is_err());
        assert!(decode_blocks(&enc[1..], 3, 0).is_err());
    }
}
