//! What only a real control plane shows, on both servers where the embedded one has it too:
//! a daemon's identity confined to its own MachineConfigNode (the real server's node-name
//! claim and the shipped admission policy; the embedded server's own check), and `mco up
//! --kubeconfig` refusing bad input on a real cluster (`scripts/real-kube`, see `e2e`), the
//! shipped ServiceAccounts' permissions there equal to those `docs/deploy.md` documents, and
//! the metrics port readable only with a token bound to `mco-metrics-reader`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::e2e::{self, Cluster, Opts, RealKube, Server, Slot, on_both_servers, repo_root};

const MCO: &str = env!("CARGO_BIN_EXE_mco");

on_both_servers!(daemon_may_not_write_another_nodes_machineconfignode);

/// worker-0's daemon identity writes worker-1's MachineConfigNode and is refused, with
/// upstream's message; its own it may write, so the refusal is the guard's, not RBAC's.
fn daemon_may_not_write_another_nodes_machineconfignode(server: Server) {
    let c = Cluster::up(Opts {
        server,
        ..Opts::default()
    });
    let daemon = c.daemon_kubeconfig("worker-0");
    let patch = r#"{"metadata":{"labels":{"mco-e2e/probe":"x"}}}"#;
    let write = |mcn: &str| {
        c.kubectl_as(
            &daemon,
            &[
                "patch",
                "machineconfignode",
                mcn,
                "--type",
                "merge",
                "-p",
                patch,
            ],
        )
    };
    let err = write("worker-1").expect_err("worker-0's daemon wrote worker-1's MachineConfigNode");
    let denied = "updates to MCN worker-1 can only be done from the MCN's owner node";
    // The shipped policy's validations name no `reason`, so kube-apiserver answers 422 Invalid
    // with the policy's name; the embedded server checks the same rule itself and answers 403
    // with the same words
    // (docs/apiserver.md, "Differences from kube-apiserver").
    let expected = match server {
        Server::Real => format!(
            "The machineconfignodes \"worker-1\" is invalid: : ValidatingAdmissionPolicy 'mco-mcn-guards' with binding 'mco-mcn-guards-binding' denied request: {denied}"
        ),
        Server::Embedded => format!(
            "Error from server (Forbidden): machineconfignodes.machineconfiguration.openshift.io \"worker-1\" is forbidden: ValidatingAdmissionPolicy 'mco-mcn-guards' with binding 'mco-mcn-guards-binding' denied request: {denied}"
        ),
    };
    assert_eq!(err.trim(), expected, "unexpected refusal");
    write("worker-0").unwrap_or_else(|e| panic!("worker-0 could not write its own MCN: {e}"));
    // Its own object, pointed at another node, in either field that names the node.
    for field in ["node", "nodeRef"] {
        let retarget = format!(r#"{{"spec":{{"{field}":{{"name":"worker-1"}}}}}}"#);
        let err = c
            .kubectl_as(
                &daemon,
                &[
                    "patch",
                    "machineconfignode",
                    "worker-0",
                    "--type",
                    "merge",
                    "-p",
                    &retarget,
                ],
            )
            .expect_err("worker-0's daemon pointed its MachineConfigNode at worker-1");
        assert!(
            err.contains(&format!(
                "updates to MCN worker-0 can only be done from the MCN's owner node: its spec.{field}.name is worker-1, the request is from node worker-0"
            )),
            "{field}: {err}"
        );
    }
    assert_eq!(c.mcn("worker-0")["spec"]["node"]["name"], "worker-0");
    let own = c.mcn("worker-0");
    assert_eq!(own["metadata"]["labels"]["mco-e2e/probe"], "x");
    let other = c.mcn("worker-1");
    assert!(other["metadata"]["labels"]["mco-e2e/probe"].is_null());
}

/// `mco up --kubeconfig` on a real cluster refuses an unreachable server, an identity without
/// the rights to install, another machine-config operator and a real node named like a
/// simulated one, each with a clear error, and changes nothing.
#[test]
fn up_on_a_real_cluster_refuses_bad_input() {
    if e2e::skip_real() {
        return;
    }
    let _slot = Slot::take();
    let dir = e2e::tempdir();
    let kube = RealKube::start(&dir);
    let env = Env {
        dir: dir.clone(),
        kubeconfig: kube.kubeconfig.clone(),
    };
    refuses_bad_input_and_changes_nothing(&env);
    drop(kube);
    let _ = std::fs::remove_dir_all(&dir);
}

struct Env {
    dir: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
}

impl Env {
    fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("kubectl on PATH");
        if let Some(text) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }
}

