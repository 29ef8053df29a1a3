/* eval_records.c: the bookkeeping of `smallkv eval`: comma lists, the git commit a record
 * names, progress and ETA on stderr, record keys (what makes a cell the same cell on resume),
 * which units are pending and whose they are when sharded, and the JSON record of a cell. */
#include "runtime/cli/eval_cfg.h"
#include "common/util.h"
#include "kernels/cpu/matmul.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* ------------------------------------------------------------------ list parsing */

int eval_split(const char *s, char **out, int max) {
    int n = 0;
    char *dup = skv_strdup(s), *save = NULL;
    if (!dup) return -1;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max) { free(dup); return -1; }
        out[n++] = skv_strdup(t);
    }
    free(dup);
    return n;
}

int eval_split_num(const char *s, double *out, int max, double lo, double hi) {
    char *parts[MAXL];
    int n = eval_split(s, parts, max < MAXL ? max : MAXL);
    if (n <= 0) return -1;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char *end;
        out[i] = strtod(parts[i], &end);
        if (*end || !(out[i] >= lo && out[i] <= hi)) bad = 1;
        free(parts[i]);
    }
    return bad ? -1 : n;
}

void eval_git_commit(char *out, size_t n) {
    const char *env = getenv("SKV_GIT_COMMIT");
    if (env && *env) { snprintf(out, n, "%s", env); return; }
    snprintf(out, n, "unknown");
    FILE *f = popen("git rev-parse --short=12 HEAD 2>/dev/null", "r");
    if (!f) return;
    char buf[64] = {0};
    if (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        if (buf[0]) snprintf(out, n, "%s", buf);
    }
    pclose(f);
    /* what counts is the code: the results/ files an evaluation writes (the previous piece of
     * a `make eval-*` target, say) do not make a tree dirty */
    f = popen("git status --porcelain -uno -- . ':(exclude)results' 2>/dev/null | head -1", "r");
    if (!f) return;
    if (fgets(buf, sizeof buf, f) && buf[0] && strlen(out) + 7 < n) strcat(out, "-dirty");
    pclose(f);
}

/* ------------------------------------------------------------------ progress */

static void fmt_dur(double s, char *b, size_t n) {
    if (!(s >= 0) || s > 1e7) { snprintf(b, n, "?"); return; }
    int h = (int)(s / 3600), m = (int)(s / 60) % 60, sec = (int)s % 60;
    if (h) snprintf(b, n, "%dh%02dm", h, m);
    else snprintf(b, n, "%dm%02ds", m, sec);
}

void eval_show_progress(eval_cfg *c, double unit_frac) {
    if (c->rank > 0) return;   /* sharded: rank 0 shows its own share, tagged */
    const bool tty = isatty(2);
    static double last_line;   /* off a terminal: a line per unit, or per minute within one */
    if (!tty && unit_frac > 0 && skv_now() - last_line < 60) return;
    if (!tty) last_line = skv_now();
    double done = c->work_done + unit_frac * c->unit_work, el = skv_now() - c->t_start;
    const double ran = done - c->work_skipped;   /* the rate comes from work done in this run */
    /* this rank's share: what it took of the units met so far, and a size-th of the rest
     * (pending units go to the ranks in turn) */
    const double rest = c->work_total - c->work_seen;
    const double total = c->work_total - c->work_others - rest * (c->size - 1) / c->size;
    char e1[32], e2[32];
    fmt_dur(el, e1, sizeof e1);
    fmt_dur(ran > 0 ? el / ran * (total - done) : -1, e2, sizeof e2);
    char tag[64] = "";
    if (c->size > 1) snprintf(tag, sizeof tag, " rank 0/%d", c->size);
    fprintf(stderr, "%s[%s%s] %-40.40s %5.1f%%  elapsed %s  ETA %s   %s", tty ? "\r" : "", c->task, tag,
            c->unit_name ? c->unit_name : "", total > 0 ? 100.0 * done / total : 0, e1, e2,
            tty ? "" : "\n");
    fflush(stderr);
}

void eval_skip_work(eval_cfg *c, double work) {
    c->work_done += work;
    c->work_skipped += work;
}

void eval_fid_progress(void *u, long done, long total) {
    eval_cfg *c = u;
    if (done % 16 == 0 || done == total) eval_show_progress(c, total ? (double)done / total : 1);
}

/* ------------------------------------------------------------------ records */

static cJSON *fp_json(const char *path, const skv_model_fp *fp) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "name", fp->name);
    cJSON_AddStringToObject(o, "arch", fp->arch);
    cJSON_AddStringToObject(o, "weight_hash", fp->weight_hash);
    cJSON_AddStringToObject(o, "tokenizer_hash", fp->tokenizer_hash);
    return o;
}

bool eval_runs_slm(const skv_eval_pol *p) { return p->spec.desc->caps & SKV_POLICY_NEEDS_SLM; }
static bool uses_profile(const eval_cfg *c, const skv_eval_pol *p) { return c->prof && skv_policy_spec_needs_map(&p->spec); }
static double cell_budget(const skv_eval_pol *p, double budget) {
    return p->spec.desc->caps & SKV_POLICY_KEEPS_ALL ? 1.0 : budget;
}

