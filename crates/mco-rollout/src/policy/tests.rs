use super::*;

#[test]
fn a_node_returns_when_it_is_ready_and_done_whichever_is_later() {
    let t = |s: &str| -> Timestamp { s.parse().unwrap() };
    // Rebooted: Ready again after Done was first seen.
    assert_eq!(
        returned_at(Some(t("2026-01-01T10:05:00Z")), t("2026-01-01T10:04:00Z")),
        t("2026-01-01T10:05:00Z")
    );
    // Rebootless: Ready since long before, the update is when it was seen Done.
    assert_eq!(
        returned_at(Some(t("2025-12-01T00:00:00Z")), t("2026-01-01T10:04:00Z")),
        t("2026-01-01T10:04:00Z")
    );
    assert_eq!(
        returned_at(None, t("2026-01-01T10:04:00Z")),
        t("2026-01-01T10:04:00Z")
    );
}
use mco_api::rollouts::{Gates, HttpProbe, TimeoutGate, Window as WindowSpec};

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn spec(yaml: serde_json::Value) -> RolloutPolicySpec {
    serde_json::from_value(yaml).unwrap()
}

fn fields(spec: &RolloutPolicySpec) -> Vec<String> {
    validate(spec)
        .err()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_full_policy_is_valid() {
    let s = spec(serde_json::json!({
        "poolSelector": {"matchLabels": {"pools.operator.machineconfiguration.openshift.io/worker": ""}},
        "canary": {"nodes": 2},
        "soak": "10m",
        "gates": {"nodeReady": {"timeout": "5m"}, "nodeChecks": {}, "pdbs": true,
                  "http": [{"url": "https://app.example.com/healthz", "expectStatus": 204}]},
        "windows": [{"schedule": "0 2 * * 6", "duration": "4h", "timeZone": "Europe/Berlin"}],
        "autoRollback": true,
    }));
    let v = validate(&s).unwrap();
    assert_eq!(v.canary, Some(CanarySize::Nodes(2)));
    assert_eq!(v.soak, SignedDuration::from_mins(10));
    assert_eq!(v.node_ready, Some(SignedDuration::from_mins(5)));
    assert_eq!(v.node_checks, Some(SignedDuration::from_secs(60)));
    assert_eq!(v.http[0].expect_status, 204);
    assert_eq!(v.windows.len(), 1);
    assert!(v.auto_rollback && v.pdbs);
}

#[test]
fn each_bad_field_is_named() {
    let s = spec(serde_json::json!({
        "canary": {"nodes": -1},
        "soak": "soon",
        "gates": {"nodeReady": {"timeout": "-5m"}, "http": [{"url": "ftp://x", "expectStatus": 99}]},
        "windows": [{"schedule": "61 * * * *", "duration": "1h", "timeZone": "Mars/Olympus"},
                    {"schedule": "0 2 * *", "duration": "0s"}],
    }));
    assert_eq!(
        fields(&s)[..5],
        [
            "spec.canary.nodes: must not be negative, got -1",
            "spec.soak: invalid duration \"soon\": use e.g. \"90s\", \"10m\" or \"1h30m\"",
            "spec.gates.nodeReady.timeout: must not be negative, got \"-5m\"",
            "spec.gates.http[0].url: must be an http:// or https:// URL with a host, at most 2048 bytes, got \"ftp://x\"",
            "spec.gates.http[0].expectStatus: must be an HTTP status between 100 and 599, got 99",
        ]
    );
    let all = fields(&s).join("\n");
    assert!(
        all.contains("spec.windows[0].schedule: invalid cron schedule \"61 * * * *\""),
        "{all}"
    );
    assert!(
        all.contains("spec.windows[0].timeZone: unknown time zone \"Mars/Olympus\""),
        "{all}"
    );
    assert!(
        all.contains("spec.windows[1].schedule: invalid cron schedule \"0 2 * *\": want 5 fields"),
        "{all}"
    );
    assert!(
        all.contains("spec.windows[1].duration: must be longer than zero"),
        "{all}"
    );
    assert_eq!(fields(&s).len(), 9, "{all}");
}

#[test]
fn canary_needs_exactly_one_size_and_percent_is_at_most_100() {
    let both = spec(serde_json::json!({"canary": {"nodes": 1, "percent": 10}}));
    assert_eq!(
        fields(&both),
        vec!["spec.canary: set one of nodes and percent, not both"]
    );
    let none = spec(serde_json::json!({"canary": {}}));
    assert_eq!(fields(&none), vec!["spec.canary: set nodes or percent"]);
    let over = spec(serde_json::json!({"canary": {"percent": 101}}));
    assert_eq!(
        fields(&over),
        vec!["spec.canary.percent: must be at most 100, got 101"]
    );
    let edge = spec(serde_json::json!({"canary": {"percent": 100}}));
    assert!(validate(&edge).is_ok());
}

#[test]
fn windows_and_probes_are_limited() {
    let window = WindowSpec {
        schedule: "0 2 * * *".into(),
        duration: "1h".into(),
        time_zone: None,
    };
    let probe = HttpProbe {
        url: "http://a.example/".into(),
        ..HttpProbe::default()
    };
    let mut s = RolloutPolicySpec {
        windows: vec![window; limits::MAX_WINDOWS],
        gates: Some(Gates {
            http: vec![probe; limits::MAX_HTTP_PROBES],
            ..Gates::default()
        }),
        ..RolloutPolicySpec::default()
    };
    assert!(validate(&s).is_ok(), "at the limits");
    s.windows.push(s.windows[0].clone());
    let extra = s.gates.as_ref().unwrap().http[0].clone();
    s.gates.as_mut().unwrap().http.push(extra);
    assert_eq!(
        fields(&s),
        vec![
            "spec.gates.http: at most 8 probes, got 9",
            "spec.windows: at most 16 windows, got 17"
        ]
    );
    let long_url = HttpProbe {
        url: format!("http://a.example/{}", "x".repeat(limits::MAX_URL_BYTES)),
        ..HttpProbe::default()
    };
    let s = RolloutPolicySpec {
        gates: Some(Gates {
            http: vec![long_url],
            ..Gates::default()
        }),
        ..RolloutPolicySpec::default()
    };
    assert_eq!(fields(&s).len(), 1);
    assert!(fields(&s)[0].starts_with("spec.gates.http[0].url:"));
}

#[test]
fn canary_percent_rounds_up_and_never_exceeds_the_pool() {
    assert_eq!(CanarySize::Percent(10).of(5), 1);
    assert_eq!(CanarySize::Percent(0).of(5), 0);
    assert_eq!(CanarySize::Percent(50).of(5), 3);
    assert_eq!(CanarySize::Nodes(9).of(5), 5);
}

fn win(schedule: &str, duration: &str, tz: &str) -> Window {
    let v = validate(&RolloutPolicySpec {
        windows: vec![WindowSpec {
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: Some(tz.into()),
        }],
        ..RolloutPolicySpec::default()
    })
    .unwrap();
    v.windows.into_iter().next().unwrap()
}

#[test]
fn window_opens_at_its_schedule_for_its_duration_in_its_time_zone() {
    // 02:00 Berlin (CET, UTC+1 in January) for 2 h: 01:00-03:00 UTC.
    let w = [win("0 2 * * *", "2h", "Europe/Berlin")];
    assert_eq!(
        window_state(&w, t("2026-01-10T00:59:00Z")),
        WindowState::Closed(Some(t("2026-01-10T01:00:00Z")))
    );
    assert_eq!(
        window_state(&w, t("2026-01-10T01:00:00Z")),
        WindowState::Open(Some(t("2026-01-10T03:00:00Z")))
    );
    assert_eq!(
        window_state(&w, t("2026-01-10T02:59:59Z")),
        WindowState::Open(Some(t("2026-01-10T03:00:00Z")))
    );
    assert_eq!(
        window_state(&w, t("2026-01-10T03:00:00Z")),
        WindowState::Closed(Some(t("2026-01-11T01:00:00Z")))
    );
    assert_eq!(
        window_state(&[], t("2026-01-10T03:00:00Z")),
        WindowState::Open(None)
    );
}

#[test]
fn the_earliest_of_several_windows_is_next() {
    let w = [
        win("0 22 * * *", "1h", "UTC"),
        win("30 4 * * *", "1h", "UTC"),
    ];
    assert_eq!(
        window_state(&w, t("2026-01-10T12:00:00Z")),
        WindowState::Closed(Some(t("2026-01-10T22:00:00Z")))
    );
    assert_eq!(
        window_state(&w, t("2026-01-10T04:45:00Z")),
        WindowState::Open(Some(t("2026-01-10T05:30:00Z")))
    );
}

#[test]
fn one_policy_per_pool_and_overlaps_govern_neither() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sSel;
    let sel = |k: &str| K8sSel {
        match_labels: Some([(k.to_string(), String::new())].into()),
        ..K8sSel::default()
    };
    let (a, b, bad, empty) = (sel("tier"), sel("canary"), sel("tier"), K8sSel::default());
    let worker: BTreeMap<String, String> = [("tier".to_string(), String::new())].into();
    let infra: BTreeMap<String, String> = [
        ("tier".to_string(), String::new()),
        ("canary".to_string(), String::new()),
    ]
    .into();
    let master = BTreeMap::new();
    let policies = [
        PolicyRef {
            name: "a",
            selector: Some(&a),
            valid: true,
        },
        PolicyRef {
            name: "b",
            selector: Some(&b),
            valid: true,
        },
        PolicyRef {
            name: "bad",
            selector: Some(&bad),
            valid: false,
        },
        PolicyRef {
            name: "empty",
            selector: Some(&empty),
            valid: true,
        },
        PolicyRef {
            name: "none",
            selector: None,
            valid: true,
        },
    ];
    let g = govern(
        &[("worker", &worker), ("infra", &infra), ("master", &master)],
        &policies,
    );
    assert_eq!(g.get("worker"), Some(&Governance::Policy("a".into())));
    assert_eq!(
        g.get("infra"),
        Some(&Governance::Conflict(vec!["a".into(), "b".into()]))
    );
    assert_eq!(g.get("master"), None);
}

