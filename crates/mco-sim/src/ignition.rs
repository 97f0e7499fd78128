//! Playing Ignition on a simulated node: what Ignition does to a new machine's disk in its
//! initramfs, done to the node's root before the node first boots.
//!
//! Files, directories and links land where Ignition puts them, with their modes and owners;
//! units and dropins where the daemon's unit writer puts them, enablement as the simulated
//! systemd keeps it (`*.wants` links) plus the preset file Ignition writes; the `core` user's
//! SSH keys where the daemon writes them. The daemon's host layer does the writing, so every
//! path resolves beneath the root and nothing escapes it.
//!
//! Not played, and reported as such: disks, RAID, filesystems and LUKS (a simulated node has
//! no block devices), Ignition's own `kernelArguments`, and verification hashes. Refused: a
//! user or group other than `core`, a source other than a `data:` URL, and nested configs
//! (`ignition.config.merge`/`replace`): a simulated node has no network to fetch them from.

use mco_daemon::Host;
use mco_daemon::host::fs::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, EntryKind, FileAttrs};
use mco_daemon::host::{passwd, paths, units, users};
use mco_render::ignition::{self, Ignition, MAX_CONFIG_BYTES};

/// Where Ignition records that it provisioned the machine: a node with it is not provisioned
/// again.
pub const RESULT: &str = "/etc/.ignition-result.json";
/// The preset file Ignition writes for the units it enables or disables.
pub const PRESET: &str = "/etc/systemd/system-preset/20-ignition.preset";

/// Why a config could not be played.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    /// The config asks for something a simulated node cannot do, or breaks Ignition's rules.
    #[error("{field}: {message}")]
    Refused {
        /// Where in the config, e.g. `storage.files[2].contents.source`.
        field: String,
        /// Why.
        message: String,
    },
    /// The node's disk failed.
    #[error("{field}: {source}")]
    Host {
        /// Where in the config.
        field: String,
        /// Why.
        #[source]
        source: mco_daemon::HostError,
    },
}

fn refused(field: impl Into<String>, message: impl Into<String>) -> PlayError {
    PlayError::Refused {
        field: field.into(),
        message: message.into(),
    }
}

fn host_err(field: &str) -> impl FnOnce(mco_daemon::HostError) -> PlayError + '_ {
    move |source| PlayError::Host {
        field: field.to_string(),
        source,
    }
}

/// What playing a config did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Played {
    /// Files written, in order.
    pub files: Vec<String>,
    /// Directories made.
    pub directories: Vec<String>,
    /// Links made.
    pub links: Vec<String>,
    /// Units written or whose enablement was set.
    pub units: Vec<String>,
    /// Whether `core`'s SSH keys were written.
    pub ssh_keys: bool,
    /// The parts of the config a simulated node does not play.
    pub skipped: Vec<String>,
}

fn owner(
    host: &Host,
    field: &str,
    user: Option<&ignition_config::v3_5::NodeUser>,
    group: Option<&ignition_config::v3_5::NodeGroup>,
) -> Result<(u32, u32), PlayError> {
    let id = |i: Option<i64>, what: &str| -> Result<Option<u32>, PlayError> {
        i.map(|i| {
            u32::try_from(i).map_err(|_| {
                refused(
                    format!("{field}.{what}.id"),
                    format!("{i} is not a valid id"),
                )
            })
        })
        .transpose()
    };
    passwd::resolve_ownership(
        &host.fs,
        id(user.and_then(|u| u.id), "user")?,
        user.and_then(|u| u.name.as_deref()),
        id(group.and_then(|g| g.id), "group")?,
        group.and_then(|g| g.name.as_deref()),
    )
    .map_err(host_err(field))
}

fn mode(field: &str, m: Option<i64>, default: u32) -> Result<u32, PlayError> {
    match m {
        None => Ok(default),
        Some(m) if (0..=0o7777).contains(&m) => Ok(m as u32),
        Some(m) => Err(refused(
            format!("{field}.mode"),
            format!("invalid mode {m}"),
        )),
    }
}

/// Decodes one resource: a `data:` URL within mco-render's per-file limit.
fn decode(field: &str, r: &ignition_config::v3_5::Resource) -> Result<Vec<u8>, PlayError> {
    let source = r.source.as_deref().unwrap_or_default();
    if !source.is_empty() && !source.starts_with("data:") {
        return Err(refused(
            format!("{field}.source"),
            format!("only data: URLs can be played on a simulated node, got {source:?}"),
        ));
    }
    let compression = r.compression.as_deref().filter(|c| !c.is_empty());
    ignition::decode_data_url(source, compression)
        .map_err(|e| refused(format!("{field}.source"), e.to_string()))
}

