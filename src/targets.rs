//! The enabled endpoints of each app held in memory for fan-out ([`TargetCache`]), so that a
//! publish reads one small row (the app's target generation) instead of every endpoint of its
//! app, and matches the event's name against an index instead of every endpoint's filter
//! (docs/dev/storage.md, "Targets in memory").

use crate::filter;
use crate::payload_filter::PayloadFilter;
use crate::store::endpoints::{Target, TargetsRead};
use crate::store::{StoreError, Tx};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Each app's enabled endpoints as last read, with the target generation they were read at.
/// [`TargetCache::current`] runs in the publish's own transaction: it reads the app's
/// generation there and uses the endpoints held only when it is the one they were read at, else
/// reads them again in that transaction and holds them instead. Every write that changes an
/// app's targets gives it a new generation in its own transaction, on any node and from the
/// CLI (`EndpointQueries::enabled_targets_since`), so a publish sees what a publish reading
/// the endpoints themselves would: a change committed before it, and no change committed after.
///
/// Bounded: at most [`TargetCache::CAPACITY_BYTES`] by [`TargetSet::weight`]'s estimate; the
/// apps published to least recently go first, and an app larger than the whole bound is never
/// held (its publishes read its endpoints, as without the cache).
#[derive(Default)]
pub struct TargetCache {
    inner: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    apps: HashMap<String, Entry>,
    /// The sum of the held sets' weights.
    weight: usize,
    /// Counts uses, to find the app used least recently.
    tick: u64,
}

struct Entry {
    set: Arc<TargetSet>,
    used: u64,
}

impl TargetCache {
    /// The most the sets held may weigh, by [`TargetSet::weight`]: 4 MiB, about 16,000
    /// endpoints with short filters.
    pub const CAPACITY_BYTES: usize = 4 << 20;

    /// The enabled endpoints of `app_id` as of `tx`: those held when the app's generation is the
    /// one they were read at, else read in `tx` (and held).
    pub fn current(&self, tx: &mut dyn Tx, app_id: &str) -> Result<Arc<TargetSet>, StoreError> {
        let held = self.held(app_id);
        match tx.enabled_targets_since(app_id, held.as_ref().map(|set| set.generation))? {
            TargetsRead::Unchanged => held.ok_or_else(|| {
                StoreError::Other(anyhow::anyhow!(
                    "the store answered \"unchanged\" for targets not held"
                ))
            }),
            TargetsRead::Changed {
                generation,
                targets,
            } => {
                let set = Arc::new(TargetSet::new(generation, targets));
                self.hold(app_id, set.clone());
                Ok(set)
            }
        }
    }

    /// The set held for `app_id`, marked as used now; not checked against the store (a writer
    /// that uses it checks its generation, `EventQueries::insert_event_with_tasks_at`).
    pub fn held(&self, app_id: &str) -> Option<Arc<TargetSet>> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        inner.apps.get_mut(app_id).map(|entry| {
            entry.used = tick;
            entry.set.clone()
        })
    }

    /// Holds `set` for `app_id` in place of what was held, dropping the apps used least recently
    /// until the whole fits the bound. Two publishes that read different generations both hold
    /// theirs, the last one staying: when it is the older one, the next publish reads again.
    fn hold(&self, app_id: &str, set: Arc<TargetSet>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = inner.apps.remove(app_id) {
            inner.weight -= old.set.weight;
        }
        if set.weight > Self::CAPACITY_BYTES {
            return;
        }
        while inner.weight + set.weight > Self::CAPACITY_BYTES {
            let Some(oldest) = inner
                .apps
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(app, _)| app.clone())
            else {
                break;
            };
            if let Some(gone) = inner.apps.remove(&oldest) {
                inner.weight -= gone.set.weight;
            }
        }
        inner.tick += 1;
        let used = inner.tick;
        inner.weight += set.weight;
        inner.apps.insert(app_id.to_string(), Entry { set, used });
    }

    /// How many apps are held and what they weigh (tests, and a reader of the bound).
    pub fn held_apps(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.apps.len(), inner.weight)
    }
}

