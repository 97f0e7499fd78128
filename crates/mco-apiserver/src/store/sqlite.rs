//! The database: opening it, moving the first schema to the current one, loading what it
//! holds at start-up, and the write-ahead log's checkpoints on a thread of their own.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};

use super::watch::Logged;
use super::{EventType, ObjKey, ObjMap};
use crate::error::Error;

/// What a write the server has answered survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A power cut or a kernel crash: each commit is fsynced before its writes are answered,
    /// as etcd does.
    #[default]
    PowerLoss,
    /// The server's own death (a kill, a panic): commits reach the OS before they are answered,
    /// and SQLite's write-ahead log fsyncs only when it checkpoints. A power cut keeps the
    /// database whole but may roll back its last commits. The embedded cluster's simulated node
    /// disks promise no more, and the fsync on every commit was the slowest step of each write.
    ProcessCrash,
}

impl Durability {
    pub(super) fn synchronous(self) -> &'static str {
        match self {
            Durability::PowerLoss => "FULL",
            Durability::ProcessCrash => "NORMAL",
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::PowerLoss => "power-loss",
            Durability::ProcessCrash => "process-crash",
        })
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "power-loss" => Ok(Durability::PowerLoss),
            "process-crash" => Ok(Durability::ProcessCrash),
            other => Err(format!(
                "unknown durability {other:?}: expected power-loss or process-crash"
            )),
        }
    }
}

/// The schema. An object's text is stored once, in the `events` row of the write that made its
/// current version; `objects` maps each live object to that row. Pruning the log keeps the rows
/// live objects point at, so `meta.window` marks where the complete log begins: every event
/// with a greater resourceVersion is there. (The first schema kept a second copy of every
/// object's text in `objects`, which was a quarter of the cost of each write.)
const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS events (rv INTEGER PRIMARY KEY, gr TEXT NOT NULL, ns TEXT NOT NULL,
         name TEXT NOT NULL, type TEXT NOT NULL, json TEXT NOT NULL);
     CREATE TABLE IF NOT EXISTS objects (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
         rv INTEGER NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
     CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
     CREATE TABLE IF NOT EXISTS tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL,
         boot INTEGER NOT NULL DEFAULT 0);
     CREATE TABLE IF NOT EXISTS issued_tokens (token TEXT PRIMARY KEY,
         expires_at INTEGER NOT NULL, json TEXT NOT NULL);
     CREATE INDEX IF NOT EXISTS issued_tokens_expiry ON issued_tokens (expires_at);";

/// How a token is stored: its SHA-256, so that a copy of the database (or of its log) hands
/// out no credential. Tokens are 40 random characters, so a plain hash needs no salt.
pub fn token_digest(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(token.as_bytes());
    let mut out = String::with_capacity(DIGEST_PREFIX.len() + 64);
    out.push_str(DIGEST_PREFIX);
    for b in d {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Marks a stored token as a digest; a row without it is a plain token of an older server.
const DIGEST_PREFIX: &str = "sha256:";

/// A row of the `tokens` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// [`token_digest`] of the token.
    pub token: String,
    /// The identity as its owner wrote it.
    pub identity: String,
    /// The start ([`super::Store::boot`]) that minted it.
    pub boot: u64,
    /// When saved: revoke the identity's tokens of earlier starts in the same commit.
    pub replace: bool,
}

/// A row of the `issued_tokens` table: a token a TokenRequest issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedRow {
    /// [`token_digest`] of the token.
    pub token: String,
    /// Unix seconds after which it no longer authenticates; the row is deleted after that.
    pub expires_at: i64,
    /// What the token stands for, as its owner wrote it.
    pub json: String,
}

/// The most `issued_tokens` rows kept: as many as authentication holds.
const MAX_ISSUED_ROWS: usize = crate::token_request::MAX_ISSUED;

/// Deletes the expired issued tokens and, past [`MAX_ISSUED_ROWS`], those that expire
/// soonest: what is left is what [`load`] reads. The table never holds more than that many
/// rows, so this is bounded work.
fn prune_issued(conn: &Connection, now: i64) -> Result<(), Error> {
    conn.execute(
        "DELETE FROM issued_tokens WHERE expires_at <= ?1",
        params![now],
    )?;
    conn.execute(
        "DELETE FROM issued_tokens WHERE token NOT IN
             (SELECT token FROM issued_tokens ORDER BY expires_at DESC, token LIMIT ?1)",
        params![MAX_ISSUED_ROWS as i64],
    )?;
    Ok(())
}

/// What to do about a database that cannot be used, said in every such error.
const START_AFRESH: &str = "restore the data directory from a backup, or move it away (for example `mv DIR DIR.damaged`, DIR being the directory holding this file) and start again to begin an empty cluster";

