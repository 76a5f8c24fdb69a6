//! TLS to PostgreSQL as libpq does it: `sslmode` (`disable`, `prefer`, `require`, `verify-ca`,
//! `verify-full`) and `sslrootcert` (a PEM file, or `system`) from the URL, over rustls with the
//! ring provider (no OpenSSL: the static builds stay static). A refused certificate names the
//! cause and the fix in the error, so an operator reads what to change in the URL.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The `sslmode` of a URL, with libpq's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is not checked
    /// (libpq's default).
    Prefer,
    /// TLS or nothing; the certificate is checked like `verify-ca` when a root certificate is
    /// given (`sslrootcert`, or libpq's default file `~/.postgresql/root.crt` exists), else
    /// not at all: encrypted, not authenticated.
    Require,
    /// TLS, the certificate chain signed by the root certificate; any host name.
    VerifyCa,
    /// TLS, the chain checked and the certificate issued for the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The mode a URL value names; the error lists the accepted ones.
    pub fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow (plain first, TLS only if the server insists) is not supported: use prefer, require or disable".into(),
                );
            }
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the trusted root certificates come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// `sslrootcert=system`: the public web's root CAs (Mozilla's list, built in as for
    /// webhook deliveries), for managed databases whose certificates chain to one.
    System,
}

/// The TLS settings of one URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert` as given; `None` when the URL names none.
    pub root: Option<RootCert>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            mode: SslMode::Prefer,
            root: None,
        }
    }
}

/// libpq's default root certificate file, used when the URL names none.
fn default_root_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".postgresql/root.crt"))
}

/// What a connection checks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

impl TlsSettings {
    /// Checks the combination as libpq does (e.g. `sslrootcert=system` wants `verify-full`).
    pub fn validate(&self) -> Result<(), String> {
        if self.root == Some(RootCert::System) && self.mode != SslMode::VerifyFull {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full (got sslmode={}): checking a public CA's certificate without its host name proves nothing",
                self.mode.as_str()
            ));
        }
        Ok(())
    }

    /// The root certificate this connection checks against, resolving libpq's default file,
    /// and what it checks.
    fn resolve(&self) -> anyhow::Result<(Check, Option<RootCert>)> {
        let given = self.root.clone();
        let default = || {
            default_root_file()
                .filter(|p| p.is_file())
                .map(RootCert::File)
        };
        Ok(match self.mode {
            SslMode::Disable | SslMode::Prefer => (Check::Nothing, None),
            SslMode::Require => match given.or_else(default) {
                Some(root) => (Check::Chain, Some(root)),
                None => (Check::Nothing, None),
            },
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let Some(root) = given.or_else(default) else {
                    let file = default_root_file()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "~/.postgresql/root.crt".into());
                    anyhow::bail!(
                        "sslmode={} needs the CA that signed the server's certificate: add sslrootcert=PATH to the URL (a PEM file), use sslrootcert=system for a public CA, or put it in {file}",
                        self.mode.as_str()
                    );
                };
                let check = if self.mode == SslMode::VerifyFull {
                    Check::ChainAndName
                } else {
                    Check::Chain
                };
                (check, Some(root))
            }
        })
    }

    /// The driver's TLS connector for these settings. Reads the root certificate file now, so
    /// a missing or unreadable one is refused at start with its path, not at each connection.
    pub fn connector(&self) -> anyhow::Result<PgTls> {
        let (check, root) = self.resolve()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let (roots, shown) = match &root {
            None => (RootCertStore::empty(), String::new()),
            Some(RootCert::System) => (
                RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                },
                "sslrootcert=system (the public web's root CAs)".to_string(),
            ),
            Some(RootCert::File(path)) => {
                (load_roots(path)?, format!("sslrootcert={}", path.display()))
            }
        };
        let webpki = if check == Check::Nothing {
            None
        } else {
            Some(
                rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                )
                .build()?,
            )
        };
        let verifier = Arc::new(Verifier {
            check,
            webpki,
            algorithms,
            roots: shown,
        });
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(PgTls(MakeRustlsConnect::new(config)))
    }
}

/// The driver's TLS connector ([`MakeRustlsConnect`] with the checks of [`Verifier`]), `Debug`
/// so that the pool holding it can be printed.
#[derive(Clone)]
pub struct PgTls(MakeRustlsConnect);

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgTls(rustls)")
    }
}

impl<S> postgres::tls::MakeTlsConnect<S> for PgTls
where
    MakeRustlsConnect: postgres::tls::MakeTlsConnect<S>,
{
    type Stream = <MakeRustlsConnect as postgres::tls::MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as postgres::tls::MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as postgres::tls::MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        self.0.make_tls_connect(domain)
    }
}

/// The CA certificates of a PEM file; the error names the file and the URL parameter.
fn load_roots(path: &Path) -> anyhow::Result<RootCertStore> {
    let pem = std::fs::read(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read sslrootcert={} ({e}): give the path of the CA certificate (PEM) that signed the server's certificate",
            path.display()
        )
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| {
            anyhow::anyhow!(
                "sslrootcert={} is not a PEM certificate file ({e})",
                path.display()
            )
        })?;
        roots.add(cert).map_err(|e| {
            anyhow::anyhow!(
                "sslrootcert={} holds a certificate that cannot be a root ({e})",
                path.display()
            )
        })?;
    }
    if roots.is_empty() {
        anyhow::bail!(
            "sslrootcert={} holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)",
            path.display()
        );
    }
    Ok(roots)
}

