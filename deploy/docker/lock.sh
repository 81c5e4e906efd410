#!/usr/bin/env bash
# Pin the image's Python packages, with their hashes, from pyproject.toml:
#
#   deploy/docker/lock.sh              # after a change of pyproject.toml's dependencies
#   deploy/docker/lock.sh --upgrade    # newer releases of everything (pip-compile's options)
#
# requirements.txt: the project's dependencies with the `dispatcher`, `web` and
# `binary` extras (what the image runs); build-requirements.txt: what builds
# the project's own wheel (its [build-system]). The Dockerfile installs both with --require-hashes, so
# a file on the package index that changed under a pinned version fails the
# build instead of landing in the image. pip-tools runs in a virtual
# environment of its own (in a temporary directory), against the index pip is
# configured with; the files are written next to this script.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${PYTHON:-python3}" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet pip-tools
export CUSTOM_COMPILE_COMMAND="deploy/docker/lock.sh"
compile=("$work/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras
         --no-emit-index-url --no-emit-find-links)
cd "$root"
"${compile[@]}" "$@" --extra dispatcher --extra web --extra binary \
    --output-file deploy/docker/requirements.txt pyproject.toml
"${compile[@]}" "$@" --only-build-deps --build-deps-for wheel \
    --output-file deploy/docker/build-requirements.txt pyproject.toml
