//! The `WHERE` clause of a list request, shared by both backends: built only from the filters
//! a request actually gives, so the planner sees `status = ?2` (an index search) rather than
//! `(?2 IS NULL OR status = ?2)`. Each backend names its placeholder and value type
//! ([`Bind`]) and adds `eq` / `cmp` for the values its driver binds (`sqlite/list.rs`,
//! `postgres/list.rs`).

/// A bound value of one backend.
pub trait Bind: Sized {
    /// What starts a numbered placeholder: `?` (`?1`) or `$` (`$1`).
    const MARK: char;
    /// A text value.
    fn text(value: String) -> Self;
}

/// The conditions of a list request, joined with `AND`, and their bound values in order.
#[derive(Debug, Clone)]
pub struct Filters<V> {
    clauses: Vec<String>,
    values: Vec<V>,
}

impl<V: Bind> Filters<V> {
    /// Rows of one app.
    pub fn app(app_id: &str) -> Self {
        Filters {
            clauses: vec![format!("app_id = {}1", V::MARK)],
            values: vec![V::text(app_id.to_string())],
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

    /// Adds `column = 'value'` with the value written into the SQL when it is one of `known` (a
    /// closed set such as task states, so nothing a client sent reaches the SQL text), else
    /// bound. A literal lets the planner match partial indexes (`WHERE status = 'pending'`):
    /// on SQLite a bound value there re-plans the statement on every call, which halved
    /// `GET /tasks?status=` (BENCHMARKS.md); each known value is its own cached statement.
    pub fn eq_known(mut self, column: &str, value: Option<&str>, known: &[&str]) -> Self {
        match value {
            Some(v) if known.contains(&v) => {
                self.clauses.push(format!("{column} = '{v}'"));
                self
            }
            Some(v) => self.bind(column, "=", V::text(v.to_string())),
            None => self,
        }
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
