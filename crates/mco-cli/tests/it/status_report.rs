//! `mco status` report builders on hand-built snapshots.

use crate::common;
use std::sync::Arc;

use std::time::Duration;

use common::*;
use mco_cli::phase::{self, current_phase, eta, median};
use mco_cli::status::{self, PoolProgress, progress_bar, short_config};

const OLD: &str = "rendered-worker-00000000000000000000000000000000";
const NEW: &str = "rendered-worker-0123456789abcdef0123456789abcdef";

#[test]
fn progress_bar_text() {
    assert_eq!(progress_bar(3, 6, 10), "[#####-----]");
    assert_eq!(progress_bar(0, 6, 10), "[----------]");
    assert_eq!(progress_bar(6, 6, 10), "[##########]");
    // Never looks finished before it is.
    assert_eq!(progress_bar(99, 100, 10), "[#########-]");
    assert_eq!(progress_bar(0, 0, 4), "[----]");
}

#[test]
fn pool_line_reads_well_without_a_terminal() {
    let p = PoolProgress {
        name: "worker".into(),
        updated: 3,
        total: 6,
        degraded_count: 0,
        target: NEW.into(),
        paused: true,
        degraded: false,
        max_unavailable: 1,
        eta: Some(Duration::from_secs(270)),
        samples: 3,
        eta_basis: "3 waves of 1".into(),
        window: None,
        pinning: None,
        waiting_image: None,
    };
    let line = status::pool_line(&p).join("  ");
    assert_eq!(
        line,
        "worker  [##########----------]  3/6 updated  target rendered-worker-0123456789…  \
         ETA 4m30s (3 waves of 1)  paused"
    );
    assert_eq!(short_config("rendered-worker-abc"), "rendered-worker-abc");
}

/// A pool whose PinnedImageSets are not pinned everywhere says how far they are, and a node
/// that failed to pull one is trouble with its error; a pool without sets says nothing.
#[test]
fn pinning_progress_and_failures_are_shown() {
    let mut s = snapshot(1000);
    let mut worker = pool("worker", NEW, 2, 2);
    worker.spec.pinned_image_sets = vec![mco_api::ObjectName {
        name: "upgrade".into(),
    }];
    let sync = serde_json::json!([{"poolSynchronizerType": "PinnedImageSets",
        "machineCount": 2, "updatedMachineCount": 1}]);
    let mut status = worker.status.take().unwrap();
    status.pool_synchronizers_status = serde_json::from_value(sync.clone()).unwrap();
    worker.status = Some(status.clone());
    // The same counts on a pool that lists no set: nothing to say.
    let mut master = pool("master", NEW, 2, 1);
    master.status = Some(status);
    s.pools = vec![Arc::new(worker), Arc::new(master)];
    for n in ["w1", "w2"] {
        s.nodes.push(node(n, "worker", NEW, NEW, "Done", "").into());
    }
    let mut failed = mcn(
        "w2",
        "worker",
        NEW,
        NEW,
        &[(
            "PinnedImageSetsDegraded",
            "True",
            "One or more PinnedImageSet is experiencing an error.",
            5,
        )],
    );
    failed.status.as_mut().unwrap().pinned_image_sets = Some(
        serde_json::from_value(serde_json::json!([{"name": "upgrade", "desiredGeneration": 2,
            "currentGeneration": 1, "lastFailedGeneration": 2,
            "lastFailedGenerationError": "failed to pull image \"quay.io/a@sha256:1\": unauthorized"}]))
        .unwrap(),
    );
    s.mcns = vec![
        Arc::new(mcn(
            "w1",
            "worker",
            NEW,
            NEW,
            &[("PinnedImageSetsDegraded", "False", "All is good", 5)],
        )),
        Arc::new(failed),
    ];
    let r = status::build(&s);
    let worker = r.pools.iter().find(|p| p.name == "worker").unwrap();
    assert_eq!(worker.pinning, Some((1, 2)));
    assert_eq!(
        r.pools.iter().find(|p| p.name == "master").unwrap().pinning,
        None
    );
    assert_eq!(
        r.pin_failures,
        vec![(
            "w2".to_string(),
            "PinnedImageSet upgrade: failed to pull image \"quay.io/a@sha256:1\": unauthorized"
                .to_string()
        )]
    );
    let text = status::render(&r);
    assert!(text.contains("pinning images 1/2"), "{text}");
    assert!(text.contains("pinning failed"), "{text}");
    assert!(text.contains("node w2"), "{text}");
}

