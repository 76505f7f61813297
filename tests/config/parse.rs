//! What a configuration file can get wrong: each mistake is a typed error that names the
//! field and where it is; hostile input never panics.

use std::time::Duration;

use distlock::config::{
    BreakerConfig, Config, ConfigError, FieldErrorKind as Kind, Location, Origin, StoreConfig,
};
use distlock::ratelimit::{Algorithm, Outage};

use distlock::LockOptions;

use crate::{EXAMPLE, field_error, lock_set, syntax_error};

const MEMORY: &str = "[client]\nmemory = true\n";

#[test]
fn the_example_file_reads_as_documented() {
    let config = Config::from_file(EXAMPLE).expect("examples/distlock.toml");
    assert!(
        matches!(&config.client.store, StoreConfig::Redis(url) if url == "redis://127.0.0.1:6379/")
    );
    assert_eq!(config.client.prefix.as_deref(), Some("shop"));
    assert_eq!(
        config.client.response_timeout,
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        lock_set(&config, "ttl", LockOptions::get_ttl),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        lock_set(&config, "wait", LockOptions::get_wait),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        lock_set(&config, "max_hold", LockOptions::get_max_hold).flatten(),
        Some(Duration::from_secs(600))
    );

    let names: Vec<&str> = config.limiters.keys().map(String::as_str).collect();
    assert_eq!(names, ["api", "login"]);
    let api = &config.limiters["api"];
    assert_eq!(api.policies.len(), 1);
    assert_eq!(
        api.policies[0].name(),
        "api",
        "a policy without a name takes the limiter's"
    );
    assert_eq!(api.policies[0].to_string(), "api: gcra 100/s burst 20");
    assert_eq!(api.outage, Some(Outage::LocalFallback));
    assert_eq!(api.deadline, Some(Duration::from_millis(50)));
    let login = &config.limiters["login"];
    assert_eq!(login.policies[1].name(), "login-daily");
    assert_eq!(login.policies[1].algorithm(), Algorithm::FixedWindow);
    assert!(matches!(
        login.circuit_breaker,
        Some(BreakerConfig::On {
            trip_after: Some(3),
            ..
        })
    ));
}

#[test]
fn empty_and_comment_only_files_lack_the_client() {
    for text in ["", "\n\n", "# nothing here\n", "   \t\n# x\n"] {
        let shown = field_error(text, Kind::MissingField, "client");
        assert!(shown.contains("missing field `client`"), "{shown}");
    }
    // A lock without a client is still no configuration.
    field_error("[lock]\nttl = \"10s\"", Kind::MissingField, "client");
}

#[test]
fn unknown_keys_are_refused_with_their_path_and_line() {
    let shown = field_error(
        "[clinet]\nurl = \"redis://a/\"",
        Kind::UnknownField,
        "clinet",
    );
    assert!(
        shown.starts_with("configuration:1:2: unknown field `clinet`, expected `client`"),
        "{shown}"
    );
    let text = format!("{MEMORY}\n[lock]\nttl = \"10s\"\nwiat = \"2s\"\n");
    let shown = field_error(&text, Kind::UnknownField, "lock.wiat");
    assert!(
        shown.starts_with("configuration:6:1: unknown field `lock.wiat`"),
        "{shown}"
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\nburst = 20\n"),
        Kind::UnknownField,
        "limiters.api.burst",
    );
    field_error(
        "[client]\nsentinel = { mastr = \"m\", nodes = [\"redis://s:26379/\"] }",
        Kind::UnknownField,
        "client.sentinel.mastr",
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\ncircuit_breaker = {{ trip = 3 }}"),
        Kind::UnknownField,
        "limiters.api.circuit_breaker.trip",
    );
    field_error(
        "[client]\nquorum = { nodes = [\"redis://a/\"], timeout = \"1s\" }",
        Kind::UnknownField,
        "client.quorum.timeout",
    );
}

#[test]
fn a_missing_or_doubled_store_is_named() {
    let shown = field_error("[client]\nprefix = \"shop\"", Kind::NoStore, "client.url");
    assert!(
        shown.contains("no store: set exactly one of `url`"),
        "{shown}"
    );
    // `memory = false` names no store either.
    field_error("[client]\nmemory = false", Kind::NoStore, "client.url");
    field_error("[client]\n", Kind::NoStore, "client.url");
    let shown = field_error(
        "[client]\nurl = \"redis://a/\"\ncluster = [\"redis://b/\"]",
        Kind::TwoStores,
        "client.cluster",
    );
    assert!(shown.contains("both name a store"), "{shown}");
    field_error(
        "[client]\nsentinel = { nodes = [\"redis://s:26379/\"] }",
        Kind::MissingField,
        "client.sentinel.master",
    );
    field_error(
        "[client]\nsentinel = { master = \" \", nodes = [\"redis://s:26379/\"] }",
        Kind::InvalidValue,
        "client.sentinel.master",
    );
    field_error(
        "[client]\ncluster = []",
        Kind::InvalidValue,
        "client.cluster",
    );
    field_error(
        "[client]\nquorum = { node_timeout = \"1s\" }",
        Kind::MissingField,
        "client.quorum.nodes",
    );
}

