//! Selecting a pool's MachineConfigs, ordering them, and merging them into one spec, following
//! upstream's `MergeMachineConfigs` and Ignition's v3 merge rules.
//!
//! The merged Ignition is accumulated in maps keyed the way Ignition merges (files, links and
//! directories share one key space by path; units and dropins by name; users and groups by name),
//! so it comes out sorted by key. Upstream keeps "parent order, then new child entries"; the order
//! carries no meaning once keys are unique, and sorting is what makes the rendered spec canonical.
//!
//! Deliberate differences from upstream, each for a reason:
//! - A later file that sets no `contents` keeps the earlier contents *and* their compression.
//!   Upstream's butane#332 workaround resets compression to none in that case, which turns a
//!   gzip-compressed file into garbage; when the later file does set contents, its compression
//!   (possibly none) wins, as upstream.
//! - `storage.disks/filesystems/raid/luks` entries with the same key are replaced whole by the later
//!   one rather than merged field by field; these sections are unreconcilable after day 1 anyway.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use ignition_config::v3_5 as ign;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sSelector;
use mco_api::constants::{annotations, labels, names};
use mco_api::{ControllerConfigSpec, MachineConfig};
use mco_apimachinery::selector::SelectorError;
use thiserror::Error;

use crate::ignition::{INTERNAL_VERSION, Ignition};

/// Why a pool's selector cannot pick its MachineConfigs.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// `{}` matches every MachineConfig, including other pools'; upstream refuses to render it.
    #[error("machineConfigSelector is empty: it would select all MachineConfigs")]
    SelectingAll,
    #[error("invalid machineConfigSelector: {0}")]
    Invalid(#[from] SelectorError),
}

/// The kernel types a MachineConfig may ask for; `""` means `default`.
pub const KERNEL_TYPE_DEFAULT: &str = "default";
pub const KERNEL_TYPE_REALTIME: &str = "realtime";
pub const KERNEL_TYPE_64K_PAGES: &str = "64k-pages";

/// Pick the MachineConfigs a pool's `machineConfigSelector` matches, with full label-selector
/// semantics. An absent selector matches nothing; `{}` is [`SelectError::SelectingAll`].
/// Rendered configs are never inputs.
pub fn select<'a>(
    selector: Option<&K8sSelector>,
    mcs: &'a [MachineConfig],
) -> Result<Vec<&'a MachineConfig>, SelectError> {
    select_by(selector, mcs, |mc| mc)
}

/// [`select`] over anything that holds a MachineConfig, so inputs kept alongside other data
/// (such as their raw config text) are selected by the same rules.
pub fn select_by<'a, T>(
    selector: Option<&K8sSelector>,
    items: &'a [T],
    mc: impl Fn(&T) -> &MachineConfig,
) -> Result<Vec<&'a T>, SelectError> {
    let Some(selector) = mco_api::select::parse(selector)? else {
        return Ok(Vec::new());
    };
    if selector.is_empty() {
        return Err(SelectError::SelectingAll);
    }
    let none = BTreeMap::new();
    Ok(items
        .iter()
        .filter(|item| {
            let mc = mc(item);
            !is_rendered(mc) && selector.matches(mc.metadata.labels.as_ref().unwrap_or(&none))
        })
        .collect())
}

/// Whether an MC is itself a rendered config (`rendered-…`), which must never feed a render.
pub fn is_rendered(mc: &MachineConfig) -> bool {
    mc.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with(names::RENDERED_PREFIX))
}

/// Upstream's merge order: MCs labelled `role: worker` first, then the rest, each group by name.
/// So for a custom pool that also selects worker MCs, its own MCs win regardless of name.
pub fn order(mcs: &mut [&MachineConfig]) {
    order_by(mcs, |mc| mc);
}

/// [`order`] over anything that holds a MachineConfig.
pub fn order_by<T>(items: &mut [&T], mc: impl Fn(&T) -> &MachineConfig) {
    items.sort_by(|a, b| order_key(mc(a)).cmp(&order_key(mc(b))));
}

