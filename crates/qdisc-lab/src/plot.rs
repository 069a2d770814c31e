//! Plots of a [`RunResult`], PNG and SVG (`qdisc-lab run … --plot DIR`,
//! `qdisc-lab plot RESULT.json --out DIR`):
//!
//! * `throughput.{png,svg}` — every flow's throughput per reporting interval, and the
//!   total of all tcp/udp traffic;
//! * `rtt.{png,svg}` — every ping reply's RTT at its arrival time;
//! * `rtt-cdf.{png,svg}` — the distribution of those RTTs;
//! * `qdisc-HOST-DEV.{png,svg}` — for every device, each qdisc's backlog (bytes and
//!   packets) and its drops (cumulative, as `tc -s` counts them) from the periodic
//!   `tc -s -j qdisc show` snapshots;
//! * `cpu-HOST.{png,svg}` — for every host with CPU figures: its busy time per reporting
//!   interval averaged over its CPUs (and split into user, sys and softirq), and each
//!   CPU's busy % — one line per CPU up to [`CPU_LINES_MAX`] CPUs, a heatmap above that
//!   (CPU on the y axis, time on the x axis, colour = busy %). Figures of the
//!   simulator's CPU model are marked: "(model, sim backend)" in the title, "(model)" on
//!   the axes and "the simulator's CPU model, not a measurement" beside the first chart.
//!
//! A figure is first described as data ([`Figure`]: panels of labelled series), then
//! drawn with plotters. Text is laid out (and, in PNGs, rasterised) with ab_glyph from a
//! subset of DejaVu Sans compiled into the program (`assets/fonts`), so nothing depends
//! on the fonts installed, and the same result gives byte-identical files on every
//! machine. SVGs carry their text as `<text font-family="sans-serif">`.

use std::path::{Path, PathBuf};
use std::sync::Once;

use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind};
use qdisc_scenario::RunResult;
use serde_json::Value;

/// DejaVu Sans (Bitstream Vera license, see assets/fonts/LICENSE), subset to Latin,
/// Greek, punctuation, arrows and a few math signs (assets/fonts/README.md says how).
const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans-subset.ttf");

/// Colours of the series, in order (Tableau 10); the total is black.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub width: u32,
}

/// One chart: a y axis and its series, sharing the figure's x axis; the legend is
/// drawn to its right.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub y_desc: String,
    pub series: Vec<Series>,
    /// Drawn instead of series when set (its colour scale in place of the legend).
    pub heatmap: Option<Heatmap>,
}

/// Rows of cells over the x axis, coloured by a value from 0 to 100 (percent).
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    /// Row k (0-based) spans y from k − 0.5 to k + 0.5, so the y labels are row numbers.
    pub rows: u32,
    /// (x from, x to, row, value 0–100).
    pub cells: Vec<(f64, f64, u32, f64)>,
    /// What the colour means (above the colour scale), e.g. "busy %".
    pub scale_desc: String,
}

/// Up to this many CPUs a host's per-CPU busy time is drawn as one line per CPU; more
/// as a heatmap.
pub const CPU_LINES_MAX: u32 = 8;

/// At most this many heatmap columns: longer runs average neighbouring intervals.
const HEATMAP_COLUMNS_MAX: usize = 300;

/// One image: a title and panels stacked vertically.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// File name without extension.
    pub name: String,
    pub title: String,
    pub x_desc: String,
    pub x_range: (f64, f64),
    pub panels: Vec<Panel>,
    pub size: (u32, u32),
    /// Lines of text under the first panel's legend (e.g. that the figures are a model).
    pub note: Vec<String>,
}

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A scale for bits per second: (divisor, unit).
fn rate_unit(max_bps: f64) -> (f64, &'static str) {
    if max_bps >= 1e9 {
        (1e9, "Gbit/s")
    } else if max_bps >= 1e6 {
        (1e6, "Mbit/s")
    } else if max_bps >= 1e3 {
        (1e3, "kbit/s")
    } else {
        (1.0, "bit/s")
    }
}

/// A scale for bytes: (divisor, unit).
fn byte_unit(max: f64) -> (f64, &'static str) {
    if max >= 1e7 {
        (1e6, "MB")
    } else if max >= 1e4 {
        (1e3, "kB")
    } else {
        (1.0, "bytes")
    }
}

/// `name` usable in a file name: runs of anything but `A-Za-z0-9_.` become one `-`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

fn title(r: &RunResult, what: &str) -> String {
    format!("{} — {what} ({} backend)", r.scenario.name, r.metadata.backend)
}

fn x_end(r: &RunResult, last: f64) -> f64 {
    let end = r.scenario.duration_s.max(last);
    if end > 0.0 {
        end
    } else {
        1.0
    }
}

/// Every figure of a result (those without data are left out).
pub fn figures(r: &RunResult) -> Vec<Figure> {
    let mut out = Vec::new();
    out.extend(throughput(r));
    out.extend(rtt(r));
    out.extend(qdiscs(r));
    out.extend(cpus(r));
    out
}

