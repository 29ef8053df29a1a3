/* bench_cuda.c: speed of the GPU decoder (runtime/backend/forward_cuda.h) for each model present,
 * built only with `make CUDA=1` (build-cuda/bin/bench_cuda; scripts/gpu-check.sh runs it).
 *
 * Per model (fp16 KV cache, weights uploaded once with stored blocks + fp16 copies):
 *   prefill @512   one block of 512 tokens (logits of the last row), best of 3 after a
 *                  warm-up; tokens/s = 512 / time
 *   decode @S, B   B sequences (B = 1, 4, 64), each with S = 512 or 2048 tokens already in
 *                  its cache, then STEPS single-token steps (B = 1: skv_cuda_forward;
 *                  B > 1: skv_cuda_forward_batch), logits of every sequence copied back to
 *                  the host each step; tokens/s = B x STEPS / time.
 *                  Context: B = 1 at S = 512 after a real prefill; all other rows use a
 *                  SYNTHETIC cache (zeroed K/V of S tokens, skv_cuda_state_fill_synthetic:
 *                  the arithmetic of a step does not depend on the cached values).
 *   compressed     policies h2o and smallkv at budget 20 %: a session (runtime/session/session.h)
 *                  prefilled on the CPU with 512 tokens, then STEPS decode steps on the GPU
 *                  (runtime/backend/session_cuda.h: selection on the host, hot tier and attention
 *                  on the device); smallkv runs the model as its own SLM (identity map,
 *                  every layer: an upper bound of the SLM's cost). tokens/s = STEPS / time.
 * Prints a Markdown table and one JSON line ({"bench_cuda": ...}); --json FILE also writes
 * that line to FILE. A row that does not fit in device memory reports the error (with the
 * sizes) instead of numbers and the run goes on.
 * --budget S: rows that would start after S seconds are reported "not run (time budget)".
 * Usage: bench_cuda [--models DIR] [--quick] [--budget S] [--json FILE] [MODEL.gguf ...] */
#include "runtime/backend/forward_cuda.h"
#include "runtime/model/model.h"
#include "runtime/backend/session_cuda.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SKV_CUDA
int main(void) {
    fprintf(stderr, "bench_cuda: built without CUDA (make CUDA=1)\n");
    return 1;
}
#else
#include "kernels/cuda/backend.h"

#define PREFILL 512
#define MAX_ROWS 16

static const char *DEFAULT_MODELS[] = {
    "SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b.gguf", "qwen2.5-coder-1.5b.gguf",
};
static const int CTXS[] = {512, 2048};
static const int BATCHES[] = {1, 4, 64};
static const char *COMP_POLICIES[] = {"h2o", "smallkv"};
#define N_COMP 2
#define COMP_BUDGET 0.2

typedef struct {
    int ctx, batch;
    double tps;
    char err[512];
} drow;

typedef struct {
    char name[256];
    double upload_s, prefill_tps;
    size_t dev_bytes;
    char err[512];
    drow d[MAX_ROWS];
    int nd;
    double ctps[N_COMP];           /* compressed-cache decode @512, COMP_BUDGET */
    char cerr[N_COMP][512];
} mrow;

static void set_err(char *dst, size_t n) {
    snprintf(dst, n, "%s", skv_last_error());
}

/* Synthetic prompt ids (valid for any vocabulary). */
static void fake_ids(int *ids, int n, int vocab) {
    for (int i = 0; i < n; i++) ids[i] = (int)((1000u + (unsigned)i * 7919u) % (unsigned)vocab);
}

static double bench_prefill(const skv_cuda_model *dm, const skv_model *m, char *err, size_t en) {
    int ids[PREFILL];
    fake_ids(ids, PREFILL, m->cfg.vocab);
    skv_cuda_state *s = skv_cuda_state_new(dm, PREFILL, PREFILL, true);
    if (!s) { set_err(err, en); return -1; }
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    double best = 1e30;
    for (int r = 0; r < 4; r++) {      /* r = 0: warm-up (cuBLAS heuristics, workspace growth) */
        skv_cuda_state_reset(s);
        double t0 = skv_now();
        if (skv_cuda_forward(s, ids, PREFILL, &o) != 0) { set_err(err, en); skv_cuda_state_free(s); return -1; }
        double t = skv_now() - t0;
        if (r > 0 && t < best) best = t;
    }
    skv_cuda_state_free(s);
    return PREFILL / best;
}

