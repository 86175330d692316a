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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration as StdDuration;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::crds;
use super::duration::{self, format_duration};
use super::ec2nodeclass::AMIFamily;
use super::labels::{
    ARCH, CAPACITY_TYPE, DO_NOT_DISRUPT, LEGACY_DO_NOT_CONSOLIDATE, LEGACY_DO_NOT_EVICT,
    LEGACY_PROVISIONER_NAME, NODEPOOL,
};
use super::nodepool::DisruptionReason;
use super::validation::{Kind, ValidationErrors, validate_value};
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

// ---------------------------------------------------------------------------------------------
// v1alpha5 Provisioner

/// Converts a Provisioner into a v1 NodePool, plus an EC2NodeClass when it had an inline
/// `provider` block.
fn provisioner(
    ctx: &Ctx,
    value: &Value,
    options: &Options,
    w: &mut Vec<Warning>,
) -> Result<(ConvertedPool, Option<Value>), ConvertError> {
    let mut obj = ctx.map("", value.clone())?;
    let name = name_of(&obj);
    let object = format!("NodePool/{name}");
    let spec = match take(&mut obj, "spec") {
        Some(v) => ctx.map("spec", v)?,
        None => Object::new(),
    };
    let mut template_meta = Object::new();
    let mut template_spec = Object::new();
    let mut top = Object::new();
    let mut consolidation = None;
    let mut ttl_empty = None;
    let mut ttl_expired = None;
    let mut provider_ref = None;
    let mut provider = None;
    let mut requirements = Vec::new();
    for (key, v) in spec {
        if v.is_null() {
            continue;
        }
        let field = format!("spec.{key}");
        match key.as_str() {
            "requirements" => requirements = ctx.list(&field, v)?,
            "taints" | "startupTaints" => {
                template_spec.insert(key, v);
            }
            "labels" | "annotations" => {
                template_meta.insert(key, Value::Object(ctx.map(&field, v)?));
            }
            "limits" => {
                let mut limits = ctx.map(&field, v)?;
                if let Some(resources) = take(&mut limits, "resources") {
                    top.insert(
                        "limits".into(),
                        Value::Object(ctx.map("spec.limits.resources", resources)?),
                    );
                }
            }
            "weight" => {
                top.insert(key, v);
            }
            "consolidation" => {
                let mut c = ctx.map(&field, v)?;
                if let Some(enabled) = take(&mut c, "enabled") {
                    consolidation = Some(ctx.boolean("spec.consolidation.enabled", enabled)?);
                }
            }
            "ttlSecondsAfterEmpty" => ttl_empty = Some(ctx.ttl(&field, v)?),
            "ttlSecondsUntilExpired" => ttl_expired = Some(ctx.ttl(&field, v)?),
            "providerRef" => provider_ref = Some(ctx.map(&field, v)?),
            "provider" => provider = Some(ctx.map(&field, v)?),
            "kubeletConfiguration" => {
                let mut kubelet = ctx.map(&field, v)?;
                if let Some(runtime) = take(&mut kubelet, "containerRuntime") {
                    warn(
                        w,
                        &object,
                        format!(
                            "the Provisioner's spec.kubeletConfiguration.containerRuntime ({runtime}) was dropped: \
                             containerd is the only runtime Karpenter configures since v1beta1"
                        ),
                    );
                }
                template_spec.insert("kubelet".into(), Value::Object(kubelet));
            }
            _ => warn(
                w,
                &object,
                format!("the Provisioner's {field} has no v1 equivalent and was dropped"),
            ),
        }
    }

    requirements.retain(|r| {
        let legacy = r.get("key").and_then(Value::as_str) == Some(LEGACY_PROVISIONER_NAME);
        if legacy {
            warn(
                w,
                &object,
                format!(
                    "spec.template.spec.requirements: the requirement on {LEGACY_PROVISIONER_NAME} was dropped: \
                     every node of this NodePool carries {NODEPOOL}={name}, and v1 forbids that key in \
                     NodePool requirements"
                ),
            );
        }
        !legacy
    });
    default_requirement(
        &mut requirements,
        &template_meta,
        CAPACITY_TYPE,
        "on-demand",
        &object,
        w,
    );
    default_requirement(&mut requirements, &template_meta, ARCH, "amd64", &object, w);
    template_spec.insert("requirements".into(), Value::Array(requirements));

    let mut disruption = Object::new();
    match (consolidation, ttl_empty) {
        (Some(true), Some(_)) => {
            return Err(ctx.error(
                "spec.ttlSecondsAfterEmpty",
                "cannot be combined with consolidation.enabled: true (v1alpha5 rejected this too); \
                 remove one of them",
            ));
        }
        (Some(true), None) => {
            disruption.insert("consolidationPolicy".into(), "WhenUnderutilized".into());
        }
        (_, Some(after)) => {
            disruption.insert("consolidationPolicy".into(), "WhenEmpty".into());
            disruption.insert("consolidateAfter".into(), after.into());
        }
        (_, None) => {
            disruption.insert("consolidationPolicy".into(), "WhenEmpty".into());
            disruption.insert("consolidateAfter".into(), "Never".into());
            warn(
                w,
                &object,
                "spec.disruption: set to consolidationPolicy WhenEmpty with consolidateAfter Never because the \
                 Provisioner had consolidation disabled and no ttlSecondsAfterEmpty, so Karpenter never \
                 removed its nodes; set consolidationPolicy WhenEmptyOrUnderutilized (and a consolidateAfter) \
                 to let v1 consolidate them",
            );
        }
    }
    match ttl_expired {
        Some(expire) => {
            disruption.insert("expireAfter".into(), expire.into());
        }
        None => {
            disruption.insert("expireAfter".into(), "Never".into());
            warn(
                w,
                &object,
                "spec.template.spec.expireAfter: set to Never because the Provisioner had no \
                 ttlSecondsUntilExpired and v1alpha5 nodes never expired; v1 defaults to 720h (nodes are \
                 replaced after 30 days), so remove the field if you want that",
            );
        }
    }

    let (class_name, class) = match (provider_ref, provider) {
        (Some(_), Some(_)) => {
            return Err(ctx.error(
                "spec.provider",
                "cannot be combined with spec.providerRef; keep one of them",
            ));
        }
        (Some(mut r), None) => {
            let class = match take(&mut r, "name") {
                Some(n) => ctx.string("spec.providerRef.name", n)?,
                None => {
                    return Err(ctx.error(
                        "spec.providerRef.name",
                        "is required: name the AWSNodeTemplate",
                    ));
                }
            };
            if let Some(kind) = take(&mut r, "kind") {
                let kind = ctx.string("spec.providerRef.kind", kind)?;
                if kind != "AWSNodeTemplate" {
                    return Err(ctx.error(
                        "spec.providerRef.kind",
                        format!("{kind:?} is not AWSNodeTemplate, the only node template the AWS provider knows"),
                    ));
                }
            }
            (class, None)
        }
        (None, Some(p)) => {
            let beta_spec = aws_node_template_spec(
                ctx,
                "spec.provider",
                p,
                &format!("EC2NodeClass/{name}"),
                w,
            )?;
            let beta = json!({
                "apiVersion": "karpenter.k8s.aws/v1beta1",
                "kind": EC2NODECLASS_KIND,
                "metadata": {"name": name},
                "spec": beta_spec,
            });
            let class =
                ec2nodeclass_beta(ctx, ctx.map("", beta)?, Origin::InlineProvider, options, w)?;
            warn(
                w,
                &object,
                format!(
                    "spec.template.spec.nodeClassRef: the Provisioner's inline spec.provider block was converted \
                     into EC2NodeClass/{name}, named after the Provisioner; review it, or merge it into a shared \
                     EC2NodeClass and point nodeClassRef there"
                ),
            );
            (name.clone(), Some(class))
        }
        (None, None) => {
            return Err(ctx.error(
                "spec.providerRef",
                "is required: a NodePool must reference an EC2NodeClass; add providerRef naming an \
                 AWSNodeTemplate (or an inline provider block)",
            ));
        }
    };
    template_spec.insert(
        "nodeClassRef".into(),
        json!({"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": EC2NODECLASS_KIND, "name": class_name}),
    );
    let mut template = Object::new();
    if !template_meta.is_empty() {
        template.insert("metadata".into(), Value::Object(template_meta));
    }
    template.insert("spec".into(), Value::Object(template_spec));
    top.insert("template".into(), Value::Object(template));
    top.insert("disruption".into(), Value::Object(disruption));
    let metadata = fresh_metadata(obj.get("metadata").unwrap_or(&Value::Null));
    let beta = json!({
        "apiVersion": "karpenter.sh/v1beta1",
        "kind": "NodePool",
        "metadata": metadata,
        "spec": top,
    });
    warn(
        w,
        &object,
        format!(
            "created from Provisioner/{name}: v1 does not adopt the nodes that Provisioner launched, so after \
             applying, replace them (e.g. taint the Provisioner's nodes and let this NodePool launch new ones) \
             and then delete the Provisioner"
        ),
    );
    let pool = nodepool_beta(ctx, ctx.map("", beta)?, w)?;
    Ok((pool, class))
}

