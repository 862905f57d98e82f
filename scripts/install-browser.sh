#!/usr/bin/env bash
# The dashboard test drives Debian's Chromium through Playwright (never a downloaded
# browser build). Install it when it is missing; needs root (CI machines run as root).
set -u
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-browser: /usr/bin/chromium is missing (run as root: apt-get install chromium)" >&2
  exit 0
fi
echo "make test: installing Debian's chromium for the dashboard tests (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
[ -x /usr/bin/chromium ] || echo "install-browser: could not install chromium" >&2
exit 0
