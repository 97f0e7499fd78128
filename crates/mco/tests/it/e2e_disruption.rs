//! End-to-end: the node disruption policy of `MachineConfiguration/cluster`, set with `kubectl`,
//! merged and published by the controller, and acted on by the daemons: a file restarting a
//! service, a unit needing only a daemon-reload, SSH keys needing nothing, and an invalid policy
//! that is reported while the previous one stays in force.

use crate::e2e;

use e2e::*;
use serde_json::Value;

const POLICY: &str = "apiVersion: operator.openshift.io/v1
kind: MachineConfiguration
metadata:
  name: cluster
spec:
  managementState: Managed
  nodeDisruptionPolicy:
    files:
    - path: /etc/chrony.conf
      actions:
      - type: Restart
        restart:
          serviceName: chronyd.service
    units:
    - name: mco-e2e.service
      actions:
      - type: DaemonReload
    sshkey:
      actions:
      - type: None
";

const UNIT_MC: &str = "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 99-worker-e2e-unit
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  config:
    ignition:
      version: 3.2.0
    systemd:
      units:
      - name: mco-e2e.service
        contents: \"[Unit]\\nDescription=e2e\\n[Service]\\nExecStart=/bin/true\\n\"
";

fn machine_configuration(c: &Cluster) -> Option<Value> {
    c.try_get_json(&["machineconfigurations.operator.openshift.io", "cluster"])
}

/// Waits until the controller has observed the object's generation; returns the object.
fn wait_observed(c: &Cluster) -> Value {
    wait_for("MachineConfiguration/cluster observed", 60, || {
        let o = machine_configuration(c)?;
        let observed = o["status"]["observedGeneration"].as_i64()?;
        (Some(observed) == o["metadata"]["generation"].as_i64()).then_some(o)
    })
}

fn published_paths(o: &Value) -> Vec<String> {
    o["status"]["nodeDisruptionPolicyStatus"]["clusterPolicies"]["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Node events with this reason whose message mentions `needle`, per node name: in mco's
/// namespace, as upstream's are in its own.
fn node_events(c: &Cluster, reason: &str, needle: &str) -> Vec<String> {
    let list = c.get_json(&["events", "-n", "mco-system"]);
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e["reason"] == reason
                && e["involvedObject"]["kind"] == "Node"
                && e["message"].as_str().is_some_and(|m| m.contains(needle))
        })
        .filter_map(|e| e["involvedObject"]["name"].as_str().map(str::to_owned))
        .collect()
}

fn assert_rebootless(c: &Cluster, workers: &[String], boots: &[String], prepared: &str) {
    for (w, b) in workers.iter().zip(boots) {
        assert_eq!(&c.boot_id(w), b, "{w} rebooted");
        let mcn = c.mcn(w);
        let msg = condition_message(&mcn, "UpdatePrepared");
        assert!(msg.contains(prepared), "{w}: UpdatePrepared: {msg}");
    }
}

