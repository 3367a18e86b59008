use serde_json::json;

use super::*;

/// `nginxPodTemplate` of Go Kthena's `pkg/model-serving-controller/utils/revision_util_test.go`
/// as JSON (Go builds it as a struct literal; this JSON decodes to the same Go value).
fn nginx() -> serde_json::Value {
    json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2"}]}})
}

/// `role1` of Go's `TestRevision` (replicas 1, no workers).
fn role1() -> serde_json::Value {
    json!({"name": "prefill", "replicas": 1, "entryTemplate": nginx(), "workerReplicas": 0})
}

/// `role2` of Go's `TestRevision` (2 workers of the same template).
fn role2() -> serde_json::Value {
    json!({"name": "decode", "replicas": 1, "entryTemplate": nginx(), "workerReplicas": 2,
        "workerTemplate": nginx()})
}

#[test]
fn schema_parses_and_holds_the_roots() -> Result<(), GoHashError> {
    let schema = Schema::get()?;
    assert_eq!(schema.ty("[]v1alpha1.Role")?.kind, Kind::Slice);
    assert_eq!(schema.ty("resource.Quantity")?.json, Some(Custom::Quantity));
    let probe = schema.ty("v1.Probe")?;
    assert!(probe.fields[0].inline, "ProbeHandler is promoted");
    Ok(())
}

#[test]
fn dump_of_go_test_role_is_spews_text() -> Result<(), GoHashError> {
    // Printed by Go: dump.ForHash(role1) (k8s.io/apimachinery v0.34.2) for role1 of Go
    // Kthena v1.0.0's revision_util_test.go.
    let go = include_str!("../testdata/role1.dump.txt");
    assert_eq!(dump_for_hash("v1alpha1.Role", &role1())?, go);
    Ok(())
}

#[test]
fn revisions_of_go_test_roles() -> Result<(), GoHashError> {
    // Printed by Go Kthena v1.0.0 utils.Revision(role1), utils.Revision(role2).
    assert_eq!(revision("v1alpha1.Role", &role1())?, "746d8646bb");
    assert_eq!(revision("v1alpha1.Role", &role2())?, "8646d8bfb7");
    Ok(())
}

#[test]
fn strings_ints_and_errors_follow_gos_decoder() {
    // A string where Go has int32: Go's decoder refuses the object.
    let bad = json!({"name": "x", "workerReplicas": "2", "entryTemplate": {}});
    let err = dump_for_hash("v1alpha1.Role", &bad).err();
    assert!(
        matches!(&err, Some(GoHashError::Mismatch { path, go_type, .. })
            if path == ".workerReplicas" && go_type == "int32"),
        "{err:?}"
    );
    // An int32 out of range.
    let big = json!({"name": "x", "workerReplicas": 3_000_000_000_i64, "entryTemplate": {}});
    assert!(dump_for_hash("v1alpha1.Role", &big).is_err());
    let bad_q = json!({"name": "x", "entryTemplate": {"spec": {"overhead": {"cpu": "1x"}}}});
    let err = dump_for_hash("v1alpha1.Role", &bad_q).err();
    assert!(
        matches!(&err, Some(GoHashError::Quantity { path, value })
            if path == ".entryTemplate.spec.overhead[\"cpu\"]" && value == "1x"),
        "{err:?}"
    );
}

#[test]
fn nil_empty_and_null_as_go_decodes_them() -> Result<(), GoHashError> {
    let dump = |spec: serde_json::Value| {
        dump_for_hash(
            "v1alpha1.PodTemplateSpec",
            &json!({"metadata": {}, "spec": spec}),
        )
    };
    let absent = dump(json!({}))?;
    assert!(absent.starts_with("(v1alpha1.PodTemplateSpec){Metadata:(*v1alpha1.Metadata){Labels:(map[string]string)<nil> Annotations:(map[string]string)<nil>} Spec:(v1.PodSpec){Volumes:([]v1.Volume)<nil> "), "{absent}");
    assert_eq!(dump(json!({"volumes": null}))?, absent);
    let empty = dump(json!({"volumes": [], "nodeSelector": {}}))?;
    assert!(empty.contains("Volumes:([]v1.Volume)[] "), "{empty}");
    assert!(
        empty.contains("NodeSelector:(map[string]string)map[] "),
        "{empty}"
    );
    let set = dump(json!({"nodeSelector": {"b": "2", "a": "1"}, "priority": 5}))?;
    assert!(
        set.contains("NodeSelector:(map[string]string)map[a:1 b:2] "),
        "{set}"
    );
    assert!(set.contains("Priority:(*int32)5 "), "{set}");
    Ok(())
}

/// The dump of one quantity (a `v1.ResourceList` value, printed without its type).
fn quantity_dump(q: &serde_json::Value) -> Result<String, GoHashError> {
    let d = dump_for_hash("v1.ResourceList", &json!({"q": q}))?;
    Ok(d.trim_start_matches("(v1.ResourceList)map[q:")
        .trim_end_matches(']')
        .to_owned())
}

#[test]
fn quantities_as_go_parses_them() -> Result<(), GoHashError> {
    // Printed by Go: dump.ForHash of resource.Quantity decoded by json.Unmarshal
    // (k8s.io/apimachinery v0.34.2), after the `{` of the struct.
    let fast = |v: i64, s: i32, text: &str, f: &str| {
        format!(
            "{{i:(resource.int64Amount){{value:(int64){v} scale:(resource.Scale){s}}} d:(resource.infDecAmount){{Dec:(*inf.Dec)<nil>}} s:(string){text} Format:(resource.Format){f}}}"
        )
    };
    let slow = |neg: bool, abs: &str, s: i32, f: &str| {
        format!(
            "{{i:(resource.int64Amount){{value:(int64)0 scale:(resource.Scale)0}} d:(resource.infDecAmount){{Dec:(*inf.Dec){{unscaled:(big.Int){{neg:(bool){neg} abs:(big.nat){abs}}} scale:(inf.Scale){s}}}}} s:(string) Format:(resource.Format){f}}}"
        )
    };
    let cases = [
        (json!("0"), fast(0, 0, "0", "DecimalSI")),
        (json!("00"), fast(0, 0, "", "DecimalSI")),
        (json!("-0"), fast(0, 0, "", "DecimalSI")),
        (json!("1000"), fast(1000, 0, "", "DecimalSI")),
        (json!("1k"), fast(1, 3, "1k", "DecimalSI")),
        (json!("100m"), fast(100, -3, "100m", "DecimalSI")),
        (json!("1.0"), fast(10, -1, "", "DecimalSI")),
        (json!("12e-1"), fast(12, -1, "", "DecimalExponent")),
        (json!("1e30"), fast(1, 30, "1e30", "DecimalExponent")),
        (json!(125), fast(125, 0, "125", "DecimalSI")),
        (json!("16Gi"), fast(17_179_869_184, 0, "", "BinarySI")),
        (json!("0.0Gi"), slow(false, "<nil>", 1, "BinarySI")),
        (json!("0.00000000001"), slow(false, "[1]", 9, "DecimalSI")),
        (
            json!("-1.5Gi"),
            slow(true, "[1610612736000000000]", 9, "BinarySI"),
        ),
        (
            json!("0.5Gi"),
            slow(false, "[536870912000000000]", 9, "BinarySI"),
        ),
        (json!("1Ei"), slow(false, "[0 62500000]", 9, "BinarySI")),
        (
            json!("100Ei"),
            slow(false, "[9223372036854775807]", 0, "BinarySI"),
        ),
    ];
    for (q, want) in cases {
        assert_eq!(quantity_dump(&q)?, want, "{q}");
    }
    Ok(())
}
