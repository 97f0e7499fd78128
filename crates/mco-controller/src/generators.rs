//! The controllers that write MachineConfigs for users, each a thin loop around a pure
//! generator in [`mco_generate`]:
//! - `KubeletConfig` → `99-<pool>-generated-kubelet[-N]`;
//! - `ContainerRuntimeConfig` → `99-<pool>-generated-containerruntime[-N]`;
//! - image registry policy → `99-<pool>-generated-registries` (see [`run_registries`]);
//! - `nodes.config.openshift.io/cluster` and `FeatureGate/cluster` →
//!   `97-<pool>-generated-kubelet` and `98-<pool>-generated-kubelet` (see
//!   [`run_kubelet_defaults`]).
//!
//! A KubeletConfig or ContainerRuntimeConfig gets, as upstream does: the numeric suffix of its
//! MachineConfigs in the `mc-name-suffix` annotation (none for the first object of a pool, then
//! `-1`, `-2`, … up to 9); the names of its MachineConfigs as finalizers, so deleting it deletes
//! them first; and one status condition, `Success` (message `Success`) or `Failure` (`Error:
//! <why>`). A refused object generates nothing; its earlier MachineConfigs stay.
//!
//! Each controller lists pools and MachineConfigs when it runs, and reruns when a pool is created
//! or its spec or labels change, or on any change to a MachineConfig that is not a rendered one,
//! since a pool's base files (the kubelet config, registries.conf) come from its other
//! MachineConfigs. A pool's status writes (several per node during a rollout) change no
//! generator's output and wake none of them.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference, Time};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, Predicate, WatchStreamExt, predicates, watcher};
use kube::{Api, Resource, ResourceExt};
use mco_api::generators::{GeneratorCondition, GeneratorStatus, MC_NAME_SUFFIX, v1alpha1};
use mco_api::{
    ClusterImagePolicy, ClusterVersion, ContainerRuntimeConfig, FeatureGate, Image,
    ImageContentSourcePolicy, ImageDigestMirrorSet, ImagePolicy, ImageTagMirrorSet, KubeletConfig,
    MachineConfig, MachineConfigPool, NodeConfig,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::Error;
use crate::ctx::Ctx;
use mco_rollout::plan::EventKind;

/// The field manager of every write here.
pub const FIELD_MANAGER: &str = "machine-config-controller";

/// A kind whose objects each generate one MachineConfig per pool they select.
pub trait Generator:
    Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `kubelet` or `containerruntime`: the last part of `99-<pool>-generated-<kind>`.
    const KIND: &'static str;
    /// The kind in upstream's messages.
    const WORDS: &'static str;
    fn selector(&self) -> Option<&LabelSelector>;
    fn status(&self) -> Option<&GeneratorStatus>;
    /// The files for a pool whose own MachineConfigs, in merge order, are `pool_mcs`.
    fn files(&self, pool_mcs: &[&MachineConfig]) -> Result<Vec<Value>, mco_generate::Error>;
}

impl Generator for KubeletConfig {
    const KIND: &'static str = "kubelet";
    const WORDS: &'static str = "kubelet config";
    fn selector(&self) -> Option<&LabelSelector> {
        self.spec.machine_config_pool_selector.as_ref()
    }
    fn status(&self) -> Option<&GeneratorStatus> {
        self.status.as_ref()
    }
    fn files(&self, pool_mcs: &[&MachineConfig]) -> Result<Vec<Value>, mco_generate::Error> {
        use mco_generate::kubelet;
        // Refused fields are reported before a missing base is.
        kubelet::validate(&self.spec)?;
        let base = mco_generate::base_file(pool_mcs, kubelet::KUBELET_CONF)?
            .ok_or_else(|| mco_generate::Error::Base("could not find Kubelet Config".into()))?;
        kubelet::files(&self.spec, &base)
    }
}

impl Generator for ContainerRuntimeConfig {
    const KIND: &'static str = "containerruntime";
    const WORDS: &'static str = "container runtime config";
    fn selector(&self) -> Option<&LabelSelector> {
        self.spec.machine_config_pool_selector.as_ref()
    }
    fn status(&self) -> Option<&GeneratorStatus> {
        self.status.as_ref()
    }
    fn files(&self, pool_mcs: &[&MachineConfig]) -> Result<Vec<Value>, mco_generate::Error> {
        use mco_generate::crio;
        crio::validate(&self.spec)?;
        let storage = mco_generate::base_file(pool_mcs, crio::STORAGE_CONF)?;
        crio::files(&self.spec, storage.as_deref())
    }
}

/// Whether a finalizer names one of this kind's generated MachineConfigs.
fn is_ours<K: Generator>(finalizer: &str) -> bool {
    finalizer.starts_with("99-") && finalizer.contains(&format!("-generated-{}", K::KIND))
}

/// The pool's MachineConfigs in merge order, as the render controller picks them.
pub fn pool_mcs<'a>(pool: &MachineConfigPool, mcs: &'a [MachineConfig]) -> Vec<&'a MachineConfig> {
    let mut out = mco_render::merge::select(pool.spec.machine_config_selector.as_ref(), mcs)
        .unwrap_or_default();
    mco_render::merge::order(&mut out);
    out
}

fn owner<K: Generator>(obj: &K) -> Option<OwnerReference> {
    obj.controller_owner_ref(&())
}

/// Whether the stored config is kept in place of `want` (`None`: no config), as
/// [`mco_generate::kept`] decides; on first sight it is marked so. `ours` is this controller's
/// version stamp.
async fn kept_stored(
    api: &Api<MachineConfig>,
    stored: Option<&MachineConfig>,
    want: Option<&MachineConfig>,
    ours: &str,
) -> Result<bool, Error> {
    use mco_generate::Kept;
    let Some(have) = stored else {
        return Ok(false);
    };
    match mco_generate::kept(have, want, ours) {
        Kept::No => Ok(false),
        Kept::Yes => Ok(true),
        Kept::Mark(hash) => {
            // Conditional on the version read: a config replaced meanwhile is not marked.
            let patch = json!({"metadata": {
                "annotations": {mco_generate::KEPT_FOR: hash},
                "resourceVersion": have.resource_version(),
            }});
            let name = have.name_any();
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            tracing::info!(machineconfig = %name, "generated MachineConfig kept as another controller generated it");
            Ok(true)
        }
    }
}

