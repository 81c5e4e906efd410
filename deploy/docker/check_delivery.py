"""Deliver an event with the dispatcher of a built image; run by check.sh.

    python check_delivery.py CONTAINER ROOTFS

CONTAINER is a buildah working container of the image and ROOTFS its mounted
file system. Against a throwaway PostgreSQL and a receiver on 127.0.0.1 it
checks that the image's user is not root, makes the roles the Kubernetes
examples' Secret names and the schema their owner owns (as the database
administrator does), runs inside the image (`buildah run`, host network)
the examples' commands, each as its container's role: the init container's
wait on `outbox migrate --check` (waiting while the schema is missing), the
migration Job's `outbox migrate` and `outbox grants --apply` (the wait then
ends), and `outbox endpoints add`; publishes one event as the application's
role, then runs the image's
entry point, `outbox-dispatcher --once`, with the root file system read-only
and only /tmp writable (as the Kubernetes examples mount it), and waits for
the delivery to arrive; then runs it as a service, sees /healthz, /readyz and
/metrics answer, and stops it with SIGTERM. Exit 0 when all went so.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import yaml  # type: ignore[import-untyped]
from psycopg import sql

import outbox
from outbox.testing import Receiver, TemporaryPostgres, free_port

KUBERNETES = Path(__file__).resolve().parent.parent / "kubernetes"


def in_image_argv(container: str, *args: str) -> list[str]:
    return ["buildah", "run", "--isolation", "chroot", "--network", "host", container, "--",
            *args]


def in_image(container: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A command inside the image's file system, as the image's user, on the host's network."""
    return subprocess.run(in_image_argv(container, *args),
                          capture_output=True, text=True, check=False, timeout=120)


def manifest_commands() -> tuple[list[str], list[str]]:
    """The sidecar example's init container command and the migration Job's command."""
    def pod(name: str) -> dict[str, Any]:
        doc = next(d for d in yaml.safe_load_all((KUBERNETES / name).read_text())
                   if d and d["kind"] in ("Deployment", "Job"))
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]
        return spec
    gate: list[str] = pod("sidecar.yaml")["initContainers"][0]["command"]
    job: list[str] = pod("migrate-job.yaml")["containers"][0]["command"]
    return gate, job


def make_roles(dsn: str) -> dict[str, str]:
    """The Secret's roles, each with a password, and the schema the migration's role owns,
    made as the database administrator does; the Secret's keys -> DSNs as those roles."""
    secret = next(d for d in yaml.safe_load_all((KUBERNETES / "sidecar.yaml").read_text())
                  if d and d["kind"] == "Secret")
    users = {key: str(urlsplit(value).username) for key, value in secret["stringData"].items()
             if key.endswith("-dsn")}
    password = secrets.token_hex(16)
    with psycopg.connect(dsn, autocommit=True) as admin:
        for user in sorted(set(users.values())):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(user), sql.Literal(password)))
        admin.execute(sql.SQL("CREATE SCHEMA outbox AUTHORIZATION {}").format(
            sql.Identifier(users["migrate-dsn"])))
    return {key: psycopg.conninfo.make_conninfo(dsn, user=user, password=password)
            for key, user in users.items()}


