//! Caches one part of a process lends another. The controller's watches keep every Node, pool,
//! MachineConfigNode and RolloutPolicy; the dashboard that `mco up` serves from the same process
//! reads them there instead of keeping a second copy of a thousand Nodes and MachineConfigNodes,
//! and the API server serves two watches fewer.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
use tokio::sync::{Notify, watch};

use crate::{MachineConfigNode, MachineConfigPool, RolloutPolicy};

/// Stores that watches keep current, and a signal of their changes.
#[derive(Clone)]
pub struct Caches {
    pub nodes: Store<Node>,
    pub pools: Store<MachineConfigPool>,
    pub mcns: Store<MachineConfigNode>,
    pub policies: Store<RolloutPolicy>,
    /// Notified after each change to any of the stores; its one waiter is the borrower.
    pub changed: Arc<Notify>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("nodes", &self.nodes.len())
            .field("pools", &self.pools.len())
            .field("mcns", &self.mcns.len())
            .field("policies", &self.policies.len())
            .finish()
    }
}

/// Where the lender publishes its caches while it has them, and `None` while it has none (the
/// controller before it leads, or after it lost its lease).
pub type Lender = Arc<watch::Sender<Option<Caches>>>;

/// The borrower's end of a [`Lender`].
pub type Borrower = watch::Receiver<Option<Caches>>;

/// A new lender and its borrower, with nothing lent yet.
pub fn channel() -> (Lender, Borrower) {
    let (tx, rx) = watch::channel(None);
    (Arc::new(tx), rx)
}

/// Lends `caches` until dropped, then withdraws them: caches whose watches stopped are no
/// longer kept current.
pub struct Lent<'a>(&'a Lender);

impl<'a> Lent<'a> {
    pub fn new(lender: &'a Lender, caches: Caches) -> Self {
        lender.send_replace(Some(caches));
        Lent(lender)
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.0.send_replace(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_are_withdrawn_when_the_loan_ends() {
        let (lender, borrower) = channel();
        assert!(borrower.borrow().is_none(), "nothing lent at first");
        let caches = Caches {
            nodes: kube::runtime::reflector::store().0,
            pools: kube::runtime::reflector::store().0,
            mcns: kube::runtime::reflector::store().0,
            policies: kube::runtime::reflector::store().0,
            changed: Arc::new(Notify::new()),
        };
        let lent = Lent::new(&lender, caches);
        assert!(borrower.borrow().is_some(), "lent");
        drop(lent);
        assert!(borrower.borrow().is_none(), "withdrawn");
    }
}
