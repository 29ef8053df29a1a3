/* eval_run.c: policy specs, the lock-step teacher-forced fidelity runner and the greedy
 * generation runner of the evaluation harness (see eval_run.h). */
#include "eval_run.h"
#include "tokenizer.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_eval_pol_default(skv_eval_pol *p) {
    memset(p, 0, sizeof *p);
    strcpy(p->policy, "full");
    skv_policy_opts_default(&p->popts);
}

static const char *combine_name(skv_combine c) {
    return c == SKV_COMBINE_MASS ? "mass" : c == SKV_COMBINE_RENORM ? "renorm" : "sum";
}

int skv_eval_pol_parse(const char *spec, skv_eval_pol *out) {
    char buf[256];
    if (!spec || !*spec || strlen(spec) >= sizeof buf) return skv_error("policy spec '%s': empty or too long", spec ? spec : "");
    strcpy(buf, spec);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    if (!tok || strlen(tok) >= sizeof out->policy) return skv_error("policy spec '%s': bad policy name", spec);
    skv_policy *probe = skv_policy_new(tok, &out->popts, 1, 1, 1);
    if (!probe) return skv_error("policy spec '%s': unknown policy '%s' (known: %s)", spec, tok, skv_policy_names());
    skv_policy_free(probe);
    strcpy(out->policy, tok);
    const bool skv = !strcmp(tok, "smallkv");
    while ((tok = strtok_r(NULL, ":", &save)) != NULL) {
        char *eq = strchr(tok, '=');
        const char *val = eq ? eq + 1 : NULL;
        if (eq) *eq = 0;
        char *end = NULL;
        if (!strcmp(tok, "sinks") && val) {
            long x = strtol(val, &end, 10);
            if (*end || x < 0 || x > 4096) return skv_error("policy spec '%s': sinks=%s", spec, val);
            out->popts.sinks = (int)x;
        } else if (!strcmp(tok, "window") && val) {
            long x = strtol(val, &end, 10);
            if (*end || x < 1 || x > 4096) return skv_error("policy spec '%s': window=%s", spec, val);
            out->popts.window = (int)x;
        } else if (!skv) {
            return skv_error("policy spec '%s': modifier '%s' applies to smallkv only", spec, tok);
        } else if (!strcmp(tok, "sum") && !val) out->popts.combine = SKV_COMBINE_SUM;
        else if (!strcmp(tok, "mass") && !val) out->popts.combine = SKV_COMBINE_MASS;
        else if (!strcmp(tok, "renorm") && !val) out->popts.combine = SKV_COMBINE_RENORM;
        else if (!strcmp(tok, "online") && !val) out->online = true;
        else if (!strcmp(tok, "profile") && !val) out->online = false;
        else if (!strcmp(tok, "nosal") && !val) out->popts.no_saliency = true;
        else if (!strcmp(tok, "nomarg") && !val) out->popts.no_marginal = true;
        else if (!strcmp(tok, "adaptive") && !val) out->popts.adaptive_split = true;
        else if (!strcmp(tok, "depth") && val) {
            long x = strtol(val, &end, 10);
            if (*end || x < 0 || x > 4096) return skv_error("policy spec '%s': depth=%s", spec, val);
            out->slm_depth = (int)x;
        } else if (!strcmp(tok, "slmb") && val) {
            double x = strtod(val, &end);
            if (*end || !(x > 0 && x <= 1)) return skv_error("policy spec '%s': slmb=%s is not in (0, 1]", spec, val);
            out->slm_budget = x >= 1 ? 0 : x;
        } else {
            return skv_error("policy spec '%s': unknown modifier '%s%s%s' (smallkv: sum mass renorm profile online "
                             "nosal nomarg adaptive depth=N slmb=F; any: sinks=N window=N)", spec, tok, val ? "=" : "",
                             val ? val : "");
        }
    }
    /* canonical label */
    skv_policy_opts d;
    skv_policy_opts_default(&d);
    int o = snprintf(out->label, sizeof out->label, "%s", out->policy);
    if (skv) {
        o += snprintf(out->label + o, sizeof out->label - o, ":%s:%s", combine_name(out->popts.combine),
                      out->online ? "online" : "profile");
        if (out->popts.no_saliency) o += snprintf(out->label + o, sizeof out->label - o, ":nosal");
        if (out->popts.no_marginal) o += snprintf(out->label + o, sizeof out->label - o, ":nomarg");
        if (out->popts.adaptive_split) o += snprintf(out->label + o, sizeof out->label - o, ":adaptive");
        if (out->slm_depth) o += snprintf(out->label + o, sizeof out->label - o, ":depth=%d", out->slm_depth);
        if (out->slm_budget > 0) o += snprintf(out->label + o, sizeof out->label - o, ":slmb=%g", out->slm_budget);
    }
    if (out->popts.sinks != d.sinks) o += snprintf(out->label + o, sizeof out->label - o, ":sinks=%d", out->popts.sinks);
    if (out->popts.window != d.window) snprintf(out->label + o, sizeof out->label - o, ":window=%d", out->popts.window);
    return 0;
}

