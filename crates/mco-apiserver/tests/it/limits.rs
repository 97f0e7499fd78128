//! The server's limits hold against hostile clients: each is set small here so it is
//! reached in seconds.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{PostParams, WatchEvent, WatchParams};
use tokio::io::AsyncReadExt;

use crate::common::{self, eventually};

#[tokio::test]
async fn idle_connections_are_capped_and_closed_but_watches_stay() {
    let s = common::start_with(|mut c| {
        c.limits.max_connections = 50;
        c.limits.tls_handshake_timeout = Duration::from_secs(1);
        c.limits.idle_timeout = Duration::from_secs(1);
        c
    })
    .await;
    let client = s.admin().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A watch outlives the idle timeout: it is a request in flight.
    let mut watch = cms
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();

    // More silent connections than the cap: none sends a byte.
    let mut idle = Vec::new();
    for _ in 0..60 {
        idle.push(
            tokio::net::TcpStream::connect(s.handle.addr())
                .await
                .unwrap(),
        );
    }
    eventually("the cap is reached", 10, || async {
        (s.handle.open_connections() == 50).then_some(())
    })
    .await;

    // A client with a token is still served: the silent ones are dropped after the
    // handshake timeout and it gets a slot.
    let fresh = s.admin().await;
    eventually("/readyz answers", 20, || {
        let fresh = fresh.clone();
        async move {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
            let text = tokio::time::timeout(Duration::from_secs(5), fresh.request_text(req)).await;
            matches!(text, Ok(Ok(t)) if t == "ok").then_some(())
        }
    })
    .await;
    assert!(s.handle.open_connections() <= 50);

    // Every silent connection is closed by the server (EOF or reset).
    for (i, c) in idle.iter_mut().enumerate() {
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0) | Err(_))),
            "connection {i} still open: {r:?}"
        );
    }

    // The watch's connection was not idle: it still delivers.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
        "metadata": {"name": "after-idle"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = watch.next().await {
            if let Ok(WatchEvent::Added(cm)) = ev
                && cm.metadata.name.as_deref() == Some("after-idle")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch ended or missed the event");
    s.handle.shutdown().await;
}
