/* kvzip.c: KVzip (Kim et al. 2025, "KVzip: Query-Agnostic KV Cache Compression with Context
 * Reconstruction", arXiv 2505.23416; code: snu-mllab/KVzip, and NVIDIA kvpress's KVzipPress):
 * the options, the budget over lanes and the selection. The scores come from the
 * context-reconstruction pass (kvzip_pass.c): after each prefill the LLM is run over a
 * "repeat the previous context" prompt followed by the context again, and each context KV
 * pair is scored by the most attention it receives from those queries.
 * Budgets (level):
 *   global  the top B x lanes pairs over every layer and KV head together: non-uniform head
 *           budgets, as published (KVzip's "pair" level, kvpress's default);
 *   layer   the top B x Hkv pairs of each layer (kvpress's layerwise=True);
 *   lane    the top B of each KV head (KVzip's "pair-uniform").
 * The first `sinks` tokens are never evicted (KVzip keeps the system prompt; kvpress 4 sinks)
 * and count in the budget. The context (the first prefill) is compressed once; every later
 * token, a question prefilled after it or a generated one, is kept (as published: the hot tier
 * then grows by one token per step, as SnapKV's decode=keep; the memory report shows it). Eviction is permanent: evicted K/V
 * leave the hot tier. The passes' time and peak bytes are reported by mem(). */
#include "kvzip.h"
#include "common/util.h"
#include "runtime/tokenizer/tokenizer.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kvzip_level_names[] = {"global", "layer", "lane", NULL};

static const skv_opt_desc kvzip_opt_table[] = {
    {"level", NULL, SKV_OPT_ENUM, offsetof(skv_kvzip_opts, level), SKV_KVZIP_GLOBAL, 0, 0, kvzip_level_names,
     SKV_OPT_BARE, SKV_KVZIP_GLOBAL,
     "budget over KV heads: global (non-uniform over every layer and head, as published), layer (per layer), "
     "lane (the same for every KV head)"},
    SKV_OPT_SINKS(skv_kvzip_opts),
    {"chunk", NULL, SKV_OPT_INT, offsetof(skv_kvzip_opts, chunk), 2048, 16, 1 << 20, NULL, 0, 2048,
     "context tokens reconstructed per scoring pass (longer contexts are scored chunk by chunk)"},
    {"tail", NULL, SKV_OPT_INT, offsetof(skv_kvzip_opts, tail), 8, 0, 64, NULL, SKV_OPT_HIDDEN, 8,
     "previous chunk's last tokens quoted in a later chunk's reconstruction prompt"},
};

/* ------------------------------------------------------------------ budgets */

static int cmp_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Keep counts for the lanes [l0, l1) sharing `total` pairs: the top `total` scores over the
 * positions 0 .. n-1 of those lanes. */
static int share_top(skv_policy *p, const skv_prefill_info *pi, int l0, int l1, long total) {
    skv_kvzip_state *s = p->st;
    const int n = pi->n;
    const long nc = (long)(l1 - l0) * n;
    for (int ln = l0; ln < l1; ln++) s->keep[ln] = 0;
    if (total <= 0) return 0;
    if (total >= nc) {
        for (int ln = l0; ln < l1; ln++) s->keep[ln] = n;
        return 0;
    }
    float *v = skv_malloc((size_t)nc * sizeof(float), "kvzip budget");
    if (!v) return -1;
    for (int ln = l0; ln < l1; ln++) memcpy(v + (size_t)(ln - l0) * n, s->score.s[ln], (size_t)n * sizeof(float));
    qsort(v, (size_t)nc, sizeof(float), cmp_desc);
    const float thr = v[total - 1];
    free(v);
    /* every pair above the threshold, then ties at it in lane order */
    long left = total;
    for (int pass = 0; pass < 2; pass++)
        for (int ln = l0; ln < l1; ln++) {
            const float *sc = s->score.s[ln];
            int c = 0;
            for (int q = 0; q < n; q++) c += pass ? sc[q] == thr : sc[q] > thr;
            if (pass && c > left) c = (int)left;
            s->keep[ln] += c;
            left -= c;
        }
    return 0;
}

