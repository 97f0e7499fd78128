//! Structural-schema behaviour compared with kube-apiserver's exact texts.

use mco_apimachinery::schema::{
    FieldErrorType, ListType, Structural, aggregate_message, only_status, preserve_status,
    strip_status,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn schema() -> Structural {
    Structural::parse(&json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["x"],
                "properties": {
                    "x": {"type": "string"},
                    "kernelType": {"type": "string", "enum": ["default", "realtime"]},
                    "maxUnavailable": {
                        "x-kubernetes-int-or-string": true,
                        "anyOf": [{"type": "integer"}, {"type": "string"}]
                    },
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                    "ratio": {"type": "number", "maximum": 1.5, "exclusiveMaximum": true},
                    "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                    "items": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 3,
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}}
                        }
                    },
                    "tags": {
                        "type": "array",
                        "x-kubernetes-list-type": "set",
                        "items": {"type": "string"}
                    },
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}
                        }
                    },
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "maxLength": 3}
                    },
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": true,
                        "x-kubernetes-preserve-unknown-fields": true
                    },
                    "flag": {"type": "boolean"},
                    "when": {"type": "string", "format": "date-time"},
                    "addr": {"type": "string", "format": "ipv4"},
                    "id": {"type": "string", "format": "uuid"},
                    "free": {"type": "string", "format": "something-custom"},
                    "opt": {"type": "string", "nullable": true},
                    "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object",
                            "properties": {"type": {"type": "string"}, "status": {"type": "string"}}
                        }
                    },
                    "observedGeneration": {"type": "integer"}
                }
            }
        }
    }))
    .expect("schema parses")
}

fn obj(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t"},
        "spec": spec
    })
}

