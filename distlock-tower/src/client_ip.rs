//! The client's IP address as a rate-limit subject: the connection's peer, or, behind proxies
//! you trust, the address they forwarded.
//!
//! [`ClientIp`] reads the peer from axum's `ConnectInfo<SocketAddr>` (serve the router with
//! `into_make_service_with_connect_info::<SocketAddr>()`), or, without axum (or when a server
//! of your own puts it there), from a plain [`SocketAddr`] in the request's extensions: one
//! `request.extensions_mut().insert(peer)` per request in your accept loop. It believes `X-Forwarded-For` or
//! `Forwarded` (RFC 7239) only when the peer is one of the [`Cidr`]s you configured as
//! trusted, and then walks the header **right to left**: each hop was appended by the proxy to
//! its right, so the walk skips trusted proxies and stops at the first address that is not
//! one of them. Everything left of that point was written by the client and is ignored, so a
//! client cannot pick its own bucket by sending a forged header.
//!
//! The walk works on the raw bytes of each line, split on `,`, and parses each hop on its
//! own: a hop that is not text is simply not an address. So whatever bytes a client puts in
//! its part of the line (obs-text, tabs, anything a header value may hold) never hide the hops
//! the proxies appended after it.
//!
//! IPv6 clients are grouped by /64 by default (one customer usually gets a whole /64, and
//! rotating through it is free), IPv4 clients by /32; both are configurable. IPv4-mapped
//! IPv6 addresses count as IPv4.
//!
//! Nothing here panics on hostile input: huge, repeated, empty or garbage headers, bytes that
//! are not text, ports, brackets, IPv6 zones and obfuscated identifiers are all handled, and
//! the walk stops after [`MAX_HOPS`] hops. The key is [absent](crate::extract::Extracted::Absent)
//! only when the request carries no peer address; it is never invalid (at worst it is the
//! trusted peer's own address). The first time that happens the extractor says so at `warn`
//! level, once (and the layer at `debug` for each such request), since it almost always means
//! the server was started without `ConnectInfo`: every request would get `400`.
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::extract::ConnectInfo;
//! use distlock_tower::client_ip::{ClientIp, Cidr};
//! use distlock_tower::ExtractKey;
//! use http::Request;
//!
//! # fn main() -> Result<(), distlock_tower::client_ip::InvalidCidr> {
//! let behind_lb = ClientIp::trusting(["10.0.0.0/8".parse::<Cidr>()?]);
//!
//! let mut request = Request::get("/")
//!     .header("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2")
//!     .body(())
//!     .unwrap();
//! request
//!     .extensions_mut()
//!     .insert(ConnectInfo("10.0.0.1:443".parse::<SocketAddr>().unwrap()));
//!
//! // 10.0.0.1 (peer) and 10.0.0.2 are our proxies; 203.0.113.7 is the client; 6.6.6.6 was
//! // made up by the client and is ignored.
//! assert_eq!(behind_lb.extract_key(&request).key(), Some("203.0.113.7"));
//!
//! // Without trusted proxies the header is ignored: the peer is the client.
//! assert_eq!(ClientIp::peer().extract_key(&request).key(), Some("10.0.0.1"));
//! # Ok(()) }
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Request, header};
use ipnet::{IpNet, Ipv4Net};

use crate::config_error::ConfigError;
use crate::extract::{ExtractKey, Extracted};

/// The most hops a forwarded-header walk visits before it stops (at the last trusted hop).
pub const MAX_HOPS: usize = 32;

/// An IP network in CIDR notation: `10.0.0.0/8`, `2001:db8::/32`, or one address
/// (`192.0.2.1`, meaning /32 or /128). Host bits are cleared, so `10.1.2.3/8` is `10.0.0.0/8`.
///
/// A thin layer over [`ipnet::IpNet`], which does the parsing and the masking (convert with
/// `From` either way). What this type adds is ours: a bare address is a network of one, host
/// bits are cleared rather than kept, and an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, what
/// a dual-stack socket reports for an IPv4 peer) belongs to the IPv4 network, since it is the
/// same client. `IpNet` itself tells the two families apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr(IpNet);

/// A string that is not an address or CIDR network.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR network {text:?}: expected an address or address/prefix, e.g. 10.0.0.0/8")]
pub struct InvalidCidr {
    text: String,
}

