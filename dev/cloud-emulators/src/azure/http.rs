//! The emulator's HTTPS server: Entra ID's token endpoint and the ARM routes of scale sets.
//!
//! | Request | Answer |
//! |---|---|
//! | `POST /{tenant}/oauth2/v2.0/token` (client assertion) | `{"token_type", "expires_in", "access_token"}`; `400 {"error", "error_description"}` |
//! | `GET .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets` | `{"value": [scale set]}` |
//! | `GET .../virtualMachineScaleSets/{ss}` | the scale set (with `etag`) |
//! | `PATCH .../virtualMachineScaleSets/{ss}` (`sku.capacity`, model image; `If-Match`) | `200` scale set + `Azure-AsyncOperation` |
//! | `POST .../virtualMachineScaleSets/{ss}/delete` `{"instanceIds"}` | `202` + `Azure-AsyncOperation`, `Location` |
//! | `GET .../virtualMachineScaleSets/{ss}/virtualMachines[/{id}[/instanceView]]` | VMs (`$expand=instanceView`: each with `properties.instanceView`), a VM, its instance view |
//! | `GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{loc}/operations/{id}` | `{"name", "status", "startTime", "endTime", "error"}` |

use super::spec::ArmSpec;
use super::{
    API_VERSION, AzureEmulator, AzureEmulatorError, CLIENT_ID, Call, Endpoint, FEDERATED_TOKEN, LOCATION, Provisioning,
    RESOURCE_GROUP, SUBSCRIPTION_ID, State, TENANT_ID, Vm, actions, computer_name,
};
use crate::apiserver::http::tls::Tls;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// An answer: status, extra headers, JSON body (or none).
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Option<Value>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer { status, headers: Vec::new(), body: Some(body) }
    }

    fn error(status: u16, code: &str, message: impl Into<String>) -> Answer {
        Answer::json(status, json!({"error": {"code": code, "message": message.into()}}))
    }
}

