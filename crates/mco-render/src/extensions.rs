//! MachineConfig `extensions`: the OS packages each one stands for (upstream's
//! `SupportedExtensions`), and the pure decisions the daemon takes with them — which
//! `rpm-ostree update --install/--uninstall` arguments move a deployment's layered packages to
//! a config's extensions, and whether a deployment holds them. Messages are upstream's.

/// Upstream's supported extensions (`SupportedExtensions`), each with the packages it installs.
/// The one list: validation ([`is_supported`]) and the daemon both read it.
pub const SUPPORTED_EXTENSIONS: &[(&str, &[&str])] = &[
    ("two-node-ha", &["pacemaker", "pcs", "fence-agents-all"]),
    (
        "ipsec",
        &[
            "NetworkManager-libreswan",
            "libreswan",
            "openvswitch3.5-ipsec",
        ],
    ),
    ("usbguard", &["usbguard"]),
    ("kerberos", &["krb5-workstation", "libkadm5"]),
    ("kernel-devel", &["kernel-devel", "kernel-headers"]),
    ("sandboxed-containers", &["kata-containers"]),
    ("sysstat", &["sysstat"]),
];

/// Package sets extensions had in older releases (upstream's `LegacyExtensionPackages`): a node
/// still on an older OS image holds these, and verification accepts them.
pub const LEGACY_EXTENSION_PACKAGES: &[(&str, &[&str])] = &[
    // ipsec had only the libreswan packages in 4.x releases.
    ("ipsec", &["NetworkManager-libreswan", "libreswan"]),
];

/// The packages of `extension`, `None` when it is not supported.
pub fn packages_of(extension: &str) -> Option<&'static [&'static str]> {
    SUPPORTED_EXTENSIONS
        .iter()
        .find(|(name, _)| *name == extension)
        .map(|(_, pkgs)| *pkgs)
}

/// Whether `extension` is one upstream supports.
pub fn is_supported(extension: &str) -> bool {
    packages_of(extension).is_some()
}

/// The supported extensions' names, in upstream's order.
pub fn names() -> impl Iterator<Item = &'static str> {
    SUPPORTED_EXTENSIONS.iter().map(|(name, _)| *name)
}

/// The packages of `extensions`, in their order (upstream's `GetPackagesForSupportedExtensions`;
/// unsupported names, which rendering refuses, contribute nothing).
pub fn packages_for(extensions: &[String]) -> Vec<&'static str> {
    extensions
        .iter()
        .filter_map(|e| packages_of(e))
        .flatten()
        .copied()
        .collect()
}

/// Every package set that counts as `extension` installed: the current one, then the legacy one
/// (upstream's `GetAllValidPackageSetsForExtension`).
pub fn valid_package_sets(extension: &str) -> Vec<&'static [&'static str]> {
    let current = packages_of(extension);
    let legacy = LEGACY_EXTENSION_PACKAGES
        .iter()
        .find(|(name, _)| *name == extension)
        .map(|(_, pkgs)| *pkgs);
    current.into_iter().chain(legacy).collect()
}

/// The `rpm-ostree update` arguments that take a deployment whose layered packages are
/// `installed` to the packages of `extensions` (upstream's `generateExtensionsArgs`):
/// `--install P` for each required package not installed, then `--uninstall Q` for each
/// installed package some extension manages but none of `extensions` requires, each group
/// sorted. Packages no extension manages (a kernel override's, an admin's) are left alone.
/// Empty when nothing is to be done.
pub fn extension_args(installed: &[String], extensions: &[String]) -> Vec<String> {
    use std::collections::BTreeSet;
    let installed: BTreeSet<&str> = installed.iter().map(String::as_str).collect();
    let required: BTreeSet<&str> = packages_for(extensions).into_iter().collect();
    let managed: BTreeSet<&str> = SUPPORTED_EXTENSIONS
        .iter()
        .flat_map(|(_, pkgs)| pkgs.iter().copied())
        .collect();
    let mut args = Vec::new();
    for p in required.difference(&installed) {
        args.push("--install".to_string());
        args.push(p.to_string());
    }
    for p in installed
        .iter()
        .filter(|p| managed.contains(*p) && !required.contains(*p))
    {
        args.push("--uninstall".to_string());
        args.push(p.to_string());
    }
    args
}

/// Go's `%v` of a string slice: `[a b c]`.
fn go_list<S: AsRef<str>>(items: &[S]) -> String {
    let joined: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("[{}]", joined.join(" "))
}

/// Checks that a staged deployment requests every package of `extensions` (upstream's
/// `verifyExtensionsStaged`), with upstream's message naming those it lacks.
pub fn verify_staged(staged_requested: &[String], extensions: &[String]) -> Result<(), String> {
    let missing: Vec<&str> = packages_for(extensions)
        .into_iter()
        .filter(|p| !staged_requested.iter().any(|r| r == p))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the following extension packages are missing from the staged deployment: {}",
            go_list(&missing)
        ))
    }
}

