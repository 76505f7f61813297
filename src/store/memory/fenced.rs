//! Fenced resources in memory, with the semantics of `fenced.lua`: a resource is its highest
//! accepted fence, its values and one expiry for both; a write whose fence is lower than the
//! highest is refused, an equal or higher one is checked against its conditions and applied
//! whole.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use tokio::time::Instant;

use crate::store::scripts::fenced::{
    Change, Condition, FencedCall, FencedRead, FencedReply, FencedWrite, ReadReply, WriteReply,
};

/// Expired resources are swept every this many writes.
const SWEEP_EVERY: u64 = 1024;

#[derive(Default)]
pub(crate) struct Resources {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// By guard key (one per resource and prefix).
    resources: HashMap<String, Resource>,
    writes: u64,
}

#[derive(Default)]
struct Resource {
    last: Option<u64>,
    values: BTreeMap<String, Vec<u8>>,
    /// `None`: kept until deleted.
    expires_at: Option<Instant>,
}

impl Resources {
    pub(crate) fn run(&self, call: &FencedCall<'_>) -> FencedReply {
        // No await while it is held, and every write is checked before anything changes, so
        // a poisoned mutex still holds whole resources.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match call {
            FencedCall::Write(write) => FencedReply::Write(state.write(write, now)),
            FencedCall::Read(read) => FencedReply::Read(state.read(read, now)),
        }
    }
}

impl State {
    /// The live resource under `guard`, if any (an expired one is dropped).
    fn live(&mut self, guard: &str, now: Instant) -> Option<&mut Resource> {
        if self
            .resources
            .get(guard)
            .is_some_and(|r| r.expires_at.is_some_and(|at| at <= now))
        {
            self.resources.remove(guard);
        }
        self.resources.get_mut(guard)
    }

    fn write(&mut self, write: &FencedWrite, now: Instant) -> WriteReply {
        if let Some(resource) = self.live(&write.keys.guard, now) {
            if let Some(last) = resource.last
                && write.fence < last
            {
                return WriteReply::Stale { last };
            }
            for (index, condition) in write.conditions.iter().enumerate() {
                let holds = match condition {
                    Condition::Absent(key) => !resource.values.contains_key(key),
                    Condition::Holds(key, value) => resource.values.get(key) == Some(value),
                };
                if !holds {
                    return WriteReply::Unmet { index };
                }
            }
        } else if let Some(index) = write
            .conditions
            .iter()
            .position(|c| matches!(c, Condition::Holds(..)))
        {
            // Nothing is stored: every key is absent, so only a `Holds` can fail.
            return WriteReply::Unmet { index };
        }
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            self.resources
                .retain(|_, r| r.expires_at.is_none_or(|at| at > now));
        }
        let resource = self.resources.entry(write.keys.guard.clone()).or_default();
        resource.last = Some(write.fence);
        for change in &write.changes {
            match change {
                Change::Set(key, value) => {
                    resource.values.insert(key.clone(), value.clone());
                }
                Change::Delete(key) => {
                    resource.values.remove(key);
                }
                Change::Clear => resource.values.clear(),
            }
        }
        // A ttl too long to represent is no expiry (the API bounds it far below that).
        resource.expires_at = write.ttl.and_then(|ttl| now.checked_add(ttl));
        WriteReply::Accepted
    }

    fn read(&mut self, read: &FencedRead, now: Instant) -> ReadReply {
        let Some(resource) = self.live(&read.keys.guard, now) else {
            return ReadReply {
                last: None,
                values: Vec::new(),
            };
        };
        let values = match &read.fields {
            None => resource
                .values
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Some(fields) => fields
                .iter()
                .filter_map(|k| resource.values.get(k).map(|v| (k.clone(), v.clone())))
                .collect(),
        };
        ReadReply {
            last: resource.last,
            values,
        }
    }
}
