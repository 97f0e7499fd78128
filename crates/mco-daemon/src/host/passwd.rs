//! Owner resolution by name from the root's own `/etc/passwd` and `/etc/group`.
//!
//! The daemon's NSS (or a simulated node's host) must not decide who `core` is: the node's
//! databases do.

use crate::error::{HostError, Result};
use crate::host::fs::HostFs;
use crate::host::paths;

/// Finds field 2 (the id) of the entry named `name` in a colon-separated database.
fn lookup(db: &str, name: &str) -> Option<u32> {
    db.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == name).then_some(())?;
        f.next()?;
        f.next()?.trim().parse().ok()
    })
}

/// The uid of `name` in the root's `/etc/passwd`.
pub fn lookup_uid(fs: &HostFs, name: &str) -> Result<u32> {
    let db = fs.read_optional(paths::PASSWD)?.unwrap_or_default();
    lookup(&String::from_utf8_lossy(&db), name).ok_or_else(|| HostError::UnknownUser(name.into()))
}

/// The gid of `name` in the root's `/etc/group`.
pub fn lookup_gid(fs: &HostFs, name: &str) -> Result<u32> {
    let db = fs.read_optional(paths::GROUP)?.unwrap_or_default();
    lookup(&String::from_utf8_lossy(&db), name).ok_or_else(|| HostError::UnknownGroup(name.into()))
}

/// Ignition's owner rules: an id wins over a name, and an unset owner is root.
pub fn resolve_ownership(
    fs: &HostFs,
    uid: Option<u32>,
    user: Option<&str>,
    gid: Option<u32>,
    group: Option<&str>,
) -> Result<(u32, u32)> {
    let uid = match (uid, user) {
        (Some(id), _) => id,
        (None, Some(name)) if !name.is_empty() => lookup_uid(fs, name)?,
        _ => 0,
    };
    let gid = match (gid, group) {
        (Some(id), _) => id,
        (None, Some(name)) if !name.is_empty() => lookup_gid(fs, name)?,
        _ => 0,
    };
    Ok((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fs::FileAttrs;

    #[test]
    fn resolves_from_the_roots_databases() {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        fs.write_atomic(
            paths::PASSWD,
            b"root:x:0:0:root:/root:/bin/bash\n# c\ncore:x:1000:1000:CoreOS Admin:/var/home/core:/bin/bash\n",
            &FileAttrs::default(),
        )
        .unwrap();
        fs.write_atomic(
            paths::GROUP,
            b"root:x:0:\nwheel:x:10:core\ncore:x:1000:\n",
            &FileAttrs::default(),
        )
        .unwrap();
        assert_eq!(lookup_uid(&fs, "core").unwrap(), 1000);
        assert_eq!(lookup_gid(&fs, "wheel").unwrap(), 10);
        assert_eq!(
            lookup_uid(&fs, "nobody-here").unwrap_err().to_string(),
            "failed to retrieve UserID for username: nobody-here"
        );
        assert_eq!(
            lookup_gid(&fs, "nogroup").unwrap_err().to_string(),
            "failed to retrieve GroupID for group: nogroup"
        );
        assert_eq!(
            resolve_ownership(&fs, None, Some("core"), None, Some("wheel")).unwrap(),
            (1000, 10)
        );
        assert_eq!(
            resolve_ownership(&fs, Some(5), Some("ghost"), None, None).unwrap(),
            (5, 0)
        );
        assert!(resolve_ownership(&fs, None, Some("ghost"), None, None).is_err());
    }

    #[test]
    fn missing_database_is_unknown_user() {
        let t = tempfile::tempdir().unwrap();
        let fs = HostFs::open(t.path()).unwrap();
        assert!(matches!(
            lookup_uid(&fs, "core"),
            Err(HostError::UnknownUser(n)) if n == "core"
        ));
    }
}
