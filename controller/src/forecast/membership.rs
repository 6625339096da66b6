//! Which nodes a forecast replaces: the scaling groups, and each node's group as the controller learns it.
//!
//! The controller learns a node's group and creation image from the cloud ([`crate::groups::instances`]). A
//! forecast does the same when it may ask the cloud ([`CloudAnswers`]); without the cloud it takes the group from
//! the provider ID where the ID names it (Azure scale set VMs, the simulated cloud: [`named_group`], the
//! controller's own rule) and the image from the node's agent. Every node it cannot place is listed
//! ([`Membership::unclassified`]) and forecast in place.
//!
//! A group's image is the one its ScalingGroup controller gives it: the image of the NodeVersion its
//! `spec.nodeImage` names (the forecast's, with `plan -f`), else the image the group has now.

use crate::groups::instances::{Learned, named_group};
use crate::nodes::SlimNode;
use crate::policy::replacement::GroupView;
use crate::policy::{Fleet, GroupMember};
use crate::replacer::{group_view, member_of, pending_view};
use cloud::ProviderId;
use kube::ResourceExt;
use shared::crd::{NodeVersion, PendingNode, ScalingGroup};
use std::collections::BTreeMap;

/// What the cloud said about each instance, by provider ID as the Node spells it: its group and image (`None`: in
/// no group), or why it could not tell.
pub type CloudAnswers = BTreeMap<String, Result<Learned, String>>;

/// The image a forecast assumes for a group member whose image neither its agent nor the cloud told: it is not
/// any NodeVersion's target, so the node is replaced.
pub const IMAGE_NOT_KNOWN: &str = "(not known without the cloud)";

/// The scaling groups, PendingNodes and members, as the policy takes them.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    pub fleet: Fleet,
    /// The member facts of each node a group covers, by node name.
    pub members: BTreeMap<String, GroupMember>,
    /// Nodes with a cloud instance whose group is not known (no cloud asked and the provider ID does not name it,
    /// or the cloud's answer failed): forecast in place.
    pub unclassified: Vec<String>,
    /// Members whose image neither their agent nor the cloud told: taken as outdated ([`IMAGE_NOT_KNOWN`]).
    pub image_assumed: Vec<String>,
}

