/* eval_fidelity.c: the teacher-forced tasks of `smallkv eval`: fidelity (KL / top-1 /
 * perplexity of every cell against the full cache), calibration (profile vs online mapping) and
 * depth (SmallKV at several SLM depths, the early-stop choice written into a profile). */
#include "runtime/cli/eval_cfg.h"
#include "runtime/cli/cli.h"
#include "eval/data.h"
#include "calibrate/mapping.h"
#include "common/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* ------------------------------------------------------------------ depth */

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* SmallKV's fidelity at several SLM depths, each with the profile's mapping cut to that
 * depth; then the table, the choice and (--write-profile) the profile with both. */
int eval_run_depth(eval_cfg *c) {
    if (!c->prof || !c->slm) { fprintf(stderr, "smallkv: eval depth needs --slm and --profile\n"); return CLI_USAGE; }
    skv_profile *pr = c->prof;
    const int l = pr->slm.n_layer, h = pr->slm.n_head;
    int depths[MAXL], nd = 0;
    if (c->slm_depths) {
        double v[MAXL];
        int n = eval_split_num(c->slm_depths, v, MAXL, 1, l);
        if (n <= 0) { fprintf(stderr, "smallkv: bad --slm-depths (SLM layers, 1..%d)\n", l); return CLI_USAGE; }
        for (int i = 0; i < n; i++) depths[nd++] = (int)v[i];
    } else {
        for (int d = 4; d < l; d += 4) depths[nd++] = d;
        depths[nd++] = pr->depth;
    }
    depths[nd++] = l;   /* the reference: every layer */
    qsort(depths, (size_t)nd, sizeof *depths, cmp_int);
    int u = 0;
    for (int i = 0; i < nd; i++) if (!u || depths[u - 1] != depths[i]) depths[u++] = depths[i];
    nd = u;
    /* the smallkv spec to vary: the first smallkv in --policies, else the default */
    char base[160] = "smallkv";
    for (int i = 0; i < c->n_pols; i++)
        if (!strncmp(c->pol_specs[i], "smallkv", 7)) {
            snprintf(base, sizeof base, "%s", c->pol_specs[i]);
            if (c->pol_n_budgets[i] > 0) {   /* smallkv@B...: its budgets are every depth's */
                c->n_budgets = c->pol_n_budgets[i];
                memcpy(c->budgets, c->pol_budgets[i], sizeof c->budgets);
            }
            break;
        }
    memset(c->pol_n_budgets, 0, sizeof c->pol_n_budgets);
    int32_t *maps = skv_malloc((size_t)nd * pr->n_llm * sizeof *maps, "depth maps");
    if (!maps) return cli_fail(NULL);
    const float *S = skv_profile_sim(pr, pr->metric);
    for (int i = 0; i < c->n_pols; i++) free(c->pol_specs[i]);
    c->n_pols = 0;
    for (int i = 0; i < nd; i++) {
        char spec[256];
        snprintf(spec, sizeof spec, "%s:depth=%d", base, depths[i]);
        if (skv_eval_pol_parse(spec, c->defaults, &c->pols[i])) { free(maps); return cli_fail(NULL); }
        skv_map_argmax(S, pr->n_llm, pr->n_slm, depths[i] * h, maps + (size_t)i * pr->n_llm);
        c->pols[i].map = maps + (size_t)i * pr->n_llm;
        c->pol_specs[i] = skv_strdup(spec);
        c->n_pols++;
    }
    int rc = eval_run_fidelity(c, false);
    if (rc != CLI_OK) { free(maps); return rc; }
    /* the table: means over the units at the first budget */
    const double b = c->budgets[0];
    skv_profile_depth_evidence ev;
    memset(&ev, 0, sizeof ev);
    ev.budget = b; ev.max_kl_rise = c->max_kl_rise; ev.tokens = c->tokens; ev.prefill = c->prefill;
    ev.units = c->n_corpora * c->limit;
    printf("SmallKV by SLM depth (budget %g, %d document%s of %d tokens, %d prefilled; %s):\n", b, ev.units,
           ev.units > 1 ? "s" : "", c->tokens, c->prefill, c->prof->path ? c->prof->path : "profile");
    printf("  depth   KL mean   top-1   SLM ms/step   step ms\n");
    for (int i = 0; i < nd && ev.n < SKV_DEPTH_ROWS_MAX; i++) {
        double kl = 0, top1 = 0, slm = 0, step = 0;
        int n = 0, timed = 0;
        for (int ci = 0; ci < c->n_corpora; ci++)
            for (int d = 0; d < c->limit; d++) {
                char unit[128], key[512];
                snprintf(unit, sizeof unit, "%s#%d,N=%d,P=%d", c->corpora[ci], d, c->tokens, c->prefill);
                eval_make_key(c, unit, &c->pols[i], b, key, sizeof key);
                const cJSON *r = skv_store_find(c->store, key), *m = r ? cJSON_GetObjectItemCaseSensitive(r, "metrics") : NULL;
                if (!m) continue;
                double steps = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "steps"));
                kl += cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "kl_mean"));
                top1 += cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "top1"));
                const cJSON *ss = cJSON_GetObjectItemCaseSensitive(r, "slm_seconds"), *sp = cJSON_GetObjectItemCaseSensitive(r, "seconds_per_step");
                if (cJSON_IsNumber(ss) && cJSON_IsNumber(sp) && steps > 0) {
                    slm += 1e3 * ss->valuedouble / steps;
                    step += 1e3 * sp->valuedouble;
                    timed++;
                }
                n++;
            }
        if (n == 0) continue;
        skv_depth_row *row = &ev.rows[ev.n++];
        row->depth = depths[i];
        row->kl_mean = kl / n;
        row->top1 = top1 / n;
        row->slm_ms = timed ? slm / timed : -1;
        printf("  %5d  %8.4f  %6.3f  ", row->depth, row->kl_mean, row->top1);
        if (timed) printf("%11.2f  %8.2f\n", row->slm_ms, step / timed); else printf("%11s  %8s\n", "-", "-");
    }
    free(maps);
    if (ev.n == 0 || ev.rows[ev.n - 1].depth != l) { fprintf(stderr, "smallkv: eval depth: no records for the deepest cell\n"); return CLI_ERR; }
    const double ref = ev.rows[ev.n - 1].kl_mean;
    ev.chosen = l;
    for (int i = 0; i < ev.n; i++)
        if (ev.rows[i].kl_mean <= ref * (1 + c->max_kl_rise)) { ev.chosen = ev.rows[i].depth; break; }
    printf("chosen depth: %d (smallest with KL <= %.4f = (1 + %g) x KL at all %d layers; the profile says %d)\n",
           ev.chosen, ref * (1 + c->max_kl_rise), c->max_kl_rise, l, pr->depth);
    if (c->write_profile) {
        if (skv_profile_set_depth(pr, ev.chosen)) return cli_fail(NULL);
        pr->depth_ev = ev;
        if (skv_profile_write(pr, c->write_profile)) return cli_fail(NULL);
        printf("wrote %s (depth %d, with the table above)\n", c->write_profile, ev.chosen);
    }
    return CLI_OK;
}