fn order_key(mc: &MachineConfig) -> (bool, &str) {
    let worker = mc
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::ROLE))
        .is_some_and(|r| r == names::WORKER_POOL);
    (!worker, mc.metadata.name.as_deref().unwrap_or_default())
}

/// The non-Ignition part of a merged spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergedFields {
    pub os_image_url: String,
    pub base_os_extensions_container_image: String,
    /// Set when a user MC replaced the cluster default OS image.
    pub os_image_url_overridden: bool,
    /// Concatenated in merge order; duplicates kept, as upstream.
    pub kernel_arguments: Vec<String>,
    pub extensions: Vec<String>,
    pub fips: bool,
    /// Always explicit: `default` unless some MC asks for another kernel.
    pub kernel_type: String,
}

/// Merge the non-Ignition fields of MCs already in merge order.
pub fn merge_fields(ordered: &[&MachineConfig], cc: &ControllerConfigSpec) -> MergedFields {
    let mut out = MergedFields {
        os_image_url: cc.default_os_image().to_string(),
        base_os_extensions_container_image: cc.base_os_extensions_container_image.clone(),
        kernel_type: KERNEL_TYPE_DEFAULT.to_string(),
        ..Default::default()
    };
    for mc in ordered {
        let spec = &mc.spec;
        out.kernel_arguments
            .extend(spec.kernel_arguments.iter().flatten().cloned());
        out.extensions
            .extend(spec.extensions.iter().flatten().cloned());
        out.fips |= spec.fips;
        if spec.kernel_type == KERNEL_TYPE_REALTIME || spec.kernel_type == KERNEL_TYPE_64K_PAGES {
            out.kernel_type = spec.kernel_type.clone();
        }
        // Controller-generated MCs carry the cluster default already; only users override.
        let generated = mc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(annotations::GENERATED_BY_CONTROLLER_VERSION));
        if !generated {
            if !spec.os_image_url.is_empty() {
                out.os_image_url = spec.os_image_url.clone();
            }
            if !spec.base_os_extensions_container_image.is_empty() {
                out.base_os_extensions_container_image =
                    spec.base_os_extensions_container_image.clone();
            }
        }
    }
    out.os_image_url_overridden = out.os_image_url != cc.default_os_image();
    out
}

/// Merge Ignition configs given in merge order: later wins.
pub fn merge_ignition(configs: impl IntoIterator<Item = Ignition>) -> Ignition {
    let mut m = Merger::default();
    for c in configs {
        m.add(c);
    }
    m.finish()
}

enum Node {
    File(ign::File),
    Link(ign::Link),
    Dir(ign::Directory),
}

/// Accumulates configs one by one (cheaper than merging pairwise: each key is looked up once).
#[derive(Default)]
pub struct Merger {
    section: ign::Ignition,
    kargs_exist: Vec<String>,
    kargs_not_exist: Vec<String>,
    /// Path → position in `node_list`: hashed for speed (one lookup per file of every MC), sorted
    /// once in [`Merger::finish`]. The entries stay put in `node_list` so that growing the map or
    /// sorting moves small (key, index) pairs, not whole files. An entry's own `path` is left
    /// empty until `finish`: the key holds it (one allocation fewer per entry).
    nodes: HashMap<String, usize>,
    node_list: Vec<Option<Node>>,
    units: BTreeMap<String, (ign::Unit, BTreeMap<String, ign::Dropin>)>,
    users: BTreeMap<String, ign::User>,
    groups: BTreeMap<String, ign::Group>,
    disks: BTreeMap<String, ign::Disk>,
    filesystems: BTreeMap<String, ign::Filesystem>,
    raid: BTreeMap<String, ign::Raid>,
    luks: BTreeMap<String, ign::Luks>,
}

fn set<T>(dst: &mut Option<T>, src: Option<T>) {
    if src.is_some() {
        *dst = src;
    }
}

