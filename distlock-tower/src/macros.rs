//! What every middleware of this crate writes the same way, written once (as tower-http's
//! `macros.rs`): the inner-service accessors, the `Layer` and `Service` impls, the boxed
//! response future, and the setters of the options the lock and concurrency-limit builders
//! share.
//!
//! Each middleware keeps the same shape: a layer holding its settings behind one `Arc`, made
//! by a builder that checked them, and a service `{ inner, config }` whose `call` is a
//! function of its module.

/// `get_ref`, `get_mut` and `into_inner` for a service whose inner service is `self.inner`.
macro_rules! define_inner_service_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Unwraps the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

/// `Layer` for `$layer<K, R>` (which holds `config: Arc<..>`), making `$service<S, K, R>`
/// services that share the layer's settings: one `Arc` clone per service.
macro_rules! impl_layer {
    ($layer:ident => $service:ident) => {
        impl<S, K, R> ::tower::Layer<S> for $layer<K, R> {
            type Service = $service<S, K, R>;

            fn layer(&self, inner: S) -> Self::Service {
                $service {
                    inner,
                    config: ::std::sync::Arc::clone(&self.config),
                }
            }
        }

        impl<K, R> Clone for $layer<K, R> {
            fn clone(&self) -> Self {
                Self {
                    config: ::std::sync::Arc::clone(&self.config),
                }
            }
        }

        impl<K, R> ::std::fmt::Debug for $layer<K, R> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($layer)).finish_non_exhaustive()
            }
        }
    };
}

/// `Service<Request<ReqBody>>` for `$service<S, K, R>`: readiness is the inner service's,
/// the inner service's error passes through untouched, and `call` is
/// `$call(&mut self.inner, &self.config, request)`, which answers with the calling module's
/// `ResponseFuture` over its `ResponseBody`. Also `Clone`, `Debug` and the inner-service
/// accessors.
macro_rules! impl_service {
    ($service:ident, $call:path) => {
        impl<S, K, R, ReqBody, ResBody> ::tower::Service<::http::Request<ReqBody>>
            for $service<S, K, R>
        where
            // The projection names `ResBody` for the impl; the rest is what every layer asks.
            S: ::tower::Service<::http::Request<ReqBody>, Response = ::http::Response<ResBody>>
                + $crate::wrapped::WrappedService<ReqBody, ResBody>,
            K: $crate::extract::ExtractKey<ReqBody>,
            R: $crate::refusal::MakeRefusal,
            ReqBody: Send + 'static,
            ResBody: $crate::wrapped::WrappedBody,
        {
            type Response = ::http::Response<ResponseBody<ResBody>>;
            type Error = S::Error;
            type Future = ResponseFuture<ResBody, S::Error>;

            #[inline]
            fn poll_ready(
                &mut self,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<Result<(), Self::Error>> {
                self.inner.poll_ready(cx)
            }

            fn call(&mut self, request: ::http::Request<ReqBody>) -> Self::Future {
                $call(&mut self.inner, &self.config, request)
            }
        }

        impl<S: Clone, K, R> Clone for $service<S, K, R> {
            fn clone(&self) -> Self {
                Self {
                    inner: self.inner.clone(),
                    config: ::std::sync::Arc::clone(&self.config),
                }
            }
        }

        impl<S: ::std::fmt::Debug, K, R> ::std::fmt::Debug for $service<S, K, R> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($service))
                    .field("inner", &self.inner)
                    .finish_non_exhaustive()
            }
        }

        impl<S, K, R> $service<S, K, R> {
            define_inner_service_accessors!();
        }
    };
}

/// `Debug` for a builder `$builder<K, R>`: its options (`self.config.options`), without the
/// key extractor and the refusal hook, which need not be `Debug` (closures are not).
macro_rules! impl_builder_debug {
    ($builder:ident) => {
        impl<K, R> ::std::fmt::Debug for $builder<K, R> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($builder))
                    .field("options", &self.config.options)
                    .finish_non_exhaustive()
            }
        }
    };
}

