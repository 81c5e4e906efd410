#!/usr/bin/env bash
# Build the image and see its dispatcher deliver an event (run as root).
#
#   deploy/docker/check.sh                 # base made here from Debian packages
#   BASE=python:3.12-slim-bookworm deploy/docker/check.sh   # or any base you can pull
#   KEEP_IMAGE=1 deploy/docker/check.sh     # keep the image (IMAGE, default below) afterwards
#   REQUIREMENTS=deploy/docker/my-requirements.txt deploy/docker/check.sh   # hashed pins of your own
#   BASE_DIGEST=@sha256:... BASE=python:3.12-slim-bookworm deploy/docker/check.sh   # a pinned base
#
# Without BASE, mmdebstrap makes a Debian bookworm base (python3,
# python3-venv, ca-certificates, and the CA certificates this machine adds
# in /usr/local/share/ca-certificates, for a proxy that inspects TLS) and
# podman imports it. buildah builds deploy/docker/Dockerfile on it, then
# check_delivery.py runs the image's commands against a throwaway PostgreSQL
# and a receiver on 127.0.0.1. Needs: mmdebstrap, podman, buildah (Debian
# packages) and the project's virtual environment (./dev lint makes it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
tag="${IMAGE:-localhost/outbox-dispatcher:check-$$}"
work="$(mktemp -d)"
container=""
cleanup() {
    if [ -n "$container" ]; then
        buildah umount "$container" >/dev/null 2>&1 || true
        buildah rm "$container" >/dev/null 2>&1 || true
    fi
    if [ -z "${KEEP_IMAGE:-}" ]; then
        buildah rmi "$tag" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${BASE:-}" ]; then
    BASE=localhost/outbox-base:bookworm
    if ! podman image exists "$BASE"; then
        echo "check: making the base $BASE with mmdebstrap"
        # Exit 77 when no base can be made here (no Debian mirror): nothing to check.
        mmdebstrap --quiet --variant=apt --include=python3,python3-venv,ca-certificates \
            --customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" 2>/dev/null || true' \
            --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
            bookworm "$work/rootfs.tar" || { echo "check: no base could be made here"; exit 77; }
        podman import --quiet "$work/rootfs.tar" "$BASE" >/dev/null
        rm -f "$work/rootfs.tar"
    fi
fi

echo "check: building $tag on $BASE"
buildah rmi "$tag" >/dev/null 2>&1 || true  # no untagged copy left behind by a rebuild
buildah bud --quiet --isolation chroot --network host --build-arg "BASE=$BASE" \
    --build-arg "BASE_DIGEST=${BASE_DIGEST:-}" \
    --build-arg "REQUIREMENTS=${REQUIREMENTS:-deploy/docker/requirements.txt}" \
    -f "$here/Dockerfile" -t "$tag" "$root" >/dev/null

container="$(buildah from --quiet "$tag")"
rootfs="$(buildah mount "$container")"
"$python" "$here/check_delivery.py" "$container" "$rootfs"
