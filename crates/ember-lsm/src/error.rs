//! Errors of the LSM engine: what went wrong and where.

use std::fmt;

use ember_device::DeviceError;
use ember_table::TableError;

/// Results of the LSM engine.
pub type Result<T> = std::result::Result<T, LsmError>;

/// What went wrong in the LSM engine, and where.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LsmError {
    /// The device under the space manager failed.
    Device(DeviceError),
    /// The space manager failed (allocation, free, its own structures).
    Space(TableError),
    /// A file of the file environment failed.
    Io {
        /// The operation.
        op: &'static str,
        /// The file.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// An on-device structure failed its checks (magic, version, checksum, an impossible
    /// field). `table` is the sorted table's id (0 for the log and the manifest), `offset` the
    /// byte offset of the block within its blob.
    Corrupt {
        /// The structure: "data block", "index block", "bloom filter", "manifest", "log"…
        structure: &'static str,
        /// The table (or blob) id.
        table: u64,
        /// Byte offset of the block in its blob.
        offset: u64,
        /// What check failed.
        reason: &'static str,
    },
    /// A blob access outside the room it was created with.
    OutOfBounds {
        /// The blob id.
        blob: u64,
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
    },
    /// A blob the engine names is unknown to the environment.
    NoSuchBlob(u64),
    /// A write batch larger than a whole log.
    BatchTooLarge {
        /// Encoded bytes of the batch.
        bytes: usize,
        /// Bytes one log can hold.
        limit: u64,
    },
    /// The manifest outgrew its root slot.
    ManifestFull {
        /// Bytes of the snapshot.
        bytes: usize,
        /// Bytes a root slot holds.
        capacity: u64,
    },
    /// An earlier write or background step failed; the database must be reopened.
    Poisoned(String),
}

impl fmt::Display for LsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LsmError::Device(e) => write!(f, "lsm: device error: {e}"),
            LsmError::Space(e) => write!(f, "lsm: space manager: {e}"),
            LsmError::Io { op, path, message } => write!(f, "lsm: {op} {path}: {message}"),
            LsmError::Corrupt {
                structure,
                table,
                offset,
                reason,
            } => write!(
                f,
                "lsm: corrupt {structure} of table {table} at offset {offset}: {reason}"
            ),
            LsmError::OutOfBounds { blob, offset, len } => write!(
                f,
                "lsm: access of {len} bytes at {offset} is outside blob {blob}"
            ),
            LsmError::NoSuchBlob(id) => write!(f, "lsm: blob {id} is not open"),
            LsmError::BatchTooLarge { bytes, limit } => write!(
                f,
                "lsm: a write batch of {bytes} bytes does not fit a log of {limit} bytes"
            ),
            LsmError::ManifestFull { bytes, capacity } => write!(
                f,
                "lsm: the manifest ({bytes} bytes) outgrew its root slot ({capacity} bytes)"
            ),
            LsmError::Poisoned(why) => {
                write!(
                    f,
                    "lsm: the database failed earlier and must be reopened: {why}"
                )
            }
        }
    }
}

impl std::error::Error for LsmError {}

impl From<DeviceError> for LsmError {
    fn from(e: DeviceError) -> Self {
        LsmError::Device(e)
    }
}

impl From<TableError> for LsmError {
    fn from(e: TableError) -> Self {
        match e {
            TableError::Device(d) => LsmError::Device(d),
            e => LsmError::Space(e),
        }
    }
}