impl AzureEmulator {
    /// Serves the emulator on a loopback port over HTTPS until [`AzureEmulator::shutdown`].
    ///
    /// # Errors
    /// When the port or the TLS identity cannot be had.
    pub async fn serve(&self) -> Result<Endpoint, AzureEmulatorError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let tls = Tls::generate()?;
        let base: Arc<str> = format!("https://{address}").into();
        let emulator = self.clone();
        let acceptor = tls.acceptor.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    () = emulator.inner.shutdown.cancelled() => return,
                };
                let (emulator, acceptor, base) = (emulator.clone(), acceptor.clone(), base.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let shutdown = emulator.inner.shutdown.clone();
                    let service = service_fn(move |request| {
                        let (emulator, base) = (emulator.clone(), base.clone());
                        async move { Ok::<_, std::convert::Infallible>(emulator.handle(&base, request).await) }
                    });
                    tokio::select! {
                        _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service) => {}
                        () = shutdown.cancelled() => {}
                    }
                });
            }
        });
        Ok(Endpoint { url: format!("https://{address}/"), ca_pem: tls.ca_pem })
    }

    async fn handle(&self, base: &str, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let body = match Limited::new(body, 1024 * 1024).collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return respond(Answer::error(413, "RequestTooLarge", "the body is too large")),
        };
        let header =
            |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (authorization, if_match) = (header(header::AUTHORIZATION), header(header::IF_MATCH));
        respond(self.answer(base, &parts.method, parts.uri.path(), parts.uri.query(), authorization, if_match, &body))
    }

    /// One request as the HTTPS server receives it, without the transport (`path_and_query` as in a request line,
    /// `authorization` the header's value): its status and JSON body. For tests that send what no client would.
    pub fn exchange(
        &self,
        method: &Method,
        path_and_query: &str,
        authorization: Option<&str>,
        body: &[u8],
    ) -> (u16, Option<Value>) {
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        let answer =
            self.answer("https://127.0.0.1", method, path, query, authorization.map(str::to_owned), None, body);
        (answer.status, answer.body)
    }

    #[allow(clippy::too_many_arguments)]
    fn answer(
        &self,
        base: &str,
        method: &Method,
        path: &str,
        query: Option<&str>,
        authorization: Option<String>,
        if_match: Option<String>,
        body: &[u8],
    ) -> Answer {
        let query: Vec<(String, String)> =
            query.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        if *method == Method::POST && segments.len() == 4 && segments[1..] == ["oauth2", "v2.0", "token"] {
            return self.token(segments[0], body);
        }
        let answer = self.arm(base, method, path, &segments, &query, authorization, if_match, body);
        // Every answer of an operation of the definition is held to its response schema (recorded for the tests).
        let spec = ArmSpec::get();
        if let Some(operation) = spec.operation(&method.as_str().to_ascii_lowercase(), path) {
            let violations = spec.check_response(operation, answer.status, answer.body.as_ref());
            if !violations.is_empty() {
                self.inner.state.lock().violations.extend(violations);
            }
        }
        answer
    }

    /// Entra ID's client-credentials grant with a client assertion (the workload-identity exchange).
    fn token(&self, tenant: &str, body: &[u8]) -> Answer {
        let form: std::collections::HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
        let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
        let refuse = |status: u16, error: &str, description: &str| {
            Answer::json(status, json!({"error": error, "error_description": description, "error_codes": [status]}))
        };
        if tenant != TENANT_ID {
            return refuse(400, "invalid_request", "AADSTS90002: Tenant not found.");
        }
        if field("grant_type") != "client_credentials"
            || field("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
            || !field("scope").ends_with("/.default")
        {
            return refuse(400, "invalid_request", "AADSTS900144: The request body must contain a valid grant.");
        }
        if field("client_id") != CLIENT_ID {
            return refuse(400, "unauthorized_client", "AADSTS700016: Application not found in the directory.");
        }
        if field("client_assertion") != FEDERATED_TOKEN {
            return refuse(401, "invalid_client", "AADSTS700213: No matching federated identity record found.");
        }
        let token = format!("emulated-{:032x}", rand::random::<u128>());
        self.inner.state.lock().tokens.insert(token.clone());
        Answer::json(
            200,
            json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token}),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn arm(
        &self,
        base: &str,
        method: &Method,
        path: &str,
        segments: &[&str],
        query: &[(String, String)],
        authorization: Option<String>,
        if_match: Option<String>,
        body: &[u8],
    ) -> Answer {
        let Some(token) = authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")) else {
            return Answer::error(
                401,
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is missing.",
            );
        };
        let mut state = self.inner.state.lock();
        if !state.tokens.contains(token) {
            return Answer::error(401, "InvalidAuthenticationToken", "The access token is invalid.");
        }
        match query.iter().find(|(k, _)| k == "api-version").map(|(_, v)| v.as_str()) {
            None => {
                return Answer::error(
                    400,
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required for all requests.",
                );
            }
            // The definition's version (`info.version` of the fixture, the provider's pinned API_VERSION).
            Some(version) if version == ArmSpec::get().version() => {}
            Some(other) => {
                return Answer::error(
                    400,
                    "NoRegisteredProviderFound",
                    format!(
                        "No registered resource provider found for API version '{other}' (the emulator serves {API_VERSION})."
                    ),
                );
            }
        }
        let Some(route) = Route::parse(method, segments) else {
            return Answer::error(404, "InvalidResourceType", format!("No route for {method} {path}."));
        };
        let action = route.action();
        state.calls.push(Call { method: method.to_string(), path: path.to_owned(), action });
        if state.denied.contains(action) {
            return Answer::error(
                403,
                "AuthorizationFailed",
                format!(
                    "The client '{CLIENT_ID}' with object id '{CLIENT_ID}' does not have authorization to perform \
                     action '{action}' over scope '{path}' or the scope is invalid. If access was recently granted, \
                     please refresh your credentials."
                ),
            );
        }
        // The definition's parameters and body schema, before anything is done (see `spec`).
        let spec = ArmSpec::get();
        if let Some(operation) = spec.operation(&method.as_str().to_ascii_lowercase(), path)
            && let Err(refusal) = spec.check_request(operation, query, body)
        {
            return Answer::error(refusal.status, refusal.code, refusal.message);
        }
        if let Some((times, retry_after)) = state.faults.throttle {
            state.faults.throttle = (times > 1).then_some((times - 1, retry_after));
            let mut answer = Answer::error(
                429,
                "OperationNotAllowed",
                "The server rejected the request because too many requests have been received for this subscription.",
            );
            answer.headers.push(("retry-after", retry_after.to_string()));
            return answer;
        }
        if let Some(times) = state.faults.server_errors {
            state.faults.server_errors = (times > 1).then_some(times - 1);
            return Answer::error(
                500,
                "InternalServerError",
                "An internal execution error occurred. Please retry later.",
            );
        }
        let write = matches!(route, Route::Update { .. } | Route::DeleteVms { .. });
        if write && let Some(times) = state.faults.conflicts {
            state.faults.conflicts = (times > 1).then_some(times - 1);
            return Answer::error(
                409,
                "Conflict",
                "The request failed due to conflict with a concurrent request. To resolve it, please refer to \
                 https://aka.ms/activitylog to get more details on the conflicting requests.",
            );
        }
        if route.subscription().is_some_and(|s| !s.eq_ignore_ascii_case(SUBSCRIPTION_ID)) {
            return Answer::error(404, "SubscriptionNotFound", "The subscription could not be found.");
        }
        if route.resource_group().is_some_and(|g| !g.eq_ignore_ascii_case(RESOURCE_GROUP)) {
            return Answer::error(404, "ResourceGroupNotFound", "Resource group could not be found.");
        }
        let operation_url = |id: &str| {
            format!(
                "{base}/subscriptions/{SUBSCRIPTION_ID}/providers/Microsoft.Compute/locations/{LOCATION}/operations/{id}?api-version={API_VERSION}"
            )
        };
        match route {
            Route::List { .. } => {
                let value: Vec<Value> = state
                    .scale_sets
                    .iter()
                    .map(|(key, s)| listed(AzureEmulator::scale_set_json(&state, key, s)))
                    .collect();
                page(value, state.page_size, base, path, query)
            }
            Route::ScaleSet { name, .. } => match state.scale_sets.get(&name.to_ascii_lowercase()) {
                Some(s) => Answer::json(200, AzureEmulator::scale_set_json(&state, &name.to_ascii_lowercase(), s)),
                None => not_found(&format!("Microsoft.Compute/virtualMachineScaleSets/{name}")),
            },
            Route::Update { name, .. } => {
                let answer = self.update(&mut state, &name.to_ascii_lowercase(), if_match.as_deref(), body);
                match answer {
                    Ok((value, Some(operation))) => {
                        let mut answer = Answer::json(200, value);
                        answer.headers.push(("azure-asyncoperation", operation_url(&operation)));
                        answer
                    }
                    Ok((value, None)) => Answer::json(200, value),
                    Err(answer) => answer,
                }
            }
            Route::DeleteVms { name, .. } => match self.delete_vms(&mut state, &name.to_ascii_lowercase(), body) {
                Ok(operation) => Answer {
                    status: 202,
                    headers: vec![
                        ("azure-asyncoperation", operation_url(&operation)),
                        ("location", format!("{}&monitor=true", operation_url(&operation))),
                    ],
                    body: None,
                },
                Err(answer) => answer,
            },
            Route::Vms { name, .. } => {
                let key = name.to_ascii_lowercase();
                let Some(scale_set) = state.scale_sets.get(&key) else {
                    return not_found(&format!("Microsoft.Compute/virtualMachineScaleSets/{name}"));
                };
                // `$expand=instanceView` ("Allowed values are 'instanceView'", VirtualMachineScaleSetVMs_List)
                // puts each VM's instance view into `properties.instanceView`.
                let expand = query.iter().any(|(k, v)| {
                    k == "$expand" && v.split(',').any(|e| e.trim().eq_ignore_ascii_case("instanceView"))
                });
                let value: Vec<Value> = state
                    .vms
                    .iter()
                    .filter(|((s, _), _)| *s == key)
                    .filter(|(_, vm)| vm.unlisted_until.is_none_or(|until| Instant::now() >= until))
                    .map(|((_, id), vm)| {
                        let mut json = AzureEmulator::vm_json(scale_set, *id, vm);
                        if expand {
                            json["properties"]["instanceView"] = AzureEmulator::instance_view_json(vm);
                        }
                        listed(json)
                    })
                    .collect();
                page(value, state.page_size, base, path, query)
            }
            Route::Vm { name, id, view, .. } => {
                let key = name.to_ascii_lowercase();
                let found = id
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| Some((state.scale_sets.get(&key)?, n, state.vms.get(&(key.clone(), n))?)));
                match (found, view) {
                    (Some((_, _, vm)), true) => Answer::json(200, AzureEmulator::instance_view_json(vm)),
                    (Some((scale_set, n, vm)), false) => Answer::json(200, AzureEmulator::vm_json(scale_set, n, vm)),
                    (None, _) => {
                        not_found(&format!("Microsoft.Compute/virtualMachineScaleSets/{name}/virtualMachines/{id}"))
                    }
                }
            }
            Route::Operation { id, .. } => match state.operations.get(id) {
                None => Answer::error(404, "NotFound", format!("Operation {id} was not found.")),
                Some(operation) => {
                    let done = operation.done_at <= Instant::now();
                    let mut value = json!({
                        "name": id,
                        "startTime": operation.started.to_string(),
                        "status": match (done, &operation.error) {
                            (false, _) => "InProgress",
                            (true, None) => "Succeeded",
                            (true, Some(_)) => "Failed",
                        },
                    });
                    if done {
                        value["endTime"] = json!(jiff::Timestamp::now().to_string());
                        if let Some((code, message)) = &operation.error {
                            value["error"] = json!({"code": code, "message": message});
                        }
                    }
                    Answer::json(200, value)
                }
            },
        }
    }

    /// PATCH of a scale set: `sku.capacity` and the model's image reference (JSON merge: `null` removes a field).
    fn update(
        &self,
        state: &mut State,
        key: &str,
        if_match: Option<&str>,
        body: &[u8],
    ) -> Result<(Value, Option<String>), Answer> {
        let Some(scale_set) = state.scale_sets.get(key).cloned() else {
            return Err(not_found(&format!("Microsoft.Compute/virtualMachineScaleSets/{key}")));
        };
        let patch: Value = serde_json::from_slice(body).map_err(|e| {
            Answer::error(400, "InvalidRequestContent", format!("The request content was invalid: {e}"))
        })?;
        if let Some(etag) = if_match
            && etag != "*"
            && etag != format!("\"{}\"", scale_set.etag)
        {
            return Err(Answer::error(
                412,
                "PreconditionFailed",
                "The specified precondition 'If-Match' failed: the resource was changed.",
            ));
        }
        let active: Vec<u64> = state
            .vms
            .iter()
            .filter(|((s, _), vm)| s == key && vm.provisioning != Provisioning::Deleting)
            .map(|((_, id), _)| *id)
            .collect();
        let capacity = match patch.pointer("/sku/capacity") {
            None | Some(Value::Null) => None,
            Some(value) => match value.as_u64() {
                Some(n) if n <= 1000 => Some(n),
                _ => {
                    return Err(Answer::error(
                        400,
                        "InvalidParameter",
                        "The value of parameter sku.capacity is invalid (an integer from 0 to 1000).",
                    ));
                }
            },
        };
        let mut image = scale_set.image.clone();
        let image_patch = patch.pointer("/properties/virtualMachineProfile/storageProfile/imageReference");
        if let Some(Value::Object(fields)) = image_patch {
            for (field, value) in fields {
                match (value, image.as_object_mut()) {
                    (Value::Null, Some(object)) => {
                        object.remove(field);
                    }
                    (value, Some(object)) => {
                        object.insert(field.clone(), value.clone());
                    }
                    (_, None) => {}
                }
            }
            let reference =
                serde_json::from_value::<cloud::azure::model::ImageReference>(image.clone()).ok().filter(|r| {
                    r.image().and_then(|i| cloud::azure::model::ImageReference::parse(&i).ok()) == Some(r.clone())
                });
            if reference.is_none() {
                return Err(Answer::error(
                    400,
                    "InvalidParameter",
                    "The value of parameter imageReference is invalid: exactly one of id, sharedGalleryImageId, \
                     communityGalleryImageId or publisher/offer/sku/version must be given.",
                ));
            }
        }
        let grow = capacity.map_or(0, |c| c.saturating_sub(active.len() as u64));
        if grow > 0
            && let Some(times) = state.faults.quota
        {
            state.faults.quota = (times > 1).then_some(times - 1);
            return Err(Answer::error(
                409,
                "OperationNotAllowed",
                format!(
                    "Operation could not be completed as it results in exceeding approved standardDSv3Family Cores \
                     quota. Additional details - Deployment Model: Resource Manager, Location: {LOCATION}, Current \
                     Limit: {0}, Current Usage: {0}, Additional Required: 4.",
                    active.len() * 4
                ),
            ));
        }
        let image_changed = image != scale_set.image;
        let shrink: Vec<u64> = match capacity {
            Some(c) if (c as usize) < active.len() => {
                active.iter().rev().take(active.len() - c as usize).copied().collect()
            }
            _ => Vec::new(),
        };
        if grow == 0 && shrink.is_empty() && !image_changed {
            let value = AzureEmulator::scale_set_json(state, key, &scale_set);
            return Ok((value, None));
        }
        let timing = self.inner.timing.clone();
        let duration = if grow > 0 {
            timing.instance_provision
        } else if shrink.is_empty() {
            std::time::Duration::ZERO
        } else {
            timing.instance_terminate
        };
        let operation = AzureEmulator::new_operation(state, duration, None);
        let mut created = Vec::new();
        if let Some(s) = state.scale_sets.get_mut(key) {
            s.etag += 1;
            s.image = image.clone();
            if image_changed {
                s.updating = Some(operation.clone());
            }
            for _ in 0..grow {
                created.push(s.next_id);
                s.next_id += 1;
            }
        }
        for id in &created {
            state.vms.insert(
                (key.to_owned(), *id),
                Vm {
                    computer_name: computer_name(&scale_set.name, *id),
                    image: image.clone(),
                    provisioning: Provisioning::Creating,
                    running: false,
                    registered: false,
                    unlisted_until: state.list_lag.map(|lag| Instant::now() + lag),
                },
            );
            let key = key.to_owned();
            let id = *id;
            self.after(timing.instance_provision, move |emulator| emulator.provisioned(&key, id));
        }
        self.start_deletions(state, key, &shrink);
        let value = match state.scale_sets.get(key) {
            Some(s) => AzureEmulator::scale_set_json(state, key, s),
            None => Value::Null,
        };
        let mut value = value;
        value["properties"]["provisioningState"] = json!("Updating");
        if grow == 0
            && shrink.is_empty()
            && state.operations.get(&operation).is_some_and(|o| o.done_at <= Instant::now())
        {
            value["properties"]["provisioningState"] = json!("Succeeded");
        }
        Ok((value, Some(operation)))
    }

    fn start_deletions(&self, state: &mut State, key: &str, ids: &[u64]) {
        for id in ids {
            let Some(vm) = state.vms.get_mut(&(key.to_owned(), *id)) else { continue };
            if vm.provisioning == Provisioning::Deleting {
                continue;
            }
            vm.provisioning = Provisioning::Deleting;
            vm.running = false;
            let _ = self.inner.hosts.power_off(&vm.computer_name);
            let key = key.to_owned();
            let id = *id;
            self.after(self.inner.timing.instance_terminate, move |emulator| emulator.deleted(&key, id));
        }
        if !ids.is_empty()
            && let Some(s) = state.scale_sets.get_mut(key)
        {
            s.etag += 1;
        }
    }

    /// POST `.../delete` `{"instanceIds": [...]}`.
    fn delete_vms(&self, state: &mut State, key: &str, body: &[u8]) -> Result<String, Answer> {
        if !state.scale_sets.contains_key(key) {
            return Err(not_found(&format!("Microsoft.Compute/virtualMachineScaleSets/{key}")));
        }
        let body: Value = serde_json::from_slice(body).map_err(|e| {
            Answer::error(400, "InvalidRequestContent", format!("The request content was invalid: {e}"))
        })?;
        let ids: Option<Vec<String>> = body
            .get("instanceIds")
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect());
        let ids = match ids {
            Some(ids) if !ids.is_empty() => ids,
            _ => return Err(Answer::error(400, "InvalidParameter", "The parameter instanceIds is required.")),
        };
        let mut numbers = Vec::new();
        for id in &ids {
            match id.parse::<u64>().ok().filter(|n| state.vms.contains_key(&(key.to_owned(), *n))) {
                Some(n) => numbers.push(n),
                None => {
                    return Err(Answer::error(
                        400,
                        "InvalidParameter",
                        format!(
                            "The provided instanceId {id} is not an active Virtual Machine Scale Set VM instanceId."
                        ),
                    ));
                }
            }
        }
        let operation = AzureEmulator::new_operation(state, self.inner.timing.instance_terminate, None);
        self.start_deletions(state, key, &numbers);
        Ok(operation)
    }
}

