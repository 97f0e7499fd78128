//! The render controller: one rendered config per pool, the pool's `spec.configuration`, the
//! `RenderDegraded` condition, and garbage collection of rendered configs no one needs.
//!
//! A rendered config carries the ControllerConfig's `release-image-version` annotation, as
//! upstream's: the release its OS image comes from. The name hashes the spec alone, so the
//! annotation never makes a new rendered config; an existing one whose annotation differs has
//! it set in place, as upstream re-applies the object it generates, and no node moves.

use std::sync::Arc;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use mco_api::constants::annotations::RELEASE_IMAGE_VERSION;
use mco_api::constants::{names, pool_conditions};
use mco_api::operator::MACHINE_CONFIGURATION_NAME;
use mco_api::{
    ControllerConfig, MachineConfig, MachineConfigPool, MachineConfiguration, PoolConfiguration,
};
use mco_render::reconcile::StorageOverrides;
use mco_rollout::gc;
use mco_rollout::plan::{EventKind, set_condition};
use serde_json::json;

use crate::Error;
use crate::ctx::{Ctx, update_pool_status};

/// Upstream's `RenderDegraded` message.
pub fn render_failure_message(pool: &str, err: &str) -> String {
    format!("Failed to render configuration for pool {pool}: {err}")
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// Set `RenderDegraded` (and the `Degraded` aggregate) on the pool's status, if it changes.
async fn set_render_degraded(ctx: &Ctx, pool: &str, message: Option<&str>) -> Result<(), Error> {
    let now = now();
    update_pool_status(ctx, pool, |p| {
        let mut status = p.status.clone().unwrap_or_default();
        let was = status.condition(pool_conditions::RENDER_DEGRADED).cloned();
        set_condition(
            &mut status.conditions,
            pool_conditions::RENDER_DEGRADED,
            message.is_some(),
            "",
            message.unwrap_or_default(),
            &now,
        );
        if status.condition(pool_conditions::RENDER_DEGRADED).cloned() == was && was.is_some() {
            return None;
        }
        let node_degraded = status
            .condition(pool_conditions::NODE_DEGRADED)
            .filter(|c| c.status == "True")
            .cloned();
        let (reason, msg) = match (&node_degraded, message) {
            (Some(c), _) => (c.reason.clone(), c.message.clone()),
            (None, Some(m)) => (String::new(), m.to_string()),
            (None, None) => (String::new(), String::new()),
        };
        set_condition(
            &mut status.conditions,
            pool_conditions::DEGRADED,
            node_degraded.is_some() || message.is_some(),
            &reason,
            &msg,
            &now,
        );
        Some(status)
    })
    .await
    .map(|_| ())
}

/// [`mco_render::render::render_pool`] on tokio's blocking pool: parsing, validating and
/// merging every selected MachineConfig is CPU work, and on a runtime thread it held up the
/// watches and the other controllers' reconciles for as long as it took.
async fn render_off_runtime(
    ctx: &Ctx,
    pool: &Arc<MachineConfigPool>,
    cc: &Arc<ControllerConfig>,
) -> Result<Result<mco_render::render::Rendered, mco_render::render::RenderError>, Error> {
    let (pool, cc, mcs) = (Arc::clone(pool), Arc::clone(cc), ctx.mcs.state());
    let version = ctx.config.controller_version.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        let all: Vec<MachineConfig> = mcs.iter().map(|m| (**m).clone()).collect();
        mco_render::render::render_pool(&pool, &all, &cc.spec, &version)
    })
    .await;
    match rendered {
        Ok(r) => Ok(r),
        // A panic in rendering stays a panic, as it was on the runtime thread.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Stale("rendering was cancelled".into())),
    }
}

