//! A `postgres://` / `postgresql://` URL that never shows its password: `Display` and `Debug`
//! print `***` in its place, so the URL can go into error messages and log lines as it is.
//! The TLS parameters (`sslmode`, `sslrootcert`) are read here as libpq reads them and handed
//! to `tls.rs`; the driver gets the rest.

use super::tls::{RootCert, SslMode, TlsSettings};
use std::fmt;

/// A parsed PostgreSQL connection URL. The raw text is kept private; only the redacted form is
/// ever printed.
#[derive(Clone)]
pub struct PgUrl {
    raw: String,
    config: postgres::Config,
    tls: TlsSettings,
    /// The query parameters the URL sets (their names), so defaults never override them.
    given: Vec<String>,
}

/// Whether `--db` names a PostgreSQL database (a `postgres://` or `postgresql://` URL) rather
/// than a SQLite file path.
pub fn is_url(db: &str) -> bool {
    scheme_len(db).is_some()
}

/// Length of the `postgres://` or `postgresql://` prefix (any letter case), if present.
fn scheme_len(s: &str) -> Option<usize> {
    ["postgresql://", "postgres://"].iter().find_map(|scheme| {
        s.get(..scheme.len())
            .filter(|head| head.eq_ignore_ascii_case(scheme))
            .map(|_| scheme.len())
    })
}

impl PgUrl {
    /// Parses a connection URL; the error names the URL with its password hidden.
    pub fn parse(raw: &str) -> anyhow::Result<PgUrl> {
        if !is_url(raw) {
            anyhow::bail!("{} is not a postgres:// or postgresql:// URL", redact(raw));
        }
        let invalid = |why: &dyn fmt::Display| {
            anyhow::anyhow!("{} is not a valid PostgreSQL URL: {why}", redact(raw))
        };
        let (base, query) = raw.split_once('?').unwrap_or((raw, ""));
        let mut tls = TlsSettings::default();
        let mut given = Vec::new();
        let mut driver_params = Vec::new();
        for param in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let key_text = percent_decode(key).map_err(|e| invalid(&e))?;
            match key_text.as_str() {
                "sslmode" => {
                    let value = percent_decode(value).map_err(|e| invalid(&e))?;
                    tls.mode = SslMode::parse(&value).map_err(|e| invalid(&e))?;
                }
                "sslrootcert" => {
                    let value = percent_decode(value).map_err(|e| invalid(&e))?;
                    tls.root = Some(match value.as_str() {
                        "system" => RootCert::System,
                        "" => return Err(invalid(&"sslrootcert is empty")),
                        path => RootCert::File(path.into()),
                    });
                }
                "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(invalid(&format!(
                        "{key_text}: client certificates are not supported; authenticate with a password"
                    )));
                }
                _ => driver_params.push(param),
            }
            given.push(key_text);
        }
        tls.validate().map_err(|e| invalid(&e))?;
        let driver_url = if driver_params.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", driver_params.join("&"))
        };
        let mut config = driver_url
            .parse::<postgres::Config>()
            .map_err(|e| invalid(&e))?;
        config.ssl_mode(super::tls::driver_mode(tls.mode));
        Ok(PgUrl {
            raw: raw.to_string(),
            config,
            tls,
            given,
        })
    }

    /// The driver's connection settings (these hold the password: never print them).
    pub fn config(&self) -> &postgres::Config {
        &self.config
    }

    /// The URL's `sslmode` and `sslrootcert`.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// Whether the URL sets query parameter `key` (e.g. `connect_timeout`).
    pub fn sets(&self, key: &str) -> bool {
        self.given.iter().any(|k| k == key)
    }
}

/// `%XX` escapes decoded (as libpq decodes URL parameters); `+` stays a `+`.
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("invalid percent-encoded token in {text:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.raw))
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({})", redact(&self.raw))
    }
}

