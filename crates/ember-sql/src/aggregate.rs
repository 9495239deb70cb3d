//! Aggregate queries: the running state of each aggregate call (`count`, `sum`, `total`,
//! `avg`, `min`, `max`, `group_concat`/`string_agg`, and their DISTINCT forms), fed one row
//! at a time, and the groups of a query — keyed in SQLite's comparison order of their GROUP
//! BY values, each holding its calls' states and only the rows its bare columns are read
//! from (the first row, the last, the row of a lone min()/max()).
//!
//! No group keeps its rows: a row is read by every call's argument and the group key, kept
//! only if a bare column may need it, and the results are computed from the states when
//! the result columns, HAVING and ORDER BY name the calls (see [`Group`]).

use alloc::borrow::Cow;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Ordering;

use crate::ast::Expr;
use crate::error::{Result, SqlError};
use crate::eval::{Env, Scope, is_aggregate, walk};
use crate::exec::Executor;
use crate::storage::Storage;
use crate::value::{Value, compare};

/// What an aggregate call computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Count,
    Sum,
    Total,
    Avg,
    Min,
    Max,
    Concat,
}

/// One aggregate call of a query: the expression node it is (its identity: the result
/// columns, HAVING and ORDER BY find their values by it), what it computes and its
/// arguments.
#[derive(Debug)]
pub struct Call<'e> {
    node: &'e Expr,
    kind: Kind,
    /// The value argument (`None`: `count(*)`, `count()`).
    arg: Option<&'e Expr>,
    /// group_concat's separator argument.
    sep: Option<&'e Expr>,
    distinct: bool,
}

impl<'e> Call<'e> {
    /// The call `e` is, if it is an aggregate call.
    fn of(e: &'e Expr) -> Option<Call<'e>> {
        let Expr::Func {
            name,
            args,
            distinct,
            star,
        } = e
        else {
            return None;
        };
        if !is_aggregate(name, args.len(), *star) {
            return None;
        }
        let kind = match name.as_str() {
            "count" => Kind::Count,
            "sum" => Kind::Sum,
            "total" => Kind::Total,
            "avg" => Kind::Avg,
            "min" => Kind::Min,
            "max" => Kind::Max,
            _ => Kind::Concat,
        };
        Some(Call {
            node: e,
            kind,
            arg: if *star { None } else { args.first() },
            sep: if kind == Kind::Concat {
                args.get(1)
            } else {
                None
            },
            distinct: *distinct,
        })
    }
}

impl Call<'_> {
    /// Whether this is the call `node`.
    pub fn is(&self, node: &Expr) -> bool {
        core::ptr::eq(self.node, node)
    }
}

/// The positions in `scope` of the bare columns of `exprs` (those outside the arguments of
/// `calls`, their aggregate calls), each once — `None` if the whole row may be read (a
/// subquery outside the calls may name any column; a name that does not resolve cleanly).
pub fn bare_columns(exprs: &[&Expr], calls: &[Call<'_>], scope: &Scope) -> Option<Vec<usize>> {
    let mut inside: Vec<*const Expr> = Vec::new();
    for c in calls {
        if let Expr::Func { args, .. } = c.node {
            for a in args {
                walk(a, &mut |x| inside.push(x as *const Expr));
            }
        }
    }
    inside.sort_unstable();
    let mut out = Vec::new();
    let mut whole = false;
    for e in exprs {
        walk(e, &mut |x| {
            if whole || inside.binary_search(&(x as *const Expr)).is_ok() {
                return;
            }
            match x {
                Expr::Column { table, name, .. } => match scope.find(table.as_deref(), name) {
                    Ok(Some(i)) => {
                        if !out.contains(&i) {
                            out.push(i);
                        }
                    }
                    // Not a column of these rows (the enclosing query's, or an error
                    // whichever row is read).
                    Ok(None) => {}
                    Err(_) => whole = true,
                },
                Expr::Exists(..) | Expr::Subquery(_) | Expr::InSelect(..) => whole = true,
                _ => {}
            }
        });
    }
    if whole { None } else { Some(out) }
}

/// Appends the aggregate calls in `e` (outside subqueries, which have their own) to `out`.
/// A call nested in another's argument is listed too; evaluating the outer one's argument
/// on a row then fails as SQLite's misuse does.
pub fn collect_calls<'e>(e: &'e Expr, out: &mut Vec<Call<'e>>) {
    walk(e, &mut |x| {
        if let Some(c) = Call::of(x) {
            if !out.iter().any(|o| core::ptr::eq(o.node, x)) {
                out.push(c);
            }
        }
    });
}

