# Shared by scripts/install-*.sh: install Debian packages that are missing.
# Usage: . "$(dirname "$0")/lib.sh"; apt_install PKG...
apt_install() {
	local missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "installing ${missing[*]}"
	# Services must not start on install: tests start their own servers.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
		$sudo chmod +x /usr/sbin/policy-rc.d
		trap '$sudo rm -f /usr/sbin/policy-rc.d' RETURN
	fi
	if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; then
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}
