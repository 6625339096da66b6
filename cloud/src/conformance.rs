//! A conformance suite for [`CloudProvider`] implementations: every contract of the trait, checked against a
//! live provider (the simulated cloud, or a real client against its cloud's emulator).
//!
//! ```ignore
//! let report = cloud::conformance::run(|| async { my_fixture().await }).await;
//! report.assert_passed();
//! ```
//!
//! # Assumptions
//! - The fixture's group belongs to a cluster the suite may change: it adds and deletes one instance at a time
//!   and switches the group's image to [`Fixture::other_image`] and back.
//! - State changes (a new instance Ready, a deleted one Terminated, an image update applied) happen within
//!   [`Fixture::deadline`].

use crate::error::{Error, Outcome};
use crate::governed::{CallPolicy, Governed};
use crate::metrics::NoObserver;
use crate::provider::{
    CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupRole, ImageUpdate, InstanceState,
    NewInstance,
};
use crate::provider_id::ProviderId;
use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What the suite runs against.
#[derive(Clone)]
pub struct Fixture {
    /// The provider under test (without [`Governed`]: the suite checks the provider's own answers).
    pub provider: Arc<dyn CloudProvider>,
    /// A group of the cluster, tagged with `cluster`.
    pub group: GroupId,
    /// Its role.
    pub role: GroupRole,
    /// The cluster's tag.
    pub cluster: ClusterTag,
    /// A well-formed ID of a group of this cloud that does not exist.
    pub unknown_group: GroupId,
    /// A well-formed provider ID of this cloud that names no instance.
    pub unknown_instance: ProviderId,
    /// A provider ID of another cloud.
    pub foreign_instance: ProviderId,
    /// An image the group may be switched to (and back), different from its current one.
    pub other_image: String,
    /// Fault injection, for the checks of error types; those checks are skipped without it.
    pub faults: Option<Arc<dyn Faults>>,
    /// How often the suite polls for a state change.
    pub poll: Duration,
    /// How long a state change may take.
    pub deadline: Duration,
}

/// Fault injection of an emulated cloud.
#[async_trait]
pub trait Faults: Send + Sync {
    /// The next call to the API is throttled with this `Retry-After`.
    async fn throttle_next_call(&self, retry_after: Duration);
    /// The next creation of an instance in `group` fails with a quota error.
    async fn quota_on_next_create(&self, group: &GroupId);
    /// Removes every injected fault.
    async fn clear(&self);
}

/// The result of one check.
#[derive(Debug, Clone)]
pub struct Check {
    /// The check's name (a sentence in snake case).
    pub name: &'static str,
    /// `Ok`, or what failed; `None` when skipped.
    pub result: Option<Result<(), String>>,
}

/// The results of every check.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// In the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    /// The checks that failed.
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| matches!(c.result, Some(Err(_)))).collect()
    }

    /// The names of the checks that passed.
    pub fn passed(&self) -> Vec<&'static str> {
        self.checks.iter().filter(|c| matches!(c.result, Some(Ok(())))).map(|c| c.name).collect()
    }

    /// Panics with every failure, for tests.
    #[track_caller]
    pub fn assert_passed(&self) {
        let failures: Vec<String> = self
            .failures()
            .iter()
            .map(|c| format!("{}: {}", c.name, c.result.clone().and_then(Result::err).unwrap_or_default()))
            .collect();
        assert!(failures.is_empty(), "cloud provider conformance failed:\n  {}", failures.join("\n  "));
    }
}

type CheckResult = Result<(), String>;

/// Runs every check, each on a fresh fixture from `factory`; checks that need [`Faults`] are skipped without
/// them.
pub async fn run<F, Fut>(factory: F) -> Report
where
    F: Fn() -> Fut,
    Fut: Future<Output = Fixture>,
{
    let mut report = Report::default();
    macro_rules! check {
        ($name:ident) => {{
            let fixture = factory().await;
            let result = $name(&fixture).await;
            if let Some(faults) = &fixture.faults {
                faults.clear().await;
            }
            report.checks.push(Check { name: stringify!($name), result: Some(result) });
        }};
        ($name:ident, faults) => {{
            let fixture = factory().await;
            let result = match &fixture.faults {
                Some(faults) => {
                    let result = $name(&fixture, faults.as_ref()).await;
                    faults.clear().await;
                    Some(result)
                }
                None => None,
            };
            report.checks.push(Check { name: stringify!($name), result });
        }};
    }
    check!(lists_the_clusters_groups_with_their_role_and_no_others);
    check!(autoscaler_group_names_are_derived_from_the_group);
    check!(unknown_groups_are_not_found);
    check!(unknown_instances_are_terminated_not_found_and_already_gone);
    check!(another_clouds_ids_are_invalid_requests);
    check!(unknown_creation_tokens_are_invalid);
    check!(the_group_image_is_set_idempotently_and_empty_images_are_refused);
    check!(an_instance_is_created_from_the_group_image_becomes_ready_and_is_deleted_once);
    check!(the_groups_members_are_listed_with_a_new_instance_ready);
    check!(throttling_is_typed_with_its_retry_after, faults);
    check!(quota_failures_are_typed_and_not_retried, faults);
    check!(a_governed_provider_rides_out_throttling, faults);
    report
}