/// `mco up --kubeconfig` fails with a clear error, and nothing is written: neither the
/// cluster (no `mco-system` namespace) nor the data dir.
fn refuses_bad_input_and_changes_nothing(env: &Env) {
    let data = env.dir.join("refused");
    let try_up = |kubeconfig: &Path| -> String {
        let out = Command::new(MCO)
            .args(["up", "--kubeconfig"])
            .arg(kubeconfig)
            .arg("--data-dir")
            .arg(&data)
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "mco up accepted bad input: {err}");
        assert!(!data.exists(), "a refused mco up created its data dir");
        let ns = env.kubectl_as(&env.kubeconfig, &["get", "namespace", "mco-system"], None);
        assert!(
            !ns.status.success(),
            "a refused mco up created its namespace"
        );
        err
    };
    let admin = std::fs::read_to_string(&env.kubeconfig).unwrap();
    let kc = |name: &str, text: String| {
        let p = env.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let apply = |yaml: &str| {
        let out = env.kubectl_as(&env.kubeconfig, &["apply", "-f", "-"], Some(yaml));
        assert!(out.status.success(), "kubectl apply: {out:?}");
    };

    // An unreachable server: the same kubeconfig on a port nothing listens on.
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    let err = try_up(&kc(
        "unreachable",
        admin.replace(&server, "https://127.0.0.1:1"),
    ));
    assert!(err.contains("did not answer"), "{err}");

    // An identity without the rights to install.
    apply("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: nobody, namespace: default}\n");
    let out = env.kubectl_as(
        &env.kubeconfig,
        &["create", "token", "nobody", "-n", "default"],
        None,
    );
    assert!(out.status.success(), "kubectl create token: {out:?}");
    let token = String::from_utf8(out.stdout).unwrap();
    let nobody = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: nobody\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: nobody}}\ncurrent-context: c\n",
        token.trim()
    );
    let err = try_up(&kc("nobody", nobody));
    assert!(
        err.contains("lacks rights")
            && err.contains("create apiextensions.k8s.io/customresourcedefinitions"),
        "{err}"
    );

    // Another machine-config operator.
    apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: openshift-machine-config-operator}\n");
    let upstream = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: machine-config-operator, namespace: openshift-machine-config-operator}\nspec:\n  replicas: 0\n  selector: {matchLabels: {k8s-app: machine-config-operator}}\n  template:\n    metadata: {labels: {k8s-app: machine-config-operator}}\n    spec: {containers: [{name: operator, image: quay.io/openshift/mco:none}]}\n";
    apply(upstream);
    let err = try_up(&env.kubeconfig);
    assert!(
        err.contains("another machine-config operator")
            && err.contains("openshift-machine-config-operator/machine-config-operator"),
        "{err}"
    );
    let out = env.kubectl_as(
        &env.kubeconfig,
        &[
            "delete",
            "deployment",
            "machine-config-operator",
            "-n",
            "openshift-machine-config-operator",
        ],
        None,
    );
    assert!(out.status.success(), "{out:?}");

    // A real node with a simulated node's name.
    apply("apiVersion: v1\nkind: Node\nmetadata: {name: worker-1}\n");
    let err = try_up(&env.kubeconfig);
    assert!(
        err.contains("real nodes") && err.contains("worker-1"),
        "{err}"
    );
    let out = env.kubectl_as(&env.kubeconfig, &["delete", "node", "worker-1"], None);
    assert!(out.status.success(), "{out:?}");
}

