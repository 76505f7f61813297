//! The network lab's partitions (tests/support/netns.rs), which the history suite's nemesis
//! relies on, proven to take: a blocked client namespace cannot open a connection to the
//! server and can again once healed; an isolated server takes no local connection until the
//! servers are healed. `Lab::block` and `Lab::isolate` check the first half themselves, so a
//! partition whose rules do not stop traffic fails the run that asked for it.
//!
//! One test: a lab is one per process (its nft table is named after the pid).

use std::time::Duration;

use crate::support::RedisServer;
use crate::support::netns::Lab;

#[test]
fn partitions_stop_traffic_and_heals_let_it_through() {
    let lab = Lab::new(1).unwrap_or_else(|why| panic!("the network lab: {why}"));
    let server = RedisServer::start();

    assert!(
        lab.connects(0, server.port()),
        "the client namespace reaches the server before any partition"
    );
    lab.block(0, &[server.port()]);
    assert!(!lab.connects(0, server.port()), "blocked");
    lab.heal(0);
    assert!(lab.connects(0, server.port()), "healed");

    let local =
        || std::net::TcpStream::connect_timeout(&server.addr(), Duration::from_millis(300)).is_ok();
    assert!(local(), "reachable from here before");
    lab.isolate(&[server.port()], server.pid(), &[]);
    assert!(!local(), "isolated");
    assert!(
        lab.connects(0, server.port()),
        "an isolated server still takes the lab's clients"
    );
    lab.heal_servers();
    assert!(local(), "healed");
}
