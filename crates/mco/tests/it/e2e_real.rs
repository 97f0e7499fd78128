//! What only a real control plane shows, on both servers where the embedded one has it too:
//! a daemon's identity confined to its own MachineConfigNode (the real server's node-name
//! claim and the shipped admission policy; the embedded server's own check), and `mco up
//! --kubeconfig` refusing bad input on a real cluster (`scripts/real-kube`, see `e2e`).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::e2e::{self, Cluster, Opts, RealKube, Server, Slot, on_both_servers};

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
    // (docs/apiserver.md, "Differences from kube-apiserver").
    let expected = match server {
        Server::Real => format!(
            "The machineconfignodes \"worker-1\" is invalid: : ValidatingAdmissionPolicy 'mco-mcn-guards' with binding 'mco-mcn-guards-binding' denied request: {denied}"
        ),
        Server::Embedded => format!("Error from server (Forbidden): {denied}"),
    };
    assert_eq!(err.trim(), expected, "unexpected refusal");
    write("worker-0").unwrap_or_else(|e| panic!("worker-0 could not write its own MCN: {e}"));
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
