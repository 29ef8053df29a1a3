/* cli.h: the pieces shared by the `smallkv` subcommands (the .c files in runtime/cli/).
 * Exit codes: 0 ok, 1 error (one line "smallkv: <message>" on stderr), 2 bad arguments
 * (a one-line reason and the subcommand's usage on stderr). */
#ifndef SKV_CLI_H
#define SKV_CLI_H
#include <stdbool.h>
#include "runtime/model/model.h"

enum { CLI_OK = 0, CLI_ERR = 1, CLI_USAGE = 2 };

int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_eval(int argc, char **argv);   /* eval/tasks.c */
int cmd_profile(int argc, char **argv);

/* `smallkv generate --device cuda` (runtime/cli/generate_cuda.c): policy full on the GPU
 * (prefill and decode, the full cache on the device), each prompt prefilled in a fresh
 * sequence and answered. */
#define CLI_GEN_CUDA_MAX_PROMPTS 64
typedef struct {
    const char *model;
    const char **prompts;
    int n_prompts;             /* <= CLI_GEN_CUDA_MAX_PROMPTS */
    bool chat;
    const char *system;
    bool kv_f16;
    int ctx;                   /* 0: what the input needs, at most the model's context */
    int n_gen;
    float temp;
    unsigned long long rng;
    bool stats;
} cli_gen_cuda;
int cli_generate_cuda(const cli_gen_cuda *a);

/* `smallkv generate --device cuda` with a compressed-cache policy (h2o, smallkv, ...): the
 * session is made and prefilled on the CPU through the public API, then its decode moves
 * to the GPU (runtime/backend/session_cuda.h). cli_answer_cuda samples from the session's logits,
 * streams up to n_gen tokens and steps on the device; the uploaded models are kept in
 * *dev across prompts (cli_gpu_free at the end). -1 + error. */
struct smallkv_pair;
struct smallkv_session;
struct skv_session;
struct skv_session *smallkv_session_runtime(struct smallkv_session *s);   /* runtime/api.c */
typedef struct cli_gpu cli_gpu;
int cli_answer_cuda(struct smallkv_pair *p, struct smallkv_session *s, float temp, unsigned long long *rng, int n_gen,
                    bool stats, cli_gpu **dev);
void cli_gpu_free(cli_gpu *dev);

/* Argument helpers: parse argv[*i + 1] as the value of option argv[*i] (advancing *i);
 * on a missing or bad value print the reason to stderr and return false. */
bool cli_int(int argc, char **argv, int *i, long lo, long hi, int *out);
bool cli_float(int argc, char **argv, int *i, double lo, double hi, float *out);
bool cli_str(int argc, char **argv, int *i, const char **out);
bool cli_is_help(const char *a);
/* Print a usage error: "smallkv CMD: reason" + usage; returns CLI_USAGE. */
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "smallkv: <skv_last_error()>" (with an optional context prefix); returns CLI_ERR. */
int cli_fail(const char *context);
/* omp_set_num_threads(n) when n > 0 (default: all cores). */
void cli_set_threads(int n);
/* Load a model and report a failure; NULL on error (message already printed). */
skv_model *cli_load(const char *path);

#endif
