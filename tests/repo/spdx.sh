#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# spdx.sh SOURCE_DIR - the license as the source tree states it: LICENSE is
# the Apache License 2.0 text (the same bytes as Debian's
# /usr/share/common-licenses/Apache-2.0 where that exists), and every .c, .h,
# .x, .sh and .py file says "SPDX-License-Identifier: Apache-2.0" in its
# first 5 lines.  The files are those git tracks when SOURCE_DIR is a git
# checkout (CI's fresh clone), else all under SOURCE_DIR but .git and build
# trees (a directory with a CMakeCache.txt).
# Exit: 0 passed, 1 failed (each failure named).
set -euo pipefail
SRC=$(cd "${1:?usage: spdx.sh SOURCE_DIR}" && pwd -P)
SPDX='SPDX-License-Identifier: Apache-2.0([^-.+A-Za-z0-9]|$)'
COMMON=/usr/share/common-licenses/Apache-2.0
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# LICENSE: the title lines, and the whole text where Debian has it.
if [ -f "$SRC/LICENSE" ]; then
	title=$(awk '{ gsub(/^[ \t]+|[ \t]+$/, "") } /./ { printf "%s|", $0; if (++n == 2) exit }' \
		"$SRC/LICENSE")
	[ "$title" = 'Apache License|Version 2.0, January 2004|' ] ||
		fail "LICENSE: title lines are not the Apache License 2.0's: $title"
	grep -q '^ *TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION$' "$SRC/LICENSE" ||
		fail "LICENSE: no terms and conditions"
	if [ -f "$COMMON" ]; then
		cmp -s "$SRC/LICENSE" "$COMMON" || fail "LICENSE differs from $COMMON"
	fi
else
	fail "no LICENSE in $SRC"
fi

# The files to check, NUL-separated, relative to SRC.
list_files() {
	if command -v git >/dev/null &&
		[ "$(git -C "$SRC" rev-parse --show-toplevel 2>/dev/null)" = "$SRC" ]; then
		echo "files: git ls-files" >&2
		git -C "$SRC" ls-files -z -- '*.c' '*.h' '*.x' '*.sh' '*.py'
	else
		echo "files: find (no git checkout)" >&2
		(cd "$SRC" && find . \( -name .git -o -type d -exec test -e '{}/CMakeCache.txt' \; \) -prune \
			-o -type f \( -name '*.c' -o -name '*.h' -o -name '*.x' -o -name '*.sh' -o -name '*.py' \) \
			-printf '%P\0')
	fi
}

n=0
while IFS= read -r -d '' f; do
	# tracked but deleted in the work tree: nothing to read
	[ -e "$SRC/$f" ] || continue
	n=$((n + 1))
	head -n 5 "$SRC/$f" | grep -qE "$SPDX" ||
		fail "$f: no 'SPDX-License-Identifier: Apache-2.0' in its first 5 lines"
done < <(list_files)
# a listing that finds nothing must not pass
[ "$n" -gt 0 ] || fail "no .c, .h, .x, .sh or .py file found under $SRC"

[ "$fails" = 0 ] || {
	echo "$fails failed"
	exit 1
}
echo "spdx: LICENSE and $n files: all passed"
