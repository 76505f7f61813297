//! `#[rate_limit]` on the function shapes `#[distributed_lock]` takes: a free function with a
//! key, a method reading its client and key from `self`, a generic function, a cost computed
//! from the parameters, several policies, waiting for a turn, a renamed crate path, and a
//! `Send` future for `tokio::spawn`.
#![deny(warnings)]

use std::fmt::Display;

use distlock::{Client, RateLimitError, rate_limit};

#[rate_limit(policy = "search: 2/min", key = "user:{user}", client = client)]
async fn search(client: &Client, user: u64, query: &str) -> Result<String, RateLimitError> {
    Ok(format!("{user} searched {query}"))
}

struct Mailer {
    limits: Client,
    tenant: String,
}

#[derive(Debug)]
enum MailError {
    Limited(RateLimitError),
}

impl From<RateLimitError> for MailError {
    fn from(err: RateLimitError) -> Self {
        Self::Limited(err)
    }
}

impl Mailer {
    #[rate_limit(
        policy = ["mail-burst: 10/s", "mail-daily: fixed-window 1000/d"],
        key = "tenant:{self.tenant}",
        cost = recipients.len(),
        client = &self.limits,
    )]
    async fn send(&mut self, recipients: Vec<String>) -> Result<usize, MailError> {
        self.tenant.push('!');
        Ok(recipients.len())
    }
}

#[rate_limit(policy = "tags: token-bucket 5/s", key = "{tag}", client = client, cost = weight)]
async fn tag<T: Display + Send>(client: &Client, tag: T, weight: u8) -> Result<String, RateLimitError> {
    Ok(tag.to_string())
}

#[rate_limit(
    policy = "partner: 50/s burst 1",
    on_limit = wait,
    max_wait = "5s",
    client = client,
    crate = "::distlock"
)]
async fn call_partner(client: &Client) -> Result<(), RateLimitError> {
    tokio::task::yield_now().await;
    Ok(())
}

fn assert_send<F: std::future::Future + Send + 'static>(future: F) -> F {
    future
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    assert_eq!(search(&client, 7, "rust").await.expect("first"), "7 searched rust");
    search(&client, 7, "rust").await.expect("second");
    match search(&client, 7, "rust").await {
        Err(RateLimitError::Limited { policy, .. }) => assert_eq!(policy, "search"),
        other => panic!("expected Limited, got {other:?}"),
    }

    let mut mailer = Mailer {
        limits: client.clone(),
        tenant: "acme".to_owned(),
    };
    let sent = mailer.send(vec!["a@x".into(), "b@x".into()]).await.expect("sent");
    assert_eq!((sent, mailer.tenant.as_str()), (2, "acme!"));
    match mailer.send(vec![String::new(); 11]).await {
        Err(MailError::Limited(RateLimitError::CostTooLarge { cost: 11, .. })) => {}
        other => panic!("expected CostTooLarge, got {other:?}"),
    }

    assert_eq!(tag(&client, 'x', 5).await.expect("tag"), "x");

    let spawned = tokio::spawn(assert_send({
        let client = client.clone();
        async move {
            for _ in 0..3 {
                call_partner(&client).await?;
            }
            Ok::<_, RateLimitError>(())
        }
    }));
    spawned.await.expect("task").expect("waited for its turns");
}
