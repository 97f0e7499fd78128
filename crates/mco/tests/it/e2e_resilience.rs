//! End-to-end: rollouts that survive disturbance — a node joining mid-rollout,
//! a node daemon SIGKILLed mid-update, and `mco up` itself restarted (SIGINT) or
//! crashed (SIGKILL).

use crate::e2e;

use e2e::*;

fn worker_moved(c: &Cluster, old: &str) -> Option<String> {
    let nodes = c.try_get_json(&["nodes", "-l", "node-role.kubernetes.io/worker"])?;
    nodes["items"].as_array()?.iter().find_map(|n| {
        (annotation(n, DESIRED_ANN) != old)
            .then(|| n["metadata"]["name"].as_str().map(str::to_owned))?
    })
}

#[test]
fn new_node_joins_through_first_boot_during_a_rollout() {
    let c = Cluster::up(Opts {
        reboot_seconds: 1,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-join",
        "worker",
        "/etc/join",
        "joined\n",
    ));
    wait_for("rollout started", 60, || worker_moved(&c, &old));
    c.sim(&["add-node", "w5", "--pool", "worker"]);
    c.wait_nodes_ready(4, 90);
    let new = wait_for("pool settled on the new config", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != old)
    });
    assert_eq!(c.pool("worker")["status"]["machineCount"], 3);
    let w5 = c.node("w5");
    assert_eq!(annotation(&w5, CURRENT_ANN), new);
    assert_eq!(
        c.read_node_file("w5", "/etc/join").as_deref(),
        Some("joined\n")
    );
    // It joined through first boot: the encapsulated config was consumed.
    assert!(
        c.read_node_file("w5", "/etc/ignition-machine-config-encapsulated.json")
            .is_none(),
        "first boot left its config behind"
    );
}

/// The pid of the `mco daemon` process serving `node`, a child of `mco up`.
fn daemon_pid(c: &Cluster, node: &str) -> Option<u32> {
    let parent = c.pid();
    for e in std::fs::read_dir("/proc").ok()? {
        let e = e.ok()?;
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "daemon") && args.iter().any(|a| a.contains(node)) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn sigkilled_node_daemon_mid_update_converges() {
    let c = Cluster::up(Opts {
        reboot_seconds: 1,
        node_processes: true,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    let _before = wait_for("worker-0's daemon process", 30, || {
        daemon_pid(&c, "worker-0")
    });
    c.apply(&file_mc("99-worker-kill", "worker", "/etc/kill", "k\n"));
    // Kill worker-0's daemon once its update is under way.
    let target = wait_for("worker-0 updating", 90, || {
        let n = c.node("worker-0");
        let desired = annotation(&n, DESIRED_ANN);
        (desired != old).then_some(desired)
    });
    // Mid-update: Working on the target, not yet Done on it.
    let mid_update = |c: &Cluster| {
        let n = c.node("worker-0");
        annotation(&n, STATE_ANN) == "Working" && annotation(&n, CURRENT_ANN) != target
    };
    // The daemon may be between restarts (a reboot): retry until a live one is killed while
    // the update is still under way.
    let pid = wait_for("worker-0's daemon SIGKILLed mid-update", 30, || {
        let pid = daemon_pid(&c, "worker-0")?;
        if !mid_update(&c) {
            return None;
        }
        let st = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .ok()?;
        st.success().then_some(pid)
    });
    // Re-read at once (the supervisor restarts a dead daemon only after a second): only the
    // daemon finishes an update, so this is the node as the kill left it.
    let n = c.node("worker-0");
    assert_eq!(
        (
            annotation(&n, STATE_ANN).as_str(),
            annotation(&n, DESIRED_ANN) == target,
            annotation(&n, CURRENT_ANN) == target,
        ),
        ("Working", true, false),
        "worker-0 was not mid-update when its daemon was killed: {:?}",
        n["metadata"]["annotations"]
    );
    let new = wait_for("pool converged", 120, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != old)
    });
    for w in c.workers() {
        assert_eq!(annotation(&c.node(&w), CURRENT_ANN), new, "{w}");
        assert_eq!(
            c.read_node_file(&w, "/etc/kill").as_deref(),
            Some("k\n"),
            "{w}"
        );
    }
    let after = wait_for("worker-0's daemon restarted", 30, || {
        daemon_pid(&c, "worker-0")
    });
    assert_ne!(after, pid, "the killed daemon is still listed");
}

#[test]
fn restarting_mco_up_mid_rollout_resumes_and_finishes() {
    restart_mid_rollout(Cluster::stop);
}

#[test]
fn sigkilled_mco_up_mid_rollout_resumes_and_finishes() {
    restart_mid_rollout(Cluster::kill_hard);
}

/// A rollout under way, `mco up` ended by `end` (a clean stop or a crash) and started again
/// on the same data dir: the rollout resumes and finishes.
fn restart_mid_rollout(end: fn(&mut Cluster)) {
    let mut c = Cluster::up(Opts {
        workers: 3,
        reboot_seconds: 1,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-restart",
        "worker",
        "/etc/restart",
        "r\n",
    ));
    let first = wait_for("rollout started", 60, || worker_moved(&c, &old));
    end(&mut c);
    c.start();
    let new = wait_for("pool finished after restart", 150, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        pool_settled(&p).filter(|t| *t != old)
    });
    c.wait_nodes_ready(4, 30);
    for w in c.workers() {
        assert_eq!(annotation(&c.node(&w), CURRENT_ANN), new, "{w}");
        assert_eq!(
            c.read_node_file(&w, "/etc/restart").as_deref(),
            Some("r\n"),
            "{w}"
        );
    }
    assert!(c.workers().contains(&first));
}