/// An app's enabled endpoints at one target generation, ready to match events: `filter_events`
/// indexed by exact name, `filter_payload` parsed once.
#[derive(Debug)]
pub struct TargetSet {
    generation: i64,
    /// By endpoint id.
    targets: Vec<Compiled>,
    /// Exact event name → the targets (indexes into `targets`, ascending) whose `filter_events`
    /// is a list of exact names holding it.
    by_name: HashMap<Box<str>, Vec<usize>>,
    /// The other targets (a pattern with `*`, or no pattern at all: every event), with their
    /// filter, which each event's name is matched against.
    scan: Vec<(usize, Option<Box<str>>)>,
    /// The estimate of its memory [`TargetCache`] bounds.
    weight: usize,
}

/// One enabled endpoint as fan-out uses it.
#[derive(Debug)]
pub struct Compiled {
    pub id: i64,
    /// The attempts its tasks get (its retry policy's, or the default).
    pub max_attempts: i64,
    payload: PayloadCheck,
}

#[derive(Debug)]
enum PayloadCheck {
    /// No `filter_payload`: every payload.
    Any,
    Filter(PayloadFilter),
    /// A stored text that is not a valid filter (the API never stores one; a hand-edited row
    /// could): no event reaches the endpoint.
    Invalid,
}

/// What one target adds to a set's weight besides its filters' text: the entry, its index
/// slots and the allocators' overhead, rounded up.
const TARGET_BYTES: usize = 160;

impl TargetSet {
    /// `targets` (by id) read at `generation`.
    pub fn new(generation: i64, targets: Vec<Target>) -> TargetSet {
        let mut set = TargetSet {
            generation,
            targets: Vec::with_capacity(targets.len()),
            by_name: HashMap::new(),
            scan: Vec::new(),
            weight: TARGET_BYTES,
        };
        for target in targets {
            let i = set.targets.len();
            let events = target.filter_events.unwrap_or_default();
            let payload = target.filter_payload.unwrap_or_default();
            // The parsed filter takes a few times its text.
            set.weight += TARGET_BYTES + 2 * events.len() + 4 * payload.len();
            match exact_names(&events) {
                Some(names) => {
                    for name in names {
                        set.by_name.entry(name.into()).or_default().push(i);
                    }
                }
                None => set
                    .scan
                    .push((i, (!events.is_empty()).then(|| events.into()))),
            }
            set.targets.push(Compiled {
                id: target.id,
                max_attempts: target.max_attempts,
                payload: if payload.is_empty() {
                    PayloadCheck::Any
                } else {
                    stored_filter(&payload).map_or(PayloadCheck::Invalid, PayloadCheck::Filter)
                },
            });
        }
        set
    }

    /// The target generation the set was read at.
    pub fn generation(&self) -> i64 {
        self.generation
    }

    /// The targets `filter_events` gives `event_name` to (by the rules of `filter::matches`),
    /// in id order.
    pub fn subscribed(&self, event_name: &str) -> Vec<&Compiled> {
        let mut chosen: Vec<usize> = self
            .by_name
            .get(event_name)
            .map(|v| v.to_vec())
            .unwrap_or_default();
        chosen.extend(
            self.scan
                .iter()
                .filter(|(_, events)| filter::matches(events.as_deref(), event_name))
                .map(|(i, _)| *i),
        );
        chosen.sort_unstable();
        chosen.into_iter().map(|i| &self.targets[i]).collect()
    }
}

impl Compiled {
    /// Whether the endpoint's `filter_payload` holds for `payload`; `parsed` is the payload,
    /// parsed by the first target that needs it (publishes to endpoints without a payload
    /// filter never parse it).
    pub fn takes_payload(&self, payload: &str, parsed: &mut Option<Value>) -> bool {
        match &self.payload {
            PayloadCheck::Any => true,
            PayloadCheck::Filter(filter) => filter.matches(
                parsed.get_or_insert_with(|| serde_json::from_str(payload).unwrap_or(Value::Null)),
            ),
            PayloadCheck::Invalid => {
                tracing::warn!(
                    endpoint_id = self.id,
                    "the stored filter_payload is not a valid filter; no event reaches the endpoint until it is set again"
                );
                false
            }
        }
    }
}

/// The names of a `filter_events` made only of exact names (no `*`), each once; `None` when
/// it has a pattern with `*` or no pattern at all (it then takes every event). A name matches
/// exactly such a filter when it is one of them (`filter::matches`: a pattern without `*`
/// matches itself only).
fn exact_names(filter: &str) -> Option<Vec<&str>> {
    let mut names: Vec<&str> = Vec::new();
    for pattern in filter.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if pattern.contains('*') {
            return None;
        }
        if !names.contains(&pattern) {
            names.push(pattern);
        }
    }
    (!names.is_empty()).then_some(names)
}

