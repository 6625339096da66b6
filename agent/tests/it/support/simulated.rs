//! A minimal server of the simulated-hosts contract (see `agent::host::simulated`), for testing the
//! client side before the dev cluster serves it.

use super::server::{Call, Handler, Reply, serve_tcp};
use http::{Method, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub struct SimHost {
    pub os_image: String,
    pub boot_id: String,
    pub staged_image: Option<String>,
    pub components_hash: Option<String>,
}

impl SimHost {
    pub fn running(os_image: &str) -> Self {
        SimHost {
            os_image: os_image.to_owned(),
            boot_id: "boot-0".to_owned(),
            staged_image: None,
            components_hash: Some(format!("sha256:{}", "ab".repeat(32))),
        }
    }
}

#[derive(Default)]
struct State {
    hosts: BTreeMap<String, SimHost>,
    /// Staging fails with this status and message (an injected fault).
    stage_fault: Option<(StatusCode, String)>,
    stage_duration: Duration,
    /// `METHOD decoded-node action` of every request, and the stage bodies.
    requests: Vec<String>,
    boots: u32,
    /// Answer GET with this body instead of the host's facts.
    facts_override: Option<String>,
}

pub struct FakeDevServer {
    pub base_url: String,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeDevServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeDevServer {
    pub async fn start(hosts: impl IntoIterator<Item = (&'static str, SimHost)>) -> Self {
        let state = Arc::new(Mutex::new(State {
            hosts: hosts.into_iter().map(|(name, host)| (name.to_owned(), host)).collect(),
            stage_duration: Duration::from_millis(50),
            ..State::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/sim", listener.local_addr().unwrap());
        let server = serve_tcp(listener, Arc::new(DevHosts { state: state.clone() }));
        FakeDevServer { base_url, state, server }
    }

    pub fn host(&self, node: &str) -> SimHost {
        self.state.lock().unwrap().hosts[node].clone()
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn fail_stages(&self, status: StatusCode, message: &str) {
        self.state.lock().unwrap().stage_fault = Some((status, message.to_owned()));
    }

    pub fn heal_stages(&self) {
        self.state.lock().unwrap().stage_fault = None;
    }

    pub fn answer_facts_with(&self, body: &str) {
        self.state.lock().unwrap().facts_override = Some(body.to_owned());
    }
}

struct DevHosts {
    state: Arc<Mutex<State>>,
}

fn message(status: StatusCode, message: &str) -> Reply {
    Reply::new(status, json!({ "message": message }).to_string())
}

impl Handler for DevHosts {
    async fn handle(&self, call: Call) -> Reply {
        let Some(rest) = call.uri.path().strip_prefix("/sim/_dev/hosts/") else {
            return message(StatusCode::NOT_FOUND, "no such route");
        };
        let (encoded_node, action) = rest.split_once('/').unwrap_or((rest, ""));
        let node = percent_decode_str(encoded_node).decode_utf8_lossy().into_owned();
        let stage_duration = {
            let mut state = self.state.lock().unwrap();
            let body = String::from_utf8_lossy(&call.body);
            state.requests.push(format!("{} {node} {action} {body}", call.method).trim_end().to_owned());
            if !state.hosts.contains_key(&node) {
                return message(StatusCode::NOT_FOUND, &format!("no simulated host {node}"));
            }
            state.stage_duration
        };
        match (call.method, action) {
            (Method::GET, "") => {
                let state = self.state.lock().unwrap();
                if let Some(body) = &state.facts_override {
                    return Reply::new(StatusCode::OK, body.clone());
                }
                let host = &state.hosts[&node];
                let facts = json!({
                    "osImage": host.os_image,
                    "bootID": host.boot_id,
                    "stagedImage": host.staged_image,
                    "componentsHash": host.components_hash,
                });
                Reply::new(StatusCode::OK, facts.to_string())
            }
            (Method::POST, "stage") => {
                let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&call.body) else {
                    return message(StatusCode::BAD_REQUEST, "the body must be {\"image\": \"...\"}");
                };
                let Some(image) = body.get("image").and_then(Value::as_str).map(str::to_owned) else {
                    return message(StatusCode::BAD_REQUEST, "the body must be {\"image\": \"...\"}");
                };
                // The server holds the request for the simulated stage duration.
                tokio::time::sleep(stage_duration).await;
                let mut state = self.state.lock().unwrap();
                if let Some((status, text)) = state.stage_fault.clone() {
                    return message(status, &text);
                }
                state.hosts.get_mut(&node).unwrap().staged_image = Some(image);
                Reply::new(StatusCode::OK, "{}")
            }
            (Method::POST, "kubernetes/fetch") => {
                if serde_json::from_slice::<Value>(&call.body).is_err() {
                    return message(StatusCode::BAD_REQUEST, "the body must be JSON");
                }
                // Held as a stage is, and failing as stages do.
                tokio::time::sleep(stage_duration).await;
                match self.state.lock().unwrap().stage_fault.clone() {
                    Some((status, text)) => message(status, &text),
                    None => Reply::new(StatusCode::OK, "{}"),
                }
            }
            (Method::POST, "kubernetes/discard") => Reply::new(StatusCode::OK, "{}"),
            (Method::POST, "reboot") => {
                let mut state = self.state.lock().unwrap();
                state.boots += 1;
                let boots = state.boots;
                let host = state.hosts.get_mut(&node).unwrap();
                if let Some(staged) = host.staged_image.take() {
                    host.os_image = staged;
                }
                host.boot_id = format!("boot-{boots}");
                Reply::new(StatusCode::ACCEPTED, "{}")
            }
            _ => message(StatusCode::METHOD_NOT_ALLOWED, "no such action"),
        }
    }
}
