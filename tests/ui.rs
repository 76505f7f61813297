//! Compile-time behaviour of `#[distributed_lock]`, checked with trybuild.
//!
//! `tests/ui/pass/` holds one case per supported function shape; each is compiled with
//! `#![deny(warnings)]` and run. `tests/ui/fail/` holds one case per compile error the macro
//! (or the type checker, for what the macro leaves to it) reports, with the expected message in
//! the `.stderr` beside it. Regenerate those with `TRYBUILD=overwrite cargo test --test ui` and
//! review the diff like code.
//!
//! The cases live in subdirectories so cargo does not build them as integration tests.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