/// Create the MachineConfig or bring it to `want`; unchanged ones are not written, nor is one
/// kept ([`kept_stored`]).
async fn put_mc(
    api: &Api<MachineConfig>,
    mut want: MachineConfig,
    ours: &str,
) -> Result<bool, Error> {
    let name = want.name_any();
    let stored = api.get_opt(&name).await?;
    if kept_stored(api, stored.as_ref(), Some(&want), ours).await? {
        return Ok(false);
    }
    match stored {
        None => {
            api.create(&PostParams::default(), &want).await?;
            tracing::info!(machineconfig = %name, "generated MachineConfig created");
            Ok(true)
        }
        Some(have)
            if have.spec == want.spec
                && have.metadata.labels == want.metadata.labels
                && have.metadata.annotations == want.metadata.annotations
                && have.metadata.owner_references == want.metadata.owner_references =>
        {
            Ok(false)
        }
        Some(have) => {
            want.metadata.resource_version = have.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &want).await?;
            tracing::info!(machineconfig = %name, "generated MachineConfig updated");
            Ok(true)
        }
    }
}

async fn delete_mc(api: &Api<MachineConfig>, name: &str) -> Result<(), Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(machineconfig = %name, "generated MachineConfig deleted");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The condition for an outcome, keeping the transition time when nothing changed.
pub fn condition(
    old: Option<&GeneratorStatus>,
    err: Option<&str>,
    now: Time,
) -> GeneratorCondition {
    let (type_, message) = match err {
        None => ("Success", "Success".to_owned()),
        Some(e) => ("Failure", format!("Error: {e}")),
    };
    let prev = old.and_then(|s| s.conditions.last());
    let last_transition_time = match prev {
        Some(p) if p.type_ == type_ && p.message == message => p.last_transition_time.clone(),
        _ => Some(now),
    };
    GeneratorCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        last_transition_time,
        reason: String::new(),
        message,
    }
}

