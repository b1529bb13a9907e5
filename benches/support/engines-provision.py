#!/usr/bin/env python3
"""Provisioning by engine, mode and workspace size (docs/benchmarks.md, "Provisioning on every
engine"): `examples/sandbox_cycle provision` against `docker run --rm` of the same image, on the
local Docker engine, on rootful Podman's API service and on a remote Docker engine (a second dockerd
on loopback TCP with mutual TLS, in its own network and mount namespaces, as the engine tests start
it). Bind mode where the engine can see the host's paths, copy mode everywhere.

Usage (as root, from the checkout, after `cargo build --example sandbox_cycle --bin stet-sandbox`):
    benches/support/engines-provision.py [rounds] [sizes in MiB, comma-separated]
    benches/support/engines-provision.py --warm [turns]
Defaults: 5 rounds, 1,50,500. With --warm it runs the warm pool's bench (benches/warm.rs, `cargo
bench --profile dev --bench warm`: docker run --rm, a fresh copy-mode sandbox and one claimed from
the pool, in turns, then the idle pool's memory) on each engine instead, default 15 turns. Prints one line per measurement and the load average around it.
Podman and the second dockerd are started here and stopped at the end; everything else lives in
temporary directories.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

WARM = len(sys.argv) > 1 and sys.argv[1] == "--warm"
ARGS = sys.argv[2:] if WARM else sys.argv[1:]
ROUNDS = ARGS[0] if ARGS else ("15" if WARM else "5")
SIZES = (ARGS[1] if len(ARGS) > 1 else "1,50,500").split(",")
TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
CYCLE = os.path.abspath(f"{TARGET}/debug/examples/sandbox_cycle")
SANDBOX = os.path.abspath(f"{TARGET}/debug/stet-sandbox")
HIDDEN = ["/tmp", "/run", "/var/lib/docker", "/var/lib/containerd", "/var/lib/containers",
          os.path.expanduser("~"), os.getcwd()]


def activated(listener, argv, log, env=None):
    """Starts argv with `listener` as fd 3 and LISTEN_PID/LISTEN_FDS naming it (socket activation:
    requests wait in the backlog until the engine answers, so nothing polls for readiness)."""
    pid = os.fork()
    if pid == 0:
        os.dup2(listener.fileno(), 3)
        os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT, 0o600), 2)
        os.dup2(os.open("/dev/null", os.O_RDWR), 1)
        os.dup2(os.open("/dev/null", os.O_RDWR), 0)
        child_env = dict(os.environ, **(env or {}))
        child_env["LISTEN_FDS"] = "1"
        child_env["LISTEN_PID"] = str(os.getpid())
        os.set_inheritable(3, True)
        os.execvpe(argv[0], argv, child_env)
    listener.close()
    return pid


def openssl(directory, *args):
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def certificates(directory):
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl(directory, "req", "-x509", *key, "-keyout", "ca-key.pem", "-out", "ca.pem",
            "-days", "1", "-subj", "/CN=bench-ca")
    for name, subject, ext, key_file, cert_file in [
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
         "server-key.pem", "server-cert.pem"),
        ("client", "/CN=bench-client", "extendedKeyUsage=clientAuth\n", "key.pem", "cert.pem"),
    ]:
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write(ext)
        openssl(directory, "req", *key, "-keyout", key_file, "-out", f"{name}.csr", "-subj", subject)
        openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
                "ca-key.pem", "-CAcreateserial", "-out", cert_file, "-days", "1", "-extfile",
                f"{name}.ext")


def podman(root):
    conf = os.path.join(root, "containers.conf")
    with open(conf, "w") as f:
        f.write("[engine]\nexit_command_delay = 10\n")
    path = os.path.join(root, "podman.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
    pid = activated(listener, ["podman", "--runtime", "runc", "system", "service", "--time=0"],
                    os.path.join(root, "podman.log"), {"CONTAINERS_CONF": conf})
    return pid, {"DOCKER_HOST": f"unix://{path}", "SANDBOX_CYCLE_ENGINE": "podman"}


def remote_dockerd(root):
    certs = os.path.join(root, "certs")
    os.mkdir(certs)
    certificates(certs)
    with open(os.path.join(root, "empty.json"), "w") as f:
        f.write("{}")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    hide = "".join(
        f"mount -t tmpfs -o mode={'1777' if d == '/tmp' else '0755'},size=16m bench-hidden {d} && "
        for d in sorted(set(HIDDEN)) if os.path.isdir(d))
    dockerd = (
        f"exec dockerd --config-file {root}/empty.json --data-root {root}/data "
        f"--exec-root {root}/exec --pidfile {root}/dockerd.pid -H fd:// --bridge=none "
        f"--iptables=false --ip-masq=false --storage-driver=vfs --tlsverify "
        f"--tlscacert {certs}/ca.pem --tlscert {certs}/server-cert.pem "
        f"--tlskey {certs}/server-key.pem")
    pid = activated(listener, ["unshare", "--net", "--mount", "sh", "-c", hide + dockerd],
                    os.path.join(root, "dockerd.log"))
    return pid, {"DOCKER_HOST": f"tcp://127.0.0.1:{port}", "DOCKER_TLS_VERIFY": "1",
                 "DOCKER_CERT_PATH": certs}


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(name, env, modes):
    if WARM:
        engine = {"STET_BENCH_ENGINE": env.get("SANDBOX_CYCLE_ENGINE", "docker"),
                  "STET_BENCH_TURNS": ROUNDS}
        before = load()
        out = subprocess.run(["cargo", "bench", "--locked", "--profile", "dev", "--bench", "warm"],
                             env=dict(os.environ, **env, **engine), capture_output=True, text=True)
        print(f"== {name} [load {before} -> {load()}]\n{out.stdout.strip() or out.stderr.strip()}",
              flush=True)
        return
    for mb in SIZES:
        for mode in modes:
            before = load()
            out = subprocess.run([CYCLE, "provision", f"offline:{SANDBOX}", mode, mb, ROUNDS],
                                 env=dict(os.environ, **env), capture_output=True, text=True)
            line = out.stdout.strip() or out.stderr.strip()
            print(f"{name}: {line} [load {before} -> {load()}]", flush=True)


def main():
    for path in (CYCLE, SANDBOX):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: cargo build --example sandbox_cycle --bin stet-sandbox")
    local = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    os.environ.clear()
    os.environ.update(local)
    measure("local Docker", {}, ["bind", "copy"])
    podman_root = tempfile.mkdtemp(prefix="bench-podman-")
    remote_root = tempfile.mkdtemp(prefix="bench-remote-", dir="/var/tmp")
    started = []
    try:
        pid, env = podman(podman_root)
        started.append(pid)
        measure("rootful Podman", env, ["bind", "copy"])
        pid, env = remote_dockerd(remote_root)
        started.append(pid)
        measure("remote Docker (TLS, own namespaces)", env, ["copy"])
    finally:
        for pid in started:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        shutil.rmtree(podman_root, ignore_errors=True)
        subprocess.run(["rm", "-rf", "--one-file-system", remote_root])


if __name__ == "__main__":
    main()
