//! The force file, polled for every daemon of the process by one thread. Nothing watches `/run`,
//! so a touched force file is noticed by a poll each second. A poll per daemon was a trip to the
//! blocking pool per node per second: in `mco up`, a thousand tasks a second queued behind the
//! nodes' updates and woke the runtime to learn that nothing was there. One thread `stat`s every
//! subscribed node's force file in turn and wakes only the daemons whose file is present.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::engine::Engine;

/// How often the force files are looked at.
pub(super) const PERIOD: Duration = Duration::from_secs(1);

struct Sub {
    engine: Arc<Engine>,
    present: Notify,
}

/// One daemon's subscription; dropping it unsubscribes (at the poller's next pass).
pub(super) struct ForcePoll(Arc<Sub>);

impl ForcePoll {
    /// Resolves after a pass that found the force file present; at most one such pass is held
    /// while the daemon is busy, as a missed tick of an interval was skipped.
    pub(super) async fn present(&self) {
        self.0.present.notified().await
    }
}

fn subscribers() -> &'static Mutex<Vec<Weak<Sub>>> {
    static SUBS: OnceLock<Mutex<Vec<Weak<Sub>>>> = OnceLock::new();
    SUBS.get_or_init(|| {
        if let Err(e) = std::thread::Builder::new()
            .name("mco-force-poll".into())
            .spawn(poll_forever)
        {
            tracing::warn!(error = %e, "the force file poller did not start: a force file is only seen by a sync");
        }
        Mutex::new(Vec::new())
    })
}

/// Polls `engine`'s force file from now on.
pub(super) fn subscribe(engine: Arc<Engine>) -> ForcePoll {
    let sub = Arc::new(Sub {
        engine,
        present: Notify::new(),
    });
    subscribers()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(&sub));
    ForcePoll(sub)
}

fn poll_forever() {
    loop {
        std::thread::sleep(PERIOD);
        // The list is only locked to copy it, so subscribing never waits on the disk.
        let live: Vec<Arc<Sub>> = {
            let mut subs = subscribers().lock().unwrap_or_else(|e| e.into_inner());
            subs.retain(|s| s.strong_count() > 0);
            subs.iter().filter_map(Weak::upgrade).collect()
        };
        for sub in live {
            if sub.engine.force_requested().unwrap_or(false) {
                sub.present.notify_one();
            }
        }
    }
}
