//! LIST: label and field selectors, continue tokens, and the list response.

use std::collections::HashMap;
use std::ops::Bound;

use axum::response::Response;
use base64::Engine;
use http::HeaderMap;
use mco_apimachinery::selector::{
    FieldOperator, FieldSelector, LabelSelector, builtin_selectable_fields, json_needles,
    may_match_json,
};
use serde_json::{Value, json};

use super::encode::{Served, json_response, out, wants_table};
use super::{App, Target};
use crate::error::ApiError;
use crate::store::{Expired, Resume, Select};
use crate::tables::{self, Include};

/// Label and field selectors of a list or watch request.
pub struct Filter {
    label: LabelSelector,
    field: FieldSelector,
    /// Text every match's stored JSON contains, checked before an object is parsed.
    needles: Vec<Vec<String>>,
}

impl Filter {
    pub(super) fn parse(t: &Target, q: &HashMap<String, String>) -> Result<Filter, ApiError> {
        let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let field = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if crate::event::converts(&t.info) {
            return Ok(Filter::new(label, events_v1_fields(&field)?));
        }
        let mut supported: Vec<&str> =
            builtin_selectable_fields(&t.info.group, &t.info.kind).to_vec();
        let extra: Vec<String> = t
            .info
            .crd_version(&t.version)
            .map(|v| v.selectable_fields.clone())
            .unwrap_or_default();
        supported.extend(extra.iter().map(String::as_str));
        field
            .check_supported(&supported)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Filter::new(label, field))
    }

    fn new(label: LabelSelector, field: FieldSelector) -> Filter {
        let needles = json_needles(&label, &field);
        Filter {
            label,
            field,
            needles,
        }
    }

    pub fn matches(&self, v: &Value) -> bool {
        self.label.matches_object(v) && self.field.matches(v)
    }

    /// The one name a `metadata.name=` field selector allows, so a watch can be
    /// keyed by it.
    pub(super) fn only_name(&self) -> Option<String> {
        self.equal_term("metadata.name").map(str::to_string)
    }

    /// The value an `=`/`==` term requires of `field`, if there is one.
    fn equal_term(&self, field: &str) -> Option<&str> {
        self.field
            .terms()
            .iter()
            .find(|t| {
                t.field == field
                    && matches!(t.op, FieldOperator::Equals | FieldOperator::DoubleEquals)
            })
            .map(|t| t.value.as_str())
    }
}

impl Select for Filter {
    /// See [`json_needles`].
    fn may_match(&self, json: &str) -> bool {
        may_match_json(json, &self.needles)
    }

    fn matches(&self, v: &Value) -> bool {
        Filter::matches(self, v)
    }

    fn pods_on_node(&self) -> Option<&str> {
        self.equal_term("spec.nodeName")
    }

    fn is_everything(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }
}

/// An `events.k8s.io/v1` field selector as the stored (core) Events are selected by: each label
/// converted as kube-apiserver's conversion for that API does, one it lacks refused as there.
fn events_v1_fields(field: &FieldSelector) -> Result<FieldSelector, ApiError> {
    let labels = crate::event::EVENTS_V1_FIELD_LABELS;
    let supported: Vec<&str> = labels.iter().map(|(from, _)| *from).collect();
    field
        .check_supported(&supported)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Rebuilt as text: the selector keeps its terms to itself.
    let escape = |v: &str| {
        v.replace('\\', "\\\\")
            .replace(',', "\\,")
            .replace('=', "\\=")
    };
    let converted: Vec<String> = field
        .terms()
        .iter()
        .map(|t| {
            let to = labels
                .iter()
                .find(|(from, _)| *from == t.field)
                .map_or(t.field.as_str(), |(_, to)| to);
            let op = match t.op {
                FieldOperator::Equals => "=",
                FieldOperator::DoubleEquals => "==",
                FieldOperator::NotEquals => "!=",
            };
            format!("{to}{op}{}", escape(&t.value))
        })
        .collect();
    FieldSelector::parse(&converted.join(",")).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The continue token of a page: kube-apiserver's, base64url of
/// `{"v":"meta.k8s.io/v1","rv":<first page's resourceVersion>,"start":"<key after the page>"}`,
/// the key relative to the listed range (`/name`, or `/namespace/name` across namespaces) and
/// followed by a NUL, which sorts right after it. `rv` is -1 for a list that resumes at the
/// current version (offered with a 410 once the first page's version is gone).
fn encode_continue(rv: i64, key: &str) -> String {
    let token = json!({"v": CONTINUE_VERSION, "rv": rv, "start": key});
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&token).unwrap_or_default())
}

