//! The names the GCP provider reads and writes: MIG paths, image and template URLs, operation scopes.

use crate::error::{Error, Result};
use crate::provider::GroupId;
use crate::provider_id::{GceInstance, ProviderId};

/// The URL prefixes Compute Engine writes in front of resource paths (`selfLink`, `sourceImage`, ...).
const URL_PREFIXES: [&str; 2] =
    ["https://www.googleapis.com/compute/v1/", "https://compute.googleapis.com/compute/v1/"];

/// The longest name of a Compute Engine resource (RFC 1035).
const MAX_NAME: usize = 63;

/// The suffix of the instance templates the operator creates: `-uo-` and 8 hexadecimal digits of the image's hash.
pub(crate) const TEMPLATE_MARK: &str = "-uo-";

/// A zonal managed instance group: `projects/PROJECT/zones/ZONE/instanceGroupManagers/NAME`, a ScalingGroup's
/// `groupId` as Constellation writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigPath {
    /// The project ID.
    pub project: String,
    /// The zone.
    pub zone: String,
    /// The MIG's name.
    pub name: String,
}

impl MigPath {
    /// Parses a group ID; a full URL (`https://www.googleapis.com/compute/v1/projects/...`) is accepted too.
    pub fn parse(group: &GroupId) -> Result<MigPath> {
        let path = strip_url(group.as_str());
        match path.split('/').collect::<Vec<_>>().as_slice() {
            ["projects", project, "zones", zone, "instanceGroupManagers", name]
                if !project.is_empty() && is_name(zone) && is_name(name) =>
            {
                Ok(MigPath { project: (*project).to_owned(), zone: (*zone).to_owned(), name: (*name).to_owned() })
            }
            ["projects", _, "regions", ..] => {
                Err(Error::invalid(format!("{group}: regional managed instance groups are not supported")))
            }
            _ => Err(Error::invalid(format!(
                "{group:?} is not a zonal managed instance group (projects/PROJECT/zones/ZONE/instanceGroupManagers/NAME)"
            ))),
        }
    }

    /// The group ID in its canonical form.
    pub fn group_id(&self) -> GroupId {
        GroupId(format!("projects/{}/zones/{}/instanceGroupManagers/{}", self.project, self.zone, self.name))
    }

    /// The cluster-autoscaler's name of the group, as Constellation writes it: the URL of its instance group.
    pub fn autoscaler_name(&self) -> String {
        format!(
            "https://www.googleapis.com/compute/v1/projects/{}/zones/{}/instanceGroups/{}",
            self.project, self.zone, self.name
        )
    }

    /// Whether `instance` is in this MIG's project and zone.
    pub fn holds_zone_of(&self, instance: &GceInstance) -> bool {
        instance.project == self.project && instance.zone == self.zone
    }
}

/// The GCE instance of a provider ID; another cloud's ID is `Invalid`.
pub fn gce(id: &ProviderId) -> Result<&GceInstance> {
    match id {
        ProviderId::Gce(instance) => Ok(instance),
        other => Err(Error::invalid(format!("{other} is not a GCE instance (gce://PROJECT/ZONE/NAME)"))),
    }
}

/// `path` without a Compute Engine URL prefix.
pub fn strip_url(path: &str) -> &str {
    URL_PREFIXES.iter().find_map(|prefix| path.strip_prefix(prefix)).unwrap_or(path)
}

/// The last segment of a resource URL or path.
pub fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// An image as the provider reports and accepts it: `projects/PROJECT/global/images/NAME` (a URL is shortened to
/// that). Anything else is `Invalid`.
pub fn normalize_image(image: &str) -> Result<String> {
    let path = strip_url(image.trim());
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["projects", project, "global", "images", name] if !project.is_empty() && is_name(name) => Ok(path.to_owned()),
        _ => Err(Error::invalid(format!("{image:?} is not an image (projects/PROJECT/global/images/NAME)"))),
    }
}

/// The MIG of an instance from its `created-by` metadata (`projects/NUMBER/zones/ZONE/instanceGroupManagers/NAME`;
/// Compute writes the project number, so the project comes from the instance's provider ID).
pub fn mig_of_created_by(instance: &GceInstance, created_by: &str) -> Option<MigPath> {
    match strip_url(created_by).split('/').collect::<Vec<_>>().as_slice() {
        ["projects", _, "zones", zone, "instanceGroupManagers", name] => {
            Some(MigPath { project: instance.project.clone(), zone: (*zone).to_owned(), name: (*name).to_owned() })
        }
        _ => None,
    }
}

