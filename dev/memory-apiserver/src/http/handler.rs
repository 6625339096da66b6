//! Maps HTTP requests onto the core operations and their results onto responses.
//!
//! # Guarantees
//! - Every request to a resource is counted in the metrics (verb, resource, subresource, User-Agent) before it
//!   is handled, and injected faults apply before anything else happens.
//! - Bad input (bodies, selectors, parameters) is a 4xx Status, never a panic.

use super::access;
use super::negotiate::{self, Encoding, Endpoint};
use super::response::{self, Body, bytes_response, encoded_response, error_response, json_response};
use super::route::{self, ResourcePath, Route};
use crate::auth::UserInfo;
use crate::core::{Core, Ctx, FIELD_MANAGER_MAX_LENGTH};
use crate::discovery;
use crate::error::{ApiError, success_status};
use crate::fault_injection::Faults;
use crate::faults::{ErrorFault, RequestMatch};
use crate::field_validation::{self, FieldValidation, RawNode};
use crate::metrics::{RequestKey, Verb};
use crate::object::Filter;
use crate::openapi::{self, definitions::EVICTION};
use crate::ops::Subresource;
use crate::ops::delete::{DeleteOptions, Deleted};
use crate::ops::eviction::Eviction;
use crate::ops::patch::parse_patch_body;
use crate::ops::read::ListOptions;
use crate::ops::watch::{WatchOptions, WatchSession};
use crate::patch::PatchType;
use crate::protobuf;
use crate::request_log::{RequestLine, RequestLog};
use crate::resource::{Builtin, Gvr, ResourceType};
use crate::schema::{ErrorKind, field_error};
use crate::selector::{FieldSelector, LabelSelector};
use crate::table::IncludeObject;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Upstream refuses request bodies above 3 MiB.
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Handles one request.
pub async fn handle<B>(core: Arc<Core>, address: Arc<str>, request: Request<B>) -> Result<Response<Body>, Infallible>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let error = ApiError::too_large(format!("the request body could not be read: {error}"));
            return Ok(error_response(&error, Encoding::Json));
        }
    };
    let header = |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let request = RequestInfo {
        method: parts.method.clone(),
        params: route::query(parts.uri.query()),
        user_agent: header(header::USER_AGENT).unwrap_or_default(),
        accept: header(header::ACCEPT),
        content_type: header(header::CONTENT_TYPE),
        body,
    };
    let route = route::parse(parts.uri.path());
    // Status errors of the API (401 and 403 too) are negotiated like any response (protobuf for client-go's
    // typed clients).
    let errors = match route {
        Route::Resource(_) => negotiate::for_errors(request.accept.as_deref()),
        _ => Encoding::Json,
    };
    let mut logged = match &route {
        Route::Resource(path) if core.request_log.is_enabled() => {
            log_line(path, &request).map(|line| (core.request_log.clone(), line))
        }
        _ => None,
    };
    let user =
        match access::admit_request(&core, &route, &parts.method, parts.uri.path(), &request.params, &parts.headers) {
            Ok(user) => user,
            Err(error) => return Ok(logged_response(logged, error_response(&error, errors))),
        };
    if let (Some((_, line)), Some(user)) = (&mut logged, &user) {
        line.user.clone_from(&user.name);
    }
    let response = match route {
        Route::Health => Ok(text_response(StatusCode::OK, "ok")),
        Route::Version => Ok(json_response(StatusCode::OK, &discovery::version(&core.version.read().clone()))),
        Route::CoreVersions => Ok(json_response(StatusCode::OK, &discovery::core_versions(&address))),
        Route::Groups => Ok(json_response(StatusCode::OK, &discovery::groups(&core.registry.read()))),
        Route::Group(group) => discovery::group(&core.registry.read(), &group)
            .map(|g| json_response(StatusCode::OK, &g))
            .ok_or_else(ApiError::path_not_found),
        Route::Resources(group, version) => discovery::resources(&core.registry.read(), &group, &version)
            .map(|r| json_response(StatusCode::OK, &r))
            .ok_or_else(ApiError::path_not_found),
        Route::OpenApiV2 => openapi_v2(&core, &request),
        Route::OpenApiV3Index if request.method == Method::GET => {
            Ok(json_response(StatusCode::OK, &openapi::v3_index(&core.registry.read(), &core.version.read().clone())))
        }
        Route::OpenApiV3(path) if request.method == Method::GET => openapi_v3(&core, &path, &request),
        Route::OpenApiV3Index | Route::OpenApiV3(_) => Err(ApiError::method_not_allowed(request.method.as_str())),
        Route::DevMetrics => Ok(dev_metrics(&core)),
        Route::DevFaults => dev_faults(&core, &request),
        Route::DevMounted(segments) => match mounted_routes(&core) {
            Some(routes) => {
                let (status, body) = routes.handle(request.method.clone(), segments, request.body.clone()).await;
                Ok(json_response(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &body))
            }
            None => Err(ApiError::path_not_found()),
        },
        Route::Resource(path) => match user {
            Some(user) => resource_request(core, path, request, user, errors).await,
            // admit_request answers every route but /_dev/ with a user.
            None => Err(ApiError::internal("the request has no user")),
        },
        Route::NotFound => Err(ApiError::path_not_found()),
    };
    Ok(logged_response(logged, response.unwrap_or_else(|error| error_response(&error, errors))))
}

