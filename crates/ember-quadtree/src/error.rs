//! The engine's one error type: what went wrong, and where (structure and flash byte address).

use core::fmt;

use ember_device::DeviceError;

/// The on-flash structures of the engine, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Structure {
    /// The global undo log (or the redo log of the WAL baseline): segment headers and entries.
    Log,
    /// A commit record (engine state and the caller's context blob).
    Commit,
    /// The backup area of erase-based undo (image segment and headers).
    Backup,
    /// A quadtree node (a log of pointer slots).
    Node,
    /// A data record.
    Record,
    /// A partition as a whole (erasing it, or its free-space bookkeeping).
    Partition,
}

impl fmt::Display for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Structure::Log => "undo log",
            Structure::Commit => "commit record",
            Structure::Backup => "backup area",
            Structure::Node => "quadtree node",
            Structure::Record => "record",
            Structure::Partition => "partition",
        })
    }
}

/// What went wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The flash device failed an operation (power loss included).
    Device {
        /// The structure the engine was working on.
        what: Structure,
        /// Flash byte address of the access.
        addr: u64,
        /// The device's own error.
        error: DeviceError,
    },
    /// A structure on flash failed its checks (checksum, version, bounds, tree shape).
    Corrupt {
        /// The structure.
        what: Structure,
        /// Flash byte address.
        addr: u64,
        /// Which check failed.
        reason: &'static str,
    },
    /// The configuration is inconsistent with itself or with the device.
    Config {
        /// What is wrong.
        reason: &'static str,
    },
    /// No valid commit record: the flash was never formatted, or formatting did not finish.
    NoCheckpoint,
    /// A caller buffer is too small.
    Buffer {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// A dimension of a record is outside the configured region.
    OutOfRange {
        /// The dimension.
        dim: usize,
        /// The value refused.
        value: u16,
        /// The configured exclusive upper bound.
        bound: u16,
    },
    /// The undo (or redo) log has no room until the next commit: checkpoint more often or
    /// give the log more erase units.
    LogFull,
    /// The put needs a commit first: every partition is in use and the oldest is still part
    /// of the last checkpoint (it may be erased only after a newer commit), or (COW) the
    /// current partition is full and mostly dead, and the commit compacts it. Commit and
    /// retry the put.
    CheckpointNeeded,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Device { what, addr, error } => {
                write!(f, "{what} at flash address {addr:#x}: device error: {error}")
            }
            Error::Corrupt { what, addr, reason } => {
                write!(f, "corrupt {what} at flash address {addr:#x}: {reason}")
            }
            Error::Config { reason } => write!(f, "bad configuration: {reason}"),
            Error::NoCheckpoint => f.write_str("no valid commit record on the flash"),
            Error::Buffer { needed, given } => {
                write!(f, "buffer too small: {needed} bytes needed, {given} given")
            }
            Error::OutOfRange { dim, value, bound } => {
                write!(f, "dimension {dim} value {value} is not below the bound {bound}")
            }
            Error::LogFull => f.write_str("the undo log is full until the next commit"),
            Error::CheckpointNeeded => f.write_str(
                "the put needs a newer checkpoint (to erase the oldest partition, or to compact the current one): commit first",
            ),
        }
    }
}

impl core::error::Error for Error {}

impl Error {
    /// Whether the error is the device losing power (fault injection or the energy model).
    pub fn is_power_loss(&self) -> bool {
        matches!(
            self,
            Error::Device {
                error: DeviceError::PowerLost { .. },
                ..
            }
        )
    }
}

/// Result type of the engine.
pub type Result<T> = core::result::Result<T, Error>;
