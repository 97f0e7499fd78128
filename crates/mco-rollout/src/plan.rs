//! The rollout planner: which nodes belong to which pool, which of them may be moved to the pool's
//! target now, which carry the `UpdateInProgress` taint, and what the pool's status says.
//!
//! Pure: it reads objects and returns a [`Plan`]; the node controller applies it. Keeping every
//! rule here means the rules that bound disruption are tested without an API server.
//!
//! The node controller plans a pool every few milliseconds in a rollout, so the planner is
//! cheap on large pools: it reads each member once, as a [`Digest`] whose texts are shared
//! with every digest that holds the same, takes members already sorted by name, and selects
//! the few candidates the budget allows without sorting every eligible node.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mco_api::constants::{annotations, drain, labels, names, pool_conditions, states, taints};
use mco_api::{MachineConfigPool, MachineConfigPoolStatus};
use mco_apimachinery::selector::LabelSelector;

/// Nodes with this label value are never managed (upstream skips Windows nodes).
const OS_LABEL: &str = "kubernetes.io/os";

/// Severity of a [`PlanEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSubject {
    Pool(String),
    Node(String),
}

/// An event the controller should publish when it applies a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    pub kind: EventKind,
    pub subject: EventSubject,
    pub reason: &'static str,
    pub message: String,
}

/// Where every node belongs. Computed once for all pools, because a node's pool depends on every
/// pool's selector, not just one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    /// node → its primary pool. Hashed: every pool pass looks up each of its nodes, and at
    /// thousands of nodes a tree's walk over shared name prefixes was most of that pass's
    /// member filter.
    pub primary: HashMap<String, String>,
    /// Nodes that match more than one custom pool, with those pools; they belong to none.
    pub conflicts: BTreeMap<String, Vec<String>>,
    /// Nodes in the master pool that also match a custom pool (`mcc_pool_alert`).
    pub pool_alerts: BTreeSet<String>,
}

impl Membership {
    /// Warning events for nodes that cannot be placed in a pool.
    pub fn conflict_events(&self) -> Vec<PlanEvent> {
        self.conflicts
            .iter()
            .map(|(node, pools)| PlanEvent {
                kind: EventKind::Warning,
                subject: EventSubject::Node(node.clone()),
                reason: "PoolConflict",
                message: format!(
                    "node {node} belongs to {} custom roles ({}), cannot proceed with this Node",
                    pools.len(),
                    pools.join(", ")
                ),
            })
            .collect()
    }
}

/// The pool's node selector, or `None` when it selects nothing. Upstream treats both a nil and an
/// empty selector as matching no node (an empty one also earns a `SelectingAll` warning).
fn node_selector(pool: &MachineConfigPool) -> Option<LabelSelector> {
    let parsed = mco_api::select::parse(pool.spec.node_selector.as_ref()).ok()??;
    (!parsed.is_empty()).then_some(parsed)
}

/// A hash of what [`assign_pools`] reads of the pools: names, node selectors, deletion.
pub fn selectors_fingerprint<P: Borrow<MachineConfigPool>>(pools: &[P]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in pools.iter().map(Borrow::borrow) {
        name_of_pool(p).hash(&mut h);
        p.metadata.deletion_timestamp.is_some().hash(&mut h);
        serde_json::to_string(&p.spec.node_selector)
            .unwrap_or_default()
            .hash(&mut h);
    }
    h.finish()
}

/// Whether the pool's node selector is the empty `{}` (upstream's `SelectingAll`).
pub fn selects_all_nodes(pool: &MachineConfigPool) -> bool {
    pool.spec.node_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    })
}

fn name_of_pool(pool: &MachineConfigPool) -> &str {
    pool.metadata.name.as_deref().unwrap_or_default()
}