#[test]
fn phase_is_the_latest_started_in_upstream_order() {
    let m = mcn(
        "w1",
        "worker",
        OLD,
        NEW,
        &[
            ("Updated", "False", "Node w1 needs an update", 0),
            ("UpdatePrepared", "True", "Update Compatible.", 10),
            (
                "UpdateExecuted",
                "Unknown",
                "Draining Node as part of update executed phase",
                20,
            ),
            ("Cordoned", "True", "Cordoned node.", 20),
            ("Drained", "Unknown", "Draining node.", 25),
            (
                "AppliedFilesAndOS",
                "False",
                "This node has not yet entered the AppliedFilesAndOS phase",
                0,
            ),
            ("RebootedNode", "False", "", 0),
        ],
    );
    let p = current_phase(&m).unwrap();
    assert_eq!(p.name, "Drained");
    assert!(p.in_progress());
    assert_eq!(p.elapsed(at(100)), Some(Duration::from_secs(75)));

    let rebooting = mcn(
        "w1",
        "worker",
        OLD,
        NEW,
        &[
            ("UpdatePrepared", "True", "", 10),
            ("UpdateExecuted", "True", "", 30),
            ("Drained", "True", "", 30),
            ("AppliedFilesAndOS", "True", "", 40),
            ("UpdatePostActionComplete", "Unknown", "", 41),
            ("RebootedNode", "Unknown", "Upgrade requires a reboot.", 41),
            ("UpdateComplete", "False", "", 0),
        ],
    );
    assert_eq!(current_phase(&rebooting).unwrap().name, "RebootedNode");

    let idle = mcn(
        "w1",
        "worker",
        OLD,
        OLD,
        &[("UpdatePrepared", "False", "", 0)],
    );
    assert_eq!(current_phase(&idle), None);
}

#[test]
fn eta_is_median_times_waves() {
    let s = |v: &[u64]| {
        v.iter()
            .map(|x| Duration::from_secs(*x))
            .collect::<Vec<_>>()
    };
    assert_eq!(median(&s(&[60, 120, 90])), Some(Duration::from_secs(90)));
    assert_eq!(median(&s(&[60, 120])), Some(Duration::from_secs(90)));
    assert_eq!(median(&[]), None);
    // 3 nodes left, 2 at a time: 2 waves of 90 s.
    assert_eq!(
        eta(&s(&[60, 120, 90]), 3, 2),
        Some(Duration::from_secs(180))
    );
    assert_eq!(eta(&s(&[60]), 0, 1), Some(Duration::ZERO));
    assert_eq!(eta(&[], 3, 1), None);
    assert_eq!(phase::human_duration(Duration::from_secs(3725)), "1h02m");
    assert_eq!(phase::human_duration(Duration::from_secs(42)), "42s");
}

fn rollout() -> mco_cli::Snapshot {
    let mut s = snapshot(1000);
    let mut p = pool("worker", NEW, 6, 3);
    p.spec.max_unavailable =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    s.pools.push(p.into());
    for (i, (start, end)) in [(100, 160), (200, 290), (300, 370)].iter().enumerate() {
        let n = format!("w{i}");
        s.nodes
            .push(node(&n, "worker", NEW, NEW, "Done", "").into());
        s.mcns
            .push(completed(&n, "worker", NEW, *start, *end).into());
    }
    // w3: draining, blocked by the web PDB.
    s.nodes.push(
        cordon(
            node("w3", "worker", OLD, NEW, "Working", ""),
            &format!("drain-{NEW}"),
            &format!("uncordon-{OLD}"),
        )
        .into(),
    );
    s.mcns.push(mcn(
        "w3",
        "worker",
        OLD,
        NEW,
        &[
            ("Updated", "False", "Node w3 needs an update", 400),
            ("UpdatePrepared", "True", "Update Compatible.", 400),
            ("UpdateExecuted", "Unknown", "", 410),
            ("Cordoned", "True", "", 410),
            ("Drained", "Unknown", &format!("Draining node. The drain will not be complete until desired drainer drain-{NEW} matches current drainer uncordon-{OLD}. Blocked by: pod default/web-1 (PodDisruptionBudget default/web-pdb: Cannot evict pod as it would violate the pod's disruption budget.)"), 420),
        ],
    ).into());
    s.pods.push(pod("default", "web-1", "w3", "web"));
    s.pods.push(pod("default", "web-2", "w0", "web"));
    s.pdbs.push(pdb("default", "web-pdb", "web", 0).into());
    // w4: degraded on drift; w5 waiting.
    s.nodes.push(node(
        "w4",
        "worker",
        OLD,
        OLD,
        "Degraded",
        &format!("unexpected on-disk state validating against {OLD}: content mismatch for file \"/etc/mco-test\""),
    ).into());
    s.nodes
        .push(node("w5", "worker", OLD, OLD, "Done", "").into());
    s
}