skv_session *skv_eval_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx) {
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.policy = p->policy;
    o.popts = p->popts;
    o.budget = strcmp(p->policy, "full") ? budget : 1.0;
    o.kv_f16 = c->kv_f16;
    o.max_ctx = max_ctx;
    if (c->T_max > 0) o.T_max = c->T_max;
    if (!strcmp(p->policy, "smallkv")) {
        if (!c->slm) { skv_error("%s: no SLM given (--slm)", p->label); return NULL; }
        if (!p->online && !c->map) { skv_error("%s: no profile mapping (give --profile or use :online)", p->label); return NULL; }
        o.slm = c->slm;
        o.map = p->online ? NULL : c->map;
        o.online_map = p->online;
        o.slm_layers = p->slm_depth;
        o.slm_budget = p->slm_budget;
    }
    skv_session *s = skv_session_new(c->llm, &o);
    if (!s) skv_error_prefix("%s at budget %g", p->label, budget);
    return s;
}

/* ------------------------------------------------------------------ fidelity */

static void online_agreement(skv_fid_cell *cell, const skv_session *s, const int *map, const int *map_full) {
    cell->heads = 0;
    if (strcmp(cell->pol->policy, "smallkv") || !cell->pol->online || !map) return;
    const int *om = skv_policy_smallkv_map(s->pol);
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
    const int V = c->llm->cfg.vocab;
    int rc = -1;
    skv_session **ss = skv_calloc((size_t)n_cells, sizeof *ss, "fidelity sessions");
    skv_eval_pol full;
    skv_eval_pol_default(&full);
    strcpy(full.label, "full");
    skv_session *ref = skv_eval_session(c, &full, 1.0, N);
    if (!ss || !ref) goto done;
    /* the reference: a full-cache session, stepped in lock step with the cells */
    if (skv_session_prefill(ref, tokens, P)) { skv_error_prefix("full-cache reference: prefill"); goto done; }
    for (int i = 0; i < n_cells; i++) {
        memset(&cells[i].acc, 0, sizeof cells[i].acc);
        cells[i].seconds = 0;
        cells[i].heads = 0;
        double t0 = skv_now();
        if (!(ss[i] = skv_eval_session(c, cells[i].pol, cells[i].budget, N))) goto done;
        if (skv_session_prefill(ss[i], tokens, P)) { skv_error_prefix("%s at budget %g: prefill", cells[i].pol->label, cells[i].budget); goto done; }
        cells[i].seconds += skv_now() - t0;
    }
    const long total = (long)(N - 1 - P) * (n_cells + 1);
    long done_steps = 0;
    for (int pos = P; pos < N - 1; pos++) {
        if (skv_session_step(ref, tokens[pos])) { skv_error_prefix("full-cache reference: step %d", pos); goto done; }
        const float *rl = skv_session_logits(ref);
        done_steps++;
        for (int i = 0; i < n_cells; i++) {
            double t0 = skv_now();
            if (skv_session_step(ss[i], tokens[pos])) { skv_error_prefix("%s at budget %g: step %d", cells[i].pol->label, cells[i].budget, pos); goto done; }
            cells[i].seconds += skv_now() - t0;
            skv_step_cmp cmp;
            skv_compare_logits(rl, skv_session_logits(ss[i]), V, tokens[pos + 1], &cmp);
            if (skv_fid_add(&cells[i].acc, &cmp)) goto done;
            done_steps++;
        }
        if (progress) progress(u, done_steps, total);
    }
    for (int i = 0; i < n_cells; i++) {
        skv_session_mem_report(ss[i], &cells[i].mem);
        cells[i].restores = ss[i]->restores;
        online_agreement(&cells[i], ss[i], c->map, map_full);
    }
    rc = 0;
done:
    if (ss) for (int i = 0; i < n_cells; i++) skv_session_free(ss[i]);
    free(ss);
    skv_session_free(ref);
    return rc;
}

/* ------------------------------------------------------------------ generation */

int skv_eval_generate(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, const int *ctx, int n_ctx,
                      const int *q, int n_q, int max_new, skv_eval_stop stop, void *u, skv_gen_out *out) {
    memset(out, 0, sizeof *out);
    const int V = c->llm->cfg.vocab;
    const skv_tokenizer *tok = c->llm->tok;
    if (!tok) return skv_error("generate: the LLM has no tokenizer");
    int *gen = skv_malloc(((size_t)max_new + 1) * sizeof(int), "generated tokens");
    if (!gen) return -1;
    skv_session *s = skv_eval_session(c, p, budget, n_ctx + n_q + max_new + 1);
    int rc = -1;
    if (!s) goto done;
    double t0 = skv_now();
    if (skv_session_prefill(s, ctx, n_ctx)) goto done;
    out->prefill_s = skv_now() - t0;
    t0 = skv_now();
    for (int i = 0; i < n_q; i++)
        if (skv_session_step(s, q[i])) goto done;
    int n = 0;
    while (n < max_new) {
        int next = skv_argmax(skv_session_logits(s), V);
        if (skv_tok_is_stop(tok, next)) break;
        gen[n++] = next;
        if (stop) {
            char *text = skv_detokenize(tok, gen, n);
            if (!text) goto done;
            bool st = stop(text, u);
            free(text);
            if (st) break;
        }
        if (n < max_new && skv_session_step(s, next)) goto done;
    }
    out->decode_s = skv_now() - t0;
    out->n_gen = n;
    skv_session_mem_report(s, &out->mem);
    if (!(out->text = skv_detokenize(tok, gen, n))) goto done;
    rc = 0;
done:
    skv_session_free(s);
    free(gen);
    return rc;
}
