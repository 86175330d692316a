//! JSON logs in upstream Karpenter's shape.
//!
//! Upstream logs one JSON object per line through zap: `level` in upper case, `time` in RFC 3339
//! with milliseconds, `logger`, `message`, then every structured field at the top level, objects
//! as `"NodeClaim":{"name":"default-x7k2p"}` and other keys hyphenated (`"provider-id"`,
//! `"instance-type"`, `"capacity-type"`). Log pipelines, CloudWatch Insights queries and alerts
//! parse exactly that, so our lines have the same keys ([`upstream_key`] translates Rust field
//! names). tracing-subscriber's own JSON format nests fields under `fields` and spans under
//! `spans`, hence the formatter here.
//!
//! Fields of the spans an event happens in are flattened too, outermost first, so a reconciler
//! that enters `info_span!("reconcile", controller = "nodeclaim.lifecycle", nodeclaim = %name)`
//! gets those keys on every line it logs.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use super::settings::{LogLevel, Settings};

/// The `logger` of lines that do not name one: upstream's controllers all log as "controller".
const DEFAULT_LOGGER: &str = "controller";

/// Installs the process-wide logger from `LOG_LEVEL`, `LOG_OUTPUT_PATHS` and
/// `LOG_ERROR_OUTPUT_PATHS`. Lines go to every output path; a line that cannot be written to
/// one of them is reported on the error output paths (zap's meaning of the setting). Logs of
/// crates using the `log` facade are captured too.
pub fn init(settings: &Settings) -> anyhow::Result<()> {
    let outputs = Outputs::open(&settings.log_output_paths, &settings.log_error_output_paths)?;
    tracing_subscriber::registry()
        .with(layer(settings.log_level, outputs))
        .try_init()
        .context("installing the logger")
}

/// The formatting layer with its level filter, writing to `writer`. At debug level lines also
/// carry `caller` (file:line), which is what debugging needs and would be noise otherwise.
fn layer<S, W>(level: LogLevel, writer: W) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .fmt_fields(FlatJsonFields)
        .event_format(ZapJson {
            caller: level == LogLevel::Debug,
        })
        .with_writer(writer)
        .with_filter(filter(level))
}

/// Our own events at the configured level; other crates' (kube, hyper, ...) at most at info,
/// since their debug output is per request and would drown the controller's.
fn filter(level: LogLevel) -> Targets {
    let own = match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
    };
    Targets::new()
        .with_default(own.min(LevelFilter::INFO))
        .with_target(env!("CARGO_CRATE_NAME"), own)
}

/// Formats events as zap's production JSON encoder does.
struct ZapJson {
    caller: bool,
}

impl<S> FormatEvent<S, FlatJsonFields> for ZapJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, FlatJsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let level = match *metadata.level() {
            Level::TRACE | Level::DEBUG => "DEBUG",
            Level::INFO => "INFO",
            Level::WARN => "WARN",
            Level::ERROR => "ERROR",
        };
        let mut fields = JsonMembers::default();
        event.record(&mut fields);
        let time = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
        write!(
            writer,
            "{{\"level\":\"{level}\",\"time\":\"{time}\",\"logger\":"
        )?;
        write_json_string(
            &mut writer,
            fields.logger.as_deref().unwrap_or(DEFAULT_LOGGER),
        )?;
        if self.caller
            && let (Some(file), Some(line)) = (metadata.file(), metadata.line())
        {
            writer.write_str(",\"caller\":")?;
            write_json_string(&mut writer, &format!("{file}:{line}"))?;
        }
        writer.write_str(",\"message\":")?;
        write_json_string(&mut writer, fields.message.as_deref().unwrap_or_default())?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(formatted) = extensions.get::<FormattedFields<FlatJsonFields>>()
                    && !formatted.fields.is_empty()
                {
                    writer.write_char(',')?;
                    writer.write_str(&formatted.fields)?;
                }
            }
        }
        if !fields.out.is_empty() {
            writer.write_char(',')?;
            writer.write_str(&fields.out)?;
        }
        writer.write_str("}\n")
    }
}

/// Formats span fields as JSON object members (`"a":1,"b":"x"`, no braces), so the event
/// formatter can splice them into the line at the top level.
struct FlatJsonFields;

