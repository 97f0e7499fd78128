//! Pinned images on the host: ask CRI-O once about every image of the node's PinnedImageSets
//! (at most [`MAX_CHECKS`] questions at once), pull those it lacks (at most [`MAX_PULLS`] at
//! once), check that each pulled is there, then list them in CRI-O's drop-in
//! ([`mco_api::pinned::CRIO_PINNED_IMAGES_DROPIN`]) and reload CRI-O, so its image garbage
//! collection never removes them. As upstream's daemon, the drop-in is written last: until
//! then the kubelet may still collect images in an emergency. With no image left, the drop-in
//! is removed and CRI-O reloaded.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use mco_api::pinned::CRIO_PINNED_IMAGES_DROPIN;
use serde::Serialize;

use super::Engine;
use crate::error::HostError;
use crate::host::fs::FileAttrs;

/// CRI-O's unit, reloaded to read the drop-in.
pub const CRIO_UNIT: &str = "crio.service";
/// Most pulls in flight at once, as upstream's prefetch workers.
pub const MAX_PULLS: usize = 5;
/// Most presence checks at once: each is one short `crictl inspecti` on the node's own socket,
/// so a few more than upstream's 5 workers asking CRI-O's ImageStatus, yet a 500-image set
/// never forks hundreds of processes at once.
pub const MAX_CHECKS: usize = 8;

/// The drop-in listing `images`, as TOML (`[crio.image] pinned_images = [...]`).
pub fn crio_dropin(images: &[String]) -> String {
    #[derive(Serialize)]
    struct Doc<'a> {
        crio: Crio<'a>,
    }
    #[derive(Serialize)]
    struct Crio<'a> {
        image: Image<'a>,
    }
    #[derive(Serialize)]
    struct Image<'a> {
        pinned_images: &'a [String],
    }
    toml::to_string(&Doc {
        crio: Crio {
            image: Image {
                pinned_images: images,
            },
        },
    })
    .unwrap_or_default()
}

/// Whether the drop-in `on_disk` already pins exactly `images`: compared as TOML, not as
/// bytes, so a drop-in upstream's daemon wrote (Go's encoder indents its tables) is kept, and a
/// takeover neither rewrites it nor reloads CRI-O. No images wants no drop-in.
pub fn dropin_pins(on_disk: Option<&[u8]>, images: &[String]) -> bool {
    let parse = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<toml::Table>().ok())
    };
    match on_disk {
        None => images.is_empty(),
        Some(_) if images.is_empty() => false,
        Some(b) => {
            let want = parse(crio_dropin(images).as_bytes());
            want.is_some() && parse(b) == want
        }
    }
}