fn member(name: &str, targeted: bool, updated: bool) -> NodeGateInput {
    NodeGateInput {
        name: name.into(),
        targeted,
        updated,
        ready: true,
        ..NodeGateInput::default()
    }
}

fn canary_policy(nodes: i64, soak: &str) -> Validated {
    validate(&spec(serde_json::json!({
        "canary": {"nodes": nodes}, "soak": soak,
        "gates": {"nodeReady": {"timeout": "5m"}, "nodeChecks": {}},
    })))
    .unwrap()
}

fn input<'a>(
    members: &'a [NodeGateInput],
    previous: Option<&'a PoolRollout>,
    now: &str,
) -> PoolInput<'a> {
    PoolInput {
        pool: "worker",
        target: "rendered-worker-new",
        members,
        previous,
        halt_requested: false,
        resumed_at: None,
        promote: None,
        disruptive: true,
        external: &[],
        external_pending: None,
        now: t(now),
    }
}

/// A rollout of the target that has pointed `canary` at it.
fn started(canary: &[&str]) -> PoolRollout {
    PoolRollout {
        pool: "worker".into(),
        target: "rendered-worker-new".into(),
        canary_nodes: canary.iter().map(|s| s.to_string()).collect(),
        ..PoolRollout::default()
    }
}

fn checked(mut m: NodeGateInput, passed: bool) -> NodeGateInput {
    m.checks = Some(NodeCheckResult {
        config: "rendered-worker-new".into(),
        passed,
        check: "10-app".into(),
        output: "app not answering\n".into(),
        time: "2026-01-10T10:00:00Z".into(),
    });
    m
}

