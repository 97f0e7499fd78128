//! The Ignition a joining machine gets: its pool's rendered config plus the files upstream's
//! server appends, in the spec version it asked for. Pure: values in, bytes out.
//!
//! First, as upstream, the ControllerConfig's CA bundles replace the contents of the rendered
//! config's entry of the same path, or are appended: `kubeAPIServerServingCAData` as
//! `/etc/kubernetes/kubelet-ca.crt` (so a machine joining a paused pool gets today's CA) and
//! `cloudProviderCAData` as the cloud provider's CA bundle.
//!
//! Then, each mode 0644 and `overwrite: true`, replacing any entry of the same path:
//! - `/etc/machine-config-daemon/node-annotations.json`: the node's initial current and
//!   desired config (the served rendered config), in image mode its current and desired image,
//!   and state `Done`, which the daemon reads when its node has no annotations yet;
//! - the unit `machine-config-daemon-firstboot.service`, which runs
//!   `mco daemon firstboot-complete-machineconfig` before the kubelet when the encapsulated
//!   file exists (unless the rendered config already carries a unit of that name);
//! - `/etc/kubernetes/kubeconfig`: the kubelet's bootstrap kubeconfig, when the server has one
//!   (API server URL, CA and a bootstrap token);
//! - `/etc/mcs-machine-config-content.json`: the served MachineConfig whole, a record of what
//!   the machine was provisioned with;
//! - last, `/etc/ignition-machine-config-encapsulated.json`: the rendered MachineConfig with
//!   its Ignition emptied to `{"ignition":{"version":...}}` (the files are on disk already),
//!   which first boot applies, OS image and kernel arguments included.
//!
//! Every answer is read back as the version it declares before it is served: 3.x with the
//! `ignition-config` crate, refusing any key that version does not define; 2.2 with
//! mco-render's spec 2.2 reader.

use base64::Engine as _;
use ignition_config::v3_5 as v3;
use mco_api::MachineConfig;
use mco_api::constants::{annotations, states};
use mco_api::paths;
use mco_render::ignition::Ignition;
use serde_json::{Value, json};

use crate::accept::SpecVersion;
use crate::v2_2;

/// Where the daemon finds its node's initial annotations.
pub const NODE_ANNOTATIONS: &str = paths::INITIAL_NODE_ANNOTATIONS;
/// The kubelet's bootstrap kubeconfig on a machine.
pub const KUBECONFIG: &str = "/etc/kubernetes/kubeconfig";
/// The kube-apiserver's CA bundle on a machine, which the kubelet trusts.
pub const KUBELET_CA: &str = "/etc/kubernetes/kubelet-ca.crt";
/// The cloud provider's CA bundle on a machine.
pub const CLOUD_PROVIDER_CA: &str =
    "/etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem";
/// The served MachineConfig, whole: what the machine was provisioned with.
pub const CONTENT: &str = paths::PROVISIONED_CONFIG;
/// The first-boot unit's name, as upstream's.
pub const FIRSTBOOT_UNIT: &str = "machine-config-daemon-firstboot.service";

/// The first-boot unit: applies the encapsulated config before the kubelet starts.
const FIRSTBOOT_UNIT_CONTENTS: &str = "[Unit]
Description=Machine Config Daemon Firstboot
# Only on a machine provisioned by the machine config server, once.
ConditionPathExists=/etc/ignition-machine-config-encapsulated.json
After=network-online.target
Wants=network-online.target
Before=kubelet-dependencies.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/bin/mco daemon firstboot-complete-machineconfig
Restart=on-failure
RestartSec=60

[Install]
WantedBy=multi-user.target
RequiredBy=kubelet-dependencies.target
";

/// What the server adds from outside the rendered config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// [`KUBECONFIG`]'s contents; `None` appends none.
    pub kubeconfig: Option<Vec<u8>>,
    /// [`KUBELET_CA`]'s contents (decoded `kubeAPIServerServingCAData`); `None` or empty
    /// leaves the rendered config's.
    pub kubelet_ca: Option<Vec<u8>>,
    /// [`CLOUD_PROVIDER_CA`]'s contents (decoded `cloudProviderCAData`).
    pub cloud_provider_ca: Option<Vec<u8>>,
}

