//! Line charts written as PNG: a left axis (linear or log scale) and an optional right
//! axis (e.g. accuracy in percent), ticks at round values (1, 2, 5 times a power of
//! ten), a legend and a title, with text in DejaVu Sans rasterized by ab_glyph
//! (anti-aliased; the font is embedded, no system font needed).

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use rlx_ir::{Error, Result};
use std::path::Path;

/// One curve: `(x, y)` points in order.
pub struct Series<'a> {
    pub label: &'a str,
    pub points: &'a [(f64, f64)],
    pub color: [u8; 3],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Base 10; points at or below zero are left out.
    Log,
    /// Linear, values shown times 100 with a `%`.
    Percent,
}

/// A vertical axis and the curves drawn against it.
pub struct Axis<'a> {
    pub label: &'a str,
    pub scale: Scale,
    pub series: &'a [Series<'a>],
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub left: Axis<'a>,
    pub right: Option<Axis<'a>>,
}

pub const WIDTH: usize = 800;
pub const HEIGHT: usize = 480;
const TEXT_PX: f32 = 15.0;
const TITLE_PX: f32 = 18.0;
const BLACK: [u8; 3] = [20, 20, 20];
const GRID: [u8; 3] = [228, 228, 228];

fn font() -> &'static FontRef<'static> {
    static FONT: std::sync::OnceLock<FontRef<'static>> = std::sync::OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(dejavu::sans::regular()).expect("the embedded DejaVu Sans parses"))
}

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    /// Blends `c` over the pixel at (x, y) with opacity `a` (0..=1).
    fn blend(&mut self, x: i64, y: i64, c: [u8; 3], a: f32) {
        if (0..WIDTH as i64).contains(&x) && (0..HEIGHT as i64).contains(&y) {
            let at = (y as usize * WIDTH + x as usize) * 3;
            for (p, &v) in self.px[at..at + 3].iter_mut().zip(&c) {
                *p = (*p as f32 * (1.0 - a) + v as f32 * a).round() as u8;
            }
        }
    }

    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        self.blend(x, y, c, 1.0);
    }

    /// A line 2 pixels wide (Bresenham).
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: [u8; 3]) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.set(x, y, c);
            self.set(x, y + 1, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// `s` with its left end at `x` and its vertical middle at `y`.
    fn text(&mut self, x: i64, y: i64, s: &str, px: f32, c: [u8; 3]) {
        let font = font().as_scaled(PxScale::from(px));
        let baseline = y as f32 + (font.ascent() + font.descent()) / 2.0;
        let mut pen = x as f32;
        let mut last = None;
        for ch in s.chars() {
            let id = font.glyph_id(ch);
            if let Some(prev) = last {
                pen += font.kern(prev, id);
            }
            let glyph = id.with_scale_and_position(px, point(pen, baseline));
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                outline.draw(|gx, gy, a| self.blend(b.min.x as i64 + gx as i64, b.min.y as i64 + gy as i64, c, a));
            }
            pen += font.h_advance(id);
            last = Some(id);
        }
    }
}

fn text_width(s: &str, px: f32) -> i64 {
    let font = font().as_scaled(PxScale::from(px));
    s.chars().map(|c| font.h_advance(font.glyph_id(c))).sum::<f32>().ceil() as i64
}

/// An axis's extent and ticks, in the scale's own units (log10 of the value for Log).
struct Ticks {
    lo: f64,
    hi: f64,
    at: Vec<(f64, String)>,
}

/// The 1-2-5 step nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw * 0.999).unwrap_or(10.0 * p)
}

/// `v` with the decimals a tick spacing of `step` needs, and no more.
fn tick_label(v: f64, step: f64, scale: Scale) -> String {
    let (v, step) = if scale == Scale::Percent { (v * 100.0, step * 100.0) } else { (v, step) };
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let text = format!("{v:.decimals$}");
    let text = if text.starts_with('-') && text.trim_start_matches(['-', '0', '.']).is_empty() {
        text[1..].to_string()
    } else {
        text
    };
    if scale == Scale::Percent { format!("{text}%") } else { text }
}

