//! Relational operators on record streams, without allocation: selection, projection,
//! group-by with count / sum / min / max / avg, a key join of two series, and [`exec`].
//!
//! Every operator is a [`Source`]: `advance` moves to the next row and says whether there is
//! one, `row` shows it (borrowed until the next `advance`). Operators wrap sources, so they
//! chain into execution trees like EmbedDB's advanced query API: a series iterator at the
//! leaves, then e.g. `Select` → `GroupBy` → `Select` (a HAVING) → `exec`. Where an operator
//! produces new bytes (projection, group-by, join) the caller gives it a small output buffer.

use crate::error::Result;
use crate::value::{Col, ColType, Value};

/// One row of a stream: a key and data bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'r> {
    /// The key (for a group-by's output, the group).
    pub key: u64,
    /// The data bytes.
    pub data: &'r [u8],
}

impl Row<'_> {
    /// Reads a column of the row.
    pub fn get(&self, col: Col) -> Option<Value> {
        col.get(self.key, self.data)
    }
}

/// A stream of rows.
pub trait Source {
    /// Moves to the next row; `Ok(false)` at the end.
    fn advance(&mut self) -> Result<bool>;
    /// The current row (an empty row before the first `advance` or after the end).
    fn row(&self) -> Row<'_>;
}

impl<T: Source + ?Sized> Source for &mut T {
    fn advance(&mut self) -> Result<bool> {
        (**self).advance()
    }
    fn row(&self) -> Row<'_> {
        (**self).row()
    }
}

const EMPTY: Row<'static> = Row { key: 0, data: &[] };

/// Runs `f` on every row of `src` until it returns `false`; returns the rows seen.
pub fn exec<S: Source>(mut src: S, mut f: impl FnMut(&Row<'_>) -> bool) -> Result<u64> {
    let mut n = 0;
    while src.advance()? {
        n += 1;
        if !f(&src.row()) {
            break;
        }
    }
    Ok(n)
}

/// A comparison for [`cmp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `>=`
    Ge,
    /// `>`
    Gt,
}

/// A predicate `col op value` for [`Select`] (false when the column is missing).
pub fn cmp(col: Col, op: Cmp, value: Value) -> impl Fn(&Row<'_>) -> bool {
    move |r| {
        let Some(v) = r.get(col) else { return false };
        let o = v.cmp_num(value);
        match op {
            Cmp::Lt => o.is_lt(),
            Cmp::Le => o.is_le(),
            Cmp::Eq => o.is_eq(),
            Cmp::Ne => o.is_ne(),
            Cmp::Ge => o.is_ge(),
            Cmp::Gt => o.is_gt(),
        }
    }
}

/// Selection: the rows of `src` for which the predicate holds.
pub struct Select<S, F> {
    src: S,
    pred: F,
}

impl<S: Source, F: FnMut(&Row<'_>) -> bool> Select<S, F> {
    /// The rows of `src` satisfying `pred`.
    pub fn new(src: S, pred: F) -> Self {
        Select { src, pred }
    }
}

impl<S: Source, F: FnMut(&Row<'_>) -> bool> Source for Select<S, F> {
    fn advance(&mut self) -> Result<bool> {
        while self.src.advance()? {
            if (self.pred)(&self.src.row()) {
                return Ok(true);
            }
        }
        Ok(false)
    }
    fn row(&self) -> Row<'_> {
        self.src.row()
    }
}

/// Projection: each row mapped by a function into the output buffer; the function returns
/// the output key and how many bytes of the buffer it filled.
pub struct Project<'b, S, F> {
    src: S,
    f: F,
    out: &'b mut [u8],
    key: u64,
    len: usize,
    live: bool,
}

impl<'b, S: Source, F: FnMut(&Row<'_>, &mut [u8]) -> (u64, usize)> Project<'b, S, F> {
    /// Rows of `src` mapped by `f` into `out`.
    pub fn new(src: S, out: &'b mut [u8], f: F) -> Self {
        Project {
            src,
            f,
            out,
            key: 0,
            len: 0,
            live: false,
        }
    }
}