impl Appended {
    /// The CA bundles of `cc` (base64 in the object), with `kubeconfig`. A bundle that is not
    /// base64 is an error naming its field.
    pub fn from_controller_config(
        cc: Option<&mco_api::ControllerConfig>,
        kubeconfig: Option<Vec<u8>>,
    ) -> Result<Appended, String> {
        let decode = |field: &str, v: Option<&String>| -> Result<Option<Vec<u8>>, String> {
            v.filter(|s| !s.is_empty())
                .map(|s| {
                    base64::engine::general_purpose::STANDARD
                        .decode(s.trim())
                        .map_err(|e| format!("ControllerConfig spec.{field}: not base64: {e}"))
                })
                .transpose()
        };
        let spec = cc.map(|c| &c.spec);
        Ok(Appended {
            kubeconfig,
            kubelet_ca: decode(
                "kubeAPIServerServingCAData",
                spec.and_then(|s| s.kube_api_server_serving_ca_data.as_ref()),
            )?,
            cloud_provider_ca: decode(
                "cloudProviderCAData",
                spec.and_then(|s| s.cloud_provider_ca_data.as_ref()),
            )?,
        })
    }
}

/// The kubelet's bootstrap kubeconfig as upstream's server writes it: cluster `local` at
/// `server` trusting `ca_pem`, user `kubelet` with `token`.
pub fn bootstrap_kubeconfig(server: &str, ca_pem: &[u8], token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: kubelet
  user:
    token: {token}
contexts:
- name: kubelet
  context:
    cluster: local
    user: kubelet
current-context: kubelet
preferences: {{}}
"
    )
}

/// Replaces the contents of the entry at `path`, or appends one (upstream's
/// addDataAndMaybeAppendToIgnition); nothing when `data` is empty.
fn set_or_append(cfg: &mut Ignition, path: &str, data: Option<&[u8]>) {
    let Some(data) = data.filter(|d| !d.is_empty()) else {
        return;
    };
    let existing = cfg
        .storage
        .as_mut()
        .and_then(|s| s.files.as_mut())
        .and_then(|f| f.iter_mut().find(|f| f.path == path));
    match existing {
        Some(f) => {
            let c = f.contents.get_or_insert_with(Default::default);
            c.source = Some(data_url(data));
            c.compression = None;
        }
        None => put_file(cfg, path, data),
    }
}

/// Why a rendered config could not be served.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error("parsing the Ignition config of {config} failed: {source}")]
    Parse {
        config: String,
        #[source]
        source: mco_render::ignition::IgnitionError,
    },
    #[error("serving {config} as spec {version}: {message}")]
    Version {
        config: String,
        version: SpecVersion,
        message: String,
    },
    #[error("serving {config}: {source}")]
    Untranslatable {
        config: String,
        #[source]
        source: v2_2::Untranslatable,
    },
}

