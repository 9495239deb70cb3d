//! The engine's one error type: what went wrong, and where (area, page id, byte address).

use core::fmt;

use ember_device::DeviceError;

/// The circular areas the engine keeps on its storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AreaKind {
    /// Data pages (and, with record-level consistency, the temporary pages ahead of them).
    Data,
    /// Bitmap index pages.
    Index,
    /// Variable-size data pages.
    Var,
}

impl fmt::Display for AreaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AreaKind::Data => "data area",
            AreaKind::Index => "index area",
            AreaKind::Var => "variable-data area",
        })
    }
}

/// What went wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The storage device failed an operation.
    Device {
        /// The area the engine was working in.
        area: AreaKind,
        /// The logical page id concerned, if the operation was on one page.
        page: Option<u32>,
        /// Byte address on the storage.
        addr: u64,
        /// The device's own error (it names the operation and offset too).
        error: DeviceError,
    },
    /// A page inside the live range failed its checks (checksum, magic, version, id, layout):
    /// its records are not returned.
    Corrupt {
        /// The area of the page.
        area: AreaKind,
        /// The logical page id the engine expected there.
        page: u32,
        /// Byte address of the page.
        addr: u64,
        /// Which check failed.
        reason: &'static str,
    },
    /// The configuration is inconsistent with itself or with the storage.
    Config {
        /// What is wrong.
        reason: &'static str,
    },
    /// The caller's memory is too small for the configuration.
    Memory {
        /// Bytes the configuration needs.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// Keys must ascend: `key` came after `last`.
    KeyNotAscending {
        /// The key refused.
        key: u64,
        /// The last key stored.
        last: u64,
    },
    /// The key does not fit in the configured key size.
    KeyTooLarge {
        /// The key refused.
        key: u64,
        /// The configured key size in bytes.
        key_size: usize,
    },
    /// A data value of the wrong size.
    DataSize {
        /// The configured data size.
        expected: usize,
        /// The size given.
        given: usize,
    },
    /// The area is full and the configuration says to refuse rather than overwrite.
    Full {
        /// The area that is full.
        area: AreaKind,
    },
    /// A variable-size value was given but the series has no variable-data area.
    NoVarArea,
    /// A variable-size value longer than the variable-data area can hold.
    VarTooLarge {
        /// Its length.
        len: usize,
        /// The longest value the area holds.
        max: usize,
    },
    /// The 32-bit page ids of an area are used up (after 4 billion page writes).
    IdsExhausted {
        /// The area.
        area: AreaKind,
    },
}

/// Result type of the engine.
pub type Result<T> = core::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Device {
                area,
                page,
                addr,
                error,
            } => {
                write!(f, "{area}: device error at address {addr}")?;
                if let Some(p) = page {
                    write!(f, " (page {p})")?;
                }
                write!(f, ": {error}")
            }
            Error::Corrupt {
                area,
                page,
                addr,
                reason,
            } => write!(
                f,
                "{area}: page {page} at address {addr} is corrupt: {reason}"
            ),
            Error::Config { reason } => write!(f, "invalid configuration: {reason}"),
            Error::Memory { needed, given } => write!(
                f,
                "the configuration needs {needed} bytes of memory, {given} were given"
            ),
            Error::KeyNotAscending { key, last } => {
                write!(f, "key {key} does not ascend (the last key is {last})")
            }
            Error::KeyTooLarge { key, key_size } => {
                write!(f, "key {key} does not fit in {key_size} bytes")
            }
            Error::DataSize { expected, given } => {
                write!(
                    f,
                    "data of {given} bytes given, the series stores {expected}"
                )
            }
            Error::Full { area } => write!(f, "{area} is full (configured to refuse)"),
            Error::NoVarArea => f.write_str("the series has no variable-data area"),
            Error::VarTooLarge { len, max } => write!(
                f,
                "a variable-size value of {len} bytes is longer than the area holds ({max})"
            ),
            Error::IdsExhausted { area } => write!(f, "{area}: page ids are used up"),
        }
    }
}

impl core::error::Error for Error {}
