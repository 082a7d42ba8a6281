//! A small line chart written as a PNG: axes with ticks, one line per series, a legend
//! and a title, in a built-in 3x5 pixel font (no font files, no plotting dependency).

use rlx_ir::{Error, Result};
use std::path::Path;

/// One curve: `(x, y)` points in order.
pub struct Series<'a> {
    pub label: &'a str,
    pub points: &'a [(f64, f64)],
    pub color: [u8; 3],
}

const W: usize = 720;
const H: usize = 440;
/// Plot area margins: left, right, top, bottom.
const MARGIN: [usize; 4] = [70, 20, 40, 50];
const SCALE: usize = 2;

/// 3x5 glyphs, rows top to bottom, 3 bits per row (MSB left).
fn glyph(c: char) -> u16 {
    let rows: [u8; 5] = match c.to_ascii_lowercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '.' => [0, 0, 0, 0, 2],
        ',' => [0, 0, 0, 2, 4],
        '-' => [0, 0, 7, 0, 0],
        '_' => [0, 0, 0, 0, 7],
        '=' => [0, 7, 0, 7, 0],
        '%' => [5, 1, 2, 4, 5],
        ':' => [0, 2, 0, 2, 0],
        '(' => [2, 4, 4, 4, 2],
        ')' => [2, 1, 1, 1, 2],
        '/' => [1, 1, 2, 4, 4],
        'a' => [2, 5, 7, 5, 5],
        'b' => [6, 5, 6, 5, 6],
        'c' => [3, 4, 4, 4, 3],
        'd' => [6, 5, 5, 5, 6],
        'e' => [7, 4, 6, 4, 7],
        'f' => [7, 4, 6, 4, 4],
        'g' => [3, 4, 5, 5, 3],
        'h' => [5, 5, 7, 5, 5],
        'i' => [7, 2, 2, 2, 7],
        'j' => [1, 1, 1, 5, 2],
        'k' => [5, 5, 6, 5, 5],
        'l' => [4, 4, 4, 4, 7],
        'm' => [5, 7, 7, 5, 5],
        'n' => [6, 5, 5, 5, 5],
        'o' => [2, 5, 5, 5, 2],
        'p' => [6, 5, 6, 4, 4],
        'q' => [2, 5, 5, 6, 3],
        'r' => [6, 5, 6, 5, 5],
        's' => [3, 4, 2, 1, 6],
        't' => [7, 2, 2, 2, 2],
        'u' => [5, 5, 5, 5, 7],
        'v' => [5, 5, 5, 5, 2],
        'w' => [5, 5, 7, 7, 5],
        'x' => [5, 5, 2, 5, 5],
        'y' => [5, 5, 2, 2, 2],
        'z' => [7, 1, 2, 4, 7],
        _ => [0; 5],
    };
    rows.iter().fold(0, |acc, &r| (acc << 3) | r as u16)
}

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if (0..W as i64).contains(&x) && (0..H as i64).contains(&y) {
            let at = (y as usize * W + x as usize) * 3;
            self.px[at..at + 3].copy_from_slice(&c);
        }
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

    fn text(&mut self, x: i64, y: i64, s: &str, c: [u8; 3]) {
        for (i, ch) in s.chars().enumerate() {
            let bits = glyph(ch);
            for row in 0..5 {
                for col in 0..3 {
                    if bits >> (14 - (row * 3 + col)) & 1 == 1 {
                        for dy in 0..SCALE {
                            for dx in 0..SCALE {
                                let px = x + (i * 4 * SCALE + col * SCALE + dx) as i64;
                                self.set(px, y + (row * SCALE + dy) as i64, c);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn text_width(s: &str) -> i64 {
    (s.chars().count() * 4 * SCALE) as i64
}

/// `v` with about 3 significant digits.
fn label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 4) as usize;
    format!("{v:.digits$}")
}

/// Writes the chart to `path` as an RGB PNG.
pub fn line_chart(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    let pts = || series.iter().flat_map(|s| s.points.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts() {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        return Err(Error::input(format!("chart '{title}' has no finite points")));
    }
    if x1 == x0 {
        x1 = x0 + 1.0;
    }
    if y1 == y0 {
        y1 = y0 + 1.0;
    }
    // 5% headroom, but not below zero for data that never goes there (a loss).
    let pad = (y1 - y0) * 0.05;
    let (y0, y1) = (if y0 >= 0.0 { (y0 - pad).max(0.0) } else { y0 - pad }, y1 + pad);
    let mut c = Canvas { px: vec![255; W * H * 3] };
    let [ml, mr, mt, mb] = MARGIN.map(|m| m as i64);
    let (pw, ph) = (W as i64 - ml - mr, H as i64 - mt - mb);
    let to_px = |x: f64, y: f64| {
        (
            ml + ((x - x0) / (x1 - x0) * pw as f64).round() as i64,
            mt + ph - ((y - y0) / (y1 - y0) * ph as f64).round() as i64,
        )
    };
    let (black, grid) = ([0, 0, 0], [225, 225, 225]);
    for k in 0..=5 {
        let fy = y0 + (y1 - y0) * k as f64 / 5.0;
        let (_, py) = to_px(x0, fy);
        for x in ml..ml + pw {
            c.set(x, py, grid);
        }
        let s = label(fy);
        c.text(ml - 8 - text_width(&s), py - 5, &s, black);
        let fx = x0 + (x1 - x0) * k as f64 / 5.0;
        let (px, _) = to_px(fx, y0);
        for y in mt..mt + ph {
            c.set(px, y, grid);
        }
        let s = label(fx);
        c.text(px - text_width(&s) / 2, mt + ph + 8, &s, black);
    }
    c.line((ml, mt), (ml, mt + ph), black);
    c.line((ml, mt + ph), (ml + pw, mt + ph), black);
    for s in series {
        let mut prev: Option<(i64, i64)> = None;
        for &(x, y) in s.points.iter().filter(|(x, y)| x.is_finite() && y.is_finite()) {
            let p = to_px(x, y);
            if let Some(q) = prev {
                c.line(q, p, s.color);
            }
            prev = Some(p);
        }
    }
    c.text((W as i64 - text_width(title)) / 2, 12, title, black);
    c.text(ml + pw / 2 - text_width(x_label) / 2, H as i64 - 20, x_label, black);
    c.text(8, mt - 20, y_label, black);
    for (i, s) in series.iter().enumerate() {
        let y = mt + 10 + 16 * i as i64;
        let x = ml + pw - 20 - text_width(s.label) - 30;
        c.line((x, y + 4), (x + 20, y + 4), s.color);
        c.text(x + 26, y, s.label, black);
    }
    let file = std::fs::File::create(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), W as u32, H as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let fail = |e: png::EncodingError| Error::io(format!("{}: {e}", path.display()));
    enc.write_header().map_err(fail)?.write_image_data(&c.px).map_err(fail)
}
