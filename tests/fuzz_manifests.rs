//! A mutation fuzzer over the manifests in `examples/` and `tests/fixtures/` (issue #13), run as
//! an ordinary test on stable Rust: each case takes a seed file, breaks it the ways hostile or
//! careless input does (extreme numbers, long strings, wrong types, deleted or duplicated keys,
//! deep nesting, huge replica counts, absurd durations and quantities) and runs it through
//! reading, `load`, validation, `convert`, the scheduler and the disruption engine. No stage may
//! panic.
//!
//! The run is deterministic (a fixed seed) and small enough for the normal suite; raise
//! `PROPTEST_CASES` to search longer. Every failing case found is minimized by hand and kept in
//! `tests/fixtures/fuzz/`, which [`the_fuzz_corpus_replays`] runs on every test run.
//!
//! Time per case is bounded by bounding the work, not by timing it: seeds are a few KiB, a case
//! applies at most four mutations, and a loaded cluster larger than [`MAX_SIMULATED_PODS`] is not
//! scheduled (the loader's handling of large counts is what such a case tests; scheduling scale
//! is the benchmarks' subject).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use chrono::{DateTime, TimeZone, Utc};
use karpenter_rs::catalog::Catalog;
use karpenter_rs::manifest::{self, legacy};
use karpenter_rs::simulate;
use karpenter_rs::snapshot::EngineOptions;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};

/// Largest loaded cluster the harness schedules, so every case stays milliseconds of work in a
/// debug build.
const MAX_SIMULATED_PODS: usize = 500;

/// Cases per run unless `PROPTEST_CASES` says otherwise: about 25 s in a debug build on 2 cores.
const DEFAULT_CASES: u32 = 500;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 6, 10, 0, 0)
        .single()
        .expect("valid date")
}

static CATALOG: LazyLock<Catalog> =
    LazyLock::new(|| Catalog::bundled("us-east-1").expect("bundled catalog"));

/// Every `.yaml` file under `dir`, recursively, in name order.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            yaml_files(&entry, out);
        } else if entry.extension().is_some_and(|e| e == "yaml") {
            out.push(entry);
        }
    }
}

/// The seed manifests: every parseable document stream in `examples/` and `tests/fixtures/`
/// (except the fuzz corpus itself, which is replayed separately). Those that load are listed
/// [`LOADABLE_WEIGHT`] times, so most cases get past the loader to the scheduler and the
/// disruption engine instead of stopping at a legacy or deliberately broken fixture.
static SEEDS: LazyLock<Vec<Vec<Value>>> = LazyLock::new(|| {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    yaml_files(&root.join("examples"), &mut files);
    yaml_files(&root.join("tests/fixtures"), &mut files);
    files
        .iter()
        .filter(|f| !f.starts_with(root.join("tests/fixtures/fuzz")))
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            let docs = manifest::parse_str(&text, f).ok()?;
            let copies = if manifest::load(&docs, now()).is_ok() {
                LOADABLE_WEIGHT
            } else {
                1
            };
            let values: Vec<Value> = docs.into_iter().map(|d| d.value).collect();
            Some(std::iter::repeat_n(values, copies))
        })
        .flatten()
        .filter(|docs| !docs.is_empty())
        .collect()
});

/// How many times more often a seed that loads is mutated than one that does not.
const LOADABLE_WEIGHT: usize = 4;

/// One way to break a manifest, applied at the `at`-th node (mod the node count) of a document.
#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the node with this value.
    Replace(usize, Value),
    /// Replace the `at`-th node whose key is one of [`FIELDS`] (the counts, quantities, durations
    /// and selectors the scheduler and the disruption engine compute with), so the case still
    /// loads more often than a random replacement does.
    Field(usize, Value),
    /// Delete the node from its parent.
    Delete(usize),
    /// Wrap the node in `depth` single-item lists.
    Nest(usize, usize),
    /// Set a workload count (`spec.replicas`, `spec.parallelism`, `spec.completions`).
    Count(&'static str, Value),
    /// Duplicate a line of the rendered YAML (a duplicate key, or a list item twice).
    DuplicateLine(usize),
    /// Cut the rendered YAML at a byte offset.
    Truncate(usize),
}

