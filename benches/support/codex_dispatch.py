#!/usr/bin/env python3
"""Measures a live Codex dispatch (docs/benchmarks.md, "A live Codex dispatch"): `stet --headless
--push` with `[harness] kind = "codex"`, the real `codex exec --json` in the Codex dispatch image,
against the scripted Responses API model of tests/fixtures/codex (scenario shell-edit: a reasoning
summary and a `sed` through Codex's shell tool, then a message: two model requests, no pauses), with
stet's gateway between them. Each run is split by phase from its own events; inside `running`, the
model's own time (the scripted server's, per request), the gateway's and relay's (each `usage`
event's `latency_ms`, request in to last byte out, less the model's) and Codex's (the rest).

Usage: benches/support/codex_dispatch.py STET IMAGE [runs]      (default 5 runs)
  STET   the stet binary; IMAGE the Codex dispatch image made with the same build's stet-sandbox
         (docker/dispatch/build-offline --harness codex --stet target/<profile>/stet-sandbox).
Needs Docker, git and Python 3. Everything happens under a temporary directory.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

STET = os.path.abspath(sys.argv[1])
IMAGE = sys.argv[2]
RUNS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
HERE = Path(__file__).resolve().parent
SERVER = HERE.parent.parent / "tests" / "fixtures" / "codex" / "scripted_responses.py"
PHASES = ["preflight", "provisioning", "running", "collecting", "pushing", "opening_pr", "teardown"]


def ts(event):
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", *args],
                   cwd=cwd, check=True, capture_output=True)


def project(root, port):
    """The repository (greeting.txt and one brief), its bare remote, the user's configuration."""
    repo, remote = root / "repo", root / "remote.git"
    git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    (repo / ".stet" / "briefs").mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "greeting.txt").write_text("Hello\n")
    (repo / ".stet" / "briefs" / "greet.toml").write_text(
        'title = "Greet"\nworkflow = "implement"\n\n[target]\nrepo = "bench/greet"\nbase = "main"\n\n'
        '[[items]]\ntext = "Change the greeting in greeting.txt to say Hello, stet."\n')
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "greeting")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "--quiet", "origin", "main")
    config = root / "config" / "stet" / "config.toml"
    config.parent.mkdir(parents=True)
    prices = root / "prices.toml"
    prices.write_text('[models."stet-scripted"]\ninput = 0.01\noutput = 0.01\n')
    config.write_text(
        f'[forge]\nkind = "local"\n\n[forge.local]\nremote = {json.dumps(str(remote))}\n\n'
        f'[harness]\nkind = "codex"\n\n[harness.codex]\nmodel = "stet-scripted"\n\n'
        f'[model]\nbase_url = "http://127.0.0.1:{port}/v1"\napi_key_env = "STET_BENCH_MODEL_KEY"\n'
        f'prices = {json.dumps(str(prices))}\n\n[dispatch]\nimage = "{IMAGE}"\n')
    return repo


def one_run(root):
    requests = root / "requests"
    port_file = root / "port"
    server = subprocess.Popen([sys.executable, str(SERVER), "shell-edit", str(port_file), str(requests)])
    try:
        while not port_file.exists() or not port_file.read_text():
            if server.poll() is not None:
                sys.exit("the scripted model did not start")
            time.sleep(0.05)
        repo = project(root, int(port_file.read_text()))
        env = dict(os.environ, XDG_STATE_HOME=str(root / "state"), XDG_CONFIG_HOME=str(root / "config"),
                   STET_BENCH_MODEL_KEY="bench-key")
        started = time.time()
        out = subprocess.run([STET, "--headless", "--brief", "greet", "--push"], cwd=repo, env=env,
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        wall = time.time() - started
    finally:
        server.kill()
        server.wait()
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not any(e["kind"] == "pushed" for e in events):
        sys.exit(f"stet exited {out.returncode}:\n{out.stderr}\n{out.stdout[-3000:]}")
    spans = {}
    phases = [e for e in events if e["kind"] == "phase"]
    for current, following in zip(phases, phases[1:]):
        spans[current["to"]] = spans.get(current["to"], 0.0) + ts(following) - ts(current)
    finished = next(ts(e) for e in events if e["kind"] == "finished")
    spans["teardown"] = finished - ts(phases[-1])
    total = finished - next(ts(e) for e in phases if e["to"] == "preflight")
    running_at = next(ts(e) for e in phases if e["to"] == "running")
    running_end = next(ts(e) for e in phases if e["from"] == "running")
    transcript = [ts(e) for e in events if e["kind"] == "transcript"]
    requests_at = [ts(e) for e in events if e["kind"] == "usage"]
    edges = {"to the first transcript item": transcript[0] - running_at,
             "to the first model answer": requests_at[0] - running_at,
             "after the last transcript item": running_end - transcript[-1]}
    through_gateway = [e["latency_ms"] / 1000 for e in events if e["kind"] == "usage" and e.get("latency_ms") is not None]
    model = []
    for timing in sorted(requests.glob("timing-*.json")):
        t = json.loads(timing.read_text())
        model.append(t["answered"] - t["received"])
    return spans, total, wall, through_gateway, model, edges


def main():
    rows = []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="stet-codex-bench-") as tmp:
            rows.append(one_run(Path(tmp)))
    med = lambda values: statistics.median(values) if values else float("nan")
    print(f"live Codex dispatch (scripted model, shell-edit), {RUNS} runs, median seconds:")
    for name in PHASES:
        print(f"  {name:<13} {med([r[0].get(name, 0.0) for r in rows]):.3f}")
    print(f"  total         {med([r[1] for r in rows]):.3f}   (preflight -> finished)")
    print(f"  wall          {med([r[2] for r in rows]):.3f}   (stet --headless start -> exit)")
    running = [r[0].get("running", 0.0) for r in rows]
    gateway = [sum(r[3]) for r in rows]
    model = [sum(r[4]) for r in rows]
    print(f"  stet outside running (total - running) {med([r[1] - a for r, a in zip(rows, running)]):.3f}")
    print(f"  in running: model {med(model):.3f}, gateway + relay {med([g - m for g, m in zip(gateway, model)]):.3f}, "
          f"Codex and its commands {med([a - g for a, g in zip(running, gateway)]):.3f}")
    for edge in rows[0][5]:
        print(f"  running: {edge} {med([r[5][edge] for r in rows]):.3f}")
    added = [g - m for r in rows for g, m in zip(r[3], r[4])]
    print(f"  per request ({len(added)}): through the gateway {1000 * med([g for r in rows for g in r[3]]):.1f} ms, "
          f"model {1000 * med([m for r in rows for m in r[4]]):.1f} ms, added p50 {1000 * med(added):.1f} ms, "
          f"max {1000 * max(added):.1f} ms (latency_ms is whole milliseconds)")


main()
