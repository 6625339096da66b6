//! Where a rollout stands, read from the cluster: what a failing test prints and what the benchmark reports about
//! the nodes that did not finish.

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use shared::crd::{NodeVersion, PendingNode};
use shared::protocol::keys;
use std::collections::{BTreeMap, HashSet};
use std::fmt;

use crate::apiserver::Store;

/// One node as the rollout sees it.
#[derive(Debug, Clone)]
pub struct NodeStanding {
    /// The Node's name.
    pub name: String,
    /// Its scaling group, when its provider ID is the simulated cloud's.
    pub group: Option<String>,
    /// The kubelet version it reports.
    pub kubelet: Option<String>,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// The protocol's annotations (without the prefix), but the boot IDs and tokens.
    pub protocol: BTreeMap<String, String>,
}

impl NodeStanding {
    fn of(node: &Node) -> NodeStanding {
        let spec = node.spec.as_ref();
        let protocol = node
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.strip_prefix(keys::PREFIX)?.to_owned(), v.clone())))
            .filter(|(k, _)| !k.contains("boot") && !k.contains("token"))
            .collect();
        NodeStanding {
            name: node.metadata.name.clone().unwrap_or_default(),
            group: spec
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|id| Some(id.strip_prefix("simulated://")?.split('/').next()?.to_owned())),
            kubelet: node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.kubelet_version.clone()),
            cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            protocol,
        }
    }

    fn get(&self, key: &str) -> &str {
        key.strip_prefix(keys::PREFIX).and_then(|k| self.protocol.get(k)).map_or("", String::as_str)
    }
}

impl fmt::Display for NodeStanding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)?;
        if let Some(group) = &self.group {
            write!(f, " group={group}")?;
        }
        if let Some(kubelet) = &self.kubelet {
            write!(f, " kubelet={kubelet}")?;
        }
        if self.cordoned {
            write!(f, " cordoned")?;
        }
        for (k, v) in &self.protocol {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// A NodeVersion's status, the nodes and the PendingNodes, as one snapshot.
#[derive(Debug, Clone)]
pub struct Standing {
    /// The NodeVersion's status (JSON), `null` when it has none or does not exist.
    pub status: Value,
    /// Every node, by name.
    pub nodes: Vec<NodeStanding>,
    /// Each PendingNode: name, spec and status.
    pub pending: Vec<String>,
}

impl Standing {
    /// Reads the NodeVersion `version`, the Nodes and the PendingNodes of `store` (what fails to read is left
    /// out: this is for diagnosis).
    pub fn read(store: &Store, version: &str) -> Standing {
        let status = store
            .api::<NodeVersion>()
            .get(None, version)
            .ok()
            .and_then(|v| serde_json::to_value(v.status).ok())
            .unwrap_or(Value::Null);
        let mut nodes: Vec<NodeStanding> = store
            .api::<Node>()
            .list(None, &Default::default())
            .map(|l| l.items.iter().map(NodeStanding::of).collect())
            .unwrap_or_default();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let pending = store
            .api::<PendingNode>()
            .list(None, &Default::default())
            .map(|l| {
                l.items
                    .iter()
                    .map(|p| format!("{} {:?} {:?}", p.metadata.name.as_deref().unwrap_or_default(), p.spec, p.status))
                    .collect()
            })
            .unwrap_or_default();
        Standing { status, nodes, pending }
    }

    /// The nodes of `of` whose intent is not `done`, grouped by intent, state and cordon (with up to five names
    /// each), and the status: what the benchmark prints for a rollout that did not complete.
    pub fn unfinished(&self, of: &HashSet<String>) -> Value {
        let mut by_step: BTreeMap<String, (usize, Vec<&str>)> = BTreeMap::new();
        for node in self.nodes.iter().filter(|n| of.contains(&n.name)) {
            if node.get(keys::INTENT) == "done" {
                continue;
            }
            let key =
                format!("intent={} state={} cordoned={}", node.get(keys::INTENT), node.get(keys::STATE), node.cordoned);
            let entry = by_step.entry(key).or_default();
            entry.0 += 1;
            if entry.1.len() < 5 {
                entry.1.push(&node.name);
            }
        }
        let by_step: BTreeMap<String, Value> =
            by_step.into_iter().map(|(k, (n, names))| (k, json!({"count": n, "examples": names}))).collect();
        json!({"nodes_by_step": by_step, "nodeversion_status": self.status})
    }
}

impl fmt::Display for Standing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "status {}", self.status)?;
        writeln!(f, "nodes:")?;
        for node in &self.nodes {
            writeln!(f, "  {node}")?;
        }
        writeln!(f, "pending:")?;
        for pending in &self.pending {
            writeln!(f, "  {pending}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_shows_its_group_cordon_and_protocol_but_no_boot_ids_or_tokens() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "w-1", "annotations": {
                keys::INTENT: "drain", keys::INTENT_TOKEN: "7", keys::BOOT_ID: "b", "other.io/x": "y"}},
            "spec": {"providerID": "simulated://workers-a/w-1", "unschedulable": true},
        }))
        .unwrap();
        let standing = NodeStanding::of(&node);
        assert_eq!(standing.to_string(), "w-1 group=workers-a cordoned intent=drain");
        let all = Standing { status: Value::Null, nodes: vec![standing], pending: vec![] };
        let unfinished = all.unfinished(&HashSet::from(["w-1".to_owned()]));
        assert_eq!(unfinished["nodes_by_step"]["intent=drain state= cordoned=true"]["count"], 1);
        assert_eq!(all.unfinished(&HashSet::new())["nodes_by_step"], json!({}));
    }
}
