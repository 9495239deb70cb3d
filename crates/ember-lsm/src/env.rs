//! Storage environments (LevelDB's `Env` idea): the engine sees numbered blobs it writes
//! sequentially and reads at random, two fixed root slots for the manifest, and a `sync`
//! barrier. Nothing else in the engine touches storage.
//!
//! * [`SpaceEnv`] (the default) keeps every blob in extents of an EmberDB database, handed
//!   out by its space manager through [`ExtentSpace`] (a bare `SpaceManager`, or the table
//!   engine's `Database` whose device the tree then shares). A blob's *locator*, which the manifest
//!   keeps, is its list of allocator blocks:
//!
//!   ```text
//!   count u32, then count × (class u8, chunk u32, index u32)   (little-endian)
//!   ```
//!
//!   The root locator the caller keeps (e.g. in its catalog) is the two root slots' locators,
//!   each prefixed with its length (u32). The space manager journals allocations and
//!   frees. A free is durable on return; an allocation, like the blob's bytes, at the next
//!   [`Env::sync`] — and a root slot (the manifest) is never written while one is not, so
//!   no durable manifest names a blob whose allocation a cut could undo.
//! * [`FileEnv`] keeps each blob in a file `<id as 16 hex digits>.blob` of a directory and the
//!   root slots in `MANIFEST-0` and `MANIFEST-1`; locators are empty. For comparisons only.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ember_device::DeviceWriter;
use ember_table::space::Extent as SpaceExtent;
use ember_table::{BlockRef, ExtentSpace};

use crate::coding::{IdHash, Reader};
use crate::error::{LsmError, Result};

/// A blob's number. Numbers come from the manifest's counter and are never reused.
pub type BlobId = u64;

/// The two manifest root slots.
pub const ROOT_SLOTS: [BlobId; 2] = [u64::MAX - 1, u64::MAX];

/// Storage for the engine (see the module docs).
pub trait Env {
    /// Creates blob `id` with room for at least `capacity` bytes (its bytes are unspecified
    /// until written) and returns its locator, which the manifest keeps.
    fn create(&mut self, id: BlobId, capacity: u64) -> Result<Vec<u8>>;
    /// Opens blob `id` again from its locator (after a restart).
    fn open(&mut self, id: BlobId, locator: &[u8]) -> Result<()>;
    /// Says that blob `id` is a log written in many small pieces with a sync after each
    /// (commits that sync), where a blob is otherwise written once and synced once: an
    /// environment may ready its space for that as it is written (see [`SpaceEnv`]). Does
    /// nothing by default.
    fn ready(&mut self, id: BlobId) -> Result<()> {
        let _ = id;
        Ok(())
    }
    /// Says that blob `id` is a log appended in many small pieces and synced in bulk
    /// (commits that do not sync): an environment may lay its space out for that as it is
    /// written (see [`SpaceEnv`]). A later [`ready`](Self::ready) of the same blob (a
    /// commit that syncs) wins. The same as `ready` by default.
    fn ready_appends(&mut self, id: BlobId) -> Result<()> {
        self.ready(id)
    }
    /// Writes into blob `id` (the engine writes each blob front to back, once).
    fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()>;
    /// Reads from blob `id` (or a root slot).
    fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Bytes blob `id` can hold.
    fn capacity(&self, id: BlobId) -> Result<u64>;
    /// Makes every earlier write durable; a barrier for later ones.
    fn sync(&mut self) -> Result<()>;
    /// Deletes blob `id` and gives its room back.
    fn remove(&mut self, id: BlobId) -> Result<()>;
    /// Deletes several blobs (an environment may do it in fewer durable steps than one per
    /// blob); on an error, some may be gone and the others not.
    fn remove_all(&mut self, ids: &[BlobId]) -> Result<()> {
        for &id in ids {
            self.remove(id)?;
        }
        Ok(())
    }
    /// Overwrites root slot `slot` (0 or 1) from its start.
    fn write_root(&mut self, slot: usize, data: &[u8]) -> Result<()> {
        self.write(ROOT_SLOTS[slot & 1], 0, data)
    }
    /// Reads root slot `slot` (0 or 1); bytes past what was written are unspecified.
    fn read_root(&mut self, slot: usize, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read(ROOT_SLOTS[slot & 1], offset, buf)
    }
    /// Bytes a root slot holds.
    fn root_capacity(&self) -> u64 {
        self.capacity(ROOT_SLOTS[0]).unwrap_or(0)
    }
    /// Where bytes `offset .. offset + len` of blob `id` lie on the device [`device_writer`]
    /// writes: (device offset, range of the caller's buffer) per piece. `None` (the default)
    /// if blobs do not lie on such a device.
    ///
    /// [`device_writer`]: Env::device_writer
    fn placement(&mut self, id: BlobId, offset: u64, len: usize) -> Result<Option<Placement>> {
        let _ = (id, offset, len);
        Ok(None)
    }
    /// A handle that writes the device the blobs lie on, and syncs it, without this
    /// environment (a background job writes its tables through it, so writers need not wait
    /// for that I/O); its sync makes every write durable, the environment's too. `None` (the
    /// default) if there is none.
    fn device_writer(&mut self) -> Option<Box<dyn DeviceWriter>> {
        None
    }
    /// A mark of the blobs created so far, to give [`synced_through`](Env::synced_through)
    /// after a sync through a [`device_writer`](Env::device_writer) handle that began after
    /// it was taken. 0 (the default) if the environment keeps no such count.
    fn sync_mark(&self) -> u64 {
        0
    }
    /// The device ranges, as (offset, length), of every blob this environment holds, root
    /// slots included, where blobs lie on a device another engine shares (so its integrity
    /// check can tell them from leaked space). Empty (the default) otherwise.
    fn held_ranges(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }
    /// Says that a sync through a device writer handle, begun after [`sync_mark`] gave
    /// `mark`, has made durable what the environment had written by then (the allocations of
    /// the blobs created before the mark among it). Does nothing by default.
    ///
    /// [`sync_mark`]: Env::sync_mark
    fn synced_through(&mut self, mark: u64) {
        let _ = mark;
    }
}