/// Keys whose values the scheduler and the disruption engine compute with.
const FIELDS: &[&str] = &[
    "replicas",
    "parallelism",
    "completions",
    "cpu",
    "memory",
    "pods",
    "ephemeral-storage",
    "nvidia.com/gpu",
    "storage",
    "maxSkew",
    "minDomains",
    "weight",
    "nodes",
    "minValues",
    "values",
    "key",
    "operator",
    "consolidateAfter",
    "consolidationPolicy",
    "expireAfter",
    "terminationGracePeriod",
    "terminationGracePeriodSeconds",
    "duration",
    "schedule",
    "minAvailable",
    "maxUnavailable",
    "topologyKey",
    "whenUnsatisfiable",
    "effect",
    "tolerationSeconds",
    "priority",
    "creationTimestamp",
    "nodeName",
    "providerID",
    "capacity",
    "allocatable",
];

fn extreme_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(i64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(u64::MAX)),
        Just(json!(i32::MAX)),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(1.5e308)),
        Just(json!(-0.0)),
        Just(json!(true)),
        Just(Value::Null),
        Just(json!([])),
        Just(json!({})),
        Just(json!([1, "a", null])),
        Just(json!({"a": {"b": 1}})),
        Just(json!("")),
        Just(json!("9".repeat(400))),
        Just(json!("x".repeat(2000))),
        Just(json!("ünïcødé/🚀")),
        // Durations.
        Just(json!("999999999999999h")),
        Just(json!("-1s")),
        Just(json!("1e400s")),
        Just(json!("Never")),
        Just(json!("0s")),
        // Quantities.
        Just(json!("1e400")),
        Just(json!("99999999999999999999Ei")),
        Just(json!("-1")),
        Just(json!("0.000000001m")),
        Just(json!("1Ei")),
        // Label keys and values.
        Just(json!("kubernetes.io/arch")),
        Just(json!("karpenter.sh/capacity-type")),
        Just(json!("In")),
        Just(json!("Gt")),
        ".{0,12}".prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ]
}

fn count_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(i32::MAX)),
        Just(json!(i64::MAX)),
        Just(json!(manifest::MAX_PODS + 1)),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(1.5)),
        Just(json!("10")),
        Just(json!(1e300)),
        (0..50i64).prop_map(Value::from),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), extreme_value()).prop_map(|(at, v)| Mutation::Replace(at, v)),
        4 => (any::<usize>(), extreme_value()).prop_map(|(at, v)| Mutation::Field(at, v)),
        2 => any::<usize>().prop_map(Mutation::Delete),
        1 => (any::<usize>(), 1..150usize).prop_map(|(at, d)| Mutation::Nest(at, d)),
        2 => (
            prop_oneof![
                Just("/spec/replicas"),
                Just("/spec/parallelism"),
                Just("/spec/completions")
            ],
            count_value()
        )
            .prop_map(|(field, v)| Mutation::Count(field, v)),
        1 => any::<usize>().prop_map(Mutation::DuplicateLine),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// JSON pointers of every node of `value`, in document order.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                pointers(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// The node `at` (mod the node count) of `doc`, never the root.
fn pick(doc: &Value, at: usize) -> Option<String> {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    all.retain(|p| !p.is_empty());
    (!all.is_empty()).then(|| all[at % all.len()].clone())
}