impl<S: Source, F: FnMut(&Row<'_>, &mut [u8]) -> (u64, usize)> Source for Project<'_, S, F> {
    fn advance(&mut self) -> Result<bool> {
        self.live = self.src.advance()?;
        if self.live {
            let (k, n) = (self.f)(&self.src.row(), self.out);
            self.key = k;
            self.len = n.min(self.out.len());
        }
        Ok(self.live)
    }
    fn row(&self) -> Row<'_> {
        if !self.live {
            return EMPTY;
        }
        Row {
            key: self.key,
            data: &self.out[..self.len],
        }
    }
}

/// Projection onto columns: the bytes of each column, one after another (the key as 8
/// bytes), keeping the row's key.
pub struct ProjectCols<'b, S> {
    src: S,
    cols: &'b [Col],
    out: &'b mut [u8],
    len: usize,
    key: u64,
    live: bool,
}

impl<'b, S: Source> ProjectCols<'b, S> {
    /// Rows of `src` cut down to `cols`, written into `out` (which must hold them all; what
    /// does not fit is dropped).
    pub fn new(src: S, cols: &'b [Col], out: &'b mut [u8]) -> Self {
        ProjectCols {
            src,
            cols,
            out,
            len: 0,
            key: 0,
            live: false,
        }
    }

    /// The column of the output that holds input column `i` of the projection.
    pub fn out_col(cols: &[Col], i: usize) -> Option<Col> {
        let mut off = 0;
        for (j, c) in cols.iter().enumerate() {
            let (w, ty) = match *c {
                Col::Key => (8, ColType::U64),
                Col::Data { ty, .. } => (ty.width(), ty),
            };
            if j == i {
                return Some(Col::at(off, ty));
            }
            off += w;
        }
        None
    }
}

impl<S: Source> Source for ProjectCols<'_, S> {
    fn advance(&mut self) -> Result<bool> {
        self.live = self.src.advance()?;
        if self.live {
            let r = self.src.row();
            self.key = r.key;
            let mut at = 0;
            for c in self.cols {
                let bytes: &[u8] = match *c {
                    Col::Key => &[],
                    Col::Data { offset, ty } => {
                        r.data.get(offset..offset + ty.width()).unwrap_or(&[])
                    }
                };
                let kb = r.key.to_le_bytes();
                let (src, w) = match *c {
                    Col::Key => (&kb[..], 8),
                    Col::Data { ty, .. } => (bytes, ty.width()),
                };
                let end = (at + w).min(self.out.len());
                let n = end - at.min(end);
                if n > 0 && src.len() >= n {
                    self.out[at..end].copy_from_slice(&src[..n]);
                }
                at = end;
            }
            self.len = at;
        }
        Ok(self.live)
    }
    fn row(&self) -> Row<'_> {
        if !self.live {
            return EMPTY;
        }
        Row {
            key: self.key,
            data: &self.out[..self.len],
        }
    }
}

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    /// Rows in the group.
    Count,
    /// Sum of the column (integers exactly, saturating at the `i64` range).
    Sum,
    /// Smallest value of the column.
    Min,
    /// Largest value of the column.
    Max,
    /// Average of the column (a float).
    Avg,
}

/// An aggregate: a function of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agg {
    /// The function.
    pub kind: AggKind,
    /// The column (ignored by `Count`).
    pub col: Col,
}

