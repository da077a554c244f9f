//! V1 page windows → V2 page plans (pure). V1 asks for `page_size` rows at
//! 1-based `page_index`, with pages of up to 1000 rows; V2 serves 1-based
//! pages of at most 100 rows (`offset` = page number, `limit` = page size).
//! A window that fits in one V2 page is one call with the same numbers; a
//! larger one becomes a set of 100-row V2 pages fetched concurrently and
//! sliced back to exactly the V1 window.

use std::ops::{Range, RangeInclusive};

/// The largest `limit` V2 accepts.
pub const V2_MAX_LIMIT: u64 = 100;

/// A V1 page request, already validated (both ≥ 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub page_index: u64,
    pub page_size: u64,
}

/// Which V2 pages to fetch, and how to cut the V1 window out of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// V2 `limit` for every call.
    pub limit: u64,
    /// V2 `offset` values (page numbers), in order.
    pub offsets: RangeInclusive<u64>,
    /// Rows to drop from the front of the concatenated pages.
    pub skip: usize,
    /// Rows to keep after that.
    pub take: usize,
}

impl Window {
    pub fn plan(self) -> Plan {
        let Window {
            page_index,
            page_size,
        } = self;
        if page_size <= V2_MAX_LIMIT {
            return Plan {
                limit: page_size,
                offsets: page_index..=page_index,
                skip: 0,
                take: page_size as usize,
            };
        }
        let start = (page_index - 1).saturating_mul(page_size);
        let end = start.saturating_add(page_size);
        let first = start / V2_MAX_LIMIT + 1;
        let last = (end - 1) / V2_MAX_LIMIT + 1;
        Plan {
            limit: V2_MAX_LIMIT,
            offsets: first..=last,
            skip: (start - (first - 1) * V2_MAX_LIMIT) as usize,
            take: page_size as usize,
        }
    }
}

impl Plan {
    pub fn calls(&self) -> usize {
        (self.offsets.end() - self.offsets.start() + 1) as usize
    }

    /// Joins the V2 pages (in `offsets` order) into the V1 window. A short
    /// page marks the end of the data: anything after it is ignored, so rows
    /// added upstream between two concurrent calls cannot appear twice.
    pub fn assemble<T>(&self, pages: Vec<Vec<T>>) -> Vec<T> {
        let lens: Vec<usize> = pages.iter().map(Vec::len).collect();
        let slices = self.slices(&lens);
        let mut rows = Vec::with_capacity(slices.iter().map(|r| r.len()).sum());
        for (page, r) in pages.into_iter().zip(slices) {
            rows.extend(page.into_iter().skip(r.start).take(r.len()));
        }
        rows
    }

    /// The rows of the `k`-th V2 page (in `offsets` order) that are in the
    /// V1 window when every page before it is full: the range
    /// [`Plan::slices`] gives that page then (before it is cut to the
    /// page's length).
    pub fn part_of(&self, k: usize) -> Range<usize> {
        let limit = self.limit as usize;
        let first = k.saturating_mul(limit);
        let start = self.skip.max(first);
        let end = self
            .skip
            .saturating_add(self.take)
            .min(first.saturating_add(limit));
        if start < end {
            start - first..end - first
        } else {
            0..0
        }
    }

