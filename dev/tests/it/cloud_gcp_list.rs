//! `group_instances` of the GCP provider against the GCP emulator (issue 28): a MIG's members from one
//! `listManagedInstances` (every page), each under its name with the provider ID its Node carries
//! (`gce://PROJECT/ZONE/NAME`) and the state `instance_state` gives it; an instance the MIG has not created yet is
//! listed `Creating` (compute v1 `ManagedInstance.name` "always exists even if the instance has not yet been
//! created"); one whose creation failed (`lastAttempt.errors`) is counted in `unlisted`, and `instance_state`
//! surfaces its error.

use crate::cloud_gcp::{PROJECT, ZONE, mig, provider, provider_again, setup};

use cloud::{CloudProvider, Creation, Deletion, Error, InstanceState, ProviderId};
use dev::cloud::gcp::GcpTiming;
use std::time::Duration;

fn listed_calls(emulator: &dev::cloud::gcp::GcpEmulator) -> u64 {
    emulator.calls().get("instanceGroupManagers.listManagedInstances").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migs_instances_are_listed_in_one_paged_list_with_their_ids_states_and_failed_creations_unlisted() {
    let (cluster, emulator) = setup(0, 2).await;
    emulator.set_page_size(Some(1));
    // Creations and deletions stay under way for the first part of the test.
    emulator.set_timing(GcpTiming {
        create: Duration::from_secs(3600),
        terminate: Duration::from_secs(3600),
        ..GcpTiming::default()
    });
    let provider = provider(&emulator, emulator.adc_json()).await;
    let workers = mig("workers");
    let running = emulator.instance_names(ZONE, "workers");
    assert_eq!(running.len(), 2);
    let id = |name: &str| {
        ProviderId::Gce(cloud::GceInstance { project: PROJECT.into(), zone: ZONE.into(), name: name.into() })
    };
    assert_eq!(provider.delete_instance(&workers, &id(&running[0])).await.unwrap(), Deletion::Started);
    let Creation::Created(created) = provider.create_instance(&workers).await.unwrap() else { panic!("named") };

    // A new provider (no memory of the creation): the list alone tells.
    let fresh = crate::cloud_gcp::provider(&emulator, emulator.adc_json()).await;
    let before = listed_calls(&emulator);
    let listed = fresh.group_instances(&workers).await.expect("the MIG's instances are listed");
    assert_eq!(listed_calls(&emulator) - before, 3, "three managed instances, one a page, every page read");
    let mut states: Vec<(String, String, InstanceState)> =
        listed.instances.iter().map(|i| (i.node_name.clone(), i.provider_id.to_string(), i.state)).collect();
    states.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = vec![
        (running[0].clone(), format!("gce://{PROJECT}/{ZONE}/{}", running[0]), InstanceState::Terminating),
        (running[1].clone(), format!("gce://{PROJECT}/{ZONE}/{}", running[1]), InstanceState::Ready),
        (created.node_name.clone(), created.provider_id.to_string(), InstanceState::Creating),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(states, expected);
    assert_eq!(listed.unlisted, 0, "every instance the MIG will create is listed");
    for instance in &listed.instances {
        assert_eq!(instance.image, None, "the list names an instance template, not the image");
        assert_eq!(
            fresh.instance_state(&instance.provider_id).await.unwrap(),
            instance.state,
            "{}",
            instance.node_name
        );
    }

    // A MIG whose creations fail: the instance is not listed but counted, and its own state is the MIG's error.
    emulator.set_timing(GcpTiming { create: Duration::from_millis(300), ..GcpTiming::default() });
    let cp = mig("cp");
    emulator.fail_creations("cp", "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources.");
    let Creation::Created(failing) = provider.create_instance(&cp).await.unwrap() else { panic!("named") };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let listed = fresh.group_instances(&cp).await.unwrap();
        if !listed.instances.iter().any(|i| i.node_name == failing.node_name) {
            break listed;
        }
        assert!(tokio::time::Instant::now() < deadline, "the MIG never reported its failed attempt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed.unlisted, 1, "the failed creation is accepted, not listed");
    assert_eq!(listed.instances.len(), 2, "the MIG's two running instances");
    assert!(listed.instances.iter().all(|i| i.state == InstanceState::Ready));
    assert!(matches!(fresh.instance_state(&failing.provider_id).await, Err(Error::QuotaExceeded { .. })));
    // The provider that asked for it counts it once, not twice.
    assert_eq!(provider.group_instances(&cp).await.unwrap().unlisted, 1);

    match provider.group_instances(&mig("nope")).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound for an unknown MIG, got {other:?}"),
    }
    assert_eq!(emulator.spec_violations(), Vec::<String>::new());
    emulator.shutdown();
    cluster.shutdown().await;
}

/// Issue 28: Compute's lists are eventually consistent with its writes. A creation the MIG accepted but whose list
/// does not show it yet is `Creating`, not gone, even to a provider that did not ask for it (a new leader): the MIG's
/// target size counts it. Its deletion is not concluded `AlreadyGone` (the MIG would create it later, an orphan)
/// but asked again, and reaches the MIG once the list shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_the_migs_list_does_not_show_yet_is_creating_and_not_taken_for_gone_by_a_new_provider() {
    let (cluster, emulator) = setup(0, 2).await;
    emulator.set_timing(GcpTiming { create: Duration::from_secs(3600), ..GcpTiming::default() });
    emulator.set_list_lag(Some(Duration::from_secs(3600)));
    let provider = provider(&emulator, emulator.adc_json()).await;
    let workers = mig("workers");
    let Creation::Created(created) = provider.create_instance(&workers).await.unwrap() else { panic!("named") };
    assert_eq!(emulator.creating_names(ZONE, "workers"), vec![created.node_name.clone()]);

    // The provider that asked remembers it: not in the list, counted as unlisted, Creating.
    let listed = provider.group_instances(&workers).await.unwrap();
    assert!(!listed.instances.iter().any(|i| i.node_name == created.node_name), "the list does not show it yet");
    assert_eq!((listed.instances.len(), listed.unlisted), (2, 1));
    assert_eq!(provider.instance_state(&created.provider_id).await.unwrap(), InstanceState::Creating);

    // A new provider does not remember asking: the MIG's target size (3, two listed) says it may still come.
    let fresh = provider_again(&emulator).await;
    assert_eq!(fresh.instance_state(&created.provider_id).await.unwrap(), InstanceState::Creating);
    match fresh.delete_instance(&workers, &created.provider_id).await {
        Err(Error::Transient { message, .. }) => assert!(message.contains("does not list it"), "{message}"),
        other => panic!("expected a transient error until the list shows the instance, got {other:?}"),
    }
    assert_eq!(emulator.calls().get("instanceGroupManagers.deleteInstances"), None);
    assert_eq!(emulator.creating_names(ZONE, "workers"), vec![created.node_name.clone()], "still to be created");

    // Once the list shows it, its deletion reaches the MIG: taken back, never created.
    emulator.set_list_lag(None);
    assert_eq!(fresh.delete_instance(&workers, &created.provider_id).await.unwrap(), Deletion::Started);
    assert_eq!(emulator.creating_names(ZONE, "workers"), Vec::<String>::new());
    // Gone now: the target size is the list's again, so a missing instance is gone.
    let fresh = provider_again(&emulator).await;
    assert_eq!(fresh.instance_state(&created.provider_id).await.unwrap(), InstanceState::Terminated);
    assert_eq!(fresh.delete_instance(&workers, &created.provider_id).await.unwrap(), Deletion::AlreadyGone);
    assert_eq!(emulator.spec_violations(), Vec::<String>::new());
    emulator.shutdown();
    cluster.shutdown().await;
}

/// Issue 28 (batched replacement): several instances asked for in ONE `createInstances` request (its
/// `instances[]` of per-instance configs, held to the discovery document by the emulator), each named and created
/// by the MIG; the governed client sends creates of a MIG that wait for its rate limit together; a quota failing
/// the request's operation fails the whole batch, with nothing created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_instances_are_created_in_one_create_instances_request() {
    let (cluster, emulator) = setup(0, 1).await;
    let provider = std::sync::Arc::new(provider(&emulator, emulator.adc_json()).await);
    let workers = mig("workers");
    let creates = || emulator.calls().get("instanceGroupManagers.createInstances").copied().unwrap_or(0);
    assert_eq!(provider.batch_limit(), cloud::BatchLimit { create: cloud::gcp::CREATE_BATCH, delete: 1 });
    let results = provider.create_instances(&workers, 3).await.expect("one request for three");
    assert_eq!(creates(), 1);
    let made: Vec<cloud::NewInstance> = results
        .into_iter()
        .map(|r| match r {
            Ok(Creation::Created(instance)) => instance,
            other => panic!("expected a named instance, got {other:?}"),
        })
        .collect();
    let names: std::collections::BTreeSet<&str> = made.iter().map(|i| i.node_name.as_str()).collect();
    assert_eq!(names.len(), 3, "{made:?}");
    for instance in &made {
        crate::cluster_support::eventually(&format!("{} running", instance.node_name), || async {
            provider.instance_state(&instance.provider_id).await.ok() == Some(InstanceState::Ready)
        })
        .await;
    }
    assert_eq!(emulator.instance_names(ZONE, "workers").len(), 4);

    // Through the governed client, two creates waiting for the rate limit: one request.
    let governed = crate::support::governed_one_per_second(provider.clone());
    governed.group_image(&workers).await.unwrap();
    let (one, two) = tokio::join!(governed.create_instance(&workers), governed.create_instance(&workers));
    assert!(matches!((&one, &two), (Ok(Creation::Created(_)), Ok(Creation::Created(_)))), "{one:?} {two:?}");
    assert_eq!(creates(), 2, "one createInstances for both");

    // A quota failing the request's operation: the whole batch fails, nothing is created.
    crate::cluster_support::eventually("the two created", || async {
        emulator.instance_names(ZONE, "workers").len() == 6
    })
    .await;
    let before = emulator.instance_names(ZONE, "workers").len();
    emulator.quota_on_next_create("workers");
    assert!(matches!(provider.create_instances(&workers, 2).await, Err(Error::QuotaExceeded { .. })));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(emulator.instance_names(ZONE, "workers").len(), before);
    assert!(matches!(provider.create_instances(&workers, 0).await, Err(Error::Invalid { .. })));
    assert_eq!(emulator.spec_violations(), Vec::<String>::new());
    cluster.shutdown().await;
}
