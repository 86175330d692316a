//! Taints and tolerations with Kubernetes' matching rules, so that the scheduler only places a
//! pod where kube-scheduler would later bind it.

use crate::apis::nodeclaim::{Taint, TaintEffect};

/// How a toleration compares values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TolerationOperator {
    /// The taint value must equal the toleration's.
    #[default]
    Equal,
    /// Any value (and, with an empty key, any taint).
    Exists,
}

/// A pod toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Toleration {
    /// Taint key; empty with `Exists` tolerates every taint.
    pub key: String,
    /// Equal or Exists.
    pub operator: TolerationOperator,
    /// Value compared under `Equal`.
    pub value: String,
    /// Effect tolerated; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Converts a Kubernetes toleration, rejecting unknown operators and effects.
    pub fn from_k8s(t: &k8s_openapi::api::core::v1::Toleration) -> Result<Self, String> {
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(format!(
                    "toleration operator {other:?} is not supported; use \"Equal\" or \"Exists\""
                ));
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(parse_effect(e)?),
        };
        Ok(Self {
            key: t.key.clone().unwrap_or_default(),
            operator,
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }

    /// Whether this toleration tolerates the taint.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value.as_deref().unwrap_or(""),
        }
    }
}

/// Parses a taint effect name.
pub fn parse_effect(effect: &str) -> Result<TaintEffect, String> {
    match effect {
        "NoSchedule" => Ok(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
        "NoExecute" => Ok(TaintEffect::NoExecute),
        other => Err(format!(
            "taint effect {other:?} is not supported; use NoSchedule, PreferNoSchedule or NoExecute"
        )),
    }
}

/// The first taint the tolerations do not tolerate, ignoring `PreferNoSchedule` taints (which
/// only steer the scheduler), or `None` when the pod may schedule.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        taint.effect != TaintEffect::PreferNoSchedule
            && !tolerations.iter().any(|t| t.tolerates(taint))
    })
}

/// Like [`first_untolerated`], but `PreferNoSchedule` taints count too: Karpenter avoids nodes
/// the pod merely prefers not to land on until its last relaxation step.
pub fn first_untolerated_strict<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| t.tolerates(taint)))
}

/// Converts a Kubernetes taint.
pub fn taint_from_k8s(t: &k8s_openapi::api::core::v1::Taint) -> Result<Taint, String> {
    Ok(Taint {
        key: t.key.clone(),
        value: t.value.clone().filter(|v| !v.is_empty()),
        effect: parse_effect(&t.effect)?,
        time_added: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
            time_added: None,
        }
    }

    fn tol(
        key: &str,
        op: TolerationOperator,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn matching_follows_kubernetes() {
        use TaintEffect::*;
        use TolerationOperator::*;
        let gpu = taint("nvidia.com/gpu", Some("true"), NoSchedule);
        assert!(tol("nvidia.com/gpu", Equal, "true", Some(NoSchedule)).tolerates(&gpu));
        assert!(tol("nvidia.com/gpu", Equal, "true", None).tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", Equal, "false", None).tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", Equal, "true", Some(NoExecute)).tolerates(&gpu));
        assert!(tol("nvidia.com/gpu", Exists, "", None).tolerates(&gpu));
        assert!(tol("", Exists, "", None).tolerates(&gpu));
        assert!(!tol("", Equal, "", None).tolerates(&gpu));
        assert!(!tol("other", Exists, "", None).tolerates(&gpu));
        let keyonly = taint("dedicated", None, NoExecute);
        assert!(tol("dedicated", Equal, "", None).tolerates(&keyonly));
    }

    #[test]
    fn prefer_no_schedule_only_counts_when_strict() {
        let taints = [taint("a", None, TaintEffect::PreferNoSchedule)];
        assert!(first_untolerated(&taints, &[]).is_none());
        assert!(first_untolerated_strict(&taints, &[]).is_some());
        assert!(
            first_untolerated_strict(
                &taints,
                &[Toleration {
                    operator: TolerationOperator::Exists,
                    effect: Some(TaintEffect::PreferNoSchedule),
                    ..Toleration::default()
                }]
            )
            .is_none()
        );
    }
}
