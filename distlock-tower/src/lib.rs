//! Tower layers for `distlock`.