fn checked_path<'a>(field: &str, path: &'a str) -> Result<&'a str, PlayError> {
    if !ignition::is_normalised_absolute(path) || path == "/" {
        return Err(refused(
            format!("{field}.path"),
            format!("{path:?} is not an absolute, normalised path inside the node's root"),
        ));
    }
    Ok(path)
}

/// Whether an entry may be (re)placed at `path`: Ignition refuses to replace a different
/// node unless `overwrite` is set.
fn may_place(
    host: &Host,
    field: &str,
    path: &str,
    overwrite: bool,
    same: impl FnOnce() -> Result<bool, PlayError>,
) -> Result<(), PlayError> {
    let exists = host.fs.stat(path).map_err(host_err(field))?.is_some();
    if exists && !overwrite && !same()? {
        return Err(refused(
            format!("{field}.overwrite"),
            format!("{path} exists and overwrite is false"),
        ));
    }
    Ok(())
}

/// Plays `cfg` onto `host`'s root (see the module docs).
pub fn play(host: &Host, cfg: &Ignition) -> Result<Played, PlayError> {
    let mut out = Played::default();
    if let Some(c) = &cfg.ignition.config
        && (c.merge.as_ref().is_some_and(|m| !m.is_empty()) || c.replace.is_some())
    {
        return Err(refused(
            "ignition.config",
            "nested configs (merge, replace) cannot be fetched by a simulated node",
        ));
    }
    if let Some(p) = &cfg.passwd {
        if p.groups.as_ref().is_some_and(|g| !g.is_empty()) {
            return Err(refused(
                "passwd.groups",
                "a simulated node has only the groups it was created with",
            ));
        }
        for (i, u) in p.users.iter().flatten().enumerate() {
            if u.name != paths::CORE_USER {
                return Err(refused(
                    format!("passwd.users[{i}].name"),
                    format!("user {:?}: a simulated node has only user core", u.name),
                ));
            }
        }
    }
    if let Some(s) = &cfg.storage {
        for (name, present) in [
            (
                "storage.disks",
                s.disks.as_ref().is_some_and(|v| !v.is_empty()),
            ),
            (
                "storage.raid",
                s.raid.as_ref().is_some_and(|v| !v.is_empty()),
            ),
            (
                "storage.filesystems",
                s.filesystems.as_ref().is_some_and(|v| !v.is_empty()),
            ),
            (
                "storage.luks",
                s.luks.as_ref().is_some_and(|v| !v.is_empty()),
            ),
        ] {
            if present {
                out.skipped.push(name.to_string());
            }
        }
    }
    if cfg.kernel_arguments.is_some() {
        out.skipped.push("kernelArguments".into());
    }
    let storage = cfg.storage.as_ref();

    // Directories, then files, then links, as Ignition's files stage orders them.
    for (i, d) in storage
        .and_then(|s| s.directories.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let field = format!("storage.directories[{i}]");
        let path = checked_path(&field, &d.path)?;
        let (uid, gid) = owner(host, &field, d.user.as_ref(), d.group.as_ref())?;
        let m = mode(&field, d.mode, DEFAULT_DIR_MODE)?;
        let st = host.fs.stat(path).map_err(host_err(&field))?;
        match st.map(|s| s.kind) {
            Some(EntryKind::Dir) => {}
            Some(_) if d.overwrite == Some(true) => {
                host.fs.remove_all(path).map_err(host_err(&field))?;
            }
            Some(_) => {
                return Err(refused(
                    format!("{field}.overwrite"),
                    format!("{path} exists, is not a directory, and overwrite is false"),
                ));
            }
            None => {}
        }
        host.fs
            .create_dir_all(path, m, Some(uid), Some(gid))
            .map_err(host_err(&field))?;
        host.fs
            .set_dir_attrs(path, m, Some(uid), Some(gid))
            .map_err(host_err(&field))?;
        out.directories.push(path.to_string());
    }

    let mut total = 0u64;
    for (i, f) in storage
        .and_then(|s| s.files.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let field = format!("storage.files[{i}]");
        let path = checked_path(&field, &f.path)?;
        let mut data = match &f.contents {
            Some(r) if r.source.is_some() => decode(&format!("{field}.contents"), r)?,
            // No contents: an existing file keeps its own, as Ignition leaves it.
            _ => host
                .fs
                .read_optional(path)
                .map_err(host_err(&field))?
                .unwrap_or_default(),
        };
        let overwrite = f.overwrite == Some(true);
        may_place(host, &field, path, overwrite, || {
            // Ignition accepts an existing file that already is what the config describes.
            let have = host.fs.read_optional(path).map_err(host_err(&field))?;
            Ok(have.as_deref() == Some(&data[..]) && f.append.is_none())
        })?;
        if !overwrite
            && f.append.as_ref().is_some_and(|a| !a.is_empty())
            && f.contents.is_none()
            && let Some(have) = host.fs.read_optional(path).map_err(host_err(&field))?
        {
            data = have;
        }
        for (j, a) in f.append.iter().flatten().enumerate() {
            data.extend(decode(&format!("{field}.append[{j}]"), a)?);
        }
        total += data.len() as u64;
        if total > MAX_CONFIG_BYTES {
            return Err(refused(
                format!("{field}.contents.source"),
                format!(
                    "the decoded files of the config exceed the limit of {MAX_CONFIG_BYTES} bytes at {path}"
                ),
            ));
        }
        let (uid, gid) = owner(host, &field, f.user.as_ref(), f.group.as_ref())?;
        let m = mode(&field, f.mode, DEFAULT_FILE_MODE)?;
        if let Some(st) = host.fs.stat(path).map_err(host_err(&field))?
            && st.kind == EntryKind::Dir
        {
            host.fs.remove_all(path).map_err(host_err(&field))?;
        }
        host.fs
            .write_atomic(path, &data, &FileAttrs::mode(m).owned(uid, gid))
            .map_err(host_err(&field))?;
        out.files.push(path.to_string());
    }

    for (i, l) in storage
        .and_then(|s| s.links.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let field = format!("storage.links[{i}]");
        let path = checked_path(&field, &l.path)?;
        let Some(target) = l.target.as_deref().filter(|t| !t.is_empty()) else {
            return Err(refused(format!("{field}.target"), "a link needs a target"));
        };
        let hard = l.hard == Some(true);
        may_place(host, &field, path, l.overwrite == Some(true), || {
            let have = host.fs.read_link(path).map_err(host_err(&field))?;
            Ok(!hard && have.as_deref() == Some(std::path::Path::new(target)))
        })?;
        if hard {
            // A hard link names a file on the same disk: the target must be inside the root.
            let from = mco_daemon::host::fs::relative(target).map_err(host_err(&field))?;
            let to = mco_daemon::host::fs::relative(path).map_err(host_err(&field))?;
            if let Some(parent) = std::path::Path::new(path).parent() {
                host.fs
                    .create_dir_all(&parent.to_string_lossy(), DEFAULT_DIR_MODE, None, None)
                    .map_err(host_err(&field))?;
            }
            let _ = host.fs.remove_file(path);
            host.fs
                .dir()
                .hard_link(&from, host.fs.dir(), &to)
                .map_err(|e| PlayError::Host {
                    field: field.clone(),
                    source: mco_daemon::HostError::io(format!("linking {path} to {target}"), e),
                })?;
        } else {
            host.fs.symlink(target, path).map_err(host_err(&field))?;
        }
        out.links.push(path.to_string());
    }

    play_units(host, cfg, &mut out)?;

    if let Some(core) = cfg
        .passwd
        .as_ref()
        .and_then(|p| p.users.as_deref())
        .and_then(|u| u.iter().find(|u| u.name == paths::CORE_USER))
    {
        let field = "passwd.users[core]";
        if let Some(keys) = &core.ssh_authorized_keys {
            users::write_core_ssh_keys(&host.fs, keys).map_err(host_err(field))?;
            out.ssh_keys = true;
        }
        if let Some(hash) = &core.password_hash {
            users::set_password_hash(&host.fs, paths::CORE_USER, hash).map_err(host_err(field))?;
        }
    }
    Ok(out)
}

