//! The `WHERE` clause of a list request, shared by both backends: built only from the filters
//! a request actually gives, so the planner sees `status = ?2` (an index search) rather than
//! `(?2 IS NULL OR status = ?2)`. Each backend names its placeholder and value type
//! ([`Bind`]) and adds `eq` / `cmp` for the values its driver binds (`sqlite/list.rs`,
//! `postgres/list.rs`).

use crate::store::word::Word;

/// A bound value of one backend.
pub trait Bind: Sized {
    /// What starts a numbered placeholder: `?` (`?1`) or `$` (`$1`).
    const MARK: char;
    /// A text value.
    fn text(value: String) -> Self;
    /// An integer value.
    fn int(value: i64) -> Self;
}

/// The conditions of a list request, joined with `AND`, and their bound values in order.
#[derive(Debug, Clone)]
pub struct Filters<V> {
    clauses: Vec<String>,
    values: Vec<V>,
    /// The column whose every word gets its own arm of the page ([`Filters::merged_over`]).
    arms: Option<(&'static str, Vec<&'static str>)>,
}

impl<V: Bind> Filters<V> {
    /// Rows of one app.
    pub fn app(app_id: &str) -> Self {
        Filters {
            clauses: vec![format!("app_id = {}1", V::MARK)],
            values: vec![V::text(app_id.to_string())],
            arms: None,
        }
    }

    /// Writes the app's condition as `+app_id = …` (SQLite's unary plus: the same test, which
    /// no index search may use), for a filter whose few rows SQLite finds by `rowid` instead:
    /// an index on `app_id` alone is gone, and on (`app_id`, `status`, `id`) the app's
    /// condition alone would read every task of the app. SQLite only: PostgreSQL has no unary
    /// plus on text.
    pub fn app_by_rowid(mut self) -> Self {
        self.clauses[0] = format!("+app_id = {}1", V::MARK);
        self
    }

    /// Reads the page as one arm per word `W` has in `column` (`column = 'word'` and the
    /// filters), each in id order, merged: an index on (`app_id`, `column`, `id`) then gives
    /// every arm its rows newest first, where the filters alone would read every row of the app
    /// and sort them. The rows, their order and the total are the same: every row holds one of
    /// the words (a stored word outside the set is an error where it is read).
    pub fn merged_over<W: Word>(mut self, column: &'static str) -> Self {
        self.arms = Some((column, W::ALL.iter().map(Word::word).collect()));
        self
    }

    /// Whether the page is read in arms ([`Filters::merged_over`]).
    pub fn merged(&self) -> bool {
        self.arms.is_some()
    }

    /// `SELECT columns FROM table WHERE …` for the page, before its order and limit: one
    /// statement, or with [`Filters::merged_over`] its arms joined with `UNION ALL` (each
    /// with the same placeholders, bound once). SQLite's only: PostgreSQL keeps `tasks_app`
    /// and reads a list by app alone from it (migrations/postgres/tasks_app_dropped.sql).
    pub fn select(&self, table: &str, columns: &str) -> String {
        let condition = self.condition();
        match &self.arms {
            None => format!("SELECT {columns} FROM {table} WHERE {condition}"),
            Some((column, words)) => words
                .iter()
                .map(|word| {
                    format!(
                        "SELECT {columns} FROM {table} WHERE {condition} AND {column} = '{word}'"
                    )
                })
                .collect::<Vec<_>>()
                .join(" UNION ALL "),
        }
    }

    /// Adds `column = value` for an integer column when a value is given.
    pub fn eq_int(self, column: &str, value: Option<i64>) -> Self {
        match value {
            Some(value) => self.bind(column, "=", V::int(value)),
            None => self,
        }
    }

    /// Adds `column <op> value`, its placeholder numbered after the others. `op` is the
    /// caller's constant.
    pub fn bind(mut self, column: &str, op: &str, value: V) -> Self {
        self.values.push(value);
        self.clauses
            .push(format!("{column} {op} {}{}", V::MARK, self.values.len()));
        self
    }

    /// Adds `column = 'word'` when a value is given, the word written into the SQL (a closed
    /// set such as task states: nothing a client sent reaches the SQL text). A literal lets the
    /// planner match partial indexes (`WHERE status = 'pending'`): on SQLite a bound value
    /// there re-plans the statement on every call, which halved `GET /tasks?status=`
    /// (BENCHMARKS.md); each word is its own cached statement.
    pub fn eq_word<W: Word>(mut self, column: &str, value: Option<W>) -> Self {
        if let Some(word) = value {
            self.clauses.push(format!("{column} = '{}'", word.word()));
        }
        self
    }

    /// Adds a fixed condition with no parameter, e.g. `status != 'deleted'`.
    pub fn always(mut self, condition: &str) -> Self {
        self.clauses.push(condition.to_string());
        self
    }

    /// The conditions joined with `AND`, their placeholders numbered from 1.
    pub fn condition(&self) -> String {
        self.clauses.join(" AND ")
    }

    /// The values of [`Filters::condition`]'s placeholders, in order.
    pub fn values(&self) -> &[V] {
        &self.values
    }
}
