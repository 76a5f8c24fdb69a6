//! A `postgres://` / `postgresql://` URL that never shows its password: `Display` and `Debug`
//! print `***` in its place, so the URL can go into error messages and log lines as it is.

use std::fmt;

/// A parsed PostgreSQL connection URL. The raw text is kept private; only the redacted form is
/// ever printed.
#[derive(Clone)]
pub struct PgUrl {
    raw: String,
    config: postgres::Config,
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
        let config = raw
            .parse::<postgres::Config>()
            .map_err(|e| anyhow::anyhow!("{} is not a valid PostgreSQL URL: {e}", redact(raw)))?;
        Ok(PgUrl {
            raw: raw.to_string(),
            config,
        })
    }

    /// The driver's connection settings (these hold the password: never print them).
    pub fn config(&self) -> &postgres::Config {
        &self.config
    }
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
    fn only_postgres_schemes_are_urls() {
        assert!(is_url("postgres://h/db"));
        assert!(is_url("PostgreSQL://h/db"));
        assert!(!is_url("data.sqlite"));
        assert!(!is_url("postgres:"));
        assert!(!is_url("./postgres://x"));
        assert!(PgUrl::parse("data.sqlite").is_err());
    }
}
