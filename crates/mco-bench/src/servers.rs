//! The same rollout on both API servers, in one run: `mco up` with its embedded server, then
//! `mco up --kubeconfig` on a fresh kube-apiserver with etcd, controller manager and scheduler
//! from `scripts/real-kube`. Each run starts the controller as its own process, so its CPU is
//! measured apart, and counts requests with each server's own `apiserver_request_total`, net
//! of an idle window's rate (a real cluster's controllers, leases and heartbeats).

use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;
use crate::rollout::{self, RolloutOpts, RolloutReport};
use crate::support::scratch_dir;

/// Goal: requests per update on the real server within this share of the embedded one's.
pub const GOAL_REQUEST_RATIO: f64 = 0.10;
/// Goal: efficiency on the real server.
pub const GOAL_REAL_EFFICIENCY: f64 = 0.7;

#[derive(Debug, Clone)]
pub struct ServersOpts {
    pub rollout: RolloutOpts,
    /// `scripts/real-kube`.
    pub real_kube: PathBuf,
}

pub struct ServersReport {
    pub embedded: RolloutReport,
    pub real: RolloutReport,
}

/// `scripts/real-kube` in its own process group, stopped with all it started on drop.
struct RealKube(Child);

impl Drop for RealKube {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let kill = |sig: &str| {
            let _ = Command::new("kill")
                .args([sig, "--", &group])
                .stderr(Stdio::null())
                .status();
        };
        kill("-TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        kill("-KILL");
        let _ = self.0.wait();
    }
}

pub async fn run(opts: ServersOpts) -> Result<ServersReport, Error> {
    let embedded = rollout::run(RolloutOpts {
        kubeconfig: None,
        ..opts.rollout.clone()
    })
    .await?;

    let dir = scratch_dir(&opts.rollout.work_dir, "real-kube")?;
    let state = dir.path().join("kube");
    let log_path = dir.path().join("real-kube.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io(log_path.display(), e))?;
    let err = log
        .try_clone()
        .map_err(|e| Error::io(log_path.display(), e))?;
    let child = Command::new(&opts.real_kube)
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io(opts.real_kube.display(), e))?;
    let mut kube = RealKube(child);
    // A cold build of Kubernetes takes a long while; a cached one starts in seconds.
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("real-kube: ready, KUBECONFIG=") {
            break;
        }
        if let Ok(Some(status)) = kube.0.try_wait() {
            return Err(Error::Bench(format!(
                "scripts/real-kube ended ({status}) before it was ready:\n{text}"
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: "scripts/real-kube ready".into(),
                secs: 3600,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let real = rollout::run(RolloutOpts {
        kubeconfig: Some(state.join("kubeconfig")),
        // Its own group (`process_group(0)`): only its components' CPU is the control plane's.
        control_plane_group: Some(kube.0.id()),
        ..opts.rollout.clone()
    })
    .await;
    drop(kube);
    Ok(ServersReport {
        embedded,
        real: real?,
    })
}

impl ServersReport {
    /// Real requests per update against embedded ones, net of each idle rate.
    pub fn request_ratio(&self) -> f64 {
        self.real.net_requests_per_update()
            / self
                .embedded
                .net_requests_per_update()
                .max(f64::MIN_POSITIVE)
    }

    pub fn goal_met(&self) -> bool {
        (self.request_ratio() - 1.0).abs() <= GOAL_REQUEST_RATIO
            && self
                .real
                .efficiency()
                .is_some_and(|e| e >= GOAL_REAL_EFFICIENCY)
            && self.real.limit_held()
            && self.embedded.limit_held()
    }
}

impl fmt::Display for ServersReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}\n", self.embedded)?;
        writeln!(f, "{}\n", self.real)?;
        writeln!(
            f,
            "| server | rollout | efficiency | requests / update (net of idle) | controller CPU / update | mco up CPU / update |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|")?;
        for r in [&self.embedded, &self.real] {
            let per = |d: Duration| d.as_secs_f64() * 1000.0 / r.opts.workers.max(1) as f64;
            writeln!(
                f,
                "| {} | {:.1} s | {} | {:.1} ({:.1}) | {} | {:.1} ms |",
                r.server(),
                r.rollout.as_secs_f64(),
                r.efficiency().map_or("-".into(), |e| format!("{e:.2}")),
                r.requests as f64 / r.opts.workers.max(1) as f64,
                r.net_requests_per_update(),
                r.controller_cpu
                    .map_or("-".into(), |c| format!("{:.1} ms", per(c))),
                per(r.cpu),
            )?;
        }
        if let (Some(e), Some(r)) = (&self.embedded.phases, &self.real.phases) {
            writeln!(
                f,
                "\nper worker update, from each run's Node watch:\n{}\n",
                crate::phases::side_by_side(self.embedded.server(), e, self.real.server(), r)
            )?;
        } else if !self.embedded.opts.phases || !self.real.opts.phases {
            writeln!(f, "\n{}\n", rollout::PHASES_OFF)?;
        }
        write!(
            f,
            "requests per update, real / embedded (net): {:.2} (goal within {:.0} %); real efficiency goal >= {GOAL_REAL_EFFICIENCY}: {}",
            self.request_ratio(),
            GOAL_REQUEST_RATIO * 100.0,
            if self.goal_met() { "met" } else { "NOT met" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phases::Phases;
    use crate::phases::tests::{NEW, update};
    use crate::rollout::tests::report;

    #[test]
    fn the_comparison_names_the_phase_the_real_server_spends_most_on() {
        let mut embedded = report(10, 1);
        let mut real = report(14, 1);
        real.opts.kubeconfig = Some("kc".into());
        let no_phases = ServersReport {
            embedded: embedded.clone(),
            real: real.clone(),
        };
        assert!(!no_phases.to_string().contains("costliest"));
        let one = Duration::from_secs(1);
        embedded.phases = Some(Phases::of(&update("w", 0, 10), NEW, one));
        real.phases = Some(Phases::of(&update("w", 0, 40), NEW, one));
        let text = ServersReport { embedded, real }.to_string();
        assert!(
            text.contains("| desiredConfig → state=Working | 10.0 ms | 40.0 ms | +30.0 ms |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| whole update (desiredConfig → Done) | 1070.0 ms | 1280.0 ms | +210.0 ms |"
            ),
            "{text}"
        );
        assert!(
            text.contains("costliest on kube-apiserver against embedded: desiredConfig → state=Working (+30.0 ms per update by mean); then → cordoned"),
            "{text}"
        );
        assert!(text.ends_with("NOT met"), "{text}");
    }

    #[test]
    fn without_phases_the_comparison_says_so_in_place_of_its_table() {
        let mut embedded = report(10, 1);
        let mut real = report(14, 1);
        real.opts.kubeconfig = Some("kc".into());
        let on = ServersReport {
            embedded: embedded.clone(),
            real: real.clone(),
        }
        .to_string();
        assert!(!on.contains(rollout::PHASES_OFF), "{on}");
        embedded.opts.phases = false;
        real.opts.phases = false;
        let off = ServersReport { embedded, real }.to_string();
        // Once in each run's report and once where the side-by-side table would be.
        assert_eq!(off.matches(rollout::PHASES_OFF).count(), 3, "{off}");
        assert!(
            off.contains(&format!(
                "|\n\n{}\n\nrequests per update, real / embedded",
                rollout::PHASES_OFF
            )),
            "{off}"
        );
        assert!(!off.contains("costliest"), "{off}");
        assert!(off.ends_with("NOT met"), "{off}");
    }
}
