//! MachineConfigNode reads and writes at whichever version and schema the cluster serves.
//!
//! The served version is found once, on first use, from discovery (`v1` when served, else
//! `v1alpha1`), and its schema from the server's OpenAPI v3 document, which every
//! authenticated caller may read. Objects are typed [`MachineConfigNode`]s on mco's side and
//! go over the wire as [`DynamicObject`]s with the served `apiVersion` and only the fields the
//! schema has ([`Served::prune`]).

use kube::api::{DeleteParams, DynamicObject, GetParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
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
pub async fn detect(client: &Client) -> Result<Served, kube::Error> {
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
    let req = kube::core::Request::new(format!("/openapi/v3/apis/{GROUP}"))
        .get(&version, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    Ok(match client.request::<Value>(req).await {
        Ok(doc) => Served::from_openapi(&version, &doc),
        Err(_) => Served::new(version, None),
    })
}