/* B sequences at context S, `steps` decode steps. */
static double bench_decode(const skv_cuda_model *dm, const skv_model *m, int S, int B, int steps, char *err, size_t en) {
    skv_cuda_state **st = calloc((size_t)B, sizeof *st);
    int *tok = malloc((size_t)B * sizeof(int));
    skv_cuda_batch *b = NULL;
    double tps = -1;
    if (!st || !tok) { snprintf(err, en, "out of host memory"); goto out; }
    for (int i = 0; i < B; i++) {
        /* B = 1 at 512: real prefill (blocks of up to 512); otherwise a synthetic cache */
        const bool real = B == 1 && S <= PREFILL;
        if (!(st[i] = skv_cuda_state_new(dm, S + steps + 1, real ? PREFILL : 1, true))) { set_err(err, en); goto out; }
        if (real) {
            int ids[PREFILL];
            fake_ids(ids, S, m->cfg.vocab);
            skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
            if (skv_cuda_forward(st[i], ids, S, &o) != 0) { set_err(err, en); goto out; }
        } else if (skv_cuda_state_fill_synthetic(st[i], S) != 0) {
            set_err(err, en);
            goto out;
        }
        tok[i] = (int)((17u + (unsigned)i * 131u) % (unsigned)m->cfg.vocab);
    }
    if (B > 1 && !(b = skv_cuda_batch_new(dm, B))) { set_err(err, en); goto out; }
    skv_fwd_opts last = {.logits = SKV_LOGITS_LAST};
    /* one untimed step (warm-up), then the timed ones */
    double t0 = 0;
    for (int k = 0; k <= steps; k++) {
        if (k == 1) t0 = skv_now();
        int rc = B == 1 ? skv_cuda_forward(st[0], tok, 1, &last) : skv_cuda_forward_batch(b, st, tok, B, NULL);
        if (rc != 0) { set_err(err, en); goto out; }
    }
    tps = (double)B * steps / (skv_now() - t0);
out:
    skv_cuda_batch_free(b);
    if (st)
        for (int i = 0; i < B; i++) skv_cuda_state_free(st[i]);
    free(st);
    free(tok);
    return tps;
}

/* A compressed-cache session: CPU prefill of PREFILL tokens, then `steps` GPU decode steps. */
static double bench_compressed(const skv_cuda_model *dm, const skv_model *m, const char *policy, int steps, char *err,
                               size_t en) {
    int ids[PREFILL], *map = NULL;
    fake_ids(ids, PREFILL, m->cfg.vocab);
    skv_session *s = NULL;
    skv_session_cuda *g = NULL;
    double tps = -1;
    skv_session_opts o;
    skv_session_opts_default(&o);
    if (skv_policy_spec_parse(policy, &o.pol)) { set_err(err, en); return -1; }
    o.budget = COMP_BUDGET;
    o.max_ctx = PREFILL + steps + 2;
    o.T_max = PREFILL;
    o.kv_f16 = true;
    if (o.pol.desc->caps & SKV_POLICY_NEEDS_SLM) {   /* a self pair, identity mapping */
        const int n = m->cfg.n_layer * m->cfg.n_head;
        if (!(map = malloc((size_t)n * sizeof(int)))) { snprintf(err, en, "out of host memory"); return -1; }
        for (int i = 0; i < n; i++) map[i] = i;
        o.slm = m;
        o.map = map;
    }
    if (!(s = skv_session_new(m, &o)) || skv_session_prefill(s, ids, PREFILL) != 0 ||
        !(g = skv_session_cuda_new(s, dm, dm))) {
        set_err(err, en);
        goto out;
    }
    double t0 = 0;
    for (int k = 0; k <= steps; k++) {   /* k = 0: warm-up */
        if (k == 1) t0 = skv_now();
        int tok = (int)((17u + (unsigned)k * 131u) % (unsigned)m->cfg.vocab);
        if (skv_session_cuda_step(g, tok) != 0) { set_err(err, en); goto out; }
    }
    tps = steps / (skv_now() - t0);
out:
    skv_session_cuda_free(g);
    skv_session_free(s);
    free(map);
    return tps;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 32) fputc(' ', f);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void print_json(FILE *f, const char *dev, const mrow *r, int n, int steps) {
    fprintf(f, "{\"bench_cuda\": {\"device\": ");
    json_str(f, dev);
    fprintf(f, ", \"kv\": \"f16\", \"prefill_tokens\": %d, \"decode_steps\": %d, \"models\": [", PREFILL, steps);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"model\": ", i ? ", " : "");
        json_str(f, r[i].name);
        if (r[i].err[0]) {
            fprintf(f, ", \"error\": ");
            json_str(f, r[i].err);
            fprintf(f, "}");
            continue;
        }
        fprintf(f, ", \"device_bytes\": %zu, \"upload_s\": %.3f, \"prefill_tps\": %.1f, \"decode\": [", r[i].dev_bytes,
                r[i].upload_s, r[i].prefill_tps);
        for (int k = 0; k < r[i].nd; k++) {
            const drow *d = &r[i].d[k];
            fprintf(f, "%s{\"ctx\": %d, \"batch\": %d, \"synthetic\": %s, ", k ? ", " : "", d->ctx, d->batch,
                    d->batch == 1 && d->ctx <= PREFILL ? "false" : "true");
            if (d->err[0]) { fprintf(f, "\"error\": "); json_str(f, d->err); }
            else fprintf(f, "\"tps\": %.2f", d->tps);
            fprintf(f, "}");
        }
        fprintf(f, "], \"compressed\": [");
        for (int k = 0; k < N_COMP; k++) {
            fprintf(f, "%s{\"policy\": \"%s\", \"budget\": %.2f, \"ctx\": %d, ", k ? ", " : "", COMP_POLICIES[k],
                    COMP_BUDGET, PREFILL);
            if (r[i].cerr[k][0]) { fprintf(f, "\"error\": "); json_str(f, r[i].cerr[k]); }
            else fprintf(f, "\"tps\": %.2f", r[i].ctps[k]);
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}}\n");
}