/// See [`Env::placement`].
pub type Placement = Vec<(u64, std::ops::Range<usize>)>;

fn encode_locator(ext: &[SpaceExtent]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + 9 * ext.len());
    v.extend_from_slice(&(ext.len() as u32).to_le_bytes());
    for e in ext {
        v.push(e.block.class);
        v.extend_from_slice(&e.block.chunk.to_le_bytes());
        v.extend_from_slice(&e.block.index.to_le_bytes());
    }
    v
}

/// Blobs in extents of a space manager (see the module docs).
#[derive(Debug)]
pub struct SpaceEnv<S: ExtentSpace> {
    sm: S,
    blobs: HashMap<BlobId, Vec<SpaceExtent>, IdHash>,
    /// Blobs created so far, and how many of them are known durable (by a sync, or one
    /// through a device writer handle: [`Env::synced_through`]). While some are not, their
    /// allocations may not be durable yet, so a root slot is not written before a sync (see
    /// [`Env::write`] here).
    created: u64,
    synced: u64,
    /// Logs readied ([`Env::ready`], [`Env::ready_appends`]) and whether for appends synced
    /// in bulk: their writes ready the space they go to first.
    readied: HashMap<BlobId, Layout, IdHash>,
}

/// How a readied blob's space is readied as it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// For small writes with a sync after each ([`ExtentSpace::prepare_space`]).
    Synced,
    /// For appends synced in bulk ([`ExtentSpace::prepare_appends_space`]).
    Appends,
}

impl<S: ExtentSpace> SpaceEnv<S> {
    /// A new environment in `sm`: allocates two root slots of `root_bytes` each (durably) and
    /// clears their headers. Keep [`root_locator`](Self::root_locator) to open it again.
    pub fn create(mut sm: S, root_bytes: u64) -> Result<Self> {
        let mut blobs = HashMap::default();
        for id in ROOT_SLOTS {
            let ext = sm.allocate_extents(root_bytes.max(512))?;
            blobs.insert(id, ext);
        }
        let mut env = SpaceEnv {
            sm,
            blobs,
            created: 0,
            synced: 0,
            readied: HashMap::default(),
        };
        for id in ROOT_SLOTS {
            env.write(id, 0, &[0; 64])?;
        }
        env.sync()?;
        Ok(env)
    }