#[test]
fn bad_durations_say_how_to_write_one() {
    for ttl in ["10", "ten seconds", "", "10 parsecs", "-5s", "1.5.2s"] {
        let text = format!("{MEMORY}[lock]\nttl = {ttl:?}");
        let shown = field_error(&text, Kind::InvalidDuration, "lock.ttl");
        assert!(shown.contains("write a number and a unit"), "{shown}");
    }
    // A number is not a duration: no unit to guess.
    let shown = field_error(
        &format!("{MEMORY}[lock]\nttl = 10"),
        Kind::WrongType,
        "lock.ttl",
    );
    assert!(shown.contains("a duration such as"), "{shown}");
    field_error(
        &format!("{MEMORY}[lock]\nwait = \"soon\""),
        Kind::InvalidDuration,
        "lock.wait",
    );
    field_error(
        "[client]\nmemory = true\nresponse_timeout = \"fast\"",
        Kind::InvalidDuration,
        "client.response_timeout",
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\ndeadline = \"50\""),
        Kind::InvalidDuration,
        "limiters.api.deadline",
    );
}

#[test]
fn zero_durations_are_refused_where_they_cannot_work() {
    for (text, field) in [
        ("[lock]\nttl = \"0s\"", "lock.ttl"),
        ("[lock]\nmax_hold = \"0s\"", "lock.max_hold"),
        (
            "[lock]\nreplicas = { count = 1, timeout = \"0s\" }",
            "lock.replicas.timeout",
        ),
        (
            "[limiters.api]\npolicies = \"100/s\"\ndeadline = \"0ms\"",
            "limiters.api.deadline",
        ),
        (
            "[limiters.api]\npolicies = \"100/s\"\nmax_in_flight = 0",
            "limiters.api.max_in_flight",
        ),
        (
            "[limiters.api]\npolicies = \"100/s\"\nrate_cache = { subjects = 0 }",
            "limiters.api.rate_cache.subjects",
        ),
    ] {
        field_error(&format!("{MEMORY}{text}"), Kind::InvalidValue, field);
    }
    field_error(
        "[client]\nmemory = true\nresponse_timeout = \"0s\"",
        Kind::InvalidValue,
        "client.response_timeout",
    );
    field_error(
        "[client]\nmemory = true\nconnect_timeout = \"0ns\"",
        Kind::InvalidValue,
        "client.connect_timeout",
    );
    field_error(
        "[client]\nquorum = { nodes = [\"redis://a/\"], node_timeout = \"0s\" }",
        Kind::InvalidValue,
        "client.quorum.node_timeout",
    );
    // Where zero means something, it is taken: no wait, no deny cache, no store patience.
    let config = Config::from_toml_str(&format!(
        "{MEMORY}[lock]\nwait = \"0s\"\nstore_patience = \"0s\"\nmin_hold = \"0s\"\n\
         [limiters.api]\npolicies = \"100/s\"\ndeny_cache = 0\n\
         deny_cache_max_age = \"0s\"\nmax_wait = \"0s\""
    ))
    .expect("zero where zero means off");
    assert_eq!(
        lock_set(&config, "wait", LockOptions::get_wait),
        Some(Duration::ZERO)
    );
    assert_eq!(config.limiters["api"].deny_cache, Some(0));
    assert_eq!(
        config.limiters["api"].deny_cache_max_age,
        Some(Duration::ZERO)
    );
}

#[test]
fn out_of_bounds_and_huge_numbers_are_errors_not_panics() {
    let shown = field_error(
        &format!("{MEMORY}[lock]\nttl = \"5ms\""),
        Kind::InvalidValue,
        "lock.ttl",
    );
    // At the value, not at its table.
    assert_eq!(
        shown,
        "configuration:4:7: field `lock.ttl`: 5ms is out of range: a ttl is 10ms to 7days"
    );
    field_error(
        &format!("{MEMORY}[lock]\nttl = \"8d\""),
        Kind::InvalidValue,
        "lock.ttl",
    );
    // Beyond what a Duration holds.
    field_error(
        &format!("{MEMORY}[lock]\nttl = \"100000000000000000000000s\""),
        Kind::InvalidDuration,
        "lock.ttl",
    );
    field_error(
        &format!("{MEMORY}[lock]\nmin_hold = \"2h\"\nmax_hold = \"1h\""),
        Kind::InvalidValue,
        "lock.min_hold",
    );
    field_error(
        &format!("{MEMORY}[lock]\nttl = \"1s\"\nreplicas = {{ count = 1, timeout = \"1s\" }}"),
        Kind::InvalidValue,
        "lock.replicas.timeout",
    );
    // Past u32.
    let shown = field_error(
        &format!("{MEMORY}[lock]\nreplicas = {{ count = 4294967296, timeout = \"1s\" }}"),
        Kind::InvalidValue,
        "lock.replicas.count",
    );
    assert!(
        shown.contains("4294967296 is more than 4294967295"),
        "{shown}"
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\ndeny_cache = -1"),
        Kind::InvalidValue,
        "limiters.api.deny_cache",
    );
    field_error(
        "[client]\nmemory = true\nreconnect_retries = -9223372036854775808",
        Kind::InvalidValue,
        "client.reconnect_retries",
    );
    // Past 64 bits.
    let shown = field_error(
        "[client]\nmemory = true\nreconnect_retries = 99999999999999999999",
        Kind::InvalidValue,
        "client.reconnect_retries",
    );
    assert!(
        shown.contains("99999999999999999999 is more than 18446744073709551615"),
        "{shown}"
    );
    field_error(
        "[client]\nmemory = true\nreconnect_retries = -99999999999999999999",
        Kind::InvalidValue,
        "client.reconnect_retries",
    );
    // Past what TOML holds at all: the parser's error, about the field.
    let shown = field_error(
        &format!(
            "[client]\nmemory = true\nreconnect_retries = 9{}",
            "9".repeat(60)
        ),
        Kind::InvalidValue,
        "client.reconnect_retries",
    );
    assert!(
        shown.contains("field `client.reconnect_retries`: integer number overflowed"),
        "{shown}"
    );
    field_error(
        "[client]\nmemory = true\nreconnect_retries = 1.5",
        Kind::WrongType,
        "client.reconnect_retries",
    );
    field_error(
        "[client]\nmemory = true\nreconnect_retries = inf",
        Kind::WrongType,
        "client.reconnect_retries",
    );
    field_error(
        &format!(
            "{MEMORY}[limiters.api]\npolicies = \"100/s\"\ncircuit_breaker = {{ trip_after = 0 }}"
        ),
        Kind::InvalidValue,
        "limiters.api.circuit_breaker",
    );
}

