//! TESTPLAN 21: client-IP extraction over `ConnectInfo` and forwarded headers, as a table,
//! and hostile headers that must never panic.

use distlock_tower::client_ip::{Cidr, ClientIp, ForwardedHeader};
use distlock_tower::extract::{ExtractKey, Extracted};
use http::{HeaderValue, Request};
use rand::Rng;

use crate::app::request_from;

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter()
        .map(|c| c.parse().expect("valid CIDR"))
        .collect()
}

/// An extractor trusting `trusted` proxies that write the `kind` header, and that header's
/// name.
fn trusting(trusted: &[&str], kind: ForwardedHeader) -> (ClientIp, &'static str) {
    let extractor = ClientIp::builder()
        .trusting(cidrs(trusted))
        .header(kind)
        .build()
        .expect("valid settings");
    let name = match kind {
        ForwardedHeader::Forwarded => "forwarded",
        _ => "x-forwarded-for",
    };
    (extractor, name)
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
        let (extractor, name) = trusting(trusted, *kind);
        let headers: Vec<(&str, &str)> = lines.iter().map(|l| (name, *l)).collect();
        let request = request_from("/", peer, &headers);
        assert_eq!(
            extractor.extract_key(&request).key(),
            *want,
            "row {i}: peer {peer}, {name}: {lines:?}"
        );
    }
}

#[test]
fn grouping_is_configurable_and_connect_info_is_required() {
    let request = request_from("/", "[2001:db8:1:2:3:4:5:6]:1", &[]);
    assert_eq!(
        ClientIp::builder()
            .ipv6_prefix(128)
            .build()
            .expect("valid settings")
            .extract_key(&request)
            .key(),
        Some("2001:db8:1:2:3:4:5:6")
    );
    assert_eq!(
        ClientIp::builder()
            .ipv6_prefix(48)
            .build()
            .expect("valid settings")
            .extract_key(&request)
            .key(),
        Some("2001:db8:1::/48")
    );
    let v4 = request_from("/", "198.51.100.77:1", &[]);
    assert_eq!(
        ClientIp::builder()
            .ipv4_prefix(24)
            .build()
            .expect("valid settings")
            .extract_key(&v4)
            .key(),
        Some("198.51.100.0/24")
    );
    let bare = Request::get("/").body(()).expect("request");
    assert_eq!(ClientIp::peer().extract_key(&bare), Extracted::Absent);
}

/// Huge, repeated, empty and random headers from a trusted peer: never a panic, and the
/// key is always an address (at worst the trusted peer's own).
#[test]
fn hostile_headers_never_panic() {
    let extractor = ClientIp::builder()
        .trusting(cidrs(&["0.0.0.0/0", "::/0"]))
        .trust_every_address()
        .build()
        .expect("valid settings");
    let forwarded = ClientIp::builder()
        .trusting(cidrs(&["0.0.0.0/0", "::/0"]))
        .trust_every_address()
        .header(ForwardedHeader::Forwarded)
        .build()
        .expect("valid settings");
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
                let key = e
                    .extract_key(&request)
                    .into_key()
                    .expect("a peer is always there");
                let addr = key.split('/').next().expect("address part");
                assert!(addr.parse::<std::net::IpAddr>().is_ok(), "{key:?}");
            }
        }
    }
}

/// (header the proxies write, header lines as raw bytes, expected key)
type ByteRow<'a> = (ForwardedHeader, &'a [&'a [u8]], &'a str);

