//! Properties of pruning and defaulting that must hold for any input, since the
//! server runs them on every write of a custom resource.

use mco_apimachinery::schema::Structural;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn schema() -> Structural {
    Structural::parse(&json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "properties": {
                    "x": {"type": "string", "default": "dx"},
                    "n": {"type": "integer", "nullable": true},
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"k": {"type": "string", "default": "dk"}}
                        }
                    },
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }
            },
            "status": {"type": "object", "properties": {"k": {"type": "string"}}}
        }
    }))
    .expect("schema parses")
}

fn json_value() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "spec", "status", "x", "n", "k", "items", "labels", "free", "bogus", "metadata", "kind",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..5).prop_map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

proptest! {
    #[test]
    fn prune_is_idempotent_and_reports_exactly_what_it_drops(v in json_value()) {
        let s = schema();
        let mut once = json!({"spec": v.clone(), "status": v.clone(), "bogus": v});
        s.prune(&mut once);
        let mut twice = once.clone();
        prop_assert!(s.prune(&mut twice).is_empty());
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn defaulting_is_idempotent_and_never_removes_set_values(v in json_value()) {
        let s = schema();
        let mut obj = json!({"spec": v});
        s.prune(&mut obj);
        s.apply_defaults(&mut obj);
        let mut again = obj.clone();
        s.apply_defaults(&mut again);
        prop_assert_eq!(&obj, &again);
        if let Some(spec) = obj.get("spec").filter(|v| v.is_object()) {
            prop_assert!(spec.get("x").is_some(), "defaulted field present: {}", spec);
        }
    }

    #[test]
    fn validation_never_panics(v in json_value()) {
        let s = schema();
        let errs = s.validate(&json!({"spec": v.clone(), "status": v}));
        for e in errs {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}
