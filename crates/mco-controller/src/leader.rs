//! Leader election on a `coordination.k8s.io/v1` Lease, so that two replicas never reconcile at
//! once and a standby takes over within one lease duration when the leader dies. The takeover
//! rule is [`mco_rollout::leader::can_take`].
//!
//! Every write goes through the Lease's resourceVersion (a replace, not a patch), so two
//! candidates racing for an expired lease cannot both win: the loser gets a 409.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use mco_rollout::leader::{LeaseConfig, can_take, taken};

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
