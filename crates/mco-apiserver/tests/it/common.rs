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
