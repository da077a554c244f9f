//! The deployment files under `deploy/`, checked offline: the compose
//! healthcheck's exact command run under `/bin/sh` against a live gateway,
//! and the Kubernetes manifests parsed and cross-checked (selectors, port
//! names, probe paths, the mounted configuration, budget against autoscaler).

use std::path::Path;
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{MockV2, TestGateway};

fn docs(file: &str) -> Vec<Yaml> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn s(y: &Yaml) -> &str {
    y.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {y:?}"))
}

fn list(y: &Yaml) -> &Vec<Yaml> {
    y.as_vec()
        .unwrap_or_else(|| panic!("expected a list, got {y:?}"))
}

/// The compose healthcheck's command, exactly as written.
fn healthcheck_command() -> String {
    let compose = docs("deploy/compose.yaml");
    let test = list(&compose[0]["services"]["v1compat"]["healthcheck"]["test"]);
    assert_eq!(s(&test[0]), "CMD-SHELL", "compose runs it through /bin/sh");
    assert_eq!(test.len(), 2);
    s(&test[1]).to_owned()
}

/// Runs `command` the way the container runtime does (`/bin/sh -c`), with
/// the binary on PATH and the admin address the image sets.
fn run_healthcheck(shell: &str, command: &str, admin: &str) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_v1compat"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(shell)
        .arg("-c")
        .arg(command)
        .env_clear()
        .env("PATH", path)
        .env("V1COMPAT_LISTEN__ADMIN", admin)
        .output()
        .unwrap_or_else(|e| panic!("{shell}: {e}"))
}

#[tokio::test]
async fn compose_healthcheck_works_under_sh() {
    let command = healthcheck_command();
    let v2 = MockV2::untouchable().await;
    let config = format!("[upstream]\nbase_url = \"{}\"\n", v2.url());
    let gw = TestGateway::over_http(&config).await;
    // The image listens on every interface; the check must reach it anyway.
    let admin = format!("0.0.0.0:{}", gw.admin.port());
    let mut shells = vec!["/bin/sh"];
    if Path::new("/usr/bin/dash").exists() {
        shells.push("/usr/bin/dash");
    }
    for shell in shells {
        let (command2, admin2) = (command.clone(), admin.clone());
        let out = tokio::task::spawn_blocking(move || run_healthcheck(shell, &command2, &admin2))
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{shell} -c {command:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // And it fails when nothing answers.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        run_healthcheck("/bin/sh", &command, &dead.to_string())
    })
    .await
    .unwrap();
    assert!(!out.status.success(), "healthcheck passed with no gateway");
    assert_eq!(v2.total(), 0);
}

fn by_kind<'a>(docs: &'a [Yaml], kind: &str) -> Vec<&'a Yaml> {
    docs.iter().filter(|d| s(&d["kind"]) == kind).collect()
}

fn one<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    let found = by_kind(docs, kind);
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

/// Every `key: value` of `selector` is among `labels`.
fn selects(selector: &Yaml, labels: &Yaml) -> bool {
    let selector = selector
        .as_hash()
        .unwrap_or_else(|| panic!("selector {selector:?}"));
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[s(k)] == v)
}