#[test]
fn the_canary_goes_first_then_soaks_then_the_rest_go() {
    let p = canary_policy(2, "10m");
    let open = WindowState::Open(None);
    // Nothing targeted yet: the canary's 2 may go.
    let mut nodes = vec![
        member("a", false, false),
        member("b", false, false),
        member("c", false, false),
    ];
    let mut d = decide(&p, open, &input(&nodes, None, "2026-01-10T10:00:00Z"));
    assert_eq!((d.cap, d.state.phase.as_str()), (Some(2), phases::CANARY));
    // Two targeted, updating: still capped at 2.
    note_targeted(&mut d.state, &["a".into(), "b".into()]);
    nodes[0].targeted = true;
    nodes[1].targeted = true;
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:01:00Z"),
    );
    assert_eq!(d.cap, Some(2));
    assert_eq!(d.state.canary_nodes, vec!["a", "b"]);
    // Updated, and their checks passed: soaking.
    nodes[0] = checked(member("a", true, true), true);
    nodes[1] = checked(member("b", true, true), true);
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:02:00Z"),
    );
    assert_eq!((d.cap, d.state.phase.as_str()), (Some(2), phases::SOAKING));
    assert_eq!(
        d.state.soak_start_time.as_deref(),
        Some("2026-01-10T10:02:00Z")
    );
    assert_eq!(d.requeue, Some(std::time::Duration::from_secs(600)));
    let soaking = d
        .state
        .conditions
        .iter()
        .find(|c| c.type_ == cond::SOAKING)
        .unwrap();
    assert_eq!(soaking.status, "True");
    // Within the soak: still held.
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:11:59Z"),
    );
    assert_eq!(d.cap, Some(2));
    // The soak is over: promoted, no cap.
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:12:00Z"),
    );
    assert_eq!((d.cap, d.state.phase.as_str()), (None, phases::ROLLING_OUT));
    assert!(d.state.promoted);
    assert_eq!(d.events[0].reason, "Promoted");
    // Promotion sticks.
    let d2 = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:12:01Z"),
    );
    assert_eq!(d2.cap, None);
    assert!(d2.events.is_empty());
}