impl Agg {
    /// `count(*)`.
    pub const fn count() -> Agg {
        Agg {
            kind: AggKind::Count,
            col: Col::Key,
        }
    }
    /// `sum(col)`.
    pub const fn sum(col: Col) -> Agg {
        Agg {
            kind: AggKind::Sum,
            col,
        }
    }
    /// `min(col)`.
    pub const fn min(col: Col) -> Agg {
        Agg {
            kind: AggKind::Min,
            col,
        }
    }
    /// `max(col)`.
    pub const fn max(col: Col) -> Agg {
        Agg {
            kind: AggKind::Max,
            col,
        }
    }
    /// `avg(col)`.
    pub const fn avg(col: Col) -> Agg {
        Agg {
            kind: AggKind::Avg,
            col,
        }
    }
}

/// The running state of one aggregate over one group.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AggState {
    count: u64,
    isum: i128,
    fsum: f64,
    float: bool,
    min: Option<Value>,
    max: Option<Value>,
}

impl AggState {
    fn add(&mut self, v: Option<Value>) {
        self.count += 1;
        let Some(v) = v else { return };
        match v {
            Value::Int(i) => self.isum += i128::from(i),
            Value::Float(f) => {
                self.float = true;
                self.fsum += f;
            }
        }
        if self.min.is_none_or(|m| v.cmp_num(m).is_lt()) {
            self.min = Some(v);
        }
        if self.max.is_none_or(|m| v.cmp_num(m).is_gt()) {
            self.max = Some(v);
        }
    }

    fn result(&self, kind: AggKind) -> Value {
        let sum = || {
            if self.float {
                Value::Float(self.fsum + self.isum as f64)
            } else {
                Value::Int(self.isum.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
            }
        };
        match kind {
            AggKind::Count => Value::Int(self.count as i64),
            AggKind::Sum => sum(),
            AggKind::Min => self.min.unwrap_or(Value::Int(0)),
            AggKind::Max => self.max.unwrap_or(Value::Int(0)),
            AggKind::Avg => {
                if self.count == 0 {
                    Value::Float(0.0)
                } else {
                    Value::Float(sum().as_f64() / self.count as f64)
                }
            }
        }
    }
}

/// Group-by over consecutive rows with the same group (the input is in key order, so
/// grouping by a function of the key — `key / 86400` — sees each group once): one output row
/// per group, its key the group, its data one 8-byte little-endian value per aggregate
/// (`i64`, or `f64` for averages and for sums, minimums and maximums of float columns; read
/// them with [`GroupBy::col`] or [`GroupBy::value`]).
pub struct GroupBy<'b, S, G> {
    src: S,
    group: G,
    aggs: &'b [Agg],
    state: &'b mut [AggState],
    out: &'b mut [u8],
    cur: Option<i64>,
    have_row: bool,
    done: bool,
    key: u64,
    live: bool,
}

impl<'b, S: Source, G: FnMut(&Row<'_>) -> i64> GroupBy<'b, S, G> {
    /// Groups `src` by `group`, computing `aggs` with one state each in `state` and writing
    /// 8 bytes per aggregate into `out` (both must be at least that long; extra aggregates
    /// are ignored).
    pub fn new(
        src: S,
        group: G,
        aggs: &'b [Agg],
        state: &'b mut [AggState],
        out: &'b mut [u8],
    ) -> Self {
        let n = aggs.len().min(state.len()).min(out.len() / 8);
        GroupBy {
            src,
            group,
            aggs: &aggs[..n],
            state,
            out,
            cur: None,
            have_row: false,
            done: false,
            key: 0,
            live: false,
        }
    }

    /// The output column of aggregate `i`.
    pub fn col(&self, i: usize) -> Col {
        let float = matches!(self.out_value(i), Some(Value::Float(_)));
        Col::at(8 * i, if float { ColType::F64 } else { ColType::I64 })
    }

    /// The current group's value of aggregate `i`.
    pub fn value(&self, i: usize) -> Option<Value> {
        if self.live { self.out_value(i) } else { None }
    }

    fn out_value(&self, i: usize) -> Option<Value> {
        let agg = self.aggs.get(i)?;
        let st = self.state.get(i)?;
        Some(st.result(agg.kind))
    }

    fn emit(&mut self, group: i64) {
        for (i, (agg, st)) in self.aggs.iter().zip(self.state.iter()).enumerate() {
            let bytes = match st.result(agg.kind) {
                Value::Int(v) => v.to_le_bytes(),
                Value::Float(f) => f.to_le_bytes(),
            };
            self.out[8 * i..8 * i + 8].copy_from_slice(&bytes);
        }
        self.key = group as u64;
        self.live = true;
    }
}