/// A `filter_payload` as its column stores it, parsed; `None` when the text is not a valid
/// filter.
fn stored_filter(text: &str) -> Option<PayloadFilter> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => PayloadFilter::parse(&map).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(id: i64, events: Option<&str>, payload: Option<&str>) -> Target {
        Target {
            id,
            filter_events: events.map(str::to_string),
            filter_payload: payload.map(str::to_string),
            max_attempts: 3,
        }
    }

    const FILTERS: [Option<&str>; 9] = [
        None,
        Some(""),
        Some(" , "),
        Some("order.created"),
        Some("order.created, order.paid ,order.created"),
        Some("order.*"),
        Some("*"),
        Some("invoice.paid,order.*"),
        Some("*.created"),
    ];

    const NAMES: [&str; 6] = [
        "order.created",
        "order.paid",
        "invoice.paid",
        "invoice.created",
        "order",
        "x",
    ];

    /// The index takes exactly the endpoints `filter::matches` takes, in id order.
    #[test]
    fn subscribed_is_filter_matches_in_id_order() {
        let targets: Vec<Target> = FILTERS
            .iter()
            .enumerate()
            .map(|(i, f)| target(i as i64 * 10 + 1, *f, None))
            .collect();
        let set = TargetSet::new(7, targets.clone());
        for name in NAMES {
            let want: Vec<i64> = targets
                .iter()
                .filter(|t| filter::matches(t.filter_events.as_deref(), name))
                .map(|t| t.id)
                .collect();
            let got: Vec<i64> = set.subscribed(name).iter().map(|c| c.id).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn exact_names_only_without_wildcards() {
        assert_eq!(exact_names("a, b,a"), Some(vec!["a", "b"]));
        assert_eq!(exact_names("a,b*"), None);
        assert_eq!(exact_names(" , "), None);
        assert_eq!(exact_names(""), None);
    }

    #[test]
    fn payload_filters_are_parsed_once_and_an_invalid_one_takes_nothing() {
        let set = TargetSet::new(
            1,
            vec![
                target(1, None, Some(r#"{"tier":"pro"}"#)),
                target(2, None, Some("not json")),
                target(3, None, None),
            ],
        );
        let mut parsed = None;
        let takes: Vec<i64> = set
            .subscribed("e")
            .into_iter()
            .filter(|c| c.takes_payload(r#"{"tier":"pro"}"#, &mut parsed))
            .map(|c| c.id)
            .collect();
        assert_eq!(takes, vec![1, 3]);
        let mut parsed = None;
        assert!(!set.targets[0].takes_payload(r#"{"tier":"free"}"#, &mut parsed));
        let mut untouched = None;
        assert!(set.targets[2].takes_payload("{", &mut untouched));
        assert!(untouched.is_none(), "no payload filter, no parse");
    }

    /// The bound: the least recently used app goes first, and an app larger than the bound
    /// is not held.
    #[test]
    fn the_least_recently_used_app_goes_first() {
        let cache = TargetCache::default();
        let per_app = TargetCache::CAPACITY_BYTES / 3;
        // Targets whose filter text makes each app weigh a little over a third of the bound.
        let big = |generation| {
            let filter = "x".repeat(per_app / 2);
            Arc::new(TargetSet::new(
                generation,
                vec![target(1, Some(&filter), None)],
            ))
        };
        cache.hold("a", big(1));
        cache.hold("b", big(1));
        assert!(cache.held("a").is_some());
        cache.hold("c", big(1));
        assert!(cache.held("b").is_none(), "b was used least recently");
        assert!(cache.held("a").is_some() && cache.held("c").is_some());
        assert_eq!(cache.held_apps().0, 2);
        let huge = Arc::new(TargetSet::new(
            1,
            vec![target(
                1,
                Some(&"x".repeat(TargetCache::CAPACITY_BYTES)),
                None,
            )],
        ));
        cache.hold("d", huge);
        assert!(cache.held("d").is_none());
        let (_, weight) = cache.held_apps();
        assert!(weight <= TargetCache::CAPACITY_BYTES);
        // Holding a newer set of an app replaces the older one.
        cache.hold("a", big(2));
        assert_eq!(cache.held("a").map(|s| s.generation), Some(2));
        assert_eq!(cache.held_apps().0, 2);
    }
}
