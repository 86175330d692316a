//! Prices: on-demand from the AWS Price List API (with the bundled table as the fallback when the
//! API is unreachable, e.g. in isolated VPCs), spot from EC2's spot price history.
//!
//! Offerings without a price are not offered, so a price table that is empty by mistake must
//! never replace a good one: callers keep the previous table when a refresh fails.

use std::collections::HashMap;

use aws_sdk_ec2::primitives::DateTime as AwsDateTime;
use aws_sdk_pricing::types::{Filter as PriceFilter, FilterType};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::cloudprovider::CloudError;

use super::sdk_error;

/// On-demand price per instance type, USD per hour.
pub type OnDemandPrices = HashMap<String, f64>;
/// Spot price per (instance type, zone), USD per hour.
pub type SpotPrices = HashMap<(String, String), f64>;

/// The prices offerings are built with.
#[derive(Clone, Debug, Default)]
pub struct Prices {
    /// On-demand prices.
    pub on_demand: OnDemandPrices,
    /// Spot prices.
    pub spot: SpotPrices,
    /// Whether spot prices have been fetched at least once; until then a spot offering is priced
    /// like on-demand (upstream's default), afterwards a pool without a spot price is not sold.
    pub spot_fetched: bool,
}

impl Prices {
    /// The spot price of a pool, per the rule on [`Prices::spot_fetched`].
    pub fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64> {
        match self
            .spot
            .get(&(instance_type.to_string(), zone.to_string()))
        {
            Some(p) => Some(*p),
            None if !self.spot_fetched => self.on_demand.get(instance_type).copied(),
            None => None,
        }
    }
}

/// The region whose Price List endpoint serves `region`: the API lives in a few regions only.
pub fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// The on-demand prices the bundled catalog knows for a region (us-east-1's when the region is
/// not bundled, as upstream's static table falls back).
pub fn bundled_on_demand(region: &str) -> OnDemandPrices {
    let catalog = Catalog::bundled(region).or_else(|_| Catalog::bundled("us-east-1"));
    catalog
        .map(|c| {
            c.on_demand_prices()
                .map(|(name, price)| (name.to_string(), price))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads on-demand Linux prices out of GetProducts `PriceList` entries (each a JSON document);
/// entries that are not hourly USD prices for one instance type are skipped.
pub fn parse_price_list<'a>(
    entries: impl IntoIterator<Item = &'a str>,
) -> Result<OnDemandPrices, String> {
    let mut out = OnDemandPrices::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let doc: Value =
            serde_json::from_str(entry).map_err(|e| format!("PriceList[{i}] is not JSON: {e}"))?;
        let Some(instance_type) = doc
            .pointer("/product/attributes/instanceType")
            .and_then(Value::as_str)
        else {
            continue;
        };
        let price = doc
            .pointer("/terms/OnDemand")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|terms| terms.values())
            .filter_map(|term| term.get("priceDimensions").and_then(Value::as_object))
            .flat_map(|dims| dims.values())
            .filter(|dim| dim.get("unit").and_then(Value::as_str) == Some("Hrs"))
            .filter_map(|dim| dim.pointer("/pricePerUnit/USD").and_then(Value::as_str))
            .filter_map(|usd| usd.parse::<f64>().ok())
            .find(|p| *p > 0.0);
        if let Some(price) = price {
            out.insert(instance_type.to_string(), price);
        }
    }
    Ok(out)
}

fn term(field: &str, value: &str) -> Result<PriceFilter, CloudError> {
    PriceFilter::builder()
        .field(field)
        .value(value)
        .r#type(FilterType::TermMatch)
        .build()
        .map_err(|e| CloudError::Invalid(format!("pricing filter {field}: {e}")))
}

/// On-demand Linux prices for `region` from the Price List API: shared-tenancy instances and
/// bare-metal (dedicated) ones, as two queries.
pub async fn fetch_on_demand(
    client: &aws_sdk_pricing::Client,
    region: &str,
) -> Result<OnDemandPrices, CloudError> {
    let mut out = OnDemandPrices::new();
    for (tenancy, family) in [
        ("Shared", "Compute Instance"),
        ("Dedicated", "Compute Instance (bare metal)"),
    ] {
        let filters = vec![
            term("regionCode", region)?,
            term("serviceCode", "AmazonEC2")?,
            term("preInstalledSw", "NA")?,
            term("operatingSystem", "Linux")?,
            term("capacitystatus", "Used")?,
            term("marketoption", "OnDemand")?,
            term("tenancy", tenancy)?,
            term("productFamily", family)?,
        ];
        let mut pages = client
            .get_products()
            .service_code("AmazonEC2")
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("pricing:GetProducts", e))?;
            let prices = parse_price_list(page.price_list().iter().map(String::as_str))
                .map_err(CloudError::Transient)?;
            out.extend(prices);
        }
    }
    Ok(out)
}

