package aptrepo

import (
	"bytes"
	"net"
	"net/http"
	"regexp"
	"strings"
	"text/template"
	"time"
)

// InstallPath is where the install script is served.
const InstallPath = "/install.sh"

// hostPort is what a Host header may be to be written into the script: a DNS
// name or IPv4 address, or a bracketed IPv6 address, with an optional port.
// Nothing that a shell would read as anything but a word (no quotes,
// spaces, $ or backslashes) gets through, and the script quotes it anyway.
var hostPort = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(:[0-9]{1,5})?$`)

// BaseURL is the coordinator's URL as the client reached it: the scheme of
// the connection (https when it came over TLS) and the request's Host. It
// reports false for a Host that is no host name, which the script must not
// carry. A coordinator behind a proxy that ends TLS is reached over https by
// its clients while it sees plain HTTP; X-Forwarded-Proto from such a proxy
// is honoured only for the two values it can have.
func BaseURL(r *http.Request) (string, bool) {
	host := r.Host
	if !hostPort.MatchString(host) {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil && h == "" {
		return "", false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	} else if p := r.Header.Get("X-Forwarded-Proto"); p == "https" {
		scheme = p
	}
	return scheme + "://" + host, true
}

// InstallHandler serves the install script, with the coordinator's URL as
// the client reached it written in.
func (r *Repo) InstallHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "GET the install script", http.StatusMethodNotAllowed)
			return
		}
		base, ok := BaseURL(req)
		if !ok {
			http.Error(w, "the request's Host is not a host name the install script can point apt at", http.StatusBadRequest)
			return
		}
		script, err := InstallScript(base)
		if err != nil {
			http.Error(w, "cannot write the install script", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/x-shellscript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(script))
	})
}

// InstallScript is the install script for the coordinator at base (a URL
// BaseURL returned: no character in it needs quoting in sh's single
// quotes).
func InstallScript(base string) ([]byte, error) {
	var b bytes.Buffer
	err := installTemplate.Execute(&b, struct{ Base, Suite, Component, Archs string }{
		strings.TrimSuffix(base, "/"), Suite, Component, strings.Join(Architectures, " ")})
	return b.Bytes(), err
}

// installTemplate is POSIX sh, for dash. Every step is safe to run again:
// the key and the sources file are replaced whole (written beside, then
// renamed), and apt-get install of what is installed is a no-op. The
// repository is trusted through its key alone (Signed-By), never through
// trusted=yes, and the key is used for this repository only, not added to
// apt's global trust.
var installTemplate = template.Must(template.New("install.sh").Parse(`#!/bin/sh
# Installs podium-agent from the apt repository of the Podium coordinator at
# {{.Base}}:
#   curl -fsSL {{.Base}}/install.sh | sudo FINGERPRINT=... sh
# FINGERPRINT is the repository signing key's, as 'podium-coordinator apt key'
# prints it on the coordinator: the key downloaded is refused unless it has
# it. Without FINGERPRINT the key is trusted as downloaded (on first use),
# and its fingerprint printed to compare. It adds the key to
# /etc/apt/keyrings/podium.gpg, the repository to
# /etc/apt/sources.list.d/podium.sources, and installs the package. Running
# it again changes nothing but a new key or URL.
set -eu

base='{{.Base}}'
keyring=/etc/apt/keyrings/podium.gpg
sources=/etc/apt/sources.list.d/podium.sources

fail() {
	echo "podium install: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run me as root: curl -fsSL $base/install.sh | sudo FINGERPRINT=... sh"
command -v apt-get >/dev/null 2>&1 || fail "this is not a Debian-based system (no apt-get); install the podium-agent .deb by hand"
arch=$(dpkg --print-architecture)
case " {{.Archs}} " in
*" $arch "*) ;;
*) fail "this machine is $arch; the coordinator serves podium-agent for {{.Archs}}" ;;
esac

# fetch URL FILE: with curl or wget if there is one, else with apt's own
# downloader, which a minimal Debian has.
fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL -o "$2" "$1"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$2" "$1"
	elif [ -x /usr/lib/apt/apt-helper ]; then
		/usr/lib/apt/apt-helper -qq download-file "$1" "$2" >/dev/null
	else
		fail "neither curl nor wget is installed: apt-get install curl"
	fi
}

