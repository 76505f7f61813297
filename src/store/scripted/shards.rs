//! The masters of a Redis Cluster, from `CLUSTER SHARDS` (Redis 7.0+), for what goes to every
//! primary one by one: the health check's pings and the operators' key listing.

use std::time::Duration;

use crate::error::StoreError;

/// The Cluster's masters (`CLUSTER SHARDS` through any node), as `(host, port)`.
pub(crate) async fn masters(
    mut conn: redis::cluster_async::ClusterConnection,
    limit: Duration,
) -> Result<Vec<(String, u16)>, StoreError> {
    let asked = tokio::time::timeout(
        limit,
        redis::cmd("CLUSTER")
            .arg("SHARDS")
            .query_async::<redis::Value>(&mut conn),
    )
    .await;
    let shards = match asked {
        Ok(Ok(value)) => value,
        Ok(Err(err)) => return Err(err.into()),
        Err(_) => return Err(StoreError::Timeout { after: limit }),
    };
    let mut found = Vec::new();
    let redis::Value::Array(shards) = shards else {
        return Err(StoreError::Protocol {
            message: "CLUSTER SHARDS answered something other than a list".to_owned(),
        });
    };
    for shard in shards {
        for node in field(&shard, "nodes")
            .and_then(as_list)
            .into_iter()
            .flatten()
        {
            if field(node, "role").and_then(as_text).as_deref() != Some("master") {
                continue;
            }
            let host = field(node, "endpoint")
                .and_then(as_text)
                .filter(|h| !h.is_empty() && h != "?")
                .or_else(|| field(node, "ip").and_then(as_text));
            let port = field(node, "port")
                .or_else(|| field(node, "tls-port"))
                .and_then(|v| redis::from_redis_value_ref::<u16>(v).ok());
            if let (Some(host), Some(port)) = (host, port) {
                found.push((host, port));
            }
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// A field of a RESP2 flat list or a RESP3 map.
fn field<'a>(value: &'a redis::Value, name: &str) -> Option<&'a redis::Value> {
    match value {
        redis::Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| as_text(k).as_deref() == Some(name))
            .map(|(_, v)| v),
        redis::Value::Array(items) => items
            .chunks_exact(2)
            .find(|pair| as_text(&pair[0]).as_deref() == Some(name))
            .map(|pair| &pair[1]),
        _ => None,
    }
}

fn as_list(value: &redis::Value) -> Option<&[redis::Value]> {
    match value {
        redis::Value::Array(items) => Some(items),
        _ => None,
    }
}

fn as_text(value: &redis::Value) -> Option<String> {
    redis::from_redis_value_ref::<String>(value).ok()
}
