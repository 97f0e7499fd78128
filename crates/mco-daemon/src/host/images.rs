//! Container images on the node, for PinnedImageSets: pulled through the node's container
//! runtime so that CRI-O holds them where its pods find them.
//!
//! [`Crictl`] is the one thin module around `crictl`, against CRI-O's socket. A pull goes
//! through CRI-O, which authenticates with its own `global_auth_file` (the cluster pull secret
//! on OpenShift), so no credential is ever put on a command line; a pull whose caller stops
//! is killed, which ends CRI-O's pull as upstream's cancelled context does. [`SimImages`] keeps a
//! simulated node's images as files under its root, and plays a registry that serves every
//! image except those on a host under `.invalid` (RFC 2606's name that never resolves), so
//! tests can ask for a failing pull.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::error::{HostError, Result};
use crate::host::cmd::CommandRunner;
use crate::host::fs::{FileAttrs, HostFs};

/// CRI-O's socket, as crictl addresses it.
pub const CRIO_ENDPOINT: &str = "unix:///var/run/crio/crio.sock";
/// Longest one pull may take before it is killed and counted as failed.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(300);
/// Output kept from one crictl run.
const MAX_OUTPUT: usize = 64 * 1024;
/// Where a simulated node keeps its images.
pub const SIM_IMAGE_DIR: &str = "/var/lib/mco-sim/images";

/// The node's container image store. A pull does not ask first whether the image is there:
/// its caller ([`crate::engine::Engine::pinned_held`]) asked once for every image, and pulls
/// only those it found absent. Both are called from several threads at once.
pub trait ContainerImages: Send + Sync {
    /// Pulls `image` (a reference by digest). Once `stop` is set a pull in progress is given up
    /// within about a second and returns an error; what it had fetched is CRI-O's to keep or
    /// drop.
    fn pull(&self, image: &str, stop: &AtomicBool) -> Result<()>;
    /// Whether `image` is present. Once `stop` is set a question in progress is given up
    /// within about a second and returns an error, as a pull is.
    fn present(&self, image: &str, stop: &AtomicBool) -> Result<bool>;
}

/// `crictl`, run in the host's root.
pub struct Crictl {
    program: PathBuf,
    runner: CommandRunner,
    timeout: Duration,
}

impl Crictl {
    /// `crictl` from `PATH`, run through `runner` (see [`CommandRunner::in_root`]).
    pub fn new(runner: CommandRunner) -> Crictl {
        Crictl {
            program: PathBuf::from("crictl"),
            runner,
            timeout: PULL_TIMEOUT,
        }
    }

    /// A specific executable, run directly (tests pass a fake).
    pub fn with_program(program: impl Into<PathBuf>) -> Crictl {
        Crictl {
            program: program.into(),
            runner: CommandRunner::direct(),
            timeout: PULL_TIMEOUT,
        }
    }

    /// Replaces the pull timeout.
    pub fn timeout(mut self, timeout: Duration) -> Crictl {
        self.timeout = timeout;
        self
    }

    fn args(verb: &[&str], image: &str) -> Vec<String> {
        let mut args = vec!["--image-endpoint".to_string(), CRIO_ENDPOINT.to_string()];
        args.extend(verb.iter().map(|s| s.to_string()));
        args.push(image.to_string());
        args
    }
}

/// What `crictl inspecti -o json` printed: the image's id, when it names one.
pub fn parse_inspecti(stdout: &str) -> Result<Option<String>> {
    let v: serde_json::Value = serde_json::from_str(stdout).map_err(|source| HostError::Json {
        what: "crictl inspecti output".into(),
        source,
    })?;
    Ok(v["status"]["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_string))
}

impl ContainerImages for Crictl {
    /// `crictl pull`, killed past the timeout or once `stop` is set.
    fn pull(&self, image: &str, stop: &AtomicBool) -> Result<()> {
        self.runner
            .run_cancellable(
                &self.program,
                &Crictl::args(&["pull"], image),
                self.timeout,
                MAX_OUTPUT,
                stop,
            )
            .map(drop)
    }

    /// `crictl inspecti`, killed past the timeout or once `stop` is set.
    fn present(&self, image: &str, stop: &AtomicBool) -> Result<bool> {
        let args = Crictl::args(&["inspecti", "-o", "json"], image);
        match self
            .runner
            .run_cancellable(&self.program, &args, self.timeout, MAX_OUTPUT, stop)
        {
            Ok(out) => Ok(parse_inspecti(&out.stdout)?.is_some()),
            // crictl's answer for an image CRI-O does not hold.
            Err(HostError::Command { stderr, .. }) if stderr.contains("no such image") => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A simulated node's images: one file per image under [`SIM_IMAGE_DIR`].
pub struct SimImages {
    fs: HostFs,
}

impl SimImages {
    pub fn new(fs: HostFs) -> SimImages {
        SimImages { fs }
    }

    /// The file that stands for `image`: the reference with every character a file name
    /// cannot hold replaced, its last 200 characters (the digest is at the end).
    fn path(image: &str) -> String {
        let safe: Vec<char> = image
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let tail: String = safe[safe.len().saturating_sub(200)..].iter().collect();
        format!("{SIM_IMAGE_DIR}/{tail}")
    }

    /// The images this node holds, by file.
    pub fn held(&self) -> Result<Vec<String>> {
        let mut out = vec![];
        for entry in self.fs.list_dir(SIM_IMAGE_DIR)? {
            if let Some(data) = self.fs.read_optional(&format!("{SIM_IMAGE_DIR}/{entry}"))? {
                out.push(String::from_utf8_lossy(&data).trim().to_string());
            }
        }
        out.sort();
        Ok(out)
    }
}

impl ContainerImages for SimImages {
    /// A simulated pull is instant: there is nothing to give up when stopped.
    fn pull(&self, image: &str, _stop: &AtomicBool) -> Result<()> {
        let host = image.split('/').next().unwrap_or_default();
        let host = host.split(':').next().unwrap_or_default();
        if host.ends_with(".invalid") {
            return Err(HostError::Command {
                command: format!("crictl --image-endpoint {CRIO_ENDPOINT} pull {image}"),
                stderr: format!(
                    "pulling image: rpc error: code = Unknown desc = pinging container registry {host}: Get \"https://{host}/v2/\": dial tcp: lookup {host}: no such host"
                ),
                status: "exit status 1".into(),
            });
        }
        self.fs.write_atomic(
            &SimImages::path(image),
            format!("{image}\n").as_bytes(),
            &FileAttrs::default(),
        )
    }

    fn present(&self, image: &str, _stop: &AtomicBool) -> Result<bool> {
        self.fs.exists(&SimImages::path(image))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "quay.io/example/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_simulated_node_keeps_what_it_pulled_and_an_invalid_host_fails() {
        let t = tempfile::tempdir().unwrap();
        let images = SimImages::new(HostFs::open(t.path()).unwrap());
        assert!(!images.present(IMAGE, &AtomicBool::new(false)).unwrap());
        let go = AtomicBool::new(false);
        images.pull(IMAGE, &go).unwrap();
        assert!(images.present(IMAGE, &AtomicBool::new(false)).unwrap());
        assert_eq!(images.held().unwrap(), [IMAGE]);
        let bad = IMAGE.replace("quay.io", "registry.invalid:5000");
        let err = images.pull(&bad, &go).unwrap_err().to_string();
        assert!(
            err.contains("lookup registry.invalid: no such host"),
            "{err}"
        );
        assert!(!images.present(&bad, &AtomicBool::new(false)).unwrap());
    }
}
