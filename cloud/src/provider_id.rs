//! Provider IDs: the `spec.providerID` of a Node, parsed into the parts a cloud API needs.
//!
//! # Guarantees
//! - Parsing never panics: any string either parses or gives a [`ProviderIdError`] naming the part that is wrong.
//! - `id.to_string().parse() == Ok(id)` for every parsed ID (formatting writes the canonical form).
//! - Azure IDs compare and hash case-insensitively on subscription, resource group and scale set (ARM resource
//!   IDs are case-insensitive, and the Azure cloud provider and the ARM API do not agree on their casing); every
//!   other part compares exactly.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// The longest provider ID accepted (the CRDs bound `providerID` to 1024 characters as well).
pub const MAX_PROVIDER_ID_LEN: usize = 1024;

/// Which cloud a provider ID belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cloud {
    /// `aws:///ZONE/INSTANCE-ID`.
    Aws,
    /// `azure:///subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/SS/virtualMachines/N`.
    Azure,
    /// `gce://PROJECT/ZONE/NAME`.
    Gce,
    /// `simulated://GROUP/NAME`: the dev cluster's simulated cloud.
    Simulated,
}

impl Cloud {
    /// The scheme of its provider IDs (`aws`, `azure`, `gce`, `simulated`).
    pub fn scheme(self) -> &'static str {
        match self {
            Cloud::Aws => "aws",
            Cloud::Azure => "azure",
            Cloud::Gce => "gce",
            Cloud::Simulated => "simulated",
        }
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme())
    }
}

/// An EC2 instance as the AWS cloud provider names it: `aws:///us-east-1a/i-0123456789abcdef0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AwsInstance {
    /// The availability zone (`us-east-1a`, also Local Zones such as `us-west-2-lax-1a`).
    pub zone: String,
    /// The instance ID: `i-` and 8 or 17 lowercase hexadecimal digits.
    pub instance_id: String,
}

/// A virtual machine of an Azure VM Scale Set (uniform orchestration) as the Azure cloud provider names it.
#[derive(Debug, Clone, Eq)]
pub struct AzureScaleSetVm {
    /// The subscription ID.
    pub subscription: String,
    /// The resource group.
    pub resource_group: String,
    /// The scale set's name.
    pub scale_set: String,
    /// The VM's instance ID in the scale set (a number).
    pub instance_id: String,
}

impl AzureScaleSetVm {
    /// The scale set's ARM resource ID (`/subscriptions/.../virtualMachineScaleSets/SS`), the group ID of the
    /// instance.
    pub fn scale_set_id(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}",
            self.subscription, self.resource_group, self.scale_set
        )
    }

    fn key(&self) -> (String, String, String, &str) {
        (
            self.subscription.to_ascii_lowercase(),
            self.resource_group.to_ascii_lowercase(),
            self.scale_set.to_ascii_lowercase(),
            &self.instance_id,
        )
    }
}

impl PartialEq for AzureScaleSetVm {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Hash for AzureScaleSetVm {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

/// A Compute Engine instance as the GCP cloud provider names it: `gce://my-project/europe-west3-b/worker-x7k2`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GceInstance {
    /// The project ID (domain-scoped projects are `example.com:project`).
    pub project: String,
    /// The zone.
    pub zone: String,
    /// The instance name (RFC 1035 label, at most 63 characters).
    pub name: String,
}

/// An instance of the dev cluster's simulated cloud: `simulated://workers-a/workers-a-x7k2q`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimulatedInstance {
    /// The scaling group's name.
    pub group: String,
    /// The instance's name (also its Node's name).
    pub name: String,
}

/// A parsed provider ID. `Display` writes the canonical form; `FromStr` parses it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProviderId {
    /// An EC2 instance.
    Aws(AwsInstance),
    /// A VM of an Azure scale set.
    Azure(AzureScaleSetVm),
    /// A Compute Engine instance.
    Gce(GceInstance),
    /// An instance of the simulated cloud.
    Simulated(SimulatedInstance),
}

impl ProviderId {
    /// The cloud the ID belongs to.
    pub fn cloud(&self) -> Cloud {
        match self {
            ProviderId::Aws(_) => Cloud::Aws,
            ProviderId::Azure(_) => Cloud::Azure,
            ProviderId::Gce(_) => Cloud::Gce,
            ProviderId::Simulated(_) => Cloud::Simulated,
        }
    }

