//! Which addresses a delivery may dial (docs/design.md §6): link-local targets are refused unless
//! `--allow-targets` names them; `--deny-private-targets` also refuses loopback, RFC 1918,
//! CGNAT and unique-local ones. The check runs on the addresses DNS gave, inside the HTTP
//! client's resolver, so what is checked is what is dialled.

use crate::config::Cidr;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ureq::config::Config as UreqConfig;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// The kind of address a target resolved to, as far as the target rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// 169.254.0.0/16, fe80::/10: where cloud metadata services live. Always refused.
    LinkLocal,
    /// 127.0.0.0/8, ::1, and the unspecified 0.0.0.0 / :: (which reach this host).
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// 100.64.0.0/10, carrier-grade NAT.
    Cgnat,
    /// fc00::/7.
    UniqueLocal,
    Public,
}

impl AddressClass {
    pub fn of(ip: IpAddr) -> AddressClass {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::of_v4(v4),
                None => Self::of_v6(v6),
            },
        }
    }

    fn of_v4(ip: Ipv4Addr) -> AddressClass {
        let [a, b, ..] = ip.octets();
        if ip.is_link_local() {
            AddressClass::LinkLocal
        } else if ip.is_loopback() || ip.is_unspecified() || a == 0 {
            AddressClass::Loopback
        } else if ip.is_private() {
            AddressClass::Private
        } else if a == 100 && (64..128).contains(&b) {
            AddressClass::Cgnat
        } else {
            AddressClass::Public
        }
    }

    fn of_v6(ip: Ipv6Addr) -> AddressClass {
        let first = ip.segments()[0];
        if first & 0xffc0 == 0xfe80 {
            AddressClass::LinkLocal
        } else if ip.is_loopback() || ip.is_unspecified() {
            AddressClass::Loopback
        } else if first & 0xfe00 == 0xfc00 {
            AddressClass::UniqueLocal
        } else {
            AddressClass::Public
        }
    }

    fn describe(self) -> &'static str {
        match self {
            AddressClass::LinkLocal => "link-local (where cloud metadata services live)",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private (RFC 1918) address",
            AddressClass::Cgnat => "a carrier-grade NAT (100.64.0.0/10) address",
            AddressClass::UniqueLocal => "a unique-local (fc00::/7) address",
            AddressClass::Public => "a public address",
        }
    }
}

/// The target rules of a running server.
#[derive(Debug, Clone, Default)]
pub struct TargetRules {
    pub allow: Vec<Cidr>,
    pub deny_private: bool,
}

impl TargetRules {
    /// Why a delivery may not dial `ip` (naming the flag that would allow it), or `None`.
    pub fn refusal(&self, ip: IpAddr) -> Option<String> {
        if self.allow.iter().any(|net| net.contains(ip)) {
            return None;
        }
        let class = AddressClass::of(ip);
        let what = class.describe();
        match class {
            AddressClass::Public => None,
            AddressClass::LinkLocal => Some(format!(
                "target refused: {ip} is {what}; allow it with --allow-targets {ip}"
            )),
            _ if self.deny_private => Some(format!(
                "target refused: {ip} is {what}, refused by --deny-private-targets; allow it with --allow-targets {ip}"
            )),
            _ => None,
        }
    }
}

/// The HTTP client's resolver: the system's DNS, then the target rules on every address. When
/// all addresses are refused the request fails with a `PermissionDenied` I/O error saying why.
#[derive(Debug)]
pub struct GuardedResolver {
    pub rules: TargetRules,
    inner: DefaultResolver,
    /// Recent lookups by `host:port`: a delivery should not cost a DNS query (and the thread
    /// the default resolver spawns for it) when the connection itself is pooled.
    cache: Mutex<HashMap<String, (Instant, ResolvedSocketAddrs)>>,
}

/// How long a DNS answer is reused.
const DNS_TTL: Duration = Duration::from_secs(10);
/// Above this many cached hosts the cache starts over.
const DNS_CACHE_HOSTS: usize = 1024;

impl GuardedResolver {
    pub fn new(rules: TargetRules) -> Self {
        GuardedResolver {
            rules,
            inner: DefaultResolver::default(),
            cache: Mutex::default(),
        }
    }

