//! An axum-style handler: parameters are extractor patterns that bind names, the client comes
//! from the state, and the returned future is `Send` (axum and `tokio::spawn` require it).
//! The extractor types are lookalikes of axum's so this case needs no web framework.
#![deny(warnings)]

use std::sync::Arc;

use distlock::{Client, LockError, distributed_lock};

struct Path<T>(T);
struct State<T>(T);
struct Json<T>(T);

#[derive(Clone)]
struct App {
    locks: Client,
    sold: Arc<std::sync::Mutex<Vec<u32>>>,
}

struct Seat {
    row: char,
    number: u32,
}

#[derive(Debug)]
enum ApiError {
    Lock(LockError),
    SoldOut,
}

impl From<LockError> for ApiError {
    fn from(err: LockError) -> Self {
        Self::Lock(err)
    }
}

#[distributed_lock(key = "seat:{show}:{seat.row}{seat.number}", client = &app.locks)]
async fn buy(
    State(app): State<App>,
    Path((show, seat)): Path<(u64, Seat)>,
    Json(buyer): Json<String>,
) -> Result<Json<String>, ApiError> {
    let lease = distlock::current_lease().expect("inside the lock");
    assert_eq!(lease.name(), format!("seat:{show}:{}{}", seat.row, seat.number));
    tokio::task::yield_now().await;
    let mut sold = app.sold.lock().expect("sold");
    if sold.contains(&seat.number) {
        return Err(ApiError::SoldOut);
    }
    sold.push(seat.number);
    Ok(Json(format!("{buyer} has {}{}", seat.row, seat.number)))
}

fn assert_send<F: std::future::Future + Send + 'static>(future: F) -> F {
    future
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let app = App {
        locks: Client::in_memory(),
        sold: Arc::default(),
    };
    let request = |number| {
        buy(
            State(app.clone()),
            Path((1, Seat { row: 'F', number })),
            Json("ann".to_owned()),
        )
    };
    let Json(ticket) = tokio::spawn(assert_send(request(12)))
        .await
        .expect("task")
        .expect("bought");
    assert_eq!(ticket, "ann has F12");
    match request(12).await {
        Err(ApiError::SoldOut) => {}
        Err(ApiError::Lock(err)) => panic!("lock error: {err}"),
        Ok(_) => panic!("sold twice"),
    }
}
