//! The console's page in a real headless Chromium, over TCP: it shows a lock that another
//! process holds (its holder's identity, time left), refuses to force it without the
//! operator's token, and once the operator gives it, forces it free; the lock is then absent
//! from the page and from the store, and its holder is told.

use std::time::Duration;

use axum::Router;
use distlock::LockState;
use distlock_tower::console::{Console, bearer_token};
use serde_json::Value;

use crate::chromium::Browser;
use crate::support::RedisServer;
use crate::support::child::{self, ChildProcess, say};
use crate::support::fixture::connect;

/// This binary's entry test for child processes.
const ENTRY: &str = "browser::child_entry";
/// The lock the child holds: a name that needs encoding in a URL and in a key.
const LOCK: &str = "orders/{42}";
/// The child's identity, as the page must show it.
const HOLDER: &str = "shop-replica-2";

/// The holder: takes [`LOCK`] as [`HOLDER`], says `HOLDING`, and `LOST` once its lease is
/// lost; then idles until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as a child process of the tests in this module"]
async fn child_entry() {
    let Some((role, url)) = child::role() else {
        return;
    };
    assert_eq!(role, "holder");
    let client = connect(&url).await;
    let lease = client
        .lock(LOCK)
        .identity(HOLDER)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    say("HOLDING");
    lease.handle().lost().await;
    say("LOST");
    std::future::pending::<()>().await;
}

/// The table's rows, each a list of its cells' text.
const ROWS: &str = "JSON.stringify([...document.querySelectorAll('#locks tbody tr')]\
    .map(tr => [...tr.cells].map(td => td.textContent)))";

fn rows(value: &Value) -> Vec<Vec<String>> {
    serde_json::from_str(value.as_str().unwrap_or("[]")).expect("rows as JSON")
}

/// Clicks the force-unlock button of [`LOCK`], answering yes to the page's confirmation.
fn click_force(browser: &mut Browser) -> Value {
    let name = serde_json::to_string(LOCK).expect("JSON");
    browser.eval(&format!(
        "(() => {{ window.confirm = () => true; \
         const b = [...document.querySelectorAll('button[data-force]')]\
         .find(b => b.dataset.force === {name}); \
         if (!b || b.disabled) return false; b.click(); return true; }})()"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_another_processs_lock_and_forces_it_free() {
    let server = RedisServer::start();
    let holder = ChildProcess::spawn(ENTRY, "holder", &server.url());
    holder.expect_line("HOLDING", Duration::from_secs(60));
    let client = connect(&server.url()).await;
    // As the guide says: the token for every read and change; the page itself (static
    // files, no data) for anyone, so that a browser can open it.
    let console = Console::new(client.clone()).authorize(bearer_token("t0ken"));
    let app = Router::new().nest("/admin/console", console.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    let url = format!("http://{addr}/admin/console");

    let page = tokio::task::spawn_blocking(move || {
        let mut browser = Browser::launch();
        browser.navigate(&url);
        // Without the operator's token the page loads, but the server tells it nothing.
        let error = browser.eval_until(
            "document.getElementById('error').textContent",
            Duration::from_secs(30),
            |v| v.as_str().is_some_and(|s| s.contains("403")),
        );
        assert!(error.as_str().is_some_and(|s| s.contains("403")), "{error}");
        assert!(rows(&browser.eval(ROWS)).is_empty(), "no lock shown yet");

        // The operator types the token; the page reads the locks with it.
        browser.eval(
            "(() => { const t = document.getElementById('token'); t.value = 't0ken'; \
             t.dispatchEvent(new Event('change')); return true; })()",
        );
        let shown = rows(&browser.eval_until(ROWS, Duration::from_secs(30), |v| {
            rows(v)
                .iter()
                .any(|row| row.first().is_some_and(|n| n == LOCK))
        }));
        let row = shown
            .iter()
            .find(|row| row[0] == LOCK)
            .unwrap_or_else(|| panic!("the page lists {LOCK}: {shown:?}"));
        assert_eq!(row[1], HOLDER, "the holder's identity: {row:?}");
        assert!(row[3].ends_with(" s"), "time left: {row:?}");
        assert_eq!(row[4], "no", "no waiter: {row:?}");
        let store = browser.eval("document.getElementById('store').textContent");
        assert!(
            store
                .as_str()
                .is_some_and(|s| s.starts_with("redis · ready")),
            "{store}"
        );

        // The click frees the lock (the page's own POST: same origin, with the token).
        let mut clicked = false;
        for _ in 0..50 {
            if click_force(&mut browser) == Value::Bool(true) {
                clicked = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(clicked, "the button is enabled again");
        let after = rows(&browser.eval_until(ROWS, Duration::from_secs(15), |v| {
            rows(v).iter().all(|row| row[0] != LOCK)
        }));
        assert!(
            after.iter().all(|row| row[0] != LOCK),
            "gone from the page: {after:?}"
        );
        let empty = browser.eval("!document.getElementById('no-locks').hidden");
        assert_eq!(empty, Value::Bool(true), "the page says no lock is held");
    })
    .await;
    if let Err(err) = page {
        std::panic::resume_unwind(err.into_panic());
    }

    assert_eq!(
        client.lock_state(LOCK).await.expect("state"),
        LockState::Free
    );
    // Told on the revocation channel, or at worst at its first renewal (a third of 30 s).
    holder.expect_line("LOST", Duration::from_secs(25));
}
