#!/usr/bin/env bash
# python-venv.sh makes the virtual environment the Python client's tests run
# in (client/python/.venv), without PyPI:
#   1. Debian's python3-venv and python3-httpx for /usr/bin/python3 (installed
#      with apt-get when missing and we are root; otherwise it says what to
#      install and fails);
#   2. python3 -m venv --system-site-packages, so the venv sees Debian's httpx;
#   3. pip install --no-deps --no-build-isolation --no-index -e client/python:
#      the package from its pyproject.toml, built by the setuptools that
#      ensurepip put in the venv, nothing downloaded.
# cmd/taskpilots/sdk_test.go runs the suites and examples with the venv's python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Debian's packages install into the system interpreter, whatever python3
# comes first on PATH (pyenv, conda).
PY=${TASKPILOTS_SDK_PYTHON:-/usr/bin/python3}
VENV=client/python/.venv

missing=()
[ -x "$PY" ] || missing+=(python3)
if [ -x "$PY" ]; then
	"$PY" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
	"$PY" -c 'import httpx' 2>/dev/null || missing+=(python3-httpx)
else
	missing+=(python3-venv python3-httpx)
fi
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "installing Debian's ${missing[*]} for the Python client's tests"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq "${missing[@]}" >/dev/null
	else
		echo "the Python client's tests need ${missing[*]} for $PY; as root: apt-get install ${missing[*]}" >&2
		echo "(or set TASKPILOTS_SDK_PYTHON to a python3 that has the venv module and httpx >= 0.23)" >&2
		exit 1
	fi
fi

rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation --no-index -e client/python
"$VENV/bin/python" -c 'import httpx, taskpilots; print("client/python/.venv: taskpilots", taskpilots.__version__, "on httpx", httpx.__version__)'
touch "$VENV/.installed"
