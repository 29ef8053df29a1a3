/* data.h: the evaluation's inputs, built deterministically from the data folder (data/ or
 * $SKV_DATA_DIR, filled by scripts/fetch-data.sh):
 *   fidelity documents  N tokens of wikitext2 (wiki.test.raw) or pg-essays (the *.txt files
 *                       concatenated in name order, "\n\n" between), document i = tokens
 *                       [i*N, (i+1)*N) of the corpus (BOS first when the tokenizer adds one);
 *   passkey             intro + pg-essays filler with a needle ("The pass key is NNNNN.
 *                       Remember it." in phrasing 0; two other phrasings) inserted after the
 *                       first sentence end at or after the depth fraction of the filler; the
 *                       phrasing's question fed as decode steps;
 *   gsm8k               4-shot CoT prompt from the first 4 problems of train.jsonl, test
 *                       problems in file order;
 *   bbh                 the task's cot-prompts/<task>.txt (after its "-----" line) + the
 *                       example's "Q: ...\nA: Let's think step by step.", examples in file order. */
#ifndef SKV_EVAL_DATA_H
#define SKV_EVAL_DATA_H
#include <stdbool.h>
#include <stddef.h>
#include "runtime/tokenizer/tokenizer.h"

/* Tokenise text (no special-token parsing), BOS first when bos. *out heap. Count or -1. */
int skv_eval_tokenize(const skv_tokenizer *t, const char *text, size_t len, bool bos, int **out);
/* 0 when data set `set` ("wikitext2", "pg-essays", "multi_news", "gsm8k", "bbh") is under
 * data_dir; else -1 + an error that names the fetch-data.sh command that gets it. */
int skv_eval_need(const char *data_dir, const char *set);
/* Corpus text by name ("wikitext2", "pg-essays", "multi_news") under data_dir. Heap, NULL + error. */
char *skv_eval_corpus(const char *data_dir, const char *name, size_t *len);
/* Document idx of N tokens from a corpus. Count (== N) or -1 + error (corpus too short). */
int skv_eval_document(const skv_tokenizer *t, const char *text, size_t len, int N, int idx, int **out);

/* Passkey: 5-digit key for (length, depth_pct, seed). */
int skv_passkey_key(int length, int depth_pct, unsigned seed);
/* Needle / question phrasings: 0 is the original "pass key" one, 1 "secret code", 2 "locker number". */
#define SKV_PASSKEY_PHRASINGS 3
/* Context of about `length` tokens and the question tokens, in phrasing 0..SKV_PASSKEY_PHRASINGS-1.
 * 0 or -1 + error (a phrasing out of range included). */
int skv_passkey_build(const skv_tokenizer *t, const char *filler, size_t filler_len, int length, int depth_pct,
                      int key, int phrasing, int **ctx, int *n_ctx, int **q, int *n_q);

/* GSM8K: one jsonl line's fields (heap strings). -1 + error. */
int skv_gsm8k_parse(const char *line, size_t len, char **question, char **answer);
/* The few-shot prefix from train.jsonl (first `shots` problems). Heap, NULL + error. */
char *skv_gsm8k_fewshot(const char *train_path, int shots);
/* Test problem i (0-based, file order) of test.jsonl. -1 + error (past the end: 1). */
int skv_gsm8k_item(const char *test_path, int i, char **question, char **gold);
/* Generation stop for gsm8k: a new "Question:" or a finished "The answer is N." */
bool skv_gsm8k_stop(const char *text, void *u);

/* BBH: the task's few-shot prompt (heap) and example i's input and target. -1 + error
 * (past the end: 1). */
char *skv_bbh_prompt(const char *data_dir, const char *task);
int skv_bbh_item(const char *data_dir, const char *task, int i, char **input, char **target);
bool skv_bbh_stop(const char *text, void *u);

/* Few-shot examples as chat turns (lm-eval's --apply_chat_template --fewshot_as_multiturn):
 * `shots` is the plain few-shot text (skv_gsm8k_fewshot, skv_bbh_prompt), each example
 * starting a line with `q_mark` ("Question: ", "Q: ") and its answer after `a_mark`
 * ("\nAnswer:", "\nA: Let's think step by step."). The user turn of an example runs to the end
 * of a_mark, the assistant turn is the rest (trimmed); text before the first example (a
 * task description) opens the first user turn, which `question` (the final user turn, a_mark
 * included) then follows when there are no examples. *contents gets 2k+1 heap strings
 * (user, assistant, ..., the question's user turn): the count, or -1 + error. */
int skv_fewshot_turns(const char *shots, const char *q_mark, const char *a_mark, const char *question,
                      char ***contents);
void skv_fewshot_turns_free(char **contents, int n);

#endif