static int kvzip_budgets(skv_policy *p, const skv_prefill_info *pi) {
    skv_kvzip_state *s = p->st;
    const skv_kvzip_opts *o = p->opts;
    const int nl = p->L * p->Hkv;
    const double B = pi->budget;
    if (o->level == SKV_KVZIP_GLOBAL) {
        if (share_top(p, pi, 0, nl, (long)floor(B * nl + 1e-9))) return -1;
    } else if (o->level == SKV_KVZIP_LAYER) {
        for (int l = 0; l < p->L; l++)
            if (share_top(p, pi, l * p->Hkv, (l + 1) * p->Hkv, (long)floor(B * p->Hkv + 1e-9))) return -1;
    } else {
        for (int ln = 0; ln < nl; ln++) s->keep[ln] = skv_budget_tokens(B, pi->n);
    }
    for (int ln = 0; ln < nl; ln++) s->share[ln] = B > 0 ? s->keep[ln] / B : 1.0;
    return 0;
}

/* ------------------------------------------------------------------ memo */

/* The scores of one pass over a prefill base's context, for the next kvzip session derived
 * from the same base: they depend on the context, the model and the scoring options, not on
 * the budget or the level, so a second budget copies them instead of running the pass again
 * (and reports the pass's cost as its own: a deployment at that budget pays it). */
typedef struct {
    skv_prefill_memo hdr;
    int sinks, chunk, tail;
    int n, nl;
    float *score;         /* (nl, n) */
    double pass_seconds;
    size_t pass_peak;
    long pass_tokens;
} kvzip_memo;

static const char kvzip_memo_owner[] = "kvzip";

static void memo_free(skv_prefill_memo *h) {
    kvzip_memo *m = (kvzip_memo *)h;
    free(m->score);
    free(m);
}

static const kvzip_memo *memo_find(const skv_policy *p, const skv_prefill_info *pi) {
    if (!pi->memo || !*pi->memo || (*pi->memo)->owner != kvzip_memo_owner) return NULL;
    const kvzip_memo *m = (const kvzip_memo *)*pi->memo;
    const skv_kvzip_opts *o = p->opts;
    if (m->sinks != o->sinks || m->chunk != o->chunk || m->tail != o->tail || m->n != pi->n || m->nl != p->L * p->Hkv)
        return NULL;
    return m;
}

/* Replace the base's memo with this session's scores (best effort: without memory the next
 * session runs its own pass). */
static void memo_store(const skv_policy *p, const skv_prefill_info *pi) {
    if (!pi->memo) return;
    const skv_kvzip_state *s = p->st;
    const skv_kvzip_opts *o = p->opts;
    const int n = pi->n, nl = p->L * p->Hkv;
    kvzip_memo *m = calloc(1, sizeof *m);
    float *sc = m ? malloc((size_t)nl * n * sizeof(float)) : NULL;
    if (!sc) { free(m); return; }
    for (int ln = 0; ln < nl; ln++) memcpy(sc + (size_t)ln * n, s->score.s[ln], (size_t)n * sizeof(float));
    *m = (kvzip_memo){.hdr = {.owner = kvzip_memo_owner, .free = memo_free}, .sinks = o->sinks, .chunk = o->chunk,
                      .tail = o->tail, .n = n, .nl = nl, .score = sc, .pass_seconds = s->pass_seconds,
                      .pass_peak = s->pass_peak, .pass_tokens = s->pass_tokens};
    if (*pi->memo) (*pi->memo)->free(*pi->memo);
    *pi->memo = &m->hdr;
}

/* ------------------------------------------------------------------ hooks */

/* The first prefill (the context) is scored and compressed; a later one (a question, a turn)
 * is kept whole, as every generated token is (select: nothing fresh). */
static int kvzip_prefill(skv_policy *p, const skv_prefill_info *pi) {
    if (pi->layer != 0 || pi->n0 > 0) return 0;   /* the pass scores every layer at once */
    skv_kvzip_state *s = p->st;
    const skv_kvzip_opts *o = p->opts;
    const int n = pi->n, nl = p->L * p->Hkv;
    if (skv_lanescore_reserve(&s->score, n)) return -1;
    const int begin = o->sinks < n ? o->sinks : n;
    for (int ln = 0; ln < nl; ln++) {
        float *sc = s->score.s[ln];
        for (int k = 0; k < begin; k++) sc[k] = INFINITY;
        for (int k = begin; k < n; k++) sc[k] = 0;
        s->filled[ln] = n;
        s->fresh[ln] = 1;
    }
    if (pi->budget < n) {
        const kvzip_memo *m = memo_find(p, pi);
        if (m) {   /* the same context scored by an earlier session from this base */
            for (int ln = 0; ln < nl; ln++)
                memcpy(s->score.s[ln] + begin, m->score + (size_t)ln * n + begin, (size_t)(n - begin) * sizeof(float));
            s->pass_seconds += m->pass_seconds;
            if (m->pass_peak > s->pass_peak) s->pass_peak = m->pass_peak;
            s->pass_tokens += m->pass_tokens;
        } else {
            if (skv_kvzip_pass(p, pi, pi->ids, begin)) return -1;
            memo_store(p, pi);
        }
    }
    return kvzip_budgets(p, pi);
}

