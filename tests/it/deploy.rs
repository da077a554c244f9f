//! The deployment files under `deploy/`, checked offline: the compose
//! healthcheck's exact command run under `/bin/sh` against a live gateway,
//! the Kubernetes manifests parsed and cross-checked (selectors, port
//! names, probe paths, the mounted configuration, budget against autoscaler,
//! the drain arithmetic, the restricted security level, the admin port's
//! NetworkPolicy, the scrape job the alert rules expect) and validated
//! against the Kubernetes schemas (kubernetes-validate).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use yaml_rust2::{Yaml, YamlLoader};

use crate::required_tools::tool_missing;
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
/// the binary on PATH and the admin address in the variable the probe
/// reads (in the image it is the configuration's 0.0.0.0:9090, which the
/// probe's default 127.0.0.1:9090 reaches; tests/it/image.rs holds it so).
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
        ("NetworkPolicy", "networking.k8s.io/v1"),
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
    // The root filesystem is read-only, so the inventory's redb file (on by
    // default) must lie under a writable mount, or the pod would not start.
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let store = v1compat::inventory::store_shown(&config.inventory);
    let file = store
        .strip_prefix("redb:")
        .unwrap_or_else(|| panic!("{store}: the manifest keeps a redb inventory"));
    let writable = list(&container["volumeMounts"]).iter().any(|m| {
        file.starts_with(&format!("{}/", s(&m["mountPath"])))
            && m["readOnly"].as_bool() != Some(true)
    });
    assert!(writable, "{file} is not under a writable volume mount");
    // Rolling updates: the preStop sleep lets endpoints drain before
    // SIGTERM, the drain delay covers what routes by readiness (the probe's
    // period times its failure threshold), and Kubernetes waits for all of
    // it and the grace period before SIGKILL.
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap() as u64;
    let pre_stop: Vec<&str> = list(&container["lifecycle"]["preStop"]["exec"]["command"])
        .iter()
        .map(s)
        .collect();
    assert_eq!(pre_stop.first(), Some(&"sleep"), "{pre_stop:?}");
    let pre_stop: u64 = pre_stop[1].parse().unwrap();
    assert!(pre_stop >= 1);
    let readiness = &container["readinessProbe"];
    let unready_after = (readiness["periodSeconds"].as_i64().unwrap_or(10)
        * readiness["failureThreshold"].as_i64().unwrap_or(3)) as u128;
    assert!(
        config.drain_delay.as_millis() >= unready_after * 1000,
        "drain_delay_ms {:?} < readiness {unready_after} s",
        config.drain_delay
    );
    let needed = Duration::from_secs(pre_stop) + config.drain_delay + config.grace_period;
    assert!(
        Duration::from_secs(grace) > needed,
        "terminationGracePeriodSeconds {grace} must exceed preStop + drain delay + grace period ({needed:?})"
    );
    // The "restricted" Pod Security Standard.
    let pod_security = &pod["spec"]["securityContext"];
    assert_eq!(pod_security["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(s(&pod_security["seccompProfile"]["type"]), "RuntimeDefault");
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(
        list(&security["capabilities"]["drop"]),
        &[Yaml::from_str("ALL")]
    );
    // The image: a registry reference tagged with this version, not :latest.
    let image = s(&container["image"]);
    let (repository, tag) = image.rsplit_once(':').expect("a tagged image");
    assert!(repository.contains('/'), "{image}: push it to a registry");
    assert_eq!(tag, env!("CARGO_PKG_VERSION"), "{image}");
    // Every Secret key the container reads is in the Secret.
    let secret = one(&all, "Secret");
    let mut secret_env = Vec::new();
    for var in list(&container["env"]) {
        let reference = &var["valueFrom"]["secretKeyRef"];
        if reference.is_badvalue() {
            continue;
        }
        assert_eq!(reference["name"], secret["metadata"]["name"]);
        assert!(
            !secret["stringData"][s(&reference["key"])].is_badvalue(),
            "{reference:?} is not in the Secret"
        );
        secret_env.push(s(&var["name"]));
    }
    for name in [
        "V1COMPAT_UPSTREAM__SERVICE_KEY",
        "V1COMPAT_ADMIN__OPERATOR_TOKEN",
    ] {
        assert!(
            secret_env.contains(&name),
            "{name} does not come from the Secret"
        );
    }
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
    // The job Prometheus gives its targets is the value of the Service's
    // label named by jobLabel (without one, the Service's name): the job
    // the alert rules select on.
    let job = s(&scraped[0]["metadata"]["labels"][s(&monitor["spec"]["jobLabel"])]);
    assert_eq!(job, alerted_job(), "the ServiceMonitor's job");

    // Only Prometheus reaches the admin port; the V1 port is open.
    let policy = one(&all, "NetworkPolicy");
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        pod_labels
    ));
    assert_eq!(
        list(&policy["spec"]["policyTypes"]),
        &[Yaml::from_str("Ingress")]
    );
    let rules = list(&policy["spec"]["ingress"]);
    let admitting = |port: &str| -> Vec<&Yaml> {
        rules
            .iter()
            .filter(|r| list(&r["ports"]).iter().any(|p| s(&p["port"]) == port))
            .collect()
    };
    let v1 = admitting("v1");
    assert!(
        v1.iter().any(|r| r["from"].is_badvalue()),
        "V1 is open to every client"
    );
    let admin = admitting("admin");
    assert!(!admin.is_empty(), "Prometheus must reach the admin port");
    for rule in admin {
        let from = list(&rule["from"]);
        assert!(!from.is_empty(), "the admin port is open to all: {rule:?}");
        for peer in from {
            assert!(
                !peer["namespaceSelector"].is_badvalue() && !peer["podSelector"].is_badvalue(),
                "a peer of the admin port names both namespace and pods: {peer:?}"
            );
            let pods = format!("{:?}", peer["podSelector"]);
            assert!(pods.contains("prometheus"), "{pods}");
        }
    }
    for rule in rules {
        for port in list(&rule["ports"]) {
            assert!(port_names.contains(&s(&port["port"])), "{port:?}");
        }
    }

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

