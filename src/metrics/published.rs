//! Gauge families whose series are replaced whole: published by every pass of the metrics
//! controller (one series per condition or offering), or computed from the node and pod caches
//! each time they are scraped (one per node and resource, or per pod: see [`super::nodes`] and
//! [`super::pods`]).
//!
//! Why not a `GaugeVec`: it keeps, per series, its own label pairs (names and values) and a
//! hash entry, and removing the series of objects that are gone needs a second copy of every
//! label set to diff against. With one series per pod that was three copies of ~13 labels for
//! each of 20,000 pods and a hash lookup per series every five seconds. Here a published
//! family holds the pass's series as computed (label values only), a served one nothing
//! between scrapes, and both build the exposition when scraped.

use std::fmt::Write;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::Desc;

use super::cluster_state::Series;
use super::summary::family_desc;

/// A gauge family whose series are replaced together by [`PublishedGauges::publish`], or
/// computed when scraped ([`PublishedGauges::serve`]).
#[derive(Clone)]
pub struct PublishedGauges {
    inner: Arc<Inner>,
}

struct Inner {
    desc: Desc,
    /// The label indices in name order: how the exposition writes and sorts a series' labels.
    by_name: Vec<usize>,
    /// Where the series come from, shared with the scrapes writing them out.
    content: Mutex<Content>,
}

/// A family's series as a scrape reads them: `len` rows, each with label values in the
/// family's label order and a value. Implemented over a publication, and by families that
/// compute their series when scraped from state kept elsewhere (the node and pod caches: see
/// [`super::nodes`] and [`super::pods`]) rather than holding a copy of every label between
/// scrapes.
pub trait Rows: Send {
    /// How many rows there are.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Row `row`'s value of label `label` (an index into the family's label names).
    fn label(&self, row: usize, label: usize) -> &str;
    /// Row `row`'s gauge value.
    fn value(&self, row: usize) -> f64;
}

/// Computes a served family's rows, once per scrape.
pub type RowSource = Arc<dyn Fn() -> Box<dyn Rows> + Send + Sync>;

#[derive(Clone)]
enum Content {
    /// The last publication, in exposition order without repeats.
    Published(Arc<Vec<Series>>),
    /// Rows computed when scraped, in any order.
    Served(RowSource),
}

impl Rows for Arc<Vec<Series>> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn label(&self, row: usize, label: usize) -> &str {
        self.get(row)
            .and_then(|s| s.labels.get(label))
            .map_or("", |l| &**l)
    }

    fn value(&self, row: usize) -> f64 {
        self.get(row).map_or(0.0, |s| s.value)
    }
}

/// A scrape's rows with the order it writes them in.
struct Ordered {
    rows: Box<dyn Rows>,
    /// Row indices in exposition order; `None` when the rows are in that order already.
    order: Option<Vec<usize>>,
}

impl Ordered {
    /// `rows` in the exposition's order (by label values, labels taken in name order, as
    /// [`PublishedGauges::publish`] sorts), of rows with equal label values only the last.
    fn sorted(rows: Box<dyn Rows>, by_name: &[usize]) -> Self {
        let r: &dyn Rows = &*rows;
        let key = |row: usize| by_name.iter().map(move |&l| r.label(row, l));
        let mut order: Vec<usize> = (0..rows.len()).collect();
        // The later of equal rows first, so that dedup keeps it.
        order.sort_unstable_by(|&a, &b| key(a).cmp(key(b)).then(b.cmp(&a)));
        order.dedup_by(|later, kept| key(*later).eq(key(*kept)));
        order.shrink_to_fit();
        Self {
            order: Some(order),
            rows,
        }
    }

    fn len(&self) -> usize {
        self.order.as_ref().map_or(self.rows.len(), Vec::len)
    }

    /// The row written `i`th.
    fn row(&self, i: usize) -> usize {
        self.order
            .as_ref()
            .map_or(i, |o| o.get(i).copied().unwrap_or(usize::MAX))
    }
}

