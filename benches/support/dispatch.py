#!/usr/bin/env python3
"""Measures the dispatch engine (docs/benchmarks.md, "Dispatch"): a `stet demo --headless` split by
phase from its own events, the overhead beside the raw `docker create`+`start`+`rm` of the same image,
cancel -> torn-down latency, and 8 scripted dispatches at once (ceiling 8) against the same 8 one
after another (ceiling 1).

Usage: benches/support/dispatch.py [path/to/stet] [runs]   (default target/release/stet, 5 runs)
Needs a running Docker engine and git. Everything happens under a temporary directory.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

STET = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/stet")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def ts(event):
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


def env_for(root):
    env = dict(os.environ)
    env["XDG_STATE_HOME"] = str(root / "state")
    env["XDG_CONFIG_HOME"] = str(root / "config")
    return env


def events_of(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def phase_times(events):
    """Seconds spent in each phase, and the total from preflight to finished."""
    spans = {}
    phases = [e for e in events if e["kind"] == "phase"]
    for current, following in zip(phases, phases[1:]):
        spans[current["to"]] = spans.get(current["to"], 0.0) + ts(following) - ts(current)
    start = next(ts(e) for e in phases if e["to"] == "preflight")
    finished = next(ts(e) for e in events if e["kind"] == "finished")
    done_at = phases[-1]
    spans["teardown"] = finished - ts(done_at)
    return spans, finished - start


def median(values):
    return statistics.median(values) if values else float("nan")


def demo_phases(root):
    rows = []
    for run in range(RUNS):
        out = subprocess.run(
            [STET, "demo", "--headless", "--pace", "0", "--dir", str(root / "demo")],
            env=env_for(root), capture_output=True, text=True,
        )
        if out.returncode != 0:
            sys.exit(f"stet demo exited {out.returncode}: {out.stderr}{out.stdout[-2000:]}")
        spans, total = phase_times(events_of(out.stdout))
        rows.append((spans, total))
    names = ["preflight", "provisioning", "running", "collecting", "pushing", "opening_pr", "teardown"]
    print(f"stet demo --headless --pace 0, {RUNS} runs, median seconds:")
    for name in names:
        print(f"  {name:<13} {median([r[0].get(name, 0.0) for r in rows]):.3f}")
    totals = [r[1] for r in rows]
    agent = [r[0].get("running", 0.0) for r in rows]
    overhead = [t - a for t, a in zip(totals, agent)]
    lifecycle = [r[0].get("provisioning", 0.0) + r[0].get("teardown", 0.0) for r in rows]
    print(f"  total         {median(totals):.3f}")
    print(f"  overhead      {median(overhead):.3f}  (total - running)")
    print(f"  provisioning + teardown {median(lifecycle):.3f}")
    return median(lifecycle)


def raw_docker(image):
    samples = []
    for _ in range(RUNS):
        start = time.monotonic()
        name = f"stet-bench-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run(["docker", "create", "--name", name, "--network", "none", "--user", "65532:65532",
                        image, "/usr/local/bin/stet", "sandbox-idle"], check=True, capture_output=True)
        subprocess.run(["docker", "start", name], check=True, capture_output=True)
        subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)
        samples.append(time.monotonic() - start)
    print(f"docker create + start + rm -f of the same image, {RUNS} runs: median {median(samples):.3f} s")
    return median(samples)


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def scratch_repo(root, briefs, scenario_text, concurrency):
    """A repository with `briefs` briefs, the script harness playing `scenario_text`, a bare remote."""
    repo, remote = root / "repo", root / "remote.git"
    repo.mkdir(parents=True)
    git(root, "init", "-q", "--bare", str(remote))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@stet.invalid")
    (repo / "README.md").write_text("bench\n")
    scenario = root / "scenario.toml"
    scenario.write_text(scenario_text)
    # Machine settings (and a concurrency above the default) are the user's, not the repository's.
    config = root / "config" / "stet"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        f'[forge]\nkind = "local"\n[forge.local]\nremote = "{remote}"\n'
        f'[harness]\nkind = "script"\n[harness.script]\nscenario = "{scenario}"\npace = 1.0\n'
        f'[dispatch]\nconcurrency = {concurrency}\n'
    )
    inbox = repo / ".stet" / "briefs"
    inbox.mkdir(parents=True)
    for index in range(briefs):
        (inbox / f"bench-{index}.toml").write_text(
            f'title = "Bench {index}"\nworkflow = "implement"\n[target]\nrepo = "bench/app"\nbase = "main"\n'
            f'[[items]]\ntext = "Append a line."\n'
        )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "push", "-q", str(remote), "main")
    return repo


def cancel_latency(root):
    forever = 'model = "bench"\n[[step]]\nsay = "working"\n[[step]]\nforever = true\n'
    repo = scratch_repo(root / "cancel", 1, forever, 1)
    samples = []
    for _ in range(RUNS):
        child = subprocess.Popen([STET, "--headless", "--brief", "bench-0"], cwd=repo, env=env_for(root / "cancel"),
                                 stdout=subprocess.PIPE, text=True)
        sent = None
        torn = None
        for line in child.stdout:
            event = json.loads(line)
            if sent is None and event["kind"] == "transcript":
                sent = time.time()
                child.send_signal(signal.SIGINT)
            if event["kind"] == "torn_down":
                torn = ts(event)
        child.wait()
        samples.append(torn - sent)
    print(f"cancel (SIGINT while running) -> torn_down event, {RUNS} runs: median {median(samples) * 1000:.0f} ms, "
          f"max {max(samples) * 1000:.0f} ms")


def concurrency(root):
    paced = 'model = "bench"\n[[step]]\nsay = "working"\n[[step]]\npause = 3\nappend = { path = "NOTES.md", content = "bench\\n" }\n[[step]]\nfinish = "done"\n'
    for ceiling in (8, 1):
        repo = scratch_repo(root / f"ceiling-{ceiling}", 8, paced, ceiling)
        start = time.monotonic()
        subprocess.run([STET, "--headless", "--all"], cwd=repo, env=env_for(root / f"ceiling-{ceiling}"),
                       check=True, capture_output=True)
        print(f"8 scripted dispatches (3 s of agent work each), ceiling {ceiling}: {time.monotonic() - start:.2f} s wall")


def main():
    with tempfile.TemporaryDirectory(prefix="stet-bench-") as scratch:
        root = Path(scratch)
        image = subprocess.run([STET, "image", "build-local", "--binary", STET], check=True,
                               capture_output=True, text=True).stdout.split()[0]
        overhead = demo_phases(root)
        raw = raw_docker(image)
        print(f"provisioning + teardown / raw docker: {overhead / raw:.2f}x (budget <= 2x)")
        cancel_latency(root)
        concurrency(root)


if __name__ == "__main__":
    main()