#[test]
fn tls_settings_that_would_do_nothing_are_refused() {
    for (tls, url) in [
        ("{}", "rediss://a/"),
        ("{ cert_file = \"c.pem\" }", "rediss://a/"),
        ("{ key_file = \"k.pem\" }", "rediss://a/"),
        // Over `redis://` the files would never be used: the connection would be in the clear.
        ("{ ca_file = \"ca.pem\" }", "redis://a/"),
    ] {
        field_error(
            &format!("[client]\nurl = {url:?}\ntls = {tls}"),
            Kind::InvalidValue,
            "client.tls",
        );
    }
    field_error(
        "[client]\ncluster = [\"rediss://a/\", \"redis://b/\"]\ntls = { ca_file = \"ca.pem\" }",
        Kind::InvalidValue,
        "client.tls",
    );
    field_error(
        "[client]\nurl = \"rediss://a/\"\ntls = { ca_file = \"\" }",
        Kind::InvalidValue,
        "client.tls.ca_file",
    );
    Config::from_toml_str("[client]\nurl = \"rediss://a/\"\ntls = { ca_file = \"ca.pem\" }")
        .expect("a CA for rediss://");
}

#[test]
fn bad_policies_name_the_policy() {
    let shown = field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/x\""),
        Kind::InvalidPolicy,
        "limiters.api.policies",
    );
    assert!(shown.contains("unknown unit `x`"), "{shown}");
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = [\"a: 1/s\", \"b: teleport 1/s\"]"),
        Kind::InvalidPolicy,
        "limiters.api.policies[1]",
    );
    // The table form: the policy's own error, which names its field.
    let err = Config::from_toml_str(&format!(
        "{MEMORY}[limiters.api]\npolicies = {{ name = \"api\", rate = \"0/s\" }}"
    ))
    .unwrap_err();
    assert_eq!(err.field_kind(), Some(Kind::InvalidPolicy));
    assert_eq!(err.field(), Some("limiters.api.policies"));
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = []"),
        Kind::InvalidValue,
        "limiters.api.policies",
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\noutage = \"fail-open\""),
        Kind::MissingField,
        "limiters.api.policies",
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = [\"a: 1/s\", \"a: 2/s\"]"),
        Kind::InvalidValue,
        "limiters.api.policies[1]",
    );
    let nine: Vec<String> = (0..9).map(|i| format!("\"p{i}: 1/s\"")).collect();
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = [{}]", nine.join(", ")),
        Kind::InvalidValue,
        "limiters.api.policies",
    );
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\noutage = \"open\""),
        Kind::InvalidValue,
        "limiters.api.outage",
    );
    // A limiter whose name cannot name a policy needs names in its lines.
    let long = "x".repeat(100);
    field_error(
        &format!("{MEMORY}[limiters.{long}]\npolicies = \"1/s\""),
        Kind::InvalidPolicy,
        &format!("limiters.{long}.policies"),
    );
    Config::from_toml_str(&format!(
        "{MEMORY}[limiters.{long}]\npolicies = \"short: 1/s\""
    ))
    .expect("a named policy in a long-named limiter");
}

