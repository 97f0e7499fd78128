//! The deployment controller's part for the simulated `web` Deployment, as pure functions: a
//! ReplicaSet per pod template (named by a template hash), revisions, the rolling update
//! between ReplicaSets, and the cleanup of old ones beyond `revisionHistoryLimit`.
//!
//! Simplified from kube-controller-manager: a change of `spec.replicas` during a rollout is not
//! spread proportionally over the ReplicaSets (the rolling steps take the new count), a
//! Recreate Deployment scales its old ReplicaSets to zero before the new one up without
//! waiting for their pods to be gone, and hash collisions are not looked for.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::ResourceExt;
use serde_json::{Map, Value, json};

/// The ReplicaSet and Deployment annotation of a template's revision.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The revisions a ReplicaSet had before a rollback made it current again.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The label a ReplicaSet and its pods carry: the hash of their template.
pub const HASH_LABEL: &str = "pod-template-hash";
/// The Deployment annotations kube does not copy to a new ReplicaSet.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas",
    "deprecated.deployment.rollback.to",
];

/// `rand.SafeEncodeString`'s alphabet: no vowels, no 0, 1 or 3, so no words.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// `v` with every object's keys sorted, so that equal templates print alike.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let out: Map<String, Value> = keys
                .into_iter()
                .map(|k| (k.clone(), canonical(&m[k])))
                .collect();
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// A pod template's `pod-template-hash`, as `controller.ComputeHash` makes it: FNV-32a, its
/// decimal value spelled with `rand.SafeEncodeString`'s alphabet, a collision count hashed in
/// after the template. kube hashes Go's dump of the template struct; this hashes its JSON
/// with sorted keys, so a template's hash is stable here but not the one kube would give.
pub fn template_hash(template: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&canonical(template)).unwrap_or_default();
    if let Some(c) = collision_count {
        let mut count = [0u8; 8];
        count[..4].copy_from_slice(&(c as u32).to_le_bytes());
        bytes.extend_from_slice(&count);
    }
    fnv32a(&bytes)
        .to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// A template without its `pod-template-hash` label (and without labels when that was the
/// only one), in canonical form: `EqualIgnoreHash`'s comparison.
fn ignoring_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.shift_remove(HASH_LABEL);
        if labels.is_empty()
            && let Some(m) = t.pointer_mut("/metadata").and_then(Value::as_object_mut)
        {
            m.shift_remove("labels");
        }
    }
    canonical(&t)
}

fn template_of_deployment(d: &Deployment) -> Value {
    d.spec
        .as_ref()
        .and_then(|s| serde_json::to_value(&s.template).ok())
        .unwrap_or(Value::Null)
}

fn template_of_rs(rs: &ReplicaSet) -> Value {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or(Value::Null)
}

/// Which of `rss` runs `d`'s template (`FindNewReplicaSet`: the oldest of those whose template
/// equals it but for the hash label).
pub fn find_new<'a>(d: &Deployment, rss: &[&'a ReplicaSet]) -> Option<&'a ReplicaSet> {
    let want = ignoring_hash(&template_of_deployment(d));
    rss.iter()
        .filter(|rs| ignoring_hash(&template_of_rs(rs)) == want)
        .min_by_key(|rs| {
            (
                rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
                rs.name_any(),
            )
        })
        .copied()
}

/// A ReplicaSet's revision (0 when it has none or one that is no number).
pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The revision the new ReplicaSet gets: one more than every other's.
pub fn next_revision<'a>(others: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    others.into_iter().map(revision).max().unwrap_or(0) + 1
}

