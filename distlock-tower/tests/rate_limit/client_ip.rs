//! TESTPLAN 21: client-IP extraction over `ConnectInfo` and forwarded headers, as a table,
//! and hostile headers that must never panic.

use distlock_tower::ExtractKey;
use distlock_tower::client_ip::{Cidr, ClientIp, ForwardedHeader};
use http::{HeaderValue, Request};
use rand::Rng;

use crate::app::request_from;

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter()
        .map(|c| c.parse().expect("valid CIDR"))
        .collect()
}

/// (trusted proxies, header the proxies write, peer, header lines, expected key)
type Row<'a> = (
    &'a [&'a str],
    ForwardedHeader,
    &'a str,
    &'a [&'a str],
    Option<&'a str>,
);

#[test]
fn table() {
    let proxies = ["10.0.0.0/8", "2001:db8:ffff::/48"];
    let xff = ForwardedHeader::XForwardedFor;
    let fwd = ForwardedHeader::Forwarded;
    let rows: &[Row<'_>] = &[
        // No trusted proxy: forwarded headers are ignored.
        (&[], xff, "203.0.113.7:1", &["1.2.3.4"], Some("203.0.113.7")),
        (
            &[],
            fwd,
            "203.0.113.7:1",
            &["for=1.2.3.4"],
            Some("203.0.113.7"),
        ),
        // Untrusted peer: ignored even with trusted proxies configured.
        (
            &proxies,
            xff,
            "203.0.113.7:1",
            &["10.0.0.5"],
            Some("203.0.113.7"),
        ),
        // Trusted peer: the right-most untrusted hop wins.
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["1.1.1.1, 198.51.100.2"],
            Some("198.51.100.2"),
        ),
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["6.6.6.6, 198.51.100.2, 10.0.0.7"],
            Some("198.51.100.2"),
        ),
        // Several header lines are one list, in order.
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["6.6.6.6", "198.51.100.2, 10.0.0.7"],
            Some("198.51.100.2"),
        ),
        // Only trusted hops: the left-most one.
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["10.0.0.9, 10.0.0.7"],
            Some("10.0.0.9"),
        ),
        // No header: the peer itself.
        (&proxies, xff, "10.0.0.1:1", &[], Some("10.0.0.1")),
        // Garbage right of the client: stay with the last trusted hop.
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["198.51.100.2, garbage"],
            Some("10.0.0.1"),
        ),
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["198.51.100.2, unknown, 10.0.0.3"],
            Some("10.0.0.3"),
        ),
        // Garbage left of the client is never reached.
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["<script>, 198.51.100.2"],
            Some("198.51.100.2"),
        ),
        // Ports, brackets and zones.
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["198.51.100.2:4711"],
            Some("198.51.100.2"),
        ),
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["[2001:db8:1:2::9]:443"],
            Some("2001:db8:1:2::/64"),
        ),
        (
            &proxies,
            xff,
            "10.0.0.1:1",
            &["fe80::1%eth0"],
            Some("fe80::/64"),
        ),
        // IPv6 grouped by /64; a trusted IPv6 proxy.
        (
            &proxies,
            xff,
            "[2001:db8:ffff::1]:1",
            &["2001:db8:1:2:3:4:5:6"],
            Some("2001:db8:1:2::/64"),
        ),
        (
            &[],
            xff,
            "[2001:db8:1:2:aaaa::1]:1",
            &[],
            Some("2001:db8:1:2::/64"),
        ),
        // IPv4-mapped peers count as IPv4.
        (
            &proxies,
            xff,
            "[::ffff:10.0.0.1]:1",
            &["198.51.100.2"],
            Some("198.51.100.2"),
        ),
        // RFC 7239, quoted and bracketed, other parameters ignored.
        (
            &proxies,
            fwd,
            "10.0.0.1:1",
            &[r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.4"#],
            Some("2001:db8:cafe::/64"),
        ),
        (
            &proxies,
            fwd,
            "10.0.0.1:1",
            &["for=198.51.100.2;by=10.0.0.1", "For=10.0.0.8"],
            Some("198.51.100.2"),
        ),
        (
            &proxies,
            fwd,
            "10.0.0.1:1",
            &["for=_hidden, for=10.0.0.8"],
            Some("10.0.0.8"),
        ),
        // The header the proxies do not write is ignored.
        (&proxies, fwd, "10.0.0.1:1", &[], Some("10.0.0.1")),
    ];
    for (i, (trusted, kind, peer, lines, want)) in rows.iter().enumerate() {
        let extractor = ClientIp::trusting(cidrs(trusted)).header(*kind);
        let name = match kind {
            ForwardedHeader::Forwarded => "forwarded",
            _ => "x-forwarded-for",
        };
        let headers: Vec<(&str, &str)> = lines.iter().map(|l| (name, *l)).collect();
        let request = request_from("/", peer, &headers);
        assert_eq!(
            extractor.extract_key(&request).as_deref(),
            *want,
            "row {i}: peer {peer}, {name}: {lines:?}"
        );
    }
}

