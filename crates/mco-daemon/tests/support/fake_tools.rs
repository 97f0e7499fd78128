//! Fake host tools: shell scripts that log their argv and answer from files. Shared by the unit
//! tests (through `#[path]` in `src/host/cmd.rs`) and the integration tests (through `support`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Writes an executable script named `name` into `dir`. The script appends one line per
/// call to `<dir>/<name>.log`: its arguments separated by `\x1f`, so an argument with a
/// space stays recognisable as one argument.
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

/// The recorded calls of a fake tool, each as its argv (without the program).
pub fn calls(dir: &Path, name: &str) -> Vec<Vec<String>> {
    let log = dir.join(format!("{name}.log"));
    std::fs::read_to_string(log)
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

/// `["a", "b"]` as owned strings.
pub fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}
