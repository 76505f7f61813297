//! `crate = "..."` for a renamed or re-exported `distlock`.
#![deny(warnings)]

extern crate distlock as locks;

mod deps {
    pub use ::distlock as coordination;
}

use locks::LockError;

#[locks::distributed_lock(key = "renamed", crate = "::locks", client = client)]
async fn renamed(client: &locks::Client) -> Result<(), LockError> {
    Ok(())
}

#[deps::coordination::distributed_lock(
    key = "reexported",
    crate = "crate::deps::coordination",
    client = client
)]
async fn reexported(client: &deps::coordination::Client) -> Result<(), LockError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = locks::Client::in_memory();
    renamed(&client).await.expect("renamed");
    reexported(&client).await.expect("reexported");
}