#[test]
fn grouping_is_configurable_and_connect_info_is_required() {
    let request = request_from("/", "[2001:db8:1:2:3:4:5:6]:1", &[]);
    assert_eq!(
        ClientIp::peer()
            .ipv6_prefix(128)
            .extract_key(&request)
            .as_deref(),
        Some("2001:db8:1:2:3:4:5:6")
    );
    assert_eq!(
        ClientIp::peer()
            .ipv6_prefix(48)
            .extract_key(&request)
            .as_deref(),
        Some("2001:db8:1::/48")
    );
    let v4 = request_from("/", "198.51.100.77:1", &[]);
    assert_eq!(
        ClientIp::peer().ipv4_prefix(24).extract_key(&v4).as_deref(),
        Some("198.51.100.0/24")
    );
    let bare = Request::get("/").body(()).expect("request");
    assert_eq!(ClientIp::peer().extract_key(&bare), None);
}

/// Huge, repeated, empty and random headers from a trusted peer: never a panic, and the
/// key is always an address (at worst the trusted peer's own).
#[test]
fn hostile_headers_never_panic() {
    let extractor = ClientIp::trusting(cidrs(&["0.0.0.0/0", "::/0"]));
    let forwarded =
        ClientIp::trusting(cidrs(&["0.0.0.0/0", "::/0"])).header(ForwardedHeader::Forwarded);
    let mut values: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b",,,,,".to_vec(),
        b" , ".to_vec(),
        "1.2.3.4, ".repeat(20_000).into_bytes(),
        "x".repeat(100_000).into_bytes(),
        b"[[[[::1]]]]:::".to_vec(),
        b"fe80::1%".to_vec(),
        b"%%%%".to_vec(),
        b"for=\"".to_vec(),
        b"for=;for==;=for".to_vec(),
        b"\xff\xfe\x80".to_vec(),
        b"999.999.999.999".to_vec(),
        "[".repeat(1000).into_bytes(),
    ];
    let mut rng = rand::rng();
    for _ in 0..2000 {
        let len = rng.random_range(0..80);
        let alphabet = b"0123456789abcdefABCDEF.:[]%,;=\" \tfor_xunknwXYZ\x80\xff";
        values.push(
            (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect(),
        );
    }
    for value in &values {
        let Ok(value) = HeaderValue::from_bytes(value) else {
            continue;
        };
        for name in ["x-forwarded-for", "forwarded"] {
            let mut request = request_from("/", "10.0.0.1:1", &[]);
            // Duplicated lines too.
            request.headers_mut().append(name, value.clone());
            request.headers_mut().append(name, value.clone());
            for e in [&extractor, &forwarded] {
                let key = e.extract_key(&request).expect("a peer is always there");
                let addr = key.split('/').next().expect("address part");
                assert!(addr.parse::<std::net::IpAddr>().is_ok(), "{key:?}");
            }
        }
    }
}
