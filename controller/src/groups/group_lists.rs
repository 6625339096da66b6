//! The members of each scaling group as one list request shows them ([`CloudProvider::group_instances`]), shared
//! by everything that asks the cloud about instances: the PendingNode controller's state polls and the group and
//! image of the cluster's instances ([`super::instances`]). One list answers every instance of a group, so a
//! replacement costs a list per group per poll instead of a request per instance and poll.
//!
//! # Guarantees
//! - One request per group at a time: readers that want a list of the same group while one is being read wait
//!   for it and take it when it is recent enough for them, instead of asking again.
//! - A reader says how recent its answer must be (`since`): a state poll that follows a change takes only a list
//!   started after it; facts fixed for an instance (its image) take any list that shows the instance.
//! - A provider that cannot list ([`cloud::Error::Invalid`] from the trait's default) is remembered, and readers
//!   fall back to their per-instance calls without asking again.

use cloud::{CloudProvider, GroupId, GroupInstance, GroupMembers, InstanceState, ProviderId};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

/// A group's list and when its request started.
#[derive(Debug, Clone)]
pub struct Listed {
    /// When the request that read it started.
    pub at: Instant,
    /// What it showed.
    pub members: Arc<GroupMembers>,
}

impl Listed {
    /// The listed instance `id` (provider IDs compared as parsed: Azure's case-insensitively).
    pub fn find(&self, id: &ProviderId) -> Option<&GroupInstance> {
        self.members.instances.iter().find(|i| i.provider_id == *id)
    }
}

/// The shared lists (one per group the cluster's instances are in: bounded by the groups); cheap to clone.
#[derive(Clone)]
pub struct GroupLists {
    provider: Arc<dyn CloudProvider>,
    lists: Arc<Mutex<HashMap<GroupId, Listed>>>,
    /// One lock per group: the request in flight.
    flights: Arc<Mutex<HashMap<GroupId, Arc<tokio::sync::Mutex<()>>>>>,
    /// Set once the provider answered that it cannot list groups.
    unsupported: Arc<std::sync::atomic::AtomicBool>,
}