/// Checks that every extension of `extensions` is installed, by any of its valid package sets
/// (upstream's `verifyExtensionPackages`, which asks `rpm -q`; the caller passes the packages it
/// knows to be installed). The message is upstream's.
pub fn verify_installed(installed: &[String], extensions: &[String]) -> Result<(), String> {
    for ext in extensions {
        let sets = valid_package_sets(ext);
        if sets.is_empty() {
            return Err(format!(
                "extension {ext:?} has no valid package sets defined"
            ));
        }
        let missing_per_set: Vec<Vec<&str>> = sets
            .iter()
            .map(|set| {
                set.iter()
                    .copied()
                    .filter(|p| !installed.iter().any(|i| i == p))
                    .collect()
            })
            .collect();
        if !missing_per_set.iter().any(Vec::is_empty) {
            let shown: Vec<String> = missing_per_set.iter().map(|m| go_list(m)).collect();
            return Err(format!(
                "extension {ext:?} verification failed: no valid package set is fully installed. Tried {} package set(s), missing packages per set: {}",
                sets.len(),
                go_list(&shown)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn names_come_from_the_map() {
        assert_eq!(
            names().collect::<Vec<_>>(),
            vec![
                "two-node-ha",
                "ipsec",
                "usbguard",
                "kerberos",
                "kernel-devel",
                "sandboxed-containers",
                "sysstat"
            ]
        );
        assert!(is_supported("usbguard"));
        assert!(!is_supported("bogus"));
        assert_eq!(
            packages_for(&s(&["kerberos", "bogus", "usbguard"])),
            vec!["krb5-workstation", "libkadm5", "usbguard"]
        );
    }

    #[test]
    fn installs_what_is_required_and_missing_sorted() {
        assert_eq!(
            extension_args(&[], &s(&["usbguard", "kernel-devel"])),
            s(&[
                "--install",
                "kernel-devel",
                "--install",
                "kernel-headers",
                "--install",
                "usbguard"
            ])
        );
        // Already installed: only the missing one.
        assert_eq!(
            extension_args(&s(&["usbguard"]), &s(&["usbguard", "sysstat"])),
            s(&["--install", "sysstat"])
        );
    }

    #[test]
    fn uninstalls_only_managed_packages_no_longer_required() {
        let installed = s(&[
            "usbguard",
            "kernel-rt-core",
            "sysstat",
            "vim-enhanced",
            "krb5-workstation",
        ]);
        assert_eq!(
            extension_args(&installed, &s(&["sysstat"])),
            s(&["--uninstall", "krb5-workstation", "--uninstall", "usbguard"])
        );
        // Both directions in one transaction, installs first.
        assert_eq!(
            extension_args(&s(&["usbguard"]), &s(&["sysstat"])),
            s(&["--install", "sysstat", "--uninstall", "usbguard"])
        );
    }

    #[test]
    fn nothing_to_do() {
        assert!(extension_args(&[], &[]).is_empty());
        assert!(extension_args(&s(&["usbguard", "kernel-rt-core"]), &s(&["usbguard"])).is_empty());
    }

    #[test]
    fn the_legacy_ipsec_set_is_upgraded_and_verifies() {
        let legacy = s(&["NetworkManager-libreswan", "libreswan"]);
        assert_eq!(
            extension_args(&legacy, &s(&["ipsec"])),
            s(&["--install", "openvswitch3.5-ipsec"])
        );
        assert_eq!(verify_installed(&legacy, &s(&["ipsec"])), Ok(()));
        assert_eq!(
            valid_package_sets("ipsec"),
            vec![
                &[
                    "NetworkManager-libreswan",
                    "libreswan",
                    "openvswitch3.5-ipsec"
                ][..],
                &["NetworkManager-libreswan", "libreswan"][..]
            ]
        );
        assert_eq!(
            verify_installed(&s(&["libreswan"]), &s(&["ipsec"])).unwrap_err(),
            "extension \"ipsec\" verification failed: no valid package set is fully installed. Tried 2 package set(s), missing packages per set: [[NetworkManager-libreswan openvswitch3.5-ipsec] [NetworkManager-libreswan]]"
        );
    }

    #[test]
    fn installed_check_in_upstreams_words() {
        assert_eq!(verify_installed(&[], &[]), Ok(()));
        assert_eq!(
            verify_installed(&s(&["usbguard"]), &s(&["usbguard"])),
            Ok(())
        );
        assert_eq!(
            verify_installed(&s(&["kernel-devel"]), &s(&["usbguard", "kernel-devel"])).unwrap_err(),
            "extension \"usbguard\" verification failed: no valid package set is fully installed. Tried 1 package set(s), missing packages per set: [[usbguard]]"
        );
        assert_eq!(
            verify_installed(&[], &s(&["bogus"])).unwrap_err(),
            "extension \"bogus\" has no valid package sets defined"
        );
    }

    #[test]
    fn staged_check_names_the_missing_packages() {
        assert_eq!(
            verify_staged(&s(&["usbguard", "sysstat"]), &s(&["usbguard"])),
            Ok(())
        );
        assert_eq!(verify_staged(&[], &[]), Ok(()));
        assert_eq!(
            verify_staged(&s(&["kernel-devel"]), &s(&["kernel-devel", "usbguard"])).unwrap_err(),
            "the following extension packages are missing from the staged deployment: [kernel-headers usbguard]"
        );
    }
}
