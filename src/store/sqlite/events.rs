//! [`EventQueries`] on SQLite: the SQL of the `events` table (records in `store::events`).

use crate::store::Page;
#[allow(unused_imports)]
use crate::store::events::*;
use crate::store::sqlite::SqliteTx;
use crate::store::sqlite::ids;
use crate::store::sqlite::list::{Filters, list_page};
use crate::store::{EventQueries, StoreError};
use rusqlite::{OptionalExtension, Row, params};

const COLUMNS: &str = "id, app_id, event_name, event_key, payload, status, task_count, created_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    let payload: String = r.get(4)?;
    Ok(Event {
        id: r.get(0)?,
        app_id: r.get(1)?,
        event_name: r.get(2)?,
        event_key: r.get(3)?,
        payload: serde_json::from_str(&payload).unwrap_or_default(),
        status: r.get(5)?,
        task_count: r.get(6)?,
        created_at: r.get(7)?,
    })
}

impl EventQueries for SqliteTx<'_> {
    fn insert_event(&mut self, event: &NewEvent<'_>, task_count: i64) -> Result<i64, StoreError> {
        let NewEvent {
            app_id,
            event_name,
            event_key,
            payload,
            now_ms,
        } = *event;
        let conn = self.0;
        let id = ids::take(conn, ids::Table::Events, 1)?;
        conn.prepare_cached(
            "INSERT INTO events (id, app_id, event_name, event_key, payload, status, task_count, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'dispatched', ?6, ?7)",
        )?
        .execute(params![id, app_id, event_name, event_key, payload, task_count, now_ms])?;
        Ok(id)
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