/// Issue 28 §2: a policy's table takes a `lockout` table of `steps` and `remember`
/// (optional); each bound the builder checks is refused when the file is read, as the
/// policy's error, naming the lockout's field.
#[test]
fn lockouts_read_from_a_policy_table_and_their_bounds_are_refused() {
    let login = |lockout: &str| {
        format!(
            "{MEMORY}[limiters.login]\npolicies = {{ name = \"login\", algorithm = \
             \"fixed-window\", rate = \"5/min\", lockout = {lockout} }}"
        )
    };
    let config = Config::from_toml_str(&login(
        "{ steps = [\"1m\", \"5m\", \"1h\"], remember = \"24h\" }",
    ))
    .expect("a lockout");
    let policy = &config.limiters["login"].policies[0];
    let lockout = policy.lockout().expect("the policy has its lockout");
    let minute = Duration::from_secs(60);
    assert_eq!(lockout.steps(), [minute, 5 * minute, 60 * minute]);
    assert_eq!(lockout.memory(), 24 * 60 * minute);
    assert_eq!(
        policy.to_string(),
        "login: fixed-window 5/min [lockout 1min, 5min, 1h; remember 1d]"
    );
    let config = Config::from_toml_str(&login("{ steps = [\"90s\"] }")).expect("a lockout");
    let lockout = config.limiters["login"].policies[0].lockout().cloned();
    assert_eq!(
        lockout.map(|l| l.memory()),
        Some(distlock::ratelimit::DEFAULT_LOCKOUT_MEMORY),
        "remember is optional"
    );

    let nine: Vec<String> = (1..=9).map(|m| format!("\"{m}m\"")).collect();
    let nine = format!("{{ steps = [{}] }}", nine.join(", "));
    for (lockout, says) in [
        ("{ steps = [] }", "it needs at least one step"),
        (nine.as_str(), "more than 8 steps"),
        ("{ steps = [\"0s\"] }", "step 1 lasts 0ns; use 1ms..="),
        ("{ steps = [\"1m\", \"367d\"] }", "step 2 lasts 31708800s"),
        (
            "{ steps = [\"5m\", \"5m\"] }",
            "step 2 (300s) must be longer than step 1 (300s)",
        ),
        (
            "{ steps = [\"5m\", \"1m\"] }",
            "step 2 (60s) must be longer than step 1 (300s)",
        ),
        (
            "{ steps = [\"1m\"], remember = \"0s\" }",
            "breaches remembered for 0ns",
        ),
        (
            "{ steps = [\"1m\"], remember = \"400d\" }",
            "breaches remembered for 34560000s",
        ),
        (
            "{ steps = [\"1m\", \"5x\"] }",
            "field `lockout.steps[1]`: invalid duration \"5x\"",
        ),
        (
            "{ steps = [\"1m\"], remember = \"soon\" }",
            "field `lockout.remember`: invalid duration \"soon\"",
        ),
        (
            "{ steps = \"1m\" }",
            "field `lockout.steps`: a list of durations",
        ),
        ("{ steps = [60] }", "field `lockout.steps[0]`: text"),
        ("{ remember = \"1h\" }", "missing field `steps`"),
        (
            "{ steps = [\"1m\"], forever = true }",
            "unknown field `forever`, expected `steps` or `remember`",
        ),
        ("\"1m\"", "a lockout: a table of `steps`"),
    ] {
        let shown = field_error(
            &login(lockout),
            Kind::InvalidPolicy,
            "limiters.login.policies",
        );
        assert!(shown.contains(says), "{lockout}: {shown}");
    }
    // The bounds are the policy's: `field `lockout`` and the typed error's text.
    let shown = field_error(
        &login("{ steps = [\"5m\", \"1m\"] }"),
        Kind::InvalidPolicy,
        "limiters.login.policies",
    );
    assert!(
        shown.contains("field `lockout`: invalid lockout of policy `login`"),
        "{shown}"
    );
}

#[test]
fn wrong_types_are_named() {
    for (text, field) in [
        ("client = \"redis://a/\"", "client"),
        ("[client]\nmemory = \"yes\"", "client.memory"),
        ("[client]\ncluster = \"redis://a/\"", "client.cluster"),
        ("[client]\ncluster = [1, 2]", "client.cluster[0]"),
        ("[client]\nurl = 6379", "client.url"),
        ("[client]\nquorum = \"redis://a/\"", "client.quorum"),
        ("[client]\nmemory = true\nprefix = []", "client.prefix"),
        ("[client]\nmemory = true\nlimiters = 1", "client.limiters"),
        ("[client]\nmemory = true\n[[lock]]\nttl = \"1s\"", "lock"),
        (
            "[client]\nmemory = true\nlimiters = [\"a\"]",
            "client.limiters",
        ),
        (
            "[client]\nmemory = true\n[limiters]\napi = \"100/s\"",
            "limiters.api",
        ),
        (
            "[client]\nmemory = true\n[limiters.api]\npolicies = 5",
            "limiters.api.policies",
        ),
        (
            "[client]\nmemory = true\n[limiters.api]\npolicies = \"1/s\"\nshadow = \"no\"",
            "limiters.api.shadow",
        ),
        (
            "[client]\nmemory = true\n[limiters.api]\npolicies = \"1/s\"\ncircuit_breaker = \"on\"",
            "limiters.api.circuit_breaker",
        ),
        (
            "[client]\nmemory = true\n[lock]\nttl = 2024-01-01T00:00:00Z",
            "lock.ttl",
        ),
    ] {
        let kind = if field == "client.limiters" {
            Kind::UnknownField
        } else {
            Kind::WrongType
        };
        field_error(text, kind, field);
    }
}

