use super::*;
use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as K8sSelector, Time};
use mco_api::MachineConfigPoolCondition;
use mco_api::{MachineConfigPoolSpec, PoolConfiguration};
use pretty_assertions::assert_eq;

const OLD: &str = "rendered-worker-old";
const NEW: &str = "rendered-worker-new";
const NOW: &str = "2026-01-01T00:00:00Z";

fn selector(key: &str) -> K8sSelector {
    K8sSelector {
        match_labels: Some([(key.to_string(), String::new())].into()),
        match_expressions: None,
    }
}

fn pool(name: &str, target: &str, max: Option<IntOrString>) -> MachineConfigPool {
    let mut p = MachineConfigPool::new(
        name,
        MachineConfigPoolSpec {
            node_selector: Some(selector(&format!("node-role.kubernetes.io/{name}"))),
            max_unavailable: max,
            configuration: (!target.is_empty()).then(|| PoolConfiguration {
                name: target.into(),
                source: vec![],
            }),
            ..Default::default()
        },
    );
    p.metadata.generation = Some(3);
    p
}

fn worker(max: Option<IntOrString>) -> MachineConfigPool {
    pool("worker", NEW, max)
}

/// A node in `role`, on `current`, Done, Ready, created `age_s` seconds after the epoch.
fn node(name: &str, role: &str, current: &str, age_s: i64) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some([(format!("node-role.kubernetes.io/{role}"), String::new())].into());
    n.metadata.annotations = Some(
        [
            (annotations::CURRENT_CONFIG.to_string(), current.to_string()),
            (annotations::DESIRED_CONFIG.to_string(), current.to_string()),
            (annotations::STATE.to_string(), states::DONE.to_string()),
        ]
        .into(),
    );
    n.metadata.creation_timestamp = Some(Time(
        jiff::Timestamp::from_second(1_700_000_000 + age_s).unwrap(),
    ));
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

fn with_ann(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    n
}

fn with_label(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    n
}

fn cordoned(mut n: Node) -> Node {
    n.spec = Some(NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    n
}

fn not_ready(mut n: Node) -> Node {
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    n
}

/// Node targeted at `desired` and still working on it.
fn working(n: Node, desired: &str) -> Node {
    with_ann(
        with_ann(n, annotations::DESIRED_CONFIG, desired),
        annotations::STATE,
        states::WORKING,
    )
}

fn degraded(n: Node, desired: &str, reason: &str) -> Node {
    with_ann(
        with_ann(
            with_ann(n, annotations::DESIRED_CONFIG, desired),
            annotations::STATE,
            states::DEGRADED,
        ),
        annotations::REASON,
        reason,
    )
}

fn workers(count: usize) -> Vec<Node> {
    (0..count)
        .map(|i| node(&format!("w{i:02}"), "worker", OLD, i as i64))
        .collect()
}

fn run(pool: &MachineConfigPool, nodes: &[Node]) -> Plan {
    plan(pool, nodes, std::slice::from_ref(pool), NOW)
}

fn cond<'a>(s: &'a MachineConfigPoolStatus, t: &str) -> &'a MachineConfigPoolCondition {
    s.condition(t).unwrap_or_else(|| panic!("no {t} condition"))
}

#[test]
fn max_unavailable_defaults_to_one() {
    assert_eq!(max_unavailable(None, 10), 1);
}

#[test]
fn max_unavailable_int_is_taken_as_is() {
    assert_eq!(max_unavailable(Some(&IntOrString::Int(3)), 10), 3);
    assert_eq!(max_unavailable(Some(&IntOrString::Int(30)), 10), 30);
}

#[test]
fn max_unavailable_zero_and_negative_become_one() {
    assert_eq!(max_unavailable(Some(&IntOrString::Int(0)), 10), 1);
    assert_eq!(max_unavailable(Some(&IntOrString::Int(-4)), 10), 1);
}

#[test]
fn max_unavailable_percent_rounds_down_with_minimum_one() {
    let pct = |s: &str| IntOrString::String(s.into());
    assert_eq!(max_unavailable(Some(&pct("25%")), 20), 5);
    assert_eq!(max_unavailable(Some(&pct("25%")), 19), 4);
    assert_eq!(max_unavailable(Some(&pct("10%")), 9), 1);
    assert_eq!(max_unavailable(Some(&pct("10%")), 5), 1);
    assert_eq!(max_unavailable(Some(&pct("0%")), 100), 1);
    assert_eq!(max_unavailable(Some(&pct("100%")), 7), 7);
    assert_eq!(max_unavailable(Some(&pct("33%")), 10), 3);
}

#[test]
fn max_unavailable_numeric_string_and_garbage() {
    assert_eq!(
        max_unavailable(Some(&IntOrString::String("2".into())), 10),
        2
    );
    assert_eq!(
        max_unavailable(Some(&IntOrString::String("lots".into())), 10),
        1
    );
}