/// Makes a requirement v1alpha5's webhook used to default explicit, so the NodePool launches the
/// same capacity as the Provisioner did.
fn default_requirement(
    requirements: &mut Vec<Value>,
    template_meta: &Object,
    key: &str,
    value: &str,
    object: &str,
    w: &mut Vec<Warning>,
) {
    let required = requirements
        .iter()
        .any(|r| r.get("key").and_then(Value::as_str) == Some(key));
    let labelled = template_meta
        .get("labels")
        .and_then(|l| l.get(key))
        .is_some();
    if required || labelled {
        return;
    }
    requirements.push(json!({"key": key, "operator": "In", "values": [value]}));
    warn(
        w,
        object,
        format!(
            "spec.template.spec.requirements: added {key} In [{value}], which the v1alpha5 webhook defaulted \
             the missing requirement to; widen it if the NodePool should launch more than {value}"
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// v1alpha1 AWSNodeTemplate

/// Converts an AWSNodeTemplate into a v1 EC2NodeClass.
fn aws_node_template(
    ctx: &Ctx,
    value: &Value,
    options: &Options,
    w: &mut Vec<Warning>,
) -> Result<Value, ConvertError> {
    let mut obj = ctx.map("", value.clone())?;
    let name = name_of(&obj);
    let spec = match take(&mut obj, "spec") {
        Some(v) => ctx.map("spec", v)?,
        None => Object::new(),
    };
    let beta_spec = aws_node_template_spec(ctx, "spec", spec, &format!("EC2NodeClass/{name}"), w)?;
    let beta = json!({
        "apiVersion": "karpenter.k8s.aws/v1beta1",
        "kind": EC2NODECLASS_KIND,
        "metadata": fresh_metadata(obj.get("metadata").unwrap_or(&Value::Null)),
        "spec": beta_spec,
    });
    ec2nodeclass_beta(ctx, ctx.map("", beta)?, Origin::NodeTemplate, options, w)
}

/// Which v1alpha1 selector is being converted; they differ in the keys they accept.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Selector {
    Subnet,
    SecurityGroup,
    Ami,
}

/// Lifts a v1alpha1 AWSNodeTemplate spec (or a Provisioner's inline provider) to the v1beta1
/// EC2NodeClass spec shape.
fn aws_node_template_spec(
    ctx: &Ctx,
    prefix: &str,
    spec: Object,
    object: &str,
    w: &mut Vec<Warning>,
) -> Result<Object, ConvertError> {
    let mut out = Object::new();
    for (key, v) in spec {
        if v.is_null() {
            continue;
        }
        let field = format!("{prefix}.{key}");
        match key.as_str() {
            "subnetSelector" => {
                let terms = selector_terms(ctx, &field, v, Selector::Subnet, object, w)?;
                out.insert("subnetSelectorTerms".into(), terms);
            }
            "securityGroupSelector" => {
                let terms = selector_terms(ctx, &field, v, Selector::SecurityGroup, object, w)?;
                out.insert("securityGroupSelectorTerms".into(), terms);
            }
            "amiSelector" => {
                let terms = selector_terms(ctx, &field, v, Selector::Ami, object, w)?;
                out.insert("amiSelectorTerms".into(), terms);
            }
            "amiFamily"
            | "instanceProfile"
            | "userData"
            | "tags"
            | "blockDeviceMappings"
            | "metadataOptions"
            | "detailedMonitoring"
            | "context" => {
                out.insert(key, v);
            }
            "launchTemplate" | "launchTemplateName" => {
                return Err(ctx.error(
                    &field,
                    "launch templates are not supported since v1beta1; express their settings with the \
                     EC2NodeClass fields (amiSelector, userData, blockDeviceMappings, metadataOptions, \
                     securityGroupSelector) and remove this field",
                ));
            }
            "apiVersion" | "kind" => {}
            _ => warn(
                w,
                object,
                format!("the AWSNodeTemplate's {field} has no v1 equivalent and was dropped"),
            ),
        }
    }
    // v1alpha1 defaulted the family; v1 needs it spelled out unless an alias is used.
    out.entry("amiFamily").or_insert_with(|| "AL2".into());
    Ok(out)
}

/// Converts a v1alpha1 selector map (tags ANDed, plus special `aws-ids`, `aws::name` and
/// `aws::owners` keys) into v1beta1 selector terms.
fn selector_terms(
    ctx: &Ctx,
    field: &str,
    value: Value,
    selector: Selector,
    object: &str,
    w: &mut Vec<Warning>,
) -> Result<Value, ConvertError> {
    let mut tags = ctx.string_map(field, value)?;
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect()
    };
    let ids = tags.remove("aws-ids").map(|s| split(&s));
    let (name, owners) = if selector == Selector::Ami {
        (
            tags.remove("aws::name"),
            tags.remove("aws::owners").map(|s| split(&s)),
        )
    } else {
        (None, None)
    };
    if let Some(ids) = ids {
        if ids.is_empty() {
            return Err(ctx.error(&format!("{field}.aws-ids"), "lists no IDs"));
        }
        if !tags.is_empty() || name.is_some() || owners.is_some() {
            warn(
                w,
                object,
                format!(
                    "{field}: only aws-ids was kept; its other filters were dropped because a v1 selector term \
                     with an id cannot also filter (check that the IDs alone select what you want)"
                ),
            );
        }
        return Ok(Value::Array(
            ids.into_iter().map(|id| json!({"id": id})).collect(),
        ));
    }
    let mut base = Object::new();
    if !tags.is_empty() {
        base.insert("tags".into(), json!(tags));
    }
    if let Some(name) = name {
        base.insert("name".into(), name.into());
    }
    if base.is_empty() {
        let hint = if selector == Selector::Ami {
            "needs aws-ids, aws::name or tags (aws::owners alone selects nothing)"
        } else {
            "needs aws-ids or at least one tag"
        };
        return Err(ctx.error(field, hint));
    }
    let terms = match owners {
        Some(owners) if !owners.is_empty() => owners
            .into_iter()
            .map(|owner| {
                let mut term = base.clone();
                term.insert("owner".into(), owner.into());
                Value::Object(term)
            })
            .collect(),
        _ => vec![Value::Object(base)],
    };
    Ok(Value::Array(terms))
}

// ---------------------------------------------------------------------------------------------
// v1beta1 NodePool

/// Converts a v1beta1 NodePool to v1, returning the kubelet block it carried.
fn nodepool_beta(
    ctx: &Ctx,
    mut obj: Object,
    w: &mut Vec<Warning>,
) -> Result<ConvertedPool, ConvertError> {
    let name = name_of(&obj);
    let object = format!("NodePool/{name}");
    obj.remove("status");
    obj.insert("apiVersion".into(), NODEPOOL_V1.into());
    let mut spec = match take(&mut obj, "spec") {
        Some(v) => ctx.map("spec", v)?,
        None => return Err(ctx.error("spec", "is required")),
    };
    let mut template = match take(&mut spec, "template") {
        Some(v) => ctx.map("spec.template", v)?,
        None => return Err(ctx.error("spec.template", "is required")),
    };
    let mut tspec = match take(&mut template, "spec") {
        Some(v) => ctx.map("spec.template.spec", v)?,
        None => return Err(ctx.error("spec.template.spec", "is required")),
    };
    let (class, class_ref) = node_class_ref(
        ctx,
        "spec.template.spec.nodeClassRef",
        take(&mut tspec, "nodeClassRef"),
    )?;
    tspec.insert("nodeClassRef".into(), class_ref);
    let kubelet = match take(&mut tspec, "kubelet") {
        Some(v) => Some(normalize_kubelet(Value::Object(
            ctx.map("spec.template.spec.kubelet", v)?,
        ))),
        None => None,
    };
    if let Some(resources) = take(&mut tspec, "resources")
        && resources
            .as_object()
            .is_some_and(|r| r.values().any(|v| !v.is_null() && v != &json!({})))
    {
        warn(
            w,
            &object,
            format!(
                "spec.template.spec.resources ({resources}) was dropped: v1 NodePools have no such field \
                 (v1beta1 ignored it)"
            ),
        );
    }
    if let Some(v) = take(&mut spec, "disruption") {
        let disruption = ctx.map("spec.disruption", v)?;
        if let Some(d) = disruption_beta(ctx, disruption, &mut tspec, &object, w)? {
            spec.insert("disruption".into(), Value::Object(d));
        }
    }
    if let Some(meta) = template.get_mut("metadata") {
        for legacy in [LEGACY_DO_NOT_CONSOLIDATE, LEGACY_DO_NOT_EVICT] {
            if replace_legacy_annotation(meta, legacy) {
                warn(
                    w,
                    &object,
                    format!(
                        "spec.template.metadata.annotations: {legacy} replaced by {DO_NOT_DISRUPT}, which v1 \
                         honours for all voluntary disruption (drift as well as consolidation)"
                    ),
                );
            }
        }
    }
    template.insert("spec".into(), Value::Object(tspec));
    spec.insert("template".into(), Value::Object(template));
    obj.insert("spec".into(), Value::Object(spec));
    Ok(ConvertedPool {
        value: Value::Object(obj),
        class,
        kubelet,
    })
}

/// Maps a v1beta1 disruption block to v1, moving `expireAfter` into the template; `None` when
/// nothing is left, so the v1 defaults (which equal the v1beta1 ones) apply.
fn disruption_beta(
    ctx: &Ctx,
    mut d: Object,
    template_spec: &mut Object,
    object: &str,
    w: &mut Vec<Warning>,
) -> Result<Option<Object>, ConvertError> {
    if let Some(expire) = take(&mut d, "expireAfter") {
        let expire = ctx.string("spec.disruption.expireAfter", expire)?;
        template_spec
            .entry("expireAfter")
            .or_insert(Value::String(expire));
    }
    if let Some(policy) = take(&mut d, "consolidationPolicy") {
        let mut policy = ctx.string("spec.disruption.consolidationPolicy", policy)?;
        if policy == "WhenUnderutilized" {
            policy = "WhenEmptyOrUnderutilized".into();
            if let Some(after) = d.get("consolidateAfter") {
                warn(
                    w,
                    object,
                    format!(
                        "spec.disruption.consolidateAfter ({after}) was kept, but v1beta1 did not allow it with \
                         WhenUnderutilized; v1 waits this long before consolidating a node, so set it to 0s to \
                         keep the v1beta1 behaviour"
                    ),
                );
            }
        }
        d.insert("consolidationPolicy".into(), Value::String(policy));
    }
    if let Some(Value::Array(budgets)) = d.get_mut("budgets") {
        for budget in budgets.iter_mut() {
            if let Some(Value::Array(reasons)) = budget.get_mut("reasons") {
                for reason in reasons.iter_mut() {
                    let canonical = reason.as_str().and_then(|r| {
                        DisruptionReason::ALL
                            .iter()
                            .map(ToString::to_string)
                            .find(|c| c.eq_ignore_ascii_case(r))
                    });
                    if let Some(c) = canonical {
                        *reason = Value::String(c);
                    }
                }
            }
        }
    }
    if d.is_empty() {
        return Ok(None);
    }
    d.entry("consolidateAfter").or_insert_with(|| "0s".into());
    Ok(Some(d))
}

/// Converts a v1beta1 `nodeClassRef` (`apiVersion`, `kind`, `name`) to v1's (`group`, `kind`,
/// `name`), returning the class name too.
fn node_class_ref(
    ctx: &Ctx,
    field: &str,
    value: Option<Value>,
) -> Result<(String, Value), ConvertError> {
    let Some(value) = value else {
        return Err(ctx.error(
            field,
            "is required: name the EC2NodeClass to launch nodes with",
        ));
    };
    let mut r = ctx.map(field, value)?;
    let name = match take(&mut r, "name") {
        Some(n) => ctx.string(&format!("{field}.name"), n)?,
        None => String::new(),
    };
    if name.is_empty() {
        return Err(ctx.error(
            &format!("{field}.name"),
            "is required: name the EC2NodeClass",
        ));
    }
    if let Some(kind) = take(&mut r, "kind") {
        let kind = ctx.string(&format!("{field}.kind"), kind)?;
        if kind != EC2NODECLASS_KIND {
            return Err(ctx.error(
                &format!("{field}.kind"),
                format!("{kind:?} is not EC2NodeClass, the only node class the AWS provider launches from"),
            ));
        }
    }
    for key in ["apiVersion", "group"] {
        if let Some(v) = take(&mut r, key) {
            let v = ctx.string(&format!("{field}.{key}"), v)?;
            let group = v.split('/').next().unwrap_or_default();
            if group != AWS_GROUP {
                return Err(ctx.error(
                    &format!("{field}.{key}"),
                    format!("{v:?} is not in the {AWS_GROUP} group that EC2NodeClass belongs to"),
                ));
            }
        }
    }
    Ok((
        name.clone(),
        json!({"group": AWS_GROUP, "kind": EC2NODECLASS_KIND, "name": name}),
    ))
}

// ---------------------------------------------------------------------------------------------
// v1beta1 EC2NodeClass

/// Where an EC2NodeClass spec came from, so errors name the field the user actually wrote.
#[derive(Clone, Copy)]
enum Origin {
    /// A v1beta1 EC2NodeClass.
    Beta,
    /// A v1alpha1 AWSNodeTemplate.
    NodeTemplate,
    /// A v1alpha5 Provisioner's inline `provider` block.
    InlineProvider,
}

impl Origin {
    /// The input path of a v1beta1 EC2NodeClass spec field.
    fn field(self, name: &str) -> String {
        let alpha = match name {
            "amiSelectorTerms" => "amiSelector",
            other => other,
        };
        match self {
            Self::Beta => format!("spec.{name}"),
            Self::NodeTemplate => format!("spec.{alpha}"),
            Self::InlineProvider => format!("spec.provider.{alpha}"),
        }
    }
}

/// Converts a v1beta1 EC2NodeClass to v1.
fn ec2nodeclass_beta(
    ctx: &Ctx,
    mut obj: Object,
    origin: Origin,
    options: &Options,
    w: &mut Vec<Warning>,
) -> Result<Value, ConvertError> {
    let object = format!("EC2NodeClass/{}", name_of(&obj));
    obj.remove("status");
    obj.insert("apiVersion".into(), EC2NODECLASS_V1.into());
    let mut spec = match take(&mut obj, "spec") {
        Some(v) => ctx.map("spec", v)?,
        None => return Err(ctx.error("spec", "is required")),
    };

    let has_terms = spec
        .get("amiSelectorTerms")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let family = match take(&mut spec, "amiFamily") {
        Some(v) => Some(ctx.string(&origin.field("amiFamily"), v)?),
        None => None,
    };
    match family.as_deref() {
        Some("Ubuntu") => {
            if !has_terms {
                return Err(ctx.error(
                    &origin.field("amiFamily"),
                    format!(
                        "Ubuntu is no longer a supported AMI family and nothing selects an AMI; pin your \
                         Ubuntu EKS AMI by id in {} and convert again",
                        origin.field("amiSelectorTerms")
                    ),
                ));
            }
            spec.insert("amiFamily".into(), "AL2".into());
            warn(
                w,
                &object,
                "spec.amiFamily: Ubuntu is no longer a supported family and was replaced by AL2, whose \
                 bootstrap.sh user data is what Karpenter generated for Ubuntu; check that \
                 spec.amiSelectorTerms selects only your Ubuntu EKS AMIs (pin them by id; nothing picks \
                 up new Ubuntu releases for you) and that your userData still works with the AL2 format",
            );
        }
        Some("Custom") if !has_terms => {
            return Err(ctx.error(
                &origin.field("amiSelectorTerms"),
                "is required with amiFamily Custom: select your AMIs by id, name or tags",
            ));
        }
        Some(f) => {
            if !has_terms {
                let prefix = serde_json::from_value::<AMIFamily>(Value::String(f.to_string()))
                    .ok()
                    .and_then(AMIFamily::alias_prefix)
                    .ok_or_else(|| {
                        ctx.error(
                            &origin.field("amiFamily"),
                            format!(
                                "{f:?} is not a known AMI family (AL2, AL2023, Bottlerocket, Custom, \
                                 Windows2019, Windows2022)"
                            ),
                        )
                    })?;
                let alias = format!("{prefix}@latest");
                spec.insert("amiSelectorTerms".into(), json!([{"alias": alias}]));
                let pin = match prefix {
                    "bottlerocket" => format!("pin a version (e.g. {prefix}@v1.20.3)"),
                    p if p.starts_with("windows") => {
                        "Windows aliases only take @latest, so select AMIs by id instead"
                            .to_string()
                    }
                    _ => format!("pin a version (e.g. {prefix}@v20240807)"),
                };
                warn(
                    w,
                    &object,
                    format!(
                        "spec.amiSelectorTerms: set to alias {alias} from amiFamily {f}, because v1 requires \
                         amiSelectorTerms; @latest follows every new EKS-optimized AMI release, which drifts \
                         and replaces nodes; to control rollouts, {pin}"
                    ),
                );
            }
            spec.insert("amiFamily".into(), Value::String(f.to_string()));
        }
        None if !has_terms => {
            return Err(ctx.error(
                &origin.field("amiFamily"),
                "is missing and there are no amiSelectorTerms; set amiFamily (e.g. AL2023) or amiSelectorTerms",
            ));
        }
        None => {}
    }

    match take(&mut spec, "metadataOptions") {
        None => {
            spec.insert(
                "metadataOptions".into(),
                json!({
                    "httpEndpoint": "enabled",
                    "httpProtocolIPv6": "disabled",
                    "httpPutResponseHopLimit": LEGACY_HOP_LIMIT,
                    "httpTokens": "required",
                }),
            );
            warn_hop_limit(w, &object);
        }
        Some(v) => {
            let mut m = ctx.map(&origin.field("metadataOptions"), v)?;
            if m.get("httpPutResponseHopLimit").is_none_or(Value::is_null) {
                m.insert("httpPutResponseHopLimit".into(), LEGACY_HOP_LIMIT.into());
                warn_hop_limit(w, &object);
            }
            spec.insert("metadataOptions".into(), Value::Object(m));
        }
    }

    if let Some(tags) = spec.get_mut("tags").and_then(Value::as_object_mut)
        && let Some(value) = tags.remove(LEGACY_MANAGED_BY_TAG)
    {
        warn(
            w,
            &object,
            format!(
                "spec.tags: {LEGACY_MANAGED_BY_TAG} ({value}) was removed: v1 tags instances with \
                 eks:eks-cluster-name itself; update IAM policies, cost reports or scripts that match on \
                 {LEGACY_MANAGED_BY_TAG}"
            ),
        );
    }

    let has = |spec: &Object, key: &str| spec.get(key).is_some_and(|v| !v.is_null());
    if !has(&spec, "role") && !has(&spec, "instanceProfile") {
        if let Some(profile) = &options.default_instance_profile {
            spec.insert("instanceProfile".into(), profile.clone().into());
        } else if let Some(role) = &options.default_role {
            spec.insert("role".into(), role.clone().into());
        } else {
            return Err(ctx.error(
                &origin.field("instanceProfile"),
                "is missing: set spec.role or spec.instanceProfile, or pass --default-instance-profile \
                 (the aws.defaultInstanceProfile setting v1alpha5 used) or --default-role",
            ));
        }
    }
    obj.insert("spec".into(), Value::Object(spec));
    Ok(Value::Object(obj))
}

fn warn_hop_limit(w: &mut Vec<Warning>, object: &str) {
    warn(
        w,
        object,
        "spec.metadataOptions.httpPutResponseHopLimit: set to 2 to keep the old default; v1 defaults to 1, \
         which blocks IMDS for pods that are not on the host network (e.g. the AWS Load Balancer Controller \
         or anything using the node's instance role); lower it to 1 if no pod needs IMDS",
    );
}

// ---------------------------------------------------------------------------------------------
// v1beta1 NodeClaim

/// Converts a v1beta1 NodeClaim to v1, returning the NodePool named by its label.
fn nodeclaim_beta(
    ctx: &Ctx,
    mut obj: Object,
    w: &mut Vec<Warning>,
) -> Result<(Value, Option<String>), ConvertError> {
    let object = format!("NodeClaim/{}", name_of(&obj));
    obj.remove("status");
    obj.insert("apiVersion".into(), NODEPOOL_V1.into());
    let mut spec = match take(&mut obj, "spec") {
        Some(v) => ctx.map("spec", v)?,
        None => return Err(ctx.error("spec", "is required")),
    };
    let (class, class_ref) =
        node_class_ref(ctx, "spec.nodeClassRef", take(&mut spec, "nodeClassRef"))?;
    spec.insert("nodeClassRef".into(), class_ref);
    if let Some(kubelet) = take(&mut spec, "kubelet") {
        warn(
            w,
            &object,
            format!(
                "spec.kubelet ({kubelet}) was dropped: v1 NodeClaims take kubelet settings from their \
                 EC2NodeClass; make sure EC2NodeClass/{class} has them in spec.kubelet"
            ),
        );
    }
    let nodepool = obj
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(NODEPOOL))
        .and_then(Value::as_str)
        .map(String::from);
    obj.insert("spec".into(), Value::Object(spec));
    Ok((Value::Object(obj), nodepool))
}

