# Sourced by the RUN steps of docker/Dockerfile (bind-mounted for the step, never copied into the image): the
# build-time network settings, taken from build secrets and build arguments.
set -eu
apt_ca=""
if [ -s /run/secrets/ca-bundle ]; then
  # A proxy or mirror with its own CA: pip, apt and Python's ssl trust it for this step only.
  export PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle
  apt_ca="-o Acquire::https::CAInfo=/run/secrets/ca-bundle"
fi
if [ -s /run/secrets/pip-conf ]; then
  export PIP_CONFIG_FILE=/run/secrets/pip-conf
fi
# pip reads an empty PIP_* variable as an empty value (an empty index URL): an argument left empty means unset.
for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS; do
  eval "[ -n \"\${$name:-}\" ] || unset $name"
done

apt_get() {
  # `apt_get install PKG…`: install Debian packages and drop the package lists in the same layer.
  if ! command -v apt-get >/dev/null; then
    echo "docker/Dockerfile: the base image has no apt-get; give a base that has: $*" >&2
    return 1
  fi
  shift
  # shellcheck disable=SC2086  # $apt_ca is empty or one option and its value
  apt-get $apt_ca update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get $apt_ca install -y -q --no-install-recommends "$@" \
    && rm -rf /var/lib/apt/lists/*
}
