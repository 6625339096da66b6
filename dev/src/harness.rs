//! Runs update-operator's controller and agents in-process against a dev cluster, each on its own
//! Tokio runtime in its own thread, so that a test can *crash* one (every task and connection of it
//! dropped at its next await point, no lease released: what a killed process leaves behind) or stop
//! it gracefully (what SIGTERM does), and start a new one.
//!
//! Components are the real `controller::run` and `agent::run` with the real simulated-host client;
//! only the process boundary is replaced by a runtime boundary. Requests carry the same
//! `User-Agent` as the binary's (`update-operator/controller VERSION (IDENTITY)`,
//! `update-operator/agent VERSION`), so the dev cluster's request metrics and request log attribute
//! them the same way, replica by replica, and the same identities as `deploy/operator.yaml` gives
//! them ([`crate::operator::Access`]): the controller's service account, and per agent the agent's
//! service account with a token bound to its own Node, under the manifest's RBAC and
//! ValidatingAdmissionPolicy.

use crate::apiserver::ApiServer;
use crate::operator::Access;
use agent::host::HostUpdater;
use agent::host::simulated::{SimulatedConfig, SimulatedHost};
use k8s_openapi::api::coordination::v1::Lease;
use shared::health::Health;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How the component ended.
pub type Outcome = Result<(), String>;

/// A running component.
pub struct Component {
    name: String,
    shutdown: CancellationToken,
    crash: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<Outcome>>,
    thread: Option<std::thread::JoinHandle<()>>,
    health: Health,
}

impl Component {
    /// Starts `make(shutdown, health)` on a new single-threaded runtime in a new thread.
    pub fn spawn<F, Fut>(name: impl Into<String>, make: F) -> Component
    where
        F: FnOnce(CancellationToken, Health) -> Fut + Send + 'static,
        Fut: Future<Output = Outcome> + 'static,
    {
        let name = name.into();
        let shutdown = CancellationToken::new();
        let health = Health::default();
        let (crash_tx, crash_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel::<Outcome>();
        let (token, ready, thread_name) = (shutdown.clone(), health.clone(), name.clone());
        let thread = std::thread::Builder::new()
            .name(thread_name.clone())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = done_tx.send(Err(format!("{thread_name}: cannot build a runtime: {error}")));
                        return;
                    }
                };
                let outcome = runtime.block_on(async move {
                    tokio::select! {
                        outcome = make(token, ready) => Some(outcome),
                        _ = crash_rx => None,
                    }
                });
                // A crash drops every task of the runtime where it stands; a finished component
                // has nothing left to run either.
                runtime.shutdown_background();
                let _ = done_tx.send(outcome.unwrap_or_else(|| Err("crashed".into())));
            })
            .unwrap_or_else(|e| panic!("cannot start a thread for {name}: {e}"));
        Component { name, shutdown, crash: Some(crash_tx), done: Some(done_rx), thread: Some(thread), health }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the component reported ready (caches synced, for a controller; own node seen and
    /// host facts read, for an agent).
    pub fn is_ready(&self) -> bool {
        self.health.is_ready()
    }

    /// Whether every loop of the component beats in time (what its `/healthz` answers).
    pub fn live(&self) -> Result<(), String> {
        self.health.live()
    }

    /// Kills the component as SIGKILL would a process: nothing runs after this, nothing is cleaned
    /// up. Returns once its thread is gone.
    pub async fn crash(mut self) {
        if let Some(crash) = self.crash.take() {
            let _ = crash.send(());
        }
        self.join().await;
    }

    /// Stops the component as SIGTERM would a process, and returns how it ended (an error if it
    /// did not end within `timeout`, in which case it is crashed).
    pub async fn stop(mut self, timeout: Duration) -> Outcome {
        self.shutdown.cancel();
        let outcome = match self.done.take() {
            Some(done) => match tokio::time::timeout(timeout, done).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => Err(format!("{} ended without saying how", self.name)),
                Err(_) => Err(format!("{} did not stop within {timeout:?}", self.name)),
            },
            None => Ok(()),
        };
        if let Some(crash) = self.crash.take() {
            let _ = crash.send(());
        }
        self.join().await;
        outcome
    }

    /// Waits until the component ends on its own, and returns how.
    pub async fn wait(mut self) -> Outcome {
        let outcome = match self.done.take() {
            Some(done) => done.await.unwrap_or_else(|_| Err(format!("{} ended without saying how", self.name))),
            None => Ok(()),
        };
        self.join().await;
        outcome
    }

    async fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        // A component dropped without stop or crash is crashed, so tests never leak its thread's work.
        if let Some(crash) = self.crash.take() {
            let _ = crash.send(());
        }
    }
}

/// A kube config for the API server at `url` (plain HTTP, as the dev cluster serves) with the
/// binary's User-Agent for `mode` (`controller` or `agent`), authenticating with `token`.
pub fn kube_config(url: &str, mode: &str, token: &str) -> Result<kube::Config, String> {
    with_user_agent(url, &binary_user_agent(mode), token)
}

/// The User-Agent of the product binary in `mode` (`controller` or `agent`).
fn binary_user_agent(mode: &str) -> String {
    format!("update-operator/{mode} {}", env!("CARGO_PKG_VERSION"))
}

