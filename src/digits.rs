//! Decimal digits without a formatter, for the few numbers written on every operation (a
//! lease's token, a rate-limit check's policy): `format!` and `to_string` cost an allocation
//! and the formatting machinery each time.

/// The decimal digits of `n`, written at the end of `buf`.
pub(crate) fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    let mut rest = n;
    loop {
        start -= 1;
        // Below 10: the cast cannot truncate.
        buf[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            return &buf[start..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_match_the_formatter() {
        for n in [0, 1, 9, 10, 99, 100, 1_234_567_890, u64::MAX] {
            let mut buf = [0u8; 20];
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }
}
