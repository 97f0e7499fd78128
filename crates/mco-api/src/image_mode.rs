//! On-cluster image mode (machineconfiguration.openshift.io/v1, GA in OpenShift 4.19): a
//! `MachineOSConfig` opts a pool in, a `MachineOSBuild` is one image built from the pool's
//! rendered config, and the pool's nodes boot that image in place of the rendered config's
//! `osImageURL`.
//!
//! The builder (upstream's build controller, or any other) records a finished build in the
//! MachineOSBuild's `Succeeded` condition and `status.digestedImagePushSpec`, and the image the
//! pool should run in the MachineOSConfig's `status.currentImagePullSpec`. mco's node controller
//! then moves the pool's nodes to that pair (`desiredConfig`, `desiredImage`) within
//! `maxUnavailable`, and each daemon rebases to the image ([`pool_build`] says when).

pub mod embed;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// On a MachineOSConfig: the MachineOSBuild it is on (upstream's build controller sets it).
pub const CURRENT_BUILD_ANNOTATION: &str =
    "machineconfiguration.openshift.io/current-machine-os-build";
/// MachineOSBuild condition types (upstream's `BuildProgress`).
pub mod conditions {
    pub const PREPARED: &str = "Prepared";
    pub const BUILDING: &str = "Building";
    pub const FAILED: &str = "Failed";
    pub const INTERRUPTED: &str = "Interrupted";
    pub const SUCCEEDED: &str = "Succeeded";
}

/// Opts a pool into on-cluster image mode: how its image is built and where it is pushed.
/// Upstream requires the object's name to be its pool's.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "MachineOSConfig",
    plural = "machineosconfigs",
    singular = "machineosconfig",
    status = "MachineOSConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineOSConfig describes the configuration for a build process managed by the MCO."
)]
#[serde(rename_all = "camelCase")]
pub struct MachineOSConfigSpec {
    /// The pool whose nodes run the image.
    pub machine_config_pool: NameRef,
    /// How the image is built (`Job`).
    pub image_builder: ImageBuilder,
    /// The pull secret of the base OS image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_image_pull_secret: Option<NameRef>,
    /// The secret the built image is pushed with.
    pub rendered_image_push_secret: NameRef,
    /// Where the built image is pushed, by tag.
    #[schemars(length(min = 1, max = 447))]
    pub rendered_image_push_spec: String,
    /// Containerfile content layered on the OS image, per architecture; at most 4.
    #[serde(
        default,
        rename = "containerFile",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 4))]
    pub containerfile: Vec<Containerfile>,
}

/// A reference by name: a DNS-1123 subdomain, as upstream's CEL rule checks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NameRef {
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// The builder of a MachineOSConfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageBuilder {
    /// Upstream's only builder: `Job`.
    #[schemars(regex(pattern = "^Job$"))]
    pub image_builder_type: String,
}

/// Containerfile content for one architecture (`NoArch`: every one).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Containerfile {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = "^(ARM64|AMD64|PPC64LE|S390X|NoArch)$"))]
    pub containerfile_arch: String,
    #[schemars(length(max = 4096))]
    pub content: String,
}

/// What the builder says of a MachineOSConfig: the image its pool should run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineOSConfigStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The image by digest the pool's nodes boot.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 447))]
    pub current_image_pull_spec: String,
    /// The build that image came from.
    #[serde(
        default,
        rename = "machineOSBuild",
        skip_serializing_if = "Option::is_none"
    )]
    pub machine_os_build: Option<ObjectReference>,
}

/// A reference to an object by group, resource and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ObjectReference {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
}

