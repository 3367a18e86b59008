use super::parse_env;

#[test]
fn env_file_lines() {
    let vars = parse_env(
        "# kube-env\nexport KUBECONFIG=/tmp/d/kubeconfig KUBECTL='/c/kubectl'\n\
             KTHENA_APISERVER_PID=\"42\"\n",
    );
    let want = [
        ("KUBECONFIG", "/tmp/d/kubeconfig"),
        ("KUBECTL", "/c/kubectl"),
        ("KTHENA_APISERVER_PID", "42"),
    ];
    let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(got, want);
}
