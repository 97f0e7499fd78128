//! The certificate writer's loop: watches the ControllerConfig and writes its CA bundles with
//! [`crate::engine::certs`] whenever its spec changes, beside the sync loop and never through it,
//! so a rotation lands without a drain or a reboot, on a paused pool too (upstream's second
//! daemon worker, `pkg/daemon/certificate_writer.go`).
//!
//! A status write does not rewrite anything: only a new spec is written. A failed write is
//! retried with the sync loop's backoff; a bundle skipped for bad input is reported once per
//! spec in an Event and the log.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use mco_api::ControllerConfigSpec;
use mco_api::constants::names;
use tokio::time::Instant;

use super::{Inner, blocking, due};
use crate::engine::NodeEvent;

pub(super) async fn run(inner: Arc<Inner>) {
    let cfg =
        watcher::Config::default().fields(&format!("metadata.name={}", names::CONTROLLER_CONFIG));
    let mut events = std::pin::pin!(
        mco_api::watch::watch(inner.controller_configs.clone(), cfg).default_backoff()
    );
    let mut latest: Option<(ControllerConfigSpec, String)> = None;
    let mut written: Option<ControllerConfigSpec> = None;
    let mut backoff = Duration::from_secs(1);
    let mut retry_at: Option<Instant> = None;
    loop {
        let due = due(retry_at);
        tokio::select! {
            ev = events.next() => match ev {
                None => return,
                Some(Ok(watcher::Event::Apply(cc) | watcher::Event::InitApply(cc))) => {
                    let rv = cc.metadata.resource_version.clone().unwrap_or_default();
                    if written.as_ref() != Some(&cc.spec) {
                        latest = Some((cc.spec, rv));
                        retry_at.get_or_insert_with(Instant::now);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "ControllerConfig watch"),
            },
            _ = due => {
                retry_at = None;
                let Some((spec, rv)) = latest.take() else { continue };
                if written.as_ref() == Some(&spec) {
                    continue;
                }
                let engine = Arc::clone(&inner.engine);
                let to_write = spec.clone();
                match blocking(move || engine.write_certificates(&to_write)).await {
                    Ok((changed, problems)) => {
                        if !changed.is_empty() {
                            tracing::info!(
                                changed = ?changed,
                                "Certificate was synced from controllerconfig resourceVersion {rv}"
                            );
                        }
                        if !problems.is_empty() {
                            let message = problems.join("; ");
                            tracing::warn!(%message, "ControllerConfig bundles skipped");
                            inner.event(NodeEvent::warning("CertificateWriteFailed", message));
                        }
                        written = Some(spec);
                        backoff = Duration::from_secs(1);
                    }
                    Err(e) => {
                        let message = format!("writing the ControllerConfig's certificates: {e}");
                        tracing::warn!(%message);
                        inner.event(NodeEvent::warning("CertificateWriteFailed", message));
                        latest = Some((spec, rv));
                        retry_at = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(inner.opts.max_backoff);
                    }
                }
            }
        }
    }
}
