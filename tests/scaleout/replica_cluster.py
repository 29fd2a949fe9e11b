"""The cluster of the replica test (replica_test.py): vlm-server replicas and Debian's nginx on
127.0.0.1, started and stopped by pid, with bounded waits and the HTTP and metrics helpers the
checks use."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILDREN = []  # every Popen this script started


def log(msg):
    print(f"[replica_test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class CheckFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)
    log(f"ok: {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(p, sig=signal.SIGTERM, wait_s=15.0):
    if p.poll() is not None:
        return
    try:
        p.send_signal(sig)
        p.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=5)
    except ProcessLookupError:
        pass


def stop_all():
    for p in reversed(CHILDREN):
        stop_process(p, signal.SIGTERM, 5.0)


def http_get(port, path, timeout=5.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def wait_until(pred, timeout_s, what, interval=0.05):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(interval)
    raise CheckFailed(f"timed out after {timeout_s} s waiting for {what}")


def metric_sum(port, name):
    """Sum of every sample of metric `name` on a replica's /metrics."""
    status, body = http_get(port, "/metrics")
    if status != 200:
        raise CheckFailed(f"GET /metrics on :{port} answered {status}")
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Replica:
    def __init__(self, args, model_dir, tmp, index):
        self.args, self.model_dir, self.tmp, self.index = args, model_dir, tmp, index
        self.port = free_port()
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        logf = open(os.path.join(self.tmp, f"replica{self.index}.{self.starts}.log"), "w")
        cmd = [os.path.join(self.args.bin_dir, "vlm-server"), "--model", self.model_dir,
               "--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(self.port),
               "--listen-while-loading", "off", "--drain-timeout", "20", "--log-level", os.environ.get("VLM_REPLICA_TEST_LOG_LEVEL", "warn"),
               # 128 MiB of KV cache (default 1 GiB): starts faster, three fit in little memory.
               "--kv-cache-memory-gib", "0.125"]
        if self.args.threads:
            cmd += ["--threads", str(self.args.threads)]
        self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
        CHILDREN.append(self.proc)
        logf.close()

    def wait_ready(self, timeout_s=60.0):
        def ready():
            if self.proc.poll() is not None:
                raise CheckFailed(f"replica {self.index} exited with {self.proc.returncode} while starting")
            return http_get(self.port, "/health", 2.0)[0] == 200
        wait_until(ready, timeout_s, f"replica {self.index} /health 200")

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"


def nginx_binary():
    found = shutil.which("nginx")
    if found:
        return found
    for d in ("/usr/sbin", "/usr/local/sbin"):
        if os.access(os.path.join(d, "nginx"), os.X_OK):
            return os.path.join(d, "nginx")
    return None


def render_nginx_conf(template, upstream_addrs, listen_port, access_log):
    """The shipped config with its three deployment-specific lines replaced (each must match once)."""
    def sub_once(pattern, repl, text):
        out, n = re.subn(pattern, repl, text, flags=re.M)
        if n != 1:
            raise CheckFailed(f"docker/deploy/nginx.conf: expected one line matching {pattern!r}, found {n}")
        return out
    m = re.search(r"^(\s*)server\s+vlm:8000(\s[^;]*)?;", template, flags=re.M)
    if not m:
        raise CheckFailed("docker/deploy/nginx.conf: no 'server vlm:8000 ...;' line in the upstream")
    indent, params = m.group(1), m.group(2) or ""
    servers = "\n".join(f"{indent}server {a}{params};" for a in upstream_addrs)
    text = sub_once(r"^\s*server\s+vlm:8000(\s[^;]*)?;", servers, template)
    text = sub_once(r"^(\s*)listen\s+8080;", rf"\g<1>listen 127.0.0.1:{listen_port};", text)
    text = sub_once(r"^(\s*)access_log\s+/dev/stdout\s+vlm;", rf"\g<1>access_log {access_log} vlm;", text)
    return text


class Nginx:
    def __init__(self, tmp, name, upstream_addrs):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.port = free_port()
        self.access_log = os.path.join(self.dir, "access.log")
        with open(os.path.join(ROOT, "docker", "deploy", "nginx.conf")) as f:
            conf = render_nginx_conf(f.read(), upstream_addrs, self.port, self.access_log)
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.proc = None
        m = re.search(r"fail_timeout=(\d+)s", conf)
        self.fail_timeout_s = int(m.group(1)) if m else 10  # nginx's default

    def start(self, nginx):
        directives = "daemon off;"
        if os.geteuid() == 0:  # workers would otherwise drop to 'nobody' and lose the temp folder
            directives += " user root;"
        cmd = [nginx, "-p", self.dir + "/", "-c", self.conf, "-e", os.path.join(self.dir, "error.log"),
               "-g", directives]
        test = subprocess.run(cmd + ["-t"], capture_output=True, text=True, timeout=30)
        if test.returncode != 0:
            raise CheckFailed(f"nginx -t rejected the config:\n{test.stderr}")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "stderr.log"), "w"))
        CHILDREN.append(self.proc)

        def up():
            if self.proc.poll() is not None:
                raise CheckFailed(f"nginx exited with {self.proc.returncode}: see {self.dir}/error.log")
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        wait_until(up, 20, "nginx to listen")

    def entries(self):
        """The access log's chat requests, each with start/end (nginx's clock) and `failed`: an
        error status, or a stream the replica cut after the headers (status 200 in the access log,
        "upstream prematurely closed" or a failed recv() for connection *N in the error log; the
        client connection closes with it, so it is that connection's last request)."""
        out = []
        with open(self.access_log) as f:
            for line in f:
                # $upstream_addr lists every replica tried: "a, b".
                kv = dict(re.findall(r"(\w+)=((?:[^\s,]+, )*\S*)", line))
                if kv.get("uri") == "/v1/chat/completions":
                    kv["end"] = float(kv["msec"])
                    kv["start"] = kv["end"] - float(kv["rt"])
                    kv["final_upstream"] = kv["upstream"].split(", ")[-1]
                    kv["failed"] = int(kv["status"]) >= 500
                    out.append(kv)
        cut = set()
        with open(os.path.join(self.dir, "error.log")) as f:
            for line in f:
                m = re.search(r"\*(\d+) (upstream prematurely closed connection|recv\(\) failed .*) while reading upstream", line)
                if m:
                    cut.add(m.group(1))
        for conn in cut:
            last = max((e for e in out if e["conn"] == conn), key=lambda e: e["end"], default=None)
            if last is not None:
                last["failed"] = True
        return out
