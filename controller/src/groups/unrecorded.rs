//! An instance request whose answer was lost — the controller stopped, or the cloud's answer failed, between the
//! donor's `instance-requested` mark and the record of its joining PendingNode — resolved from one list of the
//! group's members (issue 28 defect 7): the unknown instance is the request's, or the list proves none was made.
//!
//! # Guarantees
//! - An instance that may be the request's is never taken as "none made": any live instance of the list that no
//!   PendingNode, no creation of this process and no Node older than the request names is adopted instead.
//! - "None made" only when the list shows every creation the group accepted (`unlisted == 0`), and only once a
//!   create sent for the request can no longer land (`in_flight_until`, from the request's mark, which survives
//!   the controller: a stopped controller's request, or one whose answer was a timeout, may still be carried out
//!   after the list was read). Until then the request is [`Resolution::InFlight`].
//! - An instance the list shows with another image than the group's is never the request's (the request is made
//!   only once the group's image is the target; an outdated instance is someone else's), as for a node adopted by
//!   its registration.
//! - Pure: the replacer reads the list and writes the result.

use cloud::{GroupInstance, GroupMembers, InstanceState, ProviderId};
use jiff::Timestamp;
use std::collections::{BTreeSet, HashMap};

/// What the cluster says about a provider ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A PendingNode, or an instance this process created and is recording, names it.
    Recorded,
    /// A Node has it, created at this time (`None`: named only by an heir as its donor's, a retired donor's
    /// instance until it is released).
    Node(Option<Timestamp>),
}

/// What the group's list says about an unrecorded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// `instance` is the request's (the first unknown live instance by node name); `others` were unknown too (not
    /// adopted: one request makes one instance).
    Adopt { instance: GroupInstance, others: Vec<GroupInstance> },
    /// The group lists every creation it accepted and none unknown: the request made no instance.
    NoneMade,
    /// Nothing unknown is listed, but the group accepted this many creations it does not list yet: ask again.
    Unlisted(u32),
    /// Nothing unknown is listed, but a create sent for the request may still make an instance until `until`:
    /// ask again, and request a new instance only after that.
    InFlight { until: Timestamp },
}

/// An unrecorded request, as its donor's mark tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// When it was made, truncated to the second (as `creationTimestamp` is).
    pub since: Timestamp,
    /// When a create sent for it can no longer make an instance: its mark plus the longest call of the cloud
    /// client (`CloudOptions::create_in_flight`).
    pub in_flight_until: Timestamp,
}

