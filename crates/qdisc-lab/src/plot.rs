//! Plots of a [`RunResult`], PNG and SVG (`qdisc-lab run … --plot DIR`,
//! `qdisc-lab plot RESULT.json --out DIR`):
//!
//! * `throughput.{png,svg}` — every flow's throughput per reporting interval, and the
//!   total of all tcp/udp traffic;
//! * `rtt.{png,svg}` — every ping reply's RTT at its arrival time;
//! * `rtt-cdf.{png,svg}` — the distribution of those RTTs;
//! * `qdisc-HOST-DEV.{png,svg}` — for every device, each qdisc's backlog (bytes and
//!   packets) and its drops (cumulative, as `tc -s` counts them) from the periodic
//!   `tc -s -j qdisc show` snapshots.
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
}

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
    out
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
        }],
        size: (1000, 600),
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
            panels: vec![Panel { y_desc: "RTT (ms)".into(), series: over_time }],
            size: (1000, 600),
        },
        Figure {
            name: "rtt-cdf".into(),
            title: title(r, "RTT distribution"),
            x_desc: "RTT (ms)".into(),
            x_range: (0.0, if max_rtt > 0.0 { max_rtt * 1.05 } else { 1.0 }),
            panels: vec![Panel { y_desc: "fraction of replies ≤ RTT".into(), series: cdf }],
            size: (1000, 600),
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
    for sample in &r.tc.periodic {
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
            let base = format!("qdisc-{}", slug(&format!("{host}-{dev}")));
            let mut name = base.clone();
            for k in 2.. {
                if !names.contains(&name) {
                    break;
                }
                name = format!("{base}-{k}");
            }
            names.push(name.clone());
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
            }
        })
        .collect()
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            panic!("the bundled font does not load");
        }
    });
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, fig: &Figure) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{}: {e}", fig.name);
    root.fill(&WHITE).map_err(e)?;
    let body = root.titled(&fig.title, ("sans-serif", 22)).map_err(e)?;
    // The legends go right of the charts, one width for all panels so x axes line up.
    let font = ("sans-serif", 14).into_font();
    let mut legend_w = 0;
    for s in fig.panels.iter().flat_map(|p| &p.series) {
        legend_w = legend_w.max(body.estimate_text_size(&s.label, &font.clone().into()).map_err(e)?.0);
    }
    let legend_w = (legend_w + 50).min(fig.size.0 * 2 / 5);
    let areas = body.split_evenly((fig.panels.len().max(1), 1));
    for (p, area) in fig.panels.iter().zip(&areas) {
        let (w, _) = area.dim_in_pixel();
        let (area, legend) = area.split_horizontally(w.saturating_sub(legend_w));
        let ymax = p.series.iter().flat_map(|s| &s.points).map(|p| p.1).fold(0.0, f64::max);
        let ymax = if ymax > 0.0 { ymax * 1.08 } else { 1.0 };
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(fig.x_range.0..fig.x_range.1, 0.0..ymax)
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
        r1.tc.periodic.clear();
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

    #[test]
    fn nothing_to_plot() {
        let mut r = fixture();
        r.throughput.clear();
        r.total.clear();
        r.rtt.clear();
        r.tc.periodic.clear();
        assert!(figures(&r).is_empty());
    }

    #[test]
    fn file_names() {
        assert_eq!(slug("link[0]-l0a"), "link-0-l0a");
        assert_eq!(slug("client-eth0.100"), "client-eth0.100");
        // Host "a-b" with device "c" and host "a" with device "b-c".
        let mut r = fixture();
        r.tc.periodic.truncate(2);
        for s in &mut r.tc.periodic {
            s.devices.truncate(2);
            (s.devices[0].host, s.devices[0].dev) = ("a-b".into(), "c".into());
            (s.devices[1].host, s.devices[1].dev) = ("a".into(), "b-c".into());
        }
        let names: Vec<String> = figures(&r).into_iter().map(|f| f.name).skip(3).collect();
        assert_eq!(names, ["qdisc-a-b-c", "qdisc-a-b-c-2"]);
    }
}
