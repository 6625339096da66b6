//! The emulator's HTTP server: routes of Compute's `compute/v1` REST API, the OAuth token endpoint and the metadata
//! server's token, with Compute's error format.

use super::spec::DiscoverySpec;
use super::{ApiError, ApiResult, GcpEmulator, GcpTiming, Inner, Paging, State, permissions};
use crate::apiserver::store::Store;
use crate::hosts::Hosts;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Requests bodies above this are refused.
const MAX_BODY: usize = 1 << 20;

impl GcpEmulator {
    /// Starts an emulator of project `project` on a loopback port; its instances' Nodes are registered in `store`
    /// and their hosts run in `hosts`.
    pub async fn start(project: &str, store: &Store, hosts: &Hosts, timing: GcpTiming) -> std::io::Result<GcpEmulator> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let emulator = GcpEmulator {
            inner: Arc::new(Inner {
                project: project.to_owned(),
                project_number: 482_913_570_112,
                url: format!("http://{}", listener.local_addr()?),
                state: Mutex::new(State { next_id: 1_000_000_000_000, ..State::default() }),
                store: store.clone(),
                hosts: hosts.clone(),
                timing: Mutex::new(timing),
                shutdown: CancellationToken::new(),
            }),
        };
        serve(emulator.clone(), listener);
        Ok(emulator)
    }
}

/// Serves `emulator` on `listener` until it shuts down.
fn serve(emulator: GcpEmulator, listener: tokio::net::TcpListener) {
    tokio::spawn(async move {
        loop {
            let socket = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((socket, _)) => socket,
                    Err(_) => continue,
                },
                () = emulator.inner.shutdown.cancelled() => return,
            };
            let emulator = emulator.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let emulator = emulator.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(emulator, request).await) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(socket), service).await;
            });
        }
    });
}

fn respond(status: u16, body: &Value, retry_after: Option<u64>) -> Response<Full<Bytes>> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(http::header::CONTENT_TYPE, "application/json; charset=UTF-8");
    if let Some(seconds) = retry_after {
        builder = builder.header(http::header::RETRY_AFTER, seconds.to_string());
    }
    let body = Full::new(Bytes::from(serde_json::to_vec(body).unwrap_or_default()));
    builder.body(body).unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// Compute's error body.
fn error_response(error: &ApiError) -> Response<Full<Bytes>> {
    let domain = if error.reason == "rateLimitExceeded" { "usageLimits" } else { "global" };
    let mut body = json!({"error": {
        "code": error.status,
        "message": error.message,
        "errors": [{"message": error.message, "domain": domain, "reason": error.reason}],
    }});
    let status = match error.status {
        429 => Some("RESOURCE_EXHAUSTED"),
        401 => Some("UNAUTHENTICATED"),
        _ => None,
    };
    if let Some(status) = status {
        body["error"]["status"] = json!(status);
    }
    respond(error.status, &body, error.retry_after)
}

fn query_param(request: &Request<Incoming>, key: &str) -> Option<String> {
    let query = request.uri().query()?;
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

async fn body_of(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    let collected = http_body_util::Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::invalid(format!("reading the body: {e}")))?;
    Ok(collected.to_bytes())
}

fn json_body(bytes: &Bytes) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::invalid(format!("Invalid JSON payload received. {e}")))
}

