//! Property test over the request decoders: whatever bytes or nesting a client sends, JSON
//! and YAML decoding, the three patch kinds and the write-time checks return an answer (a
//! value or an error) without panicking, and deep nesting is refused within the limits.
//!
//! Runs 64 cases per property in the normal test run. For a longer run:
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test --release -p mco-apimachinery --test it -- decoders_fuzz
//! ```

use mco_apimachinery::patch::{ListType, json_patch, merge_patch, strategic_merge_patch};
use mco_apimachinery::validation::{self, MAX_OBJECT_DEPTH};
use mco_apimachinery::yaml;
use proptest::prelude::*;
use serde_json::Value;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(64),
        ..ProptestConfig::default()
    }
}

/// Arbitrary JSON values, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z$/.:-]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z$/.:-]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text that looks like JSON or YAML: brackets, braces, quotes, keys, anchors.
fn structured_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("{"),
            Just("}"),
            Just("["),
            Just("]"),
            Just(":"),
            Just(","),
            Just("\""),
            Just("- "),
            Just("\n"),
            Just("  "),
            Just("a"),
            Just("&x "),
            Just("*x"),
            Just("1"),
            Just("null"),
            Just("$patch"),
            Just("\\u00"),
            Just("---"),
            Just("!!binary "),
        ],
        0..200,
    )
    .prop_map(|parts| parts.concat())
}

fn keys(path: &[&str]) -> ListType {
    match path.last() {
        Some(&"items") => ListType::map(["name"]),
        Some(&"finalizers") => ListType::Set,
        _ => ListType::Atomic,
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decoders_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = serde_json::from_slice::<Value>(&bytes);
        let _ = yaml::from_slice::<Value>(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_structured_text(text in structured_text()) {
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            let _ = validation::too_deep(&v, MAX_OBJECT_DEPTH);
            let _ = validation::object_meta(&v);
        }
        if let Ok(v) = yaml::from_str::<Value>(&text) {
            let _ = validation::too_deep(&v, MAX_OBJECT_DEPTH);
        }
    }

    #[test]
    fn patches_never_panic(doc in json_value(), patch in json_value()) {
        let _ = merge_patch(&doc, &patch);
        let _ = json_patch(&doc, &patch);
        let _ = strategic_merge_patch(&doc, &patch, &keys);
        let _ = validation::object_meta(&doc);
    }

    /// Nesting far past every limit is refused by the decoders, never built.
    #[test]
    fn deep_nesting_is_refused(depth in 129usize..20_000, open in prop_oneof![Just('['), Just('{')]) {
        let (o, c) = if open == '[' { ("[", "]") } else { ("{\"a\":", "}") };
        let text = o.repeat(depth) + if open == '[' { "" } else { "1" } + &c.repeat(depth);
        prop_assert!(serde_json::from_str::<Value>(&text).is_err());
        prop_assert!(yaml::from_str::<Value>(&text).is_err());
    }

    /// Nesting between the write limit and serde_json's is decoded, then refused at write.
    #[test]
    fn nesting_past_the_write_limit_is_named(depth in MAX_OBJECT_DEPTH + 1..127) {
        let text = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        let v: Value = serde_json::from_str(&text).unwrap();
        let e = validation::too_deep(&v, MAX_OBJECT_DEPTH).unwrap();
        prop_assert_eq!(e.field.split('.').count(), MAX_OBJECT_DEPTH);
    }
}
