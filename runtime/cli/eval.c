/* eval.c: `smallkv eval TASK`: the evaluation harness (protocols: docs/results.md): runs a grid of policies x budgets on one model pair over a
 * task and writes one JSON record per unit (eval/store.h), resumably.
 *   fidelity     teacher-forced KL / top-1 / perplexity vs the full cache (section 1)
 *   passkey      retrieval of a 5-digit key after query-agnostic compression (section 2)
 *   gsm8k, bbh   greedy CoT exact match on fixed subsets (section 3)
 *   calibration  profile vs online mapping: agreement and fidelity of each (section 4)
 *   niah         RULER-style needle retrieval (single / multikey / multivalue) in pg-essays
 *                prose at long context lengths, scored by recall of the needle values
 *   longbench    LongBench multi_news (official template, middle truncation), ROUGE-L
 *   (gsm8k and bbh take --pad-to N: irrelevant prose before the few-shot prompt)
 *   depth        SmallKV's fidelity and SLM time at several SLM depths (early stop); the
 *                chosen depth and its evidence can be written into a copy of the profile
 *   report       tables and SVG plots from results files (eval_report.c)
 * Built with SKV_MPI (`make MPI=1` -> build/bin/smallkv-mpi): `mpirun -n N smallkv-mpi eval ...`
 * shards the pending units over the ranks (the i-th pending unit to rank i % N), each rank
 * writes RESULTS.json.rankK, and rank 0 merges them into RESULTS.json in unit order at the
 * end (docs/lab/long-context-tasks.md). */
#include "runtime/cli/cli.h"
#include "eval/data.h"
#include "eval/longctx.h"
#include "eval/runner.h"
#include "runtime/api/api.h"
#include "eval/store.h"
#include "runtime/model/fingerprint.h"
#include "runtime/format/profile.h"
#include "calibrate/mapping.h"
#include "common/sha256.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include "kernels/cpu/matmul.h"
#include <cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef SKV_MPI
#include <mpi.h>
#endif

int cmd_eval_report(int argc, char **argv);

/* Load a model and report a failure; NULL on error (message already printed). */
static skv_model *cli_load(const char *path) {
    skv_model *m = skv_model_load(path);
    if (!m) cli_fail(NULL);
    return m;
}

static const char *EVAL_USAGE =
    "usage: smallkv eval TASK --llm MODEL [options] -o RESULTS.json\n"
    "       smallkv eval report RESULTS.json [MORE.json ...] -o docs/results.md\n"
    "TASK: fidelity | passkey | gsm8k | bbh | calibration | depth | niah | longbench\n"
    "  --llm MODEL          the large model (GGUF or HF directory)\n"
    "  --slm MODEL          the small model (needed by cells whose policy runs one: smallkv)\n"
    "  --profile FILE       SmallKV profile (.skvprof) for the pair; checked against both models;\n"
    "                       without one, cells default to mapping=online\n"
    "  --policies LIST      comma-separated policy specs (default full,streamingllm,h2o,snapkv,\n"
    "                       pyramidkv,adakv,smallkv); options after ':', by name, short name or\n"
    "                       bare value, e.g. smallkv:mass:online, smallkv:nosal, smallkv:score=acc,\n"
    "                       smallkv:depth=16, smallkv:slmb=0.4, h2o:sinks=8 (options below)\n"
    "  --OPTION VALUE       any policy option (e.g. --combine mass, --mapping online, --sinks 8):\n"
    "                       the default for every cell whose policy has it\n"
    "  --budgets LIST       fractions of the full cache (default 0.05,0.1,0.2,0.4); full runs once\n"
    "  --granularity G      kv (default): one token set per KV head; head: per attention head,\n"
    "                       the KV head storing the union (h2o, smallkv)\n"
    "  --gemm int8|float    multi-row products (prefill) on the CPU: int8 (default: each prompt\n"
    "                       row gets a decode step's bits) or float (dequantised weights, the\n"
    "                       arithmetic of records from before int8 prefill); records say which\n"
    "  --prefill-attn M     exact (default) or bf16 (AMX-BF16 tile products for long prompts;\n"
    "                       records made with it carry attn=bf16 in their key)\n"
    "  --budget-base B      length (default): of the current length at every step; prompt: of\n"
    "                       the prompt length at the first compression, fixed (H2O's code)\n"
    "  --limit N            units per task: documents per corpus (fidelity, calibration; default 1),\n"
    "                       problems (gsm8k, default 20), examples per bbh task (default 10),\n"
    "                       records per longbench subset (default 20 of multi_news' 200)\n"
    "  --tokens N           fidelity document length (default 2048)\n"
    "  --prefill P          fidelity prefill length (default 512)\n"
    "  --corpora LIST       fidelity corpora (default wikitext2,pg-essays; also multi_news:\n"
    "                       LongBench multi_news passages)\n"
    "  --lengths LIST       context lengths in tokens: passkey (default 1024,2048,4096), niah (the\n"
    "                       whole prompt; default 4096,8192,16384,32768)\n"
    "  --depths LIST        passkey, niah: needle depths in percent (default 0,25,50,75,100)\n"
    "  --variants N         passkey, niah: units per (length, depth) cell, 1..8 (passkey default 3:\n"
    "                       variant v has its own key and needle/question phrasing v % 3, v 0 the\n"
    "                       original; niah default 1: variant v its own keys, values, depths)\n"
    "  --niah-kinds LIST    niah: single (one needle, its value asked), multikey (--needles keys,\n"
    "                       one asked), multivalue (--needles values of one key, all asked)\n"
    "                       (default single,multikey,multivalue); score: fraction of the asked\n"
    "                       values in the output\n"
    "  --needles N          niah multikey / multivalue: needles, 2..8 (default 4)\n"
    "  --pad-to N           gsm8k, bbh: pg-essays prose before the few-shot prompt until the\n"
    "                       prompt has N tokens (SmallKV rebuttal; recorded as pad=N in the unit)\n"
    "  --subsets LIST       longbench subsets scored by ROUGE-L (default multi_news; also\n"
    "                       gov_report, qmsum when their files are in DATA/longbench/)\n"
    "  --max-length N       longbench: prompt tokens kept, LongBench's middle truncation (first\n"
    "                       and last N/2 tokens; default 3500)\n"
    "  --bbh-tasks LIST     (default date_understanding,logical_deduction_five_objects,\n"
    "                       tracking_shuffled_objects_five_objects,multistep_arithmetic_two)\n"
    "  --max-new N          generated tokens at most (gsm8k, bbh: 256; passkey: 8; niah: 128;\n"
    "                       longbench: the subset's dataset2maxlen.json value, 512 for multi_news)\n"
    "  --chat               gsm8k, bbh, niah, longbench: the prompt as one user turn of the model's\n"
    "                       chat template, the answer in the assistant turn (for Instruct models)\n"
    "  --chat-turns         gsm8k, bbh: the chat template with each few-shot example as a user\n"
    "                       and an assistant turn, the question the last user turn (lm-eval's\n"
    "                       --apply_chat_template --fewshot_as_multiturn)\n"
    "  --data DIR           data folder (default $SKV_DATA_DIR or data; filled by\n"
    "                       scripts/fetch-data.sh)\n"
    "  --kv f16|f32         KV element type (default f16)\n"
    "  --device cpu|cuda    where the cells run (default cpu); cuda needs a build with make CUDA=1\n"
    "                       and a GPU, and policies that run there (\"GPU decode\" in the list\n"
    "                       below); cells then prefill by themselves (no shared prefill), and\n"
    "                       keys and records name the device\n"
    "  --threads N          OpenMP threads (default: all cores)\n"
    "  --batch N            cells decoded together per step (default 16); 1 steps them one by\n"
    "                       one and times each fidelity cell (for speed comparisons)\n"
    "  --draft K            generation tasks: speculative decoding, the --slm model drafting\n"
    "                       up to K tokens a round (smallkv: its own SLM); each cell runs alone,\n"
    "                       is labelled POLICY+draftK and records LLM passes and accepted drafts;\n"
    "                       the answers are those without drafts (greedy, exact verify)\n"
    "  -o FILE              results JSON: created, or resumed (units already there are skipped)\n"
    "depth: fidelity of SmallKV (the --policies' smallkv spec, else smallkv) run to each SLM\n"
    "depth, each with the profile's mapping restricted to that depth, timed cell by cell;\n"
    "needs --slm and --profile; --budgets default 0.2, --tokens 1024\n"
    "  --slm-depths LIST    SLM layers to try (default: every 4th, the profile's depth, all)\n"
    "  --max-kl-rise R      choose the smallest depth whose mean KL is at most (1 + R) times\n"
    "                       the deepest's (default 0.05)\n"
    "  --write-profile OUT  write the profile with the chosen depth and the table to OUT\n"
    "One exact prefill per unit serves every cell on the CPU (derived sessions, see session.h).\n"
    "Records are written after every unit (atomic rewrite); progress and ETA go to stderr (a\n"
    "line per unit or per minute when stderr is not a terminal).\n"
    "MPI (make MPI=1): mpirun -n N build/bin/smallkv-mpi eval TASK ... -o RESULTS.json gives the\n"
    "pending units to the ranks in turn; rank K writes RESULTS.json.rankK, rank 0 merges them\n"
    "into RESULTS.json at the end (the records of a one-process run, in its order); a rerun with\n"
    "any rank count resumes from RESULTS.json and the shard files (depth: one process only).\n"
    "Policies and their options:\n";

#define MAXL 64

