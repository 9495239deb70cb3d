//! The table engine: tables of typed rows over the space manager, with transactions and the
//! five consistency modes (LUNAR §3.4).
//!
//! A row is stored as a tuple `key length u16 | key | row` in a [`SlottedBlock`] of its
//! table; the primary index maps the order-preserving key encoding to (block, slot). It is a
//! persistent copy-on-write B+tree of index pages ([`pindex`](crate::pindex)) whose root the
//! catalog names, with a RAM overlay of the changes since the last checkpoint: open reads no
//! index page and no data block. Secondary indexes live in RAM and are refilled from the rows
//! when the database opens.
//!
//! Every change a transaction makes is a redo operation in one journal record, committed
//! after the transaction's tuple bytes were written into free space of their blocks:
//!
//! ```text
//! 1 create table   id u64 | name length u16 | name | schema length u32 | schema
//! 2 drop table     id u64
//! 3 add block      table u64 | block (class u8, chunk u32, index u32)
//! 4 remove block   table u64 | block
//! 5 set slot       table u64 | block | slot u16 | offset u16 | length u16 | CRC-32 u32
//! 6 create index   table u64 | definition length u32 | definition
//! 7 drop index     table u64 | name length u16 | name
//! 8 set slot, data set slot, then the tuple's bytes (a small transaction's tuples)
//! 9 free slot      table u64 | block | slot u16 | key length u16 | key of the tuple it held
//! 10 add block     table u64 | block | header length u16 (where its tuples start; code 3,
//!                  from format version 1 records, means 512)
//! 11 spill block   block (reserved: the record also marks it allocated)
//! ```
//!
//! Recovery replays the records after the last checkpoint in order and stops at the first
//! whose tuples fail their checksums: such a record was never acknowledged (a sync would
//! have made its tuples durable with it), and nothing after it was either. Replay also
//! updates the primary indexes' overlays (a set slot adds its tuple's key, a freed slot
//! removes its key if the index still names that slot). Block headers, index pages, the
//! catalog and the allocator's bitmaps reach home at checkpoints, in two halves. The
//! snapshot: new index pages (and disorder mode's buffered records), sync, and — shared
//! copy-on-write, not copied — each changed block's pages, plus the catalog (naming the new
//! index roots and carrying their pages' allocator marks), a copy of the allocator with the
//! checkpoint's freed blocks given back, and the journal header that moves the tail to the
//! snapshot. The writes (module `checkpoint`): the pages, tuples and header in one write,
//! the catalog, sync, the copy's bitmaps, the header, sync — on a thread through the
//! device's [`writer`](BlockDevice::writer) handle while transactions go on, appending
//! records after the snapshot and changing blocks in RAM only. The checkpoint then lands at
//! a later commit, in RAM: freed blocks given back, the allocator's slots taken over, the
//! journal's tail at the snapshot. A transaction that would write rows home, needs the room
//! the checkpoint holds, or drops a table lands it first. A header may land before its
//! tuples: every record up to the snapshot is durable by then, and replay from the previous
//! checkpoint rewrites the tuples records carry and checks those written home before their
//! records. (Mode none has no records: its tuples are synced before the headers; it and
//! disorder mode, which writes rows home at every commit,
//! checkpoint in one piece on the writer's thread.) The blocks the replayed records free stay taken
//! until the checkpoint that ends recovery (unless a later record gave their chunk to
//! another size class), as in normal operation, where a table's freed blocks wait for the
//! next checkpoint. A commit or checkpoint that fails after its first write leaves the
//! database refusing every call with [`TableError::NeedsRecovery`] until it is opened again.
//!
//! A block made since the last checkpoint (*fresh*) is the exception: no durable catalog
//! names it and replay rebuilds it from its add-block operation, never reading it, so its
//! header goes out with its tuples, in the same write, before the record — a new block's
//! header, slot and first tuple are one contiguous write. A crash that tears it leaves a block
//! the allocator still has free (its mark travels in the record, which was not written yet),
//! or a record whose tuples fail their CRCs (replay stops there).
//!
//! **Spilled records.** A transaction that writes a tuple too big to travel in its record
//! (over 2 KiB) into a fresh block reserves, in its record, a *spill block* of that block's
//! size (operation 11 and an allocator mark; the record's header names it, see
//! [`journal`](crate::journal)). The next transaction that needs such a block takes the
//! spill block, keeps 320 bytes after its header in sector 0, and — if its record fits
//! there — writes the record into them: header, record and tuple are one write, so a
//! synchronous 4 KiB row costs 9 sectors and one sync instead of 10 sectors in two writes.
//! Recovery finds the record through the record before it; it fails (and the log ends
//! there) unless header, record and tuple all landed. The bytes stay in sector 0, which only
//! ever carries bytes that do not change, until the next checkpoint, which forgets the spill
//! block; replay puts them back into the block's image so the checkpoint that ends recovery
//! rewrites them as they were. A spill block no replayed transaction took is freed then.
//!
//! | mode | journal | commit makes durable | after a crash |
//! |---|---|---|---|
//! | none | no | nothing (checkpoint/close) | only a cleanly closed database is promised |
//! | disorder | buffered, written in batches | nothing | metadata consistent, reopen works |
//! | metadata | one record per commit | nothing (next sync) | no garbage rows, whole transactions |
//! | data | one record per commit | nothing (next sync) | no partial operation |
//! | full | one record and one sync per commit | the transaction | every commit present |
//!
//! Because live bytes are not overwritten before a record that carries the new ones is
//! durable (see [`slotted`](crate::slotted) and `Database::may_overwrite`), metadata mode
//! already keeps whole transactions; data mode adds nothing to it here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::{Bound, Range};

use ember_device::BlockDevice;

use crate::allocator::BlockRef;
use crate::buffer::{Buffer, Checked, Hint, Lookahead};
use crate::catalog::{Catalog, CatalogStore, TableEntry};
use crate::checkpoint::{Flight, HomeWrites, Job};
use crate::checksum;
use crate::error::{Result, TableError};
use crate::format::{u32_at, u64_at};
use crate::ikey::Key;
use crate::pindex::{CHUNK, Chunk, Cursor, Loc, MAX_KEY, PIndex, PageCache, Pages};
use crate::row::{
    AsValueRef, RowValues, Value, ValueRef, encode_key, encode_key_value, encode_row, row_values,
};
use crate::schema::{IndexDef, IndexKind, Schema};
#[cfg(feature = "secondary-index")]
use crate::secondary::Secondary;
use crate::slotted::{HEADER_SECTOR, Slot, SlottedBlock};
use crate::space::{Mark, SpaceManager, decode_record};
use crate::superblock::FormatOptions;

/// The consistency mode (LUNAR Table 2), chosen when the database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No journal.
    None,
    /// Metadata journal, written in batches, no ordering.
    Disorder,
    /// Metadata journal after the data (the default).
    #[default]
    Metadata,
    /// Metadata and data journal.
    Data,
    /// Like data, and every commit is synced.
    Full,
}

/// How to create or open a database.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Layout of a new device.
    pub format: FormatOptions,
    /// The consistency mode.
    pub mode: Mode,
    /// Size of a table's data blocks (larger rows get a block of their own size class).
    pub block_size: u32,
    /// With the `buffer` feature: bytes of clean blocks kept in RAM (least recently used out
    /// first). Without it clean blocks are not kept. A point read brings its block in while
    /// the budget has room, and once it is full on the block's second point read in a while
    /// (see `Buffer::admit`); scans and writes always do.
    pub buffer_bytes: usize,
    /// With the `query-cache` feature: bytes of point-query results kept (0: off).
    pub query_cache_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            format: FormatOptions::default(),
            mode: Mode::default(),
            block_size: 4096,
            buffer_bytes: 1 << 20,
            query_cache_bytes: 256 * 1024,
        }
    }
}

#[derive(Debug)]
struct Table {
    id: u64,
    name: String,
    schema: Schema,
    blocks: Vec<BlockRef>,
    index: PIndex,
    next_rowid: i64,
    /// An upper bound on the primary keys in the index, learned when first needed (`None`
    /// until then; `Some(None)`: no key was ever there). A key above it cannot be in the
    /// index, so inserting it needs no duplicate probe — the common case of a new rowid.
    /// Every added key raises it, and so does every index change a rollback undoes (a bound
    /// learned inside a transaction after a delete would otherwise stay below the key the
    /// rollback brings back); removals leave it high, which keeps it a bound.
    key_max: Option<Option<Key>>,
    /// Secondary index definitions (kept, and their contents rebuilt on open, even by a build
    /// without the module).
    defs: Vec<IndexDef>,
    #[cfg(feature = "secondary-index")]
    secondary: Vec<Secondary>,
}

impl Table {
    /// Raises the key bound (if learned) to at least `key`.
    fn raise_key_max(&mut self, key: &[u8]) {
        if let Some(max) = &mut self.key_max
            && max.as_ref().is_none_or(|m| key > m.as_slice())
        {
            *max = Some(Key::new(key));
        }
    }
}

/// How to take back one change of an open transaction.
#[derive(Debug)]
enum Undo {
    Create(u64),
    Drop(Box<Table>),
    AddBlock(u64, BlockRef),
    /// The spill block made a table's block (it goes back to being the spill block).
    TookSpill(u64, BlockRef),
    RemoveBlock(u64, BlockRef, usize),
    Slot(BlockRef, usize, Slot),
    /// A tuple overwritten in place: its entry in [`Txn::overwritten`] holds the bytes
    /// before.
    Overwrite(usize),
    /// A primary-index change: table, key, the overlay's entry before, the row count change.
    Index(u64, Vec<u8>, Option<Option<Loc>>, i64),
    Rowid(u64, i64),
    Reserved(Vec<BlockRef>),
    /// A secondary-index entry added (`true`) or removed: table, index position, key, pk.
    #[cfg(feature = "secondary-index")]
    Sec(u64, usize, Key, Key, bool),
    /// An index created (table, name) or dropped (table, definition, position).
    IndexCreated(u64, String),
    IndexDropped(u64, IndexDef, usize),
}

#[derive(Debug, Default)]
struct Txn {
    ops: Vec<u8>,
    /// The new tuples while the transaction's tuples are small enough to travel in its
    /// journal record: the position of each one's slot operation in `ops` and the end of its
    /// bytes in `tuple_data`, where they follow one another.
    tuples: Vec<(usize, usize)>,
    tuple_data: Vec<u8>,
    /// Too many tuple bytes for the record: they are written in place before it.
    in_place: bool,
    /// Tuples written over live ones where they lay (see [`Database::place`]): the block,
    /// the offset, and the end of the bytes they replaced in `overwritten_data`, where they
    /// follow one another. Their sectors go home with those bytes put back until the
    /// record is durable (see [`Database::write_tuples`]).
    overwritten: Vec<(BlockRef, usize, usize)>,
    overwritten_data: Vec<u8>,
    /// The positions in `ops` of the overwrites' slot operations: their tuples stay in the
    /// record when the others go home (see [`Database::log_slot`]).
    overwrite_ops: Vec<usize>,
    /// The blocks a tuple went into other than by an overwrite (see
    /// [`Database::may_overwrite`]).
    placed: Vec<BlockRef>,
    marks: Vec<Mark>,
    frees: Vec<BlockRef>,
    /// The blocks a new tuple went into (replay reads those tuples back); a block may
    /// appear more than once.
    filled: Vec<BlockRef>,
    undo: Vec<Undo>,
    /// The blocks whose slots changed, in the order of their first change after the one
    /// before (so a block may appear more than once; see [`Txn::touched`]).
    blocks: Vec<BlockRef>,
    /// The journal record of a transaction that carries its tuples, built at commit.
    record: Vec<u8>,
    /// The spill block this transaction made its fresh block of: its record goes there.
    spill_block: Option<BlockRef>,
    /// The last fresh block made for a tuple too big to travel in a record, and the size
    /// it was asked for: the next spill block is reserved like it.
    big: Option<(usize, BlockRef)>,
}

/// A finished transaction's buffers are kept for the next one unless one of them grew past
/// this many bytes (a bulk load's would hold its memory until the next bulk load).
const TXN_KEEP_BYTES: usize = 64 * 1024;

impl Txn {
    /// Notes a change to a slot of block `b`. (An update that moves its row changes the
    /// table's last block and the row's old one in turn: the last two cover that.)
    fn touch(&mut self, b: BlockRef) {
        if !self.blocks.iter().rev().take(2).any(|x| *x == b) {
            self.blocks.push(b);
        }
    }

    /// The blocks whose slots changed, each once, in block order.
    fn touched(&mut self) -> &[BlockRef] {
        self.blocks.sort_unstable();
        self.blocks.dedup();
        &self.blocks
    }

    /// The journal record's operations: with the tuples it carries, once built at commit.
    fn record_ops(&self) -> &[u8] {
        if self.record.is_empty() {
            &self.ops
        } else {
            &self.record
        }
    }

    /// This transaction emptied for reuse, or `None` if its buffers are too big to keep.
    fn recycle(mut self: Box<Self>) -> Option<Box<Txn>> {
        let bytes = self.ops.capacity()
            + self.tuple_data.capacity()
            + self.record.capacity()
            + self.tuples.capacity() * size_of::<(usize, usize)>()
            + self.overwritten.capacity() * size_of::<(BlockRef, usize, usize)>()
            + self.overwritten_data.capacity()
            + self.overwrite_ops.capacity() * size_of::<usize>()
            + self.placed.capacity() * size_of::<BlockRef>()
            + self.marks.capacity() * size_of::<Mark>()
            + self.frees.capacity() * size_of::<BlockRef>()
            + self.filled.capacity() * size_of::<BlockRef>()
            + self.undo.capacity() * size_of::<Undo>()
            + self.blocks.capacity() * size_of::<BlockRef>();
        if bytes > TXN_KEEP_BYTES {
            return None;
        }
        self.ops.clear();
        self.tuples.clear();
        self.tuple_data.clear();
        self.in_place = false;
        self.overwritten.clear();
        self.overwritten_data.clear();
        self.overwrite_ops.clear();
        self.placed.clear();
        self.marks.clear();
        self.frees.clear();
        self.filled.clear();
        self.undo.clear();
        self.blocks.clear();
        self.record.clear();
        self.spill_block = None;
        self.big = None;
        Some(self)
    }
}

const OP_CREATE: u8 = 1;
const OP_DROP: u8 = 2;
const OP_ADD_BLOCK: u8 = 3;
const OP_REMOVE_BLOCK: u8 = 4;
const OP_SLOT: u8 = 5;
const OP_CREATE_INDEX: u8 = 6;
const OP_DROP_INDEX: u8 = 7;
/// [`OP_SLOT`] followed by the tuple's bytes (`len` of them).
const OP_SLOT_DATA: u8 = 8;
/// A slot freed: table, block, slot, and the key of the tuple it held (key length u16, key),
/// for the primary index.
const OP_SLOT_FREE: u8 = 9;
/// [`OP_ADD_BLOCK`] with the block's header length.
const OP_ADD_BLOCK_AT: u8 = 10;
/// A block reserved as the spill block (the record also marks it allocated).
const OP_SPILL: u8 = 11;
/// Bytes a fresh block for a big tuple keeps after its header, in sector 0, for the record
/// of the transaction that makes it from the spill block.
const SPILL_ROOM: usize = 320;

/// Which end of a range to read from and how many rows at most (for `ORDER BY … LIMIT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Order {
    /// In key order even on a hash index (a full range on a hash index otherwise comes in
    /// storage order); set by [`Order::asc`] and [`Order::desc`].
    pub keyed: bool,
    /// From the high end.
    pub desc: bool,
    /// At most this many rows.
    pub limit: Option<usize>,
}

impl Order {
    /// Ascending key order, at most `limit` rows.
    pub fn asc(limit: Option<usize>) -> Self {
        Order {
            keyed: true,
            desc: false,
            limit,
        }
    }

    /// Descending key order, at most `limit` rows.
    pub fn desc(limit: Option<usize>) -> Self {
        Order {
            keyed: true,
            desc: true,
            limit,
        }
    }

    #[cfg(feature = "secondary-index")]
    fn apply<T>(&self, hits: &mut Vec<T>) {
        if self.desc {
            hits.reverse();
        }
        if let Some(n) = self.limit {
            hits.truncate(n);
        }
    }
}

/// A transaction whose new tuples add up to at most this many bytes carries them in its
/// journal record, so its commit is one write (and in full mode one sync); the blocks get
/// them at the next checkpoint. Bigger transactions write their tuples in place first,
/// which costs less device bandwidth than writing them twice.
const JOURNALED_TUPLES_MAX: usize = 2048;

/// The page a file system's cache keeps: a checkpoint writes blocks in whole ones.
const PAGE: usize = 4096;

/// Writes `bytes` at `at` (nothing if empty), allocating ahead (see `BlockDevice::prepare`).
fn write_run<D: BlockDevice>(dev: &mut D, at: u64, bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    dev.prepare(at, bytes.len() as u64);
    Ok(dev.write(at, bytes)?)
}

/// Writes into `out` the transaction's `ops` with the operations at the positions in
/// `tuples` turned into [`OP_SLOT_DATA`] and followed by their tuples (`tuples` holds each
/// one's position and the end of its bytes in `data`).
fn with_tuples(ops: &[u8], tuples: &[(usize, usize)], data: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(ops.len() + data.len());
    let mut from = 0;
    let mut start = 0;
    for &(at, end) in tuples {
        out.extend_from_slice(&ops[from..at]);
        out.push(OP_SLOT_DATA);
        out.extend_from_slice(&ops[at + 1..at + SLOT_OP_BYTES]);
        out.extend_from_slice(&data[start..end]);
        from = at + SLOT_OP_BYTES;
        start = end;
    }
    out.extend_from_slice(&ops[from..]);
}

/// Overwrite `i` of a transaction (see [`Txn::overwritten`]): its block, offset and the
/// bytes it replaced.
fn overwritten_at<'d>(
    list: &[(BlockRef, usize, usize)],
    data: &'d [u8],
    i: usize,
) -> Option<(BlockRef, usize, &'d [u8])> {
    let &(b, at, end) = list.get(i)?;
    let start = i
        .checked_sub(1)
        .map_or(Some(0), |p| list.get(p).map(|x| x.2))?;
    Some((b, at, data.get(start..end)?))
}

/// Bytes of an encoded [`OP_SLOT`]: code, table, block, slot, offset, length, CRC.
const SLOT_OP_BYTES: usize = 1 + 8 + 9 + 2 + 2 + 2 + 4;

fn put_block(out: &mut Vec<u8>, b: BlockRef) {
    out.push(b.class);
    out.extend_from_slice(&b.chunk.to_le_bytes());
    out.extend_from_slice(&b.index.to_le_bytes());
}

/// A cursor over a record's redo operations.
struct Ops<'a> {
    p: &'a [u8],
    at: usize,
    lsn: u64,
}

