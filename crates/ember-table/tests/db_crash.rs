//! The table engine under power cuts, one test per consistency mode, over every cut point of
//! a mixed workload (inserts, updates, deletes, multi-row transactions, tables created and
//! dropped), with torn sectors and lost unsynced writes.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use ember_crashtest::CrashTest;
use ember_device::{FaultyBlock, MemBlock, SplitMix64};
use ember_table::{
    Database, Extent, ExtentSpace, FormatOptions, IndexKind, Mode, Options, Schema, TableError,
    Value,
};

const DEV: usize = 12 << 20;

/// table -> key -> row
type Model = BTreeMap<String, BTreeMap<i64, Vec<Value>>>;

#[derive(Default)]
struct State {
    created: bool,
    /// The model after each commit, in order (index 0: the empty database; the last one may
    /// be the commit in flight).
    commits: Vec<Model>,
    /// Commits known durable: those before the last completed checkpoint or full-mode commit.
    durable: usize,
    /// Another engine's extents, and whether giving each back returned: until then a cut
    /// may leave it taken, and that engine would give it back when it recovers.
    extents: Vec<(Extent, bool)>,
}

fn options(mode: Mode) -> Options {
    Options {
        mode,
        format: FormatOptions {
            log_bytes: Some(64 * 1024), // small: checkpoints happen inside the workload
            ..FormatOptions::default()
        },
        block_size: 1024,
        ..Options::default()
    }
}

fn schema(tree: bool) -> Schema {
    Schema::key_value(
        "INTEGER",
        "BLOB",
        if tree {
            IndexKind::Tree
        } else {
            IndexKind::Hash
        },
    )
}

fn value(rng: &mut SplitMix64) -> Vec<Value> {
    // Now and then a row long enough for overflow blocks, and often one long enough that
    // two of them in a transaction are written in place rather than carried in its record.
    let n = if rng.below(12) == 0 {
        17_000 + rng.below(30_000) as usize
    } else if rng.below(4) == 0 {
        900 + rng.below(700) as usize
    } else {
        rng.below(300) as usize
    };
    vec![
        Value::Null,
        Value::Blob((0..n).map(|_| rng.byte()).collect()),
    ]
}

/// The workload: 120 transactions of 1–4 statements over up to three tables.
fn workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: Mode,
) -> Result<(), TableError> {
    let mut db = Database::create(&mut *dev, options(mode))?;
    st.created = true;
    let mut model = Model::new();
    st.commits.push(model.clone());
    let mut rng = SplitMix64::new(99);
    let names = ["a", "b", "c"];
    for step in 0..120u64 {
        let mut next = model.clone();
        db.begin()?;
        let stmts = 1 + rng.below(4);
        for _ in 0..stmts {
            let t = names[rng.below(3) as usize];
            if !next.contains_key(t) {
                db.create_table(t, schema(step % 2 == 0))?;
                next.insert(t.to_string(), BTreeMap::new());
                continue;
            }
            let k = rng.below(40) as i64;
            let mut row = value(&mut rng);
            row[0] = Value::Integer(k);
            let rows = next.get_mut(t).unwrap();
            match rng.below(10) {
                0 if step % 5 == 4 => {
                    db.drop_table(t)?;
                    next.remove(t);
                }
                0..=4 => {
                    if rows.contains_key(&k) {
                        db.update(t, &row)?;
                    } else {
                        db.insert(t, &row)?;
                    }
                    rows.insert(k, row);
                }
                _ => {
                    db.delete(t, &[Value::Integer(k)])?;
                    rows.remove(&k);
                }
            }
        }
        end_step(
            &mut db,
            st,
            &mut model,
            next,
            mode,
            step % 13 == 12,
            step % 20 == 19,
        )?;
    }
    Ok(())
}

/// Ends a workload's transaction: rolls it back, or commits it — recording the state it
/// makes, and which commits are durable in `mode` — and then checkpoints if asked.
fn end_step<D: ember_device::BlockDevice>(
    db: &mut Database<D>,
    st: &mut State,
    model: &mut Model,
    next: Model,
    mode: Mode,
    rollback: bool,
    checkpoint: bool,
) -> Result<(), TableError> {
    if rollback {
        return db.rollback();
    }
    // The commit in flight may or may not survive a cut: its state is a valid outcome.
    st.commits.push(next.clone());
    db.commit()?;
    *model = next;
    if mode == Mode::Full {
        st.durable = st.commits.len() - 1;
    }
    if checkpoint {
        db.checkpoint()?;
        st.durable = st.commits.len() - 1;
    }
    Ok(())
}