/// `base`, or `base-2`, `base-3`… when `taken` has it already; the name is added to
/// `taken`.
fn unique_name(taken: &mut Vec<String>, base: String) -> String {
    let mut name = base.clone();
    for k in 2.. {
        if !taken.contains(&name) {
            break;
        }
        name = format!("{base}-{k}");
    }
    taken.push(name.clone());
    name
}

fn throughput(r: &RunResult) -> Option<Figure> {
    if r.throughput.iter().all(|t| t.streams.is_empty()) {
        return None;
    }
    let max = r
        .throughput
        .iter()
        .flat_map(|t| t.streams.iter().flat_map(|s| &s.intervals))
        .chain(&r.total)
        .map(|iv| iv.bits_per_second)
        .fold(0.0, f64::max);
    let (div, unit) = rate_unit(max);
    let mid = |iv: &qdisc_scenario::result::Interval| ((iv.start + iv.end) / 2.0, iv.bits_per_second / div);
    let mut series = Vec::new();
    for t in &r.throughput {
        for s in &t.streams {
            series.push(Series {
                label: format!("{} {}→{} flow {}", t.kind, t.from, t.to, s.id),
                points: s.intervals.iter().map(mid).collect(),
                color: color(series.len()),
                width: 1,
            });
        }
    }
    series.push(Series { label: "total".into(), points: r.total.iter().map(mid).collect(), color: BLACK, width: 2 });
    let last = r.total.iter().map(|iv| iv.end).fold(0.0, f64::max);
    Some(Figure {
        name: "throughput".into(),
        title: title(r, "throughput"),
        x_desc: "time (s)".into(),
        x_range: (0.0, x_end(r, last)),
        panels: vec![Panel {
            y_desc: format!("throughput ({unit}, per {} s)", qdisc::tc::units::fmt_g(r.metadata.interval_s, 6)),
            series,
            heatmap: None,
        }],
        size: (1000, 600),
        note: Vec::new(),
    })
}

fn rtt(r: &RunResult) -> Vec<Figure> {
    if r.rtt.iter().all(|p| p.samples.is_empty()) {
        return Vec::new();
    }
    let label = |p: &qdisc_scenario::result::RttResult| format!("ping {}→{}", p.from, p.to);
    let over_time: Vec<Series> = r
        .rtt
        .iter()
        .enumerate()
        .map(|(i, p)| Series {
            label: label(p),
            points: p.samples.iter().map(|s| (s.t, s.rtt_ms)).collect(),
            color: color(i),
            width: 1,
        })
        .collect();
    // The empirical CDF as steps: after the k-th smallest of n RTTs, k/n of them are ≤ it.
    let cdf: Vec<Series> = r
        .rtt
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut v: Vec<f64> = p.samples.iter().map(|s| s.rtt_ms).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len() as f64;
            let mut points = Vec::with_capacity(2 * v.len());
            for (k, x) in v.iter().enumerate() {
                points.push((*x, k as f64 / n));
                points.push((*x, (k + 1) as f64 / n));
            }
            Series { label: label(p), points, color: color(i), width: 2 }
        })
        .collect();
    let last = r.rtt.iter().flat_map(|p| &p.samples).map(|s| s.t).fold(0.0, f64::max);
    let max_rtt = r.rtt.iter().flat_map(|p| &p.samples).map(|s| s.rtt_ms).fold(0.0, f64::max);
    vec![
        Figure {
            name: "rtt".into(),
            title: title(r, "RTT"),
            x_desc: "time (s)".into(),
            x_range: (0.0, x_end(r, last)),
            panels: vec![Panel { y_desc: "RTT (ms)".into(), series: over_time, heatmap: None }],
            size: (1000, 600),
            note: Vec::new(),
        },
        Figure {
            name: "rtt-cdf".into(),
            title: title(r, "RTT distribution"),
            x_desc: "RTT (ms)".into(),
            x_range: (0.0, if max_rtt > 0.0 { max_rtt * 1.05 } else { 1.0 }),
            panels: vec![Panel { y_desc: "fraction of replies ≤ RTT".into(), series: cdf, heatmap: None }],
            size: (1000, 600),
            note: Vec::new(),
        },
    ]
}

/// "bfifo 10: parent 1:10", "htb 1: root".
fn qdisc_label(q: &Value) -> String {
    let kind = q.get("kind").and_then(Value::as_str).unwrap_or("?");
    let handle = q.get("handle").and_then(Value::as_str).unwrap_or("?");
    match q.get("parent").and_then(Value::as_str) {
        Some(p) => format!("{kind} {handle} parent {p}"),
        None if q.get("root").and_then(Value::as_bool) == Some(true) => format!("{kind} {handle} root"),
        None => format!("{kind} {handle}"),
    }
}

