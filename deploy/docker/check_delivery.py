"""Deliver an event with the dispatcher of a built image; run by check.sh.

    python check_delivery.py CONTAINER ROOTFS

CONTAINER is a buildah working container of the image and ROOTFS its mounted
file system. Against a throwaway PostgreSQL and a receiver on 127.0.0.1 it
checks that the image's user is not root, runs `outbox migrate`,
`outbox migrate --check` and `outbox endpoints add` inside the image
(`buildah run`, host network), publishes one event, then runs the image's
entry point, `outbox-dispatcher --once`, with the root file system read-only
and only /tmp writable (as the Kubernetes examples mount it), and waits for
the delivery to arrive. Exit 0 when it did.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg

import outbox
from outbox.testing import Receiver, TemporaryPostgres, free_port


def in_image(container: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A command inside the image's file system, as the image's user, on the host's network."""
    return subprocess.run(["buildah", "run", "--isolation", "chroot", "--network", "host",
                           container, "--", *args],
                          capture_output=True, text=True, check=False, timeout=120)


def must(done: subprocess.CompletedProcess[str], what: str) -> str:
    if done.returncode != 0:
        sys.exit(f"check: {what} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def image_config(container: str) -> dict[str, object]:
    out = must(subprocess.run(["buildah", "inspect", "--type", "container", container],
                              capture_output=True, text=True, check=False), "buildah inspect")
    config: dict[str, object] = json.loads(out)["OCIv1"]["config"]
    return config


def read_only_run(rootfs: str, config: dict[str, object], *args: str,
                  ) -> subprocess.CompletedProcess[str]:
    """The image's entry point with ARGS in a private mount namespace: / read-only, /tmp a tmpfs."""
    user = str(config["User"])
    entrypoint = [str(a) for a in config["Entrypoint"]]  # type: ignore[attr-defined]
    env = [str(e) for e in config.get("Env", [])]  # type: ignore[attr-defined]
    script = ('set -e; root="$1"; shift; '
              'mount --bind "$root" "$root"; mount -o remount,bind,ro "$root"; '
              'mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"; '
              'mount -t proc proc "$root/proc"; mount --bind /dev "$root/dev"; '
              'exec chroot --userspec="$USERSPEC" "$root" "$@"')
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           "sh", rootfs, "env", "-i", *env, *entrypoint, *args],
                          env={"USERSPEC": user, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                          capture_output=True, text=True, check=False, timeout=120)


def main() -> None:
    container, rootfs = sys.argv[1:3]
    config = image_config(container)
    uid = must(in_image(container, "id", "-u"), "id -u").strip()
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
        dsn = pg.dsn
        if in_image(container, "outbox", "migrate", "--check", "--dsn", dsn).returncode != 1:
            sys.exit("check: `outbox migrate --check` should exit 1 on an empty database")
        must(in_image(container, "outbox", "migrate", "--dsn", dsn), "outbox migrate")
        must(in_image(container, "outbox", "migrate", "--check", "--dsn", dsn),
             "outbox migrate --check after migrate")
        must(in_image(container, "outbox", "endpoints", "add", "receiver", "--url", rx.url,
                      "--dsn", dsn), "outbox endpoints add")
        with psycopg.connect(dsn) as conn:
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


if __name__ == "__main__":
    main()