impl GroupLists {
    /// Lists through `provider`.
    pub fn new(provider: Arc<dyn CloudProvider>) -> GroupLists {
        GroupLists {
            provider,
            lists: Arc::default(),
            flights: Arc::default(),
            unsupported: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Whether the provider cannot list a group's members (readers use their per-instance calls).
    pub fn unsupported(&self) -> bool {
        self.unsupported.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last list of `group` that `wanted` accepts, without a request.
    pub fn cached(&self, group: &GroupId, wanted: impl Fn(&Listed) -> bool) -> Option<Listed> {
        self.lists.lock().get(group).filter(|l| wanted(l)).cloned()
    }

    /// A list of `group` that `wanted` accepts: the last one read if it does, else a new one (one request per
    /// group at a time; a reader that waited for another's request takes its answer when it accepts it).
    ///
    /// # Errors
    /// The provider's; [`cloud::Error::Invalid`] when it cannot list (remembered: [`GroupLists::unsupported`]).
    pub async fn list(&self, group: &GroupId, wanted: impl Fn(&Listed) -> bool) -> Result<Listed, cloud::Error> {
        if let Some(listed) = self.cached(group, &wanted) {
            return Ok(listed);
        }
        let flight = self.flights.lock().entry(group.clone()).or_default().clone();
        let _one_at_a_time = flight.lock().await;
        if let Some(listed) = self.cached(group, &wanted) {
            return Ok(listed);
        }
        let at = Instant::now();
        match self.provider.group_instances(group).await {
            Ok(members) => {
                let listed = Listed { at, members: Arc::new(members) };
                self.lists.lock().insert(group.clone(), listed.clone());
                Ok(listed)
            }
            Err(error) => {
                if matches!(error, cloud::Error::Invalid { .. }) {
                    self.unsupported.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Err(error)
            }
        }
    }

    /// The state of `id` in `group` from a list started at or after `since`, `None` when the provider cannot
    /// list. An instance the list does not show is [`InstanceState::Terminated`] only when the group lists every
    /// creation it accepted (`unlisted == 0`); otherwise `None` (ask the instance).
    pub async fn state(
        &self,
        group: &GroupId,
        id: &ProviderId,
        since: Instant,
    ) -> Result<Option<InstanceState>, cloud::Error> {
        if self.unsupported() {
            return Ok(None);
        }
        match self.list(group, |l| l.at >= since).await {
            Ok(listed) => Ok(match listed.find(id) {
                Some(instance) => Some(instance.state),
                None if listed.members.unlisted == 0 => Some(InstanceState::Terminated),
                None => None,
            }),
            Err(cloud::Error::Invalid { .. }) if self.unsupported() => Ok(None),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use cloud::{Cloud, ClusterTag, Creation, CreationToken, Deletion, GroupInfo, ImageUpdate, NewInstance};
    use std::time::Duration;

    /// A group `g` of the simulated cloud with instances `a` (Ready) and `b` (Creating), whose lists take 50 ms and
    /// are counted.
    #[derive(Default)]
    struct Lister {
        lists: Mutex<u32>,
        unlisted: u32,
        unsupported: bool,
    }

    fn id(name: &str) -> ProviderId {
        format!("simulated://g/{name}").parse().unwrap()
    }

    fn unused<T>() -> cloud::Result<T> {
        Err(cloud::Error::Permanent { message: "not used by these tests".into(), source: None })
    }

    #[async_trait]
    impl CloudProvider for Lister {
        fn cloud(&self) -> Cloud {
            Cloud::Simulated
        }
        async fn instance_image(&self, _: &ProviderId) -> cloud::Result<String> {
            unused()
        }
        async fn instance_group(&self, _: &ProviderId) -> cloud::Result<GroupId> {
            unused()
        }
        async fn create_instance(&self, _: &GroupId) -> cloud::Result<Creation> {
            unused()
        }
        async fn created_instance(&self, _: &GroupId, _: &CreationToken) -> cloud::Result<Option<NewInstance>> {
            unused()
        }
        async fn delete_instance(&self, _: &GroupId, _: &ProviderId) -> cloud::Result<Deletion> {
            unused()
        }
        async fn instance_state(&self, _: &ProviderId) -> cloud::Result<InstanceState> {
            unused()
        }
        async fn group_image(&self, _: &GroupId) -> cloud::Result<String> {
            unused()
        }
        async fn set_group_image(&self, _: &GroupId, _: &str) -> cloud::Result<ImageUpdate> {
            unused()
        }
        async fn list_groups(&self, _: &ClusterTag) -> cloud::Result<Vec<GroupInfo>> {
            unused()
        }
        async fn group_instances(&self, group: &GroupId) -> cloud::Result<GroupMembers> {
            if self.unsupported {
                return Err(cloud::Error::Invalid { message: "cannot".into() });
            }
            *self.lists.lock() += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let instance = |name: &str, state| GroupInstance {
                provider_id: id(name),
                node_name: name.into(),
                state,
                image: Some(format!("{group}-image")),
            };
            Ok(GroupMembers {
                instances: vec![instance("a", InstanceState::Ready), instance("b", InstanceState::Creating)],
                unlisted: self.unlisted,
            })
        }
        fn autoscaler_group_name(&self, group: &GroupId) -> cloud::Result<String> {
            Ok(group.to_string())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn readers_of_one_group_share_one_request_and_a_later_change_asks_again() {
        let provider = Arc::new(Lister::default());
        let lists = GroupLists::new(provider.clone());
        let group = GroupId("g".into());
        let since = Instant::now();
        // Ten state polls at once: one request.
        let polls = (0..10).map(|i| {
            let (lists, group) = (lists.clone(), group.clone());
            async move { lists.state(&group, &id(if i % 2 == 0 { "a" } else { "b" }), since).await.unwrap() }
        });
        let states = futures::future::join_all(polls).await;
        assert_eq!(*provider.lists.lock(), 1);
        assert_eq!(states[0], Some(InstanceState::Ready));
        assert_eq!(states[1], Some(InstanceState::Creating));
        // Not listed, and every creation listed: gone.
        assert_eq!(lists.state(&group, &id("c"), since).await.unwrap(), Some(InstanceState::Terminated));
        assert_eq!(*provider.lists.lock(), 1);
        // A poll after a change takes only a list started since.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(lists.state(&group, &id("a"), Instant::now()).await.unwrap(), Some(InstanceState::Ready));
        assert_eq!(*provider.lists.lock(), 2);
        // A fixed fact takes any list that shows the instance.
        let listed = lists.list(&group, |l| l.find(&id("b")).is_some()).await.unwrap();
        assert_eq!(listed.find(&id("b")).and_then(|i| i.image.clone()).as_deref(), Some("g-image"));
        assert_eq!(*provider.lists.lock(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_missing_while_creations_are_unlisted_is_not_taken_as_gone() {
        let provider = Arc::new(Lister { unlisted: 1, ..Lister::default() });
        let lists = GroupLists::new(provider.clone());
        let group = GroupId("g".into());
        assert_eq!(lists.state(&group, &id("c"), Instant::now()).await.unwrap(), None);
        assert_eq!(lists.state(&group, &id("a"), Instant::now()).await.unwrap(), Some(InstanceState::Ready));
    }

    #[tokio::test(start_paused = true)]
    async fn a_provider_that_cannot_list_is_asked_once() {
        let provider = Arc::new(Lister { unsupported: true, ..Lister::default() });
        let lists = GroupLists::new(provider.clone());
        let group = GroupId("g".into());
        assert_eq!(lists.state(&group, &id("a"), Instant::now()).await.unwrap(), None);
        assert!(lists.unsupported());
        assert_eq!(lists.state(&group, &id("a"), Instant::now()).await.unwrap(), None);
    }
}
