//! Converts manifests written for earlier Karpenter APIs (`karpenter.sh/v1alpha5` Provisioners,
//! `karpenter.k8s.aws/v1alpha1` AWSNodeTemplates, `v1beta1` NodePools, EC2NodeClasses and
//! NodeClaims) into `v1` objects, so a GitOps repository can be migrated offline and reviewed
//! before anything reaches a cluster.
//!
//! The legacy schemas are handled as plain JSON values: they are only read once, here, and typing
//! them would add code without catching anything the final validation does not. Every output
//! NodePool, EC2NodeClass and NodeClaim is validated against our generated CRDs exactly as the API
//! server would, so a conversion either yields objects that apply cleanly or fails saying why.
//! Where the old and new APIs behave differently and no automatic choice is safe, a [`Warning`]
//! names the field and what to check.
//!
//! v1alpha5/v1alpha1 objects are first lifted to their v1beta1 shape and then take the same
//! v1beta1 → v1 path, so both migrations apply the same rules (kubelet move, AMI aliases, IMDS hop
//! limit, ...).

mod prune;
mod v1alpha5;
mod v1beta1;
mod workloads;

use prune::*;
use v1alpha5::*;
use v1beta1::*;
use workloads::*;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration as StdDuration;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::apis::crds;
use crate::apis::duration::{self, format_duration};
use crate::apis::ec2nodeclass::AMIFamily;
use crate::apis::labels::{
    ARCH, CAPACITY_TYPE, DO_NOT_DISRUPT, LEGACY_DO_NOT_CONSOLIDATE, LEGACY_DO_NOT_EVICT,
    LEGACY_PROVISIONER_NAME, NODEPOOL,
};
use crate::apis::nodepool::DisruptionReason;
use crate::apis::validation::{Kind, ValidationErrors, validate_value};
use crate::manifest::{Document, Source};

type Object = Map<String, Value>;

const NODEPOOL_V1: &str = "karpenter.sh/v1";
const EC2NODECLASS_V1: &str = "karpenter.k8s.aws/v1";
const AWS_GROUP: &str = "karpenter.k8s.aws";
const EC2NODECLASS_KIND: &str = "EC2NodeClass";
/// The v1beta1 tag that stored the cluster name; v1 uses `eks:eks-cluster-name` instead.
const LEGACY_MANAGED_BY_TAG: &str = "karpenter.sh/managed-by";
/// The hop limit v1alpha1 and v1beta1 defaulted to; v1 defaults to 1.
const LEGACY_HOP_LIMIT: u64 = 2;

/// Something the converter changed or could not carry over that a person should review, because
/// the v1 behaviour differs or a choice had to be made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// `Kind/name` of the output object the warning is about.
    pub object: String,
    /// What changed, naming the field and what to check.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}

/// The result of a conversion: v1 objects in input order and the warnings to show the user.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversion {
    /// Output objects: each input object converted (or passed through) in input order, followed
    /// directly by any objects generated from it (e.g. EC2NodeClasses split for kubelet settings).
    pub objects: Vec<Value>,
    /// Behaviour changes and manual steps, in the order they were found.
    pub warnings: Vec<Warning>,
}

/// Settings the old APIs took from the controller's configuration rather than from the objects,
/// which the converter cannot see and must be told.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Instance profile for AWSNodeTemplates without one (v1alpha5's
    /// `aws.defaultInstanceProfile` setting).
    pub default_instance_profile: Option<String>,
    /// IAM role for node classes that name neither a role nor an instance profile.
    pub default_role: Option<String>,
}

