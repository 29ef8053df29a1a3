/* eval_report.c: `smallkv eval report`: Markdown tables and SVG plots from results files.
 * Units are aggregated into cells (task, corpus/length, policy, budget):
 *   fidelity / calibration  steps-weighted mean KL, top-1 and NLL (ppl = exp(mean NLL)),
 *                           mean over documents of the per-document p95 KL;
 *   passkey / gsm8k / bbh   accuracy = correct / units (a passkey cell: every length, depth
 *                           and variant; gsm8k / bbh padded with --pad-to: a group per pad);
 *   niah / longbench        mean score over units (niah: recall of the asked values, a group
 *                           per kind and length, depths together; longbench: ROUGE-L F, a
 *                           group per subset and --max-length).
 * With 95 % intervals (bootstrap.h): percentile bootstrap (2000 replicates, fixed seed) of the
 * mean KL over documents (steps-weighted) and of an accuracy's difference from the full
 * cache's on the same units (paired); Wilson's interval of an accuracy.
 * Every section lists the commands and commits that produced its records. SVGs are written
 * next to the Markdown file: <base>-fidelity-<corpus>.svg, <base>-passkey.svg. */
#include "runtime/cli/cli.h"
#include "eval/store.h"
#include "eval/bootstrap.h"
#include "common/util.h"
#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *REPORT_USAGE =
    "usage: smallkv eval report RESULTS.json [MORE.json ...] -o REPORT.md\n"
    "Aggregate eval records into Markdown tables, with SVG plots next to REPORT.md.\n";

typedef struct {
    char task[24], group[192], policy[128];
    double budget;
    double steps, kl, p95, top1, nll, nll_full, agree, agree_full, hot, cold, slmc, sps, slm_sps, score;
    int docs, n, correct, n_agree, n_sps;
    /* per unit, for the intervals: its key (the record's unit as JSON), value and weight */
    char **ukey; double *ux, *uw; int un, ucap;
} cell;

typedef struct { cell *c; int n, cap; } cells;

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}
/* A group's name as a file-name part: letters, digits, '-' and '.' kept, the rest '_'. */
static void group_file_name(char *out, size_t n, const char *group) {
    size_t i = 0;
    for (; group[i] && i + 1 < n; i++) {
        char ch = group[i];
        out[i] = (isalnum((unsigned char)ch) || ch == '-' || ch == '.') ? ch : '_';
    }
    out[i] = 0;
}
static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static cell *get(cells *cs, const char *task, const char *group, const char *policy, double budget) {
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->c[i].task, task) && !strcmp(cs->c[i].group, group) && !strcmp(cs->c[i].policy, policy) &&
            fabs(cs->c[i].budget - budget) < 1e-9)
            return &cs->c[i];
    if (cs->n == cs->cap) {
        int nc = cs->cap ? cs->cap * 2 : 64;
        cell *x = realloc(cs->c, (size_t)nc * sizeof *x);
        if (!x) return NULL;
        cs->c = x; cs->cap = nc;
    }
    cell *c = &cs->c[cs->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->task, sizeof c->task, "%s", task);
    snprintf(c->group, sizeof c->group, "%s", group);
    snprintf(c->policy, sizeof c->policy, "%s", policy);
    c->budget = budget;
    return c;
}

static int add_unit(cell *c, const cJSON *unit, double x, double w) {
    if (c->un == c->ucap) {
        int nc = c->ucap ? c->ucap * 2 : 16;
        char **k = realloc(c->ukey, (size_t)nc * sizeof *k);
        if (k) c->ukey = k;
        double *a = realloc(c->ux, (size_t)nc * sizeof *a);
        if (a) c->ux = a;
        double *b = realloc(c->uw, (size_t)nc * sizeof *b);
        if (b) c->uw = b;
        if (!k || !a || !b) return skv_error("report: out of memory");
        c->ucap = nc;
    }
    char *key = cJSON_PrintUnformatted(unit);
    if (!key) return skv_error("report: out of memory");
    c->ukey[c->un] = key;
    c->ux[c->un] = x;
    c->uw[c->un] = w;
    c->un++;
    return 0;
}

static void cells_free(cells *cs) {
    for (int i = 0; i < cs->n; i++) {
        for (int j = 0; j < cs->c[i].un; j++) cJSON_free(cs->c[i].ukey[j]);
        free(cs->c[i].ukey); free(cs->c[i].ux); free(cs->c[i].uw);
    }
    free(cs->c);
}

