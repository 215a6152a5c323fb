#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# docs_paths.sh SRCDIR - README.md, docs/*.md and tests/README.md name only
# repository paths that exist and only options that union-nfsd or
# union-nfsctl has.  Each problem is printed as FILE:LINE: what; exit 1 if
# there is any, else 0.
#
# Paths.  A path is checked when it starts with one of the repository's
# top-level entries followed by a slash: rpc/ server/ union/ include/ tests/
# etc/ bench/ fuzz/ ctl/ dist/ man/ docs/ .ci/ (e.g. `server/nfs/nfs3_write.c`,
# `tests/vm/`, `.ci/run`).  It must exist in SRCDIR, as a file or a
# directory, or be the name of a ctest test (an `add_test(NAME ...)` of a
# CMakeLists.txt or .cmake file: `repo/docs_paths`, `fuzz/rpc_corpus`); `*`, `?`
# and `{a,b}` are globs and must match something.  The
# path ends at the first character that cannot be in one (a space, a
# backtick, a quote, a parenthesis, a colon: `union/node.c:un_node_get`
# checks union/node.c), and a trailing `.` or `,` is dropped.  Not checked:
# a token preceded by `/`, a letter, a digit, `.`, `-` or `_` (the running
# system's /etc/..., /var/..., /srv/..., a layer's /etc/hostname, build/
# trees, BUILD/... placeholders), URLs (`://` in the token's word), and
# names without a slash (`lib.sh`).
#
# Options.  A `--name` (with or without `=VALUE`) is checked on every line
# except lines that name another command whose options these are: the words
# listed in OTHER below (ctest, cmake, mount, apt-get, qemu, ...) as a whole
# word.  The options of union-nfsd and union-nfsctl are read from their
# long-option tables (`struct option` in server/args.c and ctl/nfsctl.c, as
# tests/pkg/man.sh reads the man pages against --help).  A line that quotes
# another command's option adds that command to OTHER.
set -uo pipefail
SRC=${1:?usage: docs_paths.sh SRCDIR}
cd "$SRC" || exit 2

TOP='rpc|server|union|include|tests|etc|bench|fuzz|ctl|dist|man|docs|\.ci'
OTHER='ctest|cmake|cpack|mount|umount|apt-get|apt|dpkg|qemu|qemu-system-x86_64|systemctl|journalctl|mandoc|man|lintian|git|rsync|cp|mkfs\.ext4|debootstrap|clang|gcc|python3|with_rpcbind\.sh|diff_oracle\.sh|random_update\.sh|ab\.sh|bench/run\.sh|nfs-ls|sm-notify|rpc\.statd|iperf3|ganesha\.nfsd|pcs'

# long options of a C file's `struct option` tables
options_of() {
	awk '/struct option/ { on = 1 } on { print } on && /};/ { on = 0 }' "$1" |
		grep -o '{"[a-z][a-z0-9-]*"' | sed 's/{"//; s/"//'
}
opts=$( { options_of server/args.c; options_of ctl/nfsctl.c; } | sort -u)
[ "$(echo "$opts" | wc -l)" -gt 20 ] || {
	echo "docs_paths: too few options found in server/args.c and ctl/nfsctl.c: $opts"
	exit 2
}

# ctest names, which look like paths: fuzz/rpc_corpus, repo/docs_paths
tests=$(find . -name CMakeLists.txt -o -name '*.cmake' | grep -v '^\./build' |
	xargs grep -hoE 'add_test\(NAME [^ )]+' | sed 's/add_test(NAME //' | sort -u)

docs=(README.md docs/*.md tests/README.md)
bad=0
complain() { echo "$1"; bad=1; }

for f in "${docs[@]}"; do
	[ -f "$f" ] || { complain "$f: missing"; continue; }
	n=0
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		case $line in
		*/* | *--*) ;;
		*) continue ;;
		esac
		# paths: a token at a word start, starting with a top-level entry
		for tok in $(printf '%s\n' "$line" |
			grep -oE "(^|[^A-Za-z0-9_./~-])($TOP)/[A-Za-z0-9_./*?{},%+-]*" |
			sed -E 's/^[^A-Za-z.]//'); do
			tok=${tok%%[.,]}
			tok=${tok%%[.,]}
			case $tok in
			*://*) continue ;;
			esac
			grep -qxF -- "$tok" <<<"$tests" && continue
			# the character class above holds no space, $, ; or quote, so
			# eval does the brace expansion and nothing else (set -f: no
			# glob here); each alternative must exist, each glob match
			set -f
			alts=$(eval "printf '%s\\n' ${tok%/}")
			set +f
			for t in $alts; do
				if [[ $t == *[*?]* ]]; then
					[ -n "$(compgen -G "$t")" ] && continue
				elif [ -e "$t" ]; then
					continue
				fi
				if [ "$t" = "${tok%/}" ]; then
					complain "$f:$n: no such path: $tok"
				else
					complain "$f:$n: no such path: $t (of $tok)"
				fi
			done
		done
		# options, unless the line names another command
		if printf '%s\n' "$line" | grep -qE "(^|[^A-Za-z0-9_./-])($OTHER)([^A-Za-z0-9_-]|$)"; then
			continue
		fi
		for o in $(printf '%s\n' "$line" | grep -oE '(^|[^A-Za-z0-9_-])--[a-z][a-z0-9-]*' |
			sed -E 's/^[^-]*--//'); do
			grep -qx -- "$o" <<<"$opts" ||
				complain "$f:$n: --$o is not an option of union-nfsd or union-nfsctl"
		done
	done <"$f"
done

[ "$bad" = 0 ] && echo "docs_paths: every path and option named exists"
exit "$bad"
