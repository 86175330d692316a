//! A Prometheus summary with labels: the `prometheus` crate has none, and two upstream families
//! (`karpenter_nodes_termination_duration_seconds`, `karpenter_pods_startup_duration_seconds`)
//! are summaries that dashboards read quantiles from.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};

/// Quantiles every summary reports, as upstream's summaries do.
const SUMMARY_OBJECTIVES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];
/// Observations older than this no longer count towards a summary's quantiles.
const SUMMARY_MAX_AGE: Duration = Duration::from_secs(600);
/// At most this many recent observations per series are kept for quantiles, bounding memory.
const SUMMARY_MAX_SAMPLES: usize = 1024;

/// A Prometheus summary with labels. The `prometheus` crate has none, and two upstream families
/// are summaries: their quantiles cover the last ten minutes of observations (at most 1024 per
/// series), their `_sum` and `_count` everything since start.
#[derive(Clone)]
pub struct SummaryVec {
    inner: Arc<SummaryInner>,
}

struct SummaryInner {
    desc: Desc,
    series: Mutex<HashMap<Vec<String>, SummarySeries>>,
}

#[derive(Default)]
struct SummarySeries {
    count: u64,
    sum: f64,
    recent: VecDeque<(Instant, f64)>,
}

impl SummaryVec {
    /// A summary family; `labels` are its label names.
    pub fn new(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        let desc = family_desc(name, help, labels)?;
        Ok(Self {
            inner: Arc::new(SummaryInner {
                desc,
                series: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Records one observation in the series with these label values (in label-name order).
    pub fn observe(&self, label_values: &[&str], value: f64) -> prometheus::Result<()> {
        let expect = self.inner.desc.variable_labels.len();
        if label_values.len() != expect {
            return Err(prometheus::Error::InconsistentCardinality {
                expect,
                got: label_values.len(),
            });
        }
        let now = Instant::now();
        let key = label_values.iter().map(|v| v.to_string()).collect();
        let mut series = self
            .inner
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry: &mut SummarySeries = series.entry(key).or_default();
        entry.count += 1;
        entry.sum += value;
        entry.recent.push_back((now, value));
        prune(&mut entry.recent, now);
        Ok(())
    }
}

/// Drops observations that are too old or beyond the sample cap.
fn prune(recent: &mut VecDeque<(Instant, f64)>, now: Instant) {
    while recent.len() > SUMMARY_MAX_SAMPLES
        || recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > SUMMARY_MAX_AGE)
    {
        recent.pop_front();
    }
}

/// The `q` quantile of sorted values: the smallest value with at least `q` of the values at or
/// below it (NaN without values, as Prometheus clients report an empty window).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The description of a hand-written family (a summary here, [`super::PublishedGauges`]).
pub(super) fn family_desc(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Desc> {
    Desc::new(
        name.to_string(),
        help.to_string(),
        labels.iter().map(|l| l.to_string()).collect(),
        HashMap::new(),
    )
}

/// A series' label pairs in name order, as the exposition lists them.
pub(super) fn label_pairs(names: &[String], values: &[String]) -> Vec<LabelPair> {
    let mut pairs: Vec<LabelPair> = names
        .iter()
        .zip(values)
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.clone());
            pair.set_value(value.clone());
            pair
        })
        .collect();
    pairs.sort_by(|a, b| a.name().cmp(b.name()));
    pairs
}

impl Collector for SummaryVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.inner.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = Instant::now();
        let mut series = self
            .inner
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut metrics = Vec::with_capacity(series.len());
        for (label_values, entry) in series.iter_mut() {
            prune(&mut entry.recent, now);
            let mut values: Vec<f64> = entry.recent.iter().map(|(_, v)| *v).collect();
            values.sort_by(f64::total_cmp);
            let quantiles = SUMMARY_OBJECTIVES
                .iter()
                .map(|&q| {
                    let mut out = Quantile::default();
                    out.set_quantile(q);
                    out.set_value(quantile(&values, q));
                    out
                })
                .collect();
            let mut summary = Summary::default();
            summary.set_sample_count(entry.count);
            summary.set_sample_sum(entry.sum);
            summary.set_quantile(quantiles);
            let mut metric = Metric::default();
            metric.set_label(label_pairs(&self.inner.desc.variable_labels, label_values));
            metric.set_summary(summary);
            metrics.push(metric);
        }
        let mut family = MetricFamily::default();
        family.set_name(self.inner.desc.fq_name.clone());
        family.set_help(self.inner.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Registry, TextEncoder};

    #[test]
    fn summaries_report_quantiles_sum_and_count_per_series() {
        let summary = SummaryVec::new("test_summary_seconds", "A test summary.", &["pool"])
            .expect("valid summary");
        for v in 1..=100 {
            summary.observe(&["a"], f64::from(v)).expect("one label");
        }
        summary.observe(&["b"], 7.0).expect("one label");
        let err = summary.observe(&[], 1.0).expect_err("label missing");
        assert!(err.to_string().contains("expect 1"), "{err}");

        let registry = Registry::new();
        registry
            .register(Box::new(summary.clone()))
            .expect("registers");
        let mut text = String::new();
        TextEncoder::new()
            .encode_utf8(&registry.gather(), &mut text)
            .expect("encodes");
        for line in [
            "# TYPE test_summary_seconds summary",
            "test_summary_seconds{pool=\"a\",quantile=\"0\"} 1",
            "test_summary_seconds{pool=\"a\",quantile=\"0.5\"} 50",
            "test_summary_seconds{pool=\"a\",quantile=\"0.9\"} 90",
            "test_summary_seconds{pool=\"a\",quantile=\"0.99\"} 99",
            "test_summary_seconds{pool=\"a\",quantile=\"1\"} 100",
            "test_summary_seconds_sum{pool=\"a\"} 5050",
            "test_summary_seconds_count{pool=\"a\"} 100",
            "test_summary_seconds{pool=\"b\",quantile=\"0.5\"} 7",
            "test_summary_seconds_count{pool=\"b\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn summaries_keep_a_bounded_window() {
        let summary = SummaryVec::new("test_window", "A test summary.", &[]).expect("valid");
        for v in 0..(SUMMARY_MAX_SAMPLES + 500) {
            summary.observe(&[], v as f64).expect("no labels");
        }
        let families = summary.collect();
        let s = families[0].get_metric()[0].get_summary();
        assert_eq!(s.sample_count(), (SUMMARY_MAX_SAMPLES + 500) as u64);
        // The oldest 500 observations fell out of the quantile window.
        assert_eq!(s.get_quantile()[0].value(), 500.0);
    }
}
