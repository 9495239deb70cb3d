//! The typed syntax tree of the SQLite dialect EmberDB speaks.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::value::Value;

/// One SQL statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// `SELECT …` (also `VALUES …`).
    Select(Box<Select>),
    /// `INSERT …`.
    Insert(Box<Insert>),
    /// `UPDATE …`.
    Update(Box<Update>),
    /// `DELETE …`.
    Delete(Box<Delete>),
    /// `CREATE TABLE …`.
    CreateTable(Box<CreateTable>),
    /// `DROP TABLE [IF EXISTS] name`.
    DropTable {
        /// IF EXISTS.
        if_exists: bool,
        /// The table.
        name: String,
    },
    /// `CREATE [UNIQUE] INDEX …`.
    CreateIndex(Box<CreateIndex>),
    /// `DROP INDEX [IF EXISTS] name`.
    DropIndex {
        /// IF EXISTS.
        if_exists: bool,
        /// The index.
        name: String,
    },
    /// `CREATE VIEW [IF NOT EXISTS] name [(columns)] AS select`.
    CreateView {
        /// IF NOT EXISTS.
        if_not_exists: bool,
        /// The view.
        name: String,
        /// Column names given, if any.
        columns: Vec<String>,
        /// Its query.
        select: Box<Select>,
    },
    /// `DROP VIEW [IF EXISTS] name`.
    DropView {
        /// IF EXISTS.
        if_exists: bool,
        /// The view.
        name: String,
    },
    /// `ALTER TABLE t RENAME TO n`.
    RenameTable {
        /// The table.
        table: String,
        /// Its new name.
        to: String,
    },
    /// `ALTER TABLE t RENAME [COLUMN] a TO b`.
    RenameColumn {
        /// The table.
        table: String,
        /// The column.
        from: String,
        /// Its new name.
        to: String,
    },
    /// `ALTER TABLE t ADD [COLUMN] def`.
    AddColumn {
        /// The table.
        table: String,
        /// The new column.
        column: ColumnDef,
    },
    /// `BEGIN [DEFERRED|IMMEDIATE|EXCLUSIVE] [TRANSACTION]`.
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK`.
    Rollback,
    /// `EXPLAIN QUERY PLAN stmt` (`EXPLAIN` alone is treated the same).
    Explain(Box<Stmt>),
    /// `PRAGMA name [= value | (value)]`.
    Pragma {
        /// Its name, lower case.
        name: String,
        /// The argument.
        arg: Option<Expr>,
    },
}

/// A query: one or more cores joined by compound operators, then ORDER BY and LIMIT.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    /// The first core.
    pub first: SelectCore,
    /// Further cores with the operator before each.
    pub compounds: Vec<(Compound, SelectCore)>,
    /// ORDER BY terms.
    pub order_by: Vec<OrderTerm>,
    /// LIMIT.
    pub limit: Option<Expr>,
    /// OFFSET.
    pub offset: Option<Expr>,
}

/// A compound operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compound {
    /// UNION.
    Union,
    /// UNION ALL.
    UnionAll,
    /// INTERSECT.
    Intersect,
    /// EXCEPT.
    Except,
}

/// One SELECT core or a VALUES list.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum SelectCore {
    /// `SELECT [DISTINCT] cols [FROM …] [WHERE …] [GROUP BY …] [HAVING …]`.
    Select {
        /// DISTINCT.
        distinct: bool,
        /// Result columns.
        columns: Vec<ResultCol>,
        /// FROM.
        from: Option<FromItem>,
        /// WHERE.
        filter: Option<Expr>,
        /// GROUP BY.
        group_by: Vec<Expr>,
        /// HAVING.
        having: Option<Expr>,
    },
    /// `VALUES (…), (…)`.
    Values(Vec<Vec<Expr>>),
}

/// A result column.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultCol {
    /// `*`.
    Star,
    /// `t.*`.
    TableStar(String),
    /// An expression with an optional alias; `text` is how it was written (its default name).
    Expr {
        /// The expression.
        expr: Expr,
        /// AS name.
        alias: Option<String>,
        /// The source text of the expression.
        text: String,
    },
}

/// An ORDER BY term.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderTerm {
    /// What to sort by.
    pub expr: Expr,
    /// DESC.
    pub desc: bool,
    /// NULLS FIRST (`Some(true)`) / NULLS LAST (`Some(false)`); default: NULLs first
    /// ascending, last descending.
    pub nulls_first: Option<bool>,
}

/// A FROM clause item.
#[derive(Debug, Clone, PartialEq)]
pub enum FromItem {
    /// A table or view.
    Table {
        /// Its name.
        name: String,
        /// AS alias.
        alias: Option<String>,
    },
    /// `(select) [AS] alias`.
    Subquery {
        /// The query.
        select: Box<Select>,
        /// The alias.
        alias: Option<String>,
    },
    /// A join of two items.
    Join {
        /// Left side.
        left: Box<FromItem>,
        /// Right side.
        right: Box<FromItem>,
        /// The kind.
        kind: JoinKind,
        /// ON condition.
        on: Option<Expr>,
        /// USING columns.
        using: Vec<String>,
        /// NATURAL.
        natural: bool,
    },
}

/// A join's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    /// INNER JOIN, JOIN, `,`.
    Inner,
    /// `LEFT [OUTER] JOIN`.
    Left,
    /// CROSS JOIN.
    Cross,
}

/// Where a column reference was last resolved: the [`Scope`](crate::eval::Scope) id it was
/// found in and the column's position there. The executor fills it on the first row and reads
/// it on every later row of the same scope instead of searching the scope by name; a scope's
/// id changes whenever its columns can, so a stale entry never matches. Two slots always
/// compare equal: the cache is not part of what an expression means.
#[derive(Debug, Clone, Default)]
pub struct ColSlot(core::cell::Cell<(u64, usize)>);

impl ColSlot {
    /// The position cached for scope `id`, if this reference was resolved in that scope.
    #[inline]
    pub fn get(&self, id: u64) -> Option<usize> {
        let (s, i) = self.0.get();
        (s == id).then_some(i)
    }

    /// Remembers that this reference is column `index` of scope `id`.
    #[inline]
    pub fn set(&self, id: u64, index: usize) {
        self.0.set((id, index));
    }
}

impl PartialEq for ColSlot {
    fn eq(&self, _: &ColSlot) -> bool {
        true
    }
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal.
    Lit(Value),
    /// A parameter, by 0-based position.
    Param(usize),
    /// A column reference.
    Column {
        /// Table or alias qualifier.
        table: Option<String>,
        /// Column name.
        name: String,
        /// Written as a lone double-quoted name (`"x"`): if no column has that name, it is
        /// the string `'x'`, as SQLite reads it.
        quoted: bool,
        /// Where the executor last found this column (a cache, not part of the meaning).
        slot: ColSlot,
    },
    /// A prefix operator.
    Unary(UnOp, Box<Expr>),
    /// A binary operator.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `x IS [NOT] y` (NULL-safe equality).
    Is(Box<Expr>, Box<Expr>, bool),
    /// `x [NOT] BETWEEN lo AND hi`.
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    /// `x [NOT] IN (list)`.
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `x [NOT] IN (select)` (or `IN table`).
    InSelect(Box<Expr>, Box<Select>, bool),
    /// `[NOT] EXISTS (select)`.
    Exists(Box<Select>, bool),
    /// `(select)`: its first column of its first row, or NULL.
    Subquery(Box<Select>),
    /// `x [NOT] LIKE|GLOB pattern [ESCAPE e]`.
    Like {
        /// The text.
        expr: Box<Expr>,
        /// The pattern.
        pattern: Box<Expr>,
        /// ESCAPE character.
        escape: Option<Box<Expr>>,
        /// NOT.
        negated: bool,
        /// GLOB rather than LIKE.
        glob: bool,
    },
    /// `CASE [operand] WHEN … THEN … [ELSE …] END`.
    Case {
        /// The operand.
        operand: Option<Box<Expr>>,
        /// WHEN/THEN pairs.
        whens: Vec<(Expr, Expr)>,
        /// ELSE.
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(x AS type)`.
    Cast(Box<Expr>, String),
    /// A function call.
    Func {
        /// Name, lower case.
        name: String,
        /// Arguments.
        args: Vec<Expr>,
        /// `f(DISTINCT x)`.
        distinct: bool,
        /// `f(*)`.
        star: bool,
    },
    /// `x COLLATE name`.
    Collate(Box<Expr>, String),
}

