//! The majority machinery of a quorum: an operation run on every node at once, each bounded,
//! what counts as a majority of answers, and the holder a majority agrees on.

use std::time::Duration;

use tokio::time::Instant;

use super::QuorumStore;
use super::node::Node;
use crate::error::{NodeFailure, StoreError};

/// What one node answered, or why it did not.
pub(super) enum Answer<T> {
    Ok(T),
    Failed(String),
}

/// How many nodes answered something `counts` accepts.
pub(super) fn answered<T>(answers: &[Answer<T>], counts: impl Fn(&T) -> bool) -> usize {
    answers
        .iter()
        .filter(|a| matches!(a, Answer::Ok(t) if counts(t)))
        .count()
}

impl QuorumStore {
    /// `failures` back if at least a majority of the nodes answered a read, else
    /// [`StoreError::NoQuorum`] naming them.
    pub(super) fn majority_answered(
        &self,
        failures: Vec<NodeFailure>,
    ) -> Result<Vec<NodeFailure>, StoreError> {
        let needed = self.inner.quorum;
        if self.inner.nodes.len() - failures.len() < needed {
            return Err(StoreError::NoQuorum {
                nodes: self.inner.nodes.len(),
                needed,
                failures,
            });
        }
        Ok(failures)
    }

    pub(super) fn node_failure(&self, err: StoreError) -> String {
        err.with_deadline(self.inner.settings.response_timeout)
            .to_string()
    }

    /// Runs `op` on every node at once, each bounded by `per_node`.
    pub(super) async fn on_every_node<'a, T, F, Fut>(
        &'a self,
        per_node: Duration,
        op: F,
    ) -> Vec<Answer<T>>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        let calls = self.inner.nodes.iter().map(|node| {
            let call = op(node);
            async move {
                match tokio::time::timeout(per_node, call).await {
                    Ok(Ok(value)) => Answer::Ok(value),
                    Ok(Err(err)) => Answer::Failed(self.node_failure(err)),
                    Err(_) => Answer::Failed(format!("no answer within {per_node:?}")),
                }
            }
        });
        futures_util::future::join_all(calls).await
    }

    /// Runs `op` (a release, which knows no ttl) on every node at once, each bounded by
    /// [`node_op_timeout`](Self::node_op_timeout); once `settled` holds for the answers so far
    /// (one per node that answered), the nodes still silent get
    /// [`straggler_grace`](Self::straggler_grace) more, then count as failed.
    pub(super) async fn on_every_node_then_grace<'a, T, F, Fut>(
        &'a self,
        settled: impl Fn(&[&T]) -> bool,
        op: F,
    ) -> Vec<Answer<T>>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        let (per_node, grace) = (self.node_op_timeout(), self.straggler_grace());
        use futures_util::StreamExt as _;
        let mut pending: futures_util::stream::FuturesUnordered<_> = self
            .inner
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let call = op(node);
                async move { (i, tokio::time::timeout(per_node, call).await) }
            })
            .collect();
        let mut answers: Vec<Option<Answer<T>>> = std::iter::repeat_with(|| None)
            .take(self.inner.nodes.len())
            .collect();
        let mut cut_off: Option<Instant> = None;
        loop {
            let next = match cut_off {
                None => pending.next().await,
                Some(at) => match tokio::time::timeout_at(at, pending.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            let Some((i, result)) = next else { break };
            answers[i] = Some(match result {
                Ok(Ok(value)) => Answer::Ok(value),
                Ok(Err(err)) => Answer::Failed(self.node_failure(err)),
                Err(_) => Answer::Failed(format!("no answer within {per_node:?}")),
            });
            if cut_off.is_none() {
                let so_far: Vec<&T> = answers
                    .iter()
                    .filter_map(|a| match a {
                        Some(Answer::Ok(value)) => Some(value),
                        _ => None,
                    })
                    .collect();
                if settled(&so_far) {
                    cut_off = Some(Instant::now() + grace);
                }
            }
        }
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Answer::Failed(format!("no answer within {grace:?} of the outcome"))
                })
            })
            .collect()
    }

    /// The nodes that did not answer, and why, for [`StoreError::NoQuorum`].
    pub(super) fn failures<T>(&self, answers: &[Answer<T>]) -> Vec<NodeFailure> {
        self.inner
            .nodes
            .iter()
            .zip(answers)
            .filter_map(|(node, answer)| match answer {
                Answer::Failed(error) => Some(NodeFailure {
                    node: node.name.clone(),
                    error: error.clone(),
                }),
                Answer::Ok(_) => None,
            })
            .collect()
    }

    pub(super) fn no_quorum<T>(&self, answers: &[Answer<T>]) -> StoreError {
        StoreError::NoQuorum {
            nodes: self.inner.nodes.len(),
            needed: self.inner.quorum,
            failures: self.failures(answers),
        }
    }
}

/// The value a majority of nodes hold for the same lease (a waiter's mark aside), and how
/// long that majority lasts: the `needed`-th longest of their ttls.
pub(super) fn majority_holder(
    seen: &[(String, Duration)],
    needed: usize,
) -> Option<(String, Duration)> {
    // A lock key holds its holder's token, followed by a waiter's mark ('*' or '!') if any.
    let lease = |value: &str| value.trim_end_matches(['*', '!']).to_owned();
    for (value, _) in seen {
        let token = lease(value);
        let mut ttls: Vec<Duration> = seen
            .iter()
            .filter(|(v, _)| lease(v) == token)
            .map(|(_, ttl)| *ttl)
            .collect();
        if ttls.len() >= needed {
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            return Some((value.clone(), ttls[needed - 1]));
        }
    }
    None
}