/// `response`, recorded in the request log if the request is to be logged.
fn logged_response(logged: Option<(RequestLog, RequestLine)>, response: Response<Body>) -> Response<Body> {
    if let Some((log, line)) = logged {
        log.record(line, response.status().as_u16());
    }
    response
}

/// What the request log records of a resource request.
fn log_line(path: &ResourcePath, request: &RequestInfo) -> Option<RequestLine> {
    let verb = verb_of(&request.method, path.name.is_some(), path.legacy_watch || request.flag("watch"))?;
    Some(RequestLine {
        verb,
        group: path.group.clone(),
        resource: path.plural.clone(),
        subresource: path.subresource.clone().unwrap_or_default(),
        namespace: path.namespace.clone(),
        name: path.name.clone(),
        user_agent: request.user_agent.clone(),
        user: String::new(),
    })
}

/// The media types an `Accept` header lists, without parameters, in order.
fn accepted(accept: Option<&str>) -> Vec<String> {
    accept
        .unwrap_or("*/*")
        .split(',')
        .map(|offer| offer.split(';').next().unwrap_or_default().trim().to_owned())
        .filter(|media| !media.is_empty())
        .collect()
}

/// 406 for an OpenAPI document in none of the formats `Accept` lists.
fn openapi_not_acceptable(request: &RequestInfo) -> ApiError {
    let accept = request.accept.as_deref().unwrap_or_default();
    ApiError::not_acceptable(&format!(
        "the server was unable to respond with a content type that the client supports ({accept})"
    ))
}

/// `/openapi/v2`: protobuf for client-go (which asks for nothing else), JSON for everyone else.
fn openapi_v2(core: &Core, request: &RequestInfo) -> Result<Response<Body>, ApiError> {
    if request.method != Method::GET {
        return Err(ApiError::method_not_allowed(request.method.as_str()));
    }
    for media in accepted(request.accept.as_deref()) {
        match media.as_str() {
            openapi::V2_PROTOBUF | openapi::V2_PROTOBUF_DEPRECATED => {
                let document = openapi::v2_document(&core.registry.read(), &core.version.read().clone());
                let mut response = bytes_response(StatusCode::OK, Bytes::from(openapi::protobuf::encode(&document)));
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(openapi::V2_PROTOBUF));
                return Ok(response);
            }
            "application/json" | "application/*" | "*/*" => {
                let document = openapi::v2_document(&core.registry.read(), &core.version.read().clone());
                return Ok(json_response(StatusCode::OK, &document));
            }
            _ => {}
        }
    }
    Err(openapi_not_acceptable(request))
}

/// `/openapi/v3/{group version}`: JSON (the protobuf form is not served, so a client asking only for it gets
/// 406 and asks again for JSON).
fn openapi_v3(core: &Core, path: &str, request: &RequestInfo) -> Result<Response<Body>, ApiError> {
    if !accepted(request.accept.as_deref())
        .iter()
        .any(|m| matches!(m.as_str(), "application/json" | "application/*" | "*/*"))
    {
        return Err(openapi_not_acceptable(request));
    }
    let document = openapi::v3_group_version(&core.registry.read(), path, &core.version.read().clone())
        .ok_or_else(ApiError::path_not_found)?;
    let mut response = json_response(StatusCode::OK, &document);
    if let Ok(etag) = http::HeaderValue::from_str(&format!("\"{}\"", openapi::hash(&document))) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}

