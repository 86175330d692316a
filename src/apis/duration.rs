//! Durations, the one parser for all of them, and the one way a duration meets a timestamp.
//!
//! Every duration karpenter-rs reads is parsed by one grammar and held to one range: CRD fields
//! (`720h`, `1h30m`, `Never`) by [`parse_duration`], which first checks the CRD pattern; the
//! `karpenter.sh/do-not-disrupt` annotation, the settings and the CLI flags by
//! [`parse_go_duration`]. Upstream reads all of them with Go's `time.ParseDuration`, whose
//! `time.Duration` is signed 64-bit nanoseconds, so anything longer than [`MAX`] (about 292
//! years) is rejected here, where it is read, with the limit named, instead of overflowing date
//! arithmetic later. [`saturating_add`] and
//! [`saturating_sub`] are how a duration meets a timestamp: a deadline too far out to represent
//! lands on [`NEVER`] and so never comes; it never wraps or falls back to "now".
//!
//! The API server only checks the string pattern; the controller needs the value. Keeping the
//! original text next to the parsed value means a manifest round-trips byte for byte.

use std::fmt;
use std::str::FromStr;
use std::time::Duration as StdDuration;

use chrono::{DateTime, TimeDelta, Utc};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest duration Go's `time.ParseDuration` accepts: `i64::MAX` nanoseconds.
pub const MAX: StdDuration = StdDuration::new(9_223_372_036, 854_775_807);

/// [`MAX`] as Go prints it, for error messages.
const MAX_TEXT: &str = "2562047h47m16.854775807s";

/// The far future: where a deadline too far out to represent lands. It is later than any time a
/// clock, a manifest or the API server can show, so such a deadline never comes.
pub const NEVER: DateTime<Utc> = DateTime::<Utc>::MAX_UTC;

/// Which grammar a duration was read with; decides the hint an error gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Syntax {
    /// The CRD pattern `^([0-9]+(s|m|h))+$`.
    Crd,
    /// All of Go's `time.ParseDuration`.
    Go,
}

/// Why a duration string was rejected; says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid duration: {reason}; {}", hint(*.syntax))]
pub struct DurationError {
    input: String,
    reason: String,
    syntax: Syntax,
}

fn hint(syntax: Syntax) -> &'static str {
    match syntax {
        Syntax::Crd => {
            "use digits followed by h, m or s, repeated (e.g. \"720h\", \"1h30m\", \"30s\"), or \"Never\" where the field allows it"
        }
        Syntax::Go => {
            "write a number and a unit (ns, us, ms, s, m, h), repeated, e.g. 10s, 1m30s or 500ms"
        }
    }
}

/// Parses `1h30m`-style durations (digits followed by `h`, `m` or `s`, repeated): what
/// Karpenter's CRD patterns admit, with Go's range.
pub fn parse_duration(input: &str) -> Result<StdDuration, DurationError> {
    let err = |reason: &str| DurationError {
        input: input.to_string(),
        reason: reason.to_string(),
        syntax: Syntax::Crd,
    };
    if input.is_empty() {
        return Err(err("it is empty"));
    }
    let mut after_digit = false;
    for c in input.chars() {
        match c {
            '0'..='9' => after_digit = true,
            'h' | 'm' | 's' if after_digit => after_digit = false,
            'h' | 'm' | 's' => return Err(err("a unit has no number before it")),
            _ => return Err(err("it contains a character other than digits and h, m, s")),
        }
    }
    if after_digit {
        return Err(err("the last number has no unit"));
    }
    parse(input, Syntax::Crd)
}

/// Parses durations the way Go's `time.ParseDuration` does (`10s`, `1m30s`, `500ms`, `1.5h`,
/// `0`), for the settings, the CLI flags and the `karpenter.sh/do-not-disrupt` annotation, which
/// upstream reads with it. Negative durations are rejected: nothing here means anything by them
/// (a negative do-not-disrupt period would have protected nothing anyway).
pub fn parse_go_duration(input: &str) -> Result<StdDuration, DurationError> {
    parse(input, Syntax::Go)
}

fn parse(input: &str, syntax: Syntax) -> Result<StdDuration, DurationError> {
    let bad = |reason: &str| DurationError {
        input: input.to_string(),
        reason: reason.to_string(),
        syntax,
    };
    let too_large = || {
        bad(&format!(
            "it is longer than {MAX_TEXT} (about 292 years), the longest duration Go (and so Karpenter) accepts, so shorten it"
        ))
    };
    let (negative, unsigned) = match input.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, input.strip_prefix('+').unwrap_or(input)),
    };
    if unsigned == "0" {
        return Ok(StdDuration::ZERO);
    }
    if unsigned.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total_nanos: u128 = 0;
    let mut rest = unsigned;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_digits, after_int) = rest.split_at(int_len);
        let (frac_digits, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after_dot.len());
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(bad("a unit has no number before it"));
        }
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(bad("a number has no unit")),
            _ => return Err(bad(&format!("{unit:?} is not a unit"))),
        };
        let int: u128 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse().map_err(|_| too_large())?
        };
        let mut nanos = int.checked_mul(unit_nanos).ok_or_else(too_large)?;
        // Fraction digits beyond nanosecond precision cannot change the result (Go drops them).
        let mut scale = unit_nanos;
        for digit in frac_digits.bytes() {
            scale /= 10;
            nanos = nanos
                .checked_add(u128::from(digit - b'0') * scale)
                .ok_or_else(too_large)?;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(too_large)?;
        rest = after_unit;
    }
    if negative && total_nanos > 0 {
        return Err(bad("it is negative"));
    }
    if total_nanos > MAX.as_nanos() {
        return Err(too_large());
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| too_large())?;
    let subsec = u32::try_from(total_nanos % 1_000_000_000).map_err(|_| too_large())?;
    Ok(StdDuration::new(secs, subsec))
}

