//! What a recorded run says of its requests' lengths: the prompt and output
//! length statistics of its lifecycle reports as distributions, and the
//! generated length of each recorded request. A run of generated prompts
//! (`shared_prefix`, `random`, `synthetic`) needs only the mean prompt length
//! the server saw; a dataset run (`shareGPT`, …) needs the distributions,
//! because nothing else says how long its requests were.

use std::path::PathBuf;

use blis_workload::inference_perf::{Data, MeasuredLengths, QuantileTable};

use crate::experiment::requests::RequestRow;
use crate::experiment::{Experiment, LengthStats, Report, Successes, report_path};

impl Experiment {
    /// Whether the run sent a dataset's prompts (`shareGPT`, …), whose
    /// lengths only its records give.
    pub fn is_dataset_run(&self) -> bool {
        matches!(self.workload.data, Data::Dataset(_))
    }

    /// The report whose lengths describe the whole run, and its successes:
    /// the summary, else the stage with the most successes.
    pub(crate) fn run_successes(&self) -> Option<(PathBuf, &Successes)> {
        let summary = self.summary.as_ref().filter(|s| s.successes.count > 0).map(|s| (Report::Summary, &s.successes));
        let stage = self.stages.iter().enumerate().max_by_key(|(_, s)| s.successes.count).map(|(i, s)| (Report::Stage(i), &s.successes));
        summary.or(stage).filter(|(_, s)| s.count > 0).map(|(report, s)| (report_path(&self.results, &self.workload, report), s))
    }

    /// The prompt and output length distributions of the run's successful
    /// requests, from its reports; an error message naming the file and
    /// field when they do not give them.
    fn length_distributions(&self) -> Result<(QuantileTable, QuantileTable), String> {
        let (path, successes) = self.run_successes().ok_or_else(|| format!("{}: no report has successful requests", self.dir.display()))?;
        let table = |stats: Option<&LengthStats>, field: &str| {
            let problem = match stats {
                None => "missing".to_string(),
                Some(s) => match s.table() {
                    Ok(t) => return Ok(t),
                    Err(e) => e,
                },
            };
            Err(format!("{}: field `successes.{field}`: {problem}", path.display()))
        };
        Ok((table(successes.prompt_tokens(), "prompt_len")?, table(successes.output_tokens(), "output_len")?))
    }

    /// What the run's reports and records say of its lengths: the mean
    /// prompt length the server saw (over the successful rows of
    /// `requests.csv`, else over the stages' means), and for a dataset run
    /// the length distributions, without which it is an error naming the
    /// report and field.
    pub fn measured_lengths(&self) -> Result<MeasuredLengths, String> {
        let prompts: Vec<f64> = match &self.requests {
            Some(rows) => rows.iter().filter(|r| r.has_error == 0 && r.input_tokens > 0).map(|r| f64::from(r.input_tokens)).collect(),
            None => self.stages.iter().filter_map(|s| s.successes.prompt_tokens()?.mean).collect(),
        };
        let prompt_mean_tokens = (!prompts.is_empty()).then(|| prompts.iter().sum::<f64>() / prompts.len() as f64);
        let (prompt, output) = if self.is_dataset_run() {
            let (p, o) = self.length_distributions()?;
            (Some(p), Some(o))
        } else {
            (None, None)
        };
        Ok(MeasuredLengths { prompt_mean_tokens, prompt, output })
    }

    /// What request `row` generated, as far as its record says: the
    /// server's count when recorded; for a dataset run, else the re-tokenised
    /// answer (natural text re-tokenises to within a few tokens of what was
    /// generated; the random-token prompts of generated data do not, which is
    /// why their re-tokenised counts are never read).
    pub fn generated_tokens(&self, row: &RequestRow) -> Option<u32> {
        row.output_tokens.or(row.output_tokens_retokenized.filter(|&n| n > 0 && self.is_dataset_run()))
    }

    /// For a dataset run whose lengths were not all recorded exactly, where
    /// they come from instead, as a warning line.
    pub(crate) fn dataset_warning(&self) -> Option<String> {
        let Data::Dataset(dataset) = self.workload.data else { return None };
        let (dir, name) = (self.dir.display(), dataset.name());
        let report = self.run_successes().map_or_else(|| "the reports".to_string(), |(path, _)| path.display().to_string());
        match &self.requests {
            None => Some(format!(
                "{dir}: a {name} run without per-request records: each request's prompt and output lengths are drawn independently \
                 from the percentiles of {report}, and prompts share no prefix"
            )),
            Some(rows) if rows.iter().any(|r| r.has_error == 0 && r.output_tokens.is_none()) => Some(format!(
                "{dir}: a {name} run whose server-side output counts were not recorded: requests generate their re-tokenised answer's \
                 length (output_tokens_retokenized), else one drawn from the output_len percentiles of {report}"
            )),
            Some(_) => None,
        }
    }

    /// The generated length of every successful request, when all of them
    /// were recorded ([`Experiment::generated_tokens`]): the replay generates
    /// exactly those.
    pub fn recorded_outputs(&self) -> Option<Vec<u32>> {
        let rows = self.requests.as_deref()?;
        let mut successes = rows.iter().filter(|r| r.has_error == 0).peekable();
        successes.peek()?;
        successes.map(|r| self.generated_tokens(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_percentile_a_report_writes() {
        let s: LengthStats = serde_json::from_str(
            r#"{"mean": 210.0, "min": 0.0, "p0.1": 0.0, "p1": 3.0, "median": 249.0, "p99.9": 250.0, "max": 251.0, "std": 4.0, "p50": 249.0, "count": null}"#,
        )
        .unwrap();
        assert_eq!(s.mean, Some(210.0));
        let mut q = s.quantiles.clone();
        q.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(q, [(0.0, 0.0), (0.001, 0.0), (0.01, 3.0), (0.5, 249.0), (0.5, 249.0), (99.9 / 100.0, 250.0), (1.0, 251.0)]);
        let t = s.table().unwrap();
        assert_eq!(t.value_at(0.5), 249.0);
        assert_eq!(t.value_at(1.0), 251.0);
    }

    #[test]
    fn a_mean_alone_is_no_distribution() {
        let s: LengthStats = serde_json::from_str(r#"{"mean": 63.0}"#).unwrap();
        assert!(s.table().unwrap_err().contains("minimum and the maximum"));
        // A 2026 report of a stage without successes writes totals only.
        let totals: LengthStats = serde_json::from_str(r#"{"total": 0.0, "cached": 0.0, "uncached": 0.0}"#).unwrap();
        assert_eq!(totals, LengthStats::default());
    }

    #[test]
    fn checks_name_the_bad_percentile() {
        let s = LengthStats { mean: Some(5.0), quantiles: vec![(0.9, -1.0)] };
        let e = s.check("successes.output_len", 1e9).unwrap_err();
        assert!(e.contains("successes.output_len.p90") && e.contains("-1.0"), "{e}");
    }
}
