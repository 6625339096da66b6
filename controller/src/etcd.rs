//! etcd member removal for replaced control-plane nodes, over etcd's v3 JSON gateway with TLS.
//!
//! The gateway (`/v3/cluster/member/list`, `/v3/cluster/member/remove`, and `/health` on every member) is served
//! on etcd's client URLs since 3.3; it needs nothing but the HTTP/1.1 and rustls stack kube-rs already brings,
//! where the gRPC client (`etcd-client`) would add tonic, prost and a protobuf compiler to the build.
//!
//! # Guarantees
//! - A member is removed only when the healthy voting members that remain are a quorum of the voting members that
//!   remain; the last voting member is never removed. Health is asked of each member itself (`GET /health`), at
//!   the time of the removal.
//! - A replaced node's member is removed only when its heir's member is in the list, started, voting and healthy:
//!   the cluster keeps as many healthy voting members as it had before the replacement.
//! - Removal is idempotent, but "gone" is proven, never assumed: a member that the list shows gone (no member of
//!   the node's name, none peering at one of its addresses; or gone between the list and the removal) is
//!   [`Removal::AlreadyGone`]; a node with no address to match by and no member of its name is
//!   [`Error::MemberUnknown`].
//! - The endpoints given are where to start: every member list read teaches the client its members' client URLs,
//!   which it asks first afterwards, so after every original member was replaced etcd is still reached.
//! - Every request has a deadline ([`EtcdConfig::timeout`]); nothing retries or polls here (callers requeue on
//!   [`Error::is_retryable`] errors).
//!
//! # Assumptions
//! - Members are named after their nodes (kubeadm names them after the host name) or peer at one of the node's
//!   addresses (`https://IP:2380`).

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The largest answer read (a member list of a few members is a few hundred bytes).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The files of a TLS client, as kubeadm lays them out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The etcd CA (PEM).
    pub ca: PathBuf,
    /// The client certificate (PEM); etcd requires one with `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// kubeadm's: the etcd CA `/etc/kubernetes/pki/etcd/ca.crt` and the API server's etcd client certificate
    /// `/etc/kubernetes/pki/apiserver-etcd-client.{crt,key}`.
    pub fn kubeadm() -> TlsFiles {
        TlsFiles {
            ca: PathBuf::from("/etc/kubernetes/pki/etcd/ca.crt"),
            cert: Some(PathBuf::from("/etc/kubernetes/pki/apiserver-etcd-client.crt")),
            key: Some(PathBuf::from("/etc/kubernetes/pki/apiserver-etcd-client.key")),
        }
    }
}

/// Where etcd is and how to reach it.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdConfig {
    /// Client URLs to ask for the member list, in order (`https://10.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// TLS; required for `https://` endpoints.
    pub tls: Option<TlsFiles>,
    /// The deadline of each request.
    pub timeout: Duration,
}

/// Why an etcd operation failed.
///
/// Retryable ([`Error::is_retryable`]): `Unreachable` and server errors. Not retryable: configuration errors and
/// refusals, which need a person or a change in the cluster (a member healthy again).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable (no endpoints, a bad URL, TLS files missing or malformed).
    #[error("etcd client configuration: {0}")]
    Config(String),
    /// No endpoint answered.
    #[error("no etcd endpoint answered: {0}")]
    Unreachable(String),
    /// etcd answered with an error.
    #[error("etcd refused {operation}: {message} (HTTP {status}, gRPC code {code})")]
    Api {
        /// The operation.
        operation: &'static str,
        /// The HTTP status.
        status: u16,
        /// The gRPC status code of the gateway's answer (5: not found, 9: failed precondition, 14: unavailable).
        code: i32,
        /// etcd's message.
        message: String,
    },
    /// etcd answered with something that is not its API's JSON.
    #[error("etcd answered {operation} with an unexpected body: {source}")]
    BadAnswer {
        /// The operation.
        operation: &'static str,
        /// What was wrong.
        #[source]
        source: serde_json::Error,
    },
    /// The removal was refused to keep etcd available.
    #[error("{0}")]
    Refused(Refusal),
    /// No member has the node's name and the node has no address to look one up by: whether its member is gone
    /// cannot be proven.
    #[error(
        "no etcd member is named {node} and the node has no address to find its member by: whether it is gone \
         cannot be told"
    )]
    MemberUnknown {
        /// The node.
        node: String,
    },
    /// More than one member matches the node.
    #[error("several etcd members match node {node}: {members:?}")]
    Ambiguous {
        /// The node.
        node: String,
        /// The matching members' names.
        members: Vec<String>,
    },
}