typedef struct {
    const char *task, *llm_path, *slm_path, *profile_path, *out, *data_dir, *kv;
    const char *gemm;              /* NULL until --gemm; then "int8" or "float" (matmul.h modes) */
    const char *device;            /* the cells' device: "cpu" or "cuda" */
    char defaults[512];            /* "name=value,..." policy option defaults from the flags */
    char *pol_specs[MAXL]; int n_pols;
    double budgets[MAXL]; int n_budgets;
    char *corpora[MAXL]; int n_corpora;
    int lengths[MAXL]; int n_lengths;
    int depths[MAXL]; int n_depths;
    char *bbh_tasks[MAXL]; int n_bbh;
    int limit, tokens, prefill, max_new, threads, batch;
    int variants;                  /* passkey units per (length, depth) */
    int draft;                     /* generation tasks: speculative decoding with K drafts (0: off) */
    bool chat;                     /* gsm8k, bbh, niah, longbench: the prompt as one user turn of the chat template */
    bool chat_turns;               /* gsm8k, bbh: each few-shot example its own user/assistant turns */
    int niah_kinds[SKV_NIAH_KINDS], n_niah_kinds, needles;   /* niah */
    int pad_to;                    /* gsm8k, bbh: prompt tokens with pg-essays padding (0: none) */
    char *subsets[MAXL]; int n_subsets;   /* longbench */
    int max_length;                /* longbench: middle truncation to this many tokens */
    /* sharding (MPI): rank of size; done: what OUT.json and every shard file held at the start
     * (size > 1; store is then this rank's shard file); pending units seen so far, and their
     * "task|unit|" prefixes in order (the merge's order) */
    int rank, size;
    skv_eval_store *done;
    int n_pending;
    char **order; int n_order, cap_order;
    int before;                    /* records at the start */
    const char *slm_depths, *write_profile;   /* depth task */
    double max_kl_rise;
    /* loaded */
    skv_model *llm, *slm;
    smallkv_pair *pair;            /* the sessions' view of llm and slm (borrowed) */
    skv_profile *prof;
    skv_model_fp fp_llm, fp_slm;
    char prof_sha[65];
    skv_eval_pol pols[MAXL];
    skv_eval_ctx ctx;
    skv_eval_store *store;
    char git[64], command[2048];
    /* progress */
    double t_start, work_total, work_done, unit_work;
    const char *unit_name;
} eval_cfg;

/* ------------------------------------------------------------------ list parsing */