#[test]
fn picks_one_node_by_default() {
    let p = run(&worker(None), &workers(5));
    assert_eq!(p.candidates, vec!["w00"]);
    assert_eq!(p.max_unavailable, 1);
    assert_eq!(p.members.len(), 5);
}

/// The rollout looks members up by binary search.
#[test]
fn members_are_sorted_by_name_whatever_the_node_order() {
    let mut nodes = workers(12);
    nodes.reverse();
    nodes.swap(3, 7);
    let p = run(&worker(None), &nodes);
    let mut sorted = p.members.clone();
    sorted.sort();
    assert_eq!(p.members, sorted);
    assert_eq!(p.members.len(), 12);
}

#[test]
fn picks_up_to_the_budget() {
    let p = run(&worker(Some(IntOrString::Int(3))), &workers(5));
    assert_eq!(p.candidates, vec!["w00", "w01", "w02"]);
    let p = run(
        &worker(Some(IntOrString::String("25%".into()))),
        &workers(20),
    );
    assert_eq!(p.candidates.len(), 5);
}

#[test]
fn busy_nodes_consume_the_budget() {
    let mut nodes = workers(5);
    nodes[3] = working(nodes[3].clone(), NEW);
    let p = run(&worker(Some(IntOrString::Int(2))), &nodes);
    assert_eq!(p.candidates, vec!["w00"]);
    let p = run(&worker(None), &nodes);
    assert!(p.candidates.is_empty(), "{:?}", p.candidates);
}

#[test]
fn cordoned_nodes_count_as_unavailable_and_are_not_candidates() {
    let mut nodes = workers(4);
    nodes[0] = cordoned(nodes[0].clone());
    let p = run(&worker(Some(IntOrString::Int(2))), &nodes);
    assert_eq!(p.candidates, vec!["w01"]);
    assert_eq!(
        p.status.unavailable_machine_count, 2,
        "cordoned + new target"
    );
    let p = run(&worker(None), &nodes);
    assert!(p.candidates.is_empty());
}

#[test]
fn not_ready_nodes_count_as_unavailable() {
    let mut nodes = workers(3);
    nodes[1] = not_ready(nodes[1].clone());
    let p = run(&worker(Some(IntOrString::Int(2))), &nodes);
    assert_eq!(p.candidates, vec!["w00"]);
}

#[test]
fn disk_pressure_makes_a_node_not_ready() {
    let mut n = node("a", "worker", OLD, 0);
    assert!(is_ready(&n));
    n.status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .push(NodeCondition {
            type_: "DiskPressure".into(),
            status: "True".into(),
            ..Default::default()
        });
    assert!(!is_ready(&n));
}

#[test]
fn failing_node_on_target_consumes_budget_and_halts_pool() {
    let mut nodes = workers(4);
    nodes[0] = degraded(nodes[0].clone(), NEW, "boom");
    let p = run(&worker(None), &nodes);
    assert!(
        p.candidates.is_empty(),
        "a degraded node uses the only slot"
    );
    assert_eq!(p.status.unavailable_machine_count, 0, "failing is not busy");
    assert_eq!(p.status.degraded_machine_count, 1);
    let p = run(&worker(Some(IntOrString::Int(2))), &nodes);
    assert_eq!(p.candidates, vec!["w01"]);
}

#[test]
fn failing_node_on_an_older_config_is_retargeted() {
    let mut nodes = workers(3);
    nodes[2] = degraded(nodes[2].clone(), "rendered-worker-mid", "stuck");
    let p = run(&worker(Some(IntOrString::Int(3))), &nodes);
    assert!(
        p.candidates.contains(&"w02".to_string()),
        "{:?}",
        p.candidates
    );
    assert!(is_failing(&nodes[2]));
    assert!(!is_unavailable(&nodes[2]));
}

#[test]
fn degraded_on_current_config_is_not_failing() {
    let n = with_ann(
        node("a", "worker", OLD, 0),
        annotations::STATE,
        states::DEGRADED,
    );
    assert!(is_degraded(&n));
    assert!(!is_failing(&n));
    assert!(is_unavailable(&n), "not done and not failing");
}

