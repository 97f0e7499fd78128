//! A differential check of the embedded API server against the real kube-apiserver.
//!
//! Both servers get the same install (`mco manifests`, admission policies included, with plain
//! `kubectl apply`), then every request of `tests/differential/corpus.yaml`, in order: kubectl
//! command lines as users type them, and raw HTTP requests as kube-rs makes them. Each answer
//! is normalized (uids, timestamps, resourceVersions, generated names, ages, server
//! addresses) and compared: exit status or HTTP status, stdout, stderr, body (JSON after
//! normalization, so reason, message and shape), Table cells and watch events in order.
//!
//! A difference must be listed, with its reason, in `tests/differential/known-differences.yaml`
//! (and in `docs/apiserver.md`); an unlisted one fails the test with both answers, and so does
//! a listed one that no longer differs. `MCO_DIFF_OUT=DIR` writes every normalized answer
//! there. `MCO_SKIP_REAL_KUBE=1` skips the test with a line saying so; CI never sets it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::e2e::{Group, RealKube, Slot};

const MCO: &str = env!("CARGO_BIN_EXE_mco");
/// The node lifecycle controller marks a node whose Lease is not renewed within 50 s
/// `Unknown` and taints it; the corpus's nodes get their Leases renewed this often.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// Nodes the corpus creates: their heartbeat Leases are renewed in the background.
const NODES: [&str; 2] = ["node-a", "node-b"];
/// Bounds on the data files, so a corrupted file fails clearly instead of slowly.
const MAX_FILE_BYTES: usize = 1 << 20;
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// A raw request (a bounded watch included) that takes longer has hung.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential")
}

/// Waits until `log` holds `line`, failing with the log if the process ends first.
fn wait_for_line(g: &mut Group, log: &Path, line: &str, secs: u64, what: &str) {
    mco_testkit::eventually_blocking(
        what,
        Duration::from_secs(secs),
        Duration::from_millis(100),
        || {
            if let Some(status) = g.exited() {
                panic!(
                    "{what}: the process ended ({status}):\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            let text = std::fs::read_to_string(log).ok()?;
            text.contains(line).then_some(())
        },
    )
}

/// One server under test.
struct Side {
    name: &'static str,
    kubeconfig: PathBuf,
    /// Values saved from earlier answers (`save:`), substituted as `{{name}}`.
    vars: BTreeMap<String, String>,
}

/// kubectl's answer, or an HTTP answer: named parts, each normalized text.
type Answer = Vec<(&'static str, String)>;

fn kubectl(kubeconfig: &Path, args: &[String], stdin: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().expect("kubectl on PATH");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    assert!(bytes.len() <= MAX_ANSWER_BYTES, "an answer over 4 MiB");
    String::from_utf8_lossy(bytes).into_owned()
}

/// `{{name}}` replaced by a saved value, and `{{base64:N}}` by N bytes (`x`) base64-encoded:
/// values too large to keep in the corpus.
fn substitute(s: &str, vars: &BTreeMap<String, String>) -> String {
    use base64::Engine as _;
    let mut out = s.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    while let Some(at) = out.find("{{base64:") {
        let Some(len) = out[at..].find("}}") else {
            break;
        };
        let n: usize = out[at + "{{base64:".len()..at + len]
            .parse()
            .unwrap_or_else(|_| {
                panic!(
                    "{{{{base64:N}}}} needs a byte count: {}",
                    &out[at..at + len + 2]
                )
            });
        let bytes = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n]);
        out.replace_range(at..at + len + 2, &bytes);
    }
    out
}

fn str_list(v: &Value, id: &str, field: &str) -> Vec<String> {
    match v {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => panic!("corpus entry {id}: {field} holds {other}, not a string"),
            })
            .collect(),
        other => panic!("corpus entry {id}: {field} must be a list of strings, not {other}"),
    }
}

