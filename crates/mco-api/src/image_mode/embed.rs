//! The config a node in image mode applies, and how it is kept on disk: pure functions, shared by
//! the daemon (which applies and records it) and the machine config server (which hands a new
//! machine of a pool in image mode its image from the start).
//!
//! With an image, the config applied is the rendered config with its `osImageURL` replaced by
//! the image, the rendered config's own URL kept in an annotation beside the image (upstream's
//! `embedOCLImageInMachineConfig`). Everything after that (diff, plan, drain, rebase, reboot,
//! validation of the booted image) treats it as any change of `osImageURL`.
//!
//! On disk, as upstream keeps them, `currentconfig` holds the rendered config as the cluster
//! serves it, annotations removed (upstream's `extractOCLImageFromMachineConfig`), and
//! `currentimage` the image: [`split`] gives what is written, [`join`] what is read back.

use crate::MachineConfig;
use crate::constants::annotations::{OCL_OS_IMAGE_URL, ORIGINAL_OS_IMAGE_URL};

/// The config the daemon applies for `rendered` and `image`: `rendered` itself when `image` is
/// empty, else a copy whose `osImageURL` is `image`, annotated with the rendered config's own
/// URL ([`ORIGINAL_OS_IMAGE_URL`]) and the image ([`OCL_OS_IMAGE_URL`]).
pub fn embed(rendered: &MachineConfig, image: &str) -> MachineConfig {
    let mut mc = rendered.clone();
    if image.is_empty() {
        return mc;
    }
    let annotations = mc.metadata.annotations.get_or_insert_default();
    annotations.insert(
        ORIGINAL_OS_IMAGE_URL.into(),
        rendered.spec.os_image_url.clone(),
    );
    annotations.insert(OCL_OS_IMAGE_URL.into(), image.into());
    mc.spec.os_image_url = image.into();
    mc
}

/// The image embedded in `mc` ([`embed`]), `""` when there is none.
pub fn image_of(mc: &MachineConfig) -> &str {
    mc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OCL_OS_IMAGE_URL))
        .map_or("", String::as_str)
}

/// Undoes [`embed`]: the rendered config (its own `osImageURL` back, both annotations gone)
/// and the image. A config without either annotation comes back as it is, with no image.
pub fn split(mc: &MachineConfig) -> (MachineConfig, String) {
    let mut rendered = mc.clone();
    let Some(annotations) = rendered.metadata.annotations.as_mut() else {
        return (rendered, String::new());
    };
    if !annotations.contains_key(ORIGINAL_OS_IMAGE_URL)
        && !annotations.contains_key(OCL_OS_IMAGE_URL)
    {
        return (rendered, String::new());
    }
    let original = annotations
        .remove(ORIGINAL_OS_IMAGE_URL)
        .unwrap_or_default();
    let image = annotations.remove(OCL_OS_IMAGE_URL).unwrap_or_default();
    if annotations.is_empty() {
        rendered.metadata.annotations = None;
    }
    rendered.spec.os_image_url = original;
    (rendered, image)
}

/// The on-disk pair read back: `currentconfig` with the image of `currentimage` (its text,
/// trimmed; absent or empty is no image) embedded. The file is the truth: annotations a
/// `currentconfig` should not carry are dropped first.
pub fn join(current_config: &MachineConfig, current_image: Option<&str>) -> MachineConfig {
    let (rendered, _) = split(current_config);
    embed(&rendered, image_text(current_image))
}

/// The image a `currentimage` file names: its text trimmed, `""` for none.
pub fn image_text(file: Option<&str>) -> &str {
    file.map_or("", str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IMAGE: &str = "registry.example/os@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn rendered() -> MachineConfig {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": "rendered-worker-a", "annotations": {
                "machineconfiguration.openshift.io/generated-by-controller-version": "v1",
            }},
            "spec": {
                "osImageURL": "registry.example/rhcos:4.19",
                "config": {"ignition": {"version": "3.5.0"}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn embedding_an_image_replaces_the_os_image_and_records_both() {
        let r = rendered();
        let e = embed(&r, IMAGE);
        assert_eq!(e.spec.os_image_url, IMAGE);
        let a = e.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[ORIGINAL_OS_IMAGE_URL], "registry.example/rhcos:4.19");
        assert_eq!(a[OCL_OS_IMAGE_URL], IMAGE);
        assert_eq!(
            a["machineconfiguration.openshift.io/generated-by-controller-version"], "v1",
            "the rendered config's own annotations are kept"
        );
        assert_eq!(e.metadata.name, r.metadata.name);
        assert_eq!(e.spec.config, r.spec.config);
        assert_eq!(image_of(&e), IMAGE);
        // The rendered config itself is not touched.
        assert_eq!(r.spec.os_image_url, "registry.example/rhcos:4.19");
        assert_eq!(image_of(&r), "");
    }

    #[test]
    fn no_image_embeds_nothing() {
        let r = rendered();
        assert_eq!(embed(&r, ""), r);
        let mut bare = r.clone();
        bare.metadata.annotations = None;
        assert_eq!(embed(&bare, ""), bare);
    }

    #[test]
    fn splitting_gives_back_the_rendered_config_and_the_image() {
        let r = rendered();
        assert_eq!(split(&embed(&r, IMAGE)), (r.clone(), IMAGE.to_string()));
        assert_eq!(split(&r), (r.clone(), String::new()));
        // A config that had no annotations at all has none again.
        let mut bare = r.clone();
        bare.metadata.annotations = None;
        assert_eq!(split(&embed(&bare, IMAGE)), (bare, IMAGE.to_string()));
    }

    #[test]
    fn a_lone_annotation_is_still_split_off() {
        let mut e = rendered();
        e.metadata
            .annotations
            .get_or_insert_default()
            .insert(OCL_OS_IMAGE_URL.into(), IMAGE.into());
        let (r, image) = split(&e);
        assert_eq!(image, IMAGE);
        assert_eq!(
            r.spec.os_image_url, "",
            "upstream restores the missing original as empty"
        );
        assert!(
            !r.metadata
                .annotations
                .unwrap()
                .contains_key(OCL_OS_IMAGE_URL)
        );
    }

    #[test]
    fn the_on_disk_pair_is_read_back_embedded() {
        let r = rendered();
        // Upstream's own files: currentconfig without annotations, currentimage with a newline.
        let image_file = format!("{IMAGE}\n");
        let on_disk = join(&r, Some(&image_file));
        assert_eq!(on_disk, embed(&r, IMAGE));
        assert_eq!(image_of(&on_disk), IMAGE);
        for none in [None, Some(""), Some(" \n")] {
            assert_eq!(join(&r, none), r, "{none:?}");
        }
        // What mco writes reads back as what it applied.
        let (written, image) = split(&embed(&r, IMAGE));
        assert_eq!(join(&written, Some(&image)), embed(&r, IMAGE));
        // The file is the truth: a stale embedding in currentconfig gives way to it.
        let other = embed(&r, "registry.example/os@sha256:ffff");
        assert_eq!(join(&other, Some(IMAGE)), embed(&r, IMAGE));
        assert_eq!(join(&other, None), r);
    }
}