fn name_of(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Upstream's `GetPoolsForNode`: more than one custom pool is an error; master wins over a
/// custom pool (and raises the pool alert); a custom pool wins over worker.
pub fn assign_pools<N: Borrow<Node>, P: Borrow<MachineConfigPool>>(
    nodes: &[N],
    pools: &[P],
) -> Membership {
    let selectors: Vec<(&str, LabelSelector)> = pools
        .iter()
        .map(Borrow::borrow)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| node_selector(p).map(|s| (name_of_pool(p), s)))
        .collect();
    let mut out = Membership::default();
    for node in nodes {
        let node = node.borrow();
        let name = name_of(node);
        let labels = node_labels(node);
        if labels.get(OS_LABEL).is_some_and(|os| os == "windows") {
            continue;
        }
        // No allocation per node unless it matches a custom pool: this runs for every node
        // on every pool pass.
        let (mut master, mut worker, mut custom) = (false, false, Vec::new());
        for (pool, selector) in &selectors {
            if selector.matches(labels) {
                match *pool {
                    names::MASTER_POOL => master = true,
                    names::WORKER_POOL => worker = true,
                    other => custom.push(other),
                }
            }
        }
        let primary = match custom.as_slice() {
            [] if master => names::MASTER_POOL,
            [] if worker => names::WORKER_POOL,
            [] => continue,
            [_] if master => {
                out.pool_alerts.insert(name.to_string());
                names::MASTER_POOL
            }
            [one] => one,
            many => {
                out.conflicts.insert(
                    name.to_string(),
                    many.iter().map(|s| s.to_string()).collect(),
                );
                continue;
            }
        };
        out.primary.insert(name.to_string(), primary.to_string());
    }
    out
}

/// The rollout budget: an int or a percentage of the pool's nodes (rounded down), default 1,
/// never below 1. An unparsable value also gives 1, the safe choice.
pub fn max_unavailable(value: Option<&IntOrString>, node_count: usize) -> usize {
    let scaled: i64 = match value {
        None => 1,
        Some(IntOrString::Int(n)) => i64::from(*n),
        Some(IntOrString::String(s)) => match s.strip_suffix('%').map(str::parse::<i64>) {
            Some(Ok(pct)) => pct.saturating_mul(node_count as i64) / 100,
            _ => s.parse::<i64>().unwrap_or(1),
        },
    };
    usize::try_from(scaled).unwrap_or(0).max(1)
}

fn annotation<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

/// The config the node is on.
pub fn current_config(node: &Node) -> &str {
    annotation(node, annotations::CURRENT_CONFIG)
}

/// The config the node is moving to.
pub fn desired_config(node: &Node) -> &str {
    annotation(node, annotations::DESIRED_CONFIG)
}

/// The image-mode image the node runs (empty outside image mode).
pub fn current_image(node: &Node) -> &str {
    annotation(node, annotations::CURRENT_IMAGE)
}

/// The image-mode image the node is moving to (empty outside image mode).
pub fn desired_image(node: &Node) -> &str {
    annotation(node, annotations::DESIRED_IMAGE)
}

/// The daemon's state annotation.
pub fn node_state(node: &Node) -> &str {
    annotation(node, annotations::STATE)
}

/// Upstream's `isNodeReady`: Ready=True, no disk pressure, network available, schedulable.
/// A condition that is absent does not count against the node.
pub fn is_ready(node: &Node) -> bool {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let ok = conditions.iter().all(|c| match c.type_.as_str() {
        "Ready" => c.status == "True",
        "DiskPressure" | "NetworkUnavailable" => c.status == "False",
        _ => true,
    });
    ok && !node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The image a pool's nodes go to with its rendered config, in on-cluster image mode (see
/// [`mco_api::image_mode::PoolBuild`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageTarget<'a> {
    /// Outside image mode: no image. A node still on one is moved back to the rendered
    /// config's own OS image, as any node not on the target is.
    #[default]
    None,
    /// The image built from the target config.
    Image(&'a str),
    /// In image mode with no image ready for the target config: no node is moved, and the text
    /// says why.
    Waiting(&'a str),
}

/// What a pass moves nodes to: the target config and image (`None`: an image not ready yet,
/// which no node is on).
#[derive(Debug, Clone, Copy)]
struct Aim<'a> {
    config: &'a str,
    image: Option<&'a str>,
}

impl<'a> Aim<'a> {
    fn config(config: &'a str) -> Aim<'a> {
        Aim::new(config, ImageTarget::None)
    }

    fn new(config: &'a str, image: ImageTarget<'a>) -> Aim<'a> {
        let image = match image {
            ImageTarget::None => Some(""),
            ImageTarget::Image(i) => Some(i),
            ImageTarget::Waiting(_) => None,
        };
        Aim { config, image }
    }
}

/// What the planner reads of one node, read once per pass. A pass asks every member's
/// annotations a few dozen questions, and each lookup in the annotation map compares keys that
/// share their first 35 bytes: at a thousand nodes that was a third of the pass.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    node: &'a Node,
    name: &'a str,
    current: &'a str,
    desired: &'a str,
    current_image: &'a str,
    desired_image: &'a str,
    state: &'a str,
    last_applied_drain: &'a str,
    ready: bool,
    tainted: bool,
    /// The zone label and creation time: what orders the candidates (see [`rollout_key`]).
    zone: Option<&'a str>,
    created: Option<jiff::Timestamp>,
}

