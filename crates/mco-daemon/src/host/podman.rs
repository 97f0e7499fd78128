//! `podman`, as the daemon uses it: to unpack an image's files onto the host (the extensions
//! image, [`crate::host::extensions`]). Upstream's command lines: `podman images --format=json
//! --filter reference=IMG` to see whether the image is there, `podman pull -q [--authfile F]
//! IMG`, `podman create --net=none --annotation=... --name NAME IMG`, `podman cp CID:/ DIR`,
//! `podman rm -f NAME`, the pull and the copy under `nice -- ionice -c 3`. Run in the host's
//! root like every host tool ([`CommandRunner`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::error::{HostError, Result};
use crate::host::cmd::{CmdOutput, CommandRunner};

/// Longest a pull or a copy may take before it is killed and the update fails.
pub const NETWORK_TIMEOUT: Duration = Duration::from_secs(600);
/// Output kept from one podman run.
const MAX_OUTPUT: usize = 256 * 1024;
/// The annotation upstream puts on the containers it creates only to copy files out.
pub const PIVOT_ANNOTATION: &str = "--annotation=org.openshift.machineconfigoperator.pivot=true";
/// Upstream's prefix of those containers' names.
pub const CONTAINER_NAME_PREFIX: &str = "ostree-container-pivot-";

/// `podman` on the host.
#[derive(Debug, Clone)]
pub struct Podman {
    program: PathBuf,
    runner: CommandRunner,
    timeout: Duration,
}

impl Podman {
    /// `podman` from `PATH`, run through `runner` (see [`CommandRunner::in_root`]).
    pub fn new(runner: CommandRunner) -> Podman {
        Podman {
            program: PathBuf::from("podman"),
            runner,
            timeout: NETWORK_TIMEOUT,
        }
    }

    /// Replaces the time a pull or a copy may take.
    pub fn timeout(mut self, timeout: Duration) -> Podman {
        self.timeout = timeout;
        self
    }

    fn run(&self, args: &[&str]) -> Result<CmdOutput> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.runner.run(&self.program, &args)
    }

    /// A pull or a copy: bounded in time, and at idle CPU and I/O priority (`nice -- ionice -c 3
    /// podman ...`), as upstream's `RunExtBackground` runs them, so that unpacking an image of
    /// a gigabyte does not starve what still runs on the drained node (its DaemonSets).
    fn run_long(&self, args: &[&str]) -> Result<CmdOutput> {
        let args: Vec<String> = ["--", "ionice", "-c", "3"]
            .into_iter()
            .map(str::to_string)
            .chain(std::iter::once(self.program.display().to_string()))
            .chain(args.iter().map(|s| s.to_string()))
            .collect();
        self.runner
            .run_bounded(Path::new("nice"), &args, self.timeout, MAX_OUTPUT)
    }

    /// Whether `image` is in podman's store: `podman images --format=json --filter
    /// reference=IMG` lists it.
    pub fn image_present(&self, image: &str) -> Result<bool> {
        let reference = format!("reference={image}");
        let out = self.run(&["images", "--format=json", "--filter", &reference])?;
        parse_images(&out.stdout)
    }

    /// `podman pull -q [--authfile F] IMG`.
    pub fn pull(&self, image: &str, authfile: Option<&str>) -> Result<()> {
        let mut args = vec!["pull", "-q"];
        if let Some(f) = authfile {
            args.extend(["--authfile", f]);
        }
        args.push(image);
        self.run_long(&args).map(drop)
    }

    /// Creates (does not start) a container of `image` named `name`, without a network;
    /// returns its id.
    pub fn create(&self, name: &str, image: &str) -> Result<String> {
        let out = self.run(&[
            "create",
            "--net=none",
            PIVOT_ANNOTATION,
            "--name",
            name,
            image,
        ])?;
        let id = out.stdout.trim().to_string();
        if id.is_empty() {
            return Err(HostError::State(format!(
                "podman create {image}: no container id printed"
            )));
        }
        Ok(id)
    }

    /// Copies the container's whole filesystem to `dest` (a host path, created by the copy).
    pub fn copy_out(&self, container: &str, dest: &str) -> Result<()> {
        self.run_long(&["cp", &format!("{container}:/"), dest])
            .map(drop)
    }

    /// Removes the container, forcibly.
    pub fn remove(&self, name: &str) -> Result<()> {
        self.run(&["rm", "-f", name]).map(drop)
    }
}

/// Whether `podman images --format=json` listed any image.
pub fn parse_images(json: &str) -> Result<bool> {
    if json.trim().is_empty() {
        return Ok(false);
    }
    let v: Value = serde_json::from_str(json).map_err(|source| HostError::Json {
        what: "podman images --format=json".into(),
        source,
    })?;
    match v {
        Value::Array(a) => Ok(!a.is_empty()),
        Value::Null => Ok(false),
        _ => Err(HostError::State(
            "podman images --format=json: not a list".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_listing() {
        assert!(!parse_images("[]\n").unwrap());
        assert!(!parse_images("").unwrap());
        assert!(parse_images(r#"[{"Id":"abc","RepoDigests":["quay.io/x@sha256:1"]}]"#).unwrap());
        assert!(parse_images("{}").is_err());
        assert!(parse_images("nope").is_err());
    }
}
