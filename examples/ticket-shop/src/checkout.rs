//! Selling a seat: the part that must never happen twice for one seat, whichever replica
//! the buyers reach.

use distlock::distributed_lock;

use crate::AppState;
use crate::error::AppError;
use crate::store::{Fenced, Sale};

/// Sells `seat` to `buyer`: hold the seat, charge the buyer, confirm the sale.
///
/// The attribute runs the body under the lock `seat:<seat>` on every replica that shares
/// the store: a second buyer of the same seat waits up to 3 s for the first checkout to
/// finish (and then finds the seat sold) instead of charging a second card. The lease lives
/// 10 s and is renewed while the body runs; if it is lost anyway (Redis unreachable for the
/// whole ttl), the body is dropped at its next `.await` and the buyer gets `LostLock`.
///
/// The lock alone is not enough: a replica paused past its lease's ttl (a long GC pause, a
/// frozen VM) resumes believing it still holds the lock. So every write carries the lease's
/// fencing token, and the store refuses a write whose fence is lower than one it has seen for
/// the seat: the stale replica's confirmation is refused and nothing is sold twice.
///
/// Every sale writes under its fence, so the lock is `fenced`: the grant mints the fence (an
/// eager lease), and `fence()` below answers without a round trip.
#[distributed_lock(
    key = "seat:{seat}",
    ttl = "10s",
    wait = "3s",
    client = &state.locks,
    fenced = true
)]
pub async fn sell_seat(state: &AppState, seat: u32, buyer: &str) -> Result<Sale, AppError> {
    // The lease this body runs under; always there inside a `#[distributed_lock]` fn.
    let fence = distlock::current_lease()
        .ok_or(AppError::LostLock)?
        .fence()
        .await?;

    match state.store.hold(seat, fence).await? {
        Fenced::Ok => {}
        Fenced::Sold => return Err(AppError::SeatSold { seat }),
        Fenced::Stale { newer } => {
            tracing::warn!(seat, fence, newer, "a newer checkout holds this seat");
            return Err(AppError::LostLock);
        }
    }

    // The slow, external part. A real shop would call its payment provider here (with an
    // idempotency key) and refund below if the confirmation is refused.
    tokio::time::sleep(state.settings.payment_time).await;

    let sale = Sale {
        seat,
        buyer: buyer.to_owned(),
        fence,
        replica: state.settings.replica.clone(),
        sold_at_ms: state.store.now_ms().await?,
    };
    match state.store.confirm(&sale).await? {
        Fenced::Ok => {
            tracing::info!(seat, fence, buyer, "sold");
            Ok(sale)
        }
        Fenced::Sold => Err(AppError::SeatSold { seat }),
        Fenced::Stale { newer } => {
            tracing::warn!(
                seat,
                fence,
                newer,
                "refused a stale confirmation; refund the buyer"
            );
            Err(AppError::LostLock)
        }
    }
}
