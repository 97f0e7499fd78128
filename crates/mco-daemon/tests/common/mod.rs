//! Shared test helpers: fixtures and fake host tools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Path of a fixture under `tests/fixtures`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Text of a fixture under `tests/fixtures`.
pub fn fixture(rel: &str) -> String {
    std::fs::read_to_string(fixture_path(rel)).unwrap()
}

/// Writes an executable script `name` into `dir` that appends its argv (separated by `\x1f`, so
/// an argument with spaces stays one) as one line to `<dir>/<name>.log`, then runs `body`.
pub fn fake_tool(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let log = dir.join(format!("{name}.log"));
    let script = format!(
        "#!/bin/sh\n{{ first=1; for a in \"$@\"; do if [ $first = 1 ]; then first=0; else printf '\\037'; fi; printf '%s' \"$a\"; done; printf '\\n'; }} >> '{}'\n{body}\n",
        log.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The recorded argv of every call to a fake tool.
pub fn calls(dir: &Path, name: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            if l.is_empty() {
                Vec::new()
            } else {
                l.split('\x1f').map(str::to_string).collect()
            }
        })
        .collect()
}

/// Owned argv.
pub fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}