    /// Opens an environment from its root locator.
    pub fn open(sm: S, root: &[u8]) -> Result<Self> {
        let mut env = SpaceEnv {
            sm,
            blobs: HashMap::default(),
            created: 0,
            synced: 0,
            readied: HashMap::default(),
        };
        let mut r = Reader::new(root, "root locator", 0, 0);
        for id in ROOT_SLOTS {
            let n = r.u32()? as usize;
            let loc = r.take(n)?;
            env.open(id, loc)?;
        }
        Ok(env)
    }

    /// The bytes that name the root slots (keep them to reopen).
    pub fn root_locator(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for id in ROOT_SLOTS {
            let loc = encode_locator(self.blobs.get(&id).map_or(&[][..], |v| v));
            v.extend_from_slice(&(loc.len() as u32).to_le_bytes());
            v.extend_from_slice(&loc);
        }
        v
    }

    /// The space the blobs live in.
    pub fn space(&mut self) -> &mut S {
        &mut self.sm
    }

    /// Where blob `id` lies on the device: (offset, length) of each extent, in order.
    pub fn extents(&self, id: BlobId) -> Option<Vec<(u64, u64)>> {
        self.blobs
            .get(&id)
            .map(|v| v.iter().map(|e| (e.offset, e.len)).collect())
    }

    /// Gives the space back.
    pub fn into_space(self) -> S {
        self.sm
    }

    /// Calls `f` on each piece of `[offset, offset + len)` of blob `id`: the space, the
    /// piece's device offset and its range within the caller's buffer. Allocates nothing.
    fn pieces(
        &mut self,
        id: BlobId,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&mut S, u64, std::ops::Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let sm = &mut self.sm;
        Self::locate(&self.blobs, id, offset, len, |at, r| f(sm, at, r))
    }

    /// Calls `f` on each piece of `[offset, offset + len)` of blob `id` in `blobs`: its
    /// device offset and its range within the caller's buffer.
    fn locate(
        blobs: &HashMap<BlobId, Vec<SpaceExtent>, IdHash>,
        id: BlobId,
        offset: u64,
        len: usize,
        mut f: impl FnMut(u64, std::ops::Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let ext = blobs.get(&id).ok_or(LsmError::NoSuchBlob(id))?;
        let cap: u64 = ext.iter().map(|e| e.len).sum();
        if offset.checked_add(len as u64).is_none_or(|end| end > cap) {
            return Err(LsmError::OutOfBounds {
                blob: id,
                offset,
                len: len as u64,
            });
        }
        let (mut at, mut done) = (offset, 0usize);
        let mut base = 0u64;
        for e in ext {
            if done == len {
                break;
            }
            if at < base + e.len {
                let within = at - base;
                let n = ((e.len - within) as usize).min(len - done);
                f(e.offset + within, done..done + n)?;
                done += n;
                at += n as u64;
            }
            base += e.len;
        }
        Ok(())
    }
}

impl<S: ExtentSpace> Env for SpaceEnv<S> {
    /// The allocation is durable at the next sync, not on return: nothing durable names a
    /// blob before a sync — the engine syncs a table before the manifest that names it, and
    /// a root slot write syncs first if a blob was created since the last sync — so a cut
    /// before it leaves the extents free and unnamed. This saves a sync per table the
    /// writer's thread writes.
    fn create(&mut self, id: BlobId, capacity: u64) -> Result<Vec<u8>> {
        let ext = self.sm.allocate_extents_unsynced(capacity.max(1))?;
        let loc = encode_locator(&ext);
        self.blobs.insert(id, ext);
        self.readied.remove(&id);
        self.created += 1;
        Ok(loc)
    }

    /// From now on each write to the blob readies the space it goes to first
    /// ([`ExtentSpace::prepare_space`]: on a sparse file, the holes of the granule it
    /// touches are filled with zeros if they were not yet, and the next granule's on a
    /// thread of the device's own, so the syncs that follow small writes need not make an
    /// allocation durable too, and the writes may go through the file's mapping). Readying
    /// as the log grows, not the whole blob at once, keeps the filling off the writer's
    /// thread past the first granule. Tables are written with
    /// [`ExtentSpace::write_at_once`] and never readied: written once and synced once, a
    /// table gains nothing from it. A blob stays readied until it is removed (or created or
    /// opened again): a log's blob that a later log writes again keeps its readiness, and
    /// its writes' prepares then find their granules filled already.
    fn ready(&mut self, id: BlobId) -> Result<()> {
        if !self.blobs.contains_key(&id) {
            return Err(LsmError::NoSuchBlob(id));
        }
        self.readied.insert(id, Layout::Synced);
        Ok(())
    }

