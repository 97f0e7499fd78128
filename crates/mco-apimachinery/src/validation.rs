//! Validation every object gets whatever its kind, as kube-apiserver's ObjectMeta
//! validation does it and in its words: label keys and values, annotation keys and their
//! total size, and how deep an object may nest.
//!
//! Depth: kube-apiserver's JSON decoder refuses nesting past 10,000 levels (`exceeded max
//! depth`); serde_json, which reads every stored object back, refuses past 128. An object
//! written must read back with its managedFields (which mirror its fields about five levels
//! further down) inside a List or a watch event (two more), so writes stop at
//! [`MAX_OBJECT_DEPTH`].

use serde_json::Value;

/// The longest label value, and the longest name part of a qualified name.
pub const LABEL_VALUE_MAX: usize = 63;
/// The longest DNS subdomain (a qualified name's prefix).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// All annotation keys and values of one object together, in bytes (kube-apiserver's
/// `TotalAnnotationSizeLimitB`).
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// The deepest nesting of objects and arrays an object may be written with, counting the
/// object itself as 1 and leaving out `metadata.managedFields` (the server writes those).
pub const MAX_OBJECT_DEPTH: usize = 100;

/// How a field is wrong, as `metav1.CauseType` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    Invalid,
    TooLong,
    TooDeep,
}

/// One field error: `<field>: <body>` is what kube-apiserver prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: String,
    /// The offending value, JSON-quoted as Go's `%q` would quote it (empty for TooLong).
    pub value: String,
    pub detail: String,
}

impl FieldError {
    fn invalid(field: &str, value: &str, detail: String) -> FieldError {
        FieldError {
            kind: ErrorType::Invalid,
            field: field.into(),
            value: serde_json::to_string(value).unwrap_or_default(),
            detail,
        }
    }

    /// The cause's `reason` in a Status.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooDeep => "FieldValueInvalid",
        }
    }

    /// The message after the field: `Invalid value: "x": detail`.
    pub fn body(&self) -> String {
        match self.kind {
            ErrorType::Invalid => format!("Invalid value: {}: {}", self.value, self.detail),
            ErrorType::TooLong => format!("Too long: {}", self.detail),
            ErrorType::TooDeep => format!("Too deep: {}", self.detail),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

/// `util/validation`'s `MaxLenError`, which object names still use.
fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// The `content` package's `MaxLenError`, which label keys and values and what `content`
/// validates use in the pinned kube-apiserver.
fn max_len_bytes_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

fn alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && ok(b[0]) && ok(b[b.len() - 1]) && b.iter().all(|&c| ok(c) || c == b'-')
}

/// Why `value` is not a DNS-1123 subdomain (`util/validation.IsDNS1123Subdomain`, which object
/// names use).
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    subdomain_errors(value, max_len_error)
}

/// Why `value` is not a DNS-1123 subdomain in the `content` package's words
/// (`content.IsDNS1123Subdomain`: label key prefixes, Event names).
pub fn dns1123_subdomain_content(value: &str) -> Vec<String> {
    subdomain_errors(value, max_len_bytes_error)
}

