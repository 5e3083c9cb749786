//! Line and bar charts for experiment commands, written as PNG and SVG side by side.
//!
//! Two entry points. [`line_chart`]: a title, axis labels, optional log scales, and any number of
//! named series, each a polyline or a staircase (for distributions). Axis ranges are taken from
//! the data unless the spec fixes them. Colours come from a fixed palette in series order, so the
//! same series order always gets the same colours across charts. [`bar_chart`]: grouped bars,
//! one group per category (a traversal, say) and one bar per series in each.
//!
//! Text is drawn with a bundled DejaVu Sans (`assets/`, with its licence), registered with
//! plotters' `ab_glyph` renderer on first use: plotters' default font path needs the system's
//! fontconfig, which CI machines often lack.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, anyhow, bail};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// Pixel size of every chart.
const SIZE: (u32, u32) = (1024, 640);

/// Font family name the bundled font is registered under.
const FONT: &str = "sans-serif";

/// The bundled font.
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// The most series one chart takes (the palette has this many well-separated colours, and a
/// legend with more is unreadable).
pub const MAX_SERIES: usize = 12;

/// The most points one series may have.
pub const MAX_POINTS: usize = 100_000;

/// Colours for series, in order: distinguishable, and readable on white.
const PALETTE: [RGBColor; MAX_SERIES] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0x99, 0x99, 0x00),
];

/// Where the legend goes (pick the corner the data leave empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Legend {
    /// Top right (the default).
    #[default]
    UpperRight,
    /// Bottom right (for rising curves such as distributions). Only `thor sim` draws such.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    LowerRight,
}

/// What a chart shows besides its data.
#[derive(Debug, Clone, Default)]
pub struct ChartSpec {
    /// The caption above the plot.
    pub title: String,
    /// The x axis label (with units).
    pub x_label: String,
    /// The y axis label (with units).
    pub y_label: String,
    /// Whether the x axis is logarithmic (all x values must then be positive).
    pub log_x: bool,
    /// Whether the y axis is logarithmic (all y values must then be positive).
    pub log_y: bool,
    /// Fixed x range; `None` fits the data.
    pub x_range: Option<(f64, f64)>,
    /// Fixed y range; `None` fits the data (from 0 on a linear axis).
    pub y_range: Option<(f64, f64)>,
    /// Where the legend goes.
    pub legend: Legend,
}

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// The points, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Draw as a staircase (each value holds until the next x), as for a cumulative
    /// distribution, instead of straight segments.
    pub step: bool,
}

impl Series {
    /// A polyline.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), points, step: false }
    }

    /// A staircase. Only `thor sim` draws one.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub fn steps(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), points, step: true }
    }

    /// The points to draw: for a staircase, a horizontal then a vertical segment per step.
    fn path(&self) -> Vec<(f64, f64)> {
        if !self.step {
            return self.points.clone();
        }
        let mut out = Vec::with_capacity(self.points.len() * 2);
        for (i, &(x, y)) in self.points.iter().enumerate() {
            if i > 0 {
                out.push((x, self.points[i - 1].1));
            }
            out.push((x, y));
        }
        out
    }
}

/// Draws `series` as `<out_stem>.png` and `<out_stem>.svg` and returns the two paths. The
/// directory must exist.
pub fn line_chart(
    out_stem: &Path,
    spec: &ChartSpec,
    series: &[Series],
) -> anyhow::Result<[PathBuf; 2]> {
    register_font()?;
    if series.is_empty() || series.len() > MAX_SERIES {
        bail!("a chart takes 1 to {MAX_SERIES} series, not {}", series.len());
    }
    if let Some(s) = series.iter().find(|s| s.points.len() > MAX_POINTS) {
        bail!("series {:?} has more than {MAX_POINTS} points", s.name);
    }
    let x = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        spec.x_range,
        spec.log_x,
        false,
    )
    .context("x axis")?;
    let y = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        spec.y_range,
        spec.log_y,
        true,
    )
    .context("y axis")?;
    struct Lines<'a>(&'a ChartSpec, &'a [Series], (f64, f64), (f64, f64));
    impl Drawing for Lines<'_> {
        fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
            draw_scaled(root, self.0, self.1, self.2, self.3)
        }
    }
    write_png_and_svg(out_stem, &Lines(spec, series, x, y))
}

/// A picture drawn the same way on any backend, so that one function writes it as PNG and SVG.
trait Drawing {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()>;
}

/// Draws `d` as `<out_stem>.png` and `<out_stem>.svg` and returns the two paths.
fn write_png_and_svg(out_stem: &Path, d: &impl Drawing) -> anyhow::Result<[PathBuf; 2]> {
    let png = out_stem.with_extension("png");
    let svg = out_stem.with_extension("svg");
    d.draw(BitMapBackend::new(&png, SIZE).into_drawing_area())
        .with_context(|| format!("drawing {}", png.display()))?;
    d.draw(SVGBackend::new(&svg, SIZE).into_drawing_area())
        .with_context(|| format!("drawing {}", svg.display()))?;
    Ok([png, svg])
}