impl Error {
    /// Whether trying again later may succeed without a change of configuration.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable(_) => true,
            Error::Api { status, .. } => *status >= 500,
            // A refusal passes when members are healthy again: later, not by retrying now.
            Error::Config(_)
            | Error::BadAnswer { .. }
            | Error::Refused(_)
            | Error::Ambiguous { .. }
            | Error::MemberUnknown { .. } => false,
        }
    }
}

/// Why removing a member would be unsafe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// It is the only voting member.
    #[error("etcd member {name} is the last voting member; removing it would destroy the cluster")]
    LastMember {
        /// Its name.
        name: String,
    },
    /// Too few healthy voting members would remain.
    #[error(
        "removing etcd member {name} would leave {healthy} healthy of {remaining} voting members, fewer than the \
         quorum of {quorum}"
    )]
    QuorumLoss {
        /// The member's name.
        name: String,
        /// Healthy voting members that would remain.
        healthy: usize,
        /// Voting members that would remain.
        remaining: usize,
        /// Their quorum.
        quorum: usize,
    },
    /// The heir's member is not yet a started, healthy voting member: removing the donor's now would leave the
    /// cluster with fewer healthy members than it had.
    #[error("etcd member of the replacement {heir} is not ready: {why}; the member of {donor} stays until it is")]
    HeirNotJoined {
        /// The node being replaced.
        donor: String,
        /// The node replacing it.
        heir: String,
        /// What is missing.
        why: String,
    },
}

/// How the control plane's etcd members are reached, for the replacement of control-plane nodes.
#[derive(Debug, Clone, Default)]
pub enum Members {
    /// Stacked etcd (kubeadm's default), through this client.
    Client(Box<EtcdClient>),
    /// The control-plane nodes run no etcd member (external etcd, a managed control plane).
    External,
    /// Neither is known: no control-plane node is deleted.
    #[default]
    Unconfigured,
}

/// A node, as its etcd member is found: by its name, else by a peer URL on one of its addresses.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    /// The node's name (kubeadm names the member after the host).
    pub name: &'a str,
    /// Its addresses (`status.addresses`: InternalIP, ExternalIP, Hostname).
    pub addresses: &'a [String],
}

/// An etcd member.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Member {
    /// Its ID.
    #[serde(rename = "ID", deserialize_with = "uint64")]
    pub id: u64,
    /// Its name (empty while it has not started).
    #[serde(default)]
    pub name: String,
    /// Its peer URLs.
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    /// Its client URLs (empty while it has not started).
    #[serde(rename = "clientURLs", default)]
    pub client_urls: Vec<String>,
    /// A learner does not vote and does not count for quorum.
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

/// What [`EtcdClient::remove_node_member`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The member was removed.
    Removed {
        /// Its ID.
        id: u64,
        /// Its name.
        name: String,
    },
    /// No member of the node exists.
    AlreadyGone,
}