/// TESTPLAN 29: bytes that are not visible ASCII (obs-text 0x80-0xff, tabs) left of the hop a
/// trusted proxy appended are never read: the line is split on `,` as bytes and the walk
/// stops at the first untrusted hop, as it does for a clean line.
#[test]
fn non_text_bytes_left_of_the_client_are_never_read() {
    let xff = ForwardedHeader::XForwardedFor;
    let fwd = ForwardedHeader::Forwarded;
    let rows: &[ByteRow<'_>] = &[
        (xff, &[b"\xff, 203.0.113.7"], "203.0.113.7"),
        (
            xff,
            &[b"\xff\xfe\x80, 203.0.113.7, 10.0.0.2"],
            "203.0.113.7",
        ),
        (xff, &[b"caf\xc3\xa9, 203.0.113.7"], "203.0.113.7"),
        (xff, &[b"\t1.2.3.4\t, \x80, 203.0.113.7"], "203.0.113.7"),
        // The client's own line, then the proxy's.
        (xff, &[b"\xff", b"203.0.113.7"], "203.0.113.7"),
        (
            xff,
            &[b"1.2.3.4\xff", b"203.0.113.7, 10.0.0.2"],
            "203.0.113.7",
        ),
        (fwd, &[b"for=\"\xff\", for=203.0.113.7"], "203.0.113.7"),
        (
            fwd,
            &[b"for=\xc3\xa9", b"for=203.0.113.7;proto=https"],
            "203.0.113.7",
        ),
        // Non-text right of the client (only a trusted proxy could have written it): the walk
        // stops at the last trusted hop, as it does for other garbage.
        (xff, &[b"203.0.113.7, \xff"], "10.0.0.1"),
        (xff, &[b"203.0.113.7, \xff, 10.0.0.3"], "10.0.0.3"),
    ];
    for (i, (kind, lines, want)) in rows.iter().enumerate() {
        let (extractor, name) = trusting(&["10.0.0.0/8"], *kind);
        let mut request = request_from("/", "10.0.0.1:1", &[]);
        for line in *lines {
            let value = HeaderValue::from_bytes(line).expect("bytes HeaderValue accepts");
            request.headers_mut().append(name, value);
        }
        assert_eq!(
            extractor.extract_key(&request).key(),
            Some(*want),
            "row {i}: {name}: {lines:?}"
        );
    }
}

/// Every byte `HeaderValue::from_bytes` accepts: tab, visible ASCII, space, obs-text.
fn header_bytes() -> Vec<u8> {
    (0u8..=255)
        .filter(|b| HeaderValue::from_bytes(&[b'a', *b, b'a']).is_ok())
        .collect()
}

/// TESTPLAN 29: 10 000 random byte strings placed left of the proxy's appended hop (on the
/// same line or on an earlier line, in both header kinds, with and without a second trusted
/// proxy after it) never change the key the appended hop selects: it is the key of the clean
/// line.
#[test]
fn random_bytes_left_of_the_proxys_hop_never_change_the_bucket() {
    let alphabet = header_bytes();
    assert!(alphabet.contains(&0xff) && alphabet.contains(&0x80) && alphabet.contains(&b'\t'));
    let trusted = cidrs(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
    let xff = ClientIp::trusting(trusted.clone());
    let fwd = ClientIp::builder()
        .trusting(trusted)
        .header(ForwardedHeader::Forwarded)
        .build()
        .expect("valid settings");
    let clients = ["203.0.113.7", "[2001:db8:1:2::9]:443", "198.51.100.2:4711"];
    let mut rng = rand::rng();
    for case in 0..10_000 {
        let len = rng.random_range(0..120);
        // Commas and the bytes of addresses more often, so that hop-like pieces turn up.
        let garbage: Vec<u8> = (0..len)
            .map(|_| match rng.random_range(0..4) {
                0 => b",:.[]=\"; 0123456789"[rng.random_range(0..19)],
                _ => alphabet[rng.random_range(0..alphabet.len())],
            })
            .collect();
        let client = clients[case % clients.len()];
        let via_second_proxy = case % 3 == 0;
        let same_line = case % 2 == 0;
        for (extractor, name, hop) in [
            (&xff, "x-forwarded-for", client.to_owned()),
            (&fwd, "forwarded", format!("for=\"{client}\"")),
        ] {
            let mut appended = hop.clone();
            if via_second_proxy {
                appended.push_str(if name == "forwarded" {
                    ", for=10.0.0.2"
                } else {
                    ", 10.0.0.2"
                });
            }
            let clean = {
                let mut request = request_from("/", "10.0.0.1:1", &[]);
                let value = HeaderValue::from_str(&appended).expect("clean line");
                request.headers_mut().append(name, value);
                extractor.extract_key(&request)
            };
            assert!(
                clean.key().is_some_and(|k| !k.starts_with("10.")),
                "the clean line selects the client: {clean:?}"
            );
            let mut request = request_from("/", "10.0.0.1:1", &[]);
            if same_line {
                let mut line = garbage.clone();
                line.extend_from_slice(b", ");
                line.extend_from_slice(appended.as_bytes());
                let value = HeaderValue::from_bytes(&line).expect("accepted bytes");
                request.headers_mut().append(name, value);
            } else {
                let value = HeaderValue::from_bytes(&garbage).expect("accepted bytes");
                request.headers_mut().append(name, value);
                let value = HeaderValue::from_str(&appended).expect("clean line");
                request.headers_mut().append(name, value);
            }
            assert_eq!(
                extractor.extract_key(&request),
                clean,
                "case {case}: {name}: {:?} left of {appended:?}",
                String::from_utf8_lossy(&garbage)
            );
        }
    }
}
