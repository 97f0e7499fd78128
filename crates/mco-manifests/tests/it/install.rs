//! The install manifests: committed copy fresh, every object well-formed, permissions exactly the
//! intended ones (widening a role must fail here first), workloads as documented.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding};
use mco_manifests::{Manifest, Options, Part};
use pretty_assertions::assert_eq;

const REGENERATE: &str = "cargo run -p mco -- manifests --out-dir manifests/install";

fn install_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../manifests/install")
}

fn all(opts: &Options) -> Vec<Manifest> {
    mco_manifests::generate(opts, &Part::ALL).unwrap()
}

fn find<'a>(ms: &'a [Manifest], kind: &str, name: &str) -> &'a Manifest {
    ms.iter()
        .find(|m| m.kind() == Some(kind) && m.name() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn typed<T: serde::de::DeserializeOwned>(m: &Manifest) -> T {
    serde_json::from_value(m.object.clone()).unwrap()
}

#[test]
fn committed_install_manifests_are_fresh() {
    let files = mco_manifests::files(&Options::default()).unwrap();
    assert_eq!(files.len(), Part::ALL.len());
    for (part, generated) in files {
        let path = install_dir().join(part.file_name());
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; generate with: {REGENERATE}", path.display()));
        assert!(
            committed == generated,
            "{} is stale; regenerate with: {REGENERATE}",
            path.display()
        );
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(install_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let expected: Vec<String> = Part::ALL.iter().map(|p| p.file_name()).collect();
    assert_eq!(
        on_disk, expected,
        "stray files; regenerate with: {REGENERATE}"
    );
}

#[test]
fn every_object_has_api_version_kind_and_name_and_is_unique() {
    for opts in [
        Options::default(),
        Options {
            openshift: true,
            ..Default::default()
        },
    ] {
        let ms = all(&opts);
        let mut seen = BTreeSet::new();
        for m in &ms {
            let id = (
                m.api_version().map(str::to_string),
                m.kind().map(str::to_string),
                m.namespace().map(str::to_string),
                m.name().map(str::to_string),
            );
            assert!(
                id.0.is_some() && id.1.is_some() && id.3.is_some(),
                "incomplete object in {}: {}",
                m.part,
                m.object
            );
            assert!(seen.insert(id.clone()), "duplicate {id:?}");
        }
        // Namespaced objects live in the install namespace (nothing in `default`, where no
        // event is recorded) except, on OpenShift, the pull secret's Role and binding in
        // `openshift-config` and the controller's Roles and bindings where it keeps upstream's
        // certificates and the Machine API's user-data Secrets.
        for m in ms.iter().filter(|m| m.namespace().is_some()) {
            let ns = m.namespace().unwrap();
            let pull_secret = opts.openshift
                && ns == "openshift-config"
                && m.name() == Some("mco-controller-pull-secret");
            let kept = opts.openshift
                && ["openshift-machine-config-operator", "openshift-machine-api"].contains(&ns)
                && [Some("Role"), Some("RoleBinding")].contains(&m.kind())
                && [
                    Some("mco-controller-server-certs"),
                    Some("mco-controller-user-data"),
                    Some("mco-events"),
                ]
                .contains(&m.name());
            let ca_bundles = opts.openshift
                && [
                    "openshift-config-managed",
                    "openshift-config",
                    "openshift-machine-config-operator",
                ]
                .contains(&ns)
                && [Some("Role"), Some("RoleBinding")].contains(&m.kind())
                && m.name() == Some("mco-controller-ca-bundles");
            assert!(
                ns == opts.namespace || pull_secret || kept || ca_bundles,
                "{:?} {:?} in {ns}",
                m.kind(),
                m.name()
            );
        }
    }
}

#[test]
fn the_stream_lists_every_kind_in_apply_order() {
    let kinds: Vec<String> = all(&Options::default())
        .iter()
        .map(|m| m.kind().unwrap().to_string())
        .collect();
    let mut order: Vec<&str> = vec![];
    for k in &kinds {
        if order.last() != Some(&k.as_str()) {
            order.push(k);
        }
    }
    assert_eq!(
        order,
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "Secret",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Deployment",
            "PodDisruptionBudget",
            "DaemonSet",
            "MachineConfigPool",
            "ControllerConfig",
            "MachineConfiguration",
            "DaemonSet",
        ]
    );
    let yaml = mco_manifests::to_yaml(&all(&Options::default())).unwrap();
    assert_eq!(yaml.matches("---\n").count(), kinds.len());
}

/// `group resource verb [names]`, one entry per granted combination.
fn grants(rules: &[PolicyRule]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for r in rules {
        assert!(r.non_resource_urls.is_none());
        let names = r
            .resource_names
            .as_ref()
            .map(|n| format!(" {}", n.join(",")))
            .unwrap_or_default();
        for g in r.api_groups.as_deref().unwrap() {
            for res in r.resources.as_deref().unwrap() {
                for v in &r.verbs {
                    assert_ne!(v, "*", "wildcard verb");
                    assert_ne!(res, "*", "wildcard resource");
                    let g = if g.is_empty() { "core" } else { g };
                    out.insert(format!("{g} {res} {v}{names}"));
                }
            }
        }
    }
    out
}

fn expand(lines: &[&str]) -> BTreeSet<String> {
    // "group resource verb,verb [names]" -> one entry per verb
    let mut out = BTreeSet::new();
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        let names = f.get(3).map(|n| format!(" {n}")).unwrap_or_default();
        for v in f[2].split(',') {
            out.insert(format!("{} {} {v}{names}", f[0], f[1]));
        }
    }
    out
}

const MC: &str = "machineconfiguration.openshift.io";
const OP: &str = "operator.openshift.io";

fn cluster_role_grants(opts: &Options, name: &str) -> BTreeSet<String> {
    let role: ClusterRole = typed(find(&all(opts), "ClusterRole", name));
    grants(role.rules.as_deref().unwrap())
}

#[test]
fn daemon_permissions_are_exactly_these() {
    let expected = [
        "core nodes get,list,watch,patch".to_string(),
        format!("{MC} machineconfigs get,list,watch"),
        format!("{MC} machineconfigpools get,list,watch"),
        format!("{MC} controllerconfigs get,list,watch"),
        format!("{MC} pinnedimagesets get,list,watch"),
        format!("{OP} machineconfigurations get,list,watch"),
        format!("{MC} machineconfignodes get,list,watch,create,update,patch"),
        format!("{MC} machineconfignodes/status get,list,watch,create,update,patch"),
    ];
    let lines: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(
        cluster_role_grants(&Options::default(), "mco-daemon"),
        expand(&lines)
    );

    let mut with_scc = expand(&lines);
    with_scc.extend(expand(&[
        "security.openshift.io securitycontextconstraints use privileged",
    ]));
    let openshift = Options {
        openshift: true,
        ..Default::default()
    };
    assert_eq!(cluster_role_grants(&openshift, "mco-daemon"), with_scc);
}

#[test]
fn controller_permissions_are_exactly_these() {
    let expected = [
        "core nodes get,list,watch,patch".to_string(),
        "core pods list".to_string(),
        "core pods/eviction create".to_string(),
        "policy poddisruptionbudgets list".to_string(),
        "apps daemonsets get".to_string(),
        format!("{MC} machineconfigs get,list,watch,create,update,patch,delete"),
        format!("{MC} machineconfigpools get,list,watch,update,patch"),
        format!("{MC} machineconfigpools/status get,update,patch"),
        format!("{MC} pinnedimagesets get,list,watch"),
        format!("{MC} machineosconfigs get,list,watch"),
        format!("{MC} machineosbuilds get,list,watch"),
        format!("{MC} machineconfignodes get,list,watch,create,update,patch,delete"),
        format!("{MC} machineconfignodes/status get,update,patch"),
        format!("{MC} controllerconfigs get,list,watch"),
        format!("{MC} controllerconfigs/status get,update,patch"),
        format!("{OP} machineconfigurations get,list,watch,create"),
        format!("{OP} machineconfigurations/status get,update,patch"),
        format!("{MC} kubeletconfigs get,list,watch,update,patch"),
        format!("{MC} containerruntimeconfigs get,list,watch,update,patch"),
        format!("{MC} kubeletconfigs/status get,update,patch"),
        format!("{MC} containerruntimeconfigs/status get,update,patch"),
        "config.openshift.io images get,list,watch".to_string(),
        "config.openshift.io imagedigestmirrorsets get,list,watch".to_string(),
        "config.openshift.io imagetagmirrorsets get,list,watch".to_string(),
        "config.openshift.io apiservers get,list,watch".to_string(),
        "config.openshift.io nodes get,list,watch".to_string(),
        "config.openshift.io featuregates get,list,watch".to_string(),
        "config.openshift.io clusterversions get,list,watch".to_string(),
        "config.openshift.io clusterimagepolicies get,list,watch".to_string(),
        "config.openshift.io imagepolicies get,list,watch".to_string(),
        "config.openshift.io imagepolicies/status patch".to_string(),
        format!("{OP} imagecontentsourcepolicies get,list,watch"),
        "rollouts.mco.dev rolloutpolicies get,list,watch".to_string(),
        "rollouts.mco.dev rolloutpolicies/status get,update,patch".to_string(),
    ];
    let lines: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(
        cluster_role_grants(&Options::default(), "mco-controller"),
        expand(&lines)
    );
    // On OpenShift, the CA bundles and proxy of the one ControllerConfig, merge-patched, and
    // the cluster's proxy they follow, read by name; and the machine-config ClusterOperator,
    // read and its status written by name, never created.
    let mut openshift = expand(&lines);
    openshift.extend(expand(&[
        &format!("{MC} controllerconfigs patch machine-config-controller"),
        "config.openshift.io proxies get,list,watch cluster",
        "config.openshift.io clusteroperators get,list,watch machine-config",
        "config.openshift.io clusteroperators/status update,patch machine-config",
    ]));
    let opts = Options {
        openshift: true,
        ..Default::default()
    };
    assert_eq!(cluster_role_grants(&opts, "mco-controller"), openshift);

    let ms = all(&Options::default());
    let lease: Role = typed(find(&ms, "Role", "mco-controller-leader-election"));
    assert_eq!(lease.metadata.namespace.as_deref(), Some("mco-system"));
    assert_eq!(
        grants(lease.rules.as_deref().unwrap()),
        expand(&[
            "coordination.k8s.io leases create",
            "coordination.k8s.io leases get,update mco-controller",
        ])
    );
}

/// The metrics ports review their callers through `system:auth-delegator`, bound to the
/// controller and the daemon only; reading them is `mco-metrics-reader`, bound to nobody.
#[test]
fn metrics_are_reviewed_by_the_two_workloads_and_read_with_one_role() {
    let ms = all(&Options {
        namespace: "ops".to_string(),
        ..Default::default()
    });
    let b = find(&ms, "ClusterRoleBinding", "mco-auth-delegator");
    assert_eq!(
        b.object["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"})
    );
    assert_eq!(
        b.object["subjects"],
        serde_json::json!([
            {"kind": "ServiceAccount", "name": "mco-controller", "namespace": "ops"},
            {"kind": "ServiceAccount", "name": "mco-daemon", "namespace": "ops"},
        ])
    );
    let reader: ClusterRole = typed(find(&ms, "ClusterRole", "mco-metrics-reader"));
    assert_eq!(
        serde_json::to_value(reader.rules.unwrap()).unwrap(),
        serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let bound: Vec<&Manifest> = ms
        .iter()
        .filter(|m| m.object["roleRef"]["name"] == "mco-metrics-reader")
        .collect();
    assert!(bound.is_empty(), "mco binds the reader role to nobody");
}

/// Both record the Events about Nodes and pools in the install namespace, as upstream records
/// them in its own: the events role is bound there and nowhere else, `default` included.
#[test]
fn events_are_granted_only_in_the_install_namespace() {
    assert_eq!(
        cluster_role_grants(&Options::default(), "mco-events"),
        expand(&[
            "core events create,patch",
            "events.k8s.io events create,patch"
        ])
    );
    for ns in ["mco-system", "ops"] {
        let opts = Options {
            namespace: ns.to_string(),
            ..Options::default()
        };
        let bindings: Vec<RoleBinding> = all(&opts)
            .iter()
            .filter(|m| m.kind() == Some("RoleBinding") && m.name() == Some("mco-events"))
            .map(typed)
            .collect();
        let namespaces: Vec<&str> = bindings
            .iter()
            .map(|b| b.metadata.namespace.as_deref().unwrap())
            .collect();
        assert_eq!(namespaces, [ns]);
        for b in &bindings {
            assert_eq!(b.role_ref.kind, "ClusterRole");
            let subjects: Vec<String> = b
                .subjects
                .as_deref()
                .unwrap()
                .iter()
                .map(|s| format!("{}/{}", s.namespace.as_deref().unwrap(), s.name))
                .collect();
            assert_eq!(
                subjects,
                [format!("{ns}/mco-controller"), format!("{ns}/mco-daemon")]
            );
        }
    }
}

/// The Secrets any role grants: the pull secret, to the controller, by name, in the install
/// namespace and, on OpenShift, in `openshift-config`; the machine config server's CA and
/// serving certificate, by name (below); and, on OpenShift, the Machine API's Secrets (below).
#[test]
fn only_the_controller_may_read_a_secret_and_only_the_pull_secret() {
    for (opts, namespaces) in [
        (Options::default(), vec!["mco-system"]),
        (
            Options {
                openshift: true,
                ..Default::default()
            },
            vec!["mco-system", "openshift-config"],
        ),
    ] {
        let ms = all(&opts);
        let roles: Vec<Role> = ms
            .iter()
            .filter(|m| m.kind() == Some("Role") && m.name() == Some("mco-controller-pull-secret"))
            .map(typed)
            .collect();
        let bindings: Vec<RoleBinding> = ms
            .iter()
            .filter(|m| {
                m.kind() == Some("RoleBinding") && m.name() == Some("mco-controller-pull-secret")
            })
            .map(typed)
            .collect();
        for (objs, kind) in [
            (
                roles
                    .iter()
                    .map(|r| r.metadata.namespace.as_deref().unwrap())
                    .collect::<Vec<_>>(),
                "Role",
            ),
            (
                bindings
                    .iter()
                    .map(|b| b.metadata.namespace.as_deref().unwrap())
                    .collect(),
                "RoleBinding",
            ),
        ] {
            assert_eq!(objs, namespaces, "{kind}");
        }
        for r in &roles {
            assert_eq!(
                grants(r.rules.as_deref().unwrap()),
                expand(&["core secrets get,list,watch pull-secret"])
            );
        }
        for b in &bindings {
            assert_eq!(b.role_ref.name, "mco-controller-pull-secret");
            let subjects = b.subjects.as_deref().unwrap();
            assert_eq!(subjects.len(), 1);
            assert_eq!(subjects[0].name, "mco-controller");
        }
        // Nothing else mentions Secrets.
        let others: Vec<Manifest> = mco_manifests::generate(&opts, &[Part::Rbac])
            .unwrap()
            .into_iter()
            .filter(|m| {
                m.name() != Some("mco-controller-pull-secret")
                    && m.name() != Some("mco-controller-server-certs")
                    && m.name() != Some("mco-controller-user-data")
            })
            .collect();
        let yaml = mco_manifests::to_yaml(&others).unwrap();
        assert!(!yaml.contains("secrets"), "{yaml}");
    }
}

fn controller_args(opts: &Options) -> Vec<String> {
    let d: k8s_openapi::api::apps::v1::Deployment = all(opts)
        .iter()
        .filter(|m| m.kind() == Some("Deployment"))
        .map(typed)
        .next()
        .unwrap();
    d.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap()
}

fn roles_named(opts: &Options, name: &str) -> Vec<Role> {
    all(opts)
        .iter()
        .filter(|m| m.kind() == Some("Role") && m.name() == Some(name))
        .map(typed)
        .collect()
}

/// The namespaces of the RoleBindings named `name`, each binding `role` to these subjects only.
fn bindings_named(opts: &Options, name: &str, role: &str, subjects: &[&str]) -> Vec<String> {
    let bindings: Vec<RoleBinding> = all(opts)
        .iter()
        .filter(|m| m.kind() == Some("RoleBinding") && m.name() == Some(name))
        .map(typed)
        .collect();
    for b in &bindings {
        assert_eq!(b.role_ref.name, role);
        let got: Vec<&str> = b
            .subjects
            .as_deref()
            .unwrap()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(got, subjects, "{:?}", b.metadata.namespace);
    }
    bindings
        .iter()
        .map(|b| b.metadata.namespace.clone().unwrap())
        .collect()
}

/// The machine config server's certificates: the controller may create Secrets and ConfigMaps
/// where it keeps them (RBAC cannot name what is created) and read and rewrite only the CA and
/// the serving certificate, by name: mco's in the install namespace, or, on OpenShift,
/// upstream's in `openshift-machine-config-operator`. The Deployment is told so.
#[test]
fn the_controller_keeps_the_servers_certificates_by_name() {
    let openshift = Options {
        openshift: true,
        ..Default::default()
    };
    for (opts, ns, serving) in [
        (Options::default(), "mco-system", "mco-server-tls"),
        (
            openshift,
            "openshift-machine-config-operator",
            "machine-config-server-tls",
        ),
    ] {
        let roles = roles_named(&opts, "mco-controller-server-certs");
        assert_eq!(roles.len(), 1);
        assert_eq!(roles[0].metadata.namespace.as_deref(), Some(ns));
        assert_eq!(
            grants(roles[0].rules.as_deref().unwrap()),
            expand(&[
                "core secrets create",
                "core configmaps create",
                &format!("core secrets get,list,watch,update machine-config-server-ca,{serving}"),
                "core configmaps get,list,watch,update machine-config-server-ca",
            ])
        );
        assert_eq!(
            bindings_named(
                &opts,
                "mco-controller-server-certs",
                "mco-controller-server-certs",
                &["mco-controller"]
            ),
            [ns]
        );
        let a = controller_args(&opts);
        assert!(
            a.contains(&format!("--server-certs-namespace={ns}")),
            "{a:?}"
        );
        assert!(
            a.contains(&format!("--server-tls-secret={serving}")),
            "{a:?}"
        );
    }
}

/// On OpenShift the controller keeps the Machine API's user-data Secrets pointing at the
/// bundle, as upstream's cert rotation controller does: it may watch and rewrite the Secrets of
/// `openshift-machine-api` (which are user-data Secrets is told by their content) and record
/// Events in both namespaces. Without `--openshift`,
/// none of it.
#[test]
fn on_openshift_the_controller_keeps_the_machine_apis_user_data() {
    let openshift = Options {
        openshift: true,
        ..Default::default()
    };
    let a = controller_args(&openshift);
    assert!(
        a.contains(&"--user-data-namespace=openshift-machine-api".to_string()),
        "{a:?}"
    );
    let roles = roles_named(&openshift, "mco-controller-user-data");
    let by_ns: Vec<(String, BTreeSet<String>)> = roles
        .iter()
        .map(|r| {
            (
                r.metadata.namespace.clone().unwrap(),
                grants(r.rules.as_deref().unwrap()),
            )
        })
        .collect();
    // The bundle's watch is granted with the certificates' Role.
    assert_eq!(
        by_ns,
        [(
            "openshift-machine-api".to_string(),
            expand(&["core secrets get,list,watch,update"])
        )]
    );
    assert_eq!(
        bindings_named(
            &openshift,
            "mco-controller-user-data",
            "mco-controller-user-data",
            &["mco-controller"]
        ),
        ["openshift-machine-api"]
    );
    // Events about the objects kept there, recorded there: the controller's alone.
    let events: Vec<RoleBinding> = all(&openshift)
        .iter()
        .filter(|m| m.kind() == Some("RoleBinding") && m.name() == Some("mco-events"))
        .map(typed)
        .filter(|b: &RoleBinding| {
            b.metadata
                .namespace
                .as_deref()
                .unwrap()
                .starts_with("openshift-")
        })
        .collect();
    let ns: Vec<&str> = events
        .iter()
        .map(|b| b.metadata.namespace.as_deref().unwrap())
        .collect();
    assert_eq!(
        ns,
        ["openshift-machine-config-operator", "openshift-machine-api"]
    );
    for b in &events {
        assert_eq!(b.role_ref.kind, "ClusterRole");
        let subjects: Vec<&str> = b
            .subjects
            .as_deref()
            .unwrap()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(subjects, ["mco-controller"]);
    }

    let plain = Options::default();
    assert!(
        !controller_args(&plain)
            .iter()
            .any(|a| a.starts_with("--user-data-namespace"))
    );
    assert!(
        !all(&plain)
            .iter()
            .any(|m| m.name() == Some("mco-controller-user-data"))
    );
}

/// On OpenShift the controller keeps the ControllerConfig's CA bundles and OS images in step
/// with the cluster's, as upstream's operator (scaled to 0) did: it reads the two published
/// bundles by name in `openshift-config-managed`, the ConfigMaps of `openshift-config` (the
/// Image config names one of the administrator's choice) and the release's OS images and other
/// images (the pause image) by name in `openshift-machine-config-operator`, and nothing of it
/// without `--openshift`.
#[test]
fn on_openshift_the_controller_syncs_the_controller_configs_ca_bundles() {
    let openshift = Options {
        openshift: true,
        ..Default::default()
    };
    let a = controller_args(&openshift);
    assert!(a.contains(&"--sync-controller-config".to_string()), "{a:?}");
    let roles = roles_named(&openshift, "mco-controller-ca-bundles");
    let by_ns: Vec<(String, BTreeSet<String>)> = roles
        .iter()
        .map(|r| {
            (
                r.metadata.namespace.clone().unwrap(),
                grants(r.rules.as_deref().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        by_ns,
        [
            (
                "openshift-config-managed".to_string(),
                expand(&[
                    "core configmaps get,list,watch kube-apiserver-client-ca,image-registry-ca"
                ])
            ),
            (
                "openshift-config".to_string(),
                expand(&["core configmaps get,list,watch"])
            ),
            (
                "openshift-machine-config-operator".to_string(),
                expand(&[
                    "core configmaps get,list,watch machine-config-osimageurl,machine-config-operator-images"
                ])
            ),
        ]
    );
    assert_eq!(
        bindings_named(
            &openshift,
            "mco-controller-ca-bundles",
            "mco-controller-ca-bundles",
            &["mco-controller"]
        ),
        [
            "openshift-config-managed",
            "openshift-config",
            "openshift-machine-config-operator"
        ]
    );

    let plain = Options::default();
    assert!(
        !controller_args(&plain)
            .iter()
            .any(|a| a == "--sync-controller-config")
    );
    assert!(
        !all(&plain)
            .iter()
            .any(|m| m.name() == Some("mco-controller-ca-bundles"))
    );
}

/// With `--apiserver-url`, the default ControllerConfig records it where upstream's operator
/// copies the Infrastructure's, so the server's certificate is for its host.
#[test]
fn the_default_controller_config_records_the_api_int_url() {
    let opts = Options {
        apiserver_url: Some("https://api-int.c.example.com:6443".into()),
        ..Default::default()
    };
    let cc = mco_manifests::generate(&opts, &[Part::Defaults])
        .unwrap()
        .into_iter()
        .find(|m| m.kind() == Some("ControllerConfig"))
        .unwrap();
    assert_eq!(
        cc.object["spec"]["infra"]["status"]["apiServerInternalURI"],
        "https://api-int.c.example.com:6443"
    );
    let plain = mco_manifests::generate(&Options::default(), &[Part::Defaults])
        .unwrap()
        .into_iter()
        .find(|m| m.kind() == Some("ControllerConfig"))
        .unwrap();
    assert!(plain.object["spec"].get("infra").is_none());
}

#[test]
fn no_role_uses_wildcards_or_escalates() {
    let yaml = mco_manifests::to_yaml(
        &mco_manifests::generate(
            &Options {
                openshift: true,
                ..Default::default()
            },
            &[Part::Rbac],
        )
        .unwrap(),
    )
    .unwrap();
    assert!(!yaml.contains("'*'"), "{yaml}");
    assert!(!yaml.contains("escalate") && !yaml.contains("bind") && !yaml.contains("impersonate"));
}

#[test]
fn bindings_tie_each_service_account_to_its_own_role() {
    let opts = Options {
        namespace: "ops".to_string(),
        ..Default::default()
    };
    let ms = all(&opts);
    for name in ["mco-controller", "mco-daemon"] {
        let b = find(&ms, "ClusterRoleBinding", name);
        assert_eq!(b.object["roleRef"]["name"], name);
        assert_eq!(b.object["roleRef"]["kind"], "ClusterRole");
        assert_eq!(
            b.object["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": name, "namespace": "ops"}])
        );
        assert_eq!(find(&ms, "ServiceAccount", name).namespace(), Some("ops"));
    }
}

fn policy(ms: &[Manifest], name: &str) -> ValidatingAdmissionPolicy {
    typed(find(ms, "ValidatingAdmissionPolicy", name))
}

#[test]
fn mcn_guard_matches_upstream_and_targets_the_daemon() {
    let ms = all(&Options {
        namespace: "ops".to_string(),
        ..Default::default()
    });
    let p = policy(&ms, "mco-mcn-guards");
    assert_eq!(
        p.metadata.labels.as_ref().unwrap()["app.kubernetes.io/name"],
        "mco"
    );
    let spec = p.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].api_groups.as_deref().unwrap(), [MC]);
    assert_eq!(
        rules[0].resources.as_deref().unwrap(),
        ["machineconfignodes", "machineconfignodes/status"]
    );
    assert_eq!(
        rules[0].operations.as_deref().unwrap(),
        ["CREATE", "UPDATE"]
    );
    let conds = spec.match_conditions.unwrap();
    assert_eq!(
        conds[0].expression,
        "request.userInfo.username == 'system:serviceaccount:ops:mco-daemon'"
    );
    let v = spec.validations.unwrap();
    assert_eq!(
        v[0].expression,
        "has(request.userInfo.extra) && ('authentication.kubernetes.io/node-name' in request.userInfo.extra)"
    );
    assert_eq!(
        v[0].message.as_deref(),
        Some("this user must have a \"authentication.kubernetes.io/node-name\" claim")
    );
    assert_eq!(
        v[1].expression,
        "object.metadata.name == request.userInfo.extra[\"authentication.kubernetes.io/node-name\"][0]"
    );
    assert_eq!(
        v[1].message_expression.as_deref(),
        Some(
            "'updates to MCN ' + string(object.metadata.name) + ' can only be done from the MCN\\'s owner node'"
        )
    );
    for (i, field) in [(2, "node"), (3, "nodeRef")] {
        assert_eq!(
            v[i].expression,
            format!(
                "!has(object.spec) || !has(object.spec.{field}) || object.spec.{field}.name == request.userInfo.extra[\"authentication.kubernetes.io/node-name\"][0]"
            )
        );
        assert!(
            v[i].message_expression
                .as_deref()
                .unwrap()
                .contains(&format!("owner node: its spec.{field}.name is ")),
            "{:?}",
            v[i].message_expression
        );
    }

    let b = find(
        &ms,
        "ValidatingAdmissionPolicyBinding",
        "mco-mcn-guards-binding",
    );
    assert_eq!(b.object["spec"]["policyName"], "mco-mcn-guards");
    assert_eq!(
        b.object["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
}

#[test]
fn node_guard_limits_the_daemon_to_its_own_nodes_annotations() {
    let ms = all(&Options::default());
    let spec = policy(&ms, "mco-node-guards").spec.unwrap();
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules[0].api_groups.as_deref().unwrap(), [""]);
    assert_eq!(rules[0].resources.as_deref().unwrap(), ["nodes"]);
    assert_eq!(rules[0].operations.as_deref().unwrap(), ["UPDATE"]);
    assert_eq!(
        spec.match_conditions.unwrap()[0].expression,
        "request.userInfo.username == 'system:serviceaccount:mco-system:mco-daemon'"
    );
    let exprs: Vec<String> = spec
        .validations
        .unwrap()
        .into_iter()
        .map(|v| v.expression)
        .collect();
    assert_eq!(exprs.len(), 4);
    assert!(exprs[1].starts_with("object.metadata.name == request.userInfo.extra"));
    assert!(exprs[2].contains("object.spec == oldObject.spec"));
    assert!(exprs[3].contains("object.metadata.labels == oldObject.metadata.labels"));
    let b = find(
        &ms,
        "ValidatingAdmissionPolicyBinding",
        "mco-node-guards-binding",
    );
    assert_eq!(b.object["spec"]["policyName"], "mco-node-guards");
}

#[test]
fn controller_deployment_is_restricted_and_probed() {
    let opts = Options {
        image: "registry.example/mco:test".to_string(),
        namespace: "ops".to_string(),
        ..Default::default()
    };
    let d: Deployment = typed(find(&all(&opts), "Deployment", "mco-controller"));
    assert_eq!(d.metadata.namespace.as_deref(), Some("ops"));
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("mco-controller"));
    assert_ne!(pod.host_network, Some(true));
    assert_ne!(pod.host_pid, Some(true));
    assert!(pod.volumes.is_none());
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example/mco:test"));
    let args = c.args.clone().unwrap();
    assert_eq!(args[0], "controller");
    assert!(args.contains(&"--metrics-addr=0.0.0.0:9797".to_string()));
    assert!(args.contains(&"--lease-namespace=ops".to_string()));
    assert!(args.contains(&"--lease-name=mco-controller".to_string()));
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_ne!(sc.privileged, Some(true));
    assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
    assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(probe_path(&c.liveness_probe), "/healthz");
    assert_eq!(probe_path(&c.readiness_probe), "/readyz");
    // The metrics port serves TLS (`--metrics-auth=delegated`); the probes' paths stay open.
    assert!(args.contains(&"--metrics-auth=delegated".to_string()));
    for p in [&c.liveness_probe, &c.readiness_probe] {
        let scheme = p
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .scheme
            .clone();
        assert_eq!(scheme.as_deref(), Some("HTTPS"));
    }
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("metrics"), 9797)
    );
    assert!(c.resources.as_ref().unwrap().requests.is_some());

    let pdb = find(&all(&opts), "PodDisruptionBudget", "mco-controller")
        .object
        .clone();
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"],
        serde_json::to_value(&spec.selector).unwrap(),
        "the budget covers the Deployment's pods"
    );
}