fn qdiscs(r: &RunResult) -> Vec<Figure> {
    // Devices in order of first appearance; per device, qdiscs likewise.
    type Qdisc = (String, [Vec<(f64, f64)>; 3]);
    let mut devices: Vec<((String, String), Vec<Qdisc>)> = Vec::new();
    for sample in r.tc.periodic.iter() {
        for d in &sample.devices {
            let key = (d.host.clone(), d.dev.clone());
            let pos = match devices.iter().position(|(k, _)| *k == key) {
                Some(p) => p,
                None => {
                    devices.push((key, Vec::new()));
                    devices.len() - 1
                }
            };
            let qs = &mut devices[pos].1;
            for q in d.qdisc.as_array().into_iter().flatten() {
                let label = qdisc_label(q);
                let i = match qs.iter().position(|(l, _)| *l == label) {
                    Some(i) => i,
                    None => {
                        qs.push((label, Default::default()));
                        qs.len() - 1
                    }
                };
                for (k, field) in ["backlog", "qlen", "drops"].iter().enumerate() {
                    if let Some(v) = q.get(*field).and_then(Value::as_f64) {
                        qs[i].1[k].push((sample.t, v));
                    }
                }
            }
        }
    }
    let last = r.tc.periodic.iter().map(|s| s.t).fold(0.0, f64::max);
    let mut names: Vec<String> = Vec::new();
    devices
        .into_iter()
        .filter(|(_, qs)| !qs.is_empty())
        .map(|((host, dev), qs)| {
            // Unique file names even when two host/device pairs slug alike.
            let name = unique_name(&mut names, format!("qdisc-{}", slug(&format!("{host}-{dev}"))));
            let max_bytes = qs.iter().flat_map(|(_, s)| &s[0]).map(|p| p.1).fold(0.0, f64::max);
            let (div, unit) = byte_unit(max_bytes);
            let panel = |k: usize, y_desc: String, div: f64| Panel {
                y_desc,
                series: qs
                    .iter()
                    .enumerate()
                    .map(|(i, (label, s))| Series {
                        label: label.clone(),
                        points: s[k].iter().map(|&(t, v)| (t, v / div)).collect(),
                        color: color(i),
                        // Wider first: a root's line shows around its child's when
                        // they carry the same backlog.
                        width: if i == 0 { 4 } else { 2 },
                    })
                    .collect(),
                heatmap: None,
            };
            let who =
                if host.starts_with("link[") { format!("{dev} (wire of {host})") } else { format!("{host} {dev}") };
            Figure {
                name,
                title: title(r, &format!("qdiscs of {who}")),
                x_desc: "time (s)".into(),
                x_range: (0.0, x_end(r, last)),
                panels: vec![
                    panel(0, format!("backlog ({unit})"), div),
                    panel(1, "backlog (packets)".into(), 1.0),
                    panel(2, "drops (packets, cumulative)".into(), 1.0),
                ],
                size: (1000, 1000),
                note: Vec::new(),
            }
        })
        .collect()
}

/// Colours of the heatmap, 0 to 100 % in equal steps (ColorBrewer YlOrRd).
const HEAT: [RGBColor; 6] = [
    RGBColor(255, 255, 204),
    RGBColor(254, 217, 118),
    RGBColor(253, 141, 60),
    RGBColor(240, 59, 32),
    RGBColor(189, 0, 38),
    RGBColor(100, 0, 30),
];

