//! Conversions between Rust types and SQL values, and parameter lists (rusqlite's shapes).

use ember_sql::Value;
use ember_table::ValueRef;

use crate::storage::{assign_ref, value_ref};
use crate::{Error, Result};

/// A Rust value that can be bound to a parameter.
pub trait ToSql {
    /// The SQL value.
    fn to_sql(&self) -> Result<Value>;

    /// Writes the SQL value into `slot`, reusing the buffer of the text or blob value there
    /// (so binding a statement again allocates nothing for it). By default
    /// `*slot = self.to_sql()?`; text and blobs reuse.
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        *slot = self.to_sql()?;
        Ok(())
    }
}

/// Puts `bytes` into `slot` as a blob, in the buffer of the blob there if there is one.
fn blob_in(slot: &mut Value, bytes: &[u8]) {
    assign_ref(slot, ValueRef::Blob(bytes));
}

/// Puts `text` into `slot` as text, in the buffer of the text there if there is one.
fn text_in(slot: &mut Value, text: &str) {
    assign_ref(slot, ValueRef::Text(text));
}

/// A Rust type a column value can be read as.
pub trait FromSql: Sized {
    /// Converts, or says why not (the caller adds the column).
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str>;
}

macro_rules! int_to_sql {
    ($($t:ty),*) => {$(
        impl ToSql for $t {
            fn to_sql(&self) -> Result<Value> {
                i64::try_from(*self).map(Value::Integer).map_err(|_| Error::ToSqlConversion(format!("{} does not fit a 64-bit integer", self)))
            }
        }
        impl FromSql for $t {
            fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
                match v {
                    Value::Integer(i) => <$t>::try_from(*i).map_err(|_| "an integer out of range"),
                    _ => Err(v.type_name()),
                }
            }
        }
    )*};
}
int_to_sql!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl ToSql for f64 {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Real(*self))
    }
}
impl ToSql for f32 {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Real(f64::from(*self)))
    }
}
impl ToSql for bool {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Integer(i64::from(*self)))
    }
}
impl ToSql for str {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Text(self.to_string()))
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        text_in(slot, self);
        Ok(())
    }
}
impl ToSql for String {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Text(self.clone()))
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        text_in(slot, self);
        Ok(())
    }
}
impl ToSql for [u8] {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Blob(self.to_vec()))
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        blob_in(slot, self);
        Ok(())
    }
}
impl ToSql for Vec<u8> {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Blob(self.clone()))
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        blob_in(slot, self);
        Ok(())
    }
}
impl<const N: usize> ToSql for [u8; N] {
    fn to_sql(&self) -> Result<Value> {
        Ok(Value::Blob(self.to_vec()))
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        blob_in(slot, self);
        Ok(())
    }
}
impl ToSql for Value {
    fn to_sql(&self) -> Result<Value> {
        Ok(self.clone())
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        assign_ref(slot, value_ref(self));
        Ok(())
    }
}
impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Result<Value> {
        match self {
            Some(v) => v.to_sql(),
            None => Ok(Value::Null),
        }
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        match self {
            Some(v) => v.to_sql_in(slot),
            None => {
                *slot = Value::Null;
                Ok(())
            }
        }
    }
}
impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Result<Value> {
        (**self).to_sql()
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        (**self).to_sql_in(slot)
    }
}
impl<T: ToSql + ?Sized> ToSql for Box<T> {
    fn to_sql(&self) -> Result<Value> {
        (**self).to_sql()
    }
    fn to_sql_in(&self, slot: &mut Value) -> Result<()> {
        (**self).to_sql_in(slot)
    }
}

impl FromSql for f64 {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Real(r) => Ok(*r),
            Value::Integer(i) => Ok(*i as f64),
            _ => Err(v.type_name()),
        }
    }
}
impl FromSql for f32 {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        f64::from_sql(v).map(|f| f as f32)
    }
}
impl FromSql for bool {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Integer(i) => Ok(*i != 0),
            _ => Err(v.type_name()),
        }
    }
}
impl FromSql for String {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Text(t) => Ok(t.clone()),
            _ => Err(v.type_name()),
        }
    }
}
impl FromSql for Vec<u8> {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(t) => Ok(t.as_bytes().to_vec()),
            _ => Err(v.type_name()),
        }
    }
}
impl FromSql for Value {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        Ok(v.clone())
    }
}
impl<T: FromSql> FromSql for Option<T> {
    fn from_sql(v: &Value) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Null => Ok(None),
            v => T::from_sql(v).map(Some),
        }
    }
}

/// A list of parameter values: positional (`params![…]`, arrays, tuples, `()`) or named
/// (`named_params!{":a": 1}`).
pub trait Params {
    /// The values, by parameter position; `names` gives the statement's parameter names.
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>>;

    /// [`bind`](Self::bind) into `out`, which holds an earlier statement's values: their
    /// text and blob buffers are reused where the same position gets text or a blob again
    /// ([`ToSql::to_sql_in`]). By default `*out = self.bind(names)?`.
    fn bind_in(self, names: &[Option<String>], out: &mut Vec<Value>) -> Result<()>
    where
        Self: Sized,
    {
        *out = self.bind(names)?;
        Ok(())
    }
}

