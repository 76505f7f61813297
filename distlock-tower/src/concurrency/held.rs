define_held! {
    /// The permit a request holds under a
    /// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer): its lease (fence, lost
    /// signal), for the handler.
    ///
    /// The layer puts it in the request's extensions (in axum, take it as an argument:
    /// `permit: HeldPermit`, or `Option<HeldPermit>` where requests without a key pass;
    /// feature `axum`) and in the response's. It dereferences to
    /// [`LeaseHandle`](distlock::LeaseHandle); it cannot release the permit: the layer does
    /// that once the response has been sent.
    HeldPermit,
    MissingHeldPermit,
    "this request holds no permit: is the route behind a ConcurrencyLimitLayer?"
}