impl<'writer> FormatFields<'writer> for FlatJsonFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut members = JsonMembers::default();
        fields.record(&mut members);
        // A span's own `message` or `logger` field is kept as an ordinary member.
        let kept = [
            ("message", members.message.take()),
            ("logger", members.logger.take()),
        ];
        for (key, value) in kept {
            if let Some(value) = value {
                members.push_key(key);
                let _ = write_json_string(&mut members.out, &value);
            }
        }
        writer.write_str(&members.out)
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut more = String::new();
        self.format_fields(Writer::new(&mut more), fields)?;
        if !more.is_empty() {
            if !current.fields.is_empty() {
                current.fields.push(',');
            }
            current.fields.push_str(&more);
        }
        Ok(())
    }
}

/// Collects fields as JSON members; `message` and `logger` are kept apart because they have
/// fixed places in the line.
#[derive(Default)]
struct JsonMembers {
    out: String,
    message: Option<String>,
    logger: Option<String>,
}

impl JsonMembers {
    fn push_key(&mut self, key: &str) {
        if !self.out.is_empty() {
            self.out.push(',');
        }
        let _ = write_json_string(&mut self.out, key);
        self.out.push(':');
    }

    fn push_raw(&mut self, key: &str, json: &str) {
        self.push_key(upstream_key(key).name());
        self.out.push_str(json);
    }

    fn push_str(&mut self, key: &str, value: &str) {
        match (key, upstream_key(key)) {
            ("message", _) => self.message = Some(value.to_string()),
            ("logger", _) => self.logger = Some(value.to_string()),
            (_, UpstreamKey::Object(kind)) => {
                self.push_key(kind);
                self.out.push_str("{\"name\":");
                let _ = write_json_string(&mut self.out, value);
                self.out.push('}');
            }
            (_, UpstreamKey::Flat(name)) => {
                self.push_key(name);
                let _ = write_json_string(&mut self.out, value);
            }
        }
    }
}