/// Why pinning failed, in upstream's words where users grep for them.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("failed to pull image {image:?}: {source}")]
    Pull {
        image: String,
        #[source]
        source: HostError,
    },
    #[error(
        "invalid image reference {0:?}: an image must be referenced by digest (host[:port][/namespace]/name@sha256:<digest>)"
    )]
    Invalid(String),
    #[error("failed to pull image: image removed during sync: {0}")]
    Missing(String),
    /// The pass was asked to stop (the node's sets changed): not a failure.
    #[error("pinning stopped: the node's PinnedImageSets changed")]
    Stopped,
    #[error("failed to write CRIO config file: {0}")]
    Write(#[source] HostError),
    #[error("could not apply update: reloading crio configuration failed. Error: {0}")]
    Reload(#[source] HostError),
    #[error(transparent)]
    Host(#[from] HostError),
}

/// What the node holds of the images it is to pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The images the store does not hold, in the order asked: the ones to pull.
    pub absent: Vec<String>,
    /// Whether CRI-O's drop-in lists exactly the images asked about (no drop-in for none).
    pub pinned: bool,
}

impl Held {
    /// Whether there is nothing to pull and nothing to pin.
    pub fn up_to_date(&self) -> bool {
        self.absent.is_empty() && self.pinned
    }
}

/// Refuses anything that is not a reference by digest. The API server's schema checks
/// references; a cluster's own CRD may not, and nothing that is not one reaches crictl's
/// command line.
fn check_refs(images: &[String]) -> Result<(), PinError> {
    match images.iter().find(|i| !mco_api::pinned::valid_image_ref(i)) {
        Some(bad) => Err(PinError::Invalid(bad.clone())),
        None => Ok(()),
    }
}

/// Runs `each` once on each of `images`, at most `width` at once, taking them in list order,
/// and returns the answers in list order. After a failure, or once `stop` is set, no new image
/// is taken and those in flight end (a pull in flight sees `stop` itself and is killed). A
/// stop is reported as [`PinError::Stopped`]; otherwise the failure reported is that of the
/// first failed image in list order: every image before it was taken and has ended, so it is
/// the one that asking one image after the other would have met first.
fn each_bounded<T: Send>(
    images: &[String],
    width: usize,
    stop: &AtomicBool,
    each: impl Fn(&str) -> Result<T, PinError> + Sync,
) -> Result<Vec<T>, PinError> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, T)>> = Mutex::default();
    let failed: Mutex<Vec<(usize, PinError)>> = Mutex::default();
    let failed_any = || {
        !failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    };
    // The workers log under the pass's span, as the pass does (a process hosting many
    // daemons tells their logs apart by the span's node).
    let span = tracing::Span::current();
    std::thread::scope(|s| {
        for _ in 0..width.min(images.len()) {
            s.spawn(|| {
                let _in_span = span.enter();
                while !failed_any() && !stop.load(Ordering::SeqCst) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(image) = images.get(i) else { break };
                    match each(image) {
                        Ok(t) => done
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((i, t)),
                        Err(e) => failed
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((i, e)),
                    }
                }
            });
        }
    });
    if stop.load(Ordering::SeqCst) {
        return Err(PinError::Stopped);
    }
    let failed = failed.into_inner().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, e)) = failed.into_iter().min_by_key(|(i, _)| *i) {
        return Err(e);
    }
    let mut done = done.into_inner().unwrap_or_else(PoisonError::into_inner);
    done.sort_by_key(|(i, _)| *i);
    Ok(done.into_iter().map(|(_, t)| t).collect())
}

/// Pulls each of `images` with `pull`, as [`each_bounded`] runs it: a failure is reported as
/// [`PinError::Pull`] of its image, and what was pulled stays.
fn pull_all(
    images: &[String],
    width: usize,
    stop: &AtomicBool,
    pull: impl Fn(&str) -> Result<(), HostError> + Sync,
) -> Result<(), PinError> {
    each_bounded(images, width, stop, |image| {
        pull(image).map_err(|source| PinError::Pull {
            image: image.to_string(),
            source,
        })
    })
    .map(drop)
}

impl Engine {
    /// What the node holds of `images` (sorted, each once): the store is asked once about each
    /// (one `crictl inspecti`), at most [`MAX_CHECKS`] at once, and the drop-in read. A failed
    /// question ends it with the error of the first failed image in list order. A node that
    /// already holds and pins them all has nothing to do or report, as after every reboot.
    /// Once `stop` is set (the node's sets changed) no new image is asked about: the pass ends
    /// with [`PinError::Stopped`] as soon as the questions in flight are answered, as
    /// [`Engine::pin_images`] stops its pulls.
    pub fn pinned_held(&self, images: &[String], stop: &AtomicBool) -> Result<Held, PinError> {
        check_refs(images)?;
        let on_disk = self.host.fs.read_optional(CRIO_PINNED_IMAGES_DROPIN)?;
        let store = &*self.host.images;
        let present = each_bounded(images, MAX_CHECKS, stop, |image| {
            Ok(store.present(image, stop)?)
        })?;
        let absent = images
            .iter()
            .zip(present)
            .filter(|(_, present)| !present)
            .map(|(image, _)| image.clone())
            .collect();
        Ok(Held {
            absent,
            pinned: dropin_pins(on_disk.as_deref(), images),
        })
    }

