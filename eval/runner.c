/* runner.c: policy specs, the lock-step teacher-forced fidelity runner and the greedy
 * generation runner of the evaluation harness (see runner.h). */
#include "runner.h"
#include "runtime/api/api.h"
#include "runtime/session/sampling.h"
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

/* session options of a cell (policy p at budget) */
static int cell_opts(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx, skv_session_opts *o) {
    if ((p->spec.desc->caps & SKV_POLICY_NEEDS_SLM) && !c->slm) return skv_error("%s: no SLM given (--slm)", p->label);
    /* a cell with a mapping of its own (eval depth) runs to that mapping's deepest layer */
    const int *map = p->map ? p->map : c->map;
    if (skv_session_opts_for(o, &p->spec, p->spec.desc->caps & SKV_POLICY_KEEPS_ALL ? 1.0 : budget, c->slm, map,
                             p->map ? 0 : c->map_depth))
        return skv_error_prefix("%s", p->label);
    o->kv_f16 = c->kv_f16;
    o->budget_prompt = c->budget_prompt;
    o->per_head = c->per_head && !(p->spec.desc->caps & SKV_POLICY_KEEPS_ALL);
    o->max_ctx = max_ctx;
    if (c->T_max > 0) o->T_max = c->T_max;
    return 0;
}

skv_session *skv_eval_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx) {
    skv_session_opts o;
    if (cell_opts(c, p, budget, max_ctx, &o)) return NULL;
    skv_session *s = skv_session_new(c->llm, &o);
    if (!s) skv_error_prefix("%s at budget %g", p->label, budget);
    return s;
}

skv_session *skv_eval_base(const skv_eval_ctx *c, const skv_eval_pol *const *pols, int n, int max_ctx) {
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.prefill_base = true;
    o.kv_f16 = c->kv_f16;
    o.max_ctx = max_ctx;
    if (c->T_max > 0) o.T_max = c->T_max;
    for (int i = 0; i < n && c->slm; i++)
        if (pols[i]->spec.desc->caps & SKV_POLICY_NEEDS_SLM) {
            /* the policy at its defaults prepares the SLM to all layers: serves every depth */
            skv_policy_spec_default(pols[i]->spec.desc->name, &o.pol);
            o.slm = c->slm;
            break;
        }
    skv_session *s = skv_session_new(c->llm, &o);
    if (!s) skv_error_prefix("prefill base");
    return s;
}

skv_session *skv_eval_cell_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx,
                                   skv_session *base, const int *tokens, int n_tok, bool *derived) {
    skv_session_opts o;
    *derived = false;
    if (cell_opts(c, p, budget, max_ctx, &o)) return NULL;
    if (base) {
        skv_session *d = skv_session_derive(base, &o);
        if (d) { *derived = true; return d; }
        /* not derivable (e.g. a compressed SLM cache): a prefill of its own below */
    }
    skv_session *s = skv_session_new(c->llm, &o);
    if (!s) { skv_error_prefix("%s at budget %g", p->label, budget); return NULL; }
    if (skv_session_prefill(s, tokens, n_tok)) {
        skv_error_prefix("%s at budget %g: prefill", p->label, budget);
        skv_session_free(s);
        return NULL;
    }
    return s;
}

/* Step sessions ss[0..n) with one token each: in batches of up to c->batch sessions
 * (skv_session_step_batch), or one by one when c->batch <= 1. */