/// Series per piece of the exposition ([`PublishedGauges::text_chunks`]): ~100 KB of text for
/// the per-pod families, so a scrape never holds a whole family's text (tens of MB at 20,000
/// pods) at once.
const SERIES_PER_CHUNK: usize = 256;

impl PublishedGauges {
    /// An empty family; `labels` are its label names.
    pub fn new(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        let desc = family_desc(name, help, labels)?;
        let mut by_name: Vec<usize> = (0..labels.len()).collect();
        by_name.sort_by_key(|&i| labels[i]);
        Ok(Self {
            inner: Arc::new(Inner {
                desc,
                by_name,
                content: Mutex::new(Content::Published(Arc::new(Vec::new()))),
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
        // Stable: of equal label sets the first kept is the last given. In the exposition's
        // order: by label values, labels taken in name order.
        let by_name = &self.inner.by_name;
        series.sort_by(|a, b| {
            let a_key = by_name.iter().map(|&i| a.labels.get(i));
            a_key.cmp(by_name.iter().map(|&i| b.labels.get(i)))
        });
        series.dedup_by(|later, kept| later.labels == kept.labels);
        series.shrink_to_fit();
        *self.lock() = Content::Published(Arc::new(series));
    }

    /// Makes the family's series those `source` computes at each scrape (until the next
    /// [`publish`](Self::publish) or `serve`), written as [`publish`](Self::publish) would
    /// write the same rows: sorted, of equal label sets the last row. The rows must have the
    /// family's labels: nothing checks their number.
    pub fn serve(&self, source: RowSource) {
        *self.lock() = Content::Served(source);
    }

    /// The family's name.
    pub fn name(&self) -> &str {
        &self.inner.desc.fq_name
    }

    /// The family's label names, in declaration order (the order of a series' values).
    pub fn label_names(&self) -> &[String] {
        &self.inner.desc.variable_labels
    }

    /// The family in Prometheus' text exposition format, as the `prometheus` crate's
    /// `TextEncoder` writes a gauge family (labels in name order; nothing for a family without
    /// series), in pieces of [`SERIES_PER_CHUNK`] series written as they are taken: the scrape
    /// streams them, and going through the crate's protobuf objects held ~35 MB of label pairs
    /// per scrape at 20,000 pods. The pieces are of the publication current when this is
    /// called; a served family computes its rows when the first piece is taken, so that the
    /// families of one scrape do not hold their rows at once.
    pub fn text_chunks(&self) -> impl Iterator<Item = String> + Send + 'static {
        let content = self.lock().clone();
        let inner = Arc::clone(&self.inner);
        let mut rows: Option<Ordered> = None;
        let mut chunk = 0;
        std::iter::from_fn(move || {
            let rows = rows.get_or_insert_with(|| match &content {
                Content::Published(series) => Ordered {
                    rows: Box::new(Arc::clone(series)),
                    order: None,
                },
                Content::Served(source) => Ordered::sorted(source(), &inner.by_name),
            });
            let start = chunk * SERIES_PER_CHUNK;
            if start >= rows.len() {
                return None;
            }
            let mut out = String::new();
            if chunk == 0 {
                inner.write_header(&mut out);
            }
            for i in start..rows.len().min(start + SERIES_PER_CHUNK) {
                inner.write_series(&mut out, &*rows.rows, rows.row(i));
            }
            chunk += 1;
            Some(out)
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Content> {
        // The content is replaced whole, so a panicking holder leaves a complete one.
        self.inner
            .content
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn write_header(&self, out: &mut String) {
        let desc = &self.desc;
        if !desc.help.is_empty() {
            out.push_str("# HELP ");
            out.push_str(&desc.fq_name);
            out.push(' ');
            escape(out, &desc.help, false);
            out.push('\n');
        }
        out.push_str("# TYPE ");
        out.push_str(&desc.fq_name);
        out.push_str(" gauge\n");
    }

    fn write_series(&self, out: &mut String, rows: &dyn Rows, row: usize) {
        let names = &self.desc.variable_labels;
        out.push_str(&self.desc.fq_name);
        let mut separator = '{';
        for &i in &self.by_name {
            out.push(separator);
            out.push_str(&names[i]);
            out.push_str("=\"");
            escape(out, rows.label(row, i), true);
            out.push('"');
            separator = ',';
        }
        if !self.by_name.is_empty() {
            out.push('}');
        }
        // Writing to a String cannot fail.
        let _ = write!(out, " {}", rows.value(row));
        out.push('\n');
    }
}

/// Appends `text` escaped as the exposition format wants it: backslash and newline always,
/// the double quote in label values.
fn escape(out: &mut String, text: &str, quote: bool) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{GaugeVec, Opts, Registry, TextEncoder};

    use super::*;
    use crate::metrics::tests::text;

    fn series(labels: &[&str], value: f64) -> Series {
        Series::new(labels.iter().copied(), value)
    }

    #[test]
    fn each_publication_replaces_the_series_and_repeats_keep_the_last_value() {
        let family = PublishedGauges::new("test_pods", "Pods.", &["name", "namespace"])
            .expect("valid family");
        family.publish(vec![
            series(&["b", "shop"], 1.0),
            series(&["a", "shop"], 1.0),
            series(&["a", "shop"], 2.0),
            series(&["too", "many", "labels"], 1.0),
        ]);
        assert_eq!(
            text(&family),
            "# HELP test_pods Pods.\n# TYPE test_pods gauge\n\
             test_pods{name=\"a\",namespace=\"shop\"} 2\n\
             test_pods{name=\"b\",namespace=\"shop\"} 1\n"
        );
        family.publish(vec![series(&["c", "shop"], 3.0)]);
        assert_eq!(
            text(&family),
            "# HELP test_pods Pods.\n# TYPE test_pods gauge\n\
             test_pods{name=\"c\",namespace=\"shop\"} 3\n"
        );
        family.publish(Vec::new());
        assert_eq!(text(&family), "", "an empty family is not exposed");
    }

    #[test]
    fn the_text_is_what_the_prometheus_crate_writes_for_the_same_gauges() {
        let (name, help, labels) = ("test_nodes", "Nodes \\ of\na zone.", ["zone", "arch"]);
        let family = PublishedGauges::new(name, help, &labels).expect("valid family");
        let gauges = GaugeVec::new(Opts::new(name, help), &labels).expect("valid family");
        let registry = Registry::new();
        registry
            .register(Box::new(gauges.clone()))
            .expect("registers");
        let values = [
            (["us-east-1a", "amd64"], 1.0),
            (["us-east-1b", "a\"quoted\\back\nline"], 0.25),
            (["", "arm64"], 1e21),
        ];
        family.publish(values.iter().map(|(l, v)| series(l, *v)).collect());
        for (l, v) in values {
            gauges.with_label_values(&l).set(v);
        }
        let expected = TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("encodes");
        assert!(
            expected.contains("arch=\"amd64\",zone=\"us-east-1a\""),
            "{expected}"
        );
        assert_eq!(text(&family), expected);
    }

    #[test]
    fn a_large_family_comes_in_pieces_that_join_into_the_crates_text() {
        let (name, help) = ("test_pods", "Pods.");
        let family = PublishedGauges::new(name, help, &["name"]).expect("valid family");
        let gauges = GaugeVec::new(Opts::new(name, help), &["name"]).expect("valid family");
        let registry = Registry::new();
        registry
            .register(Box::new(gauges.clone()))
            .expect("registers");
        let names: Vec<String> = (0..2 * SERIES_PER_CHUNK + 1)
            .map(|i| format!("pod-{i:04}"))
            .collect();
        family.publish(names.iter().map(|n| series(&[n], 1.0)).collect());
        for n in &names {
            gauges.with_label_values(&[n.as_str()]).set(1.0);
        }
        let pieces: Vec<String> = family.text_chunks().collect();
        assert_eq!(pieces.len(), 3, "256, 256 and 1 series");
        assert!(pieces[0].starts_with("# HELP test_pods Pods.\n# TYPE test_pods gauge\n"));
        assert_eq!(pieces[2], "test_pods{name=\"pod-0512\"} 1\n");
        let expected = TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("encodes");
        assert_eq!(pieces.concat(), expected);
    }
}