    /// [`Plan::assemble`] as ranges: which rows of each V2 page, of the
    /// given lengths, make the V1 window (in order; empty after the end).
    pub fn slices(&self, lens: &[usize]) -> Vec<Range<usize>> {
        let mut out = Vec::with_capacity(lens.len());
        let mut seen = 0usize;
        let mut taken = 0usize;
        let mut ended = false;
        for &len in lens {
            if ended {
                out.push(0..0);
                continue;
            }
            let start = self.skip.saturating_sub(seen).min(len);
            let end = start.saturating_add(self.take - taken).min(len);
            out.push(start..end);
            taken += end - start;
            seen += len;
            ended = (len as u64) < self.limit || taken >= self.take;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates V2 over `total` rows numbered from 0.
    fn v2_page(total: u64, offset: u64, limit: u64) -> Vec<u64> {
        let page = offset.max(1);
        let start = (page - 1) * limit;
        (start..(start + limit).min(total)).collect()
    }

    fn fetch(total: u64, w: Window) -> (Plan, Vec<u64>) {
        let plan = w.plan();
        let pages = plan
            .offsets
            .clone()
            .map(|o| v2_page(total, o, plan.limit))
            .collect();
        let rows = plan.assemble(pages);
        (plan, rows)
    }

    #[test]
    fn small_windows_are_one_call_with_the_same_numbers() {
        let plan = Window {
            page_index: 3,
            page_size: 20,
        }
        .plan();
        assert_eq!(plan.limit, 20);
        assert_eq!(plan.offsets, 3..=3);
        assert_eq!(plan.calls(), 1);
    }

    #[test]
    fn page_size_250_at_page_3() {
        let (plan, rows) = fetch(
            5000,
            Window {
                page_index: 3,
                page_size: 250,
            },
        );
        assert_eq!(plan.offsets, 6..=8);
        assert_eq!(rows, (500..750).collect::<Vec<_>>());
    }

    #[test]
    fn page_size_1000() {
        let (plan, rows) = fetch(
            2500,
            Window {
                page_index: 2,
                page_size: 1000,
            },
        );
        assert_eq!(plan.calls(), 10);
        assert_eq!(rows, (1000..2000).collect::<Vec<_>>());
        let (_, rows) = fetch(
            2500,
            Window {
                page_index: 1,
                page_size: 1000,
            },
        );
        assert_eq!(rows, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn partial_last_page() {
        let (_, rows) = fetch(
            2500,
            Window {
                page_index: 3,
                page_size: 1000,
            },
        );
        assert_eq!(rows, (2000..2500).collect::<Vec<_>>());
        let (_, rows) = fetch(
            130,
            Window {
                page_index: 1,
                page_size: 150,
            },
        );
        assert_eq!(rows, (0..130).collect::<Vec<_>>());
    }

    #[test]
    fn empty_past_the_end() {
        let (_, rows) = fetch(
            2500,
            Window {
                page_index: 4,
                page_size: 1000,
            },
        );
        assert!(rows.is_empty());
        let (_, rows) = fetch(
            10,
            Window {
                page_index: 2,
                page_size: 10,
            },
        );
        assert!(rows.is_empty());
    }

    #[test]
    fn every_window_matches_a_plain_slice() {
        for total in [0u64, 1, 99, 100, 101, 250, 999, 1001, 2500] {
            for page_size in [1u64, 7, 99, 100, 101, 150, 333, 1000] {
                for page_index in 1u64..=6 {
                    let (plan, rows) = fetch(
                        total,
                        Window {
                            page_index,
                            page_size,
                        },
                    );
                    let start = (page_index - 1) * page_size;
                    let want: Vec<u64> =
                        (start.min(total)..(start + page_size).min(total)).collect();
                    assert_eq!(rows, want, "total {total} window {page_index}x{page_size}");
                    assert!(plan.calls() <= 11);
                    assert!(plan.limit <= V2_MAX_LIMIT);
                }
            }
        }
    }

    #[test]
    fn huge_page_index_does_not_overflow() {
        let plan = Window {
            page_index: u64::MAX,
            page_size: 1000,
        }
        .plan();
        // The window starts beyond any row: the start saturates, and the plan
        // is one bounded V2 page (which comes back empty), not a wrapped
        // offset or a fan-out.
        assert_eq!(plan.calls(), 1);
        assert_eq!(plan.limit, V2_MAX_LIMIT);
        assert_eq!(*plan.offsets.start(), u64::MAX / V2_MAX_LIMIT + 1);
        assert_eq!(plan.take, 1000);
        assert!(plan.assemble(vec![Vec::<u64>::new()]).is_empty());
    }

    /// Row by row, as the window is defined: rows from `skip` on, up to
    /// `take`, none after a short page.
    fn kept_row_by_row<T>(plan: &Plan, pages: Vec<Vec<T>>) -> Vec<T> {
        let mut rows = Vec::new();
        let mut seen = 0usize;
        for page in pages {
            let short = (page.len() as u64) < plan.limit;
            for row in page {
                if seen >= plan.skip && rows.len() < plan.take {
                    rows.push(row);
                }
                seen += 1;
            }
            if short || rows.len() >= plan.take {
                break;
            }
        }
        rows
    }

    /// The ranges are the rows of the window, for any page lengths.
    #[test]
    fn slices_are_the_rows_of_the_window() {
        for page_index in 1..5 {
            for page_size in [1, 7, 100, 150, 250, 1000] {
                let plan = Window {
                    page_index,
                    page_size,
                }
                .plan();
                for lens in [
                    vec![100; 12],
                    vec![plan.limit as usize, 3, plan.limit as usize],
                    vec![0, 100],
                    vec![],
                ] {
                    let lens: Vec<usize> = lens.into_iter().take(plan.calls()).collect();
                    let pages: Vec<Vec<(usize, usize)>> = lens
                        .iter()
                        .enumerate()
                        .map(|(p, &n)| (0..n).map(|r| (p, r)).collect())
                        .collect();
                    let kept = kept_row_by_row(&plan, pages.clone());
                    assert_eq!(plan.assemble(pages), kept);
                    let from_slices: Vec<(usize, usize)> = plan
                        .slices(&lens)
                        .into_iter()
                        .enumerate()
                        .flat_map(|(p, r)| r.map(move |r| (p, r)))
                        .collect();
                    assert_eq!(kept, from_slices, "{plan:?} {lens:?}");
                }
            }
        }
    }

    /// With full pages, each page's part of the window is its slice.
    #[test]
    fn parts_are_the_slices_of_full_pages() {
        for page_index in 1..6 {
            for page_size in [1, 7, 99, 100, 101, 150, 250, 1000] {
                let plan = Window {
                    page_index,
                    page_size,
                }
                .plan();
                let lens = vec![plan.limit as usize; plan.calls()];
                let parts: Vec<_> = (0..plan.calls()).map(|k| plan.part_of(k)).collect();
                assert_eq!(plan.slices(&lens), parts, "{plan:?}");
            }
        }
    }
}