impl<'a> Ops<'a> {
    fn bad(&self) -> TableError {
        TableError::Corrupt {
            structure: "journal record (table operations)",
            offset: self.lsn,
            reason: "malformed operation",
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self
            .p
            .get(self.at..self.at.checked_add(n).ok_or_else(|| self.bad())?)
            .ok_or_else(|| self.bad())?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32_at(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64_at(self.take(8)?, 0))
    }
    fn block(&mut self) -> Result<BlockRef> {
        let b = self.take(9)?;
        Ok(BlockRef {
            class: b[0],
            chunk: u32_at(b, 1),
            index: u32_at(b, 5),
        })
    }
}

/// A redo operation, decoded.
enum Op {
    Create(u64, String, Schema),
    Drop(u64),
    /// A block added, with its header length.
    AddBlock(u64, BlockRef, usize),
    RemoveBlock(u64, BlockRef),
    /// A slot change; with the tuple's bytes when the record carries them.
    Slot(u64, BlockRef, usize, Slot, Option<Vec<u8>>),
    /// A slot freed, with the key its tuple had.
    Free(u64, BlockRef, usize, Vec<u8>),
    CreateIndex(u64, Vec<u8>),
    DropIndex(u64, String),
    Spill(BlockRef),
}

fn decode_ops(p: &[u8], lsn: u64) -> Result<Vec<Op>> {
    let mut c = Ops { p, at: 0, lsn };
    let mut out = Vec::new();
    while c.at < p.len() {
        out.push(match c.u8()? {
            OP_CREATE => {
                let id = c.u64()?;
                let n = usize::from(c.u16()?);
                let name = String::from_utf8(c.take(n)?.to_vec()).map_err(|_| c.bad())?;
                let n = c.u32()? as usize;
                Op::Create(id, name, Schema::decode(c.take(n)?)?)
            }
            OP_DROP => Op::Drop(c.u64()?),
            OP_ADD_BLOCK => Op::AddBlock(c.u64()?, c.block()?, HEADER_SECTOR),
            OP_ADD_BLOCK_AT => Op::AddBlock(c.u64()?, c.block()?, usize::from(c.u16()?)),
            OP_REMOVE_BLOCK => Op::RemoveBlock(c.u64()?, c.block()?),
            OP_SPILL => Op::Spill(c.block()?),
            code @ (OP_SLOT | OP_SLOT_DATA) => {
                let (id, b, slot) = (c.u64()?, c.block()?, usize::from(c.u16()?));
                let s = Slot {
                    offset: c.u16()?,
                    len: c.u16()?,
                    crc: c.u32()?,
                };
                if s.offset == 0 {
                    // A freed slot is OP_SLOT_FREE.
                    return Err(c.bad());
                }
                let tuple = if code == OP_SLOT_DATA {
                    let t = c.take(usize::from(s.len))?;
                    if !checksum::tuple_matches(t, s.crc) {
                        return Err(c.bad());
                    }
                    Some(t.to_vec())
                } else {
                    None
                };
                Op::Slot(id, b, slot, s, tuple)
            }
            OP_SLOT_FREE => {
                let (id, b, slot) = (c.u64()?, c.block()?, usize::from(c.u16()?));
                let n = usize::from(c.u16()?);
                Op::Free(id, b, slot, c.take(n)?.to_vec())
            }
            OP_CREATE_INDEX => {
                let id = c.u64()?;
                let n = c.u32()? as usize;
                Op::CreateIndex(id, c.take(n)?.to_vec())
            }
            OP_DROP_INDEX => {
                let id = c.u64()?;
                let n = usize::from(c.u16()?);
                let name = String::from_utf8(c.take(n)?.to_vec()).map_err(|_| c.bad())?;
                Op::DropIndex(id, name)
            }
            _ => return Err(c.bad()),
        });
    }
    Ok(out)
}

/// An EmberDB database on one device, seen through its table engine.
#[derive(Debug)]
pub struct Database<D: BlockDevice> {
    /// A checkpoint whose writes home may still be going on (see
    /// [`start_checkpoint`](Database::start_checkpoint)). Declared first: dropped (its
    /// thread joined) before the device.
    flight: Option<Flight>,
    sm: SpaceManager<D>,
    opts: Options,
    store: CatalogStore,
    next_id: u64,
    tables: BTreeMap<u64, Table>,
    names: HashMap<String, u64, foldhash::fast::RandomState>,
    cache: Buffer,
    /// Decoded primary-index pages (see [`pindex`](crate::pindex)).
    ipages: PageCache,
    txn: Option<Box<Txn>>,
    /// The last finished transaction's buffers, emptied, for the next one.
    spare: Option<Box<Txn>>,
    /// A freed tuple's key on its way to the journal record (kept for the next one).
    freed_key: Vec<u8>,
    /// Bytes of the header sector and tuple a point read took from the device without the
    /// rest of the block (see [`Database::visit_row_read`]); kept for the next one.
    direct: Vec<u8>,
    /// A point read's encoded key (primary, or a secondary index's), kept for the next one.
    probe_key: Vec<u8>,
    /// The primary key a point read through a secondary index found, kept for the next one.
    #[cfg(feature = "secondary-index")]
    probe_pk: Vec<u8>,
    /// The primary-index entry last found (table, key, location): an update or delete of a
    /// row the caller has just read finds it here instead of searching the index again.
    /// Forgotten at every change to a primary index (see [`Database::index_put`]), at
    /// rollback, checkpoint and when a table is dropped.
    found: Option<(u64, Key, Loc)>,
    explicit: bool,
    /// Blocks freed by committed transactions, given back when the next checkpoint lands.
    deferred: Vec<BlockRef>,
    /// Extents other engines gave back since the last checkpoint's snapshot: free at once,
    /// but not for the next checkpoint's index pages (see
    /// [`start_checkpoint`](Database::start_checkpoint)).
    extents_freed: Vec<BlockRef>,
    /// The spill block: a block of a size fresh blocks for big tuples get, reserved and
    /// marked allocated by the last record, which names it; the next transaction that makes
    /// such a block takes it and writes its own record into it (see [`Database::finish`]).
    spill: Option<BlockRef>,
    /// Disorder mode: records not yet written.
    buffered: Vec<(Vec<Mark>, Vec<u8>)>,
    /// Blocks a transaction wrote tuples home to since the last checkpoint's snapshot.
    /// Replay from the last checkpoint checks those tuples against the device, so none of
    /// this block's tuples is overwritten in place until the next snapshot (see
    /// [`place`](Database::place)).
    homed: HashSet<BlockRef, foldhash::fast::RandomState>,
    /// Blocks holding a tuple a committed transaction overwrote in place since the last
    /// sync: its record may not be durable yet, so a transaction that writes one of these
    /// blocks home syncs first (see [`write_touched`](Database::write_touched)).
    pinned: HashSet<BlockRef, foldhash::fast::RandomState>,
    /// Checkpoints whose writes home ran on a thread of their own.
    background_checkpoints: u64,
    /// A commit or checkpoint failed after it began to write: RAM may be ahead of the
    /// device, and every call but dropping the database is refused with
    /// [`TableError::NeedsRecovery`] (opening it again recovers the durable state).
    failed: bool,
    /// What one [`range_visit`](Database::range_visit) leaves the next (see [`ScanScratch`]).
    scan: ScanScratch,
    #[cfg(feature = "query-cache")]
    qcache: crate::query_cache::QueryCache,
}

/// What a key-order scan keeps from one [`Database::range_visit`] call to the next, for a
/// call that goes on where the one before stopped — as a SQL full scan reads, a chunk of rows
/// per call: the index entries read past the last call's limit, the index cursor after them,
/// and the read-ahead window the scan had grown to. Such a call visits the entries held
/// first, reads the index a full [`CHUNK`] at a time, and reads blocks ahead across the
/// whole chunk, not just the rows it returns. Any change to a primary index forgets it all
/// ([`Database::forget_positions`]): the held entries could be stale.
#[derive(Debug, Default)]
struct ScanScratch {
    chunk: Chunk,
    /// Entries of `chunk` visited so far.
    pos: usize,
    #[cfg(feature = "prefetch")]
    ahead: ReadAhead,
    /// The blocks of `chunk` the scan reaches next, hinted into the CPU's cache.
    look: Lookahead,
    resume: Option<Resume>,
}

/// Where a scan that stopped at its limit (going up) stopped.
#[derive(Debug)]
struct Resume {
    table: u64,
    /// The last key visited.
    last: Vec<u8>,
    /// The range's upper bound.
    hi: Bound<Vec<u8>>,
    /// The index cursor, past the entries of the chunk.
    cur: Cursor,
}

fn lower(name: &str) -> String {
    name.to_ascii_lowercase()
}

impl<D: BlockDevice> Database<D> {
    /// Formats `dev` as a new, empty database.
    pub fn create(dev: D, opts: Options) -> Result<Self> {
        let mut sm = SpaceManager::format(dev, opts.format)?;
        sm.set_journal_bulk_synced(bulk_synced(opts.mode));
        let meta = sm.superblock().meta;
        let store = CatalogStore::format(sm.device(), meta)?;
        sm.device().sync()?;
        Ok(Database {
            sm,
            opts,
            store,
            next_id: 1,
            tables: BTreeMap::new(),
            names: HashMap::default(),
            cache: Buffer::default(),
            ipages: PageCache::default(),
            txn: None,
            spare: None,
            freed_key: Vec::new(),
            direct: Vec::new(),
            found: None,
            explicit: false,
            deferred: Vec::new(),
            extents_freed: Vec::new(),
            spill: None,
            buffered: Vec::new(),
            homed: HashSet::default(),
            pinned: HashSet::default(),
            flight: None,
            background_checkpoints: 0,
            failed: false,
            scan: ScanScratch::default(),
            probe_key: Vec::new(),
            #[cfg(feature = "secondary-index")]
            probe_pk: Vec::new(),
            #[cfg(feature = "query-cache")]
            qcache: Default::default(),
        })
    }

    /// Opens a database: reads the catalog, applies its index page marks, replays the
    /// journal (into the primary indexes' overlays). Reads no data block and no index page
    /// unless the journal has records to replay.
    pub fn open(dev: D, opts: Options) -> Result<Self> {
        let (mut sm, records) = SpaceManager::open_raw(dev)?;
        sm.set_journal_bulk_synced(bulk_synced(opts.mode));
        let meta = sm.superblock().meta;
        let (store, catalog) = CatalogStore::open(sm.device(), meta)?;
        let mut db = Database {
            sm,
            opts,
            store,
            next_id: catalog.next_id,
            tables: BTreeMap::new(),
            names: HashMap::default(),
            cache: Buffer::default(),
            ipages: PageCache::default(),
            txn: None,
            spare: None,
            freed_key: Vec::new(),
            direct: Vec::new(),
            found: None,
            explicit: false,
            deferred: Vec::new(),
            extents_freed: Vec::new(),
            spill: None,
            buffered: Vec::new(),
            homed: HashSet::default(),
            pinned: HashSet::default(),
            flight: None,
            background_checkpoints: 0,
            failed: false,
            scan: ScanScratch::default(),
            probe_key: Vec::new(),
            #[cfg(feature = "secondary-index")]
            probe_pk: Vec::new(),
            #[cfg(feature = "query-cache")]
            qcache: Default::default(),
        };
        // The index pages the catalog's checkpoint wrote and freed (it may have stopped
        // before the allocator's bitmaps); before the journal, whose records are later.
        db.sm.apply_marks(&catalog.marks)?;
        for t in catalog.tables {
            let index = PIndex {
                root: t.index_root,
                height: t.index_height,
                pages: t.index_pages,
                count: t.rows,
                ..PIndex::new(t.schema.index)
            };
            db.add_table(t.id, t.name, t.schema, t.blocks, t.indexes, index);
            if let Some(x) = db.tables.get_mut(&t.id) {
                x.next_rowid = t.next_rowid;
            }
        }
        let mut replayed = 0;
        let mut freed = Vec::new();
        for r in &records {
            let (marks, rest) = decode_record(r)?;
            let ops = decode_ops(rest, r.lsn)?;
            if !db.tuples_durable(&ops)? {
                break;
            }
            db.sm.replay(r)?;
            freed.extend(marks.iter().filter(|m| !m.1).map(|m| m.0));
            let added: Vec<BlockRef> = ops
                .iter()
                .filter_map(|op| match op {
                    Op::AddBlock(_, b, _) => Some(*b),
                    _ => None,
                })
                .collect();
            for op in ops {
                db.apply(op)?;
            }
            if let Some((at, bytes)) = &r.spilled {
                db.keep_spilled(&added, *at, bytes)?;
            }
            replayed += 1;
        }
        // A spill block no replayed transaction took is free again after recovery's
        // checkpoint (the last record names it: until the journal is emptied, recovery reads
        // it for a spilled record).
        if let Some(b) = db.spill.take() {
            db.deferred.push(b);
        }
        // Blocks the replayed records give back stay taken until the checkpoint that ends
        // recovery has emptied the journal, as in normal operation: were a new index page put
        // in one, a second cut before that would make the records replay over it. Not one
        // whose chunk serves another class now (another engine's extent, freed at once, and
        // its chunk taken by a later record): taking it back would free the block there.
        for b in freed {
            if db.sm.allocator().is_free_to_take(b) {
                db.sm.apply_marks(&[(b, true)])?;
                db.deferred.push(b);
            }
        }
        #[cfg(feature = "secondary-index")]
        for id in db.tables.keys().copied().collect::<Vec<_>>() {
            if !db.tables[&id].defs.is_empty() {
                db.fill_secondary(id)?;
            }
        }
        if replayed > 0 || records.len() > replayed || db.sm.allocator().is_dirty() {
            db.checkpoint()?;
        }
        Ok(db)
    }

    fn add_table(
        &mut self,
        id: u64,
        name: String,
        schema: Schema,
        blocks: Vec<BlockRef>,
        defs: Vec<IndexDef>,
        index: PIndex,
    ) {
        self.next_id = self.next_id.max(id + 1);
        self.names.insert(lower(&name), id);
        self.tables.insert(
            id,
            Table {
                id,
                name,
                schema,
                blocks,
                index,
                next_rowid: 1,
                key_max: None,
                #[cfg(feature = "secondary-index")]
                secondary: defs.iter().cloned().map(Secondary::new).collect(),
                defs,
            },
        );
    }

    /// Puts a spilled record's bytes (at device offset `at`) back into the image of the
    /// block it lies in — one the record made, among `added` — so that the sector 0 a
    /// checkpoint writes keeps them until the journal no longer needs them. A block no
    /// longer in RAM needs nothing: the same transaction gave it back (its bytes stay until
    /// the checkpoint), or it was evicted clean and is read back with them.
    fn keep_spilled(&mut self, added: &[BlockRef], at: u64, bytes: &[u8]) -> Result<()> {
        for b in added {
            let base = self.sm.allocator().extent(*b).0;
            if !(base..base + HEADER_SECTOR as u64).contains(&at) {
                continue;
            }
            return match self.cache.get_mut(b) {
                Some(block) if base + block.start() as u64 == at => {
                    block.load_tuple(block.start(), bytes)
                }
                Some(_) => break,
                None => Ok(()),
            };
        }
        Err(TableError::Corrupt {
            structure: "journal record",
            offset: at,
            reason: "a spilled record outside the block its transaction made",
        })
    }

