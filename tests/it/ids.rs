//! An id is never handed out twice: after the newest endpoint, event, task or retry policy is
//! deleted (by hand or by retention, which deletes whole rows), and across a restart, the next
//! one gets a new id. SQLite tables are AUTOINCREMENT (their high-water mark is kept in
//! `sqlite_sequence`, committed with the row or, for events, tasks and attempts, raised a block
//! of ids ahead and committed with or before the rows that use it: docs/dev/storage.md, "Ids from
//! reserved blocks"); PostgreSQL identities come from sequences,
//! which never go back (both stores).

use crate::delivery::{endpoint, policy, task};
use crate::support::{Db, TestServer, ok};
use serde_json::json;

/// Nothing listens here.
const NOWHERE: &str = "http://127.0.0.1:9/hook";

fn id(value: &serde_json::Value) -> i64 {
    value["id"].as_i64().expect("an id")
}

#[test]
fn deleting_the_newest_row_never_gives_its_id_again() {
    let server = TestServer::start();
    let c = server.client();
    let far = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    let event = |c: &webhookd::client::Client| {
        id(&ok(
            c,
            "POST",
            "/events",
            Some(json!({"event_name": "nobody.listens", "payload": {}})),
        ))
    };
    let kept = endpoint(&c, NOWHERE, json!({}));
    let newest = [
        ("endpoints", endpoint(&c, NOWHERE, json!({}))),
        ("events", event(&c)),
        ("tasks", id(&task(&c, kept, json!({"run_at": far})))),
        ("retry_policies", policy(&c, 3, "fixed", 60, 60)),
    ];
    let mut db = Db::open(&server.db);
    // Whole rows, newest first: what retention does to finished tasks and old events, and what
    // leaves SQLite's plain rowid tables at max(id) + 1 = the deleted id.
    for (table, newest_id) in newest {
        let n = db.execute(&format!("DELETE FROM {table} WHERE id = ?1"), &[&newest_id]);
        assert_eq!(n, 1, "{table}");
    }
    let again = [
        ("endpoints", endpoint(&c, NOWHERE, json!({}))),
        ("events", event(&c)),
        ("tasks", id(&task(&c, kept, json!({"run_at": far})))),
        ("retry_policies", policy(&c, 3, "fixed", 60, 60)),
    ];
    for ((table, deleted), (_, new)) in newest.iter().zip(&again) {
        assert!(
            new > deleted,
            "{table}: id {deleted} was deleted, then {new} handed out"
        );
    }
    // Across a restart (the high-water mark is on disk, not in memory).
    for (table, newest_id) in again {
        db.execute(&format!("DELETE FROM {table} WHERE id = ?1"), &[&newest_id]);
    }
    drop(db);
    let server = server.restart(|_| {});
    let c = server.client();
    let after = [
        ("endpoints", endpoint(&c, NOWHERE, json!({}))),
        ("events", event(&c)),
        ("tasks", id(&task(&c, kept, json!({"run_at": far})))),
        ("retry_policies", policy(&c, 3, "fixed", 60, 60)),
    ];
    for ((table, deleted), (_, new)) in again.iter().zip(&after) {
        assert!(
            new > deleted,
            "{table} after a restart: {deleted} then {new}"
        );
    }
}