/// The certificate check of one mode. Handshake signatures are always verified (the server
/// proves it holds the key of the certificate it shows); the chain and the name as the mode
/// says. Refusals carry a message that names the cause and the fix.
#[derive(Debug)]
struct Verifier {
    check: Check,
    webpki: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
    /// `sslrootcert=…` as shown in messages.
    roots: String,
}

/// A refusal message carried through rustls and the driver; [`refusal_in`] finds it again.
#[derive(Debug)]
pub struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refuse(message: String) -> rustls::Error {
    rustls::Error::Other(OtherError(Arc::new(Refused(message))))
}

/// The certificate refusal inside a driver error, if that is what it is: the message alone
/// reads better than the layers around it ("error performing TLS handshake: other error: …").
pub fn refusal_in(err: &postgres::Error) -> Option<String> {
    let io = std::error::Error::source(err)?.downcast_ref::<std::io::Error>()?;
    match io.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::Other(OtherError(inner)) => inner
            .downcast_ref::<Refused>()
            .map(|refused| format!("TLS: {}", refused.0)),
        _ => None,
    }
}

/// A name from rustls' list of the certificate's names (`DnsName("db.example")`), bare.
fn bare_name(presented: &str) -> &str {
    presented
        .strip_prefix("DnsName(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .unwrap_or(presented)
}

fn host_of(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Ok(ServerCertVerified::assertion());
        };
        let result =
            webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        let roots = &self.roots;
        match result {
            Ok(verified) => Ok(verified),
            // The name is checked after the chain: a name error means the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                presented,
                ..
            })) => Err(refuse(format!(
                "the server's certificate is for {}, not {}: connect by a name on the certificate, or use sslmode=verify-ca to check the CA only",
                if presented.is_empty() {
                    "no host name".to_string()
                } else {
                    presented
                        .iter()
                        .map(|name| bare_name(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                host_of(server_name)
            ))),
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)) => {
                Err(refuse(format!(
                    "the server's certificate is not for {}: connect by a name on the certificate, or use sslmode=verify-ca to check the CA only",
                    host_of(server_name)
                )))
            }
            Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer | CertificateError::BadSignature,
            )) => Err(refuse(format!(
                "the server's certificate is not signed by {roots}: set sslrootcert to the CA certificate that signed it"
            ))),
            Err(rustls::Error::InvalidCertificate(
                CertificateError::Expired | CertificateError::ExpiredContext { .. },
            )) => Err(refuse(
                "the server's certificate has expired: renew it on the database server".into(),
            )),
            Err(other) => Err(other),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The driver's own `sslmode` for these settings: every mode past `require` is `require` to
/// the driver (TLS or nothing), the checks being the verifier's.
pub fn driver_mode(mode: SslMode) -> postgres::config::SslMode {
    match mode {
        SslMode::Disable => postgres::config::SslMode::Disable,
        SslMode::Prefer => postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            postgres::config::SslMode::Require
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_read_as_libpq_writes_them() {
        for (text, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            assert_eq!(SslMode::parse(text), Ok(mode));
            assert_eq!(mode.as_str(), text);
        }
        assert!(
            SslMode::parse("Require").is_err(),
            "libpq's values are case-sensitive"
        );
        assert!(
            SslMode::parse("allow")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(
            SslMode::parse("verify_full")
                .unwrap_err()
                .contains("verify-full")
        );
    }

    #[test]
    fn names_from_rustls_are_shown_bare() {
        assert_eq!(bare_name("DnsName(\"db.internal\")"), "db.internal");
        assert_eq!(bare_name("IpAddress(10.0.0.5)"), "IpAddress(10.0.0.5)");
    }

    #[test]
    fn system_roots_want_verify_full() {
        let settings = TlsSettings {
            mode: SslMode::Require,
            root: Some(RootCert::System),
        };
        assert!(settings.validate().unwrap_err().contains("verify-full"));
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            root: Some(RootCert::System),
        };
        assert!(settings.validate().is_ok());
        assert!(settings.connector().is_ok());
    }

    #[test]
    fn a_root_file_makes_require_check_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not pem").unwrap();
        let with_root = TlsSettings {
            mode: SslMode::Require,
            root: Some(RootCert::File(path.clone())),
        };
        assert_eq!(with_root.resolve().unwrap().0, Check::Chain);
        let err = with_root.connector().err().unwrap().to_string();
        assert!(err.contains("holds no certificate"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        let missing = TlsSettings {
            mode: SslMode::VerifyFull,
            root: Some(RootCert::File(dir.path().join("nope.pem"))),
        };
        let err = missing.connector().err().unwrap().to_string();
        assert!(err.contains("cannot read sslrootcert="), "{err}");
    }
}
