/* calibrate.c: the calibrate command line (method.md section 3): parse options, run
 * skv_calib_run (calibrate/calib_run.h) for one shard, print a summary and the timing split.
 * Built with SKV_MPI (`make MPI=1` -> build/bin/calibrate-mpi): rank r of n runs shard r/n
 * into OUT.part-r-of-n (checkpointed, resumable), then the fixed-point sums are reduced to
 * rank 0 with MPI_Reduce (int64 addition: exact) and the window lists and per-window
 * statistics gathered; rank 0 writes OUT, identical to mapgen merging the n shard files. */
#include <math.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "calib.h"
#include "calib_run.h"
#include "common/util.h"
#ifdef SKV_MPI
#include <mpi.h>
#endif

static void usage(FILE *f) {
    fprintf(f,
        "usage: calibrate --slm SLM --llm LLM --corpus FILE [--corpus FILE ...] -o OUT [options]\n"
        "Measure how alike every LLM head's attention is to every SLM head's over windows of\n"
        "text and write a calibration file (input of mapgen).\n"
        "  --slm PATH             small model (GGUF file or Hugging Face directory)\n"
        "  --llm PATH             large model. With the SLM's tokenizer: one token stream for\n"
        "                         both. With another tokenizer: windows are cut from the LLM's\n"
        "                         tokens, the SLM tokenises the same text, and heads are compared\n"
        "                         over the tokens both split alike (byte spans; the file records\n"
        "                         the matched share). Such a file gives a report, not a profile\n"
        "  --corpus [NAME=]FILE   text corpus (repeatable, at most %d; tokenised one by one and\n"
        "                         concatenated in the given order; windows never straddle two).\n"
        "                         Recorded as NAME (letters, digits, . _ + -; default: the file's\n"
        "                         name without its folder) with its size and sha256, never a path\n"
        "  -o, --output OUT       calibration file to write (checkpointed atomically)\n"
        "  --window N             tokens per window (default 512)\n"
        "  --windows N            windows in the whole run, shared out evenly across the corpora\n"
        "                         (default: every whole window of every corpus)\n"
        "  --metrics LIST         comma list of jaccard,cosine,rowcos (default: all three)\n"
        "  --topk K               K of the top-K Jaccard overlap (default 10%% of the window)\n"
        "  --sinks N              first keys dropped before comparing heads (default 4)\n"
        "  --normalise            divide scores by the number of queries that saw each key\n"
        "  --seed S               0 (default): evenly spaced windows; else a seeded random choice\n"
        "  --shard i/N            do the windows w with w %% N == i (merge shards with mapgen)\n"
        "  --only-corpus C        do only the windows of corpus C (0-based; files of the same plan\n"
        "                         merge with mapgen, so corpora can be compared, then combined)\n"
        "  --threads N            OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
        "  --resume               continue OUT: skip the windows it already holds\n"
        "  --force                overwrite an existing OUT instead of refusing\n"
        "  --checkpoint-every N   write OUT every N windows (default 8) and at the end\n"
        "  --max-windows N        stop after adding N windows (continue later with --resume)\n"
        "  --until-stable LOSS    stop at a checkpoint once the head mapping has settled: the\n"
        "                         even and the odd windows, mapped on their own, lose at most\n"
        "                         LOSS (e.g. 0.01) of each other's matched similarity (jaccard;\n"
        "                         at least 4 windows a half); windows then run in a spread order\n"
        "  -q, --quiet            no progress line and no summary\n"
        "  -h, --help             this text\n"
        "Progress (windows, tokens/s, ETA) is shown when stderr is a terminal.\n",
        SKV_CALIB_MAX_CORPORA);
}

static int bad_arg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "calibrate: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(run 'calibrate --help' for usage)\n");
    return 2;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_metrics(const char *s, unsigned *mask) {
    *mask = 0;
    char buf[128];
    if (strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int m = skv_metric_parse(tok);
        if (m < 0) return -1;
        *mask |= SKV_METRIC_BIT(m);
    }
    return *mask ? 0 : -1;
}

#ifdef SKV_MPI
/* Reduce every rank's shard accumulator (file `part`) into `out` on rank 0. Collective;
 * returns 0 on every rank when all succeeded. */