/// Runs one corpus entry on one side. Returns `None` for a `wait` entry (not compared).
fn run(entry: &Value, side: &mut Side, rt: &tokio::runtime::Runtime) -> Option<Answer> {
    let id = entry["id"].as_str().unwrap();
    let vars = side.vars.clone();
    let stdin = entry["stdin"].as_str().map(|s| substitute(s, &vars));
    if let Some(wait) = entry.get("wait") {
        let args: Vec<String> = str_list(&wait["kubectl"], id, "wait.kubectl")
            .iter()
            .map(|a| substitute(a, &vars))
            .collect();
        let want = wait["equals"].as_str().unwrap_or_default().to_string();
        let what = format!("{id} on the {} server: {args:?} prints {want:?}", side.name);
        let mut last = String::new();
        let kc = side.kubeconfig.clone();
        mco_testkit::eventually_blocking(
            &what,
            Duration::from_secs(60),
            Duration::from_millis(200),
            || {
                let out = kubectl(&kc, &args, None);
                let now = text(&out.stdout) + &text(&out.stderr);
                if now != last {
                    // Printed as it changes, so a timeout shows where it got stuck.
                    eprintln!("{id} on the {} server: {now:?}", side.name);
                    last = now;
                }
                (out.status.success() && last.trim() == want).then_some(())
            },
        );
        return None;
    }
    let (answer, json_body) = if let Some(args) = entry.get("kubectl") {
        let args: Vec<String> = str_list(args, id, "kubectl")
            .iter()
            .map(|a| substitute(a, &vars))
            .collect();
        let out = kubectl(&side.kubeconfig, &args, stdin.as_deref());
        let stdout = text(&out.stdout);
        let json_body = serde_json::from_str::<Value>(&stdout).ok();
        let answer = vec![
            ("exit", out.status.code().unwrap_or(-1).to_string()),
            ("stdout", normalize_output(&stdout)),
            ("stderr", normalize_text(&text(&out.stderr))),
        ];
        (answer, json_body)
    } else if let Some(http) = entry.get("http") {
        // A client per request, as each kube-rs controller has its own; none idles here.
        let client = client_for(rt, &side.kubeconfig);
        let what = format!("{id} on the {} server", side.name);
        let (status, content_type, body) = rt.block_on(send(&client, http, &vars, &what));
        let json_body = serde_json::from_str::<Value>(&body).ok();
        let watch = http["path"].as_str().unwrap_or_default().contains("watch=");
        let body = if watch {
            normalize_watch(&body)
        } else {
            normalize_output(&body)
        };
        let answer = vec![
            ("status", status.to_string()),
            ("content-type", content_type),
            ("body", body),
        ];
        (answer, json_body)
    } else {
        panic!("corpus entry {id}: needs one of kubectl, http, wait");
    };
    if let Some(save) = entry.get("save").and_then(Value::as_object) {
        for (name, pointer) in save {
            let pointer = pointer.as_str().unwrap_or_default();
            let value = json_body
                .as_ref()
                .and_then(|b| b.pointer(pointer))
                .unwrap_or_else(|| {
                    panic!(
                        "corpus entry {id}: the {} server's answer has no {pointer} to save as {name}: {answer:?}",
                        side.name
                    )
                });
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            side.vars.insert(name.clone(), value);
        }
    }
    Some(answer)
}

/// Sends one raw request as kube-rs does: the client's own TLS, auth and base URL.
async fn send(
    client: &kube::Client,
    http: &Value,
    vars: &BTreeMap<String, String>,
    id: &str,
) -> (u16, String, String) {
    let method = http["method"].as_str().unwrap_or("GET");
    let path = substitute(
        http["path"]
            .as_str()
            .unwrap_or_else(|| panic!("corpus entry {id}: http.path is missing")),
        vars,
    );
    let mut req = ::http::Request::builder().method(method).uri(&path);
    if let Some(ct) = http["contentType"].as_str() {
        req = req.header("content-type", ct);
    }
    if let Some(accept) = http["accept"].as_str() {
        req = req.header("accept", accept);
    }
    for (name, value) in http["headers"].as_object().into_iter().flatten() {
        req = req.header(name.as_str(), value.as_str().unwrap_or_default());
    }
    let body = match &http["body"] {
        Value::Null => Vec::new(),
        Value::String(s) => substitute(s, vars).into_bytes(),
        other => substitute(&other.to_string(), vars).into_bytes(),
    };
    let req = req.body(kube::client::Body::from(body)).unwrap();
    let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.send(req))
        .await
        .unwrap_or_else(|_| panic!("corpus entry {id}: {method} {path}: no answer in 60 s"))
        .unwrap_or_else(|e| panic!("corpus entry {id}: {method} {path}: {e}"));
    let status = resp.status().as_u16();
    // Only the media type: parameters (charset) are not part of the contract.
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    let bytes = tokio::time::timeout(REQUEST_TIMEOUT, resp.into_body().collect_bytes())
        .await
        .unwrap_or_else(|_| panic!("corpus entry {id}: reading {path}: no end in 60 s"))
        .unwrap_or_else(|e| panic!("corpus entry {id}: reading {path}: {e}"));
    (status, content_type, text(&bytes))
}