/// A pool member as the planner takes it: a Node, read as it is asked, or a [`Digest`] read
/// before.
pub trait Member {
    fn name(&self) -> &str;
    fn facts(&self) -> Facts<'_>;
}

macro_rules! node_member {
    ($($t:ty),*) => {$(
        impl Member for $t {
            fn name(&self) -> &str {
                name_of(self)
            }

            fn facts(&self) -> Facts<'_> {
                Facts::of(self)
            }
        }
    )*};
}

node_member!(Node, &Node, Arc<Node>);

/// A node's [`Facts`] kept from one pass to the next. The node cache hands out a new `Arc` for
/// every change, so a digest holding the `Arc` it was read from stays true while the cache
/// hands out that same `Arc`; most nodes are unchanged from one pass to the next.
///
/// A pass reads every member's digest, and at a thousand nodes reading them was bound by memory
/// latency: each digest is read from one place (its name and flags inline), and its configs and
/// state are [`Strings`] shared by every digest that holds the same text, which a pass finds in
/// cache.
#[derive(Debug)]
pub struct Digest {
    node: Arc<Node>,
    name: Box<str>,
    current: Arc<str>,
    desired: Arc<str>,
    current_image: Arc<str>,
    desired_image: Arc<str>,
    state: Arc<str>,
    last_applied_drain: Arc<str>,
    ready: bool,
    tainted: bool,
    zone: Option<Arc<str>>,
    created: Option<jiff::Timestamp>,
}

/// One shared copy of each text the digests hold: a rollout's thousand nodes name the same few
/// configs and states.
#[derive(Debug, Default)]
pub struct Strings(std::collections::HashSet<Arc<str>>);

impl Strings {
    /// Past this many texts the set starts again: texts of configs no node names any more are
    /// dropped, and digests keep their copies.
    const MAX: usize = 256;

    pub fn get(&mut self, text: &str) -> Arc<str> {
        if let Some(s) = self.0.get(text) {
            return Arc::clone(s);
        }
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        let s: Arc<str> = Arc::from(text);
        self.0.insert(Arc::clone(&s));
        s
    }
}

impl Digest {
    pub fn new(node: Arc<Node>) -> Digest {
        Digest::interned(node, &mut Strings::default())
    }

    /// A digest whose texts are shared through `strings`.
    pub fn interned(node: Arc<Node>, strings: &mut Strings) -> Digest {
        let f = Facts::of(&node);
        let (name, current, desired, state, last_applied_drain) = (
            Box::from(f.name),
            strings.get(f.current),
            strings.get(f.desired),
            strings.get(f.state),
            strings.get(f.last_applied_drain),
        );
        let (current_image, desired_image) =
            (strings.get(f.current_image), strings.get(f.desired_image));
        let (ready, tainted, created) = (f.ready, f.tainted, f.created);
        let zone = f.zone.map(|z| strings.get(z));
        Digest {
            node,
            name,
            current,
            desired,
            current_image,
            desired_image,
            state,
            last_applied_drain,
            ready,
            tainted,
            zone,
            created,
        }
    }

    /// Whether this digest was read from `node` itself.
    pub fn reads(&self, node: &Arc<Node>) -> bool {
        Arc::ptr_eq(&self.node, node)
    }

    /// The node this digest was read from.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The config the node is moving to, one copy shared by every digest that names it.
    pub fn desired(&self) -> &Arc<str> {
        &self.desired
    }

    /// The node this digest was read from, to keep.
    pub fn shared_node(&self) -> &Arc<Node> {
        &self.node
    }
}

impl Member for Arc<Digest> {
    fn name(&self) -> &str {
        &self.name
    }

    fn facts(&self) -> Facts<'_> {
        Facts {
            node: &self.node,
            name: &self.name,
            current: &self.current,
            desired: &self.desired,
            current_image: &self.current_image,
            desired_image: &self.desired_image,
            state: &self.state,
            last_applied_drain: &self.last_applied_drain,
            ready: self.ready,
            tainted: self.tainted,
            zone: self.zone.as_deref(),
            created: self.created,
        }
    }
}

