//! moto for the AWS provider's tests: a `moto_server` on a free loopback port in a temporary directory, a fault
//! proxy in front of it that records every call (`autoscaling:Action`, `ec2:Action`) and injects the errors moto
//! cannot (throttling with `Retry-After`, quota, 5xx, permission), and the groups the tests use.

#![allow(dead_code)]

use async_trait::async_trait;
use bytes::Bytes;
use cloud::GroupId;
use cloud::aws::AwsProvider;
use cloud::aws::ec2::Ec2Client;
use cloud::aws::sdk::aws_config::SdkConfig;
use cloud::aws::sdk::aws_sdk_autoscaling;
use cloud::aws::sdk::aws_sdk_autoscaling::config::Credentials;
use cloud::aws::sdk::aws_sdk_autoscaling::types::{LaunchTemplateSpecification, Tag};
use cloud::conformance::Faults;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};

pub const REGION: &str = "us-east-1";
pub const ZONE: &str = "us-east-1a";
/// The AMI the groups start with and the one the tests switch to (moto does not check that AMIs exist).
pub const IMAGE: &str = "ami-0aaaaaaaaaaaaaaa1";
pub const OTHER_IMAGE: &str = "ami-0bbbbbbbbbbbbbbb2";

/// A running moto server; killed when dropped.
pub struct Moto {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

/// Starts moto, or `None` (with a message) when it is not installed outside CI; in CI (`CI` set) a missing moto
/// fails the test.
pub async fn start_moto() -> Option<Moto> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("its address").port()
    };
    let port_text = port.to_string();
    let candidates: [(&str, Vec<&str>); 2] = [
        ("moto_server", vec!["-H", "127.0.0.1", "-p", &port_text]),
        ("python3", vec!["-m", "moto.server", "-H", "127.0.0.1", "-p", &port_text]),
    ];
    let mut child = None;
    for (program, args) in candidates {
        let spawned = Command::new(program)
            .args(&args)
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn();
        if let Ok(spawned) = spawned {
            child = Some(spawned);
            break;
        }
    }
    let Some(mut child) = child else {
        return missing("neither moto_server nor python3 could be started");
    };
    let url = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return missing(&format!("moto exited at once ({status}); is `moto[server]` installed?"));
        }
        if reachable(&url).await {
            return Some(Moto { child, url, _dir: dir });
        }
        assert!(tokio::time::Instant::now() < deadline, "moto did not answer on {url} within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn missing<T>(why: &str) -> Option<T> {
    assert!(std::env::var_os("CI").is_none(), "moto is required in CI: {why} (pip install 'moto[server]==5.*')");
    eprintln!("SKIPPED: moto is not available ({why}); install it with pip install 'moto[server]==5.*'");
    None
}

async fn reachable(url: &str) -> bool {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let Ok(uri) = format!("{url}/moto-api/").parse::<http::Uri>() else { return false };
    matches!(tokio::time::timeout(Duration::from_secs(2), client.get(uri)).await, Ok(Ok(_)))
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The SDK configuration of the tests: static credentials, the region, `endpoint` (moto or the proxy), and the
/// provider's own loader settings (no retries, timeouts, rustls on ring).
pub async fn sdk_config(endpoint: &str) -> SdkConfig {
    AwsProvider::config_loader(REGION)
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("AKIDMOTOTEST", "moto-secret", None, None, "tests"))
        .load()
        .await
}

/// The configuration of the tests' own setup calls, straight to moto (not through the proxy: not the provider's).
pub async fn setup_config(moto: &str) -> SdkConfig {
    sdk_config(moto).await
}

/// What the proxy answers instead of forwarding.
#[derive(Debug, Clone)]
pub struct Injected {
    /// Only requests of this action (`SetDesiredCapacity`), any when `None`.
    pub action: Option<String>,
    /// Only requests whose body names this group.
    pub group: Option<String>,
    pub status: u16,
    pub code: String,
    pub retry_after: Option<Duration>,
}

#[derive(Default)]
struct ProxyState {
    calls: BTreeSet<String>,
    faults: Vec<Injected>,
    /// Instances `DescribeAutoScalingGroups` answers leave out (see [`FaultProxy::hide_instances`]).
    hidden: BTreeSet<String>,
}

/// The fault proxy; its [`Faults`] implementation serves the conformance suite.
#[derive(Clone)]
pub struct FaultProxy {
    pub url: String,
    state: Arc<Mutex<ProxyState>>,
}

