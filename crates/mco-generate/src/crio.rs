//! `ContainerRuntimeConfig` → `99-<pool>-generated-containerruntime[-N]`: one CRI-O drop-in
//! per field under `/etc/crio/crio.conf.d/`, where upstream writes them, and the overlay size in
//! the pool's `/etc/containers/storage.conf`.

use mco_api::ContainerRuntimeConfigSpec;
use serde_json::Value;
use toml::Table;

use mco_apimachinery::quantity::bytes as quantity_bytes;

use crate::{Error, file};

pub const PIDS_LIMIT: &str = "/etc/crio/crio.conf.d/01-ctrcfg-pidsLimit";
pub const LOG_LEVEL: &str = "/etc/crio/crio.conf.d/01-ctrcfg-logLevel";
pub const LOG_SIZE_MAX: &str = "/etc/crio/crio.conf.d/01-ctrcfg-logSizeMax";
pub const DEFAULT_RUNTIME: &str = "/etc/crio/crio.conf.d/01-ctrcfg-defaultRuntime";
pub const STORAGE_CONF: &str = "/etc/containers/storage.conf";

/// Upstream's floors.
const MIN_PIDS_LIMIT: i64 = 20;
const MIN_LOG_SIZE: i64 = 8192;

/// containers-storage.conf(5) as CRI-O ships it, for a pool without one.
const DEFAULT_STORAGE: &str = "[storage]\ndriver = \"overlay\"\nrunroot = \"/run/containers/storage\"\ngraphroot = \"/var/lib/containers/storage\"\n";

/// Upstream's checks, in its order and words.
pub fn validate(spec: &ContainerRuntimeConfigSpec) -> Result<(), Error> {
    let Some(c) = &spec.container_runtime_config else {
        return Ok(());
    };
    if let Some(p) = c.pids_limit
        && p != 0
        && p < MIN_PIDS_LIMIT
        && p != -1
    {
        return Err(Error::Refused(format!("invalid PidsLimit {p}")));
    }
    if let Some(q) = &c.log_size_max {
        let bytes = quantity_bytes(&q.0).ok_or_else(|| {
            Error::Refused(format!("invalid LogSizeMax {:?}, not a quantity", q.0))
        })?;
        if bytes > 0 && bytes <= MIN_LOG_SIZE {
            return Err(Error::Refused(format!(
                "invalid LogSizeMax {:?}, cannot be less than 8kB",
                q.0
            )));
        }
    }
    if let Some(q) = &c.overlay_size {
        match quantity_bytes(&q.0) {
            Some(b) if b >= 0 => {}
            _ => {
                return Err(Error::Refused(format!(
                    "invalid overlaySize {:?}, cannot be less than 0",
                    q.0
                )));
            }
        }
    }
    if !c.log_level.is_empty()
        && !["error", "fatal", "panic", "warn", "info", "debug"].contains(&c.log_level.as_str())
    {
        return Err(Error::Refused(format!(
            "invalid LogLevel {:?}, must be one of error, fatal, panic, warn, info, or debug",
            c.log_level
        )));
    }
    if !c.default_runtime.is_empty() && !["runc", "crun"].contains(&c.default_runtime.as_str()) {
        return Err(Error::Refused(format!(
            "invalid DefaultRuntime {:?}, must be one of runc or crun",
            c.default_runtime
        )));
    }
    Ok(())
}

/// `[crio.runtime]` with one key, as a drop-in.
fn dropin(key: &str, value: toml::Value) -> String {
    let mut runtime = Table::new();
    runtime.insert(key.to_owned(), value);
    let mut crio = Table::new();
    crio.insert("runtime".to_owned(), toml::Value::Table(runtime));
    let mut top = Table::new();
    top.insert("crio".to_owned(), toml::Value::Table(crio));
    toml::to_string(&top).unwrap_or_default()
}