// ---------------------------------------------------------------- normalization

/// Keys whose string values differ between any two servers by nature.
fn volatile_key(key: &str) -> Option<&'static str> {
    Some(match key {
        "uid" => "<uid>",
        "resourceVersion" => "<rv>",
        "creationTimestamp" | "deletionTimestamp" | "time" | "lastTransitionTime"
        | "lastHeartbeatTime" | "lastProbeTime" | "renewTime" | "acquireTime"
        | "lastUpdateTime" | "eventTime" | "firstTimestamp" | "lastTimestamp" => "<time>",
        "continue" => "<continue>",
        _ => return None,
    })
}

/// Normalizes an API object or Status in place.
fn normalize_json(v: &mut Value) {
    // A name made from generateName: keep the prefix.
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut)
        && let (Some(Value::String(prefix)), Some(Value::String(name))) =
            (meta.get("generateName").cloned(), meta.get("name").cloned())
        && name.starts_with(&prefix)
        && name.len() > prefix.len()
    {
        meta.insert("name".into(), json!(format!("{prefix}<generated>")));
    }
    match v {
        Value::Object(m) => {
            // Key order is not part of the contract: compare sorted.
            m.sort_keys();
            for (k, child) in m.iter_mut() {
                if let Some(mark) = volatile_key(k)
                    && (child.is_string() || child.is_number())
                {
                    *child = json!(mark);
                    continue;
                }
                normalize_json(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_json),
        Value::String(s) => {
            let n = normalize_text(s);
            if is_age(n.trim()) {
                *s = "<age>".into();
            } else {
                *s = n;
            }
        }
        _ => {}
    }
}

/// kubectl's stdout or a body: JSON and YAML are compared as normalized JSON, text line by
/// line with whitespace runs collapsed (column widths follow the cells' lengths).
fn normalize_output(s: &str) -> String {
    let trimmed = s.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        if let Ok(mut v) = serde_json::from_str::<Value>(s) {
            normalize_json(&mut v);
            return serde_json::to_string_pretty(&v).unwrap();
        }
    } else if trimmed.starts_with("apiVersion:")
        && let Ok(mut v) = mco_apimachinery::yaml::from_str::<Value>(s)
    {
        normalize_json(&mut v);
        return serde_json::to_string_pretty(&v).unwrap();
    }
    normalize_text(s)
}

/// A watch stream: one normalized event per line, in order.
fn normalize_watch(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(mut ev) => {
                normalize_json(&mut ev);
                let _ = writeln!(out, "{}", serde_json::to_string(&ev).unwrap());
            }
            Err(_) => {
                let _ = writeln!(out, "{}", normalize_text(line));
            }
        }
    }
    out
}

/// `5s`, `3m2s`, `47h`, `2d5h`, `<invalid>`: a Table's age.
fn is_age(t: &str) -> bool {
    if t == "<invalid>" {
        return true;
    }
    let mut digits = false;
    let mut units = 0;
    for c in t.chars() {
        if c.is_ascii_digit() {
            digits = true;
        } else if "smhdy".contains(c) && digits {
            digits = false;
            units += 1;
        } else {
            return false;
        }
    }
    !t.is_empty() && !digits && (1..=2).contains(&units)
}

