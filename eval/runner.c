/* runner.c: policy specs, the lock-step teacher-forced fidelity runner and the greedy
 * generation runner of the evaluation harness (see runner.h), over public-API sessions. */
#include "runner.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int skv_eval_pol_parse(const char *spec, const char *defaults, skv_eval_pol *out) {
    char buf[256];
    memset(out, 0, sizeof *out);
    if (!spec || !*spec || strlen(spec) >= sizeof buf) return skv_error("policy spec '%s': empty or too long", spec ? spec : "");
    strcpy(buf, spec);
    char *colon = strpbrk(buf, ":,");
    if (colon) *colon = 0;
    if (skv_policy_spec_default(buf, &out->spec)) return skv_error_prefix("policy spec '%s'", spec);
    if (defaults && *defaults) {
        char d[256];
        snprintf(d, sizeof d, "%s", defaults);
        char *save = NULL;
        for (char *t = strtok_r(d, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(t, '=');
            if (eq) *eq = 0;
            skv_policy_spec probe = out->spec;
            /* a default only for the policies that have the option */
            if (!skv_policy_spec_set(&probe, t, eq ? eq + 1 : NULL)) out->spec = probe;
        }
    }
    if (colon) {
        char *save = NULL;
        for (char *t = strtok_r(colon + 1, ":,", &save); t; t = strtok_r(NULL, ":,", &save)) {
            char *eq = strchr(t, '=');
            if (eq) *eq = 0;
            if (skv_policy_spec_set(&out->spec, t, eq ? eq + 1 : NULL)) return skv_error_prefix("policy spec '%s'", spec);
        }
    }
    skv_policy_spec_label(&out->spec, out->label, sizeof out->label);
    return 0;
}

/* A cell as public options (device, cache, budget base, granularity, context, drafting)
 * plus what they cannot say (api_cell: the parsed policy, its mapping, the prefill block). */
static int cell_opts(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx, int draft,
                     smallkv_options *o, api_cell *x) {
    if ((p->spec.desc->caps & SKV_POLICY_NEEDS_SLM) && !c->pair->slm) return skv_error("%s: no SLM given (--slm)", p->label);
    const bool keeps_all = p->spec.desc->caps & SKV_POLICY_KEEPS_ALL;
    smallkv_options_default(o);
    o->device = c->device ? c->device : "cpu";
    o->budget = keeps_all ? 1.0 : budget;
    o->kv_f32 = !c->kv_f16;
    o->budget_prompt = c->budget_prompt;
    o->per_head = c->per_head && !keeps_all;
    o->max_ctx = max_ctx;
    o->draft = draft;
    /* a cell with a mapping of its own (eval depth) runs to that mapping's deepest layer */
    *x = (api_cell){.pol = &p->spec, .map = p->map ? p->map : c->map, .map_depth = p->map ? 0 : c->map_depth,
                    .T_max = c->T_max};
    return 0;
}

smallkv_session *skv_eval_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx, int draft) {
    smallkv_options o;
    api_cell x;
    if (cell_opts(c, p, budget, max_ctx, draft, &o, &x)) return NULL;
    smallkv_session *s = api_session_cell(c->pair, &o, &x);
    if (!s) skv_error_prefix("%s at budget %g", p->label, budget);
    return s;
}

smallkv_session *skv_eval_base(const skv_eval_ctx *c, const skv_eval_pol *const *pols, int n, int max_ctx) {
    const char *slm_pol = NULL;
    for (int i = 0; i < n && c->pair->slm && !slm_pol; i++)
        if (pols[i]->spec.desc->caps & SKV_POLICY_NEEDS_SLM) slm_pol = pols[i]->spec.desc->name;
    smallkv_session *s = api_session_base(c->pair, slm_pol, max_ctx, c->kv_f16, c->T_max);
    if (!s) skv_error_prefix("prefill base");
    return s;
}

