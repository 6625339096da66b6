//! Kubernetes versions (`v1.34.1`) and the upgrade and version-skew rules a Kubernetes upgrade follows.
//!
//! The rules are Kubernetes' own (<https://kubernetes.io/releases/version-skew-policy/>, kubeadm's upgrade
//! checks): never downgrade, never change the major version, move at most one minor version past what the API
//! server runs, upgrade the control plane first, and never run a kubelet newer than the API server.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A Kubernetes release version: `vMAJOR.MINOR.PATCH` with an optional pre-release (`v1.34.0-rc.1`); the
/// leading `v` is optional on input and always written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KubeVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// The pre-release identifiers after `-`, empty for a release.
    pub pre: Vec<String>,
}

/// Why a string is not a Kubernetes version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a Kubernetes version (expected vMAJOR.MINOR.PATCH, e.g. v1.34.1): {reason}")]
pub struct VersionError {
    pub input: String,
    pub reason: &'static str,
}

impl FromStr for KubeVersion {
    type Err = VersionError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason| VersionError { input: input.to_owned(), reason };
        let rest = input.strip_prefix('v').unwrap_or(input);
        let (core, pre) = match rest.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (rest, None),
        };
        let number = |part: Option<&str>| -> Result<u64, VersionError> {
            let part = part.ok_or_else(|| error("it needs three numbers"))?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(error("a version number is not a decimal number"));
            }
            if part.len() > 1 && part.starts_with('0') {
                return Err(error("a version number has a leading zero"));
            }
            part.parse().map_err(|_| error("a version number is too large"))
        };
        let mut parts = core.split('.');
        let (major, minor, patch) = (number(parts.next())?, number(parts.next())?, number(parts.next())?);
        if parts.next().is_some() {
            return Err(error("it has more than three numbers"));
        }
        let pre = match pre {
            None => Vec::new(),
            Some(pre) => {
                let identifiers: Vec<String> = pre.split('.').map(str::to_owned).collect();
                let valid = |id: &String| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
                if !identifiers.iter().all(valid) {
                    return Err(error("the pre-release is not dot-separated [0-9A-Za-z-] identifiers"));
                }
                identifiers
            }
        };
        Ok(KubeVersion { major, minor, patch, pre })
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre.join("."))?;
        }
        Ok(())
    }
}

impl Ord for KubeVersion {
    /// Semantic-version precedence: numbers first, then a pre-release before its release, pre-release
    /// identifiers compared numerically when both are numbers, numbers before words.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch)).then_with(|| {
            match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let order = match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(a), Ok(b)) => a.cmp(&b),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => a.cmp(b),
                        };
                        if order != Ordering::Equal {
                            return order;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            }
        })
    }
}

impl PartialOrd for KubeVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What an accepted upgrade of the control plane changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upgrade {
    /// The API server already runs the target.
    None,
    /// A patch (or pre-release) step within the same minor version.
    Patch,
    /// One minor version up.
    Minor,
}

/// Why a target version is refused; the message names both versions and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeRefusal {
    #[error("{target} is older than the {running} the API server runs: Kubernetes is never downgraded")]
    Downgrade { running: KubeVersion, target: KubeVersion },
    #[error("{target} changes the major version of the {running} the API server runs")]
    MajorChange { running: KubeVersion, target: KubeVersion },
    #[error(
        "{target} is more than one minor version past the {running} the API server runs: upgrade one minor \
         version at a time"
    )]
    MinorSkip { running: KubeVersion, target: KubeVersion },
}

/// Whether the control plane may go from `running` (what the API server reports) to `target`.
pub fn check_upgrade(running: &KubeVersion, target: &KubeVersion) -> Result<Upgrade, UpgradeRefusal> {
    let refused = |make: fn(KubeVersion, KubeVersion) -> UpgradeRefusal| Err(make(running.clone(), target.clone()));
    if target.major != running.major {
        return refused(|running, target| UpgradeRefusal::MajorChange { running, target });
    }
    match target.cmp(running) {
        Ordering::Less => refused(|running, target| UpgradeRefusal::Downgrade { running, target }),
        Ordering::Equal => Ok(Upgrade::None),
        Ordering::Greater if target.minor == running.minor => Ok(Upgrade::Patch),
        Ordering::Greater if target.minor == running.minor + 1 => Ok(Upgrade::Minor),
        Ordering::Greater => refused(|running, target| UpgradeRefusal::MinorSkip { running, target }),
    }
}

