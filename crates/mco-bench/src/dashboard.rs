//! The dashboard under a large rollout: how long the page takes to apply each batch of updates,
//! measured in the page by a headless Chromium that follows the whole rollout, and what the
//! dashboard adds to `mco up`'s memory.
//!
//! The same rollout runs in pairs: `mco up --dashboard-listen off`, then with the dashboard on
//! and the page open from the join to the end. `mco up`'s RSS is sampled through each rollout;
//! the difference of a pair's medians is the dashboard's (its watches and view, the page's event
//! stream), and the goal is judged on the median over the pairs.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use mco_testkit::browser::Browser;

use crate::Error;
use crate::rollout::{self, Dashboard, RolloutOpts, RolloutReport};
use crate::stats::mib;

/// Goal: the page applies any batch of updates (script, style and layout) within this.
pub const GOAL_BATCH_MS: f64 = 100.0;
/// Goal: what the dashboard adds to `mco up`'s RSS.
pub const GOAL_RSS_KIB: u64 = 20 * 1024;

/// What the page measured: every batch it applied (all the `/events` messages that arrived
/// within one animation frame).
#[derive(Debug, Clone, Default)]
pub struct PageStats {
    pub batches: u64,
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Node cells on the page at the end.
    pub nodes_shown: u64,
}

/// A browser with the dashboard open. Every call blocks: run them off the async runtime.
pub struct Page(Browser);

impl Page {
    /// Opens the dashboard `mco up` printed in `log` and waits until its grid shows `nodes`.
    pub fn open(log: &Path, nodes: usize) -> Result<Page, Error> {
        let url = dashboard_url(log)?;
        let b = Browser::start(1600, 1000).map_err(|e| Error::Bench(e.to_string()))?;
        b.goto(&url);
        b.wait_js(
            "every node on the dashboard",
            300,
            &format!("return document.querySelectorAll('#grid .node').length >= {nodes};"),
        );
        Ok(Page(b))
    }

