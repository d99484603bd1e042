//! `--svg FILE`: latency percentile curves, one panel per table, every row a line, so the
//! strategies, the floor and the peers can be read side by side. The x axis counts nines
//! (p50 is the leftmost point; 90%, 99%, 99.9%, 99.99%, 99.999%, then max); the y axis is
//! logarithmic nanoseconds.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::row::{Kind, Row};

fn x_of(p: f64) -> f64 {
    if p >= 100.0 {
        MAX_X
    } else {
        -(1.0 - p / 100.0).log10()
    }
}

const MAX_X: f64 = 6.0;

fn x_label(x: &f64) -> String {
    if *x >= MAX_X - 0.01 {
        return "max".into();
    }
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    match x.round() as i32 {
        0 => String::new(),
        1 => "90%".into(),
        2 => "99%".into(),
        n => format!("{:.*}%", (n - 2) as usize, p),
    }
}

/// Draw every latency-like table of `rows` into `path`.
pub fn draw(rows: &[Row], path: &Path) -> Result<()> {
    let mut panels: Vec<(String, Vec<&Row>)> = Vec::new();
    for r in rows {
        if r.kind == Kind::Throughput || r.curve.is_empty() {
            continue;
        }
        let title = format!("{}: {}", r.suite, r.group);
        match panels.iter_mut().find(|(t, _)| *t == title) {
            Some((_, v)) => v.push(r),
            None => panels.push((title, vec![r])),
        }
    }
    if panels.is_empty() {
        return Err(anyhow!("no latency rows to draw"));
    }
    let cols = 2usize;
    let nrows = panels.len().div_ceil(cols);
    let (w, h) = (820u32, 520u32);
    let root = SVGBackend::new(path, (w * cols as u32, h * nrows as u32)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("svg: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((nrows, cols));
    for (area, (title, rs)) in areas.iter().zip(&panels) {
        let lo = rs
            .iter()
            .flat_map(|r| r.curve.iter().map(|c| c.1))
            .min()
            .unwrap_or(1)
            .max(1);
        let hi = rs
            .iter()
            .flat_map(|r| r.curve.iter().map(|c| c.1))
            .max()
            .unwrap_or(10)
            .max(lo * 10);
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(64)
            .build_cartesian_2d(
                0.0f64..MAX_X + 0.1,
                ((lo as f64 / 1.5)..(hi as f64 * 1.5)).log_scale(),
            )
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(7)
            .x_label_formatter(&x_label)
            .y_label_formatter(&|v| crate::row::ns(Some(*v as u64)))
            .y_desc("ns, one-way (log)")
            .draw()
            .map_err(err)?;
        for (i, r) in rs.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = r.curve.iter().map(|(p, v)| (x_of(*p), *v as f64)).collect();
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(err)?
                .label(r.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 11))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