/// Render one pool.
pub async fn reconcile(pool: Arc<MachineConfigPool>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let requeue = Action::requeue(ctx.config.resync);
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if pool.spec.machine_config_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    }) {
        ctx.publish(
            &pool.object_ref(&()),
            EventKind::Warning,
            "SelectingAll",
            "This machineconfigpool is selecting all MachineConfigs. A non-empty selector is required.",
        )
        .await;
        return Ok(requeue);
    }
    let Some(cc) = ctx.ccs.get(&ObjectRef::<ControllerConfig>::new(
        names::CONTROLLER_CONFIG,
    )) else {
        tracing::info!(pool = %name, "waiting for ControllerConfig {}", names::CONTROLLER_CONFIG);
        return Ok(requeue);
    };
    // The template controller wakes the render once its configs are written.
    if !crate::templates::in_cache(&ctx) {
        tracing::info!(pool = %name, "waiting for the template controller's MachineConfigs");
        return Ok(requeue);
    }
    let release = cc.annotations().get(RELEASE_IMAGE_VERSION).cloned();
    let rendered = match render_off_runtime(&ctx, &pool, &cc).await? {
        Ok(mut r) => {
            if let Some(v) = &release {
                r.machine_config
                    .annotations_mut()
                    .insert(RELEASE_IMAGE_VERSION.into(), v.clone());
            }
            r
        }
        Err(e) => {
            let message = render_failure_message(&name, &e.to_string());
            tracing::warn!(pool = %name, %message);
            set_render_degraded(&ctx, &name, Some(&message)).await?;
            return Ok(requeue);
        }
    };
    let target = rendered
        .machine_config
        .metadata
        .name
        .clone()
        .unwrap_or_default();

    let mcs: Api<MachineConfig> = Api::all(ctx.client.clone());
    // An unreconcilable change is caught here, before any node sees it: the pool keeps its
    // current target and reports why.
    let current = pool
        .spec
        .configuration
        .as_ref()
        .map(|c| c.name.clone())
        .filter(|n| !n.is_empty() && *n != target);
    if let Some(current) = current {
        let old = match ctx.mcs.get(&ObjectRef::new(&current)) {
            Some(m) => Some((*m).clone()),
            None => mcs.get_opt(&current).await?,
        };
        if let Some(old) = old {
            let check = |overrides| {
                mco_render::reconcile::check_machine_configs(
                    &old,
                    &rendered.machine_config,
                    overrides,
                )
            };
            let refused = match check(StorageOverrides::default()) {
                Ok(()) => None,
                // The administrator's overrides matter only for a change refused without them,
                // so the object is read only then.
                Err(_) => check(storage_overrides(&ctx).await).err(),
            };
            if let Some(e) = refused {
                let message = render_failure_message(&name, &e.to_string());
                tracing::warn!(pool = %name, %message);
                set_render_degraded(&ctx, &name, Some(&message)).await?;
                return Ok(requeue);
            }
        }
    }
    let existing = ctx.mcs.get(&ObjectRef::new(&target));
    if let (Some(mc), Some(v)) = (&existing, &release)
        && mc.annotations().get(RELEASE_IMAGE_VERSION) != Some(v)
    {
        // Metadata only: the spec, and so every node on the config, is untouched.
        let patch = json!({"metadata": {"annotations": {RELEASE_IMAGE_VERSION: v}}});
        match mcs
            .patch(&target, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(pool = %name, "{target}: release version {v}"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if existing.is_none() && mcs.get_opt(&target).await?.is_none() {
        let mut mc = rendered.machine_config.clone();
        mc.metadata.owner_references = Some(vec![mco_render::render::owner_reference(&pool)]);
        match mcs.create(&PostParams::default(), &mc).await {
            Ok(_) => {
                ctx.publish(
                    &pool.object_ref(&()),
                    EventKind::Normal,
                    "RenderedConfigGenerated",
                    &format!(
                        "{target} successfully generated (release version: {}, controller version: {})",
                        // Upstream's: the annotation; without it, the release image.
                        release.as_deref().unwrap_or(&cc.spec.release_image),
                        ctx.config.controller_version
                    ),
                )
                .await;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    let wanted = PoolConfiguration {
        name: target.clone(),
        source: rendered.source.clone(),
    };
    if pool.spec.configuration.as_ref() != Some(&wanted) {
        let pools: Api<MachineConfigPool> = Api::all(ctx.client.clone());
        let patch = json!({
            "metadata": {"resourceVersion": pool.metadata.resource_version},
            "spec": {"configuration": wanted},
        });
        match pools
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Err(Error::Stale(format!("pool {name} changed while rendering")));
            }
            Err(e) => return Err(e.into()),
        }
        if pool.spec.configuration.as_ref().map(|c| c.name.as_str()) != Some(target.as_str()) {
            tracing::info!(pool = %name, "now targeting: {target}");
        }
    }
    set_render_degraded(&ctx, &name, None).await?;
    collect_garbage(&ctx).await?;
    Ok(requeue)
}

/// Delete rendered configs nothing refers to any more, beyond the newest few per pool.
async fn collect_garbage(ctx: &Ctx) -> Result<(), Error> {
    let mcs: Vec<MachineConfig> = ctx.mcs.state().iter().map(|m| (**m).clone()).collect();
    let pools: Vec<MachineConfigPool> = ctx.pools.state().iter().map(|p| (**p).clone()).collect();
    let nodes = ctx.fresh_nodes();
    let api: Api<MachineConfig> = Api::all(ctx.client.clone());
    // The newest config is always kept: the pool cache may not show it as the target yet.
    for name in gc::to_delete(&mcs, &pools, &nodes, ctx.config.rendered_retain.max(1)) {
        tracing::info!("deleting unreferenced rendered config {name}");
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `MachineConfiguration/cluster`'s `spec.irreconcilableValidationOverrides.storage`; none when
/// the object (or its CRD) is missing or unreadable.
async fn storage_overrides(ctx: &Ctx) -> StorageOverrides {
    let api: Api<MachineConfiguration> = Api::all(ctx.client.clone());
    match api.get_opt(MACHINE_CONFIGURATION_NAME).await {
        Ok(o) => o
            .and_then(|o| o.spec.irreconcilable_validation_overrides)
            .map_or_else(StorageOverrides::default, |o| {
                StorageOverrides::from_names(&o.storage)
            }),
        Err(e) => {
            tracing::debug!(error = %e, "reading MachineConfiguration/cluster for its overrides");
            StorageOverrides::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn failure_message_is_upstreams() {
        assert_eq!(
            super::render_failure_message("worker", "boom"),
            "Failed to render configuration for pool worker: boom"
        );
    }
}
