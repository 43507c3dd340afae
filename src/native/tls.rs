//! TLS for the native driver's `https://` endpoints: which servers to trust,
//! which client certificate to present, and error messages that say what went
//! wrong. Built on rustls with the `ring` provider: no OpenSSL, no cmake, no
//! async runtime, and nothing of it in wasm builds (there `fetch` does TLS).
//!
//! Trust, decided once per [`Client`](super::Client):
//! - by default the platform's root store (`rustls-native-certs`: on Debian
//!   `/etc/ssl/certs`, and `$SSL_CERT_FILE` / `$SSL_CERT_DIR` when set), as
//!   curl and etcdctl do: a CA the administrator added to the system store is
//!   trusted without configuring every program, and no bundled list goes stale
//!   inside a binary;
//! - with [`TlsConfig::ca_file`], exactly the CAs in that PEM file *instead*
//!   (etcdctl's `--cacert`): a private etcd CA then does not also trust every
//!   public CA on the web.
//!
//! A certificate that does not verify fails the request with a TRANSPORT error
//! naming the cause; there is no "insecure" switch and never a fallback to
//! plain HTTP. Key material never appears in errors or `Debug` output (the
//! loaded configuration has no `Debug` that prints it; errors name files only).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};

use crate::core::{LockError, TransportError};

/// TLS settings of the native driver (an I/O concern: the core never sees them).
///
/// The default trusts the platform's root certificates and presents no client
/// certificate. Paths are read when the client is created; unreadable or
/// invalid files are an `INVALID_ARGUMENT` error then, before any request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// PEM file with the CA certificate(s) to trust *instead of* the platform's
    /// roots (e.g. the CA that signed a private etcd cluster's certificates).
    pub ca_file: Option<PathBuf>,
    /// PEM file with the client certificate chain (leaf first) for mutual TLS
    /// (etcd's `--client-cert-auth`); needs [`client_key`](Self::client_key).
    pub client_cert: Option<PathBuf>,
    /// PEM file with the client certificate's private key (PKCS#8, PKCS#1 or
    /// SEC1; not encrypted); needs [`client_cert`](Self::client_cert).
    pub client_key: Option<PathBuf>,
}

impl TlsConfig {
    /// The default: platform roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CAs in the PEM file at `path` instead of the platform's roots.
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents the certificate chain in `cert` (PEM) with the key in `key` (PEM).
    pub fn with_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some(cert.into());
        self.client_key = Some(key.into());
        self
    }

    /// True when nothing is configured (platform roots, no client certificate).
    pub fn is_default(&self) -> bool {
        *self == TlsConfig::default()
    }

    /// Reads and checks the files; the result is shared by every connection.
    pub(crate) fn load(&self) -> Result<TlsConnector, LockError> {
        let roots = match &self.ca_file {
            Some(path) => ca_file_roots(path)?,
            None => return self.with_roots(platform_roots().map_err(LockError::invalid)?),
        };
        self.with_roots(Arc::new(roots))
    }

    fn with_roots(&self, roots: Arc<RootCertStore>) -> Result<TlsConnector, LockError> {
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| LockError::invalid(format!("TLS: {e}")))?
                .with_root_certificates(roots);
        let mut config = match (&self.client_cert, &self.client_key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "client certificate")?;
                let key = read_key(key)?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    LockError::invalid(format!(
                        "TLS: client certificate {} and key do not work together: {e}",
                        cert.display()
                    ))
                })?
            }
            (Some(_), None) => {
                return Err(LockError::invalid(
                    "TLS: a client certificate needs its private key (client_key / --key)",
                ))
            }
            (None, Some(_)) => {
                return Err(LockError::invalid(
                    "TLS: a client key needs its certificate (client_cert / --cert)",
                ))
            }
        };
        // The driver speaks HTTP/1.1 only; saying so keeps servers that also
        // offer h2 (etcd's gRPC port) from choosing it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsConnector {
            config: Arc::new(config),
        })
    }
}

/// The platform's root store, loaded once per process (it is read from disk
/// and parsed: ~150 certificates on Debian).
fn platform_roots() -> Result<Arc<RootCertStore>, String> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map(|e| format!(" ({e})")).unwrap_or_default();
                return Err(format!(
                    "TLS: no trusted root certificates found in the platform store{why}; install ca-certificates, set $SSL_CERT_FILE, or give a CA file"
                ));
            }
            Ok(Arc::new(roots))
        })
        .clone()
}

/// The connector for [`TlsConfig::default`]: platform roots, no client certificate.
pub(crate) fn default_connector() -> Result<TlsConnector, LockError> {
    static DEFAULT: OnceLock<Result<TlsConnector, LockError>> = OnceLock::new();
    DEFAULT.get_or_init(|| TlsConfig::default().load()).clone()
}