    /// As [`ready`](Env::ready), in the layout for appends synced in bulk
    /// ([`ExtentSpace::prepare_appends_space`]: on a file, 64 KiB pages, so a 1 KiB record
    /// is a copy into the mapping rather than a `pwrite`, and the page faults come one per
    /// 64 KiB). On a fresh file the zeros reach the disk before the records that replace
    /// them, once per region of the file: space reused later has no holes left.
    fn ready_appends(&mut self, id: BlobId) -> Result<()> {
        if !self.blobs.contains_key(&id) {
            return Err(LsmError::NoSuchBlob(id));
        }
        self.readied.entry(id).or_insert(Layout::Appends);
        Ok(())
    }

    fn open(&mut self, id: BlobId, locator: &[u8]) -> Result<()> {
        let mut r = Reader::new(locator, "blob locator", id, 0);
        let n = r.u32()? as usize;
        if n > r.remaining() / 9 {
            return Err(r.bad("extent count beyond the locator"));
        }
        let mut ext = Vec::with_capacity(n);
        for _ in 0..n {
            let b = BlockRef {
                class: r.u8()?,
                chunk: r.u32()?,
                index: r.u32()?,
            };
            let Some(e) = self.sm.allocated_extent(b) else {
                return Err(r.bad("names a block outside the data zone or not allocated"));
            };
            ext.push(e);
        }
        self.blobs.insert(id, ext);
        self.readied.remove(&id);
        Ok(())
    }

    /// A write into a root slot (the manifest) syncs first if a blob was created since the
    /// last sync, so the manifest never reaches the device before the allocations of the
    /// blobs it names — whether it comes through [`Env::write_root`] or a wrapper's default
    /// of it.
    fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()> {
        if self.created > self.synced && ROOT_SLOTS.contains(&id) {
            self.sync()?;
        }
        let layout = self.readied.get(&id).copied();
        self.pieces(id, offset, data.len(), |sm, at, r| {
            let len = r.len() as u64;
            match layout {
                Some(Layout::Synced) => sm.prepare_space(at, len),
                Some(Layout::Appends) => sm.prepare_appends_space(at, len),
                None => {}
            }
            Ok(sm.write_at_once(at, &data[r])?)
        })
    }

    fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.pieces(id, offset, buf.len(), |sm, at, r| {
            Ok(sm.read_at(at, &mut buf[r])?)
        })
    }

    fn capacity(&self, id: BlobId) -> Result<u64> {
        let ext = self.blobs.get(&id).ok_or(LsmError::NoSuchBlob(id))?;
        Ok(ext.iter().map(|e| e.len).sum())
    }

    fn placement(&mut self, id: BlobId, offset: u64, len: usize) -> Result<Option<Placement>> {
        let mut out = Vec::new();
        Self::locate(&self.blobs, id, offset, len, |at, r| {
            out.push((at, r));
            Ok(())
        })?;
        Ok(Some(out))
    }
    fn device_writer(&mut self) -> Option<Box<dyn DeviceWriter>> {
        self.sm.device_writer()
    }
    /// The count of blobs created: an allocation's record is written to the device when the
    /// blob is created (`ExtentSpace::allocate_extents_unsynced`), so a sync of the device
    /// through any handle that begins later makes it durable.
    fn sync_mark(&self) -> u64 {
        self.created
    }
    fn synced_through(&mut self, mark: u64) {
        self.synced = self.synced.max(mark.min(self.created));
    }
    fn held_ranges(&self) -> Vec<(u64, u64)> {
        self.blobs
            .values()
            .flatten()
            .map(|e| (e.offset, e.len))
            .collect()
    }
    fn sync(&mut self) -> Result<()> {
        self.sm.sync_space()?;
        self.synced = self.created;
        Ok(())
    }

    fn remove(&mut self, id: BlobId) -> Result<()> {
        let ext = self.blobs.remove(&id).ok_or(LsmError::NoSuchBlob(id))?;
        self.readied.remove(&id);
        self.sm.free_extents(&ext)?;
        Ok(())
    }