/// Refuses a database file that exists but is empty: SQLite would take it for a new database
/// and the server would silently start an empty cluster in place of the one that was there.
pub(super) fn check_file(path: &Path) -> Result<(), Error> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() == 0 => Err(Error::Store {
            path: path.display().to_string(),
            message: format!(
                "the database file is empty (0 bytes), so the cluster it held is gone; refusing to start an empty cluster in its place: {START_AFRESH}"
            ),
        }),
        _ => Ok(()),
    }
}

/// An error opening or reading the database, as the server reports it: the file, what is
/// wrong in SQLite's words, and what to do.
pub(super) fn unusable(path: &Path, err: Error) -> Error {
    use rusqlite::ErrorCode;
    let code = match &err {
        Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => Some(e.code),
        _ => None,
    };
    let message = match code {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => format!(
            "the database is in use by another process ({err}); stop the other server using this data directory"
        ),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) | None => {
            format!("the database is damaged ({err}): {START_AFRESH}")
        }
        Some(_) => format!("the database cannot be opened ({err})"),
    };
    Error::Store {
        path: path.display().to_string(),
        message,
    }
}

/// Warns when the write-ahead log ends in a partial frame: the file was cut short (a copy
/// or a disk that lost its end), and SQLite silently ignores the frames it cannot read, so
/// commits in them may be lost. Frames are a 24-byte header and a page after a 32-byte file
/// header (SQLite's documented WAL format). A crash while a commit was being written leaves
/// the same mark, but that commit was never answered.
pub(super) fn check_wal(path: &Path) -> Option<String> {
    let wal = path.with_file_name(format!("{}-wal", path.file_name()?.to_string_lossy()));
    let len = std::fs::metadata(&wal).ok()?.len();
    if len == 0 {
        return None;
    }
    let mut header = [0u8; 32];
    let read = {
        use std::io::Read;
        std::fs::File::open(&wal)
            .and_then(|mut f| f.read_exact(&mut header))
            .is_ok()
    };
    let magic = u32::from_be_bytes(header[0..4].try_into().ok()?);
    let page = u32::from_be_bytes(header[8..12].try_into().ok()?) as u64;
    let whole = read && matches!(magic, 0x377f_0682 | 0x377f_0683) && page >= 512;
    let frame = 24 + page;
    if whole && (len - 32) % frame == 0 {
        return None;
    }
    Some(format!(
        "{} is cut short ({len} bytes, not a whole number of {frame}-byte frames after its header): SQLite ignores what it cannot read, so the last acknowledged writes may be lost",
        wal.display()
    ))
}

pub(super) fn open(path: &Path, durability: Durability) -> Result<Connection, Error> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", durability.synchronous())?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let first_schema = conn.prepare("SELECT json FROM objects LIMIT 0").is_ok();
    if first_schema {
        migrate_from_first_schema(&mut conn)?;
    }
    conn.execute_batch(SCHEMA)?;
    share_event_storage(&mut conn)?;
    default_apps_objects(&mut conn)?;
    upgrade_tokens(&mut conn)?;
    prune_issued(&conn, jiff::Timestamp::now().as_second())?;
    conn.execute(
        "INSERT INTO meta (k, v) VALUES ('boot', 1) ON CONFLICT (k) DO UPDATE SET v = v + 1",
        [],
    )?;
    Ok(conn)
}

/// The storage key `events.k8s.io` Events had before they shared core `v1`'s.
const OLD_EVENTS_V1_GR: &str = "events.k8s.io/events";

