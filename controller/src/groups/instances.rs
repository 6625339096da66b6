//! What the cloud said about the cluster's instances (scaling group and creation image): asked once per instance,
//! in the background, and shared by the rollout's replacer and the autoscaler's pause driver.
//!
//! # Guarantees
//! - An instance is asked about at most once while it exists (both answers are fixed for an instance), by one
//!   request at a time however many readers want it; a failed answer is asked again after [`RETRY`].
//! - The group is taken from the provider ID when the ID names it (Azure scale set VMs, the simulated cloud), and
//!   the image from the group's member list where it shows images ([`GroupLists`], shared with the PendingNode
//!   controller's state polls): one list answers every instance of the group, including heirs listed by a state
//!   poll before their Node registered. Otherwise one call (the image) or two (group and image) per instance.
//! - Readers never wait for the cloud: [`Instances::refresh`] returns at once with the nodes not known yet, and
//!   every answer bumps [`Instances::subscribe`] so that they look again.
//! - At most [`CONCURRENCY`] questions are in flight; the provider's own rate limit still applies to each call.

use super::group_lists::GroupLists;
use cloud::{CloudProvider, GroupId, GroupInstance, ProviderId};
use futures::StreamExt;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the cloud said about an instance: its group and image, or `None` when it is in no group (or gone).
pub type Learned = Option<(String, String)>;

/// Questions in flight at once.
pub const CONCURRENCY: usize = 8;
/// How soon an instance whose answer failed is asked again.
pub const RETRY: Duration = Duration::from_secs(10);

/// The nodes [`Instances::refresh`] could not place yet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// Names of the nodes of this cloud whose group and image are not known (being asked, or failed lately).
    pub nodes: BTreeSet<String>,
    /// Whether the last answer about one of them was an error (rather than still coming).
    pub failed: bool,
}

impl Unknown {
    /// Whether every node of this cloud is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// A node as [`Instances::refresh`] needs it.
#[derive(Debug, Clone, Copy)]
pub struct Instance<'a> {
    /// The Node's name.
    pub node: &'a str,
    /// Its `spec.providerID`.
    pub provider_id: &'a str,
}

#[derive(Default)]
struct State {
    /// By provider ID (as the Node spells it).
    known: HashMap<String, Learned>,
    /// Queued or being asked.
    asking: HashSet<String>,
    /// Failed, and when they may be asked again.
    failed: HashMap<String, Instant>,
}

/// The shared answers; cheap to clone.
#[derive(Clone)]
pub struct Instances {
    provider: Arc<dyn CloudProvider>,
    lists: GroupLists,
    state: Arc<Mutex<State>>,
    queue: mpsc::UnboundedSender<ProviderId>,
    answered: Arc<watch::Sender<u64>>,
}

