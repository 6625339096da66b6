//! A rollout of the real controller and agents against the bare API server (no built-in
//! controllers): hosts that "reboot" by updating their Node's status. It exercises the protocol,
//! the executor's conditional writes, the agent's reports, leader election and the status, fast.

use agent::host::{HostError, HostFacts, HostUpdater};
use dev::apiserver::{ApiServer, ApiServerConfig, Patch, Store};
use dev::harness;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{PatchParams, PostParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::{BootId, Step};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct HostState {
    image: String,
    boot: u32,
    staged: Option<String>,
}

/// A host that stages instantly and reboots by flipping its Node's Ready condition and boot ID.
struct FakeHost {
    node: String,
    store: Store,
    state: Arc<Mutex<HostState>>,
}

fn boot_id(node: &str, boot: u32) -> String {
    format!("{node}-boot-{boot}")
}

fn set_status(store: &Store, node: &str, ready: bool, boot: u32) {
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "Test"}],
        "nodeInfo": {"bootID": boot_id(node, boot)}
    }});
    store.api::<Node>().patch_status(None, node, &Patch::Merge(status), &PatchParams::default()).unwrap();
}

impl HostUpdater for FakeHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        let s = self.state.lock().unwrap();
        Ok(HostFacts {
            os_image: s.image.clone(),
            boot_id: BootId::parse("boot", &boot_id(&self.node, s.boot)).unwrap(),
            staged_image: s.staged.clone(),
            components_hash: None,
        })
    }

    async fn stage(&self, target: &str) -> Result<(), HostError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.state.lock().unwrap().staged = Some(target.to_owned());
        Ok(())
    }

    async fn activate_and_reboot(&self, _target: &str) -> Result<(), HostError> {
        let (store, node, state) = (self.store.clone(), self.node.clone(), self.state.clone());
        let boot = state.lock().unwrap().boot;
        set_status(&store, &node, false, boot);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let boot = {
                let mut s = state.lock().unwrap();
                s.image = s.staged.take().unwrap_or_else(|| s.image.clone());
                s.boot += 1;
                s.boot
            };
            set_status(&store, &node, true, boot);
        });
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_completes_with_every_node_verified_and_uncordoned() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let store = server.store();
    for crd in shared::crd::all() {
        store.api::<CustomResourceDefinition>().create(None, &crd, &PostParams::default()).unwrap();
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "update-operator"}})).unwrap();
    store.api::<Namespace>().create(None, &ns, &PostParams::default()).unwrap();
    let names = ["cp-0", "w-0", "w-1", "w-2", "w-3"];
    for name in names {
        let mut labels = json!({"update.edgeless.systems/managed": "true"});
        if name.starts_with("cp") {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
        }
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        store.api::<Node>().create(None, &node, &PostParams::default()).unwrap();
        set_status(&store, name, true, 0);
    }
    let mut agents = Vec::new();
    for name in names {
        let (store, node) = (store.clone(), name.to_owned());
        agents.push(harness::agent_with(server.url(), name, move || {
            Ok(FakeHost {
                node,
                store,
                state: Arc::new(Mutex::new(HostState { image: "v1".into(), boot: 0, staged: None })),
            })
        }));
    }
    let observer =
        dev::observer::Observer::start(server.client(), dev::observer::Limits { max_disrupted: 2, check_pdbs: false });
    let controller = harness::controller(server.url(), harness::controller_options("c1"));
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"},
        "spec": {"image": "v2", "rollout": {"maxUnavailable": 2}}
    }))
    .unwrap();
    store.api::<NodeVersion>().create(None, &version, &PostParams::default()).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let v = store.api::<NodeVersion>().get(None, "constellation-version").unwrap();
        let done = v.status.as_ref().is_some_and(|s| s.counts.up_to_date == 5 && s.in_flight.is_empty());
        if done {
            let up = v.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "UpToDate").unwrap();
            assert_eq!((up.status.as_str(), up.reason.as_str()), ("True", "AllNodesUpToDate"));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rollout did not finish: {:?}", v.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in names {
        let node = store.api::<Node>().get(None, name).unwrap();
        assert!(!node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false), "{name} left cordoned");
        let a = node.metadata.annotations.unwrap();
        assert_eq!(a["update.edgeless.systems/os-image"], "v2", "{name}");
        assert_eq!(a["update.edgeless.systems/intent"], "done", "{name}");
        assert!(!a.contains_key("update.edgeless.systems/cordoned-by"), "{name}");
    }
    // 5 nodes, each: controller stage, drain (with cordon), reboot, done (with uncordon); agent busy,
    // staged, rebooted; plus each agent's first report of its host. Nothing else.
    let writes = server.metrics().writes_by_user_agent("nodes");
    let by = |mode: &str| {
        writes.iter().filter(|(ua, _)| ua.starts_with(&format!("update-operator/{mode}"))).map(|(_, n)| *n).sum::<u64>()
    };
    assert_eq!(by("controller"), 4 * 5, "{writes:?}");
    assert_eq!(by("agent"), 3 * 5 + 5, "{writes:?}");
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_disrupted_seen, 2, "the budget was never used in full");
    assert_eq!(observed.max_control_plane_disrupted_seen, 1);
    let steps: Vec<Step> = observed.timeline["w-0"].iter().map(|(_, s)| *s).collect();
    assert_eq!(steps, vec![Step::Stage, Step::Drain, Step::Reboot, Step::Done]);
    controller.stop(Duration::from_secs(10)).await.unwrap();
    for agent in agents {
        agent.stop(Duration::from_secs(10)).await.unwrap();
    }
    server.shutdown().await;
}
