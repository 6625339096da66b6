//! A group's members in one `DescribeAutoScalingGroups` request ([`crate::CloudProvider::group_instances`]).
//!
//! The group's `Instances` (`InstanceId`, `AvailabilityZone`, `LifecycleState`, `HealthStatus`, `LaunchTemplate`)
//! and its `DesiredCapacity`, as the Auto Scaling API reference defines them (`Instance`, `AutoScalingGroup`;
//! lifecycle states as `LifecycleState` enumerates them: Pending, Pending:Wait, Pending:Proceed, Quarantined,
//! InService, Terminating, Terminating:Wait, Terminating:Proceed, Terminated, Detaching, Detached, EnteringStandby,
//! Standby, Warmed:*). One group's instances are all in the one `AutoScalingGroup` of the answer (the API pages
//! groups, not a group's instances).
//!
//! The EC2 state that [`crate::CloudProvider::instance_state`] maps is not in this list; the lifecycle state maps
//! to the same trait state where the lifecycle implies it (Pending: EC2 `pending` or just launched, Creating;
//! InService: healthy and running, Ready; Terminating: Terminating; Terminated). An instance whose state the list
//! cannot tell (unhealthy, which is also how Auto Scaling sees a stopped instance; an unknown lifecycle state) is
//! not listed but counted in `unlisted`, so that the caller asks its own state.

use crate::error::Result;
use crate::provider::{GroupInstance, GroupMembers, InstanceState};
use aws_sdk_autoscaling::types::AutoScalingGroup;

/// What the list says about an instance of a given lifecycle and health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Listed {
    /// Listed with this state; `counted` when it counts toward the desired capacity (launching or in service).
    State { state: InstanceState, counted: bool },
    /// Not a member any more (detached): left out.
    Gone,
    /// The list cannot tell its state: left out, counted in `unlisted` (the caller asks `instance_state`).
    Unknown { counted: bool },
}

/// The lifecycle state and health status of an instance of a group, mapped.
pub(super) fn listed(lifecycle: &str, health: &str) -> Listed {
    let unhealthy = health.eq_ignore_ascii_case("Unhealthy");
    match lifecycle {
        "Pending" | "Pending:Wait" | "Pending:Proceed" | "Quarantined" if unhealthy => {
            Listed::Unknown { counted: true }
        }
        "Pending" | "Pending:Wait" | "Pending:Proceed" | "Quarantined" => {
            Listed::State { state: InstanceState::Creating, counted: true }
        }
        "InService" if unhealthy => Listed::Unknown { counted: true },
        "InService" => Listed::State { state: InstanceState::Ready, counted: true },
        // Out of service but running: a replacement is launched (or the desired capacity was lowered).
        "EnteringStandby" | "Standby" | "Detaching" if unhealthy => Listed::Unknown { counted: false },
        "EnteringStandby" | "Standby" | "Detaching" => Listed::State { state: InstanceState::Ready, counted: false },
        "Terminating" | "Terminating:Wait" | "Terminating:Proceed" => {
            Listed::State { state: InstanceState::Terminating, counted: false }
        }
        "Terminated" => Listed::State { state: InstanceState::Terminated, counted: false },
        "Detached" => Listed::Gone,
        // Warm pool states (not in a group's `Instances`) and states added later.
        _ => Listed::Unknown { counted: false },
    }
}