/// The response future of a middleware whose decision awaits the runtime (a check, a lock):
/// `ResponseFuture<B, E>`, resolving to `Response<ResponseBody<B>>` of the calling module.
///
/// Boxed: the runtime's futures cannot be named, and one allocation per request is small
/// next to a store round trip. Opaque, so what it does inside can change without breaking
/// anyone.
macro_rules! boxed_response_future {
    ($(#[$doc:meta])*) => {
        $(#[$doc])*
        pub struct ResponseFuture<B, E> {
            inner: ::std::pin::Pin<
                Box<
                    dyn ::std::future::Future<
                            Output = Result<::http::Response<ResponseBody<B>>, E>,
                        > + Send,
                >,
            >,
        }

        impl<B, E> ResponseFuture<B, E> {
            pub(crate) fn new<F>(future: F) -> Self
            where
                F: ::std::future::Future<Output = Result<::http::Response<ResponseBody<B>>, E>>
                    + Send
                    + 'static,
            {
                Self {
                    inner: Box::pin(future),
                }
            }
        }

        impl<B, E> ::std::fmt::Debug for ResponseFuture<B, E> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct("ResponseFuture").finish_non_exhaustive()
            }
        }

        impl<B, E> ::std::future::Future for ResponseFuture<B, E> {
            type Output = Result<::http::Response<ResponseBody<B>>, E>;

            fn poll(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<Self::Output> {
                self.inner.as_mut().poll(cx)
            }
        }
    };
}

/// The setters of the options both lease layers take
/// ([`LeaseOptions`](crate::lease::LeaseOptions)), for a builder `$builder<K, R>` whose
/// settings are `self.config`, a [`LeaseConfig`](crate::lease::LeaseConfig). `$what` names
/// what a request holds ("lock", "permit") in the docs.
macro_rules! lease_option_setters {
    ($builder:ident, $what:literal) => {
        #[doc = concat!(
            "The ", $what, "'s time to live in the store (default 30 s), between ",
            "[`MIN_TTL`](distlock::MIN_TTL) and [`MAX_TTL`](distlock::MAX_TTL) (checked by ",
            "`build`). With the watchdog on it is renewed every ttl/3 while the request and ",
            "its response body last, so it only bounds how long a replica that dies ",
            "mid-request keeps the ", $what, "."
        )]
        pub fn ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.config.options.lease = ::std::mem::take(&mut self.config.options.lease).ttl(ttl);
            self
        }

        #[doc = concat!(
            "Waits up to `wait` for a ", $what, " before refusing the request (default ",
            "zero: refuse at once), holding nothing of the inner service meanwhile (no ",
            "`ConcurrencyLimit` permit, no `Buffer` slot), and readying it again once the ",
            $what, " is held. `Duration::MAX` waits for ever; the request's own timeout, if ",
            "any, still applies."
        )]
        pub fn wait(mut self, wait: ::std::time::Duration) -> Self {
            self.config.options.lease = ::std::mem::take(&mut self.config.options.lease).wait(wait);
            self
        }

        #[doc = concat!(
            "Renews the ", $what, " while the request runs (default on). Off, it simply ",
            "expires after its ttl, and a handler still running then is cut short and ",
            "answered `503`."
        )]
        pub fn watchdog(mut self, on: bool) -> Self {
            self.config.options.lease = ::std::mem::take(&mut self.config.options.lease).watchdog(on);
            self
        }

        #[doc = concat!(
            "Stops renewing once a request has held its ", $what, " this long (default ",
            "[`DEFAULT_MAX_HOLD`](crate::DEFAULT_MAX_HOLD), 5 minutes), so a stuck ",
            "handler or a client that stops reading a streamed body cannot keep it for ever: ",
            "the body then ends. Not zero (checked by `build`); `Duration::MAX` for no bound."
        )]
        pub fn max_hold(mut self, max_hold: ::std::time::Duration) -> Self {
            self.config.options.lease =
                ::std::mem::take(&mut self.config.options.lease).max_hold(max_hold);
            self
        }

        #[doc = concat!(
            "The name space of this layer's ", $what, " names (default ",
            "[`DEFAULT_NAMESPACE`](crate::DEFAULT_NAMESPACE), `http`): a request keyed ",
            "`order:42` takes the name `<namespace>/order:42`, so that no request can name a ",
            $what, " the application takes for itself (an election, a job lock, an ",
            "idempotency claim). 1 to 64 characters of `[A-Za-z0-9._-]`, not `idempotency` ",
            "(checked by `build`). To exclude the same requests from code, take the same name ",
            "there: `client.lock(\"http/order:42\")`, or ",
            "`#[distributed_lock(key = \"http/order:{id}\")]`."
        )]
        pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
            self.config.options.namespace = namespace.into().into();
            self
        }

        /// What a request without a key gets (default [`MissingKey::Reject`]: `400`). A
        /// request whose key is [invalid](crate::extract::Extracted::Invalid) (a key header
        /// sent twice, over-long, not text) is answered `400` whatever this says, so that no
        /// request escapes the layer by malforming its key.
        ///
        /// [`MissingKey::Reject`]: crate::extract::MissingKey::Reject
        pub fn on_missing_key(mut self, behaviour: $crate::extract::MissingKey) -> Self {
            self.config.options.missing_key = behaviour;
            self
        }

        /// Makes the responses the layer answers itself with `make`: a closure
        /// `Fn(&Refusal) -> Response<B>`, [`ProblemDetails`](crate::refusal::ProblemDetails)
        /// for RFC 9457 JSON, or your own [`MakeRefusal`](crate::refusal::MakeRefusal). The
        /// default, [`PlainText`](crate::refusal::PlainText), answers a short `text/plain`
        /// sentence.
        ///
        /// Whatever `make` returns, the layer adds `Retry-After` if it is missing and the
        /// [`Refusal`](crate::refusal::Refusal) to the response's extensions; see
        /// [`refusal`](crate::refusal).
        pub fn refusal<M: $crate::refusal::MakeRefusal>(self, make: M) -> $builder<K, M> {
            $builder {
                config: self.config.with_refusal(make),
            }
        }
    };
}

