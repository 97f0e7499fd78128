//! Tiny runs of the in-process benchmarks, so CI notices when one stops working. The
//! figures are not checked against goals here: targets belong to the release runs.

use std::time::Duration;

use mco_bench::{fanout, writes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_bench_runs_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let r = writes::run(writes::WritesOpts {
        clients: 2,
        count: 20,
        value_bytes: 16,
        shared_client: false,
        batch: 8,
        max: Duration::from_secs(60),
        work_dir: dir.path().to_path_buf(),
    })
    .await
    .unwrap();
    assert_eq!(r.server.writes, 20);
    assert_eq!(
        (
            r.floor_own.writes,
            r.floor_shared.writes,
            r.floor_batched.writes
        ),
        (20, 20, 20)
    );
    assert!(
        r.row_bytes > 16,
        "row holds the object JSON: {}",
        r.row_bytes
    );
    assert_eq!(r.latency.map(|l| l.count), Some(20));
    assert!(r.to_string().contains("server / per-commit floor"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_bench_delivers_every_event_to_its_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let r = fanout::run(fanout::FanoutOpts {
        watchers: 3,
        updates: 12,
        writers: 2,
        max: Duration::from_secs(60),
        work_dir: dir.path().to_path_buf(),
    })
    .await
    .unwrap();
    assert_eq!((r.updates_acked, r.expected, r.delivered), (12, 12, 12));
    assert_eq!(r.from_ack.map(|s| s.count), Some(12));
}
