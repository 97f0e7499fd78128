//! What a running node will never get of its target config: how the storage sections no update
//! applies (disks, filesystems, LUKS, RAID) differ between the config the machine was
//! provisioned with and the target. Upstream's daemon reports this in its MachineConfigNode's
//! `status.irreconcilableChanges` once an administrator lets such changes through
//! (`MachineConfiguration.spec.irreconcilableValidationOverrides`), so that the nodes that differ
//! from a newly provisioned one can be found and replaced.
//!
//! Each entry names the innermost field that differs (`spec.config.storage.filesystems[0].format`)
//! and the two values as compact JSON, `- ` the provisioned one and `+ ` the target's, one per
//! line. The entries fit upstream `v1`'s schema: at most [`MAX_ENTRIES`], a field path of at most
//! [`MAX_PATH`] characters from letters, digits, dots and brackets, a diff of at most
//! [`MAX_DIFF`] characters. A path that would not fit is reported at its parent; more entries
//! than fit are reported one per storage section; a longer diff is cut, saying so.
//!
//! Absent and empty lists compare equal, as in the reconcilability check.

use mco_api::IrreconcilableChangeDiff;
use serde_json::Value;

use crate::diff::storage;
use crate::ignition::Ignition;

/// Upstream `v1`'s most entries.
pub const MAX_ENTRIES: usize = 32;
/// Upstream `v1`'s longest field path.
pub const MAX_PATH: usize = 70;
/// Upstream `v1`'s longest diff.
pub const MAX_DIFF: usize = 4096;

/// The sections compared, in the order their keys sort (upstream's diff walks keys sorted).
const SECTIONS: [&str; 4] = ["disks", "filesystems", "luks", "raid"];
const ROOT: &str = "spec.config.storage";
const CUT: &str = "\n… (cut to fit)";

/// The differences between `provisioned` and `target` in the sections a node never applies,
/// in path order; empty when there are none.
pub fn report(provisioned: &Ignition, target: &Ignition) -> Vec<IrreconcilableChangeDiff> {
    let (a, b) = (sections(provisioned), sections(target));
    let mut out = vec![];
    for (name, (x, y)) in SECTIONS.iter().zip(a.iter().zip(&b)) {
        walk(&format!("{ROOT}.{name}"), x.as_ref(), y.as_ref(), &mut out);
    }
    if out.len() > MAX_ENTRIES {
        // Too fine to fit: one entry per section that differs, each its whole lists.
        out = SECTIONS
            .iter()
            .zip(a.iter().zip(&b))
            .filter(|(_, (x, y))| x != y)
            .map(|(name, (x, y))| entry(format!("{ROOT}.{name}"), x.as_ref(), y.as_ref()))
            .collect();
    }
    out
}

/// Each section as JSON, `None` when absent or empty.
fn sections(cfg: &Ignition) -> [Option<Value>; 4] {
    fn json<T: serde::Serialize>(list: Option<&[T]>) -> Option<Value> {
        list.filter(|l| !l.is_empty())
            .and_then(|l| serde_json::to_value(l).ok())
    }
    [
        json(storage(cfg, |s| &s.disks)),
        json(storage(cfg, |s| &s.filesystems)),
        json(storage(cfg, |s| &s.luks)),
        json(storage(cfg, |s| &s.raid)),
    ]
}

fn walk(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<IrreconcilableChangeDiff>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            let children: Vec<String> = keys.iter().map(|k| format!("{path}.{k}")).collect();
            if children.iter().all(|c| fits(c)) {
                for (k, c) in keys.iter().zip(&children) {
                    walk(c, x.get(*k), y.get(*k), out);
                }
                return;
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            let n = x.len().max(y.len());
            if fits(&format!("{path}[{}]", n.saturating_sub(1))) {
                for i in 0..n {
                    walk(&format!("{path}[{i}]"), x.get(i), y.get(i), out);
                }
                return;
            }
        }
        _ => {}
    }
    out.push(entry(path.to_string(), a, b));
}

/// Whether `path` is a field path upstream's schema accepts.
fn fits(path: &str) -> bool {
    path.len() <= MAX_PATH
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']'))
}