/// A value ordered by SQLite's comparison (`1` and `1.0` are equal), for DISTINCT.
struct Distinct(Value);

impl PartialEq for Distinct {
    fn eq(&self, other: &Self) -> bool {
        compare(&self.0, &other.0) == Ordering::Equal
    }
}

impl Eq for Distinct {}

impl core::fmt::Debug for Distinct {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialOrd for Distinct {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Distinct {
    fn cmp(&self, other: &Self) -> Ordering {
        compare(&self.0, &other.0)
    }
}

/// A group's key: its GROUP BY values, ordered as SQLite sorts rows.
struct Key(Vec<Value>);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        for (x, y) in self.0.iter().zip(&other.0) {
            let o = compare(x, y);
            if o != Ordering::Equal {
                return o;
            }
        }
        self.0.len().cmp(&other.0.len())
    }
}

/// The running state of one aggregate call over one group.
#[derive(Debug, Clone)]
enum State {
    Count(i64),
    Sum(SumCtx),
    /// min() or max(): the best value so far (the first of equal ones).
    Best(Option<Value>),
    /// group_concat(): the text so far (`None`: no non-NULL value yet).
    Concat(Option<String>),
}

/// One aggregate call's state over one group, with the values a DISTINCT call has seen.
#[derive(Debug)]
pub struct Acc {
    state: State,
    seen: Option<BTreeSet<Distinct>>,
}

impl Acc {
    /// The state of `call` before any row.
    fn new(call: &Call<'_>) -> Acc {
        Acc {
            state: match call.kind {
                Kind::Count => State::Count(0),
                Kind::Sum | Kind::Total | Kind::Avg => State::Sum(SumCtx::default()),
                Kind::Min | Kind::Max => State::Best(None),
                Kind::Concat => State::Concat(None),
            },
            seen: call.distinct.then(BTreeSet::new),
        }
    }

    /// Adds one row's argument value `v` (and group_concat's separator `sep`, `None` for
    /// the default `,`). Returns whether a min()/max() took `v` as its new best value.
    fn step(&mut self, kind: Kind, v: &Value, sep: Option<&Value>) -> bool {
        if v.is_null() {
            return false;
        }
        if let Some(seen) = &mut self.seen {
            if !seen.insert(Distinct(v.clone())) {
                return false;
            }
        }
        match &mut self.state {
            State::Count(n) => *n += 1,
            State::Sum(s) => s.step(v),
            State::Best(best) => {
                let better = match best {
                    None => true,
                    Some(b) => {
                        let o = compare(v, b);
                        if kind == Kind::Max {
                            o == Ordering::Greater
                        } else {
                            o == Ordering::Less
                        }
                    }
                };
                if better {
                    *best = Some(v.clone());
                }
                return better;
            }
            State::Concat(out) => match out {
                None => {
                    let mut o = String::new();
                    push_text(&mut o, v);
                    *out = Some(o);
                }
                Some(o) => {
                    match sep {
                        Some(s) => push_text(o, s),
                        None => o.push(','),
                    }
                    push_text(o, v);
                }
            },
        }
        false
    }

