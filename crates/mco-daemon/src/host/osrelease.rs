//! OS identity from os-release, and the one fact that decides whether mco manages the OS.
//!
//! Seed 000: a node whose os-release said `ID="uos"` was not recognised as an ostree host, so
//! first boot skipped the OS and an upgrade months later degraded the cluster. Here identity is
//! for reporting, and for one thing upstream also keeps to its own OS family: installing
//! `extensions` ([`HostOs::is_el`]). Management is decided by `/run/ostree-booted` alone.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::Result;
use crate::host::fs::HostFs;
use crate::host::paths;

/// The fields of os-release that mco reports, plus everything else verbatim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsRelease {
    /// `ID`, e.g. `rhcos`, `uos`.
    pub id: String,
    /// `ID_LIKE`, split on whitespace.
    pub id_like: Vec<String>,
    /// `VARIANT_ID`, e.g. `coreos`.
    pub variant_id: String,
    /// `VERSION_ID`.
    pub version_id: String,
    /// `OSTREE_VERSION`, the deployment's version when the OS ships one.
    pub ostree_version: String,
    /// `PRETTY_NAME`.
    pub pretty_name: String,
    /// Every assignment in the file, unquoted.
    pub fields: BTreeMap<String, String>,
}

/// Which OS family a host reports; for logs, metrics and MCN messages, and whether extensions
/// are installed ([`OsKind::is_el`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsKind {
    /// UnionTech UOS (`ID=uos`), the seed's host.
    Uos,
    /// UOS USwift (`ID=USwift` or `Uswift`).
    USwift,
    /// Red Hat Enterprise Linux CoreOS (`ID=rhcos`).
    Rhcos,
    /// CentOS Stream CoreOS (`ID=scos`).
    Scos,
    /// Fedora CoreOS (`ID=fedora`, `VARIANT_ID=coreos`).
    FedoraCoreos,
    /// Layered RHCOS/SCOS reporting the base distro (`ID=rhel|centos`, `VARIANT_ID=coreos`).
    ElCoreos,
    /// Traditional RHEL (`ID=rhel` without the coreos variant).
    Rhel,
    /// Anything else.
    Unknown,
}

impl OsKind {
    /// Stable name for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            OsKind::Uos => "uos",
            OsKind::USwift => "uswift",
            OsKind::Rhcos => "rhcos",
            OsKind::Scos => "scos",
            OsKind::FedoraCoreos => "fedora-coreos",
            OsKind::ElCoreos => "el-coreos",
            OsKind::Rhel => "rhel",
            OsKind::Unknown => "unknown",
        }
    }
}

impl OsKind {
    /// RHCOS, SCOS, or a layered EL CoreOS: see [`HostOs::is_el`].
    pub fn is_el(self) -> bool {
        matches!(self, OsKind::Rhcos | OsKind::Scos | OsKind::ElCoreos)
    }
}

impl fmt::Display for OsKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl OsRelease {
    /// Parses os-release text (shell-style assignments); malformed lines are skipped, as
    /// systemd does, so one odd vendor line cannot hide the ID.
    pub fn parse(text: &str) -> OsRelease {
        let mut fields = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, raw)) = line.split_once('=') else {
                continue;
            };
            let key = key.trim();
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(value) = unquote(raw.trim()) {
                fields.insert(key.to_string(), value);
            }
        }
        let get = |k: &str| fields.get(k).cloned().unwrap_or_default();
        OsRelease {
            id: get("ID"),
            id_like: get("ID_LIKE")
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            variant_id: get("VARIANT_ID"),
            version_id: get("VERSION_ID"),
            ostree_version: get("OSTREE_VERSION"),
            pretty_name: get("PRETTY_NAME"),
            fields,
        }
    }

    /// Reads `/etc/os-release`, falling back to `/usr/lib/os-release`, under the root.
    /// A host with neither yields an empty identity rather than an error: identity only feeds
    /// reporting, and must never stop the daemon from managing an ostree host.
    pub fn load(fs: &HostFs) -> Result<OsRelease> {
        for path in [paths::OS_RELEASE, paths::OS_RELEASE_FALLBACK] {
            if let Some(bytes) = fs.read_optional(path)? {
                return Ok(OsRelease::parse(&String::from_utf8_lossy(&bytes)));
            }
        }
        Ok(OsRelease::default())
    }

    /// Classifies the identity.
    pub fn kind(&self) -> OsKind {
        let coreos = self.variant_id == "coreos";
        match self.id.as_str() {
            "uos" => OsKind::Uos,
            "USwift" | "Uswift" | "uswift" => OsKind::USwift,
            "rhcos" => OsKind::Rhcos,
            "scos" => OsKind::Scos,
            "fedora" if coreos => OsKind::FedoraCoreos,
            "rhel" | "centos" if coreos => OsKind::ElCoreos,
            "rhel" => OsKind::Rhel,
            _ => OsKind::Unknown,
        }
    }

    /// The version to report: `OSTREE_VERSION` when present, else `VERSION_ID`.
    pub fn display_version(&self) -> &str {
        if self.ostree_version.is_empty() {
            &self.version_id
        } else {
            &self.ostree_version
        }
    }

    /// Upstream's metrics label: the uppercased ID.
    pub fn metrics_label(&self) -> String {
        self.id.to_uppercase()
    }
}

