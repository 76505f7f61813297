//! An application's error type that converts from the errors the attributes return and from
//! an error of the body's own, shared by the ui cases that need one and the macro tests
//! (`#[path]`-included: the ui cases are programs of their own).
#![allow(dead_code)] // each includer uses some of the variants

use std::num::ParseIntError;

use distlock::{LockError, RateLimitError};

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
    Limited(RateLimitError),
    Parse(ParseIntError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        Self::Lock(err)
    }
}

impl From<RateLimitError> for AppError {
    fn from(err: RateLimitError) -> Self {
        Self::Limited(err)
    }
}

impl From<ParseIntError> for AppError {
    fn from(err: ParseIntError) -> Self {
        Self::Parse(err)
    }
}