/* ------------------------------------------------------------------ fidelity / calibration */

int eval_run_fidelity(eval_cfg *c, bool calibration) {
    /* cells: the grid, or for calibration smallkv profile vs online at each budget */
    skv_eval_pol cal[2];
    const skv_eval_pol *pl[MAXL];
    int npl = 0;
    if (calibration) {
        if (!c->prof) { fprintf(stderr, "smallkv: eval calibration needs --profile\n"); return CLI_USAGE; }
        for (int k = 0; k < 2; k++) {
            if (skv_eval_pol_parse(k ? "smallkv:online" : "smallkv:profile", c->defaults, &cal[k])) return cli_fail(NULL);
            pl[npl++] = &cal[k];
        }
    } else {
        for (int i = 0; i < c->n_pols; i++) pl[npl++] = &c->pols[i];
    }
    const int steps = c->tokens - 1 - c->prefill;
    if (steps < 1) { fprintf(stderr, "smallkv: --tokens must exceed --prefill + 1\n"); return CLI_USAGE; }
    /* plan */
    int n_units = c->n_corpora * c->limit;
    c->work_total = 0;
    for (int u = 0; u < n_units; u++) c->work_total += steps;   /* reference */
    const int ncell = eval_n_cells(c, pl, npl);
    c->work_total *= 1 + ncell;
    for (int ci = 0; ci < c->n_corpora; ci++) {
        size_t len;
        char *text = skv_eval_corpus(c->data_dir, c->corpora[ci], &len);
        if (!text) return cli_fail(NULL);
        for (int d = 0; d < c->limit; d++) {
            char unit[128];
            snprintf(unit, sizeof unit, "%s#%d,N=%d,P=%d", c->corpora[ci], d, c->tokens, c->prefill);
            if (!eval_take_unit(c, unit, pl, npl, (double)steps * (1 + ncell))) continue;
            skv_fid_cell cells[MAXL * MAXL / 4];
            char keys[MAXL * MAXL / 4][512];
            int n = 0;
            for (int p = 0; p < npl; p++) {
                const double *bl;
                const int nb = eval_pol_budgets(c, pl[p], &bl);
                for (int b = 0; b < nb; b++) {
                    if (n == (int)(sizeof cells / sizeof *cells)) break;
                    eval_make_key(c, unit, pl[p], bl[b], keys[n], sizeof keys[n]);
                    if (eval_have(c, keys[n])) continue;
                    memset(&cells[n], 0, sizeof cells[n]);
                    cells[n].pol = pl[p];
                    cells[n].budget = bl[b];
                    n++;
                }
            }
            if (!n) { eval_skip_work(c, (double)steps * (1 + ncell)); continue; }
            int *toks = NULL;
            if (skv_eval_document(c->llm->tok, text, len, c->tokens, d, &toks) < 0) { free(text); return cli_fail(c->corpora[ci]); }
            c->unit_name = unit;
            c->unit_work = (double)steps * (1 + n);
            const double t_unit = skv_now();
            int rc = skv_eval_fidelity(&c->ctx, toks, c->tokens, c->prefill, cells, n,
                                       c->prof ? c->prof->map_full : NULL, eval_fid_progress, c);
            free(toks);
            const double unit_s = skv_now() - t_unit;
            if (rc) { free(text); for (int i = 0; i < n; i++) skv_fid_free(&cells[i].acc); return cli_fail(unit); }
            c->work_done += (double)steps * (1 + ncell);
            eval_show_progress(c, 0);
            for (int i = 0; i < n; i++) {
                skv_fid_summary s;
                skv_fid_summarize(&cells[i].acc, &s);
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddStringToObject(uj, "corpus", c->corpora[ci]);
                cJSON_AddNumberToObject(uj, "doc", d);
                cJSON_AddNumberToObject(uj, "tokens", c->tokens);
                cJSON_AddNumberToObject(uj, "prefill", c->prefill);
                cJSON *r = eval_base_record(c, keys[i], cells[i].pol, cells[i].budget, uj);
                cJSON *m = cJSON_AddObjectToObject(r, "metrics");
                cJSON_AddNumberToObject(m, "steps", s.steps);
                cJSON_AddNumberToObject(m, "kl_mean", s.kl_mean);
                cJSON_AddNumberToObject(m, "kl_p95", s.kl_p95);
                cJSON_AddNumberToObject(m, "kl_max", s.kl_max);
                cJSON_AddNumberToObject(m, "top1", s.top1);
                cJSON_AddNumberToObject(m, "ppl_full", s.ppl_ref);
                cJSON_AddNumberToObject(m, "ppl", s.ppl_pol);
                cJSON_AddNumberToObject(m, "ppl_ratio", s.ppl_ratio);
                cJSON_AddNumberToObject(m, "nll_full_mean", log(s.ppl_ref));
                cJSON_AddNumberToObject(m, "nll_mean", log(s.ppl_pol));
                cJSON_AddNumberToObject(m, "restores", cells[i].restores);
                if (cells[i].heads) {
                    cJSON_AddNumberToObject(m, "map_agreement", (double)cells[i].agree_heads / cells[i].heads);
                    cJSON_AddNumberToObject(m, "map_agreement_full", (double)cells[i].agree_full / cells[i].heads);
                    cJSON_AddNumberToObject(m, "heads", cells[i].heads);
                }
                if (calibration && c->prof) {
                    cJSON_AddNumberToObject(m, "profile_mean_matched_jaccard", skv_profile_mean_matched(c->prof, SKV_METRIC_JACCARD));
                    cJSON_AddNumberToObject(m, "profile_mean_matched_cosine", skv_profile_mean_matched(c->prof, SKV_METRIC_COSINE));
                }
                eval_add_mem(r, &cells[i].mem);
                cJSON_AddBoolToObject(r, "shared_prefill", cells[i].shared_prefill);
                cJSON_AddNumberToObject(r, "prefill_seconds", cells[i].prefill_s);
                cJSON_AddNumberToObject(r, "batch", c->ctx.batch > 1 ? c->ctx.batch : 1);
                eval_add_unit_time(r, unit_s, n);
                if (cells[i].timed) {   /* decode time of this cell alone (--batch 1) */
                    cJSON_AddNumberToObject(r, "seconds", cells[i].seconds);
                    cJSON_AddNumberToObject(r, "seconds_per_step", cells[i].seconds / (s.steps ? s.steps : 1));
                    if (eval_runs_slm(cells[i].pol)) cJSON_AddNumberToObject(r, "slm_seconds", cells[i].slm_s);
                }
                skv_fid_free(&cells[i].acc);
                if (skv_store_add(c->store, r)) { free(text); return cli_fail(NULL); }
            }
            if (isatty(2)) fputc('\n', stderr);
        }
        free(text);
    }
    return CLI_OK;
}