# packet FILE OFFSET reads the header of the OpenPGP packet at OFFSET
# (RFC 4880 4.2): it sets tag, len (the body's) and hdr (the header's
# length), and fails on what a keyring never holds (partial lengths).
packet() {
	# shellcheck disable=SC2046 # the bytes, one word each
	set -- "$1" $(od -An -tu1 -j "$2" -N6 "$1")
	[ $# -ge 3 ] && [ $(($2 & 128)) -ne 0 ] || return 1
	if [ $(($2 & 64)) -ne 0 ]; then
		tag=$(($2 & 63))
		if [ "$3" -lt 192 ]; then
			len=$3 hdr=2
		elif [ "$3" -lt 224 ]; then
			len=$(((($3 - 192) << 8) + $4 + 192)) hdr=3
		elif [ "$3" -eq 255 ]; then
			len=$((($4 << 24) + ($5 << 16) + ($6 << 8) + $7)) hdr=6
		else
			return 1
		fi
	else
		tag=$((($2 >> 2) & 15))
		case $(($2 & 3)) in
		0) len=$3 hdr=2 ;;
		1) len=$((($3 << 8) + $4)) hdr=3 ;;
		2) len=$((($3 << 24) + ($4 << 16) + ($5 << 8) + $6)) hdr=5 ;;
		*) return 1 ;;
		esac
	fi
}

# fingerprint FILE prints the OpenPGP v4 fingerprint of the one key in a
# binary keyring (the SHA-1 of its public key packet, RFC 4880 12.2), as gpg
# prints it, with nothing but od, dd and sha1sum: a minimal Debian has no gpg.
# It fails unless the file holds exactly one primary key: apt trusts every
# key of a Signed-By keyring, so a second key appended after the pinned one
# would be trusted as well as it.
fingerprint() {
	size=$(wc -c <"$1")
	[ "$size" -gt 0 ] && [ "$size" -le 1048576 ] || return 1
	packet "$1" 0 || return 1
	[ "$tag" -eq 6 ] && [ "$len" -gt 0 ] && [ "$len" -lt 65536 ] || return 1
	[ "$(od -An -tu1 -j "$hdr" -N1 "$1" | tr -d ' ')" = 4 ] || return 1
	first_len=$len first_hdr=$hdr
	off=$((hdr + len))
	while [ "$off" -lt "$size" ]; do
		packet "$1" "$off" || return 1
		[ "$tag" -ne 6 ] || return 1
		off=$((off + hdr + len))
	done
	[ "$off" -eq "$size" ] || return 1
	{
		# shellcheck disable=SC2059 # the octal escapes are the format
		printf "\\231\\$(printf %o $((first_len >> 8)))\\$(printf %o $((first_len & 255)))"
		dd if="$1" bs=1 skip="$first_hdr" count="$first_len" 2>/dev/null
	} | sha1sum | cut -d' ' -f1 | tr abcdef ABCDEF
}

echo "→ adding the signing key of $base/apt to $keyring" >&2
install -d -m 0755 /etc/apt/keyrings
fetch "$base/apt/podium.gpg" "$keyring.new" || fail "cannot download $base/apt/podium.gpg"
[ -s "$keyring.new" ] || fail "$base/apt/podium.gpg is empty: is that a Podium coordinator serving its apt repository?"
got=$(fingerprint "$keyring.new") || {
	rm -f "$keyring.new"
	fail "$base/apt/podium.gpg is not one OpenPGP v4 public key (a keyring of more than one key, or no key): is that a Podium coordinator serving its apt repository?"
}
want=$(printf '%s' "${FINGERPRINT:-}" | tr -d ' :' | tr abcdef ABCDEF)
want=${want#0X}
if [ -n "$want" ]; then
	if [ "$got" != "$want" ]; then
		rm -f "$keyring.new"
		fail "the signing key at $base/apt/podium.gpg has fingerprint $got, not the FINGERPRINT you gave ($want). Nothing was installed. Either something between this machine and the coordinator replaced the key, or the coordinator's key is another: run 'podium-coordinator apt key' on the coordinator and compare"
	fi
	echo "→ the signing key's fingerprint is $got, as FINGERPRINT says" >&2
else
	cat >&2 <<EOF

!! No FINGERPRINT given: the signing key was trusted as downloaded from
!! $base, on first use. Its fingerprint is
!!
!!   $got
!!
!! Compare it with what 'podium-coordinator apt key' prints on the
!! coordinator; pin it on the next machines with
!!   curl -fsSL $base/install.sh | sudo FINGERPRINT=$got sh

EOF
fi
chmod 0644 "$keyring.new"
mv -f "$keyring.new" "$keyring"

echo "→ adding the repository to $sources" >&2
cat >"$sources.new" <<EOF
Types: deb
URIs: $base/apt
Suites: {{.Suite}}
Components: {{.Component}}
Signed-By: $keyring
EOF
chmod 0644 "$sources.new"
mv -f "$sources.new" "$sources"

echo "→ apt-get update" >&2
# All sources, not only this one: the package depends on Docker's engine
# from the distribution's.
apt-get update >&2 || fail "apt-get update failed (above)"
echo "→ apt-get install podium-agent" >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y podium-agent >&2
version=$(dpkg-query -W -f='${Version}' podium-agent)

cat <<EOF

podium-agent $version is installed. Enroll this node with a
token from the coordinator (podium token create), then start the agent:

  podium-agent enroll --coordinator $base --token TOKEN
  systemctl start podium-agent

'apt-get update && apt-get upgrade' moves it to the coordinator's version later.
EOF
`))
