//! The web dashboard (docs/design.md §15): static files compiled into the binary and served under
//! `/ui/` with their content type, an ETag, and the security headers. The page itself signs
//! every API call like any other client, so serving its files needs no signature.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

type Reply = Response<Full<Bytes>>;

/// One file of the dashboard.
struct Asset {
    /// Path under `/ui/`; `""` is the page itself.
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $file:literal, $type:literal) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!("../ui/", $file)),
        }
    };
}

static ASSETS: &[Asset] = &[
    asset!("", "index.html", "text/html; charset=utf-8"),
    asset!("style.css", "style.css", "text/css; charset=utf-8"),
    asset!("app.js", "app.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "api.js", "text/javascript; charset=utf-8"),
    asset!("dom.js", "dom.js", "text/javascript; charset=utf-8"),
    asset!("pages.js", "pages.js", "text/javascript; charset=utf-8"),
    asset!("sha256.js", "sha256.js", "text/javascript; charset=utf-8"),
    asset!("words.js", "words.js", "text/javascript; charset=utf-8"),
    asset!("favicon.svg", "favicon.svg", "image/svg+xml"),
];

/// No inline script, no other origin, no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'self'; object-src 'none'";

/// The total size of the dashboard's files, uncompressed (kept under 200 KB by a test).
pub fn total_bytes() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// Each asset's strong ETag: a hash of its bytes, computed once.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = Sha256::digest(a.body);
                let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

fn secure_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Reply {
    let mut reply = Response::new(Full::new(body));
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secure_headers(reply.headers_mut());
    reply
}

fn redirect(to: &'static str) -> Reply {
    let mut r = reply(StatusCode::FOUND, "text/plain; charset=utf-8", Bytes::new());
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    r
}

/// Whether this path belongs to the dashboard: `/`, `/ui` and everything under `/ui/`.
pub fn owns(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// Serves a dashboard path (see [`owns`]). GET and HEAD only; `If-None-Match` gets a 304.
pub fn serve(method: &Method, path: &str, request_headers: &HeaderMap) -> Reply {
    if method != Method::GET && method != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"method not allowed: the dashboard's files take GET and HEAD\n"),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if path == "/" || path == "/ui" {
        return redirect("/ui/");
    }
    let name = path.strip_prefix("/ui/").unwrap_or_default();
    let Some(index) = ASSETS.iter().position(|a| a.path == name) else {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"no such dashboard file\n"),
        );
    };
    let asset = &ASSETS[index];
    let etag = &etags()[index];
    let fresh = request_headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let body = if fresh || method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from_static(asset.body)
    };
    let status = if fresh {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let mut r = reply(status, asset.content_type, body);
    let headers = r.headers_mut();
    if method == Method::HEAD && !fresh {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(asset.body.len()));
    }
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    // Revalidate every time (a 304 costs one small round trip), so an upgraded binary's files
    // are picked up at once without versioned names.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_dashboard_stays_under_200_kb() {
        assert!(total_bytes() < 200 * 1024, "{} bytes", total_bytes());
    }

    #[test]
    fn serves_assets_with_headers_etag_and_304() {
        let r = serve(&Method::GET, "/ui/app.js", &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        let h = r.headers();
        assert!(
            h[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/javascript")
        );
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], CSP);
        let etag = h[header::ETAG].clone();
        let mut conditional = HeaderMap::new();
        conditional.insert(header::IF_NONE_MATCH, etag);
        let again = serve(&Method::GET, "/ui/app.js", &conditional);
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(
            serve(&Method::GET, "/", &HeaderMap::new()).status(),
            StatusCode::FOUND
        );
        assert_eq!(
            serve(&Method::GET, "/ui/nope.js", &HeaderMap::new()).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            serve(&Method::POST, "/ui/", &HeaderMap::new()).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    #[test]
    fn no_asset_names_another_origin_or_inline_script() {
        // Absolute URLs that are text, not something loaded: the SVG namespace and the URL
        // field's placeholder. The browser test records every request besides.
        const ALLOWED: [&str; 2] = [
            "http://www.w3.org/2000/svg",
            "https://receiver.example/hook",
        ];
        for a in ASSETS {
            let mut text = String::from_utf8_lossy(a.body).into_owned();
            for allowed in ALLOWED {
                text = text.replace(allowed, "");
            }
            assert!(
                !text.contains("http://") && !text.contains("https://") && !text.contains("url("),
                "{} names an absolute URL",
                a.path
            );
            assert!(!text.contains("innerHTML"), "{} uses innerHTML", a.path);
        }
        let page = String::from_utf8_lossy(ASSETS[0].body);
        assert!(!page.contains("<script>") && !page.contains(" on"));
    }
}