/// `at + d`, saturating at [`NEVER`]: a deadline beyond what a timestamp can hold never comes,
/// so it must compare after every real "now", not wrap, panic or fall back to "now".
pub fn saturating_add(at: DateTime<Utc>, d: StdDuration) -> DateTime<Utc> {
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(NEVER)
}

/// `at - d`, saturating at the distant past (the start of a window that has always been open).
pub fn saturating_sub(at: DateTime<Utc>, d: StdDuration) -> DateTime<Utc> {
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| at.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
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
        for bad in ["", "h", "10", "1.5h", "10d", "-1h", "1hx", "5ms", "0"] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("e.g. \"720h\""), "{e}");
        }
    }

    #[test]
    fn crd_durations_have_go_range() {
        assert_eq!(
            parse_duration("2562047h").unwrap(),
            StdDuration::from_secs(2_562_047 * 3600)
        );
        assert_eq!(
            parse_duration("2562047h47m16s").unwrap().as_secs(),
            MAX.as_secs()
        );
        for too_long in [
            "2562047h47m17s",
            "2562048h",
            "9999999999h",
            "99999999999999999999999999999999999999999h",
            "5124095576030431h",
        ] {
            let e = parse_duration(too_long).unwrap_err().to_string();
            assert!(e.contains("longer than 2562047h47m16.854775807s"), "{e}");
            assert!(e.contains(&format!("{too_long:?}")), "{e}");
            assert!(e.contains("\"Never\" where the field allows it"), "{e}");
        }
        let e = "9999999999h".parse::<NillableDuration>().unwrap_err();
        assert!(e.to_string().contains("292 years"), "{e}");
    }

    #[test]
    fn go_durations_parse_like_go() {
        let ok = |s: &str| parse_go_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("10s"), StdDuration::from_secs(10));
        assert_eq!(ok("1m30s"), StdDuration::from_secs(90));
        assert_eq!(ok("500ms"), StdDuration::from_millis(500));
        assert_eq!(ok("1.5h"), StdDuration::from_secs(5400));
        assert_eq!(ok("2h45m0.5s"), StdDuration::from_millis(9_900_500));
        assert_eq!(ok(".5s"), StdDuration::from_millis(500));
        assert_eq!(ok("1us"), StdDuration::from_micros(1));
        assert_eq!(ok("1\u{b5}s"), StdDuration::from_micros(1));
        assert_eq!(ok("3ns"), StdDuration::from_nanos(3));
        assert_eq!(ok("0"), StdDuration::ZERO);
        assert_eq!(ok("+5m"), StdDuration::from_secs(300));
        assert_eq!(ok("-0s"), StdDuration::ZERO);
        assert_eq!(
            ok("1.0000000009s"),
            StdDuration::from_secs(1),
            "Go drops sub-ns digits"
        );
        assert_eq!(ok(MAX_TEXT), MAX);
        assert_eq!(ok("9223372036854775807ns"), MAX);
        for (bad, why) in [
            ("", "it is empty"),
            ("10", "a number has no unit"),
            ("1x", "\"x\" is not a unit"),
            ("-1s", "it is negative"),
            ("s", "a unit has no number before it"),
            (
                "2562047h47m16.854775808s",
                "longer than 2562047h47m16.854775807s",
            ),
            (
                "9223372036854775808ns",
                "longer than 2562047h47m16.854775807s",
            ),
            ("3000000h", "longer than 2562047h47m16.854775807s"),
            ("1.5e3h", "\"e\" is not a unit"),
        ] {
            let err = parse_go_duration(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.contains("e.g. 10s, 1m30s or 500ms"), "{err}");
        }
    }

    #[test]
    fn deadlines_saturate_at_never() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(
            saturating_add(now, StdDuration::from_secs(90)),
            DateTime::from_timestamp(1_800_000_090, 0).unwrap()
        );
        assert_eq!(
            saturating_add(now, MAX),
            now + TimeDelta::from_std(MAX).unwrap()
        );
        assert_eq!(saturating_add(now, StdDuration::MAX), NEVER);
        assert_eq!(saturating_add(NEVER, StdDuration::from_secs(1)), NEVER);
        let late = NEVER - TimeDelta::days(365);
        assert_eq!(saturating_add(late, MAX), NEVER);
        assert!(
            saturating_add(late, MAX) > late,
            "saturated is later, never earlier"
        );
        assert_eq!(
            saturating_sub(now, StdDuration::from_secs(90)),
            DateTime::from_timestamp(1_799_999_910, 0).unwrap()
        );
        assert_eq!(
            saturating_sub(now, StdDuration::MAX),
            DateTime::<Utc>::MIN_UTC
        );
        let early = DateTime::<Utc>::MIN_UTC + TimeDelta::days(365);
        assert_eq!(saturating_sub(early, MAX), DateTime::<Utc>::MIN_UTC);
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
