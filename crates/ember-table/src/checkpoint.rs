//! A checkpoint's writes home, taken from the engine's RAM at one instant and issued after
//! the writer has gone on: on a thread of their own where the device gives a
//! [`writer`](ember_device::BlockDevice::writer) handle, else by the writer a few commits
//! later (see the module docs of [`db`](crate::db) and ARCHITECTURE.md, "Checkpoint").
//!
//! A [`Job`] holds what it writes as it was at the snapshot — the pages of the changed
//! blocks, shared with the blocks (which copy their bytes before they next change), and the
//! catalog naming them — so the writer may change its blocks meanwhile.
//! It writes the pages in device order (adjacent ones in one write of up to
//! [`HOME_WRITE_MAX`] bytes), then the catalog, then syncs. What happens before (the
//! records up to the snapshot made durable) and after (the journal's tail moved to the
//! snapshot, the freed blocks given back) is the engine's, on the writer's thread.

use std::ops::Range;
use std::sync::Arc;
use std::thread;

use ember_device::{BlockDevice, DeviceWriter};

use crate::allocator::BlockRef;
use crate::error::{Result, TableError};
use crate::journal::Position;

/// The most a checkpoint writes home in one device write.
pub(crate) const HOME_WRITE_MAX: usize = 1 << 20;

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

    fn write_to(&self, sink: &mut dyn Sink) -> Result<()> {
        let mut run = Vec::new();
        let mut run_at = 0;
        for p in &self.pieces {
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
}

impl Job {
    /// The blocks, then the catalog that names them, then a sync.
    pub(crate) fn run(&self, sink: &mut dyn Sink) -> Result<()> {
        self.home.write_to(sink)?;
        for (at, bytes) in &self.catalog {
            sink.write(*at, bytes)?;
        }
        sink.sync()
    }
}

/// How a started checkpoint's [`Job`] runs.
#[derive(Debug)]
enum Work {
    /// On the writer's thread, once it has looked this many more times
    /// ([`Flight::ready`]).
    Inline(Arc<Job>, u32),
    /// On a thread of its own, through a handle of the device.
    Thread(thread::JoinHandle<Result<()>>),
}

/// A checkpoint whose snapshot was taken and whose journal tail has not moved yet.
#[derive(Debug)]
pub(crate) struct Flight {
    /// Where the journal stood at the snapshot: the new tail once the job is durable.
    pub(crate) at: Position,
    /// Blocks to give back then: replaced index pages, blocks freed by transactions before
    /// the snapshot, the spill block.
    pub(crate) freed: Vec<BlockRef>,
    work: Option<Work>,
}

impl Flight {
    /// A checkpoint whose job runs on a thread through `writer` if there is one, else on
    /// the writer's thread later.
    pub(crate) fn start(
        at: Position,
        freed: Vec<BlockRef>,
        job: Job,
        writer: Option<Box<dyn DeviceWriter>>,
    ) -> Self {
        let job = Arc::new(job);
        let work = match writer {
            None => Work::Inline(job, INLINE_DELAY),
            Some(mut w) => {
                let theirs = Arc::clone(&job);
                thread::Builder::new()
                    .name("ember-checkpoint".into())
                    .spawn(move || theirs.run(&mut w))
                    // No thread to be had: the writer writes it.
                    .map_or(Work::Inline(job, 0), Work::Thread)
            }
        };
        Flight {
            at,
            freed,
            work: Some(work),
        }
    }

    /// Whether the job is due: its thread is done, or it runs inline and was asked about
    /// [`INLINE_DELAY`] times before. [`finish`](Self::finish) runs it either way.
    pub(crate) fn ready(&mut self) -> bool {
        match &mut self.work {
            Some(Work::Thread(t)) => t.is_finished(),
            Some(Work::Inline(_, 0)) | None => true,
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

    /// Runs the job inline, or waits for its thread; its outcome.
    pub(crate) fn finish<D: BlockDevice>(&mut self, dev: &mut D) -> Result<()> {
        match self.work.take() {
            None => Ok(()),
            Some(Work::Inline(job, _)) => job.run(&mut OnDevice(dev)),
            Some(Work::Thread(t)) => t
                .join()
                .unwrap_or(Err(TableError::Invalid("the checkpoint thread panicked"))),
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
