//! A hand-written recursive-descent parser for the SQLite dialect (why hand-written: see
//! ARCHITECTURE.md — it needs only `alloc`, gives exact byte positions in its errors, and
//! follows SQLite's own grammar and operator precedence).

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ast::*;
use crate::error::{Result, SqlError};
use crate::lexer::{Tok, Token, tokenize};
use crate::value::Value;

/// A parsed statement with its source text and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The statement.
    pub stmt: Stmt,
    /// Its text, as written (without the trailing `;`).
    pub sql: String,
    /// Parameter names by position (`None` for `?` and `?N`).
    pub params: Vec<Option<String>>,
    /// A number no other parse in this process has: the executor keeps the statement's
    /// query plans under it, so a prepared statement is planned once.
    pub id: u64,
}

static NEXT_ID: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(1);

/// Words that end an expression or a FROM item where a bare alias could be mistaken for
/// them.
const RESERVED: &[&str] = &[
    "ALL",
    "AND",
    "AS",
    "ASC",
    "BETWEEN",
    "BY",
    "CASE",
    "CROSS",
    "DEFAULT",
    "DELETE",
    "DESC",
    "DISTINCT",
    "ELSE",
    "END",
    "ESCAPE",
    "EXCEPT",
    "EXISTS",
    "FROM",
    "GLOB",
    "GROUP",
    "HAVING",
    "IN",
    "INNER",
    "INSERT",
    "INTERSECT",
    "INTO",
    "IS",
    "ISNULL",
    "JOIN",
    "LEFT",
    "LIKE",
    "LIMIT",
    "NATURAL",
    "NOT",
    "NOTNULL",
    "NULL",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "SELECT",
    "SET",
    "THEN",
    "UNION",
    "UPDATE",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
    "COLLATE",
    "REGEXP",
    "MATCH",
    "ORDER",
    "RIGHT",
    "FULL",
    "NULLS",
    "FIRST",
    "LAST",
];

/// Keywords that cannot be an unquoted name (SQLite's keywords without a fallback to an
/// identifier): `CREATE TABLE select(a)` is an error, `CREATE TABLE "select"(a)` is not.
const NOT_NAMES: &[&str] = &[
    "ADD",
    "ALL",
    "ALTER",
    "AND",
    "AS",
    "AUTOINCREMENT",
    "BETWEEN",
    "CASE",
    "CHECK",
    "COLLATE",
    "COMMIT",
    "CONSTRAINT",
    "CREATE",
    "DEFAULT",
    "DEFERRABLE",
    "DELETE",
    "DISTINCT",
    "DROP",
    "ELSE",
    "ESCAPE",
    "EXCEPT",
    "EXISTS",
    "FOREIGN",
    "FROM",
    "GROUP",
    "HAVING",
    "IN",
    "INDEX",
    "INSERT",
    "INTERSECT",
    "INTO",
    "IS",
    "ISNULL",
    "JOIN",
    "LIMIT",
    "NOT",
    "NOTHING",
    "NOTNULL",
    "NULL",
    "ON",
    "OR",
    "ORDER",
    "PRIMARY",
    "REFERENCES",
    "RETURNING",
    "SELECT",
    "SET",
    "TABLE",
    "THEN",
    "TO",
    "TRANSACTION",
    "UNION",
    "UNIQUE",
    "UPDATE",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
];

/// Parses every statement of `sql` (separated by `;`).
pub fn parse(sql: &str) -> Result<Vec<Parsed>> {
    let toks = tokenize(sql)?;
    let mut p = Parser::new(sql, toks);
    let mut out = Vec::new();
    loop {
        while p.eat_op(";") {}
        if p.peek() == &Tok::End {
            break;
        }
        let start = p.at();
        p.params = Vec::new();
        p.next_param = 0;
        let stmt = p.statement()?;
        let end = p.at();
        if !p.eat_op(";") && p.peek() != &Tok::End {
            return Err(p.expected("\";\" or the end of the statement"));
        }
        out.push(Parsed {
            stmt,
            sql: String::from(sql[start..end].trim_end()),
            params: core::mem::take(&mut p.params),
            id: NEXT_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed) as u64,
        });
    }
    Ok(out)
}