impl Cidr {
    /// The network of `addr` with `prefix` leading bits, or `None` if the prefix is longer
    /// than the address (32 for IPv4, 128 for IPv6).
    #[must_use]
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        IpNet::new(addr, prefix).ok().map(Self::from)
    }

    /// The network address.
    #[must_use]
    pub fn network(&self) -> IpAddr {
        self.0.network()
    }

    /// The prefix length.
    #[must_use]
    pub fn prefix(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Whether `ip` is inside this network. IPv4-mapped IPv6 addresses match IPv4 networks.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

/// The network `net` names, host bits cleared; an IPv4-mapped IPv6 network of at least 96
/// bits becomes the IPv4 network it maps.
impl From<IpNet> for Cidr {
    fn from(net: IpNet) -> Self {
        let net = net.trunc();
        match net {
            IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
                Some(v4) => Ipv4Net::new(v4, v6.prefix_len() - 96)
                    .map_or(Self(net), |v4| Self(IpNet::V4(v4))),
                None => Self(net),
            },
            other => Self(other),
        }
    }
}

impl From<Cidr> for IpNet {
    fn from(cidr: Cidr) -> Self {
        cidr.0
    }
}

impl FromStr for Cidr {
    type Err = InvalidCidr;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCidr {
            text: text.to_owned(),
        };
        let trimmed = text.trim();
        let net = if trimmed.contains('/') {
            IpNet::from_str(trimmed).map_err(|_| invalid())?
        } else {
            IpNet::from(IpAddr::from_str(trimmed).map_err(|_| invalid())?)
        };
        Ok(Self::from(net))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Which forwarded header the trusted proxies write. Exactly one is read: a header your
/// proxies do not write is entirely the client's to invent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the de-facto standard). The default.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239); only the `for` parameters are read.
    Forwarded,
}

/// Extracts the client's IP address (grouped into a network, see the
/// [module docs](self)) as the request's key; [absent](Extracted::Absent) when the request
/// carries no peer address (see [`peer_addr`]).
#[derive(Clone, Debug)]
pub struct ClientIp {
    trusted: Arc<[Cidr]>,
    header: ForwardedHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    /// Whether a request without a peer address was reported (at WARN, once per extractor
    /// and its clones): every such request is answered `400` or let through unkeyed, and a
    /// server started without `ConnectInfo` sends nothing else.
    warned_no_peer: Arc<AtomicBool>,
}

/// The settings of a [`ClientIp`], checked together by [`build`](Self::build). Made by
/// [`ClientIp::builder`]; consuming, as the layers' builders.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until it is built"]
pub struct ClientIpBuilder {
    client_ip: ClientIp,
    trust_every_address: bool,
    allow_zero_prefix: bool,
}

impl ClientIpBuilder {
    /// The proxies whose forwarded hops are believed (default none: the peer is the client);
    /// see [`ClientIp::trusting`].
    pub fn trusting(mut self, proxies: impl IntoIterator<Item = Cidr>) -> Self {
        self.client_ip.trusted = proxies.into_iter().collect();
        self
    }

