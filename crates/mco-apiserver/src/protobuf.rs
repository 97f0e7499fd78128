//! Just enough of the Kubernetes protobuf encoding to accept the bodies kubectl's typed
//! generators send (`kubectl create configmap|secret|namespace`): the `k8s\0` envelope
//! around `runtime.Unknown`, ObjectMeta's plain fields, and those three kinds; and the access
//! reviews `kubectl auth can-i` sends (SelfSubjectAccessReview, SelfSubjectRulesReview), and
//! the TokenRequest of `kubectl create token`, the ServiceAccount and PodDisruptionBudget of
//! `kubectl create serviceaccount|poddisruptionbudget`, and the SelfSubjectReview of
//! `kubectl auth whoami`; and the Role, ClusterRole, RoleBinding, ClusterRoleBinding and
//! Deployment of `kubectl create role|clusterrole|rolebinding|clusterrolebinding|deployment`.
//!
//! Each kind is mapped to the JSON kube-apiserver's decoder would have produced: Go writes
//! every non-pointer field, so empty strings, `false` and zeros arrive and are left out where
//! the field's JSON is `omitempty`. Where a pod template carries a field this module does not
//! know, the body is not decoded (and so refused with 415) rather than stored without it.

use base64::Engine;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// One decoded field: its number and either a varint or a byte slice.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn fields(buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (num, wire) = (key >> 3, key & 7);
        match wire {
            0 => out.push((num, Field::Varint(varint(buf, &mut pos)?))),
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len)?;
                out.push((num, Field::Bytes(buf.get(pos..end)?)));
                pos = end;
            }
            1 => pos = pos.checked_add(8)?,
            5 => pos = pos.checked_add(4)?,
            _ => return None,
        }
    }
    Some(out)
}

fn text(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

/// A `map<string, string|bytes>` entry.
fn entry(b: &[u8], bytes_value: bool) -> Option<(String, Value)> {
    let mut k = String::new();
    let mut v = Value::String(String::new());
    for (n, f) in fields(b)? {
        if let Field::Bytes(x) = f {
            match n {
                1 => k = text(x)?,
                2 if bytes_value => {
                    v = Value::String(base64::engine::general_purpose::STANDARD.encode(x))
                }
                2 => v = Value::String(text(x)?),
                _ => {}
            }
        }
    }
    Some((k, v))
}

fn object_meta(b: &[u8]) -> Option<Value> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) if !x.is_empty() => {
                m.insert("name".into(), json!(text(x)?));
            }
            (2, Field::Bytes(x)) if !x.is_empty() => {
                m.insert("generateName".into(), json!(text(x)?));
            }
            (3, Field::Bytes(x)) if !x.is_empty() => {
                m.insert("namespace".into(), json!(text(x)?));
            }
            (11, Field::Bytes(x)) => {
                let (k, v) = entry(x, false)?;
                labels.insert(k, v);
            }
            (12, Field::Bytes(x)) => {
                let (k, v) = entry(x, false)?;
                annotations.insert(k, v);
            }
            (14, Field::Bytes(x)) => finalizers.push(json!(text(x)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Some(Value::Object(m))
}

/// Decodes a protobuf body of one of the kinds above into JSON; `None` for anything else.
pub fn decode(body: &[u8]) -> Option<Value> {
    let unknown = fields(body.strip_prefix(MAGIC)?)?;
    let (mut kind, mut api_version, mut raw) = (String::new(), String::new(), None);
    for (n, f) in unknown {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm)? {
                    match (tn, tf) {
                        (1, Field::Bytes(x)) => api_version = text(x)?,
                        (2, Field::Bytes(x)) => kind = text(x)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(r)) => raw = Some(r),
            _ => {}
        }
    }
    if api_version == "authorization.k8s.io/v1" {
        return review(&api_version, &kind, raw?);
    }
    if api_version == "authentication.k8s.io/v1" && kind == "TokenRequest" {
        return token_request(raw?);
    }
    if api_version == "authentication.k8s.io/v1" && kind == "SelfSubjectReview" {
        return self_subject_review(raw?);
    }
    if api_version == "policy/v1" && kind == "PodDisruptionBudget" {
        return pod_disruption_budget(raw?);
    }
    if api_version == RBAC_V1 {
        return rbac(&kind, raw?);
    }
    if api_version == "apps/v1" && kind == "Deployment" {
        return deployment(raw?);
    }
    if api_version != "v1" {
        return None;
    }
    let raw = raw?;
    if kind == "ServiceAccount" {
        return service_account(raw);
    }
    let mut obj = json!({"apiVersion": "v1", "kind": kind});
    let mut data = Map::new();
    let mut string_data = Map::new();
    let mut binary = Map::new();
    for (n, f) in fields(raw)? {
        match (kind.as_str(), n, f) {
            (_, 1, Field::Bytes(x)) => obj["metadata"] = object_meta(x)?,
            ("ConfigMap", 2, Field::Bytes(x)) => {
                let (k, v) = entry(x, false)?;
                data.insert(k, v);
            }
            ("ConfigMap", 3, Field::Bytes(x)) => {
                let (k, v) = entry(x, true)?;
                binary.insert(k, v);
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                obj["immutable"] = json!(v != 0)
            }
            ("Secret", 2, Field::Bytes(x)) => {
                let (k, v) = entry(x, true)?;
                data.insert(k, v);
            }
            ("Secret", 3, Field::Bytes(x)) => obj["type"] = json!(text(x)?),
            ("Secret", 4, Field::Bytes(x)) => {
                let (k, v) = entry(x, false)?;
                string_data.insert(k, v);
            }
            ("Namespace", _, _) => {}
            ("ConfigMap" | "Secret", _, _) => {}
            _ => return None,
        }
    }
    if !matches!(kind.as_str(), "ConfigMap" | "Secret" | "Namespace") {
        return None;
    }
    if !data.is_empty() {
        obj["data"] = Value::Object(data);
    }
    if !binary.is_empty() {
        obj["binaryData"] = Value::Object(binary);
    }
    if !string_data.is_empty() {
        obj["stringData"] = Value::Object(string_data);
    }
    Some(obj)
}

