//! Environment overrides: a variable per field, checked as the file is, errors naming the
//! variable.

use std::time::Duration;

use distlock::LockOptions;
use distlock::config::{Config, ConfigError, FieldErrorKind as Kind, Origin, StoreConfig};

use crate::lock_set;

const FILE: &str = "[client]\ncluster = [\"redis://a:7000/\"]\nprefix = \"shop\"\n\n[lock]\nttl = \"10s\"\n\n[limiters.api-v2]\npolicies = \"100/s\"\n";

fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::loader()
        .toml(FILE)
        .env_vars("APP", vars.iter().copied())
        .load()
}

#[test]
fn overrides_set_fields_at_their_path() {
    let config = load(&[
        ("APP__LOCK__TTL", "30s"),
        ("APP__LOCK__WATCHDOG", "false"),
        ("APP__CLIENT__PREFIX", "\"123\""),
        ("APP__CLIENT__RECONNECT_RETRIES", "7"),
        ("APP__LIMITERS__API_V2__POLICIES", "5/s"),
        (
            "APP__LIMITERS__API_V2__CIRCUIT_BREAKER",
            "{ trip_after = 2 }",
        ),
        ("APP__LIMITERS__LOGIN__POLICIES", "[\"login: 5/min\"]"),
        ("OTHER__LOCK__TTL", "nonsense"),
        ("APPLE__LOCK__TTL", "nonsense"),
        ("APP_HOME", "nonsense"),
    ])
    .expect("overrides");
    assert_eq!(
        lock_set(&config, "ttl", LockOptions::get_ttl),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        lock_set(&config, "watchdog", LockOptions::get_watchdog),
        Some(false)
    );
    assert_eq!(config.client.prefix.as_deref(), Some("123"));
    assert_eq!(config.client.reconnect_retries, Some(7));
    assert!(
        matches!(config.client.store, StoreConfig::Cluster(_)),
        "kept"
    );
    // `API_V2` matched the file's `api-v2`, and took its name for the unnamed policy.
    assert_eq!(
        config.limiters["api-v2"].policies[0].to_string(),
        "api-v2: gcra 5/s"
    );
    assert!(config.limiters["api-v2"].circuit_breaker.is_some());
    assert_eq!(config.limiters["login"].policies[0].name(), "login");
}

#[test]
fn a_store_override_replaces_the_files_store() {
    let config = load(&[("APP__CLIENT__URL", "redis://cache:6379/")]).expect("url");
    assert!(
        matches!(&config.client.store, StoreConfig::Redis(url) if url == "redis://cache:6379/")
    );
    let config = load(&[("APP__CLIENT__MEMORY", "true")]).expect("memory");
    assert!(matches!(config.client.store, StoreConfig::Memory));
    let config = load(&[(
        "APP__CLIENT__SENTINEL",
        "{ master = \"mymaster\", nodes = [\"redis://s:26379/\"] }",
    )])
    .expect("sentinel");
    assert!(matches!(config.client.store, StoreConfig::Sentinel(_)));
    // The environment alone: no file.
    let config = Config::loader()
        .env_vars("APP", [("APP__CLIENT__URL", "redis://cache:6379/")])
        .load()
        .expect("environment only");
    assert!(matches!(config.client.store, StoreConfig::Redis(_)));
}

#[test]
fn an_override_with_a_mistake_is_named_by_its_variable() {
    let err = load(&[("APP__LOCK__TTL", "30s ago")]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Field { kind: Kind::InvalidDuration, origin: Origin::Env(var), location: None, .. } if var == "APP__LOCK__TTL"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("environment variable APP__LOCK__TTL: field `lock.ttl`"),
        "{err}"
    );
    // A bare number is a TOML integer, and a duration needs its unit.
    let err = load(&[("APP__LOCK__TTL", "30")]).unwrap_err();
    assert_eq!(
        (err.field_kind(), err.field()),
        (Some(Kind::WrongType), Some("lock.ttl"))
    );
    let err = load(&[("APP__LOCK__TLL", "30s")]).unwrap_err();
    assert_eq!(
        (err.field_kind(), err.field()),
        (Some(Kind::UnknownField), Some("lock.tll"))
    );
    assert!(
        err.to_string()
            .starts_with("environment variable APP__LOCK__TLL:"),
        "{err}"
    );
    // A variable that sets a whole table, wrongly.
    let err = load(&[("APP__LOCK", "30s")]).unwrap_err();
    assert_eq!(
        (err.field_kind(), err.field()),
        (Some(Kind::WrongType), Some("lock"))
    );
    // An error in the file, with overrides applied elsewhere: the file's, without a line.
    let err = Config::loader()
        .toml("[client]\nmemory = true\n[lock]\nttl = \"1\"")
        .env_vars("APP", [("APP__CLIENT__PREFIX", "x")])
        .load()
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ConfigError::Field {
                origin: Origin::Text,
                location: None,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn variables_that_name_no_field_are_refused() {
    for var in ["APP__", "APP__LOCK____TTL", "APP__LOCK__", "APP____LOCK"] {
        let err = load(&[(var, "1")]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Env { var: v, .. } if v == var),
            "{var}: {err:?}"
        );
    }
    let err = load(&[("APP__LOCK__TTL__UNIT", "s")]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Env { reason, .. } if reason.contains("`lock.ttl` is not a table")),
        "{err:?}"
    );
}

