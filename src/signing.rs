//! HMAC-SHA256 signing: the inbound `X-Signature` / outbound `X-Service-Signature` hex scheme
//! and the Standard Webhooks `webhook-signature` header (docs/API.md, "Authentication" and
//! "Signatures on deliveries"), and the receiver's side: [`verify_delivery`].

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Prefix of Standard Webhooks secrets whose remainder is base64-encoded key bytes.
const WHSEC_PREFIX: &str = "whsec_";

fn mac_with_key(key: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// The MAC over `timestamp + "\n" + payload`, not yet finalized.
fn timestamped_mac(key: &[u8], timestamp: &str, payload: &[u8]) -> HmacSha256 {
    let mut mac = mac_with_key(key);
    mac.update(timestamp.as_bytes());
    mac.update(b"\n");
    mac.update(payload);
    mac
}

/// Lowercase hex HMAC-SHA256(key, timestamp + "\n" + payload). Used for inbound request auth
/// (X-Signature) and for outbound X-Service-Signature.
pub fn hmac_hex(key: &[u8], timestamp: &str, payload: &[u8]) -> String {
    hex_encode(
        &timestamped_mac(key, timestamp, payload)
            .finalize()
            .into_bytes(),
    )
}

/// Constant-time check of a hex signature (upper or lower case accepted) against the expected one.
///
/// A signature that is not valid hex, or does not decode to exactly 32 bytes, is rejected. The
/// comparison of the decoded bytes is done by `Mac::verify_slice`, which is constant-time.
pub fn verify_hex(key: &[u8], timestamp: &str, payload: &[u8], signature_hex: &str) -> bool {
    let Some(tag) = hex_decode(signature_hex) else {
        return false;
    };
    timestamped_mac(key, timestamp, payload)
        .verify_slice(&tag)
        .is_ok()
}

/// Standard Webhooks signature header value: `"v1," + base64(HMAC-SHA256(key, "{msg_id}.{timestamp}.{body}"))`.
///
/// The key is the base64-decoded (standard alphabet, padded) rest of the secret when it starts
/// with `whsec_`, else the secret's UTF-8 bytes. If a `whsec_` secret's remainder is not valid
/// base64, the raw UTF-8 bytes of the *whole* secret (prefix included) are used instead, so a
/// signature is still produced rather than failing the delivery.
pub fn standard_webhooks_signature(
    secret: &str,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    let decoded = secret
        .strip_prefix(WHSEC_PREFIX)
        .and_then(|rest| BASE64.decode(rest).ok());
    let key: &[u8] = decoded.as_deref().unwrap_or(secret.as_bytes());

    let mut mac = mac_with_key(key);
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// Whether the Standard Webhooks header `header` (`v1,<base64>`, several space-separated
/// during a secret rotation) holds a signature made with `secret`. Compared in constant time.
pub fn verify_standard_webhooks(
    secret: &str,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
    header: &str,
) -> bool {
    let expected = standard_webhooks_signature(secret, msg_id, timestamp, body);
    header
        .split(' ')
        .filter(|candidate| !candidate.is_empty())
        .fold(false, |found, candidate| {
            found | constant_time_eq(candidate.as_bytes(), expected.as_bytes())
        })
}

/// Compares without an early exit, so timing does not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a receiver checks on a delivery signed with `secret`, given a lookup of its headers
/// (case-insensitive names) and the body bytes as received:
/// - `X-Service-Timestamp` is within `tolerance_secs` of `now_secs` (a captured delivery cannot
///   be replayed later) and `webhook-timestamp` equals it;
/// - `X-Service-Signature` holds a hex HMAC-SHA256 keyed with the secret's UTF-8 bytes *as
///   written* (a `whsec_` prefix included) over `timestamp + "\n" + body`;
/// - `webhook-signature` holds a Standard Webhooks signature over
///   `webhook-id + "." + timestamp + "." + body` keyed with the decoded `whsec_` bytes.
///
/// Either header may carry several signatures during a rotation's overlap (`,`-separated hex,
/// space-separated `v1,…`): one made with `secret` is enough. `Err` says what failed.
pub fn verify_delivery<'h>(
    secret: &str,
    header: impl Fn(&str) -> Option<&'h str>,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: i64,
) -> Result<(), String> {
    let timestamp = header("X-Service-Timestamp").ok_or("no X-Service-Timestamp header")?;
    let sent: i64 = timestamp
        .parse()
        .map_err(|_| format!("X-Service-Timestamp {timestamp:?} is not Unix seconds"))?;
    if now_secs.abs_diff(sent) > tolerance_secs.unsigned_abs() {
        return Err(format!(
            "X-Service-Timestamp {sent} is more than {tolerance_secs} s from this clock ({now_secs}): \
             a replay, or a clock to set right"
        ));
    }
    if header("webhook-timestamp") != Some(timestamp) {
        return Err("webhook-timestamp is missing or differs from X-Service-Timestamp".into());
    }
    let hex = header("X-Service-Signature").ok_or("no X-Service-Signature header")?;
    let hex_ok = hex.split(',').fold(false, |found, candidate| {
        found | verify_hex(secret.as_bytes(), timestamp, body, candidate.trim())
    });
    if !hex_ok {
        return Err("X-Service-Signature does not verify with this secret".into());
    }
    let msg_id = header("webhook-id").ok_or("no webhook-id header")?;
    let standard = header("webhook-signature").ok_or("no webhook-signature header")?;
    if !verify_standard_webhooks(secret, msg_id, sent, body, standard) {
        return Err("webhook-signature does not verify with this secret".into());
    }
    Ok(())
}

/// Checks a secret given by a user: one that starts with `whsec_` must have valid base64 (the
/// standard alphabet, padded, as the Standard Webhooks libraries decode it) after the prefix, so
/// what webhookd signs with is what those libraries verify with.
pub fn check_whsec(secret: &str) -> Result<(), String> {
    match secret.strip_prefix(WHSEC_PREFIX) {
        Some(rest) => match BASE64.decode(rest) {
            Ok(key) if !key.is_empty() => Ok(()),
            Ok(_) => Err("a whsec_ secret needs key bytes after the prefix".into()),
            Err(_) => Err("the part after whsec_ must be valid base64".into()),
        },
        None => Ok(()),
    }
}

/// A new random Standard Webhooks secret: `whsec_` and 32 random bytes in base64.
pub fn new_whsec() -> String {
    let key: [u8; 32] = rand::random();
    format!("{WHSEC_PREFIX}{}", BASE64.encode(key))
}

/// Lowercase hex encoding of `bytes`.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// Decodes hex (either case); `None` on odd length or any non-hex character.
pub(crate) fn hex_decode(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values computed independently with Python's `hmac` / `hashlib` / `base64`.
    const BODY_SIG: &str = "efcabe126158887775caa64ceba35b9734f7839cae75b3517440dc283bee13a4";

    #[test]
    fn whsec_secrets_need_base64_after_the_prefix() {
        assert!(check_whsec("plain secret").is_ok());
        assert!(check_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        assert!(check_whsec("whsec_not base64!").is_err());
        assert!(check_whsec("whsec_abc").is_err(), "unpadded");
        assert!(check_whsec("whsec_").is_err(), "no key bytes");
        let fresh = new_whsec();
        assert!(check_whsec(&fresh).is_ok());
        let key = BASE64
            .decode(fresh.strip_prefix(WHSEC_PREFIX).unwrap())
            .unwrap();
        assert_eq!(key.len(), 32);
        assert_ne!(new_whsec(), fresh);
    }

    #[test]
    fn hmac_hex_fixed_vectors() {
        assert_eq!(hmac_hex(b"secret", "1700000000", br#"{"a":1}"#), BODY_SIG);
        assert_eq!(
            hmac_hex(
                "key-é".as_bytes(),
                "1614265330",
                b"GET /v1/endpoints?page=2"
            ),
            "627ee0181f3f45be003bafffb8c91079bb4474d0aee9cff588fea478a33cf857"
        );
        assert_eq!(
            hmac_hex(b"", "0", b""),
            "43db443c33e9a8f9c06ce4f67cd26e5bc7c70526dc28d1c903f89735eb1bea20"
        );
    }

    #[test]
    fn verify_hex_accepts_lower_and_upper_case() {
        assert!(verify_hex(b"secret", "1700000000", br#"{"a":1}"#, BODY_SIG));
        assert!(verify_hex(
            b"secret",
            "1700000000",
            br#"{"a":1}"#,
            &BODY_SIG.to_uppercase()
        ));
    }

    #[test]
    fn verify_hex_rejects_bad_signatures() {
        let ok = |sig: &str| verify_hex(b"secret", "1700000000", br#"{"a":1}"#, sig);
        // One flipped digit.
        let mut wrong = BODY_SIG.to_string();
        wrong.replace_range(0..1, "f");
        assert!(!ok(&wrong));
        // Truncated (valid hex, wrong length) and odd length.
        assert!(!ok(&BODY_SIG[..62]));
        assert!(!ok(&BODY_SIG[..63]));
        // Too long.
        assert!(!ok(&format!("{BODY_SIG}00")));
        // Non-hex characters, empty, surrounding whitespace.
        assert!(!ok(&BODY_SIG.replace('e', "g")));
        assert!(!ok(""));
        assert!(!ok(&format!(" {BODY_SIG}")));
        // Right signature, wrong key / timestamp / payload.
        assert!(!verify_hex(
            b"secreT",
            "1700000000",
            br#"{"a":1}"#,
            BODY_SIG
        ));
        assert!(!verify_hex(
            b"secret",
            "1700000001",
            br#"{"a":1}"#,
            BODY_SIG
        ));
        assert!(!verify_hex(
            b"secret",
            "1700000000",
            br#"{"a":2}"#,
            BODY_SIG
        ));
    }

    #[test]
    fn standard_webhooks_spec_vector() {
        // Published test vector from the Standard Webhooks specification / reference libraries.
        assert_eq!(
            standard_webhooks_signature(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#,
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn standard_webhooks_plain_secret_uses_utf8_bytes() {
        assert_eq!(
            standard_webhooks_signature("plainsecret", "task_7", 1700000000, b"{}"),
            "v1,Njqkjfk/KYF1Vuo4X77TcKWyfRfxU7w0tsJyjbeeMCY="
        );
    }

    #[test]
    fn standard_webhooks_invalid_whsec_falls_back_to_whole_secret() {
        assert_eq!(
            standard_webhooks_signature("whsec_!!!notbase64", "task_7", 1700000000, b"{}"),
            "v1,0r3KcAUKrOMMnJHBZhX0/VbafLV3WqHAzUZF6detwaA="
        );
    }

    /// The worked example of docs/API.md ("Signatures on deliveries"): the same secret,
    /// timestamp, message id and body, and the same two values, so the guide cannot drift.
    /// Computed independently with Python's `hmac`, `hashlib` and `base64`.
    #[test]
    fn the_worked_example_of_the_api_guide() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"order":42}"#;
        let service = "c6f1a45477c353b346dbd2e9978f30a10b184e92072cdf1d371d28328c5dfbc9";
        let standard = "v1,FJCJ2oktKYB2K2aT1xlRxgzsxEjcj3LD0EzthHT/CW0=";
        // X-Service-Signature: keyed with the secret as written, prefix included.
        assert_eq!(hmac_hex(secret.as_bytes(), "1764000000", body), service);
        // webhook-signature: keyed with the 24 bytes the base64 after `whsec_` decodes to.
        assert_eq!(
            standard_webhooks_signature(secret, "task_42", 1_764_000_000, body),
            standard
        );
        // The mistake the guide warns about: keying the hex scheme with the decoded bytes.
        let decoded = BASE64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            hmac_hex(&decoded, "1764000000", body),
            "267b76ae1ba63ad7443f54c84fda2d6d520fe2623e78cd3dd554ae01f70a29ad"
        );
        assert_ne!(hmac_hex(&decoded, "1764000000", body), service);

        let headers = [
            ("X-Service-Timestamp", "1764000000"),
            ("webhook-timestamp", "1764000000"),
            ("webhook-id", "task_42"),
            ("X-Service-Signature", service),
            ("webhook-signature", standard),
        ];
        let lookup = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        };
        assert_eq!(
            verify_delivery(secret, lookup, body, 1_764_000_100, 300),
            Ok(())
        );
    }

    #[test]
    fn verify_delivery_refuses_what_it_should() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let old = "an old plain secret";
        let body = br#"{"order":42}"#;
        let sign = |s: &str| {
            (
                hmac_hex(s.as_bytes(), "1764000000", body),
                standard_webhooks_signature(s, "task_42", 1_764_000_000, body),
            )
        };
        let (new_hex, new_v1) = sign(secret);
        let (old_hex, old_v1) = sign(old);
        let check = |hex: &str, v1: &str, body: &[u8], now: i64, secret: &str| {
            let headers = [
                ("x-service-timestamp", "1764000000"),
                ("webhook-timestamp", "1764000000"),
                ("webhook-id", "task_42"),
                ("x-service-signature", hex),
                ("webhook-signature", v1),
            ];
            let lookup = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| *v)
            };
            verify_delivery(secret, lookup, body, now, 300)
        };
        let now = 1_764_000_000;
        assert_eq!(check(&new_hex, &new_v1, body, now, secret), Ok(()));
        // A rotation's overlap: either secret verifies the pair of signatures.
        let both_hex = format!("{new_hex},{old_hex}");
        let both_v1 = format!("{new_v1} {old_v1}");
        assert_eq!(check(&both_hex, &both_v1, body, now, secret), Ok(()));
        assert_eq!(check(&both_hex, &both_v1, body, now, old), Ok(()));
        // A tampered body, another secret, a stale or future timestamp.
        let tampered = br#"{"order":43}"#;
        assert!(
            check(&new_hex, &new_v1, tampered, now, secret)
                .unwrap_err()
                .contains("X-Service-Signature")
        );
        assert!(check(&new_hex, &new_v1, body, now, old).is_err());
        assert!(
            check(&new_hex, &new_v1, body, now + 301, secret)
                .unwrap_err()
                .contains("more than 300 s")
        );
        assert!(check(&new_hex, &new_v1, body, now - 301, secret).is_err());
        // One header right and the other wrong is refused.
        assert!(
            check(&new_hex, &old_v1, body, now, secret)
                .unwrap_err()
                .contains("webhook-signature")
        );
        assert!(check(&old_hex, &new_v1, body, now, secret).is_err());
    }

    #[test]
    fn hex_round_trip() {
        let bytes: Vec<u8> = (0..=255).collect();
        let hex = hex_encode(&bytes);
        assert_eq!(hex.len(), 512);
        assert!(hex.starts_with("000102"));
        assert!(hex.ends_with("fdfeff"));
        assert_eq!(hex_decode(&hex).unwrap(), bytes);
        assert_eq!(hex_decode(&hex.to_uppercase()).unwrap(), bytes);
        assert_eq!(hex_decode("").unwrap(), Vec::<u8>::new());
        assert!(hex_decode("abc").is_none());
        assert!(hex_decode("zz").is_none());
    }
}