/// Moves the `events.k8s.io` Events an older server kept apart (in that API's schema) into core
/// `v1`'s storage as core Events, their log rows too, and writes its core Events as they are
/// stored now (see [`crate::event::to_storage`]), in one transaction, once (`meta.events` marks
/// it done). Each keeps its resourceVersion. Should a core Event have the same namespace
/// and name, that one stays and the other is dropped: one name can hold one Event.
fn share_event_storage(conn: &mut Connection) -> Result<(), Error> {
    let tx = conn.transaction()?;
    let done = tx
        .query_row("SELECT v FROM meta WHERE k = 'events'", [], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?
        .is_some();
    if done {
        return Ok(());
    }
    let rows: Vec<(i64, String, String)> = {
        let mut stmt =
            tx.prepare("SELECT rv, gr, json FROM events WHERE gr = ?1 OR gr = '/events'")?;
        let rows = stmt.query_map([OLD_EVENTS_V1_GR], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        rows.collect::<Result<_, _>>()?
    };
    for (rv, gr, json) in &rows {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| Error::Data(format!("event at {rv}: {e}")))?;
        // Core Events as kube-apiserver writes them too, as they are stored from now on.
        let core = if gr == OLD_EVENTS_V1_GR {
            crate::event::core_of(&v)
        } else {
            crate::event::core_shape(&v)
        };
        tx.execute(
            "UPDATE events SET gr = '/events', json = ?1 WHERE rv = ?2",
            params![core.to_string(), rv],
        )?;
    }
    let moved = tx.execute(
        "UPDATE OR IGNORE objects SET gr = '/events' WHERE gr = ?1",
        [OLD_EVENTS_V1_GR],
    )?;
    let dropped = tx.execute("DELETE FROM objects WHERE gr = ?1", [OLD_EVENTS_V1_GR])?;
    tx.execute("INSERT INTO meta (k, v) VALUES ('events', 1)", [])?;
    tx.commit()?;
    if moved + dropped > 0 {
        tracing::info!(
            moved,
            dropped,
            "events.k8s.io Events moved into the core Event storage"
        );
    }
    Ok(())
}

/// The apps/v1 kinds whose defaults the server sets on every write, by storage key.
const APPS_KINDS: [(&str, &str); 3] = [
    ("apps/deployments", "Deployment"),
    ("apps/replicasets", "ReplicaSet"),
    ("apps/daemonsets", "DaemonSet"),
];

/// Which apps/v1 defaults the stored workloads have had (`meta.apps_defaults`); raised when
/// [`mco_apimachinery::defaults::on_decode`] gives them more, so that they are set again.
const APPS_DEFAULTS: i64 = 1;

/// Which apps/v1 defaults the stored workloads have been given (`meta.apps_defaults`), if any.
fn apps_defaults_mark(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT v FROM meta WHERE k = 'apps_defaults'", [], |r| {
        r.get(0)
    })
    .optional()
}