const CONTINUE_VERSION: &str = "meta.k8s.io/v1";

/// The start key of the next page after (`ns`, `name`), in a list across namespaces or not.
fn start_key(across_namespaces: bool, (ns, name): &(String, String)) -> String {
    if across_namespaces {
        format!("/{ns}/{name}\0")
    } else {
        format!("/{name}\0")
    }
}

/// A continue token, read back: the version its list was first read at (`None`: the current
/// one) and its start key.
#[derive(Debug, PartialEq)]
struct Continue {
    rv: Option<u64>,
    key: String,
}

/// Reads a continue token as kube-apiserver does, with its messages for each way it is wrong.
fn decode_continue(s: &str) -> Result<Continue, ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("invalid continue token: {why}"));
    const INVALID: &str = "continue key is not valid";
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|e| {
            let at = match e {
                base64::DecodeError::InvalidByte(at, _)
                | base64::DecodeError::InvalidLastSymbol(at, _) => at,
                _ => s.len(),
            };
            bad(&format!(
                "{INVALID}: illegal base64 data at input byte {at}"
            ))
        })?;
    #[derive(serde::Deserialize)]
    struct Token {
        #[serde(default)]
        v: String,
        #[serde(default)]
        rv: i64,
        #[serde(default)]
        start: String,
    }
    let t: Token = serde_json::from_slice(&raw).map_err(|e| bad(&format!("{INVALID}: {e}")))?;
    if t.v != CONTINUE_VERSION {
        return Err(bad(&format!(
            "{INVALID}: server does not recognize this encoded version {}",
            t.v
        )));
    }
    if t.rv == 0 {
        return Err(bad(&format!(
            "{INVALID}: incorrect encoded start resourceVersion (version {CONTINUE_VERSION})"
        )));
    }
    if t.start.is_empty() {
        return Err(bad(&format!(
            "{INVALID}: encoded start key empty (version {CONTINUE_VERSION})"
        )));
    }
    // As Go's path.Clean would leave it: a key cannot climb out of the listed range.
    let key = if t.start.starts_with('/') {
        t.start.clone()
    } else {
        format!("/{}", t.start)
    };
    if !is_clean_path(&key) {
        return Err(bad(&format!("{INVALID}: {}", t.start)));
    }
    Ok(Continue {
        rv: u64::try_from(t.rv).ok(),
        key,
    })
}

/// Whether `path` (starting with `/`) is unchanged by Go's `path.Clean`: no empty, `.` or
/// `..` segments and no trailing slash.
fn is_clean_path(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    path[1..]
        .split('/')
        .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Where the next page starts, from a token's key: after `key` when it ends with the NUL the
/// server appends, else at it. `ns` is the listed namespace; `None` lists across them.
fn start_bound(ns: Option<&str>, key: &str) -> Bound<(String, String)> {
    let rel = &key[1..];
    let (rel, after) = match rel.strip_suffix('\0') {
        Some(r) => (r, true),
        None => (rel, false),
    };
    let k = match ns {
        Some(ns) => (ns.to_string(), rel.to_string()),
        None => match rel.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (rel.to_string(), String::new()),
        },
    };
    if after {
        Bound::Excluded(k)
    } else {
        Bound::Included(k)
    }
}

/// kube-apiserver's answer to a continue token whose version is gone: 410 Expired, with a token
/// that resumes at the current version instead.
fn continue_expired(key: &str) -> Response {
    let message = "The provided continue parameter is too old to display a consistent list \
                   result. You can start a new list without the continue parameter, or use the \
                   continue token in this response to retrieve the remainder of the results. \
                   Continuing with the provided token results in an inconsistent list - objects \
                   that were created, modified, or deleted between the time the first chunk was \
                   returned and now may show up in the list.";
    let mut status = ApiError::gone(message).to_status();
    status["metadata"] = json!({"continue": encode_continue(-1, key)});
    json_response(410, &status)
}

