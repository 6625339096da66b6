//! The I/O seam between the agent and the Kubernetes API: its own Node, watched and patched.
//!
//! [`KubeNodes`] is the real one; the worker's tests drive the agent through an in-memory fake.

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::future::Future;

/// Field manager of the agent's writes.
pub const FIELD_MANAGER: &str = "update-operator-agent";

/// Why a watch event could not be delivered; the watch goes on (with backoff).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WatchError(pub String);

/// Why a write of the Node failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The Node does not exist (deleted; its kubelet may register it again).
    #[error("the node does not exist")]
    NotFound,
    /// Any other failure; trying again later may succeed.
    #[error("{0}")]
    Failed(String),
}

/// The agent's own Node in the Kubernetes API.
pub trait NodeApi: Send + Sync + 'static {
    /// The watch of the Node, as kube's watcher delivers it: a (re)list as `Init`, `InitApply`
    /// and `InitDone`, then changes in order. A list after a broken watch is a consistent read
    /// (no cached, older state). The stream ends only when the watch cannot go on at all.
    fn watch(&self) -> BoxStream<'static, Result<watcher::Event<Node>, WatchError>>;

    /// Applies a JSON merge patch (`application/merge-patch+json`) and returns the Node as written.
    fn patch(&self, patch: &serde_json::Value) -> impl Future<Output = Result<Node, WriteError>> + Send;
}

/// The Node named `name`, through a kube client.
#[derive(Clone)]
pub struct KubeNodes {
    api: Api<Node>,
    name: String,
}

impl KubeNodes {
    pub fn new(client: Client, name: &str) -> Self {
        KubeNodes { api: Api::all(client), name: name.to_owned() }
    }
}

impl NodeApi for KubeNodes {
    fn watch(&self) -> BoxStream<'static, Result<watcher::Event<Node>, WatchError>> {
        // IMPORTANT: relists must be consistent reads (`MostRecent`, kube's default): the agent
        // takes a relisted Node as newer than its own last write.
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={}", self.name))
            .list_semantic(watcher::ListSemantic::MostRecent);
        watcher(self.api.clone(), config)
            .default_backoff()
            .map(|event| event.map_err(|error| WatchError(error.to_string())))
            .boxed()
    }

    async fn patch(&self, patch: &serde_json::Value) -> Result<Node, WriteError> {
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match self.api.patch(&self.name, &params, &Patch::Merge(patch)).await {
            Ok(node) => Ok(node),
            Err(kube::Error::Api(status)) if status.is_not_found() => Err(WriteError::NotFound),
            Err(error) => Err(WriteError::Failed(error.to_string())),
        }
    }
}