    /// Frees the blobs' extents in as few space-manager calls (one journal record and sync
    /// each) as [`FREE_BATCH`] extents at a time allow.
    fn remove_all(&mut self, ids: &[BlobId]) -> Result<()> {
        let mut batch: Vec<BlobId> = Vec::new();
        let mut extents: Vec<SpaceExtent> = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let ext = self.blobs.get(&id).ok_or(LsmError::NoSuchBlob(id))?;
            extents.extend_from_slice(ext);
            batch.push(id);
            let last = i + 1 == ids.len();
            let next = ids
                .get(i + 1)
                .and_then(|n| self.blobs.get(n))
                .map_or(0, Vec::len);
            if last || extents.len() + next > FREE_BATCH {
                self.sm.free_extents(&extents)?;
                for id in batch.drain(..) {
                    self.blobs.remove(&id);
                    self.readied.remove(&id);
                }
                extents.clear();
            }
        }
        Ok(())
    }
}

/// Most extents [`SpaceEnv::remove_all`] frees in one call (one journal record; a blob with
/// more gets a call of its own).
pub const FREE_BATCH: usize = 256;

/// Blobs in files of a directory (see the module docs).
#[derive(Debug)]
pub struct FileEnv {
    dir: PathBuf,
    files: HashMap<BlobId, File>,
    dirty: BTreeSet<BlobId>,
    dir_dirty: bool,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> LsmError + 'a {
    move |e| LsmError::Io {
        op,
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl FileEnv {
    /// An environment in directory `dir` (created if missing).
    pub fn new(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
        let mut env = FileEnv {
            dir,
            files: HashMap::new(),
            dirty: BTreeSet::new(),
            dir_dirty: false,
        };
        for (slot, id) in ROOT_SLOTS.iter().enumerate() {
            let path = env.dir.join(format!("MANIFEST-{slot}"));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io("open", &path))?;
            env.files.insert(*id, f);
        }
        env.dir_dirty = true;
        Ok(env)
    }

    fn path(&self, id: BlobId) -> PathBuf {
        match ROOT_SLOTS.iter().position(|&r| r == id) {
            Some(slot) => self.dir.join(format!("MANIFEST-{slot}")),
            None => self.dir.join(format!("{id:016x}.blob")),
        }
    }

    fn file(&mut self, id: BlobId) -> Result<&mut File> {
        self.files.get_mut(&id).ok_or(LsmError::NoSuchBlob(id))
    }
}

impl Env for FileEnv {
    fn create(&mut self, id: BlobId, _capacity: u64) -> Result<Vec<u8>> {
        let path = self.path(id);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(io("create", &path))?;
        self.files.insert(id, f);
        self.dir_dirty = true;
        Ok(Vec::new())
    }

    fn open(&mut self, id: BlobId, _locator: &[u8]) -> Result<()> {
        let path = self.path(id);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        self.files.insert(id, f);
        Ok(())
    }

    fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()> {
        let path = self.path(id);
        let f = self.file(id)?;
        f.seek(SeekFrom::Start(offset)).map_err(io("seek", &path))?;
        f.write_all(data).map_err(io("write", &path))?;
        self.dirty.insert(id);
        Ok(())
    }

    fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let path = self.path(id);
        let f = self.file(id)?;
        let len = f.metadata().map_err(io("stat", &path))?.len();
        if offset.saturating_add(buf.len() as u64) > len {
            return Err(LsmError::OutOfBounds {
                blob: id,
                offset,
                len: buf.len() as u64,
            });
        }
        f.seek(SeekFrom::Start(offset)).map_err(io("seek", &path))?;
        f.read_exact(buf).map_err(io("read", &path))
    }

    fn capacity(&self, id: BlobId) -> Result<u64> {
        if self.files.contains_key(&id) {
            Ok(u64::MAX / 2)
        } else {
            Err(LsmError::NoSuchBlob(id))
        }
    }

    fn sync(&mut self) -> Result<()> {
        for id in std::mem::take(&mut self.dirty) {
            let path = self.path(id);
            if let Some(f) = self.files.get(&id) {
                f.sync_data().map_err(io("sync", &path))?;
            }
        }
        if std::mem::take(&mut self.dir_dirty) {
            let d = File::open(&self.dir).map_err(io("open directory", &self.dir))?;
            d.sync_all().map_err(io("sync directory", &self.dir))?;
        }
        Ok(())
    }