/// Gives the Deployments, ReplicaSets and DaemonSets an older server stored without defaults
/// (kubectl's `rollout status` refuses a DaemonSet without `updateStrategy`) the defaults the
/// server sets on every write now, in one transaction, once per [`APPS_DEFAULTS`]. Each row of
/// the log is rewritten in place and keeps its resourceVersion, so the log still tells each
/// object's history at the versions clients saw; and the resourceVersion counter moves on by
/// one when anything changed, so that no client resumes a watch from a version of the previous
/// run (a watch may resume from the version the store opened at, not before): each lists
/// again and sees the defaulted objects, as kube-apiserver's clients do after a restart.
fn default_apps_objects(conn: &mut Connection) -> Result<(), Error> {
    let tx = conn.transaction()?;
    let done = apps_defaults_mark(&tx)?.unwrap_or(0);
    if done >= APPS_DEFAULTS {
        return Ok(());
    }
    let mut changed = 0usize;
    for (gr, kind) in APPS_KINDS {
        let rows: Vec<(i64, String)> = {
            let mut stmt = tx.prepare("SELECT rv, json FROM events WHERE gr = ?1")?;
            let rows = stmt.query_map([gr], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (rv, json) in rows {
            let mut v: serde_json::Value = serde_json::from_str(&json)
                .map_err(|e| Error::Data(format!("{gr} at {rv}: {e}")))?;
            mco_apimachinery::defaults::on_decode(kind, &mut v);
            let text = v.to_string();
            if text != json {
                tx.execute(
                    "UPDATE events SET json = ?1 WHERE rv = ?2",
                    params![text, rv],
                )?;
                changed += 1;
            }
        }
    }
    if changed > 0 {
        tx.execute("UPDATE meta SET v = v + 1 WHERE k = 'rv'", [])?;
    }
    tx.execute(
        "INSERT INTO meta (k, v) VALUES ('apps_defaults', ?1) ON CONFLICT (k) DO UPDATE SET v = ?1",
        [APPS_DEFAULTS],
    )?;
    tx.commit()?;
    if changed > 0 {
        tracing::info!(changed, "stored apps/v1 workloads given their defaults");
    }
    Ok(())
}

/// Gives a token table of an older server the `boot` column and replaces each plain token
/// with its digest, in one transaction.
fn upgrade_tokens(conn: &mut Connection) -> Result<(), Error> {
    // Deleted content is zeroed, not left in free space, from here on.
    conn.pragma_update(None, "secure_delete", "ON")?;
    let tx = conn.transaction()?;
    if tx.prepare("SELECT boot FROM tokens LIMIT 0").is_err() {
        tx.execute_batch("ALTER TABLE tokens ADD COLUMN boot INTEGER NOT NULL DEFAULT 0")?;
    }
    let plain: Vec<String> = {
        let mut stmt = tx.prepare("SELECT token FROM tokens WHERE token NOT LIKE 'sha256:%'")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for t in &plain {
        tx.execute(
            "UPDATE OR REPLACE tokens SET token = ?1 WHERE token = ?2",
            params![token_digest(t), t],
        )?;
    }
    tx.commit()?;
    if !plain.is_empty() {
        // The plain tokens' old pages are still in the log: rebuild the file and empty the log.
        conn.execute_batch("VACUUM")?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        tracing::info!(
            tokens = plain.len(),
            "stored tokens replaced by their SHA-256 digests"
        );
    }
    Ok(())
}

/// What the database holds, as [`super::Store::open`] starts from it.
pub(super) struct Loaded {
    pub rv: u64,
    pub window_start: u64,
    pub objects: ObjMap,
    /// The retained event log, oldest first.
    pub events: VecDeque<Logged>,
    /// The token table's rows.
    pub tokens: Vec<TokenRow>,
    /// The issued tokens that have not expired, at most [`MAX_ISSUED_ROWS`].
    pub issued: Vec<IssuedRow>,
    /// This start's number.
    pub boot: u64,
}

/// Reads every live object, the event log after its window and the tokens.
pub(super) fn load(conn: &Connection) -> Result<Loaded, Error> {
    let rv: u64 = conn
        .query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?
        .unwrap_or(0) as u64;
    let window_start: u64 = conn
        .query_row("SELECT v FROM meta WHERE k = 'window'", [], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?
        .unwrap_or(0) as u64;
    let mut objects: ObjMap = HashMap::new();
    let mut object_rvs: HashMap<ObjKey, i64> = HashMap::new();
    {
        let stored: i64 = conn.query_row("SELECT COUNT(*) FROM objects", [], |r| r.get(0))?;
        let mut stmt = conn.prepare(
            "SELECT o.gr, o.ns, o.name, o.rv, e.json FROM objects o JOIN events e ON e.rv = o.rv",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
            ))
        })?;
        for row in rows {
            let (gr, ns, name, orv, json) = row?;
            super::read_back::<serde::de::IgnoredAny>(&json).map_err(|e| {
                let at = if ns.is_empty() {
                    name.clone()
                } else {
                    format!("{ns}/{name}")
                };
                Error::Data(format!("{} {at}: {e}", gr.trim_start_matches('/')))
            })?;
            objects
                .entry(gr.clone())
                .or_default()
                .insert((ns.clone(), name.clone()), Arc::from(json));
            object_rvs.insert((gr, ns, name), orv);
        }
        if object_rvs.len() as i64 != stored {
            return Err(Error::Data(format!(
                "{} stored objects have no text in the event log",
                stored - object_rvs.len() as i64
            )));
        }
    }
    let mut events = VecDeque::new();
    {
        let mut stmt = conn
            .prepare("SELECT rv, gr, ns, name, type, json FROM events WHERE rv > ?1 ORDER BY rv")?;
        let rows = stmt.query_map([window_start as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
        for row in rows {
            let (erv, gr, ns, name, typ, json) = row?;
            // The latest event of a live object is that object: share its text
            // rather than hold a second copy.
            let key = (gr, ns, name);
            let current = (object_rvs.get(&key) == Some(&erv))
                .then(|| {
                    objects
                        .get(&key.0)
                        .and_then(|m| m.get(&(key.1.clone(), key.2.clone())))
                        .cloned()
                })
                .flatten();
            let json = match current {
                Some(o) => o,
                None => {
                    serde_json::from_str::<serde::de::IgnoredAny>(&json)
                        .map_err(|e| Error::Data(e.to_string()))?;
                    Arc::from(json)
                }
            };
            let (gr, ns, name) = key;
            events.push_back(Logged {
                rv: erv as u64,
                gr,
                ns,
                name,
                typ: EventType::parse(&typ),
                json,
                old: None,
                // Before the store opened, so never resumed from (see `Store::history_start`).
                at: std::time::Instant::now(),
            });
        }
    }
    let mut tokens = Vec::new();
    {
        let mut stmt = conn.prepare("SELECT token, identity, boot FROM tokens")?;
        let rows = stmt.query_map([], |r| {
            Ok(TokenRow {
                token: r.get(0)?,
                identity: r.get(1)?,
                boot: r.get::<_, i64>(2)? as u64,
                replace: false,
            })
        })?;
        for row in rows {
            tokens.push(row?);
        }
    }
    let mut issued = Vec::new();
    {
        let mut stmt = conn.prepare(
            "SELECT token, expires_at, json FROM issued_tokens WHERE expires_at > ?1
                 ORDER BY expires_at DESC, token LIMIT ?2",
        )?;
        let rows = stmt.query_map(
            params![jiff::Timestamp::now().as_second(), MAX_ISSUED_ROWS as i64],
            |r| {
                Ok(IssuedRow {
                    token: r.get(0)?,
                    expires_at: r.get(1)?,
                    json: r.get(2)?,
                })
            },
        )?;
        for row in rows {
            issued.push(row?);
        }
    }
    let boot = conn
        .query_row("SELECT v FROM meta WHERE k = 'boot'", [], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?
        .unwrap_or(0) as u64;
    Ok(Loaded {
        rv,
        window_start,
        objects,
        events,
        tokens,
        issued,
        boot,
    })
}

/// Write-ahead log frames (pages) after which the log is copied into the database: SQLite's own
/// auto-checkpoint threshold.
const CHECKPOINT_FRAMES: i32 = 1000;

/// Hands the write-ahead log's checkpoints to a thread of their own.
///
/// SQLite runs its auto-checkpoint inside the commit that crosses the threshold, on the writer:
/// the copy of a thousand pages into the database and, at either durability, two fsyncs. In a
/// thousand-node rollout that came several times a second and was about a seventh of the
/// writer's CPU, and every write queued behind the batch waited for it. A second connection's
/// passive checkpoint never blocks the writer, and it changes nothing about what a commit has
/// made durable: the log already holds it.
pub(super) fn checkpoint_elsewhere(
    writer: &mut Connection,
    path: &Path,
    durability: Durability,
) -> Result<(), Error> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "synchronous", durability.synchronous())?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    // One pending request is enough: a checkpoint copies whatever the log holds when it runs.
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || {
            // Ends when the writer's connection, and with it the hook's sender, is gone.
            while rx.recv().is_ok() {
                if let Err(err) =
                    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0))
                {
                    tracing::warn!(%err, "write-ahead log checkpoint failed");
                }
            }
        })
        .map_err(|e| Error::io("store checkpoint thread", e))?;
    // Replaces SQLite's auto-checkpoint, which is itself a hook on the same callback.
    writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, frames: i32| {
        if frames >= CHECKPOINT_FRAMES {
            let _ = tx.try_send(());
        }
        Ok(())
    }))?;
    Ok(())
}