/// kube-apiserver's answer to a version it has not reached (after waiting 3 s for it).
fn too_large(rv: u64, current: u64) -> ApiError {
    ApiError::new(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {rv}, current: {current}"),
    )
    .with_details(json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }))
}

pub(super) fn list(
    app: &App,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let rv_param = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let token = q.get("continue").filter(|c| !c.is_empty());
    let mut limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    // As the watch cache, which serves `resourceVersion=0` whole: the limit is ignored.
    if rv_param == "0" && token.is_none() {
        limit = None;
    }
    let across_namespaces = t.info.namespaced && t.ns.is_none();
    // Keys of cluster-scoped objects have an empty namespace.
    let listed_ns = if across_namespaces {
        None
    } else {
        Some(t.ns.as_deref().unwrap_or(""))
    };
    let mut resume = None;
    let mut token_key = String::new();
    if let Some(c) = token {
        let c = decode_continue(c)?;
        if !rv_param.is_empty() && rv_param != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        if let Some(rv) = c.rv {
            let current = app.store.current_rv();
            if rv > current {
                return Err(too_large(rv, current));
            }
        }
        resume = Some(Resume {
            rv: c.rv,
            start: start_bound(listed_ns, &c.key),
        });
        token_key = c.key;
    }
    let name = filter.only_name();
    let page = match app.store.list_page(
        &t.info.gr(),
        t.ns.as_deref(),
        name.as_deref(),
        resume,
        limit,
        &filter,
    ) {
        Ok(p) => p,
        Err(Expired) => return Ok(continue_expired(&token_key)),
    };
    let rv = page.rv;
    let cont = page
        .more_after
        .as_ref()
        .map(|k| encode_continue(rv as i64, &start_key(across_namespaces, k)));
    let remaining = page.remaining.filter(|_| cont.is_some());
    if wants_table(headers) {
        let items: Vec<Value> = page
            .items
            .iter()
            .map(|v| out(&t.info, &t.version, v))
            .collect();
        let include = Include::parse(q.get("includeObject").map(String::as_str));
        let mut table = tables::table(&t.info, &t.version, &items, include, rv, cont);
        if let Some(n) = remaining {
            table["metadata"]["remainingItemCount"] = json!(n);
        }
        return Ok(json_response(200, &table));
    }
    let items: Vec<Served> = page
        .items
        .iter()
        .map(|v| Served::new(&t.info, &t.version, v).slim(t.slim))
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    match cont {
        Some(c) => metadata["continue"] = json!(c),
        // A custom resource's list is unstructured, whose `continue` is always set.
        None if t.info.is_custom() => metadata["continue"] = json!(""),
        None => {}
    }
    if let Some(n) = remaining {
        metadata["remainingItemCount"] = json!(n);
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct List<'a> {
        kind: &'a str,
        api_version: String,
        metadata: Value,
        items: Vec<Served<'a>>,
    }
    Ok(json_response(
        200,
        &List {
            kind: &t.info.list_kind,
            api_version: t.info.api_version(&t.version),
            metadata,
            items,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_to_its_version_and_start() {
        let t = encode_continue(7, &start_key(false, &("n".into(), "b".into())));
        assert_eq!(
            decode_continue(&t).unwrap(),
            Continue {
                rv: Some(7),
                key: "/b\0".into()
            }
        );
        // Resuming at the current version.
        let t = encode_continue(-1, "/n/b\0");
        assert_eq!(decode_continue(&t).unwrap().rv, None);
        // The start is within the listed namespace, or names one across namespaces.
        assert_eq!(
            start_bound(Some("n"), "/b\0"),
            Bound::Excluded(("n".into(), "b".into()))
        );
        assert_eq!(
            start_bound(Some(""), "/pool"),
            Bound::Included((String::new(), "pool".into()))
        );
        assert_eq!(
            start_bound(None, "/n/b\0"),
            Bound::Excluded(("n".into(), "b".into()))
        );
    }

    #[test]
    fn only_clean_keys_are_read() {
        for ok in ["/", "/a", "/a/b", "/a\0"] {
            assert!(is_clean_path(ok), "{ok}");
        }
        for bad in ["/a/", "//a", "/./a", "/a/..", "/a//b"] {
            assert!(!is_clean_path(bad), "{bad}");
        }
    }
}