    fn remove(&mut self, id: BlobId) -> Result<()> {
        self.files.remove(&id);
        self.dirty.remove(&id);
        let path = self.path(id);
        std::fs::remove_file(&path).map_err(io("remove", &path))?;
        self.dir_dirty = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ember_device::MemBlock;
    use ember_table::{FormatOptions, SpaceManager};

    /// `remove_all` over more extents than one batch frees exactly the blobs named, and a
    /// reopened space agrees (the frees are durable).
    #[test]
    fn remove_all_frees_exactly_the_blobs_named() {
        let sm = SpaceManager::format(MemBlock::new(64 << 20), FormatOptions::default()).unwrap();
        let mut env = SpaceEnv::create(sm, 4096).unwrap();
        let mut locators = Vec::new();
        for id in 1..=400u64 {
            // Some blobs of several extents.
            let bytes = if id % 50 == 0 { 600 << 10 } else { 3000 };
            locators.push((id, env.create(id, bytes).unwrap()));
        }
        let gone: Vec<BlobId> = (1..=400u64).filter(|id| id % 3 != 0).collect();
        let freed: Vec<SpaceExtent> = gone
            .iter()
            .flat_map(|id| env.blobs[id].iter().copied())
            .collect();
        assert!(freed.len() > FREE_BATCH, "{} extents", freed.len());
        env.remove_all(&gone).unwrap();
        for id in 1..=400u64 {
            assert_eq!(env.capacity(id).is_ok(), id % 3 == 0, "blob {id}");
        }
        for e in &freed {
            assert!(env.space().allocated_extent(e.block).is_none());
        }
        assert!(matches!(
            env.remove_all(&[3, 1]),
            Err(LsmError::NoSuchBlob(1))
        ));
        // Durable: a reopened space manager still has the kept blobs and not the others.
        let dev = env.into_space().close().unwrap();
        let sm = SpaceManager::open(dev).unwrap();
        for e in &freed {
            assert!(sm.allocated_extent(e.block).is_none());
        }
        let mut env = SpaceEnv {
            sm,
            blobs: HashMap::default(),
            created: 0,
            synced: 0,
            readied: HashMap::default(),
        };
        for (id, loc) in &locators {
            assert_eq!(env.open(*id, loc).is_ok(), id % 3 == 0, "blob {id}");
        }
    }

    /// What a device was asked to do, in order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Event {
        Write(u64),
        /// A prepare of (offset, length).
        Prepare(u64, u64),
        /// A prepare for appends of (offset, length).
        PrepareAppends(u64, u64),
        Sync,
    }

    /// A RAM device that logs writes (their offsets), prepares and syncs.
    struct Logged {
        dev: MemBlock<Vec<u8>>,
        log: std::sync::Arc<std::sync::Mutex<Vec<Event>>>,
    }

    impl ember_device::BlockDevice for Logged {
        fn sector_size(&self) -> u32 {
            self.dev.sector_size()
        }
        fn capacity(&self) -> u64 {
            self.dev.capacity()
        }
        fn read(&mut self, offset: u64, buf: &mut [u8]) -> ember_device::Result<()> {
            self.dev.read(offset, buf)
        }
        fn write(&mut self, offset: u64, data: &[u8]) -> ember_device::Result<()> {
            self.log.lock().unwrap().push(Event::Write(offset));
            self.dev.write(offset, data)
        }
        fn sync(&mut self) -> ember_device::Result<()> {
            self.log.lock().unwrap().push(Event::Sync);
            self.dev.sync()
        }
        fn resize(&mut self, new_len: u64) -> ember_device::Result<()> {
            self.dev.resize(new_len)
        }
        fn prepare(&mut self, offset: u64, len: u64) {
            self.log.lock().unwrap().push(Event::Prepare(offset, len));
        }
        fn prepare_appends(&mut self, offset: u64, len: u64) {
            self.log
                .lock()
                .unwrap()
                .push(Event::PrepareAppends(offset, len));
        }
    }

