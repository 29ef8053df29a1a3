#!/usr/bin/env bash
# spec-bench.sh: speculative decoding on the Qwen2.5-Coder pair (0.5B drafts for 1.5B, policy
# full unless SPEC_POLICY): for two HumanEval prompts (completion) and one GSM8K question (--chat), 128 greedy
# tokens with --draft 0 (plain), 2, 4, 6; prints decode tokens/s, the ratio to plain decoding,
# LLM passes per token, draft acceptance and mean accepted length, the share of decode time
# spent drafting (the SLM's proposals: generate --stats' speculative rounds), and checks that every
# draft run printed the same text as the plain run. docs/performance.md, "Speculative decoding".
# Environment: OMP_NUM_THREADS (default 2), SPEC_N (128), SPEC_KS ("2 4 6"; aK = --draft K
# --draft-adapt), SPEC_POLICY (full),
# SPEC_BUDGET (1; e.g. SPEC_POLICY=h2o SPEC_BUDGET=0.2), SPEC_PROMPTS ("he0 he10 gsm0"),
# SPEC_VOCAB (0; --draft-vocab N for the draft runs; K vN in SPEC_KS: that run's own N).
# A policy that runs the SLM itself (smallkv) gets it and the pair's profile in every run,
# drafts with that same SLM pass, and is also compared with plain full-cache decoding
# (column vs_full).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
N=${SPEC_N:-128}
KS=${SPEC_KS:-"2 4 6"}
POLICY=${SPEC_POLICY:-full}
BUDGET=${SPEC_BUDGET:-1}
VOCAB=${SPEC_VOCAB:-0}
PROMPTS=${SPEC_PROMPTS:-"he0 he10 gsm0"}
LLM=models/qwen2.5-coder-1.5b.gguf
SLM=models/qwen2.5-coder-0.5b.gguf
PROFILE=profiles/qwen2.5-coder-0.5b-1.5b.skvprof
own=(); [[ $POLICY == smallkv* ]] && own=(--slm $SLM --profile $PROFILE)
for f in $LLM $SLM build/bin/smallkv; do [ -e "$f" ] || { echo "spec-bench: $f missing" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 scripts/spec-prompts.py "$tmp"
echo "# spec-bench: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!results' 2>/dev/null || echo -dirty), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS, policy $POLICY budget $BUDGET, $N tokens, draft vocabulary $VOCAB"
printf '%-14s %5s %9s %7s %8s %12s %10s %12s %11s %s\n' prompt K tok/s ratio vs_full passes/tok accepted mean_acc draft_share same
for p in $PROMPTS; do
    chat=""; [ $p = gsm0 ] && chat="--chat"
    base=0
    full=""
    if [ ${#own[@]} -gt 0 ]; then
        build/bin/smallkv generate --llm $LLM --policy full $chat --prompt "$(cat $tmp/$p.txt)" -n $N --stats \
            >"$tmp/$p.full.out" 2>"$tmp/$p.full.err"
        full=$(sed -n 's/.*decode [0-9]* steps in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$tmp/$p.full.err")
    fi
    for k in 0 $KS; do
        kk=${k%v*}; voc=$VOCAB; [[ $k == *v* ]] && voc=${k#*v}
        dk=(--draft ${kk#a}); [[ $kk == a* ]] && dk+=(--draft-adapt)
        [ "$voc" != 0 ] && dk+=(--draft-vocab $voc)
        pair=(--slm $SLM "${dk[@]}"); [ $k = 0 ] && pair=()
        [ ${#own[@]} -gt 0 ] && pair=("${own[@]}" "${dk[@]}")
        build/bin/smallkv generate --llm $LLM "${pair[@]}" --policy $POLICY --budget $BUDGET $chat --prompt "$(cat $tmp/$p.txt)" \
            -n $N --stats >"$tmp/$p.$k.out" 2>"$tmp/$p.$k.err"
        tps=$(sed -n 's/.*decode [0-9]* steps in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$tmp/$p.$k.err")
        [ $k = 0 ] && base=$tps
        ratio=$(python3 -c "print(f'{$tps/$base:.2f}')")
        ppt=1.000; acc=-; mean=-; dshare=-
        if [ $k != 0 ]; then
            l=$(grep speculative "$tmp/$p.$k.err")
            ppt=$(sed -n 's/.*(\([0-9.]*\) per token).*/\1/p' <<<"$l")
            acc=$(sed -n 's/.*drafts accepted (\([0-9.]*%\)).*/\1/p' <<<"$l")
            mean=$(sed -n 's/.*, \([0-9.]*\) accepted per pass.*/\1/p' <<<"$l")
            r=$(grep 'speculative rounds' "$tmp/$p.$k.err")
            ds=$(sed -n 's/.*draft \([0-9.]*\) s,.*/\1/p' <<<"$r")
            dd=$(sed -n 's/.*(of decode \([0-9.]*\) s).*/\1/p' <<<"$r")
            dshare=$(python3 -c "print(f'{100 * $ds / $dd:.0f}%')")
        fi
        vs=-; [ -n "$full" ] && vs=$(python3 -c "print(f'{$tps/$full:.2f}')")
        same=yes; cmp -s "$tmp/$p.0.out" "$tmp/$p.$k.out" || same=NO
        printf '%-14s %5s %9s %7s %8s %12s %10s %12s %11s %s\n' $p $k $tps $ratio $vs $ppt $acc $mean $dshare $same
    done
done