def must(done: subprocess.CompletedProcess[str], what: str) -> str:
    if done.returncode != 0:
        sys.exit(f"check: {what} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def said(container: str, *args: str) -> str:
    """What a command that must print something printed in the image, tried up to three
    times: on a loaded host, `buildah run` now and then exits 0 having passed on no output."""
    for _ in range(3):
        out = must(in_image(container, *args), " ".join(args)).strip()
        if out:
            return out
    return ""


def image_config(container: str) -> dict[str, object]:
    out = must(subprocess.run(["buildah", "inspect", "--type", "container", container],
                              capture_output=True, text=True, check=False), "buildah inspect")
    config: dict[str, object] = json.loads(out)["OCIv1"]["config"]
    return config


def read_only_argv(rootfs: str, config: dict[str, object], *args: str,
                   ) -> tuple[list[str], dict[str, str]]:
    """argv and environment running the image's entry point with ARGS in a private mount
    namespace: / read-only, /tmp a tmpfs, as the image's user. Every step execs the next,
    so the process started is the entry point's own (a signal to it reaches the dispatcher)."""
    user = str(config["User"])
    entrypoint = [str(a) for a in config["Entrypoint"]]  # type: ignore[attr-defined]
    env = [str(e) for e in config.get("Env", [])]  # type: ignore[attr-defined]
    script = ('set -e; root="$1"; shift; '
              'mount --bind "$root" "$root"; mount -o remount,bind,ro "$root"; '
              'mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"; '
              'mount -t proc proc "$root/proc"; mount --bind /dev "$root/dev"; '
              'exec chroot --userspec="$USERSPEC" "$root" "$@"')
    return (["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
             "sh", rootfs, "env", "-i", *env, *entrypoint, *args],
            {"USERSPEC": user, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def read_only_run(rootfs: str, config: dict[str, object], *args: str,
                  ) -> subprocess.CompletedProcess[str]:
    """The image's entry point with ARGS, read-only as above, to its end."""
    argv, env = read_only_argv(rootfs, config, *args)
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                          timeout=120)


def serve_and_stop(rootfs: str, config: dict[str, object], dsn: str) -> None:
    """The dispatcher as the manifests run it: probes answer 200, SIGTERM ends it with 0."""
    port = free_port()
    argv, env = read_only_argv(rootfs, config, "--dsn", dsn, "--metrics-host", "127.0.0.1",
                               "--metrics-port", str(port))
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    answers: dict[str, int] = {}
    while time.monotonic() < deadline and process.poll() is None:
        try:
            answers = {path: httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2,
                                       trust_env=False).status_code
                       for path in ("/healthz", "/readyz", "/metrics")}
        except httpx.TransportError:
            answers = {}
        if answers and set(answers.values()) == {200}:
            break
        time.sleep(0.2)
    process.terminate()
    try:
        code = process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    log = process.stdout.read() if process.stdout else ""
    if set(answers.values()) != {200}:
        sys.exit(f"check: the image's probes answered {answers}\n{log}")
    if code != 0:
        sys.exit(f"check: the image's dispatcher exited {code} on SIGTERM\n{log}")
    print("check: /healthz, /readyz and /metrics answered 200 from the image; "
          "SIGTERM stopped it with exit 0")


def main() -> None:
    container, rootfs = sys.argv[1:3]
    config = image_config(container)
    uid = said(container, "id", "-u")
    if uid in ("", "0"):
        sys.exit(f"check: the image runs as uid {uid!r}, not as a user")
    compilers = in_image(container, "sh", "-c", "command -v gcc cc c++ clang make")
    if compilers.stdout.strip():
        sys.exit(f"check: the image carries build tools: {compilers.stdout.split()}")
    probe = read_only_run(rootfs, {**config, "Entrypoint": ["sh", "-c"]},
                          "touch /tmp/ok && ! touch /opt/outbox/x 2>/dev/null && outbox --help")
    must(probe, "the read-only root (only /tmp writable, `outbox` on the PATH)")
    print(f"check: image user uid {uid}, entry point {config['Entrypoint']}, no compiler, "
          "root file system read-only but /tmp")
    with TemporaryPostgres() as pg, Receiver() as rx:
        role = make_roles(pg.dsn)
        dsn = role["dispatcher-dsn"]
        if in_image(container, "outbox", "migrate", "--check", "--dsn", dsn).returncode != 1:
            sys.exit("check: `outbox migrate --check` should exit 1 on an empty database")
        gate_command, job_command = manifest_commands()
        gate = subprocess.Popen(in_image_argv(container, "env", f"OUTBOX_DSN={dsn}",
                                              *gate_command),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(3)
        if gate.poll() is not None:
            sys.exit(f"check: the init container's gate did not wait ({gate.returncode})")
        must(in_image(container, "env", f"OUTBOX_DSN={role['migrate-dsn']}", *job_command),
             "the migration Job's command")
        try:
            gated = gate.wait(30)
        except subprocess.TimeoutExpired:
            gate.kill()
            sys.exit("check: the init container's gate still waits after the migration")
        if gated != 0:
            sys.exit(f"check: the gate exited {gated}: {gate.stdout.read() if gate.stdout else ''}")
        print("check: the init container waited for the schema, the migration Job ran, "
              "the wait ended, each as its own role")
        must(in_image(container, "outbox", "endpoints", "add", "receiver", "--url", rx.url,
                      "--dsn", role["migrate-dsn"]), "outbox endpoints add")
        with psycopg.connect(role["app-dsn"]) as conn:
            event_id = outbox.publish(conn, "image.checked", {"from": "the image"})
            conn.commit()
        started = time.monotonic()
        done = read_only_run(rootfs, config, "--dsn", dsn, "--metrics-host", "127.0.0.1",
                             "--metrics-port", str(free_port()), "--once")
        must(done, "outbox-dispatcher --once (read-only root)")
        delivered = [r for r in rx.requests if r.header("webhook-id") == str(event_id)]
        if not delivered:
            sys.exit(f"check: nothing arrived at the receiver\n{done.stdout}{done.stderr}")
        print(f"check: delivered {event_id} to {rx.url} in {time.monotonic() - started:.1f} s "
              f"by the image's dispatcher, root file system read-only")
        serve_and_stop(rootfs, config, dsn)


if __name__ == "__main__":
    main()