impl<'a> Facts<'a> {
    /// The node these facts were read from.
    pub fn node(&self) -> &'a Node {
        self.node
    }

    fn of(node: &'a Node) -> Facts<'a> {
        Facts {
            node,
            name: name_of(node),
            current: current_config(node),
            desired: desired_config(node),
            current_image: current_image(node),
            desired_image: desired_image(node),
            state: node_state(node),
            last_applied_drain: annotation(node, annotations::LAST_APPLIED_DRAIN),
            ready: is_ready(node),
            tainted: has_update_taint(node),
            zone: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::ZONE))
                .map(String::as_str),
            created: node.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }

    /// Upstream's candidate order as a sort key: by zone label ascending (no zone last), then
    /// oldest first (no creation time last), then by name for determinism.
    fn rollout_key(
        &self,
    ) -> (
        bool,
        Option<&'a str>,
        bool,
        Option<jiff::Timestamp>,
        &'a str,
    ) {
        let (zone, created) = (self.zone, self.created);
        (zone.is_none(), zone, created.is_none(), created, self.name)
    }

    /// On its desired config and image (upstream's `IsNodeDone`), and `Done`.
    fn is_done(&self) -> bool {
        self.on_desired() && self.state == states::DONE
    }

    fn on_desired(&self) -> bool {
        !self.current.is_empty()
            && self.current == self.desired
            && self.current_image == self.desired_image
    }

    /// Pointed at `aim`: its desired config and image are the aim's.
    fn points_at(&self, aim: Aim<'_>) -> bool {
        self.desired == aim.config && aim.image == Some(self.desired_image)
    }

    fn is_degraded(&self) -> bool {
        matches!(self.state, states::DEGRADED | states::UNRECONCILABLE)
    }

    fn is_failing(&self) -> bool {
        self.is_degraded() && !self.on_desired()
    }

    fn is_updated(&self, aim: Aim<'_>) -> bool {
        !aim.config.is_empty() && self.is_done() && self.points_at(aim)
    }

    fn is_unmanaged(&self) -> bool {
        self.current.is_empty()
    }

    fn is_unavailable(&self) -> bool {
        if self.is_unmanaged() {
            return false;
        }
        !self.ready || (!self.is_done() && !self.is_failing())
    }

    fn needs_update_taint(&self, aim: Aim<'_>) -> bool {
        // `lastAppliedDrain == drain::uncordon(target)`, without building that string for
        // every member on every pass.
        let uncordoned_on_target = self.points_at(aim)
            && self.last_applied_drain.strip_prefix(drain::UNCORDON_PREFIX) == Some(aim.config);
        !self.is_updated(aim) && !uncordoned_on_target
    }
}

/// The daemon finished: on its desired config and `Done`.
pub fn is_done(node: &Node) -> bool {
    Facts::of(node).is_done()
}

/// The daemon reports Degraded or Unreconcilable.
pub fn is_degraded(node: &Node) -> bool {
    Facts::of(node).is_degraded()
}

/// Degraded while trying to reach another config: it will not finish by itself.
pub fn is_failing(node: &Node) -> bool {
    Facts::of(node).is_failing()
}

/// Done on the pool's target, outside image mode.
pub fn is_updated(node: &Node, target: &str) -> bool {
    Facts::of(node).is_updated(Aim::config(target))
}

/// Done on the pool's target config and `image`.
pub fn is_updated_for(node: &Node, target: &str, image: ImageTarget<'_>) -> bool {
    Facts::of(node).is_updated(Aim::new(target, image))
}

/// Pointed at the pool's target config and `image` (`desiredConfig`, `desiredImage`).
pub fn is_targeted_for(node: &Node, target: &str, image: ImageTarget<'_>) -> bool {
    Facts::of(node).points_at(Aim::new(target, image))
}

/// A node the daemon has never reported on. Beyond upstream (where the config server writes the
/// first annotations at boot): such a node has nothing mco could disrupt, so it is targeted at
/// once and does not consume the budget; otherwise a cluster of fresh nodes would never start.
pub fn is_unmanaged(node: &Node) -> bool {
    Facts::of(node).is_unmanaged()
}

/// Upstream's `IsUnavailableForUpdate`: not ready, or busy and not failing. Nodes the daemon
/// has never reported on are not counted (see [`is_unmanaged`]).
pub fn is_unavailable(node: &Node) -> bool {
    Facts::of(node).is_unavailable()
}

/// Whether the node should carry the `UpdateInProgress` taint while the pool moves to `target`:
/// until it is updated, or until the drain controller has uncordoned it on the target. That
/// answer drops the taint in the same Node write (see `drain::uncordon`): the node is back in
/// service on its new config, and a separate removal once it reports Done would be one more
/// write of every node for nothing a scheduler could use.
pub fn needs_update_taint(node: &Node, target: &str) -> bool {
    Facts::of(node).needs_update_taint(Aim::config(target))
}