fn mounted_routes(core: &Core) -> Option<Arc<dyn crate::core::DevRoutes>> {
    core.dev_routes.read().clone()
}

struct RequestInfo {
    method: Method,
    params: HashMap<String, String>,
    user_agent: String,
    accept: Option<String>,
    content_type: Option<String>,
    body: Bytes,
}

impl RequestInfo {
    fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }

    /// The body as sent (duplicates kept), when it is JSON or YAML; `None` for protobuf, whose decoding is never
    /// strict upstream (it has no unknown or duplicate fields to report).
    fn raw_body(&self) -> Option<RawNode> {
        match Encoding::of_content_type(self.content_type.as_deref())? {
            Encoding::Json => RawNode::parse_json(&self.body),
            Encoding::Yaml => RawNode::parse_yaml(&self.body),
            Encoding::Protobuf => None,
        }
    }

    /// The request body as JSON, decoded from its `Content-Type` (`application/json` when absent): JSON, YAML,
    /// or protobuf for the built-in kinds (`protobuf`); anything else is a 415.
    fn body_value(&self, protobuf: bool) -> Result<Value, ApiError> {
        let decoded = match Encoding::of_content_type(self.content_type.as_deref()) {
            Some(Encoding::Json) => serde_json::from_slice(&self.body).map_err(|e| e.to_string()),
            Some(Encoding::Yaml) => yaml_serde::from_slice::<Value>(&self.body).map_err(|e| e.to_string()),
            Some(Encoding::Protobuf) if protobuf => protobuf::decode(&self.body).map_err(|e| e.to_string()),
            Some(Encoding::Protobuf) => {
                return Err(ApiError::unsupported_media_type(&["application/json", "application/yaml"]));
            }
            None => {
                let served: Vec<&str> = Encoding::SERVED.iter().map(|e| e.media_type()).collect();
                return Err(ApiError::unsupported_media_type(&served));
            }
        };
        decoded.map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded: {e}")))
    }
}

