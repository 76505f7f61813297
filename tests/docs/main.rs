//! What the documentation says, held against the code (TESTPLAN 64): every README and guide
//! page is compiled as doctests ([`pages`]), and the README's "where it runs" table is what
//! each kind of store refuses when a primitive is built ([`where_it_runs`]).

#[path = "../support/mod.rs"]
mod support;

mod pages;
mod where_it_runs;
