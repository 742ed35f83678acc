#!/usr/bin/env bash
# Host side of the emulated Raspberry Pi (tests/device): Debian packages and the
# qemu-aarch64 binfmt entry. Idempotent; needs root (without it the tests skip anyway).
# CI runs it before `make test`; tests/device/emulated_pi.py repeats the binfmt part itself.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "setup_host.sh: not root; the emulated-Pi tests will skip" >&2
    exit 0
fi
need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
fi
[ -e /proc/sys/fs/binfmt_misc/status ] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null ||
    update-binfmts --enable qemu-aarch64
echo "qemu-aarch64 binfmt: $(head -1 /proc/sys/fs/binfmt_misc/qemu-aarch64)," \
     "$(grep ^flags /proc/sys/fs/binfmt_misc/qemu-aarch64)"
