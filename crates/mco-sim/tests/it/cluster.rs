//! The embedded cluster end to end: real API server, real controller, simulated nodes running
//! the daemon, observed with the real kubectl and by reading node roots.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mco_sim::root::NodeRoot;
use mco_sim::{Cluster, ClusterOptions, NodeSpec, SpecDir};

const DEADLINE: Duration = Duration::from_secs(180);

fn options(dir: &Path, masters: usize, workers: usize) -> ClusterOptions {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let mut o = ClusterOptions::new(dir);
    o.masters = masters;
    o.workers = workers;
    o.reboot = Duration::ZERO;
    o.listen = "127.0.0.1:0".parse().unwrap();
    o.mcs_listen = Some("127.0.0.1:0".parse().unwrap());
    o
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .map_err(|e| format!("running kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Polls `check` until it returns `Some`, failing with the last observation at the deadline;
/// every 250 ms, as each check runs kubectl.
async fn eventually<T>(what: &str, check: impl FnMut() -> Result<Option<T>, String>) -> T {
    mco_testkit::eventually_with_last(what, DEADLINE, Duration::from_millis(250), check).await
}

fn jsonpath(kc: &Path, args: &[&str], path: &str) -> Result<String, String> {
    let jp = format!("jsonpath={path}");
    let mut a = args.to_vec();
    a.extend(["-o", &jp]);
    kubectl(kc, &a)
}

fn pool_target(kc: &Path, pool: &str) -> Result<Option<String>, String> {
    let t = jsonpath(kc, &["get", "mcp", pool], "{.spec.configuration.name}")?;
    Ok((!t.is_empty()).then_some(t))
}

/// Every node of `pool` (by role label) on `config` with state Done: name list.
fn pool_nodes_at(kc: &Path, pool: &str, config: &str) -> Result<Option<Vec<String>>, String> {
    let sel = format!("node-role.kubernetes.io/{pool}");
    let out = jsonpath(
        kc,
        &["get", "nodes", "-l", &sel],
        r#"{range .items[*]}{.metadata.name} {.metadata.annotations.machineconfiguration\.openshift\.io/currentConfig} {.metadata.annotations.machineconfiguration\.openshift\.io/state}{"\n"}{end}"#,
    )?;
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split(' ').collect()).collect();
    let all = !rows.is_empty()
        && rows
            .iter()
            .all(|r| r.len() == 3 && r[1] == config && r[2] == "Done");
    Ok(all.then(|| rows.iter().map(|r| r[0].to_string()).collect()))
}

fn root(dir: &Path, node: &str) -> PathBuf {
    dir.join("nodes").join(node)
}

fn booted_title(dir: &Path, node: &str) -> String {
    let st = NodeRoot::at(root(dir, node)).os_status().unwrap().unwrap();
    st.booted.origin.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_join_through_first_boot_and_a_file_config_rolls_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(options(dir, 1, 2)).await.unwrap();
    let kc = cluster.kubeconfig();
    assert!(kc.is_absolute());

    // Join: every node on its pool's rendered config, Done, Ready, OS adopted at first boot.
    for pool in ["master", "worker"] {
        let target = eventually("a rendered config", || pool_target(&kc, pool)).await;
        // Every node of the pool, not only those registered so far: a node that boots later
        // is not yet listed when the first is already Done.
        let want = if pool == "master" { 1 } else { 2 };
        let nodes = eventually("nodes on the rendered config", || {
            pool_nodes_at(&kc, pool, &target).map(|n| n.filter(|n| n.len() >= want))
        })
        .await;
        assert_eq!(nodes.len(), want);
        for n in &nodes {
            let r = root(dir, n);
            assert!(
                r.join("etc/ignition-machine-config-encapsulated.json.bak")
                    .exists()
            );
            // Joined through the machine config server: Ignition's record, and the daemon's
            // first start stored the cluster's whole config in place of the encapsulated one.
            assert!(r.join("etc/.ignition-result.json").exists());
            assert!(
                r.join("etc/machine-config-daemon/node-annotations.json.bak")
                    .exists()
            );
            let current: serde_json::Value = serde_json::from_slice(
                &std::fs::read(r.join("etc/machine-config-daemon/currentconfig")).unwrap(),
            )
            .unwrap();
            assert_eq!(current["metadata"]["name"], target.as_str());
            assert!(
                current["spec"]["config"]["storage"]["files"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty()),
                "{current}"
            );
            assert!(r.join("run/ostree-booted").exists());
            assert_eq!(
                booted_title(dir, n),
                "pivot://registry.example.com/mco/machine-os-content:1.2.2"
            );
            // The base config's files are on disk.
            assert!(r.join("etc/kubernetes/kubelet.conf").exists());
        }
    }
    let ready = eventually("nodes Ready", || {
        let out = kubectl(&kc, &["get", "nodes", "--no-headers"])?;
        let lines: Vec<&str> = out.lines().collect();
        Ok((lines.len() == 3 && lines.iter().all(|l| l.contains(" Ready "))).then_some(out))
    })
    .await;
    assert!(ready.contains("worker-1"), "{ready}");
    let info = jsonpath(
        &kc,
        &["get", "node", "worker-0"],
        "{.status.nodeInfo.osImage}",
    )
    .unwrap();
    assert_eq!(info, "UOS Server 20");

    // Workloads: a DaemonSet pod per node and three web pods.
    eventually("workload pods Running", || {
        let ds = kubectl(
            &kc,
            &[
                "get",
                "pods",
                "-n",
                "kube-system",
                "-l",
                "app=node-agent",
                "--no-headers",
            ],
        )?;
        let web = kubectl(&kc, &["get", "pods", "-l", "app=web", "--no-headers"])?;
        Ok(
            (ds.lines().count() == 3 && web.lines().filter(|l| l.contains("Running")).count() == 3)
                .then_some(()),
        )
    })
    .await;

    // A file MachineConfig rolls out to every worker.
    let before = pool_target(&kc, "worker").unwrap().unwrap();
    let boot_before =
        std::fs::read_to_string(root(dir, "worker-0").join("proc/sys/kernel/random/boot_id"))
            .unwrap();
    let mc = dir.join("99-worker-motd.yaml");
    std::fs::write(
        &mc,
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-worker-motd\n  labels:\n    machineconfiguration.openshift.io/role: worker\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n      - path: /etc/motd\n        mode: 420\n        overwrite: true\n        contents:\n          source: data:,hello%20from%20mco%0A\n",
    )
    .unwrap();
    kubectl(&kc, &["apply", "-f", mc.to_str().unwrap()]).unwrap();
    let after = eventually("a new worker rendered config", || {
        Ok(pool_target(&kc, "worker")?.filter(|t| *t != before))
    })
    .await;
    let workers = eventually("workers on the new config", || {
        pool_nodes_at(&kc, "worker", &after)
    })
    .await;
    assert_eq!(workers.len(), 2);
    for w in &workers {
        let motd = std::fs::read_to_string(root(dir, w).join("etc/motd")).unwrap();
        assert_eq!(motd, "hello from mco\n");
    }
    let boot_after =
        std::fs::read_to_string(root(dir, "worker-0").join("proc/sys/kernel/random/boot_id"))
            .unwrap();
    assert_ne!(boot_before, boot_after, "a file change reboots the node");
    // Masters are untouched.
    assert!(!root(dir, "master-0").join("etc/motd").exists());

    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_skipped_the_os_at_first_boot_shows_seed_000s_degraded_message() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(options(dir, 0, 1)).await.unwrap();
    let kc = cluster.kubeconfig();
    SpecDir::of(dir)
        .add(&NodeSpec {
            name: "w9".into(),
            pool: "worker".into(),
            os: "uos".into(),
            skip_firstboot_os: true,
            zone: "b".into(),
        })
        .unwrap();
    let target = eventually("a rendered config", || pool_target(&kc, "worker")).await;
    eventually("w9 joined", || {
        let cur = jsonpath(
            &kc,
            &["get", "node", "w9"],
            r#"{.metadata.annotations.machineconfiguration\.openshift\.io/currentConfig}"#,
        )?;
        Ok((cur == target).then_some(()))
    })
    .await;
    // Files applied, OS never adopted: the booted deployment is still the plain refspec.
    let r = root(dir, "w9");
    assert!(r.join("etc/machine-config-daemon/currentconfig").exists());
    assert!(r.join("etc/kubernetes/kubelet.conf").exists());
    assert_eq!(booted_title(dir, "w9"), "uswift:uswift/x86_64");
    let status = format!("{}", NodeRoot::at(&r).os_status().unwrap().unwrap());
    assert!(
        status.starts_with("State: idle\nDeployments:\n* uswift:uswift/x86_64\n                   Version: 20.20230625.uccps.0 (2023-06-25T08:15:06Z)\n                    Commit: 698a07617e25f715b19b047b27a03d18fd526da4a2cfd56f02f6661ba78be127\n"),
        "{status}"
    );

    // A MachineConfig change: the daemon validates against the current config first.
    let mc = dir.join("99-worker-file.yaml");
    std::fs::write(
        &mc,
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-worker-file\n  labels:\n    machineconfiguration.openshift.io/role: worker\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n      - path: /etc/example\n        mode: 420\n        contents:\n          source: data:,x\n",
    )
    .unwrap();
    kubectl(&kc, &["apply", "-f", mc.to_str().unwrap()]).unwrap();
    let reason = eventually("w9 Degraded", || {
        let out = jsonpath(
            &kc,
            &["get", "node", "w9"],
            r#"{.metadata.annotations.machineconfiguration\.openshift\.io/state} {.metadata.annotations.machineconfiguration\.openshift\.io/reason}"#,
        )?;
        Ok(out.strip_prefix("Degraded ").map(str::to_string))
    })
    .await;
    // Seed 000's line, verbatim (mco may add how to fix it after).
    let seed = format!(
        "unexpected on-disk state validating against {target}: expected target osImageURL \"registry.example.com/mco/machine-os-content:1.2.2\", have \"\""
    );
    assert!(reason.starts_with(&seed), "{reason}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn os_upgrade_then_restart_resumes_and_a_removed_node_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A master too: the web pods need somewhere to go while the only worker drains. No
    // machine config server: nodes get the same Ignition assembled in process.
    let mut opts = options(dir, 1, 1);
    opts.mcs_listen = None;
    let cluster = Cluster::start(opts).await.unwrap();
    assert!(cluster.mcs_addr().is_err());
    let kc = cluster.kubeconfig();
    let first = eventually("a rendered config", || pool_target(&kc, "worker")).await;
    eventually("worker-0 joined", || pool_nodes_at(&kc, "worker", &first)).await;
    let root0 = root(dir, "worker-0");
    assert!(root0.join("etc/.ignition-result.json").exists());
    assert!(root0.join("etc/kubernetes/kubeconfig").exists());
    assert!(root0.join("etc/mcs-machine-config-content.json").exists());

    // Seed 000's upgrade: the ControllerConfig moves to 1.3.0 and the node reboots into it.
    kubectl(
        &kc,
        &[
            "patch",
            "controllerconfig",
            "machine-config-controller",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"osImageURL":"registry.example.com/mco/machine-os-content:1.3.0"}}"#,
        ],
    )
    .unwrap();
    let upgraded = eventually("a new rendered config", || {
        Ok(pool_target(&kc, "worker")?.filter(|t| *t != first))
    })
    .await;
    eventually("worker-0 upgraded", || {
        pool_nodes_at(&kc, "worker", &upgraded)
    })
    .await;
    let status = NodeRoot::at(root(dir, "worker-0"))
        .os_status()
        .unwrap()
        .unwrap();
    let text = status.to_string();
    assert!(
        text.starts_with("State: idle\nDeployments:\n* pivot://registry.example.com/mco/machine-os-content:1.3.0\n              CustomOrigin: Managed by machine-config-operator\n                   Version: 20.20231221.uccps.0 ("),
        "{text}"
    );
    assert!(
        text.contains("\n  pivot://registry.example.com/mco/machine-os-content:1.2.2\n"),
        "{text}"
    );
    let boot_id = NodeRoot::at(root(dir, "worker-0")).boot_id().unwrap();
    cluster.shutdown().await;

    // A restart resumes: same node, same disk and deployments, no new boot.
    let cluster = Cluster::start(options(dir, 1, 1)).await.unwrap();
    let kc = cluster.kubeconfig();
    eventually("worker-0 Ready again", || {
        let out = kubectl(&kc, &["get", "nodes", "--no-headers"])?;
        let ready = jsonpath(
            &kc,
            &["get", "node", "worker-0"],
            r#"{.status.conditions[?(@.type=="Ready")].status}"#,
        )?;
        if out.lines().count() == 2 && ready == "True" {
            Ok(Some(()))
        } else {
            Err(out)
        }
    })
    .await;
    assert_eq!(
        pool_nodes_at(&kc, "worker", &upgraded).unwrap().unwrap(),
        ["worker-0"]
    );
    assert_eq!(
        NodeRoot::at(root(dir, "worker-0")).boot_id().unwrap(),
        boot_id
    );
    assert_eq!(
        booted_title(dir, "worker-0"),
        "pivot://registry.example.com/mco/machine-os-content:1.3.0"
    );

    // Removing a node deletes its Node object and its disk.
    assert!(SpecDir::of(dir).remove("worker-0").unwrap());
    eventually("worker-0 gone", || {
        let out = kubectl(&kc, &["get", "nodes", "-o", "name"])?;
        Ok((out.trim() == "node/master-0" && !root(dir, "worker-0").exists()).then_some(()))
    })
    .await;
    cluster.shutdown().await;
}