    /// The call's result over the rows stepped so far.
    fn value(&self, kind: Kind) -> Result<Value> {
        Ok(match &self.state {
            State::Count(n) => Value::Integer(*n),
            State::Sum(acc) => match kind {
                Kind::Total => Value::Real(acc.real()),
                Kind::Avg => {
                    if acc.cnt == 0 {
                        Value::Null
                    } else {
                        Value::Real(acc.real() / acc.cnt as f64)
                    }
                }
                _ => {
                    if acc.cnt == 0 {
                        Value::Null
                    } else if !acc.approx {
                        Value::Integer(acc.i_sum)
                    } else if acc.ovrfl {
                        return Err(SqlError::invalid("integer overflow"));
                    } else {
                        Value::Real(acc.real())
                    }
                }
            },
            State::Best(b) => b.clone().unwrap_or(Value::Null),
            State::Concat(s) => s.clone().map_or(Value::Null, Value::Text),
        })
    }
}

/// Appends `v` as text (nothing for NULL).
fn push_text(out: &mut String, v: &Value) {
    match v {
        Value::Null => {}
        Value::Text(t) => out.push_str(t),
        _ => {
            if let Some(t) = v.to_text() {
                out.push_str(&t);
            }
        }
    }
}

/// What expressions evaluated over a group see of it: its aggregate calls' states.
#[derive(Debug)]
pub struct Group<'a> {
    calls: &'a [Call<'a>],
    accs: &'a [Acc],
}

impl Group<'_> {
    /// The value of the aggregate call `node` over the group (`None`: not one of its calls).
    pub fn value(&self, node: &Expr) -> Option<Result<Value>> {
        let k = self
            .calls
            .iter()
            .position(|c| core::ptr::eq(c.node, node))?;
        Some(self.accs.get(k)?.value(self.calls[k].kind))
    }
}

/// One group while the rows are read.
struct Slot {
    accs: Vec<Acc>,
    /// Whether a row was fed in.
    fed: bool,
    /// The group's first row (when a bare column may read a column grouped on).
    first: Option<Vec<Value>>,
    /// Its last row (when a bare column may read another column), or with a lone
    /// min()/max() the last row read before the call had a value.
    last: Option<Vec<Value>>,
    /// With a lone min()/max(): the row its value came from.
    best: Option<Vec<Value>>,
}

/// Which rows a group keeps for its bare columns (columns outside aggregate calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// None: no bare column reads a row.
    Nothing,
    /// The first row: every bare column is one the query groups on.
    First,
    /// The first and the last row.
    FirstLast,
    /// With exactly one aggregate call in the result columns, a min() or max() (of this
    /// index among the calls): every bare column, grouped-on ones too, comes from the row
    /// that has its value (the group's last row if none has one).
    MinMax(usize),
}

/// The groups of an aggregate query while its rows are fed in one at a time.
pub struct Grouper<'q> {
    scope: &'q Scope,
    outer: Option<&'q Env<'q>>,
    calls: &'q [Call<'q>],
    keys: &'q [&'q Expr],
    /// Positions of the columns grouped on (their values come from the first row).
    key_cols: &'q [usize],
    keep: Keep,
    /// Group positions in key order (GROUP BY only).
    map: BTreeMap<Key, usize>,
    slots: Vec<Slot>,
    /// A reused buffer for a row's key.
    key: Vec<Value>,
}

/// A finished group: its calls' states and the row its bare columns are read from.
pub struct Finished {
    /// The calls' states.
    pub accs: Vec<Acc>,
    /// The row bare columns read (`None`: a group of no rows).
    pub row: Option<Vec<Value>>,
}

