//! A TokenRequest's spec (`authentication.k8s.io/v1`, the `serviceaccounts/token`
//! subresource) as kube-apiserver validates and defaults it, before any token is issued.
//!
//! Expiry: at least 600 s and at most 2^32 s, defaulting to 3600 s, as kube-apiserver's
//! validation has it. kube's `--service-account-max-token-expiration` is unset by default, so
//! no shorter cap applies. Audiences default to the server's own and are bounded as the
//! reviews bound `spec.audiences`.

use serde_json::Value;

use crate::impersonation::{MAX_VALUE_LEN, MAX_VALUES};
/// The server's own audience, which the reviews also use: a request naming no audiences gets
/// a token for the API server itself.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// kube's `MinTokenAgeSec`: ten minutes.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The default `spec.expirationSeconds` (kube's API default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The largest `spec.expirationSeconds` validation accepts.
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// The object a token is bound to: it authenticates only while that object exists.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BoundRef {
    pub kind: BoundKind,
    pub name: String,
    /// Empty when the request named no uid.
    pub uid: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BoundKind {
    Pod,
    Secret,
    Node,
}

impl BoundKind {
    pub fn kind(self) -> &'static str {
        match self {
            BoundKind::Pod => "Pod",
            BoundKind::Secret => "Secret",
            BoundKind::Node => "Node",
        }
    }

    /// The bound object's resource (core group).
    pub fn resource(self) -> &'static str {
        match self {
            BoundKind::Pod => "pods",
            BoundKind::Secret => "secrets",
            BoundKind::Node => "nodes",
        }
    }
}

/// A validated, defaulted TokenRequest spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    pub bound: Option<BoundRef>,
}

/// Why a TokenRequest is refused, in kube-apiserver's words: a field's error is answered 422,
/// a reference to an object a token cannot be bound to 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{field}: Invalid value: {value}: {message}")]
    Invalid {
        field: &'static str,
        value: String,
        message: String,
    },
    #[error("{field}: Too many: {count}: must have at most {MAX_VALUES} items")]
    TooMany { field: &'static str, count: usize },
    #[error("{field}: Too long: may not be more than {MAX_VALUE_LEN} bytes")]
    TooLong { field: String },
    #[error("{0}")]
    BadRequest(String),
}

impl SpecError {
    /// The field error kube-apiserver lists in its 422 `details.causes`; `None` for a 400.
    pub fn cause(&self) -> Option<crate::error::Cause> {
        use crate::error::Cause;
        Some(match self {
            SpecError::Invalid {
                field,
                value,
                message,
            } => Cause::new(
                "FieldValueInvalid",
                field,
                format!("Invalid value: {value}: {message}"),
            ),
            SpecError::TooMany { field, count } => Cause::new(
                "FieldValueTooMany",
                field,
                format!("Too many: {count}: must have at most {MAX_VALUES} items"),
            ),
            SpecError::TooLong { field } => Cause::new(
                "FieldValueTooLong",
                field,
                format!("Too long: may not be more than {MAX_VALUE_LEN} bytes"),
            ),
            SpecError::BadRequest(_) => return None,
        })
    }

    /// The HTTP status kube-apiserver answers this error with.
    pub fn code(&self) -> u16 {
        match self {
            SpecError::BadRequest(_) => 400,
            _ => 422,
        }
    }
}

fn invalid(field: &'static str, value: &Value, message: &str) -> SpecError {
    SpecError::Invalid {
        field,
        value: value.to_string(),
        message: message.into(),
    }
}

/// Validates and defaults `spec` of a TokenRequest body.
pub fn parse_spec(spec: &Value) -> Result<Spec, SpecError> {
    let exp = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            invalid(
                "spec.expirationSeconds",
                v,
                "must be an integer number of seconds",
            )
        })?,
    };
    if exp < MIN_EXPIRATION_SECONDS {
        return Err(SpecError::Invalid {
            field: "spec.expirationSeconds",
            value: exp.to_string(),
            message: "may not specify a duration less than 10 minutes".into(),
        });
    }
    if exp > MAX_EXPIRATION_SECONDS {
        return Err(SpecError::Invalid {
            field: "spec.expirationSeconds",
            value: exp.to_string(),
            message: "may not specify a duration larger than 2^32 seconds".into(),
        });
    }
    let audiences = match spec.get("audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            if a.len() > MAX_VALUES {
                return Err(SpecError::TooMany {
                    field: "spec.audiences",
                    count: a.len(),
                });
            }
            let mut out = Vec::with_capacity(a.len());
            for (i, v) in a.iter().enumerate() {
                let s = v
                    .as_str()
                    .ok_or_else(|| invalid("spec.audiences", v, "must be a string"))?;
                if s.len() > MAX_VALUE_LEN {
                    return Err(SpecError::TooLong {
                        field: format!("spec.audiences[{i}]"),
                    });
                }
                out.push(s.to_string());
            }
            out
        }
        Some(v) => return Err(invalid("spec.audiences", v, "must be a list of strings")),
    };
    let audiences = if audiences.is_empty() {
        vec![API_AUDIENCE.to_string()]
    } else {
        audiences
    };
    let bound = match spec.get("boundObjectRef") {
        None | Some(Value::Null) => None,
        Some(r) => Some(bound_ref(r)?),
    };
    Ok(Spec {
        audiences,
        expiration_seconds: exp,
        bound,
    })
}

