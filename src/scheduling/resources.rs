//! Resource amounts as integers (CPU in millicores, memory and storage in bytes, counts for the
//! rest), so the bin-packing inner loop compares and adds machine words instead of parsing
//! quantities.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name of CPU.
pub const CPU: &str = "cpu";
/// Resource name of memory.
pub const MEMORY: &str = "memory";
/// Resource name of the pod slots of a node.
pub const PODS: &str = "pods";
/// Resource name of local ephemeral storage.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// NVIDIA GPUs, the most common extended resource.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// Elastic Fabric Adapter devices (the EFA device plugin's resource).
pub const EFA: &str = "vpc.amazonaws.com/efa";

/// Why a quantity could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {resource}: {value:?} is not a valid quantity (e.g. \"500m\", \"2\", \"4Gi\")")]
pub struct QuantityError {
    /// The resource the quantity was for.
    pub resource: String,
    /// The quantity as written.
    pub value: String,
}

/// A vector of resource amounts. The four resources every node has are fields; extended
/// resources (GPUs, EFA, ...) are a short sorted list because most pods have none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Pod slots.
    pub pods: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Other resources by name, sorted by name, zero amounts omitted.
    pub extended: Vec<(Arc<str>, i64)>,
}

impl Resources {
    /// No resources.
    pub const ZERO: Resources = Resources {
        cpu: 0,
        memory: 0,
        pods: 0,
        ephemeral_storage: 0,
        extended: Vec::new(),
    };

    /// A vector with the given CPU (millicores) and memory (bytes).
    pub fn cpu_memory(cpu_millis: i64, memory_bytes: i64) -> Self {
        Self {
            cpu: cpu_millis,
            memory: memory_bytes,
            ..Self::default()
        }
    }

    /// The amount of one resource by name.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => self
                .extended
                .binary_search_by(|(n, _)| n.as_ref().cmp(name))
                .map(|i| self.extended[i].1)
                .unwrap_or(0),
        }
    }

    /// Sets the amount of one resource by name.
    pub fn set(&mut self, name: &str, amount: i64) {
        match name {
            CPU => self.cpu = amount,
            MEMORY => self.memory = amount,
            PODS => self.pods = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage = amount,
            _ => match self
                .extended
                .binary_search_by(|(n, _)| n.as_ref().cmp(name))
            {
                Ok(i) if amount == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = amount,
                Err(_) if amount == 0 => {}
                Err(i) => self.extended.insert(i, (Arc::from(name), amount)),
            },
        }
    }

    /// Adds `other` into `self`, saturating: requests that sum past `i64::MAX` (an absurd
    /// quantity, or many containers near the limit) stay at the maximum, which fits no node,
    /// instead of wrapping negative and fitting every node.
    pub fn add(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.pods = self.pods.saturating_add(other.pods);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        for (name, amount) in &other.extended {
            let current = self.get(name);
            self.set(name, current.saturating_add(*amount));
        }
    }

    /// Subtracts `other` from `self` (amounts may go negative), saturating like [`Self::add`].
    pub fn sub(&mut self, other: &Resources) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.pods = self.pods.saturating_sub(other.pods);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        for (name, amount) in &other.extended {
            let current = self.get(name);
            self.set(name, current.saturating_sub(*amount));
        }
    }

    /// The sum of two vectors.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.add(other);
        out
    }

    /// Per-resource maximum: what is needed to run either of two things one after the other.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut out = Resources {
            cpu: self.cpu.max(other.cpu),
            memory: self.memory.max(other.memory),
            pods: self.pods.max(other.pods),
            ephemeral_storage: self.ephemeral_storage.max(other.ephemeral_storage),
            extended: self.extended.clone(),
        };
        for (name, amount) in &other.extended {
            let current = out.get(name);
            out.set(name, current.max(*amount));
        }
        out
    }

    /// Per-resource minimum; a resource only one side lists counts as zero on the other, so
    /// the result is what both offer for sure.
    pub fn min(&self, other: &Resources) -> Resources {
        let mut out = Resources {
            cpu: self.cpu.min(other.cpu),
            memory: self.memory.min(other.memory),
            pods: self.pods.min(other.pods),
            ephemeral_storage: self.ephemeral_storage.min(other.ephemeral_storage),
            extended: Vec::new(),
        };
        for (name, amount) in &self.extended {
            out.set(name, (*amount).min(other.get(name)).max(0));
        }
        out
    }

    /// Whether `self` (a request) fits within `capacity`, resource by resource. A resource the
    /// capacity does not list has capacity zero.
    pub fn fits(&self, capacity: &Resources) -> bool {
        self.cpu <= capacity.cpu
            && self.memory <= capacity.memory
            && self.pods <= capacity.pods
            && self.ephemeral_storage <= capacity.ephemeral_storage
            && self
                .extended
                .iter()
                .all(|(name, amount)| *amount <= capacity.get(name))
    }

    /// The first resource for which `self` exceeds `capacity`, for explanations.
    pub fn first_exceeding(&self, capacity: &Resources) -> Option<&str> {
        if self.cpu > capacity.cpu {
            return Some(CPU);
        }
        if self.memory > capacity.memory {
            return Some(MEMORY);
        }
        if self.pods > capacity.pods {
            return Some(PODS);
        }
        if self.ephemeral_storage > capacity.ephemeral_storage {
            return Some(EPHEMERAL_STORAGE);
        }
        self.extended
            .iter()
            .find(|(name, amount)| *amount > capacity.get(name))
            .map(|(name, _)| name.as_ref())
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.cpu == 0
            && self.memory == 0
            && self.pods == 0
            && self.ephemeral_storage == 0
            && self.extended.is_empty()
    }

    /// Names and amounts of the non-zero resources, well-known ones first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.cpu),
            (MEMORY, self.memory),
            (PODS, self.pods),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
        ]
        .into_iter()
        .chain(self.extended.iter().map(|(n, a)| (n.as_ref(), *a)))
        .filter(|(_, a)| *a != 0)
    }

    /// Parses a Kubernetes resource list.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, QuantityError> {
        let mut out = Resources::default();
        for (name, quantity) in list {
            out.set(name, parse_quantity(name, &quantity.0)?);
        }
        Ok(out)
    }

    /// Renders the vector as a Kubernetes resource list.
    pub fn to_list(&self) -> BTreeMap<String, Quantity> {
        self.iter()
            .map(|(name, amount)| (name.to_string(), Quantity(format_amount(name, amount))))
            .collect()
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, amount) in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{name}: {}", format_amount(name, amount))?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Parses a quantity for a resource into our integer unit: millicores for CPU, bytes for
/// memory and storage, whole units (rounded up) for everything else. A valid quantity too large
/// for that unit (`cpu: 1Ei` is about 1.2e21 millicores) saturates at `i64::MAX`: no node offers
/// that much, so the pod is reported as fitting no instance type rather than as malformed.
pub fn parse_quantity(resource: &str, value: &str) -> Result<i64, QuantityError> {
    let err = || QuantityError {
        resource: resource.to_string(),
        value: value.to_string(),
    };
    let base = quantity_value(value.trim()).ok_or_else(err)?;
    let scaled = if resource == CPU { base * 1000.0 } else { base };
    // `as` saturates at the bounds of i64, infinity included.
    Ok(scaled.ceil() as i64)
}

