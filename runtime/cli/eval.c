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
 * end (docs/lab/long-context-tasks.md).
 * This file: the options, setup and the run; the tasks are in eval_fidelity.c and
 * eval_generate.c, keys and records in eval_records.c, shard files in eval_shards.c. */
#include "runtime/cli/eval_cfg.h"
#include "runtime/cli/cli.h"
#include "common/sha256.h"
#include "common/util.h"
#include "kernels/cpu/matmul.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    "  --OPTION VALUE       any policy option (e.g. --combine mass, --mapping=online, --sinks 8,\n"
    "                       --key-norm=false; a bare switch turns it on): the default for every\n"
    "                       cell whose policy has it\n"
    "  --budgets LIST       fractions of the full cache (default 0.05,0.1,0.2,0.4); full runs once;\n"
    "                       a policy's own list replaces it for that policy: quest@0.165/0.211\n"
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

/* Where records go and what counts as done. One process: out itself (shard files left by
 * an interrupted sharded run merged into it first). Sharded (size > 1): c->done holds out's
 * and every shard file's records as they are now, c->store is this rank's shard file.
 * 0 or -1 + error. */
static int open_stores(eval_cfg *c) {
    if (c->size <= 1) {
        int merged = 0;
        if (eval_merge_shards(c->out, NULL, 0, &merged)) return -1;
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
    const int ns = eval_shard_files(c->out, &names);
    for (int i = 0; i < ns; i++) {
        skv_eval_store *o = skv_store_load(names[i]);
        if (!o || skv_store_merge(c->done, o)) { skv_store_free(o); eval_free_names(names, ns); return -1; }
        skv_store_free(o);
    }
    eval_free_names(names, ns);
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
    eval_free_names(c->order, c->n_order);
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
        char flag[64];
        const char *inline_value = NULL;
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
        else if (cli_flag_name(a, flag, sizeof flag, &inline_value) && skv_policy_any_option(flag)) {
            /* a policy option (--NAME VALUE, --NAME=VALUE, a bare --NAME turns a switch on):
             * the default of every cell whose policy has it */
            const skv_opt_desc *od = skv_policy_any_option(flag);
            const char *v = inline_value;
            if (!v && od->type != SKV_OPT_BOOL && !(ok = cli_str(argc, argv, &i, &v))) { free_cfg(&c); return cli_usage_error(EVAL_USAGE, NULL); }
            if (skv_policy_option_check(flag, v)) {
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
    else if ((c.n_pols = eval_split(pols, c.pol_specs, MAXL)) <= 0) why = "bad --policies";
    else if ((c.n_budgets = eval_split_num(budgets, c.budgets, MAXL, 1e-6, 1.0)) <= 0) why = "bad --budgets (fractions in (0, 1])";
    else if ((c.n_corpora = eval_split(corpora, c.corpora, MAXL)) <= 0) why = "bad --corpora";
    else if ((c.n_bbh = eval_split(bbh, c.bbh_tasks, MAXL)) <= 0) why = "bad --bbh-tasks";
    else if (c.prefill + 2 > c.tokens) why = "--prefill must be at most --tokens - 2";
    for (int i = 0; !why && i < c.n_pols; i++) {   /* "SPEC@B1/B2": the policy's own budgets */
        if ((c.pol_n_budgets[i] = eval_split_pol_budgets(c.pol_specs[i], c.pol_budgets[i], MAXL)) < 0)
            why = "bad budgets after a policy's '@' (fractions in (0, 1] joined by '/', e.g. quest@0.165/0.211)";
    }
    if (!why) {
        double tmp[MAXL];
        if ((c.n_lengths = eval_split_num(lengths, tmp, MAXL, 16, 1 << 20)) <= 0) why = "bad --lengths";
        for (int i = 0; i < c.n_lengths; i++) c.lengths[i] = (int)tmp[i];
        if (!why && (c.n_depths = eval_split_num(depths, tmp, MAXL, 0, 100)) <= 0) why = "bad --depths (0..100)";
        for (int i = 0; i < c.n_depths; i++) c.depths[i] = (int)tmp[i];
    }
    if (!why) {   /* niah kinds, longbench subsets */
        char *parts[MAXL];
        const int n = eval_split(niah_kinds, parts, SKV_NIAH_KINDS * 4);
        if (n <= 0) why = "bad --niah-kinds (single,multikey,multivalue)";
        for (int i = 0; i < (n > 0 ? n : 0); i++) {
            const int k = skv_niah_kind_parse(parts[i]);
            bool dup = false;
            for (int j = 0; j < c.n_niah_kinds; j++) dup |= c.niah_kinds[j] == k;
            if (k < 0 || dup) why = "bad --niah-kinds (single,multikey,multivalue, each once)";
            else if (c.n_niah_kinds < SKV_NIAH_KINDS) c.niah_kinds[c.n_niah_kinds++] = k;
            free(parts[i]);
        }
        if (!why && (c.n_subsets = eval_split(subsets, c.subsets, MAXL)) <= 0) why = "bad --subsets";
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
        if (eval_runs_slm(&c.pols[i])) need_slm = true;
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
    eval_git_commit(c.git, sizeof c.git);
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
    if (!strcmp(c.task, "fidelity")) rc = eval_run_fidelity(&c, false);
    else if (!strcmp(c.task, "calibration")) rc = eval_run_fidelity(&c, true);
    else if (!strcmp(c.task, "depth")) rc = eval_run_depth(&c);
    else if (!strcmp(c.task, "passkey")) rc = eval_run_passkey(&c);
    else if (!strcmp(c.task, "gsm8k")) rc = eval_run_text_task(&c, 1);
    else if (!strcmp(c.task, "bbh")) rc = eval_run_text_task(&c, 2);
    else if (!strcmp(c.task, "niah")) rc = eval_run_niah(&c);
    else rc = eval_run_longbench(&c);
    if (rc == CLI_OK && c.work_total > 0) {   /* the last line: every unit met, the share exact */
        c.unit_name = "done";
        c.unit_work = 0;
        eval_show_progress(&c, 0);
    }
    if (isatty(2) && c.rank == 0) fputc('\n', stderr);
    if (c.size > 1) {
        /* every rank has written its shard: rank 0 folds them into the results file, in the
         * order of the units (what finished is kept even when a rank failed) */
        const int worst = all_max(&c, rc);
        int merged = 0, mrc = 0;
        if (c.rank == 0 && eval_merge_shards(c.out, c.order, c.n_order, &merged)) mrc = cli_fail(NULL);
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
