//! `/_dev/cloud`: the simulated cloud over HTTP. Its API (under `/_dev/cloud/api`, the routes of
//! `cloud::simulated::wire`) counts calls and obeys faults; the dev controls do neither.
//!
//! | Dev control | Answer |
//! |---|---|
//! | `GET /_dev/cloud` | `{"tag", "groups": [{"group", "faults", "pendingImage"}], "instances": [{"instance", "registered", "faults"}], "faults", "calls"}` |
//! | `PUT /_dev/cloud/faults` [`super::CloudFaults`] / `DELETE` (every fault of the cloud, groups and instances) | `200 {}` |
//! | `PUT /_dev/cloud/groups/{group}/faults` [`super::GroupFaults`] / `DELETE` | `200 {}` |
//! | `PUT /_dev/cloud/instances/{name}/faults` [`super::InstanceFaults`] / `DELETE` | `200 {}` |
//! | `POST /_dev/cloud/instances/{name}/stop` / `start` | `202 {}` |
//!
//! Dev control errors are `{"message"}` with 400, 404 or 405; API errors are `cloud::simulated::wire::ErrorBody`.

use super::{ControlError, SimulatedCloud};
use crate::apiserver::core::DevRoutes;
use crate::dev_routes::{message, parse};
use bytes::Bytes;
use cloud::Operation;
use cloud::simulated::wire::{CreateBatch, DeleteBatch, ErrorBody, ErrorCode, ImageBody};
use futures::FutureExt;
use futures::future::BoxFuture;
use http::Method;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;

impl SimulatedCloud {
    /// The HTTP routes (`/_dev/cloud/...`).
    pub fn routes(&self) -> Arc<CloudRoutes> {
        Arc::new(CloudRoutes::new(self.clone()))
    }
}

/// The `/_dev/cloud` routes of a simulated cloud.
pub struct CloudRoutes {
    cloud: SimulatedCloud,
}

fn control(result: Result<(), ControlError>, status: u16) -> (u16, Value) {
    match result {
        Ok(()) => (status, json!({})),
        Err(error @ ControlError::NotFound(_)) => message(404, error.to_string()),
        Err(error @ ControlError::Invalid(_)) => message(400, error.to_string()),
    }
}

fn api<T: Serialize>(result: Result<T, ErrorBody>, status: u16) -> (u16, Value) {
    let error = match result {
        Ok(answer) => match serde_json::to_value(answer) {
            Ok(value) => return (status, value),
            Err(e) => ErrorBody::new(ErrorCode::Internal, format!("encoding the answer: {e}")),
        },
        Err(error) => error,
    };
    (error.code.status(), serde_json::to_value(&error).unwrap_or_else(|_| json!({"code": "Internal"})))
}

impl CloudRoutes {
    /// The routes of `cloud`.
    pub fn new(cloud: SimulatedCloud) -> Self {
        CloudRoutes { cloud }
    }

    async fn answer(cloud: SimulatedCloud, method: Method, segments: Vec<String>, body: Bytes) -> (u16, Value) {
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (segments.as_slice(), method) {
            (["cloud", "api", rest @ ..], method) => Self::api(cloud, method, rest, body).await,
            (["cloud"], Method::GET) => (200, cloud.snapshot()),
            (["cloud", "faults"], Method::PUT) => match parse(&body) {
                Ok(faults) => control(cloud.set_faults(faults), 200),
                Err(answer) => answer,
            },
            (["cloud", "faults"], Method::DELETE) => {
                cloud.clear_faults();
                (200, json!({}))
            }
            (["cloud", "groups", group, "faults"], Method::PUT) => match parse(&body) {
                Ok(faults) => control(cloud.set_group_faults(group, faults), 200),
                Err(answer) => answer,
            },
            (["cloud", "groups", group, "faults"], Method::DELETE) => {
                control(cloud.set_group_faults(group, super::GroupFaults::default()), 200)
            }
            (["cloud", "instances", name, "faults"], Method::PUT) => match parse(&body) {
                Ok(faults) => control(cloud.set_instance_faults(name, faults), 200),
                Err(answer) => answer,
            },
            (["cloud", "instances", name, "faults"], Method::DELETE) => {
                control(cloud.set_instance_faults(name, super::InstanceFaults::default()), 200)
            }
            (["cloud", "instances", name, "stop"], Method::POST) => control(cloud.stop(name), 202),
            (["cloud", "instances", name, "start"], Method::POST) => control(cloud.start(name), 202),
            (["cloud"] | ["cloud", "faults"] | ["cloud", "groups" | "instances", _, "faults"], method)
            | (["cloud", "instances", _, "stop" | "start"], method) => {
                message(405, format!("{method} is not allowed here"))
            }
            _ => message(404, "no such path under /_dev/cloud"),
        }
    }