/// The ReplicaSet the deployment controller creates for `d`'s template: named
/// `<deployment>-<hash>`, the hash label added to its selector and template, owned by `d`,
/// annotated with `revision`, the replica annotations and `d`'s own annotations, scaled to
/// `replicas`.
pub fn new_replicaset(d: &Deployment, revision: i64, replicas: i32, annotations: Value) -> Value {
    let mut template = template_of_deployment(d);
    let hash = template_hash(&template, d.status.as_ref().and_then(|s| s.collision_count));
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let labels = template["metadata"]["labels"].clone();
    let mut selector = d
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(&s.selector).ok())
        .unwrap_or_else(|| json!({}));
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let mut ann: Map<String, Value> = d
        .annotations()
        .iter()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    if let Some(extra) = annotations.as_object() {
        ann.extend(extra.clone());
    }
    ann.insert(REVISION.into(), json!(revision.to_string()));
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{}-{hash}", d.name_any()),
            "namespace": d.namespace(),
            "labels": labels,
            "annotations": ann,
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": d.name_any(),
                "uid": d.uid().unwrap_or_default(),
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": d.spec.as_ref().and_then(|s| s.min_ready_seconds),
            "selector": selector,
            "template": template
        }
    })
}

/// The revision annotations of an existing ReplicaSet that becomes the new one again
/// (`SetNewReplicaSetAnnotations`): a lower revision is raised to `revision`, the old one kept
/// in the revision history. `None` when it already has it.
pub fn revision_annotations(rs: &ReplicaSet, revision: i64) -> Option<Value> {
    let ann = rs.annotations();
    let old = ann.get(REVISION);
    let old_rev: i64 = match old {
        None => 0,
        Some(r) => r.parse().ok()?,
    };
    if old_rev >= revision {
        return None;
    }
    let mut out = json!({ REVISION: revision.to_string() });
    if let Some(old) = old {
        let history = match ann.get(REVISION_HISTORY).filter(|h| !h.is_empty()) {
            Some(h) => format!("{h},{old}"),
            None => old.clone(),
        };
        out[REVISION_HISTORY] = json!(history);
    }
    Some(out)
}

/// A ReplicaSet's replicas and available pods, as one rolling step sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RsCount {
    /// `spec.replicas`.
    pub spec: i32,
    /// Its available pods.
    pub available: i32,
}

/// One sync of `rolloutRolling` on the counts: the new ReplicaSet scaled up as far as
/// `want + surge` pods in all allow (or down to `want`); if it did not move, the old ones
/// (oldest first) scaled down as far as `want - max_unavailable` available pods allow, their
/// unavailable pods first. Returns the new ReplicaSet's replicas and the old ones'.
pub fn rolling_step(
    want: i32,
    surge: i32,
    max_unavailable: i32,
    new: RsCount,
    olds: &[RsCount],
) -> (i32, Vec<i32>) {
    let mut old_specs: Vec<i32> = olds.iter().map(|o| o.spec).collect();
    let old_total: i32 = old_specs.iter().sum();
    if new.spec > want {
        return (want, old_specs);
    }
    if new.spec < want {
        let up = (want.saturating_add(surge) - new.spec - old_total).min(want - new.spec);
        if up > 0 {
            return (new.spec + up, old_specs);
        }
    }
    if old_total == 0 {
        return (new.spec, old_specs);
    }
    let min_available = want - max_unavailable;
    let new_unavailable = new.spec - new.available;
    let max_down = new.spec + old_total - min_available - new_unavailable;
    if max_down <= 0 {
        return (new.spec, old_specs);
    }
    // Unhealthy replicas first: they would otherwise block the rollout.
    let mut cleaned = 0;
    for (spec, o) in old_specs.iter_mut().zip(olds) {
        if cleaned >= max_down {
            break;
        }
        let down = (max_down - cleaned).min(*spec - o.available).max(0);
        *spec -= down;
        cleaned += down;
    }
    let available: i32 = new.available + olds.iter().map(|o| o.available).sum::<i32>();
    let mut left = available - min_available;
    for spec in old_specs.iter_mut() {
        if left <= 0 {
            break;
        }
        let down = (*spec).min(left);
        *spec -= down;
        left -= down;
    }
    (new.spec, old_specs)
}