#[test]
fn a_gate_that_stops_passing_restarts_the_soak() {
    let p = canary_policy(1, "10m");
    let open = WindowState::Open(None);
    let mut nodes = vec![
        checked(member("a", true, true), true),
        member("b", false, false),
    ];
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:00:00Z"),
    );
    assert_eq!(d.state.phase, phases::SOAKING);
    nodes[0].ready = false;
    nodes[0].ready_since = Some(t("2026-01-10T10:05:00Z"));
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:06:00Z"),
    );
    assert_eq!((d.state.phase.as_str(), d.cap), (phases::CANARY, Some(1)));
    assert_eq!(d.state.soak_start_time, None);
    // The Ready gate's deadline is when to look again.
    assert_eq!(d.requeue, Some(std::time::Duration::from_secs(240)));
}

#[test]
fn a_failing_node_check_halts_and_names_node_check_and_output() {
    let p = canary_policy(2, "10m");
    let nodes = vec![
        checked(member("a", true, true), false),
        member("b", true, false),
        member("c", false, false),
    ];
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:01:00Z"),
    );
    assert_eq!((d.cap, d.state.phase.as_str()), (Some(2), phases::HALTED));
    let h = d.state.halt.as_ref().unwrap();
    assert_eq!(
        (h.node.as_str(), h.gate.as_str()),
        ("a", gates::NODE_CHECKS)
    );
    let c = d
        .state
        .conditions
        .iter()
        .find(|c| c.type_ == cond::HALTED)
        .unwrap();
    assert_eq!(c.status, "True");
    assert_eq!(
        c.message,
        "gate nodeChecks failed on node a: node a: health check 10-app failed after the update to rendered-worker-new: app not answering\n"
    );
    assert_eq!(d.events[0].reason, "RolloutHalted");
    assert!(!d.rollback, "no autoRollback in this policy");
    // The halt is reported once.
    let d2 = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&d.state), "2026-01-10T10:02:00Z"),
    );
    assert!(d2.events.is_empty());
    assert_eq!(d2.state.halt, d.state.halt);
}

#[test]
fn auto_rollback_is_asked_for_when_the_canary_fails() {
    let mut p = canary_policy(1, "1m");
    p.auto_rollback = true;
    let nodes = vec![
        checked(member("a", true, true), false),
        member("b", false, false),
    ];
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:01:00Z"),
    );
    assert!(d.rollback);
}

#[test]
fn a_node_not_ready_past_its_timeout_halts() {
    let p = canary_policy(1, "0s");
    let mut a = member("a", true, true);
    a.ready = false;
    a.ready_since = Some(t("2026-01-10T10:00:00Z"));
    let nodes = vec![a, member("b", false, false)];
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:04:59Z"),
    );
    assert_eq!(d.state.phase, phases::CANARY);
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:05:00Z"),
    );
    assert_eq!(d.state.phase, phases::HALTED);
    assert_eq!(d.state.halt.as_ref().unwrap().gate, gates::NODE_READY);
    assert!(
        d.state
            .halt
            .as_ref()
            .unwrap()
            .message
            .contains("is not Ready 5m")
    );
}

#[test]
fn resume_forgives_failures_seen_before_it_and_promote_skips_the_soak() {
    let p = canary_policy(1, "1h");
    let nodes = vec![
        checked(member("a", true, true), false),
        member("b", false, false),
    ];
    let canary = started(&["a"]);
    let mut i = input(&nodes, Some(&canary), "2026-01-10T10:05:00Z");
    i.resumed_at = Some(t("2026-01-10T10:01:00Z"));
    i.promote = Some("rendered-worker-new");
    let d = decide(&p, WindowState::Open(None), &i);
    assert_eq!((d.cap, d.state.phase.as_str()), (None, phases::ROLLING_OUT));
    assert_eq!(d.events[0].reason, "Promoted");
    // A promotion of another config does nothing.
    i.promote = Some("rendered-worker-old");
    let d = decide(&p, WindowState::Open(None), &i);
    assert_eq!(d.cap, Some(1));
}

