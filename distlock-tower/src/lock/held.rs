define_held! {
    /// The lock a request holds, for its handler: fence, name, lost signal.
    ///
    /// [`Lock`](super::Lock) puts it in the request's extensions; in axum, take it as an
    /// argument (`lock: HeldLock`, or `Option<HeldLock>` on routes where requests without a key
    /// pass through unlocked; feature `axum`). It dereferences to
    /// [`LeaseHandle`](distlock::LeaseHandle): [`fence`](distlock::LeaseHandle::fence),
    /// [`lost`](distlock::LeaseHandle::lost), [`is_lost`](distlock::LeaseHandle::is_lost),
    /// [`ensure_held`](distlock::LeaseHandle::ensure_held). It cannot release the lock: the
    /// layer does that once the response has been sent.
    ///
    /// The layer puts it in the response's extensions too, so that outer layers and logging
    /// can see which lock (and which fence, [if minted](distlock::LeaseHandle::minted_fence))
    /// a response was made under. By the time they look,
    /// the lock may already be released: [`is_lost`](distlock::LeaseHandle::is_lost) then says
    /// so.
    ///
    /// ```
    /// use distlock_tower::lock::HeldLock;
    ///
    /// async fn settle(lock: HeldLock) -> Result<String, distlock::LockError> {
    ///     // Pass the fence to the resource you protect, so it can refuse a stale holder
    ///     // (minted here, on first use, unless the layer is `fenced`).
    ///     Ok(format!("settled under fence {}", lock.fence().await?))
    /// }
    /// # let _ = axum::routing::post::<_, _, ()>(settle);
    /// ```
    HeldLock,
    MissingHeldLock,
    "this request holds no lock: is the route behind a LockLayer?"
}