async fn answer(emulator: GcpEmulator, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    // The OAuth token endpoint (refresh-token grant, JSON or form body).
    if path == "/token" && method == Method::POST {
        let body = match body_of(request).await {
            Ok(body) => body,
            Err(error) => return error_response(&error),
        };
        let refresh = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["refresh_token"].as_str().map(str::to_owned))
            .or_else(|| form_urlencoded::parse(&body).find(|(k, _)| k == "refresh_token").map(|(_, v)| v.into_owned()));
        let Some(refresh) = refresh else {
            return respond(
                400,
                &json!({"error": "invalid_request", "error_description": "Missing refresh_token"}),
                None,
            );
        };
        return match emulator.issue_token(Some(&refresh)) {
            Ok(token) => respond(200, &token, None),
            Err((status, body)) => respond(status, &body, None),
        };
    }
    // The metadata server's token (GKE workload identity, a VM's service account).
    if path == "/computeMetadata/v1/instance/service-accounts/default/token" && method == Method::GET {
        let flavored = request.headers().get("metadata-flavor").and_then(|v| v.to_str().ok()) == Some("Google");
        if !flavored {
            return respond(403, &json!("Missing required header: Metadata-Flavor"), None);
        }
        return match emulator.issue_token(None) {
            Ok(token) => respond(200, &token, None),
            Err((status, body)) => respond(status, &body, None),
        };
    }
    let token = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    if !token.as_deref().is_some_and(|t| emulator.token_known(t)) {
        return error_response(&ApiError::new(
            401,
            "required",
            "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ));
    }
    let Some(rest) = path.strip_prefix(&format!("/compute/v1/projects/{}/", emulator.project())) else {
        return error_response(&ApiError::not_found(path.trim_start_matches("/compute/v1/")));
    };
    let segments: Vec<String> = rest.split('/').map(str::to_owned).collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let compute = match (segments.as_slice(), &method) {
        (["aggregated", "instanceGroupManagers"], &Method::GET) => "instanceGroupManagers.aggregatedList",
        (["zones", _, "instanceGroupManagers", _], &Method::GET) => "instanceGroupManagers.get",
        (["zones", _, "instanceGroupManagers", _, "createInstances"], &Method::POST) => {
            "instanceGroupManagers.createInstances"
        }
        (["zones", _, "instanceGroupManagers", _, "deleteInstances"], &Method::POST) => {
            "instanceGroupManagers.deleteInstances"
        }
        (["zones", _, "instanceGroupManagers", _, "listManagedInstances"], &Method::POST) => {
            "instanceGroupManagers.listManagedInstances"
        }
        (["zones", _, "instanceGroupManagers", _, "setInstanceTemplate"], &Method::POST) => {
            "instanceGroupManagers.setInstanceTemplate"
        }
        (["zones", _, "instances", _], &Method::GET) => "instances.get",
        (["zones", _, "disks", _], &Method::GET) => "disks.get",
        (["global", "instanceTemplates"], &Method::GET) => "instanceTemplates.list",
        (["global", "instanceTemplates"], &Method::POST) => "instanceTemplates.insert",
        (["global", "instanceTemplates", _], &Method::GET) => "instanceTemplates.get",
        (["global", "instanceTemplates", _], &Method::DELETE) => "instanceTemplates.delete",
        (["zones", _, "operations", _], &Method::GET) => "zoneOperations.get",
        (["zones", _, "operations", _, "wait"], &Method::POST) => "zoneOperations.wait",
        (["global", "operations", _], &Method::GET) => "globalOperations.get",
        (["global", "operations", _, "wait"], &Method::POST) => "globalOperations.wait",
        _ => {
            return error_response(&ApiError::new(
                404,
                "notFound",
                format!("The emulator does not serve {method} {path}"),
            ));
        }
    };
    if let Err(error) = emulator.admit(compute, permissions(compute)) {
        return error_response(&error);
    }
    let filter = query_param(&request, "filter");
    let max_results = match query_param(&request, "maxResults").map(|m| m.parse::<usize>()) {
        None => None,
        Some(Ok(max)) => Some(max),
        Some(Err(_)) => return error_response(&ApiError::invalid("Invalid value for field 'maxResults'.")),
    };
    let paging = Paging { max_results, page_token: query_param(&request, "pageToken") };
    let query: Vec<(String, String)> =
        request.uri().query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    let raw = match body_of(request).await {
        Ok(raw) => raw,
        Err(error) => return error_response(&error),
    };
    // The definition's parameters and request schema, before anything is done (see `spec`).
    let spec = DiscoverySpec::get();
    let described =
        path.strip_prefix(&format!("/{}", spec.service_path())).and_then(|under| spec.method(method.as_str(), under));
    if let Some(described) = described
        && let Err(error) = spec.check_request(described, &query, &raw)
    {
        return error_response(&error);
    }
    let body = match json_body(&raw) {
        Ok(body) => body,
        Err(error) => return error_response(&error),
    };
    let result: ApiResult = match segments.as_slice() {
        ["aggregated", "instanceGroupManagers"] => emulator.aggregated_migs(&paging),
        ["zones", zone, "instanceGroupManagers", mig] => emulator.get_mig(zone, mig),
        ["zones", zone, "instanceGroupManagers", mig, "createInstances"] => emulator.create_instances(zone, mig, &body),
        ["zones", zone, "instanceGroupManagers", mig, "deleteInstances"] => emulator.delete_instances(zone, mig, &body),
        ["zones", zone, "instanceGroupManagers", mig, "listManagedInstances"] => {
            emulator.list_managed_instances(zone, mig, &paging)
        }
        ["zones", zone, "instanceGroupManagers", mig, "setInstanceTemplate"] => {
            emulator.set_instance_template(zone, mig, &body)
        }
        ["zones", zone, "instances", name] => emulator.get_instance(zone, name),
        ["zones", zone, "disks", name] => emulator.get_disk(zone, name),
        ["global", "instanceTemplates"] if method == Method::GET => emulator.list_templates(filter.as_deref(), &paging),
        ["global", "instanceTemplates"] => emulator.insert_template(&body),
        ["global", "instanceTemplates", name] if method == Method::GET => emulator.get_template(name),
        ["global", "instanceTemplates", name] => emulator.delete_template(name),
        ["zones", zone, "operations", name] => emulator.get_operation(Some(zone), name),
        ["zones", zone, "operations", name, "wait"] => emulator.wait_operation(Some(zone), name).await,
        ["global", "operations", name] => emulator.get_operation(None, name),
        ["global", "operations", name, "wait"] => emulator.wait_operation(None, name).await,
        _ => Err(ApiError::new(404, "notFound", format!("The emulator does not serve {method} {path}"))),
    };
    match result {
        Ok(value) => {
            // Every successful answer is held to the method's response schema (recorded for the tests).
            if let Some(described) = described {
                emulator.record_violations(spec.check_response(described, &value));
            }
            respond(200, &value, None)
        }
        Err(error) => error_response(&error),
    }
}