/// Why manifests could not be converted; every variant names the file and document, the object
/// and the field, so the user can fix the input.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A field is missing, has the wrong type, or holds a value v1 cannot express.
    #[error("{location}: {object}: {field}: {message}")]
    Field {
        /// File and document of the input object.
        location: Source,
        /// `Kind/name` of the input object.
        object: String,
        /// Dotted path of the field in the input object.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// An output object would be rejected by the API server.
    #[error("{location}: {errors}")]
    Invalid {
        /// File and document of the input object it came from.
        location: Source,
        /// Every problem, with the output field it concerns.
        errors: ValidationErrors,
    },
    /// Two output objects would have the same kind and name.
    #[error(
        "{location}: {object} is also produced by {first}; output names must be unique, so rename one of them or drop the stale copy"
    )]
    Duplicate {
        /// File and document of the second object.
        location: Source,
        /// `Kind/name` of the clashing objects.
        object: String,
        /// File and document of the first object.
        first: Source,
    },
    /// Both defaults were given, so it is unclear which one an EC2NodeClass should get.
    #[error(
        "pass only one of --default-instance-profile and --default-role: an EC2NodeClass takes exactly one of spec.instanceProfile and spec.role"
    )]
    ConflictingDefaults,
    /// Several objects failed; each is reported.
    #[error("{}", list_errors(.0))]
    Several(Vec<ConvertError>),
}

fn list_errors(errors: &[ConvertError]) -> String {
    let mut out = format!("{} objects could not be converted:", errors.len());
    for e in errors {
        out.push_str("\n- ");
        out.push_str(&e.to_string().replace('\n', "\n  "));
    }
    out
}

/// Converts manifests to v1 with no defaults for settings the objects do not carry.
pub fn convert(docs: &[Document]) -> Result<Conversion, ConvertError> {
    convert_with(docs, &Options::default())
}

/// Converts manifests to v1; `options` stands in for controller settings the old APIs relied on.
pub fn convert_with(docs: &[Document], options: &Options) -> Result<Conversion, ConvertError> {
    if options.default_instance_profile.is_some() && options.default_role.is_some() {
        return Err(ConvertError::ConflictingDefaults);
    }
    let mut run = Run {
        options,
        warnings: Vec::new(),
        slots: Vec::new(),
        kubelet_uses: Vec::new(),
        claims: Vec::new(),
        errors: Vec::new(),
    };
    for doc in docs {
        let outs = match run.convert_document(doc) {
            Ok(outs) => outs,
            Err(e) => {
                run.errors.push(e);
                Vec::new()
            }
        };
        run.slots.push(outs);
    }
    run.place_kubelets();
    run.set_claim_expiry();
    run.finish()
}

/// One output object and where it came from.
struct Out {
    value: Value,
    location: Source,
    /// Whether we rewrote it (and so must prune fields v1 does not know).
    converted: bool,
}

/// A NodePool's kubelet block, which v1 keeps on the EC2NodeClass instead. The NodePool is the
/// first output of its slot.
struct KubeletUse {
    slot: usize,
    pool: String,
    class: String,
    kubelet: Option<Value>,
}

/// A converted NodeClaim (the only output of its slot) whose `expireAfter` should follow its
/// NodePool.
struct ClaimExpiry {
    slot: usize,
    claim: String,
    nodepool: Option<String>,
}

/// A NodePool converted to v1, with the kubelet block it had.
struct ConvertedPool {
    value: Value,
    class: String,
    kubelet: Option<Value>,
}

struct Run<'a> {
    options: &'a Options,
    warnings: Vec<Warning>,
    /// Outputs per input document, in input order.
    slots: Vec<Vec<Out>>,
    kubelet_uses: Vec<KubeletUse>,
    claims: Vec<ClaimExpiry>,
    errors: Vec<ConvertError>,
}