fn expect(condition: bool, what: impl FnOnce() -> String) -> CheckResult {
    if condition { Ok(()) } else { Err(what()) }
}

fn expect_outcome<T: std::fmt::Debug>(what: &str, result: crate::Result<T>, outcome: Outcome) -> CheckResult {
    match result {
        Err(error) if error.outcome() == outcome => Ok(()),
        other => Err(format!("{what}: expected a {outcome} error, got {other:?}")),
    }
}

fn call<T>(what: &str, result: crate::Result<T>) -> Result<T, String> {
    result.map_err(|e| format!("{what}: {e}"))
}

/// Polls `probe` every `fixture.poll` until it gives `Some`, for at most `fixture.deadline`.
async fn poll<T, Fut>(fixture: &Fixture, what: &str, mut probe: impl FnMut() -> Fut) -> Result<T, String>
where
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if started.elapsed() > fixture.deadline {
            return Err(format!("{what}: not within {:?}", fixture.deadline));
        }
        tokio::time::sleep(fixture.poll).await;
    }
}

async fn lists_the_clusters_groups_with_their_role_and_no_others(f: &Fixture) -> CheckResult {
    let groups = call("list_groups", f.provider.list_groups(&f.cluster).await)?;
    let Some(group) = groups.iter().find(|g| g.id == f.group) else {
        return Err(format!("list_groups of {:?} does not list {}: {groups:?}", f.cluster, f.group));
    };
    expect(group.role == f.role, || format!("{} is listed as {:?}, not {:?}", f.group, group.role, f.role))?;
    expect(group.min <= group.max, || format!("{} has min {} above max {}", f.group, group.min, group.max))?;
    expect(!group.name.is_empty(), || format!("{} is listed without a name", f.group))?;
    let again = call("list_groups", f.provider.list_groups(&f.cluster).await)?;
    let ids = |list: &[crate::GroupInfo]| list.iter().map(|g| g.id.clone()).collect::<Vec<_>>();
    expect(ids(&groups) == ids(&again), || format!("two lists differ in order: {groups:?} / {again:?}"))?;
    let other = ClusterTag { key: f.cluster.key.clone(), value: format!("{}-another-cluster", f.cluster.value) };
    let foreign = call("list_groups", f.provider.list_groups(&other).await)?;
    expect(foreign.iter().all(|g| g.id != f.group), || format!("{} is listed for another cluster", f.group))
}

async fn autoscaler_group_names_are_derived_from_the_group(f: &Fixture) -> CheckResult {
    let name = call("autoscaler_group_name", f.provider.autoscaler_group_name(&f.group))?;
    expect(!name.is_empty(), || "the autoscaler group name is empty".to_owned())
}

async fn unknown_groups_are_not_found(f: &Fixture) -> CheckResult {
    let group = &f.unknown_group;
    expect_outcome("group_image of an unknown group", f.provider.group_image(group).await, Outcome::NotFound)?;
    expect_outcome(
        "set_group_image of an unknown group",
        f.provider.set_group_image(group, &f.other_image).await,
        Outcome::NotFound,
    )?;
    expect_outcome("create_instance in an unknown group", f.provider.create_instance(group).await, Outcome::NotFound)
}

async fn unknown_instances_are_terminated_not_found_and_already_gone(f: &Fixture) -> CheckResult {
    let id = &f.unknown_instance;
    let state = call("instance_state of an unknown instance", f.provider.instance_state(id).await)?;
    expect(state == InstanceState::Terminated, || format!("an unknown instance is {state}, not Terminated"))?;
    expect_outcome("instance_image of an unknown instance", f.provider.instance_image(id).await, Outcome::NotFound)?;
    expect_outcome("instance_group of an unknown instance", f.provider.instance_group(id).await, Outcome::NotFound)?;
    let deletion = call("delete_instance of an unknown instance", f.provider.delete_instance(&f.group, id).await)?;
    expect(deletion == Deletion::AlreadyGone, || format!("deleting an unknown instance: {deletion:?}"))
}

async fn another_clouds_ids_are_invalid_requests(f: &Fixture) -> CheckResult {
    let id = &f.foreign_instance;
    expect(id.cloud() != f.provider.cloud(), || format!("the fixture's foreign instance {id} is of this cloud"))?;
    expect_outcome("instance_state of another cloud's ID", f.provider.instance_state(id).await, Outcome::Invalid)?;
    expect_outcome("instance_image of another cloud's ID", f.provider.instance_image(id).await, Outcome::Invalid)?;
    expect_outcome(
        "delete_instance of another cloud's ID",
        f.provider.delete_instance(&f.group, id).await,
        Outcome::Invalid,
    )
}

