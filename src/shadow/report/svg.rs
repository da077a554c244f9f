//! The latency chart of one operation, off the request path: an inline SVG
//! (no script, nothing loaded) with one row per side, legacy above
//! translated on a shared millisecond axis. Each answer is a dot (at most
//! [`MAX_DOTS`], taken at evenly spaced ranks, so a large capture keeps its
//! shape); with enough answers ([`MIN_SAMPLES`]) a box spans p25–p75 with a
//! bar at p50 and a tick at p99. With fewer, the row says so and draws only
//! the dots.

use std::fmt::Write as _;

use super::esc;
use super::latency::{percentile, Pct, MIN_SAMPLES};
use super::quantile;

/// Dots drawn per side at most.
pub(crate) const MAX_DOTS: usize = 200;

const WIDTH: f64 = 560.0;
const LEFT: f64 = 92.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 8.0;
const ROW: f64 = 36.0;
const AXIS: f64 = 26.0;
pub(crate) const LEGACY_COLOUR: &str = "#b26a00";
pub(crate) const TRANSLATED_COLOUR: &str = "#1565c0";

/// A step of 1, 2 or 5 × 10ⁿ giving about five ticks up to `max`, and the
/// axis end (a whole number of steps at or above `max`).
fn ticks(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (step, (max / step).ceil().max(1.0) * step)
}

fn label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else if step >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The values drawn as dots: all of them, or [`MAX_DOTS`] at evenly
/// spaced ranks.
fn dots(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.len() <= MAX_DOTS {
        return s;
    }
    (0..MAX_DOTS)
        .map(|i| s[(i * (s.len() - 1)) / (MAX_DOTS - 1)])
        .collect()
}

