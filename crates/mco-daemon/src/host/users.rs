//! The `core` user's SSH keys and password hash: the only user settings mco manages in place.
//! The same file edits serve real and simulated hosts (upstream shells out to `usermod -p`,
//! which does exactly this edit of `/etc/shadow`).

use crate::error::{HostError, Result};
use crate::host::fs::{FileAttrs, HostFs};
use crate::host::passwd;
use crate::host::paths;

/// Writes the `core` user's keys to `/home/core/.ssh/authorized_keys.d/ignition`: `.ssh` and
/// `authorized_keys.d` are 0700 and the file 0600, all owned by `core` (upstream TestNoReboot).
/// An empty list leaves an empty file, as upstream does when the keys are removed.
pub fn write_core_ssh_keys(fs: &HostFs, keys: &[String]) -> Result<()> {
    let uid = passwd::lookup_uid(fs, paths::CORE_USER)?;
    let gid = passwd::lookup_gid(fs, paths::CORE_GROUP)?;
    // Parents above the home belong to root; everything from the home down belongs to core.
    fs.create_dir_all("/home", 0o755, None, None)?;
    // A `.ssh` owned by someone else (OCPBUGS-11832) would lock `core` out: fix it, do not keep it.
    for dir in [paths::CORE_SSH_DIR, paths::CORE_SSH_KEYS_DIR] {
        match fs.stat(dir)? {
            Some(_) => fs.set_dir_attrs(dir, 0o700, Some(uid), Some(gid))?,
            None => fs.create_dir_all(dir, 0o700, Some(uid), Some(gid))?,
        }
    }
    let mut content = keys.join("\n");
    if !content.is_empty() {
        content.push('\n');
    }
    fs.write_atomic(
        paths::CORE_SSH_KEYS,
        content.as_bytes(),
        &FileAttrs {
            mode: 0o600,
            uid: Some(uid),
            gid: Some(gid),
            dir_mode: 0o700,
        },
    )
}

/// Reads the `core` user's keys, one per non-empty line.
pub fn read_core_ssh_keys(fs: &HostFs) -> Result<Vec<String>> {
    let data = fs.read_optional(paths::CORE_SSH_KEYS)?.unwrap_or_default();
    Ok(String::from_utf8_lossy(&data)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

/// The password hash of `user` in `/etc/shadow`.
pub fn password_hash(fs: &HostFs, user: &str) -> Result<String> {
    let shadow = fs.read_to_string(paths::SHADOW)?;
    shadow
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == user).then(|| f.next().unwrap_or("").to_string())
        })
        .ok_or_else(|| HostError::UnknownUser(user.into()))
}

/// The hash that locks password login: no hash matches it. An empty hash would instead let
/// anyone log in without a password.
pub const LOCKED_PASSWORD_HASH: &str = "*";

/// The hash to set for a config's `passwordHash`: the config's own, or [`LOCKED_PASSWORD_HASH`]
/// when it has none (or an empty one), as upstream's `SetPasswordHash` does.
pub fn effective_password_hash(configured: Option<&str>) -> &str {
    configured
        .filter(|h| !h.is_empty())
        .unwrap_or(LOCKED_PASSWORD_HASH)
}