#[test]
fn a_manual_halt_holds_every_untargeted_node_until_removed() {
    let p = validate(&RolloutPolicySpec::default()).unwrap();
    let nodes = vec![
        member("a", true, false),
        member("b", false, false),
        member("c", false, false),
    ];
    let mut i = input(&nodes, None, "2026-01-10T10:00:00Z");
    i.halt_requested = true;
    let d = decide(&p, WindowState::Open(None), &i);
    assert_eq!((d.cap, d.state.phase.as_str()), (Some(1), phases::HALTED));
    assert_eq!(d.state.halt.as_ref().unwrap().gate, gates::MANUAL);
    i.halt_requested = false;
    i.previous = Some(&d.state);
    let d = decide(&p, WindowState::Open(None), &i);
    assert_eq!(d.cap, None);
    assert_eq!(d.events[0].reason, "RolloutResumed");
    assert!(d.state.halt.is_none());
}

#[test]
fn a_closed_window_holds_disruptive_updates_only() {
    let p = validate(&RolloutPolicySpec::default()).unwrap();
    let nodes = vec![member("a", true, false), member("b", false, false)];
    let closed = WindowState::Closed(Some(t("2026-01-10T22:00:00Z")));
    let d = decide(&p, closed, &input(&nodes, None, "2026-01-10T21:00:00Z"));
    assert_eq!(
        (d.cap, d.state.phase.as_str()),
        (Some(1), phases::WAITING_FOR_WINDOW)
    );
    assert_eq!(d.state.next_window.as_deref(), Some("2026-01-10T22:00:00Z"));
    assert_eq!(d.requeue, Some(std::time::Duration::from_secs(3600)));
    assert_eq!(d.events[0].reason, "WaitingForWindow");
    let mut i = input(&nodes, None, "2026-01-10T21:00:00Z");
    i.disruptive = false;
    let d = decide(&p, closed, &i);
    assert_eq!(d.cap, None);
}

#[test]
fn a_new_target_starts_a_new_canary() {
    let p = canary_policy(1, "0s");
    let old = PoolRollout {
        pool: "worker".into(),
        target: "rendered-worker-old".into(),
        promoted: true,
        canary_nodes: vec!["x".into()],
        ..PoolRollout::default()
    };
    let nodes = vec![member("a", false, false), member("b", false, false)];
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&old), "2026-01-10T10:00:00Z"),
    );
    assert_eq!(d.cap, Some(1));
    assert!(!d.state.promoted && d.state.canary_nodes.is_empty());
}

#[test]
fn a_finished_rollout_is_complete() {
    let p = canary_policy(1, "0s");
    let nodes = vec![
        checked(member("a", true, true), true),
        checked(member("b", true, true), true),
    ];
    let first = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:00:00Z"),
    );
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&first.state), "2026-01-10T10:00:01Z"),
    );
    assert_eq!((d.cap, d.state.phase.as_str()), (None, phases::COMPLETE));
}

#[test]
fn timeout_gate_defaults() {
    let s = RolloutPolicySpec {
        gates: Some(Gates {
            pods_ready: Some(TimeoutGate { timeout: None }),
            ..Gates::default()
        }),
        ..RolloutPolicySpec::default()
    };
    assert_eq!(validate(&s).unwrap().pods_ready, Some(DEFAULT_GATE_TIMEOUT));
}

#[test]
fn a_rollback_moves_only_the_nodes_off_its_target_and_does_not_gate_the_rest() {
    // Rolling back to "old": c, d and e never left it; a and b did.
    let p = canary_policy(2, "0s");
    let mut nodes = vec![
        member("a", false, false),
        member("b", false, false),
        member("c", true, true),
        member("d", true, true),
        member("e", true, true),
    ];
    let mut d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, None, "2026-01-10T10:00:00Z"),
    );
    assert_eq!(d.state.baseline_nodes, vec!["c", "d", "e"]);
    // The baseline's 3, and a canary of 2: the two nodes to move.
    assert_eq!(d.cap, Some(5));
    note_targeted(&mut d.state, &["a".into(), "b".into()]);
    assert_eq!(d.state.canary_nodes, vec!["a", "b"]);
    nodes[0] = checked(member("a", true, true), true);
    nodes[1] = checked(member("b", true, true), true);
    // c, d, e have no check result for the target, and are not asked for one.
    let d = decide(
        &p,
        WindowState::Open(None),
        &input(&nodes, Some(&d.state), "2026-01-10T10:01:00Z"),
    );
    assert_eq!(d.state.phase, phases::COMPLETE);
}

