//! Table columns of the RBAC and admission-policy kinds, as `kubectl get` shows them on a real cluster
//! (upstream `pkg/printers/internalversion/printers.go`).

use super::super::printer_columns::{age, age_column, column};
use super::super::resource::{Builtin, PrinterColumn};
use serde_json::{Value, json};

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The columns after `Name` of `kind`, if it is one of these kinds.
pub fn columns(kind: Builtin) -> Option<Vec<PrinterColumn>> {
    Some(match kind {
        Builtin::Role | Builtin::ClusterRole => {
            vec![column("Created At", "date", "", 0, "Time at which this object was created")]
        }
        Builtin::RoleBinding | Builtin::ClusterRoleBinding => vec![
            column("Role", "string", "", 0, "Role of the binding"),
            age_column(),
            column("Users", "string", "", 1, "Users in the binding"),
            column("Groups", "string", "", 1, "Groups in the binding"),
            column("ServiceAccounts", "string", "", 1, "ServiceAccounts in the binding"),
        ],
        Builtin::ValidatingAdmissionPolicy => vec![
            column("Validations", "integer", "", 0, "Validations indicates the number of validation rules"),
            column(
                "ParamKind",
                "string",
                "",
                0,
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            age_column(),
        ],
        Builtin::ValidatingAdmissionPolicyBinding => vec![
            column(
                "PolicyName",
                "string",
                "",
                0,
                "PolicyName references a ValidatingAdmissionPolicy name which the ValidatingAdmissionPolicyBinding binds to",
            ),
            column(
                "ParamRef",
                "string",
                "",
                0,
                "ParamRef specifies the parameter resource used to configure the admission control policy",
            ),
            age_column(),
        ],
        _ => return None,
    })
}

/// The cells after the name of `object` of `kind`, if it is one of these kinds.
pub fn cells(kind: Builtin, object: &Value) -> Option<Vec<Value>> {
    Some(match kind {
        Builtin::Role | Builtin::ClusterRole => vec![json!(text(object, "/metadata/creationTimestamp"))],
        Builtin::RoleBinding | Builtin::ClusterRoleBinding => {
            let subjects = object.get("subjects").and_then(Value::as_array).cloned().unwrap_or_default();
            let of = |kind: &str| -> String {
                let names: Vec<String> = subjects
                    .iter()
                    .filter(|s| text(s, "/kind") == kind)
                    .map(|s| match kind {
                        "ServiceAccount" => format!("{}/{}", text(s, "/namespace"), text(s, "/name")),
                        _ => text(s, "/name").to_owned(),
                    })
                    .collect();
                names.join(", ")
            };
            vec![
                json!(format!("{}/{}", text(object, "/roleRef/kind"), text(object, "/roleRef/name"))),
                json!(age(object)),
                json!(of("User")),
                json!(of("Group")),
                json!(of("ServiceAccount")),
            ]
        }
        Builtin::ValidatingAdmissionPolicy => {
            let validations = object.pointer("/spec/validations").and_then(Value::as_array).map_or(0, Vec::len);
            let param_kind = match object.pointer("/spec/paramKind").filter(|p| !p.is_null()) {
                Some(p) => format!("{}/{}", text(p, "/apiVersion"), text(p, "/kind")),
                None => "<unset>".to_owned(),
            };
            vec![json!(validations), json!(param_kind), json!(age(object))]
        }
        Builtin::ValidatingAdmissionPolicyBinding => {
            let param_ref = match object.pointer("/spec/paramRef").filter(|p| !p.is_null()) {
                Some(p) if !text(p, "/namespace").is_empty() => {
                    format!("{}/{}", text(p, "/namespace"), text(p, "/name"))
                }
                Some(p) if !text(p, "/name").is_empty() => format!("*/{}", text(p, "/name")),
                Some(_) => "*/*".to_owned(),
                None => "<unset>".to_owned(),
            };
            vec![json!(text(object, "/spec/policyName")), json!(param_ref), json!(age(object))]
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_show_their_role_and_subjects() {
        let binding = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}, {"kind": "User", "name": "u"},
                         {"kind": "Group", "name": "g1"}, {"kind": "Group", "name": "g2"}]});
        let row = cells(Builtin::ClusterRoleBinding, &binding).unwrap();
        assert_eq!(row[0], "ClusterRole/view");
        assert_eq!(row[2..], [json!("u"), json!("g1, g2"), json!("ns/sa")]);
        assert_eq!(columns(Builtin::ClusterRoleBinding).unwrap().len(), row.len());
        let policy = json!({"spec": {"validations": [{}, {}]}});
        assert_eq!(cells(Builtin::ValidatingAdmissionPolicy, &policy).unwrap()[..2], [json!(2), json!("<unset>")]);
        assert!(columns(Builtin::Pod).is_none());
    }
}
