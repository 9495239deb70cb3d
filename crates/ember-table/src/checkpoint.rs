//! A checkpoint's writes home, taken from the engine's RAM at one instant and issued after
//! the writer has gone on: on a thread of their own where the device gives a
//! [`writer`](ember_device::BlockDevice::writer) handle, else by the writer a few commits
//! later; a checkpoint the writer waits for runs on its thread at once, through the handle
//! where there is one (see the module docs of [`db`](crate::db) and ARCHITECTURE.md,
//! "Checkpoint").
//!
//! A [`Job`] holds what it writes as it was at the snapshot — the pages of the changed
//! blocks, shared with the blocks (which copy their bytes before they next change), and the
//! catalog naming them — so the writer may change its blocks meanwhile.
//! It writes the pages in device order (adjacent ones in one write of up to
//! [`HOME_WRITE_MAX`] bytes), then the catalog, syncs, then the allocator's bitmaps as of
//! the snapshot with the checkpoint's freed blocks given back, and the journal header that
//! moves the tail to the snapshot, and syncs. Before it, on the writer's thread, the
//! records up to the snapshot are made durable; after it, the engine takes over in RAM
//! what the job wrote (the freed blocks, the allocator's slots, the journal's tail): the
//! writer's thread does no device work to land a checkpoint.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::thread;

use ember_device::{BlockDevice, DeviceWriter};

use crate::allocator::{Allocator, BlockRef};
use crate::error::{Result, TableError};
use crate::journal::Position;

/// The most a checkpoint writes home in one device write.
pub(crate) const HOME_WRITE_MAX: usize = 1 << 20;

/// The job in `slot`, taken out.
fn take(slot: &Mutex<Option<Job>>) -> Option<Job> {
    slot.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Commits a job that runs on the writer's thread waits for: on a device without a writer
/// handle the writes home come a few commits after the snapshot, as they would from a
/// thread, so the fault-injecting devices of the tests see commits made while a checkpoint
/// is in flight.
const INLINE_DELAY: u32 = 3;

/// Where a job's writes go: the device itself or a handle of it.
pub(crate) trait Sink {
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<()>;
    fn sync(&mut self) -> Result<()>;
}

/// The engine's own device, written by the writer's thread.
pub(crate) struct OnDevice<'a, D: BlockDevice>(pub(crate) &'a mut D);

impl<D: BlockDevice> Sink for OnDevice<'_, D> {
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<()> {
        Ok(self.0.write(at, bytes)?)
    }
    fn sync(&mut self) -> Result<()> {
        Ok(self.0.sync()?)
    }
}

impl Sink for Box<dyn DeviceWriter> {
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<()> {
        Ok(DeviceWriter::write(&mut **self, at, bytes)?)
    }
    fn sync(&mut self) -> Result<()> {
        Ok(DeviceWriter::sync(&mut **self)?)
    }
}

/// Bytes to write home: pieces of block images, in ascending device order, shared with the
/// blocks (a block copies its bytes before it next changes, so these stay as they were at
/// the snapshot). Adjacent pieces go out in one write of up to [`HOME_WRITE_MAX`] bytes,
/// assembled where the job runs.
#[derive(Debug, Default)]
pub(crate) struct HomeWrites {
    pieces: Vec<Piece>,
}

#[derive(Debug)]
struct Piece {
    /// Device offset of `bytes[range]`.
    at: u64,
    bytes: Arc<Vec<u8>>,
    range: Range<usize>,
}

impl HomeWrites {
    /// Adds `bytes[range]` for device offset `at`, above everything pushed so far.
    pub(crate) fn push(&mut self, at: u64, bytes: &Arc<Vec<u8>>, range: Range<usize>) {
        if !range.is_empty() {
            self.pieces.push(Piece {
                at,
                bytes: Arc::clone(bytes),
                range,
            });
        }
    }

    /// The writes, by device offset and length: adjacent pieces joined up to
    /// [`HOME_WRITE_MAX`] bytes.
    pub(crate) fn runs(&self) -> Vec<(u64, usize)> {
        let mut runs: Vec<(u64, usize)> = Vec::new();
        for p in &self.pieces {
            match runs.last_mut() {
                Some((start, len))
                    if *start + *len as u64 == p.at && *len + p.range.len() <= HOME_WRITE_MAX =>
                {
                    *len += p.range.len();
                }
                _ => runs.push((p.at, p.range.len())),
            }
        }
        runs
    }

    /// Writes the runs, letting go of each piece once its bytes are copied into its run:
    /// a block the writer changes after that finds its bytes no longer shared and changes
    /// them in place, where one still shared is copied first (a new 4 KiB buffer, whose
    /// pages the process then faults in: a YCSB update that copied a block took twice as
    /// long as one that did not).
    fn write_to(self, sink: &mut dyn Sink) -> Result<()> {
        let mut run = Vec::new();
        let mut run_at = 0;
        for p in self.pieces {
            let part = &p.bytes[p.range.clone()];
            if run_at + run.len() as u64 != p.at || run.len() + part.len() > HOME_WRITE_MAX {
                if !run.is_empty() {
                    sink.write(run_at, &run)?;
                }
                run.clear();
                run_at = p.at;
            }
            run.extend_from_slice(part);
        }
        if !run.is_empty() {
            sink.write(run_at, &run)?;
        }
        Ok(())
    }
}

/// The writes of one checkpoint that follow its first sync.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) home: HomeWrites,
    /// The catalog's writes, in order ([`CatalogStore::next_writes`](crate::catalog::CatalogStore::next_writes)).
    pub(crate) catalog: [(u64, Vec<u8>); 2],
    /// The allocator as of the snapshot with the checkpoint's freed blocks given back
    /// ([`SpaceManager::checkpoint_parts`](crate::space::SpaceManager::checkpoint_parts)).
    pub(crate) alloc: Allocator,
    /// The journal header that moves the tail to the snapshot: where, and its bytes.
    pub(crate) header: (u64, [u8; 512]),
}

