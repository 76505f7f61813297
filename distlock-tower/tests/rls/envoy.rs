//! The guide's Envoy snippet ("behind Envoy"), checked against the service: Envoy cannot run
//! here, so the snippet is parsed and held to what the service expects (the domain of its
//! file, a gRPC cluster over HTTP/2, the v3 API), and the descriptors its route actions make
//! are sent to the service built from the guide's own file, which must find their limits.

use distlock::Client;
use distlock_tower::rls::{RateLimitServer, RlsConfig, Settings};
use serde_norway::Value;

use crate::common::{ask, descriptor, ok, serve};

const GUIDE: &str = include_str!("../../../src/guide/behind_envoy.md");

/// The YAML code blocks of the guide, in order.
fn yaml_blocks() -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in GUIDE.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

fn get<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(value, |v, key| {
        v.get(*key)
            .unwrap_or_else(|| panic!("no {key:?} in {v:?} (path {path:?})"))
    })
}

fn list(value: &Value) -> &Vec<Value> {
    value
        .as_sequence()
        .unwrap_or_else(|| panic!("not a list: {value:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_envoy_snippet_fits_the_service() {
    let blocks = yaml_blocks();
    assert_eq!(blocks.len(), 2, "the Envoy snippet and the service's file");
    let envoy: Value = serde_norway::from_str(&blocks[0]).expect("the Envoy snippet is YAML");
    let config = RlsConfig::from_texts([("edge.yaml", blocks[1].as_str())])
        .expect("the guide's service file is valid");

    // The rate-limit filter: the service's domain, the v3 API, a cluster that exists.
    let listener = &list(get(&envoy, &["static_resources", "listeners"]))[0];
    let hcm = get(
        &list(get(
            &list(get(listener, &["filter_chains"]))[0],
            &["filters"],
        ))[0],
        &["typed_config"],
    );
    let filters = list(get(hcm, &["http_filters"]));
    let ratelimit = filters
        .iter()
        .find(|f| get(f, &["name"]).as_str() == Some("envoy.filters.http.ratelimit"))
        .expect("the rate-limit filter");
    let filter = get(ratelimit, &["typed_config"]);
    let domain = get(filter, &["domain"]).as_str().expect("a domain");
    assert_eq!(
        config.domains(),
        [domain],
        "the filter names the service's domain"
    );
    let service = get(filter, &["rate_limit_service"]);
    assert_eq!(
        get(service, &["transport_api_version"]).as_str(),
        Some("V3")
    );
    let cluster_name = get(service, &["grpc_service", "envoy_grpc", "cluster_name"])
        .as_str()
        .expect("a cluster name");
    let clusters = list(get(&envoy, &["static_resources", "clusters"]));
    let cluster = clusters
        .iter()
        .find(|c| get(c, &["name"]).as_str() == Some(cluster_name))
        .expect("the filter's cluster exists");
    let options = get(cluster, &["typed_extension_protocol_options"]);
    let http2 = options.as_mapping().expect("a map").values().any(|o| {
        o.get("explicit_http_config")
            .and_then(|c| c.get("http2_protocol_options"))
            .is_some()
    });
    assert!(http2, "gRPC needs HTTP/2 to the service");
    assert!(
        serde_norway::to_string(cluster)
            .expect("YAML")
            .contains("port_value: 8081"),
        "the binary's gRPC port"
    );

    // Each route's actions, as Envoy turns them into descriptor entries for a request.
    let served = serve(
        RateLimitServer::new(Client::in_memory(), config, Settings::default()).expect("server"),
    )
    .await;
    let mut client = served.client.clone();
    let hosts = list(get(hcm, &["route_config", "virtual_hosts"]));
    let mut checked = 0;
    for route in list(get(&hosts[0], &["routes"])) {
        for limit in list(get(route, &["route", "rate_limits"])) {
            let mut entries: Vec<(String, String)> = Vec::new();
            for action in list(get(limit, &["actions"])) {
                let map = action.as_mapping().expect("an action");
                let (kind, spec) = map.iter().next().expect("one kind per action");
                match kind.as_str().expect("a kind") {
                    "remote_address" => entries.push(("remote_address".into(), "10.0.0.1".into())),
                    "generic_key" => entries.push((
                        "generic_key".into(),
                        get(spec, &["descriptor_value"])
                            .as_str()
                            .expect("a value")
                            .into(),
                    )),
                    "request_headers" => entries.push((
                        get(spec, &["descriptor_key"])
                            .as_str()
                            .expect("a key")
                            .into(),
                        "k-123".into(),
                    )),
                    other => panic!("an action this test does not know: {other}"),
                }
            }
            let pairs: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let answer = ask(&mut client, domain, vec![descriptor(&pairs)], 0)
                .await
                .expect("answer");
            assert!(ok(&answer), "{pairs:?}: {answer:?}");
            assert!(
                answer.statuses[0].current_limit.is_some(),
                "the service has a limit for {pairs:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2, "both routes' limits were checked");
}