/// The latest price per (instance type, zone) out of spot price history records
/// `(instance type, zone, price, timestamp)`.
pub fn latest_spot_prices<'a>(
    records: impl IntoIterator<Item = (&'a str, &'a str, &'a str, Option<DateTime<Utc>>)>,
) -> SpotPrices {
    type Seen = (Option<DateTime<Utc>>, f64);
    let mut latest: HashMap<(String, String), Seen> = HashMap::new();
    for (instance_type, zone, price, at) in records {
        let Ok(price) = price.parse::<f64>() else {
            continue;
        };
        let key = (instance_type.to_string(), zone.to_string());
        match latest.get(&key) {
            Some((seen, _)) if *seen >= at => {}
            _ => {
                latest.insert(key, (at, price));
            }
        }
    }
    latest.into_iter().map(|(k, (_, p))| (k, p)).collect()
}

/// Current spot prices for Linux instances in every zone of the client's region.
pub async fn fetch_spot(
    ec2: &aws_sdk_ec2::Client,
    now: DateTime<Utc>,
) -> Result<SpotPrices, CloudError> {
    let mut pages = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .product_descriptions("Linux/UNIX (Amazon VPC)")
        .start_time(AwsDateTime::from_secs(now.timestamp()))
        .max_results(1000)
        .into_paginator()
        .send();
    let mut records = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("ec2:DescribeSpotPriceHistory", e))?;
        for p in page.spot_price_history() {
            let (Some(t), Some(zone), Some(price)) =
                (p.instance_type(), p.availability_zone(), p.spot_price())
            else {
                continue;
            };
            let at = p
                .timestamp()
                .and_then(|ts| DateTime::<Utc>::from_timestamp(ts.secs(), ts.subsec_nanos()));
            records.push((
                t.as_str().to_string(),
                zone.to_string(),
                price.to_string(),
                at,
            ));
        }
    }
    Ok(latest_spot_prices(records.iter().map(|(t, z, p, at)| {
        (t.as_str(), z.as_str(), p.as_str(), *at)
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn price_list_entries_give_hourly_usd_prices() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/aws/pricing-get-products.json"
        ))
        .expect("fixture");
        let entries: Vec<&str> = fixture["pages"]
            .as_array()
            .expect("pages")
            .iter()
            .flat_map(|p| p["PriceList"].as_array().expect("PriceList"))
            .filter_map(Value::as_str)
            .collect();
        let prices = parse_price_list(entries).expect("parse");
        assert_eq!(prices.get("m5.large"), Some(&0.096));
        assert_eq!(prices.get("c6g.large"), Some(&0.068));
        assert_eq!(prices.get("m5.metal"), Some(&4.608));
        assert!(!prices.contains_key("t3.nano"), "a zero price is no price");
        assert!(parse_price_list(["not json"]).is_err());
    }

    #[test]
    fn the_newest_spot_price_wins() {
        let t = |h| {
            Some(
                Utc.with_ymd_and_hms(2025, 1, 1, h, 0, 0)
                    .single()
                    .expect("time"),
            )
        };
        let prices = latest_spot_prices([
            ("m5.large", "us-east-1a", "0.040", t(1)),
            ("m5.large", "us-east-1a", "0.035", t(3)),
            ("m5.large", "us-east-1a", "0.050", t(2)),
            ("m5.large", "us-east-1b", "0.041", t(1)),
            ("m5.large", "us-east-1c", "n/a", t(1)),
        ]);
        assert_eq!(
            prices[&("m5.large".to_string(), "us-east-1a".to_string())],
            0.035
        );
        assert_eq!(
            prices[&("m5.large".to_string(), "us-east-1b".to_string())],
            0.041
        );
        assert_eq!(prices.len(), 2);
    }

    #[test]
    fn pricing_endpoints_and_the_bundled_fallback() {
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        let bundled = bundled_on_demand("eu-west-9");
        assert_eq!(bundled.get("m5.large"), Some(&0.096));
    }
}
