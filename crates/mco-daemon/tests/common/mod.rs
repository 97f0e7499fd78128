//! Shared test helpers: fixtures and fake host tools.
#![allow(dead_code)]

use std::path::PathBuf;

/// Path of a fixture under `tests/fixtures`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Text of a fixture under `tests/fixtures`.
pub fn fixture(rel: &str) -> String {
    std::fs::read_to_string(fixture_path(rel)).unwrap()
}

mod fake_tools;
#[allow(unused_imports)] // not every test binary uses every helper
pub use fake_tools::{argv, calls, fake_tool};