#[test]
fn daemon_set_runs_privileged_on_every_node_with_the_host_root() {
    let d: DaemonSet = typed(find(&all(&Options::default()), "DaemonSet", "mco-daemon"));
    let spec = d.spec.unwrap();
    let ru = spec.update_strategy.unwrap().rolling_update.unwrap();
    assert_eq!(
        ru.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("10%".into()))
    );
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("mco-daemon"));
    assert_eq!(pod.host_pid, Some(true));
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    assert_eq!(pod.termination_grace_period_seconds, Some(600));
    let tolerations = pod.tolerations.unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert!(tolerations[0].key.is_none() && tolerations[0].effect.is_none());
    let volumes = pod.volumes.unwrap();
    assert_eq!(volumes[0].host_path.as_ref().unwrap().path, "/");
    let c = &pod.containers[0];
    assert_eq!(c.security_context.as_ref().unwrap().privileged, Some(true));
    let mount = &c.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.name, volumes[0].name);
    assert_eq!(mount.mount_path, "/rootfs");
    assert_eq!(mount.mount_propagation.as_deref(), Some("HostToContainer"));
    let env = &c.env.as_ref().unwrap()[0];
    assert_eq!(env.name, "NODE_NAME");
    assert_eq!(
        env.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "spec.nodeName"
    );
    assert_eq!(c.command, Some(vec!["/usr/bin/mco-daemon".to_string()]));
    let args = c.args.clone().unwrap();
    assert_eq!(
        &args[..3],
        ["--node=$(NODE_NAME)", "--root=/rootfs", "--host=real"]
    );
    let requests = c.resources.as_ref().unwrap().requests.clone().unwrap();
    assert_eq!(requests["cpu"].0, "20m");
    assert_eq!(requests["memory"].0, "50Mi");
}

