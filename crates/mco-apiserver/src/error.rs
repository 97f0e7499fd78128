//! Errors: `ApiError` is what a client sees (a `meta/v1` Status); `Error` is what the
//! library's own start-up and admin calls return.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// Failures of the server's own plumbing (start-up, certificates, storage).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("certificate error: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("TLS error: {0}")]
    Tls(#[from] rustls::Error),
    #[error("invalid stored data: {0}")]
    Data(String),
    #[error("kube client error: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig error: {0}")]
    Kubeconfig(String),
    #[error("the storage writer has stopped")]
    WriterGone,
    /// The database file cannot be used as it is; the message says what to do.
    #[error("{path}: {message}")]
    Store { path: String, message: String },
}

impl Error {
    pub(crate) fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// One entry of `details.causes`; kubectl builds its "is invalid" line from these.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: String,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn new(reason: &str, field: &str, message: impl Into<String>) -> Self {
        Cause {
            reason: reason.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// An error answered to a client as a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Box<Value>>,
}

/// Identifies the resource an error talks about, the way upstream spells it.
#[derive(Debug, Clone)]
pub struct ResRef<'a> {
    pub group: &'a str,
    pub plural: &'a str,
    pub kind: &'a str,
}

impl ResRef<'_> {
    /// `configmaps` or `machineconfigs.machineconfiguration.openshift.io`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
    /// `ConfigMap` or `MachineConfig.machineconfiguration.openshift.io`.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, mut details: Value) -> Self {
        // StatusDetails' group, name and kind are `omitempty`: the core group sends none,
        // neither does an error about options, which have no name, nor one about an object
        // whose kind kube had cleared when it failed.
        if let Some(m) = details.as_object_mut() {
            for key in ["group", "name", "kind"] {
                if m.get(key).is_some_and(|v| v == "") {
                    m.remove(key);
                }
            }
        }
        self.details = Some(Box::new(details));
        self
    }

    pub fn not_found(r: &ResRef<'_>, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", r.qualified(), name),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }

    pub fn already_exists(r: &ResRef<'_>, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", r.qualified(), name),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }

    pub fn conflict(r: &ResRef<'_>, name: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                r.qualified(),
                name
            ),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }

    pub fn conflict_msg(r: &ResRef<'_>, name: &str, msg: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                r.qualified(),
                name,
                msg
            ),
        )
        .with_details(json!({"name": name, "group": r.group, "kind": r.plural}))
    }

    pub fn invalid(r: &ResRef<'_>, name: &str, causes: Vec<Cause>) -> Self {
        // Every cause is listed, but the message names each distinct error once, as
        // apimachinery's aggregate does (an Event's changed reason is reported twice).
        let mut joined: Vec<String> = Vec::new();
        for c in &causes {
            let line = if c.field.is_empty() {
                c.message.clone()
            } else {
                format!("{}: {}", c.field, c.message)
            };
            if !joined.contains(&line) {
                joined.push(line);
            }
        }
        let msg = if joined.len() == 1 {
            joined[0].clone()
        } else {
            format!("[{}]", joined.join(", "))
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "field": c.field, "message": c.message}))
            .collect();
        // It names the stored kind, and kube-apiserver stores an events.k8s.io Event as a core
        // one.
        let r = match (r.group, r.kind) {
            ("events.k8s.io", "Event") => ResRef {
                group: "",
                ..r.clone()
            },
            _ => r.clone(),
        };
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{}\" is invalid: {}", r.qualified_kind(), name, msg),
        )
        .with_details(
            json!({"name": name, "group": r.group, "kind": r.kind, "causes": causes_json}),
        )
    }

    pub fn bad_request(msg: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", msg)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(msg: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", msg)
    }

    pub fn too_large() -> Self {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {}", crate::MAX_BODY),
        )
    }

    pub fn unsupported_media(msg: impl Into<String>) -> Self {
        ApiError::new(415, "UnsupportedMediaType", msg)
    }

    pub fn gone(msg: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", msg)
    }

    pub fn method_not_allowed() -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn internal(msg: impl std::fmt::Display) -> Self {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {msg}"),
        )
    }

    pub fn not_found_path() -> Self {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = (**d).clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        (
            code,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}