fn text_response(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = bytes_response(status, Bytes::from_static(text.as_bytes()));
    response.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn verb_of(method: &Method, has_name: bool, watch: bool) -> Option<Verb> {
    Some(match (method.as_str(), has_name) {
        ("GET", _) if watch => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("GET", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return None,
    })
}

fn subresource_served(rt: &ResourceType, subresource: &str) -> bool {
    match subresource {
        "status" => rt.status_subresource,
        "scale" => rt.scale.is_some(),
        other => rt.other_subresources.contains(&other),
    }
}

async fn resource_request(
    core: Arc<Core>,
    path: ResourcePath,
    request: RequestInfo,
    user: UserInfo,
    errors: Encoding,
) -> Result<Response<Body>, ApiError> {
    let warnings = parking_lot::Mutex::new(Vec::new());
    let result = serve_resource(core, path, request, &user, &warnings).await;
    let warnings = warnings.into_inner();
    let mut response = result.unwrap_or_else(|error| error_response(&error, errors));
    access::add_warnings(&mut response, &warnings);
    Ok(response)
}

async fn serve_resource(
    core: Arc<Core>,
    path: ResourcePath,
    request: RequestInfo,
    user: &UserInfo,
    warnings: &parking_lot::Mutex<Vec<String>>,
) -> Result<Response<Body>, ApiError> {
    let rt = core.resource(&Gvr::new(&path.group, &path.version, &path.plural)).ok_or_else(ApiError::path_not_found)?;
    let watch = path.legacy_watch || request.flag("watch");
    let has_name = path.name.is_some();
    let verb = verb_of(&request.method, has_name, watch)
        .ok_or_else(|| ApiError::method_not_allowed(request.method.as_str()))?;
    let scope_ok = match (rt.namespaced, path.namespace.is_some()) {
        (true, true) | (false, false) => true,
        // Listing or watching a namespaced kind across namespaces.
        (true, false) => !has_name && matches!(verb, Verb::List | Verb::Watch),
        (false, true) => false,
    };
    let subresource = path.subresource.as_deref();
    if !scope_ok || subresource.is_some_and(|s| !subresource_served(&rt, s)) {
        return Err(ApiError::path_not_found());
    }
    let key = RequestKey {
        verb,
        group: rt.group.clone(),
        resource: rt.plural.clone(),
        subresource: subresource.unwrap_or_default().to_owned(),
        user_agent: request.user_agent.clone(),
    };
    core.metrics.record(verb, &key.group, &key.resource, &key.subresource, &key.user_agent);
    let delay = core.faults.latency_for(&key);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    core.faults.hold_while_hung(&key).await;
    if let Some(error) = core.faults.error_for(&key) {
        return Err(error);
    }
    let protobuf = rt.custom().is_none() && protobuf::has_message(&rt.group, &rt.version, &rt.kind);
    let negotiated = negotiate::negotiate(request.accept.as_deref(), Endpoint { protobuf })?;
    negotiated.representation.check_fits(matches!(verb, Verb::List | Verb::DeleteCollection))?;
    let encoding = negotiated.encoding;
    let read_body = || request.body_value(protobuf);
    let include = IncludeObject::parse(request.param("includeObject"));
    let dry_run = request.param("dryRun") == Some("All");
    let field_manager = request.param("fieldManager").filter(|m| !m.is_empty());
    if let Some(manager) = field_manager {
        validate_field_manager(verb, manager)?;
    }
    let field_validation = match verb {
        Verb::Create => FieldValidation::parse(request.param("fieldValidation"), "CreateOptions")?,
        Verb::Update => FieldValidation::parse(request.param("fieldValidation"), "UpdateOptions")?,
        Verb::Patch => FieldValidation::parse(request.param("fieldValidation"), "PatchOptions")?,
        _ => FieldValidation::Ignore,
    };
    let body_findings = match verb {
        Verb::Patch if field_validation != FieldValidation::Ignore => patch_body_findings(&request),
        _ => Vec::new(),
    };
    let ctx = Ctx {
        field_manager,
        dry_run,
        field_validation,
        body_findings: &body_findings,
        user: Some(user),
        warnings: Some(warnings),
        ..Ctx::new(&request.user_agent)
    };
    let namespace = path.namespace.as_deref();
    let name = path.name.as_deref().unwrap_or_default();
    let object = |status: StatusCode, object: &Arc<crate::object::StoredObject>| {
        response::object_response(status, &rt, object, negotiated, include)
    };
    if rt.builtin().is_some_and(Builtin::is_review) {
        return match (verb, has_name) {
            (Verb::Create, false) => {
                Ok(encoded_response(StatusCode::CREATED, &core.review(&rt, namespace, user, &read_body()?)?, encoding))
            }
            _ => Err(ApiError::method_not_allowed(request.method.as_str())),
        };
    }
    match (verb, subresource) {
        (Verb::Watch, _) => {
            negotiate::check_stream(encoding)?;
            let mut options = watch_options(&core, &rt, namespace, &request)?;
            if has_name {
                let by_name = FieldSelector::parse(&format!("metadata.name={name}"), &[], rt.namespaced)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                options.filter.fields.requirements.extend(by_name.requirements);
            }
            let session = WatchSession::start(core.clone(), rt.clone(), options)?;
            Ok(response::watch_response(session, negotiated))
        }
        (Verb::List, _) => {
            let options = list_options(&rt, namespace, &request)?;
            let page = core.list(&rt, &options).await?;
            Ok(response::list_response(&rt, page, negotiated, include))
        }
        (Verb::Get, None | Some("status")) => Ok(object(StatusCode::OK, &core.get(&rt, namespace, name)?)),
        (Verb::Get, Some("scale")) => Ok(json_response(StatusCode::OK, &core.get_scale(&rt, namespace, name)?)),
        (Verb::Create, None) if !has_name => {
            let body = read_body()?;
            check_fields(&rt, &request, &body, &ctx)?;
            let created = core.create(&rt, namespace, body, &ctx)?;
            Ok(object(StatusCode::CREATED, &created))
        }
        (Verb::Create, Some("eviction")) => {
            let body = read_body()?;
            if let Some(node) = request.raw_body() {
                let findings = field_validation::definition_errors(EVICTION, &node);
                ctx.field_findings(findings, |f| field_validation::strict_decoding_error_of("Eviction", "v1", f))?;
            }
            let eviction = Eviction::from_body(&body)?;
            core.evict(namespace.unwrap_or_default(), name, &eviction, &ctx)?;
            Ok(encoded_response(StatusCode::CREATED, &success_status(None, Some(201)), encoding))
        }
        (Verb::Create, Some("token")) => Ok(encoded_response(
            StatusCode::CREATED,
            &core.token_request(namespace.unwrap_or_default(), name, &read_body()?)?,
            encoding,
        )),
        (Verb::Create, Some("binding")) => {
            core.bind(namespace.unwrap_or_default(), name, &read_body()?, &ctx)?;
            Ok(encoded_response(StatusCode::CREATED, &success_status(None, Some(201)), encoding))
        }
        (Verb::Update, sub @ (None | Some("status"))) => {
            let body = read_body()?;
            check_fields(&rt, &request, &body, &ctx)?;
            let subresource = if sub == Some("status") { Subresource::Status } else { Subresource::Main };
            Ok(object(StatusCode::OK, &core.update(&rt, namespace, name, body, subresource, &ctx)?))
        }
        (Verb::Update, Some("scale")) => Ok(encoded_response(
            StatusCode::OK,
            &core.write_scale(&rt, namespace, name, None, Some(read_body()?), &ctx)?,
            encoding,
        )),
        (Verb::Update, Some("finalize")) => {
            Ok(object(StatusCode::OK, &core.finalize_namespace(name, &read_body()?, &ctx)?))
        }
        (Verb::Patch, sub @ (None | Some("status") | Some("scale"))) => {
            let content_type = request.content_type.as_deref().unwrap_or_default();
            let patch_type = PatchType::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(&[
                    PatchType::Json.content_type(),
                    PatchType::Merge.content_type(),
                    PatchType::Strategic.content_type(),
                    PatchType::Apply.content_type(),
                ])
            })?;
            let patch = parse_patch_body(patch_type, &request.body)?;
            if sub == Some("scale") {
                return Ok(encoded_response(
                    StatusCode::OK,
                    &core.write_scale(&rt, namespace, name, Some((patch_type, &patch)), None, &ctx)?,
                    encoding,
                ));
            }
            let subresource = if sub == Some("status") { Subresource::Status } else { Subresource::Main };
            let force = request.flag("force");
            let patched = core.patch(&rt, namespace, name, patch_type, &patch, subresource, force, &ctx)?;
            let status = if patched.created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(object(status, &patched.object))
        }
        (Verb::Delete, None) => {
            let options = delete_options(&request, protobuf)?;
            match core.delete(&rt, namespace, name, &options, &ctx)? {
                Deleted::Pending(pending) => Ok(object(StatusCode::OK, &pending)),
                Deleted::Gone(gone) if rt.is(Builtin::Pod) => Ok(object(StatusCode::OK, &gone)),
                Deleted::Gone(gone) => {
                    let mut details = json!({"name": &*gone.index.name, "kind": rt.plural, "uid": &*gone.index.uid});
                    if !rt.group.is_empty() {
                        details["group"] = json!(rt.group);
                    }
                    Ok(encoded_response(StatusCode::OK, &success_status(Some(details), None), encoding))
                }
            }
        }
        (Verb::DeleteCollection, None) => {
            let options = delete_options(&request, protobuf)?;
            let filter = filter(&rt, namespace, &request)?;
            let deleted = core.delete_collection(&rt, &filter, &options, &ctx)?;
            let rv = core.state.lock().rv;
            let page = crate::ops::read::ListResult { rv, items: deleted, continue_token: None, remaining: None };
            Ok(response::list_response(&rt, page, negotiated, include))
        }
        _ => Err(ApiError::method_not_allowed(request.method.as_str())),
    }
}

