//! End-to-end: `Image/cluster` cannot block the release payload's registry. Without a release
//! image every blocked registry reaches the nodes; once the ControllerConfig names the release,
//! the blocked scope covering its repository is dropped from every worker's `registries.conf`
//! and `policy.json`, the others stay, and a Warning event on `Image/cluster` says so in
//! upstream's words.

use crate::e2e;

use e2e::*;
use serde_json::json;

const RELEASE: &str = "quay.io/openshift-release-dev/ocp-release@sha256:4207ba569ff014931f1b5d125fe3751936a768e119546683c899eb09f3cdceb0";

const BLOCK_QUAY: &str = "apiVersion: config.openshift.io/v1
kind: Image
metadata:
  name: cluster
spec:
  registrySources:
    blockedRegistries:
    - quay.io
    - untrusted.example.com
";

const WARNING: &str = "error adding [\"quay.io\"] to blocked registries, cannot block the repository being used by the payload";

/// The `[[registry]]` entries of a registries.conf marked `blocked = true`, by location, sorted.
fn blocked_scopes(conf: &str) -> Vec<String> {
    let mut out: Vec<String> = conf
        .split("[[registry]]")
        .skip(1)
        .filter(|entry| {
            // Up to the next table of another kind (a mirror's).
            let own = entry
                .split("[[registry.mirror]]")
                .next()
                .unwrap_or_default();
            own.lines().any(|l| l.replace(' ', "") == "blocked=true")
        })
        .filter_map(|entry| {
            entry.lines().find_map(|l| {
                let v = l.trim().strip_prefix("location = \"")?;
                Some(v.trim_end_matches('"').to_owned())
            })
        })
        .collect();
    out.sort();
    out
}

/// Waits until every worker's registries.conf blocks exactly `want`.
fn wait_blocked(c: &Cluster, workers: &[String], want: &[&str]) {
    for w in workers {
        wait_for(
            &format!("{w}'s registries.conf to block {want:?}"),
            240,
            || {
                let conf = c.read_node_file(w, "/etc/containers/registries.conf")?;
                (blocked_scopes(&conf) == want).then_some(())
            },
        );
    }
}

on_both_servers!(the_release_payloads_registry_is_never_blocked);

fn the_release_payloads_registry_is_never_blocked(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let workers = c.workers();

    // No release image: nothing guarded, quay.io blocked as asked.
    c.apply(BLOCK_QUAY);
    wait_blocked(&c, &workers, &["quay.io", "untrusted.example.com"]);

    // The release named: the ControllerConfig change alone re-runs the generator.
    c.patch_controller_config(json!({ "releaseImage": RELEASE }));
    wait_blocked(&c, &workers, &["untrusted.example.com"]);
    for w in &workers {
        let policy: serde_json::Value = serde_json::from_str(
            &c.read_node_file(w, "/etc/containers/policy.json")
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        assert_eq!(
            policy["transports"]["docker"],
            json!({"untrusted.example.com": [{"type": "reject"}]}),
            "{w}: {policy}"
        );
        assert_eq!(
            policy["default"],
            json!([{"type": "insecureAcceptAnything"}])
        );
    }
    let note = wait_for("the Warning event on Image/cluster", 60, || {
        // Image/cluster is cluster-scoped: its events are in mco's namespace.
        let events = c.get_json(&["events.events.k8s.io", "-n", "mco-system"]);
        events["items"].as_array()?.iter().find_map(|e| {
            (e["type"] == "Warning"
                && e["reason"] == "PayloadRegistryNotBlocked"
                && e["regarding"]["kind"] == "Image"
                && e["regarding"]["name"] == "cluster")
                .then(|| e["note"].as_str().unwrap_or_default().to_owned())
        })
    });
    assert_eq!(note, WARNING);
}