#define CI_REPS 2000
#define CI_SEED 0x5EEDULL

/* the tasks scored by a mean score in [0, 1] rather than an accuracy */
static bool scored_task(const char *task) { return !strcmp(task, "niah") || !strcmp(task, "longbench"); }

/* "lo - hi" of a cell's mean KL over its documents, or "-" with fewer than 2 */
static void kl_ci_str(char *buf, size_t n, const cell *c) {
    double lo, hi;
    if (c->un < 2 || skv_bootstrap_ci(c->ux, c->uw, c->un, CI_REPS, 0.05, CI_SEED, &lo, &hi)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.4f - %.4f", lo, hi);
}

/* the accuracy difference from the reference cell on the units both have: "+d [lo, hi]"
 * in percentage points, paired bootstrap; "-" without a reference or shared units */
static void diff_str(char *buf, size_t n, const cell *c, const cell *ref) {
    snprintf(buf, n, "-");
    if (!ref || ref == c) return;
    double *d = malloc((size_t)(c->un ? c->un : 1) * sizeof *d);
    if (!d) return;
    int m = 0;
    for (int i = 0; i < c->un; i++)
        for (int j = 0; j < ref->un; j++)
            if (!strcmp(c->ukey[i], ref->ukey[j])) { d[m++] = c->ux[i] - ref->ux[j]; break; }
    double lo, hi, mean = 0;
    for (int i = 0; i < m; i++) mean += d[i];
    if (m >= 2 && !skv_bootstrap_ci(d, NULL, m, CI_REPS, 0.05, CI_SEED, &lo, &hi))
        snprintf(buf, n, "%+.1f [%+.1f, %+.1f]%s", 100 * mean / m, 100 * lo, 100 * hi,
                 lo <= 0 && hi >= 0 ? " inside" : "");
    free(d);
}

/* the full cache's cell of the same task and group (the reference of the differences) */
static const cell *full_of(const cells *cs, const cell *c) {
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->c[i].task, c->task) && !strcmp(cs->c[i].group, c->group) && !strcmp(cs->c[i].policy, "full"))
            return &cs->c[i];
    return NULL;
}

static int cmp_cell(const void *a, const void *b) {
    const cell *x = a, *y = b;
    int r = strcmp(x->task, y->task);
    if (!r) r = strcmp(x->group, y->group);
    if (!r) r = strcmp(x->policy, y->policy);
    if (!r) r = (x->budget > y->budget) - (x->budget < y->budget);
    return r;
}

/* distinct "command @ commit" lines of a task's records, each with its records' count and
 * machine time (the sum of each record's share of its unit's wall time, where recorded) */
static void provenance(FILE *f, const skv_eval_store *s, const char *task) {
    char seen[32][2300];
    int n = 0, count[32] = {0}, timed[32] = {0};
    double secs[32] = {0};
    const cJSON *r;
    cJSON_ArrayForEach(r, s->records) {
        if (strcmp(jstr(r, "task"), task)) continue;
        char line[2300];
        snprintf(line, sizeof line, "`%.2048s` (commit %.40s", jstr(r, "command"), jstr(r, "git"));
        int k = 0;
        while (k < n && strcmp(seen[k], line)) k++;
        if (k == n) {
            if (n == 32) continue;
            strcpy(seen[n++], line);
        }
        count[k]++;
        const double us = jnum(r, "unit_seconds"), uc = jnum(r, "unit_cells");
        if (us > 0 && uc > 0) {
            secs[k] += us / uc;
            timed[k]++;
        }
    }
    fprintf(f, "Produced by:\n\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "- %s; %d record%s", seen[i], count[i], count[i] == 1 ? "" : "s");
        if (timed[i])
            fprintf(f, ", machine time %.*f %s%s", secs[i] < 120 ? 1 : 0, secs[i] < 120 ? secs[i] : secs[i] / 60,
                    secs[i] < 120 ? "s" : "min", timed[i] < count[i] ? " for those timed" : "");
        fprintf(f, ")\n");
    }
    fprintf(f, "\n");
}

static const char *COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                               "#7f7f7f", "#bcbd22", "#17becf"};

/* Mean KL vs budget, one line per policy, log-log axes. */
/* The group of a record (one table each): the LLM first (a group never mixes models), then
 * the task's unit kind, the prompt form and the prefill arithmetic. */