/// The name of the template the operator makes from `template` for `image`: the template's name without an
/// earlier mark, then [`TEMPLATE_MARK`] and 8 hexadecimal digits of the image's hash (FNV-1a), at most 63
/// characters. The same inputs give the same name, so an interrupted change resumes with the same template.
pub fn template_for_image(template: &str, image: &str) -> String {
    let base = template_base(template);
    let suffix = format!("{TEMPLATE_MARK}{:08x}", fnv1a(image) as u32);
    let keep = base.len().min(MAX_NAME - suffix.len());
    format!("{}{suffix}", base[..keep].trim_end_matches('-'))
}

/// `template` without the operator's mark, the prefix of every template the operator makes from it.
pub fn template_base(template: &str) -> &str {
    match template.rfind(TEMPLATE_MARK) {
        Some(at) if is_marked(template) => &template[..at],
        _ => template,
    }
}

/// Whether `template` is a name the operator made ([`template_for_image`]).
pub fn is_marked(template: &str) -> bool {
    template.rfind(TEMPLATE_MARK).is_some_and(|at| {
        let digits = &template[at + TEMPLATE_MARK.len()..];
        digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// 64-bit FNV-1a: a stable hash (std's hashers are not stable across releases).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// An RFC 1035 label, as zone and resource names are.
fn is_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_paths_parse_from_paths_and_urls_and_refuse_others() {
        let mig =
            MigPath::parse(&GroupId::from("projects/my-project/zones/europe-west3-b/instanceGroupManagers/workers"))
                .unwrap();
        assert_eq!(
            (mig.project.as_str(), mig.zone.as_str(), mig.name.as_str()),
            ("my-project", "europe-west3-b", "workers")
        );
        let url = GroupId::from(
            "https://www.googleapis.com/compute/v1/projects/my-project/zones/europe-west3-b/instanceGroupManagers/workers",
        );
        assert_eq!(MigPath::parse(&url).unwrap(), mig);
        assert_eq!(mig.group_id().as_str(), "projects/my-project/zones/europe-west3-b/instanceGroupManagers/workers");
        assert_eq!(
            mig.autoscaler_name(),
            "https://www.googleapis.com/compute/v1/projects/my-project/zones/europe-west3-b/instanceGroups/workers"
        );
        for bad in [
            "workers",
            "",
            "projects//zones/z/instanceGroupManagers/w",
            "projects/p/zones/Z/instanceGroupManagers/w",
            "projects/p/zones/z/instanceGroups/w",
            "projects/p/zones/z/instanceGroupManagers/w/extra",
            "projects/p/regions/r/instanceGroupManagers/w",
        ] {
            assert!(matches!(MigPath::parse(&GroupId::from(bad)), Err(Error::Invalid { .. })), "{bad:?}");
        }
    }

    #[test]
    fn images_are_shortened_to_their_path_and_malformed_ones_refused() {
        assert_eq!(
            normalize_image("https://www.googleapis.com/compute/v1/projects/p/global/images/img-1").unwrap(),
            "projects/p/global/images/img-1"
        );
        assert_eq!(normalize_image("projects/p/global/images/img-1").unwrap(), "projects/p/global/images/img-1");
        for bad in
            ["", "img-1", "projects/p/global/images/", "projects/p/global/images/Img", "projects/p/zones/z/disks/d"]
        {
            assert!(matches!(normalize_image(bad), Err(Error::Invalid { .. })), "{bad:?}");
        }
    }

    #[test]
    fn template_names_are_stable_marked_short_and_replace_an_earlier_mark() {
        let first = template_for_image("workers-template", "projects/p/global/images/v2");
        assert_eq!(first, template_for_image("workers-template", "projects/p/global/images/v2"));
        assert!(first.starts_with("workers-template-uo-") && is_marked(&first), "{first}");
        assert_ne!(first, template_for_image("workers-template", "projects/p/global/images/v3"));
        let second = template_for_image(&first, "projects/p/global/images/v3");
        assert!(second.starts_with("workers-template-uo-") && second.matches(TEMPLATE_MARK).count() == 1, "{second}");
        assert_eq!(template_base(&second), "workers-template");
        let long = template_for_image(&"a".repeat(63), "projects/p/global/images/v2");
        assert!(long.len() <= 63 && is_marked(&long), "{long}");
        assert!(!is_marked("workers-template") && !is_marked("x-uo-ABCDEF12") && !is_marked("x-uo-123"));
    }

    #[test]
    fn an_instances_mig_comes_from_its_created_by_metadata() {
        let instance = GceInstance { project: "my-project".into(), zone: "z-a".into(), name: "w-1".into() };
        let mig = mig_of_created_by(&instance, "projects/123456/zones/z-a/instanceGroupManagers/workers").unwrap();
        assert_eq!(mig.group_id().as_str(), "projects/my-project/zones/z-a/instanceGroupManagers/workers");
        assert!(mig_of_created_by(&instance, "projects/123456/zones/z-a/instances/w-1").is_none());
    }
}