/// Which old ReplicaSets `cleanupDeployment` deletes once a rollout is complete: the
/// lowest revisions beyond `limit`, of those scaled to zero with no pods left.
pub fn to_clean_up<'a>(olds: &[(&'a ReplicaSet, i32)], limit: i32) -> Vec<&'a ReplicaSet> {
    let mut alive: Vec<&(&ReplicaSet, i32)> = olds
        .iter()
        .filter(|(rs, _)| rs.metadata.deletion_timestamp.is_none())
        .collect();
    let extra = alive.len() as i64 - i64::from(limit);
    if extra <= 0 {
        return Vec::new();
    }
    alive.sort_by_key(|(rs, _)| (revision(rs), rs.name_any()));
    alive
        .into_iter()
        .take(extra as usize)
        .filter(|(rs, pods)| *pods == 0 && rs.spec.as_ref().and_then(|s| s.replicas) == Some(0))
        .map(|(rs, _)| *rs)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy(image: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d-uid",
                         "annotations": {"kubernetes.io/change-cause": "why", REVISION: "4"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}
                }
            }
        }))
        .unwrap()
    }

    fn rs(v: Value) -> ReplicaSet {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_hash_is_fnv32a_in_safe_letters_and_ignores_key_order() {
        // FNV-32a's published vectors.
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        let a = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"x": 1, "y": 2}});
        let b = json!({"spec": {"y": 2, "x": 1}, "metadata": {"labels": {"app": "web"}}});
        let h = template_hash(&a, None);
        assert_eq!(h, template_hash(&b, None));
        assert!(h.len() <= 10 && !h.is_empty(), "{h}");
        assert!(h.bytes().all(|c| ALPHANUMS.contains(&c)), "{h}");
        assert_ne!(h, template_hash(&a, Some(1)));
        assert_ne!(h, template_hash(&json!({"spec": {"x": 2}}), None));
    }

    #[test]
    fn a_new_replicaset_carries_the_hash_revision_and_owner() {
        let d = deploy("img:2");
        let v = new_replicaset(
            &d,
            5,
            1,
            json!({"deployment.kubernetes.io/desired-replicas": "3"}),
        );
        let hash = template_hash(&template_of_deployment(&d), None);
        assert_eq!(v["metadata"]["name"], format!("web-{hash}"));
        assert_eq!(v["metadata"]["labels"][HASH_LABEL], hash);
        assert_eq!(v["spec"]["selector"]["matchLabels"][HASH_LABEL], hash);
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"][HASH_LABEL],
            hash
        );
        assert_eq!(v["spec"]["replicas"], 1);
        let ann = &v["metadata"]["annotations"];
        assert_eq!(ann[REVISION], "5");
        assert_eq!(ann["kubernetes.io/change-cause"], "why");
        assert_eq!(ann["deployment.kubernetes.io/desired-replicas"], "3");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "d-uid");
        // It runs the Deployment's template; another image's does not.
        let made = rs(v);
        assert!(find_new(&d, &[&made]).is_some());
        assert!(find_new(&deploy("img:3"), &[&made]).is_none());
    }

    #[test]
    fn revisions_count_up_and_a_rollback_keeps_the_old_one() {
        let at = |r: &str| {
            rs(json!({"metadata": {"name": format!("web-{r}"),
                                   "annotations": {REVISION: r}}}))
        };
        let (one, two) = (at("1"), at("2"));
        assert_eq!(next_revision([&one, &two]), 3);
        assert_eq!(next_revision([]), 1);
        assert_eq!(revision_annotations(&two, 2), None);
        assert_eq!(
            revision_annotations(&one, 3),
            Some(json!({REVISION: "3", REVISION_HISTORY: "1"}))
        );
        let mut again = one.clone();
        again.metadata.annotations = Some(
            [
                (REVISION.to_string(), "3".to_string()),
                (REVISION_HISTORY.to_string(), "1".to_string()),
            ]
            .into(),
        );
        assert_eq!(
            revision_annotations(&again, 5),
            Some(json!({REVISION: "5", REVISION_HISTORY: "1,3"}))
        );
        let bare = rs(json!({"metadata": {"name": "web-x"}}));
        assert_eq!(revision_annotations(&bare, 1), Some(json!({REVISION: "1"})));
    }

    fn n(spec: i32, available: i32) -> RsCount {
        RsCount { spec, available }
    }

    #[test]
    fn a_rolling_update_of_3_at_25_percent_surges_one_and_keeps_3_available() {
        // 25% of 3: surge 1, unavailable 0.
        let step = |new, olds: &[RsCount]| rolling_step(3, 1, 0, new, olds);
        assert_eq!(step(n(0, 0), &[n(3, 3)]), (1, vec![3]));
        // Nothing more until the new pod is available.
        assert_eq!(step(n(1, 0), &[n(3, 3)]), (1, vec![3]));
        assert_eq!(step(n(1, 1), &[n(3, 3)]), (1, vec![2]));
        assert_eq!(step(n(1, 1), &[n(2, 2)]), (2, vec![2]));
        assert_eq!(step(n(2, 2), &[n(2, 2)]), (2, vec![1]));
        assert_eq!(step(n(2, 2), &[n(1, 1)]), (3, vec![1]));
        assert_eq!(step(n(3, 3), &[n(1, 1)]), (3, vec![0]));
        assert_eq!(step(n(3, 3), &[n(0, 0)]), (3, vec![0]));
        // A lone ReplicaSet just follows the count.
        assert_eq!(step(n(7, 7), &[]), (3, vec![]));
        assert_eq!(rolling_step(5, 2, 1, n(3, 3), &[]), (5, vec![]));
    }

    #[test]
    fn unavailable_old_pods_go_first_and_the_oldest_set_before_newer() {
        // Surge 0, one may be down: the old sets' unavailable pod goes before available ones.
        assert_eq!(
            rolling_step(4, 0, 1, n(0, 0), &[n(2, 1), n(2, 2)]),
            (0, vec![1, 2])
        );
        assert_eq!(
            rolling_step(4, 0, 1, n(0, 0), &[n(2, 2), n(2, 2)]),
            (0, vec![1, 2])
        );
        // Recreate as the sim plays it: surge 0, all may go.
        assert_eq!(rolling_step(3, 0, 3, n(0, 0), &[n(3, 3)]), (0, vec![0]));
        assert_eq!(rolling_step(3, 0, 3, n(0, 0), &[n(0, 0)]), (3, vec![0]));
    }

    #[test]
    fn cleanup_keeps_the_history_limit_and_sets_with_pods() {
        let at = |r: i32, replicas: i32| {
            rs(json!({"metadata": {"name": format!("web-{r}"),
                                   "annotations": {REVISION: r.to_string()}},
                      "spec": {"replicas": replicas, "selector": {}}}))
        };
        let sets = [at(3, 0), at(1, 0), at(2, 0), at(4, 1)];
        let olds: Vec<(&ReplicaSet, i32)> = sets.iter().map(|r| (r, 0)).collect();
        let names = |v: Vec<&ReplicaSet>| v.iter().map(|r| r.name_any()).collect::<Vec<_>>();
        assert_eq!(names(to_clean_up(&olds, 2)), ["web-1", "web-2"]);
        assert!(to_clean_up(&olds, 4).is_empty());
        // One with pods left or replicas is kept even beyond the limit.
        let olds: Vec<(&ReplicaSet, i32)> = sets.iter().map(|r| (r, 1)).collect();
        assert!(to_clean_up(&olds, 0).is_empty());
        let olds = [(&sets[3], 0)];
        assert!(to_clean_up(&olds, 0).is_empty());
    }
}