/// Moves a database of the first schema (each object's text in `objects` as well) to
/// [`SCHEMA`], in one transaction: an object whose event was pruned gets its text back in
/// `events`, under its own resourceVersion, which lies before the log's window and so is never
/// replayed to a watch.
fn migrate_from_first_schema(conn: &mut Connection) -> Result<(), Error> {
    let tx = conn.transaction()?;
    let rv: i64 = tx
        .query_row("SELECT v FROM meta WHERE k = 'rv'", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let first_event: Option<i64> = tx.query_row("SELECT MIN(rv) FROM events", [], |r| r.get(0))?;
    let window = match first_event {
        Some(e) => (e - 1).max(0),
        None => rv,
    };
    tx.execute_batch(
        "INSERT INTO events (rv, gr, ns, name, type, json)
             SELECT rv, gr, ns, name, 'MODIFIED', json FROM objects
             WHERE rv NOT IN (SELECT rv FROM events);
         CREATE TABLE objects_v2 (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
             rv INTEGER NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
         INSERT INTO objects_v2 (gr, ns, name, rv) SELECT gr, ns, name, rv FROM objects;
         DROP TABLE objects;
         ALTER TABLE objects_v2 RENAME TO objects;",
    )?;
    tx.execute(
        "INSERT OR REPLACE INTO meta (k, v) VALUES ('window', ?1)",
        params![window],
    )?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{names, put};
    use crate::store::{Store, WatchKey};

    #[test]
    fn durability_picks_whether_each_commit_is_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let synchronous = |d: Durability| -> i64 {
            let conn = open(&dir.path().join(d.to_string()), d).unwrap();
            conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap()
        };
        // SQLite's numbers: 2 is FULL (fsync at each commit), 1 NORMAL (at checkpoints).
        assert_eq!(synchronous(Durability::PowerLoss), 2);
        assert_eq!(synchronous(Durability::ProcessCrash), 1);
        assert_eq!(Durability::default(), Durability::PowerLoss);
        for d in [Durability::PowerLoss, Durability::ProcessCrash] {
            assert_eq!(d.to_string().parse::<Durability>(), Ok(d));
        }
        let err = "fsync".parse::<Durability>().unwrap_err();
        assert!(err.contains("power-loss or process-crash"), "{err}");
    }

    #[tokio::test]
    async fn the_log_is_checkpointed_into_the_database_off_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = Store::open(&path, 100, Durability::ProcessCrash).unwrap();
        let db_size = || std::fs::metadata(&path).map_or(0, |m| m.len());
        let before = db_size();
        // Each object takes a page or more of the log: well past one checkpoint's worth.
        let text = "x".repeat(6000);
        for i in 0..2 * CHECKPOINT_FRAMES {
            let v = serde_json::json!({"metadata": {"name": format!("o{i}")}, "data": text});
            store
                .write("/configmaps", "n", &format!("o{i}"), false, put(v))
                .await
                .unwrap();
        }
        // The writer's hook replaces SQLite's own auto-checkpoint: without the checkpoint
        // thread, the log would take every page and the database file none.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while db_size() < before + 6000 * CHECKPOINT_FRAMES as u64 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file stayed at {} bytes",
                db_size()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        drop(store);
        let store = Store::open(&path, 100, Durability::ProcessCrash).unwrap();
        let last = format!("o{}", 2 * CHECKPOINT_FRAMES - 1);
        assert_eq!(store.get("/configmaps", "n", &last).unwrap()["data"], text);
    }

    fn issued_row(i: usize, expires_at: i64) -> IssuedRow {
        IssuedRow {
            token: token_digest(&format!("t{i}")),
            expires_at,
            json: format!("{{\"n\":{i}}}"),
        }
    }

    fn count_issued(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM issued_tokens", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn issued_tokens_load_until_they_expire_and_at_most_max_issued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // A database of a server that kept no issued tokens takes the table, and keeps its own.
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            conn.execute_batch(
                "CREATE TABLE tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL,
                     boot INTEGER NOT NULL DEFAULT 0);
                 INSERT INTO tokens VALUES ('sha256:a', 'admin', 1);",
            )
            .unwrap();
        }
        let now = jiff::Timestamp::now().as_second();
        {
            let mut conn = open(&path, Durability::PowerLoss).unwrap();
            let loaded = load(&conn).unwrap();
            assert_eq!(loaded.tokens.len(), 1);
            assert!(loaded.issued.is_empty());
            // One more than the limit unexpired, the first expiring soonest, and three expired.
            let tx = conn.transaction().unwrap();
            for i in 0..=MAX_ISSUED_ROWS {
                let r = issued_row(i, now + 1000 + i as i64);
                tx.execute(
                    "INSERT INTO issued_tokens VALUES (?1, ?2, ?3)",
                    params![r.token, r.expires_at, r.json],
                )
                .unwrap();
            }
            for i in 0..3 {
                let r = issued_row(MAX_ISSUED_ROWS + 1 + i, now - i as i64);
                tx.execute(
                    "INSERT INTO issued_tokens VALUES (?1, ?2, ?3)",
                    params![r.token, r.expires_at, r.json],
                )
                .unwrap();
            }
            tx.commit().unwrap();
            assert_eq!(count_issued(&conn), MAX_ISSUED_ROWS as i64 + 4);
        }
        let conn = open(&path, Durability::PowerLoss).unwrap();
        let loaded = load(&conn).unwrap();
        assert_eq!(loaded.issued.len(), MAX_ISSUED_ROWS);
        assert!(loaded.issued.iter().all(|r| r.expires_at > now));
        assert!(
            !loaded.issued.contains(&issued_row(0, now + 1000)),
            "past the limit, the one expiring soonest is dropped"
        );
        assert!(loaded.issued.contains(&issued_row(1, now + 1001)));
        assert_eq!(
            count_issued(&conn),
            MAX_ISSUED_ROWS as i64,
            "what was not loaded is deleted"
        );
        assert_eq!(loaded.tokens.len(), 1);
        drop(conn);
        // At the limit, every row loads.
        let conn = open(&path, Durability::PowerLoss).unwrap();
        assert_eq!(load(&conn).unwrap().issued.len(), MAX_ISSUED_ROWS);
        assert_eq!(count_issued(&conn), MAX_ISSUED_ROWS as i64);
    }

    #[tokio::test]
    async fn saving_an_issued_token_deletes_the_expired_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let now = jiff::Timestamp::now().as_second();
        let (live, expiring, later) = (
            issued_row(0, now + 1000),
            issued_row(1, now + 5),
            issued_row(2, now + 2000),
        );
        {
            let store = super::super::Store::open(&path, 100, Durability::PowerLoss).unwrap();
            store.save_issued(live.clone(), now).await.unwrap();
            store.save_issued(expiring.clone(), now).await.unwrap();
            let conn = Connection::open(&path).unwrap();
            assert_eq!(count_issued(&conn), 2);
            // Saved as of a time the second has expired by: its row goes in the same commit.
            store.save_issued(later.clone(), now + 5).await.unwrap();
            assert_eq!(count_issued(&conn), 2);
        }
        let store = super::super::Store::open(&path, 100, Durability::PowerLoss).unwrap();
        assert_eq!(store.take_issued(), [later, live]);
        assert!(store.take_issued().is_empty(), "handed over once");
    }

    #[test]
    fn plain_tokens_of_an_older_server_are_replaced_by_digests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let plain = "0123456789abcdefghij0123456789abcdefghij";
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            conn.execute_batch(
                "CREATE TABLE tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL);",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO tokens VALUES (?1, 'node:worker-0')",
                params![plain],
            )
            .unwrap();
        }
        let conn = open(&path, Durability::PowerLoss).unwrap();
        let loaded = load(&conn).unwrap();
        assert_eq!(
            loaded.tokens,
            [TokenRow {
                token: token_digest(plain),
                identity: "node:worker-0".into(),
                boot: 0,
                replace: false,
            }]
        );
        assert_eq!(loaded.boot, 1);
        drop(conn);
        for f in ["db", "db-wal", "db-shm"] {
            let bytes = std::fs::read(dir.path().join(f)).unwrap_or_default();
            assert!(
                !bytes.windows(plain.len()).any(|w| w == plain.as_bytes()),
                "{f} holds the plain token"
            );
        }
        assert_eq!(
            load(&open(&path, Durability::PowerLoss).unwrap())
                .unwrap()
                .boot,
            2
        );
    }

    #[tokio::test]
    async fn a_write_ahead_log_cut_short_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let wal = dir.path().join("state.db-wal");
        let store = Store::open(&path, 100, Durability::ProcessCrash).unwrap();
        store
            .write(
                "/configmaps",
                "n",
                "a",
                false,
                put(serde_json::json!({"metadata": {"name": "a"}})),
            )
            .await
            .unwrap();
        let len = std::fs::metadata(&wal).unwrap().len();
        assert!(len > 32, "the write is in the log");
        assert_eq!(check_wal(&path), None, "a whole log");
        let copy = dir.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        std::fs::copy(&path, copy.join("state.db")).unwrap();
        let bytes = std::fs::read(&wal).unwrap();
        std::fs::write(copy.join("state.db-wal"), &bytes[..len as usize - 100]).unwrap();
        let warning = check_wal(&copy.join("state.db")).unwrap();
        assert!(
            warning.contains("state.db-wal is cut short")
                && warning.contains("the last acknowledged writes may be lost"),
            "{warning}"
        );
        assert_eq!(check_wal(&dir.path().join("none.db")), None, "no log");
    }

    #[tokio::test]
    async fn a_database_of_the_first_schema_opens_with_everything_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            // As the first schema left it: "a" unchanged since its event was pruned, "c"
            // deleted, "b" written last.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                r#"CREATE TABLE objects (gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
                       rv INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (gr, ns, name)) WITHOUT ROWID;
                   CREATE TABLE events (rv INTEGER PRIMARY KEY, gr TEXT NOT NULL, ns TEXT NOT NULL,
                       name TEXT NOT NULL, type TEXT NOT NULL, json TEXT NOT NULL);
                   CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
                   CREATE TABLE tokens (token TEXT PRIMARY KEY, identity TEXT NOT NULL);
                   INSERT INTO objects VALUES ('/configmaps', 'n', 'a', 2, '{"metadata":{"name":"a"}}');
                   INSERT INTO objects VALUES ('/configmaps', 'n', 'b', 5, '{"metadata":{"name":"b"},"v":2}');
                   INSERT INTO events VALUES (4, '/configmaps', 'n', 'c', 'DELETED', '{"metadata":{"name":"c"}}');
                   INSERT INTO events VALUES (5, '/configmaps', 'n', 'b', 'MODIFIED', '{"metadata":{"name":"b"},"v":2}');
                   INSERT INTO meta VALUES ('rv', 5);"#,
            )
            .unwrap();
        }
        for _ in 0..2 {
            let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
            assert_eq!(store.current_rv(), 5);
            assert_eq!(
                store.get("/configmaps", "n", "a").unwrap()["metadata"]["name"],
                "a"
            );
            assert_eq!(store.get("/configmaps", "n", "b").unwrap()["v"], 2);
            assert!(store.get("/configmaps", "n", "c").is_none());
            assert_eq!(store.window_start(), 3);
            let all = WatchKey {
                gr: "/configmaps".into(),
                ns: None,
                name: None,
            };
            let replay = store.events_since(3, &all).unwrap();
            assert_eq!(names(&replay), [(4, "c", "DELETED"), (5, "b", "MODIFIED")]);
            assert!(store.events_since(2, &all).is_none(), "before the window");
        }
        let conn = Connection::open(&path).unwrap();
        assert!(
            conn.prepare("SELECT json FROM objects").is_err(),
            "one copy of each object's text"
        );
    }

    #[tokio::test]
    async fn apps_workloads_stored_without_defaults_get_them_once_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let ds = r#"{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"agent","namespace":"d","generation":1,"resourceVersion":"2"},"spec":{"selector":{"matchLabels":{"app":"a"}},"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"a","image":"i"}]}}}}"#;
        {
            // As a server without apps defaults left it: the DaemonSet created at 2, a
            // ConfigMap at 3.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute(
                "INSERT INTO events VALUES (2, 'apps/daemonsets', 'd', 'agent', 'ADDED', ?1)",
                [ds],
            )
            .unwrap();
            conn.execute_batch(
                r#"INSERT INTO events VALUES (3, '/configmaps', 'd', 'c', 'ADDED', '{"metadata":{"name":"c","resourceVersion":"3"}}');
                   INSERT INTO objects VALUES ('apps/daemonsets', 'd', 'agent', 2);
                   INSERT INTO objects VALUES ('/configmaps', 'd', 'c', 3);
                   INSERT INTO meta VALUES ('rv', 3);"#,
            )
            .unwrap();
        }
        let check = |store: &Store| {
            let a = store.get("apps/daemonsets", "d", "agent").unwrap();
            assert_eq!(
                a["spec"]["updateStrategy"],
                serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
            );
            assert_eq!(a["spec"]["revisionHistoryLimit"], 10);
            assert_eq!(a["spec"]["template"]["spec"]["restartPolicy"], "Always");
            assert_eq!(a["metadata"]["resourceVersion"], "2", "kept");
            assert_eq!(
                a["metadata"]["generation"], 1,
                "defaults are no spec change"
            );
            let c = store.get("/configmaps", "d", "c").unwrap();
            assert_eq!(c["metadata"]["resourceVersion"], "3");
        };
        {
            let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
            check(&store);
            // One version on: no watch resumes from the previous run's last version.
            assert_eq!(store.current_rv(), 4);
            assert_eq!(store.opened_rv(), 4);
        }
        // Once: the next open changes nothing, the counter included.
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        check(&store);
        assert_eq!(store.current_rv(), 4);
        let conn = Connection::open(&path).unwrap();
        let logged: String = conn
            .query_row("SELECT json FROM events WHERE rv = 2", [], |r| r.get(0))
            .unwrap();
        assert!(
            logged.contains(r#""updateStrategy""#),
            "the log holds the defaulted object: {logged}"
        );
        assert_eq!(apps_defaults_mark(&conn).unwrap(), Some(APPS_DEFAULTS));
    }

    #[tokio::test]
    async fn a_new_database_is_marked_with_the_apps_defaults_and_keeps_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        assert_eq!(store.current_rv(), 0);
        drop(store);
        let conn = Connection::open(&path).unwrap();
        assert_eq!(apps_defaults_mark(&conn).unwrap(), Some(APPS_DEFAULTS));
    }

    #[tokio::test]
    async fn events_k8s_io_events_kept_apart_move_into_the_core_storage_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            // As an older server left it: "a" and "both" through events.k8s.io (in its schema),
            // "both" and "c" through core v1, as sent.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(
                r#"INSERT INTO events VALUES (2, 'events.k8s.io/events', 'd', 'a', 'ADDED', '{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"a","resourceVersion":"2"},"regarding":{"kind":"Node","name":"n"},"note":"hi","eventTime":"2026-01-01T00:00:00.000000Z","reportingController":"c"}');
                   INSERT INTO events VALUES (3, 'events.k8s.io/events', 'd', 'both', 'ADDED', '{"metadata":{"name":"both"},"note":"from v1"}');
                   INSERT INTO events VALUES (4, '/events', 'd', 'both', 'ADDED', '{"metadata":{"name":"both"},"message":"from core"}');
                   INSERT INTO events VALUES (5, '/events', 'd', 'c', 'ADDED', '{"metadata":{"name":"c"},"message":"core","count":2}');
                   INSERT INTO objects VALUES ('events.k8s.io/events', 'd', 'a', 2);
                   INSERT INTO objects VALUES ('events.k8s.io/events', 'd', 'both', 3);
                   INSERT INTO objects VALUES ('/events', 'd', 'both', 4);
                   INSERT INTO objects VALUES ('/events', 'd', 'c', 5);
                   INSERT INTO meta VALUES ('rv', 5);"#,
            )
            .unwrap();
        }
        for _ in 0..2 {
            let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
            assert_eq!(store.current_rv(), 5);
            let a = store.get("/events", "d", "a").unwrap();
            assert_eq!(a["apiVersion"], "v1");
            assert_eq!(a["message"], "hi");
            assert_eq!(a["involvedObject"]["name"], "n");
            assert_eq!(a["reportingComponent"], "c");
            assert_eq!(a["metadata"]["resourceVersion"], "2");
            // One name holds one Event: the core one stays.
            assert_eq!(
                store.get("/events", "d", "both").unwrap()["message"],
                "from core"
            );
            let c = store.get("/events", "d", "c").unwrap();
            assert_eq!(c["count"], 2);
            assert_eq!(
                c["eventTime"],
                serde_json::Value::Null,
                "as Go writes a core Event"
            );
            assert_eq!(c["reportingComponent"], "");
            assert!(store.get("events.k8s.io/events", "d", "a").is_none());
        }
        let conn = Connection::open(&path).unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT count(*) FROM events WHERE gr = 'events.k8s.io/events'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
        let objects: i64 = conn
            .query_row("SELECT count(*) FROM objects", [], |r| r.get(0))
            .unwrap();
        assert_eq!(objects, 3);
        // Marked done: a row written the old way afterwards (none is) would not be moved again.
        let mark: i64 = conn
            .query_row("SELECT v FROM meta WHERE k = 'events'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mark, 1);
    }
}