/// Prefix operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    /// `-`.
    Neg,
    /// `+`.
    Pos,
    /// `NOT`.
    Not,
    /// `~`.
    BitNot,
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// OR.
    Or,
    /// AND.
    And,
    /// `=`, `==`.
    Eq,
    /// `!=`, `<>`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
    /// `%`.
    Rem,
    /// `||`.
    Concat,
    /// `&`.
    BitAnd,
    /// `|`.
    BitOr,
    /// `<<`.
    Shl,
    /// `>>`.
    Shr,
}

/// `INSERT`.
#[derive(Debug, Clone, PartialEq)]
pub struct Insert {
    /// OR REPLACE / OR IGNORE / …
    pub conflict: Conflict,
    /// The table.
    pub table: String,
    /// The column list, if given.
    pub columns: Vec<String>,
    /// The rows.
    pub source: InsertSource,
}

/// Where inserted rows come from.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertSource {
    /// VALUES or a SELECT.
    Select(Box<Select>),
    /// DEFAULT VALUES.
    Defaults,
}

/// The conflict clause of INSERT / UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Conflict {
    /// ABORT (the default).
    #[default]
    Abort,
    /// REPLACE.
    Replace,
    /// IGNORE.
    Ignore,
    /// FAIL (treated as ABORT).
    Fail,
    /// ROLLBACK.
    Rollback,
}

