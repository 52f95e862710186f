//! The tuning curve: best GOPS after each trial, one line per layer, as an SVG.

use std::path::Path;

use plotters::prelude::*;

use super::LayerResult;

/// Writes the tuning curves of `results` to `path` (SVG).
pub fn curves_svg(results: &[LayerResult], title: &str, path: &Path) -> Result<(), String> {
    let curves: Vec<(String, Vec<f64>)> = results.iter().map(|r| (r.name.clone(), r.curve())).collect();
    let trials = curves.iter().map(|(_, c)| c.len()).max().unwrap_or(1).max(2);
    let top = curves.iter().flat_map(|(_, c)| c.iter().copied()).fold(1.0_f64, f64::max) * 1.1;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1..trials, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc("trials").y_desc("best verified GOPS").draw().map_err(|e| e.to_string())?;
    for (i, (name, curve)) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(curve.iter().enumerate().map(|(t, &g)| (t + 1, g)), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