async fn unknown_creation_tokens_are_invalid(f: &Fixture) -> CheckResult {
    let token = CreationToken("conformance-no-such-token".to_owned());
    expect_outcome(
        "created_instance of a made-up token",
        f.provider.created_instance(&f.group, &token).await,
        Outcome::Invalid,
    )
}

/// Sets the group's image and waits until it is in effect.
async fn switch_image(f: &Fixture, image: &str) -> CheckResult {
    poll(f, &format!("setting the image of {} to {image}", f.group), || async {
        let update = call("set_group_image", f.provider.set_group_image(&f.group, image).await)?;
        let current = call("group_image", f.provider.group_image(&f.group).await)?;
        match update {
            ImageUpdate::Applied if current == image => Ok(Some(())),
            ImageUpdate::Applied => {
                Err(format!("set_group_image said Applied but group_image is {current:?}, not {image:?}"))
            }
            ImageUpdate::InProgress => Ok(None),
        }
    })
    .await
}

async fn the_group_image_is_set_idempotently_and_empty_images_are_refused(f: &Fixture) -> CheckResult {
    let original = call("group_image", f.provider.group_image(&f.group).await)?;
    expect(original != f.other_image, || format!("the fixture's other image is the group's image {original:?}"))?;
    switch_image(f, &f.other_image).await?;
    let again = call("set_group_image (again)", f.provider.set_group_image(&f.group, &f.other_image).await)?;
    expect(again == ImageUpdate::Applied, || format!("setting the image the group has: {again:?}, not Applied"))?;
    expect_outcome(
        "set_group_image with an empty image",
        f.provider.set_group_image(&f.group, "").await,
        Outcome::Invalid,
    )?;
    switch_image(f, &original).await
}

async fn create(f: &Fixture) -> Result<NewInstance, String> {
    match call("create_instance", f.provider.create_instance(&f.group).await)? {
        Creation::Created(instance) => Ok(instance),
        Creation::Pending(token) => {
            poll(f, "the pending creation to name its instance", || async {
                call("created_instance", f.provider.created_instance(&f.group, &token).await)
            })
            .await
        }
    }
}

/// Polls the instance's state until it is `target`; every state seen must be in `allowed`.
async fn wait_state(f: &Fixture, id: &ProviderId, target: InstanceState, allowed: &[InstanceState]) -> CheckResult {
    poll(f, &format!("{id} to be {target}"), || async {
        let state = call("instance_state", f.provider.instance_state(id).await)?;
        if state == target {
            return Ok(Some(()));
        }
        expect(allowed.contains(&state), || format!("{id} is {state} on its way to {target}"))?;
        Ok(None)
    })
    .await
}

async fn an_instance_is_created_from_the_group_image_becomes_ready_and_is_deleted_once(f: &Fixture) -> CheckResult {
    use InstanceState::{Creating, Ready, Terminated, Terminating};
    let original = call("group_image", f.provider.group_image(&f.group).await)?;
    switch_image(f, &f.other_image).await?;
    let result = async {
        let instance = create(f).await?;
        let id = &instance.provider_id;
        expect(id.cloud() == f.provider.cloud(), || format!("the new instance {id} is not of this cloud"))?;
        expect(id.to_string().parse::<ProviderId>().as_ref() == Ok(id), || format!("{id} does not round-trip"))?;
        expect(is_dns_subdomain(&instance.node_name), || {
            format!("node name {:?} is not a DNS name", instance.node_name)
        })?;
        wait_state(f, id, Ready, &[Creating]).await?;
        let group = call("instance_group", f.provider.instance_group(id).await)?;
        expect(group == f.group, || format!("{id} belongs to {group}, not {}", f.group))?;
        let image = call("instance_image", f.provider.instance_image(id).await)?;
        expect(image == f.other_image, || format!("{id} runs {image:?}, not the group's {:?}", f.other_image))?;
        let deletion = call("delete_instance", f.provider.delete_instance(&f.group, id).await)?;
        expect(deletion == Deletion::Started, || format!("deleting {id}: {deletion:?}, not Started"))?;
        wait_state(f, id, Terminated, &[Ready, Terminating]).await?;
        let again = call("delete_instance (again)", f.provider.delete_instance(&f.group, id).await)?;
        expect(again == Deletion::AlreadyGone, || format!("deleting {id} again: {again:?}, not AlreadyGone"))
    }
    .await;
    let restored = switch_image(f, &original).await;
    result.and(restored)
}

