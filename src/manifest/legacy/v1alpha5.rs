//! v1alpha5 Provisioners and v1alpha1 AWSNodeTemplates to v1 NodePools and EC2NodeClasses.

use super::*;

// v1alpha5 Provisioner

/// Converts a Provisioner into a v1 NodePool, plus an EC2NodeClass when it had an inline
/// `provider` block.
pub(super) fn provisioner(
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
pub(super) fn default_requirement(
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
pub(super) fn aws_node_template(
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
pub(super) enum Selector {
    Subnet,
    SecurityGroup,
    Ami,
}

/// Lifts a v1alpha1 AWSNodeTemplate spec (or a Provisioner's inline provider) to the v1beta1
/// EC2NodeClass spec shape.
pub(super) fn aws_node_template_spec(
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
pub(super) fn selector_terms(
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
