//! Shared helpers of the integration tests: the kit's server in a temp dir and polling, and
//! this crate's test data.
#![allow(dead_code)]

pub use mco_testkit::eventually;
pub use mco_testkit::server::{TestServer, start, start_with, status};

pub const MCN_CRD: &str = include_str!("../data/mcn-crd.yaml");
pub const MCN_WORKER_0: &str = include_str!("../data/mcn-worker-0.yaml");

/// An HTTP answer: its status, its `Warning` headers and its JSON body.
pub struct Answer {
    pub code: u16,
    pub warnings: Vec<String>,
    pub body: serde_json::Value,
}

impl Answer {
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }

    /// The Status's causes as (reason, field, message).
    pub fn causes(&self) -> Vec<(String, String, String)> {
        self.body["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (s("reason"), s("field"), s("message"))
            })
            .collect()
    }
}

pub async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: &str,
    body: &serde_json::Value,
) -> Answer {
    let body = match body {
        serde_json::Value::String(s) => s.clone().into_bytes(),
        serde_json::Value::Null => Vec::new(),
        other => serde_json::to_vec(other).unwrap(),
    };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(kube::client::Body::from(body))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    Answer {
        code,
        warnings,
        body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    }
}

/// Output as text, invalid UTF-8 replaced.
pub fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// The real kubectl for one server: its admin kubeconfig and a HOME of its own (so its
/// discovery cache is this server's alone).
pub struct Kubectl {
    pub kubeconfig: std::path::PathBuf,
    pub home: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(server: &TestServer) -> Kubectl {
        Kubectl::for_handle(&server.handle)
    }

    /// kubectl for a server started by hand (on a data directory kept from another).
    pub fn for_handle(handle: &mco_apiserver::ServerHandle) -> Kubectl {
        Kubectl {
            kubeconfig: handle.kubeconfig_path(),
            home: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Runs kubectl with `args`.
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.run_with_stdin(args, None)
    }

    /// Runs kubectl with `args`, `stdin` on its standard input.
    pub fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"));
        let mut input = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).expect("stdin written");
        }
        drop(input);
        child.wait_with_output().expect("kubectl ends")
    }

    /// Runs kubectl, expects success and returns its stdout.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    /// Runs kubectl with `stdin`, expects success and returns its stdout.
    #[track_caller]
    pub fn ok_with_stdin(&self, args: &[&str], stdin: &str) -> String {
        let o = self.run_with_stdin(args, Some(stdin));
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    /// Runs kubectl, expects it to fail and returns its stderr.
    #[track_caller]
    pub fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            !o.status.success(),
            "kubectl {args:?} succeeded: {}",
            text(&o.stdout)
        );
        text(&o.stderr)
    }
}

/// A server, an admin kube-rs client and kubectl for it: the set-up most tests start from.
pub struct Cluster {
    pub server: TestServer,
    pub client: kube::Client,
    pub kubectl: Kubectl,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let server = start().await;
        let client = server
            .handle
            .client_for(mco_apiserver::Identity::Admin)
            .await
            .expect("admin client");
        let kubectl = Kubectl::new(&server);
        Cluster {
            server,
            client,
            kubectl,
        }
    }

    /// [`Cluster::start`] with the namespace `ns` created by kubectl.
    pub async fn with_namespace(ns: &str) -> Cluster {
        let c = Cluster::start().await;
        c.kubectl.ok(&["create", "namespace", ns]);
        c
    }
}