    /// The cloud's own name of the instance: the EC2 instance ID, the scale set VM's instance ID, the GCE or
    /// simulated instance name.
    pub fn instance(&self) -> &str {
        match self {
            ProviderId::Aws(id) => &id.instance_id,
            ProviderId::Azure(id) => &id.instance_id,
            ProviderId::Gce(id) => &id.name,
            ProviderId::Simulated(id) => &id.name,
        }
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderId::Aws(id) => write!(f, "aws:///{}/{}", id.zone, id.instance_id),
            ProviderId::Azure(id) => write!(f, "azure://{}/virtualMachines/{}", id.scale_set_id(), id.instance_id),
            ProviderId::Gce(id) => write!(f, "gce://{}/{}/{}", id.project, id.zone, id.name),
            ProviderId::Simulated(id) => write!(f, "simulated://{}/{}", id.group, id.name),
        }
    }
}

/// Why a string is not a provider ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid provider ID {input:?}: {reason}")]
pub struct ProviderIdError {
    /// The string (cut to 100 characters).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

fn error(input: &str, reason: impl Into<String>) -> ProviderIdError {
    ProviderIdError { input: input.chars().take(100).collect(), reason: reason.into() }
}

impl FromStr for ProviderId {
    type Err = ProviderIdError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input.len() > MAX_PROVIDER_ID_LEN {
            return Err(error(input, format!("longer than {MAX_PROVIDER_ID_LEN} bytes")));
        }
        if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(error(input, "white space or control characters"));
        }
        let Some((scheme, rest)) = input.split_once("://") else {
            return Err(error(input, "no scheme (expected aws://, azure://, gce:// or simulated://)"));
        };
        match scheme {
            "aws" => parse_aws(input, rest).map(ProviderId::Aws),
            "azure" => parse_azure(input, rest).map(ProviderId::Azure),
            "gce" => parse_gce(input, rest).map(ProviderId::Gce),
            "simulated" => parse_simulated(input, rest).map(ProviderId::Simulated),
            other => Err(error(input, format!("unknown scheme {other:?} (expected aws, azure, gce or simulated)"))),
        }
    }
}

/// `/ZONE/ID` after `aws://` (the host part is empty: three slashes in all).
fn parse_aws(input: &str, rest: &str) -> Result<AwsInstance, ProviderIdError> {
    let Some(path) = rest.strip_prefix('/') else {
        return Err(error(input, "expected aws:///ZONE/INSTANCE-ID (three slashes)"));
    };
    let [zone, instance_id] = segments::<2>(path).ok_or_else(|| error(input, "expected aws:///ZONE/INSTANCE-ID"))?;
    if !is_label(zone, 64) {
        return Err(error(input, format!("zone {zone:?} is not a lowercase name of letters, digits and '-'")));
    }
    let hex = instance_id.strip_prefix("i-").unwrap_or_default();
    let hex_ok =
        (hex.len() == 8 || hex.len() == 17) && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex_ok {
        return Err(error(input, format!("instance ID {instance_id:?} is not i- and 8 or 17 lowercase hex digits")));
    }
    Ok(AwsInstance { zone: zone.to_owned(), instance_id: instance_id.to_owned() })
}

/// `/subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/SS/virtualMachines/N`
/// after `azure://`; the fixed words in any case, as ARM accepts them.
fn parse_azure(input: &str, rest: &str) -> Result<AzureScaleSetVm, ProviderIdError> {
    const SHAPE: &str = "expected azure:///subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/\
                         virtualMachineScaleSets/SCALE-SET/virtualMachines/INSTANCE";
    let Some(path) = rest.strip_prefix('/') else { return Err(error(input, SHAPE)) };
    let [subs, subscription, groups, resource_group, providers, namespace, sets, scale_set, vms, instance_id] =
        segments::<10>(path).ok_or_else(|| error(input, SHAPE))?;
    let fixed = [
        (subs, "subscriptions"),
        (groups, "resourceGroups"),
        (providers, "providers"),
        (namespace, "Microsoft.Compute"),
        (sets, "virtualMachineScaleSets"),
        (vms, "virtualMachines"),
    ];
    if let Some((found, expected)) = fixed.iter().find(|(found, expected)| !found.eq_ignore_ascii_case(expected)) {
        return Err(error(input, format!("found {found:?} where {expected:?} belongs ({SHAPE})")));
    }
    if !(1..=90).contains(&resource_group.len())
        || !resource_group.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '(' | ')'))
        || resource_group.ends_with('.')
    {
        return Err(error(input, format!("resource group {resource_group:?} is not a valid resource group name")));
    }
    if !(1..=64).contains(&scale_set.len())
        || !scale_set.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(error(input, format!("scale set {scale_set:?} is not a valid scale set name")));
    }
    if instance_id.len() > 10 || !instance_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(error(input, format!("instance ID {instance_id:?} is not a number")));
    }
    Ok(AzureScaleSetVm {
        subscription: subscription.to_owned(),
        resource_group: resource_group.to_owned(),
        scale_set: scale_set.to_owned(),
        instance_id: instance_id.to_owned(),
    })
}

