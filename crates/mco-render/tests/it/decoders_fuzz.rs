//! Property test over the Ignition and data-URL decoders: arbitrary configs, sources and gzip
//! streams give an answer without panicking, and nothing decodes past the size limits.
//!
//! Runs 64 cases per property in the normal test run. For a longer run:
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test --release -p mco-render --test it -- decoders_fuzz
//! ```

use std::io::Write;

use base64::Engine as _;
use mco_render::ignition::{self, MAX_FILE_BYTES};
use proptest::prelude::*;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(64),
        ..ProptestConfig::default()
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9./:;,%=-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("ignition".to_string()),
                    Just("version".to_string()),
                    Just("storage".to_string()),
                    Just("files".to_string()),
                    Just("path".to_string()),
                    Just("contents".to_string()),
                    Just("source".to_string()),
                    Just("compression".to_string()),
                    Just("systemd".to_string()),
                    Just("units".to_string()),
                    Just("mode".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ignition_never_panics(mut raw in json_value(), version in prop_oneof![
        Just("2.2.0"), Just("3.0.0"), Just("3.2.0"), Just("3.5.0"), Just("3.6.0"), Just("x")]) {
        if let Value::Object(m) = &mut raw {
            m.insert("ignition".into(), json!({"version": version}));
        }
        if let Ok(cfg) = ignition::parse(&raw) {
            let _ = ignition::validate(&cfg);
        }
    }

    #[test]
    fn data_urls_never_panic(source in "(data:)?[a-z/;=]{0,12}(;base64)?,?[A-Za-z0-9+/=% \n]{0,64}",
                             compression in prop_oneof![Just(None), Just(Some("")), Just(Some("gzip")), Just(Some("xz"))]) {
        let decoded = ignition::decode_data_url(&source, compression);
        let checked = ignition::check_data_url(&source, compression);
        prop_assert_eq!(decoded.map(|d| d.len() as u64), checked);
    }

    /// Arbitrary bytes and truncated or corrupted gzip streams are errors or bounded output.
    #[test]
    fn gzip_never_panics_and_stays_bounded(data in prop::collection::vec(any::<u8>(), 0..256),
                                            cut in 0usize..64, limit in 0u64..512) {
        let mut stream = gzip(&data);
        let mut out = Vec::new();
        match ignition::gunzip_bounded(&stream, &mut out, limit) {
            Ok(n) => prop_assert!(n <= limit && n as usize == data.len()),
            Err(e) => prop_assert_eq!(e, ignition::IgnitionError::TooLarge { limit }),
        }
        prop_assert!(out.len() as u64 <= limit + 1);
        let keep = stream.len().saturating_sub(cut);
        stream.truncate(keep);
        let src = format!("data:;base64,{}", base64::engine::general_purpose::STANDARD.encode(&stream));
        if let Ok(d) = ignition::decode_data_url(&src, Some("gzip")) {
            prop_assert!(d.len() as u64 <= MAX_FILE_BYTES);
        }
    }
}
