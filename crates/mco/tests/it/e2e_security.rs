//! End-to-end: what a stolen node kubeconfig, a curious local user or a damaged data dir meet
//! in a real `mco up`, through the real `kubectl` and `mco`; and who an administrator sees in
//! managedFields.

use crate::e2e;

use e2e::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

on_both_servers!(writes_name_their_component_in_managed_fields);

fn kubectl_as(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("kubectl on PATH");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn token_of(kubeconfig: &Path) -> String {
    std::fs::read_to_string(kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("a token")
        .trim_matches('"')
        .to_string()
}

#[test]
fn a_node_kubeconfig_changes_only_its_own_node_and_dies_with_a_restart() {
    let mut c = Cluster::up(Opts::default());
    let kc0 = c.data.join("kubeconfigs").join("node-worker-0");

    // Worker-0's daemon credentials against worker-1.
    let desired = r#"{"metadata":{"annotations":{"machineconfiguration.openshift.io/desiredConfig":"rendered-master-x"}}}"#;
    for args in [
        &["label", "node", "worker-1", "x=1"][..],
        &[
            "patch",
            "node",
            "worker-1",
            "-p",
            r#"{"spec":{"unschedulable":true}}"#,
        ],
        &["patch", "node", "worker-1", "-p", desired],
    ] {
        let err = kubectl_as(&kc0, args).expect_err("refused");
        assert!(
            err.contains("Error from server (Forbidden)")
                && err.contains("updates to node worker-1 can only be done from the node itself"),
            "kubectl {args:?}: {err}"
        );
    }
    let w1 = c.node("worker-1");
    assert_ne!(annotation(&w1, DESIRED_ANN), "rendered-master-x");
    assert!(w1["metadata"]["labels"].get("x").is_none());
    let mcn = r#"{"apiVersion":"machineconfiguration.openshift.io/v1alpha1","kind":"MachineConfigNode",
        "metadata":{"generateName":"worker-1-"},
        "spec":{"nodeRef":{"name":"worker-1"},"pool":{"name":"worker"},"configVersion":{"desired":"x"}}}"#;
    let f = c.dir.join("mcn.json");
    std::fs::write(&f, mcn).unwrap();
    let err = kubectl_as(&kc0, &["create", "-f", f.to_str().unwrap()]).expect_err("refused");
    assert!(
        err.contains("its spec.nodeRef.name is worker-1, the request is from node worker-0"),
        "{err}"
    );

    // The admin may act as someone else, who then has only their own rights; a node's
    // credentials may not impersonate (they would shed the node guard).
    let err = c
        .kubectl_try(&["--as=someone", "get", "nodes"])
        .unwrap_err();
    assert!(
        err.contains("nodes is forbidden: User \"someone\" cannot list resource \"nodes\""),
        "{err}"
    );
    let err = kubectl_as(
        &kc0,
        &[
            "--as=system:serviceaccount:mco-system:mco-daemon",
            "get",
            "nodes",
        ],
    )
    .expect_err("refused");
    assert!(
        err.contains("Error from server (Forbidden)") && err.contains("cannot impersonate"),
        "{err}"
    );

    // Credentials at rest: owner only, and no token in the database.
    assert_eq!(mode(&c.data), 0o700);
    for f in [
        "state.db",
        "state.db-wal",
        "ca.key",
        "server.key",
        "kubeconfig",
    ] {
        assert_eq!(mode(&c.data.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&kc0), 0o600);
    let old = token_of(&kc0);
    let db: Vec<u8> = ["state.db", "state.db-wal"]
        .iter()
        .flat_map(|f| std::fs::read(c.data.join(f)).unwrap_or_default())
        .collect();
    for t in [&old, &token_of(&c.kubeconfig())] {
        assert!(
            !db.windows(t.len()).any(|w| w == t.as_bytes()),
            "a token in the database"
        );
    }

    // A restart hands worker-0 a new token; the stolen copy stops working.
    c.stop();
    c.start();
    wait_for("worker-0's new token", 60, || {
        (std::fs::read_to_string(&kc0).ok()?.contains("token:") && token_of(&kc0) != old)
            .then_some(())
    });
    // The old token against the new port.
    let stolen = c.dir.join("stolen-node-worker-0");
    let doc = std::fs::read_to_string(&kc0).unwrap();
    std::fs::write(&stolen, doc.replace(&token_of(&kc0), &old)).unwrap();
    let err = kubectl_as(&stolen, &["get", "nodes"]).expect_err("revoked");
    // kubectl's words for 401.
    assert!(err.contains("You must be logged in to the server"), "{err}");
    kubectl_as(&kc0, &["get", "node", "worker-0"]).expect("the new token");
}

/// A data dir whose database is damaged or empty: the file and the way out, on one line, and
/// no backtrace even under RUST_BACKTRACE.
#[test]
fn a_damaged_store_is_named_with_what_to_do() {
    let dir = std::env::temp_dir().join(format!("mco-e2e-damaged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("state.db");
    for (contents, problem) in [
        (vec![0x5a_u8; 8192], "the database is damaged"),
        (vec![], "the database file is empty (0 bytes)"),
    ] {
        std::fs::write(&db, contents).unwrap();
        for args in [
            &["apiserver", "--listen", "127.0.0.1:0", "--data-dir"][..],
            &["up", "--listen", "127.0.0.1:0", "--data-dir"],
        ] {
            let out = Command::new(MCO)
                .args(args)
                .arg(&data)
                .env("RUST_BACKTRACE", "1")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(
                err.contains(&format!("{}: {problem}", db.display()))
                    && err.contains("move it away (for example `mv DIR DIR.damaged`")
                    && !err.contains("backtrace"),
                "{args:?}: {err}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The field managers of `kubectl get ARGS`' managedFields.
fn managers(c: &Cluster, args: &[&str]) -> Vec<String> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    let obj: serde_json::Value = serde_json::from_str(&c.kubectl(&a)).unwrap();
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("{args:?}: no managedFields: {obj}"))
        .iter()
        .map(|e| e["manager"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// After a rollout, the writes of the controller and the daemon are recorded under their
/// components' names (the User-Agent's program, as client-go sends it), and none under
/// kube-apiserver's `unknown` for a request without a User-Agent.
fn writes_name_their_component_in_managed_fields(server: Server) {
    let c = Cluster::up(Opts {
        server,
        workers: 1,
        ..Opts::default()
    });
    let old = c.pool_target("worker");
    c.apply(&file_mc("99-worker-ua", "worker", "/etc/mco-ua", "who\n"));
    let rendered = c.wait_rollout("worker", &old, 120);

    let expect = |args: &[&str], named: &[&str]| {
        let got = managers(&c, args);
        for m in named {
            assert!(got.iter().any(|g| g == m), "{args:?}: no {m} in {got:?}");
        }
        assert!(
            !got.iter().any(|g| g.is_empty() || g == "unknown"),
            "{args:?}: a write without a User-Agent: {got:?}"
        );
    };
    let (controller, daemon, sim) = (
        "machine-config-controller",
        "machine-config-daemon",
        "mco-sim",
    );
    // The simulated kubelet registers the Node and reports its status.
    expect(&["node", "worker-0"], &[controller, daemon, sim]);
    expect(&["machineconfignode", "worker-0"], &[controller, daemon]);
    // `mco up` installs the pools and the ControllerConfig; the controller writes their status.
    expect(&["mcp", "worker"], &[controller, sim]);
    expect(&["mc", &rendered], &[controller]);
    expect(
        &["controllerconfig", "machine-config-controller"],
        &[controller, sim],
    );
}
