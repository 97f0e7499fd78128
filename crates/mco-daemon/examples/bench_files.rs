//! The update engine over many files: applying a rendered config of 5,000 files (50 MB) to a
//! fresh root, and validating the disk against it, each next to a floor measured in the same
//! run.
//!
//! ```sh
//! cargo run --release -p mco-daemon --example bench_files -- [--files 5000] [--bytes 10000] [--runs 7] [--dir DIR]
//! ```
//!
//! - Apply: `Engine::update` from an empty config (plan, journal, `noorig` stamps, atomic
//!   writes with fsync). Floor: the same number of files written by a minimal loop doing what
//!   an atomic write must (temp file, write, fsync, rename, fsync the directory).
//! - Validation: `Engine::validate` (parses the config, decodes every `data:` URL, stats, reads
//!   and compares every file) against `cat` of the same files to `/dev/null`, warm cache for
//!   both, alternated, median of `--runs`.
//!
//! `DIR` must be on a real disk (fsync on tmpfs is free); it defaults to the temp directory.

// A benchmark sets up its temp roots and measures its own process directly.
#![allow(clippy::disallowed_methods)]

use std::error::Error;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use mco_api::MachineConfig;
use mco_daemon::Host;
use mco_daemon::engine::plan::ParsedConfig;
use mco_daemon::engine::validate::{self, ValidateOptions};
use mco_daemon::engine::{Engine, RecordingReporter, UpdateOptions};
use mco_daemon::host::fs::{FileAttrs, HostFs};
use serde_json::json;

struct Args {
    files: usize,
    bytes: usize,
    runs: usize,
    dir: PathBuf,
}

fn args() -> Result<Args, Box<dyn Error>> {
    let mut a = Args {
        files: 5000,
        bytes: 10_000,
        runs: 7,
        dir: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--files" => a.files = v.parse()?,
            "--bytes" => a.bytes = v.parse()?,
            "--runs" => a.runs = v.parse()?,
            "--dir" => a.dir = v.into(),
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(a)
}

/// Host path of file `i`: 100 files per directory, like a config spread over `/etc`.
fn path_of(i: usize) -> String {
    format!("/etc/mco-bench/d{:03}/f{i:05}.conf", i / 100)
}

/// Deterministic, incompressible-looking printable content.
fn content(i: usize, len: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b' ' + (x % 95) as u8
        })
        .collect()
}

fn config(name: &str, files: usize, bytes: usize) -> MachineConfig {
    let entries: Vec<_> = (0..files)
        .map(|i| {
            json!({
                "path": path_of(i),
                "contents": {"source": format!("data:;base64,{}", B64.encode(content(i, bytes)))},
                "mode": 0o644,
            })
        })
        .collect();
    let mut mc = MachineConfig::new(name, Default::default());
    mc.spec.config = Some(json!({
        "ignition": {"version": "3.2.0"},
        "storage": {"files": entries},
    }));
    mc
}

fn empty(name: &str) -> MachineConfig {
    let mut mc = MachineConfig::new(name, Default::default());
    mc.spec.config = Some(json!({"ignition": {"version": "3.2.0"}}));
    mc
}

/// A simulated, non-ostree node: the user databases and nothing else.
fn node(root: &Path) -> Result<Engine, Box<dyn Error>> {
    let fs = HostFs::open(root)?;
    let a = FileAttrs::default();
    fs.write_atomic("/etc/passwd", b"root:x:0:0:root:/root:/bin/bash\n", &a)?;
    fs.write_atomic("/etc/group", b"root:x:0:\n", &a)?;
    fs.write_atomic(
        "/etc/shadow",
        b"root:*:19000::::::\n",
        &FileAttrs::mode(0o600),
    )?;
    Ok(Engine::new(Host::sim(root)?)?)
}

/// What an atomic write minimally costs, per file, in a plain loop.
fn floor_writes(root: &Path, files: usize, bytes: usize) -> Result<Duration, Box<dyn Error>> {
    let data: Vec<Vec<u8>> = (0..files).map(|i| content(i, bytes)).collect();
    let t = Instant::now();
    for (i, d) in data.iter().enumerate() {
        let path = root.join(path_of(i).trim_start_matches('/'));
        let dir = path.parent().ok_or("no parent")?;
        fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".tmp{i}"));
        let mut f = File::create(&tmp)?;
        f.write_all(d)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()?;
    }
    Ok(t.elapsed())
}

fn cat_all(paths: &[PathBuf]) -> Result<Duration, Box<dyn Error>> {
    let t = Instant::now();
    let st = Command::new("cat")
        .args(paths)
        .stdout(Stdio::null())
        .status()?;
    let d = t.elapsed();
    if !st.success() {
        return Err(format!("cat failed: {st}").into());
    }
    Ok(d)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn Error>> {
    let a = args()?;
    let work = tempfile::tempdir_in(&a.dir)?;
    let mc = config("rendered-bench-1", a.files, a.bytes);
    let total = (a.files * a.bytes) as f64 / 1e6;
    println!(
        "{} files of {} bytes ({total:.1} MB) under {}",
        a.files,
        a.bytes,
        work.path().display()
    );

    // Apply, once each on a fresh root (a second run would only measure a no-op diff).
    let floor_root = work.path().join("floor");
    let floor = floor_writes(&floor_root, a.files, a.bytes)?;
    fs::remove_dir_all(&floor_root)?;
    let root = work.path().join("node");
    fs::create_dir_all(&root)?;
    let engine = node(&root)?;
    let t = Instant::now();
    engine.update(
        &empty("rendered-bench-0"),
        &mc,
        UpdateOptions::default(),
        &mut RecordingReporter::default(),
    )?;
    let apply = t.elapsed();
    println!(
        "apply:    engine {:8.1} ms ({:6.1} µs/file)   floor (write+fsync+rename+fsync dir) {:8.1} ms ({:6.1} µs/file)   ratio {:.2}x",
        ms(apply),
        apply.as_secs_f64() * 1e6 / a.files as f64,
        ms(floor),
        floor.as_secs_f64() * 1e6 / a.files as f64,
        apply.as_secs_f64() / floor.as_secs_f64()
    );

    // Validation, warm cache: one untimed pass of each first, then alternated.
    let paths: Vec<PathBuf> = (0..a.files)
        .map(|i| root.join(path_of(i).trim_start_matches('/')))
        .collect();
    let parsed = ParsedConfig::new(&mc)?;
    let opts = ValidateOptions { managed_os: false };
    cat_all(&paths)?;
    engine.validate(&mc)?;
    let (mut cat, mut full, mut disk) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.runs {
        cat.push(cat_all(&paths)?);
        let t = Instant::now();
        engine.validate(&mc)?;
        full.push(t.elapsed());
        let t = Instant::now();
        validate::validate_on_disk(&engine.host, &parsed, opts)?;
        disk.push(t.elapsed());
    }
    let (cat, full, disk) = (median(cat), median(full), median(disk));
    println!(
        "validate: cat {:7.1} ms   validate (parse + check) {:7.1} ms = {:.2}x   check only (config parsed) {:7.1} ms = {:.2}x   (medians of {})",
        ms(cat),
        ms(full),
        full.as_secs_f64() / cat.as_secs_f64(),
        ms(disk),
        disk.as_secs_f64() / cat.as_secs_f64(),
        a.runs
    );
    Ok(())
}
