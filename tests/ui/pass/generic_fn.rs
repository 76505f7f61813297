//! Generic functions: type parameters in the key, lifetimes, `where` clauses, `impl Trait`
//! arguments, and an associated function returning `Self`.
#![deny(warnings)]

use std::fmt::Display;

use distlock::{Client, LockError, distributed_lock};

#[distributed_lock(key = "item:{id}:{label}", client = client)]
async fn touch<'a, I, L>(client: &'a Client, id: I, label: L) -> Result<&'a str, LockError>
where
    I: Display + Send,
    L: Display + Send,
{
    let lease = distlock::current_lease().expect("inside the lock");
    assert_eq!(lease.name(), format!("item:{id}:{label}"));
    Ok("touched")
}

#[distributed_lock(key = "impl:{tag}", client = client)]
async fn with_impl(client: &Client, tag: impl Display + Send) -> Result<String, LockError> {
    Ok(tag.to_string())
}

struct Counter<T>(T);

impl<T: Clone + Display + Send + Sync> Counter<T> {
    #[distributed_lock(key = "counter:{seed}", client = client)]
    async fn new(client: &Client, seed: T) -> Result<Self, LockError> {
        Ok(Self(seed.clone()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    assert_eq!(touch(&client, 7_u8, "seven").await.expect("touch"), "touched");
    assert_eq!(with_impl(&client, 'x').await.expect("impl"), "x");
    let counter = Counter::new(&client, 3_u32).await.expect("new");
    assert_eq!(counter.0, 3);
}
