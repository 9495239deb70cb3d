//! The database: group commit, memtable rotation, flushes, compaction steps, reads,
//! iterators, recovery and the memory budget.
//!
//! Order of writes (the crash argument is in ARCHITECTURE.md, engine `lsm`):
//!
//! * commit: one log record per commit group, then one `sync` if any batch asked for it;
//!   the memtable is updated after the record is written.
//! * rotation: the kept log is taken again, or a new log blob is created (its allocation
//!   durable at the sync that precedes every manifest write after an allocation), then a
//!   manifest naming the old (sealed, with its record count) and the new log is written and
//!   synced; the old memtable becomes immutable. If only logs switch (a kept log, a reserved
//!   log number, nothing flushed) the manifest waits for the next sync, which comes before
//!   any other manifest is written. If an older immutable memtable is still unflushed, its
//!   tables are written and synced first, and that same manifest names them instead of its
//!   log, which is removed after; with a background thread, a merge flushes a waiting
//!   memtable itself (`flush_in_between`).
//! * flush / compaction: the new tables are written and synced, then a manifest naming them
//!   (and no longer naming the flushed log or the merged tables) is written and synced, and
//!   only then are the old blobs removed — once no iterator reads them.
//! * open: the manifest, then every live log is replayed into a memtable, which is written
//!   as a level-0 table with a fresh log and a new manifest before the old logs go.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cache::{Cache, Cached};
use crate::coding::IdHash;
use crate::compaction::{self, LEVELS, Levels, Pick};
use crate::env::{BlobId, Env};
use crate::error::{LsmError, Result};
use crate::iter::{Fetch, Merge, Source};
use crate::manifest::{LogMeta, Manifest};
use crate::memtable::{ENTRY_OVERHEAD, Memtable, Value, WriteBatch};
use crate::sstable::block::{Cursor, DataBlock, Stored};
use crate::sstable::bloom::{Bloom, PrefixRule, key_hash};
use crate::sstable::{self, Handle, Index, TableBuilder, TableMeta};
use crate::vlog::{self, ValueMeta, ValuePtr, ValueWriter};
use crate::wal::{self, Wal};

/// Settings of a database. [`Options::with_budget`] derives every size from one memory cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The engine's RAM cap in bytes: memtables + pinned indexes and filters + cache.
    pub memory_budget: usize,
    /// A memtable is frozen when it is charged this many bytes.
    pub write_buffer: usize,
    /// Target size of a table written by a compaction.
    pub table_size: usize,
    /// Target size of a data block.
    pub block_size: usize,
    /// Bloom filter bits per key.
    pub bloom_bits_per_key: usize,
    /// Level-0 tables that trigger a compaction into level 1.
    pub l0_trigger: usize,
    /// Bytes level 1 may hold.
    pub level1_bytes: u64,
    /// Growth of each further level.
    pub level_multiplier: u64,
    /// Levels whose index blocks and bloom filters stay in RAM (the paper: 2, levels 0 and 1).
    pub pinned_levels: usize,
    /// Bytes of each log blob.
    pub log_capacity: u64,
    /// Keys whose prefixes also enter the bloom filters of the tables written (so
    /// [`Db::probe`] can skip tables by prefix); `None`: full keys only.
    pub prefix_rule: Option<PrefixRule>,
    /// Values of at least this many bytes are written to value blobs when they leave the
    /// memtable, and their tables hold pointers to them ([`crate::vlog`]): compactions then
    /// move keys and pointers, not the values. `None`: every value stays in its table.
    pub separate_values: Option<usize>,
}

/// [`Options::with_budget`]'s threshold of [`Options::separate_values`].
pub const SEPARATE_VALUES: usize = 512;

impl Options {
    /// Settings for a RAM cap of `bytes`: memtables of an eighth of it each, tables of the
    /// same size, level 0 compacted at eight tables into a level 1 of twenty.
    ///
    /// Level 0 at eight tables, not LevelDB's four: random keys make every level-0
    /// compaction rewrite all of level 1, so each flushed byte costs `(trigger + level 1) /
    /// trigger` bytes there, and a bigger level 1 leaves one level fewer below it.
    /// 100,000 random 1 KiB puts wrote 837 MB to the device at four and five tables, 626 MB
    /// at eight and twenty (`kv_cost` with its overrides); a point read then asks up to
    /// eight level-0 filters, which are in RAM.
    pub fn with_budget(bytes: usize) -> Self {
        let wb = (bytes / 8).max(4096);
        Options {
            memory_budget: bytes,
            write_buffer: wb,
            table_size: wb,
            block_size: 4096,
            bloom_bits_per_key: 10,
            l0_trigger: 8,
            level1_bytes: 20 * wb as u64,
            level_multiplier: 10,
            pinned_levels: 2,
            log_capacity: wb as u64 + wb as u64 / 2 + 4096,
            prefix_rule: None,
            separate_values: Some(SEPARATE_VALUES),
        }
    }
}

impl Options {
    /// Bytes of each memtable's key filter: a sixteenth of the write buffer (at least some
    /// 36 bits per key, since every entry is charged more than 64 bytes), so that a point
    /// read of a key a memtable does not hold seldom searches it.
    pub fn memtable_filter_bytes(&self) -> usize {
        self.write_buffer / 16
    }
}

impl Default for Options {
    fn default() -> Self {
        Self::with_budget(8 << 20)
    }
}

/// Where the engine's RAM goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUsage {
    /// The active and immutable memtables.
    pub memtables: usize,
    /// Index blocks and bloom filters of the pinned levels.
    pub pinned: usize,
    /// The block cache.
    pub cache: usize,
}

impl MemoryUsage {
    /// The sum.
    pub fn total(&self) -> usize {
        self.memtables + self.pinned + self.cache
    }
}

/// A value blob as [`Db::value_blobs`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueBlob {
    /// Its blob id.
    pub id: BlobId,
    /// Bytes of values written to it.
    pub values: u64,
    /// Bytes of them the tables still point to.
    pub live: u64,
}

struct Pinned {
    index: Arc<Index>,
    bloom: Arc<Bloom>,
    charge: usize,
}

struct Core<E: Env> {
    env: EnvCell<E>,
    opts: Options,
    mem: Arc<Memtable>,
    wal: Wal,
    log: LogMeta,
    imm: Option<(Arc<Memtable>, LogMeta)>,
    levels: Arc<Levels>,
    /// Value blobs not removed yet: those the levels point into, and those only merged
    /// tables an iterator still reads point into.
    values: BTreeMap<BlobId, ValueMeta>,
    /// Bytes the levels' tables point to, per value blob (recomputed where the levels
    /// change, [`Core::set_levels`]).
    live: HashMap<BlobId, u64, IdHash>,
    next_blob: BlobId,
    /// The next log number.
    next_log: u64,
    /// Log numbers below this are reserved by the manifest (see [`crate::manifest`]): a log
    /// switch whose snapshot waits for a sync takes only these.
    log_numbers: u64,
    generation: u64,
    /// The generation of the last manifest snapshot, if it was written without a sync and
    /// no sync has followed (a log switch's, [`Core::write_manifest_unsynced`]).
    unsynced: Option<u64>,
    seq: u64,
    pinned: HashMap<BlobId, Pinned, IdHash>,
    pinned_bytes: usize,
    cache: Cache,
    obsolete: Vec<Arc<TableMeta>>,
    /// Logs of flushed memtables kept to be written again (at most [`SPARE_LOGS`]).
    spare: Vec<LogMeta>,
    /// Blobs no manifest names any more (a flushed log, a failed job's tables) whose removal
    /// waits for the space to take it (see [`transient`]).
    doomed: Vec<BlobId>,
    pointers: Vec<Vec<u8>>,
    poisoned: Option<LsmError>,
    /// The commit group being written (its capacity reused from commit to commit).
    group: Vec<Pending>,
    /// The log record being built (its capacity reused from commit to commit).
    rec: Vec<u8>,
    /// The block being read (its capacity reused from read to read).
    scratch: Vec<u8>,
    /// The value being read from a value blob (its capacity reused).
    vbuf: Vec<u8>,
    /// The cursor range reads search blocks with (its key buffer reused).
    cursor: Cursor,
    /// A background thread flushes and compacts: commits leave compactions to it.
    background: bool,
    /// The background thread is writing the immutable memtable's tables (without the lock).
    flushing: bool,
    /// The background thread is merging a compaction's tables (without the lock).
    compacting: bool,
    /// The background thread's last job met a [`transient`] error: writers do not wait for
    /// it (the table transaction that holds the space up may be the writer's own).
    stalled: bool,
}

/// The environment, shared by whoever holds the core's lock and a background flush or
/// compaction that runs without it: each call locks it for its own duration. Lock order:
/// the core, then the environment; nothing holding the environment's lock takes the core's.
struct EnvCell<E>(Arc<Mutex<E>>);

impl<E> Clone for EnvCell<E> {
    fn clone(&self) -> Self {
        EnvCell(Arc::clone(&self.0))
    }
}

impl<E: Env> Env for EnvCell<E> {
    fn create(&mut self, id: BlobId, capacity: u64) -> Result<Vec<u8>> {
        lock(&self.0).create(id, capacity)
    }
    fn ready(&mut self, id: BlobId) -> Result<()> {
        lock(&self.0).ready(id)
    }
    fn ready_appends(&mut self, id: BlobId) -> Result<()> {
        lock(&self.0).ready_appends(id)
    }
    fn open(&mut self, id: BlobId, locator: &[u8]) -> Result<()> {
        lock(&self.0).open(id, locator)
    }
    fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()> {
        lock(&self.0).write(id, offset, data)
    }
    fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()> {
        lock(&self.0).read(id, offset, buf)
    }
    fn capacity(&self, id: BlobId) -> Result<u64> {
        lock(&self.0).capacity(id)
    }
    fn sync(&mut self) -> Result<()> {
        lock(&self.0).sync()
    }
    fn remove(&mut self, id: BlobId) -> Result<()> {
        lock(&self.0).remove(id)
    }
    fn remove_all(&mut self, ids: &[BlobId]) -> Result<()> {
        lock(&self.0).remove_all(ids)
    }
    fn write_root(&mut self, slot: usize, data: &[u8]) -> Result<()> {
        lock(&self.0).write_root(slot, data)
    }
    fn read_root(&mut self, slot: usize, offset: u64, buf: &mut [u8]) -> Result<()> {
        lock(&self.0).read_root(slot, offset, buf)
    }
    fn root_capacity(&self) -> u64 {
        lock(&self.0).root_capacity()
    }
    fn held_ranges(&self) -> Vec<(u64, u64)> {
        lock(&self.0).held_ranges()
    }
    fn placement(
        &mut self,
        id: BlobId,
        offset: u64,
        len: usize,
    ) -> Result<Option<crate::env::Placement>> {
        lock(&self.0).placement(id, offset, len)
    }
    fn device_writer(&mut self) -> Option<Box<dyn ember_device::DeviceWriter>> {
        lock(&self.0).device_writer()
    }
    fn sync_mark(&self) -> u64 {
        lock(&self.0).sync_mark()
    }
    fn synced_through(&mut self, mark: u64) {
        lock(&self.0).synced_through(mark)
    }
}

/// With a background thread, a commit that would rotate the memtable waits while level 0
/// holds this many times `l0_trigger` tables (LevelDB stops writes at 12 for a trigger of 4).
pub const L0_STOP: usize = 3;

/// Logs of flushed memtables kept to be written again: a rotation then takes one instead of
/// allocating a blob (which costs the space manager a journal record and the next manifest
/// a sync before it), and on a file its records overwrite blocks the file has instead of
/// filling holes (a 1 KiB `pwrite` into a hole costs about 1.7 times one over written
/// blocks).
const SPARE_LOGS: usize = 1;

/// Log numbers each synced manifest snapshot reserves beyond the next one (see
/// [`crate::manifest`]): log switches in a row whose snapshots wait for a sync before one
/// that syncs.
const LOG_NUMBERS_RESERVED: u64 = 64;

/// A log record buffer (or a buffer a value blob's value was read into) above this many
/// bytes is not kept for the next commit (or read).
const KEEP_RECORD_BYTES: usize = 1 << 20;

struct Pending {
    ticket: u64,
    batch: WriteBatch,
    sync: bool,
    bytes: usize,
}

#[derive(Default)]
struct Queue {
    next: u64,
    pending: Vec<Pending>,
    /// Results of batches another writer committed, by ticket, until their writers take them.
    done: Vec<(u64, Result<()>)>,
    leader: bool,
    /// Writers waiting on `committed` (no wake-up call when there are none).
    waiting: usize,
}