impl<S: Source, G: FnMut(&Row<'_>) -> i64> Source for GroupBy<'_, S, G> {
    fn advance(&mut self) -> Result<bool> {
        self.live = false;
        if self.done {
            return Ok(false);
        }
        loop {
            if !self.have_row {
                if self.src.advance()? {
                    self.have_row = true;
                } else {
                    self.done = true;
                    return match self.cur.take() {
                        Some(g) => {
                            self.emit(g);
                            Ok(true)
                        }
                        None => Ok(false),
                    };
                }
            }
            let row = self.src.row();
            let g = (self.group)(&row);
            match self.cur {
                Some(c) if c != g => {
                    // This row starts the next group; the finished one goes out first.
                    self.cur = None;
                    self.emit(c);
                    return Ok(true);
                }
                Some(_) => {}
                None => {
                    self.cur = Some(g);
                    for st in self.state.iter_mut() {
                        *st = AggState::default();
                    }
                }
            }
            for (agg, st) in self.aggs.iter().zip(self.state.iter_mut()) {
                st.add(row.get(agg.col));
            }
            self.have_row = false;
        }
    }
    fn row(&self) -> Row<'_> {
        if !self.live {
            return EMPTY;
        }
        Row {
            key: self.key,
            data: &self.out[..8 * self.aggs.len()],
        }
    }
}

/// Key join of two sources in ascending key order (two series, or a series and a projection
/// that shifts its keys): one output row per key present in both, its data the left row's
/// bytes then the right row's, in the output buffer. Keys are expected unique on each side
/// (equal keys pair up in order).
pub struct KeyJoin<'b, A, B> {
    a: A,
    b: B,
    out: &'b mut [u8],
    need_a: bool,
    need_b: bool,
    key: u64,
    len: usize,
    live: bool,
    left_len: usize,
}

impl<'b, A: Source, B: Source> KeyJoin<'b, A, B> {
    /// Joins `a` and `b` on equal keys into `out`.
    pub fn new(a: A, b: B, out: &'b mut [u8]) -> Self {
        KeyJoin {
            a,
            b,
            out,
            need_a: true,
            need_b: true,
            key: 0,
            len: 0,
            live: false,
            left_len: 0,
        }
    }

    /// Bytes of the left row in the current output (the right row's bytes start there).
    pub fn left_len(&self) -> usize {
        self.left_len
    }
}

impl<A: Source, B: Source> Source for KeyJoin<'_, A, B> {
    fn advance(&mut self) -> Result<bool> {
        self.live = false;
        loop {
            if self.need_a {
                if !self.a.advance()? {
                    return Ok(false);
                }
                self.need_a = false;
            }
            if self.need_b {
                if !self.b.advance()? {
                    return Ok(false);
                }
                self.need_b = false;
            }
            let (ra, rb) = (self.a.row(), self.b.row());
            match ra.key.cmp(&rb.key) {
                core::cmp::Ordering::Less => self.need_a = true,
                core::cmp::Ordering::Greater => self.need_b = true,
                core::cmp::Ordering::Equal => {
                    let na = ra.data.len().min(self.out.len());
                    self.out[..na].copy_from_slice(&ra.data[..na]);
                    let nb = rb.data.len().min(self.out.len() - na);
                    self.out[na..na + nb].copy_from_slice(&rb.data[..nb]);
                    self.key = ra.key;
                    self.len = na + nb;
                    self.left_len = na;
                    self.need_a = true;
                    self.need_b = true;
                    self.live = true;
                    return Ok(true);
                }
            }
        }
    }
    fn row(&self) -> Row<'_> {
        if !self.live {
            return EMPTY;
        }
        Row {
            key: self.key,
            data: &self.out[..self.len],
        }
    }
}