/* int8 prefill (the default gemm mode): records from before it ran the float GEMM, so an
 * int8 record names it in its key and a float one keeps the old key */
static bool gemm_int8(const eval_cfg *c) { return !strcmp(c->device, "cpu") && skv_matmul_gemm_mode() == SKV_GEMM_INT8_ALL; }

/* the opt-in bf16 prefill attention, where it runs: named in the key (exact keeps old keys) */
static bool attn_bf16(const eval_cfg *c) { return !strcmp(c->device, "cpu") && !strcmp(smallkv_prefill_attention(), "bf16"); }

void eval_make_key(const eval_cfg *c, const char *unit, const skv_eval_pol *p, double budget, char *key, size_t n) {
    /* the settings' defaults add nothing, so keys of earlier records stay as they were */
    const bool compresses = !(p->spec.desc->caps & SKV_POLICY_KEEPS_ALL);
    const bool on_cpu = !strcmp(c->device, "cpu");
    snprintf(key, n, "%s|%s|%s|b=%g|llm=%.12s|slm=%.12s|prof=%.12s|kv=%s%s%s%s%s%s%s%s", c->task, unit, p->label,
             cell_budget(p, budget), c->fp_llm.weight_hash, eval_runs_slm(p) || c->draft ? c->fp_slm.weight_hash : "-",
             uses_profile(c, p) ? c->prof_sha : "-", c->kv, compresses && c->ctx.budget_prompt ? "|base=prompt" : "",
             c->chat_turns ? "|chat=turns" : c->chat ? "|chat" : "", compresses && c->ctx.per_head ? "|gran=head" : "", on_cpu ? "" : "|dev=",
             on_cpu ? "" : c->device, gemm_int8(c) ? "|gemm=int8" : "", attn_bf16(c) ? "|attn=bf16" : "");
}

/* ------------------------------------------------------------------ units and shards */

int eval_pol_budgets(const eval_cfg *c, const skv_eval_pol *p, const double **b) {
    const long i = p - c->pols;
    const bool own = i >= 0 && i < c->n_pols && c->pol_n_budgets[i] > 0;
    *b = own ? c->pol_budgets[i] : c->budgets;
    const int n = own ? c->pol_n_budgets[i] : c->n_budgets;
    return (p->spec.desc->caps & SKV_POLICY_KEEPS_ALL) && n > 1 ? 1 : n;
}

int eval_n_cells(const eval_cfg *c, const skv_eval_pol *const *pl, int npl) {
    int n = 0;
    for (int p = 0; p < npl; p++) {
        const double *bl;
        n += eval_pol_budgets(c, pl[p], &bl);
    }
    return n;
}

int eval_split_pol_budgets(char *s, double *out, int max) {
    char *at = strchr(s, '@');
    if (!at) return 0;
    *at = 0;
    char *list = at + 1;
    const size_t n = strlen(list);
    /* every '/' between two budgets (the comma list's parser would skip an empty one) */
    if (!n || list[0] == '/' || list[n - 1] == '/' || strstr(list, "//")) return -1;
    for (char *t = list; *t; t++)
        if (*t == '/') *t = ',';
    return eval_split_num(list, out, max, 1e-6, 1.0);   /* the bounds of --budgets */
}

/* a record with this key exists: in this process's store, or (sharded) at the start */
bool eval_have(const eval_cfg *c, const char *key) {
    return skv_store_has(c->store, key) || (c->done && skv_store_has(c->done, key));
}

/* Whether a unit has cells to run, and whether this rank runs it. The decision only looks at
 * what existed at the start (sharded: c->done; one process: the store, where a unit's
 * records only appear once it ran), so every rank numbers the pending units alike: the i-th
 * goes to rank i % size. A unit with nothing to run counts its cells as done work. */
bool eval_take_unit(eval_cfg *c, const char *unit, const skv_eval_pol *const *pl, int npl, double work) {
    bool pending = false;
    for (int p = 0; p < npl && !pending; p++) {
        const double *bl;
        const int nb = eval_pol_budgets(c, pl[p], &bl);
        for (int b = 0; b < nb && !pending; b++) {
            char key[512];
            eval_make_key(c, unit, pl[p], bl[b], key, sizeof key);
            pending = !skv_store_has(c->done ? c->done : c->store, key);
        }
    }
    c->work_seen += work;
    if (!pending) { eval_skip_work(c, work); return false; }
    const int i = c->n_pending++;
    if (c->n_order == c->cap_order) {
        const int nc = c->cap_order ? 2 * c->cap_order : 64;
        char **no = realloc(c->order, (size_t)nc * sizeof *no);
        if (no) { c->order = no; c->cap_order = nc; }
    }
    if (c->n_order < c->cap_order) {
        char pre[600];
        snprintf(pre, sizeof pre, "%s|%s|", c->task, unit);
        if ((c->order[c->n_order] = skv_strdup(pre))) c->n_order++;
    }
    if (i % c->size == c->rank) return true;
    c->work_others += work;   /* the progress shows this rank's share */
    return false;
}

