//! The duration grammar against the parser distlock used before it (humantime's): every text of
//! a corpus and of a few hundred thousand generated ones gives the same duration, or the same
//! error with the same message; and durations print the same.

use std::time::Duration;

use distlock_grammar::{DurationError, DurationText, parse_duration};

/// Asserts that both parsers agree on `text`.
fn agree(text: &str) {
    let ours = parse_duration(text);
    let theirs = humantime::parse_duration(text);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?}"),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "{text:?}");
            let same_place = match (a, b) {
                (
                    DurationError::InvalidCharacter { at },
                    humantime::DurationError::InvalidCharacter(their),
                )
                | (
                    DurationError::NumberExpected { at },
                    humantime::DurationError::NumberExpected(their),
                ) => at == their,
                (
                    DurationError::UnknownUnit { start, end, .. },
                    humantime::DurationError::UnknownUnit {
                        start: s, end: e, ..
                    },
                ) => (start, end) == (s, e),
                _ => true,
            };
            assert!(same_place, "{text:?}: {a:?} against {b:?}");
        }
        _ => panic!("{text:?}: ours {ours:?}, humantime's {theirs:?}"),
    }
}

#[test]
fn a_corpus_agrees() {
    let corpus = [
        "",
        " ",
        "0",
        "00",
        "0s",
        "1",
        "10",
        "1s",
        "30s",
        "250ms",
        "1m 30s",
        "1h 30min",
        "1h30m",
        "2h 37min",
        "1 0s",
        "30 s",
        "1.5h",
        "1.5 h",
        "1. 5h",
        "0.5min",
        "1.25s",
        "1.5ns",
        "1.5us",
        "1.5ms",
        "0.0001h",
        "1.",
        "1.s",
        "1.,",
        "1.5,",
        "1,5s",
        "-1s",
        "+1s",
        ".5s",
        "1s!",
        "1h x",
        "1h  x",
        "soon",
        "30 parsecs",
        "1S",
        "1M",
        "1m",
        "1y",
        "2w",
        "3µs",
        "3μs",
        "17nsec",
        "1 usec",
        "1 millis",
        "1 nanos",
        "1wk",
        "2wks",
        "1yr",
        "3yrs",
        "7days",
        "8days",
        "30days",
        "400 days",
        "999999999ns 1ns",
        "20000000000s",
        "18446744073709551615s",
        "18446744073709551616s",
        "18446744073709551615s 1s",
        "1.00000000000000000001s",
        "1.0000000000000000001s",
        "99999999999999999999h",
        "5s5s",
        "5 s 5 s",
        "1h 1h",
        "1 h1m",
        "1hh",
        "1h m",
        "1 2 3 s",
        "1sé",
        "é",
        "1\t2s",
        "1\u{a0}s",
        "584542046091y",
        "1.999999999s",
        "0.000000001s",
        "0.0000000001s",
    ];
    for text in corpus {
        agree(text);
    }
}

#[test]
fn generated_texts_agree() {
    let pieces = [
        "0",
        "1",
        "7",
        "30",
        "250",
        "1.5",
        "0.25",
        "1.",
        ".",
        " ",
        "  ",
        "s",
        "ms",
        "min",
        "m",
        "h",
        "d",
        "w",
        "M",
        "y",
        "us",
        "µs",
        "ns",
        "sec",
        "hours",
        "x",
        ",",
        "-",
        "é",
        "\t",
        "18446744073709551615",
        "999999999",
    ];
    // A fixed linear congruential sequence: the same texts on every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(state >> 33).expect("fits") % n
    };
    for _ in 0..200_000 {
        let len = 1 + next(6);
        let text: String = (0..len).map(|_| pieces[next(pieces.len())]).collect();
        agree(&text);
    }
}

#[test]
fn durations_print_the_same() {
    let mut state: u64 = 1;
    for _ in 0..100_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let secs = (state >> 20) % (5 * 31_557_600);
        let nanos = u32::try_from(state % 1_000_000_000).expect("below a second");
        for duration in [
            Duration::new(secs, nanos),
            Duration::from_secs(secs),
            Duration::from_millis(secs),
            Duration::from_nanos(secs),
        ] {
            assert_eq!(
                DurationText(duration).to_string(),
                humantime::format_duration(duration).to_string()
            );
        }
    }
}
