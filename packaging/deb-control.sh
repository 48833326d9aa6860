#!/usr/bin/env bash
# Prints the DEBIAN/control file for `make deb`.
# Usage: deb-control.sh VERSION ARCH BINARY PACKAGE_ROOT
# Depends: the Debian package of every shared library the binary names directly (its ELF NEEDED
# entries), found with dpkg on the build machine; the libraries those pull in are their packages'
# own dependencies. So it names exactly what `ldd` shows besides the static Swift runtime.
set -euo pipefail
version=$1 arch=$2 binary=$3 root=$4

# Soname → path, as the dynamic loader resolves it on this machine.
declare -A path_of
while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] && path_of[$soname]=$path
done < <(ldd "$binary")

packages=()
for soname in $(objdump -p "$binary" | awk '$1 == "NEEDED" { print $2 }'); do
    case $soname in ld-linux*) soname=libc.so.6 ;; esac  # the loader ships in libc6
    path=${path_of[$soname]:-}
    [ -n "$path" ] || { echo "deb-control.sh: ldd does not resolve $soname" >&2; exit 1; }
    # With merged /usr the loader may report /lib/... for a file dpkg registered as /usr/lib/...
    owner=""
    for candidate in "$path" "/usr$path" "${path#/usr}" "$(readlink -f "$path")"; do
        owner=$(dpkg-query -S "$candidate" 2>/dev/null | head -n 1 | cut -d: -f1) && [ -n "$owner" ] && break
    done
    [ -n "$owner" ] || { echo "deb-control.sh: no Debian package owns $path ($soname)" >&2; exit 1; }
    packages+=("$owner")
done
depends=$(printf '%s\n' "${packages[@]}" | sort -u | paste -sd, - | sed 's/,/, /g')

cat <<CONTROL
Package: sqsync
Version: $version
Architecture: $arch
Maintainer: sqsync developers <dev@sqsync.invalid>
Installed-Size: $(du -sk "$root" --exclude=DEBIAN | cut -f1)
Depends: $depends
Section: database
Priority: optional
Description: keep copies of a SQLite database in step without a server
 Triggers record every change to the tracked tables; signed bundle files carry
 what a peer lacks over SSH/SFTP, a shared folder or a USB stick, and every copy
 converges to the same content whatever order bundles arrive in.
CONTROL
