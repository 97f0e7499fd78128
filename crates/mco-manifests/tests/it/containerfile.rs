//! No image can be built where the tests run, so check what can go wrong without a build: stages
//! referenced by `COPY --from` exist, copied paths exist and are not ignored, the toolchain is the
//! repository's, and the image name agrees across the manifests, the docs and the Containerfile.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One instruction: keyword (upper-cased) and its arguments, continuation lines joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

fn parse(text: &str) -> Vec<Instruction> {
    let mut out = vec![];
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if trimmed.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (keyword, args) = pending
                    .split_once(char::is_whitespace)
                    .unwrap_or((&pending, ""));
                out.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_string(),
                });
                pending.clear();
            }
        }
    }
    assert!(pending.is_empty(), "dangling continuation: {pending}");
    out
}

#[derive(Debug)]
struct Stage {
    base: String,
    name: Option<String>,
}

fn stages(instructions: &[Instruction]) -> Vec<Stage> {
    instructions
        .iter()
        .filter(|i| i.keyword == "FROM")
        .map(|i| {
            let words: Vec<&str> = i
                .args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                [_] => None,
                other => panic!("unexpected FROM: {other:?}"),
            };
            Stage {
                base: words[0].to_string(),
                name,
            }
        })
        .collect()
}

fn containerfile() -> Vec<Instruction> {
    parse(&read("Containerfile"))
}

#[test]
fn copy_from_names_an_earlier_stage() {
    let instructions = containerfile();
    let mut seen: Vec<Stage> = vec![];
    let mut copies_from = 0;
    for i in &instructions {
        if i.keyword == "FROM" {
            seen.extend(stages(std::slice::from_ref(i)));
        }
        if i.keyword != "COPY" {
            continue;
        }
        for flag in i
            .args
            .split_whitespace()
            .filter(|w| w.starts_with("--from="))
        {
            copies_from += 1;
            let from = &flag["--from=".len()..];
            let known = seen
                .iter()
                .enumerate()
                .any(|(n, s)| s.name.as_deref() == Some(from) || from.parse::<usize>() == Ok(n));
            // The current stage is the last one seen; copying from itself is not allowed.
            let current = seen.last().and_then(|s| s.name.as_deref());
            assert!(
                known && current != Some(from),
                "COPY {flag}: no earlier stage of that name"
            );
        }
    }
    assert!(
        copies_from > 0,
        "a multi-stage build copies the binary from the builder"
    );
    assert!(stages(&instructions).len() >= 2, "multi-stage");
}