    /// Whether every tuple a record's operations make live checks against its CRC on the
    /// device.
    fn tuples_durable(&mut self, ops: &[Op]) -> Result<bool> {
        for op in ops {
            if let Op::Slot(_, b, _, s, carried) = op {
                if s.offset == 0 {
                    continue;
                }
                if let Some(t) = carried {
                    // The record carries the tuple; a long row's overflow blocks were
                    // written before it.
                    let at = self.sm.allocator().extent(*b).0;
                    if let Ok((_, body)) = split_tuple(t, at) {
                        if parse_overflow(body, at).is_ok_and(|o| o.is_some())
                            && self.row_bytes(body, at).is_err()
                        {
                            return Ok(false);
                        }
                    }
                    continue;
                }
                let (at, len) = self.sm.allocator().extent(*b);
                if u64::from(s.offset) + u64::from(s.len) > len {
                    return Ok(false);
                }
                let mut t = vec![0u8; usize::from(s.len)];
                self.sm.device().read(at + u64::from(s.offset), &mut t)?;
                if !checksum::tuple_matches(&t, s.crc) {
                    return Ok(false);
                }
                // A long row's overflow blocks were written before the record too.
                if let Ok((_, body)) = split_tuple(&t, at) {
                    if parse_overflow(body, at).is_ok_and(|o| o.is_some())
                        && self.row_bytes(body, at).is_err()
                    {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    /// Applies a replayed operation to the RAM state.
    fn apply(&mut self, op: Op) -> Result<()> {
        match op {
            Op::Create(id, name, schema) => {
                // Replayed over a catalog written by an interrupted checkpoint, the table may
                // exist: its index then holds every change the records replay (again).
                let mut index = PIndex::new(schema.index);
                if let Some(old) = self.tables.remove(&id) {
                    self.names.remove(&lower(&old.name));
                    index = old.index;
                }
                self.add_table(id, name, schema, Vec::new(), Vec::new(), index);
            }
            Op::Drop(id) => {
                if let Some(t) = self.tables.remove(&id) {
                    self.names.remove(&lower(&t.name));
                    for b in t.blocks {
                        self.cache.remove(&b);
                    }
                }
            }
            Op::Spill(b) => self.spill = Some(b),
            Op::AddBlock(id, b, start) => {
                if self.spill == Some(b) {
                    self.spill = None;
                }
                if !self.tables.contains_key(&id) {
                    return Ok(());
                }
                let size = self.sm.allocator().extent(b).1 as usize;
                self.cache
                    .insert(b, SlottedBlock::with_start(size, id, start)?);
                if let Some(t) = self.tables.get_mut(&id) {
                    if !t.blocks.contains(&b) {
                        t.blocks.push(b);
                    }
                }
            }
            Op::RemoveBlock(id, b) => {
                self.cache.remove(&b);
                if let Some(t) = self.tables.get_mut(&id) {
                    t.blocks.retain(|x| *x != b);
                }
            }
            Op::CreateIndex(id, def) => {
                if let Some(t) = self.tables.get_mut(&id) {
                    let def = IndexDef::decode(&def, &t.schema)?;
                    t.defs.retain(|d| !d.name.eq_ignore_ascii_case(&def.name));
                    t.defs.push(def);
                }
            }
            Op::DropIndex(id, name) => {
                if let Some(t) = self.tables.get_mut(&id) {
                    t.defs.retain(|d| !d.name.eq_ignore_ascii_case(&name));
                }
            }
            Op::Slot(id, b, slot, s, carried) => {
                // Replayed over a catalog written by an interrupted checkpoint, a table may
                // already be gone: a later record drops it, so its changes do not matter.
                if !self.tables.contains_key(&id) {
                    return Ok(());
                }
                let (at, _) = self.sm.allocator().extent(b);
                let home = carried.is_none();
                let t = match carried {
                    Some(t) => t,
                    None => {
                        let mut t = vec![0u8; usize::from(s.len)];
                        if s.offset != 0 {
                            self.sm.device().read(at + u64::from(s.offset), &mut t)?;
                        }
                        t
                    }
                };
                let block = self.block_mut(b)?;
                if s.offset != 0 {
                    if home {
                        block.load_tuple(usize::from(s.offset), &t)?;
                    } else {
                        // Only the record has it: the next checkpoint must write it home.
                        block.restore_tuple(usize::from(s.offset), &t)?;
                    }
                    block.reserve_to(usize::from(s.offset) + usize::from(s.len));
                }
                block.set_slot(slot, s)?;
                self.cache.mark_dirty(b);
                let key = split_tuple(&t, at)?.0.to_vec();
                if let Some(tb) = self.tables.get_mut(&id) {
                    if tb.schema.primary_key.is_empty() {
                        if let Ok(v) = crate::row::decode_key(&key, 1) {
                            if let [Value::Integer(r)] = v[..] {
                                tb.next_rowid = tb.next_rowid.max(r.saturating_add(1));
                            }
                        }
                    }
                }
                let loc = Loc {
                    block: b,
                    slot: slot as u16,
                };
                self.index_put(id, &key, Some(loc), None)?;
            }
            Op::Free(id, b, slot, key) => {
                if !self.tables.contains_key(&id) {
                    return Ok(());
                }
                let free = Slot {
                    offset: 0,
                    len: 0,
                    crc: 0,
                };
                self.block_mut(b)?.set_slot(slot, free)?;
                self.cache.mark_dirty(b);
                // The key leaves the index only if it still names this slot (an update that
                // moved the row set its new place first).
                let here = Loc {
                    block: b,
                    slot: slot as u16,
                };
                if self.index_get(id, &key)? == Some(here) {
                    self.index_put(id, &key, None, None)?;
                }
            }
        }
        Ok(())
    }

    fn block_mut(&mut self, b: BlockRef) -> Result<&mut SlottedBlock> {
        self.load_block(b)?;
        self.cache
            .get_mut(&b)
            .ok_or(TableError::Invalid("block cache"))
    }

    /// A block to read, with its slots whose tuples were checked (see [`Checked`]).
    fn block_checked(&mut self, b: BlockRef) -> Result<(&SlottedBlock, &mut Checked)> {
        self.load_block(b)?;
        self.cache
            .get_checked(&b)
            .ok_or(TableError::Invalid("block cache"))
    }

    /// Reads a block into RAM unless it is there.
    fn load_block(&mut self, b: BlockRef) -> Result<()> {
        if !self.cache.contains(&b) {
            let (at, len) = self.sm.allocator().extent(b);
            let mut buf = self.cache.take_spare(len as usize);
            self.sm.device().read(at, &mut buf)?;
            let block = SlottedBlock::from_bytes(buf, at)?;
            self.cache.insert(b, block);
        }
        Ok(())
    }

    /// Reads blocks that lie one after another on the device with one read (the
    /// prefetcher's read-ahead), or, on a device that reads from memory, each into its own
    /// buffer (no I/O to save, and a copy fewer).
    #[cfg(feature = "prefetch")]
    fn load_run(&mut self, run: &[BlockRef], buf: &mut Vec<u8>) -> Result<()> {
        let Some(first) = run.first() else {
            return Ok(());
        };
        let (start, size) = self.sm.allocator().extent(*first);
        if self.sm.device().reads_from_memory() {
            // Each block straight into its own buffer: one copy instead of two, and none for
            // a block already in RAM.
            for (k, b) in run.iter().enumerate() {
                if self.cache.contains(b) {
                    continue;
                }
                let at = start + k as u64 * size;
                let mut part = self.cache.take_spare(size as usize);
                self.sm.device().read(at, &mut part)?;
                let block = SlottedBlock::from_bytes(part, at)?;
                self.cache.insert(*b, block);
            }
            return Ok(());
        }
        let total = size as usize * run.len();
        // A buffer kept from run to run: up to `READ_AHEAD_BYTES`, which a fresh one would get
        // from (and give back to) the kernel each time.
        buf.resize(total, 0);
        self.sm.device().read(start, buf)?;
        for (k, b) in run.iter().enumerate() {
            if self.cache.contains(b) {
                continue;
            }
            let mut part = self.cache.take_spare(size as usize);
            part.copy_from_slice(&buf[k * size as usize..(k + 1) * size as usize]);
            let block = SlottedBlock::from_bytes(part, start + k as u64 * size)?;
            self.cache.insert(*b, block);
        }
        Ok(())
    }

    /// Forgets what lookups and scans remember of primary-index entries (the entry last
    /// found, a scan's entries read ahead): at every change to a primary index, at
    /// rollback, at a checkpoint and when a table is dropped.
    fn forget_positions(&mut self) {
        self.found = None;
        self.scan.resume = None;
    }

    /// Drops clean blocks from RAM as the buffer module allows.
    fn evict(&mut self) {
        self.cache.evict(self.opts.buffer_bytes);
    }

    /// Checkpoints so far whose writes home ran on a thread while transactions went on
    /// (the device gave a [`writer`](BlockDevice::writer) handle).
    pub fn background_checkpoints(&self) -> u64 {
        self.background_checkpoints
    }

    /// Whether a checkpoint's writes home are still going on (or waiting for a later commit
    /// to run them): it has not landed yet.
    pub fn checkpoint_in_flight(&self) -> bool {
        self.flight.is_some()
    }

    /// Query-cache hits and misses so far (the `query-cache` feature; zeros without it).
    pub fn query_cache_stats(&self) -> (u64, u64) {
        #[cfg(feature = "query-cache")]
        return self.qcache.stats();
        #[cfg(not(feature = "query-cache"))]
        (0, 0)
    }

    /// The consistency mode the database was opened with.
    pub fn mode(&self) -> Mode {
        self.opts.mode
    }

    /// The data block size in bytes.
    pub fn block_size(&self) -> usize {
        self.opts.block_size as usize
    }

    /// The buffer module's budget for clean blocks, in bytes.
    pub fn buffer_budget(&self) -> usize {
        self.opts.buffer_bytes
    }

    /// Bytes of data blocks held in RAM now.
    pub fn buffered_bytes(&self) -> usize {
        self.cache.bytes()
    }

    fn table_id(&self, name: &str) -> Result<u64> {
        if self.failed {
            return Err(TableError::NeedsRecovery);
        }
        // Names are kept in lower case; most callers already pass them so.
        let id = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            self.names.get(&lower(name))
        } else {
            self.names.get(name)
        };
        id.copied()
            .ok_or_else(|| TableError::NoSuchTable(name.to_string()))
    }

    /// The device (for inspection and statistics; writing to it behind the engine's back
    /// breaks every promise).
    ///
    /// A checkpoint still writing home is waited for first (a failure there leaves the
    /// database failed).
    pub fn device(&mut self) -> &mut D {
        let _ = self.land_all();
        self.sm.device()
    }

    /// Lands the checkpoint in flight, if any, waiting for its writes.
    fn land_all(&mut self) -> Result<()> {
        if self.flight.is_none() {
            return Ok(());
        }
        self.land(true).map(drop)
    }

    /// Every entry of a table's primary index, in key order.
    fn index_entries(&mut self, id: u64) -> Result<Vec<(Vec<u8>, Loc)>> {
        self.index_range(id, Bound::Unbounded, Bound::Unbounded)
    }

    fn index_range(
        &mut self,
        id: u64,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Loc)>> {
        let Some(t) = self.tables.get(&id) else {
            return Ok(Vec::new());
        };
        Pages::new(&mut self.sm, &mut self.ipages, id).range(&t.index, lo, hi)
    }

    /// Where the row with this key lives.
    fn index_get(&mut self, id: u64, key: &[u8]) -> Result<Option<Loc>> {
        if let Some((i, k, loc)) = &self.found {
            if *i == id && k.as_slice() == key {
                return Ok(Some(*loc));
            }
        }
        let Some(t) = self.tables.get(&id) else {
            return Ok(None);
        };
        let loc = Pages::new(&mut self.sm, &mut self.ipages, id).get(&t.index, key)?;
        if let Some(l) = loc {
            self.found = Some((id, Key::new(key), l));
        }
        Ok(loc)
    }

    /// Whether `key` is above every primary key of the table (then it is not in the index).
    fn above_all_keys(&mut self, id: u64, key: &[u8]) -> Result<bool> {
        let Some(t) = self.tables.get(&id) else {
            return Ok(false);
        };
        if t.key_max.is_none() {
            let last = Pages::new(&mut self.sm, &mut self.ipages, id).last(&t.index)?;
            if let Some(t) = self.tables.get_mut(&id) {
                t.key_max = Some(last.map(Key::from));
            }
        }
        Ok(
            match self.tables.get(&id).and_then(|t| t.key_max.as_ref()) {
                Some(max) => max.as_ref().is_none_or(|m| key > m.as_slice()),
                None => false,
            },
        )
    }

    /// Sets (with `None`: removes) `key`'s entry in a table's primary index overlay; `old` is
    /// its entry now if the caller has just looked it up (else it is looked up here).
    /// Returns the overlay's entry before and the change in the row count.
    fn index_put(
        &mut self,
        id: u64,
        key: &[u8],
        loc: Option<Loc>,
        old: Option<Option<Loc>>,
    ) -> Result<(Option<Option<Loc>>, i64)> {
        let old = match old {
            Some(o) => o,
            None => self.index_get(id, key)?,
        };
        // (After the lookup above, which may have remembered the entry this changes.)
        self.forget_positions();
        let Some(t) = self.tables.get_mut(&id) else {
            return Ok((None, 0));
        };
        let delta = i64::from(loc.is_some()) - i64::from(old.is_some());
        t.index.count = t.index.count.saturating_add_signed(delta);
        if loc.is_some() {
            t.raise_key_max(key);
        }
        Ok((t.index.overlay.insert(Key::new(key), loc), delta))
    }

    /// Every page of a table's primary index tree.
    fn index_pages(&mut self, id: u64) -> Result<Vec<BlockRef>> {
        let Some(t) = self.tables.get(&id) else {
            return Ok(Vec::new());
        };
        let mut pages = Vec::new();
        Pages::new(&mut self.sm, &mut self.ipages, id).walk(
            &t.index,
            Bound::Unbounded,
            Bound::Unbounded,
            Some(&mut pages),
        )?;
        Ok(pages)
    }

    /// Checks the database's structure: every block of a table and every page of its
    /// primary index is allocated and belongs to that table only, every allocated block
    /// belongs to a table (no leak); the index trees are well formed, every index entry
    /// names a live tuple with its key, every live tuple is indexed, and the row counts
    /// agree. Reads every block and every index page.
    pub fn verify(&mut self) -> Result<()> {
        self.verify_with(&[])
    }

    /// [`verify`](Self::verify) of a database other engines keep data in: each of `foreign`
    /// (device offset, length) is space they hold, so an allocated block inside one belongs
    /// to them, not to no one — but a block a table holds must not lie inside one, and each
    /// must lie on allocated blocks.
    pub fn verify_with(&mut self, foreign: &[(u64, u64)]) -> Result<()> {
        self.land_all()?;
        let bad = |reason| TableError::Corrupt {
            structure: "database",
            offset: 0,
            reason,
        };
        let mut owned = BTreeSet::new();
        for t in self.tables.values() {
            for b in &t.blocks {
                if !owned.insert(*b) {
                    return Err(bad("a block belongs to two tables, or twice to one"));
                }
                if !self.sm.allocator().is_allocated(*b) {
                    return Err(bad("a table's block is free in the allocator"));
                }
            }
        }
        let ids: Vec<u64> = self.tables.keys().copied().collect();
        for id in &ids {
            let pages = self.index_pages(*id)?;
            if pages.len() as u64 != self.tables[id].index.pages {
                return Err(bad("an index's page count is wrong"));
            }
            for p in pages {
                if !owned.insert(p) {
                    return Err(bad("an index page is shared with another page or block"));
                }
                if !self.sm.allocator().is_allocated(p) {
                    return Err(bad("an index page is free in the allocator"));
                }
            }
        }
        for b in &self.deferred {
            if !owned.insert(*b) {
                return Err(bad("a block is in use and waiting to be freed"));
            }
        }
        if let Some(b) = self.spill {
            if !owned.insert(b) || !self.sm.allocator().is_allocated(b) {
                return Err(bad("the spill block is in use or free"));
            }
        }
        for id in &ids {
            let entries = self.index_entries(*id)?;
            if entries.len() as u64 != self.tables[id].index.count {
                return Err(bad("a table's row count is wrong"));
            }
            let mut by_loc: HashMap<Loc, &[u8]> = HashMap::with_capacity(entries.len());
            for (k, l) in &entries {
                if by_loc.insert(*l, k).is_some() {
                    return Err(bad("two index entries point at one slot"));
                }
                let at = self.sm.allocator().extent(l.block).0;
                if !self.tables[id].blocks.contains(&l.block) {
                    return Err(bad("an index entry points outside its table"));
                }
                let block = self.block_mut(l.block)?;
                let t = block
                    .get(usize::from(l.slot), at)?
                    .ok_or(bad("an index entry points at a free slot"))?;
                let (key, body) = split_tuple(t, at)?;
                if key != k.as_slice() {
                    return Err(bad("an index entry points at another key's tuple"));
                }
                if let Some((_, _, blocks)) = parse_overflow(body, at)? {
                    for b in blocks {
                        if !owned.insert(b) || !self.sm.allocator().is_allocated(b) {
                            return Err(bad("an overflow block is shared or free"));
                        }
                    }
                }
                self.evict();
            }
            // Every live tuple is indexed.
            for b in self.tables[id].blocks.clone() {
                let block = self.block_mut(b)?;
                for slot in block.live_slots().collect::<Vec<_>>() {
                    let l = Loc {
                        block: b,
                        slot: slot as u16,
                    };
                    if !by_loc.contains_key(&l) {
                        return Err(bad("a live tuple is not in the index"));
                    }
                }
                self.evict();
            }
        }
        let mut foreign = foreign.to_vec();
        foreign.sort_unstable();
        // Whether `[offset, offset + len)` lies inside one of the foreign ranges.
        let inside = |offset: u64, len: u64| {
            let i = foreign.partition_point(|&(o, _)| o <= offset);
            i > 0 && {
                let (o, l) = foreign[i - 1];
                offset.saturating_add(len) <= o.saturating_add(l)
            }
        };
        let mut held = 0u64;
        for b in self.sm.allocator().allocated() {
            let Some(e) = crate::space::ExtentSpace::allocated_extent(&self.sm, b) else {
                continue;
            };
            match (owned.contains(&b), inside(e.offset, e.len)) {
                (true, true) => {
                    return Err(bad("a block belongs to a table and to another engine"));
                }
                (false, false) => return Err(bad("an allocated block belongs to no table")),
                (false, true) => held += e.len,
                (true, false) => {}
            }
        }
        if held != foreign.iter().map(|&(_, l)| l).sum::<u64>() {
            return Err(bad("space another engine holds is not allocated"));
        }
        Ok(())
    }

    /// Bytes of the data zone allocated to tables.
    pub fn device_bytes_in_use(&self) -> u64 {
        self.sm.allocator().allocated_bytes()
    }

    /// The schema of a table.
    pub fn schema(&self, table: &str) -> Result<&Schema> {
        let id = self.table_id(table)?;
        Ok(&self.tables[&id].schema)
    }

    /// The tables' names, in creation order.
    pub fn table_names(&self) -> Vec<&str> {
        self.tables.values().map(|t| t.name.as_str()).collect()
    }

    /// Number of rows of a table.
    pub fn row_count(&self, table: &str) -> Result<usize> {
        Ok(self.tables[&self.table_id(table)?].index.count as usize)
    }

    // ----- transactions -------------------------------------------------------------------

    /// Starts a transaction spanning several operations and tables.
    pub fn begin(&mut self) -> Result<()> {
        if self.failed {
            return Err(TableError::NeedsRecovery);
        }
        if self.explicit {
            return Err(TableError::Transaction("a transaction is already open"));
        }
        self.explicit = true;
        self.txn = Some(self.spare.take().unwrap_or_default());
        Ok(())
    }

    /// Commits the open transaction.
    pub fn commit(&mut self) -> Result<()> {
        if !self.explicit {
            return Err(TableError::Transaction("no transaction is open"));
        }
        self.explicit = false;
        self.finish()
    }

    /// Takes back every change of the open transaction.
    pub fn rollback(&mut self) -> Result<()> {
        if !self.explicit {
            return Err(TableError::Transaction("no transaction is open"));
        }
        self.explicit = false;
        self.forget_positions();
        #[cfg(feature = "query-cache")]
        self.qcache.clear();
        let Some(mut txn) = self.txn.take() else {
            return Ok(());
        };
        let mut reserved = Vec::new();
        for u in txn.undo.drain(..).rev() {
            match u {
                Undo::Create(id) => {
                    if let Some(t) = self.tables.remove(&id) {
                        self.names.remove(&lower(&t.name));
                    }
                }
                Undo::Drop(t) => {
                    self.names.insert(lower(&t.name), t.id);
                    self.tables.insert(t.id, *t);
                }
                Undo::AddBlock(id, b) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        t.blocks.retain(|x| *x != b);
                    }
                    self.cache.remove(&b);
                    reserved.push(b);
                }
                Undo::TookSpill(id, b) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        t.blocks.retain(|x| *x != b);
                    }
                    self.cache.remove(&b);
                    self.spill = Some(b);
                }
                Undo::RemoveBlock(id, b, pos) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        t.blocks.insert(pos.min(t.blocks.len()), b);
                    }
                }
                Undo::Slot(b, slot, old) => {
                    if let Some(block) = self.cache.get_mut(&b) {
                        block.set_slot(slot, old)?;
                    }
                }
                Undo::Overwrite(i) => {
                    if let Some((b, at, old)) =
                        overwritten_at(&txn.overwritten, &txn.overwritten_data, i)
                    {
                        if let Some(block) = self.cache.get_mut(&b) {
                            block.load_tuple(at, old)?;
                        }
                    }
                }
                Undo::Index(id, k, before, delta) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        // The key may be back (an undone delete), and a bound learned
                        // inside the transaction may lie below it.
                        t.raise_key_max(k.as_slice());
                        match before {
                            Some(v) => t.index.overlay.insert(k.into(), v),
                            None => t.index.overlay.remove(k.as_slice()),
                        };
                        t.index.count = t.index.count.saturating_add_signed(-delta);
                    }
                }
                Undo::Rowid(id, r) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        t.next_rowid = r;
                    }
                }
                Undo::Reserved(blocks) => reserved.extend(blocks),
                #[cfg(feature = "secondary-index")]
                Undo::Sec(id, i, key, pk, added) => {
                    if let Some(sec) = self
                        .tables
                        .get_mut(&id)
                        .and_then(|t| t.secondary.get_mut(i))
                    {
                        if added {
                            sec.remove(&key, &pk);
                        } else {
                            sec.add(key, pk);
                        }
                    }
                }
                Undo::IndexCreated(id, name) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        t.defs.retain(|d| d.name != name);
                        #[cfg(feature = "secondary-index")]
                        t.secondary.retain(|s| s.def.name != name);
                    }
                }
                Undo::IndexDropped(id, def, pos) => {
                    if let Some(t) = self.tables.get_mut(&id) {
                        let pos = pos.min(t.defs.len());
                        t.defs.insert(pos, def.clone());
                        #[cfg(feature = "secondary-index")]
                        t.secondary
                            .insert(pos.min(t.secondary.len()), Secondary::new(def));
                    }
                    // A restored index is refilled from the rows.
                    #[cfg(feature = "secondary-index")]
                    self.fill_secondary(id)?;
                }
            }
        }
        self.sm.unreserve(&reserved)?;
        self.spare = txn.recycle();
        Ok(())
    }

    fn txn(&mut self) -> &mut Txn {
        let spare = &mut self.spare;
        self.txn
            .get_or_insert_with(|| spare.take().unwrap_or_default())
    }

    /// Ends a statement: outside an explicit transaction it commits by itself, or — if it
    /// failed — leaves nothing behind.
    fn statement<T>(&mut self, r: Result<T>) -> Result<T> {
        if self.explicit {
            return r;
        }
        match r {
            Ok(v) => {
                self.finish()?;
                Ok(v)
            }
            Err(e) => {
                self.explicit = true;
                self.rollback()?;
                Err(e)
            }
        }
    }

    /// Writes the transaction's tuples and its journal record, as the mode says. A failure
    /// after the first write leaves the database [`failed`](Self::failed): the transaction's
    /// changes are in RAM, and whether its record is durable is unknown until recovery.
    fn finish(&mut self) -> Result<()> {
        if self.failed {
            if self.txn.is_some() {
                self.explicit = true;
                self.rollback()?;
            }
            return Err(TableError::NeedsRecovery);
        }
        let Some(mut txn) = self.txn.take() else {
            return Ok(());
        };
        if txn.ops.is_empty() {
            self.spare = txn.recycle();
            return Ok(());
        }
        let mode = self.opts.mode;
        if let Mode::None | Mode::Disorder = mode {
            let r = self.finish_unlogged(txn, mode);
            self.failed = r.is_err();
            return r;
        }
        // Small transactions carry their tuples in the record (see JOURNALED_TUPLES_MAX);
        // bigger ones only those they overwrote in place (see `place`).
        let carried = !txn.in_place;
        if carried || !txn.tuples.is_empty() {
            with_tuples(&txn.ops, &txn.tuples, &txn.tuple_data, &mut txn.record);
        } else {
            txn.record.clear();
        }
        let ops_len = txn.record_ops().len();
        // A checkpoint in flight lands first if this transaction writes blocks home (they
        // could be among the ones it writes) or needs the journal room it still holds.
        if self.flight.is_some()
            && (!carried || !self.sm.journal_fits(txn.marks.len() + 1, ops_len + 10))
        {
            if let Err(e) = self.land(true) {
                self.txn = Some(txn);
                return Err(e);
            }
        }
        // A transaction that wrote a big tuple into a fresh block reserves the next spill
        // block like it, if there is none: the next such transaction writes its record there.
        let reserve = match (self.spill, carried, txn.big) {
            (None, false, Some(big)) => Some(big),
            _ => None,
        };
        // The journal is at most half full once the last checkpoint landed; one that does not fit
        // the rest (with the spill block's mark and operation) is refused whole (a
        // checkpoint now would write part of it home).
        let extra = usize::from(reserve.is_some());
        if !self
            .sm
            .journal_fits(txn.marks.len() + extra, ops_len + 10 * extra)
        {
            self.txn = Some(txn);
            self.explicit = true;
            self.rollback()?;
            return Err(TableError::JournalFull {
                needed: ops_len as u64,
                capacity: self.sm.journal_capacity(),
            });
        }
        let r = self.finish_logged(txn, carried, reserve);
        self.failed = r.is_err();
        r
    }

    /// [`finish`](Self::finish) in modes `none` and `disorder`.
    fn finish_unlogged(&mut self, mut txn: Box<Txn>, mode: Mode) -> Result<()> {
        if mode == Mode::Disorder {
            self.write_touched(&mut txn, None)?;
            self.buffered
                .push((std::mem::take(&mut txn.marks), std::mem::take(&mut txn.ops)));
            if self.buffered.iter().map(|r| r.1.len()).sum::<usize>() > 64 * 1024 {
                self.write_buffered()?;
            }
        }
        self.deferred.extend(txn.frees.iter().copied());
        self.spare = txn.recycle();
        if self.sm.journal_half_full() || self.index_flush_due() {
            self.checkpoint_now()?;
        }
        self.evict();
        Ok(())
    }

    /// [`finish`](Self::finish) in modes `metadata`, `data` and `full`, once the record is
    /// known to fit the journal.
    fn finish_logged(
        &mut self,
        mut txn: Box<Txn>,
        carried: bool,
        reserve: Option<(usize, BlockRef)>,
    ) -> Result<()> {
        let mode = self.opts.mode;
        self.deferred.extend(txn.frees.iter().copied());
        if let Some((want, hint)) = reserve {
            if let Ok(ext) = self.sm.reserve_after(want as u64, Some(hint)) {
                let fit = self.sm.allocator().fit_size(want as u64);
                match ext[..] {
                    // Only a block of the size such a tuple's block gets can be taken.
                    [e] if Some(e.len) == fit => {
                        txn.marks.push((e.block, true));
                        txn.ops.push(OP_SPILL);
                        put_block(&mut txn.ops, e.block);
                        self.spill = Some(e.block);
                        // A record built with the tuples overwritten in place gets it too.
                        if !txn.record.is_empty() {
                            with_tuples(&txn.ops, &txn.tuples, &txn.tuple_data, &mut txn.record);
                        }
                    }
                    _ => {
                        let blocks: Vec<BlockRef> = ext.iter().map(|e| e.block).collect();
                        self.sm.unreserve(&blocks)?;
                    }
                }
            }
        }
        // Every record names the spill block held after it.
        self.sm.set_spill(self.spill)?;
        let spilled = match txn.spill_block {
            Some(b) if !carried => self.write_spilled(&mut txn, b)?,
            _ => false,
        };
        if !spilled {
            if !carried {
                self.write_touched(&mut txn, None)?;
            }
            self.sm.append(&txn.marks, txn.record_ops())?;
        }
        self.pinned
            .extend(txn.overwritten.iter().map(|(b, _, _)| *b));
        self.spare = txn.recycle();
        if mode == Mode::Full {
            self.sm.sync()?;
            self.pinned.clear();
        }
        // A checkpoint started here goes on while the next transactions run; the one in
        // flight lands once its writes are done.
        if self.flight.is_some() {
            self.land(false)?;
        } else if self.sm.journal_half_full() || self.index_flush_due() {
            self.start_checkpoint(true)?;
        }
        self.evict();
        Ok(())
    }

    /// Writes a transaction that made its fresh block `b` of the spill block: the other
    /// blocks' tuples, then block `b` — header, the transaction's record in the room after
    /// it, tuples — in one write. `false` (nothing written) if the record does not fit the
    /// room: it goes to the ring then.
    fn write_spilled(&mut self, txn: &mut Txn, b: BlockRef) -> Result<bool> {
        let size = SpaceManager::<D>::spilled_size(txn.marks.len(), txn.record_ops().len());
        let room = |db: &mut Self| {
            db.cache
                .get_mut(&b)
                .and_then(|x| x.room_mut(size))
                .is_some()
        };
        if size > SPILL_ROOM || !room(self) {
            return Ok(false);
        }
        // The other blocks first: a failed write there leaves the journal as it was.
        self.write_touched(txn, Some(b))?;
        let Some(room) = self.cache.get_mut(&b).and_then(|x| x.room_mut(size)) else {
            return Ok(false);
        };
        self.sm.append_spilled(&txn.marks, txn.record_ops(), room)?;
        // A failed write leaves the database failed (see `finish`): no record follows one
        // that may not have landed.
        self.write_tuples(b, Some(txn))?;
        self.homed.insert(b);
        Ok(true)
    }

    /// Writes the tuples of the blocks a transaction touched, but `except`, and not those it
    /// gave back without putting a tuple in them: nothing reads them again (replay drops a
    /// removed block, the checkpoint frees it), so they leave the buffer unwritten — an
    /// update that empties a block made since the checkpoint would otherwise rewrite its
    /// header sector for nothing.
    ///
    /// A block holding a tuple an earlier transaction overwrote in place is written only
    /// once that transaction's record is durable: the journal is synced first.
    fn write_touched(&mut self, txn: &mut Txn, except: Option<BlockRef>) -> Result<()> {
        txn.touched();
        txn.filled.sort_unstable();
        txn.frees.sort_unstable();
        let written = |b: &BlockRef| {
            Some(*b) != except
                && (txn.frees.binary_search(b).is_err() || txn.filled.binary_search(b).is_ok())
        };
        if !self.pinned.is_empty()
            && txn
                .blocks
                .iter()
                .any(|b| written(b) && self.pinned.contains(b))
        {
            self.sm.sync()?;
            self.pinned.clear();
        }
        for i in 0..txn.blocks.len() {
            let b = txn.blocks[i];
            if Some(b) == except {
                continue;
            }
            if txn.frees.binary_search(&b).is_ok() && txn.filled.binary_search(&b).is_err() {
                self.cache.remove(&b);
                continue;
            }
            self.write_tuples(b, Some(txn))?;
            self.homed.insert(b);
        }
        Ok(())
    }

    /// Whether the index pages the next checkpoint writes and frees come near what the
    /// catalog, which carries their allocator marks, can hold, or the primary indexes'
    /// overlays hold more than [`OVERLAY_MAX`] entries.
    fn index_flush_due(&self) -> bool {
        let pages: u64 = self.tables.values().map(|t| t.index.flush_estimate()).sum();
        let entries: usize = self.tables.values().map(|t| t.index.overlay.len()).sum();
        // 14 bytes per run of marks, at worst one run per page; a quarter of a snapshot.
        pages * 14 > self.store.capacity() / 4 || entries > OVERLAY_MAX
    }

    fn write_buffered(&mut self) -> Result<()> {
        for (marks, ops) in std::mem::take(&mut self.buffered) {
            if !self.sm.journal_fits(marks.len(), ops.len()) {
                return Err(TableError::JournalFull {
                    needed: ops.len() as u64,
                    capacity: 0,
                });
            }
            self.sm.append(&marks, &ops)?;
        }
        Ok(())
    }

    /// Writes a block's changed tuple sectors — and its header with them if the block is
    /// fresh (see the module docs), else never its header.
    ///
    /// Tuples `txn` overwrote in place go with the bytes they replaced, and their sectors
    /// stay changed: their record, not yet written, carries them (see
    /// [`may_overwrite`](Self::may_overwrite)), and the next checkpoint writes them.
    fn write_tuples(&mut self, b: BlockRef, txn: Option<&Txn>) -> Result<()> {
        let at = self.sm.allocator().extent(b).0;
        let Some(block) = self.cache.get_mut(&b) else {
            return Ok(());
        };
        let runs = if block.is_fresh() {
            block.take_dirty()
        } else {
            block.take_dirty_tuples()
        };
        let mine: Vec<(usize, &[u8])> = match txn {
            Some(t) => (0..t.overwritten.len())
                .filter_map(|i| overwritten_at(&t.overwritten, &t.overwritten_data, i))
                .filter(|(x, _, _)| *x == b)
                .map(|(_, at, old)| (at, old))
                .collect(),
            None => Vec::new(),
        };
        for r in runs {
            let bytes = block.bytes(r.clone());
            let within = |&(o, old): &(usize, &[u8])| o < r.end && o + old.len() > r.start;
            if !mine.iter().any(within) {
                // A table's blocks are written commit after commit: worth allocating ahead.
                write_run(self.sm.device(), at + r.start as u64, bytes)?;
                continue;
            }
            // The earliest overwrite of a spot put back last: the bytes before the
            // transaction.
            let mut image = bytes.to_vec();
            for &(o, old) in mine.iter().rev() {
                let (from, to) = (o.max(r.start), (o + old.len()).min(r.end));
                if from < to {
                    image[from - r.start..to - r.start].copy_from_slice(&old[from - o..to - o]);
                }
            }
            write_run(self.sm.device(), at + r.start as u64, &image)?;
        }
        for (o, old) in mine {
            block.mark_changed(o..o + old.len());
        }
        Ok(())
    }

    /// A checkpoint's writes of the blocks in RAM it has work with (found in the buffer's
    /// slab: [`SlottedBlock::checkpoint_work`]), tuples and header together (see
    /// [`start_checkpoint`](Self::start_checkpoint)), as they are now (shared with the
    /// blocks, which copy their bytes before they next change): each block's
    /// changed sectors widened to the whole `page`s they lie in, in device order (the
    /// device told to expect them). Each block is settled: the catalog written after them
    /// names it, and from then on its header waits for its tuples between checkpoints.
    fn home_writes(&mut self, page: usize) -> HomeWrites {
        let mut order: Vec<(u64, usize, BlockRef)> = self
            .cache
            .places_where(SlottedBlock::checkpoint_work)
            .map(|(i, b)| (self.sm.allocator().extent(b).0, i, b))
            .collect();
        order.sort_unstable();
        let mut home = HomeWrites::default();
        for k in 0..order.len() {
            // Sealing a header waits on two loads (the bytes' handle, then the header): for
            // the blocks a few places on they are asked for now, so those loads overlap.
            // (Where the hint is no instruction, finding what to hint is wasted.)
            if cfg!(target_arch = "x86_64") {
                if let Some(&(_, j, _)) = order.get(k + 2 * HOME_HINT_AHEAD) {
                    self.cache.hint_at(j, Hint::Handle);
                }
                if let Some(&(_, j, _)) = order.get(k + HOME_HINT_AHEAD) {
                    self.cache.hint_at(j, Hint::Header);
                }
            }
            let (at, i, b) = order[k];
            let Some(block) = self.cache.at_mut(i, &b) else {
                continue;
            };
            let (bytes, spans) = block.share_dirty_pages(page);
            for span in spans {
                home.push(at + span.start as u64, &bytes, span);
            }
            block.settle();
        }
        for (at, len) in home.runs() {
            self.sm.device().prepare(at, len as u64);
        }
        home
    }

    // ----- checkpoints --------------------------------------------------------------------

    /// Writes everything home — tuples, block headers, the catalog, the allocator — and
    /// empties the journal. Not inside a transaction.
    pub fn checkpoint(&mut self) -> Result<()> {
        if self.explicit {
            return Err(TableError::Transaction("checkpoint inside a transaction"));
        }
        self.finish()?;
        self.checkpoint_now()
    }

    /// Checkpoints; a failure leaves the database [`failed`](Self::failed).
    fn checkpoint_now(&mut self) -> Result<()> {
        if self.failed {
            return Err(TableError::NeedsRecovery);
        }
        let r = self
            .land_checkpoint(true)
            .and_then(|_| self.start_checkpoint(false))
            .and_then(|_| self.land_checkpoint(true).map(drop));
        self.failed = r.is_err();
        r
    }

    /// Finishes the checkpoint in flight, if any, waiting for it if `wait` (else only if
    /// its job is due); whether none is left in flight. A failure leaves the database
    /// [`failed`](Self::failed).
    fn land(&mut self, wait: bool) -> Result<bool> {
        if self.failed {
            return Err(TableError::NeedsRecovery);
        }
        let r = self.land_checkpoint(wait);
        self.failed = r.is_err();
        r
    }

    /// Takes a checkpoint's snapshot and starts its writes home: through the device's
    /// [`writer`](BlockDevice::writer) handle if it gives one, on a thread of its own if
    /// `background`; else (or without a handle) when
    /// [`land_checkpoint`](Self::land_checkpoint) is next called. None may be in flight.
    ///
    /// Here, on the caller's thread: new index pages (and disorder mode's buffered
    /// records), a sync that makes every record so far durable, and a copy of each changed
    /// block's pages and of the catalog. Then, in the job: those pages, the catalog, a sync.
    /// A block's tuples and header go in one write once every record is durable: if the cut
    /// comes before the journal's tail moves, replay from the last checkpoint puts back
    /// every tuple a header written here may name (a record carries it, or its transaction
    /// wrote it home before the record), whatever mix of old and new sectors the block was
    /// left with. Commits made meanwhile only append records after the snapshot and change
    /// blocks in RAM; one that would write a block home lands the checkpoint first. Without
    /// a journal the tuples are made durable before the headers that point at them (a
    /// block of 4 KiB is one page: written twice, it went to the disk twice).
    fn start_checkpoint(&mut self, background: bool) -> Result<()> {
        debug_assert!(self.flight.is_none());
        self.forget_positions();
        // Records written in disorder mode may have to wait for room: make room first.
        let pending = std::mem::take(&mut self.buffered);
        let journaled = self.opts.mode != Mode::None;
        if !journaled {
            for b in self.cache.keys() {
                self.write_tuples(b, None)?;
            }
        }
        // The primary indexes' changes go into new pages, synced with the records; the
        // catalog below names their roots and carries the pages' allocator marks. Not in
        // an extent another engine gave back since the last snapshot: until this
        // checkpoint lands, replay from the last one would free it again over the catalog
        // naming the page. Those are held taken while the pages are placed.
        // One at a time: taking one may take its chunk for its class, and then another
        // given back from that chunk (of the class it had before) cannot be taken, nor be
        // an index page. Taken and given back twice, an extent is named twice.
        let mut held: Vec<BlockRef> = Vec::new();
        for b in std::mem::take(&mut self.extents_freed) {
            if !held.contains(&b) && self.sm.allocator().is_free_to_take(b) {
                self.sm.apply_marks(&[(b, true)])?;
                held.push(b);
            }
        }
        let mut marks = Vec::new();
        let mut replaced = Vec::new();
        for t in self.tables.values_mut() {
            let f = Pages::new(&mut self.sm, &mut self.ipages, t.id).flush(&mut t.index)?;
            marks.extend(f.new.iter().map(|b| (*b, true)));
            marks.extend(f.old.iter().map(|b| (*b, false)));
            replaced.extend(f.old);
        }
        self.sm.unreserve(&held)?;
        for (marks, ops) in &pending {
            if !self.sm.journal_fits(marks.len(), ops.len()) {
                break;
            }
            self.sm.append(marks, ops)?;
        }
        self.sm.sync()?;
        // The records are durable, and no block changed from here on reaches the device
        // before this checkpoint lands (see `may_overwrite`). The blocks written home stay
        // `homed` until it has landed: until then replay may start before their records.
        self.pinned.clear();
        // Without a journal only the headers are left to write: sector by sector.
        let home = self.home_writes(if journaled { PAGE } else { 512 });
        let catalog = Catalog {
            next_id: self.next_id,
            tables: self
                .tables
                .values()
                .map(|t| TableEntry {
                    id: t.id,
                    name: t.name.clone(),
                    schema: t.schema.clone(),
                    blocks: t.blocks.clone(),
                    indexes: t.defs.clone(),
                    index_root: t.index.root,
                    index_height: t.index.height,
                    index_pages: t.index.pages,
                    rows: t.index.count,
                    next_rowid: t.next_rowid,
                })
                .collect(),
            marks,
        };
        let catalog = self.store.next_writes(&catalog)?;
        for (at, bytes) in &catalog {
            // Filled now, never while the job writes there.
            self.sm.device().prepare(*at, bytes.len() as u64);
        }
        // The old index pages and the blocks of committed transactions are free once the
        // catalog that no longer names them is durable and the journal's tail has moved
        // past the records that do; so is the spill block, which no record after this
        // one names.
        let mut freed = std::mem::take(&mut self.deferred);
        freed.extend(replaced);
        freed.extend(self.spill.take());
        self.sm.set_spill(None)?;
        let at = self.sm.journal_position();
        let (alloc, header, generation) = self.sm.checkpoint_parts(at, &freed)?;
        let writer = self.sm.device().writer();
        let job = Job {
            home,
            catalog,
            alloc,
            header,
        };
        let flight = Flight::start(at, generation, freed, job, writer, background);
        self.background_checkpoints += u64::from(flight.on_thread());
        self.flight = Some(flight);
        Ok(())
    }

    /// [`land`](Self::land) without marking the database failed: once the job is done,
    /// gives back the blocks it freed, writes the bitmaps and moves the journal's tail to
    /// the snapshot (the records after it stay), and lets the blocks written home leave RAM.
    fn land_checkpoint(&mut self, wait: bool) -> Result<bool> {
        let Some(flight) = self.flight.as_mut() else {
            return Ok(true);
        };
        if !wait && !flight.ready() {
            return Ok(false);
        }
        let done = flight.finish(self.sm.device());
        let Some(flight) = self.flight.take() else {
            return Ok(true);
        };
        let flushed = done?;
        for b in &flight.freed {
            self.ipages.remove(b);
        }
        self.sm
            .adopt_checkpoint(flight.at, flight.generation, &flushed, &flight.freed)?;
        // Replay starts at the snapshot now, past every record that wrote a tuple home
        // (those after it land this checkpoint first: see `finish`).
        self.homed.clear();
        self.cache.clean_where(SlottedBlock::is_clean);
        self.evict();
        Ok(true)
    }

    /// Checkpoints and returns the device.
    pub fn close(mut self) -> Result<D> {
        if self.explicit {
            self.rollback()?;
        }
        self.checkpoint()?;
        self.sm.close()
    }

    // ----- tables -------------------------------------------------------------------------

    /// Creates a table.
    pub fn create_table(&mut self, name: &str, schema: Schema) -> Result<()> {
        let r = self.create_table_inner(name, schema);
        self.statement(r)
    }

    fn create_table_inner(&mut self, name: &str, schema: Schema) -> Result<()> {
        schema.validate()?;
        if name.is_empty() || name.len() > 1024 {
            return Err(TableError::Invalid("a table name is 1 to 1024 bytes"));
        }
        if self.names.contains_key(&lower(name)) {
            return Err(TableError::TableExists(name.to_string()));
        }
        let id = self.next_id;
        let mut s = Vec::new();
        schema.encode(&mut s);
        let index = PIndex::new(schema.index);
        self.add_table(id, name.to_string(), schema, Vec::new(), Vec::new(), index);
        let txn = self.txn();
        txn.ops.push(OP_CREATE);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        txn.ops
            .extend_from_slice(&(name.len() as u16).to_le_bytes());
        txn.ops.extend_from_slice(name.as_bytes());
        txn.ops.extend_from_slice(&(s.len() as u32).to_le_bytes());
        txn.ops.extend_from_slice(&s);
        txn.undo.push(Undo::Create(id));
        Ok(())
    }

    /// Drops a table and gives its blocks back.
    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        let r = self.drop_table_inner(name);
        self.statement(r)
    }

    fn drop_table_inner(&mut self, name: &str) -> Result<()> {
        let id = self.table_id(name)?;
        for (_, loc) in self.index_entries(id)? {
            self.free_overflow(loc)?;
        }
        // The index pages go with the table (they change only at checkpoints, so these are
        // the pages the last catalog names — once the checkpoint in flight, whose catalog
        // names new ones, has landed: before, a cut would leave the old ones taken).
        self.land_all()?;
        let pages = self.index_pages(id)?;
        let txn = self.txn();
        txn.marks.extend(pages.iter().map(|b| (*b, false)));
        txn.frees.extend(pages);
        #[cfg(feature = "query-cache")]
        self.qcache.invalidate_table(id);
        self.forget_positions();
        let t = self
            .tables
            .remove(&id)
            .ok_or_else(|| TableError::NoSuchTable(name.to_string()))?;
        self.names.remove(&lower(name));
        let txn = self.txn();
        txn.ops.push(OP_DROP);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        for b in &t.blocks {
            txn.marks.push((*b, false));
            txn.frees.push(*b);
        }
        txn.undo.push(Undo::Drop(Box::new(t)));
        Ok(())
    }

    // ----- secondary indexes --------------------------------------------------------------

    /// Creates a secondary index `name` on columns of `table` (by name), hash or tree,
    /// optionally unique; it is filled from the rows now. Needs the `secondary-index`
    /// feature.
    pub fn create_index(
        &mut self,
        name: &str,
        table: &str,
        columns: &[&str],
        kind: IndexKind,
        unique: bool,
    ) -> Result<()> {
        let r = self.create_index_inner(name, table, columns, kind, unique);
        self.statement(r)
    }

    fn create_index_inner(
        &mut self,
        name: &str,
        table: &str,
        columns: &[&str],
        kind: IndexKind,
        unique: bool,
    ) -> Result<()> {
        if !cfg!(feature = "secondary-index") {
            return Err(TableError::Invalid(
                "built without the secondary-index module",
            ));
        }
        if self.index_owner(name).is_some() {
            return Err(TableError::TableExists(name.to_string()));
        }
        let id = self.table_id(table)?;
        let t = &self.tables[&id];
        let cols = columns
            .iter()
            .map(|c| {
                t.schema
                    .column(c)
                    .ok_or(TableError::Invalid("no such column"))
            })
            .collect::<Result<Vec<usize>>>()?;
        let def = IndexDef {
            name: name.to_string(),
            columns: cols,
            kind,
            unique,
        };
        def.validate(&t.schema)?;
        let mut enc = Vec::new();
        def.encode(&mut enc);
        if let Some(t) = self.tables.get_mut(&id) {
            t.defs.push(def.clone());
            #[cfg(feature = "secondary-index")]
            t.secondary.push(Secondary::new(def));
        }
        let txn = self.txn();
        txn.ops.push(OP_CREATE_INDEX);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        txn.ops.extend_from_slice(&(enc.len() as u32).to_le_bytes());
        txn.ops.extend_from_slice(&enc);
        txn.undo.push(Undo::IndexCreated(id, name.to_string()));
        #[cfg(feature = "secondary-index")]
        self.fill_secondary(id)?;
        Ok(())
    }

    /// Drops a secondary index.
    pub fn drop_index(&mut self, name: &str) -> Result<()> {
        let r = self.drop_index_inner(name);
        self.statement(r)
    }

    fn drop_index_inner(&mut self, name: &str) -> Result<()> {
        let (id, pos) = self.index_named(name)?;
        let Some(t) = self.tables.get_mut(&id) else {
            return Ok(());
        };
        let def = t.defs.remove(pos);
        #[cfg(feature = "secondary-index")]
        t.secondary.retain(|s| s.def.name != def.name);
        let txn = self.txn();
        txn.ops.push(OP_DROP_INDEX);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        txn.ops
            .extend_from_slice(&(def.name.len() as u16).to_le_bytes());
        txn.ops.extend_from_slice(def.name.as_bytes());
        txn.undo.push(Undo::IndexDropped(id, def, pos));
        Ok(())
    }

    /// The table and position of a secondary index, by name.
    /// [`index_owner`](Self::index_owner), or why there is none to use.
    fn index_named(&self, name: &str) -> Result<(u64, usize)> {
        if self.failed {
            return Err(TableError::NeedsRecovery);
        }
        self.index_owner(name)
            .ok_or_else(|| TableError::NoSuchTable(name.to_string()))
    }

    fn index_owner(&self, name: &str) -> Option<(u64, usize)> {
        self.tables.values().find_map(|t| {
            t.defs
                .iter()
                .position(|d| d.name.eq_ignore_ascii_case(name))
                .map(|p| (t.id, p))
        })
    }

    /// The definition of secondary index `name`, if there is one.
    pub fn index_def(&self, name: &str) -> Option<&IndexDef> {
        let (id, pos) = self.index_owner(name)?;
        self.tables.get(&id)?.defs.get(pos)
    }

    /// The secondary indexes of a table.
    pub fn indexes(&self, table: &str) -> Result<&[IndexDef]> {
        Ok(&self.tables[&self.table_id(table)?].defs)
    }

    /// The rows whose indexed columns equal `values`, through secondary index `name`.
    #[cfg(feature = "secondary-index")]
    pub fn find(&mut self, name: &str, values: &[Value]) -> Result<Vec<Vec<Value>>> {
        let (id, pos) = self.index_named(name)?;
        let pks = self.tables[&id].secondary[pos].lookup(values);
        self.rows_by_keys(id, pks)
    }

    /// The rows whose indexed columns lie within the bounds, in index order, through tree
    /// index `name`.
    #[cfg(feature = "secondary-index")]
    pub fn find_range(
        &mut self,
        name: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Vec<Value>>> {
        let (id, pos) = self.index_named(name)?;
        let enc = |b: Bound<&[Value]>| match b {
            Bound::Included(v) => Bound::Included(key_bytes(v)),
            Bound::Excluded(v) => Bound::Excluded(key_bytes(v)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let pks = self.secondary_mut(id, pos)?.range(enc(lo), enc(hi))?;
        self.rows_by_keys(id, pks)
    }

    /// The rows whose first `k` indexed columns lie within the bounds (`k` = the length of
    /// each bound, at most the index's column count), in index order: a prefix range over a
    /// tree index, as a SQL planner probes `a = ?` or `a > ?` on an index of `(a, b)`.
    #[cfg(feature = "secondary-index")]
    pub fn find_prefix(
        &mut self,
        name: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Vec<Value>>> {
        self.find_prefix_with(name, lo, hi, Order::default())
    }

    /// Like [`find_prefix`](Self::find_prefix), in index order from either end and with at
    /// most `order.limit` rows read.
    #[cfg(feature = "secondary-index")]
    pub fn find_prefix_with(
        &mut self,
        name: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        order: Order,
    ) -> Result<Vec<Vec<Value>>> {
        let (id, pks) = self.prefix_keys(name, lo, hi, order)?;
        self.rows_by_keys(id, pks)
    }

    /// Like [`find_prefix_with`](Self::find_prefix_with), handing each row to `visit` as it
    /// decodes from its block (see [`range_visit`](Self::range_visit)).
    #[cfg(feature = "secondary-index")]
    pub fn find_prefix_visit<V: AsValueRef + PartialEq>(
        &mut self,
        name: &str,
        lo: Bound<&[V]>,
        hi: Bound<&[V]>,
        order: Order,
        mut visit: impl FnMut(RowValues<'_>) -> Result<()>,
    ) -> Result<()> {
        let (id, pos) = self.index_named(name)?;
        if let Some(done) = self.equal_probe_visit(id, pos, lo, hi, order, &mut visit)? {
            return done;
        }
        let pks = self.prefix_keys_at(id, pos, lo, hi, order)?;
        // One row: a point read; several may share blocks, read whole.
        let point = pks.len() == 1;
        for pk in pks {
            if let Some(loc) = self.index_get(id, &pk)? {
                if point {
                    self.visit_row_read(loc, &pk, &mut visit)?;
                } else {
                    self.visit_row(loc, &pk, &mut visit)?;
                }
            }
        }
        self.evict();
        Ok(())
    }

    /// [`find_prefix_visit`](Self::find_prefix_visit) of a probe with every indexed column
    /// equal that finds at most one row (a unique index's probe, or any probe of a value
    /// one row holds): the keys go through buffers kept for the next probe, so it
    /// allocates nothing. `Ok(None)`: another probe, for the general path.
    #[cfg(feature = "secondary-index")]
    fn equal_probe_visit<V: AsValueRef + PartialEq>(
        &mut self,
        id: u64,
        pos: usize,
        lo: Bound<&[V]>,
        hi: Bound<&[V]>,
        order: Order,
        visit: &mut impl FnMut(RowValues<'_>) -> Result<()>,
    ) -> Result<Option<Result<()>>> {
        let (Bound::Included(v), Bound::Included(h)) = (lo, hi) else {
            return Ok(None);
        };
        if v != h || order.limit == Some(0) {
            return Ok(None);
        }
        let Some(sec) = self.tables.get(&id).and_then(|t| t.secondary.get(pos)) else {
            return Ok(None);
        };
        if v.len() != sec.def.columns.len() {
            return Ok(None);
        }
        let mut k = core::mem::take(&mut self.probe_key);
        k.clear();
        encode_key(v, &mut k);
        let mut pk = core::mem::take(&mut self.probe_pk);
        pk.clear();
        let found = sec.single(&k, &mut pk);
        self.probe_key = k;
        let r = match found {
            None => Ok(None),
            Some(false) => Ok(Some(Ok(()))),
            Some(true) => {
                let r = match self.index_get(id, &pk) {
                    Ok(Some(loc)) => self.visit_row_read(loc, &pk, visit),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                self.evict();
                r.map(|()| Some(Ok(())))
            }
        };
        self.probe_pk = pk;
        r
    }

    /// The encoded primary keys of the rows [`find_prefix`](Self::find_prefix) would return,
    /// in index order, without reading the rows (a uniqueness probe needs no more).
    #[cfg(feature = "secondary-index")]
    pub fn find_prefix_keys<V: AsValueRef + PartialEq>(
        &mut self,
        name: &str,
        lo: Bound<&[V]>,
        hi: Bound<&[V]>,
    ) -> Result<Vec<Vec<u8>>> {
        Ok(self.prefix_keys(name, lo, hi, Order::default())?.1)
    }

    /// The owning table's id and the primary keys under index `name` within the bounds, in
    /// `order` (only the first `order.limit` of a tree index's range are visited).
    #[cfg(feature = "secondary-index")]
    fn prefix_keys<V: AsValueRef + PartialEq>(
        &mut self,
        name: &str,
        lo: Bound<&[V]>,
        hi: Bound<&[V]>,
        order: Order,
    ) -> Result<(u64, Vec<Vec<u8>>)> {
        let (id, pos) = self.index_named(name)?;
        Ok((id, self.prefix_keys_at(id, pos, lo, hi, order)?))
    }

    /// [`prefix_keys`](Self::prefix_keys) of secondary index `pos` of table `id`.
    #[cfg(feature = "secondary-index")]
    fn prefix_keys_at<V: AsValueRef + PartialEq>(
        &mut self,
        id: u64,
        pos: usize,
        lo: Bound<&[V]>,
        hi: Bound<&[V]>,
        order: Order,
    ) -> Result<Vec<Vec<u8>>> {
        // Keys that start with prefix p lie in [p, successor(p)).
        let (lo_in, hi_in) = (lo, hi);
        let lo = match lo {
            Bound::Included(v) => Bound::Included(key_bytes(v)),
            Bound::Excluded(v) => match prefix_successor(key_bytes(v)) {
                Some(s) => Bound::Included(s),
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => Bound::Unbounded,
        };
        if let (Bound::Included(v), Bound::Included(k)) = (lo_in, &lo) {
            let sec = &self.tables[&id].secondary[pos];
            if hi_in == lo_in && v.len() == sec.def.columns.len() {
                // Every column equal: one probe, on a hash index too.
                let mut pks = sec.get(k);
                order.apply(&mut pks);
                return Ok(pks);
            }
        }
        let hi = match hi {
            // An equality probe: the successor of the key just encoded.
            Bound::Included(v) if matches!(&lo_in, Bound::Included(l) if *l == v) => match &lo {
                Bound::Included(l) => match prefix_successor(l.clone()) {
                    Some(s) => Bound::Excluded(s),
                    None => Bound::Unbounded,
                },
                _ => Bound::Unbounded,
            },
            Bound::Included(v) => match prefix_successor(key_bytes(v)) {
                Some(s) => Bound::Excluded(s),
                None => Bound::Unbounded,
            },
            Bound::Excluded(v) => Bound::Excluded(key_bytes(v)),
            Bound::Unbounded => Bound::Unbounded,
        };
        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
            (&lo, &hi)
        {
            if l > h {
                return Ok(Vec::new());
            }
        }
        let limit = order.limit.unwrap_or(usize::MAX);
        let sec = self.secondary_mut(id, pos)?;
        sec.range_from(lo, hi, order.desc, limit)
    }

    /// Secondary index `pos` of table `id` (as [`index_named`](Self::index_named) gives
    /// them), to read a range of it.
    #[cfg(feature = "secondary-index")]
    fn secondary_mut(&mut self, id: u64, pos: usize) -> Result<&mut Secondary> {
        self.tables
            .get_mut(&id)
            .and_then(|t| t.secondary.get_mut(pos))
            .ok_or(TableError::Invalid("an index without its table"))
    }

    #[cfg(feature = "secondary-index")]
    fn rows_by_keys(&mut self, id: u64, pks: Vec<Vec<u8>>) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::with_capacity(pks.len());
        for pk in pks {
            if let Some(loc) = self.index_get(id, &pk)? {
                out.push(self.read_row(loc, &pk)?);
            }
        }
        self.evict();
        Ok(out)
    }

    /// Fills a table's secondary indexes from its rows (after open, or a restored index).
    #[cfg(feature = "secondary-index")]
    fn fill_secondary(&mut self, id: u64) -> Result<()> {
        let defs = self.tables[&id].defs.clone();
        let mut fresh: Vec<Secondary> = defs.into_iter().map(Secondary::new).collect();
        let entries = self.index_entries(id)?;
        for (pk, loc) in entries {
            let row = self.read_row(loc, &pk)?;
            for sec in &mut fresh {
                let (k, null) = sec.key(&row);
                if sec.conflicts(&k, null, &pk) {
                    return Err(TableError::Unique(sec.def.name.clone()));
                }
                sec.add(k.into(), Key::new(&pk));
            }
            self.evict();
        }
        if let Some(t) = self.tables.get_mut(&id) {
            t.secondary = fresh;
        }
        Ok(())
    }

    /// Updates the secondary indexes for a row going from `old` to `new` (either absent).
    #[cfg(feature = "secondary-index")]
    fn maintain<N: AsValueRef>(
        &mut self,
        id: u64,
        pk: &[u8],
        old: Option<&[Value]>,
        new: Option<&[N]>,
    ) -> Result<()> {
        // The indexes whose values change, with their old and new keys; every unique one is
        // checked before any changes.
        let mut changes: Vec<(usize, KeyChange)> = Vec::new();
        let t = self.tables.get(&id).ok_or(TableError::Invalid("table"))?;
        for (i, sec) in t.secondary.iter().enumerate() {
            if let (Some(o), Some(n)) = (old, new) {
                // Equal values encode alike: the entry stays.
                if sec
                    .def
                    .columns
                    .iter()
                    .all(|&c| o.get(c).map(Value::as_value_ref) == n.get(c).map(N::value_ref))
                {
                    continue;
                }
            }
            let new_k = match new {
                Some(row) => {
                    let (k, null) = sec.key(row);
                    if sec.conflicts(&k, null, pk) {
                        return Err(TableError::Unique(sec.def.name.clone()));
                    }
                    Some(k)
                }
                None => None,
            };
            let old_k = old.map(|r| sec.key(r).0);
            if old_k != new_k {
                changes.push((i, (old_k, new_k)));
            }
        }
        for (i, (old_k, new_k)) in changes {
            if let Some(k) = old_k {
                if let Some(sec) = self.tables.get_mut(&id).map(|t| &mut t.secondary[i]) {
                    sec.remove(&k, pk);
                }
                self.txn()
                    .undo
                    .push(Undo::Sec(id, i, k.into(), Key::new(pk), false));
            }
            if let Some(k) = new_k {
                // In-place keys: the index entry and its undo record cost no allocation
                // (unless a key is longer than ikey::INLINE bytes).
                let (k, pk) = (Key::from(k), Key::new(pk));
                if let Some(sec) = self.tables.get_mut(&id).map(|t| &mut t.secondary[i]) {
                    sec.add(k.clone(), pk.clone());
                }
                self.txn().undo.push(Undo::Sec(id, i, k, pk, true));
            }
        }
        Ok(())
    }

    /// Whether replacing the row at `loc` by `row` changes a value some secondary index of
    /// the table holds (then its entries change). The stored row is compared in place; a
    /// table with an indexed column past the 64th is taken to change.
    #[cfg(feature = "secondary-index")]
    fn indexed_values_change<V: AsValueRef>(
        &mut self,
        id: u64,
        loc: Loc,
        key: &[u8],
        row: &[V],
    ) -> Result<bool> {
        let Some(t) = self.tables.get(&id) else {
            return Ok(true);
        };
        let mut mask = 0u64;
        for c in t.secondary.iter().flat_map(|s| s.def.columns.iter()) {
            match 1u64.checked_shl(*c as u32) {
                Some(bit) if *c < 64 => mask |= bit,
                _ => return Ok(true),
            }
        }
        self.visit_row(loc, key, &mut |old| {
            let mut seen = 0u64;
            for (i, v) in old.enumerate().take(64) {
                let bit = 1u64 << i;
                if mask & bit != 0 {
                    if row.get(i).map(V::value_ref) != Some(v?) {
                        return Ok(true);
                    }
                    seen |= bit;
                    if seen == mask {
                        return Ok(false);
                    }
                }
            }
            // An indexed column the stored row does not reach changes too.
            Ok(seen != mask)
        })
    }

    // ----- rows ---------------------------------------------------------------------------

    /// The primary key of a row that [`check_row`](Self::check_row) accepted.
    fn key_of<V: AsValueRef>(t: &Table, row: &[V]) -> Result<Vec<u8>> {
        let room = t.schema.primary_key.iter().filter_map(|&i| row.get(i));
        let mut k = Vec::with_capacity(room.map(|v| key_room(v.value_ref())).sum());
        for &i in &t.schema.primary_key {
            let v = row.get(i).ok_or(TableError::Constraint(
                "wrong number of values for the table",
            ))?;
            encode_key_value(v.value_ref(), &mut k);
        }
        Ok(k)
    }

    fn check_row<V: AsValueRef>(t: &Table, row: &[V]) -> Result<()> {
        if row.len() != t.schema.columns.len() {
            return Err(TableError::Constraint(
                "wrong number of values for the table",
            ));
        }
        for (c, v) in t.schema.columns.iter().zip(row) {
            if c.not_null && matches!(v.value_ref(), ValueRef::Null) {
                return Err(TableError::Constraint("NULL in a NOT NULL column"));
            }
        }
        Ok(())
    }

    /// Inserts a row; a duplicate primary key is refused. For a table without a primary key
    /// the engine assigns a rowid, which it returns.
    pub fn insert<V: AsValueRef>(&mut self, table: &str, row: &[V]) -> Result<Option<i64>> {
        let r = self
            .insert_inner(table, row)
            .and_then(|put| put.ok_or(TableError::Constraint("duplicate primary key")));
        self.statement(r)
    }

    /// Inserts a row unless its primary key is taken: `false` then, and nothing changes (no
    /// error, so a caller that would otherwise probe for the key first need not). For a
    /// table without a primary key, as [`insert`](Self::insert) (always `true`).
    pub fn insert_new<V: AsValueRef>(&mut self, table: &str, row: &[V]) -> Result<bool> {
        let r = self.insert_inner(table, row).map(|put| put.is_some());
        self.statement(r)
    }

    /// [`insert`](Self::insert): `None` if the key is taken (nothing written), else the
    /// rowid the engine assigned, if it did.
    fn insert_inner<V: AsValueRef>(
        &mut self,
        table: &str,
        row: &[V],
    ) -> Result<Option<Option<i64>>> {
        let mut rowid = None;
        let id = self.table_id(table)?;
        let t = &self.tables[&id];
        Self::check_row(t, row)?;
        let key = if t.schema.primary_key.is_empty() {
            let r = t.next_rowid;
            rowid = Some(r);
            key_bytes(&[Value::Integer(r)])
        } else {
            Self::key_of(t, row)?
        };
        if key.len() > MAX_KEY {
            return Err(TableError::Constraint("primary key longer than 16 KiB"));
        }
        if !self.above_all_keys(id, &key)? && self.index_get(id, &key)?.is_some() {
            return Ok(None);
        }
        let t = &self.tables[&id];
        if let Some(r) = rowid {
            let old = t.next_rowid;
            if let Some(t) = self.tables.get_mut(&id) {
                t.next_rowid = r + 1;
            }
            self.txn().undo.push(Undo::Rowid(id, old));
        }
        #[cfg(feature = "secondary-index")]
        if !self.tables[&id].secondary.is_empty() {
            self.maintain(id, &key, None, Some(row))?;
        }
        let tuple = self.build_tuple(&key, row)?;
        let loc = self.place(id, None, &tuple)?;
        // Placing a tuple moves tuples within a block, never index entries: the key has
        // none yet.
        self.set_index_from(id, key, Some(loc), Some(None))?;
        Ok(Some(rowid))
    }

    /// Replaces the row with the same primary key; `false` if there is none.
    pub fn update<V: AsValueRef>(&mut self, table: &str, row: &[V]) -> Result<bool> {
        let r = self.update_inner(table, row);
        self.statement(r)
    }

    fn update_inner<V: AsValueRef>(&mut self, table: &str, row: &[V]) -> Result<bool> {
        let id = self.table_id(table)?;
        let t = &self.tables[&id];
        if t.schema.primary_key.is_empty() {
            return Err(TableError::Invalid(
                "a table without a primary key is updated by rowid (update_rowid)",
            ));
        }
        let key = Self::key_of(t, row)?;
        self.update_at(id, key, row)
    }

    /// Replaces the row with this rowid in a table without a primary key; `false` if there
    /// is none.
    pub fn update_rowid<V: AsValueRef>(
        &mut self,
        table: &str,
        rowid: i64,
        row: &[V],
    ) -> Result<bool> {
        let r = self
            .table_id(table)
            .and_then(|id| self.update_at(id, key_bytes(&[Value::Integer(rowid)]), row));
        self.statement(r)
    }

    /// Replaces the row stored under `key`.
    fn update_at<V: AsValueRef>(&mut self, id: u64, key: Vec<u8>, row: &[V]) -> Result<bool> {
        Self::check_row(&self.tables[&id], row)?;
        let Some(loc) = self.index_get(id, &key)? else {
            return Ok(false);
        };
        #[cfg(feature = "secondary-index")]
        if !self.tables[&id].secondary.is_empty()
            && self.indexed_values_change(id, loc, &key, row)?
        {
            let before = self.read_row(loc, &key)?;
            self.maintain(id, &key, Some(&before), Some(row))?;
        }
        let tuple = self.build_tuple(&key, row)?;
        self.free_overflow(loc)?;
        let new = self.place(id, Some(loc), &tuple)?;
        if new != loc {
            self.set_index_from(id, key, Some(new), Some(Some(loc)))?;
        } else {
            #[cfg(feature = "query-cache")]
            self.qcache.invalidate(id, &key);
        }
        Ok(true)
    }

    /// Deletes the row with this primary key (for a rowid table: `[Integer(rowid)]`);
    /// `false` if there is none.
    pub fn delete(&mut self, table: &str, key: &[Value]) -> Result<bool> {
        let r = self.delete_inner(table, key);
        self.statement(r)
    }

    fn delete_inner(&mut self, table: &str, key: &[Value]) -> Result<bool> {
        let id = self.table_id(table)?;
        let k = key_bytes(key);
        let Some(loc) = self.index_get(id, &k)? else {
            return Ok(false);
        };
        #[cfg(feature = "secondary-index")]
        if !self.tables[&id].secondary.is_empty() {
            let before = self.read_row(loc, &k)?;
            self.maintain(id, &k, Some(&before), None::<&[Value]>)?;
        }
        self.free_overflow(loc)?;
        self.clear_slot(id, loc)?;
        self.set_index_from(id, k, None, Some(Some(loc)))?;
        Ok(true)
    }

    /// Whether a row has this primary key (the index alone; the row is not read).
    pub fn contains(&mut self, table: &str, key: &[Value]) -> Result<bool> {
        let id = self.table_id(table)?;
        let k = key_bytes(key);
        Ok(self.index_get(id, &k)?.is_some())
    }

    /// The row with this primary key (for a rowid table: `[Integer(rowid)]`).
    pub fn get(&mut self, table: &str, key: &[Value]) -> Result<Option<Vec<Value>>> {
        self.get_visit(table, key, owned_row, Ok)
    }

    /// Like [`get`](Self::get), handing the row to `visit` as it decodes from its block
    /// (text and blobs borrowed), so a caller with its own value type builds it without an
    /// intermediate copy — or, when the query cache answers or keeps the row, the owned row
    /// to `owned`. `None` if there is no such row.
    pub fn get_visit<T>(
        &mut self,
        table: &str,
        key: &[Value],
        visit: impl FnOnce(RowValues<'_>) -> Result<T>,
        owned: impl FnOnce(Vec<Value>) -> Result<T>,
    ) -> Result<Option<T>> {
        let id = self.table_id(table)?;
        // The key is encoded into a buffer kept for the next read.
        let mut k = core::mem::take(&mut self.probe_key);
        k.clear();
        encode_key(key, &mut k);
        let r = self.get_visit_key(id, &k, visit, owned);
        self.probe_key = k;
        r
    }

    /// [`get_visit`](Self::get_visit) of the row with encoded primary key `k` in table `id`.
    fn get_visit_key<T>(
        &mut self,
        id: u64,
        k: &[u8],
        visit: impl FnOnce(RowValues<'_>) -> Result<T>,
        owned: impl FnOnce(Vec<Value>) -> Result<T>,
    ) -> Result<Option<T>> {
        #[cfg(feature = "query-cache")]
        if let Some(row) = self.qcache.get(id, k) {
            return owned(row).map(Some);
        }
        let Some(loc) = self.index_get(id, k)? else {
            return Ok(None);
        };
        #[cfg(feature = "query-cache")]
        if self.opts.query_cache_bytes > 0
            && !self.cache.contains(&loc.block)
            && self.qcache.admit(id, k, self.opts.query_cache_bytes)
        {
            let row = self.visit_row_read(loc, k, &mut owned_row)?;
            self.qcache.put(id, k, &row, self.opts.query_cache_bytes);
            self.evict();
            return owned(row).map(Some);
        }
        #[cfg(not(feature = "query-cache"))]
        let _ = owned;
        let mut visit = Some(visit);
        let r = self.visit_row_read(loc, k, &mut |values| match visit.take() {
            Some(f) => f(values),
            None => Err(TableError::Invalid("a row visited twice")),
        });
        self.evict();
        r.map(Some)
    }

    /// The largest primary key of a table (the rightmost leaf of the index tree and the
    /// changes since the last checkpoint).
    pub fn last_key(&mut self, table: &str) -> Result<Option<Vec<Value>>> {
        let id = self.table_id(table)?;
        let Some(t) = self.tables.get(&id) else {
            return Ok(None);
        };
        let n = t.schema.primary_key.len().max(1);
        let last = Pages::new(&mut self.sm, &mut self.ipages, id).last(&t.index)?;
        match last {
            None => Ok(None),
            Some(k) => Ok(Some(crate::row::decode_key(&k, n)?)),
        }
    }

    /// Every row: in key order for a tree index, in storage order for a hash index.
    pub fn scan(&mut self, table: &str) -> Result<Vec<Vec<Value>>> {
        self.range(table, Bound::Unbounded, Bound::Unbounded)
    }

    /// The rows whose primary key lies within the bounds, in key order (both index kinds
    /// walk the range in the same tree). With the `prefetch` feature blocks are read ahead
    /// in runs.
    pub fn range(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
    ) -> Result<Vec<Vec<Value>>> {
        self.range_with(table, lo, hi, Order::default())
    }

    /// Like [`range`](Self::range), in key order from either end and with at most
    /// `order.limit` rows read: `ORDER BY key DESC LIMIT 10` reads 10 rows.
    pub fn range_with(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        order: Order,
    ) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::new();
        self.range_visit(table, lo, hi, order, |r| {
            out.push(owned_row(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Like [`range_with`](Self::range_with), handing each row to `visit` as it decodes
    /// from its block (text and blobs borrowed from the block), so a caller with its own
    /// value type builds its rows without an intermediate copy.
    ///
    /// The primary index is read a chunk of at most [`CHUNK`] entries at a time (the tree
    /// and the changes since the last checkpoint merged, from either end), and each chunk's
    /// rows are visited before the next is read, so a scan's memory does not grow with the
    /// range and `order.limit` bounds the index entries read too. A full range in storage
    /// order (a hash index, not `order.keyed`) gathers the whole index first to sort it by
    /// location. An error may come after some rows were visited.
    pub fn range_visit(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        order: Order,
        mut visit: impl FnMut(RowValues<'_>) -> Result<()>,
    ) -> Result<()> {
        let id = self.table_id(table)?;
        let enc = |b: Bound<&[Value]>| -> Bound<Vec<u8>> {
            match b {
                Bound::Included(v) => Bound::Included(key_bytes(v)),
                Bound::Excluded(v) => Bound::Excluded(key_bytes(v)),
                Bound::Unbounded => Bound::Unbounded,
            }
        };
        let (lo, hi) = (enc(lo), enc(hi));
        let all = matches!((&lo, &hi), (Bound::Unbounded, Bound::Unbounded));
        let Some(t) = self.tables.get(&id) else {
            return Ok(());
        };
        if all && !order.keyed && t.index.kind == IndexKind::Hash {
            let mut chunk = Chunk::default();
            #[cfg(feature = "prefetch")]
            let mut ahead = ReadAhead::default();
            // Storage order, block by block, slot by slot: the whole index, sorted by
            // location (one buffer of keys, not one allocation a row).
            let mut cur = Cursor::new(Bound::Unbounded, Bound::Unbounded, false);
            let mut part = Chunk::default();
            let mut pages = Pages::new(&mut self.sm, &mut self.ipages, id);
            loop {
                pages.next_chunk(&t.index, &mut cur, CHUNK, &mut part)?;
                if part.is_empty() {
                    break;
                }
                chunk.append(&part);
            }
            let at: HashMap<BlockRef, usize> =
                t.blocks.iter().enumerate().map(|(i, b)| (*b, i)).collect();
            chunk.sort_by_loc(|l| (at.get(&l.block).copied(), l.slot));
            if order.desc {
                chunk.reverse();
            }
            if let Some(n) = order.limit {
                chunk.truncate(n);
            }
            #[cfg(feature = "prefetch")]
            ahead.start(chunk.locs());
            return self.visit_chunk(
                &chunk,
                0..chunk.len(),
                #[cfg(feature = "prefetch")]
                &mut ahead,
                &mut Lookahead::default(),
                &mut visit,
            );
        }
        // Key order: the index a chunk at a time, each chunk's rows visited before the next
        // is read, and clean blocks given back as the buffer allows after each.
        let mut scratch = std::mem::take(&mut self.scan);
        let resumed = match (&lo, scratch.resume.take()) {
            (Bound::Excluded(k), Some(r))
                if !order.desc && r.table == id && *k == r.last && r.hi == hi =>
            {
                Some(r.cur)
            }
            _ => None,
        };
        let resumes = resumed.is_some();
        let mut cur = match resumed {
            Some(c) => c,
            None => {
                scratch.chunk.clear();
                scratch.pos = 0;
                #[cfg(feature = "prefetch")]
                {
                    scratch.ahead.window = 1;
                }
                Cursor::new(lo, hi.clone(), order.desc)
            }
        };
        let r = self.visit_keyed(id, &mut cur, order.limit, resumes, &mut scratch, &mut visit);
        if matches!(r, Ok(true)) && !order.desc && scratch.pos > 0 {
            let (last, _) = scratch.chunk.get(scratch.pos - 1);
            scratch.resume = Some(Resume {
                table: id,
                last: last.to_vec(),
                hi,
                cur,
            });
        }
        self.scan = scratch;
        r.map(|_| ())
    }

    /// The key-order part of [`range_visit`](Self::range_visit): visits the rows of `cur`'s
    /// range, at most `limit`, the entries `scratch` holds first; `true` if it stopped at
    /// the limit. A call that `resumed` a scan reads the index a full [`CHUNK`] at a time;
    /// a first call no more entries than its limit.
    fn visit_keyed(
        &mut self,
        id: u64,
        cur: &mut Cursor,
        limit: Option<usize>,
        resumed: bool,
        scratch: &mut ScanScratch,
        visit: &mut impl FnMut(RowValues<'_>) -> Result<()>,
    ) -> Result<bool> {
        let mut left = limit.unwrap_or(usize::MAX);
        while left > 0 {
            if scratch.pos == scratch.chunk.len() {
                let Some(t) = self.tables.get(&id) else {
                    return Ok(false);
                };
                let want = if resumed { CHUNK } else { left.min(CHUNK) };
                Pages::new(&mut self.sm, &mut self.ipages, id).next_chunk(
                    &t.index,
                    cur,
                    want,
                    &mut scratch.chunk,
                )?;
                scratch.pos = 0;
                scratch.look.reset();
                if scratch.chunk.is_empty() {
                    return Ok(false);
                }
                #[cfg(feature = "prefetch")]
                scratch.ahead.start(scratch.chunk.locs());
            }
            let n = left.min(scratch.chunk.len() - scratch.pos);
            let rows = scratch.pos..scratch.pos + n;
            scratch.pos += n;
            left -= n;
            self.visit_chunk(
                &scratch.chunk,
                rows,
                #[cfg(feature = "prefetch")]
                &mut scratch.ahead,
                &mut scratch.look,
                visit,
            )?;
        }
        Ok(limit.is_some())
    }

    /// Visits the `rows` of a chunk (reading ahead from the locations [`ReadAhead::start`]
    /// was given), then gives clean blocks back as the buffer allows — on error too.
    fn visit_chunk(
        &mut self,
        chunk: &Chunk,
        rows: Range<usize>,
        #[cfg(feature = "prefetch")] ahead: &mut ReadAhead,
        look: &mut Lookahead,
        visit: &mut impl FnMut(RowValues<'_>) -> Result<()>,
    ) -> Result<()> {
        let r = self.visit_chunk_rows(
            chunk,
            rows,
            #[cfg(feature = "prefetch")]
            ahead,
            look,
            visit,
        );
        self.evict();
        r
    }

    /// Hands the rows `chunk` names to `visit`, in order, looking each block up once per
    /// run of rows in it (and with the `prefetch` feature reading blocks ahead within the
    /// chunk).
    fn visit_chunk_rows(
        &mut self,
        chunk: &Chunk,
        rows: Range<usize>,
        #[cfg(feature = "prefetch")] ahead: &mut ReadAhead,
        look: &mut Lookahead,
        visit: &mut impl FnMut(RowValues<'_>) -> Result<()>,
    ) -> Result<()> {
        let (mut i, end) = (rows.start, rows.end.min(chunk.len()));
        while i < end {
            let b = chunk.loc(i).block;
            #[cfg(feature = "prefetch")]
            if !self.cache.contains(&b) {
                let size = self.sm.allocator().extent(b).1;
                ahead.next_run(b, (READ_AHEAD_BYTES / size.max(1)).max(1) as usize);
                self.load_run(&ahead.run, &mut ahead.buf)?;
            }
            look.reach(i, chunk.len(), |j| chunk.loc(j).block, &self.cache);
            let at = self.sm.allocator().extent(b).0;
            let (block, checked) = self.block_checked(b)?;
            // The run of rows in this block; an overflow row ends it (its bytes are read
            // from other blocks, which needs the database).
            let mut overflow = false;
            while i < end {
                let (k, l) = chunk.get(i);
                if l.block != b {
                    break;
                }
                let body = tuple_body(block, checked, l, k, at)?;
                if body.first() == Some(&OVERFLOW) {
                    overflow = true;
                    break;
                }
                visit(row_values(body)?)?;
                i += 1;
            }
            if overflow {
                let (k, l) = chunk.get(i);
                self.visit_row(l, k, visit)?;
                i += 1;
            }
        }
        Ok(())
    }

    /// The row at `loc`, which the primary index gives for `key`.
    #[cfg(any(feature = "query-cache", feature = "secondary-index"))]
    fn read_row(&mut self, loc: Loc, key: &[u8]) -> Result<Vec<Value>> {
        self.visit_row(loc, key, &mut owned_row)
    }

    /// Hands the row at `loc`, which the primary index gives for `key`, to `f`.
    fn visit_row<T>(
        &mut self,
        loc: Loc,
        key: &[u8],
        f: &mut impl FnMut(RowValues<'_>) -> Result<T>,
    ) -> Result<T> {
        let at = self.sm.allocator().extent(loc.block).0;
        let (block, checked) = self.block_checked(loc.block)?;
        let body = tuple_body(block, checked, loc, key, at)?;
        if parse_overflow(body, at)?.is_none() {
            // An inline row decodes straight from the block.
            return f(row_values(body)?);
        }
        let body = body.to_vec();
        let row = self.row_bytes(&body, at)?;
        f(row_values(&row)?)
    }

    /// [`visit_row`](Self::visit_row) for a point read that changes nothing: on a device
    /// that [reads from memory](BlockDevice::reads_from_memory), a block not in RAM that the
    /// buffer does not [admit](Buffer::admit) is not read whole. Its header sector and then
    /// the tuple are read from the device and checked as a whole block's are (the header's
    /// checksum and fields, the slot's bounds, the tuple's checksum; the other slots are
    /// not read), and the row decodes from those bytes. Reads of several rows, and reads
    /// before a write to the block, take the whole block ([`visit_row`](Self::visit_row)):
    /// they would read it anyway.
    fn visit_row_read<T>(
        &mut self,
        loc: Loc,
        key: &[u8],
        f: &mut impl FnMut(RowValues<'_>) -> Result<T>,
    ) -> Result<T> {
        let b = loc.block;
        let (at, size) = self.sm.allocator().extent(b);
        if self.cache.contains(&b)
            || !self.sm.device().reads_from_memory()
            || self.cache.admit(b, size as usize, self.opts.buffer_bytes)
        {
            return self.visit_row(loc, key, f);
        }
        let mut bytes = core::mem::take(&mut self.direct);
        bytes.resize(HEADER_SECTOR, 0);
        let r = (|| {
            self.sm.device().read(at, &mut bytes)?;
            let slot = usize::from(loc.slot);
            let s = crate::slotted::slot_from_header(&bytes, size as usize, slot, at)?
                .ok_or_else(free_slot(at))?;
            let (start, end) = (
                usize::from(s.offset),
                usize::from(s.offset) + usize::from(s.len),
            );
            // A tuple within the header sector was read with it.
            let t = if end <= HEADER_SECTOR {
                start..end
            } else {
                bytes.resize(HEADER_SECTOR + usize::from(s.len), 0);
                self.sm
                    .device()
                    .read(at + u64::from(s.offset), &mut bytes[HEADER_SECTOR..])?;
                HEADER_SECTOR..bytes.len()
            };
            let t = &bytes[t];
            s.check(t, at)?;
            let body = keyed_body(t, key, at)?;
            if parse_overflow(body, at)?.is_some() {
                return Ok(None);
            }
            f(row_values(body)?).map(Some)
        })();
        self.direct = bytes;
        match r? {
            Some(v) => Ok(v),
            // A row kept in overflow blocks: the whole path reads them.
            None => self.visit_row(loc, key, f),
        }
    }

    fn set_index(&mut self, id: u64, key: Vec<u8>, loc: Option<Loc>) -> Result<()> {
        self.set_index_from(id, key, loc, None)
    }

    /// [`set_index`](Self::set_index) where the caller has just read the key's entry (`old`:
    /// `Some(entry)`), sparing a second index lookup.
    fn set_index_from(
        &mut self,
        id: u64,
        key: Vec<u8>,
        loc: Option<Loc>,
        old: Option<Option<Loc>>,
    ) -> Result<()> {
        #[cfg(feature = "query-cache")]
        self.qcache.invalidate(id, &key);
        if !self.tables.contains_key(&id) {
            return Ok(());
        }
        let (before, delta) = self.index_put(id, &key, loc, old)?;
        self.txn().undo.push(Undo::Index(id, key, before, delta));
        Ok(())
    }

    /// Logs a slot change to the tuple `tuple`.
    fn log_slot(&mut self, id: u64, b: BlockRef, slot: usize, old: Slot, new: Slot, tuple: &[u8]) {
        let txn = self.txn();
        if !txn.in_place {
            if txn.tuple_data.len() + tuple.len() <= JOURNALED_TUPLES_MAX {
                txn.tuple_data.extend_from_slice(tuple);
                txn.tuples.push((txn.ops.len(), txn.tuple_data.len()));
            } else {
                // The rest go home before the record; tuples overwritten in place stay in it.
                txn.in_place = true;
                let mut start = 0;
                let mut kept = 0;
                let mut n = 0;
                for i in 0..txn.tuples.len() {
                    let (at, end) = txn.tuples[i];
                    if txn.overwrite_ops.binary_search(&at).is_ok() {
                        txn.tuple_data.copy_within(start..end, kept);
                        kept += end - start;
                        txn.tuples[n] = (at, kept);
                        n += 1;
                    }
                    start = end;
                }
                txn.tuples.truncate(n);
                txn.tuple_data.truncate(kept);
            }
        }
        if txn.filled.last() != Some(&b) {
            txn.filled.push(b);
        }
        if txn.overwrite_ops.last() != Some(&txn.ops.len()) && txn.placed.last() != Some(&b) {
            txn.placed.push(b);
        }
        txn.ops.push(OP_SLOT);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        put_block(&mut txn.ops, b);
        txn.ops.extend_from_slice(&(slot as u16).to_le_bytes());
        txn.ops.extend_from_slice(&new.offset.to_le_bytes());
        txn.ops.extend_from_slice(&new.len.to_le_bytes());
        txn.ops.extend_from_slice(&new.crc.to_le_bytes());
        txn.undo.push(Undo::Slot(b, slot, old));
        txn.touch(b);
        self.cache.mark_dirty(b);
    }

    /// Logs a slot freed; `key` is the key of the tuple it held.
    fn log_free(&mut self, id: u64, b: BlockRef, slot: usize, old: Slot, key: &[u8]) {
        let txn = self.txn();
        txn.ops.push(OP_SLOT_FREE);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        put_block(&mut txn.ops, b);
        txn.ops.extend_from_slice(&(slot as u16).to_le_bytes());
        txn.ops.extend_from_slice(&(key.len() as u16).to_le_bytes());
        txn.ops.extend_from_slice(key);
        txn.undo.push(Undo::Slot(b, slot, old));
        txn.touch(b);
        self.cache.mark_dirty(b);
    }

    fn clear_slot(&mut self, id: u64, loc: Loc) -> Result<()> {
        let slot = usize::from(loc.slot);
        let at = self.sm.allocator().extent(loc.block).0;
        let mut key = core::mem::take(&mut self.freed_key);
        key.clear();
        match self.tuple_at(loc)? {
            Some(t) => key.extend_from_slice(split_tuple(t, at)?.0),
            None => return Ok(()),
        }
        let block = self.block_mut(loc.block)?;
        let old = block.slot(slot);
        block.delete(slot)?;
        let empty = block.live_slots().next().is_none();
        self.log_free(id, loc.block, slot, old, &key);
        self.freed_key = key;
        // An empty block other than the one inserts go to is given back.
        if empty && self.tables[&id].blocks.last() != Some(&loc.block) {
            self.remove_block(id, loc.block);
        }
        Ok(())
    }

    /// Takes a block out of a table; it is freed once the transaction is durable.
    fn remove_block(&mut self, id: u64, b: BlockRef) {
        let Some(t) = self.tables.get_mut(&id) else {
            return;
        };
        let Some(pos) = t.blocks.iter().position(|x| *x == b) else {
            return;
        };
        t.blocks.remove(pos);
        let txn = self.txn();
        txn.ops.push(OP_REMOVE_BLOCK);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        put_block(&mut txn.ops, b);
        txn.marks.push((b, false));
        txn.frees.push(b);
        txn.undo.push(Undo::RemoveBlock(id, b, pos));
    }

    /// Copies the live tuples of a table's last block into a fresh block (same slots) when
    /// at least half of it is dead space, so inserts can go on without growing the table.
    fn compact_last(&mut self, id: u64) -> Result<()> {
        let Some(&b) = self.tables[&id].blocks.last() else {
            return Ok(());
        };
        let at = self.sm.allocator().extent(b).0;
        let block = self.block_mut(b)?;
        let size = block.size();
        if block.dead_bytes() * 2 < size {
            return Ok(());
        }
        let Some(mut copy) = block.compacted(size, at)? else {
            return Ok(());
        };
        let mut tuples = Vec::new();
        for slot in copy.live_slots().collect::<Vec<_>>() {
            if let Some(t) = copy.get(slot, at)? {
                tuples.push((slot, copy.slot(slot), t.to_vec()));
            }
        }
        // The copy's sectors all need writing; it becomes the cached image of the new block.
        copy.mark_all_dirty();
        let nb = self.add_block(id, size, move |len| {
            if len == copy.size() {
                Ok(copy)
            } else {
                Err(TableError::Invalid(
                    "the allocator gave a block of another size",
                ))
            }
        })?;
        let mut keys = Vec::new();
        for (slot, s, t) in tuples {
            keys.push((split_tuple(&t, at)?.0.to_vec(), slot));
            let before = Slot {
                offset: 0,
                len: 0,
                crc: 0,
            };
            self.log_slot(id, nb, slot, before, s, &t);
        }
        for (key, slot) in keys {
            self.set_index(
                id,
                key,
                Some(Loc {
                    block: nb,
                    slot: slot as u16,
                }),
            )?;
        }
        self.remove_block(id, b);
        Ok(())
    }

    /// Stores a tuple: over `old` in its own block if it fits there, else in the table's
    /// last block, else in a new block (the old slot is then freed).
    fn place(&mut self, id: u64, old: Option<Loc>, tuple: &[u8]) -> Result<Loc> {
        if let Some(l) = old {
            let slot = usize::from(l.slot);
            if self.may_overwrite(l.block, tuple.len()) {
                self.load_block(l.block)?;
                let mut data = std::mem::take(&mut self.txn().overwritten_data);
                let done = self
                    .cache
                    .get_mut(&l.block)
                    .and_then(|block| block.overwrite(slot, tuple, &mut data));
                let txn = self.txn();
                txn.overwritten_data = data;
                if let Some((before, s)) = done {
                    let end = txn.overwritten_data.len();
                    txn.overwritten.push((l.block, usize::from(s.offset), end));
                    txn.undo.push(Undo::Overwrite(txn.overwritten.len() - 1));
                    let at = txn.ops.len();
                    txn.overwrite_ops.push(at);
                    self.log_slot(id, l.block, slot, before, s, tuple);
                    return Ok(l);
                }
            }
            let block = self.block_mut(l.block)?;
            let before = block.slot(slot);
            if let Some(s) = block.put(slot, tuple) {
                self.log_slot(id, l.block, slot, before, s, tuple);
                return Ok(l);
            }
        }
        let last = self.tables[&id].blocks.last().copied();
        let mut target = None;
        if let Some(b) = last {
            let block = self.block_mut(b)?;
            if block.fits(tuple.len()) {
                if let Some(slot) = block.free_slot() {
                    target = Some((b, slot));
                }
            }
        }
        if target.is_none() && old.is_none() {
            self.compact_last(id)?;
            if let Some(&b) = self.tables[&id].blocks.last() {
                let block = self.block_mut(b)?;
                if block.fits(tuple.len()) {
                    target = block.free_slot().map(|slot| (b, slot));
                }
            }
        }
        let (b, slot) = match target {
            Some(t) => t,
            None => (self.new_block(id, tuple.len())?, 0),
        };
        let block = self.block_mut(b)?;
        let before = block.slot(slot);
        let s = block
            .put(slot, tuple)
            .ok_or(TableError::Invalid("a tuple does not fit a fresh block"))?;
        self.log_slot(id, b, slot, before, s, tuple);
        if let Some(l) = old {
            self.clear_slot(id, l)?;
        }
        Ok(Loc {
            block: b,
            slot: slot as u16,
        })
    }

    /// Whether a tuple of `len` bytes may be written over the live one it replaces in block
    /// `b`, where it lies, instead of into free space (see [`SlottedBlock::overwrite`]).
    ///
    /// Live bytes are otherwise never overwritten: a record that does not land leaves the
    /// block as the last checkpoint or the records before made it. An overwrite keeps that
    /// promise because
    /// - the record carries the new tuple, and replay writes it over whatever the block holds
    ///   (modes metadata, data and full; the transaction's tuples still travel in its record,
    ///   and this one keeps doing so if later ones go home: [`log_slot`](Self::log_slot));
    /// - its sectors reach the device only once the record is durable: a checkpoint syncs
    ///   the records before it writes blocks home, a transaction that writes its tuples home
    ///   syncs first if the block holds an earlier transaction's overwrite ([`pinned`]), and
    ///   writes its own overwrites' old bytes ([`write_tuples`](Self::write_tuples));
    /// - no record since the last checkpoint wrote a tuple of this block home ([`homed`]):
    ///   replay from that checkpoint checks such a tuple on the device, and a later
    ///   overwrite that reached the device would make it fail;
    /// - the transaction put no tuple into this block but by overwrites
    ///   ([`Txn::placed`]): if it goes on to write its tuples home, such a tuple's operation
    ///   becomes one whose tuple replay checks on the device, where an overwrite of it
    ///   would later land.
    ///
    /// [`pinned`]: Self::pinned
    /// [`homed`]: Self::homed
    fn may_overwrite(&self, b: BlockRef, len: usize) -> bool {
        matches!(self.opts.mode, Mode::Metadata | Mode::Data | Mode::Full)
            && self.txn.as_ref().is_none_or(|t| {
                !t.in_place
                    && t.tuple_data.len() + len <= JOURNALED_TUPLES_MAX
                    && !t.placed.contains(&b)
            })
            && len <= JOURNALED_TUPLES_MAX
            && !self.homed.contains(&b)
    }

    /// The tuple for a row: inline, or for a long row a pointer to overflow blocks that are
    /// allocated and written now (they are not live until the transaction commits).
    fn build_tuple<V: AsValueRef>(&mut self, key: &[u8], row: &[V]) -> Result<Vec<u8>> {
        let tuple = make_tuple(key, row)?;
        let body_at = 2 + key.len();
        if tuple.len() - body_at <= OVERFLOW_AT {
            return Ok(tuple);
        }
        let body = &tuple[body_at..];
        if u32::try_from(body.len()).is_err() {
            return Err(TableError::Constraint("a row longer than 4 GiB"));
        }
        let exts = self.sm.reserve(body.len() as u64)?;
        let blocks: Vec<BlockRef> = exts.iter().map(|e| e.block).collect();
        if blocks.len() > usize::from(u16::MAX) {
            self.sm.unreserve(&blocks)?;
            return Err(TableError::Constraint(
                "a row needs too many overflow blocks",
            ));
        }
        let mut at = 0;
        for e in &exts {
            let n = (e.len as usize).min(body.len() - at);
            if n > 0 {
                self.sm.device().write(e.offset, &body[at..at + n])?;
            }
            at += n;
        }
        let txn = self.txn();
        txn.marks.extend(blocks.iter().map(|b| (*b, true)));
        txn.undo.push(Undo::Reserved(blocks.clone()));
        let mut t = tuple[..body_at].to_vec();
        t.extend_from_slice(&overflow_body(body.len(), crc32fast::hash(body), &blocks));
        Ok(t)
    }

    /// A row's bytes: the tuple body itself, or read back from its overflow blocks and
    /// checked against the CRC the tuple holds.
    fn row_bytes(&mut self, body: &[u8], at: u64) -> Result<Vec<u8>> {
        let Some((len, crc, blocks)) = parse_overflow(body, at)? else {
            return Ok(body.to_vec());
        };
        let mut out = vec![0u8; len];
        let mut done = 0;
        for b in blocks {
            let (off, size) = self.sm.allocator().extent(b);
            let n = (size as usize).min(len - done);
            self.sm.device().read(off, &mut out[done..done + n])?;
            done += n;
        }
        if done != len || crc32fast::hash(&out) != crc {
            return Err(TableError::Corrupt {
                structure: "overflow row",
                offset: at,
                reason: "checksum mismatch",
            });
        }
        Ok(out)
    }

    /// Gives back the overflow blocks of the tuple in `loc`, once the transaction is
    /// durable.
    fn free_overflow(&mut self, loc: Loc) -> Result<()> {
        let at = self.sm.allocator().extent(loc.block).0;
        let blocks = match self.tuple_at(loc)? {
            Some(t) => parse_overflow(split_tuple(t, at)?.1, at)?.map(|(_, _, b)| b),
            None => None,
        };
        if let Some(blocks) = blocks {
            let txn = self.txn();
            txn.marks.extend(blocks.iter().map(|b| (*b, false)));
            txn.frees.extend(blocks);
        }
        Ok(())
    }

    /// The tuple in slot `loc`, if the slot is live, its checksum computed only if it was not
    /// checked since the block came into RAM (a row just read for the statement was: see
    /// [`Checked`]).
    fn tuple_at(&mut self, loc: Loc) -> Result<Option<&[u8]>> {
        let slot = usize::from(loc.slot);
        let at = self.sm.allocator().extent(loc.block).0;
        let (block, checked) = self.block_checked(loc.block)?;
        let known = checked.has(slot);
        let t = block.get_with(slot, at, !known)?;
        if t.is_some() && !known {
            checked.set(slot);
        }
        Ok(t)
    }

    /// A new block for table `id` whose first tuple has `tuple` bytes.
    fn new_block(&mut self, id: u64, tuple: usize) -> Result<BlockRef> {
        let want = SlottedBlock::size_for(tuple).max(self.opts.block_size as usize);
        let big = tuple > JOURNALED_TUPLES_MAX;
        let b = match self.take_spill(id, want, tuple, big) {
            Some(b) => b,
            None => self.add_block(id, want, |len| SlottedBlock::for_tuple(len, id, tuple))?,
        };
        if big {
            self.txn().big = Some((want, b));
        }
        Ok(b)
    }

    /// Makes the spill block table `id`'s new block for a first tuple of `tuple` bytes, with
    /// room for the transaction's record, if the tuple is `big` (it does not travel in a
    /// record), the spill block is the size a request of `want` bytes gets, and header, room
    /// and tuple fit it.
    fn take_spill(&mut self, id: u64, want: usize, tuple: usize, big: bool) -> Option<BlockRef> {
        let b = self.spill.filter(|_| big)?;
        let len = self.sm.allocator().extent(b).1;
        if self.sm.allocator().fit_size(want as u64) != Some(len) {
            return None;
        }
        let block = SlottedBlock::for_tuple_with_room(len as usize, id, tuple, SPILL_ROOM)?;
        self.spill = None;
        self.put_new_block(id, b, block, false);
        let txn = self.txn();
        txn.undo.push(Undo::TookSpill(id, b));
        txn.spill_block = Some(b);
        Some(b)
    }

    /// Adds block `b` with its image to table `id` and logs it (with its allocator mark if
    /// `mark`).
    fn put_new_block(&mut self, id: u64, b: BlockRef, block: SlottedBlock, mark: bool) {
        let start = block.start() as u16;
        self.cache.insert(b, block);
        if let Some(t) = self.tables.get_mut(&id) {
            t.blocks.push(b);
        }
        let txn = self.txn();
        txn.ops.push(OP_ADD_BLOCK_AT);
        txn.ops.extend_from_slice(&id.to_le_bytes());
        put_block(&mut txn.ops, b);
        txn.ops.extend_from_slice(&start.to_le_bytes());
        if mark {
            txn.marks.push((b, true));
        }
    }

    /// Adds a block of at least `want` bytes to table `id`, its image made by `make` from
    /// the size the allocator gave.
    fn add_block(
        &mut self,
        id: u64,
        want: usize,
        make: impl FnOnce(usize) -> Result<SlottedBlock>,
    ) -> Result<BlockRef> {
        if want > 65536 {
            return Err(TableError::Constraint(
                "a row is larger than the largest block (64 KiB)",
            ));
        }
        // Right after the table's last block, so a table grows contiguously.
        let hint = self.tables.get(&id).and_then(|t| t.blocks.last().copied());
        let ext = self.sm.reserve_after(want as u64, hint)?;
        let [e] = ext[..] else {
            self.sm
                .unreserve(&ext.iter().map(|e| e.block).collect::<Vec<_>>())?;
            return Err(TableError::Invalid("the allocator split a block request"));
        };
        let block = match make(e.len as usize) {
            Ok(b) => b,
            Err(err) => {
                self.sm.unreserve(&[e.block])?;
                return Err(err);
            }
        };
        self.put_new_block(id, e.block, block, true);
        self.txn().undo.push(Undo::AddBlock(id, e.block));
        Ok(e.block)
    }
}

/// Primary-index overlay entries (all tables) after which a commit checkpoints: the
/// overlay, and the blocks with changes that wait for the same checkpoint, stay bounded
/// however large the tables grow (about 25 MB of overlay with 16-byte keys).
const OVERLAY_MAX: usize = 1 << 18;

/// How many blocks ahead a checkpoint's walk over the changed blocks hints their header
/// sectors into the CPU's cache (their bytes' handles twice as far ahead).
const HOME_HINT_AHEAD: usize = 4;
/// Tuples whose row is longer than this keep the row in overflow blocks.
const OVERFLOW_AT: usize = 16 * 1024;
/// First byte of a tuple body that points to overflow blocks (a row starts with its format
/// version, 1).
const OVERFLOW: u8 = 0xF0;

/// The body of an overflow tuple: marker, row length u32, row CRC-32, block count u16, blocks.
fn overflow_body(len: usize, crc: u32, blocks: &[BlockRef]) -> Vec<u8> {
    let mut b = Vec::with_capacity(11 + 9 * blocks.len());
    b.push(OVERFLOW);
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(&(blocks.len() as u16).to_le_bytes());
    for x in blocks {
        put_block(&mut b, *x);
    }
    b
}

/// The overflow blocks a tuple body points to, with the row's length and CRC; `None` for an
/// inline row.
fn parse_overflow(body: &[u8], at: u64) -> Result<Option<(usize, u32, Vec<BlockRef>)>> {
    if body.first() != Some(&OVERFLOW) {
        return Ok(None);
    }
    let bad = TableError::Corrupt {
        structure: "tuple",
        offset: at,
        reason: "malformed overflow pointer",
    };
    if body.len() < 11 {
        return Err(bad);
    }
    let len = u32_at(body, 1) as usize;
    let crc = u32_at(body, 5);
    let n = usize::from(u16::from_le_bytes([body[9], body[10]]));
    if body.len() != 11 + 9 * n {
        return Err(bad);
    }
    let blocks = body[11..]
        .chunks_exact(9)
        .map(|b| BlockRef {
            class: b[0],
            chunk: u32_at(b, 1),
            index: u32_at(b, 5),
        })
        .collect();
    Ok(Some((len, crc, blocks)))
}

/// The most bytes the prefetcher reads at once: a full scan through SQL with a 2 MiB block
/// cache ran 10–15% faster a row with 64 KiB reads than with 128 or 256 KiB (what is read
/// stays in the CPU's cache until the scan gets to it, and a file device serves a read of
/// this size by a copy out of its mapping rather than a `pread`).
#[cfg(feature = "prefetch")]
const READ_AHEAD_BYTES: u64 = 64 << 10;

/// The prefetcher (LUNAR §3.3, the `prefetch` feature): during a scan, a block not in RAM is
/// read together with the blocks the scan needs next that follow it on the device; the window
/// doubles with every read-ahead the scan uses (up to [`READ_AHEAD_BYTES`]), so a short scan
/// reads little and a long one reads in large sequential requests. Point lookups never read
/// ahead.
#[cfg(feature = "prefetch")]
#[derive(Debug)]
struct ReadAhead {
    order: Vec<BlockRef>,
    at: usize,
    window: usize,
    /// The run [`next_run`](Self::next_run) chose, and the bytes it is read into.
    run: Vec<BlockRef>,
    buf: Vec<u8>,
}

#[cfg(feature = "prefetch")]
impl Default for ReadAhead {
    fn default() -> Self {
        ReadAhead {
            order: Vec::new(),
            at: 0,
            window: 1,
            run: Vec::new(),
            buf: Vec::new(),
        }
    }
}

#[cfg(feature = "prefetch")]
impl ReadAhead {
    /// The blocks the scan needs next are those of `locs` (the rows of one chunk); the
    /// window carries over from the chunk before.
    fn start(&mut self, locs: impl Iterator<Item = Loc>) {
        self.order.clear();
        self.at = 0;
        for l in locs {
            if self.order.last() != Some(&l.block) {
                self.order.push(l.block);
            }
        }
    }

    /// Sets [`run`](Self::run) to the blocks to read for a miss on `b`: `b` and the next
    /// blocks of the scan that are its neighbours on the device, at most the window, which
    /// grows up to `most` blocks.
    fn next_run(&mut self, b: BlockRef, most: usize) {
        // A window grown on smaller blocks would read past the cap on bigger ones.
        self.window = self.window.min(most);
        while self.at < self.order.len() && self.order[self.at] != b {
            self.at += 1;
        }
        self.run.clear();
        self.run.push(b);
        let mut k = self.at + 1;
        let mut prev = b;
        while self.run.len() < self.window && k < self.order.len() {
            let next = self.order[k];
            if next.class != prev.class || next.chunk != prev.chunk || next.index != prev.index + 1
            {
                break;
            }
            self.run.push(next);
            prev = next;
            k += 1;
        }
        self.window = (self.window * 2).min(most);
    }
}

/// The smallest byte string greater than every string that starts with `k` (None: there
/// is none, `k` is all 0xFF).
#[cfg(feature = "secondary-index")]
fn prefix_successor(mut k: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(last) = k.last_mut() {
        if *last == 0xFF {
            k.pop();
        } else {
            *last += 1;
            return Some(k);
        }
    }
    None
}

/// A secondary index entry's key before and after a change (`None`: no entry).
#[cfg(feature = "secondary-index")]
type KeyChange = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Bytes a key column's encoding is given room for, so a key is encoded without growing its
/// vector: a number's (at most 12), a text's or blob's bytes with its tag and terminator
/// (more only where it holds zero bytes).
fn key_room(v: ValueRef<'_>) -> usize {
    match v {
        ValueRef::Text(t) => t.len() + 3,
        ValueRef::Blob(b) => b.len() + 3,
        _ => 12,
    }
}

fn key_bytes<V: AsValueRef>(v: &[V]) -> Vec<u8> {
    let mut k = Vec::with_capacity(v.iter().map(|x| key_room(x.value_ref())).sum());
    encode_key(v, &mut k);
    k
}

fn make_tuple<V: AsValueRef>(key: &[u8], row: &[V]) -> Result<Vec<u8>> {
    let klen =
        u16::try_from(key.len()).map_err(|_| TableError::Constraint("primary key too long"))?;
    // Room for the header (up to 3 bytes a column for values under 1 MB) and the payloads
    // (at most 8 bytes a number), so the encoding does not grow the vector.
    let payloads: usize = row
        .iter()
        .map(|v| match v.value_ref() {
            ValueRef::Text(t) => t.len(),
            ValueRef::Blob(b) => b.len(),
            _ => 8,
        })
        .sum();
    let mut t = Vec::with_capacity(2 + key.len() + 2 + 3 * row.len() + payloads);
    t.extend_from_slice(&klen.to_le_bytes());
    t.extend_from_slice(key);
    encode_row(row, &mut t);
    Ok(t)
}

/// A row's values, copied out of the block.
fn owned_row(values: RowValues<'_>) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(values.remaining());
    for v in values {
        out.push(v?.to_value());
    }
    Ok(out)
}

/// The body of the tuple at `loc` in `block` (at device offset `at`), which the primary
/// index gives for `key`: checked against its slot's CRC (unless `checked` says it matched
/// since the block came into RAM or last changed) and its key, so a corrupt tuple or a
/// wrong index entry is an error, never another row.
fn tuple_body<'b>(
    block: &'b SlottedBlock,
    checked: &mut Checked,
    loc: Loc,
    key: &[u8],
    at: u64,
) -> Result<&'b [u8]> {
    let slot = usize::from(loc.slot);
    let known = checked.has(slot);
    let t = block
        .get_with(slot, at, !known)?
        .ok_or_else(free_slot(at))?;
    if !known {
        checked.set(slot);
    }
    keyed_body(t, key, at)
}

/// Whether a mode syncs the journal in bulk (at checkpoints) rather than after each
/// commit: every mode but `full`. Its ring's holes are then filled for appends
/// ([`BlockDevice::prepare_appends`]: on a file, 64 KiB pages, where an append through the
/// mapping faults a sixteenth as often but a sync after one small record would write 64 KiB).
fn bulk_synced(mode: Mode) -> bool {
    mode != Mode::Full
}

/// The body of tuple `t`, of the block at `at`, which the primary index gives for `key`: an
/// error if the tuple holds another key.
fn keyed_body<'t>(t: &'t [u8], key: &[u8], at: u64) -> Result<&'t [u8]> {
    let (k, body) = split_tuple(t, at)?;
    if k != key {
        return Err(TableError::Corrupt {
            structure: "primary index",
            offset: at,
            reason: "points at another key's tuple",
        });
    }
    Ok(body)
}

/// The error for a primary-index entry naming a free slot of the block at `at`.
fn free_slot(at: u64) -> impl FnOnce() -> TableError {
    move || TableError::Corrupt {
        structure: "primary index",
        offset: at,
        reason: "points at a free slot",
    }
}

fn split_tuple(t: &[u8], at: u64) -> Result<(&[u8], &[u8])> {
    let bad = TableError::Corrupt {
        structure: "tuple",
        offset: at,
        reason: "key length past the tuple",
    };
    let n = usize::from(u16::from_le_bytes([
        *t.first().ok_or(bad.clone())?,
        *t.get(1).ok_or(bad.clone())?,
    ]));
    if 2 + n > t.len() {
        return Err(bad);
    }
    Ok((&t[2..2 + n], &t[2 + n..]))
}

// ----- extents for the other engines ------------------------------------------------------

impl<D: BlockDevice> Database<D> {
    /// Whether the open transaction (if any) has changed nothing yet.
    pub fn txn_is_empty(&self) -> bool {
        self.txn
            .as_ref()
            .is_none_or(|t| t.ops.is_empty() && t.marks.is_empty() && t.undo.is_empty())
    }

    /// Makes room in the journal for a record of `marks` block marks: a full journal is
    /// checkpointed first (the table engine's changes go home before the journal is
    /// emptied), which cannot happen in the middle of a transaction that changed tables.
    fn journal_room(&mut self, marks: usize) -> Result<()> {
        if self.failed {
            return Err(TableError::NeedsRecovery);
        }
        if self.sm.journal_fits(marks, 0) {
            return Ok(());
        }
        if self.flight.is_some() {
            self.land_all()?;
            if self.sm.journal_fits(marks, 0) {
                return Ok(());
            }
        }
        if !self.txn_is_empty() {
            return Err(TableError::JournalFull {
                needed: 5 + 10 * marks as u64,
                capacity: self.sm.journal_capacity(),
            });
        }
        self.checkpoint_now()
    }

    /// Allocates extents for another engine, synced or not (see `ExtentSpace`).
    fn allocate_foreign(&mut self, bytes: u64, sync: bool) -> Result<Vec<crate::space::Extent>> {
        let max = u64::from(self.sm.allocator().config().max_block.max(512));
        self.journal_room(bytes.div_ceil(max) as usize + 1)?;
        let r = if sync {
            self.sm.allocate(bytes)
        } else {
            self.sm.allocate_unsynced(bytes)
        };
        self.device_failed(r)
    }

    /// `r`, leaving the database [`failed`](Self::failed) if the device failed: the space
    /// manager takes back in RAM what its record did, but a record that failed may still
    /// have landed.
    fn device_failed<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(TableError::Device(_)) = r {
            self.failed = true;
        }
        r
    }
}

impl<D: BlockDevice> crate::space::ExtentSpace for Database<D> {
    fn allocate_extents(&mut self, bytes: u64) -> Result<Vec<crate::space::Extent>> {
        self.allocate_foreign(bytes, true)
    }
    /// The record of the marks is written, not synced: the next sync of the device — the
    /// owner's, or a commit's or checkpoint's of this database — makes it durable, and it
    /// lies in the journal before every record written after it, so a record of this
    /// database that survives a cut implies it survived too.
    fn allocate_extents_unsynced(&mut self, bytes: u64) -> Result<Vec<crate::space::Extent>> {
        self.allocate_foreign(bytes, false)
    }
    /// The extents are free at once, durably — but not for the next checkpoint's index
    /// pages (see `start_checkpoint`).
    fn free_extents(&mut self, extents: &[crate::space::Extent]) -> Result<()> {
        self.journal_room(extents.len())?;
        let r = self.sm.free(extents);
        self.device_failed(r)?;
        self.extents_freed.extend(extents.iter().map(|e| e.block));
        Ok(())
    }
    fn allocated_extent(&self, block: BlockRef) -> Option<crate::space::Extent> {
        self.sm.allocated_extent(block)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.sm.read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.sm.write_at(offset, data)
    }
    fn write_at_once(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.sm.write_at_once(offset, data)
    }
    fn sync_space(&mut self) -> Result<()> {
        self.sm.sync()
    }
    fn device_writer(&mut self) -> Option<Box<dyn ember_device::DeviceWriter>> {
        self.sm.device().writer()
    }
    fn prepare_space(&mut self, offset: u64, len: u64) {
        self.sm.device().prepare(offset, len);
    }
    fn prepare_appends_space(&mut self, offset: u64, len: u64) {
        self.sm.device().prepare_appends(offset, len);
    }
}