/// Primitive lists merge as a union by value, keeping first-seen order.
fn union(dst: &mut Option<Vec<String>>, src: Option<Vec<String>>) {
    let Some(src) = src else { return };
    let d = dst.get_or_insert_with(Vec::new);
    for s in src {
        if !d.contains(&s) {
            d.push(s);
        }
    }
}

fn union_vec(dst: &mut Vec<String>, src: Option<Vec<String>>) {
    for s in src.into_iter().flatten() {
        if !dst.contains(&s) {
            dst.push(s);
        }
    }
}

/// Keyed lists: same key merges via `f`, new keys append.
fn keyed<T>(
    dst: &mut Option<Vec<T>>,
    src: Option<Vec<T>>,
    key: impl Fn(&T) -> Option<&str>,
    f: impl Fn(&mut T, T),
) {
    let Some(src) = src else { return };
    let d = dst.get_or_insert_with(Vec::new);
    for s in src {
        match d.iter_mut().find(|x| key(x).is_some() && key(x) == key(&s)) {
            Some(existing) => f(existing, s),
            None => d.push(s),
        }
    }
}

fn merge_node_user(dst: &mut Option<ign::NodeUser>, src: Option<ign::NodeUser>) {
    let Some(s) = src else { return };
    let d = dst.get_or_insert_with(Default::default);
    set(&mut d.id, s.id);
    set(&mut d.name, s.name);
}

fn merge_node_group(dst: &mut Option<ign::NodeGroup>, src: Option<ign::NodeGroup>) {
    let Some(s) = src else { return };
    let d = dst.get_or_insert_with(Default::default);
    set(&mut d.id, s.id);
    set(&mut d.name, s.name);
}

fn merge_resource(d: &mut ign::Resource, s: ign::Resource) {
    set(&mut d.source, s.source);
    // butane#332: an uncompressed later source must not inherit an earlier `gzip`.
    d.compression = s.compression;
    if let Some(v) = s.verification {
        set(
            &mut d.verification.get_or_insert_with(Default::default).hash,
            v.hash,
        );
    }
    keyed(
        &mut d.http_headers,
        s.http_headers,
        |h| Some(h.name.as_str()),
        |d, s| set(&mut d.value, s.value),
    );
}

fn merge_resources(dst: &mut Option<Vec<ign::Resource>>, src: Option<Vec<ign::Resource>>) {
    keyed(dst, src, |r| r.source.as_deref(), merge_resource);
}

fn merge_file(d: &mut ign::File, s: ign::File) {
    if let Some(a) = s.append {
        d.append.get_or_insert_with(Vec::new).extend(a);
    }
    if let Some(c) = s.contents {
        merge_resource(d.contents.get_or_insert_with(Default::default), c);
    }
    merge_node_group(&mut d.group, s.group);
    merge_node_user(&mut d.user, s.user);
    set(&mut d.mode, s.mode);
    set(&mut d.overwrite, s.overwrite);
}

fn merge_user(d: &mut ign::User, s: ign::User) {
    set(&mut d.gecos, s.gecos);
    union(&mut d.groups, s.groups);
    set(&mut d.home_dir, s.home_dir);
    set(&mut d.no_create_home, s.no_create_home);
    set(&mut d.no_log_init, s.no_log_init);
    set(&mut d.no_user_group, s.no_user_group);
    set(&mut d.password_hash, s.password_hash);
    set(&mut d.primary_group, s.primary_group);
    set(&mut d.shell, s.shell);
    set(&mut d.should_exist, s.should_exist);
    union(&mut d.ssh_authorized_keys, s.ssh_authorized_keys);
    set(&mut d.system, s.system);
    set(&mut d.uid, s.uid);
}

fn merge_group(d: &mut ign::Group, s: ign::Group) {
    set(&mut d.gid, s.gid);
    set(&mut d.password_hash, s.password_hash);
    set(&mut d.should_exist, s.should_exist);
    set(&mut d.system, s.system);
}

fn replace_all<T>(map: &mut BTreeMap<String, T>, src: Option<Vec<T>>, key: impl Fn(&T) -> String) {
    for s in src.into_iter().flatten() {
        map.insert(key(&s), s);
    }
}