int main(int argc, char **argv) {
    const char *dir = getenv("SKV_MODELS_DIR"), *json = NULL;
    if (!dir || !*dir) dir = "models";
    bool quick = false;
    double budget = 1e30;
    const char *paths[16];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--models") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = atof(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench_cuda [--models DIR] [--quick] [--budget S] [--json FILE] [MODEL.gguf ...]\n");
            return 2;
        } else if (np < 16) paths[np++] = argv[i];
    }
    const int steps = quick ? 8 : 32;
    char dev[256];
    if (skv_cuda_device_info(dev, sizeof dev) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", skv_last_error());
        return 1;
    }
    static char buf[3][1024];
    if (np == 0) {
        for (int i = 0; i < 3; i++) {
            snprintf(buf[i], sizeof buf[i], "%s/%s", dir, DEFAULT_MODELS[i]);
            FILE *f = fopen(buf[i], "rb");
            if (f) { fclose(f); paths[np++] = buf[i]; }
        }
    }
    if (np == 0) { fprintf(stderr, "bench_cuda: no model in %s\n", dir); return 1; }
    fprintf(stderr, "bench_cuda: %s\n", dev);
    const double start = skv_now();

    mrow *rows = calloc((size_t)np, sizeof *rows);
    if (!rows) return 1;
    for (int i = 0; i < np; i++) {
        mrow *r = &rows[i];
        const char *base = strrchr(paths[i], '/');
        snprintf(r->name, sizeof r->name, "%s", base ? base + 1 : paths[i]);
        if (skv_now() - start > budget) { snprintf(r->err, sizeof r->err, "not run (time budget)"); continue; }
        skv_model *m = skv_model_load(paths[i]);
        if (!m) { set_err(r->err, sizeof r->err); fprintf(stderr, "%s: %s\n", r->name, r->err); continue; }
        double t0 = skv_now();
        skv_cuda_model *dm = skv_cuda_model_upload(m, 0);
        r->upload_s = skv_now() - t0;
        if (!dm) {
            set_err(r->err, sizeof r->err);
            fprintf(stderr, "%s: %s\n", r->name, r->err);
            skv_model_free(m);
            continue;
        }
        r->dev_bytes = skv_cuda_model_bytes(dm);
        char perr[512] = "";
        r->prefill_tps = bench_prefill(dm, m, perr, sizeof perr);
        if (perr[0]) fprintf(stderr, "%s prefill: %s\n", r->name, perr);
        for (size_t c = 0; c < sizeof CTXS / sizeof CTXS[0]; c++)
            for (size_t bb = 0; bb < sizeof BATCHES / sizeof BATCHES[0] && r->nd < MAX_ROWS; bb++) {
                drow *d = &r->d[r->nd++];
                d->ctx = CTXS[c];
                d->batch = BATCHES[bb];
                if (skv_now() - start > budget) { snprintf(d->err, sizeof d->err, "not run (time budget)"); continue; }
                d->tps = bench_decode(dm, m, d->ctx, d->batch, steps, d->err, sizeof d->err);
                if (d->err[0]) fprintf(stderr, "%s decode ctx %d batch %d: %s\n", r->name, d->ctx, d->batch, d->err);
                else fprintf(stderr, "%s decode ctx %d batch %d: %.1f tok/s\n", r->name, d->ctx, d->batch, d->tps);
            }
        for (int k = 0; k < N_COMP; k++) {
            if (skv_now() - start > budget) { snprintf(r->cerr[k], sizeof r->cerr[k], "not run (time budget)"); continue; }
            r->ctps[k] = bench_compressed(dm, m, COMP_POLICIES[k], steps, r->cerr[k], sizeof r->cerr[k]);
            if (r->cerr[k][0]) fprintf(stderr, "%s %s: %s\n", r->name, COMP_POLICIES[k], r->cerr[k]);
            else fprintf(stderr, "%s %s @%d, budget %.0f%%: %.1f tok/s\n", r->name, COMP_POLICIES[k], PREFILL,
                         100 * COMP_BUDGET, r->ctps[k]);
        }
        skv_cuda_model_free(dm);
        skv_model_free(m);
    }

    printf("## GPU decoder speed (%s; fp16 KV cache; %d decode steps)\n\n", dev, steps);
    printf("| model | device MiB | prefill@512 tok/s |");
    for (size_t c = 0; c < 2; c++)
        for (size_t bb = 0; bb < 3; bb++) printf(" decode@%d b%d tok/s |", CTXS[c], BATCHES[bb]);
    printf("\n|---|---:|---:|");
    for (int k = 0; k < 6; k++) printf("---:|");
    printf("\n");
    for (int i = 0; i < np; i++) {
        const mrow *r = &rows[i];
        if (r->err[0]) { printf("| %s | error: %s |\n", r->name, r->err); continue; }
        printf("| %s | %.0f | ", r->name, (double)r->dev_bytes / 1048576.0);
        if (r->prefill_tps > 0) printf("%.0f |", r->prefill_tps);
        else printf("error |");
        for (int k = 0; k < r->nd; k++) {
            if (r->d[k].err[0]) printf(" error |");
            else printf(" %.1f |", r->d[k].tps);
        }
        printf("\n");
    }
    printf("\nbatch 1 @512: after a real prefill; other decode columns: synthetic (zeroed) cache of that many "
           "tokens per sequence; b = sequences decoded together, tok/s summed over them. Errors (e.g. out of "
           "device memory, with sizes) are in the JSON line and on stderr.\n\n");
    printf("## Compressed-cache decode on the GPU (@%d after a CPU prefill, budget %.0f %%, batch 1)\n\n", PREFILL,
           100 * COMP_BUDGET);
    printf("| model | full (decode@512 b1 above) tok/s |");
    for (int k = 0; k < N_COMP; k++) printf(" %s tok/s |", COMP_POLICIES[k]);
    printf("\n|---|---:|");
    for (int k = 0; k < N_COMP; k++) printf("---:|");
    printf("\n");
    for (int i = 0; i < np; i++) {
        const mrow *r = &rows[i];
        if (r->err[0]) continue;
        if (r->nd > 0 && !r->d[0].err[0]) printf("| %s | %.1f |", r->name, r->d[0].tps);
        else printf("| %s | error |", r->name);
        for (int k = 0; k < N_COMP; k++) {
            if (r->cerr[k][0]) printf(" error |");
            else printf(" %.1f |", r->ctps[k]);
        }
        printf("\n");
    }
    printf("\nsmallkv: the model is its own SLM (identity map, all layers), an upper bound of the SLM's cost.\n\n");
    print_json(stdout, dev, rows, np, steps);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) { fprintf(stderr, "bench_cuda: %s: cannot write\n", json); free(rows); return 1; }
        print_json(f, dev, rows, np, steps);
        fclose(f);
    }
    free(rows);
    skv_cuda_shutdown();
    return 0;
}
#endif
