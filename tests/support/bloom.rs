//! What the Bloom filter tests of every store share.

/// Adds `present` to `filter` and checks that each is then reported present (a Bloom filter
/// has no false negatives); returns how many of `absent` (never added) it reports present:
/// its false positives.
pub async fn add_and_count_false_positives(
    filter: &distlock::bloom::BloomFilter,
    present: &[String],
    absent: &[String],
) -> usize {
    filter.add_many(present).await.expect("add");
    assert!(
        filter
            .contains_many(present)
            .await
            .expect("contains")
            .iter()
            .all(|b| *b),
        "no false negatives"
    );
    filter
        .contains_many(absent)
        .await
        .expect("contains")
        .iter()
        .filter(|b| **b)
        .count()
}