#[test]
fn the_rollout_key_sorts_as_the_rollout_order() {
    let mut no_time = with_label(node("c-untimed", "worker", OLD, 0), labels::ZONE, "zone-c");
    no_time.metadata.creation_timestamp = None;
    let mut nodes = [
        node("nozone-old", "worker", OLD, 0),
        with_label(node("b-new", "worker", OLD, 50), labels::ZONE, "zone-b"),
        no_time,
        with_label(node("a-twin-2", "worker", OLD, 40), labels::ZONE, "zone-a"),
        with_label(node("a-twin-1", "worker", OLD, 40), labels::ZONE, "zone-a"),
        node("nozone-new", "worker", OLD, 60),
        with_label(node("c-timed", "worker", OLD, 70), labels::ZONE, "zone-c"),
    ];
    nodes.reverse();
    let mut by_order: Vec<&Node> = nodes.iter().collect();
    by_order.sort_by(|a, b| rollout_order(a, b));
    let mut by_key: Vec<&Node> = nodes.iter().collect();
    by_key.sort_by_cached_key(|n| rollout_key(n));
    let names = |ns: &[&Node]| {
        ns.iter()
            .map(|n| name_of(n).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&by_key), names(&by_order));
    assert_eq!(
        names(&by_key),
        [
            "a-twin-1",
            "a-twin-2",
            "b-new",
            "c-timed",
            "c-untimed",
            "nozone-old",
            "nozone-new"
        ]
    );
}

#[test]
fn candidates_sorted_by_zone_then_age_no_zone_last() {
    let nodes = vec![
        node("nozone-old", "worker", OLD, 0),
        with_label(node("b-new", "worker", OLD, 50), labels::ZONE, "zone-b"),
        with_label(node("a-new", "worker", OLD, 40), labels::ZONE, "zone-a"),
        with_label(node("a-old", "worker", OLD, 10), labels::ZONE, "zone-a"),
        node("nozone-new", "worker", OLD, 60),
        with_label(node("b-old", "worker", OLD, 5), labels::ZONE, "zone-b"),
    ];
    let p = run(&worker(Some(IntOrString::Int(6))), &nodes);
    assert_eq!(
        p.candidates,
        vec![
            "a-old",
            "a-new",
            "b-old",
            "b-new",
            "nozone-old",
            "nozone-new"
        ]
    );
    let all = p.candidates.clone();
    let p = run(&worker(Some(IntOrString::Int(2))), &nodes);
    assert_eq!(p.candidates, vec!["a-old", "a-new"]);
    // Whatever the budget, the first of the whole order, in order.
    for budget in 1..=8 {
        let p = run(&worker(Some(IntOrString::Int(budget))), &nodes);
        assert_eq!(
            p.candidates,
            all[..all.len().min(budget as usize)],
            "{budget}"
        );
    }
}

#[test]
fn paused_pool_targets_nobody_and_says_so() {
    let mut pool = worker(Some(IntOrString::Int(5)));
    pool.spec.paused = true;
    let p = run(&pool, &workers(3));
    assert!(p.candidates.is_empty());
    assert!(p.taint_add.is_empty());
    let updating = cond(&p.status, pool_conditions::UPDATING);
    assert_eq!(updating.status, "False");
    assert_eq!(
        updating.message,
        format!("Pool is paused; will not update to MachineConfig {NEW}")
    );
    assert_eq!(cond(&p.status, pool_conditions::UPDATED).status, "False");
    assert!(p.events.iter().all(|e| e.reason != "SetDesiredConfig"));
}

#[test]
fn pool_without_target_moves_nothing() {
    let p = run(&pool("worker", "", None), &workers(2));
    assert!(p.candidates.is_empty());
    assert!(p.status.condition(pool_conditions::UPDATED).is_none());
    assert_eq!(p.status.machine_count, 2);
}

#[test]
fn empty_node_selector_warns_and_does_nothing() {
    let mut pool = worker(None);
    pool.spec.node_selector = Some(K8sSelector::default());
    let p = run(&pool, &workers(2));
    assert!(p.members.is_empty());
    assert!(p.candidates.is_empty());
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].reason, "SelectingAll");
    assert_eq!(p.events[0].kind, EventKind::Warning);
}

#[test]
fn multiple_pools_each_take_their_own_nodes() {
    let w = worker(Some(IntOrString::Int(10)));
    let infra = pool("infra", "rendered-infra-new", Some(IntOrString::Int(10)));
    let mut nodes = workers(3);
    nodes.push(node("i0", "infra", "rendered-infra-old", 0));
    nodes.push(with_label(
        node("i1", "worker", "rendered-infra-old", 1),
        "node-role.kubernetes.io/infra",
        "",
    ));
    let pools = vec![w.clone(), infra.clone()];
    let pw = plan(&w, &nodes, &pools, NOW);
    let pi = plan(&infra, &nodes, &pools, NOW);
    assert_eq!(pw.members, vec!["w00", "w01", "w02"]);
    assert_eq!(pi.members, vec!["i0", "i1"], "custom pool wins over worker");
    assert_eq!(pi.candidates, vec!["i0", "i1"]);
    assert_eq!(pw.status.machine_count, 3);
    assert_eq!(pi.status.machine_count, 2);
}

