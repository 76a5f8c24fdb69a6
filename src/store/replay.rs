//! The `replay_guard` table: (key id, signature) pairs already accepted, so a signed request
//! replayed within its window is refused. No record type: only [`ReplayQueries`]. Rows are
//! keyed by the pair's signed time first (`sent_ms`, the request's `X-Timestamp`), so records
//! are appended and pruned at the two ends of the table (docs/dev/storage.md, "Replay records
//! keyed by time").

use crate::store::StoreError;
/// The queries on the replay guard, one body per backend (`store::sqlite::replay`,
/// `store::postgres::replay`); part of [`crate::store::Tx`].
pub trait ReplayQueries {
    /// Records the pair, signed at `sent_ms`, as used until `expires_ms`. False when it is already recorded and has not
    /// expired: a replay. An expired row is taken over, so no separate clean-up has to run first.
    /// Must run inside a write transaction (`Store::write`): it is the durable half of the
    /// check, committed before the request is acted on.
    fn first_use_of_signature(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// [`ReplayQueries::first_use_of_signature`] and, on first use, the key generation
    /// (`KeyQueries::key_generation`) read in the same transaction: `None` for a replay. What
    /// a signed request runs first in its own transaction (`auth::RequestGuard`).
    fn first_use_at_key_generation(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError>;
    /// The key generation (`KeyQueries::key_generation`), unless the pair, signed at
    /// `sent_ms`, is recorded and still live at `now_ms` (`None`: a replay). One statement (a
    /// primary-key lookup and the generation), so SQLite takes its read lock once for both:
    /// the check of a read whose record is written after its answer
    /// (`replay_behind::ReadReplays`).
    fn key_generation_unless_recorded(
        &mut self,
        key_id: &str,
        signature: &str,
        sent_ms: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, StoreError>;
    /// Deletes up to `limit` rows that expired before `now_ms` among those signed before
    /// `sent_before_ms` (the oldest end of the table: a request signed then is outside the skew
    /// window now, so no replay of it can be accepted); returns how many went.
    fn prune_replay(
        &mut self,
        now_ms: i64,
        sent_before_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError>;
    /// Hands this read (or [`crate::store::Store::write_statement`]'s write) the pair to
    /// record ([`ReplayQueries::first_use_at_key_generation`]): a statement that can carry it
    /// records it too, in the same round trip, and [`ReplayQueries::carried_first_use`] tells
    /// what became of it. False where a read cannot write (the default): the caller records
    /// the pair first, in a write of its own (docs/dev/storage.md, "A read's replay record on
    /// PostgreSQL", "A publish in one statement on PostgreSQL").
    fn carry_first_use(&mut self, pair: FirstUse) -> bool {
        let _ = pair;
        false
    }
    /// The outcome of the pair handed over by [`ReplayQueries::carry_first_use`], as
    /// [`ReplayQueries::first_use_at_key_generation`] gives it (`None`: a replay); recorded
    /// now, on the read's (or write's) connection, when no statement carried it.
    fn carried_first_use(&mut self) -> Result<Option<i64>, StoreError> {
        Err(StoreError::Other(anyhow::anyhow!(
            "no replay record was handed to this read"
        )))
    }
}

/// A signed request's (key id, signature) pair to record, signed at `sent_ms`, used until
/// `expires_ms`, at `now_ms` ([`ReplayQueries::carry_first_use`]). `generation`: the key
/// generation the request's key was read at; a write that carries the pair writes (the pair
/// and its own rows) only while that generation holds, so that what it wrote stands
/// (`EventQueries::insert_event_with_tasks_at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstUse {
    pub key_id: String,
    pub signature: String,
    pub sent_ms: i64,
    pub expires_ms: i64,
    pub now_ms: i64,
    pub generation: i64,
}

/// The statement of [`ReplayQueries::key_generation_unless_recorded`], the same SQL on both
/// backends (SQLite reads `$1`…`$4` as named parameters, numbered in the order they appear):
/// whether the pair is recorded and live, and the key generation.
pub(crate) const KEY_GENERATION_UNLESS_RECORDED: &str = "SELECT EXISTS (SELECT 1 FROM replay_guard
      WHERE sent_at = $1 AND key_id = $2 AND signature = $3 AND expires_at >= $4),
     coalesce((SELECT generation FROM key_generation WHERE id = 1), 0)";
