//! A write of several changes under one fence, with conditions, applied all or nothing.

use super::{FencedError, FencedResource, MAX_CHANGES, mismatched_reply};
use crate::keys::check_name;
use crate::store::{Change, Condition, FencedCall, FencedReply, FencedWrite, WriteReply};

/// Several changes to a [`FencedResource`] under one fence, applied all or nothing by
/// [`apply`](Self::apply): the fence check, then the conditions, then the changes in order,
/// in one step on the server. From [`FencedResource::update`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::FencedError;
///
/// let client = distlock::Client::in_memory();
/// let seat = client.fenced("seat:7")?;
/// let lease = client.lock("seat:7").acquire().await?;
///
/// // Sell the seat if nobody bought it: the condition and the writes are one step.
/// let fence = lease.fence().await?;
/// seat.update(fence)
///     .require_absent("buyer")
///     .set("buyer", "ada")
///     .set("price", "42.00")
///     .delete("on_hold")
///     .apply()
///     .await?;
///
/// let again = seat.update(fence).require_absent("buyer").set("buyer", "bob").apply().await;
/// assert!(matches!(again, Err(FencedError::Conflict { ref key, .. }) if key == "buyer"));
/// assert_eq!(seat.read().await?.text("buyer"), Some("ada"));
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "an update does nothing until `apply` is awaited"]
pub struct Update<'a> {
    target: &'a FencedResource,
    fence: u64,
    conditions: Vec<Condition>,
    changes: Vec<Change>,
}

impl<'a> Update<'a> {
    pub(super) fn new(target: &'a FencedResource, fence: u64) -> Self {
        Self {
            target,
            fence,
            conditions: Vec::new(),
            changes: Vec::new(),
        }
    }

    /// Sets `key` to `value`.
    pub fn set(mut self, key: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        self.changes
            .push(Change::Set(key.into(), value.as_ref().to_vec()));
        self
    }

    /// Deletes `key` (a key without a value is fine).
    pub fn delete(mut self, key: impl Into<String>) -> Self {
        self.changes.push(Change::Delete(key.into()));
        self
    }

    /// Deletes every value (the changes after it in this update still apply). The fence is
    /// kept: the resource still refuses older writers.
    pub fn clear(mut self) -> Self {
        self.changes.push(Change::Clear);
        self
    }

    /// Applies the update only if `key` has no value (as it was before this update);
    /// otherwise [`FencedError::Conflict`].
    pub fn require_absent(mut self, key: impl Into<String>) -> Self {
        self.conditions.push(Condition::Absent(key.into()));
        self
    }

    /// Applies the update only if `key` holds `value` (as it was before this update);
    /// otherwise [`FencedError::Conflict`].
    pub fn require_value(mut self, key: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        self.conditions
            .push(Condition::Holds(key.into(), value.as_ref().to_vec()));
        self
    }

    /// Applies the update: refused whole when the resource has accepted a higher fence or a
    /// condition does not hold; otherwise the resource records the fence (an update without
    /// changes only does that, as [`advance`](FencedResource::advance)) and every change is
    /// made.
    ///
    /// # Errors
    /// [`FencedError::Stale`]; [`FencedError::Conflict`]; [`FencedError::InvalidName`] for an
    /// empty or over-long key; [`FencedError::InvalidInput`] for more than
    /// [`MAX_CHANGES`](super::MAX_CHANGES) conditions and changes; [`FencedError::Store`].
    pub async fn apply(self) -> Result<(), FencedError> {
        let count = self.conditions.len() + self.changes.len();
        if count > MAX_CHANGES {
            return Err(FencedError::InvalidInput {
                reason: format!(
                    "{count} conditions and changes in one update; at most {MAX_CHANGES}"
                ),
            });
        }
        for condition in &self.conditions {
            match condition {
                Condition::Absent(key) | Condition::Holds(key, _) => check_name(key)?,
            }
        }
        for change in &self.changes {
            match change {
                Change::Set(key, _) | Change::Delete(key) => check_name(key)?,
                Change::Clear => {}
            }
        }
        let target = self.target;
        let write = FencedWrite {
            keys: target.keys.clone(),
            fence: self.fence,
            ttl: target.ttl,
            conditions: self.conditions,
            changes: self.changes,
        };
        let reply = target
            .client
            .store()
            .fenced(&FencedCall::Write(&write))
            .await?;
        match reply {
            FencedReply::Write(WriteReply::Accepted) => Ok(()),
            FencedReply::Write(WriteReply::Stale { last }) => Err(FencedError::Stale {
                resource: target.resource.clone(),
                last,
                offered: write.fence,
            }),
            FencedReply::Write(WriteReply::Unmet { index }) => {
                let key = match write.conditions.get(index) {
                    Some(Condition::Absent(key) | Condition::Holds(key, _)) => key.clone(),
                    None => return Err(mismatched_reply()),
                };
                Err(FencedError::Conflict {
                    resource: target.resource.clone(),
                    key,
                })
            }
            FencedReply::Read(_) => Err(mismatched_reply()),
        }
    }
}
