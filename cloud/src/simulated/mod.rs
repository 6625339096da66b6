//! The client of the dev cluster's simulated cloud (`/_dev/cloud/api` on the dev cluster's address): a
//! [`CloudProvider`] over plain HTTP, so that the controller can replace nodes in a dev cluster without linking
//! the dev cluster.
//!
//! # Guarantees
//! - One HTTP request per call, each bounded by the client's timeout; a timeout or a broken connection is
//!   [`Error::Transient`].
//! - Answers are read up to [`MAX_ANSWER_BYTES`]; a larger or malformed answer is an error, never a panic.

pub mod wire;

use crate::error::{Error, Result};
use crate::provider::{
    BatchLimit, CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupInfo, GroupInstance,
    GroupMembers, ImageUpdate, InstanceState, NewInstance,
};
use crate::provider_id::{Cloud, ProviderId, is_rfc1035};
use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;
use std::time::Duration;
use wire::{
    API_PREFIX, CreateAnswer, CreateBatch, CreateBatchAnswer, DeleteAnswer, DeleteBatch, DeleteBatchAnswer, ErrorBody,
    GroupList, ImageBody, MAX_BATCH, SetImageAnswer,
};

/// The largest answer read; the API's answers are small JSON documents.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// How long one request may take by default. The simulated API answers at once unless a `slowSeconds` fault
/// delays it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The simulated cloud's client.
#[derive(Clone)]
pub struct SimulatedProvider {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for SimulatedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedProvider").field("base", &self.base).field("timeout", &self.timeout).finish()
    }
}

impl SimulatedProvider {
    /// A client of the simulated cloud of the dev cluster at `endpoint` (`http://127.0.0.1:PORT`, the cluster's
    /// URL).
    ///
    /// # Errors
    /// [`Error::Invalid`] when `endpoint` is not an `http://` URL with a host (and no path other than `/`).
    pub fn new(endpoint: &str) -> Result<SimulatedProvider> {
        let uri: Uri = endpoint.parse().map_err(|e| Error::invalid(format!("cloud endpoint {endpoint:?}: {e}")))?;
        let authority = match (uri.scheme_str(), uri.authority(), uri.path()) {
            (Some("http"), Some(authority), "" | "/") if uri.query().is_none() => authority.clone(),
            _ => {
                return Err(Error::invalid(format!(
                    "cloud endpoint {endpoint:?} is not http://HOST:PORT (the dev cluster's address)"
                )));
            }
        };
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(SimulatedProvider { base: format!("http://{authority}"), client, timeout: DEFAULT_TIMEOUT })
    }

    /// The same client with another per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends one request to `API_PREFIX` + the encoded `segments`; returns the status and the decoded answer.
    async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, T)> {
        let mut uri = format!("{}{API_PREFIX}", self.base);
        for segment in segments {
            uri.push('/');
            uri.extend(utf8_percent_encode(segment, NON_ALPHANUMERIC));
        }
        let mut builder =
            Request::builder().method(method.clone()).uri(&uri).header(header::ACCEPT, "application/json");
        if body.is_some() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Error::invalid(format!("{method} {uri}: {e}")))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| Error::Transient {
                message: format!("{method} {uri}: the request failed"),
                source: Some(Box::new(e)),
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| Error::Transient {
                    message: format!("{method} {uri}: reading the answer"),
                    source: Some(e),
                })?
                .to_bytes();
            Ok::<_, Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| Error::transient(format!("{method} {uri}: no answer within {:?}", self.timeout)))??;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(error) => error.into_error(),
                Err(_) if status.is_server_error() => Error::transient(format!("{method} {uri}: {status}")),
                Err(_) => Error::permanent(format!("{method} {uri}: {status} with an unexpected body")),
            });
        }
        let answer = serde_json::from_slice(&body)
            .map_err(|e| Error::permanent(format!("{method} {uri}: the answer is not what the API sends: {e}")))?;
        Ok((status, answer))
    }

    /// `GET /instances/{name}` with `aspect` (`image`, `group`) appended: the same document, each a call of its
    /// own at the cloud.
    async fn instance(&self, instance: &ProviderId, aspect: Option<&str>) -> Result<wire::Instance> {
        let name = instance_name(instance)?;
        let mut segments = vec!["instances", name];
        segments.extend(aspect);
        Ok(self.request(Method::GET, &segments, None).await?.1)
    }
}