#[test]
fn context_copies_name_existing_paths_that_are_not_ignored() {
    let ignored: Vec<String> = read(".containerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    assert_eq!(
        read(".containerignore"),
        read(".dockerignore"),
        "podman and docker see the same context"
    );
    let mut checked = 0;
    for i in containerfile()
        .iter()
        .filter(|i| i.keyword == "COPY" || i.keyword == "ADD")
    {
        let words: Vec<&str> = i
            .args
            .split_whitespace()
            .filter(|w| !w.starts_with("--"))
            .collect();
        if i.args.contains("--from=") {
            continue;
        }
        assert!(
            !i.args.starts_with('['),
            "use the plain COPY form: {}",
            i.args
        );
        let (dest, sources) = words.split_last().expect("COPY needs a destination");
        assert!(!sources.is_empty(), "COPY {dest}: no source");
        for src in sources {
            assert!(
                repo().join(src).exists(),
                "COPY {src}: no such path in the repository"
            );
            assert!(
                !ignored
                    .iter()
                    .any(|p| p == src || Path::new(src).starts_with(p)),
                "COPY {src}: excluded by .containerignore"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "Cargo.toml, Cargo.lock and crates are copied");
}

#[test]
fn builds_the_mco_binary_with_the_repositorys_toolchain_into_a_minimal_runtime() {
    let instructions = containerfile();
    assert!(
        instructions
            .iter()
            .any(|i| i.keyword == "RUN" && i.args.contains("cargo build --release -p mco --locked")),
        "the builder runs the locked release build"
    );
    let toolchain = read("rust-toolchain.toml");
    let channel = toolchain
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("rust-toolchain.toml has a channel");
    let arg = instructions
        .iter()
        .find(|i| i.keyword == "ARG" && i.args.starts_with("RUST_VERSION="))
        .expect("ARG RUST_VERSION=<version>");
    assert_eq!(
        arg.args,
        format!("RUST_VERSION={channel}"),
        "keep the Containerfile's toolchain in step with rust-toolchain.toml"
    );

    let last = stages(&instructions).pop().unwrap();
    assert!(
        last.base.contains("ubi9/ubi-minimal"),
        "the runtime must ship chroot (coreutils): {}",
        last.base
    );
    let entrypoint = instructions
        .iter()
        .rfind(|i| i.keyword == "ENTRYPOINT")
        .unwrap();
    assert_eq!(entrypoint.args, r#"["/usr/bin/mco"]"#);
    let user = instructions.iter().rfind(|i| i.keyword == "USER").unwrap();
    let uid: u32 = user
        .args
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER, so runAsNonRoot can verify it");
    assert_ne!(uid, 0);
}

/// The DaemonSet runs the daemon-only executable, so the image must build and ship it where
/// the manifests say it is, with the size-optimised `daemon` profile its memory goal rests on.
#[test]
fn ships_the_daemon_only_executable_where_the_daemonset_runs_it() {
    let instructions = containerfile();
    assert!(
        instructions.iter().any(|i| i.keyword == "RUN"
            && i.args.contains(
                "cargo build --profile daemon -p mco-daemon --features cli --bin mco-daemon --locked"
            )
            && i.args.contains("target/daemon/mco-daemon /out/mco-daemon")),
        "the builder builds and stages mco-daemon"
    );
    let manifest = read("Cargo.toml");
    assert!(
        manifest.contains("[profile.daemon]\ninherits = \"release\""),
        "the workspace defines the daemon profile the image builds with"
    );
    let runtime_copies: Vec<&str> = instructions
        .iter()
        .filter(|i| i.keyword == "COPY" && i.args.starts_with("--from=builder"))
        .map(|i| i.args.as_str())
        .collect();
    assert!(
        runtime_copies.contains(&"--from=builder /out/mco-daemon /usr/bin/mco-daemon"),
        "{runtime_copies:?}"
    );
    assert!(runtime_copies.contains(&"--from=builder /out/mco /usr/bin/mco"));
    let daemonset = read("manifests/install/05-daemon.yaml");
    assert!(
        daemonset.contains("/usr/bin/mco-daemon"),
        "05-daemon.yaml runs /usr/bin/mco-daemon"
    );
    assert_eq!(mco_manifests::workloads::DAEMON_BIN, "/usr/bin/mco-daemon");
}

#[test]
fn image_name_agrees_across_manifests_docs_and_containerfile() {
    let image = mco_manifests::default_image();
    let repo_name = mco_manifests::IMAGE_REPOSITORY;
    assert!(image.starts_with(&format!("{repo_name}:")));
    let controller = read("manifests/install/04-controller.yaml");
    assert!(
        controller.contains(&format!("image: {image}")),
        "committed controller runs {image}"
    );
    let daemon = read("manifests/install/05-daemon.yaml");
    assert!(
        daemon.contains(&format!("image: {image}")),
        "committed daemon runs {image}"
    );
    for doc in ["docs/deploy.md", "Containerfile"] {
        assert!(read(doc).contains(repo_name), "{doc} names {repo_name}");
    }
    assert!(read("docs/deploy.md").contains("podman build -f Containerfile"));
}

#[test]
fn parser_joins_continuations_and_skips_comments() {
    let parsed = parse("# c\nFROM a AS b\nRUN x \\\n  # inner\n  && y\nCOPY --from=b /o /u\n");
    let kw: Vec<&str> = parsed.iter().map(|i| i.keyword.as_str()).collect();
    assert_eq!(kw, ["FROM", "RUN", "COPY"]);
    assert_eq!(parsed[1].args, "x  && y");
    let s = stages(&parsed);
    assert_eq!((s[0].base.as_str(), s[0].name.as_deref()), ("a", Some("b")));
}