/// One image built for a MachineOSConfig from one rendered config.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "machineconfiguration.openshift.io",
    version = "v1",
    kind = "MachineOSBuild",
    plural = "machineosbuilds",
    singular = "machineosbuild",
    status = "MachineOSBuildStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineOSBuild describes a build process managed and deployed by the MCO.",
    printcolumn = r#"{"name":"Prepared","type":"string","jsonPath":".status.conditions[?(@.type==\"Prepared\")].status"}"#,
    printcolumn = r#"{"name":"Building","type":"string","jsonPath":".status.conditions[?(@.type==\"Building\")].status"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"string","jsonPath":".status.conditions[?(@.type==\"Succeeded\")].status"}"#,
    printcolumn = r#"{"name":"Interrupted","type":"string","jsonPath":".status.conditions[?(@.type==\"Interrupted\")].status"}"#,
    printcolumn = r#"{"name":"Failed","type":"string","jsonPath":".status.conditions[?(@.type==\"Failed\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineOSBuildSpec {
    /// The rendered config the image was built from.
    pub machine_config: NameRef,
    /// The MachineOSConfig it was built for.
    #[serde(rename = "machineOSConfig")]
    pub machine_os_config: NameRef,
    /// Where it was pushed, by tag.
    #[schemars(length(min = 1, max = 447))]
    pub rendered_image_push_spec: String,
}

/// How a build went.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineOSBuildStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// The builder's own object (upstream's Job), kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub builder: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub related_objects: Vec<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_start: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_end: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The image by digest, once pushed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 447))]
    pub digested_image_push_spec: String,
}

impl MachineOSBuild {
    /// Whether the condition `type_` is `True`.
    pub fn is(&self, type_: &str) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
    }
}

/// Where a pool stands in image mode: what its node controller may move its nodes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolBuild {
    /// No MachineOSConfig for the pool: its nodes run the rendered config's `osImageURL`, and a
    /// node still on an image is moved back.
    NotLayered,
    /// The image built from the pool's rendered config is ready: nodes go to (config, image).
    Ready { config: String, image: String },
    /// The pool is in image mode and no image is ready for its rendered config: no node is moved.
    /// The text says why (upstream's words).
    Waiting(String),
}

/// The MachineOSConfig whose `spec.machineConfigPool` is `pool` (upstream's lookup: by that
/// field, not by name).
fn config_of<'a>(
    pool: &str,
    configs: impl IntoIterator<Item = &'a MachineOSConfig>,
) -> Option<&'a MachineOSConfig> {
    configs
        .into_iter()
        .find(|c| c.spec.machine_config_pool.name == pool)
}

/// Upstream's node-controller rule (`getConfigAndBuild`, `canLayeredContinue`): the
/// MachineOSConfig whose `spec.machineConfigPool` is the pool, and its build for the pool's
/// rendered config `rendered` (the one its `current-machine-os-build` annotation names, else
/// any for that config). The pool moves only once that build succeeded and the MachineOSConfig's
/// `currentImagePullSpec` is its image.
pub fn pool_build<'a>(
    pool: &str,
    rendered: &str,
    configs: impl IntoIterator<Item = &'a MachineOSConfig>,
    builds: impl IntoIterator<Item = &'a MachineOSBuild> + Clone,
) -> PoolBuild {
    use kube::ResourceExt;
    let Some(mosc) = config_of(pool, configs) else {
        return PoolBuild::NotLayered;
    };
    let mosc_name = mosc.name_any();
    let for_rendered = |b: &&MachineOSBuild| b.spec.machine_config.name == rendered;
    let annotated = mosc
        .annotations()
        .get(CURRENT_BUILD_ANNOTATION)
        .and_then(|name| builds.clone().into_iter().find(|b| &b.name_any() == name))
        .filter(for_rendered);
    let build = annotated.or_else(|| {
        builds
            .into_iter()
            .filter(for_rendered)
            .find(|b| b.spec.machine_os_config.name == mosc_name)
    });
    let Some(build) = build else {
        return PoolBuild::Waiting(format!(
            "No MachineOSBuild for MachineOSConfig {mosc_name} and MachineConfig {rendered}"
        ));
    };
    let pullspec = mosc
        .status
        .as_ref()
        .map(|s| s.current_image_pull_spec.as_str())
        .unwrap_or_default();
    if pullspec.is_empty() {
        return PoolBuild::Waiting("Desired image not set in MachineOSConfig".into());
    }
    let digested = build
        .status
        .as_ref()
        .map(|s| s.digested_image_push_spec.as_str())
        .unwrap_or_default();
    let name = build.name_any();
    if build.is(conditions::SUCCEEDED) {
        if digested == pullspec {
            return PoolBuild::Ready {
                config: rendered.to_string(),
                image: pullspec.to_string(),
            };
        }
        return PoolBuild::Waiting(format!(
            "Image built successfully, pullspec: {pullspec}, but MachineOSConfig {mosc_name:?} has not updated yet"
        ));
    }
    PoolBuild::Waiting(if build.is(conditions::FAILED) {
        format!("Image build failed: MachineOSBuild {name}")
    } else if build.is(conditions::INTERRUPTED) {
        format!("Image build interrupted: MachineOSBuild {name}")
    } else if build.is(conditions::BUILDING) {
        "Image build in progress".into()
    } else if build.is(conditions::PREPARED) {
        "Image build pending".into()
    } else {
        "Image is not ready yet".into()
    })
}

