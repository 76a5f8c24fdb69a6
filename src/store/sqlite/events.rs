//! [`EventQueries`] on SQLite: the SQL of the `events` table (records in `store::events`).

use crate::store::Page;
use crate::store::events::{Event, NewEvent};
use crate::store::json::{EventPayload, Stored};
use crate::store::sqlite::SqliteTx;
use crate::store::sqlite::ids;
use crate::store::sqlite::list::{Filters, list_page};
use crate::store::tasks::{NewTask, TaskQueries};
use crate::store::{EventQueries, StoreError};
use rusqlite::{OptionalExtension, Row, params};

const COLUMNS: &str = "id, app_id, event_name, event_key, payload, status, task_count, created_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        id: r.get(0)?,
        app_id: r.get(1)?,
        event_name: r.get(2)?,
        event_key: r.get(3)?,
        payload: r.get::<_, Stored<EventPayload>>(4)?.0,
        status: r.get(5)?,
        task_count: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// Inserts `event`'s row with its id; `task_ids`: the first and last id of its tasks, if it
/// has any.
fn insert_row(
    conn: &rusqlite::Connection,
    id: i64,
    event: &NewEvent<'_>,
    task_count: i64,
    task_ids: Option<(i64, i64)>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO events (id, app_id, event_name, event_key, payload, status, task_count, created_at,
                             first_task_id, last_task_id)
         VALUES (?1, ?2, ?3, ?4, ?5, 'dispatched', ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        id,
        event.app_id,
        event.event_name,
        event.event_key,
        event.payload,
        task_count,
        event.now_ms,
        task_ids.map(|r| r.0),
        task_ids.map(|r| r.1)
    ])?;
    Ok(())
}

impl EventQueries for SqliteTx<'_> {
    fn insert_event(&mut self, event: &NewEvent<'_>, task_count: i64) -> Result<i64, StoreError> {
        let id = ids::take(self.0, ids::Table::Events, 1)?;
        insert_row(self.0, id, event, task_count, None)?;
        Ok(id)
    }

    /// The event's id is taken first, then its tasks are inserted (their ids in a row, from
    /// the block held in memory), then the event row with the first and last of them: the
    /// reads of an event's tasks search `tasks` by rowid between the two instead of through
    /// an index every publish would write (docs/dev/storage.md, "An event's tasks by id range").
    fn insert_event_with_tasks(
        &mut self,
        event: &NewEvent<'_>,
        tasks: &mut [NewTask<'_>],
    ) -> Result<Event, StoreError> {
        let id = ids::take(self.0, ids::Table::Events, 1)?;
        for task in tasks.iter_mut() {
            task.event_id = Some(id);
        }
        let task_ids = self.insert_tasks(tasks)?;
        let range = task_ids.first().zip(task_ids.last()).map(|(a, b)| (*a, *b));
        let task_count = i64::try_from(task_ids.len()).unwrap_or(i64::MAX);
        insert_row(self.0, id, event, task_count, range)?;
        self.get_event(event.app_id, id)?.ok_or_else(|| {
            StoreError::Other(anyhow::anyhow!(
                "event {id} vanished inside its transaction"
            ))
        })
    }

    fn find_event_by_key(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: &str,
        since_ms: i64,
    ) -> Result<Option<Event>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events
             WHERE app_id = ?1 AND event_name = ?2 AND event_key = ?3 AND created_at >= ?4
             ORDER BY id LIMIT 1"
            ))?
            .query_row(params![app_id, event_name, event_key, since_ms], from_row)
            .optional()?)
    }

    fn get_event(&mut self, app_id: &str, id: i64) -> Result<Option<Event>, StoreError> {
        let conn = self.0;
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events WHERE app_id = ?1 AND id = ?2"
            ))?
            .query_row(params![app_id, id], from_row)
            .optional()?)
    }

    fn list_events(
        &mut self,
        app_id: &str,
        event_name: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<Event>), StoreError> {
        let conn = self.0;
        let filters = Filters::app(app_id).eq("event_name", event_name.map(str::to_string));
        Ok(list_page(
            conn, "events", COLUMNS, &filters, page, from_row,
        )?)
    }
}
