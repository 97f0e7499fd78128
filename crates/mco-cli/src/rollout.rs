//! `mco rollout promote|halt|resume POOL` and `mco rollback POOL [--to rendered-…]`: the
//! pool annotations a `RolloutPolicy`'s controller reads, as pure patches, and the choice of the
//! config a rollback returns to.

use mco_api::rollouts::annotations;
use mco_api::{MachineConfig, MachineConfigPool};
use serde_json::{Value, json};

/// The time now, as the controls record it (RFC 3339).
pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// A manual control of a pool's rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Skip the canary and soak of the pool's current target.
    Promote,
    /// Target no new node.
    Halt,
    /// Undo a halt, and forgive the gate failures seen so far.
    Resume,
}

fn target(pool: &MachineConfigPool) -> Option<&str> {
    let pin = pool
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::ROLLBACK_TO))
        .filter(|s| !s.is_empty());
    pin.map(String::as_str).or_else(|| {
        pool.spec
            .configuration
            .as_ref()
            .map(|c| c.name.as_str())
            .filter(|s| !s.is_empty())
    })
}

/// The merge patch of the pool's metadata for `control` at `now` (RFC 3339).
pub fn control_patch(
    pool: &MachineConfigPool,
    control: Control,
    now: &str,
) -> Result<Value, String> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    Ok(match control {
        Control::Promote => {
            let t = target(pool)
                .ok_or_else(|| format!("pool {name} has no target config to promote yet"))?;
            json!({"metadata": {"annotations": {annotations::PROMOTE: t}}})
        }
        Control::Halt => json!({"metadata": {"annotations": {annotations::HALT: "true"}}}),
        Control::Resume => json!({"metadata": {"annotations": {
            annotations::HALT: null,
            annotations::RESUMED_AT: now,
        }}}),
    })
}

fn owned_by(mc: &MachineConfig, pool: &str) -> bool {
    mc.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with(&format!("rendered-{pool}-")))
}

/// The config `mco rollback` pins the pool to: `to` when given (a rendered config of this
/// pool), else the last config the whole pool completed (`status.configuration`) when it
/// differs from the target, else the newest rendered config of the pool older than the target.
pub fn rollback_target(
    pool: &MachineConfigPool,
    rendered: &[MachineConfig],
    to: Option<&str>,
) -> Result<String, String> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let current = target(pool).unwrap_or_default();
    if let Some(to) = to {
        return match rendered
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(to))
        {
            None => Err(format!("MachineConfig {to:?} not found")),
            Some(m) if !owned_by(m, name) => {
                Err(format!("{to:?} is not a rendered config of pool {name}"))
            }
            Some(_) => Ok(to.to_string()),
        };
    }
    let completed = pool
        .status
        .as_ref()
        .and_then(|s| s.configuration.as_ref())
        .map(|c| c.name.as_str())
        .filter(|c| !c.is_empty() && *c != current);
    if let Some(c) = completed
        && rendered
            .iter()
            .any(|m| m.metadata.name.as_deref() == Some(c))
    {
        return Ok(c.to_string());
    }
    let created = |m: &MachineConfig| m.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let current_created = rendered
        .iter()
        .find(|m| m.metadata.name.as_deref() == Some(current))
        .and_then(created);
    rendered
        .iter()
        .filter(|m| owned_by(m, name) && m.metadata.name.as_deref() != Some(current))
        .filter(|m| current_created.is_none_or(|c| created(m).is_some_and(|t| t < c)))
        .max_by_key(|m| (created(m), m.metadata.resource_version.clone()))
        .and_then(|m| m.metadata.name.clone())
        .ok_or_else(|| format!("pool {name} has no earlier rendered config to roll back to"))
}

/// The merge patch that pins the pool to `config`, resuming it (a rollback is meant to move).
pub fn rollback_patch(config: &str, now: &str) -> Value {
    json!({"metadata": {"annotations": {
        annotations::ROLLBACK_TO: config,
        annotations::HALT: null,
        annotations::RESUMED_AT: now,
    }}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use mco_api::{MachineConfigPoolSpec, MachineConfigPoolStatus, PoolConfiguration};

    fn rendered(name: &str, at: i64) -> MachineConfig {
        let mut m = MachineConfig::new(name, Default::default());
        m.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(at).unwrap()));
        m
    }

    fn pool(spec: &str, status: &str) -> MachineConfigPool {
        let conf = |n: &str| {
            (!n.is_empty()).then(|| PoolConfiguration {
                name: n.into(),
                source: vec![],
            })
        };
        let mut p = MachineConfigPool::new(
            "worker",
            MachineConfigPoolSpec {
                configuration: conf(spec),
                ..Default::default()
            },
        );
        p.status = Some(MachineConfigPoolStatus {
            configuration: conf(status),
            ..Default::default()
        });
        p
    }

    #[test]
    fn rollback_goes_to_the_last_completed_config_else_the_one_before() {
        let mcs = [
            rendered("rendered-worker-a", 1),
            rendered("rendered-worker-b", 2),
            rendered("rendered-worker-c", 3),
            rendered("rendered-infra-z", 4),
        ];
        assert_eq!(
            rollback_target(&pool("rendered-worker-c", "rendered-worker-a"), &mcs, None),
            Ok("rendered-worker-a".into())
        );
        assert_eq!(
            rollback_target(&pool("rendered-worker-c", "rendered-worker-c"), &mcs, None),
            Ok("rendered-worker-b".into())
        );
        assert_eq!(
            rollback_target(&pool("rendered-worker-a", "rendered-worker-a"), &mcs, None),
            Err("pool worker has no earlier rendered config to roll back to".into())
        );
        assert_eq!(
            rollback_target(
                &pool("rendered-worker-c", ""),
                &mcs,
                Some("rendered-infra-z")
            ),
            Err("\"rendered-infra-z\" is not a rendered config of pool worker".into())
        );
        assert_eq!(
            rollback_target(
                &pool("rendered-worker-c", ""),
                &mcs,
                Some("rendered-worker-x")
            ),
            Err("MachineConfig \"rendered-worker-x\" not found".into())
        );
    }

    #[test]
    fn controls_are_annotations() {
        let p = pool("rendered-worker-c", "");
        assert_eq!(
            control_patch(&p, Control::Promote, "t").unwrap(),
            json!({"metadata": {"annotations": {"rollouts.mco.dev/promote": "rendered-worker-c"}}})
        );
        assert_eq!(
            control_patch(&p, Control::Resume, "2026-01-01T00:00:00Z").unwrap(),
            json!({"metadata": {"annotations": {"rollouts.mco.dev/halt": null, "rollouts.mco.dev/resumed-at": "2026-01-01T00:00:00Z"}}})
        );
        assert!(control_patch(&pool("", ""), Control::Promote, "t").is_err());
    }
}