/// The value of a Kubernetes quantity in base units (cores, bytes, counts), or `None` when the
/// text is not a quantity: a signed decimal number, then nothing, a decimal suffix (`n` … `E`),
/// a binary one (`Ki` … `Ei`) or a decimal exponent (`e3`, `E-2`). Parsed here rather than with
/// `kube_quantity`, which takes the `E` of `1E` and `1Ei` for an exponent and rejects them.
pub fn quantity_value(text: &str) -> Option<f64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let number_len = unsigned
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    if !number.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 2f64.powi(10),
        "Mi" => 2f64.powi(20),
        "Gi" => 2f64.powi(30),
        "Ti" => 2f64.powi(40),
        "Pi" => 2f64.powi(50),
        "Ei" => 2f64.powi(60),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Past ±400 every power of ten is already 0 or infinite as an f64.
            let exponent = exponent
                .parse::<i32>()
                .unwrap_or(if exponent.starts_with('-') {
                    i32::MIN
                } else {
                    i32::MAX
                });
            10f64.powi(exponent.clamp(-400, 400))
        }
    };
    // Zero times an infinite scale is zero, not NaN.
    let value = if number == 0.0 { 0.0 } else { number * scale };
    Some(if negative { -value } else { value })
}

/// Formats an amount the way `kubectl` users read it (`1500m`, `4Gi`, `110`).
pub fn format_amount(resource: &str, amount: i64) -> String {
    match resource {
        CPU if amount % 1000 == 0 => format!("{}", amount / 1000),
        CPU => format!("{amount}m"),
        MEMORY | EPHEMERAL_STORAGE => {
            const UNITS: [(&str, i64); 4] = [
                ("Ti", 1 << 40),
                ("Gi", 1 << 30),
                ("Mi", 1 << 20),
                ("Ki", 1 << 10),
            ];
            UNITS
                .iter()
                .find(|(_, size)| amount != 0 && amount % size == 0)
                .map(|(unit, size)| format!("{}{unit}", amount / size))
                .unwrap_or_else(|| amount.to_string())
        }
        _ => amount.to_string(),
    }
}

/// Mebibytes to bytes.
pub const fn mib(n: i64) -> i64 {
    n << 20
}

