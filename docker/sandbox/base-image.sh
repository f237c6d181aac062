#!/usr/bin/env bash
# Build the base image the project's machines use instead of python:3.11-slim (no image registry is reachable
# there): Debian bookworm with python3 (3.11), venv and the CA certificates, made by mmdebstrap from the Debian
# mirror the machine already uses, imported into podman. Does nothing when the image exists.
#   docker/sandbox/base-image.sh [IMAGE]     (default localhost/debian-py:bookworm)
set -euo pipefail
image="${1:-localhost/debian-py:bookworm}"
engine="${CONTAINER_ENGINE:-podman}"
if $engine image exists "$image" 2>/dev/null; then
  exit 0
fi
for tool in mmdebstrap "$engine"; do
  command -v "$tool" >/dev/null || {
    echo "base-image: $tool is missing: apt-get install -y --no-install-recommends podman runc mmdebstrap uidmap" >&2
    exit 1
  }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# --variant=apt keeps apt in the image, so the Dockerfile's apt-get steps work as on python:3.11-slim.
nice -n 10 mmdebstrap --quiet --variant=apt --include=python3,python3-venv,ca-certificates \
  bookworm "$work/base.tar"
$engine import "$work/base.tar" "$image" >/dev/null
echo "base-image: imported $image"