#[test]
fn node_in_two_custom_pools_is_excluded_with_a_warning() {
    let a = pool("infra", "rendered-infra", None);
    let b = pool("gpu", "rendered-gpu", None);
    let n = with_label(
        node("x", "infra", "old", 0),
        "node-role.kubernetes.io/gpu",
        "",
    );
    let m = assign_pools(std::slice::from_ref(&n), &[a.clone(), b.clone()]);
    assert!(m.primary.is_empty());
    assert_eq!(m.conflicts["x"], vec!["infra", "gpu"]);
    let events = m.conflict_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Warning);
    assert_eq!(events[0].subject, EventSubject::Node("x".into()));
    let p = plan(&a, std::slice::from_ref(&n), &[a.clone(), b], NOW);
    assert!(p.members.is_empty());
}

#[test]
fn master_wins_over_custom_pool_and_raises_alert() {
    let master = pool("master", "rendered-master", None);
    let infra = pool("infra", "rendered-infra", None);
    let worker = worker(None);
    let n = with_label(
        node("m0", "master", "old", 0),
        "node-role.kubernetes.io/infra",
        "",
    );
    let w = with_label(
        node("m1", "master", "old", 0),
        "node-role.kubernetes.io/worker",
        "",
    );
    let m = assign_pools(&[n, w], &[master, infra, worker]);
    assert_eq!(m.primary["m0"], "master");
    assert_eq!(
        m.primary["m1"], "master",
        "master+worker (compact) is master"
    );
    assert_eq!(m.pool_alerts, BTreeSet::from(["m0".to_string()]));
}

#[test]
fn windows_nodes_are_ignored() {
    let n = with_label(node("win", "worker", OLD, 0), OS_LABEL, "windows");
    let m = assign_pools(&[n], &[worker(None)]);
    assert!(m.primary.is_empty());
}

#[test]
fn nodes_already_targeted_are_not_candidates_again() {
    let mut nodes = workers(3);
    nodes[0] = with_ann(nodes[0].clone(), annotations::DESIRED_CONFIG, NEW);
    let p = run(&worker(Some(IntOrString::Int(3))), &nodes);
    assert_eq!(
        p.candidates,
        vec!["w01", "w02"],
        "w00 is busy and uses one slot"
    );
}

#[test]
fn unmanaged_nodes_are_targeted_without_budget() {
    let mut nodes = workers(2);
    let mut fresh = node("fresh", "worker", "", 0);
    fresh.metadata.annotations = None;
    nodes.push(fresh.clone());
    assert!(!is_unavailable(&fresh));
    let p = run(&worker(None), &nodes);
    assert_eq!(p.candidates, vec!["fresh", "w00"]);
}

#[test]
fn taint_goes_on_nodes_not_at_target_and_off_when_they_arrive() {
    let mut arrived = node("arrived", "worker", NEW, 0);
    arrived.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: taints::UPDATE_IN_PROGRESS_KEY.into(),
            effect: taints::UPDATE_IN_PROGRESS_EFFECT.into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let mut behind = node("behind", "worker", OLD, 1);
    behind.spec = arrived.spec.clone();
    let fresh_behind = node("other", "worker", OLD, 2);
    let p = run(&worker(None), &[arrived, behind, fresh_behind]);
    assert_eq!(p.taint_remove, vec!["arrived"]);
    assert_eq!(p.taint_add, vec!["other"]);
}

/// A node the drain controller has uncordoned on the target is back in service: it needs the
/// taint no more, though it reports Done only a moment later. Uncordoned on another config (or
/// still draining) it does.
#[test]
fn uncordoned_on_the_target_needs_no_taint() {
    let uncordoned = |name, on: &str| {
        with_ann(
            working(node(name, "worker", OLD, 0), NEW),
            annotations::LAST_APPLIED_DRAIN,
            &drain::uncordon(on),
        )
    };
    let back = uncordoned("back", NEW);
    let old_answer = uncordoned("old-answer", OLD);
    let draining = with_ann(
        working(node("draining", "worker", OLD, 0), NEW),
        annotations::LAST_APPLIED_DRAIN,
        &drain::drain(NEW),
    );
    assert!(!needs_update_taint(&back, NEW));
    assert!(needs_update_taint(&old_answer, NEW));
    assert!(needs_update_taint(&draining, NEW));
    let mut tainted = back.clone();
    tainted.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: taints::UPDATE_IN_PROGRESS_KEY.into(),
            effect: taints::UPDATE_IN_PROGRESS_EFFECT.into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let p = run(&worker(None), &[tainted, old_answer, draining]);
    assert_eq!(p.taint_remove, vec!["back"]);
    assert_eq!(p.taint_add, vec!["draining", "old-answer"]);
}

