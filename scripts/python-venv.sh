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
# shellcheck source=scripts/apt-missing.sh
. scripts/apt-missing.sh

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
apt_install_missing "the Python client's tests (with $PY)" \
	"(or set TASKPILOTS_SDK_PYTHON to a python3 that has the venv module and httpx >= 0.23)" \
	${missing[@]+"${missing[@]}"}

rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation --no-index -e client/python
"$VENV/bin/python" -c 'import httpx, taskpilots; print("client/python/.venv: taskpilots", taskpilots.__version__, "on httpx", httpx.__version__)'
touch "$VENV/.installed"