/* the grid's policies as a list (generation tasks) */
int eval_grid_pols(const eval_cfg *c, const skv_eval_pol **pl) {
    for (int i = 0; i < c->n_pols; i++) pl[i] = &c->pols[i];
    return c->n_pols;
}

/* the policy's options by name, from its table */
static cJSON *options_json(const skv_eval_pol *p) {
    cJSON *o = cJSON_CreateObject();
    const skv_policy_desc *d = p->spec.desc;
    for (int i = 0; i < d->n_opts; i++) {
        const skv_opt_desc *od = &d->opts[i];
        const double v = skv_opt_get(&p->spec, od);
        if (od->type == SKV_OPT_ENUM) cJSON_AddStringToObject(o, od->name, od->values[(int)v]);
        else if (od->type == SKV_OPT_BOOL) cJSON_AddBoolToObject(o, od->name, v != 0);
        else cJSON_AddNumberToObject(o, od->name, v);
    }
    return o;
}

/* the wall time of the unit this record came from and how many cells shared it: a record's
 * share of the machine time is unit_seconds / unit_cells (the report sums it per command) */
void eval_add_unit_time(cJSON *r, double seconds, int cells) {
    cJSON_AddNumberToObject(r, "unit_seconds", seconds);
    cJSON_AddNumberToObject(r, "unit_cells", cells);
}

cJSON *eval_base_record(const eval_cfg *c, const char *key, const skv_eval_pol *p, double budget, cJSON *unit) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "key", key);
    cJSON_AddStringToObject(r, "task", c->task);
    cJSON_AddItemToObject(r, "unit", unit);
    cJSON_AddStringToObject(r, "policy", p->label);
    cJSON_AddStringToObject(r, "policy_name", skv_eval_pol_name(p));
    cJSON_AddNumberToObject(r, "budget", cell_budget(p, budget));
    cJSON_AddStringToObject(r, "budget_base", c->ctx.budget_prompt ? "prompt" : "length");
    cJSON_AddStringToObject(r, "granularity",
                            c->ctx.per_head && !(p->spec.desc->caps & SKV_POLICY_KEEPS_ALL) ? "attention_head" : "kv_head");
    if (c->chat) cJSON_AddBoolToObject(r, "chat_template", true);
    if (c->chat_turns) cJSON_AddBoolToObject(r, "fewshot_turns", true);
    cJSON_AddItemToObject(r, "options", options_json(p));
    cJSON *m = cJSON_AddObjectToObject(r, "models");
    cJSON_AddItemToObject(m, "llm", fp_json(c->llm_path, &c->fp_llm));
    if ((eval_runs_slm(p) || c->draft) && c->slm) cJSON_AddItemToObject(m, "slm", fp_json(c->slm_path, &c->fp_slm));
    if (uses_profile(c, p)) {
        cJSON *pj = cJSON_AddObjectToObject(m, "profile");
        cJSON_AddStringToObject(pj, "path", c->profile_path);
        cJSON_AddStringToObject(pj, "sha256", c->prof_sha);
        cJSON_AddNumberToObject(pj, "depth", c->prof->depth);
    }
    cJSON_AddStringToObject(r, "git", c->git);
    cJSON_AddStringToObject(r, "command", c->command);
    cJSON *s = cJSON_AddObjectToObject(r, "settings");
    cJSON_AddNumberToObject(s, "threads", omp_get_max_threads());
    cJSON_AddStringToObject(s, "kv", c->kv);
    if (strcmp(c->device, "cpu")) cJSON_AddStringToObject(s, "device", c->device);   /* cpu: as before */
    else cJSON_AddStringToObject(s, "gemm", gemm_int8(c) ? "int8" : "float");
    if (attn_bf16(c)) cJSON_AddStringToObject(s, "prefill_attn", "bf16");
    cJSON_AddStringToObject(s, "data_dir", c->data_dir);
    char date[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    cJSON_AddStringToObject(r, "date", date);
    return r;
}

void eval_add_mem(cJSON *r, const skv_session_mem *m) {
    cJSON *o = cJSON_AddObjectToObject(r, "memory");
    cJSON_AddNumberToObject(o, "hot_bytes", (double)m->hot_used);
    if (m->hot_meta) cJSON_AddNumberToObject(o, "hot_meta_bytes", (double)m->hot_meta);   /* part of hot_bytes */
    cJSON_AddNumberToObject(o, "cold_bytes", (double)m->cold_used);
    cJSON_AddNumberToObject(o, "slm_cache_bytes", (double)m->slm_cache);
    cJSON_AddNumberToObject(o, "slm_weights_bytes", (double)m->slm_weights);
    cJSON_AddNumberToObject(o, "hot_tokens", m->hot_tokens);
    cJSON_AddNumberToObject(o, "budget_tokens", m->budget_tokens);
    cJSON_AddNumberToObject(o, "full_equiv_bytes", (double)m->full_equiv);
    if (m->pass_peak) {   /* kvzip's scoring passes */
        cJSON_AddNumberToObject(o, "score_pass_seconds", m->pass_seconds);
        cJSON_AddNumberToObject(o, "score_pass_peak_bytes", (double)m->pass_peak);
    }
}