/// The controller plans over digests it keeps between passes: the same plan as over the
/// nodes, and a digest stands only for the very object it was read from.
#[test]
fn a_plan_over_digests_is_the_plan_over_nodes() {
    let mut nodes = workers(6);
    nodes[1] = working(nodes[1].clone(), NEW);
    nodes[2] = degraded(nodes[2].clone(), NEW, "boom");
    nodes[3] = cordoned(nodes[3].clone());
    let pool = worker(Some(IntOrString::Int(3)));
    let arcs: Vec<std::sync::Arc<Node>> = nodes.iter().cloned().map(std::sync::Arc::new).collect();
    let digests: Vec<std::sync::Arc<Digest>> = arcs
        .iter()
        .map(|n| std::sync::Arc::new(Digest::new(n.clone())))
        .collect();
    let membership = assign_pools(&nodes, std::slice::from_ref(&pool));
    let now = "2026-01-01T00:00:00Z";
    assert_eq!(
        plan_with(&pool, &digests, &membership, None, now),
        plan_with(&pool, &nodes, &membership, None, now)
    );
    assert!(digests[0].reads(&arcs[0]));
    assert!(!digests[0].reads(&std::sync::Arc::new(nodes[0].clone())));
}

/// When a rollout starts every member needs the taint; the candidates come first, so the
/// nodes about to be drained get it in the pass that targets them.
#[test]
fn candidates_are_tainted_first() {
    let nodes: Vec<Node> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, n)| node(n, "worker", OLD, 10 - i as i64))
        .collect();
    let p = run(&worker(None), &nodes);
    assert_eq!(p.candidates, vec!["d"], "the oldest goes first");
    assert_eq!(p.taint_add, vec!["d", "a", "b", "c"]);
}

#[test]
fn status_counts_and_updating_condition() {
    let mut nodes = workers(4);
    nodes[0] = node("w00", "worker", NEW, 0);
    nodes[1] = working(nodes[1].clone(), NEW);
    let p = run(&worker(Some(IntOrString::Int(2))), &nodes);
    let s = &p.status;
    assert_eq!(s.machine_count, 4);
    assert_eq!(s.updated_machine_count, 1);
    assert_eq!(s.ready_machine_count, 1);
    assert_eq!(
        s.unavailable_machine_count, 2,
        "w01 busy + w02 just targeted"
    );
    assert_eq!(s.degraded_machine_count, 0);
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(cond(s, pool_conditions::UPDATED).status, "False");
    let updating = cond(s, pool_conditions::UPDATING);
    assert_eq!(updating.status, "True");
    assert_eq!(
        updating.message,
        format!("All nodes are updating to MachineConfig {NEW}")
    );
    assert!(s.configuration.is_none(), "not copied until all updated");
    assert!(p.events.iter().any(|e| e.reason == "Updating"
        && e.message == format!("Pool worker now targeting MachineConfig {NEW}")));
    assert!(p.events.iter().any(|e| e.reason == "SetDesiredConfig"
        && e.message == format!("Targeted node w02 to MachineConfig: {NEW}")));
}

#[test]
fn all_updated_copies_configuration_and_completes() {
    let nodes: Vec<Node> = (0..3)
        .map(|i| node(&format!("w{i}"), "worker", NEW, i))
        .collect();
    let pool = worker(None);
    let p = run(&pool, &nodes);
    let s = &p.status;
    assert_eq!(s.updated_machine_count, 3);
    assert_eq!(s.ready_machine_count, 3);
    let updated = cond(s, pool_conditions::UPDATED);
    assert_eq!(updated.status, "True");
    assert_eq!(
        updated.message,
        format!("All nodes are updated with MachineConfig {NEW}")
    );
    assert_eq!(cond(s, pool_conditions::UPDATING).status, "False");
    assert_eq!(s.configuration, pool.spec.configuration);
    assert!(p.candidates.is_empty());
    assert!(p.events.iter().any(|e| e.reason == "Completed"
        && e.message == format!("Pool worker has completed update to MachineConfig {NEW}")));
    // A second pass with that status emits no new Completed event.
    let mut again = pool.clone();
    again.status = Some(p.status.clone());
    let p2 = run(&again, &nodes);
    assert!(p2.events.iter().all(|e| e.reason != "Completed"));
    assert_eq!(
        cond(&p2.status, pool_conditions::UPDATED).last_transition_time,
        cond(&p.status, pool_conditions::UPDATED).last_transition_time
    );
}

#[test]
fn updated_but_cordoned_is_not_ready() {
    let nodes = vec![
        node("a", "worker", NEW, 0),
        cordoned(node("b", "worker", NEW, 1)),
    ];
    let p = run(&worker(None), &nodes);
    assert_eq!(p.status.updated_machine_count, 2);
    assert_eq!(p.status.ready_machine_count, 1);
    assert_eq!(cond(&p.status, pool_conditions::UPDATED).status, "False");
}