    /// Which header the trusted proxies write (default `X-Forwarded-For`).
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.client_ip.header = header;
        self
    }

    /// How many leading bits of an IPv6 address make one client (default 64), at most 128
    /// (checked by [`build`](Self::build)).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.client_ip.ipv6_prefix = bits;
        self
    }

    /// How many leading bits of an IPv4 address make one client (default 32), at most 32
    /// (checked by [`build`](Self::build)).
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.client_ip.ipv4_prefix = bits;
        self
    }

    /// Lets [`trusting`](Self::trusting) name a network of every address (`0.0.0.0/0`,
    /// `::/0`): every peer is then a trusted proxy, and the client's address is whatever the
    /// leftmost forwarded hop says, which any client can write. Only behind a proxy layer
    /// that overwrites the header on every path in. Refused by [`build`](Self::build)
    /// unless said here.
    pub fn trust_every_address(mut self) -> Self {
        self.trust_every_address = true;
        self
    }

    /// Lets [`ipv4_prefix`](Self::ipv4_prefix) or [`ipv6_prefix`](Self::ipv6_prefix) be 0:
    /// every client of that family is then one key (one budget, one lock). Refused by
    /// [`build`](Self::build) unless said here.
    pub fn allow_zero_prefix(mut self) -> Self {
        self.allow_zero_prefix = true;
        self
    }

    /// The extractor, or [`ConfigError::PrefixTooLong`] for a prefix longer than its
    /// address, or [`ConfigError::InvalidSetting`] for a trusted network of every address or
    /// a zero prefix that was not allowed by name.
    pub fn build(self) -> Result<ClientIp, ConfigError> {
        let ClientIp {
            ipv4_prefix,
            ipv6_prefix,
            ..
        } = self.client_ip;
        if !self.trust_every_address
            && let Some(all) = self
                .client_ip
                .trusted
                .iter()
                .find(|c| c.0.prefix_len() == 0)
        {
            return Err(ConfigError::InvalidSetting {
                setting: "trusting",
                reason: format!(
                    "{all} trusts every address as a proxy, so any client can choose its own \
                     address; say trust_every_address() if that is meant"
                ),
            });
        }
        if !self.allow_zero_prefix && (ipv4_prefix == 0 || ipv6_prefix == 0) {
            return Err(ConfigError::InvalidSetting {
                setting: if ipv4_prefix == 0 {
                    "ipv4_prefix"
                } else {
                    "ipv6_prefix"
                },
                reason: "0 bits make every client one key; say allow_zero_prefix() if that is \
                         meant"
                    .to_owned(),
            });
        }
        if ipv6_prefix > 128 {
            return Err(ConfigError::PrefixTooLong {
                version: 6,
                bits: ipv6_prefix,
                max: 128,
            });
        }
        if ipv4_prefix > 32 {
            return Err(ConfigError::PrefixTooLong {
                version: 4,
                bits: ipv4_prefix,
                max: 32,
            });
        }
        Ok(self.client_ip)
    }
}

impl ClientIp {
    /// The connection's peer address; forwarded headers are ignored. Use this when clients
    /// connect directly.
    #[must_use]
    pub fn peer() -> Self {
        Self::trusting([])
    }

    /// Behind proxies: the peer and every hop inside `proxies` are skipped, right to left, in
    /// `X-Forwarded-For`; the first other address is the client. A request whose peer is not
    /// in `proxies` is keyed by the peer. The [`builder`](Self::builder) reads `Forwarded`
    /// instead, and groups addresses otherwise.
    ///
    /// A network of every address (`0.0.0.0/0`, `::/0`) is left out here, with a warning:
    /// trusting it would let any client choose its own address. The builder's
    /// [`trust_every_address`](ClientIpBuilder::trust_every_address) takes it, said by name.
    #[must_use]
    pub fn trusting(proxies: impl IntoIterator<Item = Cidr>) -> Self {
        let trusted: Arc<[Cidr]> = proxies
            .into_iter()
            .filter(|c| {
                let every = c.0.prefix_len() == 0;
                if every {
                    tracing::warn!(
                        network = %c,
                        "ClientIp::trusting leaves out a network of every address (any client \
                         could choose its own); use ClientIp::builder().trust_every_address() \
                         if that is meant"
                    );
                }
                !every
            })
            .collect();
        Self {
            trusted,
            header: ForwardedHeader::default(),
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            warned_no_peer: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A `ClientIp` with settings of your own: set them on the builder, then
    /// [`build`](ClientIpBuilder::build) it.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock_tower::client_ip::{ClientIp, ForwardedHeader};
    ///
    /// // Prefix lengths from a configuration file: a wrong one is an error, not a panic.
    /// let (v4, v6): (u8, u8) = (24, 56);
    /// let client_ip = ClientIp::builder()
    ///     .trusting(["10.0.0.0/8".parse()?])
    ///     .header(ForwardedHeader::Forwarded)
    ///     .ipv4_prefix(v4)
    ///     .ipv6_prefix(v6)
    ///     .build()?;
    /// # let _ = client_ip;
    /// assert!(ClientIp::builder().ipv6_prefix(129).build().is_err());
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClientIpBuilder {
        ClientIpBuilder {
            client_ip: Self::peer(),
            trust_every_address: false,
            allow_zero_prefix: false,
        }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }

    /// The client's address (not grouped), or `None` when the request carries no peer
    /// address (see [`peer_addr`]).
    pub fn client_ip<B>(&self, request: &Request<B>) -> Option<IpAddr> {
        let peer = peer_addr(request.extensions())?;
        Some(self.resolve(peer.ip().to_canonical(), request.headers()))
    }

    /// Walks the forwarded header right to left from a peer.
    fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let name: HeaderName = match self.header {
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::Forwarded => header::FORWARDED,
        };
        // Repeated header lines form one list, in order; walk it from the last line's end.
        // Split the raw bytes, not text: a line is not text as soon as the client put one
        // byte of obs-text in its own part, and dropping the whole line would drop the hops
        // the proxies appended too. Each hop is decoded on its own, and only when reached.
        let lines: Vec<&[u8]> = headers
            .get_all(&name)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        let hops = lines
            .iter()
            .rev()
            .flat_map(|line| line.rsplit(|b| *b == b','))
            .take(MAX_HOPS);
        let mut client = peer;
        for hop in hops {
            let parsed = std::str::from_utf8(hop)
                .ok()
                .and_then(|hop| match self.header {
                    ForwardedHeader::XForwardedFor => parse_hop(hop),
                    ForwardedHeader::Forwarded => forwarded_for(hop).and_then(parse_hop),
                });
            let Some(ip) = parsed else {
                // Not an address (not even text, perhaps): only a trusted proxy could have put
                // it right of the client, so something is misconfigured; stay with the last
                // trusted hop.
                return client;
            };
            client = ip;
            if !self.is_trusted(ip) {
                return ip;
            }
        }
        client
    }

    /// The network `ip` is grouped into.
    fn group(&self, ip: IpAddr) -> String {
        let prefix = if ip.is_ipv4() {
            self.ipv4_prefix
        } else {
            self.ipv6_prefix
        };
        let full = if ip.is_ipv4() { 32 } else { 128 };
        match Cidr::new(ip, prefix) {
            Some(net) if prefix < full => net.to_string(),
            _ => ip.to_string(),
        }
    }
}

impl<B> ExtractKey<B> for ClientIp {
    fn extract_key(&self, request: &Request<B>) -> Extracted {
        let ip = self.client_ip(request);
        if ip.is_none() && !self.warned_no_peer.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "{ABSENT_HINT} (said once; every request without one is keyless: answered 400, \
                 or let through unkeyed with MissingKey::Allow)"
            );
        }
        ip.map(|ip| self.group(ip)).into()
    }

    fn absent_hint(&self) -> Option<&'static str> {
        Some(ABSENT_HINT)
    }
}