/// The image a pool in image mode goes back to with `pinned`, an earlier rendered config a
/// RolloutPolicy's rollback pins it to: the image its own build recorded, once that build
/// succeeded. The MachineOSConfig names the newer build's image by then, so [`pool_build`]
/// would wait for ever; the older build's record is the image its nodes ran.
pub fn rollback_build<'a>(
    pool: &str,
    pinned: &str,
    configs: impl IntoIterator<Item = &'a MachineOSConfig>,
    builds: impl IntoIterator<Item = &'a MachineOSBuild>,
) -> PoolBuild {
    use kube::ResourceExt;
    let Some(mosc) = config_of(pool, configs) else {
        return PoolBuild::NotLayered;
    };
    let mosc_name = mosc.name_any();
    let image = builds
        .into_iter()
        .filter(|b| {
            b.spec.machine_config.name == pinned
                && b.spec.machine_os_config.name == mosc_name
                && b.is(conditions::SUCCEEDED)
        })
        .filter_map(|b| b.status.as_ref())
        .map(|s| s.digested_image_push_spec.as_str())
        .find(|i| !i.is_empty());
    match image {
        Some(image) => PoolBuild::Ready {
            config: pinned.to_string(),
            image: image.to_string(),
        },
        None => PoolBuild::Waiting(format!(
            "No succeeded MachineOSBuild of MachineConfig {pinned} to roll back to"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IMG: &str = "registry.example/os@sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn mosc(pool: &str, image: &str, current: Option<&str>) -> MachineOSConfig {
        let mut a = serde_json::Map::new();
        if let Some(c) = current {
            a.insert(CURRENT_BUILD_ANNOTATION.into(), json!(c));
        }
        serde_json::from_value(json!({
            "metadata": {"name": pool, "annotations": a},
            "spec": {
                "machineConfigPool": {"name": pool},
                "imageBuilder": {"imageBuilderType": "Job"},
                "renderedImagePushSecret": {"name": "push"},
                "renderedImagePushSpec": "registry.example/os:latest",
            },
            "status": {"currentImagePullSpec": image},
        }))
        .unwrap()
    }

    fn mosb(name: &str, mosc: &str, rendered: &str, cond: &str, image: &str) -> MachineOSBuild {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "machineConfig": {"name": rendered},
                "machineOSConfig": {"name": mosc},
                "renderedImagePushSpec": "registry.example/os:latest",
            },
            "status": {
                "conditions": [{"type": cond, "status": "True", "reason": cond, "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "digestedImagePushSpec": image,
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_rollback_goes_to_the_image_the_pinned_configs_build_recorded() {
        let new_img = IMG.replace("sha256:1", "sha256:2");
        // The MachineOSConfig is on the newer build.
        let c = [mosc("worker", &new_img, Some("b2"))];
        let b = [
            mosb("b1", "worker", "rendered-worker-1", "Succeeded", IMG),
            mosb("b2", "worker", "rendered-worker-2", "Succeeded", &new_img),
        ];
        assert!(matches!(
            pool_build("worker", "rendered-worker-1", &c, &b),
            PoolBuild::Waiting(_)
        ));
        assert_eq!(
            rollback_build("worker", "rendered-worker-1", &c, &b),
            PoolBuild::Ready {
                config: "rendered-worker-1".into(),
                image: IMG.into()
            }
        );
        // A pinned config whose build failed, or that has none, waits; no MachineOSConfig: not
        // layered.
        let failed = [mosb("b1", "worker", "rendered-worker-1", "Failed", "")];
        assert!(matches!(
            rollback_build("worker", "rendered-worker-1", &c, &failed),
            PoolBuild::Waiting(_)
        ));
        assert_eq!(
            rollback_build("worker", "rendered-worker-1", &[], &b),
            PoolBuild::NotLayered
        );
    }

    #[test]
    fn a_pool_without_a_machineosconfig_is_not_layered() {
        let c = [mosc("infra", IMG, None)];
        let b = [mosb("b1", "infra", "rendered-worker-1", "Succeeded", IMG)];
        assert_eq!(
            pool_build("worker", "rendered-worker-1", &c, &b),
            PoolBuild::NotLayered
        );
    }

    #[test]
    fn a_succeeded_build_of_the_rendered_config_is_ready() {
        let c = [mosc("worker", IMG, Some("b1"))];
        let b = [mosb("b1", "worker", "rendered-worker-1", "Succeeded", IMG)];
        assert_eq!(
            pool_build("worker", "rendered-worker-1", &c, &b),
            PoolBuild::Ready {
                config: "rendered-worker-1".into(),
                image: IMG.into()
            }
        );
        // Without the annotation, the build is found by its spec.
        let c = [mosc("worker", IMG, None)];
        assert!(matches!(
            pool_build("worker", "rendered-worker-1", &c, &b),
            PoolBuild::Ready { .. }
        ));
    }

    #[test]
    fn a_new_rendered_config_waits_for_its_build() {
        let c = [mosc("worker", IMG, Some("b1"))];
        let b = [mosb("b1", "worker", "rendered-worker-1", "Succeeded", IMG)];
        assert_eq!(
            pool_build("worker", "rendered-worker-2", &c, &b),
            PoolBuild::Waiting(
                "No MachineOSBuild for MachineOSConfig worker and MachineConfig rendered-worker-2"
                    .into()
            )
        );
        for (cond, why) in [
            ("Building", "Image build in progress"),
            ("Prepared", "Image build pending"),
            ("Failed", "Image build failed: MachineOSBuild b2"),
            ("Interrupted", "Image build interrupted: MachineOSBuild b2"),
        ] {
            let b = [
                mosb("b1", "worker", "rendered-worker-1", "Succeeded", IMG),
                mosb("b2", "worker", "rendered-worker-2", cond, ""),
            ];
            assert_eq!(
                pool_build("worker", "rendered-worker-2", &c, &b),
                PoolBuild::Waiting(why.into()),
                "{cond}"
            );
        }
    }

    #[test]
    fn a_build_whose_image_the_machineosconfig_does_not_name_yet_waits() {
        let other = IMG.replace("sha256:1", "sha256:2");
        let c = [mosc("worker", IMG, Some("b2"))];
        let b = [mosb(
            "b2",
            "worker",
            "rendered-worker-2",
            "Succeeded",
            &other,
        )];
        let PoolBuild::Waiting(why) = pool_build("worker", "rendered-worker-2", &c, &b) else {
            panic!("not waiting");
        };
        assert!(why.contains("has not updated yet"), "{why}");
        let c = [mosc("worker", "", Some("b2"))];
        assert_eq!(
            pool_build("worker", "rendered-worker-2", &c, &b),
            PoolBuild::Waiting("Desired image not set in MachineOSConfig".into())
        );
    }

    #[test]
    fn an_annotation_naming_a_build_of_another_config_is_not_taken() {
        let c = [mosc("worker", IMG, Some("b1"))];
        let b = [
            mosb("b1", "worker", "rendered-worker-1", "Succeeded", "x"),
            mosb("b2", "worker", "rendered-worker-2", "Succeeded", IMG),
        ];
        assert!(matches!(
            pool_build("worker", "rendered-worker-2", &c, &b),
            PoolBuild::Ready { .. }
        ));
    }
}