pub fn has_update_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == taints::UPDATE_IN_PROGRESS_KEY)
}

/// The node's taints with the `UpdateInProgress` one present or absent.
pub fn with_update_taint(node: &Node, present: bool) -> Vec<Taint> {
    let mut list: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    list.retain(|t| t.key != taints::UPDATE_IN_PROGRESS_KEY);
    if present {
        list.push(Taint {
            key: taints::UPDATE_IN_PROGRESS_KEY.into(),
            effect: taints::UPDATE_IN_PROGRESS_EFFECT.into(),
            ..Default::default()
        });
    }
    list
}

/// What the node controller should do for one pool, and the pool's new status.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub pool: String,
    /// The pool's target rendered config, if the render controller has set one.
    pub target: Option<String>,
    /// The image-mode image the candidates go to with the target (`desiredImage`); `None`
    /// outside image mode, where their `desiredImage` is removed.
    pub image: Option<String>,
    /// Names of the nodes whose primary pool this is, sorted ([`plan_with`] only).
    pub members: Vec<String>,
    /// Nodes to point at the target now, in rollout order.
    pub candidates: Vec<String>,
    /// Nodes that need the `UpdateInProgress` taint and do not have it yet, this pass's
    /// candidates first.
    pub taint_add: Vec<String>,
    /// Nodes that carry the taint but no longer need it ([`needs_update_taint`]).
    pub taint_remove: Vec<String>,
    /// The computed budget.
    pub max_unavailable: usize,
    /// The controller's own node, when it could have been a candidate but was held back because
    /// other nodes of the pool are not updated yet. Updating it drains the controller itself, so
    /// (as upstream does for the node hosting the operator) it goes once it is the only node
    /// left to update, and not while others are mid-update.
    pub deferred: Option<String>,
    /// The new pool status (conditions other than the node controller's are carried over).
    pub status: MachineConfigPoolStatus,
    pub events: Vec<PlanEvent>,
}

/// Plan one pool against all nodes and all pools. `now` (RFC 3339) stamps condition transitions.
pub fn plan(
    pool: &MachineConfigPool,
    nodes: &[Node],
    pools: &[MachineConfigPool],
    now: &str,
) -> Plan {
    plan_with(pool, nodes, &assign_pools(nodes, pools), None, now)
}

/// Like [`plan`], with the membership computed once for every pool, and the node this controller
/// runs on (`own_node`), which is updated last: see [`Plan::deferred`].
pub fn plan_with<N: Member>(
    pool: &MachineConfigPool,
    nodes: &[N],
    membership: &Membership,
    own_node: Option<&str>,
    now: &str,
) -> Plan {
    let members = members_of(name_of_pool(pool), nodes, membership);
    let mut plan = plan_members(pool, &members, own_node, now);
    plan.members = members.iter().map(|n| n.name().to_string()).collect();
    plan
}

/// The nodes whose primary pool is `pool`, sorted by name.
pub fn members_of<'a, N: Member>(
    pool: &str,
    nodes: &'a [N],
    membership: &Membership,
) -> Vec<&'a N> {
    let mut members: Vec<&N> = nodes
        .iter()
        .filter(|n| membership.primary.get(n.name()).map(String::as_str) == Some(pool))
        .collect();
    members.sort_by(|a, b| a.name().cmp(b.name()));
    members
}

/// Like [`plan_with`], for a caller that has already taken the pool's members, sorted by name
/// (as [`members_of`] gives them), and keeps them for the status it writes after the pass. The
/// plan's `members` are left empty: the caller has them.
pub fn plan_members<N: Member>(
    pool: &MachineConfigPool,
    members: &[&N],
    own_node: Option<&str>,
    now: &str,
) -> Plan {
    plan_members_capped(pool, members, own_node, now, None)
}

/// Like [`plan_members`], with at most `cap` members pointed at the target once this pass's
/// candidates are (a rollout policy's canary, halt or closed window: see [`crate::policy`]).
/// The cap only takes candidates away, so it never lets the pool exceed its budget.
pub fn plan_members_capped<N: Member>(
    pool: &MachineConfigPool,
    members: &[&N],
    own_node: Option<&str>,
    now: &str,
    cap: Option<usize>,
) -> Plan {
    plan_members_for(pool, members, own_node, now, cap, ImageTarget::None)
}