#[test]
fn keys_given_twice_are_the_parsers_to_refuse() {
    syntax_error("[client]\nmemory = true\nmemory = true");
    syntax_error("[client]\nmemory = true\n[client]\nprefix = \"x\"");
    syntax_error(&format!(
        "{MEMORY}[limiters.api]\npolicies = \"1/s\"\n[limiters.api]\n"
    ));
}

#[test]
fn syntax_errors_say_where() {
    let shown = syntax_error("[client]\nurl = \"redis://a/\nprefix = \"x\"");
    assert!(shown.starts_with("configuration:2:"), "{shown}");
    assert!(shown.contains("not valid TOML"), "{shown}");
    syntax_error("[client");
    syntax_error("\u{0}\u{1}\u{2}");
    syntax_error("= 1");
}

#[test]
fn files_that_cannot_be_read_are_read_errors() {
    let err = Config::from_file("/nonexistent/distlock.toml").unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("cannot read /nonexistent/distlock.toml")
    );
    // A directory is not a file; invalid UTF-8 is not text.
    assert!(matches!(
        Config::from_file(env!("CARGO_MANIFEST_DIR")),
        Err(ConfigError::Read { .. })
    ));
    let dir = std::env::temp_dir().join(format!("distlock-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("binary.toml");
    std::fs::write(&binary, [0xff, 0xfe, b'[', 0x80]).unwrap();
    assert!(matches!(
        Config::from_file(&binary),
        Err(ConfigError::Read { .. })
    ));
    // Errors in a file carry its path.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[client]\nmemory = true\n[lock]\nttl = \"1\"\n").unwrap();
    let err = Config::from_file(&bad).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Field { origin: Origin::File(path), location: Some(Location { line: 4, column: 7 }), .. } if *path == bad),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with(&format!("{}:4:7: field `lock.ttl`", bad.display()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_section_of_a_larger_file() {
    let text = "[app]\nport = 8080\n\n[distlock.client]\nmemory = true\n\n[distlock.lock]\nttl = \"9s\"\nwiat = 1\n";
    let err = Config::loader()
        .toml(text)
        .section("distlock")
        .load()
        .unwrap_err();
    assert_eq!(err.field(), Some("distlock.lock.wiat"));
    assert_eq!(err.field_kind(), Some(Kind::UnknownField));
    assert!(err.to_string().starts_with("configuration:9:1:"), "{err}");
    let config = Config::loader()
        .toml(text.replace("wiat = 1\n", ""))
        .section("distlock")
        .load()
        .expect("the section");
    assert_eq!(
        lock_set(&config, "ttl", LockOptions::get_ttl),
        Some(Duration::from_secs(9))
    );
    let err = Config::loader()
        .toml("[app]\nport = 1")
        .section("distlock")
        .load()
        .unwrap_err();
    assert_eq!(err.field_kind(), Some(Kind::MissingField));
    assert_eq!(err.field(), Some("distlock"));
    let err = Config::loader()
        .toml("distlock = 1")
        .section("distlock")
        .load()
        .unwrap_err();
    assert_eq!(err.field_kind(), Some(Kind::WrongType));
}

/// Input no configuration has: huge, deep, odd. Each is an error or a configuration, never a
/// panic or a stack overflow.
#[test]
fn hostile_input_never_panics() {
    let huge_value = format!(
        "[client]\nmemory = true\nprefix = \"{}\"",
        "x".repeat(1 << 20)
    );
    Config::from_toml_str(&huge_value).expect("a long prefix is the client's to refuse");
    let huge_key = format!("[client]\nmemory = true\n{} = 1", "k".repeat(1 << 16));
    field_error(
        &huge_key,
        Kind::UnknownField,
        &format!("client.{}", "k".repeat(1 << 16)),
    );
    let many_nodes: Vec<String> = (0..10_000).map(|i| format!("\"redis://n{i}/\"")).collect();
    Config::from_toml_str(&format!("[client]\ncluster = [{}]", many_nodes.join(",")))
        .expect("ten thousand cluster nodes read");
    let many_policies: Vec<String> = (0..10_000).map(|i| format!("\"p{i}: 1/s\"")).collect();
    field_error(
        &format!(
            "{MEMORY}[limiters.api]\npolicies = [{}]",
            many_policies.join(",")
        ),
        Kind::InvalidValue,
        "limiters.api.policies",
    );
    for depth in [64, 1_000, 100_000] {
        let deep = format!(
            "{MEMORY}[lock]\nttl = {}{}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let _ = Config::from_toml_str(&deep);
        let deep = format!(
            "{MEMORY}[lock]\nttl = {}1{}",
            "{a=".repeat(depth),
            "}".repeat(depth)
        );
        let _ = Config::from_toml_str(&deep);
    }
    for text in [
        "\u{feff}[client]\nmemory = true",
        "[client]\r\nmemory = true\r\n",
        "[\"client\"]\nmemory = true",
        "[client]\n\"memory\" = true\n'prefix' = 'é🦀'",
        "[client.\"\u{0}\"]\n",
        "[client]\nmemory = true\n[limiters.\"\"]\npolicies = \"1/s\"",
        "[client]\nmemory = true\n[limiters.\"a:b\"]\npolicies = \"1/s\"",
        "[client]\nmemory = true\n[limiters.\"é\"]\npolicies = \"1/s\"",
    ] {
        // Any outcome but a panic; errors display.
        if let Err(err) = Config::from_toml_str(text) {
            assert!(!err.to_string().is_empty());
        }
    }
}

/// Every line of the example file, removed or with its value replaced by a hostile one:
/// always a configuration or an error, never a panic.
#[test]
fn mutations_of_the_example_never_panic() {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let values = [
        "\"\"",
        "0",
        "-1",
        "9223372036854775807",
        "-9223372036854775808",
        "1.0e308",
        "nan",
        "true",
        "[]",
        "{}",
        "[[]]",
        "\"0s\"",
        "\"forever\"",
        "\"18446744073709551615s\"",
        "\"∞\"",
        "\"100/0s\"",
        "\"a:\"",
        "\":\"",
        "1979-05-27",
    ];
    let mut outcomes = [0usize; 2];
    for (i, line) in lines.iter().enumerate() {
        let mut mutated: Vec<String> = Vec::new();
        mutated.push(
            lines
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, l)| *l)
                .collect::<Vec<_>>()
                .join("\n"),
        );
        if let Some((key, _)) = line.split_once(" = ") {
            for value in values {
                let mut copy: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
                copy[i] = format!("{key} = {value}");
                mutated.push(copy.join("\n"));
            }
        }
        for text in mutated {
            match Config::from_toml_str(&text) {
                Ok(_) => outcomes[0] += 1,
                Err(err) => {
                    assert!(!err.to_string().is_empty());
                    outcomes[1] += 1;
                }
            }
        }
    }
    assert!(outcomes[1] > 100, "{outcomes:?}");
}

#[test]
fn locations_count_characters_on_their_line() {
    let text = "[client]\nmemory = true\n[lock]\n# é🦀\nttl = \"é\"";
    let err = Config::from_toml_str(text).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Field {
                location: Some(Location { line: 5, column: 7 }),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn retry_knobs_read_and_their_bounds_are_refused() {
    let config = Config::from_toml_str(&format!(
        "{MEMORY}[lock]\nmax_attempts = 3\nretry_backoff = {{ first = \"10ms\", largest = \"2s\" }}"
    ))
    .expect("retry knobs");
    assert_eq!(
        lock_set(&config, "max_attempts", LockOptions::get_max_attempts).flatten(),
        Some(3)
    );
    let backoff = lock_set(&config, "retry_backoff", LockOptions::get_retry_backoff);
    assert_eq!(
        backoff.expect("retry_backoff"),
        (Duration::from_millis(10), Duration::from_secs(2))
    );
    for (text, field) in [
        ("max_attempts = 0", "lock.max_attempts"),
        (
            "retry_backoff = { first = \"0s\", largest = \"1s\" }",
            "lock.retry_backoff.first",
        ),
        (
            "retry_backoff = { first = \"2s\", largest = \"1s\" }",
            "lock.retry_backoff.first",
        ),
        (
            "retry_backoff = { first = \"1s\", largest = \"61s\" }",
            "lock.retry_backoff.largest",
        ),
    ] {
        field_error(
            &format!("{MEMORY}[lock]\n{text}"),
            Kind::InvalidValue,
            field,
        );
    }
    field_error(
        &format!("{MEMORY}[lock]\nretry_backoff = {{ first = \"1s\" }}"),
        Kind::MissingField,
        "lock.retry_backoff.largest",
    );
    field_error(
        &format!("{MEMORY}[lock]\nmax_attempts = -1"),
        Kind::InvalidValue,
        "lock.max_attempts",
    );
}

#[test]
fn a_lazy_start_reads_and_is_refused_where_it_cannot_work() {
    let config = Config::from_toml_str("[client]\nurl = \"redis://a/\"\nlazy = true")
        .expect("lazy with a url");
    assert!(config.client.lazy);
    let config = Config::from_toml_str("[client]\nurl = \"redis://a/\"").expect("no lazy");
    assert!(!config.client.lazy, "off unless set");
    for store in [
        "cluster = [\"redis://a/\"]",
        "quorum = [\"redis://a/\", \"redis://b/\", \"redis://c/\"]",
        "sentinel = { master = \"m\", nodes = [\"redis://s/\"] }",
    ] {
        field_error(
            &format!("[client]\n{store}\nlazy = true"),
            Kind::InvalidValue,
            "client.lazy",
        );
    }
    field_error(
        "[client]\nurl = \"redis://a/\"\nlazy = 1",
        Kind::WrongType,
        "client.lazy",
    );
}

#[test]
fn a_holder_identity_reads_and_a_bad_one_is_refused() {
    let config = Config::from_toml_str("[client]\nmemory = true\nidentity = \"billing-7\"")
        .expect("an identity");
    assert_eq!(config.client.identity.as_deref(), Some("billing-7"));
    let config = Config::from_toml_str("[client]\nmemory = true").expect("no identity");
    assert_eq!(config.client.identity, None, "the default unless set");
    for bad in ["\"\"", "\"two words\"", &format!("\"{}\"", "z".repeat(129))] {
        field_error(
            &format!("[client]\nmemory = true\nidentity = {bad}"),
            Kind::InvalidValue,
            "client.identity",
        );
    }
    field_error(
        "[client]\nmemory = true\nidentity = 7",
        Kind::WrongType,
        "client.identity",
    );
}

#[test]
fn watching_deletions_reads_and_is_refused_where_it_cannot_work() {
    let config = Config::from_toml_str("[client]\nurl = \"redis://a/\"\nwatch_deletions = true")
        .expect("watch with a url");
    assert!(config.client.watch_deletions);
    for store in [
        "cluster = [\"redis://a/\"]",
        "quorum = [\"redis://a/\", \"redis://b/\", \"redis://c/\"]",
    ] {
        field_error(
            &format!("[client]\n{store}\nwatch_deletions = true"),
            Kind::InvalidValue,
            "client.watch_deletions",
        );
    }
}

/// A URL that is not a Redis URL, and a prefix the builder would refuse, are caught when the
/// file is read, with the field, the file and the line, not at `connect()` without any.
#[test]
fn urls_and_the_prefix_are_checked_when_read() {
    let shown = field_error(
        "[client]\nprefix = \"shop\"\nurl = \"http://app:s3cret@cache:6379/\"",
        Kind::InvalidValue,
        "client.url",
    );
    assert!(
        shown.starts_with("configuration:3:7: field `client.url`"),
        "{shown}"
    );
    assert!(shown.contains("not a Redis URL"), "{shown}");
    assert!(shown.contains("redis://host:6379/"), "the fix: {shown}");
    assert!(
        !shown.contains("s3cret"),
        "the password is not shown: {shown}"
    );

    let shown = field_error(
        "[client]\nmemory = true\nprefix = \"shop{1}\"",
        Kind::InvalidValue,
        "client.prefix",
    );
    assert!(
        shown.starts_with("configuration:3:10: field `client.prefix`"),
        "{shown}"
    );
    assert!(shown.contains("without braces"), "{shown}");

    let shown = field_error(
        "[client]\ncluster = [\"redis://a:7000/\", \"tcp://b:7000/\"]",
        Kind::InvalidValue,
        "client.cluster",
    );
    assert!(
        shown.contains("[1]"),
        "the node is named by its index: {shown}"
    );
    field_error(
        "[client]\nquorum = [\"redis://a/\", \"redis://b/\", \"a-host-only\"]",
        Kind::InvalidValue,
        "client.quorum",
    );
    field_error(
        "[client]\nquorum = { nodes = [\"redis://a/\", \"ftp://b/\"] }",
        Kind::InvalidValue,
        "client.quorum.nodes",
    );
    field_error(
        "[client]\nsentinel = { master = \"m\", nodes = [\"sentinel://s:26379/\"] }",
        Kind::InvalidValue,
        "client.sentinel.nodes",
    );
    // The same file from disk names the file.
    let dir = std::env::temp_dir().join(format!("distlock-url-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("distlock.toml");
    std::fs::write(&path, "[client]\nurl = \"http://cache:6379/\"\n").expect("write");
    let err = Config::from_file(&path).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{}:2:7: field `client.url`", path.display())),
        "{shown}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// `counting_on` reads as another client's table; what cannot count, or would count under
/// another prefix, is refused when read.
#[test]
fn counting_on_reads_and_is_refused_where_it_cannot_count() {
    let quorum =
        "[client]\nquorum = [\"redis://a/\", \"redis://b/\", \"redis://c/\"]\nprefix = \"shop\"\n";
    let config = Config::from_toml_str(&format!(
        "{quorum}counting_on = {{ cluster = [\"redis://counts:7000/\"] }}"
    ))
    .expect("a quorum counting on a Cluster");
    let counting = config.client.counting_on.as_deref().expect("counting_on");
    assert!(matches!(
        counting.store,
        distlock::config::StoreConfig::Cluster(_)
    ));
    assert_eq!(counting.prefix, None, "the quorum's prefix, at connect");
    Config::from_toml_str(&format!(
        "{quorum}counting_on = {{ url = \"redis://counts/\", prefix = \"shop\" }}"
    ))
    .expect("the same prefix, spelt out");

    let shown = field_error(
        &format!("{quorum}counting_on = {{ quorum = [\"redis://x/\"] }}"),
        Kind::InvalidValue,
        "client.counting_on",
    );
    assert!(shown.contains("cannot count"), "{shown}");
    let shown = field_error(
        &format!("{quorum}counting_on = {{ url = \"redis://counts/\", prefix = \"other\" }}"),
        Kind::InvalidValue,
        "client.counting_on.prefix",
    );
    assert!(shown.contains("one prefix"), "{shown}");
    field_error(
        &format!(
            "{quorum}counting_on = {{ url = \"redis://counts/\", counting_on = {{ memory = true }} }}"
        ),
        Kind::InvalidValue,
        "client.counting_on.counting_on",
    );
    field_error(
        &format!("{quorum}counting_on = {{ url = \"redis://counts/\", prefx = \"shop\" }}"),
        Kind::UnknownField,
        "client.counting_on.prefx",
    );
}

/// A limiter option out of its bounds is refused by every door under the same name: the
/// builder (`LimiterOptions::check` through `build`), `LimiterOptions` itself, and a
/// configuration file's limiter table, when it is read.
#[test]
fn every_door_refuses_a_limiter_option_by_the_same_name() {
    use distlock::ratelimit::{LimiterOptions, Policy, Rate};
    use distlock::{InvalidPolicy, RateLimitError};

    let client = distlock::Client::in_memory();
    let policy = Policy::gcra("api", Rate::per_second(100).expect("rate")).expect("policy");
    type Set = fn(LimiterOptions) -> LimiterOptions;
    let cases: [(&str, &str, Set); 4] = [
        ("deadline = \"0s\"", "deadline", |o| {
            o.deadline(Duration::ZERO)
        }),
        ("max_in_flight = 0", "max_in_flight", |o| o.max_in_flight(0)),
        (
            "rate_cache = { subjects = 0 }",
            "rate_cache.subjects",
            |o| o.rate_cache(Duration::from_secs(60), 0),
        ),
        ("max_wait = \"400days\"", "max_wait", |o| {
            o.max_wait(Duration::from_secs(400 * 86_400))
        }),
    ];
    for (line, field, set) in cases {
        let options = set(LimiterOptions::new());
        assert_eq!(options.check().map_err(|e| e.field()), Err(field));
        let built = client.rate_limiter(policy.clone()).options(options).build();
        match built {
            Err(RateLimitError::InvalidPolicy(InvalidPolicy::LimiterOption(invalid))) => {
                assert_eq!(invalid.field(), field);
            }
            other => panic!("{field}: {other:?}"),
        }
        field_error(
            &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\n{line}"),
            Kind::InvalidValue,
            &format!("limiters.api.{field}"),
        );
    }
    // "forever" is the one wait longer than MAX_WAIT taken, in both doors.
    let config = Config::from_toml_str(&format!(
        "{MEMORY}[limiters.api]\npolicies = \"100/s\"\nmax_wait = \"forever\""
    ))
    .expect("forever");
    let options = config.limiters["api"].options().expect("options");
    assert_eq!(options.get_max_wait(), Duration::MAX);
    assert!(options.check().is_ok());
}

/// A limiter table sets the sliding logs' retention and the hybrid mode as the builder does,
/// and refuses what the builder refuses, naming the field.
#[test]
fn a_limiter_table_sets_log_retention_and_the_hybrid_mode() {
    let config = Config::from_toml_str(&format!(
        "{MEMORY}[limiters.api]\npolicies = \"100/s\"\nkeep_logs_for = \"1h\"\n\
         hybrid = {{ share = 20, sync = \"250ms\" }}"
    ))
    .expect("both");
    let options = config.limiters["api"].options().expect("options");
    assert_eq!(options.get_keep_logs_for(), Some(Duration::from_secs(3600)));
    assert_eq!(options.get_hybrid(), Some((20, Duration::from_millis(250))));
    for (line, field) in [
        ("keep_logs_for = \"0s\"", "keep_logs_for"),
        ("keep_logs_for = \"400days\"", "keep_logs_for"),
        ("hybrid = { share = 0, sync = \"1s\" }", "hybrid.share"),
        ("hybrid = { share = 5, sync = \"0s\" }", "hybrid.sync"),
    ] {
        field_error(
            &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\n{line}"),
            Kind::InvalidValue,
            &format!("limiters.api.{field}"),
        );
    }
    field_error(
        &format!("{MEMORY}[limiters.api]\npolicies = \"100/s\"\nhybrid = {{ share = 5 }}"),
        Kind::MissingField,
        "limiters.api.hybrid.sync",
    );
}

/// A holder identity from a `[lock]` table reaches the lease, and one that cannot be an
/// identity (empty, with a space or a control character, too long) or a value of the wrong
/// type is refused when the file is read, naming the field.
#[tokio::test]
async fn a_lock_tables_identity_is_the_holders_and_bad_ones_are_refused() {
    let config = Config::from_toml_str(&format!(
        "{MEMORY}[lock]\nidentity = \"billing-worker\"\nmax_attempts = 2"
    ))
    .expect("identity");
    let client = config.client.connect().await.expect("memory");
    let lease = config
        .lock
        .lock(&client, "payouts")
        .acquire()
        .await
        .expect("granted");
    match client.lock_state("payouts").await.expect("state") {
        distlock::LockState::Held {
            holder: Some(holder),
            ..
        } => assert_eq!(holder.identity, "billing-worker"),
        other => panic!("expected the lock held by billing-worker, got {other:?}"),
    }
    lease.release().await.expect("released");

    let long = "x".repeat(200);
    for value in [
        "\"\"",
        "\"two words\"",
        "\"tab\\there\"",
        &format!("\"{long}\""),
    ] {
        field_error(
            &format!("{MEMORY}[lock]\nidentity = {value}"),
            Kind::InvalidValue,
            "lock.identity",
        );
    }
    for (text, kind) in [
        ("identity = 7", Kind::WrongType),
        ("max_attempts = -1", Kind::InvalidValue),
        ("max_attempts = 0", Kind::InvalidValue),
        ("max_attempts = 99999999999", Kind::InvalidValue),
        ("fair = \"yes\"", Kind::WrongType),
    ] {
        let field = format!("lock.{}", text.split(' ').next().expect("a name"));
        field_error(&format!("{MEMORY}[lock]\n{text}"), kind, &field);
    }
}
