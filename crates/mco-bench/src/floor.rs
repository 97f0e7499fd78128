//! The raw-SQLite floor: what the disk allows with the server's own sync settings
//! (`journal_mode=WAL`, `synchronous=FULL`), measured beside the server in the same run.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use crate::Error;
use crate::stats::rate;

/// One floor measurement.
#[derive(Debug, Clone, Copy)]
pub struct FloorRun {
    pub writes: usize,
    pub elapsed: Duration,
}

impl FloorRun {
    pub fn per_sec(&self) -> f64 {
        rate(self.writes, self.elapsed)
    }
}

/// Opens a database the way the server's store does, with one table of the stored rows' shape:
/// an object's key, resourceVersion and JSON.
fn open(path: &Path) -> Result<Connection, Error> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS objects (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
             rv INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;",
    )?;
    Ok(conn)
}

fn insert(conn: &Connection, n: usize, row: &str) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(
        "INSERT INTO objects (gr, ns, name, rv, json) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        "/configmaps",
        "default",
        format!("row-{n}"),
        n as i64,
        row
    ])?;
    Ok(())
}

/// How the threads reach SQLite when each write is its own transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Every thread has its own connection; SQLite's file lock serialises the writers.
    OwnConnection,
    /// All threads share one connection behind a mutex: serial commits, no lock retries.
    SharedConnection,
}

/// `threads` threads insert `total` rows of `row` between them, each insert its own
/// autocommit transaction, so each returns only once durable; stops early at `max`.
pub fn per_commit(
    dir: &Path,
    threads: usize,
    total: usize,
    row: &str,
    sharing: Sharing,
    max: Duration,
) -> Result<FloorRun, Error> {
    let path = dir.join(match sharing {
        Sharing::OwnConnection => "floor-own.db",
        Sharing::SharedConnection => "floor-shared.db",
    });
    let shared = Arc::new(Mutex::new(open(&path)?));
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let (shared, next, done, stop) =
                    (shared.clone(), next.clone(), done.clone(), stop.clone());
                let path = path.clone();
                s.spawn(move || -> Result<(), Error> {
                    let own = match sharing {
                        Sharing::OwnConnection => Some(open(&path)?),
                        Sharing::SharedConnection => None,
                    };
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= total || stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        match &own {
                            Some(c) => insert(c, n, row)?,
                            None => {
                                let c = shared.lock().unwrap_or_else(|e| e.into_inner());
                                insert(&c, n, row)?;
                            }
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                        if start.elapsed() > max {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Bench("floor thread panicked".into())))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    results.into_iter().collect::<Result<Vec<()>, Error>>()?;
    Ok(FloorRun {
        writes: done.load(Ordering::Relaxed),
        elapsed,
    })
}

/// One thread inserts `total` rows in transactions of `batch` rows: the ceiling that
/// group commit can approach, not a per-write durability guarantee.
pub fn batched(
    dir: &Path,
    total: usize,
    batch: usize,
    row: &str,
    max: Duration,
) -> Result<FloorRun, Error> {
    let mut conn = open(&dir.join("floor-batched.db"))?;
    let start = Instant::now();
    let mut n = 0;
    while n < total && start.elapsed() <= max {
        let tx = conn.transaction()?;
        let end = (n + batch.max(1)).min(total);
        for i in n..end {
            insert(&tx, i, row)?;
        }
        tx.commit()?;
        n = end;
    }
    Ok(FloorRun {
        writes: n,
        elapsed: start.elapsed(),
    })
}