/// Gibibytes to bytes.
pub const fn gib(n: i64) -> i64 {
    n << 30
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quantities_into_integer_units() {
        assert_eq!(parse_quantity(CPU, "100m").unwrap(), 100);
        assert_eq!(parse_quantity(CPU, "1.5").unwrap(), 1500);
        assert_eq!(parse_quantity(CPU, "2").unwrap(), 2000);
        assert_eq!(parse_quantity(CPU, "0.0001").unwrap(), 1);
        assert_eq!(parse_quantity(MEMORY, "1Gi").unwrap(), gib(1));
        assert_eq!(parse_quantity(MEMORY, "512Mi").unwrap(), mib(512));
        assert_eq!(parse_quantity(MEMORY, "1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_quantity(MEMORY, "128974848").unwrap(), 128_974_848);
        assert_eq!(parse_quantity(PODS, "110").unwrap(), 110);
        assert_eq!(parse_quantity(NVIDIA_GPU, "1").unwrap(), 1);
        assert_eq!(parse_quantity(MEMORY, "1Ei").unwrap(), 1 << 60);
        assert_eq!(
            parse_quantity(MEMORY, "2E").unwrap(),
            2_000_000_000_000_000_000
        );
        assert_eq!(parse_quantity(MEMORY, "1.5e3").unwrap(), 1500);
        assert_eq!(parse_quantity(MEMORY, "+5.").unwrap(), 5);
        assert_eq!(parse_quantity(CPU, ".5").unwrap(), 500);
        assert_eq!(parse_quantity(CPU, "1E-3").unwrap(), 1);
        assert_eq!(parse_quantity(CPU, "0e999").unwrap(), 0);
        for bad in [
            "lots", "", ".", "1.2.3", "1e", "1e1.5", "1Xi", "1 Gi", "0x10", "inf", "--1",
        ] {
            let e = parse_quantity(MEMORY, bad).unwrap_err();
            assert!(e.to_string().contains("memory"), "{e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn huge_quantities_saturate_instead_of_failing_or_wrapping() {
        for huge in ["1Ei", "9223372036854775807", "8E", "1e30", "1e999"] {
            assert_eq!(parse_quantity(CPU, huge).unwrap(), i64::MAX, "{huge}");
        }
        assert_eq!(parse_quantity(MEMORY, "8Ei").unwrap(), i64::MAX);
        assert_eq!(parse_quantity(MEMORY, "-1e999").unwrap(), i64::MIN);
        let near = Resources::cpu_memory(i64::MAX - 1, i64::MAX - 1);
        let mut sum = Resources::ZERO;
        for _ in 0..100 {
            sum.add(&near);
        }
        assert_eq!(sum, Resources::cpu_memory(i64::MAX, i64::MAX));
        assert!(!sum.fits(&Resources::cpu_memory(i64::MAX - 1, i64::MAX)));
        let mut gpus = Resources::ZERO;
        gpus.set(NVIDIA_GPU, i64::MAX);
        assert_eq!(gpus.plus(&gpus).get(NVIDIA_GPU), i64::MAX);
        let mut left = Resources::cpu_memory(i64::MIN + 1, 0);
        left.sub(&Resources::cpu_memory(10, 0));
        assert_eq!(left.cpu, i64::MIN, "subtraction saturates too");
    }

    #[test]
    fn arithmetic_and_fit() {
        let mut a = Resources::cpu_memory(500, gib(1));
        a.set(NVIDIA_GPU, 1);
        let b = Resources::cpu_memory(1500, gib(2));
        let sum = a.plus(&b);
        assert_eq!(sum.cpu, 2000);
        assert_eq!(sum.get(NVIDIA_GPU), 1);
        assert!(
            !a.fits(&b),
            "a GPU request does not fit a node without GPUs"
        );
        assert_eq!(a.first_exceeding(&b), Some(NVIDIA_GPU));
        let mut node = b.clone();
        node.set(NVIDIA_GPU, 4);
        assert!(a.fits(&node));
        let mut left = node.clone();
        left.sub(&a);
        assert_eq!(left.get(NVIDIA_GPU), 3);
        assert_eq!(a.max(&b), {
            let mut m = Resources::cpu_memory(1500, gib(2));
            m.set(NVIDIA_GPU, 1);
            m
        });
        left.set(NVIDIA_GPU, 0);
        assert!(left.extended.is_empty());
    }

    #[test]
    fn round_trips_resource_lists() {
        let list: BTreeMap<String, Quantity> = [
            ("cpu", "1500m"),
            ("memory", "4Gi"),
            ("pods", "29"),
            ("nvidia.com/gpu", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
        let r = Resources::from_list(&list).unwrap();
        assert_eq!(r.to_list(), list);
        assert_eq!(
            r.to_string(),
            "cpu: 1500m, memory: 4Gi, pods: 29, nvidia.com/gpu: 1"
        );
    }
}
