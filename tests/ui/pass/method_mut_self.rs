//! A method taking `&mut self`: the client and the key borrow `self` before the body takes it.
//! Its future is `Send`.
#![deny(warnings)]

use distlock::{Client, LockError, distributed_lock};

struct Account {
    locks: Client,
    id: u64,
    balance: i64,
}

impl Account {
    #[distributed_lock(key = "account:{self.id}", client = &self.locks, wait = "1s")]
    async fn deposit(&mut self, amount: i64) -> Result<i64, LockError> {
        tokio::task::yield_now().await;
        self.balance += amount;
        Ok(self.balance)
    }
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut account = Account {
        locks: Client::in_memory(),
        id: 9,
        balance: 0,
    };
    assert_eq!(assert_send(account.deposit(5)).await.expect("deposit"), 5);
    assert_eq!(account.deposit(2).await.expect("deposit"), 7);
}
