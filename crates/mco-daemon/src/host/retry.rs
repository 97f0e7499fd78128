//! Trying a host step that reaches the network again, with the backoff of apimachinery's
//! `wait.ExponentialBackoff` that upstream's daemon uses for its pulls.

use std::time::Duration;

use crate::error::HostError;

/// Waits between retries: the thread sleeps on a host; tests record instead.
pub struct Pause(Box<dyn Fn(Duration) + Send + Sync>);

impl Pause {
    /// A pause that sleeps.
    pub fn sleeping() -> Pause {
        Pause(Box::new(std::thread::sleep))
    }

    /// A pause that calls `f` instead.
    pub fn new(f: impl Fn(Duration) + Send + Sync + 'static) -> Pause {
        Pause(Box::new(f))
    }

    /// Waits `d`.
    pub fn wait(&self, d: Duration) {
        (self.0)(d)
    }
}

impl std::fmt::Debug for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pause")
    }
}

/// The waits between the attempts of an apimachinery `wait.ExponentialBackoff` with no jitter:
/// the first wait is `initial`, each next one `factor` times the last, for at most `steps`
/// attempts. As apimachinery's `delay` does, a next wait that would pass `cap` (when not zero)
/// ends the backoff: the wait computed then is the last one.
pub fn backoff_waits(initial: Duration, factor: u32, steps: u32, cap: Duration) -> Vec<Duration> {
    let mut waits = Vec::new();
    let (mut wait, mut steps) = (initial, steps);
    // An attempt, then a wait if another attempt follows.
    while steps > 1 {
        steps -= 1;
        waits.push(wait);
        wait *= factor;
        if !cap.is_zero() && wait > cap {
            // apimachinery sets the steps left to zero here: the loop ends after the next try.
            break;
        }
    }
    waits
}

/// The waits of upstream's `RunExt`/`RunExtBackground` with `retries` retries: 5 s doubling,
/// no cap (its podman pulls and copies take 5 retries: 155 s in all).
pub fn command_waits(retries: u32) -> Vec<Duration> {
    backoff_waits(Duration::from_secs(5), 2, retries + 1, Duration::ZERO)
}

/// Every attempt failed.
#[derive(Debug)]
pub struct Exhausted {
    /// How many attempts were made.
    pub attempts: usize,
    /// The last attempt's error.
    pub last: HostError,
}

impl Exhausted {
    /// Upstream's `RunExt` error for `command`: apimachinery's timeout and the last error,
    /// aggregated.
    pub fn command_error(self, command: &str) -> HostError {
        HostError::State(format!(
            "failed to run command {command} ({} tries): [timed out waiting for the condition, {}]",
            self.attempts, self.last
        ))
    }
}

/// Runs `attempt` until it succeeds, pausing for each of `waits` after a failure (logged with
/// `what`); all of them failing gives the last error.
pub fn retry<T>(
    waits: &[Duration],
    pause: &Pause,
    what: &str,
    mut attempt: impl FnMut() -> Result<T, HostError>,
) -> Result<T, Exhausted> {
    let mut waits = waits.iter();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let err = match attempt() {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        match waits.next() {
            Some(wait) => {
                tracing::warn!(error = %err, ?wait, "{what} failed; retrying");
                pause.wait(*wait);
            }
            None => {
                tracing::warn!(error = %err, attempts, "{what} failed; giving up");
                return Err(Exhausted {
                    attempts,
                    last: err,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// apimachinery's backoff: reaching the cap ends it; without a cap every step but the last
    /// waits.
    #[test]
    fn backoff_waits_as_apimachinery() {
        let s = Duration::from_secs;
        // Upstream's rebase backoff (7 steps) waits only three times.
        assert_eq!(backoff_waits(s(10), 2, 7, s(60)), vec![s(10), s(20), s(40)]);
        assert_eq!(
            backoff_waits(s(1), 2, 4, Duration::ZERO),
            vec![s(1), s(2), s(4)]
        );
        // A cap met exactly does not end it; one passed does.
        assert_eq!(backoff_waits(s(1), 2, 9, s(4)), vec![s(1), s(2), s(4)]);
        assert_eq!(backoff_waits(s(10), 2, 1, s(60)), Vec::<Duration>::new());
        assert_eq!(command_waits(5), vec![s(5), s(10), s(20), s(40), s(80)]);
    }

    #[test]
    fn retry_pauses_between_failures_and_gives_the_last_error() {
        let paused: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let recorded = Arc::clone(&paused);
        let pause = Pause::new(move |d| recorded.lock().unwrap().push(d));
        let waits = [Duration::from_secs(1), Duration::from_secs(2)];

        let mut n = 0;
        let ok = retry(&waits, &pause, "step", || {
            n += 1;
            if n < 2 {
                Err(HostError::State(format!("attempt {n}")))
            } else {
                Ok(n)
            }
        });
        assert_eq!(ok.unwrap(), 2);
        assert_eq!(*paused.lock().unwrap(), [Duration::from_secs(1)]);

        paused.lock().unwrap().clear();
        let mut n = 0;
        let err = retry(&waits, &pause, "step", || -> Result<(), HostError> {
            n += 1;
            Err(HostError::State(format!("attempt {n}")))
        })
        .unwrap_err();
        assert_eq!(err.attempts, 3);
        assert_eq!(err.last.to_string(), "attempt 3");
        assert_eq!(*paused.lock().unwrap(), waits);
    }
}