    /// The API routes of `cloud::simulated::wire`.
    async fn api(cloud: SimulatedCloud, method: Method, segments: &[&str], body: Bytes) -> (u16, Value) {
        match (segments, method) {
            (["tags", key, value, "groups"], Method::GET) => api(cloud.list_groups(key, value).await, 200),
            (["groups", group], Method::GET) => api(cloud.group(group).await, 200),
            (["groups", group, "image"], Method::PUT) => match serde_json::from_slice::<ImageBody>(&body) {
                Ok(request) => api(cloud.set_group_image(group, &request.image).await, 200),
                Err(e) => api::<()>(
                    Err(ErrorBody::new(ErrorCode::Invalid, format!("the body is not {{\"image\"}}: {e}"))),
                    200,
                ),
            },
            (["groups", group, "instances"], Method::POST) => {
                let answer = cloud.create_instance(group).await;
                let status = if answer.as_ref().is_ok_and(|a| a.token.is_some()) { 202 } else { 201 };
                api(answer, status)
            }
            (["groups", group, "instances"], Method::GET) => api(cloud.group_instances(group).await, 200),
            (["groups", group, "creations"], Method::POST) => match serde_json::from_slice::<CreateBatch>(&body) {
                Ok(request) => api(cloud.create_instances(group, request.count).await, 201),
                Err(e) => api::<()>(
                    Err(ErrorBody::new(ErrorCode::Invalid, format!("the body is not {{\"count\"}}: {e}"))),
                    200,
                ),
            },
            (["groups", group, "deletions"], Method::POST) => match serde_json::from_slice::<DeleteBatch>(&body) {
                Ok(request) => api(cloud.delete_instances(group, &request.instances).await, 200),
                Err(e) => api::<()>(
                    Err(ErrorBody::new(ErrorCode::Invalid, format!("the body is not {{\"instances\"}}: {e}"))),
                    200,
                ),
            },
            (["groups", group, "creations", token], Method::GET) => api(cloud.creation(group, token).await, 200),
            (["groups", group, "instances", name], Method::DELETE) => {
                api(cloud.delete_instance(group, name).await, 200)
            }
            (["instances", name], Method::GET) => api(cloud.instance(name, Operation::InstanceState).await, 200),
            (["instances", name, "image"], Method::GET) => {
                api(cloud.instance(name, Operation::InstanceImage).await, 200)
            }
            (["instances", name, "group"], Method::GET) => {
                api(cloud.instance(name, Operation::InstanceGroup).await, 200)
            }
            (
                ["tags", _, _, "groups"]
                | ["groups", _]
                | ["groups", _, "image" | "instances" | "creations" | "deletions"],
                method,
            )
            | (
                ["groups", _, "creations" | "instances", _] | ["instances", _] | ["instances", _, "image" | "group"],
                method,
            ) => api::<()>(Err(ErrorBody::new(ErrorCode::Invalid, format!("{method} is not allowed here"))), 200),
            _ => api::<()>(Err(ErrorBody::new(ErrorCode::NotFound, "no such path under /_dev/cloud/api")), 200),
        }
    }
}

impl DevRoutes for CloudRoutes {
    fn handle(&self, method: Method, segments: Vec<String>, body: Bytes) -> BoxFuture<'static, (u16, Value)> {
        Self::answer(self.cloud.clone(), method, segments, body).boxed()
    }
}