/// Units and dropins through the daemon's unit writer (no backups: nothing of mco's was on
/// the disk before), then enablement as systemd's first boot applies Ignition's presets.
fn play_units(host: &Host, cfg: &Ignition, out: &mut Played) -> Result<(), PlayError> {
    let list = cfg
        .systemd
        .as_ref()
        .and_then(|s| s.units.as_deref())
        .unwrap_or_default();
    let mut preset = String::new();
    let (mut enable, mut disable) = (Vec::new(), Vec::new());
    for (i, u) in list.iter().enumerate() {
        let field = format!("systemd.units[{i}]");
        if let Err(reason) = ignition::check_unit_name(&u.name) {
            return Err(refused(
                format!("{field}.name"),
                format!("invalid unit name {:?}: {reason}", u.name),
            ));
        }
        for (j, d) in u.dropins.iter().flatten().enumerate() {
            if !d.name.ends_with(".conf") || d.name.contains('/') {
                return Err(refused(
                    format!("{field}.dropins[{j}].name"),
                    format!("invalid dropin name {:?}", d.name),
                ));
            }
        }
        let spec = mco_daemon::engine::apply::unit_spec(u);
        units::write_unit_spec(&host.fs, &spec, false).map_err(host_err(&field))?;
        match u.enabled {
            Some(true) => {
                preset.push_str(&format!("enable {}\n", u.name));
                enable.push(u.name.clone());
            }
            Some(false) => {
                preset.push_str(&format!("disable {}\n", u.name));
                disable.push(u.name.clone());
            }
            None => {}
        }
        out.units.push(u.name.clone());
    }
    if !preset.is_empty() {
        host.fs
            .write_atomic(PRESET, preset.as_bytes(), &FileAttrs::default())
            .map_err(host_err("systemd.units"))?;
    }
    host.systemd
        .enable(&enable)
        .map_err(host_err("systemd.units"))?;
    host.systemd
        .disable(&disable)
        .map_err(host_err("systemd.units"))?;
    Ok(())
}