struct Shared<E: Env> {
    core: Mutex<Core<E>>,
    queue: Mutex<Queue>,
    work: Condvar,
    committed: Condvar,
    /// Signalled when the background thread ends a flush or compaction (writers waiting
    /// for room wait on it).
    idle: Condvar,
    shutdown: AtomicBool,
    /// Tests: the background thread, once it let go of the lock for a merge, sets the flag
    /// and waits for a word on the channel.
    #[cfg(test)]
    pause: Mutex<Option<(Arc<AtomicBool>, std::sync::mpsc::Receiver<()>)>>,
    /// Tests: flushes the background thread ran in the middle of a merge.
    #[cfg(test)]
    between_flushes: std::sync::atomic::AtomicU64,
    /// Whether a background thread waits on `work`.
    background: AtomicBool,
    log_capacity: u64,
}

/// An LSM-tree database over an [`Env`] (see the crate docs).
pub struct Db<E: Env> {
    shared: Arc<Shared<E>>,
    background: Option<JoinHandle<()>>,
}

impl<E: Env> std::fmt::Debug for Db<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` for a signal or 50 ms, whichever comes first (every waiter checks its
/// condition again, so a missed signal costs one pause, never a hang).
fn pause<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait_timeout(g, Duration::from_millis(50))
        .map(|(g, _)| g)
        .unwrap_or_else(|p| p.into_inner().0)
}

/// What a flush or compaction wrote: its tables, and the value blobs they point into that
/// it wrote.
#[derive(Default)]
struct Built {
    tables: Vec<Arc<TableMeta>>,
    values: Vec<ValueMeta>,
}

/// Builds tables from entries in key order (split at `table_size` if asked) and writes
/// them, unsynced; values of at least `separate` bytes go to value blobs (split at
/// `table_size` too), written likewise.
struct TableSink {
    builder: Option<TableBuilder>,
    values: Option<ValueWriter>,
    out: Built,
    split: bool,
    separate: Option<usize>,
    /// About how many bytes of entries are still to come (what the tables' buffers are
    /// reserved for).
    coming: usize,
}

impl TableSink {
    /// A sink for about `coming` bytes of entries.
    fn new(split: bool, coming: u64, separate: Option<usize>) -> Self {
        TableSink {
            builder: None,
            values: None,
            out: Built::default(),
            split,
            separate,
            coming: usize::try_from(coming).unwrap_or(usize::MAX),
        }
    }

    /// The table being built (begun if there is none).
    fn builder(&mut self, out: &mut impl TableOut) -> &mut TableBuilder {
        let coming = self.coming;
        let split = self.split;
        let separate = self.separate.is_some();
        self.builder.get_or_insert_with(|| {
            let id = out.blob_id();
            let opts = out.opts();
            let mut b = TableBuilder::with_rule(
                id,
                opts.block_size,
                opts.bloom_bits_per_key,
                opts.prefix_rule,
            );
            // Room for what is still to come, or for one table of a split: it ends after the
            // entry that takes it past `table_size`, then come its index and filter. Only a
            // hint: a table outgrowing it grows its buffer, and one that cannot be had is
            // not reserved. (With values kept apart, most of what comes goes elsewhere.)
            let mut most = if split {
                coming.min(opts.table_size)
            } else {
                coming
            };
            if separate {
                most /= 8;
            }
            b.reserve(
                most.saturating_add(most / 8)
                    .saturating_add(opts.block_size.saturating_mul(2)),
            );
            b
        })
    }

    /// Adds an entry with its value (`None`: a tombstone).
    fn add(&mut self, out: &mut impl TableOut, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        match value {
            Some(v) if self.separate.is_some_and(|n| v.len() >= n) => {
                let w = match &mut self.values {
                    Some(w) => w,
                    None => {
                        let id = out.blob_id();
                        let most = if self.split {
                            self.coming.min(out.opts().table_size)
                        } else {
                            self.coming
                        };
                        self.values.insert(ValueWriter::new(id, most))
                    }
                };
                let p = w.add(v);
                if self.split
                    && w.size() >= out.opts().table_size
                    && let Some(w) = self.values.take()
                {
                    self.out.values.push(write_values(out, w)?);
                }
                self.add_pointer(out, key, &p)
            }
            _ => {
                self.builder(out).add(key, value);
                self.cut(out)
            }
        }
    }

    /// Adds an entry whose value lies in a value blob already.
    fn add_pointer(&mut self, out: &mut impl TableOut, key: &[u8], p: &ValuePtr) -> Result<()> {
        self.builder(out).add_pointer(key, p);
        self.cut(out)
    }

    /// Writes the table if it is full (and the sink splits).
    fn cut(&mut self, out: &mut impl TableOut) -> Result<()> {
        let table_size = out.opts().table_size;
        if self.split
            && self
                .builder
                .as_ref()
                .is_some_and(|b| b.size() >= table_size)
            && let Some(b) = self.builder.take()
        {
            self.out.tables.push(write_table(out, b)?);
        }
        Ok(())
    }

    fn finish(mut self, out: &mut impl TableOut) -> Result<Built> {
        if let Some(w) = self.values.take()
            && !w.is_empty()
        {
            self.out.values.push(write_values(out, w)?);
        }
        if let Some(b) = self.builder.take()
            && b.entries() > 0
        {
            self.out.tables.push(write_table(out, b)?);
        }
        Ok(self.out)
    }
}

/// Where a flush or compaction puts the blobs it builds: the core itself (under its lock),
/// or a background job's [`Detached`] handle.
trait TableOut {
    fn opts(&self) -> &Options;
    /// A new blob number (from the manifest's counter).
    fn blob_id(&mut self) -> BlobId;
    /// Creates blob `id` and writes `bytes` to it, unsynced; returns its locator.
    fn write_blob(&mut self, id: BlobId, bytes: &[u8]) -> Result<Vec<u8>>;
    /// Makes the blobs written so far durable.
    fn sync(&mut self) -> Result<()>;
}

fn write_table(out: &mut impl TableOut, b: TableBuilder) -> Result<Arc<TableMeta>> {
    let (bytes, mut meta) = b.finish();
    meta.locator = out.write_blob(meta.id, &bytes)?;
    Ok(Arc::new(meta))
}

fn write_values(out: &mut impl TableOut, w: ValueWriter) -> Result<ValueMeta> {
    let (bytes, mut meta) = w.finish();
    meta.locator = out.write_blob(meta.id, &bytes)?;
    Ok(meta)
}

fn write_blob(env: &mut impl Env, id: BlobId, bytes: &[u8]) -> Result<Vec<u8>> {
    let locator = env.create(id, bytes.len() as u64)?;
    env.write(id, 0, bytes)?;
    Ok(locator)
}

impl<E: Env> TableOut for Core<E> {
    fn opts(&self) -> &Options {
        &self.opts
    }
    fn blob_id(&mut self) -> BlobId {
        let id = self.next_blob;
        self.next_blob += 1;
        id
    }
    fn write_blob(&mut self, id: BlobId, bytes: &[u8]) -> Result<Vec<u8>> {
        write_blob(&mut self.env, id, bytes)
    }
    fn sync(&mut self) -> Result<()> {
        self.env.sync()?;
        self.unsynced = None;
        Ok(())
    }
}

/// The tables a flush builds from memtable `imm`, written and synced.
fn build_flush(imm: &Memtable, out: &mut impl TableOut) -> Result<Built> {
    let mut sink = TableSink::new(false, imm.bytes() as u64, out.opts().separate_values);
    imm.for_each_newest(|k, v| sink.add(out, k, v))?;
    let built = sink.finish(out)?;
    out.sync()?;
    Ok(built)
}

/// A compaction picked, to be merged: its tables, the levels when it was picked, and the
/// value blobs whose values it copies to a new blob (those below [`vlog::LIVE_FLOOR`]).
struct Compaction {
    pick: Pick,
    snapshot: Arc<Levels>,
    relocate: HashSet<BlobId, IdHash>,
}

/// What a merge found at a key.
enum Got {
    Tombstone,
    /// The value, in the merge's value buffer.
    Value,
    Pointer(ValuePtr),
}

/// What [`Core::start_compaction`] did.
enum Started {
    /// No compaction is due.
    Idle,
    /// A table moved down a level (no merge needed); the manifest says so.
    Moved,
    /// A merge to run.
    Merge(Compaction),
}

/// Entries a merge writes between two calls of its `between` hook.
const MERGE_STRIDE: u32 = 64;

/// Merges a compaction's tables into new tables of the level below (or of the same level,
/// for a pick that collects value blobs), written and synced; `between` is called every
/// [`MERGE_STRIDE`] entries (the background thread flushes a waiting memtable there, see
/// [`flush_in_between`]).
fn run_compaction(
    c: &Compaction,
    io: &mut (impl Fetch + TableOut),
    between: &mut dyn FnMut(),
) -> Result<Built> {
    let p = &c.pick;
    let out = p.into;
    let mut sources: Vec<Source> = if p.level == 0 {
        p.inputs
            .iter()
            .map(|t| Source::tables(vec![t.clone()], None))
            .collect()
    } else {
        vec![Source::tables(p.inputs.clone(), None)]
    };
    sources.push(Source::tables(p.next.clone(), None));
    let mut merge = Merge::new(sources, Bound::Unbounded, Bound::Unbounded);
    let coming = p.inputs.iter().chain(&p.next).map(|t| t.size).sum();
    let mut sink = TableSink::new(true, coming, io.opts().separate_values);
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut stride = 0u32;
    loop {
        stride += 1;
        if stride == MERGE_STRIDE {
            stride = 0;
            between();
        }
        let got = merge.next_with(io, |k, v| -> Result<Got> {
            key.clear();
            key.extend_from_slice(k);
            Ok(match v {
                None => Got::Tombstone,
                Some(Stored::Inline(v)) => {
                    value.clear();
                    value.extend_from_slice(v);
                    Got::Value
                }
                // The merge does not say which table the pointer came from.
                Some(Stored::Pointer(b)) => Got::Pointer(ValuePtr::decode(b, 0, 0)?),
            })
        })?;
        match got.transpose()? {
            None => break,
            Some(Got::Tombstone) => {
                if compaction::deeper_may_hold(&c.snapshot, out, &key) {
                    sink.add(io, &key, None)?;
                }
            }
            Some(Got::Value) => sink.add(io, &key, Some(&value))?,
            Some(Got::Pointer(ptr)) if c.relocate.contains(&ptr.blob) => {
                io.value(&ptr, &mut value)?;
                sink.add(io, &key, Some(&value))?;
            }
            Some(Got::Pointer(ptr)) => sink.add_pointer(io, &key, &ptr)?,
        }
    }
    let built = sink.finish(io)?;
    io.sync()?;
    Ok(built)
}

/// Bytes `tables` point to, per value blob.
fn referenced<'a>(
    tables: impl IntoIterator<Item = &'a Arc<TableMeta>>,
) -> HashMap<BlobId, u64, IdHash> {
    let mut live: HashMap<BlobId, u64, IdHash> = HashMap::default();
    for t in tables {
        for &(blob, bytes) in &t.values {
            *live.entry(blob).or_default() += bytes;
        }
    }
    live
}

/// A table's answer for a key, with a pointer not followed yet.
enum Found<T> {
    /// The table does not know the key.
    Absent,
    /// The value or tombstone, given to the caller's function.
    Done(T),
    /// The value lies in a value blob.
    Pointer(ValuePtr),
}

/// [`Found`] of a block's answer for `key` (`call` on a value or tombstone there).
fn found<T>(
    r: Option<Option<Stored<'_>>>,
    t: &TableMeta,
    h: Handle,
    call: &mut impl FnMut(Option<&[u8]>) -> T,
) -> Result<Found<T>> {
    Ok(match r {
        None => Found::Absent,
        Some(None) => Found::Done(call(None)),
        Some(Some(Stored::Inline(v))) => Found::Done(call(Some(v))),
        Some(Some(Stored::Pointer(p))) => Found::Pointer(ValuePtr::decode(p, t.id, h.offset)?),
    })
}

fn charge(batch: &WriteBatch) -> usize {
    batch
        .ops
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD)
        .sum()
}

impl<E: Env> Core<E> {
    fn manifest(&self) -> Manifest {
        let mut logs = Vec::new();
        if let Some((_, l)) = &self.imm {
            logs.push(l.clone());
        }
        logs.push(self.log.clone());
        Manifest {
            spare: self.spare.clone(),
            generation: self.generation,
            next_blob: self.next_blob,
            log_numbers: self.log_numbers,
            logs,
            levels: self
                .levels
                .iter()
                .map(|l| l.iter().map(|t| (**t).clone()).collect())
                .collect(),
            // The blobs the levels point into: one only merged tables still point into is
            // not named, as those tables are not (it is removed once no iterator reads them).
            values: self
                .values
                .values()
                .filter(|v| self.live.contains_key(&v.id))
                .cloned()
                .collect(),
        }
    }

    /// Value blobs below [`vlog::LIVE_FLOOR`] of live bytes, least live first, with their
    /// share of live bytes.
    fn collectable(&self) -> Vec<(f64, BlobId)> {
        let live = &self.live;
        let mut out: Vec<(f64, BlobId)> = self
            .values
            .values()
            .filter(|v| v.values > 0)
            .map(|v| {
                let l = live.get(&v.id).copied().unwrap_or(0);
                (l as f64 / v.values as f64, v.id)
            })
            .filter(|&(share, _)| share < vlog::LIVE_FLOOR)
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }

    fn write_manifest(&mut self) -> Result<()> {
        self.settle_manifest()?;
        self.generation += 1;
        // Durable on return: the reservation of log numbers grows with it.
        self.log_numbers = self.log_numbers.max(self.next_log + LOG_NUMBERS_RESERVED);
        let m = self.manifest();
        m.write(&mut self.env)
    }

    /// Writes the manifest without a sync: only for a snapshot that switches logs and
    /// removes nothing. It is durable at the next sync — a sync commit's, the next
    /// snapshot's, or a background job's begun after it ([`Core::durable_through`]); until
    /// then a cut leaves the previous snapshot in force, whose active log is the one this
    /// one seals, and the records the new log took since are lost, as any unsynced commit's.
    fn write_manifest_unsynced(&mut self) -> Result<()> {
        self.settle_manifest()?;
        self.generation += 1;
        let m = self.manifest();
        m.write_unsynced(&mut self.env)?;
        self.unsynced = Some(self.generation);
        Ok(())
    }

    /// Makes an unsynced manifest snapshot durable before the next one overwrites the slot of
    /// the one before it.
    fn settle_manifest(&mut self) -> Result<()> {
        if self.unsynced.is_some() {
            self.env.sync()?;
            self.unsynced = None;
        }
        Ok(())
    }

    /// A sync begun after the manifest of generation `g` was written has completed: that
    /// snapshot and every earlier one are durable.
    fn durable_through(&mut self, g: u64) {
        if self.unsynced.is_some_and(|u| u <= g) {
            self.unsynced = None;
        }
    }

    /// Takes what a background job (`io`) returned: its syncs count for the manifests
    /// written before it was picked; a failure that only says the space cannot take an
    /// allocation now dooms the blobs it wrote (no manifest names them) and marks the
    /// thread stalled, so writers do not wait for it — `Ok(None)`: the job is to be tried
    /// again.
    fn job_ended<T>(&mut self, io: &Detached<'_, E>, r: Result<T>) -> Result<Option<T>> {
        if io.synced {
            self.durable_through(io.generation);
        }
        match r {
            Err(e) if transient(&e) => {
                self.doomed.extend(io.created.iter().copied());
                self.stalled = true;
                Ok(None)
            }
            r => r.map(Some),
        }
    }

    /// A new log blob of `log_capacity` bytes, or `at_least` if that is more (a batch larger
    /// than a log gets a log of its own size, so it still commits as one record).
    fn new_log(&mut self, at_least: u64) -> Result<(Wal, LogMeta)> {
        let number = self.next_log;
        self.next_log += 1;
        let capacity = self.opts.log_capacity.max(at_least);
        // A kept log is written again under a new number (no allocation, and on a file its
        // blocks are there already); else a new blob. Log numbers have their own counter
        // (reserved by synced manifests, see `crate::manifest`), blob ids theirs.
        if let Some(i) = self.spare.iter().position(|l| l.capacity >= capacity) {
            let mut log = self.spare.swap_remove(i);
            log.number = number;
            log.records = None;
            return Ok((Wal::new(log.id, number, log.capacity), log));
        }
        let id = self.blob_id();
        let locator = self.env.create(id, capacity)?;
        Ok((
            Wal::new(id, number, capacity),
            LogMeta {
                id,
                number,
                capacity,
                locator,
                records: None,
            },
        ))
    }

    fn cache_limit(&self) -> usize {
        let memtables = 2 * (self.opts.write_buffer + self.mem.filter_bytes());
        self.opts
            .memory_budget
            .saturating_sub(memtables + self.pinned_bytes)
    }

    fn set_levels(&mut self, levels: Levels) {
        self.levels = Arc::new(levels);
        self.live = referenced(self.levels.iter().flatten());
        self.refresh_pinned();
    }

    /// Keeps the index and filter of every table of the pinned levels in RAM, and only those.
    fn refresh_pinned(&mut self) {
        let levels = self.levels.clone();
        let want: Vec<&Arc<TableMeta>> = levels
            .iter()
            .take(self.opts.pinned_levels)
            .flatten()
            .collect();
        let keep: HashSet<BlobId, IdHash> = want.iter().map(|t| t.id).collect();
        self.pinned.retain(|id, _| keep.contains(id));
        for t in want {
            if self.pinned.contains_key(&t.id) {
                continue;
            }
            // A table whose blocks fail their checks is not pinned; a lookup then reports
            // the error.
            let (Ok(index), Ok(bloom)) = (
                sstable::read_index(&mut self.env, t),
                sstable::read_bloom(&mut self.env, t),
            ) else {
                continue;
            };
            let charge = index.charge() + bloom.charge();
            self.pinned.insert(
                t.id,
                Pinned {
                    index: Arc::new(index),
                    bloom: Arc::new(bloom),
                    charge,
                },
            );
        }
        self.pinned_bytes = self.pinned.values().map(|p| p.charge).sum();
        let limit = self.cache_limit();
        self.cache.shrink_to(limit);
    }

    /// `f` on table `t`'s bloom filter where it lies: pinned, cached, or read (and cached).
    fn with_bloom<T>(&mut self, t: &TableMeta, f: impl Fn(&Bloom) -> T) -> Result<T> {
        if let Some(p) = self.pinned.get(&t.id) {
            return Ok(f(&p.bloom));
        }
        let key = (t.id, t.bloom.offset);
        let held = self.cache.with(key, |c| match c {
            Cached::Bloom(b) => Some(f(b)),
            _ => None,
        });
        if let Some(Some(v)) = held {
            return Ok(v);
        }
        let b = sstable::read_bloom(&mut self.env, t)?;
        let v = f(&b);
        let (limit, charge) = (self.cache_limit(), b.charge());
        self.cache
            .insert(key, Cached::Bloom(Arc::new(b)), charge, limit);
        Ok(v)
    }

    /// `call` on the value of `key` if table `t` holds it (with a tombstone: `None`); `None`
    /// if the table does not know the key.
    fn get_from_table<T>(
        &mut self,
        t: &TableMeta,
        key: &[u8],
        hash: u64,
        follow: bool,
        call: &mut impl FnMut(Option<&[u8]>) -> T,
    ) -> Result<Option<T>> {
        if !self.with_bloom(t, |b| b.may_contain_hash(hash))? {
            return Ok(None);
        }
        let index = self.index(t)?;
        let Some(&(_, h)) = index.blocks.get(index.find(key)) else {
            return Ok(None);
        };
        let at = (t.id, h.offset);
        let r = match self.cache.get(at) {
            Some(Cached::Data(block)) => block.get(key).and_then(|v| found(v, t, h, call)),
            _ if self.cache.admit(at, self.cache_limit()) => {
                match sstable::read_data(&mut self.env, t, h, &mut self.scratch) {
                    Ok(block) => {
                        let block = Arc::new(block);
                        let limit = self.cache_limit();
                        self.cache
                            .insert(at, Cached::Data(block.clone()), block.charge(), limit);
                        block.get(key).and_then(|v| found(v, t, h, call))
                    }
                    Err(e) => Err(e),
                }
            }
            // Not met lately: searched where it was read, and not kept (the cache's docs).
            _ => sstable::read_data_in(&mut self.env, t, h, &mut self.scratch)
                .and_then(|block| block.get(key).and_then(|v| found(v, t, h, call))),
        };
        match r? {
            Found::Absent => Ok(None),
            Found::Done(v) => Ok(Some(v)),
            Found::Pointer(p) if follow => {
                vlog::read_value(&mut self.env, &p, &mut self.vbuf)?;
                let v = call(Some(&self.vbuf));
                if self.vbuf.capacity() > KEEP_RECORD_BYTES {
                    self.vbuf = Vec::new();
                }
                Ok(Some(v))
            }
            // A value is there; the caller does not read it.
            Found::Pointer(_) => Ok(Some(call(Some(&[])))),
        }
    }

    /// `f` on the value of `key` where it lies (no copy); `None` if there is none.
    fn get_with<T>(&mut self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        self.find(key, true, f)
    }

    /// Whether `key` has a value (one in a value blob is not read).
    fn contains(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.find(key, false, |_| ())?.is_some())
    }

    /// `f` on the value of `key` where it lies; `None` if there is none. Without `follow`,
    /// a value in a value blob is not read and `f` gets no bytes for it.
    fn find<T>(
        &mut self,
        key: &[u8],
        follow: bool,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>> {
        let mut f = Some(f);
        let mut call = |v: Option<&[u8]>| v.and_then(|v| f.take().map(|f| f(v)));
        // One hash of the key for every filter it meets on the way down.
        let hash = key_hash(key);
        if let Some(v) = self.mem.get_with_hash(key, hash, u64::MAX, &mut call) {
            return Ok(v);
        }
        if let Some((imm, _)) = &self.imm
            && let Some(v) = imm.get_with_hash(key, hash, u64::MAX, &mut call)
        {
            return Ok(v);
        }
        let levels = self.levels.clone();
        for t in levels[0].iter().filter(|t| t.covers(key)) {
            if let Some(v) = self.get_from_table(t, key, hash, follow, &mut call)? {
                return Ok(v);
            }
        }
        for level in levels.iter().skip(1) {
            let i = level.partition_point(|t| t.largest.as_slice() < key);
            if let Some(t) = level.get(i).filter(|t| t.covers(key))
                && let Some(v) = self.get_from_table(t, key, hash, follow, &mut call)?
            {
                return Ok(v);
            }
        }
        Ok(None)
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, <[u8]>::to_vec)
    }

    /// Every key in `lo..hi` with its newest value or tombstone, into `out` (sorted by key;
    /// a key found in a newer source hides it in older ones). With `prefix`, every key in
    /// the range has that prefix under the rule, and tables whose filter rules it out are
    /// skipped.
    fn probe(
        &mut self,
        lo: &[u8],
        hi: &[u8],
        prefix: Option<(PrefixRule, &[u8])>,
        out: &mut Vec<(Vec<u8>, Value)>,
    ) -> Result<()> {
        if hi <= lo {
            return Ok(());
        }
        self.mem
            .range_with(lo, hi, u64::MAX, |k, v| add_older(out, k, v));
        if let Some((imm, _)) = &self.imm {
            imm.range_with(lo, hi, u64::MAX, |k, v| add_older(out, k, v));
        }
        let levels = self.levels.clone();
        let meets = |t: &TableMeta| t.smallest.as_slice() < hi && lo <= t.largest.as_slice();
        for (n, level) in levels.iter().enumerate() {
            // Level 0's tables overlap (all are looked at, newest first); deeper levels are
            // in key order and disjoint.
            let from = if n == 0 {
                0
            } else {
                level.partition_point(|t| t.largest.as_slice() < lo)
            };
            for t in &level[from..] {
                if !meets(t) {
                    if n == 0 {
                        continue;
                    }
                    break;
                }
                if let Some((rule, p)) = prefix
                    && !self.with_bloom(t, |b| b.may_contain_prefix(rule, p))?
                {
                    continue;
                }
                self.scan_table(t, lo, hi, out)?;
            }
        }
        Ok(())
    }

    /// Adds every entry of table `t` in `lo..hi` to `out` (sorted by key) whose key `out`
    /// does not hold yet (newer sources came first); a value in a value blob is read only
    /// for an entry added.
    fn scan_table(
        &mut self,
        t: &TableMeta,
        lo: &[u8],
        hi: &[u8],
        out: &mut Vec<(Vec<u8>, Value)>,
    ) -> Result<()> {
        let index = self.index(t)?;
        let mut cur = std::mem::take(&mut self.cursor);
        let first = index.find(lo);
        let r = (|| {
            for (i, (_, h)) in index.blocks.iter().enumerate().skip(first) {
                let block = self.data(t, *h)?;
                if i == first {
                    block.seek(lo, &mut cur)?;
                } else {
                    block.first(&mut cur)?;
                }
                while cur.valid() {
                    if cur.key() >= hi {
                        return Ok(());
                    }
                    let k = cur.key();
                    if let Err(at) = out.binary_search_by(|(x, _)| x.as_slice().cmp(k)) {
                        let v = owned_value(&mut self.env, cur.value(&block), t, *h)?;
                        out.insert(at, (k.to_vec(), v));
                    }
                    block.step(&mut cur)?;
                }
            }
            Ok(())
        })();
        self.cursor = cur;
        r
    }

    /// The last `n` live items with keys in `lo..hi` (`hi` `None`: no upper bound), in
    /// descending key order, into `out`. The engine iterates forward only, so this reads
    /// backwards in rounds: each source (memtable, immutable memtable, each level-0 table,
    /// each deeper level) gives up to `k` of its entries (tombstones too) from the high end
    /// of the range. A source that stopped at its `k`th entry may hold more below its
    /// smallest entry read; above the largest such key — the round's floor — every source
    /// was read whole, so the newest versions there are exact. Their live items go out from
    /// the top; if fewer than `n` remain, the next round reads below the floor with `k`
    /// doubled. Without tombstones the first round (`k = n`) is the only one.
    fn probe_back(
        &mut self,
        lo: &[u8],
        hi: Option<&[u8]>,
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let mut hi = hi.map(<[u8]>::to_vec);
        let mut k = n;
        while out.len() < n && hi.as_deref().is_none_or(|h| lo < h) {
            let (seen, floor) = self.back_round(lo, hi.as_deref(), k)?;
            for (key, v) in seen.into_iter().rev() {
                if floor.as_deref().is_some_and(|f| key.as_slice() < f) {
                    break;
                }
                if let Some(v) = v {
                    out.push((key, v));
                    if out.len() == n {
                        return Ok(());
                    }
                }
            }
            let Some(f) = floor else {
                break; // every source was read down to `lo`
            };
            hi = Some(f);
            k = k.saturating_mul(2);
        }
        Ok(())
    }

    /// One round of [`probe_back`](Self::probe_back): up to `k` entries of each source from
    /// the high end of `lo..hi`, merged (sorted by key, the newest version of each), and the
    /// floor above which they are exact (`None`: every source was read down to `lo`).
    #[allow(clippy::type_complexity)]
    fn back_round(
        &mut self,
        lo: &[u8],
        hi: Option<&[u8]>,
        k: usize,
    ) -> Result<(Vec<(Vec<u8>, Value)>, Option<Vec<u8>>)> {
        let mut seen: Vec<(Vec<u8>, Value)> = Vec::new();
        let mut floor: Option<Vec<u8>> = None;
        // Sources come newest first: a key already seen is a newer version.
        let mut take = |seen: &mut Vec<(Vec<u8>, Value)>, got: Vec<(Vec<u8>, Value)>, more| {
            if more
                && let Some((smallest, _)) = got.last()
                && floor.as_ref().is_none_or(|f| f < smallest)
            {
                floor = Some(smallest.clone());
            }
            merge_older(seen, got);
        };
        let mems = std::iter::once(self.mem.clone()).chain(self.imm.as_ref().map(|i| i.0.clone()));
        for mem in mems {
            let mut got = Vec::new();
            let mut more = false;
            mem.range_back_with(lo, hi, u64::MAX, |key, v| {
                if got.len() == k {
                    more = true;
                    return false;
                }
                got.push((key.to_vec(), v.map(<[u8]>::to_vec)));
                true
            });
            take(&mut seen, got, more);
        }
        let levels = self.levels.clone();
        let meets = |t: &TableMeta| {
            lo <= t.largest.as_slice() && hi.is_none_or(|h| t.smallest.as_slice() < h)
        };
        for t in levels[0].iter().filter(|t| meets(t)) {
            let mut got = Vec::new();
            let more = self.table_back(t, lo, hi, k, &mut got)?;
            take(&mut seen, got, more);
        }
        for level in levels.iter().skip(1) {
            // Disjoint tables in key order: the level is one source, read from its top.
            let top = hi.map_or(level.len(), |h| {
                level.partition_point(|t| t.smallest.as_slice() < h)
            });
            let mut got = Vec::new();
            let mut more = false;
            for t in level[..top].iter().rev() {
                if t.largest.as_slice() < lo {
                    break;
                }
                more = self.table_back(t, lo, hi, k - got.len(), &mut got)?;
                if got.len() == k {
                    // Tables below may hold more of the range.
                    more = more || t.smallest.as_slice() > lo;
                    break;
                }
            }
            take(&mut seen, got, more);
        }
        Ok((seen, floor))
    }

    /// Up to `k` entries (tombstones too) of table `t` from the high end of `lo..hi`, pushed
    /// onto `out` in descending key order; whether the table may hold more of the range
    /// below them. Blocks are read from the last one that may hold a key below `hi` down;
    /// each is scanned forward twice (to count its entries in the range, then to copy the
    /// last of them), as blocks iterate forward only.
    fn table_back(
        &mut self,
        t: &TableMeta,
        lo: &[u8],
        hi: Option<&[u8]>,
        k: usize,
        out: &mut Vec<(Vec<u8>, Value)>,
    ) -> Result<bool> {
        if k == 0 {
            return Ok(true);
        }
        let index = self.index(t)?;
        let Some(end) = index.blocks.len().checked_sub(1) else {
            return Ok(false);
        };
        let last = hi.map_or(end, |h| index.find(h).min(end));
        let first = index.find(lo);
        let mut cur = std::mem::take(&mut self.cursor);
        let r = (|| {
            let mut got = 0;
            for i in (first..=last).rev() {
                let Some((_, h)) = index.blocks.get(i) else {
                    break;
                };
                let block = self.data(t, *h)?;
                let start = |cur: &mut Cursor| {
                    if i == first {
                        block.seek(lo, cur)
                    } else {
                        block.first(cur)
                    }
                };
                let below = |cur: &Cursor| cur.valid() && hi.is_none_or(|h| cur.key() < h);
                start(&mut cur)?;
                let mut count = 0;
                while below(&cur) {
                    count += 1;
                    block.step(&mut cur)?;
                }
                let want = count.min(k - got);
                start(&mut cur)?;
                for _ in 0..count - want {
                    block.step(&mut cur)?;
                }
                let at = out.len();
                for _ in 0..want {
                    let v = owned_value(&mut self.env, cur.value(&block), t, *h)?;
                    out.push((cur.key().to_vec(), v));
                    block.step(&mut cur)?;
                }
                out[at..].reverse();
                got += want;
                if got == k {
                    return Ok(want < count || i > first);
                }
            }
            Ok(false)
        })();
        self.cursor = cur;
        r
    }

    /// Freezes the memtable and starts a new log; flushes the older immutable memtable
    /// first if there still is one. One manifest names the flushed tables (and no longer its
    /// log) and the new log: the tables are synced before it, the flushed log removed after.
    fn rotate(&mut self, at_least: u64) -> Result<()> {
        let flushed = self.write_imm()?;
        let spare = self.spare.len();
        let (wal, log) = self.new_log(at_least)?;
        // A kept log taken again: nothing was allocated for the switch.
        let reused = self.spare.len() < spare;
        let flushed = match flushed {
            Some((built, log)) => {
                self.imm = None;
                self.install_level0(built);
                Some(self.retire(log))
            }
            None => None,
        };
        let mut old_log = std::mem::replace(&mut self.log, log);
        // Sealed: replay takes the logs after it only if it finds all of its records.
        old_log.records = Some(self.wal.records());
        let fresh = Arc::new(Memtable::with_filter(self.opts.memtable_filter_bytes()));
        let old_mem = std::mem::replace(&mut self.mem, fresh);
        self.wal = wal;
        self.imm = Some((old_mem, old_log));
        if flushed.is_none() && reused && self.wal.number < self.log_numbers {
            // Only logs switch: the snapshot may wait for the next sync (see
            // `write_manifest_unsynced`), which a sync commit into the new log makes anyway.
            self.write_manifest_unsynced()?;
        } else {
            self.write_manifest()?;
        }
        if let Some(gone) = flushed {
            if let Some(id) = gone {
                self.env.remove(id)?;
            }
            self.compact_inline()?;
        }
        Ok(())
    }

    /// Runs the compactions due, unless a background thread runs them.
    fn compact_inline(&mut self) -> Result<()> {
        if !self.background {
            while self.compact_once()? {}
        }
        Ok(())
    }

    /// Writes the immutable memtable as level-0 tables (and value blobs) and syncs them;
    /// returns what was written (not installed yet) and the id of its log, or `None` if there
    /// is none.
    fn write_imm(&mut self) -> Result<Option<(Built, LogMeta)>> {
        let Some((imm, log)) = self.imm.clone() else {
            return Ok(None);
        };
        if self.flushing {
            // Writers wait for room before they commit (`Db::make_room`), so this is a bug.
            return Err(LsmError::Poisoned(
                "the immutable memtable was flushed while the background thread flushed it".into(),
            ));
        }
        let built = build_flush(&imm, self)?;
        Ok(Some((built, log)))
    }

    /// A flushed memtable's log, which the next manifest no longer names as live: kept to be
    /// written again (the next manifest names it as kept) if there is room, else returned to
    /// be removed once that manifest is durable.
    fn retire(&mut self, mut log: LogMeta) -> Option<BlobId> {
        if self.spare.len() < SPARE_LOGS && log.capacity == self.opts.log_capacity {
            log.records = None;
            self.spare.push(log);
            None
        } else {
            Some(log.id)
        }
    }

    /// Installs a flush's tables as the newest of level 0, and its value blobs (no manifest
    /// written).
    fn install_level0(&mut self, built: Built) {
        let mut levels = (*self.levels).clone();
        for t in built.tables.into_iter().rev() {
            levels[0].insert(0, t);
        }
        self.values
            .extend(built.values.into_iter().map(|v| (v.id, v)));
        self.set_levels(levels);
    }

    fn flush_imm(&mut self) -> Result<()> {
        let Some((built, log)) = self.write_imm()? else {
            return Ok(());
        };
        self.imm = None;
        self.install_level0(built);
        let gone = self.retire(log);
        self.write_manifest()?;
        match gone {
            Some(id) => self.env.remove(id),
            None => Ok(()),
        }
    }

    /// Installs the tables a background flush built from memtable `imm`: one manifest names
    /// them instead of its log, which is removed after.
    fn finish_flush(&mut self, imm: &Arc<Memtable>, built: Built) -> Result<()> {
        let log = match &self.imm {
            Some((m, log)) if Arc::ptr_eq(m, imm) => log.clone(),
            _ => {
                return Err(LsmError::Poisoned(
                    "a background flush's memtable was flushed elsewhere".into(),
                ));
            }
        };
        self.imm = None;
        self.install_level0(built);
        let gone = self.retire(log);
        self.write_manifest()?;
        match gone {
            Some(id) => self.remove_unnamed(id),
            None => Ok(()),
        }
    }

    /// Flushes the immutable memtable and runs the compactions then due, as a rotation that
    /// flushes one does: a flush that skipped them would leave a table in level 0 per flush,
    /// and every read asks each of them.
    fn flush_and_compact(&mut self) -> Result<()> {
        self.flush_imm()?;
        self.compact_inline()
    }

    /// The next compaction: a level over its limit first, else the collection of the
    /// least live value blob that a table of level 1 or deeper points into.
    fn pick(&self) -> Option<Pick> {
        compaction::pick(
            &self.levels,
            self.opts.l0_trigger,
            self.opts.level1_bytes,
            self.opts.level_multiplier,
            &self.pointers,
        )
        .or_else(|| {
            self.collectable()
                .into_iter()
                .find_map(|(_, blob)| compaction::collect(&self.levels, blob))
        })
    }

    /// Picks the next compaction. A table that overlaps nothing below moves down at once
    /// (a manifest); a merge is returned for the caller to run, here or without the lock.
    fn start_compaction(&mut self) -> Result<Started> {
        if self.compacting {
            return Ok(Started::Idle);
        }
        let Some(p) = self.pick() else {
            return Ok(Started::Idle);
        };
        if let Some(t) = p.inputs.last()
            && p.into > p.level
            && let Some(ptr) = self.pointers.get_mut(p.level)
        {
            ptr.clone_from(&t.largest);
        }
        if p.level > 0 && p.next.is_empty() && p.into > p.level {
            // Nothing below overlaps: move the table down.
            let gone: Vec<BlobId> = p.inputs.iter().map(|t| t.id).collect();
            let mut levels = (*self.levels).clone();
            levels[p.level].retain(|t| !gone.contains(&t.id));
            levels[p.level + 1].extend(p.inputs.iter().cloned());
            levels[p.level + 1].sort_by(|a, b| a.smallest.cmp(&b.smallest));
            self.set_levels(levels);
            self.write_manifest()?;
            return Ok(Started::Moved);
        }
        Ok(Started::Merge(Compaction {
            pick: p,
            snapshot: self.levels.clone(),
            relocate: self.collectable().into_iter().map(|(_, b)| b).collect(),
        }))
    }

    /// Installs a merge's output: the current levels (a flush may have added level-0 tables
    /// meanwhile) without its inputs and with `tables`, under a new manifest; then the
    /// inputs go once no iterator reads them.
    fn finish_compaction(&mut self, c: Compaction, built: Built) -> Result<()> {
        let p = c.pick;
        let out = p.into;
        let gone: HashSet<BlobId, IdHash> = p.inputs.iter().chain(&p.next).map(|t| t.id).collect();
        let mut levels = (*self.levels).clone();
        for l in levels.iter_mut() {
            l.retain(|t| !gone.contains(&t.id));
        }
        levels[out].extend(built.tables);
        levels[out].sort_by(|a, b| a.smallest.cmp(&b.smallest));
        self.values
            .extend(built.values.into_iter().map(|v| (v.id, v)));
        self.set_levels(levels);
        self.write_manifest()?;
        self.obsolete.extend(p.inputs.into_iter().chain(p.next));
        drop(c.snapshot);
        self.purge()
    }

    /// Runs one compaction if one is due (and none runs in the background).
    fn compact_once(&mut self) -> Result<bool> {
        match self.start_compaction()? {
            Started::Idle => Ok(false),
            Started::Moved => Ok(true),
            Started::Merge(c) => {
                let built = run_compaction(&c, &mut Direct(self), &mut || {})?;
                self.finish_compaction(c, built)?;
                Ok(true)
            }
        }
    }

    /// Removes merged tables no iterator reads any more, the value blobs no table left
    /// points into, and the doomed blobs.
    fn purge(&mut self) -> Result<()> {
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.obsolete)
            .into_iter()
            .partition(|t| Arc::strong_count(t) == 1);
        // No manifest names a value blob the levels do not point into (see `manifest`);
        // one merged tables still read point into stays.
        let held = referenced(&keep);
        let dead: Vec<BlobId> = self
            .values
            .keys()
            .copied()
            .filter(|id| !self.live.contains_key(id) && !held.contains_key(id))
            .collect();
        for id in &dead {
            self.values.remove(id);
        }
        let doomed = std::mem::take(&mut self.doomed);
        let ids: Vec<BlobId> = gone
            .iter()
            .map(|t| t.id)
            .chain(doomed.iter().copied())
            .chain(dead.iter().copied())
            .collect();
        if ids.is_empty() {
            self.obsolete = keep;
            return Ok(());
        }
        if let Err(e) = self.env.remove_all(&ids) {
            // Whatever was not removed stays to be tried again.
            self.obsolete = keep;
            self.obsolete
                .extend(gone.into_iter().filter(|t| self.env.capacity(t.id).is_ok()));
            self.doomed = doomed
                .into_iter()
                .chain(dead)
                .filter(|&id| self.env.capacity(id).is_ok())
                .collect();
            return if transient(&e) { Ok(()) } else { Err(e) };
        }
        self.obsolete = keep;
        Ok(())
    }

    /// Removes a blob no manifest names any more; one the space cannot take now is doomed
    /// (removed by a later [`purge`](Self::purge)).
    fn remove_unnamed(&mut self, id: BlobId) -> Result<()> {
        match self.env.remove(id) {
            Err(e) if transient(&e) => {
                self.doomed.push(id);
                Ok(())
            }
            r => r,
        }
    }

    /// One unit of background work: a flush, or one compaction. `Ok(false)`: nothing to do.
    fn step(&mut self) -> Result<bool> {
        if let Some(e) = &self.poisoned {
            return Err(LsmError::Poisoned(e.to_string()));
        }
        let r = (|| -> Result<bool> {
            self.purge()?;
            if self.imm.is_some() && !self.flushing {
                self.flush_imm()?;
                return Ok(true);
            }
            self.compact_once()
        })();
        if let Err(e) = &r {
            self.poisoned = Some(e.clone());
        }
        r
    }

    /// Whether committing the group in `self.group` may rotate the memtable (and so flush
    /// the immutable one): an upper bound of what [`commit_group`](Self::commit_group) does.
    fn may_rotate(&self) -> bool {
        let charge: usize = self.group.iter().map(|p| charge(&p.batch)).sum();
        // The record's payload: the batch count (a varint of at most 10 bytes), the batches.
        let payload: usize = self.group.iter().map(|p| p.bytes).sum::<usize>() + 10;
        self.mem.bytes() + charge > self.opts.write_buffer || !self.wal.fits(payload)
    }

    /// Commits the batches in `self.group` (and empties it): one log record, at most one
    /// sync, then the memtable, into which the batches' keys and values are moved.
    fn commit(&mut self) -> Result<()> {
        let mut group = std::mem::take(&mut self.group);
        let mut rec = std::mem::take(&mut self.rec);
        let r = match &self.poisoned {
            Some(e) => Err(LsmError::Poisoned(e.to_string())),
            None => self.commit_group(&mut group, &mut rec),
        };
        if let Err(e) = &r
            && self.poisoned.is_none()
        {
            self.poisoned = Some(e.clone());
        }
        group.clear();
        self.group = group;
        if rec.capacity() <= KEEP_RECORD_BYTES {
            self.rec = rec;
        }
        r
    }

    fn commit_group(&mut self, group: &mut [Pending], rec: &mut Vec<u8>) -> Result<()> {
        wal::start_record(rec, group.len());
        for p in group.iter() {
            p.batch.encode(rec);
        }
        let payload = rec.len() - wal::HEADER;
        let bytes: usize = group.iter().map(|p| charge(&p.batch)).sum();
        if (self.mem.bytes() > 0 && self.mem.bytes() + bytes > self.opts.write_buffer)
            || !self.wal.fits(payload)
        {
            self.rotate(rec.len() as u64)?;
        }
        let sync = group.iter().any(|p| p.sync);
        if self.wal.wants_ready(sync) {
            self.wal.ready(&mut self.env, sync)?;
        }
        self.wal.append(&mut self.env, rec)?;
        if sync {
            self.env.sync()?;
            self.unsynced = None;
        }
        for p in group.iter_mut() {
            self.mem.insert_all(&mut self.seq, p.batch.ops.drain(..));
        }
        // Only a group larger than the write buffer on its own leaves the memtable over it
        // (any other rotates first, above). Frozen and flushed now, not at the next write,
        // so the memtables stay within the RAM budget while no write comes. The group is in
        // the log already: a cut from here on recovers it as after any commit.
        if self.mem.bytes() > self.opts.write_buffer {
            self.rotate(0)?;
            self.flush_and_compact()?;
        }
        Ok(())
    }

    fn index(&mut self, t: &TableMeta) -> Result<Arc<Index>> {
        if let Some(p) = self.pinned.get(&t.id) {
            return Ok(p.index.clone());
        }
        let key = (t.id, t.index.offset);
        if let Some(Cached::Index(i)) = self.cache.get(key) {
            return Ok(i);
        }
        let i = Arc::new(sstable::read_index(&mut self.env, t)?);
        let limit = self.cache_limit();
        self.cache
            .insert(key, Cached::Index(i.clone()), i.charge(), limit);
        Ok(i)
    }

    fn data(&mut self, t: &TableMeta, h: Handle) -> Result<Arc<DataBlock>> {
        let key = (t.id, h.offset);
        if let Some(Cached::Data(d)) = self.cache.get(key) {
            return Ok(d);
        }
        let d = Arc::new(sstable::read_data(&mut self.env, t, h, &mut self.scratch)?);
        let limit = self.cache_limit();
        self.cache
            .insert(key, Cached::Data(d.clone()), d.charge(), limit);
        Ok(d)
    }
}

impl<E: Env> Core<E> {
    /// Data block `blocks[0]` of `t` and the blocks after it that the cache does not hold
    /// either, up to `ahead` bytes of them, read with one read of the environment (each
    /// checked), kept in the cache and pushed onto `out` in order; a cached first block is
    /// taken alone.
    fn data_run(
        &mut self,
        t: &TableMeta,
        blocks: &[(Vec<u8>, Handle)],
        ahead: u64,
        out: &mut VecDeque<Arc<DataBlock>>,
    ) -> Result<()> {
        let Some((_, first)) = blocks.first() else {
            return Ok(());
        };
        if ahead == 0 || self.cache.contains((t.id, first.offset)) {
            out.push_back(self.data(t, *first)?);
            return Ok(());
        }
        let run = run_of(blocks, ahead, |h| !self.cache.contains((t.id, h.offset)));
        let mut read = Vec::with_capacity(run.len());
        sstable::read_data_run(&mut self.env, t, &run, ahead, &mut self.scratch, &mut read)?;
        let limit = self.cache_limit();
        for (h, d) in run.iter().zip(read) {
            let d = Arc::new(d);
            self.cache
                .insert((t.id, h.offset), Cached::Data(d.clone()), d.charge(), limit);
            out.push_back(d);
        }
        Ok(())
    }
}

/// The handles of the run of blocks read ahead from `blocks[0]`: the first block, and those
/// after it while they total at most `ahead` bytes (or the first one's size) and `take` says
/// so.
fn run_of(
    blocks: &[(Vec<u8>, Handle)],
    ahead: u64,
    mut take: impl FnMut(&Handle) -> bool,
) -> Vec<Handle> {
    let Some((_, first)) = blocks.first() else {
        return Vec::new();
    };
    let mut bytes = 0;
    blocks
        .iter()
        .map(|(_, h)| *h)
        .take_while(|h| {
            bytes += h.len;
            bytes <= ahead.max(first.len) && take(h)
        })
        .collect()
}

/// An entry's value or tombstone of table `t`'s block `h` as a caller keeps it, read from its
/// value blob if it lies in one.
fn owned_value(
    env: &mut impl Env,
    v: Option<Stored<'_>>,
    t: &TableMeta,
    h: Handle,
) -> Result<Value> {
    Ok(match v {
        None => None,
        Some(Stored::Inline(v)) => Some(v.to_vec()),
        Some(Stored::Pointer(p)) => {
            let p = ValuePtr::decode(p, t.id, h.offset)?;
            let mut v = Vec::new();
            vlog::read_value(env, &p, &mut v)?;
            Some(v)
        }
    })
}

/// Adds `k` with its value or tombstone to `out` (sorted by key) unless `out` holds it (a
/// newer version: sources come newest first).
fn add_older(out: &mut Vec<(Vec<u8>, Value)>, k: &[u8], v: Option<&[u8]>) {
    if let Err(i) = out.binary_search_by(|(x, _)| x.as_slice().cmp(k)) {
        out.insert(i, (k.to_vec(), v.map(<[u8]>::to_vec)));
    }
}

/// Merges a source's entries (`older`, in descending key order) into `seen` (ascending, from
/// newer sources, which win on equal keys) in one pass.
fn merge_older(seen: &mut Vec<(Vec<u8>, Value)>, older: Vec<(Vec<u8>, Value)>) {
    if older.is_empty() {
        return;
    }
    let mut out = Vec::with_capacity(seen.len() + older.len());
    let mut a = std::mem::take(seen).into_iter().peekable();
    let mut b = older.into_iter().rev().peekable();
    loop {
        let from_seen = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((x, _)), Some((y, _))) => x <= y,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if from_seen {
            if let Some((x, v)) = a.next() {
                if b.peek().is_some_and(|(y, _)| *y == x) {
                    b.next(); // the newer version hides it
                }
                out.push((x, v));
            }
        } else {
            out.extend(b.next());
        }
    }
    *seen = out;
}

/// A data block straight from the environment, past the cache (a merge's read).
fn read_uncached(
    env: &mut impl Env,
    scratch: &mut Vec<u8>,
    t: &TableMeta,
    h: Handle,
) -> Result<Arc<DataBlock>> {
    Ok(Arc::new(sstable::read_data(env, t, h, scratch)?))
}

/// [`read_uncached`] for `blocks[0]` and the run after it (see [`run_of`]), with one read.
fn read_run_uncached(
    env: &mut impl Env,
    scratch: &mut Vec<u8>,
    t: &TableMeta,
    blocks: &[(Vec<u8>, Handle)],
    ahead: u64,
    out: &mut VecDeque<Arc<DataBlock>>,
) -> Result<()> {
    let run = run_of(blocks, ahead, |_| true);
    let mut read = Vec::with_capacity(run.len());
    sstable::read_data_run(env, t, &run, ahead, scratch, &mut read)?;
    out.extend(read.into_iter().map(Arc::new));
    Ok(())
}

/// Reads for a compaction: data blocks straight from the environment (a merge reads each
/// block once; caching them would push out the blocks readers use), runs of adjacent blocks
/// with one read, as a scan reads them (see [`crate::iter::READ_AHEAD`]).
struct Direct<'a, E: Env>(&'a mut Core<E>);

impl<E: Env> Fetch for Direct<'_, E> {
    fn index(&mut self, t: &TableMeta) -> Result<Arc<Index>> {
        self.0.index(t)
    }
    fn data(&mut self, t: &TableMeta, h: Handle) -> Result<Arc<DataBlock>> {
        let core = &mut *self.0;
        read_uncached(&mut core.env, &mut core.scratch, t, h)
    }
    fn value(&mut self, p: &ValuePtr, buf: &mut Vec<u8>) -> Result<()> {
        vlog::read_value(&mut self.0.env, p, buf)
    }
    fn data_run(
        &mut self,
        t: &TableMeta,
        blocks: &[(Vec<u8>, Handle)],
        ahead: u64,
        out: &mut VecDeque<Arc<DataBlock>>,
    ) -> Result<()> {
        let core = &mut *self.0;
        read_run_uncached(&mut core.env, &mut core.scratch, t, blocks, ahead, out)
    }
}

impl<E: Env> TableOut for Direct<'_, E> {
    fn opts(&self) -> &Options {
        &self.0.opts
    }
    fn blob_id(&mut self) -> BlobId {
        self.0.blob_id()
    }
    fn write_blob(&mut self, id: BlobId, bytes: &[u8]) -> Result<Vec<u8>> {
        self.0.write_blob(id, bytes)
    }
    fn sync(&mut self) -> Result<()> {
        self.0.env.sync()?;
        self.0.unsynced = None;
        Ok(())
    }
}

/// A background flush or compaction, which runs without the core's lock: it reads and
/// writes blobs through its own handle on the environment, takes the core's lock only for
/// a blob number or a table's index (pinned or cached), and reads data blocks as [`Direct`]
/// does. Where the environment gives a device writer, the tables' bytes and their sync go
/// through it, so commits (which append to the log through the environment) do not wait
/// for that I/O either.
struct Detached<'a, E: Env> {
    core: &'a Mutex<Core<E>>,
    env: EnvCell<E>,
    writer: Option<Box<dyn ember_device::DeviceWriter>>,
    opts: Options,
    scratch: Vec<u8>,
    /// The blobs it created (removed if the job fails for a while).
    created: Vec<BlobId>,
    /// The manifest's generation when the job was picked.
    generation: u64,
    /// A sync of the job's succeeded: the manifest snapshots written before it was picked
    /// are durable ([`Core::durable_through`]).
    synced: bool,
}

impl<'a, E: Env> Detached<'a, E> {
    fn new(core: &'a Mutex<Core<E>>, locked: &Core<E>) -> Self {
        let mut env = locked.env.clone();
        Detached {
            core,
            writer: env.device_writer(),
            env,
            opts: locked.opts.clone(),
            scratch: Vec::new(),
            created: Vec::new(),
            generation: locked.generation,
            synced: false,
        }
    }
}

impl<E: Env> Fetch for Detached<'_, E> {
    fn index(&mut self, t: &TableMeta) -> Result<Arc<Index>> {
        lock(self.core).index(t)
    }
    fn data(&mut self, t: &TableMeta, h: Handle) -> Result<Arc<DataBlock>> {
        read_uncached(&mut self.env, &mut self.scratch, t, h)
    }
    fn value(&mut self, p: &ValuePtr, buf: &mut Vec<u8>) -> Result<()> {
        vlog::read_value(&mut self.env, p, buf)
    }
    fn data_run(
        &mut self,
        t: &TableMeta,
        blocks: &[(Vec<u8>, Handle)],
        ahead: u64,
        out: &mut VecDeque<Arc<DataBlock>>,
    ) -> Result<()> {
        read_run_uncached(&mut self.env, &mut self.scratch, t, blocks, ahead, out)
    }
}

impl<E: Env> TableOut for Detached<'_, E> {
    fn opts(&self) -> &Options {
        &self.opts
    }
    fn blob_id(&mut self) -> BlobId {
        lock(self.core).blob_id()
    }
    fn write_blob(&mut self, id: BlobId, bytes: &[u8]) -> Result<Vec<u8>> {
        let locator = self.env.create(id, bytes.len() as u64)?;
        self.created.push(id);
        // Through the device's writer where the environment says where the bytes lie,
        // else through the environment.
        let placed = match self.writer {
            Some(_) => self.env.placement(id, 0, bytes.len())?,
            None => None,
        };
        match (self.writer.as_mut(), placed) {
            (Some(w), Some(pieces)) => {
                for (at, r) in pieces {
                    let bad = LsmError::OutOfBounds {
                        blob: id,
                        offset: r.start as u64,
                        len: r.len() as u64,
                    };
                    w.write(at, bytes.get(r).ok_or(bad)?)?;
                }
            }
            _ => self.env.write(id, 0, bytes)?,
        }
        Ok(locator)
    }
    fn sync(&mut self) -> Result<()> {
        match self.writer.as_mut() {
            Some(w) => {
                // The handle's sync makes the allocations of the blobs created before it
                // durable too: the manifest that names this job's blobs need not sync for
                // them again (`SpaceEnv`'s root writes).
                let mark = self.env.sync_mark();
                w.sync()?;
                self.env.synced_through(mark);
            }
            None => self.env.sync()?,
        }
        self.synced = true;
        Ok(())
    }
}

/// Reads for an iterator: through the cache, holding the lock for one block at a time.
struct Locked<'a, E: Env>(&'a Mutex<Core<E>>);

impl<E: Env> Fetch for Locked<'_, E> {
    fn index(&mut self, t: &TableMeta) -> Result<Arc<Index>> {
        lock(self.0).index(t)
    }
    fn data(&mut self, t: &TableMeta, h: Handle) -> Result<Arc<DataBlock>> {
        lock(self.0).data(t, h)
    }
    fn value(&mut self, p: &ValuePtr, buf: &mut Vec<u8>) -> Result<()> {
        // The environment has a lock of its own: the core's is not held for the read.
        let mut env = lock(self.0).env.clone();
        vlog::read_value(&mut env, p, buf)
    }
    fn data_run(
        &mut self,
        t: &TableMeta,
        blocks: &[(Vec<u8>, Handle)],
        ahead: u64,
        out: &mut VecDeque<Arc<DataBlock>>,
    ) -> Result<()> {
        lock(self.0).data_run(t, blocks, ahead, out)
    }
}

impl<E: Env> Db<E> {
    fn from_core(core: Core<E>) -> Self {
        Db {
            shared: Arc::new(Shared {
                log_capacity: core.opts.log_capacity,
                core: Mutex::new(core),
                queue: Mutex::new(Queue::default()),
                work: Condvar::new(),
                committed: Condvar::new(),
                idle: Condvar::new(),
                shutdown: AtomicBool::new(false),
                #[cfg(test)]
                pause: Mutex::new(None),
                #[cfg(test)]
                between_flushes: std::sync::atomic::AtomicU64::new(0),
                background: AtomicBool::new(false),
            }),
            background: None,
        }
    }

    fn empty_core(env: E, opts: Options) -> Core<E> {
        let mem = Arc::new(Memtable::with_filter(opts.memtable_filter_bytes()));
        Core {
            env: EnvCell(Arc::new(Mutex::new(env))),
            opts,
            mem,
            wal: Wal::new(0, 0, 0),
            log: LogMeta {
                id: 0,
                number: 0,
                capacity: 0,
                locator: Vec::new(),
                records: None,
            },
            imm: None,
            levels: Arc::new(vec![Vec::new(); LEVELS]),
            values: BTreeMap::new(),
            live: HashMap::default(),
            next_blob: 1,
            next_log: 1,
            log_numbers: 0,
            generation: 0,
            unsynced: None,
            seq: 0,
            pinned: HashMap::default(),
            pinned_bytes: 0,
            cache: Cache::default(),
            obsolete: Vec::new(),
            spare: Vec::new(),
            doomed: Vec::new(),
            pointers: vec![Vec::new(); LEVELS],
            poisoned: None,
            group: Vec::new(),
            rec: Vec::new(),
            scratch: Vec::new(),
            vbuf: Vec::new(),
            cursor: Cursor::default(),
            background: false,
            flushing: false,
            compacting: false,
            stalled: false,
        }
    }

    /// Creates an empty database in `env` (whose root slots may hold anything).
    pub fn create(mut env: E, opts: Options) -> Result<Self> {
        env.write_root(0, &[0; 32])?;
        let mut core = Self::empty_core(env, opts);
        let (wal, log) = core.new_log(0)?;
        core.wal = wal;
        core.log = log;
        core.write_manifest()?;
        Ok(Self::from_core(core))
    }

    /// Opens the database in `env`: loads the manifest, replays the live logs into a
    /// level-0 table, and starts a fresh log.
    pub fn open(mut env: E, opts: Options) -> Result<Self> {
        let m = Manifest::load(&mut env)?;
        if m.levels.len() > LEVELS {
            return Err(LsmError::Corrupt {
                structure: "manifest",
                table: 0,
                offset: m.generation % 2,
                reason: "more levels than this build knows",
            });
        }
        let mut levels: Levels = vec![Vec::new(); LEVELS];
        for (i, level) in m.levels.iter().enumerate() {
            for t in level {
                env.open(t.id, &t.locator)?;
                let mut t = t.clone();
                t.values = sstable::read_refs(&mut env, &t)?;
                levels[i].push(Arc::new(t));
            }
        }
        let mut values = BTreeMap::new();
        for v in &m.values {
            env.open(v.id, &v.locator)?;
            vlog::check_header(&mut env, v.id)?;
            values.insert(v.id, v.clone());
        }
        let mut core = Self::empty_core(env, opts);
        core.next_blob = m.next_blob;
        // Numbers a lost snapshot's log switch may have used are not taken again.
        core.next_log = m.log_numbers.max(1);
        core.generation = m.generation;
        core.values = values;
        core.set_levels(levels);
        // A kept log of another capacity than the options' would never be taken: it goes
        // with the logs replayed.
        let mut gone: Vec<BlobId> = Vec::new();
        for l in &m.spare {
            core.env.open(l.id, &l.locator)?;
            if l.capacity == core.opts.log_capacity && core.spare.len() < SPARE_LOGS {
                core.spare.push(l.clone());
            } else {
                gone.push(l.id);
            }
        }
        let mem = Memtable::new();
        for l in &m.logs {
            core.env.open(l.id, &l.locator)?;
        }
        for l in &m.logs {
            let (batches, records) = wal::replay(&mut core.env, l.id, l.number, l.capacity)?;
            for b in batches {
                mem.insert_all(&mut core.seq, b.ops);
            }
            if l.records.is_some_and(|n| records < n) {
                // A sealed log lost its last records while the snapshot that sealed it (and
                // maybe records of the next log) reached the device: the commits after them
                // are not replayed, so what replays is a prefix.
                break;
            }
        }
        let (wal, log) = core.new_log(0)?;
        core.wal = wal;
        core.log = log;
        if !mem.is_empty() {
            // The replayed memtable becomes a level-0 table under the next manifest.
            let built = build_flush(&mem, &mut core)?;
            core.install_level0(built);
        }
        for l in &m.logs {
            gone.extend(core.retire(l.clone()));
        }
        core.write_manifest()?;
        for id in gone {
            core.env.remove(id)?;
        }
        Ok(Self::from_core(core))
    }

    /// Writes a batch atomically. With `sync`, it is durable when this returns (one device
    /// sync, shared with every batch committed in the same group).
    pub fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let bytes = batch.encoded_len();
        // A log record's payload length is a u32.
        let most = u64::from(u32::MAX) - 16;
        if bytes as u64 > most {
            return Err(LsmError::BatchTooLarge { bytes, limit: most });
        }
        let limit = self.shared.log_capacity;
        let ticket = {
            let mut q = lock(&self.shared.queue);
            q.next += 1;
            let t = q.next;
            q.pending.push(Pending {
                ticket: t,
                batch,
                sync,
                bytes,
            });
            t
        };
        loop {
            {
                let mut q = lock(&self.shared.queue);
                loop {
                    if let Some(i) = q.done.iter().position(|(t, _)| *t == ticket) {
                        return q.done.swap_remove(i).1;
                    }
                    if !q.leader {
                        q.leader = true;
                        break;
                    }
                    q.waiting += 1;
                    q = self
                        .shared
                        .committed
                        .wait(q)
                        .unwrap_or_else(|p| p.into_inner());
                    q.waiting -= 1;
                }
            }
            // Lead: take every waiting batch that fits one log record, commit them with one
            // write and at most one sync, post the results, wake the followers.
            let mut core = lock(&self.shared.core);
            let (first, last) = {
                let mut q = lock(&self.shared.queue);
                let mut room = limit as usize - wal::HEADER - 16;
                let mut n = 0;
                while n < q.pending.len() && (n == 0 || q.pending[n].bytes <= room) {
                    room = room.saturating_sub(q.pending[n].bytes);
                    n += 1;
                }
                // Tickets are handed out and queued in order: a group is a run of them.
                let first = q.pending.first().map_or(0, |p| p.ticket);
                core.group.extend(q.pending.drain(..n));
                (first, first + n as u64)
            };
            if core.background {
                core = self.make_room(core);
            }
            let r = core.commit();
            let rotated = core.imm.is_some();
            drop(core);
            let mut q = lock(&self.shared.queue);
            for t in first..last {
                if t != ticket {
                    q.done.push((t, r.clone()));
                }
            }
            q.leader = false;
            let wake = q.waiting > 0;
            drop(q);
            if wake {
                self.shared.committed.notify_all();
            }
            if rotated && self.shared.background.load(Ordering::Relaxed) {
                self.shared.work.notify_all();
            }
            if (first..last).contains(&ticket) {
                return r;
            }
        }
    }

    /// Waits, with a background thread, until the group in `core.group` can commit: while
    /// it may rotate the memtable and the thread is flushing the immutable one, or while
    /// level 0 holds [`L0_STOP`] × `l0_trigger` tables and a compaction is under way or due
    /// (so level 0, which every read asks, stays bounded when writes outrun compactions) —
    /// unless the thread is stalled on a [`transient`] error.
    fn make_room<'a>(&'a self, mut core: MutexGuard<'a, Core<E>>) -> MutexGuard<'a, Core<E>> {
        loop {
            if core.poisoned.is_some() || !core.may_rotate() {
                return core;
            }
            let stop = core.opts.l0_trigger.max(1).saturating_mul(L0_STOP);
            // Not while the thread is stalled: the table transaction that holds the space
            // up may be this writer's own (a flush the thread runs ends either way).
            let full = !core.stalled
                && core.levels[0].len() >= stop
                && (core.compacting || core.pick().is_some());
            if !core.flushing && !full {
                return core;
            }
            self.shared.work.notify_all();
            core = pause(&self.shared.idle, core);
        }
    }

    /// Sets `key` to `value` (a batch of one).
    pub fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(b, sync)
    }

    /// Deletes `key` (a batch of one).
    pub fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b, sync)
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        lock(&self.shared.core).get(key)
    }

    /// The live items with keys in `lo..hi`, in key order, read at once under one lock —
    /// for short ranges such as an index probe, where it costs far less than an iterator
    /// (whose sources and merge it does without); the items are held in RAM, so a long
    /// range belongs to [`range`](Self::range). With `prefix`, the caller promises that
    /// every key in the range has `prefix` as its prefix under the database's
    /// [`Options::prefix_rule`]: tables whose filter rules the prefix out are not read.
    pub fn probe(
        &self,
        lo: &[u8],
        hi: &[u8],
        prefix: Option<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        {
            let mut core = lock(&self.shared.core);
            let rule = core.opts.prefix_rule;
            let prefix = rule.zip(prefix);
            core.probe(lo, hi, prefix, &mut out)?;
        }
        Ok(out
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// The last `n` live items with keys in `lo..hi` (`hi` `None`: to the end of the key
    /// space), in descending key order, read at once under one lock — what an iterator
    /// running backwards would give first, for `ORDER BY … DESC LIMIT n`. The engine has no
    /// reverse iterator: the read goes down in rounds, each taking a bounded number of
    /// entries from the high end of every source (see the crate's `Core::probe_back`), so it
    /// reads about `n` entries per source when few of them are tombstones.
    pub fn probe_back(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        n: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        lock(&self.shared.core).probe_back(lo, hi, n, &mut out)?;
        Ok(out)
    }

    /// Sets the prefix rule of the tables written from now on ([`Options::prefix_rule`]);
    /// tables written before keep theirs (their filters say which).
    pub fn set_prefix_rule(&self, rule: Option<PrefixRule>) {
        lock(&self.shared.core).opts.prefix_rule = rule;
    }

    /// `f` on the value of `key`, borrowed where it lies (the memtable, a cached block, the
    /// block just read, or the engine's buffer a value blob's value was read into, under the
    /// lock: `f` must not call back into the database); `None` if the key has no value. A point read that decodes the value saves [`get`](Self::get)'s
    /// copy.
    pub fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        lock(&self.shared.core).get_with(key, f)
    }

    /// Whether `key` has a value — what [`get`](Self::get) tells apart from `None`, without
    /// reading a value kept in a value blob.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        lock(&self.shared.core).contains(key)
    }

    /// Iterates over keys in `lower..upper`, in order, as of now.
    pub fn range(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> Iter<E> {
        let core = lock(&self.shared.core);
        let from = lower.map(<[u8]>::to_vec);
        let seek = match &from {
            Bound::Included(k) | Bound::Excluded(k) => Some(k.clone()),
            Bound::Unbounded => None,
        };
        let mut sources = vec![Source::mem(core.mem.clone(), core.seq, from.clone())];
        if let Some((imm, _)) = &core.imm {
            sources.push(Source::mem(imm.clone(), u64::MAX, from.clone()));
        }
        for t in &core.levels[0] {
            sources.push(Source::tables(vec![t.clone()], seek.clone()));
        }
        for level in core.levels.iter().skip(1) {
            if !level.is_empty() {
                sources.push(Source::tables(level.clone(), seek.clone()));
            }
        }
        let seq = core.seq;
        drop(core);
        Iter {
            shared: self.shared.clone(),
            merge: Merge::new(sources, from, upper.map(<[u8]>::to_vec)),
            failed: false,
            seq,
            key: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Iterates over every key in order.
    pub fn iter(&self) -> Iter<E> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// Iterates over the keys from `key` on.
    pub fn iter_from(&self, key: &[u8]) -> Iter<E> {
        self.range(Bound::Included(key), Bound::Unbounded)
    }

    /// Runs one unit of background work (a flush or one compaction) in the caller's thread;
    /// `Ok(false)` when there is none. For callers without a background thread.
    pub fn step(&self) -> Result<bool> {
        lock(&self.shared.core).step()
    }

    /// Freezes the memtable and flushes it (and runs due compactions), after what the
    /// background thread is doing, if there is one.
    pub fn flush(&self) -> Result<()> {
        let mut core = lock(&self.shared.core);
        while (core.flushing || core.compacting) && core.poisoned.is_none() {
            core = pause(&self.shared.idle, core);
        }
        if let Some(e) = &core.poisoned {
            return Err(LsmError::Poisoned(e.to_string()));
        }
        let r = (|| -> Result<()> {
            if !core.mem.is_empty() {
                core.rotate(0)?;
            }
            core.flush_imm()?;
            // Every compaction due now, here, whether or not a background thread runs them
            // otherwise (nothing runs one: the wait above holds the lock).
            while core.compact_once()? {}
            Ok(())
        })();
        if let Err(e) = &r {
            core.poisoned = Some(e.clone());
        }
        r
    }

    /// RAM the engine holds, by kind.
    pub fn memory_usage(&self) -> MemoryUsage {
        let core = lock(&self.shared.core);
        MemoryUsage {
            memtables: core.mem.bytes()
                + core.mem.filter_bytes()
                + core
                    .imm
                    .as_ref()
                    .map_or(0, |(m, _)| m.bytes() + m.filter_bytes()),
            pinned: core.pinned_bytes,
            cache: core.cache.bytes(),
        }
    }

    /// Tables in each level.
    pub fn level_counts(&self) -> Vec<usize> {
        lock(&self.shared.core)
            .levels
            .iter()
            .map(Vec::len)
            .collect()
    }

    /// Every value blob not removed yet, by id: its bytes of values and how many of them the
    /// levels' tables still point to.
    pub fn value_blobs(&self) -> Vec<ValueBlob> {
        let core = lock(&self.shared.core);
        let live = &core.live;
        core.values
            .values()
            .map(|v| ValueBlob {
                id: v.id,
                values: v.values,
                live: live.get(&v.id).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Logs of flushed memtables kept to be written again (they hold no live records).
    pub fn kept_logs(&self) -> usize {
        lock(&self.shared.core).spare.len()
    }

    /// Every live table with its level.
    pub fn tables(&self) -> Vec<(usize, TableMeta)> {
        let core = lock(&self.shared.core);
        let mut out = Vec::new();
        for (i, l) in core.levels.iter().enumerate() {
            out.extend(l.iter().map(|t| (i, (**t).clone())));
        }
        out
    }

    /// Runs `f` on the environment (e.g. to inspect where blobs lie).
    pub fn with_env<T>(&self, f: impl FnOnce(&mut E) -> T) -> T {
        let env = lock(&self.shared.core).env.clone();
        f(&mut lock(&env.0))
    }

    /// Waits until the background thread has nothing left to do: no flush and no
    /// compaction running or due (at once without a thread, which leaves that work to
    /// commits). For a caller that wants the tree in shape before what comes next, as after
    /// a bulk load.
    pub fn settle(&self) -> Result<()> {
        let mut core = lock(&self.shared.core);
        loop {
            if let Some(e) = &core.poisoned {
                return Err(LsmError::Poisoned(e.to_string()));
            }
            let busy = core.flushing
                || core.compacting
                || (core.background
                    && !core.stalled
                    && (core.imm.is_some() || core.pick().is_some()));
            if !busy {
                return Ok(());
            }
            self.shared.work.notify_all();
            core = pause(&self.shared.idle, core);
        }
    }

    /// Whether an immutable memtable waits for its flush.
    pub fn has_immutable(&self) -> bool {
        lock(&self.shared.core).imm.is_some()
    }

    fn stop_background(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.work.notify_all();
        if let Some(h) = self.background.take() {
            let _ = h.join();
        }
    }

    /// Stops the background thread and returns the environment. Iterators still open keep
    /// the database alive: closing then fails with [`LsmError::Poisoned`].
    pub fn close(mut self) -> Result<E> {
        self.stop_background();
        let shared = self.shared.clone();
        drop(self);
        let shared = Arc::try_unwrap(shared)
            .map_err(|_| LsmError::Poisoned("close with iterators still open".into()))?;
        let core = shared.core.into_inner().unwrap_or_else(|p| p.into_inner());
        let env = Arc::try_unwrap(core.env.0)
            .map_err(|_| LsmError::Poisoned("close with a background job still running".into()))?;
        Ok(env.into_inner().unwrap_or_else(|p| p.into_inner()))
    }
}

impl<E: Env + Send + 'static> Db<E> {
    /// Starts a background thread that flushes and compacts while writers go on. It merges
    /// and writes tables without the engine's lock (reads and commits go on meanwhile) and
    /// takes it to pick the next job and to install what a job built.
    pub fn start_background(&mut self) {
        if self.background.is_some() {
            return;
        }
        self.shared.background.store(true, Ordering::SeqCst);
        lock(&self.shared.core).background = true;
        let shared = self.shared.clone();
        // A thread that cannot be started leaves the work to the writers, as without one.
        match std::thread::Builder::new()
            .name("ember-lsm-background".into())
            .spawn(move || background(&shared))
        {
            Ok(h) => self.background = Some(h),
            Err(_) => {
                self.shared.background.store(false, Ordering::SeqCst);
                lock(&self.shared.core).background = false;
            }
        }
    }
}

/// Whether an error only says the space cannot take a record now: the table engine's
/// journal is full while one of its transactions is open, which a background job can meet
/// (commits meet it only after the table engine committed). The work is tried again later
/// instead of failing the engine.
fn transient(e: &LsmError) -> bool {
    matches!(
        e,
        LsmError::Space(ember_table::TableError::JournalFull { .. })
    )
}

/// A job the background thread runs without the lock.
enum Job {
    Flush(Arc<Memtable>),
    Compact(Compaction),
}

/// The background thread: picks a job under the lock (the immutable memtable's flush
/// first), runs it without, and installs its tables under the lock again.
fn background<E: Env>(shared: &Shared<E>) {
    let mut core = lock(&shared.core);
    while !shared.shutdown.load(Ordering::SeqCst) {
        let job = if core.poisoned.is_some() {
            Ok(None)
        } else {
            core.next_job()
        };
        let job = match job {
            Ok(Some(job)) => job,
            Ok(None) => {
                core = pause(&shared.work, core);
                continue;
            }
            Err(e) => {
                core.poisoned = Some(e);
                shared.idle.notify_all();
                continue;
            }
        };
        let mut io = Detached::new(&shared.core, &core);
        let (tables, job) = match job {
            Job::Flush(imm) => {
                let (c, tables) = run_flush(shared, core, &imm, &mut io);
                core = c;
                (tables, Job::Flush(imm))
            }
            Job::Compact(c) => {
                core.compacting = true;
                drop(core);
                #[cfg(test)]
                if let Some((parked, go)) = &*lock(&shared.pause) {
                    parked.store(true, Ordering::SeqCst);
                    let _ = go.recv();
                }
                let tables =
                    guarded(|| run_compaction(&c, &mut io, &mut || flush_in_between(shared)));
                core = lock(&shared.core);
                core.compacting = false;
                (tables, Job::Compact(c))
            }
        };
        let r = match (core.job_ended(&io, tables), job) {
            (Ok(None), _) => {
                // Picked again after a pause.
                shared.idle.notify_all();
                core = pause(&shared.work, core);
                continue;
            }
            (Err(e), _) => Err(e),
            (Ok(Some(t)), Job::Flush(imm)) => core.finish_flush(&imm, t),
            (Ok(Some(t)), Job::Compact(c)) => core.finish_compaction(c, t),
        };
        core.stalled = false;
        if let Err(e) = r {
            core.poisoned = Some(e);
        }
        shared.idle.notify_all();
        // Let writers in between jobs.
        drop(core);
        core = lock(&shared.core);
    }
}

/// Writes the immutable memtable `imm` as tables without the lock (marked as flushing, so
/// writers that need it gone wait for it rather than flush it themselves); returns the lock
/// again and what was written, not installed.
fn run_flush<'a, E: Env>(
    shared: &'a Shared<E>,
    mut core: MutexGuard<'a, Core<E>>,
    imm: &Memtable,
    io: &mut Detached<'_, E>,
) -> (MutexGuard<'a, Core<E>>, Result<Built>) {
    core.flushing = true;
    drop(core);
    let tables = guarded(|| build_flush(imm, io));
    let mut core = lock(&shared.core);
    core.flushing = false;
    (core, tables)
}

/// Called by the background thread in the middle of a merge: flushes the immutable memtable
/// if one waits, so that a writer that fills the next memtable before the merge ends finds
/// room instead of flushing it on its own thread. The lock is only tried (a writer holding
/// it is asked again at the next stride). A flush that fails for a while (the space is
/// full for now) leaves the memtable for the thread's next job; any other failure poisons
/// the engine, as it would there.
fn flush_in_between<E: Env>(shared: &Shared<E>) {
    let core = match shared.core.try_lock() {
        Ok(c) => c,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    // Not while a flush failed for a while in this job: it is retried after the merge.
    if core.poisoned.is_some()
        || core.flushing
        || core.stalled
        || shared.shutdown.load(Ordering::SeqCst)
    {
        return;
    }
    let Some((imm, _)) = core.imm.clone() else {
        return;
    };
    let mut io = Detached::new(&shared.core, &core);
    let (mut core, tables) = run_flush(shared, core, &imm, &mut io);
    #[cfg(test)]
    shared.between_flushes.fetch_add(1, Ordering::SeqCst);
    let r = match core.job_ended(&io, tables) {
        // The memtable waits for the thread's next job (the loop clears `stalled` when this
        // merge ends).
        Ok(None) => Ok(()),
        Ok(Some(t)) => core.finish_flush(&imm, t),
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        core.poisoned = Some(e);
    }
    shared.idle.notify_all();
}

/// Runs a background job; a panic in it becomes an error (which poisons the engine), so
/// the job's mark is cleared and nobody waits for it forever.
fn guarded<T>(job: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).unwrap_or_else(|_| {
        Err(LsmError::Poisoned(
            "a background flush or compaction panicked".into(),
        ))
    })
}

impl<E: Env> Core<E> {
    /// The next job for the background thread: the immutable memtable's flush, else a
    /// compaction's merge (a move down a level is done here, under the lock).
    fn next_job(&mut self) -> Result<Option<Job>> {
        self.purge()?;
        if let Some((imm, _)) = &self.imm {
            return Ok(Some(Job::Flush(imm.clone())));
        }
        loop {
            match self.start_compaction()? {
                Started::Idle => return Ok(None),
                Started::Moved => {}
                Started::Merge(c) => return Ok(Some(Job::Compact(c))),
            }
        }
    }
}

impl<E: Env> Drop for Db<E> {
    fn drop(&mut self) {
        self.stop_background();
    }
}

/// An ordered iterator over a snapshot of the database: yields `(key, value)` in key order,
/// or an error (after which it ends).
pub struct Iter<E: Env> {
    shared: Arc<Shared<E>>,
    merge: Merge,
    failed: bool,
    /// The sequence number of its snapshot.
    seq: u64,
    /// The key and value of an entry whose value lies in a value blob (their capacity
    /// reused).
    key: Vec<u8>,
    value: Vec<u8>,
}

/// What an iterator's merge found.
enum Next<T> {
    Tombstone,
    Done(T),
    /// The value lies in a value blob; the key is in the iterator's buffer.
    Pointer(Result<ValuePtr>),
}

impl<E: Env> Iter<E> {
    /// `f` on the next key and value, borrowed where they lie (a memtable chunk or a cached
    /// data block), so a caller that decodes them copies nothing first: what
    /// [`next`](Iterator::next) returns, without its two allocations. `None` at the end; an
    /// error ends the iterator.
    pub fn next_with<T>(&mut self, f: impl FnOnce(&[u8], &[u8]) -> T) -> Option<Result<T>> {
        if self.failed {
            return None;
        }
        let mut fetch = Locked(&self.shared.core);
        let mut f = Some(f);
        loop {
            // A tombstone is skipped; `f` runs on the first value only.
            let key = &mut self.key;
            let r = self.merge.next_with(&mut fetch, |k, v| match v {
                None => Next::Tombstone,
                Some(Stored::Inline(v)) => match f.take() {
                    Some(f) => Next::Done(f(k, v)),
                    None => Next::Tombstone,
                },
                Some(Stored::Pointer(p)) => {
                    key.clear();
                    key.extend_from_slice(k);
                    Next::Pointer(ValuePtr::decode(p, 0, 0))
                }
            });
            let r = match r {
                Ok(None) => return None,
                Ok(Some(Next::Tombstone)) => continue,
                Ok(Some(Next::Done(t))) => Ok(t),
                Ok(Some(Next::Pointer(p))) => p
                    .and_then(|p| fetch.value(&p, &mut self.value))
                    .and_then(|()| {
                        let f = f.take().ok_or(LsmError::Poisoned(
                            "an iterator's function was spent before its value was read".into(),
                        ))?;
                        let t = f(&self.key, &self.value);
                        if self.value.capacity() > KEEP_RECORD_BYTES {
                            self.value = Vec::new();
                        }
                        Ok(t)
                    }),
                Err(e) => Err(e),
            };
            if r.is_err() {
                self.failed = true;
            }
            return Some(r);
        }
    }

    /// Whether no write has committed since the iterator was made: what it yields from
    /// here on is then exactly what a new iterator over the rest of its range would yield
    /// (flushes and compactions move entries between tables, never change them), so a
    /// reader that resumes a range where it stopped may keep it instead of seeking again.
    pub fn is_current(&self) -> bool {
        lock(&self.shared.core).seq == self.seq
    }
}

impl<E: Env> std::fmt::Debug for Iter<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

impl<E: Env> Iterator for Iter<E> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        self.next_with(|k, v| (k.to_vec(), v.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;
    use std::sync::mpsc;
    use std::time::Duration;

    use ember_device::MemBlock;
    use ember_table::{FormatOptions, SpaceManager};

    use super::*;
    use crate::SpaceEnv;

    /// While the background thread merges, reads, iterators and commits (which rotate the
    /// memtable and flush it) go on; the merge's tables are installed after, with nothing
    /// lost that was committed meanwhile.
    #[test]
    fn a_background_merge_leaves_the_lock_to_readers_and_writers() {
        let sm = SpaceManager::format(MemBlock::new(8 << 20), FormatOptions::default()).unwrap();
        let env = SpaceEnv::create(sm, 64 * 1024).unwrap();
        let root = env.root_locator();
        // Room for the commits made during the merge to rotate a few times (each rotation
        // then flushes in the writer's thread) without filling level 0 to the stop.
        let opts = Options {
            write_buffer: 4096,
            log_capacity: 8192,
            table_size: 1024,
            block_size: 256,
            l0_trigger: 2,
            level1_bytes: 2048,
            level_multiplier: 2,
            ..Options::with_budget(256 * 1024)
        };
        let mut db = Db::create(env, opts.clone()).unwrap();
        let parked = Arc::new(AtomicBool::new(false));
        let (go, go_rx) = mpsc::channel();
        *lock(&db.shared.pause) = Some((parked.clone(), go_rx));
        db.start_background();
        let db = Arc::new(db);
        // Write until the thread parks inside a merge. Every wait below is bounded, so a
        // lock held across the merge fails the test instead of hanging it.
        let (model_tx, model_rx) = mpsc::channel();
        {
            let (db, parked) = (db.clone(), parked.clone());
            std::thread::spawn(move || {
                let mut model = BTreeMap::new();
                let mut i = 0u32;
                while !parked.load(Ordering::SeqCst) && i < 20_000 {
                    // Level 0 at the trigger: the thread is to start a merge. Writing on
                    // could fill it to the stop, where commits wait for that merge.
                    if db.level_counts()[0] >= 2 {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    let (k, v) = (format!("k{:05}", i * 7 % 3001), format!("v{i}").repeat(6));
                    db.put(k.as_bytes(), v.as_bytes(), false).unwrap();
                    model.insert(k.into_bytes(), v.into_bytes());
                    i += 1;
                }
                assert!(parked.load(Ordering::SeqCst), "no compaction started");
                model_tx.send(model).unwrap();
            });
        }
        let model = model_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a commit waited for the merge");
        // The thread is parked without the lock: all of this must finish.
        let (done_tx, done) = mpsc::channel();
        let worker = {
            let db = db.clone();
            let mut model = model.clone();
            std::thread::spawn(move || {
                for j in 0..30u32 {
                    let (k, v) = (format!("w{j:03}"), format!("during{j}").repeat(4));
                    db.put(k.as_bytes(), v.as_bytes(), false).unwrap();
                    model.insert(k.into_bytes(), v.into_bytes());
                    let (k, v) = model.iter().nth(j as usize * 13 % model.len()).unwrap();
                    assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
                }
                let all: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
                assert_eq!(all, model);
                done_tx.send(model).unwrap();
            })
        };
        let got = done.recv_timeout(Duration::from_secs(20));
        go.send(()).unwrap();
        let model = got.expect("reads and commits waited for the merge");
        worker.join().unwrap();
        // Let it run on (it parks before each merge: keep saying go).
        let db = Arc::try_unwrap(db).unwrap();
        let stop = std::thread::spawn(move || while go.send(()).is_ok() {});
        db.flush().unwrap();
        let all: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(all, model);
        let counts = db.level_counts();
        assert!(counts.iter().skip(1).any(|&n| n > 0), "{counts:?}");
        let sm = db.close().unwrap().into_space();
        stop.join().unwrap();
        let dev = sm.close().unwrap();
        let sm = SpaceManager::open(dev).unwrap();
        let db = Db::open(SpaceEnv::open(sm, &root).unwrap(), opts).unwrap();
        let all: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(all, model);
    }

    /// A memtable that fills while the background thread merges is flushed by that thread
    /// in the middle of the merge (`flush_in_between`), not by the writer at its next
    /// rotation, and nothing committed is lost.
    #[test]
    fn a_memtable_waiting_during_a_merge_is_flushed_by_the_background_thread() {
        let sm = SpaceManager::format(MemBlock::new(16 << 20), FormatOptions::default()).unwrap();
        let env = SpaceEnv::create(sm, 64 * 1024).unwrap();
        // Tables of a few hundred entries, so a merge of two passes the stride.
        let opts = Options {
            write_buffer: 16 << 10,
            log_capacity: 32 << 10,
            table_size: 16 << 10,
            block_size: 1024,
            l0_trigger: 2,
            level1_bytes: 64 << 10,
            level_multiplier: 4,
            separate_values: None,
            ..Options::with_budget(1 << 20)
        };
        let mut db = Db::create(env, opts).unwrap();
        let parked = Arc::new(AtomicBool::new(false));
        let (go, go_rx) = mpsc::channel();
        *lock(&db.shared.pause) = Some((parked.clone(), go_rx));
        db.start_background();
        let mut model = BTreeMap::new();
        let put = |db: &Db<_>, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u32| {
            let (k, v) = (
                format!("k{:06}", i * 7919 % 100_003),
                format!("v{i}").repeat(4),
            );
            db.put(k.as_bytes(), v.as_bytes(), false).unwrap();
            model.insert(k.into_bytes(), v.into_bytes());
        };
        let mut i = 0u32;
        // Until the thread parks at the start of a merge (it holds no lock there).
        while !parked.load(Ordering::SeqCst) {
            assert!(i < 100_000, "no merge started");
            if db.level_counts()[0] >= 2 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            put(&db, &mut model, i);
            i += 1;
        }
        // Then until a memtable waits to be flushed.
        while lock(&db.shared.core).imm.is_none() {
            put(&db, &mut model, i);
            i += 1;
        }
        assert_eq!(db.shared.between_flushes.load(Ordering::SeqCst), 0);
        go.send(()).unwrap();
        // The merge flushes it at its first stride.
        for _ in 0..2000 {
            if db.shared.between_flushes.load(Ordering::SeqCst) > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(db.shared.between_flushes.load(Ordering::SeqCst), 1);
        let stop = std::thread::spawn(move || while go.send(()).is_ok() {});
        db.flush().unwrap();
        let all: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(all, model);
        db.close().unwrap();
        stop.join().unwrap();
    }
}