/// The heatmap colour of `v` percent (clamped to 0–100), interpolated linearly.
fn heat_color(v: f64) -> RGBColor {
    let x = v.clamp(0.0, 100.0) / 100.0 * (HEAT.len() - 1) as f64;
    let i = (x.floor() as usize).min(HEAT.len() - 2);
    let f = x - i as f64;
    let (a, b) = (HEAT[i], HEAT[i + 1]);
    let mix = |p: u8, q: u8| (p as f64 + (q as f64 - p as f64) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// One figure per host with CPU figures (`cpu-HOST`).
fn cpus(r: &RunResult) -> Vec<Figure> {
    let mut names: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for h in &r.cpu {
        if h.intervals.is_empty() {
            continue;
        }
        let model = h.source == "model";
        let tag = if model { " (model)" } else { "" };
        let cpus = |n: u32| format!("{n} cpu{}", if n == 1 { "" } else { "s" });
        let mid = |iv: &qdisc_scenario::result::CpuInterval| (iv.start + iv.end) / 2.0;
        // Host-wide: the mean over CPUs, split by class.
        let mean: Vec<(f64, [f64; 4])> =
            h.intervals.iter().filter_map(|iv| Some((mid(iv), crate::run::cpu_mean(&iv.cpus)?))).collect();
        let split = ["user", "sys", "softirq"];
        let mut host_series = vec![Series {
            label: "busy".into(),
            points: mean.iter().map(|(t, m)| (*t, m[3])).collect(),
            color: BLACK,
            width: 2,
        }];
        for (k, what) in split.iter().enumerate().rev() {
            host_series.push(Series {
                label: (*what).into(),
                points: mean.iter().map(|(t, m)| (*t, m[k])).collect(),
                color: color(2 - k),
                width: 1,
            });
        }
        // Per CPU: the CPUs the intervals name, in order.
        let mut ids: Vec<u32> = h.intervals.iter().flat_map(|iv| iv.cpus.iter().map(|c| c.cpu)).collect();
        ids.sort_unstable();
        ids.dedup();
        let n = h.cpus.max(ids.last().map_or(0, |l| l + 1));
        let per_cpu = if n <= CPU_LINES_MAX {
            Panel {
                y_desc: format!("busy % per cpu{tag}"),
                series: ids
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| Series {
                        label: format!("cpu {c}"),
                        points: h
                            .intervals
                            .iter()
                            .filter_map(|iv| Some((mid(iv), 100.0 - iv.cpus.iter().find(|x| x.cpu == c)?.idle)))
                            .collect(),
                        color: color(i),
                        width: 1,
                    })
                    .collect(),
                heatmap: None,
            }
        } else {
            // Average k neighbouring intervals per column on long runs.
            let k = h.intervals.len().div_ceil(HEATMAP_COLUMNS_MAX);
            let mut cells = Vec::new();
            for group in h.intervals.chunks(k) {
                let (from, to) = (group[0].start, group[group.len() - 1].end);
                for &c in &ids {
                    let busy: Vec<f64> = group
                        .iter()
                        .filter_map(|iv| iv.cpus.iter().find(|x| x.cpu == c))
                        .map(|x| 100.0 - x.idle)
                        .collect();
                    if !busy.is_empty() {
                        cells.push((from, to, c, busy.iter().sum::<f64>() / busy.len() as f64));
                    }
                }
            }
            Panel {
                y_desc: format!("cpu; colour = busy %{tag}"),
                series: Vec::new(),
                heatmap: Some(Heatmap { rows: n, cells, scale_desc: "busy %".into() }),
            }
        };
        let last = h.intervals.iter().map(|iv| iv.end).fold(0.0, f64::max);
        out.push(Figure {
            name: unique_name(&mut names, format!("cpu-{}", slug(&h.host))),
            title: format!("{} — CPU of {} ({}, {} backend)", r.scenario.name, h.host, h.source, r.metadata.backend),
            x_desc: "time (s)".into(),
            x_range: (0.0, x_end(r, last)),
            panels: vec![
                Panel {
                    y_desc: format!(
                        "busy %, mean of {}{tag}, per {} s",
                        cpus(h.cpus),
                        qdisc::tc::units::fmt_g(r.metadata.interval_s, 6)
                    ),
                    series: host_series,
                    heatmap: None,
                },
                per_cpu,
            ],
            size: (1000, if n <= CPU_LINES_MAX { 800 } else { 1000 }),
            note: if model {
                vec!["the simulator's".into(), "CPU model,".into(), "not a measurement".into()]
            } else {
                Vec::new()
            },
        });
    }
    out
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            panic!("the bundled font does not load");
        }
    });
}

/// An axis end plotters can place ticks on: its tick search never ends on an infinite
/// range, which the headroom above a huge value (a drop count of 1.7e308) overflows to.
fn finite(v: f64) -> f64 {
    v.min(f64::MAX)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, fig: &Figure) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{}: {e}", fig.name);
    root.fill(&WHITE).map_err(e)?;
    let body = root.titled(&fig.title, ("sans-serif", 22)).map_err(e)?;
    // The legends go right of the charts, one width for all panels so x axes line up.
    let font = ("sans-serif", 14).into_font();
    let mut legend_w = 0;
    for label in fig.panels.iter().flat_map(|p| &p.series).map(|s| &s.label).chain(&fig.note) {
        legend_w = legend_w.max(body.estimate_text_size(label, &font.clone().into()).map_err(e)?.0);
    }
    let legend_w = (legend_w + 50).min(fig.size.0 * 2 / 5);
    let areas = body.split_evenly((fig.panels.len().max(1), 1));
    for (k, (p, area)) in fig.panels.iter().zip(&areas).enumerate() {
        let (w, _) = area.dim_in_pixel();
        let (area, legend) = area.split_horizontally(w.saturating_sub(legend_w));
        if k == 0 {
            let grey = font.clone().color(&RGBColor(90, 90, 90)).pos(Pos::new(HPos::Left, VPos::Center));
            for (i, line) in fig.note.iter().enumerate() {
                let y = 24 + 22 * (p.series.len() as i32 + 1) + 18 * i as i32;
                legend.draw(&Text::new(line.as_str(), (6, y), grey.clone())).map_err(e)?;
            }
        }
        if let Some(h) = &p.heatmap {
            draw_heatmap(&area, &legend, fig, p, h).map_err(e)?;
            continue;
        }
        let ymax = p.series.iter().flat_map(|s| &s.points).map(|p| p.1).fold(0.0, f64::max);
        let ymax = if ymax > 0.0 { ymax * 1.08 } else { 1.0 };
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(fig.x_range.0..finite(fig.x_range.1), 0.0..finite(ymax))
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(fig.x_desc.as_str())
            .y_desc(p.y_desc.as_str())
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .x_label_formatter(&|v| qdisc::tc::units::fmt_g(*v, 6))
            .y_label_formatter(&|v| qdisc::tc::units::fmt_g(*v, 6))
            .max_light_lines(1)
            .light_line_style(RGBColor(238, 238, 238))
            .draw()
            .map_err(e)?;
        for (i, s) in p.series.iter().enumerate() {
            let style = ShapeStyle { color: s.color.to_rgba(), filled: false, stroke_width: s.width };
            chart.draw_series(LineSeries::new(s.points.iter().copied(), style)).map_err(e)?;
            let y = 24 + 22 * i as i32;
            legend.draw(&PathElement::new(vec![(6, y), (32, y)], style)).map_err(e)?;
            let text = font.clone().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
            legend.draw(&Text::new(s.label.as_str(), (40, y), text)).map_err(e)?;
        }
    }
    root.present().map_err(e)
}