// ---------------------------------------------------------------------------------------------
// Workloads and nodes

/// Kinds that are, or carry, a pod template.
#[derive(Clone, Copy)]
enum PodKind {
    Pod,
    Template,
    CronJob,
}

impl PodKind {
    fn of(kind: &str) -> Option<Self> {
        match kind {
            "Pod" => Some(Self::Pod),
            "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicaSet" => {
                Some(Self::Template)
            }
            "CronJob" => Some(Self::CronJob),
            _ => None,
        }
    }

    /// JSON pointer to the pod template (the object itself for a Pod).
    fn template(self) -> &'static str {
        match self {
            Self::Pod => "",
            Self::Template => "/spec/template",
            Self::CronJob => "/spec/jobTemplate/spec/template",
        }
    }
}

/// Rewrites v1alpha5/v1beta1 pod annotations and node selectors to their v1 spelling.
fn workload(doc: &Document, kind: PodKind, w: &mut Vec<Warning>) -> Value {
    let mut value = doc.value.clone();
    let object = doc.describe();
    let template = kind.template();
    let mut metas = vec!["/metadata".to_string()];
    if !template.is_empty() {
        metas.push(format!("{template}/metadata"));
    }
    for pointer in metas {
        if let Some(meta) = value.pointer_mut(&pointer)
            && replace_legacy_annotation(meta, LEGACY_DO_NOT_EVICT)
        {
            warn(
                w,
                &object,
                format!(
                    "{}.annotations: {LEGACY_DO_NOT_EVICT}: \"true\" replaced by {DO_NOT_DISRUPT}: \"true\"; \
                     v1 ignores do-not-evict",
                    dotted(&pointer)
                ),
            );
        }
    }
    let spec_pointer = format!("{template}/spec");
    if let Some(spec) = value.pointer_mut(&spec_pointer) {
        for field in rename_selector_keys(spec) {
            warn(
                w,
                &object,
                format!(
                    "{}.{field}: node label key {LEGACY_PROVISIONER_NAME} renamed to {NODEPOOL}; v1 nodes carry \
                     {NODEPOOL}, and each Provisioner becomes the NodePool of the same name",
                    dotted(&spec_pointer)
                ),
            );
        }
    }
    value
}

