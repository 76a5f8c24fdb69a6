//! The `events` table on PostgreSQL ([`EventQueries`] on a [`PgTx`]).

use super::group::{Publish, Stated, Turn};
use super::list::{Filters, list_page};
use crate::store::Page;
use crate::store::events::{Event, NewEvent};
use crate::store::json::{EventPayload, Stored};
use crate::store::postgres::PgTx;
use crate::store::postgres::replay::{Carried, record_pair_if};
use crate::store::postgres::tasks::{TaskColumns, insert_tasks_sql};
use crate::store::replay::FirstUse;
use crate::store::tasks::NewTask;
use crate::store::{EventQueries, StoreError};
use postgres::types::ToSql;
use postgres::{Error, GenericClient, Row};

pub(super) const COLUMNS: &str =
    "id, app_id, event_name, event_key, payload, status, task_count, created_at";

pub(super) fn from_row(r: &Row) -> Result<Event, Error> {
    Ok(Event {
        id: r.try_get(0)?,
        app_id: r.try_get(1)?,
        event_name: r.try_get(2)?,
        event_key: r.try_get(3)?,
        payload: r.try_get::<_, Stored<EventPayload>>(4)?.0,
        status: r.try_get(5)?,
        task_count: r.try_get(6)?,
        created_at: r.try_get(7)?,
    })
}

impl<C: GenericClient> PgTx<'_, C> {
    /// The event row and its tasks in one statement; with `at_generation`, only while the app's
    /// target generation (0 when it has none yet) is that one, else nothing (`None`).
    ///
    /// At a generation, outside a transaction and handed the request's replay record
    /// ([`crate::store::ReplayQueries::carry_first_use`], `Store::write_statement`), the same
    /// statement records the pair too, and only while the key generation is the one the
    /// request was authenticated at: the whole publish is one autocommit statement, durable
    /// at its commit (docs/dev/storage.md, "A publish in one statement on PostgreSQL"); when
    /// other such publishes are in flight, one statement writes several of them
    /// ([`super::group::PublishGroups`]; "Publishes grouped into one statement on PostgreSQL"). What the
    /// statement found ([`Stated`]) tells apart: written (the event), a replay (no event, both
    /// generations held: the pair is settled as refused), and a generation moved (nothing
    /// written: the pair stays to record, `None`, and the caller goes the transaction's way).
    fn event_with_tasks(
        &mut self,
        event: &NewEvent<'_>,
        at_generation: Option<i64>,
        tasks: &mut [NewTask<'_>],
    ) -> Result<Option<Event>, StoreError> {
        let written = match (at_generation, std::mem::take(&mut self.pair)) {
            (Some(generation), Carried::Pending(pair)) => {
                let stated = self.stated_with_pair(event, generation, &pair, tasks)?;
                self.pair = match (&stated.event, stated.targets_held && stated.key_held) {
                    (Some(_), _) => Carried::Done(Some(pair.generation)),
                    (None, true) => Carried::Done(None),
                    (None, false) => Carried::Pending(pair),
                };
                stated.event
            }
            (_, other) => {
                self.pair = other;
                self.statement(event, at_generation, None, tasks)?
                    .as_ref()
                    .map(from_row)
                    .transpose()?
            }
        };
        let Some(event) = written else {
            return Ok(None);
        };
        for task in tasks.iter_mut() {
            task.event_id = Some(event.id);
        }
        if !tasks.is_empty() {
            self.tasks_due();
        }
        Ok(Some(event))
    }

    /// A publish carrying its replay pair: written by a group's statement, or by its own
    /// ([`PgTx::statement`]) when it runs alone.
    fn stated_with_pair(
        &mut self,
        event: &NewEvent<'_>,
        generation: i64,
        pair: &FirstUse,
        tasks: &[NewTask<'_>],
    ) -> Result<Stated, StoreError> {
        let turn = match self.groups {
            Some(groups) => {
                groups.write(&mut self.c, || Publish::new(event, generation, pair, tasks))
            }
            None => Turn::Alone(None),
        };
        let _slot = match turn {
            Turn::Stated(stated) => return Ok(stated),
            Turn::Unread(why) => {
                return Err(StoreError::Other(anyhow::anyhow!(
                    "the publish was written by a group's statement, but its row could not be read: {why}"
                )));
            }
            Turn::Alone(slot) => slot,
        };
        let row = self
            .statement(event, Some(generation), Some(pair), tasks)?
            .ok_or_else(|| StoreError::Other(anyhow::anyhow!("the publish returned no row")))?;
        Ok(Stated::of_row(&row)?)
    }

    /// One publish's statement: the event and its tasks, at `at_generation` when given, with
    /// `pair` recorded too when given,
    ///
    /// ```sql
    /// WITH g AS (SELECT <target generation> = $19 AS targets_held, <key generation> = $25 AS key_held),
    ///      pair AS (INSERT INTO replay_guard … SELECT … FROM g WHERE targets_held AND key_held
    ///               ON CONFLICT … RETURNING 1),
    ///      e AS (INSERT INTO events … SELECT … FROM pair RETURNING …),
    ///      t AS (INSERT INTO tasks … FROM unnest(…), e)
    /// SELECT <event>, targets_held, key_held FROM g LEFT JOIN e ON true
    /// ```
    ///
    /// (one row, whatever it wrote); without `pair`, the event's row when it was written.
    fn statement(
        &mut self,
        event: &NewEvent<'_>,
        at_generation: Option<i64>,
        pair: Option<&FirstUse>,
        tasks: &[NewTask<'_>],
    ) -> Result<Option<Row>, StoreError> {
        let NewEvent {
            app_id,
            event_name,
            event_key,
            payload,
            now_ms,
        } = *event;
        let task_count = i64::try_from(tasks.len()).unwrap_or(i64::MAX);
        let columns = TaskColumns::new(tasks);
        const TARGET_GENERATION: &str =
            "coalesce((SELECT generation FROM target_generation WHERE app_id = $1), 0) = $19";
        let tasks_sql = insert_tasks_sql(7, "e.id", ", e");
        let sql = match (pair, at_generation) {
            (Some(_), _) => format!(
                "WITH g AS (
                     SELECT {TARGET_GENERATION} AS targets_held,
                            coalesce((SELECT generation FROM key_generation WHERE id = 1), 0) = $25 AS key_held),
                 pair AS ({} RETURNING 1),
                 e AS (
                     INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
                     SELECT $1, $2, $3, $4, 'dispatched', $5, $6 FROM pair RETURNING {COLUMNS}),
                 t AS ({tasks_sql})
                 SELECT {COLUMNS}, targets_held, key_held FROM g LEFT JOIN e ON true",
                record_pair_if(20, Some("FROM g WHERE targets_held AND key_held"))
            ),
            (None, at_generation) => {
                let only_at = if at_generation.is_some() {
                    format!("WHERE {TARGET_GENERATION}")
                } else {
                    String::new()
                };
                format!(
                    "WITH e AS (
                         INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
                         SELECT $1, $2, $3, $4, 'dispatched', $5, $6 {only_at} RETURNING {COLUMNS}),
                     t AS ({tasks_sql})
                     SELECT {COLUMNS} FROM e"
                )
            }
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &app_id,
            &event_name,
            &event_key,
            &payload,
            &task_count,
            &now_ms,
        ];
        params.extend(columns.params());
        if let Some(generation) = &at_generation {
            params.push(generation);
        }
        if let Some(p) = pair {
            params.extend([
                &p.key_id as &(dyn ToSql + Sync),
                &p.signature,
                &p.sent_ms,
                &p.expires_ms,
                &p.now_ms,
                &p.generation,
            ]);
        }
        Ok(self.c.query_opt(&sql, &params)?)
    }
}

