//! What a pool pass reads of the nodes, kept from one pass to the next.
//!
//! A pass plans over every member of its pool. At a thousand nodes, finding each node's digest
//! again (cloning every node out of the cache, looking each up by name) cost more than the plan
//! itself, and passes come every few milliseconds in a rollout. The node cache lists its nodes
//! in the same order while none comes or goes, and hands out a new object for every change: a
//! pass compares the addresses the cache lists against the last pass's, and reads only the
//! nodes at the positions that moved.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
use mco_rollout::plan::{Digest, Member, Membership, Strings};

use crate::written::caught_up;

/// The nodes of one pass: the cache's, with this controller's own later writes laid over them.
pub struct NodeView {
    /// A digest of every node in the cache, in the cache's order.
    cached: Arc<Vec<Arc<Digest>>>,
    /// Digests of the nodes this controller wrote and the cache does not show yet, by position.
    written: HashMap<usize, Arc<Digest>>,
    /// The label epoch the digests left (see `ctx::MembershipMemo`).
    pub epoch: u64,
    /// Moves whenever the cache lists other nodes or another order.
    order: u64,
}

impl NodeView {
    /// The digest at `i`, as this controller last knows the node.
    fn at(&self, i: usize) -> &Arc<Digest> {
        self.written.get(&i).unwrap_or(&self.cached[i])
    }

    /// The nodes at `positions`, as this controller last knows them.
    pub fn pick(&self, positions: &[usize]) -> Vec<&Arc<Digest>> {
        positions.iter().map(|&i| self.at(i)).collect()
    }

    /// Every node, as this controller last knows it.
    pub fn all(&self) -> Vec<&Arc<Digest>> {
        (0..self.cached.len()).map(|i| self.at(i)).collect()
    }

    /// The cached nodes (labels are never among this controller's writes).
    pub fn cached_nodes(&self) -> Vec<&Node> {
        self.cached.iter().map(|d| d.node()).collect()
    }
}

/// Where a pool's members stood: the membership and order they were found at, and their
/// positions, sorted by name.
type Members = (Arc<Membership>, u64, Arc<[usize]>);

/// The last pass's digests and where they stood.
#[derive(Default)]
pub struct NodeDigests {
    cached: Arc<Vec<Arc<Digest>>>,
    /// The address of the node object each digest in `cached` was read from.
    addrs: Vec<usize>,
    positions: HashMap<String, usize>,
    order: u64,
    members: HashMap<String, Members>,
    strings: Strings,
}

impl NodeDigests {
    /// The nodes in `store`, with those in `written` that the cache does not show yet laid over
    /// them; written copies the cache has caught up with are dropped from `written`. `epoch`
    /// moves when a node's labels changed, or a node came or went.
    pub fn read(
        &mut self,
        store: &Store<Node>,
        written: &mut HashMap<String, Arc<Node>>,
        epoch: &AtomicU64,
    ) -> NodeView {
        let addrs = RefCell::new(Vec::with_capacity(self.addrs.len()));
        // Only the nodes at moved positions are cloned out of the cache, under one read lock.
        let moved = store.state_filter(|n| {
            let mut addrs = addrs.borrow_mut();
            let a = std::ptr::from_ref(n) as usize;
            let i = addrs.len();
            addrs.push(a);
            self.addrs.get(i) != Some(&a)
        });
        let addrs = addrs.into_inner();
        let mut relabelled = false;
        let mut relisted = addrs.len() != self.addrs.len();
        if !relisted && !moved.is_empty() {
            let at = (0..addrs.len()).filter(|&i| addrs[i] != self.addrs[i]);
            let cached = Arc::make_mut(&mut self.cached);
            for (i, node) in at.zip(moved) {
                let was = &cached[i];
                if was.name() != node.metadata.name.as_deref().unwrap_or_default() {
                    relisted = true;
                    break;
                }
                relabelled |= was.node().metadata.labels != node.metadata.labels;
                cached[i] = Arc::new(Digest::interned(node, &mut self.strings));
            }
        }
        if relisted {
            let all = store.state();
            self.addrs = all.iter().map(|n| Arc::as_ptr(n) as usize).collect();
            let cached: Vec<Arc<Digest>> = all
                .into_iter()
                .map(|n| Arc::new(Digest::interned(n, &mut self.strings)))
                .collect();
            self.positions = cached
                .iter()
                .enumerate()
                .map(|(i, d)| (d.name().to_string(), i))
                .collect();
            self.cached = Arc::new(cached);
            self.order += 1;
            self.members.clear();
            relabelled = true;
        } else {
            self.addrs = addrs;
        }
        if relabelled {
            epoch.fetch_add(1, Ordering::SeqCst);
        }

        let mut overlay = HashMap::new();
        written.retain(|name, w| {
            let Some(&i) = self.positions.get(name) else {
                return true;
            };
            let caught_up = caught_up(self.cached[i].node(), w);
            if !caught_up {
                overlay.insert(
                    i,
                    Arc::new(Digest::interned(Arc::clone(w), &mut self.strings)),
                );
            }
            !caught_up
        });
        NodeView {
            cached: Arc::clone(&self.cached),
            written: overlay,
            epoch: epoch.load(Ordering::SeqCst),
            order: self.order,
        }
    }

