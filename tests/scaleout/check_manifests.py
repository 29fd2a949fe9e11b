#!/usr/bin/env python3
"""Structural check of the deployment files (Debian 12 has no kubeconform; this stands in for it).

Parses docker/deploy/k8s/*.yaml, docker/compose.yaml, docker/Dockerfile and
docker/deploy/nginx.conf, and checks them against each other and against the server's sources:
  * every Kubernetes object has apiVersion, kind, metadata.name and the fields its kind requires,
    with the right types (a small schema for the kinds used here);
  * the Deployment's selector matches its pod labels, and so do the Service's and the PDB's;
  * the container port named by the probes and the Service is the one given to --port, and the
    probes' paths are routes the server registers (server/api_server.cpp);
  * terminationGracePeriodSeconds >= preStop sleep + --drain-timeout, and liveness tolerates
    failures for longer than that (the port closes while draining);
  * the HPA scales the Deployment on the name prometheus-adapter's rule gives
    vllm:num_requests_waiting, a metric the server declares;
  * every VLM_SERVER_* variable names a vlm-server flag (tools/vlm-server/server_flags.cpp);
  * compose: stop_grace_period >= the drain timeout, nginx's config is the one in docker/deploy;
  * Dockerfile: several stages, a non-root USER whose uid the Deployment runs as, HEALTHCHECK on
    /health, the model as a VOLUME;
  * nginx.conf: least_conn, passive health checks, buffering off, long read timeouts,
    client_max_body_size = the server's body limit, retries only on error/timeout.
--self-test additionally breaks copies of the files in memory and expects each break to be found.
Exit 0: all checks pass; 1: a problem (each is printed).
"""
import copy
import glob
import os
import re
import sys

try:
    import yaml
except ImportError:
    print("check_manifests: python3-yaml is missing (scripts/setup.sh installs it)", file=sys.stderr)
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "docker", "deploy", "k8s")


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


# ---- facts from the server's sources ----------------------------------------------------------

def server_facts():
    main = read("tools", "vlm-server", "server_flags.cpp")  # the flag table
    flags_block = main[main.index("kFlags = {"):main.index("};", main.index("kFlags = {"))]
    flags = set(re.findall(r'\{"([a-z0-9-]+)",', flags_block))
    api = read("server", "api_server.cpp")
    routes = set(re.findall(r'router\.add\("GET",\s*"([^"]+)"', api))
    metrics = set(re.findall(r'declare\("([a-z_:]+)"', api))
    http_h = read("server", "http", "http_server.h")
    m = re.search(r"max_body_bytes\s*=\s*(\d+)u?\s*<<\s*(\d+)", http_h)
    body = int(m.group(1)) << int(m.group(2)) if m else None
    return {"flags": flags, "routes": routes, "metrics": metrics, "max_body_bytes": body}


# ---- a small schema ----------------------------------------------------------------------------

def typed(errors, obj, path, kind, required=True):
    """obj[path...] exists and has Python type `kind`; returns it (or None)."""
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:
            if required:
                errors.append(f"missing {path}")
            return None
        cur = cur[key]
    if not isinstance(cur, kind) or (kind is int and isinstance(cur, bool)):
        errors.append(f"{path} must be {kind.__name__ if not isinstance(kind, tuple) else '/'.join(k.__name__ for k in kind)}, got {type(cur).__name__}")
        return None
    return cur


REQUIRED = {
    ("apps/v1", "Deployment"): [("spec.selector.matchLabels", dict), ("spec.template.metadata.labels", dict),
                                ("spec.template.spec.containers", list), ("spec.replicas", int)],
    ("v1", "Service"): [("spec.selector", dict), ("spec.ports", list)],
    ("policy/v1", "PodDisruptionBudget"): [("spec.selector.matchLabels", dict)],
    ("autoscaling/v2", "HorizontalPodAutoscaler"): [("spec.scaleTargetRef", dict), ("spec.maxReplicas", int),
                                                    ("spec.minReplicas", int), ("spec.metrics", list)],
    ("v1", "ConfigMap"): [("data", dict)],
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): [("resources", list)],
}


