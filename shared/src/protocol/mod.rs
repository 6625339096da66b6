//! The node annotation protocol between the controller and the agents.
//!
//! The controller writes an [`Intent`] into the controller keys of a Node; the node's agent
//! carries out its part of the intent's [`Step`] and writes an [`AgentReport`] into the agent keys.
//! See `docs/protocol.md` for the state diagrams.
//!
//! # Guarantees
//! - Parsing never panics: an unknown or malformed value is a [`ProtocolError`] naming the key.
//! - `parse(render(x)) == x` for every valid value (round-trip tests below).
//! - Rendering writes every key of its side, with `None` for absent values, so that a merge patch
//!   built from it (see [`patch`]) also removes stale keys.
//!
//! # Assumptions
//! - Only the controller writes controller keys and only the node's agent writes agent keys.

pub mod keys;
pub mod patch;
mod values;

pub use values::{
    BootId, ComponentsHash, TARGET_PATTERN, Token, cut, parse_target, render_timestamp, truncate_to_millis,
    truncate_to_seconds,
};

use jiff::Timestamp;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Errors in a node's protocol annotations. None of them is retryable: the annotation has to be
/// rewritten by its writer (or removed by an administrator).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The value is not one of the values the key may take.
    #[error("annotation {key}: unknown value {value:?} (expected one of: {expected})")]
    UnknownValue { key: &'static str, value: String, expected: &'static str },
    /// The value does not have the form the key needs.
    #[error("annotation {key}: malformed value {value:?}: {reason}")]
    Malformed { key: &'static str, value: String, reason: &'static str },
    /// A key that must accompany another one is absent.
    #[error("annotation {key} is missing (required with {with})")]
    Missing { key: &'static str, with: &'static str },
}

/// Result of parsing protocol annotations.
pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;

/// The steps of the controller's intent for a node. Written by the controller; each variant says
/// what the agent does while the intent is in that step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    /// Agent: download, verify and stage the target image, without disrupting the node.
    Stage,
    /// Controller: the node is cordoned and drained. Agent: nothing (keeps the staged image).
    Drain,
    /// Agent: activate the staged target and reboot; report `done` once running it after a boot
    /// with a boot ID other than [`Intent::boot_id_before`].
    Reboot,
    /// Agent: upgrade the Kubernetes components to the target version with kubeadm.
    KubeadmUpgrade,
    /// Agent: fetch the components of the Kubernetes version `target` (the ConfigMap of
    /// [`Intent::kubeadm`]) ahead of the node's turn and verify each against its SHA-256, installing
    /// nothing, without disrupting the node; the later [`Step::KubeadmUpgrade`] installs what was
    /// fetched (checked again before use) instead of downloading it. An agent that predates this step
    /// reads it as an unknown value and does nothing: the controller then fails the step at its timeout.
    Fetch,
    /// Controller: the node is being replaced by a new one through its cloud scaling group.
    /// Agent: nothing.
    Replace,
    /// Controller: the node runs the target and was verified healthy (uncordoned). The soak time
    /// counts from [`Intent::since`]. Agent: nothing.
    Done,
    /// Controller: the node could not be moved to the target (see [`Intent::message`]); it counts
    /// against the failure budget and is left uncordoned. Agent: nothing.
    Failed,
    /// Controller: the node could not be drained in time and was uncordoned; the rollout went on
    /// without it. Agent: nothing.
    Blocked,
}