/// `PROJECT/ZONE/NAME` after `gce://`.
fn parse_gce(input: &str, rest: &str) -> Result<GceInstance, ProviderIdError> {
    let [project, zone, name] = segments::<3>(rest).ok_or_else(|| error(input, "expected gce://PROJECT/ZONE/NAME"))?;
    // Domain-scoped projects (`example.com:my-project`) carry their domain before a colon.
    let project_id = project.rsplit_once(':').map_or(project, |(domain, id)| if domain.is_empty() { "" } else { id });
    let project_ok = (6..=30).contains(&project_id.len())
        && project_id.starts_with(|c: char| c.is_ascii_lowercase())
        && is_label(project_id, 30);
    if !project_ok {
        return Err(error(input, format!("project {project:?} is not a project ID")));
    }
    if !is_label(zone, 63) {
        return Err(error(input, format!("zone {zone:?} is not a lowercase name of letters, digits and '-'")));
    }
    if !is_rfc1035(name) {
        return Err(error(input, format!("instance name {name:?} is not an RFC 1035 name of at most 63 characters")));
    }
    Ok(GceInstance { project: project.to_owned(), zone: zone.to_owned(), name: name.to_owned() })
}

/// `GROUP/NAME` after `simulated://`.
fn parse_simulated(input: &str, rest: &str) -> Result<SimulatedInstance, ProviderIdError> {
    let [group, name] = segments::<2>(rest).ok_or_else(|| error(input, "expected simulated://GROUP/NAME"))?;
    if !is_rfc1035(group) {
        return Err(error(input, format!("group {group:?} is not an RFC 1035 name of at most 63 characters")));
    }
    if !is_rfc1035(name) {
        return Err(error(input, format!("instance name {name:?} is not an RFC 1035 name of at most 63 characters")));
    }
    Ok(SimulatedInstance { group: group.to_owned(), name: name.to_owned() })
}

/// Exactly `N` non-empty `/`-separated segments.
fn segments<const N: usize>(path: &str) -> Option<[&str; N]> {
    let parts: Vec<&str> = path.split('/').collect();
    let parts: [&str; N] = parts.try_into().ok()?;
    parts.iter().all(|p| !p.is_empty()).then_some(parts)
}

