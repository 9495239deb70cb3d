//! The planner and executor: statements run over a [`Storage`], with SQLite's semantics.
//!
//! Queries are evaluated as left-deep nested loops over the FROM items. For each table the
//! planner picks an access path from the conjuncts of ON and WHERE that compare one of its
//! columns with values already known (constants, parameters, columns of tables to the
//! left, the enclosing query's columns): the rowid (point, IN list or range), or an index
//! whose first columns are constrained (equality on a prefix, IN list, or a range on the first
//! column) — else a full scan, read once per statement. Every conjunct is still checked on
//! every row the path returns, so a path only has to return a superset. WHERE conjuncts are
//! applied at the first table where all their columns are bound. Subqueries that do not
//! refer to the enclosing query run once per statement.
//!
//! Statements outside an explicit transaction run in their own storage transaction; inside
//! one, a failed statement is undone with the inverse row operations it logged.

use alloc::borrow::{Cow, ToOwned};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::ops::Bound;

use crate::aggregate;
use crate::ast::*;
use crate::catalog::{
    self, Catalog, IndexDef, TableDef, UniqueDef, ViewDef, key, lower, table_def,
};
use crate::error::{Result, SqlError};
use crate::eval::{Col, Env, Scope, first_aggregate, has_aggregate, is_aggregate, walk};
use crate::lexer::{Tok, tokenize};
use crate::parser::Parsed;
use crate::storage::{ColumnSpec, MASTER, Storage};
use crate::value::{Affinity, Value, compare, real_as_integer};

/// What a statement produced: column names and rows for queries, nothing otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Result column names (shared: a prepared statement hands out the same names each run).
    pub columns: Rc<[String]>,
    /// Result rows.
    pub rows: Vec<Vec<Value>>,
}

impl Default for Output {
    /// No columns and no rows, allocating nothing: every statement that returns no rows
    /// shares one empty list of names (an `Rc` of its own would be an allocation each).
    fn default() -> Self {
        thread_local! {
            static NO_COLUMNS: Rc<[String]> = Rc::from(Vec::new());
        }
        Output {
            // During thread teardown the shared list may be gone: then one of its own.
            columns: NO_COLUMNS
                .try_with(Rc::clone)
                .unwrap_or_else(|_| Rc::from(Vec::new())),
            rows: Vec::new(),
        }
    }
}

/// Most rows a streamed query reads in one chunk. Small enough that a chunk's row buffers
/// (typically a few hundred bytes a row) stay in the core's first- and second-level caches
/// between the engine writing them and the caller reading them: a full scan through SQL
/// took about 20% less time a row at 128 than at 1,024 (`scan_time` example, 300,000 rows of
/// 116 bytes), for about 40 more instructions a row on the table engine.
const CHUNK_ROWS: usize = 128;

/// Rows a streamed query reads in its first chunk (so `query_row` and `exists` read few);
/// each later chunk is four times bigger, up to [`CHUNK_ROWS`].
const FIRST_CHUNK_ROWS: usize = 16;

/// A statement [`Executor::start`]ed.
#[derive(Debug)]
pub enum Started {
    /// Run to the end: every statement but a streamed SELECT.
    Done(Output),
    /// A SELECT whose rows are read a chunk at a time with [`Executor::next_chunk`].
    Stream(Box<Stream>),
}

/// A top-level SELECT of plain columns of one table (no join, grouping, ORDER BY, LIMIT…)
/// over a full scan or a rowid range, read a chunk at a time in rowid order: each chunk resumes after the last
/// rowid the one before read, so statements may run on the executor between chunks. Rows
/// past the chunks read so far are read as they are when their chunk is; a schema change
/// that alters or drops the table ends the query with an error from
/// [`Executor::next_chunk`] (one that leaves the table's definition as it was does not).
#[derive(Debug)]
pub struct Stream {
    /// The statement's short path (kept alive here when the executor forgets its plans).
    plan: Rc<SimpleSelect>,
    /// The statement's parse id.
    stmt_id: u64,
    /// Its parameter values (the executor holds another statement's between chunks).
    params: Vec<Value>,
    /// The rowids not read yet.
    lo: Bound<i64>,
    hi: Bound<i64>,
    /// The bounds are exact: the WHERE terms the range answers are not checked per row.
    exact: bool,
    /// Nothing is left to read (or an error ended the query).
    done: bool,
    /// The executor's schema generation the plan was last checked against.
    schema: u64,
    /// Rows to read in the next chunk.
    chunk: usize,
    /// A row vector for projections that are not a prefix of the table's columns.
    spare: Vec<Value>,
}

impl Stream {
    /// The result's column names.
    pub fn columns(&self) -> &Rc<[String]> {
        &self.plan.names
    }

    /// The number of result columns: a row [`Executor::next_chunk`] fills holds the
    /// result in its first `width` values.
    pub fn width(&self) -> usize {
        self.plan.cols.len()
    }

    /// Whether every row has been read (or an error ended the query).
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// An inverse row operation, to undo a failed statement inside a transaction.
#[derive(Debug)]
enum Undo {
    /// A storage table or index the statement created.
    CreatedTable(String),
    CreatedIndex(String),
    Inserted(String, i64),
    Deleted(String, i64, Vec<Value>),
    Updated(String, i64, Vec<Value>),
}

/// How a table in a FROM clause is read.
#[derive(Debug, Clone)]
enum Access {
    Full,
    RowidEq(Expr),
    RowidIn(Vec<Expr>),
    RowidRange(Option<(Expr, bool)>, Option<(Expr, bool)>),
    /// Engine index, user-facing name, the positions and affinities of its columns, equality
    /// values on a prefix of them.
    IndexEq(String, String, Vec<(usize, Affinity)>, Vec<Expr>),
    IndexIn(String, String, Affinity, Vec<Expr>),
    IndexRange(
        String,
        String,
        Affinity,
        Option<(Expr, bool)>,
        Option<(Expr, bool)>,
    ),
    /// The rows in ORDER BY order, read from one end of the rowid order (engine index
    /// `None`) or of an engine index (engine name, user-facing name), at most LIMIT + OFFSET
    /// of them: descending, LIMIT, OFFSET, and the values (with their columns' affinities)
    /// a WHERE of equalities fixes the index's leading columns to — the read then stays
    /// within that prefix (`WHERE chat = ? ORDER BY time DESC LIMIT 20` on `(chat, time)`).
    Ordered(
        Option<(String, String)>,
        bool,
        Box<Expr>,
        Option<Box<Expr>>,
        Vec<(Affinity, Expr)>,
    ),
}

/// What a SELECT core with no grouping or DISTINCT over one table, whose WHERE (if any) is
/// only equalities, needs for its ORDER BY … LIMIT to be answered from one end of the rowid
/// or an index order.
struct OrderHint<'a> {
    terms: &'a [OrderTerm],
    /// The WHERE conjuncts, each `x = y`: they must fix a leading prefix of the index.
    eqs: &'a [&'a Expr],
    limit: &'a Expr,
    offset: Option<&'a Expr>,
}

/// Where a FROM item's rows come from.
#[derive(Debug, Clone)]
enum LeafSrc {
    Table(Rc<TableDef>),
    Rows(Rc<Vec<Vec<Value>>>),
}

/// One FROM item after flattening the joins.
#[derive(Debug, Clone)]
struct Leaf {
    scope: Rc<Scope>,
    src: LeafSrc,
    kind: JoinKind,
    on: Vec<Expr>,
    /// How EXPLAIN QUERY PLAN names it.
    label: Rc<str>,
}

/// An UPDATE's SET clause against its table, resolved at the statement's first run and
/// kept with the plans.
#[derive(Debug)]
struct SetPlan {
    /// Each assignment's column (`None`: the rowid), in the clause's order.
    targets: Vec<Option<usize>>,
    /// Per table column, whether every row gets a new value for it (not the old row's).
    set_cols: Vec<bool>,
    /// Whether a row's new values need its old ones: an assignment reads a column or sets
    /// the rowid, or a column (the INTEGER PRIMARY KEY aside) keeps its value.
    reads_row: bool,
    /// The values the WHERE fixes the table's one UNIQUE constraint to, in its columns'
    /// order, when the statement is of the shape [`Executor::update_by_key`] runs.
    by_key: Option<Vec<Expr>>,
}

/// A table as a FROM item under one alias (lowercase; empty: none), made once per schema:
/// its definition, its scope and its EXPLAIN label.
#[derive(Debug, Clone)]
struct LeafDef {
    alias: Rc<str>,
    table: Rc<TableDef>,
    scope: Rc<Scope>,
    label: Rc<str>,
}

/// A top-level SELECT that returns plain columns of one table's rows that pass its WHERE —
/// no join, view, subquery, grouping, aggregate, DISTINCT, result alias, ORDER BY, LIMIT or
/// compound. Made at the statement's first run and kept with the plans, so a later run is
/// the access path, the WHERE's conjuncts on each row and a projection, without the
/// general query machinery (FROM flattening, join levels, result expressions, sort keys).
/// It evaluates exactly what [`Executor::core`] would, in the same order.
#[derive(Debug)]
struct SimpleSelect {
    /// The table as its FROM item.
    leaf: Leaf,
    /// How its rows are read and filtered.
    plan: Rc<LeafPlan>,
    /// Row positions of the result columns, in order.
    cols: Vec<usize>,
    /// The result columns are the row's first columns, in order: rows are returned as
    /// read, cut to that width.
    prefix: bool,
    /// No row position is named twice: values move out of the rows.
    distinct_cols: bool,
    /// The row positions rise strictly: a row becomes its result in place (each value
    /// moved forward, the rest cut off).
    ascending: bool,
    /// Result column names.
    names: Rc<[String]>,
}

/// How the rows of one table that pass a WHERE are read, as `join` would do it for a lone
/// FROM item, made once per statement.
#[derive(Debug)]
struct LeafPlan {
    /// The access path (as `join` chooses it).
    access: Rc<Access>,
    /// For each WHERE conjunct in order: whether it names no column (then it is decided
    /// once, before any row is read).
    constant: Vec<bool>,
    /// For each WHERE conjunct in order: whether it is checked on each row read — it names
    /// a column and the access path does not already answer it (see
    /// [`Executor::implied`]).
    check: Vec<bool>,
    /// For each WHERE conjunct in order: whether a rowid range answers it exactly once its
    /// bounds are (see [`Executor::range_answered`]); such a conjunct is checked on each
    /// row only when a bound is not exact.
    ranged: Vec<bool>,
}

/// A rowid range's bounds and whether they are exact (see [`Executor::rowid_bounds`]).
type RowidSpan = (Bound<i64>, Bound<i64>, bool);

/// A query's column names, rows and column affinities.
type Typed = (Vec<String>, Vec<Vec<Value>>, Vec<Option<Affinity>>);

/// Where [`Executor::scan_leaf`] hands each row: the executor, the row, and whether the
/// row may be moved out (else it is the scan's reused buffer and must be copied to keep).
type RowSink<'a, E> = dyn FnMut(&mut E, &mut Vec<Value>, bool) -> Result<()> + 'a;

/// A subquery's result, shared between the evaluations that reuse it.
type Rows = Rc<Vec<Vec<Value>>>;

/// The SQL engine over one storage.
pub struct Executor<S: Storage> {
    pub(crate) storage: S,
    catalog: Catalog,
    explicit: bool,
    pub(crate) params: Vec<Value>,
    undo: Vec<Undo>,
    pub(crate) last_rowid: i64,
    pub(crate) changes: u64,
    pub(crate) total_changes: u64,
    pub(crate) rng: u64,
    /// The longest string or blob a statement may make ([`crate::eval::MAX_LENGTH`] unless
    /// set lower).
    pub(crate) max_length: usize,
    subq_cache: BTreeMap<usize, (Rows, usize, Option<Affinity>)>,
    /// Subqueries running: the env depth they start at, and whether they referred to a
    /// column below it (correlated).
    subq_stack: Vec<(u32, bool)>,
    explain: Option<Vec<String>>,
    view_depth: u32,
    /// Access paths chosen, by (statement id, query node address, FROM item); emptied by
    /// any schema change.
    plans: BTreeMap<(u64, usize, usize), Rc<Access>>,
    /// Top-level SELECTs that take the short path (`None`: they do not), by (statement id,
    /// query node address); emptied with the plans.
    simple: BTreeMap<(u64, usize), Option<Rc<SimpleSelect>>>,
    /// How UPDATE and DELETE find their rows, by (statement id, WHERE address); emptied
    /// with the plans.
    leaf_plans: BTreeMap<(u64, usize), Rc<LeafPlan>>,
    /// Each table's definition and row scope as FROM items use them, by table and alias
    /// (shared, not rebuilt per execution); emptied with the plans.
    leaf_defs: BTreeMap<String, Vec<LeafDef>>,
    /// Each table's definition as INSERT, UPDATE and DELETE use it; emptied with the plans.
    write_defs: BTreeMap<String, Rc<TableDef>>,
    /// What each UPDATE's SET clause resolves to, by statement id; emptied with the plans.
    set_plans: BTreeMap<u64, Rc<SetPlan>>,
    /// Per table (lowercase name): its one UNIQUE constraint is enforced by the engine's
    /// index itself, so a plain INSERT of a new rowid does not probe it (see
    /// [`Executor::engine_checks_unique`]); emptied with the plans.
    engine_unique: BTreeMap<String, bool>,
    /// The statement running (its parse id).
    stmt_id: u64,
    /// Access paths chosen so far (cached ones not counted).
    plans_made: u64,
    /// The statement copied parts of its query (alias substitution): subquery results are
    /// not cached by address for the rest of it.
    no_subq_cache: bool,
    /// Counts the times the plans were forgotten (schema changes among them): a
    /// [`Stream`] planned under another count checks its table is unchanged.
    schema: u64,
}

/// The exact rowid bound of `r op x` for a finite real `x` (`op`: `>`/`>=` for a lower
/// bound, `<`/`<=` for an upper one, `incl` for the `=` in it), compared exactly as SQLite
/// compares an integer with a real: the nearest rowid inside it, `Unbounded` if every rowid
/// is inside, `None` if none is.
fn real_rowid_bound(x: f64, incl: bool, upper: bool) -> Option<(Bound<i64>, bool)> {
    // 2^63: the first real above every i64 (and -2^63 is i64::MIN).
    const TOP: f64 = 9_223_372_036_854_775_808.0;
    // The integral real nearest x on the inside, and the step off it when x is that
    // integer itself and excluded (taken in integers: beyond 2^53 a real step is lost).
    let (base, step) = if upper {
        (x.floor(), if !incl && x == x.floor() { -1 } else { 0 })
    } else {
        (x.ceil(), if !incl && x == x.ceil() { 1 } else { 0 })
    };
    if base >= TOP {
        return upper.then_some((Bound::Unbounded, true));
    }
    if base < -TOP {
        return (!upper).then_some((Bound::Unbounded, true));
    }
    let edge = (base as i64).checked_add(step)?;
    Some((Bound::Included(edge), true))
}

/// The rowid of the last row of a chunk a scan of `table` read after `lo` (`None`: the
/// chunk is empty), checked to be past `lo` so a scan never loops over the same rows.
fn chunk_end(table: &str, rows: &[Vec<Value>], lo: Bound<i64>) -> Result<Option<i64>> {
    let last = match rows.last().and_then(|r| r.last()) {
        None => return Ok(None),
        Some(Value::Integer(last)) => *last,
        Some(_) => {
            return Err(SqlError::Storage(format!(
                "table {table}: a scan returned a row without its rowid"
            )));
        }
    };
    if let Bound::Excluded(before) = lo {
        if last <= before {
            return Err(SqlError::Storage(format!(
                "table {table}: a scan resumed after rowid {before} ended at rowid {last}"
            )));
        }
    }
    Ok(Some(last))
}

/// `b op a` for `a op b`: the comparison with its operands swapped.
fn flipped(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        o => o,
    }
}

/// Whether an expression reads no column of the row it is evaluated for, not even through
/// a subquery.
fn column_free(e: &Expr) -> bool {
    let mut free = true;
    walk(e, &mut |x| {
        if matches!(
            x,
            Expr::Column { .. } | Expr::InSelect(..) | Expr::Exists(..) | Expr::Subquery(_)
        ) {
            free = false;
        }
    });
    free
}

/// Whether [`probe`] would give `v` back unchanged for a column of affinity `aff`: no
/// conversion (BLOB affinity), a value no conversion changes (NULL, a blob), or one already
/// of the kind the conversion makes (text for TEXT, an integer for the numeric affinities).
fn probes_as_is(v: &Value, aff: Affinity) -> bool {
    match v {
        Value::Null | Value::Blob(_) => true,
        Value::Integer(_) => aff.is_numeric() || aff == Affinity::Blob,
        Value::Text(_) => aff == Affinity::Text || aff == Affinity::Blob,
        Value::Real(_) => aff == Affinity::Blob,
    }
}

/// The probe value for a column of affinity `aff`, converted as the comparison would. (No
/// value is a NaN: parameters, arithmetic and stored rows give NULL for one.)
fn probe(v: Value, aff: Affinity) -> Value {
    if aff.is_numeric() {
        v.with_affinity(Affinity::Numeric)
    } else if aff == Affinity::Text {
        v.with_affinity(Affinity::Text)
    } else {
        v
    }
}

/// The conjuncts of a condition, borrowed.
fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    if let Expr::Binary(BinOp::And, a, b) = e {
        conjuncts(a, out);
        conjuncts(b, out);
    } else {
        out.push(e);
    }
}

fn split_and(e: &Expr, out: &mut Vec<Expr>) {
    if let Expr::Binary(BinOp::And, a, b) = e {
        split_and(a, out);
        split_and(b, out);
    } else {
        out.push(e.clone());
    }
}

fn quote_name(n: &str) -> String {
    let plain = n
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        n.to_string()
    } else {
        format!("\"{}\"", n.replace('"', "\"\""))
    }
}