fn entry(field_path: String, a: Option<&Value>, b: Option<&Value>) -> IrreconcilableChangeDiff {
    let mut diff = String::new();
    for (sign, v) in [("-", a), ("+", b)] {
        if let Some(v) = v {
            diff.push_str(&format!("{sign} {v}\n"));
        }
    }
    if diff.chars().count() > MAX_DIFF {
        let keep = MAX_DIFF - CUT.chars().count();
        diff = diff.chars().take(keep).collect::<String>() + CUT;
    }
    IrreconcilableChangeDiff { field_path, diff }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ign(storage: Value) -> Ignition {
        crate::ignition::parse(&json!({"ignition": {"version": "3.2.0"}, "storage": storage}))
            .unwrap()
    }

    fn paths(r: &[IrreconcilableChangeDiff]) -> Vec<&str> {
        r.iter().map(|d| d.field_path.as_str()).collect()
    }

    #[test]
    fn nothing_differs_and_files_are_not_looked_at() {
        let a = ign(json!({"files": [{"path": "/etc/a", "contents": {"source": "data:,a"}}]}));
        let b = ign(
            json!({"files": [{"path": "/etc/a", "contents": {"source": "data:,b"}}],
                           "disks": []}),
        );
        assert!(
            report(&a, &b).is_empty(),
            "files and an empty list are not reported"
        );
    }

    #[test]
    fn an_added_section_is_one_entry_with_the_whole_list() {
        let a = ign(json!({}));
        let b = ign(json!({"disks": [{"device": "/dev/vdb", "wipeTable": true}]}));
        let r = report(&a, &b);
        assert_eq!(paths(&r), ["spec.config.storage.disks"]);
        assert_eq!(
            r[0].diff,
            "+ [{\"device\":\"/dev/vdb\",\"wipeTable\":true}]\n"
        );
        // And the other way round: what the machine has and the target no longer does.
        assert_eq!(
            report(&b, &a)[0].diff,
            "- [{\"device\":\"/dev/vdb\",\"wipeTable\":true}]\n"
        );
    }

    #[test]
    fn a_changed_field_is_reported_where_it_differs() {
        let fs = |format: &str| {
            json!({"filesystems": [{"device": "/dev/vdb1", "format": format, "path": "/var"}],
                   "raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/a", "/dev/b"]}]})
        };
        let r = report(&ign(fs("xfs")), &ign(fs("ext4")));
        assert_eq!(paths(&r), ["spec.config.storage.filesystems[0].format"]);
        assert_eq!(r[0].diff, "- \"xfs\"\n+ \"ext4\"\n");

        // A second element is its own entry; every path fits upstream's pattern.
        let a = ign(json!({"filesystems": [{"device": "/dev/vdb1", "format": "xfs"}]}));
        let b = ign(
            json!({"filesystems": [{"device": "/dev/vdb1", "format": "xfs"},
                                           {"device": "/dev/vdc1", "format": "xfs"}]}),
        );
        let r = report(&a, &b);
        assert_eq!(paths(&r), ["spec.config.storage.filesystems[1]"]);
        assert!(r[0].diff.starts_with("+ {"), "{}", r[0].diff);
        assert!(r.iter().all(|d| fits(&d.field_path)));
    }

    #[test]
    fn more_entries_than_fit_become_one_per_section() {
        let disks = |size: u64| {
            json!({"disks": (0..40).map(|i| json!({"device": format!("/dev/vd{i}"),
                    "partitions": [{"label": "p", "sizeMiB": size}]})).collect::<Vec<_>>(),
                   "luks": [{"name": "root", "device": "/dev/vd0"}]})
        };
        let r = report(&ign(disks(1)), &ign(disks(2)));
        assert_eq!(
            paths(&r),
            ["spec.config.storage.disks"],
            "luks is unchanged"
        );

        let many = |size: u64| {
            let mut v = disks(size);
            v["luks"][0]["device"] = json!(format!("/dev/vd{size}"));
            v
        };
        let r = report(&ign(many(1)), &ign(many(2)));
        assert_eq!(
            paths(&r),
            ["spec.config.storage.disks", "spec.config.storage.luks"]
        );
        assert!(r.len() <= MAX_ENTRIES);
    }

    #[test]
    fn the_limits_are_upstreams_and_a_long_diff_is_cut() {
        // One entry per disk: 33 is the coarse report, exactly 32 is not.
        let at = |n: usize, size: u64| {
            json!({"disks": (0..n).map(|i| json!({"device": format!("/dev/vd{i}"),
                    "partitions": [{"label": "p", "sizeMiB": size}]})).collect::<Vec<_>>()})
        };
        assert_eq!(report(&ign(at(32, 1)), &ign(at(32, 2))).len(), MAX_ENTRIES);
        assert_eq!(report(&ign(at(33, 1)), &ign(at(33, 2))).len(), 1);

        let big = |c: &str| {
            json!({"disks": [{"device": "/dev/vdb", "partitions":
            (0..200).map(|i| json!({"label": format!("{c}{i:0>30}")})).collect::<Vec<_>>()}]})
        };
        let r = report(&ign(json!({})), &ign(big("x")));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].diff.chars().count(), MAX_DIFF);
        assert!(r[0].diff.ends_with(CUT));
    }

    #[test]
    fn a_path_that_would_not_fit_is_reported_at_its_parent() {
        assert!(fits("spec.config.storage.disks[0].partitions[1].sizeMiB"));
        assert!(!fits(&format!("spec.config.storage.{}", "a".repeat(60))));
        assert!(!fits("spec.config.storage.disks[0].we-ird"));
        // 69 characters: its child `.k` would be 71.
        let deep = format!("{ROOT}.{}", "x".repeat(49));
        let mut out = vec![];
        walk(
            &deep,
            Some(&json!({"k": null})),
            Some(&json!({"k": 1})),
            &mut out,
        );
        assert_eq!(paths(&out), [deep.as_str()]);
        assert_eq!(out[0].diff, "- {\"k\":null}\n+ {\"k\":1}\n");
    }
}
