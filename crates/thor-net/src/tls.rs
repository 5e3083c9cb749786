//! TLS for client, server and peer connections, with rustls (the `ring` provider).
//!
//! A thor connection over TLS is the same protocol inside a TLS 1.2 or 1.3 stream: the server
//! presents a certificate, the client checks it against the certificate authority (CA) it
//! trusts and the name it dialled, and then sends `Hello` with its token as usual. The token
//! is no longer visible on the wire.
//!
//! ```text
//!  client                                        server (thor server --tls-cert --tls-key)
//!    TCP connect ───────────────────────────────► accept (a session slot, handshake deadline)
//!    ClientHello ─────────────────────────────►
//!               ◄──────────── certificate chain   checked against the client's CA and name
//!    [client certificate] ────────────────────►  checked against --tls-client-ca, if set
//!    Hello(token) ══════════ encrypted ═══════►  the session opens as over plain TCP
//! ```
//!
//! - [`TlsServer`]: a server's certificate chain and key, and optionally the CA whose client
//!   certificates it requires (`--tls-client-ca`): then a client without a certificate signed
//!   by that CA fails the handshake, before it can send anything.
//! - [`TlsClient`]: the CA a client trusts, optionally a client certificate, and optionally
//!   the name to check the server's certificate against (by default the host part of the
//!   address dialled; an IP address is checked against the certificate's IP addresses).
//!
//! Certificates and keys are read from PEM (the files `openssl` and most CAs write): the
//! certificate file may hold a chain (leaf first); the key file holds one PKCS#8, PKCS#1 or
//! SEC1 private key.
//!
//! The blocking client transport over TLS is [`TlsTransport`](crate::client::TlsTransport);
//! the server's side lives in the accept path of [`crate::server`] (with the `server`
//! feature); two-phase commit's peer connections take a [`TlsClient`] too
//! ([`crate::TcpPeers::start_tls`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate or key file could not be read. Check the path and its permissions.
    #[error("cannot read {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        cause: std::io::Error,
    },
    /// The PEM holds no certificate (or is not PEM). Give the certificate file, not the key.
    #[error("{what}: no PEM certificate found")]
    NoCertificate {
        /// Which input (a path, or "the server certificate").
        what: String,
    },
    /// The PEM holds no private key (or is not PEM). Give the key file, unencrypted.
    #[error("{what}: no PEM private key found")]
    NoKey {
        /// Which input.
        what: String,
    },
    /// The PEM could not be parsed.
    #[error("{what}: bad PEM: {reason}")]
    BadPem {
        /// Which input.
        what: String,
        /// The parser's reason.
        reason: String,
    },
    /// rustls refused the configuration: the key does not match the certificate, or a CA
    /// certificate is unusable.
    #[error("{what}: {cause}")]
    Config {
        /// What was being configured.
        what: &'static str,
        /// rustls's reason.
        cause: rustls::Error,
    },
    /// The client-certificate verifier could not be built from the CA given.
    #[error("the client CA: {0}")]
    ClientCa(rustls::server::VerifierBuilderError),
    /// The name to check the server's certificate against is neither a DNS name nor an IP
    /// address.
    #[error("{0:?} is not a valid TLS server name (a DNS name or an IP address)")]
    BadServerName(String),
}

/// The cryptography: rustls's `ring` provider, named explicitly so that no process-wide
/// default (or a second provider linked by another crate) is consulted.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a PEM file.
fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_owned(), cause: source })
}

/// Every certificate in `pem`, in order; at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::BadPem { what: what.to_owned(), reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { what: what.to_owned() });
    }
    Ok(certs)
}

/// The first private key in `pem`.
fn private_key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey { what: what.to_owned() },
        e => TlsError::BadPem { what: what.to_owned(), reason: e.to_string() },
    })
}

/// The trust roots made of every certificate in `pem`.
fn roots(pem: &[u8], what: &str) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(pem, what)? {
        roots
            .add(cert)
            .map_err(|source| TlsError::Config { what: "a CA certificate", cause: source })?;
    }
    Ok(roots)
}

/// A server's TLS settings: its certificate chain and key, and the CA whose client
/// certificates it requires, if any. Cheap to clone (the configuration is shared).
#[derive(Clone)]
pub struct TlsServer {
    /// rustls's configuration.
    config: Arc<rustls::ServerConfig>,
    /// Whether clients must present a certificate.
    client_auth: bool,
}

impl fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServer").field("client_auth", &self.client_auth).finish()
    }
}

