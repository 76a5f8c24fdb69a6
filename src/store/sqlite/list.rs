//! List requests on SQLite: [`Filters`] (the shared `store::list::Filters` with `?n`
//! placeholders and `rusqlite` values) and [`list_page`].

use crate::store::Page;
use rusqlite::Connection;
use rusqlite::types::Value;

/// The `WHERE` clause of a list request (`store::list::Filters`) with SQLite's values. Only
/// the filters given: `status = ?` lets SQLite search an index, where
/// `(? IS NULL OR status = ?)` makes it scan every row of the app. Each combination of filters
/// is its own cached statement.
pub type Filters = crate::store::list::Filters<Value>;

impl crate::store::list::Bind for Value {
    const MARK: char = '?';

    fn text(value: String) -> Self {
        Value::Text(value)
    }

    fn int(value: i64) -> Self {
        Value::Integer(value)
    }
}

impl Filters {
    /// Adds `column = value` when a value is given.
    pub fn eq<V: Into<Value>>(self, column: &str, value: Option<V>) -> Self {
        match value {
            Some(value) => self.bind(column, "=", value.into()),
            None => self,
        }
    }

    /// Adds `event_id = value` when a value is given, and where SQLite finds those rows without
    /// an index every publish writes: the rowid range of the event's own tasks
    /// (`events.first_task_id` .. `last_task_id`) and the copies that name it
    /// (`tasks_event_copies`). At most the event's tasks are read, by `rowid` (the app's
    /// condition is kept out of index searches: [`Filters::app_by_rowid`]), then sorted by id
    /// (docs/dev/storage.md, "An event's tasks by id range").
    pub fn event(self, event_id: Option<i64>) -> Self {
        let Some(event_id) = event_id else {
            return self;
        };
        let filters = self.app_by_rowid().bind("event_id", "=", event_id.into());
        let n = filters.values().len();
        filters.always(&format!(
            "id IN (SELECT id FROM tasks WHERE id BETWEEN (SELECT first_task_id FROM events WHERE id = ?{n})
                                                 AND (SELECT last_task_id FROM events WHERE id = ?{n})
                    UNION ALL SELECT id FROM tasks WHERE event_id = ?{n} AND task_type <> 'event')"
        ))
    }

    /// Adds `column <op> value`, e.g. `finished_at >= ?`. `op` is the caller's constant.
    pub fn cmp<V: Into<Value>>(self, column: &str, op: &str, value: V) -> Self {
        self.bind(column, op, value.into())
    }
}

/// One page of `table` (newest first) matching `filters`, and the total count of matches.
pub fn list_page<T>(
    conn: &Connection,
    table: &str,
    columns: &str,
    filters: &Filters,
    page: Page,
    from_row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<(i64, Vec<T>)> {
    Ok((
        count(conn, table, filters)?,
        page_of(conn, table, columns, filters, page, from_row)?,
    ))
}

/// The number of rows of `table` matching `filters`.
fn count(conn: &Connection, table: &str, filters: &Filters) -> rusqlite::Result<i64> {
    conn.prepare_cached(&format!(
        "SELECT count(*) FROM {table} WHERE {}",
        filters.condition()
    ))?
    .query_row(rusqlite::params_from_iter(filters.values()), |r| r.get(0))
}

/// One page of `table` (newest first) matching `filters`, without the total (for a caller
/// that knows it otherwise, e.g. the task counters).
pub fn page_of<T>(
    conn: &Connection,
    table: &str,
    columns: &str,
    filters: &Filters,
    page: Page,
    from_row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut values = filters.values().to_vec();
    values.push(page.limit().into());
    values.push(page.offset().into());
    conn.prepare_cached(&page_sql(table, columns, filters))?
        .query_map(rusqlite::params_from_iter(&values), from_row)?
        .collect()
}

/// The statement of [`page_of`]: `filters`' placeholders, then the limit's and the offset's.
pub fn page_sql(table: &str, columns: &str, filters: &Filters) -> String {
    let n = filters.values().len();
    // `LIMIT ? + 0`: with a bare `LIMIT ?` SQLite plans with the bound value, so every new
    // value would recompile the statement.
    let order = format!(
        "ORDER BY id DESC LIMIT ?{} + 0 OFFSET ?{} + 0",
        n + 1,
        n + 2
    );
    match filters.merged() {
        false => format!("{} {order}", filters.select(table, columns)),
        // Arms (`Filters::merged_over`) make a compound `SELECT … UNION ALL … ORDER BY id
        // DESC`, which SQLite merges: each arm runs as a co-routine in its index's order and
        // is read only as far as the page needs. They pass ids alone (from the index itself
        // when no other column is tested), and the page's rows are read by id after: rows
        // skipped by the offset are never read whole.
        true => format!(
            "SELECT {columns} FROM {table} WHERE id IN ({} {order}) ORDER BY id DESC",
            filters.select(table, "id")
        ),
    }
}