static int step_all(const skv_eval_ctx *c, skv_session **ss, const int *tokens, int n) {
    const int B = c->batch > 1 ? c->batch : 1;
    for (int i = 0; i < n; i += B) {
        const int m = n - i < B ? n - i : B;
        if (m == 1 ? skv_session_step(ss[i], tokens[i]) : skv_session_step_batch(ss + i, tokens + i, m)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ fidelity */

static void online_agreement(skv_fid_cell *cell, const skv_session *s, const int *map, const int *map_full) {
    cell->heads = 0;
    /* a policy that maps heads without the profile's map */
    if (!(cell->pol->spec.desc->caps & SKV_POLICY_NEEDS_SLM) || skv_policy_spec_needs_map(&cell->pol->spec) || !map) return;
    const int *om = s->pol->head_map ? s->pol->head_map(s->pol) : NULL;
    if (!om) return;
    const int n = s->m->cfg.n_layer * s->m->cfg.n_head;
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
    const int V = c->llm->cfg.vocab;
    int rc = -1;
    /* ss[0] = the full-cache reference, ss[1 + i] = cell i */
    skv_session **ss = skv_calloc((size_t)n_cells + 1, sizeof *ss, "fidelity sessions");
    const skv_eval_pol **pols = skv_calloc((size_t)n_cells, sizeof *pols, "fidelity sessions");
    int *tk = skv_calloc((size_t)n_cells + 1, sizeof *tk, "fidelity sessions");
    skv_session *base = NULL;
    if (!ss || !pols || !tk) goto done;
    for (int i = 0; i < n_cells; i++) pols[i] = cells[i].pol;
    /* one exact prefill, derived into the reference and every cell */
    double t0 = skv_now();
    if (!(base = skv_eval_base(c, pols, n_cells, N))) goto done;
    if (skv_session_prefill(base, tokens, P)) { skv_error_prefix("fidelity: prefill"); goto done; }
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
        skv_session_mem_report(ss[i + 1], &m);
        cells[i].slm_s = -m.slm_seconds;   /* an own prefill's SLM time is in prefill_s */
        cells[i].seconds = 0;
    }
    skv_session_free(base);   /* derived sessions hold what they need (the cold tier is refcounted) */
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
                if (skv_session_step(ss[i], tk[i])) goto step_fail;
                if (i) cells[i - 1].seconds += skv_now() - t0;
            }
        } else if (step_all(c, ss, tk, n_cells + 1)) {
            goto step_fail;
        }
        const float *rl = skv_session_logits(ss[0]);
        for (int i = 0; i < n_cells; i++) {
            skv_step_cmp cmp;
            skv_compare_logits(rl, skv_session_logits(ss[i + 1]), V, tokens[pos + 1], &cmp);
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
        skv_session_mem_report(ss[i + 1], &cells[i].mem);
        cells[i].restores = ss[i + 1]->restores;
        cells[i].timed = timed;
        cells[i].slm_s += cells[i].mem.slm_seconds;
        online_agreement(&cells[i], ss[i + 1], c->map, map_full);
    }
    rc = 0;
done:
    if (ss) for (int i = 0; i <= n_cells; i++) skv_session_free(ss[i]);
    skv_session_free(base);
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
    const int V = c->llm->cfg.vocab;
    const skv_tokenizer *tok = c->llm->tok;
    if (!tok) return skv_error("generate: the LLM has no tokenizer");
    if (n < 1) return 0;
    if (n_ctx < 1 || n_q < 0 || max_new < 1) return skv_error("generate: bad sizes (context %d, question %d, new %d)", n_ctx, n_q, max_new);
    const int max_ctx = n_ctx + n_q + max_new + 1;
    int rc = -1;
    skv_session **ss = skv_calloc((size_t)n, sizeof *ss, "generation sessions");
    skv_session **act = skv_calloc((size_t)n, sizeof *act, "generation sessions");
    const skv_eval_pol **pols = skv_calloc((size_t)n, sizeof *pols, "generation sessions");
    int *gen = skv_malloc((size_t)n * ((size_t)max_new + 1) * sizeof(int), "generated tokens");
    int *tk = skv_calloc((size_t)n, sizeof *tk, "generation sessions"), *idx = skv_calloc((size_t)n, sizeof *idx, "generation");
    bool *live = skv_calloc((size_t)n, sizeof *live, "generation sessions");
    skv_session *base = NULL;
    if (!ss || !act || !pols || !gen || !tk || !idx || !live) goto done;
    for (int i = 0; i < n; i++) { memset(&cells[i].out, 0, sizeof cells[i].out); pols[i] = cells[i].pol; }
    double t0 = skv_now();
    if (!(base = skv_eval_base(c, pols, n, max_ctx))) goto done;
    if (skv_session_prefill(base, ctx, n_ctx)) { skv_error_prefix("generate: prefill"); goto done; }
    const double base_s = skv_now() - t0;
    for (int i = 0; i < n; i++) {
        t0 = skv_now();
        if (!(ss[i] = skv_eval_cell_session(c, cells[i].pol, cells[i].budget, max_ctx, base, ctx, n_ctx, &cells[i].shared_prefill)))
            goto done;
        cells[i].out.prefill_s = skv_now() - t0 + (cells[i].shared_prefill ? base_s : 0);
    }
    skv_session_free(base);
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
            int next = skv_argmax(skv_session_logits(ss[i]), V);
            bool st = skv_tok_is_stop(tok, next);
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
        skv_session_mem_report(ss[i], &o->mem);
        if (!(o->text = skv_detokenize(tok, gen + (size_t)i * (max_new + 1), o->n_gen))) goto done;
    }
    rc = 0;