fn data_url(bytes: &[u8]) -> String {
    format!(
        "data:;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// Adds or replaces a file (mode 0644, overwrite), upstream's appendFileToIgnition.
fn put_file(cfg: &mut Ignition, path: &str, contents: &[u8]) {
    let mut f = v3::File::new(path.to_string());
    f.mode = Some(0o644);
    f.overwrite = Some(true);
    f.contents = Some(v3::Resource {
        source: Some(data_url(contents)),
        ..Default::default()
    });
    let storage = cfg.storage.get_or_insert_with(Default::default);
    let files = storage.files.get_or_insert_with(Vec::new);
    files.retain(|x| x.path != path);
    files.push(f);
    // One key space for files, directories and links, as Ignition's merge has.
    if let Some(d) = storage.directories.as_mut() {
        d.retain(|x| x.path != path);
    }
    if let Some(l) = storage.links.as_mut() {
        l.retain(|x| x.path != path);
    }
}

/// The node's initial annotations for `config` and, in image mode, `image` (upstream's: the
/// image as both current and desired).
pub fn node_annotations(config: &str, image: &str) -> Value {
    let mut a = json!({
        annotations::CURRENT_CONFIG: config,
        annotations::DESIRED_CONFIG: config,
        annotations::STATE: states::DONE,
    });
    if !image.is_empty() {
        a[annotations::CURRENT_IMAGE] = json!(image);
        a[annotations::DESIRED_IMAGE] = json!(image);
    }
    a
}

/// The MachineConfig written to the encapsulated file: `mc` with an empty Ignition of `version`.
pub fn encapsulated(mc: &MachineConfig, version: SpecVersion) -> MachineConfig {
    let mut out = mc.clone();
    out.spec.config = Some(json!({ "ignition": { "version": version.as_str() } }));
    // Server-side fields mean nothing on the machine.
    out.metadata.managed_fields = None;
    out
}

/// [`CONTENT`]: the served MachineConfig, indented as upstream's (four spaces).
pub fn content(mc: &MachineConfig) -> Vec<u8> {
    use serde::Serialize as _;
    let mut mc = mc.clone();
    mc.metadata.managed_fields = None;
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    let _ = mc.serialize(&mut ser);
    out
}

/// The full Ignition for `mc` (a rendered config), in `version`, with `appended`, as the
/// bytes to serve.
pub fn assemble(
    mc: &MachineConfig,
    version: SpecVersion,
    appended: &Appended,
) -> Result<Vec<u8>, AssembleError> {
    let name = mc.metadata.name.clone().unwrap_or_default();
    let empty = Value::Null;
    let mut cfg = mco_render::ignition::parse(mc.spec.config.as_ref().unwrap_or(&empty)).map_err(
        |source| AssembleError::Parse {
            config: name.clone(),
            source,
        },
    )?;

    set_or_append(&mut cfg, KUBELET_CA, appended.kubelet_ca.as_deref());
    set_or_append(
        &mut cfg,
        CLOUD_PROVIDER_CA,
        appended.cloud_provider_ca.as_deref(),
    );
    let image = mco_api::image_mode::embed::image_of(mc);
    let ann = serde_json::to_vec(&node_annotations(&name, image)).unwrap_or_default();
    put_file(&mut cfg, NODE_ANNOTATIONS, &ann);
    let units = cfg
        .systemd
        .get_or_insert_with(Default::default)
        .units
        .get_or_insert_with(Vec::new);
    if !units.iter().any(|u| u.name == FIRSTBOOT_UNIT) {
        let mut u = v3::Unit::new(FIRSTBOOT_UNIT.to_string());
        u.enabled = Some(true);
        u.contents = Some(FIRSTBOOT_UNIT_CONTENTS.to_string());
        units.push(u);
    }
    if let Some(kc) = &appended.kubeconfig {
        put_file(&mut cfg, KUBECONFIG, kc);
    }
    put_file(&mut cfg, CONTENT, &content(mc));
    let enc = serde_json::to_vec(&encapsulated(mc, version)).unwrap_or_default();
    put_file(&mut cfg, paths::FIRSTBOOT_CONFIG, &enc);

    let body = match version {
        SpecVersion::V2_2 => {
            let two = v2_2::translate(&cfg).map_err(|source| AssembleError::Untranslatable {
                config: name.clone(),
                source,
            })?;
            let body = serde_json::to_vec(&two).unwrap_or_default();
            check_2_2(&two).map_err(|message| AssembleError::Version {
                config: name.clone(),
                version,
                message,
            })?;
            body
        }
        SpecVersion::V3(_) => {
            cfg.ignition.version = version.as_str().to_string();
            let mut value = serde_json::to_value(&cfg).unwrap_or_default();
            strip_nulls(&mut value);
            let body = serde_json::to_vec(&value).unwrap_or_default();
            check_3x(&body, version).map_err(|message| AssembleError::Version {
                config: name.clone(),
                version,
                message,
            })?;
            body
        }
    };
    Ok(body)
}

/// Drops `null` members: the typed config writes some absent fields as `null`, and an older
/// spec's reader would report every one of them as a key it does not know.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Reads `body` back as spec `version`; any key that version does not define is an error
/// (a client of that version would ignore it, losing what the pool asked for).
pub fn check_3x(body: &[u8], version: SpecVersion) -> Result<(), String> {
    let (parsed, warnings) =
        ignition_config::Config::parse_slice(body).map_err(|e| e.to_string())?;
    let declared = match parsed {
        ignition_config::Config::V3_1(_) => SpecVersion::V3(1),
        ignition_config::Config::V3_2(_) => SpecVersion::V3(2),
        ignition_config::Config::V3_3(_) => SpecVersion::V3(3),
        ignition_config::Config::V3_4(_) => SpecVersion::V3(4),
        ignition_config::Config::V3_5(_) => SpecVersion::V3(5),
        _ => return Err("parsed as an unexpected spec version".into()),
    };
    if declared != version {
        return Err(format!("parsed as spec {declared}"));
    }
    if !warnings.is_empty() {
        let keys: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        return Err(format!(
            "the config uses fields this spec does not define: {}",
            keys.join(", ")
        ));
    }
    Ok(())
}

/// Reads a spec 2.2 answer back with mco-render's typed 2.2 reader.
pub fn check_2_2(two: &Value) -> Result<(), String> {
    if two["ignition"]["version"] != "2.2.0" {
        return Err("not declared as 2.2.0".into());
    }
    mco_render::ignition::parse(two)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mco_api::MachineConfigSpec;

    fn rendered() -> MachineConfig {
        let mut mc = MachineConfig::new(
            "rendered-worker-abc",
            MachineConfigSpec {
                os_image_url: "quay.io/os@sha256:1".into(),
                kernel_arguments: Some(vec!["nosmt".into()]),
                config: Some(json!({
                    "ignition": {"version": "3.5.0"},
                    "storage": {"files": [{"path": "/etc/chrony.conf", "mode": 420,
                        "overwrite": true, "contents": {"source": "data:,server%20x"}}]},
                    "systemd": {"units": [{"name": "kubelet.service", "enabled": true,
                        "contents": "[Unit]\n"}]},
                    "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 A"]}]}
                })),
                ..Default::default()
            },
        );
        mc.metadata.resource_version = Some("7".into());
        mc
    }

    fn file<'a>(cfg: &'a Ignition, path: &str) -> &'a v3::File {
        let files = cfg.storage.as_ref().unwrap().files.as_ref().unwrap();
        files.iter().find(|f| f.path == path).unwrap()
    }

    fn decoded(f: &v3::File) -> Vec<u8> {
        mco_render::ignition::decode_data_url(
            f.contents.as_ref().unwrap().source.as_deref().unwrap(),
            None,
        )
        .unwrap()
    }

    #[test]
    fn an_image_mode_config_starts_the_machine_on_its_image() {
        let image = "registry.example/os-worker@sha256:1111111111111111111111111111111111111111111111111111111111111111";
        let mc = mco_api::image_mode::embed::embed(&rendered(), image);
        let v = SpecVersion::V3(5);
        let body = assemble(&mc, v, &Appended::default()).unwrap();
        let cfg = mco_render::ignition::parse(&serde_json::from_slice(&body).unwrap()).unwrap();
        let ann: Value = serde_json::from_slice(&decoded(file(&cfg, NODE_ANNOTATIONS))).unwrap();
        assert_eq!(ann[annotations::CURRENT_IMAGE], image);
        assert_eq!(ann[annotations::DESIRED_IMAGE], image);
        assert_eq!(ann[annotations::CURRENT_CONFIG], "rendered-worker-abc");
        // First boot rebases to the image and records the rendered config apart from it.
        let enc: MachineConfig =
            serde_json::from_slice(&decoded(file(&cfg, paths::FIRSTBOOT_CONFIG))).unwrap();
        assert_eq!(enc.spec.os_image_url, image);
        let (rendered_back, got) = mco_api::image_mode::embed::split(&enc);
        assert_eq!(got, image);
        assert_eq!(rendered_back.spec.os_image_url, "quay.io/os@sha256:1");
        // Outside image mode, no image annotation at all.
        let body = assemble(&rendered(), v, &Appended::default()).unwrap();
        let cfg = mco_render::ignition::parse(&serde_json::from_slice(&body).unwrap()).unwrap();
        let ann: Value = serde_json::from_slice(&decoded(file(&cfg, NODE_ANNOTATIONS))).unwrap();
        assert!(ann.get(annotations::CURRENT_IMAGE).is_none(), "{ann}");
    }

    #[test]
    fn every_3x_answer_parses_as_its_version_with_the_appended_files() {
        for minor in 1..=5u8 {
            let v = SpecVersion::V3(minor);
            let body = assemble(&rendered(), v, &Appended::default()).unwrap();
            let served: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(served["ignition"]["version"], v.as_str());
            check_3x(&body, v).unwrap();
            let cfg = mco_render::ignition::parse(&served).unwrap();
            // The rendered config's own contents are there.
            assert_eq!(decoded(file(&cfg, "/etc/chrony.conf")), b"server x");
            let ann: Value =
                serde_json::from_slice(&decoded(file(&cfg, NODE_ANNOTATIONS))).unwrap();
            assert_eq!(ann, node_annotations("rendered-worker-abc", ""));
            let enc: MachineConfig =
                serde_json::from_slice(&decoded(file(&cfg, paths::FIRSTBOOT_CONFIG))).unwrap();
            assert_eq!(enc.metadata.name.as_deref(), Some("rendered-worker-abc"));
            assert_eq!(enc.spec.os_image_url, "quay.io/os@sha256:1");
            assert_eq!(enc.spec.kernel_arguments, Some(vec!["nosmt".to_string()]));
            assert_eq!(
                enc.spec.config,
                Some(json!({"ignition": {"version": v.as_str()}}))
            );
            let units = cfg.systemd.as_ref().unwrap().units.as_ref().unwrap();
            let fb = units.iter().find(|u| u.name == FIRSTBOOT_UNIT).unwrap();
            assert!(
                fb.contents
                    .as_deref()
                    .unwrap()
                    .contains("firstboot-complete-machineconfig")
            );
            // The encapsulated file comes last, as upstream appends it.
            let files = cfg.storage.as_ref().unwrap().files.as_ref().unwrap();
            assert_eq!(files.last().unwrap().path, paths::FIRSTBOOT_CONFIG);
        }
    }

    #[test]
    fn the_2_2_answer_parses_as_2_2_with_the_appended_files() {
        let body = assemble(&rendered(), SpecVersion::V2_2, &Appended::default()).unwrap();
        let served: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(served["ignition"]["version"], "2.2.0");
        assert!(ignition_config::Config::parse_slice(&body).is_err());
        let cfg = mco_render::ignition::parse(&served).unwrap();
        let enc: MachineConfig =
            serde_json::from_slice(&decoded(file(&cfg, paths::FIRSTBOOT_CONFIG))).unwrap();
        assert_eq!(
            enc.spec.config,
            Some(json!({"ignition": {"version": "2.2.0"}}))
        );
        assert_eq!(decoded(file(&cfg, "/etc/chrony.conf")), b"server x");
    }

    #[test]
    fn a_field_the_asked_version_lacks_is_an_error_not_a_silent_drop() {
        let mut mc = rendered();
        // kernelArguments arrived in spec 3.3.
        mc.spec.config = Some(json!({"ignition": {"version": "3.5.0"},
            "kernelArguments": {"shouldExist": ["nosmt"]}}));
        assert!(assemble(&mc, SpecVersion::V3(3), &Appended::default()).is_ok());
        let e = assemble(&mc, SpecVersion::V3(2), &Appended::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("serving rendered-worker-abc as spec 3.2.0")
                && e.contains("kernelArguments"),
            "{e}"
        );
    }

    #[test]
    fn a_rendered_unit_of_the_same_name_is_kept() {
        let mut mc = rendered();
        mc.spec.config = Some(json!({"ignition": {"version": "3.5.0"},
            "systemd": {"units": [{"name": FIRSTBOOT_UNIT, "contents": "mine"}]}}));
        let body = assemble(&mc, SpecVersion::NEWEST, &Appended::default()).unwrap();
        let cfg: Ignition = serde_json::from_slice(&body).unwrap();
        let units = cfg.systemd.unwrap().units.unwrap();
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].contents.as_deref(), Some("mine"));
    }

    fn cc(kubelet_ca: &str) -> mco_api::ControllerConfig {
        let mut cc =
            mco_api::ControllerConfig::new("machine-config-controller", Default::default());
        cc.spec.kube_api_server_serving_ca_data = Some(kubelet_ca.into());
        cc
    }

    #[test]
    fn the_kubelet_ca_kubeconfig_and_content_are_appended_as_upstream_does() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let kc = bootstrap_kubeconfig("https://api-int.example:6443", b"CA PEM", "tok-123");
        let appended =
            Appended::from_controller_config(Some(&cc(&b64("KUBE CA"))), Some(kc.clone().into()))
                .unwrap();
        let body = assemble(&rendered(), SpecVersion::V3(4), &appended).unwrap();
        let cfg = mco_render::ignition::parse(&serde_json::from_slice(&body).unwrap()).unwrap();
        assert_eq!(decoded(file(&cfg, KUBELET_CA)), b"KUBE CA");
        assert_eq!(decoded(file(&cfg, KUBECONFIG)), kc.as_bytes());
        assert!(kc.contains("server: https://api-int.example:6443\n"));
        assert!(kc.contains(&format!("certificate-authority-data: {}\n", b64("CA PEM"))));
        assert!(kc.contains("token: tok-123\n"));
        let content = decoded(file(&cfg, CONTENT));
        assert!(
            content.starts_with(b"{\n    \"apiVersion\""),
            "{}",
            String::from_utf8_lossy(&content)
        );
        let mc: MachineConfig = serde_json::from_slice(&content).unwrap();
        assert_eq!(mc.spec.config, rendered().spec.config);
        // Order: the content before the encapsulated config, which stays last.
        let files = cfg.storage.as_ref().unwrap().files.as_ref().unwrap();
        let at = |p: &str| files.iter().position(|f| f.path == p).unwrap();
        assert!(at(NODE_ANNOTATIONS) < at(KUBECONFIG) && at(KUBECONFIG) < at(CONTENT));
        assert_eq!(files.last().unwrap().path, paths::FIRSTBOOT_CONFIG);
        for f in files
            .iter()
            .filter(|f| [KUBECONFIG, CONTENT, KUBELET_CA].contains(&f.path.as_str()))
        {
            assert_eq!(
                (f.mode, f.overwrite),
                (Some(0o644), Some(true)),
                "{}",
                f.path
            );
        }
        // Without a kubeconfig, none; without a CA, the rendered config's stays.
        let body = assemble(&rendered(), SpecVersion::NEWEST, &Appended::default()).unwrap();
        let cfg: Ignition = serde_json::from_slice(&body).unwrap();
        let files = cfg.storage.unwrap().files.unwrap();
        assert!(
            !files
                .iter()
                .any(|f| f.path == KUBECONFIG || f.path == KUBELET_CA)
        );
    }

    #[test]
    fn the_controller_configs_ca_replaces_the_rendered_configs_file_in_place() {
        let mut mc = rendered();
        mc.spec.config = Some(json!({"ignition": {"version": "3.5.0"},
            "storage": {"files": [{"path": KUBELET_CA, "mode": 384, "overwrite": true,
                "contents": {"source": "data:,old"}}]}}));
        let b64 = base64::engine::general_purpose::STANDARD.encode("new");
        let appended = Appended::from_controller_config(Some(&cc(&b64)), None).unwrap();
        let body = assemble(&mc, SpecVersion::NEWEST, &appended).unwrap();
        let cfg: Ignition = serde_json::from_slice(&body).unwrap();
        let files = cfg.storage.as_ref().unwrap().files.as_ref().unwrap();
        let ca: Vec<_> = files.iter().filter(|f| f.path == KUBELET_CA).collect();
        assert_eq!(ca.len(), 1);
        assert_eq!(ca[0].mode, Some(384));
        assert_eq!(decoded(ca[0]), b"new");
        assert_eq!(files[0].path, KUBELET_CA, "replaced where it was");
        let e = Appended::from_controller_config(Some(&cc("not base64!")), None).unwrap_err();
        assert!(
            e.starts_with("ControllerConfig spec.kubeAPIServerServingCAData: not base64"),
            "{e}"
        );
    }
}