/// Binds `n` positional values into `out` (reusing its slots), value `i` written by
/// `put(i, slot)`; the count must be the statement's.
fn positional_in(
    n: usize,
    names: &[Option<String>],
    out: &mut Vec<Value>,
    mut put: impl FnMut(usize, &mut Value) -> Result<()>,
) -> Result<()> {
    if n != names.len() {
        return Err(Error::InvalidParameterCount {
            given: n,
            expected: names.len(),
        });
    }
    out.truncate(n);
    for i in 0..n {
        match out.get_mut(i) {
            Some(slot) => put(i, slot)?,
            None => {
                let mut v = Value::Null;
                put(i, &mut v)?;
                out.push(v);
            }
        }
    }
    Ok(())
}

fn positional(vals: Vec<Value>, names: &[Option<String>]) -> Result<Vec<Value>> {
    if vals.len() != names.len() {
        return Err(Error::InvalidParameterCount {
            given: vals.len(),
            expected: names.len(),
        });
    }
    Ok(vals)
}

impl Params for () {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        positional(Vec::new(), names)
    }
}
impl Params for &[&dyn ToSql] {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        positional(
            self.iter().map(|p| p.to_sql()).collect::<Result<_>>()?,
            names,
        )
    }
    fn bind_in(self, names: &[Option<String>], out: &mut Vec<Value>) -> Result<()> {
        positional_in(self.len(), names, out, |i, slot| self[i].to_sql_in(slot))
    }
}
/// `[]`: no parameters.
impl Params for [&dyn ToSql; 0] {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        positional(Vec::new(), names)
    }
}
macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
                positional(self.iter().map(ToSql::to_sql).collect::<Result<_>>()?, names)
            }
            fn bind_in(self, names: &[Option<String>], out: &mut Vec<Value>) -> Result<()> {
                positional_in($n, names, out, |i, slot| self[i].to_sql_in(slot))
            }
        }
    )*};
}
array_params!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
impl<T: ToSql, const N: usize> Params for &[T; N] {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        positional(
            self.iter().map(ToSql::to_sql).collect::<Result<_>>()?,
            names,
        )
    }
    fn bind_in(self, names: &[Option<String>], out: &mut Vec<Value>) -> Result<()> {
        positional_in(N, names, out, |i, slot| self[i].to_sql_in(slot))
    }
}
impl Params for Vec<Value> {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        positional(self, names)
    }
}
impl Params for &[(&str, &dyn ToSql)] {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        let mut vals = vec![Value::Null; names.len()];
        for (name, v) in self {
            let pos = names
                .iter()
                .position(|n| n.as_deref() == Some(*name))
                .ok_or_else(|| Error::InvalidParameterName(name.to_string()))?;
            vals[pos] = v.to_sql()?;
        }
        Ok(vals)
    }
}
impl<const N: usize> Params for &[(&str, &dyn ToSql); N] {
    fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
        (&self[..]).bind(names)
    }
}

macro_rules! tuple_params {
    ($($n:tt $t:ident),+) => {
        impl<$($t: ToSql),+> Params for ($($t,)+) {
            fn bind(self, names: &[Option<String>]) -> Result<Vec<Value>> {
                positional(vec![$(self.$n.to_sql()?),+], names)
            }
            fn bind_in(self, names: &[Option<String>], out: &mut Vec<Value>) -> Result<()> {
                let parts: &[&dyn ToSql] = &[$(&self.$n),+];
                positional_in(parts.len(), names, out, |i, slot| parts[i].to_sql_in(slot))
            }
        }
    };
}
tuple_params!(0 A);
tuple_params!(0 A, 1 B);
tuple_params!(0 A, 1 B, 2 C);
tuple_params!(0 A, 1 B, 2 C, 3 D);
tuple_params!(0 A, 1 B, 2 C, 3 D, 4 E);
tuple_params!(0 A, 1 B, 2 C, 3 D, 4 E, 5 F);
tuple_params!(0 A, 1 B, 2 C, 3 D, 4 E, 5 F, 6 G);
tuple_params!(0 A, 1 B, 2 C, 3 D, 4 E, 5 F, 6 G, 7 H);

/// Positional parameters of mixed types: `params![1, "x", None::<i64>]`.
#[macro_export]
macro_rules! params {
    () => { &[] as &[&dyn $crate::ToSql] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::ToSql),+] as &[&dyn $crate::ToSql] };
}

/// Named parameters: `named_params!{":id": 1, ":name": "x"}`.
#[macro_export]
macro_rules! named_params {
    () => { &[] as &[(&str, &dyn $crate::ToSql)] };
    ($($k:expr => $v:expr),+ $(,)?) => { &[$(($k, &$v as &dyn $crate::ToSql)),+] as &[(&str, &dyn $crate::ToSql)] };
    ($($k:literal : $v:expr),+ $(,)?) => { &[$(($k, &$v as &dyn $crate::ToSql)),+] as &[(&str, &dyn $crate::ToSql)] };
}