fn messages(spec: Value) -> Vec<String> {
    schema()
        .validate(&obj(spec))
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn valid_object_has_no_errors() {
    let spec = json!({
        "x": "a",
        "kernelType": "realtime",
        "maxUnavailable": "10%",
        "replicas": 2.0,
        "ratio": 1.2,
        "name": "abc",
        "items": [{"name": "a"}],
        "tags": ["a", "b"],
        "ports": [{"name": "a", "port": 1}, {"name": "b", "port": 1}],
        "labels": {"k": "v"},
        "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {}},
        "flag": true,
        "when": "2026-11-30T10:00:00Z",
        "addr": "10.0.0.1",
        "id": "39e06294-2876-5528-ad66-de63c0281ee9",
        "free": "anything",
        "opt": null
    });
    assert_eq!(messages(spec), Vec::<String>::new());
    assert!(
        schema()
            .validate(&obj(json!({"x": "a", "maxUnavailable": 3})))
            .is_empty()
    );
}

#[test]
fn validation_messages_match_kube_apiserver() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["spec.x: Required value"]),
        (
            json!({"x": "a", "kernelType": "foo"}),
            vec![
                r#"spec.kernelType: Unsupported value: "foo": supported values: "default", "realtime""#,
            ],
        ),
        (
            // The int-or-string type check, then the anyOf that CRDs pair with it
            // (its own message has no field path upstream), then the failures of
            // the first alternative.
            json!({"x": "a", "maxUnavailable": {"a": 1}}),
            vec![
                r#"spec.maxUnavailable: Invalid value: "object": spec.maxUnavailable in body must be of type integer,string: "object""#,
                r#": Invalid value: "": "spec.maxUnavailable" must validate at least one schema (anyOf)"#,
                r#"spec.maxUnavailable: Invalid value: "object": spec.maxUnavailable in body must be of type integer: "object""#,
            ],
        ),
        (
            json!({"x": "a", "replicas": 0}),
            vec![
                "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
            ],
        ),
        (
            json!({"x": "a", "replicas": 11}),
            vec![
                "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
            ],
        ),
        (
            json!({"x": "a", "replicas": "3"}),
            vec![
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            ],
        ),
        (
            json!({"x": "a", "replicas": 2.5}),
            vec![
                r#"spec.replicas: Invalid value: "number": spec.replicas in body must be of type integer: "number""#,
            ],
        ),
        (
            json!({"x": "a", "ratio": 1.5}),
            vec!["spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5"],
        ),
        (
            // Upstream truncates the bound to an integer when the value is one.
            json!({"x": "a", "ratio": 1}),
            vec!["spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1"],
        ),
        (
            json!({"x": "a", "name": "toolong"}),
            vec!["spec.name: Too long: may not be longer than 5"],
        ),
        (
            json!({"x": "a", "name": ""}),
            vec![
                r#"spec.name: Invalid value: "": spec.name in body should be at least 1 chars long"#,
            ],
        ),
        (
            json!({"x": "a", "name": "AB"}),
            vec![r#"spec.name: Invalid value: "AB": spec.name in body should match '^[a-z]+$'"#],
        ),
        (
            json!({"x": "a", "items": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}]}),
            vec!["spec.items: Too many: 4: must have at most 3 items"],
        ),
        (
            json!({"x": "a", "items": []}),
            vec!["spec.items: Invalid value: 0: spec.items in body should have at least 1 items"],
        ),
        (
            json!({"x": "a", "items": [{"name": "a"}, {"name": 5}, {}]}),
            vec![
                r#"spec.items[1].name: Invalid value: "integer": spec.items[1].name in body must be of type string: "integer""#,
                "spec.items[2].name: Required value",
            ],
        ),
        (
            json!({"x": "a", "tags": ["a", "b", "a"]}),
            vec![r#"spec.tags[2]: Duplicate value: "a""#],
        ),
        (
            json!({"x": "a", "ports": [{"name": "http", "port": 1}, {"name": "http", "port": 2}]}),
            vec![r#"spec.ports[1]: Duplicate value: map[string]interface {}{"name":"http"}"#],
        ),
        (
            json!({"x": "a", "labels": {"k": "long"}}),
            vec!["spec.labels.k: Too long: may not be longer than 3"],
        ),
        (
            json!({"x": "a", "template": {"apiVersion": "v1"}}),
            vec!["spec.template.kind: Required value: must not be empty"],
        ),
        (
            json!({"x": "a", "template": {"apiVersion": "", "kind": 3}}),
            vec![
                r#"spec.template.apiVersion: Invalid value: "": must not be empty"#,
                "spec.template.kind: Invalid value: 3: must be a string",
            ],
        ),
        (
            json!({"x": "a", "when": ""}),
            vec![
                r#"spec.when: Invalid value: "": spec.when in body must be of type date-time: """#,
            ],
        ),
        (
            json!({"x": "a", "when": "2026-11-30T10:00:00.123456+02:00", "addr": "10.0.0.256"}),
            vec![
                r#"spec.addr: Invalid value: "10.0.0.256": spec.addr in body must be of type ipv4: "10.0.0.256""#,
            ],
        ),
        (
            json!({"x": "a", "id": "not-a-uuid"}),
            vec![
                r#"spec.id: Invalid value: "not-a-uuid": spec.id in body must be of type uuid: "not-a-uuid""#,
            ],
        ),
        (
            json!({"x": "a", "flag": null}),
            vec![
                r#"spec.flag: Invalid value: "null": spec.flag in body must be of type boolean: "null""#,
            ],
        ),
        (
            json!({"x": "a", "kernelType": {"a": 1}}),
            vec![
                r#"spec.kernelType: Invalid value: "object": spec.kernelType in body must be of type string: "object""#,
                r#"spec.kernelType: Unsupported value: map[string]interface {}{"a":1}: supported values: "default", "realtime""#,
            ],
        ),
        (
            json!("str"),
            vec![r#"spec: Invalid value: "string": spec in body must be of type object: "string""#],
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(messages(spec.clone()), want, "spec {spec}");
    }
}

#[test]
fn error_reasons_and_bodies_feed_status_causes() {
    let errs = schema().validate(&obj(json!({"kernelType": "foo", "replicas": "x"})));
    let got: Vec<(&str, &str, String)> = errs
        .iter()
        .map(|e| (e.type_.reason(), e.field.as_str(), e.body()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "FieldValueNotSupported",
                "spec.kernelType",
                r#"Unsupported value: "foo": supported values: "default", "realtime""#.to_string()
            ),
            (
                "FieldValueTypeInvalid",
                "spec.replicas",
                r#"Invalid value: "string": spec.replicas in body must be of type integer: "string""#
                    .to_string()
            ),
            ("FieldValueRequired", "spec.x", "Required value".to_string()),
        ]
    );
    assert_eq!(errs[0].type_, FieldErrorType::NotSupported);
    assert_eq!(
        aggregate_message(&errs[2..]),
        "spec.x: Required value",
        "one error is printed bare"
    );
    assert_eq!(
        aggregate_message(&[errs[2].clone(), errs[2].clone(), errs[0].clone()]),
        r#"[spec.x: Required value, spec.kernelType: Unsupported value: "foo": supported values: "default", "realtime"]"#
    );
}

#[test]
fn composite_schemas() {
    let s = Structural::parse(&json!({
        "type": "object",
        "properties": {
            "size": {
                "x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+%$"}]
            },
            "mode": {"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 3}]},
            "union": {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}]
            },
            "name": {"type": "string", "not": {"enum": ["forbidden"]}}
        }
    }))
    .unwrap();
    let msgs =
        |o: Value| -> Vec<String> { s.validate(&o).iter().map(ToString::to_string).collect() };

    assert!(msgs(json!({"size": 3, "mode": "ab", "union": {"a": "x"}, "name": "ok"})).is_empty());
    assert!(msgs(json!({"size": "10%"})).is_empty());
    assert_eq!(
        msgs(json!({"size": "ten"})),
        vec![
            r#": Invalid value: "": "size" must validate at least one schema (anyOf)"#,
            r#"size: Invalid value: "string": size in body must be of type integer: "string""#,
        ]
    );
    assert_eq!(
        msgs(json!({"mode": "abcd"})),
        vec![
            "mode: Too long: may not be longer than 3",
            r#": Invalid value: "": "mode" must validate all the schemas (allOf)"#,
        ]
    );
    assert_eq!(
        msgs(json!({"union": {"a": "x", "b": "y"}})),
        vec![
            r#": Invalid value: "": "union" must validate one and only one schema (oneOf). Found 2 valid alternatives"#
        ]
    );
    assert_eq!(
        msgs(json!({"union": {}})),
        vec![
            r#": Invalid value: "": "union" must validate one and only one schema (oneOf). Found none valid"#,
            "union.a: Required value",
        ]
    );
    assert_eq!(
        msgs(json!({"name": "forbidden"})),
        vec![r#": Invalid value: "": "name" must not validate the schema (not)"#]
    );
}