#[test]
fn kubernetes_manifests_hang_together() {
    let mut all = docs("deploy/kubernetes/v1compat.yaml");
    all.extend(docs("deploy/kubernetes/servicemonitor.yaml"));
    let api = [
        ("Secret", "v1"),
        ("ConfigMap", "v1"),
        ("Service", "v1"),
        ("Deployment", "apps/v1"),
        ("PodDisruptionBudget", "policy/v1"),
        ("HorizontalPodAutoscaler", "autoscaling/v2"),
        ("ServiceMonitor", "monitoring.coreos.com/v1"),
    ];
    for doc in &all {
        let kind = s(&doc["kind"]);
        let expected = api
            .iter()
            .find(|(k, _)| *k == kind)
            .unwrap_or_else(|| panic!("unexpected kind {kind}"));
        assert_eq!(s(&doc["apiVersion"]), expected.1, "{kind}");
        assert!(!s(&doc["metadata"]["name"]).is_empty(), "{kind} has a name");
    }

    let deployment = one(&all, "Deployment");
    let pod = &deployment["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    assert!(selects(
        &deployment["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    let container = &list(&pod["spec"]["containers"])[0];
    let port_names: Vec<&str> = list(&container["ports"])
        .iter()
        .map(|p| s(&p["name"]))
        .collect();

    // Probes: the admin port, the paths the gateway serves.
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(s(&get["path"]), path, "{probe}");
        assert_eq!(s(&get["port"]), "admin", "{probe}");
        let timeout = container[probe]["timeoutSeconds"].as_i64().unwrap_or(1);
        assert!(timeout >= 1, "{probe}");
    }
    assert!(port_names.contains(&"admin") && port_names.contains(&"v1"));

    // The configuration: a ConfigMap mounted as a directory (a subPath mount
    // never sees updates, so reload would not work), holding the file the
    // container is told to read, and that file is a valid configuration.
    let args: Vec<&str> = list(&container["args"]).iter().map(s).collect();
    let config_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let mount = list(&container["volumeMounts"])
        .iter()
        .find(|m| config_path.starts_with(&format!("{}/", s(&m["mountPath"]))))
        .expect("the --config file lives under a volume mount");
    assert!(
        mount["subPath"].is_badvalue(),
        "no subPath: it blocks updates"
    );
    let volume = list(&pod["spec"]["volumes"])
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    let config_map_name = s(&volume["configMap"]["name"]);
    let config_map = by_kind(&all, "ConfigMap")
        .into_iter()
        .find(|c| s(&c["metadata"]["name"]) == config_map_name)
        .expect("the mounted ConfigMap");
    let file = config_path.rsplit('/').next().unwrap();
    let text = s(&config_map["data"][file]);
    let config = v1compat::config::load(text, Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap();
    assert!(
        grace as u64 > config.grace_period.as_secs(),
        "Kubernetes must wait longer than the drain"
    );
    // The container ports are the configured ones.
    for (name, addr) in [("v1", config.public_addr), ("admin", config.admin_addr)] {
        let port = list(&container["ports"])
            .iter()
            .find(|p| s(&p["name"]) == name)
            .unwrap();
        assert_eq!(port["containerPort"].as_i64(), Some(i64::from(addr.port())));
        assert!(
            addr.ip().is_unspecified(),
            "{name} must listen beyond loopback"
        );
    }

    // Services select the pods and point at named container ports.
    let services = by_kind(&all, "Service");
    for svc in &services {
        assert!(selects(&svc["spec"]["selector"], pod_labels));
        for port in list(&svc["spec"]["ports"]) {
            assert!(port_names.contains(&s(&port["targetPort"])), "{port:?}");
        }
    }

    // The ServiceMonitor scrapes /metrics on a Service that has the admin port.
    let monitor = one(&all, "ServiceMonitor");
    let scraped: Vec<_> = services
        .iter()
        .filter(|svc| {
            selects(
                &monitor["spec"]["selector"]["matchLabels"],
                &svc["metadata"]["labels"],
            )
        })
        .collect();
    assert_eq!(scraped.len(), 1, "the ServiceMonitor selects one Service");
    let endpoint = &list(&monitor["spec"]["endpoints"])[0];
    assert_eq!(s(&endpoint["path"]), "/metrics");
    assert!(list(&scraped[0]["spec"]["ports"])
        .iter()
        .any(|p| p["name"] == endpoint["port"]));

    // Autoscaler and budget: the autoscaler scales this Deployment and keeps
    // enough replicas that the budget still lets a node drain.
    let hpa = one(&all, "HorizontalPodAutoscaler");
    let target = &hpa["spec"]["scaleTargetRef"];
    assert_eq!(s(&target["kind"]), "Deployment");
    assert_eq!(target["name"], deployment["metadata"]["name"]);
    let min = hpa["spec"]["minReplicas"].as_i64().unwrap();
    let max = hpa["spec"]["maxReplicas"].as_i64().unwrap();
    assert!(min >= 2 && max >= min, "{min}..{max}");
    assert!(
        deployment["spec"]["replicas"].is_badvalue(),
        "the autoscaler owns the replica count"
    );
    assert!(
        !container["resources"]["requests"]["cpu"].is_badvalue(),
        "CPU utilisation needs a CPU request"
    );
    let pdb = one(&all, "PodDisruptionBudget");
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels));
    let max_unavailable = pdb["spec"]["maxUnavailable"].as_i64();
    let min_available = pdb["spec"]["minAvailable"].as_i64();
    assert!(
        max_unavailable.is_some_and(|n| n >= 1) || min_available.is_some_and(|n| n < min),
        "the budget must allow one eviction at the autoscaler's minimum"
    );
}