/// The job `V1compatDown` selects on (`up{job="…"}`).
fn alerted_job() -> String {
    let rules = &docs("deploy/prometheus/alerts.yaml")[0]["groups"][0]["rules"];
    let down = list(rules)
        .iter()
        .find(|r| r["alert"].as_str() == Some("V1compatDown"))
        .expect("V1compatDown");
    let expr = s(&down["expr"]);
    let job = expr
        .split_once("job=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .unwrap_or_else(|| panic!("V1compatDown selects no job: {expr}"))
        .0;
    job.to_owned()
}

/// Every scrape job shipped names its targets' job as the alert rules
/// expect: by its name, or by relabelling `job`.
#[test]
fn scrape_jobs_are_the_job_the_alerts_watch() {
    let wanted = alerted_job();
    let scrape = &docs("deploy/prometheus/scrape.yaml")[0];
    let jobs = list(&scrape["scrape_configs"]);
    assert!(jobs.len() >= 2, "a static job and a Kubernetes pod job");
    for job in jobs {
        let relabelled = job["relabel_configs"]
            .as_vec()
            .into_iter()
            .flatten()
            .rfind(|r| r["target_label"].as_str() == Some("job"))
            .map(|r| s(&r["replacement"]).to_owned());
        let name = relabelled.unwrap_or_else(|| s(&job["job_name"]).to_owned());
        assert_eq!(name, wanted, "{job:?}");
    }
}

/// The manifests against the Kubernetes API schemas (kubernetes-validate,
/// strict: an unknown or misspelt field fails), for the oldest and the
/// newest Kubernetes release the tool knows that the manifests target.
/// The ServiceMonitor is a custom resource without a schema there; the
/// cross-checks above cover it.
#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    if tool_missing(
        "kubernetes_manifests_validate_against_the_schemas",
        "kubernetes-validate",
        "PyPI package kubernetes-validate; .ci/run installs it in a virtual environment",
    ) {
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/v1compat.yaml");
    let kinds = docs("deploy/kubernetes/v1compat.yaml").len();
    for version in ["1.29.0", "1.37.0"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--kubernetes-version", version])
            .arg(&manifest)
            .output()
            .unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "kubernetes-validate {version}:\n{report}"
        );
        assert_eq!(
            report.matches(" passed for resource ").count(),
            kinds,
            "{report}"
        );
    }
}
