//! Sentinel set-ups that a configuration gets wrong (issue 29 §3): each is a typed
//! `StoreError::Config` at connect that names the constructor to use, never a client that
//! connects and then fails every call.

use distlock::{Client, StoreError};

use crate::support::sentinel::SentinelSetup;

/// The message of a `StoreError::Config`, or a panic naming what came instead.
fn config_message<T: std::fmt::Debug>(what: &str, result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Config { message }) => message,
        other => panic!("{what}: expected StoreError::Config, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_address_or_an_empty_master_name_is_a_config_error() {
    let setup = SentinelSetup::start();
    let sentinel = setup.sentinel_urls()[0].clone();
    let data = setup.nodes()[0].url();

    // A sentinel's address given where a data server belongs: refused, naming connect_sentinel.
    let message = config_message("connect(sentinel)", Client::connect(&sentinel).await);
    assert!(message.contains("Client::connect_sentinel"), "{message}");
    let message = config_message(
        "connect_quorum(with a sentinel)",
        Client::connect_quorum([data.clone(), sentinel.clone(), setup.nodes()[1].url()]).await,
    );
    assert!(message.contains("Sentinel"), "{message}");

    // No master name.
    for empty in ["", "  "] {
        let message = config_message(
            "connect_sentinel(\"\")",
            Client::connect_sentinel(empty, setup.sentinel_urls()).await,
        );
        assert!(message.contains("not an empty one"), "{message}");
    }

    // The right call still works, and so does a data server as itself.
    let client = Client::connect_sentinel(setup.master_name(), setup.sentinel_urls())
        .await
        .unwrap_or_else(|e| panic!("connect_sentinel: {e}\n{}", setup.logs()));
    client.ping().await;
    Client::connect(&data)
        .await
        .expect("a data server connects");

    // A name no sentinel monitors: every sentinel answered, so it is the name that is wrong.
    let message = config_message(
        "connect_sentinel(unknown name)",
        Client::connect_sentinel("no-such-master", setup.sentinel_urls()).await,
    );
    assert!(message.contains("`no-such-master`"), "{message}");
    // A data server given as a sentinel (redis-rs's own check).
    let message = config_message(
        "connect_sentinel([data server])",
        Client::connect_sentinel(setup.master_name(), [data.clone()]).await,
    );
    assert!(message.contains("sentinel"), "{message}");
}
