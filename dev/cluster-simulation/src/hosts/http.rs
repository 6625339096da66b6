//! `/_dev/hosts`: the simulated hosts over HTTP, as update-operator's agent (`--host-backend simulated`) and the
//! demo tools use them.
//!
//! | Request | Answer |
//! |---|---|
//! | `GET /_dev/hosts` | `{"hosts": [{"name", "osImage", "bootID", "stagedImage", "componentsHash", "power", "boots", "faults", "kubeletVersion", "kubeletRestarting"}]}` |
//! | `GET /_dev/hosts/{node}` | `{"osImage", "bootID", "stagedImage", "componentsHash"}` |
//! | `POST /_dev/hosts/{node}/stage` `{"image"}` | `200 {}` after the stage duration |
//! | `POST /_dev/hosts/{node}/reboot` | `202 {}` |
//! | `POST /_dev/hosts/{node}/power-on` | `202 {}`: a host that never came back boots now |
//! | `POST /_dev/hosts/{node}/kubernetes` [`super::kubernetes::KubernetesRequest`] | `200 {}` after the simulated kubeadm upgrade and kubelet restart |
//! | `POST /_dev/hosts/{node}/kubernetes/fetch` [`super::kubernetes::FetchRequest`] | `200 {}` once every component is in the host's fetch cache, verified |
//! | `POST /_dev/hosts/{node}/kubernetes/discard` | `200 {}` once the host's fetch cache is deleted |
//! | `PUT /_dev/hosts/{node}/faults` [`super::HostFaults`] (stage, reboot, kubeadm and Job pod faults) | `200 {}` |
//! | `DELETE /_dev/hosts/{node}/faults` | `200 {}` |
//!
//! Errors are `{"message": "..."}` with 400 (bad body), 404 (unknown host or path), 405 (method), 503 (host
//! down), an injected stage failure's status (a stage or a fetch), 502 (a component download failed), 422 (a component is not what
//! its hash says) or 500 (kubeadm failed).

use super::kubernetes::{FetchRequest, KubernetesRequest};
use super::{HostError, HostFaults, Hosts};
use crate::apiserver::core::DevRoutes;
use crate::dev_routes::{message, parse};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

impl Hosts {
    /// The HTTP routes (`/_dev/hosts/...`) to mount on the API server.
    pub fn routes(&self) -> Arc<HostRoutes> {
        Arc::new(HostRoutes::new(self.clone()))
    }
}

/// The `/_dev/hosts` routes of a cluster's hosts.
pub struct HostRoutes {
    hosts: Hosts,
}

#[derive(Deserialize)]
struct StageRequest {
    image: String,
}

fn error(error: &HostError) -> (u16, Value) {
    message(error.status(), error.to_string())
}

impl HostRoutes {
    /// The routes of `hosts`.
    pub fn new(hosts: Hosts) -> Self {
        HostRoutes { hosts }
    }

