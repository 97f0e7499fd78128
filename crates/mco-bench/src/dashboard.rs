//! The dashboard under a large rollout: how long the page takes to apply each batch of updates,
//! measured in the page by a headless Chromium that follows the whole rollout, and what the
//! dashboard adds to `mco up`'s memory.
//!
//! The same rollout runs twice in one bench: `mco up --dashboard-listen off`, then with the
//! dashboard on and the page open from the join to the end. The RSS difference is the
//! dashboard's (its watches and view, the page's event stream).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use mco_testkit::browser::Browser;

use crate::Error;
use crate::rollout::{self, RolloutOpts, RolloutReport};
use crate::stats::mib;

/// Goal: the page applies any batch of updates (script, style and layout) within this.
pub const GOAL_BATCH_MS: f64 = 100.0;
/// Goal: what the dashboard adds to `mco up`'s peak RSS.
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

#[derive(Debug, Clone)]
pub struct DashboardReport {
    pub without: RolloutReport,
    pub with: RolloutReport,
    pub page: PageStats,
}

impl DashboardReport {
    /// What the dashboard added to `mco up`'s peak RSS (negative: less, within the noise).
    pub fn added_hwm_kib(&self) -> i64 {
        self.with.mem.hwm_kib as i64 - self.without.mem.hwm_kib as i64
    }

    pub fn goal_met(&self) -> bool {
        self.page.max_ms < GOAL_BATCH_MS && self.added_hwm_kib() <= GOAL_RSS_KIB as i64
    }
}

impl fmt::Display for DashboardReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.with.opts;
        writeln!(
            f,
            "dashboard: {} workers + {} masters, {} s reboots, one rollout without and one with the dashboard open",
            o.workers, o.masters, o.reboot_seconds
        )?;
        for (name, r) in [("without", &self.without), ("with", &self.with)] {
            writeln!(
                f,
                "  {name:>7}: rollout {:.1} s, mco up peak RSS {}, RSS at the end {}, CPU {:.1} s",
                r.rollout.as_secs_f64(),
                mib(r.mem.hwm_kib),
                mib(r.mem.rss_kib),
                r.cpu.as_secs_f64()
            )?;
        }
        writeln!(
            f,
            "  the dashboard added {:.1} MiB to the peak RSS (goal <= {}) and {:.1} MiB at the end",
            self.added_hwm_kib() as f64 / 1024.0,
            mib(GOAL_RSS_KIB),
            (self.with.mem.rss_kib as f64 - self.without.mem.rss_kib as f64) / 1024.0
        )?;
        let p = &self.page;
        writeln!(
            f,
            "  page: {} batches applied, {} nodes shown; per batch p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (goal < {:.0} ms)",
            p.batches, p.nodes_shown, p.p50_ms, p.p99_ms, p.max_ms, GOAL_BATCH_MS
        )?;
        write!(
            f,
            "  goal: {}",
            if self.goal_met() { "met" } else { "NOT met" }
        )
    }
}

pub async fn run(opts: RolloutOpts) -> Result<DashboardReport, Error> {
    let without = rollout::run(RolloutOpts {
        dashboard: false,
        ..opts.clone()
    })
    .await?;
    let with = rollout::run(RolloutOpts {
        dashboard: true,
        ..opts
    })
    .await?;
    let page = with
        .page
        .clone()
        .ok_or_else(|| Error::Bench("the page measured nothing".into()))?;
    Ok(DashboardReport {
        without,
        with,
        page,
    })
}