#[test]
fn namespace_admits_the_privileged_daemon() {
    let ms = all(&Options::default());
    let ns = find(&ms, "Namespace", "mco-system");
    assert_eq!(
        ns.object["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
}

#[test]
fn default_pools_and_controller_config_are_upstreams() {
    let opts = Options {
        os_image: "quay.io/fedora/fedora-coreos:stable".to_string(),
        ..Default::default()
    };
    let ms = all(&opts);
    let master = find(&ms, "MachineConfigPool", "master");
    assert_eq!(
        master.object["spec"]["machineConfigSelector"]["matchLabels"],
        serde_json::json!({"machineconfiguration.openshift.io/role": "master"})
    );
    assert_eq!(
        master.object["spec"]["nodeSelector"]["matchLabels"],
        serde_json::json!({"node-role.kubernetes.io/master": ""})
    );
    let labels = &master.object["metadata"]["labels"];
    assert_eq!(labels["machineconfiguration.openshift.io/mco-built-in"], "");
    assert_eq!(
        labels["operator.machineconfiguration.openshift.io/required-for-upgrade"],
        ""
    );
    assert_eq!(
        labels["pools.operator.machineconfiguration.openshift.io/master"],
        ""
    );
    let worker = find(&ms, "MachineConfigPool", "worker");
    assert_eq!(
        worker.object["spec"]["nodeSelector"]["matchLabels"],
        serde_json::json!({"node-role.kubernetes.io/worker": ""})
    );
    assert_eq!(
        worker.object["metadata"]["labels"]
            .get("operator.machineconfiguration.openshift.io/required-for-upgrade"),
        None
    );
    for pool in [master, worker] {
        assert_eq!(
            pool.object.get("status"),
            None,
            "a fresh pool has no status"
        );
    }
    let cc = find(&ms, "ControllerConfig", "machine-config-controller");
    assert_eq!(
        cc.object["spec"]["baseOSContainerImage"],
        "quay.io/fedora/fedora-coreos:stable"
    );
    assert_eq!(
        cc.object["spec"]["osImageURL"],
        "quay.io/fedora/fedora-coreos:stable"
    );
    // The default leaves the OS image out, so nodes are never rebased by accident.
    let default = all(&Options::default());
    let cc = find(&default, "ControllerConfig", "machine-config-controller");
    assert_eq!(cc.object["spec"], serde_json::json!({}));
}

#[test]
fn parts_select_and_parse() {
    let only_rbac = mco_manifests::generate(&Options::default(), &[Part::Rbac]).unwrap();
    assert!(only_rbac.iter().all(|m| m.part == Part::Rbac));
    assert!(only_rbac.iter().any(|m| m.kind() == Some("ClusterRole")));
    assert_eq!(
        mco_manifests::generate(&Options::default(), &[Part::Crds])
            .unwrap()
            .len(),
        mco_api::crds::all().len()
    );
    for p in Part::ALL {
        assert_eq!(p.name().parse::<Part>().unwrap(), p);
    }
    assert!("secrets".parse::<Part>().is_err());
    assert_eq!(Part::Namespace.file_name(), "00-namespace.yaml");
    assert_eq!(Part::Defaults.file_name(), "06-defaults.yaml");
}

#[test]
fn default_image_is_the_documented_one() {
    let image = mco_manifests::default_image();
    assert!(image.starts_with("ghcr.io/mco-rs/mco:v"), "{image}");
    let docs = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploy.md"),
    )
    .unwrap();
    assert!(
        docs.contains(mco_manifests::IMAGE_REPOSITORY),
        "docs/deploy.md must name {}",
        mco_manifests::IMAGE_REPOSITORY
    );
}

#[test]
fn the_server_only_reads_pools_configs_controller_configs_and_image_builds_and_runs_on_masters_host_network()
 {
    let rules = mco_manifests::rbac::server_rules();
    let flat: Vec<(Vec<String>, Vec<String>)> = rules
        .iter()
        .map(|r| (r.resources.clone().unwrap_or_default(), r.verbs.clone()))
        .collect();
    assert_eq!(
        flat,
        [(
            vec![
                "machineconfigs".to_string(),
                "machineconfigpools".to_string(),
                "controllerconfigs".to_string(),
                "machineosconfigs".to_string(),
                "machineosbuilds".to_string()
            ],
            vec!["get".to_string(), "list".to_string(), "watch".to_string()]
        )]
    );
    let ds = mco_manifests::workloads::server(&Options::default());
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(mco_manifests::SERVER)
    );
    assert!(
        pod.node_selector
            .unwrap()
            .contains_key("node-role.kubernetes.io/master")
    );
    let c = &pod.containers[0];
    assert_eq!(
        c.ports.as_ref().unwrap()[0].host_port,
        Some(mco_manifests::SERVER_PORT)
    );
    assert!(c.args.as_ref().unwrap().iter().any(|a| a == "server"));
}

