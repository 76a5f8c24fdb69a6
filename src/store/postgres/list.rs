//! List requests on PostgreSQL: [`Filters`] (the shared `store::list::Filters` with `$n`
//! placeholders and boxed driver values) and [`list_page`], with the SQLite store's semantics
//! (only the filters given, newest first, the exact total).

use super::{Backing, Sql};
use crate::store::Page;
use postgres::types::ToSql;
use postgres::{Error, Row};

/// One bound value, as the driver takes it.
pub type Value = Box<dyn ToSql + Sync>;

/// The `WHERE` clause of a list request (`store::list::Filters`) with PostgreSQL's values.
pub type Filters = crate::store::list::Filters<Value>;

impl crate::store::list::Bind for Value {
    const MARK: char = '$';

    fn text(value: String) -> Self {
        Box::new(value)
    }

    fn int(value: i64) -> Self {
        Box::new(value)
    }
}

impl Filters {
    /// Adds `column = value` when a value is given. The value's Rust type must match the
    /// column's (`i64` for `BIGINT`, `String` for `TEXT`): PostgreSQL converts nothing.
    pub fn eq<V: ToSql + Sync + 'static>(self, column: &str, value: Option<V>) -> Self {
        match value {
            Some(value) => self.bind(column, "=", Box::new(value)),
            None => self,
        }
    }

    /// Adds `column <op> value`, e.g. `finished_at >= $3`. `op` is the caller's constant.
    pub fn cmp<V: ToSql + Sync + 'static>(self, column: &str, op: &str, value: V) -> Self {
        self.bind(column, op, Box::new(value))
    }

    /// The parameters of [`Filters::condition`], in order, as the driver takes them.
    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values().iter().map(|v| v.as_ref()).collect()
    }
}

/// One page of `table` (newest first) matching `filters`, and the total count of matches.
/// Two statements, as on SQLite: run them in one `REPEATABLE READ` transaction when the total
/// must agree with the page under concurrent writes (in `READ COMMITTED` each sees its own
/// snapshot).
pub fn list_page<T>(
    c: &mut Sql<impl Backing>,
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
