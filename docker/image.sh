#!/usr/bin/env bash
# `make image` and `make image-test`: build the gateway's image with podman or docker, whichever is installed,
# and smoke-test it (docker/smoke.py). docs/container.md explains every setting.
#
#   docker/image.sh build | test | flags
#
# Settings (environment; the Makefile passes its variables of the same names):
#   CONTAINER_ENGINE   podman or docker; default: podman when installed, else docker
#   IMAGE              the tag to build and test (fedcd:latest)
#   BASE_IMAGE         the Dockerfile's base (python:3.11-slim)
#   IMAGE_PIP_INDEX_URL, IMAGE_CA_BUNDLE
#                      a package mirror (build argument PIP_INDEX_URL) and a CA bundle (build secret ca-bundle)
#   IMAGE_BUILD_ARGS   more flags for `build`;  IMAGE_RUN_ARGS: more flags for the smoke check's `run`
#   IMAGE_SITE         "sandbox": the project's machines (below); "auto" (default): sandbox when the engine is
#                      podman and no image registry answers; "": none
#   VENV_PYTHON        the project's venv python, whose pip cache may hold a built llama-cpp-python wheel
#
# The sandbox site (the project's development and CI machines, ../shared/docs/CONTAINERS.md): no image registry is
# reachable, crun cannot run there, podman's default ulimits are above the hard limits, the default container
# network reaches no package index. So: docker/sandbox/containers.conf (runc, no default ulimits), a Debian base
# made by docker/sandbox/base-image.sh, the host network, the host's CA bundle as the ca-bundle secret, the host's
# local wheel folders and file:// indexes (`pip config list`) mounted read-only, and the llama-cpp-python wheel
# the host's pip already built (build/image-wheels) so llama.cpp is not compiled a second time; containers run
# without podman's systemd-timed healthcheck (no systemd there).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-fedcd:latest}"
IMAGE_SITE="${IMAGE_SITE-auto}"
if [ -z "${CONTAINER_ENGINE:-}" ]; then
  if command -v podman >/dev/null 2>&1; then CONTAINER_ENGINE=podman
  elif command -v docker >/dev/null 2>&1; then CONTAINER_ENGINE=docker
  else
    echo "image: neither podman nor docker is installed (Debian: apt-get install podman; see docs/container.md)" >&2
    exit 1
  fi
fi
read -r -a engine <<<"$CONTAINER_ENGINE"
build_flags=() run_flags=()

if [ "$IMAGE_SITE" = auto ]; then
  IMAGE_SITE=""
  # The sandbox's defining trait: podman here, no registry there (a normal podman pulls python:3.11-slim).
  if [ "$(basename "${engine[0]}")" = podman ] \
     && ! curl -s -o /dev/null --max-time 5 https://registry-1.docker.io/v2/ 2>/dev/null; then
    IMAGE_SITE=sandbox
  fi
fi

host_pip_dirs() {
  # The host's local wheel folders and file:// indexes, as pip sees them: "find-links DIR" and "index URL DIR".
  python3 -m pip config list 2>/dev/null | sed -n "s/^[^.]*\.\(find-links\|extra-index-url\)='\(.*\)'$/\1 \2/p" \
    | while read -r key values; do
        for value in $values; do
          dir="${value#file://}"
          # an index URL names .../simple; the wheels it lists lie beside it, so mount its parent
          [ "$key" = extra-index-url ] && dir="$(dirname "$dir")"
          [ -d "$dir" ] && echo "$key $value $dir"
        done
      done | sort -u
}

if [ "$IMAGE_SITE" = sandbox ]; then
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/docker/sandbox/containers.conf}"
  BASE_IMAGE="${BASE_IMAGE:-localhost/debian-py:bookworm}"
  CONTAINER_ENGINE="${engine[0]}" docker/sandbox/base-image.sh "$BASE_IMAGE"
  find_links=() extra_index=()
  while read -r key value dir; do
    build_flags+=(-v "$dir:$dir:ro")
    if [ "$key" = find-links ]; then find_links+=("$value"); else extra_index+=("$value"); fi
  done < <(host_pip_dirs)
  if [ -n "${VENV_PYTHON:-}" ] && [ -x "$VENV_PYTHON" ]; then
    # Instant when `make install` has built it (pip's wheel cache); otherwise the image build compiles it.
    mkdir -p build/image-wheels
    if nice -n 10 "$VENV_PYTHON" -m pip wheel -q --no-deps -w build/image-wheels \
         'llama-cpp-python>=0.3.16,<0.3.17' >/dev/null 2>&1; then
      build_flags+=(-v "$PWD/build/image-wheels:/opt/image-wheels:ro")
      find_links+=(/opt/image-wheels)
    fi
  fi
  build_flags+=(--network host --format docker --build-arg TORCH_INDEX_URL=
                --build-arg "PIP_FIND_LINKS=${find_links[*]}" --build-arg "PIP_EXTRA_INDEX_URL=${extra_index[*]}")
  IMAGE_CA_BUNDLE="${IMAGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  # podman schedules a HEALTHCHECK through systemd timers, and the sandbox has no systemd: it would log errors.
  run_flags+=(--network host --no-healthcheck)
fi
BASE_IMAGE="${BASE_IMAGE:-python:3.11-slim}"
build_flags+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
[ -n "${IMAGE_PIP_INDEX_URL:-}" ] && build_flags+=(--build-arg "PIP_INDEX_URL=$IMAGE_PIP_INDEX_URL")
[ -n "${IMAGE_CA_BUNDLE:-}" ] && build_flags+=(--secret "id=ca-bundle,src=$IMAGE_CA_BUNDLE")
read -r -a extra_build <<<"${IMAGE_BUILD_ARGS:-}"
read -r -a extra_run <<<"${IMAGE_RUN_ARGS:-}"

case "${1:-}" in
  build)
    echo "image: ${engine[*]} build (site: ${IMAGE_SITE:-none}, base: $BASE_IMAGE) -> $IMAGE" >&2
    start=$SECONDS
    nice -n 10 "${engine[@]}" build -f docker/Dockerfile -t "$IMAGE" "${build_flags[@]}" "${extra_build[@]}" .
    echo "image: built $IMAGE in $((SECONDS - start)) s; size: $("${engine[@]}" image inspect --format '{{.Size}}' "$IMAGE") bytes" >&2
    ;;
  test)
    exec python3 docker/smoke.py --engine "${engine[*]}" --image "$IMAGE" -- "${run_flags[@]}" "${extra_run[@]}"
    ;;
  flags)  # what `build` would run, for docs and debugging
    printf '%q ' "${engine[@]}" build -f docker/Dockerfile -t "$IMAGE" "${build_flags[@]}" "${extra_build[@]}" .
    echo
    ;;
  *)
    echo "usage: docker/image.sh build|test|flags" >&2
    exit 2
    ;;
esac