/// Like [`plan_members_capped`], for a pool whose nodes go to `image` with its target config
/// (on-cluster image mode). While the image is [`ImageTarget::Waiting`], no node is moved and no
/// taint is added.
pub fn plan_members_for<N: Member>(
    pool: &MachineConfigPool,
    members: &[&N],
    own_node: Option<&str>,
    now: &str,
    cap: Option<usize>,
    image: ImageTarget<'_>,
) -> Plan {
    let pool_name = name_of_pool(pool).to_string();
    let previous = pool.status.clone().unwrap_or_default();
    let target = pool
        .spec
        .configuration
        .as_ref()
        .map(|c| c.name.clone())
        .filter(|n| !n.is_empty());
    let mut members: Vec<Facts<'_>> = members.iter().map(|n| n.facts()).collect();
    debug_assert!(members.is_sorted_by(|a, b| a.name <= b.name));
    let budget = max_unavailable(pool.spec.max_unavailable.as_ref(), members.len());

    let mut plan = Plan {
        pool: pool_name.clone(),
        target: target.clone(),
        image: match image {
            ImageTarget::Image(i) => Some(i.to_string()),
            _ => None,
        },
        members: vec![],
        candidates: vec![],
        taint_add: vec![],
        taint_remove: vec![],
        max_unavailable: budget,
        deferred: None,
        status: previous.clone(),
        events: vec![],
    };

    if selects_all_nodes(pool) {
        plan.events.push(PlanEvent {
            kind: EventKind::Warning,
            subject: EventSubject::Pool(pool_name),
            reason: "SelectingAll",
            message:
                "This machineconfigpool is selecting all nodes. A non-empty selector is required."
                    .into(),
        });
        return plan;
    }

    if let Some(target) = target.as_deref()
        && !pool.spec.paused
        && !matches!(image, ImageTarget::Waiting(_))
    {
        let aim = Aim::new(target, image);
        for node in &members {
            let wanted = node.needs_update_taint(aim);
            if wanted && !node.tainted {
                plan.taint_add.push(node.name.to_string());
            } else if !wanted && node.tainted {
                plan.taint_remove.push(node.name.to_string());
            }
        }
        (plan.candidates, plan.deferred) = candidates(&members, aim, budget, own_node, cap);
        // The nodes about to be drained first: a rollout's first pass taints every member, and
        // the controller spreads those writes over several passes (see `rollout`).
        let chosen: BTreeSet<&str> = plan.candidates.iter().map(String::as_str).collect();
        plan.taint_add.sort_by_key(|n| !chosen.contains(n.as_str()));
        // Status is computed as it will be once the candidates carry their new desiredConfig:
        // the controller writes both in one pass, and counting candidates as busy keeps it
        // honest.
        // A candidate is never on the target yet: that test, on shared texts, spares the
        // lookup of every member's name.
        let new_image = aim.image.unwrap_or_default();
        for n in members
            .iter_mut()
            .filter(|n| !n.points_at(aim) && chosen.contains(n.name))
        {
            n.desired = target;
            n.desired_image = new_image;
        }
        if !plan.candidates.is_empty() {
            // Upstream's words, with the image in image mode (`SetDesiredConfigAndOSImage`).
            let what = match image {
                ImageTarget::Image(i) => format!("MachineConfig: {target} / Image: {i}"),
                _ => format!("MachineConfig: {target}"),
            };
            let message = match plan.candidates.as_slice() {
                [one] => format!("Targeted node {one} to {what}"),
                many => format!("Set target for {} nodes to {what}", many.len()),
            };
            plan.events.push(PlanEvent {
                kind: EventKind::Normal,
                subject: EventSubject::Pool(plan.pool.clone()),
                reason: match image {
                    ImageTarget::Image(_) => SET_DESIRED_CONFIG_AND_IMAGE,
                    _ => SET_DESIRED_CONFIG,
                },
                message,
            });
        }
    }

    let (status, events) = status_of(pool, &members, now, image);
    plan.status = status;
    plan.events.extend(events);
    plan
}

/// How the `Updating` message of a pool waiting for its image-mode image starts; the rest is
/// `<rendered>: <why>`.
pub const WAITING_FOR_IMAGE: &str = "Waiting for the image of MachineConfig ";

/// The reason of the event that says which nodes a pass targeted.
pub const SET_DESIRED_CONFIG: &str = "SetDesiredConfig";
/// The same, in on-cluster image mode.
pub const SET_DESIRED_CONFIG_AND_IMAGE: &str = "SetDesiredConfigAndOSImage";