impl Instances {
    /// Starts the background asker, which stops with `shutdown`.
    pub fn start(provider: Arc<dyn CloudProvider>, shutdown: CancellationToken) -> Instances {
        let (queue, questions) = mpsc::unbounded_channel();
        let lists = GroupLists::new(provider.clone());
        let instances =
            Instances { provider, lists, state: Arc::default(), queue, answered: Arc::new(watch::channel(0).0) };
        let asker = instances.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = asker.ask_all(questions) => {}
            }
        });
        instances
    }

    /// The groups' member lists this cache reads (shared with the PendingNode controller).
    pub fn lists(&self) -> &GroupLists {
        &self.lists
    }

    /// Bumped after every answer (or failure).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.answered.subscribe()
    }

    /// What the cloud said about `provider_id`: `None` when not known (yet), `Some(None)` when it is in no group.
    pub fn get(&self, provider_id: &str) -> Option<Learned> {
        self.state.lock().known.get(provider_id).cloned()
    }

    /// Starts asking about the instances of `nodes` (of this cloud) not known, not being asked and not failed
    /// within [`RETRY`]; forgets the answers about instances not among `nodes` (terminated instances: IDs are
    /// not reused, and this keeps the cache the size of the cluster). Returns the nodes not known yet.
    pub fn refresh<'a>(&self, nodes: impl IntoIterator<Item = Instance<'a>>) -> Unknown {
        let now = Instant::now();
        let mut unknown = Unknown::default();
        let mut present = HashSet::new();
        let mut state = self.state.lock();
        for Instance { node, provider_id } in nodes {
            let Ok(id) = provider_id.parse::<ProviderId>() else { continue };
            if id.cloud() != self.provider.cloud() {
                continue;
            }
            present.insert(provider_id);
            if state.known.contains_key(provider_id) {
                continue;
            }
            unknown.nodes.insert(node.to_owned());
            if state.asking.contains(provider_id) {
                continue;
            }
            if let Some(until) = state.failed.get(provider_id) {
                unknown.failed = true;
                if *until > now {
                    continue;
                }
            }
            if self.queue.send(id).is_ok() {
                state.asking.insert(provider_id.to_owned());
            }
        }
        state.known.retain(|id, _| present.contains(id.as_str()));
        state.failed.retain(|id, _| present.contains(id.as_str()));
        unknown
    }

    async fn ask_all(&self, mut questions: mpsc::UnboundedReceiver<ProviderId>) {
        let answers = futures::stream::poll_fn(move |cx| questions.poll_recv(cx))
            .map(|id| async move {
                let answer = ask_listed(&self.lists, self.provider.as_ref(), &id).await;
                (id, answer)
            })
            .buffer_unordered(CONCURRENCY);
        let mut answers = std::pin::pin!(answers);
        while let Some((id, answer)) = answers.next().await {
            let key = id.to_string();
            {
                let mut state = self.state.lock();
                // The Node may spell its ID otherwise than the canonical form (Azure casing): answer under every
                // spelling being asked that parses to the same instance.
                let spellings: Vec<String> = state
                    .asking
                    .iter()
                    .filter(|s| **s == key || s.parse::<ProviderId>().is_ok_and(|p| p == id))
                    .cloned()
                    .collect();
                for spelling in spellings {
                    state.asking.remove(&spelling);
                    match &answer {
                        Ok(learned) => {
                            state.failed.remove(&spelling);
                            state.known.insert(spelling, learned.clone());
                        }
                        Err(_) => {
                            state.failed.insert(spelling, Instant::now() + RETRY);
                        }
                    }
                }
            }
            if let Err(error) = &answer {
                tracing::warn!(instance = %id, %error, "cannot learn the instance's scaling group and image; asking again later");
            }
            self.answered.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// [`ask`], answered from a list of the group that shows `id` with its image where the provider ID names the group
/// and the provider's lists show images (one list of a group answers all its instances).
pub async fn ask_listed(
    lists: &GroupLists,
    provider: &dyn CloudProvider,
    id: &ProviderId,
) -> Result<Learned, cloud::Error> {
    if let Some(group) = named_group(id)
        && !lists.unsupported()
    {
        let listed = |l: &super::group_lists::Listed| l.find(id).is_some_and(|i| i.image.is_some());
        match lists.list(&group, listed).await {
            Ok(listed) => {
                if let Some(GroupInstance { image: Some(image), .. }) = listed.find(id) {
                    return Ok(Some((group.0, image.clone())));
                }
            }
            Err(cloud::Error::Invalid { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    ask(provider, id).await
}

/// Asks the cloud for the group and image of `id`: one call when the provider ID names the group, else two.
/// `Ok(None)` when the cloud knows it in no group or no more.
pub async fn ask(provider: &dyn CloudProvider, id: &ProviderId) -> Result<Learned, cloud::Error> {
    let group = match named_group(id) {
        Some(group) => group,
        None => match provider.instance_group(id).await {
            Ok(group) => group,
            Err(cloud::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(error),
        },
    };
    match provider.instance_image(id).await {
        Ok(image) => Ok(Some((group.0, image))),
        Err(cloud::Error::NotFound { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The group a provider ID names, in the form [`CloudProvider::instance_group`] answers: the scale set of an
/// Azure scale set VM, the group of a simulated instance. AWS and GCE IDs do not name one.
pub fn named_group(id: &ProviderId) -> Option<GroupId> {
    match id {
        ProviderId::Azure(vm) => Some(GroupId(vm.scale_set_id())),
        ProviderId::Simulated(instance) => Some(GroupId(instance.group.clone())),
        ProviderId::Aws(_) | ProviderId::Gce(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use cloud::{Cloud, ClusterTag, Creation, CreationToken, Deletion, GroupInfo, ImageUpdate, InstanceState};

    /// A cloud of instances `aws:///z/i-...` or `simulated://g/...` that counts questions; instances named in
    /// `failing` fail, those in `gone` are unknown.
    #[derive(Default)]
    struct Counting {
        cloud: Option<Cloud>,
        groups: Mutex<u32>,
        images: Mutex<u32>,
        failing: Mutex<HashSet<String>>,
        gone: HashSet<String>,
    }

    impl Counting {
        fn of(cloud: Cloud) -> Arc<Counting> {
            Arc::new(Counting { cloud: Some(cloud), ..Counting::default() })
        }

        async fn answer(&self, instance: &ProviderId) -> cloud::Result<()> {
            tokio::task::yield_now().await;
            if self.gone.contains(instance.instance()) {
                return Err(cloud::Error::NotFound { message: instance.to_string() });
            }
            if self.failing.lock().contains(instance.instance()) {
                return Err(cloud::Error::PermissionDenied { message: "no".into() });
            }
            Ok(())
        }
    }

    fn unused<T>() -> cloud::Result<T> {
        Err(cloud::Error::Invalid { message: "not used by these tests".into() })
    }

    #[async_trait]
    impl CloudProvider for Counting {
        fn cloud(&self) -> Cloud {
            self.cloud.unwrap_or(Cloud::Simulated)
        }
        async fn instance_image(&self, instance: &ProviderId) -> cloud::Result<String> {
            *self.images.lock() += 1;
            self.answer(instance).await.map(|()| format!("image-of-{}", instance.instance()))
        }
        async fn instance_group(&self, instance: &ProviderId) -> cloud::Result<GroupId> {
            *self.groups.lock() += 1;
            self.answer(instance).await.map(|()| GroupId("asg-a".into()))
        }
        async fn create_instance(&self, _: &GroupId) -> cloud::Result<Creation> {
            unused()
        }
        async fn created_instance(&self, _: &GroupId, _: &CreationToken) -> cloud::Result<Option<cloud::NewInstance>> {
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
        fn autoscaler_group_name(&self, _: &GroupId) -> cloud::Result<String> {
            unused()
        }
    }

    fn sim(n: usize) -> Vec<(String, String)> {
        (0..n).map(|i| (format!("node-{i}"), format!("simulated://workers/node-{i}"))).collect()
    }

    fn aws(n: usize) -> Vec<(String, String)> {
        (0..n).map(|i| (format!("node-{i}"), format!("aws:///eu-central-1a/i-{i:08x}"))).collect()
    }

    fn refresh(instances: &Instances, nodes: &[(String, String)]) -> Unknown {
        instances.refresh(nodes.iter().map(|(node, provider_id)| Instance { node, provider_id }))
    }

    /// Refreshes until nothing is being asked, letting the asker run.
    async fn settle(instances: &Instances, nodes: &[(String, String)]) -> Unknown {
        let mut answered = instances.subscribe();
        loop {
            let unknown = refresh(instances, nodes);
            let asking = instances.state.lock().asking.len();
            if asking == 0 {
                return unknown;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), answered.changed()).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_instance_is_asked_once_however_often_and_by_how_many_readers() {
        let provider = Counting::of(Cloud::Aws);
        let instances = Instances::start(provider.clone(), CancellationToken::new());
        let nodes = aws(20);
        let first = refresh(&instances, &nodes);
        assert_eq!(first.nodes.len(), 20, "nothing is known before the cloud answers");
        assert!(!first.failed);
        // A second reader (the pause driver) refreshes the same nodes while the questions are out.
        let reader = instances.clone();
        assert_eq!(refresh(&reader, &nodes).nodes.len(), 20);
        assert!(settle(&instances, &nodes).await.is_empty());
        for _ in 0..5 {
            assert!(refresh(&reader, &nodes).is_empty());
        }
        assert_eq!((*provider.groups.lock(), *provider.images.lock()), (20, 20));
        assert_eq!(
            instances.get("aws:///eu-central-1a/i-00000003"),
            Some(Some(("asg-a".into(), "image-of-i-00000003".into())))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_provider_id_that_names_its_group_costs_one_call() {
        let provider = Counting::of(Cloud::Simulated);
        let instances = Instances::start(provider.clone(), CancellationToken::new());
        let nodes = sim(10);
        assert!(settle(&instances, &nodes).await.is_empty());
        assert_eq!((*provider.groups.lock(), *provider.images.lock()), (0, 10));
        assert_eq!(
            instances.get("simulated://workers/node-7"),
            Some(Some(("workers".into(), "image-of-node-7".into())))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_answer_is_asked_again_only_after_the_retry_pause() {
        let provider = Counting::of(Cloud::Simulated);
        provider.failing.lock().insert("node-1".into());
        let instances = Instances::start(provider.clone(), CancellationToken::new());
        let nodes = sim(3);
        let unknown = settle(&instances, &nodes).await;
        assert_eq!(unknown.nodes, BTreeSet::from(["node-1".to_owned()]));
        assert!(unknown.failed);
        let calls = *provider.images.lock();
        tokio::time::advance(RETRY / 2).await;
        assert!(refresh(&instances, &nodes).failed);
        tokio::task::yield_now().await;
        assert_eq!(*provider.images.lock(), calls, "asked again before the pause ended");
        provider.failing.lock().clear();
        tokio::time::advance(RETRY).await;
        assert!(settle(&instances, &nodes).await.is_empty());
        assert_eq!(*provider.images.lock(), calls + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_the_cloud_does_not_know_is_in_no_group_and_gone_instances_are_forgotten() {
        let provider = Arc::new(Counting {
            cloud: Some(Cloud::Aws),
            gone: HashSet::from(["i-00000002".to_owned()]),
            ..Counting::default()
        });
        let instances = Instances::start(provider.clone(), CancellationToken::new());
        let nodes = aws(3);
        assert!(settle(&instances, &nodes).await.is_empty());
        assert_eq!(instances.get("aws:///eu-central-1a/i-00000002"), Some(None));
        // Nodes of another cloud and IDs that do not parse are not asked about, and not unknown.
        let others = [("gce".to_owned(), "gce://p/z/n".to_owned()), ("bad".to_owned(), "aws:///x".to_owned())];
        assert!(refresh(&instances, &[nodes[0].clone(), others[0].clone(), others[1].clone()]).is_empty());
        assert_eq!(instances.get("aws:///eu-central-1a/i-00000001"), None, "forgotten once its node left");
        assert_eq!(*provider.groups.lock(), 3);
    }
}