#[test]
fn node_disruption_policies_replace_reboots_and_are_recorded() {
    let c = Cluster::up(Opts::default());
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();

    // The controller publishes upstream's defaults before anyone writes a policy.
    let defaults = wait_observed(&c);
    assert!(
        published_paths(&defaults).contains(&"/etc/containers/registries.conf".to_owned()),
        "{defaults}"
    );

    // A pool status field upstream's operator writes and mco does not: it must survive every
    // status write of the rollouts below.
    let upstream_status = serde_json::json!({"status": {
        "certExpirys": [{"bundle": "KubeAPIServerServingCAData", "subject": "CN=kube-apiserver-lb-signer",
                         "expiry": "2036-01-01T00:00:00Z"}]
    }});
    c.kubectl(&[
        "patch",
        "mcp",
        "worker",
        "--subresource=status",
        "--type=merge",
        "-p",
        &upstream_status.to_string(),
    ]);

    c.apply(POLICY);
    let o = wait_observed(&c);
    assert!(
        published_paths(&o).contains(&"/etc/chrony.conf".to_owned()),
        "{o}"
    );
    assert_eq!(
        condition_status(&o, "NodeDisruptionPolicyDegraded"),
        "False"
    );

    // A file policy: chronyd restarted, no drain, no reboot.
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-chrony",
        "worker",
        "/etc/chrony.conf",
        "server time.example.com iburst\n",
    ));
    let r1 = c.wait_rollout("worker", &old, 120);
    assert_rebootless(
        &c,
        &workers,
        &boots,
        "Post Cfg Actions: [Restart chronyd.service] Drain Required: false",
    );
    for w in &workers {
        let log = c
            .read_node_file(w, "/var/log/mco-sim/systemd.log")
            .unwrap_or_default();
        assert!(
            log.lines().any(|l| l.contains("restart chronyd.service")),
            "{w}: no chronyd restart recorded:\n{log}"
        );
        let msg = condition_message(&c.mcn(w), "UpdatePostActionComplete");
        assert!(
            msg.contains("Node has restarted service chronyd.service"),
            "{w}: {msg}"
        );
    }
    let restarted = wait_for("ServiceRestart events", 30, || {
        let nodes = node_events(&c, "ServiceRestart", "chronyd.service");
        workers.iter().all(|w| nodes.contains(w)).then_some(nodes)
    });
    assert!(!restarted.is_empty());

    // A unit policy: a daemon-reload, no reboot.
    c.apply(UNIT_MC);
    let r2 = c.wait_rollout("worker", &r1, 120);
    assert_rebootless(
        &c,
        &workers,
        &boots,
        "Post Cfg Actions: [DaemonReload] Drain Required: false",
    );
    for w in &workers {
        let msg = condition_message(&c.mcn(w), "UpdatePostActionComplete");
        assert!(
            msg.contains("Node has reloaded service daemon-reload"),
            "{w}: {msg}"
        );
    }
    wait_for("daemon-reload events", 30, || {
        let nodes = node_events(&c, "ServiceReload", "daemon-reload");
        workers.iter().all(|w| nodes.contains(w)).then_some(())
    });

    // An SSH key policy of None: nothing to do, no reboot.
    c.apply(&example("99-worker-ssh.yaml"));
    c.wait_rollout("worker", &r2, 120);
    assert_rebootless(
        &c,
        &workers,
        &boots,
        "Post Cfg Actions: [None] Drain Required: false",
    );
    for w in &workers {
        let mcn = c.mcn(w);
        let post = condition(&mcn, "UpdatePostActionComplete").cloned();
        assert_eq!(
            post.as_ref().and_then(|p| p["reason"].as_str()),
            Some("None"),
            "{w}: {post:?}"
        );
    }

    // Three rollouts later, upstream's field is still there, next to mco's.
    let pool = c.pool("worker");
    assert_eq!(
        pool["status"]["certExpirys"], upstream_status["status"]["certExpirys"],
        "pool status certExpirys lost: {}",
        pool["status"]
    );
    assert_eq!(
        pool["status"]["updatedMachineCount"],
        pool["status"]["machineCount"]
    );
}

#[test]
fn an_invalid_policy_is_reported_and_the_previous_one_stays_in_force() {
    let c = Cluster::up(Opts::default());
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    wait_observed(&c);
    c.apply(POLICY);
    let valid = wait_observed(&c);
    let published = valid["status"]["nodeDisruptionPolicyStatus"].clone();

    let cases = [
        (
            r#"{"spec":{"nodeDisruptionPolicy":{"units":[{"name":"mco-e2e.service","actions":[{"type":"Restart"}]}]}}}"#,
            "spec.nodeDisruptionPolicy.units[0].actions[0].restart: restart is required when type is Restart",
        ),
        (
            r#"{"spec":{"nodeDisruptionPolicy":{"files":[{"path":"etc/chrony.conf","actions":[{"type":"None"}]}]}}}"#,
            "spec.nodeDisruptionPolicy.files[0].path: Invalid value: \"etc/chrony.conf\": path must be absolute",
        ),
        (
            r#"{"spec":{"nodeDisruptionPolicy":{"files":[{"path":"/etc/chrony.conf","actions":[{"type":"Explode"}]}]}}}"#,
            "spec.nodeDisruptionPolicy.files[0].actions[0].type: Unsupported value: \"Explode\"",
        ),
    ];
    for (patch, want) in cases {
        c.kubectl(&[
            "patch",
            "machineconfigurations.operator.openshift.io",
            "cluster",
            "--type=merge",
            "-p",
            patch,
        ]);
        let o = wait_for(&format!("condition naming {want}"), 60, || {
            let o = wait_observed(&c);
            condition_message(&o, "NodeDisruptionPolicyDegraded")
                .contains(want)
                .then_some(o)
        });
        assert_eq!(condition_status(&o, "NodeDisruptionPolicyDegraded"), "True");
        assert_eq!(
            o["status"]["nodeDisruptionPolicyStatus"], published,
            "the published policy changed under an invalid spec"
        );
    }

    // The nodes still act on the last valid policy: chronyd restarted, no reboot.
    let old = c.pool_target("worker");
    c.apply(&file_mc(
        "99-worker-chrony",
        "worker",
        "/etc/chrony.conf",
        "server time.example.com iburst\n",
    ));
    c.wait_rollout("worker", &old, 120);
    assert_rebootless(
        &c,
        &workers,
        &boots,
        "Post Cfg Actions: [Restart chronyd.service] Drain Required: false",
    );
}

