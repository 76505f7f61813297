//! The waiting limiter across OS processes, in a binary of its own so that no other test
//! shares the machine while it measures spacing.

#[path = "../support/mod.rs"]
mod support;

mod processes;