impl FaultProxy {
    /// A proxy in front of `upstream` on a free loopback port; it runs until the runtime ends.
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr: SocketAddr = listener.local_addr().expect("its address");
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let upstream: Arc<str> = upstream.into();
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (state, client, upstream) = (shared.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (state, client, upstream) = (state.clone(), client.clone(), upstream.clone());
                        async move { Ok::<_, std::convert::Infallible>(handle(request, &state, &client, &upstream).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FaultProxy { url: format!("http://{addr}"), state }
    }

    /// Every call forwarded or failed so far, as `service:Action`.
    pub fn calls(&self) -> BTreeSet<String> {
        self.state.lock().calls.clone()
    }

    /// From now on `DescribeAutoScalingGroups` answers leave out these instances, as a list that does not show an
    /// instance the group launched yet (the desired capacity counts it); an empty set lists every instance again.
    pub fn hide_instances(&self, ids: &[String]) {
        self.state.lock().hidden = ids.iter().cloned().collect();
    }

    /// Fails the next request that matches.
    pub fn inject(&self, fault: Injected) {
        self.state.lock().faults.push(fault);
    }
}

#[async_trait]
impl Faults for FaultProxy {
    async fn throttle_next_call(&self, retry_after: Duration) {
        // The code is chosen by service when the request comes (Auto Scaling: Throttling, EC2: RequestLimitExceeded).
        self.inject(Injected {
            action: None,
            group: None,
            status: 0,
            code: String::new(),
            retry_after: Some(retry_after),
        });
    }

    async fn quota_on_next_create(&self, group: &GroupId) {
        self.inject(Injected {
            action: Some("SetDesiredCapacity".into()),
            group: Some(group.to_string()),
            status: 400,
            code: "LimitExceeded".into(),
            retry_after: None,
        });
    }

    async fn clear(&self) {
        self.state.lock().faults.clear();
    }
}

/// The service of a signed request, from its credential scope (`Credential=AKID/DATE/REGION/SERVICE/aws4_request`).
fn service_of(request: &http::request::Parts) -> String {
    let auth = request.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    auth.split("Credential=").nth(1).and_then(|c| c.split('/').nth(3)).unwrap_or("unknown").to_owned()
}

async fn handle(
    request: Request<Incoming>,
    state: &Mutex<ProxyState>,
    client: &Client<HttpConnector, Full<Bytes>>,
    upstream: &str,
) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return plain(502, "the request body could not be read");
    };
    let params: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let service = service_of(&parts);
    let action = param("Action").unwrap_or_default();
    let fault = {
        let mut state = state.lock();
        state.calls.insert(format!("{service}:{action}"));
        let position = state.faults.iter().position(|f| {
            f.action.as_deref().is_none_or(|a| a == action)
                && f.group.as_deref().is_none_or(|g| param("AutoScalingGroupName").as_deref() == Some(g))
        });
        position.map(|i| state.faults.remove(i))
    };
    if let Some(fault) = fault {
        return error_answer(&service, fault);
    }
    let uri = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut forward = Request::builder().method(parts.method.clone()).uri(uri);
    for (name, value) in &parts.headers {
        forward = forward.header(name, value);
    }
    let Ok(forward) = forward.body(Full::new(body)) else { return plain(502, "bad forward request") };
    match client.request(forward).await {
        Ok(answer) => {
            let (mut parts, body) = answer.into_parts();
            let mut body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let hidden = state.lock().hidden.clone();
            if action == "DescribeAutoScalingGroups" && !hidden.is_empty() {
                body = Bytes::from(without_instances(&String::from_utf8_lossy(&body), &hidden));
                parts.headers.remove(http::header::CONTENT_LENGTH);
            }
            Response::from_parts(parts, Full::new(body))
        }
        Err(error) => plain(502, &format!("moto: {error}")),
    }
}

/// An awsQuery `DescribeAutoScalingGroups` answer without the `Instances` members of the `hidden` instances.
fn without_instances(xml: &str, hidden: &BTreeSet<String>) -> String {
    let mut xml = xml.to_owned();
    for id in hidden {
        let needle = format!("<InstanceId>{id}</InstanceId>");
        while let Some(at) = xml.find(&needle) {
            let (Some(start), Some(end)) = (xml[..at].rfind("<member>"), xml[at..].find("</member>")) else { break };
            xml.replace_range(start..at + end + "</member>".len(), "");
        }
    }
    xml
}

fn plain(status: u16, text: &str) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::from(text.to_owned())));
    *answer.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    answer
}

/// An error in the service's protocol: awsQuery (`ErrorResponse`) for Auto Scaling, ec2Query (`Response/Errors`)
/// for EC2.
fn error_answer(service: &str, fault: Injected) -> Response<Full<Bytes>> {
    let (status, code) = match (fault.code.as_str(), service) {
        ("", "ec2") => (503, "RequestLimitExceeded".to_owned()),
        ("", _) => (400, "Throttling".to_owned()),
        (code, _) => (fault.status, code.to_owned()),
    };
    let message = format!("injected by the fault proxy: {code}");
    let body = if service == "ec2" {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}\
             </Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"
        )
    } else {
        format!(
            "<ErrorResponse xmlns=\"https://autoscaling.amazonaws.com/doc/2011-01-01/\"><Error><Type>Sender</Type>\
             <Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
        )
    };
    let mut answer = plain(status, &body);
    answer.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/xml"));
    if let Some(after) = fault.retry_after
        && let Ok(value) = http::HeaderValue::from_str(&format!("{}", after.as_secs_f64()))
    {
        answer.headers_mut().insert(http::header::RETRY_AFTER, value);
    }
    answer
}