/// Round ticks covering `[lo, hi]` (data values), about 5 of them.
fn ticks(lo: f64, hi: f64, scale: Scale) -> Ticks {
    if scale == Scale::Log {
        let (a, b) = (lo.log10(), hi.log10());
        // Mantissas to mark: each decade's 1 over many decades, 1-2-5 over few.
        let marks: &[f64] = if b - a > 3.0 {
            &[1.0]
        } else if b - a > 1.2 {
            &[1.0, 3.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let values: Vec<f64> = ((a.floor() as i32 - 1)..=(b.ceil() as i32 + 1))
            .flat_map(|e| marks.iter().map(move |m| m * 10f64.powi(e)))
            .collect();
        let below = values.iter().copied().filter(|&v| v <= lo * 1.000_001).fold(f64::MIN, f64::max);
        let above = values.iter().copied().filter(|&v| v >= hi * 0.999_999).fold(f64::MAX, f64::min);
        let at = values
            .iter()
            .filter(|&&v| v >= below && v <= above)
            .map(|&v| (v.log10(), tick_label(v, 10f64.powf(v.log10().floor()), Scale::Log)))
            .collect();
        return Ticks { lo: below.log10(), hi: above.log10(), at };
    }
    let step = nice_step((hi - lo).max(f64::MIN_POSITIVE) / 5.0);
    let (first, last) = ((lo / step).floor() as i64, (hi / step).ceil() as i64);
    let at = (first..=last).map(|k| (k as f64 * step, tick_label(k as f64 * step, step, scale))).collect();
    Ticks { lo: first as f64 * step, hi: last as f64 * step, at }
}

/// The finite points of `series` (positive ones on a log axis).
fn finite<'a>(series: &'a [Series<'a>], scale: Scale) -> impl Iterator<Item = (f64, f64)> + 'a {
    series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(move |&(x, y)| x.is_finite() && y.is_finite() && (scale != Scale::Log || y > 0.0))
}

fn y_ticks(axis: &Axis<'_>) -> Option<Ticks> {
    let (lo, hi) = finite(axis.series, axis.scale).fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
    if lo > hi {
        return None;
    }
    let (lo, hi) = if lo == hi {
        if axis.scale == Scale::Log { (lo / 2.0, hi * 2.0) } else { (lo - 0.5, hi + 0.5) }
    } else {
        (lo, hi)
    };
    let mut t = ticks(lo, hi, axis.scale);
    if axis.scale == Scale::Percent {
        t.lo = t.lo.max(0.0);
        t.hi = t.hi.min(1.0);
        t.at.retain(|&(v, _)| (0.0..=1.0).contains(&v));
    }
    Some(t)
}

/// Writes `chart` to `path` as an RGB PNG of [`WIDTH`] x [`HEIGHT`].
pub fn chart(path: &Path, chart: &Chart<'_>) -> Result<()> {
    let no_points = || Error::input(format!("chart '{}' has no finite points", chart.title));
    let left = y_ticks(&chart.left).ok_or_else(no_points)?;
    let right = chart.right.as_ref().and_then(|a| y_ticks(a).map(|t| (a, t)));
    let all_x = finite(chart.left.series, chart.left.scale)
        .chain(chart.right.iter().flat_map(|a| finite(a.series, a.scale)))
        .map(|p| p.0);
    let (x0, x1) = all_x.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let xt = ticks(x0, if x1 > x0 { x1 } else { x0 + 1.0 }, Scale::Linear);

    let mut c = Canvas { px: vec![255; WIDTH * HEIGHT * 3] };
    let label_w = |t: &Ticks| t.at.iter().map(|(_, s)| text_width(s, TEXT_PX)).max().unwrap_or(0);
    let ml = 22 + label_w(&left);
    let mr = right.as_ref().map_or(28, |(_, t)| 22 + label_w(t));
    let (mt, mb) = (58i64, 52i64);
    let (pw, ph) = (WIDTH as i64 - ml - mr, HEIGHT as i64 - mt - mb);
    let px_x = |x: f64| ml + ((x - xt.lo) / (xt.hi - xt.lo) * pw as f64).round() as i64;
    let px_y = |t: &Ticks, scale: Scale, y: f64| {
        let v = if scale == Scale::Log { y.log10() } else { y };
        mt + ph - ((v - t.lo) / (t.hi - t.lo) * ph as f64).round() as i64
    };
    // Grid and tick labels: horizontal lines from the left axis, vertical from x.
    for (v, s) in &left.at {
        let y = mt + ph - ((v - left.lo) / (left.hi - left.lo) * ph as f64).round() as i64;
        (ml..ml + pw).for_each(|x| c.set(x, y, GRID));
        c.text(ml - 8 - text_width(s, TEXT_PX), y, s, TEXT_PX, BLACK);
    }
    for (v, s) in &xt.at {
        let x = px_x(*v);
        (mt..mt + ph).for_each(|y| c.set(x, y, GRID));
        c.text(x - text_width(s, TEXT_PX) / 2, mt + ph + 14, s, TEXT_PX, BLACK);
    }
    if let Some((axis, t)) = &right {
        for (v, s) in &t.at {
            let y = mt + ph - ((v - t.lo) / (t.hi - t.lo) * ph as f64).round() as i64;
            c.line((ml + pw - 4, y), (ml + pw, y), BLACK);
            c.text(ml + pw + 8, y, s, TEXT_PX, BLACK);
        }
        c.text(WIDTH as i64 - mr + 8 - text_width(axis.label, TEXT_PX) / 2, mt - 16, axis.label, TEXT_PX, BLACK);
    }
    c.line((ml, mt), (ml, mt + ph), BLACK);
    c.line((ml, mt + ph), (ml + pw, mt + ph), BLACK);
    if right.is_some() {
        c.line((ml + pw, mt), (ml + pw, mt + ph), BLACK);
    }
    let axes = std::iter::once((&chart.left, &left)).chain(right.iter().map(|(a, t)| (*a, t)));
    for (axis, t) in axes {
        for s in axis.series {
            let mut prev: Option<(i64, i64)> = None;
            for &(x, y) in s
                .points
                .iter()
                .filter(|&&(x, y)| x.is_finite() && y.is_finite() && (axis.scale != Scale::Log || y > 0.0))
            {
                let p = (px_x(x), px_y(t, axis.scale, y));
                // A lone point (one epoch) shows as a dot.
                if let Some(q) = prev {
                    c.line(q, p, s.color)
                } else {
                    c.line(p, (p.0 + 1, p.1), s.color)
                }
                prev = Some(p);
            }
        }
    }
    c.text((WIDTH as i64 - text_width(chart.title, TITLE_PX)) / 2, 18, chart.title, TITLE_PX, BLACK);
    c.text(ml + pw / 2 - text_width(chart.x_label, TEXT_PX) / 2, HEIGHT as i64 - 14, chart.x_label, TEXT_PX, BLACK);
    let left_label = if chart.left.scale == Scale::Log {
        format!("{} (log scale)", chart.left.label)
    } else {
        chart.left.label.to_string()
    };
    c.text(10, mt - 16, &left_label, TEXT_PX, BLACK);
    let legend: Vec<&Series<'_>> =
        chart.left.series.iter().chain(chart.right.iter().flat_map(|a| a.series.iter())).collect();
    // The legend goes in the plot corner its box hides the fewest drawn pixels in.
    let (bw, bh) =
        (legend.iter().map(|s| text_width(s.label, TEXT_PX)).max().unwrap_or(0) + 52, 20 * legend.len() as i64 + 8);
    let corners = [
        (ml + pw - bw - 6, mt + 6),
        (ml + 6, mt + 6),
        (ml + pw - bw - 6, mt + ph - bh - 6),
        (ml + 6, mt + ph - bh - 6),
    ];
    let inked = |&(x0, y0): &(i64, i64)| {
        let row =
            |y: i64| (x0..x0 + bw).filter(|&x| c.px[(y as usize * WIDTH + x as usize) * 3..][..3] != [255; 3]).count();
        (y0..y0 + bh).map(row).sum::<usize>()
    };
    let &(bx, by) = corners.iter().min_by_key(|k| inked(k)).expect("four corners");
    for y in by..by + bh {
        for x in bx..bx + bw {
            let edge = y == by || y == by + bh - 1 || x == bx || x == bx + bw - 1;
            c.set(x, y, if edge { [200; 3] } else { [255; 3] });
        }
    }
    for (i, s) in legend.iter().enumerate() {
        let y = by + 14 + 20 * i as i64;
        c.line((bx + 8, y), (bx + 30, y), s.color);
        c.text(bx + 38, y, s.label, TEXT_PX, BLACK);
    }
    let file = std::fs::File::create(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), WIDTH as u32, HEIGHT as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let fail = |e: png::EncodingError| Error::io(format!("{}: {e}", path.display()));
    enc.write_header().map_err(fail)?.write_image_data(&c.px).map_err(fail)
}

/// A chart of `series` against one linear axis.
pub fn line_chart(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    let left = Axis { label: y_label, scale: Scale::Linear, series };
    chart(path, &Chart { title, x_label, left, right: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(lo: f64, hi: f64, scale: Scale) -> Vec<String> {
        ticks(lo, hi, scale).at.into_iter().map(|t| t.1).collect()
    }

    #[test]
    fn ticks_fall_on_round_values() {
        assert_eq!(labels(0.0, 178.0, Scale::Linear), ["0", "50", "100", "150", "200"]);
        assert_eq!(labels(1.0, 9.0, Scale::Linear), ["0", "2", "4", "6", "8", "10"]);
        assert_eq!(labels(0.93, 0.99, Scale::Percent), ["92%", "94%", "96%", "98%", "100%"]);
        assert_eq!(labels(0.15, 1.5, Scale::Log), ["0.1", "0.2", "0.5", "1", "2"]);
        assert_eq!(labels(0.15, 2.5, Scale::Log), ["0.1", "0.3", "1", "3"]);
        assert_eq!(labels(0.002, 3.0, Scale::Log), ["0.001", "0.01", "0.1", "1", "10"]);
        assert_eq!(labels(1e-5, 10.0, Scale::Log), ["0.00001", "0.0001", "0.001", "0.01", "0.1", "1", "10"]);
        assert_eq!(labels(-0.3, 0.2, Scale::Linear), ["-0.3", "-0.2", "-0.1", "0.0", "0.1", "0.2"]);
    }
}