/// A ServiceAccount (core/v1's `generated.proto`): `secrets` (2, ObjectReferences),
/// `imagePullSecrets` (3, LocalObjectReferences) and `automountServiceAccountToken` (4, sent
/// only when set).
fn service_account(raw: &[u8]) -> Option<Value> {
    let mut obj = json!({"apiVersion": "v1", "kind": "ServiceAccount"});
    let (mut secrets, mut pull) = (Vec::new(), Vec::new());
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => obj["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => secrets.push(strings(
                x,
                &[
                    (1, "kind"),
                    (2, "namespace"),
                    (3, "name"),
                    (4, "uid"),
                    (5, "apiVersion"),
                    (6, "resourceVersion"),
                    (7, "fieldPath"),
                ],
            )?),
            (3, Field::Bytes(x)) => pull.push(strings(x, &[(1, "name")])?),
            (4, Field::Varint(v)) => obj["automountServiceAccountToken"] = json!(v != 0),
            _ => {}
        }
    }
    if !secrets.is_empty() {
        obj["secrets"] = Value::Array(secrets);
    }
    if !pull.is_empty() {
        obj["imagePullSecrets"] = Value::Array(pull);
    }
    Some(obj)
}

/// An IntOrString (`util/intstr`): `type` (1: 0 int, 1 string), `intVal` (2), `strVal` (3).
fn int_or_string(b: &[u8]) -> Option<Value> {
    let (mut is_string, mut int, mut string) = (false, 0i32, String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Varint(t)) => is_string = t == 1,
            // int32 on the wire: a negative value is sign-extended to 64 bits.
            (2, Field::Varint(v)) => int = v as i64 as i32,
            (3, Field::Bytes(x)) => string = text(x)?,
            _ => {}
        }
    }
    Some(if is_string { json!(string) } else { json!(int) })
}

/// A LabelSelector (meta/v1): `matchLabels` (1, a map) and `matchExpressions` (2: key 1,
/// operator 2, values 3).
fn label_selector(b: &[u8]) -> Option<Value> {
    let (mut labels, mut exprs) = (Map::new(), Vec::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => {
                let (k, v) = entry(x, false)?;
                labels.insert(k, v);
            }
            (2, Field::Bytes(x)) => {
                let mut req = Map::new();
                let mut values = Vec::new();
                for (rn, rf) in fields(x)? {
                    match (rn, rf) {
                        (1, Field::Bytes(k)) => {
                            req.insert("key".into(), json!(text(k)?));
                        }
                        (2, Field::Bytes(o)) => {
                            req.insert("operator".into(), json!(text(o)?));
                        }
                        (3, Field::Bytes(v)) => values.push(json!(text(v)?)),
                        _ => {}
                    }
                }
                if !values.is_empty() {
                    req.insert("values".into(), Value::Array(values));
                }
                exprs.push(Value::Object(req));
            }
            _ => {}
        }
    }
    let mut sel = Map::new();
    if !labels.is_empty() {
        sel.insert("matchLabels".into(), Value::Object(labels));
    }
    if !exprs.is_empty() {
        sel.insert("matchExpressions".into(), Value::Array(exprs));
    }
    Some(Value::Object(sel))
}

/// A PodDisruptionBudget (policy/v1's `generated.proto`): spec's `minAvailable` (1),
/// `selector` (2), `maxUnavailable` (3) and `unhealthyPodEvictionPolicy` (4), each sent only
/// when set; the status a client sends (3) is dropped, as the server writes it.
fn pod_disruption_budget(raw: &[u8]) -> Option<Value> {
    let mut obj = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "spec": {}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => obj["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                for (sn, sf) in fields(x)? {
                    let Field::Bytes(v) = sf else { continue };
                    match sn {
                        1 => obj["spec"]["minAvailable"] = int_or_string(v)?,
                        2 => obj["spec"]["selector"] = label_selector(v)?,
                        3 => obj["spec"]["maxUnavailable"] = int_or_string(v)?,
                        4 => obj["spec"]["unhealthyPodEvictionPolicy"] = json!(text(v)?),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(obj)
}

/// A SelfSubjectReview (authentication/v1) has only metadata to send; its status is the
/// server's answer, so whatever a client put there is dropped.
fn self_subject_review(raw: &[u8]) -> Option<Value> {
    let mut obj = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
        "metadata": {}});
    for (n, f) in fields(raw)? {
        if let (1, Field::Bytes(x)) = (n, f) {
            obj["metadata"] = object_meta(x)?;
        }
    }
    Some(obj)
}

/// The string fields of a message by number, as JSON under their names; empty strings (which
/// the protobuf encoding always carries) are left out, as JSON's `omitempty` does.
fn strings(b: &[u8], names: &[(u64, &str)]) -> Option<Value> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        if let (Some((_, name)), Field::Bytes(x)) = (names.iter().find(|(k, _)| *k == n), f)
            && !x.is_empty()
        {
            m.insert(name.to_string(), json!(text(x)?));
        }
    }
    Some(Value::Object(m))
}