fn ordinal(k: usize) -> String {
    let suffix = match (k % 10, k % 100) {
        (1, x) if x != 11 => "st",
        (2, x) if x != 12 => "nd",
        (3, x) if x != 13 => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

/// The rowid a value names, if it is an integer (or a real equal to one).
fn as_rowid(v: &Value) -> Option<i64> {
    match v.clone().with_affinity(Affinity::Integer) {
        Value::Integer(i) => Some(i),
        _ => None,
    }
}

/// Compares two rows value by value.
fn cmp_rows(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = compare(x, y);
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// Sorts and removes duplicate rows.
fn sort_dedup(rows: &mut Vec<Vec<Value>>) {
    sort_dedup_keep(rows, false);
}

/// Sorts rows and removes duplicates, keeping the first or (`last`) the last of equal rows
/// (they can differ: `1` and `1.0` are equal).
fn sort_dedup_keep(rows: &mut Vec<Vec<Value>>, last: bool) {
    if last {
        rows.reverse();
    }
    rows.sort_by(|a, b| cmp_rows(a, b));
    rows.dedup_by(|a, b| cmp_rows(a, b) == Ordering::Equal);
}

/// Removes duplicate rows, keeping the first of each in order.
fn dedup_keep_order(rows: Vec<(Vec<Value>, Vec<Value>)>) -> Vec<(Vec<Value>, Vec<Value>)> {
    let mut idx: Vec<usize> = (0..rows.len()).collect();
    idx.sort_by(|&a, &b| cmp_rows(&rows[a].0, &rows[b].0).then(a.cmp(&b)));
    let mut keep = vec![false; rows.len()];
    let mut prev: Option<usize> = None;
    for i in idx {
        match prev {
            Some(p) if cmp_rows(&rows[p].0, &rows[i].0) == Ordering::Equal => {}
            _ => {
                keep[i] = true;
                prev = Some(i);
            }
        }
    }
    rows.into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(r, _)| r)
        .collect()
}

/// A sort-key comparison with DESC and NULLS FIRST/LAST per term.
fn cmp_keys(a: &[Value], b: &[Value], terms: &[(bool, Option<bool>)]) -> Ordering {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let (desc, nulls_first) = terms.get(i).copied().unwrap_or((false, None));
        let nf = nulls_first.unwrap_or(!desc);
        let o = match (x.is_null(), y.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) => {
                if nf {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (false, true) => {
                if nf {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            _ => {
                let o = compare(x, y);
                if desc { o.reverse() } else { o }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// The expression with result aliases put in where `alias_of` finds one (a copy only when
/// there is one; `substituted` is set then).
fn with_aliases<'e>(
    e: &'e Expr,
    alias_of: &dyn Fn(&Option<String>, &str) -> Option<Expr>,
    substituted: &mut bool,
) -> Cow<'e, Expr> {
    let mut needed = false;
    walk(e, &mut |x| {
        if let Expr::Column { table, name, .. } = x {
            needed |= alias_of(table, name).is_some();
        }
    });
    if needed {
        *substituted = true;
        Cow::Owned(map_columns(e, alias_of))
    } else {
        Cow::Borrowed(e)
    }
}

/// A copy of an expression with column references replaced where `f` says (not inside
/// subqueries, which resolve their own names).
fn map_columns(e: &Expr, f: &dyn Fn(&Option<String>, &str) -> Option<Expr>) -> Expr {
    let m = |x: &Expr| Box::new(map_columns(x, f));
    match e {
        Expr::Column { table, name, .. } => f(table, name).unwrap_or_else(|| e.clone()),
        Expr::Unary(op, a) => Expr::Unary(*op, m(a)),
        Expr::Binary(op, a, b) => Expr::Binary(*op, m(a), m(b)),
        Expr::Is(a, b, n) => Expr::Is(m(a), m(b), *n),
        Expr::Between(a, b, c, n) => Expr::Between(m(a), m(b), m(c), *n),
        Expr::InList(a, l, n) => {
            Expr::InList(m(a), l.iter().map(|x| map_columns(x, f)).collect(), *n)
        }
        Expr::InSelect(a, s, n) => Expr::InSelect(m(a), s.clone(), *n),
        Expr::Like {
            expr,
            pattern,
            escape,
            negated,
            glob,
        } => Expr::Like {
            expr: m(expr),
            pattern: m(pattern),
            escape: escape.as_ref().map(|x| m(x)),
            negated: *negated,
            glob: *glob,
        },
        Expr::Case {
            operand,
            whens,
            otherwise,
        } => Expr::Case {
            operand: operand.as_ref().map(|x| m(x)),
            whens: whens
                .iter()
                .map(|(w, t)| (map_columns(w, f), map_columns(t, f)))
                .collect(),
            otherwise: otherwise.as_ref().map(|x| m(x)),
        },
        Expr::Cast(a, t) => Expr::Cast(m(a), t.clone()),
        Expr::Collate(a, c) => Expr::Collate(m(a), c.clone()),
        Expr::Func {
            name,
            args,
            distinct,
            star,
        } => Expr::Func {
            name: name.clone(),
            args: args.iter().map(|x| map_columns(x, f)).collect(),
            distinct: *distinct,
            star: *star,
        },
        Expr::Lit(_) | Expr::Param(_) | Expr::Exists(..) | Expr::Subquery(_) => e.clone(),
    }
}

/// Where a new column definition goes in a `CREATE TABLE` text: after the last column,
/// before the table constraints (or the closing parenthesis).
fn column_list_end(sql: &str) -> Result<usize> {
    let toks = tokenize(sql)?;
    let mut depth = 0;
    let mut last_comma = None;
    for t in &toks {
        match &t.tok {
            Tok::Op("(") => depth += 1,
            Tok::Op(")") => {
                depth -= 1;
                if depth == 0 {
                    return Ok(t.at);
                }
            }
            Tok::Op(",") if depth == 1 => last_comma = Some(t.at),
            Tok::Word(w) if depth == 1 => {
                let after_comma = last_comma.is_some_and(|c| sql[c + 1..t.at].trim().is_empty());
                if after_comma
                    && ["PRIMARY", "UNIQUE", "CHECK", "CONSTRAINT", "FOREIGN"]
                        .iter()
                        .any(|k| w.eq_ignore_ascii_case(k))
                {
                    return Ok(last_comma.unwrap_or(t.at));
                }
            }
            _ => {}
        }
    }
    Err(SqlError::invalid(
        "the table's definition has no column list",
    ))
}

/// The columns of the leaves, in order.
fn acc_scope_of(leaves: &[Leaf]) -> Scope {
    let mut s = Scope::default();
    for l in leaves {
        s.cols_mut().extend(l.scope.cols().iter().cloned());
    }
    s
}

/// The name a result column gets.
fn result_name(expr: &Expr, alias: &Option<String>, text: &str) -> String {
    if let Some(a) = alias {
        return a.clone();
    }
    match expr {
        Expr::Column { name, .. } => name.clone(),
        _ => text.to_string(),
    }
}

impl<S: Storage> Executor<S> {
    /// Opens the SQL layer over a storage: reads the catalog (creating its table in an
    /// empty database).
    pub fn open(mut storage: S) -> Result<Self> {
        if !storage.has_table(MASTER)? {
            storage.begin()?;
            let cols: Vec<ColumnSpec> = ["type", "name", "tbl_name", "engine", "sql"]
                .iter()
                .map(|n| ColumnSpec {
                    name: (*n).into(),
                    decl_type: "TEXT".into(),
                })
                .collect();
            match storage.create_table(MASTER, &cols) {
                Ok(()) => storage.commit()?,
                Err(e) => {
                    storage.rollback()?;
                    return Err(e);
                }
            }
        }
        let mut ex = Executor {
            storage,
            catalog: Catalog::default(),
            explicit: false,
            params: Vec::new(),
            undo: Vec::new(),
            last_rowid: 0,
            changes: 0,
            total_changes: 0,
            rng: 0x2545_f491_4f6c_dd1d,
            max_length: crate::eval::MAX_LENGTH,
            subq_cache: BTreeMap::new(),
            subq_stack: Vec::new(),
            explain: None,
            view_depth: 0,
            plans: BTreeMap::new(),
            simple: BTreeMap::new(),
            leaf_plans: BTreeMap::new(),
            set_plans: BTreeMap::new(),
            leaf_defs: BTreeMap::new(),
            write_defs: BTreeMap::new(),
            engine_unique: BTreeMap::new(),
            stmt_id: 0,
            plans_made: 0,
            no_subq_cache: false,
            schema: 0,
        };
        ex.reload_catalog()?;
        Ok(ex)
    }

    /// The storage underneath.
    pub fn storage(&mut self) -> &mut S {
        &mut self.storage
    }

    /// Gives the storage back.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// The schema as the SQL layer knows it.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Whether an explicit transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.explicit
    }

    /// The rowid of the last row inserted.
    pub fn last_insert_rowid(&self) -> i64 {
        self.last_rowid
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Rows changed since the database was opened.
    pub fn total_changes(&self) -> u64 {
        self.total_changes
    }

    /// How many access paths the planner has chosen (a prepared statement run again reuses
    /// its plans and adds none).
    pub fn plans_made(&self) -> u64 {
        self.plans_made
    }

    /// Sets the longest string or blob a statement may make (SQLite's `SQLITE_LIMIT_LENGTH`;
    /// at most, and by default, [`crate::eval::MAX_LENGTH`]); longer ones are the error
    /// "string or blob too big".
    pub fn set_max_length(&mut self, bytes: usize) {
        self.max_length = bytes.min(crate::eval::MAX_LENGTH);
    }

    /// Seeds `random()`.
    pub fn seed_random(&mut self, seed: u64) {
        self.rng = seed | 1;
    }

    fn reload_catalog(&mut self) -> Result<()> {
        let rows = self
            .storage
            .scan(MASTER, Bound::Unbounded, Bound::Unbounded)?;
        let mut cat = Catalog::default();
        for (_, r) in rows {
            let text = |i: usize| r.get(i).and_then(Value::to_text).unwrap_or_default();
            cat.load_row(&text(0), &text(3), &text(4))?;
        }
        self.catalog = cat;
        self.forget_plans();
        Ok(())
    }

    /// Drops every plan and cached table definition (after a schema change, or when there
    /// are many).
    fn forget_plans(&mut self) {
        self.schema += 1;
        self.plans.clear();
        self.simple.clear();
        self.leaf_plans.clear();
        self.set_plans.clear();
        self.leaf_defs.clear();
        self.write_defs.clear();
        self.engine_unique.clear();
    }

    /// Runs one parsed statement with its parameter values.
    pub fn execute(&mut self, p: &Parsed, params: &[Value]) -> Result<Output> {
        self.execute_owned(p, params.to_vec())
    }

    /// The parameter values of the statement that ran last through
    /// [`execute_owned`](Self::execute_owned) (not a streamed query's: a stream keeps its
    /// own), taken out for the caller to bind the next statement's values into; nothing
    /// reads them once the statement has run.
    pub fn take_params(&mut self) -> Vec<Value> {
        core::mem::take(&mut self.params)
    }

    /// [`execute`](Self::execute) taking the parameter values (no copy).
    pub fn execute_owned(&mut self, p: &Parsed, params: Vec<Value>) -> Result<Output> {
        if !matches!(p.stmt, Stmt::Select(_)) {
            self.begin_statement(p, params);
            return self.run(p);
        }
        match self.start(p, params)? {
            Started::Done(out) => Ok(out),
            Started::Stream(mut s) => {
                // One chunk of every row.
                s.chunk = usize::MAX;
                let mut rows = Vec::new();
                let n = self.next_chunk(p, &mut s, &mut rows)?;
                rows.truncate(n);
                let width = s.width();
                for r in &mut rows {
                    r.truncate(width);
                }
                Ok(Output {
                    columns: s.plan.names.clone(),
                    rows,
                })
            }
        }
    }

    /// Runs one parsed statement with its parameter values, like
    /// [`execute_owned`](Self::execute_owned), except that a top-level SELECT of plain
    /// columns of one table over a full scan or a rowid range (no join, grouping, ORDER BY,
    /// LIMIT…) is not read yet: its rows come a chunk at a time from
    /// [`next_chunk`](Self::next_chunk).
    pub fn start(&mut self, p: &Parsed, params: Vec<Value>) -> Result<Started> {
        self.begin_statement(p, params);
        if let Stmt::Select(s) = &p.stmt {
            if let Some(started) = self.simple_select(s)? {
                return Ok(started);
            }
        }
        self.run(p).map(Started::Done)
    }

    /// Sets up the executor for a statement about to run.
    fn begin_statement(&mut self, p: &Parsed, mut params: Vec<Value>) {
        // A NaN bound is NULL, as `sqlite3_bind_double` makes it (and as arithmetic makes
        // a NaN result): no comparison is true of it, and keys encode it as NULL.
        for v in &mut params {
            if matches!(v, Value::Real(r) if r.is_nan()) {
                *v = Value::Null;
            }
        }
        self.params = params;
        self.stmt_id = p.id;
        if self.plans.len() + self.simple.len() + self.leaf_plans.len() + self.set_plans.len()
            > 4096
        {
            self.forget_plans();
        }
        self.subq_cache.clear();
        self.subq_stack.clear();
        self.no_subq_cache = false;
    }

    /// Runs the statement [`begin_statement`](Self::begin_statement) set up, to the end (a
    /// SELECT by the general path).
    fn run(&mut self, p: &Parsed) -> Result<Output> {
        match &p.stmt {
            Stmt::Begin => {
                if self.explicit {
                    return Err(SqlError::Transaction(
                        "cannot start a transaction within a transaction".into(),
                    ));
                }
                self.storage.begin()?;
                self.explicit = true;
                Ok(Output::default())
            }
            Stmt::Commit => {
                if !self.explicit {
                    return Err(SqlError::Transaction(
                        "cannot commit - no transaction is active".into(),
                    ));
                }
                self.explicit = false;
                if let Err(e) = self.storage.commit() {
                    let _ = self.reload_catalog();
                    return Err(e);
                }
                Ok(Output::default())
            }
            Stmt::Rollback => {
                if !self.explicit {
                    return Err(SqlError::Transaction(
                        "cannot rollback - no transaction is active".into(),
                    ));
                }
                self.explicit = false;
                self.storage.rollback()?;
                self.reload_catalog()?;
                Ok(Output::default())
            }
            Stmt::Select(s) => {
                let (cols, rows) = self.query(s, None)?;
                Ok(Output {
                    columns: cols.into(),
                    rows,
                })
            }
            Stmt::Explain(inner) => self.explain(inner),
            Stmt::Pragma { name, arg } => self.pragma(name, arg.as_ref()),
            stmt => {
                self.undo.clear();
                let ddl = !matches!(stmt, Stmt::Insert(_) | Stmt::Update(_) | Stmt::Delete(_));
                if self.explicit {
                    match self.write(stmt, &p.sql) {
                        Ok(o) => Ok(o),
                        Err(e) => {
                            self.undo_statement()?;
                            if ddl {
                                self.reload_catalog()?;
                            }
                            Err(e)
                        }
                    }
                } else {
                    self.storage.begin()?;
                    match self.write(stmt, &p.sql) {
                        Ok(o) => match self.storage.commit() {
                            Ok(()) => Ok(o),
                            Err(e) => {
                                self.reload_catalog()?;
                                Err(e)
                            }
                        },
                        Err(e) => {
                            self.storage.rollback()?;
                            if ddl {
                                self.reload_catalog()?;
                            }
                            Err(e)
                        }
                    }
                }
            }
        }
    }

    /// Notes how to take back a change of the running statement. Outside an explicit
    /// transaction a failed statement rolls the engine's transaction back instead, so
    /// nothing is noted (nor the old row kept).
    fn note_undo(&mut self, u: impl FnOnce() -> Undo) {
        if self.explicit {
            self.undo.push(u());
        }
    }

    fn undo_statement(&mut self) -> Result<()> {
        while let Some(u) = self.undo.pop() {
            match u {
                // Row operations on a table the statement created go with the table.
                Undo::CreatedTable(t) => self.storage.drop_table(&t)?,
                Undo::CreatedIndex(i) => self.storage.drop_index(&i)?,
                Undo::Inserted(t, r) => {
                    if self.storage.has_table(&t)? {
                        self.storage.delete(&t, r)?;
                    }
                }
                Undo::Deleted(t, r, row) => self.storage.insert(&t, r, &row)?,
                Undo::Updated(t, r, row) => self.storage.update(&t, r, &row)?,
            }
        }
        Ok(())
    }

    fn write(&mut self, stmt: &Stmt, sql: &str) -> Result<Output> {
        if !matches!(stmt, Stmt::Insert(_) | Stmt::Update(_) | Stmt::Delete(_)) {
            self.forget_plans();
        }
        match stmt {
            Stmt::Insert(i) => self.insert(i),
            Stmt::Update(u) => self.update(u),
            Stmt::Delete(d) => self.delete(d),
            Stmt::CreateTable(ct) => self.create_table(ct, sql),
            Stmt::DropTable { if_exists, name } => self.drop_table(name, *if_exists),
            Stmt::CreateIndex(ci) => self.create_index(ci, sql),
            Stmt::DropIndex { if_exists, name } => self.drop_index(name, *if_exists),
            Stmt::CreateView {
                if_not_exists,
                name,
                columns,
                select,
            } => {
                if let Some(what) = self.catalog.name_taken(name) {
                    if *if_not_exists {
                        return Ok(Output::default());
                    }
                    return Err(SqlError::Exists {
                        what,
                        name: name.clone(),
                    });
                }
                Self::check_name(name)?;
                self.master_insert("view", name, name, "", sql)?;
                self.catalog.views.insert(
                    key(name),
                    ViewDef {
                        name: name.clone(),
                        columns: columns.clone(),
                        select: select.clone(),
                        sql: sql.to_string(),
                    },
                );
                Ok(Output::default())
            }
            Stmt::DropView { if_exists, name } => {
                if self.catalog.views.remove(&key(name)).is_none() {
                    if self.catalog.tables.contains_key(&key(name)) {
                        return Err(SqlError::invalid(format!(
                            "use DROP TABLE to delete table {name}"
                        )));
                    }
                    if *if_exists {
                        return Ok(Output::default());
                    }
                    return Err(SqlError::NoSuch {
                        what: "view",
                        name: name.clone(),
                    });
                }
                self.master_delete("view", name)?;
                Ok(Output::default())
            }
            Stmt::RenameTable { table, to } => self.rename_table(table, to),
            Stmt::RenameColumn { table, from, to } => self.rename_column(table, from, to),
            Stmt::AddColumn { table, column } => self.add_column(table, column, sql),
            _ => Err(SqlError::invalid("not a writing statement")),
        }
    }

    // ----- the catalog table -------------------------------------------------------------

    fn master_rows(&mut self) -> Result<Vec<(i64, Vec<Value>)>> {
        self.storage
            .scan(MASTER, Bound::Unbounded, Bound::Unbounded)
    }

    fn master_insert(
        &mut self,
        kind: &str,
        name: &str,
        tbl: &str,
        engine: &str,
        sql: &str,
    ) -> Result<()> {
        let id = self.storage.max_rowid(MASTER)?.unwrap_or(0) + 1;
        let row = vec![
            Value::Text(kind.into()),
            Value::Text(name.into()),
            Value::Text(tbl.into()),
            Value::Text(engine.into()),
            Value::Text(sql.into()),
        ];
        self.storage.insert(MASTER, id, &row)?;
        self.note_undo(|| Undo::Inserted(MASTER.into(), id));
        Ok(())
    }

    fn master_find(&mut self, kind: &str, name: &str) -> Result<Option<(i64, Vec<Value>)>> {
        Ok(self.master_rows()?.into_iter().find(|(_, r)| {
            r.first().and_then(Value::to_text).as_deref() == Some(kind)
                && r.get(1)
                    .and_then(Value::to_text)
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
        }))
    }

    fn master_delete(&mut self, kind: &str, name: &str) -> Result<()> {
        if let Some((id, old)) = self.master_find(kind, name)? {
            self.storage.delete(MASTER, id)?;
            self.note_undo(|| Undo::Deleted(MASTER.into(), id, old));
        }
        Ok(())
    }

    fn master_update(&mut self, kind: &str, name: &str, new: Vec<Value>) -> Result<()> {
        match self.master_find(kind, name)? {
            Some((id, old)) => {
                self.storage.update(MASTER, id, &new)?;
                self.note_undo(|| Undo::Updated(MASTER.into(), id, old));
                Ok(())
            }
            None => Err(SqlError::Storage(format!(
                "catalog row for {kind} {name} is missing"
            ))),
        }
    }

    fn check_name(name: &str) -> Result<()> {
        let k = key(name);
        if k.starts_with("sqlite_") || k == MASTER {
            return Err(SqlError::invalid(format!(
                "object name reserved for internal use: {name}"
            )));
        }
        Ok(())
    }

    // ----- DDL ---------------------------------------------------------------------------

    fn create_table(&mut self, ct: &CreateTable, sql: &str) -> Result<Output> {
        if let Some(what) = self.catalog.name_taken(&ct.name) {
            if what == "index" {
                // Not excused by IF NOT EXISTS, as in SQLite.
                return Err(SqlError::invalid(format!(
                    "there is already an index named {}",
                    ct.name
                )));
            }
            if ct.if_not_exists {
                return Ok(Output::default());
            }
            return Err(SqlError::Exists {
                what,
                name: ct.name.clone(),
            });
        }
        Self::check_name(&ct.name)?;
        // The engine: "t" (table), "l" (lsm) or "s" (timeseries), the prefix of its names.
        let prefix = match &ct.using {
            None => "t",
            Some(u) => {
                let engine: String = u
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if engine.eq_ignore_ascii_case("table") {
                    "t"
                } else if engine.eq_ignore_ascii_case("lsm") && self.storage.supports_engine("lsm")
                {
                    "l"
                } else if engine.eq_ignore_ascii_case("timeseries")
                    && self.storage.supports_engine("timeseries")
                {
                    "s"
                } else {
                    let mut have = String::from("table");
                    for e in ["lsm", "timeseries"] {
                        if self.storage.supports_engine(e) {
                            have.push_str(", ");
                            have.push_str(e);
                        }
                    }
                    return Err(SqlError::invalid(format!(
                        "no such storage engine: {engine} (this database has: {have})"
                    )));
                }
            }
        };
        if prefix == "s" && ct.as_select.is_some() {
            return Err(SqlError::invalid(
                "CREATE TABLE … AS SELECT cannot make a timeseries table: declare its columns",
            ));
        }
        if let Some(sel) = &ct.as_select {
            let (names, rows, affs) = self.query_typed(sel, None)?;
            let mut text = format!("CREATE TABLE {}(", quote_name(&ct.name));
            for (i, n) in names.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                let ty = match affs.get(i).copied().flatten() {
                    Some(Affinity::Integer) => " INT",
                    Some(Affinity::Real) => " REAL",
                    Some(Affinity::Text) => " TEXT",
                    Some(Affinity::Numeric) => " NUM",
                    _ => "",
                };
                text.push_str(&quote_name(n));
                text.push_str(ty);
            }
            text.push(')');
            let parsed = crate::parser::parse(&text)?;
            let Some(Stmt::CreateTable(def)) = parsed.into_iter().next().map(|p| p.stmt) else {
                return Err(SqlError::invalid(
                    "CREATE TABLE … AS SELECT produced no definition",
                ));
            };
            self.create_table(&def, &text)?;
            let t = self.catalog.table(&ct.name)?.clone();
            for (i, r) in rows.into_iter().enumerate() {
                self.storage.insert(&t.engine, i as i64 + 1, &r)?;
            }
            return Ok(Output::default());
        }
        let engine = self.catalog.engine_name(prefix);
        let def = table_def(ct, &engine, sql)?;
        let cols: Vec<ColumnSpec> = def
            .columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                decl_type: c.decl_type.clone(),
            })
            .collect();
        match (prefix, &ct.using) {
            ("s", Some(using)) => {
                // The key is the rowid: the first column, an INTEGER PRIMARY KEY; the engine
                // keeps no other unique index.
                if def.ipk != Some(0) {
                    return Err(SqlError::invalid(format!(
                        "a timeseries table's first column must be its INTEGER PRIMARY KEY (the timestamp): {}",
                        def.name
                    )));
                }
                if !def.uniques.is_empty() {
                    return Err(SqlError::invalid(format!(
                        "a timeseries table cannot have UNIQUE constraints: {}",
                        def.name
                    )));
                }
                let at = sql.find(using.as_str()).unwrap_or(0);
                self.storage.create_table_using(&engine, &cols, using, at)?;
            }
            _ => self.storage.create_table(&engine, &cols)?,
        }
        self.note_undo(|| Undo::CreatedTable(engine.clone()));
        for u in &def.uniques {
            self.storage
                .create_unique_index(&u.engine, &engine, &u.columns)?;
        }
        self.master_insert("table", &def.name, &def.name, &engine, sql)?;
        self.catalog.tables.insert(key(&def.name), def);
        Ok(Output::default())
    }

    fn drop_table(&mut self, name: &str, if_exists: bool) -> Result<Output> {
        let Some(t) = self.catalog.tables.get(&key(name)).cloned() else {
            if self.catalog.views.contains_key(&key(name)) {
                return Err(SqlError::invalid(format!(
                    "use DROP VIEW to delete view {name}"
                )));
            }
            if if_exists {
                return Ok(Output::default());
            }
            return Err(SqlError::NoSuch {
                what: "table",
                name: name.to_string(),
            });
        };
        for idx in self
            .catalog
            .indexes_of(name)
            .into_iter()
            .map(|i| i.name.clone())
            .collect::<Vec<_>>()
        {
            self.master_delete("index", &idx)?;
            self.catalog.indexes.remove(&key(&idx));
        }
        self.storage.drop_table(&t.engine)?;
        self.master_delete("table", &t.name)?;
        self.catalog.tables.remove(&key(name));
        Ok(Output::default())
    }

    fn create_index(&mut self, ci: &CreateIndex, sql: &str) -> Result<Output> {
        if let Some(what) = self.catalog.name_taken(&ci.name) {
            if what != "index" {
                // Not excused by IF NOT EXISTS, as in SQLite.
                return Err(SqlError::invalid(format!(
                    "there is already a {what} named {}",
                    ci.name
                )));
            }
            if ci.if_not_exists {
                return Ok(Output::default());
            }
            return Err(SqlError::Exists {
                what,
                name: ci.name.clone(),
            });
        }
        Self::check_name(&ci.name)?;
        let t = match self.catalog.tables.get(&key(&ci.table)) {
            Some(t) => t.clone(),
            None => {
                if self.catalog.views.contains_key(&key(&ci.table)) {
                    return Err(SqlError::invalid(format!(
                        "views may not be indexed: {}",
                        ci.table
                    )));
                }
                return Err(SqlError::NoSuch {
                    what: "table",
                    name: ci.table.clone(),
                });
            }
        };
        let mut cols = Vec::new();
        for (c, _) in &ci.columns {
            cols.push(t.column(c).ok_or_else(|| SqlError::NoSuch {
                what: "column",
                name: c.clone(),
            })?);
        }
        if ci.unique {
            // Existing rows must already be unique.
            let mut keys: Vec<Vec<Value>> = self
                .storage
                .scan(&t.engine, Bound::Unbounded, Bound::Unbounded)?
                .into_iter()
                .map(|(_, r)| {
                    cols.iter()
                        .map(|&c| r.get(c).cloned().unwrap_or(Value::Null))
                        .collect::<Vec<_>>()
                })
                .filter(|k: &Vec<Value>| !k.iter().any(Value::is_null))
                .collect();
            let n = keys.len();
            sort_dedup(&mut keys);
            if keys.len() != n {
                return Err(self.unique_error(&t, &cols));
            }
        }
        let prefix = match crate::storage::engine_of(&t.engine) {
            "lsm" => "li",
            "timeseries" => {
                if ci.unique {
                    return Err(SqlError::invalid(format!(
                        "a timeseries table cannot have a UNIQUE index: {}",
                        t.name
                    )));
                }
                "si"
            }
            _ => "i",
        };
        let engine = self.catalog.engine_name(prefix);
        if ci.unique {
            self.storage
                .create_unique_index(&engine, &t.engine, &cols)?;
        } else {
            self.storage.create_index(&engine, &t.engine, &cols)?;
        }
        self.note_undo(|| Undo::CreatedIndex(engine.clone()));
        self.master_insert("index", &ci.name, &t.name, &engine, sql)?;
        if ci.unique {
            if let Some(td) = self.catalog.tables.get_mut(&key(&t.name)) {
                td.uniques.push(UniqueDef {
                    columns: cols.clone(),
                    engine: engine.clone(),
                    primary: false,
                    index: Some(ci.name.clone()),
                });
            }
        }
        self.catalog.indexes.insert(
            key(&ci.name),
            IndexDef {
                name: ci.name.clone(),
                table: t.name.clone(),
                columns: cols,
                unique: ci.unique,
                engine,
                sql: sql.to_string(),
            },
        );
        Ok(Output::default())
    }

    fn drop_index(&mut self, name: &str, if_exists: bool) -> Result<Output> {
        let Some(idx) = self.catalog.indexes.remove(&key(name)) else {
            if if_exists {
                return Ok(Output::default());
            }
            return Err(SqlError::NoSuch {
                what: "index",
                name: name.to_string(),
            });
        };
        if let Some(t) = self.catalog.tables.get_mut(&key(&idx.table)) {
            t.uniques.retain(|u| {
                u.index
                    .as_deref()
                    .is_none_or(|n| !n.eq_ignore_ascii_case(name))
            });
        }
        self.storage.drop_index(&idx.engine)?;
        self.master_delete("index", name)?;
        Ok(Output::default())
    }

    /// Replaces the `which`-th name token (0: the first after `skip` words) equal to `old` in a
    /// CREATE text.
    fn rewrite_names(
        sql: &str,
        old: &str,
        new: &str,
        first_only_after: Option<usize>,
    ) -> Result<String> {
        let toks = tokenize(sql)?;
        let mut out = String::new();
        let mut last = 0;
        let mut done = false;
        for (i, t) in toks.iter().enumerate() {
            if done {
                break;
            }
            if let Some(min) = first_only_after {
                if i < min {
                    continue;
                }
            }
            let matches = match &t.tok {
                Tok::Word(w) | Tok::Quoted(w) => w.eq_ignore_ascii_case(old),
                _ => false,
            };
            if matches {
                let end = toks.get(i + 1).map_or(sql.len(), |n| n.at);
                let span = sql[t.at..end].trim_end();
                out.push_str(&sql[last..t.at]);
                out.push_str(&quote_name(new));
                last = t.at + span.len();
                if first_only_after.is_some() {
                    done = true;
                }
            }
        }
        out.push_str(&sql[last..]);
        Ok(out)
    }

    fn rename_table(&mut self, table: &str, to: &str) -> Result<Output> {
        let t = self.catalog.table(table)?.clone();
        if self.catalog.name_taken(to).is_some() {
            return Err(SqlError::invalid(format!(
                "there is already another table or index with this name: {to}"
            )));
        }
        Self::check_name(to)?;
        // CREATE TABLE [IF NOT EXISTS] name: the name is the first token equal to it after TABLE.
        let sql = Self::rewrite_names(&t.sql, &t.name, to, Some(2))?;
        self.master_update(
            "table",
            &t.name,
            vec![
                Value::Text("table".into()),
                Value::Text(to.into()),
                Value::Text(to.into()),
                Value::Text(t.engine.clone()),
                Value::Text(sql),
            ],
        )?;
        for idx in self
            .catalog
            .indexes_of(&t.name)
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
        {
            let isql = Self::rewrite_names(&idx.sql, &t.name, to, Some(4))?;
            self.master_update(
                "index",
                &idx.name,
                vec![
                    Value::Text("index".into()),
                    Value::Text(idx.name.clone()),
                    Value::Text(to.into()),
                    Value::Text(idx.engine.clone()),
                    Value::Text(isql),
                ],
            )?;
        }
        self.reload_catalog()?;
        Ok(Output::default())
    }

    fn rename_column(&mut self, table: &str, from: &str, to: &str) -> Result<Output> {
        let t = self.catalog.table(table)?.clone();
        if t.column(from).is_none() {
            return Err(SqlError::NoSuch {
                what: "column",
                name: from.to_string(),
            });
        }
        if t.column(to).is_some() {
            return Err(SqlError::invalid(format!("duplicate column name: {to}")));
        }
        let sql = Self::rewrite_names(&t.sql, from, to, None)?;
        self.master_update(
            "table",
            &t.name,
            vec![
                Value::Text("table".into()),
                Value::Text(t.name.clone()),
                Value::Text(t.name.clone()),
                Value::Text(t.engine.clone()),
                Value::Text(sql),
            ],
        )?;
        for idx in self
            .catalog
            .indexes_of(&t.name)
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
        {
            let isql = Self::rewrite_names(&idx.sql, from, to, None)?;
            self.master_update(
                "index",
                &idx.name,
                vec![
                    Value::Text("index".into()),
                    Value::Text(idx.name.clone()),
                    Value::Text(t.name.clone()),
                    Value::Text(idx.engine.clone()),
                    Value::Text(isql),
                ],
            )?;
        }
        self.reload_catalog()?;
        Ok(Output::default())
    }

    fn add_column(&mut self, table: &str, column: &ColumnDef, sql: &str) -> Result<Output> {
        let t = self.catalog.table(table)?.clone();
        if t.column(&column.name).is_some() {
            return Err(SqlError::invalid(format!(
                "duplicate column name: {}",
                column.name
            )));
        }
        if column.primary_key.is_some() {
            return Err(SqlError::invalid("Cannot add a PRIMARY KEY column"));
        }
        if column.unique {
            return Err(SqlError::invalid("Cannot add a UNIQUE column"));
        }
        if crate::storage::engine_of(&t.engine) == "timeseries" {
            // Its records have the fixed size chosen when the series was made.
            return Err(SqlError::invalid(format!(
                "cannot add a column to timeseries table {}: its record size is fixed",
                t.name
            )));
        }
        let scope = Scope::default();
        let default = match &column.default {
            Some(e) => self.eval(e, &Env::empty(&scope))?,
            None => Value::Null,
        };
        if column.not_null && default.is_null() {
            return Err(SqlError::invalid(
                "Cannot add a NOT NULL column with default value NULL",
            ));
        }
        let default = default.with_affinity(Affinity::of_decl(&column.decl_type));
        // The column's text: everything after ADD [COLUMN].
        let toks = tokenize(sql)?;
        let start = toks
            .iter()
            .position(|t| matches!(&t.tok, Tok::Word(w) if w.eq_ignore_ascii_case("ADD")))
            .map(|i| {
                if matches!(&toks[i + 1].tok, Tok::Word(w) if w.eq_ignore_ascii_case("COLUMN")) {
                    i + 2
                } else {
                    i + 1
                }
            })
            .and_then(|i| toks.get(i))
            .map_or(sql.len(), |t| t.at);
        let coltext = sql[start..].trim();
        let close = column_list_end(&t.sql)?;
        let new_sql = format!(
            "{}, {}{}",
            t.sql[..close].trim_end(),
            coltext,
            &t.sql[close..]
        );
        // A new engine table with the extra column, filled from the old one (same engine).
        let lsm = crate::storage::engine_of(&t.engine) == "lsm";
        let engine = self.catalog.engine_name(if lsm { "l" } else { "t" });
        let parsed = crate::parser::parse(&new_sql)?;
        let Some(Stmt::CreateTable(ct)) = parsed.into_iter().next().map(|p| p.stmt) else {
            return Err(SqlError::invalid("ALTER TABLE produced no definition"));
        };
        let def = table_def(&ct, &engine, &new_sql)?;
        let cols: Vec<ColumnSpec> = def
            .columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                decl_type: c.decl_type.clone(),
            })
            .collect();
        self.storage.create_table(&engine, &cols)?;
        self.note_undo(|| Undo::CreatedTable(engine.clone()));
        for (rowid, mut row) in self
            .storage
            .scan(&t.engine, Bound::Unbounded, Bound::Unbounded)?
        {
            row.push(default.clone());
            self.storage.insert(&engine, rowid, &row)?;
        }
        for u in &def.uniques {
            if u.index.is_none() {
                self.storage
                    .create_unique_index(&u.engine, &engine, &u.columns)?;
            }
        }
        for idx in self
            .catalog
            .indexes_of(&t.name)
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
        {
            let ie = self.catalog.engine_name(if lsm { "li" } else { "i" });
            if idx.unique {
                self.storage
                    .create_unique_index(&ie, &engine, &idx.columns)?;
            } else {
                self.storage.create_index(&ie, &engine, &idx.columns)?;
            }
            self.master_update(
                "index",
                &idx.name,
                vec![
                    Value::Text("index".into()),
                    Value::Text(idx.name.clone()),
                    Value::Text(t.name.clone()),
                    Value::Text(ie),
                    Value::Text(idx.sql.clone()),
                ],
            )?;
        }
        self.storage.drop_table(&t.engine)?;
        self.master_update(
            "table",
            &t.name,
            vec![
                Value::Text("table".into()),
                Value::Text(t.name.clone()),
                Value::Text(t.name.clone()),
                Value::Text(engine),
                Value::Text(new_sql),
            ],
        )?;
        self.reload_catalog()?;
        Ok(Output::default())
    }

    // ----- DML ---------------------------------------------------------------------------

    fn table_for_write(&mut self, name: &str) -> Result<Rc<TableDef>> {
        let k = lower(name);
        if let Some(t) = self.write_defs.get(&*k) {
            return Ok(t.clone());
        }
        match self.catalog.tables.get(&*k) {
            Some(t) => {
                let t = Rc::new(t.clone());
                self.write_defs.insert(k.into_owned(), t.clone());
                Ok(t)
            }
            None if self.catalog.views.contains_key(&key(name)) => Err(SqlError::invalid(format!(
                "cannot modify {name} because it is a view"
            ))),
            None if key(name) == "sqlite_master" || key(name) == "sqlite_schema" => Err(
                SqlError::invalid(format!("table {name} may not be modified")),
            ),
            None => Err(SqlError::NoSuch {
                what: "table",
                name: name.to_string(),
            }),
        }
    }

    /// Whether the engine enforces the table's UNIQUE constraint itself: the table has one
    /// (a second would leave which is reported first to the engine's order), and its index
    /// was made by [`Storage::create_unique_index`] on an engine that does so.
    fn engine_checks_unique(&mut self, t: &TableDef) -> Result<bool> {
        let [u] = &t.uniques[..] else {
            return Ok(false);
        };
        let name = lower(&t.name);
        if let Some(&b) = self.engine_unique.get(&*name) {
            return Ok(b);
        }
        let b = self.storage.enforces_unique(&u.engine)?;
        self.engine_unique.insert(name.into_owned(), b);
        Ok(b)
    }

    /// The error for a row whose rowid another row has.
    fn rowid_error(t: &TableDef) -> SqlError {
        let col = t
            .ipk
            .map_or("rowid".to_string(), |i| t.columns[i].name.clone());
        SqlError::Constraint(format!("UNIQUE constraint failed: {}.{}", t.name, col))
    }

    fn unique_error(&self, t: &TableDef, cols: &[usize]) -> SqlError {
        let names: Vec<String> = cols
            .iter()
            .map(|&c| format!("{}.{}", t.name, t.columns[c].name))
            .collect();
        SqlError::Constraint(format!("UNIQUE constraint failed: {}", names.join(", ")))
    }

    /// [`table_scope`](Self::table_scope) of a table under its own name, made once per
    /// schema (kept with the planner's table definitions, and cleared with them).
    fn own_scope(&mut self, t: &TableDef) -> Rc<Scope> {
        self.leaf_def(t, None).scope.clone()
    }

    /// The [`LeafDef`] of a table under an alias, made on first use.
    fn leaf_def(&mut self, t: &TableDef, alias: Option<&str>) -> LeafDef {
        let a = alias.unwrap_or("");
        let name = lower(&t.name);
        if let Some(d) = self
            .leaf_defs
            .get(&*name)
            .and_then(|defs| defs.iter().find(|d| d.alias.eq_ignore_ascii_case(a)))
        {
            return d.clone();
        }
        let table = Rc::new(t.clone());
        let scope = Rc::new(Self::table_scope(&table, alias.unwrap_or(&t.name)));
        let label: Rc<str> = match alias {
            Some(a) => format!("{} AS {a}", t.name).into(),
            None => t.name.as_str().into(),
        };
        let def = LeafDef {
            alias: key(a).into(),
            table,
            scope,
            label,
        };
        self.leaf_defs
            .entry(name.into_owned())
            .or_default()
            .push(def.clone());
        def
    }

    /// The scope of a table's rows: its columns and, last, the hidden rowid.
    fn table_scope(t: &TableDef, alias: &str) -> Scope {
        let q = Some(key(alias));
        let mut cols: Vec<Col> = t
            .columns
            .iter()
            .map(|c| Col {
                table: q.clone(),
                name: c.name.clone(),
                aff: Some(c.affinity),
                hidden: false,
                rowid: false,
            })
            .collect();
        cols.push(Col {
            table: q,
            name: "rowid".into(),
            aff: Some(Affinity::Integer),
            hidden: true,
            rowid: true,
        });
        Scope::new(cols)
    }

    /// Checks NOT NULL and CHECK; `Ok(false)` means the row is to be skipped (OR IGNORE).
    fn check_row(
        &mut self,
        t: &TableDef,
        row: &mut [Value],
        rowid: i64,
        conflict: Conflict,
    ) -> Result<bool> {
        for (i, c) in t.columns.iter().enumerate() {
            if c.not_null && row[i].is_null() && Some(i) != t.ipk {
                match conflict {
                    Conflict::Ignore => return Ok(false),
                    Conflict::Replace if c.default.is_some() => {
                        let scope = Scope::default();
                        let d = c.default.clone().unwrap_or(Expr::Lit(Value::Null));
                        row[i] = self
                            .eval(&d, &Env::empty(&scope))?
                            .with_affinity(c.affinity);
                        if row[i].is_null() {
                            return Err(SqlError::Constraint(format!(
                                "NOT NULL constraint failed: {}.{}",
                                t.name, c.name
                            )));
                        }
                    }
                    _ => {
                        return Err(SqlError::Constraint(format!(
                            "NOT NULL constraint failed: {}.{}",
                            t.name, c.name
                        )));
                    }
                }
            }
        }
        if !t.checks.is_empty() {
            let scope = self.own_scope(t);
            let mut full = row.to_vec();
            full.push(Value::Integer(rowid));
            for (chk, text) in &t.checks {
                let v = self.eval(
                    chk,
                    &Env {
                        scope: &scope,
                        row: &full,
                        outer: None,
                        group: None,
                    },
                )?;
                if v.truth() == Some(false) {
                    if conflict == Conflict::Ignore {
                        return Ok(false);
                    }
                    return Err(SqlError::Constraint(format!(
                        "CHECK constraint failed: {text}"
                    )));
                }
            }
        }
        Ok(true)
    }

    /// Rowids of other rows that the row would collide with (rowid or a unique constraint),
    /// or an error if `conflict` says to fail; `Ok(None)` means skip the row (OR IGNORE).
    ///
    /// `fresh`: `rowid` came from [`next_rowid`](Self::next_rowid), so no row has it.
    /// `old`: the row an UPDATE replaces (`old_rowid` its rowid); a UNIQUE constraint whose
    /// columns keep their values cannot be broken by it (the old row held them alone), so it
    /// is not probed.
    #[allow(clippy::too_many_arguments)]
    fn conflicts(
        &mut self,
        t: &TableDef,
        row: &[Value],
        rowid: i64,
        fresh: bool,
        old: Option<(i64, &[Value])>,
        conflict: Conflict,
    ) -> Result<Option<Vec<i64>>> {
        let mut victims = Vec::new();
        let old_rowid = old.map(|(r, _)| r);
        if !fresh && old_rowid != Some(rowid) && self.storage.contains(&t.engine, rowid)? {
            match conflict {
                Conflict::Ignore => return Ok(None),
                Conflict::Replace => victims.push(rowid),
                _ => return Err(Self::rowid_error(t)),
            }
        }
        for u in &t.uniques {
            if let Some((_, before)) = old {
                if u.columns.iter().all(|&c| before.get(c) == Some(&row[c])) {
                    continue;
                }
            }
            let vals: Vec<Value> = u.columns.iter().map(|&c| row[c].clone()).collect();
            if vals.iter().any(Value::is_null) {
                continue;
            }
            // The index's equality is SQLite's uniqueness (values compared without affinity).
            for r in self.storage.index_rowids(&u.engine, &vals)? {
                if Some(r) == old_rowid || r == rowid && old_rowid.is_none() && victims.contains(&r)
                {
                    continue;
                }
                match conflict {
                    Conflict::Ignore => return Ok(None),
                    Conflict::Replace => {
                        if !victims.contains(&r) {
                            victims.push(r);
                        }
                    }
                    _ => {
                        if u.primary {
                            let names: Vec<String> = u
                                .columns
                                .iter()
                                .map(|&c| format!("{}.{}", t.name, t.columns[c].name))
                                .collect();
                            return Err(SqlError::Constraint(format!(
                                "UNIQUE constraint failed: {}",
                                names.join(", ")
                            )));
                        }
                        return Err(self.unique_error(t, &u.columns));
                    }
                }
            }
        }
        Ok(Some(victims))
    }

    fn delete_row(&mut self, t: &TableDef, rowid: i64) -> Result<bool> {
        if let Some(old) = self.storage.get(&t.engine, rowid)? {
            self.storage.delete(&t.engine, rowid)?;
            self.note_undo(|| Undo::Deleted(t.engine.clone(), rowid, old));
            return Ok(true);
        }
        Ok(false)
    }

    /// The rowid for a new row: one more than the largest (which may be negative), or, once
    /// the largest possible is taken, a random unused one — as SQLite does.
    fn next_rowid(&mut self, t: &TableDef) -> Result<i64> {
        match self.storage.max_rowid(&t.engine)? {
            None => Ok(1),
            Some(i64::MAX) => {
                for _ in 0..100 {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    let cand = (self.rng >> 1) as i64;
                    if cand > 0 && self.storage.get(&t.engine, cand)?.is_none() {
                        return Ok(cand);
                    }
                }
                Err(SqlError::invalid(
                    "database or disk is full (no unused rowid found)",
                ))
            }
            Some(m) => Ok(m + 1),
        }
    }

    fn insert(&mut self, ins: &Insert) -> Result<Output> {
        let t = self.table_for_write(&ins.table)?;
        // Which table column each source column goes to (None: the rowid); without a column
        // list, source column i goes to table column i (and `targets` stays empty).
        let mut targets: Vec<Option<usize>> = Vec::new();
        let in_order = ins.columns.is_empty();
        if !in_order {
            for c in &ins.columns {
                match t.column(c) {
                    Some(i) => targets.push(Some(i)),
                    None if ["rowid", "oid", "_rowid_"]
                        .iter()
                        .any(|r| r.eq_ignore_ascii_case(c)) =>
                    {
                        targets.push(None)
                    }
                    None => {
                        return Err(SqlError::invalid(format!(
                            "table {} has no column named {c}",
                            t.name
                        )));
                    }
                }
            }
        }
        let source: Vec<Vec<Value>> = match &ins.source {
            InsertSource::Defaults => vec![Vec::new()],
            InsertSource::Select(s) => {
                let rows = match s.as_ref() {
                    // Plain VALUES rows: evaluated in place, without a query's machinery.
                    Select {
                        first: SelectCore::Values(vals),
                        compounds,
                        order_by,
                        limit: None,
                        offset: None,
                    } if compounds.is_empty() && order_by.is_empty() => {
                        let scope = Scope::default();
                        let env = Env::empty(&scope);
                        let mut out = Vec::with_capacity(vals.len());
                        for r in vals {
                            let mut row = Vec::with_capacity(r.len());
                            for e in r {
                                row.push(self.eval(e, &env)?);
                            }
                            out.push(row);
                        }
                        out
                    }
                    _ => self.query(s, None)?.1,
                };
                let width = if in_order {
                    t.columns.len()
                } else {
                    targets.len()
                };
                if let Some(r) = rows.first() {
                    if r.len() != width {
                        return Err(if ins.columns.is_empty() {
                            SqlError::invalid(format!(
                                "table {} has {} columns but {} values were supplied",
                                t.name,
                                t.columns.len(),
                                r.len()
                            ))
                        } else {
                            SqlError::invalid(format!("{} values for {} columns", r.len(), width))
                        });
                    }
                }
                rows
            }
        };
        let empty = Scope::default();
        let mut count = 0u64;
        for src in source {
            let mut rowid_val: Option<Value> = None;
            // A full row in table order is the row; otherwise values go to their columns and
            // the others get their defaults.
            let (mut row, given) = if in_order && src.len() == t.columns.len() {
                (src, None)
            } else {
                let mut row = vec![Value::Null; t.columns.len()];
                let mut given = vec![false; t.columns.len()];
                let order = (0..t.columns.len()).map(Some);
                let targets = targets.iter().copied().chain(order.filter(|_| in_order));
                for (v, target) in src.into_iter().zip(targets) {
                    match target {
                        Some(i) => {
                            row[i] = v;
                            given[i] = true;
                        }
                        None => rowid_val = Some(v),
                    }
                }
                (row, Some(given))
            };
            for (i, c) in t.columns.iter().enumerate() {
                if given.as_ref().is_some_and(|g| !g[i]) {
                    if let Some(d) = &c.default {
                        row[i] = self.eval(d, &Env::empty(&empty))?;
                    }
                }
                row[i] = core::mem::replace(&mut row[i], Value::Null).with_affinity(c.affinity);
            }
            if let Some(i) = t.ipk {
                if !row[i].is_null() {
                    rowid_val = Some(row[i].clone());
                }
            }
            let fresh = matches!(rowid_val, None | Some(Value::Null));
            let rowid = match rowid_val {
                None | Some(Value::Null) => self.next_rowid(&t)?,
                Some(v) => match as_rowid(&v) {
                    Some(r) => r,
                    None => return Err(SqlError::invalid("datatype mismatch")),
                },
            };
            if let Some(i) = t.ipk {
                row[i] = Value::Integer(rowid);
            }
            if !self.check_row(&t, &mut row, rowid, ins.conflict)? {
                continue;
            }
            // A new rowid cannot clash; the one UNIQUE constraint the engine enforces itself
            // is left to it (its refusal is reported as the probe would report it).
            let engine_checks = fresh
                && matches!(ins.conflict, Conflict::Abort | Conflict::Fail)
                && self.engine_checks_unique(&t)?;
            // A rowid of the statement's own, on a table with no UNIQUE constraint to probe
            // before it, where a clash is an error: the engine's insert looks the rowid up
            // and says whether it was free, so nothing probes for it first.
            let rowid_free = !fresh
                && t.uniques.is_empty()
                && matches!(
                    ins.conflict,
                    Conflict::Abort | Conflict::Fail | Conflict::Rollback
                );
            if rowid_free {
                if !self.storage.insert_new(&t.engine, rowid, &row)? {
                    return Err(Self::rowid_error(&t));
                }
                self.note_undo(|| Undo::Inserted(t.engine.clone(), rowid));
                self.last_rowid = rowid;
                count += 1;
                continue;
            }
            if !engine_checks {
                let Some(victims) = self.conflicts(&t, &row, rowid, fresh, None, ins.conflict)?
                else {
                    continue;
                };
                for v in victims {
                    self.delete_row(&t, v)?;
                }
            }
            self.storage
                .insert(&t.engine, rowid, &row)
                .map_err(|e| match e {
                    SqlError::Unique(ix) => match t.uniques.iter().find(|u| u.engine == ix) {
                        Some(u) => self.unique_error(&t, &u.columns),
                        None => SqlError::Unique(ix),
                    },
                    e => e,
                })?;
            self.note_undo(|| Undo::Inserted(t.engine.clone(), rowid));
            self.last_rowid = rowid;
            count += 1;
        }
        self.changes = count;
        self.total_changes += count;
        Ok(Output::default())
    }

    /// The rows of a table a WHERE clause selects, through the planner: (rowid, values).
    /// Without `values` the caller needs only the rowids: a row found by its rowid alone
    /// then comes with no values and unverified — it may not be there, and the caller
    /// finds out, from its write where it can ([`Storage::delete`],
    /// [`Storage::update_existing`]), so the engine looks it up once (the others come
    /// whole, and are there).
    fn matching_rows<'a>(
        &mut self,
        t: &Rc<TableDef>,
        filter: Option<&'a Expr>,
        values: bool,
    ) -> Result<Vec<(i64, Vec<Value>)>> {
        // The WHERE clause's conjuncts, borrowed (made only where a plan or a walk needs them).
        let conj_of = |filter: Option<&'a Expr>| {
            let mut conj = Vec::new();
            if let Some(f) = filter {
                conjuncts(f, &mut conj);
            }
            conj
        };
        let rows = match filter {
            // EXPLAIN, and a whole-table change (no WHERE to key a plan by), take `join`.
            Some(f) if self.explain.is_none() => {
                let plan = self.write_plan(t, f);
                match &*plan.access {
                    // The rowid is all the WHERE asks: the write finds out whether the row
                    // is there.
                    Access::RowidEq(e)
                        if !values
                            && !plan.check.contains(&true)
                            && !plan.constant.contains(&true) =>
                    {
                        let none = Scope::default();
                        return Ok(match self.rowid_key(e, &Env::empty(&none))? {
                            Some(id) => vec![(id, Vec::new())],
                            None => Vec::new(),
                        });
                    }
                    _ => {
                        let scope = self.own_scope(t);
                        self.leaf_rows(t, &scope, &plan, &conj_of(filter))?
                    }
                }
            }
            _ => {
                let key = filter.map_or(0, |f| f as *const Expr as usize);
                let leaf = self.write_leaf(t);
                self.join(&[leaf], &conj_of(filter), None, key, None)?.1
            }
        };
        Ok(rows
            .into_iter()
            .map(|mut r| {
                let rowid = match r.pop() {
                    Some(Value::Integer(i)) => i,
                    _ => 0,
                };
                (rowid, r)
            })
            .collect())
    }

    /// The [`LeafPlan`] of an UPDATE's or DELETE's WHERE `f` on table `t`, made on first
    /// use.
    fn write_plan(&mut self, t: &Rc<TableDef>, f: &Expr) -> Rc<LeafPlan> {
        let key = (self.stmt_id, f as *const Expr as usize);
        if let Some(p) = self.leaf_plans.get(&key) {
            return p.clone();
        }
        let leaves = [self.write_leaf(t)];
        let mut conj = Vec::new();
        conjuncts(f, &mut conj);
        let p = Rc::new(self.leaf_plan(&leaves, &conj));
        self.leaf_plans.insert(key, p.clone());
        p
    }

    /// The values an UPDATE's WHERE fixes table `t`'s one UNIQUE constraint to (in its
    /// columns' order), if the statement is of the shape [`update_by_key`](Self::update_by_key)
    /// runs: the SET leaves out only that constraint's columns (and the INTEGER PRIMARY
    /// KEY) and gives the others values from no column, and the WHERE is only `column =
    /// value` conjuncts, with the probe exact (see `eq_prefix`), on just those columns.
    fn by_key(&mut self, t: &Rc<TableDef>, up: &Update, plan: &SetPlan) -> Option<Vec<Expr>> {
        let f = up.filter.as_ref()?;
        let [u] = &t.uniques[..] else {
            return None;
        };
        let kept_or_set = (0..t.columns.len())
            .all(|i| plan.set_cols[i] || t.ipk == Some(i) || u.columns.contains(&i));
        if !plan.reads_row
            || !kept_or_set
            || plan
                .targets
                .iter()
                .any(|c| c.is_none_or(|c| u.columns.contains(&c) || t.ipk == Some(c)))
            || !up.sets.iter().all(|(_, e)| column_free(e))
        {
            return None;
        }
        let leaf = self.write_leaf(t);
        let mut conj = Vec::new();
        conjuncts(f, &mut conj);
        let eqs = self.eq_prefix(&leaf, t, &conj)?;
        if eqs.len() != u.columns.len() {
            return None;
        }
        u.columns
            .iter()
            .map(|c| eqs.get(c).map(|e| (*e).clone()))
            .collect()
    }

    /// Table `t` as the one FROM item of an UPDATE or DELETE.
    fn write_leaf(&mut self, t: &Rc<TableDef>) -> Leaf {
        let d = self.leaf_def(t, None);
        Leaf {
            scope: d.scope,
            src: LeafSrc::Table(t.clone()),
            kind: JoinKind::Inner,
            on: Vec::new(),
            label: d.label,
        }
    }

    /// The [`SetPlan`] of an UPDATE on table `t`, made on first use.
    fn set_plan(&mut self, up: &Update, t: &Rc<TableDef>) -> Result<Rc<SetPlan>> {
        if let Some(p) = self.set_plans.get(&self.stmt_id) {
            return Ok(p.clone());
        }
        let mut targets = Vec::with_capacity(up.sets.len());
        for (c, _) in &up.sets {
            match t.column(c) {
                Some(i) => targets.push(Some(i)),
                None if ["rowid", "oid", "_rowid_"]
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(c)) =>
                {
                    targets.push(None)
                }
                None => {
                    return Err(SqlError::NoSuch {
                        what: "column",
                        name: c.clone(),
                    });
                }
            }
        }
        let set_cols: Vec<bool> = (0..t.columns.len())
            .map(|i| targets.contains(&Some(i)))
            .collect();
        let reads_row = targets
            .iter()
            .zip(&up.sets)
            .any(|(c, (_, e))| c.is_none() || !column_free(e))
            || set_cols
                .iter()
                .enumerate()
                .any(|(i, set)| !set && t.ipk != Some(i));
        let mut p = SetPlan {
            targets,
            set_cols,
            reads_row,
            by_key: None,
        };
        p.by_key = self.by_key(t, up, &p);
        let p = Rc::new(p);
        self.set_plans.insert(self.stmt_id, p.clone());
        Ok(p)
    }

    fn update(&mut self, up: &Update) -> Result<Output> {
        let t = self.table_for_write(&up.table)?;
        let plan = self.set_plan(up, &t)?;
        if let Some(count) = self.update_by_key(&t, &plan, up)? {
            self.changes = count;
            self.total_changes += count;
            return Ok(Output::default());
        }
        // A statement outside a transaction that gives every column (the INTEGER PRIMARY
        // KEY aside) a value of its own, from no column, reads no old row: no undo keeps it
        // (see `note_undo`) and the uniqueness checks then probe every UNIQUE constraint.
        let values = self.explicit || plan.reads_row;
        let targets = self.matching_rows(&t, up.filter.as_ref(), values)?;
        // Rows found by rowid alone come without values (see `matching_rows`), and the
        // assignments then read no column: they need no scope.
        let own = if values {
            Some(self.own_scope(&t))
        } else {
            None
        };
        let none = Scope::default();
        let scope = own.as_deref().unwrap_or(&none);
        let mut count = 0;
        let mut removed: Vec<i64> = Vec::new();
        for (rowid, mut old) in targets {
            if removed.contains(&rowid) {
                continue;
            }
            // A row found by its rowid alone may not be there (see `matching_rows`): an
            // error in making its new row counts only if it is.
            let found = !old.is_empty();
            let (mut row, new_rowid) = match self.new_row(&t, &plan, up, scope, &mut old, rowid) {
                Ok(made) => made,
                Err(e) => {
                    if !found && !self.storage.contains(&t.engine, rowid)? {
                        continue;
                    }
                    return Err(e);
                }
            };
            // Such a row's update finds out whether it is there, unless something before
            // it could fail or touch another row on the row's behalf: then the row is
            // looked up first.
            let unverified = !found;
            let blind = unverified && new_rowid == rowid && t.uniques.is_empty();
            if unverified && !blind && !self.storage.contains(&t.engine, rowid)? {
                continue;
            }
            let checked = self.check_row(&t, &mut row, new_rowid, up.conflict);
            if blind && checked.is_err() && !self.storage.contains(&t.engine, rowid)? {
                continue;
            }
            if !checked? {
                continue;
            }
            if blind {
                // No UNIQUE constraint and the rowid kept: nothing to probe (`conflicts`).
                if self.storage.update_existing(&t.engine, rowid, &row)? {
                    count += 1;
                }
                continue;
            }
            let Some(victims) =
                self.conflicts(&t, &row, new_rowid, false, Some((rowid, &old)), up.conflict)?
            else {
                continue;
            };
            for v in victims {
                if v != rowid && self.delete_row(&t, v)? {
                    removed.push(v);
                }
            }
            if new_rowid != rowid {
                self.storage.delete(&t.engine, rowid)?;
                self.note_undo(|| Undo::Deleted(t.engine.clone(), rowid, old));
                self.storage.insert(&t.engine, new_rowid, &row)?;
                self.note_undo(|| Undo::Inserted(t.engine.clone(), new_rowid));
            } else {
                self.storage.update(&t.engine, rowid, &row)?;
                self.note_undo(|| Undo::Updated(t.engine.clone(), rowid, old));
            }
            count += 1;
        }
        self.changes = count;
        self.total_changes += count;
        Ok(Output::default())
    }

    /// Runs an UPDATE that needs no old row though its SET leaves columns out, or returns
    /// `None` (nothing done) for the general path: one outside a transaction (no undo keeps
    /// the old row) on a table whose one UNIQUE constraint (or PRIMARY KEY) the WHERE fixes
    /// whole — `k = ?`, answered by the constraint's index alone — to TEXT or BLOB values,
    /// and whose SET gives every other column (the INTEGER PRIMARY KEY aside) a value from
    /// no column. The row it finds then holds exactly those values in those columns (equal
    /// text or blobs are the same bytes and type), which the SET does not change, so the new
    /// row is made without reading the old one and no uniqueness check can fail: the
    /// index gives the rowid and the row is written over (sqlite-bench's and db_bench's
    /// `UPDATE t SET v = ? WHERE k = ?`).
    fn update_by_key(
        &mut self,
        t: &Rc<TableDef>,
        plan: &SetPlan,
        up: &Update,
    ) -> Result<Option<u64>> {
        let (Some(exprs), Some(u)) = (plan.by_key.as_ref(), t.uniques.first()) else {
            return Ok(None);
        };
        if self.explicit || self.explain.is_some() {
            return Ok(None);
        }
        let none = Scope::default();
        let mut vals = Vec::with_capacity(exprs.len());
        for (&c, e) in u.columns.iter().zip(exprs) {
            // Constant: the general path may evaluate it again.
            match probe(self.eval(e, &Env::empty(&none))?, t.columns[c].affinity) {
                v @ (Value::Text(_) | Value::Blob(_)) => vals.push(v),
                _ => return Ok(None),
            }
        }
        let mut count = 0;
        for rowid in self.storage.index_rowids(&u.engine, &vals)? {
            let (mut row, _) = self.new_row(t, plan, up, &none, &mut Vec::new(), rowid)?;
            for (&c, v) in u.columns.iter().zip(&vals) {
                row[c] = v.clone();
            }
            if !self.check_row(t, &mut row, rowid, up.conflict)? {
                continue;
            }
            self.storage.update(&t.engine, rowid, &row)?;
            count += 1;
        }
        Ok(Some(count))
    }

    /// The new row an UPDATE makes of `old` (the table's columns; empty for a row found by
    /// its rowid alone, whose assignments read no column) and its rowid.
    fn new_row(
        &mut self,
        t: &TableDef,
        plan: &SetPlan,
        up: &Update,
        scope: &Scope,
        old: &mut Vec<Value>,
        rowid: i64,
    ) -> Result<(Vec<Value>, i64)> {
        let set_cols = &plan.set_cols;
        let mut row: Vec<Value> = (0..t.columns.len())
            .map(|i| match (set_cols[i], old.get(i)) {
                (false, Some(v)) => v.clone(),
                _ => Value::Null,
            })
            .collect();
        let mut new_rowid = rowid;
        // The SET expressions see the old row with its rowid after the columns.
        let found = !old.is_empty();
        if found {
            old.push(Value::Integer(rowid));
        }
        let mut set = || -> Result<()> {
            for (target, (_, e)) in plan.targets.iter().zip(&up.sets) {
                let v = self.eval(
                    e,
                    &Env {
                        scope,
                        row: old,
                        outer: None,
                        group: None,
                    },
                )?;
                match target {
                    Some(i) => row[*i] = v.with_affinity(t.columns[*i].affinity),
                    None => {
                        new_rowid =
                            as_rowid(&v).ok_or_else(|| SqlError::invalid("datatype mismatch"))?
                    }
                }
            }
            Ok(())
        };
        let r = set();
        if found {
            old.pop();
        }
        r?;
        if let Some(i) = t.ipk {
            if set_cols[i] {
                new_rowid = match &row[i] {
                    Value::Null => self.next_rowid(t)?,
                    v => as_rowid(v).ok_or_else(|| SqlError::invalid("datatype mismatch"))?,
                };
            }
            row[i] = Value::Integer(new_rowid);
        }
        Ok((row, new_rowid))
    }

    fn delete(&mut self, d: &Delete) -> Result<Output> {
        let t = self.table_for_write(&d.table)?;
        // Outside a transaction no old row is kept (see `note_undo`): rowids will do.
        let values = self.explicit;
        let targets = self.matching_rows(&t, d.filter.as_ref(), values)?;
        let mut count = 0;
        for (rowid, old) in targets {
            if self.storage.delete(&t.engine, rowid)? {
                self.note_undo(|| Undo::Deleted(t.engine.clone(), rowid, old));
                count += 1;
            }
        }
        self.changes = count;
        self.total_changes += count;
        Ok(Output::default())
    }

    // ----- queries -----------------------------------------------------------------------

    /// Runs a query: column names and rows.
    pub(crate) fn query(
        &mut self,
        s: &Select,
        outer: Option<&Env<'_>>,
    ) -> Result<(Vec<String>, Vec<Vec<Value>>)> {
        let (n, r, _) = self.query_typed(s, outer)?;
        Ok((n, r))
    }

    /// Runs a top-level SELECT by its [`SimpleSelect`] if it has one (`None`: it takes the
    /// general path): a full scan or a rowid range is started as a [`Stream`], other access
    /// paths are read whole.
    fn simple_select(&mut self, s: &Select) -> Result<Option<Started>> {
        if !s.compounds.is_empty()
            || !s.order_by.is_empty()
            || s.limit.is_some()
            || s.offset.is_some()
            || self.explain.is_some()
        {
            return Ok(None);
        }
        let key = (self.stmt_id, &s.first as *const SelectCore as usize);
        let plan = match self.simple.get(&key) {
            Some(p) => p.clone(),
            None => {
                let p = self.simple_plan(&s.first)?.map(Rc::new);
                self.simple.insert(key, p.clone());
                p
            }
        };
        let (Some(p), SelectCore::Select { filter, .. }) = (plan, &s.first) else {
            return Ok(None);
        };
        let LeafSrc::Table(t) = &p.leaf.src else {
            return Ok(None);
        };
        // A WHERE of one term (the usual point query) needs no vector of its conjuncts.
        let mut many: Vec<&Expr> = Vec::new();
        let one: [&Expr; 1];
        let conj: &[&Expr] = match filter {
            None => &[],
            Some(w) if !matches!(w, Expr::Binary(BinOp::And, ..)) => {
                one = [w];
                &one
            }
            Some(w) => {
                conjuncts(w, &mut many);
                &many
            }
        };
        if matches!(*p.plan.access, Access::Full | Access::RowidRange(..)) {
            return Ok(Some(Started::Stream(Box::new(self.stream(&p, conj)?))));
        }
        let mut rows = self.leaf_rows(t, &p.leaf.scope, &p.plan, conj)?;
        // Each row becomes its result where it lies (no new vectors) where the positions
        // allow it.
        let width = p.cols.len();
        for r in &mut rows {
            if p.prefix {
                r.truncate(width);
            } else if p.ascending && p.cols.last().is_some_and(|&l| l < r.len()) {
                // Position `k` takes the value at `cols[k] >= k`; nothing it displaces is
                // read later (later positions come from further right).
                for (k, &i) in p.cols.iter().enumerate() {
                    r.swap(k, i);
                }
                r.truncate(width);
            } else if p.distinct_cols {
                *r = p
                    .cols
                    .iter()
                    .map(|&i| {
                        r.get_mut(i)
                            .map_or(Value::Null, |v| core::mem::replace(v, Value::Null))
                    })
                    .collect();
            } else {
                *r = p
                    .cols
                    .iter()
                    .map(|&i| r.get(i).cloned().unwrap_or(Value::Null))
                    .collect();
            }
        }
        Ok(Some(Started::Done(Output {
            columns: p.names.clone(),
            rows,
        })))
    }

    /// Starts a [`Stream`] of a short path over a full scan or a rowid range: decides the
    /// WHERE's constant conjuncts and the range's bounds (as [`leaf_rows`](Self::leaf_rows)
    /// and [`fetch`](Self::fetch) do, in the same order), reading no row.
    fn stream(&mut self, p: &Rc<SimpleSelect>, conj: &[&Expr]) -> Result<Stream> {
        if conj.len() != p.plan.constant.len() {
            return Err(SqlError::invalid(
                "internal: a cached plan does not fit its WHERE",
            ));
        }
        let none = Scope::default();
        let env = Env::empty(&none);
        let mut bounds = Some((Bound::Unbounded, Bound::Unbounded, true));
        for (c, _) in conj.iter().zip(&p.plan.constant).filter(|(_, k)| **k) {
            if self.cond(c, &env)? != Some(true) {
                bounds = None;
                break;
            }
        }
        if bounds.is_some() {
            bounds = match &*p.plan.access {
                Access::Full => bounds,
                Access::RowidRange(lo, hi) => self.rowid_bounds(lo, hi, &env)?,
                _ => {
                    return Err(SqlError::invalid(
                        "internal: a streamed query without a rowid range",
                    ));
                }
            };
        }
        let (lo, hi, exact, done) = match bounds {
            Some((lo, hi, exact)) => (lo, hi, exact, false),
            None => (Bound::Unbounded, Bound::Unbounded, false, true),
        };
        Ok(Stream {
            plan: p.clone(),
            stmt_id: self.stmt_id,
            params: core::mem::take(&mut self.params),
            lo,
            hi,
            exact,
            done,
            schema: self.schema,
            chunk: FIRST_CHUNK_ROWS,
            spare: Vec::new(),
        })
    }

    /// Reads the next rows of a [`Stream`] of the statement `p` into `out`: returns `n`,
    /// the result rows being the first [`width`](Stream::width) values of `out[..n]`, in
    /// rowid order; 0 only when the query has no more rows. The rows' vectors (and, on
    /// engines that can, their text and blob buffers) are reused from what `out` holds, so
    /// a caller that hands the same `out` back each time reads a scan without allocating
    /// per row. An error ends the query.
    pub fn next_chunk(
        &mut self,
        p: &Parsed,
        s: &mut Stream,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<usize> {
        if s.done {
            return Ok(0);
        }
        if p.id != s.stmt_id {
            s.done = true;
            return Err(SqlError::invalid(
                "internal: a query's rows asked for with another statement",
            ));
        }
        core::mem::swap(&mut self.params, &mut s.params);
        let stmt_id = core::mem::replace(&mut self.stmt_id, s.stmt_id);
        let r = self.read_chunk(p, s, out);
        self.stmt_id = stmt_id;
        core::mem::swap(&mut self.params, &mut s.params);
        if r.is_err() {
            s.done = true;
        }
        r
    }

    /// [`next_chunk`](Self::next_chunk) with the statement's parameters in place.
    fn read_chunk(
        &mut self,
        p: &Parsed,
        s: &mut Stream,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<usize> {
        let plan = s.plan.clone();
        let LeafSrc::Table(t) = &plan.leaf.src else {
            return Err(SqlError::invalid("internal: a streamed query of no table"));
        };
        if s.schema != self.schema {
            // The plans were forgotten since the last chunk: go on only while the table's
            // definition is the one planned for.
            match self.catalog.tables.get(&*lower(&t.name)) {
                Some(now) if now.engine == t.engine && now.sql == t.sql => s.schema = self.schema,
                Some(_) => {
                    return Err(SqlError::invalid(format!(
                        "table {} was changed while a query was reading it",
                        t.name
                    )));
                }
                None => {
                    return Err(SqlError::invalid(format!(
                        "table {} was dropped while a query was reading it",
                        t.name
                    )));
                }
            }
        }
        let internal = || SqlError::invalid("internal: a streamed statement that is not its query");
        let Stmt::Select(sel) = &p.stmt else {
            return Err(internal());
        };
        let SelectCore::Select { filter, .. } = &sel.first else {
            return Err(internal());
        };
        let mut conj: Vec<&Expr> = Vec::new();
        if let Some(w) = filter {
            conjuncts(w, &mut conj);
        }
        if conj.len() != plan.plan.check.len() || conj.len() != plan.plan.ranged.len() {
            return Err(internal());
        }
        // The conjuncts checked on each row: those the range does not answer.
        let checks: Vec<&Expr> = conj
            .iter()
            .zip(&plan.plan.check)
            .zip(&plan.plan.ranged)
            .filter(|((_, check), ranged)| **check && !(s.exact && **ranged))
            .map(|((c, _), _)| *c)
            .collect();
        let filtered = !checks.is_empty();
        loop {
            if s.done {
                return Ok(0);
            }
            let want = s.chunk;
            if s.chunk < CHUNK_ROWS {
                s.chunk = (s.chunk * 4).min(CHUNK_ROWS);
            }
            let (n, more) = self.storage.scan_chunk(&t.engine, s.lo, s.hi, want, out)?;
            let n = n.min(out.len());
            let rows = &mut out[..n];
            match chunk_end(&t.name, rows, s.lo)? {
                None => s.done = true,
                Some(last) => {
                    s.done = !more || last == i64::MAX;
                    s.lo = Bound::Excluded(last);
                }
            }
            // The rows that pass move to the front, in order.
            let mut kept = n;
            if filtered {
                kept = 0;
                for i in 0..n {
                    if self.passes(&checks, &plan.leaf.scope, &rows[i], None)? {
                        rows.swap(kept, i);
                        kept += 1;
                    }
                }
            }
            if !plan.prefix {
                for r in &mut rows[..kept] {
                    s.spare.clear();
                    for &i in &plan.cols {
                        s.spare.push(if plan.distinct_cols {
                            r.get_mut(i)
                                .map_or(Value::Null, |v| core::mem::replace(v, Value::Null))
                        } else {
                            r.get(i).cloned().unwrap_or(Value::Null)
                        });
                    }
                    core::mem::swap(r, &mut s.spare);
                }
            }
            if kept > 0 {
                return Ok(kept);
            }
        }
    }

    /// The [`SimpleSelect`] of a query core, if it has that shape (see there).
    fn simple_plan(&mut self, core: &SelectCore) -> Result<Option<SimpleSelect>> {
        let SelectCore::Select {
            distinct: false,
            columns,
            from: Some(FromItem::Table { name, alias }),
            filter,
            group_by,
            having: None,
        } = core
        else {
            return Ok(None);
        };
        if !group_by.is_empty() || !self.catalog.tables.contains_key(&*lower(name)) {
            return Ok(None);
        }
        let mut conj: Vec<&Expr> = Vec::new();
        if let Some(w) = filter {
            let mut nested = false;
            walk(w, &mut |x| {
                if matches!(x, Expr::Exists(..) | Expr::Subquery(_) | Expr::InSelect(..)) {
                    nested = true;
                }
            });
            if nested || has_aggregate(w) {
                return Ok(None);
            }
            conjuncts(w, &mut conj);
        }
        let leaf = self.table_leaf(name, alias.as_deref(), None)?;
        if !matches!(leaf.src, LeafSrc::Table(_)) {
            return Ok(None);
        }
        let mut cols = Vec::new();
        let mut names = Vec::new();
        for c in columns {
            match c {
                ResultCol::Star => {
                    for (i, col) in leaf.scope.cols().iter().enumerate() {
                        if !col.hidden {
                            cols.push(i);
                            names.push(col.name.clone());
                        }
                    }
                }
                ResultCol::Expr {
                    expr: e @ Expr::Column { table, name, .. },
                    alias: None,
                    text,
                } => {
                    let Ok(Some(i)) = leaf.scope.find(table.as_deref(), name) else {
                        return Ok(None);
                    };
                    cols.push(i);
                    names.push(result_name(e, &None, text));
                }
                _ => return Ok(None),
            }
        }
        if cols.is_empty() {
            return Ok(None);
        }
        let prefix = cols.iter().enumerate().all(|(k, &i)| k == i);
        let mut seen = cols.clone();
        seen.sort_unstable();
        seen.dedup();
        let distinct_cols = seen.len() == cols.len();
        let ascending = cols.windows(2).all(|w| w[0] < w[1]);
        let leaves = [leaf];
        let plan = Rc::new(self.leaf_plan(&leaves, &conj));
        let [leaf] = leaves;
        Ok(Some(SimpleSelect {
            leaf,
            plan,
            cols,
            prefix,
            distinct_cols,
            ascending,
            names: names.into(),
        }))
    }

    /// The [`LeafPlan`] of a lone FROM item under these WHERE conjuncts.
    fn leaf_plan(&mut self, leaves: &[Leaf; 1], conj: &[&Expr]) -> LeafPlan {
        self.plans_made += 1;
        let access = self.plan(leaves, 0, conj);
        let constant: Vec<bool> = conj.iter().map(|c| Self::is_constant(c)).collect();
        let mut check: Vec<bool> = constant.iter().map(|k| !k).collect();
        Self::implied(&leaves[0], &access, conj, &mut check);
        let ranged = Self::range_answered(&leaves[0], &access, conj);
        LeafPlan {
            access: Rc::new(access),
            constant,
            check,
            ranged,
        }
    }

    /// Whether `x` is the rowid of table `t` in its FROM item `leaf` (or the INTEGER PRIMARY
    /// KEY that is its alias).
    fn is_leaf_rowid(leaf: &Leaf, t: &TableDef, x: &Expr) -> bool {
        let Expr::Column { table, name, .. } = x else {
            return false;
        };
        match leaf.scope.find(table.as_deref(), name) {
            Ok(Some(i)) => leaf.scope.cols()[i].rowid || Some(i) == t.ipk,
            _ => false,
        }
    }

    /// For each conjunct, whether it is a bound of the rowid range `access` reads, so that the
    /// range answers it once its bounds are exact (see [`rowid_bounds`](Self::rowid_bounds)):
    /// `r op e` or `e op r` (`r` the rowid or its INTEGER PRIMARY KEY alias, `op` one of `<`,
    /// `<=`, `>`, `>=`) where `e` is the range's bound on that side with the same inclusion,
    /// or `r BETWEEN lo AND hi` with the range's own two bounds. As for [`implied`]
    /// (Self::implied), the comparison brings `e` to the NUMERIC affinity the bound's value
    /// went through, and an integer or a finite real bound is then compared exactly.
    fn range_answered(leaf: &Leaf, access: &Access, conj: &[&Expr]) -> Vec<bool> {
        let (Access::RowidRange(lo, hi), LeafSrc::Table(t)) = (access, &leaf.src) else {
            return vec![false; conj.len()];
        };
        let is_rowid = |x: &Expr| Self::is_leaf_rowid(leaf, t, x);
        let is = |b: &Option<(Expr, bool)>, e: &Expr, incl: bool| {
            b.as_ref().is_some_and(|(be, bi)| *bi == incl && be == e)
        };
        // `r op e`, as a bound of the range.
        let answers = |op: BinOp, e: &Expr| match op {
            BinOp::Gt => is(lo, e, false),
            BinOp::Ge => is(lo, e, true),
            BinOp::Lt => is(hi, e, false),
            BinOp::Le => is(hi, e, true),
            _ => false,
        };
        conj.iter()
            .map(|c| match c {
                Expr::Binary(op, a, b) if is_rowid(a) => answers(*op, b),
                Expr::Binary(op, a, b) if is_rowid(b) => answers(flipped(*op), a),
                Expr::Between(x, l, h, false) => is_rowid(x) && is(lo, l, true) && is(hi, h, true),
                _ => false,
            })
            .collect()
    }

    /// Marks in `check` the conjuncts the lookup `access` answers exactly, so that the rows
    /// it reads are not checked against them again (which would only evaluate each value
    /// expression a second time):
    ///
    /// - A rowid lookup answers `c = e` or `e = c` where `c` is the rowid (or its INTEGER
    ///   PRIMARY KEY alias) and `e` the lookup's value expression. The lookup reads the row
    ///   whose rowid is `e`'s value brought to INTEGER affinity through NUMERIC (or none when
    ///   that is not an integer), and the comparison brings `e` to the same NUMERIC affinity
    ///   (a column of INTEGER affinity against anything but a number) or compares a number
    ///   exactly — so the one row read is equal.
    /// - An index equality probe answers, for each column it probes, one `c = e` or `e = c`
    ///   where `c` is that column and `e` its probe expression. The planner takes such a
    ///   probe only where [`index_safe`](Self::index_safe) holds (no collation anywhere, and
    ///   the comparison converts the value, not the column); the probe value is `e`'s value
    ///   converted as the comparison converts it ([`probe`]), and the index
    ///   returns the rows whose column compares equal to it — the rows where `c = e` is true.
    fn implied(leaf: &Leaf, access: &Access, conj: &[&Expr], check: &mut [bool]) {
        let LeafSrc::Table(t) = &leaf.src else {
            return;
        };
        match access {
            Access::RowidEq(e) => {
                let is_rowid = |x: &Expr| Self::is_leaf_rowid(leaf, t, x);
                let answered = conj.iter().position(|c| match c {
                    Expr::Binary(BinOp::Eq, a, b) => {
                        (is_rowid(a) && **b == *e) || (is_rowid(b) && **a == *e)
                    }
                    _ => false,
                });
                if let Some(i) = answered {
                    check[i] = false;
                }
            }
            Access::IndexEq(_, _, cols, vals) => {
                // One conjunct per probed column: a second one of the same text is checked
                // as written (it may call a function whose value differs per call).
                for (&(col, _), v) in cols.iter().zip(vals) {
                    let probes = |x: &Expr, e: &Expr| {
                        e == v && Self::leaf_column(leaf, t, x) == Some(Some(col))
                    };
                    let answered = conj.iter().zip(check.iter()).position(|(c, k)| {
                        *k && matches!(c, Expr::Binary(BinOp::Eq, a, b)
                            if probes(a, b) || probes(b, a))
                    });
                    if let Some(i) = answered {
                        check[i] = false;
                    }
                }
            }
            _ => {}
        }
    }

    /// The rows of table `t` (its FROM item's scope `scope`) that pass the WHERE conjuncts
    /// `conj`, read as `plan` says — what `join` does for a lone FROM item: conjuncts that
    /// name no column are decided once before any row is read, the others on each row in
    /// order.
    fn leaf_rows(
        &mut self,
        t: &TableDef,
        scope: &Scope,
        plan: &LeafPlan,
        conj: &[&Expr],
    ) -> Result<Vec<Vec<Value>>> {
        if conj.len() != plan.constant.len() {
            return Err(SqlError::invalid(
                "internal: a cached plan does not fit its WHERE",
            ));
        }
        let none = Scope::default();
        let env = Env::empty(&none);
        for (c, _) in conj.iter().zip(&plan.constant).filter(|(_, k)| **k) {
            if self.cond(c, &env)? != Some(true) {
                return Ok(Vec::new());
            }
        }
        let mut rows = self.fetch(t, &plan.access, &env)?;
        if !plan.check.contains(&true) {
            return Ok(rows);
        }
        let checks: Vec<&Expr> = conj
            .iter()
            .zip(&plan.check)
            .filter(|(_, k)| **k)
            .map(|(c, _)| *c)
            .collect();
        // The rows that pass move to the front, in order.
        let mut kept = 0;
        for i in 0..rows.len() {
            if self.passes(&checks, scope, &rows[i], None)? {
                rows.swap(kept, i);
                kept += 1;
            }
        }
        rows.truncate(kept);
        Ok(rows)
    }

    /// Runs a query: names, rows and each column's affinity (for views and subqueries).
    fn query_typed(&mut self, s: &Select, outer: Option<&Env<'_>>) -> Result<Typed> {
        if s.compounds.is_empty() {
            let limit = s.limit.as_ref().map(|l| (l, s.offset.as_ref()));
            let (names, affs, mut rows) = self.core(&s.first, outer, &s.order_by, limit)?;
            if !s.order_by.is_empty() {
                let terms: Vec<(bool, Option<bool>)> =
                    s.order_by.iter().map(|t| (t.desc, t.nulls_first)).collect();
                rows.sort_by(|a, b| cmp_keys(&a.1, &b.1, &terms));
            }
            let rows = self.limit(rows.into_iter().map(|r| r.0).collect(), s, outer)?;
            return Ok((names, rows, affs));
        }
        let (names, affs, first) = self.core(&s.first, outer, &[], None)?;
        let mut acc: Vec<Vec<Value>> = first.into_iter().map(|r| r.0).collect();
        for (op, core) in &s.compounds {
            if acc.is_empty() && matches!(op, Compound::Intersect | Compound::Except) {
                // Nothing to keep: the right side is not run (as in SQLite).
                continue;
            }
            let (n2, _, rows) = self.core(core, outer, &[], None)?;
            if n2.len() != names.len() {
                let word = match op {
                    Compound::Union => "UNION",
                    Compound::UnionAll => "UNION ALL",
                    Compound::Intersect => "INTERSECT",
                    Compound::Except => "EXCEPT",
                };
                return Err(SqlError::invalid(format!(
                    "SELECTs to the left and right of {word} do not have the same number of result columns"
                )));
            }
            let mut rows: Vec<Vec<Value>> = rows.into_iter().map(|r| r.0).collect();
            match op {
                Compound::UnionAll => acc.append(&mut rows),
                Compound::Union => {
                    // Of equal rows the last stays, as in SQLite (whose union table
                    // overwrites an equal key).
                    acc.append(&mut rows);
                    sort_dedup_keep(&mut acc, true);
                }
                Compound::Intersect | Compound::Except => {
                    // SQLite keeps the last of equal left rows, or the first when an ORDER
                    // BY makes it merge sorted inputs.
                    sort_dedup_keep(&mut acc, s.order_by.is_empty());
                    sort_dedup(&mut rows);
                    let keep_if_in = *op == Compound::Intersect;
                    acc.retain(|r| rows.binary_search_by(|x| cmp_rows(x, r)).is_ok() == keep_if_in);
                }
            }
        }
        if !s.order_by.is_empty() {
            let mut idx = Vec::new();
            for (k, term) in s.order_by.iter().enumerate() {
                idx.push(self.output_column(&term.expr, &names, k + 1, true)?);
            }
            let terms: Vec<(bool, Option<bool>)> =
                s.order_by.iter().map(|t| (t.desc, t.nulls_first)).collect();
            acc.sort_by(|a, b| {
                let ka: Vec<Value> = idx.iter().map(|&i| a[i].clone()).collect();
                let kb: Vec<Value> = idx.iter().map(|&i| b[i].clone()).collect();
                cmp_keys(&ka, &kb, &terms)
            });
        }
        let rows = self.limit(acc, s, outer)?;
        Ok((names, rows, affs))
    }

    /// The result column an ORDER BY / GROUP BY term names: a number or (for compounds
    /// and aliases) a name; `Ok(usize::MAX)` when it is an expression to evaluate.
    fn output_column(
        &mut self,
        e: &Expr,
        names: &[String],
        k: usize,
        required: bool,
    ) -> Result<usize> {
        let scope = Scope::default();
        if let Expr::Lit(Value::Integer(n)) = e {
            if *n < 1 || *n as usize > names.len() {
                return Err(SqlError::invalid(format!(
                    "{} ORDER BY term out of range - should be between 1 and {}",
                    ordinal(k),
                    names.len()
                )));
            }
            return Ok(*n as usize - 1);
        }
        let _ = &scope;
        if let Expr::Column {
            table: None, name, ..
        } = e
        {
            if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(name)) {
                return Ok(i);
            }
        }
        if let Expr::Collate(inner, _) = e {
            return self.output_column(inner, names, k, required);
        }
        if required {
            return Err(SqlError::invalid(format!(
                "{} ORDER BY term does not match any column in the result set",
                ordinal(k)
            )));
        }
        Ok(usize::MAX)
    }

    fn limit(
        &mut self,
        mut rows: Vec<Vec<Value>>,
        s: &Select,
        outer: Option<&Env<'_>>,
    ) -> Result<Vec<Vec<Value>>> {
        let scope = Scope::default();
        let env = match outer {
            Some(o) => *o,
            None => Env::empty(&scope),
        };
        let int = |v: Value| -> Result<i64> {
            match v.with_affinity(Affinity::Integer) {
                Value::Integer(i) => Ok(i),
                _ => Err(SqlError::invalid("datatype mismatch")),
            }
        };
        if let Some(o) = &s.offset {
            let v = self.eval(o, &env)?;
            let off = int(v)?.max(0) as usize;
            rows.drain(..off.min(rows.len()));
        }
        if let Some(l) = &s.limit {
            let v = self.eval(l, &env)?;
            let n = int(v)?;
            if n >= 0 {
                rows.truncate(n as usize);
            }
        }
        Ok(rows)
    }

    /// Runs one SELECT core: names, affinities, and rows with their ORDER BY keys.
    #[allow(clippy::type_complexity)]
    fn core(
        &mut self,
        core: &SelectCore,
        outer: Option<&Env<'_>>,
        order_by: &[OrderTerm],
        limit: Option<(&Expr, Option<&Expr>)>,
    ) -> Result<(
        Vec<String>,
        Vec<Option<Affinity>>,
        Vec<(Vec<Value>, Vec<Value>)>,
    )> {
        let (distinct, columns, from, filter, group_by, having) = match core {
            SelectCore::Values(rows) => {
                let scope = Scope::default();
                let env = match outer {
                    Some(o) => *o,
                    None => Env::empty(&scope),
                };
                let mut out = Vec::new();
                for r in rows {
                    let mut vals = Vec::with_capacity(r.len());
                    for e in r {
                        vals.push(self.eval(e, &env)?);
                    }
                    out.push(vals);
                }
                let width = rows.first().map_or(0, Vec::len);
                let names = (1..=width)
                    .map(|i| format!("column{i}"))
                    .collect::<Vec<_>>();
                let mut keyed = Vec::new();
                for v in out {
                    let mut keys = Vec::new();
                    for (k, t) in order_by.iter().enumerate() {
                        let i = self.output_column(&t.expr, &names, k + 1, true)?;
                        keys.push(v[i].clone());
                    }
                    keyed.push((v, keys));
                }
                return Ok((names, vec![None; width], keyed));
            }
            SelectCore::Select {
                distinct,
                columns,
                from,
                filter,
                group_by,
                having,
            } => (*distinct, columns, from, filter, group_by, having),
        };
        let mut leaves = Vec::new();
        if let Some(f) = from {
            self.flatten(f, outer, &mut leaves)?;
        }
        // Result aliases may be named in WHERE, GROUP BY, HAVING and ORDER BY (SQLite's
        // extension) where no column of the FROM tables has the name.
        let aliases: Vec<(String, Expr)> = columns
            .iter()
            .filter_map(|c| match c {
                ResultCol::Expr {
                    expr,
                    alias: Some(a),
                    ..
                } => Some((a.clone(), expr.clone())),
                _ => None,
            })
            .collect();
        // Only a query with result aliases needs the FROM scope here.
        let from_scope = if aliases.is_empty() {
            Scope::default()
        } else {
            acc_scope_of(&leaves)
        };
        let alias_of = |t: &Option<String>, n: &str| -> Option<Expr> {
            if aliases.is_empty() {
                return None;
            }
            if t.is_some() || from_scope.find(None, n).ok().flatten().is_some() {
                return None;
            }
            aliases
                .iter()
                .find(|(a, _)| a.eq_ignore_ascii_case(n))
                .map(|(_, x)| x.clone())
        };
        let mut substituted = false;
        let filter: Option<Cow<'_, Expr>> = filter.as_ref().map(|e| {
            if aliases.is_empty() {
                Cow::Borrowed(e)
            } else {
                with_aliases(e, &alias_of, &mut substituted)
            }
        });
        let having: Option<Cow<'_, Expr>> = having.as_ref().map(|e| {
            if aliases.is_empty() {
                Cow::Borrowed(e)
            } else {
                with_aliases(e, &alias_of, &mut substituted)
            }
        });
        let order_by: Cow<'_, [OrderTerm]> = if aliases.is_empty() {
            Cow::Borrowed(order_by)
        } else {
            Cow::Owned(
                order_by
                    .iter()
                    .map(|t| OrderTerm {
                        expr: with_aliases(&t.expr, &alias_of, &mut substituted).into_owned(),
                        ..t.clone()
                    })
                    .collect(),
            )
        };
        let order_by = &order_by[..];
        if substituted {
            // Copies of subqueries have fresh addresses: none may be cached this statement.
            self.no_subq_cache = true;
        }
        let mut conj: Vec<&Expr> = Vec::new();
        if let Some(w) = filter.as_deref() {
            if let Some(f) = first_aggregate(w) {
                return Err(SqlError::invalid(format!(
                    "misuse of aggregate function {f}() in WHERE"
                )));
            }
            conjuncts(w, &mut conj);
        }
        let hint = match limit {
            Some((limit, offset))
                if !distinct
                    && group_by.is_empty()
                    && having.is_none()
                    && !order_by.is_empty()
                    && leaves.len() == 1
                    && conj
                        .iter()
                        .all(|c| matches!(c, Expr::Binary(BinOp::Eq, ..)))
                    && !columns.iter().any(
                        |c| matches!(c, ResultCol::Expr { expr, .. } if has_aggregate(expr)),
                    ) =>
            {
                Some(OrderHint {
                    terms: order_by,
                    eqs: &conj,
                    limit,
                    offset,
                })
            }
            _ => None,
        };
        // An aggregate query over one table reads it a chunk at a time into the groups'
        // states (see `scan_leaf`) instead of joining it into rows held whole.
        let plan_key = core as *const SelectCore as usize;
        let streamed = self.explain.is_none()
            && hint.is_none()
            && leaves.len() == 1
            && leaves[0].on.is_empty()
            && matches!(leaves[0].src, LeafSrc::Table(_))
            && (!group_by.is_empty()
                || having.is_some()
                || columns
                    .iter()
                    .any(|c| matches!(c, ResultCol::Expr { expr, .. } if has_aggregate(expr)))
                || order_by.iter().any(|t| has_aggregate(&t.expr)));
        let (scope, mut rows) = if streamed {
            (leaves[0].scope.clone(), Vec::new())
        } else {
            self.join(&leaves, &conj, outer, plan_key, hint.as_ref())?
        };
        // Result columns.
        // Borrowed where the statement has them, so the column positions their references
        // cache stay with the prepared statement from one run to the next.
        let mut exprs: Vec<Cow<'_, Expr>> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for c in columns {
            match c {
                ResultCol::Star => {
                    if leaves.is_empty() {
                        return Err(SqlError::invalid("no tables specified"));
                    }
                    for col in scope.cols().iter().filter(|c| !c.hidden) {
                        exprs.push(Cow::Owned(Expr::Column {
                            table: col.table.clone(),
                            name: col.name.clone(),
                            quoted: false,
                            slot: ColSlot::default(),
                        }));
                        names.push(col.name.clone());
                    }
                }
                ResultCol::TableStar(t) => {
                    if !scope.has_table(t) {
                        return Err(SqlError::NoSuch {
                            what: "table",
                            name: t.clone(),
                        });
                    }
                    for col in scope.cols().iter().filter(|c| {
                        !c.rowid
                            && c.table
                                .as_deref()
                                .is_some_and(|ct| ct.eq_ignore_ascii_case(t))
                    }) {
                        exprs.push(Cow::Owned(Expr::Column {
                            table: col.table.clone(),
                            name: col.name.clone(),
                            quoted: false,
                            slot: ColSlot::default(),
                        }));
                        names.push(col.name.clone());
                    }
                }
                ResultCol::Expr { expr, alias, text } => {
                    exprs.push(Cow::Borrowed(expr));
                    names.push(result_name(expr, alias, text));
                }
            }
        }
        let affs: Vec<Option<Affinity>> = {
            let env = Env {
                scope: &scope,
                row: &[],
                outer,
                group: None,
            };
            exprs.iter().map(|e| self.affinity_of(e, &env)).collect()
        };
        // ORDER BY terms: a result column, or an expression over the row.
        let mut order_idx = Vec::new();
        for (k, t) in order_by.iter().enumerate() {
            order_idx.push(self.output_column(&t.expr, &names, k + 1, false)?);
        }
        let aggregate = !group_by.is_empty()
            || having.is_some()
            || exprs.iter().any(|e| has_aggregate(e))
            || order_by
                .iter()
                .zip(&order_idx)
                .any(|(t, &i)| i == usize::MAX && has_aggregate(&t.expr));
        if streamed && !aggregate {
            // (Not expected: every aggregate is in a result column or an ORDER BY term
            // that is none. Then the rows are read whole after all.)
            let mut all = Vec::new();
            self.scan_leaf(&leaves, &conj, outer, plan_key, &mut |_, r, _| {
                all.push(r.clone());
                Ok(())
            })?;
            rows = all;
        }
        let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
        if aggregate {
            // GROUP BY terms: a source column first, else a result column number or alias.
            let mut gexprs: Vec<Cow<'_, Expr>> = Vec::new();
            for (k, g) in group_by.iter().enumerate() {
                if has_aggregate(g) {
                    return Err(SqlError::invalid(
                        "aggregate functions are not allowed in the GROUP BY clause",
                    ));
                }
                let resolved = match g {
                    Expr::Lit(Value::Integer(n)) => {
                        if *n < 1 || *n as usize > exprs.len() {
                            return Err(SqlError::invalid(format!(
                                "{} GROUP BY term out of range - should be between 1 and {}",
                                ordinal(k + 1),
                                exprs.len()
                            )));
                        }
                        exprs[*n as usize - 1].clone()
                    }
                    Expr::Column {
                        table: None, name, ..
                    } if scope.find(None, name)?.is_none() => {
                        match names.iter().position(|n| n.eq_ignore_ascii_case(name)) {
                            Some(i) => exprs[i].clone(),
                            None => Cow::Borrowed(g),
                        }
                    }
                    _ => Cow::Borrowed(g),
                };
                gexprs.push(resolved);
            }
            // With exactly one min()/max(), bare columns come from the row that has it.
            let mut minmax: Option<&Expr> = None;
            let mut aggs = 0;
            for e in exprs.iter() {
                walk(e, &mut |x| {
                    if let Expr::Func {
                        name, args, star, ..
                    } = x
                    {
                        if is_aggregate(name, args.len(), *star) {
                            aggs += 1;
                            if (name == "min" || name == "max") && args.len() == 1 {
                                minmax = Some(x);
                            }
                        }
                    }
                });
            }
            // The aggregate calls, each with a state per group fed row by row.
            let evaluated: Vec<&Expr> = exprs
                .iter()
                .map(|e| &**e)
                .chain(having.as_deref())
                .chain(
                    order_by
                        .iter()
                        .zip(&order_idx)
                        .filter(|(_, i)| **i == usize::MAX)
                        .map(|(t, _)| &t.expr),
                )
                .collect();
            let mut calls = Vec::new();
            for e in &evaluated {
                aggregate::collect_calls(e, &mut calls);
            }
            // Columns grouped on show the group's first row; other bare columns its last.
            let mut key_cols = Vec::new();
            for g in &gexprs {
                if let Expr::Column { table, name, .. } = &**g {
                    if let Some(i) = scope.find(table.as_deref(), name)? {
                        key_cols.push(i);
                    }
                }
            }
            let keep = match aggregate::bare_columns(&evaluated, &calls, &scope) {
                Some(b) if b.is_empty() => aggregate::Keep::Nothing,
                bare => match (aggs, minmax) {
                    (1, Some(m)) => match calls.iter().position(|c| c.is(m)) {
                        Some(k) => aggregate::Keep::MinMax(k),
                        None => aggregate::Keep::FirstLast,
                    },
                    _ => match bare {
                        Some(b)
                            if !key_cols.is_empty() && b.iter().all(|i| key_cols.contains(i)) =>
                        {
                            aggregate::Keep::First
                        }
                        _ => aggregate::Keep::FirstLast,
                    },
                },
            };
            let keys: Vec<&Expr> = gexprs.iter().map(|g| &**g).collect();
            let mut grouper =
                aggregate::Grouper::new(&scope, outer, &calls, &keys, &key_cols, keep);
            if streamed {
                self.scan_leaf(&leaves, &conj, outer, plan_key, &mut |ex, r, owned| {
                    grouper.feed(ex, r, owned)
                })?;
            } else {
                for mut r in rows {
                    grouper.feed(self, &mut r, true)?;
                }
            }
            let null_row = vec![Value::Null; scope.cols().len()];
            for g in grouper.finish() {
                let rep: &[Value] = g.row.as_deref().unwrap_or(&null_row);
                let group = aggregate::group_of(&calls, &g.accs);
                let env = Env {
                    scope: &scope,
                    row: rep,
                    outer,
                    group: Some(&group),
                };
                // Every group's results are computed before HAVING looks at it, as
                // SQLite's aggregate steps run on every row.
                let mut vals = Vec::with_capacity(exprs.len());
                for e in &exprs {
                    vals.push(self.eval(e, &env)?);
                }
                if let Some(h) = having.as_deref() {
                    if self.cond(h, &env)? != Some(true) {
                        continue;
                    }
                }
                let mut keys = Vec::with_capacity(order_by.len());
                for (t, &i) in order_by.iter().zip(&order_idx) {
                    keys.push(if i == usize::MAX {
                        self.eval(&t.expr, &env)?
                    } else {
                        vals[i].clone()
                    });
                }
                out.push((vals, keys));
            }
        } else if let Some(cols) = self.moved_columns(&exprs, &scope, outer, &order_idx) {
            // The result is distinct plain columns of the rows (ORDER BY names only result
            // columns): each value moves out of its row instead of being copied.
            for mut r in rows {
                let vals: Vec<Value> = cols
                    .iter()
                    .map(|&i| {
                        r.get_mut(i)
                            .map_or(Value::Null, |v| core::mem::replace(v, Value::Null))
                    })
                    .collect();
                let keys = order_idx.iter().map(|&i| vals[i].clone()).collect();
                out.push((vals, keys));
            }
        } else {
            for r in &rows {
                let env = Env {
                    scope: &scope,
                    row: r,
                    outer,
                    group: None,
                };
                let mut vals = Vec::with_capacity(exprs.len());
                for e in &exprs {
                    vals.push(self.eval(e, &env)?);
                }
                let mut keys = Vec::with_capacity(order_by.len());
                for (t, &i) in order_by.iter().zip(&order_idx) {
                    keys.push(if i == usize::MAX {
                        self.eval(&t.expr, &env)?
                    } else {
                        vals[i].clone()
                    });
                }
                out.push((vals, keys));
            }
        }
        if distinct {
            out = dedup_keep_order(out);
        }
        Ok((names, affs, out))
    }

    /// Feeds `sink` the rows of a lone table FROM item (`leaves[0]`) that pass the WHERE
    /// conjuncts `conj`, in the order [`join`](Self::join) returns them, with the same
    /// access path (planned and cached as it does) and the same checks in the same order: a
    /// full scan or a rowid range is read [`CHUNK_ROWS`] rows at a time into one reused
    /// buffer (`sink` gets `owned` false: it must copy what it keeps), any other path
    /// whole (`owned` true: the row may be moved out).
    fn scan_leaf(
        &mut self,
        leaves: &[Leaf],
        conj: &[&Expr],
        outer: Option<&Env<'_>>,
        plan_key: usize,
        sink: &mut RowSink<'_, Self>,
    ) -> Result<()> {
        let [leaf] = leaves else {
            return Err(SqlError::invalid("internal: a streamed read of a join"));
        };
        let LeafSrc::Table(t) = &leaf.src else {
            return Err(SqlError::invalid("internal: a streamed read of no table"));
        };
        let depth_scope = Scope::default();
        let env = Env {
            scope: &depth_scope,
            row: &[],
            outer,
            group: None,
        };
        // Conjuncts that name no column are decided once, before any row is read.
        let mut level: Vec<&Expr> = Vec::new();
        for c in conj {
            if Self::is_constant(c) {
                if self.cond(c, &env)? != Some(true) {
                    return Ok(());
                }
            } else {
                level.push(c);
            }
        }
        let access = self.leaf_access(leaves, 0, conj, plan_key, None);
        let (mut lo, hi) = match &*access {
            Access::Full => (Bound::Unbounded, Bound::Unbounded),
            Access::RowidRange(lo, hi) => match self.rowid_bounds(lo, hi, &env)? {
                Some((lo, hi, exact)) => {
                    if exact {
                        // The range answers its own terms.
                        let answered = Self::range_answered(leaf, &access, &level);
                        let mut i = 0;
                        level.retain(|_| {
                            i += 1;
                            answered.get(i - 1) != Some(&true)
                        });
                    }
                    (lo, hi)
                }
                None => return Ok(()),
            },
            a => {
                for mut r in self.fetch(t, a, &env)? {
                    if self.passes(&level, &leaf.scope, &r, outer)? {
                        sink(self, &mut r, true)?;
                    }
                }
                return Ok(());
            }
        };
        let mut buf: Vec<Vec<Value>> = Vec::new();
        loop {
            let (n, more) = self
                .storage
                .scan_chunk(&t.engine, lo, hi, CHUNK_ROWS, &mut buf)?;
            let n = n.min(buf.len());
            let Some(last) = chunk_end(&t.name, &buf[..n], lo)? else {
                return Ok(());
            };
            for r in &mut buf[..n] {
                if self.passes(&level, &leaf.scope, r, outer)? {
                    sink(self, r, false)?;
                }
            }
            if !more || last == i64::MAX {
                return Ok(());
            }
            lo = Bound::Excluded(last);
        }
    }

    /// Whether `row` (of `scope`) passes every one of `conj`.
    fn passes(
        &mut self,
        conj: &[&Expr],
        scope: &Scope,
        row: &[Value],
        outer: Option<&Env<'_>>,
    ) -> Result<bool> {
        let env = Env {
            scope,
            row,
            outer,
            group: None,
        };
        for c in conj {
            if self.cond(c, &env)? != Some(true) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The row positions of result expressions that are all plain columns of `scope`'s rows,
    /// each named once, when no ORDER BY term needs the row itself: then the values can move
    /// out of the rows. `None` otherwise (or if a name does not resolve cleanly here).
    fn moved_columns(
        &self,
        exprs: &[Cow<'_, Expr>],
        scope: &Scope,
        outer: Option<&Env<'_>>,
        order_idx: &[usize],
    ) -> Option<Vec<usize>> {
        if order_idx.contains(&usize::MAX) {
            return None;
        }
        let env = Env {
            scope,
            row: &[],
            outer,
            group: None,
        };
        let mut cols: Vec<usize> = Vec::with_capacity(exprs.len());
        for e in exprs {
            let i = crate::eval::own_column(e, &env)?;
            if cols.contains(&i) {
                return None;
            }
            cols.push(i);
        }
        Some(cols)
    }

    /// Flattens a FROM tree into leaves with their join kinds and conditions.
    fn flatten(
        &mut self,
        item: &FromItem,
        outer: Option<&Env<'_>>,
        leaves: &mut Vec<Leaf>,
    ) -> Result<()> {
        match item {
            FromItem::Table { name, alias } => {
                let leaf = self.table_leaf(name, alias.as_deref(), outer)?;
                leaves.push(leaf);
            }
            FromItem::Subquery { select, alias } => {
                let (names, rows, affs) = self.query_typed(select, outer)?;
                let label = alias.clone().unwrap_or_else(|| "(subquery)".into());
                leaves.push(Self::rows_leaf(
                    &names,
                    &affs,
                    rows,
                    alias.as_deref(),
                    label,
                ));
            }
            FromItem::Join {
                left,
                right,
                kind,
                on,
                using,
                natural,
            } => {
                self.flatten(left, outer, leaves)?;
                let mut right_leaf = match &**right {
                    FromItem::Join { .. } => {
                        let mut inner = Vec::new();
                        self.flatten(right, outer, &mut inner)?;
                        let (scope, rows) = self.join(&inner, &[], outer, 0, None)?;
                        Leaf {
                            scope,
                            src: LeafSrc::Rows(Rc::new(rows)),
                            kind: JoinKind::Inner,
                            on: Vec::new(),
                            label: "(join)".into(),
                        }
                    }
                    r => {
                        let mut one = Vec::new();
                        self.flatten(r, outer, &mut one)?;
                        one.pop()
                            .ok_or_else(|| SqlError::invalid("empty FROM item"))?
                    }
                };
                let mut conds = Vec::new();
                if let Some(o) = on {
                    split_and(o, &mut conds);
                }
                let mut names: Vec<String> = using.clone();
                if *natural {
                    for c in right_leaf.scope.cols().iter().filter(|c| !c.hidden) {
                        if leaves
                            .iter()
                            .any(|l| l.scope.find(None, &c.name).ok().flatten().is_some())
                        {
                            names.push(c.name.clone());
                        }
                    }
                }
                for n in &names {
                    let left_q = leaves
                        .iter()
                        .find_map(|l| {
                            l.scope
                                .find(None, n)
                                .ok()
                                .flatten()
                                .map(|i| l.scope.cols()[i].table.clone())
                        })
                        .ok_or_else(|| {
                            SqlError::invalid(format!(
                                "cannot join using column {n} - column not present in both tables"
                            ))
                        })?;
                    let ri = right_leaf.scope.find(None, n)?.ok_or_else(|| {
                        SqlError::invalid(format!(
                            "cannot join using column {n} - column not present in both tables"
                        ))
                    })?;
                    let right_q = right_leaf.scope.cols()[ri].table.clone();
                    Rc::make_mut(&mut right_leaf.scope).cols_mut()[ri].hidden = true;
                    conds.push(Expr::Binary(
                        BinOp::Eq,
                        Box::new(Expr::Column {
                            table: left_q,
                            name: n.clone(),
                            quoted: false,
                            slot: ColSlot::default(),
                        }),
                        Box::new(Expr::Column {
                            table: right_q,
                            name: n.clone(),
                            quoted: false,
                            slot: ColSlot::default(),
                        }),
                    ));
                }
                right_leaf.kind = *kind;
                right_leaf.on = conds;
                leaves.push(right_leaf);
            }
        }
        Ok(())
    }

    fn rows_leaf(
        names: &[String],
        affs: &[Option<Affinity>],
        rows: Vec<Vec<Value>>,
        alias: Option<&str>,
        label: String,
    ) -> Leaf {
        let q = alias.map(key);
        let cols = names
            .iter()
            .enumerate()
            .map(|(i, n)| Col {
                table: q.clone(),
                name: n.clone(),
                aff: affs.get(i).copied().flatten(),
                hidden: false,
                rowid: false,
            })
            .collect();
        Leaf {
            scope: Rc::new(Scope::new(cols)),
            src: LeafSrc::Rows(Rc::new(rows)),
            kind: JoinKind::Inner,
            on: Vec::new(),
            label: label.into(),
        }
    }

    fn table_leaf(
        &mut self,
        name: &str,
        alias: Option<&str>,
        outer: Option<&Env<'_>>,
    ) -> Result<Leaf> {
        let k = lower(name);
        let cached = self.leaf_defs.get(&*k).and_then(|defs| {
            let a = alias.unwrap_or("");
            defs.iter()
                .find(|d| d.alias.eq_ignore_ascii_case(a))
                .cloned()
        });
        let def = match (cached, self.catalog.tables.get(&*k)) {
            (Some(d), _) => Some(d),
            (None, Some(t)) => {
                let t = t.clone();
                Some(self.leaf_def(&t, alias))
            }
            (None, None) => None,
        };
        if let Some(d) = def {
            return Ok(Leaf {
                scope: d.scope.clone(),
                src: LeafSrc::Table(d.table.clone()),
                kind: JoinKind::Inner,
                on: Vec::new(),
                label: d.label.clone(),
            });
        }
        let k = k.into_owned();
        if let Some(v) = self.catalog.views.get(&k).cloned() {
            if self.view_depth > 32 {
                return Err(SqlError::invalid(format!(
                    "view {name} is circularly defined"
                )));
            }
            self.view_depth += 1;
            let r = self.query_typed(&v.select, outer);
            self.view_depth -= 1;
            let (mut names, rows, affs) = r.map_err(|e| match e {
                // SQLite names the schema of a table missing under a view.
                SqlError::NoSuch {
                    what: "table",
                    name,
                } if !name.contains('.') => SqlError::NoSuch {
                    what: "table",
                    name: format!("main.{name}"),
                },
                e => e,
            })?;
            if !v.columns.is_empty() {
                if v.columns.len() != names.len() {
                    return Err(SqlError::invalid(format!(
                        "expected {} columns for '{}' but got {}",
                        v.columns.len(),
                        v.name,
                        names.len()
                    )));
                }
                names = v.columns.clone();
            }
            return Ok(Self::rows_leaf(
                &names,
                &affs,
                rows,
                Some(alias.unwrap_or(&v.name)),
                v.name.clone(),
            ));
        }
        if k == "sqlite_master" || k == "sqlite_schema" || k == "sqlite_temp_master" {
            let mut rows = Vec::new();
            let masters = self.master_rows()?;
            for (_, r) in masters {
                let text = |i: usize| r.get(i).cloned().unwrap_or(Value::Null);
                rows.push(vec![text(0), text(1), text(2), Value::Integer(0), text(4)]);
            }
            if k == "sqlite_temp_master" {
                rows.clear();
            }
            let names: Vec<String> = ["type", "name", "tbl_name", "rootpage", "sql"]
                .iter()
                .map(|s| (*s).to_string())
                .collect();
            return Ok(Self::rows_leaf(
                &names,
                &[],
                rows,
                Some(alias.unwrap_or(name)),
                name.to_string(),
            ));
        }
        Err(SqlError::NoSuch {
            what: "table",
            name: name.to_string(),
        })
    }

    /// Whether an expression names no column and holds no subquery or random().
    fn is_constant(e: &Expr) -> bool {
        let mut c = true;
        walk(e, &mut |x| match x {
            Expr::Column { .. } | Expr::Exists(..) | Expr::Subquery(_) | Expr::InSelect(..) => {
                c = false
            }
            Expr::Func { name, .. } if name == "random" || name == "changes" => c = false,
            _ => {}
        });
        c
    }

    /// Which leaf (if any) a column reference of a conjunct belongs to.
    fn leaf_of(leaves: &[Leaf], table: Option<&str>, name: &str) -> Option<usize> {
        leaves
            .iter()
            .position(|l| l.scope.find(table, name).ok().flatten().is_some())
    }

    /// The leaf by which all of an expression's columns are bound (0 if none; the last leaf
    /// if it has a subquery, which may refer to any of them).
    fn level_of(leaves: &[Leaf], e: &Expr) -> usize {
        let mut level = 0;
        let mut sub = false;
        walk(e, &mut |x| match x {
            Expr::Column { table, name, .. } => {
                if let Some(i) = Self::leaf_of(leaves, table.as_deref(), name) {
                    level = level.max(i);
                }
            }
            Expr::Exists(..) | Expr::Subquery(_) | Expr::InSelect(..) => sub = true,
            _ => {}
        });
        if sub {
            leaves.len().saturating_sub(1)
        } else {
            level
        }
    }

    /// Whether an expression can be evaluated before leaf `k` is read (its columns belong
    /// to earlier leaves or to the enclosing query; no subqueries).
    fn bound_before(leaves: &[Leaf], k: usize, e: &Expr) -> bool {
        let mut ok = true;
        walk(e, &mut |x| match x {
            Expr::Column { table, name, .. }
                if Self::leaf_of(leaves, table.as_deref(), name).is_some_and(|i| i >= k) =>
            {
                ok = false
            }
            Expr::Exists(..) | Expr::Subquery(_) | Expr::InSelect(..) => ok = false,
            Expr::Func { name, .. } if name == "random" => ok = false,
            _ => {}
        });
        ok
    }

    /// Picks the access path for table leaf `k` from the usable conjuncts.
    fn plan(&self, leaves: &[Leaf], k: usize, cands: &[&Expr]) -> Access {
        let leaf = &leaves[k];
        let LeafSrc::Table(t) = &leaf.src else {
            return Access::Full;
        };
        // (column position or None for rowid, op, value expression)
        let mut terms: Vec<(Option<usize>, BinOp, Expr)> = Vec::new();
        let mut ins: Vec<(Option<usize>, Vec<Expr>)> = Vec::new();
        let col_of = |e: &Expr| Self::leaf_column(leaf, t, e);
        for c in cands {
            match c {
                Expr::Binary(
                    op @ (BinOp::Eq | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge),
                    a,
                    b,
                ) => {
                    if let Some(col) = col_of(a) {
                        if Self::bound_before(leaves, k, b) && self.index_safe(t, col, b) {
                            terms.push((col, *op, (**b).clone()));
                        }
                    } else if let Some(col) = col_of(b) {
                        if Self::bound_before(leaves, k, a) && self.index_safe(t, col, a) {
                            terms.push((col, flipped(*op), (**a).clone()));
                        }
                    }
                }
                Expr::Between(x, lo, hi, false) => {
                    if let Some(col) = col_of(x) {
                        if Self::bound_before(leaves, k, lo)
                            && Self::bound_before(leaves, k, hi)
                            && self.index_safe(t, col, lo)
                            && self.index_safe(t, col, hi)
                        {
                            terms.push((col, BinOp::Ge, (**lo).clone()));
                            terms.push((col, BinOp::Le, (**hi).clone()));
                        }
                    }
                }
                Expr::InList(x, list, false) if !list.is_empty() => {
                    if let Some(col) = col_of(x) {
                        if list
                            .iter()
                            .all(|e| Self::bound_before(leaves, k, e) && self.index_safe(t, col, e))
                        {
                            ins.push((col, list.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        let eq = |col: Option<usize>| {
            terms
                .iter()
                .find(|(c, op, _)| *c == col && *op == BinOp::Eq)
                .map(|t| t.2.clone())
        };
        if let Some(e) = eq(None) {
            return Access::RowidEq(e);
        }
        // Indexes: the user ones and the constraint ones.
        let mut indexes: Vec<(String, String, Vec<usize>)> = t
            .uniques
            .iter()
            .filter(|u| u.index.is_none())
            .map(|u| {
                (
                    u.engine.clone(),
                    format!(
                        "sqlite_autoindex_{}_{}",
                        t.name,
                        u.engine.rsplit('u').next().unwrap_or("1")
                    ),
                    u.columns.clone(),
                )
            })
            .collect();
        for i in self.catalog.indexes_of(&t.name) {
            indexes.push((i.engine.clone(), i.name.clone(), i.columns.clone()));
        }
        let mut best: Option<(usize, Access)> = None;
        for (engine, name, cols) in &indexes {
            let mut vals = Vec::new();
            for c in cols {
                match eq(Some(*c)) {
                    Some(e) => vals.push(e),
                    None => break,
                }
            }
            if !vals.is_empty() && best.as_ref().is_none_or(|b| b.0 < vals.len()) {
                let affs = cols.iter().map(|&c| (c, t.columns[c].affinity)).collect();
                best = Some((
                    vals.len(),
                    Access::IndexEq(engine.clone(), name.clone(), affs, vals),
                ));
            }
        }
        if let Some((_, a)) = best {
            return a;
        }
        if let Some((_, list)) = ins.iter().find(|(c, _)| c.is_none()) {
            return Access::RowidIn(list.clone());
        }
        for (col, list) in &ins {
            if let Some(c) = col {
                if let Some((engine, name, _)) =
                    indexes.iter().find(|(_, _, cols)| cols.first() == Some(c))
                {
                    return Access::IndexIn(
                        engine.clone(),
                        name.clone(),
                        t.columns[*c].affinity,
                        list.clone(),
                    );
                }
            }
        }
        let bounds = |col: Option<usize>| {
            let mut lo = None;
            let mut hi = None;
            for (c, op, e) in &terms {
                if *c != col {
                    continue;
                }
                match op {
                    BinOp::Gt => lo = Some((e.clone(), false)),
                    BinOp::Ge => lo = Some((e.clone(), true)),
                    BinOp::Lt => hi = Some((e.clone(), false)),
                    BinOp::Le => hi = Some((e.clone(), true)),
                    _ => {}
                }
            }
            (lo, hi)
        };
        let (lo, hi) = bounds(None);
        if lo.is_some() || hi.is_some() {
            return Access::RowidRange(lo, hi);
        }
        for (engine, name, cols) in &indexes {
            if let Some(&c) = cols.first() {
                let (lo, hi) = bounds(Some(c));
                if lo.is_some() || hi.is_some() {
                    return Access::IndexRange(
                        engine.clone(),
                        name.clone(),
                        t.columns[c].affinity,
                        lo,
                        hi,
                    );
                }
            }
        }
        Access::Full
    }

    /// Whether probing column `col` (None: the rowid) with the value of `e` finds every row
    /// SQLite's comparison would match: the comparison must convert the value, not the column.
    fn index_safe(&self, t: &TableDef, col: Option<usize>, e: &Expr) -> bool {
        let col_aff = match col {
            None => Affinity::Integer,
            Some(c) => t.columns[c].affinity,
        };
        if matches!(e, Expr::Collate(..))
            || t.columns
                .iter()
                .any(|c| c.decl_type.to_ascii_uppercase().contains("COLLATE"))
        {
            return false;
        }
        let e_aff = match e {
            Expr::Cast(_, ty) => Some(Affinity::of_decl(ty)),
            Expr::Column { .. } => None, // resolved at run time; checked below by value
            _ => None,
        };
        if matches!(e, Expr::Column { .. }) {
            // A column of another table has its own affinity; allow only same-kind pairs.
            return col_aff.is_numeric();
        }
        match col_aff {
            a if a.is_numeric() => true,
            Affinity::Text => e_aff.is_none_or(|x| x == Affinity::Text),
            _ => e_aff.is_none_or(|x| x == Affinity::Blob),
        }
    }

    fn describe(leaf: &Leaf, a: &Access) -> String {
        let name = &leaf.label;
        match a {
            Access::Full => match leaf.src {
                LeafSrc::Table(_) => format!("SCAN {name}"),
                LeafSrc::Rows(_) => format!("SCAN {name}"),
            },
            Access::RowidEq(_) => format!("SEARCH {name} USING INTEGER PRIMARY KEY (rowid=?)"),
            Access::RowidIn(_) => format!("SEARCH {name} USING INTEGER PRIMARY KEY (rowid=?)"),
            Access::RowidRange(lo, hi) => {
                let parts: Vec<&str> = [
                    lo.as_ref()
                        .map(|l| if l.1 { "rowid>=?" } else { "rowid>?" }),
                    hi.as_ref()
                        .map(|h| if h.1 { "rowid<=?" } else { "rowid<?" }),
                ]
                .into_iter()
                .flatten()
                .collect();
                format!(
                    "SEARCH {name} USING INTEGER PRIMARY KEY ({})",
                    parts.join(" AND ")
                )
            }
            Access::IndexEq(_, idx, _, vals) => format!(
                "SEARCH {name} USING INDEX {idx} ({} columns =?)",
                vals.len()
            ),
            Access::IndexIn(_, idx, _, _) => format!("SEARCH {name} USING INDEX {idx} (=?)"),
            Access::Ordered(None, ..) => format!("SCAN {name}"),
            Access::Ordered(Some((_, idx)), _, _, _, prefix) if !prefix.is_empty() => format!(
                "SEARCH {name} USING INDEX {idx} ({} columns =?) ORDERED",
                prefix.len()
            ),
            Access::Ordered(Some((_, idx)), ..) => format!("SCAN {name} USING INDEX {idx}"),
            Access::IndexRange(_, idx, _, lo, hi) => {
                let parts: Vec<&str> = [
                    lo.as_ref().map(|l| if l.1 { ">=?" } else { ">?" }),
                    hi.as_ref().map(|h| if h.1 { "<=?" } else { "<?" }),
                ]
                .into_iter()
                .flatten()
                .collect();
                format!("SEARCH {name} USING INDEX {idx} ({})", parts.join(" AND "))
            }
        }
    }

    /// Reads the rows of table leaf `k` the access path gives, for the current env.
    /// The rowid bounds of a [`Access::RowidRange`]'s ends (evaluated low end first), and
    /// whether they are exact — the rows in them are exactly those the range's terms accept
    /// — or `None` when no row can be in the range. A bound is exact when its value, brought
    /// to NUMERIC affinity as the comparison brings it, is an integer or a finite real (the
    /// nearest rowid on the inside of it); text and other values leave that end open for the
    /// WHERE to check.
    fn rowid_bounds(
        &mut self,
        lo: &Option<(Expr, bool)>,
        hi: &Option<(Expr, bool)>,
        env: &Env<'_>,
    ) -> Result<Option<RowidSpan>> {
        let mut bound =
            |b: &Option<(Expr, bool)>, upper: bool| -> Result<Option<(Bound<i64>, bool)>> {
                let Some((e, incl)) = b else {
                    return Ok(Some((Bound::Unbounded, true)));
                };
                let v = probe(self.eval(e, env)?, Affinity::Integer);
                Ok(match v {
                    Value::Integer(i) => Some((
                        if *incl {
                            Bound::Included(i)
                        } else {
                            Bound::Excluded(i)
                        },
                        true,
                    )),
                    Value::Real(r) if r.is_finite() => real_rowid_bound(r, *incl, upper),
                    Value::Null => None,
                    _ => Some((Bound::Unbounded, false)), // text: let the filter decide
                })
            };
        let (Some((l, le)), Some((h, he))) = (bound(lo, false)?, bound(hi, true)?) else {
            return Ok(None);
        };
        let first = match l {
            Bound::Included(a) => Some(a),
            Bound::Excluded(a) => a.checked_add(1),
            Bound::Unbounded => Some(i64::MIN),
        };
        let last = match h {
            Bound::Included(b) => Some(b),
            Bound::Excluded(b) => b.checked_sub(1),
            Bound::Unbounded => Some(i64::MAX),
        };
        match (first, last) {
            (Some(a), Some(b)) if a <= b => Ok(Some((l, h, le && he))),
            _ => Ok(None),
        }
    }

    /// The rowid `rowid = e` names, if `e`'s value is one (as a rowid lookup sees it).
    fn rowid_key(&mut self, e: &Expr, env: &Env<'_>) -> Result<Option<i64>> {
        let v = self.eval(e, env)?;
        Ok(as_rowid(&probe(v, Affinity::Integer)))
    }

    fn fetch(&mut self, t: &TableDef, a: &Access, env: &Env<'_>) -> Result<Vec<Vec<Value>>> {
        // A loop, not `map(..).collect()`: collecting in place would keep the source's
        // larger buffer and shrink it with a `realloc` on every call.
        let with_rowid = |rows: Vec<(i64, Vec<Value>)>| -> Vec<Vec<Value>> {
            let mut out = Vec::with_capacity(rows.len());
            for (id, mut r) in rows {
                r.push(Value::Integer(id));
                out.push(r);
            }
            out
        };
        match a {
            Access::Full => Ok(with_rowid(self.storage.scan(
                &t.engine,
                Bound::Unbounded,
                Bound::Unbounded,
            )?)),
            Access::RowidEq(e) => {
                let Some(id) = self.rowid_key(e, env)? else {
                    return Ok(Vec::new());
                };
                Ok(match self.storage.get(&t.engine, id)? {
                    Some(mut r) => {
                        r.push(Value::Integer(id));
                        vec![r]
                    }
                    None => Vec::new(),
                })
            }
            Access::RowidIn(list) => {
                let mut ids = Vec::new();
                for e in list {
                    let v = self.eval(e, env)?;
                    if let Some(id) = as_rowid(&probe(v, Affinity::Integer)) {
                        ids.push(id);
                    }
                }
                ids.sort_unstable();
                ids.dedup();
                let mut out = Vec::new();
                for id in ids {
                    if let Some(r) = self.storage.get(&t.engine, id)? {
                        out.push((id, r));
                    }
                }
                Ok(with_rowid(out))
            }
            Access::RowidRange(lo, hi) => match self.rowid_bounds(lo, hi, env)? {
                Some((l, h, _)) => Ok(with_rowid(self.storage.scan(&t.engine, l, h)?)),
                None => Ok(Vec::new()),
            },
            Access::IndexEq(engine, _, affs, exprs) => {
                if let ([e], [(_, aff)]) = (exprs.as_slice(), affs.as_slice()) {
                    // One column (the usual probe): a parameter the probe would not convert
                    // is used where it lies, anything else evaluated once.
                    let owned;
                    let v = match e {
                        Expr::Param(i)
                            if self.params.get(*i).is_some_and(|v| probes_as_is(v, *aff)) =>
                        {
                            &self.params[*i]
                        }
                        _ => {
                            owned = probe(self.eval(e, env)?, *aff);
                            &owned
                        }
                    };
                    if v.is_null() {
                        return Ok(Vec::new());
                    }
                    let k = core::slice::from_ref(v);
                    return Ok(with_rowid(self.storage.index_scan(
                        engine,
                        Bound::Included(k),
                        Bound::Included(k),
                    )?));
                }
                let mut vals = Vec::with_capacity(exprs.len());
                for (e, (_, aff)) in exprs.iter().zip(affs) {
                    let v = probe(self.eval(e, env)?, *aff);
                    if v.is_null() {
                        return Ok(Vec::new());
                    }
                    vals.push(v);
                }
                Ok(with_rowid(self.storage.index_scan(
                    engine,
                    Bound::Included(&vals),
                    Bound::Included(&vals),
                )?))
            }
            Access::IndexIn(engine, _, aff, list) => {
                let mut vals = Vec::new();
                for e in list {
                    let v = probe(self.eval(e, env)?, *aff);
                    if !v.is_null() {
                        vals.push(v);
                    }
                }
                vals.sort_by(compare);
                vals.dedup_by(|a, b| compare(a, b) == Ordering::Equal);
                let mut out = Vec::new();
                for v in vals {
                    let k = [v];
                    out.extend(self.storage.index_scan(
                        engine,
                        Bound::Included(&k),
                        Bound::Included(&k),
                    )?);
                }
                Ok(with_rowid(out))
            }
            Access::IndexRange(engine, _, aff, lo, hi) => {
                let mut get = |b: &Option<(Expr, bool)>| -> Result<Option<Option<(Value, bool)>>> {
                    match b {
                        None => Ok(Some(None)),
                        Some((e, incl)) => {
                            let v = probe(self.eval(e, env)?, *aff);
                            if v.is_null() {
                                Ok(None)
                            } else {
                                Ok(Some(Some((v, *incl))))
                            }
                        }
                    }
                };
                let (Some(l), Some(h)) = (get(lo)?, get(hi)?) else {
                    return Ok(Vec::new());
                };
                // The index orders values as SQLite compares them, so [lo, hi] (inclusive;
                // the filter drops the ends when they are excluded) holds every match.
                let lo_v: Option<Vec<Value>> = l.map(|(v, _)| vec![v]);
                let hi_v: Option<Vec<Value>> = h.map(|(v, _)| vec![v]);
                let lb = lo_v.as_deref().map_or(Bound::Unbounded, Bound::Included);
                let hb = hi_v.as_deref().map_or(Bound::Unbounded, Bound::Included);
                Ok(with_rowid(self.storage.index_scan(engine, lb, hb)?))
            }
            Access::Ordered(index, desc, limit, offset, prefix) => {
                // The prefix values, converted as an index equality probe converts them; a
                // NULL one is equal to nothing.
                let mut vals = Vec::with_capacity(prefix.len());
                for (aff, e) in prefix {
                    let v = probe(self.eval(e, env)?, *aff);
                    if v.is_null() {
                        return Ok(Vec::new());
                    }
                    vals.push(v);
                }
                // LIMIT + OFFSET rows; a negative LIMIT is none, and a value LIMIT would
                // refuse reads everything so that `limit` reports it.
                let mut count = |e: &Expr| -> Result<Option<i64>> {
                    Ok(match self.eval(e, env)?.with_affinity(Affinity::Integer) {
                        Value::Integer(i) => Some(i),
                        _ => None,
                    })
                };
                let n = match (
                    count(limit)?,
                    offset.as_deref().map(&mut count).transpose()?,
                ) {
                    (Some(l), None) if l >= 0 => usize::try_from(l).ok(),
                    (Some(l), Some(Some(o))) if l >= 0 => {
                        usize::try_from(l.saturating_add(o.max(0))).ok()
                    }
                    _ => None,
                }
                .unwrap_or(usize::MAX);
                let rows = match index {
                    None => self.storage.scan_limited(
                        &t.engine,
                        Bound::Unbounded,
                        Bound::Unbounded,
                        *desc,
                        n,
                    )?,
                    Some((engine, _)) => {
                        // A bound shorter than the index bounds that prefix.
                        let b = if vals.is_empty() {
                            Bound::Unbounded
                        } else {
                            Bound::Included(&vals[..])
                        };
                        self.storage.index_scan_limited(engine, b, b, *desc, n)?
                    }
                };
                Ok(with_rowid(rows))
            }
        }
    }

    /// An access path that returns table leaf `k`'s rows already in the hint's ORDER BY
    /// order, so that only LIMIT + OFFSET rows need be read: the terms must be the rowid,
    /// or a prefix of an index's columns, all in one direction with the default NULLs
    /// placement (an index orders NULLs first). With a WHERE, its equalities must fix
    /// exactly the index columns before the terms (see [`Self::eq_prefix`]).
    fn ordered(&self, leaves: &[Leaf], k: usize, h: &OrderHint<'_>) -> Option<Access> {
        let leaf = leaves.get(k)?;
        let LeafSrc::Table(t) = &leaf.src else {
            return None;
        };
        if !leaf.on.is_empty() {
            return None;
        }
        let eqs = self.eq_prefix(leaf, t, h.eqs)?;
        let desc = h.terms.first()?.desc;
        if h.terms
            .iter()
            .any(|o| o.desc != desc || o.nulls_first.is_some_and(|nf| nf == desc))
        {
            return None;
        }
        let mut cols = Vec::new();
        for o in h.terms {
            let Expr::Column { table, name, .. } = &o.expr else {
                return None;
            };
            if let Some(tq) = table {
                if !leaf.scope.has_table(tq) {
                    return None;
                }
            }
            let i = leaf.scope.find(table.as_deref(), name).ok().flatten()?;
            cols.push(if leaf.scope.cols()[i].rowid || Some(i) == t.ipk {
                None
            } else {
                Some(i)
            });
        }
        let limit = Box::new(h.limit.clone());
        let offset = h.offset.map(|o| Box::new(o.clone()));
        if cols.first()?.is_none() && eqs.is_empty() {
            // The rowid is unique: later terms cannot reorder.
            return Some(Access::Ordered(None, desc, limit, offset, Vec::new()));
        }
        // The WHERE's columns (in any order), then the terms' index columns, then the rowid
        // (equal index values come in rowid order).
        let fits = |idx: &[usize]| {
            if idx.len() < eqs.len() || !idx[..eqs.len()].iter().all(|i| eqs.contains_key(i)) {
                return false;
            }
            let idx = &idx[eqs.len()..];
            let m = cols.iter().take_while(|c| c.is_some()).count();
            m <= idx.len()
                && cols[..m].iter().zip(idx).all(|(c, i)| *c == Some(*i))
                && (m == cols.len() || m == idx.len())
        };
        let mut found = t
            .uniques
            .iter()
            .filter(|u| u.index.is_none() && fits(&u.columns))
            .map(|u| {
                (
                    u.columns.clone(),
                    u.engine.clone(),
                    format!(
                        "sqlite_autoindex_{}_{}",
                        t.name,
                        u.engine.rsplit('u').next().unwrap_or("1")
                    ),
                )
            })
            .next();
        if found.is_none() {
            found = self
                .catalog
                .indexes_of(&t.name)
                .into_iter()
                .find(|i| fits(&i.columns))
                .map(|i| (i.columns.clone(), i.engine.clone(), i.name.clone()));
        }
        let (columns, engine, name) = found?;
        // The prefix values in index column order.
        let prefix = columns
            .iter()
            .take(eqs.len())
            .map(|c| Some((t.columns.get(*c)?.affinity, (*eqs.get(c)?).clone())))
            .collect::<Option<Vec<_>>>()?;
        Some(Access::Ordered(
            Some((engine, name)),
            desc,
            limit,
            offset,
            prefix,
        ))
    }

    /// The columns the WHERE conjuncts `eqs` fix, each to the value expression it is equal
    /// to, or `None` when the rows an index probe with them finds could differ from the
    /// rows the WHERE keeps — the filter would then drop rows the LIMIT counted. Each
    /// conjunct must be `column = value` (either side) on a distinct column of the leaf
    /// that is not the rowid, the value must name no column and hold no subquery or
    /// random() (one value for the whole statement), and the index equality probe's own
    /// check ([`Self::index_safe`]: no collation, the comparison converts the value and not
    /// the column) must pass.
    fn eq_prefix<'e>(
        &self,
        leaf: &Leaf,
        t: &TableDef,
        eqs: &[&'e Expr],
    ) -> Option<BTreeMap<usize, &'e Expr>> {
        let mut out = BTreeMap::new();
        for c in eqs {
            let Expr::Binary(BinOp::Eq, a, b) = c else {
                return None;
            };
            let (col, e) = match (Self::leaf_column(leaf, t, a), Self::leaf_column(leaf, t, b)) {
                (Some(col), None) => (col, &**b),
                (None, Some(col)) => (col, &**a),
                _ => return None,
            };
            let col = col?;
            if !Self::is_constant(e) || !self.index_safe(t, Some(col), e) {
                return None;
            }
            if out.insert(col, e).is_some() {
                return None;
            }
        }
        Some(out)
    }

    /// The position of the leaf's column an expression names (`Some(None)`: the rowid), or
    /// `None` when it is not a column of the leaf.
    fn leaf_column(leaf: &Leaf, t: &TableDef, e: &Expr) -> Option<Option<usize>> {
        let Expr::Column { table, name, .. } = e else {
            return None;
        };
        if let Some(tq) = table {
            if !leaf.scope.has_table(tq) {
                return None;
            }
        }
        let i = leaf.scope.find(table.as_deref(), name).ok().flatten()?;
        if leaf.scope.cols().get(i)?.rowid || Some(i) == t.ipk {
            Some(None)
        } else {
            Some(Some(i))
        }
    }

    /// Joins the leaves with nested loops, applying each WHERE conjunct as soon as its
    /// columns are bound. Returns the combined scope and rows.
    /// The access path of FROM item `k`, from its ON terms and (unless it is a LEFT JOIN's
    /// table) the WHERE conjuncts: planned once per prepared statement (`plan_key`; 0: not
    /// kept) outside EXPLAIN. With `hint`, an ordered read replaces a full scan, or an
    /// equality probe whose equalities it takes over as its prefix.
    fn leaf_access(
        &mut self,
        leaves: &[Leaf],
        k: usize,
        where_conj: &[&Expr],
        plan_key: usize,
        hint: Option<&OrderHint<'_>>,
    ) -> Rc<Access> {
        let keep = plan_key != 0 && self.explain.is_none();
        let cache_key = (self.stmt_id, plan_key, k);
        if keep {
            if let Some(a) = self.plans.get(&cache_key) {
                return a.clone();
            }
        }
        let Some(leaf) = leaves.get(k) else {
            return Rc::new(Access::Full);
        };
        let mut cands: Vec<&Expr> = leaf.on.iter().collect();
        if leaf.kind != JoinKind::Left {
            cands.extend(where_conj.iter().copied());
        }
        let mut a = self.plan(leaves, k, &cands);
        if let (Access::Full | Access::IndexEq(..), Some(h)) = (&a, hint) {
            if let Some(o) = self.ordered(leaves, k, h) {
                a = o;
            }
        }
        self.plans_made += 1;
        let a = Rc::new(a);
        if keep {
            self.plans.insert(cache_key, a.clone());
        }
        a
    }

    fn join(
        &mut self,
        leaves: &[Leaf],
        where_conj: &[&Expr],
        outer: Option<&Env<'_>>,
        plan_key: usize,
        hint: Option<&OrderHint<'_>>,
    ) -> Result<(Rc<Scope>, Vec<Vec<Value>>)> {
        let depth_scope = Scope::default();
        if leaves.is_empty() {
            let row: Vec<Value> = Vec::new();
            let env = Env {
                scope: &depth_scope,
                row: &row,
                outer,
                group: None,
            };
            for c in where_conj {
                if self.cond(c, &env)? != Some(true) {
                    return Ok((Rc::default(), Vec::new()));
                }
            }
            return Ok((Rc::default(), vec![Vec::new()]));
        }
        // Prefix scopes: the columns of leaves 0..=k (the first is the first leaf's own).
        let mut prefix: Vec<Rc<Scope>> = Vec::with_capacity(leaves.len());
        for l in leaves {
            let next = match prefix.last() {
                None => l.scope.clone(),
                Some(p) => {
                    let mut acc = Scope::clone(p);
                    acc.cols_mut().extend(l.scope.cols().iter().cloned());
                    Rc::new(acc)
                }
            };
            prefix.push(next);
        }
        let acc_scope = prefix.last().cloned().unwrap_or_default();
        let mut by_level: Vec<Vec<&Expr>> = vec![Vec::new(); leaves.len()];
        let mut constant: Vec<&Expr> = Vec::new();
        for c in where_conj {
            if Self::is_constant(c) {
                constant.push(c);
            } else {
                by_level[Self::level_of(leaves, c)].push(c);
            }
        }
        // Conjuncts that name no column are decided once, before any row is read.
        if self.explain.is_none() {
            let env = Env {
                scope: &depth_scope,
                row: &[],
                outer,
                group: None,
            };
            for c in constant {
                if self.cond(c, &env)? != Some(true) {
                    return Ok((acc_scope, Vec::new()));
                }
            }
        }
        // Access paths.
        let mut paths = Vec::new();
        for (k, leaf) in leaves.iter().enumerate() {
            let a = self.leaf_access(leaves, k, where_conj, plan_key, hint);
            if let Some(ex) = &mut self.explain {
                ex.push(Self::describe(leaf, &a));
            }
            paths.push(a);
        }
        if self.explain.is_some() {
            return Ok((acc_scope, Vec::new()));
        }
        let mut full_cache: Vec<Option<Rc<Vec<Vec<Value>>>>> = vec![None; leaves.len()];
        let mut acc: Vec<Vec<Value>> = vec![Vec::new()];
        for (k, leaf) in leaves.iter().enumerate() {
            let width = leaf.scope.cols().len();
            let mut next = Vec::new();
            let before = if k == 0 { &depth_scope } else { &prefix[k - 1] };
            for partial in &acc {
                let candidates: Rc<Vec<Vec<Value>>> = match (&leaf.src, &*paths[k]) {
                    (LeafSrc::Rows(r), _) => r.clone(),
                    (LeafSrc::Table(t), Access::Full) => match &full_cache[k] {
                        Some(c) => c.clone(),
                        None => {
                            let env = Env {
                                scope: before,
                                row: partial,
                                outer,
                                group: None,
                            };
                            let rows = Rc::new(self.fetch(t, &Access::Full, &env)?);
                            // Kept for the next partial row only if there is one: the only
                            // reader moves the rows instead of copying them.
                            if acc.len() > 1 {
                                full_cache[k] = Some(rows.clone());
                            }
                            rows
                        }
                    },
                    (LeafSrc::Table(t), a) => {
                        let env = Env {
                            scope: before,
                            row: partial,
                            outer,
                            group: None,
                        };
                        Rc::new(self.fetch(t, a, &env)?)
                    }
                };
                let mut matched = false;
                // Rows read for this partial row alone are moved, not copied, into the first
                // level's results.
                let mut owned = Rc::try_unwrap(candidates);
                let n = match &owned {
                    Ok(v) => v.len(),
                    Err(rc) => rc.len(),
                };
                for i in 0..n {
                    let combined = match &mut owned {
                        Ok(v) if partial.is_empty() => core::mem::take(&mut v[i]),
                        Ok(v) => {
                            let mut c = partial.clone();
                            c.extend(v[i].iter().cloned());
                            c
                        }
                        Err(rc) => {
                            let mut c = partial.clone();
                            c.extend(rc[i].iter().cloned());
                            c
                        }
                    };
                    let env = Env {
                        scope: &prefix[k],
                        row: &combined,
                        outer,
                        group: None,
                    };
                    let mut ok = true;
                    for c in &leaf.on {
                        if self.cond(c, &env)? != Some(true) {
                            ok = false;
                            break;
                        }
                    }
                    if !ok {
                        continue;
                    }
                    matched = true;
                    for c in &by_level[k] {
                        if self.cond(c, &env)? != Some(true) {
                            ok = false;
                            break;
                        }
                    }
                    if ok {
                        next.push(combined);
                    }
                }
                if !matched && leaf.kind == JoinKind::Left {
                    let mut combined = partial.clone();
                    combined.extend(core::iter::repeat_n(Value::Null, width));
                    let env = Env {
                        scope: &prefix[k],
                        row: &combined,
                        outer,
                        group: None,
                    };
                    let mut ok = true;
                    for c in &by_level[k] {
                        if self.cond(c, &env)? != Some(true) {
                            ok = false;
                            break;
                        }
                    }
                    if ok {
                        next.push(combined);
                    }
                }
            }
            acc = next;
        }
        Ok((acc_scope, acc))
    }

    /// The rows of a subquery for an expression, run once per statement when it does not
    /// refer to the enclosing query.
    pub(crate) fn subquery_rows(
        &mut self,
        sel: &Select,
        env: &Env<'_>,
    ) -> Result<(Rows, usize, Option<Affinity>)> {
        let id = sel as *const Select as usize;
        if let (false, Some((rows, w, aff))) = (self.no_subq_cache, self.subq_cache.get(&id)) {
            return Ok((rows.clone(), *w, *aff));
        }
        let correlated = self.references_outer(sel, env);
        let (names, rows, affs) = self.query_typed(sel, Some(env))?;
        let rows = Rc::new(rows);
        let aff = affs.first().copied().flatten();
        if !correlated && !self.no_subq_cache {
            self.subq_cache.insert(id, (rows.clone(), names.len(), aff));
        }
        Ok((rows, names.len(), aff))
    }

    /// Whether a subquery may refer to columns of the enclosing query: some column it names
    /// is not a column of the tables in its own FROM clauses (checked by name, conservatively).
    fn references_outer(&self, sel: &Select, env: &Env<'_>) -> bool {
        let _ = env;
        let mut own: Vec<(Option<String>, String)> = Vec::new();
        let mut refs: Vec<(Option<String>, String)> = Vec::new();
        let mut opaque = false;
        self.collect_select(sel, &mut own, &mut refs, &mut opaque);
        if opaque {
            return true;
        }
        refs.iter().any(|(t, n)| {
            !own.iter().any(|(ot, on)| {
                on.eq_ignore_ascii_case(n)
                    && t.as_ref()
                        .is_none_or(|t| ot.as_ref().is_some_and(|ot| ot.eq_ignore_ascii_case(t)))
            }) && (t.is_some()
                || !["rowid", "oid", "_rowid_"]
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(n)))
        })
    }

    fn collect_select(
        &self,
        sel: &Select,
        own: &mut Vec<(Option<String>, String)>,
        refs: &mut Vec<(Option<String>, String)>,
        opaque: &mut bool,
    ) {
        let mut cores = vec![&sel.first];
        cores.extend(sel.compounds.iter().map(|c| &c.1));
        for core in cores {
            match core {
                SelectCore::Values(rows) => {
                    for r in rows {
                        for e in r {
                            self.collect_expr(e, own, refs, opaque);
                        }
                    }
                }
                SelectCore::Select {
                    columns,
                    from,
                    filter,
                    group_by,
                    having,
                    ..
                } => {
                    if let Some(f) = from {
                        self.collect_from(f, own, refs, opaque);
                    }
                    for c in columns {
                        if let ResultCol::Expr { expr, alias, .. } = c {
                            self.collect_expr(expr, own, refs, opaque);
                            if let Some(a) = alias {
                                own.push((None, a.clone()));
                            }
                        }
                    }
                    for e in filter.iter().chain(group_by).chain(having.iter()) {
                        self.collect_expr(e, own, refs, opaque);
                    }
                }
            }
        }
        for t in &sel.order_by {
            self.collect_expr(&t.expr, own, refs, opaque);
        }
        for e in sel.limit.iter().chain(sel.offset.iter()) {
            self.collect_expr(e, own, refs, opaque);
        }
    }

    fn collect_from(
        &self,
        f: &FromItem,
        own: &mut Vec<(Option<String>, String)>,
        refs: &mut Vec<(Option<String>, String)>,
        opaque: &mut bool,
    ) {
        match f {
            FromItem::Table { name, alias } => {
                let q = Some(alias.clone().unwrap_or_else(|| name.clone()));
                if let Some(t) = self.catalog.tables.get(&key(name)) {
                    for c in &t.columns {
                        own.push((q.clone(), c.name.clone()));
                    }
                    own.push((q, "rowid".into()));
                } else if self.catalog.views.contains_key(&key(name)) {
                    *opaque = true;
                } else {
                    for c in ["type", "name", "tbl_name", "rootpage", "sql"] {
                        own.push((q.clone(), c.into()));
                    }
                }
            }
            FromItem::Subquery { .. } => *opaque = true,
            FromItem::Join {
                left, right, on, ..
            } => {
                self.collect_from(left, own, refs, opaque);
                self.collect_from(right, own, refs, opaque);
                if let Some(o) = on {
                    self.collect_expr(o, own, refs, opaque);
                }
            }
        }
    }

    fn collect_expr(
        &self,
        e: &Expr,
        _own: &mut Vec<(Option<String>, String)>,
        refs: &mut Vec<(Option<String>, String)>,
        opaque: &mut bool,
    ) {
        walk(e, &mut |x| match x {
            Expr::Column { table, name, .. } => refs.push((table.clone(), name.clone())),
            Expr::Exists(s, _) | Expr::Subquery(s) | Expr::InSelect(_, s, _) => {
                let mut inner_own = Vec::new();
                let mut inner_refs = Vec::new();
                self.collect_select(s, &mut inner_own, &mut inner_refs, opaque);
                // Names the inner query resolves itself are not outer references.
                for r in inner_refs {
                    let resolved = inner_own.iter().any(|(ot, on): &(Option<String>, String)| {
                        on.eq_ignore_ascii_case(&r.1)
                            && r.0.as_ref().is_none_or(|t| {
                                ot.as_ref().is_some_and(|ot| ot.eq_ignore_ascii_case(t))
                            })
                    });
                    if !resolved {
                        refs.push(r);
                    }
                }
            }
            _ => {}
        });
    }

    // ----- EXPLAIN and PRAGMA ------------------------------------------------------------

    fn explain(&mut self, inner: &Stmt) -> Result<Output> {
        self.explain = Some(Vec::new());
        let r = match inner {
            Stmt::Select(s) => self.query(s, None).map(|_| ()),
            Stmt::Update(u) => self
                .table_for_write(&u.table)
                .and_then(|t| self.matching_rows(&t, u.filter.as_ref(), true).map(|_| ())),
            Stmt::Delete(d) => self
                .table_for_write(&d.table)
                .and_then(|t| self.matching_rows(&t, d.filter.as_ref(), true).map(|_| ())),
            _ => Ok(()),
        };
        let lines = self.explain.take().unwrap_or_default();
        r?;
        let rows = lines
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                vec![
                    Value::Integer(i as i64 + 2),
                    Value::Integer(0),
                    Value::Integer(0),
                    Value::Text(d),
                ]
            })
            .collect();
        Ok(Output {
            columns: Rc::from(vec![
                "id".into(),
                "parent".into(),
                "notused".into(),
                "detail".into(),
            ]),
            rows,
        })
    }

    fn pragma(&mut self, name: &str, arg: Option<&Expr>) -> Result<Output> {
        let scope = Scope::default();
        let arg_val = match arg {
            Some(Expr::Column { name, .. }) => Some(Value::Text(name.clone())),
            Some(e) => Some(self.eval(e, &Env::empty(&scope))?),
            None => None,
        };
        match name {
            "table_info" | "table_xinfo" => {
                let t = match arg_val.as_ref().and_then(Value::to_text) {
                    Some(n) => n,
                    None => return Ok(Output::default()),
                };
                let Some(t) = self.catalog.tables.get(&key(&t)).cloned() else {
                    return Ok(Output::default());
                };
                let rows = t
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let pk =
                            t.pk.iter()
                                .position(|&p| p == i)
                                .map_or(0, |p| p as i64 + 1);
                        let default = c
                            .default
                            .as_ref()
                            .map_or(Value::Null, |d| Value::Text(expr_text(d)));
                        vec![
                            Value::Integer(i as i64),
                            Value::Text(c.name.clone()),
                            Value::Text(c.decl_type.clone()),
                            Value::Integer(i64::from(c.not_null)),
                            default,
                            Value::Integer(pk),
                        ]
                    })
                    .collect();
                Ok(Output {
                    columns: ["cid", "name", "type", "notnull", "dflt_value", "pk"]
                        .iter()
                        .map(|s| (*s).to_owned())
                        .collect(),
                    rows,
                })
            }
            "index_list" => {
                let t = arg_val
                    .as_ref()
                    .and_then(Value::to_text)
                    .unwrap_or_default();
                let rows = self
                    .catalog
                    .indexes_of(&t)
                    .iter()
                    .enumerate()
                    .map(|(i, x)| {
                        vec![
                            Value::Integer(i as i64),
                            Value::Text(x.name.clone()),
                            Value::Integer(i64::from(x.unique)),
                            Value::Text("c".into()),
                            Value::Integer(0),
                        ]
                    })
                    .collect();
                Ok(Output {
                    columns: ["seq", "name", "unique", "origin", "partial"]
                        .iter()
                        .map(|s| (*s).to_owned())
                        .collect(),
                    rows,
                })
            }
            _ => match self.storage.pragma(name, arg_val.as_ref())? {
                Some(pairs) => Ok(Output {
                    columns: pairs.iter().map(|p| p.0.clone()).collect(),
                    rows: if pairs.is_empty() {
                        Vec::new()
                    } else {
                        vec![pairs.into_iter().map(|p| p.1).collect()]
                    },
                }),
                None => Ok(Output::default()),
            },
        }
    }
}

/// A short text for an expression (DEFAULT values in `table_info`).
fn expr_text(e: &Expr) -> String {
    match e {
        Expr::Lit(Value::Text(t)) => format!("'{}'", t.replace('\'', "''")),
        Expr::Lit(v) => v.to_text().unwrap_or_else(|| "NULL".into()),
        Expr::Unary(UnOp::Neg, x) => format!("-{}", expr_text(x)),
        _ => "expression".into(),
    }
}

/// Keeps the helper in use for builds without the planner's catalog functions.
#[allow(dead_code)]
fn _unused(_: &catalog::ColDef, _: Option<i64>) -> Option<i64> {
    real_as_integer(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parameter used as the probe where it lies must be what the conversion would give.
    #[test]
    fn a_probe_used_as_is_is_the_converted_value() {
        let values = [
            Value::Null,
            Value::Integer(7),
            Value::Integer(i64::MIN),
            Value::Real(1.0),
            Value::Real(1.5),
            Value::Real(f64::MAX),
            Value::Text("1".into()),
            Value::Text("1.0".into()),
            Value::Text(" 1".into()),
            Value::Text("a".into()),
            Value::Blob(b"1".to_vec()),
            Value::Blob(Vec::new()),
        ];
        let affs = [
            Affinity::Integer,
            Affinity::Text,
            Affinity::Blob,
            Affinity::Real,
            Affinity::Numeric,
        ];
        let mut as_is = 0;
        for v in &values {
            for aff in affs {
                if probes_as_is(v, aff) {
                    as_is += 1;
                    assert_eq!(probe(v.clone(), aff), *v, "{v:?} {aff:?}");
                }
            }
        }
        assert!(
            as_is > values.len(),
            "the fast path is taken for few values: {as_is}"
        );
    }
}