/// `group_instances`: an unknown group is `NotFound`; every listed instance has an ID of this cloud that
/// round-trips and a DNS name; a new instance that `instance_state` says is Ready is listed Ready (until a list
/// shows it, it must be counted in `unlisted`, never silently missing).
async fn the_groups_members_are_listed_with_a_new_instance_ready(f: &Fixture) -> CheckResult {
    use InstanceState::{Creating, Ready, Terminated, Terminating};
    expect_outcome(
        "group_instances of an unknown group",
        f.provider.group_instances(&f.unknown_group).await,
        Outcome::NotFound,
    )?;
    let instance = create(f).await?;
    let id = &instance.provider_id;
    let listed = async {
        wait_state(f, id, Ready, &[Creating]).await?;
        poll(f, &format!("group_instances to list {id} Ready"), || async {
            let members = call("group_instances", f.provider.group_instances(&f.group).await)?;
            for member in &members.instances {
                let listed = &member.provider_id;
                expect(listed.cloud() == f.provider.cloud(), || format!("{listed} is not of this cloud"))?;
                expect(listed.to_string().parse::<ProviderId>().as_ref() == Ok(listed), || {
                    format!("{listed} does not round-trip")
                })?;
                expect(is_dns_subdomain(&member.node_name), || {
                    format!("{listed} is listed with node name {:?}, not a DNS name", member.node_name)
                })?;
            }
            match members.instances.iter().find(|m| &m.provider_id == id) {
                Some(member) if member.state == Ready => Ok(Some(())),
                Some(member) => {
                    expect(member.state == Creating, || format!("{id} is Ready but listed {}", member.state))?;
                    Ok(None)
                }
                None => {
                    expect(members.unlisted > 0, || format!("{id} is neither listed nor counted as unlisted"))?;
                    Ok(None)
                }
            }
        })
        .await
    }
    .await;
    let deleted = async {
        call("delete_instance", f.provider.delete_instance(&f.group, id).await)?;
        wait_state(f, id, Terminated, &[Creating, Ready, Terminating]).await
    }
    .await;
    listed.and(deleted)
}

async fn throttling_is_typed_with_its_retry_after(f: &Fixture, faults: &dyn Faults) -> CheckResult {
    faults.throttle_next_call(Duration::from_secs(2)).await;
    match f.provider.group_image(&f.group).await {
        Err(error @ Error::Throttled { retry_after: Some(after), .. }) => {
            expect(after == Duration::from_secs(2), || format!("the retry-after of {error} is not 2 s"))?;
            expect(error.is_retryable() && error.was_refused(), || format!("{error} is not retryable"))
        }
        other => Err(format!("a throttled call: expected Throttled with a retry-after, got {other:?}")),
    }
}

async fn quota_failures_are_typed_and_not_retried(f: &Fixture, faults: &dyn Faults) -> CheckResult {
    faults.quota_on_next_create(&f.group).await;
    let governed = Governed::new(f.provider.clone(), CallPolicy::default(), Arc::new(NoObserver));
    match governed.create_instance(&f.group).await {
        Err(error @ Error::QuotaExceeded { .. }) => expect(!error.is_retryable(), || format!("{error} is retryable")),
        Ok(creation) => {
            // Clean up what the provider created against the fault.
            if let Creation::Created(instance) = &creation {
                let _ = f.provider.delete_instance(&f.group, &instance.provider_id).await;
            }
            Err(format!("a create against a quota fault succeeded: {creation:?}"))
        }
        Err(error) => Err(format!("a create against a quota fault: expected QuotaExceeded, got {error}")),
    }
}

async fn a_governed_provider_rides_out_throttling(f: &Fixture, faults: &dyn Faults) -> CheckResult {
    faults.throttle_next_call(Duration::from_millis(200)).await;
    let governed = Governed::new(f.provider.clone(), CallPolicy::default(), Arc::new(NoObserver));
    call("group_image through Governed after throttling", governed.group_image(&f.group).await).map(drop)
}

/// A DNS-1123 subdomain, as Node names are.
fn is_dns_subdomain(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_must_be_dns_subdomains() {
        assert!(is_dns_subdomain("workers-a-x7k2q"));
        assert!(is_dns_subdomain("ip-10-0-0-1.ec2.internal"));
        for bad in ["", "Worker", "-a", "a-", "a..b", "a_b"] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_report_lists_failures_and_skips() {
        let report = Report {
            checks: vec![
                Check { name: "a", result: Some(Ok(())) },
                Check { name: "b", result: Some(Err("broken".into())) },
                Check { name: "c", result: None },
            ],
        };
        assert_eq!(report.passed(), vec!["a"]);
        assert_eq!(report.failures().len(), 1);
        let panic = std::panic::catch_unwind(|| report.assert_passed()).unwrap_err();
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("b: broken"), "{message}");
    }
}
