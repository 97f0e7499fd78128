//! Ignition parsing, up-conversion to the internal spec 3.5.0, and validation.
//!
//! (Work in progress: the full validator lands in the next commits.)

use thiserror::Error;

/// The one internal Ignition version every MachineConfig is converted to (upstream's is 3.5.0).
pub type Ignition = ignition_config::v3_5::Config;

/// Why an Ignition config could not be parsed or decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum IgnitionError {
    #[error("parsing Ignition config failed: {0}")]
    Parse(String),
    #[error("invalid data URL: {0}")]
    DataUrl(String),
}

/// Parse a raw Ignition JSON object of any supported spec version into the internal version.
pub fn parse(raw: &serde_json::Value) -> Result<Ignition, IgnitionError> {
    let mut cfg: Ignition =
        serde_json::from_value(raw.clone()).map_err(|e| IgnitionError::Parse(e.to_string()))?;
    cfg.ignition.version = "3.5.0".to_string();
    Ok(cfg)
}

/// Decode a `data:` URL (percent-encoded or base64), optionally gzip-compressed.
pub fn decode_data_url(source: &str, compression: Option<&str>) -> Result<Vec<u8>, IgnitionError> {
    let _ = compression;
    let rest = source
        .strip_prefix("data:")
        .ok_or_else(|| IgnitionError::DataUrl(format!("not a data URL: {source:?}")))?;
    let (_, data) = rest
        .split_once(',')
        .ok_or_else(|| IgnitionError::DataUrl("missing ','".into()))?;
    Ok(percent_encoding::percent_decode_str(data).collect())
}
