//! LIST: label and field selectors, continue tokens, and the list response.

use std::collections::HashMap;

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
use crate::store::Select;
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
        let needles = json_needles(&label, &field);
        Ok(Filter {
            label,
            field,
            needles,
        })
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
}

fn encode_continue(k: &(String, String)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&json!([k.0, k.1])).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<(String, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let v: (String, String) = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok(v)
}

pub(super) fn list(
    app: &App,
    t: &Target,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let filter = Filter::parse(t, q)?;
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let after = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let name = filter.only_name();
    let (rv, items, next) = app.store.list_named(
        &t.info.gr(),
        t.ns.as_deref(),
        name.as_deref(),
        after,
        limit,
        &filter,
    );
    let cont = next.as_ref().map(encode_continue);
    if wants_table(headers) {
        let items: Vec<Value> = items.iter().map(|v| out(&t.info, &t.version, v)).collect();
        let include = Include::parse(q.get("includeObject").map(String::as_str));
        return Ok(json_response(
            200,
            &tables::table(&t.info, &t.version, &items, include, rv, cont),
        ));
    }
    let items: Vec<Served> = items
        .iter()
        .map(|v| Served::new(&t.info, &t.version, v).slim(t.slim))
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
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
