/* xtok.h: one model's side of a cross-tokenizer calibration window (docs/calibration.md,
 * "Cross-family pairs").
 *
 * The model runs its own tokens of the window with an attention hook: the hook computes
 * the ordinary attention output (skv_attention over this window's keys) and, beside it,
 * score vectors over the positions the alignment matched (align.h) only. With the matched
 * positions p_0 < ... < p_{M-1} of this model, for every layer and query head:
 *   row a (a = 0..M-1): softmax of q(p_a).k(p_b) / sqrt(d) over the matched keys b <= a
 *       alone, i.e. the attention row restricted to matched keys and renormalised to 1;
 *   colsum[b] = sum over matched queries a >= b of row a [b];
 *   lastrow[b] = row M-1 [b].
 * Both models' vectors are indexed by the match number b, so the similarity metrics
 * (similarity.h) compare them key by key as for one shared tokenizer. With every position
 * matched this is the ordinary column sum / last row (tested against the kernel's). */
#ifndef SKV_XTOK_H
#define SKV_XTOK_H
#include <stdbool.h>
#include "runtime/engine/forward.h"

typedef struct {
    skv_state *s;
    int L, H, Hkv, d, cap;     /* cap: most tokens per window */
    float *kbuf, *vbuf;        /* (Hkv, cap, d): this window's rotated keys and values */
    float *colsum, *lastrow;   /* (L, H, cap) over match numbers; lastrow NULL without rows */
    float *F, *R;              /* (L*H, n_keys) packed, sinks dropped */
    const int *pos;            /* (M) this model's matched positions, ascending */
    int M;
} skv_xtok_side;

/* cap: the most tokens of a window; rows: also last rows (metric rowcos). */
int skv_xtok_init(skv_xtok_side *x, const skv_model *m, int cap, bool rows);
void skv_xtok_free(skv_xtok_side *x);

/* Forward over tokens (T <= cap) from a fresh state; pos (M) are the matched positions. */
int skv_xtok_forward(skv_xtok_side *x, const int *tokens, int T, const int *pos, int M);

/* Pack the score vectors of match numbers drop .. M-1 into F (and R): (L*H, M - drop).
 * normalized: divide match b by the M - b matched queries that could see it. */
int skv_xtok_pack(skv_xtok_side *x, int drop, bool normalized);

#endif
