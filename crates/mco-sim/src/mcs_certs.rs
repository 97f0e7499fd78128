//! `mco up`'s machine config server serves the certificate the controller keeps (the Secret
//! `mco-server-tls`, [`mco_controller::server_certs`]), as the shipped DaemonSet's pod does:
//! the Secret is projected into files the way the kubelet projects a Secret volume (a `..data`
//! link swapped in one rename, the files links into it), and the server picks a new one up
//! without a restart. New nodes trust the CA bundle (ConfigMap `machine-config-server-ca`),
//! kept in `<data-dir>/mcs/ca.crt`, as a machine's pointer Ignition carries it.
//!
//! Both objects are watched by name (a `metadata.name` field selector), so an idle `mco up`
//! makes no requests for them; a change is projected as its event arrives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use mco_api::constants::names::SERVER_CA;
use mco_api::constants::server_certs::BUNDLE_KEY;

/// How long the server waits, at the start, for the controller's first certificate.
pub const FIRST_WAIT: Duration = Duration::from_secs(60);
/// How soon a projection that failed (a write to disk) is tried again, when no event comes
/// sooner.
pub const RETRY: Duration = Duration::from_secs(5);

/// Where the projected files are.
#[derive(Debug, Clone)]
pub struct Projected {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA bundle new nodes trust.
    pub ca: PathBuf,
}

/// What was last projected: the Secret's resourceVersion and the bundle's text.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    secret: Option<String>,
    bundle: Option<String>,
}

/// The Secret `name` in `namespace`, projected into `dir`, and the bundle into `ca`.
pub struct Projector {
    secrets: Api<Secret>,
    maps: Api<ConfigMap>,
    name: String,
    dir: PathBuf,
    ca: PathBuf,
}

fn pair(s: &Secret) -> Option<(&[u8], &[u8])> {
    let d = s.data.as_ref()?;
    let (c, k) = (d.get("tls.crt")?, d.get("tls.key")?);
    (!c.0.is_empty() && !k.0.is_empty()).then_some((c.0.as_slice(), k.0.as_slice()))
}

impl Projector {
    pub fn new(client: kube::Client, namespace: &str, name: &str, dir: &Path, ca: &Path) -> Self {
        Projector {
            secrets: Api::namespaced(client.clone(), namespace),
            maps: Api::namespaced(client, namespace),
            name: name.to_string(),
            dir: dir.to_path_buf(),
            ca: ca.to_path_buf(),
        }
    }