/// A heatmap panel: cells as filled rectangles, its colour scale in the legend area.
fn draw_heatmap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    legend: &DrawingArea<DB, Shift>,
    fig: &Figure,
    p: &Panel,
    h: &Heatmap,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let rows = h.rows.max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(fig.x_range.0..finite(fig.x_range.1), -0.5..rows - 0.5)?;
    chart
        .configure_mesh()
        .x_desc(fig.x_desc.as_str())
        .y_desc(p.y_desc.as_str())
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_label_formatter(&|v| qdisc::tc::units::fmt_g(*v, 6))
        // Rows are whole numbers; a tick between two rows gets no label.
        .y_label_formatter(&|v| if v.fract() == 0.0 { format!("{v:.0}") } else { String::new() })
        .disable_mesh()
        .draw()?;
    chart.draw_series(h.cells.iter().map(|&(x0, x1, row, v)| {
        let y = row as f64;
        Rectangle::new([(x0, y - 0.5), (x1, y + 0.5)], heat_color(v).filled())
    }))?;
    // The colour scale: a vertical bar, 100 % at the top, labelled every 25 %.
    let (_, lh) = legend.dim_in_pixel();
    let (top, bottom) = (40, (lh as i32 - 60).max(60));
    let (x0, x1) = (8, 28);
    let font = ("sans-serif", 14).into_font();
    legend.draw(&Text::new(h.scale_desc.as_str(), (x0, 14), font.clone().color(&BLACK)))?;
    let steps = 100;
    for i in 0..steps {
        let v = (i as f64 + 0.5) * 100.0 / steps as f64;
        let y = |k: i32| bottom - (bottom - top) * k / steps;
        legend.draw(&Rectangle::new([(x0, y(i + 1)), (x1, y(i))], heat_color(v).filled()))?;
    }
    legend.draw(&Rectangle::new(
        [(x0, top), (x1, bottom)],
        ShapeStyle { color: BLACK.to_rgba(), filled: false, stroke_width: 1 },
    ))?;
    for pct in [0, 25, 50, 75, 100] {
        let y = bottom - (bottom - top) * pct / 100;
        let text = font.clone().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        legend.draw(&Text::new(format!("{pct}%"), (x1 + 6, y), text))?;
    }
    Ok(())
}

/// A figure as SVG text.
pub fn svg(fig: &Figure) -> Result<String, String> {
    register_font();
    let mut out = String::new();
    draw(SVGBackend::with_string(&mut out, fig.size).into_drawing_area(), fig)?;
    Ok(out)
}

/// A figure as PNG (RGB, 8 bits, png's default "balanced" compression).
pub fn png(fig: &Figure) -> Result<Vec<u8>, String> {
    register_font();
    let (w, h) = fig.size;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    draw(Bitmap(BitMapBackend::with_buffer(&mut rgb, fig.size)).into_drawing_area(), fig)?;
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Balanced);
    let e = |e: png::EncodingError| format!("{}: PNG: {e}", fig.name);
    let mut writer = enc.write_header().map_err(e)?;
    writer.write_image_data(&rgb).map_err(e)?;
    writer.finish().map_err(e)?;
    Ok(out)
}

/// plotters' bitmap backend with text drawn here: plotters 0.3.7 rasterises ab_glyph
/// glyphs without their left side bearing (each glyph lands up to a pixel or two left
/// of its place, so "cl" reads "d"). Same layout and vertical placement as plotters;
/// glyphs at their exact (sub-pixel) pen position.
struct Bitmap<'a>(BitMapBackend<'a>);

type BitmapError = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