#[test]
fn report_of_a_rollout_with_trouble() {
    let snap = rollout();
    let r = status::build(&snap);
    assert_eq!(r.pools.len(), 1);
    let p = &r.pools[0];
    assert_eq!((p.updated, p.total, p.max_unavailable), (3, 6, 1));
    // Spans 60, 90, 70 → median 70 s, 3 waves.
    assert_eq!(p.samples, 3);
    assert_eq!(p.eta, Some(Duration::from_secs(210)));

    assert_eq!(r.updating.len(), 1);
    let u = &r.updating[0];
    assert_eq!(u.node, "w3");
    assert_eq!(u.pool, "worker");
    assert_eq!(u.phase.as_ref().unwrap().name, "Drained");
    assert_eq!(u.in_phase, Some(Duration::from_secs(580)));

    assert_eq!(r.degraded.len(), 1);
    assert_eq!(r.degraded[0].node, "w4");
    assert!(
        r.degraded[0]
            .reason
            .contains("content mismatch for file \"/etc/mco-test\"")
    );

    assert_eq!(r.blocked.len(), 1);
    assert_eq!(r.blocked[0].node, "w3");
    assert_eq!(r.blocked[0].blockers[0].pod, "default/web-1");
    assert_eq!(
        r.blocked[0].blockers[0].pdbs,
        vec!["default/web-pdb".to_string()]
    );

    let text = status::render(&r);
    assert!(
        text.starts_with("worker  [##########----------]  3/6 updated"),
        "{text}"
    );
    assert!(text.contains("ETA 3m30s (3 waves of 1)"), "{text}");
    assert!(text.contains("Drained (in progress)"), "{text}");
    assert!(text.contains("9m40s"), "{text}");
    assert!(text.contains("drain blocked"), "{text}");
    assert!(
        text.contains("pod default/web-1 (PDB default/web-pdb)"),
        "{text}"
    );
    assert!(text.contains("degraded"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no terminal escapes in plain output"
    );
}

#[test]
fn pdb_with_no_disruptions_left_blocks_even_before_the_mcn_says_so() {
    let mut snap = rollout();
    // The drain controller has not written the blocker yet.
    snap.mcns
        .retain(|m| m.metadata.name.as_deref() != Some("w3"));
    let r = status::build(&snap);
    assert_eq!(r.blocked.len(), 1);
    assert_eq!(
        r.blocked[0].blockers[0].pdbs,
        vec!["default/web-pdb".to_string()]
    );
    // A budget that still allows a disruption blocks nothing.
    Arc::make_mut(&mut snap.pdbs[0])
        .status
        .as_mut()
        .unwrap()
        .disruptions_allowed = 1;
    assert!(status::build(&snap).blocked.is_empty());
}

#[test]
fn eta_unknown_before_any_node_finished() {
    let mut s = snapshot(10);
    s.pools.push(pool("worker", NEW, 2, 0).into());
    s.nodes
        .push(node("w0", "worker", OLD, NEW, "Working", "").into());
    s.nodes
        .push(node("w1", "worker", OLD, OLD, "Done", "").into());
    let r = status::build(&s);
    assert_eq!(r.pools[0].eta, None);
    let text = status::render(&r);
    assert!(text.contains("ETA unknown"), "{text}");
    assert!(text.contains("waiting"), "{text}");
}

#[test]
fn eta_from_the_pace_when_spans_were_reset() {
    // As the daemon leaves a finished node: every phase reset to False at the end.
    let reset = |n: &str, end: i64| {
        mcn(
            n,
            "worker",
            NEW,
            NEW,
            &[
                (
                    "UpdatePrepared",
                    "False",
                    "Action during update to x: Update Compatible.",
                    end,
                ),
                (
                    "UpdateExecuted",
                    "False",
                    "Action during update to x: ",
                    end,
                ),
                ("Updated", "True", "Node Updated", end),
            ],
        )
    };
    let mut s = snapshot(500);
    let mut p = pool_condition(pool("worker", NEW, 6, 2), "Updating", "True", "");
    p.status.as_mut().unwrap().conditions[0].last_transition_time = Some(ts(0));
    s.pools.push(p.into());
    for (n, end) in [("w0", 100), ("w1", 200)] {
        s.nodes.push(node(n, "worker", NEW, NEW, "Done", "").into());
        s.mcns.push(reset(n, end).into());
    }
    let r = status::build(&s);
    assert_eq!(r.pools[0].samples, 2);
    // 2 nodes in 200 s since the pool started: 100 s each, 4 left.
    assert_eq!(r.pools[0].eta, Some(Duration::from_secs(400)));
    assert!(status::render(&r).contains("ETA 6m40s (1 node per 1m40s so far)"));
    assert_eq!(
        phase::pace_eta(None, &[at(100), at(160), at(220)], 2),
        Some((Duration::from_secs(120), Duration::from_secs(60)))
    );
    assert_eq!(phase::pace_eta(None, &[at(100)], 2), None);
}

#[test]
fn a_pool_waiting_for_its_window_shows_it_and_the_eta_counts_it() {
    use mco_api::rollouts::{
        PoolRollout, RolloutPolicy, RolloutPolicySpec, RolloutPolicyStatus, Window,
    };
    let mut snap = rollout();
    Arc::make_mut(&mut snap.pools[0]).metadata.labels =
        Some([("tier".to_string(), "a".to_string())].into());
    // A daily window opening at the first whole minute an hour from now.
    let open = jiff::Timestamp::from_second((snap.now.as_second() + 3600) / 60 * 60).unwrap();
    let z = open.to_zoned(jiff::tz::TimeZone::UTC);
    let spec: RolloutPolicySpec = serde_json::from_value(serde_json::json!({
        "poolSelector": {"matchLabels": {"tier": "a"}},
    }))
    .unwrap();
    let mut policy = RolloutPolicy::new(
        "maint",
        RolloutPolicySpec {
            windows: vec![Window {
                schedule: format!("{} {} * * *", z.minute(), z.hour()),
                duration: "1h".into(),
                time_zone: Some("UTC".into()),
            }],
            ..spec
        },
    );
    policy.status = Some(RolloutPolicyStatus {
        pools: vec![PoolRollout {
            pool: "worker".into(),
            phase: "WaitingForWindow".into(),
            ..PoolRollout::default()
        }],
        ..RolloutPolicyStatus::default()
    });
    snap.policies.push(policy.into());
    let r = status::build(&snap);
    let p = &r.pools[0];
    let wait = Duration::try_from(snap.now.duration_until(open)).unwrap();
    assert_eq!(p.eta, Some(Duration::from_secs(210) + wait));
    assert_eq!(
        p.window.as_deref(),
        Some(format!("next window {}", open.strftime("%Y-%m-%d %H:%MZ")).as_str())
    );
    let line = status::pool_line(p).join("  ");
    assert!(line.contains("after the window opens"), "{line}");
    assert!(line.contains("next window"), "{line}");

    // Not waiting: the window is shown, the ETA is the pool's own.
    Arc::make_mut(&mut snap.policies[0]).status = None;
    let r = status::build(&snap);
    assert_eq!(r.pools[0].eta, Some(Duration::from_secs(210)));
    assert!(r.pools[0].window.is_some());
}

#[test]
fn a_node_moving_to_an_image_alone_is_updating() {
    const IMG: &str = "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";
    let mut s = snapshot(1000);
    s.pools.push(pool("worker", NEW, 2, 1).into());
    let on_image = |name: &str, current: &str| {
        let mut n = node(name, "worker", NEW, NEW, "Done", "");
        let a = n.metadata.annotations.get_or_insert_default();
        a.insert(
            mco_api::constants::annotations::DESIRED_IMAGE.into(),
            IMG.into(),
        );
        if !current.is_empty() {
            a.insert(
                mco_api::constants::annotations::CURRENT_IMAGE.into(),
                current.into(),
            );
        }
        n
    };
    s.nodes.push(on_image("w0", IMG).into());
    // Pointed at the image, its daemon not started yet: same config, so only the image says so.
    s.nodes.push(on_image("w1", "").into());
    let r = status::build(&s);
    let updating: Vec<&str> = r.updating.iter().map(|u| u.node.as_str()).collect();
    assert_eq!(updating, ["w1"]);
}

#[test]
fn a_pool_waiting_for_its_image_says_why() {
    let mut s = snapshot(1000);
    let mut p = pool("worker", NEW, 2, 0);
    let status = p.status.get_or_insert_default();
    status.conditions.push(mco_api::MachineConfigPoolCondition {
        type_: "Updating".into(),
        status: "True".into(),
        message: format!(
            "{}{NEW}: Image build in progress",
            mco_rollout::plan::WAITING_FOR_IMAGE
        ),
        ..Default::default()
    });
    s.pools.push(p.into());
    let r = status::build(&s);
    assert_eq!(
        r.pools[0].waiting_image.as_deref(),
        Some("Image build in progress")
    );
    let line = status::pool_line(&r.pools[0]).join("  ");
    assert!(
        line.ends_with("waiting for its image (Image build in progress)"),
        "{line}"
    );
    // Updating for any other reason: no such flag.
    let mut s = snapshot(1000);
    s.pools.push(pool("worker", NEW, 2, 0).into());
    assert_eq!(status::build(&s).pools[0].waiting_image, None);
}