/// A SelfSubjectAccessReview's or SelfSubjectRulesReview's spec (authorization/v1's
/// `generated.proto`); `None` for other kinds of the group.
fn review(api_version: &str, kind: &str, raw: &[u8]) -> Option<Value> {
    let mut obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {}, "spec": {}});
    for (n, f) in fields(raw)? {
        let (n, Field::Bytes(x)) = (n, f) else {
            continue;
        };
        match (kind, n) {
            (_, 1) => obj["metadata"] = object_meta(x)?,
            ("SelfSubjectAccessReview", 2) => {
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(r)) => {
                            obj["spec"]["resourceAttributes"] = strings(
                                r,
                                &[
                                    (1, "namespace"),
                                    (2, "verb"),
                                    (3, "group"),
                                    (4, "version"),
                                    (5, "resource"),
                                    (6, "subresource"),
                                    (7, "name"),
                                ],
                            )?
                        }
                        (2, Field::Bytes(r)) => {
                            obj["spec"]["nonResourceAttributes"] =
                                strings(r, &[(1, "path"), (2, "verb")])?
                        }
                        _ => {}
                    }
                }
            }
            ("SelfSubjectRulesReview", 2) => obj["spec"] = strings(x, &[(1, "namespace")])?,
            ("SelfSubjectAccessReview" | "SelfSubjectRulesReview", _) => {}
            _ => return None,
        }
    }
    matches!(kind, "SelfSubjectAccessReview" | "SelfSubjectRulesReview").then_some(obj)
}

/// A TokenRequest (authentication/v1's `generated.proto`): `spec.audiences` (1),
/// `spec.boundObjectRef` (3) and `spec.expirationSeconds` (4, set only when the caller chose
/// one); the status a client may send is dropped, as the server writes it.
fn token_request(raw: &[u8]) -> Option<Value> {
    let mut obj = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": {}, "spec": {}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => obj["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                let mut audiences = Vec::new();
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Bytes(a)) => audiences.push(json!(text(a)?)),
                        (3, Field::Bytes(r)) => {
                            obj["spec"]["boundObjectRef"] = strings(
                                r,
                                &[(1, "kind"), (2, "apiVersion"), (3, "name"), (4, "uid")],
                            )?
                        }
                        // int64 on the wire: a negative value is its two's complement.
                        (4, Field::Varint(v)) => obj["spec"]["expirationSeconds"] = json!(v as i64),
                        _ => {}
                    }
                }
                if !audiences.is_empty() {
                    obj["spec"]["audiences"] = Value::Array(audiences);
                }
            }
            _ => {}
        }
    }
    Some(obj)
}

const RBAC_V1: &str = "rbac.authorization.k8s.io/v1";

/// The repeated strings of a field, in order.
fn repeated(list: &mut Vec<Value>, x: &[u8]) -> Option<()> {
    list.push(json!(text(x)?));
    Some(())
}

/// An int32 field: a negative value arrives sign-extended to 64 bits.
fn int32(v: u64) -> Value {
    json!(v as i64 as i32)
}

/// A PolicyRule (rbac/v1's `generated.proto`): `verbs` (1, always in JSON, `null` when none,
/// as Go writes a nil slice), `apiGroups` (2), `resources` (3), `resourceNames` (4) and
/// `nonResourceURLs` (5), each left out when empty.
fn policy_rule(b: &[u8]) -> Option<Value> {
    let mut lists: [Vec<Value>; 5] = Default::default();
    for (n, f) in fields(b)? {
        if let (1..=5, Field::Bytes(x)) = (n, f) {
            repeated(&mut lists[n as usize - 1], x)?;
        }
    }
    let [verbs, groups, resources, names, urls] = lists;
    let mut rule = Map::new();
    rule.insert(
        "verbs".into(),
        if verbs.is_empty() {
            Value::Null
        } else {
            Value::Array(verbs)
        },
    );
    for (key, list) in [
        ("apiGroups", groups),
        ("resources", resources),
        ("resourceNames", names),
        ("nonResourceURLs", urls),
    ] {
        if !list.is_empty() {
            rule.insert(key.into(), Value::Array(list));
        }
    }
    Some(Value::Object(rule))
}

/// The four kinds of rbac/v1 kubectl creates: a Role's and ClusterRole's `rules` (2, `null`
/// when none, as for an aggregated ClusterRole) and a ClusterRole's `aggregationRule` (3:
/// `clusterRoleSelectors`, 1); a binding's `subjects` (2: kind 1, apiGroup 2, name 3,
/// namespace 4) and `roleRef` (3: apiGroup 1, kind 2, name 3; its fields always in JSON).
/// `None` for the group's other kinds.
fn rbac(kind: &str, raw: &[u8]) -> Option<Value> {
    let binding = match kind {
        "Role" | "ClusterRole" => false,
        "RoleBinding" | "ClusterRoleBinding" => true,
        _ => return None,
    };
    let mut obj = json!({"apiVersion": RBAC_V1, "kind": kind, "metadata": {}});
    let (mut list, mut selectors, mut aggregation) = (Vec::new(), Vec::new(), false);
    let mut role_ref = json!({"apiGroup": "", "kind": "", "name": ""});
    for (n, f) in fields(raw)? {
        let Field::Bytes(x) = f else { continue };
        match (n, binding) {
            (1, _) => obj["metadata"] = object_meta(x)?,
            (2, false) => list.push(policy_rule(x)?),
            (2, true) => {
                let mut subject = strings(
                    x,
                    &[(1, "kind"), (2, "apiGroup"), (3, "name"), (4, "namespace")],
                )?;
                for key in ["kind", "name"] {
                    if subject.get(key).is_none() {
                        subject[key] = json!("");
                    }
                }
                list.push(subject);
            }
            (3, false) if kind == "ClusterRole" => {
                aggregation = true;
                for (an, af) in fields(x)? {
                    if let (1, Field::Bytes(s)) = (an, af) {
                        selectors.push(label_selector(s)?);
                    }
                }
            }
            (3, true) => {
                for (rn, rf) in fields(x)? {
                    if let (1..=3, Field::Bytes(v)) = (rn, rf) {
                        role_ref[["apiGroup", "kind", "name"][rn as usize - 1]] = json!(text(v)?);
                    }
                }
            }
            _ => {}
        }
    }
    if binding {
        if !list.is_empty() {
            obj["subjects"] = Value::Array(list);
        }
        obj["roleRef"] = role_ref;
    } else {
        obj["rules"] = if list.is_empty() {
            Value::Null
        } else {
            Value::Array(list)
        };
        if aggregation {
            let mut rule = Map::new();
            if !selectors.is_empty() {
                rule.insert("clusterRoleSelectors".into(), Value::Array(selectors));
            }
            obj["aggregationRule"] = Value::Object(rule);
        }
    }
    Some(obj)
}

