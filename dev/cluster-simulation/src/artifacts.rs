//! A file server for the Kubernetes components of simulated upgrades (kubeadm, kubelet, ...), over plain HTTP on
//! loopback, with faults: an artifact can be made unreachable (the connection is closed without an answer) or
//! corrupt (served with its last byte changed, so its SHA-256 no longer matches).
//!
//! Files are served at `GET {url}/{name}`. Faults are set with [`Artifacts::set_fault`] or over the API server's
//! `/_dev/artifacts/{name}` (`PUT {"fault": "unreachable" | "corrupt"}`, `DELETE` to clear), see
//! [`ArtifactRoutes`].

use crate::apiserver::core::DevRoutes;
use crate::dev_routes::{message, parse};
use base64::Engine;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};
use shared::components::{Sha256, components_hash, config_map_name};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A fault of one artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ArtifactFault {
    /// Requests for it get no answer: the connection is closed.
    Unreachable,
    /// It is served with its last byte changed.
    Corrupt,
}

struct Artifact {
    content: Bytes,
    fault: Option<ArtifactFault>,
}

/// The artifact server (a cloneable handle); it stops with [`Artifacts::shutdown`].
#[derive(Clone)]
pub struct Artifacts {
    files: Arc<Mutex<BTreeMap<String, Artifact>>>,
    url: String,
    shutdown: CancellationToken,
}

/// Longest request head read.
const MAX_HEAD: usize = 16 * 1024;

impl Artifacts {
    /// Starts serving on a free loopback port.
    pub async fn start() -> std::io::Result<Artifacts> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let artifacts = Artifacts {
            files: Arc::default(),
            url: format!("http://{}", listener.local_addr()?),
            shutdown: CancellationToken::new(),
        };
        let server = artifacts.clone();
        tokio::spawn(async move {
            let mut backoff = shared::accept::AcceptBackoff::default();
            loop {
                let socket = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((socket, _)) => {
                            backoff.accepted();
                            socket
                        }
                        Err(_) => {
                            tokio::select! {
                                () = tokio::time::sleep(backoff.failed()) => continue,
                                () = server.shutdown.cancelled() => return,
                            }
                        }
                    },
                    () = server.shutdown.cancelled() => return,
                };
                tokio::spawn(server.clone().answer(socket));
            }
        });
        Ok(artifacts)
    }

    /// Serves `content` as `name` (replacing what was there, fault cleared) and returns its URL.
    pub fn put(&self, name: &str, content: impl Into<Bytes>) -> String {
        self.files.lock().insert(name.to_owned(), Artifact { content: content.into(), fault: None });
        self.url(name)
    }

    /// The URL of `name`.
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// Sets (or with `None` clears) the fault of `name`; `false` if there is no such artifact.
    pub fn set_fault(&self, name: &str, fault: Option<ArtifactFault>) -> bool {
        match self.files.lock().get_mut(name) {
            Some(artifact) => {
                artifact.fault = fault;
                true
            }
            None => false,
        }
    }

    /// Publishes the components of Kubernetes `version` (`v1.34.1`): kubeadm, kubelet and kubectl served here
    /// as `{version}/{binary}` (stand-in content naming the version, with their real SHA-256) and a kubeadm patch
    /// inline as a `data:` URL, and returns the components ConfigMap for `kube-system` that lists them, named
    /// after its content as Constellation names it.
    pub fn publish_release(&self, version: &str) -> ConfigMap {
        let mut components: Vec<Value> = ["kubeadm", "kubelet", "kubectl"]
            .iter()
            .map(|binary| {
                let content = format!("{binary} {version} (simulated)\n").into_bytes();
                let hash = Sha256::of(&content).to_string();
                let url = self.put(&format!("{version}/{binary}"), content);
                json!({"url": url, "hash": hash, "installPath": format!("/usr/local/bin/{binary}"), "extract": false})
            })
            .collect();
        let patch = b"apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    patched-by: update-operator\n";
        components.push(json!({
            "url": format!("data:;base64,{}", base64::engine::general_purpose::STANDARD.encode(patch)),
            "hash": Sha256::of(patch).to_string(),
            "installPath": "/etc/kubernetes/patches/kube-apiserver0+strategic.yaml",
            "extract": false,
        }));
        let hashes: Vec<String> = components.iter().filter_map(|c| c["hash"].as_str().map(str::to_owned)).collect();
        let name = config_map_name(&components_hash(hashes.iter().map(String::as_str)));
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(shared::components::NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            immutable: Some(true),
            data: Some(BTreeMap::from([
                (shared::components::COMPONENTS_KEY.to_owned(), Value::Array(components).to_string()),
                (shared::components::CLUSTER_VERSION_KEY.to_owned(), version.to_owned()),
            ])),
            ..ConfigMap::default()
        }
    }

    /// Stops serving.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// The `/_dev/artifacts/...` routes.
    pub fn routes(&self) -> Arc<ArtifactRoutes> {
        Arc::new(ArtifactRoutes { artifacts: self.clone() })
    }

    async fn answer(self, mut socket: tokio::net::TcpStream) {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) if head.len() + n > MAX_HEAD => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let line = String::from_utf8_lossy(&head);
        let mut words = line.split_whitespace();
        let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or("/"));
        let found = self.files.lock().get(path.trim_start_matches('/')).map(|a| (a.content.clone(), a.fault));
        let (status, body) = match (method, found) {
            ("GET", Some((_, Some(ArtifactFault::Unreachable)))) => return,
            ("GET", Some((content, Some(ArtifactFault::Corrupt)))) => {
                let mut corrupt = content.to_vec();
                match corrupt.last_mut() {
                    Some(last) => *last ^= 0xff,
                    None => corrupt.push(0),
                }
                ("200 OK", Bytes::from(corrupt))
            }
            ("GET", Some((content, None))) => ("200 OK", content),
            ("GET", None) => ("404 Not Found", Bytes::from_static(b"no such artifact")),
            _ => ("405 Method Not Allowed", Bytes::from_static(b"only GET")),
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = socket.write_all(head.as_bytes()).await;
        let _ = socket.write_all(&body).await;
    }
}