    /// Pulls the images `held` ([`Engine::pinned_held`] of `images`) found absent, at most
    /// [`MAX_PULLS`] at once, checks each is there (at most [`MAX_CHECKS`] at once), then pins
    /// `images`; returns whether CRI-O was reloaded. An image found present is not asked about
    /// again: one question before, one pull and one question after each new image. A failed
    /// pull ends the pass with that image's error once the pulls in flight finish; what they
    /// pulled stays. Once `stop` is set (the node's sets changed) no new image is taken, the
    /// pulls in flight are killed and nothing is pinned: the pass ends with
    /// [`PinError::Stopped`] within about a second, keeping what was already pulled.
    pub fn pin_images(
        &self,
        images: &[String],
        held: &Held,
        stop: &AtomicBool,
    ) -> Result<bool, PinError> {
        check_refs(images)?;
        check_refs(&held.absent)?;
        let store = &*self.host.images;
        pull_all(&held.absent, MAX_PULLS, stop, |image| {
            store.pull(image, stop)
        })?;
        each_bounded(&held.absent, MAX_CHECKS, stop, |image| {
            if store.present(image, stop)? {
                Ok(())
            } else {
                Err(PinError::Missing(image.to_string()))
            }
        })?;
        let fs = &self.host.fs;
        let on_disk = fs.read_optional(CRIO_PINNED_IMAGES_DROPIN)?;
        if images.is_empty() {
            if on_disk.is_none() {
                return Ok(false);
            }
            fs.remove_file(CRIO_PINNED_IMAGES_DROPIN)
                .map_err(PinError::Write)?;
        } else {
            let want = crio_dropin(images);
            if dropin_pins(on_disk.as_deref(), images) {
                tracing::info!("CRI-O config file is up to date, no reload required");
                return Ok(false);
            }
            fs.write_atomic(
                CRIO_PINNED_IMAGES_DROPIN,
                want.as_bytes(),
                &FileAttrs::mode(0o644),
            )
            .map_err(PinError::Write)?;
        }
        self.host
            .systemd
            .reload(CRIO_UNIT)
            .map_err(PinError::Reload)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Barrier};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::host::Host;
    use crate::host::images::ContainerImages;

