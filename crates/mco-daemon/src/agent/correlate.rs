//! client-go's event correlation, which upstream's daemon gets from its recorder: events alike
//! but for their message are combined once too many come in a window ([`AGGREGATE_MAX`] within
//! [`AGGREGATE_WINDOW`]), and an event already recorded is not created again but counted on the
//! one recorded, so `kubectl get events -o wide` shows one row with COUNT 5, not five rows.
//! Pure: the caller gives the time and sends what [`Correlator::correlate`] returns.

use std::collections::BTreeSet;
use std::time::Duration;

use hashlink::LruCache;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// Distinct messages of alike events within [`AGGREGATE_WINDOW`] at which they are combined
/// (client-go's `defaultAggregateMaxEvents`): the first nine pass, the tenth and later ones
/// land on one combined event.
pub const AGGREGATE_MAX: usize = 10;
/// How long after the last alike event the count of distinct messages starts again
/// (client-go's `defaultAggregateIntervalInSeconds`).
pub const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Entries each of the two caches keeps, the least recently used forgotten first (client-go's
/// `maxLruCacheEntries`).
pub const CACHE_ENTRIES: usize = 4096;
/// The message of a combined event starts with this (client-go's words).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// What to send for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Send {
    /// Create this Event.
    Create(Event),
    /// Patch the recorded Event `name` with this strategic merge patch body; if it is gone
    /// (404), create `event`, which carries the same name and count.
    Patch {
        name: String,
        body: serde_json::Value,
        event: Event,
    },
}

/// Alike events seen lately: their distinct messages and when the last came.
#[derive(Debug)]
struct Aggregate {
    messages: BTreeSet<String>,
    last: jiff::Timestamp,
}

/// An event recorded: its name, count and first time.
#[derive(Debug, Clone)]
struct Recorded {
    name: String,
    count: i32,
    first: Option<Time>,
}

/// The state of one recorder's correlation; see the module.
#[derive(Debug)]
pub struct Correlator {
    aggregates: LruCache<String, Aggregate>,
    recorded: LruCache<String, Recorded>,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator::with_capacity(CACHE_ENTRIES)
    }
}