impl Job {
    /// The blocks, then the catalog that names them, sync; the allocator's bitmaps (synced
    /// by its flush), then the journal header, sync. Returns the flushed allocator.
    pub(crate) fn run(mut self, sink: &mut dyn Sink) -> Result<Allocator> {
        std::mem::take(&mut self.home).write_to(sink)?;
        for (at, bytes) in &self.catalog {
            sink.write(*at, bytes)?;
        }
        sink.sync()?;
        self.alloc.flush_to(sink)?;
        sink.write(self.header.0, &self.header.1)?;
        sink.sync()?;
        Ok(self.alloc)
    }
}

/// How a started checkpoint's [`Job`] runs.
enum Work {
    /// On the writer's thread, once it has looked this many more times
    /// ([`Flight::ready`]).
    Inline(Box<Job>, u32),
    /// On the writer's thread when it lands, through a handle of the device: a checkpoint
    /// the writer waits for (an explicit one, a close). A file's handle writes with
    /// `pwrite`, where the device itself copies writes of up to 64 KiB into its mapping of
    /// the file; the pages a checkpoint writes home are mostly clean in the page cache
    /// (written back since they last changed), and a copy into a clean page takes a page
    /// fault — about 2 µs a 4 KiB page on this machine's ext4, twice a `pwrite`'s cost.
    Handle(Box<Job>, Box<dyn DeviceWriter>),
    /// On a thread of its own, through a handle of the device.
    Thread(thread::JoinHandle<Result<Allocator>>),
    /// Neither: a thread that could not start took the job with it (cannot happen; the
    /// checkpoint fails if it does).
    Lost,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Work::Inline(_, left) => write!(f, "Inline({left} more looks)"),
            Work::Handle(..) => f.write_str("Handle"),
            Work::Thread(_) => f.write_str("Thread"),
            Work::Lost => f.write_str("Lost"),
        }
    }
}

/// A checkpoint whose snapshot was taken and whose writes have not all been taken over by
/// the engine yet.
#[derive(Debug)]
pub(crate) struct Flight {
    /// Where the journal stood at the snapshot: the new tail once the job is durable.
    pub(crate) at: Position,
    /// The generation of the journal header the job writes.
    pub(crate) generation: u64,
    /// Blocks given back once it lands: replaced index pages, blocks freed by transactions
    /// before the snapshot, the spill block.
    pub(crate) freed: Vec<BlockRef>,
    work: Option<Work>,
}

impl Flight {
    /// A checkpoint whose job runs through `writer` if there is one — on a thread if
    /// `background` (and a thread is to be had), else on the writer's thread when it
    /// lands — and without one on the writer's thread later.
    pub(crate) fn start(
        at: Position,
        generation: u64,
        freed: Vec<BlockRef>,
        job: Job,
        writer: Option<Box<dyn DeviceWriter>>,
        background: bool,
    ) -> Self {
        let work = match writer {
            None => Work::Inline(Box::new(job), INLINE_DELAY),
            Some(w) if !background => Work::Handle(Box::new(job), w),
            Some(mut w) => {
                // Handed over through a slot, so a thread that cannot be started leaves the
                // job behind.
                let slot = Arc::new(Mutex::new(Some(job)));
                let theirs = Arc::clone(&slot);
                let spawned = thread::Builder::new()
                    .name("ember-checkpoint".into())
                    .spawn(move || match take(&theirs) {
                        Some(job) => job.run(&mut w),
                        None => Err(TableError::Invalid("the checkpoint's job was taken")),
                    });
                match spawned {
                    Ok(t) => Work::Thread(t),
                    // A thread that failed to start never ran: the job is still there.
                    Err(_) => match take(&slot) {
                        Some(job) => Work::Inline(Box::new(job), 0),
                        None => Work::Lost,
                    },
                }
            }
        };
        Flight {
            at,
            generation,
            freed,
            work: Some(work),
        }
    }

    /// Whether the job is due: its thread is done, or it runs inline and was asked about
    /// [`INLINE_DELAY`] times before. [`finish`](Self::finish) runs it either way.
    pub(crate) fn ready(&mut self) -> bool {
        match &mut self.work {
            Some(Work::Thread(t)) => t.is_finished(),
            Some(Work::Inline(_, 0) | Work::Handle(..) | Work::Lost) | None => true,
            Some(Work::Inline(_, left)) => {
                *left -= 1;
                false
            }
        }
    }

    /// Whether the job went to a thread of its own.
    pub(crate) fn on_thread(&self) -> bool {
        matches!(self.work, Some(Work::Thread(_)))
    }

    /// Runs the job inline, or waits for its thread; the flushed allocator.
    pub(crate) fn finish<D: BlockDevice>(&mut self, dev: &mut D) -> Result<Allocator> {
        match self.work.take() {
            None => Err(TableError::Invalid("the checkpoint already finished")),
            Some(Work::Inline(job, _)) => job.run(&mut OnDevice(dev)),
            Some(Work::Handle(job, mut w)) => job.run(&mut w),
            Some(Work::Thread(t)) => t
                .join()
                .unwrap_or(Err(TableError::Invalid("the checkpoint thread panicked"))),
            Some(Work::Lost) => Err(TableError::Invalid("the checkpoint's job was lost")),
        }
    }
}

impl Drop for Flight {
    /// A database dropped with a checkpoint in flight lets its thread end first: nothing
    /// writes to the device after the database is gone.
    fn drop(&mut self) {
        if let Some(Work::Thread(t)) = self.work.take() {
            let _ = t.join();
        }
    }
}