def probe_errors(name, probe, port_names, routes):
    errs = []
    if not isinstance(probe, dict):
        return [f"{name} is missing"]
    handlers = [h for h in ("httpGet", "tcpSocket", "exec", "grpc") if h in probe]
    if len(handlers) != 1:
        return [f"{name} needs exactly one handler, has {handlers}"]
    if "httpGet" in probe:
        hg = probe["httpGet"]
        if hg.get("path") not in routes:
            errs.append(f"{name} path {hg.get('path')!r} is not a GET route of the server {sorted(routes)}")
        if hg.get("port") not in port_names:
            errs.append(f"{name} port {hg.get('port')!r} is not a container port {sorted(port_names, key=str)}")
    for f in ("periodSeconds", "failureThreshold", "timeoutSeconds", "initialDelaySeconds", "successThreshold"):
        if f in probe and (not isinstance(probe[f], int) or probe[f] < 0):
            errs.append(f"{name}.{f} must be a non-negative integer")
    return errs


def flag_value(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def subset(a, b):
    return isinstance(a, dict) and isinstance(b, dict) and a and all(b.get(k) == v for k, v in a.items())


def check_k8s(docs, facts, dockerfile_uid):
    """docs: {filename: [objects]}. Returns a list of problems."""
    errors = []
    objs = {}
    for fname, items in docs.items():
        for o in items:
            where = f"{fname}"
            if not isinstance(o, dict):
                errors.append(f"{where}: a document is not a mapping")
                continue
            api, kind = o.get("apiVersion"), o.get("kind")
            name = (o.get("metadata") or {}).get("name")
            if kind != "Kustomization" and not (api and kind and name):
                errors.append(f"{where}: apiVersion, kind and metadata.name are required")
                continue
            if (api, kind) not in REQUIRED:
                errors.append(f"{where}: unexpected {api} {kind}")
                continue
            errs = []
            for path, t in REQUIRED[(api, kind)]:
                typed(errs, o, path, t)
            errors += [f"{where} ({kind}): {e}" for e in errs]
            objs.setdefault(kind, []).append((fname, o))

    for kind in ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"):
        if len(objs.get(kind, [])) != 1:
            errors.append(f"expected one {kind}, found {len(objs.get(kind, []))}")
    if errors:
        return errors
    _, dep = objs["Deployment"][0]
    _, svc = objs["Service"][0]
    _, pdb = objs["PodDisruptionBudget"][0]
    _, hpa = objs["HorizontalPodAutoscaler"][0]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    pod = dep["spec"]["template"]["spec"]

    # Labels and selectors.
    if not subset(dep["spec"]["selector"]["matchLabels"], pod_labels):
        errors.append("Deployment: selector.matchLabels does not match the pod template's labels")
    if not subset(svc["spec"]["selector"], pod_labels):
        errors.append("Service: selector does not match the Deployment's pod labels")
    if not subset(pdb["spec"]["selector"]["matchLabels"], pod_labels):
        errors.append("PodDisruptionBudget: selector does not match the Deployment's pod labels")
    if ("minAvailable" in pdb["spec"]) == ("maxUnavailable" in pdb["spec"]):
        errors.append("PodDisruptionBudget: exactly one of minAvailable / maxUnavailable")

    # The container, its ports and flags.
    containers = pod["containers"]
    if len(containers) != 1:
        return errors + [f"Deployment: expected one container, found {len(containers)}"]
    c = containers[0]
    for f, t in (("name", str), ("image", str), ("args", list), ("ports", list)):
        typed(errors, c, f, t)
    args = [str(a) for a in c.get("args", [])]
    for a in args:
        if a.startswith("--") and a[2:].split("=")[0] not in facts["flags"]:
            errors.append(f"Deployment: {a} is not a vlm-server flag")
    for e in c.get("env", []):
        n = e.get("name", "")
        if n.startswith("VLM_SERVER_") and n[11:].lower().replace("_", "-") not in facts["flags"]:
            errors.append(f"Deployment: env {n} names no vlm-server flag")
    port = flag_value(args, "--port")
    if port is None or flag_value(args, "--host") != "0.0.0.0":
        errors.append("Deployment: pass --port and --host 0.0.0.0 (the default 127.0.0.1 is unreachable)")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    if ports.get("http") is None or str(ports.get("http")) != str(port):
        errors.append(f"Deployment: containerPort 'http' ({ports.get('http')}) differs from --port ({port})")
    port_names = set(ports) | set(ports.values())
    for name in ("readinessProbe", "livenessProbe"):
        errors += [f"Deployment: {e}" for e in probe_errors(name, c.get(name), port_names, facts["routes"])]
    if "startupProbe" in c:
        errors += [f"Deployment: {e}" for e in probe_errors("startupProbe", c["startupProbe"], port_names, facts["routes"])]
    if (c.get("readinessProbe") or {}).get("httpGet", {}).get("path") != "/health":
        errors.append("Deployment: readinessProbe must GET /health (503 while loading and draining)")
    if svc["spec"]["ports"][0].get("targetPort") not in port_names:
        errors.append(f"Service: targetPort {svc['spec']['ports'][0].get('targetPort')!r} is not a container port")

    # Drain: grace period >= preStop + --drain-timeout; liveness outlasts it.
    grace = pod.get("terminationGracePeriodSeconds")
    drain = flag_value(args, "--drain-timeout")
    pre = (((c.get("lifecycle") or {}).get("preStop") or {}))
    pre_s = 0
    if "exec" in pre:
        cmd = pre["exec"].get("command", [])
        if len(cmd) == 2 and cmd[0] == "sleep":
            pre_s = int(cmd[1])
        else:
            errors.append(f"Deployment: preStop exec should be ['sleep', N], got {cmd}")
    elif "sleep" in pre:
        pre_s = int(pre["sleep"].get("seconds", 0))
    else:
        errors.append("Deployment: no preStop hook (endpoints need a moment to drop the pod before SIGTERM)")
    if not isinstance(grace, int) or drain is None:
        errors.append("Deployment: terminationGracePeriodSeconds and --drain-timeout are both required")
    else:
        if grace < pre_s + float(drain):
            errors.append(f"Deployment: terminationGracePeriodSeconds {grace} < preStop {pre_s} + --drain-timeout {drain}")
        lp = c.get("livenessProbe") or {}
        tolerance = lp.get("periodSeconds", 10) * lp.get("failureThreshold", 3)
        if tolerance <= grace:
            errors.append(f"Deployment: liveness gives up after {tolerance} s, within the {grace} s grace period")
    # Non-root, as the image.
    sc = pod.get("securityContext") or {}
    if sc.get("runAsNonRoot") is not True:
        errors.append("Deployment: securityContext.runAsNonRoot must be true")
    if dockerfile_uid is not None and sc.get("runAsUser") != dockerfile_uid:
        errors.append(f"Deployment: runAsUser {sc.get('runAsUser')} differs from the image's uid {dockerfile_uid}")
    if not any(m.get("mountPath") == "/model" for m in c.get("volumeMounts", [])) and flag_value(args, "--model") == "/model":
        errors.append("Deployment: --model /model but nothing is mounted at /model")

    # HPA: target and metric.
    ref = hpa["spec"]["scaleTargetRef"]
    if (ref.get("apiVersion"), ref.get("kind"), ref.get("name")) != ("apps/v1", "Deployment", dep["metadata"]["name"]):
        errors.append(f"HPA: scaleTargetRef {ref} is not the Deployment")
    if not 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]:
        errors.append("HPA: needs 1 <= minReplicas <= maxReplicas")
    adapter_names = {}
    for _, cm in objs.get("ConfigMap", []):
        for text in cm["data"].values():
            rules = (yaml.safe_load(text) or {}).get("rules", [])
            for r in rules:
                series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", r.get("seriesQuery", ""))
                if not series:
                    errors.append(f"adapter rule without a series name: {r.get('seriesQuery')!r}")
                    continue
                src = series.group(1)
                if src not in facts["metrics"]:
                    errors.append(f"adapter rule: the server declares no metric {src}")
                nm = r.get("name", {})
                exposed = re.sub(nm.get("matches", "^(.*)$"), nm.get("as", "${1}").replace("${", "\\g<").replace("}", ">"), src)
                adapter_names[exposed] = src
    metric_names = [m.get("pods", {}).get("metric", {}).get("name") for m in hpa["spec"]["metrics"] if m.get("type") == "Pods"]
    if not metric_names:
        errors.append("HPA: no Pods metric")
    for n in metric_names:
        if adapter_names.get(n) != "vllm:num_requests_waiting":
            errors.append(f"HPA: metric {n!r} is not what the adapter makes of vllm:num_requests_waiting ({adapter_names})")

    # kustomization lists existing files.
    for _, k in objs.get("Kustomization", []):
        for r in k["resources"]:
            if not os.path.exists(os.path.join(K8S, r)):
                errors.append(f"kustomization: {r} does not exist")
    return errors