#[test]
fn root_metadata_is_not_schema_validated() {
    let mut o = obj(json!({"x": "a"}));
    o["metadata"] = json!("not-an-object");
    assert!(schema().validate(&o).is_empty());
}

#[test]
fn invalid_pattern_is_a_schema_error() {
    let err = Structural::parse(&json!({"type": "string", "pattern": "("})).unwrap_err();
    assert!(err.to_string().contains("invalid pattern"), "{err}");
    assert!(Structural::parse(&json!("nope")).is_err());
}

#[test]
fn prune_drops_unknown_fields() {
    let mut o = json!({
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t", "whatever": {"kept": true}},
        "unknownRoot": 1,
        "spec": {
            "x": "a",
            "bogus": "drop me",
            "items": [{"name": "a", "extra": 1}],
            "labels": {"k": "v", "k2": "v2"},
            "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}},
            "config": {"ignition": {"version": "3.4.0"}, "anything": [1, 2]}
        },
        "status": {"observedGeneration": 1, "junk": true, "conditions": [{"type": "A", "status": "True", "x": 1}]}
    });
    let pruned = schema().prune(&mut o);
    assert_eq!(
        pruned,
        vec![
            "unknownRoot",
            "spec.bogus",
            "spec.items[0].extra",
            "status.junk",
            "status.conditions[0].x"
        ]
    );
    assert_eq!(
        o,
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Thing",
            "metadata": {"name": "t", "whatever": {"kept": true}},
            "spec": {
                "x": "a",
                "items": [{"name": "a"}],
                "labels": {"k": "v", "k2": "v2"},
                "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}},
                "config": {"ignition": {"version": "3.4.0"}, "anything": [1, 2]}
            },
            "status": {"observedGeneration": 1, "conditions": [{"type": "A", "status": "True"}]}
        })
    );
}

#[test]
fn prune_under_preserve_still_prunes_known_children() {
    let s = Structural::parse(&json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "known": {"type": "object", "properties": {"a": {"type": "string"}}}
        }
    }))
    .unwrap();
    let mut o = json!({"free": {"x": 1}, "known": {"a": "1", "b": "2"}});
    assert_eq!(s.prune(&mut o), vec!["known.b"]);
    assert_eq!(o, json!({"free": {"x": 1}, "known": {"a": "1"}}));
}