impl Merger {
    /// Merge one more config on top of everything added so far.
    pub fn add(&mut self, cfg: Ignition) {
        self.add_section(cfg.ignition);
        if let Some(k) = cfg.kernel_arguments {
            union_vec(&mut self.kargs_exist, k.should_exist);
            union_vec(&mut self.kargs_not_exist, k.should_not_exist);
        }
        if let Some(p) = cfg.passwd {
            for u in p.users.into_iter().flatten() {
                match self.users.get_mut(&u.name) {
                    Some(d) => merge_user(d, u),
                    None => {
                        self.users.insert(u.name.clone(), u);
                    }
                }
            }
            for g in p.groups.into_iter().flatten() {
                match self.groups.get_mut(&g.name) {
                    Some(d) => merge_group(d, g),
                    None => {
                        self.groups.insert(g.name.clone(), g);
                    }
                }
            }
        }
        if let Some(s) = cfg.storage {
            for mut f in s.files.into_iter().flatten() {
                // One hash per file: the path moves into the map or is dropped if already there.
                match self.nodes.entry(std::mem::take(&mut f.path)) {
                    Entry::Occupied(e) => match &mut self.node_list[*e.get()] {
                        Some(Node::File(d)) => merge_file(d, f),
                        other => *other = Some(Node::File(f)),
                    },
                    Entry::Vacant(e) => {
                        e.insert(self.node_list.len());
                        self.node_list.push(Some(Node::File(f)));
                    }
                }
            }
            for mut l in s.links.into_iter().flatten() {
                match self.node_mut(&l.path) {
                    Some(Node::Link(d)) => {
                        merge_node_group(&mut d.group, l.group);
                        merge_node_user(&mut d.user, l.user);
                        set(&mut d.hard, l.hard);
                        set(&mut d.overwrite, l.overwrite);
                        set(&mut d.target, l.target);
                    }
                    _ => self.put_node(std::mem::take(&mut l.path), Node::Link(l)),
                }
            }
            for mut dir in s.directories.into_iter().flatten() {
                match self.node_mut(&dir.path) {
                    Some(Node::Dir(d)) => {
                        merge_node_group(&mut d.group, dir.group);
                        merge_node_user(&mut d.user, dir.user);
                        set(&mut d.mode, dir.mode);
                        set(&mut d.overwrite, dir.overwrite);
                    }
                    _ => self.put_node(std::mem::take(&mut dir.path), Node::Dir(dir)),
                }
            }
            replace_all(&mut self.disks, s.disks, |d| d.device.clone());
            replace_all(&mut self.filesystems, s.filesystems, |f| f.device.clone());
            replace_all(&mut self.raid, s.raid, |r| r.name.clone());
            replace_all(&mut self.luks, s.luks, |l| l.name.clone());
        }
        if let Some(sd) = cfg.systemd {
            for mut u in sd.units.into_iter().flatten() {
                let dropins = u.dropins.take();
                let (d, ds) = self
                    .units
                    .entry(u.name.clone())
                    .or_insert_with(|| (ign::Unit::new(u.name.clone()), BTreeMap::new()));
                set(&mut d.contents, u.contents);
                set(&mut d.enabled, u.enabled);
                set(&mut d.mask, u.mask);
                for dropin in dropins.into_iter().flatten() {
                    match ds.get_mut(&dropin.name) {
                        Some(x) => set(&mut x.contents, dropin.contents),
                        None => {
                            ds.insert(dropin.name.clone(), dropin);
                        }
                    }
                }
            }
        }
    }

    fn node_mut(&mut self, path: &str) -> Option<&mut Node> {
        let i = *self.nodes.get(path)?;
        self.node_list[i].as_mut()
    }

    /// A new entry at `path`, or one of another kind replacing the old one there.
    fn put_node(&mut self, path: String, node: Node) {
        match self.nodes.get(&path) {
            Some(&i) => self.node_list[i] = Some(node),
            None => {
                self.nodes.insert(path, self.node_list.len());
                self.node_list.push(Some(node));
            }
        }
    }

