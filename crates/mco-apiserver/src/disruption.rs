//! What kube's disruption controller computes: which pods a PodDisruptionBudget covers and
//! how many of them may be disrupted now. The eviction subresource decides by it, and the
//! server's PDB status loop writes it.

use mco_apimachinery::selector::LabelSelector;
use serde_json::{Value, json};

use crate::objects::{meta, meta_str};
use crate::store::Store;

pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Whether a PDB's selector picks this pod (same namespace assumed). An empty selector
/// selects every pod in policy/v1.
pub fn pdb_selects(pdb: &Value, pod: &Value) -> bool {
    match LabelSelector::from_k8s_field(pdb.pointer("/spec/selector")) {
        Ok(Some(sel)) => sel.matches_object(pod),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// `GetScaledValueFromIntOrPercent` with round-up, as the disruption controller uses it.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.parse::<i64>().ok().map(|p| (p * total + 99) / 100),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// The status the disruption controller would compute for this PDB right now.
pub fn pdb_status(store: &Store, pdb: &Value) -> Value {
    let ns = meta_str(pdb, "namespace").unwrap_or("");
    let (_, pods, _) = store.list("/pods", Some(ns), None, None, &|p| {
        pdb_selects(pdb, p)
            && !matches!(
                p.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
    });
    let expected = pods.len() as i64;
    let healthy = pods
        .iter()
        .filter(|p| pod_ready(p) && meta(p).get("deletionTimestamp").is_none_or(Value::is_null))
        .count() as i64;
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected).unwrap_or(0)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected).unwrap_or(0)).max(0)
    } else {
        0
    };
    let allowed = (healthy - desired).max(0);
    let generation = meta(pdb)
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let prev_cond = pdb
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .cloned();
    let status = if allowed > 0 { "True" } else { "False" };
    let reason = if allowed > 0 {
        "SufficientPods"
    } else {
        "InsufficientPods"
    };
    let ltt = prev_cond
        .as_ref()
        .filter(|c| c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(crate::objects::now_rfc3339()));
    json!({
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{"type": "DisruptionAllowed", "status": status, "reason": reason, "message": "",
            "observedGeneration": generation, "lastTransitionTime": ltt}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), Some(2));
        assert_eq!(scaled(&json!(2), 3), Some(2));
        assert_eq!(scaled(&json!("10%"), 0), Some(0));
    }

    #[test]
    fn selector_matching() {
        let pdb = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
        assert!(pdb_selects(
            &pdb,
            &json!({"metadata": {"labels": {"app": "web"}}})
        ));
        assert!(!pdb_selects(
            &pdb,
            &json!({"metadata": {"labels": {"app": "db"}}})
        ));
    }
}
