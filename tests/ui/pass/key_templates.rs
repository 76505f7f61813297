//! Key templates: nested fields, tuple indices, literal braces, and text with no placeholder.
#![deny(warnings)]

use distlock::{Client, LockError, distributed_lock};

struct Customer {
    id: u32,
}

struct Order {
    customer: Customer,
    lines: (u8, u8),
}

#[distributed_lock(
    key = "{{orders}}:{order.customer.id}/{order.lines.1}:{pair.0}",
    client = client
)]
async fn nested(client: &Client, order: Order, pair: (char, bool)) -> Result<String, LockError> {
    let _ = (order, pair);
    Ok(distlock::current_lease().expect("held").name().to_owned())
}

#[distributed_lock(key = "singleton", client = client)]
async fn fixed(client: &Client) -> Result<String, LockError> {
    Ok(distlock::current_lease().expect("held").name().to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::in_memory();
    let order = Order {
        customer: Customer { id: 42 },
        lines: (3, 5),
    };
    let name = nested(&client, order, ('x', true)).await.expect("nested");
    assert_eq!(name, "{orders}:42/5:x");
    assert_eq!(fixed(&client).await.expect("fixed"), "singleton");
}
