//! The dashboard's view model: a pure function of a [`Snapshot`] and recent Events, and the
//! delta between two of them that the page applies live.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use mco_api::constants::{mcn_conditions, states};
use mco_cli::Snapshot;
use mco_cli::phase;
use mco_cli::snapshot::{NodeFacts, mcn_condition, name_of};
use mco_cli::status;
use serde::Serialize;

/// Events kept and shown, newest first.
pub const MAX_EVENTS: usize = 100;
/// Longest Event or node message kept, in characters.
pub const MAX_MESSAGE: usize = 1024;

/// One pool, as `mco status` computes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolView {
    pub name: String,
    pub updated: usize,
    pub total: usize,
    pub target: String,
    pub paused: bool,
    pub degraded: bool,
    pub max_unavailable: usize,
    /// `done`, `ETA 3m05s (2 waves of 1)` or `ETA unknown …`: `mco status`'s words.
    pub eta: String,
}

/// Where a node stands, for its colour and legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// At its desired config, nothing in progress.
    Updated,
    /// Moving to a new config.
    Updating,
    /// Degraded or unreconcilable.
    Degraded,
    /// Nothing reported yet.
    Unknown,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Updated, Kind::Updating, Kind::Degraded, Kind::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Updated => "updated",
            Kind::Updating => "updating",
            Kind::Degraded => "degraded",
            Kind::Unknown => "unknown",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Updated => "Updated",
            Kind::Updating => "Updating",
            Kind::Degraded => "Degraded",
            Kind::Unknown => "Not reported",
        }
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub name: String,
    pub pool: String,
    pub kind: Kind,
    /// The phase as `mco status` names it: `Drained (in progress)`, `Updated (done)`, `waiting`.
    pub phase: String,
    pub current: String,
    pub desired: String,
    /// Why a degraded node is degraded, or the current phase's message.
    pub message: String,
}

/// Seed 002's `kubectl get machineconfignodes` table: the CRD's own printer columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct McnTable {
    pub header: Vec<String>,
    /// node name → cells (the first is the name).
    pub rows: BTreeMap<String, Vec<String>>,
}

/// One Event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventView {
    pub key: String,
    pub time: String,
    pub type_: String,
    pub object: String,
    pub reason: String,
    pub message: String,
}

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Fleet {
    pub pools: Vec<PoolView>,
    /// By name.
    pub nodes: BTreeMap<String, NodeView>,
    pub table: McnTable,
    pub events: Vec<EventView>,
}

/// What changed between two [`Fleet`]s; the page applies it in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Delta {
    /// The first message on a stream: everything; nodes and rows it lacks are gone.
    pub reset: bool,
    /// Pools are few: all of them, when any changed.
    pub pools: Option<Vec<PoolView>>,
    pub nodes: Vec<NodeView>,
    pub removed: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub events: Option<Vec<EventView>>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.pools.is_none()
            && self.nodes.is_empty()
            && self.removed.is_empty()
            && self.rows.is_empty()
            && self.events.is_none()
    }

    /// The delta from nothing: every pool, node, row and Event.
    pub fn full(f: &Fleet) -> Delta {
        Delta {
            reset: true,
            ..delta(&Fleet::default(), f)
        }
    }
}

fn cut(text: &str) -> String {
    status::ellipsize(text, MAX_MESSAGE)
}

