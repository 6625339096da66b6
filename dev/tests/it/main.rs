//! The dev cluster's integration tests.
//!
//! One test binary for the crate (issue 31): each file of this directory is one module, as each was its own
//! binary before, so the crate's tests link once. Tests of one process share its globals: see each module.

#[cfg(feature = "aws")]
mod aws_support;
mod bad_input;
mod budget_order;
mod canary_waves;
mod checkpoints;
mod cloud;
#[cfg(feature = "aws")]
mod cloud_aws;
#[cfg(feature = "aws")]
mod cloud_aws_list;
#[cfg(feature = "azure")]
mod cloud_azure;
#[cfg(feature = "azure")]
mod cloud_azure_list;
#[cfg(feature = "azure")]
mod cloud_azure_spec;
#[cfg(feature = "gcp")]
mod cloud_gcp;
#[cfg(feature = "gcp")]
mod cloud_gcp_list;
#[cfg(feature = "gcp")]
mod cloud_gcp_spec;
mod cluster_role_aggregation;
mod cluster_support;
mod controller_events;
mod demo;
mod disruption;
mod disruption_math;
mod do_not_disrupt;
mod drain;
mod e2e_agent;
mod e2e_crashes;
mod e2e_failures;
mod e2e_kubeadm;
mod e2e_nodeop;
mod e2e_replacement;
mod e2e_replacement_unrecorded;
mod e2e_rollout;
mod example_nodeversion;
mod fail_closed;
mod garbage_collector;
mod health_checks;
mod held_back;
mod hosts;
mod install_manifests;
mod jobs;
mod kubectl;
mod kubelet;
mod leader_election;
mod leader_fencing;
mod node_pools;
mod operator_identities;
mod plan_replacement;
mod prefer_updated;
mod retarget;
mod rollback;
mod scaling_groups;
mod scheduler;
mod settle;
mod settle_midwait;
mod smoke_rollout;
mod support;
mod uninstall;
mod window_finish;
mod workloads;
mod zones;