impl Run<'_> {
    fn convert_document(&mut self, doc: &Document) -> Result<Vec<Out>, ConvertError> {
        let slot = self.slots.len();
        let ctx = Ctx {
            location: &doc.source,
            object: doc.describe(),
        };
        let out = |value, converted| Out {
            value,
            location: doc.source.clone(),
            converted,
        };
        let w = &mut self.warnings;
        match (doc.api_version(), doc.kind()) {
            ("karpenter.sh/v1alpha5", "Provisioner") => {
                let (pool, class) = provisioner(&ctx, &doc.value, self.options, w)?;
                self.record_pool(slot, &pool);
                let mut outs = vec![out(pool.value, true)];
                outs.extend(class.map(|c| out(c, true)));
                Ok(outs)
            }
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => {
                let class = aws_node_template(&ctx, &doc.value, self.options, w)?;
                Ok(vec![out(class, true)])
            }
            ("karpenter.sh/v1beta1", "NodePool") => {
                let pool = nodepool_beta(&ctx, ctx.map("", doc.value.clone())?, w)?;
                self.record_pool(slot, &pool);
                Ok(vec![out(pool.value, true)])
            }
            ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => {
                let class = ec2nodeclass_beta(
                    &ctx,
                    ctx.map("", doc.value.clone())?,
                    Origin::Beta,
                    self.options,
                    w,
                )?;
                Ok(vec![out(class, true)])
            }
            ("karpenter.sh/v1beta1", "NodeClaim") => {
                let (claim, nodepool) = nodeclaim_beta(&ctx, ctx.map("", doc.value.clone())?, w)?;
                self.claims.push(ClaimExpiry {
                    slot,
                    claim: format!("NodeClaim/{}", doc.name()),
                    nodepool,
                });
                Ok(vec![out(claim, true)])
            }
            ("karpenter.sh/v1alpha5", "Machine") => {
                warn(
                    w,
                    &doc.describe(),
                    "passed through unchanged: Machines are created and deleted by Karpenter \
                     v1alpha5 and v1 cannot read them; delete them once their nodes are replaced",
                );
                Ok(vec![out(doc.value.clone(), false)])
            }
            ("v1", "Node") => Ok(vec![out(node(doc, w), false)]),
            (_, kind) => match PodKind::of(kind) {
                Some(pod_kind) => Ok(vec![out(workload(doc, pod_kind, w), false)]),
                None => Ok(vec![out(doc.value.clone(), false)]),
            },
        }
    }

    fn record_pool(&mut self, slot: usize, pool: &ConvertedPool) {
        self.kubelet_uses.push(KubeletUse {
            slot,
            pool: pool
                .value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            class: pool.class.clone(),
            kubelet: pool.kubelet.clone(),
        });
    }

    /// Puts each NodePool's kubelet block on the EC2NodeClass it references, copying the class
    /// when NodePools sharing it disagree.
    fn place_kubelets(&mut self) {
        let mut order: Vec<String> = Vec::new();
        for u in &self.kubelet_uses {
            if !order.contains(&u.class) {
                order.push(u.class.clone());
            }
        }
        let uses = std::mem::take(&mut self.kubelet_uses);
        for class in order {
            let group: Vec<&KubeletUse> = uses.iter().filter(|u| u.class == class).collect();
            match self.find(EC2NODECLASS_V1, EC2NODECLASS_KIND, &class) {
                Some((slot, index, true)) => self.split_class(slot, index, &class, &group),
                Some((slot, index, false)) => {
                    let existing = self.slots[slot][index]
                        .value
                        .pointer("/spec/kubelet")
                        .cloned();
                    for u in group.iter().filter(|u| u.kubelet != existing) {
                        warn(
                            &mut self.warnings,
                            &format!("NodePool/{}", u.pool),
                            format!(
                                "spec.template.spec.kubelet: EC2NodeClass/{class} is already v1 and was passed \
                                 through unchanged, but its spec.kubelet ({}) differs from this NodePool's kubelet \
                                 ({}), which was removed; in v1 kubelet settings live on the EC2NodeClass, so \
                                 reconcile them by hand (a separate EC2NodeClass for this NodePool if they must differ)",
                                compact(existing.as_ref()),
                                compact(u.kubelet.as_ref())
                            ),
                        );
                    }
                }
                None => {
                    for u in group.iter().filter(|u| u.kubelet.is_some()) {
                        warn(
                            &mut self.warnings,
                            &format!("NodePool/{}", u.pool),
                            format!(
                                "spec.template.spec.kubelet was removed: in v1 kubelet settings live on the \
                                 EC2NodeClass, and EC2NodeClass/{class} is not in the input; add \
                                 `kubelet: {}` to its spec by hand",
                                compact(u.kubelet.as_ref())
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Gives a converted EC2NodeClass the kubelet of the first NodePool using it, and creates a
    /// copy for every other distinct kubelet block.
    fn split_class(&mut self, slot: usize, index: usize, class: &str, group: &[&KubeletUse]) {
        let original = self.slots[slot][index].value.clone();
        // (kubelet, class name holding it, first NodePool with it)
        let mut distinct: Vec<(Option<Value>, String, String)> = Vec::new();
        if let Some(existing) = original.pointer("/spec/kubelet") {
            distinct.push((Some(existing.clone()), class.to_string(), String::new()));
        }
        for u in group {
            let target = if let Some((_, name, _)) = distinct.iter().find(|d| d.0 == u.kubelet) {
                name.clone()
            } else if distinct.is_empty() {
                set_kubelet(&mut self.slots[slot][index].value, u.kubelet.clone());
                distinct.push((u.kubelet.clone(), class.to_string(), u.pool.clone()));
                class.to_string()
            } else {
                let name = format!("{class}-{}", u.pool);
                let mut copy = original.clone();
                if let Some(meta) = copy.get_mut("metadata") {
                    let mut fresh = fresh_metadata(meta);
                    fresh.insert("name".into(), Value::String(name.clone()));
                    *meta = Value::Object(fresh);
                }
                set_kubelet(&mut copy, u.kubelet.clone());
                let location = self.slots[slot][index].location.clone();
                self.slots[slot].push(Out {
                    value: copy,
                    location,
                    converted: true,
                });
                distinct.push((u.kubelet.clone(), name.clone(), u.pool.clone()));
                name
            };
            if target != class {
                let first_pool = distinct
                    .iter()
                    .find(|d| d.1 == class)
                    .map(|d| {
                        if d.2.is_empty() {
                            format!("EC2NodeClass/{class}'s own spec.kubelet")
                        } else {
                            format!("NodePool/{}'s kubelet", d.2)
                        }
                    })
                    .unwrap_or_default();
                if let Some(name) = self.slots[u.slot][0]
                    .value
                    .pointer_mut("/spec/template/spec/nodeClassRef/name")
                {
                    *name = Value::String(target.clone());
                }
                let carrying = match &u.kubelet {
                    Some(k) => format!(
                        "this NodePool's kubelet ({k}) differs from {first_pool}, so \
                         EC2NodeClass/{target} is a copy of EC2NodeClass/{class} with that kubelet"
                    ),
                    None => format!(
                        "this NodePool had no kubelet settings while {first_pool} is now on \
                         EC2NodeClass/{class}, so EC2NodeClass/{target} is a copy without them"
                    ),
                };
                warn(
                    &mut self.warnings,
                    &format!("NodePool/{}", u.pool),
                    format!(
                        "spec.template.spec.nodeClassRef.name changed from {class} to {target}: v1 moved kubelet \
                         settings to the EC2NodeClass, and {carrying}. Changing nodeClassRef drifts and replaces \
                         this NodePool's existing nodes; to avoid that, agree on one kubelet block and point the \
                         NodePools back at {class}"
                    ),
                );
            }
        }
    }

    /// Copies each converted NodeClaim's `expireAfter` from its NodePool, as v1beta1 expired
    /// NodeClaims by their NodePool's `disruption.expireAfter`.
    fn set_claim_expiry(&mut self) {
        let claims = std::mem::take(&mut self.claims);
        for c in claims {
            let pool = c
                .nodepool
                .as_deref()
                .and_then(|name| self.find(NODEPOOL_V1, "NodePool", name));
            match pool {
                Some((slot, index, _)) => {
                    let expire = self.slots[slot][index]
                        .value
                        .pointer("/spec/template/spec/expireAfter")
                        .cloned();
                    if let (Some(expire), Some(spec)) = (
                        expire,
                        self.slots[c.slot][0]
                            .value
                            .get_mut("spec")
                            .and_then(Value::as_object_mut),
                    ) {
                        spec.insert("expireAfter".into(), expire);
                    }
                }
                None => warn(
                    &mut self.warnings,
                    &c.claim,
                    format!(
                        "spec.expireAfter is unset, so v1 defaults it to 720h: v1beta1 NodeClaims expired after \
                         their NodePool's disruption.expireAfter, and NodePool/{} is not in the input; set \
                         spec.expireAfter to that NodePool's value",
                        c.nodepool
                            .as_deref()
                            .unwrap_or("<no karpenter.sh/nodepool label>")
                    ),
                ),
            }
        }
    }

    /// Finds an output object by apiVersion, kind and name: (slot, index, converted).
    fn find(&self, api_version: &str, kind: &str, name: &str) -> Option<(usize, usize, bool)> {
        self.slots.iter().enumerate().find_map(|(s, outs)| {
            outs.iter().enumerate().find_map(|(i, o)| {
                let v = &o.value;
                (v.get("apiVersion").and_then(Value::as_str) == Some(api_version)
                    && v.get("kind").and_then(Value::as_str) == Some(kind)
                    && v.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
                .then_some((s, i, o.converted))
            })
        })
    }

    /// Prunes fields v1 does not know from converted objects, validates every v1 object and
    /// rejects duplicate names.
    fn finish(mut self) -> Result<Conversion, ConvertError> {
        let mut seen: HashMap<(String, String), Source> = HashMap::new();
        let mut objects = Vec::new();
        for out in self.slots.into_iter().flatten() {
            let Out {
                mut value,
                location,
                converted,
            } = out;
            let field = |key: &str| {
                value
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let (api_version, kind_name) = (field("apiVersion"), field("kind"));
            if let Some(kind) = Kind::of(&api_version, &kind_name) {
                let name = value
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let object = format!("{kind_name}/{name}");
                if converted {
                    let mut dropped = Vec::new();
                    if let Some(spec) = value.get_mut("spec") {
                        prune(spec, spec_schema(kind), "spec", &mut dropped);
                    }
                    for field in dropped {
                        warn(
                            &mut self.warnings,
                            &object,
                            format!(
                                "{field} is not part of the v1 API and was dropped; check whether its setting is still needed"
                            ),
                        );
                    }
                }
                if let Err(errors) = validate_value(kind, &value, None) {
                    self.errors.push(ConvertError::Invalid {
                        location: location.clone(),
                        errors,
                    });
                }
                match seen.get(&(kind_name.clone(), name.clone())) {
                    Some(first) => self.errors.push(ConvertError::Duplicate {
                        location: location.clone(),
                        object,
                        first: first.clone(),
                    }),
                    None => {
                        seen.insert((kind_name, name), location);
                    }
                }
            }
            objects.push(value);
        }
        match self.errors.len() {
            0 => Ok(Conversion {
                objects,
                warnings: self.warnings,
            }),
            1 => Err(self.errors.remove(0)),
            _ => Err(ConvertError::Several(self.errors)),
        }
    }
}

/// The input object being converted, for error messages.
struct Ctx<'a> {
    location: &'a Source,
    object: String,
}

impl Ctx<'_> {
    fn error(&self, field: &str, message: impl Into<String>) -> ConvertError {
        ConvertError::Field {
            location: self.location.clone(),
            object: self.object.clone(),
            field: if field.is_empty() {
                "(object)".into()
            } else {
                field.into()
            },
            message: message.into(),
        }
    }

    fn map(&self, field: &str, value: Value) -> Result<Object, ConvertError> {
        match value {
            Value::Object(m) => Ok(m),
            other => Err(self.error(field, format!("expected a map, got {}", type_of(&other)))),
        }
    }

    fn list(&self, field: &str, value: Value) -> Result<Vec<Value>, ConvertError> {
        match value {
            Value::Array(a) => Ok(a),
            other => Err(self.error(field, format!("expected a list, got {}", type_of(&other)))),
        }
    }

    fn string(&self, field: &str, value: Value) -> Result<String, ConvertError> {
        match value {
            Value::String(s) => Ok(s),
            other => Err(self.error(field, format!("expected a string, got {}", type_of(&other)))),
        }
    }

    fn boolean(&self, field: &str, value: Value) -> Result<bool, ConvertError> {
        value.as_bool().ok_or_else(|| {
            self.error(
                field,
                format!("expected true or false, got {}", type_of(&value)),
            )
        })
    }

    /// A v1alpha5 `ttlSeconds*` field as the v1 duration it becomes. A number of seconds longer
    /// than a Go duration can hold is an error rather than clamped with a warning: v1 would
    /// store a value no Karpenter can read, and a clamped one would still be a made-up number
    /// in the user's manifest where removing the field (`Never`) says what they meant.
    fn ttl(&self, field: &str, value: Value) -> Result<String, ConvertError> {
        let seconds = value.as_u64().ok_or_else(|| {
            self.error(
                field,
                format!(
                    "expected a whole number of seconds, got {}",
                    type_of(&value)
                ),
            )
        })?;
        let d = StdDuration::from_secs(seconds);
        if d > duration::MAX {
            return Err(self.error(
                field,
                format!(
                    "{seconds} seconds is longer than {} seconds (about 292 years), the longest duration v1 \
                     can hold; use a smaller number, or remove the field, which converts to Never",
                    duration::MAX.as_secs()
                ),
            ));
        }
        Ok(format_duration(d))
    }

    /// A map whose values are all strings, as the v1alpha1 selectors are.
    fn string_map(
        &self,
        field: &str,
        value: Value,
    ) -> Result<BTreeMap<String, String>, ConvertError> {
        self.map(field, value)?
            .into_iter()
            .map(|(k, v)| {
                let v = self.string(&format!("{field}.{k}"), v)?;
                Ok((k, v))
            })
            .collect()
    }
}

fn type_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a map".into(),
    }
}

fn warn(warnings: &mut Vec<Warning>, object: &str, message: impl Into<String>) {
    warnings.push(Warning {
        object: object.to_string(),
        message: message.into(),
    });
}

/// Removes a field, treating an explicit null like an absent field as the API server does.
fn take(map: &mut Object, key: &str) -> Option<Value> {
    map.remove(key).filter(|v| !v.is_null())
}

fn name_of(obj: &Object) -> String {
    obj.get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Single-line JSON for quoting a value in a warning.
fn compact(value: Option<&Value>) -> String {
    value.map_or_else(|| "none".to_string(), Value::to_string)
}

/// Metadata for an object of a new kind (or a copy): only what the user wrote, without the
/// server-populated fields and annotations that belonged to the old object.
fn fresh_metadata(meta: &Value) -> Object {
    let mut out = Object::new();
    for key in ["name", "labels"] {
        if let Some(v) = meta.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(Value::Object(annotations)) = meta.get("annotations") {
        let kept: Object = annotations
            .iter()
            .filter(|(k, _)| {
                let karpenter =
                    k.starts_with("karpenter.sh/") || k.starts_with("karpenter.k8s.aws/");
                k.as_str() != "kubectl.kubernetes.io/last-applied-configuration"
                    && !(karpenter && (k.ends_with("-hash") || k.ends_with("-hash-version")))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            out.insert("annotations".into(), Value::Object(kept));
        }
    }
    out
}

fn set_kubelet(class: &mut Value, kubelet: Option<Value>) {
    if let Some(spec) = class.get_mut("spec").and_then(Value::as_object_mut) {
        match kubelet {
            Some(k) => spec.insert("kubelet".into(), k),
            None => spec.remove("kubelet"),
        };
    }
}

/// v1 kubelet resource maps hold strings, where v1alpha5/v1beta1 accepted numeric quantities.
fn normalize_kubelet(mut kubelet: Value) -> Value {
    for key in [
        "systemReserved",
        "kubeReserved",
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
    ] {
        if let Some(Value::Object(map)) = kubelet.get_mut(key) {
            for v in map.values_mut() {
                if let Value::Number(n) = v {
                    *v = Value::String(n.to_string());
                }
            }
        }
    }
    kubelet
}

/// Replaces a legacy `"true"` annotation with `karpenter.sh/do-not-disrupt: "true"`; returns
/// whether it did.
fn replace_legacy_annotation(meta: &mut Value, legacy: &str) -> bool {
    let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) else {
        return false;
    };
    if annotations.get(legacy).and_then(Value::as_str) != Some("true") {
        return false;
    }
    annotations.remove(legacy);
    annotations
        .entry(DO_NOT_DISRUPT)
        .or_insert_with(|| Value::String("true".into()));
    true
}