    /// The page's figures so far.
    pub fn stats(&self) -> PageStats {
        let v = self.0.js("const s = window.mcoStats;
             const t = s.times.slice().sort((a, b) => a - b);
             const q = (f) => t.length ? t[Math.min(t.length - 1, Math.floor(f * t.length))] : 0;
             return { batches: s.batches, max: s.max, p50: q(0.5), p99: q(0.99),
                      nodes: document.querySelectorAll('#grid .node').length };");
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        PageStats {
            batches: f("batches") as u64,
            max_ms: f("max"),
            p50_ms: f("p50"),
            p99_ms: f("p99"),
            nodes_shown: f("nodes") as u64,
        }
    }
}

/// The `http://…/` that `mco up` printed as `mco up: dashboard on URL`.
fn dashboard_url(log: &Path) -> Result<String, Error> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(url) = mco_testkit::browser::dashboard_url(&text) {
            return Ok(url);
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!("the dashboard's URL in {}", log.display()),
                secs: 60,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One rollout without the dashboard and the same rollout with it, run one after the other.
#[derive(Debug, Clone)]
pub struct Pair {
    pub without: RolloutReport,
    pub with: RolloutReport,
}

impl Pair {
    /// What the dashboard added to the RSS through the rollout: the difference of the two runs'
    /// median samples.
    pub fn added_p50_kib(&self) -> Option<i64> {
        let (w, o) = (self.with.rss_during?, self.without.rss_during?);
        Some(w.p50_kib as i64 - o.p50_kib as i64)
    }

    /// What the dashboard added to the peak RSS (`VmHWM`); one instant of each run.
    pub fn added_hwm_kib(&self) -> i64 {
        self.with.mem.hwm_kib as i64 - self.without.mem.hwm_kib as i64
    }

    /// What the page measured in the run with it open.
    pub fn page(&self) -> PageStats {
        self.with.page.clone().unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
pub struct DashboardReport {
    pub pairs: Vec<Pair>,
}

impl DashboardReport {
    /// The goal's figure: the median over the pairs of what the dashboard added to the RSS
    /// through the rollout, in KiB. Runs without the dashboard differ from each other by tens
    /// of MiB at their peaks, so neither one pair nor one instant can judge a 20-MiB goal.
    pub fn added_kib(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .pairs
            .iter()
            .filter_map(|p| p.added_p50_kib().map(|k| k as f64))
            .collect();
        crate::stats::median(&v)
    }

    /// The median over the pairs of what the dashboard added to the peak RSS, in KiB.
    pub fn added_hwm_kib(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .pairs
            .iter()
            .map(|p| p.added_hwm_kib() as f64)
            .collect();
        crate::stats::median(&v)
    }

    /// The slowest batch the page applied in any run.
    pub fn max_batch_ms(&self) -> f64 {
        self.pairs
            .iter()
            .map(|p| p.page().max_ms)
            .fold(0.0, f64::max)
    }

    pub fn goal_met(&self) -> bool {
        self.max_batch_ms() < GOAL_BATCH_MS
            && self.pairs.iter().all(|p| p.page().batches > 0)
            && self.memory_goal_met()
    }

    /// The memory half of the goal, which a bench without the page (`--no-page`) judges alone.
    pub fn memory_goal_met(&self) -> bool {
        self.added_kib().is_some_and(|k| k <= GOAL_RSS_KIB as f64)
    }

    /// Whether a page was open: without one the page's goal is not judged.
    fn page_open(&self) -> bool {
        self.pairs
            .first()
            .is_some_and(|p| p.with.opts.dashboard == Dashboard::Watched)
    }
}

fn signed_mib(kib: f64) -> String {
    format!("{:+.1} MiB", kib / 1024.0)
}

impl fmt::Display for DashboardReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(first) = self.pairs.first() else {
            return write!(f, "dashboard: no runs");
        };
        let o = &first.with.opts;
        writeln!(
            f,
            "dashboard: {} workers + {} masters, {} s reboots; {} pairs of rollouts, each without then with the dashboard{}",
            o.workers,
            o.masters,
            o.reboot_seconds,
            self.pairs.len(),
            if o.dashboard == Dashboard::Watched {
                " open"
            } else {
                " served to no page"
            }
        )?;
        let rss = |r: &RolloutReport| {
            r.rss_during
                .map_or_else(|| "no samples".to_string(), |t| t.to_string())
        };
        for (i, pair) in self.pairs.iter().enumerate() {
            writeln!(f, "  pair {}:", i + 1)?;
            for (name, r) in [("without", &pair.without), ("with", &pair.with)] {
                writeln!(
                    f,
                    "    {name:>7}: rollout {:.1} s, CPU {:.1} s; RSS through the rollout {}; peak (VmHWM) {}, at the end {}",
                    r.rollout.as_secs_f64(),
                    r.cpu.as_secs_f64(),
                    rss(r),
                    mib(r.mem.hwm_kib),
                    mib(r.mem.rss_kib),
                )?;
            }
            let p = pair.page();
            writeln!(
                f,
                "    added: {} through the rollout (p50), {} at the peak; page: {} batches, {} nodes shown, per batch p50 {:.1} / p99 {:.1} / max {:.1} ms",
                pair.added_p50_kib()
                    .map_or_else(|| "?".to_string(), |k| signed_mib(k as f64)),
                signed_mib(pair.added_hwm_kib() as f64),
                p.batches,
                p.nodes_shown,
                p.p50_ms,
                p.p99_ms,
                p.max_ms
            )?;
        }
        writeln!(
            f,
            "  the dashboard added, median of the pairs: {} to the RSS through the rollout (goal <= {}), {} to the peak",
            self.added_kib().map_or_else(|| "?".to_string(), signed_mib),
            mib(GOAL_RSS_KIB),
            self.added_hwm_kib()
                .map_or_else(|| "?".to_string(), signed_mib),
        )?;
        let met = |m: bool| if m { "met" } else { "NOT met" };
        if !self.page_open() {
            return write!(
                f,
                "  goal: memory {}; the page's not judged (no page was open)",
                met(self.memory_goal_met())
            );
        }
        writeln!(
            f,
            "  the page's slowest batch in any run: {:.1} ms (goal < {:.0} ms)",
            self.max_batch_ms(),
            GOAL_BATCH_MS
        )?;
        write!(f, "  goal: {}", met(self.goal_met()))
    }
}

/// `pairs` times: the rollout without the dashboard, then with it as `opts.dashboard` says
/// (served, or watched by a page). Interleaved, so a machine
/// that slows or speeds up over the bench weighs on both sides alike.
pub async fn run(opts: RolloutOpts, pairs: usize) -> Result<DashboardReport, Error> {
    let mut out = Vec::with_capacity(pairs);
    for _ in 0..pairs.max(1) {
        let without = rollout::run(RolloutOpts {
            dashboard: Dashboard::Off,
            ..opts.clone()
        })
        .await?;
        let with = rollout::run(opts.clone()).await?;
        if opts.dashboard == Dashboard::Watched && with.page.is_none() {
            return Err(Error::Bench("the page measured nothing".into()));
        }
        out.push(Pair { without, with });
    }
    Ok(DashboardReport { pairs: out })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::tests::report;
    use crate::stats::RssTrace;

    fn run(p50_mib: u64, hwm_mib: u64, page_ms: Option<f64>) -> RolloutReport {
        let mut r = report(10, 1);
        r.rss_during = RssTrace::of(&[p50_mib * 1024]);
        r.mem.hwm_kib = hwm_mib * 1024;
        r.page = page_ms.map(|ms| PageStats {
            batches: 5,
            max_ms: ms,
            ..PageStats::default()
        });
        r
    }

    fn pair(without: u64, with: u64, page_ms: f64) -> Pair {
        let mut with = run(with, with, Some(page_ms));
        with.opts.dashboard = Dashboard::Watched;
        Pair {
            without: run(without, without + 30, None),
            with,
        }
    }

    #[test]
    fn the_goal_is_judged_on_the_median_pair() {
        // One pair far over the goal does not decide it; the median pair does.
        let r = DashboardReport {
            pairs: vec![
                pair(500, 560, 40.0),
                pair(500, 510, 50.0),
                pair(520, 530, 60.0),
            ],
        };
        assert_eq!(r.added_kib(), Some(10.0 * 1024.0));
        assert_eq!(r.added_hwm_kib(), Some(-20.0 * 1024.0));
        assert_eq!(r.max_batch_ms(), 60.0);
        assert!(r.goal_met(), "{r}");
        assert!(r.to_string().ends_with("goal: met"));
        let over = DashboardReport {
            pairs: vec![pair(500, 560, 40.0), pair(500, 521, 50.0)],
        };
        assert_eq!(over.added_kib(), Some(40.5 * 1024.0));
        assert!(!over.goal_met());
        // A slow batch in any run fails it too.
        let slow = DashboardReport {
            pairs: vec![pair(500, 500, 40.0), pair(500, 500, 100.0)],
        };
        assert!(!slow.goal_met());
        assert!(slow.to_string().ends_with("goal: NOT met"), "{slow}");
        assert!(!DashboardReport { pairs: vec![] }.goal_met());
    }

    #[test]
    fn without_a_page_only_the_memory_goal_is_judged() {
        let served = |without: u64, with: u64| {
            let mut p = pair(without, with, 0.0);
            p.with.opts.dashboard = Dashboard::Served;
            p.with.page = None;
            p
        };
        let r = DashboardReport {
            pairs: vec![served(500, 510), served(500, 505)],
        };
        assert!(r.memory_goal_met() && !r.goal_met());
        assert!(
            r.to_string()
                .ends_with("goal: memory met; the page's not judged (no page was open)"),
            "{r}"
        );
        let over = DashboardReport {
            pairs: vec![served(500, 540), served(500, 530)],
        };
        assert!(over.to_string().contains("goal: memory NOT met"), "{over}");
    }
}