done:
    if (rc) for (int i = 0; i < n; i++) { free(cells[i].out.text); cells[i].out.text = NULL; }
    if (ss) for (int i = 0; i < n; i++) skv_session_free(ss[i]);
    skv_session_free(base);
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
    if (!c->slm) return skv_error("generate: drafting needs the SLM");
    if (n_ctx < 1 || n_q < 0 || max_new < 1) return skv_error("generate: bad sizes (context %d, question %d, new %d)", n_ctx, n_q, max_new);
    const int max_ctx = n_ctx + n_q + max_new + 1;
    for (int i = 0; i < n; i++) memset(&cells[i].out, 0, sizeof cells[i].out);
    smallkv_pair *p = api_pair_borrow(c->llm, c->slm);
    int *gen = skv_malloc(((size_t)max_new + 1) * sizeof(int), "generated tokens");
    smallkv_session *s = NULL;
    int rc = -1;
    if (!p || !gen) goto done;
    for (int i = 0; i < n; i++) {
        skv_gen_out *o = &cells[i].out;
        double t0 = skv_now();
        skv_session *ss = skv_eval_session(c, cells[i].pol, cells[i].budget, max_ctx);
        if (!ss || !(s = api_session_adopt(p, ss, draft, 0))) {
            skv_error_prefix("%s, draft %d", cells[i].pol->label, draft);
            goto done;
        }
        if (smallkv_prefill(s, ctx, n_ctx)) goto done;
        o->prefill_s = skv_now() - t0;
        /* the question as decode steps, as the batched runner feeds it */
        for (int j = 0; j < n_q; j++)
            if (smallkv_step(s, q[j])) goto done;
        t0 = skv_now();
        draft_tokens d = {.tok = c->llm->tok, .gen = gen, .stop = stop, .u = u};
        if (smallkv_generate(s, max_new, on_draft_token, &d) < 0 || d.failed) goto done;
        o->decode_s = skv_now() - t0;
        o->n_gen = d.n;
        skv_session_mem_report(s->s, &o->mem);
        smallkv_stats st;
        smallkv_get_stats(s, &st);
        o->spec_passes = st.spec_passes;
        o->spec_drafted = st.spec_drafted;
        o->spec_accepted = st.spec_accepted;
        if (!(o->text = skv_detokenize(c->llm->tok, gen, d.n))) goto done;
        smallkv_session_free(s);
        s = NULL;
    }
    rc = 0;
done:
    if (rc) for (int i = 0; i < n; i++) { free(cells[i].out.text); cells[i].out.text = NULL; }
    smallkv_session_free(s);
    smallkv_pair_free(p);
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