/// `?fieldManager=` must be printable and at most 128 bytes (upstream `ValidateFieldManager`); the error names
/// the options kind of the verb.
fn validate_field_manager(verb: Verb, manager: &str) -> Result<(), ApiError> {
    let kind = match verb {
        Verb::Create => "CreateOptions",
        Verb::Update => "UpdateOptions",
        Verb::Patch => "PatchOptions",
        _ => return Ok(()),
    };
    let mut errors = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errors.push(field_error(
            "fieldManager",
            ErrorKind::TooLong,
            format!("Too long: may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes"),
        ));
    }
    for (position, c) in manager.char_indices() {
        if c != ' ' && (c.is_control() || c.is_whitespace()) {
            errors.push(field_error(
                "fieldManager",
                ErrorKind::Invalid,
                format!("Invalid value: {manager:?}: invalid character U+{:04X} (at position {position})", c as u32),
            ));
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_named(&format!("{kind}.meta.k8s.io"), "meta.k8s.io", kind, "", &errors))
}

/// Unknown and duplicate fields of a create or update body, under the request's field validation.
fn check_fields(rt: &ResourceType, request: &RequestInfo, body: &Value, ctx: &Ctx<'_>) -> Result<(), ApiError> {
    if ctx.field_validation == FieldValidation::Ignore {
        return Ok(());
    }
    let node = request.raw_body();
    let findings = match rt.custom() {
        Some(custom) => field_validation::custom_errors(custom.schema.as_ref(), body, node.as_ref()),
        None => node.map(|node| field_validation::builtin_errors(rt, &node)).unwrap_or_default(),
    };
    ctx.field_findings(findings, |f| field_validation::strict_decoding_error(rt, f))
}