    /// A space manager on a [`Logged`] RAM device of 16 MiB, and the device's log.
    fn logged_space() -> (
        SpaceManager<Logged>,
        std::sync::Arc<std::sync::Mutex<Vec<Event>>>,
    ) {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let dev = Logged {
            dev: MemBlock::new(16 << 20),
            log: std::sync::Arc::clone(&log),
        };
        let sm = SpaceManager::format(dev, FormatOptions::default()).unwrap();
        (sm, log)
    }

    /// A readied log readies each write's own bytes as it comes, never the whole blob: for
    /// appends until a commit syncs, for syncs from then on (a later `ready_appends`
    /// changes nothing); a blob never readied is written with no prepare.
    #[test]
    fn a_readied_log_readies_each_write_as_it_comes() {
        let (sm, log) = logged_space();
        let mut env = SpaceEnv::create(sm, 4096).unwrap();
        let taken = |log: &std::sync::Mutex<Vec<Event>>| std::mem::take(&mut *log.lock().unwrap());
        env.create(1, 256 << 10).unwrap();
        env.create(2, 4096).unwrap();
        let at = env.blobs[&1][0].offset;
        assert_eq!(env.ready_appends(9), Err(LsmError::NoSuchBlob(9)));
        env.ready_appends(1).unwrap();
        taken(&log);
        env.write(1, 0, &[1; 1000]).unwrap();
        env.write(1, 1000, &[2; 300]).unwrap();
        let mine = |events: Vec<Event>| -> Vec<Event> {
            events
                .into_iter()
                .filter(|e| match e {
                    Event::Write(o) | Event::Prepare(o, _) | Event::PrepareAppends(o, _) => {
                        (at..at + (256 << 10)).contains(o)
                    }
                    Event::Sync => false,
                })
                .collect()
        };
        assert_eq!(
            mine(taken(&log)),
            vec![
                Event::PrepareAppends(at, 1000),
                Event::Write(at),
                Event::PrepareAppends(at + 1000, 300),
                Event::Write(at + 1000),
            ]
        );
        env.ready(1).unwrap();
        env.ready_appends(1).unwrap();
        env.write(1, 1300, &[3; 200]).unwrap();
        assert_eq!(
            mine(taken(&log)),
            vec![Event::Prepare(at + 1300, 200), Event::Write(at + 1300)]
        );
        let mut back = vec![0u8; 1500];
        env.read(1, 0, &mut back).unwrap();
        assert!(back[..1000].iter().all(|b| *b == 1) && back[1300..].iter().all(|b| *b == 3));
        // Never readied: no prepare at all.
        let no_prepares = |events: &[Event]| {
            !events
                .iter()
                .any(|e| matches!(e, Event::Prepare(..) | Event::PrepareAppends(..)))
        };
        env.write(2, 0, &[4; 512]).unwrap();
        let events = taken(&log);
        assert!(no_prepares(&events), "{events:?}");
        // A removed blob's number readied again is an error, not a prepare of freed space;
        // made again (by `remove` or `remove_all`), it starts unreadied.
        env.remove(1).unwrap();
        assert!(!env.readied.contains_key(&1));
        assert_eq!(env.ready(1), Err(LsmError::NoSuchBlob(1)));
        env.create(1, 4096).unwrap();
        taken(&log);
        env.write(1, 0, &[5; 512]).unwrap();
        let events = taken(&log);
        assert!(no_prepares(&events), "{events:?}");
        env.ready_appends(1).unwrap();
        env.ready_appends(2).unwrap();
        env.remove_all(&[1, 2]).unwrap();
        assert!(env.readied.is_empty(), "{:?}", env.readied);
        env.create(1, 4096).unwrap();
        env.create(2, 4096).unwrap();
        taken(&log);
        env.write(1, 0, &[6; 512]).unwrap();
        env.write(2, 0, &[6; 512]).unwrap();
        let events = taken(&log);
        assert!(no_prepares(&events), "{events:?}");
    }