def duration_s(v):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(v))
    if not m or not any(m.groups()):
        return None
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def check_compose(comp, facts, nginx_listen):
    errors = []
    services = comp.get("services") or {}
    vlm, ngx = services.get("vlm"), services.get("nginx")
    if not vlm or not ngx:
        return ["compose: services vlm and nginx are required"]
    env = vlm.get("environment") or {}
    for k in env:
        if k.startswith("VLM_SERVER_") and k[11:].lower().replace("_", "-") not in facts["flags"]:
            errors.append(f"compose: {k} names no vlm-server flag")
    drain = float(env.get("VLM_SERVER_DRAIN_TIMEOUT", 30))
    grace = duration_s(vlm.get("stop_grace_period", "10s"))
    if grace is None or grace < drain:
        errors.append(f"compose: vlm stop_grace_period {vlm.get('stop_grace_period')} < drain timeout {drain} s")
    if str(env.get("VLM_SERVER_LISTEN_WHILE_LOADING")) != "off":
        errors.append("compose: nginx checks passively; set VLM_SERVER_LISTEN_WHILE_LOADING off")
    if not any(isinstance(v, dict) and v.get("target") == "/model" for v in vlm.get("volumes", [])):
        errors.append("compose: the model must be mounted at /model")
    if "replicas" not in (vlm.get("deploy") or {}):
        errors.append("compose: vlm needs deploy.replicas")
    sources = [v.get("source") for v in ngx.get("volumes", []) if isinstance(v, dict) and v.get("target") == "/etc/nginx/nginx.conf"]
    if sources != ["./deploy/nginx.conf"]:
        errors.append(f"compose: nginx must mount ./deploy/nginx.conf, mounts {sources}")
    if not any(str(p).endswith(f":{nginx_listen}") for p in ngx.get("ports", [])):
        errors.append(f"compose: nginx publishes no port {nginx_listen} (nginx.conf listens there)")
    if (ngx.get("depends_on") or {}).get("vlm", {}).get("condition") != "service_healthy":
        errors.append("compose: nginx should wait for healthy replicas")
    return errors