    /// `n` distinct references by digest, sorted.
    fn many(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("quay.io/example/app@sha256:{i:064x}"))
            .collect()
    }

    /// A store whose pulls take `delay`, recording how many run at once; a pull of `failing`
    /// fails.
    #[derive(Default)]
    struct Slow {
        delay: Duration,
        failing: Option<String>,
        held: Mutex<BTreeSet<String>>,
        pulls: AtomicUsize,
        in_flight: AtomicUsize,
        most: AtomicUsize,
    }

    impl ContainerImages for Arc<Slow> {
        fn pull(&self, image: &str, _stop: &AtomicBool) -> crate::error::Result<()> {
            self.pulls.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(self.delay);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if self.failing.as_deref() == Some(image) {
                return Err(unauthorized(image));
            }
            self.held.lock().unwrap().insert(image.to_string());
            Ok(())
        }

        fn present(&self, image: &str, _stop: &AtomicBool) -> crate::error::Result<bool> {
            Ok(self.held.lock().unwrap().contains(image))
        }
    }

    fn engine_with(store: &Arc<Slow>) -> (tempfile::TempDir, Engine) {
        let t = tempfile::tempdir().unwrap();
        let mut host = Host::sim(t.path()).unwrap();
        host.images = Box::new(Arc::clone(store));
        (t, Engine::new(host).unwrap())
    }

    const A: &str =
        "quay.io/example/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const B: &str =
        "quay.io/example/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdee";

    fn engine() -> (tempfile::TempDir, Engine) {
        let t = tempfile::tempdir().unwrap();
        let host = Host::sim(t.path()).unwrap();
        (t, Engine::new(host).unwrap())
    }

    /// One pass as the worker makes it: what is held, then what is missing pulled and pinned.
    fn pin(e: &Engine, images: &[String]) -> Result<bool, PinError> {
        let held = e.pinned_held(images, &AtomicBool::new(false))?;
        e.pin_images(images, &held, &AtomicBool::new(false))
    }

    fn up_to_date(e: &Engine, images: &[String]) -> bool {
        e.pinned_held(images, &AtomicBool::new(false))
            .unwrap()
            .up_to_date()
    }

    fn reloads(e: &Engine) -> usize {
        e.host
            .fs
            .read_optional(crate::host::paths::SIM_SYSTEMD_LOG)
            .unwrap()
            .map(|d| {
                String::from_utf8_lossy(&d)
                    .lines()
                    .filter(|l| *l == "reload crio.service")
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn the_dropin_lists_the_images_as_crio_reads_them() {
        let text = crio_dropin(&[A.to_string(), B.to_string()]);
        let doc: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            doc["crio"]["image"]["pinned_images"],
            toml::Value::Array(vec![A.into(), B.into()])
        );
    }

    /// Upstream's daemon writes the drop-in with Go's TOML encoder, which indents tables. A
    /// node taken over with its images held and that drop-in is up to date: nothing written,
    /// CRI-O not reloaded. Another list, or more in the file than the list, is rewritten.
    #[test]
    fn upstreams_dropin_for_the_same_images_is_kept_without_a_reload() {
        let (_t, e) = engine();
        let images = vec![A.to_string(), B.to_string()];
        pin(&e, &images).unwrap();
        let before = reloads(&e);
        let upstream = format!("[crio]\n  [crio.image]\n    pinned_images = [\"{A}\", \"{B}\"]\n");
        assert_ne!(upstream, crio_dropin(&images));
        e.host
            .fs
            .write_atomic(
                CRIO_PINNED_IMAGES_DROPIN,
                upstream.as_bytes(),
                &FileAttrs::mode(0o644),
            )
            .unwrap();
        assert!(up_to_date(&e, &images));
        assert!(!pin(&e, &images).unwrap(), "no reload");
        assert_eq!(reloads(&e), before);
        assert_eq!(
            e.host.fs.read_to_string(CRIO_PINNED_IMAGES_DROPIN).unwrap(),
            upstream,
            "kept as upstream wrote it"
        );
        assert!(!dropin_pins(Some(upstream.as_bytes()), &[A.to_string()]));
        let more = format!("{upstream}    pause_image = \"x\"\n");
        assert!(!dropin_pins(Some(more.as_bytes()), &images));
        assert!(!dropin_pins(Some(b"not toml ["), &images));
        assert!(dropin_pins(None, &[]));
        assert!(!dropin_pins(Some(upstream.as_bytes()), &[]));
    }

    #[test]
    fn images_are_pulled_then_pinned_once_and_unpinned_when_none_is_left() {
        let (_t, e) = engine();
        let images = vec![A.to_string(), B.to_string()];
        assert!(!up_to_date(&e, &images));
        assert!(pin(&e, &images).unwrap(), "the first pin reloads CRI-O");
        assert!(
            e.host.images.present(A, &AtomicBool::new(false)).unwrap()
                && e.host.images.present(B, &AtomicBool::new(false)).unwrap()
        );
        assert_eq!(
            e.host.fs.read_to_string(CRIO_PINNED_IMAGES_DROPIN).unwrap(),
            crio_dropin(&images)
        );
        assert!(up_to_date(&e, &images));
        assert!(!pin(&e, &images).unwrap(), "nothing changed: no reload");
        assert!(!up_to_date(&e, &[]));
        assert!(pin(&e, &[]).unwrap(), "the drop-in removed: a reload");
        assert!(!e.host.fs.exists(CRIO_PINNED_IMAGES_DROPIN).unwrap());
        assert!(up_to_date(&e, &[]));
        assert!(!pin(&e, &[]).unwrap());
        assert_eq!(reloads(&e), 2);
    }

    #[test]
    fn a_reference_that_is_not_one_reaches_no_tool() {
        let (_t, e) = engine();
        for bad in ["quay.io/example/a:latest", "--help", &format!("-{A}")] {
            let images = [A.to_string(), bad.to_string()];
            let err = e.pinned_held(&images, &AtomicBool::new(false)).unwrap_err();
            assert!(matches!(err, PinError::Invalid(ref i) if i == bad), "{err}");
            let held = Held {
                absent: images.to_vec(),
                pinned: false,
            };
            let err = e
                .pin_images(&images, &held, &AtomicBool::new(false))
                .unwrap_err();
            assert!(matches!(err, PinError::Invalid(ref i) if i == bad), "{err}");
        }
        assert!(
            !e.host.images.present(A, &AtomicBool::new(false)).unwrap(),
            "nothing pulled"
        );
    }

    #[test]
    fn a_failed_pull_names_the_image_and_pins_nothing() {
        let (_t, e) = engine();
        let bad = A.replace("quay.io", "registry.invalid");
        let err = pin(&e, &[bad.clone(), B.to_string()]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("failed to pull image {bad:?}")),
            "{err}"
        );
        assert!(!e.host.fs.exists(CRIO_PINNED_IMAGES_DROPIN).unwrap());
        assert_eq!(reloads(&e), 0);
    }

    #[test]
    fn pulls_run_at_most_five_at_once_each_once() {
        let images = many(12);
        let pulled = Mutex::new(vec![]);
        let (in_flight, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        pull_all(&images, MAX_PULLS, &AtomicBool::new(false), |image| {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            in_flight.fetch_sub(1, Ordering::SeqCst);
            pulled.lock().unwrap().push(image.to_string());
            Ok(())
        })
        .unwrap();
        let most = most.into_inner();
        assert!((2..=MAX_PULLS).contains(&most), "{most} pulls at once");
        let mut pulled = pulled.into_inner().unwrap();
        pulled.sort();
        assert_eq!(pulled, images);
        pull_all(&[], MAX_PULLS, &AtomicBool::new(false), |_| {
            unreachable!("nothing to pull")
        })
        .unwrap();
    }

    fn unauthorized(image: &str) -> HostError {
        HostError::Command {
            command: format!("crictl pull {image}"),
            stderr: "unauthorized".into(),
            status: "exit status 1".into(),
        }
    }

    #[test]
    fn after_a_failed_pull_no_new_image_is_taken() {
        let images = many(4);
        let pulled = Mutex::new(vec![]);
        let err = pull_all(&images, 1, &AtomicBool::new(false), |image| {
            pulled.lock().unwrap().push(image.to_string());
            if image == images[1] {
                return Err(unauthorized(image));
            }
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(err, PinError::Pull { ref image, .. } if *image == images[1]));
        assert_eq!(pulled.into_inner().unwrap(), images[..2]);
    }

    #[test]
    fn of_failures_in_flight_together_the_first_in_list_order_is_reported() {
        let images = many(MAX_PULLS);
        // Every worker holds its image until all five are in flight.
        let all_in = Barrier::new(MAX_PULLS);
        let err = pull_all(&images, MAX_PULLS, &AtomicBool::new(false), |image| {
            all_in.wait();
            if image == images[4] {
                return Err(unauthorized(image));
            }
            if image == images[2] {
                std::thread::sleep(Duration::from_millis(50));
                return Err(unauthorized(image));
            }
            Ok(())
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("failed to pull image {:?}: ", images[2])),
            "{err}"
        );
    }

    #[test]
    fn once_stopped_no_new_image_is_taken_and_the_pass_says_so() {
        let images = many(12);
        let stop = AtomicBool::new(false);
        let pulled = AtomicUsize::new(0);
        let err = pull_all(&images, MAX_PULLS, &stop, |_| {
            // The third pull sees the sets change; the ones in flight finish.
            if pulled.fetch_add(1, Ordering::SeqCst) == 2 {
                stop.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(20));
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(err, PinError::Stopped), "{err}");
        let pulled = pulled.into_inner();
        assert!(pulled <= MAX_PULLS + 2, "{pulled} pulls after the stop");
        // A stop before any pull takes none.
        let err = pull_all(&images, MAX_PULLS, &stop, |_| unreachable!("stopped")).unwrap_err();
        assert!(matches!(err, PinError::Stopped), "{err}");
    }

    #[test]
    fn a_stopped_pass_pins_nothing_and_keeps_what_it_pulled() {
        let store = Arc::new(Slow::default());
        let (_t, e) = engine_with(&store);
        let images = many(3);
        let held = e.pinned_held(&images, &AtomicBool::new(false)).unwrap();
        let err = e
            .pin_images(&images, &held, &AtomicBool::new(true))
            .unwrap_err();
        assert!(matches!(err, PinError::Stopped), "{err}");
        assert_eq!(store.pulls.load(Ordering::SeqCst), 0);
        assert!(!e.host.fs.exists(CRIO_PINNED_IMAGES_DROPIN).unwrap());
        assert_eq!(reloads(&e), 0);
    }

    #[test]
    fn a_node_pulls_twelve_images_at_most_five_at_once() {
        let store = Arc::new(Slow {
            delay: Duration::from_millis(20),
            ..Slow::default()
        });
        let (_t, e) = engine_with(&store);
        let images = many(12);
        assert!(pin(&e, &images).unwrap());
        let most = store.most.load(Ordering::SeqCst);
        assert!((2..=MAX_PULLS).contains(&most), "{most} pulls at once");
        assert_eq!(store.pulls.load(Ordering::SeqCst), 12);
        assert!(up_to_date(&e, &images));
    }

    #[test]
    fn a_failed_pull_among_many_is_reported_and_what_was_pulled_stays() {
        let images = many(12);
        let store = Arc::new(Slow {
            delay: Duration::from_millis(10),
            failing: Some(images[6].clone()),
            ..Slow::default()
        });
        let (_t, e) = engine_with(&store);
        let err = pin(&e, &images).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "failed to pull image {:?}: error running crictl pull {}: unauthorized: exit status 1",
                images[6], images[6]
            )
        );
        assert!(!e.host.fs.exists(CRIO_PINNED_IMAGES_DROPIN).unwrap());
        let pulled = store.pulls.load(Ordering::SeqCst);
        let held = e.pinned_held(&images, &AtomicBool::new(false)).unwrap();
        assert_eq!(held.absent.len(), 12 + 1 - pulled, "the pulled ones stay");
        assert!(held.absent.contains(&images[6]));
    }

    /// Blocks the caller until `until` holds or `deadline` passes.
    fn wait_for(deadline: Instant, until: impl Fn() -> bool) {
        while !until() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A store whose presence checks each wait until [`MAX_CHECKS`] have been seen at once (or
    /// its deadline passes), recording every question; `slow` answers 50 ms later, `failing`
    /// fails, `lost` vanishes as soon as it is pulled.
    struct Checks {
        deadline: Mutex<Instant>,
        held: Mutex<BTreeSet<String>>,
        asked: Mutex<Vec<String>>,
        in_flight: AtomicUsize,
        most: AtomicUsize,
        slow: Option<String>,
        failing: Vec<String>,
        lost: Vec<String>,
    }

    impl Checks {
        fn new() -> Checks {
            Checks {
                deadline: Mutex::new(Instant::now() + Duration::from_secs(10)),
                held: Mutex::default(),
                asked: Mutex::default(),
                in_flight: AtomicUsize::new(0),
                most: AtomicUsize::new(0),
                slow: None,
                failing: vec![],
                lost: vec![],
            }
        }

        /// Starts counting anew, for the next pass.
        fn reset(&self) {
            *self.deadline.lock().unwrap() = Instant::now() + Duration::from_secs(10);
            self.most.store(0, Ordering::SeqCst);
            self.asked.lock().unwrap().clear();
        }

        fn asked(&self) -> Vec<String> {
            let mut asked = self.asked.lock().unwrap().clone();
            asked.sort();
            asked
        }
    }

    impl ContainerImages for Arc<Checks> {
        fn pull(&self, image: &str, _stop: &AtomicBool) -> crate::error::Result<()> {
            if !self.lost.iter().any(|i| i == image) {
                self.held.lock().unwrap().insert(image.to_string());
            }
            Ok(())
        }

        fn present(&self, image: &str, _stop: &AtomicBool) -> crate::error::Result<bool> {
            self.asked.lock().unwrap().push(image.to_string());
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let deadline = *self.deadline.lock().unwrap();
            wait_for(deadline, || self.most.load(Ordering::SeqCst) >= MAX_CHECKS);
            if self.slow.as_deref() == Some(image) {
                std::thread::sleep(Duration::from_millis(50));
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if self.failing.iter().any(|i| i == image) {
                return Err(HostError::Command {
                    command: format!("crictl inspecti {image}"),
                    stderr: "connection refused".into(),
                    status: "exit status 1".into(),
                });
            }
            Ok(self.held.lock().unwrap().contains(image))
        }
    }

    fn engine_checking(store: &Arc<Checks>) -> (tempfile::TempDir, Engine) {
        let t = tempfile::tempdir().unwrap();
        let mut host = Host::sim(t.path()).unwrap();
        host.images = Box::new(Arc::clone(store));
        (t, Engine::new(host).unwrap())
    }

    #[test]
    fn presence_checks_run_at_most_n_at_once_each_image_asked_once_before_and_new_ones_after() {
        let images = many(3 * MAX_CHECKS);
        let store = Arc::new(Checks::new());
        // Every third image is already there.
        let (held, new): (Vec<_>, Vec<_>) = images
            .iter()
            .cloned()
            .enumerate()
            .partition(|(i, _)| i % 3 == 0);
        let (held, new): (Vec<String>, Vec<String>) = (
            held.into_iter().map(|(_, i)| i).collect(),
            new.into_iter().map(|(_, i)| i).collect(),
        );
        store.held.lock().unwrap().extend(held.iter().cloned());
        let (_t, e) = engine_checking(&store);

        let found = e.pinned_held(&images, &AtomicBool::new(false)).unwrap();
        assert_eq!(found.absent, new, "the absent ones, in list order");
        assert_eq!(store.asked(), images, "each image asked once");
        let most = store.most.load(Ordering::SeqCst);
        assert_eq!(most, MAX_CHECKS, "{most} checks at once");

        store.reset();
        assert!(
            e.pin_images(&images, &found, &AtomicBool::new(false))
                .unwrap()
        );
        assert_eq!(store.asked(), new, "only the pulled ones asked again, once");
        let most = store.most.load(Ordering::SeqCst);
        assert_eq!(most, MAX_CHECKS, "{most} checks at once after the pulls");
    }

    #[test]
    fn of_failed_presence_checks_the_first_in_list_order_is_reported() {
        let images = many(MAX_CHECKS);
        // All are asked at once; the last fails at once, the third 50 ms later.
        let store = Arc::new(Checks {
            slow: Some(images[2].clone()),
            failing: vec![images[2].clone(), images[MAX_CHECKS - 1].clone()],
            ..Checks::new()
        });
        let (_t, e) = engine_checking(&store);
        let err = e.pinned_held(&images, &AtomicBool::new(false)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "error running crictl inspecti {}: connection refused: exit status 1",
                images[2]
            )
        );
        assert_eq!(store.asked(), images, "each image asked once");

        // After the pulls, the first image in list order found missing is reported.
        let store = Arc::new(Checks {
            slow: Some(images[2].clone()),
            lost: vec![images[2].clone(), images[MAX_CHECKS - 1].clone()],
            ..Checks::new()
        });
        let (_t, e) = engine_checking(&store);
        let found = e.pinned_held(&images, &AtomicBool::new(false)).unwrap();
        store.reset();
        let err = e
            .pin_images(&images, &found, &AtomicBool::new(false))
            .unwrap_err();
        assert!(
            matches!(err, PinError::Missing(ref i) if *i == images[2]),
            "{err}"
        );
        assert!(!e.host.fs.exists(CRIO_PINNED_IMAGES_DROPIN).unwrap());
    }

    /// A store whose pull of `blocking` never ends on its own: it waits for the stop, as a
    /// killed `crictl pull` does; the others are instant.
    #[derive(Default)]
    struct Stuck {
        blocking: String,
        started: AtomicBool,
        held: Mutex<BTreeSet<String>>,
    }

    impl ContainerImages for Arc<Stuck> {
        fn pull(&self, image: &str, stop: &AtomicBool) -> crate::error::Result<()> {
            if image == self.blocking {
                self.started.store(true, Ordering::SeqCst);
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Err(HostError::Command {
                    command: format!("crictl pull {image}"),
                    stderr: String::new(),
                    status: crate::host::cmd::STOPPED.into(),
                });
            }
            self.held.lock().unwrap().insert(image.to_string());
            Ok(())
        }

        fn present(&self, image: &str, _stop: &AtomicBool) -> crate::error::Result<bool> {
            Ok(self.held.lock().unwrap().contains(image))
        }
    }

    #[test]
    fn a_stop_ends_a_pull_that_would_never_end_and_keeps_what_was_pulled() {
        let images = many(3);
        let store = Arc::new(Stuck {
            blocking: images[1].clone(),
            ..Stuck::default()
        });
        let t = tempfile::tempdir().unwrap();
        let mut host = Host::sim(t.path()).unwrap();
        host.images = Box::new(Arc::clone(&store));
        let e = Arc::new(Engine::new(host).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let (e, stop, images) = (Arc::clone(&e), Arc::clone(&stop), images.clone());
            std::thread::spawn(move || {
                let held = e.pinned_held(&images, &AtomicBool::new(false)).unwrap();
                let _ = tx.send(e.pin_images(&images, &held, &stop));
            });
        }
        let underway =
            || store.started.load(Ordering::SeqCst) && store.held.lock().unwrap().len() == 2;
        wait_for(Instant::now() + Duration::from_secs(10), underway);
        assert!(underway(), "the stuck pull began and the others ended");
        stop.store(true, Ordering::SeqCst);
        let result = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the pass ended soon after the stop");
        assert!(matches!(result, Err(PinError::Stopped)), "{result:?}");
        assert!(!e.host.fs.exists(CRIO_PINNED_IMAGES_DROPIN).unwrap());
        assert_eq!(reloads(&e), 0);
        let held = e.pinned_held(&images, &AtomicBool::new(false)).unwrap();
        assert_eq!(held.absent, [images[1].clone()], "the others stay pulled");
    }

    /// A store whose presence checks wait until `open` is set, as `crictl inspecti`s against a
    /// slow CRI-O do, recording every question.
    #[derive(Default)]
    struct Gated {
        open: AtomicBool,
        asked: Mutex<Vec<String>>,
    }

    impl ContainerImages for Arc<Gated> {
        fn pull(&self, _image: &str, _stop: &AtomicBool) -> crate::error::Result<()> {
            Ok(())
        }

        fn present(&self, image: &str, _stop: &AtomicBool) -> crate::error::Result<bool> {
            self.asked.lock().unwrap().push(image.to_string());
            wait_for(Instant::now() + Duration::from_secs(10), || {
                self.open.load(Ordering::SeqCst)
            });
            Ok(false)
        }
    }

    #[test]
    fn a_stop_ends_a_long_pass_of_presence_checks_and_asks_no_new_image() {
        let images = many(3 * MAX_CHECKS);
        let store = Arc::new(Gated::default());
        let t = tempfile::tempdir().unwrap();
        let mut host = Host::sim(t.path()).unwrap();
        host.images = Box::new(Arc::clone(&store));
        let e = Arc::new(Engine::new(host).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let (e, stop, images) = (Arc::clone(&e), Arc::clone(&stop), images.clone());
            std::thread::spawn(move || {
                let _ = tx.send(e.pinned_held(&images, &stop));
            });
        }
        let underway = || store.asked.lock().unwrap().len() == MAX_CHECKS;
        wait_for(Instant::now() + Duration::from_secs(10), underway);
        assert!(underway(), "{MAX_CHECKS} questions in flight");
        stop.store(true, Ordering::SeqCst);
        // The questions in flight are answered, as a short inspecti is.
        store.open.store(true, Ordering::SeqCst);
        let result = rx
            .recv_timeout(Duration::from_secs(1))
            .expect("the pass ended within a second of the stop");
        assert!(matches!(result, Err(PinError::Stopped)), "{result:?}");
        assert_eq!(
            store.asked.lock().unwrap().len(),
            MAX_CHECKS,
            "no image asked about after the stop"
        );
    }
}
