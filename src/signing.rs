//! HMAC-SHA256 signing: the inbound `X-Signature` / outbound `X-Service-Signature` hex scheme
//! (CONTRACT.md §2 and §6) and the Standard Webhooks `webhook-signature` header (§6).

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
