//! SVG charts in the style of the papers' figures: grouped bars, one group per workload, one
//! bar per system, drawn with `plotters` (SVG backend only).

use std::path::Path;

use plotters::prelude::*;

use crate::measure::Result;

/// Bars to draw: the names of the series (systems) and, per group (workload), one value per
/// series (`None`: that system did not run it).
#[derive(Debug, Clone, Default)]
pub struct Groups {
    /// Series names, in bar order.
    pub series: Vec<String>,
    /// (group label, one value per series).
    pub groups: Vec<(String, Vec<Option<f64>>)>,
}

/// Colours of the series, in order (colour-blind-safe palette).
const COLOURS: [RGBColor; 6] = [
    RGBColor(0xd5, 0x5e, 0x00), // vermillion: ember-sql
    RGBColor(0xe6, 0x9f, 0x00), // orange: ember-api
    RGBColor(0x00, 0x72, 0xb2), // blue: sqlite
    RGBColor(0x00, 0x9e, 0x73), // green
    RGBColor(0xcc, 0x79, 0xa7), // purple
    RGBColor(0x56, 0xb4, 0xe9), // sky
];

fn err(e: impl std::fmt::Display) -> crate::measure::Error {
    format!("chart: {e}").into()
}

/// Draws `g` as grouped bars into an SVG file at `path`.
pub fn grouped_bars(path: &Path, title: &str, y_label: &str, g: &Groups) -> Result<()> {
    let n = g.groups.len().max(1);
    let width = (140 + n * (30 + 22 * g.series.len().max(1))).max(640) as u32;
    let height = 440u32;
    let max = g
        .groups
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .fold(0.0f64, |m, &x| m.max(x));
    let top = if max > 0.0 { max * 1.15 } else { 1.0 };

    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .y_label_formatter(&|v| short(*v))
        .draw()
        .map_err(err)?;

    let k = g.series.len().max(1) as f64;
    let slot = 0.8 / k;
    for (si, name) in g.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = g
            .groups
            .iter()
            .enumerate()
            .filter_map(|(gi, (_, vals))| {
                let v = (*vals.get(si)?)?;
                let x0 = gi as f64 + 0.1 + slot * si as f64;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + slot * 0.9, v)],
                    colour.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;

    // Group labels under the axis, split at '/' into two lines.
    let font = ("sans-serif", 12).into_font().color(&BLACK);
    for (gi, (label, _)) in g.groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(gi as f64 + 0.5, 0.0));
        for (li, line) in label.split('/').enumerate() {
            let w = line.chars().count() as i32 * 6;
            root.draw(&Text::new(
                line.to_string(),
                (px - w / 2, py + 8 + 15 * li as i32),
                font.clone(),
            ))
            .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// 1234567 → "1.2M", 12345 → "12k".
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_every_label() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("c.svg");
        let g = Groups {
            series: vec!["ember-sql".into(), "sqlite".into()],
            groups: vec![
                ("fillseq".into(), vec![Some(10.0), Some(5.0)]),
                ("read-heavy/zipf-0.99".into(), vec![None, Some(7.5)]),
            ],
        };
        grouped_bars(&path, "t", "ops/s", &g)?;
        let svg = std::fs::read_to_string(&path)?;
        assert!(svg.starts_with("<svg") || svg.contains("<svg"));
        for s in [
            "fillseq",
            "read-heavy",
            "zipf-0.99",
            "ember-sql",
            "sqlite",
            "ops/s",
        ] {
            assert!(svg.contains(s), "{s} missing");
        }
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(12_345.0), "12k");
        Ok(())
    }
}