/// A handler's view of the lease its request holds (`HeldLock`, `HeldPermit`): the struct,
/// documented by the caller; `handle`, `into_handle` and `Deref` to
/// [`LeaseHandle`](distlock::LeaseHandle); the axum extractors for it and for `Option` of it
/// (feature `axum`); and `$missing`, their rejection on a request that holds no such lease,
/// whose text is `$message`.
macro_rules! define_held {
    ($(#[$doc:meta])* $held:ident, $missing:ident, $message:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $held {
            handle: ::distlock::LeaseHandle,
        }

        impl $held {
            pub(crate) fn new(handle: ::distlock::LeaseHandle) -> Self {
                Self { handle }
            }

            /// The underlying lease handle.
            #[must_use]
            pub fn handle(&self) -> &::distlock::LeaseHandle {
                &self.handle
            }

            /// Unwraps the lease handle, e.g. to move it into a task the handler spawns.
            #[must_use]
            pub fn into_handle(self) -> ::distlock::LeaseHandle {
                self.handle
            }
        }

        impl ::std::ops::Deref for $held {
            type Target = ::distlock::LeaseHandle;

            fn deref(&self) -> &::distlock::LeaseHandle {
                &self.handle
            }
        }

        #[cfg(feature = "axum")]
        #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
        impl<S: Send + Sync> ::axum::extract::FromRequestParts<S> for $held {
            type Rejection = $missing;

            async fn from_request_parts(
                parts: &mut ::http::request::Parts,
                _state: &S,
            ) -> Result<Self, Self::Rejection> {
                parts.extensions.get::<Self>().cloned().ok_or($missing)
            }
        }

        #[cfg(feature = "axum")]
        #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
        impl<S: Send + Sync> ::axum::extract::OptionalFromRequestParts<S> for $held {
            type Rejection = ::std::convert::Infallible;

            async fn from_request_parts(
                parts: &mut ::http::request::Parts,
                _state: &S,
            ) -> Result<Option<Self>, Self::Rejection> {
                Ok(parts.extensions.get::<Self>().cloned())
            }
        }

        #[doc = concat!(
            "Rejection of the [`", stringify!($held), "`] extractor on a request that holds ",
            "none: the route is not behind the layer, or its request had no key and was let ",
            "through. A server bug, so `500 Internal Server Error`, logged at ERROR."
        )]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $missing;

        impl ::std::fmt::Display for $missing {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($message)
            }
        }

        impl ::std::error::Error for $missing {}

        #[cfg(feature = "axum")]
        #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
        impl ::axum::response::IntoResponse for $missing {
            fn into_response(self) -> ::axum::response::Response {
                ::tracing::error!(error = %self, "answering 500: a handler asked for a lease its request does not hold");
                (::http::StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
            }
        }
    };
}
