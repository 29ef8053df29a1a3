/* unicode_tables.h: code point classes for the tokenizer's pre-tokenizers (\p{L}, \p{N},
 * \s). The range table is generated (runtime/tokenizer/unicode_tables.c, tools/gen_unicode_tables.py). */
#ifndef SKV_UNICODE_TABLES_H
#define SKV_UNICODE_TABLES_H
#include <stdint.h>

typedef struct { uint32_t lo, hi; uint8_t cls; } skv_uni_range;
extern const skv_uni_range skv_uni_ranges[];
extern const int skv_uni_nranges;

enum { SKV_UNI_OTHER = 0, SKV_UNI_LETTER = 1, SKV_UNI_NUMBER = 2 };

/* Class of a code point: SKV_UNI_LETTER, SKV_UNI_NUMBER or SKV_UNI_OTHER. */
int skv_uni_class(uint32_t cp);
/* Unicode White_Space (what \s matches in Oniguruma, used by HF tokenizers). */
int skv_uni_is_space(uint32_t cp);

#endif
