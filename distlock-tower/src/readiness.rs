//! The inner service as a response future holds it while the request may still wait (in the
//! rate limiter, or for a lock): readied, or a clone that holds nothing yet.
//!
//! `poll_ready` may reserve capacity for the call that follows: a permit of tower's
//! `ConcurrencyLimit`, a slot of a `Buffer`. A request that keeps the readied service while
//! it sleeps keeps that capacity from everyone else, so an inner `ConcurrencyLimit(1)` would
//! serve nobody while one request waits. Before waiting, a future therefore swaps the readied
//! service for a clone (a clone carries no readiness: tower's `ConcurrencyLimit` clones
//! without a permit) and drops the readied one, which gives the reservation back; after the
//! wait it readies the clone and calls it.
//!
//! The service the layer keeps for its next `poll_ready` is a separate clone (see the layers'
//! `call`), so a caller that drives one layer instance with `ready().await; call(..)` in a
//! loop never waits on a reservation that one of its own futures holds.

use std::future::poll_fn;

use tower::Service;

/// The inner service held by a response future.
pub(crate) enum InnerService<S> {
    /// Readied by the layer's `poll_ready`: may hold capacity; call it without readying.
    Ready(S),
    /// A clone that holds nothing: ready it before the call.
    NotReady(S),
}

impl<S: Clone> InnerService<S> {
    /// Gives back whatever readiness reserved, before the request waits.
    pub(crate) fn release_readiness(&mut self) {
        if let Self::Ready(readied) = self {
            let clone = readied.clone();
            // Drops the readied service, and the capacity it reserved with it.
            *self = Self::NotReady(clone);
        }
    }

    /// Calls the service, readying it first if it gave its readiness back.
    pub(crate) async fn call<R>(self, request: R) -> Result<S::Response, S::Error>
    where
        S: Service<R>,
    {
        match self {
            Self::Ready(mut service) => service.call(request).await,
            Self::NotReady(mut service) => {
                poll_fn(|cx| service.poll_ready(cx)).await?;
                service.call(request).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tokio::sync::{OwnedSemaphorePermit, Semaphore};

    use super::*;

    /// A service whose readiness holds one permit of a shared semaphore, as tower's
    /// `ConcurrencyLimit` does (its clones hold none).
    struct Limited {
        semaphore: Arc<Semaphore>,
        permit: Option<OwnedSemaphorePermit>,
    }

    impl Clone for Limited {
        fn clone(&self) -> Self {
            Self {
                semaphore: Arc::clone(&self.semaphore),
                permit: None,
            }
        }
    }

    impl Service<()> for Limited {
        type Response = ();
        type Error = Infallible;
        type Future = std::future::Ready<Result<(), Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            if self.permit.is_none() {
                self.permit = Arc::clone(&self.semaphore).try_acquire_owned().ok();
            }
            if self.permit.is_some() {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        }

        fn call(&mut self, (): ()) -> Self::Future {
            assert!(self.permit.take().is_some(), "called without readiness");
            std::future::ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn releasing_readiness_gives_the_reservation_back() {
        let semaphore = Arc::new(Semaphore::new(1));
        let mut service = Limited {
            semaphore: Arc::clone(&semaphore),
            permit: None,
        };
        poll_fn(|cx| service.poll_ready(cx))
            .await
            .expect("infallible");
        assert_eq!(semaphore.available_permits(), 0);

        let mut held = InnerService::Ready(service);
        held.release_readiness();
        assert_eq!(semaphore.available_permits(), 1, "the permit is back");
        held.release_readiness();
        assert_eq!(semaphore.available_permits(), 1, "idempotent");

        held.call(()).await.expect("readied again, then called");
        assert_eq!(
            semaphore.available_permits(),
            1,
            "the call used its permit up"
        );
    }
}