fn contents(db: &mut Database<MemBlock<Vec<u8>>>) -> Result<Model, String> {
    let mut m = Model::new();
    let names: Vec<String> = db.table_names().iter().map(|s| s.to_string()).collect();
    for t in names {
        let rows = db
            .scan(&t)
            .map_err(|e| format!("scan of {t} failed: {e}"))?;
        let mut by_key = BTreeMap::new();
        for r in rows {
            let Value::Integer(k) = r[0] else {
                return Err("a row without an integer key".into());
            };
            by_key.insert(k, r);
        }
        m.insert(t, by_key);
    }
    Ok(m)
}

/// Updates that rewrite rows in place, in the dead space earlier checkpoints left in their
/// blocks: 48 rows of 100–250 bytes in 4 KiB blocks, then 150 transactions of one to three
/// updates (now and then two rows of 1.5 KiB, whose transaction writes them in place before
/// its record, or a delete or an insert), a rollback every eleventh, a checkpoint every
/// seventh.
fn update_workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: Mode,
) -> Result<(), TableError> {
    let opts = Options {
        block_size: 4096,
        ..options(mode)
    };
    let mut db = Database::create(&mut *dev, opts)?;
    st.created = true;
    let mut rng = SplitMix64::new(7);
    let row = |k: i64, rng: &mut SplitMix64, big: bool| {
        let n = if big {
            1500
        } else {
            100 + rng.below(150) as usize
        };
        vec![
            Value::Integer(k),
            Value::Blob((0..n).map(|_| rng.byte()).collect()),
        ]
    };
    let mut model = Model::new();
    st.commits.push(model.clone());
    let mut next = model.clone();
    db.begin()?;
    db.create_table("t", schema(true))?;
    let rows = next.entry("t".to_string()).or_default();
    for k in 0..48 {
        let r = row(k, &mut rng, false);
        db.insert("t", &r)?;
        rows.insert(k, r);
    }
    st.commits.push(next.clone());
    db.commit()?;
    db.checkpoint()?;
    st.durable = st.commits.len() - 1;
    model = next;
    for step in 0..150u64 {
        let mut next = model.clone();
        let rows = next.get_mut("t").unwrap();
        db.begin()?;
        let big = rng.below(8) == 0;
        let stmts = if big { 2 } else { 1 + rng.below(3) };
        for _ in 0..stmts {
            let k = rng.below(50) as i64;
            let r = row(k, &mut rng, big);
            match rows.entry(k) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    db.insert("t", &r)?;
                    v.insert(r);
                }
                std::collections::btree_map::Entry::Occupied(o) if rng.below(12) == 0 => {
                    db.delete("t", &[Value::Integer(k)])?;
                    o.remove();
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    assert!(db.update("t", &r)?);
                    o.insert(r);
                }
            }
        }
        end_step(
            &mut db,
            st,
            &mut model,
            next,
            mode,
            step % 11 == 10,
            step % 7 == 6,
        )?;
    }
    Ok(())
}

/// A fresh database in `mode` with an open transaction that made table `t`: the database,
/// the model of the commits so far (the empty database) and the state the transaction
/// makes.
type Dev = FaultyBlock<MemBlock<Vec<u8>>>;

fn with_table_t<'d>(
    dev: &'d mut Dev,
    st: &mut State,
    mode: Mode,
) -> Result<(Database<&'d mut Dev>, Model, Model), TableError> {
    let mut db = Database::create(dev, options(mode))?;
    st.created = true;
    let model = Model::new();
    st.commits.push(model.clone());
    let mut next = model.clone();
    db.begin()?;
    db.create_table("t", schema(true))?;
    next.insert("t".to_string(), BTreeMap::new());
    Ok((db, model, next))
}