fn delete(doc: &mut Value, pointer: &str) {
    let Some((parent, key)) = pointer.rsplit_once('/') else {
        return;
    };
    let key = key.replace("~1", "/").replace("~0", "~");
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&key);
        }
        Some(Value::Array(items)) => {
            if let Ok(i) = key.parse::<usize>()
                && i < items.len()
            {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// Applies the mutations to a copy of the seed, returning the YAML text to feed the pipeline.
fn mutate(seed: &[Value], doc: usize, mutations: &[Mutation]) -> String {
    let mut docs = seed.to_vec();
    let target = doc % docs.len();
    let mut text_mutations = Vec::new();
    for m in mutations {
        let d = &mut docs[target];
        match m {
            Mutation::Replace(at, v) => {
                if let Some(p) = pick(d, *at)
                    && let Some(node) = d.pointer_mut(&p)
                {
                    *node = v.clone();
                }
            }
            Mutation::Field(at, v) => {
                let mut all = Vec::new();
                pointers(d, String::new(), &mut all);
                all.retain(|p| {
                    p.rsplit('/')
                        .next()
                        .is_some_and(|k| FIELDS.contains(&k.replace("~1", "/").as_str()))
                });
                if !all.is_empty()
                    && let Some(node) = d.pointer_mut(&all[at % all.len()])
                {
                    *node = v.clone();
                }
            }
            Mutation::Delete(at) => {
                if let Some(p) = pick(d, *at) {
                    delete(d, &p);
                }
            }
            Mutation::Nest(at, depth) => {
                if let Some(p) = pick(d, *at)
                    && let Some(node) = d.pointer_mut(&p)
                {
                    for _ in 0..*depth {
                        *node = Value::Array(vec![node.take()]);
                    }
                }
            }
            Mutation::Count(field, v) => {
                if let Some(Value::Object(spec)) = d.pointer_mut("/spec") {
                    let key = field.trim_start_matches("/spec/");
                    spec.insert(key.to_owned(), v.clone());
                }
            }
            Mutation::DuplicateLine(_) | Mutation::Truncate(_) => text_mutations.push(m),
        }
    }
    let mut text = manifest::to_yaml_stream(&docs).expect("values render as YAML");
    for m in text_mutations {
        match m {
            Mutation::DuplicateLine(at) => {
                let lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let i = at % lines.len();
                    let mut out = lines[..=i].join("\n");
                    out.push('\n');
                    out.push_str(&lines[i..].join("\n"));
                    out.push('\n');
                    text = out;
                }
            }
            Mutation::Truncate(at) => {
                let mut end = at % text.len().max(1);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
            _ => {}
        }
    }
    text
}

/// Reads, loads, validates, converts, schedules and disrupts `text`. Errors are fine; the
/// stages must return.
fn pipeline(text: &str) {
    let Ok(docs) = manifest::parse_str(text, Path::new("fuzz.yaml")) else {
        return;
    };
    // Convert sees every document, including v1alpha5/v1beta1 ones load rejects.
    let _ = legacy::convert(&docs);
    let Ok(cluster) = manifest::load(&docs, now()) else {
        return;
    };
    if cluster.pods.len() > MAX_SIMULATED_PODS {
        return;
    }
    let options = EngineOptions::default();
    let _ = simulate::simulate(&cluster, &CATALOG, &options);
    let _ = simulate::simulate_with_disruption(&cluster, &CATALOG, &options, now(), None);
}

/// Runs `pipeline`, turning a panic into an error carrying the input, for saving to the corpus.
fn survives(text: &str) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| pipeline(text))).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        format!("panicked: {message}\n--- input ---\n{text}")
    })
}

#[test]
fn mutated_manifests_never_panic() {
    assert!(!SEEDS.is_empty(), "no seed manifests found");
    LazyLock::force(&CATALOG);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[13; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = (
        0..SEEDS.len(),
        any::<usize>(),
        prop::collection::vec(mutation(), 1..=4),
    );
    let result = runner.run(&strategy, |(seed, doc, mutations)| {
        let text = mutate(&SEEDS[seed], doc, &mutations);
        survives(&text).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}\nminimize the input and add it to tests/fixtures/fuzz/");
    }
}

/// Every input the fuzzer found a bug with, minimized, replayed through the whole pipeline.
#[test]
fn the_fuzz_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz");
    let mut files = Vec::new();
    yaml_files(&dir, &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("corpus file reads");
        if let Err(e) = survives(&text) {
            panic!("{}: {e}", file.display());
        }
    }
}