fn bound_ref(r: &Value) -> Result<BoundRef, SpecError> {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (kind, api_version) = (s("kind"), s("apiVersion"));
    // Only the group counts, as in kube-apiserver: `apiVersion: v2` of a Pod still binds.
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let kind = match (group, kind.as_str()) {
        ("", "Pod") => BoundKind::Pod,
        ("", "Secret") => BoundKind::Secret,
        ("", "Node") => BoundKind::Node,
        _ => {
            return Err(SpecError::BadRequest(format!(
                "cannot bind token to object of type {group}/{version}, Kind={kind}"
            )));
        }
    };
    let name = s("name");
    if name.len() > MAX_VALUE_LEN {
        return Err(SpecError::TooLong {
            field: "spec.boundObjectRef.name".into(),
        });
    }
    Ok(BoundRef {
        kind,
        name,
        uid: s("uid"),
    })
}

/// `unix` seconds as kube's `metav1.Time` writes them.
fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .unwrap_or(jiff::Timestamp::MAX)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The answer to a TokenRequest: the request's metadata with the ServiceAccount's uid and the
/// time of issue, the defaulted spec (`boundObjectRef` is written even when null, as kube's
/// JSON has no `omitempty` there) and the status carrying the token.
pub fn response(request_meta: &Value, sa_uid: &str, spec: &Spec, now: i64, token: &str) -> Value {
    let mut meta = match request_meta {
        Value::Object(m) => m.clone(),
        _ => serde_json::Map::new(),
    };
    meta.insert("uid".into(), Value::String(sa_uid.into()));
    meta.insert("creationTimestamp".into(), Value::String(rfc3339(now)));
    let bound = spec.bound.as_ref().map(|b| {
        let mut r = serde_json::json!({"kind": b.kind.kind(), "apiVersion": "v1", "name": b.name});
        if !b.uid.is_empty() {
            r["uid"] = Value::String(b.uid.clone());
        }
        r
    });
    serde_json::json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": meta,
        "spec": {
            "audiences": spec.audiences,
            "expirationSeconds": spec.expiration_seconds,
            "boundObjectRef": bound,
        },
        "status": {
            "token": token,
            "expirationTimestamp": rfc3339(now.saturating_add(spec.expiration_seconds)),
        },
    })
}

/// Why a token cannot be bound to the object its request names, in kube-apiserver's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// Answered 404 as the object not found.
    #[error("{resource} {name:?} not found")]
    NotFound {
        resource: &'static str,
        name: String,
    },
    /// Answered 400.
    #[error(
        "cannot bind token for serviceaccount {0:?} to pod running with different serviceaccount name."
    )]
    OtherServiceAccount(String),
    /// Answered 409.
    #[error(
        "the UID in the bound object reference ({0}) does not match the UID in record. The object might have been deleted and then recreated"
    )]
    UidMismatch(String),
}

