/* unicode_class.c: code point classes (\p{L}, \p{N}, \s) and UTF-8 decode/encode for the
 * tokenizer's pre-tokenizers. The L/N range table is generated (unicode_tables.c). */
#include "unicode_tables.h"
#include "tokenizer_internal.h"

int skv_uni_class(uint32_t cp) {
    if (cp < 128) {
        if ((cp | 32) >= 'a' && (cp | 32) <= 'z') return SKV_UNI_LETTER;
        if (cp >= '0' && cp <= '9') return SKV_UNI_NUMBER;
        return SKV_UNI_OTHER;
    }
    int lo = 0, hi = skv_uni_nranges - 1;       /* binary search over sorted ranges */
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < skv_uni_ranges[mid].lo) hi = mid - 1;
        else if (cp > skv_uni_ranges[mid].hi) lo = mid + 1;
        else return skv_uni_ranges[mid].cls;
    }
    return SKV_UNI_OTHER;
}

int skv_uni_is_space(uint32_t cp) {
    if (cp < 128) return cp == ' ' || (cp >= 9 && cp <= 13);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

int skv_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int need; uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { need = 1; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; v = c & 0x07; min = 0x10000; }
    else { *cp = SKV_CP_INVALID; return 1; }
    if ((size_t)need >= n) { *cp = SKV_CP_INVALID; return 1; }
    for (int i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = SKV_CP_INVALID; return 1; }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { *cp = SKV_CP_INVALID; return 1; }
    *cp = v;
    return need + 1;
}

int skv_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2 byte-level alphabet: printable bytes stand for themselves, the other 68 bytes
 * (0-32, 127-160, 173) map in order to U+0100.. */
static int byte_printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

uint32_t skv_byte_to_unicode(uint8_t b) {
    if (byte_printable(b)) return b;
    unsigned k = 0;                       /* index among non-printable bytes */
    if (b <= 32) k = b;                   /* 0..32 -> 0..32 */
    else if (b <= 160) k = 33 + (b - 127);/* 127..160 -> 33..66 */
    else k = 67;                          /* 173 */
    return 256 + k;
}

int skv_unicode_to_byte(uint32_t cp) {
    if (cp < 256) return byte_printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 67) return 173;
    return -1;
}
