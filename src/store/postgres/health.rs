//! The health check's write probe on PostgreSQL (twin of `health::probe`, docs/design.md §10).

use postgres::{Error, GenericClient};

/// Reads the schema marker and writes the probe row in one transaction (a savepoint when `c`
/// is already a transaction), proving the database can still be written, not just read. Every
/// node writes the same row; the last writer's time stays.
pub fn probe(c: &mut impl GenericClient, now_ms: i64) -> Result<(), Error> {
    let mut tx = c.transaction()?;
    tx.query_one("SELECT count(*) FROM webhookd_schema", &[])?;
    tx.execute(
        "INSERT INTO health_probe (id, checked_at) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
        &[&now_ms],
    )?;
    tx.commit()
}