impl Step {
    /// Every step, in the order of a node's life.
    pub const ALL: [Step; 9] = [
        Step::Stage,
        Step::Drain,
        Step::Reboot,
        Step::KubeadmUpgrade,
        Step::Fetch,
        Step::Replace,
        Step::Done,
        Step::Failed,
        Step::Blocked,
    ];
    const EXPECTED: &'static str = "stage, drain, reboot, kubeadm-upgrade, fetch, replace, done, failed, blocked";

    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Stage => "stage",
            Step::Drain => "drain",
            Step::Reboot => "reboot",
            Step::KubeadmUpgrade => "kubeadm-upgrade",
            Step::Fetch => "fetch",
            Step::Replace => "replace",
            Step::Done => "done",
            Step::Failed => "failed",
            Step::Blocked => "blocked",
        }
    }

    /// Whether the agent has work to do in this step (and reports on it with the step's token).
    pub fn agent_acts(self) -> bool {
        match self {
            Step::Stage | Step::Reboot | Step::KubeadmUpgrade | Step::Fetch => true,
            Step::Drain | Step::Replace | Step::Done | Step::Failed | Step::Blocked => false,
        }
    }

    /// Whether the node is disrupted (cordoned, draining, rebooting or being replaced) in this step.
    pub fn disrupts(self) -> bool {
        match self {
            Step::Drain | Step::Reboot | Step::KubeadmUpgrade | Step::Replace => true,
            Step::Stage | Step::Fetch | Step::Done | Step::Failed | Step::Blocked => false,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Step {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self> {
        Step::ALL.into_iter().find(|step| step.as_str() == s).ok_or_else(|| ProtocolError::UnknownValue {
            key: keys::INTENT,
            value: s.to_owned(),
            expected: Step::EXPECTED,
        })
    }
}

/// What the controller wants of a node. Absent (`None` from [`Intent::parse`]) when the
/// controller has never acted on the node or a human reset it by removing the intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub step: Step,
    /// The image (or Kubernetes version for [`Step::KubeadmUpgrade`]) the node moves to.
    pub target: String,
    /// Fresh for every intent the controller writes.
    pub token: Token,
    /// When the controller wrote this intent.
    pub since: Timestamp,
    /// The node's boot ID when the controller asked for the reboot ([`Step::Reboot`] only).
    pub boot_id_before: Option<BootId>,
    /// What the node installs and runs ([`Step::KubeadmUpgrade`]), or fetches ahead ([`Step::Fetch`],
    /// without a role); `None` for every other step.
    pub kubeadm: Option<KubeadmIntent>,
    /// Why the node is failed or blocked.
    pub message: Option<String>,
}

/// The kubeadm part of an intent [`Step::KubeadmUpgrade`] or [`Step::Fetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeadmIntent {
    /// The components ConfigMap (in `kube-system`) to install (or fetch) from; its name says its content's hash.
    pub components: String,
    /// The kubeadm command the node runs: always present with [`Step::KubeadmUpgrade`], never with
    /// [`Step::Fetch`] (nothing runs).
    pub role: Option<KubeadmRole>,
}

/// Which kubeadm command a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KubeadmRole {
    /// The first control-plane node: `kubeadm upgrade plan` and `kubeadm upgrade apply`.
    Apply,
    /// Every other node: `kubeadm upgrade node`.
    Node,
}

impl KubeadmRole {
    const EXPECTED: &'static str = "apply, node";

    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            KubeadmRole::Apply => "apply",
            KubeadmRole::Node => "node",
        }
    }
}

impl FromStr for KubeadmRole {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self> {
        [KubeadmRole::Apply, KubeadmRole::Node].into_iter().find(|r| r.as_str() == s).ok_or_else(|| {
            ProtocolError::UnknownValue { key: keys::INTENT_KUBEADM, value: s.to_owned(), expected: Self::EXPECTED }
        })
    }
}

/// The controller's annotations on a node: its intent, and whether it cordoned the node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerAnnotations {
    pub intent: Option<Intent>,
    /// The controller cordoned this node and must uncordon it when done with it.
    pub cordoned_by_us: bool,
}

/// Longest target the protocol accepts, in characters (cloud image references are long, but not
/// this long). Characters rather than bytes because the API server counts a CRD's `maxLength` so.
pub const MAX_TARGET_LEN: usize = 1024;
/// Longest message written; longer messages are cut at a character boundary when rendered.
pub const MAX_MESSAGE_LEN: usize = 1024;

