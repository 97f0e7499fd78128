//! Kubernetes label selectors, as typed in the API objects, read with mco-apimachinery's full
//! selector semantics.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sLabelSelector;
use mco_apimachinery::selector::{LabelSelector, SelectorError};

/// `sel` as a selector; `None` when absent.
pub fn parse(sel: Option<&K8sLabelSelector>) -> Result<Option<LabelSelector>, SelectorError> {
    let Some(sel) = sel else { return Ok(None) };
    let value = serde_json::to_value(sel).map_err(|e| SelectorError::Malformed(e.to_string()))?;
    LabelSelector::from_k8s(&value)
}

/// Whether `sel` matches `labels` by a pool's rule: an absent, empty or invalid selector
/// matches nothing.
pub fn pool_rule_matches(
    sel: Option<&K8sLabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let none = BTreeMap::new();
    matches!(parse(sel), Ok(Some(s)) if !s.is_empty() && s.matches(labels.unwrap_or(&none)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_pool_rule_matches_nothing_when_empty_or_absent() {
        let worker = labels(&[("role", "worker")]);
        let sel = |v: serde_json::Value| serde_json::from_value::<K8sLabelSelector>(v).unwrap();
        assert!(pool_rule_matches(
            Some(&sel(serde_json::json!({"matchLabels": {"role": "worker"}}))),
            Some(&worker)
        ));
        assert!(!pool_rule_matches(
            Some(&sel(serde_json::json!({"matchLabels": {"role": "master"}}))),
            Some(&worker)
        ));
        assert!(!pool_rule_matches(
            Some(&sel(serde_json::json!({}))),
            Some(&worker)
        ));
        assert!(!pool_rule_matches(None, Some(&worker)));
        assert!(!pool_rule_matches(
            Some(&sel(
                serde_json::json!({"matchExpressions": [{"key": "role", "operator": "Bogus"}]})
            )),
            Some(&worker)
        ));
    }
}
