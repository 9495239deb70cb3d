//! The table engine's error type.

use core::fmt;

use ember_device::DeviceError;

/// What went wrong in the table engine, and where.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TableError {
    /// The device failed.
    Device(DeviceError),
    /// An on-device structure failed its checks: wrong magic, unknown format version, bad
    /// checksum or an impossible field. Names the structure and its byte offset.
    Corrupt {
        /// The structure, e.g. "journal record" or "superblock".
        structure: &'static str,
        /// Byte offset of the structure on the device.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The structure was written by a newer format version than this build reads.
    Version {
        /// The structure.
        structure: &'static str,
        /// Byte offset of the structure on the device.
        offset: u64,
        /// The version found.
        found: u16,
    },
    /// The journal has no room for a record of this size even after a checkpoint.
    JournalFull {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes the journal can hold at most.
        capacity: u64,
    },
    /// The device has no free block for an allocation.
    NoSpace {
        /// Bytes asked for.
        bytes: u64,
    },
    /// A row or key failed to decode.
    Row(crate::row::RowError),
    /// No table has this name.
    NoSuchTable(String),
    /// A table with this name exists already.
    TableExists(String),
    /// A row breaks a rule of its table (duplicate primary key, NULL in a NOT NULL column,
    /// wrong number of values).
    Constraint(&'static str),
    /// A row would repeat the (non-NULL) key of the named unique secondary index.
    Unique(String),
    /// The operation needs (or forbids) an open transaction.
    Transaction(&'static str),
    /// A configuration or argument is invalid.
    Invalid(&'static str),
    /// An earlier commit or checkpoint failed after it began to write: what the database
    /// holds in RAM may be ahead of the device, so it refuses every call until it is opened
    /// again (recovery rebuilds the last durable state from the device).
    NeedsRecovery,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::Device(e) => write!(f, "device error: {e}"),
            TableError::Corrupt {
                structure,
                offset,
                reason,
            } => write!(f, "corrupt {structure} at byte {offset}: {reason}"),
            TableError::Version {
                structure,
                offset,
                found,
            } => write!(
                f,
                "{structure} at byte {offset} has format version {found}, newer than this build reads"
            ),
            TableError::JournalFull { needed, capacity } => write!(
                f,
                "a journal record of {needed} bytes does not fit a journal of {capacity} bytes"
            ),
            TableError::NoSpace { bytes } => {
                write!(f, "no free space for an allocation of {bytes} bytes")
            }
            TableError::Row(e) => write!(f, "bad row: {e}"),
            TableError::NoSuchTable(t) => write!(f, "no such table: {t}"),
            TableError::TableExists(t) => write!(f, "table {t} already exists"),
            TableError::Constraint(what) => write!(f, "constraint failed: {what}"),
            TableError::Unique(index) => {
                write!(
                    f,
                    "constraint failed: duplicate key in unique index {index}"
                )
            }
            TableError::Transaction(what) => write!(f, "transaction: {what}"),
            TableError::Invalid(what) => write!(f, "invalid: {what}"),
            TableError::NeedsRecovery => write!(
                f,
                "an earlier commit or checkpoint failed part way: open the database again to recover it"
            ),
        }
    }
}

impl std::error::Error for TableError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TableError::Device(e) => Some(e),
            TableError::Row(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::row::RowError> for TableError {
    fn from(e: crate::row::RowError) -> Self {
        TableError::Row(e)
    }
}

impl From<DeviceError> for TableError {
    fn from(e: DeviceError) -> Self {
        TableError::Device(e)
    }
}

/// Result type of the table engine.
pub type Result<T> = core::result::Result<T, TableError>;
