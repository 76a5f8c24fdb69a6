//! Row ids of `events`, `tasks` and `attempts` handed out from blocks reserved in
//! `sqlite_sequence`, so that a commit does not write that table's page every time
//! (docs/dev/storage.md, "Ids from reserved blocks").
//!
//! The three tables stay `AUTOINCREMENT`: `sqlite_sequence` holds each one's high-water mark,
//! which SQLite raises in the transaction of an insert whose id is above it and never lowers.
//! Left to itself it raises the mark with every insert, one more WAL page in each commit of a
//! publish or a delivery round. Here a writer instead raises the mark once by [`BLOCK`] ids
//! (in the write transaction that first needs one, so the mark is committed with or before any
//! row that uses it) and
//! the process hands those ids out from memory, inserting them explicitly: an id below the mark
//! leaves `sqlite_sequence` alone. An id is never handed out twice: a new block starts above
//! both the mark and the table's highest row, and the mark only goes up, so a row deleted by
//! hand or by retention, the rest of a block lost to a crash or a restart, or a block taken by
//! another process (`webhookd` commands open the file too) is never met again. What it costs
//! is gaps: the unused rest of a block after a restart. If the transaction that reserved a
//! block rolls back, the mark goes back with it and the block's ids are then above it: SQLite
//! raises the mark again with each row that uses one (the page is written as before), so in
//! this process safety never depends on the reservation having committed. A second process
//! reserving while such a block is in use could be handed the same ids (its inserts would then
//! fail on the primary key, never overwrite); none does: the commands that open the file beside
//! a running server write none of these three tables.

use super::store::file_state;
use rusqlite::{Connection, params};
use std::sync::PoisonError;

/// Ids reserved at a time: one `sqlite_sequence` write per this many rows of a table.
pub(super) const BLOCK: i64 = 1024;

/// The tables whose ids come from blocks.
#[derive(Clone, Copy)]
pub(super) enum Table {
    Events = 0,
    Tasks = 1,
    Attempts = 2,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Tasks => "tasks",
            Table::Attempts => "attempts",
        }
    }
}

/// The unused rest of each table's block in this process (`FileState::ids`).
#[derive(Default)]
pub(super) struct IdBlocks([Block; 3]);

/// Ids `next..end` are reserved and unused.
#[derive(Default, Clone, Copy)]
struct Block {
    next: i64,
    end: i64,
}

impl IdBlocks {
    /// Forgets every block (a store opened on the file again: it may have been replaced).
    pub(super) fn clear(&mut self) {
        *self = IdBlocks::default();
    }
}

/// The first of `n` consecutive new ids of `table`, for rows the caller inserts with them in
/// its write transaction (under the writer lock, which keeps ids in insert order).
pub(super) fn take(conn: &Connection, table: Table, n: usize) -> rusqlite::Result<i64> {
    take_reserving(conn, table, n).map(|(first, _)| first)
}

/// [`take`], and whether it reserved a new block (and so wrote `sqlite_sequence`).
pub(super) fn take_reserving(
    conn: &Connection,
    table: Table,
    n: usize,
) -> rusqlite::Result<(i64, bool)> {
    let state = file_state(conn);
    let mut blocks = state.ids.lock().unwrap_or_else(PoisonError::into_inner);
    let block = &mut blocks.0[table as usize];
    let n = i64::try_from(n).unwrap_or(i64::MAX / 2);
    let reserved = block.end - block.next < n;
    if reserved {
        let size = n.max(BLOCK);
        let first = reserve(conn, table.name(), size)?;
        *block = Block {
            next: first,
            end: first + size,
        };
    }
    let first = block.next;
    block.next += n;
    Ok((first, reserved))
}