/// Undoes shell quoting of one os-release value: `"..."` (with `\` escapes for `"`, `\`, `$`,
/// `` ` ``), `'...'` (literal), and unquoted text (with `\` escapes). Adjacent pieces
/// concatenate like in the shell. Returns `None` for an unterminated quote.
fn unquote(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => match chars.next()? {
                        e @ ('"' | '\\' | '$' | '`') => out.push(e),
                        '\n' => {}
                        other => {
                            out.push('\\');
                            out.push(other);
                        }
                    },
                    other => out.push(other),
                }
            },
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    other => out.push(other),
                }
            },
            '\\' => out.push(chars.next()?),
            c if c.is_whitespace() => break,
            other => out.push(other),
        }
    }
    Some(out)
}

/// What the daemon knows about the host OS at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOs {
    /// os-release identity, for reporting.
    pub identity: OsRelease,
    /// `<root>/run/ostree-booted` exists: the OS is managed, whatever the ID says.
    pub ostree_booted: bool,
}

impl HostOs {
    /// Reads identity and the ostree marker under the root.
    pub fn detect(fs: &HostFs) -> Result<HostOs> {
        Ok(HostOs {
            identity: OsRelease::load(fs)?,
            ostree_booted: fs.exists(paths::OSTREE_BOOTED)?,
        })
    }

    /// Whether mco updates the OS (rebase, kernel arguments, kernel type) on this host.
    pub fn is_managed_ostree(&self) -> bool {
        self.ostree_booted
    }

    /// Classification of the identity, for reporting.
    pub fn kind(&self) -> OsKind {
        self.identity.kind()
    }

    /// Whether the host is an "EL" CoreOS, as upstream's `IsEL`: RHCOS, SCOS, or either
    /// reporting its base distro (`rhel`/`centos` with `VARIANT_ID=coreos`). The one decision
    /// identity makes: extensions are installed (and verified) on EL hosts only, as upstream's
    /// daemon does; on any other host (Fedora CoreOS, UOS, USwift, unknown) a config's
    /// `extensions` change nothing.
    pub fn is_el(&self) -> bool {
        self.kind().is_el()
    }

    /// One line for logs and MCN messages, e.g. `uos 20.20230625.uccps.0 (UOS Server 20), ostree`.
    pub fn describe(&self) -> String {
        let name = if self.identity.pretty_name.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.identity.pretty_name)
        };
        let id = if self.identity.id.is_empty() {
            "unknown"
        } else {
            &self.identity.id
        };
        let ostree = if self.ostree_booted {
            "ostree"
        } else {
            "not ostree"
        };
        format!("{id} {}{name}, {ostree}", self.identity.display_version())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_styles() {
        let r = OsRelease::parse(
            "ID=\"uos\"\nVERSION_ID=20\nOSTREE_VERSION='20.20230625.uccps.0'\n\
             PRETTY_NAME=\"Say \\\"hi\\\" \\$HOME \\\\ ok\"\nNAME=Fedora\\ Linux\n# comment\n\n\
             VARIANT_ID=\"core\"'os'\nBROKEN=\"unterminated\n",
        );
        assert_eq!(r.id, "uos");
        assert_eq!(r.version_id, "20");
        assert_eq!(r.ostree_version, "20.20230625.uccps.0");
        assert_eq!(r.pretty_name, "Say \"hi\" $HOME \\ ok");
        assert_eq!(r.fields["NAME"], "Fedora Linux");
        assert_eq!(r.variant_id, "coreos");
        assert!(!r.fields.contains_key("BROKEN"));
    }

    #[test]
    fn id_like_is_split() {
        let r = OsRelease::parse("ID=scos\nID_LIKE=\"rhel fedora\"\n");
        assert_eq!(r.id_like, vec!["rhel", "fedora"]);
    }

    #[test]
    fn classification() {
        let k = |s: &str| OsRelease::parse(s).kind();
        assert_eq!(k("ID=uos"), OsKind::Uos);
        assert_eq!(k("ID=USwift"), OsKind::USwift);
        assert_eq!(k("ID=Uswift"), OsKind::USwift);
        assert_eq!(k("ID=rhcos"), OsKind::Rhcos);
        assert_eq!(k("ID=scos"), OsKind::Scos);
        assert_eq!(k("ID=fedora\nVARIANT_ID=coreos"), OsKind::FedoraCoreos);
        assert_eq!(k("ID=fedora\nVARIANT_ID=workstation"), OsKind::Unknown);
        assert_eq!(k("ID=rhel\nVARIANT_ID=coreos"), OsKind::ElCoreos);
        assert_eq!(k("ID=centos\nVARIANT_ID=coreos"), OsKind::ElCoreos);
        assert_eq!(k("ID=rhel"), OsKind::Rhel);
        assert_eq!(k("ID=debian"), OsKind::Unknown);
        let el: Vec<OsKind> = [
            OsKind::Uos,
            OsKind::USwift,
            OsKind::Rhcos,
            OsKind::Scos,
            OsKind::FedoraCoreos,
            OsKind::ElCoreos,
            OsKind::Rhel,
            OsKind::Unknown,
        ]
        .into_iter()
        .filter(|k| k.is_el())
        .collect();
        assert_eq!(el, vec![OsKind::Rhcos, OsKind::Scos, OsKind::ElCoreos]);
    }

    #[test]
    fn version_prefers_ostree_version() {
        let r = OsRelease::parse("VERSION_ID=20\nOSTREE_VERSION=20.1");
        assert_eq!(r.display_version(), "20.1");
        let r = OsRelease::parse("VERSION_ID=9.4");
        assert_eq!(r.display_version(), "9.4");
        assert_eq!(OsRelease::parse("ID=rhcos").metrics_label(), "RHCOS");
    }
}
