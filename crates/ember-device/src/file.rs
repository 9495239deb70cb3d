//! Block devices in operating-system files: [`FileBlock`] (a regular file) and [`RawBlock`] (a
//! raw block device or partition such as `/dev/sdb`, `/dev/loop0` or `/dev/mmcblk0p2`).
//!
//! Both do positioned I/O (`pread`/`pwrite`, never seek-then-read; a [`FileBlock`] copies
//! small reads and writes through mappings of its file instead where it can, see [mapped
//! writes](#mapped-writes) and [reads](#mapped-reads)), keep the device length in
//! memory instead of asking the kernel on every call, and never grow the file implicitly: an
//! access past the cached length is [`DeviceError::OutOfBounds`].
//!
//! # Durability
//!
//! These devices keep the [`BlockDevice`] contract only as far as the layers below keep
//! theirs. What they rely on:
//!
//! * **`sync` is `fdatasync`** ([`File::sync_data`]; `F_FULLFSYNC` on Apple platforms, where
//!   plain `fsync` does not flush the drive's cache). When it returns, the kernel has written
//!   every earlier write, and the metadata needed to read it back (the file length after a
//!   [`resize`](crate::BlockDevice::resize)), to the device and flushed the device's volatile cache.
//!   A `sync` after a `resize` therefore makes the new length durable too.
//! * **Sector atomicity comes from the medium.** An aligned sector written in place reaches the
//!   disk whole or not at all only if the drive writes its sectors atomically and the file
//!   system overwrites file data in place (ext4, XFS, and raw block devices do; copy-on-write
//!   file systems give stronger guarantees). The sector size a [`FileBlock`] reports is a
//!   promise the caller makes with [`FileBlock::with_sector_size`]; a [`RawBlock`] reports the
//!   device's logical block size.
//! * **The file itself must survive.** [`FileBlock::create`] and [`FileBlock::open_or_create`]
//!   (when they create the file) sync the new file and its parent directory before returning, so
//!   the file's name and initial length are durable from the start; nothing the engine does
//!   later through `sync` could make the directory entry durable.
//! * **No one else writes the file.** Another process or handle that writes, truncates or
//!   extends the file behind the device's back breaks every promise above. A `pread` that
//!   finds the file shorter than the cached length fails with [`DeviceError::Io`]
//!   ("unexpected end of file"); through a mapping ([mapped writes](#mapped-writes) and
//!   [reads](#mapped-reads)) an access past the new end kills the process with `SIGBUS`,
//!   and a read in the last page of the cut file sees zeros past its end (which the
//!   engines' checksums reject).
//!
//! # Holes
//!
//! A [`FileBlock`] is usually a sparse file: [`FileBlock::create`] sets its length without
//! writing it. A file system allocates a hole's blocks when they are first written, and the
//! next `fdatasync` must then make that allocation durable too (on ext4, a journal commit on
//! every sync that follows a write into new territory). So on Linux, when the engine says a
//! range is about to be written often ([`prepare`](crate::BlockDevice::prepare): a journal
//! ring, a table's new blocks), the device writes zeros over the holes of each granule the
//! range touches (1 MiB, [`HOLE_FILL_GRANULE`]; set with [`FileBlock::with_hole_fill`]),
//! once a session, found with `lseek` `SEEK_DATA`/`SEEK_HOLE`: the granule is allocated
//! once, in one piece, and later syncs write data only. Other writes (a format's scattered
//! metadata) fill nothing. A hole reads as zeros, so the file's content never changes — as
//! long as the file system reports holes exactly: filling trusts `SEEK_HOLE`, and a hole
//! reported over data (a bug some file systems have shipped for data still in the page
//! cache) would zero that data. So it is on by default only on ext4, XFS, tmpfs and F2FS;
//! elsewhere [`FileBlock::with_hole_fill`] turns it on. A failure (a full disk) turns
//! filling off and leaves the writes to report it. The zeros go out a 4 KiB page at a time
//! (64 KiB for a range prepared for appends), so the page cache keeps small pages there
//! (see "Page size" below). The price is disk space and one write of
//! zeros per granule around what is written. Synchronous 4 KiB-row inserts ran about 1.3×
//! as fast with it (BENCHMARKS.md, mobibench).
//!
//! Filling a granule is 256 page writes, and a fresh database's journal met one every
//! 1,900 small commits: a sixth of a YCSB update's time. So the granule after a prepared
//! range is filled ahead, on a thread of the device's own ([`FileBlock::with_fill_ahead`]),
//! and the writer finds it filled when it gets there. The thread fills under the lock that a
//! prepare's fill and a [writer handle](crate::BlockDevice::writer)'s writes take, and
//! while it exists every write outside the granules known filled takes that lock too, so
//! a fill never zeroes bytes written at the same moment; a resize drops what the thread
//! has queued and waits for the granule in flight. Only granules the device has learnt are
//! filled (at its next prepare there) are written through a mapping.
//!
//! # Page size
//!
//! The page cache keeps a range in the page size of the writes that brought it in: filling
//! a granule 4 KiB at a time gives it 4 KiB pages, and each first write through the mapping
//! into one of them after it was written back is a page fault — about 2 µs on this
//! project's ext4 test machine, a sixth of a YCSB update whose journal record is 600 bytes.
//! Filled in 64 KiB writes instead, where the kernel keeps 64 KiB pages (ext4 since Linux
//! 6.16, XFS), a range takes one fault a 64 KiB page, and 600-byte appends through the
//! mapping cost 0.06–0.09 µs instead of 0.31. The price is write-back:
//! the kernel tracks a page changed through a mapping as changed whole, so a sync after a
//! small write writes 64 KiB (a `pwrite` still dirties only its 4 KiB blocks on ext4). A
//! 600-byte append through the mapping, synced each time, wrote 4.7 KiB to the disk with
//! small pages and 64.7 KiB with 64 KiB ones. So large pages are for a range appended to
//! and synced in bulk: [`prepare_appends`](crate::BlockDevice::prepare_appends) fills the
//! granules it touches (and the ones filled ahead of it) in 64 KiB writes — the table
//! engine's journal in its modes that do not sync each commit. Scattered small writes
//! elsewhere (index pages, a block's changed sectors) mostly stay in 4 KiB pages, where a
//! sync writes back 4 KiB for each; but a granule is filled once, by whichever prepare
//! comes first, so the granules at the journal's two ends, which it may share with its
//! neighbours, and the one filled ahead past its end can get 64 KiB pages too. The
//! journal's last page goes back whole with any sync (such as a `USING timeseries`
//! table's that syncs each commit). Only holes are filled, so what a session finds
//! allocated keeps the pages it gets otherwise — and pages the kernel reads in itself
//! (read-ahead after a restart), or that an earlier session in another mode left in the
//! cache, may be large whatever the device asks for now: small pages are what filling
//! gives, not a promise.
//!
//! # Mapped writes
//!
//! A `pwrite` costs a system call — a few microseconds on a virtual machine, more than the
//! rest of a small commit's work. So on 64-bit Linux a [`FileBlock`] on ext4 or tmpfs
//! copies a write of up to 64 KiB ([`MAX_MAPPED_WRITE`]) into a shared mapping of the file
//! instead, when every granule the write touches has had its holes filled this session (see
//! above; granules of at least 64 KiB): a journal record, a tuple in a table block, an LSM
//! log append. The bytes land in the same page cache a `pwrite` would put them in, so what
//! survives is the same: a process crash loses nothing written, `sync` (`fdatasync`, which
//! writes back pages dirtied through a mapping too) makes them durable, and reads see them
//! at once. Mappings are 64 MiB windows of the file, at most 256 at a time (16 GiB
//! of address space, so reads all over a file seldom replace one), and are dropped on
//! [`resize`](crate::BlockDevice::resize).
//!
//! Why only filled granules, and only on ext4 and tmpfs: writing through a mapping into a
//! hole would make the file system allocate space inside a page fault, and a full disk
//! there is `SIGBUS`, not an error. Filled granules are allocated (or reserved) already, and
//! lie inside the file, so the copy never asks for space or lands past the end — on file
//! systems whose blocks belong to one file; XFS shares blocks between reflinked copies and
//! F2FS can compress them, and writing such a block needs new space. What a mapping cannot
//! turn into an error:
//!
//! * a page the kernel has dropped from its cache and then fails to read back from the disk
//!   before the copy (a failing disk): the process gets `SIGBUS` where `pwrite` would have
//!   returned `EIO`;
//! * the file cut short behind the device's back (see "No one else writes the file"
//!   above): a copy past the new end is `SIGBUS` where `pwrite` would have grown the file.
//!
//! Databases that map their files (LMDB, SQLite with `mmap_size`) carry the same risks;
//! [`FileBlock::with_mapping`] turns mapping off for a device where they matter more
//! than the speed. Sector atomicity stays as it was: a page the kernel is writing back can
//! change under the write-back on a device without stable pages whether a `pwrite` or a
//! copy changes it, and either way the sector reaches the disk again, whole, at the next
//! write-back or `sync`; the engines' records carry checksums for the crash in between.
//!
//! # Mapped reads
//!
//! A `pread` costs the same system call, and an LSM tree's point read on a data set larger
//! than its cache is one `pread` of a block: 38% of a 1 KiB value's read went into the
//! kernel. So where writes map, reads of up to 64 KiB copy out of the same mappings: on ext4
//! anywhere inside the file (a fault on a hole there maps a page of zeros and takes no disk
//! space), on tmpfs only in filled granules (a fault on a tmpfs hole takes memory, which can
//! run out). What a read sees is the page cache's, as with `pread`. Out of bounds is still
//! an error, checked first. The price is the mapped writes' risks, wider:
//!
//! * any page not in the page cache is read from the disk inside a page fault, so a disk
//!   that fails that read is `SIGBUS` where `pread` returns `EIO`;
//! * a file cut short by another process is `SIGBUS` (or zeros in its last page) where
//!   `pread` reports the early end;
//! * a fault on a page not in the page cache reads the pages around it too (the kernel's
//!   read-around for mappings, until it has seen a hundred faults miss) where a `pread`
//!   reads only what it asks for: on a data set far larger than RAM, random reads cost
//!   more disk reads at first.
//!
//! [`FileBlock::with_mapping`] turns mapped reads off with mapped writes; so does a
//! mapping the kernel refuses (out of address space).
//!
//! # Write-behind
//!
//! An engine that does not sync every commit (the table engine's asynchronous modes, an LSM
//! tree's log) leaves the page cache to gather everything it wrote since its last sync, and
//! its next sync — a checkpoint's — then waits for all of it: tens of megabytes, hundreds of
//! milliseconds in one call. So once 4 MiB ([`WRITE_BEHIND_BYTES`]) were written since the
//! last sync, a [`FileBlock`] asks a thread of its own (started then, one per device) to
//! `fdatasync` the file, and goes on; the caller's own sync then finds little left. A sync
//! only ever makes more durable, sooner, so this changes no ordering a caller relies on. The
//! two syncs take one lock: the caller's waits for the thread's and sees its outcome. A
//! failed background sync fails every later sync of the device — the kernel reports a lost
//! write-back once per open file, and it may have told the thread. A device that is synced
//! more often than that (a commit that syncs) never starts the thread.
//! [`FileBlock::with_write_behind`] sets the amount, or turns it off.
//!
//! Writes through a [writer handle](crate::BlockDevice::writer) count the same way, each
//! handle on its own: once the amount has gone through it, it asks the thread (if it runs)
//! for a sync. A checkpoint that writes tens of megabytes home through a handle and then
//! syncs has the disk writing them while it copies the rest: YCSB's closing checkpoint at
//! 100,000 rows of 520 bytes (51 MB home) went from 65 to 52 ms, most of which had been
//! its one sync at the end.
//!
//! # Syncs and mapped pages
//!
//! A sync writes back every dirty page of the file, and before writing a page back the
//! kernel write-protects each page-table entry that maps it writable, so that a later store
//! through the mapping marks it dirty again. Each such entry it changes costs a flush of the
//! TLBs of every CPU the process's threads run on: on a virtual machine, an interrupt
//! between virtual CPUs, a trap into the hypervisor for each. With mapped writes, every page
//! a journal or log wrote through a mapping is one such flush at the next sync, made by the
//! syncing thread while the writer runs on the other CPU. On a 2-CPU virtual machine where
//! those interrupts are dear (2026-11-29), the write-behind thread's `fdatasync` spent most
//! of its time in them, a fifth of all CPU time of a YCSB update run, and the writer was
//! interrupted as often.
//!
//! So a [`FileBlock`] keeps, for each mapping, the span of pages written through it since
//! the last release, in a table shared with its write-behind thread and its writer
//! handles, and takes those spans out of its page tables (`madvise(MADV_DONTNEED)`: on a
//! shared file mapping that drops the entries only, a dirty entry marking its page dirty in
//! the page cache first, so nothing written is lost, and the next access maps the page
//! again) before each of its own syncs and before it asks the write-behind thread for one.
//! One call, one TLB flush for a span, where the sync would have made one a page.
//!
//! On Linux 6.1 and later every other sync of the file — the write-behind thread's, a
//! writer handle's, on their own threads — releases them too, just before its
//! `fdatasync`, while the owner may be copying into the same mappings: such a copy lands
//! before its entry goes, or through the stale TLB entry until the flush that ends the
//! call, and from 6.1 on the kernel keeps the page in the reverse map until that flush,
//! so a write-back cannot clean the page under the late store. Before 6.1 it could, and a
//! store could be left in a clean page that no sync writes; there only the owner's own
//! thread releases, with no copy in flight. The table's lock keeps a window from being
//! unmapped while another thread releases pages of it. What is left is a page the owner
//! dirties again between a release and the sync's pass over it.
//!
//! Discovering a raw device's size and logical block size uses Linux interfaces (seeking to the
//! end of the device, and sysfs); on other Unix systems the sector size falls back to 512.
//!
//! The module only has content on Unix (it needs `pread`/`pwrite` and file-type inspection from
//! `std::os::unix`); on other platforms it is empty.
//!
//! [`BlockDevice`]: crate::BlockDevice
//! [`DeviceError::OutOfBounds`]: crate::DeviceError::OutOfBounds
//! [`DeviceError::Io`]: crate::DeviceError::Io
//! [`File::sync_data`]: std::fs::File::sync_data

#[cfg(unix)]
pub use unix::{FileBlock, HOLE_FILL_GRANULE, MAX_MAPPED_WRITE, RawBlock, WRITE_BEHIND_BYTES};

