//! Wake-up links: the connections release wake-ups travel on, beside the backends that use
//! them. A single primary's link is a second, lazily connected RESP3 `ConnectionManager`, on
//! which subscriptions and their messages travel as push frames; it reconnects and
//! resubscribes by itself ([`PubSubLink`]; behind Sentinel it follows the primary,
//! [`FollowingLink`]). A cluster's link subscribes to sharded channels ([`sharded`]). What to
//! subscribe is decided by the wake-up registry's reconciler (`wakeups.rs`).

use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};

mod sharded;

pub(crate) use self::sharded::ShardedLink;
use super::connect::RedisSettings;
use crate::error::StoreError;
use crate::store::wakeups::{SubscribeFuture, Subscriber, Wakeups};

pub(crate) struct PubSubLink {
    conn: ConnectionManager,
}

/// Routes one push frame to the registry: a release message wakes a waiter on its channel
/// (`!` as the message: the release reserved the lock for the waiters that waited long); a
/// lost connection wakes every waiter, since messages may have been missed meanwhile.
pub(crate) fn route_push(wakeups: &Wakeups, push: &PushInfo) {
    match push.kind {
        PushKind::Message | PushKind::SMessage => {
            if let Some(Value::BulkString(channel)) = push.data.first() {
                let channel = String::from_utf8_lossy(channel);
                if let Some(Value::BulkString(key)) = push.data.get(1)
                    && wakeups.revoked(&channel, &String::from_utf8_lossy(key))
                {
                    return;
                }
                let reserved =
                    matches!(push.data.get(1), Some(Value::BulkString(m)) if m.as_slice() == b"!");
                wakeups.wake_one(&channel, reserved);
            }
        }
        PushKind::Disconnection => wakeups.wake_all(),
        _ => {}
    }
}

impl PubSubLink {
    pub(crate) fn new(
        info: &redis::ConnectionInfo,
        settings: &RedisSettings,
        wakeups: &Arc<Wakeups>,
    ) -> Result<Self, StoreError> {
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = settings.client(info.clone().set_redis_settings(resp3))?;
        let weak = Arc::downgrade(wakeups);
        let on_push = move |push: PushInfo| {
            if let Some(wakeups) = weak.upgrade() {
                route_push(&wakeups, &push);
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let config = settings
            .manager_config()
            .set_push_sender(on_push)
            .set_automatic_resubscription();
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self { conn })
    }
}

impl Subscriber for PubSubLink {
    fn subscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        let mut conn = self.conn.clone();
        Box::pin(async move { Ok(conn.subscribe(channels).await?) })
    }

    fn unsubscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        let mut conn = self.conn.clone();
        Box::pin(async move { Ok(conn.unsubscribe(channels).await?) })
    }
}

/// The wake-up link behind Sentinel: a [`PubSubLink`] to the current primary, replaced when the
/// primary changes, after which every channel is subscribed again on the new one.
#[derive(Clone)]
pub(crate) struct FollowingLink {
    inner: Arc<FollowingInner>,
}

struct FollowingInner {
    link: std::sync::RwLock<Arc<PubSubLink>>,
    settings: RedisSettings,
    wakeups: std::sync::Weak<Wakeups>,
}

impl FollowingLink {
    pub(crate) fn new(
        info: &redis::ConnectionInfo,
        settings: &RedisSettings,
        wakeups: &Arc<Wakeups>,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            inner: Arc::new(FollowingInner {
                link: std::sync::RwLock::new(Arc::new(PubSubLink::new(info, settings, wakeups)?)),
                settings: settings.clone(),
                wakeups: Arc::downgrade(wakeups),
            }),
        })
    }

    /// The primary is now at `info`: link to it, and subscribe everything again there.
    pub(crate) fn switch(&self, info: &redis::ConnectionInfo) {
        let Some(wakeups) = self.inner.wakeups.upgrade() else {
            return;
        };
        match PubSubLink::new(info, &self.inner.settings, &wakeups) {
            Ok(link) => {
                *self
                    .inner
                    .link
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(link);
                wakeups.resubscribe_all();
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot link to the new primary for wake-ups; waiters poll until it can");
            }
        }
    }

    fn current(&self) -> Arc<PubSubLink> {
        self.inner
            .link
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Subscriber for FollowingLink {
    fn subscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        let link = self.current();
        Box::pin(async move { link.subscribe(channels).await })
    }

    fn unsubscribe(&self, channels: Vec<String>) -> SubscribeFuture<'_> {
        let link = self.current();
        Box::pin(async move { link.unsubscribe(channels).await })
    }
}