impl Visit for JsonMembers {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push_str(field.name(), &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push_str(field.name(), value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push_str(field.name(), &value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push_raw(field.name(), if value { "true" } else { "false" });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push_raw(field.name(), &value.to_string());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push_raw(field.name(), &value.to_string());
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push_raw(field.name(), &value.to_string());
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push_raw(field.name(), &value.to_string());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if value.is_finite() {
            self.push_raw(field.name(), &value.to_string());
        } else {
            // JSON has no NaN or infinity; zap writes them as strings too.
            self.push_str(field.name(), &value.to_string());
        }
    }
}

/// How a field is spelled in upstream's log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpstreamKey<'a> {
    /// A top-level member with this key.
    Flat(&'a str),
    /// A Kubernetes object, logged as `"Kind":{"name":"..."}` (controller-runtime's form).
    Object(&'static str),
}

impl<'a> UpstreamKey<'a> {
    fn name(self) -> &'a str {
        match self {
            Self::Flat(name) => name,
            Self::Object(kind) => kind,
        }
    }
}

/// The key upstream's logs use for a field. Rust field names cannot contain `-`, and call
/// sites name objects in lower case (`nodeclaim = %name`), while upstream writes
/// `"provider-id"`, `"instance-type"`, `"capacity-type"` and `"NodeClaim":{"name":...}`;
/// translating here keeps log queries written for upstream (`NodeClaim.name`, `provider-id`)
/// working without every call site spelling keys in a non-Rust way.
fn upstream_key(key: &str) -> UpstreamKey<'_> {
    match key {
        "nodeclaim" => UpstreamKey::Object("NodeClaim"),
        "nodepool" => UpstreamKey::Object("NodePool"),
        "node" => UpstreamKey::Object("Node"),
        "ec2nodeclass" => UpstreamKey::Object("EC2NodeClass"),
        "provider_id" => UpstreamKey::Flat("provider-id"),
        "instance_type" => UpstreamKey::Flat("instance-type"),
        "instance_types" => UpstreamKey::Flat("instance-types"),
        "capacity_type" => UpstreamKey::Flat("capacity-type"),
        "instance_id" => UpstreamKey::Flat("instance-id"),
        "image_id" => UpstreamKey::Flat("image-id"),
        other => UpstreamKey::Flat(other),
    }
}

/// Writes `value` as a JSON string literal.
fn write_json_string(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if u32::from(c) < 0x20 => write!(out, "\\u{:04x}", u32::from(c))?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

/// One log destination from `LOG_OUTPUT_PATHS` or `LOG_ERROR_OUTPUT_PATHS`.
enum Sink {
    Stdout,
    Stderr,
    File { path: PathBuf, file: Mutex<File> },
}

impl Sink {
    /// `stdout`, `stderr`, or a file path (or `file://` URL, as zap accepts) opened for appending.
    fn open(spec: &str, variable: &str) -> anyhow::Result<Self> {
        match spec {
            "stdout" => Ok(Self::Stdout),
            "stderr" => Ok(Self::Stderr),
            _ => {
                let path = PathBuf::from(spec.strip_prefix("file://").unwrap_or(spec));
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .with_context(|| {
                        format!(
                            "{variable}: cannot open log file {}; use stdout, stderr or a writable path",
                            path.display()
                        )
                    })?;
                Ok(Self::File {
                    path,
                    file: Mutex::new(file),
                })
            }
        }
    }

    fn write_all(&self, line: &[u8]) -> io::Result<()> {
        match self {
            Self::Stdout => io::stdout().lock().write_all(line),
            Self::Stderr => io::stderr().lock().write_all(line),
            Self::File { file, .. } => file
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .write_all(line),
        }
    }

    fn name(&self) -> String {
        match self {
            Self::Stdout => "stdout".to_string(),
            Self::Stderr => "stderr".to_string(),
            Self::File { path, .. } => path.display().to_string(),
        }
    }
}

/// Every output path, plus the error paths that hear about lines that could not be written.
#[derive(Clone)]
struct Outputs {
    sinks: Arc<Vec<Sink>>,
    errors: Arc<Vec<Sink>>,
}

impl Outputs {
    fn open(outputs: &[String], errors: &[String]) -> anyhow::Result<Self> {
        let open = |specs: &[String], variable: &str| -> anyhow::Result<Vec<Sink>> {
            specs
                .iter()
                .map(|s| s.trim())
                .filter(|s| !s.is_empty())
                .map(|s| Sink::open(s, variable))
                .collect()
        };
        Ok(Self {
            sinks: Arc::new(open(outputs, "LOG_OUTPUT_PATHS")?),
            errors: Arc::new(open(errors, "LOG_ERROR_OUTPUT_PATHS")?),
        })
    }
}

impl io::Write for &Outputs {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        for sink in self.sinks.iter() {
            if let Err(e) = sink.write_all(line) {
                let report = format!(
                    "{} write error: {}: {e}\n",
                    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                    sink.name()
                );
                for error_sink in self.errors.iter() {
                    // Nowhere left to report a failure to report a failure.
                    let _ = error_sink.write_all(report.as_bytes());
                }
            }
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Outputs {
    type Writer = &'a Outputs;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Captures formatted lines in memory.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("buffer lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    /// Runs `f` with a subscriber at `level` and returns the lines it logged.
    fn capture_raw(level: LogLevel, f: impl FnOnce()) -> Vec<String> {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(layer(level, buffer.clone()));
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.0.lock().expect("buffer lock").clone();
        let text = String::from_utf8(bytes).expect("UTF-8");
        assert!(text.is_empty() || text.ends_with('\n'), "{text}");
        text.lines().map(str::to_string).collect()
    }

    /// Like [`capture_raw`], with each line parsed as JSON.
    fn capture(level: LogLevel, f: impl FnOnce()) -> Vec<Value> {
        capture_raw(level, f)
            .iter()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }

    #[test]
    fn lines_have_upstreams_keys_with_fields_at_the_top_level() {
        let raw = capture_raw(LogLevel::Info, || {
            let span = tracing::info_span!(
                "reconcile",
                controller = "nodeclaim.lifecycle",
                reconcileID = tracing::field::Empty
            );
            let _entered = span.enter();
            span.record("reconcileID", "5a2c");
            let name = "default-x7k2p";
            tracing::info!(
                nodeclaim = %name,
                nodepool = "default",
                provider_id = "aws:///us-west-2b/i-0123456789abcdef0",
                instance_type = "m5.large",
                zone = "us-west-2b",
                capacity_type = "spot",
                pods = 3_u64,
                price = 0.0557,
                spot = true,
                "launched nodeclaim"
            );
        });
        assert_eq!(raw.len(), 1);
        let parsed: Value = serde_json::from_str(&raw[0]).expect("a JSON line");
        let line = parsed.as_object().expect("an object");
        let time = line["time"].as_str().expect("time is a string");
        let at = chrono::DateTime::parse_from_rfc3339(time).expect("RFC 3339");
        assert_eq!(at.offset().local_minus_utc(), 0, "UTC");
        assert!(
            time.ends_with('Z') && time.len() == "2024-01-01T00:00:00.000Z".len(),
            "{time}"
        );
        let mut without_time = parsed.clone();
        without_time
            .as_object_mut()
            .expect("an object")
            .remove("time");
        assert_eq!(
            without_time,
            json!({
                "level": "INFO",
                "logger": "controller",
                "message": "launched nodeclaim",
                "controller": "nodeclaim.lifecycle",
                "reconcileID": "5a2c",
                "NodeClaim": {"name": "default-x7k2p"},
                "NodePool": {"name": "default"},
                "provider-id": "aws:///us-west-2b/i-0123456789abcdef0",
                "instance-type": "m5.large",
                "zone": "us-west-2b",
                "capacity-type": "spot",
                "pods": 3,
                "price": 0.0557,
                "spot": true,
            })
        );
        // Upstream's key order: level, time, logger, message, then the fields (spans first).
        assert!(
            raw[0].starts_with("{\"level\":\"INFO\",\"time\":\""),
            "{}",
            raw[0]
        );
        assert!(
            raw[0].contains("\"logger\":\"controller\",\"message\":\"launched nodeclaim\",\"controller\":\"nodeclaim.lifecycle\",\"reconcileID\":\"5a2c\",\"NodeClaim\":{\"name\":\"default-x7k2p\"},"),
            "{}",
            raw[0]
        );
    }

    #[test]
    fn levels_are_upper_case_and_filtered() {
        let lines = capture(LogLevel::Info, || {
            tracing::debug!("hidden");
            tracing::info!("shown");
            tracing::warn!("careful");
            tracing::error!(error = "boom", "failed");
        });
        let levels: Vec<&str> = lines
            .iter()
            .map(|l| l["level"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(levels, ["INFO", "WARN", "ERROR"]);
        assert_eq!(lines[2]["error"], "boom");

        let lines = capture(LogLevel::Error, || {
            tracing::warn!("hidden");
            tracing::error!("shown");
        });
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["message"], "shown");
    }

    #[test]
    fn debug_level_adds_the_caller() {
        let lines = capture(LogLevel::Debug, || tracing::debug!("detail"));
        assert_eq!(lines[0]["level"], "DEBUG");
        let caller = lines[0]["caller"].as_str().expect("caller at debug level");
        assert!(caller.starts_with("src/operator/logging.rs:"), "{caller}");
        let lines = capture(LogLevel::Info, || tracing::info!("plain"));
        assert!(lines[0].get("caller").is_none());
    }

    #[test]
    fn other_crates_stay_at_info_when_debugging() {
        let lines = capture(LogLevel::Debug, || {
            tracing::debug!(target: "kube_client::client", "request");
            tracing::info!(target: "kube_runtime::watcher", "watch restarted");
        });
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["message"], "watch restarted");
    }

    #[test]
    fn logger_field_names_the_logger_and_strings_are_escaped() {
        let lines = capture(LogLevel::Info, || {
            tracing::info!(
                logger = "interruption",
                detail = "a \"quoted\"\nline\t\u{1}",
                "x"
            );
        });
        assert_eq!(lines[0]["logger"], "interruption");
        assert_eq!(lines[0]["detail"], "a \"quoted\"\nline\t\u{1}");
    }

    #[test]
    fn lines_go_to_files_and_write_failures_to_the_error_paths() {
        let dir = std::env::temp_dir().join(format!("karpenter-rs-logging-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log = dir.join("controller.log");
        let errors = dir.join("errors.log");
        let outputs = Outputs::open(
            &[format!("file://{}", log.display()), "/dev/full".to_string()],
            &[errors.display().to_string()],
        )
        .expect("outputs open");
        let subscriber = tracing_subscriber::registry().with(layer(LogLevel::Info, outputs));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(zone = "us-east-1a", "hello")
        });
        let written = std::fs::read_to_string(&log).expect("log file");
        let line: Value = serde_json::from_str(written.trim_end()).expect("one JSON line");
        assert_eq!(line["message"], "hello");
        assert_eq!(line["zone"], "us-east-1a");
        let reported = std::fs::read_to_string(&errors).expect("error file");
        assert!(reported.contains(" write error: /dev/full: "), "{reported}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn an_unopenable_output_path_is_an_error_naming_the_setting() {
        let err = match Outputs::open(
            &["/nonexistent-karpenter-rs-dir/x.log".to_string()],
            &["stderr".to_string()],
        ) {
            Ok(_) => panic!("the directory does not exist"),
            Err(e) => e,
        };
        assert!(
            err.to_string().starts_with(
                "LOG_OUTPUT_PATHS: cannot open log file /nonexistent-karpenter-rs-dir/x.log"
            ),
            "{err}"
        );
    }
}