impl<'q> Grouper<'q> {
    /// Groups by the values of `keys` (none: one group, even of no rows), computing `calls`
    /// for each, keeping the rows `keep` asks for.
    pub fn new(
        scope: &'q Scope,
        outer: Option<&'q Env<'q>>,
        calls: &'q [Call<'q>],
        keys: &'q [&'q Expr],
        key_cols: &'q [usize],
        keep: Keep,
    ) -> Grouper<'q> {
        let mut g = Grouper {
            scope,
            outer,
            calls,
            keys,
            key_cols,
            keep,
            map: BTreeMap::new(),
            slots: Vec::new(),
            key: Vec::with_capacity(keys.len()),
        };
        if keys.is_empty() {
            g.slots.push(g.slot());
        }
        g
    }

    fn slot(&self) -> Slot {
        Slot {
            accs: self.calls.iter().map(Acc::new).collect(),
            fed: false,
            first: None,
            last: None,
            best: None,
        }
    }

    /// Adds one row (of `scope`): its group's calls step on it. With `owned` the row may
    /// be moved out of `row`; else it is copied where it is kept.
    pub fn feed<S: Storage>(
        &mut self,
        ex: &mut Executor<S>,
        row: &mut Vec<Value>,
        owned: bool,
    ) -> Result<()> {
        let env = Env {
            scope: self.scope,
            row,
            outer: self.outer,
            group: None,
        };
        let at = if self.keys.is_empty() {
            0
        } else {
            self.key.clear();
            for g in self.keys {
                self.key.push(ex.eval(g, &env)?);
            }
            let key = Key(core::mem::take(&mut self.key));
            match self.map.get(&key) {
                Some(&at) => {
                    self.key = key.0;
                    at
                }
                None => {
                    let at = self.slots.len();
                    self.map.insert(key, at);
                    self.slots.push(self.slot());
                    self.key = Vec::with_capacity(self.keys.len());
                    at
                }
            }
        };
        let slot = &mut self.slots[at];
        let mut improved = false;
        for (k, (call, acc)) in self.calls.iter().zip(&mut slot.accs).enumerate() {
            // Values borrowed from the row where the argument is one of its columns.
            let v = match call.arg {
                Some(a) => ex.operand(a, &env)?,
                None => Cow::Owned(Value::Integer(1)),
            };
            let sep = match call.sep {
                Some(s) => Some(ex.operand(s, &env)?),
                None => None,
            };
            if acc.step(call.kind, &v, sep.as_deref()) && self.keep == Keep::MinMax(k) {
                improved = true;
            }
        }
        let fresh = !slot.fed;
        slot.fed = true;
        let take = |row: &mut Vec<Value>| {
            if owned {
                core::mem::take(row)
            } else {
                row.clone()
            }
        };
        match self.keep {
            Keep::Nothing => {}
            Keep::First => {
                if fresh {
                    slot.first = Some(take(row));
                }
            }
            Keep::FirstLast => {
                if fresh {
                    slot.first = Some(row.clone());
                }
                slot.last = Some(take(row));
            }
            Keep::MinMax(_) => {
                if improved {
                    slot.best = Some(take(row));
                } else if slot.best.is_none() {
                    slot.last = Some(take(row));
                }
            }
        }
        Ok(())
    }

    /// The groups in key order, each with the row its bare columns are read from: the
    /// last row with the grouped-on columns of the first, or with a lone min()/max() the
    /// row of its value.
    pub fn finish(self) -> Vec<Finished> {
        let mut slots: Vec<Option<Slot>> = self.slots.into_iter().map(Some).collect();
        let order: Vec<usize> = if self.keys.is_empty() {
            (0..slots.len()).collect()
        } else {
            self.map.into_values().collect()
        };
        let mut out = Vec::with_capacity(order.len());
        for at in order {
            let Some(s) = slots.get_mut(at).and_then(Option::take) else {
                continue;
            };
            let row = match self.keep {
                Keep::MinMax(_) => s.best.or(s.last),
                _ => match (s.first, s.last) {
                    (Some(first), Some(mut last)) => {
                        for &i in self.key_cols {
                            if let (Some(d), Some(v)) = (last.get_mut(i), first.get(i)) {
                                *d = v.clone();
                            }
                        }
                        Some(last)
                    }
                    (first, last) => first.or(last),
                },
            };
            out.push(Finished { accs: s.accs, row });
        }
        out
    }
}

