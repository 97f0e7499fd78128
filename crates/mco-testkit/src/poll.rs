//! Polling with a deadline: tests wait for a condition, never for a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] checks: cheap in-process calls, so often.
const INTERVAL: Duration = Duration::from_millis(50);

/// Polls `check` until it returns `Some`, failing after `secs` seconds. The check runs at least
/// once, so `secs = 0` asks "is it so now?".
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(INTERVAL).await;
    }
}

/// Polls a synchronous `check` every `every` until it returns `Ok(Some)`, failing after
/// `timeout` with the last error it returned: for checks that shell out (kubectl) or read disk,
/// where the last observation is what explains a timeout.
pub async fn eventually_with_last<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<Option<T>, String>,
) -> T {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match check() {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => last = e,
        }
        if start.elapsed() > timeout {
            panic!("timed out waiting for {what}; last: {last}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls a synchronous `check` every `every` until it returns `Some`, blocking the thread and
/// failing after `timeout`: for plain `#[test]`s that drive processes (the e2e suite), with no
/// async runtime. The check runs at least once.
pub fn eventually_blocking<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {}s waiting for {what}",
            timeout.as_secs()
        );
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[tokio::test]
    async fn returns_the_first_some() {
        let n = Cell::new(0);
        let v = eventually("the third call", 5, || {
            n.set(n.get() + 1);
            let k = n.get();
            async move { (k == 3).then_some(k * 10) }
        })
        .await;
        assert_eq!(v, 30);
        assert_eq!(n.get(), 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out waiting for nothing")]
    async fn panics_at_the_deadline() {
        eventually("nothing", 0, || async { None::<()> }).await;
    }

    #[tokio::test]
    async fn with_last_returns_after_errors() {
        let n = Cell::new(0);
        let v = eventually_with_last("ok", Duration::from_secs(5), Duration::ZERO, || {
            n.set(n.get() + 1);
            match n.get() {
                1 => Err("not yet".to_string()),
                2 => Ok(None),
                k => Ok(Some(k)),
            }
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out waiting for it; last: still broken")]
    async fn with_last_names_the_last_error() {
        eventually_with_last::<()>("it", Duration::ZERO, Duration::ZERO, || {
            Err("still broken".into())
        })
        .await;
    }

    #[test]
    fn blocking_returns_the_first_some() {
        let mut n = 0;
        let v = eventually_blocking(
            "the second call",
            Duration::from_secs(5),
            Duration::ZERO,
            || {
                n += 1;
                (n == 2).then_some(n)
            },
        );
        assert_eq!((v, n), (2, 2));
    }

    #[test]
    #[should_panic(expected = "timed out after 0s waiting for never")]
    fn blocking_panics_at_the_deadline() {
        eventually_blocking("never", Duration::ZERO, Duration::ZERO, || None::<()>);
    }
}
