//! Durability: objects acknowledged before a `kill -9` are all there after restart, whether
//! each commit is fsynced (power-loss durability) or only handed to the OS (process-crash).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use mco_apiserver::Durability;
use serde_json::json;

/// Starts the server as a child process and returns it with its address.
fn spawn_server(dir: &Path, durability: Durability) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mco-apiserver-testbin"))
        .arg(dir)
        .arg("127.0.0.1:0")
        .arg(durability.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("server process starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("address line");
    (child, line.trim().to_string())
}

async fn client(dir: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(dir.join("kubeconfig")).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_kill_9() {
    acknowledged_writes_survive_kill_9_with(Durability::PowerLoss).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_kill_9_without_fsync_per_commit() {
    acknowledged_writes_survive_kill_9_with(Durability::ProcessCrash).await;
}

async fn acknowledged_writes_survive_kill_9_with(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _addr) = spawn_server(dir.path(), durability);
    let c = client(dir.path()).await;
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..16 {
        let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("w{w}-{i}")}, "data": {"i": i.to_string()}})).unwrap();
                match api.create(&PostParams::default(), &cm).await {
                    Ok(o) => acked.lock().unwrap().push((o.metadata.name.unwrap(), o.metadata.resource_version.unwrap())),
                    Err(_) => return,
                }
            }
        }));
    }
    common::eventually("some writes acknowledged", 30, || {
        let n = acked.lock().unwrap().len();
        async move { (n >= 300).then_some(()) }
    })
    .await;
    // SIGKILL while writers are still in flight.
    child.kill().unwrap();
    child.wait().unwrap();
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 300);

    let (mut child, _addr) = spawn_server(dir.path(), durability);
    let c = client(dir.path()).await;
    let api: Api<ConfigMap> = Api::namespaced(c, "default");
    let list = api.list(&Default::default()).await.unwrap();
    let stored: std::collections::HashMap<String, String> = list
        .items
        .into_iter()
        .map(|o| {
            (
                o.metadata.name.unwrap(),
                o.metadata.resource_version.unwrap(),
            )
        })
        .collect();
    for (name, rv) in &acked {
        assert_eq!(
            stored.get(name),
            Some(rv),
            "acknowledged {name} at {rv} survives"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
