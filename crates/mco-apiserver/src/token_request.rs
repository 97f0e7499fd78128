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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundRef {
    pub kind: BoundKind,
    pub name: String,
    /// Empty when the request named no uid.
    pub uid: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    Pod,
    Secret,
    Node,
}

impl BoundKind {
    /// The store key (`group/plural`) of the bound object's resource.
    pub fn gr(self) -> &'static str {
        match self {
            BoundKind::Pod => "/pods",
            BoundKind::Secret => "/secrets",
            BoundKind::Node => "/nodes",
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
}
