//! Durations as Karpenter's manifests write them (`720h`, `1h30m`, `0s`, `Never`).
//!
//! The API server only checks the string pattern; the controller needs the value. Keeping the
//! original text next to the parsed value means a manifest round-trips byte for byte.

use std::fmt;
use std::str::FromStr;
use std::time::Duration as StdDuration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a duration string was rejected; says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: {reason}; use digits followed by h, m or s, repeated (e.g. \"720h\", \"1h30m\", \"30s\"), or \"Never\" where the field allows it"
)]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

/// Parses `1h30m`-style durations (digits followed by `h`, `m` or `s`, repeated), the subset of
/// Go's `time.ParseDuration` that Karpenter's CRD patterns admit.
pub fn parse_duration(input: &str) -> Result<StdDuration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    if input.is_empty() {
        return Err(err("it is empty"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in input.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'h' | 'm' | 's' => {
                if digits.is_empty() {
                    return Err(err("a unit has no number before it"));
                }
                let n: u64 = digits.parse().map_err(|_| err("a number is too large"))?;
                let secs = match c {
                    'h' => n.checked_mul(3600),
                    'm' => n.checked_mul(60),
                    _ => Some(n),
                }
                .ok_or_else(|| err("it is too large"))?;
                total = total
                    .checked_add(secs)
                    .ok_or_else(|| err("it is too large"))?;
                digits.clear();
            }
            _ => return Err(err("it contains a character other than digits and h, m, s")),
        }
    }
    if !digits.is_empty() {
        return Err(err("the last number has no unit"));
    }
    Ok(StdDuration::from_secs(total))
}

/// Formats a duration compactly (`720h`, `1h30m`, `45s`), the way people write them in manifests.
pub fn format_duration(d: StdDuration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in [('h', 3600), ('m', 60), ('s', 1)] {
        let n = (secs / size) % if unit == 'h' { u64::MAX } else { 60 };
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// A duration field such as `terminationGracePeriod` or `budgets[].duration`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duration {
    text: String,
    value: StdDuration,
}

impl Duration {
    /// The parsed value.
    pub fn get(&self) -> StdDuration {
        self.value
    }

    /// A duration written compactly, e.g. `720h`.
    pub fn from_std(value: StdDuration) -> Self {
        Self {
            text: format_duration(value),
            value,
        }
    }
}

impl FromStr for Duration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self {
            text: s.to_string(),
            value: parse_duration(s)?,
        })
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": "^([0-9]+(s|m|h))+$"})
    }
    fn inline_schema() -> bool {
        true
    }
}

/// A duration that may be `Never` (`expireAfter`, `consolidateAfter`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NillableDuration {
    /// The action never happens.
    Never,
    /// The action happens after this long.
    After(Duration),
}

impl NillableDuration {
    /// The duration, or `None` for `Never`.
    pub fn get(&self) -> Option<StdDuration> {
        match self {
            Self::Never => None,
            Self::After(d) => Some(d.get()),
        }
    }
}

impl FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "Never" {
            Ok(Self::Never)
        } else {
            s.parse().map(Self::After)
        }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Never => f.write_str("Never"),
            Self::After(d) => d.fmt(f),
        }
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NillableDuration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": "^(([0-9]+(s|m|h))+|Never)$"})
    }
    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse_duration("720h").unwrap().as_secs(), 720 * 3600);
        assert_eq!(parse_duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("0s").unwrap().as_secs(), 0);
        assert_eq!(parse_duration("90s").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("1h0m0s").unwrap().as_secs(), 3600);
    }

    #[test]
    fn rejects_malformed_durations_with_the_reason() {
        for bad in ["", "h", "10", "1.5h", "10d", "-1h", "1hx"] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("e.g. \"720h\""), "{e}");
        }
    }

    #[test]
    fn never_and_durations_round_trip() {
        let never: NillableDuration = "Never".parse().unwrap();
        assert_eq!(never.get(), None);
        assert_eq!(never.to_string(), "Never");
        let d: NillableDuration = "1440h".parse().unwrap();
        assert_eq!(d.get(), Some(StdDuration::from_secs(1440 * 3600)));
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1440h\"");
        assert!("never".parse::<NillableDuration>().is_err());
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format_duration(StdDuration::from_secs(0)), "0s");
        assert_eq!(format_duration(StdDuration::from_secs(30)), "30s");
        assert_eq!(format_duration(StdDuration::from_secs(3600)), "1h");
        assert_eq!(format_duration(StdDuration::from_secs(720 * 3600)), "720h");
        assert_eq!(format_duration(StdDuration::from_secs(5430)), "1h30m30s");
        assert_eq!(format_duration(StdDuration::from_secs(120)), "2m");
    }
}
