//! Pure arithmetic over measured samples: percentiles, rates, ratios.

use std::fmt;
use std::time::Duration;

/// Latency percentiles of one set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} p50={} p99={} max={}",
            self.count,
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of sorted samples; `None` when empty.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Sorts `samples` and summarises them; `None` when there are none.
pub fn summarize(samples: &mut [Duration]) -> Option<Summary> {
    samples.sort_unstable();
    Some(Summary {
        count: samples.len(),
        p50: percentile(samples, 50.0)?,
        p99: percentile(samples, 99.0)?,
        max: *samples.last()?,
    })
}

/// Where a process's RSS sat through a phase, from samples taken at a fixed interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RssTrace {
    pub samples: usize,
    pub p50_kib: u64,
    pub p90_kib: u64,
    pub max_kib: u64,
}

impl RssTrace {
    /// Summarises samples in KiB; `None` when there are none.
    pub fn of(samples: &[u64]) -> Option<RssTrace> {
        let mut v = samples.to_vec();
        v.sort_unstable();
        Some(RssTrace {
            samples: v.len(),
            max_kib: *v.last()?,
            p50_kib: percentile(&v, 50.0)?,
            p90_kib: percentile(&v, 90.0)?,
        })
    }
}

impl fmt::Display for RssTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p50 {}, p90 {}, max {} ({} samples)",
            mib(self.p50_kib),
            mib(self.p90_kib),
            mib(self.max_kib),
            self.samples
        )
    }
}

/// The median of a few figures (the mean of the middle two when they are even); `None` when
/// there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Operations per second.
pub fn rate(ops: usize, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 { ops as f64 / s } else { 0.0 }
}

/// `a / b`, or 0 when `b` is 0, so a failed floor never prints infinity.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Milliseconds with two decimals, the unit every latency is reported in.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Kibibytes as MiB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<Duration> = (1..=100).rev().map(d).collect();
        let s = summarize(&mut v).unwrap();
        assert_eq!((s.count, s.p50, s.p99, s.max), (100, d(50), d(99), d(100)));
        assert_eq!(percentile(&[d(7)], 99.0), Some(d(7)));
        assert_eq!(percentile(&[d(1), d(2)], 0.0), Some(d(1)));
        assert_eq!(summarize(&mut []), None);
    }

    #[test]
    fn rates_and_ratios_never_divide_by_zero() {
        assert_eq!(rate(3000, Duration::from_millis(1500)), 2000.0);
        assert_eq!(rate(5, Duration::ZERO), 0.0);
        assert_eq!(ratio(1.0, 4.0), 0.25);
        assert_eq!(ratio(1.0, 0.0), 0.0);
    }

    #[test]
    fn an_rss_trace_and_medians() {
        let t = RssTrace::of(&[300, 100, 200, 1000, 400, 500, 600, 700, 800, 900]).unwrap();
        assert_eq!(
            (t.samples, t.p50_kib, t.p90_kib, t.max_kib),
            (10, 500, 900, 1000)
        );
        assert_eq!(RssTrace::of(&[]), None);
        assert_eq!(
            RssTrace::of(&[2048]).unwrap().to_string(),
            "p50 2.0 MiB, p90 2.0 MiB, max 2.0 MiB (1 samples)"
        );
        assert_eq!(median(&[3.0, -1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn units() {
        assert_eq!(ms(Duration::from_micros(1234)), "1.23 ms");
        assert_eq!(mib(1536), "1.5 MiB");
    }
}