#[test]
fn pods_and_pdbs_gates_wait_then_fail_with_names() {
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::api::policy::v1::{
        PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
    let p = validate(&spec(serde_json::json!({
        "gates": {"podsReady": {"timeout": "5m"}, "pdbs": true},
    })))
    .unwrap();
    let pod = |name: &str, node: &str, ready: bool, phase: &str| {
        let mut p = Pod::default();
        p.metadata.namespace = Some("default".into());
        p.metadata.name = Some(name.into());
        p.spec = Some(PodSpec {
            node_name: Some(node.into()),
            ..PodSpec::default()
        });
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        p
    };
    let pods = [
        pod("web-1", "a", false, "Running"),
        pod("job-1", "a", false, "Succeeded"),
        pod("web-2", "b", true, "Running"),
    ];
    let back = t("2026-01-10T10:00:00Z");
    let moved = [("a", Some(back)), ("b", Some(back))];
    let pool = ["a", "b", "c"];
    let (f, pending) = pod_and_pdb_gates(
        &p,
        &moved,
        &pods,
        &[],
        &[],
        &pool,
        t("2026-01-10T10:04:00Z"),
    );
    assert!(f.is_empty());
    assert_eq!(pending, Some(t("2026-01-10T10:05:00Z")));
    let (f, _) = pod_and_pdb_gates(
        &p,
        &moved,
        &pods,
        &[],
        &[],
        &pool,
        t("2026-01-10T10:05:00Z"),
    );
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].node.as_str(), f[0].gate), ("a", gates::PODS_READY));
    assert_eq!(
        f[0].message,
        "pods not Ready 5m after node a came back: default/web-1"
    );

    let mut pdb = PodDisruptionBudget::default();
    pdb.metadata.namespace = Some("default".into());
    pdb.metadata.name = Some("web-pdb".into());
    pdb.status = Some(PodDisruptionBudgetStatus {
        current_healthy: 1,
        desired_healthy: 2,
        conditions: Some(vec![Condition {
            type_: "DisruptionAllowed".into(),
            status: "False".into(),
            last_transition_time: Time(back),
            message: String::new(),
            reason: String::new(),
            observed_generation: None,
        }]),
        ..PodDisruptionBudgetStatus::default()
    });
    pdb.spec = Some(PodDisruptionBudgetSpec {
        selector: Some(LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            ..LabelSelector::default()
        }),
        ..PodDisruptionBudgetSpec::default()
    });
    let labelled = |mut p: Pod, app: &str| {
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p
    };
    // The budget's pod runs on a pool node.
    let on_pool = [labelled(pod("web-3", "c", true, "Running"), "web")];
    let (f, pending) = pod_and_pdb_gates(
        &p,
        &[],
        &[],
        std::slice::from_ref(&pdb),
        &on_pool,
        &pool,
        t("2026-01-10T10:01:00Z"),
    );
    assert!(f.is_empty());
    assert_eq!(pending, Some(t("2026-01-10T10:05:00Z")));
    let late = t("2026-01-10T10:06:00Z");
    let (f, _) = pod_and_pdb_gates(
        &p,
        &[],
        &[],
        std::slice::from_ref(&pdb),
        &on_pool,
        &pool,
        late,
    );
    assert_eq!(
        f[0].message,
        "PodDisruptionBudget default/web-pdb has 1 healthy pods of 2 desired for longer than 5m"
    );
    // A short budget elsewhere is not the pool's: its pods run on other nodes, in another
    // namespace, or do not match its selector.
    let mut other_ns = labelled(pod("web-4", "a", true, "Running"), "web");
    other_ns.metadata.namespace = Some("other".into());
    let elsewhere = [
        labelled(pod("web-5", "x", true, "Running"), "web"),
        other_ns,
        labelled(pod("db-1", "a", true, "Running"), "db"),
    ];
    let (f, pending) = pod_and_pdb_gates(
        &p,
        &[],
        &[],
        std::slice::from_ref(&pdb),
        &elsewhere,
        &pool,
        late,
    );
    assert!(f.is_empty(), "{f:?}");
    assert_eq!(pending, None);
    // Nor is a budget without a selector.
    let mut no_selector = pdb.clone();
    no_selector.spec = None;
    let (f, _) = pod_and_pdb_gates(&p, &[], &[], &[no_selector], &on_pool, &pool, late);
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn a_pending_external_gate_holds_the_soak_and_a_failed_one_halts() {
    let p = canary_policy(1, "0s");
    let nodes = vec![
        checked(member("a", true, true), true),
        member("b", false, false),
    ];
    let canary = started(&["a"]);
    let mut i = input(&nodes, Some(&canary), "2026-01-10T10:00:00Z");
    i.external_pending = Some(t("2026-01-10T10:03:00Z"));
    let d = decide(&p, WindowState::Open(None), &i);
    assert_eq!((d.state.phase.as_str(), d.cap), (phases::CANARY, Some(1)));
    assert_eq!(d.requeue, Some(std::time::Duration::from_secs(180)));
    let failed = [ExternalFailure {
        node: "a".into(),
        gate: gates::PODS_READY,
        message: "pods not Ready".into(),
    }];
    i.external_pending = None;
    i.external = &failed;
    let d = decide(&p, WindowState::Open(None), &i);
    assert_eq!(d.state.phase, phases::HALTED);
    assert_eq!(d.state.halt.unwrap().gate, gates::PODS_READY);
}