impl TlsServer {
    /// From PEM: the certificate chain (leaf first), its private key, and optionally the CA
    /// certificates that sign the client certificates the server requires.
    pub fn from_pem(
        cert_chain: &[u8],
        key: &[u8],
        client_ca: Option<&[u8]>,
    ) -> Result<TlsServer, TlsError> {
        let certs = certificates(cert_chain, "the server certificate")?;
        let key = private_key(key, "the server key")?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Config { what: "the protocol versions", cause: source })?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let roots = Arc::new(roots(ca, "the client CA")?);
                let verifier =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                        .build()
                        .map_err(TlsError::ClientCa)?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(certs, key).map_err(|source| TlsError::Config {
            what: "the server certificate and key",
            cause: source,
        })?;
        Ok(TlsServer { config: Arc::new(config), client_auth: client_ca.is_some() })
    }

    /// [`TlsServer::from_pem`] from files (`thor server --tls-cert --tls-key
    /// [--tls-client-ca]`).
    pub fn from_files(
        cert_chain: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<TlsServer, TlsError> {
        let ca = client_ca.map(read).transpose()?;
        TlsServer::from_pem(&read(cert_chain)?, &read(key)?, ca.as_deref())
    }

    /// Whether clients must present a certificate signed by the client CA.
    pub fn requires_client_certificates(&self) -> bool {
        self.client_auth
    }

    /// rustls's configuration.
    pub fn rustls_config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }
}

/// A client's TLS settings: the CA it trusts for servers' certificates, optionally its own
/// certificate (for a server started with `--tls-client-ca`), and optionally the name to
/// check the server's certificate against. Cheap to clone.
#[derive(Clone)]
pub struct TlsClient {
    /// rustls's configuration.
    config: Arc<rustls::ClientConfig>,
    /// The name to check the server's certificate against instead of the host dialled.
    server_name: Option<ServerName<'static>>,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("client_certificate", &self.config.client_auth_cert_resolver.has_certs())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsClient {
    /// Trusts the CA certificates in `ca` (PEM) and presents no client certificate.
    pub fn from_ca_pem(ca: &[u8]) -> Result<TlsClient, TlsError> {
        TlsClient::build(ca, None)
    }

    /// Trusts the CA certificates in `ca` and presents the client certificate chain `cert`
    /// with its private key `key` (all PEM): for servers that require client certificates.
    pub fn with_identity_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<TlsClient, TlsError> {
        TlsClient::build(ca, Some((cert, key)))
    }

    /// [`TlsClient::from_ca_pem`] from a file.
    pub fn from_ca_file(ca: &Path) -> Result<TlsClient, TlsError> {
        TlsClient::from_ca_pem(&read(ca)?)
    }

    /// [`TlsClient::with_identity_pem`] from files.
    pub fn with_identity_files(ca: &Path, cert: &Path, key: &Path) -> Result<TlsClient, TlsError> {
        TlsClient::with_identity_pem(&read(ca)?, &read(cert)?, &read(key)?)
    }

    fn build(ca: &[u8], identity: Option<(&[u8], &[u8])>) -> Result<TlsClient, TlsError> {
        let roots = roots(ca, "the CA")?;
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Config { what: "the protocol versions", cause: source })?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let certs = certificates(cert, "the client certificate")?;
                let key = private_key(key, "the client key")?;
                builder.with_client_auth_cert(certs, key).map_err(|source| TlsError::Config {
                    what: "the client certificate and key",
                    cause: source,
                })?
            }
        };
        Ok(TlsClient { config: Arc::new(config), server_name: None })
    }

    /// Checks the server's certificate against `name` (a DNS name or an IP address) instead
    /// of the host part of the address dialled: for a server reached by an address its
    /// certificate does not name.
    pub fn with_server_name(mut self, name: &str) -> Result<TlsClient, TlsError> {
        let n = ServerName::try_from(name.to_owned())
            .map_err(|_| TlsError::BadServerName(name.to_owned()))?;
        self.server_name = Some(n);
        Ok(self)
    }

    /// The name to check the certificate of the server at `addr` (`HOST:PORT`,
    /// `[IPV6]:PORT` or a bare host) against.
    pub(crate) fn name_for(&self, addr: &str) -> Result<ServerName<'static>, TlsError> {
        if let Some(n) = &self.server_name {
            return Ok(n.clone());
        }
        let host = host_of(addr);
        ServerName::try_from(host.to_owned()).map_err(|_| TlsError::BadServerName(host.to_owned()))
    }

    /// rustls's configuration.
    pub fn rustls_config(&self) -> Arc<rustls::ClientConfig> {
        self.config.clone()
    }
}

/// The host part of `HOST:PORT`, `[IPV6]:PORT`, or a bare host or IPv6 address.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(h, _)| h);
    }
    match addr.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((h, _)) if !h.contains(':') => h,
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_what_precedes_the_port() {
        assert_eq!(host_of("db.example:7400"), "db.example");
        assert_eq!(host_of("127.0.0.1:7400"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7400"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("db.example"), "db.example");
    }

    #[test]
    fn pem_without_the_right_items_is_refused_with_a_reason() {
        assert!(matches!(TlsClient::from_ca_pem(b"not pem"), Err(TlsError::NoCertificate { .. })));
        assert!(matches!(TlsServer::from_pem(b"", b"", None), Err(TlsError::NoCertificate { .. })));
    }
}
