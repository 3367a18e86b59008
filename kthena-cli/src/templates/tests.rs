use super::*;
use serde_json::json;

#[test]
fn go_listing_order_and_names() {
    let names: Vec<String> = TEMPLATES.iter().map(Template::name).collect();
    assert_eq!(names.len(), 13);
    assert_eq!(names[0], "Qwen/Qwen3-32B-NPU");
    assert_eq!(names[1], "Qwen/Qwen3-32B");
    assert_eq!(names[8], "Qwen/Qwen3-Coder-30B-A3B-Instruct");
    assert_eq!(names[12], "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B");
}

#[test]
fn lookup_by_full_name_or_model() {
    assert_eq!(find_template("Qwen/Qwen3-8B").unwrap().model, "Qwen3-8B");
    assert_eq!(
        find_template("DeepSeek-R1-Distill-Qwen-7B").unwrap().vendor,
        "deepseek-ai"
    );
    assert!(matches!(
        find_template("qwen3-8b"),
        Err(Error::TemplateNotFound { .. })
    ));
}

#[test]
fn description_from_first_comment() {
    let t = Template {
        vendor: "v",
        model: "m",
        content: "# Description: Hello there\nkind: X\n",
    };
    assert_eq!(t.description(), "Hello there");
    let t = Template {
        vendor: "v",
        model: "m",
        content: "kind: X\n# Description: late\n",
    };
    assert_eq!(t.description(), "No description available");
    let info = find_template("Qwen/Qwen3-8B").unwrap().info();
    assert_eq!(info.file_path, "Qwen/Qwen3-8B.yaml");
    assert_eq!(
        info.description,
        "Qwen3-8B on vLLM with 1 NVIDIA GPU per replica (ModelBooster)"
    );
}

#[test]
fn render_with_defaults_and_values() {
    let t = find_template("Qwen/Qwen3-8B").unwrap();
    let v = BTreeMap::from([("namespace".to_owned(), json!("prod"))]);
    let out = t.render(&v).unwrap();
    assert!(out.starts_with("# Description: Qwen3-8B on vLLM"), "{out}");
    assert!(
        out.contains("\n  name: \"qwen3-8b\"\n  namespace: \"prod\"\n"),
        "{out}"
    );
    assert!(out.contains("\n    replicas: 1\n"), "{out}");
    let v = BTreeMap::from([
        ("name".to_owned(), json!("my-qwen")),
        ("replicas".to_owned(), json!("3")),
        ("modelName".to_owned(), json!("")),
    ]);
    let out = t.render(&v).unwrap();
    assert!(!out.contains("namespace:"), "{out}");
    assert!(out.contains("\n  name: \"my-qwen\"\n"), "{out}");
    assert!(out.contains("\n    replicas: 3\n"), "{out}");
    assert!(out.contains("served-model-name: \"my-qwen\""), "{out}");
}

#[test]
fn every_template_renders_to_valid_kthena_objects() {
    let v = BTreeMap::from([("namespace".to_owned(), json!("default"))]);
    for t in TEMPLATES {
        let out = t.render(&v).unwrap();
        let docs = kthena_api::load_str(&t.name(), &out)
            .unwrap_or_else(|e| panic!("{}: {e}\n{out}", t.name()));
        assert_eq!(docs.len(), 1, "{}", t.name());
        for d in docs {
            assert!(d.object.is_kthena(), "{}", t.name());
            let obj = d.object.with_defaults();
            if let Err(errors) = obj.validate() {
                panic!("{}: {errors:?}\n{out}", t.name());
            }
        }
    }
}