def check_dockerfile(text):
    errors = []
    stages = re.findall(r"^FROM\s+\S+(?:\s+AS\s+(\S+))?", text, flags=re.M | re.I)
    if len(stages) < 2:
        errors.append("Dockerfile: expected a build stage and a runtime stage")
    final = text[[m.start() for m in re.finditer(r"^FROM", text, flags=re.M)][-1]:]
    user = re.findall(r"^USER\s+(\S+)", final, flags=re.M)
    uid = None
    if not user or user[-1].split(":")[0] in ("root", "0"):
        errors.append("Dockerfile: the runtime stage must switch to a non-root USER")
    elif user[-1].split(":")[0].isdigit():
        uid = int(user[-1].split(":")[0])
    if not re.search(r"^HEALTHCHECK\s.*?/health", final, flags=re.M | re.S):
        errors.append("Dockerfile: HEALTHCHECK on /health missing from the runtime stage")
    if not re.search(r'^VOLUME\s+\[?"?/model', final, flags=re.M):
        errors.append("Dockerfile: the model should be a VOLUME at /model")
    if re.search(r"setup\.sh|build-essential|cmake", final):
        errors.append("Dockerfile: the runtime stage must not carry build tools")
    return errors, uid


def check_nginx(text, facts):
    errors = []
    body = re.sub(r"#.*", "", text)
    def directive(name):
        return re.findall(rf"^\s*{name}\s+([^;]*);", body, flags=re.M)
    if "least_conn" not in body:
        errors.append("nginx: the upstream should use least_conn")
    up = re.search(r"upstream\s+\S+\s*\{([^}]*)\}", body)
    servers = re.findall(r"^\s*server\s+(\S+)([^;]*);", up.group(1), flags=re.M) if up else []
    if not servers or not all("max_fails=" in s[1] and "fail_timeout=" in s[1] for s in servers):
        errors.append("nginx: upstream servers need max_fails and fail_timeout (passive health checks)")
    if directive("proxy_buffering") != ["off"]:
        errors.append("nginx: proxy_buffering off (SSE)")
    rt = directive("proxy_read_timeout")
    if not rt or (duration_s(rt[0]) or 0) < 600:
        errors.append("nginx: proxy_read_timeout of at least 600s (long prefill, long streams)")
    size = directive("client_max_body_size")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    if not size:
        errors.append("nginx: client_max_body_size missing")
    else:
        m = re.fullmatch(r"(\d+)([kmgKMG]?)", size[0])
        b = int(m.group(1)) * units.get(m.group(2).lower(), 1) if m else None
        if b != facts["max_body_bytes"]:
            errors.append(f"nginx: client_max_body_size {size[0]} != the server's body limit {facts['max_body_bytes']} bytes")
    nu = directive("proxy_next_upstream")
    if not nu or set(nu[0].split()) - {"error", "timeout"}:
        errors.append(f"nginx: proxy_next_upstream may only list error and timeout, got {nu}")
    if re.search(r"^\s*keepalive\s+\d+", body, flags=re.M):
        errors.append("nginx: no upstream keepalive pool (a pooled connection to a draining replica gets a 503)")
    listen = directive("listen")
    return errors, (listen[0].split(":")[-1] if listen else None)