/// The files of the generated config; `base_storage` is the pool's storage.conf, if it has one.
pub fn files(
    spec: &ContainerRuntimeConfigSpec,
    base_storage: Option<&str>,
) -> Result<Vec<Value>, Error> {
    validate(spec)?;
    let Some(c) = &spec.container_runtime_config else {
        return Ok(vec![]);
    };
    let mut out = vec![];
    if let Some(p) = c.pids_limit.filter(|p| *p != 0) {
        out.push(file(PIDS_LIMIT, &dropin("pids_limit", p.into())));
    }
    if !c.log_level.is_empty() {
        out.push(file(
            LOG_LEVEL,
            &dropin("log_level", c.log_level.as_str().into()),
        ));
    }
    if let Some(bytes) = c.log_size_max.as_ref().and_then(|q| quantity_bytes(&q.0)) {
        out.push(file(LOG_SIZE_MAX, &dropin("log_size_max", bytes.into())));
    }
    if !c.default_runtime.is_empty() {
        out.push(file(
            DEFAULT_RUNTIME,
            &dropin("default_runtime", c.default_runtime.as_str().into()),
        ));
    }
    if let Some(q) = &c.overlay_size {
        let mut storage: Table = toml::from_str(base_storage.unwrap_or(DEFAULT_STORAGE))
            .map_err(|e| Error::Base(format!("could not decode the pool's {STORAGE_CONF}: {e}")))?;
        let s = storage
            .entry("storage")
            .or_insert_with(|| toml::Value::Table(Table::new()));
        if let toml::Value::Table(s) = s {
            let options = s
                .entry("options")
                .or_insert_with(|| toml::Value::Table(Table::new()));
            if let toml::Value::Table(o) = options {
                let overlay = o
                    .entry("overlay")
                    .or_insert_with(|| toml::Value::Table(Table::new()));
                if let toml::Value::Table(ov) = overlay {
                    ov.insert("size".to_owned(), q.0.as_str().into());
                }
            }
        }
        let text = toml::to_string(&storage)
            .map_err(|e| Error::Base(format!("could not encode {STORAGE_CONF}: {e}")))?;
        out.push(file(STORAGE_CONF, &text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{golden, machine_config, managed_name};
    use serde_json::json;

    fn spec(v: Value) -> ContainerRuntimeConfigSpec {
        serde_json::from_value(json!({"containerRuntimeConfig": v})).unwrap()
    }

    #[test]
    fn every_field_as_a_dropin() {
        let s = spec(
            json!({"pidsLimit": 2048, "logLevel": "debug", "logSizeMax": "1Gi",
                            "overlaySize": "10G", "defaultRuntime": "crun"}),
        );
        let mc = machine_config(
            &managed_name("worker", "containerruntime", ""),
            "worker",
            "v0.0.0-test",
            files(&s, None).unwrap(),
        );
        golden::check("containerruntime-all-fields.yaml", &golden::render(&mc));
    }

    #[test]
    fn refused_values_in_upstreams_words() {
        let cases = [
            (json!({"pidsLimit": 19}), "invalid PidsLimit 19"),
            (
                json!({"logSizeMax": "8Ki"}),
                "invalid LogSizeMax \"8Ki\", cannot be less than 8kB",
            ),
            (
                json!({"overlaySize": "-1G"}),
                "invalid overlaySize \"-1G\", cannot be less than 0",
            ),
            (
                json!({"logLevel": "trace"}),
                "invalid LogLevel \"trace\", must be one of error, fatal, panic, warn, info, or debug",
            ),
            (
                json!({"defaultRuntime": "kata"}),
                "invalid DefaultRuntime \"kata\", must be one of runc or crun",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(
                files(&spec(s.clone()), None).unwrap_err().to_string(),
                want,
                "{s}"
            );
        }
        // At the limits.
        files(&spec(json!({"pidsLimit": 20, "logSizeMax": "8193"})), None).unwrap();
        files(&spec(json!({"pidsLimit": -1, "overlaySize": "0"})), None).unwrap();
    }
}