/// The phase label and kind of a node, with `mco status`'s mapping from MCN conditions.
fn node_view(snap: &Snapshot, node: &k8s_openapi::api::core::v1::Node, pool: String) -> NodeView {
    let name = name_of(node).to_string();
    let facts = NodeFacts::of(node);
    let mcn = snap.mcn(&name);
    let current_phase = mcn.and_then(phase::current_phase);
    let phase = match &current_phase {
        Some(p) if p.in_progress() => format!("{} (in progress)", p.name),
        Some(p) => format!("{} (done)", p.name),
        None => "waiting".to_string(),
    };
    let degraded = facts.state == states::DEGRADED || facts.state == states::UNRECONCILABLE;
    let mcn_updated = mcn
        .and_then(|m| mcn_condition(m, mcn_conditions::UPDATED))
        .is_some_and(|c| c.status == "True");
    // The same test `mco status` uses for "updating".
    let moving = (!facts.desired.is_empty() && facts.desired != facts.current)
        || facts.state == states::WORKING
        || (mcn.is_some() && !mcn_updated && current_phase.is_some());
    let kind = if degraded {
        Kind::Degraded
    } else if moving {
        Kind::Updating
    } else if mcn_updated || (!facts.current.is_empty() && facts.state == states::DONE) {
        Kind::Updated
    } else {
        Kind::Unknown
    };
    let message = if degraded {
        if facts.reason.is_empty() {
            mcn.and_then(|m| mcn_condition(m, mcn_conditions::NODE_DEGRADED))
                .filter(|c| c.status == "True")
                .map(|c| c.message.clone())
                .unwrap_or_default()
        } else {
            facts.reason.clone()
        }
    } else {
        current_phase.map(|p| p.message).unwrap_or_default()
    };
    NodeView {
        name,
        pool,
        kind,
        phase,
        current: facts.current,
        desired: facts.desired,
        message: cut(&message),
    }
}

/// Seed 002's table from the MachineConfigNode CRD's printer columns (those `kubectl get`
/// shows without `-o wide`), through the API server's own table code.
fn mcn_table(snap: &Snapshot) -> McnTable {
    use mco_apimachinery::table::{PrinterColumn, TableConvertor};
    let crd = serde_json::to_value(mco_api::mcn::crd()).unwrap_or_default();
    let columns: Vec<PrinterColumn> = PrinterColumn::from_crd(&crd, "v1")
        .into_iter()
        .filter(|c| c.priority == 0)
        .collect();
    let Ok(conv) = TableConvertor::for_crd(&columns) else {
        return McnTable::default();
    };
    let header = conv
        .column_definitions()
        .iter()
        .map(|c| c.name.to_uppercase())
        .collect();
    let rows = snap
        .mcns
        .iter()
        .filter_map(|m| {
            let obj = serde_json::to_value(m).ok()?;
            let cells = conv
                .cells(&obj, snap.now)
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Null => String::new(),
                    other => other.to_string(),
                })
                .collect();
            Some((name_of(m).to_string(), cells))
        })
        .collect();
    McnTable { header, rows }
}

