//! Leader election on a `coordination.k8s.io/v1` Lease, so that two replicas never reconcile at
//! once and a standby takes over within one lease duration when the leader dies.
//!
//! Every write goes through the Lease's resourceVersion (a replace, not a patch), so two
//! candidates racing for an expired lease cannot both win: the loser gets a 409.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// Where the lease lives and how long it lasts.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity, written as `holderIdentity`.
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub duration: Duration,
    /// How often the leader renews, and a standby retries.
    pub renew_interval: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            namespace: "kube-system".into(),
            name: "machine-config-controller".into(),
            identity: default_identity(),
            duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
        }
    }
}

/// Host name plus a random suffix, so two replicas on one host differ.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "mco".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{:08x}{:08x}", std::process::id(), nanos)
}

/// Whether `identity` may take (or keep) the lease at `now`: nobody holds it, we hold it, or the
/// holder has not renewed within its duration.
pub fn can_take(spec: &LeaseSpec, identity: &str, now: jiff::Timestamp) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || holder == identity {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    renewed.0 + jiff::SignedDuration::from_secs(secs) <= now
}

/// The lease spec after `identity` takes or renews it at `now`.
pub fn taken(spec: &LeaseSpec, cfg: &LeaseConfig, now: jiff::Timestamp) -> LeaseSpec {
    let same = spec.holder_identity.as_deref() == Some(cfg.identity.as_str());
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.duration.as_secs().max(1) as i32),
        acquire_time: if same {
            spec.acquire_time.clone()
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!same)),
        ..spec.clone()
    }
}

/// A Lease-based elector for one identity.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
}

impl Elector {
    pub fn new(client: kube::Client, cfg: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
        }
    }

    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    /// One attempt to take or renew the lease. `Ok(true)`: we hold it now.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = jiff::Timestamp::now();
        match self.api.get_opt(&self.cfg.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(taken(&LeaseSpec::default(), &self.cfg, now)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                if !can_take(&spec, &self.cfg.identity, now) {
                    return Ok(false);
                }
                lease.spec = Some(taken(&spec, &self.cfg, now));
                match self
                    .api
                    .replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Wait until this replica holds the lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    tracing::info!(identity = %self.cfg.identity, "acquired leader lease");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader lease"),
            }
            tokio::time::sleep(self.cfg.renew_interval).await;
        }
    }

    /// Keep renewing; returns when leadership is lost (another holder, or no successful renewal
    /// for a whole lease duration).
    pub async fn hold(&self) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.cfg.renew_interval).await;
            match self.try_acquire().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!("leader lease taken by another replica");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "renewing leader lease"),
            }
            if last_ok.elapsed() >= self.cfg.duration {
                tracing::warn!("could not renew leader lease in time");
                return;
            }
        }
    }

    /// Give the lease up on a clean shutdown so a standby need not wait for it to expire.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(self.cfg.identity.as_str()) {
                spec.holder_identity = None;
                let _ = self
                    .api
                    .replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await;
            }
        }
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn held_by(who: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.into()),
            lease_duration_seconds: Some(10),
            renew_time: Some(MicroTime(at(renewed))),
            ..Default::default()
        }
    }

    #[test]
    fn free_or_own_lease_can_be_taken() {
        assert!(can_take(&LeaseSpec::default(), "me", at(0)));
        assert!(can_take(&held_by("me", 0), "me", at(1)));
    }

    #[test]
    fn live_lease_of_another_cannot_be_taken_until_it_expires() {
        let spec = held_by("other", 0);
        assert!(!can_take(&spec, "me", at(9)));
        assert!(can_take(&spec, "me", at(10)));
    }

    #[test]
    fn taking_counts_transitions_and_keeps_acquire_time_on_renewal() {
        let cfg = LeaseConfig {
            identity: "me".into(),
            duration: Duration::from_secs(7),
            ..Default::default()
        };
        let first = taken(&held_by("other", 0), &cfg, at(20));
        assert_eq!(first.lease_transitions, Some(1));
        assert_eq!(first.acquire_time, Some(MicroTime(at(20))));
        assert_eq!(first.lease_duration_seconds, Some(7));
        let renewed = taken(&first, &cfg, at(25));
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(20))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(25))));
    }
}