/// Resolves `request` from `members` (read at `now` or later); `named` maps the provider IDs the cluster knows,
/// `claimed` the node names adopted already (never twice), `image` is the group's image (an instance listed with
/// another one is not the request's; one listed without an image is judged by the rest).
pub fn resolve(
    members: GroupMembers,
    named: &HashMap<ProviderId, Named>,
    request: Request,
    now: Timestamp,
    claimed: &BTreeSet<String>,
    image: &str,
) -> Resolution {
    let since = request.since;
    let mut unknown: Vec<GroupInstance> = members
        .instances
        .into_iter()
        .filter(|i| !matches!(i.state, InstanceState::Terminating | InstanceState::Terminated))
        .filter(|i| i.image.as_deref().is_none_or(|runs| runs == image))
        .filter(|i| !claimed.contains(&i.node_name))
        .filter(|i| match named.get(&i.provider_id) {
            None => true,
            Some(Named::Recorded) => false,
            // A node registered since the request is the request's instance (it may not have a group answer yet).
            Some(Named::Node(created)) => created.is_some_and(|t| t >= since),
        })
        .collect();
    unknown.sort_by(|a, b| a.node_name.cmp(&b.node_name));
    if !unknown.is_empty() {
        let instance = unknown.remove(0);
        return Resolution::Adopt { instance, others: unknown };
    }
    match members.unlisted {
        0 if now < request.in_flight_until => Resolution::InFlight { until: request.in_flight_until },
        0 => Resolution::NoneMade,
        n => Resolution::Unlisted(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "v2";

    /// [`resolve`] once a create sent for the request can no longer land.
    fn settled(
        members: GroupMembers,
        named: &HashMap<ProviderId, Named>,
        since: Timestamp,
        claimed: &BTreeSet<String>,
        image: &str,
    ) -> Resolution {
        resolve(members, named, Request { since, in_flight_until: since }, since, claimed, image)
    }

    fn instance(name: &str, state: InstanceState) -> GroupInstance {
        GroupInstance {
            provider_id: format!("simulated://g/{name}").parse().unwrap(),
            node_name: name.to_owned(),
            state,
            image: None,
        }
    }

    fn id(name: &str) -> ProviderId {
        format!("simulated://g/{name}").parse().unwrap()
    }

    #[test]
    fn the_unknown_live_instance_is_adopted_and_a_list_without_one_proves_none_made() {
        let since: Timestamp = "2026-11-29T08:00:00Z".parse().unwrap();
        let before: Timestamp = "2026-11-29T07:00:00Z".parse().unwrap();
        let named = HashMap::from([
            (id("old"), Named::Node(Some(before))),
            (id("heir"), Named::Recorded),
            (id("retired"), Named::Node(None)),
            (id("registered"), Named::Node(Some(since))),
        ]);
        let members = |extra: Vec<GroupInstance>, unlisted| {
            let mut instances = vec![
                instance("old", InstanceState::Ready),
                instance("heir", InstanceState::Creating),
                instance("retired", InstanceState::Ready),
                instance("gone", InstanceState::Terminated),
                instance("going", InstanceState::Terminating),
            ];
            instances.extend(extra);
            GroupMembers { instances, unlisted }
        };
        let none = BTreeSet::new();
        assert_eq!(settled(members(vec![], 0), &named, since, &none, IMAGE), Resolution::NoneMade);
        assert_eq!(settled(members(vec![], 1), &named, since, &none, IMAGE), Resolution::Unlisted(1));
        // An instance no one names, in any live state, is the request's, listed or not listed besides.
        for state in [InstanceState::Creating, InstanceState::Ready, InstanceState::Failed] {
            let new = instance("new", state);
            assert_eq!(
                settled(members(vec![new.clone()], 1), &named, since, &none, IMAGE),
                Resolution::Adopt { instance: new, others: vec![] }
            );
        }
        // A node that registered since the request (its group not known yet) is the request's too.
        let registered = instance("registered", InstanceState::Ready);
        let two = members(vec![instance("zz", InstanceState::Creating), registered.clone()], 0);
        assert_eq!(
            settled(two, &named, since, &none, IMAGE),
            Resolution::Adopt { instance: registered, others: vec![instance("zz", InstanceState::Creating)] }
        );
        // Never adopted twice.
        let claimed = BTreeSet::from(["new".to_owned()]);
        assert_eq!(
            settled(members(vec![instance("new", InstanceState::Ready)], 0), &named, since, &claimed, IMAGE),
            Resolution::NoneMade
        );
    }

    #[test]
    fn an_instance_listed_with_another_image_than_the_groups_is_not_the_requests() {
        let since: Timestamp = "2026-11-29T08:00:00Z".parse().unwrap();
        let with = |name: &str, image: Option<&str>| GroupInstance {
            image: image.map(str::to_owned),
            ..instance(name, InstanceState::Ready)
        };
        // Registered in the second of the request, but of the old image (an outdated node): not adopted.
        let named = HashMap::from([(id("outdated"), Named::Node(Some(since)))]);
        let members = |instances| GroupMembers { instances, unlisted: 0 };
        let none = BTreeSet::new();
        assert_eq!(
            settled(members(vec![with("outdated", Some("v1"))]), &named, since, &none, IMAGE),
            Resolution::NoneMade
        );
        assert_eq!(
            settled(members(vec![with("outdated", Some("v1")), with("new", Some(IMAGE))]), &named, since, &none, IMAGE),
            Resolution::Adopt { instance: with("new", Some(IMAGE)), others: vec![] }
        );
        // A list that shows no images (AWS, GCP) judges by the rest.
        assert_eq!(
            settled(members(vec![with("new", None)]), &named, since, &none, IMAGE),
            Resolution::Adopt { instance: with("new", None), others: vec![] }
        );
    }

    #[test]
    fn azure_ids_listed_in_another_case_are_the_nodes() {
        let node: ProviderId = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/1".parse().unwrap();
        let listed: ProviderId = "azure:///subscriptions/s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/1".parse().unwrap();
        let named = HashMap::from([(node, Named::Node(None))]);
        let members = GroupMembers {
            instances: vec![GroupInstance {
                provider_id: listed,
                node_name: "ss000001".into(),
                state: InstanceState::Ready,
                image: None,
            }],
            unlisted: 0,
        };
        assert_eq!(settled(members, &named, Timestamp::UNIX_EPOCH, &BTreeSet::new(), IMAGE), Resolution::NoneMade);
    }

    /// Issue 28: a list that shows no instance of the request proves none was made only once a create sent for it
    /// can no longer land (a stopped controller's retries, a request whose answer timed out); until then the
    /// request is in flight, and an instance listed meanwhile is still adopted.
    #[test]
    fn none_made_only_once_a_create_sent_for_the_request_can_no_longer_land() {
        let since: Timestamp = "2026-11-29T08:00:00Z".parse().unwrap();
        let until = since + jiff::SignedDuration::from_secs(210);
        let request = Request { since, in_flight_until: until };
        let members = |instances| GroupMembers { instances, unlisted: 0 };
        let (named, none) = (HashMap::new(), BTreeSet::new());
        for now in [since, since + jiff::SignedDuration::from_secs(209)] {
            assert_eq!(
                resolve(members(vec![]), &named, request, now, &none, IMAGE),
                Resolution::InFlight { until },
                "{now}"
            );
        }
        assert_eq!(resolve(members(vec![]), &named, request, until, &none, IMAGE), Resolution::NoneMade);
        // Creations accepted but not listed are waited for as before; an instance that landed is adopted at once.
        let unlisted = GroupMembers { instances: vec![], unlisted: 1 };
        assert_eq!(resolve(unlisted, &named, request, since, &none, IMAGE), Resolution::Unlisted(1));
        let landed = instance("landed", InstanceState::Creating);
        assert_eq!(
            resolve(members(vec![landed.clone()]), &named, request, since, &none, IMAGE),
            Resolution::Adopt { instance: landed, others: vec![] }
        );
    }
}