/// Upstream's candidate selection: the budget minus unavailable nodes minus nodes failing on the
/// target; candidates are ready nodes not yet pointed at the target, by zone then age. The
/// controller's own node is held back until every other member is updated; the second value
/// names it when that kept it out.
fn candidates(
    members: &[Facts<'_>],
    aim: Aim<'_>,
    budget: usize,
    own_node: Option<&str>,
    cap: Option<usize>,
) -> (Vec<String>, Option<String>) {
    // Unmanaged nodes are targeted regardless of the budget: see `is_unmanaged`.
    let mut out: Vec<String> = members
        .iter()
        .filter(|n| n.is_unmanaged() && !n.points_at(aim))
        .map(|n| n.name.to_string())
        .collect();
    let unavailable = members.iter().filter(|n| n.is_unavailable()).count();
    // A failing node that is also unavailable is already counted once.
    let failing = members
        .iter()
        .filter(|n| n.points_at(aim) && n.is_failing() && !n.is_unavailable())
        .count();
    let mut capacity = budget.saturating_sub(unavailable).saturating_sub(failing);
    if let Some(cap) = cap {
        let pointed = members.iter().filter(|n| n.points_at(aim)).count() + out.len();
        capacity = capacity.min(cap.saturating_sub(pointed));
    }
    if capacity == 0 {
        return (out, None);
    }
    let mut eligible: Vec<&Facts<'_>> = members
        .iter()
        .filter(|n| !n.is_unmanaged() && !n.points_at(aim) && n.ready)
        .collect();
    let mut deferred = None;
    let mut own_last = None;
    if let Some(own) = own_node
        && let Some(i) = eligible.iter().position(|n| n.name == own)
    {
        let others_updated = members
            .iter()
            .filter(|n| n.name != own)
            .all(|n| n.is_updated(aim));
        let node = eligible.swap_remove(i);
        if others_updated {
            own_last = Some(node);
        } else {
            deferred = Some(own.to_string());
        }
    }
    // Only the first `capacity` in order are taken, a few of hundreds: they are selected, and
    // only they sorted. Each node's sort key is read once.
    let mut keyed: Vec<_> = eligible.into_iter().map(|n| (n.rollout_key(), n)).collect();
    if capacity < keyed.len() {
        keyed.select_nth_unstable_by(capacity, |a, b| a.0.cmp(&b.0));
        keyed.truncate(capacity);
    }
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out.extend(
        keyed
            .into_iter()
            .map(|(_, n)| n)
            .chain(own_last)
            .take(capacity)
            .map(|n| n.name.to_string()),
    );
    (out, deferred)
}

/// A node's place in the candidate order (see [`Facts::rollout_key`]).
#[cfg(test)]
fn rollout_key(n: &Node) -> (bool, Option<&str>, bool, Option<jiff::Timestamp>, &str) {
    Facts::of(n).rollout_key()
}

/// [`rollout_key`] as a comparison, spelled out: the reference its tests hold it to.
#[cfg(test)]
fn rollout_order(a: &Node, b: &Node) -> std::cmp::Ordering {
    fn zone(n: &Node) -> Option<&str> {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::ZONE))
            .map(String::as_str)
    }
    let created = |n: &Node| n.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let (za, zb) = (zone(a), zone(b));
    let by_zone = match (&za, &zb) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    };
    by_zone
        .then_with(|| match (created(a), created(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        })
        .then_with(|| name_of(a).cmp(name_of(b)))
}

pub use crate::condition::set_condition;

/// Upstream's `calculateStatus` for a pool and its member nodes. `RenderDegraded` belongs to the
/// render controller and is carried over; `Degraded` aggregates it with `NodeDegraded`.
pub fn calculate_status<N: Member>(
    pool: &MachineConfigPool,
    members: &[N],
    now: &str,
) -> (MachineConfigPoolStatus, Vec<PlanEvent>) {
    calculate_status_for(pool, members, now, ImageTarget::None)
}

/// Like [`calculate_status`], for a pool whose nodes go to `image` with its target config.
pub fn calculate_status_for<N: Member>(
    pool: &MachineConfigPool,
    members: &[N],
    now: &str,
    image: ImageTarget<'_>,
) -> (MachineConfigPoolStatus, Vec<PlanEvent>) {
    let members: Vec<Facts<'_>> = members.iter().map(Member::facts).collect();
    status_of(pool, &members, now, image)
}

