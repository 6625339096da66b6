//! Creation tokens of `SetDesiredCapacity`: which instances a group had before it grew, so that the new one can be
//! told apart later, by any controller replica (the token is the whole state; it is persisted by the caller).
//!
//! Form: `aws1.<group hash>.<instances>`: the FNV-1a hash of the group's name (8 hex digits; a token of another
//! group is refused) and the last 8 hex digits of each instance ID the group had, concatenated, sorted.

use crate::error::{Error, Result};
use crate::provider::{CreationToken, GroupId};

const PREFIX: &str = "aws1";

/// The most instances a token can list within the 1024 bytes a token may have.
pub(crate) const MAX_INSTANCES: usize = (crate::MAX_PROVIDER_ID_LEN - PREFIX.len() - 10) / 8;

/// The suffix kept of an instance ID (`i-` and 8 or 17 hex digits): its last 8 hex digits.
fn suffix(instance_id: &str) -> &str {
    instance_id.get(instance_id.len().saturating_sub(8)..).unwrap_or(instance_id)
}

fn group_hash(group: &GroupId) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in group.as_str().bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

/// A token for `group` that had `instances` before it grew by one.
///
/// # Errors
/// [`Error::Invalid`] when the group has more instances than a token can list (then nothing must be created).
pub(crate) fn issue<'a>(group: &GroupId, instances: impl IntoIterator<Item = &'a str>) -> Result<CreationToken> {
    let mut suffixes: Vec<&str> = instances.into_iter().map(suffix).collect();
    if suffixes.len() > MAX_INSTANCES {
        return Err(Error::invalid(format!(
            "group {group} has {} instances; a creation token can tell a new one apart among at most {MAX_INSTANCES}",
            suffixes.len()
        )));
    }
    suffixes.sort_unstable();
    Ok(CreationToken(format!("{PREFIX}.{}.{}", group_hash(group), suffixes.concat())))
}

/// The instances a token of `group` lists: whether an instance ID existed when the token was issued.
#[derive(Debug)]
pub(crate) struct Before(Vec<String>);

impl Before {
    /// Whether `instance_id` was in the group when the token was issued.
    pub(crate) fn contains(&self, instance_id: &str) -> bool {
        self.0.binary_search_by(|s| s.as_str().cmp(suffix(instance_id))).is_ok()
    }
}

/// Reads a token of `group`.
///
/// # Errors
/// [`Error::Invalid`] for a token this provider did not issue for `group`.
pub(crate) fn read(group: &GroupId, token: &CreationToken) -> Result<Before> {
    let invalid = || Error::invalid(format!("creation token {:?} was not issued for AWS group {group}", token.0));
    let mut parts = token.0.splitn(3, '.');
    let (Some(PREFIX), Some(hash), Some(list)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    if hash != group_hash(group)
        || list.len() % 8 != 0
        || !list.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(invalid());
    }
    let mut suffixes: Vec<String> =
        list.as_bytes().chunks(8).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
    suffixes.sort_unstable();
    Ok(Before(suffixes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_tells_the_instances_before_from_new_ones_and_only_for_its_group() {
        let group = GroupId::from("constellation-worker-abc");
        let token = issue(&group, ["i-0123456789abcdef0", "i-1234abcd"]).unwrap();
        assert!(token.0.len() <= crate::MAX_PROVIDER_ID_LEN);
        let before = read(&group, &token).unwrap();
        assert!(before.contains("i-0123456789abcdef0"));
        assert!(before.contains("i-1234abcd"));
        assert!(!before.contains("i-0fedcba9876543210"));
        assert!(read(&GroupId::from("another"), &token).is_err());
        for bad in ["", "aws1", "aws1.x.y", "conformance-no-such-token", "aws2.00000000.", "aws1.00000000.abc"] {
            assert!(read(&group, &CreationToken(bad.into())).is_err(), "{bad:?}");
        }
        let empty = issue(&group, []).unwrap();
        assert!(!read(&group, &empty).unwrap().contains("i-1234abcd"));
    }

    #[test]
    fn a_group_too_large_for_a_token_is_refused_before_anything_is_created() {
        let group = GroupId::from("big");
        let ids: Vec<String> = (0..=MAX_INSTANCES).map(|i| format!("i-{i:017x}")).collect();
        let error = issue(&group, ids.iter().map(String::as_str)).unwrap_err();
        assert!(error.to_string().contains("at most"), "{error}");
        let fits: Vec<String> = (0..MAX_INSTANCES).map(|i| format!("i-{i:017x}")).collect();
        let token = issue(&group, fits.iter().map(String::as_str)).unwrap();
        assert!(token.0.len() <= crate::MAX_PROVIDER_ID_LEN, "{}", token.0.len());
    }
}