/// The chart of one operation's latencies (milliseconds).
pub(crate) fn latency_chart(op: &str, legacy: &[f64], translated: &[f64]) -> String {
    let max = legacy
        .iter()
        .chain(translated)
        .copied()
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    let (step, end) = ticks(max);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |v: f64| LEFT + (v.clamp(0.0, end) / end) * plot;
    let height = TOP + 2.0 * ROW + AXIS;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"latency\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"{op} latency, legacy against translated\"><title>{op}: legacy n={} · translated n={} (ms)</title>",
        legacy.len(),
        translated.len(),
        op = esc(op),
    );
    // Axis and grid.
    let axis_y = TOP + 2.0 * ROW;
    let mut t = 0.0;
    while t <= end + step / 2.0 {
        let tx = x(t);
        let _ = write!(
            s,
            "<line x1=\"{tx:.1}\" y1=\"{TOP}\" x2=\"{tx:.1}\" y2=\"{axis_y}\" stroke=\"#eee\"/><text x=\"{tx:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\" fill=\"#6e6e73\">{}</text>",
            axis_y + 12.0,
            label(t, step)
        );
        t += step;
    }
    let _ = write!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{axis_y}\" x2=\"{:.1}\" y2=\"{axis_y}\" stroke=\"#999\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"#6e6e73\">ms</text>",
        WIDTH - RIGHT,
        WIDTH - RIGHT,
        axis_y + 24.0
    );
    for (row, (name, v, colour)) in [
        ("legacy", legacy, LEGACY_COLOUR),
        ("translated", translated, TRANSLATED_COLOUR),
    ]
    .into_iter()
    .enumerate()
    {
        let mid = TOP + ROW * row as f64 + ROW / 2.0;
        let _ = write!(
            s,
            "<g class=\"side {name}\"><text x=\"4\" y=\"{:.1}\" font-size=\"12\" fill=\"{colour}\">{name}</text><text x=\"4\" y=\"{:.1}\" font-size=\"10\" fill=\"#6e6e73\">n={}</text>",
            mid - 2.0,
            mid + 10.0,
            v.len()
        );
        for (i, d) in dots(v).into_iter().enumerate() {
            // A small, fixed vertical spread so equal values stay visible.
            let jitter = ((i * 7) % 5) as f64 * 3.0 - 6.0;
            let _ = write!(
                s,
                "<circle class=\"dot\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\" fill-opacity=\"0.45\"/>",
                x(d),
                mid + jitter
            );
        }
        match percentile(v, 0.5) {
            Pct::TooFew(n) => {
                let why = match n {
                    0 => "no answers".to_owned(),
                    1 => format!("1 answer: too few for percentiles (fewer than {MIN_SAMPLES})"),
                    n => format!("{n} answers: too few for percentiles (fewer than {MIN_SAMPLES})"),
                };
                let _ = write!(
                    s,
                    "<text class=\"too-few\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"#6e6e73\">{why}</text>",
                    WIDTH - RIGHT,
                    mid - 9.0
                );
            }
            _ => {
                let (q1, q2, q3) = (quantile(v, 0.25), quantile(v, 0.5), quantile(v, 0.75));
                let _ = write!(
                    s,
                    "<rect class=\"box\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"><title>{name} p25 {q1:.1} · p75 {q3:.1} ms</title></rect><line class=\"p50\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"3\"><title>{name} p50 {q2:.1} ms</title></line>",
                    x(q1),
                    mid - 8.0,
                    (x(q3) - x(q1)).max(1.0),
                    x(q2),
                    mid - 11.0,
                    x(q2),
                    mid + 11.0
                );
                let p99 = percentile(v, 0.99);
                if let Some(p) = p99.value() {
                    let _ = write!(
                        s,
                        "<line class=\"p99\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"1.5\" stroke-dasharray=\"2 2\"><title>{name} p99 {p:.1} ms</title></line>",
                        x(p),
                        mid - 11.0,
                        x(p),
                        mid + 11.0
                    );
                }
                let _ = write!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"#6e6e73\">p50 {q2:.1} · p99 {p99} ms</text>",
                    WIDTH - RIGHT,
                    mid - 9.0
                );
            }
        }
        s.push_str("</g>");
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(s: &str, what: &str) -> usize {
        s.matches(what).count()
    }

    #[test]
    fn ticks_are_round_and_cover_the_largest_value() {
        assert_eq!(ticks(9.3), (2.0, 10.0));
        assert_eq!(ticks(0.0), (0.2, 1.0));
        assert_eq!(ticks(123.0), (50.0, 150.0));
        let (step, end) = ticks(0.7);
        assert!((step - 0.2).abs() < 1e-9 && end >= 0.7, "{step} {end}");
    }

    #[test]
    fn few_answers_draw_dots_and_say_there_are_too_few() {
        let svg = latency_chart("run_detail", &[2.0, 3.0, 2.5], &[4.0]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(!svg.contains("<script") && !svg.contains("href"));
        assert_eq!(count(&svg, "class=\"dot\""), 4);
        assert_eq!(count(&svg, "class=\"box\""), 0);
        assert_eq!(count(&svg, "too few for percentiles"), 2);
        assert!(svg.contains("3 answers: too few"));
        assert!(svg.contains("legacy n=3 · translated n=1"));
    }

    #[test]
    fn enough_answers_draw_a_box_and_a_p99_only_where_it_is_not_the_maximum() {
        let legacy: Vec<f64> = (1..=40).map(f64::from).collect();
        let translated: Vec<f64> = (1..=500).map(|i| f64::from(i) / 10.0).collect();
        let svg = latency_chart("<op>", &legacy, &translated);
        assert!(svg.contains("&lt;op&gt;") && !svg.contains("<op>"));
        assert_eq!(count(&svg, "class=\"box\""), 2);
        assert_eq!(count(&svg, "class=\"p50\""), 2);
        // 40 answers: the p99 is their maximum and is not drawn as a p99.
        assert_eq!(count(&svg, "class=\"p99\""), 1);
        assert!(svg.contains("p99 max 40.0 (n=40) ms"));
        // 540 answers, 40 + 200 dots.
        assert_eq!(count(&svg, "class=\"dot\""), 40 + MAX_DOTS);
        assert_eq!(dots(&translated).first(), Some(&0.1));
        assert_eq!(dots(&translated).last(), Some(&50.0));
        // One axis for both: it ends at 50 (ten ms steps), where the
        // largest dot sits.
        assert!(svg.contains(">50</text>"));
        assert!(svg.contains(&format!("cx=\"{:.1}\"", WIDTH - RIGHT)));
    }

    #[test]
    fn no_answers_at_all_still_draw_an_axis() {
        let svg = latency_chart("x", &[], &[]);
        assert_eq!(count(&svg, "no answers"), 2);
        // Nothing to scale by: 0 to 1 ms.
        assert!(svg.contains(">0.0</text>") && svg.contains(">1.0</text>"));
    }
}
