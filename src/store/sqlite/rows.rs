//! Multi-row statements: a batch of rows written with a few `INSERT … VALUES (…), (…), …` or
//! `WITH m AS (VALUES …) UPDATE … FROM m` statements instead of one statement per row. SQLite
//! pays per statement for its statement journal and for setting up each trigger program (the
//! `tasks` counters), so a batch written row by row costs several times the same rows in a
//! few statements (BENCHMARKS.md, "Firing schedules: multi-row statements on SQLite").

use std::ops::Range;

/// Rows per statement, largest first: a batch is cut into as many statements of the first size
/// as fit, then of the next, so each query keeps three shapes in the statement cache.
const SIZES: [usize; 3] = [32, 8, 1];

/// Consecutive ranges that cover `0..n`, each as long as one of [`SIZES`], longest first.
pub fn chunks(n: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for size in SIZES {
        while n - start >= size {
            out.push(start..start + size);
            start += size;
        }
    }
    out
}

/// `head`, then `VALUES` and `n` copies of `row` (a parenthesised tuple of `?`s) separated by
/// commas, then `tail`.
pub fn values(head: &str, row: &str, n: usize, tail: &str) -> String {
    let mut sql = String::with_capacity(head.len() + tail.len() + 8 + n * (row.len() + 2));
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    sql.push_str(tail);
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_row_once_in_three_sizes() {
        assert!(chunks(0).is_empty());
        assert_eq!(chunks(1), vec![0..1]);
        assert_eq!(chunks(10), vec![0..8, 8..9, 9..10]);
        assert_eq!(chunks(41), vec![0..32, 32..40, 40..41]);
        for n in 0..200 {
            let got = chunks(n);
            assert_eq!(got.iter().map(|r| r.len()).sum::<usize>(), n);
            assert!(got.windows(2).all(|w| w[0].end == w[1].start));
            assert!(got.iter().all(|r| SIZES.contains(&r.len())));
        }
    }

    #[test]
    fn values_repeats_the_row() {
        assert_eq!(
            values("INSERT INTO t (a, b)", "(?, ?)", 3, " RETURNING a"),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) RETURNING a"
        );
    }
}