/// The view of a finished group its expressions are evaluated with.
pub fn group_of<'a>(calls: &'a [Call<'a>], accs: &'a [Acc]) -> Group<'a> {
    Group { calls, accs }
}

/// The running state of sum(), total() and avg(), as SQLite keeps it: an exact integer sum
/// until a non-integer (or an overflow) arrives, then Kahan-Babuska-Neumaier summation.
#[derive(Debug, Clone, Default)]
struct SumCtx {
    r_sum: f64,
    r_err: f64,
    i_sum: i64,
    cnt: u64,
    approx: bool,
    ovrfl: bool,
}

const TWO52: i64 = 4_503_599_627_370_496;

impl SumCtx {
    fn kbn(&mut self, r: f64) {
        let s = self.r_sum;
        let t = s + r;
        if s.abs() > r.abs() {
            self.r_err += (s - t) + r;
        } else {
            self.r_err += (r - t) + s;
        }
        self.r_sum = t;
    }

    fn kbn_int(&mut self, i: i64) {
        if !(-TWO52 + 1..TWO52).contains(&i) {
            let small = i % 16384;
            self.kbn((i - small) as f64);
            self.kbn(small as f64);
        } else {
            self.kbn(i as f64);
        }
    }

    fn init(&mut self, i: i64) {
        if !(-TWO52 + 1..TWO52).contains(&i) {
            let small = i % 16384;
            self.r_sum = (i - small) as f64;
            self.r_err = small as f64;
        } else {
            self.r_sum = i as f64;
            self.r_err = 0.0;
        }
    }

    /// Adds a non-NULL value (text counts by its numeric type, as
    /// `sqlite3_value_numeric_type` gives it).
    fn step(&mut self, v: &Value) {
        let int = match v {
            Value::Integer(i) => Some(*i),
            Value::Text(t) => match crate::value::exact_number(t) {
                Some(Value::Integer(i)) => Some(i),
                _ => None,
            },
            _ => None,
        };
        self.cnt += 1;
        if !self.approx {
            match int {
                None => {
                    self.init(self.i_sum);
                    self.approx = true;
                    self.kbn(v.to_f64());
                }
                Some(i) => match self.i_sum.checked_add(i) {
                    Some(x) => self.i_sum = x,
                    None => {
                        self.ovrfl = true;
                        self.init(self.i_sum);
                        self.approx = true;
                        self.kbn_int(i);
                    }
                },
            }
        } else {
            match int {
                Some(i) => self.kbn_int(i),
                None => {
                    self.ovrfl = false;
                    self.kbn(v.to_f64());
                }
            }
        }
    }