/// Renames `karpenter.sh/provisioner-name` in a pod spec's node selector and node affinity;
/// returns the fields changed, relative to the pod spec.
fn rename_selector_keys(spec: &mut Value) -> Vec<String> {
    let mut changed = Vec::new();
    if let Some(selector) = spec.get_mut("nodeSelector").and_then(Value::as_object_mut)
        && let Some(v) = selector.remove(LEGACY_PROVISIONER_NAME)
    {
        selector.insert(NODEPOOL.into(), v);
        changed.push("nodeSelector".to_string());
    }
    let Some(affinity) = spec.pointer_mut("/affinity/nodeAffinity") else {
        return changed;
    };
    let mut rename = |expressions: Option<&mut Value>, field: String| {
        let Some(Value::Array(expressions)) = expressions else {
            return;
        };
        for (i, e) in expressions.iter_mut().enumerate() {
            if let Some(key) = e.get_mut("key")
                && *key == LEGACY_PROVISIONER_NAME
            {
                *key = Value::String(NODEPOOL.into());
                changed.push(format!("{field}.matchExpressions[{i}].key"));
            }
        }
    };
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    if let Some(Value::Array(terms)) =
        affinity.pointer_mut(&format!("/{required}/nodeSelectorTerms"))
    {
        for (i, term) in terms.iter_mut().enumerate() {
            rename(
                term.get_mut("matchExpressions"),
                format!("affinity.nodeAffinity.{required}.nodeSelectorTerms[{i}]"),
            );
        }
    }
    let preferred = "preferredDuringSchedulingIgnoredDuringExecution";
    if let Some(Value::Array(terms)) = affinity.get_mut(preferred) {
        for (i, term) in terms.iter_mut().enumerate() {
            rename(
                term.pointer_mut("/preference/matchExpressions"),
                format!("affinity.nodeAffinity.{preferred}[{i}].preference"),
            );
        }
    }
    changed
}