def load_all():
    docs = {}
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            docs[os.path.basename(path)] = [d for d in yaml.safe_load_all(f) if d is not None]
    with open(os.path.join(ROOT, "docker", "compose.yaml")) as f:
        comp = yaml.safe_load(f)
    return docs, comp, read("docker", "Dockerfile"), read("docker", "deploy", "nginx.conf")


def run_checks(docs, comp, dockerfile, nginx, facts):
    errors, uid = check_dockerfile(dockerfile)
    nerr, listen = check_nginx(nginx, facts)
    errors += nerr
    errors += check_k8s(docs, facts, uid)
    errors += check_compose(comp, facts, listen)
    return errors


def self_test(docs, comp, dockerfile, nginx, facts):
    """Each break must be found: the checks can fail."""
    def dep(d):
        return next(o for o in d["deployment.yaml"] if o["kind"] == "Deployment")
    breaks = {
        "grace period shorter than the drain": lambda d, c: dep(d)["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=20),
        "service selector off": lambda d, c: d["service.yaml"][0]["spec"]["selector"].update({"app.kubernetes.io/name": "other"}),
        "pdb selector off": lambda d, c: d["pdb.yaml"][0]["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "x"}),
        "hpa metric renamed": lambda d, c: d["hpa.yaml"][0]["spec"]["metrics"][0]["pods"]["metric"].update(name="vllm_num_requests_running"),
        "probe path wrong": lambda d, c: dep(d)["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"].update(path="/healthz"),
        "port mismatch": lambda d, c: dep(d)["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort=9000),
        "unknown env flag": lambda d, c: c["services"]["vlm"]["environment"].update(VLM_SERVER_NO_SUCH_FLAG="1"),
        "compose grace too short": lambda d, c: c["services"]["vlm"].update(stop_grace_period="10s"),
    }
    failed = []
    for name, mutate in breaks.items():
        d, c = copy.deepcopy(docs), copy.deepcopy(comp)
        mutate(d, c)
        if not run_checks(d, c, dockerfile, nginx, facts):
            failed.append(name)
    text_breaks = {
        "nginx body limit": (dockerfile, nginx.replace("client_max_body_size 32m", "client_max_body_size 1m")),
        "nginx retries 503": (dockerfile, nginx.replace("proxy_next_upstream error timeout;", "proxy_next_upstream error timeout http_503;")),
        "nginx buffering": (dockerfile, nginx.replace("proxy_buffering off;", "proxy_buffering on;")),
        "docker root user": (re.sub(r"^USER .*$", "USER root", dockerfile, flags=re.M), nginx),
    }
    for name, (df, ng) in text_breaks.items():
        if (df, ng) == (dockerfile, nginx) or not run_checks(docs, comp, df, ng, facts):
            failed.append(name)
    return failed


def main():
    facts = server_facts()
    docs, comp, dockerfile, nginx = load_all()
    errors = run_checks(docs, comp, dockerfile, nginx, facts)
    for e in errors:
        print(f"check_manifests: {e}")
    if not errors:
        n = sum(len(v) for v in docs.values())
        print(f"check_manifests: {n} Kubernetes objects, compose.yaml, Dockerfile and nginx.conf are consistent")
    if "--self-test" in sys.argv[1:]:
        missed = self_test(docs, comp, dockerfile, nginx, facts)
        for m in missed:
            print(f"check_manifests: self-test: the break '{m}' went unnoticed")
        if not missed:
            print("check_manifests: self-test: every deliberate break was found")
        errors += missed
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
