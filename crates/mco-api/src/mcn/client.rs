//! MachineConfigNode reads and writes at whichever version and schema the cluster serves.
//!
//! The served version is found once, on first use, from discovery (`v1` when served, else
//! `v1alpha1`), and its schema from the server's OpenAPI v3 document, which every
//! authenticated caller may read. Objects are typed [`MachineConfigNode`]s on mco's side and
//! go over the wire as [`DynamicObject`]s with the served `apiVersion` and only the fields the
//! schema has ([`Served::prune`]).

use kube::api::{DeleteParams, DynamicObject, GetParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::core::discovery::v2::APIGroupDiscoveryList;
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::served::{KIND, PLURAL, Served};
use crate::{GROUP, MachineConfigNode};

/// The MachineConfigNode API of one cluster.
#[derive(Clone)]
pub struct McnApi {
    client: Client,
    served: std::sync::Arc<OnceCell<(Api<DynamicObject>, Served)>>,
}

impl McnApi {
    /// An API whose version is found on first use.
    pub fn new(client: Client) -> McnApi {
        McnApi {
            client,
            served: Default::default(),
        }
    }

    /// The served version and its schema, found once.
    pub async fn served(&self) -> Result<&Served, kube::Error> {
        Ok(&self.init().await?.1)
    }

    /// The dynamic API at the served version, for watches.
    pub async fn dynamic(&self) -> Result<Api<DynamicObject>, kube::Error> {
        Ok(self.init().await?.0.clone())
    }

    async fn init(&self) -> Result<&(Api<DynamicObject>, Served), kube::Error> {
        self.served
            .get_or_try_init(|| async {
                let served = detect(&self.client).await?;
                let ar = ApiResource {
                    group: GROUP.into(),
                    version: served.version.clone(),
                    api_version: served.api_version(),
                    kind: KIND.into(),
                    plural: PLURAL.into(),
                };
                Ok((Api::all_with(self.client.clone(), &ar), served))
            })
            .await
    }

    /// `mcn` as the served version takes it: its `apiVersion`, none of the fields it lacks.
    pub async fn wire(&self, mcn: &MachineConfigNode) -> Result<DynamicObject, kube::Error> {
        let served = self.served().await?;
        let mut v = serde_json::to_value(mcn).map_err(kube::Error::SerdeError)?;
        v["apiVersion"] = served.api_version().into();
        served.prune(&mut v);
        serde_json::from_value(v).map_err(kube::Error::SerdeError)
    }

    /// GET, `None` when absent.
    pub async fn get_opt(&self, name: &str) -> Result<Option<MachineConfigNode>, kube::Error> {
        let (api, _) = self.init().await?;
        api.get_opt(name).await?.map(typed).transpose()
    }

    /// POST.
    pub async fn create(
        &self,
        pp: &PostParams,
        mcn: &MachineConfigNode,
    ) -> Result<MachineConfigNode, kube::Error> {
        let body = self.wire(mcn).await?;
        typed(self.init().await?.0.create(pp, &body).await?)
    }

    /// A merge patch of the object, pruned to the schema.
    pub async fn merge_patch(
        &self,
        name: &str,
        pp: &PatchParams,
        mut patch: Value,
    ) -> Result<MachineConfigNode, kube::Error> {
        let (api, served) = self.init().await?;
        served.prune(&mut patch);
        typed(api.patch(name, pp, &Patch::Merge(&patch)).await?)
    }

    /// A JSON patch of the status subresource, without the ops on fields the schema lacks.
    pub async fn json_patch_status(
        &self,
        name: &str,
        pp: &PatchParams,
        ops: Vec<Value>,
    ) -> Result<MachineConfigNode, kube::Error> {
        let (api, served) = self.init().await?;
        let ops = served.prune_ops(ops);
        let patch: json_patch::Patch =
            serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
        typed(
            api.patch_status(name, pp, &Patch::<()>::Json(patch))
                .await?,
        )
    }

    /// PUT of the status subresource (conditional on `mcn`'s resourceVersion).
    pub async fn replace_status(
        &self,
        name: &str,
        pp: &PostParams,
        mcn: &MachineConfigNode,
    ) -> Result<MachineConfigNode, kube::Error> {
        let body = self.wire(mcn).await?;
        typed(self.init().await?.0.replace_status(name, pp, &body).await?)
    }

    /// DELETE.
    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> Result<(), kube::Error> {
        self.init().await?.0.delete(name, dp).await?;
        Ok(())
    }
}

/// A served object as mco's type (which reads every version's fields).
pub fn typed(obj: DynamicObject) -> Result<MachineConfigNode, kube::Error> {
    obj.try_parse().map_err(|e| {
        kube::Error::SerdeError(serde::de::Error::custom(format!("MachineConfigNode: {e}")))
    })
}

/// The most preferred version that serves MachineConfigNodes, and its schema from `/openapi/v3` (none if unpublished).
///
/// The version comes from aggregated discovery, one request for every group; a server without
/// it (before Kubernetes 1.26) answers with the legacy group list, and the group's documents
/// are then read one by one. A daemon finds the version at every start, so at every node
/// update of a rollout that reboots: the legacy way cost it three requests.
pub async fn detect(client: &Client) -> Result<Served, kube::Error> {
    let version = match client.list_api_groups_aggregated().await {
        Ok(list) => serving_version(&list),
        Err(_) => None,
    };
    let version = match version {
        Some(v) => v,
        None => legacy_serving_version(client).await?,
    };
    let req = kube::core::Request::new(format!("/openapi/v3/apis/{GROUP}"))
        .get(&version, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    Ok(match client.request_text(req).await {
        Ok(doc) => Served::from_openapi_text(&version, &doc),
        Err(_) => Served::new(version, None),
    })
}

/// The first version, in the group's order of preference, that serves MachineConfigNodes in
/// an aggregated discovery document; `None` when it names none (or is a legacy group list,
/// which parses as an empty one).
fn serving_version(list: &APIGroupDiscoveryList) -> Option<String> {
    list.items
        .iter()
        .find(|g| g.metadata.as_ref().and_then(|m| m.name.as_deref()) == Some(GROUP))?
        .versions
        .iter()
        .find(|v| {
            v.resources.iter().any(|r| {
                r.resource.as_deref() == Some(PLURAL)
                    && r.response_kind
                        .as_ref()
                        .and_then(|k| k.kind.as_deref())
                        .is_none_or(|k| k == KIND)
            })
        })?
        .version
        .clone()
}

/// [`serving_version`] from the legacy discovery documents: the group list, then each version's.
async fn legacy_serving_version(client: &Client) -> Result<String, kube::Error> {
    let group = kube::discovery::group(client, GROUP).await?;
    // The group's preferred version (v1, for pools) may not serve MCNs at all: the first
    // version in preference order that does.
    let version = group
        .versions()
        .find(|v| {
            group
                .versioned_resources(v)
                .iter()
                .any(|(ar, _)| ar.kind == KIND)
        })
        .map(str::to_string)
        .ok_or_else(|| {
            kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(format!(
                "{GROUP} does not serve {KIND}"
            )))
        })?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(v: Value) -> APIGroupDiscoveryList {
        serde_json::from_value(v).unwrap()
    }

    fn mcns(kind: &str) -> Value {
        json!({"resource": PLURAL, "responseKind": {"group": GROUP, "version": "", "kind": kind}, "scope": "Cluster"})
    }

    #[test]
    fn the_first_version_serving_mcns_in_preference_order() {
        let pools = json!({"resource": "machineconfigpools", "responseKind": {"group": GROUP, "version": "v1", "kind": "MachineConfigPool"}});
        let doc = list(json!({"kind": "APIGroupDiscoveryList", "items": [
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "resources": [mcns(KIND)]}]},
            {"metadata": {"name": GROUP}, "versions": [
                {"version": "v1", "resources": [pools]},
                {"version": "v1alpha1", "resources": [mcns(KIND)]},
            ]},
        ]}));
        assert_eq!(serving_version(&doc).as_deref(), Some("v1alpha1"));
        let doc = list(json!({"items": [{"metadata": {"name": GROUP}, "versions": [
            {"version": "v1", "resources": [mcns(KIND)]},
            {"version": "v1alpha1", "resources": [mcns(KIND)]},
        ]}]}));
        assert_eq!(serving_version(&doc).as_deref(), Some("v1"));
    }

    #[test]
    fn no_version_when_the_document_names_none() {
        // Not served, or another kind under that plural.
        let doc = list(json!({"items": [{"metadata": {"name": GROUP}, "versions": [
            {"version": "v1", "resources": [mcns("Other")]},
        ]}]}));
        assert_eq!(serving_version(&doc), None);
        // A server without aggregated discovery answers with the legacy group list.
        let legacy = list(
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": GROUP, "versions": [{"groupVersion": format!("{GROUP}/v1"), "version": "v1"}]},
            ]}),
        );
        assert_eq!(serving_version(&legacy), None);
    }
}
