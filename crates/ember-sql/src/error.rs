//! Errors of the SQL front end: what went wrong and, for errors in a statement's text, where.

use alloc::string::String;
use core::fmt;

/// What went wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlError {
    /// The statement text is not valid SQL: byte offset in the statement, SQLite's words for
    /// the problem, and what was expected there.
    Syntax {
        /// Byte offset in the statement.
        at: usize,
        /// What is wrong in SQLite's words: `near "FROM": syntax error`, `incomplete input`,
        /// `unrecognized token: "'abc"`, or the feature that is not supported.
        message: String,
        /// What the parser expected at `at` (e.g. `expected ")"`), or empty.
        hint: String,
    },
    /// A name that does not exist (table, column, index, view, function).
    NoSuch {
        /// `table`, `column`, `index`, `view`, `function`.
        what: &'static str,
        /// The name as written.
        name: String,
    },
    /// A name that exists already.
    Exists {
        /// `table`, `index`, `view`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A constraint failed (NOT NULL, UNIQUE, PRIMARY KEY, CHECK), with SQLite's wording.
    Constraint(String),
    /// A statement that is valid SQL but cannot run as written (wrong argument count, a
    /// misuse of an aggregate, a type that does not fit).
    Invalid(String),
    /// A parameter was missing or out of range.
    Parameter(String),
    /// Transaction control used in the wrong state.
    Transaction(String),
    /// The storage engine failed.
    Storage(String),
    /// The storage engine refused a row that repeats a key of the named engine index, one
    /// it enforces as unique itself (see [`Storage::enforces_unique`]); the executor reports
    /// it with SQLite's UNIQUE constraint message.
    ///
    /// [`Storage::enforces_unique`]: crate::storage::Storage::enforces_unique
    Unique(String),
}

/// The result type of the SQL front end.
pub type Result<T> = core::result::Result<T, SqlError>;

impl SqlError {
    /// A syntax error at byte `at`.
    pub fn syntax(at: usize, message: impl Into<String>) -> Self {
        SqlError::Syntax {
            at,
            message: message.into(),
            hint: String::new(),
        }
    }

    /// A syntax error at byte `at` with a hint of what was expected there.
    pub fn syntax_hint(at: usize, message: impl Into<String>, hint: impl Into<String>) -> Self {
        SqlError::Syntax {
            at,
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// An error that names a statement problem in SQLite's words.
    pub fn invalid(message: impl Into<String>) -> Self {
        SqlError::Invalid(message.into())
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlError::Syntax { at, message, hint } => {
                write!(f, "{message} at byte {at}")?;
                if !hint.is_empty() {
                    write!(f, ": {hint}")?;
                }
                Ok(())
            }
            SqlError::NoSuch { what, name } => write!(f, "no such {what}: {name}"),
            SqlError::Exists { what, name } => write!(f, "{what} {name} already exists"),
            SqlError::Constraint(m) => write!(f, "{m}"),
            SqlError::Invalid(m) => write!(f, "{m}"),
            SqlError::Parameter(m) => write!(f, "parameter error: {m}"),
            SqlError::Transaction(m) => write!(f, "{m}"),
            SqlError::Storage(m) => write!(f, "storage error: {m}"),
            SqlError::Unique(index) => write!(f, "UNIQUE constraint failed: index {index}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SqlError {}
