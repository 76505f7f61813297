//! The public API: browse seats and buy one.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::checkout::sell_seat;
use crate::error::AppError;
use crate::store::Sale;

/// The longest buyer name accepted, in characters.
pub const MAX_BUYER_LEN: usize = 64;

#[derive(Debug, Serialize, Deserialize)]
pub struct Seats {
    pub seats: u32,
    pub sold: u64,
    /// The seats still for sale, ascending.
    pub available: Vec<u32>,
}

/// `GET /api/seats`
pub async fn list_seats(State(state): State<AppState>) -> Result<Json<Seats>, AppError> {
    let seats = state.settings.seats;
    let sold_seats = state.store.sold_seats(seats).await?;
    let mut sold = vec![false; seats as usize + 1];
    for &seat in &sold_seats {
        if let Some(slot) = sold.get_mut(seat as usize) {
            *slot = true;
        }
    }
    let available = (1..=seats).filter(|&s| !sold[s as usize]).collect();
    Ok(Json(Seats {
        seats,
        sold: sold_seats.len() as u64,
        available,
    }))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SeatView {
    pub seat: u32,
    pub sold: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sale: Option<Sale>,
}

/// `GET /api/seats/{seat}`
pub async fn seat(
    State(state): State<AppState>,
    Path(seat): Path<u32>,
) -> Result<Json<SeatView>, AppError> {
    check_seat(&state, seat)?;
    let sale = state.store.sale(seat).await?;
    Ok(Json(SeatView {
        seat,
        sold: sale.is_some(),
        sale,
    }))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct CheckoutRequest {
    pub buyer: String,
}

/// `POST /api/seats/{seat}/checkout` with `{"buyer": "..."}`: `201 Created` with the sale
/// (its `fence` is the seat lock's fencing token it was written under), `409` if the seat
/// is sold (or the checkout lost its lock), `404` for a seat that does not exist.
pub async fn checkout(
    State(state): State<AppState>,
    Path(seat): Path<u32>,
    Json(request): Json<CheckoutRequest>,
) -> Result<(StatusCode, Json<Sale>), AppError> {
    // Check everything we can before taking the lock.
    check_seat(&state, seat)?;
    let buyer = request.buyer.trim();
    if buyer.is_empty()
        || buyer.chars().count() > MAX_BUYER_LEN
        || buyer.chars().any(char::is_control)
    {
        return Err(AppError::InvalidInput(format!(
            "buyer must be 1 to {MAX_BUYER_LEN} printable characters"
        )));
    }
    if state.store.sale(seat).await?.is_some() {
        return Err(AppError::SeatSold { seat });
    }
    let sale = sell_seat(&state, seat, buyer).await?;
    Ok((StatusCode::CREATED, Json(sale)))
}

fn check_seat(state: &AppState, seat: u32) -> Result<(), AppError> {
    let seats = state.settings.seats;
    if (1..=seats).contains(&seat) {
        Ok(())
    } else {
        Err(AppError::NoSuchSeat { seat, seats })
    }
}