/// `UPDATE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// OR … clause.
    pub conflict: Conflict,
    /// The table.
    pub table: String,
    /// SET column = expr.
    pub sets: Vec<(String, Expr)>,
    /// WHERE.
    pub filter: Option<Expr>,
}

/// `DELETE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    /// The table.
    pub table: String,
    /// WHERE.
    pub filter: Option<Expr>,
}

/// `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
    /// The table.
    pub name: String,
    /// Columns.
    pub columns: Vec<ColumnDef>,
    /// Table constraints.
    pub constraints: Vec<TableConstraint>,
    /// `CREATE TABLE … AS select`.
    pub as_select: Option<Box<Select>>,
    /// The `USING engine(args)` clause, if any (EmberDB's extension).
    pub using: Option<String>,
}

/// A column definition.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    /// Name.
    pub name: String,
    /// Declared type as written (may be empty).
    pub decl_type: String,
    /// PRIMARY KEY on the column (with DESC).
    pub primary_key: Option<bool>,
    /// AUTOINCREMENT.
    pub autoincrement: bool,
    /// NOT NULL.
    pub not_null: bool,
    /// UNIQUE.
    pub unique: bool,
    /// DEFAULT.
    pub default: Option<Expr>,
    /// CHECK constraints, with the label a failure reports (the constraint name, or its text).
    pub checks: Vec<(Expr, String)>,
    /// COLLATE name.
    pub collate: Option<String>,
}

/// A table constraint.
#[derive(Debug, Clone, PartialEq)]
pub enum TableConstraint {
    /// PRIMARY KEY (cols).
    PrimaryKey(Vec<String>),
    /// UNIQUE (cols).
    Unique(Vec<String>),
    /// CHECK (expr).
    Check(Expr, String),
}

/// `CREATE INDEX`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateIndex {
    /// UNIQUE.
    pub unique: bool,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
    /// The index.
    pub name: String,
    /// The table.
    pub table: String,
    /// Indexed columns (name, DESC).
    pub columns: Vec<(String, bool)>,
}

