//! The one error type of the device layer.

use core::fmt;

/// The kind of device operation an error or a statistic refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Reading bytes.
    Read,
    /// Writing (programming) bytes.
    Write,
    /// A durability barrier.
    Sync,
    /// Erasing flash erase units.
    Erase,
    /// Changing the device length.
    Resize,
    /// Opening or inspecting the device.
    Open,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Sync => "sync",
            Op::Erase => "erase",
            Op::Resize => "resize",
            Op::Open => "open",
        })
    }
}

/// What went wrong in a device operation, and where.
///
/// Every variant names the operation and the byte offset it concerned, so an engine can pass
/// the error up unchanged and the user still learns which access failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The access `[offset, offset + len)` reaches past the end of the device.
    OutOfBounds {
        /// The operation.
        op: Op,
        /// First byte of the access.
        offset: u64,
        /// Length of the access in bytes.
        len: u64,
        /// Device capacity in bytes.
        capacity: u64,
    },
    /// The access is not aligned to the granularity the device requires.
    Unaligned {
        /// The operation.
        op: Op,
        /// First byte of the access.
        offset: u64,
        /// Length of the access in bytes.
        len: u64,
        /// Required alignment of both offset and length.
        align: u64,
    },
    /// A flash write would break the part's write rule: it would turn a programmed bit back to
    /// its erased value (AND-rewrite parts), or program a write unit twice without an erase in
    /// between (write-once parts).
    WriteRule {
        /// First byte that breaks the rule.
        offset: u64,
    },
    /// Power was cut (fault injection): this and every later operation fails until the device
    /// is taken out of the wrapper and reopened.
    PowerLost {
        /// The operation that was refused.
        op: Op,
    },
    /// The device does not support the operation (e.g. resizing a raw block device).
    Unsupported {
        /// The operation.
        op: Op,
        /// Why it is not supported.
        reason: &'static str,
    },
    /// The geometry or configuration given for a device is invalid.
    BadGeometry {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The operating system or the part's driver reported an error.
    Io {
        /// The operation.
        op: Op,
        /// First byte of the access.
        offset: u64,
        /// The OS error number, where there is one.
        errno: Option<i32>,
        /// A short description of the failure.
        detail: &'static str,
    },
}

/// Result type of the device layer.
pub type Result<T> = core::result::Result<T, DeviceError>;

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::OutOfBounds {
                op,
                offset,
                len,
                capacity,
            } => write!(
                f,
                "{op} of {len} bytes at offset {offset} is past the end of the device ({capacity} bytes)"
            ),
            DeviceError::Unaligned {
                op,
                offset,
                len,
                align,
            } => write!(
                f,
                "{op} of {len} bytes at offset {offset} is not aligned to {align} bytes"
            ),
            DeviceError::WriteRule { offset } => write!(
                f,
                "flash write at offset {offset} breaks the part's write rule (program without erase)"
            ),
            DeviceError::PowerLost { op } => write!(f, "{op} refused: power was cut"),
            DeviceError::Unsupported { op, reason } => {
                write!(f, "{op} is not supported: {reason}")
            }
            DeviceError::BadGeometry { reason } => write!(f, "invalid device geometry: {reason}"),
            DeviceError::Io {
                op,
                offset,
                errno,
                detail,
            } => {
                write!(f, "{op} at offset {offset} failed: {detail}")?;
                if let Some(e) = errno {
                    write!(f, " (os error {e})")?;
                }
                Ok(())
            }
        }
    }
}

impl core::error::Error for DeviceError {}

/// Checks that `[offset, offset + len)` lies within `capacity` bytes.
pub(crate) fn check_bounds(op: Op, offset: u64, len: u64, capacity: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(DeviceError::OutOfBounds {
            op,
            offset,
            len,
            capacity,
        }),
    }
}

/// Checks that `offset` and `len` are both multiples of `align` (a power of two or any
/// positive number).
pub(crate) fn check_aligned(op: Op, offset: u64, len: u64, align: u64) -> Result<()> {
    if align <= 1 || (offset.is_multiple_of(align) && len.is_multiple_of(align)) {
        Ok(())
    } else {
        Err(DeviceError::Unaligned {
            op,
            offset,
            len,
            align,
        })
    }
}