static int split(const char *s, char **out, int max) {
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

static int split_num(const char *s, double *out, int max, double lo, double hi) {
    char *parts[MAXL];
    int n = split(s, parts, max < MAXL ? max : MAXL);
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

static void git_commit(char *out, size_t n) {
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

static void show_progress(eval_cfg *c, double unit_frac) {
    if (c->rank > 0) return;   /* sharded: rank 0 shows its own share, tagged */
    const bool tty = isatty(2);
    static double last_line;   /* off a terminal: a line per unit, or per minute within one */
    if (!tty && unit_frac > 0 && skv_now() - last_line < 60) return;
    if (!tty) last_line = skv_now();
    double done = c->work_done + unit_frac * c->unit_work, el = skv_now() - c->t_start;
    char e1[32], e2[32];
    fmt_dur(el, e1, sizeof e1);
    fmt_dur(done > 0 ? el / done * (c->work_total - done) : -1, e2, sizeof e2);
    char tag[64] = "";
    if (c->size > 1) snprintf(tag, sizeof tag, " rank 0/%d", c->size);
    fprintf(stderr, "%s[%s%s] %-40.40s %5.1f%%  elapsed %s  ETA %s   %s", tty ? "\r" : "", c->task, tag,
            c->unit_name ? c->unit_name : "", c->work_total > 0 ? 100.0 * done / c->work_total : 0, e1, e2,
            tty ? "" : "\n");
    fflush(stderr);
}

static void fid_progress(void *u, long done, long total) {
    eval_cfg *c = u;
    if (done % 16 == 0 || done == total) show_progress(c, total ? (double)done / total : 1);
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

static bool runs_slm(const skv_eval_pol *p) { return p->spec.desc->caps & SKV_POLICY_NEEDS_SLM; }
static bool uses_profile(const eval_cfg *c, const skv_eval_pol *p) { return c->prof && skv_policy_spec_needs_map(&p->spec); }
static double cell_budget(const skv_eval_pol *p, double budget) {
    return p->spec.desc->caps & SKV_POLICY_KEEPS_ALL ? 1.0 : budget;
}

/* int8 prefill (the default gemm mode): records from before it ran the float GEMM, so an
 * int8 record names it in its key and a float one keeps the old key */
static bool gemm_int8(const eval_cfg *c) { return !strcmp(c->device, "cpu") && skv_matmul_gemm_mode() == SKV_GEMM_INT8_ALL; }

/* the opt-in bf16 prefill attention, where it runs: named in the key (exact keeps old keys) */
static bool attn_bf16(const eval_cfg *c) { return !strcmp(c->device, "cpu") && !strcmp(smallkv_prefill_attention(), "bf16"); }

static void make_key(const eval_cfg *c, const char *unit, const skv_eval_pol *p, double budget, char *key, size_t n) {
    /* the settings' defaults add nothing, so keys of earlier records stay as they were */
    const bool compresses = !(p->spec.desc->caps & SKV_POLICY_KEEPS_ALL);
    const bool on_cpu = !strcmp(c->device, "cpu");
    snprintf(key, n, "%s|%s|%s|b=%g|llm=%.12s|slm=%.12s|prof=%.12s|kv=%s%s%s%s%s%s%s%s", c->task, unit, p->label,
             cell_budget(p, budget), c->fp_llm.weight_hash, runs_slm(p) || c->draft ? c->fp_slm.weight_hash : "-",
             uses_profile(c, p) ? c->prof_sha : "-", c->kv, compresses && c->ctx.budget_prompt ? "|base=prompt" : "",
             c->chat_turns ? "|chat=turns" : c->chat ? "|chat" : "", compresses && c->ctx.per_head ? "|gran=head" : "", on_cpu ? "" : "|dev=",
             on_cpu ? "" : c->device, gemm_int8(c) ? "|gemm=int8" : "", attn_bf16(c) ? "|attn=bf16" : "");
}

/* ------------------------------------------------------------------ units and shards */

/* a record with this key exists: in this process's store, or (sharded) at the start */
static bool have(const eval_cfg *c, const char *key) {
    return skv_store_has(c->store, key) || (c->done && skv_store_has(c->done, key));
}

/* Whether a unit has cells to run, and whether this rank runs it. The decision only looks at
 * what existed at the start (sharded: c->done; one process: the store, where a unit's
 * records only appear once it ran), so every rank numbers the pending units alike: the i-th
 * goes to rank i % size. A unit with nothing to run counts its cells as done work. */
static bool take_unit(eval_cfg *c, const char *unit, const skv_eval_pol *const *pl, int npl, double work) {
    bool pending = false;
    for (int p = 0; p < npl && !pending; p++)
        for (int b = 0; b < c->n_budgets && !pending; b++) {
            if ((pl[p]->spec.desc->caps & SKV_POLICY_KEEPS_ALL) && b > 0) continue;
            char key[512];
            make_key(c, unit, pl[p], c->budgets[b], key, sizeof key);
            pending = !skv_store_has(c->done ? c->done : c->store, key);
        }
    if (!pending) { c->work_done += work; return false; }
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
    return i % c->size == c->rank;
}

/* the grid's policies as a list (generation tasks) */
static int grid_pols(const eval_cfg *c, const skv_eval_pol **pl) {
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
static void add_unit_time(cJSON *r, double seconds, int cells) {
    cJSON_AddNumberToObject(r, "unit_seconds", seconds);
    cJSON_AddNumberToObject(r, "unit_cells", cells);
}

static cJSON *base_record(const eval_cfg *c, const char *key, const skv_eval_pol *p, double budget, cJSON *unit) {
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
    if ((runs_slm(p) || c->draft) && c->slm) cJSON_AddItemToObject(m, "slm", fp_json(c->slm_path, &c->fp_slm));
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

static void add_mem(cJSON *r, const skv_session_mem *m) {
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

/* ------------------------------------------------------------------ depth */

static int run_fidelity(eval_cfg *c, bool calibration);

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* SmallKV's fidelity at several SLM depths, each with the profile's mapping cut to that
 * depth; then the table, the choice and (--write-profile) the profile with both. */
static int run_depth(eval_cfg *c) {
    if (!c->prof || !c->slm) { fprintf(stderr, "smallkv: eval depth needs --slm and --profile\n"); return CLI_USAGE; }
    skv_profile *pr = c->prof;
    const int l = pr->slm.n_layer, h = pr->slm.n_head;
    int depths[MAXL], nd = 0;
    if (c->slm_depths) {
        double v[MAXL];
        int n = split_num(c->slm_depths, v, MAXL, 1, l);
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
        if (!strncmp(c->pol_specs[i], "smallkv", 7)) { snprintf(base, sizeof base, "%s", c->pol_specs[i]); break; }
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
    int rc = run_fidelity(c, false);
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
                make_key(c, unit, &c->pols[i], b, key, sizeof key);
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

static int run_fidelity(eval_cfg *c, bool calibration) {
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
    c->work_total *= 1 + npl * c->n_budgets;
    for (int ci = 0; ci < c->n_corpora; ci++) {
        size_t len;
        char *text = skv_eval_corpus(c->data_dir, c->corpora[ci], &len);
        if (!text) return cli_fail(NULL);
        for (int d = 0; d < c->limit; d++) {
            char unit[128];
            snprintf(unit, sizeof unit, "%s#%d,N=%d,P=%d", c->corpora[ci], d, c->tokens, c->prefill);
            if (!take_unit(c, unit, pl, npl, (double)steps * (1 + npl * c->n_budgets))) continue;
            skv_fid_cell cells[MAXL * MAXL / 4];
            char keys[MAXL * MAXL / 4][512];
            int n = 0;
            for (int p = 0; p < npl; p++)
                for (int b = 0; b < c->n_budgets; b++) {
                    if ((pl[p]->spec.desc->caps & SKV_POLICY_KEEPS_ALL) && b > 0) continue;
                    if (n == (int)(sizeof cells / sizeof *cells)) break;
                    make_key(c, unit, pl[p], c->budgets[b], keys[n], sizeof keys[n]);
                    if (have(c, keys[n])) continue;
                    memset(&cells[n], 0, sizeof cells[n]);
                    cells[n].pol = pl[p];
                    cells[n].budget = c->budgets[b];
                    n++;
                }
            if (!n) { c->work_done += (double)steps * (1 + npl * c->n_budgets); continue; }
            int *toks = NULL;
            if (skv_eval_document(c->llm->tok, text, len, c->tokens, d, &toks) < 0) { free(text); return cli_fail(c->corpora[ci]); }
            c->unit_name = unit;
            c->unit_work = (double)steps * (1 + n);
            const double t_unit = skv_now();
            int rc = skv_eval_fidelity(&c->ctx, toks, c->tokens, c->prefill, cells, n,
                                       c->prof ? c->prof->map_full : NULL, fid_progress, c);
            free(toks);
            const double unit_s = skv_now() - t_unit;
            if (rc) { free(text); for (int i = 0; i < n; i++) skv_fid_free(&cells[i].acc); return cli_fail(unit); }
            c->work_done += (double)steps * (1 + npl * c->n_budgets);
            show_progress(c, 0);
            for (int i = 0; i < n; i++) {
                skv_fid_summary s;
                skv_fid_summarize(&cells[i].acc, &s);
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddStringToObject(uj, "corpus", c->corpora[ci]);
                cJSON_AddNumberToObject(uj, "doc", d);
                cJSON_AddNumberToObject(uj, "tokens", c->tokens);
                cJSON_AddNumberToObject(uj, "prefill", c->prefill);
                cJSON *r = base_record(c, keys[i], cells[i].pol, cells[i].budget, uj);
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
                add_mem(r, &cells[i].mem);
                cJSON_AddBoolToObject(r, "shared_prefill", cells[i].shared_prefill);
                cJSON_AddNumberToObject(r, "prefill_seconds", cells[i].prefill_s);
                cJSON_AddNumberToObject(r, "batch", c->ctx.batch > 1 ? c->ctx.batch : 1);
                add_unit_time(r, unit_s, n);
                if (cells[i].timed) {   /* decode time of this cell alone (--batch 1) */
                    cJSON_AddNumberToObject(r, "seconds", cells[i].seconds);
                    cJSON_AddNumberToObject(r, "seconds_per_step", cells[i].seconds / (s.steps ? s.steps : 1));
                    if (runs_slm(cells[i].pol)) cJSON_AddNumberToObject(r, "slm_seconds", cells[i].slm_s);
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

/* ------------------------------------------------------------------ generation tasks */

typedef struct { int n_digits; } pk_stop_u;
static bool passkey_stop(const char *text, void *u) {
    (void)u;
    const char *p = text;
    while (*p && !(*p >= '0' && *p <= '9')) p++;
    if (!*p) return false;
    while (*p >= '0' && *p <= '9') p++;
    return *p != 0;   /* a non-digit after the first number */
}

/* what a generation unit's output is scored against: passkey, gsm8k, bbh: gold; niah: the
 * asked values (recall); longbench: the reference answers (best ROUGE-L) */
enum { GEN_PASSKEY = 0, GEN_GSM8K = 1, GEN_BBH = 2, GEN_NIAH = 3, GEN_LONGBENCH = 4 };
typedef struct { const char *const *refs; int n_refs; } gen_refs;

/* Run every pending cell of one unit (same context for all: one shared prefill, decoded
 * together) and store records. */
static int gen_unit(eval_cfg *c, const char *unit, cJSON *unit_json, const int *ctx, int n_ctx, const int *q, int n_q,
                    int max_new, skv_eval_stop stop, void *stop_u, const char *gold, int kind, const gen_refs *refs) {
    skv_gen_cell cells[MAXL * MAXL / 4];
    char keys[MAXL * MAXL / 4][512];
    int n = 0, rc = CLI_OK;
    for (int p = 0; p < c->n_pols; p++)
        for (int b = 0; b < c->n_budgets; b++) {
            const skv_eval_pol *pol = &c->pols[p];
            if ((pol->spec.desc->caps & SKV_POLICY_KEEPS_ALL) && b > 0) continue;
            if (n == (int)(sizeof cells / sizeof *cells)) break;
            make_key(c, unit, pol, c->budgets[b], keys[n], sizeof keys[n]);
            if (have(c, keys[n])) { c->work_done += 1; continue; }
            memset(&cells[n], 0, sizeof cells[n]);
            cells[n].pol = pol;
            cells[n].budget = c->budgets[b];
            n++;
        }
    c->unit_name = unit;
    c->unit_work = n;
    const double t_unit = skv_now();
    if (n && (c->draft ? skv_eval_generate_draft(&c->ctx, cells, n, ctx, n_ctx, q, n_q, max_new, stop, stop_u, c->draft)
                       : skv_eval_generate_cells(&c->ctx, cells, n, ctx, n_ctx, q, n_q, max_new, stop, stop_u))) {
        cJSON_Delete(unit_json);
        return cli_fail(unit);
    }
    const double unit_s = skv_now() - t_unit;
    for (int i = 0; i < n; i++) {
        const skv_eval_pol *pol = cells[i].pol;
        skv_gen_out *g = &cells[i].out;
        char pred[256] = "";
        bool ok = false;
        double score = 0, rp = 0, rr = 0;
        if (kind == GEN_PASSKEY) { skv_first_digits(g->text, pred, sizeof pred); ok = !strcmp(pred, gold); }
        else if (kind == GEN_GSM8K) { skv_extract_gsm8k(g->text, pred, sizeof pred); ok = !strcmp(pred, gold); }
        else if (kind == GEN_BBH) { skv_extract_bbh(g->text, pred, sizeof pred); ok = skv_bbh_match(pred, gold); }
        else if (kind == GEN_NIAH) {
            score = skv_recall_values(g->text, refs->refs, refs->n_refs);
            ok = score == 1;
            size_t o = 0;   /* the asked values found, in the order asked */
            for (int k = 0; k < refs->n_refs; k++)
                if (strcasestr(g->text, refs->refs[k]) && o + strlen(refs->refs[k]) + 2 < sizeof pred)
                    o += (size_t)snprintf(pred + o, sizeof pred - o, "%s%s", o ? "," : "", refs->refs[k]);
        } else {   /* LongBench: the best ROUGE-L F over the answers */
            for (int k = 0; k < refs->n_refs; k++) {
                double f, pp, rr2;
                if (skv_rouge_l(g->text, refs->refs[k], &f, &pp, &rr2)) { rc = cli_fail(unit); f = pp = rr2 = 0; }
                if (k == 0 || f > score) { score = f; rp = pp; rr = rr2; }
            }
        }
        cJSON *r = base_record(c, keys[i], pol, cells[i].budget, cJSON_Duplicate(unit_json, 1));
        cJSON *m = cJSON_AddObjectToObject(r, "metrics");
        if (kind == GEN_LONGBENCH) {
            cJSON_AddNumberToObject(m, "score", score);
            cJSON_AddNumberToObject(m, "rouge_l", score);
            cJSON_AddNumberToObject(m, "rouge_l_p", rp);
            cJSON_AddNumberToObject(m, "rouge_l_r", rr);
        } else {
            cJSON_AddBoolToObject(m, "correct", ok);
            if (kind == GEN_NIAH) { cJSON_AddNumberToObject(m, "score", score); cJSON_AddNumberToObject(m, "recall", score); }
            cJSON_AddStringToObject(m, "pred", pred);
            cJSON_AddStringToObject(m, "gold", gold);
        }
        cJSON_AddNumberToObject(m, "prompt_tokens", n_ctx + n_q);
        cJSON_AddNumberToObject(m, "generated_tokens", g->n_gen);
        cJSON_AddStringToObject(m, "output", g->text);
        add_mem(r, &g->mem);
        cJSON_AddBoolToObject(r, "shared_prefill", cells[i].shared_prefill);
        cJSON_AddNumberToObject(r, "prefill_seconds", g->prefill_s);
        cJSON_AddNumberToObject(r, "decode_seconds_all_cells", g->decode_s);
        cJSON_AddNumberToObject(r, "cells_together", c->draft ? 1 : n);
        add_unit_time(r, unit_s, n);
        if (c->draft) {
            cJSON *sp = cJSON_AddObjectToObject(r, "speculative");
            cJSON_AddNumberToObject(sp, "draft", c->draft);
            cJSON_AddNumberToObject(sp, "llm_passes", g->spec_passes);
            cJSON_AddNumberToObject(sp, "drafted", g->spec_drafted);
            cJSON_AddNumberToObject(sp, "accepted", g->spec_accepted);
            cJSON_AddNumberToObject(sp, "decode_seconds", g->decode_s);
        }
        c->work_done += 1;
        if (rc == CLI_OK && skv_store_add(c->store, r)) rc = cli_fail(NULL);
    }
    for (int i = 0; i < n; i++) free(cells[i].out.text);
    cJSON_Delete(unit_json);
    show_progress(c, 0);
    return rc;
}

static int n_cells(const eval_cfg *c) {
    int n = 0;
    for (int p = 0; p < c->n_pols; p++) n += c->pols[p].spec.desc->caps & SKV_POLICY_KEEPS_ALL ? 1 : c->n_budgets;
    return n;
}

static int run_passkey(eval_cfg *c) {
    size_t len;
    char *filler = skv_eval_corpus(c->data_dir, "pg-essays", &len);
    if (!filler) return cli_fail(NULL);
    c->work_total = (double)c->n_lengths * c->n_depths * c->variants * n_cells(c);
    int rc = CLI_OK;
    for (int li = 0; li < c->n_lengths && rc == CLI_OK; li++)
        for (int di = 0; di < c->n_depths && rc == CLI_OK; di++)
            for (int v = 0; v < c->variants && rc == CLI_OK; v++) {
                int L = c->lengths[li], D = c->depths[di], key = skv_passkey_key(L, D, (unsigned)v + 1);
                /* variant 0 keeps the name (and unit JSON) of the single-variant runs, so their
                 * results files resume and their records still pair with new ones in reports */
                char unit[64], gold[16];
                if (v) snprintf(unit, sizeof unit, "len=%d,depth=%d,v=%d", L, D, v);
                else snprintf(unit, sizeof unit, "len=%d,depth=%d", L, D);
                const skv_eval_pol *pl[MAXL];
                if (!take_unit(c, unit, pl, grid_pols(c, pl), n_cells(c))) continue;
                int *ctx = NULL, *q = NULL, nc, nq;
                if (skv_passkey_build(c->llm->tok, filler, len, L, D, key, v % SKV_PASSKEY_PHRASINGS, &ctx, &nc, &q, &nq)) {
                    rc = cli_fail("passkey");
                    break;
                }
                snprintf(gold, sizeof gold, "%d", key);
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddNumberToObject(uj, "length", L);
                cJSON_AddNumberToObject(uj, "depth", D);
                if (v) cJSON_AddNumberToObject(uj, "variant", v);   /* absent: variant 0 */
                cJSON_AddNumberToObject(uj, "context_tokens", nc);
                rc = gen_unit(c, unit, uj, ctx, nc, q, nq, c->max_new > 0 ? c->max_new : 8, passkey_stop, NULL, gold,
                              GEN_PASSKEY, NULL);
                free(ctx); free(q);
            }
    free(filler);
    return rc;
}

static char *concat3(const char *a, const char *b, const char *d) {
    size_t n = strlen(a) + strlen(b) + strlen(d) + 1;
    char *o = skv_malloc(n, "prompt");
    if (o) snprintf(o, n, "%s%s%s", a, b, d);
    return o;
}

/* gsm8k (kind 1) and bbh (kind 2): where a few-shot example's question starts and where its
 * answer starts (the answer mark ends the question's text) */
static const char *const QUESTION_MARK[3] = {"", "Question: ", "Q: "};
static const char *const ANSWER_MARK[3] = {"", "\nAnswer:", "\nA: Let's think step by step."};

/* A rendered chat text (heap, NULL after an error) as token ids, specials parsed; frees it.
 * The count (*ids heap), or -1 + error. */
static int encode_chat(const eval_cfg *c, char *chat, int **ids) {
    int n = chat ? skv_tokenize(c->llm->tok, chat, strlen(chat), true, NULL, 0) : -1;
    if (n > 0 && (*ids = skv_malloc((size_t)n * sizeof(int), "token ids")))
        n = skv_tokenize(c->llm->tok, chat, strlen(chat), true, *ids, n);
    else if (n > 0) n = -1;
    free(chat);
    return n;
}

/* A prompt text as token ids: plain (BOS when the tokenizer adds one), or with --chat as one
 * user turn of the model's chat template, the assistant's header last (specials parsed).
 * The count (*ids heap), or -1 + error. */
static int encode_prompt(const eval_cfg *c, const char *text, int **ids) {
    *ids = NULL;
    if (!c->chat) return skv_eval_tokenize(c->llm->tok, text, strlen(text), skv_tok_add_bos(c->llm->tok), ids);
    return encode_chat(c, skv_chat_prompt(c->llm->tok, NULL, text), ids);
}

/* --chat-turns: the few-shot text `shots` as user/assistant turns, then `question` (its
 * answer mark included) as the last user turn, the assistant's header last. Count (*ids heap),
 * or -1 + error. */
static int encode_turns(const eval_cfg *c, int kind, const char *shots, const char *question, int **ids) {
    *ids = NULL;
    char **turns = NULL;
    const int nt = skv_fewshot_turns(shots, QUESTION_MARK[kind], ANSWER_MARK[kind], question, &turns);
    if (nt < 0) return -1;
    const char **roles = skv_malloc((size_t)nt * sizeof(char *), "chat roles");
    char *chat = NULL;
    if (roles) {
        for (int i = 0; i < nt; i++) roles[i] = i % 2 ? "assistant" : "user";
        chat = skv_chat_render(c->llm->tok, roles, (const char *const *)turns, nt);
    }
    free(roles);
    skv_fewshot_turns_free(turns, nt);
    return encode_chat(c, chat, ids);
}

/* The tokens of pg-essays' first n_min tokens or more (no BOS), for padding and haystacks.
 * Count (*out heap), or -1 + error. */
static int filler_tokens(const eval_cfg *c, int n_min, int **out) {
    size_t len;
    char *text = skv_eval_corpus(c->data_dir, "pg-essays", &len);
    if (!text) return -1;
    size_t use = (size_t)n_min * 8 + 4096;
    if (use > len) use = len;
    int n = skv_eval_tokenize(c->llm->tok, text, use, false, out);
    free(text);
    if (n >= 0 && n < n_min) {
        free(*out);
        *out = NULL;
        return skv_error("pg-essays has %d tokens, %d needed", n, n_min);
    }
    return n;
}

/* --pad-to: pg-essays prose (its first k tokens as text), a blank line, then the prompt
 * text, k chosen so the encoded prompt has pad_to tokens (re-encoding can join tokens at the
 * seam: a few rounds, keeping the longest that fits). The prompt as encode_prompt gives it;
 * *pad the k used (0: the prompt alone is already that long). */
static int pad_prompt(const eval_cfg *c, const int *fill, int n_fill, const char *text, int **ids, int *pad) {
    *pad = 0;
    const int n0 = encode_prompt(c, text, ids);
    if (n0 < 0 || n0 >= c->pad_to) return n0;
    free(*ids);
    *ids = NULL;
    int k = c->pad_to - n0 - 1, best = -1;
    for (int round = 0; round < 8; round++) {
        if (k > n_fill) { free(*ids); *ids = NULL; return skv_error("--pad-to %d: pg-essays too short", c->pad_to); }
        char *p = skv_pad_text(c->llm->tok, fill, k), *full = p ? concat3(p, "\n\n", text) : NULL;
        int *t = NULL;
        const int n = full ? encode_prompt(c, full, &t) : -1;
        free(p); free(full);
        if (n < 0) { free(*ids); *ids = NULL; return -1; }
        if (n <= c->pad_to && n > best) { free(*ids); *ids = t; best = n; *pad = k; }
        else free(t);
        if (n == c->pad_to) break;
        k += c->pad_to - n;
        if (k < 0) k = 0;
    }
    if (best < 0) return skv_error("--pad-to %d: no padding fits", c->pad_to);
    return best;
}

static int run_text_task(eval_cfg *c, int kind) {
    char path[4400];
    int rc = CLI_OK;
    const int limit = c->limit > 0 ? c->limit : (kind == 1 ? 20 : 10);
    const int ntask = kind == 1 ? 1 : c->n_bbh;
    c->work_total = (double)limit * ntask * n_cells(c);
    char *shots = NULL;
    int *fill = NULL, n_fill = 0;
    if (skv_eval_need(c->data_dir, kind == 1 ? "gsm8k" : "bbh")) return cli_fail(NULL);
    if (c->pad_to && (n_fill = filler_tokens(c, c->pad_to, &fill)) < 0) return cli_fail("--pad-to");
    if (kind == 1) {
        snprintf(path, sizeof path, "%.4000s/gsm8k/train.jsonl", c->data_dir);
        if (!(shots = skv_gsm8k_fewshot(path, 4))) { free(fill); return cli_fail(NULL); }
        snprintf(path, sizeof path, "%.4000s/gsm8k/test.jsonl", c->data_dir);
    }
    const skv_eval_pol *pl[MAXL];
    const int npl = grid_pols(c, pl);
    for (int t = 0; t < ntask && rc == CLI_OK; t++) {
        if (kind == 2 && !(shots = skv_bbh_prompt(c->data_dir, c->bbh_tasks[t]))) { free(fill); return cli_fail(NULL); }
        for (int i = 0; i < limit && rc == CLI_OK; i++) {
            char *in = NULL, *gold = NULL;
            int r = kind == 1 ? skv_gsm8k_item(path, i, &in, &gold) : skv_bbh_item(c->data_dir, c->bbh_tasks[t], i, &in, &gold);
            if (r > 0) break;
            if (r < 0) { rc = cli_fail(NULL); break; }
            /* the padded prompt is another unit: its own name (and key); unpadded as before */
            char unit[160];
            if (c->pad_to) snprintf(unit, sizeof unit, "%s#%d,pad=%d", kind == 1 ? "test" : c->bbh_tasks[t], i, c->pad_to);
            else snprintf(unit, sizeof unit, "%s#%d", kind == 1 ? "test" : c->bbh_tasks[t], i);
            if (!take_unit(c, unit, pl, npl, n_cells(c))) { free(in); free(gold); continue; }
            char *prompt = concat3(shots, kind == 1 ? "" : "\n\n", QUESTION_MARK[kind]);
            char *full = prompt ? concat3(prompt, in, ANSWER_MARK[kind]) : NULL;
            int *ids = NULL, n = -1, pad = 0;
            if (full && c->chat_turns) {
                char *q = concat3(QUESTION_MARK[kind], in, ANSWER_MARK[kind]);
                n = q ? encode_turns(c, kind, shots, q, &ids) : -1;
                free(q);
            }
            else if (full) n = c->pad_to ? pad_prompt(c, fill, n_fill, full, &ids, &pad) : encode_prompt(c, full, &ids);
            if (n < 2) { rc = cli_fail("prompt"); }
            else {
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddStringToObject(uj, "subset", kind == 1 ? "test" : c->bbh_tasks[t]);
                cJSON_AddNumberToObject(uj, "index", i);
                if (c->pad_to) {
                    cJSON_AddNumberToObject(uj, "pad_to", c->pad_to);
                    cJSON_AddNumberToObject(uj, "pad_tokens", pad);
                }
                /* the prompt's last token is fed as a decode step (query after compression) */
                rc = gen_unit(c, unit, uj, ids, n - 1, ids + n - 1, 1, c->max_new > 0 ? c->max_new : 256,
                              kind == 1 ? skv_gsm8k_stop : skv_bbh_stop, NULL, gold, kind, NULL);
            }
            free(ids); free(full); free(prompt); free(in); free(gold);
        }
        if (kind == 2) { free(shots); shots = NULL; }
    }
    free(shots);
    free(fill);
    return rc;
}

/* The chat template around a user text, as tokens: *pre the head (up to the text), *mid the
 * rest (end of the turn, the assistant's header). 0 or -1 + error. */
static int chat_wrap(const eval_cfg *c, int **pre, int *n_pre, int **mid, int *n_mid) {
    static const char MARK[] = "\x01SKV-USER-TEXT\x01";
    *pre = *mid = NULL;
    char *chat = skv_chat_prompt(c->llm->tok, NULL, MARK);
    char *at = chat ? strstr(chat, MARK) : NULL;
    if (!at) { free(chat); return chat ? skv_error("chat template: the user text is not in it") : -1; }
    *at = 0;
    const char *tail = at + strlen(MARK);
    int rc = -1;
    for (int k = 0; k < 2; k++) {
        const char *s = k ? tail : chat;
        int **o = k ? mid : pre, *no = k ? n_mid : n_pre;
        *no = skv_tokenize(c->llm->tok, s, strlen(s), true, NULL, 0);
        if (*no < 0 || !(*o = skv_malloc((size_t)*no * sizeof(int) + 1, "chat tokens"))) goto done;
        if (skv_tokenize(c->llm->tok, s, strlen(s), true, *o, *no) != *no) { skv_error("tokenizer: inconsistent counts"); goto done; }
    }
    rc = 0;
done:
    free(chat);
    if (rc) { free(*pre); free(*mid); *pre = *mid = NULL; }
    return rc;
}

/* niah: per kind, length, depth and variant one unit; the prompt is exactly the length, its
 * last token fed as a decode step (the question is in the prefill, as RULER's prompt has it) */
static int run_niah(eval_cfg *c) {
    int max_len = 0;
    for (int i = 0; i < c->n_lengths; i++) if (c->lengths[i] > max_len) max_len = c->lengths[i];
    int *fill = NULL, *pre = NULL, *mid = NULL, n_pre = 0, n_mid = 0, bos;
    const int n_fill = filler_tokens(c, max_len, &fill);
    if (n_fill < 0) return cli_fail("niah");
    if (c->chat) {
        if (chat_wrap(c, &pre, &n_pre, &mid, &n_mid)) { free(fill); return cli_fail("niah --chat"); }
    } else if (skv_tok_add_bos(c->llm->tok)) {
        bos = skv_tok_bos(c->llm->tok);
        pre = skv_malloc(sizeof(int), "bos");
        if (!pre) { free(fill); return cli_fail(NULL); }
        pre[0] = bos;
        n_pre = 1;
    }
    const skv_niah_wrap wrap = {.pre = pre, .n_pre = n_pre, .mid = mid, .n_mid = n_mid};
    c->work_total = (double)c->n_niah_kinds * c->n_lengths * c->n_depths * c->variants * n_cells(c);
    const skv_eval_pol *pl[MAXL];
    const int npl = grid_pols(c, pl);
    int rc = CLI_OK;
    for (int ki = 0; ki < c->n_niah_kinds && rc == CLI_OK; ki++)
        for (int li = 0; li < c->n_lengths && rc == CLI_OK; li++)
            for (int di = 0; di < c->n_depths && rc == CLI_OK; di++)
                for (int v = 0; v < c->variants && rc == CLI_OK; v++) {
                    const skv_niah_kind kind = (skv_niah_kind)c->niah_kinds[ki];
                    const int L = c->lengths[li], D = c->depths[di];
                    const int needles = kind == SKV_NIAH_SINGLE ? 1 : c->needles;
                    char unit[160];
                    if (kind == SKV_NIAH_SINGLE) snprintf(unit, sizeof unit, "single,len=%d,depth=%d,v=%d", L, D, v);
                    else snprintf(unit, sizeof unit, "%s%d,len=%d,depth=%d,v=%d", skv_niah_kind_name(kind), needles, L, D, v);
                    if (!take_unit(c, unit, pl, npl, n_cells(c))) continue;
                    skv_niah_unit u;
                    if (skv_niah_build(c->llm->tok, fill, n_fill, &wrap, kind, L, D, needles, skv_niah_seed(kind, L, D, v), &u)) {
                        rc = cli_fail(unit);
                        break;
                    }
                    const char *refs[SKV_NIAH_MAX_NEEDLES];
                    char gold[SKV_NIAH_MAX_NEEDLES * (SKV_NIAH_VALUE_DIGITS + 1) + 1] = "";
                    for (int k = 0; k < u.n_gold; k++) {
                        refs[k] = u.values[k];
                        strcat(gold, k ? "," : "");
                        strcat(gold, u.values[k]);
                    }
                    cJSON *uj = cJSON_CreateObject(), *nd = cJSON_CreateArray();
                    cJSON_AddStringToObject(uj, "kind", skv_niah_kind_name(kind));
                    cJSON_AddNumberToObject(uj, "length", L);
                    cJSON_AddNumberToObject(uj, "depth", D);
                    cJSON_AddNumberToObject(uj, "variant", v);
                    cJSON_AddNumberToObject(uj, "needles", needles);
                    cJSON_AddStringToObject(uj, "query", u.query);
                    for (int k = 0; k < u.n_needles; k++) {
                        cJSON *o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "key", u.keys[k]);
                        cJSON_AddStringToObject(o, "value", u.values[k]);
                        cJSON_AddNumberToObject(o, "depth", u.depth_pct[k]);
                        cJSON_AddNumberToObject(o, "token", u.pos[k]);
                        cJSON_AddItemToArray(nd, o);
                    }
                    cJSON_AddItemToObject(uj, "needle_list", nd);
                    cJSON_AddNumberToObject(uj, "context_tokens", u.n_prompt);
                    const gen_refs gr = {.refs = refs, .n_refs = u.n_gold};
                    int want = u.n_gold;
                    rc = gen_unit(c, unit, uj, u.prompt, u.n_prompt - 1, u.prompt + u.n_prompt - 1, 1,
                                  c->max_new > 0 ? c->max_new : 128, skv_niah_stop, &want, gold, GEN_NIAH, &gr);
                    skv_niah_free(&u);
                }
    free(fill); free(pre); free(mid);
    return rc;
}

/* longbench: per subset its first --limit records, LongBench's prompt (template, middle
 * truncation to --max-length tokens, --chat), greedy up to the subset's generation length */
static int run_longbench(eval_cfg *c) {
    const int limit = c->limit > 0 ? c->limit : 20;
    c->work_total = (double)limit * c->n_subsets * n_cells(c);
    const skv_eval_pol *pl[MAXL];
    const int npl = grid_pols(c, pl);
    int rc = CLI_OK;
    for (int si = 0; si < c->n_subsets && rc == CLI_OK; si++) {
        char *tmpl = NULL;
        int max_gen = 0;
        cJSON *recs = skv_longbench_load(c->data_dir, c->subsets[si], &tmpl, &max_gen);
        if (!recs) {
            if (!strcmp(c->subsets[si], "multi_news")) skv_eval_need(c->data_dir, "multi_news");   /* say how to get it */
            return cli_fail("longbench");
        }
        const int n_rec = cJSON_GetArraySize(recs);
        for (int i = 0; i < limit && i < n_rec && rc == CLI_OK; i++) {
            char unit[160];
            snprintf(unit, sizeof unit, "%s#%d,max_length=%d", c->subsets[si], i, c->max_length);
            if (!take_unit(c, unit, pl, npl, n_cells(c))) continue;
            const cJSON *rec = cJSON_GetArrayItem(recs, i), *ans = cJSON_GetObjectItemCaseSensitive(rec, "answers");
            int n_full = 0, *ids = NULL;
            char *prompt = skv_format_fields(tmpl, rec);
            char *cut = prompt ? skv_longbench_truncate(c->llm->tok, prompt, c->max_length, &n_full) : NULL;
            const int n = cut ? encode_prompt(c, cut, &ids) : -1;
            if (n < 2) {
                rc = cli_fail(unit);
            } else {
                const char *refs[64];
                int nr = 0;
                const cJSON *a;
                cJSON_ArrayForEach(a, ans) if (nr < 64) refs[nr++] = a->valuestring;
                cJSON *uj = cJSON_CreateObject();
                cJSON_AddStringToObject(uj, "subset", c->subsets[si]);
                cJSON_AddNumberToObject(uj, "index", i);
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "_id"), *len = cJSON_GetObjectItemCaseSensitive(rec, "length");
                if (cJSON_IsString(id)) cJSON_AddStringToObject(uj, "id", id->valuestring);
                if (cJSON_IsNumber(len)) cJSON_AddNumberToObject(uj, "length_words", len->valuedouble);
                cJSON_AddNumberToObject(uj, "max_length", c->max_length);
                cJSON_AddNumberToObject(uj, "prompt_tokens_full", n_full);
                cJSON_AddBoolToObject(uj, "truncated", n_full > c->max_length);
                cJSON_AddItemToObject(uj, "answers", cJSON_Duplicate(ans, 1));
                const gen_refs gr = {.refs = refs, .n_refs = nr};
                rc = gen_unit(c, unit, uj, ids, n - 1, ids + n - 1, 1, c->max_new > 0 ? c->max_new : max_gen, NULL, NULL,
                              refs[0], GEN_LONGBENCH, &gr);
            }
            free(ids); free(cut); free(prompt);
        }
        cJSON_Delete(recs);
        free(tmpl);
    }
    return rc;
}

/* ------------------------------------------------------------------ main */

/* ------------------------------------------------------------------ shards */

/* The shard files of out (out.rankK, K digits), sorted by K; *names heap (each heap). */
static int shard_files(const char *out, char ***names) {
    *names = NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : out;
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (slash && slash == dir) snprintf(dir, sizeof dir, "/");
    char pre[4200];
    snprintf(pre, sizeof pre, "%s.rank", base);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    long *ranks = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t l = strlen(pre);
        if (strncmp(e->d_name, pre, l) || !e->d_name[l]) continue;
        const char *k = e->d_name + l;
        if (strspn(k, "0123456789") != strlen(k) || strlen(k) > 9) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            long *nr = realloc(ranks, (size_t)cap * sizeof *nr);
            if (nn) *names = nn;
            if (nr) ranks = nr;
            if (!nn || !nr) break;
        }
        char path[8400];
        snprintf(path, sizeof path, "%s%s%s", slash ? dir : "", slash ? (strcmp(dir, "/") ? "/" : "") : "", e->d_name);
        if (!((*names)[n] = skv_strdup(path))) break;
        ranks[n++] = atol(k);
    }
    closedir(d);
    for (int i = 1; i < n; i++)   /* by rank */
        for (int j = i; j > 0 && ranks[j] < ranks[j - 1]; j--) {
            long r = ranks[j]; ranks[j] = ranks[j - 1]; ranks[j - 1] = r;
            char *t = (*names)[j]; (*names)[j] = (*names)[j - 1]; (*names)[j - 1] = t;
        }
    free(ranks);
    return n;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Fold the shard files into out's records: the records of unit order[0], then order[1], ...
 * (each from every shard, shards by rank, within a shard in its order), then any others, a
 * later key replacing an earlier one; out is saved atomically, then the shard files are
 * removed (all stay when one cannot be read). 0 or -1 + error. */
static int merge_shards(const char *out, char *const *order, int n_order, int *merged_records) {
    char **names = NULL;
    const int ns = shard_files(out, &names);
    *merged_records = 0;
    if (ns <= 0) { free_names(names, ns > 0 ? ns : 0); return 0; }
    skv_eval_store *m = skv_store_open(NULL), *prev = access(out, F_OK) == 0 ? skv_store_load(out) : NULL;
    skv_eval_store **sh = skv_calloc((size_t)ns, sizeof *sh, "shards");
    int rc = -1;
    if (!m || !sh || (access(out, F_OK) == 0 && !prev)) goto done;
    if (prev && skv_store_merge(m, prev)) goto done;
    for (int i = 0; i < ns; i++)
        if (!(sh[i] = skv_store_load(names[i]))) goto done;
    /* taken[i][j]: record j of shard i is in m already */
    for (int u = 0; u <= n_order; u++) {
        for (int i = 0; i < ns; i++) {
            cJSON *r;
            cJSON_ArrayForEach(r, sh[i]->records) {
                if (cJSON_GetObjectItemCaseSensitive(r, "_merged")) continue;
                const char *key = cJSON_GetObjectItemCaseSensitive(r, "key")->valuestring;
                if (u < n_order && strncmp(key, order[u], strlen(order[u]))) continue;
                cJSON *dup = cJSON_Duplicate(r, 1);
                if (!dup || skv_store_add(m, dup)) goto done;
                cJSON_AddTrueToObject(r, "_merged");
                (*merged_records)++;
            }
        }
    }
    if (!(m->path = skv_strdup(out)) || skv_store_save(m)) goto done;
    for (int i = 0; i < ns; i++) unlink(names[i]);
    rc = 0;
done:
    if (rc) skv_error_prefix("merging the shard files of %s", out);
    if (sh) for (int i = 0; i < ns; i++) skv_store_free(sh[i]);
    free(sh);
    skv_store_free(prev);
    skv_store_free(m);
    free_names(names, ns);
    return rc;
}

/* Where records go and what counts as done. One process: out itself (shard files left by
 * an interrupted sharded run merged into it first). Sharded (size > 1): c->done holds out's
 * and every shard file's records as they are now, c->store is this rank's shard file.
 * 0 or -1 + error. */
static int open_stores(eval_cfg *c) {
    if (c->size <= 1) {
        int merged = 0;
        if (merge_shards(c->out, NULL, 0, &merged)) return -1;
        if (merged) fprintf(stderr, "smallkv: merged %d records from the shard files of %s\n", merged, c->out);
        if (!(c->store = skv_store_open(c->out))) return -1;
        c->before = skv_store_count(c->store);
        return 0;
    }
    if (!(c->done = skv_store_open(NULL))) return -1;
    if (access(c->out, F_OK) == 0) {
        skv_eval_store *o = skv_store_load(c->out);
        if (!o || skv_store_merge(c->done, o)) { skv_store_free(o); return -1; }
        c->before = skv_store_count(o);
        skv_store_free(o);
    }
    char **names = NULL;
    const int ns = shard_files(c->out, &names);
    for (int i = 0; i < ns; i++) {
        skv_eval_store *o = skv_store_load(names[i]);
        if (!o || skv_store_merge(c->done, o)) { skv_store_free(o); free_names(names, ns); return -1; }
        skv_store_free(o);
    }
    free_names(names, ns);
    char shard[4400];
    snprintf(shard, sizeof shard, "%.4300s.rank%d", c->out, c->rank);
    return (c->store = skv_store_open(shard)) ? 0 : -1;
}

/* sharded: every rank's flag, combined (MPI_MIN of ok / MPI_MAX of a code) */
static int all_min(const eval_cfg *c, int v) {
#ifdef SKV_MPI
    int r = v;
    if (c->size > 1) MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return r;
#else
    (void)c;
    return v;
#endif
}
static int all_max(const eval_cfg *c, int v) {
#ifdef SKV_MPI
    int r = v;
    if (c->size > 1) MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return r;
#else
    (void)c;
    return v;
#endif
}

static void free_cfg(eval_cfg *c) {
    for (int i = 0; i < c->n_pols; i++) free(c->pol_specs[i]);
    for (int i = 0; i < c->n_corpora; i++) free(c->corpora[i]);
    for (int i = 0; i < c->n_bbh; i++) free(c->bbh_tasks[i]);
    for (int i = 0; i < c->n_subsets; i++) free(c->subsets[i]);
    free_names(c->order, c->n_order);
    skv_store_free(c->done);
    skv_store_free(c->store);
    skv_profile_free(c->prof);
    smallkv_pair_free(c->pair);   /* before the models it borrows */
    skv_model_free(c->slm);
    skv_model_free(c->llm);
}

/* stderr of a rank > 0, silenced while the arguments are checked (-1: not silenced) */
static int g_restore_stderr = -1;

/* Open the results (open_stores), load the models and the profile. 0 or -1 (message printed). */
static int eval_setup(eval_cfg *c, bool need_slm) {
    /* before anything loads: a build without CUDA, or a machine without a GPU, says so */
    if (!api_device(c->device)) { cli_fail("eval"); return -1; }
    if (open_stores(c)) { cli_fail(NULL); return -1; }
    if (!(c->llm = cli_load(c->llm_path))) return -1;
    if (!c->llm->tok) { fprintf(stderr, "smallkv: %s has no tokenizer\n", c->llm_path); return -1; }
    if (skv_fp_from_model(c->llm, false, &c->fp_llm)) { cli_fail(c->llm_path); return -1; }
    if (need_slm) {
        if (!(c->slm = cli_load(c->slm_path))) return -1;
        if (skv_fp_from_model(c->slm, false, &c->fp_slm)) { cli_fail(c->slm_path); return -1; }
        if (strcmp(c->fp_slm.tokenizer_hash, c->fp_llm.tokenizer_hash)) {
            fprintf(stderr, "smallkv: SLM %s and LLM %s do not share a tokenizer\n", c->slm_path, c->llm_path);
            return -1;
        }
    }
    if (!(c->pair = api_pair_borrow(c->llm, c->slm))) { cli_fail(NULL); return -1; }
    if (c->profile_path) {
        if (!(c->prof = skv_profile_load(c->profile_path))) { cli_fail(NULL); return -1; }
        if (c->slm && skv_profile_check_models(c->prof, &c->fp_slm, &c->fp_llm)) { cli_fail(c->profile_path); return -1; }
        if (skv_sha256_file(c->profile_path, c->prof_sha)) { cli_fail(NULL); return -1; }
    }
    return 0;
}

static int eval_main(int argc, char **argv, int rank, int size) {
    if (argc >= 2 && !strcmp(argv[1], "report")) return rank ? CLI_OK : cmd_eval_report(argc - 1, argv + 1);
    eval_cfg c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = size;
    c.kv = "f16";
    c.device = "cpu";
    c.tokens = 2048; c.prefill = 512; c.batch = 16; c.variants = 3;
    c.max_kl_rise = 0.05;
    c.needles = 4; c.max_length = 3500;
    bool tokens_given = false, lengths_given = false, variants_given = false;
    const char *niah_kinds = "single,multikey,multivalue", *subsets = "multi_news";
    c.data_dir = getenv("SKV_DATA_DIR") && *getenv("SKV_DATA_DIR") ? getenv("SKV_DATA_DIR") : "data";
    const char *pols = "full,streamingllm,h2o,snapkv,pyramidkv,adakv,smallkv", *budgets = "0.05,0.1,0.2,0.4";
    const char *corpora = "wikitext2,pg-essays", *lengths = "1024,2048,4096", *depths = "0,25,50,75,100";
    const char *bbh = "date_understanding,logical_deduction_five_objects,tracking_shuffled_objects_five_objects,multistep_arithmetic_two";
    bool mapping_given = false;
    size_t nd = 0;
    int o = snprintf(c.command, sizeof c.command, "smallkv");
    for (int i = 0; i < argc && o < (int)sizeof c.command - 1; i++)
        o += snprintf(c.command + o, sizeof c.command - o, " %s", argv[i]);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (cli_is_help(a)) { fputs(EVAL_USAGE, stdout); fputs(skv_policy_help(), stdout); free_cfg(&c); return CLI_OK; }
        else if (!strcmp(a, "--llm")) ok = cli_str(argc, argv, &i, &c.llm_path);
        else if (!strcmp(a, "--slm")) ok = cli_str(argc, argv, &i, &c.slm_path);
        else if (!strcmp(a, "--profile")) ok = cli_str(argc, argv, &i, &c.profile_path);
        else if (!strcmp(a, "--policies")) ok = cli_str(argc, argv, &i, &pols);
        else if (!strcmp(a, "--budgets")) ok = cli_str(argc, argv, &i, &budgets);
        else if (!strcmp(a, "--granularity")) {
            const char *v = NULL;
            ok = cli_str(argc, argv, &i, &v);
            if (ok && strcmp(v, "kv") && strcmp(v, "head")) {
                free_cfg(&c);
                return cli_usage_error(EVAL_USAGE, "eval: --granularity must be kv or head, not '%s'", v);
            }
            if (ok) c.ctx.per_head = !strcmp(v, "head");
        }
        else if (!strcmp(a, "--budget-base")) {
            const char *v = NULL;
            ok = cli_str(argc, argv, &i, &v);
            if (ok && strcmp(v, "length") && strcmp(v, "prompt")) {
                free_cfg(&c);
                return cli_usage_error(EVAL_USAGE, "eval: --budget-base must be length or prompt, not '%s'", v);
            }
            if (ok) c.ctx.budget_prompt = !strcmp(v, "prompt");
        }
        else if (!strcmp(a, "--corpora")) ok = cli_str(argc, argv, &i, &corpora);
        else if (!strcmp(a, "--lengths")) { ok = cli_str(argc, argv, &i, &lengths); lengths_given = true; }
        else if (!strcmp(a, "--niah-kinds")) ok = cli_str(argc, argv, &i, &niah_kinds);
        else if (!strcmp(a, "--needles")) ok = cli_int(argc, argv, &i, 2, SKV_NIAH_MAX_NEEDLES, &c.needles);
        else if (!strcmp(a, "--pad-to")) ok = cli_int(argc, argv, &i, 16, 1 << 20, &c.pad_to);
        else if (!strcmp(a, "--subsets")) ok = cli_str(argc, argv, &i, &subsets);
        else if (!strcmp(a, "--max-length")) ok = cli_int(argc, argv, &i, 16, 1 << 20, &c.max_length);
        else if (!strcmp(a, "--depths")) ok = cli_str(argc, argv, &i, &depths);
        else if (!strcmp(a, "--bbh-tasks")) ok = cli_str(argc, argv, &i, &bbh);
        else if (!strcmp(a, "--slm-depths")) ok = cli_str(argc, argv, &i, &c.slm_depths);
        else if (!strcmp(a, "--write-profile")) ok = cli_str(argc, argv, &i, &c.write_profile);
        else if (!strcmp(a, "--max-kl-rise")) {
            const char *v = NULL;
            char *end;
            if ((ok = cli_str(argc, argv, &i, &v))) {
                c.max_kl_rise = strtod(v, &end);
                if (*end || end == v || !(c.max_kl_rise >= 0 && c.max_kl_rise <= 100)) {
                    free_cfg(&c);
                    return cli_usage_error(EVAL_USAGE, "eval: --max-kl-rise '%s' must be a number in [0, 100]", v);
                }
            }
        }
        else if (!strcmp(a, "--data")) ok = cli_str(argc, argv, &i, &c.data_dir);
        else if (!strcmp(a, "--kv")) ok = cli_str(argc, argv, &i, &c.kv);
        else if (!strcmp(a, "--gemm")) ok = cli_str(argc, argv, &i, &c.gemm);
        else if (!strcmp(a, "--prefill-attn")) ok = cli_prefill_attn(argc, argv, &i);
        else if (!strcmp(a, "--device")) ok = cli_str(argc, argv, &i, &c.device);
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) ok = cli_str(argc, argv, &i, &c.out);
        else if (!strcmp(a, "--limit")) ok = cli_int(argc, argv, &i, 1, 1000000, &c.limit);
        else if (!strcmp(a, "--tokens")) { ok = cli_int(argc, argv, &i, 3, 1 << 20, &c.tokens); tokens_given = true; }
        else if (!strcmp(a, "--prefill")) ok = cli_int(argc, argv, &i, 1, 1 << 20, &c.prefill);
        else if (!strcmp(a, "--max-new")) ok = cli_int(argc, argv, &i, 1, 1 << 16, &c.max_new);
        else if (!strcmp(a, "--chat")) c.chat = true;
        else if (!strcmp(a, "--chat-turns")) c.chat = c.chat_turns = true;
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) ok = cli_int(argc, argv, &i, 1, 4096, &c.threads);
        else if (!strcmp(a, "--batch")) ok = cli_int(argc, argv, &i, 1, 64, &c.batch);
        else if (!strcmp(a, "--variants")) { ok = cli_int(argc, argv, &i, 1, 8, &c.variants); variants_given = true; }
        else if (!strcmp(a, "--draft")) ok = cli_int(argc, argv, &i, 0, 10, &c.draft);
        else if (a[0] == '-' && a[1] == '-' && skv_policy_any_option(a + 2)) {
            /* a policy option: the default of every cell whose policy has it */
            const skv_opt_desc *od = skv_policy_any_option(a + 2);
            const char *v = NULL;
            if (od->type != SKV_OPT_BOOL && !(ok = cli_str(argc, argv, &i, &v))) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, NULL); }
            if (skv_policy_option_check(a + 2, v)) {
                free_cfg(&c);
                return cli_usage_error(EVAL_USAGE, "eval: %s", skv_last_error());
            }
            if (!strcmp(od->name, "mapping")) mapping_given = true;
            nd += (size_t)snprintf(c.defaults + nd, nd < sizeof c.defaults ? sizeof c.defaults - nd : 0, "%s%s%s%s",
                                   nd ? "," : "", od->name, v ? "=" : "", v ? v : "");
            if (nd >= sizeof c.defaults) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, "eval: too many policy options"); }
        }
        else if (a[0] == '-' && a[1]) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, "eval: unknown option '%s'", a); }
        else if (!c.task) c.task = a;
        else { free_cfg(&c); return cli_usage_error(EVAL_USAGE, "eval: unexpected argument '%s'", a); }
        if (!ok) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, NULL); }
    }
    if (c.task && !strcmp(c.task, "depth")) {   /* its own defaults; cells timed one by one */
        if (!strcmp(budgets, "0.05,0.1,0.2,0.4")) budgets = "0.2";
        if (!tokens_given) c.tokens = 1024;
        c.batch = 1;
    }
    if (c.task && !strcmp(c.task, "niah")) {   /* RULER's lengths; one unit per cell */
        if (!lengths_given) lengths = "4096,8192,16384,32768";
        if (!variants_given) c.variants = 1;
    }
    int rc = CLI_USAGE;
    const char *why = NULL;
    if (!c.task) why = "missing TASK";
    else if (strcmp(c.task, "fidelity") && strcmp(c.task, "passkey") && strcmp(c.task, "gsm8k") && strcmp(c.task, "bbh") &&
             strcmp(c.task, "calibration") && strcmp(c.task, "depth") && strcmp(c.task, "niah") && strcmp(c.task, "longbench"))
        why = "unknown TASK";
    else if (!c.llm_path) why = "missing --llm";
    else if (!c.out) why = "missing -o RESULTS.json";
    else if (strcmp(c.kv, "f16") && strcmp(c.kv, "f32")) why = "--kv must be f16 or f32";
    else if (c.gemm && strcmp(c.gemm, "int8") && strcmp(c.gemm, "float")) why = "--gemm must be int8 or float";
    else if (strcmp(c.device, "cpu") && strcmp(c.device, "cuda")) why = "--device must be cpu or cuda";
    else if (c.draft && strcmp(c.device, "cpu")) why = "--draft runs on the CPU only (speculative decoding)";
    else if ((c.n_pols = split(pols, c.pol_specs, MAXL)) <= 0) why = "bad --policies";
    else if ((c.n_budgets = split_num(budgets, c.budgets, MAXL, 1e-6, 1.0)) <= 0) why = "bad --budgets (fractions in (0, 1])";
    else if ((c.n_corpora = split(corpora, c.corpora, MAXL)) <= 0) why = "bad --corpora";
    else if ((c.n_bbh = split(bbh, c.bbh_tasks, MAXL)) <= 0) why = "bad --bbh-tasks";
    else if (c.prefill + 2 > c.tokens) why = "--prefill must be at most --tokens - 2";
    if (!why) {
        double tmp[MAXL];
        if ((c.n_lengths = split_num(lengths, tmp, MAXL, 16, 1 << 20)) <= 0) why = "bad --lengths";
        for (int i = 0; i < c.n_lengths; i++) c.lengths[i] = (int)tmp[i];
        if (!why && (c.n_depths = split_num(depths, tmp, MAXL, 0, 100)) <= 0) why = "bad --depths (0..100)";
        for (int i = 0; i < c.n_depths; i++) c.depths[i] = (int)tmp[i];
    }
    if (!why) {   /* niah kinds, longbench subsets */
        char *parts[MAXL];
        const int n = split(niah_kinds, parts, SKV_NIAH_KINDS * 4);
        if (n <= 0) why = "bad --niah-kinds (single,multikey,multivalue)";
        for (int i = 0; i < (n > 0 ? n : 0); i++) {
            const int k = skv_niah_kind_parse(parts[i]);
            bool dup = false;
            for (int j = 0; j < c.n_niah_kinds; j++) dup |= c.niah_kinds[j] == k;
            if (k < 0 || dup) why = "bad --niah-kinds (single,multikey,multivalue, each once)";
            else if (c.n_niah_kinds < SKV_NIAH_KINDS) c.niah_kinds[c.n_niah_kinds++] = k;
            free(parts[i]);
        }
        if (!why && (c.n_subsets = split(subsets, c.subsets, MAXL)) <= 0) why = "bad --subsets";
        for (int i = 0; !why && i < c.n_subsets; i++)
            if (strcmp(c.subsets[i], "multi_news") && strcmp(c.subsets[i], "gov_report") && strcmp(c.subsets[i], "qmsum"))
                why = "--subsets: the ROUGE-L subsets multi_news, gov_report, qmsum";
        if (!why && c.pad_to && strcmp(c.task, "gsm8k") && strcmp(c.task, "bbh")) why = "--pad-to is for gsm8k and bbh";
        if (!why && c.chat_turns && strcmp(c.task, "gsm8k") && strcmp(c.task, "bbh")) why = "--chat-turns is for gsm8k and bbh";
        if (!why && c.chat_turns && c.pad_to) why = "--chat-turns and --pad-to do not combine (the padding has no turn)";
        if (!why && c.size > 1 && !strcmp(c.task, "depth")) why = "eval depth runs in one process (not under mpirun)";
    }
    if (why) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, "eval: %s", why); }
    if (c.gemm) skv_matmul_set_gemm_mode(strcmp(c.gemm, "float") ? SKV_GEMM_INT8_ALL : SKV_GEMM_MULTIROW);
    /* without a profile the head mapping is matched online by default */
    if (!mapping_given && !c.profile_path)
        snprintf(c.defaults + nd, sizeof c.defaults - nd, "%smapping=online", nd ? "," : "");
    bool need_slm = !strcmp(c.task, "calibration") || !strcmp(c.task, "depth");
    for (int i = 0; i < c.n_pols; i++) {
        if (skv_eval_pol_parse(c.pol_specs[i], c.defaults, &c.pols[i])) {
            fprintf(stderr, "smallkv: %s\n", skv_last_error());
            free_cfg(&c);
            return CLI_USAGE;
        }
        if (runs_slm(&c.pols[i])) need_slm = true;
        if (strcmp(c.device, "cpu") && !(c.pols[i].spec.desc->caps & SKV_POLICY_GPU)) {
            free_cfg(&c);
            return cli_usage_error(EVAL_USAGE, "eval: policy %s does not run on device %s", c.pol_specs[i], c.device);
        }
        /* drafted cells are other cells: their own label (and so key and report row) */
        if (c.draft) {
            const size_t l = strlen(c.pols[i].label);
            snprintf(c.pols[i].label + l, sizeof c.pols[i].label - l, "+draft%d", c.draft);
        }
    }
    if (c.chat && strcmp(c.task, "gsm8k") && strcmp(c.task, "bbh") && strcmp(c.task, "niah") && strcmp(c.task, "longbench")) {
        free_cfg(&c);
        return cli_usage_error(EVAL_USAGE, "eval: --chat is for gsm8k, bbh, niah and longbench");
    }
    if (c.draft) {
        if (strcmp(c.task, "passkey") && strcmp(c.task, "gsm8k") && strcmp(c.task, "bbh") && strcmp(c.task, "niah") &&
            strcmp(c.task, "longbench")) {
            free_cfg(&c);
            return cli_usage_error(EVAL_USAGE, "eval: --draft is for the generation tasks (passkey, gsm8k, bbh, niah, longbench)");
        }
        need_slm = true;   /* the drafter */
    }
    if (need_slm && !c.slm_path) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, "eval: cells that run an SLM need --slm"); }
    if (c.limit <= 0 && (!strcmp(c.task, "fidelity") || !strcmp(c.task, "calibration") || !strcmp(c.task, "depth"))) c.limit = 1;
    cli_set_threads(c.threads);
    git_commit(c.git, sizeof c.git);
    if (g_restore_stderr >= 0) { fflush(stderr); dup2(g_restore_stderr, 2); }   /* arguments fine: errors speak again */
    rc = CLI_ERR;
    /* every rank sets up, then all agree before any unit runs (the shard files are read by
     * all before any is written) */
    const int started = eval_setup(&c, need_slm) == 0;
    if (all_min(&c, started) == 0) {
        if (started) fprintf(stderr, "smallkv: eval: rank %d: another rank failed to start\n", c.rank);
        goto done;
    }
    c.ctx.pair = c.pair;
    c.ctx.device = c.device;
    c.ctx.map = c.prof ? c.prof->map : NULL;
    c.ctx.map_depth = c.prof ? c.prof->depth : 0;
    c.ctx.kv_f16 = !strcmp(c.kv, "f16");
    c.ctx.T_max = 256;
    c.ctx.batch = c.batch;
    c.t_start = skv_now();
    if (!strcmp(c.task, "fidelity")) rc = run_fidelity(&c, false);
    else if (!strcmp(c.task, "calibration")) rc = run_fidelity(&c, true);
    else if (!strcmp(c.task, "depth")) rc = run_depth(&c);
    else if (!strcmp(c.task, "passkey")) rc = run_passkey(&c);
    else if (!strcmp(c.task, "gsm8k")) rc = run_text_task(&c, 1);
    else if (!strcmp(c.task, "bbh")) rc = run_text_task(&c, 2);
    else if (!strcmp(c.task, "niah")) rc = run_niah(&c);
    else rc = run_longbench(&c);
    if (isatty(2) && c.rank == 0) fputc('\n', stderr);
    if (c.size > 1) {
        /* every rank has written its shard: rank 0 folds them into the results file, in the
         * order of the units (what finished is kept even when a rank failed) */
        const int worst = all_max(&c, rc);
        int merged = 0, mrc = 0;
        if (c.rank == 0 && merge_shards(c.out, c.order, c.n_order, &merged)) mrc = cli_fail(NULL);
#ifdef SKV_MPI
        MPI_Bcast(&mrc, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
        if (rc == CLI_OK && worst != CLI_OK) {
            if (c.rank == 0) fprintf(stderr, "smallkv: eval: another rank failed\n");
            rc = worst;
        }
        if (rc == CLI_OK && mrc) rc = mrc;
        if (rc == CLI_OK && c.rank == 0) {
            skv_eval_store *m = skv_store_open(c.out);
            const int total = m ? skv_store_count(m) : 0;
            skv_store_free(m);
            printf("%s: %d records (%d new) in %.1f s, %d ranks\n", c.out, total, total - c.before, skv_now() - c.t_start,
                   c.size);
        }
    } else if (rc == CLI_OK) {
        printf("%s: %d records (%d new) in %.1f s\n", c.out, skv_store_count(c.store), skv_store_count(c.store) - c.before,
               skv_now() - c.t_start);
    }
done:
    free_cfg(&c);
    return rc;
}

/* The command: one process, or (SKV_MPI) one rank of several: ranks other than 0 print no
 * usage errors and no results line (stdout goes to /dev/null there), and show no progress. */
int cmd_eval(int argc, char **argv) {
#ifdef SKV_MPI
    int inited = 0, rank = 0, size = 1;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int saved_err = -1;
    if (rank > 0) {   /* rank 0 speaks for all about the arguments */
        fflush(stdout); fflush(stderr);
        const int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) { dup2(dn, 1); saved_err = dup(2); dup2(dn, 2); close(dn); }
    }
    g_restore_stderr = saved_err;
    const int rc = eval_main(argc, argv, rank, size);
    if (saved_err >= 0) { fflush(stderr); dup2(saved_err, 2); close(saved_err); }
    if (!inited) MPI_Finalize();
    return rc;
#else
    return eval_main(argc, argv, 0, 1);
#endif
}