    /// The sum as a real.
    fn real(&self) -> f64 {
        if self.approx {
            if self.r_err.is_finite() {
                self.r_sum + self.r_err
            } else {
                self.r_sum
            }
        } else {
            self.i_sum as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn call(sql: &str) -> Expr {
        crate::parser::parse_expr(sql).unwrap()
    }

    /// Steps `sql`'s state on the values (its separator: the row's position as text) and
    /// returns the result and, for each value, whether a min()/max() took it.
    fn run(sql: &str, vals: &[Value]) -> (Result<Value>, Vec<bool>) {
        let e = call(sql);
        let c = Call::of(&e).unwrap();
        let mut acc = Acc::new(&c);
        let mut took = Vec::new();
        for (i, v) in vals.iter().enumerate() {
            let sep = Value::Text(alloc::format!("<{i}>"));
            // (As `Grouper::feed` steps `count(*)`: on 1 for every row.)
            let v = if c.arg.is_some() {
                v.clone()
            } else {
                Value::Integer(1)
            };
            took.push(acc.step(c.kind, &v, Some(&sep)));
        }
        (acc.value(c.kind), took)
    }

    #[test]
    fn distinct_compares_as_sqlite_and_skips_nulls() {
        let vals = [
            Value::Integer(1),
            Value::Real(1.0),
            Value::Text("1".into()),
            Value::Null,
            Value::Integer(2),
            Value::Integer(1),
        ];
        assert_eq!(
            run("count(DISTINCT x)", &vals).0.unwrap(),
            Value::Integer(3)
        );
        assert_eq!(run("count(x)", &vals).0.unwrap(), Value::Integer(5));
        assert_eq!(run("count(*)", &vals).0.unwrap(), Value::Integer(6));
        // 1 + '1' (an integer as text) + 2; the first of 1 and 1.0 is kept.
        assert_eq!(run("sum(DISTINCT x)", &vals).0.unwrap(), Value::Integer(4));
        assert_eq!(
            run("group_concat(DISTINCT x)", &vals).0.unwrap(),
            Value::Text("1<2>1<4>2".into())
        );
    }

    #[test]
    fn min_and_max_keep_the_first_of_equal_values_and_say_when_they_take_one() {
        let vals = [
            Value::Null,
            Value::Integer(5),
            Value::Real(5.0),
            Value::Integer(7),
            Value::Integer(3),
        ];
        let (v, took) = run("max(x)", &vals);
        assert_eq!(v.unwrap(), Value::Integer(7));
        assert_eq!(took, vec![false, true, false, true, false]);
        let (v, took) = run("min(x)", &vals[..3]);
        assert_eq!(v.unwrap(), Value::Integer(5));
        assert_eq!(took, vec![false, true, false]);
        assert_eq!(run("min(x)", &[Value::Null]).0.unwrap(), Value::Null);
    }

    #[test]
    fn group_concat_puts_each_rows_separator_before_its_value() {
        let vals = [
            Value::Null,
            Value::Text("a".into()),
            Value::Null,
            Value::Integer(2),
        ];
        assert_eq!(
            run("group_concat(x, '-')", &vals).0.unwrap(),
            Value::Text("a<3>2".into())
        );
        assert_eq!(run("string_agg(x, ',')", &[]).0.unwrap(), Value::Null);
    }

    #[test]
    fn sums_overflow_as_sqlite_does() {
        let big = [Value::Integer(i64::MAX), Value::Integer(1)];
        assert!(
            matches!(run("sum(x)", &big).0, Err(SqlError::Invalid(m)) if m == "integer overflow")
        );
        assert_eq!(
            run("total(x)", &big).0.unwrap(),
            Value::Real(i64::MAX as f64 + 1.0)
        );
        // A real after the overflow makes the sum a real.
        let mixed = [
            Value::Integer(i64::MAX),
            Value::Integer(1),
            Value::Real(0.5),
        ];
        assert!(matches!(run("sum(x)", &mixed).0, Ok(Value::Real(_))));
        assert_eq!(
            run("avg(x)", &[Value::Integer(1), Value::Integer(2)])
                .0
                .unwrap(),
            Value::Real(1.5)
        );
        assert_eq!(run("avg(x)", &[]).0.unwrap(), Value::Null);
        assert_eq!(run("total(x)", &[]).0.unwrap(), Value::Real(0.0));
        assert_eq!(run("sum(x)", &[Value::Null]).0.unwrap(), Value::Null);
    }

    #[test]
    fn keys_order_as_sqlite_sorts_rows() {
        let k = |v: Vec<Value>| Key(v);
        assert_eq!(
            k(vec![Value::Integer(1)]).cmp(&k(vec![Value::Real(1.0)])),
            Ordering::Equal
        );
        assert_eq!(
            k(vec![Value::Null]).cmp(&k(vec![Value::Integer(-5)])),
            Ordering::Less
        );
        assert_eq!(
            k(vec![Value::Integer(9)]).cmp(&k(vec![Value::Text("1".into())])),
            Ordering::Less
        );
    }
}