#[cfg(unix)]
mod unix {
    use std::fs::{self, File, OpenOptions};
    use std::io::{self, Seek, SeekFrom};
    use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, mpsc};
    use std::thread;

    use crate::block::{BlockDevice, DEFAULT_SECTOR_SIZE};
    use crate::error::{DeviceError, Op, Result, check_bounds};

    /// Maps an OS error from operation `op` at `offset` to a [`DeviceError::Io`].
    pub(super) fn io_error(op: Op, offset: u64, e: &io::Error) -> DeviceError {
        use io::ErrorKind as K;
        let detail = match e.kind() {
            K::UnexpectedEof => "unexpected end of file",
            K::PermissionDenied => "permission denied",
            K::NotFound => "not found",
            K::AlreadyExists => "already exists",
            K::WriteZero => "the device accepted no more bytes",
            K::InvalidInput => "invalid argument",
            K::StorageFull => "no space left on device",
            K::ReadOnlyFilesystem => "read-only file system",
            K::IsADirectory => "is a directory",
            K::NotADirectory => "not a directory",
            K::ResourceBusy => "device or resource busy",
            K::FileTooLarge => "file too large",
            _ => "I/O error",
        };
        DeviceError::Io {
            op,
            offset,
            errno: e.raw_os_error(),
            detail,
        }
    }

    /// An error from opening or inspecting the device.
    fn open_error(e: &io::Error) -> DeviceError {
        io_error(Op::Open, 0, e)
    }

    /// The kind of file a device type accepts.
    #[derive(Clone, Copy)]
    enum Kind {
        Regular,
        Block,
    }

    impl Kind {
        fn accepts(self, ty: fs::FileType) -> bool {
            match self {
                Kind::Regular => ty.is_file(),
                Kind::Block => ty.is_block_device(),
            }
        }

        fn refusal(self) -> DeviceError {
            DeviceError::Unsupported {
                op: Op::Open,
                reason: match self {
                    Kind::Regular => "not a regular file (use RawBlock for a block device)",
                    Kind::Block => "not a block device (use FileBlock for a regular file)",
                },
            }
        }

        /// Checks an opened file (`fstat`, so the check and the I/O concern the same file).
        fn check_open(self, file: &File) -> Result<()> {
            let meta = file.metadata().map_err(|e| open_error(&e))?;
            if self.accepts(meta.file_type()) {
                Ok(())
            } else {
                Err(self.refusal())
            }
        }

        /// Checks a path before opening it, so that opening has no side effects on files of
        /// the wrong kind (a FIFO, a tape drive). A missing path passes; opening reports it.
        fn check_path(self, path: &Path) -> Result<()> {
            match fs::metadata(path) {
                Ok(meta) if !self.accepts(meta.file_type()) => Err(self.refusal()),
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(open_error(&e)),
            }
        }
    }

    /// Positioned I/O on an open file with a cached length: the code [`FileBlock`] and
    /// [`RawBlock`] share.
    #[derive(Debug)]
    struct Positioned {
        file: File,
        len: u64,
        sector_size: u32,
    }

    impl Positioned {
        fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            check_bounds(Op::Read, offset, buf.len() as u64, self.len)?;
            self.file
                .read_exact_at(buf, offset)
                .map_err(|e| io_error(Op::Read, offset, &e))
        }

        fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
            check_bounds(Op::Write, offset, data.len() as u64, self.len)?;
            self.file
                .write_all_at(data, offset)
                .map_err(|e| io_error(Op::Write, offset, &e))
        }

        fn sync(&self) -> Result<()> {
            self.file.sync_data().map_err(|e| io_error(Op::Sync, 0, &e))
        }
    }

    /// Forwards the shared part of [`BlockDevice`] (all but `read`, `write`, `sync` and `resize`) to
    /// the `inner` [`Positioned`].
    macro_rules! forward_positioned {
        () => {
            fn sector_size(&self) -> u32 {
                self.inner.sector_size
            }
            fn capacity(&self) -> u64 {
                self.inner.len
            }
        };
    }

    /// Syncs the directory holding `path`, making a newly created name in it durable.
    fn sync_parent_dir(path: &Path) -> Result<()> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| open_error(&e))
    }

    /// A block device in a regular file.
    ///
    /// Reads and writes are positioned (`pread`/`pwrite`, or copies through a mapping of the
    /// file, [module docs](super#mapped-writes)); [`sync`](BlockDevice::sync) is
    /// `fdatasync`; [`resize`](BlockDevice::resize) truncates or extends the file (new bytes
    /// read as zero). The length is cached: accesses past it fail with
    /// [`DeviceError::OutOfBounds`] and never grow the file. The sector size is 512 bytes
    /// unless set with [`with_sector_size`](Self::with_sector_size). See the
    /// [module docs](super) for the durability this relies on.
    #[derive(Debug)]
    pub struct FileBlock {
        inner: Positioned,
        holes: HoleFill,
        mapped: mapped::Mapped,
        behind: WriteBehind,
    }

    impl FileBlock {
        /// Opens an existing regular file for reading and writing; the device length is the
        /// file's length.
        ///
        /// Fails with [`DeviceError::Io`] if the file cannot be opened (errno `ENOENT` if it
        /// does not exist) and with [`DeviceError::Unsupported`] if the path is not a regular
        /// file.
        pub fn open(path: impl AsRef<Path>) -> Result<Self> {
            let path = path.as_ref();
            Kind::Regular.check_path(path)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| open_error(&e))?;
            Self::from_opened(file)
        }

        /// Creates a regular file of `len` zero bytes, truncating it if it exists, and makes
        /// the file and its name durable (syncs it and its directory) before returning.
        pub fn create(path: impl AsRef<Path>, len: u64) -> Result<Self> {
            let path = path.as_ref();
            Kind::Regular.check_path(path)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
                .map_err(|e| open_error(&e))?;
            Self::init_new(path, file, len)
        }

        /// Opens the regular file at `path` if it exists (its length is kept and `len_if_new`
        /// ignored); otherwise creates it with `len_if_new` zero bytes and makes it durable as
        /// [`create`](Self::create) does.
        ///
        /// If the process dies between creating the file and setting its length, the next
        /// call finds an empty file and opens it with length zero.
        pub fn open_or_create(path: impl AsRef<Path>, len_if_new: u64) -> Result<Self> {
            let path = path.as_ref();
            Kind::Regular.check_path(path)?;
            let created = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path);
            match created {
                Ok(file) => Self::init_new(path, file, len_if_new),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Self::open(path),
                Err(e) => Err(open_error(&e)),
            }
        }

        /// Sets the sector size (a power of two): the unit the caller trusts the file system
        /// and drive to write atomically.
        pub fn with_sector_size(mut self, sector_size: u32) -> Result<Self> {
            if !sector_size.is_power_of_two() {
                return Err(DeviceError::BadGeometry {
                    reason: "sector size must be a power of two",
                });
            }
            self.inner.sector_size = sector_size;
            Ok(self)
        }

        /// Sets the granule in which holes of the file are filled when a range is
        /// [prepared](crate::BlockDevice::prepare) ([module docs](super#holes)): a power of
        /// two of at least 4 KiB, or 0 to leave holes alone. The default is
        /// [`HOLE_FILL_GRANULE`] on Linux file systems known to report holes exactly (ext4,
        /// XFS, tmpfs, F2FS), else 0.
        pub fn with_hole_fill(mut self, granule: u64) -> Result<Self> {
            if granule != 0 && (!granule.is_power_of_two() || granule < 4096) {
                return Err(DeviceError::BadGeometry {
                    reason: "hole-fill granule must be 0 or a power of two of at least 4 KiB",
                });
            }
            self.holes = HoleFill::new(granule, self.holes.ahead);
            Ok(self)
        }

        /// A prepare, for appends ([`BlockDevice::prepare_appends`]) or not. One of filled
        /// granules (most of them: a journal's every flush) takes no lock and never waits
        /// for a handle's write.
        fn prepare_range(&mut self, offset: u64, len: u64, appends: bool) {
            if offset.checked_add(len).is_some_and(|e| e <= self.inner.len)
                && self.holes.needs_work(offset, len, self.inner.len)
            {
                self.holes.prepare(
                    &self.inner.file,
                    &self.behind.shared,
                    offset,
                    len,
                    self.inner.len,
                    appends,
                );
            }
        }

        /// Sets how many granules past a [prepared](crate::BlockDevice::prepare) range a
        /// thread of the device's own fills ahead of the writes, or 0 for none ([module
        /// docs](super#holes)); at most 64. The default is 1. The thread is started on first
        /// need.
        pub fn with_fill_ahead(mut self, granules: u64) -> Self {
            self.holes.ahead = granules.min(MAX_FILL_AHEAD);
            self
        }

        /// Turns [mapped writes](super#mapped-writes) and [reads](super#mapped-reads) on or
        /// off. They are on by default on 64-bit Linux on ext4 and tmpfs; off, every write
        /// is a `pwrite` and every read a `pread`. Only granules filled with
        /// [`with_hole_fill`](Self::with_hole_fill) on are written through a mapping, so
        /// turning mapping on for another file system trusts its `SEEK_HOLE` as filling
        /// does, and that its filled blocks need no new space when written (no reflinked or
        /// compressed blocks). Reads go through a mapping anywhere in the file on ext4, and
        /// only in filled granules elsewhere. On a target other than 64-bit Linux it does
        /// nothing.
        pub fn with_mapping(mut self, on: bool) -> Self {
            self.mapped.set_on(on);
            self
        }

        /// Writes that went through a mapping so far (see the [module docs](super#mapped-writes)).
        pub fn mapped_writes(&self) -> u64 {
            self.mapped.count()
        }

        /// Spans of pages written through a mapping that were taken out of the page tables
        /// before a sync so far (see the [module docs](super#syncs-and-mapped-pages)).
        pub fn released_spans(&self) -> u64 {
            self.mapped.released()
        }

        /// Whether threads other than the device's (the write-behind thread, a writer
        /// handle's) release its written pages before they sync.
        #[cfg(all(
            test,
            any(target_os = "linux", target_os = "android"),
            target_pointer_width = "64"
        ))]
        pub(super) fn others_release(&self) -> bool {
            self.mapped.others_release()
        }

        /// Pages of `[offset, offset + len)` mapped in this process's page tables.
        #[cfg(all(
            test,
            any(target_os = "linux", target_os = "android"),
            target_pointer_width = "64"
        ))]
        pub(super) fn pages_present(&self, offset: u64, len: usize) -> io::Result<usize> {
            self.mapped.pages_present(offset, len)
        }

        /// Reads that went through a mapping so far (see the [module docs](super#mapped-reads)).
        pub fn mapped_reads(&self) -> u64 {
            self.mapped.read_count()
        }

        /// Sets how many bytes may be written between syncs before a thread of the
        /// device's own syncs the file ([module docs](super#write-behind)), or 0 for never.
        /// The default is [`WRITE_BEHIND_BYTES`]. The thread is started on first need.
        pub fn with_write_behind(mut self, bytes: u64) -> Self {
            self.behind.set_threshold(bytes);
            self
        }

        /// Granules whose holes a [prepare](crate::BlockDevice::prepare) filled itself, not
        /// finding them filled ahead (see the [module docs](super#holes)).
        pub fn granules_filled_when_prepared(&self) -> u64 {
            self.holes.filled_here
        }

        /// Syncs the write-behind thread has made so far.
        pub fn background_syncs(&self) -> u64 {
            self.behind.syncs()
        }

        fn from_opened(file: File) -> Result<Self> {
            Kind::Regular.check_open(&file)?;
            let len = file.metadata().map_err(|e| open_error(&e))?.len();
            Ok(Self::with_file(file, len))
        }

        fn with_file(file: File, len: u64) -> Self {
            let written = Arc::new(mapped::Written::default());
            FileBlock {
                holes: HoleFill::new(
                    if trusts_holes(&file) {
                        DEFAULT_GRANULE
                    } else {
                        0
                    },
                    FILL_AHEAD,
                ),
                mapped: mapped::Mapped::new(
                    maps_safely(&file),
                    reads_map_anywhere(&file),
                    Arc::clone(&written),
                ),
                behind: WriteBehind::new(WRITE_BEHIND_BYTES, written),
                inner: Positioned {
                    file,
                    len,
                    sector_size: DEFAULT_SECTOR_SIZE,
                },
            }
        }

        /// Sizes a freshly created (or truncated) file and makes it and its name durable.
        fn init_new(path: &Path, file: File, len: u64) -> Result<Self> {
            Kind::Regular.check_open(&file)?;
            file.set_len(len)
                .map_err(|e| io_error(Op::Resize, len, &e))?;
            file.sync_all().map_err(|e| io_error(Op::Sync, 0, &e))?;
            sync_parent_dir(path)?;
            Ok(Self::with_file(file, len))
        }
    }

    impl BlockDevice for FileBlock {
        forward_positioned!();

        fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
            check_bounds(Op::Read, offset, buf.len() as u64, self.inner.len)?;
            // In the file, and either on a file system where a fault on a hole takes no
            // space or in a filled granule: see `Mapped::read`.
            if !((self.mapped.reads_anywhere() || self.holes.covers(offset, buf.len() as u64))
                && self.mapped.read(&self.inner.file, offset, buf))
            {
                self.inner.read(offset, buf)?;
            }
            Ok(())
        }

        fn sync(&mut self) -> Result<()> {
            self.behind.sync(&self.inner.file)
        }

        /// Reads come from the file's mappings (a copy out of the page cache, no call) while
        /// mapping is on.
        fn reads_from_memory(&self) -> bool {
            self.mapped.is_on()
        }

        fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            check_bounds(Op::Write, offset, data.len() as u64, self.inner.len)?;
            // Filled granules lie inside the file and have their space: see `Mapped::write`.
            if !(self.holes.covers(offset, data.len() as u64)
                && self.mapped.write(&self.inner.file, offset, data))
            {
                // Outside the granules known filled the fill-ahead thread may be finding
                // holes.
                let _fill = self
                    .holes
                    .may_be_filling(offset, data.len() as u64)
                    .then(|| self.behind.shared.fill_lock());
                self.inner.write(offset, data)?;
            }
            if self.behind.wrote(&self.inner.file, data.len() as u64) {
                // Before the thread's sync, which may not release them itself.
                self.mapped.release_written();
                self.behind.shared.ask_sync();
            }
            Ok(())
        }

        fn prepare(&mut self, offset: u64, len: u64) {
            self.prepare_range(offset, len, false);
        }

        /// Fills as [`prepare`](Self::prepare) does, in 64 KiB writes: the page cache keeps
        /// the range in 64 KiB pages (see the [module docs](super#page-size)).
        fn prepare_appends(&mut self, offset: u64, len: u64) {
            self.prepare_range(offset, len, true);
        }

        fn writer(&mut self) -> Option<std::boxed::Box<dyn crate::block::DeviceWriter>> {
            let file = self.inner.file.try_clone().ok()?;
            Some(std::boxed::Box::new(FileWriter {
                file,
                len: self.inner.len,
                shared: Arc::clone(&self.behind.shared),
                threshold: self.behind.threshold,
                pending: 0,
            }))
        }

        fn resize(&mut self, new_len: u64) -> Result<()> {
            // No mapping may reach past the end, not even for a moment; no fill ahead may
            // write past it (or find holes the cut is making).
            self.mapped.unmap_all();
            let _fill = self.holes.quiesce(&self.behind.shared);
            self.inner
                .file
                .set_len(new_len)
                .map_err(|e| io_error(Op::Resize, new_len, &e))?;
            self.holes.forget_from(self.inner.len.min(new_len));
            self.inner.len = new_len;
            Ok(())
        }
    }

    /// The granule in which a [`FileBlock`] fills holes by default, where it can find them.
    pub const HOLE_FILL_GRANULE: u64 = 1 << 20;

    #[cfg(any(target_os = "linux", target_os = "android"))]
    const DEFAULT_GRANULE: u64 = HOLE_FILL_GRANULE;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    const DEFAULT_GRANULE: u64 = 0;

    /// Whether the file system under `file` reports holes (`SEEK_DATA` / `SEEK_HOLE`) well
    /// enough for filling to trust: exactly, data still in the page cache included (ext4,
    /// XFS, tmpfs, F2FS). A hole reported over data would have that data overwritten with
    /// zeros, so on any other file system (a network one, or one that has shipped such
    /// bugs) filling is off unless [`FileBlock::with_hole_fill`] turns it on.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn trusts_holes(file: &File) -> bool {
        use fs_magic::*;
        fs_magic::of(file).is_some_and(|t| matches!(t, EXT4 | XFS | TMPFS | F2FS))
    }

    /// The file systems [`trusts_holes`] and [`maps_safely`] know, by `statfs` type.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    mod fs_magic {
        pub(super) const EXT4: u32 = 0xEF53;
        pub(super) const XFS: u32 = 0x5846_5342;
        pub(super) const TMPFS: u32 = 0x0102_1994;
        pub(super) const F2FS: u32 = 0xF2F5_2010;

        /// The type of the file system `file` is on.
        pub(super) fn of(file: &std::fs::File) -> Option<u32> {
            rustix::fs::fstatfs(file).ok().map(|s| s.f_type as u32)
        }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn trusts_holes(_file: &File) -> bool {
        false
    }

    /// Whether writes into filled granules may go through a mapping of `file` by default:
    /// on ext4 and tmpfs, where a filled granule's blocks are the file's own. XFS (reflink)
    /// and F2FS (compression) can share or compress blocks a file holds, and writing such a
    /// block needs new space — inside a page fault, where a full disk is `SIGBUS`.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn maps_safely(file: &File) -> bool {
        use fs_magic::*;
        fs_magic::of(file).is_some_and(|t| matches!(t, EXT4 | TMPFS))
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn maps_safely(_file: &File) -> bool {
        false
    }

    /// Whether a read through a mapping may touch any page inside `file`, holes included:
    /// on ext4 a read fault on a hole maps a page of zeros and allocates nothing. (tmpfs
    /// allocates memory for it, which can fail, so there only filled granules are read
    /// through a mapping.)
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn reads_map_anywhere(file: &File) -> bool {
        fs_magic::of(file).is_some_and(|t| t == fs_magic::EXT4)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn reads_map_anywhere(_file: &File) -> bool {
        false
    }

    /// Bytes a [`FileBlock`] lets be written between syncs before its write-behind thread
    /// syncs the file (see [`FileBlock::with_write_behind`]).
    pub const WRITE_BEHIND_BYTES: u64 = 4 << 20;

    /// Write-behind: once `threshold` bytes were written since the last sync, a thread of
    /// the device's own syncs the file, so the caller's next [`sync`](BlockDevice::sync)
    /// finds little left to write back. The thread holds a duplicate of the file's
    /// descriptor; both syncs take one lock, so the caller's waits for one in flight and
    /// then sees its outcome.
    #[derive(Debug)]
    struct WriteBehind {
        threshold: u64,
        /// Bytes written since the last sync or request.
        pending: u64,
        /// The lock every sync of the file takes (the caller's, the thread's, a
        /// [`FileWriter`]'s) and the error that stays.
        shared: Arc<Shared>,
        worker: Option<Worker>,
        /// The thread could not be started: syncs stay the caller's.
        refused: bool,
    }

    #[derive(Debug)]
    struct Worker {
        /// Holds the thread's wake-up channel ([`Shared::wake`]), closed on drop.
        shared: Arc<Shared>,
        thread: Option<thread::JoinHandle<()>>,
    }

    #[derive(Debug, Default)]
    struct Shared {
        /// Held for every sync of the file. Holds the first error a background sync got:
        /// the kernel reports a failed write-back once per open file, and the thread's
        /// sync may be the one that hears it, so every later sync of the device fails too.
        state: Mutex<Option<(io::ErrorKind, Option<i32>)>>,
        /// Held while a granule's holes are found and filled, and for every write through a
        /// [`FileWriter`]: a fill trusts `SEEK_HOLE`, which sees a write once it is made, so
        /// it never writes zeros over what a handle writes at the same time — even where
        /// no one prepared the handle's range (see [`BlockDevice::prepare`]).
        ///
        /// [`BlockDevice::prepare`]: crate::BlockDevice::prepare
        fill: Mutex<()>,
        /// A sync is asked for and no sync began since (a request the caller's own sync
        /// answered is dropped).
        wanted: AtomicBool,
        syncs: AtomicU64,
        /// Wakes the write-behind thread while it runs (`None` before it starts and once
        /// it is told to end): the device's writes and its handles' both ask through it.
        wake: Mutex<Option<mpsc::SyncSender<()>>>,
        /// The device's mappings and what was written through them: released by every
        /// sync of the file, whoever makes it, just before it (see the [module
        /// docs](super#syncs-and-mapped-pages)).
        written: Arc<mapped::Written>,
    }

    impl Shared {
        fn lock(&self) -> std::sync::MutexGuard<'_, Option<(io::ErrorKind, Option<i32>)>> {
            // Nothing panics while holding it; a poisoned lock still guards its value.
            self.state.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// The lock of hole filling and handle writes (see `fill`).
        fn fill_lock(&self) -> std::sync::MutexGuard<'_, ()> {
            self.fill.lock().unwrap_or_else(|p| p.into_inner())
        }

        fn wake_lock(&self) -> std::sync::MutexGuard<'_, Option<mpsc::SyncSender<()>>> {
            // Nothing panics while holding it; a poisoned lock still guards its value.
            self.wake.lock().unwrap_or_else(|p| p.into_inner())
        }

        /// Asks the write-behind thread for a sync, if it runs.
        fn ask_sync(&self) {
            if let Some(w) = self.wake_lock().as_ref() {
                self.wanted.store(true, Ordering::Release);
                // Full: a sync is asked for already, and it covers these writes too.
                let _ = w.try_send(());
            }
        }

        /// A sync asked for by a caller — the device's owner (`by_owner`) or a
        /// [`FileWriter`] — after any sync in flight, failing if one failed; the pages
        /// written through the device's mappings are released first, as far as the caller
        /// may (see `mapped::Written`).
        fn sync(&self, file: &File, by_owner: bool) -> Result<()> {
            let mut state = self.lock();
            if let Some((kind, errno)) = *state {
                return Err(io_error(Op::Sync, 0, &rebuild(kind, errno)));
            }
            self.wanted.store(false, Ordering::Release);
            if by_owner {
                self.written.release_by_owner();
            } else {
                self.written.release_by_other();
            }
            file.sync_data().map_err(|e| {
                *state = Some((e.kind(), e.raw_os_error()));
                io_error(Op::Sync, 0, &e)
            })
        }
    }

    /// A [`FileBlock`]'s second handle ([`BlockDevice::writer`]): a duplicate of its
    /// descriptor, bounded by the length the device had when the handle was made, syncing
    /// under the device's sync lock (a failed write-back one of them hears fails the other's
    /// later syncs too). Its writes count toward write-behind as the device's own do: once
    /// the device's threshold is written through it, it asks the device's write-behind
    /// thread (if that runs) for a sync, so a checkpoint's tens of megabytes go to the
    /// disk while the rest are still being copied, and its closing sync waits for little.
    #[derive(Debug)]
    struct FileWriter {
        file: File,
        len: u64,
        shared: Arc<Shared>,
        /// The device's write-behind threshold when the handle was made (0: never).
        threshold: u64,
        /// Bytes written through the handle since its last sync or request.
        pending: u64,
    }

    impl crate::block::DeviceWriter for FileWriter {
        fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            check_bounds(Op::Write, offset, data.len() as u64, self.len)?;
            {
                let _fill = self.shared.fill_lock();
                self.file
                    .write_all_at(data, offset)
                    .map_err(|e| io_error(Op::Write, offset, &e))?;
            }
            self.pending = self.pending.saturating_add(data.len() as u64);
            if self.threshold != 0 && self.pending >= self.threshold {
                self.pending = 0;
                self.shared.ask_sync();
            }
            Ok(())
        }

        fn sync(&mut self) -> Result<()> {
            self.pending = 0;
            self.shared.sync(&self.file, false)
        }
    }

    impl WriteBehind {
        fn new(threshold: u64, written: Arc<mapped::Written>) -> Self {
            WriteBehind {
                threshold,
                pending: 0,
                shared: Arc::new(Shared {
                    written,
                    ..Shared::default()
                }),
                worker: None,
                refused: false,
            }
        }

        fn set_threshold(&mut self, threshold: u64) {
            self.threshold = threshold;
        }

        fn syncs(&self) -> u64 {
            self.shared.syncs.load(Ordering::Acquire)
        }

        /// Counts `len` bytes written; past the threshold starts the thread if need be and
        /// says whether the caller should ask it for a sync (it runs).
        fn wrote(&mut self, file: &File, len: u64) -> bool {
            self.pending = self.pending.saturating_add(len);
            if self.threshold == 0 || self.pending < self.threshold || self.refused {
                return false;
            }
            self.pending = 0;
            if self.worker.is_none() {
                self.worker = Worker::start(file, &self.shared);
                self.refused = self.worker.is_none();
            }
            self.worker.is_some()
        }

        /// The caller's sync: after any background sync in flight, failing if one failed.
        fn sync(&mut self, file: &File) -> Result<()> {
            self.pending = 0;
            self.shared.sync(file, true)
        }
    }

    fn rebuild(kind: io::ErrorKind, errno: Option<i32>) -> io::Error {
        match errno {
            Some(n) => io::Error::from_raw_os_error(n),
            None => io::Error::new(kind, "an earlier background sync failed"),
        }
    }

    impl Worker {
        fn start(file: &File, shared: &Arc<Shared>) -> Option<Worker> {
            let file = file.try_clone().ok()?;
            let (wake, asked) = mpsc::sync_channel::<()>(1);
            let theirs = Arc::clone(shared);
            *shared.wake_lock() = Some(wake);
            let thread = thread::Builder::new()
                .name("ember-write-behind".into())
                .spawn(move || {
                    while asked.recv().is_ok() {
                        let mut state = theirs.lock();
                        if state.is_some() || !theirs.wanted.swap(false, Ordering::AcqRel) {
                            continue;
                        }
                        theirs.written.release_by_other();
                        if let Err(e) = file.sync_data() {
                            *state = Some((e.kind(), e.raw_os_error()));
                        }
                        theirs.syncs.fetch_add(1, Ordering::Release);
                    }
                })
                .ok();
            let Some(thread) = thread else {
                *shared.wake_lock() = None;
                return None;
            };
            Some(Worker {
                shared: Arc::clone(shared),
                thread: Some(thread),
            })
        }
    }

    impl Drop for Worker {
        fn drop(&mut self) {
            // Closing the channel (its one sender is the shared one) ends the thread after
            // the sync in flight, if any; a handle asking later finds no thread.
            *self.shared.wake_lock() = None;
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// The zeros a hole is filled with, [`SMALL_PIECE`] or [`LARGE_PIECE`] bytes a write.
    static FILL_PIECE: [u8; LARGE_PIECE] = [0; LARGE_PIECE];

    /// A fill write of one page: the page cache keeps 4 KiB pages there (see the [module
    /// docs](super#page-size)).
    const SMALL_PIECE: usize = 4096;

    /// A fill write of 64 KiB, for a range prepared for appends: the page cache keeps
    /// 64 KiB pages there, where the kernel does (ext4 since Linux 6.16, XFS).
    const LARGE_PIECE: usize = 64 << 10;

    /// Granules past a prepared range that a thread of the device's own fills ahead (see
    /// the [module docs](super#holes)) unless [`FileBlock::with_fill_ahead`] says otherwise.
    const FILL_AHEAD: u64 = 1;

    /// The most granules [`FileBlock::with_fill_ahead`] takes.
    const MAX_FILL_AHEAD: u64 = 64;

    /// A set of granules, one bit each.
    #[derive(Debug, Default)]
    struct Granules(std::vec::Vec<u64>);

    impl Granules {
        fn has(&self, g: u64) -> bool {
            let word = (g / 64) as usize;
            self.0.get(word).is_some_and(|w| w & (1 << (g % 64)) != 0)
        }

        fn set(&mut self, g: u64) {
            let word = (g / 64) as usize;
            if self.0.len() <= word {
                self.0.resize(word + 1, 0);
            }
            self.0[word] |= 1 << (g % 64);
        }

        /// Forgets granule `g` and every later one.
        fn forget_from(&mut self, g: u64) {
            let word = (g / 64) as usize;
            if word < self.0.len() {
                self.0[word] &= (1u64 << (g % 64)) - 1;
                self.0.truncate(word + 1);
            }
        }
    }

    /// Fills the holes of a sparse file with zeros, a granule at a time, when a range in it
    /// is prepared (see the [module docs](super#holes)): the granules the range touches at
    /// once, the next ones on a thread of the device's own ([`Filler`]).
    #[derive(Debug)]
    struct HoleFill {
        /// Bytes of a granule; 0 when off from the start.
        granule: u64,
        /// Whether granules are still filled (a failure turns it off; what was filled stays
        /// known).
        filling: bool,
        /// Granules whose holes were filled (or that needed no filling) this session, as far
        /// as this handle knows: only these are written through a mapping.
        done: Granules,
        /// Granules handed to the thread (since the last resize).
        asked: Granules,
        /// Granules past a prepared range to fill ahead.
        ahead: u64,
        /// The thread, once started.
        filler: Option<std::boxed::Box<Filler>>,
        /// The thread could not be started: granules are filled when prepared, as without it.
        refused: bool,
        /// Granules this handle filled itself, when prepared.
        filled_here: u64,
    }

    impl HoleFill {
        fn new(granule: u64, ahead: u64) -> Self {
            HoleFill {
                granule,
                filling: granule != 0,
                done: Granules::default(),
                asked: Granules::default(),
                ahead,
                filler: None,
                refused: false,
                filled_here: 0,
            }
        }

        /// Whether every granule `[offset, offset + len)` touches was filled this session
        /// (and not cut off since): its space is allocated.
        fn covers(&self, offset: u64, len: u64) -> bool {
            // A granule smaller than a page (16 KiB or 64 KiB on some kernels) could share
            // its page with a hole.
            self.granule >= MIN_MAPPED_GRANULE && len != 0 && self.all_done(offset, len)
        }

        /// The granules `[offset, offset + len)` touches (`len` > 0, a granule set).
        fn granules(&self, offset: u64, len: u64) -> core::ops::RangeInclusive<u64> {
            offset / self.granule..=(offset + len - 1) / self.granule
        }

        /// Whether every granule `[offset, offset + len)` touches is known filled (`len` >
        /// 0, a granule set).
        fn all_done(&self, offset: u64, len: u64) -> bool {
            self.granules(offset, len).all(|g| self.done.has(g))
        }

        /// Whether a [`prepare`](Self::prepare) of `[offset, offset + len)` has anything to
        /// do: filling is on, and a granule the range touches was not filled this session,
        /// or one to fill ahead was neither filled nor handed to the thread.
        fn needs_work(&self, offset: u64, len: u64, file_len: u64) -> bool {
            if !self.filling || len == 0 {
                return false;
            }
            !self.all_done(offset, len)
                || (!self.refused
                    && self
                        .ahead_of(*self.granules(offset, len).end(), file_len)
                        .any(|g| !self.done.has(g) && !self.asked.has(g)))
        }

        /// The granules to fill ahead of granule `last`: the next `ahead` that start inside
        /// the file.
        fn ahead_of(&self, last: u64, file_len: u64) -> impl Iterator<Item = u64> + use<> {
            let end = file_len.div_ceil(self.granule);
            (last.saturating_add(1)..last.saturating_add(1).saturating_add(self.ahead))
                .take_while(move |&g| g < end)
        }

        /// Fills the holes of the granules that `[offset, offset + len)` touches and that
        /// were not filled yet this session, and hands the next `ahead` granules to the
        /// thread. A failure only turns filling off: it never changes the file's content
        /// (see [`fill_holes`]), and the writes that follow report whatever is wrong with
        /// the device. `shared`'s fill lock is taken for the fills (see [`Shared`]).
        fn prepare(
            &mut self,
            file: &File,
            shared: &Arc<Shared>,
            offset: u64,
            len: u64,
            file_len: u64,
            appends: bool,
        ) {
            self.take_reports();
            if !self.filling || len == 0 {
                return;
            }
            let piece = if appends { LARGE_PIECE } else { SMALL_PIECE };
            let last = *self.granules(offset, len).end();
            if !self.all_done(offset, len) {
                let _fill = shared.fill_lock();
                for g in self.granules(offset, len) {
                    if self.done.has(g) {
                        continue;
                    }
                    let start = g * self.granule;
                    let end = start.saturating_add(self.granule).min(file_len);
                    if fill_holes(file, start, end, piece).is_err() {
                        self.filling = false;
                        return;
                    }
                    self.filled_here += 1;
                    self.done.set(g);
                }
            }
            if self.refused || self.ahead == 0 {
                return;
            }
            let mut jobs = std::vec::Vec::new();
            for g in self.ahead_of(last, file_len) {
                let start = g * self.granule;
                if !self.done.has(g) && !self.asked.has(g) {
                    self.asked.set(g);
                    jobs.push((
                        g,
                        start,
                        start.saturating_add(self.granule).min(file_len),
                        piece,
                    ));
                }
            }
            if jobs.is_empty() {
                return;
            }
            if self.filler.is_none() {
                self.filler = Filler::start(file, shared).map(std::boxed::Box::new);
                self.refused = self.filler.is_none();
            }
            if let Some(f) = &self.filler {
                f.ask(jobs);
            }
        }

        /// Takes in the granules the thread has filled since the last call (and turns
        /// filling off if one of its fills failed).
        fn take_reports(&mut self) {
            let Some(f) = &self.filler else { return };
            let mut st = f.jobs.lock();
            for g in st.filled.drain(..) {
                self.done.set(g);
            }
            if st.failed {
                self.filling = false;
            }
        }

        /// Whether a write of `[offset, offset + len)` must take the fill lock: the thread
        /// exists and the range reaches outside the granules known filled, where it may be
        /// finding holes.
        fn may_be_filling(&self, offset: u64, len: u64) -> bool {
            self.filler.is_some() && len != 0 && !self.all_done(offset, len)
        }

        /// Drops the thread's queued granules and its reports, so that nothing it does from
        /// now on reaches the file; returns the fill lock, held until the caller has changed
        /// the file's length (a fill in flight finishes first).
        fn quiesce<'s>(&mut self, shared: &'s Shared) -> Option<std::sync::MutexGuard<'s, ()>> {
            let f = self.filler.as_ref()?;
            {
                let mut st = f.jobs.lock();
                st.epoch += 1;
                st.queue.clear();
                st.filled.clear();
            }
            self.asked = Granules::default();
            Some(shared.fill_lock())
        }

        /// Forgets what it knows from byte `at` on (the file was cut there: what lies past
        /// it now, or later, is a hole).
        fn forget_from(&mut self, at: u64) {
            if self.granule == 0 {
                return;
            }
            self.done.forget_from(at / self.granule);
            self.asked.forget_from(at / self.granule);
        }
    }

    /// Writes zeros over the holes in `[start, end)`, found with `SEEK_DATA` / `SEEK_HOLE`
    /// (a hole reads as zeros, so the content stays what it was; a file system that cannot
    /// tell reports the whole file as data, and nothing is written). The caller holds the
    /// fill lock (see [`Shared`]).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn fill_holes(file: &File, start: u64, end: u64, piece: usize) -> io::Result<()> {
        use rustix::fs::{SeekFrom as Seek, seek};
        use rustix::io::Errno;
        let mut pos = start;
        while pos < end {
            let data = match seek(file, Seek::Data(pos)) {
                Ok(d) => d,
                // No data from `pos` to the end of the file.
                Err(Errno::NXIO) => u64::MAX,
                Err(e) => return Err(e.into()),
            };
            zero_range(file, pos, data.min(end), piece)?;
            if data >= end {
                break;
            }
            pos = seek(file, Seek::Hole(data))?;
        }
        Ok(())
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn fill_holes(_file: &File, _start: u64, _end: u64, _piece: usize) -> io::Result<()> {
        Ok(())
    }

    /// Writes zeros over `[start, end)`, in writes of `piece` bytes (at most
    /// [`LARGE_PIECE`]) that end on multiples of `piece`: the page cache sizes a page by
    /// its offset's alignment too, and a hole that starts off a 64 KiB boundary would
    /// otherwise get none.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    fn zero_range(file: &File, mut start: u64, end: u64, piece: usize) -> io::Result<()> {
        let piece = piece.clamp(1, FILL_PIECE.len()) as u64;
        while start < end {
            let to_boundary = piece - start % piece;
            let n = (end - start).min(to_boundary) as usize;
            file.write_all_at(&FILL_PIECE[..n], start)?;
            start += n as u64;
        }
        Ok(())
    }

    /// The thread that fills granules ahead of the writes, with a duplicate of the file's
    /// descriptor. It fills a granule under the fill lock, as a prepare does, so no write
    /// outside filled granules (which take that lock while the thread exists) can be
    /// zeroed; a resize drops its queue and waits for the fill in flight ([`HoleFill::quiesce`]).
    #[derive(Debug)]
    struct Filler {
        jobs: Arc<FillJobs>,
        /// `None` only while dropping.
        wake: Option<mpsc::SyncSender<()>>,
        thread: Option<thread::JoinHandle<()>>,
    }

    #[derive(Debug, Default)]
    struct FillJobs {
        state: Mutex<FillState>,
    }

    #[derive(Debug, Default)]
    struct FillState {
        /// Granules to fill: (granule, start, end) in bytes, and the bytes a fill write.
        queue: std::collections::VecDeque<(u64, u64, u64, usize)>,
        /// Granules filled since the owner last looked.
        filled: std::vec::Vec<u64>,
        /// A fill failed: the owner stops filling.
        failed: bool,
        /// Bumped by each resize: a job taken before it is dropped.
        epoch: u64,
    }

    impl FillJobs {
        fn lock(&self) -> std::sync::MutexGuard<'_, FillState> {
            // Nothing panics while holding it; a poisoned lock still guards its value.
            self.state.lock().unwrap_or_else(|p| p.into_inner())
        }
    }

    impl Filler {
        fn start(file: &File, shared: &Arc<Shared>) -> Option<Filler> {
            let file = file.try_clone().ok()?;
            let jobs = Arc::new(FillJobs::default());
            let (wake, asked) = mpsc::sync_channel::<()>(1);
            let (theirs, shared) = (Arc::clone(&jobs), Arc::clone(shared));
            let thread = thread::Builder::new()
                .name("ember-fill-ahead".into())
                .spawn(move || {
                    while asked.recv().is_ok() {
                        loop {
                            let (job, epoch) = {
                                let mut st = theirs.lock();
                                match st.queue.pop_front() {
                                    Some(j) => (j, st.epoch),
                                    None => break,
                                }
                            };
                            // Lock order: the fill lock, then (briefly) the jobs'; no one
                            // waits for the fill lock while holding the jobs' lock.
                            let _fill = shared.fill_lock();
                            if theirs.lock().epoch != epoch {
                                continue;
                            }
                            let filled = fill_holes(&file, job.1, job.2, job.3).is_ok();
                            let mut st = theirs.lock();
                            if st.epoch == epoch {
                                if filled {
                                    st.filled.push(job.0);
                                } else {
                                    // Filling is off from here on (a full disk, say).
                                    st.failed = true;
                                    st.queue.clear();
                                }
                            }
                        }
                    }
                })
                .ok()?;
            Some(Filler {
                jobs,
                wake: Some(wake),
                thread: Some(thread),
            })
        }

        /// Queues granules and wakes the thread.
        fn ask(&self, jobs: std::vec::Vec<(u64, u64, u64, usize)>) {
            self.jobs.lock().queue.extend(jobs);
            if let Some(wake) = &self.wake {
                // Full: the thread is woken already and will find these too.
                let _ = wake.try_send(());
            }
        }
    }

    impl Drop for Filler {
        fn drop(&mut self) {
            // Nothing queued is filled; closing the channel ends the thread after the fill
            // in flight.
            self.jobs.lock().queue.clear();
            self.wake = None;
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// The smallest hole-fill granule whose filled granules writes go through a mapping in:
    /// the largest page size Linux uses, so no page of a filled granule is partly a hole.
    const MIN_MAPPED_GRANULE: u64 = 64 << 10;

    /// The largest write a [`FileBlock`] copies into a mapping of its file rather than
    /// `pwrite` (see the [module docs](super#mapped-writes)).
    pub const MAX_MAPPED_WRITE: usize = 64 << 10;

    /// Reads and writes through shared mappings of the file (see the [module
    /// docs](super#mapped-writes)).
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    ))]
    #[allow(unsafe_code)]
    mod mapped {
        use core::ffi::c_void;
        use core::ptr::{self, NonNull};
        use std::fs::File;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::{Arc, Mutex, MutexGuard};
        use std::vec::Vec;

        use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap, munmap};

        use super::MAX_MAPPED_WRITE;

        /// The system's page size: the unit of a written span (`madvise` takes page-aligned
        /// ranges).
        fn page_size() -> usize {
            rustix::param::page_size()
        }

        /// Whether a thread other than the one writing through the mappings may release
        /// their pages while it writes: on Linux 6.1 and later. Before that kernel (commit
        /// "mm: delay page_remove_rmap() until after the TLB has been flushed"), a zap took
        /// a page out of the reverse map before it flushed the TLBs, so a store through a
        /// stale TLB entry on the writer's CPU could land after a write-back had found the
        /// page unmapped and cleaned it: the page then stays clean with the store in it,
        /// and no sync writes it. A release from the writer's own thread has no such store
        /// in flight, on any kernel.
        fn others_may_release() -> bool {
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .is_ok_and(|release| at_least_6_1(&release))
        }

        /// Whether a kernel release string (`uname -r`: `6.8.0-45-generic`) names Linux 6.1
        /// or later; `false` if it cannot be read.
        fn at_least_6_1(release: &str) -> bool {
            let mut parts = release
                .trim()
                .split(|c: char| !c.is_ascii_digit())
                .map(|p| p.parse::<u32>().ok());
            match (parts.next().flatten(), parts.next().flatten()) {
                (Some(major), Some(minor)) => (major, minor) >= (6, 1),
                _ => false,
            }
        }

        /// Bytes of the file one mapping covers, starting at a multiple of its size.
        const WINDOW: u64 = 64 << 20;
        /// Mappings kept at once (16 GiB of address space); past that a new one replaces
        /// the least recently used. Reads anywhere in a file make windows all over it, and
        /// replacing one (`munmap`, `mmap`, faults again) costs far more than a `pread`, so
        /// the cap is set where a 64-bit address space does not mind, not low.
        const MAX_WINDOWS: usize = 256;

        #[derive(Debug, Clone)]
        struct Window {
            base: NonNull<u8>,
            last_use: u64,
            /// The pages of the window written through it since the last release: a
            /// [`Span`], shared with the window's entry in [`Written`].
            span: Arc<AtomicU64>,
        }

        /// Pages `lo..hi` of a window, packed as `lo << 32 | hi`; empty (0) when `hi <= lo`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        struct Span {
            lo: u64,
            hi: u64,
        }

        impl Span {
            fn unpack(v: u64) -> Self {
                Span {
                    lo: v >> 32,
                    hi: v & u64::from(u32::MAX),
                }
            }

            fn pack(self) -> u64 {
                (self.lo << 32) | self.hi
            }

            fn is_empty(self) -> bool {
                self.hi <= self.lo
            }

            /// The span grown to cover bytes `at..end` of the window, in pages of `page`
            /// bytes.
            fn cover(self, at: usize, end: usize, page: usize) -> Self {
                let (lo, hi) = ((at / page) as u64, end.div_ceil(page) as u64);
                if self.is_empty() {
                    Span { lo, hi }
                } else {
                    Span {
                        lo: self.lo.min(lo),
                        hi: self.hi.max(hi),
                    }
                }
            }
        }

        /// What every thread that syncs a file needs to know of the device's mappings of
        /// it: each live window's address and the span written through it since the last
        /// release. Shared by the [`Mapped`] that owns the windows, the write-behind thread
        /// and the writer handles, each of which [releases](Written::release) the written
        /// pages before it syncs (see the [module docs](super::super#syncs-and-mapped-pages)).
        ///
        /// Invariant: the `base` of an entry of slot `i` is the start of a live mapping of
        /// window `i` (the same as the owner's `Window::base`) and that window's span. The
        /// owner adds an entry after it maps a window and takes it out, under the lock,
        /// before it unmaps the window, so a release (which holds the lock) only ever
        /// touches live mappings.
        ///
        /// Only the owner grows a span (its writes through the mappings, with a plain load
        /// and store: [`Mapped::write`]); every other thread only takes a span whole
        /// (`swap(0)` in [`release`](Written::release)). A thread that wrote through the
        /// mappings besides the owner would need a read-modify-write there, or its spans
        /// could be lost — at the cost of a flush a page at the next sync, not of data:
        /// the span only saves work, and `fdatasync` writes back a dirty page whether or
        /// not it was released.
        #[derive(Debug)]
        pub(super) struct Written {
            windows: Mutex<Vec<Option<Registered>>>,
            released: AtomicU64,
            /// The system's page size.
            page: usize,
            /// [`others_may_release`], asked once.
            others: bool,
        }

        impl Default for Written {
            fn default() -> Self {
                Written {
                    windows: Mutex::new(Vec::new()),
                    released: AtomicU64::new(0),
                    page: page_size(),
                    others: others_may_release(),
                }
            }
        }

        /// A live window in [`Written`]: its address and its written span.
        #[derive(Debug, Clone)]
        struct Registered {
            base: usize,
            span: Arc<AtomicU64>,
        }

        impl Written {
            fn lock(&self) -> MutexGuard<'_, Vec<Option<Registered>>> {
                // Nothing panics while holding it; a poisoned lock still guards its value.
                self.windows.lock().unwrap_or_else(|p| p.into_inner())
            }

            /// [`release`](Self::release), called by the thread that owns the mappings
            /// (the device's `&mut` holder), so no copy through them is in flight.
            pub(super) fn release_by_owner(&self) {
                self.release();
            }

            /// [`release`](Self::release), called by another thread (the write-behind
            /// thread, a writer handle) while the owner may be copying through the mappings:
            /// only where the kernel makes that safe ([`others_may_release`]); elsewhere it
            /// does nothing, and the owner's own releases are all there is.
            pub(super) fn release_by_other(&self) {
                if self.others {
                    self.release();
                }
            }

            /// Takes the pages written through the mappings since the last release out of
            /// this process's page tables (`madvise(MADV_DONTNEED)` on each window's
            /// span), so that a sync made next finds none of them mapped writable. What was
            /// written stays in the page cache, dirty, and a later access maps the page
            /// again.
            fn release(&self) {
                let windows = self.lock();
                for Registered { base, span } in windows.iter().flatten() {
                    let s = Span::unpack(span.swap(0, Ordering::AcqRel));
                    if s.is_empty() {
                        continue;
                    }
                    let lo = s.lo as usize * self.page;
                    let hi = (s.hi as usize * self.page).min(WINDOW as usize);
                    // SAFETY: `base` starts a live mapping of `WINDOW` bytes (the invariant,
                    // kept by the lock held), page-aligned as every mapping is, and `lo..hi`
                    // is a whole number of pages inside it. On a shared file mapping
                    // `MADV_DONTNEED` drops page-table entries only: a dirty entry marks its
                    // page dirty in the page cache first, so the file's content is
                    // unchanged, and the mapping stays, so a later copy through it faults
                    // the page in again. A copy the owner makes at the same moment from
                    // another CPU lands before its entry goes, or after, through the stale
                    // TLB entry until the flush that ends the call; that the page is then
                    // still written back is the kernel's from Linux 6.1 on, which is when
                    // `release_by_other` lets another thread call this (`others_may_release`).
                    let done = unsafe {
                        madvise(
                            (*base as *mut u8).add(lo).cast::<c_void>(),
                            hi.saturating_sub(lo),
                            Advice::LinuxDontNeed,
                        )
                    };
                    if done.is_ok() {
                        self.released.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }

            /// Spans released so far.
            pub(super) fn released(&self) -> u64 {
                self.released.load(Ordering::Relaxed)
            }
        }

        /// Up to [`MAX_WINDOWS`] shared, writable mappings of one file.
        ///
        /// Invariant: every `Window::base` in `windows` is the start of a live mapping of
        /// `WINDOW` bytes of the file from byte `i * WINDOW`, `i` its slot, made by
        /// [`Mapped::window`] and unmapped only by [`Mapped::unmap_all`] or by
        /// [`Mapped::window`] when it takes the window out of its slot.
        #[derive(Debug)]
        pub(super) struct Mapped {
            on: bool,
            /// Reads may go through a mapping outside filled granules too.
            reads_anywhere: bool,
            /// Slot `i`: the mapping of window `i`, if made.
            windows: Vec<Option<Window>>,
            /// Windows mapped.
            live: usize,
            /// [`MAX_WINDOWS`], but in tests.
            max_windows: usize,
            clock: u64,
            writes: u64,
            reads: u64,
            /// The windows' addresses and written spans, for the threads that sync.
            written: Arc<Written>,
        }

        // SAFETY: the mappings belong to this value and are written only through `&mut
        // self`; the one pointer into them handed out is each window's address in
        // `written`, which other threads use only for `madvise(MADV_DONTNEED)` under its
        // lock, while the window is mapped (`Written`'s invariant). So moving the value to
        // another thread, or sharing `&Mapped` (which reads only the counters), races with
        // nothing.
        unsafe impl Send for Mapped {}
        // SAFETY: as above.
        unsafe impl Sync for Mapped {}

        impl Mapped {
            /// Mappings of a file (none made yet), registered in `written` as they are made.
            pub(super) fn new(on: bool, reads_anywhere: bool, written: Arc<Written>) -> Self {
                Mapped {
                    on,
                    reads_anywhere,
                    windows: Vec::new(),
                    live: 0,
                    max_windows: MAX_WINDOWS,
                    clock: 0,
                    writes: 0,
                    reads: 0,
                    written,
                }
            }

            pub(super) fn reads_anywhere(&self) -> bool {
                self.on && self.reads_anywhere
            }

            pub(super) fn is_on(&self) -> bool {
                self.on
            }

            pub(super) fn read_count(&self) -> u64 {
                self.reads
            }

            pub(super) fn set_on(&mut self, on: bool) {
                if !on {
                    self.unmap_all();
                }
                self.on = on;
            }

            pub(super) fn count(&self) -> u64 {
                self.writes
            }

            /// Copies `data` to byte `offset` of `file` through a mapping; `false` if it did
            /// not (mapping off, `data` too big or across two windows, no mapping to be had),
            /// and the caller must write it itself.
            ///
            /// The caller promises that `[offset, offset + data.len())` lies inside the file
            /// and that its pages have their space allocated: they were written this
            /// session and the file has not been cut since (a filled granule). Touching them
            /// then neither faults past the end of the file nor asks the file system for
            /// space — the two ways a write through a mapping fails with `SIGBUS` that a
            /// device can rule out.
            pub(super) fn write(&mut self, file: &File, offset: u64, data: &[u8]) -> bool {
                let Some((base, at)) = self.place(file, offset, data.len()) else {
                    return false;
                };
                // SAFETY: `base` starts a live mapping of `WINDOW` bytes (the invariant) and
                // `place` checked `at + data.len() <= WINDOW`, so the destination is inside
                // it; the source is a slice of ordinary memory, which cannot overlap a
                // mapping (whose address other threads hold only to `madvise` it, see
                // `Written`). The pages are inside the file and
                // allocated (the caller's promise), so the copy does not fault past its end.
                unsafe {
                    ptr::copy_nonoverlapping(data.as_ptr(), base.as_ptr().add(at), data.len());
                }
                // After the copy, so that a release from now on covers it. (`place` made the
                // window if need be, so its slot holds it.)
                //
                // A load and a store, not a read-modify-write: only this thread grows a span
                // (others only take it, `Written::release`), so a release that slips in
                // between them loses nothing of this write — the store then puts back a
                // span that covers pages already released as well, whose second release
                // costs a call and drops nothing. A locked instruction here would wait for
                // the copy's stores to drain and pull the span's cache line over from the
                // thread that released it last: 4% of a YCSB update on a 2-CPU machine.
                if let Some(Some(w)) = self.windows.get((offset / WINDOW) as usize) {
                    let (end, page) = (at + data.len(), self.written.page);
                    let old = w.span.load(Ordering::Relaxed);
                    let new = Span::unpack(old).cover(at, end, page).pack();
                    if new != old {
                        w.span.store(new, Ordering::Release);
                    }
                }
                self.writes += 1;
                true
            }

            /// Copies byte `offset` of `file` onward into `buf` through a mapping; `false` if
            /// it did not (as for [`write`](Self::write)), and the caller must read it itself.
            ///
            /// The caller promises that `[offset, offset + buf.len())` lies inside the file
            /// and that touching its pages takes no space: they are allocated (a filled
            /// granule), or the file system maps a hole's page without allocating (ext4).
            /// A page not in the page cache is read from the disk inside the fault, so a
            /// disk that fails that read is `SIGBUS` where `pread` returns `EIO` (the
            /// module docs).
            pub(super) fn read(&mut self, file: &File, offset: u64, buf: &mut [u8]) -> bool {
                let Some((base, at)) = self.place(file, offset, buf.len()) else {
                    return false;
                };
                // SAFETY: `base` starts a live mapping of `WINDOW` bytes (the invariant) and
                // `place` checked `at + buf.len() <= WINDOW`, so the source is inside it; the
                // destination is ordinary memory borrowed mutably, which cannot overlap a
                // mapping (whose address other threads hold only to `madvise` it). The pages lie inside the file and
                // a fault on them takes no space (the caller's promise), so the copy does not
                // fault past its end. Nothing in this process changes the source meanwhile:
                // writes through the mapping take `&mut self`, and a writer handle's
                // `pwrite`s go to ranges the device's user does not read until the handle is
                // done (the `DeviceWriter` contract) — what `pread` would need as well.
                unsafe {
                    ptr::copy_nonoverlapping(base.as_ptr().add(at), buf.as_mut_ptr(), buf.len());
                }
                self.reads += 1;
                true
            }

            /// The mapping and the offset in it for `len` bytes at `offset`, if mapping is on,
            /// `len` is 1 to [`MAX_MAPPED_WRITE`] bytes in one window, and the window can be
            /// mapped.
            fn place(
                &mut self,
                file: &File,
                offset: u64,
                len: usize,
            ) -> Option<(NonNull<u8>, usize)> {
                if !self.on || len == 0 || len > MAX_MAPPED_WRITE {
                    return None;
                }
                let index = offset / WINDOW;
                let last = offset.checked_add(len as u64 - 1)?;
                if last / WINDOW != index {
                    return None;
                }
                let base = self.window(file, index)?;
                Some((base, (offset - index * WINDOW) as usize))
            }

            /// The mapping of window `index`, made if need be.
            fn window(&mut self, file: &File, index: u64) -> Option<NonNull<u8>> {
                self.clock += 1;
                let slot = usize::try_from(index).ok()?;
                if let Some(Some(w)) = self.windows.get_mut(slot) {
                    w.last_use = self.clock;
                    return Some(w.base);
                }
                if self.live >= self.max_windows {
                    let oldest = self
                        .windows
                        .iter()
                        .enumerate()
                        .filter_map(|(i, w)| w.as_ref().map(|w| (w.last_use, i)))
                        .min()
                        .map(|(_, i)| i);
                    if let Some(i) = oldest
                        && let Some(w) = self.windows[i].take()
                    {
                        self.live -= 1;
                        // Out of `written` before it goes (its invariant).
                        let mut registered = self.written.lock();
                        if let Some(e) = registered.get_mut(i) {
                            *e = None;
                        }
                        // SAFETY: `w.base` starts a live mapping of `WINDOW` bytes (the
                        // invariant), now out of its slot and out of `written`, so nothing
                        // uses it again.
                        let _ =
                            unsafe { munmap(w.base.as_ptr().cast::<c_void>(), WINDOW as usize) };
                        drop(registered);
                    }
                }
                // SAFETY: a new mapping at an address the kernel chooses, so no memory of
                // this process changes; mapping past the end of the file is allowed (only
                // touching such pages is not, and neither `read` nor `write` does: their
                // callers keep to the file).
                let made = unsafe {
                    mmap(
                        ptr::null_mut(),
                        WINDOW as usize,
                        ProtFlags::READ | ProtFlags::WRITE,
                        MapFlags::SHARED,
                        file,
                        index.checked_mul(WINDOW)?,
                    )
                };
                match made.ok().and_then(|p| NonNull::new(p.cast::<u8>())) {
                    Some(base) => {
                        if self.windows.len() <= slot {
                            self.windows.resize(slot + 1, None);
                        }
                        let span = Arc::new(AtomicU64::new(0));
                        let mut registered = self.written.lock();
                        if registered.len() <= slot {
                            registered.resize(slot + 1, None);
                        }
                        registered[slot] = Some(Registered {
                            base: base.as_ptr() as usize,
                            span: Arc::clone(&span),
                        });
                        drop(registered);
                        self.windows[slot] = Some(Window {
                            base,
                            last_use: self.clock,
                            span,
                        });
                        self.live += 1;
                        Some(base)
                    }
                    None => {
                        // Out of address space, or a file that cannot be mapped: `pread`
                        // and `pwrite` from now on.
                        self.set_on(false);
                        None
                    }
                }
            }

            /// Spans released so far (by any thread).
            pub(super) fn released(&self) -> u64 {
                self.written.released()
            }

            /// Whether other threads release (see `others_may_release`).
            #[cfg(test)]
            pub(super) fn others_release(&self) -> bool {
                self.written.others
            }

            /// Releases what was written through the mappings (this is the owner's thread).
            pub(super) fn release_written(&self) {
                self.written.release_by_owner();
            }

            /// How many pages of `[offset, offset + len)` this process's page tables map
            /// through the window holding them (0 if it is not mapped), from
            /// `/proc/self/pagemap` (bit 63 of a page's entry: present).
            #[cfg(test)]
            pub(super) fn pages_present(&self, offset: u64, len: usize) -> std::io::Result<usize> {
                use std::os::unix::fs::FileExt;
                let Some(Some(w)) = self.windows.get((offset / WINDOW) as usize) else {
                    return Ok(0);
                };
                let start = w.base.as_ptr() as usize + (offset % WINDOW) as usize;
                let pagemap = File::open("/proc/self/pagemap")?;
                let mut n = 0;
                let size = page_size();
                for page in start / size..(start + len).div_ceil(size) {
                    let mut entry = [0u8; 8];
                    pagemap.read_exact_at(&mut entry, page as u64 * 8)?;
                    n += usize::from(u64::from_le_bytes(entry) >> 63 == 1);
                }
                Ok(n)
            }

            /// Drops every mapping (the file is about to change length, or mapping is off).
            pub(super) fn unmap_all(&mut self) {
                // Out of `written` before they go (its invariant).
                let mut registered = self.written.lock();
                registered.clear();
                for w in self.windows.drain(..).flatten() {
                    // SAFETY: `w.base` starts a live mapping of `WINDOW` bytes (the
                    // invariant), now out of `windows` and out of `written`, so nothing uses
                    // it again.
                    let _ = unsafe { munmap(w.base.as_ptr().cast::<c_void>(), WINDOW as usize) };
                }
                self.live = 0;
            }
        }

        impl Drop for Mapped {
            fn drop(&mut self) {
                self.unmap_all();
            }
        }

        #[cfg(test)]
        mod tests {
            #![allow(clippy::unwrap_used)]
            use super::*;

            /// Only kernels from 6.1 on let another thread release (`others_may_release`).
            #[test]
            fn kernel_releases_from_6_1_let_other_threads_release() {
                for r in [
                    "6.1.0",
                    "6.18.44-fc-v657",
                    "6.8.0-45-generic\n",
                    "7.0",
                    "10.2.1",
                ] {
                    assert!(at_least_6_1(r), "{r}");
                }
                for r in ["6.0.19", "5.15.0-91-generic", "4.19", "6", "", "linux"] {
                    assert!(!at_least_6_1(r), "{r}");
                }
            }

            /// Past the cap, the least recently used window is unmapped and made again when
            /// next used, and what was written through it is still there.
            #[test]
            fn windows_past_the_cap_replace_the_least_recently_used() {
                let dir = tempfile::tempdir().unwrap();
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(dir.path().join("windows"))
                    .unwrap();
                file.set_len(3 * WINDOW).unwrap();
                // Space for what is written, so the mapped writes below take none.
                for i in 0..3 {
                    std::os::unix::fs::FileExt::write_all_at(&file, &[0; 4096], i * WINDOW + 4096)
                        .unwrap();
                }
                let mut m = Mapped::new(true, true, Arc::default());
                m.max_windows = 2;
                assert!(m.write(&file, 4096, b"zero"));
                assert!(m.write(&file, WINDOW + 4096, b"one"));
                assert_eq!(m.live, 2);
                // Window 0 is used again, so window 1 is the one replaced by window 2.
                let mut buf = [0u8; 4];
                assert!(m.read(&file, 4096, &mut buf));
                assert_eq!(&buf, b"zero");
                assert!(m.write(&file, 2 * WINDOW + 4096, b"two"));
                assert_eq!(m.live, 2);
                assert!(m.windows[1].is_none() && m.windows[0].is_some());
                assert!(m.read(&file, WINDOW + 4096, &mut buf[..3]));
                assert_eq!(&buf[..3], b"one");
                assert!(m.windows[1].is_some() && m.windows[0].is_none());
                assert_eq!(m.live, 2);
                let mut back = [0u8; 3];
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 2 * WINDOW + 4096)
                    .unwrap();
                assert_eq!(&back, b"two");
                m.unmap_all();
                assert_eq!(m.live, 0);
                assert!(m.windows.is_empty());
            }
        }
    }

    /// Where nothing goes through a mapping: every read is a `pread`, every write a `pwrite`.
    #[cfg(not(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    )))]
    mod mapped {
        use std::fs::File;
        use std::sync::Arc;

        #[derive(Debug)]
        pub(super) struct Mapped;

        /// No mappings, so nothing to release before a sync.
        #[derive(Debug, Default)]
        pub(super) struct Written;

        impl Written {
            pub(super) fn release_by_owner(&self) {}
            pub(super) fn release_by_other(&self) {}
        }

        impl Mapped {
            pub(super) fn new(_on: bool, _reads_anywhere: bool, _written: Arc<Written>) -> Self {
                Mapped
            }
            pub(super) fn reads_anywhere(&self) -> bool {
                false
            }
            pub(super) fn is_on(&self) -> bool {
                false
            }
            pub(super) fn read_count(&self) -> u64 {
                0
            }
            pub(super) fn read(&mut self, _file: &File, _offset: u64, _buf: &mut [u8]) -> bool {
                false
            }
            pub(super) fn set_on(&mut self, _on: bool) {}
            pub(super) fn count(&self) -> u64 {
                0
            }
            pub(super) fn write(&mut self, _file: &File, _offset: u64, _data: &[u8]) -> bool {
                false
            }
            pub(super) fn unmap_all(&mut self) {}
            pub(super) fn release_written(&self) {}
            pub(super) fn released(&self) -> u64 {
                0
            }
        }
    }

    /// A block device on a raw block device or partition (`/dev/sdb`, `/dev/loop0`,
    /// `/dev/mmcblk0p2`).
    ///
    /// I/O is the same as [`FileBlock`]'s (positioned, `fdatasync` for `sync`, no access past
    /// the end). The length is the device's size and cannot change:
    /// [`resize`](BlockDevice::resize) fails with [`DeviceError::Unsupported`] unless the
    /// length is unchanged. The sector size is the device's logical block size, read from
    /// sysfs (512 if it cannot be read).
    #[derive(Debug)]
    pub struct RawBlock {
        inner: Positioned,
    }

    impl RawBlock {
        /// Opens a block device for reading and writing.
        ///
        /// Fails with [`DeviceError::Unsupported`] if `path` is not a block device (checked
        /// before opening, so a regular file, FIFO or character device is not touched), and
        /// with [`DeviceError::Io`] if it cannot be opened or its size cannot be determined.
        pub fn open(path: impl AsRef<Path>) -> Result<Self> {
            let path = path.as_ref();
            Kind::Block.check_path(path)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| open_error(&e))?;
            Kind::Block.check_open(&file)?;
            let rdev = file.metadata().map_err(|e| open_error(&e))?.rdev();
            // A block device's size is where its end is; `&File` seeks without `mut`, and the
            // file position is never used for I/O.
            let len = (&file).seek(SeekFrom::End(0)).map_err(|e| open_error(&e))?;
            Ok(RawBlock {
                inner: Positioned {
                    file,
                    len,
                    sector_size: atomic_block_size(rdev),
                },
            })
        }
    }

    impl BlockDevice for RawBlock {
        forward_positioned!();

        fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
            self.inner.read(offset, buf)
        }

        fn sync(&mut self) -> Result<()> {
            self.inner.sync()
        }

        fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            self.inner.write(offset, data)
        }

        fn resize(&mut self, new_len: u64) -> Result<()> {
            if new_len == self.inner.len {
                Ok(())
            } else {
                Err(DeviceError::Unsupported {
                    op: Op::Resize,
                    reason: "a raw block device has a fixed size",
                })
            }
        }
    }

    /// Splits a device number into (major, minor) with glibc's encoding.
    pub(super) fn major_minor(rdev: u64) -> (u32, u32) {
        let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & 0xffff_f000);
        let minor = (rdev & 0xff) | ((rdev >> 12) & 0xffff_ff00);
        // Both are masked to 32 bits above.
        (major as u32, minor as u32)
    }

    /// The atomic write unit of the block device numbered `rdev`: the larger of its logical
    /// and physical block sizes, from sysfs (the device's own queue, or for a partition its
    /// parent disk's); 512 if neither can be read. A 512e drive (512-byte logical, 4 KiB
    /// physical sectors) rewrites whole 4 KiB sectors, so a power cut can damage the
    /// neighbours of a 512-byte write: the engines must treat 4 KiB as the unit.
    fn atomic_block_size(rdev: u64) -> u32 {
        let (major, minor) = major_minor(rdev);
        let base = std::format!("/sys/dev/block/{major}:{minor}");
        let read = |name: &str| {
            ["queue", "../queue"].iter().find_map(|q| {
                let text = fs::read_to_string(std::format!("{base}/{q}/{name}")).ok()?;
                let size: u32 = text.trim().parse().ok()?;
                size.is_power_of_two().then_some(size)
            })
        };
        let logical = read("logical_block_size").unwrap_or(DEFAULT_SECTOR_SIZE);
        read("physical_block_size").map_or(logical, |p| p.max(logical))
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::unix::{io_error, major_minor, reads_map_anywhere};
    use super::*;
    use crate::{BlockDevice, DeviceError, Op};

    use std::fs;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::string::String;
    use std::vec;

    fn temp_path(dir: &tempfile::TempDir, name: &str) -> PathBuf {
        dir.path().join(name)
    }

    fn file_len(path: &Path) -> u64 {
        fs::metadata(path).unwrap().len()
    }

    #[test]
    fn round_trip_at_unaligned_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "dev");
        let mut dev = FileBlock::create(&path, 8192).unwrap();
        assert_eq!(dev.capacity(), 8192);
        assert_eq!(dev.sector_size(), 512);
        assert_eq!(file_len(&path), 8192);

        dev.write(510, b"across a sector boundary").unwrap();
        let data: vec::Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
        dev.write(3001, &data).unwrap();
        dev.write(8191, &[0xee]).unwrap();
        dev.write(100, &[]).unwrap();

        let mut buf = [0u8; 24];
        dev.read(510, &mut buf).unwrap();
        assert_eq!(&buf, b"across a sector boundary");
        let mut back = vec![0u8; data.len()];
        dev.read(3001, &mut back).unwrap();
        assert_eq!(back, data);
        let mut last = [0u8; 2];
        dev.read(8190, &mut last).unwrap();
        assert_eq!(last, [0, 0xee]);
        let mut untouched = [1u8; 10];
        dev.read(0, &mut untouched).unwrap();
        assert_eq!(untouched, [0; 10]);
        dev.read(8192, &mut []).unwrap();
    }

    #[test]
    fn out_of_bounds_accesses_fail_and_do_not_grow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "dev");
        let mut dev = FileBlock::create(&path, 1024).unwrap();

        let err = dev.write(1020, b"hello").unwrap_err();
        assert_eq!(
            err,
            DeviceError::OutOfBounds {
                op: Op::Write,
                offset: 1020,
                len: 5,
                capacity: 1024
            }
        );
        assert!(matches!(
            dev.write(5000, b"x").unwrap_err(),
            DeviceError::OutOfBounds { op: Op::Write, .. }
        ));
        let mut buf = [0u8; 5];
        assert!(matches!(
            dev.read(1020, &mut buf).unwrap_err(),
            DeviceError::OutOfBounds {
                op: Op::Read,
                offset: 1020,
                ..
            }
        ));
        assert!(matches!(
            dev.read(u64::MAX, &mut buf).unwrap_err(),
            DeviceError::OutOfBounds { .. }
        ));
        assert!(dev.write(u64::MAX - 1, b"xyz").is_err());

        assert_eq!(dev.capacity(), 1024);
        assert_eq!(file_len(&path), 1024);
    }

    #[test]
    fn resize_grows_with_zeros_and_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "dev");
        let mut dev = FileBlock::create(&path, 100).unwrap();
        dev.write(0, &[0xab; 100]).unwrap();

        dev.resize(4096).unwrap();
        assert_eq!(dev.capacity(), 4096);
        assert_eq!(file_len(&path), 4096);
        let mut buf = vec![0xffu8; 4096];
        dev.read(0, &mut buf).unwrap();
        assert!(buf[..100].iter().all(|&b| b == 0xab));
        assert!(buf[100..].iter().all(|&b| b == 0));
        dev.write(4000, b"tail").unwrap();

        dev.resize(50).unwrap();
        assert_eq!(dev.capacity(), 50);
        assert_eq!(file_len(&path), 50);
        let mut one = [0u8; 1];
        assert!(matches!(
            dev.read(50, &mut one).unwrap_err(),
            DeviceError::OutOfBounds { capacity: 50, .. }
        ));
        dev.read(49, &mut one).unwrap();
        assert_eq!(one, [0xab]);

        // Growing again does not resurrect the bytes cut off.
        dev.resize(4096).unwrap();
        let mut tail = [1u8; 4];
        dev.read(4000, &mut tail).unwrap();
        assert_eq!(tail, [0; 4]);
        dev.resize(4096).unwrap();
        dev.sync().unwrap();
    }

    #[test]
    fn sync_and_reopen_see_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "dev");
        {
            let mut dev = FileBlock::create(&path, 2048).unwrap();
            dev.write(700, b"durable").unwrap();
            dev.sync().unwrap();
            dev.sync().unwrap();
        }
        let mut dev = FileBlock::open(&path).unwrap();
        assert_eq!(dev.capacity(), 2048);
        let mut buf = [0u8; 7];
        dev.read(700, &mut buf).unwrap();
        assert_eq!(&buf, b"durable");

        // open_or_create keeps an existing file as it is.
        drop(dev);
        let mut dev = FileBlock::open_or_create(&path, 99).unwrap();
        assert_eq!(dev.capacity(), 2048);
        dev.read(700, &mut buf).unwrap();
        assert_eq!(&buf, b"durable");

        // ... and creates a missing one with the given length.
        let fresh = temp_path(&dir, "fresh");
        let dev = FileBlock::open_or_create(&fresh, 3000).unwrap();
        assert_eq!(dev.capacity(), 3000);
        assert_eq!(file_len(&fresh), 3000);

        // create truncates an existing file and zero-fills it.
        let mut dev = FileBlock::create(&path, 1024).unwrap();
        let mut buf = [1u8; 7];
        dev.read(700, &mut buf).unwrap();
        assert_eq!(buf, [0; 7]);
    }

    #[test]
    fn open_of_a_missing_file_is_enoent() {
        let dir = tempfile::tempdir().unwrap();
        let err = FileBlock::open(temp_path(&dir, "missing")).unwrap_err();
        assert_eq!(
            err,
            DeviceError::Io {
                op: Op::Open,
                offset: 0,
                errno: Some(2),
                detail: "not found"
            }
        );
        let err = RawBlock::open(temp_path(&dir, "missing")).unwrap_err();
        assert!(matches!(err, DeviceError::Io { errno: Some(2), .. }));
        // Creating in a missing directory fails the same way.
        let err = FileBlock::create(dir.path().join("no/such/dir"), 10).unwrap_err();
        assert!(matches!(
            err,
            DeviceError::Io {
                op: Op::Open,
                errno: Some(2),
                ..
            }
        ));
    }

    #[test]
    fn wrong_kinds_of_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "regular");
        fs::write(&path, [7u8; 4096]).unwrap();

        let err = RawBlock::open(&path).unwrap_err();
        assert!(matches!(err, DeviceError::Unsupported { op: Op::Open, .. }));
        let text = std::format!("{err}");
        assert!(text.contains("not a block device"), "{text}");
        // The refused file is untouched.
        assert_eq!(fs::read(&path).unwrap(), vec![7u8; 4096]);

        assert!(matches!(
            FileBlock::open(dir.path()).unwrap_err(),
            DeviceError::Unsupported { op: Op::Open, .. }
        ));
        assert!(matches!(
            FileBlock::create(dir.path(), 0).unwrap_err(),
            DeviceError::Unsupported { op: Op::Open, .. }
        ));
        if Path::new("/dev/null").exists() {
            assert!(matches!(
                FileBlock::open("/dev/null").unwrap_err(),
                DeviceError::Unsupported { op: Op::Open, .. }
            ));
            assert!(matches!(
                RawBlock::open("/dev/null").unwrap_err(),
                DeviceError::Unsupported { op: Op::Open, .. }
            ));
        }
    }

    #[test]
    fn sector_size_must_be_a_power_of_two() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "dev");
        let dev = FileBlock::create(&path, 0).unwrap();
        assert!(matches!(
            dev.with_sector_size(3).unwrap_err(),
            DeviceError::BadGeometry { .. }
        ));
        let dev = FileBlock::open(&path).unwrap();
        assert!(dev.with_sector_size(0).is_err());
        let dev = FileBlock::open(&path)
            .unwrap()
            .with_sector_size(4096)
            .unwrap();
        assert_eq!(dev.sector_size(), 4096);
    }

    #[test]
    fn a_file_shrunk_behind_the_devices_back_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "dev");
        // Through a mapping the device cannot see the cut (the module docs): preads only.
        let mut dev = FileBlock::create(&path, 4096).unwrap().with_mapping(false);
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        let mut buf = [0u8; 512];
        assert_eq!(
            dev.read(0, &mut buf).unwrap_err(),
            DeviceError::Io {
                op: Op::Read,
                offset: 0,
                errno: None,
                detail: "unexpected end of file"
            }
        );
        dev.read(0, &mut buf[..100]).unwrap();
    }

    #[test]
    fn os_errors_map_to_io_with_errno_and_detail() {
        let e = io_error(Op::Write, 7, &io::Error::from_raw_os_error(13));
        assert_eq!(
            e,
            DeviceError::Io {
                op: Op::Write,
                offset: 7,
                errno: Some(13),
                detail: "permission denied"
            }
        );
        let e = io_error(Op::Write, 0, &io::Error::from_raw_os_error(28));
        assert!(matches!(
            e,
            DeviceError::Io {
                errno: Some(28),
                detail: "no space left on device",
                ..
            }
        ));
        let e = io_error(Op::Sync, 0, &io::Error::other("odd"));
        assert!(matches!(
            e,
            DeviceError::Io {
                errno: None,
                detail: "I/O error",
                ..
            }
        ));
    }

    #[test]
    fn device_numbers_decode_like_glibc() {
        assert_eq!(major_minor(0x0801), (8, 1));
        assert_eq!(major_minor(0xfe00), (254, 0));
        assert_eq!(major_minor(0x0001_0303), (259, 3));
        // loop256: minor above 255 uses the high bits.
        assert_eq!(major_minor(0x0010_0700), (7, 256));
        // A major above 4095 uses bits 44 and up.
        assert_eq!(major_minor(0x0000_1000_0000_0000), (4096, 0));
    }

    /// Whether the effective user is root (from /proc; false where it cannot be read).
    fn running_as_root() -> bool {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("Uid:"))?;
                let euid = line.split_whitespace().nth(2)?;
                Some(euid == "0")
            })
            .unwrap_or(false)
    }

    /// Detaches a loop device when dropped, whether the test passed or not.
    struct LoopGuard(String);

    impl Drop for LoopGuard {
        fn drop(&mut self) {
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }

    #[test]
    fn raw_block_on_a_loop_device() {
        const SKIP: &str = "raw_block_on_a_loop_device: skipped";
        if !running_as_root() {
            std::println!("{SKIP}: not running as root");
            return;
        }
        let backing = tempfile::NamedTempFile::new().unwrap();
        backing.as_file().set_len(1 << 20).unwrap();
        let out = match Command::new("losetup")
            .args(["--find", "--show"])
            .arg(backing.path())
            .output()
        {
            Ok(out) => out,
            Err(e) => {
                std::println!("{SKIP}: cannot run losetup: {e}");
                return;
            }
        };
        if !out.status.success() {
            std::println!(
                "{SKIP}: losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return;
        }
        let loop_dev = String::from_utf8_lossy(&out.stdout).trim().into();
        // Declared after the backing file and before the device: dropped after the device is
        // closed and before the backing file is removed.
        let guard = LoopGuard(loop_dev);

        let mut dev = match RawBlock::open(&guard.0) {
            Err(DeviceError::Io { errno: Some(2), .. }) => {
                std::println!("{SKIP}: {} has no device node here", guard.0);
                return;
            }
            other => other.unwrap(),
        };
        assert_eq!(dev.capacity(), 1 << 20);
        assert_eq!(dev.sector_size(), 512);

        dev.write(1000, b"raw block bytes").unwrap();
        dev.write((1 << 20) - 3, b"end").unwrap();
        dev.sync().unwrap();
        let mut buf = [0u8; 15];
        dev.read(1000, &mut buf).unwrap();
        assert_eq!(&buf, b"raw block bytes");
        assert!(matches!(
            dev.write((1 << 20) - 2, b"end").unwrap_err(),
            DeviceError::OutOfBounds { .. }
        ));
        dev.resize(1 << 20).unwrap();
        assert!(matches!(
            dev.resize(2 << 20).unwrap_err(),
            DeviceError::Unsupported { op: Op::Resize, .. }
        ));
        assert_eq!(dev.capacity(), 1 << 20);

        // After the sync the bytes are in the backing file.
        let image = fs::read(backing.path()).unwrap();
        assert_eq!(image.len(), 1 << 20);
        assert_eq!(&image[1000..1015], b"raw block bytes");
        assert_eq!(&image[(1 << 20) - 3..], b"end");

        // A regular-file view of a block device is refused the other way round.
        assert!(matches!(
            FileBlock::open(&guard.0).unwrap_err(),
            DeviceError::Unsupported { op: Op::Open, .. }
        ));
        drop(dev);
        drop(guard);
    }

    /// Bytes the file system has allocated for the file (dirty pages included).
    fn allocated(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path).unwrap().blocks() * 512
    }

    /// A new sparse file of `len` bytes named `name` in `dir` as a device that fills holes
    /// in [`HOLE_FILL_GRANULE`]s, or `None` where the file system does not make sparse
    /// files (nothing to observe).
    fn sparse_device(
        dir: &tempfile::TempDir,
        name: &str,
        len: u64,
    ) -> Option<(PathBuf, FileBlock)> {
        let path = temp_path(dir, name);
        let dev = FileBlock::create(&path, len)
            .unwrap()
            .with_hole_fill(HOLE_FILL_GRANULE)
            .unwrap();
        (allocated(&path) < 1 << 20).then_some((path, dev))
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_prepared_range_fills_the_holes_of_its_granule_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, dev)) = sparse_device(&dir, "sparse", 8 << 20) else {
            return;
        };
        let mut dev = dev.with_fill_ahead(0);
        // A plain write (a format's metadata) allocates only around itself.
        dev.write(5 << 20, b"metadata").unwrap();
        assert!(allocated(&path) < 256 * 1024, "{}", allocated(&path));
        let before = allocated(&path);
        dev.prepare((3 << 20) + 4096, 512);
        dev.write((3 << 20) + 4096, b"first row").unwrap();
        let after = allocated(&path);
        assert!(
            after >= before + HOLE_FILL_GRANULE,
            "{after} bytes allocated"
        );
        assert!(
            after < before + 2 * HOLE_FILL_GRANULE,
            "{after} bytes allocated"
        );
        // The granule is known filled: preparing it again fills nothing more.
        dev.prepare((3 << 20) + 8192, 512);
        dev.write((3 << 20) + 8192, b"second row").unwrap();
        assert_eq!(allocated(&path), after);
        let mut buf = [0xffu8; 9];
        dev.read((3 << 20) + 4096, &mut buf).unwrap();
        assert_eq!(&buf, b"first row");
        dev.read(3 << 20, &mut buf).unwrap();
        assert_eq!(buf, [0; 9]);
        dev.read(5 << 20, &mut buf[..8]).unwrap();
        assert_eq!(&buf[..8], b"metadata");
        // Past the end: ignored.
        dev.prepare(8 << 20, 1);

        // Prepared for appends (64 KiB writes), a granule is filled whole just the same.
        let Some((path, dev)) = sparse_device(&dir, "sparse-appends", 8 << 20) else {
            return;
        };
        let mut dev = dev.with_fill_ahead(0);
        let before = allocated(&path);
        dev.prepare_appends((3 << 20) + 4096, 512);
        dev.write((3 << 20) + 4096, b"first row").unwrap();
        let after = allocated(&path);
        assert!(
            after >= before + HOLE_FILL_GRANULE && after < before + 2 * HOLE_FILL_GRANULE,
            "{after} bytes allocated"
        );
        dev.read(3 << 20, &mut buf).unwrap();
        assert_eq!(buf, [0; 9]);
        dev.read((3 << 20) + 4096, &mut buf).unwrap();
        assert_eq!(&buf, b"first row");

        // Turned off, preparing allocates nothing.
        let path = temp_path(&dir, "sparse-off");
        let mut dev = FileBlock::create(&path, 8 << 20)
            .unwrap()
            .with_hole_fill(0)
            .unwrap();
        dev.prepare(3 << 20, 4096);
        dev.write((3 << 20) + 4096, b"first row").unwrap();
        assert!(allocated(&path) < 256 * 1024, "{}", allocated(&path));
        assert!(
            FileBlock::create(&path, 4096)
                .unwrap()
                .with_hole_fill(1000)
                .is_err()
        );
        assert!(
            FileBlock::create(&path, 4096)
                .unwrap()
                .with_hole_fill(2048)
                .is_err()
        );
    }

    /// Waits up to ten seconds for `done`.
    fn eventually(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..1000 {
            if done() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        done()
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_granule_after_a_prepared_range_is_filled_ahead_on_a_thread() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, mut dev)) = sparse_device(&dir, "ahead", 8 << 20) else {
            return;
        };
        dev.prepare(3 << 20, 512);
        dev.write(3 << 20, b"first row").unwrap();
        // Granule 3 now, granule 4 on the thread; nothing further.
        assert!(
            eventually(|| allocated(&path) >= 2 * HOLE_FILL_GRANULE),
            "{} bytes allocated",
            allocated(&path)
        );
        assert!(allocated(&path) < 3 * HOLE_FILL_GRANULE);
        assert_eq!(dev.granules_filled_when_prepared(), 1);
        // Granule 4 is known filled once prepared (the thread's report, no fill of its own):
        // its writes go through the mapping, and granule 5 is filled ahead in turn.
        let mapped = dev.mapped_writes();
        dev.prepare(4 << 20, 512);
        assert_eq!(dev.granules_filled_when_prepared(), 1);
        dev.write(4 << 20, b"second row").unwrap();
        if mapped > 0 {
            assert_eq!(dev.mapped_writes(), mapped + 1);
        }
        assert!(eventually(|| allocated(&path) >= 3 * HOLE_FILL_GRANULE));
        let mut buf = [0u8; 10];
        dev.read(4 << 20, &mut buf).unwrap();
        assert_eq!(&buf, b"second row");
        dev.read(3 << 20, &mut buf[..9]).unwrap();
        assert_eq!(&buf[..9], b"first row");
        // The last granule has none after it; past the end nothing is asked.
        dev.prepare((8 << 20) - 512, 512);
    }

    /// A granule the thread filled, then cut off and grown back, is a hole again: its report
    /// must not make it known filled (a mapped write into a hole can fault on a full disk).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_granule_filled_ahead_and_cut_off_is_filled_again() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, mut dev)) = sparse_device(&dir, "ahead-regrown", 4 << 20) else {
            return;
        };
        dev.prepare(0, 512);
        assert!(eventually(|| allocated(&path) >= 2 * HOLE_FILL_GRANULE));
        // The report of granule 1 is still waiting for the next prepare.
        dev.resize(1 << 20).unwrap();
        dev.resize(4 << 20).unwrap();
        let before = allocated(&path);
        let filled = dev.granules_filled_when_prepared();
        dev.prepare(1 << 20, 512);
        assert_eq!(dev.granules_filled_when_prepared(), filled + 1);
        assert!(allocated(&path) >= before + HOLE_FILL_GRANULE);
    }

    /// The fill-ahead thread zeroes the holes of the granule after a prepared one while the
    /// device writes into that granule unprepared (a plain write, as a format's metadata
    /// is): the write must win, whichever comes first.
    #[test]
    fn a_fill_ahead_never_zeroes_what_the_device_writes_at_the_same_time() {
        const GRANULE: u64 = 64 << 10;
        const GRANULES: u64 = 512;
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "ahead-race");
        let mut dev = FileBlock::create(&path, GRANULE * GRANULES)
            .unwrap()
            .with_hole_fill(GRANULE)
            .unwrap();
        // Writes at a few places of the granule after each prepared one, straight after
        // the prepare handed it to the thread.
        let at = |g: u64, k: u64| g * GRANULE + k * (GRANULE / 4) + 512;
        for g in (0..GRANULES).step_by(2) {
            dev.prepare(g * GRANULE, 1);
            for k in 0..4 {
                dev.write(at(g + 1, k), &[0x77; 512]).unwrap();
            }
        }
        let mut buf = [0u8; 512];
        for g in (0..GRANULES).step_by(2) {
            for k in 0..4 {
                dev.read(at(g + 1, k), &mut buf).unwrap();
                assert!(
                    buf.iter().all(|b| *b == 0x77),
                    "granule {}: a fill ahead zeroed a write",
                    g + 1
                );
            }
        }
    }

    /// A resize drops the granules queued for the fill-ahead thread and waits for the one
    /// in flight: no fill lands past the new end (which would grow the file again).
    #[test]
    fn a_resize_stops_the_fill_ahead_at_the_new_end() {
        const GRANULE: u64 = 64 << 10;
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "ahead-cut");
        let mut dev = FileBlock::create(&path, 64 * GRANULE)
            .unwrap()
            .with_hole_fill(GRANULE)
            .unwrap()
            .with_fill_ahead(8);
        for round in 0..20u64 {
            dev.resize(64 * GRANULE).unwrap();
            dev.prepare(round % 8 * GRANULE, 1);
            let cut = (round % 8 + 1 + round % 5) * GRANULE + 4096;
            dev.resize(cut).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert_eq!(fs::metadata(&path).unwrap().len(), cut, "round {round}");
        }
        drop(dev);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_file_cut_and_grown_again_has_its_new_holes_filled() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, mut dev)) = sparse_device(&dir, "regrown", 4 << 20) else {
            return;
        };
        dev.write(4096, b"kept").unwrap();
        dev.prepare(2 << 20, 4096);
        dev.write((2 << 20) + 10, b"cut away").unwrap();
        dev.resize(1 << 20).unwrap();
        dev.resize(4 << 20).unwrap();
        let before = allocated(&path);
        dev.prepare(2 << 20, 4096);
        dev.write((2 << 20) + 10, b"new").unwrap();
        assert!(allocated(&path) >= before + HOLE_FILL_GRANULE);
        let mut buf = [0xffu8; 8];
        dev.read((2 << 20) + 10, &mut buf).unwrap();
        assert_eq!(&buf, b"new\0\0\0\0\0");
        dev.read(4096, &mut buf[..4]).unwrap();
        assert_eq!(&buf[..4], b"kept");
    }

    #[test]
    fn a_writer_handle_writes_from_another_thread_beside_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "writer");
        let mut dev = FileBlock::create(&path, 1 << 20).unwrap();
        dev.prepare(0, 1 << 20);
        let mut w = dev.writer().expect("a file device gives a writer handle");
        let t = std::thread::spawn(move || {
            for i in 0..64u64 {
                w.write(512 * 1024 + i * 4096, &[0x5a; 4096]).unwrap();
            }
            w.sync().unwrap();
            // Bounded by the device's length when the handle was made.
            assert!(matches!(
                w.write((1 << 20) - 100, &[0; 200]),
                Err(DeviceError::OutOfBounds { .. })
            ));
        });
        for i in 0..64u64 {
            dev.write(i * 4096, &[0xa5; 4096]).unwrap();
        }
        t.join().unwrap();
        // The device reads what the handle wrote, and a sync of either covers both.
        let mut buf = vec![0u8; 1 << 20];
        dev.read(0, &mut buf).unwrap();
        assert!(buf[..256 << 10].iter().all(|b| *b == 0xa5));
        assert!(buf[512 << 10..768 << 10].iter().all(|b| *b == 0x5a));
        dev.sync().unwrap();
        drop(dev);
        let mut dev = FileBlock::open(&path).unwrap();
        dev.read(0, &mut buf).unwrap();
        assert!(buf[512 << 10..768 << 10].iter().all(|b| *b == 0x5a));
    }

    /// A prepare fills holes with zeros where `SEEK_HOLE` finds them; a handle writing into
    /// a hole of the same granule at that moment must not lose its bytes to the zeros (the
    /// lock they share). Granule by granule, the two threads meet at a barrier, then one
    /// prepares the granule while the other writes into it unprepared.
    #[test]
    fn a_prepare_never_zeroes_what_a_handle_writes_at_the_same_time() {
        const GRANULE: u64 = 64 << 10;
        const GRANULES: u64 = 256;
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "race");
        let mut dev = FileBlock::create(&path, GRANULE * GRANULES)
            .unwrap()
            .with_hole_fill(GRANULE)
            .unwrap();
        let mut w = dev.writer().expect("a file device gives a writer handle");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let b = std::sync::Arc::clone(&barrier);
        // The handle writes the middle of each granule; the holes on both sides are the
        // fill's to zero.
        let at = |g: u64| g * GRANULE + GRANULE / 2;
        let t = std::thread::spawn(move || {
            for g in 0..GRANULES {
                b.wait();
                w.write(at(g), &[0x77; 4096]).unwrap();
            }
        });
        for g in 0..GRANULES {
            barrier.wait();
            dev.prepare(g * GRANULE, 1);
        }
        t.join().unwrap();
        let mut buf = [0u8; 4096];
        for g in 0..GRANULES {
            dev.read(at(g), &mut buf).unwrap();
            assert!(
                buf.iter().all(|b| *b == 0x77),
                "granule {g}: a fill zeroed a handle's write"
            );
        }
        // The fills did write zeros (the file system reports holes): else nothing raced.
        let allocated = allocated(&path);
        if allocated < GRANULE * GRANULES / 2 {
            std::eprintln!("no holes were filled ({allocated} bytes allocated): nothing raced");
        }
    }

    #[test]
    fn an_accounted_devices_writer_handle_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "counted");
        let mut dev = crate::Accounted::new(FileBlock::create(&path, 1 << 20).unwrap());
        let region = dev.add_region("top", 512 << 10, 512 << 10).unwrap();
        let mut w = dev.writer().unwrap();
        std::thread::spawn(move || {
            w.write(512 << 10, &[1; 4096]).unwrap();
            w.write(0, &[1; 512]).unwrap();
            w.sync().unwrap();
        })
        .join()
        .unwrap();
        // Read before the device is used again, and after.
        let s = dev.stats();
        assert_eq!((s.writes, s.write_bytes, s.syncs), (2, 4608, 1));
        assert_eq!(dev.region(region).unwrap().1.write_bytes, 4096);
        dev.write(4096, &[2; 512]).unwrap();
        dev.sync().unwrap();
        let s = dev.stats();
        assert_eq!(
            (s.writes, s.write_bytes, s.syncs, s.synced_bytes),
            (3, 5120, 2, 5120)
        );
        assert_eq!(dev.region(region).unwrap().1.write_bytes, 4096);
    }

    #[test]
    fn writes_past_the_write_behind_amount_are_synced_by_a_thread_of_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "behind");
        let mut dev = FileBlock::create(&path, 4 << 20)
            .unwrap()
            .with_write_behind(256 << 10);
        let chunk = vec![0xa5u8; 64 << 10];
        // Below the amount: no thread, no background sync.
        for i in 0..3u64 {
            dev.write(i * (64 << 10), &chunk).unwrap();
        }
        dev.sync().unwrap();
        assert_eq!(dev.background_syncs(), 0);
        // A sync starts the count again; past it, the thread syncs while writes go on.
        for i in 0..3u64 {
            dev.write(i * (64 << 10), &chunk).unwrap();
        }
        assert_eq!(dev.background_syncs(), 0);
        for i in 3..32u64 {
            dev.write(i * (64 << 10), &chunk).unwrap();
        }
        wait_for_background_syncs(&dev, 1);
        // The caller's sync still works after it, and the bytes are all there.
        dev.sync().unwrap();
        drop(dev);
        let mut dev = FileBlock::open(&path).unwrap().with_write_behind(0);
        let mut buf = vec![0u8; 2 << 20];
        dev.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0xa5));
        // Off: never a thread, however much is written.
        for i in 0..64u64 {
            dev.write(i * (64 << 10), &chunk).unwrap();
        }
        assert_eq!(dev.background_syncs(), 0);
    }

    /// Waits (at most 30 s) until the device's write-behind thread has synced `n` times.
    fn wait_for_background_syncs(dev: &FileBlock, n: u64) {
        let waited = std::time::Instant::now();
        while dev.background_syncs() < n {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(30),
                "no background sync"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_writer_handle_asks_the_write_behind_thread_for_syncs_as_the_device_does() {
        use crate::block::BlockDevice as _;
        let dir = tempfile::tempdir().unwrap();
        let path = temp_path(&dir, "behind-handle");
        let mut dev = FileBlock::create(&path, 8 << 20)
            .unwrap()
            .with_write_behind(256 << 10);
        let chunk = vec![0x5au8; 64 << 10];
        // No thread yet: a handle's writes, however many, ask no one.
        let mut w = dev.writer().unwrap();
        for i in 0..8u64 {
            w.write(i * (64 << 10), &chunk).unwrap();
        }
        w.sync().unwrap();
        drop(w);
        assert_eq!(dev.background_syncs(), 0);
        // The device's own writes start the thread and get one sync.
        for i in 0..5u64 {
            dev.write(i * (64 << 10), &chunk).unwrap();
        }
        wait_for_background_syncs(&dev, 1);
        let before = dev.background_syncs();
        // Now a handle's writes past the amount ask it for another, with no device write.
        let mut w = dev.writer().unwrap();
        for i in 0..3u64 {
            w.write((64 + i) * (64 << 10), &chunk).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(dev.background_syncs(), before, "asked below the amount");
        for i in 3..8u64 {
            w.write((64 + i) * (64 << 10), &chunk).unwrap();
        }
        wait_for_background_syncs(&dev, before + 1);
        w.sync().unwrap();
        // Dropping the device ends its thread even while a handle lives; the handle's
        // later writes and syncs still work, and ask no one.
        drop(dev);
        for i in 8..16u64 {
            w.write((64 + i) * (64 << 10), &chunk).unwrap();
        }
        w.sync().unwrap();
        drop(w);
        let mut dev = FileBlock::open(&path).unwrap().with_write_behind(0);
        let mut buf = vec![0u8; 1 << 20];
        dev.read(64 * (64 << 10), &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0x5a));
    }

    /// Mapping windows are this big: the tests' devices span more than one.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    ))]
    const WINDOW: u64 = 64 << 20;

    /// A file device of a window and 4 MiB, holes filled by granule, mapping on.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    ))]
    fn mapped_device(dir: &tempfile::TempDir, name: &str) -> (std::path::PathBuf, FileBlock) {
        let path = temp_path(dir, name);
        let dev = FileBlock::create(&path, WINDOW + (4 << 20))
            .unwrap()
            .with_hole_fill(HOLE_FILL_GRANULE)
            .unwrap()
            .with_mapping(true);
        (path, dev)
    }

    /// A sync — the device's own, a writer handle's on another thread, or the write-behind
    /// thread's — finds no page written through a mapping still mapped (each would cost a
    /// TLB flush on every CPU of the process): they are released first, and what they hold
    /// is still in the file and mapped again when written.
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    ))]
    #[test]
    fn pages_written_through_a_mapping_are_released_before_a_sync() {
        // Pages of the system's size that `len` bytes at `offset` touch.
        let page = rustix::param::page_size() as u64;
        let spanned =
            |offset: u64, len: u64| ((offset + len).div_ceil(page) - offset / page) as usize;
        let dir = tempfile::tempdir().unwrap();
        let (path, dev) = mapped_device(&dir, "released");
        let mut dev = dev.with_write_behind(0);
        dev.prepare(0, 2 << 20);
        dev.write(4096, &[0x11; 8192]).unwrap();
        dev.write((1 << 20) + 10, &[0x33; 10]).unwrap();
        assert_eq!(dev.mapped_writes(), 2);
        assert_eq!(dev.pages_present(4096, 8192).unwrap(), spanned(4096, 8192));
        assert_eq!(dev.pages_present(1 << 20, 20).unwrap(), 1);
        dev.sync().unwrap();
        assert_eq!(dev.released_spans(), 1, "one span for the window");
        assert_eq!(dev.pages_present(0, 2 << 20).unwrap(), 0);
        // A sync with nothing written since releases nothing.
        dev.sync().unwrap();
        assert_eq!(dev.released_spans(), 1);
        // The bytes are there, read through the mapping, and written through it again.
        let mut buf = vec![0u8; 8192];
        dev.read(4096, &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0x11));
        dev.write(4096, &[0x22; 100]).unwrap();
        assert_eq!(dev.mapped_writes(), 3);
        assert_eq!(dev.pages_present(4096, 100).unwrap(), 1);

        // A writer handle's sync, on another thread, releases them too where the kernel
        // lets another thread do that (Linux 6.1 on); elsewhere the device's next does.
        let mut w = dev.writer().unwrap();
        std::thread::spawn(move || w.sync().unwrap())
            .join()
            .unwrap();
        let others = dev.others_release();
        assert_eq!(dev.released_spans(), if others { 2 } else { 1 });
        assert_eq!(dev.pages_present(4096, 100).unwrap(), usize::from(!others));

        // Past the write-behind amount (64 KiB, 100 bytes of it written above), the device
        // releases them before it asks its thread for a sync.
        let before = dev.released_spans();
        let mut dev = dev.with_write_behind(64 << 10);
        for i in 0..15u64 {
            dev.write((512 << 10) + i * 4096, &[0x44; 4096]).unwrap();
        }
        assert_eq!(dev.released_spans(), before);
        assert_eq!(
            dev.pages_present(512 << 10, 15 << 12).unwrap(),
            spanned(512 << 10, 15 << 12)
        );
        dev.write((512 << 10) + (15 << 12), &[0x44; 4096]).unwrap();
        assert_eq!(dev.mapped_writes(), 19);
        assert_eq!(dev.released_spans(), before + 1);
        // (The read above mapped pages around it, read-only; those outside what was written
        // since the last release stay.)
        assert_eq!(dev.pages_present(512 << 10, 64 << 10).unwrap(), 0);
        wait_for_background_syncs(&dev, 1);
        drop(dev);

        let mut dev = FileBlock::open(&path).unwrap().with_mapping(false);
        let mut buf = vec![0u8; 8192];
        dev.read(4096, &mut buf).unwrap();
        assert!(buf[..100].iter().all(|b| *b == 0x22));
        assert!(buf[100..].iter().all(|b| *b == 0x11));
        let mut buf = vec![0u8; 64 << 10];
        dev.read(512 << 10, &mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0x44));
        dev.read((1 << 20) + 10, &mut buf[..10]).unwrap();
        assert!(buf[..10].iter().all(|b| *b == 0x33));
    }

    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    ))]
    #[test]
    fn small_writes_into_filled_granules_go_through_a_mapping_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut dev) = mapped_device(&dir, "mapped");
        // Not prepared: a pwrite.
        dev.write(4096, b"plain").unwrap();
        assert_eq!(dev.mapped_writes(), 0);
        // Prepared (its granule filled): through the mapping.
        dev.prepare(1 << 20, 4096);
        dev.write((1 << 20) + 100, b"mapped").unwrap();
        assert_eq!(dev.mapped_writes(), 1);
        // Anywhere else in a filled granule too, but not past MAX_MAPPED_WRITE.
        dev.write((2 << 20) - 6, b"edge!!").unwrap();
        assert_eq!(dev.mapped_writes(), 2);
        let big = vec![0x5au8; MAX_MAPPED_WRITE + 1];
        dev.write(1 << 20, &big[..MAX_MAPPED_WRITE]).unwrap();
        assert_eq!(dev.mapped_writes(), 3);
        dev.write((1 << 20) + 8, &big).unwrap();
        assert_eq!(dev.mapped_writes(), 3);
        // A write across two granules, one not filled: a pwrite.
        dev.write((2 << 20) - 2, b"across").unwrap();
        assert_eq!(dev.mapped_writes(), 3);
        // Across two windows, both granules filled: a pwrite too (no mapping covers it).
        dev.prepare(WINDOW - 1, 2);
        dev.write(WINDOW - 3, b"window").unwrap();
        assert_eq!(dev.mapped_writes(), 3);
        dev.write(WINDOW + 7, b"second window").unwrap();
        assert_eq!(dev.mapped_writes(), 4);
        // Out of bounds is still an error, not a fault.
        assert!(dev.write(WINDOW + (4 << 20) - 2, b"past").is_err());

        // Reads, through the device and through another handle, see every write.
        let mut buf = [0u8; 13];
        dev.read((1 << 20) + 100, &mut buf[..6]).unwrap();
        assert_eq!(&buf[..6], &[0x5a; 6]); // the big pwrite came after "mapped"
        dev.read(WINDOW + 7, &mut buf).unwrap();
        assert_eq!(&buf, b"second window");
        let image = fs::read(&path).unwrap();
        assert_eq!(&image[4096..4101], b"plain");
        assert_eq!(&image[(2 << 20) - 6..(2 << 20) + 4], b"edgeacross");
        assert_eq!(&image[WINDOW as usize - 3..WINDOW as usize + 3], b"window");
        assert_eq!(
            &image[WINDOW as usize + 7..WINDOW as usize + 20],
            b"second window"
        );

        // Cut and grown again: the cut granules are holes again, so not mapped until filled.
        dev.resize(1 << 20).unwrap();
        dev.resize(3 << 20).unwrap();
        dev.write((2 << 20) + 1, b"regrown").unwrap();
        assert_eq!(dev.mapped_writes(), 4);
        dev.prepare(2 << 20, 1);
        dev.write((2 << 20) + 1, b"refilled").unwrap();
        assert_eq!(dev.mapped_writes(), 5);
        // Granules smaller than the largest page: pwrites only.
        let mut small = FileBlock::create(temp_path(&dir, "small"), 1 << 20)
            .unwrap()
            .with_hole_fill(4096)
            .unwrap()
            .with_mapping(true);
        small.prepare(8192, 100);
        small.write(8192, b"small granule").unwrap();
        assert_eq!(small.mapped_writes(), 0);
        // Turned off: pwrites only.
        let mut dev = dev.with_mapping(false);
        dev.write((2 << 20) + 9, b"off").unwrap();
        assert_eq!(dev.mapped_writes(), 5);
        dev.sync().unwrap();
        drop(dev);
        let image = fs::read(&path).unwrap();
        assert_eq!(image.len(), 3 << 20);
        assert_eq!(&image[(2 << 20) + 1..(2 << 20) + 12], b"refilledoff");
        assert_eq!(&image[1 << 20..(1 << 20) + 4], &[0; 4]);
    }

    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        target_pointer_width = "64"
    ))]
    #[test]
    fn small_reads_go_through_a_mapping_and_see_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut dev) = mapped_device(&dir, "mapped-reads");
        // Outside filled granules only where a fault on a hole takes no space (ext4).
        let anywhere = u64::from(reads_map_anywhere(&fs::File::open(&path).unwrap()));
        let mut buf = [0u8; 6];
        dev.write(4096, b"plain!").unwrap();
        dev.read(4096, &mut buf).unwrap();
        assert_eq!(&buf, b"plain!");
        assert_eq!(dev.mapped_reads(), anywhere);
        let mut hole = [1u8; 100];
        dev.read(3 << 20, &mut hole).unwrap();
        assert_eq!(hole, [0u8; 100]);
        assert_eq!(dev.mapped_reads(), 2 * anywhere);
        // In a filled granule, always.
        let base = 2 * anywhere;
        dev.prepare(1 << 20, 1);
        dev.write((1 << 20) + 10, b"mapped").unwrap();
        dev.read((1 << 20) + 10, &mut buf).unwrap();
        assert_eq!(&buf, b"mapped");
        assert_eq!(dev.mapped_reads(), base + 1);
        // A pwrite (too big to map) and a writer handle's write are seen at once.
        let big = vec![0x5au8; MAX_MAPPED_WRITE + 1];
        dev.write(1 << 20, &big).unwrap();
        dev.read((1 << 20) + 10, &mut buf).unwrap();
        assert_eq!(buf, [0x5a; 6]);
        let mut handle = dev.writer().unwrap();
        handle.write((1 << 20) + 12, b"handle").unwrap();
        dev.read((1 << 20) + 12, &mut buf).unwrap();
        assert_eq!(&buf, b"handle");
        assert_eq!(dev.mapped_reads(), base + 3);
        // Too big for a mapping, or across two windows: a pread.
        let mut large = vec![0u8; MAX_MAPPED_WRITE + 1];
        dev.read(1 << 20, &mut large).unwrap();
        assert_eq!(&large[12..18], b"handle");
        dev.prepare(WINDOW - 1, 2);
        dev.write(WINDOW - 3, b"window").unwrap();
        dev.read(WINDOW - 3, &mut buf).unwrap();
        assert_eq!(&buf, b"window");
        assert_eq!(dev.mapped_reads(), base + 3);
        // In the second window, at the right place in it.
        dev.write(WINDOW + 5, b"second").unwrap();
        dev.read(WINDOW + 5, &mut buf).unwrap();
        assert_eq!(&buf, b"second");
        dev.read(WINDOW - 1, &mut buf[..4]).unwrap();
        assert_eq!(&buf[..4], b"ndow");
        assert_eq!(dev.mapped_reads(), base + 4);
        // Out of bounds is an error, not a fault: past the end, and past a new, shorter end.
        assert!(dev.read(WINDOW + (4 << 20) - 2, &mut buf).is_err());
        dev.resize(2 << 20).unwrap();
        assert!(dev.read((2 << 20) - 2, &mut buf).is_err());
        dev.read((1 << 20) + 12, &mut buf).unwrap();
        assert_eq!(&buf, b"handle");
        // Grown again, what was cut reads as zeros.
        dev.resize(WINDOW + (4 << 20)).unwrap();
        buf = [1; 6];
        dev.read(WINDOW + 5, &mut buf).unwrap();
        assert_eq!(buf, [0; 6]);
        // Turned off: preads only.
        let before = dev.mapped_reads();
        let mut dev = dev.with_mapping(false);
        dev.read((1 << 20) + 12, &mut buf).unwrap();
        assert_eq!(&buf, b"handle");
        assert_eq!(dev.mapped_reads(), before);
    }

    /// On tmpfs, where a fault on a hole takes memory, only filled granules are read through
    /// a mapping. (Runs where `/dev/shm` is a tmpfs; elsewhere there is nothing to check.)
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    #[test]
    fn on_tmpfs_only_filled_granules_are_read_through_a_mapping() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        let path = temp_path(&dir, "tmpfs");
        let mut dev = FileBlock::create(&path, 4 << 20)
            .unwrap()
            .with_hole_fill(HOLE_FILL_GRANULE)
            .unwrap()
            .with_mapping(true);
        if reads_map_anywhere(&fs::File::open(&path).unwrap()) {
            return; // not a tmpfs
        }
        let mut buf = [1u8; 8];
        dev.read(3 << 20, &mut buf).unwrap();
        assert_eq!(buf, [0; 8]);
        dev.write(4096, b"pwritten").unwrap();
        dev.read(4096, &mut buf).unwrap();
        assert_eq!(&buf, b"pwritten");
        assert_eq!(dev.mapped_reads(), 0);
        dev.prepare(1 << 20, 1);
        dev.read((1 << 20) + 8, &mut buf).unwrap();
        assert_eq!(buf, [0; 8]);
        assert_eq!(dev.mapped_reads(), 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Filling holes never changes what the file holds, and writes through a mapping
        /// land as `pwrite`s do: writes (zeros among them) at random places, each prepared
        /// first or not, through devices reopened with filling on at several granules and
        /// off, in 4 KiB or 64 KiB pieces, and mapping on and off, read back as a model of
        /// the bytes says.
        #[test]
        fn filling_holes_never_changes_the_content(
            writes in proptest::collection::vec(
                (0u64..(1 << 20), 1usize..20_000, 0u8..4, 0usize..4),
                1..24,
            ),
        ) {
            const LEN: u64 = (1 << 20) + 20_000;
            let dir = tempfile::tempdir().unwrap();
            let path = temp_path(&dir, "model");
            let mut model = vec![0u8; LEN as usize];
            drop(FileBlock::create(&path, LEN).unwrap());
            let granules = [0u64, 4096, 64 * 1024, 1 << 20];
            for (i, &(at, len, fill, granule)) in writes.iter().enumerate() {
                let mut dev = FileBlock::open(&path)
                    .unwrap()
                    .with_hole_fill(granules[granule])
                    .unwrap()
                    .with_mapping(i % 4 < 2);
                // Zeros, a constant, or a pattern with zeros in it.
                let data: vec::Vec<u8> = (0..len)
                    .map(|j| match fill {
                        0 => 0,
                        1 => 0xA5,
                        _ => if (j / 700) % 2 == 0 { 0 } else { (i + j) as u8 | 1 },
                    })
                    .collect();
                if i % 4 == 0 {
                    dev.prepare(at, len as u64);
                } else if i % 4 == 2 {
                    dev.prepare_appends(at, len as u64);
                }
                dev.write(at, &data).unwrap();
                model[at as usize..at as usize + len].copy_from_slice(&data);
                // Read back through the device (a mapping or a pread), around the write.
                let from = at.saturating_sub(100);
                let to = (at + len as u64 + 100).min(LEN);
                let mut back = vec![0u8; (to - from) as usize];
                dev.read(from, &mut back).unwrap();
                proptest::prop_assert!(
                    back[..] == model[from as usize..to as usize],
                    "a read differs from the model"
                );
                if i % 3 == 0 {
                    dev.sync().unwrap();
                }
            }
            let image = fs::read(&path).unwrap();
            proptest::prop_assert!(image == model, "the file differs from the model");
        }
    }
}
