//! The app's error type and the response each error becomes. Handlers return
//! `Result<_, AppError>`; nothing a client sends can make the app panic.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use distlock::LockError;
use serde_json::json;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("there is no seat {seat}; seats are 1 to {seats}")]
    NoSuchSeat { seat: u32, seats: u32 },
    #[error("seat {seat} is already sold")]
    SeatSold { seat: u32 },
    #[error("{0}")]
    InvalidInput(String),
    /// Another checkout of the seat held its lock for the whole wait.
    #[error("someone else is checking out this seat; try again shortly")]
    SeatBusy { retry_after: Duration },
    /// The lease ended while we worked, or a newer lock holder wrote first: nothing was sold.
    #[error("the checkout lost its lock before it completed; nothing was sold")]
    LostLock,
    /// The lock service or the store could not answer.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
}

impl From<StoreError> for AppError {
    fn from(err: StoreError) -> Self {
        Self::Unavailable(err.to_string())
    }
}

/// What a lock failure means for a request; `#[distributed_lock]` converts with this.
impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        match err {
            LockError::Busy { retry_after, .. } => Self::SeatBusy { retry_after },
            LockError::Timeout { .. } => Self::SeatBusy {
                retry_after: Duration::from_secs(1),
            },
            LockError::LeaseLost { .. } => Self::LostLock,
            other => Self::Unavailable(other.to_string()),
        }
    }
}

impl AppError {
    fn status(&self) -> StatusCode {
        match self {
            Self::NoSuchSeat { .. } => StatusCode::NOT_FOUND,
            Self::SeatSold { .. } | Self::SeatBusy { .. } | Self::LostLock => StatusCode::CONFLICT,
            Self::InvalidInput(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, "request failed");
        }
        let retry_after = match &self {
            // Whole seconds, rounded up, never 0.
            Self::SeatBusy { retry_after } => {
                Some((retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)).max(1))
            }
            Self::LostLock | Self::Unavailable(_) => Some(1),
            _ => None,
        };
        let mut response = (status, Json(json!({ "error": self.to_string() }))).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
