//! `PinnedImageSet` (machineconfiguration.openshift.io/v1, GA in OpenShift 4.19): images that
//! the nodes of the pools it is for pull ahead of need and that CRI-O never garbage-collects.
//!
//! A set is for the pools whose `machineConfigSelector` matches its labels; the controller
//! lists it in those pools' `spec.pinnedImageSets`, each node's daemon pulls its images and
//! pins them in `/etc/crio/crio.conf.d/50-pinned-images`, and reports each set in its
//! MachineConfigNode's `status.pinnedImageSets`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most sets a MachineConfigNode reports (upstream's `maxItems` on
/// `status.pinnedImageSets`), so the most a node pins.
pub const MAX_SETS_PER_NODE: usize = 100;
/// The most images one set may list (upstream's `maxItems`).
pub const MAX_PINNED_IMAGES: usize = 500;
/// The longest image reference (upstream's `maxLength`).
pub const MAX_IMAGE_REF_LEN: usize = 447;
/// An image referenced by digest, as upstream's two CEL rules together accept it:
/// `host[:port][/namespace]/name@sha256:<64 hex>`. A pattern, not CEL, so both API servers
/// enforce it.
pub const IMAGE_DIGEST_PATTERN: &str = r"^([a-zA-Z0-9-]+\.)+[a-zA-Z0-9-]+(:[0-9]{2,5})?/([a-zA-Z0-9_-]{0,61}/)?[a-zA-Z0-9_.-]*@sha256:[a-f0-9]{64}$";
/// CRI-O's drop-in that pins the images (upstream's path).
pub const CRIO_PINNED_IMAGES_DROPIN: &str = "/etc/crio/crio.conf.d/50-pinned-images";
/// The pool synchronizer type upstream reports in `status.poolSynchronizersStatus`.
pub const POOL_SYNCHRONIZER: &str = "PinnedImageSets";
/// The pool condition upstream's pinned image set controller writes.
pub const POOL_DEGRADED: &str = "PinnedImageSetsDegraded";
/// The MachineConfigNode conditions the daemon writes.
pub const MCN_PROGRESSING: &str = "PinnedImageSetsProgressing";
pub const MCN_DEGRADED: &str = "PinnedImageSetsDegraded";

/// Images to pull ahead of need and pin on the nodes of the pools the set's labels select.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "PinnedImageSet",
    plural = "pinnedimagesets",
    singular = "pinnedimageset",
    derive = "PartialEq",
    derive = "Default",
    doc = "PinnedImageSet describes a set of images that should be pinned by CRI-O and pulled to the nodes which are members of the declared MachineConfigPools."
)]
#[serde(rename_all = "camelCase")]
pub struct PinnedImageSetSpec {
    /// Images by digest, pulled and pinned on the nodes of the set's pools; at most 500.
    #[schemars(
        length(min = 1, max = 500),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub pinned_images: Vec<PinnedImageRef>,
}

/// One image of a set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PinnedImageRef {
    /// `host[:port][/namespace]/name@sha256:<digest>`, at most 447 characters.
    #[schemars(
        length(min = 1, max = 447),
        regex(
            pattern = r"^([a-zA-Z0-9-]+\.)+[a-zA-Z0-9-]+(:[0-9]{2,5})?/([a-zA-Z0-9_-]{0,61}/)?[a-zA-Z0-9_.-]*@sha256:[a-f0-9]{64}$"
        )
    )]
    pub name: String,
}

/// One set in a MachineConfigNode's `status.pinnedImageSets` (upstream's
/// `MachineConfigNodeStatusPinnedImageSet`): the generation wanted, the one pulled and pinned,
/// and the last that failed with why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfigNodeStatusPinnedImageSet {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub current_generation: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub desired_generation: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub last_failed_generation: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32768))]
    pub last_failed_generation_error: String,
}

impl MachineConfigNodeStatusPinnedImageSet {
    /// Upstream's test for a node counted in the pool synchronizer's `updatedMachineCount`.
    pub fn is_current(&self) -> bool {
        matches!(self.desired_generation, Some(d) if d > 0 && self.current_generation == Some(d))
    }

    /// The generation the node wants failed and is not pinned: a pull that failed on an
    /// earlier generation while a newer one is in progress is not a failure.
    pub fn failed(&self) -> bool {
        self.last_failed_generation.is_some()
            && self.last_failed_generation == self.desired_generation
            && !self.is_current()
    }
}