/// What a token bound to `object` carries: the object's uid and, for a Pod, the node it runs
/// on (kube's `node-name` extra). `object` is the stored object `r` names, if any.
pub fn bind(
    service_account: &str,
    r: &BoundRef,
    object: Option<&Value>,
) -> Result<(String, Option<String>), BindError> {
    let object = object.ok_or_else(|| BindError::NotFound {
        resource: r.kind.resource(),
        name: r.name.clone(),
    })?;
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut node = None;
    if r.kind == BoundKind::Pod {
        let spec = object.get("spec");
        let sa = spec
            .and_then(|s| s.get("serviceAccountName"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if sa != service_account {
            return Err(BindError::OtherServiceAccount(service_account.into()));
        }
        node = spec
            .and_then(|s| s.get("nodeName"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(String::from);
    }
    if !r.uid.is_empty() && r.uid != uid {
        return Err(BindError::UidMismatch(r.uid.clone()));
    }
    Ok((uid, node))
}

/// Whether a bound token still holds: its object exists with the uid it was bound to, as
/// kube's bound tokens stop working once their Pod or Secret is deleted. `stored_uid` is the
/// uid of the object now stored under that name, if any.
pub fn still_bound(bound_uid: &str, stored_uid: Option<&str>) -> bool {
    stored_uid == Some(bound_uid)
}

/// The most tokens issued by TokenRequest held at once (in memory, and as rows in the store);
/// past it, a request is refused until some expire, so callers cannot grow the server's memory
/// or its database without bound.
pub const MAX_ISSUED: usize = 10_000;

/// A token issued by a TokenRequest and what a TokenReview reports of it. The store keeps it
/// as JSON beside the token's digest, so it outlives a restart until it expires.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IssuedToken {
    pub namespace: String,
    pub service_account: String,
    pub audiences: Vec<String>,
    /// Unix seconds after which the token no longer authenticates.
    pub expires_at: i64,
    /// The bound object's namespace (empty for a Node) and reference, its uid filled in.
    pub bound: Option<(String, BoundRef)>,
    /// The node a Node-bound token, or one bound to a scheduled Pod, names.
    pub node: Option<String>,
    /// kube's `authentication.kubernetes.io/credential-id` extra: `JTI=<id>`.
    pub credential_id: String,
}

/// Tokens issued by TokenRequest, keyed by their digest; expired ones are dropped when a new
/// one is issued and never authenticate. The store keeps a copy of each
/// ([`crate::auth::Tokens`] writes it), which a later start loads back.
#[derive(Default)]
pub struct Issued(std::sync::Mutex<std::collections::HashMap<String, IssuedToken>>);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("too many service account tokens issued: at most {MAX_ISSUED} may be valid at once")]
pub struct TooManyTokens;

impl Issued {
    /// Holds the tokens a store kept, at most [`MAX_ISSUED`] of them.
    pub fn load(tokens: impl IntoIterator<Item = (String, IssuedToken)>) -> Issued {
        Issued(std::sync::Mutex::new(
            tokens.into_iter().take(MAX_ISSUED).collect(),
        ))
    }

    /// Drops a token, as when storing it failed.
    pub fn remove(&self, digest: &str) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(digest);
    }

    pub fn insert(&self, digest: String, t: IssuedToken, now: i64) -> Result<(), TooManyTokens> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_ISSUED {
            m.retain(|_, t| t.expires_at > now);
        }
        if m.len() >= MAX_ISSUED {
            return Err(TooManyTokens);
        }
        m.insert(digest, t);
        Ok(())
    }

    /// The token with this digest while it has not expired.
    pub fn get(&self, digest: &str, now: i64) -> Option<IssuedToken> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(digest).filter(|t| t.expires_at > now).cloned()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The kind errors of a TokenRequest are reported as.
const TOKEN_REQUEST: crate::error::ResRef<'static> = crate::error::ResRef {
    group: "authentication.k8s.io",
    plural: "tokenrequests",
    kind: "TokenRequest",
};

fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// `POST .../namespaces/{ns}/serviceaccounts/{name}/token`: issues a token for the
/// ServiceAccount as kube-apiserver's TokenRequest does, and answers the TokenRequest.
pub async fn create(
    app: &crate::rest::App,
    ns: &str,
    name: &str,
    body: &[u8],
) -> Result<Value, crate::error::ApiError> {
    use crate::error::{ApiError, Cause};
    let req: Value = match crate::protobuf::decode(body) {
        Some(v) => v,
        None => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid TokenRequest body: {e}")))?,
    };
    let meta = req.get("metadata").cloned().unwrap_or(Value::Null);
    for (key, want, what) in [
        (
            "name",
            name,
            "must match the service account name if specified",
        ),
        (
            "namespace",
            ns,
            "must match the service account namespace if specified",
        ),
    ] {
        if let Some(got) = meta.get(key).and_then(Value::as_str)
            && !got.is_empty()
            && got != want
        {
            return Err(ApiError::invalid(
                &TOKEN_REQUEST,
                name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    &format!("metadata.{key}"),
                    format!("Invalid value: {got:?}: {what}"),
                )],
            ));
        }
    }
    let sa_info = app
        .registry
        .lookup("", "v1", "serviceaccounts")
        .ok_or_else(ApiError::not_found_path)?;
    let sa = app
        .store
        .get_checked("/serviceaccounts", ns, name)?
        .ok_or_else(|| ApiError::not_found(&sa_info.rref(), name))?;
    let spec =
        parse_spec(req.get("spec").unwrap_or(&Value::Null)).map_err(|e| match e.cause() {
            Some(c) => ApiError::invalid(&TOKEN_REQUEST, "", vec![c]),
            None => ApiError::bad_request(e.to_string()),
        })?;
    let mut node = None;
    let mut bound = None;
    if let Some(r) = &spec.bound {
        let (object_ns, gr) = match r.kind {
            BoundKind::Node => ("", "/nodes"),
            BoundKind::Pod => (ns, "/pods"),
            BoundKind::Secret => (ns, "/secrets"),
        };
        let object = app.store.get_checked(gr, object_ns, &r.name)?;
        let (uid, pod_node) = bind(name, r, object.as_deref()).map_err(|e| match &e {
            BindError::NotFound { resource, name } => ApiError::not_found(
                &crate::error::ResRef {
                    group: "",
                    plural: resource,
                    kind: r.kind.kind(),
                },
                name,
            ),
            BindError::OtherServiceAccount(_) => ApiError::bad_request(e.to_string()),
            BindError::UidMismatch(_) => ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {e}",
                    r.kind.kind(),
                    r.name
                ),
            ),
        })?;
        node = match r.kind {
            BoundKind::Node => Some(r.name.clone()),
            _ => pod_node,
        };
        bound = Some((object_ns.to_string(), BoundRef { uid, ..r.clone() }));
    }
    let now = now_unix();
    let token = crate::auth::new_token();
    let issued = IssuedToken {
        namespace: ns.into(),
        service_account: name.into(),
        audiences: spec.audiences.clone(),
        expires_at: now.saturating_add(spec.expiration_seconds),
        bound,
        node,
        credential_id: format!("JTI={}", uuid::Uuid::new_v4()),
    };
    app.tokens
        .issue(&token, issued, now)
        .await
        .map_err(|e| match e {
            crate::auth::IssueError::TooMany(e) => {
                ApiError::new(429, "TooManyRequests", e.to_string())
            }
            crate::auth::IssueError::Store(e) => ApiError::internal(e.to_string()),
        })?;
    let sa_uid = sa
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(response(&meta, sa_uid, &spec, now, &token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_expiry_and_audiences() {
        let s = parse_spec(&json!({})).unwrap();
        assert_eq!(s.expiration_seconds, DEFAULT_EXPIRATION_SECONDS);
        assert_eq!(s.audiences, vec![API_AUDIENCE.to_string()]);
        assert_eq!(s.bound, None);
        let s = parse_spec(&json!({"audiences": ["a", "b"], "expirationSeconds": 600})).unwrap();
        assert_eq!(s.audiences, vec!["a", "b"]);
        assert_eq!(s.expiration_seconds, 600);
    }

    #[test]
    fn expiry_is_bounded_at_each_end() {
        let e = parse_spec(&json!({"expirationSeconds": 599})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        );
        assert_eq!(e.code(), 422);
        assert!(parse_spec(&json!({"expirationSeconds": MAX_EXPIRATION_SECONDS})).is_ok());
        let e = parse_spec(&json!({"expirationSeconds": MAX_EXPIRATION_SECONDS + 1})).unwrap_err();
        assert!(e.to_string().contains("larger than 2^32 seconds"), "{e}");
        assert!(parse_spec(&json!({"expirationSeconds": "1h"})).is_err());
    }

    #[test]
    fn audiences_are_bounded() {
        let at_limit: Vec<String> = (0..MAX_VALUES).map(|i| i.to_string()).collect();
        assert!(parse_spec(&json!({ "audiences": at_limit })).is_ok());
        let over: Vec<String> = (0..=MAX_VALUES).map(|i| i.to_string()).collect();
        assert_eq!(
            parse_spec(&json!({ "audiences": over })).unwrap_err(),
            SpecError::TooMany {
                field: "spec.audiences",
                count: MAX_VALUES + 1
            }
        );
        let long = "a".repeat(MAX_VALUE_LEN);
        assert!(parse_spec(&json!({ "audiences": [long] })).is_ok());
        let long = "a".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(
            parse_spec(&json!({ "audiences": ["x", long] }))
                .unwrap_err()
                .to_string(),
            "spec.audiences[1]: Too long: may not be more than 1024 bytes"
        );
    }

    #[test]
    fn binds_only_pods_secrets_and_nodes() {
        let s = parse_spec(
            &json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}}),
        )
        .unwrap();
        assert_eq!(
            s.bound,
            Some(BoundRef {
                kind: BoundKind::Pod,
                name: "p".into(),
                uid: "u".into()
            })
        );
        for kind in ["Secret", "Node"] {
            assert!(
                parse_spec(
                    &json!({"boundObjectRef": {"kind": kind, "apiVersion": "v1", "name": "x"}})
                )
                .is_ok()
            );
        }
        let e = parse_spec(
            &json!({"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot bind token to object of type /v1, Kind=ConfigMap"
        );
        assert_eq!(e.code(), 400);
        let e = parse_spec(
            &json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "example.com/v1", "name": "x"}}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot bind token to object of type example.com/v1, Kind=Pod"
        );
        assert!(
            parse_spec(
                &json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v2", "name": "x"}})
            )
            .is_ok()
        );
    }

    #[test]
    fn response_carries_the_token_and_its_expiry() {
        let spec = parse_spec(&json!({"expirationSeconds": 600})).unwrap();
        let v = response(&json!({"namespace": "ns"}), "sa-uid", &spec, 0, "tok");
        assert_eq!(
            v,
            json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"namespace": "ns", "uid": "sa-uid", "creationTimestamp": "1970-01-01T00:00:00Z"},
                "spec": {"audiences": [API_AUDIENCE], "expirationSeconds": 600, "boundObjectRef": null},
                "status": {"token": "tok", "expirationTimestamp": "1970-01-01T00:10:00Z"}})
        );
        let spec = parse_spec(
            &json!({"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "s", "uid": "u"}}),
        )
        .unwrap();
        let v = response(&Value::Null, "", &spec, 0, "tok");
        assert_eq!(
            v["spec"]["boundObjectRef"],
            json!({"kind": "Secret", "apiVersion": "v1", "name": "s", "uid": "u"})
        );
    }

    fn issued(expires_at: i64) -> IssuedToken {
        IssuedToken {
            namespace: "ns".into(),
            service_account: "sa".into(),
            audiences: vec![API_AUDIENCE.into()],
            expires_at,
            bound: None,
            node: None,
            credential_id: "JTI=x".into(),
        }
    }

    #[test]
    fn issued_tokens_expire_and_are_bounded() {
        let store = Issued::default();
        store.insert("a".into(), issued(100), 0).unwrap();
        assert!(store.get("a", 99).is_some());
        assert!(store.get("a", 100).is_none(), "expired at its expiry");
        assert!(store.get("b", 0).is_none());
        for i in 1..MAX_ISSUED {
            store.insert(i.to_string(), issued(1000), 0).unwrap();
        }
        assert_eq!(store.len(), MAX_ISSUED);
        // Full of valid tokens: refused.
        assert_eq!(
            store.insert("x".into(), issued(1000), 50),
            Err(TooManyTokens)
        );
        // Once one has expired, it is pruned to make room.
        store.insert("x".into(), issued(1000), 100).unwrap();
        assert_eq!(store.len(), MAX_ISSUED);
        assert!(store.get("a", 0).is_none(), "pruned");
        assert!(store.get("x", 100).is_some());
    }

    #[test]
    fn binds_to_an_existing_object_with_its_uid() {
        let pod = |sa: &str| json!({"metadata": {"uid": "p-1"}, "spec": {"serviceAccountName": sa, "nodeName": "worker-0"}});
        let r = BoundRef {
            kind: BoundKind::Pod,
            name: "web".into(),
            uid: String::new(),
        };
        assert_eq!(
            bind("sa", &r, Some(&pod("sa"))),
            Ok(("p-1".into(), Some("worker-0".into())))
        );
        assert_eq!(
            bind("sa", &r, None),
            Err(BindError::NotFound {
                resource: "pods",
                name: "web".into()
            })
        );
        assert_eq!(
            bind("sa", &r, Some(&pod("other"))).unwrap_err().to_string(),
            "cannot bind token for serviceaccount \"sa\" to pod running with different serviceaccount name."
        );
        let r = BoundRef {
            uid: "p-0".into(),
            ..r
        };
        assert_eq!(
            bind("sa", &r, Some(&pod("sa"))),
            Err(BindError::UidMismatch("p-0".into()))
        );
        let secret = BoundRef {
            kind: BoundKind::Secret,
            name: "s".into(),
            uid: "s-1".into(),
        };
        assert_eq!(
            bind("sa", &secret, Some(&json!({"metadata": {"uid": "s-1"}}))),
            Ok(("s-1".into(), None))
        );
        assert!(still_bound("s-1", Some("s-1")));
        assert!(!still_bound("s-1", None), "deleted");
        assert!(!still_bound("s-1", Some("s-2")), "deleted and made again");
    }

    /// The server's side of `POST serviceaccounts/{name}/token`, against a running server's
    /// store: what it answers, and that the token it issues authenticates as the account.
    #[tokio::test]
    async fn issues_a_token_that_authenticates_as_the_service_account() {
        use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
        use kube::api::{Api, PostParams};
        let dir = tempfile::tempdir().unwrap();
        let server = crate::Server::start(crate::Config::new(
            dir.path(),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .await
        .unwrap();
        let app = &server.app;
        let e = create(app, "default", "robot", b"{}").await.unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (404, "serviceaccounts \"robot\" not found")
        );
        let client = server
            .client_for(crate::auth::Identity::Admin)
            .await
            .unwrap();
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
        sas.create(&PostParams::default(), &sa).await.unwrap();

        let v = create(app, "default", "robot", b"{}").await.unwrap();
        assert_eq!(v["spec"]["expirationSeconds"], json!(3600));
        assert_eq!(v["spec"]["audiences"], json!([API_AUDIENCE]));
        let token = v["status"]["token"].as_str().unwrap();
        assert_eq!(
            app.tokens.identity_for(token),
            Some(crate::auth::Identity::service_account(
                "default", "robot", None
            ))
        );
        let t = app.tokens.issued(token).unwrap();
        assert!(t.credential_id.starts_with("JTI="), "{}", t.credential_id);

        let e = create(
            app,
            "default",
            "robot",
            br#"{"spec": {"expirationSeconds": 599}}"#,
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        );
        let e = create(
            app,
            "default",
            "robot",
            br#"{"metadata": {"name": "other"}}"#,
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, 422, "{}", e.message);
        let bound = |kind: &str, name: &str| {
            json!({"spec": {"boundObjectRef": {"kind": kind, "apiVersion": "v1", "name": name}}})
                .to_string()
        };
        let e = create(app, "default", "robot", bound("ConfigMap", "x").as_bytes())
            .await
            .unwrap_err();
        assert_eq!(e.code, 400, "{}", e.message);
        let e = create(app, "default", "robot", bound("Pod", "web").as_bytes())
            .await
            .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (404, "pods \"web\" not found")
        );

        // A token bound to a scheduled Pod of the account names the Pod's node.
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"serviceAccountName": "robot", "nodeName": "worker-0",
                "containers": [{"name": "c", "image": "busybox"}]}}))
        .unwrap();
        let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
        let v = create(app, "default", "robot", bound("Pod", "web").as_bytes())
            .await
            .unwrap();
        let token = v["status"]["token"].as_str().unwrap();
        assert_eq!(
            app.tokens.identity_for(token),
            Some(crate::auth::Identity::service_account(
                "default",
                "robot",
                Some("worker-0")
            ))
        );
        let (_, r) = app.tokens.issued(token).unwrap().bound.unwrap();
        assert_eq!(Some(r.uid.clone()), pod.metadata.uid);

        // A TokenReview reports the pod, the node and the credential as kube does.
        use k8s_openapi::api::authentication::v1::TokenReview;
        let reviews: Api<TokenReview> = Api::all(
            server
                .client_for(crate::auth::Identity::Admin)
                .await
                .unwrap(),
        );
        let review: TokenReview =
            serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
        let status = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(status.authenticated, Some(true), "{status:?}");
        let extra = status.user.unwrap().extra.unwrap();
        assert_eq!(extra["authentication.kubernetes.io/pod-name"], ["web"]);
        assert_eq!(extra["authentication.kubernetes.io/pod-uid"], [r.uid]);
        assert_eq!(
            extra["authentication.kubernetes.io/node-name"],
            ["worker-0"]
        );
        assert!(extra["authentication.kubernetes.io/credential-id"][0].starts_with("JTI="));

        // Deleting the Pod ends the token.
        pods.delete("web", &Default::default()).await.unwrap();
        assert_eq!(app.tokens.identity_for(token), None);
        server.shutdown().await;
    }
}