fn subdomain_errors(value: &str, too_long: fn(usize) -> String) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(too_long(DNS1123_SUBDOMAIN_MAX));
    }
    if !value.split('.').all(is_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Why `value` is not a qualified name, `[prefix/]name` (`IsQualifiedName`, which is the
/// `content` package's `IsLabelKey` in the pinned kube-apiserver, in its words).
pub fn qualified_name(value: &str) -> Vec<String> {
    let name_regex = || {
        regex_error(
            QUALIFIED_NAME_MSG,
            QUALIFIED_NAME_FMT,
            &["MyName", "my.name", "123-abc"],
        )
    };
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain_content(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                name_regex()
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_VALUE_MAX {
        errs.push(format!(
            "name part {}",
            max_len_bytes_error(LABEL_VALUE_MAX)
        ));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {}", name_regex()));
    }
    errs
}

/// Why `value` is not a label value (`IsValidLabelValue`, `content.IsLabelValue`).
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_bytes_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// The labels and annotations of `obj`'s metadata, checked as kube-apiserver checks them
/// for every kind. Values that are not strings are reported as invalid.
pub fn object_meta(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = obj.get("metadata");
    if let Some(labels) = meta
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        let f = "metadata.labels";
        for (k, v) in labels {
            for m in qualified_name(k) {
                errs.push(FieldError::invalid(f, k, m));
            }
            match v.as_str() {
                Some(v) => {
                    for m in label_value(v) {
                        errs.push(FieldError::invalid(f, v, m));
                    }
                }
                None if v.is_null() => {}
                None => errs.push(FieldError::invalid(
                    f,
                    &v.to_string(),
                    "a label value must be a string".into(),
                )),
            }
        }
    }
    if let Some(ann) = meta
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let f = "metadata.annotations";
        let mut total = 0usize;
        for (k, v) in ann {
            // Case does not matter in annotation keys.
            for m in qualified_name(&k.to_lowercase()) {
                errs.push(FieldError::invalid(f, k, m));
            }
            total += k.len();
            match v {
                Value::String(s) => total += s.len(),
                Value::Null => {}
                other => errs.push(FieldError::invalid(
                    f,
                    &other.to_string(),
                    "an annotation value must be a string".into(),
                )),
            }
        }
        if total > ANNOTATIONS_MAX_BYTES {
            errs.push(FieldError {
                kind: ErrorType::TooLong,
                field: f.into(),
                value: String::new(),
                detail: format!("must have at most {ANNOTATIONS_MAX_BYTES} bytes"),
            });
        }
    }
    errs
}

/// Where `obj` nests deeper than `max` levels, leaving out `metadata.managedFields`: the
/// path of the first object or array past the limit.
pub fn too_deep(obj: &Value, max: usize) -> Option<FieldError> {
    fn walk(v: &Value, depth: usize, max: usize, path: &mut String, root: bool) -> bool {
        let len = path.len();
        match v {
            Value::Object(_) | Value::Array(_) if depth > max => true,
            Value::Object(m) => m.iter().any(|(k, c)| {
                if root && k == "metadata" {
                    // Skip managedFields: walk metadata's other children at depth + 1.
                    path.push_str("metadata");
                    let found = c.as_object().is_some_and(|mm| {
                        mm.iter()
                            .filter(|(k, _)| *k != "managedFields")
                            .any(|(k, cc)| {
                                let l = path.len();
                                path.push('.');
                                path.push_str(k);
                                let f = walk(cc, depth + 2, max, path, false);
                                if !f {
                                    path.truncate(l);
                                }
                                f
                            })
                    }) || (!c.is_object() && walk(c, depth + 1, max, path, false));
                    if !found {
                        path.truncate(len);
                    }
                    return found;
                }
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                let f = walk(c, depth + 1, max, path, false);
                if !f {
                    path.truncate(len);
                }
                f
            }),
            Value::Array(a) => a.iter().enumerate().any(|(i, c)| {
                path.push_str(&format!("[{i}]"));
                let f = walk(c, depth + 1, max, path, false);
                if !f {
                    path.truncate(len);
                }
                f
            }),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(obj, 1, max, &mut path, true).then(|| FieldError {
        kind: ErrorType::TooDeep,
        field: if path.is_empty() {
            "<root>".into()
        } else {
            path
        },
        value: String::new(),
        detail: format!("must have at most {max} levels of nesting: exceeded max depth"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(obj: Value) -> Vec<String> {
        object_meta(&obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn label_values_in_kube_apiservers_words() {
        assert_eq!(
            messages(json!({"metadata": {"labels": {"a": "-bad value-"}}})),
            [
                "metadata.labels: Invalid value: \"-bad value-\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
        let at = "v".repeat(LABEL_VALUE_MAX);
        assert!(
            messages(json!({"metadata": {"labels": {"a": at, "b": "", "c": "A.b_c-1"}}}))
                .is_empty()
        );
        let over = "v".repeat(LABEL_VALUE_MAX + 1);
        assert_eq!(
            messages(json!({"metadata": {"labels": {"a": over}}})),
            [format!(
                "metadata.labels: Invalid value: \"{over}\": must be no more than 63 bytes"
            )]
        );
    }

    #[test]
    fn label_keys_are_qualified_names() {
        let at = format!("{}/{}", "p".repeat(DNS1123_SUBDOMAIN_MAX), "k".repeat(63));
        assert!(
            messages(json!({"metadata": {"labels": {at: "v", "example.com/a": "v"}}})).is_empty()
        );
        let long = "k".repeat(64);
        assert_eq!(
            messages(json!({"metadata": {"labels": {&long: "v"}}})),
            [format!(
                "metadata.labels: Invalid value: \"{long}\": name part must be no more than 63 bytes"
            )]
        );
        let m = messages(json!({"metadata": {"labels": {"Example.com/a": "v"}}}));
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with("metadata.labels: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain"), "{m:?}");
        let m = messages(json!({"metadata": {"labels": {"a/b/c": "v", "/a": "v", "": "v"}}}));
        assert!(m[0].contains("a valid label key must consist of"), "{m:?}");
        assert!(m[1].contains("prefix part must be non-empty"), "{m:?}");
        assert!(m[2].contains("name part must be non-empty"), "{m:?}");
    }

    #[test]
    fn annotations_total_at_most_256_kib() {
        let at = "x".repeat(ANNOTATIONS_MAX_BYTES - 1);
        assert!(messages(json!({"metadata": {"annotations": {"a": at}}})).is_empty());
        let over = "x".repeat(ANNOTATIONS_MAX_BYTES);
        assert_eq!(
            messages(json!({"metadata": {"annotations": {"a": over}}})),
            ["metadata.annotations: Too long: must have at most 262144 bytes"]
        );
        // Keys are qualified names, case aside.
        assert!(
            messages(json!({"metadata": {"annotations": {"Kubectl.Kubernetes.io/Last": "x"}}}))
                .is_empty()
        );
        assert_eq!(
            messages(json!({"metadata": {"annotations": {"a b": "x"}}})).len(),
            1
        );
    }

    #[test]
    fn reasons_are_cause_types() {
        let e = object_meta(
            &json!({"metadata": {"labels": {"a": "-"}, "annotations": {"a": "x".repeat(300_000)}}}),
        );
        assert_eq!(
            e.iter().map(FieldError::reason).collect::<Vec<_>>(),
            ["FieldValueInvalid", "FieldValueTooLong"]
        );
    }

    fn nested(levels: usize) -> Value {
        // `levels` counts the object itself: {"spec": {"a": {"a": ...}}}.
        let mut v = json!({});
        for _ in 0..levels.saturating_sub(2) {
            v = json!({ "a": v });
        }
        json!({"metadata": {"name": "x"}, "spec": v})
    }

    #[test]
    fn depth_at_the_limit_and_one_over() {
        assert_eq!(too_deep(&nested(MAX_OBJECT_DEPTH), MAX_OBJECT_DEPTH), None);
        let e = too_deep(&nested(MAX_OBJECT_DEPTH + 1), MAX_OBJECT_DEPTH).unwrap();
        assert_eq!(
            e.field,
            format!("spec{}", ".a".repeat(MAX_OBJECT_DEPTH - 1))
        );
        assert_eq!(
            e.body(),
            "Too deep: must have at most 100 levels of nesting: exceeded max depth"
        );
        // Arrays count as objects do, and the path says where.
        let e = too_deep(&json!({"a": [[{"b": [1]}]]}), 4).unwrap();
        assert_eq!(e.field, "a[0][0].b");
        assert!(too_deep(&json!({"a": [[{"b": 1}]]}), 4).is_none());
        // Labels nest under metadata as deep as anything else.
        assert!(too_deep(&json!({"metadata": {"labels": {}}}), 2).is_some());
    }

    #[test]
    fn managed_fields_do_not_count() {
        let mut obj = nested(MAX_OBJECT_DEPTH);
        let mut deep = json!({});
        for _ in 0..MAX_OBJECT_DEPTH + 10 {
            deep = json!({ "f:a": deep });
        }
        obj["metadata"]["managedFields"] = json!([{"fieldsV1": deep}]);
        assert_eq!(too_deep(&obj, MAX_OBJECT_DEPTH), None);
    }
}