smallkv_session *skv_eval_cell_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx,
                                       smallkv_session *base, const int *tokens, int n_tok, bool *derived) {
    smallkv_options o;
    api_cell x;
    *derived = false;
    if (cell_opts(c, p, budget, max_ctx, 0, &o, &x)) return NULL;
    if (base) {
        smallkv_session *d = api_session_derive(base, &o, &x);
        if (d) { *derived = true; return d; }
        /* not derivable (e.g. a compressed SLM cache): a prefill of its own below */
    }
    smallkv_session *s = api_session_cell(c->pair, &o, &x);
    if (!s) { skv_error_prefix("%s at budget %g", p->label, budget); return NULL; }
    if (smallkv_prefill(s, tokens, n_tok)) {
        skv_error_prefix("%s at budget %g: prefill", p->label, budget);
        smallkv_session_free(s);
        return NULL;
    }
    return s;
}

/* The shared prefill of tokens[0..n) for cells pols[0..n_pols): NULL without error (*failed
 * false) on a device other than the CPU, where every cell prefills by itself. */
static smallkv_session *shared_prefill(const skv_eval_ctx *c, const skv_eval_pol *const *pols, int n_pols, int max_ctx,
                                       const int *tokens, int n, bool *failed) {
    *failed = false;
    if (c->device && strcmp(c->device, "cpu")) return NULL;
    smallkv_session *base = skv_eval_base(c, pols, n_pols, max_ctx);
    if (!base || smallkv_prefill(base, tokens, n)) {
        if (base) skv_error_prefix("prefill");
        smallkv_session_free(base);
        *failed = true;
        return NULL;
    }
    return base;
}

/* Step sessions ss[0..n) with one token each: in batches of up to c->batch sessions
 * (smallkv_step_batch), or one by one when c->batch <= 1. */
