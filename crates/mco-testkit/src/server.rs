//! The embedded API server for tests: in a temp dir, on a free port, with helpers for clients.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use mco_api::{MachineConfig, MachineConfigNode, MachineConfigPool};
use mco_apiserver::{Config, Identity, Server, ServerHandle};

use crate::eventually;

/// A running server and the temp dir holding its data; the dir lives as long as this does.
pub struct TestServer {
    pub handle: ServerHandle,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// A server with the default config.
    pub async fn start() -> TestServer {
        start().await
    }

    /// A server whose config `f` adjusts (durability, limits, …).
    pub async fn start_with(f: impl FnOnce(Config) -> Config) -> TestServer {
        start_with(f).await
    }

    /// A client with the admin identity.
    pub async fn admin(&self) -> Client {
        self.handle
            .client_for(Identity::Admin)
            .await
            .expect("admin client")
    }

    /// A client as the ServiceAccount `namespace/name`: what its role bindings grant, and no
    /// more (nothing, without any).
    pub async fn service_account(&self, namespace: &str, name: &str) -> Client {
        let id = Identity::ServiceAccount {
            namespace: namespace.into(),
            name: name.into(),
            node: None,
        };
        self.handle
            .client_for(id)
            .await
            .expect("service account client")
    }

    /// The admin kubeconfig the server wrote, as `kubectl` and the binaries read it.
    pub fn kubeconfig(&self) -> PathBuf {
        self.handle.kubeconfig_path()
    }
}

/// A server with the default config, listening on a free port of 127.0.0.1.
pub async fn start() -> TestServer {
    start_with(|c| c).await
}

/// A server whose config `f` adjusts.
pub async fn start_with(f: impl FnOnce(Config) -> Config) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = f(Config::new(dir.path(), "127.0.0.1:0".parse().unwrap()));
    let handle = Server::start(cfg).await.expect("server starts");
    TestServer { handle, dir }
}

/// The Status of a failed kube call.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Creates mco's CRDs and waits until pools, MachineConfigs and MachineConfigNodes are served.
pub async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in mco_api::crds::all() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    let mcns: Api<MachineConfigNode> = Api::all(client.clone());
    let mcs: Api<MachineConfig> = Api::all(client.clone());
    eventually("CRDs served", 20, || {
        let (pools, mcns, mcs) = (pools.clone(), mcns.clone(), mcs.clone());
        async move {
            let ok = pools.list(&ListParams::default()).await.is_ok()
                && mcns.list(&ListParams::default()).await.is_ok()
                && mcs.list(&ListParams::default()).await.is_ok();
            ok.then_some(())
        }
    })
    .await;
}

/// Creates mco's namespace ([`mco_api::constants::names::DEFAULT_NAMESPACE`]): the controller
/// and the daemon record their Events about Nodes and pools there, and the server, as
/// kube-apiserver, refuses an object in a namespace that does not exist.
pub async fn install_namespace(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(mco_api::constants::names::DEFAULT_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create mco's namespace");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolBuilder;

    #[tokio::test]
    async fn serves_mco_kinds_after_install() {
        let s = TestServer::start().await;
        let client = s.admin().await;
        install_crds(&client).await;
        let pools: Api<MachineConfigPool> = Api::all(client);
        let p = PoolBuilder::new("worker").role("worker").build();
        pools.create(&PostParams::default(), &p).await.unwrap();
        let got = pools.get("worker").await.unwrap();
        assert_eq!(got.spec.node_selector, p.spec.node_selector);
        let e = pools.create(&PostParams::default(), &p).await.unwrap_err();
        assert_eq!(status(e).code, 409);
        assert!(s.kubeconfig().is_file());
        s.handle.shutdown().await;
    }
}
