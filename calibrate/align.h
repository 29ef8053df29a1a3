/* align.h: align two tokenizations of the same text by the text itself (cross-tokenizer
 * calibration, docs/calibration.md "Cross-family pairs").
 *
 * Each token covers a byte span of its own decoded stream: tokens are laid end to end, a
 * text token of n bytes advancing the offset by n, a special token (BOS, control tokens)
 * covering zero bytes at the current offset. Two tokens match when their spans are equal
 * (same start, same length) and their bytes are equal; two special tokens match when they
 * sit at the same offset with the same text. Everything else (a word one tokenizer splits
 * and the other does not, bytes of one multi-byte UTF-8 character split across tokens,
 * specials only one side has) stays unmatched.
 *
 * Method: one monotone merge over byte offsets (two pointers, always advancing the token
 * whose span ends first). Spans of a tokenization are strictly ordered and never overlap,
 * so this finds every pair of equal spans: the result equals the longest common subsequence
 * over (span, bytes), in O(na + nb). Two identical token sequences give the identity. */
#ifndef SKV_ALIGN_H
#define SKV_ALIGN_H
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *bytes;   /* the token's decoded bytes (any bytes, not necessarily UTF-8) */
    size_t len;
    bool special;        /* zero-width: BOS and other control tokens */
} skv_align_tok;

/* Matched pairs in ascending order into a_pos[k], b_pos[k] (room for min(na, nb)); returns
 * their number (0 for empty inputs), -1 + error on bad arguments. */
int skv_align(const skv_align_tok *a, int na, const skv_align_tok *b, int nb, int *a_pos, int *b_pos);

#endif