    async fn answer(hosts: Hosts, method: Method, segments: Vec<String>, body: Bytes) -> (u16, Value) {
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (segments.as_slice(), method) {
            (["hosts"], Method::GET) => (200, json!({"hosts": hosts.states()})),
            (["hosts", node], Method::GET) => match hosts.facts(node) {
                Some(facts) => (200, json!(facts)),
                None => error(&HostError::UnknownHost((*node).to_owned())),
            },
            (["hosts", node, "stage"], Method::POST) => {
                let request: StageRequest = match parse(&body) {
                    Ok(request) => request,
                    Err(answer) => return answer,
                };
                match hosts.stage(node, &request.image).await {
                    Ok(()) => (200, json!({})),
                    Err(e) => error(&e),
                }
            }
            (["hosts", node, "kubernetes"], Method::POST) => {
                let request: KubernetesRequest = match parse(&body) {
                    Ok(request) => request,
                    Err(answer) => return answer,
                };
                match hosts.upgrade_kubernetes(node, &request).await {
                    Ok(()) => (200, json!({})),
                    Err(e) => error(&e),
                }
            }
            (["hosts", node, "kubernetes", "fetch"], Method::POST) => {
                let request: FetchRequest = match parse(&body) {
                    Ok(request) => request,
                    Err(answer) => return answer,
                };
                match hosts.fetch_kubernetes(node, &request).await {
                    Ok(()) => (200, json!({})),
                    Err(e) => error(&e),
                }
            }
            (["hosts", node, "kubernetes", "discard"], Method::POST) => match hosts.discard_fetched(node).await {
                Ok(()) => (200, json!({})),
                Err(e) => error(&e),
            },
            (["hosts", node, "reboot"], Method::POST) => match hosts.reboot(node) {
                Ok(()) => (202, json!({})),
                Err(e) => error(&e),
            },
            (["hosts", node, "power-on"], Method::POST) => match hosts.power_on(node) {
                Ok(()) => (202, json!({})),
                Err(e) => error(&e),
            },
            (["hosts", node, "faults"], Method::PUT) => {
                let faults: HostFaults = match parse(&body) {
                    Ok(faults) => faults,
                    Err(answer) => return answer,
                };
                match hosts.set_faults(node, faults) {
                    Ok(()) => (200, json!({})),
                    Err(e) => error(&e),
                }
            }
            (["hosts", node, "faults"], Method::DELETE) => match hosts.set_faults(node, HostFaults::default()) {
                Ok(()) => (200, json!({})),
                Err(e) => error(&e),
            },
            (
                ["hosts"]
                | ["hosts", _]
                | ["hosts", _, "stage" | "reboot" | "power-on" | "faults" | "kubernetes"]
                | ["hosts", _, "kubernetes", "fetch" | "discard"],
                method,
            ) => message(405, format!("{method} is not allowed here")),
            _ => message(404, "no such path under /_dev"),
        }
    }
}

impl DevRoutes for HostRoutes {
    fn handle(&self, method: Method, segments: Vec<String>, body: Bytes) -> BoxFuture<'static, (u16, Value)> {
        Self::answer(self.hosts.clone(), method, segments, body).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::Timing;
    use std::time::Duration;

    async fn post(hosts: &Hosts, path: &[&str], body: Value) -> (u16, Value) {
        let segments = path.iter().map(|s| (*s).to_owned()).collect();
        HostRoutes::answer(hosts.clone(), Method::POST, segments, Bytes::from(body.to_string())).await
    }

    /// The agent's simulated backend and these routes agree on the fetch: its body is taken, and a discard
    /// follows; other methods are refused, and a body that is not a fetch is a 400.
    #[tokio::test]
    async fn the_fetch_and_discard_routes_take_what_the_agents_simulated_backend_sends() {
        let timing = Timing { stage: Duration::from_millis(20), ..Timing::fast() };
        let hosts = Hosts::new("v1", &timing);
        hosts.add("w1", "v1").unwrap();
        let artifacts = crate::artifacts::Artifacts::start().await.unwrap();
        let config_map = artifacts.publish_release("v1.34.1");
        let data = config_map.data.as_ref().unwrap();
        let release = shared::components::Release::from_config_map(
            &config_map,
            Some(&"v1.34.1".parse().unwrap()),
            shared::components::DEFAULT_INSTALL_ROOTS,
        )
        .unwrap();
        let fetch =
            agent::host::KubernetesFetch { version: "v1.34.1".parse().unwrap(), components: release.components };
        let body = agent::host::simulated::fetch_body(&fetch);
        assert_eq!(post(&hosts, &["hosts", "w1", "kubernetes", "fetch"], body).await, (200, json!({})));
        assert_eq!(post(&hosts, &["hosts", "w1", "kubernetes", "discard"], Value::Null).await, (200, json!({})));
        let components: Value = serde_json::from_str(&data["components"]).unwrap();
        let with_role = json!({"version": "v1.34.1", "role": "node", "components": components});
        assert_eq!(post(&hosts, &["hosts", "w1", "kubernetes", "fetch"], with_role).await.0, 400);
        assert_eq!(post(&hosts, &["hosts", "nope", "kubernetes", "discard"], Value::Null).await.0, 404);
        let segments = ["hosts", "w1", "kubernetes", "fetch"].map(str::to_owned).to_vec();
        let (status, _) = HostRoutes::answer(hosts.clone(), Method::GET, segments, Bytes::new()).await;
        assert_eq!(status, 405);
        artifacts.shutdown();
    }
}