#[test]
fn node_degraded_reason_and_message() {
    let mut nodes = workers(3);
    nodes[0] = degraded(
        nodes[0].clone(),
        NEW,
        "content mismatch for file \"/etc/x\"",
    );
    nodes[1] = with_ann(
        with_ann(
            with_ann(nodes[1].clone(), annotations::DESIRED_CONFIG, NEW),
            annotations::STATE,
            states::UNRECONCILABLE,
        ),
        annotations::REASON,
        "fips",
    );
    let p = run(&worker(Some(IntOrString::Int(5))), &nodes);
    let nd = cond(&p.status, pool_conditions::NODE_DEGRADED);
    assert_eq!(nd.status, "True");
    assert_eq!(nd.reason, "2 nodes are reporting degraded status on sync");
    assert_eq!(
        nd.message,
        r#"Node w00 is reporting: "content mismatch for file \"/etc/x\"", Node w01 is reporting: "fips""#
    );
    let d = cond(&p.status, pool_conditions::DEGRADED);
    assert_eq!(d.status, "True");
    assert_eq!(d.message, nd.message);
    assert_eq!(p.status.degraded_machine_count, 2);
    assert_eq!(p.candidates, vec!["w02"], "5 - 2 failing = 3 slots, 1 left");
}

#[test]
fn render_degraded_is_kept_and_aggregated() {
    let mut pool = worker(None);
    pool.status = Some(MachineConfigPoolStatus {
        conditions: vec![MachineConfigPoolCondition {
            type_: pool_conditions::RENDER_DEGRADED.into(),
            status: "True".into(),
            last_transition_time: Some("then".into()),
            reason: String::new(),
            message: "Failed to render configuration for pool worker: bad".into(),
        }],
        ..Default::default()
    });
    let p = run(&pool, &workers(1));
    let rd = cond(&p.status, pool_conditions::RENDER_DEGRADED);
    assert_eq!(rd.status, "True");
    assert_eq!(rd.last_transition_time.as_deref(), Some("then"));
    let d = cond(&p.status, pool_conditions::DEGRADED);
    assert_eq!(d.status, "True");
    assert_eq!(
        d.message,
        "Failed to render configuration for pool worker: bad"
    );
    assert_eq!(
        cond(&p.status, pool_conditions::NODE_DEGRADED).status,
        "False"
    );
}

#[test]
fn set_condition_moves_transition_time_only_on_status_change() {
    let mut c: Vec<MachineConfigPoolCondition> = vec![];
    set_condition(&mut c, "X", true, "", "a", "t1");
    set_condition(&mut c, "X", true, "", "b", "t2");
    assert_eq!(c[0].last_transition_time.as_deref(), Some("t1"));
    assert_eq!(c[0].message, "b");
    set_condition(&mut c, "X", false, "", "b", "t3");
    assert_eq!(c[0].last_transition_time.as_deref(), Some("t3"));
    assert_eq!(c.len(), 1);
}

#[test]
fn rollout_simulation_never_exceeds_budget() {
    // Drive the planner as a controller would, with daemons that finish one step per tick, and
    // check the invariant at every step for several budgets.
    for (max, count) in [
        (IntOrString::Int(1), 20usize),
        (IntOrString::Int(3), 20),
        (IntOrString::String("25%".into()), 20),
    ] {
        let pool = worker(Some(max.clone()));
        let budget = max_unavailable(Some(&max), count);
        let mut nodes = workers(count);
        let mut ticks = 0;
        loop {
            let p = run(&pool, &nodes);
            for c in &p.candidates {
                let n = nodes.iter_mut().find(|n| name_of(n) == c).unwrap();
                *n = working(n.clone(), NEW);
            }
            let busy = nodes.iter().filter(|n| is_unavailable(n)).count();
            assert!(busy <= budget, "{busy} > {budget} with {max:?}");
            if nodes.iter().all(|n| is_updated(n, NEW)) {
                break;
            }
            // Every busy node finishes.
            for n in nodes.iter_mut().filter(|n| !is_done(n)) {
                *n = with_ann(
                    with_ann(n.clone(), annotations::CURRENT_CONFIG, NEW),
                    annotations::STATE,
                    states::DONE,
                );
            }
            ticks += 1;
            assert!(ticks <= count, "rollout did not finish");
        }
        assert_eq!(ticks, count.div_ceil(budget), "waves for {max:?}");
    }
}

fn run_on(pool: &MachineConfigPool, nodes: &[Node], own: &str) -> Plan {
    let membership = assign_pools(nodes, std::slice::from_ref(pool));
    plan_with(pool, nodes, &membership, Some(own), NOW)
}

/// A node Done on the new target.
fn updated(n: Node) -> Node {
    with_ann(
        with_ann(n, annotations::CURRENT_CONFIG, NEW),
        annotations::DESIRED_CONFIG,
        NEW,
    )
}

#[test]
fn own_node_is_held_back_while_others_need_updating() {
    // w00 is first in rollout order and the budget would take every node.
    let p = run_on(&worker(Some(IntOrString::Int(5))), &workers(3), "w00");
    assert_eq!(p.candidates, vec!["w01", "w02"]);
    assert_eq!(p.deferred.as_deref(), Some("w00"));
}