fn event_view(e: &Event) -> EventView {
    let time = event_time(e)
        .map(|t| t.strftime("%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let o = &e.involved_object;
    EventView {
        key: format!(
            "{}/{}",
            e.metadata.namespace.as_deref().unwrap_or_default(),
            e.metadata.name.as_deref().unwrap_or_default()
        ),
        time,
        type_: e.type_.clone().unwrap_or_default(),
        object: format!(
            "{}/{}",
            o.kind.as_deref().unwrap_or_default(),
            o.name.as_deref().unwrap_or_default()
        ),
        reason: e.reason.clone().unwrap_or_default(),
        message: cut(e.message.as_deref().unwrap_or_default()),
    }
}

/// When an Event last happened.
pub fn event_time(e: &Event) -> Option<jiff::Timestamp> {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The view of `snap` and `events` (any order; the newest [`MAX_EVENTS`] are kept).
pub fn build(snap: &Snapshot, events: &[Event]) -> Fleet {
    let report = status::build(snap);
    let pools = report
        .pools
        .iter()
        .map(|p| PoolView {
            name: p.name.clone(),
            updated: p.updated,
            total: p.total,
            target: p.target.clone(),
            paused: p.paused,
            degraded: p.degraded,
            max_unavailable: p.max_unavailable,
            eta: status::pool_line(p)[4].clone(),
        })
        .collect();
    let membership = snap.membership();
    let nodes = snap
        .nodes
        .iter()
        .map(|n| {
            let pool = membership
                .primary
                .get(name_of(n))
                .cloned()
                .unwrap_or_default();
            let v = node_view(snap, n, pool);
            (v.name.clone(), v)
        })
        .collect();
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| std::cmp::Reverse(event_time(e)));
    Fleet {
        pools,
        nodes,
        table: mcn_table(snap),
        events: events
            .into_iter()
            .take(MAX_EVENTS)
            .map(event_view)
            .collect(),
    }
}

/// What changed from `old` to `new`.
pub fn delta(old: &Fleet, new: &Fleet) -> Delta {
    Delta {
        reset: false,
        pools: (old.pools != new.pools).then(|| new.pools.clone()),
        nodes: new
            .nodes
            .values()
            .filter(|n| old.nodes.get(&n.name) != Some(n))
            .cloned()
            .collect(),
        removed: old
            .nodes
            .keys()
            .filter(|k| !new.nodes.contains_key(*k))
            .cloned()
            .collect(),
        rows: new
            .table
            .rows
            .iter()
            .filter(|(k, v)| old.table.rows.get(*k) != Some(v))
            .map(|(_, v)| v.clone())
            .collect(),
        events: (old.events != new.events).then(|| new.events.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_testkit::{NodeBuilder, PoolBuilder};

    fn mcn(node: &str, conds: &[(&str, &str, &str)]) -> mco_api::MachineConfigNode {
        let conditions: Vec<serde_json::Value> = conds
            .iter()
            .map(|(t, s, m)| {
                serde_json::json!({"type": t, "status": s, "message": m, "reason": "r",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigNode",
            "metadata": {"name": node},
            "spec": {"node": {"name": node}, "pool": {"name": "worker"},
                     "configVersion": {"desired": "rendered-worker-b"}},
            "status": {"conditions": conditions, "observedGeneration": 1,
                       "configVersion": {"current": "rendered-worker-a", "desired": "rendered-worker-b"}},
        }))
        .unwrap()
    }

    fn snap() -> Snapshot {
        let pool = PoolBuilder::new("worker")
            .role("worker")
            .target("rendered-worker-b")
            .max_unavailable(2)
            .build();
        let n = |name: &str, cur: &str, des: &str, state: &str| {
            NodeBuilder::new(name)
                .role("worker")
                .current_config(cur)
                .desired_config(des)
                .state(state)
                .build()
        };
        Snapshot {
            now: "2026-01-01T00:05:00Z".parse().unwrap(),
            pools: vec![pool],
            nodes: vec![
                n("w0", "rendered-worker-b", "rendered-worker-b", "Done"),
                n("w1", "rendered-worker-a", "rendered-worker-b", "Working"),
                NodeBuilder::new("w2")
                    .role("worker")
                    .current_config("rendered-worker-a")
                    .desired_config("rendered-worker-a")
                    .state("Degraded")
                    .reason("<script>alert(1)</script> content mismatch")
                    .build(),
                NodeBuilder::new("w3").role("worker").build(),
            ],
            mcns: vec![
                mcn("w0", &[("Updated", "True", "")]),
                mcn(
                    "w1",
                    &[
                        ("Updated", "False", ""),
                        ("UpdatePrepared", "True", ""),
                        ("Drained", "Unknown", "Draining node"),
                    ],
                ),
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn pools_come_from_mco_status() {
        let f = build(&snap(), &[]);
        assert_eq!(f.pools.len(), 1);
        let p = &f.pools[0];
        assert_eq!(p.name, "worker");
        assert_eq!(p.target, "rendered-worker-b");
        assert_eq!(p.max_unavailable, 2);
        assert!(!p.paused);
        let line = status::pool_line(&status::build(&snap()).pools[0]);
        assert_eq!(p.eta, line[4]);
        assert_eq!((p.updated, p.total), (1, 4), "{p:?}");
    }

    #[test]
    fn nodes_get_status_phase_and_kind() {
        let f = build(&snap(), &[]);
        let w0 = &f.nodes["w0"];
        assert_eq!(
            (w0.kind, w0.phase.as_str()),
            (Kind::Updated, "Updated (done)")
        );
        let w1 = &f.nodes["w1"];
        assert_eq!(w1.kind, Kind::Updating);
        assert_eq!(w1.phase, "Drained (in progress)");
        assert_eq!(w1.message, "Draining node");
        assert_eq!(
            (w1.current.as_str(), w1.desired.as_str()),
            ("rendered-worker-a", "rendered-worker-b")
        );
        let w2 = &f.nodes["w2"];
        assert_eq!(w2.kind, Kind::Degraded);
        assert!(w2.message.contains("content mismatch"), "{w2:?}");
        assert_eq!(f.nodes["w3"].kind, Kind::Unknown);
        assert_eq!(f.nodes["w3"].phase, "waiting");
    }

    #[test]
    fn table_is_seed_002s() {
        let f = build(&snap(), &[]);
        assert_eq!(
            f.table.header,
            [
                "NAME",
                "UPDATED",
                "UPDATEPREPARED",
                "UPDATEEXECUTED",
                "UPDATEPOSTACTIONCOMPLETED",
                "UPDATECOMPLETED",
                "RESUMED"
            ]
        );
        assert_eq!(f.table.rows["w1"][..3], ["w1", "False", "True"]);
        assert_eq!(f.table.rows.len(), 2);
    }

    #[test]
    fn messages_are_cut_at_the_limit() {
        let mut s = snap();
        let long = "x".repeat(MAX_MESSAGE + 10);
        s.nodes[2] = NodeBuilder::new("w2")
            .role("worker")
            .state("Degraded")
            .reason(&long)
            .build();
        let m = &build(&s, &[]).nodes["w2"].message;
        assert_eq!(m.chars().count(), MAX_MESSAGE);
        let exact = "y".repeat(MAX_MESSAGE);
        s.nodes[2] = NodeBuilder::new("w2")
            .role("worker")
            .state("Degraded")
            .reason(&exact)
            .build();
        assert_eq!(build(&s, &[]).nodes["w2"].message, exact);
    }

    fn event(name: &str, secs: i64) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "w1"},
            "reason": "Drain", "message": "m", "type": "Normal",
            "lastTimestamp": jiff::Timestamp::from_second(secs).unwrap().to_string(),
        }))
        .unwrap()
    }

    #[test]
    fn events_are_newest_first_and_capped() {
        let events: Vec<Event> = (0..MAX_EVENTS as i64 + 5)
            .map(|i| event(&format!("e{i}"), 1_700_000_000 + i))
            .collect();
        let f = build(&snap(), &events);
        assert_eq!(f.events.len(), MAX_EVENTS);
        assert_eq!(f.events[0].key, format!("default/e{}", MAX_EVENTS + 4));
        assert_eq!(f.events[0].object, "Node/w1");
    }

    #[test]
    fn delta_carries_only_changes() {
        let s = snap();
        let a = build(&s, &[]);
        assert!(delta(&a, &a).is_empty());
        let full = Delta::full(&a);
        assert_eq!(full.nodes.len(), 4);
        assert_eq!(full.rows.len(), 2);
        let mut s2 = s.clone();
        s2.mcns[1] = mcn(
            "w1",
            &[
                ("Updated", "False", ""),
                ("UpdatePrepared", "True", ""),
                ("RebootedNode", "Unknown", "rebooting"),
            ],
        );
        s2.nodes.remove(3);
        let b = build(&s2, &[]);
        let d = delta(&a, &b);
        assert_eq!(d.nodes.len(), 1);
        assert_eq!(d.nodes[0].phase, "RebootedNode (in progress)");
        assert_eq!(d.removed, ["w3"]);
        assert_eq!(d.pools.unwrap()[0].total, 3, "w3 left the pool");
        assert_eq!(
            d.rows.len(),
            0,
            "seed 002's columns do not show RebootedNode"
        );
        assert!(d.events.is_none());
    }
}