fn ca_file_roots(path: &Path) -> Result<RootCertStore, LockError> {
    let certs = read_certs(path, "CA file")?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| {
            LockError::invalid(format!(
                "TLS: CA file {} holds a certificate that cannot be used: {e}",
                path.display()
            ))
        })?;
    }
    Ok(roots)
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, LockError> {
    let bytes = read_file(path, what)?;
    let mut certs = Vec::new();
    for item in CertificateDer::pem_slice_iter(&bytes) {
        let cert = item.map_err(|_| {
            LockError::invalid(format!("TLS: {what} {} is not valid PEM", path.display()))
        })?;
        certs.push(cert);
    }
    if certs.is_empty() {
        return Err(LockError::invalid(format!(
            "TLS: {what} {} holds no PEM certificate (BEGIN CERTIFICATE)",
            path.display()
        )));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, LockError> {
    let bytes = read_file(path, "client key")?;
    // The parser's own error could quote a line of the file: say only which file.
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        LockError::invalid(format!(
            "TLS: client key {} holds no usable private key (PEM PKCS#8, PKCS#1 or SEC1; encrypted keys are not supported)",
            path.display()
        ))
    })
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>, LockError> {
    std::fs::read(path)
        .map_err(|e| LockError::invalid(format!("TLS: cannot read {what} {}: {e}", path.display())))
}

/// A loaded TLS client configuration, shared by every connection of one
/// HTTP client (rustls keeps its session-resumption cache in it).
#[derive(Clone)]
pub(crate) struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Deliberately opaque: the config holds the client's private key.
        f.debug_struct("TlsConnector").finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// A client-side TLS session for `host` (a DNS name or an IP literal,
    /// checked against the certificate's subjectAltName).
    pub(crate) fn session(&self, host: &str) -> Result<rustls::ClientConnection, String> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| format!("TLS: {host:?} is not a valid server name"))?;
        rustls::ClientConnection::new(self.config.clone(), name).map_err(|e| format!("TLS: {e}"))
    }
}

/// The transport error for an I/O error that carries a rustls error (rustls
/// wraps its errors in `io::Error`s of kind `InvalidData`); `None` for other
/// errors. `host` is known during the handshake, where certificates are verified.
///
/// A refusal (bad certificate, alert about ours) is a `Connect` error even when
/// it arrives at the first read: in TLS 1.3 the server checks the client's
/// certificate after the client considers the handshake done, and either way
/// the HTTP request was never processed (so it is safe to send again).
pub(crate) fn io_error(e: &std::io::Error, host: Option<&str>) -> Option<TransportError> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    let refused = matches!(
        tls,
        rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::AlertReceived(_)
    ) && !matches!(
        tls,
        rustls::Error::AlertReceived(AlertDescription::CloseNotify)
    );
    let message = describe(tls, host);
    Some(if refused {
        TransportError::Connect(message)
    } else {
        TransportError::Io(message)
    })
}

/// One sentence per failure a user can act on.
pub(crate) fn describe(e: &rustls::Error, host: Option<&str>) -> String {
    let host = host.unwrap_or("the server");
    match e {
        rustls::Error::InvalidCertificate(cert) => {
            let why = match cert {
                CertificateError::UnknownIssuer => {
                    "certificate not trusted (unknown issuer): give the CA that signed it as the CA file (ca_file / --ca-file)".to_string()
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    format!("{cert} (connect by a name the certificate lists)")
                }
                other => other.to_string(),
            };
            format!("TLS: certificate verification failed for host {host}: {why}")
        }
        rustls::Error::NoCertificatesPresented => format!(
            "TLS: certificate verification failed for host {host}: it presented no certificate"
        ),
        rustls::Error::AlertReceived(alert) => {
            let hint = match alert {
                AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::AccessDenied
                | AlertDescription::HandshakeFailure => {
                    ": it may require a client certificate (client_cert/client_key, --cert/--key) or not trust the one given"
                }
                _ => "",
            };
            format!("TLS: {host} refused the connection ({alert:?} alert){hint}")
        }
        rustls::Error::InvalidMessage(_) => {
            format!("TLS: {host} did not answer with TLS ({e}): is it an https endpoint, or plain http?")
        }
        other => format!("TLS: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid_message(r: Result<TlsConnector, LockError>) -> String {
        match r {
            Err(e @ LockError::InvalidArgument { .. }) => e.to_string(),
            Err(e) => panic!("expected INVALID_ARGUMENT, got {e:?}"),
            Ok(_) => panic!("expected an error"),
        }
    }

    #[test]
    fn missing_and_malformed_files_are_invalid_arguments_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("edgelock-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let m = invalid_message(TlsConfig::new().with_ca_file(&missing).load());
        assert!(
            m.contains("cannot read CA file") && m.contains("missing.pem"),
            "{m}"
        );

        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let m = invalid_message(TlsConfig::new().with_ca_file(&junk).load());
        assert!(m.contains("holds no PEM certificate"), "{m}");

        // A "key" whose base64 is broken: the message names the file, never its content.
        let key = dir.join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LXNlY3JldA!!\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let cert = dir.join("cert.pem");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let m = invalid_message(TlsConfig::new().with_client_cert(&cert, &key).load());
        assert!(m.contains("key.pem"), "{m}");
        assert!(!m.contains("c2VjcmV0"), "{m}");

        let half = TlsConfig {
            client_cert: Some(cert.clone()),
            ..TlsConfig::default()
        };
        assert!(invalid_message(half.load()).contains("needs its private key"));
        let half = TlsConfig {
            client_key: Some(key.clone()),
            ..TlsConfig::default()
        };
        assert!(invalid_message(half.load()).contains("needs its certificate"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn verification_failures_name_host_and_cause() {
        let m = describe(
            &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            Some("127.0.0.1"),
        );
        assert!(
            m.contains("certificate verification failed for host 127.0.0.1")
                && m.contains("unknown issuer"),
            "{m}"
        );
        let m = describe(
            &rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
            None,
        );
        assert!(
            m.contains("CertificateRequired") && m.contains("client certificate"),
            "{m}"
        );
    }

    #[test]
    fn the_debug_output_is_opaque() {
        if let Ok(c) = default_connector() {
            assert_eq!(format!("{c:?}"), "TlsConnector { .. }");
        }
    }
}
