//! The PostgreSQL store's groundwork against a private server (tests/it/pg.rs): the schema
//! applies on an empty database and matches SQLite's table for table, reopening changes
//! nothing, the queue tables' autovacuum settings are applied once, newer and foreign databases
//! are refused untouched, racing opens upgrade once, and no password shows in an error. Plus: `serve`/`keys` refuse a PostgreSQL URL for now.

use crate::pg::PgServer;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use webhookd::store;
use webhookd::store::postgres as pgstore;

/// Per table: (column, type, not null, part of the primary key), sorted.
type Columns = BTreeMap<String, BTreeSet<(String, String, bool, bool)>>;
/// Per index name: (table, partial, columns in order).
type Indexes = BTreeMap<String, (String, bool, Vec<String>)>;

fn sqlite_shape() -> (Columns, Indexes) {
    let dir = tempfile::tempdir().unwrap();
    let pool = store::sqlite::open(&dir.path().join("shape.sqlite"), 1).unwrap();
    let conn = pool.get().unwrap();
    let tables = crate::migrate::sqlite_strings(&conn, crate::migrate::SQLITE_TABLES, []);
    let mut columns = Columns::new();
    let mut indexes = Indexes::new();
    for table in tables {
        let mut stmt = conn
            .prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1)")
            .unwrap();
        let cols = stmt
            .query_map([&table], |r| {
                let kind = match r.get::<_, String>(1)?.to_ascii_uppercase().as_str() {
                    "INTEGER" => "int".to_string(),
                    "TEXT" => "text".to_string(),
                    "REAL" => "real".to_string(),
                    other => other.to_string(),
                };
                let pk = r.get::<_, i64>(3)? > 0;
                // A primary key column is NOT NULL in effect (SQLite's pragma says 0 for rowid).
                Ok((r.get(0)?, kind, pk || r.get::<_, bool>(2)?, pk))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        columns.insert(table.clone(), cols);
        let mut stmt = conn
            .prepare("SELECT name, partial FROM pragma_index_list(?1) WHERE origin = 'c'")
            .unwrap();
        let found: Vec<(String, bool)> = stmt
            .query_map([&table], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (index, partial) in found {
            let cols: Vec<String> = conn
                .prepare("SELECT name FROM pragma_index_info(?1) ORDER BY seqno")
                .unwrap()
                .query_map([&index], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            indexes.insert(index, (table.clone(), partial, cols));
        }
    }
    (columns, indexes)
}

fn postgres_shape(client: &mut postgres::Client) -> (Columns, Indexes) {
    let pk: BTreeSet<(String, String)> = client
        .query(
            "SELECT t.relname::text, a.attname::text
               FROM pg_index x
               JOIN pg_class t ON t.oid = x.indrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace
               JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY (x.indkey::int2[])
              WHERE n.nspname = current_schema() AND x.indisprimary",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut columns = Columns::new();
    for row in client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text
               FROM information_schema.columns
              WHERE table_schema = current_schema() AND table_name <> 'webhookd_schema'",
            &[],
        )
        .unwrap()
    {
        let table: String = row.get(0);
        let column: String = row.get(1);
        let kind = match row.get::<_, &str>(2) {
            "bigint" => "int".to_string(),
            "double precision" => "real".to_string(),
            other => other.to_string(),
        };
        let is_pk = pk.contains(&(table.clone(), column.clone()));
        let not_null = row.get::<_, &str>(3) == "NO";
        columns
            .entry(table)
            .or_default()
            .insert((column, kind, not_null, is_pk));
    }
    let mut indexes = Indexes::new();
    for row in client
        .query(
            "SELECT i.relname::text, t.relname::text, x.indpred IS NOT NULL,
                    array(SELECT a.attname::text
                            FROM unnest(x.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
                            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
                           ORDER BY k.ord)
               FROM pg_index x
               JOIN pg_class i ON i.oid = x.indexrelid
               JOIN pg_class t ON t.oid = x.indrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace
              WHERE n.nspname = current_schema() AND NOT x.indisprimary
                AND t.relname <> 'webhookd_schema'",
            &[],
        )
        .unwrap()
    {
        indexes.insert(row.get(0), (row.get(1), row.get(2), row.get(3)));
    }
    (columns, indexes)
}

/// A private server with database `name` opened once by the store (schema applied), and a
/// plain connection to it; `None` when PostgreSQL is not installed (a loud skip).
fn opened(name: &str) -> Option<(PgServer, String, postgres::Client)> {
    let server = PgServer::start()?;
    let url = server.create_database(name);
    drop(pgstore::open(&url, 1).unwrap());
    let client = server.client(&url);
    Some((server, url, client))
}

/// The one value `sql` selects.
fn one<T: for<'a> postgres::types::FromSql<'a>>(client: &mut postgres::Client, sql: &str) -> T {
    client.query_one(sql, &[]).unwrap().get(0)
}

fn marker(client: &mut postgres::Client) -> (String, i64) {
    let row = client
        .query_one("SELECT application, version FROM webhookd_schema", &[])
        .unwrap();
    (row.get(0), row.get(1))
}

fn table_names(client: &mut postgres::Client) -> Vec<String> {
    client
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn schema_applies_on_an_empty_database_and_matches_sqlite() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.create_database("shape");
    let pool = pgstore::open(&url, 2).unwrap();
    let mut pooled = pool.get().unwrap();
    assert_eq!(
        marker(&mut pooled),
        ("webhookd".to_string(), pgstore::SCHEMA_VERSION)
    );
    assert_eq!(
        pgstore::SCHEMA_VERSION,
        store::sqlite::SCHEMA_VERSION,
        "every SQLite upgrade step needs its twin in migrations/postgres/"
    );
    let (pg_columns, mut pg_indexes) = postgres_shape(&mut pooled);
    let (mut sqlite_columns, mut sqlite_indexes) = sqlite_shape();
    // What differs on purpose (docs/dev/storage.md "Task totals and the tasks indexes"):
    // SQLite keeps task counters, PostgreSQL counts; PostgreSQL indexes its leases.
    assert!(sqlite_columns.remove("task_counts").is_some());
    assert!(pg_indexes.remove("tasks_leased").is_some());
    // SQLite finds an event's tasks by their id range (events.first_task_id, last_task_id)
    // and its resent copies by tasks_event_copies, PostgreSQL all through tasks_event (docs/dev/storage.md "An event's tasks by id range").
    assert!(pg_indexes.remove("tasks_event").is_some());
    assert!(sqlite_indexes.remove("tasks_event_copies").is_some());
    // PostgreSQL's in-order claim looks for an endpoint's running task through an index of
    // its own (docs/dev/storage.md "Claims whatever the statistics").
    assert!(pg_indexes.remove("tasks_endpoint_running").is_some());
    // SQLite lists by app alone through one arm per status of tasks_app_status and writes one
    // index fewer per task; PostgreSQL counts a list's total and keeps tasks_app for the count
    // by app alone (migrations/postgres/tasks_app_dropped.sql).
    assert!(pg_indexes.remove("tasks_app").is_some());
    // SQLite finds an in-order endpoint's head from tasks_endpoint_due and the few tasks not
    // due at their run_at, writing one pending-only index fewer per task; PostgreSQL keeps
    // tasks_endpoint_order (migrations/postgres/in_order_head_late.sql).
    assert!(pg_indexes.remove("tasks_endpoint_order").is_some());
    assert!(sqlite_indexes.remove("tasks_endpoint_late").is_some());
    assert!(!sqlite_columns.is_empty() && !sqlite_indexes.is_empty());
    assert_eq!(pg_columns, sqlite_columns, "tables and columns differ");
    assert_eq!(pg_indexes, sqlite_indexes, "indexes differ");

    // Ids are identities: an insert without one gets one, like SQLite's AUTOINCREMENT.
    let id: i64 = pooled
        .query_one(
            "INSERT INTO retry_policies (app_id, name, max_attempts, backoff_type,
                 initial_delay_sec, max_delay_sec, created_at, updated_at)
             VALUES ('a', 'p', 3, 'fixed', 1, 1, 0, 0) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(id, 1);
}

#[test]
fn reopening_a_current_database_changes_nothing() {
    let Some((_server, url, mut client)) = opened("reopen") else {
        return;
    };
    client
        .execute(
            "INSERT INTO api_keys (key_id, secret, app_id, name, created_at)
             VALUES ('k1', 's', 'default', 'n', 1)",
            &[],
        )
        .unwrap();
    // The marker row's xmin names the transaction that last wrote it.
    let xmin = "SELECT xmin::text FROM webhookd_schema";
    let before: String = one(&mut client, xmin);
    let pool = pgstore::open(&url, 1).unwrap();
    drop(pool);
    assert_eq!(
        one::<String>(&mut client, xmin),
        before,
        "reopening rewrote the marker"
    );
    assert_eq!(marker(&mut client).1, pgstore::SCHEMA_VERSION);
    assert_eq!(one::<i64>(&mut client, "SELECT count(*) FROM api_keys"), 1);
}

#[test]
fn the_queue_tables_get_their_autovacuum_settings_once() {
    let Some((_server, url, mut client)) = opened("tuning") else {
        return;
    };
    let options = |client: &mut postgres::Client, table: &str| -> Vec<String> {
        let sql = format!(
            "SELECT coalesce(reloptions, '{{}}') FROM pg_class WHERE oid = '{table}'::regclass"
        );
        one(client, &sql)
    };
    let tuning = "SELECT tuning FROM webhookd_schema";
    assert_eq!(one::<i64>(&mut client, tuning), 1);
    for table in ["tasks", "replay_guard"] {
        let set = options(&mut client, table);
        assert!(
            set.contains(&"autovacuum_vacuum_scale_factor=0".to_string()),
            "{table}: {set:?}"
        );
        assert!(
            set.contains(&"autovacuum_vacuum_cost_delay=0".to_string()),
            "{table}: {set:?}"
        );
    }

    // An operator's own setting stays: the step is applied once, not at every start.
    client
        .batch_execute("ALTER TABLE tasks SET (autovacuum_vacuum_scale_factor = 0.05)")
        .unwrap();
    drop(pgstore::open(&url, 1).unwrap());
    assert!(
        options(&mut client, "tasks").contains(&"autovacuum_vacuum_scale_factor=0.05".to_string())
    );

    // A database written by a binary without tuning steps (no `tuning` column) gets them.
    client
        .batch_execute(
            "ALTER TABLE webhookd_schema DROP COLUMN tuning;
             ALTER TABLE tasks RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_delay)",
        )
        .unwrap();
    drop(pgstore::open(&url, 1).unwrap());
    assert_eq!(one::<i64>(&mut client, tuning), 1);
    let set = options(&mut client, "tasks");
    assert!(
        set.contains(&"autovacuum_vacuum_scale_factor=0".to_string()),
        "{set:?}"
    );
    assert_eq!(marker(&mut client).1, pgstore::SCHEMA_VERSION);
}

#[test]
fn a_newer_database_is_refused_untouched() {
    let Some((server, url, mut client)) = opened("newer") else {
        return;
    };
    let newer = pgstore::SCHEMA_VERSION + 1;
    client
        .execute("UPDATE webhookd_schema SET version = $1", &[&newer])
        .unwrap();
    let tables = table_names(&mut client);

    let err = format!("{:#}", pgstore::open(&url, 1).unwrap_err());
    assert!(err.contains("newer webhookd"), "{err}");
    assert!(err.contains(&format!("schema version {newer}")), "{err}");
    assert!(err.contains("left unchanged"), "{err}");
    assert!(!err.contains(server.password()), "{err}");
    assert_eq!(marker(&mut client), ("webhookd".to_string(), newer));
    assert_eq!(table_names(&mut client), tables);
}

#[test]
fn a_database_of_another_program_is_refused_untouched() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.create_database("foreign");
    let mut client = server.client(&url);
    client
        .batch_execute(
            "CREATE TABLE invoices (id BIGINT PRIMARY KEY); INSERT INTO invoices VALUES (7)",
        )
        .unwrap();
    let err = format!("{:#}", pgstore::open(&url, 1).unwrap_err());
    assert!(err.contains("another program"), "{err}");
    assert!(err.contains("left unchanged"), "{err}");
    assert_eq!(table_names(&mut client), ["invoices"]);

    // A table named like the marker but holding another application's name: refused too.
    client
        .batch_execute(
            "CREATE TABLE webhookd_schema (application TEXT, version BIGINT);
             INSERT INTO webhookd_schema VALUES ('someone-else', 1)",
        )
        .unwrap();
    let err = format!("{:#}", pgstore::open(&url, 1).unwrap_err());
    assert!(err.contains("another program"), "{err}");
    assert_eq!(table_names(&mut client), ["invoices", "webhookd_schema"]);

    // The marker's name with other column types (an integer `application`, a text `version`):
    // refused with the same message, not a panic on the column's type.
    for (application, version) in [("INTEGER", "BIGINT"), ("TEXT", "TEXT")] {
        client
            .batch_execute(&format!(
                "DROP TABLE webhookd_schema;
                 CREATE TABLE webhookd_schema (application {application}, version {version});
                 INSERT INTO webhookd_schema VALUES ({}, '1')",
                if application == "TEXT" {
                    "'webhookd'"
                } else {
                    "1"
                }
            ))
            .unwrap();
        let err = format!("{:#}", pgstore::open(&url, 1).unwrap_err());
        assert!(
            err.contains("another program"),
            "{application}/{version}: {err}"
        );
    }
}

#[test]
fn opens_racing_on_one_database_upgrade_it_once() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.create_database("race");
    let racers = 4;

    // Four nodes start together on an empty database: without the advisory lock, all but one
    // fail on "relation already exists" (or a unique violation in the catalog).
    let start = Arc::new(Barrier::new(racers));
    let opened: Vec<_> = (0..racers)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                pgstore::open(&url, 1)
                    .map(drop)
                    .map_err(|e| format!("{e:#}"))
            })
        })
        .collect();
    for racer in opened {
        racer.join().unwrap().unwrap();
    }
    let mut client = server.client(&url);
    assert_eq!(marker(&mut client).1, pgstore::SCHEMA_VERSION);

    // The same with an upgrade step of an existing database: one step more, applied once.
    let step = "CREATE TABLE upgrade_probe (id BIGINT PRIMARY KEY);
                INSERT INTO upgrade_probe VALUES (1);";
    let start = Arc::new(Barrier::new(racers));
    let upgraded: Vec<_> = (0..racers)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                let url = pgstore::PgUrl::parse(&url).unwrap();
                let mut client = pgstore::connect(&url).unwrap();
                start.wait();
                pgstore::upgrade_with_extra(&mut client, &url.to_string(), &[step])
                    .map_err(|e| format!("{e:#}"))
            })
        })
        .collect();
    for racer in upgraded {
        racer.join().unwrap().unwrap();
    }
    assert_eq!(marker(&mut client).1, pgstore::SCHEMA_VERSION + 1);
    assert_eq!(
        one::<i64>(&mut client, "SELECT count(*) FROM upgrade_probe"),
        1
    );
    // And this binary, which knows one step less, now refuses the database.
    let err = format!("{:#}", pgstore::open(&url, 1).unwrap_err());
    assert!(err.contains("newer webhookd"), "{err}");
}

