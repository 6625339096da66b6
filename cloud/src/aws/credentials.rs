//! The EC2 client's credentials: those of the `SdkConfig`'s provider, kept until shortly before they expire.
//!
//! The provider does not cache: aws-config's default chain (1.8) asks its source every time (an STS
//! `AssumeRoleWithWebIdentity` for IRSA, the instance metadata service for an instance profile); the SDK's clients
//! keep credentials in the configuration's identity cache, which only the SDK's runtime can use. So the EC2 client
//! keeps them here, as that cache does: until [`BUFFER`] before their expiry, or [`NO_EXPIRY_LIFETIME`] for
//! credentials without one (static ones), then asks the provider again. One load at a time: concurrent requests
//! wait for it; a failed load is not kept (the next request asks again).

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;

/// How long before their expiry credentials are replaced (rotating credentials are valid for an hour or more; a
/// request signed with credentials that expire on its way is refused with `ExpiredToken`, a permission error).
pub(crate) const BUFFER: Duration = Duration::from_secs(60);

/// How long credentials without an expiry are kept (the SDK's identity cache's default).
pub(crate) const NO_EXPIRY_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// A provider's credentials and until when they are used.
#[derive(Debug)]
pub(crate) struct CachedCredentials {
    provider: SharedCredentialsProvider,
    cached: Mutex<Option<(Credentials, SystemTime)>>,
}

impl CachedCredentials {
    pub(crate) fn new(provider: SharedCredentialsProvider) -> CachedCredentials {
        CachedCredentials { provider, cached: Mutex::new(None) }
    }

    /// Credentials usable now.
    ///
    /// # Errors
    /// The provider's, when it had to be asked and failed.
    pub(crate) async fn get(&self) -> Result<Credentials, CredentialsError> {
        self.get_at(SystemTime::now()).await
    }

    async fn get_at(&self, now: SystemTime) -> Result<Credentials, CredentialsError> {
        let mut cached = self.cached.lock().await;
        if let Some((credentials, until)) = cached.as_ref()
            && now < *until
        {
            return Ok(credentials.clone());
        }
        let credentials = self.provider.provide_credentials().await?;
        let until = match credentials.expiry() {
            Some(expiry) => expiry.checked_sub(BUFFER).unwrap_or(SystemTime::UNIX_EPOCH),
            None => now.checked_add(NO_EXPIRY_LIFETIME).unwrap_or(now),
        };
        *cached = Some((credentials.clone(), until));
        Ok(credentials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::provider::future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A provider that counts its loads and hands out credentials valid for `lifetime` (none: no expiry), failing
    /// every load after `fail_after`.
    #[derive(Debug)]
    struct Counting {
        loads: Arc<AtomicUsize>,
        lifetime: Option<Duration>,
        fail_after: usize,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.loads.fetch_add(1, Ordering::SeqCst);
            if n >= self.fail_after {
                return future::ProvideCredentials::ready(Err(CredentialsError::provider_timed_out(
                    Duration::from_secs(5),
                )));
            }
            let expiry = self.lifetime.map(|l| SystemTime::now() + l);
            future::ProvideCredentials::ready(Ok(Credentials::new(format!("AKID{n}"), "secret", None, expiry, "t")))
        }
    }

    fn cache(lifetime: Option<Duration>, fail_after: usize) -> (CachedCredentials, Arc<AtomicUsize>) {
        let loads = Arc::new(AtomicUsize::new(0));
        let provider = Counting { loads: loads.clone(), lifetime, fail_after };
        (CachedCredentials::new(SharedCredentialsProvider::new(provider)), loads)
    }

    #[tokio::test]
    async fn credentials_are_kept_until_shortly_before_they_expire() {
        let (cache, loads) = cache(Some(Duration::from_secs(3600)), usize::MAX);
        let now = SystemTime::now();
        assert_eq!(cache.get_at(now).await.unwrap().access_key_id(), "AKID0");
        assert_eq!(cache.get_at(now + Duration::from_secs(3000)).await.unwrap().access_key_id(), "AKID0");
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        // Within the buffer before the expiry: replaced.
        let late = now + Duration::from_secs(3600) - BUFFER + Duration::from_secs(1);
        assert_eq!(cache.get_at(late).await.unwrap().access_key_id(), "AKID1");
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn credentials_without_expiry_are_asked_again_after_a_while_and_failures_are_not_kept() {
        let (cache, loads) = cache(None, 1);
        let now = SystemTime::now();
        assert_eq!(cache.get_at(now).await.unwrap().access_key_id(), "AKID0");
        assert_eq!(cache.get_at(now + NO_EXPIRY_LIFETIME / 2).await.unwrap().access_key_id(), "AKID0");
        let later = now + NO_EXPIRY_LIFETIME + Duration::from_secs(1);
        assert!(cache.get_at(later).await.is_err());
        assert!(cache.get_at(later).await.is_err(), "a failure is not kept: asked again");
        assert_eq!(loads.load(Ordering::SeqCst), 3);
    }
}
