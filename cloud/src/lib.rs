//! The cloud-provider seam of node replacement: the [`CloudProvider`] trait, provider IDs, typed errors, a
//! rate-limited and retrying wrapper ([`Governed`]) with metrics hooks, the client of the dev cluster's simulated
//! cloud, and (feature `conformance`) the conformance suite every provider must pass.
//!
//! No cloud SDK is linked here; the AWS, Azure and GCP clients implement [`CloudProvider`] behind their own
//! features.

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "azure")]
pub mod azure;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
#[cfg(feature = "gcp")]
pub mod gcp;
mod governed;
pub mod metrics;
mod provider;
mod provider_id;
pub mod simulated;

pub use error::{BoxError, Error, Outcome, Result, Retry};
pub use governed::{CallPolicy, Governed};
pub use provider::{
    BatchLimit, CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupInfo, GroupInstance,
    GroupMembers, GroupRole, ImageUpdate, InstanceState, NewInstance, Operation,
};
pub use provider_id::{
    AwsInstance, AzureScaleSetVm, Cloud, GceInstance, MAX_PROVIDER_ID_LEN, ProviderId, ProviderIdError,
    SimulatedInstance,
};
