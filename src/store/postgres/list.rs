//! List requests on PostgreSQL: the twin of `store::Filters` / `store::list_page` with `$n`
//! placeholders, so every `list` function keeps its SQLite signature and semantics (only the
//! filters given, newest first, the exact total).

use crate::store::Page;
use postgres::types::ToSql;
use postgres::{Error, GenericClient, Row};

/// The `WHERE` clause of a list request, built only from the filters it actually gives, so the
/// planner sees `status = $2` (an index search) rather than `($2 IS NULL OR status = $2)`.
#[derive(Debug)]
pub struct Filters {
    clauses: Vec<String>,
    values: Vec<Box<dyn ToSql + Sync>>,
}

impl Filters {
    /// Rows of one app.
    pub fn app(app_id: &str) -> Self {
        Filters {
            clauses: vec!["app_id = $1".into()],
            values: vec![Box::new(app_id.to_string())],
        }
    }

    /// Adds `column = value` when a value is given. The value's Rust type must match the
    /// column's (`i64` for `BIGINT`, `String` for `TEXT`): PostgreSQL converts nothing.
    pub fn eq<V: ToSql + Sync + 'static>(mut self, column: &str, value: Option<V>) -> Self {
        if let Some(value) = value {
            self.values.push(Box::new(value));
            self.clauses
                .push(format!("{column} = ${}", self.values.len()));
        }
        self
    }

    /// Adds `column = 'value'` with the value written into the SQL when it is one of `known` (a
    /// closed set such as task states, so nothing a client sent reaches the SQL text), else
    /// bound like [`Filters::eq`]. A literal lets the planner match partial indexes
    /// (`WHERE status = 'pending'`) even in a generic plan, as SQLite's twin does.
    pub fn eq_known(mut self, column: &str, value: Option<&str>, known: &[&str]) -> Self {
        match value {
            Some(v) if known.contains(&v) => {
                self.clauses.push(format!("{column} = '{v}'"));
                self
            }
            other => self.eq(column, other.map(str::to_string)),
        }
    }

    /// Adds `column <op> value`, e.g. `finished_at >= $3`. `op` is the caller's constant.
    pub fn cmp<V: ToSql + Sync + 'static>(mut self, column: &str, op: &str, value: V) -> Self {
        self.values.push(Box::new(value));
        self.clauses
            .push(format!("{column} {op} ${}", self.values.len()));
        self
    }

    /// Adds a fixed condition with no parameter, e.g. `status != 'deleted'`.
    pub fn always(mut self, condition: &str) -> Self {
        self.clauses.push(condition.to_string());
        self
    }

    /// The conditions joined with `AND`, their parameters numbered from `$1`.
    pub fn condition(&self) -> String {
        self.clauses.join(" AND ")
    }

    /// The parameters of [`Filters::condition`], in order, as the driver takes them.
    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values.iter().map(|v| v.as_ref()).collect()
    }
}

/// One page of `table` (newest first) matching `filters`, and the total count of matches.
/// Two statements, as on SQLite: run them in one `REPEATABLE READ` transaction when the total
/// must agree with the page under concurrent writes (in `READ COMMITTED` each sees its own
/// snapshot).
pub fn list_page<T>(
    c: &mut impl GenericClient,
    table: &str,
    columns: &str,
    filters: &Filters,
    page: Page,
    mut from_row: impl FnMut(&Row) -> Result<T, Error>,
) -> Result<(i64, Vec<T>), Error> {
    let condition = filters.condition();
    let mut params = filters.params();
    let total: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE {condition}"),
            &params,
        )?
        .try_get(0)?;
    let (limit, offset) = (page.limit(), page.offset());
    let n = params.len();
    params.push(&limit);
    params.push(&offset);
    let sql = format!(
        "SELECT {columns} FROM {table} WHERE {condition} ORDER BY id DESC LIMIT ${} OFFSET ${}",
        n + 1,
        n + 2
    );
    let items = c
        .query(&sql, &params)?
        .iter()
        .map(&mut from_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((total, items))
}
