//! The User-Agent every mco kube client sends, in client-go's form
//! (`<component>/<version> (<os>/<arch>) mco/<version>`). kube-apiserver names the field manager
//! of a write without `fieldManager` after the User-Agent up to its first `/`, and its audit log
//! records the whole header: both then name the component, as they name upstream's.

/// The controller (upstream's binary of the same name).
pub const CONTROLLER: &str = "machine-config-controller";
/// The node daemon, also each simulated node's daemon in `mco up`.
pub const DAEMON: &str = "machine-config-daemon";
/// The machine config server.
pub const SERVER: &str = "machine-config-server";
/// The `mco` command line: status, doctor, rollout, the dashboard.
pub const CLI: &str = "mco";
/// `mco up`'s own simulation: the installer, the simulated kubelet and workloads.
pub const SIM: &str = "mco-sim";
/// The benchmarks.
pub const BENCH: &str = "mco-bench";

/// `component`'s User-Agent, as client-go builds it
/// (`<command>/<gitVersion> (<GOOS>/<GOARCH>) kubernetes/<gitCommit>`), with mco's version.
pub fn for_component(component: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    format!(
        "{component}/v{version} ({}/{}) mco/v{version}",
        go_os(std::env::consts::OS),
        go_arch(std::env::consts::ARCH)
    )
}

/// The `User-Agent` header of [`for_component`], for `kube::Config::headers` or a request.
pub fn header(component: &str) -> (http::HeaderName, http::HeaderValue) {
    let value = http::HeaderValue::from_str(&for_component(component))
        .expect("a component name, a version and Rust's OS and arch names are visible ASCII");
    (http::header::USER_AGENT, value)
}

/// Go's `GOOS` for Rust's `std::env::consts::OS`.
fn go_os(os: &str) -> &str {
    match os {
        "macos" => "darwin",
        other => other,
    }
}

/// Go's `GOARCH` for Rust's `std::env::consts::ARCH`.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_go_form_with_go_platform_names() {
        let version = env!("CARGO_PKG_VERSION");
        let platform = match (std::env::consts::OS, std::env::consts::ARCH) {
            ("linux", "x86_64") => "linux/amd64".to_string(),
            ("linux", "aarch64") => "linux/arm64".to_string(),
            (os, arch) => format!("{}/{}", go_os(os), go_arch(arch)),
        };
        assert_eq!(
            for_component(CONTROLLER),
            format!("machine-config-controller/v{version} ({platform}) mco/v{version}")
        );
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("s390x"), "s390x");
        assert_eq!(go_os("macos"), "darwin");
        assert_eq!(go_os("linux"), "linux");
    }

    #[test]
    fn the_manager_kube_apiserver_derives_is_the_component() {
        for c in [CONTROLLER, DAEMON, SERVER, CLI, SIM, BENCH] {
            let (name, value) = header(c);
            assert_eq!(name, http::header::USER_AGENT);
            let ua = value.to_str().unwrap();
            assert_eq!(mco_apimachinery::apply::manager_from_user_agent(ua), c);
        }
    }
}