/// Records that Ignition provisioned the node, as Ignition does.
pub fn record_result(host: &Host, date: &str) -> Result<(), PlayError> {
    let doc = serde_json::json!({"provisioningDate": date, "userConfigProvided": true});
    host.fs
        .write_atomic(RESULT, doc.to_string().as_bytes(), &FileAttrs::mode(0o644))
        .map_err(host_err(RESULT))
}

/// Whether Ignition already provisioned the node.
pub fn provisioned(host: &Host) -> Result<bool, mco_daemon::HostError> {
    host.fs.exists(RESULT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> (tempfile::TempDir, Host) {
        let t = tempfile::tempdir().unwrap();
        crate::root::NodeRoot::at(t.path())
            .ensure(crate::OsProfile::Rhcos, crate::OsUpdateMode::Pivot)
            .unwrap();
        let host = Host::sim(t.path()).unwrap();
        (t, host)
    }

    fn cfg(v: serde_json::Value) -> Ignition {
        ignition::parse(&v).unwrap()
    }

    fn gz(data: &[u8]) -> String {
        use base64::Engine as _;
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        format!(
            "data:;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(e.finish().unwrap())
        )
    }

    #[test]
    fn files_directories_links_units_and_keys_land_where_the_daemon_puts_them() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (t, host) = node();
        let c = cfg(json!({
            "ignition": {"version": "3.4.0"},
            "storage": {
                "directories": [{"path": "/etc/mco-test.d", "mode": 0o750}],
                "files": [
                    {"path": "/etc/chrony.conf", "mode": 0o600, "overwrite": true,
                     "contents": {"source": "data:,server%20x%0A"}},
                    {"path": "/etc/big.conf", "overwrite": true,
                     "contents": {"source": gz(&[b'a'; 5000]), "compression": "gzip"}},
                    {"path": "/var/home/core/owned", "user": {"name": "core"}, "group": {"id": 1000},
                     "contents": {"source": "data:;base64,aGk="}}
                ],
                "links": [{"path": "/etc/localtime", "target": "/usr/share/zoneinfo/UTC"}]
            },
            "systemd": {"units": [
                {"name": "hello.service", "enabled": true, "contents": "[Unit]\n[Install]\nWantedBy=multi-user.target\n"},
                {"name": "kubelet.service", "dropins": [{"name": "10-x.conf", "contents": "[Service]\n"}]},
                {"name": "bad.service", "mask": true}
            ]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAA k"]}]}
        }));
        let played = play(&host, &c).unwrap();
        let at = |p: &str| t.path().join(p.trim_start_matches('/'));
        assert_eq!(
            std::fs::read(at("/etc/chrony.conf")).unwrap(),
            b"server x\n"
        );
        let m = std::fs::metadata(at("/etc/chrony.conf")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::read(at("/etc/big.conf")).unwrap(),
            vec![b'a'; 5000]
        );
        assert_eq!(
            std::fs::metadata(at("/etc/big.conf"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o644
        );
        assert_eq!(
            std::fs::metadata(at("/etc/mco-test.d"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o750
        );
        assert_eq!(
            std::fs::read_link(at("/etc/localtime")).unwrap(),
            std::path::Path::new("/usr/share/zoneinfo/UTC")
        );
        if mco_daemon::host::fs::running_as_root() {
            assert_eq!(
                std::fs::metadata(at("/var/home/core/owned")).unwrap().uid(),
                1000
            );
        }
        // Units as the daemon's writer and the simulated systemd keep them.
        assert!(
            std::fs::read_to_string(at(&units::unit_path("hello.service")))
                .unwrap()
                .starts_with("[Unit]")
        );
        assert!(host.systemd.is_enabled("hello.service").unwrap());
        assert_eq!(
            std::fs::read_to_string(at(&units::dropin_path("kubelet.service", "10-x.conf")))
                .unwrap(),
            "[Service]\n"
        );
        assert!(units::is_masked(&host.fs, "bad.service").unwrap());
        assert_eq!(
            std::fs::read_to_string(at(PRESET)).unwrap(),
            "enable hello.service\n"
        );
        assert_eq!(
            users::read_core_ssh_keys(&host.fs).unwrap(),
            ["ssh-ed25519 AAA k"]
        );
        assert!(played.ssh_keys);
        assert_eq!(
            played.files,
            ["/etc/chrony.conf", "/etc/big.conf", "/var/home/core/owned"]
        );
        assert!(played.skipped.is_empty());
    }

    #[test]
    fn nothing_outside_the_root_and_nothing_unplayable() {
        let (_t, host) = node();
        for (v, field) in [
            (
                json!({"path": "/etc/../../escape", "contents": {"source": "data:,x"}}),
                "storage.files[0].path",
            ),
            (
                json!({"path": "/etc/x", "contents": {"source": "https://example.com/x"}}),
                "storage.files[0].contents.source",
            ),
        ] {
            let c: Ignition = serde_json::from_value(json!({
                "ignition": {"version": "3.5.0"}, "storage": {"files": [v]}
            }))
            .unwrap();
            let e = play(&host, &c).unwrap_err().to_string();
            assert!(e.starts_with(field), "{e}");
        }
        let hard = cfg(
            json!({"ignition": {"version": "3.5.0"}, "storage": {"links": [
            {"path": "/etc/h", "hard": true, "target": "/../../etc/passwd"}]}}),
        );
        let e = play(&host, &hard).unwrap_err().to_string();
        assert!(e.starts_with("storage.links[0]") && e.contains(".."), "{e}");
        let user = cfg(json!({"ignition": {"version": "3.5.0"},
            "passwd": {"users": [{"name": "core"}, {"name": "eve"}]}}));
        let e = play(&host, &user).unwrap_err().to_string();
        assert!(e.starts_with("passwd.users[1].name"), "{e}");
        let disks = cfg(json!({"ignition": {"version": "3.5.0"},
            "storage": {"filesystems": [{"device": "/dev/vda4", "format": "xfs"}]}}));
        assert_eq!(
            play(&host, &disks).unwrap().skipped,
            ["storage.filesystems"]
        );
    }

    #[test]
    fn an_existing_different_file_needs_overwrite() {
        let (_t, host) = node();
        host.fs
            .write_atomic("/etc/keep", b"mine", &FileAttrs::default())
            .unwrap();
        let c = |src: &str, ow: bool| {
            cfg(
                json!({"ignition": {"version": "3.5.0"}, "storage": {"files": [
                {"path": "/etc/keep", "overwrite": ow, "contents": {"source": src}}]}}),
            )
        };
        let e = play(&host, &c("data:,other", false))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "storage.files[0].overwrite: /etc/keep exists and overwrite is false"
        );
        play(&host, &c("data:,mine", false)).unwrap();
        play(&host, &c("data:,other", true)).unwrap();
        assert_eq!(host.fs.read("/etc/keep").unwrap(), b"other");
    }

    #[test]
    fn a_file_at_the_decoded_limit_plays_and_one_byte_over_is_refused() {
        let (_t, host) = node();
        let limit = ignition::MAX_FILE_BYTES as usize;
        let c = |n: usize| {
            cfg(
                json!({"ignition": {"version": "3.5.0"}, "storage": {"files": [
                {"path": "/var/big", "overwrite": true,
                 "contents": {"source": gz(&vec![0u8; n]), "compression": "gzip"}}]}}),
            )
        };
        play(&host, &c(limit)).unwrap();
        assert_eq!(host.fs.stat("/var/big").unwrap().unwrap().len, limit as u64);
        let e = play(&host, &c(limit + 1)).unwrap_err().to_string();
        assert!(
            e.starts_with("storage.files[0].contents.source")
                && e.contains("exceed the limit of 104857600 bytes"),
            "{e}"
        );
    }
}
