//! `group_instances` of the AWS provider against moto (issue 28): a group's members from one
//! `DescribeAutoScalingGroups` (its `Instances` and `DesiredCapacity`), each with the provider ID its Node carries
//! (`aws:///ZONE/ID`), the instance ID as its name, its state from the lifecycle state; `unlisted` the desired
//! capacity above the instances launching or in service. Skipped with a message when moto is missing outside CI.

use crate::aws_support::*;

use cloud::aws::AwsProvider;
use cloud::aws::sdk::aws_sdk_autoscaling;
use cloud::{CloudProvider, Error, GroupId, InstanceState, ProviderId};

#[tokio::test(flavor = "current_thread")]
async fn a_groups_instances_are_listed_in_one_describe_with_their_ids_states_and_unlisted_creations() {
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    create_group(&setup, "list-workers", "cluster-a", "worker", 3, 6).await;
    let proxy = FaultProxy::start(&moto.url).await;
    let aws = AwsProvider::new(&sdk_config(&proxy.url).await);
    let group = GroupId::from("list-workers");

    let listed = aws.group_instances(&group).await.expect("the group's instances are listed");
    assert_eq!(
        proxy.calls().into_iter().collect::<Vec<_>>(),
        vec!["autoscaling:DescribeAutoScalingGroups".to_owned()],
        "one request"
    );
    assert_eq!(listed.instances.len(), 3);
    assert_eq!(listed.unlisted, 0, "desired 3, three in service");
    let mut ids = Vec::new();
    for instance in &listed.instances {
        let ProviderId::Aws(aws_id) = &instance.provider_id else { panic!("an AWS provider ID") };
        assert_eq!(instance.provider_id.to_string(), format!("aws:///{ZONE}/{}", aws_id.instance_id));
        assert_eq!(instance.node_name, aws_id.instance_id, "Constellation names AWS nodes by instance ID");
        assert_eq!(instance.state, InstanceState::Ready);
        assert_eq!(aws.instance_state(&instance.provider_id).await.unwrap(), instance.state);
        assert_eq!(instance.image, None, "the list names a launch template, not the AMI");
        ids.push(aws_id.instance_id.clone());
    }

    // An instance the group launched that its list does not show yet: the desired capacity counts it.
    proxy.hide_instances(&ids[2..]);
    let listed = aws.group_instances(&group).await.unwrap();
    let names: Vec<&str> = listed.instances.iter().map(|i| i.node_name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert!(!names.contains(&ids[2].as_str()));
    assert_eq!(listed.unlisted, 1, "desired 3, two listed in service: one launch accepted and not listed yet");
    proxy.hide_instances(&[]);

    // One instance put on standby without lowering the desired capacity (Auto Scaling, and moto, launch a
    // replacement): listed Ready. One unhealthy (as Auto Scaling sees a stopped instance): the list cannot tell its
    // state, so it is left out and counted, for the caller to ask instance_state.
    let autoscaling = aws_sdk_autoscaling::Client::new(&setup);
    autoscaling
        .enter_standby()
        .auto_scaling_group_name("list-workers")
        .instance_ids(&ids[0])
        .should_decrement_desired_capacity(false)
        .send()
        .await
        .expect("moto puts the instance on standby");
    autoscaling
        .set_instance_health()
        .instance_id(&ids[1])
        .health_status("Unhealthy")
        .send()
        .await
        .expect("moto marks the instance unhealthy");
    let listed = aws.group_instances(&group).await.unwrap();
    let names: Vec<&str> = listed.instances.iter().map(|i| i.node_name.as_str()).collect();
    assert_eq!(names.len(), 3, "the standby one, the in-service one and the replacement: {names:?}");
    assert!(names.contains(&ids[0].as_str()) && names.contains(&ids[2].as_str()) && !names.contains(&ids[1].as_str()));
    assert!(listed.instances.iter().all(|i| i.state == InstanceState::Ready));
    assert_eq!(listed.unlisted, 1, "desired 3 met by 3 in service, plus the unhealthy one left out");

    match aws.group_instances(&GroupId::from("no-such-group")).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound for an unknown group, got {other:?}"),
    }
    assert!(matches!(aws.group_instances(&GroupId::from("a/b")).await, Err(Error::Invalid { .. })));
}