/// Duplicate fields in a patch body (and, for a JSON patch, fields its operations do not have), as upstream's
/// strict decoding of the patch reports them.
fn patch_body_findings(request: &RequestInfo) -> Vec<String> {
    let Some(node) = RawNode::parse_json(&request.body) else { return Vec::new() };
    let content_type = request.content_type.as_deref().unwrap_or_default();
    match PatchType::from_content_type(content_type) {
        Some(PatchType::Json) => field_validation::json_patch_errors(&node),
        Some(PatchType::Merge | PatchType::Strategic) => field_validation::duplicates(&node),
        _ => Vec::new(),
    }
}

fn filter(rt: &ResourceType, namespace: Option<&str>, request: &RequestInfo) -> Result<Filter, ApiError> {
    let labels = match request.param("labelSelector") {
        Some(text) => LabelSelector::parse(text)
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
        None => LabelSelector::everything(),
    };
    let fields = match request.param("fieldSelector") {
        Some(text) => FieldSelector::parse(text, &rt.selectable_field_names(), rt.namespaced)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => FieldSelector::default(),
    };
    Ok(Filter { namespace: namespace.map(str::to_owned), labels, fields })
}

fn list_options(rt: &ResourceType, namespace: Option<&str>, request: &RequestInfo) -> Result<ListOptions, ApiError> {
    if request.flag("sendInitialEvents") {
        return Err(list_options_invalid("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list"));
    }
    let limit = match request.param("limit") {
        Some(text) => {
            Some(text.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid limit {text:?}")))?.max(0)
                as usize)
        }
        None => None,
    };
    Ok(ListOptions {
        filter: filter(rt, namespace, request)?,
        limit,
        continue_token: request.param("continue").map(str::to_owned),
        resource_version: request.param("resourceVersion").map(str::to_owned),
        resource_version_match: request.param("resourceVersionMatch").map(str::to_owned),
    })
}

fn list_options_invalid(field: &str, message: &str) -> ApiError {
    ApiError::invalid_named(
        "ListOptions.meta.k8s.io",
        "meta.k8s.io",
        "ListOptions",
        "",
        &[field_error(field, ErrorKind::Forbidden, message)],
    )
}

