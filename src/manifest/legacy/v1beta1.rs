//! v1beta1 NodePools, EC2NodeClasses and NodeClaims to v1.

use super::*;

// v1beta1 NodePool

/// Converts a v1beta1 NodePool to v1, returning the kubelet block it carried.
pub(super) fn nodepool_beta(
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
pub(super) fn disruption_beta(
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
pub(super) fn node_class_ref(
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
pub(super) enum Origin {
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
pub(super) fn ec2nodeclass_beta(
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

pub(super) fn warn_hop_limit(w: &mut Vec<Warning>, object: &str) {
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
pub(super) fn nodeclaim_beta(
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