/// Draws grouped bars as `<out_stem>.png` and `<out_stem>.svg` and returns the two paths: one
/// group per name in `groups` along the x axis, in each group one bar per series (the series'
/// value at the group's index), coloured and named in the legend as [`line_chart`]'s series
/// are. `spec`'s x label, log and range settings other than `y_range` are not used. The
/// directory must exist.
pub fn bar_chart(
    out_stem: &Path,
    spec: &ChartSpec,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> anyhow::Result<[PathBuf; 2]> {
    bars(out_stem, spec, groups, series, false)
}

/// [`bar_chart`] with the series stacked: one bar per group, made of one segment per series
/// (the first at the bottom), as a breakdown of a total (the HAC paper's Figures 9 to 11).
/// Values must not be negative.
pub fn stacked_bar_chart(
    out_stem: &Path,
    spec: &ChartSpec,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> anyhow::Result<[PathBuf; 2]> {
    if series.iter().any(|(_, v)| v.iter().any(|&x| x < 0.0)) {
        bail!("a stacked bar takes no negative values");
    }
    bars(out_stem, spec, groups, series, true)
}

fn bars(
    out_stem: &Path,
    spec: &ChartSpec,
    groups: &[String],
    series: &[(String, Vec<f64>)],
    stacked: bool,
) -> anyhow::Result<[PathBuf; 2]> {
    register_font()?;
    if series.is_empty() || series.len() > MAX_SERIES {
        bail!("a chart takes 1 to {MAX_SERIES} series, not {}", series.len());
    }
    if groups.is_empty() || groups.len() > MAX_POINTS {
        bail!("a bar chart takes 1 to {MAX_POINTS} groups, not {}", groups.len());
    }
    if let Some((name, _)) = series.iter().find(|(_, v)| v.len() != groups.len()) {
        bail!("series {name:?} has not one value per group");
    }
    let totals: Vec<f64> =
        (0..groups.len()).map(|i| series.iter().map(|(_, v)| v[i]).sum()).collect();
    let values: Box<dyn Iterator<Item = f64>> = if stacked {
        Box::new(totals.iter().copied())
    } else {
        Box::new(series.iter().flat_map(|(_, v)| v.iter().copied()))
    };
    let y = range(values, spec.y_range, false, true).context("y axis")?;
    struct Bars<'a>(&'a ChartSpec, &'a [String], &'a [(String, Vec<f64>)], (f64, f64), bool);
    impl Drawing for Bars<'_> {
        fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
            draw_bars(root, self.0, self.1, self.2, self.3, self.4)
        }
    }
    write_png_and_svg(out_stem, &Bars(spec, groups, series, y, stacked))
}

/// Draws [`bar_chart`]'s bars on `root`. Groups sit at x = 0, 1, ...; their names are drawn
/// under the axis by hand, since a numeric axis labels round numbers, not groups.
fn draw_bars<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    groups: &[String],
    series: &[(String, Vec<f64>)],
    (y0, y1): (f64, f64),
    stacked: bool,
) -> anyhow::Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(-0.5..n - 0.5, y0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(spec.y_label.as_str())
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .y_label_formatter(&|v| compact(*v))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(err)?;
    // Each group is 0.8 wide, shared equally by its bars (or taken by its one stacked bar).
    let width = if stacked { 0.8 } else { 0.8 / series.len() as f64 };
    // Where each group's next stacked segment starts.
    let mut base = vec![y0.max(0.0); groups.len()];
    for (k, (name, values)) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let style = ShapeStyle::from(&color).filled();
        let left = |i: usize| i as f64 - 0.4 + if stacked { 0.0 } else { k as f64 * width };
        let rects: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (lo, hi) = if stacked { (base[i], base[i] + v) } else { (y0.max(0.0), v) };
                if stacked {
                    base[i] = hi;
                }
                Rectangle::new([(left(i), lo), (left(i) + width * 0.9, hi)], style)
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(lx, ly)| Rectangle::new([(lx, ly - 6), (lx + 16, ly + 6)], style));
    }
    for (i, g) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, y0));
        let text = Text::new(
            g.clone(),
            (px, py + 10),
            TextStyle::from((FONT, 17).into_font()).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
        );
        root.draw(&text).map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Registers the bundled font once per process.
fn register_font() -> anyhow::Result<()> {
    static LOADED: OnceLock<bool> = OnceLock::new();
    let loaded = *LOADED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    if !loaded {
        bail!("the bundled font does not load");
    }
    Ok(())
}

