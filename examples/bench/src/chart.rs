//! A small SVG chart of one run: per workload, distlock's throughput as a ratio of raw's
//! (a bar per workload, a line at 1.0), so the overhead or gain reads at a glance.

use std::fmt::Write as _;

use crate::report::Outcome;

const WIDTH: f64 = 760.0;
const ROW: f64 = 34.0;
const LEFT: f64 = 250.0;
const RIGHT: f64 = 90.0;
const TOP: f64 = 48.0;

/// (label, how many times better distlock did than raw) for every workload both peers ran:
/// throughput for most; for `watchdog_scale`, renewal round trips saved. `layer_overhead`
/// compares a router with and without the layer, not two peers, so it stays in the table.
fn ratios(results: &[Outcome]) -> Vec<(String, f64)> {
    let extra = |o: &Outcome, name: &str| {
        o.extra
            .iter()
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<f64>().ok())
    };
    results
        .iter()
        .filter(|r| r.peer == "distlock" && r.workload != "layer_overhead")
        .filter_map(|d| {
            let raw = results
                .iter()
                .find(|r| r.peer == "raw" && r.workload == d.workload)?;
            if d.workload == "watchdog_scale" {
                let (ours, theirs) = (
                    extra(d, "renewal_round_trips_per_s")?,
                    extra(raw, "renewal_round_trips_per_s")?,
                );
                return (ours > 0.0)
                    .then(|| ("watchdog_scale (round trips)".to_owned(), theirs / ours));
            }
            (raw.ops_per_s > 0.0).then(|| (d.workload.to_owned(), d.ops_per_s / raw.ops_per_s))
        })
        .collect()
}

/// The chart as an SVG document; `None` if no workload ran on both peers.
pub fn svg(results: &[Outcome], title: &str) -> Option<String> {
    let rows = ratios(results);
    if rows.is_empty() {
        return None;
    }
    // A log scale: ratios from 0.1× to 1000× all stay readable.
    let (lo, hi) = (0.1_f64.log10(), 1000_f64.log10());
    let span = WIDTH - LEFT - RIGHT;
    let x = |ratio: f64| LEFT + (ratio.clamp(0.1, 1000.0).log10() - lo) / (hi - lo) * span;
    let height = TOP + ROW * rows.len() as f64 + 40.0;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = write!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        out,
        r#"<text x="16" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = write!(
        out,
        r#"<text x="16" y="38" fill="dimgray">distlock ÷ raw, log scale, right of the line is better for distlock (throughput; watchdog: round trips saved)</text>"#
    );
    for tick in [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0, 1000.0] {
        let tx = x(tick);
        let stroke = if (tick - 1.0_f64).abs() < f64::EPSILON {
            "#222"
        } else {
            "#ddd"
        };
        let _ = write!(
            out,
            r#"<line x1="{tx:.1}" y1="{TOP}" x2="{tx:.1}" y2="{:.1}" stroke="{stroke}"/>"#,
            height - 30.0
        );
        let _ = write!(
            out,
            r#"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="dimgray">{tick}×</text>"#,
            height - 14.0
        );
    }
    for (i, (workload, ratio)) in rows.iter().enumerate() {
        let y = TOP + ROW * i as f64 + 6.0;
        let (from, to) = (x(1.0).min(x(*ratio)), x(1.0).max(x(*ratio)));
        let fill = if *ratio >= 0.95 { "#2e7d32" } else { "#c62828" };
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{workload}</text>"#,
            LEFT - 8.0,
            y + 15.0
        );
        let _ = write!(
            out,
            r#"<rect x="{from:.1}" y="{y:.1}" width="{:.1}" height="20" fill="{fill}"/>"#,
            (to - from).max(1.0)
        );
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}">{ratio:.2}×</text>"#,
            x(*ratio).max(x(1.0)) + 6.0,
            y + 15.0
        );
    }
    out.push_str("</svg>\n");
    Some(out)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