/// Whether `image` is a reference upstream's CRD accepts, and one no tool could take for an
/// option (upstream's pattern lets a host start with `-`).
pub fn valid_image_ref(image: &str) -> bool {
    use std::sync::OnceLock;
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    image.len() <= MAX_IMAGE_REF_LEN
        && !image.starts_with('-')
        && RE
            .get_or_init(|| regex::Regex::new(IMAGE_DIGEST_PATTERN).expect("pattern compiles"))
            .is_match(image)
}

/// The sets a pool is for, by upstream's rule: its `machineConfigSelector` matches their labels
/// (an empty or absent selector matches none). Sorted by name, as the pool lists them.
pub fn sets_for_pool<'a>(
    pool: &crate::MachineConfigPool,
    sets: impl IntoIterator<Item = &'a PinnedImageSet>,
) -> Vec<&'a PinnedImageSet> {
    use kube::ResourceExt;
    let mut out: Vec<&PinnedImageSet> = sets
        .into_iter()
        .filter(|s| {
            crate::select::pool_rule_matches(
                pool.spec.machine_config_selector.as_ref(),
                s.metadata.labels.as_ref(),
            )
        })
        .collect();
    out.sort_by_key(|a| a.name_any());
    out
}

/// The images of `sets`, each once, sorted: what the CRI-O drop-in lists.
pub fn unique_sorted_images<'a>(sets: impl IntoIterator<Item = &'a PinnedImageSet>) -> Vec<String> {
    let mut out: Vec<String> = sets
        .into_iter()
        .flat_map(|s| s.spec.pinned_images.iter())
        .map(|i| i.name.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn image_references_are_checked_as_upstream_checks_them() {
        for ok in [
            format!("quay.io/openshift-release-dev/ocp-release@sha256:{DIGEST}"),
            format!("registry.example.com:5000/ns/app@sha256:{DIGEST}"),
            format!("registry.example.com/app@sha256:{DIGEST}"),
        ] {
            assert!(valid_image_ref(&ok), "{ok}");
        }
        for bad in [
            "quay.io/app:latest".to_string(),
            format!("quay.io/app@sha256:{}", &DIGEST[1..]),
            format!("quay.io/app@sha256:{}", DIGEST.to_uppercase()),
            format!("localhost/app@sha256:{DIGEST}"),
            format!("quay.io/a/b/c@sha256:{DIGEST}"),
            format!("quay.io/{}@sha256:{DIGEST}", "a".repeat(MAX_IMAGE_REF_LEN)),
            format!("-quay.io/app@sha256:{DIGEST}"),
        ] {
            assert!(!valid_image_ref(&bad), "{bad}");
        }
    }

    #[test]
    fn a_set_failed_only_on_the_generation_it_wants() {
        let e = |desired: i32, current: Option<i32>, failed: Option<i32>| {
            MachineConfigNodeStatusPinnedImageSet {
                name: "s".into(),
                desired_generation: Some(desired),
                current_generation: current,
                last_failed_generation: failed,
                last_failed_generation_error: "pull failed".into(),
            }
        };
        assert!(e(2, Some(1), Some(2)).failed());
        assert!(
            !e(3, Some(1), Some(2)).failed(),
            "an older failure, a newer try"
        );
        assert!(!e(2, Some(2), Some(2)).failed(), "pinned after all");
        assert!(!e(2, Some(1), None).failed());
    }

    #[test]
    fn the_crd_carries_upstreams_limits() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(PinnedImageSet::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let images = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["pinnedImages"];
        assert_eq!(images["maxItems"], MAX_PINNED_IMAGES);
        assert_eq!(images["minItems"], 1);
        let name = &images["items"]["properties"]["name"];
        assert_eq!(name["maxLength"], MAX_IMAGE_REF_LEN);
        assert_eq!(name["pattern"], IMAGE_DIGEST_PATTERN);
    }

    #[test]
    fn images_are_listed_once_and_sorted() {
        let set = |images: &[&str]| PinnedImageSet {
            metadata: Default::default(),
            spec: PinnedImageSetSpec {
                pinned_images: images
                    .iter()
                    .map(|n| PinnedImageRef {
                        name: n.to_string(),
                    })
                    .collect(),
            },
        };
        let a = set(&["b", " a ", ""]);
        let b = set(&["a", "c"]);
        assert_eq!(unique_sorted_images([&a, &b]), ["a", "b", "c"]);
    }
}