static int step_all(const skv_eval_ctx *c, smallkv_session **ss, const int *tokens, int n) {
    const int B = c->batch > 1 ? c->batch : 1;
    for (int i = 0; i < n; i += B) {
        const int m = n - i < B ? n - i : B;
        if (m == 1 ? smallkv_step(ss[i], tokens[i]) : smallkv_step_batch(ss + i, tokens + i, m)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ fidelity */

static void online_agreement(skv_fid_cell *cell, const smallkv_session *s, const int *map, const int *map_full, int n) {
    cell->heads = 0;
    /* a policy that maps heads without the profile's map */
    if (!(cell->pol->spec.desc->caps & SKV_POLICY_NEEDS_SLM) || skv_policy_spec_needs_map(&cell->pol->spec) || !map) return;
    const int *om = api_session_head_map(s);
    if (!om) return;
    cell->heads = n;
    cell->agree_heads = cell->agree_full = 0;
    for (int i = 0; i < n; i++) {
        cell->agree_heads += om[i] == map[i];
        if (map_full) cell->agree_full += om[i] == map_full[i];
    }
}

int skv_eval_fidelity(const skv_eval_ctx *c, const int *tokens, int N, int P, skv_fid_cell *cells, int n_cells,
                      const int *map_full, skv_eval_progress progress, void *u) {
    if (P < 1 || N < P + 2) return skv_error("fidelity: need 1 <= prefill (%d) and at least 2 tokens after it (have %d)", P, N);
    if (n_cells < 1) return 0;
    const int V = smallkv_vocab(c->pair);
    int rc = -1;
    /* ss[0] = the full-cache reference, ss[1 + i] = cell i */
    smallkv_session **ss = skv_calloc((size_t)n_cells + 1, sizeof *ss, "fidelity sessions");
    const skv_eval_pol **pols = skv_calloc((size_t)n_cells, sizeof *pols, "fidelity sessions");
    int *tk = skv_calloc((size_t)n_cells + 1, sizeof *tk, "fidelity sessions");
    smallkv_session *base = NULL;
    if (!ss || !pols || !tk) goto done;
    for (int i = 0; i < n_cells; i++) pols[i] = cells[i].pol;
    /* one exact prefill, derived into the reference and every cell */
    double t0 = skv_now();
    bool failed;
    base = shared_prefill(c, pols, n_cells, N, tokens, P, &failed);
    if (failed) { skv_error_prefix("fidelity"); goto done; }
    const double base_s = skv_now() - t0;
    skv_eval_pol full;
    if (skv_eval_pol_parse("full", NULL, &full)) goto done;
    bool dv;
    if (!(ss[0] = skv_eval_cell_session(c, &full, 1.0, N, base, tokens, P, &dv))) goto done;
    for (int i = 0; i < n_cells; i++) {
        memset(&cells[i].acc, 0, sizeof cells[i].acc);
        cells[i].heads = 0;
        t0 = skv_now();
        if (!(ss[i + 1] = skv_eval_cell_session(c, cells[i].pol, cells[i].budget, N, base, tokens, P, &cells[i].shared_prefill)))
            goto done;
        cells[i].prefill_s = (skv_now() - t0) + (cells[i].shared_prefill ? base_s : 0);
        skv_session_mem m;
        api_session_mem(ss[i + 1], &m);
        cells[i].slm_s = -m.slm_seconds;   /* an own prefill's SLM time is in prefill_s */
        cells[i].seconds = 0;
    }
    smallkv_session_free(base);   /* derived sessions hold what they need (the cold tier is refcounted) */
    base = NULL;
    const long total = (long)(N - 1 - P) * (n_cells + 1);
    long done_steps = 0;
    const bool timed = c->batch <= 1;
    for (int pos = P; pos < N - 1; pos++) {
        for (int i = 0; i <= n_cells; i++) tk[i] = tokens[pos];
        if (timed) {
            /* one by one, each cell's decode time measured */
            for (int i = 0; i <= n_cells; i++) {
                t0 = skv_now();
                if (smallkv_step(ss[i], tk[i])) goto step_fail;
                if (i) cells[i - 1].seconds += skv_now() - t0;
            }
        } else if (step_all(c, ss, tk, n_cells + 1)) {
            goto step_fail;
        }
        const float *rl = smallkv_logits(ss[0]);
        for (int i = 0; i < n_cells; i++) {
            skv_step_cmp cmp;
            skv_compare_logits(rl, smallkv_logits(ss[i + 1]), V, tokens[pos + 1], &cmp);
            if (skv_fid_add(&cells[i].acc, &cmp)) goto done;
        }
        done_steps += n_cells + 1;
        if (progress) progress(u, done_steps, total);
        continue;
    step_fail:
        skv_error_prefix("fidelity: decode step at position %d", pos);
        goto done;
    }
    for (int i = 0; i < n_cells; i++) {
        smallkv_stats st;
        smallkv_get_stats(ss[i + 1], &st);
        api_session_mem(ss[i + 1], &cells[i].mem);
        cells[i].restores = st.restores;
        cells[i].timed = timed;
        cells[i].slm_s += cells[i].mem.slm_seconds;
        online_agreement(&cells[i], ss[i + 1], c->map, map_full, c->pair->llm->cfg.n_layer * c->pair->llm->cfg.n_head);
    }
    rc = 0;
done:
    if (ss) for (int i = 0; i <= n_cells; i++) smallkv_session_free(ss[i]);
    smallkv_session_free(base);
    free(ss); free(pols); free(tk);
    return rc;
}

/* ------------------------------------------------------------------ generation */

/* the task's stop rule on the text of gen[0..n): 1 stop, 0 go on, -1 + error */
static int stop_at(const skv_tokenizer *tok, const int *gen, int n, skv_eval_stop stop, void *u) {
    char *text = skv_detokenize(tok, gen, n);
    if (!text) return -1;
    const bool st = stop(text, u);
    free(text);
    return st;
}

int skv_eval_generate_cells(const skv_eval_ctx *c, skv_gen_cell *cells, int n, const int *ctx, int n_ctx, const int *q,
                            int n_q, int max_new, skv_eval_stop stop, void *u) {
    const skv_tokenizer *tok = c->pair->llm->tok;
    if (!tok) return skv_error("generate: the LLM has no tokenizer");
    if (n < 1) return 0;
    if (n_ctx < 1 || n_q < 0 || max_new < 1) return skv_error("generate: bad sizes (context %d, question %d, new %d)", n_ctx, n_q, max_new);
    const int max_ctx = n_ctx + n_q + max_new + 1;
    int rc = -1;
    smallkv_session **ss = skv_calloc((size_t)n, sizeof *ss, "generation sessions");
    smallkv_session **act = skv_calloc((size_t)n, sizeof *act, "generation sessions");
    const skv_eval_pol **pols = skv_calloc((size_t)n, sizeof *pols, "generation sessions");
    int *gen = skv_malloc((size_t)n * ((size_t)max_new + 1) * sizeof(int), "generated tokens");
    int *tk = skv_calloc((size_t)n, sizeof *tk, "generation sessions"), *idx = skv_calloc((size_t)n, sizeof *idx, "generation");
    bool *live = skv_calloc((size_t)n, sizeof *live, "generation sessions");
    smallkv_session *base = NULL;
    if (!ss || !act || !pols || !gen || !tk || !idx || !live) goto done;
    for (int i = 0; i < n; i++) { memset(&cells[i].out, 0, sizeof cells[i].out); pols[i] = cells[i].pol; }
    double t0 = skv_now();
    bool failed;
    base = shared_prefill(c, pols, n, max_ctx, ctx, n_ctx, &failed);
    if (failed) { skv_error_prefix("generate"); goto done; }
    const double base_s = skv_now() - t0;
    for (int i = 0; i < n; i++) {
        t0 = skv_now();
        if (!(ss[i] = skv_eval_cell_session(c, cells[i].pol, cells[i].budget, max_ctx, base, ctx, n_ctx, &cells[i].shared_prefill)))
            goto done;
        cells[i].out.prefill_s = skv_now() - t0 + (cells[i].shared_prefill ? base_s : 0);
    }
    smallkv_session_free(base);
    base = NULL;
    t0 = skv_now();
    /* the question as decode steps, all cells together */
    for (int j = 0; j < n_q; j++) {
        for (int i = 0; i < n; i++) tk[i] = q[j];
        if (step_all(c, ss, tk, n)) { skv_error_prefix("generate: question token %d", j); goto done; }
    }
    /* greedy decoding of the live cells together until each stops */
    for (int i = 0; i < n; i++) live[i] = true;
    for (;;) {
        int na = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i]) continue;
            skv_gen_out *o = &cells[i].out;
            int next = smallkv_sample(ss[i], 0, NULL);   /* greedy: the first maximum */
            if (next < 0) goto done;
            bool st = smallkv_is_stop(c->pair, next);
            if (!st) {
                gen[(size_t)i * (max_new + 1) + o->n_gen++] = next;
                if (stop) {
                    const int r = stop_at(tok, gen + (size_t)i * (max_new + 1), o->n_gen, stop, u);
                    if (r < 0) goto done;
                    st = r;
                }
                if (o->n_gen >= max_new) st = true;
            }
            if (st) { live[i] = false; continue; }
            act[na] = ss[i]; tk[na] = next; idx[na++] = i;
        }
        if (!na) break;
        if (step_all(c, act, tk, na)) { skv_error_prefix("generate: decode step"); goto done; }
    }
    const double dec_s = skv_now() - t0;
    for (int i = 0; i < n; i++) {
        skv_gen_out *o = &cells[i].out;
        o->decode_s = dec_s;
        api_session_mem(ss[i], &o->mem);
        if (!(o->text = skv_detokenize(tok, gen + (size_t)i * (max_new + 1), o->n_gen))) goto done;
    }
    rc = 0;
done:
    if (rc) for (int i = 0; i < n; i++) { free(cells[i].out.text); cells[i].out.text = NULL; }
    if (ss) for (int i = 0; i < n; i++) smallkv_session_free(ss[i]);
    smallkv_session_free(base);
    free(ss); free(act); free(pols); free(gen); free(tk); free(idx); free(live);
    return rc;
}