/// proto3 JSON writes uint64 as a string; accept numbers too.
fn uint64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Text(String),
        Number(u64),
    }
    match Wire::deserialize(deserializer)? {
        Wire::Number(n) => Ok(n),
        Wire::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

/// The member of node `node` (by name, else by a peer URL on one of `addresses`).
///
/// # Errors
/// [`Error::Ambiguous`] when several members match by address and none by name.
pub fn find_member<'a>(members: &'a [Member], node: &str, addresses: &[String]) -> Result<Option<&'a Member>, Error> {
    if let Some(member) = members.iter().find(|m| m.name == node) {
        return Ok(Some(member));
    }
    let by_address: Vec<&Member> = members
        .iter()
        .filter(|m| m.peer_urls.iter().any(|url| host_of(url).is_some_and(|host| addresses.contains(&host))))
        .collect();
    match by_address.as_slice() {
        [] => Ok(None),
        [member] => Ok(Some(member)),
        several => Err(Error::Ambiguous {
            node: node.to_owned(),
            members: several.iter().map(|m| format!("{} ({:x})", m.name, m.id)).collect(),
        }),
    }
}

/// The host of a URL, without IPv6 brackets.
fn host_of(url: &str) -> Option<String> {
    let uri: Uri = url.parse().ok()?;
    Some(uri.host()?.trim_start_matches('[').trim_end_matches(']').to_owned())
}

/// Whether removing `target` keeps a quorum of healthy voting members (see the module docs).
pub fn check_removal(members: &[Member], target: &Member, healthy: &BTreeSet<u64>) -> Result<(), Refusal> {
    if target.is_learner {
        return Ok(());
    }
    let remaining: Vec<&Member> = members.iter().filter(|m| !m.is_learner && m.id != target.id).collect();
    if remaining.is_empty() {
        return Err(Refusal::LastMember { name: target.name.clone() });
    }
    let quorum = remaining.len() / 2 + 1;
    let healthy = remaining.iter().filter(|m| healthy.contains(&m.id)).count();
    if healthy < quorum {
        return Err(Refusal::QuorumLoss { name: target.name.clone(), healthy, remaining: remaining.len(), quorum });
    }
    Ok(())
}

#[derive(Deserialize)]
struct MemberList {
    #[serde(default)]
    members: Vec<Member>,
}

#[derive(Serialize)]
struct RemoveRequest {
    #[serde(rename = "ID")]
    id: String,
}

#[derive(Deserialize)]
struct Health {
    health: String,
}

#[derive(Deserialize)]
struct GatewayError {
    #[serde(default)]
    code: i32,
    #[serde(default)]
    message: String,
    #[serde(default)]
    error: String,
}

/// gRPC's NOT_FOUND, as the gateway reports a removal of a member that is gone.
const GRPC_NOT_FOUND: i32 = 5;

/// A client of one etcd cluster.
#[derive(Clone)]
pub struct EtcdClient {
    endpoints: Vec<String>,
    /// The client URLs of the members of the last member list read, asked before `endpoints` (which may all have
    /// been replaced since the controller started).
    learned: Arc<parking_lot::Mutex<Vec<String>>>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient").field("endpoints", &self.endpoints).field("timeout", &self.timeout).finish()
    }
}

fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::Config(format!("reading {}: {e}", path.display())))?
        .collect();
    let certs = certs.map_err(|e| Error::Config(format!("reading {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!("{} holds no certificate", path.display())));
    }
    Ok(certs)
}

fn tls_config(files: &TlsFiles) -> Result<rustls::ClientConfig, Error> {
    // kube-rs selects ring; name the provider rather than rely on a process default.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_pem_certs(&files.ca)? {
        roots.add(cert).map_err(|e| Error::Config(format!("CA {}: {e}", files.ca.display())))?;
    }
    let builder = builder.with_root_certificates(roots);
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain = read_pem_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Error::Config(format!("reading the key {}: {e}", key.display())))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| Error::Config(format!("client certificate: {e}")))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(Error::Config("a client certificate needs its key and a key its certificate".to_owned())),
    }
}