/// How a message's plain fields map to JSON: strings and bools Go writes even when empty or
/// false, left out then as their `omitempty` says.
struct Plain<'n> {
    strings: &'n [(u64, &'n str)],
    bools: &'n [(u64, &'n str)],
}

impl Plain<'_> {
    /// Sets field `n` on `m` if it is one of the plain ones; `Some(false)` if it is not.
    fn set(&self, m: &mut Map<String, Value>, n: u64, f: &Field<'_>) -> Option<bool> {
        if let Some((_, name)) = self.strings.iter().find(|(k, _)| *k == n) {
            let Field::Bytes(x) = f else { return None };
            if !x.is_empty() {
                m.insert(name.to_string(), json!(text(x)?));
            }
            return Some(true);
        }
        if let Some((_, name)) = self.bools.iter().find(|(k, _)| *k == n) {
            let Field::Varint(v) = f else { return None };
            if *v != 0 {
                m.insert(name.to_string(), json!(true));
            }
            return Some(true);
        }
        Some(false)
    }
}

/// A `map<string, Quantity>` (resource/`generated.proto`: the Quantity's `string`, 1).
fn quantities(m: &mut Map<String, Value>, b: &[u8]) -> Option<()> {
    let (mut k, mut q) = (String::new(), String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => k = text(x)?,
            (2, Field::Bytes(x)) => {
                for (qn, qf) in fields(x)? {
                    if let (1, Field::Bytes(s)) = (qn, qf) {
                        q = text(s)?;
                    }
                }
            }
            _ => {}
        }
    }
    m.insert(k, json!(q));
    Some(())
}

/// ResourceRequirements (core/v1): `limits` (1) and `requests` (2); `claims` (3) is not
/// decoded. Go writes `resources: {}` when a container has none.
fn resources(b: &[u8]) -> Option<Value> {
    let (mut limits, mut requests) = (Map::new(), Map::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => quantities(&mut limits, x)?,
            (2, Field::Bytes(x)) => quantities(&mut requests, x)?,
            _ => return None,
        }
    }
    let mut r = Map::new();
    if !limits.is_empty() {
        r.insert("limits".into(), Value::Object(limits));
    }
    if !requests.is_empty() {
        r.insert("requests".into(), Value::Object(requests));
    }
    Some(Value::Object(r))
}

/// A ContainerPort (core/v1): name 1, hostPort 2 (left out when 0), containerPort 3 (always),
/// protocol 4, hostIP 5.
fn container_port(b: &[u8]) -> Option<Value> {
    const PLAIN: Plain = Plain {
        strings: &[(1, "name"), (4, "protocol"), (5, "hostIP")],
        bools: &[],
    };
    let mut m = Map::new();
    let mut container_port = json!(0);
    for (n, f) in fields(b)? {
        match (n, &f) {
            (2, Field::Varint(v)) if *v != 0 => {
                m.insert("hostPort".into(), int32(*v));
            }
            (2, Field::Varint(_)) => {}
            (3, Field::Varint(v)) => container_port = int32(*v),
            _ if PLAIN.set(&mut m, n, &f)? => {}
            _ => return None,
        }
    }
    m.insert("containerPort".into(), container_port);
    Some(Value::Object(m))
}

/// A Container (core/v1) as `kubectl create deployment` writes it: its name (always in JSON),
/// image, command, args, workingDir, ports and resources, and the plain strings and bools
/// Go writes empty; any other field refuses the body.
fn container(b: &[u8]) -> Option<Value> {
    const PLAIN: Plain = Plain {
        strings: &[
            (2, "image"),
            (5, "workingDir"),
            (13, "terminationMessagePath"),
            (14, "imagePullPolicy"),
            (20, "terminationMessagePolicy"),
        ],
        bools: &[(16, "stdin"), (17, "stdinOnce"), (18, "tty")],
    };
    let mut m = Map::new();
    m.insert("name".into(), json!(""));
    let (mut command, mut args, mut ports) = (Vec::new(), Vec::new(), Vec::new());
    let mut res = json!({});
    for (n, f) in fields(b)? {
        match (n, &f) {
            (1, Field::Bytes(x)) => {
                m.insert("name".into(), json!(text(x)?));
            }
            (3, Field::Bytes(x)) => repeated(&mut command, x)?,
            (4, Field::Bytes(x)) => repeated(&mut args, x)?,
            (6, Field::Bytes(x)) => ports.push(container_port(x)?),
            (8, Field::Bytes(x)) => res = resources(x)?,
            _ if PLAIN.set(&mut m, n, &f)? => {}
            _ => return None,
        }
    }
    for (key, list) in [("command", command), ("args", args), ("ports", ports)] {
        if !list.is_empty() {
            m.insert(key.into(), Value::Array(list));
        }
    }
    m.insert("resources".into(), res);
    Some(Value::Object(m))
}