/// The shipped ServiceAccounts may do, on a real server, exactly what `docs/deploy.md`
/// ("Permissions and the admission guards") documents: `kubectl auth can-i --list` for each,
/// less what any ServiceAccount may do, equals the rules parsed from the docs' tables and the
/// two sentences on leader election and events. A permission added to the manifests without
/// the docs, or documented but not granted, fails.
#[test]
fn shipped_service_accounts_may_do_what_the_docs_say_and_nothing_more() {
    if e2e::skip_real() {
        return;
    }
    let _slot = Slot::take();
    let dir = e2e::tempdir();
    let kube = RealKube::start(&dir);
    let install = repo_root().join("manifests/install");
    let kubectl = |args: &[&str]| -> String {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &kube.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl on PATH");
        assert!(out.status.success(), "kubectl {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for file in ["00-namespace.yaml", "02-rbac.yaml"] {
        kubectl(&["apply", "-f", install.join(file).to_str().unwrap()]);
    }
    // What every ServiceAccount may do (discovery, self reviews...), from one bound to nothing.
    kubectl(&[
        "create",
        "serviceaccount",
        "mco-e2e-nobody",
        "-n",
        "mco-system",
    ]);
    let can = |sa: &str| {
        parse_can_i_list(&kubectl(&[
            "auth",
            "can-i",
            "--list",
            "-n",
            "mco-system",
            &format!("--as=system:serviceaccount:mco-system:{sa}"),
        ]))
    };
    let baseline = can("mco-e2e-nobody");
    assert!(
        baseline.contains(&rule(
            "selfsubjectaccessreviews.authorization.k8s.io",
            "",
            "create"
        )),
        "the baseline parsed nothing: {baseline:?}"
    );

    let docs = std::fs::read_to_string(repo_root().join("docs/deploy.md")).unwrap();
    for (sa, heading) in [
        (
            "mco-controller",
            "**Controller** (ClusterRole `mco-controller`):",
        ),
        ("mco-daemon", "**Daemon** (ClusterRole `mco-daemon`):"),
        (
            "mco-server",
            "**Machine config server** (ClusterRole `mco-server`):",
        ),
        (
            "node-bootstrapper",
            "**Node bootstrapper** (ServiceAccount `node-bootstrapper`, ClusterRole `system:node-bootstrapper`):",
        ),
    ] {
        let mut documented = documented_rules(&docs, heading);
        documented.extend(prose_rules(&docs, sa));
        let granted: BTreeSet<Rule> = can(sa).difference(&baseline).cloned().collect();
        let undocumented: Vec<_> = granted.difference(&documented).collect();
        let missing: Vec<_> = documented.difference(&granted).collect();
        assert!(
            undocumented.is_empty() && missing.is_empty(),
            "{sa}: granted but not in docs/deploy.md: {undocumented:?}; documented but not granted: {missing:?}"
        );
        // Events about Nodes and pools are recorded in the install namespace, none in
        // `default`.
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &kube.kubeconfig)
            .args([
                "auth",
                "can-i",
                "create",
                "events",
                "-n",
                "default",
                &format!("--as=system:serviceaccount:mco-system:{sa}"),
            ])
            .output()
            .expect("kubectl on PATH");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "no",
            "{sa} may create events in default: {out:?}"
        );
    }
    drop(kube);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (resource as kubectl prints it, e.g. `machineconfignodes.machineconfiguration.openshift.io/status`,
/// resource name or "", verb)
type Rule = (String, String, String);

fn rule(resource: &str, name: &str, verb: &str) -> Rule {
    (resource.to_owned(), name.to_owned(), verb.to_owned())
}

/// `kubectl auth can-i --list`'s table, one rule per verb; a non-resource URL is its resource.
fn parse_can_i_list(out: &str) -> BTreeSet<Rule> {
    let mut rules = BTreeSet::new();
    for line in out.lines().skip(1) {
        let resource = if line.starts_with(' ') {
            ""
        } else {
            line.split_whitespace().next().unwrap_or_default()
        };
        // The bracketed columns: non-resource URLs, resource names, verbs.
        let cols: Vec<&str> = line
            .split('[')
            .skip(1)
            .map(|c| c.split(']').next().unwrap_or_default())
            .collect();
        assert_eq!(cols.len(), 3, "unexpected can-i line: {line:?}");
        let what = if resource.is_empty() {
            cols[0]
        } else {
            resource
        };
        // Several names in one rule are listed space-separated: one rule per name.
        let names: Vec<&str> = match cols[1].split_whitespace().collect::<Vec<_>>() {
            n if n.is_empty() => vec![""],
            n => n,
        };
        for verb in cols[2].split_whitespace() {
            for name in &names {
                rules.insert(rule(what, name, verb));
            }
        }
    }
    rules
}

/// The rules of the `| resource | verbs | ...` table after `heading` in the docs. A resource
/// cell lists resources separated by commas, each ``[group ]plural[/sub][ `name`]``; mco's own
/// kinds are in `machineconfiguration.openshift.io`. Rows for OpenShift only (`--openshift`) are skipped:
/// the default install has no such rules.
fn documented_rules(docs: &str, heading: &str) -> BTreeSet<Rule> {
    const MCO_KINDS: [&str; 6] = [
        "machineconfigs",
        "machineconfigpools",
        "machineconfignodes",
        "controllerconfigs",
        "machineosconfigs",
        "machineosbuilds",
    ];
    let start = docs
        .find(heading)
        .unwrap_or_else(|| panic!("docs/deploy.md lacks {heading:?}"));
    let mut rules = BTreeSet::new();
    let rows = docs[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2);
    for row in rows {
        if row.contains("--openshift") {
            continue;
        }
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (resources, verbs) = (cells[1], cells[2]);
        for item in resources.split(',').map(str::trim) {
            let (item, name) = match item.split_once(" `") {
                Some((i, n)) => (i, n.trim_end_matches('`')),
                None => (item, ""),
            };
            let (group, plural) = match item.split_once(' ') {
                Some((g, p)) => (g, p),
                None => {
                    let base = item.split('/').next().unwrap();
                    let g = if MCO_KINDS.contains(&base) {
                        "machineconfiguration.openshift.io"
                    } else {
                        ""
                    };
                    (g, item)
                }
            };
            let (base, sub) = match plural.split_once('/') {
                Some((b, s)) => (b, format!("/{s}")),
                None => (plural, String::new()),
            };
            let resource = if group.is_empty() {
                format!("{base}{sub}")
            } else {
                format!("{base}.{group}{sub}")
            };
            for verb in verbs.split(',').map(str::trim) {
                rules.insert(rule(&resource, name, verb));
            }
        }
    }
    assert!(!rules.is_empty(), "no table after {heading:?}");
    rules
}

/// The rules the docs give in prose: leader election (the controller's) and events (both
/// identities'). The sentences must be in the docs as written here.
fn prose_rules(docs: &str, sa: &str) -> BTreeSet<Rule> {
    let flat = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut rules = BTreeSet::new();
    let lease = "Leader election uses a Role in the install namespace: `create` leases, and `get` and `update` the lease `mco-controller`.";
    assert!(flat.contains(lease), "docs/deploy.md lacks {lease:?}");
    if sa == "mco-controller" {
        rules.insert(rule("leases.coordination.k8s.io", "", "create"));
        rules.insert(rule("leases.coordination.k8s.io", "mco-controller", "get"));
        rules.insert(rule(
            "leases.coordination.k8s.io",
            "mco-controller",
            "update",
        ));
    }
    let events = "**Events**: ClusterRole `mco-events` grants `create` and `patch` on `events`, in both the core and `events.k8s.io` groups. It is bound by RoleBindings only in the install namespace.";
    assert!(flat.contains(events), "docs/deploy.md lacks {events:?}");
    // The machine config server records no events, nor do joining machines' kubelets.
    if sa != "mco-server" && sa != "node-bootstrapper" {
        for resource in ["events", "events.events.k8s.io"] {
            rules.insert(rule(resource, "", "create"));
            rules.insert(rule(resource, "", "patch"));
        }
    }
    rules
}

/// The shipped metrics protection on a real kube-apiserver: the controller, run as its shipped
/// ServiceAccount (bound to `system:auth-delegator` by the shipped RBAC) with
/// `--metrics-auth=delegated`, serves `/metrics` over TLS to a token bound to
/// `mco-metrics-reader` only: 403 to another ServiceAccount's token, 401 without a token, and
/// `/healthz` open to anyone.
#[test]
fn metrics_are_read_with_a_token_bound_to_the_reader_role_only() {
    if e2e::skip_real() {
        return;
    }
    let _slot = Slot::take();
    let dir = e2e::tempdir();
    let kube = RealKube::start(&dir);
    let install = repo_root().join("manifests/install");
    let kubectl = |kubeconfig: &Path, args: &[&str]| -> String {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .args(args)
            .output()
            .expect("kubectl on PATH");
        assert!(out.status.success(), "kubectl {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let admin = kube.kubeconfig.as_path();
    for file in ["00-namespace.yaml", "01-crds.yaml", "02-rbac.yaml"] {
        kubectl(
            admin,
            &["apply", "-f", install.join(file).to_str().unwrap()],
        );
    }
    for sa in ["mco-e2e-reader", "mco-e2e-nobody"] {
        kubectl(admin, &["create", "serviceaccount", sa, "-n", "mco-system"]);
    }
    kubectl(
        admin,
        &[
            "create",
            "clusterrolebinding",
            "mco-e2e-reader",
            "--clusterrole=mco-metrics-reader",
            "--serviceaccount=mco-system:mco-e2e-reader",
        ],
    );
    let token = |sa: &str| {
        kubectl(admin, &["create", "token", sa, "-n", "mco-system"])
            .trim()
            .to_string()
    };

    // The controller's own identity: the admin kubeconfig's cluster with its token.
    let as_controller = dir.join("controller.kubeconfig");
    std::fs::copy(admin, &as_controller).unwrap();
    kubectl(
        &as_controller,
        &[
            "config",
            "set-credentials",
            "mco-controller",
            &format!("--token={}", token("mco-controller")),
        ],
    );
    kubectl(
        &as_controller,
        &[
            "config",
            "set-context",
            "--current",
            "--user=mco-controller",
        ],
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.join("controller.log");
    let mut cmd = Command::new(MCO);
    cmd.args([
        "controller",
        "--kubeconfig",
        as_controller.to_str().unwrap(),
        &format!("--metrics-addr=127.0.0.1:{port}"),
        "--metrics-auth=delegated",
        "--namespace=mco-system",
        "--lease-namespace=mco-system",
        "--lease-name=mco-controller",
    ]);
    let mut controller = e2e::Group::spawn(cmd, &log, "mco controller");
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    // (status, body) of a GET over TLS, the self-signed certificate not verified.
    let get = |path: &str, token: Option<&str>| -> Option<(u16, String)> {
        let mut c = Command::new("curl");
        c.args(["-sk", "--max-time", "20", "-w", "\n%{http_code}"]);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        let out = c
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .expect("curl on PATH");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n')?;
        Some((code.parse().ok().filter(|c| *c != 0)?, body.to_string()))
    };
    let (status, body) = e2e::wait_for("the controller's /healthz over TLS", 60, || {
        if let Some(s) = controller.exited() {
            panic!("mco controller ended ({s}):\n{}", logs());
        }
        get("/healthz", None)
    });
    assert_eq!((status, body.as_str()), (200, "ok"), "{}", logs());

    let anonymous = get("/metrics", None).unwrap();
    assert_eq!(anonymous, (401, "Unauthorized\n".to_string()));

    let nobody = get("/metrics", Some(&token("mco-e2e-nobody"))).unwrap();
    assert_eq!(nobody.0, 403, "{nobody:?}");
    assert!(
        nobody.1.starts_with(
            "Authorization denied for user system:serviceaccount:mco-system:mco-e2e-nobody"
        ),
        "{nobody:?}"
    );

    let reader = get("/metrics", Some(&token("mco-e2e-reader"))).unwrap();
    assert_eq!(reader.0, 200, "{reader:?}\n{}", logs());
    assert!(reader.1.contains("mcc_leader"), "{reader:?}");

    assert!(controller.exited().is_none(), "{}", logs());
    drop(controller);
    drop(kube);
    let _ = std::fs::remove_dir_all(&dir);
}
