# apt-missing.sh is sourced by the scripts that check for the Debian packages
# the tests run (scripts/test-tools.sh, scripts/python-venv.sh).
#
# apt_install_missing WHAT HINT PKG... installs the packages PKG... that the
# caller found missing, with apt-get when we are root on Debian; otherwise
# it says that WHAT needs them and how to install them (and HINT, when not
# empty) on standard error and exits 1. Without PKG it does nothing.
apt_install_missing() {
	local what=$1 hint=$2
	shift 2
	[ $# -gt 0 ] || return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "installing Debian's $* for $what"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq "$@" >/dev/null
	else
		echo "$what need $*; as root: apt-get install $*" >&2
		[ -z "$hint" ] || echo "$hint" >&2
		exit 1
	fi
}