/// A kube config for the API server at `url` with the User-Agent `agent`, authenticating with
/// `token`.
fn with_user_agent(url: &str, agent: &str, token: &str) -> Result<kube::Config, String> {
    let uri = url.parse().map_err(|e| format!("invalid API server URL {url:?}: {e}"))?;
    let mut config = kube::Config::new(uri);
    config.auth_info.token = Some(secrecy::SecretString::from(token.to_owned()));
    config.headers.push((http::header::USER_AGENT, agent.parse().map_err(|e| format!("user agent: {e}"))?));
    Ok(config)
}

/// The Lease the controllers of the dev cluster campaign for (the binary's default name, in the
/// operator's namespace).
pub const LEASE_NAMESPACE: &str = "update-operator";
pub const LEASE_NAME: &str = "update-operator-controller";

/// Who holds the controllers' Lease, if anyone.
pub fn lease_holder(store: &crate::apiserver::Store) -> Option<String> {
    let lease = store.api::<Lease>().get(Some(LEASE_NAMESPACE), LEASE_NAME).ok()?;
    lease.spec?.holder_identity.filter(|holder| !holder.is_empty())
}

/// Writes of Nodes so far by the controller and by the agents, told apart by their `User-Agent`.
pub fn node_writes(metrics: &crate::apiserver::Metrics) -> (u64, u64) {
    let writes = metrics.writes_by_user_agent("nodes");
    let by = |mode: &str| {
        let prefix = format!("update-operator/{mode}");
        writes.iter().filter(|(agent, _)| agent.starts_with(&prefix)).map(|(_, n)| *n).sum::<u64>()
    };
    (by("controller"), by("agent"))
}

/// The options of a test controller: its identity, the Lease in `update-operator`, and lease timing
/// short enough that a crashed leader is replaced within a few seconds.
pub fn controller_options(identity: &str) -> controller::Options {
    controller::Options {
        identity: identity.to_owned(),
        lease_namespace: LEASE_NAMESPACE.into(),
        lease_name: LEASE_NAME.into(),
        lease_timing: controller::leader::LeaseTiming {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(300),
        },
        own_node: None,
        cloud: None,
        agent_policy: Some(controller::agent_policy::DEFAULT_POLICY.into()),
        node_operations: true,
    }
}

/// The real controller, as the manifest's controller service account.
pub fn controller(access: &Access, options: controller::Options) -> Component {
    controller_with(access, options, controller::Metrics::default())
}

/// The real controller, recording into `metrics` (shared, so the caller can read them).
pub fn controller_with(access: &Access, options: controller::Options, metrics: controller::Metrics) -> Component {
    let access = access.clone();
    let name = format!("controller {}", options.identity);
    Component::spawn(name, move |shutdown, health| async move {
        let config =
            with_user_agent(access.url(), &controller::user_agent(&options.identity), &access.controller_token()?)?;
        controller::run(config, options, metrics, health, shutdown).await.map_err(|e| e.to_string())
    })
}

/// The real agent of `node`, updating its simulated host through the dev cluster, as the
/// manifest's agent service account with a token bound to `node`.
pub fn agent(access: &Access, node: &str) -> Component {
    agent_with(access, node, simulated_host(access.url(), node))
}

/// The real agent of `node` with the host `make_host` builds (on the agent's runtime).
pub fn agent_with<H, F>(access: &Access, node: &str, make_host: F) -> Component
where
    H: HostUpdater,
    F: FnOnce() -> Result<H, String> + Send + 'static,
{
    let (access, node) = (access.clone(), node.to_owned());
    Component::spawn(format!("agent {node}"), move |shutdown, health| {
        run_agent(access, node, make_host, health, shutdown)
    })
}

/// The real agent of `node` as a task on the current runtime rather than on a thread of its own, reaching
/// `server` without a socket ([`ApiServer::in_memory_client`]), for runs with thousands of agents in one
/// process (over TCP each would hold descriptors for its watch at both ends). Only its simulated host's requests,
/// one connection each while they last, use sockets. Cancel the returned token to stop it.
pub fn agent_task(
    server: &ApiServer,
    access: &Access,
    node: &str,
) -> Result<(CancellationToken, tokio::task::JoinHandle<Outcome>), String> {
    let client =
        server.in_memory_client(&access.agent_token(node)?, &binary_user_agent("agent")).map_err(|e| e.to_string())?;
    let shutdown = CancellationToken::new();
    let host = simulated_host(access.url(), node);
    let task = tokio::spawn(run_agent_with(client, node.to_owned(), host, Health::default(), shutdown.clone()));
    Ok((shutdown, task))
}

/// Builds the simulated host of `node` served by the dev cluster at `url`.
fn simulated_host(url: &str, node: &str) -> impl FnOnce() -> Result<SimulatedHost, String> + Send + 'static {
    let (url, node) = (url.to_owned(), node.to_owned());
    move || SimulatedHost::new(SimulatedConfig::new(url, node)).map_err(|e| e.to_string())
}

async fn run_agent<H: HostUpdater>(
    access: Access,
    node: String,
    make_host: impl FnOnce() -> Result<H, String>,
    health: Health,
    shutdown: CancellationToken,
) -> Outcome {
    let config = kube_config(access.url(), "agent", &access.agent_token(&node)?)?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    run_agent_with(client, node, make_host, health, shutdown).await
}

async fn run_agent_with<H: HostUpdater>(
    client: kube::Client,
    node: String,
    make_host: impl FnOnce() -> Result<H, String>,
    health: Health,
    shutdown: CancellationToken,
) -> Outcome {
    let host = Arc::new(make_host()?);
    agent::run(client, node, host, agent::Metrics::default(), health, shutdown).await.map_err(|e| e.to_string())
}