/// `raw` with the password of its user-info part and any `password=` query parameter replaced
/// by `***`. When unsure where the user info ends (an `@` in the path), it hides more, not less.
pub fn redact(raw: &str) -> String {
    let start = scheme_len(raw).unwrap_or(0);
    let query_at = raw[start..].find('?').map_or(raw.len(), |i| start + i);
    let mut out = String::with_capacity(raw.len());
    out.push_str(&raw[..start]);
    match raw[start..query_at].rfind('@') {
        Some(at) => {
            let user_info = &raw[start..start + at];
            match user_info.find(':') {
                Some(colon) => {
                    out.push_str(&user_info[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str(user_info),
            }
            out.push_str(&raw[start + at..query_at]);
        }
        None => out.push_str(&raw[start..query_at]),
    }
    if query_at < raw.len() {
        out.push('?');
        let params = raw[query_at + 1..]
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => param.to_string(),
            });
        out.push_str(&params.collect::<Vec<_>>().join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_hidden_wherever_it_is_written() {
        let cases = [
            (
                "postgres://webhookd:hunter2@db.example:5432/hooks",
                "postgres://webhookd:***@db.example:5432/hooks",
            ),
            (
                "postgresql://u:p%40ss:w@host/db?sslmode=disable",
                "postgresql://u:***@host/db?sslmode=disable",
            ),
            (
                "postgres://u@host/db?password=hunter2&application_name=x",
                "postgres://u@host/db?password=***&application_name=x",
            ),
            ("POSTGRES://u:a@b@host/db", "POSTGRES://u:***@host/db"),
            ("postgres://host/db", "postgres://host/db"),
            ("postgres://u:@host", "postgres://u:***@host"),
        ];
        for (raw, shown) in cases {
            assert_eq!(redact(raw), shown, "{raw}");
        }
    }

    #[test]
    fn display_debug_and_parse_errors_never_show_the_password() {
        let url = PgUrl::parse("postgres://webhookd:hunter2@127.0.0.1:5432/hooks").unwrap();
        assert_eq!(
            url.to_string(),
            "postgres://webhookd:***@127.0.0.1:5432/hooks"
        );
        assert!(!format!("{url:?}").contains("hunter2"));
        assert!(!format!("{:?}", url.config()).contains("hunter2"));
        assert_eq!(url.config().get_password(), Some(&b"hunter2"[..]));
        let bad = PgUrl::parse("postgres://webhookd:hunter2@127.0.0.1:notaport/hooks")
            .unwrap_err()
            .to_string();
        assert!(!bad.contains("hunter2"), "{bad}");
        assert!(bad.contains("webhookd:***@"), "{bad}");
    }

    #[test]
    fn tls_parameters_are_read_as_libpq_reads_them() {
        let url = PgUrl::parse("postgres://u:pw@db.example/hooks").unwrap();
        assert_eq!(url.tls(), &TlsSettings::default());
        assert_eq!(url.tls().mode, SslMode::Prefer, "libpq's default");
        let url = PgUrl::parse(
            "postgres://u:pw@db.example/hooks?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20dir%2Froot.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(url.tls().mode, SslMode::VerifyFull);
        assert_eq!(
            url.tls().root,
            Some(RootCert::File("/etc/ca dir/root.pem".into()))
        );
        assert_eq!(
            url.config().get_ssl_mode(),
            postgres::config::SslMode::Require
        );
        assert_eq!(url.config().get_application_name(), Some("x"));
        assert!(url.sets("connect_timeout") && url.sets("sslmode"));
        assert!(!url.sets("keepalives_idle"));
        let url = PgUrl::parse("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(
            url.config().get_ssl_mode(),
            postgres::config::SslMode::Disable
        );
        let url = PgUrl::parse("postgres://h/db?sslrootcert=system&sslmode=verify-full").unwrap();
        assert_eq!(url.tls().root, Some(RootCert::System));
        for (bad, says) in [
            (
                "postgres://u:hunter2@h/db?sslmode=verify_full",
                "verify-full",
            ),
            ("postgres://u:hunter2@h/db?sslmode=allow", "not supported"),
            (
                "postgres://u:hunter2@h/db?sslrootcert=system",
                "needs sslmode=verify-full",
            ),
            (
                "postgres://u:hunter2@h/db?sslcert=c.pem",
                "client certificates",
            ),
            ("postgres://u:hunter2@h/db?sslrootcert=%zz", "percent"),
        ] {
            let err = PgUrl::parse(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn only_postgres_schemes_are_urls() {
        assert!(is_url("postgres://h/db"));
        assert!(is_url("PostgreSQL://h/db"));
        assert!(!is_url("data.sqlite"));
        assert!(!is_url("postgres:"));
        assert!(!is_url("./postgres://x"));
        assert!(PgUrl::parse("data.sqlite").is_err());
    }
}
