//! YAML as mco reads and writes it: apply-patch bodies, `mco render` inputs, kubeconfigs,
//! and the committed CRDs and install manifests. One place, so every reader resolves
//! `yes` or `0755` the same way and every reader refuses hostile input the same way.
//!
//! Reading keeps the YAML 1.2 core schema serde_yaml 0.9 had: only `true`/`false` are
//! booleans (`yes`, `on` stay strings), `0755` and `1_000` stay strings, `0o755` is 493,
//! `~` is null, `<<` is an ordinary key and a duplicate key is an error. kube-apiserver's
//! sigs.k8s.io/yaml (go-yaml, YAML 1.1) would read `yes` as true and `0755` as 493; kubectl
//! sends apply bodies as JSON, where the two agree.
//!
//! Nesting is refused past 64 levels while parsing, before a tree is built, so 100k open
//! brackets fail in milliseconds. serde_yaml allowed 128, but decoding 128 levels into a
//! `serde_json::Value` through serde-saphyr overflows a 2 MiB stack (a tokio worker's) in
//! debug builds; Kubernetes objects, CRD schemas included, stay far below 64.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_saphyr::options::{DuplicateKeyPolicy, NonFiniteFloatPolicy};

pub use serde_saphyr::Error as DecodeError;
pub use serde_saphyr::SerializeError as EncodeError;

/// The deepest nesting of sequences and mappings a document may have.
pub const MAX_DEPTH: usize = 64;

fn decode_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: DuplicateKeyPolicy::Error,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
        // `.inf` and `.nan` reach serde_json as null, as they did through serde_yaml.
        non_finite_float_policy: NonFiniteFloatPolicy::PassThrough,
        ignore_binary_tag_for_string: true,
        // Errors go into API responses and CLI messages: one line, no rendered snippet.
        with_snippet: false,
        budget: serde_saphyr::budget! { max_depth: MAX_DEPTH },
    }
}

/// Decodes one YAML document (JSON is YAML).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, DecodeError> {
    serde_saphyr::from_str_with_options(text, decode_options())
}

/// Decodes one YAML document from bytes, which must be UTF-8.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    serde_saphyr::from_slice_with_options(bytes, decode_options())
}

/// Encodes one document, without a leading `---`. Strings any YAML 1.1 reader (kubectl's
/// go-yaml) would take for another type, such as `yes`, `y` or `0755`, are quoted; long
/// lines are not folded, so committed manifests diff line by line.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, EncodeError> {
    let mut opts = serde_saphyr::SerializerOptions::default();
    opts.folded_wrap_chars = usize::MAX;
    serde_saphyr::to_string_with_options(&value, opts)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn decode(text: &str) -> Value {
        from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[test]
    fn yaml_1_2_core_schema() {
        assert_eq!(decode("a: yes"), json!({"a": "yes"}));
        assert_eq!(decode("a: on"), json!({"a": "on"}));
        assert_eq!(decode("a: True"), json!({"a": true}));
        assert_eq!(decode("a: 0755"), json!({"a": "0755"}));
        assert_eq!(decode("a: 0o755"), json!({"a": 493}));
        assert_eq!(decode("a: 0x1F"), json!({"a": 31}));
        assert_eq!(decode("a: 1_000"), json!({"a": "1_000"}));
        assert_eq!(decode("a: ~"), json!({"a": null}));
        assert_eq!(decode("a: .inf"), json!({"a": null}));
        assert_eq!(decode("a: 2024-01-01"), json!({"a": "2024-01-01"}));
    }

    #[test]
    fn anchors_expand_and_merge_keys_do_not() {
        assert_eq!(
            decode("a: &x {b: 1}\nc: *x"),
            json!({"a": {"b": 1}, "c": {"b": 1}})
        );
        assert_eq!(decode("<<: {a: 1}\nb: 2"), json!({"<<": {"a": 1}, "b": 2}));
    }

    #[test]
    fn duplicate_keys_and_several_documents_are_refused() {
        assert!(from_str::<Value>("{a: 1, a: 2}").is_err());
        assert!(from_str::<Value>("a: 1\n---\nb: 2\n").is_err());
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        // On the test thread's 2 MiB stack, the size of a tokio worker's.
        assert!(from_str::<Value>(&nested(MAX_DEPTH)).is_ok());
        assert!(from_str::<Value>(&format!("a: {}", nested(MAX_DEPTH - 1))).is_ok());
        let e = from_str::<Value>(&nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(e.to_string().contains("65"), "{e}");
        assert!(from_slice::<Value>(nested(100_000).as_bytes()).is_err());
    }

    #[test]
    fn errors_are_one_line() {
        let e = from_str::<Value>("a: [1,\n b: }").unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn ambiguous_strings_are_quoted_and_round_trip() {
        let v = json!({"a": "yes", "b": "0755", "c": "true", "d": "~", "n": "y",
            "long": "word ".repeat(40), "multi": "one\ntwo\n"});
        let text = to_string(&v).unwrap();
        assert!(text.contains("a: \"yes\"\n"), "{text}");
        assert!(text.contains("b: \"0755\"\n"), "{text}");
        assert!(text.contains("multi: |\n  one\n  two\n"), "{text}");
        assert_eq!(text.lines().count(), 9, "{text}");
        assert_eq!(decode(&text), v);
    }
}
