//! A headless Chromium driven through chromedriver (WebDriver), for the dashboard's browser tests
//! and benchmark. Synchronous, with its own runtime, so that the e2e suite's plain `#[test]`s
//! can drive it between `kubectl` calls.
//!
//! The binaries are Debian's `chromium` and `chromium-driver` (`/usr/bin/chromium`,
//! `/usr/bin/chromedriver`); `MCO_CHROMIUM` and `MCO_CHROMEDRIVER` name others. A missing one
//! is an error naming it, never a skip.

use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::Value;

/// How long chromedriver and a new session may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often [`Browser::wait_js`] evaluates its script.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{what} not found ({path}): the dashboard's browser tests need Debian's `chromium` and \
         `chromium-driver` (apt-get install chromium chromium-driver), or {var} naming the binary"
    )]
    Missing {
        what: &'static str,
        path: String,
        var: &'static str,
    },
    #[error("starting chromedriver: {0}")]
    Spawn(std::io::Error),
    #[error("chromedriver did not answer on port {port} within {secs} s")]
    NotReady { port: u16, secs: u64 },
    #[error("WebDriver session: {0}")]
    Session(String),
}

/// `$VAR`, else `default`, if it is an executable file or a name on `PATH`.
fn binary(var: &'static str, default: &str, what: &'static str) -> Result<PathBuf, Error> {
    let name = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let found = if name.contains('/') {
        Path::new(&name).is_file().then(|| PathBuf::from(&name))
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&name))
                .find(|f| f.is_file())
        })
    };
    found.ok_or(Error::Missing {
        what,
        path: name,
        var,
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(9515)
}

/// The URL in `mco up`'s log line `mco up: dashboard on URL`, once `log` has it.
pub fn dashboard_url(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("mco up: dashboard on "))?;
    Some(line.rsplit(' ').next()?.to_string())
}

/// One headless browser window.
pub struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless window of
    /// `width` x `height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Result<Browser, Error> {
        let driver_bin = binary("MCO_CHROMEDRIVER", "chromedriver", "chromedriver")?;
        let chromium = binary("MCO_CHROMIUM", "chromium", "chromium")?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Spawn)?;
        let profile = tempfile::tempdir().map_err(Error::Spawn)?;
        let port = free_port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: Drop kills chromedriver and the browsers it started.
            .process_group(0)
            .spawn()
            .map_err(Error::Spawn)?;
        let mut b = Browser {
            rt,
            client: None,
            driver,
            _profile: profile,
        };
        let url = format!("http://127.0.0.1:{port}");
        let caps: serde_json::Map<String, Value> = serde_json::from_value(serde_json::json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    // Containers run tests as root, where Chromium's sandbox cannot start.
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--no-first-run",
                    format!("--user-data-dir={}", b._profile.path().display()),
                    format!("--window-size={width},{height}"),
                ]
            }
        }))
        .unwrap_or_default();
        let start = Instant::now();
        let client = loop {
            let attempt = b.rt.block_on(async {
                let connector = hyper_util::client::legacy::connect::HttpConnector::new();
                ClientBuilder::new(connector)
                    .capabilities(caps.clone())
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())
            });
            match attempt {
                Ok(c) => break c,
                // Not listening yet: connection refused until chromedriver is up.
                Err(e) if start.elapsed() < START_TIMEOUT && e.contains("onnect") => {
                    std::thread::sleep(POLL);
                    if let Ok(Some(_)) = b.driver.try_wait() {
                        return Err(Error::NotReady {
                            port,
                            secs: start.elapsed().as_secs(),
                        });
                    }
                }
                Err(e) if start.elapsed() < START_TIMEOUT => {
                    return Err(Error::Session(e));
                }
                Err(_) => {
                    return Err(Error::NotReady {
                        port,
                        secs: START_TIMEOUT.as_secs(),
                    });
                }
            }
        };
        b.client = Some(client);
        Ok(b)
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        let c = self.client();
        self.rt
            .block_on(c.goto(url))
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// The value of `script` (a function body: `return …;`) run in the page.
    pub fn js(&self, script: &str) -> Value {
        let c = self.client();
        self.rt
            .block_on(c.execute(script, vec![]))
            .unwrap_or_else(|e| panic!("running {script:?}: {e}"))
    }

    /// Evaluates `script` until it returns something other than `null`, `false`, `""` or `0`,
    /// and returns that; fails after `secs` seconds, naming `what` and the last value.
    pub fn wait_js(&self, what: &str, secs: u64, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.js(script);
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {secs} s waiting in the browser for {what}; last: {v}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// The visible text of the first element matching `css`.
    pub fn text(&self, css: &str) -> String {
        let c = self.client();
        self.rt
            .block_on(async { c.find(Locator::Css(css)).await?.text().await })
            .unwrap_or_else(|e| panic!("reading the text of {css}: {e}"))
    }

    /// Presses and releases `key` (a char, or a [`Key`]) wherever
    /// the focus is, as a user's keyboard does.
    pub fn press(&self, key: impl Into<char>) {
        use fantoccini::actions::{InputSource as _, KeyAction, KeyActions};
        let value = key.into();
        let actions = KeyActions::new("keyboard".to_string())
            .then(KeyAction::Down { value })
            .then(KeyAction::Up { value });
        let c = self.client();
        self.rt
            .block_on(c.perform_actions(actions))
            .unwrap_or_else(|e| panic!("pressing {value:?}: {e}"));
    }

    /// Writes a PNG of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        let c = self.client();
        let png = self
            .rt
            .block_on(c.screenshot())
            .unwrap_or_else(|e| panic!("taking a screenshot: {e}"));
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closing the session needs our runtime, which cannot run inside another one: there
        // (a failed bench), killing the group below is enough.
        if let Some(c) = self.client.take()
            && tokio::runtime::Handle::try_current().is_err()
        {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), c.close()).await });
        }
        // chromedriver's whole group, the browsers it started included (no unsafe code here).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.wait();
    }
}
