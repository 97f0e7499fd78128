//! Reading a process's memory and CPU, the machine's CPU, and the open-files limit from `/proc`.

use crate::Error;

/// Resident set size now and at its peak, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mem {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

/// Parses `VmRSS` and `VmHWM` out of a `/proc/<pid>/status` document.
pub fn parse_status(text: &str) -> Option<Mem> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(Mem {
        rss_kib: field("VmRSS")?,
        hwm_kib: field("VmHWM")?,
    })
}

/// User plus system CPU time, in clock ticks, out of a `/proc/<pid>/stat` line. The command
/// name may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_stat_cpu_ticks(text: &str) -> Option<u64> {
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time the process has used so far (all its threads, user and system).
pub fn read_cpu(pid: u32) -> Result<std::time::Duration, Error> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let ticks = parse_stat_cpu_ticks(&text)
        .ok_or_else(|| Error::Bench(format!("no utime/stime in {path}")))?;
    // USER_HZ is 100 on every Linux architecture this runs on.
    Ok(std::time::Duration::from_millis(ticks * 10))
}

/// The control plane's processes the bench tells apart, by `/proc/<pid>/comm` (which the kernel
/// cuts to 15 bytes: `kube-controller-manager` reads `kube-controller`).
pub const CONTROL_PLANE: [(&str, &str); 4] = [
    ("kube-apiserver", "kube-apiserver"),
    ("etcd", "etcd"),
    ("kube-controller", "kube-controller-manager"),
    ("kube-scheduler", "kube-scheduler"),
];

/// The process group out of a `/proc/<pid>/stat` line (field 5), counted after the command
/// name's last `)` as [`parse_stat_cpu_ticks`] counts.
pub fn parse_stat_pgrp(text: &str) -> Option<u32> {
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts at field 3 (state), then ppid, then pgrp.
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// One process as `/proc` shows it: its pid, its `comm` and its process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub comm: String,
    pub pgrp: u32,
}

/// Of `procs`, those of [`CONTROL_PLANE`] in process group `group`, as (name, pid), in its
/// order, then by pid. Another cluster's control plane on the machine (a test's) is in another
/// group, and its CPU is not this cluster's.
pub fn choose_control_plane(
    procs: impl IntoIterator<Item = Proc>,
    group: u32,
) -> Vec<(&'static str, u32)> {
    let mut found: Vec<(usize, &'static str, u32)> = procs
        .into_iter()
        .filter(|p| p.pgrp == group)
        .filter_map(|p| {
            let i = CONTROL_PLANE
                .iter()
                .position(|(c, _)| *c == p.comm.trim_end())?;
            Some((i, CONTROL_PLANE[i].1, p.pid))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, n, p)| (n, p)).collect()
}

/// The running processes of [`CONTROL_PLANE`] in process group `group` (`scripts/real-kube`'s,
/// which the bench starts as a group of its own, and whose components stay in it), as (name,
/// pid), in its order: none when the group has none.
pub fn control_plane_pids(group: u32) -> Vec<(&'static str, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let procs = dir.flatten().filter_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        // A process gone between the listing and the reads is left out.
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        Some(Proc {
            pid,
            comm,
            pgrp: parse_stat_pgrp(&stat)?,
        })
    });
    choose_control_plane(procs, group)
}

/// The whole machine's CPU time so far, in clock ticks, from `/proc/stat`: what else ran
/// beside the process measured, and what the hypervisor took, tell a slow run on a busy or
/// shared machine from a slow build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// User, nice, system, irq and softirq (guest time is already in user).
    pub busy: u64,
    /// Idle and iowait.
    pub idle: u64,
    /// Time the hypervisor ran something else while this machine had work.
    pub steal: u64,
}

impl MachineCpu {
    /// Ticks from `earlier` to `self`, field by field.
    pub fn since(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy.saturating_sub(earlier.busy),
            idle: self.idle.saturating_sub(earlier.idle),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }

    pub fn total(&self) -> u64 {
        self.busy + self.idle + self.steal
    }
}

/// The aggregate `cpu` line of a `/proc/stat` document.
pub fn parse_proc_stat(text: &str) -> Option<MachineCpu> {
    let line = text.lines().find_map(|l| l.strip_prefix("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied();
    Some(MachineCpu {
        busy: at(0)? + at(1)? + at(2)? + at(5).unwrap_or(0) + at(6).unwrap_or(0),
        idle: at(3)? + at(4).unwrap_or(0),
        steal: at(7).unwrap_or(0),
    })
}

pub fn read_machine_cpu() -> Result<MachineCpu, Error> {
    let path = "/proc/stat";
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_proc_stat(&text).ok_or_else(|| Error::Bench(format!("no cpu line in {path}")))
}

/// The soft and hard "Max open files" limits out of a `/proc/<pid>/limits` document.
pub fn parse_open_files(text: &str) -> Option<(String, String)> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let mut it = rest.split_whitespace();
    Some((it.next()?.to_string(), it.next()?.to_string()))
}

/// Samples a process's `VmRSS` on a thread of its own until stopped: a peak is one instant of
/// one run, while samples through a whole phase show where its RSS sat.
pub struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl RssSampler {
    pub fn start(pid: u32, every: std::time::Duration) -> Result<RssSampler, Error> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                let mut samples = Vec::new();
                while !flag.load(Ordering::Relaxed) {
                    match read_mem(pid) {
                        Ok(m) => samples.push(m.rss_kib),
                        // The process is gone: nothing more to sample.
                        Err(_) => break,
                    }
                    // A sampling interval, not a wait for a state.
                    std::thread::sleep(every);
                }
                samples
            })
            .map_err(|e| Error::io("the RSS sampler's thread", e))?;
        Ok(RssSampler { stop, thread })
    }

    /// The samples taken, in KiB, oldest first.
    pub fn stop(self) -> Vec<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