/// The axis range: `fixed`, or the data's extent (padded a little; from 0 for a linear y axis
/// whose data are non-negative).
fn range(
    values: impl Iterator<Item = f64>,
    fixed: Option<(f64, f64)>,
    log: bool,
    from_zero: bool,
) -> anyhow::Result<(f64, f64)> {
    let (lo, hi) = match fixed {
        Some(r) => r,
        None => {
            let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
            for v in values {
                if !v.is_finite() {
                    bail!("non-finite value {v}");
                }
                if log && v <= 0.0 {
                    continue;
                }
                lo = lo.min(v);
                hi = hi.max(v);
            }
            if lo > hi {
                bail!("no plottable values");
            }
            if log {
                (lo / 1.2, hi * 1.2)
            } else {
                let lo = if from_zero && lo >= 0.0 { 0.0 } else { lo };
                let pad = if hi > lo { (hi - lo) * 0.05 } else { hi.abs().max(1.0) * 0.05 };
                (if lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
            }
        }
    };
    if !(lo.is_finite() && hi.is_finite() && lo < hi) || (log && lo <= 0.0) {
        bail!("invalid range {lo}..{hi}{}", if log { " for a log axis" } else { "" });
    }
    Ok((lo, hi))
}

/// Picks the coordinate types for the axes' scales and draws.
fn draw_scaled<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    series: &[Series],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> anyhow::Result<()> {
    match (spec.log_x, spec.log_y) {
        (false, false) => draw(root, spec, series, x0..x1, y0..y1),
        (true, false) => draw(root, spec, series, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw(root, spec, series, x0..x1, (y0..y1).log_scale()),
        (true, true) => draw(root, spec, series, (x0..x1).log_scale(), (y0..y1).log_scale()),
    }
}

/// Draws the chart on `root` with the given coordinate specs.
fn draw<DB, X, Y>(
    root: DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    series: &[Series],
    x: X,
    y: Y,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(spec.x_label.as_str())
        .y_desc(spec.y_label.as_str())
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .x_label_formatter(&|v| compact(*v))
        .y_label_formatter(&|v| compact(*v))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let style = ShapeStyle::from(&color).stroke_width(2);
        let points: Vec<(f64, f64)> = s
            .path()
            .into_iter()
            .filter(|&(px, py)| (!spec.log_x || px > 0.0) && (!spec.log_y || py > 0.0))
            .collect();
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(err)?
            .label(s.name.as_str())
            .legend(move |(lx, ly)| PathElement::new(vec![(lx, ly), (lx + 24, ly)], style));
    }
    chart
        .configure_series_labels()
        .position(match spec.legend {
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        })
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A short axis label: `1.5k`, `20M`, `1G`, `0.25`.
fn compact(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = match a {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = format!("{scaled:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{}{suffix}", if text == "-0" { "0" } else { text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_labels() {
        assert_eq!(compact(1e9), "1G");
        assert_eq!(compact(50e6), "50M");
        assert_eq!(compact(16_384.0), "16.384k");
        assert_eq!(compact(0.25), "0.25");
        assert_eq!(compact(0.0), "0");
        assert_eq!(compact(10.0), "10");
    }

    #[test]
    fn writes_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ChartSpec {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            ..ChartSpec::default()
        };
        let series = [
            Series::line("alpha", vec![(1.0, 1.0), (10.0, 2.0), (100.0, 1.5)]),
            Series::steps("beta", vec![(1.0, 0.5), (50.0, 1.0)]),
        ];
        let [png, svg] = line_chart(&dir.path().join("chart"), &spec, &series).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert!(svg.contains("<svg") && svg.contains("alpha") && svg.contains("beta"), "legend");
        assert!(line_chart(&dir.path().join("bad"), &spec, &[]).is_err());
        let bad = [Series::line("neg", vec![(-1.0, 1.0)])];
        assert!(line_chart(&dir.path().join("bad"), &spec, &bad).is_err(), "log axis of x <= 0");
    }

    #[test]
    fn writes_bars() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ChartSpec { title: "t".into(), y_label: "us".into(), ..ChartSpec::default() };
        let groups = vec!["t6".to_string(), "t1".to_string()];
        let series =
            [("fetch".to_string(), vec![40.0, 45.0]), ("floor".to_string(), vec![20.0, 21.0])];
        let [png, svg] = bar_chart(&dir.path().join("bars"), &spec, &groups, &series).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert!(svg.contains("fetch") && svg.contains("floor") && svg.contains("t6"), "labels");
        let ragged = [("x".to_string(), vec![1.0])];
        assert!(bar_chart(&dir.path().join("bad"), &spec, &groups, &ragged).is_err());
        assert!(bar_chart(&dir.path().join("bad"), &spec, &[], &[]).is_err());
        let [png, svg] =
            stacked_bar_chart(&dir.path().join("stacked"), &spec, &groups, &series).unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        assert!(std::fs::read_to_string(&svg).unwrap().contains("floor"), "legend");
        let negative = [("x".to_string(), vec![1.0, -1.0])];
        assert!(stacked_bar_chart(&dir.path().join("bad"), &spec, &groups, &negative).is_err());
    }
}