static int mpi_reduce_parts(const char *part, const char *out, int rank, int size, bool quiet) {
    skv_calib *c = skv_calib_read(part);
    int ok = c != NULL, all_ok = 0;
    if (!ok) fprintf(stderr, "calibrate: rank %d: %s\n", rank, skv_last_error());
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) { skv_calib_free(c); return -1; }
    /* every rank must hold the same shape (same models and settings); check on rank 0 via sizes */
    long long shape[3] = {c->n_metrics, c->n_llm, c->n_slm}, shape0[3];
    memcpy(shape0, shape, sizeof shape);
    MPI_Bcast(shape0, 3, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    ok = memcmp(shape, shape0, sizeof shape) == 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) { if (rank == 0) fprintf(stderr, "calibrate: ranks disagree on the calibration shape\n"); skv_calib_free(c); return -1; }
    size_t nsum = (size_t)c->n_metrics * 2 * c->n_llm * c->n_slm;
    int row = c->n_metrics * c->llm.n_layer;
    int64_t *sums = rank == 0 ? malloc(nsum * sizeof *sums) : NULL;
    int nw = (int)c->n_windows, *counts = NULL, *displs = NULL, *rcounts = NULL, *rdispls = NULL, total = 0;
    long long tok = c->tokens, tokens = 0;
    if (rank == 0) {
        counts = calloc((size_t)size, sizeof *counts); displs = calloc((size_t)size, sizeof *displs);
        rcounts = calloc((size_t)size, sizeof *rcounts); rdispls = calloc((size_t)size, sizeof *rdispls);
        if (!sums || !counts || !displs || !rcounts || !rdispls) { fprintf(stderr, "calibrate: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    }
    /* exact: int64 sums of fixed-point values (chunks keep counts within int) */
    for (size_t off = 0; off < nsum; off += (size_t)1 << 28) {
        size_t n = nsum - off < ((size_t)1 << 28) ? nsum - off : ((size_t)1 << 28);
        MPI_Reduce(c->sums + off, rank == 0 ? sums + off : NULL, (int)n, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    /* the split halves survive only when every rank has them (as in skv_calib_merge) */
    int has_half = c->half != NULL, all_half = 0;
    MPI_Allreduce(&has_half, &all_half, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int64_t *half = NULL;
    if (all_half) {
        size_t nhalf = nsum / 2;
        if (rank == 0 && !(half = malloc(nhalf * sizeof *half))) { fprintf(stderr, "calibrate: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
        for (size_t off = 0; off < nhalf; off += (size_t)1 << 28) {
            size_t n = nhalf - off < ((size_t)1 << 28) ? nhalf - off : ((size_t)1 << 28);
            MPI_Reduce(c->half + off, rank == 0 ? half + off : NULL, (int)n, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Reduce(&tok, &tokens, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    /* cross-tokenizer runs: the alignment's token counts add up like the sums */
    long long al[3] = {c->align.llm_tokens, c->align.slm_tokens, c->align.matched}, al_sum[3] = {0, 0, 0};
    MPI_Reduce(al, al_sum, 3, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Gather(&nw, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int32_t *wins = NULL;
    float *wst = NULL;
    if (rank == 0) {
        for (int r = 0; r < size; r++) { displs[r] = total; total += counts[r]; rcounts[r] = counts[r] * row; rdispls[r] = displs[r] * row; }
        wins = malloc((size_t)(total ? total : 1) * sizeof *wins);
        wst = malloc((size_t)(total ? total : 1) * row * sizeof *wst);
        if (!wins || !wst) { fprintf(stderr, "calibrate: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    }
    MPI_Gatherv(c->windows, nw, MPI_INT32_T, wins, counts, displs, MPI_INT32_T, 0, MPI_COMM_WORLD);
    MPI_Gatherv(c->wstat, nw * row, MPI_FLOAT, wst, rcounts, rdispls, MPI_FLOAT, 0, MPI_COMM_WORLD);
    int rc = 0;
    if (rank == 0) {
        /* rank 0's accumulator becomes the merged one: all shards, all windows */
        free(c->sums); c->sums = sums; sums = NULL;
        free(c->half); c->half = half; half = NULL;
        free(c->windows); c->windows = wins; wins = NULL;
        free(c->wstat); c->wstat = wst; wst = NULL;
        c->n_windows = c->cap_windows = total;
        c->tokens = tokens;
        c->align.llm_tokens = al_sum[0]; c->align.slm_tokens = al_sum[1]; c->align.matched = al_sum[2];
        int32_t *sh = malloc((size_t)size * sizeof *sh);
        if (!sh) { fprintf(stderr, "calibrate: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
        for (int r = 0; r < size; r++) sh[r] = r;
        free(c->shards); c->shards = sh; c->n_shards = size;
        rc = skv_calib_write(c, out);
        if (rc) fprintf(stderr, "calibrate: %s\n", skv_last_error());
        else if (!quiet) printf("reduced %d ranks: %d windows, %lld tokens -> %s\n", size, total, tokens, out);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(sums); free(half); free(wins); free(wst); free(counts); free(displs); free(rcounts); free(rdispls);
    skv_calib_free(c);
    return rc;
}
#endif

int main(int argc, char **argv) {
    skv_calib_run_opts o;
    skv_calib_run_defaults(&o);
    static char names[SKV_CALIB_MAX_CORPORA][SKV_CORPUS_NAME_MAX + 1];
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        const char *v = has ? argv[i + 1] : NULL;
#define NEED() do { if (!has) return bad_arg("%s needs a value", a); i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--slm")) { NEED(); o.slm_path = v; }
        else if (!strcmp(a, "--llm")) { NEED(); o.llm_path = v; }
        else if (!strcmp(a, "--corpus")) {
            NEED();
            if (o.n_corpora >= SKV_CALIB_MAX_CORPORA) return bad_arg("at most %d corpora", SKV_CALIB_MAX_CORPORA);
            /* NAME=FILE names the corpus in the file written; a FILE whose name holds '='
             * is taken whole when what precedes the '=' is no valid name */
            const char *eq = strchr(v, '=');
            char name[SKV_CORPUS_NAME_MAX + 1];
            size_t nl = eq ? (size_t)(eq - v) : 0;
            if (eq && nl <= SKV_CORPUS_NAME_MAX) {
                memcpy(name, v, nl);
                name[nl] = 0;
            }
            if (eq && nl <= SKV_CORPUS_NAME_MAX && skv_corpus_name_ok(name) && eq[1]) {
                snprintf(names[o.n_corpora], sizeof names[0], "%s", name);
                o.corpus_names[o.n_corpora] = names[o.n_corpora];
                o.corpora[o.n_corpora++] = eq + 1;
            } else {
                o.corpora[o.n_corpora++] = v;
            }
        }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { NEED(); o.out = v; }
        else if (!strcmp(a, "--window")) { NEED(); if (parse_int(v, 8, 1 << 20, &o.window)) return bad_arg("--window '%s' must be an integer in [8, 1048576]", v); }
        else if (!strcmp(a, "--windows")) { NEED(); if (parse_int(v, 1, 1 << 22, &o.windows)) return bad_arg("--windows '%s' must be a positive integer (at most 4194304)", v); }
        else if (!strcmp(a, "--topk")) { NEED(); if (parse_int(v, 1, 1 << 20, &o.topk)) return bad_arg("--topk '%s' must be a positive integer", v); }
        else if (!strcmp(a, "--sinks")) { NEED(); if (parse_int(v, 0, 1 << 20, &o.sinks)) return bad_arg("--sinks '%s' must be a non-negative integer", v); }
        else if (!strcmp(a, "--normalise") || !strcmp(a, "--normalize")) o.normalized = true;
        else if (!strcmp(a, "--metrics")) { NEED(); if (parse_metrics(v, &o.metrics)) return bad_arg("--metrics '%s': expected a comma list of jaccard, cosine, rowcos", v); }
        else if (!strcmp(a, "--seed")) {
            NEED();
            char *end; errno = 0;
            unsigned long long s = strtoull(v, &end, 0);
            if (errno || end == v || *end || v[0] == '-') return bad_arg("--seed '%s' must be a non-negative integer", v);
            o.seed = s;
        }
        else if (!strcmp(a, "--shard")) {
            NEED();
            int si, sn, len = 0;
            if (sscanf(v, "%d/%d%n", &si, &sn, &len) != 2 || v[len] || sn < 1 || sn > 65536 || si < 0 || si >= sn)
                return bad_arg("--shard '%s' must be i/N with 0 <= i < N", v);
            o.shard_index = si; o.shard_count = sn;
        }
        else if (!strcmp(a, "--only-corpus")) { NEED(); if (parse_int(v, 0, SKV_CALIB_MAX_CORPORA - 1, &o.only_corpus)) return bad_arg("--only-corpus '%s' must be a corpus index", v); }
        else if (!strcmp(a, "--threads")) { NEED(); if (parse_int(v, 1, 4096, &o.threads)) return bad_arg("--threads '%s' must be a positive integer", v); }
        else if (!strcmp(a, "--resume")) o.resume = true;
        else if (!strcmp(a, "--force")) o.overwrite = true;
        else if (!strcmp(a, "--checkpoint-every")) { NEED(); if (parse_int(v, 1, 1 << 22, &o.checkpoint_every)) return bad_arg("--checkpoint-every '%s' must be a positive integer", v); }
        else if (!strcmp(a, "--until-stable")) {
            NEED();
            char *end;
            errno = 0;
            o.until_stable = strtod(v, &end);
            if (errno || *end || end == v || !(o.until_stable > 0 && o.until_stable < 1))
                return bad_arg("--until-stable '%s' must be a number in (0, 1)", v);
        }
        else if (!strcmp(a, "--max-windows")) { NEED(); if (parse_int(v, 1, 1 << 22, &o.max_new_windows)) return bad_arg("--max-windows '%s' must be a positive integer", v); }
        else if (!strcmp(a, "--test-kill-after")) { NEED(); if (parse_int(v, 1, 1 << 22, &o.kill_after)) return bad_arg("--test-kill-after '%s' must be a positive integer", v); }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else return bad_arg("unknown option '%s'", a);
#undef NEED
    }
    if (!o.slm_path || !o.llm_path) return bad_arg("%s", "both --slm and --llm are required");
    if (o.n_corpora == 0) return bad_arg("%s", "no corpus given (--corpus FILE)");
    if (!o.out) return bad_arg("%s", "no output file given (-o OUT)");
    o.progress = !quiet && isatty(STDERR_FILENO);
    o.stability_log = quiet ? NULL : stdout;

#ifdef SKV_MPI
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *final_out = o.out;
    char part[4096];
    if (size > 1) {
        if (o.shard_count > 1) { if (rank == 0) bad_arg("%s", "--shard cannot be combined with several MPI ranks"); MPI_Finalize(); return 2; }
        snprintf(part, sizeof part, "%s.part-%d-of-%d", o.out, rank, size);
        o.out = part;
        o.shard_index = rank; o.shard_count = size;
        if (rank != 0) { quiet = true; o.progress = false; }
    }
#endif
    skv_calib_run_stats st;
    int run_rc = skv_calib_run(&o, &st);
    if (run_rc) fprintf(stderr, "calibrate: %s\n", skv_last_error());
#ifdef SKV_MPI
    if (size > 1) {
        int ok = run_rc == 0, all_ok = 0;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all_ok) { if (rank == 0 && ok) fprintf(stderr, "calibrate: another rank failed\n"); MPI_Finalize(); return 1; }
        if (mpi_reduce_parts(part, final_out, rank, size, quiet)) { MPI_Finalize(); return 1; }
        unlink(part);   /* the shard checkpoint is folded into OUT */
    }
    MPI_Finalize();
#endif
    if (run_rc) return 1;
    if (!quiet) {
        printf("plan: %d windows of %d tokens;", st.planned, o.window);
        for (int c = 0; c < o.n_corpora; c++)
            printf(" %s: %lld tokens, %d windows;", o.corpora[c], (long long)st.corpus_tokens[c], st.corpus_windows[c]);
        printf("\nthis run: %d windows of this shard/corpus, %d already done, %d added\n", st.mine, st.skipped, st.done);
        if (o.until_stable > 0) {
            if (st.stable_checks == 0 || isnan(st.stable_loss))
                printf("stability: not measured (fewer than %d windows in a half)\n", SKV_STABLE_MIN_HALF);
            else
                printf("stability: %s after %d check%s: split-half loss %.2f%% (stop at %.2f%%), %.1f%% of LLM heads map alike\n",
                       st.stable ? "settled" : "not settled", st.stable_checks, st.stable_checks > 1 ? "s" : "",
                       100.0 * st.stable_loss, 100.0 * o.until_stable, 100.0 * st.stable_agree);
        }
        double fwd = st.t_fwd_slm + st.t_fwd_llm;
        if (st.done > 0 && st.t_total > 0) {
            printf("time: %.2f s setup, %.2f s windows: SLM forward %.2f s, LLM forward %.2f s, similarity %.2f s, checkpoints %.2f s\n",
                   st.t_setup, st.t_total, st.t_fwd_slm, st.t_fwd_llm, st.t_sim, st.t_ckpt);
            printf("throughput: %.1f tokens/s (window tokens, both models); outside the forward passes: %.1f%% of the window loop\n",
                   st.tokens / st.t_total, 100.0 * (st.t_total - fwd) / st.t_total);
        }
        printf("wrote %s\n", o.out);
    }
    return 0;
}