/// Sets the password hash of `user` in `/etc/shadow` (field 2), keeping every other field,
/// the file's mode and owner. Returns the previous hash so a failed update can put it back.
pub fn set_password_hash(fs: &HostFs, user: &str, hash: &str) -> Result<String> {
    if hash.contains(':') || hash.contains('\n') {
        return Err(HostError::State(format!(
            "invalid password hash for user {user}: contains ':' or a newline"
        )));
    }
    let st = fs.stat(paths::SHADOW)?;
    let shadow = fs.read_to_string(paths::SHADOW)?;
    let mut previous = None;
    let mut out = String::with_capacity(shadow.len() + hash.len());
    for line in shadow.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let mut fields: Vec<&str> = body.split(':').collect();
        if previous.is_none() && fields.len() >= 2 && fields[0] == user {
            previous = Some(fields[1].to_string());
            fields[1] = hash;
            out.push_str(&fields.join(":"));
        } else {
            out.push_str(body);
        }
        out.push_str(nl);
    }
    let previous = previous.ok_or_else(|| HostError::UnknownUser(user.into()))?;
    let attrs = match st {
        Some(st) => FileAttrs::mode(st.mode).owned(st.uid, st.gid),
        None => FileAttrs::mode(0o000),
    };
    fs.write_atomic(paths::SHADOW, out.as_bytes(), &attrs)?;
    Ok(previous)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fs::running_as_root;

    fn node() -> (tempfile::TempDir, HostFs) {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        fs.write_atomic(
            paths::PASSWD,
            b"root:x:0:0:root:/root:/bin/bash\ncore:x:1000:1000::/var/home/core:/bin/bash\n",
            &FileAttrs::default(),
        )
        .unwrap();
        fs.write_atomic(
            paths::GROUP,
            b"root:x:0:\ncore:x:1000:\n",
            &FileAttrs::default(),
        )
        .unwrap();
        fs.write_atomic(
            paths::SHADOW,
            b"root:!locked::0:99999:7:::\ncore:*:19000:0:99999:7:::\n",
            &FileAttrs::mode(0o000),
        )
        .unwrap();
        (t, fs)
    }

    /// TestNoReboot: keys land in `authorized_keys.d/ignition` with 700/700/600, owned by core.
    #[test]
    fn ssh_keys_layout() {
        let (_t, fs) = node();
        write_core_ssh_keys(
            &fs,
            &["ssh-ed25519 AAAA one".into(), "ssh-rsa BBBB two".into()],
        )
        .unwrap();
        assert_eq!(
            fs.read_to_string(paths::CORE_SSH_KEYS).unwrap(),
            "ssh-ed25519 AAAA one\nssh-rsa BBBB two\n"
        );
        for (p, mode) in [
            (paths::CORE_SSH_DIR, 0o700),
            (paths::CORE_SSH_KEYS_DIR, 0o700),
            (paths::CORE_SSH_KEYS, 0o600),
        ] {
            let st = fs.stat(p).unwrap().unwrap();
            assert_eq!(st.mode, mode, "{p}");
            if running_as_root() {
                assert_eq!((st.uid, st.gid), (1000, 1000), "{p}");
            }
        }
        // Removing the keys keeps the file, empty.
        write_core_ssh_keys(&fs, &[]).unwrap();
        assert_eq!(fs.read(paths::CORE_SSH_KEYS).unwrap(), b"");
        assert!(read_core_ssh_keys(&fs).unwrap().is_empty());
    }

    #[test]
    fn ssh_keys_fix_wrong_dir_mode() {
        let (_t, fs) = node();
        fs.create_dir_all(paths::CORE_SSH_DIR, 0o755, Some(0), Some(0))
            .unwrap();
        write_core_ssh_keys(&fs, &["k".into()]).unwrap();
        assert_eq!(fs.stat(paths::CORE_SSH_DIR).unwrap().unwrap().mode, 0o700);
        assert_eq!(read_core_ssh_keys(&fs).unwrap(), vec!["k"]);
    }

    #[test]
    fn ssh_keys_need_core_user() {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        let err = write_core_ssh_keys(&fs, &["k".into()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to retrieve UserID for username: core"
        );
    }

    #[test]
    fn password_hash_round_trip() {
        let (_t, fs) = node();
        let prev = set_password_hash(&fs, "core", "$6$salt$hash").unwrap();
        assert_eq!(prev, "*");
        assert_eq!(password_hash(&fs, "core").unwrap(), "$6$salt$hash");
        assert_eq!(
            fs.read_to_string(paths::SHADOW).unwrap(),
            "root:!locked::0:99999:7:::\ncore:$6$salt$hash:19000:0:99999:7:::\n"
        );
        assert_eq!(fs.stat(paths::SHADOW).unwrap().unwrap().mode, 0o000);
        assert_eq!(
            set_password_hash(&fs, "core", &prev).unwrap(),
            "$6$salt$hash"
        );
        assert_eq!(password_hash(&fs, "core").unwrap(), "*");
        assert!(set_password_hash(&fs, "nobody", "x").is_err());
        assert!(set_password_hash(&fs, "core", "a:b").is_err());
    }

    /// A config without `passwordHash` locks the password; it never leaves an empty hash.
    #[test]
    fn removed_password_hash_locks_login() {
        let (_t, fs) = node();
        set_password_hash(&fs, "core", effective_password_hash(Some("$6$s$h"))).unwrap();
        assert_eq!(password_hash(&fs, "core").unwrap(), "$6$s$h");
        for configured in [None, Some("")] {
            set_password_hash(&fs, "core", "$6$s$h").unwrap();
            let prev = set_password_hash(&fs, "core", effective_password_hash(configured)).unwrap();
            assert_eq!(prev, "$6$s$h");
            assert_eq!(password_hash(&fs, "core").unwrap(), "*", "{configured:?}");
            assert_eq!(
                fs.read_to_string(paths::SHADOW).unwrap(),
                "root:!locked::0:99999:7:::\ncore:*:19000:0:99999:7:::\n"
            );
        }
    }
}