fn watch_options(
    core: &Core,
    rt: &ResourceType,
    namespace: Option<&str>,
    request: &RequestInfo,
) -> Result<WatchOptions, ApiError> {
    let send_initial_events = request.flag("sendInitialEvents");
    let allow_bookmarks = request.flag("allowWatchBookmarks");
    let rv_match = request.param("resourceVersionMatch").filter(|m| !m.is_empty());
    if send_initial_events {
        if rv_match != Some("NotOlderThan") {
            return Err(list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !allow_bookmarks {
            return Err(list_options_invalid(
                "allowWatchBookmarks",
                "Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is set",
            ));
        }
    } else if rv_match.is_some() {
        return Err(list_options_invalid(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let timeout = match request.param("timeoutSeconds") {
        Some(text) => Some(Duration::from_secs(
            text.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {text:?}")))?,
        )),
        None => Some(core.config.default_watch_timeout),
    };
    Ok(WatchOptions {
        filter: filter(rt, namespace, request)?,
        resource_version: request.param("resourceVersion").map(str::to_owned),
        send_initial_events,
        allow_bookmarks,
        timeout,
    })
}

fn delete_options(request: &RequestInfo, protobuf: bool) -> Result<DeleteOptions, ApiError> {
    let mut options: DeleteOptions = if request.body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        serde_json::from_value(request.body_value(protobuf)?)
            .map_err(|e| ApiError::bad_request(format!("the DeleteOptions could not be decoded: {e}")))?
    };
    if let Some(grace) = request.param("gracePeriodSeconds") {
        options.grace_period_seconds =
            Some(grace.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {grace:?}")))?);
    }
    if let Some(policy) = request.param("propagationPolicy") {
        options.propagation_policy = Some(policy.to_owned());
    }
    if request.param("dryRun") == Some("All") {
        options.dry_run = Some(vec!["All".into()]);
    }
    Ok(options)
}

fn dev_metrics(core: &Core) -> Response<Body> {
    let (rv, watchers, counters, snapshots) = {
        let state = core.state.lock();
        (state.rv, state.watcher_count(), state.counters, state.snapshots.len())
    };
    json_response(
        StatusCode::OK,
        &json!({
            "resourceVersion": rv,
            "watchers": watchers,
            "watchEvents": counters.watch_events,
            "slowWatchersClosed": counters.slow_watchers_closed,
            "acceptFailures": core.accept_failures.load(std::sync::atomic::Ordering::Relaxed),
            "listSnapshots": snapshots,
            "requests": core.metrics.snapshot(),
        }),
    )
}

/// `POST /_dev/faults` with `{"action": ...}`: `closeWatches`, `compact`, `inject`, `latency`, `hang`, `clear`,
/// `pauseController`, `resumeController`.
fn dev_faults(core: &Arc<Core>, request: &RequestInfo) -> Result<Response<Body>, ApiError> {
    if request.method != Method::POST {
        return Err(ApiError::method_not_allowed(request.method.as_str()));
    }
    let command = request.body_value(false)?;
    let faults = Faults::new(core.clone());
    let text = |key: &str| command.get(key).and_then(Value::as_str).map(str::to_owned);
    let requests = || -> Result<RequestMatch, ApiError> {
        let verbs = match command.get("verbs").and_then(Value::as_array) {
            Some(verbs) => verbs
                .iter()
                .map(|v| {
                    v.as_str().and_then(Verb::parse).ok_or_else(|| ApiError::bad_request(format!("unknown verb {v}")))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        Ok(RequestMatch {
            verbs,
            resource: text("resource"),
            subresource: text("subresource"),
            user_agent_prefix: text("userAgentPrefix"),
        })
    };
    let result = match text("action").as_deref() {
        Some("closeWatches") => json!({"closed": faults.close_all_watches()}),
        Some("compact") => {
            faults.compact();
            json!({})
        }
        Some("clear") => {
            faults.clear();
            json!({})
        }
        Some("inject") => {
            let code = command.get("code").and_then(Value::as_u64).filter(|c| (400..600).contains(c));
            let code = code.ok_or_else(|| ApiError::bad_request("inject needs a code between 400 and 599"))? as u16;
            let mut fault = ErrorFault::new(requests()?, code);
            if let Some(seconds) = command.get("retryAfterSeconds").and_then(Value::as_u64) {
                fault = fault.retry_after(seconds.min(u64::from(u32::MAX)) as u32);
            }
            if let Some(times) = command.get("times").and_then(Value::as_u64) {
                fault = fault.times(times.min(u64::from(u32::MAX)) as u32);
            }
            faults.inject(fault);
            json!({})
        }
        Some("hang") => {
            faults.hang(requests()?);
            json!({})
        }
        Some("latency") => {
            let millis = command
                .get("millis")
                .and_then(Value::as_u64)
                .ok_or_else(|| ApiError::bad_request("latency needs millis"))?;
            faults.add_latency(requests()?, Duration::from_millis(millis));
            json!({})
        }
        Some("pauseController") => {
            faults
                .pause_controller(&text("name").ok_or_else(|| ApiError::bad_request("pauseController needs a name"))?);
            json!({})
        }
        Some("resumeController") => {
            faults.resume_controller(
                &text("name").ok_or_else(|| ApiError::bad_request("resumeController needs a name"))?,
            );
            json!({})
        }
        other => return Err(ApiError::bad_request(format!("unknown action {other:?}"))),
    };
    Ok(json_response(StatusCode::OK, &result))
}