static int kvzip_select(skv_policy *p, skv_select_io *io) {
    skv_kvzip_state *s = p->st;
    if (skv_lanescore_reserve(&s->score, io->n)) return -1;
    float *sc = s->score.s[io->lane];
    for (int k = s->filled[io->lane]; k < io->n; k++) sc[k] = INFINITY;
    if (s->filled[io->lane] < io->n) s->filled[io->lane] = io->n;
    if (!s->fresh[io->lane]) {
        skv_select_keep_hot(io);   /* decoding appends */
        return 0;
    }
    s->fresh[io->lane] = 0;
    int keep = s->keep[io->lane];
    if (keep < 1) keep = 1;
    skv_select_scored(io, sc, keep, 0, true, 0);
    return 0;
}

static double kvzip_share(const skv_policy *p, int layer, int kvh, double budget) {
    (void)budget;
    const skv_kvzip_state *s = p->st;
    return s->share[layer * p->Hkv + kvh];
}

static void kvzip_mem(const skv_policy *p, skv_policy_mem *m) {
    const skv_kvzip_state *s = p->st;
    m->pass_seconds = s->pass_seconds;
    m->pass_peak_bytes = s->pass_peak;
}

/* ------------------------------------------------------------------ state */

static void kvzip_free(skv_policy *p) {
    skv_kvzip_state *s = p->st;
    if (!s) return;
    skv_lanescore_free(&s->score);
    free(s->filled); free(s->fresh); free(s->keep); free(s->share);
    free(s->prompt[0]); free(s->prompt[1]); free(s->suffix);
    free(s);
    p->st = NULL;
}

static int *dup_ints(const int *a, int n) {
    int *b = skv_malloc((size_t)n * sizeof(int) + 1, "kvzip state");
    if (b && n) memcpy(b, a, (size_t)n * sizeof(int));
    return b;
}

static skv_kvzip_state *state_new(int nl) {
    skv_kvzip_state *s = skv_calloc(1, sizeof *s, "kvzip state");
    if (!s) return NULL;
    s->filled = skv_calloc((size_t)nl, sizeof(int), "kvzip state");
    s->fresh = skv_calloc((size_t)nl, 1, "kvzip state");
    s->keep = skv_calloc((size_t)nl, sizeof(int), "kvzip state");
    s->share = skv_malloc((size_t)nl * sizeof(double), "kvzip state");
    if (!s->filled || !s->fresh || !s->keep || !s->share) {
        free(s->filled); free(s->fresh); free(s->keep); free(s->share); free(s);
        return NULL;
    }
    for (int i = 0; i < nl; i++) s->share[i] = 1.0;
    return s;
}

static int kvzip_fork(const skv_policy *src, skv_policy *dst) {
    const skv_kvzip_state *a = src->st;
    const int nl = src->L * src->Hkv;
    skv_kvzip_state *b = state_new(nl);
    if (!b) return -1;
    *b = (skv_kvzip_state){.filled = b->filled, .fresh = b->fresh, .keep = b->keep, .share = b->share,
                           .n_prompt = {a->n_prompt[0], a->n_prompt[1]}, .n_suffix = a->n_suffix, .m = a->m,
                           .T_max = a->T_max, .kv_f16 = a->kv_f16, .pass_seconds = a->pass_seconds,
                           .pass_peak = a->pass_peak, .pass_tokens = a->pass_tokens};
    memcpy(b->filled, a->filled, (size_t)nl * sizeof(int));
    memcpy(b->fresh, a->fresh, (size_t)nl);
    memcpy(b->keep, a->keep, (size_t)nl * sizeof(int));
    memcpy(b->share, a->share, (size_t)nl * sizeof(double));
    b->prompt[0] = dup_ints(a->prompt[0], a->n_prompt[0]);
    b->prompt[1] = dup_ints(a->prompt[1], a->n_prompt[1]);
    b->suffix = dup_ints(a->suffix, a->n_suffix);
    dst->st = b;
    if (!b->prompt[0] || !b->prompt[1] || !b->suffix || skv_lanescore_copy(&b->score, &a->score)) {
        kvzip_free(dst);
        return -1;
    }
    return 0;
}

