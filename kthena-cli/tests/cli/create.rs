//! `kthena create manifest`: every template renders to valid manifests; `y` creates the
//! objects, `n` (or no answer) creates nothing.

use kthena_api::ModelBooster;
use kube::api::ListParams;

use super::support::kthena;

const PROMPT: &str =
    "================\nDo you want to apply these resources to the cluster? [y/N]: ";

/// The manifests between Go's `Generated YAML:` banner and the closing line.
#[expect(
    clippy::unwrap_used,
    reason = "test helper: a missing banner is a test failure"
)]
fn generated(stdout: &str) -> &str {
    let body = stdout
        .strip_prefix("Generated YAML:\n================\n")
        .unwrap();
    &body[..body.rfind("\n================\n").unwrap()]
}

#[tokio::test]
async fn dry_run_renders_every_template_to_valid_manifests() {
    // No cluster: a dry run never contacts one.
    for t in kthena_cli::TEMPLATES {
        let name = t.name();
        let run = kthena(
            None,
            &[
                "create",
                "manifest",
                "-t",
                &name,
                "--dry-run",
                "-n",
                "prod",
                "--name",
                "my-model",
            ],
            "",
        )
        .await;
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{name}");
        assert!(
            run.stdout
                .ends_with("\n================\nDry run mode: not applying to cluster\n"),
            "{}",
            run.stdout
        );
        let yaml = generated(&run.stdout);
        let docs = kthena_api::load_str(&name, yaml).unwrap();
        assert_eq!(docs.len(), 1, "{name}");
        let object = docs[0].object.clone();
        assert_eq!(
            (object.kind(), object.name(), object.namespace()),
            ("ModelBooster", "my-model", "prod"),
            "{name}"
        );
        assert!(object.with_defaults().validate().is_ok(), "{name}: {yaml}");
    }
}

#[tokio::test]
async fn values_file_and_set_reach_the_template() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        "name: from-file\nreplicas: 2\nnamespace: file-ns\nworkerImage: my/vllm:1\n",
    )
    .unwrap();
    let args = [
        "create",
        "manifest",
        "-t",
        "Qwen/Qwen3-8B",
        "-f",
        values.to_str().unwrap(),
        "--set",
        "replicas=4,owner=me",
        "--dry-run",
    ];
    let run = kthena(None, &args, "").await;
    let yaml = generated(&run.stdout);
    let docs = kthena_api::load_str("t", yaml).unwrap();
    let kthena_api::Object::ModelBooster(mb) = &docs[0].object else {
        panic!("{yaml}")
    };
    assert_eq!(mb.metadata.name.as_deref(), Some("from-file"));
    assert_eq!(mb.metadata.namespace.as_deref(), Some("file-ns"));
    assert_eq!(mb.spec.backend.replicas, 4);
    assert_eq!(mb.spec.owner.as_deref(), Some("me"));
    assert_eq!(
        mb.spec.backend.workers[0].image.as_deref(),
        Some("my/vllm:1")
    );
    let run = kthena(
        None,
        &[
            "create",
            "manifest",
            "-t",
            "Qwen/Qwen3-8B",
            "--set",
            "replicas=many",
            "--dry-run",
        ],
        "",
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .starts_with("error: the rendered manifests do not parse: "),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    let run = kthena(None, &["create", "manifest", "-t", "Qwen9"], "").await;
    assert_eq!(
        run.stderr,
        "error: template 'Qwen9' not found (see `kthena get templates`)\n"
    );
    // Regression: a YAML error's source snippet made the error five lines long.
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("list.yaml");
    std::fs::write(&values, "- a list\n").unwrap();
    let file = values.to_str().unwrap();
    let template = "DeepSeek-R1-Distill-Qwen-7B";
    let args = [
        "create",
        "manifest",
        "-t",
        template,
        "-f",
        file,
        "--dry-run",
    ];
    let run = kthena(None, &args, "").await;
    assert_eq!(run.code, 1);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with(&format!(
            "error: values file {file} is not a YAML mapping: "
        )),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn yes_creates_and_no_creates_nothing() {
    let ns = kthena_testenv::namespace("cli-create").await.unwrap();
    let n = ns.name();
    let kc = Some(ns.env().kubeconfig());
    let args = [
        "create",
        "manifest",
        "-t",
        "DeepSeek-R1-Distill-Qwen-7B",
        "--name",
        "ds7b",
        "-n",
        n,
    ];
    let boosters = ns.api::<ModelBooster>();

    for answer in ["n\n", "", "whatever\n"] {
        let run = kthena(kc, &args, answer).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout.ends_with(&format!("{PROMPT}Aborted.\n")),
            "{}",
            run.stdout
        );
        assert!(
            boosters
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }

    let run = kthena(kc, &args, "y\n").await;
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    let tail = format!(
        "{PROMPT}Applying ModelBooster/v1alpha1: ds7b in namespace {n}\n  Creating ModelBooster: ds7b in namespace {n}\n  \u{2713} Applied successfully\nAll resources applied successfully!\n"
    );
    assert!(run.stdout.ends_with(&tail), "{}", run.stdout);
    let created = boosters.get("ds7b").await.unwrap();
    assert_eq!(
        created.spec.backend.model_uri,
        "hf://deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    );
    assert_eq!(created.spec.name.as_deref(), Some("ds7b"));

    let run = kthena(kc, &args, "yes\n").await;
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        format!("error: ModelBooster \"ds7b\" already exists in namespace \"{n}\"\n")
    );
}