static void record_group(const cJSON *r, char *group, size_t n) {
    const char *task = jstr(r, "task");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "unit");
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(r, "models");
    const char *llm = jstr(cJSON_GetObjectItemCaseSensitive(models, "llm"), "name");
    group[0] = 0;
    if (!strcmp(task, "fidelity") || !strcmp(task, "calibration"))
        snprintf(group, n, "%s, %s N=%d P=%d", llm, jstr(u, "corpus"), (int)jnum(u, "tokens"), (int)jnum(u, "prefill"));
    else if (!strcmp(task, "passkey")) snprintf(group, n, "%s", llm);
    else if (!strcmp(task, "niah") && !strcmp(jstr(u, "kind"), "single"))
        snprintf(group, n, "%s, single, %d tokens", llm, (int)jnum(u, "length"));
    else if (!strcmp(task, "niah"))
        snprintf(group, n, "%s, %s x%d, %d tokens", llm, jstr(u, "kind"), (int)jnum(u, "needles"), (int)jnum(u, "length"));
    else if (!strcmp(task, "longbench"))
        snprintf(group, n, "%s, %s, max length %d", llm, jstr(u, "subset"), (int)jnum(u, "max_length"));
    else if (!isnan(jnum(u, "pad_to")))   /* gsm8k / bbh --pad-to: a group of its own */
        snprintf(group, n, "%s, %s, padded to %d tokens", llm, jstr(u, "subset"), (int)jnum(u, "pad_to"));
    else snprintf(group, n, "%s, %s", llm, jstr(u, "subset"));
    /* another prompt is another group (the full cache runs once per prompt form): the
     * chat template, the few-shot turns */
    const cJSON *chat = cJSON_GetObjectItemCaseSensitive(r, "chat_template");
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(r, "fewshot_turns");
    /* and int8 prefill is other arithmetic than the float GEMM of earlier records */
    const bool int8 = !strcmp(jstr(cJSON_GetObjectItemCaseSensitive(r, "settings"), "gemm"), "int8");
    const size_t gl = strlen(group);
    snprintf(group + gl, n - gl, "%s%s", cJSON_IsTrue(turns) ? ", chat template, few-shot turns" :
             cJSON_IsTrue(chat) ? ", chat template" : "", int8 ? ", int8 prefill" : "");
}

