//! Gauge families that the metrics controller recomputes whole on every pass (one series per
//! pod, node, condition or offering): each pass replaces the family's series at once.
//!
//! Why not a `GaugeVec`: it keeps, per series, its own label pairs (names and values) and a
//! hash entry, and removing the series of objects that are gone needs a second copy of every
//! label set to diff against. With one series per pod that was three copies of ~13 labels for
//! each of 20,000 pods and a hash lookup per series every five seconds. Here the family holds
//! the pass's series as computed (label values only) and builds the exposition when scraped.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Gauge, Metric, MetricFamily, MetricType};

use super::cluster_state::Series;
use super::summary::{family_desc, label_pairs};

/// A gauge family whose series are replaced together by [`PublishedGauges::publish`].
#[derive(Clone)]
pub struct PublishedGauges {
    inner: Arc<Inner>,
}

struct Inner {
    desc: Desc,
    series: Mutex<Vec<Series>>,
}

impl PublishedGauges {
    /// An empty family; `labels` are its label names.
    pub fn new(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        let desc = family_desc(name, help, labels)?;
        Ok(Self {
            inner: Arc::new(Inner {
                desc,
                series: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Makes the family hold exactly `series`. Series with the wrong number of label values
    /// are left out (and logged): a scrape must not fail over one. Of series with equal label
    /// values the last counts, as when a `GaugeVec` is set twice; a repeated series would
    /// make Prometheus reject the whole scrape.
    pub fn publish(&self, mut series: Vec<Series>) {
        let arity = self.inner.desc.variable_labels.len();
        series.retain(|s| {
            let fits = s.labels.len() == arity;
            if !fits {
                tracing::error!(family = %self.inner.desc.fq_name, labels = ?s.labels, "series with the wrong label count left out");
            }
            fits
        });
        series.reverse();
        // Stable: of equal label sets the first kept is the last given.
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        series.dedup_by(|later, kept| later.labels == kept.labels);
        series.shrink_to_fit();
        *self.lock() = series;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Series>> {
        // The series are replaced whole, so a panicking holder leaves a complete set.
        self.inner
            .series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Collector for PublishedGauges {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.inner.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let names = &self.inner.desc.variable_labels;
        let metrics = self
            .lock()
            .iter()
            .map(|s| {
                let mut gauge = Gauge::default();
                gauge.set_value(s.value);
                let mut metric = Metric::default();
                metric.set_label(label_pairs(names, &s.labels));
                metric.set_gauge(gauge);
                metric
            })
            .collect();
        let mut family = MetricFamily::default();
        family.set_name(self.inner.desc.fq_name.clone());
        family.set_help(self.inner.desc.help.clone());
        family.set_field_type(MetricType::GAUGE);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{Registry, TextEncoder};

    use super::*;

    fn series(labels: &[&str], value: f64) -> Series {
        Series {
            labels: labels.iter().map(|l| l.to_string()).collect(),
            value,
        }
    }

    fn text(registry: &Registry) -> String {
        TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("encodes")
    }

    #[test]
    fn each_publication_replaces_the_series_and_repeats_keep_the_last_value() {
        let family = PublishedGauges::new("test_pods", "Pods.", &["name", "namespace"])
            .expect("valid family");
        let registry = Registry::new();
        registry
            .register(Box::new(family.clone()))
            .expect("registers");
        family.publish(vec![
            series(&["b", "shop"], 1.0),
            series(&["a", "shop"], 1.0),
            series(&["a", "shop"], 2.0),
            series(&["too", "many", "labels"], 1.0),
        ]);
        assert_eq!(
            text(&registry),
            "# HELP test_pods Pods.\n# TYPE test_pods gauge\n\
             test_pods{name=\"a\",namespace=\"shop\"} 2\n\
             test_pods{name=\"b\",namespace=\"shop\"} 1\n"
        );
        family.publish(vec![series(&["c", "shop"], 3.0)]);
        assert_eq!(
            text(&registry),
            "# HELP test_pods Pods.\n# TYPE test_pods gauge\n\
             test_pods{name=\"c\",namespace=\"shop\"} 3\n"
        );
        family.publish(Vec::new());
        assert_eq!(text(&registry), "", "an empty family is not exposed");
    }

    #[test]
    fn label_pairs_are_exposed_in_name_order_whatever_the_declared_order() {
        let family =
            PublishedGauges::new("test_nodes", "Nodes.", &["zone", "arch"]).expect("valid family");
        family.publish(vec![series(&["us-east-1a", "amd64"], 1.0)]);
        let collected = family.collect();
        let labels: Vec<(&str, &str)> = collected[0].get_metric()[0]
            .get_label()
            .iter()
            .map(|p| (p.name(), p.value()))
            .collect();
        assert_eq!(labels, [("arch", "amd64"), ("zone", "us-east-1a")]);
    }
}
