//! Just enough of the Kubernetes protobuf encoding to accept the bodies kubectl's typed
//! generators send (`kubectl create configmap|secret|namespace`): the `k8s\0` envelope
//! around `runtime.Unknown`, ObjectMeta's plain fields, and those three kinds; and the access
//! reviews `kubectl auth can-i` sends (SelfSubjectAccessReview, SelfSubjectRulesReview), and
//! the TokenRequest of `kubectl create token`.

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

/// Decodes a protobuf body of a ConfigMap, Secret or Namespace into JSON; `None` for
/// anything else.
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
    if api_version != "v1" {
        return None;
    }
    let raw = raw?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(num: u64, b: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, b.len() as u8];
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

    fn varint_field(num: u64, mut v: u64) -> Vec<u8> {
        let mut out = vec![(num << 3) as u8];
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
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
}
