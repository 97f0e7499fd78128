//! Spec 3.5 → spec 2.2, for machines whose boot image still carries Ignition 0.x.
//!
//! Upstream translates 3.x down to 2.2 for them. What spec 2.2 cannot say is refused with an
//! error naming the field, never dropped: files, directories and links go onto the `root`
//! filesystem; units and the `passwd` users keep their fields (2.2 has all but `shouldExist`).
//! Refused: `kernelArguments`, `storage.disks/raid/filesystems/luks`, file `append`, HTTP
//! headers on a source, `ignition.config/proxy/security/timeouts`, `passwd.groups`, and a user's
//! `shouldExist`. mco's rendered configs use none of these.
//!
//! The `ignition-config` crate reads only spec 3, so the answer is checked by reading it back
//! with mco-render's spec 2.2 reader, which translates it up to 3.5 again (see the tests).

use ignition_config::v3_5 as v3;
use serde_json::{Map, Value, json};

/// A part of the config spec 2.2 cannot express.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot translate the config to Ignition spec 2.2: {0} has no spec 2.2 equivalent")]
pub struct Untranslatable(pub String);

fn refuse<T>(what: impl Into<String>) -> Result<T, Untranslatable> {
    Err(Untranslatable(what.into()))
}

fn owner(id: Option<i64>, name: Option<&String>) -> Value {
    let mut o = Map::new();
    if let Some(id) = id {
        o.insert("id".into(), id.into());
    }
    if let Some(n) = name {
        o.insert("name".into(), n.clone().into());
    }
    Value::Object(o)
}

fn node(
    path: &str,
    overwrite: Option<bool>,
    user: Option<(Option<i64>, Option<&String>)>,
    group: Option<(Option<i64>, Option<&String>)>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("filesystem".into(), "root".into());
    m.insert("path".into(), path.into());
    if let Some(o) = overwrite {
        m.insert("overwrite".into(), o.into());
    }
    if let Some((id, name)) = user {
        m.insert("user".into(), owner(id, name));
    }
    if let Some((id, name)) = group {
        m.insert("group".into(), owner(id, name));
    }
    m
}

fn contents(path: &str, r: &v3::Resource) -> Result<Value, Untranslatable> {
    if r.http_headers.as_ref().is_some_and(|h| !h.is_empty()) {
        return refuse(format!("storage.files[{path}].contents.httpHeaders"));
    }
    let mut m = Map::new();
    if let Some(c) = &r.compression {
        m.insert("compression".into(), c.clone().into());
    }
    m.insert(
        "source".into(),
        r.source.clone().unwrap_or_else(|| "data:,".into()).into(),
    );
    if let Some(h) = r.verification.as_ref().and_then(|v| v.hash.clone()) {
        m.insert("verification".into(), json!({ "hash": h }));
    }
    Ok(Value::Object(m))
}

