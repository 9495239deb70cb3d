//! # ember — the EmberDB shell
//!
//! Will own (issue 4): the sqlite3-like interactive shell on a database file, a raw block
//! device or memory (`ember mydata.ember`), its dot-commands and output modes, and
//! `ember bench`. Until the SQL front end lands it offers `ember device PATH`, which opens a
//! file or a raw block device through the device layer and reports what EmberDB sees.
//!
//! Must not touch: anything below the `ember` facade except to report on devices.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ember_device::BlockDevice;
use ember_device::file::{FileBlock, RawBlock};

/// EmberDB: one embedded database for devices from phones down to batteryless
/// microcontrollers.
#[derive(Parser, Debug)]
#[command(name = "ember", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Open a file or a raw block device (/dev/...) and print its size and sector size.
    Device {
        /// Path of a database file or a block device.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Device { path } => {
            use std::os::unix::fs::FileTypeExt;
            let is_block = std::fs::metadata(&path)
                .map(|m| m.file_type().is_block_device())
                .unwrap_or(false);
            let opened = if is_block {
                RawBlock::open(&path).map(|d| ("raw block device", d.capacity(), d.sector_size()))
            } else {
                FileBlock::open(&path).map(|d| ("file", d.capacity(), d.sector_size()))
            };
            match opened {
                Ok((kind, capacity, sector)) => {
                    println!(
                        "{}: {kind}, {capacity} bytes, {sector}-byte sectors",
                        path.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ember: {}: {e}", path.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}