/// Big rows, one to a transaction as synchronous 4 KiB inserts and updates make them: each
/// commit's record goes into the fresh block the record before reserved (a chain of spilled
/// records), broken now and then by a small row (whose record, in the journal, carries the
/// reservation on), by a row of another size class or one that fits its old block (the
/// reservation is not taken), two big rows in one transaction, a delete, a rollback every
/// eleventh and a checkpoint every seventeenth transaction (and those the small journal
/// forces: spilled records count towards it).
fn spill_workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: Mode,
) -> Result<(), TableError> {
    let (mut db, mut model, next) = with_table_t(dev, st, mode)?;
    let mut rng = SplitMix64::new(3);
    end_step(&mut db, st, &mut model, next, mode, false, false)?;
    for step in 0..110u64 {
        let mut next = model.clone();
        let rows = next.get_mut("t").unwrap();
        db.begin()?;
        let kind = rng.below(12);
        for _ in 0..if kind == 0 { 2 } else { 1 } {
            let k = rng.below(30) as i64;
            let len = match kind {
                1 => rng.below(200) as usize,
                2 => 2_100 + rng.below(1_900) as usize,
                _ => 4_096 + rng.below(200) as usize,
            };
            write_row(&mut db, rows, &mut rng, k, len, kind == 3)?;
        }
        end_step(
            &mut db,
            st,
            &mut model,
            next,
            mode,
            step % 11 == 10,
            step % 17 == 16,
        )?;
    }
    Ok(())
}

/// Rows written twice in one transaction, the second time no longer than the first, so that
/// the second write could go over the first where it lies (`Database::place`): 40 rows of
/// 100–200 bytes, then 120 transactions that each write one row longer and then again,
/// most of them followed by more than the 2 KiB a record carries (a 1.5 KiB row, or one of
/// 2.1–3 KiB that makes a fresh block and reserves the next spill block), so that the
/// transaction's tuples go home before its record; a small update of another row first
/// (written over its old tuple), a rollback every eleventh, a checkpoint every fifth.
fn twice_workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: Mode,
) -> Result<(), TableError> {
    let (mut db, mut model, mut next) = with_table_t(dev, st, mode)?;
    let mut rng = SplitMix64::new(11);
    let rows = next.entry("t".to_string()).or_default();
    for k in 0..40 {
        let len = 100 + rng.below(100) as usize;
        write_row(&mut db, rows, &mut rng, k, len, false)?;
    }
    end_step(&mut db, st, &mut model, next, mode, false, true)?;
    for step in 0..120u64 {
        let mut next = model.clone();
        let rows = next.get_mut("t").unwrap();
        db.begin()?;
        let other = rng.below(40) as i64;
        let len = 60 + rng.below(40) as usize;
        write_row(&mut db, rows, &mut rng, other, len, false)?;
        let k = rng.below(40) as i64;
        let len = 220 + rng.below(100) as usize;
        write_row(&mut db, rows, &mut rng, k, len, false)?;
        let again = len - rng.below(20) as usize;
        write_row(&mut db, rows, &mut rng, k, again, false)?;
        let big = match rng.below(4) {
            0 => 0,
            1 => 2_100 + rng.below(900) as usize,
            _ => 1_500,
        };
        if big > 0 {
            write_row(&mut db, rows, &mut rng, 100 + k, big, false)?;
        }
        end_step(
            &mut db,
            st,
            &mut model,
            next,
            mode,
            step % 11 == 10,
            step % 5 == 4,
        )?;
    }
    Ok(())
}

/// Transactions whose records carry 1–2 KiB of rows, and no explicit checkpoint: the
/// engine starts a checkpoint every dozen or so commits, whose writes run (on a device
/// without a writer handle) three commits later — or at once, before a transaction that
/// writes rows in place (two rows of 1.2–1.9 KiB, often into a new block) writes them. Now
/// and then a row long enough for overflow blocks, a delete, a second table made or dropped
/// (dropped while a checkpoint is in flight), and a rollback every ninth transaction. Blocks
/// of 4 KiB, so rows written in place can land in blocks the checkpoint took; a buffer of
/// 4 KiB, so clean blocks leave RAM at once.
fn flight_workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: Mode,
) -> Result<(), TableError> {
    // A small buffer: a block the checkpoint took must stay in RAM until it is home.
    let opts = Options {
        buffer_bytes: 4096,
        block_size: 4096,
        ..options(mode)
    };
    let mut db = Database::create(&mut *dev, opts)?;
    st.created = true;
    let mut model = Model::new();
    st.commits.push(model.clone());
    let mut rng = SplitMix64::new(11);
    let mut next = model.clone();
    db.begin()?;
    db.create_table("t", schema(true))?;
    next.insert("t".to_string(), BTreeMap::new());
    end_step(&mut db, st, &mut model, next, mode, false, false)?;
    let mut born = 0;
    for step in 0..150u64 {
        let mut next = model.clone();
        let rows = next.get_mut("t").unwrap();
        db.begin()?;
        let kind = rng.below(16);
        for _ in 0..if kind == 0 { 2 } else { 3 } {
            let k = rng.below(60) as i64;
            let len = match kind {
                0 => 1_200 + rng.below(700) as usize,
                1 if rng.below(2) == 0 => 17_000,
                _ => 300 + rng.below(300) as usize,
            };
            write_row(&mut db, rows, &mut rng, k, len, kind == 15)?;
        }
        // A second table, changed at every step, made and dropped now and then: a drop
        // gives back the index pages of the catalog in flight, not of the last durable one.
        if let Some(u) = next.get_mut("u") {
            let k = 100 + step as i64;
            let row = vec![Value::Integer(k), Value::Blob(vec![7; 30])];
            db.insert("u", &row)?;
            u.insert(k, row);
        }
        // Dropped while a checkpoint is in flight, once it lived through a few.
        let old_enough = step >= born + 30;
        if (old_enough && db.checkpoint_in_flight())
            || (!next.contains_key("u") && step >= born + 10)
        {
            born = step;
            if next.remove("u").is_some() {
                db.drop_table("u")?;
            } else {
                db.create_table("u", schema(step % 2 == 0))?;
                let mut u = BTreeMap::new();
                for k in 0..30 {
                    let row = vec![Value::Integer(k), Value::Blob(vec![k as u8; 20])];
                    db.insert("u", &row)?;
                    u.insert(k, row);
                }
                next.insert("u".to_string(), u);
            }
        }
        end_step(&mut db, st, &mut model, next, mode, step % 9 == 8, false)?;
    }
    Ok(())
}