impl DrawingBackend for Bitmap<'_> {
    type ErrorType = BitmapError;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.0.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.0.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.0.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        (iw, ih): (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.0.blit_bitmap(pos, (iw, ih), src)
    }

    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        use plotters_backend::text_anchor::{HPos, VPos};
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        // Anchoring exactly as plotters-backend's default draw_text.
        let ((min_x, min_y), (max_x, max_y)) =
            style.layout_box(text).map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        let size = style.size() as f32;
        let font = FontRef::try_from_slice(FONT).expect("the bundled font loads");
        let font = font.as_scaled(size);
        let mut pixels: Vec<(i32, i32, f32)> = Vec::new();
        let (mut pen, mut prev) = (0f32, None);
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                pen += font.kern(p, id);
            }
            if let Some(q) = font.outline_glyph(id.with_scale_and_position(size, ab_glyph::point(pen, 0.0))) {
                let b = q.px_bounds();
                // plotters' vertical convention (ab_glyph.rs: size / 2 + min.y).
                let (x0, y0) = (b.min.x as i32, (size / 2.0 + b.min.y) as i32);
                q.draw(|x, y, a| pixels.push((x0 + x as i32, y0 + y as i32, a)));
            }
            pen += font.h_advance(id);
            prev = Some(id);
        }
        for (x, y, a) in pixels {
            let (x, y) = trans.transform(x + dx - min_x, y + dy - min_y);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if x >= 0 && x < w as i32 && y >= 0 && y < h as i32 {
                self.draw_pixel((x, y), color.mix(a as f64))?;
            }
        }
        Ok(())
    }
}