/// The simulated instance's name, or [`Error::Invalid`] for another cloud's ID.
fn instance_name(instance: &ProviderId) -> Result<&str> {
    match instance {
        ProviderId::Simulated(id) => Ok(&id.name),
        other => Err(Error::invalid(format!("{other} is not an instance of the simulated cloud"))),
    }
}

/// A created instance's answer: named, or a token.
fn creation(instance: Option<wire::Instance>, token: Option<String>) -> Result<Creation> {
    match (instance, token) {
        (Some(instance), _) => Ok(Creation::Created(new_instance(instance)?)),
        (None, Some(token)) => Ok(Creation::Pending(CreationToken(token))),
        (None, None) => Err(Error::permanent("the simulated cloud answered a create with neither instance nor token")),
    }
}

/// Checks that a batch answer has one result per instance asked for.
fn one_each<T>(results: Vec<T>, asked: usize, what: &str) -> Result<Vec<T>> {
    if results.len() == asked {
        Ok(results)
    } else {
        Err(Error::permanent(format!("the simulated cloud answered {} results for {asked} {what}", results.len())))
    }
}

fn new_instance(instance: wire::Instance) -> Result<NewInstance> {
    let provider_id = instance
        .provider_id
        .parse()
        .map_err(|e| Error::permanent(format!("the simulated cloud answered with a bad provider ID: {e}")))?;
    Ok(NewInstance { provider_id, node_name: instance.name })
}

