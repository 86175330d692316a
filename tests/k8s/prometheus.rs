//! A real Prometheus for the control-plane tests: Debian's `prometheus` (on PATH; hack/test.sh
//! installs the package) scraping the controller, and PromQL evaluated by it through its HTTP
//! API, as Grafana and the alert rules would.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::harness::{free_port, wait_until};

/// Debian's Prometheus, scraping one target every second from a free loopback port, its data
/// in the test's temporary directory. Killed by PID when dropped.
pub struct Prometheus {
    child: Child,
    port: u16,
}

/// One series of an instant query's answer: its labels and its value.
pub type Series = (serde_json::Value, f64);

impl Prometheus {
    pub fn start(job: &str, target_port: u16) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prometheus-{job}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: {job}\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
            ),
        )
        .expect("prometheus config");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start prometheus (Debian's prometheus package; hack/test.sh installs it)");
        Self { child, port }
    }

    /// An instant query: `Err` with Prometheus' message when it refuses the expression, else
    /// each series' labels and value.
    pub async fn query(&self, expr: &str) -> Result<Vec<Series>, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let encoded: String = expr
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        // HTTP/1.0: the body arrives whole, never chunked.
        let request =
            format!("GET /api/v1/query?query={encoded} HTTP/1.0\r\nHost: localhost\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let answer: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("{e}: {response}"))?;
        if answer["status"] != "success" {
            return Err(answer["error"].to_string());
        }
        Ok(answer["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (s["metric"].clone(), value)
            })
            .collect())
    }

    /// The single value an aggregating query gives, once it gives one.
    pub async fn value(&self, expr: &str) -> Option<f64> {
        match self.query(expr).await {
            Ok(series) if series.len() == 1 => Some(series[0].1),
            _ => None,
        }
    }

    /// Each series' value by its `label` (a label a `by (...)` kept), once the query answers.
    pub async fn by_label(&self, expr: &str, label: &str) -> Option<BTreeMap<String, f64>> {
        let series = self.query(expr).await.ok()?;
        Some(
            series
                .into_iter()
                .map(|(labels, v)| (labels[label].as_str().unwrap_or_default().to_string(), v))
                .collect(),
        )
    }

    /// Waits until `expr` gives the single value `expected`; fails naming the last answer.
    pub async fn wait_for_value(&self, what: &str, expr: &str, expected: f64) {
        wait_until(what, || async {
            match self.query(expr).await {
                Ok(series) if series.len() == 1 && series[0].1 == expected => Ok(()),
                answer => Err(format!("{expr} answers {answer:?}, not {expected}")),
            }
        })
        .await;
    }

    /// Waits until `expr` has at least one series with a finite value (a panel with data, not
    /// the NaN of a quantile over no observations); returns the series.
    pub async fn wait_for_data(&self, what: &str, expr: &str) -> Vec<Series> {
        wait_until(what, || async {
            match self.query(expr).await {
                Ok(series) if series.iter().any(|(_, v)| v.is_finite()) => Ok(series),
                answer => Err(format!("{expr} answers {answer:?}")),
            }
        })
        .await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An expression from upstream Karpenter's Grafana dashboards as Grafana sends it with the
/// dashboards' default variable values: every filter (`$nodepool`, `$zone`, `$arch`,
/// `$capacity_type`, `$instance_type`) at "All", the capacity dashboard's `$distribution_filter`
/// at `nodepool`, the performance dashboard's `$controller` at `disruption`, and
/// `$__rate_interval` at one minute (four scrapes of the test's 1-second interval and more).
pub fn upstream(expr: &str) -> String {
    expr.replace("$distribution_filter", "nodepool")
        .replace("$controller", "disruption")
        .replace("$__rate_interval", "1m")
        .replace("$nodepool", ".*")
        .replace("$zone", ".*")
        .replace("$arch", ".*")
        .replace("$capacity_type", ".*")
        .replace("$instance_type", ".*")
}