    /// The files, once the Secret holds a pair and the bundle exists; `Err` past
    /// [`FIRST_WAIT`], saying what was missing.
    pub async fn first(&self, seen: &mut Seen) -> Result<Projected, String> {
        let deadline = tokio::time::Instant::now() + FIRST_WAIT;
        loop {
            match self.sync(seen).await {
                Ok(true) => {
                    return Ok(Projected {
                        cert: self.dir.join("tls.crt"),
                        key: self.dir.join("tls.key"),
                        ca: self.ca.clone(),
                    });
                }
                Ok(false) if tokio::time::Instant::now() < deadline => {}
                Ok(false) => {
                    return Err(format!(
                        "no certificate in Secret {}/{} nor bundle in ConfigMap {SERVER_CA} within {FIRST_WAIT:?}: is the controller keeping them (--server-certs-namespace)?",
                        self.secrets.namespace().unwrap_or_default(),
                        self.name
                    ));
                }
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Follows the Secret and the bundle until aborted: a watch of each by name, retried with
    /// backoff when it fails, projecting what each event changes. A deleted object leaves the
    /// files as they are, and its re-creation is projected as any change.
    pub async fn follow(self, mut seen: Seen) {
        enum Change {
            Secret(Option<Secret>),
            Bundle(Option<ConfigMap>),
        }
        let secrets = watch_object(self.secrets.clone(), &self.name)
            .default_backoff()
            .map(|r| r.map(Change::Secret));
        let maps = watch_object(self.maps.clone(), SERVER_CA)
            .default_backoff()
            .map(|r| r.map(Change::Bundle));
        let mut changes = std::pin::pin!(futures::stream::select(secrets, maps));
        let (mut secret, mut bundle) = (None, None);
        let mut retry = None;
        loop {
            let next = async move {
                match retry {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                change = changes.next() => match change {
                    Some(Ok(Change::Secret(s))) => secret = s,
                    Some(Ok(Change::Bundle(c))) => bundle = c.and_then(bundle_of),
                    Some(Err(e)) => {
                        tracing::warn!(
                            error = %e,
                            "machine config server certificate watch failed; retrying"
                        );
                        continue;
                    }
                    None => return,
                },
                () = next => {}
            }
            retry = match self.apply(secret.as_ref(), bundle.clone(), &mut seen) {
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "machine config server certificate not projected");
                    Some(tokio::time::Instant::now() + RETRY)
                }
            };
        }
    }

    /// Projects what changed since `seen`, as read now; whether both the pair and the bundle
    /// are there.
    async fn sync(&self, seen: &mut Seen) -> Result<bool, String> {
        let secret = self
            .secrets
            .get_opt(&self.name)
            .await
            .map_err(|e| e.to_string())?;
        let bundle = self
            .maps
            .get_opt(SERVER_CA)
            .await
            .map_err(|e| e.to_string())?
            .and_then(bundle_of);
        self.apply(secret.as_ref(), bundle, seen)
    }

    /// Projects what of `secret` and `bundle` changed since `seen`; whether both the pair and
    /// the bundle are there.
    fn apply(
        &self,
        secret: Option<&Secret>,
        bundle: Option<String>,
        seen: &mut Seen,
    ) -> Result<bool, String> {
        let (Some(secret), Some(bundle)) = (secret, bundle) else {
            return Ok(seen.secret.is_some() && seen.bundle.is_some());
        };
        let Some((crt, key)) = pair(secret) else {
            return Ok(seen.secret.is_some());
        };
        // The bundle first: a node joining meanwhile trusts the CA of the new pair.
        if seen.bundle.as_deref() != Some(bundle.as_str()) {
            write_atomic(&self.ca, bundle.as_bytes())
                .map_err(|e| format!("{}: {e}", self.ca.display()))?;
            seen.bundle = Some(bundle);
        }
        let rv = secret.metadata.resource_version.clone();
        if seen.secret != rv || seen.secret.is_none() {
            project(&self.dir, crt, key).map_err(|e| format!("{}: {e}", self.dir.display()))?;
            seen.secret = rv.or_else(|| Some(String::new()));
        }
        Ok(true)
    }
}

/// The CA bundle a ConfigMap holds, unless empty.
fn bundle_of(c: ConfigMap) -> Option<String> {
    c.data?.remove(BUNDLE_KEY).filter(|b| !b.trim().is_empty())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The kubelet's atomic projection of a Secret volume: the pair in a new timestamped
/// directory, `..data` pointed at it in one rename, `tls.crt` and `tls.key` links through
/// `..data`, and the previous directory removed.
pub fn project(dir: &Path, crt: &[u8], key: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, symlink};
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let stamp = format!("..{nanos}");
    let fresh = dir.join(&stamp);
    std::fs::create_dir(&fresh)?;
    for (name, bytes) in [("tls.crt", crt), ("tls.key", key)] {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(fresh.join(name))?;
        std::io::Write::write_all(&mut f, bytes)?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for name in ["tls.crt", "tls.key"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{name}"), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let n = entry.file_name();
        let n = n.to_string_lossy();
        if n.starts_with("..") && n != "..data" && n != stamp && entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_projection_swaps_the_pair_at_once_and_keeps_one_directory() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("tls");
        project(&dir, b"crt-1", b"key-1").unwrap();
        assert_eq!(std::fs::read(dir.join("tls.crt")).unwrap(), b"crt-1");
        assert_eq!(std::fs::read(dir.join("tls.key")).unwrap(), b"key-1");
        project(&dir, b"crt-2", b"key-2").unwrap();
        assert_eq!(std::fs::read(dir.join("tls.crt")).unwrap(), b"crt-2");
        assert_eq!(std::fs::read(dir.join("tls.key")).unwrap(), b"key-2");
        assert!(
            std::fs::symlink_metadata(dir.join("tls.crt"))
                .unwrap()
                .is_symlink()
        );
        let stamps: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().to_string_lossy().into_owned();
                (n.starts_with("..") && n != "..data").then_some(n)
            })
            .collect();
        assert_eq!(stamps.len(), 1, "{stamps:?}");
    }
}