/// A PodSpec (core/v1): its containers (2, always in JSON), nodeSelector (7) and the plain
/// strings and bools Go writes empty; any other field refuses the body.
fn pod_spec(b: &[u8]) -> Option<Value> {
    const PLAIN: Plain = Plain {
        strings: &[
            (3, "restartPolicy"),
            (6, "dnsPolicy"),
            (8, "serviceAccountName"),
            (9, "serviceAccount"),
            (10, "nodeName"),
            (16, "hostname"),
            (17, "subdomain"),
            (19, "schedulerName"),
            (24, "priorityClassName"),
        ],
        bools: &[(11, "hostNetwork"), (12, "hostPID"), (13, "hostIPC")],
    };
    let mut m = Map::new();
    let (mut containers, mut node_selector) = (Vec::new(), Map::new());
    for (n, f) in fields(b)? {
        match (n, &f) {
            (2, Field::Bytes(x)) => containers.push(container(x)?),
            (7, Field::Bytes(x)) => {
                let (k, v) = entry(x, false)?;
                node_selector.insert(k, v);
            }
            _ if PLAIN.set(&mut m, n, &f)? => {}
            _ => return None,
        }
    }
    m.insert("containers".into(), Value::Array(containers));
    if !node_selector.is_empty() {
        m.insert("nodeSelector".into(), Value::Object(node_selector));
    }
    Some(Value::Object(m))
}

/// A PodTemplateSpec (core/v1): metadata (1) and spec (2), both always in JSON.
fn pod_template(b: &[u8]) -> Option<Value> {
    let mut t = json!({"metadata": {}, "spec": {"containers": []}});
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => t["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => t["spec"] = pod_spec(x)?,
            _ => return None,
        }
    }
    Some(t)
}

/// A Deployment (apps/v1's `generated.proto`): spec's replicas (1), selector (2), template
/// (3), strategy (4: type 1, rollingUpdate 2 with maxUnavailable 1 and maxSurge 2; always in
/// JSON, `{}` when empty), minReadySeconds (5, left out when 0), revisionHistoryLimit (6),
/// paused (7) and progressDeadlineSeconds (9); the status a client sends (3) is dropped, as the
/// server writes it.
fn deployment(raw: &[u8]) -> Option<Value> {
    let mut obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {},
        "spec": {"template": {"metadata": {}, "spec": {"containers": []}}, "strategy": {}}});
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => obj["metadata"] = object_meta(x)?,
            (2, Field::Bytes(x)) => {
                let spec = &mut obj["spec"];
                for (sn, sf) in fields(x)? {
                    match (sn, sf) {
                        (1, Field::Varint(v)) => spec["replicas"] = int32(v),
                        (2, Field::Bytes(s)) => spec["selector"] = label_selector(s)?,
                        (3, Field::Bytes(t)) => spec["template"] = pod_template(t)?,
                        (4, Field::Bytes(s)) => spec["strategy"] = strategy(s)?,
                        (5, Field::Varint(0)) | (7, Field::Varint(0)) => {}
                        (5, Field::Varint(v)) => spec["minReadySeconds"] = int32(v),
                        (6, Field::Varint(v)) => spec["revisionHistoryLimit"] = int32(v),
                        (7, Field::Varint(_)) => spec["paused"] = json!(true),
                        (9, Field::Varint(v)) => spec["progressDeadlineSeconds"] = int32(v),
                        _ => return None,
                    }
                }
            }
            _ => {}
        }
    }
    Some(obj)
}