impl EtcdClient {
    /// A client for `config`; reads the TLS files now.
    ///
    /// # Errors
    /// [`Error::Config`] for no endpoints, a URL that is not `http(s)://HOST:PORT`, `https://` without TLS files,
    /// or unreadable or malformed TLS files.
    pub fn new(config: &EtcdConfig) -> Result<EtcdClient, Error> {
        if config.endpoints.is_empty() {
            return Err(Error::Config("no etcd endpoints".to_owned()));
        }
        for endpoint in &config.endpoints {
            let uri: Uri = endpoint.parse().map_err(|e| Error::Config(format!("endpoint {endpoint:?}: {e}")))?;
            match (uri.scheme_str(), uri.host()) {
                (Some("https"), Some(_)) if config.tls.is_none() => {
                    return Err(Error::Config(format!("endpoint {endpoint} is https:// but no TLS files are set")));
                }
                (Some("http" | "https"), Some(_)) => {}
                _ => return Err(Error::Config(format!("endpoint {endpoint:?} is not http(s)://HOST:PORT"))),
            }
        }
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let connector = match &config.tls {
            Some(files) => builder.with_tls_config(tls_config(files)?),
            None => builder.with_tls_config(tls_config_without_roots()?),
        }
        .https_or_http()
        .enable_http1()
        .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(EtcdClient { endpoints: config.endpoints.clone(), learned: Arc::default(), client, timeout: config.timeout })
    }