/// Free text: uids, RFC 3339 and describe's timestamps, server addresses and ages
/// replaced; runs of blanks collapsed.
fn normalize_text(s: &str) -> String {
    let mut lines = Vec::new();
    for line in s.lines() {
        let line = replace_credential_ids(&replace_token_volumes(&replace_uuids(
            &replace_rfc3339(&replace_servers(line)),
        )));
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            // describe: "Thu, 03 Dec 2026 22:45:35 +0000"
            if i + 5 < tokens.len()
                && tokens[i].ends_with(',')
                && tokens[i + 4].len() == 8
                && tokens[i + 4].chars().filter(|c| *c == ':').count() == 2
                && (tokens[i + 5].starts_with('+') || tokens[i + 5].starts_with('-'))
            {
                out.push("<time>".into());
                i += 6;
                continue;
            }
            let t = tokens[i];
            // describe: "Resource Version:  331"
            if t == "Version:" && i > 0 && tokens[i - 1] == "Resource" && i + 1 < tokens.len() {
                out.push("Version: <rv>".into());
                i += 2;
                continue;
            }
            // A watch's 410: "too old resource version: 1 (370)", the oldest version held.
            if t == "version:"
                && i > 0
                && tokens[i - 1] == "resource"
                && i + 2 < tokens.len()
                && tokens[i + 2].starts_with('(')
                && tokens[i + 2].ends_with(')')
                && tokens[i + 2][1..tokens[i + 2].len() - 1]
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            {
                out.push(format!("version: {} (<rv>)", tokens[i + 1]));
                i += 3;
                continue;
            }
            if is_age(t) {
                out.push("<age>".into());
            } else if let Some(inner) = t.strip_prefix('(').and_then(|t| t.strip_suffix(')'))
                && is_age(inner)
            {
                // describe's event ages: "(x2 over 5s)" and "5s (x2 over 9s)"
                out.push("(<age>)".into());
            } else {
                out.push(t.to_string());
            }
            i += 1;
        }
        lines.push(out.join(" "));
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

/// The ServiceAccount admission plugin's volume, `kube-api-access-` and 5 random characters:
/// a generated name.
fn replace_token_volumes(s: &str) -> String {
    replace_runs(
        s,
        "kube-api-access-",
        5,
        u8::is_ascii_alphanumeric,
        "<generated>",
    )
}

/// A client certificate's credential id, `X509SHA256=` and the hex SHA-256 of its DER: each
/// side's administrator has its own certificate (same subject, another key and CA).
fn replace_credential_ids(s: &str) -> String {
    replace_runs(s, "X509SHA256=", 64, u8::is_ascii_hexdigit, "<sha256>")
}

/// `s` with every run of exactly `len` bytes of `class` right after `prefix` replaced by `by`.
fn replace_runs(s: &str, prefix: &str, len: usize, class: fn(&u8) -> bool, by: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(prefix) {
        let after = &rest[at + prefix.len()..];
        let n = after.bytes().take_while(class).count();
        out.push_str(&rest[..at + prefix.len()]);
        if n == len {
            out.push_str(by);
            rest = &after[len..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn replace_servers(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "127.0.0.1:".len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        out.push_str("<server>");
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

fn replace_uuids(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    let shape = |w: &[u8]| {
        w.len() == 36
            && w.iter().enumerate().all(|(j, c)| match j {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    while i < b.len() {
        if i + 36 <= b.len() && shape(&b[i..i + 36]) {
            out.push_str("<uid>");
            i += 36;
        } else {
            let c = s[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `2026-12-03T22:45:35Z`, with optional fraction and offset.
fn replace_rfc3339(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    let head = |w: &[u8]| {
        w.len() >= 19
            && w[..19].iter().enumerate().all(|(j, c)| match j {
                4 | 7 => *c == b'-',
                10 => *c == b'T',
                13 | 16 => *c == b':',
                _ => c.is_ascii_digit(),
            })
    };
    while i < b.len() {
        if head(&b[i..]) {
            let mut j = i + 19;
            if b.get(j) == Some(&b'.') {
                j += 1;
                while b.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
            }
            if b.get(j) == Some(&b'Z') {
                j += 1;
            } else if matches!(b.get(j), Some(b'+' | b'-')) && j + 6 <= b.len() {
                j += 6;
            }
            out.push_str("<time>");
            i = j;
        } else {
            let c = s[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

// ---------------------------------------------------------------- comparison

/// A line diff (longest common subsequence) of two texts: `-` embedded, `+` real.
fn line_diff(a: &str, b: &str) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    if a.len() * b.len() > 16_000_000 {
        return format!("(too long to diff: {} and {} lines)", a.len(), b.len());
    }
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j == b.len() || (i < a.len() && lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "  - {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "  + {}", b[j]);
            j += 1;
        }
    }
    out
}

/// The parts that differ, as a readable diff; empty when the answers agree.
fn compare(embedded: &Answer, real: &Answer) -> String {
    let mut out = String::new();
    for ((part, e), (_, r)) in embedded.iter().zip(real) {
        if e != r {
            let _ = writeln!(out, " {part} (- embedded, + real):");
            out.push_str(&line_diff(e, r));
        }
    }
    out
}

fn load_yaml(name: &str) -> Vec<Value> {
    let path = data_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        text.len() <= MAX_FILE_BYTES,
        "{} is over 1 MiB",
        path.display()
    );
    let v: Value = mco_apimachinery::yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match v {
        Value::Array(items) => items,
        other => panic!("{}: expected a list, found {other}", path.display()),
    }
}

/// The corpus: entries with unique ids, each one kind of request.
fn load_corpus() -> Vec<Value> {
    let corpus = load_yaml("corpus.yaml");
    let mut ids = BTreeSet::new();
    for (i, e) in corpus.iter().enumerate() {
        let id = e["id"]
            .as_str()
            .unwrap_or_else(|| panic!("corpus.yaml entry {i} has no id"));
        assert!(ids.insert(id.to_string()), "corpus.yaml: id {id} twice");
        let kinds = ["kubectl", "http", "wait"]
            .iter()
            .filter(|k| e.get(**k).is_some())
            .count();
        assert_eq!(
            kinds, 1,
            "corpus entry {id}: needs exactly one of kubectl, http, wait"
        );
    }
    corpus
}

/// id → reason.
fn load_known(corpus: &[Value]) -> BTreeMap<String, String> {
    let ids: BTreeSet<&str> = corpus.iter().filter_map(|e| e["id"].as_str()).collect();
    let mut known = BTreeMap::new();
    for (i, e) in load_yaml("known-differences.yaml").iter().enumerate() {
        let id = e["id"]
            .as_str()
            .unwrap_or_else(|| panic!("known-differences.yaml entry {i} has no id"));
        let reason = e["reason"].as_str().unwrap_or_default().trim();
        assert!(
            !reason.is_empty(),
            "known-differences.yaml: {id} has no reason"
        );
        assert!(
            ids.contains(id),
            "known-differences.yaml: {id} is not a request of corpus.yaml"
        );
        assert!(
            known.insert(id.to_string(), reason.to_string()).is_none(),
            "known-differences.yaml: {id} twice"
        );
    }
    known
}

// ---------------------------------------------------------------- setup

fn client_for(rt: &tokio::runtime::Runtime, kubeconfig: &Path) -> kube::Client {
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        // Compare the answer itself: kube's retry layer would resend a 429 for minutes.
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    })
}

/// The install as `docs/deploy.md` gives it: namespace and CRDs, wait until established,
/// then everything, with plain `kubectl apply`.
fn install(side: &Side) {
    let manifests = |args: &[&str]| {
        let out = Command::new(MCO)
            .arg("manifests")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "mco manifests {args:?}: {out:?}");
        text(&out.stdout)
    };
    let apply = |yaml: &str, what: &str| {
        let out = kubectl(
            &side.kubeconfig,
            &["apply".into(), "-f".into(), "-".into()],
            Some(yaml),
        );
        assert!(
            out.status.success(),
            "kubectl apply of {what} on the {} server: {}{}",
            side.name,
            text(&out.stdout),
            text(&out.stderr)
        );
    };
    apply(
        &manifests(&["--only", "namespace,crds"]),
        "the namespace and CRDs",
    );
    let wait: Vec<String> = [
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/machineconfigs.machineconfiguration.openshift.io",
        "crd/machineconfigpools.machineconfiguration.openshift.io",
        "crd/machineconfignodes.machineconfiguration.openshift.io",
        "crd/controllerconfigs.machineconfiguration.openshift.io",
    ]
    .map(String::from)
    .into();
    let out = kubectl(&side.kubeconfig, &wait, None);
    assert!(
        out.status.success(),
        "CRDs not established on the {} server: {out:?}",
        side.name
    );
    apply(&manifests(&[]), "the whole install");
}

/// Renews the corpus nodes' Leases on one server until stopped, so the real node lifecycle
/// controller keeps them Ready (the embedded server gets the same writes).
fn heartbeat(kubeconfig: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let now = Command::new("date")
                .args(["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            for node in NODES {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": node, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now}
                });
                let _ = kubectl(
                    &kubeconfig,
                    &[
                        "apply",
                        "--server-side",
                        "--field-manager=heartbeat",
                        "-f",
                        "-",
                    ]
                    .map(String::from),
                    Some(&lease.to_string()),
                );
            }
            let until = Instant::now() + HEARTBEAT;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    })
}

/// The embedded side's administrator as the real side's is: a client certificate for
/// `real-kube-admin` in `system:masters` (scripts/real-kube's `admin.crt`), here issued by the
/// data directory's CA. Written beside `DIR/kubeconfig`, whose server and CA it keeps.
fn certificate_kubeconfig(data_dir: &Path) -> PathBuf {
    let cert = mco_apiserver::issue_client_certificate(
        data_dir,
        "real-kube-admin",
        &["system:masters"],
        rcgen::date_time_ymd(2024, 1, 1),
        rcgen::date_time_ymd(2124, 1, 1),
    )
    .unwrap();
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let token_kubeconfig = std::fs::read_to_string(data_dir.join("kubeconfig")).unwrap();
    let mut replaced = 0;
    let text: String = token_kubeconfig
        .lines()
        .map(|line| match line.trim_start().strip_prefix("token: ") {
            Some(_) => {
                replaced += 1;
                format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    b64(&cert.cert_pem),
                    b64(&cert.key_pem)
                )
            }
            None => format!("{line}\n"),
        })
        .collect();
    assert_eq!(replaced, 1, "one token in {token_kubeconfig}");
    let path = data_dir.join("admin-certificate.kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// Stops the heartbeats when the test ends, by a panic too.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn embedded_server_answers_as_kube_apiserver_does() {
    let _slot = Slot::take();
    if std::env::var_os("MCO_SKIP_REAL_KUBE").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED: MCO_SKIP_REAL_KUBE=1, not starting scripts/real-kube");
        return;
    }
    let corpus = load_corpus();
    let known = load_known(&corpus);
    let requests = corpus.iter().filter(|e| e.get("wait").is_none()).count();
    assert!(
        requests >= 80,
        "the corpus has {requests} requests, fewer than 80"
    );

    let dir = std::env::temp_dir().join(format!("mco-differential-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("kube")).unwrap();

    let elog = dir.join("apiserver.log");
    let mut cmd = Command::new(MCO);
    cmd.args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("embedded"));
    let mut embedded = Group::spawn(cmd, &elog, "mco apiserver");
    wait_for_line(
        &mut embedded,
        &elog,
        "serving on https://",
        60,
        "mco apiserver serving",
    );
    let real = RealKube::start(&dir);
    let embedded_admin = certificate_kubeconfig(&dir.join("embedded"));

    // A worker thread keeps the client's background tasks (its request buffer, idle
    // connections) running between requests.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut sides = [
        ("embedded", embedded_admin),
        ("real", dir.join("kube/kubeconfig")),
    ]
    .map(|(name, kubeconfig)| Side {
        name,
        kubeconfig,
        vars: BTreeMap::new(),
    });
    for side in &sides {
        install(side);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let beats: Vec<_> = sides
        .iter()
        .map(|s| heartbeat(s.kubeconfig.clone(), stop.clone()))
        .collect();

    let out_dir = std::env::var_os("MCO_DIFF_OUT").map(PathBuf::from);
    if let Some(d) = &out_dir {
        std::fs::create_dir_all(d).unwrap();
    }
    let (mut agreed, mut listed, mut total) = (0, 0, 0);
    let mut failures = String::new();
    for entry in &corpus {
        let id = entry["id"].as_str().unwrap();
        let [e_side, r_side] = &mut sides;
        let Some(e) = run(entry, e_side, &rt) else {
            run(entry, r_side, &rt);
            continue;
        };
        let r = run(entry, r_side, &rt).unwrap();
        total += 1;
        if let Some(d) = &out_dir {
            for (side, answer) in [("embedded", &e), ("real", &r)] {
                let body: String = answer
                    .iter()
                    .map(|(p, t)| format!("## {p}\n{t}\n"))
                    .collect();
                std::fs::write(d.join(format!("{id}.{side}")), body).unwrap();
            }
        }
        let diff = compare(&e, &r);
        match (diff.is_empty(), known.get(id)) {
            (true, None) => agreed += 1,
            (false, Some(_)) => listed += 1,
            (true, Some(reason)) => {
                let _ = writeln!(
                    failures,
                    "{id}: listed as a known difference ({reason}) but both servers now agree: \
                     remove it from known-differences.yaml and docs/apiserver.md\n"
                );
            }
            (false, None) => {
                let _ = writeln!(failures, "{id}: the servers differ:\n{diff}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for b in beats {
        b.join().unwrap();
    }
    eprintln!("differential: {agreed} agreed / {listed} known / {total} total");
    assert!(
        failures.is_empty(),
        "differential check of the embedded server against kube-apiserver:\n\n{failures}\n\
         ({agreed} agreed / {listed} known / {total} total; list a difference that is not a bug \
         in tests/differential/known-differences.yaml with its reason)"
    );
    drop(embedded);
    drop(real);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn normalization_hides_only_what_differs_by_nature() {
    assert_eq!(
        normalize_text("NAME   AGE\nworker   5m2s\n"),
        "NAME AGE\nworker <age>"
    );
    assert_eq!(
        normalize_text("Creation Timestamp:  Thu, 03 Dec 2026 22:45:35 +0000"),
        "Creation Timestamp: <time>"
    );
    assert_eq!(
        normalize_text("uid d507298d-b003-452b-9e95-623ed9eeff1c at 2026-12-03T22:45:35.123Z"),
        "uid <uid> at <time>"
    );
    assert_eq!(
        normalize_text("Resource Version:  331"),
        "Resource Version: <rv>"
    );
    assert_eq!(
        normalize_text("too old resource version: 1 (370)"),
        "too old resource version: 1 (<rv>)"
    );
    assert_eq!(
        normalize_text("dial https://127.0.0.1:23661/api"),
        "dial https://<server>/api"
    );
    // Values that only look alike stay.
    assert_eq!(normalize_text("5 x3 s5 2026-12-03"), "5 x3 s5 2026-12-03");
    assert_eq!(
        normalize_text("kube-api-access-4ktzt: kube-api-access-x"),
        "kube-api-access-<generated>: kube-api-access-x"
    );
    let mut v = json!({"metadata": {"generateName": "w-", "name": "w-x7k2p", "uid": "u",
        "resourceVersion": "12"}, "spec": {"n": 1}});
    normalize_json(&mut v);
    assert_eq!(
        v,
        json!({"metadata": {"generateName": "w-", "name": "w-<generated>", "uid": "<uid>",
            "resourceVersion": "<rv>"}, "spec": {"n": 1}})
    );
    assert_eq!(line_diff("a\nb\nc", "a\nc\nd"), "  - b\n  + d\n");
    let id = format!("X509SHA256={}", "0a".repeat(32));
    assert_eq!(
        normalize_text(&format!("[{id}] {id}0 X509SHA256=0a")),
        format!("[X509SHA256=<sha256>] {id}0 X509SHA256=0a")
    );
}

#[test]
fn substitution_fills_saved_values_and_generated_bytes() {
    let vars = BTreeMap::from([("rv".to_string(), "12".to_string())]);
    assert_eq!(
        substitute("{{rv}} {{base64:4}} {{base64:0}}.", &vars),
        "12 eHh4eA== ."
    );
}