/// Write every figure of `r` into `dir` (created if missing) as PNG and SVG; returns
/// the files written.
pub fn write_all(r: &RunResult, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for fig in figures(r) {
        let path = dir.join(format!("{}.svg", fig.name));
        std::fs::write(&path, svg(&fig)?).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
        let path = dir.join(format!("{}.png", fig.name));
        std::fs::write(&path, png(&fig)?).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../tests/fixtures/small-host-a.json");

    fn fixture() -> RunResult {
        serde_json::from_str(FIXTURE).unwrap()
    }

    #[test]
    fn figures_of_a_result() {
        let r = fixture();
        let figs = figures(&r);
        let names: Vec<&str> = figs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "throughput",
                "rtt",
                "rtt-cdf",
                "qdisc-client-eth0",
                "qdisc-server-eth0",
                "qdisc-link-0-l0a",
                "qdisc-link-0-l0b"
            ]
        );
        let labels = |f: &Figure, p: usize| f.panels[p].series.iter().map(|s| s.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&figs[0], 0), ["tcp client→server flow 5", "tcp client→server flow 7", "total"]);
        assert_eq!(figs[0].panels[0].y_desc, "throughput (Mbit/s, per 0.1 s)");
        assert_eq!(figs[0].title, "small: htb 100 Mbit/s, bfifo limit 100000, 2 flows — throughput (host backend)");
        // One point per interval, at its middle, in Mbit/s.
        let iv = &r.throughput[0].streams[0].intervals[3];
        assert_eq!(figs[0].panels[0].series[0].points[3], ((iv.start + iv.end) / 2.0, iv.bits_per_second / 1e6));
        assert_eq!(figs[0].panels[0].series[2].points.len(), r.total.len());
        assert_eq!(labels(&figs[1], 0), ["ping client→server"]);
        assert_eq!(figs[1].panels[0].series[0].points.len(), r.rtt[0].samples.len());
        // The CDF ends at 1 at the largest RTT.
        let cdf = &figs[2].panels[0].series[0].points;
        assert_eq!(*cdf.last().unwrap(), (r.rtt[0].stats.as_ref().unwrap().max, 1.0));
        assert_eq!(labels(&figs[3], 0), ["htb 1: root", "bfifo 10: parent 1:10"]);
        let descs: Vec<&str> = figs[3].panels.iter().map(|p| p.y_desc.as_str()).collect();
        assert_eq!(descs, ["backlog (kB)", "backlog (packets)", "drops (packets, cumulative)"]);
        // Drops are tc's cumulative counter, one point per periodic snapshot.
        let drops = &figs[3].panels[2].series[1].points;
        assert_eq!(drops.len(), r.tc.periodic.len());
        let last = r.tc.periodic.last().unwrap();
        assert_eq!(drops.last().unwrap(), &(last.t, last.devices[0].qdisc[1]["drops"].as_f64().unwrap()));
    }

    #[test]
    fn svg_is_deterministic_and_labelled() {
        let r = fixture();
        for fig in figures(&r) {
            let one = svg(&fig).unwrap();
            assert_eq!(one, svg(&fig).unwrap(), "{}", fig.name);
            assert!(one.starts_with("<svg"), "{}", fig.name);
            assert!(one.contains(&xml(&fig.title)), "{}: no title", fig.name);
            for p in &fig.panels {
                assert!(one.contains(&xml(&p.y_desc)), "{}: no {}", fig.name, p.y_desc);
                for s in &p.series {
                    assert!(one.contains(&format!(">\n{}\n</text>", xml(&s.label))), "{}: no {}", fig.name, s.label);
                }
            }
        }
    }

    fn xml(s: &str) -> String {
        s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
    }

    #[test]
    fn png_and_svg_files() {
        let r = fixture();
        let dir = std::env::temp_dir().join(format!("qdisc-lab-plot-test-{}", std::process::id()));
        let mut r1 = r.clone();
        // Keep it quick: the throughput and RTT figures only.
        r1.tc.periodic = Default::default();
        let files = write_all(&r1, &dir).unwrap();
        let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into()).collect();
        assert_eq!(names, ["throughput.svg", "throughput.png", "rtt.svg", "rtt.png", "rtt-cdf.svg", "rtt-cdf.png"]);
        let png1 = std::fs::read(dir.join("throughput.png")).unwrap();
        assert_eq!(&png1[..8], b"\x89PNG\r\n\x1a\n");
        let svg1 = std::fs::read_to_string(dir.join("throughput.svg")).unwrap();
        assert_eq!(svg1, svg(&figures(&r1)[0]).unwrap());
        // The same again: byte-identical.
        assert_eq!(png1, png(&figures(&r1)[0]).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Found by fuzzing: a drop count near f64::MAX made the axis end (with its 8 %
    /// headroom) infinite, and plotters' tick search never ended; an RTT likewise.
    #[test]
    fn huge_values_plot_without_hanging() {
        let mut r = fixture();
        let mut periodic: Vec<_> = r.tc.periodic.iter().collect();
        periodic[3].devices[0].qdisc[0]["drops"] = serde_json::json!(f64::MAX);
        r.tc.periodic = periodic.into();
        r.rtt[0].samples[0].rtt_ms = f64::MAX;
        for fig in figures(&r) {
            assert!(svg(&fig).unwrap().starts_with("<svg"), "{}", fig.name);
            assert!(png(&fig).unwrap().starts_with(b"\x89PNG"), "{}", fig.name);
        }
    }

    #[test]
    fn nothing_to_plot() {
        let mut r = fixture();
        r.throughput.clear();
        r.total.clear();
        r.rtt.clear();
        r.tc.periodic = Default::default();
        assert!(figures(&r).is_empty());
    }

    /// A host's CPU figures: `intervals` intervals of 0.1 s in which cpu c is busy
    /// (c · 10 + k) % 100 percent in interval k (a third of it sys, the rest softirq).
    fn host_cpu(host: &str, cpus: u32, intervals: usize, source: &str) -> qdisc_scenario::result::HostCpu {
        use qdisc_scenario::result::{CpuInterval, CpuTime, HostCpu};
        let split = |c: u32, busy: f64| CpuTime {
            cpu: c,
            user: 0.0,
            sys: busy / 3.0,
            softirq: busy * 2.0 / 3.0,
            idle: 100.0 - busy,
        };
        HostCpu {
            host: host.into(),
            cpus,
            source: source.into(),
            profile: "default".into(),
            total: (0..cpus).map(|c| split(c, 50.0)).collect(),
            intervals: (0..intervals)
                .map(|k| CpuInterval {
                    start: k as f64 * 0.1,
                    end: (k + 1) as f64 * 0.1,
                    cpus: (0..cpus).map(|c| split(c, ((c as usize * 10 + k) % 100) as f64)).collect(),
                })
                .collect(),
            locks: vec![],
            functions: vec![],
            rx_discards: Default::default(),
            net: Default::default(),
        }
    }

    #[test]
    fn cpu_figures() {
        let mut r = fixture();
        r.throughput.clear();
        r.total.clear();
        r.rtt.clear();
        r.tc.periodic = Default::default();
        r.metadata.backend = "sim".into();
        r.cpu = vec![host_cpu("client", 2, 30, "model"), host_cpu("router 1", 48, 30, "model")];
        let figs = figures(&r);
        let names: Vec<&str> = figs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["cpu-client", "cpu-router-1"]);
        // Both say they are the model's figures, not a measurement.
        for f in &figs {
            assert!(f.title.ends_with("(model, sim backend)"), "{}", f.title);
            assert_eq!(f.note, ["the simulator's", "CPU model,", "not a measurement"]);
            assert!(f.panels.iter().all(|p| p.y_desc.contains("(model)")), "{:?}", f.panels);
        }
        assert_eq!(
            figs[0].title,
            "small: htb 100 Mbit/s, bfifo limit 100000, 2 flows — CPU of client (model, sim backend)"
        );
        // 2 cpus: the mean split by class, then one line per cpu.
        let labels = |f: &Figure, p: usize| f.panels[p].series.iter().map(|s| s.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&figs[0], 0), ["busy", "softirq", "sys", "user"]);
        assert_eq!(figs[0].panels[0].y_desc, "busy %, mean of 2 cpus (model), per 0.1 s");
        // Interval 3: cpu 0 busy 3 %, cpu 1 13 %: mean 8 %, of it a third sys.
        let (t, busy) = figs[0].panels[0].series[0].points[3];
        assert!((t - 0.35).abs() < 1e-9 && (busy - 8.0).abs() < 1e-9, "{t} {busy}");
        assert!((figs[0].panels[0].series[2].points[3].1 - 8.0 / 3.0).abs() < 1e-9);
        assert_eq!(labels(&figs[0], 1), ["cpu 0", "cpu 1"]);
        assert_eq!(figs[0].panels[1].series[1].points[3], (0.35000000000000003, 13.0));
        assert!(figs[0].panels[1].heatmap.is_none());
        // 48 cpus: a heatmap, a cell per cpu and interval.
        let p = &figs[1].panels[1];
        assert!(p.series.is_empty());
        assert_eq!(p.y_desc, "cpu; colour = busy % (model)");
        let h = p.heatmap.as_ref().unwrap();
        assert_eq!((h.rows, h.cells.len(), h.scale_desc.as_str()), (48, 48 * 30, "busy %"));
        assert_eq!(h.cells[30 * 48 - 1], (2.9000000000000004, 3.0, 47, 99.0));
        // A measured host is not called a model.
        r.cpu = vec![host_cpu("client", 2, 3, "measured")];
        r.metadata.backend = "vm".into();
        let f = &figures(&r)[0];
        assert!(f.title.ends_with("— CPU of client (measured, vm backend)") && f.note.is_empty());
        assert!(!f.panels.iter().any(|p| p.y_desc.contains("model")));
        // No intervals: no figure.
        r.cpu[0].intervals.clear();
        assert!(figures(&r).is_empty());
    }

    #[test]
    fn long_runs_average_heatmap_columns() {
        let mut r = fixture();
        r.cpu = vec![host_cpu("router", 16, 1000, "model")];
        let figs = figures(&r);
        let h = figs.last().unwrap().panels[1].heatmap.as_ref().unwrap();
        // 1000 intervals, at most 300 columns: 4 intervals per column, 250 columns.
        assert_eq!(h.cells.len(), 250 * 16);
        let (x0, x1, row, v) = h.cells[16 + 2];
        assert!((x0 - 0.4).abs() < 1e-9 && (x1 - 0.8).abs() < 1e-9 && row == 2, "{x0} {x1} {row}");
        // cpu 2 in intervals 4–7: 24, 25, 26, 27 % busy.
        assert!((v - 25.5).abs() < 1e-9, "{v}");
    }

    #[test]
    fn cpu_svg_and_png() {
        let mut r = fixture();
        r.throughput.clear();
        r.total.clear();
        r.rtt.clear();
        r.tc.periodic = Default::default();
        r.cpu = vec![host_cpu("client", 2, 20, "model"), host_cpu("router", 48, 20, "model")];
        let dir = std::env::temp_dir().join(format!("qdisc-lab-cpu-plot-test-{}", std::process::id()));
        let files = write_all(&r, &dir).unwrap();
        let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into()).collect();
        assert_eq!(names, ["cpu-client.svg", "cpu-client.png", "cpu-router.svg", "cpu-router.png"]);
        for fig in figures(&r) {
            let one = std::fs::read_to_string(dir.join(format!("{}.svg", fig.name))).unwrap();
            assert_eq!(one, svg(&fig).unwrap(), "{}", fig.name);
            assert!(one.contains(&xml(&fig.title)), "{}: no title", fig.name);
            assert!(one.contains(">\nnot a measurement\n</text>"), "{}: no note", fig.name);
            for p in &fig.panels {
                assert!(one.contains(&xml(&p.y_desc)), "{}: no {}", fig.name, p.y_desc);
            }
            assert_eq!(std::fs::read(dir.join(format!("{}.png", fig.name))).unwrap(), png(&fig).unwrap());
        }
        let heat = std::fs::read_to_string(dir.join("cpu-router.svg")).unwrap();
        // The colour scale, and cells in the colours of 0 % and 99 % busy.
        for text in [">\nbusy %\n</text>", ">\n100%\n</text>", ">\n0%\n</text>"] {
            assert!(heat.contains(text), "{text}");
        }
        for c in [heat_color(0.0), heat_color(99.0)] {
            assert!(heat.contains(&format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)), "{c:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn heat_colours() {
        assert_eq!(heat_color(0.0), HEAT[0]);
        assert_eq!(heat_color(-5.0), HEAT[0]);
        assert_eq!(heat_color(100.0), HEAT[5]);
        assert_eq!(heat_color(140.0), HEAT[5]);
        assert_eq!(heat_color(40.0), HEAT[2]);
        // Halfway between the first two stops.
        assert_eq!(heat_color(10.0), RGBColor(255, 236, 161));
    }

    #[test]
    fn file_names() {
        assert_eq!(slug("link[0]-l0a"), "link-0-l0a");
        assert_eq!(slug("client-eth0.100"), "client-eth0.100");
        // Host "a-b" with device "c" and host "a" with device "b-c".
        let mut r = fixture();
        r.tc.periodic =
            r.tc.periodic
                .iter()
                .take(2)
                .map(|mut s| {
                    s.devices.truncate(2);
                    (s.devices[0].host, s.devices[0].dev) = ("a-b".into(), "c".into());
                    (s.devices[1].host, s.devices[1].dev) = ("a".into(), "b-c".into());
                    s
                })
                .collect();
        let names: Vec<String> = figures(&r).into_iter().map(|f| f.name).skip(3).collect();
        assert_eq!(names, ["qdisc-a-b-c", "qdisc-a-b-c-2"]);
    }
}