#[test]
fn overrides_apply_inside_a_section() {
    let config = Config::loader()
        .toml("[distlock.client]\nmemory = true\n[other]\nx = 1")
        .section("distlock")
        .env_vars("APP", [("APP__LOCK__TTL", "3s")])
        .load()
        .expect("section");
    assert_eq!(
        lock_set(&config, "ttl", LockOptions::get_ttl),
        Some(Duration::from_secs(3))
    );
    let err = Config::loader()
        .toml("[distlock.client]\nmemory = true")
        .section("distlock")
        .env_vars("APP", [("APP__LOCK__TTL", "3")])
        .load()
        .unwrap_err();
    assert_eq!(err.field(), Some("distlock.lock.ttl"));
    assert!(matches!(
        err,
        ConfigError::Field {
            origin: Origin::Env(_),
            ..
        }
    ));
}

/// Variables that start with the prefix and one underscore are not configuration: the
/// repository's own tooling (`DISTLOCK_REDIS_SOURCES`, which a fresh clone's `.ci/run` needs,
/// made the guide's doctest fail when the loader still read it) and a deployment's own.
#[test]
fn unrelated_variables_under_the_prefix_change_nothing() {
    let text = "[client]\nmemory = true\nprefix = \"shop\"\n[lock]\nttl = \"10s\"\n";
    let unrelated = [
        ("DISTLOCK_REDIS_SOURCES", "/work/shared/redis-sources"),
        ("DISTLOCK_MATRIX", "full"),
        ("DISTLOCK_TEST_CHROMIUM", "/usr/bin/chromium"),
        ("DISTLOCK_HISTORY_SECS", "30"),
        ("DISTLOCK_SERVER_CACHE", "/tmp/cache"),
        ("DISTLOCK_LOCKS_PER_WORKER", "[not toml"),
        ("DISTLOCK_CLIENTS", "3"),
        ("DISTLOCK_", "x"),
        ("DISTLOCK", "x"),
    ];
    let plain = Config::loader().toml(text).load().expect("the text alone");
    let with = Config::loader()
        .toml(text)
        .env_vars("DISTLOCK", unrelated)
        .load()
        .expect("unrelated variables are not read");
    assert_eq!(format!("{with:?}"), format!("{plain:?}"));
    // Beside them, the namespace is read as before.
    let mut vars = unrelated.to_vec();
    vars.push(("DISTLOCK__LOCK__TTL", "30s"));
    let config = Config::loader()
        .toml(text)
        .env_vars("DISTLOCK", vars)
        .load()
        .expect("one override");
    assert_eq!(
        lock_set(&config, "ttl", LockOptions::get_ttl),
        Some(Duration::from_secs(30))
    );
}

/// The spelling before the namespace had its double underscore (`APP_LOCK__TTL`) is refused
/// with the new name, never dropped silently: it was configuration, and still looks it.
#[test]
fn the_old_spelling_is_refused_with_the_new_name() {
    for (var, new) in [
        ("APP_LOCK__TTL", "APP__LOCK__TTL"),
        ("APP_CLIENT__URL", "APP__CLIENT__URL"),
        (
            "APP_limiters__api__policies",
            "APP__limiters__api__policies",
        ),
        ("APP_LOCK", "APP__LOCK"),
    ] {
        let err = load(&[(var, "30s")]).unwrap_err();
        match &err {
            ConfigError::Env { var: v, reason } => {
                assert_eq!(v, var);
                assert!(reason.contains(new), "{var}: {reason}");
            }
            other => panic!("{var}: {other:?}"),
        }
    }
}

#[test]
fn the_process_environment_is_read_at_load() {
    // No variable has this prefix: the file, unchanged.
    let config = Config::loader()
        .toml("[client]\nmemory = true")
        .env("DISTLOCK_CONFIG_TEST_UNSET_PREFIX")
        .load()
        .expect("no variables under the prefix");
    assert!(matches!(config.client.store, StoreConfig::Memory));
}
