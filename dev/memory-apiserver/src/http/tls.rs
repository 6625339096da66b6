//! HTTPS on the API server's port, beside plain HTTP: kubectl (client-go's `clientcmd`) sends credentials only
//! over TLS, so the kubeconfigs the dev cluster writes use `https://` and a CA generated for this server; kube-rs
//! clients in tests keep plain HTTP with their bearer token.
//!
//! # Guarantees
//! - One connection is TLS when its first byte is a TLS handshake record (0x16), plain HTTP/1.1 otherwise.
//! - The serving certificate is valid for `127.0.0.1` and `localhost` and signed by a CA made at start, whose PEM
//!   the kubeconfigs carry as `certificate-authority-data`.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// The first byte of a TLS handshake record.
pub const HANDSHAKE: u8 = 0x16;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating the CA or the certificate failed.
    #[error("cannot generate the serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot configure TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The server's TLS identity.
#[derive(Clone)]
pub struct Tls {
    /// PEM of the CA that signed the serving certificate.
    pub ca_pem: String,
    /// Accepts TLS connections with the serving certificate.
    pub acceptor: TlsAcceptor,
}

impl Tls {
    /// A new CA and a serving certificate for `127.0.0.1` and `localhost`.
    pub fn generate() -> Result<Tls, TlsError> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "dev-cluster-ca");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls { ca_pem: ca_cert.pem(), acceptor: TlsAcceptor::from(Arc::new(config)) })
    }
}