#[test]
fn node_checks_timeout_is_whole_seconds_up_to_its_limit() {
    let with =
        |timeout: &str| spec(serde_json::json!({"gates": {"nodeChecks": {"timeout": timeout}}}));
    assert_eq!(
        validate(&with("10m")).unwrap().node_checks,
        Some(SignedDuration::from_mins(10))
    );
    assert_eq!(
        validate(&with("1s")).unwrap().node_checks,
        Some(SignedDuration::from_secs(1))
    );
    for (bad, shown) in [("601s", "10m 1s"), ("0s", "0s"), ("1500ms", "1s 500ms")] {
        assert_eq!(
            fields(&with(bad)),
            [format!(
                "spec.gates.nodeChecks.timeout: must be whole seconds from 1s to 10m, got {shown}"
            )]
        );
    }
}

#[test]
fn a_missing_check_result_halts_after_the_timeout_and_margin() {
    let p = validate(&spec(serde_json::json!({
        "canary": {"nodes": 1}, "soak": "10m",
        "gates": {"nodeChecks": {"timeout": "60s"}},
    })))
    .unwrap();
    let mut a = member("a", true, true);
    a.done_since = Some(t("2026-01-10T10:00:00Z"));
    // A result for another config does not count.
    a.checks = checked(member("a", true, true), true).checks.map(|mut c| {
        c.config = "rendered-worker-old".into();
        c
    });
    let nodes = vec![a, member("b", false, false)];
    let open = WindowState::Open(None);
    // Within the timeout and margin: the soak waits, and looks again at the deadline.
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&started(&["a"])), "2026-01-10T10:01:00Z"),
    );
    assert_eq!((d.cap, d.state.phase.as_str()), (Some(1), phases::CANARY));
    assert_eq!(d.state.halt, None);
    assert_eq!(d.requeue, Some(std::time::Duration::from_secs(30)));
    // Past it: halted, naming the node and the target.
    let d = decide(
        &p,
        open,
        &input(&nodes, Some(&d.state), "2026-01-10T10:01:30Z"),
    );
    assert_eq!(d.state.phase, phases::HALTED);
    let h = d.state.halt.as_ref().unwrap();
    assert_eq!(
        (h.node.as_str(), h.gate.as_str()),
        ("a", gates::NODE_CHECKS)
    );
    assert_eq!(
        h.message,
        "node a: no health check result for rendered-worker-new after 1m 30s \
         (its daemon reports none, or its report was lost)"
    );
    assert_eq!(d.events[0].reason, "RolloutHalted");
    // A resume after the deadline forgives it.
    let mut resumed = input(&nodes, Some(&d.state), "2026-01-10T10:02:00Z");
    resumed.resumed_at = Some(t("2026-01-10T10:01:45Z"));
    assert_eq!(decide(&p, open, &resumed).state.halt, None);
}