/// Another engine's extents (an index page's size) taken and given back between
/// checkpoints, so that the next checkpoint may make one of them an index page while the
/// record that freed it is still in the journal: a cut between the catalog and the
/// journal's tail replays that free over the catalog. Rows in transactions of ten.
fn extent_workload(
    dev: &mut FaultyBlock<MemBlock<Vec<u8>>>,
    st: &mut State,
    mode: Mode,
) -> Result<(), TableError> {
    let mut db = Database::create(&mut *dev, options(mode))?;
    let mut model = Model::new();
    st.commits.push(model.clone());
    let mut rng = SplitMix64::new(17);
    let mut next = model.clone();
    db.begin()?;
    db.create_table("t", schema(true))?;
    next.insert("t".to_string(), BTreeMap::new());
    end_step(&mut db, st, &mut model, next, mode, false, true)?;
    // Taken before the cuts are checked: a cut while taking one would leave a block the
    // test cannot name.
    for _ in 0..20 {
        st.extents.push((db.allocate_extents(1024)?[0], false));
    }
    st.created = true;
    for step in 0..20usize {
        let e = st.extents[step].0;
        db.free_extents(&[e])?;
        st.extents[step].1 = true;
        let mut next = model.clone();
        let rows = next.get_mut("t").unwrap();
        db.begin()?;
        for _ in 0..10 {
            let k = rng.below(400) as i64;
            let row = vec![
                Value::Integer(k),
                Value::Blob((0..40).map(|_| rng.byte()).collect()),
            ];
            if rows.contains_key(&k) {
                assert!(db.update("t", &row)?);
            } else {
                db.insert("t", &row)?;
            }
            rows.insert(k, row);
        }
        end_step(&mut db, st, &mut model, next, mode, false, step % 2 == 1)?;
    }
    Ok(())
}

/// Deletes row `k` of table `t` if `delete` and it is there, else writes it (update or
/// insert) with `len` random bytes, keeping `rows`, the model of `t`, in step.
fn write_row<D: ember_device::BlockDevice>(
    db: &mut Database<D>,
    rows: &mut BTreeMap<i64, Vec<Value>>,
    rng: &mut SplitMix64,
    k: i64,
    len: usize,
    delete: bool,
) -> Result<(), TableError> {
    let row = vec![
        Value::Integer(k),
        Value::Blob((0..len).map(|_| rng.byte()).collect()),
    ];
    if delete && rows.contains_key(&k) {
        db.delete("t", &[Value::Integer(k)])?;
        rows.remove(&k);
        return Ok(());
    }
    if rows.contains_key(&k) {
        assert!(db.update("t", &row)?);
    } else {
        db.insert("t", &row)?;
    }
    rows.insert(k, row);
    Ok(())
}

type Workload = fn(&mut FaultyBlock<MemBlock<Vec<u8>>>, &mut State, Mode) -> Result<(), TableError>;

fn run(mode: Mode) {
    run_with(mode, workload);
}

