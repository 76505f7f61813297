//! The body keeps its control flow and inference: `?` converts errors into the declared type,
//! `return` leaves early, result aliases work, and so does an `impl Trait` output. Inner
//! attributes stay on the function.
#![deny(warnings)]

use std::fmt::Display;

use distlock::{Client, LockError, distributed_lock};

#[path = "../shared/app_error.rs"]
mod app_error;

use app_error::AppError;

type AppResult<T> = Result<T, AppError>;

#[distributed_lock(key = "parse:{text}", client = client)]
async fn parse(client: &Client, text: &str) -> AppResult<Vec<u32>> {
    #![allow(clippy::needless_return)]
    // Known only from the return type, as in the original function.
    let mut values = Default::default();
    if text.is_empty() {
        return Ok(values);
    }
    values.push(text.parse()?);
    Ok(values)
}

#[distributed_lock(key = "display", client = client)]
async fn shown(client: &Client) -> std::result::Result<impl Display, LockError> {
    Ok(7)
}

#[distributed_lock(key = "unfinished", client = client)]
async fn diverges(client: &Client, stop: bool) -> Result<(), AppError> {
    if stop {
        return Ok(());
    }
    todo!("the body may end in a diverging expression")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    assert_eq!(parse(&client, "").await.expect("empty"), Vec::<u32>::new());
    assert_eq!(parse(&client, "12").await.expect("number"), vec![12]);
    assert!(matches!(parse(&client, "x").await, Err(AppError::Parse(_))));
    // The early returns released the lock.
    assert_eq!(parse(&client, "3").await.expect("number"), vec![3]);
    assert_eq!(shown(&client).await.expect("shown").to_string(), "7");
    diverges(&client, true).await.expect("returns early");
}