#[test]
fn defaults_are_applied_like_upstream() {
    let s = Structural::parse(&json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "properties": {
                    "mode": {"type": "string", "default": "auto"},
                    "count": {"type": "integer", "default": 3},
                    "keep": {"type": "string", "default": "d"},
                    "gone": {"type": "string"},
                    "nullable": {"type": "string", "nullable": true},
                    "list": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"p": {"type": "integer", "default": 80}}
                        }
                    },
                    "map": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "default": "m"}
                    }
                }
            }
        }
    }))
    .unwrap();

    let mut empty = json!({"apiVersion": "v1", "kind": "K", "metadata": {}});
    s.apply_defaults(&mut empty);
    assert_eq!(
        empty["spec"],
        json!({"mode": "auto", "count": 3, "keep": "d"}),
        "a defaulted object gets its own nested defaults"
    );

    let mut o = json!({"spec": {
        "mode": "manual",
        "keep": null,
        "gone": null,
        "nullable": null,
        "list": [{}, {"p": 1}],
        "map": {"a": null, "b": "x"}
    }});
    s.apply_defaults(&mut o);
    assert_eq!(
        o,
        json!({"spec": {
            "mode": "manual",
            "keep": "d",
            "nullable": null,
            "list": [{"p": 80}, {"p": 1}],
            "map": {"a": "m", "b": "x"},
            "count": 3
        }})
    );
}

#[test]
fn list_types_for_merging() {
    let s = schema();
    assert_eq!(s.list_type_at(&["spec", "tags"]), Some(ListType::Set));
    assert_eq!(
        s.list_type_at(&["spec", "ports"]),
        Some(ListType::Map {
            keys: vec!["name".into()]
        })
    );
    assert_eq!(
        s.list_type_at(&["status", "conditions"]),
        Some(ListType::Map {
            keys: vec!["type".into()]
        })
    );
    assert_eq!(s.list_type_at(&["spec", "items"]), Some(ListType::Atomic));
    assert_eq!(s.list_type_at(&["spec", "x"]), None, "not a list");
    assert_eq!(s.list_type_at(&["spec", "nope"]), None, "unknown field");
    assert_eq!(
        s.schema_at(&["spec", "items", "name"])
            .and_then(|n| n.type_.as_deref()),
        Some("string"),
        "arrays are stepped through"
    );
}

#[test]
fn schema_from_crd_versions() {
    let crd = json!({
        "spec": {"versions": [
            {"name": "v1alpha1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {"a": {"type": "string"}}}}},
            {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {"b": {"type": "integer"}}}}},
            {"name": "v2"}
        ]}
    });
    let v1 = Structural::from_crd(&crd, "v1").unwrap().unwrap();
    assert!(v1.property("b").is_some() && v1.property("a").is_none());
    let v1a1 = Structural::from_crd(&crd, "v1alpha1").unwrap().unwrap();
    assert!(v1a1.property("a").is_some());
    assert!(Structural::from_crd(&crd, "v2").unwrap().is_none());
}

#[test]
fn status_subresource_helpers() {
    let old = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "spec": {"x": 1}, "status": {"s": "old"}});

    let mut created = json!({"spec": {"x": 1}, "status": {"s": "client"}});
    assert_eq!(strip_status(&mut created), Some(json!({"s": "client"})));
    assert_eq!(created, json!({"spec": {"x": 1}}));

    let mut main_update =
        json!({"metadata": {"name": "a"}, "spec": {"x": 2}, "status": {"s": "ignored"}});
    preserve_status(&mut main_update, &old);
    assert_eq!(main_update["status"], json!({"s": "old"}));
    assert_eq!(main_update["spec"], json!({"x": 2}));

    let status_update = json!({
        "metadata": {"name": "a", "managedFields": [{"manager": "m"}]},
        "spec": {"x": 99},
        "status": {"s": "new"}
    });
    let merged = only_status(&status_update, &old);
    assert_eq!(
        merged,
        json!({
            "metadata": {"name": "a", "resourceVersion": "1", "managedFields": [{"manager": "m"}]},
            "spec": {"x": 1},
            "status": {"s": "new"}
        })
    );
}