#[async_trait]
impl CloudProvider for SimulatedProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Simulated
    }

    async fn instance_image(&self, instance: &ProviderId) -> Result<String> {
        Ok(self.instance(instance, Some("image")).await?.image)
    }

    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId> {
        Ok(GroupId(self.instance(instance, Some("group")).await?.group))
    }

    async fn create_instance(&self, group: &GroupId) -> Result<Creation> {
        let (_, answer): (_, CreateAnswer) =
            self.request(Method::POST, &["groups", group.as_str(), "instances"], None).await?;
        creation(answer.instance, answer.token)
    }

    /// `POST /groups/{group}/creations`: one call for every instance.
    async fn create_instances(&self, group: &GroupId, count: usize) -> Result<Vec<Result<Creation>>> {
        let body = serde_json::to_vec(&CreateBatch { count })
            .map_err(|e| Error::invalid(format!("a batch of {count} creations: {e}")))?;
        let (_, answer): (_, CreateBatchAnswer) =
            self.request(Method::POST, &["groups", group.as_str(), "creations"], Some(body)).await?;
        let results = one_each(answer.results, count, "creations")?;
        Ok(results
            .into_iter()
            .map(|result| match result.error {
                Some(error) => Err(error.into_error()),
                None => creation(result.instance, result.token),
            })
            .collect())
    }

    /// `POST /groups/{group}/deletions`: one call for every instance.
    async fn delete_instances(&self, group: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        // Another cloud's ID is its own error; the others are sent.
        let names: Vec<Result<&str>> = instances.iter().map(instance_name).collect();
        let sent: Vec<String> = names.iter().filter_map(|n| n.as_ref().ok()).map(|n| (*n).to_owned()).collect();
        let mut answers = if sent.is_empty() {
            Vec::new()
        } else {
            let count = sent.len();
            let body = serde_json::to_vec(&DeleteBatch { instances: sent })
                .map_err(|e| Error::invalid(format!("a batch of {count} deletions: {e}")))?;
            let (_, answer): (_, DeleteBatchAnswer) =
                self.request(Method::POST, &["groups", group.as_str(), "deletions"], Some(body)).await?;
            one_each(answer.results, count, "deletions")?
        }
        .into_iter();
        Ok(names
            .into_iter()
            .map(|name| {
                name?;
                match answers.next() {
                    Some(wire::DeleteResult { error: Some(error), .. }) => Err(error.into_error()),
                    Some(wire::DeleteResult { already_gone: Some(true), .. }) => Ok(Deletion::AlreadyGone),
                    Some(wire::DeleteResult { already_gone: Some(false), .. }) => Ok(Deletion::Started),
                    Some(wire::DeleteResult { already_gone: None, error: None }) => {
                        Err(Error::permanent("the simulated cloud answered a deletion with neither result nor error"))
                    }
                    None => Err(Error::permanent("the simulated cloud's batch answer ended early")),
                }
            })
            .collect())
    }

    /// Batches of up to [`MAX_BATCH`] instances.
    fn batch_limit(&self) -> BatchLimit {
        BatchLimit { create: MAX_BATCH, delete: MAX_BATCH }
    }

    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>> {
        let (_, answer): (_, CreateAnswer) =
            self.request(Method::GET, &["groups", group.as_str(), "creations", &token.0], None).await?;
        answer.instance.map(new_instance).transpose()
    }

    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion> {
        let name = instance_name(instance)?;
        let (_, answer): (_, DeleteAnswer) =
            self.request(Method::DELETE, &["groups", group.as_str(), "instances", name], None).await?;
        Ok(if answer.already_gone { Deletion::AlreadyGone } else { Deletion::Started })
    }

    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState> {
        match self.instance(instance, None).await {
            Ok(instance) => Ok(instance.state),
            Err(Error::NotFound { .. }) => Ok(InstanceState::Terminated),
            Err(error) => Err(error),
        }
    }

    async fn group_image(&self, group: &GroupId) -> Result<String> {
        let (_, answer): (_, wire::Group) = self.request(Method::GET, &["groups", group.as_str()], None).await?;
        Ok(answer.image)
    }

    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        let body = serde_json::to_vec(&ImageBody { image: image.to_owned() })
            .map_err(|e| Error::invalid(format!("image {image:?}: {e}")))?;
        let (_, answer): (_, SetImageAnswer) =
            self.request(Method::PUT, &["groups", group.as_str(), "image"], Some(body)).await?;
        Ok(if answer.applied { ImageUpdate::Applied } else { ImageUpdate::InProgress })
    }

    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>> {
        let (_, answer): (_, GroupList) =
            self.request(Method::GET, &["tags", &cluster.key, &cluster.value, "groups"], None).await?;
        Ok(answer
            .groups
            .into_iter()
            .map(|group| GroupInfo {
                id: GroupId(group.name.clone()),
                autoscaler_group_name: group.name.clone(),
                name: group.name,
                role: group.role,
                min: group.min,
                max: group.max,
            })
            .collect())
    }

    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        let (_, answer): (_, wire::InstanceList) =
            self.request(Method::GET, &["groups", group.as_str(), "instances"], None).await?;
        let mut instances = Vec::with_capacity(answer.instances.len());
        for instance in answer.instances {
            let (state, image) = (instance.state, Some(instance.image.clone()));
            let NewInstance { provider_id, node_name } = new_instance(instance)?;
            instances.push(GroupInstance { provider_id, node_name, state, image });
        }
        Ok(GroupMembers { instances, unlisted: answer.unlisted })
    }

    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        if is_rfc1035(group.as_str()) {
            Ok(group.to_string())
        } else {
            Err(Error::invalid(format!("{group:?} is not the name of a simulated group")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider_id::AwsInstance;

    #[test]
    fn the_endpoint_must_be_a_plain_http_address() {
        assert!(SimulatedProvider::new("http://127.0.0.1:8080").is_ok());
        assert!(SimulatedProvider::new("http://127.0.0.1:8080/").is_ok());
        for bad in ["", "127.0.0.1:8080", "https://127.0.0.1:8080", "http://127.0.0.1:8080/api", "http://h/?x=1", "::"]
        {
            assert!(matches!(SimulatedProvider::new(bad), Err(Error::Invalid { .. })), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn another_clouds_ids_and_group_names_are_invalid_requests_without_a_request() {
        // Nothing listens on port 9 of the discard service; an attempted request would be a transient error.
        let provider = SimulatedProvider::new("http://127.0.0.1:9").unwrap();
        let aws = ProviderId::Aws(AwsInstance { zone: "us-east-1a".into(), instance_id: "i-12345678".into() });
        assert!(matches!(provider.instance_image(&aws).await, Err(Error::Invalid { .. })));
        assert!(matches!(provider.delete_instance(&GroupId::from("g"), &aws).await, Err(Error::Invalid { .. })));
        assert!(matches!(provider.autoscaler_group_name(&GroupId::from("Not/AGroup")), Err(Error::Invalid { .. })));
        assert_eq!(provider.autoscaler_group_name(&GroupId::from("workers-a")).unwrap(), "workers-a");
    }

    #[tokio::test]
    async fn an_unreachable_cloud_is_a_transient_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let provider = SimulatedProvider::new(&format!("http://{address}")).unwrap();
        let error = provider.group_image(&GroupId::from("g")).await.unwrap_err();
        assert!(matches!(error, Error::Transient { .. }), "{error}");
    }
}