async fn write_status<K: Generator>(api: &Api<K>, obj: &K, err: Option<&str>) -> Result<(), Error> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let cond = condition(obj.status(), err, now);
    let generation = obj.meta().generation;
    let old = obj.status();
    if old.is_some_and(|s| s.observed_generation == generation && s.conditions == [cond.clone()]) {
        return Ok(());
    }
    if let Some(e) = err {
        tracing::warn!(kind = K::KIND, object = %obj.name_any(), error = %e, "generator input refused");
    }
    let patch = json!({"status": {"observedGeneration": generation, "conditions": [cond]}});
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// The suffix this object's MachineConfigs carry, choosing one (and recording it) on first sight.
async fn suffix<K: Generator>(
    api: &Api<K>,
    obj: &K,
    pools: &[&MachineConfigPool],
) -> Result<Result<String, String>, Error> {
    if let Some(s) = obj.annotations().get(MC_NAME_SUFFIX) {
        return Ok(Ok(s.clone()));
    }
    // The cache may not have our own earlier patch yet: read the object itself, and patch it
    // only at the version read, so a suffix once given is never replaced by another.
    let name = obj.name_any();
    let fresh = api.get(&name).await?;
    if let Some(s) = fresh.annotations().get(MC_NAME_SUFFIX) {
        return Ok(Ok(s.clone()));
    }
    let all = api.list(&ListParams::default()).await?.items;
    let siblings: Vec<Option<String>> = all
        .iter()
        .filter(|o| o.name_any() != name && o.meta().deletion_timestamp.is_none())
        .filter(|o| {
            pools
                .iter()
                .any(|p| mco_generate::selects(o.selector(), p).unwrap_or(false))
        })
        .map(|o| o.annotations().get(MC_NAME_SUFFIX).cloned())
        .collect();
    let s = match mco_generate::next_suffix(siblings.iter().map(|s| s.as_deref()), K::WORDS) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let patch = json!({"metadata": {
        "annotations": {MC_NAME_SUFFIX: s},
        "resourceVersion": fresh.resource_version(),
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Ok(s))
}

async fn set_finalizers<K: Generator>(
    api: &Api<K>,
    obj: &K,
    want: Vec<String>,
) -> Result<(), Error> {
    if obj.finalizers() == want.as_slice() {
        return Ok(());
    }
    // The resourceVersion makes this a compare-and-swap: a finalizer someone else added
    // meanwhile is not dropped.
    let patch =
        json!({"metadata": {"finalizers": want, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// One object: generate its MachineConfigs, drop those no longer wanted, report.
pub async fn reconcile<K: Generator>(obj: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<K> = Api::all(ctx.client.clone());
    let mc_api: Api<MachineConfig> = Api::all(ctx.client.clone());
    let finalizers: Vec<String> = obj.finalizers().to_vec();
    let (ours, others): (Vec<String>, Vec<String>) =
        finalizers.into_iter().partition(|f| is_ours::<K>(f));

    if obj.meta().deletion_timestamp.is_some() {
        for name in &ours {
            delete_mc(&mc_api, name).await?;
        }
        set_finalizers(&api, &*obj, others).await?;
        return Ok(Action::await_change());
    }

    let pools = Api::<MachineConfigPool>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mut selected = vec![];
    for p in &pools {
        match mco_generate::selects(obj.selector(), p) {
            Ok(true) => selected.push(p),
            Ok(false) => {}
            Err(e) => {
                write_status(&api, &*obj, Some(&e.to_string())).await?;
                return Ok(Action::await_change());
            }
        }
    }
    if selected.is_empty() {
        let why = format!(
            "could not find any MachineConfigPool set for {} {}",
            K::kind(&()),
            obj.name_any()
        );
        write_status(&api, &*obj, Some(&why)).await?;
        return Ok(Action::await_change());
    }
    // Every pool's files first: a refused object gets no suffix and writes nothing, and the
    // last good MachineConfigs stay in force.
    let mcs = mc_api.list(&ListParams::default()).await?.items;
    let mut per_pool = vec![];
    for pool in &selected {
        match obj.files(&pool_mcs(pool, &mcs)) {
            Ok(f) => per_pool.push((pool.name_any(), f)),
            Err(e) => {
                write_status(&api, &*obj, Some(&e.to_string())).await?;
                return Ok(Action::await_change());
            }
        }
    }
    let suffix = match suffix(&api, &*obj, &selected).await? {
        Ok(s) => s,
        Err(why) => {
            write_status(&api, &*obj, Some(&why)).await?;
            return Ok(Action::await_change());
        }
    };
    // Fresh, with the annotation just written, so the finalizer write below does not conflict.
    let obj = Arc::new(api.get(&obj.name_any()).await?);
    let mut want = vec![];
    for (pool_name, files) in per_pool {
        let name = mco_generate::managed_name(&pool_name, K::KIND, &suffix);
        let mut mc =
            mco_generate::machine_config(&name, &pool_name, &ctx.config.controller_version, files);
        mc.metadata.owner_references = owner(&*obj).map(|o| vec![o]);
        want.push(mc);
    }

    // Finalizers first: a MachineConfig is never left without the finalizer that deletes it.
    let names: BTreeSet<String> = want.iter().map(|m| m.name_any()).collect();
    let mut fin = others.clone();
    fin.extend(
        ours.iter()
            .cloned()
            .chain(names.iter().cloned())
            .collect::<BTreeSet<_>>(),
    );
    set_finalizers(&api, &*obj, fin).await?;
    for mc in want {
        put_mc(&mc_api, mc, &ctx.config.controller_version).await?;
    }
    let stale: Vec<&String> = ours.iter().filter(|f| !names.contains(*f)).collect();
    for name in &stale {
        delete_mc(&mc_api, name).await?;
    }
    if !stale.is_empty() {
        let mut fin = others;
        fin.extend(names);
        let fresh = api.get(&obj.name_any()).await?;
        set_finalizers(&api, &fresh, fin).await?;
    }
    let fresh = api.get(&obj.name_any()).await?;
    write_status(&api, &fresh, None).await?;
    Ok(Action::requeue(ctx.config.resync))
}

/// Changes that may change a generator's output: pools, and MachineConfigs other than rendered
/// ones (the render controller writes those, and no generator reads them).
fn inputs_changed(ctx: &Ctx) -> impl Stream<Item = ()> + Send + 'static {
    // Spec (the MachineConfig selector) and labels (what a KubeletConfig selects by); not the
    // status, which a rollout rewrites for every node.
    let pools = watcher(
        Api::<MachineConfigPool>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(
        predicates::generation.combine(predicates::labels),
        Default::default(),
    )
    .filter_map(|r| future::ready(r.ok().map(|_| ())));
    let mcs = watcher(
        Api::<MachineConfig>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(|r| {
        future::ready(
            r.ok()
                .filter(|mc| !mco_render::merge::is_rendered(mc))
                .map(|_| ()),
        )
    });
    futures::stream::select(pools, mcs)
}

async fn run_kind<K: Generator>(ctx: Arc<Ctx>) {
    let api: Api<K> = Api::all(ctx.client.clone());
    let kind = K::KIND;
    Controller::new(api, watcher::Config::default())
        .reconcile_all_on(inputs_changed(&ctx))
        .run(
            reconcile::<K>,
            move |obj, e, _| {
                tracing::warn!(kind, object = %obj.name_any(), error = %e, "generator reconcile failed");
                Action::requeue(Duration::from_secs(5))
            },
            ctx,
        )
        .for_each(|_| future::ready(()))
        .await;
}

/// The KubeletConfig, ContainerRuntimeConfig, registries and kubelet defaults controllers;
/// runs until dropped. `pools` and `pools_again` are two subscriptions to the shared pool
/// reflector's changes, already cut to spec changes: the per-pool controllers reconcile a pool
/// when it appears or its selector changes, never for its status.
pub async fn run(
    ctx: Arc<Ctx>,
    pools: impl Stream<Item = Arc<MachineConfigPool>> + Send + 'static,
    pools_again: impl Stream<Item = Arc<MachineConfigPool>> + Send + 'static,
    mcs: impl Stream<Item = Arc<MachineConfig>> + Send + 'static,
) {
    future::join4(
        run_kind::<KubeletConfig>(ctx.clone()),
        run_kind::<ContainerRuntimeConfig>(ctx.clone()),
        run_registries(ctx.clone(), pools),
        run_kubelet_defaults(ctx, pools_again, mcs),
    )
    .await;
}

/// OpenShift's cluster settings the `97-` and `98-` configs come from, each kept by a watch of
/// its one object: a reconcile reads them here, with no request. Empty where the kind is not
/// served (a cluster that is not OpenShift).
#[derive(Clone)]
struct ClusterSettings {
    node: Store<NodeConfig>,
    feature_gate: Store<FeatureGate>,
    cluster_version: Store<ClusterVersion>,
}

/// A store of the one object `name`, kept by a watch with a `metadata.name` field selector, and
/// a stream that yields after each change has reached the store. Quiet on errors: where the kind
/// is not served the watch fails until its CRD appears, retried with backoff.
fn named_store<T>(api: Api<T>, name: &str) -> (Store<T>, impl Stream<Item = ()> + Send + 'static)
where
    T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let touched = crate::by_name::watch(api, name)
        .reflect(writer)
        .touched_objects();
    let changes = crate::by_name::changes(touched, "cluster settings", true);
    (store, changes)
}

/// The `97-` and `98-` kubelet configs of one pool (see [`mco_generate::nodeconfig`]). Without
/// `nodes.config.openshift.io/cluster` and `FeatureGate/cluster` nothing is written, and a
/// config written before stays, as upstream's do. A refused input is an event on its object,
/// and the pool's configs stay as they were.
async fn reconcile_kubelet_defaults(
    pool: Arc<MachineConfigPool>,
    ctx: Arc<Ctx>,
    settings: ClusterSettings,
) -> Result<Action, Error> {
    use mco_api::generators::{CLUSTER_CONFIG_NAME, CLUSTER_VERSION_NAME};
    use mco_generate::nodeconfig;
    let c = &ctx.client;
    let done = Action::requeue(ctx.config.resync);
    let node = settings.node.get(&ObjectRef::new(CLUSTER_CONFIG_NAME));
    let fg = settings
        .feature_gate
        .get(&ObjectRef::new(CLUSTER_CONFIG_NAME));
    if node.is_none() && fg.is_none() {
        return Ok(done);
    }
    let cv = settings
        .cluster_version
        .get(&ObjectRef::new(CLUSTER_VERSION_NAME));
    let mc_api: Api<MachineConfig> = Api::all(c.clone());
    // From the shared store, whose changes wake this controller; rendered configs are no base.
    let mcs: Vec<MachineConfig> = ctx
        .mcs
        .state()
        .iter()
        .filter(|mc| !mco_render::merge::is_rendered(mc))
        .map(|mc| (**mc).clone())
        .collect();
    let judged = nodeconfig::judge(
        nodeconfig::Settings {
            node: node.as_ref().map(|n| &n.spec),
            feature_gate: fg.as_deref(),
            cluster_version: cv.as_deref(),
        },
        &mcs,
    );
    let gates = match judged {
        Ok(gates) => gates,
        Err(refusal) => {
            let (reference, kind, message) = match (&refusal, &fg, &node) {
                (nodeconfig::Refusal::Transition(e), _, Some(n)) => {
                    // Upstream's words alone, as its event reads.
                    (n.object_ref(&()), EventKind::Normal, e.to_string())
                }
                (r, Some(f), _) if r.is_feature_gate() => (
                    f.object_ref(&()),
                    EventKind::Warning,
                    left_as_they_were(r.error(), &pool.name_any()),
                ),
                (r, _, Some(n)) => (
                    n.object_ref(&()),
                    EventKind::Warning,
                    left_as_they_were(r.error(), &pool.name_any()),
                ),
                _ => return Ok(done),
            };
            ctx.publish(&reference, kind, refusal.reason(), &message)
                .await;
            return Ok(done);
        }
    };
    let inputs = nodeconfig::Inputs {
        node: node.as_ref().map(|n| &n.spec),
        gates: gates.as_ref(),
    };
    let pool_name = pool.name_any();
    let version = &ctx.config.controller_version;
    match nodeconfig::pool_configs(&pool_name, &pool_mcs(&pool, &mcs), inputs, version) {
        Ok(want) => {
            for mut mc in want {
                mc.metadata.owner_references = pool.controller_owner_ref(&()).map(|o| vec![o]);
                put_mc(&mc_api, mc, version).await?;
            }
        }
        Err(e) => {
            let reference = match (&node, &fg) {
                (Some(n), _) => n.object_ref(&()),
                (None, Some(f)) => f.object_ref(&()),
                (None, None) => return Ok(done),
            };
            let message = left_as_they_were(&e, &pool_name);
            ctx.publish(
                &reference,
                EventKind::Warning,
                "InvalidNodeConfig",
                &message,
            )
            .await;
        }
    }
    Ok(done)
}

/// A refusal's event message: what was refused, and that the pool's configs stay.
fn left_as_they_were(e: &impl std::fmt::Display, pool: &str) -> String {
    format!("{e}; the kubelet configs 97- and 98-{pool}-generated-kubelet are left as they were")
}

/// `pools` and `mcs` are subscriptions to the shared stores (a pool's spec changes; every
/// MachineConfig change, of which those not rendered may change a pool's base kubelet config):
/// no watch of their own.
async fn run_kubelet_defaults(
    ctx: Arc<Ctx>,
    pools: impl Stream<Item = Arc<MachineConfigPool>> + Send + 'static,
    mcs: impl Stream<Item = Arc<MachineConfig>> + Send + 'static,
) {
    use mco_api::generators::{CLUSTER_CONFIG_NAME, CLUSTER_VERSION_NAME};
    let c = ctx.client.clone();
    let bases =
        mcs.filter_map(|mc| future::ready((!mco_render::merge::is_rendered(&mc)).then_some(())));
    let (node, node_changes) = named_store(Api::<NodeConfig>::all(c.clone()), CLUSTER_CONFIG_NAME);
    let (feature_gate, gate_changes) =
        named_store(Api::<FeatureGate>::all(c.clone()), CLUSTER_CONFIG_NAME);
    let (cluster_version, version_changes) =
        named_store(Api::<ClusterVersion>::all(c.clone()), CLUSTER_VERSION_NAME);
    let settings = ClusterSettings {
        node,
        feature_gate,
        cluster_version,
    };
    let sources = futures::stream::select_all([
        node_changes.boxed(),
        gate_changes.boxed(),
        version_changes.boxed(),
        bases.boxed(),
    ]);
    Controller::for_shared_stream(pools, ctx.pools.clone())
        .reconcile_all_on(sources)
        .run(
            move |pool, ctx| reconcile_kubelet_defaults(pool, ctx, settings.clone()),
            |pool, e, _| {
                tracing::warn!(pool = %pool.name_any(), error = %e, "kubelet defaults reconcile failed");
                Action::requeue(Duration::from_secs(5))
            },
            ctx,
        )
        .for_each(|_| future::ready(()))
        .await;
}

/// The registries config of one pool: written when there are inputs, deleted when there are
/// none (the pool's base files are then in force again), left as it was when an input is
/// refused. A refusal is a Warning event on the object it came from.
async fn reconcile_registries(
    pool: Arc<MachineConfigPool>,
    ctx: Arc<Ctx>,
    served: Arc<watch::Sender<PolicyVersion>>,
) -> Result<Action, Error> {
    let c = &ctx.client;
    let list = ListParams::default();
    // A cluster without one of these kinds simply has none of it.
    async fn items<T>(api: Api<T>, lp: &ListParams) -> Result<Vec<T>, Error>
    where
        T: Resource + Clone + DeserializeOwned + Debug,
    {
        match api.list(lp).await {
            Ok(l) => Ok(l.items),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(vec![]),
            Err(e) => Err(e.into()),
        }
    }
    let image = match Api::<Image>::all(c.clone())
        .get_opt(mco_api::generators::IMAGE_CONFIG_NAME)
        .await
    {
        Ok(i) => i,
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    let idms = items(Api::<ImageDigestMirrorSet>::all(c.clone()), &list).await?;
    let itms = items(Api::<ImageTagMirrorSet>::all(c.clone()), &list).await?;
    let icsp = items(Api::<ImageContentSourcePolicy>::all(c.clone()), &list).await?;
    let pool_name = pool.name_any();
    let name = mco_generate::managed_name(&pool_name, "registries", "");
    let policies = match read_policies(c, &served).await? {
        Ok(p) => p,
        Err((reference, refused)) => {
            publish_refused(&ctx, &reference, &refused, &name).await;
            return Ok(Action::requeue(ctx.config.resync));
        }
    };
    let (cips, ips) = (&policies.cips, &policies.ips);
    // The release payload's repository, which Image/cluster may not block.
    let cc = ctx.ccs.get(&ObjectRef::new(
        mco_api::constants::names::CONTROLLER_CONFIG,
    ));
    let inputs = mco_generate::registries::Inputs {
        image: image.as_ref(),
        idms: &idms,
        itms: &itms,
        icsp: &icsp,
        cips,
        ips,
        release_image: cc.as_ref().map(|cc| cc.spec.release_image.as_str()),
    };
    report_conflicts(c, &inputs, policies.version).await?;
    let mc_api: Api<MachineConfig> = Api::all(c.clone());
    if inputs.is_empty() {
        // Upstream's generates this config without inputs too: kept, not deleted, after a
        // takeover.
        let stored = mc_api.get_opt(&name).await?;
        let ours = &ctx.config.controller_version;
        if !kept_stored(&mc_api, stored.as_ref(), None, ours).await? && stored.is_some() {
            delete_mc(&mc_api, &name).await?;
        }
        return Ok(Action::requeue(ctx.config.resync));
    }
    let mcs = mc_api.list(&list).await?.items;
    match mco_generate::registries::pool_files(&inputs, &pool_mcs(&pool, &mcs)) {
        Ok(files) => {
            let mut mc = mco_generate::machine_config(
                &name,
                &pool_name,
                &ctx.config.controller_version,
                files,
            );
            mc.metadata.owner_references = pool.controller_owner_ref(&()).map(|o| vec![o]);
            put_mc(&mc_api, mc, &ctx.config.controller_version).await?;
            // A blocked scope the payload's guard dropped; the rest is written, as upstream's.
            // Said at every reconcile, as a refusal is: the recorder makes repeats one series.
            if let (Ok(b), Some(i)) = (mco_generate::registries::blocked(&inputs), &image)
                && let Some(warning) = b.warning()
            {
                tracing::warn!(pool = %pool_name, "{warning}, skipping....");
                let reason = "PayloadRegistryNotBlocked";
                ctx.publish(&i.object_ref(&()), EventKind::Warning, reason, &warning)
                    .await;
            }
        }
        Err(refused) => {
            // The object's full reference (with its uid), so the event is attached to it.
            let named = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                m.name.as_deref() == Some(refused.name.as_str())
            };
            let reference = match refused.kind {
                "ImageDigestMirrorSet" => idms
                    .iter()
                    .find(|o| named(&o.metadata))
                    .map(|o| o.object_ref(&())),
                "ImageTagMirrorSet" => itms
                    .iter()
                    .find(|o| named(&o.metadata))
                    .map(|o| o.object_ref(&())),
                "ImageContentSourcePolicy" => icsp
                    .iter()
                    .find(|o| named(&o.metadata))
                    .map(|o| o.object_ref(&())),
                // The object as read, in the version read.
                "ClusterImagePolicy" => cips
                    .iter()
                    .zip(&policies.cip_refs)
                    .find(|(o, _)| named(&o.metadata))
                    .map(|(_, r)| r.clone()),
                // Named `<namespace>/<name>`.
                "ImagePolicy" => ips
                    .iter()
                    .zip(&policies.ip_refs)
                    .find(|(o, _)| {
                        let m = &o.metadata;
                        format!(
                            "{}/{}",
                            m.namespace.as_deref().unwrap_or_default(),
                            m.name.as_deref().unwrap_or_default()
                        ) == refused.name
                    })
                    .map(|(_, r)| r.clone()),
                _ => image.as_ref().map(|o| o.object_ref(&())),
            };
            let Some(reference) = reference else {
                tracing::warn!(error = %refused, "registries input refused");
                return Ok(Action::requeue(ctx.config.resync));
            };
            publish_refused(&ctx, &reference, &refused, &name).await;
        }
    }
    Ok(Action::requeue(ctx.config.resync))
}

/// A refused registries input: a Warning event on the object it came from (`reference`, in the
/// version read); the pool's config `name` stays as it was.
async fn publish_refused(
    ctx: &Ctx,
    reference: &ObjectReference,
    refused: &mco_generate::registries::Refused,
    name: &str,
) {
    let message = format!("{refused}; MachineConfig {name} is left as it was");
    ctx.publish(
        reference,
        EventKind::Warning,
        "InvalidRegistriesConfig",
        &message,
    )
    .await;
}

/// Upstream's status for an ImagePolicy whose scopes a ClusterImagePolicy also covers: one
/// condition, `Pending` `False`, reason `ConflictScopes`; cleared once the conflict is gone.
/// Written only when it changes. Inputs that are refused report nothing here.
async fn report_conflicts(
    c: &kube::Client,
    inputs: &mco_generate::registries::Inputs<'_>,
    version: PolicyVersion,
) -> Result<(), Error> {
    let Ok(signed) = mco_generate::sigstore::scope_policies(inputs.cips, &[], &[]) else {
        return Ok(());
    };
    let Ok((_, conflicts)) = mco_generate::registries::namespace_policies(inputs, &signed) else {
        return Ok(());
    };
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    for ip in inputs.ips {
        let (Some(ns), Some(name)) = (
            ip.metadata.namespace.as_deref(),
            ip.metadata.name.as_deref(),
        ) else {
            continue;
        };
        let conflict = conflicts
            .iter()
            .find(|x| x.namespace == ns && x.name == name);
        let have = ip
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let want: Value = match conflict {
            Some(x) => {
                let message = x.message();
                if have.len() == 1
                    && have[0].message == message
                    && have[0].reason == "ConflictScopes"
                {
                    continue;
                }
                json!([{
                    "type": "Pending",
                    "status": "False",
                    "reason": "ConflictScopes",
                    "message": message,
                    "lastTransitionTime": now,
                    "observedGeneration": ip.metadata.generation,
                }])
            }
            // Removed, not emptied: upstream's schema takes 1 to 8 conditions when present.
            None if have.iter().any(|c| c.reason == "ConflictScopes") => Value::Null,
            None => continue,
        };
        let patch = json!({"status": {"conditions": want}});
        let pp = PatchParams::default();
        // To the version the policy was read in.
        let written = match version {
            PolicyVersion::V1 => Api::<ImagePolicy>::namespaced(c.clone(), ns)
                .patch_status(name, &pp, &Patch::Merge(&patch))
                .await
                .map(drop),
            PolicyVersion::V1alpha1 => Api::<v1alpha1::ImagePolicy>::namespaced(c.clone(), ns)
                .patch_status(name, &pp, &Patch::Merge(&patch))
                .await
                .map(drop),
        };
        match written {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The version of `ClusterImagePolicy` and `ImagePolicy` the cluster serves: `v1` from OpenShift
/// 4.20, `v1alpha1` alone in 4.16–4.19 (Technology Preview). `v1` is read whenever it is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum PolicyVersion {
    #[default]
    V1,
    V1alpha1,
}

impl PolicyVersion {
    fn other(self) -> Self {
        match self {
            PolicyVersion::V1 => PolicyVersion::V1alpha1,
            PolicyVersion::V1alpha1 => PolicyVersion::V1,
        }
    }
}

fn set_served(served: &watch::Sender<PolicyVersion>, version: PolicyVersion) {
    served.send_if_modified(|v| std::mem::replace(v, version) != version);
}

/// The image policies, as `v1`, with the reference of each object as read (its events go to
/// the version it was read in).
#[derive(Default)]
struct Policies {
    version: PolicyVersion,
    cips: Vec<ClusterImagePolicy>,
    cip_refs: Vec<ObjectReference>,
    ips: Vec<ImagePolicy>,
    ip_refs: Vec<ObjectReference>,
}

/// A `v1alpha1` object `v1` refuses: where its event goes, and why.
type Unconverted = (ObjectReference, mco_generate::registries::Refused);

/// The image policies in the version last seen served; on a 404, in the other one (a cluster
/// upgraded to 4.20 stops serving `v1alpha1`), and none when neither is served. So one LIST per
/// kind in the steady state, two on a switch.
async fn read_policies(
    c: &kube::Client,
    served: &watch::Sender<PolicyVersion>,
) -> Result<Result<Policies, Unconverted>, Error> {
    let first = *served.borrow();
    for version in [first, first.other()] {
        if let Some(read) = read_version(c, version).await? {
            set_served(served, version);
            return Ok(read);
        }
    }
    Ok(Ok(Policies::default()))
}

/// `None` when the version is not served.
async fn read_version(
    c: &kube::Client,
    version: PolicyVersion,
) -> Result<Option<Result<Policies, Unconverted>>, Error> {
    async fn list<T>(api: Api<T>) -> Result<Option<Vec<T>>, Error>
    where
        T: Resource + Clone + DeserializeOwned + Debug,
    {
        match api.list(&ListParams::default()).await {
            Ok(l) => Ok(Some(l.items)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    fn refused(e: v1alpha1::ConversionError) -> mco_generate::registries::Refused {
        mco_generate::registries::Refused {
            kind: e.kind,
            name: e.name,
            message: format!("{}: {}", e.field, e.message),
        }
    }
    let mut out = Policies {
        version,
        ..Policies::default()
    };
    match version {
        PolicyVersion::V1 => {
            let Some(cips) = list(Api::<ClusterImagePolicy>::all(c.clone())).await? else {
                return Ok(None);
            };
            let ips = list(Api::<ImagePolicy>::all(c.clone()))
                .await?
                .unwrap_or_default();
            out.cip_refs = cips.iter().map(|o| o.object_ref(&())).collect();
            out.ip_refs = ips.iter().map(|o| o.object_ref(&())).collect();
            (out.cips, out.ips) = (cips, ips);
        }
        PolicyVersion::V1alpha1 => {
            let Some(cips) = list(Api::<v1alpha1::ClusterImagePolicy>::all(c.clone())).await?
            else {
                return Ok(None);
            };
            let ips = list(Api::<v1alpha1::ImagePolicy>::all(c.clone()))
                .await?
                .unwrap_or_default();
            for o in &cips {
                match o.to_v1() {
                    Ok(v1) => out.cips.push(v1),
                    Err(e) => return Ok(Some(Err((o.object_ref(&()), refused(e))))),
                }
                out.cip_refs.push(o.object_ref(&()));
            }
            for o in &ips {
                match o.to_v1() {
                    Ok(v1) => out.ips.push(v1),
                    Err(e) => return Ok(Some(Err((o.object_ref(&()), refused(e))))),
                }
                out.ip_refs.push(o.object_ref(&()));
            }
        }
    }
    Ok(Some(Ok(out)))
}

/// Changes to the image policies: `v1` watched always, and its outcome decides the version
/// read (listed: `v1`; a 404: `v1alpha1`); `v1alpha1` watched only once a cluster is seen
/// without `v1`, so a cluster serving `v1` pays nothing for it.
fn policy_changes(
    c: kube::Client,
    served: Arc<watch::Sender<PolicyVersion>>,
) -> impl Stream<Item = ()> + Send + 'static {
    fn changes<T>(
        api: Api<T>,
        served: Option<Arc<watch::Sender<PolicyVersion>>>,
    ) -> impl Stream<Item = ()> + Send + 'static
    where
        T: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
        T::DynamicType: Default + Eq + std::hash::Hash + Clone + Send,
    {
        watcher(api, watcher::Config::default())
            .default_backoff()
            .inspect(move |r| {
                let Some(served) = &served else { return };
                match r {
                    // `Init` comes before the list; anything after it means the list answered.
                    Ok(watcher::Event::Init) | Err(_) => {}
                    Ok(_) => set_served(served, PolicyVersion::V1),
                }
                if let Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) = r
                    && s.code == 404
                {
                    set_served(served, PolicyVersion::V1alpha1);
                }
            })
            .touched_objects()
            .filter_map(|r| future::ready(r.ok().map(|_| ())))
    }
    let v1 = futures::stream::select(
        changes(
            Api::<ClusterImagePolicy>::all(c.clone()),
            Some(served.clone()),
        ),
        changes(Api::<ImagePolicy>::all(c.clone()), None),
    );
    let mut seen = served.subscribe();
    let alpha = futures::stream::once(async move {
        if seen
            .wait_for(|v| *v == PolicyVersion::V1alpha1)
            .await
            .is_err()
        {
            return futures::stream::empty().boxed();
        }
        futures::stream::select(
            changes(Api::<v1alpha1::ClusterImagePolicy>::all(c.clone()), None),
            changes(Api::<v1alpha1::ImagePolicy>::all(c), None),
        )
        .boxed()
    })
    .flatten();
    futures::stream::select(v1, alpha)
}

async fn run_registries(
    ctx: Arc<Ctx>,
    pools: impl Stream<Item = Arc<MachineConfigPool>> + Send + 'static,
) {
    let c = ctx.client.clone();
    let served = Arc::new(watch::Sender::new(PolicyVersion::V1));
    fn changes<T>(api: Api<T>) -> impl Stream<Item = ()> + Send + 'static
    where
        T: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        watcher(api, watcher::Config::default())
            .default_backoff()
            .touched_objects()
            .filter_map(|r| future::ready(r.ok().map(|_| ())))
    }
    let sources = futures::stream::select_all([
        changes(Api::<Image>::all(c.clone())).boxed(),
        changes(Api::<ImageDigestMirrorSet>::all(c.clone())).boxed(),
        changes(Api::<ImageTagMirrorSet>::all(c.clone())).boxed(),
        changes(Api::<ImageContentSourcePolicy>::all(c.clone())).boxed(),
        policy_changes(c.clone(), served.clone()).boxed(),
        inputs_changed(&ctx).boxed(),
        // The ControllerConfig's spec: its releaseImage is the payload the guard keeps.
        watcher(
            Api::<mco_api::ControllerConfig>::all(c.clone()),
            Default::default(),
        )
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::generation, Default::default())
        .filter_map(|r| future::ready(r.ok().map(|_| ())))
        .boxed(),
    ]);
    // The shared pool store, not a watch of its own: each pool's status writes would otherwise
    // each cost a reconcile (a GET and four LISTs).
    Controller::for_shared_stream(pools, ctx.pools.clone())
        .reconcile_all_on(sources)
        .run(
            move |pool, ctx| reconcile_registries(pool, ctx, served.clone()),
            |pool, e, _| {
                tracing::warn!(pool = %pool.name_any(), error = %e, "registries reconcile failed");
                Action::requeue(Duration::from_secs(5))
            },
            ctx,
        )
        .for_each(|_| future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn conditions_use_upstreams_messages_and_keep_their_time() {
        let ok = condition(None, None, t("2026-01-01T00:00:00Z"));
        assert_eq!(
            (ok.type_.as_str(), ok.message.as_str()),
            ("Success", "Success")
        );
        let old = GeneratorStatus {
            observed_generation: Some(1),
            conditions: vec![ok.clone()],
        };
        let again = condition(Some(&old), None, t("2026-02-01T00:00:00Z"));
        assert_eq!(again.last_transition_time, ok.last_transition_time);
        let bad = condition(
            Some(&old),
            Some("KubeletConfiguration: cgroupDriver is not allowed to be set, but contains: x"),
            t("2026-02-01T00:00:00Z"),
        );
        assert_eq!(bad.type_, "Failure");
        assert_eq!(bad.status, "True");
        assert_eq!(
            bad.message,
            "Error: KubeletConfiguration: cgroupDriver is not allowed to be set, but contains: x"
        );
        assert_eq!(bad.last_transition_time, Some(t("2026-02-01T00:00:00Z")));
    }

    /// A v1alpha1 ClusterImagePolicy with the given base64 key.
    fn alpha_cip(name: &str, key: &str) -> v1alpha1::ClusterImagePolicy {
        serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1alpha1",
            "kind": "ClusterImagePolicy",
            "metadata": {"name": name},
            "spec": {
                "scopes": ["quay.io/openshift-release-dev/ocp-release"],
                "policy": {"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": key}}},
            },
        }))
        .unwrap()
    }

    async fn wait_served(served: &watch::Sender<PolicyVersion>, want: PolicyVersion) {
        let mut rx = served.subscribe();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|v| *v == want))
            .await
            .unwrap_or_else(|_| panic!("the watch never chose {want:?}"))
            .unwrap();
    }

    /// None served: nothing read. `v1alpha1` alone (OpenShift 4.16–4.19): read and converted,
    /// the watch switching to it, a value `v1` refuses named with the object as read. `v1`
    /// served too: the watch takes `v1` back, and `v1` is read.
    #[tokio::test]
    async fn image_policies_are_read_in_v1_when_served_and_else_in_v1alpha1() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::CustomResourceExt;
        let server = mco_testkit::server::TestServer::start().await;
        let c = server.admin().await;
        let served = Arc::new(watch::Sender::new(PolicyVersion::V1));
        let none = read_policies(&c, &served).await.unwrap().unwrap();
        assert!(none.cips.is_empty() && none.ips.is_empty());
        assert_eq!(*served.borrow(), PolicyVersion::V1);

        let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
        for crd in [
            v1alpha1::ClusterImagePolicy::crd(),
            v1alpha1::ImagePolicy::crd(),
        ] {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        let alpha: Api<v1alpha1::ClusterImagePolicy> = Api::all(c.clone());
        mco_testkit::eventually("v1alpha1 served", 20, || {
            let alpha = alpha.clone();
            async move { alpha.list(&ListParams::default()).await.ok() }
        })
        .await;
        let watching =
            tokio::spawn(policy_changes(c.clone(), served.clone()).for_each(|_| future::ready(())));
        wait_served(&served, PolicyVersion::V1alpha1).await;

        let key = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0t";
        alpha
            .create(&PostParams::default(), &alpha_cip("release", key))
            .await
            .unwrap();
        served.send_replace(PolicyVersion::V1);
        let read = read_policies(&c, &served).await.unwrap().unwrap();
        assert_eq!(read.version, PolicyVersion::V1alpha1);
        assert_eq!(*served.borrow(), PolicyVersion::V1alpha1);
        assert_eq!(read.cips.len(), 1);
        assert_eq!(
            read.cips[0]
                .spec
                .policy
                .root_of_trust
                .public_key
                .as_ref()
                .unwrap()
                .key_data,
            key
        );
        assert_eq!(
            read.cip_refs[0].api_version.as_deref(),
            Some("config.openshift.io/v1alpha1")
        );

        let short = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K";
        alpha
            .create(&PostParams::default(), &alpha_cip("short", short))
            .await
            .unwrap();
        let Err((reference, refused)) = read_policies(&c, &served).await.unwrap() else {
            panic!("a key v1 refuses was taken");
        };
        assert_eq!(reference.name.as_deref(), Some("short"));
        assert_eq!(
            reference.api_version.as_deref(),
            Some("config.openshift.io/v1alpha1")
        );
        assert_eq!(
            refused.to_string(),
            "ClusterImagePolicy short: spec.policy.rootOfTrust.publicKey.keyData: should be at least 68 chars long in config.openshift.io/v1"
        );
        alpha
            .delete("short", &DeleteParams::default())
            .await
            .unwrap();

        // Serving v1 too (the same objects): the watch's next list takes v1.
        let mut crd = crds
            .get("clusterimagepolicies.config.openshift.io")
            .await
            .unwrap();
        let mut v1 = ClusterImagePolicy::crd().spec.versions.remove(0);
        v1.storage = false;
        crd.spec.versions.push(v1);
        crds.replace(&crd.name_any(), &PostParams::default(), &crd)
            .await
            .unwrap();
        wait_served(&served, PolicyVersion::V1).await;
        let read = read_policies(&c, &served).await.unwrap().unwrap();
        assert_eq!(read.version, PolicyVersion::V1);
        assert_eq!(read.cips.len(), 1);
        assert_eq!(
            read.cip_refs[0].api_version.as_deref(),
            Some("config.openshift.io/v1")
        );
        watching.abort();
    }

    /// The ConflictScopes condition is written while a ClusterImagePolicy covers one of an
    /// ImagePolicy's scopes, and removed (not emptied: upstream's schema takes 1 to 8
    /// conditions when present) once it no longer does.
    #[tokio::test]
    async fn a_conflict_ended_removes_the_imagepolicys_condition() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::CustomResourceExt;
        let server = mco_testkit::server::TestServer::start().await;
        let c = server.admin().await;
        let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
        for crd in [ClusterImagePolicy::crd(), ImagePolicy::crd()] {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        let key = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KLS0tLS1FTkQgUFVCTElDIEtFWS0tLS0t";
        let policy =
            json!({"rootOfTrust": {"policyType": "PublicKey", "publicKey": {"keyData": key}}});
        let cip: ClusterImagePolicy = serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ClusterImagePolicy",
            "metadata": {"name": "release"},
            "spec": {"scopes": ["quay.io/openshift-release-dev"], "policy": policy},
        }))
        .unwrap();
        let ip: ImagePolicy = serde_json::from_value(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ImagePolicy",
            "metadata": {"name": "team", "namespace": "default"},
            "spec": {"scopes": ["quay.io/openshift-release-dev/ocp-release", "quay.io/team/app"], "policy": policy},
        }))
        .unwrap();
        let ips: Api<ImagePolicy> = Api::namespaced(c.clone(), "default");
        let cip = mco_testkit::eventually("ClusterImagePolicy served", 20, || {
            let (api, cip) = (Api::<ClusterImagePolicy>::all(c.clone()), cip.clone());
            async move { api.create(&PostParams::default(), &cip).await.ok() }
        })
        .await;
        ips.create(&PostParams::default(), &ip).await.unwrap();
        let report = |cips: Vec<ClusterImagePolicy>| {
            let (c, ips) = (c.clone(), ips.clone());
            async move {
                let read = vec![ips.get("team").await.unwrap()];
                let inputs = mco_generate::registries::Inputs {
                    image: None,
                    idms: &[],
                    itms: &[],
                    icsp: &[],
                    cips: &cips,
                    ips: &read,
                    release_image: None,
                };
                report_conflicts(&c, &inputs, PolicyVersion::V1)
                    .await
                    .unwrap();
                let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
                    c,
                    "default",
                    &kube::api::ApiResource::erase::<ImagePolicy>(&()),
                );
                raw.get("team").await.unwrap().data["status"].clone()
            }
        };
        let status = report(vec![cip]).await;
        assert_eq!(
            status["conditions"][0]["reason"], "ConflictScopes",
            "{status}"
        );
        let status = report(vec![]).await;
        assert!(status.get("conditions").is_none(), "{status}");
    }

    #[test]
    fn only_this_kinds_generated_configs_are_its_finalizers() {
        assert!(is_ours::<KubeletConfig>("99-worker-generated-kubelet"));
        assert!(is_ours::<KubeletConfig>("99-infra-generated-kubelet-2"));
        assert!(!is_ours::<KubeletConfig>(
            "99-worker-generated-containerruntime"
        ));
        assert!(!is_ours::<KubeletConfig>("example.com/keep"));
        assert!(is_ours::<ContainerRuntimeConfig>(
            "99-worker-generated-containerruntime-1"
        ));
    }
}
