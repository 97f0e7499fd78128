//! Time one full planning pass (membership, candidates and status for every pool) over a large
//! cluster: `cargo run --release -p mco-controller --example plan_bench [nodes] [pools]`.

use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mco_api::constants::{annotations, states};
use mco_api::{MachineConfigPool, MachineConfigPoolSpec, PoolConfiguration};
use mco_rollout::plan;

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let pools: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let pool_objs: Vec<MachineConfigPool> = (0..pools)
        .map(|p| {
            MachineConfigPool::new(
                &format!("pool{p}"),
                MachineConfigPoolSpec {
                    node_selector: Some(LabelSelector {
                        match_labels: Some(
                            [(format!("node-role.kubernetes.io/pool{p}"), String::new())].into(),
                        ),
                        match_expressions: None,
                    }),
                    max_unavailable: Some(IntOrString::String("10%".into())),
                    configuration: Some(PoolConfiguration {
                        name: format!("rendered-pool{p}-new"),
                        source: vec![],
                    }),
                    ..Default::default()
                },
            )
        })
        .collect();
    let node_objs: Vec<Node> = (0..nodes)
        .map(|i| {
            let p = i % pools;
            let mut n = Node::default();
            n.metadata.name = Some(format!("node-{i:05}"));
            n.metadata.labels = Some(
                [
                    (format!("node-role.kubernetes.io/pool{p}"), String::new()),
                    (
                        "topology.kubernetes.io/zone".to_string(),
                        format!("zone-{}", i % 3),
                    ),
                ]
                .into(),
            );
            let config = format!("rendered-pool{p}-old");
            n.metadata.annotations = Some(
                [
                    (annotations::CURRENT_CONFIG.to_string(), config.clone()),
                    (annotations::DESIRED_CONFIG.to_string(), config),
                    (annotations::STATE.to_string(), states::DONE.to_string()),
                ]
                .into(),
            );
            n
        })
        .collect();
    let runs = 20;
    let mut total = std::time::Duration::ZERO;
    let mut candidates = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let membership = plan::assign_pools(&node_objs, &pool_objs);
        for p in &pool_objs {
            candidates += plan::plan_with(p, &node_objs, &membership, None, "now")
                .candidates
                .len();
        }
        total += start.elapsed();
    }
    println!(
        "{nodes} nodes, {pools} pools: {:.1} ms per full planning pass ({} candidates per pass)",
        total.as_secs_f64() * 1000.0 / runs as f64,
        candidates / runs
    );
}