/* smallkv_generate's callback: the tokens so far, and the task's stop rule on their text */
typedef struct {
    const skv_tokenizer *tok;
    int *gen, n;
    skv_eval_stop stop;
    void *u;
    bool failed;
} draft_tokens;
static int on_draft_token(int id, const char *bytes, size_t len, void *user) {
    (void)bytes; (void)len;
    draft_tokens *d = user;
    d->gen[d->n++] = id;
    if (!d->stop) return 0;
    const int r = stop_at(d->tok, d->gen, d->n, d->stop, d->u);
    d->failed = r < 0;
    return r != 0;
}

int skv_eval_generate_draft(const skv_eval_ctx *c, skv_gen_cell *cells, int n, const int *ctx, int n_ctx, const int *q,
                            int n_q, int max_new, skv_eval_stop stop, void *u, int draft) {
    if (!c->pair->slm) return skv_error("generate: drafting needs the SLM");
    if (n_ctx < 1 || n_q < 0 || max_new < 1) return skv_error("generate: bad sizes (context %d, question %d, new %d)", n_ctx, n_q, max_new);
    const int max_ctx = n_ctx + n_q + max_new + 1;
    for (int i = 0; i < n; i++) memset(&cells[i].out, 0, sizeof cells[i].out);
    int *gen = skv_malloc(((size_t)max_new + 1) * sizeof(int), "generated tokens");
    smallkv_session *s = NULL;
    int rc = -1;
    if (!gen) goto done;
    for (int i = 0; i < n; i++) {
        skv_gen_out *o = &cells[i].out;
        double t0 = skv_now();
        if (!(s = skv_eval_session(c, cells[i].pol, cells[i].budget, max_ctx, draft))) {
            skv_error_prefix("%s, draft %d", cells[i].pol->label, draft);
            goto done;
        }
        if (smallkv_prefill(s, ctx, n_ctx)) goto done;
        o->prefill_s = skv_now() - t0;
        /* the question as decode steps, as the batched runner feeds it */
        for (int j = 0; j < n_q; j++)
            if (smallkv_step(s, q[j])) goto done;
        t0 = skv_now();
        draft_tokens d = {.tok = c->pair->llm->tok, .gen = gen, .stop = stop, .u = u};
        if (smallkv_generate(s, max_new, on_draft_token, &d) < 0 || d.failed) goto done;
        o->decode_s = skv_now() - t0;
        o->n_gen = d.n;
        api_session_mem(s, &o->mem);
        smallkv_stats st;
        smallkv_get_stats(s, &st);
        o->spec_passes = st.spec_passes;
        o->spec_drafted = st.spec_drafted;
        o->spec_accepted = st.spec_accepted;
        if (!(o->text = skv_detokenize(c->pair->llm->tok, gen, d.n))) goto done;
        smallkv_session_free(s);
        s = NULL;
    }
    rc = 0;
done:
    if (rc) for (int i = 0; i < n; i++) { free(cells[i].out.text); cells[i].out.text = NULL; }
    smallkv_session_free(s);
    free(gen);
    return rc;
}

int skv_eval_generate(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, const int *ctx, int n_ctx,
                      const int *q, int n_q, int max_new, skv_eval_stop stop, void *u, skv_gen_out *out) {
    skv_gen_cell cell = {.pol = p, .budget = budget};
    int rc = skv_eval_generate_cells(c, &cell, 1, ctx, n_ctx, q, n_q, max_new, stop, u);
    *out = cell.out;
    return rc;
}
