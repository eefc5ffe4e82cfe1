//! `blis calibrate --plots DIR`: for TTFT, ITL and E2E, a QQ plot
//! (`qq_<metric>.svg`: real quantiles against simulated ones; points on
//! the diagonal mean matching distributions) and overlaid CDFs
//! (`cdf_<metric>.svg`).

use blis_calibrate::validate::live::CalibrationReport;

use super::{PlotDir, against_diagonal, cdf_overlay};

/// The samples behind the plots, ms: (metric, real, simulated).
pub type Samples<'a> = [(&'a str, Vec<f64>, Vec<f64>)];

/// Writes the QQ and CDF plots of every metric with samples.
pub fn write_all(dir: &PlotDir, report: &CalibrationReport, samples: &Samples<'_>) -> anyhow::Result<()> {
    for (metric, real, sim) in samples {
        if real.is_empty() || sim.is_empty() {
            continue;
        }
        let qq = match *metric {
            "itl" => report.itl.as_ref().map(|d| d.qq_ms.clone()),
            m => report.metrics.get(m).map(|c| c.qq_ms.clone()),
        }
        .unwrap_or_default();
        let upper = metric.to_uppercase();
        let title = format!("{upper}: QQ, real vs simulated");
        dir.save(
            &format!("qq_{metric}.svg"),
            &against_diagonal(&title, "real (ms)", "simulated (ms)", "quantiles (1 % steps)", &qq, None)?,
        )?;
        dir.save(
            &format!("cdf_{metric}.svg"),
            &cdf_overlay(&format!("{upper}: CDF, real and simulated"), &format!("{upper} (ms)"), real, sim)?,
        )?;
    }
    Ok(())
}