impl<C: GenericClient> EventQueries for PgTx<'_, C> {
    /// Inserts an event; `payload` is compact JSON text. Returns its id.
    fn insert_event(&mut self, event: &NewEvent<'_>, task_count: i64) -> Result<i64, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_one(
            "INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
             VALUES ($1, $2, $3, $4, 'dispatched', $5, $6) RETURNING id",
            &[
                &event.app_id,
                &event.event_name,
                &event.event_key,
                &event.payload,
                &task_count,
                &event.now_ms,
            ],
        )?
        .try_get(0)?)
    }

    /// One statement, so one round trip: the event row, its tasks (`event_id` from the event's
    /// row) and the event as stored, instead of an insert each and a read back.
    fn insert_event_with_tasks(
        &mut self,
        event: &NewEvent<'_>,
        tasks: &mut [NewTask<'_>],
    ) -> Result<Event, StoreError> {
        let row = self.event_with_tasks(event, None, tasks)?;
        row.ok_or_else(|| StoreError::Other(anyhow::anyhow!("the event's insert returned no row")))
    }

    /// The same statement, its event inserted only while the generation is `generation`: the
    /// target generation read and the publish in one round trip.
    fn insert_event_with_tasks_at(
        &mut self,
        event: &NewEvent<'_>,
        generation: i64,
        tasks: &mut [NewTask<'_>],
    ) -> Result<Option<Event>, StoreError> {
        self.event_with_tasks(event, Some(generation), tasks)
    }

    fn find_event_by_key(
        &mut self,
        app_id: &str,
        event_name: &str,
        event_key: &str,
        since_ms: i64,
    ) -> Result<Option<Event>, StoreError> {
        let c = &mut *self.c;
        c.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(
                jsonb_build_array($1::text, $2::text, $3::text)::text, 0))",
            &[&app_id, &event_name, &event_key],
        )?;
        Ok(c.query_opt(
            &format!(
                "SELECT {COLUMNS} FROM events
                 WHERE app_id = $1 AND event_name = $2 AND event_key = $3 AND created_at >= $4
                 ORDER BY id LIMIT 1"
            ),
            &[&app_id, &event_name, &event_key, &since_ms],
        )?
        .as_ref()
        .map(from_row)
        .transpose()?)
    }

    fn get_event(&mut self, app_id: &str, id: i64) -> Result<Option<Event>, StoreError> {
        let c = &mut *self.c;
        Ok(c.query_opt(
            &format!("SELECT {COLUMNS} FROM events WHERE app_id = $1 AND id = $2"),
            &[&app_id, &id],
        )?
        .as_ref()
        .map(from_row)
        .transpose()?)
    }

    fn list_events(
        &mut self,
        app_id: &str,
        event_name: Option<&str>,
        page: Page,
    ) -> Result<(i64, Vec<Event>), StoreError> {
        let c = &mut *self.c;
        let filters = Filters::app(app_id).eq("event_name", event_name.map(str::to_string));
        Ok(list_page(c, "events", COLUMNS, &filters, page, from_row)?)
    }
}
