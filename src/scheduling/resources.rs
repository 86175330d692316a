//! Resource amounts as integers (CPU in millicores, memory and storage in bytes, counts for the
//! rest), so the bin-packing inner loop compares and adds machine words instead of parsing
//! quantities.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

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

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Resources) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.pods += other.pods;
        self.ephemeral_storage += other.ephemeral_storage;
        for (name, amount) in &other.extended {
            let current = self.get(name);
            self.set(name, current + amount);
        }
    }

    /// Subtracts `other` from `self` (amounts may go negative).
    pub fn sub(&mut self, other: &Resources) {
        self.cpu -= other.cpu;
        self.memory -= other.memory;
        self.pods -= other.pods;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (name, amount) in &other.extended {
            let current = self.get(name);
            self.set(name, current - amount);
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
/// memory and storage, whole units (rounded up) for everything else.
pub fn parse_quantity(resource: &str, value: &str) -> Result<i64, QuantityError> {
    let err = || QuantityError {
        resource: resource.to_string(),
        value: value.to_string(),
    };
    let parsed = ParsedQuantity::try_from(value.trim()).map_err(|_| err())?;
    let base = parsed.to_bytes_f64().ok_or_else(err)?;
    let scaled = if resource == CPU { base * 1000.0 } else { base };
    if !scaled.is_finite() || scaled.abs() > 9.0e18 {
        return Err(err());
    }
    Ok(scaled.ceil() as i64)
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
        let e = parse_quantity(MEMORY, "lots").unwrap_err();
        assert!(e.to_string().contains("memory"), "{e}");
        assert!(e.to_string().contains("\"lots\""), "{e}");
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
