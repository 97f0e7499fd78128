//! Comparing JSON values the way the write path needs it.

use serde_json::Value;

/// `a == b`, with objects whose keys come in the same order compared pair by pair.
///
/// Ordered maps compare by looking every key of one up in the other, hashing each key. An
/// object a write changes keeps its keys' order, so the write path's comparisons (is this field
/// changed? is this condition?) nearly always meet the same order, and the lookups were most of
/// their cost. Keys in another order fall back to the lookups: the result is always `a == b`.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            for ((ka, va), (kb, vb)) in x.iter().zip(y) {
                if ka != kb {
                    return a == b;
                }
                // Keys are unique: the same key at both positions with other values is a
                // difference whatever follows.
                if !equal(va, vb) {
                    return false;
                }
            }
            true
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q))
        }
        _ => a == b,
    }
}

/// Equal, with every object's keys in the same order: what can stand in for a stored value
/// without changing the text it is stored as.
pub fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        _ => a == b,
    }
}

/// [`equal`] over optional values, as `a == b` compares them.
pub fn equal_opt(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => equal(a, b),
        (None, None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn order_does_not_matter_and_values_do() {
        let a = json!({"a": 1, "b": {"x": [1, {"y": 2, "z": 3}]}});
        let reordered = json!({"b": {"x": [1, {"z": 3, "y": 2}]}, "a": 1});
        assert!(equal(&a, &reordered));
        let changed = json!({"a": 1, "b": {"x": [1, {"y": 2, "z": 4}]}});
        assert!(!equal(&a, &changed));
        let moved = json!({"b": {"x": [1, {"y": 2, "z": 4}]}, "a": 1});
        assert!(!equal(&a, &moved), "another order and another value");
        assert!(!equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(
            !equal(&json!([1, 2]), &json!([2, 1])),
            "arrays keep their order"
        );
        assert!(equal_opt(None, None));
        assert!(!equal_opt(Some(&a), None));
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..3).prop_map(Value::from),
            "[ab]".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[abc]", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Reverses the key order of every object in `v`.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .rev()
                    .map(|(k, v)| (k.clone(), reversed(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
            v => v.clone(),
        }
    }

    proptest! {
        #[test]
        fn equal_is_eq(a in value(), b in value(), flip in any::<bool>()) {
            let b = if flip { reversed(&b) } else { b };
            prop_assert_eq!(equal(&a, &b), a == b);
            let r = reversed(&a);
            prop_assert!(equal(&a, &r));
            prop_assert!(equal(&a, &a.clone()));
            prop_assert!(identical(&a, &a.clone()));
            let text = |v: &Value| serde_json::to_string(v).unwrap();
            prop_assert_eq!(identical(&a, &b), a == b && text(&a) == text(&b));
        }
    }
}