/// A source over rows held in a slice (tests, and feeding operators from elsewhere).
pub struct SliceSource<'r> {
    rows: &'r [(u64, &'r [u8])],
    at: usize,
}

impl<'r> SliceSource<'r> {
    /// The rows of `rows`, in order.
    pub fn new(rows: &'r [(u64, &'r [u8])]) -> Self {
        SliceSource { rows, at: 0 }
    }
}

impl Source for SliceSource<'_> {
    fn advance(&mut self) -> Result<bool> {
        if self.at < self.rows.len() {
            self.at += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }
    fn row(&self) -> Row<'_> {
        match self.at.checked_sub(1).and_then(|i| self.rows.get(i)) {
            Some(&(key, data)) => Row { key, data },
            None => EMPTY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> [(u64, [u8; 4]); 6] {
        [
            (1, 5i32.to_le_bytes()),
            (2, (-3i32).to_le_bytes()),
            (10, 7i32.to_le_bytes()),
            (11, 1i32.to_le_bytes()),
            (12, 9i32.to_le_bytes()),
            (20, 4i32.to_le_bytes()),
        ]
    }

    #[test]
    fn group_by_min_max_avg_count_sum() {
        let data = rows();
        let refs: [(u64, &[u8]); 6] = core::array::from_fn(|i| (data[i].0, &data[i].1[..]));
        let aggs = [
            Agg::count(),
            Agg::sum(Col::i32(0)),
            Agg::min(Col::i32(0)),
            Agg::max(Col::i32(0)),
            Agg::avg(Col::i32(0)),
        ];
        let mut st = [AggState::default(); 5];
        let mut out = [0u8; 40];
        let mut g = GroupBy::new(
            SliceSource::new(&refs),
            |r| (r.key / 10) as i64,
            &aggs,
            &mut st,
            &mut out,
        );
        let mut got = [(0u64, [Value::Int(0); 5]); 3];
        let mut n = 0;
        while g.advance().unwrap() {
            got[n].0 = g.row().key;
            for (i, v) in got[n].1.iter_mut().enumerate() {
                *v = g.row().get(g.col(i)).unwrap();
            }
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(got[0].0, 0);
        assert_eq!(
            got[0].1,
            [
                Value::Int(2),
                Value::Int(2),
                Value::Int(-3),
                Value::Int(5),
                Value::Float(1.0)
            ]
        );
        assert_eq!(got[1].1[0], Value::Int(3));
        assert_eq!(got[1].1[4], Value::Float(17.0 / 3.0));
        assert_eq!(got[2].1[1], Value::Int(4));
    }

    #[test]
    fn select_project_join_and_exec_chain() {
        let data = rows();
        let refs: [(u64, &[u8]); 6] = core::array::from_fn(|i| (data[i].0, &data[i].1[..]));
        let sel = Select::new(
            SliceSource::new(&refs),
            cmp(Col::i32(0), Cmp::Gt, Value::Int(4)),
        );
        let mut buf = [0u8; 4];
        // Shift keys by one and keep the value.
        let shifted = Project::new(sel, &mut buf, |r, out| {
            out.copy_from_slice(r.data);
            (r.key + 1, 4)
        });
        let mut jout = [0u8; 8];
        let join = KeyJoin::new(shifted, SliceSource::new(&refs), &mut jout);
        let mut keys = [0u64; 6];
        let mut n = 0;
        exec(join, |r| {
            keys[n] = r.key;
            n += 1;
            true
        })
        .unwrap();
        // Values > 4 at keys 1, 10, 12 -> shifted 2, 11, 13; present on the right: 2, 11.
        assert_eq!(&keys[..n], &[2, 11]);
    }
}