impl ControllerAnnotations {
    /// Reads the controller keys of a node's annotations. Keys of other writers are ignored.
    pub fn parse(annotations: &BTreeMap<String, String>) -> Result<Self> {
        let get = |key: &'static str| annotations.get(key).map(String::as_str);
        let cordoned_by_us = match get(keys::CORDONED_BY) {
            None => false,
            Some(keys::CORDONED_BY_VALUE) => true,
            Some(other) => {
                return Err(ProtocolError::UnknownValue {
                    key: keys::CORDONED_BY,
                    value: other.to_owned(),
                    expected: keys::CORDONED_BY_VALUE,
                });
            }
        };
        let Some(step) = get(keys::INTENT) else {
            return Ok(ControllerAnnotations { intent: None, cordoned_by_us });
        };
        let step: Step = step.parse()?;
        let required = |key: &'static str| get(key).ok_or(ProtocolError::Missing { key, with: keys::INTENT });
        let target = values::parse_target(keys::INTENT_TARGET, required(keys::INTENT_TARGET)?)?;
        let token = Token::parse(keys::INTENT_TOKEN, required(keys::INTENT_TOKEN)?)?;
        let since = values::parse_timestamp(keys::INTENT_SINCE, required(keys::INTENT_SINCE)?)?;
        let boot_id_before = get(keys::BOOT_ID_BEFORE).map(|v| BootId::parse(keys::BOOT_ID_BEFORE, v)).transpose()?;
        if step == Step::Reboot && boot_id_before.is_none() {
            return Err(ProtocolError::Missing { key: keys::BOOT_ID_BEFORE, with: "intent=reboot" });
        }
        let components = |with: &'static str| -> Result<String> {
            let components =
                get(keys::INTENT_COMPONENTS).ok_or(ProtocolError::Missing { key: keys::INTENT_COMPONENTS, with })?;
            values::parse_config_map_name(keys::INTENT_COMPONENTS, components)
        };
        let kubeadm = match step {
            Step::KubeadmUpgrade => {
                let with = "intent=kubeadm-upgrade";
                let components = components(with)?;
                let role =
                    get(keys::INTENT_KUBEADM).ok_or(ProtocolError::Missing { key: keys::INTENT_KUBEADM, with })?;
                Some(KubeadmIntent { components, role: Some(role.parse()?) })
            }
            // Nothing runs: a role would say nothing, and is not read.
            Step::Fetch => Some(KubeadmIntent { components: components("intent=fetch")?, role: None }),
            _ => None,
        };
        let message = get(keys::INTENT_MESSAGE).map(str::to_owned);
        Ok(ControllerAnnotations {
            intent: Some(Intent { step, target, token, since, boot_id_before, kubeadm, message }),
            cordoned_by_us,
        })
    }

    /// Like [`ControllerAnnotations::parse`], and when that fails, what can still be told about the
    /// keys (see [`UnreadableKeys`]).
    pub fn read(annotations: &BTreeMap<String, String>) -> Result<Self, UnreadableKeys> {
        let error = match Self::parse(annotations) {
            Ok(parsed) => return Ok(parsed),
            Err(error) => error,
        };
        let intent_present = annotations.contains_key(keys::INTENT);
        // Every other key in the form the controller writes: with a target the protocol can read
        // in its place, the annotations parse.
        let ours = match error {
            ProtocolError::Malformed { key: keys::INTENT_TARGET, .. } => {
                let mut repaired = annotations.clone();
                repaired.insert(keys::INTENT_TARGET.to_owned(), "unreadable".to_owned());
                Self::parse(&repaired).ok().and_then(|parsed| {
                    let intent = parsed.intent?;
                    Some(OursUnreadable {
                        step: intent.step,
                        since: intent.since,
                        cordoned_by_us: parsed.cordoned_by_us,
                    })
                })
            }
            _ => None,
        };
        Err(UnreadableKeys { error, intent_present, ours })
    }

    /// Every controller key with its value, `None` for keys that must be absent.
    pub fn render(&self) -> Vec<(&'static str, Option<String>)> {
        let intent = self.intent.as_ref();
        vec![
            (keys::INTENT, intent.map(|i| i.step.as_str().to_owned())),
            (keys::INTENT_TARGET, intent.map(|i| i.target.clone())),
            (keys::INTENT_TOKEN, intent.map(|i| i.token.to_string())),
            (keys::INTENT_SINCE, intent.map(|i| values::render_timestamp(i.since))),
            (keys::BOOT_ID_BEFORE, intent.and_then(|i| i.boot_id_before.as_ref()).map(ToString::to_string)),
            (keys::INTENT_COMPONENTS, intent.and_then(|i| i.kubeadm.as_ref()).map(|k| k.components.clone())),
            (keys::INTENT_KUBEADM, intent.and_then(|i| i.kubeadm.as_ref()?.role).map(|r| r.as_str().to_owned())),
            (keys::INTENT_MESSAGE, intent.and_then(|i| i.message.as_deref()).map(values::cut_message)),
            (keys::CORDONED_BY, self.cordoned_by_us.then(|| keys::CORDONED_BY_VALUE.to_owned())),
        ]
    }
}

/// Controller keys that [`ControllerAnnotations::parse`] rejects, with what can still be told
/// about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableKeys {
    pub error: ProtocolError,
    /// The `intent` key is present: the node may be in the middle of a step.
    pub intent_present: bool,
    /// Set when every key but `intent-target` is in the form the controller writes: an intent of
    /// ours whose target neither side can read (a controller that did not validate `spec.image`
    /// wrote it). Removing it is safe: no agent acts on an intent it cannot read.
    pub ours: Option<OursUnreadable>,
}

