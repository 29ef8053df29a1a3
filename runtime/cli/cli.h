/* cli.h: the pieces shared by the `smallkv` subcommands (the .c files in runtime/cli/). They
 * speak only the public API, include/smallkv.h, except `smallkv eval` (eval.c, eval_report.c),
 * which loads its models and profile itself and drives the evaluation library (eval/: public
 * sessions, plus what runtime/api/api.h adds for cells).
 * Exit codes: 0 ok, 1 error (one line "smallkv: <message>" on stderr), 2 bad arguments
 * (a one-line reason and the subcommand's usage on stderr). */
#ifndef SKV_CLI_H
#define SKV_CLI_H
#include <stdbool.h>
#include <stddef.h>

enum { CLI_OK = 0, CLI_ERR = 1, CLI_USAGE = 2 };

int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_eval(int argc, char **argv);   /* eval.c */
int cmd_profile(int argc, char **argv);
int cmd_policies(int argc, char **argv);   /* policies.c */
int cmd_serve(int argc, char **argv);     /* serve.c, runtime/serve/ */

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
/* --prefill-attn exact|bf16: sets the process-wide mode (smallkv_set_prefill_attention); with
 * bf16 on a CPU without AMX-BF16 a note on stderr says the exact kernel runs. false on a bad
 * value (reason printed). */
bool cli_prefill_attn(int argc, char **argv, int *i);
/* A long option `--NAME` or `--NAME=VALUE` (a policy option's flag): NAME into name[n] and
 * the inline VALUE (or NULL) into *value. false when `a` is not `--...` or NAME does not fit. */
bool cli_flag_name(const char *a, char *name, size_t n, const char **value);
/* omp_set_num_threads(n) when n > 0 (default: all cores). */
void cli_set_threads(int n);

#endif