#[test]
fn a_connection_error_never_shows_the_password() {
    let Some(server) = PgServer::start() else {
        return;
    };
    server.create_database("secret");
    let wrong = "Wr0ng-pa55word";
    let url = server.url_with_password("secret", wrong);
    let err = format!("{:#}", pgstore::open(&url, 1).unwrap_err());
    let debug = format!("{:?}", pgstore::open(&url, 1).unwrap_err());
    for shown in [&err, &debug] {
        assert!(!shown.contains(wrong), "{shown}");
        assert!(!shown.contains(server.password()), "{shown}");
        assert!(shown.contains("webhookd:***@127.0.0.1"), "{shown}");
        assert!(shown.contains("password authentication failed"), "{shown}");
    }
    // The right password opens it.
    drop(pgstore::open(&server.url("secret"), 1).unwrap());
}

#[test]
fn serve_and_keys_name_an_unreachable_postgres_url_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://webhookd:hunter2@127.0.0.1:9/hooks";
    for args in [
        vec!["serve", "--db", url, "--listen", "127.0.0.1:0"],
        vec!["keys", "list", "--db", url],
        vec!["keys", "create", "--db", url, "--app", "a", "--name", "n"],
        vec!["keys", "revoke", "--db", url, "k"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"))
            .args(&args)
            .current_dir(dir.path())
            .env_remove("WEBHOOKD_DB")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("cannot connect to PostgreSQL"), "{stderr}");
        assert!(
            stderr.contains("webhookd:***@127.0.0.1:9/hooks"),
            "{stderr}"
        );
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
    // Nothing was created under the URL taken as a path ("postgres:" folder or file).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A pooled connection prepares each of the store's statements once and runs it again by name
/// (one round trip instead of two); a statement that a schema change made stale is prepared
/// again on its next use instead of failing for the life of the connection.
#[test]
fn a_pooled_connection_prepares_each_statement_once() {
    use webhookd::store::TaskQueries;
    let Some(server) = PgServer::start() else {
        return;
    };
    let url = server.create_database("statements");
    let pool = pgstore::open(&url, 1).unwrap();
    let mut conn = pool.get().unwrap();
    let sql = "SELECT app_id FROM tasks WHERE id = $1";
    let prepared = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1",
            &[&sql],
        )
        .unwrap()
        .get(0)
    };
    let (client, statements) = conn.split();
    for _ in 0..3 {
        let app = pgstore::PgTx::cached(&mut *client, &mut *statements, "n").task_app(1);
        assert_eq!(app.unwrap(), None);
    }
    assert_eq!(prepared(client), 1, "prepared once, kept");
    // Without the cache (a client of its own) the driver prepares and closes it each time.
    pgstore::PgTx::new(&mut *client, "n").task_app(1).unwrap();
    assert_eq!(prepared(client), 1);

    client
        .batch_execute("ALTER TABLE tasks ALTER COLUMN app_id TYPE VARCHAR(200)")
        .unwrap();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let app = pgstore::PgTx::cached(&mut *client, &mut *statements, "n").task_app(1);
        answers.push(app.map_err(|e| e.to_string()));
    }
    assert!(
        answers[1..].iter().all(|a| a == &Ok(None)),
        "prepared again after the change: {answers:?}"
    );
}