    fn add_section(&mut self, s: ign::Ignition) {
        let d = &mut self.section;
        if let Some(c) = s.config {
            let dc = d.config.get_or_insert_with(Default::default);
            merge_resources(&mut dc.merge, c.merge);
            if let Some(r) = c.replace {
                merge_resource(dc.replace.get_or_insert_with(Default::default), r);
            }
        }
        if let Some(p) = s.proxy {
            let dp = d.proxy.get_or_insert_with(Default::default);
            set(&mut dp.http_proxy, p.http_proxy);
            set(&mut dp.https_proxy, p.https_proxy);
            union(&mut dp.no_proxy, p.no_proxy);
        }
        if let Some(sec) = s.security
            && let Some(tls) = sec.tls
        {
            let dt = d
                .security
                .get_or_insert_with(Default::default)
                .tls
                .get_or_insert_with(Default::default);
            merge_resources(&mut dt.certificate_authorities, tls.certificate_authorities);
        }
        if let Some(t) = s.timeouts {
            let dt = d.timeouts.get_or_insert_with(Default::default);
            set(&mut dt.http_response_headers, t.http_response_headers);
            set(&mut dt.http_total, t.http_total);
        }
    }

    /// The merged config, with upstream's post-merge normalisation (`overwrite: true` on files that
    /// do not say, empty compression dropped).
    pub fn finish(self) -> Ignition {
        let mut out = Ignition::new(self.section);
        out.ignition.version = INTERNAL_VERSION.to_string();
        if !self.kargs_exist.is_empty() || !self.kargs_not_exist.is_empty() {
            out.kernel_arguments = Some(ign::KernelArguments {
                should_exist: Some(self.kargs_exist).filter(|v| !v.is_empty()),
                should_not_exist: Some(self.kargs_not_exist).filter(|v| !v.is_empty()),
            });
        }
        if !self.users.is_empty() || !self.groups.is_empty() {
            out.passwd = Some(ign::Passwd {
                groups: nonempty(self.groups.into_values().collect()),
                users: nonempty(self.users.into_values().collect()),
            });
        }
        let mut storage = ign::Storage::default();
        let (mut files, mut links, mut dirs) = (Vec::new(), Vec::new(), Vec::new());
        let mut nodes: Vec<(String, usize)> = self.nodes.into_iter().collect();
        nodes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut node_list = self.node_list;
        for (path, i) in nodes {
            let Some(node) = node_list[i].take() else {
                continue;
            };
            match node {
                Node::File(mut f) => {
                    f.path = path;
                    f.overwrite.get_or_insert(true);
                    if let Some(c) = &mut f.contents
                        && c.compression.as_deref() == Some("")
                    {
                        c.compression = None;
                    }
                    files.push(f);
                }
                Node::Link(mut l) => {
                    l.path = path;
                    links.push(l);
                }
                Node::Dir(mut d) => {
                    d.path = path;
                    dirs.push(d);
                }
            }
        }
        storage.files = nonempty(files);
        storage.links = nonempty(links);
        storage.directories = nonempty(dirs);
        storage.disks = nonempty(self.disks.into_values().collect());
        storage.filesystems = nonempty(self.filesystems.into_values().collect());
        storage.raid = nonempty(self.raid.into_values().collect());
        storage.luks = nonempty(self.luks.into_values().collect());
        if storage != ign::Storage::default() {
            out.storage = Some(storage);
        }
        if !self.units.is_empty() {
            let units = self
                .units
                .into_values()
                .map(|(mut u, ds)| {
                    u.dropins = nonempty(ds.into_values().collect());
                    u
                })
                .collect();
            out.systemd = Some(ign::Systemd { units: Some(units) });
        }
        out
    }
}

fn nonempty<T>(v: Vec<T>) -> Option<Vec<T>> {
    Some(v).filter(|v| !v.is_empty())
}
