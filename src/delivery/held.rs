//! The endpoints the dispatcher loaded, held between rounds at their app's target generation.
//!
//! Where the claim returns each task's target generation (`Claimed::target_generation`), a
//! round reads only the endpoints it does not hold at the generation its claim saw, instead of
//! every claimed task's endpoint and retry policy each round. Every write that changes what a
//! send uses (an endpoint's URL, method, headers, secrets, timeout or retry policy, the
//! policy itself, a delete) gives the app a new generation in its own transaction, on any
//! node, so a held endpoint is used only while nothing of its app changed since it was read.
//! Where the claim does not say (`None`), every round reads, as without this.

use super::send::Target;
use crate::store::tasks::Claimed;
use std::collections::HashMap;
use std::sync::Arc;

/// A held endpoint unused for this long is dropped (swept at most once per this long).
const FORGET_AFTER_MS: i64 = 200_000;

struct Entry {
    generation: i64,
    target: Arc<Target>,
    used_ms: i64,
}

/// Endpoints by id, each with the target generation it was read at.
#[derive(Default)]
pub(super) struct Held {
    targets: HashMap<i64, Entry>,
    swept_ms: i64,
}

impl Held {
    /// The endpoint of `task`, when held at the generation its claim saw.
    pub(super) fn get(&mut self, task: &Claimed, now_ms: i64) -> Option<Arc<Target>> {
        let generation = task.target_generation?;
        let entry = self.targets.get_mut(&task.endpoint_id)?;
        if entry.generation != generation {
            return None;
        }
        entry.used_ms = now_ms;
        Some(entry.target.clone())
    }

    /// Holds `target`, read after a claim that saw `generation` (`None`: not held). Read after
    /// the claim, it is at least as new as that generation: if it is newer, the next claim
    /// sees a newer generation too, and reads it again.
    pub(super) fn keep(&mut self, generation: Option<i64>, target: &Arc<Target>, now_ms: i64) {
        let Some(generation) = generation else {
            return;
        };
        let entry = Entry {
            generation,
            target: target.clone(),
            used_ms: now_ms,
        };
        self.targets.insert(target.endpoint_id, entry);
        if now_ms.saturating_sub(self.swept_ms) >= FORGET_AFTER_MS {
            self.swept_ms = now_ms;
            self.targets
                .retain(|_, e| now_ms.saturating_sub(e.used_ms) < FORGET_AFTER_MS);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;

    /// A target for unit tests of the delivery pool.
    pub(in crate::delivery) fn target(endpoint_id: i64, url: &str) -> Arc<Target> {
        Arc::new(Target {
            endpoint_id,
            url: url.into(),
            method: "POST".into(),
            headers: Vec::new(),
            secret: None,
            previous_secret: None,
            timeout: Duration::from_secs(1),
            policy: crate::retry::RetryPolicy::DEFAULT,
        })
    }

    /// A claimed task (id 1) for unit tests of the delivery pool.
    pub(in crate::delivery) fn claimed(endpoint_id: i64, generation: Option<i64>) -> Claimed {
        Claimed {
            id: 1,
            endpoint_id,
            schedule_id: None,
            event_id: None,
            event_name: None,
            payload: "{}".into(),
            attempt: 1,
            max_attempts: 1,
            app_id: "app".into(),
            due_at: 0,
            trace: None,
            target_generation: generation,
        }
    }

    #[test]
    fn an_endpoint_is_used_only_at_the_generation_it_was_read_at() {
        let mut held = Held::default();
        held.keep(Some(7), &target(1, "http://a/"), 0);
        let at = |held: &mut Held, generation| held.get(&claimed(1, generation), 10);
        assert_eq!(
            at(&mut held, Some(7)).map(|t| t.url.clone()),
            Some("http://a/".into())
        );
        assert!(at(&mut held, Some(8)).is_none(), "its app changed since");
        assert!(at(&mut held, None).is_none(), "the claim did not say");
        assert!(
            held.get(&claimed(2, Some(7)), 10).is_none(),
            "another endpoint"
        );
        held.keep(Some(8), &target(1, "http://b/"), 20);
        assert_eq!(
            at(&mut held, Some(8)).map(|t| t.url.clone()),
            Some("http://b/".into())
        );
        held.keep(None, &target(3, "http://c/"), 20);
        assert!(
            held.get(&claimed(3, None), 20).is_none(),
            "nothing held without one"
        );
    }

    #[test]
    fn endpoints_unused_for_a_while_are_dropped() {
        let mut held = Held::default();
        held.keep(Some(1), &target(1, "http://a/"), 0);
        held.keep(Some(1), &target(2, "http://b/"), 0);
        assert!(
            held.get(&claimed(2, Some(1)), FORGET_AFTER_MS - 1)
                .is_some()
        );
        held.keep(Some(1), &target(3, "http://c/"), FORGET_AFTER_MS + 1);
        assert!(
            held.get(&claimed(1, Some(1)), FORGET_AFTER_MS + 1)
                .is_none()
        );
        assert!(
            held.get(&claimed(2, Some(1)), FORGET_AFTER_MS + 1)
                .is_some()
        );
        assert!(
            held.get(&claimed(3, Some(1)), FORGET_AFTER_MS + 1)
                .is_some()
        );
    }
}