    /// Where the members of `pool` stand in `view`, sorted by name (see [`NodeView::pick`]).
    /// Their positions are found again only when the membership or the cache's order changed.
    pub fn members(
        &mut self,
        pool: &str,
        view: &NodeView,
        membership: &Arc<Membership>,
    ) -> Arc<[usize]> {
        let fresh = self.members.get(pool).filter(|(m, order, _)| {
            Arc::ptr_eq(m, membership) && *order == view.order && view.order == self.order
        });
        match fresh {
            Some((_, _, p)) => Arc::clone(p),
            None => {
                let mut p: Vec<usize> = (0..view.cached.len())
                    .filter(|&i| {
                        membership
                            .primary
                            .get(view.cached[i].name())
                            .map(String::as_str)
                            == Some(pool)
                    })
                    .collect();
                p.sort_by(|&a, &b| view.cached[a].name().cmp(view.cached[b].name()));
                let p: Arc<[usize]> = p.into();
                if view.order == self.order {
                    self.members.insert(
                        pool.to_string(),
                        (Arc::clone(membership), view.order, Arc::clone(&p)),
                    );
                }
                p
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher::Event;
    use mco_api::constants::annotations;

    fn node(name: &str, rv: u64, desired: &str, role: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.to_string()),
                labels: Some([(format!("node-role.kubernetes.io/{role}"), String::new())].into()),
                annotations: Some(
                    [(annotations::DESIRED_CONFIG.to_string(), desired.to_string())].into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn membership(pairs: &[(&str, &str)]) -> Arc<Membership> {
        Arc::new(Membership {
            primary: pairs
                .iter()
                .map(|(n, p)| (n.to_string(), p.to_string()))
                .collect(),
            ..Default::default()
        })
    }

    fn names(ds: &[&Arc<Digest>]) -> Vec<String> {
        ds.iter().map(|d| d.name().to_string()).collect()
    }

    fn desired(ds: &[&Arc<Digest>]) -> Vec<String> {
        ds.iter()
            .map(|d| mco_rollout::plan::desired_config(d.node()).to_string())
            .collect()
    }

    fn apply(w: &mut Writer<Node>, n: Node) {
        w.apply_watcher_event(&Event::Apply(n));
    }

    #[test]
    fn a_pass_reads_again_only_the_nodes_that_changed() {
        let (store, mut w) = reflector::store::<Node>();
        // Four nodes leave the cache's table room to spare: a table grown by the next write
        // would list its nodes in another order, and the next pass would read them all again.
        for (i, n) in ["c", "a", "b", "x"].iter().enumerate() {
            apply(&mut w, node(n, i as u64 + 1, "r1", "worker"));
        }
        let epoch = AtomicU64::new(0);
        let mut digests = NodeDigests::default();
        let mut written = HashMap::new();
        let m = membership(&[("a", "worker"), ("b", "worker"), ("c", "worker")]);

        let v1 = digests.read(&store, &mut written, &epoch);
        assert_eq!(v1.epoch, 1, "the first read is a listing");
        assert_eq!(
            names(&v1.pick(&digests.members("worker", &v1, &m))),
            ["a", "b", "c"]
        );
        let before: Vec<Arc<Digest>> = v1.all().into_iter().cloned().collect();
        drop(v1);

        // One node changes its annotations: only its digest is new, and no epoch moves.
        apply(&mut w, node("b", 10, "r2", "worker"));
        let v2 = digests.read(&store, &mut written, &epoch);
        assert_eq!(v2.epoch, 1);
        let after = v2.all();
        let renewed: Vec<bool> = before
            .iter()
            .zip(&after)
            .map(|(a, b)| !Arc::ptr_eq(a, b))
            .collect();
        assert_eq!(renewed.iter().filter(|r| **r).count(), 1);
        let members = v2.pick(&digests.members("worker", &v2, &m));
        assert_eq!(names(&members), ["a", "b", "c"]);
        assert_eq!(desired(&members), ["r1", "r2", "r1"]);
        // The texts a thousand nodes share are one copy.
        assert!(Arc::ptr_eq(members[0].desired(), members[2].desired()));
        drop(members);
        drop(v2);

        // New labels move the epoch; a node come or gone too.
        apply(&mut w, node("c", 11, "r1", "infra"));
        assert_eq!(digests.read(&store, &mut written, &epoch).epoch, 2);
        apply(&mut w, node("d", 12, "r1", "worker"));
        let v = digests.read(&store, &mut written, &epoch);
        assert_eq!(v.epoch, 3);
        assert_eq!(names(&v.all()).len(), 5);
        drop(v);
        w.apply_watcher_event(&Event::Delete(node("a", 13, "r1", "worker")));
        let v = digests.read(&store, &mut written, &epoch);
        assert_eq!(v.epoch, 4);
        let mut left = names(&v.all());
        left.sort();
        assert_eq!(left, ["b", "c", "d", "x"]);
        let m = membership(&[("b", "worker"), ("c", "infra"), ("d", "worker")]);
        assert_eq!(
            names(&v.pick(&digests.members("worker", &v, &m))),
            ["b", "d"]
        );
        assert_eq!(names(&v.pick(&digests.members("infra", &v, &m))), ["c"]);
    }

    #[test]
    fn own_writes_stand_in_until_the_cache_catches_up() {
        let (store, mut w) = reflector::store::<Node>();
        apply(&mut w, node("a", 1, "r1", "worker"));
        apply(&mut w, node("b", 2, "r1", "worker"));
        let epoch = AtomicU64::new(0);
        let mut digests = NodeDigests::default();
        let m = membership(&[("a", "worker"), ("b", "worker")]);
        let mut written: HashMap<String, Arc<Node>> =
            [("a".to_string(), Arc::new(node("a", 5, "r2", "worker")))].into();

        let mut desired_now = |written: &mut HashMap<String, Arc<Node>>| {
            let v = digests.read(&store, written, &epoch);
            desired(&v.pick(&digests.members("worker", &v, &m)))
        };
        assert_eq!(desired_now(&mut written), ["r2", "r1"]);
        assert_eq!(written.len(), 1, "the cache is behind the write");

        // An older event arrives: still behind.
        apply(&mut w, node("a", 4, "r1", "worker"));
        assert_eq!(desired_now(&mut written), ["r2", "r1"]);

        // The write itself arrives: the cache's copy is used and the written one dropped.
        apply(&mut w, node("a", 5, "r2", "worker"));
        let v = digests.read(&store, &mut written, &epoch);
        assert_eq!(
            desired(&v.pick(&digests.members("worker", &v, &m))),
            ["r2", "r1"]
        );
        assert!(written.is_empty());
        assert!(
            v.all()
                .iter()
                .all(|d| v.cached.iter().any(|c| Arc::ptr_eq(c, d)))
        );
    }
}