    /// A write across the extents of a blob prepares each piece where it lies.
    #[test]
    fn a_readied_write_across_extents_prepares_each_piece() {
        let (sm, log) = logged_space();
        let mut env = SpaceEnv::create(sm, 4096).unwrap();
        // Blobs in between, freed, leave gaps that a bigger blob then spans in pieces.
        for id in 1..=8u64 {
            env.create(id, 64 << 10).unwrap();
        }
        env.remove_all(&[2, 4, 6]).unwrap();
        env.create(9, 160 << 10).unwrap();
        let ext = env.extents(9).unwrap();
        assert!(ext.len() >= 2, "one extent: {ext:?}");
        env.ready_appends(9).unwrap();
        let (first, _) = ext[0];
        let len0 = ext[0].1;
        std::mem::take(&mut *log.lock().unwrap());
        env.write(9, len0 - 100, &[9; 300]).unwrap();
        let prepares: Vec<Event> = std::mem::take(&mut *log.lock().unwrap())
            .into_iter()
            .filter(|e| matches!(e, Event::PrepareAppends(..)))
            .collect();
        assert_eq!(
            prepares,
            vec![
                Event::PrepareAppends(first + len0 - 100, 100),
                Event::PrepareAppends(ext[1].0, 200),
            ]
        );
        let mut back = [0u8; 300];
        env.read(9, len0 - 100, &mut back).unwrap();
        assert_eq!(back, [9; 300]);
    }

    /// A blob is allocated without a sync and written without readying its space until
    /// the engine says it is a log whose commits sync (`ready`); the manifest's root slot
    /// is written only after a sync that follows every allocation.
    #[test]
    fn tables_skip_readying_and_a_root_write_follows_a_sync_of_every_allocation() {
        let (sm, log) = logged_space();
        let mut env = SpaceEnv::create(sm, 4096).unwrap();
        let taken = |log: &std::sync::Mutex<Vec<Event>>| std::mem::take(&mut *log.lock().unwrap());
        taken(&log);
        // Whether a prepare in `events` falls in blob `id` (the journal readies its own
        // ring as it appends the allocation's record).
        let readied = |env: &SpaceEnv<_>, id: BlobId, events: &[Event]| {
            events.iter().any(|e| match e {
                Event::Prepare(at, _) | Event::PrepareAppends(at, _) => env.blobs[&id]
                    .iter()
                    .any(|x| (x.offset..x.offset + x.len).contains(at)),
                _ => false,
            })
        };

        env.create(1, 64 << 10).unwrap();
        env.write(1, 0, &[7; 64 << 10]).unwrap();
        assert!(env.placement(1, 0, 4096).unwrap().is_some());
        let events = taken(&log);
        assert!(!events.contains(&Event::Sync), "{events:?}");
        assert!(!readied(&env, 1, &events), "{events:?}");

        env.create(2, 64 << 10).unwrap();
        env.ready(2).unwrap();
        env.write(2, 0, &[8; 512]).unwrap();
        let events = taken(&log);
        assert!(!events.contains(&Event::Sync), "{events:?}");
        assert!(readied(&env, 2, &events), "{events:?}");
        assert!(!readied(&env, 1, &events), "{events:?}");

        let root = env.blobs[&ROOT_SLOTS[0]][0].offset;
        env.write_root(0, &[1; 64]).unwrap();
        let events = taken(&log);
        let sync = events.iter().position(|e| *e == Event::Sync);
        let write = events.iter().position(|e| *e == Event::Write(root));
        assert!(sync.is_some() && sync < write, "{events:?}");

        // Nothing created since that sync: the next root write needs none.
        env.write_root(1, &[2; 64]).unwrap();
        let events = taken(&log);
        assert!(!events.contains(&Event::Sync), "{events:?}");

        // A sync through a device handle, begun after a mark, covers the blobs created
        // before the mark, not those created after it.
        env.create(3, 4096).unwrap();
        let mark = env.sync_mark();
        env.create(4, 4096).unwrap();
        env.synced_through(mark);
        env.write_root(0, &[3; 64]).unwrap();
        let events = taken(&log);
        assert!(events.contains(&Event::Sync), "blob 4: {events:?}");
        env.create(5, 4096).unwrap();
        let mark = env.sync_mark();
        env.synced_through(mark);
        env.write_root(1, &[4; 64]).unwrap();
        let events = taken(&log);
        assert!(!events.contains(&Event::Sync), "{events:?}");
        // A stale mark changes nothing.
        env.create(6, 4096).unwrap();
        env.synced_through(mark);
        env.write_root(0, &[5; 64]).unwrap();
        let events = taken(&log);
        assert!(events.contains(&Event::Sync), "blob 6: {events:?}");
    }
}
