//! Render one pool from 500 MachineConfigs holding 10,000 files, against the floor of parsing the
//! same bytes with `serde_json` alone. Goal: render ≤ 3× the floor.
//!
//!     cargo run --release -p mco-render --example bench_render
//!
//! Both figures are measured in the same run; each is the median of several iterations.

use std::hint::black_box;
use std::time::{Duration, Instant};

use mco_api::{ControllerConfigSpec, MachineConfig, MachineConfigPool};
use mco_render::render::{RawMachineConfig, render_pool, render_pool_raw};
use serde_json::json;

const MCS: usize = 500;
const FILES_PER_MC: usize = 20;
const ITERATIONS: usize = 21;

/// Upstream-style MCs: Ignition 3.2.0 (the most common version in the wild), percent-encoded and
/// base64 file contents, a unit with a dropin on every tenth MC, SSH keys on a few.
fn corpus() -> Vec<Vec<u8>> {
    let body =
        "# managed by mco\nkey = value\nanother_key = \"a longer value with spaces\"\n".repeat(3);
    let pct: String = percent_encode(&body);
    let b64 = base64_encode(body.as_bytes());
    (0..MCS)
        .map(|i| {
            let files: Vec<_> = (0..FILES_PER_MC)
                .map(|j| {
                    // Some paths are shared between MCs so the merge has real overrides to do.
                    let path = if j < 2 {
                        format!("/etc/shared/{j}-{}.conf", i % 25)
                    } else {
                        format!("/etc/app-{i}/file-{j}.conf")
                    };
                    let source = if j % 2 == 0 {
                        format!("data:,{pct}")
                    } else {
                        format!("data:text/plain;charset=utf-8;base64,{b64}")
                    };
                    json!({"path": path, "mode": 420, "overwrite": true, "contents": {"source": source}})
                })
                .collect();
            let mut config = json!({
                "ignition": {"version": "3.2.0"},
                "storage": {"files": files}
            });
            if i % 10 == 0 {
                config["systemd"] = json!({"units": [{
                    "name": format!("svc-{i}.service"), "enabled": true,
                    "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
                    "dropins": [{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=1\n"}]
                }]});
            }
            if i % 50 == 0 {
                config["passwd"] = json!({"users": [{"name": "core", "sshAuthorizedKeys": [format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:040} bench@{i}")]}]});
            }
            let mc = json!({
                "apiVersion": "machineconfiguration.openshift.io/v1",
                "kind": "MachineConfig",
                "metadata": {"name": format!("{:03}-worker-bench-{i}", i % 100), "labels": {"machineconfiguration.openshift.io/role": "worker"}},
                "spec": {"config": config, "kernelArguments": if i % 100 == 0 { json!([format!("arg{i}=1")]) } else { json!(null) }}
            });
            serde_json::to_vec(&mc).expect("encode")
        })
        .collect()
}

fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The least disturbed run: useful on a shared machine, where medians drift with other load.
fn min(v: &[Duration]) -> Duration {
    v.iter().copied().min().unwrap_or_default()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let docs = corpus();
    let bytes: usize = docs.iter().map(Vec::len).sum();
    let pool: MachineConfigPool = serde_json::from_value(json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": "worker"},
        "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}}}
    }))
    .expect("pool");
    let cc = ControllerConfigSpec {
        base_os_container_image: "quay.io/os@sha256:0000".into(),
        ..Default::default()
    };

    if std::env::var_os("BENCH_PROFILE_POOL").is_some() {
        let mcs: Vec<MachineConfig> = docs
            .iter()
            .map(|d| serde_json::from_slice(d).expect("mc"))
            .collect();
        for _ in 0..60 {
            black_box(render_pool(&pool, &mcs, &cc, "bench").expect("render"));
        }
        return;
    }
    let (mut floor, mut full, mut render_only) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_full, mut raw_render) = (Vec::new(), Vec::new());
    let (mut name, mut raw_name) = (String::new(), String::new());
    for _ in 0..ITERATIONS {
        // Floor: the same bytes into serde_json::Value, nothing else.
        let t = Instant::now();
        for d in &docs {
            black_box(serde_json::from_slice::<serde_json::Value>(d).expect("json"));
        }
        floor.push(t.elapsed());

        // Render from typed objects (as the controller holds them): the same bytes into
        // MachineConfigs, then the whole render.
        let t = Instant::now();
        let mcs: Vec<MachineConfig> = docs
            .iter()
            .map(|d| serde_json::from_slice(d).expect("mc"))
            .collect();
        let t_render = Instant::now();
        let rendered = render_pool(&pool, &mcs, &cc, "bench").expect("render");
        render_only.push(t_render.elapsed());
        full.push(t.elapsed());
        name = rendered_name_of(&rendered);
        black_box(rendered);

        // Render from the bytes: each config read once, straight into typed Ignition.
        let t = Instant::now();
        let raws: Vec<RawMachineConfig<'_>> = docs
            .iter()
            .map(|d| RawMachineConfig::from_slice(d).expect("mc"))
            .collect();
        let t_render = Instant::now();
        let rendered = render_pool_raw(&pool, &raws, &cc, "bench").expect("render");
        raw_render.push(t_render.elapsed());
        raw_full.push(t.elapsed());
        raw_name = rendered_name_of(&rendered);
        black_box(rendered);
    }
    assert_eq!(name, raw_name, "both paths must render the same config");
    let (floor_min, full_min, raw_min) = (min(&floor), min(&full), min(&raw_full));
    let (floor, full, render_only) = (median(floor), median(full), median(render_only));
    let (raw_full, raw_render) = (median(raw_full), median(raw_render));
    if std::env::var_os("BENCH_PHASES").is_some() {
        phases(&docs, &cc);
    }
    let files = MCS * FILES_PER_MC;
    println!("input: {MCS} MachineConfigs, {files} files, {bytes} bytes of JSON");
    println!("rendered: {name}");
    println!(
        "floor (serde_json::Value parse):          {:>8.2} ms",
        ms(floor)
    );
    println!(
        "render from bytes (RawMachineConfig + render_pool_raw): {:>8.2} ms",
        ms(raw_full)
    );
    println!(
        "  of which render_pool_raw alone:          {:>8.2} ms",
        ms(raw_render)
    );
    println!(
        "render via MachineConfig (parse MCs + render_pool):     {:>8.2} ms",
        ms(full)
    );
    println!(
        "  of which render_pool alone:              {:>8.2} ms",
        ms(render_only)
    );
    println!(
        "ratio from bytes / floor:      {:.2}x median of {ITERATIONS} (goal <= 3x); {:.2}x best of {ITERATIONS}",
        ms(raw_full) / ms(floor),
        ms(raw_min) / ms(floor_min)
    );
    println!(
        "ratio via MachineConfig / floor: {:.2}x median of {ITERATIONS}; {:.2}x best of {ITERATIONS}",
        ms(full) / ms(floor),
        ms(full_min) / ms(floor_min)
    );
}

fn rendered_name_of(r: &mco_render::render::Rendered) -> String {
    r.machine_config.metadata.name.clone().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median of `PHASE_RUNS` timings of `f`, each on a fresh input from `setup` (not timed).
fn phase<I, O>(mut setup: impl FnMut() -> I, mut f: impl FnMut(I) -> O) -> (f64, O) {
    const PHASE_RUNS: usize = 9;
    let mut times = Vec::with_capacity(PHASE_RUNS);
    let mut out = None;
    for _ in 0..PHASE_RUNS {
        let input = setup();
        let t = Instant::now();
        let o = f(input);
        times.push(t.elapsed());
        out = Some(o);
    }
    (ms(median(times)), out.expect("at least one run"))
}

/// Where render time goes, phase by phase (set BENCH_PHASES=1): medians of repeated runs.
fn phases(docs: &[Vec<u8>], cc: &ControllerConfigSpec) {
    use mco_render::{ignition, merge, render};
    let mcs: Vec<MachineConfig> = docs
        .iter()
        .map(|d| serde_json::from_slice(d).expect("mc"))
        .collect();
    let (t, parsed) = phase(
        || (),
        |()| {
            mcs.iter()
                .map(|m| ignition::parse(m.spec.config.as_ref().expect("config")).expect("parse"))
                .collect::<Vec<_>>()
        },
    );
    println!("  parse:     {t:>8.2} ms");
    let (t, ()) = phase(
        || (),
        |()| {
            for p in &parsed {
                ignition::validate(p).expect("valid");
            }
        },
    );
    println!("  validate:  {t:>8.2} ms");
    let (t, merged) = phase(|| parsed.clone(), merge::merge_ignition);
    println!("  merge:     {t:>8.2} ms");
    let (t, cfg) = phase(
        || merged.clone(),
        |m| render::into_canonical_config(m).expect("canonical"),
    );
    println!("  canonical: {t:>8.2} ms");
    let refs: Vec<&MachineConfig> = mcs.iter().collect();
    let f = merge::merge_fields(&refs, cc);
    let spec = mco_api::MachineConfigSpec {
        config: Some(cfg),
        kernel_arguments: Some(f.kernel_arguments),
        ..Default::default()
    };
    let (t, _) = phase(
        || (),
        |()| render::rendered_name("worker", &spec).expect("name"),
    );
    println!("  name hash: {t:>8.2} ms");
    // Into a buffer, not `io::sink()`: writes to a sink have no effect and may be optimised away.
    let (t, encoded) = phase(|| (), |()| serde_json::to_vec(&spec).expect("encode"));
    println!("  (encoding the spec alone, no digest: {t:.2} ms)");
    let bytes = encoded;
    let (t, _) = phase(
        || (),
        |()| {
            use sha2::Digest;
            sha2::Sha256::digest(&bytes)
        },
    );
    println!(
        "  (digest of the {} encoded bytes alone: {t:.2} ms)",
        bytes.len()
    );
    let (t, _) = phase(
        || (),
        |()| render::is_canonical(spec.config.as_ref().expect("config")),
    );
    println!("  (is_canonical: {t:.2} ms)");
    let (t, _) = phase(|| spec.clone(), drop);
    println!("  (dropping the rendered spec: {t:.2} ms)");
}