/// Raises `table`'s mark by `size` above the highest id it or the table holds and returns the
/// first id of the block.
fn reserve(conn: &Connection, table: &str, size: i64) -> rusqlite::Result<i64> {
    let high: i64 = conn
        .prepare_cached(&format!(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{table}'), 0),
                        coalesce((SELECT max(id) FROM {table}), 0))"
        ))?
        .query_row([], |r| r.get(0))?;
    let mark = high + size;
    let raised = conn
        .prepare_cached("UPDATE sqlite_sequence SET seq = ?2 WHERE name = ?1")?
        .execute(params![table, mark])?;
    if raised == 0 {
        // No row of this table has ever been inserted: SQLite makes the row at the first.
        conn.prepare_cached("INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)")?
            .execute(params![table, mark])?;
    }
    Ok(high + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("ids.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, x);
             CREATE TABLE tasks (id INTEGER PRIMARY KEY AUTOINCREMENT, x);
             CREATE TABLE attempts (id INTEGER PRIMARY KEY AUTOINCREMENT, x);",
        )
        .unwrap();
        (dir, conn)
    }

    fn mark(conn: &Connection, table: &str) -> Option<i64> {
        conn.query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = ?1",
            [table],
            |r| r.get(0),
        )
        .ok()
    }

    #[test]
    fn blocks_start_above_the_mark_and_the_rows_and_raise_the_mark_once() {
        let (_dir, conn) = db();
        assert_eq!(take(&conn, Table::Tasks, 1).unwrap(), 1);
        assert_eq!(mark(&conn, "tasks"), Some(BLOCK));
        assert_eq!(take(&conn, Table::Tasks, 3).unwrap(), 2);
        assert_eq!(take(&conn, Table::Tasks, 1).unwrap(), 5);
        // Rows inserted with ids below the mark leave it where it is.
        conn.execute("INSERT INTO tasks (id, x) VALUES (5, 0)", [])
            .unwrap();
        assert_eq!(mark(&conn, "tasks"), Some(BLOCK));
        // A request larger than what is left takes a new block of its own size.
        assert_eq!(take(&conn, Table::Tasks, 2_000).unwrap(), BLOCK + 1);
        assert_eq!(mark(&conn, "tasks"), Some(BLOCK + 2_000));
        // Tables are apart.
        assert_eq!(take(&conn, Table::Events, 1).unwrap(), 1);
        assert_eq!(mark(&conn, "attempts"), None);
    }

    #[test]
    fn a_new_block_starts_above_rows_and_marks_left_by_others() {
        let (_dir, conn) = db();
        // Another process's insert (plain AUTOINCREMENT) and a row inserted above any mark.
        conn.execute("INSERT INTO events (x) VALUES (0)", [])
            .unwrap();
        conn.execute("INSERT INTO attempts (id, x) VALUES (70, 0)", [])
            .unwrap();
        conn.execute(
            "UPDATE sqlite_sequence SET seq = 40 WHERE name = 'events'",
            [],
        )
        .unwrap();
        conn.execute("DELETE FROM attempts", []).unwrap();
        assert_eq!(take(&conn, Table::Events, 1).unwrap(), 41);
        assert_eq!(take(&conn, Table::Attempts, 1).unwrap(), 71);
        // Forgotten blocks (a restart) are never handed out again.
        file_state(&conn).ids.lock().unwrap().clear();
        assert_eq!(take(&conn, Table::Events, 1).unwrap(), 41 + BLOCK);
    }

    #[test]
    fn a_rolled_back_reservation_still_never_repeats_an_id() {
        let (_dir, conn) = db();
        conn.execute_batch("BEGIN").unwrap();
        assert_eq!(take(&conn, Table::Tasks, 1).unwrap(), 1);
        conn.execute_batch("ROLLBACK").unwrap();
        assert_eq!(mark(&conn, "tasks"), None);
        // The block's next ids are above the (rolled back) mark: SQLite raises it with them.
        let id = take(&conn, Table::Tasks, 1).unwrap();
        assert_eq!(id, 2);
        conn.execute("INSERT INTO tasks (id, x) VALUES (?1, 0)", [id])
            .unwrap();
        assert_eq!(mark(&conn, "tasks"), Some(2));
        file_state(&conn).ids.lock().unwrap().clear();
        assert_eq!(take(&conn, Table::Tasks, 1).unwrap(), 3);
    }
}
