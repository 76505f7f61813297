//! A quorum's members must be distinct servers.
//!
//! A server named twice votes twice: with nodes `[a, a, b]`, `a` alone is a majority, and a
//! second client configured `[b, b, a]` holds the same lock through `b` alone. So a member is
//! refused when it is another member under a second name:
//!
//! * **the same address**, after resolving names (`localhost` and `127.0.0.1` are one
//!   address; so are two databases of one server: a restart loses both);
//! * **the same boot value**: the random value each server keeps for the quorum
//!   (`<prefix>:boot`, see `boot.lua`) can only be shared by two names of one server and
//!   database, whatever route reaches it (a proxy, a NAT, a second interface);
//! * **the same `run_id`** (`INFO server`): one server process, whichever database or route.
//!   A user whose ACL forbids `INFO` is checked by the first two only.
//!
//! At connect, any of these is a configuration error. A member that could not be reached at
//! connect is checked when it first answers, and does not vote until it has passed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::StoreError;

/// Where a member's address leads, as far as the client can tell without asking the server.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Refuses two members whose addresses lead to one endpoint. Names are resolved within
/// `timeout`; a name that does not resolve is left to the checks made once it answers.
pub(super) async fn refuse_repeated_addresses(
    nodes: &[redis::ConnectionInfo],
    timeout: Duration,
) -> Result<(), StoreError> {
    let resolved =
        futures_util::future::join_all(nodes.iter().map(|info| endpoints(info.addr(), timeout)))
            .await;
    for (i, mine) in resolved.iter().enumerate() {
        for (j, theirs) in resolved.iter().enumerate().skip(i + 1) {
            if let Some(shared) = mine.intersection(theirs).next() {
                return Err(twice(
                    // `host:port`, as the nodes are named in messages.
                    &nodes[i].addr().to_string(),
                    &nodes[j].addr().to_string(),
                    &format!("both lead to {}", describe(shared)),
                ));
            }
        }
    }
    Ok(())
}

async fn endpoints(addr: &redis::ConnectionAddr, timeout: Duration) -> BTreeSet<Endpoint> {
    let (host, port) = match addr {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => (host.as_str(), *port),
        // Two spellings of one socket's path are told apart by the boot value and `run_id`.
        redis::ConnectionAddr::Unix(path) => return BTreeSet::from([Endpoint::Unix(path.clone())]),
        // Kinds added to redis-rs later: nothing to compare here.
        #[allow(unreachable_patterns)]
        _ => return BTreeSet::new(),
    };
    // An IPv6 literal may come with brackets.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => addrs.map(Endpoint::Tcp).collect(),
        _ => BTreeSet::new(),
    }
}

fn describe(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Tcp(addr) => addr.to_string(),
        Endpoint::Unix(path) => path.display().to_string(),
    }
}

/// The error for two members that are one server.
pub(super) fn twice(first: &str, second: &str, why: &str) -> StoreError {
    StoreError::Config {
        message: format!(
            "quorum members {first} and {second} are the same server ({why}): it would vote \
             twice, and a majority could then be one server; a Redlock quorum needs distinct, \
             independent primaries"
        ),
    }
}

/// The server's `run_id`, or `None` if it does not say (an ACL that forbids `INFO`). A
/// transport failure is an error: the caller asks again.
pub(super) async fn run_id<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
) -> Result<Option<String>, StoreError> {
    match redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => Ok(info.lines().find_map(|line| {
            Some(line.strip_prefix("run_id:")?.trim().to_owned()).filter(|id| !id.is_empty())
        })),
        // The server refused (NOPERM, an unknown command): it will not say.
        Err(err)
            if matches!(
                err.kind(),
                redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
            ) =>
        {
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// The first pair of members (by index) that share a `Some` value of `key`, if any.
pub(super) fn first_shared<T: PartialEq>(values: &[Option<T>]) -> Option<(usize, usize)> {
    values.iter().enumerate().find_map(|(i, mine)| {
        let mine = mine.as_ref()?;
        values
            .iter()
            .enumerate()
            .skip(i + 1)
            .find_map(|(j, theirs)| (theirs.as_ref() == Some(mine)).then_some((i, j)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_shared_pair_is_found_and_none_is_not_a_value() {
        assert_eq!(first_shared::<u8>(&[]), None);
        assert_eq!(first_shared(&[Some(1), Some(2), Some(3)]), None);
        assert_eq!(first_shared::<u8>(&[None, None, None]), None);
        assert_eq!(first_shared(&[Some(1), None, Some(1)]), Some((0, 2)));
        assert_eq!(
            first_shared(&[Some(1), Some(2), Some(2), Some(1)]),
            Some((0, 3))
        );
    }

    #[tokio::test]
    async fn names_are_resolved_before_they_are_compared() {
        let info = |url: &str| redis::IntoConnectionInfo::into_connection_info(url).unwrap();
        let timeout = Duration::from_secs(2);
        refuse_repeated_addresses(
            &[
                info("redis://127.0.0.1:7001/"),
                info("redis://127.0.0.1:7002/"),
            ],
            timeout,
        )
        .await
        .expect("distinct ports are distinct servers");
        for pair in [
            ["redis://127.0.0.1:7001/", "redis://127.0.0.1:7001/3"],
            ["redis://localhost:7001/", "redis://127.0.0.1:7001/"],
        ] {
            let err = refuse_repeated_addresses(&[info(pair[0]), info(pair[1])], timeout)
                .await
                .expect_err(pair[1]);
            assert!(err.to_string().contains("same server"), "{err}");
        }
    }
}