#[cfg(feature = "axum")]
const ABSENT_HINT: &str = "ClientIp found no peer address: serve the router with \
     `into_make_service_with_connect_info::<SocketAddr>()`, or put the peer's `SocketAddr` in \
     the request's extensions";
#[cfg(not(feature = "axum"))]
const ABSENT_HINT: &str = "ClientIp found no peer address: put the peer's `SocketAddr` in the \
     request's extensions";

/// The connection's peer address as the request carries it: axum's
/// `ConnectInfo<SocketAddr>` (feature `axum`), else a bare [`SocketAddr`] extension, which any
/// server can insert.
#[must_use]
pub fn peer_addr(extensions: &Extensions) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(peer)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*peer);
    }
    extensions.get::<SocketAddr>().copied()
}

/// The `for` parameter of one `Forwarded` element (`for=192.0.2.1;proto=https`), unquoted.
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| value.trim().trim_matches('"'))
    })
}

/// One hop: `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]:443`, with an
/// optional IPv6 zone (`fe80::1%eth0`, dropped). Anything else (`unknown`, `_hidden`,
/// garbage) is `None`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if hop.is_empty() || hop.len() > 64 {
        return None;
    }
    let host = if let Some(rest) = hop.strip_prefix('[') {
        rest.split_once(']')?.0
    } else if hop.matches(':').count() == 1 {
        hop.split_once(':')?.0 // IPv4 with a port
    } else {
        hop
    };
    let host = host.split_once('%').map_or(host, |(addr, _zone)| addr);
    IpAddr::from_str(host).ok().map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().expect("valid CIDR")
    }

    #[test]
    fn cidrs_parse_and_match() {
        assert_eq!(cidr("10.1.2.3/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("192.0.2.7").to_string(), "192.0.2.7/32");
        assert_eq!(cidr("2001:db8::1/32").to_string(), "2001:db8::/32");
        assert!(cidr("10.0.0.0/8").contains("10.255.0.1".parse().expect("ip")));
        assert!(!cidr("10.0.0.0/8").contains("11.0.0.1".parse().expect("ip")));
        assert!(cidr("10.0.0.0/8").contains("::ffff:10.0.0.1".parse().expect("ip")));
        assert!(cidr("0.0.0.0/0").contains("8.8.8.8".parse().expect("ip")));
        assert!(!cidr("0.0.0.0/0").contains("::1".parse().expect("ip")));
        assert!(cidr("::/0").contains("2001:db8::1".parse().expect("ip")));
        // Through ipnet and back; IPv4-mapped networks are the IPv4 networks they map.
        let mapped: IpNet = "::ffff:10.1.0.0/104".parse().expect("ipnet");
        assert_eq!(Cidr::from(mapped), cidr("10.0.0.0/8"));
        assert_eq!(cidr("::ffff:192.0.2.7"), cidr("192.0.2.7/32"));
        assert_eq!(
            IpNet::from(cidr("2001:db8::1/32")),
            "2001:db8::/32".parse::<IpNet>().expect("ipnet")
        );
        assert_eq!(cidr(" 10.0.0.0/8 ").prefix(), 8);
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "x/8",
            "10.0.0/8",
            "10.0.0.0/8/8",
            "10.0.0.0 /8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prefixes_out_of_range_are_typed_errors() {
        assert_eq!(
            ClientIp::builder().ipv6_prefix(129).build().err(),
            Some(ConfigError::PrefixTooLong {
                version: 6,
                bits: 129,
                max: 128
            })
        );
        assert_eq!(
            ClientIp::builder().ipv4_prefix(33).build().err(),
            Some(ConfigError::PrefixTooLong {
                version: 4,
                bits: 33,
                max: 32
            })
        );
        let ok = ClientIp::builder()
            .ipv6_prefix(128)
            .ipv4_prefix(0)
            .allow_zero_prefix()
            .build()
            .expect("in range");
        assert_eq!((ok.ipv6_prefix, ok.ipv4_prefix), (128, 0));
        // Every value a configuration file can hold is answered, never a panic; 0 only when
        // said by name.
        for bits in 0..=u8::MAX {
            let built = std::panic::catch_unwind(|| {
                let v4 = ClientIp::builder().ipv4_prefix(bits).build().is_ok();
                let v6 = ClientIp::builder().ipv6_prefix(bits).build().is_ok();
                (v4, v6)
            });
            assert_eq!(
                built.ok(),
                Some((bits > 0 && bits <= 32, bits > 0 && bits <= 128)),
                "{bits}"
            );
        }
    }

    #[test]
    fn trusting_every_address_is_said_by_name() {
        for every in ["0.0.0.0/0", "::/0"] {
            let all: Cidr = every.parse().expect("a network");
            let refused = ClientIp::builder().trusting([all]).build();
            assert!(
                matches!(
                    refused,
                    Err(ConfigError::InvalidSetting {
                        setting: "trusting",
                        ..
                    })
                ),
                "{every}: {refused:?}"
            );
            let said = ClientIp::builder()
                .trusting([all])
                .trust_every_address()
                .build()
                .expect("said by name");
            assert_eq!(said.trusted.len(), 1);
            // The infallible constructor leaves it out.
            assert!(ClientIp::trusting([all]).trusted.is_empty());
        }
    }

    #[test]
    fn hops_parse_in_every_shape() {
        let table = [
            ("192.0.2.1", Some("192.0.2.1")),
            (" 192.0.2.1 ", Some("192.0.2.1")),
            ("192.0.2.1:8080", Some("192.0.2.1")),
            ("2001:db8::1", Some("2001:db8::1")),
            ("[2001:db8::1]:443", Some("2001:db8::1")),
            ("[2001:db8::1]", Some("2001:db8::1")),
            ("fe80::1%eth0", Some("fe80::1")),
            ("[fe80::1%25eth0]:80", Some("fe80::1")),
            ("::ffff:192.0.2.1", Some("192.0.2.1")),
            ("unknown", None),
            ("_hidden", None),
            ("", None),
            ("[2001:db8::1", None),
            ("999.0.0.1", None),
            ("1.2.3.4:5:6", None),
        ];
        for (hop, want) in table {
            let want = want.map(|w| w.parse::<IpAddr>().expect("ip"));
            assert_eq!(parse_hop(hop), want, "{hop:?}");
        }
        assert_eq!(
            forwarded_for("for=192.0.2.60;proto=http;by=203.0.113.43"),
            Some("192.0.2.60")
        );
        assert_eq!(
            forwarded_for(r#" For="[2001:db8:cafe::17]:4711""#),
            Some("[2001:db8:cafe::17]:4711")
        );
        assert_eq!(forwarded_for("proto=https"), None);
    }
}