pub fn read_mem(pid: u32) -> Result<Mem, Error> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse_status(&text).ok_or_else(|| Error::Bench(format!("no VmRSS/VmHWM in {path}")))
}

/// This process's open-files limit as `soft/hard`, for the record.
pub fn open_files_limit() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| parse_open_files(&t))
        .map(|(s, h)| format!("{s}/{h}"))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_after_an_awkward_command_name() {
        let line = "4242 (mco (up) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 567 0 0 20 0 9 0 100 0 0\n";
        assert_eq!(parse_stat_cpu_ticks(line), Some(1234 + 567));
        assert_eq!(parse_stat_cpu_ticks("4242 (mco) S 1"), None);
    }

    #[test]
    fn process_group_after_an_awkward_command_name() {
        let line = "4242 (kube (x) y) S 1 4100 4100 0 -1 4194560 900 0 0 0 1234 567 0 0 20 0 9 0 100 0 0\n";
        assert_eq!(parse_stat_pgrp(line), Some(4100));
        assert_eq!(parse_stat_pgrp("4242 (etcd) S 1"), None);
        assert_eq!(parse_stat_pgrp("4242 (etcd) S 1 x"), None);
        assert_eq!(parse_stat_pgrp("no command name"), None);
    }

    #[test]
    fn only_the_groups_control_plane_is_chosen_in_order() {
        let p = |pid: u32, comm: &str, pgrp: u32| Proc {
            pid,
            comm: format!("{comm}\n"),
            pgrp,
        };
        let procs = vec![
            // Another cluster's, in another group.
            p(90, "kube-apiserver", 80),
            p(91, "etcd", 80),
            // The bench's, with the script itself and a helper in the group.
            p(104, "kube-scheduler", 100),
            p(100, "real-kube", 100),
            p(102, "etcd", 100),
            p(103, "kube-controller", 100),
            p(101, "kube-apiserver", 100),
            p(105, "sleep", 100),
        ];
        assert_eq!(
            choose_control_plane(procs.clone(), 100),
            vec![
                ("kube-apiserver", 101),
                ("etcd", 102),
                ("kube-controller-manager", 103),
                ("kube-scheduler", 104),
            ]
        );
        assert_eq!(
            choose_control_plane(procs.clone(), 80),
            vec![("kube-apiserver", 90), ("etcd", 91)]
        );
        assert_eq!(choose_control_plane(procs, 7), vec![]);
    }

    #[test]
    fn reads_own_process_group() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let pgrp = parse_stat_pgrp(&stat).unwrap();
        assert!(pgrp > 0);
        // This test's process is no control plane: its group holds none.
        assert_eq!(control_plane_pids(pgrp), vec![]);
    }

    #[test]
    fn machine_cpu_from_proc_stat() {
        let doc = "cpu  100 5 40 800 10 2 3 7 0 0\ncpu0 50 2 20 400 5 1 1 3 0 0\nintr 1\n";
        let at = parse_proc_stat(doc).unwrap();
        assert_eq!(
            at,
            MachineCpu {
                busy: 100 + 5 + 40 + 2 + 3,
                idle: 800 + 10,
                steal: 7
            }
        );
        let later = MachineCpu {
            busy: 250,
            idle: 900,
            steal: 17,
        };
        assert_eq!(
            later.since(at),
            MachineCpu {
                busy: 100,
                idle: 90,
                steal: 10
            }
        );
        assert_eq!(later.since(at).total(), 200);
        // A line cut short of idle is no reading.
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None);
        assert_eq!(parse_proc_stat("intr 1\n"), None);
    }

    #[test]
    fn status_fields() {
        let doc = "Name:\tmco\nVmPeak:\t  999 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t4\n";
        assert_eq!(
            parse_status(doc),
            Some(Mem {
                rss_kib: 10240,
                hwm_kib: 20480
            })
        );
        assert_eq!(parse_status("Name:\tmco\nVmRSS:\t1 kB\n"), None);
    }

    #[test]
    fn open_files_line() {
        let doc = "Limit                     Soft Limit           Hard Limit           Units     \n\
                   Max processes             95000                95000                processes \n\
                   Max open files            20000                1048576              files     \n";
        assert_eq!(
            parse_open_files(doc),
            Some(("20000".into(), "1048576".into()))
        );
        assert_eq!(parse_open_files("Max processes 1 1 processes\n"), None);
    }

    #[test]
    fn reads_own_status() {
        let m = read_mem(std::process::id()).unwrap();
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib);
    }
}