#[test]
fn node_bootstrapper_is_upstreams_and_its_token_reaches_the_server_only_with_a_url() {
    let ms = all(&Options::default());
    let b = find(&ms, "ClusterRoleBinding", mco_manifests::NODE_BOOTSTRAPPER);
    assert_eq!(b.object["roleRef"]["name"], "system:node-bootstrapper");
    assert_eq!(
        b.object["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "node-bootstrapper", "namespace": "mco-system"}])
    );
    let secret = find(&ms, "Secret", mco_manifests::NODE_BOOTSTRAPPER_TOKEN);
    assert_eq!(secret.object["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret.object["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "node-bootstrapper"
    );
    let args = |opts: &Options| {
        let ds = mco_manifests::workloads::server(opts);
        let pod = ds.spec.unwrap().template.spec.unwrap();
        let vols: Vec<String> = pod
            .volumes
            .unwrap()
            .iter()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        (pod.containers[0].args.clone().unwrap(), vols)
    };
    let (plain, vols) = args(&Options::default());
    assert!(!plain.iter().any(|a| a.starts_with("--bootstrap-token-dir")));
    assert_eq!(vols, ["mco-server-tls"]);
    let (with, vols) = args(&Options {
        apiserver_url: Some("https://api-int.example:6443".into()),
        ..Default::default()
    });
    assert!(with.contains(&"--apiserver-url=https://api-int.example:6443".to_string()));
    assert!(with.contains(&"--bootstrap-token-dir=/etc/mcs/bootstrap-token".to_string()));
    assert_eq!(vols, ["mco-server-tls", "node-bootstrapper-token"]);
}