/// Splits SQL text into statements at the semicolons outside quotes and comments, keeping
/// each statement's text (without its `;`) and its byte offset; empty statements are dropped.
/// Each piece can then be parsed and run in turn, so an error in one statement leaves the
/// ones before it run, as in SQLite's shell.
pub fn split_statements(sql: &str) -> Vec<(usize, &str)> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'[' => {
                while i < b.len() && b[i] != b']' {
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b';' => {
                out.push((start, &sql[start..i]));
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < sql.len() {
        out.push((start, &sql[start..]));
    }
    out.retain(|(_, s)| !is_blank(s));
    out
}

/// Whether SQL text holds nothing but spaces and comments.
pub fn is_blank(sql: &str) -> bool {
    matches!(tokenize(sql).as_deref(), Ok([t]) if t.tok == Tok::End)
}

/// Parses a single expression (for DEFAULT and CHECK texts, and tests).
pub fn parse_expr(sql: &str) -> Result<Expr> {
    let toks = tokenize(sql)?;
    let mut p = Parser::new(sql, toks);
    let e = p.expr()?;
    if p.peek() != &Tok::End {
        return Err(p.expected("the end of the expression"));
    }
    Ok(e)
}

/// How deeply expressions, subqueries and parenthesized joins may nest while parsing (each
/// level is a few native stack frames here and in the executor; SQLite's parser stops at a
/// similar depth with the same words).
pub const MAX_NESTING: usize = 100;

/// The most tables one FROM clause may join (SQLite's limit too).
pub const MAX_JOIN_TABLES: usize = 64;

/// The tallest expression tree a statement may hold (SQLite's `SQLITE_MAX_EXPR_DEPTH`): a
/// chain such as `1+1+…+1` is a tree as tall as it is long, and the executor walks trees
/// recursively.
pub const MAX_EXPR_HEIGHT: usize = 1000;

struct Parser<'a> {
    sql: &'a str,
    toks: Vec<Token>,
    pos: usize,
    params: Vec<Option<String>>,
    next_param: usize,
    /// Nesting levels entered (see [`MAX_NESTING`]).
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(sql: &'a str, toks: Vec<Token>) -> Self {
        Parser {
            sql,
            toks,
            pos: 0,
            params: Vec::new(),
            next_param: 0,
            depth: 0,
        }
    }

    /// Parses one nesting level with `f`, failing cleanly once [`MAX_NESTING`] levels are open.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.depth >= MAX_NESTING {
            return Err(SqlError::syntax(
                self.at(),
                format!("parser stack overflow (more than {MAX_NESTING} nested levels)"),
            ));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// Extends a left-deep chain whose tree is `height` tall by one operator and its right
    /// operand `r`, failing cleanly once the tree would exceed [`MAX_EXPR_HEIGHT`].
    /// `height` is the chain's height so far (`None`: not measured yet, then `l`'s).
    fn grow(&self, height: &mut Option<usize>, l: &Expr, r: usize, at: usize) -> Result<()> {
        let h = 1 + height.unwrap_or_else(|| l.height()).max(r);
        *height = Some(h);
        if h > MAX_EXPR_HEIGHT {
            return Err(SqlError::syntax(
                at,
                format!("Expression tree is too large (maximum depth {MAX_EXPR_HEIGHT})"),
            ));
        }
        Ok(())
    }
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).map_or(&Tok::End, |t| &t.tok)
    }
    fn peek_at(&self, k: usize) -> &Tok {
        self.toks.get(self.pos + k).map_or(&Tok::End, |t| &t.tok)
    }
    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.sql.len(), |t| t.at)
    }
    /// Byte offset just after the previous token's start (for source spans).
    fn prev_end(&self) -> usize {
        // The next token's start is the end of the span (trailing spaces trimmed by callers).
        self.at()
    }
    fn advance(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }
    fn describe(t: &Tok) -> String {
        match t {
            Tok::Word(w) => format!("\"{w}\""),
            Tok::Quoted(w) => format!("\"{w}\""),
            Tok::Str(s) => format!("'{s}'"),
            Tok::Num(n) => n.clone(),
            Tok::Blob(_) => "a blob literal".into(),
            Tok::Param(p) => p.clone(),
            Tok::Op(o) => format!("\"{o}\""),
            Tok::End => "the end of the statement".into(),
        }
    }
    fn expected(&self, what: &str) -> SqlError {
        let message = match self.peek() {
            Tok::End => "incomplete input".into(),
            t => format!("near {}: syntax error", Self::describe(t)),
        };
        SqlError::syntax_hint(self.at(), message, format!("expected {what}"))
    }
    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }
    fn is_kw_at(&self, k: usize, kw: &str) -> bool {
        matches!(self.peek_at(k), Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }
    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn kw(&mut self, kw: &str) -> Result<()> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.expected(kw))
        }
    }
    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Tok::Op(o) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn op(&mut self, op: &str) -> Result<()> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.expected(&format!("\"{op}\"")))
        }
    }
    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    /// A name: an unquoted word or a quoted name (a string literal is accepted too, as
    /// SQLite does in most places).
    fn name(&mut self) -> Result<String> {
        match self.peek().clone() {
            Tok::Word(w) if NOT_NAMES.iter().any(|k| k.eq_ignore_ascii_case(&w)) => {
                Err(self.expected("a name (quote a keyword used as a name)"))
            }
            Tok::Word(w) => {
                self.pos += 1;
                Ok(w)
            }
            Tok::Quoted(w) | Tok::Str(w) => {
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.expected("a name")),
        }
    }

    /// An unquoted word (a keyword), in upper case.
    fn word(&mut self) -> Result<String> {
        match self.peek() {
            Tok::Word(w) => {
                let w = w.to_ascii_uppercase();
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.expected("a keyword")),
        }
    }

    /// An optional alias: `AS name` or a bare name that is not a keyword.
    fn alias(&mut self) -> Result<Option<String>> {
        if self.eat_kw("AS") {
            return self.name().map(Some);
        }
        match self.peek().clone() {
            Tok::Word(w) if !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(&w)) => {
                self.pos += 1;
                Ok(Some(w))
            }
            Tok::Quoted(w) | Tok::Str(w) => {
                self.pos += 1;
                Ok(Some(w))
            }
            _ => Ok(None),
        }
    }

    fn if_not_exists(&mut self) -> Result<bool> {
        if self.eat_kw("IF") {
            self.kw("NOT")?;
            self.kw("EXISTS")?;
            return Ok(true);
        }
        Ok(false)
    }
    fn if_exists(&mut self) -> Result<bool> {
        if self.eat_kw("IF") {
            self.kw("EXISTS")?;
            return Ok(true);
        }
        Ok(false)
    }

    // ----- statements ----------------------------------------------------------------------

    fn statement(&mut self) -> Result<Stmt> {
        if self.eat_kw("EXPLAIN") {
            if self.eat_kw("QUERY") {
                self.kw("PLAN")?;
            }
            return Ok(Stmt::Explain(Box::new(self.statement()?)));
        }
        if self.is_kw("SELECT") || self.is_kw("VALUES") || self.is_op("(") {
            return Ok(Stmt::Select(Box::new(self.select()?)));
        }
        if self.is_kw("WITH") {
            return Err(SqlError::syntax(
                self.at(),
                "WITH (common table expressions) is not supported",
            ));
        }
        if self.eat_kw("INSERT") {
            let conflict = self.or_conflict()?;
            return self.insert(conflict);
        }
        if self.eat_kw("REPLACE") {
            return self.insert(Conflict::Replace);
        }
        if self.eat_kw("UPDATE") {
            return self.update();
        }
        if self.eat_kw("DELETE") {
            self.kw("FROM")?;
            let table = self.name()?;
            let filter = if self.eat_kw("WHERE") {
                Some(self.expr()?)
            } else {
                None
            };
            return Ok(Stmt::Delete(Box::new(Delete { table, filter })));
        }
        if self.eat_kw("CREATE") {
            return self.create();
        }
        if self.eat_kw("DROP") {
            let what = self.word()?;
            let if_exists = self.if_exists()?;
            let name = self.qualified_name()?;
            return match what.as_str() {
                "TABLE" => Ok(Stmt::DropTable { if_exists, name }),
                "INDEX" => Ok(Stmt::DropIndex { if_exists, name }),
                "VIEW" => Ok(Stmt::DropView { if_exists, name }),
                _ => Err(SqlError::syntax(
                    self.at(),
                    format!("expected TABLE, INDEX or VIEW after DROP but found \"{what}\""),
                )),
            };
        }
        if self.eat_kw("ALTER") {
            self.kw("TABLE")?;
            let table = self.qualified_name()?;
            if self.eat_kw("RENAME") {
                if self.eat_kw("TO") {
                    return Ok(Stmt::RenameTable {
                        table,
                        to: self.name()?,
                    });
                }
                self.eat_kw("COLUMN");
                let from = self.name()?;
                self.kw("TO")?;
                return Ok(Stmt::RenameColumn {
                    table,
                    from,
                    to: self.name()?,
                });
            }
            if self.eat_kw("ADD") {
                self.eat_kw("COLUMN");
                return Ok(Stmt::AddColumn {
                    table,
                    column: self.column_def()?,
                });
            }
            return Err(self.expected("RENAME or ADD"));
        }
        if self.eat_kw("BEGIN") {
            let _ = self.eat_kw("DEFERRED") || self.eat_kw("IMMEDIATE") || self.eat_kw("EXCLUSIVE");
            self.eat_kw("TRANSACTION");
            return Ok(Stmt::Begin);
        }
        if self.eat_kw("COMMIT") || self.eat_kw("END") {
            self.eat_kw("TRANSACTION");
            return Ok(Stmt::Commit);
        }
        if self.eat_kw("ROLLBACK") {
            self.eat_kw("TRANSACTION");
            if self.is_kw("TO") {
                return Err(SqlError::syntax(
                    self.at(),
                    "ROLLBACK TO (savepoints) is not supported",
                ));
            }
            return Ok(Stmt::Rollback);
        }
        if self.eat_kw("PRAGMA") {
            let mut name = self.name()?;
            if self.eat_op(".") {
                name = self.name()?;
            }
            let arg = if self.eat_op("=") {
                Some(self.pragma_value()?)
            } else if self.eat_op("(") {
                let v = self.pragma_value()?;
                self.op(")")?;
                Some(v)
            } else {
                None
            };
            return Ok(Stmt::Pragma {
                name: name.to_ascii_lowercase(),
                arg,
            });
        }
        Err(self.expected("a statement (SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, BEGIN, COMMIT, ROLLBACK, PRAGMA, EXPLAIN)"))
    }

    fn pragma_value(&mut self) -> Result<Expr> {
        // A bare word is a text value (e.g. `PRAGMA mode = full`).
        if let Tok::Word(w) = self.peek().clone() {
            if !w.eq_ignore_ascii_case("NULL") {
                self.pos += 1;
                return Ok(Expr::Lit(Value::Text(w)));
            }
        }
        self.expr()
    }

    /// `name` or `schema.name` (the schema, `main`, is accepted and ignored).
    fn qualified_name(&mut self) -> Result<String> {
        let n = self.name()?;
        if self.eat_op(".") {
            return self.name();
        }
        Ok(n)
    }

    fn or_conflict(&mut self) -> Result<Conflict> {
        if !self.eat_kw("OR") {
            return Ok(Conflict::Abort);
        }
        let w = self.word()?;
        Ok(match w.as_str() {
            "REPLACE" => Conflict::Replace,
            "IGNORE" => Conflict::Ignore,
            "ABORT" => Conflict::Abort,
            "FAIL" => Conflict::Fail,
            "ROLLBACK" => Conflict::Rollback,
            _ => {
                return Err(SqlError::syntax(
                    self.at(),
                    format!("expected REPLACE, IGNORE, ABORT, FAIL or ROLLBACK but found \"{w}\""),
                ));
            }
        })
    }

    fn insert(&mut self, conflict: Conflict) -> Result<Stmt> {
        self.kw("INTO")?;
        let table = self.qualified_name()?;
        if self.eat_kw("AS") {
            self.name()?;
        }
        let mut columns = Vec::new();
        if self.eat_op("(") {
            loop {
                columns.push(self.name()?);
                if !self.eat_op(",") {
                    break;
                }
            }
            self.op(")")?;
        }
        let source = if self.eat_kw("DEFAULT") {
            self.kw("VALUES")?;
            InsertSource::Defaults
        } else if self.is_kw("SELECT") || self.is_kw("VALUES") || self.is_op("(") {
            InsertSource::Select(Box::new(self.select()?))
        } else {
            return Err(self.expected("VALUES, SELECT or DEFAULT VALUES"));
        };
        if self.is_kw("ON") || self.is_kw("RETURNING") {
            return Err(SqlError::syntax(
                self.at(),
                "upsert (ON CONFLICT) and RETURNING are not supported",
            ));
        }
        Ok(Stmt::Insert(Box::new(Insert {
            conflict,
            table,
            columns,
            source,
        })))
    }

    fn update(&mut self) -> Result<Stmt> {
        let conflict = self.or_conflict()?;
        let table = self.qualified_name()?;
        self.kw("SET")?;
        let mut sets = Vec::new();
        loop {
            if self.is_op("(") {
                return Err(SqlError::syntax(
                    self.at(),
                    "row-value assignments (SET (a, b) = …) are not supported",
                ));
            }
            let col = self.name()?;
            self.op("=")?;
            sets.push((col, self.expr()?));
            if !self.eat_op(",") {
                break;
            }
        }
        if self.is_kw("FROM") {
            return Err(SqlError::syntax(
                self.at(),
                "UPDATE … FROM is not supported",
            ));
        }
        let filter = if self.eat_kw("WHERE") {
            Some(self.expr()?)
        } else {
            None
        };
        Ok(Stmt::Update(Box::new(Update {
            conflict,
            table,
            sets,
            filter,
        })))
    }

    fn create(&mut self) -> Result<Stmt> {
        let unique = self.eat_kw("UNIQUE");
        if self.eat_kw("INDEX") {
            let if_not_exists = self.if_not_exists()?;
            let name = self.qualified_name()?;
            self.kw("ON")?;
            let table = self.name()?;
            self.op("(")?;
            let mut columns = Vec::new();
            loop {
                let at = self.at();
                let e = self.expr()?;
                let name = match e {
                    Expr::Column { name, .. } => name,
                    Expr::Collate(inner, _) => match *inner {
                        Expr::Column { name, .. } => name,
                        _ => {
                            return Err(SqlError::syntax(
                                at,
                                "indexes on expressions are not supported; index a column",
                            ));
                        }
                    },
                    _ => {
                        return Err(SqlError::syntax(
                            at,
                            "indexes on expressions are not supported; index a column",
                        ));
                    }
                };
                let desc = self.eat_kw("DESC");
                if !desc {
                    self.eat_kw("ASC");
                }
                columns.push((name, desc));
                if !self.eat_op(",") {
                    break;
                }
            }
            self.op(")")?;
            if self.is_kw("WHERE") {
                return Err(SqlError::syntax(
                    self.at(),
                    "partial indexes (CREATE INDEX … WHERE) are not supported",
                ));
            }
            return Ok(Stmt::CreateIndex(Box::new(CreateIndex {
                unique,
                if_not_exists,
                name,
                table,
                columns,
            })));
        }
        if unique {
            return Err(self.expected("INDEX"));
        }
        let _ = self.eat_kw("TEMP") || self.eat_kw("TEMPORARY");
        if self.eat_kw("VIEW") {
            let if_not_exists = self.if_not_exists()?;
            let name = self.qualified_name()?;
            let mut columns = Vec::new();
            if self.eat_op("(") {
                loop {
                    columns.push(self.name()?);
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.op(")")?;
            }
            self.kw("AS")?;
            let select = Box::new(self.select()?);
            return Ok(Stmt::CreateView {
                if_not_exists,
                name,
                columns,
                select,
            });
        }
        if !self.eat_kw("TABLE") {
            return Err(self.expected("TABLE, INDEX or VIEW"));
        }
        let if_not_exists = self.if_not_exists()?;
        let name = self.qualified_name()?;
        if self.eat_kw("AS") {
            let select = self.select()?;
            return Ok(Stmt::CreateTable(Box::new(CreateTable {
                if_not_exists,
                name,
                columns: Vec::new(),
                constraints: Vec::new(),
                as_select: Some(Box::new(select)),
                using: None,
            })));
        }
        self.op("(")?;
        let mut columns = Vec::new();
        let mut constraints = Vec::new();
        loop {
            if self.is_kw("PRIMARY")
                || self.is_kw("UNIQUE")
                || self.is_kw("CHECK")
                || self.is_kw("CONSTRAINT")
                || self.is_kw("FOREIGN")
            {
                constraints.push(self.table_constraint()?);
            } else {
                if !constraints.is_empty() {
                    return Err(self.expected("a table constraint (columns come first)"));
                }
                columns.push(self.column_def()?);
            }
            if !self.eat_op(",") {
                break;
            }
        }
        self.op(")")?;
        // Table options: WITHOUT ROWID, STRICT (accepted and ignored), USING engine(...).
        let mut using = None;
        loop {
            if self.eat_kw("WITHOUT") {
                self.kw("ROWID")?;
            } else if self.eat_kw("STRICT") {
            } else if self.eat_kw("USING") {
                let start = self.at();
                // `table` is a keyword; it names the default engine here.
                if !self.eat_kw("TABLE") {
                    self.name()?;
                }
                if self.eat_op("(") {
                    let mut depth = 1;
                    while depth > 0 {
                        match self.advance() {
                            Tok::Op("(") => depth += 1,
                            Tok::Op(")") => depth -= 1,
                            Tok::End => return Err(self.expected("\")\"")),
                            _ => {}
                        }
                    }
                }
                using = Some(String::from(self.sql[start..self.prev_end()].trim()));
            } else if !self.eat_op(",") {
                break;
            }
        }
        Ok(Stmt::CreateTable(Box::new(CreateTable {
            if_not_exists,
            name,
            columns,
            constraints,
            as_select: None,
            using,
        })))
    }

    fn name_list(&mut self) -> Result<Vec<String>> {
        self.op("(")?;
        let mut v = Vec::new();
        loop {
            v.push(self.name()?);
            let _ = self.eat_kw("ASC") || self.eat_kw("DESC");
            if self.eat_kw("COLLATE") {
                self.name()?;
            }
            if !self.eat_op(",") {
                break;
            }
        }
        self.op(")")?;
        Ok(v)
    }

    fn conflict_clause(&mut self) -> Result<()> {
        if self.eat_kw("ON") {
            self.kw("CONFLICT")?;
            self.name()?;
        }
        Ok(())
    }

    fn table_constraint(&mut self) -> Result<TableConstraint> {
        let named = if self.eat_kw("CONSTRAINT") {
            Some(self.name()?)
        } else {
            None
        };
        if self.eat_kw("PRIMARY") {
            self.kw("KEY")?;
            let cols = self.name_list()?;
            self.conflict_clause()?;
            return Ok(TableConstraint::PrimaryKey(cols));
        }
        if self.eat_kw("UNIQUE") {
            let cols = self.name_list()?;
            self.conflict_clause()?;
            return Ok(TableConstraint::Unique(cols));
        }
        if self.eat_kw("CHECK") {
            self.op("(")?;
            let start = self.at();
            let e = self.expr()?;
            let text = String::from(self.sql[start..self.at()].trim_end());
            self.op(")")?;
            // A failed CHECK is reported by its constraint name, or by its text.
            return Ok(TableConstraint::Check(e, named.unwrap_or(text)));
        }
        if self.is_kw("FOREIGN") {
            return Err(SqlError::syntax(
                self.at(),
                "FOREIGN KEY constraints are not supported",
            ));
        }
        Err(self.expected("PRIMARY KEY, UNIQUE or CHECK"))
    }

    fn column_def(&mut self) -> Result<ColumnDef> {
        let name = self.name()?;
        // The type: words up to a constraint keyword, with an optional (n) or (n, m).
        let start = self.at();
        let mut end = start;
        while let Tok::Word(w) = self.peek() {
            let u = w.to_ascii_uppercase();
            if matches!(
                u.as_str(),
                "PRIMARY"
                    | "NOT"
                    | "NULL"
                    | "UNIQUE"
                    | "DEFAULT"
                    | "CHECK"
                    | "CONSTRAINT"
                    | "COLLATE"
                    | "REFERENCES"
                    | "GENERATED"
                    | "AS"
            ) {
                break;
            }
            self.pos += 1;
            end = self.at();
            if self.eat_op("(") {
                let mut depth = 1;
                while depth > 0 {
                    match self.advance() {
                        Tok::Op("(") => depth += 1,
                        Tok::Op(")") => depth -= 1,
                        Tok::End => return Err(self.expected("\")\"")),
                        _ => {}
                    }
                }
                end = self.at();
            }
        }
        let decl_type = String::from(self.sql[start..end].trim());
        let mut c = ColumnDef {
            name,
            decl_type,
            primary_key: None,
            autoincrement: false,
            not_null: false,
            unique: false,
            default: None,
            checks: Vec::new(),
            collate: None,
        };
        loop {
            let named = if self.eat_kw("CONSTRAINT") {
                Some(self.name()?)
            } else {
                None
            };
            if self.eat_kw("PRIMARY") {
                self.kw("KEY")?;
                let desc = self.eat_kw("DESC");
                if !desc {
                    self.eat_kw("ASC");
                }
                self.conflict_clause()?;
                c.primary_key = Some(desc);
                if self.eat_kw("AUTOINCREMENT") {
                    c.autoincrement = true;
                }
            } else if self.eat_kw("NOT") {
                self.kw("NULL")?;
                self.conflict_clause()?;
                c.not_null = true;
            } else if self.eat_kw("NULL") {
            } else if self.eat_kw("UNIQUE") {
                self.conflict_clause()?;
                c.unique = true;
            } else if self.eat_kw("DEFAULT") {
                c.default = Some(if self.eat_op("(") {
                    let e = self.expr()?;
                    self.op(")")?;
                    e
                } else {
                    self.unary()?
                });
            } else if self.eat_kw("CHECK") {
                self.op("(")?;
                let start = self.at();
                let e = self.expr()?;
                let text = String::from(self.sql[start..self.at()].trim_end());
                c.checks.push((e, named.unwrap_or(text)));
                self.op(")")?;
            } else if self.eat_kw("COLLATE") {
                c.collate = Some(self.name()?);
            } else if self.is_kw("REFERENCES") || self.is_kw("GENERATED") || self.is_kw("AS") {
                return Err(SqlError::syntax(
                    self.at(),
                    "foreign keys and generated columns are not supported",
                ));
            } else {
                break;
            }
        }
        Ok(c)
    }

    // ----- queries -------------------------------------------------------------------------

    fn select(&mut self) -> Result<Select> {
        let first = self.select_core()?;
        let mut compounds = Vec::new();
        loop {
            let op = if self.eat_kw("UNION") {
                if self.eat_kw("ALL") {
                    Compound::UnionAll
                } else {
                    Compound::Union
                }
            } else if self.eat_kw("INTERSECT") {
                Compound::Intersect
            } else if self.eat_kw("EXCEPT") {
                Compound::Except
            } else {
                break;
            };
            compounds.push((op, self.select_core()?));
        }
        let mut order_by = Vec::new();
        if self.eat_kw("ORDER") {
            self.kw("BY")?;
            order_by = self.order_terms()?;
        }
        let (mut limit, mut offset) = (None, None);
        if self.eat_kw("LIMIT") {
            let first = self.expr()?;
            if self.eat_kw("OFFSET") {
                limit = Some(first);
                offset = Some(self.expr()?);
            } else if self.eat_op(",") {
                // LIMIT offset, count
                offset = Some(first);
                limit = Some(self.expr()?);
            } else {
                limit = Some(first);
            }
        }
        if !order_by.is_empty() || limit.is_some() {
            let op = if self.is_kw("UNION") {
                if self.is_kw_at(1, "ALL") {
                    Some("UNION ALL")
                } else {
                    Some("UNION")
                }
            } else if self.is_kw("INTERSECT") {
                Some("INTERSECT")
            } else if self.is_kw("EXCEPT") {
                Some("EXCEPT")
            } else {
                None
            };
            if let Some(op) = op {
                let clause = if order_by.is_empty() {
                    "LIMIT"
                } else {
                    "ORDER BY"
                };
                return Err(SqlError::syntax(
                    self.at(),
                    format!("{clause} clause should come after {op} not before"),
                ));
            }
        }
        Ok(Select {
            first,
            compounds,
            order_by,
            limit,
            offset,
        })
    }

    fn order_terms(&mut self) -> Result<Vec<OrderTerm>> {
        let mut v = Vec::new();
        loop {
            let expr = self.expr()?;
            let desc = if self.eat_kw("DESC") {
                true
            } else {
                self.eat_kw("ASC");
                false
            };
            let nulls_first = if self.eat_kw("NULLS") {
                if self.eat_kw("FIRST") {
                    Some(true)
                } else {
                    self.kw("LAST")?;
                    Some(false)
                }
            } else {
                None
            };
            v.push(OrderTerm {
                expr,
                desc,
                nulls_first,
            });
            if !self.eat_op(",") {
                break;
            }
        }
        Ok(v)
    }

    fn select_core(&mut self) -> Result<SelectCore> {
        if self.is_op("(") && (self.is_kw_at(1, "SELECT") || self.is_kw_at(1, "VALUES")) {
            return Err(SqlError::syntax(
                self.at(),
                "a parenthesized query is not allowed here",
            ));
        }
        if self.eat_kw("VALUES") {
            let mut rows = Vec::new();
            loop {
                self.op("(")?;
                let mut row = Vec::new();
                loop {
                    row.push(self.expr()?);
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.op(")")?;
                if let Some(first) = rows.first() {
                    let first: &Vec<Expr> = first;
                    if first.len() != row.len() {
                        return Err(SqlError::syntax(
                            self.at(),
                            "all VALUES must have the same number of terms",
                        ));
                    }
                }
                rows.push(row);
                if !self.eat_op(",") {
                    break;
                }
            }
            return Ok(SelectCore::Values(rows));
        }
        self.kw("SELECT")?;
        let distinct = if self.eat_kw("DISTINCT") {
            true
        } else {
            self.eat_kw("ALL");
            false
        };
        let mut columns = Vec::new();
        loop {
            if self.eat_op("*") {
                columns.push(ResultCol::Star);
            } else if matches!(self.peek(), Tok::Word(_) | Tok::Quoted(_))
                && matches!(self.peek_at(1), Tok::Op("."))
                && matches!(self.peek_at(2), Tok::Op("*"))
            {
                let t = self.name()?;
                self.pos += 2;
                columns.push(ResultCol::TableStar(t));
            } else {
                let start = self.at();
                let expr = self.expr()?;
                let text = String::from(self.sql[start..self.prev_end()].trim_end());
                let alias = self.alias()?;
                columns.push(ResultCol::Expr { expr, alias, text });
            }
            if !self.eat_op(",") {
                break;
            }
        }
        let from = if self.eat_kw("FROM") {
            Some(self.from()?)
        } else {
            None
        };
        let filter = if self.eat_kw("WHERE") {
            Some(self.expr()?)
        } else {
            None
        };
        let mut group_by = Vec::new();
        let mut having = None;
        if self.eat_kw("GROUP") {
            self.kw("BY")?;
            loop {
                group_by.push(self.expr()?);
                if !self.eat_op(",") {
                    break;
                }
            }
        }
        if self.eat_kw("HAVING") {
            having = Some(self.expr()?);
        }
        if self.is_kw("WINDOW") {
            return Err(SqlError::syntax(
                self.at(),
                "window functions are not supported",
            ));
        }
        Ok(SelectCore::Select {
            distinct,
            columns,
            from,
            filter,
            group_by,
            having,
        })
    }

    fn from(&mut self) -> Result<FromItem> {
        let mut left = self.table_or_subquery()?;
        let mut tables = 1;
        loop {
            let at = self.at();
            let (kind, natural) = if self.eat_op(",") {
                (JoinKind::Inner, false)
            } else {
                let natural = self.eat_kw("NATURAL");
                if self.eat_kw("LEFT") {
                    self.eat_kw("OUTER");
                    self.kw("JOIN")?;
                    (JoinKind::Left, natural)
                } else if self.eat_kw("INNER") {
                    self.kw("JOIN")?;
                    (JoinKind::Inner, natural)
                } else if self.eat_kw("CROSS") {
                    self.kw("JOIN")?;
                    (JoinKind::Cross, natural)
                } else if self.eat_kw("JOIN") {
                    (JoinKind::Inner, natural)
                } else if self.is_kw("RIGHT") || self.is_kw("FULL") {
                    return Err(SqlError::syntax(
                        self.at(),
                        "RIGHT and FULL joins are not supported",
                    ));
                } else if natural {
                    return Err(self.expected("JOIN"));
                } else {
                    break;
                }
            };
            tables += 1;
            if tables > MAX_JOIN_TABLES {
                return Err(SqlError::syntax(
                    at,
                    format!("at most {MAX_JOIN_TABLES} tables in a join"),
                ));
            }
            let right = self.table_or_subquery()?;
            let mut on = None;
            let mut using = Vec::new();
            if self.eat_kw("ON") {
                on = Some(self.expr()?);
            } else if self.eat_kw("USING") {
                using = self.name_list()?;
            }
            left = FromItem::Join {
                left: Box::new(left),
                right: Box::new(right),
                kind,
                on,
                using,
                natural,
            };
        }
        Ok(left)
    }

    fn table_or_subquery(&mut self) -> Result<FromItem> {
        if self.eat_op("(") {
            if self.is_kw("SELECT") || self.is_kw("VALUES") {
                let select = Box::new(self.nested(Self::select)?);
                self.op(")")?;
                let alias = self.alias()?;
                return Ok(FromItem::Subquery { select, alias });
            }
            let inner = self.nested(Self::from)?;
            self.op(")")?;
            return Ok(inner);
        }
        let name = self.qualified_name()?;
        if self.is_op("(") {
            return Err(SqlError::syntax(
                self.at(),
                "table-valued functions are not supported",
            ));
        }
        let alias = self.alias()?;
        if self.eat_kw("INDEXED") {
            self.kw("BY")?;
            self.name()?;
        } else if self.is_kw("NOT") && self.is_kw_at(1, "INDEXED") {
            self.pos += 2;
        }
        Ok(FromItem::Table { name, alias })
    }

    // ----- expressions (SQLite's precedence, lowest first) ---------------------------------

    fn expr(&mut self) -> Result<Expr> {
        self.nested(Self::or)
    }

    fn or(&mut self) -> Result<Expr> {
        self.binary_chain(&[("OR", BinOp::Or)], Self::and)
    }

    fn and(&mut self) -> Result<Expr> {
        self.binary_chain(&[("AND", BinOp::And)], Self::not)
    }

    fn not(&mut self) -> Result<Expr> {
        if self.eat_kw("NOT") {
            let e = self.nested(Self::not)?;
            return Ok(Expr::Unary(UnOp::Not, Box::new(e)));
        }
        self.equality()
    }

    fn equality(&mut self) -> Result<Expr> {
        let mut l = self.comparison()?;
        let mut h = None;
        loop {
            let at = self.at();
            if self.eat_op("=") || self.eat_op("==") {
                let r = self.comparison()?;
                self.grow(&mut h, &l, r.height(), at)?;
                l = Expr::Binary(BinOp::Eq, Box::new(l), Box::new(r));
            } else if self.eat_op("!=") || self.eat_op("<>") {
                let r = self.comparison()?;
                self.grow(&mut h, &l, r.height(), at)?;
                l = Expr::Binary(BinOp::Ne, Box::new(l), Box::new(r));
            } else if self.eat_kw("IS") {
                let neg = self.eat_kw("NOT");
                if self.eat_kw("DISTINCT") {
                    self.kw("FROM")?;
                    let r = self.comparison()?;
                    self.grow(&mut h, &l, r.height(), at)?;
                    l = Expr::Is(Box::new(l), Box::new(r), !neg);
                } else {
                    let r = self.comparison()?;
                    self.grow(&mut h, &l, r.height(), at)?;
                    l = Expr::Is(Box::new(l), Box::new(r), neg);
                }
            } else if self.eat_kw("ISNULL") {
                self.grow(&mut h, &l, 1, at)?;
                l = Expr::Is(Box::new(l), Box::new(Expr::Lit(Value::Null)), false);
            } else if self.eat_kw("NOTNULL") {
                self.grow(&mut h, &l, 1, at)?;
                l = Expr::Is(Box::new(l), Box::new(Expr::Lit(Value::Null)), true);
            } else if self.is_kw("NOT") && self.is_kw_at(1, "NULL") {
                self.pos += 2;
                self.grow(&mut h, &l, 1, at)?;
                l = Expr::Is(Box::new(l), Box::new(Expr::Lit(Value::Null)), true);
            } else {
                let neg = if self.is_kw("NOT")
                    && (self.is_kw_at(1, "IN")
                        || self.is_kw_at(1, "LIKE")
                        || self.is_kw_at(1, "GLOB")
                        || self.is_kw_at(1, "BETWEEN")
                        || self.is_kw_at(1, "REGEXP")
                        || self.is_kw_at(1, "MATCH"))
                {
                    self.pos += 1;
                    true
                } else {
                    false
                };
                if self.eat_kw("IN") {
                    self.grow(&mut h, &l, 1, at)?;
                    l = self.in_rest(l, neg)?;
                    h = None;
                } else if self.is_kw("LIKE") || self.is_kw("GLOB") {
                    let glob = self.is_kw("GLOB");
                    self.pos += 1;
                    let pattern = self.comparison()?;
                    let escape = if self.eat_kw("ESCAPE") {
                        Some(Box::new(self.comparison()?))
                    } else {
                        None
                    };
                    let r = pattern
                        .height()
                        .max(escape.as_ref().map_or(0, |e| e.height()));
                    self.grow(&mut h, &l, r, at)?;
                    l = Expr::Like {
                        expr: Box::new(l),
                        pattern: Box::new(pattern),
                        escape,
                        negated: neg,
                        glob,
                    };
                } else if self.eat_kw("BETWEEN") {
                    let lo = self.comparison()?;
                    self.kw("AND")?;
                    let hi = self.comparison()?;
                    self.grow(&mut h, &l, lo.height().max(hi.height()), at)?;
                    l = Expr::Between(Box::new(l), Box::new(lo), Box::new(hi), neg);
                } else if self.is_kw("REGEXP") || self.is_kw("MATCH") {
                    return Err(SqlError::syntax(
                        self.at(),
                        "REGEXP and MATCH are not supported",
                    ));
                } else {
                    break;
                }
            }
        }
        Ok(l)
    }

    fn in_rest(&mut self, l: Expr, neg: bool) -> Result<Expr> {
        if self.eat_op("(") {
            if self.is_kw("SELECT") || self.is_kw("VALUES") {
                let s = self.select()?;
                self.op(")")?;
                return Ok(Expr::InSelect(Box::new(l), Box::new(s), neg));
            }
            let mut list = Vec::new();
            if !self.is_op(")") {
                loop {
                    list.push(self.expr()?);
                    if !self.eat_op(",") {
                        break;
                    }
                }
            }
            self.op(")")?;
            return Ok(Expr::InList(Box::new(l), list, neg));
        }
        // `x IN table`
        let t = self.qualified_name()?;
        let s = Select {
            first: SelectCore::Select {
                distinct: false,
                columns: alloc::vec![ResultCol::Star],
                from: Some(FromItem::Table {
                    name: t,
                    alias: None,
                }),
                filter: None,
                group_by: Vec::new(),
                having: None,
            },
            compounds: Vec::new(),
            order_by: Vec::new(),
            limit: None,
            offset: None,
        };
        Ok(Expr::InSelect(Box::new(l), Box::new(s), neg))
    }

    /// A left-associative chain of the operators in `ops` (symbols, or keywords such as
    /// `AND`) over operands parsed by `next`, its tree height checked as it grows.
    fn binary_chain(
        &mut self,
        ops: &[(&str, BinOp)],
        next: fn(&mut Self) -> Result<Expr>,
    ) -> Result<Expr> {
        let mut l = next(self)?;
        let mut h = None;
        loop {
            let at = self.at();
            let eat = |p: &mut Self, o: &str| {
                if o.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    p.eat_kw(o)
                } else {
                    p.eat_op(o)
                }
            };
            let Some(op) = ops.iter().find(|(o, _)| eat(self, o)).map(|(_, op)| *op) else {
                break;
            };
            let r = next(self)?;
            self.grow(&mut h, &l, r.height(), at)?;
            l = Expr::Binary(op, Box::new(l), Box::new(r));
        }
        Ok(l)
    }

    fn comparison(&mut self) -> Result<Expr> {
        let ops = [
            ("<", BinOp::Lt),
            ("<=", BinOp::Le),
            (">", BinOp::Gt),
            (">=", BinOp::Ge),
        ];
        self.binary_chain(&ops, Self::bitwise)
    }

    fn bitwise(&mut self) -> Result<Expr> {
        let ops = [
            ("&", BinOp::BitAnd),
            ("|", BinOp::BitOr),
            ("<<", BinOp::Shl),
            (">>", BinOp::Shr),
        ];
        self.binary_chain(&ops, Self::additive)
    }

    fn additive(&mut self) -> Result<Expr> {
        self.binary_chain(
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            Self::multiplicative,
        )
    }

    fn multiplicative(&mut self) -> Result<Expr> {
        let ops = [("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Rem)];
        self.binary_chain(&ops, Self::concat)
    }

    fn concat(&mut self) -> Result<Expr> {
        self.binary_chain(&[("||", BinOp::Concat)], Self::collate)
    }

    fn collate(&mut self) -> Result<Expr> {
        let mut e = self.unary()?;
        let mut h = None;
        while self.eat_kw("COLLATE") {
            self.grow(&mut h, &e, 1, self.at())?;
            let name = self.name()?;
            e = Expr::Collate(Box::new(e), name.to_ascii_uppercase());
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr> {
        if self.eat_op("-") {
            let e = self.nested(Self::unary)?;
            // Fold a negative literal so -9223372036854775808 is an integer.
            return Ok(match e {
                Expr::Lit(Value::Integer(i)) => Expr::Lit(Value::Integer(i.wrapping_neg())),
                Expr::Lit(Value::Real(r)) => Expr::Lit(Value::Real(-r)),
                e => Expr::Unary(UnOp::Neg, Box::new(e)),
            });
        }
        if self.eat_op("+") {
            let e = self.nested(Self::unary)?;
            return Ok(Expr::Unary(UnOp::Pos, Box::new(e)));
        }
        if self.eat_op("~") {
            let e = self.nested(Self::unary)?;
            return Ok(Expr::Unary(UnOp::BitNot, Box::new(e)));
        }
        self.primary()
    }

    fn number(&self, text: &str, at: usize, negated_next: bool) -> Result<Value> {
        let _ = negated_next;
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            if hex.is_empty() || hex.len() > 16 {
                return Err(SqlError::syntax(at, format!("hex literal too big: {text}")));
            }
            return u64::from_str_radix(hex, 16)
                .map(|u| Value::Integer(u as i64))
                .map_err(|_| SqlError::syntax(at, format!("malformed hex literal {text}")));
        }
        if !text.contains(['.', 'e', 'E']) {
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Value::Integer(i));
            }
            // 9223372036854775808 stays an integer only when negated; the unary minus
            // folding wraps i64::MIN correctly from this value.
            if text == "9223372036854775808" {
                return Ok(Value::Integer(i64::MIN));
            }
        }
        text.parse::<f64>()
            .map(Value::Real)
            .map_err(|_| SqlError::syntax(at, format!("malformed number {text}")))
    }

    fn primary(&mut self) -> Result<Expr> {
        let at = self.at();
        match self.peek().clone() {
            Tok::Num(n) => {
                self.pos += 1;
                let mut v = self.number(&n, at, false)?;
                // A lone 9223372036854775808 (not negated) is a real, as in SQLite.
                if n == "9223372036854775808"
                    && !matches!(
                        self.toks.get(self.pos.wrapping_sub(2)).map(|t| &t.tok),
                        Some(Tok::Op("-"))
                    )
                {
                    v = Value::Real(crate::value::TWO63);
                }
                Ok(Expr::Lit(v))
            }
            Tok::Str(s) => {
                self.pos += 1;
                Ok(Expr::Lit(Value::Text(s)))
            }
            Tok::Blob(b) => {
                self.pos += 1;
                Ok(Expr::Lit(Value::Blob(b)))
            }
            Tok::Param(p) => {
                self.pos += 1;
                Ok(Expr::Param(self.param(&p, at)?))
            }
            Tok::Op("(") => {
                self.pos += 1;
                if self.is_kw("SELECT") || self.is_kw("VALUES") {
                    let s = self.select()?;
                    self.op(")")?;
                    return Ok(Expr::Subquery(Box::new(s)));
                }
                let e = self.expr()?;
                if self.is_op(",") {
                    return Err(SqlError::syntax(self.at(), "row values are not supported"));
                }
                self.op(")")?;
                Ok(e)
            }
            Tok::Quoted(name) => {
                self.pos += 1;
                let mut e = self.column_rest(name)?;
                if let Expr::Column {
                    table: None,
                    quoted,
                    ..
                } = &mut e
                {
                    *quoted = true;
                }
                Ok(e)
            }
            Tok::Word(w) => {
                let u = w.to_ascii_uppercase();
                match u.as_str() {
                    "NULL" => {
                        self.pos += 1;
                        Ok(Expr::Lit(Value::Null))
                    }
                    "TRUE" => {
                        self.pos += 1;
                        Ok(Expr::Lit(Value::Integer(1)))
                    }
                    "FALSE" => {
                        self.pos += 1;
                        Ok(Expr::Lit(Value::Integer(0)))
                    }
                    "CURRENT_TIME" | "CURRENT_DATE" | "CURRENT_TIMESTAMP" => {
                        Err(SqlError::syntax(at, format!("{u} is not supported")))
                    }
                    "CASE" => {
                        self.pos += 1;
                        self.case()
                    }
                    "CAST" => {
                        self.pos += 1;
                        self.op("(")?;
                        let e = self.expr()?;
                        self.kw("AS")?;
                        let start = self.at();
                        let mut end = start;
                        while let Tok::Word(_) = self.peek() {
                            self.pos += 1;
                            end = self.at();
                            if self.eat_op("(") {
                                while !self.eat_op(")") {
                                    if self.advance() == Tok::End {
                                        return Err(self.expected("\")\""));
                                    }
                                }
                                end = self.at();
                            }
                        }
                        let ty = String::from(self.sql[start..end].trim());
                        self.op(")")?;
                        Ok(Expr::Cast(Box::new(e), ty))
                    }
                    "EXISTS" => {
                        self.pos += 1;
                        self.op("(")?;
                        let s = self.select()?;
                        self.op(")")?;
                        Ok(Expr::Exists(Box::new(s), false))
                    }
                    "NOT" if self.is_kw_at(1, "EXISTS") => {
                        self.pos += 2;
                        self.op("(")?;
                        let s = self.select()?;
                        self.op(")")?;
                        Ok(Expr::Exists(Box::new(s), true))
                    }
                    "RAISE" => Err(SqlError::syntax(
                        at,
                        "RAISE is only valid in triggers, which are not supported",
                    )),
                    _ => {
                        if RESERVED.iter().any(|r| *r == u)
                            && !matches!(self.peek_at(1), Tok::Op("("))
                        {
                            return Err(self.expected("an expression"));
                        }
                        self.pos += 1;
                        if self.eat_op("(") {
                            return self.call(u.to_ascii_lowercase());
                        }
                        self.column_rest(w)
                    }
                }
            }
            _ => Err(self.expected("an expression")),
        }
    }

    fn column_rest(&mut self, first: String) -> Result<Expr> {
        if self.eat_op(".") {
            let second = self.name()?;
            if self.eat_op(".") {
                let third = self.name()?;
                return Ok(Expr::Column {
                    table: Some(second),
                    name: third,
                    quoted: false,
                    slot: ColSlot::default(),
                });
            }
            return Ok(Expr::Column {
                table: Some(first),
                name: second,
                quoted: false,
                slot: ColSlot::default(),
            });
        }
        Ok(Expr::Column {
            table: None,
            name: first,
            quoted: false,
            slot: ColSlot::default(),
        })
    }

    fn call(&mut self, name: String) -> Result<Expr> {
        if self.eat_op("*") {
            self.op(")")?;
            return Ok(Expr::Func {
                name,
                args: Vec::new(),
                distinct: false,
                star: true,
            });
        }
        let distinct = self.eat_kw("DISTINCT");
        if !distinct {
            self.eat_kw("ALL"); // `count(ALL x)` is `count(x)`
        }
        let mut args = Vec::new();
        if !self.is_op(")") {
            loop {
                args.push(self.expr()?);
                if !self.eat_op(",") {
                    break;
                }
            }
        }
        if self.is_kw("ORDER") {
            return Err(SqlError::syntax(
                self.at(),
                "ORDER BY inside an aggregate is not supported",
            ));
        }
        self.op(")")?;
        if self.is_kw("FILTER") || self.is_kw("OVER") {
            return Err(SqlError::syntax(
                self.at(),
                "FILTER and window functions (OVER) are not supported",
            ));
        }
        Ok(Expr::Func {
            name,
            args,
            distinct,
            star: false,
        })
    }

    fn case(&mut self) -> Result<Expr> {
        let operand = if self.is_kw("WHEN") {
            None
        } else {
            Some(Box::new(self.expr()?))
        };
        let mut whens = Vec::new();
        while self.eat_kw("WHEN") {
            let w = self.expr()?;
            self.kw("THEN")?;
            let t = self.expr()?;
            whens.push((w, t));
        }
        if whens.is_empty() {
            return Err(self.expected("WHEN"));
        }
        let otherwise = if self.eat_kw("ELSE") {
            Some(Box::new(self.expr()?))
        } else {
            None
        };
        self.kw("END")?;
        Ok(Expr::Case {
            operand,
            whens,
            otherwise,
        })
    }

    /// Assigns a parameter's position: `?` takes the next, `?N` is N, a name keeps the
    /// position of its first use.
    fn param(&mut self, p: &str, at: usize) -> Result<usize> {
        if p == "?" {
            self.next_param += 1;
            let i = self.next_param - 1;
            if self.params.len() <= i {
                self.params.resize(i + 1, None);
            }
            return Ok(i);
        }
        if let Some(n) = p.strip_prefix('?') {
            let n: usize = n
                .parse()
                .map_err(|_| SqlError::syntax(at, format!("bad parameter {p}")))?;
            if n == 0 || n > 32766 {
                return Err(SqlError::syntax(
                    at,
                    format!("parameter {p} is out of range (1 to 32766)"),
                ));
            }
            if self.params.len() < n {
                self.params.resize(n, None);
            }
            self.next_param = self.next_param.max(n);
            return Ok(n - 1);
        }
        if let Some(i) = self.params.iter().position(|q| q.as_deref() == Some(p)) {
            return Ok(i);
        }
        self.next_param += 1;
        let i = self.next_param - 1;
        if self.params.len() <= i {
            self.params.resize(i + 1, None);
        }
        self.params[i] = Some(p.to_string());
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Stmt {
        let mut v = parse(sql).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).stmt
    }

    #[test]
    fn create_table_using_an_engine_keeps_the_clause_and_the_rest_of_the_dialect() {
        for (sql, want) in [
            (
                "CREATE TABLE t(a INTEGER PRIMARY KEY, b) USING lsm",
                Some("lsm"),
            ),
            ("CREATE TABLE t(a, b) WITHOUT ROWID USING lsm", Some("lsm")),
            ("create table t(a) using LSM(cache=4)", Some("LSM(cache=4)")),
            ("CREATE TABLE t(a, b) USING table", Some("table")),
            ("CREATE TABLE t(a, b)", None),
        ] {
            let Stmt::CreateTable(ct) = one(sql) else {
                panic!("{sql}: not a CREATE TABLE")
            };
            assert_eq!(ct.using.as_deref(), want, "{sql}");
            assert_eq!(ct.columns.first().map(|c| c.name.as_str()), Some("a"));
        }
        assert!(parse("CREATE TABLE t(a) USING").is_err());
        assert!(parse("CREATE TABLE t(a) USING lsm(").is_err());
    }

    #[test]
    fn engine_names_tell_the_engine() {
        use crate::storage::engine_of;
        assert_eq!(engine_of("l12"), "lsm");
        assert_eq!(engine_of("li13"), "lsm");
        assert_eq!(engine_of("l12_u0"), "lsm");
        assert_eq!(engine_of("t3"), "table");
        assert_eq!(engine_of("i4"), "table");
        assert_eq!(engine_of(crate::MASTER), "table");
    }

    #[test]
    fn precedence_follows_sqlite() {
        // 1 + 2 * 3 = 7 AND NOT 0 OR 1 parses as ((1 + (2*3)) = 7 AND (NOT 0)) OR 1
        let e = parse_expr("1 + 2 * 3 = 7 AND NOT 0 OR 1").unwrap();
        let Expr::Binary(BinOp::Or, l, _) = e else {
            panic!()
        };
        let Expr::Binary(BinOp::And, l, r) = *l else {
            panic!()
        };
        assert!(matches!(*r, Expr::Unary(UnOp::Not, _)));
        let Expr::Binary(BinOp::Eq, l, _) = *l else {
            panic!()
        };
        assert!(matches!(*l, Expr::Binary(BinOp::Add, _, _)));
        assert!(matches!(
            parse_expr("'a' || 'b' * 2").unwrap(),
            Expr::Binary(BinOp::Mul, _, _)
        ));
        assert_eq!(
            parse_expr("-9223372036854775808").unwrap(),
            Expr::Lit(Value::Integer(i64::MIN))
        );
        assert_eq!(
            parse_expr("9223372036854775808").unwrap(),
            Expr::Lit(Value::Real(crate::value::TWO63))
        );
    }

    #[test]
    fn statements_parse() {
        assert!(matches!(
            one(
                "CREATE TABLE IF NOT EXISTS t(a INTEGER PRIMARY KEY, b TEXT NOT NULL DEFAULT 'x', c REAL CHECK (c > 0), UNIQUE(b, c))"
            ),
            Stmt::CreateTable(_)
        ));
        assert!(matches!(
            one("insert or replace into t(a,b) values (1,'x'),(2,'y')"),
            Stmt::Insert(_)
        ));
        assert!(matches!(
            one(
                "SELECT DISTINCT a, count(*) AS n FROM t LEFT JOIN u ON t.a = u.a WHERE b LIKE 'x%' GROUP BY a HAVING n > 1 ORDER BY 2 DESC NULLS LAST LIMIT 5 OFFSET 1"
            ),
            Stmt::Select(_)
        ));
        assert!(matches!(
            one("select 1 union all select 2 except select 3"),
            Stmt::Select(_)
        ));
        assert!(matches!(
            one("EXPLAIN QUERY PLAN SELECT * FROM t WHERE a = ?"),
            Stmt::Explain(_)
        ));
        assert!(matches!(one("PRAGMA table_info(t)"), Stmt::Pragma { .. }));
        assert!(matches!(
            one("ALTER TABLE t ADD COLUMN d INT DEFAULT 3"),
            Stmt::AddColumn { .. }
        ));
        let p = parse("SELECT :a, ?, :a, ?5").unwrap();
        assert_eq!(p[0].params.len(), 5);
        assert_eq!(p[0].params[0].as_deref(), Some(":a"));
        assert_eq!(parse("select 1; select 2;; ").unwrap().len(), 2);
    }

    #[test]
    fn statements_split_outside_quotes_and_comments() {
        let sql = "select 'a;b'; -- c;\n select \"x;\" /* ; */ ; ;select 3";
        let parts: Vec<&str> = split_statements(sql)
            .into_iter()
            .map(|p| p.1.trim())
            .collect();
        assert_eq!(
            parts,
            vec!["select 'a;b'", "-- c;\n select \"x;\" /* ; */", "select 3"]
        );
        assert!(is_blank(" -- only a comment\n /* and this */ "));
    }

    #[test]
    fn errors_say_where_and_what() {
        for (sql, at) in [
            ("SELECT FROM t", 7),
            ("SELECT (1", 9),
            ("CREATE TABLE t(", 15),
            ("SELEC 1", 0),
            ("SELECT 1 2", 9),
        ] {
            match parse(sql) {
                Err(SqlError::Syntax {
                    at: a,
                    message,
                    hint,
                }) => {
                    assert_eq!(a, at, "{sql}: {message}");
                    assert!(hint.contains("expected"), "{hint}");
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
    }
}
