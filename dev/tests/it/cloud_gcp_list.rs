//! `group_instances` of the GCP provider against the GCP emulator (issue 28): a MIG's members from one
//! `listManagedInstances` (every page), each under its name with the provider ID its Node carries
//! (`gce://PROJECT/ZONE/NAME`) and the state `instance_state` gives it; an instance the MIG has not created yet is
//! listed `Creating` (compute v1 `ManagedInstance.name` "always exists even if the instance has not yet been
//! created"); one whose creation failed (`lastAttempt.errors`) is counted in `unlisted`, and `instance_state`
//! surfaces its error.

use crate::cloud_gcp::{PROJECT, ZONE, mig, provider, setup};

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
