//! The ControllerConfig's CA bundles end to end, with `kubectl` on `mco up`: a kube-apiserver CA
//! rotation lands on a paused pool's nodes without a drain or a reboot, registry CAs come and
//! go, the additional trust bundle reaches the nodes' CA anchors through mco's own `00-worker`
//! without a reboot, the ControllerConfig reports its certificates and conditions as upstream does, the pools
//! report `certExpirys`, and `mco doctor` warns of a CA about to expire and of a machine config
//! server certificate for another host than machines reach.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::e2e::{self, Cluster, Opts, Server, condition, on_both_servers, wait_for};

const CC: &str = "machine-config-controller";
const REGISTRY_DIR: &str = "/etc/docker/certs.d/registry.example.com:5000";
const TRUST_ANCHOR: &str = "/etc/pki/ca-trust/source/anchors/openshift-config-user-ca-bundle.crt";

/// A self-signed CA named `cn` (with `OU=openshift`), valid until midnight UTC of the date
/// `(year, month, day)`, as PEM.
fn ca(cn: &str, (y, m, d): (i32, u8, u8)) -> String {
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationalUnitName, "openshift");
    dn.push(rcgen::DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_after = rcgen::date_time_ymd(y, m, d);
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().pem()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The ControllerConfig once its status reports its current generation.
fn observed_cc(c: &Cluster) -> Value {
    wait_for(
        "the ControllerConfig's status for its generation",
        60,
        || {
            let cc = c.get_json(&["controllerconfig", CC]);
            (cc["status"]["observedGeneration"] == cc["metadata"]["generation"]).then_some(cc)
        },
    )
}

fn certificates(cc: &Value) -> Vec<(String, String)> {
    cc["status"]["controllerCertificates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["bundleFile"].as_str().unwrap_or_default().to_owned(),
                c["subject"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn ca_rotation_lands_on_a_paused_pool_without_a_reboot(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let workers = c.workers();
    let boots: Vec<String> = workers.iter().map(|w| c.boot_id(w)).collect();
    const DESIRED_DRAIN: &str = "machineconfiguration.openshift.io/desiredDrain";
    let drains: Vec<String> = workers
        .iter()
        .map(|w| e2e::annotation(&c.node(w), DESIRED_DRAIN))
        .collect();
    let target = c.pool_target("worker");
    c.set_paused("worker", true);

    let year = |y: i32| (y, 1, 1);
    let first = ca("kube-apiserver-lb-signer", year(2036));
    let registry = ca("registry-ca", year(2035));
    c.patch_controller_config(json!({
            "kubeAPIServerServingCAData": b64(&first),
            "imageRegistryBundleUserData": [{"file": "registry.example.com..5000", "data": b64(&registry)}],
        }),
    );
    for w in &workers {
        wait_for(&format!("{w}: the first CA written"), 60, || {
            let kubelet = c.read_node_file(w, "/etc/kubernetes/kubelet-ca.crt")?;
            let reg = c.read_node_file(w, &format!("{REGISTRY_DIR}/ca.crt"))?;
            (kubelet == first && reg == registry).then_some(())
        });
    }

    // The ControllerConfig reports its certificates and upstream's conditions.
    let cc = observed_cc(&c);
    let generation = cc["metadata"]["generation"].as_i64().unwrap();
    assert_eq!(
        certificates(&cc),
        vec![
            (
                "KubeAPIServerServingCAData".to_owned(),
                "CN=kube-apiserver-lb-signer,OU=openshift".to_owned()
            ),
            (
                "registry.example.com..5000".to_owned(),
                "CN=registry-ca,OU=openshift".to_owned()
            ),
        ],
        "{}",
        cc["status"]
    );
    let cert = &cc["status"]["controllerCertificates"][0];
    assert_eq!(cert["signer"], cert["subject"], "self-signed: {cert}");
    assert_eq!(cert["notAfter"], "2036-01-01T00:00:00Z");
    let completed = condition(&cc, "TemplateControllerCompleted").unwrap();
    assert_eq!(completed["status"], "True", "{}", cc["status"]);
    assert!(
        completed["message"].as_str().unwrap().starts_with(&format!(
            "sync completed towards ({generation}) generation using controller version"
        )),
        "{completed}"
    );
    for (t, s) in [
        ("TemplateControllerRunning", "False"),
        ("TemplateControllerFailing", "False"),
    ] {
        assert_eq!(condition(&cc, t).unwrap()["status"], s, "{}", cc["status"]);
    }

    // Every pool, the paused one too, reports the kube-apiserver CA's expiry.
    for pool in ["worker", "master"] {
        wait_for(&format!("pool {pool}: certExpirys"), 60, || {
            let p = c.pool(pool);
            (p["status"]["certExpirys"]
                == json!([{"bundle": "KubeAPIServerServingCAData",
                    "subject": "CN=kube-apiserver-lb-signer,OU=openshift",
                    "expiry": "2036-01-01T00:00:00Z"}]))
            .then_some(())
        });
    }

    // The rotation: a new CA beside the old one, and the registry CA withdrawn.
    let next = ca("kube-apiserver-lb-signer-next", year(2037));
    let bundle = format!("{next}{first}");
    c.patch_controller_config(
        json!({"kubeAPIServerServingCAData": b64(&bundle), "imageRegistryBundleUserData": null}),
    );
    for w in &workers {
        wait_for(&format!("{w}: the rotated CA written"), 60, || {
            let kubelet = c.read_node_file(w, "/etc/kubernetes/kubelet-ca.crt")?;
            let gone = !c
                .node_root(w)
                .join(REGISTRY_DIR.trim_start_matches('/'))
                .exists();
            (kubelet == bundle && gone).then_some(())
        });
    }
    wait_for("pool worker: both CAs in certExpirys", 60, || {
        let p = c.pool("worker");
        (p["status"]["certExpirys"].as_array()?.len() == 2).then_some(())
    });

    // No reboot, no drain, no new config, and the pool is still paused.
    for ((w, boot), drain) in workers.iter().zip(&boots).zip(&drains) {
        assert_eq!(&c.boot_id(w), boot, "{w} rebooted for a CA rotation");
        let node = c.node(w);
        assert_ne!(node["spec"]["unschedulable"], true, "{w} was cordoned");
        assert_eq!(
            &e2e::annotation(&node, DESIRED_DRAIN),
            drain,
            "{w} was asked to drain"
        );
    }
    let pool = c.pool("worker");
    assert_eq!(pool["spec"]["paused"], true);
    assert_eq!(c.pool_target("worker"), target);

    // The additional trust bundle: mco's own 00-worker writes it, and once the pool is unpaused
    // its new rendered config puts it in every worker's CA anchors, private, without a reboot.
    let proxy_ca = ca("proxy-ca", year(2036));
    c.patch_controller_config(json!({"additionalTrustBundle": b64(&proxy_ca)}));
    c.set_paused("worker", false);
    c.wait_rollout("worker", &target, 180);
    for (w, boot) in workers.iter().zip(&boots) {
        assert_eq!(
            c.read_node_file(w, TRUST_ANCHOR).as_deref(),
            Some(proxy_ca.as_str()),
            "{w}"
        );
        let mode = {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::metadata(c.node_root(w).join(TRUST_ANCHOR.trim_start_matches('/')))
                .unwrap()
                .permissions()
                .mode()
        };
        assert_eq!(mode & 0o777, 0o600, "{w}");
        assert_eq!(&c.boot_id(w), boot, "{w} rebooted for the trust bundle");
    }

    // A bundle that is not PEM: Failing, naming the field; the good bundle is still listed.
    c.patch_controller_config(json!({"additionalTrustBundle": b64("not a certificate")}));
    let cc = wait_for("TemplateControllerFailing=True", 60, || {
        let cc = observed_cc(&c);
        (condition(&cc, "TemplateControllerFailing")?["status"] == "True").then_some(cc)
    });
    let failing = condition(&cc, "TemplateControllerFailing").unwrap();
    let message = failing["message"].as_str().unwrap();
    assert!(
        message.starts_with("failed to syncing towards (")
            && message.ends_with("spec.additionalTrustBundle: no PEM certificate in the bundle"),
        "{message}"
    );
    // The templates refuse it too, in the same words: said once.
    assert_eq!(
        message.matches("spec.additionalTrustBundle").count(),
        1,
        "{message}"
    );
    assert_eq!(
        condition(&cc, "TemplateControllerCompleted").unwrap()["status"],
        "False"
    );
    assert_eq!(certificates(&cc).len(), 2, "{}", cc["status"]);

    // A CA about to expire: mco doctor names it, its bundle and its expiry.
    let soon = jiff::Zoned::now()
        .with_time_zone(jiff::tz::TimeZone::UTC)
        .date()
        .checked_add(jiff::Span::new().days(10))
        .unwrap();
    let expiring = ca(
        "kube-apiserver-short-lived",
        (i32::from(soon.year()), soon.month() as u8, soon.day() as u8),
    );
    c.patch_controller_config(
        json!({"kubeAPIServerServingCAData": b64(&expiring), "additionalTrustBundle": null}),
    );
    wait_for("pool worker: the short-lived CA in certExpirys", 60, || {
        let p = c.pool("worker");
        (p["status"]["certExpirys"][0]["subject"] == "CN=kube-apiserver-short-lived,OU=openshift")
            .then_some(())
    });
    let (_, doc) = c.mco(&["doctor"]);
    assert!(
        doc.contains("CA certificate expires soon")
            && doc.contains(
                "The CA CN=kube-apiserver-short-lived,OU=openshift in bundle KubeAPIServerServingCAData expires at"
            ),
        "mco doctor does not warn of the expiring CA:\n{doc}"
    );

    // The machine config server's certificate, replaced by an administrator's own (no managed
    // label: the controller leaves it) for another host than the one machines reach: mco
    // doctor names the mismatch in Go's words.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["wrong.example.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let theirs = c.dir.join("mcs-secret.json");
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "mco-server-tls", "namespace": "mco-system"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(&cert.pem()), "tls.key": b64(&key.serialize_pem())},
    });
    std::fs::write(&theirs, secret.to_string()).unwrap();
    // mco up's controller made one first.
    wait_for("the controller's mco-server-tls", 60, || {
        c.try_get_json(&["secret", "-n", "mco-system", "mco-server-tls"])
    });
    c.kubectl(&["replace", "-f", theirs.to_str().unwrap()]);
    c.patch_controller_config(
        json!({"infra": {"status": {"apiServerInternalURI": "https://api-int.c.example.com:6443"}}}),
    );
    let doc = wait_for("mco doctor on the server's certificate", 60, || {
        let (_, doc) = c.mco(&["doctor"]);
        doc.contains("machine config server certificate not valid for api-int.c.example.com")
            .then_some(doc)
    });
    assert!(
        doc.contains("x509: certificate is valid for wrong.example.com, not api-int.c.example.com"),
        "{doc}"
    );
}

on_both_servers!(ca_rotation_lands_on_a_paused_pool_without_a_reboot);