/// A launch template with `image` and an Auto Scaling group of `size` instances launched from its `$Default`
/// version, tagged with the cluster's `uid` and `role`; returns the template's ID.
pub async fn create_group(config: &SdkConfig, name: &str, uid: &str, role: &str, size: i32, max: i32) -> String {
    let template_id = Ec2Client::new(config)
        .create_launch_template(&format!("{name}-template"), IMAGE, "t3.micro")
        .await
        .expect("moto creates the launch template");
    let tag = |key: &str, value: &str| {
        Tag::builder().key(key).value(value).resource_id(name).resource_type("auto-scaling-group").build()
    };
    aws_sdk_autoscaling::Client::new(config)
        .create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(
            LaunchTemplateSpecification::builder().launch_template_id(&template_id).version("$Default").build(),
        )
        .min_size(0)
        .max_size(max)
        .desired_capacity(size)
        .availability_zones(ZONE)
        .tags(tag("constellation-uid", uid))
        .tags(tag(cloud::aws::ROLE_TAG, role))
        .send()
        .await
        .expect("moto creates the group");
    template_id
}

/// Makes moto's instances of Auto Scaling groups nodes of a dev cluster, as kubelets and the AWS cloud node
/// lifecycle controller do on AWS: an instance in a group gets a running host with its AMI and, once (as the
/// simulated cloud's kubelets: a Node deleted by the controller is not registered again), a Node named after its
/// private DNS name with `spec.providerID: aws:///ZONE/ID`; a Node whose instance has left the groups
/// (terminated) is deleted with its host. Polls moto directly (not through the proxy: these calls are
/// not the provider's).
pub struct Bridge {
    task: tokio::task::JoinHandle<()>,
}

impl Bridge {
    /// Registers the groups' current instances, then keeps the cluster in step every 100 ms until dropped.
    pub async fn start(config: &SdkConfig, cluster: &dev::cluster::Cluster, groups: &[(&str, bool)]) -> Bridge {
        let autoscaling = aws_sdk_autoscaling::Client::new(config);
        let ec2 = Ec2Client::new(config);
        let groups: Vec<(String, bool)> = groups.iter().map(|(g, cp)| ((*g).to_owned(), *cp)).collect();
        let (store, hosts) = (cluster.store(), cluster.hosts().clone());
        let mut joined = BTreeSet::new();
        sync(&autoscaling, &ec2, &store, &hosts, &groups, &mut joined).await;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                sync(&autoscaling, &ec2, &store, &hosts, &groups, &mut joined).await;
            }
        });
        Bridge { task }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One round of the bridge; moto errors are left for the next round.
async fn sync(
    autoscaling: &aws_sdk_autoscaling::Client,
    ec2: &Ec2Client,
    store: &dev::apiserver::Store,
    hosts: &dev::hosts::Hosts,
    groups: &[(String, bool)],
    joined: &mut BTreeSet<String>,
) {
    use k8s_openapi::api::core::v1::Node;
    let names: Vec<&str> = groups.iter().map(|(g, _)| g.as_str()).collect();
    let Ok(answer) = autoscaling
        .describe_auto_scaling_groups()
        .set_auto_scaling_group_names(Some(names.iter().map(|n| (*n).to_owned()).collect()))
        .send()
        .await
    else {
        return;
    };
    // provider ID -> control plane, of every instance in the groups.
    let mut members = std::collections::BTreeMap::new();
    for group in answer.auto_scaling_groups() {
        let control_plane = groups.iter().any(|(g, cp)| Some(g.as_str()) == group.auto_scaling_group_name() && *cp);
        for instance in group.instances() {
            if let (Some(id), Some(zone)) = (instance.instance_id(), instance.availability_zone()) {
                members.insert(format!("aws:///{zone}/{id}"), (id.to_owned(), control_plane));
            }
        }
    }
    let Ok(nodes) = store.api::<Node>().list(None, &Default::default()) else { return };
    let registered: BTreeSet<String> =
        nodes.items.iter().filter_map(|n| n.spec.as_ref()?.provider_id.clone()).collect();
    for (provider_id, (id, control_plane)) in &members {
        if registered.contains(provider_id) || joined.contains(provider_id) {
            continue;
        }
        let Ok(described) = ec2.describe_instances(&[id.as_str()]).await else { continue };
        let Some(instance) = described.into_iter().next() else { continue };
        let (Some(name), Some(image)) = (instance.private_dns_name.as_deref(), instance.image_id.as_deref()) else {
            continue;
        };
        if hosts.add(name, image).is_err() {
            continue;
        }
        let mut node = dev::cluster::node_manifest(name, *control_plane);
        node.spec.get_or_insert_default().provider_id = Some(provider_id.clone());
        if store.api::<Node>().create(None, &node, &Default::default()).is_ok() {
            joined.insert(provider_id.clone());
        }
    }
    for node in &nodes.items {
        let Some(provider_id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) else { continue };
        if provider_id.starts_with("aws:///") && !members.contains_key(provider_id) {
            let name = node.metadata.name.clone().unwrap_or_default();
            let _ = store.api::<Node>().delete(None, &name, &Default::default());
            hosts.retire(&name);
        }
    }
}