fn join(parts: &[Option<&str>]) -> String {
    // NUL cannot occur in any of these fields, so the key is unambiguous.
    parts
        .iter()
        .map(|p| p.unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\0")
}

/// What makes events alike: source, object, type and reason, and who reports them.
fn aggregate_key(e: &Event) -> String {
    let source = e.source.as_ref();
    let o = &e.involved_object;
    join(&[
        source.and_then(|s| s.component.as_deref()),
        source.and_then(|s| s.host.as_deref()),
        o.kind.as_deref(),
        o.namespace.as_deref(),
        o.name.as_deref(),
        o.uid.as_deref(),
        o.api_version.as_deref(),
        e.type_.as_deref(),
        e.reason.as_deref(),
        e.reporting_component.as_deref(),
        e.reporting_instance.as_deref(),
    ])
}

/// What makes events the same: alike, the field path, and the message.
fn event_key(e: &Event) -> String {
    let source = e.source.as_ref();
    let o = &e.involved_object;
    join(&[
        source.and_then(|s| s.component.as_deref()),
        source.and_then(|s| s.host.as_deref()),
        o.kind.as_deref(),
        o.namespace.as_deref(),
        o.name.as_deref(),
        o.field_path.as_deref(),
        o.uid.as_deref(),
        o.api_version.as_deref(),
        e.type_.as_deref(),
        e.reason.as_deref(),
        e.message.as_deref(),
    ])
}

impl Correlator {
    /// A correlator whose caches hold at most `entries` each.
    pub fn with_capacity(entries: usize) -> Correlator {
        Correlator {
            aggregates: LruCache::new(entries.max(1)),
            recorded: LruCache::new(entries.max(1)),
        }
    }

    /// What to send for `event` at `now`: it, or the combined event of its kind once alike
    /// ones are too many, created the first time and patched with a higher count after.
    pub fn correlate(&mut self, event: Event, now: jiff::Timestamp) -> Send {
        let (event, key) = self.aggregate(event, now);
        self.observe(event, key)
    }

    /// Takes what the server answered for a sent event, so that the next repeat patches the
    /// Event as it is there.
    pub fn recorded(&mut self, event: &Event) {
        let Some(name) = event.metadata.name.clone() else {
            return;
        };
        self.recorded.insert(
            event_key(event),
            Recorded {
                name,
                count: event.count.unwrap_or(1),
                first: event.first_timestamp.clone(),
            },
        );
    }

    /// `event` itself under its own key, or, once [`AGGREGATE_MAX`] distinct messages of
    /// alike events have come within [`AGGREGATE_WINDOW`] of each other, the combined event
    /// under the key of the kind.
    fn aggregate(&mut self, event: Event, now: jiff::Timestamp) -> (Event, String) {
        let key = aggregate_key(&event);
        let message = event.message.clone().unwrap_or_default();
        let window = jiff::SignedDuration::from_secs(AGGREGATE_WINDOW.as_secs() as i64);
        let distinct = match self.aggregates.get_mut(&key) {
            Some(a) if now.duration_since(a.last) <= window => {
                a.messages.insert(message.clone());
                a.last = now;
                a.messages.len()
            }
            _ => {
                let fresh = Aggregate {
                    messages: BTreeSet::from([message.clone()]),
                    last: now,
                };
                self.aggregates.insert(key.clone(), fresh);
                1
            }
        };
        if distinct < AGGREGATE_MAX {
            let own = event_key(&event);
            return (event, own);
        }
        // Keep the set below the limit, so each further alike event counts on the combined
        // one. Its own message goes, so that it is combined again if it comes back.
        if let Some(a) = self.aggregates.get_mut(&key) {
            a.messages.remove(&message);
        }
        let object = event.involved_object.name.clone().unwrap_or_default();
        let time = Time(now);
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            message: Some(format!("{COMBINED_PREFIX}{message}")),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            count: Some(1),
            ..event
        };
        (combined, key)
    }

    /// `event` to create, or, if one under `key` was recorded, the patch that counts it there.
    fn observe(&mut self, mut event: Event, key: String) -> Send {
        let Some(last) = self.recorded.get_mut(&key).cloned() else {
            self.recorded.insert(
                key,
                Recorded {
                    name: event.metadata.name.clone().unwrap_or_default(),
                    count: event.count.unwrap_or(1),
                    first: event.first_timestamp.clone(),
                },
            );
            return Send::Create(event);
        };
        let count = last.count.saturating_add(1);
        event.metadata.name = Some(last.name.clone());
        event.first_timestamp = last.first.clone();
        event.count = Some(count);
        self.recorded.insert(
            key,
            Recorded {
                count,
                ..last.clone()
            },
        );
        // What differs from the recorded Event, as client-go's two-way merge patch says it.
        let mut body = serde_json::json!({
            "count": count,
            "lastTimestamp": event.last_timestamp,
        });
        if let Some(m) = event.message.as_deref().filter(|m| !m.is_empty()) {
            body["message"] = serde_json::json!(m);
        }
        Send::Patch {
            name: last.name,
            body,
            event,
        }
    }

    /// How many entries each cache holds, for tests of the bound.
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        (self.aggregates.len(), self.recorded.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::events::event_object;
    use crate::engine::NodeEvent;

    fn t(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn ev(reason: &'static str, message: &str, at: jiff::Timestamp) -> Event {
        event_object(
            "mco-system",
            "worker-0",
            Some("uid-1"),
            &NodeEvent::warning(reason, message),
            at,
        )
    }

    fn created(s: Send) -> Event {
        match s {
            Send::Create(e) => e,
            other => panic!("expected a create, got {other:?}"),
        }
    }

    fn patched(s: Send) -> (String, serde_json::Value, Event) {
        match s {
            Send::Patch { name, body, event } => (name, body, event),
            other => panic!("expected a patch, got {other:?}"),
        }
    }

    #[test]
    fn a_repeat_is_a_patch_of_the_recorded_event_with_a_higher_count() {
        let mut c = Correlator::default();
        let first = created(c.correlate(ev("Degraded", "boom", t(0)), t(0)));
        let name = first.metadata.name.clone().unwrap();
        for (i, count) in [(1, 2), (2, 3)] {
            let (target, body, event) =
                patched(c.correlate(ev("Degraded", "boom", t(60 * i)), t(60 * i)));
            assert_eq!(target, name);
            assert_eq!(
                body,
                serde_json::json!({"count": count, "lastTimestamp": Time(t(60 * i)), "message": "boom"})
            );
            // What a create after a 404 sends: the same name, count and first time.
            assert_eq!(event.metadata.name.as_deref(), Some(name.as_str()));
            assert_eq!(event.count, Some(count));
            assert_eq!(event.first_timestamp, first.first_timestamp);
            assert_eq!(event.last_timestamp, Some(Time(t(60 * i))));
        }
        // Another message, type or object is another event.
        created(c.correlate(ev("Degraded", "other", t(200)), t(200)));
        created(c.correlate(ev("Reboot", "boom", t(200)), t(200)));
        let mut elsewhere = ev("Degraded", "boom", t(200));
        elsewhere.involved_object.name = Some("worker-1".into());
        created(c.correlate(elsewhere, t(200)));
    }

    #[test]
    fn the_server_answer_is_what_the_next_repeat_counts_on() {
        let mut c = Correlator::default();
        let mut sent = created(c.correlate(ev("Degraded", "boom", t(0)), t(0)));
        // The Event as the server keeps it (another writer counted it on meanwhile).
        sent.count = Some(7);
        c.recorded(&sent);
        let (_, body, _) = patched(c.correlate(ev("Degraded", "boom", t(1)), t(1)));
        assert_eq!(body["count"], 8);
    }

    #[test]
    fn the_tenth_distinct_message_within_the_window_is_combined() {
        let mut c = Correlator::default();
        for i in 0..AGGREGATE_MAX as i64 - 1 {
            let e = created(c.correlate(ev("Degraded", &format!("try {i}"), t(i)), t(i)));
            assert_eq!(e.message.as_deref(), Some(format!("try {i}").as_str()));
        }
        let combined = created(c.correlate(ev("Degraded", "try 9", t(9)), t(9)));
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): try 9")
        );
        assert_eq!(
            combined.metadata.name,
            Some(format!("worker-0.{:x}", t(9).as_nanosecond()))
        );
        assert_eq!(combined.metadata.namespace.as_deref(), Some("mco-system"));
        assert_eq!(combined.count, Some(1));
        assert_eq!(combined.reason.as_deref(), Some("Degraded"));
        assert_eq!(combined.involved_object.name.as_deref(), Some("worker-0"));
        // Each further alike event, new message or this one again, counts on it.
        let (name, body, _) = patched(c.correlate(ev("Degraded", "try 10", t(10)), t(10)));
        assert_eq!(Some(name), combined.metadata.name);
        assert_eq!(body["count"], 2);
        assert_eq!(
            body["message"], "(combined from similar events): try 10",
            "the patch carries the latest message"
        );
        let (_, body, _) = patched(c.correlate(ev("Degraded", "try 9", t(11)), t(11)));
        assert_eq!(body["count"], 3);
        // Another reason is not alike.
        created(c.correlate(ev("Other", "try 0", t(12)), t(12)));
    }

    #[test]
    fn alike_events_further_apart_than_the_window_start_a_new_count() {
        let window = AGGREGATE_WINDOW.as_secs() as i64;
        let mut c = Correlator::default();
        // Each within the window of the one before: the tenth is combined.
        for i in 0..9 {
            created(c.correlate(
                ev("Degraded", &format!("m{i}"), t(i * window)),
                t(i * window),
            ));
        }
        let e = created(c.correlate(ev("Degraded", "m9", t(9 * window)), t(9 * window)));
        assert!(e.message.unwrap().starts_with(COMBINED_PREFIX));
        // One past the window after the last: counted afresh.
        let mut c = Correlator::default();
        for i in 0..9 {
            let at = t(i * (window + 1));
            created(c.correlate(ev("Degraded", &format!("m{i}"), at), at));
        }
        let at = t(9 * (window + 1));
        let e = created(c.correlate(ev("Degraded", "m9", at), at));
        assert_eq!(e.message.as_deref(), Some("m9"));
    }

    fn on(object: &str, at: i64) -> Event {
        let mut e = ev("Degraded", "m", t(at));
        e.involved_object.name = Some(object.into());
        e
    }

    #[test]
    fn the_caches_are_bounded_and_forget_the_least_recently_used() {
        let mut c = Correlator::with_capacity(3);
        for (i, n) in ["a", "b", "c"].into_iter().enumerate() {
            created(c.correlate(on(n, i as i64), t(i as i64)));
        }
        // `a` used again: `b` is now the least recently used, and goes first.
        patched(c.correlate(on("a", 3), t(3)));
        created(c.correlate(on("d", 4), t(4)));
        assert_eq!(c.sizes(), (3, 3));
        patched(c.correlate(on("a", 5), t(5)));
        created(c.correlate(on("b", 6), t(6)));
        // The default holds client-go's 4096, no more.
        let mut c = Correlator::default();
        for i in 0..CACHE_ENTRIES + 10 {
            c.correlate(on(&format!("n{i}"), 0), t(0));
        }
        assert_eq!(c.sizes(), (CACHE_ENTRIES, CACHE_ENTRIES));
    }
}