/// The members of `group` as its `DescribeAutoScalingGroups` entry lists them.
pub(super) fn members(group: &AutoScalingGroup) -> Result<GroupMembers> {
    let mut instances = Vec::new();
    let mut counted = 0u64;
    let mut unknown = 0u64;
    for instance in group.instances() {
        let (Some(id), Some(zone)) = (instance.instance_id(), instance.availability_zone()) else {
            unknown += 1;
            continue;
        };
        let lifecycle = instance.lifecycle_state().map(|s| s.as_str()).unwrap_or_default();
        let health = instance.health_status().unwrap_or_default();
        match listed(lifecycle, health) {
            Listed::State { state, counted: c } => {
                counted += u64::from(c);
                instances.push(GroupInstance {
                    provider_id: super::provider_id(zone, id)?,
                    // Constellation names AWS nodes by instance ID; the PendingNode controller corrects the name
                    // from the Node with the provider ID (issue 28 defect 5).
                    node_name: id.to_owned(),
                    state,
                    // The list names a launch template version, not the AMI.
                    image: None,
                });
            }
            Listed::Gone => {}
            Listed::Unknown { counted: c } => {
                counted += u64::from(c);
                unknown += 1;
            }
        }
    }
    let desired = u64::try_from(group.desired_capacity().unwrap_or_default()).unwrap_or_default();
    let unlisted = desired.saturating_sub(counted) + unknown;
    Ok(GroupMembers { instances, unlisted: u32::try_from(unlisted).unwrap_or(u32::MAX) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_autoscaling::types::{Instance, LifecycleState};

    fn instance(id: &str, lifecycle: LifecycleState, health: &str) -> Instance {
        Instance::builder()
            .instance_id(id)
            .availability_zone("us-east-1a")
            .lifecycle_state(lifecycle)
            .health_status(health)
            .protected_from_scale_in(false)
            .build()
    }

    #[test]
    fn every_lifecycle_state_maps_to_a_state_or_is_left_to_the_instances_own_state() {
        use InstanceState::*;
        let cases = [
            ("Pending", Listed::State { state: Creating, counted: true }),
            ("Pending:Wait", Listed::State { state: Creating, counted: true }),
            ("Pending:Proceed", Listed::State { state: Creating, counted: true }),
            ("Quarantined", Listed::State { state: Creating, counted: true }),
            ("InService", Listed::State { state: Ready, counted: true }),
            ("EnteringStandby", Listed::State { state: Ready, counted: false }),
            ("Standby", Listed::State { state: Ready, counted: false }),
            ("Detaching", Listed::State { state: Ready, counted: false }),
            ("Terminating", Listed::State { state: Terminating, counted: false }),
            ("Terminating:Wait", Listed::State { state: Terminating, counted: false }),
            ("Terminating:Proceed", Listed::State { state: Terminating, counted: false }),
            ("Terminated", Listed::State { state: Terminated, counted: false }),
            ("Detached", Listed::Gone),
            ("Warmed:Running", Listed::Unknown { counted: false }),
        ];
        for (lifecycle, expected) in cases {
            assert_eq!(listed(lifecycle, "Healthy"), expected, "{lifecycle}");
        }
        assert_eq!(listed("InService", "Unhealthy"), Listed::Unknown { counted: true });
        assert_eq!(listed("Terminating", "Unhealthy"), Listed::State { state: Terminating, counted: false });
    }

    #[test]
    fn unlisted_is_the_desired_capacity_above_the_instances_launching_or_in_service_never_negative() {
        let group = |desired: i32, instances: Vec<Instance>| {
            AutoScalingGroup::builder().desired_capacity(desired).set_instances(Some(instances)).build()
        };
        let listed = group(
            3,
            vec![
                instance("i-00000001", LifecycleState::InService, "Healthy"),
                instance("i-00000002", LifecycleState::Terminating, "Healthy"),
                instance("i-00000003", LifecycleState::Pending, "Healthy"),
            ],
        );
        let all = members(&listed).unwrap();
        assert_eq!(all.instances.len(), 3);
        assert_eq!(all.unlisted, 1);
        assert_eq!(all.instances[0].provider_id.to_string(), "aws:///us-east-1a/i-00000001");
        assert_eq!(all.instances[0].node_name, "i-00000001");
        let over = group(1, vec![instance("i-00000001", LifecycleState::InService, "Healthy"); 2]);
        assert_eq!(members(&over).unwrap().unlisted, 0);
        let unhealthy = group(1, vec![instance("i-00000001", LifecycleState::InService, "Unhealthy")]);
        let left = members(&unhealthy).unwrap();
        assert!(left.instances.is_empty());
        assert_eq!(left.unlisted, 1);
    }
}