    fn lookup(
        &self,
        uri: &Uri,
        config: &UreqConfig,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        if let Some(addr) = literal_address(uri) {
            let mut one = self.empty();
            one.push(addr);
            return Ok(one);
        }
        let key = uri.authority().map(|a| a.as_str().to_string());
        let cache = || self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = &key
            && let Some((at, addrs)) = cache().get(key)
            && at.elapsed() < DNS_TTL
        {
            return Ok(addrs.clone());
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        if let Some(key) = key {
            let mut cache = cache();
            if cache.len() >= DNS_CACHE_HOSTS {
                cache.clear();
            }
            cache.insert(key, (Instant::now(), addrs.clone()));
        }
        Ok(addrs)
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &UreqConfig,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let resolved = self.lookup(uri, config, timeout)?;
        let mut allowed = self.empty();
        let mut refusal = None;
        for addr in resolved.iter() {
            match self.rules.refusal(addr.ip()) {
                None => allowed.push(*addr),
                Some(why) => refusal = refusal.or(Some(why)),
            }
        }
        match refusal {
            Some(why) if allowed.is_empty() => Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                why,
            ))),
            _ => Ok(allowed),
        }
    }
}

/// The socket address of a URL whose host is an IP address (`http://127.0.0.1:8080/`,
/// `https://[::1]/`).
fn literal_address(uri: &Uri) -> Option<SocketAddr> {
    let host = uri.host()?;
    let ip: IpAddr = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()?;
    let port = uri.port_u16().or(match uri.scheme_str()? {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classifies_addresses() {
        use AddressClass::*;
        for (addr, class) in [
            ("169.254.169.254", LinkLocal),
            ("fe80::1", LinkLocal),
            ("::ffff:169.254.1.1", LinkLocal),
            ("127.0.0.1", Loopback),
            ("0.0.0.0", Loopback),
            ("::1", Loopback),
            ("10.1.2.3", Private),
            ("172.31.0.1", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", Cgnat),
            ("100.127.255.254", Cgnat),
            ("100.128.0.1", Public),
            ("fd12::1", UniqueLocal),
            ("8.8.8.8", Public),
            ("2001:db8::1", Public),
        ] {
            assert_eq!(AddressClass::of(ip(addr)), class, "{addr}");
        }
    }

    #[test]
    fn link_local_is_refused_unless_allowed() {
        let rules = TargetRules::default();
        let why = rules.refusal(ip("169.254.169.254")).unwrap();
        assert!(
            why.contains("link-local") && why.contains("--allow-targets"),
            "{why}"
        );
        assert_eq!(rules.refusal(ip("127.0.0.1")), None);
        assert_eq!(rules.refusal(ip("10.0.0.1")), None);
        let allowed = TargetRules {
            allow: vec!["169.254.169.254/32".parse().unwrap()],
            deny_private: false,
        };
        assert_eq!(allowed.refusal(ip("169.254.169.254")), None);
        assert!(allowed.refusal(ip("169.254.169.253")).is_some());
    }

    #[test]
    fn ip_literals_need_no_lookup() {
        let addr = |url: &str| literal_address(&url.parse().unwrap());
        assert_eq!(
            addr("http://127.0.0.1:8080/x"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(addr("https://[::1]/"), Some("[::1]:443".parse().unwrap()));
        assert_eq!(
            addr("http://169.254.169.254/"),
            Some("169.254.169.254:80".parse().unwrap())
        );
        assert_eq!(addr("http://example.com/"), None);
    }

    #[test]
    fn deny_private_refuses_private_ranges_unless_allowed() {
        let rules = TargetRules {
            allow: vec!["10.9.0.0/16".parse().unwrap()],
            deny_private: true,
        };
        for addr in [
            "127.0.0.1",
            "::1",
            "10.0.0.1",
            "192.168.0.1",
            "100.64.1.1",
            "fc00::1",
        ] {
            let why = rules.refusal(ip(addr)).unwrap();
            assert!(why.contains("--deny-private-targets"), "{why}");
        }
        assert_eq!(rules.refusal(ip("10.9.1.1")), None);
        assert_eq!(rules.refusal(ip("93.184.216.34")), None);
    }
}