/// The spec 2.2 form of `cfg`, or the first part of it that has none.
pub fn translate(cfg: &v3::Config) -> Result<Value, Untranslatable> {
    let ign = &cfg.ignition;
    if ign.config.is_some() {
        return refuse("ignition.config");
    }
    if ign.proxy.is_some() {
        return refuse("ignition.proxy");
    }
    if ign.security.is_some() {
        return refuse("ignition.security");
    }
    if ign.timeouts.is_some() {
        return refuse("ignition.timeouts");
    }
    if cfg.kernel_arguments.is_some() {
        return refuse("kernelArguments");
    }
    let mut out = Map::new();
    out.insert("ignition".into(), json!({ "version": "2.2.0" }));

    if let Some(s) = &cfg.storage {
        for (set, name) in [
            (s.disks.as_ref().is_some_and(|v| !v.is_empty()), "disks"),
            (s.raid.as_ref().is_some_and(|v| !v.is_empty()), "raid"),
            (
                s.filesystems.as_ref().is_some_and(|v| !v.is_empty()),
                "filesystems",
            ),
            (s.luks.as_ref().is_some_and(|v| !v.is_empty()), "luks"),
        ] {
            if set {
                return refuse(format!("storage.{name}"));
            }
        }
        let mut storage = Map::new();
        let mut files = Vec::new();
        for f in s.files.iter().flatten() {
            if f.append.as_ref().is_some_and(|a| !a.is_empty()) {
                return refuse(format!("storage.files[{}].append", f.path));
            }
            let mut m = node(
                &f.path,
                f.overwrite,
                f.user.as_ref().map(|u| (u.id, u.name.as_ref())),
                f.group.as_ref().map(|g| (g.id, g.name.as_ref())),
            );
            let c = match &f.contents {
                Some(r) => contents(&f.path, r)?,
                None => json!({ "source": "data:," }),
            };
            m.insert("contents".into(), c);
            if let Some(mode) = f.mode {
                m.insert("mode".into(), mode.into());
            }
            files.push(Value::Object(m));
        }
        if !files.is_empty() {
            storage.insert("files".into(), files.into());
        }
        let mut dirs = Vec::new();
        for d in s.directories.iter().flatten() {
            let mut m = node(
                &d.path,
                d.overwrite,
                d.user.as_ref().map(|u| (u.id, u.name.as_ref())),
                d.group.as_ref().map(|g| (g.id, g.name.as_ref())),
            );
            if let Some(mode) = d.mode {
                m.insert("mode".into(), mode.into());
            }
            dirs.push(Value::Object(m));
        }
        if !dirs.is_empty() {
            storage.insert("directories".into(), dirs.into());
        }
        let mut links = Vec::new();
        for l in s.links.iter().flatten() {
            let Some(target) = &l.target else {
                return refuse(format!("storage.links[{}] without a target", l.path));
            };
            let mut m = node(
                &l.path,
                l.overwrite,
                l.user.as_ref().map(|u| (u.id, u.name.as_ref())),
                l.group.as_ref().map(|g| (g.id, g.name.as_ref())),
            );
            m.insert("target".into(), target.clone().into());
            if let Some(h) = l.hard {
                m.insert("hard".into(), h.into());
            }
            links.push(Value::Object(m));
        }
        if !links.is_empty() {
            storage.insert("links".into(), links.into());
        }
        if !storage.is_empty() {
            out.insert("storage".into(), storage.into());
        }
    }

    if let Some(sd) = &cfg.systemd {
        let units: Vec<Value> = sd
            .units
            .iter()
            .flatten()
            .map(|u| serde_json::to_value(u).unwrap_or(Value::Null))
            .collect();
        if !units.is_empty() {
            out.insert("systemd".into(), json!({ "units": units }));
        }
    }

    if let Some(p) = &cfg.passwd {
        if p.groups.as_ref().is_some_and(|g| !g.is_empty()) {
            return refuse("passwd.groups");
        }
        let mut users = Vec::new();
        for u in p.users.iter().flatten() {
            if u.should_exist.is_some() {
                return refuse(format!("passwd.users[{}].shouldExist", u.name));
            }
            users.push(serde_json::to_value(u).unwrap_or(Value::Null));
        }
        if !users.is_empty() {
            out.insert("passwd".into(), json!({ "users": users }));
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: Value) -> v3::Config {
        mco_render::ignition::parse(&v).unwrap()
    }

    #[test]
    fn files_units_and_users_survive_a_round_trip_through_2_2() {
        let orig = cfg(json!({
            "ignition": {"version": "3.5.0"},
            "storage": {
                "files": [{"path": "/etc/a", "mode": 420, "overwrite": true,
                           "user": {"name": "root"},
                           "contents": {"source": "data:,hello"}}],
                "directories": [{"path": "/etc/d", "mode": 493}],
                "links": [{"path": "/etc/l", "target": "/etc/a"}]
            },
            "systemd": {"units": [{"name": "a.service", "enabled": true,
                                   "contents": "[Unit]\n",
                                   "dropins": [{"name": "10-x.conf", "contents": "[Service]\n"}]}]},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}]}
        }));
        let two = translate(&orig).unwrap();
        assert_eq!(two["ignition"]["version"], "2.2.0");
        assert_eq!(two["storage"]["files"][0]["filesystem"], "root");
        // Read back with the typed spec 2.2 reader, translated up again: nothing lost.
        let back = mco_render::ignition::parse(&two).unwrap();
        let files = back.storage.as_ref().unwrap().files.as_ref().unwrap();
        assert_eq!(files[0].path, "/etc/a");
        assert_eq!(files[0].mode, Some(420));
        assert_eq!(
            files[0].contents.as_ref().unwrap().source.as_deref(),
            Some("data:,hello")
        );
        assert_eq!(back.systemd, orig.systemd);
        assert_eq!(back.passwd, orig.passwd);
        let links = back.storage.as_ref().unwrap().links.as_ref().unwrap();
        assert_eq!(links[0].target.as_deref(), Some("/etc/a"));
    }

    #[test]
    fn what_2_2_cannot_say_is_refused_by_name() {
        let c = cfg(json!({"ignition": {"version": "3.5.0"},
            "kernelArguments": {"shouldExist": ["nosmt"]}}));
        assert_eq!(
            translate(&c).unwrap_err().to_string(),
            "cannot translate the config to Ignition spec 2.2: kernelArguments has no spec 2.2 equivalent"
        );
        let c = cfg(json!({"ignition": {"version": "3.5.0"},
            "storage": {"files": [{"path": "/etc/a",
                "append": [{"source": "data:,x"}]}]}}));
        assert!(
            translate(&c)
                .unwrap_err()
                .0
                .contains("storage.files[/etc/a].append")
        );
    }
}