/// Lowercase letters, digits and inner `-`, 1 to `max` characters.
fn is_label(text: &str, max: usize) -> bool {
    (1..=max).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// An RFC 1035 label: a lowercase letter first, at most 63 characters (also a valid Node name).
pub(crate) fn is_rfc1035(text: &str) -> bool {
    is_label(text, 63) && text.starts_with(|c: char| c.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const AZURE: &str = "azure:///subscriptions/0d202bbb-4fa7-4af8-8125-58c269a05435/resourceGroups/constellation-rg/\
                         providers/Microsoft.Compute/virtualMachineScaleSets/scale-set-worker/virtualMachines/12";

    fn parse(text: &str) -> Result<ProviderId, ProviderIdError> {
        text.parse()
    }

    #[test]
    fn every_clouds_ids_parse_into_their_parts_and_format_back() {
        let cases = [
            (
                "aws:///us-east-1a/i-0123456789abcdef0",
                ProviderId::Aws(AwsInstance { zone: "us-east-1a".into(), instance_id: "i-0123456789abcdef0".into() }),
            ),
            (
                "aws:///us-west-2-lax-1a/i-12345678",
                ProviderId::Aws(AwsInstance { zone: "us-west-2-lax-1a".into(), instance_id: "i-12345678".into() }),
            ),
            (
                AZURE,
                ProviderId::Azure(AzureScaleSetVm {
                    subscription: "0d202bbb-4fa7-4af8-8125-58c269a05435".into(),
                    resource_group: "constellation-rg".into(),
                    scale_set: "scale-set-worker".into(),
                    instance_id: "12".into(),
                }),
            ),
            (
                "gce://my-project-123/europe-west3-b/worker-x7k2",
                ProviderId::Gce(GceInstance {
                    project: "my-project-123".into(),
                    zone: "europe-west3-b".into(),
                    name: "worker-x7k2".into(),
                }),
            ),
            (
                "gce://example.com:my-project/us-central1-a/cp-0",
                ProviderId::Gce(GceInstance {
                    project: "example.com:my-project".into(),
                    zone: "us-central1-a".into(),
                    name: "cp-0".into(),
                }),
            ),
            (
                "simulated://workers-a/workers-a-x7k2q",
                ProviderId::Simulated(SimulatedInstance { group: "workers-a".into(), name: "workers-a-x7k2q".into() }),
            ),
        ];
        for (text, expected) in cases {
            let id = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(id, expected, "{text}");
            assert_eq!(id.to_string(), text);
            assert_eq!(parse(&id.to_string()), Ok(id));
        }
    }

    #[test]
    fn azure_ids_compare_without_regard_to_the_case_of_names_and_keep_it_when_written() {
        let lower = AZURE.to_ascii_lowercase();
        let a = parse(AZURE).unwrap();
        let b = parse(&lower).unwrap();
        assert_eq!(a, b);
        let hash = |id: &ProviderId| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            id.hash(&mut hasher);
            hasher.finish()
        };
        assert_eq!(hash(&a), hash(&b));
        // Written in the canonical casing of the fixed words, with the names as given.
        assert!(b.to_string().contains("/resourceGroups/constellation-rg/providers/Microsoft.Compute/"), "{b}");
        let ProviderId::Azure(vm) = a else { unreachable!() };
        assert_eq!(
            vm.scale_set_id(),
            "/subscriptions/0d202bbb-4fa7-4af8-8125-58c269a05435/resourceGroups/constellation-rg/providers/\
             Microsoft.Compute/virtualMachineScaleSets/scale-set-worker"
        );
        assert_ne!(parse(AZURE), parse(&AZURE.replace("/12", "/13")));
    }

    #[test]
    fn malformed_ids_are_errors_that_say_what_is_wrong() {
        let cases = [
            ("", "no scheme"),
            ("i-0123456789abcdef0", "no scheme"),
            ("aws://us-east-1a/i-0123456789abcdef0", "three slashes"),
            ("aws:///i-0123456789abcdef0", "expected aws:///ZONE/INSTANCE-ID"),
            ("aws:////i-0123456789abcdef0", "expected aws:///ZONE/INSTANCE-ID"),
            ("aws:///us-east-1a/i-0123456789abcdef0/", "expected aws:///ZONE/INSTANCE-ID"),
            ("aws:///us-east-1a/i-0123456789ABCDEF0", "lowercase hex"),
            ("aws:///us-east-1a/i-123", "lowercase hex"),
            ("aws:///us-east-1a/fargate-ip-10-0-0-1", "lowercase hex"),
            ("aws:///US-EAST-1A/i-12345678", "zone"),
            ("azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-1", "expected"),
            (&AZURE.replace("virtualMachineScaleSets", "availabilitySets"), "where \"virtualMachineScaleSets\""),
            (&AZURE.replace("/12", "/abc"), "not a number"),
            (&AZURE.replace("/12", "/"), "expected"),
            (&AZURE.replace("constellation-rg", "rg with space"), "white space"),
            (&AZURE.replace("constellation-rg", "rg."), "resource group"),
            (&AZURE.replace("azure:///", "azure://"), "expected"),
            ("gce://my-project/zone-a", "expected gce://PROJECT/ZONE/NAME"),
            ("gce:///my-project/zone-a/name", "expected gce://PROJECT/ZONE/NAME"),
            ("gce://my-project/zone-a/Name", "RFC 1035"),
            ("gce://my-project/zone-a/1name", "RFC 1035"),
            (&format!("gce://my-project/zone-a/{}", "a".repeat(64)), "RFC 1035"),
            ("gce://proj/zone-a/name", "project"),
            ("gce://:my-project/zone-a/name", "project"),
            ("gce://my-project/Zone/name", "zone"),
            ("simulated://workers-a", "expected simulated://GROUP/NAME"),
            ("simulated://workers_a/n", "group"),
            ("simulated://workers-a/Node-1", "instance name"),
            ("kind://docker/kind/kind-worker", "unknown scheme"),
            ("aws:///us-east-1a/i-12345678\n", "white space"),
            (&format!("gce://my-project/zone/{}", "a".repeat(MAX_PROVIDER_ID_LEN)), "longer than"),
        ];
        for (text, reason) in cases {
            match parse(text) {
                Ok(id) => panic!("{text:?} parsed as {id:?}"),
                Err(e) => assert!(e.to_string().contains(reason), "{text:?}: {e} (expected {reason:?})"),
            }
        }
    }

    #[test]
    fn the_instance_and_cloud_of_an_id() {
        let id = parse("gce://my-project/zone-a/cp-1").unwrap();
        assert_eq!((id.cloud(), id.instance()), (Cloud::Gce, "cp-1"));
        assert_eq!(parse(AZURE).unwrap().instance(), "12");
        assert_eq!(Cloud::Simulated.to_string(), "simulated");
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(text in ".{0,300}") {
            let _ = parse(&text);
        }

        #[test]
        fn arbitrary_paths_under_every_scheme_never_panic_and_round_trip(
            scheme in prop::sample::select(vec!["aws://", "azure://", "gce://", "simulated://"]),
            path in "[a-zA-Z0-9:./_-]{0,200}",
        ) {
            if let Ok(id) = parse(&format!("{scheme}{path}")) {
                prop_assert_eq!(parse(&id.to_string()), Ok(id));
            }
        }
    }
}