/// A DeploymentStrategy (apps/v1): type (1) and rollingUpdate (2).
fn strategy(b: &[u8]) -> Option<Value> {
    let mut s = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) if !x.is_empty() => {
                s.insert("type".into(), json!(text(x)?));
            }
            (1, Field::Bytes(_)) => {}
            (2, Field::Bytes(x)) => {
                let mut r = Map::new();
                for (rn, rf) in fields(x)? {
                    match (rn, rf) {
                        (1, Field::Bytes(v)) => {
                            r.insert("maxUnavailable".into(), int_or_string(v)?);
                        }
                        (2, Field::Bytes(v)) => {
                            r.insert("maxSurge".into(), int_or_string(v)?);
                        }
                        _ => return None,
                    }
                }
                s.insert("rollingUpdate".into(), Value::Object(r));
            }
            _ => return None,
        }
    }
    Some(Value::Object(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn ld(num: u64, b: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_varint(&mut v, (num << 3) | 2);
        put_varint(&mut v, b.len() as u64);
        v.extend_from_slice(b);
        v
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            ld(1, b"demo"),
            ld(3, b"default"),
            ld(11, &[ld(1, b"app"), ld(2, b"web")].concat()),
        ]
        .concat();
        let cm = [ld(1, &meta), ld(2, &[ld(1, b"a"), ld(2, b"1")].concat())].concat();
        let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &cm)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "demo", "namespace": "default", "labels": {"app": "web"}}, "data": {"a": "1"}})
        );
        assert!(decode(b"{}").is_none());
    }

    #[test]
    fn decodes_an_access_review() {
        let attrs = [
            ld(1, b""),
            ld(2, b"patch"),
            ld(5, b"nodes"),
            ld(6, b"status"),
        ]
        .concat();
        let ssar = [ld(1, &[]), ld(2, &ld(1, &attrs))].concat();
        let tm = [
            ld(1, b"authorization.k8s.io/v1"),
            ld(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &ssar)].concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                "spec": {"resourceAttributes": {"verb": "patch", "resource": "nodes", "subresource": "status"}}})
        );
        let ssrr = ld(2, &ld(1, b"mco-system"));
        let tm = [
            ld(1, b"authorization.k8s.io/v1"),
            ld(2, b"SelfSubjectRulesReview"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &ssrr)].concat();
        assert_eq!(
            decode(&body).unwrap()["spec"],
            json!({"namespace": "mco-system"})
        );
    }

    fn varint_field(num: u64, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, num << 3);
        put_varint(&mut out, v);
        out
    }

    #[test]
    fn decodes_a_token_request() {
        let bound = [ld(1, b"Pod"), ld(2, b"v1"), ld(3, b"web-0"), ld(4, b"")].concat();
        let spec = [
            ld(1, b"api"),
            ld(1, b"vault"),
            ld(3, &bound),
            varint_field(4, 7200),
        ]
        .concat();
        let tr = [ld(1, &ld(1, b"ignored")), ld(2, &spec), ld(3, &ld(1, b"x"))].concat();
        let tm = [ld(1, b"authentication.k8s.io/v1"), ld(2, b"TokenRequest")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &tr)].concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": "ignored"},
                "spec": {"audiences": ["api", "vault"], "expirationSeconds": 7200,
                    "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web-0"}}})
        );
        // What `kubectl create token sa` sends without flags: an empty spec.
        let body = [
            MAGIC.to_vec(),
            ld(1, &tm),
            ld(2, &[ld(1, &[]), ld(2, &[])].concat()),
        ]
        .concat();
        assert_eq!(decode(&body).unwrap()["spec"], json!({}));
        // A negative int64 arrives as ten bytes and decodes to itself, for validation to refuse.
        let spec = varint_field(4, (-5i64) as u64);
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &ld(2, &spec))].concat();
        assert_eq!(
            decode(&body).unwrap()["spec"]["expirationSeconds"],
            json!(-5)
        );
        // Other kinds of the group are not decoded here.
        let tm = [ld(1, b"authentication.k8s.io/v1"), ld(2, b"TokenReview")].concat();
        assert!(decode(&[MAGIC.to_vec(), ld(1, &tm), ld(2, &[])].concat()).is_none());
    }

    /// Bodies kubectl 1.32 sent, captured from the wire (the newer ones from its `-v=9` log by
    /// `tests/data/protobuf/capture.sh`).
    fn captured(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/tests/data/protobuf/{name}.bin",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn decodes_what_kubectl_create_serviceaccount_sends() {
        // kubectl create serviceaccount builder -n diff
        assert_eq!(
            decode(&captured("serviceaccount-create")).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "builder", "namespace": "diff"}})
        );
    }

    #[test]
    fn decodes_a_service_account_with_secrets_and_automount() {
        let secret = [ld(1, b"Secret"), ld(3, b"builder-token"), ld(5, b"v1")].concat();
        let sa = [
            ld(1, &ld(1, b"builder")),
            ld(2, &secret),
            ld(3, &ld(1, b"pull-a")),
            ld(3, &ld(1, b"pull-b")),
            varint_field(4, 0),
        ]
        .concat();
        let tm = [ld(1, b"v1"), ld(2, b"ServiceAccount")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &sa)].concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"},
                "secrets": [{"kind": "Secret", "name": "builder-token", "apiVersion": "v1"}],
                "imagePullSecrets": [{"name": "pull-a"}, {"name": "pull-b"}],
                "automountServiceAccountToken": false})
        );
    }

    #[test]
    fn decodes_what_kubectl_create_pdb_sends() {
        // --selector=app=other --max-unavailable=1
        assert_eq!(
            decode(&captured("pdb-create-max-unavailable")).unwrap(),
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "other", "namespace": "diff"},
                "spec": {"selector": {"matchLabels": {"app": "other"}}, "maxUnavailable": 1}})
        );
        // --selector=app=web,tier --min-available=50%
        assert_eq!(
            decode(&captured("pdb-create-min-available-percent")).unwrap()["spec"],
            json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}]}})
        );
        // --selector='env in (a,b),!legacy' --max-unavailable=25%
        assert_eq!(
            decode(&captured("pdb-create-match-expressions")).unwrap()["spec"],
            json!({"maxUnavailable": "25%", "selector": {"matchExpressions": [
                {"key": "env", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"}]}})
        );
    }

    #[test]
    fn decodes_int_or_string_at_its_limits() {
        let int = |v: i64| [varint_field(1, 0), varint_field(2, v as u64)].concat();
        assert_eq!(int_or_string(&int(0)).unwrap(), json!(0));
        assert_eq!(int_or_string(&int(-1)).unwrap(), json!(-1));
        assert_eq!(
            int_or_string(&int(i32::MAX.into())).unwrap(),
            json!(i32::MAX)
        );
        assert_eq!(
            int_or_string(&int(i32::MIN.into())).unwrap(),
            json!(i32::MIN)
        );
        let s = [varint_field(1, 1), ld(3, b"100%")].concat();
        assert_eq!(int_or_string(&s).unwrap(), json!("100%"));
        // A PDB's unhealthyPodEvictionPolicy travels as a plain string.
        let spec = [ld(2, &[]), ld(4, b"AlwaysAllow")].concat();
        let tm = [ld(1, b"policy/v1"), ld(2, b"PodDisruptionBudget")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &ld(2, &spec))].concat();
        assert_eq!(
            decode(&body).unwrap()["spec"],
            json!({"selector": {}, "unhealthyPodEvictionPolicy": "AlwaysAllow"})
        );
    }

    #[test]
    fn decodes_what_kubectl_auth_whoami_sends() {
        assert_eq!(
            decode(&captured("selfsubjectreview-create")).unwrap(),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                "metadata": {}})
        );
    }

    fn user(name: &str) -> Value {
        json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name})
    }

    #[test]
    fn decodes_what_kubectl_create_role_and_clusterrole_send() {
        // create role pod-reader -n diff --verb=get,list,watch
        //   --resource=pods,deployments.apps,pods/log --resource-name=a --resource-name=b
        let verbs = json!(["get", "list", "watch"]);
        assert_eq!(
            decode(&captured("role-create")).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "Role",
                "metadata": {"name": "pod-reader", "namespace": "diff"},
                "rules": [
                    {"verbs": verbs, "apiGroups": [""], "resources": ["pods", "pods/log"],
                        "resourceNames": ["a", "b"]},
                    {"verbs": verbs, "apiGroups": ["apps"], "resources": ["deployments"],
                        "resourceNames": ["a", "b"]}]})
        );
        // create clusterrole reader --verb=get --resource=nodes,deployments.apps
        //   --non-resource-url=/healthz --non-resource-url='/logs/*'
        assert_eq!(
            decode(&captured("clusterrole-create")).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "ClusterRole", "metadata": {"name": "reader"},
                "rules": [
                    {"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]},
                    {"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]},
                    {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/logs/*"]}]})
        );
        // create clusterrole monitoring
        //   --aggregation-rule=rbac.example.com/aggregate-to-monitoring=true,tier=obs
        assert_eq!(
            decode(&captured("clusterrole-create-aggregation")).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "ClusterRole",
                "metadata": {"name": "monitoring"}, "rules": null,
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels":
                    {"rbac.example.com/aggregate-to-monitoring": "true", "tier": "obs"}}]}})
        );
    }

    #[test]
    fn decodes_what_kubectl_create_rolebinding_and_clusterrolebinding_send() {
        let group = |name: &str| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name});
        let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
        // create rolebinding readers -n diff --role=pod-reader --user=alice --user=bob
        //   --group=devs --serviceaccount=diff:builder
        assert_eq!(
            decode(&captured("rolebinding-create")).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "RoleBinding",
                "metadata": {"name": "readers", "namespace": "diff"},
                "subjects": [user("alice"), user("bob"), group("devs"),
                    {"kind": "ServiceAccount", "name": "builder", "namespace": "diff"}],
                "roleRef": role_ref("Role", "pod-reader")})
        );
        // create rolebinding viewers -n diff --clusterrole=view --group=ops
        assert_eq!(
            decode(&captured("rolebinding-create-clusterrole")).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "RoleBinding",
                "metadata": {"name": "viewers", "namespace": "diff"},
                "subjects": [group("ops")], "roleRef": role_ref("ClusterRole", "view")})
        );
        // create clusterrolebinding admins --clusterrole=cluster-admin --user=alice
        //   --group=admins --serviceaccount=kube-system:ops
        assert_eq!(
            decode(&captured("clusterrolebinding-create")).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "ClusterRoleBinding",
                "metadata": {"name": "admins"},
                "subjects": [user("alice"), group("admins"),
                    {"kind": "ServiceAccount", "name": "ops", "namespace": "kube-system"}],
                "roleRef": role_ref("ClusterRole", "cluster-admin")})
        );
    }

    #[test]
    fn rbac_fields_left_empty_read_as_go_writes_them() {
        let tm = [ld(1, RBAC_V1.as_bytes()), ld(2, b"ClusterRoleBinding")].concat();
        // A binding without subjects and an empty roleRef; a subject without kind or name.
        let body = [
            MAGIC.to_vec(),
            ld(1, &tm),
            ld(2, &[ld(1, &ld(1, b"b")), ld(3, &[])].concat()),
        ]
        .concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": RBAC_V1, "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                "roleRef": {"apiGroup": "", "kind": "", "name": ""}})
        );
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &ld(2, &ld(4, b"ns")))].concat();
        assert_eq!(
            decode(&body).unwrap()["subjects"],
            json!([{"kind": "", "name": "", "namespace": "ns"}])
        );
        // A rule without verbs; an aggregation rule without selectors.
        let tm = [ld(1, RBAC_V1.as_bytes()), ld(2, b"ClusterRole")].concat();
        let body = [
            MAGIC.to_vec(),
            ld(1, &tm),
            ld(2, &[ld(2, &ld(3, b"pods")), ld(3, &[])].concat()),
        ]
        .concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["rules"], json!([{"verbs": null, "resources": ["pods"]}]));
        assert_eq!(v["aggregationRule"], json!({}));
        // Other kinds of the group are not decoded here.
        let tm = [ld(1, RBAC_V1.as_bytes()), ld(2, b"RoleList")].concat();
        assert!(decode(&[MAGIC.to_vec(), ld(1, &tm), ld(2, &[])].concat()).is_none());
    }

    #[test]
    fn decodes_what_kubectl_create_deployment_sends() {
        let template = |name: &str, containers: Value| json!({"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}});
        // create deployment web -n diff --image=registry.example/web:1.27 --port=8080 --replicas=3
        assert_eq!(
            decode(&captured("deployment-create")).unwrap(),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "diff", "labels": {"app": "web"}},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                    "template": template("web", json!([{"name": "web",
                        "image": "registry.example/web:1.27", "ports": [{"containerPort": 8080}],
                        "resources": {}}])),
                    "strategy": {}}})
        );
        // create deployment sleeper --image=busybox -- sleep 3600
        let v = decode(&captured("deployment-create-command")).unwrap();
        assert_eq!(
            v["metadata"],
            json!({"name": "sleeper", "labels": {"app": "sleeper"}})
        );
        assert_eq!(
            v["spec"]["template"],
            template(
                "sleeper",
                json!([{"name": "busybox", "image": "busybox",
                "command": ["sleep", "3600"], "resources": {}}])
            )
        );
        assert_eq!(v["spec"]["replicas"], json!(1));
        // create deployment multi -n diff --image=busybox --image=nginx@sha256:0...0
        let v = decode(&captured("deployment-create-images")).unwrap();
        let digest = format!("nginx@sha256:{}", "0".repeat(64));
        assert_eq!(
            v["spec"]["template"],
            template(
                "multi",
                json!([
                {"name": "busybox", "image": "busybox", "resources": {}},
                {"name": "nginx", "image": digest, "resources": {}}])
            )
        );
    }

    fn deployment_body(spec: &[u8]) -> Vec<u8> {
        let tm = [ld(1, b"apps/v1"), ld(2, b"Deployment")].concat();
        [
            MAGIC.to_vec(),
            ld(1, &tm),
            ld(2, &[ld(1, &ld(1, b"d")), ld(2, spec)].concat()),
        ]
        .concat()
    }

    #[test]
    fn decodes_a_deployments_other_fields_and_refuses_unknown_ones() {
        let quantity = |k: &[u8], q: &[u8]| ld(1, &[ld(1, k), ld(2, &ld(1, q))].concat());
        let port = [
            ld(1, b"http"),
            varint_field(2, 8443),
            varint_field(3, 443),
            ld(4, b"TCP"),
            ld(5, b""),
        ]
        .concat();
        let c = [
            ld(1, b"web"),
            ld(4, b"--v=2"),
            ld(5, b"/srv"),
            ld(6, &port),
            ld(
                8,
                &[
                    quantity(b"cpu", b"100m"),
                    ld(2, &[ld(1, b"memory"), ld(2, &ld(1, b"1Gi"))].concat()),
                ]
                .concat(),
            ),
            ld(14, b"Always"),
            varint_field(18, 1),
            varint_field(16, 0),
        ]
        .concat();
        let pod = [
            ld(2, &c),
            ld(3, b"Always"),
            ld(7, &[ld(1, b"role"), ld(2, b"web")].concat()),
            varint_field(11, 0),
        ]
        .concat();
        let rolling = [
            ld(1, &[varint_field(1, 0), varint_field(2, 0)].concat()),
            ld(2, &[varint_field(1, 1), ld(3, b"50%")].concat()),
        ]
        .concat();
        let spec = [
            ld(3, &[ld(1, &[]), ld(2, &pod)].concat()),
            ld(4, &[ld(1, b"RollingUpdate"), ld(2, &rolling)].concat()),
            varint_field(5, 5),
            varint_field(6, 0),
            varint_field(7, 1),
            varint_field(9, 60),
            varint_field(1, (-1i64) as u64),
        ]
        .concat();
        assert_eq!(
            decode(&deployment_body(&spec)).unwrap()["spec"],
            json!({"replicas": -1, "minReadySeconds": 5, "revisionHistoryLimit": 0, "paused": true,
                "progressDeadlineSeconds": 60,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "50%"}},
                "template": {"metadata": {}, "spec": {"restartPolicy": "Always", "nodeSelector": {"role": "web"},
                    "containers": [{"name": "web", "args": ["--v=2"], "workingDir": "/srv",
                        "ports": [{"name": "http", "hostPort": 8443, "containerPort": 443, "protocol": "TCP"}],
                        "resources": {"limits": {"cpu": "100m"}, "requests": {"memory": "1Gi"}},
                        "imagePullPolicy": "Always", "tty": true}]}}})
        );
        // Zeros Go writes for non-pointer fields are left out; a spec that is not sent is empty.
        let v = decode(&deployment_body(
            &[varint_field(5, 0), varint_field(7, 0)].concat(),
        ))
        .unwrap();
        assert_eq!(
            v["spec"],
            json!({"template": {"metadata": {}, "spec": {"containers": []}}, "strategy": {}})
        );
        // What it does not know of a pod template (env, 7) refuses the body instead of dropping it,
        // as do a pod's volumes (1), a container's pointer restartPolicy (24) and resource claims.
        let pod_with = |container: Vec<u8>, extra: Vec<u8>| {
            deployment_body(&ld(3, &ld(2, &[ld(2, &container), extra].concat())))
        };
        assert!(decode(&pod_with(ld(1, b"web"), vec![])).is_some());
        assert!(
            decode(&pod_with(
                [ld(1, b"web"), ld(7, &ld(1, b"A"))].concat(),
                vec![]
            ))
            .is_none()
        );
        assert!(
            decode(&pod_with(
                [ld(1, b"web"), ld(24, b"Always")].concat(),
                vec![]
            ))
            .is_none()
        );
        assert!(
            decode(&pod_with(
                [ld(1, b"web"), ld(8, &ld(3, &ld(1, b"gpu")))].concat(),
                vec![]
            ))
            .is_none()
        );
        assert!(decode(&pod_with(ld(1, b"web"), ld(1, &ld(1, b"v")))).is_none());
        // A field of the wrong wire type refuses it too.
        assert!(decode(&pod_with(ld(1, b"web"), ld(11, b"x"))).is_none());
        assert!(
            decode(&pod_with(
                [ld(1, b"web"), varint_field(2, 1)].concat(),
                vec![]
            ))
            .is_none()
        );
    }
}