fn status_of(
    pool: &MachineConfigPool,
    members: &[Facts<'_>],
    now: &str,
    image: ImageTarget<'_>,
) -> (MachineConfigPoolStatus, Vec<PlanEvent>) {
    let pool_name = name_of_pool(pool);
    let previous = pool.status.clone().unwrap_or_default();
    let target = pool
        .spec
        .configuration
        .as_ref()
        .map(|c| c.name.as_str())
        .unwrap_or_default();
    let aim = Aim::new(target, image);
    let total = members.len();
    let updated = members.iter().filter(|n| n.is_updated(aim)).count();
    let ready = members
        .iter()
        .filter(|n| n.is_updated(aim) && n.ready)
        .count();
    let unavailable = members.iter().filter(|n| n.is_unavailable()).count();
    let degraded: Vec<&Facts<'_>> = members.iter().filter(|n| n.is_degraded()).collect();

    let mut status = previous.clone();
    status.observed_generation = pool.metadata.generation;
    status.machine_count = total as i32;
    status.updated_machine_count = updated as i32;
    status.ready_machine_count = ready as i32;
    status.unavailable_machine_count = unavailable as i32;
    status.degraded_machine_count = degraded.len() as i32;
    let mut events = vec![];

    if !target.is_empty() {
        let all_updated = updated == total && ready == total && unavailable == 0;
        if all_updated {
            set_condition(
                &mut status.conditions,
                pool_conditions::UPDATED,
                true,
                "",
                &format!("All nodes are updated with MachineConfig {target}"),
                now,
            );
            set_condition(
                &mut status.conditions,
                pool_conditions::UPDATING,
                false,
                "",
                "",
                now,
            );
            let was = previous.configuration.as_ref().map(|c| c.name.as_str());
            if was != Some(target) {
                events.push(PlanEvent {
                    kind: EventKind::Normal,
                    subject: EventSubject::Pool(pool_name.to_string()),
                    reason: "Completed",
                    message: format!(
                        "Pool {pool_name} has completed update to MachineConfig {target}"
                    ),
                });
            }
            status.configuration = pool.spec.configuration.clone();
        } else {
            set_condition(
                &mut status.conditions,
                pool_conditions::UPDATED,
                false,
                "",
                "",
                now,
            );
            if pool.spec.paused {
                set_condition(
                    &mut status.conditions,
                    pool_conditions::UPDATING,
                    false,
                    "",
                    &format!("Pool is paused; will not update to MachineConfig {target}"),
                    now,
                );
            } else if let ImageTarget::Waiting(why) = image {
                set_condition(
                    &mut status.conditions,
                    pool_conditions::UPDATING,
                    true,
                    "",
                    &format!("{WAITING_FOR_IMAGE}{target}: {why}"),
                    now,
                );
            } else {
                if !previous.is_true(pool_conditions::UPDATING) {
                    events.push(PlanEvent {
                        kind: EventKind::Normal,
                        subject: EventSubject::Pool(pool_name.to_string()),
                        reason: "Updating",
                        message: format!("Pool {pool_name} now targeting MachineConfig {target}"),
                    });
                }
                set_condition(
                    &mut status.conditions,
                    pool_conditions::UPDATING,
                    true,
                    "",
                    &format!("All nodes are updating to MachineConfig {target}"),
                    now,
                );
            }
        }
    }

    let node_degraded = !degraded.is_empty();
    let (nd_reason, nd_message) = if node_degraded {
        (
            format!(
                "{} nodes are reporting degraded status on sync",
                degraded.len()
            ),
            degraded
                .iter()
                .map(|n| {
                    format!(
                        "Node {} is reporting: {:?}",
                        n.name,
                        annotation(n.node, annotations::REASON)
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        )
    } else {
        (String::new(), String::new())
    };
    set_condition(
        &mut status.conditions,
        pool_conditions::NODE_DEGRADED,
        node_degraded,
        &nd_reason,
        &nd_message,
        now,
    );
    let render = previous
        .condition(pool_conditions::RENDER_DEGRADED)
        .filter(|c| c.status == "True")
        .cloned();
    let (d_reason, d_message) = match (&render, node_degraded) {
        (_, true) => (nd_reason.clone(), nd_message.clone()),
        (Some(r), false) => (r.reason.clone(), r.message.clone()),
        (None, false) => (String::new(), String::new()),
    };
    set_condition(
        &mut status.conditions,
        pool_conditions::DEGRADED,
        node_degraded || render.is_some(),
        &d_reason,
        &d_message,
        now,
    );
    (status, events)
}

#[cfg(test)]
mod tests;
