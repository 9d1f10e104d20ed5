#!/bin/sh
# SPDX-License-Identifier: MIT
# Reject C functions that invite overflows or hide allocations (curl's
# checksrc idea): strcpy, strcat, sprintf, vsprintf, gets, atoi, atol,
# strtok, and bare malloc/calloc/realloc/free/strdup outside src/base/alloc.c.
# A line may opt out with the comment "checksrc: allow" and a reason.
set -u
cd "$(dirname "$0")/.."
status=0
for f in src/*.c src/*.h src/*/*.c src/*/*.h cli/*.c cli/*.h include/*.h; do
    matches=$(grep -nE '(^|[^_a-zA-Z0-9.>])(strcpy|strcat|sprintf|vsprintf|gets|atoi|atol|strtok)[[:space:]]*\(' "$f" |
              grep -v 'checksrc: allow')
    if [ "$f" != src/base/alloc.c ]; then
        alloc=$(grep -nE '(^|[^_a-zA-Z0-9.>])(malloc|calloc|realloc|free|strdup|strndup)[[:space:]]*\(' "$f" |
                grep -v 'checksrc: allow')
        [ -n "$alloc" ] && matches="$matches
$alloc"
    fi
    matches=$(printf '%s\n' "$matches" | sed '/^$/d')
    if [ -n "$matches" ]; then
        printf '%s\n' "$matches" | sed "s|^|$f:|"
        status=1
    fi
done
# Every C, Python and shell source carries its license line (LICENSE) in
# its first two lines (after a #! line).
for f in $(find src cli include python tests tools bench examples .ci \
               -type f \( -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.sh' -o -name run \) \
               -not -path '*/fuzz/corpus/*' -not -path '*/fuzz/regressions/*'); do
    if ! head -n 2 "$f" | grep -q 'SPDX-License-Identifier: MIT'; then
        echo "$f: no SPDX-License-Identifier line in its first two lines"
        status=1
    fi
done
[ $status -eq 0 ] && echo "checksrc: clean"
exit $status