fn run_with(mode: Mode, work: Workload) {
    let report = CrashTest::new()
        .run(
            || MemBlock::new(DEV),
            |dev: &mut FaultyBlock<MemBlock<Vec<u8>>>, st: &mut State| work(dev, st, mode),
            |medium, st, _| {
                if !st.created {
                    return Ok(());
                }
                let mut db = match Database::open(medium, options(mode)) {
                    Ok(db) => db,
                    // Mode none promises nothing after a crash — but never a panic.
                    Err(_) if mode == Mode::None => return Ok(()),
                    Err(e) => return Err(format!("reopen failed: {e}")),
                };
                if mode == Mode::None {
                    return Ok(());
                }
                for (e, _) in st.extents.iter().filter(|x| !x.1) {
                    if db.allocated_extent(e.block).is_some() {
                        db.free_extents(&[*e])
                            .map_err(|e| format!("giving back an extent: {e}"))?;
                    }
                }
                db.verify().map_err(|e| format!("verify failed: {e}"))?;
                let got = contents(&mut db)?;
                // What recovery holds in RAM must also be what it wrote home: close, reopen
                // with no buffer (every block read back from the device), compare.
                let dev = db
                    .close()
                    .map_err(|e| format!("close after recovery: {e}"))?;
                let cold = Options {
                    buffer_bytes: 0,
                    query_cache_bytes: 0,
                    ..options(mode)
                };
                let mut db = Database::open(dev, cold).map_err(|e| format!("second open: {e}"))?;
                db.verify()
                    .map_err(|e| format!("verify after the second open: {e}"))?;
                let again = contents(&mut db)?;
                if again != got {
                    return Err("closing and reopening after recovery changed the rows".into());
                }
                // Whole transactions, in order, and nothing older than what was durable.
                match st.commits.iter().rposition(|m| *m == got) {
                    Some(k) if k >= st.durable => Ok(()),
                    Some(k) => Err(format!(
                        "the database went back to commit {k}; commit {} was durable",
                        st.durable
                    )),
                    None => {
                        if std::env::var("DBG").is_ok() {
                            eprintln!("GOT {got:?}");
                            for (i, c) in st.commits.iter().enumerate() {
                                eprintln!("C{i} {c:?}");
                            }
                        }
                        Err("the database holds a state no sequence of commits produced".into())
                    }
                }
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
    // Mode none writes only at checkpoints, so its workload issues fewer operations.
    let least = if mode == Mode::None { 100 } else { 200 };
    assert!(report.ops >= least, "only {} operations", report.ops);
}

#[test]
fn full_mode_keeps_every_commit() {
    run(Mode::Full);
}

#[test]
fn data_mode_keeps_whole_transactions() {
    run(Mode::Data);
}

#[test]
fn metadata_mode_keeps_whole_transactions() {
    run(Mode::Metadata);
}

#[test]
fn disorder_mode_reopens_consistent() {
    run(Mode::Disorder);
}

#[test]
fn none_mode_never_panics() {
    run(Mode::None);
}

#[test]
fn full_mode_keeps_every_commit_of_updates_in_place() {
    run_with(Mode::Full, update_workload);
}

#[test]
fn metadata_mode_keeps_whole_transactions_of_updates_in_place() {
    run_with(Mode::Metadata, update_workload);
}

#[test]
fn disorder_mode_reopens_consistent_after_updates_in_place() {
    run_with(Mode::Disorder, update_workload);
}

#[test]
fn full_mode_keeps_every_commit_of_rows_written_twice() {
    run_with(Mode::Full, twice_workload);
}

#[test]
fn metadata_mode_keeps_whole_transactions_of_rows_written_twice() {
    run_with(Mode::Metadata, twice_workload);
}

#[test]
fn full_mode_keeps_every_commit_of_a_spill_chain() {
    run_with(Mode::Full, spill_workload);
}

#[test]
fn data_mode_keeps_whole_transactions_of_a_spill_chain() {
    run_with(Mode::Data, spill_workload);
}

#[test]
fn metadata_mode_keeps_whole_transactions_of_a_spill_chain() {
    run_with(Mode::Metadata, spill_workload);
}

#[test]
fn full_mode_keeps_every_commit_made_while_a_checkpoint_writes_home() {
    run_with(Mode::Full, flight_workload);
}

#[test]
fn metadata_mode_keeps_whole_transactions_made_while_a_checkpoint_writes_home() {
    run_with(Mode::Metadata, flight_workload);
}

#[test]
fn metadata_mode_keeps_index_pages_made_of_another_engines_freed_extents() {
    run_with(Mode::Metadata, extent_workload);
}
