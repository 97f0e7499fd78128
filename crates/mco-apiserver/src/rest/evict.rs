//! The eviction subresource: a pod is deleted only if its PodDisruptionBudget allows it.

use axum::response::Response;
use serde_json::{Value, json};

use super::delete::{DeleteOpts, delete};
use super::encode::json_response;
use super::{App, Target};
use crate::disruption;
use crate::error::ApiError;
use crate::objects::{meta, meta_str};

pub(super) async fn evict(app: &App, t: &Target, body: &[u8]) -> Result<Response, ApiError> {
    let ns = t.ns_str().to_string();
    let name = t.name.clone().unwrap_or_default();
    let ev: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(n) = meta_str(&ev, "name").filter(|n| !n.is_empty() && *n != name) {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {n}"
        )));
    }
    let _guard = app.evict_lock.lock().await;
    let pod = app
        .store
        .get("/pods", &ns, &name)
        .ok_or_else(|| ApiError::not_found(&t.info.rref(), &name))?;
    let success = || {
        json_response(
            201,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    };
    if meta(&pod)
        .get("deletionTimestamp")
        .is_some_and(|d| !d.is_null())
    {
        return Ok(success());
    }
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let ignore_pdb = matches!(phase, "Succeeded" | "Failed" | "Pending");
    if !ignore_pdb {
        let (_, pdbs, _) = app.store.list(
            "policy/poddisruptionbudgets",
            Some(&ns),
            None,
            None,
            &|pdb| disruption::pdb_selects(pdb, &pod),
        );
        if pdbs.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = pdbs.first() {
            let st = disruption::pdb_status(&app.store, pdb);
            let allowed = st["disruptionsAllowed"].as_i64().unwrap_or(0);
            let healthy = disruption::pod_ready(&pod);
            if healthy && allowed <= 0 {
                let pdb_name = meta_str(pdb, "name").unwrap_or("");
                return Err(ApiError::new(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
                    .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": format!(
                        "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                        st["desiredHealthy"].as_i64().unwrap_or(0), st["currentHealthy"].as_i64().unwrap_or(0))}]})));
            }
        }
    }
    let dry = ev
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"));
    let opts = DeleteOpts {
        dry_run: dry,
        ..Default::default()
    };
    let info = app
        .registry
        .lookup("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not registered"))?;
    match delete(app, &info, &ns, &name, opts).await {
        Ok(_) => Ok(success()),
        Err(e) => Err(e),
    }
}