/// A disks change is refused, then let through by the override; every worker then reports
/// in its MachineConfigNode what it will never get (`status.irreconcilableChanges`), in the
/// shape of upstream's `v1`.
fn a_storage_override_lets_a_disks_change_through(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    wait_observed(&c);
    let old = c.pool_target("worker");
    c.apply(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 99-worker-disks
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  config:
    ignition:
      version: 3.2.0
    storage:
      disks:
      - device: /dev/vdb
        wipeTable: true
",
    );
    // Without the override the change is refused before any node sees it, in upstream's words.
    let msg = wait_for("RenderDegraded", 60, || {
        let p = c.try_get_json(&["mcp", "worker"])?;
        (condition_status(&p, "RenderDegraded") == "True")
            .then(|| condition_message(&p, "RenderDegraded"))
    });
    assert!(
        msg.contains("ignition disks section contains changes"),
        "{msg}"
    );
    assert_eq!(
        c.pool_target("worker"),
        old,
        "a refused change was targeted"
    );

    c.kubectl(&[
        "patch",
        "machineconfigurations.operator.openshift.io",
        "cluster",
        "--type=merge",
        "-p",
        r#"{"spec":{"irreconcilableValidationOverrides":{"storage":["Disks"]}}}"#,
    ]);
    // The controller retries the render at its resync; the daemons accept the change too.
    c.wait_rollout("worker", &old, 150);
    assert_ne!(
        condition_status(&c.pool("worker"), "RenderDegraded"),
        "True"
    );
    let expected = serde_json::json!([{
        "fieldPath": "spec.config.storage.disks",
        "diff": "+ [{\"device\":\"/dev/vdb\",\"wipeTable\":true}]\n",
    }]);
    for w in c.workers() {
        // Updated=True carries it, a moment after the node's Done.
        let mcn = wait_for("irreconcilableChanges", 30, || {
            let mcn = c.try_get_json(&["machineconfignodes", &w])?;
            (mcn["status"]["irreconcilableChanges"] == expected).then_some(mcn)
        });
        assert_ne!(condition_status(&mcn, "NodeDegraded"), "True", "{w}: {mcn}");
    }
    // A master was provisioned with what its pool still has: nothing to report.
    let mcn = c.get_json(&["machineconfignodes", "master-0"]);
    assert_eq!(condition_status(&mcn, "Updated"), "True", "{mcn}");
    assert!(
        mcn["status"].get("irreconcilableChanges").is_none(),
        "{mcn}"
    );
    // The nodes to replace, as docs/deploy.md lists them.
    let table = c.kubectl(&[
        "get",
        "machineconfignodes",
        "-o",
        "custom-columns=NODE:.metadata.name,IRRECONCILABLE:.status.irreconcilableChanges[*].fieldPath",
    ]);
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let want = if cols[0].starts_with("worker-") {
            "spec.config.storage.disks"
        } else {
            "<none>"
        };
        assert_eq!(cols[1], want, "{table}");
    }

    // An override naming something else is refused by the schema, naming the field.
    let out = c
        .kubectl_try(&[
            "patch",
            "machineconfigurations.operator.openshift.io",
            "cluster",
            "--type=merge",
            "-p",
            r#"{"spec":{"irreconcilableValidationOverrides":{"storage":["Partitions"]}}}"#,
        ])
        .unwrap_err();
    assert!(
        out.contains("spec.irreconcilableValidationOverrides.storage[0]"),
        "{out}"
    );

    // The change withdrawn: the workers' target is what they were provisioned with again, and
    // each one's report goes (a JSON patch removing the field).
    let with_disks = c.pool_target("worker");
    c.kubectl(&["delete", "machineconfig", "99-worker-disks"]);
    c.wait_rollout("worker", &with_disks, 150);
    for w in c.workers() {
        wait_for("irreconcilableChanges removed", 30, || {
            let mcn = c.try_get_json(&["machineconfignodes", &w])?;
            (condition_status(&mcn, "Updated") == "True"
                && mcn["status"].get("irreconcilableChanges").is_none())
            .then_some(())
        });
    }
}

on_both_servers!(a_storage_override_lets_a_disks_change_through);
