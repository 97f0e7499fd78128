//! `KubeletConfig` → `99-<pool>-generated-kubelet[-N]`: the pool's base kubelet config with the
//! object's `kubeletConfig` merged over it, plus the log level and node sizing files upstream
//! writes beside it.

use mco_api::KubeletConfigSpec;
use mco_api::generators::TlsSecurityProfile;
use mco_apimachinery::yaml;
use serde_json::{Map, Value};

use crate::{Error, file};

/// Where the kubelet reads its configuration.
pub const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
/// The kubelet's log level drop-in.
pub const LOG_LEVEL_DROPIN: &str = "/etc/systemd/system/kubelet.service.d/20-logging.conf";
/// Read by the node sizing script before the kubelet starts.
pub const NODE_SIZING_ENV: &str = "/etc/node-sizing-enabled.env";

/// Fields a user may not set: the node may not come back after a reboot. In upstream's order.
const REFUSED: [&str; 6] = [
    "cgroupDriver",
    "clusterDNS",
    "clusterDomain",
    "featureGates",
    "staticPodPath",
    "failSwapOn",
];

/// Go's `%v` of a JSON value, as upstream's messages print it: `[a b]`, `map[k:v]`, `true`.
fn go_fmt(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(o) => format!(
            "map[{}]",
            o.iter()
                .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => other.to_string(),
    }
}

fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// Upstream's checks, in its order and words; the first failure is reported.
pub fn validate(spec: &KubeletConfigSpec) -> Result<(), Error> {
    if let Some(level) = spec.log_level
        && !(1..=10).contains(&level)
    {
        return Err(Error::Refused(format!(
            "KubeletConfig's LogLevel is not valid [1,10]: {level}"
        )));
    }
    let Some(kc) = spec.kubelet_config.as_ref() else {
        return Ok(());
    };
    let Value::Object(kc) = kc else {
        return Err(Error::Refused(format!(
            "KubeletConfig could not be unmarshalled, err: spec.kubeletConfig must be an object, not {kc}"
        )));
    };
    for field in REFUSED {
        // failSwapOn is refused whatever its value, even false.
        if let Some(v) = kc.get(field)
            && (is_set(v) || (field == "failSwapOn" && !v.is_null()))
        {
            return Err(Error::Refused(format!(
                "KubeletConfiguration: {field} is not allowed to be set, but contains: {}",
                go_fmt(v)
            )));
        }
    }
    if let Some(v) = kc.get("memorySwap").and_then(|m| m.get("swapBehavior"))
        && is_set(v)
    {
        return Err(Error::Refused(format!(
            "KubeletConfiguration: swapBehavior is not allowed to be set, but contains: {}",
            go_fmt(v)
        )));
    }
    if kc.get("systemReserved").is_some_and(is_set) && spec.auto_sizing_reserved == Some(true) {
        return Err(Error::Refused(
            "KubeletConfiguration: autoSizingReserved and systemdReserved cannot be set together"
                .to_owned(),
        ));
    }
    if let Some(p) = &spec.tls_security_profile {
        tls_profile(p)?;
    }
    Ok(())
}

/// Deep merge: objects merge key by key, anything else in `over` replaces; nulls are ignored.
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (_, Value::Null) => {}
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ if v.is_null() => {}
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

