//! Shared test support: the EmbedDB data sets and small helpers.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ember_device::{CostModel, FlashGeometry, MemBlock, SimFlash};

/// A flash simulator in RAM.
pub type Flash = SimFlash<MemBlock<Vec<u8>>>;

/// One record of the data sets: a 32-bit key and three 32-bit values.
pub type Rec = (u64, [u8; 12]);

/// The data sets directory: `shared/datasets` beside the repository (CI clones the repository
/// next to `shared/`). Missing data is a failure, not a silent pass.
pub fn datasets_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets");
    assert!(
        d.is_dir(),
        "the EmbedDB data sets are missing: expected the directory {} (the `shared/` directory \
         beside the repository, see README and issue 6)",
        d.display()
    );
    d
}

/// Reads a data-set file: 512-byte pages, a u16 record count at offset 4, then 16-byte
/// records (u32 key, three i32) from offset 16.
pub fn read_records(path: &Path) -> Vec<Rec> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for page in bytes.chunks(512) {
        if page.len() < 16 {
            continue;
        }
        let count = usize::from(u16::from_le_bytes([page[4], page[5]])).min((page.len() - 16) / 16);
        for r in page[16..16 + 16 * count].chunks_exact(16) {
            let key = u64::from(u32::from_le_bytes(r[0..4].try_into().unwrap()));
            out.push((key, r[4..16].try_into().unwrap()));
        }
    }
    out
}

/// A data set: its records in file order, and the keys of its randomized twin (the lookup
/// order), if there is one.
pub struct Dataset {
    pub name: String,
    pub records: Vec<Rec>,
    pub lookup_order: Vec<u64>,
}

/// Every data set in the directory (every `*.bin` that is not a `*_randomized.bin`).
pub fn datasets() -> Vec<Dataset> {
    let dir = datasets_dir();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "bin")
                && !p
                    .file_stem()
                    .unwrap()
                    .to_string_lossy()
                    .ends_with("_randomized")
        })
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "no data sets (*.bin) in {}",
        dir.display()
    );
    names
        .into_iter()
        .map(|p| {
            let records = read_records(&p);
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            let rnd = dir.join(format!("{stem}_randomized.bin"));
            let lookup_order = if rnd.is_file() {
                read_records(&rnd).into_iter().map(|r| r.0).collect()
            } else {
                // A fixed shuffle of the keys.
                let mut k: Vec<u64> = records.iter().map(|r| r.0).collect();
                let mut s = 0x9E37_79B9_7F4A_7C15u64;
                for i in (1..k.len()).rev() {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    k.swap(i, (s % (i as u64 + 1)) as usize);
                }
                k
            };
            Dataset {
                name: stem,
                records,
                lookup_order,
            }
        })
        .collect()
}

/// A NOR flash of `bytes` bytes with 4 KiB erase units, erased.
pub fn nor(bytes: u64) -> Flash {
    SimFlash::in_memory(FlashGeometry::nor(bytes, 4096), CostModel::FREE).unwrap()
}

/// Column `c` (0..3) of a record's data as an i32.
pub fn col(d: &[u8; 12], c: usize) -> i32 {
    i32::from_le_bytes(d[4 * c..4 * c + 4].try_into().unwrap())
}

/// `n - 1` boundaries at the quantiles of column `c` (bucket functions like EmbedDB's custom
/// ones, fitted to the data's distribution).
pub fn quantile_bounds(recs: &[Rec], c: usize, n: usize) -> Vec<i64> {
    let mut v: Vec<i64> = recs.iter().map(|r| i64::from(col(&r.1, c))).collect();
    v.sort_unstable();
    let mut b: Vec<i64> = (1..n).map(|i| v[i * v.len() / n]).collect();
    b.dedup();
    b
}

/// A small deterministic random source.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}
