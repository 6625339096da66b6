//! `group_instances` of the Azure provider against the Azure emulator (issue 28): a scale set's VMs in one list
//! (`VirtualMachineScaleSetVMs_List` with `$expand=instanceView`, every `nextLink`) and its capacity, each VM with
//! the provider ID its Node carries, its computer name, the state `instance_state` gives it and its image; the
//! creations the capacity counts but the list does not show yet as `unlisted`.

use crate::cloud_azure::{Azure, group};

use cloud::{CloudProvider, Creation, Deletion, Error, GroupRole, InstanceState};
use dev::cloud::azure::AzureEmulator;
use k8s_openapi::api::core::v1::Node;
use std::time::Duration;

const V1: &str = "/subscriptions/0d202bbb-4fa7-4af8-8125-58c269a05435/resourceGroups/CONSTELLATION-IMAGES/providers/Microsoft.Compute/galleries/Constellation/images/constellation/versions/1.0.0";

fn vm_lists(emulator: &AzureEmulator) -> usize {
    emulator.calls().iter().filter(|c| c.method == "GET" && c.path.ends_with("/virtualMachines")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_sets_vms_are_listed_in_one_paged_list_with_their_ids_states_images_and_unlisted_creations() {
    // VMs stay Creating and Deleting for the whole test.
    let mut timing = dev::cluster::ClusterConfig::default().timing;
    timing.instance_provision = Duration::from_secs(3600);
    timing.instance_terminate = Duration::from_secs(3600);
    let azure = Azure::start_timed(0, &[("workers", GroupRole::Worker, 3)], timing).await;
    azure.emulator.set_page_size(Some(1));
    let provider = azure.provider();
    let workers = group("workers");

    let before = vm_lists(&azure.emulator);
    let listed = provider.group_instances(&workers).await.expect("the scale set's VMs are listed");
    assert_eq!(vm_lists(&azure.emulator) - before, 3, "three VMs, one a page, every nextLink followed");
    assert_eq!(listed.unlisted, 0, "capacity 3, three VMs listed");
    let store = azure.cluster.store();
    for (n, instance) in listed.instances.iter().enumerate() {
        assert_eq!(instance.provider_id.to_string(), AzureEmulator::provider_id("workers", n as u64).to_string());
        assert_eq!(instance.state, InstanceState::Ready);
        assert_eq!(instance.image.as_deref(), Some(V1));
        let node = store.api::<Node>().get_opt(None, &instance.node_name).ok().flatten().expect("a Node of that name");
        assert_eq!(
            node.spec.and_then(|s| s.provider_id).as_deref(),
            Some(instance.provider_id.to_string().as_str()),
            "listed as its Node spells it"
        );
    }

    // One VM deleting, one being created, one accepted but not listed yet.
    let first = listed.instances[0].provider_id.clone();
    assert_eq!(provider.delete_instance(&workers, &first).await.unwrap(), Deletion::Started);
    let Creation::Pending(_) = provider.create_instance(&workers).await.unwrap() else { panic!("pending") };
    azure.emulator.set_list_lag(Some(Duration::from_secs(3600)));
    let Creation::Pending(_) = provider.create_instance(&workers).await.unwrap() else { panic!("pending") };
    let listed = provider.group_instances(&workers).await.unwrap();
    let states: Vec<(String, InstanceState)> =
        listed.instances.iter().map(|i| (i.provider_id.instance().to_owned(), i.state)).collect();
    let expected = [
        ("0", InstanceState::Terminating),
        ("1", InstanceState::Ready),
        ("2", InstanceState::Ready),
        ("3", InstanceState::Creating),
    ];
    assert_eq!(states, expected.map(|(id, state)| (id.to_owned(), state)));
    assert_eq!(listed.unlisted, 1, "capacity 4, three live VMs listed: VM 4 is accepted but not listed");
    for instance in &listed.instances {
        assert_eq!(
            provider.instance_state(&instance.provider_id).await.unwrap(),
            instance.state,
            "{} listed as instance_state says",
            instance.provider_id
        );
    }
    assert!(!listed.instances[3].node_name.is_empty());
    // Once the list shows it, nothing is unlisted.
    azure.emulator.set_list_lag(None);
    let listed = provider.group_instances(&workers).await.unwrap();
    assert_eq!(listed.instances.len(), 5);
    assert_eq!(listed.unlisted, 0);

    match provider.group_instances(&group("nope")).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound for an unknown scale set, got {other:?}"),
    }
    assert_eq!(azure.emulator.spec_violations(), Vec::<String>::new());
    azure.shutdown().await;
}

/// Issue 28 (batched replacement): several VMs deleted with ONE `VirtualMachineScaleSets_DeleteInstances` (its
/// `instanceIds`, held to the published definition by the emulator) after one list of the scale set's VMs, each VM
/// with its own result; the governed client sends deletes of a scale set that wait for its rate limit together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_vms_are_deleted_in_one_request_each_with_its_own_result() {
    let mut timing = dev::cluster::ClusterConfig::default().timing;
    timing.instance_terminate = Duration::from_secs(3600);
    let azure =
        Azure::start_timed(0, &[("workers", GroupRole::Worker, 4), ("cp", GroupRole::ControlPlane, 1)], timing).await;
    let provider = std::sync::Arc::new(azure.provider());
    let workers = group("workers");
    assert_eq!(provider.batch_limit(), cloud::BatchLimit { create: 1, delete: cloud::azure::DELETE_BATCH });
    let posts =
        || azure.emulator.calls().iter().filter(|c| c.method == "POST" && c.path.ends_with("/workers/delete")).count();
    let vm = |n| AzureEmulator::provider_id("workers", n);
    let ids = [vm(0), vm(1), vm(0), AzureEmulator::provider_id("cp", 0), vm(77)];
    let (lists, gets) = (vm_lists(&azure.emulator), azure.emulator.calls().len());
    let results = provider.delete_instances(&workers, &ids).await.expect("one list and one deletion");
    assert!(
        matches!(
            results.as_slice(),
            [
                Ok(Deletion::Started),
                Ok(Deletion::Started),
                Ok(Deletion::Started),
                Err(Error::Invalid { .. }),
                Ok(Deletion::AlreadyGone)
            ]
        ),
        "{results:?}"
    );
    assert_eq!((posts(), vm_lists(&azure.emulator) - lists), (1, 1));
    assert_eq!(azure.emulator.calls().len() - gets, 3, "a list, the GET of the VM not listed, a deletion");
    for n in [0, 1] {
        assert_eq!(provider.instance_state(&vm(n)).await.unwrap(), InstanceState::Terminating);
    }
    assert_eq!(provider.instance_state(&vm(2)).await.unwrap(), InstanceState::Ready);
    // Deleting already: started, without a second deletion.
    let again = provider.delete_instances(&workers, &[vm(0)]).await.unwrap();
    assert!(matches!(again.as_slice(), [Ok(Deletion::Started)]), "{again:?}");
    assert_eq!(posts(), 1);

    // Through the governed client, two deletes waiting for a rate limit of 1/s: one request.
    let governed = crate::support::governed_one_per_second(provider.clone());
    governed.group_image(&workers).await.unwrap();
    let (vm2, vm3) = (vm(2), vm(3));
    let (two, three) = tokio::join!(governed.delete_instance(&workers, &vm2), governed.delete_instance(&workers, &vm3));
    assert_eq!((two.unwrap(), three.unwrap()), (Deletion::Started, Deletion::Started));
    assert_eq!(posts(), 2, "one deletion for both");
    assert_eq!(provider.instance_state(&vm(3)).await.unwrap(), InstanceState::Terminating);
    // A VM created but not listed yet (ARM's eventual consistency) is deleted, not taken as gone.
    azure.emulator.set_list_lag(Some(Duration::from_secs(3600)));
    let Creation::Pending(_) = provider.create_instance(&workers).await.unwrap() else { panic!("pending") };
    let new = vm(4);
    let results = provider.delete_instances(&workers, std::slice::from_ref(&new)).await.unwrap();
    assert!(matches!(results.as_slice(), [Ok(Deletion::Started)]), "{results:?}");
    assert_eq!(posts(), 3);
    assert_eq!(provider.instance_state(&new).await.unwrap(), InstanceState::Terminating);
    assert_eq!(azure.emulator.spec_violations(), Vec::<String>::new());
    azure.shutdown().await;
}