static int svg_fidelity(const char *path, const cells *cs, const char *task, const char *group) {
    double bmin = 1, bmax = 1, kmin = 1e30, kmax = 0;
    for (int i = 0; i < cs->n; i++) {
        const cell *c = &cs->c[i];
        if (strcmp(c->task, task) || strcmp(c->group, group) || c->steps <= 0) continue;
        double k = c->kl / c->steps;
        if (c->budget < bmin) bmin = c->budget;
        if (k > 0 && k < kmin) kmin = k;
        if (k > kmax) kmax = k;
    }
    if (kmax <= 0) return 0;
    if (kmin > kmax / 10) kmin = kmax / 10;
    const double W = 640, H = 400, x0 = 70, y0 = 30, pw = 400, ph = 320;
    double lb0 = log10(bmin) - 0.1, lb1 = log10(bmax) + 0.05, lk0 = floor(log10(kmin)), lk1 = ceil(log10(kmax));
    FILE *f = fopen(path, "w");
    if (!f) return skv_error("%s: cannot write", path);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%g\" y=\"18\">%s %s: mean KL(full || policy) vs budget</text>\n", x0, task, group);
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n", x0, y0, pw, ph);
    for (double e = lk0; e <= lk1; e++) {
        double y = y0 + ph - (e - lk0) / (lk1 - lk0 > 0 ? lk1 - lk0 : 1) * ph;
        fprintf(f, "<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#ddd\"/><text x=\"%g\" y=\"%g\" text-anchor=\"end\">1e%d</text>\n",
                x0, x0 + pw, y, y, x0 - 4, y + 4, (int)e);
    }
    double ticks[] = {0.05, 0.1, 0.2, 0.4, 1.0};
    for (int t = 0; t < 5; t++) {
        if (ticks[t] < bmin * 0.99) continue;
        double x = x0 + (log10(ticks[t]) - lb0) / (lb1 - lb0) * pw;
        fprintf(f, "<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#ddd\"/><text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%g</text>\n",
                x, x, y0, y0 + ph, x, y0 + ph + 16, ticks[t]);
    }
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">budget (fraction of the full cache)</text>\n", x0 + pw / 2, y0 + ph + 34);
    int pi = 0;
    for (int i = 0; i < cs->n; i++) {
        const cell *c = &cs->c[i];
        if (strcmp(c->task, task) || strcmp(c->group, group)) continue;
        if (i > 0 && !strcmp(cs->c[i - 1].task, task) && !strcmp(cs->c[i - 1].group, group) && !strcmp(cs->c[i - 1].policy, c->policy))
            continue;   /* first cell of each policy (cells sorted by budget) */
        const char *col = COLORS[pi % 10];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int j = i; j < cs->n && !strcmp(cs->c[j].policy, c->policy) && !strcmp(cs->c[j].group, group); j++) {
            double k = cs->c[j].kl / cs->c[j].steps;
            if (k < pow(10, lk0)) k = pow(10, lk0);
            fprintf(f, "%g,%g ", x0 + (log10(cs->c[j].budget) - lb0) / (lb1 - lb0) * pw,
                    y0 + ph - (log10(k) - lk0) / (lk1 - lk0 > 0 ? lk1 - lk0 : 1) * ph);
        }
        fprintf(f, "\"/>\n");
        for (int j = i; j < cs->n && !strcmp(cs->c[j].policy, c->policy) && !strcmp(cs->c[j].group, group); j++) {
            double k = cs->c[j].kl / cs->c[j].steps;
            if (k < pow(10, lk0)) k = pow(10, lk0);
            fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"3\" fill=\"%s\"/>\n", x0 + (log10(cs->c[j].budget) - lb0) / (lb1 - lb0) * pw,
                    y0 + ph - (log10(k) - lk0) / (lk1 - lk0 > 0 ? lk1 - lk0 : 1) * ph, col);
        }
        fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"12\" height=\"3\" fill=\"%s\"/><text x=\"%g\" y=\"%g\">%s</text>\n",
                x0 + pw + 12, y0 + 10 + pi * 16.0, col, x0 + pw + 28, y0 + 14 + pi * 16.0, c->policy);
        pi++;
    }
    fprintf(f, "</svg>\n");
    fclose(f);
    return 1;
}

/* Passkey heatmaps: one panel per (policy, budget): rows depth, columns length; a square
 * holds all the units of its (length, depth), its variants included: green all found, red
 * none, olive some, with "found/units" written in it when there are several. */
static int svg_passkey(const char *path, const skv_eval_store *s, const cells *cs) {
    int lens[16], nl = 0, deps[16], nd = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, s->records) {
        if (strcmp(jstr(r, "task"), "passkey")) continue;
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "unit");
        int L = (int)jnum(u, "length"), D = (int)jnum(u, "depth"), k;
        for (k = 0; k < nl && lens[k] != L; k++) {}
        if (k == nl && nl < 16) lens[nl++] = L;
        for (k = 0; k < nd && deps[k] != D; k++) {}
        if (k == nd && nd < 16) deps[nd++] = D;
    }
    if (!nl) return 0;
    for (int i = 0; i < nl; i++) for (int j = i + 1; j < nl; j++) if (lens[j] < lens[i]) { int t = lens[i]; lens[i] = lens[j]; lens[j] = t; }
    for (int i = 0; i < nd; i++) for (int j = i + 1; j < nd; j++) if (deps[j] < deps[i]) { int t = deps[i]; deps[i] = deps[j]; deps[j] = t; }
    int panels = 0;
    bool models = false;   /* more than one model: the panel titles name theirs */
    const char *first = NULL;
    for (int i = 0; i < cs->n; i++) {
        if (strcmp(cs->c[i].task, "passkey")) continue;
        panels++;
        if (!first) first = cs->c[i].group;
        else if (strcmp(first, cs->c[i].group)) models = true;
    }
    const int cw = 28, chh = 18, pw = nl * cw + 60, ph = nd * chh + 40, cols = 4;
    const int W = cols * pw + 20, H = ((panels + cols - 1) / cols) * ph + 40;
    FILE *f = fopen(path, "w");
    if (!f) return skv_error("%s: cannot write", path);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"10\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"10\" y=\"16\" font-size=\"12\">passkey found/units: rows depth %%, columns context tokens (green all, olive some, red none)</text>\n");
    int p = 0;
    for (int i = 0; i < cs->n; i++) {
        const cell *c = &cs->c[i];
        if (strcmp(c->task, "passkey")) continue;
        int ox = 10 + (p % cols) * pw, oy = 30 + (p / cols) * ph;
        fprintf(f, "<text x=\"%d\" y=\"%d\">%.16s%s%s @ %g</text>\n", ox, oy + 10, models ? c->group : "", models ? ": " : "",
                c->policy, c->budget);
        for (int a = 0; a < nd; a++) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d</text>\n", ox + 36, oy + 26 + a * chh, deps[a]);
            for (int b = 0; b < nl; b++) {
                int n = 0, ok = 0;
                cJSON_ArrayForEach(r, s->records) {
                    if (strcmp(jstr(r, "task"), "passkey") || strcmp(jstr(r, "policy"), c->policy) || fabs(jnum(r, "budget") - c->budget) > 1e-9) continue;
                    /* the panel's group only (its model and prefill arithmetic) */
                    char rg[192];
                    record_group(r, rg, sizeof rg);
                    if (strcmp(rg, c->group)) continue;
                    const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "unit");
                    if ((int)jnum(u, "length") != lens[b] || (int)jnum(u, "depth") != deps[a]) continue;
                    n++;
                    ok += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "metrics"), "correct"));
                }
                const char *col = !n ? "#eee" : ok == n ? "#2ca02c" : ok ? "#bcbd22" : "#d62728";
                fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"white\"/>\n", ox + 40 + b * cw,
                        oy + 14 + a * chh, cw, chh, col);
                if (n > 1)   /* colour alone does not tell 1/3 from 2/3 */
                    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"9\" fill=\"white\">%d/%d</text>\n",
                            ox + 40 + b * cw + cw / 2, oy + 26 + a * chh, ok, n);
            }
        }
        for (int b = 0; b < nl; b++)
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%dK</text>\n", ox + 40 + b * cw + cw / 2, oy + 26 + nd * chh,
                    lens[b] / 1024);
        p++;
    }
    fprintf(f, "</svg>\n");
    fclose(f);
    return 1;
}