/// A node of the syntax tree while it is measured.
enum Node<'a> {
    Expr(&'a Expr),
    Select(&'a Select),
    From(&'a FromItem),
}

impl Expr {
    /// The height of this expression tree: 1 for a leaf; a subquery is as tall as the tallest
    /// expression inside it, plus one. Measured with an explicit stack, so a tree of any
    /// height is measured without deep native recursion (the parser uses this to refuse trees
    /// the executor could not walk).
    pub fn height(&self) -> usize {
        if matches!(self, Expr::Lit(_) | Expr::Param(_) | Expr::Column { .. }) {
            return 1;
        }
        let mut tallest = 0;
        let mut stack: Vec<(Node<'_>, usize)> = alloc::vec![(Node::Expr(self), 1)];
        while let Some((node, depth)) = stack.pop() {
            tallest = tallest.max(depth);
            let below = depth + 1;
            match node {
                Node::Expr(e) => match e {
                    Expr::Lit(_) | Expr::Param(_) | Expr::Column { .. } => {}
                    Expr::Unary(_, a) | Expr::Cast(a, _) | Expr::Collate(a, _) => {
                        stack.push((Node::Expr(a), below));
                    }
                    Expr::Binary(_, a, b) | Expr::Is(a, b, _) => {
                        stack.push((Node::Expr(a), below));
                        stack.push((Node::Expr(b), below));
                    }
                    Expr::Between(a, b, c, _) => {
                        stack.push((Node::Expr(a), below));
                        stack.push((Node::Expr(b), below));
                        stack.push((Node::Expr(c), below));
                    }
                    Expr::InList(a, list, _) => {
                        stack.push((Node::Expr(a), below));
                        stack.extend(list.iter().map(|x| (Node::Expr(x), below)));
                    }
                    Expr::InSelect(a, s, _) => {
                        stack.push((Node::Expr(a), below));
                        stack.push((Node::Select(s), below));
                    }
                    Expr::Exists(s, _) | Expr::Subquery(s) => {
                        stack.push((Node::Select(s), below));
                    }
                    Expr::Like {
                        expr,
                        pattern,
                        escape,
                        ..
                    } => {
                        stack.push((Node::Expr(expr), below));
                        stack.push((Node::Expr(pattern), below));
                        if let Some(x) = escape {
                            stack.push((Node::Expr(x), below));
                        }
                    }
                    Expr::Case {
                        operand,
                        whens,
                        otherwise,
                    } => {
                        for x in operand.iter().chain(otherwise.iter()) {
                            stack.push((Node::Expr(x), below));
                        }
                        for (w, t) in whens {
                            stack.push((Node::Expr(w), below));
                            stack.push((Node::Expr(t), below));
                        }
                    }
                    Expr::Func { args, .. } => {
                        stack.extend(args.iter().map(|x| (Node::Expr(x), below)));
                    }
                },
                // A select's own expressions sit one level below it.
                Node::Select(s) => {
                    let cores =
                        core::iter::once(&s.first).chain(s.compounds.iter().map(|(_, c)| c));
                    for core in cores {
                        match core {
                            SelectCore::Select {
                                columns,
                                from,
                                filter,
                                group_by,
                                having,
                                ..
                            } => {
                                for c in columns {
                                    if let ResultCol::Expr { expr, .. } = c {
                                        stack.push((Node::Expr(expr), below));
                                    }
                                }
                                if let Some(f) = from {
                                    stack.push((Node::From(f), depth));
                                }
                                for x in filter.iter().chain(having.iter()).chain(group_by) {
                                    stack.push((Node::Expr(x), below));
                                }
                            }
                            SelectCore::Values(rows) => {
                                for x in rows.iter().flatten() {
                                    stack.push((Node::Expr(x), below));
                                }
                            }
                        }
                    }
                    for t in &s.order_by {
                        stack.push((Node::Expr(&t.expr), below));
                    }
                    for x in s.limit.iter().chain(s.offset.iter()) {
                        stack.push((Node::Expr(x), below));
                    }
                }
                // A join adds no expression height (the parser allows at most 64 tables in one).
                Node::From(f) => match f {
                    FromItem::Table { .. } => {}
                    FromItem::Subquery { select, .. } => stack.push((Node::Select(select), below)),
                    FromItem::Join {
                        left, right, on, ..
                    } => {
                        stack.push((Node::From(left), depth));
                        stack.push((Node::From(right), depth));
                        if let Some(x) = on {
                            stack.push((Node::Expr(x), below));
                        }
                    }
                },
            }
        }
        tallest
    }
}