/// Whether a kubelet may run `kubelet` next to an API server at `api_server`: never newer (the control plane
/// is upgraded first, so a node's kubelet moves to a version only once the API server runs it).
pub fn kubelet_may_run(kubelet: &KubeVersion, api_server: &KubeVersion) -> bool {
    kubelet <= api_server
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().unwrap()
    }

    #[test]
    fn versions_parse_with_or_without_the_v_and_are_written_with_it() {
        assert_eq!(v("1.34.1"), KubeVersion { major: 1, minor: 34, patch: 1, pre: vec![] });
        assert_eq!(v("v1.34.1").to_string(), "v1.34.1");
        assert_eq!(v("v1.34.0-rc.1").to_string(), "v1.34.0-rc.1");
        assert_eq!(v("v1.34.0-rc.1").pre, vec!["rc".to_owned(), "1".to_owned()]);
    }

    #[test]
    fn malformed_versions_are_refused_with_the_reason() {
        for bad in [
            "",
            "v",
            "v1",
            "v1.34",
            "v1.34.",
            "v1..1",
            "v1.34.1.2",
            "v01.34.1",
            "v1.34.x",
            "V1.34.1",
            "v1.34.1-",
            "v1.34.1-rc..1",
            "v1.34.1-rc_1",
            " v1.34.1",
            "v1.34.1 ",
            "v+1.34.1",
            "v99999999999999999999.1.1",
        ] {
            let error = bad.parse::<KubeVersion>().unwrap_err();
            assert_eq!(error.input, bad);
            assert!(error.to_string().contains("is not a Kubernetes version"), "{error}");
        }
    }

    #[test]
    fn versions_order_as_semantic_versions() {
        let ordered = [
            "v1.33.9",
            "v1.34.0-alpha.0",
            "v1.34.0-alpha.1",
            "v1.34.0-alpha.1.1",
            "v1.34.0-beta.0",
            "v1.34.0-rc.2",
            "v1.34.0-rc.10",
            "v1.34.0",
            "v1.34.1",
            "v1.34.10",
            "v2.0.0",
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(v(a).cmp(&v(b)), i.cmp(&j), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn upgrades_go_up_one_minor_at_most_within_the_major() {
        assert_eq!(check_upgrade(&v("v1.33.2"), &v("v1.33.2")), Ok(Upgrade::None));
        assert_eq!(check_upgrade(&v("v1.33.2"), &v("v1.33.5")), Ok(Upgrade::Patch));
        assert_eq!(check_upgrade(&v("v1.33.2"), &v("v1.34.0")), Ok(Upgrade::Minor));
        assert_eq!(check_upgrade(&v("v1.33.2"), &v("v1.34.7")), Ok(Upgrade::Minor));
        assert_eq!(check_upgrade(&v("v1.33.9"), &v("v1.34.0-rc.1")), Ok(Upgrade::Minor));
        assert!(matches!(check_upgrade(&v("v1.33.2"), &v("v1.33.1")), Err(UpgradeRefusal::Downgrade { .. })));
        assert!(matches!(check_upgrade(&v("v1.34.0"), &v("v1.33.9")), Err(UpgradeRefusal::Downgrade { .. })));
        assert!(matches!(check_upgrade(&v("v1.34.0"), &v("v1.34.0-rc.1")), Err(UpgradeRefusal::Downgrade { .. })));
        assert!(matches!(check_upgrade(&v("v1.33.2"), &v("v1.35.0")), Err(UpgradeRefusal::MinorSkip { .. })));
        assert!(matches!(check_upgrade(&v("v1.33.2"), &v("v2.0.0")), Err(UpgradeRefusal::MajorChange { .. })));
        assert!(matches!(check_upgrade(&v("v2.0.0"), &v("v1.99.0")), Err(UpgradeRefusal::MajorChange { .. })));
        let message = check_upgrade(&v("v1.33.2"), &v("v1.35.0")).unwrap_err().to_string();
        assert!(
            message.contains("v1.35.0") && message.contains("v1.33.2") && message.contains("one minor"),
            "{message}"
        );
    }

    #[test]
    fn a_kubelet_is_never_newer_than_the_api_server() {
        assert!(kubelet_may_run(&v("v1.33.2"), &v("v1.34.1")));
        assert!(kubelet_may_run(&v("v1.34.1"), &v("v1.34.1")));
        assert!(!kubelet_may_run(&v("v1.34.1"), &v("v1.34.0")));
        assert!(!kubelet_may_run(&v("v1.34.0"), &v("v1.33.9")));
        assert!(!kubelet_may_run(&v("v1.34.0"), &v("v1.34.0-rc.1")));
    }
}