impl fmt::Display for UnreadableKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

/// What is known of an intent of ours with an unreadable target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OursUnreadable {
    pub step: Step,
    pub since: Timestamp,
    /// `cordoned-by` is ours: the controller cordoned the node and uncordons it when it lets go.
    pub cordoned_by_us: bool,
}

/// How far the agent got with the intent named by [`AgentReport::token`]. Written by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentState {
    /// Nothing under way (no token, or the step of the token needs nothing from the agent).
    Idle,
    /// Working on the step of the token.
    Busy,
    /// Finished the step of the token.
    Done,
    /// Could not finish the step of the token (see [`AgentReport::message`]).
    Error,
}

impl AgentState {
    pub const ALL: [AgentState; 4] = [AgentState::Idle, AgentState::Busy, AgentState::Done, AgentState::Error];
    const EXPECTED: &'static str = "idle, busy, done, error";

    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Idle => "idle",
            AgentState::Busy => "busy",
            AgentState::Done => "done",
            AgentState::Error => "error",
        }
    }
}

impl fmt::Display for AgentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AgentState {
    type Err = ProtocolError;
    fn from_str(s: &str) -> Result<Self> {
        AgentState::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| ProtocolError::UnknownValue {
            key: keys::STATE,
            value: s.to_owned(),
            expected: AgentState::EXPECTED,
        })
    }
}

/// What the agent reports about its node: its progress on the current intent and the facts of the
/// host. Every field is optional because an agent that never ran wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentReport {
    pub state: Option<AgentState>,
    /// The intent token `state` is about.
    pub token: Option<Token>,
    /// Error message for [`AgentState::Error`].
    pub message: Option<String>,
    pub boot_id: Option<BootId>,
    pub os_image: Option<String>,
    pub components_hash: Option<ComponentsHash>,
}

impl AgentReport {
    /// Reads the agent keys of a node's annotations. Keys of other writers are ignored.
    pub fn parse(annotations: &BTreeMap<String, String>) -> Result<Self> {
        let get = |key: &'static str| annotations.get(key).map(String::as_str);
        let state = get(keys::STATE).map(AgentState::from_str).transpose()?;
        let token = get(keys::STATE_TOKEN).map(|v| Token::parse(keys::STATE_TOKEN, v)).transpose()?;
        if matches!(state, Some(AgentState::Busy | AgentState::Done | AgentState::Error)) && token.is_none() {
            return Err(ProtocolError::Missing { key: keys::STATE_TOKEN, with: "state=busy|done|error" });
        }
        Ok(AgentReport {
            state,
            token,
            message: get(keys::STATE_MESSAGE).map(str::to_owned),
            boot_id: get(keys::BOOT_ID).map(|v| BootId::parse(keys::BOOT_ID, v)).transpose()?,
            os_image: get(keys::OS_IMAGE).map(|v| values::parse_target(keys::OS_IMAGE, v)).transpose()?,
            components_hash: get(keys::COMPONENTS_HASH)
                .map(|v| ComponentsHash::parse(keys::COMPONENTS_HASH, v))
                .transpose()?,
        })
    }

    /// Every agent key with its value, `None` for keys that must be absent.
    pub fn render(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            (keys::STATE, self.state.map(|s| s.as_str().to_owned())),
            (keys::STATE_TOKEN, self.token.as_ref().map(ToString::to_string)),
            (keys::STATE_MESSAGE, self.message.as_deref().map(values::cut_message)),
            (keys::BOOT_ID, self.boot_id.as_ref().map(ToString::to_string)),
            (keys::OS_IMAGE, self.os_image.clone()),
            (keys::COMPONENTS_HASH, self.components_hash.as_ref().map(ToString::to_string)),
        ]
    }

    /// Whether this report says the agent finished (or failed) the intent with `token`. A report
    /// about any other token is stale and says nothing about this intent.
    pub fn finished(&self, token: &Token) -> Option<AgentState> {
        match (self.state, &self.token) {
            (Some(state @ (AgentState::Done | AgentState::Error)), Some(t)) if t == token => Some(state),
            _ => None,
        }
    }
}

/// Whether a node carries the opt-in label.
pub fn is_managed(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(keys::MANAGED_LABEL)).is_some_and(|v| v == keys::MANAGED_VALUE)
}

#[cfg(test)]
mod tests;