static const char *base_name(const char *p) { const char *s = strrchr(p, '/'); return s ? s + 1 : p; }

int cmd_eval_report(int argc, char **argv) {
    const char *out = NULL, *ins[64];
    int nin = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { fputs(REPORT_USAGE, stdout); return CLI_OK; }
        if (!strcmp(argv[i], "-o")) { if (!cli_str(argc, argv, &i, &out)) return cli_usage_error(REPORT_USAGE, NULL); }
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(REPORT_USAGE, "eval report: unknown option '%s'", argv[i]);
        else if (nin < 64) ins[nin++] = argv[i];
    }
    if (!nin || !out) return cli_usage_error(REPORT_USAGE, "eval report: needs RESULTS.json and -o REPORT.md");
    skv_eval_store *all = skv_store_open(NULL);
    if (!all) return cli_fail(NULL);
    for (int i = 0; i < nin; i++) {
        skv_eval_store *s = skv_store_load(ins[i]);
        if (!s || skv_store_merge(all, s)) { skv_store_free(s); skv_store_free(all); return cli_fail(NULL); }
        skv_store_free(s);
    }
    cells cs = {0};
    const cJSON *r;
    cJSON_ArrayForEach(r, all->records) {
        const char *task = jstr(r, "task");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "unit"), *m = cJSON_GetObjectItemCaseSensitive(r, "metrics");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(r, "memory");
        char group[192];
        record_group(r, group, sizeof group);
        /* another selection is another row, never mixed into one: per attention head, or
         * the budget a share of the prompt (the full cache's records name neither) */
        char pol[128];
        const bool compressed = jnum(r, "budget") < 1;
        snprintf(pol, sizeof pol, "%s%s%s", jstr(r, "policy"),
                 compressed && !strcmp(jstr(r, "granularity"), "attention_head") ? " (per attention head)" : "",
                 compressed && !strcmp(jstr(r, "budget_base"), "prompt") ? " (budget of the prompt)" : "");
        cell *c = get(&cs, task, group, pol, jnum(r, "budget"));
        if (!c) { skv_store_free(all); cells_free(&cs); return cli_fail("report"); }
        c->n++;
        if (!isnan(jnum(m, "steps"))) {
            double st = jnum(m, "steps");
            c->steps += st; c->docs++;
            c->kl += st * jnum(m, "kl_mean");
            if (add_unit(c, u, jnum(m, "kl_mean"), st)) { skv_store_free(all); cells_free(&cs); return cli_fail(NULL); }
            c->p95 += jnum(m, "kl_p95");
            c->top1 += st * jnum(m, "top1");
            c->nll += st * jnum(m, "nll_mean");
            c->nll_full += st * jnum(m, "nll_full_mean");
            c->hot += jnum(mem, "hot_bytes");
            if (!isnan(jnum(mem, "cold_bytes"))) c->cold += jnum(mem, "cold_bytes");
            if (!isnan(jnum(mem, "slm_cache_bytes"))) c->slmc += jnum(mem, "slm_cache_bytes");
            double sps = jnum(r, "seconds_per_step");   /* only in runs timed cell by cell (--batch 1) */
            if (!isnan(sps)) {
                c->sps += sps;
                c->n_sps++;
                double slm = jnum(r, "slm_seconds");
                if (!isnan(slm)) c->slm_sps += slm / st;
            }
            if (!isnan(jnum(m, "map_agreement"))) { c->agree += jnum(m, "map_agreement"); c->agree_full += jnum(m, "map_agreement_full"); c->n_agree++; }
        } else if (scored_task(task)) {
            const double sc = jnum(m, "score");
            c->score += isnan(sc) ? 0 : sc;
            if (add_unit(c, u, isnan(sc) ? 0 : sc, 1)) { skv_store_free(all); cells_free(&cs); return cli_fail(NULL); }
            double h = jnum(mem, "hot_bytes");
            if (!isnan(h)) c->hot += h;
        } else {
            const int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "correct"));
            c->correct += ok;
            if (add_unit(c, u, ok, 1)) { skv_store_free(all); cells_free(&cs); return cli_fail(NULL); }
            double h = jnum(mem, "hot_bytes");
            if (!isnan(h)) c->hot += h;
        }
    }
    qsort(cs.c, (size_t)cs.n, sizeof *cs.c, cmp_cell);
    FILE *f = fopen(out, "w");
    if (!f) { skv_store_free(all); cells_free(&cs); skv_error("%s: cannot write", out); return cli_fail(NULL); }
    char base[4096];
    snprintf(base, sizeof base, "%s", out);
    char *dot = strrchr(base, '.');
    if (dot && !strchr(dot, '/')) *dot = 0;
    fprintf(f, "<!-- generated by smallkv eval report from %d records -->\n\n", skv_store_count(all));
    fprintf(f, "Intervals: 95 %%. KL: percentile bootstrap (%d replicates) over documents, steps-weighted; "
               "accuracy: Wilson score interval; \"vs full\": accuracy minus the full cache's on the same units in "
               "points, paired bootstrap; \"inside\": that interval holds 0, so this sample does not tell the two "
               "apart.\n\n", CI_REPS);
    const char *tasks[] = {"fidelity", "calibration", "passkey", "gsm8k", "bbh", "niah", "longbench"};
    for (int t = 0; t < 7; t++) {
        int any = 0;
        for (int i = 0; i < cs.n; i++) any |= !strcmp(cs.c[i].task, tasks[t]);
        if (!any) continue;
        fprintf(f, "### %s\n\n", tasks[t]);
        provenance(f, all, tasks[t]);
        const char *last_group = "";
        for (int i = 0; i < cs.n; i++) {
            const cell *c = &cs.c[i];
            if (strcmp(c->task, tasks[t])) continue;
            const bool fid = t < 2;
            if (strcmp(c->group, last_group)) {
                last_group = c->group;
                if (fid) {
                    fprintf(f, "\n**%s** (%s)\n\n", c->group, t == 1 ? "profile vs online mapping" : "teacher-forced");
                    fprintf(f, "| policy | budget | docs | steps | mean KL | KL 95%% CI | p95 KL | top-1 | ppl | ppl / full | hot KiB | "
                               "cold KiB | SLM cache KiB | s/step | SLM share |%s\n", t == 1 ? " map agreement (restricted / full) |" : "");
                    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n", t == 1 ? "---:|" : "");
                    char svg[4400], gname[192];
                    group_file_name(gname, sizeof gname, c->group);
                    snprintf(svg, sizeof svg, "%s-%s-%s.svg", base, tasks[t], gname);
                    int w = svg_fidelity(svg, &cs, tasks[t], c->group);
                    if (w > 0) fprintf(stderr, "wrote %s\n", svg);
                    if (w > 0) {
                        /* table first, plot link after it: remember to print the link below */
                    }
                } else if (scored_task(tasks[t])) {
                    fprintf(f, "\n**%s**\n\n| policy | budget | n | mean %s | 95%% CI | vs full [95%% CI] | hot KiB (mean) |\n"
                               "|---|---:|---:|---:|---:|---:|---:|\n", c->group, t == 5 ? "recall" : "ROUGE-L");
                } else {
                    fprintf(f, "\n**%s**\n\n| policy | budget | n | accuracy | 95%% CI | vs full [95%% CI] | hot KiB (mean) |\n"
                               "|---|---:|---:|---:|---:|---:|---:|\n", c->group);
                }
            }
            if (fid) {
                double st = c->steps > 0 ? c->steps : 1;
                const double nd = c->docs ? c->docs : 1;
                char ci[64];
                kl_ci_str(ci, sizeof ci, c);
                fprintf(f, "| %s | %g | %d | %.0f | %.4f | %s | %.4f | %.1f%% | %.3f | %.4f | %.0f | %.0f | %.0f |", c->policy, c->budget,
                        c->docs, c->steps, c->kl / st, ci, c->p95 / nd, 100 * c->top1 / st, exp(c->nll / st), exp((c->nll - c->nll_full) / st),
                        c->hot / nd / 1024, c->cold / nd / 1024, c->slmc / nd / 1024);
                /* time only from runs that stepped cell by cell; batched runs show - */
                if (c->n_sps) fprintf(f, " %.3f |", c->sps / c->n_sps);
                else fprintf(f, " - |");
                if (c->n_sps && c->slm_sps > 0) fprintf(f, " %.0f%% |", 100 * c->slm_sps / c->sps);
                else fprintf(f, " - |");
                if (t == 1) {
                    if (c->n_agree) fprintf(f, " %.1f%% / %.1f%% |", 100 * c->agree / c->n_agree, 100 * c->agree_full / c->n_agree);
                    else fprintf(f, " - |");
                }
                fprintf(f, "\n");
                if (i + 1 == cs.n || strcmp(cs.c[i + 1].group, c->group) || strcmp(cs.c[i + 1].task, c->task)) {
                    char gname[192];
                    group_file_name(gname, sizeof gname, c->group);
                    fprintf(f, "\n![%s %s](%s-%s-%s.svg)\n", tasks[t], c->group, base_name(base), tasks[t], gname);
                }
            } else if (scored_task(tasks[t])) {
                /* the mean score in points, a percentile bootstrap over units, the paired
                 * difference from the full cache */
                char ci[64], dv[96];
                double lo, hi;
                if (c->un < 2 || skv_bootstrap_ci(c->ux, NULL, c->un, CI_REPS, 0.05, CI_SEED, &lo, &hi)) snprintf(ci, sizeof ci, "-");
                else snprintf(ci, sizeof ci, "%.1f - %.1f", 100 * lo, 100 * hi);
                diff_str(dv, sizeof dv, c, full_of(&cs, c));
                fprintf(f, "| %s | %g | %d | %.1f | %s | %s | %.0f |\n", c->policy, c->budget, c->n, 100.0 * c->score / c->n, ci, dv,
                        c->hot / c->n / 1024);
            } else {
                char ci[64], dv[96];
                double wl, wh;
                skv_wilson_ci(c->correct, c->n, &wl, &wh);
                snprintf(ci, sizeof ci, "%.1f%% - %.1f%%", 100 * wl, 100 * wh);
                diff_str(dv, sizeof dv, c, full_of(&cs, c));
                fprintf(f, "| %s | %g | %d | %.1f%% (%d/%d) | %s | %s | %.0f |\n", c->policy, c->budget, c->n, 100.0 * c->correct / c->n,
                        c->correct, c->n, ci, dv, c->hot / c->n / 1024);
            }
        }
        if (t == 2) {
            char svg[4400];
            snprintf(svg, sizeof svg, "%s-passkey.svg", base);
            if (svg_passkey(svg, all, &cs) > 0) {
                fprintf(stderr, "wrote %s\n", svg);
                fprintf(f, "\n![passkey heatmaps](%s-passkey.svg)\n", base_name(base));
            }
        }
        fprintf(f, "\n");
    }
    fclose(f);
    fprintf(stderr, "wrote %s\n", out);
    skv_store_free(all);
    cells_free(&cs);
    return CLI_OK;
}