/// `/_dev/artifacts/{name}`: `PUT {"fault": "unreachable" | "corrupt"}` sets a fault, `DELETE` clears it.
pub struct ArtifactRoutes {
    artifacts: Artifacts,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultRequest {
    fault: ArtifactFault,
}

impl DevRoutes for ArtifactRoutes {
    fn handle(&self, method: Method, segments: Vec<String>, body: Bytes) -> BoxFuture<'static, (u16, Value)> {
        let artifacts = self.artifacts.clone();
        async move {
            let [_, name] = segments.as_slice() else { return message(404, "no such path under /_dev/artifacts") };
            let fault = match method {
                Method::PUT => match parse::<FaultRequest>(&body) {
                    Ok(request) => Some(request.fault),
                    Err(answer) => return answer,
                },
                Method::DELETE => None,
                other => return message(405, format!("{other} is not allowed here")),
            };
            if artifacts.set_fault(name, fault) {
                (200, json!({}))
            } else {
                message(404, format!("no artifact {name:?}"))
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(url: &str) -> Result<(u16, Vec<u8>), String> {
        let address = url.trim_start_matches("http://");
        let (host, path) = address.split_once('/').unwrap();
        let mut socket = tokio::net::TcpStream::connect(host).await.map_err(|e| e.to_string())?;
        socket.write_all(format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        socket.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no answer")?;
        let status = String::from_utf8_lossy(&answer[9..12]).parse().unwrap();
        Ok((status, answer[split + 4..].to_vec()))
    }

    #[tokio::test]
    async fn artifacts_are_served_and_their_faults_set_over_the_dev_routes() {
        let artifacts = Artifacts::start().await.unwrap();
        let url = artifacts.put("kubeadm", &b"kubeadm v1.34.1"[..]);
        assert_eq!(get(&url).await.unwrap(), (200, b"kubeadm v1.34.1".to_vec()));
        assert_eq!(get(&artifacts.url("nope")).await.unwrap().0, 404);
        let routes = artifacts.routes();
        let put = |fault: &str| {
            routes.handle(
                Method::PUT,
                vec!["artifacts".into(), "kubeadm".into()],
                Bytes::from(format!(r#"{{"fault": "{fault}"}}"#)),
            )
        };
        assert_eq!(put("corrupt").await.0, 200);
        let (status, body) = get(&url).await.unwrap();
        assert_eq!((status, body.len()), (200, 15));
        assert_ne!(body, b"kubeadm v1.34.1");
        assert_eq!(put("unreachable").await.0, 200);
        assert!(get(&url).await.is_err(), "no answer");
        let clear = routes.handle(Method::DELETE, vec!["artifacts".into(), "kubeadm".into()], Bytes::new()).await;
        assert_eq!(clear.0, 200);
        assert_eq!(get(&url).await.unwrap().1, b"kubeadm v1.34.1");
        assert_eq!(put("melted").await.0, 400);
        let missing = routes.handle(Method::DELETE, vec!["artifacts".into(), "x".into()], Bytes::new()).await;
        assert_eq!(missing.0, 404);
        artifacts.shutdown();
    }

    #[tokio::test]
    async fn a_published_release_is_a_components_config_map_that_validates() {
        let artifacts = Artifacts::start().await.unwrap();
        let config_map = artifacts.publish_release("v1.34.1");
        let version = "v1.34.1".parse().unwrap();
        let release = shared::components::Release::from_config_map(
            &config_map,
            Some(&version),
            shared::components::DEFAULT_INSTALL_ROOTS,
        )
        .unwrap();
        assert_eq!(release.components.len(), 4);
        assert_eq!(get(&artifacts.url("v1.34.1/kubelet")).await.unwrap().1, b"kubelet v1.34.1 (simulated)\n");
        artifacts.shutdown();
    }
}
