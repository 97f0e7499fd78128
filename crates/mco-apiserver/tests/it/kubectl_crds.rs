//! The committed CRDs (`manifests/crds/`) are accepted by the real kubectl: a client-side dry run
//! (kubectl's own validation against the server's OpenAPI), then a real create, after which the
//! kinds are served and an upstream-style MachineConfig passes `--dry-run=server`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds")
}

fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut c = Command::new("kubectl");
    c.args(args)
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("kubectl on PATH");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().unwrap()
}

fn ok(o: Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what} failed:\nstdout: {out}\nstderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_accepts_the_generated_crds() {
    let s = common::start().await;
    let kc = s.handle.kubeconfig_path();
    let home = tempfile::tempdir().unwrap();
    let mut all = String::new();
    let mut files: Vec<_> = std::fs::read_dir(crds_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in &files {
        all.push_str("---\n");
        all.push_str(&std::fs::read_to_string(f).unwrap());
    }
    assert_eq!(files.len(), 18, "eighteen CRDs are committed");

    let dry = ok(
        kubectl(
            &kc,
            home.path(),
            &["create", "--dry-run=client", "-f", "-", "-o", "name"],
            Some(&all),
        ),
        "kubectl create --dry-run=client",
    );
    for name in [
        "machineconfigs.machineconfiguration.openshift.io",
        "machineconfigpools.machineconfiguration.openshift.io",
        "machineconfignodes.machineconfiguration.openshift.io",
        "controllerconfigs.machineconfiguration.openshift.io",
        "machineconfigurations.operator.openshift.io",
        "kubeletconfigs.machineconfiguration.openshift.io",
        "containerruntimeconfigs.machineconfiguration.openshift.io",
        "images.config.openshift.io",
        "imagedigestmirrorsets.config.openshift.io",
        "imagetagmirrorsets.config.openshift.io",
        "imagecontentsourcepolicies.operator.openshift.io",
        "pinnedimagesets.machineconfiguration.openshift.io",
        "machineosconfigs.machineconfiguration.openshift.io",
        "machineosbuilds.machineconfiguration.openshift.io",
    ] {
        assert!(
            dry.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{name}"
            )),
            "dry run lists {name}: {dry}"
        );
    }
    let none = ok(
        kubectl(&kc, home.path(), &["get", "crd", "-o", "name"], None),
        "get crd",
    );
    assert!(
        none.trim().is_empty(),
        "a client-side dry run stores nothing: {none}"
    );

    ok(
        kubectl(&kc, home.path(), &["create", "-f", "-"], Some(&all)),
        "kubectl create",
    );
    ok(
        kubectl(
            &kc,
            home.path(),
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                "crd",
                "--all",
            ],
            None,
        ),
        "kubectl wait Established",
    );

    let mc = r#"
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 99-worker-ssh
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  config:
    ignition:
      version: 3.2.0
    passwd:
      users:
      - name: core
        sshAuthorizedKeys:
        - ssh-ed25519 AAAA
  baseOSExtensionsContainerImage: registry.example.com/ext:1
  kernelArguments: [nosmt]
"#;
    let out = ok(
        kubectl(
            &kc,
            home.path(),
            &["apply", "--dry-run=server", "-f", "-", "-o", "json"],
            Some(mc),
        ),
        "kubectl apply --dry-run=server of an upstream MachineConfig",
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["spec"]["baseOSExtensionsContainerImage"], "registry.example.com/ext:1",
        "upstream field names survive pruning"
    );
    assert_eq!(v["spec"]["config"]["passwd"]["users"][0]["name"], "core");
}