/// Rewrites a Node's legacy `do-not-consolidate` annotation.
fn node(doc: &Document, w: &mut Vec<Warning>) -> Value {
    let mut value = doc.value.clone();
    if let Some(meta) = value.get_mut("metadata")
        && replace_legacy_annotation(meta, LEGACY_DO_NOT_CONSOLIDATE)
    {
        warn(
            w,
            &doc.describe(),
            format!(
                "metadata.annotations: {LEGACY_DO_NOT_CONSOLIDATE}: \"true\" replaced by {DO_NOT_DISRUPT}: \
                 \"true\", which also blocks drift, not only consolidation; remove it if the node should still \
                 be replaced when it drifts"
            ),
        );
    }
    value
}

/// `/spec/template/metadata` → `spec.template.metadata`.
fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

// ---------------------------------------------------------------------------------------------
// Pruning against the v1 schema

static SCHEMAS: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    crds::all()
        .into_iter()
        .map(|(_, crd)| {
            let spec = crds::schema_of(&crd)
                .pointer("/properties/spec")
                .cloned()
                .unwrap_or(Value::Null);
            (crd.spec.names.kind, spec)
        })
        .collect()
});

fn spec_schema(kind: Kind) -> &'static Value {
    let name = match kind {
        Kind::NodePool => "NodePool",
        Kind::NodeClaim => "NodeClaim",
        Kind::EC2NodeClass => "EC2NodeClass",
    };
    SCHEMAS
        .iter()
        .find(|(k, _)| k == name)
        .map_or(&Value::Null, |(_, s)| s)
}

/// Removes fields the schema does not declare, as the API server would silently do, recording
/// their paths so the user hears about them.
fn prune(value: &mut Value, schema: &Value, path: &str, dropped: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                map.retain(|k, _| {
                    let known = props.contains_key(k);
                    if !known {
                        dropped.push(format!("{path}.{k}"));
                    }
                    known
                });
                for (k, v) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune(v, s, &format!("{path}.{k}"), dropped);
                    }
                }
            } else if let Some(s @ Value::Object(_)) = schema.get("additionalProperties") {
                for (k, v) in map.iter_mut() {
                    prune(v, s, &format!("{path}.{k}"), dropped);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    prune(v, s, &format!("{path}[{i}]"), dropped);
                }
            }
        }
        _ => {}
    }
}