/* ids of text (special tokens parsed when special) into a heap array. */
static int encode(const skv_tokenizer *t, const char *text, bool special, int **ids, int *n) {
    const int need = skv_tokenize(t, text, strlen(text), special, NULL, 0);
    if (need < 0) return -1;
    if (!(*ids = skv_malloc((size_t)need * sizeof(int) + 1, "kvzip prompt"))) return -1;
    *n = skv_tokenize(t, text, strlen(text), special, *ids, need);
    return *n < 0 ? -1 : 0;
}

/* The reconstruction prompt's ids (kvpress's strings) and the chat template's assistant
 * header (what follows the user message; "\n" without a template). Without a tokenizer (test
 * models) the prompt is empty and only the context is repeated. */
static int kvzip_prompts(skv_kvzip_state *s, const skv_tokenizer *t) {
    if (!t) {
        s->prompt[0] = dup_ints(NULL, 0);
        s->prompt[1] = dup_ints(NULL, 0);
        s->suffix = dup_ints(NULL, 0);
        return s->prompt[0] && s->prompt[1] && s->suffix ? 0 : -1;
    }
    if (encode(t, "\n\nRepeat the previous context exactly.", false, &s->prompt[0], &s->n_prompt[0]) ||
        encode(t, "\n\nRepeat the part of the previous context exactly, starting with", false, &s->prompt[1],
               &s->n_prompt[1]))
        return -1;
    const char *sep = "\n#############";   /* kvpress: "\n" + "#" * len("dummy context") */
    char *chat = skv_chat_prompt(t, NULL, "dummy context\n#############");
    const char *after = chat ? strstr(chat, sep) : NULL;
    int rc = encode(t, after ? after + strlen(sep) : "\n", true, &s->suffix, &s->n_suffix);
    free(chat);
    return rc;
}

static int kvzip_init(skv_policy *p, const skv_policy_env *env) {
    const int nl = p->L * p->Hkv;
    if (!env || !env->llm) return skv_error("kvzip: needs the LLM to run its scoring pass");
    skv_kvzip_state *s = state_new(nl);
    if (!s) return -1;
    p->st = s;
    p->free_state = kvzip_free;
    s->m = env->llm;
    s->T_max = env->T_max > 0 ? env->T_max : 256;
    s->kv_f16 = env->kv_f16;
    if (skv_lanescore_init(&s->score, nl) || kvzip_prompts(s, env->llm->tok)) return -1;
    p->on_prefill = kvzip_prefill;
    p->select = kvzip_select;
    p->lane_share = kvzip_share;
    p->fork = kvzip_fork;
    p->mem = kvzip_mem;
    return 0;
}

const skv_policy_desc skv_policy_kvzip = {
    .name = "kvzip",
    .summary = "the prompt scored by the attention the model pays it while repeating it (context reconstruction); "
               "non-uniform head budgets; generated tokens kept",
    .keeps = "At the end of the first prefill (the context), the sinks and the prompt's KV pairs that receive the most attention "
             "when the LLM, prompted to repeat the previous context, runs over the context again (chunk by "
             "chunk for long prompts); with `level=global` (the default, as published) the budget is spread "
             "over all layers and KV heads by score, so heads keep different numbers of tokens. Every "
             "later token (a question prefilled after the context, every generated token) is kept, so the hot "
             "tier grows past the budget; eviction is permanent.",
    .choose = "The strongest query-agnostic eviction method published (kvpress's RULER leaderboard): for a "
              "context compressed once and then asked several questions. Its scoring pass runs the model over "
              "the context again, attending to it all: one to two more prefills of the context (reported by "
              "`--stats` as the scoring pass).",
    .caps = 0,
    .opts = kvzip_opt_table,
    .n_opts = sizeof kvzip_opt_table / sizeof *kvzip_opt_table,
    .opts_size = sizeof(skv_kvzip_opts),
    .init = kvzip_init,
};
