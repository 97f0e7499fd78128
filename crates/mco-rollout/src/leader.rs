//! The leader lease's rules: where the `coordination.k8s.io/v1` Lease lives, when a replica may
//! take it, and what it writes when it does. The elector that reads and writes the Lease is
//! `mco_controller::leader::Elector`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

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