/// The membership of `nodes` in `groups`. `versions` are the NodeVersions the forecast plans (their images are the
/// groups' next images); `cloud` the cloud's answers when it was asked.
pub fn classify(
    nodes: &[SlimNode],
    groups: &[ScalingGroup],
    pending: &[PendingNode],
    versions: &[&NodeVersion],
    cloud: Option<&CloudAnswers>,
) -> Membership {
    let mut membership = Membership::default();
    if groups.is_empty() {
        return membership;
    }
    membership.fleet.groups = groups
        .iter()
        .map(|g| {
            let next = versions.iter().find(|v| v.name_any() == g.spec.node_image).map(|v| v.spec.image.clone());
            GroupView { image: next.or_else(|| group_view(g).image), ..group_view(g) }
        })
        .collect();
    membership.fleet.pending = pending.iter().map(pending_view).collect();
    for node in nodes {
        let Some(spelled) = node.spec.provider_id.as_deref() else { continue };
        let Ok(id) = spelled.parse::<ProviderId>() else { continue };
        let learned = match cloud {
            Some(answers) => match answers.get(spelled) {
                Some(Ok(learned)) => Some(learned.clone()),
                Some(Err(_)) | None => None,
            },
            None => named_group(&id).map(|group| Some((group.0, String::new()))),
        };
        let Some(learned) = learned else {
            membership.unclassified.push(node.name().to_owned());
            continue;
        };
        let Some((group_id, image)) = learned else { continue };
        let reported =
            shared::protocol::AgentReport::parse(node.metadata.annotations.as_ref().unwrap_or(&Default::default()))
                .ok()
                .and_then(|a| a.os_image);
        let image = match (cloud, reported) {
            (Some(_), _) => Some(image),
            (None, Some(reported)) => Some(reported),
            (None, None) => {
                if membership.fleet.groups.iter().any(|g| g.group_id == group_id) {
                    membership.image_assumed.push(node.name().to_owned());
                }
                Some(IMAGE_NOT_KNOWN.to_owned())
            }
        };
        membership.members.insert(node.name().to_owned(), member_of(node, group_id, image));
    }
    membership
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, provider_id: Option<&str>, image: Option<&str>) -> SlimNode {
        let mut annotations = json!({});
        if let Some(image) = image {
            annotations["update.edgeless.systems/os-image"] = json!(image);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"providerID": provider_id},
        }))
        .unwrap()
    }

    fn group(name: &str, group_id: &str, node_image: &str, image: &str) -> ScalingGroup {
        serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "ScalingGroup",
            "metadata": {"name": name},
            "spec": {"nodeImage": node_image, "groupId": group_id, "autoscaling": false},
            "status": {"imageReference": image},
        }))
        .unwrap()
    }

    fn version(name: &str, image: &str) -> NodeVersion {
        serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": name}, "spec": {"image": image},
        }))
        .unwrap()
    }

    #[test]
    fn without_the_cloud_the_group_follows_from_the_provider_id_and_the_rest_is_said() {
        let nodes = [
            node("a-0", Some("simulated://a/a-0"), None),
            node("a-1", Some("simulated://a/a-1"), Some("v1")),
            node("other", Some("simulated://b/other"), None),
            node("aws", Some("aws:///eu-central-1a/i-0123456789abcdef0"), None),
            node("bare", None, None),
        ];
        let groups = [group("group-a", "a", "nv", "v1"), group("group-c", "c", "elsewhere", "v0")];
        let nv = version("nv", "v2");
        let m = classify(&nodes, &groups, &[], &[&nv], None);
        assert_eq!(m.members.keys().collect::<Vec<_>>(), ["a-0", "a-1", "other"]);
        assert_eq!(m.members["a-0"].group_id, "a");
        assert_eq!(m.members["a-0"].provider_id, "simulated://a/a-0");
        // The agent's report where there is one; else taken as outdated, and said (only for a known group).
        assert_eq!(m.members["a-1"].image.as_deref(), Some("v1"));
        assert_eq!(m.members["a-0"].image.as_deref(), Some(IMAGE_NOT_KNOWN));
        assert_eq!(m.image_assumed, ["a-0"]);
        // An AWS ID does not name its group: not classified (forecast in place).
        assert_eq!(m.unclassified, ["aws"]);
        // Each group gets the image of the NodeVersion its spec.nodeImage names, else keeps its own.
        let images: Vec<(&str, Option<&str>)> =
            m.fleet.groups.iter().map(|g| (g.group_id.as_str(), g.image.as_deref())).collect();
        assert_eq!(images, [("a", Some("v2")), ("c", Some("v0"))]);
        // Without ScalingGroups no node is a member.
        assert!(classify(&nodes, &[], &[], &[&nv], None).members.is_empty());
    }

    #[test]
    fn with_the_cloud_its_answers_decide_and_a_failed_answer_leaves_the_node_unclassified() {
        let nodes = [
            node("a-0", Some("simulated://a/a-0"), None),
            node("x", Some("simulated://a/x"), None),
            node("aws", Some("aws:///eu-central-1a/i-0123456789abcdef0"), None),
        ];
        let answers: CloudAnswers = [
            ("simulated://a/a-0".to_owned(), Ok(Some(("a".to_owned(), "v1".to_owned())))),
            ("simulated://a/x".to_owned(), Err("throttled".to_owned())),
            ("aws:///eu-central-1a/i-0123456789abcdef0".to_owned(), Ok(None)),
        ]
        .into_iter()
        .collect();
        let m = classify(&nodes, &[group("group-a", "a", "nv", "v1")], &[], &[], Some(&answers));
        assert_eq!(m.members.keys().collect::<Vec<_>>(), ["a-0"]);
        assert_eq!(m.members["a-0"].image.as_deref(), Some("v1"));
        assert_eq!(m.unclassified, ["x"]);
        assert!(m.image_assumed.is_empty());
    }
}