    /// One request to `base` + `path`; the status and body.
    async fn exchange(
        &self,
        method: Method,
        base: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), String> {
        let uri = format!("{}{path}", base.trim_end_matches('/'));
        let request = Request::builder()
            .method(method)
            .uri(&uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("{uri}: {e}"))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| format!("{uri}: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| format!("{uri}: reading the answer: {e}"))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("{uri}: no answer within {:?}", self.timeout))?
    }

    /// A gateway call (`POST` with a JSON body) to `base`; etcd's errors as [`Error::Api`].
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        operation: &'static str,
        base: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<T, Error> {
        let (status, body) = self.exchange(Method::POST, base, path, body).await.map_err(Error::Unreachable)?;
        if !status.is_success() {
            let (code, message) = match serde_json::from_slice::<GatewayError>(&body) {
                Ok(error) => (error.code, if error.message.is_empty() { error.error } else { error.message }),
                Err(_) => (0, String::from_utf8_lossy(&body).chars().take(300).collect()),
            };
            return Err(Error::Api { operation, status: status.as_u16(), code, message });
        }
        serde_json::from_slice(&body).map_err(|source| Error::BadAnswer { operation, source })
    }

    /// Where [`EtcdClient::members`] asks, in order: the members' client URLs learned from the last list, then the
    /// configured endpoints (each once).
    pub fn endpoints(&self) -> Vec<String> {
        let mut endpoints = self.learned.lock().clone();
        for endpoint in &self.endpoints {
            if !endpoints.contains(endpoint) {
                endpoints.push(endpoint.clone());
            }
        }
        endpoints
    }

    /// The members, from the first endpoint that answers (see [`EtcdClient::endpoints`]); their client URLs are
    /// asked first next time.
    pub async fn members(&self) -> Result<Vec<Member>, Error> {
        let mut failures = Vec::new();
        for endpoint in self.endpoints() {
            match self.call::<MemberList>("member list", &endpoint, "/v3/cluster/member/list", b"{}".to_vec()).await {
                Ok(list) => {
                    let urls: Vec<String> = list.members.iter().flat_map(|m| m.client_urls.iter().cloned()).collect();
                    if !urls.is_empty() {
                        *self.learned.lock() = urls;
                    }
                    return Ok(list.members);
                }
                Err(Error::Unreachable(why)) => failures.push(why),
                Err(error) => return Err(error),
            }
        }
        Err(Error::Unreachable(failures.join("; ")))
    }

    /// Whether the member answers `GET /health` with `{"health": "true"}` on one of its client URLs.
    pub async fn is_healthy(&self, member: &Member) -> bool {
        for url in &member.client_urls {
            if let Ok((status, body)) = self.exchange(Method::GET, url, "/health", Vec::new()).await
                && status.is_success()
                && serde_json::from_slice::<Health>(&body).is_ok_and(|h| h.health == "true")
            {
                return true;
            }
        }
        false
    }

    /// Removes the member `target`, asking the healthy member `via` (not the target: a member that removes itself
    /// may not answer).
    async fn remove(&self, target: &Member, via: &Member) -> Result<Removal, Error> {
        let body = serde_json::to_vec(&RemoveRequest { id: target.id.to_string() })
            .map_err(|source| Error::BadAnswer { operation: "member remove", source })?;
        let mut failures = Vec::new();
        for url in &via.client_urls {
            match self.call::<serde_json::Value>("member remove", url, "/v3/cluster/member/remove", body.clone()).await
            {
                Ok(_) => return Ok(Removal::Removed { id: target.id, name: target.name.clone() }),
                Err(Error::Api { code: GRPC_NOT_FOUND, .. }) => return Ok(Removal::AlreadyGone),
                Err(Error::Unreachable(why)) => failures.push(why),
                Err(error) => return Err(error),
            }
        }
        Err(Error::Unreachable(failures.join("; ")))
    }

    /// Removes the etcd member of `node` if that is safe (see the module docs). With `heir` (the node replacing it),
    /// only once the heir's member is a started, healthy voting member.
    ///
    /// # Errors
    /// [`Error::Refused`] when the removal would lose quorum or the last member, or the heir has not joined;
    /// [`Error::Ambiguous`] when the node's member cannot be told; [`Error::MemberUnknown`] when the list cannot
    /// prove it gone; request errors.
    pub async fn remove_node_member(&self, node: NodeRef<'_>, heir: Option<NodeRef<'_>>) -> Result<Removal, Error> {
        let members = self.members().await?;
        let Some(target) = find_member(&members, node.name, node.addresses)?.cloned() else {
            if node.addresses.is_empty() {
                return Err(Error::MemberUnknown { node: node.name.to_owned() });
            }
            return Ok(Removal::AlreadyGone);
        };
        let others: Vec<&Member> = members.iter().filter(|m| m.id != target.id).collect();
        let checks = others.iter().map(|m| async move { (m.id, self.is_healthy(m).await) });
        let healthy: BTreeSet<u64> =
            futures::future::join_all(checks).await.into_iter().filter(|(_, ok)| *ok).map(|(id, _)| id).collect();
        if let Some(heir) = heir {
            check_heir(&members, &target, node.name, heir, &healthy).map_err(Error::Refused)?;
        }
        check_removal(&members, &target, &healthy).map_err(Error::Refused)?;
        let Some(via) = others.iter().find(|m| healthy.contains(&m.id) && !m.is_learner) else {
            return Err(Error::Refused(Refusal::LastMember { name: target.name.clone() }));
        };
        let removal = self.remove(&target, via).await?;
        tracing::info!(
            node = node.name,
            member = target.name,
            id = format!("{:x}", target.id),
            ?removal,
            "etcd member removed"
        );
        Ok(removal)
    }
}

/// Whether the heir's member has joined: in `members`, not the donor's own member (`target`), started (named),
/// voting and in `healthy`.
pub fn check_heir(
    members: &[Member],
    target: &Member,
    donor: &str,
    heir: NodeRef<'_>,
    healthy: &BTreeSet<u64>,
) -> Result<(), Refusal> {
    let refuse =
        |why: &str| Refusal::HeirNotJoined { donor: donor.to_owned(), heir: heir.name.to_owned(), why: why.to_owned() };
    let member = match find_member(members, heir.name, heir.addresses) {
        Ok(Some(member)) if member.id != target.id => member,
        Ok(Some(_)) => return Err(refuse("its addresses match the replaced node's member")),
        Ok(None) => return Err(refuse("no member of it in the member list")),
        Err(_) => return Err(refuse("several members match it")),
    };
    if member.name.is_empty() {
        return Err(refuse("its member was added but has not started"));
    }
    if member.is_learner {
        return Err(refuse("its member is a learner, not yet a voting member"));
    }
    if !healthy.contains(&member.id) {
        return Err(refuse("its member is not healthy"));
    }
    Ok(())
}

/// A TLS configuration for plain-`http://` endpoints only (never used for a handshake).
fn tls_config_without_roots() -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

#[cfg(test)]
#[path = "etcd_tests.rs"]
mod tests;