fn not_found(resource: &str) -> Answer {
    Answer::error(
        404,
        "ResourceNotFound",
        format!("The Resource '{resource}' under resource group '{RESOURCE_GROUP}' was not found."),
    )
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    let body = answer.body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json; charset=utf-8"));
    headers.insert("x-ms-request-id", header::HeaderValue::from_static("00000000-0000-0000-0000-000000000000"));
    for (name, value) in answer.headers {
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

/// An ARM route (fixed words are case-insensitive, as in ARM).
enum Route<'a> {
    List { sub: &'a str, rg: &'a str },
    ScaleSet { sub: &'a str, rg: &'a str, name: &'a str },
    Update { sub: &'a str, rg: &'a str, name: &'a str },
    DeleteVms { sub: &'a str, rg: &'a str, name: &'a str },
    Vms { sub: &'a str, rg: &'a str, name: &'a str },
    Vm { sub: &'a str, rg: &'a str, name: &'a str, id: &'a str, view: bool },
    Operation { sub: &'a str, id: &'a str },
}

impl<'a> Route<'a> {
    fn parse(method: &Method, s: &[&'a str]) -> Option<Route<'a>> {
        let is = |i: usize, word: &str| s.get(i).is_some_and(|w| w.eq_ignore_ascii_case(word));
        let compute =
            is(0, "subscriptions") && is(2, "resourceGroups") && is(4, "providers") && is(5, "Microsoft.Compute");
        if is(0, "subscriptions")
            && is(2, "providers")
            && is(3, "Microsoft.Compute")
            && is(4, "locations")
            && is(6, "operations")
            && s.len() == 8
        {
            return (*method == Method::GET).then_some(Route::Operation { sub: s[1], id: s[7] });
        }
        if !compute || !is(6, "virtualMachineScaleSets") {
            return None;
        }
        let (sub, rg) = (s[1], s[3]);
        match (method, s.len()) {
            (&Method::GET, 7) => Some(Route::List { sub, rg }),
            (&Method::GET, 8) => Some(Route::ScaleSet { sub, rg, name: s[7] }),
            (&Method::PATCH, 8) => Some(Route::Update { sub, rg, name: s[7] }),
            (&Method::POST, 9) if is(8, "delete") => Some(Route::DeleteVms { sub, rg, name: s[7] }),
            (&Method::GET, 9) if is(8, "virtualMachines") => Some(Route::Vms { sub, rg, name: s[7] }),
            (&Method::GET, 10) if is(8, "virtualMachines") => {
                Some(Route::Vm { sub, rg, name: s[7], id: s[9], view: false })
            }
            (&Method::GET, 11) if is(8, "virtualMachines") && is(10, "instanceView") => {
                Some(Route::Vm { sub, rg, name: s[7], id: s[9], view: true })
            }
            _ => None,
        }
    }

    /// The RBAC action the request needs.
    fn action(&self) -> &'static str {
        match self {
            Route::List { .. } | Route::ScaleSet { .. } => actions::SCALE_SET_READ,
            Route::Update { .. } => actions::SCALE_SET_WRITE,
            Route::DeleteVms { .. } => actions::SCALE_SET_DELETE_VMS,
            Route::Vms { .. } | Route::Vm { view: false, .. } => actions::VM_READ,
            Route::Vm { view: true, .. } => actions::VM_INSTANCE_VIEW_READ,
            Route::Operation { .. } => actions::OPERATION_READ,
        }
    }

    fn subscription(&self) -> Option<&'a str> {
        match self {
            Route::List { sub, .. }
            | Route::ScaleSet { sub, .. }
            | Route::Update { sub, .. }
            | Route::DeleteVms { sub, .. }
            | Route::Vms { sub, .. }
            | Route::Vm { sub, .. }
            | Route::Operation { sub, .. } => Some(sub),
        }
    }

    fn resource_group(&self) -> Option<&'a str> {
        match self {
            Route::List { rg, .. }
            | Route::ScaleSet { rg, .. }
            | Route::Update { rg, .. }
            | Route::DeleteVms { rg, .. }
            | Route::Vms { rg, .. }
            | Route::Vm { rg, .. } => Some(rg),
            Route::Operation { .. } => None,
        }
    }
}

/// A resource as a list call answers it: its ID with the resource group in upper case. ARM IDs are
/// case-insensitive and list calls do not keep the casing of the resource group that GETs and the Azure cloud
/// provider use: cloud-provider-azure lowercases it in every provider ID (`convertResourceGroupNameToLower`,
/// `pkg/provider/azure_wrap.go`), and the cluster-autoscaler's Azure provider lowercases VMSS VM IDs from the List
/// endpoint because "their resource ID format is not consistent with Get endpoint" (kubernetes/autoscaler,
/// `cluster-autoscaler/cloudprovider/azure/azure_scale_set.go`).
fn listed(mut resource: Value) -> Value {
    if let Some(id) = resource["id"].as_str() {
        let upper = id.replace(
            &format!("/resourceGroups/{RESOURCE_GROUP}/"),
            &format!("/resourceGroups/{}/", RESOURCE_GROUP.to_ascii_uppercase()),
        );
        resource["id"] = Value::String(upper);
    }
    resource
}

/// One page of a list answer: the resources from `$skiptoken` on, at most `size`, and a `nextLink` (an absolute URL
/// on this endpoint with the `api-version` and the next `$skiptoken`) while more remain. ARM's list results are
/// `{"value": [...], "nextLink": "..."}` (Microsoft.Compute 2024-07-01 `VirtualMachineScaleSetListResult`,
/// `VirtualMachineScaleSetVMListResult`: "The uri to fetch the next page of ... Call ListNext() with this to fetch
/// the next page").
fn page(value: Vec<Value>, size: Option<usize>, base: &str, path: &str, query: &[(String, String)]) -> Answer {
    let skip = query.iter().find(|(k, _)| k == "$skiptoken").and_then(|(_, v)| v.parse::<usize>().ok()).unwrap_or(0);
    let size = size.unwrap_or(usize::MAX);
    let total = value.len();
    let items: Vec<Value> = value.into_iter().skip(skip).take(size).collect();
    let next = skip.saturating_add(size);
    let mut body = json!({ "value": items });
    if next < total {
        // The next page's link keeps the list's `$expand` (ARM's nextLinks carry the request's query).
        let expand = query
            .iter()
            .find(|(k, v)| k == "$expand" && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b','))
            .map(|(_, v)| format!("&%24expand={}", v.replace(',', "%2C")))
            .unwrap_or_default();
        body["nextLink"] = json!(format!("{base}{path}?api-version={API_VERSION}{expand}&%24skiptoken={next}"));
    }
    Answer::json(200, body)
}