#[test]
fn own_node_waits_for_others_mid_update() {
    let mut nodes = workers(3);
    nodes[1] = updated(nodes[1].clone());
    nodes[2] = working(nodes[2].clone(), NEW);
    let p = run_on(&worker(Some(IntOrString::Int(5))), &nodes, "w00");
    assert!(p.candidates.is_empty(), "{:?}", p.candidates);
    assert_eq!(p.deferred.as_deref(), Some("w00"));
}

#[test]
fn own_node_goes_when_it_is_the_only_one_left() {
    let mut nodes = workers(3);
    nodes[1] = updated(nodes[1].clone());
    nodes[2] = updated(nodes[2].clone());
    let p = run_on(&worker(None), &nodes, "w00");
    assert_eq!(p.candidates, vec!["w00"]);
    assert_eq!(p.deferred, None);
}

#[test]
fn own_node_in_another_pool_changes_nothing() {
    let mut nodes = workers(3);
    nodes.push(node("m0", "master", OLD, 0));
    let p = run_on(&worker(Some(IntOrString::Int(2))), &nodes, "m0");
    assert_eq!(p.candidates, vec!["w00", "w01"]);
    assert_eq!(p.deferred, None);
    assert_eq!(
        run(&worker(Some(IntOrString::Int(2))), &nodes).candidates,
        p.candidates
    );
}

#[test]
fn own_node_does_not_stop_the_others_within_budget() {
    // Budget 1: the first node in order would be the controller's; the next one goes instead.
    let p = run_on(&worker(None), &workers(4), "w00");
    assert_eq!(p.candidates, vec!["w01"]);
    assert_eq!(p.max_unavailable, 1);
}

fn run_capped(pool: &MachineConfigPool, nodes: &[Node], cap: Option<usize>) -> Plan {
    let members: Vec<&Node> = nodes.iter().collect();
    plan_members_capped(pool, &members, None, NOW, cap)
}

#[test]
fn a_cap_counts_the_nodes_already_pointed_at_the_target() {
    let mut nodes = workers(5);
    let pool = worker(Some(IntOrString::Int(3)));
    assert_eq!(
        run_capped(&pool, &nodes, Some(2)).candidates,
        vec!["w00", "w01"]
    );
    nodes[0] = node("w00", "worker", NEW, 0);
    nodes[1] = working(nodes[1].clone(), NEW);
    assert_eq!(
        run_capped(&pool, &nodes, Some(2)).candidates,
        Vec::<String>::new()
    );
    assert_eq!(run_capped(&pool, &nodes, Some(3)).candidates, vec!["w02"]);
    // The budget still binds under a larger cap.
    assert_eq!(
        run_capped(&pool, &nodes, None).candidates,
        vec!["w02", "w03"]
    );
    assert_eq!(
        run_capped(&pool, &nodes, Some(9)).candidates,
        vec!["w02", "w03"]
    );
}

/// A rollout stepped node by node, halted and resumed (a cap of "what is pointed already")
/// at every other step: the unavailable nodes never exceed maxUnavailable, and it finishes.
#[test]
fn halting_and_resuming_never_exceeds_the_budget() {
    for budget in 1..=3 {
        let pool = worker(Some(IntOrString::Int(budget)));
        let mut nodes = workers(7);
        for step in 0..200 {
            let halted = step % 3 == 1;
            let pointed = nodes.iter().filter(|n| desired_config(n) == NEW).count();
            let cap = halted.then_some(pointed);
            let p = run_capped(&pool, &nodes, cap);
            if halted {
                assert!(p.candidates.is_empty(), "a halt targets no node");
            }
            for c in &p.candidates {
                let n = nodes.iter_mut().find(|n| name_of(n) == c).unwrap();
                *n = working(n.clone(), NEW);
            }
            let unavailable = nodes.iter().filter(|n| is_unavailable(n)).count();
            assert!(
                unavailable <= budget as usize,
                "budget {budget}, step {step}: {unavailable} unavailable"
            );
            // The first busy node finishes each step.
            if let Some(n) = nodes.iter_mut().find(|n| is_unavailable(n)) {
                *n = node(name_of(n).to_string().as_str(), "worker", NEW, 0);
            }
            if nodes.iter().all(|n| is_updated(n, NEW)) {
                break;
            }
        }
        assert!(
            nodes.iter().all(|n| is_updated(n, NEW)),
            "budget {budget}: finished"
        );
    }
}

const IMG: &str =
    "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";
const IMG2: &str =
    "registry.example/os@sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn run_image(pool: &MachineConfigPool, nodes: &[Node], image: ImageTarget<'_>) -> Plan {
    let members: Vec<&Node> = nodes.iter().collect();
    plan_members_for(pool, &members, None, NOW, None, image)
}