const OLD: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-SHA256",
    "ECDHE-RSA-AES128-SHA256",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES256-SHA",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA256",
    "AES128-SHA",
    "AES256-SHA",
    "DES-CBC3-SHA",
];
const INTERMEDIATE: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
];
const MODERN: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// OpenSSL cipher names and the IANA names Go (and so the kubelet) knows them by.
const CIPHERS: &[(&str, &str)] = &[
    ("TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
    ("TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES128-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES128-SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    ),
    ("ECDHE-RSA-AES128-SHA", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
    (
        "ECDHE-ECDSA-AES256-SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    ),
    ("ECDHE-RSA-AES256-SHA", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"),
    ("AES128-GCM-SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256"),
    ("AES256-GCM-SHA384", "TLS_RSA_WITH_AES_256_GCM_SHA384"),
    ("AES128-SHA256", "TLS_RSA_WITH_AES_128_CBC_SHA256"),
    ("AES128-SHA", "TLS_RSA_WITH_AES_128_CBC_SHA"),
    ("AES256-SHA", "TLS_RSA_WITH_AES_256_CBC_SHA"),
    ("DES-CBC3-SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA"),
];

/// The IANA name of an OpenSSL cipher name, or of an IANA name Go knows. Unknown names are
/// dropped, as upstream's conversion drops them: a name the kubelet does not know would stop it
/// from starting on every node of the pool.
fn iana(cipher: &str) -> Option<&'static str> {
    CIPHERS
        .iter()
        .find(|(openssl, iana)| *openssl == cipher || *iana == cipher)
        .map(|(_, iana)| *iana)
}

/// The kubelet's `tlsMinVersion` and `tlsCipherSuites` for a profile.
pub(crate) fn tls_profile(p: &TlsSecurityProfile) -> Result<(String, Vec<String>), Error> {
    let (min, ciphers): (&str, Vec<&str>) = match p.type_.as_str() {
        "Old" => ("VersionTLS10", OLD.to_vec()),
        "" | "Intermediate" => ("VersionTLS12", INTERMEDIATE.to_vec()),
        "Modern" => ("VersionTLS13", MODERN.to_vec()),
        "Custom" => {
            let c = p.custom.as_ref().ok_or_else(|| {
                Error::Refused(
                    "spec.tlsSecurityProfile.custom is required when type is Custom".to_owned(),
                )
            })?;
            if ![
                "VersionTLS10",
                "VersionTLS11",
                "VersionTLS12",
                "VersionTLS13",
            ]
            .contains(&c.min_tls_version.as_str())
            {
                return Err(Error::Refused(format!(
                    "spec.tlsSecurityProfile.custom.minTLSVersion: unsupported value {:?}",
                    c.min_tls_version
                )));
            }
            let ciphers = c.ciphers.iter().map(String::as_str).collect();
            return Ok((c.min_tls_version.clone(), convert(ciphers)));
        }
        other => {
            return Err(Error::Refused(format!(
                "spec.tlsSecurityProfile.type: unsupported value {other:?}: supported values: \"Old\", \"Intermediate\", \"Modern\", \"Custom\""
            )));
        }
    };
    Ok((min.to_owned(), convert(ciphers)))
}

/// Each known cipher once, in the order given: at most [`CIPHERS`]'s length, however long the
/// list.
fn convert(ciphers: Vec<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in ciphers.into_iter().filter_map(iana) {
        if !out.iter().any(|o| o == c) {
            out.push(c.to_owned());
        }
    }
    out
}

/// The files of the generated config: `base` is the pool's own kubelet config (YAML or JSON).
pub fn files(spec: &KubeletConfigSpec, base: &str) -> Result<Vec<Value>, Error> {
    validate(spec)?;
    let mut conf: Value = yaml::from_str(base)
        .map_err(|e| Error::Base(format!("could not decode the pool's {KUBELET_CONF}: {e}")))?;
    if !conf.is_object() {
        conf = Value::Object(Map::new());
    }
    let mut reserved = Map::new();
    if let Some(user) = spec.kubelet_config.clone() {
        let mut user = user;
        if let Some(Value::Object(sr)) = user.get_mut("systemReserved") {
            // These three go to the node sizing file, where the sizing script reads them.
            for k in ["memory", "cpu", "ephemeral-storage"] {
                if let Some(v) = sr.remove(k) {
                    reserved.insert(k.to_owned(), v);
                }
            }
            if sr.is_empty() {
                user.as_object_mut().map(|o| o.remove("systemReserved"));
            }
        }
        merge(&mut conf, &user);
    }
    if let Some(p) = &spec.tls_security_profile {
        let (min, ciphers) = tls_profile(p)?;
        conf["tlsMinVersion"] = Value::String(min);
        conf["tlsCipherSuites"] = ciphers.into();
    }
    let text = yaml::to_string(&conf)
        .map_err(|e| Error::Base(format!("could not encode kubelet configuration: {e}")))?;
    let mut out = vec![file(KUBELET_CONF, &text)];
    if let Some(level) = spec.log_level {
        out.push(file(
            LOG_LEVEL_DROPIN,
            &format!("[Service]\nEnvironment=\"KUBELET_LOG_LEVEL={level}\"\n"),
        ));
    }
    if spec.auto_sizing_reserved.is_some() || !reserved.is_empty() {
        let enabled = reserved.is_empty() && spec.auto_sizing_reserved == Some(true);
        let get = |k: &str, default: &str| {
            reserved
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(default)
                .to_owned()
        };
        out.push(file(
            NODE_SIZING_ENV,
            &format!(
                "NODE_SIZING_ENABLED={enabled}\nSYSTEM_RESERVED_MEMORY={}\nSYSTEM_RESERVED_CPU={}\nSYSTEM_RESERVED_ES={}\n",
                get("memory", "1Gi"),
                get("cpu", "500m"),
                get("ephemeral-storage", "1Gi"),
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{golden, machine_config, managed_name};
    use serde_json::json;

    const BASE: &str = "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\ncgroupDriver: systemd\nnodeStatusUpdateFrequency: 10s\nevictionHard:\n  memory.available: 100Mi\n";

    fn spec(v: Value) -> KubeletConfigSpec {
        serde_json::from_value(v).unwrap()
    }

    fn generate(name: &str, s: &KubeletConfigSpec) -> String {
        let mc = machine_config(name, "worker", "v0.0.0-test", files(s, BASE).unwrap());
        golden::render(&mc)
    }

    #[test]
    fn max_pods_merged_over_the_base() {
        let s = spec(
            json!({"kubeletConfig": {"maxPods": 300, "evictionHard": {"nodefs.available": "5%"}}}),
        );
        golden::check(
            "kubelet-max-pods.yaml",
            &generate(&managed_name("worker", "kubelet", ""), &s),
        );
    }

    #[test]
    fn log_level_sizing_and_tls_profile() {
        let s = spec(json!({
            "logLevel": 4,
            "autoSizingReserved": true,
            "tlsSecurityProfile": {"type": "Modern", "modern": {}},
            "kubeletConfig": {"podPidsLimit": 4096}
        }));
        golden::check(
            "kubelet-log-level-sizing-tls.yaml",
            &generate(&managed_name("worker", "kubelet", "1"), &s),
        );
    }

    #[test]
    fn system_reserved_moves_to_the_sizing_file() {
        let s = spec(json!({"kubeletConfig": {"systemReserved": {"memory": "2Gi", "pid": "100"}}}));
        let f = files(&s, BASE).unwrap();
        let env = crate::decode_data_url(f[1]["contents"]["source"].as_str().unwrap()).unwrap();
        assert!(
            env.starts_with("NODE_SIZING_ENABLED=false\nSYSTEM_RESERVED_MEMORY=2Gi\n"),
            "{env}"
        );
        let conf = crate::decode_data_url(f[0]["contents"]["source"].as_str().unwrap()).unwrap();
        assert!(conf.contains("pid:"), "{conf}");
        assert!(!conf.contains("2Gi"), "{conf}");
    }

    #[test]
    fn refused_fields_name_the_field_in_upstreams_words() {
        let cases = [
            (
                json!({"kubeletConfig": {"cgroupDriver": "cgroupfs"}}),
                "KubeletConfiguration: cgroupDriver is not allowed to be set, but contains: cgroupfs",
            ),
            (
                json!({"kubeletConfig": {"clusterDNS": ["10.0.0.10", "10.0.0.11"]}}),
                "KubeletConfiguration: clusterDNS is not allowed to be set, but contains: [10.0.0.10 10.0.0.11]",
            ),
            (
                json!({"kubeletConfig": {"featureGates": {"Foo": true}}}),
                "KubeletConfiguration: featureGates is not allowed to be set, but contains: map[Foo:true]",
            ),
            (
                json!({"kubeletConfig": {"failSwapOn": false}}),
                "KubeletConfiguration: failSwapOn is not allowed to be set, but contains: false",
            ),
            (
                json!({"kubeletConfig": {"memorySwap": {"swapBehavior": "LimitedSwap"}}}),
                "KubeletConfiguration: swapBehavior is not allowed to be set, but contains: LimitedSwap",
            ),
            (
                json!({"kubeletConfig": {"systemReserved": {"cpu": "1"}}, "autoSizingReserved": true}),
                "KubeletConfiguration: autoSizingReserved and systemdReserved cannot be set together",
            ),
            (
                json!({"logLevel": 11}),
                "KubeletConfig's LogLevel is not valid [1,10]: 11",
            ),
            (
                json!({"logLevel": 0}),
                "KubeletConfig's LogLevel is not valid [1,10]: 0",
            ),
            (
                json!({"tlsSecurityProfile": {"type": "Paranoid"}}),
                "spec.tlsSecurityProfile.type: unsupported value \"Paranoid\"",
            ),
        ];
        for (s, want) in cases {
            let e = files(&spec(s.clone()), BASE).unwrap_err();
            assert!(e.to_string().starts_with(want), "{s}: {e}");
        }
        // The limits themselves are accepted.
        for level in [1, 10] {
            files(&spec(json!({"logLevel": level})), BASE).unwrap();
        }
    }

    #[test]
    fn an_undecodable_base_is_an_error_not_a_guess() {
        let e = files(&spec(json!({})), "a: [").unwrap_err();
        assert!(e.to_string().contains(KUBELET_CONF), "{e}");
    }

    #[test]
    fn custom_ciphers_keep_only_names_the_kubelet_knows_each_once() {
        let mut ciphers = vec![
            "TLS_FOO_BAR".to_owned(),
            "ECDHE-RSA-AES128-GCM-SHA256".to_owned(),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_owned(),
            "DHE-RSA-AES128-GCM-SHA256".to_owned(),
            "TLS_AES_256_GCM_SHA384".to_owned(),
        ];
        ciphers.extend(std::iter::repeat_n("AES128-SHA".to_owned(), 10_000));
        let p: TlsSecurityProfile = serde_json::from_value(serde_json::json!({
            "type": "Custom",
            "custom": {"minTLSVersion": "VersionTLS12", "ciphers": ciphers},
        }))
        .unwrap();
        let (min, got) = tls_profile(&p).unwrap();
        assert_eq!(min, "VersionTLS12");
        assert_eq!(
            got,
            [
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_AES_256_GCM_SHA384",
                "TLS_RSA_WITH_AES_128_CBC_SHA",
            ]
        );
    }
}