/// A node Done on `config` and `image` (empty: outside image mode).
fn on_image(name: &str, config: &str, image: &str) -> Node {
    let n = node(name, "worker", config, 0);
    if image.is_empty() {
        return n;
    }
    with_ann(
        with_ann(n, annotations::CURRENT_IMAGE, image),
        annotations::DESIRED_IMAGE,
        image,
    )
}

#[test]
fn image_mode_moves_nodes_on_the_target_config_to_the_image_within_the_budget() {
    // Every node already runs the target config: only the image is new.
    let nodes: Vec<Node> = (0..4)
        .map(|i| on_image(&format!("w{i}"), NEW, ""))
        .collect();
    let p = run_image(
        &worker(Some(IntOrString::Int(2))),
        &nodes,
        ImageTarget::Image(IMG),
    );
    assert_eq!(p.candidates, ["w0", "w1"]);
    assert_eq!(p.image.as_deref(), Some(IMG));
    assert_eq!(p.status.updated_machine_count, 0);
    assert_eq!(
        p.status.unavailable_machine_count, 2,
        "candidates count as busy"
    );
    assert_eq!(p.events[0].reason, SET_DESIRED_CONFIG_AND_IMAGE);
    assert_eq!(
        p.events[0].message,
        format!("Set target for 2 nodes to MachineConfig: {NEW} / Image: {IMG}")
    );
    // Outside image mode the same nodes are updated.
    let p = run_image(&worker(None), &nodes, ImageTarget::None);
    assert!(p.candidates.is_empty());
    assert_eq!(p.status.updated_machine_count, 4);
}

#[test]
fn a_node_is_updated_only_on_both_the_config_and_the_image() {
    let nodes = [
        on_image("a", NEW, IMG),
        // Pointed at the pair, still on the old image.
        with_ann(
            with_ann(on_image("b", NEW, IMG2), annotations::DESIRED_IMAGE, IMG),
            annotations::STATE,
            states::WORKING,
        ),
        on_image("c", NEW, IMG2),
    ];
    let p = run_image(
        &worker(Some(IntOrString::Int(3))),
        &nodes,
        ImageTarget::Image(IMG),
    );
    assert_eq!(p.candidates, ["c"]);
    let s = &p.status;
    assert_eq!(
        (s.updated_machine_count, s.unavailable_machine_count),
        (1, 2)
    );
    assert_eq!(cond(s, pool_conditions::UPDATED).status, "False");
}

#[test]
fn leaving_image_mode_moves_nodes_back_and_counts_them_only_once_off_the_image() {
    let nodes = [on_image("a", NEW, IMG), on_image("b", NEW, "")];
    let p = run_image(&worker(None), &nodes, ImageTarget::None);
    assert_eq!(p.candidates, ["a"]);
    assert_eq!(p.image, None);
    assert_eq!(p.events[0].reason, SET_DESIRED_CONFIG);
    // Pointed back (desiredImage removed) but still running the image: busy, not updated.
    let back = {
        let mut n = on_image("a", NEW, IMG);
        n.metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(annotations::DESIRED_IMAGE);
        n
    };
    let p = run_image(
        &worker(None),
        &[back, on_image("b", NEW, "")],
        ImageTarget::None,
    );
    assert!(p.candidates.is_empty());
    assert_eq!(p.status.updated_machine_count, 1);
    assert_eq!(p.status.unavailable_machine_count, 1);
}

#[test]
fn a_pool_waiting_for_its_image_moves_and_taints_nobody_and_says_why() {
    let nodes: Vec<Node> = (0..3)
        .map(|i| on_image(&format!("w{i}"), OLD, IMG))
        .collect();
    let p = run_image(
        &worker(Some(IntOrString::Int(3))),
        &nodes,
        ImageTarget::Waiting("Image build in progress"),
    );
    assert!(p.candidates.is_empty());
    assert!(p.taint_add.is_empty());
    assert!(
        p.events
            .iter()
            .all(|e| e.reason != SET_DESIRED_CONFIG_AND_IMAGE)
    );
    let s = &p.status;
    assert_eq!(s.updated_machine_count, 0);
    assert_eq!(s.unavailable_machine_count, 0, "nobody is busy");
    assert_eq!(
        cond(s, pool_conditions::UPDATING).message,
        format!("Waiting for the image of MachineConfig {NEW}: Image build in progress")
    );
}

#[test]
fn a_degraded_node_off_its_desired_image_is_failing() {
    let n = with_ann(
        with_ann(on_image("a", NEW, IMG2), annotations::DESIRED_IMAGE, IMG),
        annotations::STATE,
        states::DEGRADED,
    );
    assert!(is_failing(&n));
    assert!(!is_failing(&with_ann(
        on_image("a", NEW, IMG),
        annotations::STATE,
        states::DEGRADED
    )));
}
